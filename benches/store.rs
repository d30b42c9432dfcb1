//! Store benchmark: what persistence costs per turn as a history grows, and how `list` and
//! opening the store behave with 100,000 stored sessions.
//!
//! Run with `cargo bench --bench store`. Figures are printed, never asserted: timings depend on
//! the machine and its disk. `docs/BENCHMARKS.md` records a run and explains each column.
//!
//! - Per turn: for each history size, a fresh store in a temporary directory is bulk-loaded
//!   with synthetic turns (user text, assistant text + `tool_use`, `tool_result` of a few KB,
//!   assistant answer), then single-turn saves are timed the way the session actor makes them:
//!   `SessionStore::save` (on tokio's blocking pool) with the updated record,
//!   `replace_from = previous message_count` and the four messages the turn added.
//! - Journal (issue 17): the history is loaded with its journal events, and timed turns
//!   alternate between a save with the turn's ~9 journal events (as the actor makes it now) and
//!   one without (as before the journal), so both medians come from the same store and size.
//! - Projection: a session's whole journal is read back from the store page by page and
//!   projected into a fresh directory (`deputy project`); events per second.
//! - 100k sessions: 100,000 small sessions are bulk-created, the store is closed, then
//!   `RedbStore::open` on the existing file and `SessionStore::list` are timed.
//!
//! Environment: `DEPUTY_BENCH_TURNS` (measured turns per size, default 30),
//! `DEPUTY_BENCH_SIZES` (comma-separated history sizes in bytes, default 10 KB,1 MB,10 MB,100 MB),
//! `DEPUTY_BENCH_SESSIONS` (default 100000), `DEPUTY_BENCH_PROJECTION_TURNS` (turns of the
//! projected session, default 10000). `TMPDIR` chooses where the stores are made.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use deputy::agent::ContextOverrides;
use deputy::ids::SessionId;
use deputy::llm::{ContentBlock, Message, Usage};
use deputy::model::{AgentSpec, Budget, ContextSettings, SessionRecord, StoredEvent};
use deputy::model::{ListPosition, SessionFilter, SessionStatus};
use deputy::session::{RunResult, TurnStatus};
use deputy::store::{PostgresStore, RedbStore, SaveRequest, SessionStore, StoredListQuery};

const KB: u64 = 1000;
const MB: u64 = 1000 * KB;
/// Bulk-load transactions carry about this much history each.
const LOAD_CHUNK_BYTES: u64 = 8 * MB;
/// Saves per transaction when bulk-creating sessions.
const SESSIONS_PER_BATCH: usize = 5_000;
const WARMUP_TURNS: usize = 5;

