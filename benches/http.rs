//! HTTP benchmark: what deputy adds to a `session_turn` round trip over `/mcp`, REST and
//! JSON-RPC, how many turns per second it serves with 64 sessions at once, and what a
//! `tasks/get` on a finished MCP task costs (a client of the tasks extension polling).
//!
//! The server runs in this process on a loopback port (the same router `deputy serve --http`
//! builds) over a zero-latency scripted provider, so every microsecond measured is deputy's:
//! HTTP parsing, MCP/JSON-RPC framing, the session actor, the agent loop, the reply. The clients
//! are the rmcp client (`/mcp`) and reqwest (REST, JSON-RPC). Figures are printed, never asserted.
//!
//! Then, in memory (no HTTP): what structured output adds to a turn. The same JSON answer comes
//! back plain, as validated text (OpenAI's way), as a final-answer tool call (Anthropic's way),
//! and with the schema given (and so compiled) by each turn; the difference to plain is the
//! parsing, validation, final-tool bookkeeping and compiling, the model excluded.
//!
//! Run with `cargo bench --bench http`. `DEPUTY_BENCH_TURNS` (sequential turns per surface and
//! per structured-output case, default 500) and `DEPUTY_BENCH_SECONDS` (throughput window per
//! surface, default 3); `DEPUTY_BENCH_ONLY=structured` runs the structured-output part alone.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deputy::agent::{AgentFactory, OutputContract};
use deputy::caller::Caller;
use deputy::ids::SessionId;
use deputy::llm::ContentBlock;
use deputy::llm::registry::ProviderRegistry;
use deputy::llm::scripted::{Gate, ScriptedProvider, ScriptedResponse};
use deputy::llm::{EventStream, FINAL_ANSWER_TOOL, LlmError, ModelRequest, Provider};
use deputy::session::{
    CallerServices, CreateSessionRequest, LiveSessionService, PerCaller, SessionService, TurnRequest,
};

use deputy::surfaces::http::{HttpConfig, router};
use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams, Implementation,
    ProtocolVersion, TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SESSIONS: usize = 64;

#[derive(Clone, Copy, Debug)]
enum Surface {
    Mcp,
    Rest,
    JsonRpc,
}

struct Clients {
    base: String,
    http: reqwest::Client,
    mcp: RunningService<RoleClient, ClientConfig>,
}

impl Clients {
    async fn turn(&self, surface: Surface, id: &SessionId) {
        match surface {
            Surface::Mcp => {
                let arguments = json!({"session_id": id, "prompt": "go"}).as_object().unwrap().clone();
                let result = self
                    .mcp
                    .call_tool(CallToolRequestParams::new("session_turn").with_arguments(arguments))
                    .await
                    .unwrap();
                assert_ne!(result.is_error, Some(true), "{result:?}");
            }
            Surface::Rest => {
                let url = format!("{}/v1/sessions/{id}/turns", self.base);
                let response = self.http.post(url).json(&json!({"prompt": "go"})).send().await.unwrap();
                assert!(response.status().is_success(), "{}", response.status());
                response.bytes().await.unwrap();
            }
            Surface::JsonRpc => {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "turn/start",
                                  "params": {"session_id": id, "prompt": "go"}});
                let response = self.http.post(format!("{}/rpc", self.base)).json(&body).send().await.unwrap();
                let reply: serde_json::Value = response.json().await.unwrap();
                assert!(reply.get("result").is_some(), "{reply}");
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}

fn main() {
    let turns: usize = std::env::var("DEPUTY_BENCH_TURNS").ok().and_then(|n| n.parse().ok()).unwrap_or(500);
    let seconds: u64 = std::env::var("DEPUTY_BENCH_SECONDS").ok().and_then(|n| n.parse().ok()).unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run(turns, seconds));
}

