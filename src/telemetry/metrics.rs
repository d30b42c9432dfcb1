//! The Prometheus metrics of one process: what the spans recorded (turns, model calls, tokens,
//! cost, tool calls, errors answered) and what the service holds at the moment of a scrape
//! ([`Gauges`]: sessions live and hibernated, turns running, mail waiting, connections).
//!
//! Label values that callers choose (model names, tool names) are bounded: past
//! [`MAX_LABEL_VALUES`] distinct values per label, further ones are counted as `other`, so no
//! caller can grow the registry without bound.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Distinct values one label keeps before the rest are `other`.
pub const MAX_LABEL_VALUES: usize = 200;

/// The content type [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelOutcomeLabels {
    provider: String,
    model: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    /// `input` (uncached), `output`, `cache_read`, `cache_creation`.
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcomeLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds from 10 ms to about 3 minutes: turns and model calls.
fn long_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 15))
}

/// Seconds from 1 ms to about 30 s: tool calls.
fn short_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// What the service holds when it is scraped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    pub live_sessions: u64,
    /// Sessions kept in the store and not in memory (unarchived).
    pub hibernated_sessions: u64,
    pub running_turns: u64,
    /// Messages waiting in the inboxes of live sessions.
    pub inbox_waiting: u64,
}

/// Values of one label, bounded.
#[derive(Default)]
struct Bounded(Mutex<HashSet<String>>);

impl Bounded {
    fn label(&self, value: &str) -> String {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            return value.to_owned();
        }
        if seen.len() < MAX_LABEL_VALUES {
            seen.insert(value.to_owned());
            return value.to_owned();
        }
        "other".to_owned()
    }
}

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    turns: Family<StatusLabels, Counter>,
    turn_seconds: Histograms<StatusLabels>,
    model_calls: Family<ModelOutcomeLabels, Counter>,
    model_call_seconds: Histograms<ModelLabels>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<ModelLabels, Counter<f64, AtomicU64>>,
    tool_calls: Family<ToolOutcomeLabels, Counter>,
    tool_call_seconds: Histograms<ToolLabels>,
    errors: Family<CodeLabels, Counter>,
    sessions: Family<StateLabels, Gauge>,
    running_turns: Gauge,
    inbox_waiting: Gauge,
    connections: Gauge,
    models: Bounded,
    tools: Bounded,
    codes: Bounded,
}