fn main() {
    let turns = env_usize("DEPUTY_BENCH_TURNS", 30);
    let sizes = std::env::var("DEPUTY_BENCH_SIZES").ok().map_or_else(
        || vec![10 * KB, MB, 10 * MB, 100 * MB],
        |sizes| sizes.split(',').map(|size| size.trim().parse().expect("DEPUTY_BENCH_SIZES: bytes")).collect(),
    );
    let sessions = env_usize("DEPUTY_BENCH_SESSIONS", 100_000);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let io_available = disk_writes().is_some();

    println!("deputy store bench: {} cores, tmp {}", cores(), std::env::temp_dir().display());
    println!();
    println!("fsync baseline (4 KiB write + fdatasync in the same directory):");
    let baseline = fsync_baseline(turns);
    println!("  median {}  p90 {}", ms(median(&baseline)), ms(p90(&baseline)));
    println!();

    println!("Per-turn persistence ({turns} measured turns after {WARMUP_TURNS} warm-up, one save each):");
    println!(
        "{:>9} {:>9} {:>10} {:>9} {:>9} {:>9} {:>12} {:>12} {:>12}",
        "history", "messages", "file", "load", "median", "p90", "payload/turn", "disk/turn", "growth/turn"
    );
    let mut medians = Vec::new();
    let mut journal_rows = Vec::new();
    for &size in &sizes {
        let row = per_turn(&runtime, size, turns);
        journal_rows.push((
            size,
            median(&row.times),
            median(&row.journal_times),
            row.events_per_turn,
            row.event_bytes,
        ));
        let disk = if io_available { bytes(row.disk_median) } else { "n/a".to_owned() };
        println!(
            "{:>9} {:>9} {:>10} {:>8.1}s {:>9} {:>9} {:>12} {:>12} {:>12}",
            bytes(row.payload_loaded),
            row.messages,
            bytes(row.file_size),
            row.load.as_secs_f64(),
            ms(median(&row.times)),
            ms(p90(&row.times)),
            bytes(row.payload_per_turn),
            disk,
            bytes(row.growth_total / turns as u64),
        );
        medians.push((size, median(&row.times)));
    }
    if let (Some(first), Some(last)) = (medians.first(), medians.last())
        && medians.len() > 1
    {
        println!(
            "  median per-turn time at {} / at {}: {:.2}x",
            bytes(last.0),
            bytes(first.0),
            last.1.as_secs_f64() / first.1.as_secs_f64()
        );
    }
    println!();

    println!("Journal: the same saves with the turn's events (alternate turns of the run above):");
    println!(
        "{:>9} {:>14} {:>14} {:>8} {:>12} {:>12}",
        "history", "without events", "with events", "ratio", "events/turn", "event bytes"
    );
    for (size, without, with, events, event_bytes) in &journal_rows {
        println!(
            "{:>9} {:>14} {:>14} {:>7.2}x {:>12} {:>12}",
            bytes(*size),
            ms(*without),
            ms(*with),
            with.as_secs_f64() / without.as_secs_f64(),
            events,
            bytes(*event_bytes),
        );
    }
    if let (Some(first), Some(last)) = (journal_rows.first(), journal_rows.last()) {
        println!(
            "  with events at {} / without at {}: {:.2}x",
            bytes(last.0),
            bytes(first.0),
            last.2.as_secs_f64() / first.1.as_secs_f64()
        );
    }
    println!();

    projection(&runtime, env_usize("DEPUTY_BENCH_PROJECTION_TURNS", 10_000));
    println!();

    postgres_against_redb(&runtime, turns);
    println!();

    many_sessions(&runtime, sessions);
}

/// The journal events a turn of `messages` records (merged deltas: one per text block).
fn turn_events(messages: &[Message], turn: u64, seq: &mut u64) -> Vec<StoredEvent> {
    let mut events = Vec::new();
    let mut push = |event: serde_json::Value| {
        events.push(StoredEvent { seq: *seq, turn, at: Utc::now(), event: event.into() });
        *seq += 1;
    };
    let usage = serde_json::json!({"type": "usage", "usage": {"input_tokens": 12000, "output_tokens": 200}});
    for (index, message) in messages.iter().enumerate() {
        for block in &message.content {
            match block {
                ContentBlock::Text { text } if index == 0 => {
                    push(serde_json::json!({"type": "prompt_received", "turn": turn, "prompt": text}));
                    push(serde_json::json!({"type": "turn_started", "turn": turn}));
                }
                ContentBlock::Text { text } => push(serde_json::json!({"type": "text_delta", "text": text})),
                ContentBlock::ToolUse { id, name, input } => {
                    push(
                        serde_json::json!({"type": "tool_call_requested", "id": id, "name": name, "input": input}),
                    );
                    push(usage.clone());
                }
                ContentBlock::ToolResult { tool_use_id, content, is_error } => push(serde_json::json!({
                    "type": "tool_result", "id": tool_use_id, "name": "read_file", "content": content, "is_error": is_error
                })),
                reasoning => {
                    let text = reasoning.reasoning_text().unwrap_or_default();
                    push(serde_json::json!({"type": "reasoning_delta", "text": text}));
                }
            }
        }
    }
    push(usage);
    push(serde_json::json!({"type": "turn_completed", "turn": turn, "stop_reason": "end_turn"}));
    events
}

