//! Scenario 2: `kill -9` at random moments, 30 times (mid-stream during turns, around a turn's
//! save, during compactions), restarting on the same store each time: the store opens every
//! time and no acknowledged turn (a `session_turn` that answered `completed` to the client) is
//! lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};

use super::{DEADLINE, seed};
use crate::common::deputy::TestDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{Gate, MockResponse, anthropic};

const ROUNDS: usize = 30;

/// Starts a tool call without waiting for it, so deputy can be killed while it runs.
fn spawn_call(
    deputy: &TestDeputy,
    tool: &str,
    arguments: Value,
) -> tokio::task::JoinHandle<Option<CallToolResult>> {
    let Value::Object(arguments) = arguments else { panic!("arguments must be an object") };
    let peer = deputy.client.peer().clone();
    let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    tokio::spawn(async move { peer.call_tool(request).await.ok() })
}

/// The answer text of a call that completed a turn.
fn completed_text(result: &Option<CallToolResult>) -> Option<String> {
    let content = result.as_ref()?.structured_content.as_ref()?;
    (content["status"] == "completed").then(|| content["text"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn crash_loop_kill_9_at_random_moments_loses_no_acknowledged_turn() {
    tokio::time::timeout(DEADLINE, crash_loop()).await.expect("bounded");
}

async fn crash_loop() {
    let seed = seed("crash loop");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let mut deputy = TestDeputy::start().await;
    // Sessions 0 and 1 take turns and saves; session 2 also compacts, so its history is summarised
    // and only its turn count can be checked against the acknowledgements.
    let mut sessions = Vec::new();
    let mut acked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in 0..3 {
        deputy.mock.push(MockResponse::sse(anthropic::text(&[&format!("created {n}")])));
        let created = deputy.ok("session_create", json!({"prompt": format!("session {n}")})).await;
        let id = id_of(&created);
        acked.insert(id.clone(), vec![format!("created {n}")]);
        sessions.push(id);
    }
    let mut kills = BTreeMap::<&str, usize>::new();
    let mut unacked_attempts = 0usize;

    for round in 0..ROUNDS {
        // A few turns that complete before anything happens: acknowledged for sure.
        for step in 0..rng.usize(0..3) {
            let id = &sessions[rng.usize(0..3)];
            let text = format!("answer {round}.{step}");
            deputy.mock.push(MockResponse::sse(anthropic::text(&[&text])));
            let turn =
                deputy.ok("session_turn", json!({"session_id": id, "prompt": format!("q {round}.{step}")})).await;
            assert_eq!(turn["text"], text.as_str());
            acked.get_mut(id).unwrap().push(text);
        }
        let requests = deputy.mock.requests().len();
        let (what, pending) = match round % 3 {
            0 => {
                // Mid-stream: the model stops before a random chunk; the kill lands while deputy
                // waits for the rest.
                let id = &sessions[rng.usize(0..2)];
                let gate = Gate::new();
                let chunk = rng.usize(1..7);
                deputy.mock.push(
                    MockResponse::sse(anthropic::text(&[&format!("doomed {round}"), " never"]))
                        .pause_before_chunk(chunk, gate),
                );
                let call = spawn_call(
                    &deputy,
                    "session_turn",
                    json!({"session_id": id, "prompt": "doomed", "wait_ms": 60_000}),
                );
                deputy.mock.wait_for_requests(requests + 1).await;
                tokio::time::sleep(Duration::from_millis(rng.u64(0..20))).await;
                ("mid-stream", Some((id.clone(), call)))
            }
            1 => {
                // Around the save: the turn streams at full speed and the kill lands somewhere
                // between the request and well after the answer.
                let id = &sessions[rng.usize(0..2)];
                let text = format!("racing {round}");
                deputy.mock.push(MockResponse::sse(anthropic::text(&[&text, " to the save"])));
                let call = spawn_call(
                    &deputy,
                    "session_turn",
                    json!({"session_id": id, "prompt": "race", "wait_ms": 60_000}),
                );
                tokio::time::sleep(Duration::from_micros(rng.u64(0..12_000))).await;
                ("around a save", Some((id.clone(), call)))
            }
            _ => {
                // During a compaction of session 2: its summary streams slowly.
                let summary = MockResponse::sse(anthropic::text(&["Goal: ", "keep ", "going. ", "Done."]))
                    .chunk_delay(Duration::from_millis(rng.u64(1..10)));
                deputy.mock.push(summary);
                let call = spawn_call(&deputy, "session_compact", json!({"session_id": sessions[2]}));
                deputy.mock.wait_for_requests(requests + 1).await;
                tokio::time::sleep(Duration::from_millis(rng.u64(0..60))).await;
                drop(call);
                ("during a compaction", None)
            }
        };
        *kills.entry(what).or_default() += 1;
        deputy.mock.clear_queue();
        let TestDeputy { client, mut child, recorder, mock, workspace, home } = deputy;
        child.start_kill().expect("kill -9");
        child.wait().await.expect("deputy dies");
        if let Some((id, call)) = pending {
            let result = tokio::time::timeout(Duration::from_secs(30), call).await.expect("the call ends").unwrap();
            // deputy answers `completed` only after the turn's save committed.
            match completed_text(&result) {
                Some(text) => acked.get_mut(&id).unwrap().push(text),
                None => unacked_attempts += 1,
            }
        }
        drop((client, recorder));
        deputy = TestDeputy::respawn_on(mock, workspace, home).await;

        // It opened: every session reads idle, with at least every acknowledged turn.
        for id in &sessions {
            let read = deputy.ok("session_read", json!({"session_id": id})).await;
            let turns = read["state"]["turns"].as_u64().unwrap() as usize;
            assert_eq!(read["state"]["status"], "idle", "round {round} ({what}), seed {seed}");
            assert!(
                turns >= acked[id].len() && turns <= acked[id].len() + unacked_attempts,
                "round {round} ({what}), seed {seed}: {turns} turns stored, {} acknowledged",
                acked[id].len()
            );
        }
    }

    // Every session is still usable, and the uncompacted ones hold every acknowledged answer,
    // in order.
    for (n, id) in sessions.iter().enumerate() {
        let text = format!("final {n}");
        deputy.mock.push(MockResponse::sse(anthropic::text(&[&text])));
        let turn = deputy.ok("session_turn", json!({"session_id": id, "prompt": "still there?"})).await;
        assert_eq!(turn["text"], text.as_str());
        acked.get_mut(id).unwrap().push(text);
    }
    let stopped = deputy.stop().await;
    let mut acknowledged = 0;
    for id in &sessions[..2] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
            .args(["sessions", "show", id, "--json"])
            .env("DEPUTY_STORE", stopped.home.path().join("sessions.redb"))
            .env("XDG_CONFIG_HOME", stopped.home.path())
            .env_remove("DEPUTY_CONFIG")
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
        let answers: Vec<String> = shown["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .map(|m| m["content"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()).collect())
            .collect();
        let mut stored = answers.iter();
        for text in &acked[id] {
            assert!(
                stored.any(|answer| answer == text),
                "seed {seed}: acknowledged {text:?} is missing from {answers:?}"
            );
        }
        acknowledged += acked[id].len();
    }
    acknowledged += acked[&sessions[2]].len();
    report!(
        "reliability: crash loop: {ROUNDS} kill -9 ({}), {ROUNDS} restarts opened the store, {acknowledged} acknowledged turns all kept, {unacked_attempts} unacknowledged, {:.1} s",
        kills.iter().map(|(what, n)| format!("{n} {what}")).collect::<Vec<_>>().join(", "),
        started.elapsed().as_secs_f64()
    );
}