async fn run(turns: usize, seconds: u64) {
    if std::env::var("DEPUTY_BENCH_ONLY").as_deref() == Ok("structured") {
        return structured(turns).await;
    }
    // The prompt "slow" waits for `gate`: the one turn that outlives the tasks grace.
    let gate = Gate::new();
    let held = gate.clone();
    let provider = ScriptedProvider::responding(move |request| {
        let slow = request.messages.last().is_some_and(|message| {
            message.content.iter().any(|block| matches!(block, ContentBlock::Text { text } if text == "slow"))
        });
        if slow {
            ScriptedResponse::text(&["done"]).pause_before(0, &held)
        } else {
            ScriptedResponse::text(&["ok"])
        }
    });
    let mut registry = ProviderRegistry::new();
    registry.insert("bench", provider);
    let factory = AgentFactory::new(Arc::new(registry), Some("bench:zero-latency".into()), None);
    let service = Arc::new(LiveSessionService::new(factory, None));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    // Loopback without a token: every request is the anonymous caller, who owns the sessions.
    let services = Arc::new(PerCaller::new(service, deputy::policy::Surface::Http));
    let app = router(services.clone(), &HttpConfig::new(address), shutdown.child_token());
    let service = services.for_caller(&Caller::anonymous());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut sessions = Vec::new();
    for n in 0..SESSIONS {
        let request = CreateSessionRequest { prompt: format!("session {n}"), ..CreateSessionRequest::default() };
        sessions.push(service.create_session(request).await.unwrap().session_id);
    }
    let config = ClientConfig::new(ClientCapabilities::default(), Implementation::new("bench", "0"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
    let mcp = config.serve(StreamableHttpClientTransport::from_uri(format!("http://{address}/mcp"))).await.unwrap();
    let clients = Arc::new(Clients { base: format!("http://{address}"), http: reqwest::Client::new(), mcp });

    println!(
        "deputy HTTP bench: zero-latency scripted provider, server and clients in one process, {} cores",
        cores()
    );
    println!();
    println!("Round trip of one session_turn ({turns} sequential turns after 50 warm-up):");
    println!("{:<10} {:>10} {:>10} {:>10}", "surface", "p50", "p99", "mean");
    for surface in [Surface::Mcp, Surface::Rest, Surface::JsonRpc] {
        for _ in 0..50 {
            clients.turn(surface, &sessions[0]).await;
        }
        let mut times = Vec::with_capacity(turns);
        for _ in 0..turns {
            let started = Instant::now();
            clients.turn(surface, &sessions[0]).await;
            times.push(started.elapsed());
        }
        times.sort();
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        println!(
            "{:<10} {:>10} {:>10} {:>10}",
            format!("{surface:?}"),
            us(percentile(&times, 0.5)),
            us(percentile(&times, 0.99)),
            us(mean)
        );
    }
    println!();
    println!("Throughput with {SESSIONS} sessions, one client task each, {seconds} s per surface:");
    for surface in [Surface::Mcp, Surface::Rest, Surface::JsonRpc] {
        let done = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let tasks: Vec<_> = sessions
            .iter()
            .cloned()
            .map(|id| {
                let (clients, done) = (clients.clone(), done.clone());
                tokio::spawn(async move {
                    while Instant::now() < deadline {
                        clients.turn(surface, &id).await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let total = done.load(Ordering::Relaxed);
        println!("  {:<8} {:>8.0} turns/s ({total} turns)", format!("{surface:?}"), total as f64 / seconds as f64);
    }
    tasks(&address.to_string(), &sessions[0], &gate, turns).await;
    shutdown.cancel();
    structured(turns).await;
}

/// A forecast: nested objects and arrays, the shape of a typical extraction schema.
fn forecast_schema() -> serde_json::Value {
    json!({
        "type": "object", "additionalProperties": false, "required": ["city", "days"],
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": false, "required": ["day", "high", "low", "tags"],
                "properties": {
                    "day": {"type": "string", "enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
                    "high": {"type": "number"}, "low": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                }
            }}
        }
    })
}

fn forecast() -> serde_json::Value {
    let days: Vec<_> = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
        .iter()
        .enumerate()
        .map(|(n, day)| json!({"day": day, "high": 3.5 + n as f64, "low": -2, "tags": ["wind", "rain"]}))
        .collect();
    json!({"city": "Oslo", "days": days})
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Case {
    /// No schema; the same JSON comes back as plain text.
    Plain,
    /// The session's schema; the answer is text, parsed and validated.
    Text,
    /// The session's schema; the answer is a final-answer tool call, validated and answered.
    Tool,
    /// Like `Text`, with the schema given by every turn (compiled per turn).
    TextSchemaPerTurn,
}

/// Answers every request at once and keeps nothing (the scripted provider records every
/// request, whose growing memory would be counted in the turns).
struct Answering(Box<dyn Fn() -> ScriptedResponse + Send + Sync>);

impl std::fmt::Debug for Answering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Answering")
    }
}

impl Provider for Answering {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        let response = (self.0)();
        Box::pin(async move { ScriptedProvider::new([response]).stream(request).await })
    }
}

/// Plain vs structured turns in memory: the service called directly, a zero-latency provider.
/// Sessions of 25 turns (`DEPUTY_BENCH_SESSION_TURNS`), so the history (cloned into every
/// request) stays small.
async fn structured(turns: usize) {
    let answer = forecast().to_string();
    let mut registry = ProviderRegistry::new();
    let text = answer.clone();
    registry.insert("text", Arc::new(Answering(Box::new(move || ScriptedResponse::text(&[&text])))));
    let input = forecast();
    let call = move || ScriptedResponse::tool_calls(&[("f", FINAL_ANSWER_TOOL, input.clone())]);
    registry.insert("tool", Arc::new(Answering(Box::new(call))));
    let factory = AgentFactory::new(Arc::new(registry), None, None);
    let service = LiveSessionService::new(factory, None);
    println!();
    println!(
        "In memory, plain vs structured turn ({turns} turns per case after 50 warm-up, sessions of {} turns, \
         answer {} bytes of JSON):",
        session_turns(),
        answer.len()
    );
    println!("{:<22} {:>10} {:>10} {:>10} {:>12}", "case", "p50", "p99", "mean", "mean - plain");
    let mut plain_mean = None;
    for case in [Case::Plain, Case::Text, Case::Tool, Case::TextSchemaPerTurn] {
        let times = structured_case(&service, case, turns).await;
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        let plain = *plain_mean.get_or_insert(mean);
        println!(
            "{:<22} {:>10} {:>10} {:>10} {:>12}",
            format!("{case:?}"),
            us(percentile(&times, 0.5)),
            us(percentile(&times, 0.99)),
            us(mean),
            format!("{:+.0} µs", (mean.as_secs_f64() - plain.as_secs_f64()) * 1e6)
        );
    }
    // The validation work alone, without the loop around it.
    let schema = forecast_schema();
    let each = |runs: u32, work: &mut dyn FnMut()| {
        let started = Instant::now();
        for _ in 0..runs {
            work();
        }
        started.elapsed() / runs
    };
    let compile = each(2_000, &mut || {
        std::hint::black_box(OutputContract::compile(schema.clone(), None).unwrap());
    });
    let contract = OutputContract::compile(schema.clone(), None).unwrap();
    let parse_and_check = each(20_000, &mut || {
        let value = contract.parse_text(&answer).unwrap();
        contract.check(&value).unwrap();
        std::hint::black_box(value);
    });
    println!(
        "alone: compiling the schema {:.1} µs, parsing + validating the answer {:.1} µs",
        compile.as_secs_f64() * 1e6,
        parse_and_check.as_secs_f64() * 1e6
    );
}

async fn structured_case(service: &LiveSessionService, case: Case, turns: usize) -> Vec<Duration> {
    let session_schema = matches!(case, Case::Text | Case::Tool).then(forecast_schema);
    let mut times = Vec::with_capacity(turns);
    let mut session = None;
    for n in 0..turns + 50 {
        if n % session_turns() == 0 {
            // Without a store the live set is bounded: the finished session goes.
            if let Some(done) = session.take() {
                service.archive(&done).await.unwrap();
            }
            let mut request = CreateSessionRequest { prompt: "start".into(), ..CreateSessionRequest::default() };
            request.build.model = Some(if case == Case::Tool { "tool:m" } else { "text:m" }.into());
            request.build.output_schema = session_schema.clone();
            session = Some(service.create_session(request).await.unwrap().session_id);
        }
        let id = session.as_ref().unwrap();
        let request = TurnRequest {
            prompt: "go".into(),
            output_schema: (case == Case::TextSchemaPerTurn).then(forecast_schema),
            ..TurnRequest::default()
        };
        let started = Instant::now();
        let result = service.start_turn(id, request).await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(result.structured_output.is_some(), case != Case::Plain, "{case:?}: {result:?}");
        if n >= 50 {
            times.push(elapsed);
        }
    }
    times.sort();
    times
}

fn session_turns() -> usize {
    std::env::var("DEPUTY_BENCH_SESSION_TURNS").ok().and_then(|n| n.parse().ok()).filter(|&n| n > 0).unwrap_or(25)
}

/// A client of the tasks extension: one turn held past the grace becomes a task; once it has
/// finished, `turns` sequential `tasks/get` on it (after 50 warm-up).
async fn tasks(address: &str, id: &SessionId, gate: &Gate, turns: usize) {
    let config =
        ClientConfig::new(ClientCapabilities::builder().enable_tasks().build(), Implementation::new("bench", "0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
    let client =
        config.serve(StreamableHttpClientTransport::from_uri(format!("http://{address}/mcp"))).await.unwrap();
    let arguments = json!({"session_id": id, "prompt": "slow"}).as_object().unwrap().clone();
    let started = Instant::now();
    let response =
        client.call_tool_once(CallToolRequestParams::new("session_turn").with_arguments(arguments)).await.unwrap();
    let CallToolResponse::Task(created) = response else { panic!("expected a task: {response:?}") };
    let answered = started.elapsed();
    gate.open();
    let get = || client.get_task(GetTaskParams::new(created.task.task_id.clone()));
    while get().await.unwrap().task.task.status != TaskStatus::Completed {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..50 {
        get().await.unwrap();
    }
    let mut times = Vec::with_capacity(turns);
    for _ in 0..turns {
        let started = Instant::now();
        let got = get().await.unwrap();
        times.push(started.elapsed());
        assert_eq!(got.task.task.status, TaskStatus::Completed);
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!();
    println!(
        "MCP Tasks: tools/call answered with a task after {:.0} ms (the 2 s grace)",
        answered.as_secs_f64() * 1e3
    );
    println!(
        "tasks/get on a finished task ({turns} sequential after 50 warm-up): p50 {}  p99 {}  mean {}",
        us(percentile(&times, 0.5)),
        us(percentile(&times, 0.99)),
        us(mean)
    );
}

fn cores() -> usize {
    std::thread::available_parallelism().map(usize::from).unwrap_or(1)
}
