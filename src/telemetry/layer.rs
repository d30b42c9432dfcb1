//! The tracing layer that turns the spans of [`super::spans`] into [`super::metrics`]: it keeps
//! each span's recorded fields and opening time, and when the span closes counts it.
//!
//! Installed by `main` with a filter of its own ([`super::is_telemetry`]), so the spans reach
//! it whatever `RUST_LOG` says.

use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::metrics::{Metrics, ModelCall, metrics};

/// Feeds [`metrics()`] from the spans it sees.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsLayer;

/// What a span recorded so far.
#[derive(Debug, Default)]
struct Fields {
    provider: String,
    model: String,
    tool: String,
    status: String,
    error: Option<String>,
    error_code: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_creation_tokens: u64,
    cost_usd: Option<f64>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "gen_ai.provider.name" => self.provider = value.to_owned(),
            "gen_ai.request.model" => self.model = value.to_owned(),
            "gen_ai.tool.name" => self.tool = value.to_owned(),
            "deputy.turn.status" => self.status = value.to_owned(),
            "error.type" => self.error = Some(value.to_owned()),
            "error_code" => self.error_code = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "gen_ai.usage.input_tokens" => self.input_tokens = value,
            "gen_ai.usage.output_tokens" => self.output_tokens = value,
            "gen_ai.usage.cache_read.input_tokens" => self.cache_read_tokens = value,
            "gen_ai.usage.cache_creation.input_tokens" => self.cache_creation_tokens = value,
            _ => {}
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "deputy.cost_usd" {
            self.cost_usd = Some(value);
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

struct Opened {
    at: Instant,
    fields: Fields,
}

impl<S> tracing_subscriber::Layer<S> for MetricsLayer
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let Some(span) = context.span(id) else { return };
        let mut fields = Fields::default();
        attributes.record(&mut fields);
        span.extensions_mut().insert(Opened { at: Instant::now(), fields });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        let Some(span) = context.span(id) else { return };
        if let Some(opened) = span.extensions_mut().get_mut::<Opened>() {
            values.record(&mut opened.fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some(code) = fields.error_code {
            metrics().error_answered(&code);
        }
    }

    fn on_close(&self, id: Id, context: Context<'_, S>) {
        let Some(span) = context.span(&id) else { return };
        let Some(opened) = span.extensions_mut().remove::<Opened>() else { return };
        closed(metrics(), span.name(), opened.at.elapsed().as_secs_f64(), opened.fields);
    }
}

/// Counts one closed span of `name`.
fn closed(metrics: &Metrics, name: &str, seconds: f64, fields: Fields) {
    match name {
        "turn" if !fields.status.is_empty() => metrics.turn_ended(&fields.status, seconds),
        "chat" => {
            let cached = fields.cache_read_tokens + fields.cache_creation_tokens;
            metrics.model_called(&ModelCall {
                outcome: fields.error.unwrap_or_else(|| "ok".to_owned()),
                uncached_input_tokens: fields.input_tokens.saturating_sub(cached),
                output_tokens: fields.output_tokens,
                cache_read_tokens: fields.cache_read_tokens,
                cache_creation_tokens: fields.cache_creation_tokens,
                cost_usd: fields.cost_usd,
                seconds,
                provider: fields.provider,
                model: fields.model,
            });
        }
        "execute_tool" => metrics.tool_called(&fields.tool, fields.error.is_some(), seconds),
        _ => {}
    }
}
