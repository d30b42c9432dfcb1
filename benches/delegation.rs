//! Delegation benchmark, in one process with scripted providers:
//!
//! - **Fan-out**: a parent delegates 4 independent children with `wait: false`, then calls
//!   `wait {mode: "all"}`. Each child's model answers after a fixed latency (300 ms by
//!   default), the parent's at once, so the parent's turn takes about one child's latency if
//!   the children run side by side, and four times it if they do not. Printed next to a parent
//!   that delegates one child (`wait: true`).
//! - **Overhead of a child**: a parent's step whose one tool call is `delegate {wait: true}` to
//!   a child whose model answers at once, against the same step calling a tool that does
//!   nothing much (`list_peers`): from the parent's model request to its next one. The
//!   difference is what creating and running a child session costs beyond the model. Also
//!   printed: from the parent's request to the child's first model request (creating the
//!   child). Without a store, and with a redb store (what `deputy serve` has by default).
//!
//! Figures are printed, never asserted. Run with `cargo bench --bench delegation`;
//! `DEPUTY_BENCH_ITERATIONS` (default 50) per overhead case, `DEPUTY_BENCH_CHILD_MS` (default
//! 300) for the fan-out's child latency.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deputy::agent::AgentFactory;
use deputy::llm::registry::ProviderRegistry;
use deputy::llm::scripted::{ScriptedProvider, ScriptedResponse, Step};
use deputy::llm::{ContentBlock, ModelRequest};
use deputy::session::{CreateSessionRequest, DelegationLimits, LiveSessionService, SessionService};
use deputy::store::RedbStore;
use serde_json::{Value, json};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

fn us(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}

fn first_text(request: &ModelRequest) -> String {
    match request.messages.first().and_then(|message| message.content.first()) {
        Some(ContentBlock::Text { text }) => text.clone(),
        _ => String::new(),
    }
}

/// The tool results of a request's last message.
fn last_results(request: &ModelRequest) -> Vec<Value> {
    let Some(last) = request.messages.last() else { return Vec::new() };
    last.content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolResult { content, .. } => Some(serde_json::from_str(content).unwrap_or(Value::Null)),
            _ => None,
        })
        .collect()
}

