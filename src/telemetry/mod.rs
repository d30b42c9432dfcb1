//! What deputy's work looks like from outside: the spans every turn, model call and tool call
//! runs in ([`spans`], named after OpenTelemetry's GenAI conventions), and the Prometheus
//! metrics read off those spans when they close ([`layer`] into [`metrics`]).
//!
//! The code that does the work only opens and records spans through [`spans`]; it never names
//! a metric. Consumers subscribe to the spans' target ([`TARGET`]): the metrics layer, always
//! (a few counters per span), and exporters such as OTLP where configured. The spans are at
//! `DEBUG` level: a log at `info` is unchanged by them, one at `debug` shows them as the
//! context of its lines. Names
//! nothing else of deputy's.

pub mod layer;
pub mod metrics;
pub mod spans;

/// The target of every span and event this module defines.
pub const TARGET: &str = "deputy::telemetry";
