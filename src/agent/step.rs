//! One step's tool calls: run them, hold the ones the caller must answer, and close the step.
//!
//! A model response that asks for tools opens a step. Calls that need the caller (callbacks,
//! approvals) hold the step open in `Agent::pending` and end the turn; the others run
//! concurrently within the tool-call budget, at most [`MAX_CONCURRENT_TOOL_CALLS`] at a time. Once nothing waits, every result enters the
//! history as one user message in call order, so each `tool_use` is answered right after it.
//! [`super::pending`] validates the caller's answers; this file applies them.

use tokio_util::sync::CancellationToken;

use super::context::cap_tool_output;
use super::pending::{Resolution, Settlement};
use super::report::{StepOutcome, TurnTotals};
use super::{Agent, AgentEvent, EventSink};
use crate::hooks::{HookEvent, HookEventKind, HookToolResult};
use crate::llm::{ContentBlock, Message, Role};
use crate::model::{CallState, PendingCall, PendingKind, PendingStep, StepCall};
use crate::tools::ToolOutput;

/// How many calls of one step run at once (each with its hooks): one model response of 400
/// calls must not fork 400 hook processes and tools together (security review 2, G2). The
/// rest wait their turn, in order.
pub const MAX_CONCURRENT_TOOL_CALLS: usize = 8;

/// The tool calls of a model response, in order, each as a call to run whose output is still to
/// come (`Done` and empty until `execute` fills it in); [`Agent::run_tools`] holds the ones the
/// caller must answer.
pub(super) fn step_calls(blocks: &[ContentBlock]) -> Vec<StepCall> {
    blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(StepCall {
                tool_use_id: id.clone(),
                name: name.clone(),
                arguments: input.clone(),
                state: CallState::Done { content: String::new(), is_error: false },
            }),
            _ => None,
        })
        .collect()
}

impl Agent {
    /// Runs a step's tool calls: callbacks and calls needing approval are held for the caller,
    /// the others run concurrently within the tool-call budget. Once nothing waits, the
    /// results enter the history as one user message, in call order.
    pub(super) async fn run_tools(
        &mut self,
        mut step: Vec<StepCall>,
        cancel: &CancellationToken,
        events: &EventSink,
        totals: &mut TurnTotals,
    ) -> StepOutcome {
        let mut to_run = Vec::new();
        for (index, call) in step.iter_mut().enumerate() {
            events.emit(AgentEvent::ToolCallRequested {
                id: call.tool_use_id.clone(),
                name: call.name.clone(),
                input: call.arguments.clone(),
            });
            if self.tool_config.approval.requires(&call.name) {
                call.state = CallState::Waiting { kind: PendingKind::Approval };
            } else if self.tools.is_callback(&call.name) {
                call.state = CallState::Waiting { kind: PendingKind::Callback };
            } else {
                to_run.push(index);
            }
        }
        let skipped = self.execute(&mut step, to_run, cancel, totals).await;
        self.finish_step(step, skipped, cancel, events)
    }

    /// Applies the caller's answers to a held step: results and denials become outputs,
    /// approved calls run (an approved callback goes on waiting, now for its result).
    pub(super) async fn settle(
        &mut self,
        step: PendingStep,
        mut resolution: Resolution,
        cancel: &CancellationToken,
        events: &EventSink,
        totals: &mut TurnTotals,
    ) -> StepOutcome {
        let mut calls = step.calls;
        let mut to_run = Vec::new();
        for (index, call) in calls.iter_mut().enumerate() {
            let CallState::Waiting { kind } = call.state else { continue };
            let output = match resolution.settled.remove(&call.tool_use_id) {
                Some(Settlement::Result(output)) => output,
                Some(Settlement::Deny(why)) => ToolOutput::error(why),
                Some(Settlement::Allow) if kind == PendingKind::Approval && self.tools.is_callback(&call.name) => {
                    call.state = CallState::Waiting { kind: PendingKind::Callback };
                    continue;
                }
                Some(Settlement::Allow) => {
                    to_run.push(index);
                    continue;
                }
                // Validation answers every waiting call; a gap still closes the step validly.
                None => ToolOutput::error("not run: the caller did not answer this call"),
            };
            call.state = CallState::Done { content: output.content, is_error: output.is_error };
        }
        let skipped = self.execute(&mut calls, to_run, cancel, totals).await;
        self.finish_step(calls, skipped, cancel, events)
    }

    /// Runs the calls at `indices` of a step concurrently (at most [`MAX_CONCURRENT_TOOL_CALLS`]
    /// at a time), within the tool-call budget, and
    /// stores their outputs. Returns how many were skipped for lack of budget.
    async fn execute(
        &mut self,
        step: &mut [StepCall],
        indices: Vec<usize>,
        cancel: &CancellationToken,
        totals: &mut TurnTotals,
    ) -> u64 {
        // A `delegate` call among them carves from what is left after this.
        self.ledger.observe(self.used);
        let allowed = self.budget.remaining_tool_calls(&self.charged_consumption()).unwrap_or(u64::MAX);
        let allowed = usize::try_from(allowed).unwrap_or(usize::MAX).min(indices.len());
        let (run, skip) = indices.split_at(allowed);
        // A fair semaphore: calls start in order, at most MAX_CONCURRENT_TOOL_CALLS at once.
        let slots = tokio::sync::Semaphore::new(MAX_CONCURRENT_TOOL_CALLS);
        let this = &*self;
        let runs = run.iter().map(|&index| {
            let call = &step[index];
            let slots = &slots;
            async move {
                // The semaphore is never closed, so acquiring only waits.
                let _slot = slots.acquire().await.ok();
                this.call_hooked(call, cancel).await
            }
        });
        let outputs = futures::future::join_all(runs).await;
        let ran = run.len() as u64;
        self.used.tool_calls += ran;
        totals.tool_calls += ran;
        self.report_spend();
        let skipped_output = || ToolOutput::error("not run: the session's tool-call budget is exhausted");
        for (&index, output) in run.iter().zip(outputs).chain(skip.iter().map(|index| (index, skipped_output()))) {
            let call = &mut step[index];
            call.state = CallState::Done { content: output.content, is_error: output.is_error };
        }
        skip.len() as u64
    }

