//! Hibernation benchmark: resident memory per idle session with and without a bounded live set,
//! and what rehydrating an unloaded session costs a caller.
//!
//! Run with `cargo bench --bench hibernation`. Figures are printed, never asserted.
//!
//! - RSS: N sessions (default 2,000) are created over a redb store, each one turn with a
//!   history of about 50 KB (a 25 KB prompt, a 25 KB answer), through a zero-latency provider.
//!   Resident memory (`/proc/self/statm`) is read before and after; the difference over N is
//!   the cost of an idle session. Each mode runs in a child process of its own (this binary,
//!   re-executed), so one mode's freed memory never hides in the other's figure: "live" keeps
//!   every session live (`max_live_sessions` = N), "hibernating" keeps 100, and "no store"
//!   keeps every session live without a store (no redb page cache in the figure).
//! - Latency: in the hibernating child, `read` + a one-line turn on a live session, then on an
//!   unloaded one (rehydrated from the store, which unloads the least recently used in turn);
//!   p50 and p99 over the samples.
//!
//! Environment: `DEPUTY_BENCH_SESSIONS` (default 2000), `DEPUTY_BENCH_SAMPLES` (default 200),
//! `DEPUTY_BENCH_HISTORY_BYTES` (each session's history, default 50,000: half prompt, half
//! answer), `DEPUTY_BENCH_MODES` (default `ephemeral,live,hibernating`). `TMPDIR` chooses where
//! the stores are made. Issue 31's memory figure, 100,000 sessions touched then idle:
//! `DEPUTY_BENCH_SESSIONS=100000 DEPUTY_BENCH_HISTORY_BYTES=2000 DEPUTY_BENCH_MODES=hibernating`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use deputy::agent::AgentFactory;
use deputy::llm::registry::ProviderRegistry;
use deputy::llm::scripted::{ScriptedProvider, ScriptedResponse};
use deputy::llm::{EventStream, LlmError, ModelRequest, Provider};
use deputy::session::{CreateSessionRequest, LiveSessionService, SessionLimits, SessionService, TurnRequest};
use deputy::store::RedbStore;
use futures::future::BoxFuture;

const HIBERNATING_CAP: usize = 100;
const MODE: &str = "DEPUTY_BENCH_HIBERNATION_MODE";

/// Answers at once: half the history to a first prompt, one line after. It keeps nothing (the
/// scripted provider records every request, which would be counted as session memory).
#[derive(Debug)]
struct ZeroLatency {
    first_answer_bytes: usize,
}

impl Provider for ZeroLatency {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        let first = request.messages.len() == 1;
        let answer = if first { "a".repeat(self.first_answer_bytes) } else { "ok".to_owned() };
        Box::pin(async move { ScriptedProvider::new([ScriptedResponse::text(&[&answer])]).stream(request).await })
    }
}

fn main() {
    let sessions = env_usize("DEPUTY_BENCH_SESSIONS", 2000);
    let samples = env_usize("DEPUTY_BENCH_SAMPLES", 200);
    let half_history = env_usize("DEPUTY_BENCH_HISTORY_BYTES", 50_000) / 2;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    match std::env::var(MODE).as_deref() {
        Ok("ephemeral") => runtime.block_on(child(false, sessions, sessions + 1, 0, half_history)),
        Ok("live") => runtime.block_on(child(true, sessions, sessions + 1, 0, half_history)),
        Ok("hibernating") => runtime.block_on(child(true, sessions, HIBERNATING_CAP, samples, half_history)),
        _ => parent(sessions, half_history),
    }
}

fn parent(sessions: usize, half_history: usize) {
    println!(
        "deputy hibernation bench: {sessions} idle sessions of ~{} KB history each, zero-latency provider",
        2 * half_history / 1000
    );
    let modes = std::env::var("DEPUTY_BENCH_MODES").unwrap_or_else(|_| "ephemeral,live,hibernating".into());
    for mode in modes.split(',').map(str::trim) {
        // A child given any other mode would run as a parent, and spawn children in turn.
        assert!(["ephemeral", "live", "hibernating"].contains(&mode), "DEPUTY_BENCH_MODES: unknown mode {mode:?}");
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .env(MODE, mode)
            .output()
            .expect("running the bench's child");
        assert!(output.status.success(), "{mode}: {}", String::from_utf8_lossy(&output.stderr));
        print!("{}", String::from_utf8_lossy(&output.stdout));
    }
}

async fn child(stored: bool, sessions: usize, cap: usize, samples: usize, half_history: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store: deputy::store::SharedStore =
        if stored { Some(Arc::new(RedbStore::open(dir.path().join("s.redb")).unwrap())) } else { None };
    let mut registry = ProviderRegistry::new();
    registry.insert("bench", Arc::new(ZeroLatency { first_answer_bytes: half_history }));
    let factory = AgentFactory::new(Arc::new(registry), Some("bench:zero-latency".into()), None);
    let limits = SessionLimits { idle_unload: Duration::ZERO, max_live: cap, max_open_per_owner: None };
    let service = Arc::new(LiveSessionService::new(factory, store).with_limits(limits));

    let prompt = "q".repeat(half_history);
    // Warm the allocator and the store with one session, so the baseline is not the empty process.
    service.create_session(create(&prompt)).await.unwrap();
    let before = rss_bytes();
    let started = Instant::now();
    let mut ids = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        ids.push(service.create_session(create(&prompt)).await.unwrap().session_id);
    }
    let created = started.elapsed();
    let after = rss_bytes();
    let per_session = after.saturating_sub(before) as f64 / sessions as f64;
    println!(
        "  {:<12} max_live {:>5}: {:>5} live, RSS {:>7.1} MB -> {:>7.1} MB, {:>6.1} KB per session (created in {:.1} s)",
        match (stored, cap >= sessions) {
            (false, _) => "no store",
            (true, true) => "live",
            (true, false) => "hibernating",
        },
        cap,
        service.live_sessions(),
        before as f64 / 1e6,
        after as f64 / 1e6,
        per_session / 1e3,
        created.as_secs_f64()
    );
    if samples == 0 {
        return;
    }
    // The newest sessions are live; the oldest were unloaded long ago.
    let live: Vec<_> = ids.iter().rev().take(samples.min(cap / 2)).cloned().collect();
    let unloaded: Vec<_> = ids.iter().take(samples.min(sessions - cap)).cloned().collect();
    let mut timings = Vec::new();
    for (what, set) in [("live", &live), ("unloaded", &unloaded)] {
        let mut times = Vec::with_capacity(set.len());
        for id in set.iter() {
            let started = Instant::now();
            service.read(id, None).await.unwrap();
            service.start_turn(id, TurnRequest { prompt: "next".into(), ..TurnRequest::default() }).await.unwrap();
            times.push(started.elapsed());
        }
        times.sort();
        timings.push((what, times));
    }
    for (what, times) in timings {
        println!(
            "    read + turn on a {what:<8} session ({} samples): p50 {}  p99 {}",
            times.len(),
            ms(times[times.len() / 2]),
            ms(times[(times.len() * 99 / 100).min(times.len() - 1)])
        );
    }
}

fn create(prompt: &str) -> CreateSessionRequest {
    CreateSessionRequest { prompt: prompt.to_owned(), ..CreateSessionRequest::default() }
}

/// Resident set size from `/proc/self/statm` (second field, in pages of 4 KiB).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|pages| pages.parse::<u64>().ok()).unwrap_or(0) * 4096
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}
