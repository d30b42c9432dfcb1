//! A PostgreSQL store through the built binary (`--store postgres://…`), on the machine's
//! database (`DEPUTY_TEST_POSTGRES`, each test in a schema of its own): every deputy process
//! opens it directly, with no background server between, and sessions outlive the process.

use std::process::Stdio;

use reqwest::Method;
use serde_json::json;

use crate::common::database::TestDatabase;
use crate::common::deputy::{RecordingClient, connect, on_mock};
use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic};

/// `[store] key_file` in `dir`, for every process of one test.
fn key_config(dir: &std::path::Path) -> String {
    format!("[store]\nkey_file = {:?}\n", dir.join("keys").join("store.key"))
}

/// The lease the failure tests run with: short, so a lost replica's sessions come back soon.
const LEASE_SECS: u64 = 2;

#[tokio::test]
async fn a_database_store_is_shared_by_every_process_and_outlives_them() {
    let Some(database) = TestDatabase::create().await else { return };
    let keys = tempfile::tempdir().unwrap();
    let config = key_config(keys.path());
    let store = ["--store", database.url.as_str()];
    let deputy = HttpDeputy::start_with_config(&config, &store, &[]).await;
    assert!(keys.path().join("keys/store.key").exists(), "the key file is where [store] key_file says");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let (status, created) = deputy
        .rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "hi", "labels": {"team": "core"}})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    let stored: i64 = database
        .client()
        .await
        .query_one("SELECT count(*) FROM sessions WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 1, "the session is a row of the database");

    // The command line opens the database itself while the server runs: no lock, no
    // background server.
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["--store", &database.url, "sessions", "list", "--json"])
        .env("XDG_CONFIG_HOME", deputy.home.path())
        .env_remove("DEPUTY_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["sessions"][0]["session_id"], json!(id), "{listed}");

    // So does `serve` over stdio: it serves the same sessions itself.
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
    command.args(["serve", "--store", &database.url]);
    on_mock(&mut command, &deputy.mock, deputy.workspace.path(), deputy.home.path());
    let (client, mut child) =
        connect(&RecordingClient::default(), command, rmcp::ClientLifecycleMode::Initialize).await;
    let read = crate::common::deputy::ok_tool(&client, "session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["labels"]["team"], "core", "{read}");
    client.cancel().await.unwrap();
    assert!(child.wait().await.unwrap().success());
    assert!(!deputy.home.path().join("sessions.redb").exists(), "no redb file beside");

    // A new server process on the same database continues the session.
    let deputy = deputy.restart(&store).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Again."])));
    let (status, turn) =
        deputy.rest(None, Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "more"}))).await;
    assert_eq!((status, turn["text"].as_str()), (200, Some("Again.")), "{turn}");
    let (_, read) = deputy.rest(None, Method::GET, &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(read["state"]["turns"], 2, "{read}");
    let sent = deputy.mock.requests().last().unwrap().body.to_string();
    assert!(sent.contains("Hello.") && sent.contains("more"), "the second turn saw the first: {sent}");
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error_without_its_password() {
    let home = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["--store", "postgres://deputy:hunter2@127.0.0.1:1/none", "sessions", "list"])
        .env("XDG_CONFIG_HOME", home.path())
        .env("HOME", home.path())
        .env_remove("DEPUTY_CONFIG")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("postgres://deputy:***@127.0.0.1:1/none") && stderr.contains("refused"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// `count` replicas of one deputy on `database`: each its own process, port and mock
/// provider; one key file and one workspace (`shared`), as replicas of one service have.
async fn replicas(database: &TestDatabase, shared: &std::path::Path, count: usize) -> Vec<HttpDeputy> {
    replicas_with(database, shared, count, "").await
}

/// [`replicas`] with more `[store]` settings.
async fn replicas_with(
    database: &TestDatabase,
    shared: &std::path::Path,
    count: usize,
    store_settings: &str,
) -> Vec<HttpDeputy> {
    let config = format!("{}{store_settings}", key_config(shared));
    let extra = ["--store", database.url.as_str(), "--max-requests-per-subject", "2000"];
    let workspace = [("DEPUTY_WORKSPACE", shared.to_str().unwrap())];
    let mut replicas = Vec::with_capacity(count);
    for _ in 0..count {
        replicas.push(HttpDeputy::start_with_config(&config, &extra, &workspace).await);
    }
    replicas
}

/// `GET /v1/sessions/ID` on `deputy`, waiting up to `wait_ms` for a running turn.
async fn read(deputy: &HttpDeputy, id: &str, wait_ms: u64) -> serde_json::Value {
    let (status, view) =
        deputy.rest(None, Method::GET, &format!("/v1/sessions/{id}?wait_ms={wait_ms}"), None).await;
    assert_eq!(status, 200, "{view}");
    view
}

#[tokio::test]
async fn a_thousand_concurrent_turns_on_one_session_across_three_replicas_make_one_winner() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let replicas = replicas(&database, shared.path(), 3).await;
    replicas[0].mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let id = replicas[0].create_session("hi").await;

    // Whichever replica wins holds its turn until the gates open.
    let gates: Vec<_> = replicas
        .iter()
        .map(|replica| replica.mock.push_held(MockResponse::sse(anthropic::text(&["won"])), 0))
        .collect();
    let turns = (0..1000).map(|n| {
        let replica = &replicas[n % replicas.len()];
        let path = format!("/v1/sessions/{id}/turns");
        async move {
            replica
                .rest(None, Method::POST, &path, Some(json!({"prompt": format!("turn {n}"), "wait_ms": 0})))
                .await
        }
    });
    let answers = futures::future::join_all(turns).await;
    let busy = answers.iter().filter(|(status, body)| *status == 409 && body["code"] == "SESSION_BUSY").count();
    let won: Vec<_> = answers.iter().filter(|(status, _)| (200..300).contains(status)).collect();
    assert_eq!((won.len(), busy), (1, 999), "one winner, the rest busy: {:?}", &answers[..answers.len().min(5)]);

    // Every replica sees the turn running where it runs.
    for replica in &replicas {
        let view = read(replica, &id, 0).await;
        assert_eq!(
            (view["state"]["status"].as_str(), view["state"]["running_turn"].as_u64()),
            (Some("running"), Some(2)),
            "{view}"
        );
    }
    for gate in &gates {
        gate.open();
    }
    // Done everywhere: two turns, the second the winner's.
    for replica in &replicas {
        let mut view = read(replica, &id, 5_000).await;
        for _ in 0..200 {
            if view["state"]["status"] == "idle" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            view = read(replica, &id, 1_000).await;
        }
        assert_eq!(view["state"]["turns"], 2, "{view}");
        assert_eq!(view["state"]["last_turn"]["text"], "won", "{view}");
    }

    // The next turn runs on any replica, from where the store stands (the losers' held
    // answers never went out).
    for replica in &replicas {
        replica.mock.clear_queue();
    }
    for (n, replica) in replicas.iter().enumerate() {
        replica.mock.push(MockResponse::sse(anthropic::text(&[&format!("next {n}")])));
        let (status, turn) = replica
            .rest(
                None,
                Method::POST,
                &format!("/v1/sessions/{id}/turns"),
                Some(json!({"prompt": format!("next {n}")})),
            )
            .await;
        assert_eq!((status, turn["text"].as_str()), (200, Some(format!("next {n}").as_str())), "{turn}");
        let sent = replica.mock.requests().last().unwrap().body.to_string();
        assert!(sent.contains("won"), "replica {n} continued from the store: {sent}");
        if n > 0 {
            assert!(sent.contains(&format!("next {}", n - 1)), "replica {n} saw the turn before it: {sent}");
        }
    }
    assert_eq!(read(&replicas[1], &id, 0).await["state"]["turns"], 5);
}

#[tokio::test]
async fn an_interrupt_through_another_replica_cancels_the_turn_and_followers_there_see_it_end() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let replicas = replicas(&database, shared.path(), 2).await;
    let (a, b) = (&replicas[0], &replicas[1]);
    a.mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let id = a.create_session("hi").await;
    let (_, page) = b.rest(None, Method::GET, &format!("/v1/sessions/{id}/events"), None).await;
    let last = page["next_seq"].as_u64().unwrap();

    // B follows; A runs a turn that waits on its provider.
    let url = b.url(&format!("/v1/sessions/{id}/events?follow=true&after_seq={last}"));
    let response = b.http.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut follow = response.bytes_stream();
    let _held = a.mock.push_held(MockResponse::sse(anthropic::text(&["never"])), 0);
    let path = format!("/v1/sessions/{id}/turns");
    let (status, started) = a.rest(None, Method::POST, &path, Some(json!({"prompt": "wait", "wait_ms": 0}))).await;
    assert_eq!((status, started["status"].as_str()), (200, Some("running")), "{started}");
    a.mock.wait_for_requests(2).await;

    // B holds no turn of it, and sends the interrupt where the turn runs.
    let (status, interrupted) = b.rest(None, Method::POST, &format!("/v1/sessions/{id}/interrupt"), None).await;
    assert_eq!((status, interrupted["interrupted"].as_bool()), (200, Some(true)), "{interrupted}");
    let view = read(a, &id, 10_000).await;
    assert_eq!(view["state"]["last_turn"]["status"], "cancelled", "{view}");

    // B's follower sees the turn's events when A commits them: nothing polls.
    let mut text = String::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while !text.contains("event: turn_cancelled") {
            let chunk = futures::StreamExt::next(&mut follow).await.expect("the stream goes on").unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("B's follower saw A's turn end: {text}"));
    assert!(text.contains("event: turn_started"), "{text}");

    // Nothing runs now: an interrupt anywhere says so.
    let (status, refused) = b.rest(None, Method::POST, &format!("/v1/sessions/{id}/interrupt"), None).await;
    assert_eq!((status, refused["code"].as_str()), (409, Some("SESSION_NOT_RUNNING")), "{refused}");
}

