//! One turn of the agent loop.
//!
//! prompt → model stream → tool calls (all calls of a step run concurrently) → results →
//! next model call, until the model answers without tools, the caller cancels, a limit of the
//! [`Budget`](crate::model::Budget) is reached, or the provider fails.
//!
//! Invariant: whatever way a turn ends, the history stays valid for the next turn. The user
//! prompt and every completed step are kept; partial text of an interrupted response is kept
//! and marked; every tool call gets a result (a synthetic one if it never ran). The one
//! exception is a step held for the caller ([`super::pending`]): the turn ends with the step
//! open, and the next turn closes it before any model call.

use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::model_call::{Interruption, Response, Trigger, compact_blocks};
use super::report::{StepOutcome, TurnEnd, TurnInput, TurnReport, TurnTotals};
use super::step::step_calls;
use super::structured::Verdict;
use super::{Agent, AgentEvent, EventSink};
use crate::hooks::{HookEvent, HookEventKind};
use crate::llm;
use crate::llm::pricing::Usd;
use crate::llm::{ContentBlock, LlmErrorKind, Message, Role, Usage};
use crate::model::Exhausted;
use crate::model::inbox::{InboxMessage, MessageSender};
use crate::telemetry::otlp;
use crate::telemetry::spans::{self, ChatOutcome};