/// Full replay of one session's journal from the store into an empty directory.
fn projection(runtime: &tokio::runtime::Runtime, turns: usize) {
    use deputy::session::projection::{Projector, project_session};
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path().join("store.redb")).unwrap();
    let mut synth = Synth::new(7);
    let mut record = record(SessionId::new(), Utc::now());
    let mut seq = 0;
    let mut batch = Vec::new();
    let mut journal_bytes = 0;
    for _ in 0..turns {
        let turn = synth.turn();
        record.turns += 1;
        let events = turn_events(&turn, record.turns, &mut seq);
        journal_bytes += events.iter().map(encoded_len).sum::<u64>();
        let mut request = SaveRequest::new(record.clone(), record.message_count, turn);
        record.message_count += request.messages.len() as u64;
        record.event_seq = seq;
        request.record = record.clone();
        request.events = events;
        batch.push(request);
        if batch.len() == 500 {
            store.save_batch(&std::mem::take(&mut batch)).unwrap();
        }
    }
    store.save_batch(&batch).unwrap();
    let out = dir.path().join("projection");
    let projector = Projector::new(&out);
    let id = record.session_id.clone();
    let store = &store;
    let started = Instant::now();
    let written = runtime.block_on(async {
        let fetch = |after| {
            let id = id.clone();
            async move {
                store
                    .events(&id, after, deputy::model::MAX_EVENTS_PAGE)
                    .await
                    .map(Option::unwrap_or_default)
                    .map_err(|e| e.to_string())
            }
        };
        project_session(&projector, &id, fetch).await.unwrap()
    });
    let elapsed = started.elapsed();
    let tree = ["events.jsonl", "transcript.md", "session.json", "checkpoint"]
        .iter()
        .map(|name| file_size(&projector.session_dir(&id).join(name)))
        .sum::<u64>();
    println!("Projection (full replay of one session's journal from the store into an empty directory):");
    println!(
        "  {turns} turns, {written} events ({} stored): {:.2}s, {:.0} events/s, {} written ({:.0} MB/s)",
        bytes(journal_bytes),
        elapsed.as_secs_f64(),
        written as f64 / elapsed.as_secs_f64(),
        bytes(tree),
        tree as f64 / 1e6 / elapsed.as_secs_f64(),
    );
}

// ---------------------------------------------------------------------------------------------
// Per-turn persistence

struct TurnRow {
    payload_loaded: u64,
    messages: u64,
    file_size: u64,
    load: Duration,
    times: Vec<Duration>,
    /// Saves of the alternate turns, with their journal events.
    journal_times: Vec<Duration>,
    events_per_turn: u64,
    event_bytes: u64,
    payload_per_turn: u64,
    disk_median: u64,
    growth_total: u64,
}

