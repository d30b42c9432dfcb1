//! What the load benchmarks share (`replicas`, `load`): a provider that answers after a fixed
//! latency, `deputy serve --http` processes of the built binary, and a driver that runs every
//! session's turns back to back for a window and sums up their latencies.

#![allow(dead_code)]

use std::future::Future;
use std::process::Stdio;
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use serde_json::json;

/// An environment setting, or `default`.
pub fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// How long sessions are driven: a warm-up, then the measured window
/// (`DEPUTY_BENCH_WARMUP_SECONDS`, default 5, and `DEPUTY_BENCH_SECONDS`, default 10).
#[derive(Clone, Copy)]
pub struct Window {
    pub warmup: Duration,
    pub measured: Duration,
}

impl Window {
    pub fn from_env() -> Self {
        Self {
            warmup: Duration::from_secs(setting("DEPUTY_BENCH_WARMUP_SECONDS", 5)),
            measured: Duration::from_secs(setting("DEPUTY_BENCH_SECONDS", 10)),
        }
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} s measured after {} s of warm-up", self.measured.as_secs(), self.warmup.as_secs())
    }
}

/// One run's figures.
pub struct Figures {
    pub turns_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: usize,
    /// The CPU time the servers' processes ran in the window per turn finished in it, and the
    /// cores that is: what a turn costs deputy, steadier from run to run than throughput on a
    /// shared machine (it does not count the time deputy waited for a core).
    pub cpu: Option<ServerCpu>,
}

#[derive(Clone, Copy)]
pub struct ServerCpu {
    pub ms_per_turn: f64,
    pub cores: f64,
    /// The same of this process, the load generator and the provider: what the machine spends
    /// on a turn besides deputy, which a throughput on the same cores has to leave room for.
    pub bench_ms_per_turn: f64,
}

