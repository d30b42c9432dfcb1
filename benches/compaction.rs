//! Compaction benchmark: what a compaction costs apart from the model's summary call (prune,
//! rebuild, and saving the new epoch, which moves the old history to `discarded`), and what
//! compaction does to the history over a long session.
//!
//! Run with `cargo bench --bench compaction`. Figures are printed, never asserted.
//!
//! - Overhead at 1 MB and 50 MB histories (`DEPUTY_BENCH_SIZES`, bytes): a synthetic history of
//!   tool-using turns is stored, then a compaction is replayed step by step and timed: `prune`,
//!   `rebuild_history` (summary + recent turns), and `SessionStore::save` of the new epoch.
//! - 300 turns: the scripted 300-turn session of the tests (a 3 KB JSON file read every turn,
//!   a 6,000-token window, outputs capped at 2 KB) runs through the live service; every
//!   `CompactionCompleted` event's estimated tokens before and after are reported.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use deputy::agent::compaction::{COMPACTION_PROMPT, prune, rebuild_history};
use deputy::agent::{AgentEvent, AgentFactory, ContextOverrides};
use deputy::ids::SessionId;
use deputy::llm::registry::ProviderRegistry;
use deputy::llm::scripted::{ScriptedProvider, ScriptedResponse};
use deputy::llm::{ContentBlock, Message, ModelRequest, Role, Usage};
use deputy::model::context::{estimate_message, estimate_text};
use deputy::model::{AgentSpec, Budget, ContextSettings, SessionRecord};
use deputy::session::{CreateSessionRequest, LiveSessionService, SessionService, TurnOptions, TurnRequest};
use deputy::store::{RedbStore, SaveRequest, SessionStore};
use deputy::tools::Workspace;

const MB: u64 = 1_000_000;

fn main() {
    let sizes = std::env::var("DEPUTY_BENCH_SIZES").ok().map_or_else(
        || vec![MB, 50 * MB],
        |sizes| sizes.split(',').map(|size| size.trim().parse().expect("DEPUTY_BENCH_SIZES: bytes")).collect(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    println!("Compaction overhead without the summary call (median of 5 runs each):");
    println!(
        "{:>10} {:>9} {:>10} {:>10} {:>12} {:>12} {:>14}",
        "history", "messages", "prune", "rebuild", "save epoch", "total", "tokens after"
    );
    for size in sizes {
        overhead(&runtime, size);
    }
    println!();
    runtime.block_on(three_hundred_turns());
}

/// One tool-using turn of about 5 KB: prompt, call, result, answer.
fn turn(n: u64) -> Vec<Message> {
    let id = format!("call-{n}");
    let result: String =
        (0..40).map(|row| format!("{{\"row\": {row}, \"turn\": {n}, \"path\": \"/srv/f{row}.txt\"}}\n")).collect();
    vec![
        Message::user_text(format!("Step {n}: check the next batch of files and report anything unusual.")),
        Message::assistant(vec![
            ContentBlock::Text { text: "Let me look at the files.".into() },
            ContentBlock::ToolUse {
                id: id.clone(),
                name: "read_file".into(),
                input: serde_json::json!({"path": format!("batch-{n}.json")}),
            },
        ]),
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult { tool_use_id: id, content: result, is_error: false }],
        },
        Message::assistant(vec![ContentBlock::Text {
            text: format!("Batch {n} looks fine: 40 rows, no errors, sizes within range."),
        }]),
    ]
}

fn history_of(bytes: u64) -> Vec<Message> {
    let mut history = Vec::new();
    let mut size = 0;
    let mut n = 0;
    while size < bytes {
        for message in turn(n) {
            size += serde_json::to_vec(&message).unwrap().len() as u64;
            history.push(message);
        }
        n += 1;
    }
    history
}

fn record(id: &SessionId, epoch: u64, message_count: usize) -> SessionRecord {
    let agent = AgentSpec {
        model: "anthropic:claude-sonnet-4-5".into(),
        system_prompt: None,
        max_tokens: 8192,
        budget: Budget::default(),
        context: ContextSettings::resolve("anthropic:claude-sonnet-4-5", 8192, &ContextOverrides::default(), None)
            .unwrap(),
        tools: deputy::tools::ToolConfig::legacy(),
        structured_output: None,
        reasoning: None,
        skills: None,
        documents: None,
        agent: None,
    };
    let mut record = SessionRecord::empty(id.clone(), agent, "compaction bench".into(), Utc::now());
    record.message_count = message_count as u64;
    record.history_epoch = epoch;
    record
}