/// The same turns saved, with their journal events, into redb and into PostgreSQL (the
/// database `DEPUTY_TEST_POSTGRES` names, in a schema of its own dropped after): the time of
/// each save through `SessionStore::save`, to its durable commit.
fn postgres_against_redb(runtime: &tokio::runtime::Runtime, turns: usize) {
    let Ok(url) = std::env::var("DEPUTY_TEST_POSTGRES") else {
        println!("PostgreSQL against redb: not run (set DEPUTY_TEST_POSTGRES to a database URL)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbStore::open(dir.path().join("store.redb")).unwrap();
    let config: tokio_postgres::Config = url.parse().expect("DEPUTY_TEST_POSTGRES: a PostgreSQL URL");
    let schema = format!("deputy_bench_{}", std::process::id());
    let admin = |sql: String| {
        let config = config.clone();
        runtime.block_on(async move {
            let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(connection);
            client.batch_execute(&sql).await.unwrap();
        });
    };
    admin(format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"));
    let mut scoped = config.clone();
    scoped.options(format!("-c search_path={schema}"));
    let postgres = runtime
        .block_on(PostgresStore::open_with(scoped, &dir.path().join("postgres.key")))
        .expect("open the PostgreSQL store");

    println!("PostgreSQL against redb ({turns} turns after {WARMUP_TURNS} warm-up, each a save with its events):");
    println!("{:<12} {:>9} {:>9}", "store", "median", "p90");
    let stores: [(&str, &dyn SessionStore); 2] = [("redb", &redb), ("PostgreSQL", &postgres)];
    for (name, store) in stores {
        let mut synth = Synth::new(10 * KB);
        let mut record = record(SessionId::new(), Utc::now());
        let mut seq = 0;
        let mut times = Vec::with_capacity(turns);
        for i in 0..WARMUP_TURNS + turns {
            let turn = synth.turn();
            let replace_from = record.message_count;
            record.turns += 1;
            record.message_count += turn.len() as u64;
            record.updated_at = Utc::now();
            record.last_turn = Some(std::sync::Arc::new(run_result(&record, &turn)));
            let events = turn_events(&turn, record.turns, &mut seq);
            record.event_seq = seq;
            let mut request = SaveRequest::new(record.clone(), replace_from, turn);
            request.events = events;
            let elapsed = runtime.block_on(async {
                let started = Instant::now();
                store.save(request).await.unwrap();
                started.elapsed()
            });
            if i >= WARMUP_TURNS {
                times.push(elapsed);
            }
        }
        println!("{name:<12} {:>9} {:>9}", ms(median(&times)), ms(p90(&times)));
    }
    drop(postgres);
    admin(format!("DROP SCHEMA {schema} CASCADE"));
}

fn per_turn(runtime: &tokio::runtime::Runtime, target: u64, turns: usize) -> TurnRow {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let store = RedbStore::open(&path).unwrap();
    let mut synth = Synth::new(target);
    let mut record = record(SessionId::new(), Utc::now());
    let mut seq = 0;

    // Bulk load: one save per chunk of turns, one transaction each, with their journal.
    let started = Instant::now();
    let mut loaded = 0;
    while loaded < target {
        let mut chunk = Vec::new();
        let mut events = Vec::new();
        let mut chunk_bytes = 0;
        while loaded < target && chunk_bytes < LOAD_CHUNK_BYTES {
            let turn = synth.turn();
            let size = payload(&turn);
            chunk_bytes += size;
            loaded += size;
            record.turns += 1;
            events.extend(turn_events(&turn, record.turns, &mut seq));
            chunk.extend(turn);
        }
        let replace_from = record.message_count;
        record.message_count += chunk.len() as u64;
        record.event_seq = seq;
        record.updated_at = Utc::now();
        let mut request = SaveRequest::new(record.clone(), replace_from, chunk);
        request.events = events;
        store.save_batch(&[request]).unwrap();
    }
    let load = started.elapsed();
    let messages = record.message_count;
    let loaded_size = file_size(&path);

    let mut times = Vec::with_capacity(turns);
    let mut journal_times = Vec::with_capacity(turns);
    let (mut events_total, mut event_bytes_total) = (0, 0);
    let mut disk = Vec::with_capacity(turns);
    let mut payload_per_turn = 0;
    let mut growth_total = 0;
    for i in 0..WARMUP_TURNS + 2 * turns {
        let with_events = i % 2 == 1;
        let turn = synth.turn();
        let replace_from = record.message_count;
        record.turns += 1;
        record.message_count += turn.len() as u64;
        record.tool_calls += 1;
        record.usage.input_tokens += 12_000;
        record.usage.output_tokens += 400;
        record.updated_at = Utc::now();
        record.last_turn = Some(std::sync::Arc::new(run_result(&record, &turn)));
        let turn_payload =
            payload(&turn) + encoded_len(&record) + encoded_len(&record.summary(record.resting_status()));
        let events = if with_events { turn_events(&turn, record.turns, &mut seq) } else { Vec::new() };
        record.event_seq = seq;
        let mut request = SaveRequest::new(record.clone(), replace_from, turn);
        let (event_count, event_bytes) = (events.len() as u64, events.iter().map(encoded_len).sum::<u64>());
        request.events = events;

        let size_before = file_size(&path);
        let io_before = disk_writes();
        let elapsed = runtime.block_on(async {
            let started = Instant::now();
            store.save(request).await.unwrap();
            started.elapsed()
        });
        let io_after = disk_writes();
        let size_after = file_size(&path);
        if i >= WARMUP_TURNS && with_events {
            journal_times.push(elapsed);
            events_total += event_count;
            event_bytes_total += event_bytes;
        } else if i >= WARMUP_TURNS {
            times.push(elapsed);
            if let (Some(before), Some(after)) = (io_before, io_after) {
                disk.push(after - before);
            }
            payload_per_turn += turn_payload;
            growth_total += size_after.saturating_sub(size_before);
        }
    }
    disk.sort_unstable();
    drop(store);
    TurnRow {
        payload_loaded: loaded,
        messages,
        file_size: loaded_size,
        load,
        events_per_turn: events_total / journal_times.len().max(1) as u64,
        event_bytes: event_bytes_total / journal_times.len().max(1) as u64,
        times,
        journal_times,
        payload_per_turn: payload_per_turn / turns as u64,
        disk_median: disk.get(disk.len() / 2).copied().unwrap_or(0),
        growth_total,
    }
}

/// Synthetic conversation turns: the same mix for every size, deterministic.
struct Synth {
    rng: fastrand::Rng,
    call: u64,
}

const WORDS: &[&str] = &[
    "the",
    "session",
    "store",
    "writes",
    "history",
    "append",
    "record",
    "index",
    "turn",
    "tool",
    "result",
    "model",
    "answer",
    "file",
    "path",
    "function",
    "returns",
    "error",
    "value",
    "config",
    "request",
    "stream",
    "token",
    "budget",
    "agent",
    "provider",
    "message",
    "content",
    "block",
    "summary",
    "update",
    "list",
    "redb",
    "table",
    "page",
    "commit",
    "transaction",
    "latency",
    "bytes",
    "fn",
    "let",
    "match",
    "impl",
    "struct",
    "async",
];

impl Synth {
    fn new(seed: u64) -> Self {
        Self { rng: fastrand::Rng::with_seed(seed), call: 0 }
    }

    /// Words up to about `min..max` bytes.
    fn text(&mut self, range: std::ops::Range<usize>) -> String {
        let bytes = self.rng.usize(range);
        let mut out = String::with_capacity(bytes + 16);
        while out.len() < bytes {
            if !out.is_empty() {
                out.push(if self.rng.u8(..) < 20 { '\n' } else { ' ' });
            }
            out.push_str(WORDS[self.rng.usize(..WORDS.len())]);
        }
        out
    }

    /// One turn: the user's prompt, the assistant's tool call, its result, the final answer
    /// (about 4–6 KB of JSON).
    fn turn(&mut self) -> Vec<Message> {
        self.call += 1;
        let id = format!("toolu_{:016x}", self.call);
        let prompt = self.text(200..600);
        let thinking = self.text(100..300);
        let path =
            format!("src/{}/{}.rs", WORDS[self.rng.usize(..WORDS.len())], WORDS[self.rng.usize(..WORDS.len())]);
        let pattern = self.text(30..50);
        let result = self.text(2_000..4_000);
        let answer = self.text(400..1_200);
        vec![
            Message::user_text(prompt),
            Message::assistant(vec![
                ContentBlock::Text { text: thinking },
                ContentBlock::ToolUse {
                    id: id.clone(),
                    name: "read_file".to_owned(),
                    input: serde_json::json!({ "path": path, "pattern": pattern, "max_lines": 200 }),
                },
            ]),
            Message {
                role: deputy::llm::Role::User,
                content: vec![ContentBlock::ToolResult { tool_use_id: id, content: result, is_error: false }],
            },
            Message::assistant(vec![ContentBlock::Text { text: answer }]),
        ]
    }
}

fn record(session_id: SessionId, at: DateTime<Utc>) -> SessionRecord {
    let agent = AgentSpec {
        model: "anthropic:claude-sonnet-4-5".to_owned(),
        system_prompt: Some("You are a careful engineer working in this repository.".to_owned()),
        max_tokens: 8192,
        budget: Budget { max_tokens: Some(2_000_000), max_tool_calls: Some(500), ..Budget::default() },
        context: ContextSettings::resolve("anthropic:claude-sonnet-4-5", 8192, &ContextOverrides::default(), None)
            .expect("default context settings"),
        tools: deputy::tools::ToolConfig::legacy(),
        structured_output: None,
        reasoning: None,
        skills: None,
        documents: None,
        agent: None,
    };
    let mut record = SessionRecord::empty(session_id, agent, "Benchmark session".to_owned(), at);
    record.labels = BTreeMap::from([("bench".to_owned(), "store".to_owned())]);
    record
}

fn run_result(record: &SessionRecord, turn: &[Message]) -> RunResult {
    RunResult {
        session_id: record.session_id.clone(),
        status: TurnStatus::Completed,
        turn: record.turns,
        text: turn.last().map(Message::text).unwrap_or_default(),
        reasoning: String::new(),
        stop_reason: Some(deputy::model::StopReason::EndTurn),
        usage: deputy::model::TurnUsage {
            tokens: Usage { input_tokens: 12_000, output_tokens: 400, ..Usage::default() },
            cost_usd: None,
        },
        tool_calls: 1,
        error: None,
        error_kind: None,
        pending: Vec::new(),
        structured_output: None,
        structured_output_errors: Vec::new(),
    }
}

/// Bytes a value takes in the store's encoding (a version byte, then JSON).
fn encoded_len<T: serde::Serialize>(value: &T) -> u64 {
    1 + serde_json::to_vec(value).unwrap().len() as u64
}

fn payload(messages: &[Message]) -> u64 {
    messages.iter().map(encoded_len).sum()
}

// ---------------------------------------------------------------------------------------------
// 100k sessions: open and list

fn many_sessions(runtime: &tokio::runtime::Runtime, sessions: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let mut synth = Synth::new(7);

    let started = Instant::now();
    {
        let store = RedbStore::open(&path).unwrap();
        let base = Utc::now() - TimeDelta::days(30);
        let mut created = 0;
        while created < sessions {
            let batch: Vec<SaveRequest> = (created..sessions.min(created + SESSIONS_PER_BATCH))
                .map(|i| {
                    let at = base + TimeDelta::milliseconds(i64::try_from(i).unwrap() * 10);
                    let mut record = record(SessionId::new(), at);
                    record.title = synth.text(20..40);
                    let messages = vec![
                        Message::user_text(synth.text(80..160)),
                        Message::assistant(vec![ContentBlock::Text { text: synth.text(160..320) }]),
                    ];
                    record.turns = 1;
                    record.message_count = messages.len() as u64;
                    record.last_turn = Some(std::sync::Arc::new(run_result(&record, &messages)));
                    SaveRequest::new(record, 0, messages)
                })
                .collect();
            created += batch.len();
            store.save_batch(&batch).unwrap();
        }
    }
    let create = started.elapsed();
    println!(
        "{sessions} sessions (2 messages each): created in {:.1}s with save_batch ({SESSIONS_PER_BATCH} per \
         transaction), file {}",
        create.as_secs_f64(),
        bytes(file_size(&path))
    );

    const OPENS: usize = 10;
    let mut opens = Vec::with_capacity(OPENS);
    for _ in 0..OPENS {
        let started = Instant::now();
        let store = RedbStore::open(&path).unwrap();
        opens.push(started.elapsed());
        drop(store);
    }
    let first_open = opens[0];

    let store = RedbStore::open(&path).unwrap();
    let list = |first: usize, after: Option<ListPosition>, filter: SessionFilter, reps: usize| {
        let mut times = Vec::with_capacity(reps);
        let mut last = None;
        for i in 0..reps + 3 {
            let (elapsed, page) = runtime.block_on(async {
                let started = Instant::now();
                let query = StoredListQuery {
                    first,
                    after: after.clone(),
                    include_archived: false,
                    exclude: Vec::new(),
                    owner: None,
                    filter: filter.clone(),
                };
                let page = store.list(query).await.unwrap();
                (started.elapsed(), page)
            });
            assert_eq!(page.total, sessions, "list total");
            assert_eq!(page.summaries.len(), first.min(sessions), "list page length");
            if i >= 3 {
                times.push(elapsed);
            }
            last = page.summaries.last().map(|summary| summary.list_position());
        }
        (times, last)
    };
    let everything = SessionFilter::default;
    let (first_page, _) = list(50, None, everything(), 30);
    let (deep_page, _) = list(50_050, None, everything(), 5);
    // The same depth by cursor: the place of the 50,000th session, then one page after it.
    let (_, place) = list(50_000, None, everything(), 0);
    let (cursor_page, _) = list(50, place, everything(), 30);
    // A filter every session passes: the whole walk of the summaries, a page kept.
    let idle = || SessionFilter::new(Some(SessionStatus::Idle), None, None);
    let (filtered_page, _) = list(50, None, idle(), 5);
    drop(store);

    println!("{:<58} {:>9} {:>9} {:>9}", "", "median", "p90", "first");
    println!(
        "{:<58} {:>9} {:>9} {:>9}",
        format!("RedbStore::open, existing file ({OPENS} opens)"),
        ms(median(&opens)),
        ms(p90(&opens)),
        ms(first_open)
    );
    println!(
        "{:<58} {:>9} {:>9} {:>9}",
        "list first page (first: 50, active, no exclusions; 30 runs)",
        ms(median(&first_page)),
        ms(p90(&first_page)),
        "-"
    );
    println!(
        "{:<58} {:>9} {:>9} {:>9}",
        "list at offset 50,000 (first: 50,050; 5 runs)",
        ms(median(&deep_page)),
        ms(p90(&deep_page)),
        "-"
    );
    println!(
        "{:<58} {:>9} {:>9} {:>9}",
        "list at depth 50,000 by cursor (first: 50; 30 runs)",
        ms(median(&cursor_page)),
        ms(p90(&cursor_page)),
        "-"
    );
    println!(
        "{:<58} {:>9} {:>9} {:>9}",
        "list filtered by status, all match (first: 50; 5 runs)",
        ms(median(&filtered_page)),
        ms(p90(&filtered_page)),
        "-"
    );
}

// ---------------------------------------------------------------------------------------------
// Measuring

/// Bytes this process caused to be written to storage so far (`/proc/self/io`, Linux).
fn disk_writes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines().find_map(|line| line.strip_prefix("write_bytes:")).and_then(|value| value.trim().parse().ok())
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|meta| meta.len()).unwrap_or(0)
}

/// What one small durable write costs on this disk, for comparison with a save.
fn fsync_baseline(reps: usize) -> Vec<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::File::create(dir.path().join("fsync")).unwrap();
    let block = vec![7u8; 4096];
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let started = Instant::now();
        file.write_all(&block).unwrap();
        file.sync_data().unwrap();
        times.push(started.elapsed());
    }
    times
}

fn median(times: &[Duration]) -> Duration {
    percentile(times, 0.5)
}

fn p90(times: &[Duration]) -> Duration {
    percentile(times, 0.9)
}

/// Nearest-rank percentile.
fn percentile(times: &[Duration], p: f64) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

fn bytes(n: u64) -> String {
    if n >= MB {
        format!("{:.1} MB", n as f64 / MB as f64)
    } else if n >= KB {
        format!("{:.1} KB", n as f64 / KB as f64)
    } else {
        format!("{n} B")
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().map_or(default, |value| value.parse().unwrap_or_else(|_| panic!("{name}: a number")))
}