    /// Runs one call between its `pre_tool_use` and `post_tool_use` hooks, in the call's own
    /// future, so the hooks of a step's calls run concurrently like the calls. A `deny` before
    /// the call answers the model "denied by hook: <reason>" and the tool never runs; `modify`
    /// runs it with the hook's arguments (the history keeps the model's own `tool_use` input).
    /// After the call, `deny` withholds the result the same way and `modify` replaces it with
    /// `updated_result`. Either event's `additional_context` is appended to the result.
    async fn call_hooked(&self, call: &StepCall, cancel: &CancellationToken) -> ToolOutput {
        let mut arguments = call.arguments.clone();
        let mut context = Vec::new();
        if self.hooks.listens(HookEventKind::PreToolUse) {
            let event = self.tool_event(HookEventKind::PreToolUse, call, &arguments, None);
            let verdict = self.hooks.run(event, cancel).await;
            if verdict.interrupted {
                return ToolOutput::error("not run: [interrupted]");
            }
            if let Some(reason) = verdict.denied {
                return ToolOutput::error(format!("denied by hook: {reason}"));
            }
            if let Some(updated) = verdict.arguments {
                arguments = updated;
            }
            context = verdict.context;
        }
        // The tool takes the arguments; a post_tool_use hook is shown them too, from a copy.
        let (input, shown) = if self.hooks.listens(HookEventKind::PostToolUse) {
            (arguments.clone(), Some(arguments))
        } else {
            (arguments, None)
        };
        let mut output = self.tools.call(&call.name, input, cancel.clone()).await;
        if let Some(arguments) = shown {
            let event = self.tool_event(HookEventKind::PostToolUse, call, &arguments, Some(&output));
            let verdict = self.hooks.run(event, cancel).await;
            // Interrupted: the tool ran, and its own result stands.
            if !verdict.interrupted {
                if let Some(reason) = verdict.denied {
                    return ToolOutput::error(format!("denied by hook: {reason}"));
                }
                if let Some(content) = verdict.result {
                    output.content = content;
                }
                context.extend(verdict.context);
            }
        }
        for context in context {
            output.content.push_str("\n\n");
            output.content.push_str(&context);
        }
        output
    }

    fn tool_event(
        &self,
        kind: HookEventKind,
        call: &StepCall,
        arguments: &serde_json::Value,
        output: Option<&ToolOutput>,
    ) -> HookEvent {
        HookEvent {
            tool_name: Some(call.name.clone()),
            tool_use_id: Some(call.tool_use_id.clone()),
            arguments: Some(arguments.clone()),
            result: output
                .map(|output| HookToolResult { content: output.content.clone(), is_error: output.is_error }),
            ..HookEvent::new(kind, &self.session_id, Some(self.turns))
        }
    }

    /// Holds the step if calls still wait (unless the turn was interrupted: they then get a
    /// synthetic result), else appends its results to the history.
    fn finish_step(
        &mut self,
        step: Vec<StepCall>,
        skipped: u64,
        cancel: &CancellationToken,
        events: &EventSink,
    ) -> StepOutcome {
        let waiting = step.iter().any(|call| matches!(call.state, CallState::Waiting { .. }));
        if waiting && !cancel.is_cancelled() {
            self.pending = Some(PendingStep { calls: step, since: chrono::Utc::now() });
            return StepOutcome::Held;
        }
        let mut results = Vec::with_capacity(step.len());
        for call in step {
            let (content, is_error) = match call.state {
                CallState::Done { content, is_error } => (content, is_error),
                CallState::Waiting { .. } => ("not run: [interrupted]".to_owned(), true),
            };
            let id = call.tool_use_id;
            // Stage 0: a huge output enters the history as head + tail; the whole of it is kept.
            let (content, full) = cap_tool_output(content, self.context_settings.tool_output_cap_bytes, &id);
            if let Some(full) = full {
                self.full_outputs
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(id.clone(), full);
                self.unsaved_outputs.push(id.clone());
            }
            events.emit(AgentEvent::ToolResult {
                id: id.clone(),
                name: call.name,
                content: content.clone(),
                is_error,
            });
            results.push(ContentBlock::ToolResult { tool_use_id: id, content, is_error });
        }
        self.history_mut().push(Message { role: Role::User, content: results });
        StepOutcome::Closed { skipped }
    }

    /// The calls of the held step still waiting for the caller.
    pub fn pending_calls(&self) -> Vec<PendingCall> {
        self.pending.as_ref().map(|step| step.waiting(self.tool_config.approval_timeout_ms)).unwrap_or_default()
    }
}
