//! Background server benchmark: what attaching to the store's background server costs.
//!
//! - cold start: from spawning `deputy serve` to its answer to `initialize`, in-process
//!   (`--no-daemon`), attached to a running background server, and with no server running
//!   (so the time includes starting one);
//! - what attaching adds to a round trip: `session_list` answered in-process vs by the
//!   background server, which reads and writes the attached `serve`'s stdio itself (handed over
//!   on the socket; before that, relayed through `serve`), many calls, one at a time;
//! - the same tool call beside the Node reference server's `echo`
//!   (`@modelcontextprotocol/server-everything`, pinned, installed by this bench with npm into
//!   `.ci/cache/bench` the first time; skipped, and said so, where npm or node is missing).
//!
//! Real processes of the built binary, raw JSON-RPC lines on their stdio. Figures are printed,
//! never asserted. Run with `cargo bench --bench background`; `DEPUTY_BENCH_STARTS` (cold
//! starts per case, default 20) and `DEPUTY_BENCH_CALLS` (round trips per mode, default 2000).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Bench {
    runtime: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Bench {
    fn store(&self, name: &str) -> PathBuf {
        self.home.path().join(name)
    }

    fn deputy(&self, store: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_deputy"));
        command
            .args(args)
            .current_dir(self.home.path())
            .env("XDG_RUNTIME_DIR", self.runtime.path())
            .env("XDG_CONFIG_HOME", self.home.path())
            .env("DEPUTY_STORE", store)
            .env("DEPUTY_MODEL", "anthropic:bench")
            .env("ANTHROPIC_API_KEY", "bench")
            .env_remove("DEPUTY_WORKSPACE")
            .env_remove("DEPUTY_CONFIG")
            .env("RUST_LOG", "warn");
        command
    }

    fn stop_server(&self, store: &Path) {
        let status = self.deputy(store, &["background", "stop"]).stdout(Stdio::null()).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        for store in ["cold.redb", "relay.redb"] {
            let _ = self.deputy(&self.store(store), &["background", "stop"]).stdout(Stdio::null()).status();
        }
    }
}

/// An MCP server process (`deputy serve`, or the Node reference) spoken to in raw JSON-RPC
/// lines.
struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    /// The server's name in its `initialize` answer.
    server: &'static str,
    /// The tool call the round trips time: name and arguments.
    timed: (&'static str, Value),
}

impl Session {
    fn spawn(command: Command) -> Self {
        Self::spawn_server(command, "deputy", ("session_list", json!({})))
    }

