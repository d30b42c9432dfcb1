//! The compaction flow on an [`Agent`], called before model calls and by `session_compact`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{COMPACTION_PROMPT, Pruned, clean_turn_starts, due, prune, rebuild_history, recollect, summarized_len};
use crate::agent::model_call::{Interruption, Response, Trigger};
use crate::agent::{Agent, AgentEvent, EventSink};
use crate::hooks::{HookEvent, HookEventKind};
use crate::llm::{ContentBlock, Message, Role, ToolChoice, Usage};
use crate::model::context::{estimate_message, estimate_text};

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// The history was rewritten (pruned, summarized, or both).
    pub compacted: bool,
    pub summarized: bool,
    pub pruned: Pruned,
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// Tokens of the summary call, already counted in the session's usage and budget.
    pub usage: Usage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done(Report),
    /// The turn was interrupted during the summary call.
    Cancelled,
}

impl Agent {
    /// Runs the compaction flow if `trigger` calls for it. Failures are not fatal: they are
    /// reported as a `CompactionFailed` event and the history stays as it was.
    pub(in crate::agent) async fn compact(
        &mut self,
        trigger: Trigger,
        cancel: &CancellationToken,
        events: &EventSink,
    ) -> Outcome {
        let settings = self.context_settings;
        let tokens_before = self.estimated_history_tokens();
        let mut report = Report { tokens_before, tokens_after: tokens_before, ..Report::default() };
        if trigger == Trigger::Threshold && !due(&settings, &self.context, self.turns, tokens_before) {
            return Outcome::Done(report);
        }
        // The summary call would spend budget the session no longer has.
        if self.history.is_empty() || self.budget.exhausted(&self.used).is_some() {
            return Outcome::Done(report);
        }
        if self.hooks.listens(HookEventKind::CompactionStart) {
            let event = HookEvent {
                trigger: Some(trigger.as_str().to_owned()),
                ..HookEvent::new(HookEventKind::CompactionStart, &self.session_id, Some(self.turns))
            };
            let verdict = self.hooks.run(event, cancel).await;
            if verdict.interrupted {
                return Outcome::Cancelled;
            }
            if let Some(reason) = verdict.denied {
                tracing::info!(session_id = %self.session_id, %reason, "a compaction_start hook skipped the compaction");
                return Outcome::Done(report);
            }
        }
        events.emit(AgentEvent::CompactionStarted {
            reason: trigger.as_str().to_owned(),
            estimated_tokens: tokens_before,
        });
        // The turn in progress is always kept: from the message holding its prompt.
        let keep_from = if self.turn_running { self.turn_prompt_index } else { self.history.len() };

        // Stage 1: prune old tool results.
        report.pruned = prune(self.rewrite_history(), settings.prune_protect_tokens);
        if report.pruned.results > 0 {
            events.emit(AgentEvent::Pruned {
                results: report.pruned.results,
                tokens_freed: report.pruned.tokens_freed,
            });
            self.history_rewritten();
            report.compacted = true;
            let after = self.estimated_history_tokens();
            if trigger != Trigger::Manual && after < settings.threshold_tokens {
                return Outcome::Done(self.finish(report, false, events));
            }
        }

        // Stage 2: summarize. A delegated child's summary is a model call like its others:
        // bounded by its carve before it is made (security review 2, G9), or not made at all.
        let allowance = match self.call_allowance() {
            Ok(allowance) => allowance,
            Err(_) => {
                let error = "this delegated session's budget cannot hold the summary call's input".to_owned();
                return Outcome::Done(self.summary_failed(report, error, events));
            }
        };
        // The session's own request, tools declared but not callable: a history holding tool
        // calls stays valid on every wire, and the whole prefix is a prompt-cache hit.
        let mut request = self.model_request();
        request.tool_choice = ToolChoice::Forbidden;
        // The summary is prose, whatever the turn's answer must be.
        request.output = None;
        request.max_tokens =
            allowance.map_or(settings.max_summary_tokens, |cap| cap.min(settings.max_summary_tokens));
        let prompt = ContentBlock::Text { text: COMPACTION_PROMPT.to_owned() };
        // The summary call's own messages: a copy of the history, which stays as it is. The
        // copy is written whole: what the wire kept is the history's.
        request.encoded = Arc::default();
        let messages = Arc::make_mut(&mut request.messages);
        match messages.last_mut() {
            Some(last) if last.role == Role::User => last.content.push(prompt),
            _ => messages.push(Message { role: Role::User, content: vec![prompt] }),
        }
        // The summary call must fit the window itself: the oldest turns go first.
        let system = request.system.as_deref().map_or(0, estimate_text);
        let room = settings.context_window.saturating_sub(u64::from(settings.max_summary_tokens) + system);
        let dropped = drop_oldest_turns(messages, room);
        if dropped > 0 {
            tracing::info!(dropped, "oldest messages left out of the summary call to fit the window");
        }
        let mut response = Response::default();
        let result = self.stream_response(request, cancel, &EventSink::default(), &mut response).await;
        report.usage = response.total_usage();
        self.charge(&report.usage);
        let summary = response.text();
        let failure = match result {
            Err(Interruption::Cancelled) => return Outcome::Cancelled,
            Err(Interruption::Failed(error)) => Some(error.message),
            Ok(_) if summary.trim().is_empty() => Some("the model returned an empty summary".to_owned()),
            Ok(_) => None,
        };
        if let Some(error) = failure {
            return Outcome::Done(self.summary_failed(report, error, events));
        }

        // What the summary takes out of the context stays findable: `memory_search`.
        let replaced = summarized_len(&self.history, settings.recent_turn_budget, keep_from);
        let starts_after = clean_turn_starts(&self.history[replaced..]).len();
        self.recollections.extend(recollect(&self.history[..replaced], self.turns, starts_after));
        let rebuilt = rebuild_history(&self.history, summary.trim(), settings.recent_turn_budget, keep_from);
        if self.turn_running {
            // The prompt of the turn in progress now sits in the message that opens the kept part.
            let kept_after_prompt = self.history.len() - keep_from.min(self.history.len());
            self.turn_prompt_index = rebuilt.len().saturating_sub(kept_after_prompt);
        }
        self.history = Arc::new(rebuilt);
        self.encoded_history = Arc::default();
        self.history_rewritten();
        report.compacted = true;
        Outcome::Done(self.finish(report, true, events))
    }

