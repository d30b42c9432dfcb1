//! Comms benchmark: how long a message takes from `send` to the receiving host session's
//! auto-turn starting (its model request arriving at the provider), in one process and across
//! two deputy servers.
//!
//! In-process: `SessionService::send` to an idle host session of the same service. Across two
//! servers: two services, each behind its own HTTP router on a loopback port (what `deputy
//! serve --http` builds), the sender's [`RemotePeers`] calling the receiver's `session_send` over
//! MCP streamable HTTP (pooled, as `send_message {to: "b:bob"}` does). The providers are
//! zero-latency scripted ones, so every microsecond is deputy's. Figures are printed, never
//! asserted.
//!
//! Run with `cargo bench --bench comms`; `DEPUTY_BENCH_MESSAGES` (default 300) per case.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deputy::agent::{AgentFactory, InboxLimits};
use deputy::caller::Caller;
use deputy::ids::SessionId;
use deputy::llm::ContentBlock;
use deputy::llm::registry::ProviderRegistry;
use deputy::llm::scripted::{ScriptedProvider, ScriptedResponse};
use deputy::peers::{PeerServerConfig, RemotePeers};
use deputy::session::{
    CallerServices, CreateSessionRequest, LiveSessionService, PerCaller, SendRequest, SessionService,
};
use deputy::surfaces::http::{HttpConfig, router};
use deputy::tools::comms::Outgoing;
use deputy::tools::mcp::McpFactory;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}

/// A service whose provider answers at once and reports every request that carries mail.
fn service() -> (Arc<LiveSessionService>, mpsc::UnboundedReceiver<Instant>) {
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let provider = ScriptedProvider::responding(move |request| {
        let mail = request.messages.last().is_some_and(|message| {
            message
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::Text { text } if text.starts_with("[message ")))
        });
        if mail {
            let _ = arrived.send(Instant::now());
        }
        ScriptedResponse::text(&["ok"])
    });
    let mut registry = ProviderRegistry::new();
    registry.insert("bench", provider);
    let factory = AgentFactory::new(Arc::new(registry), Some("bench:zero-latency".into()), None);
    // Every message starts a turn: no cap on auto-turns between caller turns here.
    let limits = InboxLimits { max_auto_turns: u32::MAX, ..InboxLimits::default() };
    (LiveSessionService::new(factory, None).with_inbox_limits(limits).into_shared(), arrivals)
}

fn host(name: &str) -> CreateSessionRequest {
    CreateSessionRequest {
        prompt: "stand by".into(),
        host_mode: Some(true),
        name: Some(name.into()),
        peer_group: Some("team".into()),
        ..CreateSessionRequest::default()
    }
}

fn report(case: &str, mut times: Vec<Duration>) {
    times.sort();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "{case:<28} {:>10} {:>10} {:>10}",
        us(percentile(&times, 0.5)),
        us(percentile(&times, 0.99)),
        us(mean)
    );
}

fn main() {
    let messages: usize = std::env::var("DEPUTY_BENCH_MESSAGES").ok().and_then(|n| n.parse().ok()).unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run(messages));
}

async fn run(messages: usize) {
    println!("deputy comms bench: send → the receiving host session's auto-turn reaching its provider");
    println!("({messages} messages per case after 20 warm-up, one at a time, zero-latency providers)");
    println!();
    println!("{:<28} {:>10} {:>10} {:>10}", "case", "p50", "p99", "mean");

    // In one process.
    let (local, mut arrivals) = service();
    let bob = local.create_session(host("bob")).await.unwrap().session_id;
    let mut times = Vec::with_capacity(messages);
    for n in 0..messages + 20 {
        let started = Instant::now();
        let request = SendRequest { body: format!("message {n}"), ..SendRequest::default() };
        local.send(&bob, request).await.unwrap();
        let arrived = arrivals.recv().await.unwrap();
        // Let the turn end, so the next message starts a turn rather than queueing.
        local.read(&bob, Some(Duration::from_secs(10))).await.unwrap();
        if n >= 20 {
            times.push(arrived - started);
        }
    }
    report("in-process", times);

    // Across two servers: the receiver behind HTTP, the sender's peer client pooled.
    let (receiver, mut arrivals) = service();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let services = Arc::new(PerCaller::new(receiver, deputy::policy::Surface::Http));
    let app = router(services.clone(), &HttpConfig::new(address), CancellationToken::new());
    tokio::spawn(async move { axum::serve(listener, app).await });
    // Loopback without a token: the sender arrives as the anonymous caller, who owns `bob`.
    let remote_bob =
        services.for_caller(&Caller::anonymous()).create_session(host("bob")).await.unwrap().session_id;
    let peers = BTreeMap::from([(
        "b".to_owned(),
        PeerServerConfig { url: format!("http://{address}/mcp"), token_env: None, owners: None },
    )]);
    let remote = RemotePeers::new(&peers, Arc::new(McpFactory::default()), |_| None).unwrap();
    let reader = services.for_caller(&Caller::anonymous());
    let mut times = Vec::with_capacity(messages);
    for n in 0..messages + 20 {
        let outgoing = Outgoing {
            from: SessionId::from_string("alice"),
            to: "b:bob".into(),
            body: format!("message {n}"),
            in_reply_to: None,
            hops: 1,
        };
        let started = Instant::now();
        remote.send("b", "bob", "team", &outgoing, Some("alice"), "local").await.unwrap();
        let arrived = arrivals.recv().await.unwrap();
        reader.read(&remote_bob, Some(Duration::from_secs(10))).await.unwrap();
        if n >= 20 {
            times.push(arrived - started);
        }
    }
    report("across two servers (/mcp)", times);
}