impl Agent {
    /// Runs one turn. Never panics on provider or tool failure: every ending is a [`TurnEnd`].
    pub async fn run_turn(
        &mut self,
        input: impl Into<TurnInput>,
        cancel: CancellationToken,
        events: &EventSink,
    ) -> TurnReport {
        let input = input.into();
        let started = Instant::now();
        let cost_before = self.used.cost;
        self.turns += 1;
        let turn = self.turns;
        events.emit(AgentEvent::TurnStarted { turn });
        if let Some(mailbox) = &self.mailbox {
            mailbox.begin_turn();
        }
        self.turn_running = true;
        self.turn_output = input.output.clone().or_else(|| self.structured.clone());
        self.refresh_instructions();

        // The time budget is one more reason to cancel the steps; a child token lets the
        // steps clean up the same way as for an interrupt.
        let steps_cancel = cancel.child_token();
        let deadline = self.budget.remaining_time(&self.used).map(|left| {
            let token = steps_cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(left).await;
                token.cancel();
            })
        });

        let mut totals = TurnTotals::default();
        let span = spans::turn(self.session_id.as_str(), turn, &self.model);
        otlp::continue_trace(&span, input.trace.as_ref());
        let end = if let Some(exhausted) = self.refuses_prompts() {
            // Nothing could answer the prompt: it never enters the history (security review 2, G4).
            TurnEnd::BudgetExhausted(exhausted)
        } else {
            let steps = async {
                let context = self.turn_start_context(&input, &steps_cancel).await;
                match self.start_steps(input, context, &steps_cancel, events, &mut totals).await {
                    Ok(end) => end,
                    Err(Interruption::Cancelled) if cancel.is_cancelled() => TurnEnd::Cancelled,
                    Err(Interruption::Cancelled) => TurnEnd::BudgetExhausted(Exhausted::Duration),
                    Err(Interruption::Failed(error)) => TurnEnd::Failed(error),
                }
            };
            steps.instrument(span.clone()).await
        };
        if let Some(deadline) = deadline {
            deadline.abort();
        }
        self.turn_running = false;
        self.turn_output = None;
        self.used.active += started.elapsed();

        if self.delegated && !matches!(end, TurnEnd::PendingToolCalls) {
            self.close_delegated_budget();
        }
        let report = TurnReport {
            turn,
            text: totals.text,
            reasoning: totals.reasoning,
            usage: totals.usage,
            cost: self.cost().map(|spent| spent.saturating_sub(cost_before)),
            tool_calls: totals.tool_calls,
            end,
            pending: self.pending_calls(),
            structured_output: totals.structured_output,
            structured_output_errors: totals.structured_output_errors,
        };
        spans::turn_ended(&span, report.end.telemetry_status(), report.cost.map(Usd::dollars));
        if self.hooks.listens(HookEventKind::TurnEnd) {
            let event = HookEvent {
                stop_reason: Some(report.stop_reason().to_string()),
                ..HookEvent::new(HookEventKind::TurnEnd, &self.session_id, Some(turn))
            };
            self.hooks.observe(event).await;
        }
        events.emit(match &report.end {
            TurnEnd::Cancelled => AgentEvent::TurnCancelled { turn },
            TurnEnd::Failed(error) => AgentEvent::TurnFailed { turn, error: error.message.clone() },
            TurnEnd::Panicked(message) => AgentEvent::TurnFailed { turn, error: message.clone() },
            TurnEnd::Completed { .. } | TurnEnd::BudgetExhausted(_) | TurnEnd::PendingToolCalls => {
                AgentEvent::TurnCompleted { turn, stop_reason: report.stop_reason() }
            }
        });
        report
    }

    /// Ends turn `turn` after its future panicked, so the session goes on: a tool call left
    /// without a result gets a synthetic one (as an interrupted turn's would), so the history
    /// stays valid for the next turn, and the turn reports `failed` with `message`.
    pub fn end_panicked_turn(&mut self, turn: u64, message: String, events: &EventSink) -> TurnReport {
        self.turns = self.turns.max(turn);
        self.turn_running = false;
        self.turn_output = None;
        // A held step legitimately ends the history with its tool_use; anything else open is
        // a step the panic cut short.
        if self.pending.is_none()
            && let Some(last) = self.history.last()
            && last.role == Role::Assistant
        {
            let results: Vec<ContentBlock> = last
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolUse { id, .. } => Some(ContentBlock::ToolResult {
                        tool_use_id: id.clone(),
                        content: "not run: [the turn failed: internal error]".to_owned(),
                        is_error: true,
                    }),
                    _ => None,
                })
                .collect();
            if !results.is_empty() {
                self.history_mut().push(Message { role: Role::User, content: results });
            }
        }
        events.emit(AgentEvent::TurnFailed { turn, error: message.clone() });
        // The turn's own span ended with its future; this one counts how the turn ended.
        spans::turn_ended(&spans::turn(self.session_id.as_str(), turn, &self.model), "failed", None);
        TurnReport {
            turn,
            text: String::new(),
            reasoning: String::new(),
            usage: Usage::default(),
            cost: self.cost().map(|_| crate::llm::pricing::Usd::ZERO),
            tool_calls: 0,
            end: TurnEnd::Panicked(message),
            pending: self.pending_calls(),
            structured_output: None,
            structured_output_errors: Vec::new(),
        }
    }

    /// Whether a turn starting now ends at once, its budget spent, and which limit: no step is
    /// held (a held step's answers still close it) and a limit is reached, so no model call
    /// could be made. Such a turn leaves the history, the inbox and the journal's prompt alone,
    /// so a spent session cannot be grown by prompts (security review 2, G4).
    pub fn refuses_prompts(&self) -> Option<Exhausted> {
        if self.pending.is_some() {
            return None;
        }
        self.budget.exhausted(&self.charged_consumption())
    }

    /// Appends the prompt as a message of its own, even after a user message (tool results, or
    /// a prompt whose turn produced no answer): a save then only appends, never rewrites what
    /// is stored (security review 2, G4: prompts into a failing session rewrote an ever-growing
    /// last message). Each wire merges runs of one role when it sends them
    /// ([`crate::llm::conform`]), so providers still see roles alternate.
    fn push_user_prompt(&mut self, prompt: String) {
        let block = ContentBlock::Text { text: prompt };
        self.history_mut().push(Message { role: Role::User, content: vec![block] });
        self.turn_prompt_index = self.history.len() - 1;
    }

    /// Runs the `turn_start` hooks: the `additional_context` they give, in order. Their other
    /// answers are only logged (a turn is not refused by a hook).
    async fn turn_start_context(&self, input: &TurnInput, cancel: &CancellationToken) -> Vec<String> {
        if !self.hooks.listens(HookEventKind::TurnStart) {
            return Vec::new();
        }
        let event = HookEvent {
            prompt: input.prompt.clone(),
            ..HookEvent::new(HookEventKind::TurnStart, &self.session_id, Some(self.turns))
        };
        let verdict = self.hooks.run(event, cancel).await;
        if verdict.interrupted {
            return Vec::new();
        }
        if let Some(reason) = verdict.denied {
            tracing::warn!(session_id = %self.session_id, %reason, "a turn_start hook denied; turn_start hooks only add context");
        }
        verdict.context
    }

    /// Adds the `turn_start` hooks' context to the history's last message (the turn's prompt),
    /// each as a text block of its own.
    fn push_hook_context(&mut self, context: Vec<String>) {
        if context.is_empty() {
            return;
        }
        let last_index = self.history.len().saturating_sub(1);
        if let Some(last) = self.history_mut().last_mut()
            && last.role == Role::User
        {
            last.content.extend(context.into_iter().map(|text| ContentBlock::Text { text }));
            self.unsaved_from = self.unsaved_from.min(last_index);
        }
    }

    /// Closes a held step with the caller's answers (or appends the prompt and the hooks'
    /// context), then runs the loop.
    async fn start_steps(
        &mut self,
        input: TurnInput,
        context: Vec<String>,
        cancel: &CancellationToken,
        events: &EventSink,
        totals: &mut TurnTotals,
    ) -> Result<TurnEnd, Interruption> {
        let prompt = input.prompt.filter(|prompt| !prompt.trim().is_empty());
        let Some(step) = self.pending.take() else {
            let prompt = self.with_mail(prompt, events);
            self.push_user_prompt(prompt.unwrap_or_default());
            self.push_hook_context(context);
            return self.run_steps(cancel, events, totals).await;
        };
        let outcome = self.settle(step, input.resolution, cancel, events, totals).await;
        let StepOutcome::Closed { skipped } = outcome else {
            return Ok(TurnEnd::PendingToolCalls);
        };
        // The results message holds this turn's start, with the prompt joined to it.
        self.turn_prompt_index = self.history.len().saturating_sub(1);
        if let Some(prompt) = self.with_mail(prompt, events) {
            self.push_user_prompt(prompt);
        }
        self.push_hook_context(context);
        if cancel.is_cancelled() {
            return Err(Interruption::Cancelled);
        }
        if skipped > 0 {
            return Ok(TurnEnd::BudgetExhausted(Exhausted::ToolCalls));
        }
        self.run_steps(cancel, events, totals).await
    }

    async fn run_steps(
        &mut self,
        cancel: &CancellationToken,
        events: &EventSink,
        totals: &mut TurnTotals,
    ) -> Result<TurnEnd, Interruption> {
        let mut overflow_compacted = false;
        // Answers that did not validate against the turn's output schema so far.
        let mut rejected = 0;
        loop {
            if let Some(exhausted) = self.budget.exhausted(&self.charged_consumption()) {
                return Ok(TurnEnd::BudgetExhausted(exhausted));
            }
            self.before_model_call(Trigger::Threshold, cancel, events, totals).await?;
            // A child's carve bounds its call before it is made, the first one too.
            let output_cap = match self.call_allowance() {
                Ok(cap) => cap,
                Err(exhausted) => return Ok(TurnEnd::BudgetExhausted(exhausted)),
            };
            let mut request = self.model_request();
            if let Some(cap) = output_cap {
                request.max_tokens = request.max_tokens.min(cap);
            }
            let mut response = Response::default();
            let call = spans::chat(self.provider_name(), &self.model);
            let outcome =
                self.stream_response(request, cancel, events, &mut response).instrument(call.clone()).await;
            let usage = response.total_usage();
            self.record_usage(&usage, totals, events);
            spans::chat_ended(
                &call,
                &ChatOutcome {
                    input_tokens: usage.prompt_tokens(),
                    output_tokens: usage.output_tokens,
                    cache_read_tokens: usage.cache_read_input_tokens,
                    cache_creation_tokens: usage.cache_creation_input_tokens,
                    cost_usd: self.cost_of(&usage).map(Usd::dollars),
                    finish_reason: outcome.as_ref().ok().map(llm::StopReason::as_str),
                    error: outcome.as_ref().err().map(Interruption::telemetry_kind),
                },
            );
            drop(call);
            // A prompt too long for the model: compact once and send it again, never more.
            if let Err(Interruption::Failed(error)) = &outcome
                && error.kind == LlmErrorKind::ContextOverflow
                && response.blocks.is_empty()
                && !overflow_compacted
                && cfg!(feature = "session-compaction")
            {
                overflow_compacted = true;
                if self.before_model_call(Trigger::Overflow, cancel, events, totals).await? {
                    continue;
                }
            }
            let text = response.text();
            if !text.is_empty() {
                totals.text.clone_from(&text);
                totals.reasoning = response.reasoning();
            }

            let stop_reason = match outcome {
                Ok(stop_reason) => stop_reason,
                Err(interruption) => {
                    self.close_interrupted_response(response, &interruption);
                    return Err(interruption);
                }
            };

            let calls = step_calls(&response.blocks);
            if !response.blocks.is_empty() {
                self.history_mut().push(Message::assistant(compact_blocks(response.blocks)));
            }
            if response.usage != Usage::default() {
                self.context.measured(&response.usage, self.history.len());
            }
            let calls = match self.turn_output.clone() {
                // Structured output: a final answer (tool call or text) is judged, anything
                // else is a step like any other.
                Some(contract) => match self.judge_answer(&contract, calls, &text, totals, &mut rejected, events) {
                    Verdict::RunTools(calls) => calls,
                    Verdict::End(end) => return Ok(end),
                    Verdict::Retry => continue,
                },
                None => calls,
            };
            if calls.is_empty() {
                return Ok(TurnEnd::Completed { stop_reason: stop_reason.into() });
            }

            let StepOutcome::Closed { skipped } = self.run_tools(calls, cancel, events, totals).await else {
                return Ok(TurnEnd::PendingToolCalls);
            };
            if cancel.is_cancelled() {
                return Err(Interruption::Cancelled);
            }
            if skipped > 0 {
                return Ok(TurnEnd::BudgetExhausted(Exhausted::ToolCalls));
            }
            self.deliver_mail_between_steps(events);
        }
    }

    /// The turn's prompt with the inbox's waiting mail in front of it (delivery at a turn's
    /// start). `None` when there is neither.
    fn with_mail(&mut self, prompt: Option<String>, events: &EventSink) -> Option<String> {
        let mail = self.mailbox.as_ref().map(|mailbox| mailbox.take()).unwrap_or_default();
        if mail.is_empty() {
            return prompt;
        }
        self.settle_children(&mail);
        let text = InboxMessage::render_all(&mail);
        events.emit(AgentEvent::InboxDelivered { messages: mail });
        Some(match prompt {
            Some(prompt) => format!("{text}\n\n{prompt}"),
            None => text,
        })
    }

    /// Mail that arrived while a step ran joins the step's tool results (results first, then
    /// text, which every provider accepts), so the next model call sees it.
    fn deliver_mail_between_steps(&mut self, events: &EventSink) {
        let Some(mailbox) = &self.mailbox else { return };
        let mail = mailbox.take();
        if mail.is_empty() {
            return;
        }
        self.settle_children(&mail);
        let block = ContentBlock::Text { text: InboxMessage::render_all(&mail) };
        let history = self.history_mut();
        match history.last_mut() {
            Some(last) if last.role == Role::User => last.content.push(block),
            _ => history.push(Message { role: Role::User, content: vec![block] }),
        }
        events.emit(AgentEvent::InboxDelivered { messages: mail });
    }

    /// Children's results that arrived as mail reach the parent now: their holds become what
    /// they used (see [`super::delegation`]).
    fn settle_children(&self, mail: &[InboxMessage]) {
        for message in mail {
            if let (Some(used), MessageSender::Session { session_id, .. }) = (message.report, &message.from) {
                self.ledger.settle(session_id, used);
            }
        }
    }
}
