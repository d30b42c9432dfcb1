//! Load benchmark (issue 31): turns per second and turn latency of many sessions driven at once
//! against one deputy with a durable (redb) store, with a provider that answers every request
//! after 50 ms — over HTTP (1,000 sessions) and over stdio (100 sessions, one MCP client).
//!
//! Everything is native: this process is the load generator (one task per session, each
//! session's turns back to back) and the provider (an Anthropic Messages stream after its
//! delay); deputy is the built binary. The ideal is sessions / latency (20,000 turns/s for
//! 1,000 sessions at 50 ms); what is printed is what this machine does, beside the cost of one
//! 4 KiB write and fdatasync on the store's disk, measured in the same run, and the CPU time
//! deputy ran in the window per turn (what a turn costs it, whatever else shares the machine),
//! beside the same of this process (`bench ms/turn`: the generator and the provider, which
//! share deputy's cores). Figures are printed, never asserted.
//!
//! Then one session's turns one at a time over stdio with a provider answering at once, in
//! memory and durable: what the store adds to a turn, against that flush.
//!
//! Run with `cargo bench --bench load`. `DEPUTY_BENCH_SESSIONS` (1000),
//! `DEPUTY_BENCH_STDIO_SESSIONS` (100), `DEPUTY_BENCH_SECONDS` (measured window per run, 10,
//! after `DEPUTY_BENCH_WARMUP_SECONDS`, 5),
//! `DEPUTY_BENCH_LATENCY_MS` (50), `DEPUTY_BENCH_TURNS` (one-at-a-time turns, 500);
//! `DEPUTY_BENCH_PARTS` picks parts (`http,stdio,sequential`).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Figures, HttpServer, Window, create_over_http, deputy, drive, setting, start_provider, turn_over_http,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let sessions: usize = setting("DEPUTY_BENCH_SESSIONS", 1000);
    let stdio_sessions: usize = setting("DEPUTY_BENCH_STDIO_SESSIONS", 100);
    let window = Window::from_env();
    let latency = Duration::from_millis(setting("DEPUTY_BENCH_LATENCY_MS", 50));
    let home = tempfile::tempdir().unwrap();
    let provider = start_provider(latency).await;

    let flush = flush_cost(home.path());
    println!(
        "load: provider latency {} ms, {window}, {} cores; a 4 KiB write + fdatasync here: p50 {:.3} ms; \
         deputy: {}",
        latency.as_millis(),
        std::thread::available_parallelism().map_or(0, usize::from),
        flush.as_secs_f64() * 1e3,
        support::deputy_binary().display()
    );
    let parts: String = setting("DEPUTY_BENCH_PARTS", "http,stdio,sequential".to_owned());
    if parts.contains("http") || parts.contains("stdio") {
        println!("{}", Figures::header("durable (redb)"));
    }
    if parts.contains("http") {
        over_http(&provider, home.path(), sessions, window).await;
    }
    if parts.contains("stdio") {
        over_stdio(&provider, home.path(), stdio_sessions, window).await;
    }
    if parts.contains("sequential") {
        one_at_a_time(home.path(), flush).await;
    }
}

/// `sessions` sessions over HTTP against one `deputy serve --http` on a redb file.
async fn over_http(provider: &str, home: &std::path::Path, sessions: usize, window: Window) {
    let store = home.join("http.redb");
    let server = HttpServer::spawn(store.to_str().unwrap(), provider, home);
    let http = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(sessions).build().unwrap();
    server.wait_ready(&http).await;
    let bases = vec![server.base.clone()];
    let ids = create_over_http(&http, &bases, sessions).await;
    let base = server.base.clone();
    let figures = drive(ids, window, &[server.pid()], move |id| {
        let (http, base) = (http.clone(), base.clone());
        async move { turn_over_http(&http, &base, &id).await }
    })
    .await;
    println!("{}", figures.row(&format!("HTTP, {sessions} sessions")));
}

/// `sessions` sessions over one MCP client's stdio, `deputy serve --no-daemon` on a redb file.
async fn over_stdio(provider: &str, home: &std::path::Path, sessions: usize, window: Window) {
    let mut command = deputy(provider, home);
    command.args(["serve", "--no-daemon", "--store", home.join("stdio.redb").to_str().unwrap()]);
    let client = StdioClient::spawn(command).await;
    let ids = futures::future::join_all((0..sessions).map(|_| {
        let client = client.clone();
        async move { client.call("session_create", json!({"prompt": "hi", "wait_ms": 60_000})).await.unwrap() }
    }))
    .await;
    let ids = ids.iter().map(|created| created["session_id"].as_str().unwrap().to_owned()).collect();
    let pid = client.child.id().expect("deputy runs");
    let figures = drive(ids, window, &[pid], move |id| {
        let client = client.clone();
        async move {
            let turn = json!({"session_id": id, "prompt": "go", "wait_ms": 60_000});
            client.call("session_turn", turn).await.is_some_and(|answer| answer["status"] == "completed")
        }
    })
    .await;
    println!("{}", figures.row(&format!("stdio, {sessions} sessions")));
}

