//! Request bench: what one model call allocates and costs on its way to the network.
//!
//! Run with `cargo bench --bench request`. Figures are printed, never asserted.
//!
//! For three histories (161 messages of ~160 KB, 601 of ~550 KB, 601 of ~1.4 MB of body) and
//! both wires, the bench times the path a model call takes before its first byte is sent: the
//! request built from the agent's history and tools as `Agent::model_request` builds it, the
//! retry layer taking it (`Resendable`), and the adapter's body as the bytes reqwest sends
//! (`AnthropicProvider::body`, `OpenAiProvider::body`). "first attempt" is a call written
//! whole (a session's first, or its first after a rewind, pruning or compaction); "retry" each
//! further attempt of the same call; "next call" the session's next call, after the call
//! before it kept the settled turns it wrote (`llm::encoded_history`). A counting global
//! allocator gives, per call, the bytes asked of the allocator (a `realloc` counts its whole
//! new size, as a fresh allocation would), the number of allocations, and the peak of live
//! bytes above what was live before the call.
//!
//! Environment: `DEPUTY_BENCH_ITERATIONS` (default 200 per case).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use deputy::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use deputy::llm::encoded_history::EncodedHistory;
use deputy::llm::openai::{OpenAiConfig, OpenAiProvider};
use deputy::llm::retry::RetryReporter;
use deputy::llm::{ContentBlock, HttpTimeouts, Message, ModelRequest, Resendable, Role, ToolSpec};
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// Counting allocator

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn allocated(size: usize) {
    ALLOCATED.fetch_add(size, Ordering::Relaxed);
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is passed on to `System` unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        allocated(layout.size());
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        allocated(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        allocated(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What one call cost.
#[derive(Clone, Copy)]
struct Sample {
    time: Duration,
    bytes: usize,
    allocs: usize,
    peak: usize,
}

fn sample(run: &mut impl FnMut() -> usize) -> Sample {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    ALLOCATED.store(0, Ordering::Relaxed);
    ALLOCS.store(0, Ordering::Relaxed);
    let started = Instant::now();
    black_box(run());
    let time = started.elapsed();
    Sample {
        time,
        bytes: ALLOCATED.load(Ordering::Relaxed),
        allocs: ALLOCS.load(Ordering::Relaxed),
        peak: PEAK.load(Ordering::Relaxed).saturating_sub(live),
    }
}

/// Medians of each figure over `iterations` calls, after a few unmeasured ones.
fn measure(iterations: usize, mut run: impl FnMut() -> usize) -> Sample {
    measure_prepared(iterations, &mut (), |()| {}, |()| run())
}

/// Medians of each figure over `iterations` calls of `run` on `state`, each after an
/// unmeasured `prepare` of it, after a few unmeasured ones.
fn measure_prepared<S>(
    iterations: usize,
    state: &mut S,
    mut prepare: impl FnMut(&mut S),
    mut run: impl FnMut(&S) -> usize,
) -> Sample {
    for _ in 0..10 {
        prepare(state);
        black_box(run(state));
    }
    let samples: Vec<Sample> = (0..iterations)
        .map(|_| {
            prepare(state);
            sample(&mut || run(state))
        })
        .collect();
    let median = |figure: fn(&Sample) -> usize| {
        let mut values: Vec<usize> = samples.iter().map(figure).collect();
        values.sort_unstable();
        values[values.len() / 2]
    };
    let mut times: Vec<Duration> = samples.iter().map(|s| s.time).collect();
    times.sort_unstable();
    Sample {
        time: times[times.len() / 2],
        bytes: median(|s| s.bytes),
        allocs: median(|s| s.allocs),
        peak: median(|s| s.peak),
    }
}

// ---------------------------------------------------------------------------------------------
// A realistic history

/// A tool result: source-like lines with quotes, tabs and newlines (which JSON escapes).
fn tool_output(turn: usize, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 100);
    let mut line = 0;
    while out.len() < bytes {
        line += 1;
        out.push_str(&format!(
            "{line:>4}\tlet item_{turn}_{line} = client.get(\"/api/v1/items/{line}\").query(&[(\"page\", {turn})]).await?;\n"
        ));
    }
    out
}

/// `turns` turns of four messages (a prompt, text and a tool call, the tool's result of about
/// `result_bytes`, and an answer), then the next prompt.
fn history(turns: usize, result_bytes: usize) -> Vec<Message> {
    let mut messages = Vec::with_capacity(turns * 4 + 1);
    for turn in 0..turns {
        let id = format!("toolu_01{turn:022}");
        messages.push(Message::user_text(format!(
            "Turn {turn}: the integration test `items_page_{turn}` fails with a 404 since the router \
             change. Read `src/api/items.rs`, find why the \"page\" parameter is dropped, and fix it \
             without changing the public signature. Keep the existing tests passing."
        )));
        messages.push(Message::assistant(vec![
            ContentBlock::Text { text: format!("I'll read the handler for turn {turn} first.") },
            ContentBlock::ToolUse {
                id: id.clone(),
                name: "read_file".into(),
                input: json!({"path": format!("src/api/items_{turn}.rs"), "offset": 0, "limit": 400}),
            },
        ]));
        messages.push(Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id,
                content: tool_output(turn, result_bytes),
                is_error: turn % 7 == 3,
            }],
        });
        messages.push(Message::assistant(vec![ContentBlock::Text {
            text: format!(
                "The handler builds the query from `params.page` but the router now passes the \
                 page in `params.cursor` (turn {turn}). I changed the lookup to fall back to \
                 `cursor`, which keeps the signature, and the test passes again. Next I would \
                 check the other handlers that read `page` for the same problem."
            ),
        }]));
    }
    messages
        .push(Message::user_text("Good. Now check the other handlers that read `page` and fix them the same way."));
    messages
}