impl Figures {
    pub const HEADER: [&'static str; 8] =
        ["turns/s", "p50 ms", "p99 ms", "max ms", "errors", "CPU ms/turn", "cores", "bench ms/turn"];

    /// The row of a table whose first column is `label`.
    pub fn row(&self, label: &str) -> String {
        let (per_turn, cores, bench) = match self.cpu {
            Some(cpu) => (
                format!("{:.3}", cpu.ms_per_turn),
                format!("{:.2}", cpu.cores),
                format!("{:.3}", cpu.bench_ms_per_turn),
            ),
            None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
        };
        format!(
            "{label:<28} {:>10.0} {:>10.1} {:>10.1} {:>10.1} {:>8} {per_turn:>12} {cores:>6} {bench:>14}",
            self.turns_per_second, self.p50_ms, self.p99_ms, self.max_ms, self.errors
        )
    }

    pub fn header(label: &str) -> String {
        let [a, b, c, d, e, f, g, h] = Self::HEADER;
        format!("{label:<28} {a:>10} {b:>10} {c:>10} {d:>10} {e:>8} {f:>12} {g:>6} {h:>14}")
    }
}

/// The CPU time process `pid` and its threads (those that exited too) have run so far, from
/// `/proc/PID/stat` (user and system, in clock ticks of 10 ms: fine over a window of seconds).
pub fn process_cpu(pid: u32) -> Duration {
    const TICKS_PER_SECOND: u64 = 100;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |index: usize| fields.get(index).and_then(|field| field.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat(5); `fields` starts at field 3.
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / TICKS_PER_SECOND)
}

/// Runs `turn` for every session in `ids`, each session's turns back to back, for the warm-up
/// and then the measured window; `turn` answers whether the turn succeeded. Throughput counts the turns
/// that finished inside the window, latency the turns asked inside it: the first turns after
/// creation (everything cold, every session asking at once) stay out of both. The CPU time of
/// the `servers` (process ids), and of this process, is read as the window opens and closes.
pub async fn drive<F, Fut>(ids: Vec<String>, window: Window, servers: &[u32], turn: F) -> Figures
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let opens = Instant::now() + window.warmup;
    let closes = opens + window.measured;
    let servers = servers.to_vec();
    let cpu_in_window = tokio::spawn(async move {
        let total = || servers.iter().map(|pid| process_cpu(*pid)).sum::<Duration>();
        let bench = || process_cpu(std::process::id());
        tokio::time::sleep_until(opens.into()).await;
        let before = (total(), bench());
        tokio::time::sleep_until(closes.into()).await;
        (!servers.is_empty()).then(|| (total().saturating_sub(before.0), bench().saturating_sub(before.1)))
    });
    let per_session = futures::future::join_all(ids.into_iter().map(|id| {
        let turn = turn.clone();
        tokio::spawn(async move {
            let (mut turns, mut errors) = (Vec::new(), 0);
            while Instant::now() < closes {
                let asked = Instant::now();
                if turn(id.clone()).await {
                    turns.push((asked, Instant::now()));
                } else if asked >= opens {
                    errors += 1;
                }
            }
            (turns, errors)
        })
    }))
    .await;
    let (mut finished, mut latencies, mut errors) = (0, Vec::new(), 0);
    for outcome in per_session {
        let (turns, failed) = outcome.unwrap();
        errors += failed;
        finished += turns.iter().filter(|(_, done)| (opens..closes).contains(done)).count();
        latencies.extend(turns.iter().filter(|(asked, _)| *asked >= opens).map(|(asked, done)| *done - *asked));
    }
    latencies.sort_unstable();
    let per_turn = |cpu: Duration| cpu.as_secs_f64() * 1e3 / finished as f64;
    let cpu = cpu_in_window.await.unwrap().filter(|_| finished > 0).map(|(deputy, bench)| ServerCpu {
        ms_per_turn: per_turn(deputy),
        cores: deputy.as_secs_f64() / window.measured.as_secs_f64(),
        bench_ms_per_turn: per_turn(bench),
    });
    let at = |quantile: f64| {
        let index = ((latencies.len() as f64 * quantile) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(index).map_or(0.0, |latency| latency.as_secs_f64() * 1000.0)
    };
    Figures {
        turns_per_second: finished as f64 / window.measured.as_secs_f64(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        errors,
        cpu,
    }
}

/// Creates `sessions` sessions over HTTP, spread over `bases` in turn (each first turn
/// answered); their ids.
pub async fn create_over_http(http: &reqwest::Client, bases: &[String], sessions: usize) -> Vec<String> {
    futures::future::join_all((0..sessions).map(|n| {
        let (http, base) = (http.clone(), bases[n % bases.len()].clone());
        async move {
            let response = http.post(format!("{base}/v1/sessions")).json(&json!({"prompt": "hi"})).send().await;
            let body: serde_json::Value = response.unwrap().json().await.unwrap();
            body["session_id"].as_str().unwrap_or_else(|| panic!("created: {body}")).to_owned()
        }
    }))
    .await
}

/// One turn over HTTP; whether it succeeded.
pub async fn turn_over_http(http: &reqwest::Client, base: &str, id: &str) -> bool {
    match http.post(format!("{base}/v1/sessions/{id}/turns")).json(&json!({"prompt": "go"})).send().await {
        Ok(response) if response.status().is_success() => response.bytes().await.is_ok(),
        _ => false,
    }
}

/// The deputy binary a bench runs: the one cargo built with it, or `DEPUTY_BENCH_BINARY` (so
/// one run can measure another build, e.g. a release binary before and after a change).
pub fn deputy_binary() -> std::path::PathBuf {
    std::env::var_os("DEPUTY_BENCH_BINARY").map_or_else(|| env!("CARGO_BIN_EXE_deputy").into(), Into::into)
}

/// The environment every deputy process of a bench runs in: the mock provider, a home of its
/// own, logs at `error`.
pub fn deputy(provider: &str, home: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(deputy_binary());
    command
        .env("ANTHROPIC_API_KEY", "bench-key")
        .env("ANTHROPIC_BASE_URL", provider)
        .env("DEPUTY_MODEL", "anthropic:claude-bench")
        .env("DEPUTY_WORKSPACE", home)
        .env("XDG_CONFIG_HOME", home)
        .env("XDG_RUNTIME_DIR", home)
        .env_remove("DEPUTY_CONFIG")
        .env_remove("DEPUTY_TOKEN")
        .env_remove("DEPUTY_STORE")
        .env("RUST_LOG", "error")
        .stderr(Stdio::inherit());
    command
}

/// A `deputy serve --http` process on `store`, stopped when dropped.
pub struct HttpServer {
    child: std::process::Child,
    pub base: String,
}

impl HttpServer {
    pub fn spawn(store: &str, provider: &str, home: &std::path::Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = deputy(provider, home)
            .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--store", store])
            .args(["--max-requests-per-subject", "100000", "--max-connections", "100000"])
            .args(["--max-live-sessions", "100000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("the deputy binary");
        Self { child, base: format!("http://127.0.0.1:{port}") }
    }

    pub async fn wait_ready(&self, http: &reqwest::Client) {
        for _ in 0..400 {
            if http.get(format!("{}/healthz", self.base)).send().await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("deputy did not start serving at {}", self.base);
    }

    /// The process id, for its resident memory.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An Anthropic Messages endpoint answering every request with a short text stream after
/// `latency`; its base URL.
pub async fn start_provider(latency: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move || async move {
        // Tokio's timer rounds a sleep up to its next millisecond tick, even a sleep of zero:
        // "at once" must not sleep at all.
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
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