/// When each kind of request arrived at the provider, in order.
#[derive(Default)]
struct Arrivals(Mutex<Vec<(&'static str, Instant)>>);

impl Arrivals {
    fn mark(&self, what: &'static str) {
        self.0.lock().unwrap().push((what, Instant::now()));
    }

    fn take(&self) -> Vec<(&'static str, Instant)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A service on one scripted provider: a parent's prompt says what it does (`fanout`, `single`,
/// `delegate`, `baseline`); a child (`CHILD` task) answers after `child_latency`.
fn service(
    stored: Option<&std::path::Path>,
    child_latency: Duration,
    arrivals: Arc<Arrivals>,
) -> Arc<LiveSessionService> {
    let provider = ScriptedProvider::responding(move |request| {
        let first = first_text(request);
        if first.starts_with("CHILD") {
            arrivals.mark("child");
            let mut answer = ScriptedResponse::text(&["child answer"]);
            if !child_latency.is_zero() {
                answer.steps.insert(0, Step::Sleep(child_latency));
            }
            return answer;
        }
        let results = last_results(request);
        arrivals.mark(if results.is_empty() { "parent" } else { "parent-next" });
        let delegate = |n: usize, wait: bool| {
            (format!("toolu_{n}"), "delegate", json!({"task": format!("CHILD: part {n}"), "wait": wait}))
        };
        let calls: Vec<(String, &str, Value)> = match (first.as_str(), results.last()) {
            ("fanout", None) => (0..4).map(|n| delegate(n, false)).collect(),
            ("fanout", Some(last))
                if last.get("finished").is_none() || !last["running"].as_array().unwrap().is_empty() =>
            {
                vec![("toolu_wait".into(), "wait", json!({"mode": "all", "timeout_ms": 60_000}))]
            }
            ("single" | "delegate", None) => vec![delegate(0, true)],
            ("baseline", None) => vec![("toolu_0".into(), "list_peers", json!({}))],
            _ => return ScriptedResponse::text(&["done"]),
        };
        let calls: Vec<(&str, &str, Value)> =
            calls.iter().map(|(id, name, input)| (id.as_str(), *name, input.clone())).collect();
        ScriptedResponse::tool_calls(&calls)
    });
    let mut registry = ProviderRegistry::new();
    registry.insert("bench", provider);
    let factory = AgentFactory::new(Arc::new(registry), Some("bench:scripted".into()), None);
    let store: deputy::store::SharedStore = stored.map(|dir| {
        Arc::new(RedbStore::open(dir.join("sessions.redb")).unwrap()) as Arc<dyn deputy::store::SessionStore>
    });
    let limits = DelegationLimits { max_live_delegated: usize::MAX, ..DelegationLimits::default() };
    LiveSessionService::new(factory, store).with_delegation(limits).into_shared()
}

/// Runs one parent turn with `prompt`; returns its wall time. The parent (and so its children)
/// is archived afterwards, so sessions do not pile up.
async fn parent_turn(service: &LiveSessionService, prompt: &str) -> Duration {
    let started = Instant::now();
    let result = service
        .create_session(CreateSessionRequest { prompt: prompt.into(), ..CreateSessionRequest::default() })
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(result.text, "done", "{result:?}");
    service.archive(&result.session_id).await.unwrap();
    took
}

fn main() {
    let iterations: usize =
        std::env::var("DEPUTY_BENCH_ITERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(50);
    let child_ms: u64 = std::env::var("DEPUTY_BENCH_CHILD_MS").ok().and_then(|n| n.parse().ok()).unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(fan_out(Duration::from_millis(child_ms)));
    runtime.block_on(overhead(iterations));
}

async fn fan_out(latency: Duration) {
    println!("deputy delegation bench");
    println!();
    println!(
        "fan-out: 4 children with wait: false, then wait {{mode: \"all\"}}; each child's model takes {}",
        ms(latency)
    );
    let arrivals = Arc::new(Arrivals::default());
    let service = service(None, latency, arrivals.clone());
    parent_turn(&service, "single").await; // warm-up
    let (mut single, mut fanned) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        single.push(parent_turn(&service, "single").await);
        arrivals.take();
        fanned.push(parent_turn(&service, "fanout").await);
        let children = arrivals.take().iter().filter(|(kind, _)| *kind == "child").count();
        assert_eq!(children, 4, "the fan-out parent delegated 4 children");
    }
    single.sort();
    fanned.sort();
    let (single, fanned) = (percentile(&single, 0.5), percentile(&fanned, 0.5));
    println!("  {:<44} {:>10}", "one child's model latency", ms(latency));
    println!("  {:<44} {:>10}", "parent delegating 1 child (median of 5)", ms(single));
    println!("  {:<44} {:>10}", "parent delegating 4 children (median of 5)", ms(fanned));
    println!(
        "  4 children take {:.2}× one child's latency (4.00× if they ran one after another)",
        fanned.as_secs_f64() / latency.as_secs_f64()
    );
    println!();
}

async fn overhead(iterations: usize) {
    println!("overhead of a child (zero-latency models), {iterations} iterations after 10 warm-up:");
    println!("  {:<52} {:>10} {:>10} {:>10}", "case", "p50", "p99", "mean");
    for stored in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let arrivals = Arc::new(Arrivals::default());
        let service = service(stored.then(|| dir.path()), Duration::ZERO, arrivals.clone());
        let store = if stored { "redb store" } else { "no store" };
        let measure = |prompt: &'static str| {
            let service = service.clone();
            let arrivals = arrivals.clone();
            async move {
                let (mut step, mut to_child) = (Vec::new(), Vec::new());
                for n in 0..iterations + 10 {
                    arrivals.take();
                    parent_turn(&service, prompt).await;
                    let marks = arrivals.take();
                    let at = |what: &str| marks.iter().find(|(kind, _)| *kind == what).map(|(_, at)| *at);
                    let parent = at("parent").unwrap();
                    if n >= 10 {
                        step.push(at("parent-next").unwrap() - parent);
                        if let Some(child) = at("child") {
                            to_child.push(child - parent);
                        }
                    }
                }
                (step, to_child)
            }
        };
        let (baseline, _) = measure("baseline").await;
        let (delegating, to_child) = measure("delegate").await;
        let report = |case: String, mut times: Vec<Duration>| {
            times.sort();
            let mean = times.iter().sum::<Duration>() / times.len() as u32;
            println!(
                "  {case:<52} {:>10} {:>10} {:>10}",
                us(percentile(&times, 0.5)),
                us(percentile(&times, 0.99)),
                us(mean)
            );
            times
        };
        let baseline = report(format!("{store}: step with list_peers (baseline)"), baseline);
        report(format!("{store}: parent request → child's first request"), to_child);
        let delegating = report(format!("{store}: step with delegate {{wait: true}}"), delegating);
        let p50 = percentile(&delegating, 0.5).saturating_sub(percentile(&baseline, 0.5));
        let p99 = percentile(&delegating, 0.99).saturating_sub(percentile(&baseline, 0.99));
        println!(
            "  {:<52} {:>10} {:>10}",
            format!("{store}: a child's overhead (delegate − baseline)"),
            us(p50),
            us(p99)
        );
    }
}
