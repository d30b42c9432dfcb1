//! Integration suites, plus small helpers for driving a provider's event stream.

mod agents;
#[cfg(feature = "session-store")]
mod background_server;
mod callbacks;
mod cli;
mod comms;
mod cost;
mod delegation;
mod documents;
mod events;
mod hibernation;
mod hooks;
mod http_surfaces;
mod layering;
mod limits;
mod mcp_http;
mod mcp_input_required;
mod mcp_servers;
mod mcp_stdio;
mod mcp_tasks;
mod memory;
mod metrics;
mod overload;
#[cfg(feature = "session-store")]
mod persistence;
mod policy;
mod project_instructions;
mod provider_anthropic;
mod provider_contract;
mod provider_openai;
mod provider_rules;
mod provider_wire;
#[cfg(feature = "session-store")]
mod replicas;
#[cfg(target_os = "linux")]
mod sandbox;
mod schemas;
mod secrets;
mod skills;
mod stdio_frames;
mod structured_output;
mod telemetry;
mod tenants;
mod tools;
mod transcript;
mod webhooks;
mod wire_properties;

use std::sync::Arc;
use std::time::Duration;

use deputy::llm::retry::{RetryPolicy, RetryingProvider};
use deputy::llm::{EventStream, HttpTimeouts, LlmError, ModelRequest, Provider, StreamEvent};
use futures::StreamExt;

/// Drains a stream: every event, and the error that ended it, if any.
pub async fn collect(stream: EventStream) -> (Vec<StreamEvent>, Option<LlmError>) {
    let mut events = Vec::new();
    let mut stream = stream;
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(err) => return (events, Some(err)),
        }
    }
    (events, None)
}

/// Opens and drains in one go; an open error is reported like a stream error.
pub async fn run(provider: &dyn Provider, request: ModelRequest) -> (Vec<StreamEvent>, Option<LlmError>) {
    match provider.stream(request).await {
        Ok(stream) => collect(stream).await,
        Err(err) => (Vec::new(), Some(err)),
    }
}

/// The text a consumer keeps: what streamed after the last `Restarted` (which voids the rest).
pub fn text_of(events: &[StreamEvent]) -> String {
    let kept = events.iter().rposition(|e| matches!(e, StreamEvent::Restarted { .. })).map_or(0, |at| at + 1);
    text_deltas(&events[kept..]).concat()
}

pub fn restarts(events: &[StreamEvent]) -> usize {
    events.iter().filter(|e| matches!(e, StreamEvent::Restarted { .. })).count()
}

pub fn text_deltas(events: &[StreamEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// Every `Usage` event, in order.
pub fn usages(events: &[StreamEvent]) -> Vec<deputy::llm::Usage> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Usage(u) => Some(*u),
            _ => None,
        })
        .collect()
}

pub fn simple_request(text: &str) -> ModelRequest {
    ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: "mock-model".into(),
        system: None,
        messages: vec![deputy::llm::Message::user_text(text)].into(),
        tools: vec![].into(),
        max_tokens: 256,
        output: None,
        retries: Default::default(),
        encoded: Default::default(),
    }
}

/// Retries fast enough for tests; `retry_after` from the server still applies as sent.
pub fn retrying(inner: impl Provider + 'static) -> RetryingProvider {
    RetryingProvider::new(
        Arc::new(inner),
        RetryPolicy {
            max_retries: 3,
            initial_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
            max_retry_after: Duration::from_secs(5),
        },
    )
}

pub fn short_idle(idle_read: Duration) -> HttpTimeouts {
    HttpTimeouts { connect: Duration::from_secs(2), idle_read }
}
