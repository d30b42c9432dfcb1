//! MCP pool benchmark: what deputy adds to a warm-path tool call on an external MCP server, and
//! what the idle pool saves over a cold spawn.
//!
//! - **warm path**: `everything__echo` through a session's `ToolScope` (namespacing, the
//!   `McpTool`, the shared `McpConnection`, rendering) vs the same call with a bare rmcp client
//!   on its own process of the same server. Calls alternate between the two, so drift in the
//!   machine's load hits both.
//! - **cold vs revival**: `McpFactory::acquire` of a server nobody runs (spawn, `initialize`,
//!   `tools/list`) vs of one parked in the idle pool.
//!
//! The server is `@modelcontextprotocol/server-everything` from `tests/mcp-servers` (installed
//! by `tests/mcp-servers/install.sh`, which this runs if needed). Figures are printed, never
//! asserted. Run with `cargo bench --bench mcp_pool`; `DEPUTY_BENCH_CALLS` (default 2000) and
//! `DEPUTY_BENCH_SPAWNS` (default 5).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use deputy::tools::ToolScope;
use deputy::tools::mcp::{McpFactory, McpServerSpec, McpTransport, Reach, session_tools};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::transport::TokioChildProcess;
use rmcp::{ServiceExt, object};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn everything_bin() -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("mcp-servers");
    let bin = dir.join("node_modules").join(".bin").join("mcp-server-everything");
    if !bin.exists() {
        let status = std::process::Command::new("bash").arg(dir.join("install.sh")).status().unwrap();
        assert!(status.success(), "run tests/mcp-servers/install.sh (needs node >= 20 and npm)");
    }
    bin.to_string_lossy().into_owned()
}

fn spec(command: &str, tag: usize) -> McpServerSpec {
    McpServerSpec {
        name: "everything".into(),
        transport: McpTransport::Stdio {
            command: command.into(),
            args: vec!["stdio".into()],
            // A distinct env per tag is a distinct key: a fresh server.
            env: BTreeMap::from([("DEPUTY_BENCH_TAG".to_owned(), tag.to_string().into())]),
        },
        idle_timeout_secs: None,
        call_timeout_secs: None,
        unconfined: false,
    }
}

struct Summary {
    mean: Duration,
    p50: Duration,
    p99: Duration,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let total: Duration = samples.iter().sum();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    Summary { mean: total / samples.len() as u32, p50: at(0.50), p99: at(0.99) }
}

fn micros(duration: Duration) -> String {
    format!("{:.1} µs", duration.as_secs_f64() * 1e6)
}

fn millis(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let command = everything_bin();
    let calls = env_count("DEPUTY_BENCH_CALLS", 2000);
    let spawns = env_count("DEPUTY_BENCH_SPAWNS", 5);

    // Warm path.
    let factory = McpFactory::default();
    let scope = ToolScope::new(session_tools(&factory, &[spec(&command, 0)], |_| Reach::Any).await.unwrap());
    let config = ClientConfig::new(ClientCapabilities::default(), Implementation::new("bench", "0"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
    let (transport, _stderr) = TokioChildProcess::builder(tokio::process::Command::new(&command))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let direct = config.serve(transport).await.unwrap();
    let params = || CallToolRequestParams::new("echo").with_arguments(object!({"message": "ping"}));
    for _ in 0..200 {
        scope.call("everything__echo", json!({"message": "ping"}), CancellationToken::new()).await;
        direct.call_tool(params()).await.unwrap();
    }
    let (mut via_deputy, mut via_rmcp) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for _ in 0..calls {
        let start = Instant::now();
        let output = scope.call("everything__echo", json!({"message": "ping"}), CancellationToken::new()).await;
        via_deputy.push(start.elapsed());
        assert_eq!(output.content, "Echo: ping");
        let start = Instant::now();
        direct.call_tool(params()).await.unwrap();
        via_rmcp.push(start.elapsed());
    }
    let (deputy, rmcp) = (summarize(via_deputy), summarize(via_rmcp));
    println!("warm-path tool call, {calls} calls each (echo on server-everything over stdio)");
    println!("  {:<28} {:>10} {:>10} {:>10}", "", "mean", "p50", "p99");
    println!(
        "  {:<28} {:>10} {:>10} {:>10}",
        "direct rmcp client",
        micros(rmcp.mean),
        micros(rmcp.p50),
        micros(rmcp.p99)
    );
    println!(
        "  {:<28} {:>10} {:>10} {:>10}",
        "through deputy's ToolScope",
        micros(deputy.mean),
        micros(deputy.p50),
        micros(deputy.p99)
    );
    let added = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1e6;
    println!(
        "  added by deputy: mean {:+.1} µs, p50 {:+.1} µs (target < 1000 µs)",
        added(deputy.mean, rmcp.mean),
        added(deputy.p50, rmcp.p50)
    );
    drop(direct);
    drop(scope);

    // Cold spawn vs revival from the idle pool.
    let (mut cold, mut revived) = (Vec::new(), Vec::new());
    for tag in 1..=spawns {
        let spec = spec(&command, tag);
        let start = Instant::now();
        let connection = factory.acquire(&spec).await.unwrap();
        cold.push(start.elapsed());
        drop(connection);
        let start = Instant::now();
        let connection = factory.acquire(&spec).await.unwrap();
        revived.push(start.elapsed());
        drop(connection);
    }
    let stats = factory.stats();
    let (cold, revived) = (summarize(cold), summarize(revived));
    println!("acquire, {spawns} servers (spawned {} in all, revived {})", stats.spawned, stats.revived);
    println!(
        "  cold spawn (spawn + initialize + tools/list): mean {}, p50 {}",
        millis(cold.mean),
        millis(cold.p50)
    );
    println!(
        "  revival from the idle pool:                  mean {}, p50 {}",
        micros(revived.mean),
        micros(revived.p50)
    );
    factory.shutdown();
}