    fn spawn_server(mut command: Command, server: &'static str, timed: (&'static str, Value)) -> Self {
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self { child, stdin, stdout, next_id: 1, server, timed }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut answer = String::new();
            assert!(self.stdout.read_line(&mut answer).unwrap() > 0, "deputy closed stdout");
            let answer: Value = serde_json::from_str(&answer).unwrap();
            if answer.get("id") == Some(&json!(id)) {
                return answer;
            }
        }
    }

    fn initialize(&mut self) {
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "bench", "version": "0"}});
        let answer = self.request("initialize", params);
        let name = answer["result"]["serverInfo"]["name"].as_str().unwrap_or_default();
        assert!(name.contains(self.server), "{answer}");
        self.stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// One call of the timed tool, checked to have succeeded.
    fn call(&mut self) {
        let (name, arguments) = self.timed.clone();
        let answer = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        assert!(answer["result"]["content"].is_array(), "{answer}");
        assert_ne!(answer["result"]["isError"], true, "{answer}");
    }

    /// Closes stdin as an MCP client does and waits for the exit.
    fn close(self) {
        let Self { mut child, stdin, .. } = self;
        drop(stdin);
        assert!(child.wait().unwrap().success());
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

fn us(duration: Duration) -> String {
    format!("{:.1} µs", duration.as_secs_f64() * 1e6)
}

/// Spawn → `initialize` answered, `starts` times; `before` runs untimed before each.
fn cold_starts(starts: usize, mut command: impl FnMut() -> Command, mut before: impl FnMut()) -> Vec<Duration> {
    let mut times = Vec::with_capacity(starts);
    for _ in 0..starts {
        before();
        let command = command();
        let started = Instant::now();
        let mut session = Session::spawn(command);
        session.initialize();
        times.push(started.elapsed());
        session.close();
    }
    times.sort();
    times
}

fn round_trips(session: &mut Session, calls: usize) -> Vec<Duration> {
    for _ in 0..calls / 10 {
        session.call();
    }
    let mut times: Vec<Duration> = (0..calls)
        .map(|_| {
            let started = Instant::now();
            session.call();
            started.elapsed()
        })
        .collect();
    times.sort();
    times
}

fn main() {
    let starts = env_usize("DEPUTY_BENCH_STARTS", 20);
    let calls = env_usize("DEPUTY_BENCH_CALLS", 2000);
    let bench = Bench { runtime: tempfile::tempdir().unwrap(), home: tempfile::tempdir().unwrap() };
    let cold = bench.store("cold.redb");

    println!("cold start: spawn `deputy serve` → `initialize` answered ({starts} starts each)");
    println!("{:<44} {:>10} {:>10} {:>10}", "", "p50", "p90", "max");
    let print = |name: &str, times: &[Duration]| {
        println!(
            "{name:<44} {:>10} {:>10} {:>10}",
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.9)),
            ms(*times.last().unwrap())
        );
    };
    let in_process = cold_starts(starts, || bench.deputy(&cold, &["serve", "--no-daemon"]), || {});
    print("--no-daemon (opens the store itself)", &in_process);
    let fresh = cold_starts(starts, || bench.deputy(&cold, &["serve"]), || bench.stop_server(&cold));
    print("no background server (starts one)", &fresh);
    let attached = cold_starts(starts, || bench.deputy(&cold, &["serve"]), || {});
    print("background server running (attaches)", &attached);
    bench.stop_server(&cold);

    println!("\nround trip of `session_list` ({calls} calls each, one at a time)");
    println!("{:<44} {:>10} {:>10} {:>10}", "", "p50", "p90", "p99");
    let mut direct = Session::spawn(bench.deputy(&bench.store("direct.redb"), &["serve", "--no-daemon"]));
    direct.initialize();
    let relay_store = bench.store("relay.redb");
    let mut relayed = Session::spawn(bench.deputy(&relay_store, &["serve"]));
    relayed.initialize();
    let mut reference = node_reference().map(|command| {
        let mut session = Session::spawn_server(command, "everything", ("echo", json!({"message": "hi"})));
        session.initialize();
        session
    });
    // Interleaved in rounds, so every mode sees the same machine load.
    let (mut direct_times, mut relay_times, mut reference_times) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..10 {
        direct_times.extend(round_trips(&mut direct, calls / 10));
        relay_times.extend(round_trips(&mut relayed, calls / 10));
        if let Some(reference) = &mut reference {
            reference_times.extend(round_trips(reference, calls / 10));
        }
    }
    direct_times.sort();
    relay_times.sort();
    reference_times.sort();
    let row = |name: &str, times: &[Duration]| {
        println!(
            "{name:<44} {:>10} {:>10} {:>10}",
            us(percentile(times, 0.5)),
            us(percentile(times, 0.9)),
            us(percentile(times, 0.99))
        );
    };
    row("in-process (--no-daemon)", &direct_times);
    row("attached to the background server", &relay_times);
    let added = percentile(&relay_times, 0.5).as_secs_f64() - percentile(&direct_times, 0.5).as_secs_f64();
    println!("added by attaching, p50: {:.1} µs", added * 1e6);
    if let Some(reference) = reference {
        row(&format!("Node reference `echo` ({REFERENCE_VERSION})"), &reference_times);
        let ratio = |times: &[Duration]| {
            percentile(times, 0.5).as_secs_f64() / percentile(&reference_times, 0.5).as_secs_f64()
        };
        println!(
            "p50 against the Node reference's echo: in-process {:.2}×, attached {:.2}×",
            ratio(&direct_times),
            ratio(&relay_times)
        );
        reference.close();
    }
    direct.close();
    relayed.close();
}

/// The Node reference server, pinned: its npm package and version.
const REFERENCE: &str = "@modelcontextprotocol/server-everything";
const REFERENCE_VERSION: &str = "2026.8.31";

/// The command that runs the Node reference server over stdio, installing it into
/// `.ci/cache/bench` first if it is not there; `None` (said on stdout) without node or npm.
fn node_reference() -> Option<Command> {
    let node = Command::new("node").arg("--version").stdout(Stdio::null()).status();
    if !node.is_ok_and(|status| status.success()) {
        println!("the Node reference server: skipped, no `node` to run it");
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".ci/cache/bench")
        .join(format!("server-everything-{REFERENCE_VERSION}"));
    let installed = dir.join(".installed");
    if !installed.exists() {
        let status = Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(format!("{REFERENCE}@{REFERENCE_VERSION}"))
            .status();
        if !status.is_ok_and(|status| status.success()) {
            println!("the Node reference server: skipped, npm could not install {REFERENCE}@{REFERENCE_VERSION}");
            return None;
        }
        std::fs::write(&installed, b"").unwrap();
    }
    let mut command = Command::new("node");
    command.arg(dir.join("node_modules").join(REFERENCE).join("dist/index.js")).arg("stdio").stderr(Stdio::null());
    Some(command)
}