fn overhead(runtime: &tokio::runtime::Runtime, bytes: u64) {
    let settings =
        ContextSettings::resolve("anthropic:claude-sonnet-4-5", 8192, &ContextOverrides::default(), None).unwrap();
    let history = history_of(bytes);
    let summary = "Goal: check every batch. Progress: all batches so far fine. Next: continue.".repeat(20);
    let (mut prune_times, mut rebuild_times, mut save_times, mut totals) = (vec![], vec![], vec![], vec![]);
    let mut after_tokens = 0;
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path().join("s.redb")).unwrap();
        let id = SessionId::new();
        for (start, chunk) in history.chunks(4000).enumerate().map(|(n, chunk)| (n * 4000, chunk)) {
            let saved = start + chunk.len();
            store.save_batch(&[SaveRequest::new(record(&id, 0, saved), start as u64, chunk.to_vec())]).unwrap();
        }
        let mut working = history.clone();
        let started = Instant::now();
        prune(&mut working, settings.prune_protect_tokens);
        let pruned = started.elapsed();
        let started = Instant::now();
        let rebuilt = rebuild_history(&working, &summary, settings.recent_turn_budget, working.len());
        let rebuild = started.elapsed();
        after_tokens = rebuilt.iter().map(estimate_message).sum::<u64>();
        let save = SaveRequest::new(record(&id, 1, rebuilt.len()), 0, rebuilt);
        let started = Instant::now();
        runtime.block_on(store.save(save)).unwrap();
        let saved = started.elapsed();
        prune_times.push(pruned);
        rebuild_times.push(rebuild);
        save_times.push(saved);
        totals.push(pruned + rebuild + saved);
    }
    println!(
        "{:>8.1}MB {:>9} {:>10} {:>10} {:>12} {:>12} {:>14}",
        bytes as f64 / MB as f64,
        history.len(),
        ms(median(&mut prune_times)),
        ms(median(&mut rebuild_times)),
        ms(median(&mut save_times)),
        ms(median(&mut totals)),
        after_tokens
    );
}

fn median(values: &mut [Duration]) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

fn request_tokens(request: &ModelRequest) -> u64 {
    request.messages.iter().map(estimate_message).sum::<u64>() + request.system.as_deref().map_or(0, estimate_text)
}

fn is_summary(request: &ModelRequest) -> bool {
    request.messages.last().is_some_and(|m| m.text().contains(COMPACTION_PROMPT))
}

async fn three_hundred_turns() {
    let dir = tempfile::tempdir().unwrap();
    let row = r#"{"id": 1, "path": "/srv/data/file.txt", "size": 12345},"#;
    std::fs::write(dir.path().join("data.json"), format!("[{}]", row.repeat(60))).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let provider = ScriptedProvider::responding(move |request| {
        let usage = Usage { input_tokens: request_tokens(request), output_tokens: 10, ..Usage::default() };
        if is_summary(request) {
            return ScriptedResponse::text_with_usage(&["Goal: read data.json each turn. Progress: fine."], usage);
        }
        let prompt = match request.messages.last().and_then(|m| m.content.last()) {
            Some(ContentBlock::Text { text }) => text.clone(),
            _ => String::new(),
        };
        if prompt.starts_with("task") {
            let id = format!("call-{}", counter.fetch_add(1, Ordering::SeqCst));
            return ScriptedResponse::tool_calls(&[(
                id.as_str(),
                "read_file",
                serde_json::json!({"path": "data.json"}),
            )])
            .with_usage(usage);
        }
        ScriptedResponse::text_with_usage(&["Read it; the rows look fine."], usage)
    });
    let mut registry = ProviderRegistry::new();
    registry.insert("test", provider.clone());
    let factory =
        AgentFactory::new(Arc::new(registry), Some("test:model".into()), Some(Workspace::new(dir.path()).unwrap()));
    let service = LiveSessionService::new(factory, None);
    let mut create = CreateSessionRequest { prompt: "task 0".into(), ..CreateSessionRequest::default() };
    create.build.max_tokens = Some(500);
    create.build.context =
        ContextOverrides { context_window: Some(6_000), tool_output_cap_bytes: Some(2048), ..Default::default() };
    let (events, mut received) = deputy::agent::event_channel();
    create.turn = TurnOptions { events: Some(events.clone()), ..TurnOptions::default() };
    let started = Instant::now();
    let id = service.create_session(create).await.unwrap().session_id;
    for n in 1..300 {
        let options = TurnOptions { events: Some(events.clone()), ..TurnOptions::default() };
        service
            .start_turn(&id, TurnRequest { prompt: format!("task {n}"), options, ..TurnRequest::default() })
            .await
            .unwrap();
    }
    let elapsed = started.elapsed();
    drop(events);
    let (mut compactions, mut summarized, mut before, mut after) = (0, 0, Vec::new(), Vec::new());
    while let Some(event) = received.recv().await {
        if let AgentEvent::CompactionCompleted { tokens_before, tokens_after, summarized: with_summary } = event {
            compactions += 1;
            summarized += u64::from(with_summary);
            before.push(tokens_before);
            after.push(tokens_after);
        }
    }
    before.sort_unstable();
    after.sort_unstable();
    let requests = provider.requests();
    let largest = requests.iter().map(|r| request_tokens(r) + u64::from(r.max_tokens)).max().unwrap_or(0);
    let view = service.read(&id, None).await.unwrap();
    println!(
        "300 turns, 6,000-token window, 2 KB output cap ({} model calls, {:.1} s):",
        requests.len(),
        elapsed.as_secs_f64()
    );
    println!(
        "  compactions: {compactions} ({summarized} with a summary, {} by pruning alone)",
        compactions - summarized
    );
    println!(
        "  estimated tokens before: min {} median {} max {};  after: min {} median {} max {}",
        before.first().unwrap_or(&0),
        before.get(before.len() / 2).unwrap_or(&0),
        before.last().unwrap_or(&0),
        after.first().unwrap_or(&0),
        after.get(after.len() / 2).unwrap_or(&0),
        after.last().unwrap_or(&0)
    );
    println!("  largest request (prompt + max_tokens): {largest} of 6000 tokens");
    println!(
        "  final history: {} messages, about {} tokens",
        view.state.message_count, view.state.context.estimated_history_tokens
    );
}