/// The process's metrics: one registry, as there is one tracing subscriber.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// What a model call's span recorded.
#[derive(Debug, Clone, Default)]
pub struct ModelCall {
    pub provider: String,
    pub model: String,
    /// `ok`, or the failure's kind.
    pub outcome: String,
    pub seconds: f64,
    pub uncached_input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_creation_tokens: u64,
    pub cost_usd: Option<f64>,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("deputy");
        let this = Self {
            registry: Registry::default(),
            turns: Family::default(),
            turn_seconds: Family::new_with_constructor(long_buckets as fn() -> Histogram),
            model_calls: Family::default(),
            model_call_seconds: Family::new_with_constructor(long_buckets as fn() -> Histogram),
            tokens: Family::default(),
            cost: Family::default(),
            tool_calls: Family::default(),
            tool_call_seconds: Family::new_with_constructor(short_buckets as fn() -> Histogram),
            errors: Family::default(),
            sessions: Family::default(),
            running_turns: Gauge::default(),
            inbox_waiting: Gauge::default(),
            connections: Gauge::default(),
            models: Bounded::default(),
            tools: Bounded::default(),
            codes: Bounded::default(),
        };
        registry.register("turns", "Turns ended, by how they ended", this.turns.clone());
        registry.register(
            "turn_duration_seconds",
            "How long turns took, by how they ended",
            this.turn_seconds.clone(),
        );
        registry.register("model_calls", "Model calls (retries included), by outcome", this.model_calls.clone());
        registry.register(
            "model_call_duration_seconds",
            "How long model calls took, retries included",
            this.model_call_seconds.clone(),
        );
        registry.register("tokens", "Tokens of model calls, by kind", this.tokens.clone());
        registry.register(
            "cost_usd",
            "What model calls cost, in US dollars, where the price is known",
            this.cost.clone(),
        );
        registry.register("tool_calls", "Tool calls, by outcome", this.tool_calls.clone());
        registry.register("tool_call_duration_seconds", "How long tool calls took", this.tool_call_seconds.clone());
        registry.register("errors", "Errors answered to callers, by code", this.errors.clone());
        registry.register("sessions", "Sessions not archived: live in memory or hibernated", this.sessions.clone());
        registry.register("turns_running", "Turns running now", this.running_turns.clone());
        registry.register(
            "inbox_waiting_messages",
            "Messages waiting in live sessions' inboxes",
            this.inbox_waiting.clone(),
        );
        registry.register("http_connections", "HTTP connections open now", this.connections.clone());
        Self { registry, ..this }
    }

    pub fn turn_ended(&self, status: &str, seconds: f64) {
        let labels = StatusLabels { status: status.to_owned() };
        self.turns.get_or_create(&labels).inc();
        self.turn_seconds.get_or_create(&labels).observe(seconds);
    }

    pub fn model_called(&self, call: &ModelCall) {
        let (provider, model) = (self.models.label(&call.provider), self.models.label(&call.model));
        let outcome =
            ModelOutcomeLabels { provider: provider.clone(), model: model.clone(), outcome: call.outcome.clone() };
        self.model_calls.get_or_create(&outcome).inc();
        let labels = ModelLabels { provider, model };
        self.model_call_seconds.get_or_create(&labels).observe(call.seconds);
        for (kind, tokens) in [
            ("input", call.uncached_input_tokens),
            ("output", call.output_tokens),
            ("cache_read", call.cache_read_tokens),
            ("cache_creation", call.cache_creation_tokens),
        ] {
            if tokens > 0 {
                let token_labels =
                    TokenLabels { provider: labels.provider.clone(), model: labels.model.clone(), kind };
                self.tokens.get_or_create(&token_labels).inc_by(tokens);
            }
        }
        if let Some(cost) = call.cost_usd.filter(|cost| cost.is_finite() && *cost > 0.0) {
            self.cost.get_or_create(&labels).inc_by(cost);
        }
    }

    pub fn tool_called(&self, tool: &str, failed: bool, seconds: f64) {
        let tool = self.tools.label(tool);
        let outcome = if failed { "error" } else { "ok" };
        self.tool_calls.get_or_create(&ToolOutcomeLabels { tool: tool.clone(), outcome }).inc();
        self.tool_call_seconds.get_or_create(&ToolLabels { tool }).observe(seconds);
    }

    pub fn error_answered(&self, code: &str) {
        self.errors.get_or_create(&CodeLabels { code: self.codes.label(code) }).inc();
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    /// The Prometheus text exposition (version 0.0.4), `gauges` as the service holds them now.
    pub fn render(&self, gauges: Gauges) -> String {
        let set = |gauge: &Gauge, value: u64| gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        set(&self.sessions.get_or_create(&StateLabels { state: "live" }), gauges.live_sessions);
        set(&self.sessions.get_or_create(&StateLabels { state: "hibernated" }), gauges.hibernated_sessions);
        set(&self.running_turns, gauges.running_turns);
        set(&self.inbox_waiting, gauges.inbox_waiting);
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry) {
            tracing::warn!("encoding the metrics failed: {error}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_cannot_grow_a_label_without_bound() {
        let bounded = Bounded::default();
        for n in 0..MAX_LABEL_VALUES {
            assert_eq!(bounded.label(&format!("tool_{n}")), format!("tool_{n}"));
        }
        assert_eq!(bounded.label("one_more"), "other");
        assert_eq!(bounded.label("tool_0"), "tool_0", "a value seen before keeps its label");
    }

    #[test]
    fn the_exposition_holds_what_was_recorded() {
        let metrics = Metrics::new();
        metrics.turn_ended("completed", 0.25);
        metrics.tool_called("read_file", true, 0.01);
        let text = metrics.render(Gauges { live_sessions: 3, ..Gauges::default() });
        assert!(text.contains("deputy_turns_total{status=\"completed\"} 1"), "{text}");
        assert!(text.contains("deputy_tool_calls_total{tool=\"read_file\",outcome=\"error\"} 1"), "{text}");
        assert!(text.contains("deputy_sessions{state=\"live\"} 3"), "{text}");
        assert!(text.contains("# TYPE deputy_turn_duration_seconds histogram"), "{text}");
    }
}
