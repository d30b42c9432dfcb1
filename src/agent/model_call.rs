//! One model call of a turn: the request (the shared history and tools), the compaction check
//! before it, the streamed response gathered into blocks, its usage charged, and a response
//! cut short closed so the history stays valid.

use std::sync::Arc;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::report::TurnTotals;
use super::{Agent, AgentEvent, EventSink};
use crate::llm::{
    self as llm, ContentBlock, LlmError, LlmErrorKind, Message, ModelRequest, Role, StreamEvent, Usage,
};

/// What asks for a compaction check before a model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The regular check: compacts when a threshold rule says so.
    Threshold,
    /// The provider said the prompt is too long: compact now, whatever the rules say.
    Overflow,
    /// The caller asked (`session_compact`).
    Manual,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Threshold => "threshold",
            Self::Overflow => "overflow",
            Self::Manual => "manual",
        }
    }
}

/// Why a step stopped before the model finished.
pub(super) enum Interruption {
    /// The turn's token fired: the caller's interrupt, or the time budget.
    Cancelled,
    Failed(LlmError),
}

impl Interruption {
    /// What a model call's telemetry span says of its failure.
    pub(super) fn telemetry_kind(&self) -> &'static str {
        match self {
            Self::Cancelled => "cancelled",
            Self::Failed(error) => crate::error::ErrorKind::from(error.kind).into(),
        }
    }
}

/// What one model response has produced so far.
#[derive(Default)]
pub(super) struct Response {
    pub(super) blocks: Vec<ContentBlock>,
    /// The usage of the current attempt (cumulative within it, as the stream reports it).
    pub(super) usage: Usage,
    /// The usage of attempts that broke and were sent again: spent all the same.
    pub(super) discarded_usage: Usage,
}

impl Response {
    /// A broken attempt is being sent again: drop what it produced, keep what it cost.
    pub(super) fn restart(&mut self) {
        self.blocks.clear();
        self.discarded_usage.add(&std::mem::take(&mut self.usage));
    }

    /// Everything this response cost, restarted attempts included.
    pub(super) fn total_usage(&self) -> Usage {
        let mut total = self.discarded_usage;
        total.add(&self.usage);
        total
    }

    pub(super) fn push_text(&mut self, delta: &str) {
        if let Some(ContentBlock::Text { text }) = self.blocks.last_mut() {
            text.push_str(delta);
        } else {
            self.blocks.push(ContentBlock::Text { text: delta.to_owned() });
        }
    }

    pub(super) fn text(&self) -> String {
        Message::assistant(self.blocks.clone()).text()
    }

    /// The readable reasoning of the response, its blocks joined by blank lines.
    pub(super) fn reasoning(&self) -> String {
        let texts: Vec<&str> = self.blocks.iter().filter_map(ContentBlock::reasoning_text).collect();
        texts.join("\n\n")
    }
}

/// Streamed text grows by doubling; the history keeps each answer for the session's life, so
/// it keeps it without the slack (up to half again its size).
pub(super) fn compact_blocks(mut blocks: Vec<ContentBlock>) -> Vec<ContentBlock> {
    for block in &mut blocks {
        if let ContentBlock::Text { text } = block {
            text.shrink_to_fit();
        }
    }
    blocks.shrink_to_fit();
    blocks
}

impl Agent {
    /// The request for the next model call: the whole history and every tool, shared with the
    /// agent rather than copied.
    pub(super) fn model_request(&self) -> ModelRequest {
        ModelRequest {
            model: self.model.clone(),
            system: self.system.clone(),
            messages: Arc::clone(&self.history),
            tools: Arc::clone(&self.tool_specs),
            tool_choice: llm::ToolChoice::Allowed,
            max_tokens: self.max_tokens,
            reasoning: self.reasoning,
            cache_key: Some(self.session_id.to_string()),
            output: self.turn_output.as_ref().map(|contract| contract.format().clone()),
            retries: llm::retry::RetryReporter::default(),
            encoded: Arc::clone(&self.encoded_history),
        }
    }

    /// Compacts the history if `trigger` calls for it (feature `session-compaction`).
    /// Returns whether the history was compacted.
    #[cfg(feature = "session-compaction")]
    pub(super) async fn before_model_call(
        &mut self,
        trigger: Trigger,
        cancel: &CancellationToken,
        events: &EventSink,
        totals: &mut TurnTotals,
    ) -> Result<bool, Interruption> {
        match self.compact(trigger, cancel, events).await {
            super::compaction::Outcome::Cancelled => Err(Interruption::Cancelled),
            super::compaction::Outcome::Done(report) => {
                totals.usage.add(&report.usage);
                Ok(report.compacted)
            }
        }
    }