/// Sends `signal` to `deputy`'s process.
fn signal(deputy: &HttpDeputy, signal: libc::c_int) {
    let pid = deputy.child.id().expect("running");
    // SAFETY: a plain kill(2) of a child this test spawned and still holds.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0);
}

/// Asks `deputy` for a turn of `id` until it is not busy (`within` at most): its answer, and
/// how long it was busy.
async fn turn_when_free(
    deputy: &HttpDeputy,
    id: &str,
    prompt: &str,
    within: std::time::Duration,
) -> ((u16, serde_json::Value), std::time::Duration) {
    let started = std::time::Instant::now();
    loop {
        let path = format!("/v1/sessions/{id}/turns");
        let answer = deputy.rest(None, Method::POST, &path, Some(json!({"prompt": prompt}))).await;
        if answer.1["code"] != "SESSION_BUSY" || started.elapsed() > within {
            return (answer, started.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn when_the_owner_is_killed_mid_turn_another_replica_runs_the_next_turn_within_the_lease() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let mut replicas = replicas_with(&database, shared.path(), 2, &format!("lease_secs = {LEASE_SECS}\n")).await;
    replicas[0].mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let id = replicas[0].create_session("hi").await;
    let _held = replicas[0].mock.push_held(MockResponse::sse(anthropic::text(&["lost"])), 0);
    let path = format!("/v1/sessions/{id}/turns");
    let (status, _) =
        replicas[0].rest(None, Method::POST, &path, Some(json!({"prompt": "doomed", "wait_ms": 0}))).await;
    assert_eq!(status, 200);
    replicas[0].mock.wait_for_requests(2).await;

    let b = replicas.pop().unwrap();
    let (status, busy) = b.rest(None, Method::POST, &path, Some(json!({"prompt": "too soon"}))).await;
    assert_eq!((status, busy["code"].as_str()), (409, Some("SESSION_BUSY")), "{busy}");
    signal(&replicas[0], libc::SIGKILL);
    let killed_at = std::time::Instant::now();
    let _ = replicas[0].child.wait().await;

    b.mock.push(MockResponse::sse(anthropic::text(&["after"])));
    let bound = std::time::Duration::from_secs(LEASE_SECS + 3);
    let ((status, turn), _) = turn_when_free(&b, &id, "after the crash", bound).await;
    assert_eq!((status, turn["text"].as_str()), (200, Some("after")), "{turn}");
    let waited = killed_at.elapsed();
    assert!(waited <= bound, "usable again within the lease: {waited:?}");

    // Every completed turn is there; the lost one left nothing half-saved, and is recorded
    // as failed before the turn that took its number.
    let view = read(&b, &id, 0).await;
    assert_eq!(view["state"]["turns"], 2, "{view}");
    let (_, journal) = b.rest(None, Method::GET, &format!("/v1/sessions/{id}/events?limit=500"), None).await;
    let kinds: Vec<(u64, String)> = journal["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["turn"] == 2)
        .map(|event| (event["turn"].as_u64().unwrap(), event["event"]["type"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(kinds.first().map(|(_, kind)| kind.as_str()), Some("turn_failed"), "{journal}");
    let lost = journal["events"].as_array().unwrap().iter().find(|event| event["event"]["type"] == "turn_failed");
    assert!(lost.unwrap()["event"]["error"].as_str().unwrap().contains("lost"), "{journal}");
    assert!(kinds.iter().any(|(_, kind)| kind == "turn_completed"), "{journal}");
    let sent = b.mock.requests().last().unwrap().body.to_string();
    assert!(sent.contains("Hello.") && !sent.contains("doomed") && !sent.contains("lost"), "{sent}");
}

#[tokio::test]
async fn a_paused_owner_cannot_commit_over_the_turn_that_ran_after_its_lease() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let replicas = replicas_with(&database, shared.path(), 2, &format!("lease_secs = {LEASE_SECS}\n")).await;
    let (a, b) = (&replicas[0], &replicas[1]);
    a.mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let id = a.create_session("hi").await;
    let held = a.mock.push_held(MockResponse::sse(anthropic::text(&["stale answer"])), 0);
    let path = format!("/v1/sessions/{id}/turns");
    let (status, _) = a.rest(None, Method::POST, &path, Some(json!({"prompt": "paused", "wait_ms": 0}))).await;
    assert_eq!(status, 200);
    a.mock.wait_for_requests(2).await;

    // A stops past its lease; B takes the session and completes a turn.
    signal(a, libc::SIGSTOP);
    b.mock.push(MockResponse::sse(anthropic::text(&["fresh answer"])));
    let bound = std::time::Duration::from_secs(LEASE_SECS + 3);
    let ((status, turn), _) = turn_when_free(b, &id, "meanwhile", bound).await;
    assert_eq!((status, turn["text"].as_str()), (200, Some("fresh answer")), "{turn}");

    // A wakes up and its turn finishes, too late: it is fenced out.
    held.open();
    signal(a, libc::SIGCONT);
    let view = read(a, &id, 10_000).await;
    assert_ne!(view["state"]["status"], "running", "{view}");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for replica in [a, b] {
        let view = read(replica, &id, 0).await;
        assert_eq!(view["state"]["turns"], 2, "{view}");
        assert_eq!(view["state"]["last_turn"]["text"], "fresh answer", "{view}");
    }
    // The next turn, wherever it runs, continues from B's.
    a.mock.push(MockResponse::sse(anthropic::text(&["next"])));
    let ((status, turn), _) = turn_when_free(a, &id, "next", bound).await;
    assert_eq!((status, turn["text"].as_str()), (200, Some("next")), "{turn}");
    let sent = a.mock.requests().last().unwrap().body.to_string();
    assert!(sent.contains("fresh answer") && !sent.contains("stale answer"), "{sent}");
}

#[tokio::test]
async fn mail_sent_through_one_replica_starts_a_host_turn_where_the_session_runs() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let replicas = replicas(&database, shared.path(), 2).await;
    let (a, b) = (&replicas[0], &replicas[1]);
    a.mock.push(MockResponse::sse(anthropic::text(&["Listening."])));
    let (status, created) =
        a.rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "hi", "host_mode": true}))).await;
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    let gate = a.mock.push_held(MockResponse::sse(anthropic::text(&["Busy here."])), 0);
    let path = format!("/v1/sessions/{id}/turns");
    let (status, _) = a.rest(None, Method::POST, &path, Some(json!({"prompt": "work", "wait_ms": 0}))).await;
    assert_eq!(status, 200);
    a.mock.wait_for_requests(2).await;

    // Mail through B, while A runs a turn: A takes it after that turn, in a turn of its own.
    a.mock.push(MockResponse::sse(anthropic::text(&["Got your mail."])));
    let (status, sent) =
        b.rest(None, Method::POST, &format!("/v1/sessions/{id}/inbox"), Some(json!({"message": "ping"}))).await;
    assert_eq!(status, 202, "{sent}");
    gate.open();
    let mut view = read(a, &id, 10_000).await;
    for _ in 0..200 {
        if view["state"]["turns"] == 3 && view["state"]["status"] == "idle" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        view = read(a, &id, 1_000).await;
    }
    assert_eq!(view["state"]["turns"], 3, "{view}");
    assert_eq!(view["state"]["last_turn"]["text"], "Got your mail.", "{view}");
    let asked = a.mock.requests().last().unwrap().body.to_string();
    assert!(asked.contains("ping"), "the auto-turn read the mail: {asked}");
    assert!(b.mock.requests().is_empty(), "B ran no turn");
    assert_eq!(read(b, &id, 0).await["state"]["inbox"]["waiting"], 0, "delivered once, everywhere");
}

#[tokio::test]
async fn a_webhook_is_delivered_once_by_one_replica_whatever_replica_ran_the_turn() {
    use super::webhooks::{Receiver, SECRET_ENV, config};

    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(200).await;
    let settings = format!("{}{}", key_config(shared.path()), config(&receiver, r#"["turn.completed"]"#));
    let extra = ["--store", database.url.as_str()];
    let env = [("DEPUTY_WORKSPACE", shared.path().to_str().unwrap()), SECRET_ENV];
    let a = HttpDeputy::start_with_config(&settings, &extra, &env).await;
    let b = HttpDeputy::start_with_config(&settings, &extra, &env).await;

    a.mock.push(MockResponse::sse(anthropic::text(&["one"])));
    let id = a.create_session("hi").await;
    for (n, replica) in [&b, &a, &b].into_iter().enumerate() {
        replica.mock.push(MockResponse::sse(anthropic::text(&[&format!("turn {n}")])));
        let path = format!("/v1/sessions/{id}/turns");
        let (status, turn) = replica.rest(None, Method::POST, &path, Some(json!({"prompt": "go"}))).await;
        assert_eq!(status, 200, "{turn}");
    }
    let delivered = receiver.wait_for_acknowledged(4).await;
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let received = receiver.received();
    let mut ids: Vec<&str> = received.iter().map(|delivery| delivery.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((received.len(), ids.len()), (4, 4), "each turn's event once: {ids:?}");
    assert!(delivered.iter().all(|delivery| delivery.kind() == "turn.completed"));
}

#[tokio::test]
async fn a_peer_name_is_taken_once_across_replicas() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let replicas = replicas(&database, shared.path(), 2).await;
    for replica in &replicas {
        replica.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["Ready."])));
    }
    let creates = (0..10).map(|n| {
        let replica = &replicas[n % 2];
        let body = json!({"prompt": "hi", "name": "reviewer", "peer_group": "pr-7"});
        async move { replica.rest(None, Method::POST, "/v1/sessions", Some(body)).await }
    });
    let answers = futures::future::join_all(creates).await;
    let created = answers.iter().filter(|(status, _)| *status == 201).count();
    assert_eq!(created, 1, "one session takes the name: {answers:?}");
    assert!(
        answers.iter().all(
            |(status, body)| *status == 201 || body["message"].as_str().is_some_and(|m| m.contains("reviewer"))
        ),
        "{answers:?}"
    );
}