/// Turns one at a time over stdio (sessions of 10 turns), with a provider answering at once:
/// in memory and durable. Their difference is what the store adds to a turn, against the flush.
async fn one_at_a_time(home: &std::path::Path, flush: Duration) {
    let turns: usize = setting("DEPUTY_BENCH_TURNS", 500);
    let provider = start_provider(Duration::ZERO).await;
    let probe = reqwest::Client::builder().no_proxy().build().unwrap();
    println!("\n{turns} turns one at a time over stdio (10 per session), the provider answering at once");
    println!(
        "{:<28} {:>10} {:>10} {:>12} {:>12} {:>14} {:>10} {:>10}",
        "", "turn p50", "turn p99", "stdio ping", "provider", "deputy adds", "flush", "CPU"
    );
    let mut flush_probe = std::fs::File::create(home.join("flush-probe-beside")).unwrap();
    let durable = home.join("sequential.redb");
    let mut summaries = Vec::new();
    for (label, store) in [("in memory (--ephemeral)", None), ("durable (redb)", Some(&durable))] {
        let mut command = deputy(&provider, home);
        command.args(["serve", "--no-daemon"]);
        match store {
            Some(path) => command.args(["--store", path.to_str().unwrap()]),
            None => command.arg("--ephemeral"),
        };
        let client = StdioClient::spawn(command).await;
        let mut times = Floors::default();
        let mut id = String::new();
        for n in 0..turns + turns / 10 {
            // A new session every 10 turns: the cost of a turn, not of a history grown long. The
            // last one is archived, so the live sessions stay within the server's bound.
            if n % 10 == 0 {
                if !id.is_empty() {
                    client.call("session_archive", json!({"session_id": id})).await.unwrap();
                }
                let created = client.call("session_create", json!({"prompt": "hi", "wait_ms": 60_000})).await;
                id = created.unwrap()["session_id"].as_str().unwrap().to_owned();
            }
            // The floors, measured beside each turn: an MCP `ping` over the same pipe (the
            // client, the framing and the wake-ups every request pays) and one exchange with the
            // provider from here (its HTTP and stream, which any server pays for a model call).
            let started = Instant::now();
            let pong = client.request("ping", json!({})).await;
            assert!(pong.get("result").is_some(), "{pong}");
            let ping = started.elapsed();
            let started = Instant::now();
            provider_exchange(&probe, &provider).await;
            let exchange = started.elapsed();
            // And the disk's flush, beside each turn too: its cost moves from minute to minute.
            let flush = tokio::task::block_in_place(|| flush_once(&mut flush_probe));
            let cpu_before = client.cpu();
            let started = Instant::now();
            let turn = json!({"session_id": id, "prompt": "go", "wait_ms": 60_000});
            let answer = client.call("session_turn", turn).await.unwrap();
            assert_eq!(answer["status"], "completed", "{answer}");
            let elapsed = started.elapsed();
            if n >= turns / 10 {
                times.push(elapsed, ping, exchange, flush, client.cpu().saturating_sub(cpu_before));
            }
        }
        let summary = times.summary();
        let Summary { turn, turn_p99, ping, exchange, added: adds, flush, cpu } = summary;
        println!(
            "{label:<28} {turn:>10.3} {turn_p99:>10.3} {ping:>12.3} {exchange:>12.3} {adds:>14.3} {flush:>10.3} \
             {cpu:>10.3}"
        );
        summaries.push(summary);
    }
    let store = summaries[1].added - summaries[0].added;
    println!(
        "(ms, p50s; \"deputy adds\" is the median over turns of the turn less the ping and the provider \
         exchange measured beside it, \"flush\" a 4 KiB write + fdatasync beside each turn, \"CPU\" the \
         time deputy's threads ran during the turn; the probe before the run: {:.3} ms)\nthe store adds, \
         p50: {store:.3} ms = {:.1} × the flush measured beside the durable turns",
        flush.as_secs_f64() * 1e3,
        store / summaries[1].flush
    );
}

/// One model call's worth of talking to the provider, from this process: what a turn pays the
/// provider whoever sends the request.
async fn provider_exchange(http: &reqwest::Client, provider: &str) {
    let body = json!({"model": "bench", "max_tokens": 64, "stream": true,
                      "messages": [{"role": "user", "content": "go"}]});
    let response = http.post(format!("{provider}/v1/messages")).json(&body).send().await.unwrap();
    let stream = response.bytes().await.unwrap();
    assert!(stream.ends_with(b"\n\n"), "a whole event stream");
}

