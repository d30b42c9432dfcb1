//! What deputy's work looks like from outside: the spans every turn, model call and tool call
//! runs in ([`spans`], named after OpenTelemetry's GenAI conventions), and the Prometheus
//! metrics read off those spans when they close ([`layer`] into [`metrics`]).
//!
//! The code that does the work only opens and records spans through [`spans`]; it never names
//! a metric. Consumers subscribe to the spans' target ([`TARGET`]): the metrics layer, always
//! (a few counters per span), and exporters such as OTLP where configured. The spans are at
//! `DEBUG` level: a log at `info` is unchanged by them, one at `debug` shows them as the
//! context of its lines. The same spans go to an OpenTelemetry collector when the operator
//! names one ([`otlp`]), continuing the trace a caller sent ([`caller_trace`]). Names nothing
//! else of deputy's.

pub mod caller_trace;
pub mod layer;
pub mod metrics;
pub mod otlp;
pub mod spans;

/// The target of every span and event this module defines.
pub const TARGET: &str = "deputy::telemetry";

/// Whether `metadata` is one of this module's spans or events: the per-layer filter of the
/// metrics and trace layers, which see them at every level whatever the log's filter says.
pub fn is_telemetry(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.target() == TARGET
}