#[tokio::test]
async fn what_one_replica_remembers_another_finds() {
    use super::memory::{MEMORY_TOOLS, model_calls};

    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let replicas = replicas(&database, shared.path(), 2).await;
    let (a, b) = (&replicas[0], &replicas[1]);
    let remember = |text: &'static str| async move {
        model_calls(&a.mock, "remember", json!({"text": text}), "Kept.");
        let body = json!({"prompt": "keep it", "builtins": MEMORY_TOOLS});
        let (status, created) = a.rest(None, Method::POST, "/v1/sessions", Some(body)).await;
        assert_eq!(status, 201, "{created}");
    };
    remember("The deploy window is Tuesday").await;
    let (_, listed) = b.rest(None, Method::GET, "/v1/memories", None).await;
    assert_eq!(listed["memories"].as_array().map(Vec::len), Some(1), "{listed}");

    // B's index is open now; what A keeps next reaches it all the same.
    remember("The staging database is called orca").await;
    let (status, found) = b.rest(None, Method::GET, "/v1/memories?query=orca", None).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["memories"][0]["text"], "The staging database is called orca", "{found}");
}

#[tokio::test]
async fn a_rewind_holds_the_lease_and_works_on_what_the_store_holds() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let replicas = replicas(&database, shared.path(), 2).await;
    let (a, b) = (&replicas[0], &replicas[1]);
    a.mock.push(MockResponse::sse(anthropic::text(&["one"])));
    let id = a.create_session("first").await;
    let path = format!("/v1/sessions/{id}/turns");
    // B runs turn 2 (so it holds a copy), then A turn 3: B's copy is behind.
    b.mock.push(MockResponse::sse(anthropic::text(&["two"])));
    assert_eq!(b.rest(None, Method::POST, &path, Some(json!({"prompt": "second"}))).await.0, 200);
    a.mock.push(MockResponse::sse(anthropic::text(&["three"])));
    assert_eq!(a.rest(None, Method::POST, &path, Some(json!({"prompt": "third"}))).await.0, 200);

    // Busy while a turn runs on A.
    let gate = a.mock.push_held(MockResponse::sse(anthropic::text(&["four"])), 0);
    assert_eq!(a.rest(None, Method::POST, &path, Some(json!({"prompt": "fourth", "wait_ms": 0}))).await.0, 200);
    a.mock.wait_for_requests(3).await;
    let rewind = format!("/v1/sessions/{id}/rewind");
    let (status, busy) = b.rest(None, Method::POST, &rewind, Some(json!({"to_turn": 2}))).await;
    assert_eq!((status, busy["code"].as_str()), (409, Some("SESSION_BUSY")), "{busy}");
    gate.open();
    assert_eq!(read(a, &id, 10_000).await["state"]["turns"], 4);

    // Through B, whose copy is behind: the rewind drops turns 3 and 4 of the stored session.
    let (status, rewound) = b.rest(None, Method::POST, &rewind, Some(json!({"to_turn": 2}))).await;
    assert_eq!(status, 200, "{rewound}");
    assert_eq!(rewound["rewound_turns"], json!([3, 4]), "{rewound}");
    a.mock.push(MockResponse::sse(anthropic::text(&["again"])));
    assert_eq!(a.rest(None, Method::POST, &path, Some(json!({"prompt": "after"}))).await.0, 200);
    let sent = a.mock.requests().last().unwrap().body.to_string();
    assert!(sent.contains("second") && !sent.contains("third") && !sent.contains("fourth"), "{sent}");
}

