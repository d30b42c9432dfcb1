//! Replicas benchmark: turns per second and turn latency of 1,000 sessions driven at once
//! over HTTP against 1, 2 and 3 `deputy serve --http` processes on one PostgreSQL, with a
//! provider that answers every request after 50 ms.
//!
//! Everything here is native: the load generator is this process (reqwest, one task per
//! session, each turn sent to the next replica in turn — no stickiness, so a session's turns
//! move between replicas, each reloading what another saved); the provider is an Anthropic
//! Messages stream served by this process after its delay; the replicas are the built binary.
//! Each run gets a schema of its own on the database, dropped after it. Figures are printed,
//! never asserted.
//!
//! Run with `cargo bench --bench replicas`. `DEPUTY_BENCH_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `DEPUTY_BENCH_SESSIONS` (1000),
//! `DEPUTY_BENCH_SECONDS` (measured window per replica count, 10), `DEPUTY_BENCH_REPLICAS`
//! (`1,2,3`), `DEPUTY_BENCH_LATENCY_MS` (50).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use serde_json::json;

fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let database: String = setting("DEPUTY_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let sessions: usize = setting("DEPUTY_BENCH_SESSIONS", 1000);
    let seconds: u64 = setting("DEPUTY_BENCH_SECONDS", 10);
    let latency = Duration::from_millis(setting("DEPUTY_BENCH_LATENCY_MS", 50));
    let counts: Vec<usize> = setting("DEPUTY_BENCH_REPLICAS", "1,2,3".to_owned())
        .split(',')
        .filter_map(|count| count.trim().parse().ok())
        .collect();
    let provider = start_provider(latency).await;
    println!(
        "replicas: {sessions} sessions at once over HTTP, provider latency {} ms, {seconds} s per run, {} cores",
        latency.as_millis(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!(
        "{:>8} {:>12} {:>10} {:>10} {:>10} {:>8}",
        "replicas", "turns/s", "p50 ms", "p99 ms", "max ms", "errors"
    );
    for count in counts {
        let schema = Schema::create(&database).await;
        let row = measure(&schema.url, &provider, count, sessions, Duration::from_secs(seconds)).await;
        println!(
            "{count:>8} {:>12.0} {:>10.1} {:>10.1} {:>10.1} {:>8}",
            row.turns_per_second, row.p50_ms, row.p99_ms, row.max_ms, row.errors
        );
        schema.drop().await;
    }
}

/// One run's figures.
struct Row {
    turns_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    errors: usize,
}

/// `count` replicas on the schema at `url`, `sessions` created, then each session's turns
/// driven back to back for `window`.
async fn measure(url: &str, provider: &str, count: usize, sessions: usize, window: Duration) -> Row {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("deputy").join("config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, format!("[store]\nkey_file = {:?}\n", home.path().join("store.key"))).unwrap();
    let replicas: Vec<Replica> = (0..count).map(|_| Replica::spawn(url, provider, home.path())).collect();
    let http = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(sessions).build().unwrap();
    for replica in &replicas {
        replica.wait_ready(&http).await;
    }
    let bases: Arc<Vec<String>> = Arc::new(replicas.iter().map(|replica| replica.base.clone()).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let pick = {
        let (bases, next) = (bases.clone(), next.clone());
        move || bases[next.fetch_add(1, Ordering::Relaxed) % bases.len()].clone()
    };

    // Every session created (its first turn answered), then the window.
    let created = futures::future::join_all((0..sessions).map(|_| {
        let (http, base) = (http.clone(), pick());
        async move {
            let response = http.post(format!("{base}/v1/sessions")).json(&json!({"prompt": "hi"})).send().await;
            let body: serde_json::Value = response.unwrap().json().await.unwrap();
            body["session_id"].as_str().unwrap_or_else(|| panic!("created: {body}")).to_owned()
        }
    }))
    .await;
    let deadline = Instant::now() + window;
    let started = Instant::now();
    let per_session = futures::future::join_all(created.into_iter().map(|id| {
        let (http, pick) = (http.clone(), pick.clone());
        tokio::spawn(async move {
            let (mut latencies, mut errors) = (Vec::new(), 0);
            while Instant::now() < deadline {
                let asked = Instant::now();
                let url = format!("{}/v1/sessions/{id}/turns", pick());
                match http.post(url).json(&json!({"prompt": "go"})).send().await {
                    Ok(response) if response.status().is_success() => {
                        let _ = response.bytes().await;
                        latencies.push(asked.elapsed());
                    }
                    _ => errors += 1,
                }
            }
            (latencies, errors)
        })
    }))
    .await;
    let elapsed = started.elapsed();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for outcome in per_session {
        let (mine, failed) = outcome.unwrap();
        latencies.extend(mine);
        errors += failed;
    }
    latencies.sort_unstable();
    let at = |quantile: f64| {
        let index = ((latencies.len() as f64 * quantile) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(index).map_or(0.0, |latency| latency.as_secs_f64() * 1000.0)
    };
    let row = Row {
        turns_per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        errors,
    };
    drop(replicas);
    row
}

/// A `deputy serve --http` process, stopped when dropped.
struct Replica {
    child: std::process::Child,
    base: String,
}

impl Replica {
    fn spawn(url: &str, provider: &str, home: &std::path::Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
            .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--store", url])
            .args(["--max-requests-per-subject", "100000", "--max-connections", "100000"])
            .args(["--max-live-sessions", "100000"])
            .env("ANTHROPIC_API_KEY", "bench-key")
            .env("ANTHROPIC_BASE_URL", provider)
            .env("DEPUTY_MODEL", "anthropic:claude-bench")
            .env("DEPUTY_WORKSPACE", home)
            .env("XDG_CONFIG_HOME", home)
            .env_remove("DEPUTY_CONFIG")
            .env_remove("DEPUTY_TOKEN")
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the deputy binary");
        Self { child, base: format!("http://127.0.0.1:{port}") }
    }

    async fn wait_ready(&self, http: &reqwest::Client) {
        for _ in 0..400 {
            if http.get(format!("{}/healthz", self.base)).send().await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("a replica did not start serving at {}", self.base);
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An Anthropic Messages endpoint answering every request with a short text stream after
/// `latency`; its base URL.
async fn start_provider(latency: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move || async move {
        tokio::time::sleep(latency).await;
        ([("content-type", "text/event-stream")], answer()).into_response()
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

fn answer() -> String {
    let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    [
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_bench", "type": "message", "role": "assistant",
                "content": [], "model": "bench", "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        ),
        event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": 5}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]
    .concat()
}

/// A schema of its own on the bench database.
struct Schema {
    base: String,
    name: String,
    url: String,
}

impl Schema {
    async fn create(base: &str) -> Self {
        let name = format!("deputy_bench_{}", uuid::Uuid::new_v4().simple());
        client(base).await.batch_execute(&format!("CREATE SCHEMA {name}")).await.unwrap();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}options=-c%20search_path%3D{name}");
        Self { base: base.to_owned(), name, url }
    }

    async fn drop(self) {
        client(&self.base).await.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name)).await.unwrap();
    }
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("the bench database");
    tokio::spawn(connection);
    client
}
