//! Scenario 4: 20 rounds of 1,000 REST turns racing one archive. Once the archive has answered,
//! no turn succeeds; every turn that answered `completed` is in the archived record; and the
//! session reads `archived` and refuses turns, also after a restart on the same store.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};

use super::{DEADLINE, seed};
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockResponse, anthropic};

const ROUNDS: usize = 20;
const TURNS: usize = 1000;
const ARGS: &[&str] = &["--max-connections", "2000"];

#[derive(Debug, Default)]
struct Tally {
    completed: usize,
    busy: usize,
    archived: usize,
    other: Vec<String>,
}

#[tokio::test]
async fn archive_races_20_rounds_of_1000_turns_racing_one_archive() {
    tokio::time::timeout(DEADLINE, archive_races()).await.expect("bounded");
}

async fn archive_races() {
    let seed = seed("archive races");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let mut deputy = HttpDeputy::start(ARGS).await;
    let mut total = Tally::default();
    let mut archived_ids = Vec::new();

    for round in 0..ROUNDS {
        deputy.mock.clear_queue();
        deputy.mock.push(MockResponse::sse(anthropic::text(&["created"])));
        for n in 0..TURNS {
            deputy.mock.push(MockResponse::sse(anthropic::text(&[&format!("turn {n}")])));
        }
        let id = deputy.create_session("race").await;
        let turns_url = deputy.url(&format!("/v1/sessions/{id}/turns"));

        // The archive goes out after a random number of turn answers have come back.
        let archive_after = rng.usize(0..TURNS / 2);
        let acknowledged: Arc<Mutex<Option<Instant>>> = Arc::default();
        let (report, mut answers) = mpsc::unbounded_channel();
        for n in 0..TURNS {
            let (http, url, report, acknowledged) =
                (deputy.http.clone(), turns_url.clone(), report.clone(), acknowledged.clone());
            tokio::spawn(async move {
                let sent = Instant::now();
                let sent_after_archive = acknowledged.lock().await.is_some_and(|at| at <= sent);
                let response = http.post(&url).json(&json!({"prompt": format!("turn {n}")})).send().await.unwrap();
                let status = response.status().as_u16();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                report.send((sent_after_archive, status, body)).unwrap();
            });
        }
        let mut tally = Tally::default();
        let mut archive = None;
        for answered in 0..TURNS {
            if answered == archive_after {
                let (http, url, acknowledged) =
                    (deputy.http.clone(), deputy.url(&format!("/v1/sessions/{id}")), acknowledged.clone());
                archive = Some(tokio::spawn(async move {
                    let response = http.delete(&url).send().await.unwrap();
                    let status = response.status().as_u16();
                    *acknowledged.lock().await = Some(Instant::now());
                    (status, response.json::<Value>().await.unwrap())
                }));
            }
            let (sent_after_archive, status, body) = answers.recv().await.unwrap();
            match (status, body["code"].as_str(), body["status"].as_str()) {
                (200, _, Some("completed")) => {
                    assert!(
                        !sent_after_archive,
                        "round {round}: a turn sent after the archive answered completed: {body}"
                    );
                    tally.completed += 1;
                }
                (409, Some("SESSION_BUSY"), _) => {
                    assert!(!sent_after_archive, "round {round}: after the archive, a turn got {body}");
                    tally.busy += 1;
                }
                (404, Some("SESSION_NOT_FOUND"), _) => tally.archived += 1,
                _ => tally.other.push(format!("{status} {body}")),
            }
        }
        let (status, archived) = archive.unwrap().await.unwrap();
        assert_eq!((status, archived["archived"].as_bool()), (200, Some(true)), "round {round}: {archived}");
        assert!(tally.other.is_empty(), "round {round}: unexpected answers {:?}", tally.other);

        // Acknowledged: archived, refusing turns, holding exactly the turns that completed.
        let expected_turns = 1 + tally.completed as u64;
        check_archived(&deputy, &id, expected_turns, round).await;
        archived_ids.push((id, expected_turns));
        total.completed += tally.completed;
        total.busy += tally.busy;
        total.archived += tally.archived;

        // And so after a restart on the same store, for this round's session and every earlier one.
        deputy = deputy.restart(ARGS).await;
        for (id, turns) in &archived_ids {
            check_archived(&deputy, id, *turns, round).await;
        }
    }
    report!(
        "reliability: archive races: {ROUNDS} rounds x {TURNS} turns racing one archive: {} completed before it, {} SESSION_BUSY, {} refused as archived, 0 after it; {ROUNDS} restarts kept every archive; {:.1} s",
        total.completed,
        total.busy,
        total.archived,
        started.elapsed().as_secs_f64()
    );
}

async fn check_archived(deputy: &HttpDeputy, id: &str, turns: u64, round: usize) {
    let read: Value =
        deputy.http.get(deputy.url(&format!("/v1/sessions/{id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        (read["state"]["status"].as_str(), read["state"]["turns"].as_u64()),
        (Some("archived"), Some(turns)),
        "round {round}: {read}"
    );
    let refused = deputy
        .http
        .post(deputy.url(&format!("/v1/sessions/{id}/turns")))
        .json(&json!({"prompt": "more"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["code"] == "SESSION_NOT_FOUND" && body["message"].as_str().unwrap().contains("archived"),
        "{body}"
    );
}