    /// Without compaction, the history only grows; the ingest cap still bounds tool outputs.
    #[cfg(not(feature = "session-compaction"))]
    pub(super) async fn before_model_call(
        &mut self,
        _trigger: Trigger,
        _cancel: &CancellationToken,
        _events: &EventSink,
        _totals: &mut TurnTotals,
    ) -> Result<bool, Interruption> {
        Ok(false)
    }

    /// Streams one model response into `response`, forwarding text as events.
    pub(super) async fn stream_response(
        &self,
        mut request: ModelRequest,
        cancel: &CancellationToken,
        events: &EventSink,
        response: &mut Response,
    ) -> Result<llm::StopReason, Interruption> {
        let sink = events.clone();
        request.retries = llm::retry::RetryReporter::new(move |notice| {
            sink.emit(AgentEvent::Retry {
                attempt: notice.attempt,
                delay_ms: notice.delay_ms,
                reason: notice.reason,
            });
        });
        let mut stream = tokio::select! {
            opened = self.provider.stream(request) => opened.map_err(Interruption::Failed)?,
            () = cancel.cancelled() => return Err(Interruption::Cancelled),
        };
        loop {
            let next = tokio::select! {
                next = stream.next() => next,
                () = cancel.cancelled() => return Err(Interruption::Cancelled),
            };
            match next {
                Some(Ok(StreamEvent::TextDelta(delta))) => {
                    response.push_text(&delta);
                    events.emit(AgentEvent::TextDelta { text: delta });
                }
                Some(Ok(StreamEvent::ToolCallEnd { id, name, input })) => {
                    response.blocks.push(ContentBlock::ToolUse { id, name, input });
                }
                Some(Ok(StreamEvent::ReasoningDelta(delta))) => {
                    events.emit(AgentEvent::ReasoningDelta { text: delta });
                }
                Some(Ok(StreamEvent::Reasoning(block))) => response.blocks.push(block),
                Some(Ok(StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallDelta { .. })) => {}
                Some(Ok(StreamEvent::Usage(usage))) => response.usage = usage,
                Some(Ok(StreamEvent::Finished { stop_reason })) => return Ok(stop_reason),
                Some(Ok(StreamEvent::Restarted { reason })) => {
                    response.restart();
                    events.emit(AgentEvent::ResponseRestarted { reason });
                }
                Some(Err(error)) => return Err(Interruption::Failed(error)),
                None => {
                    return Err(Interruption::Failed(LlmError::new(
                        LlmErrorKind::StreamBroken,
                        "the model's stream ended before the response was complete",
                    )));
                }
            }
        }
    }

    pub(super) fn record_usage(&mut self, usage: &Usage, totals: &mut TurnTotals, events: &EventSink) {
        if *usage == Usage::default() {
            return;
        }
        self.charge(usage);
        self.report_spend();
        totals.usage.add(usage);
        events.emit(AgentEvent::Usage { usage: *usage, cost_usd: self.cost_of(usage) });
    }

    /// Keeps what an interrupted response produced, marked as cut off, with a synthetic result
    /// for every tool call in it so the pairs stay whole.
    pub(super) fn close_interrupted_response(&mut self, response: Response, why: &Interruption) {
        let marker = match why {
            Interruption::Cancelled => "[interrupted]".to_owned(),
            Interruption::Failed(error) => format!("[response cut off: {}]", error.message),
        };
        let mut blocks = response.blocks;
        if blocks.is_empty() {
            return;
        }
        // A thinking block cut off has no signature, and without one the provider refuses it.
        blocks.retain(|block| !matches!(block, ContentBlock::Thinking { signature: None, .. }));
        match blocks.iter_mut().rev().find_map(|block| match block {
            ContentBlock::Text { text } => Some(text),
            _ => None,
        }) {
            Some(text) => text.push_str(&format!("\n\n{marker}")),
            // After the reasoning, which must open the message.
            None => {
                let at = blocks.iter().take_while(|block| block.is_reasoning()).count();
                blocks.insert(at, ContentBlock::Text { text: marker.clone() });
            }
        }
        let results: Vec<ContentBlock> = blocks
            .iter()
            .filter_map(|block| match block {
                ContentBlock::ToolUse { id, .. } => Some(ContentBlock::ToolResult {
                    tool_use_id: id.clone(),
                    content: format!("not run: {marker}"),
                    is_error: true,
                }),
                _ => None,
            })
            .collect();
        let history = self.history_mut();
        history.push(Message::assistant(blocks));
        if !results.is_empty() {
            history.push(Message { role: Role::User, content: results });
        }
    }
}