#[tokio::test]
async fn an_inbox_capacity_holds_across_replicas() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let replicas = replicas_with(&database, shared.path(), 2, "\n[inbox]\ncapacity = 2\n").await;
    let (a, b) = (&replicas[0], &replicas[1]);
    a.mock.push(MockResponse::sse(anthropic::text(&["Noted."])));
    let id = a.create_session("hi").await;
    let inbox = format!("/v1/sessions/{id}/inbox");
    // A holds the session with one message; B loads it, with that one, and takes a second.
    for (replica, message) in [(a, "one"), (b, "two")] {
        let (status, sent) = replica.rest(None, Method::POST, &inbox, Some(json!({"message": message}))).await;
        assert_eq!(status, 202, "{sent}");
    }
    // A's copy still holds one message, but the inbox holds two: full, whoever asks.
    for replica in [a, b] {
        let (status, refused) = replica.rest(None, Method::POST, &inbox, Some(json!({"message": "three"}))).await;
        assert_eq!(refused["code"], "SESSION_INBOX_FULL", "{status} {refused}");
    }
    // Both messages reach the next turn, wherever it runs.
    b.mock.push(MockResponse::sse(anthropic::text(&["Read both."])));
    let (status, turn) =
        b.rest(None, Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "read"}))).await;
    assert_eq!(status, 200, "{turn}");
    let asked = b.mock.requests().last().unwrap().body.to_string();
    assert!(asked.contains("one") && asked.contains("two") && !asked.contains("three"), "{asked}");
}

