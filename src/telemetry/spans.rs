//! The spans of a turn, its model calls and its tool calls, with the attributes of
//! OpenTelemetry's GenAI semantic conventions (`gen_ai.*`) and deputy's own (`deputy.*`).
//!
//! Each function opens a span whose outcome fields are still empty; the matching `*_ended`
//! records them once known. A span ends when its last handle drops: its duration is from
//! opening to then, whatever the task did meanwhile.

use tracing::Span;
use tracing::field::Empty;

use super::TARGET;

/// The span of one turn of session `session_id`.
pub fn turn(session_id: &str, turn: u64, model: &str) -> Span {
    tracing::debug_span!(
        target: TARGET,
        "turn",
        otel.name = "invoke_agent",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.conversation.id = session_id,
        gen_ai.request.model = model,
        deputy.turn = turn,
        deputy.turn.status = Empty,
        deputy.cost_usd = Empty,
        otel.status_code = Empty,
    )
}

/// How the turn ended: `completed`, `cancelled`, `failed`, `budget_exhausted`, `pending`.
pub fn turn_ended(span: &Span, status: &str, cost_usd: Option<f64>) {
    span.record("deputy.turn.status", status);
    if let Some(cost) = cost_usd {
        span.record("deputy.cost_usd", cost);
    }
    if status == "failed" {
        span.record("otel.status_code", "error");
    }
}

/// The span of one model call (its retries included) to `model` of `provider`.
pub fn chat(provider: &str, model: &str) -> Span {
    tracing::debug_span!(
        target: TARGET,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        deputy.cost_usd = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// What one model call used and how it ended.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatOutcome<'a> {
    /// Every prompt token, the cached ones included (as the conventions count them).
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_creation_tokens: u64,
    pub cost_usd: Option<f64>,
    /// Why the model stopped, when it answered.
    pub finish_reason: Option<&'a str>,
    /// The failure's kind, when it did not.
    pub error: Option<&'a str>,
}

pub fn chat_ended(span: &Span, outcome: &ChatOutcome<'_>) {
    span.record("gen_ai.usage.input_tokens", outcome.input_tokens);
    span.record("gen_ai.usage.output_tokens", outcome.output_tokens);
    span.record("gen_ai.usage.cache_read.input_tokens", outcome.cache_read_tokens);
    span.record("gen_ai.usage.cache_creation.input_tokens", outcome.cache_creation_tokens);
    if let Some(cost) = outcome.cost_usd {
        span.record("deputy.cost_usd", cost);
    }
    if let Some(reason) = outcome.finish_reason {
        span.record("gen_ai.response.finish_reasons", reason);
    }
    if let Some(error) = outcome.error {
        span.record("error.type", error);
        span.record("otel.status_code", "error");
    }
}

/// The span of one call of tool `name`.
pub fn tool(name: &str) -> Span {
    tracing::debug_span!(
        target: TARGET,
        "execute_tool",
        otel.name = format!("execute_tool {name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// A tool call that answered an error result.
pub fn tool_failed(span: &Span) {
    span.record("error.type", "tool_error");
    span.record("otel.status_code", "error");
}

/// An error answered to a caller, by its stable code.
pub fn error_answered(code: &str) {
    tracing::debug!(target: TARGET, error_code = code, "error answered");
}
