//! HTTP benchmark: what deputy adds to a `session_turn` round trip over `/mcp`, REST and
//! JSON-RPC, how many turns per second it serves with 64 sessions at once, and what a
//! `tasks/get` on a finished MCP task costs (a client of the tasks extension polling).
//!
//! The server runs in this process on a loopback port (the same router `deputy serve --http`
//! builds) over a zero-latency scripted provider, so every microsecond measured is deputy's:
//! HTTP parsing, MCP/JSON-RPC framing, the session actor, the agent loop, the reply. The clients
//! are the rmcp client (`/mcp`) and reqwest (REST, JSON-RPC). Figures are printed, never asserted.
//!
//! Run with `cargo bench --bench http`. `DEPUTY_BENCH_TURNS` (sequential turns per surface,
//! default 500) and `DEPUTY_BENCH_SECONDS` (throughput window per surface, default 3).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deputy::agent::AgentFactory;
use deputy::caller::Caller;
use deputy::ids::SessionId;
use deputy::llm::ContentBlock;
use deputy::llm::registry::ProviderRegistry;
use deputy::llm::scripted::{Gate, ScriptedProvider, ScriptedResponse};
use deputy::session::{CallerServices, CreateSessionRequest, LiveSessionService, PerCaller, SessionService};

use deputy::surfaces::http::{HttpConfig, router};
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
    let services = Arc::new(PerCaller::new(service, deputy::tools::Surface::Http));
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