fn tools() -> Vec<ToolSpec> {
    let spec = |name: &str, description: &str, properties: serde_json::Value, required: &[&str]| ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: json!({"type": "object", "properties": properties, "required": required}).into(),
    };
    let path = json!({"type": "string", "description": "A path relative to the workspace root."});
    vec![
        spec(
            "read_file",
            "Read a text file of the workspace, or a range of its lines.",
            json!({"path": path, "offset": {"type": "integer", "minimum": 0}, "limit": {"type": "integer", "minimum": 1}}),
            &["path"],
        ),
        spec(
            "write_file",
            "Write a file of the workspace, replacing it.",
            json!({"path": path, "content": {"type": "string"}}),
            &["path", "content"],
        ),
        spec(
            "edit_file",
            "Replace one exact occurrence of a string in a file.",
            json!({"path": path, "old": {"type": "string"}, "new": {"type": "string"}}),
            &["path", "old", "new"],
        ),
        spec("list_dir", "List a directory of the workspace.", json!({"path": path}), &["path"]),
        spec(
            "grep",
            "Search the workspace for a regular expression.",
            json!({"pattern": {"type": "string"}, "path": path, "max_results": {"type": "integer"}}),
            &["pattern"],
        ),
        spec(
            "run_command",
            "Run a command in the workspace and return its output.",
            json!({"command": {"type": "string"}, "timeout_ms": {"type": "integer", "minimum": 1}}),
            &["command"],
        ),
        spec(
            "send_message",
            "Send a message to another session.",
            json!({"to": {"type": "string"}, "text": {"type": "string"}}),
            &["to", "text"],
        ),
        spec(
            "delegate",
            "Start a child session on a task and get its result.",
            json!({"task": {"type": "string"}, "model": {"type": "string"}, "max_tokens": {"type": "integer"}}),
            &["task"],
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// The path of one model call

/// What the agent holds: its history and tools, and the rest of what a request carries.
struct Agent {
    model: String,
    system: Option<String>,
    history: Arc<Vec<Message>>,
    tools: Arc<[Arc<ToolSpec>]>,
    /// What its earlier calls kept of its settled turns.
    encoded: Arc<EncodedHistory>,
}

/// `Agent::model_request`: the request for the next model call.
fn model_request(agent: &Agent) -> ModelRequest {
    ModelRequest {
        tool_choice: Default::default(),
        reasoning: None,
        cache_key: None,
        model: agent.model.clone(),
        system: agent.system.clone(),
        messages: Arc::clone(&agent.history),
        tools: Arc::clone(&agent.tools),
        max_tokens: 8192,
        output: None,
        retries: RetryReporter::default(),
        encoded: Arc::clone(&agent.encoded),
    }
}

enum Wire {
    Anthropic(AnthropicProvider),
    OpenAi(OpenAiProvider),
}

impl Wire {
    fn name(&self) -> &'static str {
        match self {
            Self::Anthropic(_) => "anthropic",
            Self::OpenAi(_) => "openai",
        }
    }

    /// An attempt of the call: the body the adapter sends.
    fn attempt(&self, call: &Resendable) -> usize {
        match self {
            Self::Anthropic(provider) => provider.body(call).unwrap().len(),
            Self::OpenAi(provider) => provider.body(call).unwrap().len(),
        }
    }
}

/// One model call's first attempt, from the agent's history to the bytes: the request, the
/// retry layer's `Resendable` holding it, the adapter's body. Written whole, as a session's
/// first call is, or its first after a rewind, pruning or compaction.
fn first_attempt(agent: &Agent, wire: &Wire) -> usize {
    let call = Resendable::new(ModelRequest { encoded: Arc::default(), ..model_request(agent) });
    wire.attempt(&call)
}

/// The same session's next call, as it is after the call before it: that call (the turn's
/// last before the answer, two messages shorter) kept the settled turns it wrote, so this one
/// writes the turn it settles and what follows (`llm::encoded_history`).
fn keep_the_call_before(agent: &mut Agent, wire: &Wire) {
    agent.encoded = Arc::default();
    let history = Arc::get_mut(&mut agent.history).expect("no request still holds the history");
    let since = history.split_off(history.len() - 2);
    next_call(agent, wire);
    Arc::get_mut(&mut agent.history).expect("no request still holds the history").extend(since);
}

/// The agent's next model call: written from what its earlier calls kept.
fn next_call(agent: &Agent, wire: &Wire) -> usize {
    wire.attempt(&Resendable::new(model_request(agent)))
}

// ---------------------------------------------------------------------------------------------

fn kb(bytes: usize) -> String {
    if bytes >= 1_000_000 {
        format!("{:.2} MB", bytes as f64 / 1e6)
    } else {
        format!("{:.1} KB", bytes as f64 / 1e3)
    }
}

fn main() {
    let iterations = std::env::var("DEPUTY_BENCH_ITERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(200);
    let timeouts = HttpTimeouts::default();
    let wires = [
        Wire::Anthropic(AnthropicProvider::new(AnthropicConfig {
            options: Default::default(),
            base_url: "http://127.0.0.1:9".into(),
            api_key: "k".into(),
            timeouts,
        })),
        Wire::OpenAi(OpenAiProvider::new(OpenAiConfig {
            options: Default::default(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: None,
            timeouts,
        })),
    ];
    let system = "You are a careful software engineer working in a Rust repository. ".repeat(30);
    println!("deputy request bench: {iterations} calls per case, medians");
    println!(
        "{:<10} {:>9} {:<14} {:>10} {:>10} {:>18} {:>8} {:>18}",
        "wire", "messages", "path", "body", "p50", "allocated", "allocs", "peak"
    );
    for (turns, result_bytes) in [(40, 2_700), (150, 2_450), (150, 7_600)] {
        let mut agent = Agent {
            model: "claude-sonnet-4-5".into(),
            system: Some(system.clone()),
            history: Arc::new(history(turns, result_bytes)),
            tools: tools().into_iter().map(Arc::new).collect(),
            encoded: Arc::default(),
        };
        for wire in &wires {
            let first = measure(iterations, || first_attempt(&agent, wire));
            let call = Resendable::new(model_request(&agent));
            let retry = measure(iterations, || wire.attempt(&call));
            drop(call);
            let next = measure_prepared(
                iterations,
                &mut agent,
                |agent| keep_the_call_before(agent, wire),
                |agent| next_call(agent, wire),
            );
            let body = first_attempt(&agent, wire);
            for (path, figures) in [("first attempt", first), ("retry", retry), ("next call", next)] {
                println!(
                    "{:<10} {:>9} {:<14} {:>10} {:>7.1} µs {:>10} ({:>4.1}×) {:>8} {:>10} ({:>4.1}×)",
                    wire.name(),
                    agent.history.len(),
                    path,
                    kb(body),
                    figures.time.as_secs_f64() * 1e6,
                    kb(figures.bytes),
                    figures.bytes as f64 / body as f64,
                    figures.allocs,
                    kb(figures.peak),
                    figures.peak as f64 / body as f64,
                );
            }
        }
    }
}