#[tokio::test]
async fn the_database_is_reached_over_tls_as_the_url_says() {
    let Some(database) = TestDatabase::create().await else { return };
    let home = tempfile::tempdir().unwrap();
    let client = database.client().await;
    let certificate: String = client.query_one("SHOW ssl_cert_file", &[]).await.unwrap().get(0);
    // Checked against the server's own certificate as the root, by the name it holds.
    let url = format!("{}&sslmode=verify-full&sslrootcert={certificate}&application_name=deputy-tls", database.url)
        .replacen("127.0.0.1", "localhost", 1);
    let deputy = HttpDeputy::start_with_config(&key_config(home.path()), &["--store", url.as_str()], &[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Over TLS."])));
    deputy.create_session("hi").await;
    let encrypted: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
             WHERE a.application_name = 'deputy-tls' AND s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(encrypted > 0, "deputy's connections are encrypted");

    // A root file that is not there: a clear error before anything is served.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["--store", &format!("{}&sslmode=verify-ca&sslrootcert=/nonexistent/root.pem", database.url)])
        .args(["sessions", "list"])
        .env("XDG_CONFIG_HOME", home.path())
        .env("HOME", home.path())
        .env_remove("DEPUTY_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("sslrootcert \"/nonexistent/root.pem\""), "{stderr}");
}

#[tokio::test]
async fn a_rewind_that_takes_a_dead_replicas_lease_records_the_turn_lost_with_it() {
    let Some(database) = TestDatabase::create().await else { return };
    let shared = tempfile::tempdir().unwrap();
    let mut replicas = replicas_with(&database, shared.path(), 2, &format!("lease_secs = {LEASE_SECS}\n")).await;
    let b = replicas.pop().unwrap();
    let a = &mut replicas[0];
    a.mock.push(MockResponse::sse(anthropic::text(&["one"])));
    let id = a.create_session("first").await;
    a.mock.push(MockResponse::sse(anthropic::text(&["two"])));
    let path = format!("/v1/sessions/{id}/turns");
    assert_eq!(a.rest(None, Method::POST, &path, Some(json!({"prompt": "second"}))).await.0, 200);
    let _held = a.mock.push_held(MockResponse::sse(anthropic::text(&["lost"])), 0);
    assert_eq!(a.rest(None, Method::POST, &path, Some(json!({"prompt": "doomed", "wait_ms": 0}))).await.0, 200);
    a.mock.wait_for_requests(3).await;
    signal(a, libc::SIGKILL);
    let _ = a.child.wait().await;

    let rewind = format!("/v1/sessions/{id}/rewind");
    let started = std::time::Instant::now();
    let (status, rewound) = loop {
        let answer = b.rest(None, Method::POST, &rewind, Some(json!({"to_turn": 1}))).await;
        if answer.1["code"] != "SESSION_BUSY" || started.elapsed() > std::time::Duration::from_secs(LEASE_SECS + 3)
        {
            break answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(status, 200, "{rewound}");
    let (_, journal) = b.rest(None, Method::GET, &format!("/v1/sessions/{id}/events?limit=500"), None).await;
    let lost = journal["events"].as_array().unwrap().iter().find(|event| event["event"]["type"] == "turn_failed");
    let lost = lost.unwrap_or_else(|| panic!("the lost turn is recorded: {journal}"));
    assert_eq!(lost["turn"], 3, "{journal}");
    assert!(lost["event"]["error"].as_str().unwrap().contains("lost"), "{journal}");
}