/// Each measured turn beside the floors measured with it.
#[derive(Default)]
struct Floors {
    turns: Vec<Duration>,
    pings: Vec<Duration>,
    exchanges: Vec<Duration>,
    flushes: Vec<Duration>,
    cpu: Vec<Duration>,
    added: Vec<f64>,
}

/// [`Floors`] in milliseconds: p50s, and the turn's p99.
struct Summary {
    turn: f64,
    turn_p99: f64,
    ping: f64,
    exchange: f64,
    /// The median of each turn less its ping and exchange: what deputy adds.
    added: f64,
    flush: f64,
    /// The CPU time of deputy's threads during the turn, which its wall time cannot go below
    /// where the work is sequential: steadier than the wall times on a shared machine.
    cpu: f64,
}

impl Floors {
    fn push(&mut self, turn: Duration, ping: Duration, exchange: Duration, flush: Duration, cpu: Duration) {
        self.flushes.push(flush);
        self.cpu.push(cpu);
        self.added.push(turn.as_secs_f64() - ping.as_secs_f64() - exchange.as_secs_f64());
        self.turns.push(turn);
        self.pings.push(ping);
        self.exchanges.push(exchange);
    }

    fn summary(mut self) -> Summary {
        fn at(times: &mut [Duration], quantile: f64) -> f64 {
            times.sort_unstable();
            times[((times.len() as f64 - 1.0) * quantile) as usize].as_secs_f64() * 1e3
        }
        self.added.sort_unstable_by(f64::total_cmp);
        let added = self.added[self.added.len() / 2] * 1e3;
        Summary {
            turn: at(&mut self.turns, 0.5),
            turn_p99: at(&mut self.turns, 0.99),
            ping: at(&mut self.pings, 0.5),
            exchange: at(&mut self.exchanges, 0.5),
            added,
            flush: at(&mut self.flushes, 0.5),
            cpu: at(&mut self.cpu, 0.5),
        }
    }
}

/// The median of 200 writes of 4 KiB, each followed by `fdatasync`, in `dir`.
fn flush_cost(dir: &std::path::Path) -> Duration {
    let mut file = std::fs::File::create(dir.join("flush-probe")).unwrap();
    let mut times: Vec<Duration> = (0..200).map(|_| flush_once(&mut file)).collect();
    times.sort_unstable();
    times[times.len() / 2]
}

/// One 4 KiB write followed by `fdatasync`.
fn flush_once(file: &mut std::fs::File) -> Duration {
    let started = Instant::now();
    file.write_all(&[7u8; 4096]).unwrap();
    file.sync_data().unwrap();
    started.elapsed()
}

/// One MCP client over a `deputy serve` process's stdio: requests written as JSON-RPC lines,
/// answers routed back to their callers by id, so many calls are in flight at once.
#[derive(Clone)]
struct StdioClient {
    writer: Arc<tokio::sync::Mutex<tokio::process::ChildStdin>>,
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>,
    next_id: Arc<AtomicU64>,
    child: Arc<tokio::process::Child>,
}

impl StdioClient {
    async fn spawn(command: std::process::Command) -> Self {
        let mut child = tokio::process::Command::from(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the deputy binary");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>> = Arc::default();
        let routes = waiting.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(answer) = serde_json::from_str::<Value>(&line) else { continue };
                let Some(id) = answer["id"].as_u64() else { continue };
                if let Some(caller) = routes.lock().unwrap().remove(&id) {
                    let _ = caller.send(answer);
                }
            }
        });
        let client = Self {
            writer: Arc::new(tokio::sync::Mutex::new(stdin)),
            waiting,
            next_id: Arc::new(AtomicU64::new(1)),
            child: Arc::new(child),
        };
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "bench", "version": "0"}});
        let answer = client.request("initialize", params).await;
        assert_eq!(answer["result"]["serverInfo"]["name"], "deputy", "{answer}");
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        client
    }

    async fn send(&self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        let mut writer = self.writer.lock().await;
        writer.write_all(line.as_bytes()).await.unwrap();
        writer.flush().await.unwrap();
    }

    async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answered, answer) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, answered);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        answer.await.expect("deputy closed stdout")
    }

    /// The CPU time deputy's threads have run so far: the sum of each thread's `schedstat`
    /// (nanoseconds on a CPU, exact where `stat`'s ticks are 10 ms).
    fn cpu(&self) -> Duration {
        let pid = self.child.id().expect("deputy runs");
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        let nanos = threads
            .filter_map(|thread| std::fs::read_to_string(thread.ok()?.path().join("schedstat")).ok())
            .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        Duration::from_nanos(nanos)
    }

    /// A tool's structured result, or `None` when it failed.
    async fn call(&self, tool: &str, arguments: Value) -> Option<Value> {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments})).await;
        let result = &answer["result"];
        (result["isError"] == false).then(|| result["structuredContent"].clone())
    }
}