    /// The history was rewritten: a new epoch (the store moves the old one to `discarded`),
    /// saved whole, estimated until the next response.
    fn history_rewritten(&mut self) {
        self.history_epoch += 1;
        self.unsaved_from = 0;
        self.context.history_rewritten();
    }

    /// No summary: the history keeps what pruning made of it, if anything.
    fn summary_failed(&mut self, mut report: Report, error: String, events: &EventSink) -> Report {
        tracing::warn!(model = %self.model_id, "compaction failed: {error}");
        events.emit(AgentEvent::CompactionFailed { error });
        report.tokens_after = self.estimated_history_tokens();
        if report.compacted {
            return self.finish(report, false, events);
        }
        report
    }

    fn finish(&mut self, mut report: Report, summarized: bool, events: &EventSink) -> Report {
        report.summarized = summarized;
        report.tokens_after = self.estimated_history_tokens();
        self.context.last_compaction_turn = Some(self.turns);
        self.context.compactions += 1;
        events.emit(AgentEvent::CompactionCompleted {
            tokens_before: report.tokens_before,
            tokens_after: report.tokens_after,
            summarized,
        });
        report
    }
}

impl Agent {
    /// `session_compact`: compacts now, whatever the thresholds say.
    pub async fn compact_now(&mut self, cancel: &CancellationToken, events: &EventSink) -> Outcome {
        self.compact(Trigger::Manual, cancel, events).await
    }
}

/// Drops whole turns from the front of `messages` (cutting only at clean turn starts, so no
/// tool pair is split) until they fit in `room` tokens or only the last turn is left. Returns
/// how many messages were dropped.
fn drop_oldest_turns(messages: &mut Vec<Message>, room: u64) -> usize {
    let total: u64 = messages.iter().map(estimate_message).sum();
    if total <= room {
        return 0;
    }
    let mut excess = total - room;
    let mut cut = 0;
    for start in clean_turn_starts(messages).into_iter().skip(1) {
        let dropped: u64 = messages[cut..start].iter().map(estimate_message).sum();
        cut = start;
        if dropped >= excess {
            break;
        }
        excess -= dropped;
    }
    messages.drain(..cut);
    cut
}
