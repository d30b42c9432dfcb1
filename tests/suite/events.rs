//! The session journal's feed on every surface, against the real binary: `session_events`
//! over MCP, `GET /v1/sessions/{id}/events` over REST and `session/events` over JSON-RPC page
//! the same events, and `follow=true` streams a live turn's events as Server-Sent Events.

use std::time::Duration;

use futures::StreamExt;
use rmcp::ClientLifecycleMode;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::common::http_deputy::{HttpDeputy, rpc_request};
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic};

/// Every event of a session, paged `limit` at a time with `page(after_seq)`.
async fn every_page<F, Fut>(limit: usize, mut page: F) -> Vec<Value>
where
    F: FnMut(Option<u64>) -> Fut,
    Fut: Future<Output = Value>,
{
    let mut events = Vec::new();
    let mut after = None;
    loop {
        let answer = page(after).await;
        let batch = answer["events"].as_array().unwrap_or_else(|| panic!("{answer}")).clone();
        assert!(batch.len() <= limit, "{answer}");
        if batch.is_empty() {
            return events;
        }
        after = answer["next_seq"].as_u64();
        events.extend(batch);
    }
}

/// `POST /rpc` of `request` with `Accept: accept` (streamed answers ask for `text/event-stream`).
async fn rpc_accepting(deputy: &HttpDeputy, accept: &str, request: &Value) -> reqwest::Response {
    let post = deputy.http.post(deputy.url("/rpc")).header("accept", accept).json(request);
    post.send().await.unwrap()
}

#[tokio::test]
async fn session_events_pages_the_same_journal_over_mcp_rest_and_jsonrpc() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hel", "lo"])));
    let id = deputy.create_session("hi").await;
    for (prompt, answer) in [("more", "Again"), ("last", "Done")] {
        deputy.mock.push(MockResponse::sse(anthropic::text(&[answer, "!"])));
        let (status, _) = deputy
            .rest(None, reqwest::Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": prompt})))
            .await;
        assert_eq!(status, 200);
    }

    let rest = every_page(2, |after| {
        let path = match after {
            Some(after) => format!("/v1/sessions/{id}/events?limit=2&after_seq={after}"),
            None => format!("/v1/sessions/{id}/events?limit=2"),
        };
        let deputy = &deputy;
        async move {
            let (status, body) = deputy.rest(None, reqwest::Method::GET, &path, None).await;
            assert_eq!(status, 200, "{body}");
            body
        }
    })
    .await;
    let jsonrpc = every_page(2, |after| {
        let (deputy, id) = (&deputy, id.clone());
        async move {
            let page = rpc_request(1, "session/events", json!({"session_id": id, "after_seq": after, "limit": 2}));
            deputy.rpc(&page).await.1["result"].clone()
        }
    })
    .await;
    let client = deputy.mcp(ClientLifecycleMode::Initialize).await;
    let mcp = every_page(2, |after| {
        let (client, id) = (&client, id.clone());
        async move {
            let arguments = json!({"session_id": id, "after_seq": after, "limit": 2});
            let Value::Object(arguments) = arguments else { unreachable!() };
            let result = client
                .call_tool(CallToolRequestParams::new("session_events".to_owned()).with_arguments(arguments))
                .await
                .unwrap();
            result.structured_content.unwrap()
        }
    })
    .await;

    assert_eq!(rest, jsonrpc);
    assert_eq!(rest, mcp);
    let kinds: Vec<&str> = rest.iter().map(|event| event["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[..4], ["session_created", "prompt_received", "turn_started", "text_delta"], "{kinds:?}");
    assert_eq!(kinds.iter().filter(|kind| **kind == "turn_completed").count(), 3, "{kinds:?}");
    let seqs: Vec<u64> = rest.iter().map(|event| event["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..rest.len() as u64).collect::<Vec<_>>());
    let text: Vec<&str> = rest
        .iter()
        .filter(|event| event["event"]["type"] == "text_delta")
        .map(|event| event["event"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, ["Hello", "Again!", "Done!"], "deltas merged per block");
    assert!(rest.iter().all(|event| event["at"].is_string()), "events carry their timestamps");

    // The page size is bounded, and an unknown session is not found, on every surface.
    let (status, body) =
        deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/events?limit=501"), None).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_REQUEST")));
    let (status, _) = deputy.rest(None, reqwest::Method::GET, "/v1/sessions/nope/events", None).await;
    assert_eq!(status, 404);
    let answer = deputy.rpc(&rpc_request(1, "session/events", json!({"session_id": "nope"}))).await.1;
    assert_eq!(answer["error"]["data"]["code"], "SESSION_NOT_FOUND", "{answer}");
}

#[tokio::test]
async fn follow_streams_a_live_turns_events() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["first"])));
    let id = deputy.create_session("hi").await;
    let (_, page) = deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/events"), None).await;
    let last = page["next_seq"].as_u64().unwrap();

    let response = deputy
        .http
        .get(deputy.url(&format!("/v1/sessions/{id}/events?follow=true&after_seq={last}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.bytes_stream();

    deputy.mock.push(MockResponse::sse(anthropic::text(&["live", " answer"])));
    let (status, _) = deputy
        .rest(None, reqwest::Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "go"})))
        .await;
    assert_eq!(status, 200);

    let mut text = String::new();
    let frames = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let chunk = body.next().await.expect("the stream goes on").unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
            if text.contains("event: turn_completed") {
                return text.clone();
            }
        }
    })
    .await
    .expect("the turn's events arrive");
    let events: Vec<Value> = frames
        .split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|line| line.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|event| event["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["prompt_received", "turn_started", "text_delta", "usage", "turn_completed"], "{frames}");
    assert_eq!(events[0]["seq"].as_u64(), Some(last + 1));
    assert_eq!(events[2]["event"]["text"], "live answer");
}

/// Reads `body` into `text` until `done(text)` (20 s at most).
async fn read_until(
    body: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    text: &mut String,
    wanted: &str,
    done: impl Fn(&str) -> bool,
) {
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while !done(text) {
            let chunk = body.next().await.expect("the stream goes on").unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    });
    assert!(read.await.is_ok(), "{wanted:?} within 20 s: {text}");
}

/// The frames of an SSE body so far: each one's `id` (if any) and its `data` as JSON.
fn sse_frames(body: &str) -> Vec<(Option<String>, Value)> {
    body.split("\n\n")
        .filter_map(|frame| {
            let data = frame.lines().find_map(|line| line.strip_prefix("data: "))?;
            let id = frame.lines().find_map(|line| line.strip_prefix("id: ")).map(str::to_owned);
            Some((id, serde_json::from_str(data).unwrap()))
        })
        .collect()
}

#[tokio::test]
async fn follow_with_provisional_streams_a_running_turn_before_it_is_saved() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["first"])));
    let id = deputy.create_session("hi").await;
    let (_, page) = deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/events"), None).await;
    let last = page["next_seq"].as_u64().unwrap();
    let url = deputy.url(&format!("/v1/sessions/{id}/events?follow=true&provisional=true&after_seq={last}"));
    let response = deputy.http.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();

    // The answer stops after its first words until the gate opens.
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["partial", " rest"])), 3);
    let path = format!("/v1/sessions/{id}/turns");
    let (status, running) =
        deputy.rest(None, reqwest::Method::POST, &path, Some(json!({"prompt": "go", "wait_ms": 0}))).await;
    assert_eq!((status, running["status"].as_str()), (200, Some("running")), "{running}");

    let mut text = String::new();
    read_until(&mut body, &mut text, "partial", |text| text.contains("partial")).await;
    let frames = sse_frames(&text);
    let (id_of_partial, partial) =
        frames.iter().find(|(_, event)| event["event"]["type"] == "text_delta").cloned().unwrap();
    assert_eq!(
        (partial["provisional"].as_bool(), partial["event"]["text"].as_str()),
        (Some(true), Some("partial"))
    );
    assert_eq!(id_of_partial, None, "a provisional event has no SSE id to resume from");
    assert!(frames.iter().all(|(id, event)| id.is_none() && event["provisional"] == true), "{text}");
    let kinds: Vec<&str> = frames.iter().map(|(_, event)| event["event"]["type"].as_str().unwrap()).collect();
    assert!(kinds.starts_with(&["prompt_received", "turn_started"]), "{kinds:?}");

    // Once saved, the committed events follow with their ids; the text is whole.
    gate.open();
    // The provisional `turn_completed` may come first: read on to the committed one.
    let committed_end = |text: &str| {
        // Whole frames only: a read may end inside one.
        let whole = &text[..text.rfind("\n\n").unwrap_or(0)];
        sse_frames(whole).iter().any(|(id, event)| id.is_some() && event["event"]["type"] == "turn_completed")
    };
    read_until(&mut body, &mut text, "the committed turn_completed", committed_end).await;
    let committed: Vec<(Option<String>, Value)> =
        sse_frames(&text).into_iter().filter(|(_, event)| event.get("provisional").is_none()).collect();
    let kinds: Vec<&str> = committed.iter().map(|(_, event)| event["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["prompt_received", "turn_started", "text_delta", "usage", "turn_completed"], "{text}");
    assert!(committed.iter().all(|(id, event)| id.as_deref() == Some(event["seq"].to_string().as_str())));
    assert_eq!(committed[2].1["event"]["text"], "partial rest");
    assert_eq!(committed[2].1["seq"], partial["seq"], "the committed event replaces the provisional one");
}

/// The JSON-RPC messages of an SSE body (each `data:` is one message).
fn sse_messages(body: &str) -> Vec<Value> {
    sse_frames(body).into_iter().map(|(_, data)| data).collect()
}

#[tokio::test]
async fn a_jsonrpc_client_accepting_sse_gets_session_event_notifications_then_the_response() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["first"])));
    let id = deputy.create_session("hi").await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["stream", "ed"])));
    let request = rpc_request(7, "turn/start", json!({"session_id": id, "prompt": "go"}));
    let response = rpc_accepting(&deputy, "application/json, text/event-stream", &request).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let messages = sse_messages(&response.text().await.unwrap());
    let (answer, notifications) = messages.split_last().unwrap();
    assert_eq!((answer["id"].as_u64(), answer["result"]["text"].as_str()), (Some(7), Some("streamed")), "{answer}");
    assert!(
        notifications
            .iter()
            .all(|message| message["method"] == "session/event" && message["params"]["session_id"] == id.as_str())
    );
    let kinds: Vec<&str> =
        notifications.iter().map(|message| message["params"]["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"turn_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"turn_completed"), "{kinds:?}");
    let text: String = notifications
        .iter()
        .filter(|message| message["params"]["event"]["type"] == "text_delta")
        .map(|message| message["params"]["event"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "streamed");

    // Without the Accept header the same call is plain JSON.
    deputy.mock.push(MockResponse::sse(anthropic::text(&["plain"])));
    let plain = deputy.rpc(&rpc_request(1, "turn/start", json!({"session_id": id, "prompt": "again"}))).await.1;
    assert_eq!(plain["result"]["text"], "plain", "{plain}");
}

#[tokio::test]
async fn serve_rpc_streams_notifications_while_a_turn_runs() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use crate::common::deputy::deputy_serve;
    use crate::common::mock_llm::MockLlm;

    let mock = MockLlm::start().await;
    let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut command = deputy_serve(&mock, workspace.path(), home.path());
    command.arg("--rpc");
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line =
            tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.unwrap().unwrap().unwrap();
        serde_json::from_str(&line).unwrap()
    };

    let gate = mock.push_held(MockResponse::sse(anthropic::text(&["held", " back"])), 3);
    let create = json!({"jsonrpc": "2.0", "id": 1, "method": "session/create", "params": {"prompt": "hi"}});
    stdin.write_all(format!("{create}\n").as_bytes()).await.unwrap();
    // The turn is held inside the model's response: its start is out already.
    let started = next().await;
    assert_eq!(
        (started["method"].as_str(), started["params"]["event"]["type"].as_str()),
        (Some("session/event"), Some("turn_started")),
        "{started}"
    );
    gate.open();
    let mut kinds = Vec::new();
    let answer = loop {
        let message = next().await;
        if message.get("id").is_some() {
            break message;
        }
        kinds.push(message["params"]["event"]["type"].as_str().unwrap().to_owned());
    };
    assert_eq!(answer["result"]["text"], "held back", "{answer}");
    assert!(
        kinds.contains(&"text_delta".to_owned()) && kinds.last().map(String::as_str) == Some("turn_completed"),
        "{kinds:?}"
    );

    // Reads answer on the same pipe, and the journal is there too.
    let id = id_of(&answer["result"]);
    let events = json!({"jsonrpc": "2.0", "id": 2, "method": "session/events", "params": {"session_id": id}});
    stdin.write_all(format!("{events}\n").as_bytes()).await.unwrap();
    let page = next().await;
    assert_eq!(page["id"], 2, "{page}");
    assert!(page["result"]["events"].as_array().unwrap().len() >= 5, "{page}");
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
}

/// Every file under `root`, by relative path.
#[cfg(feature = "session-store")]
fn tree(root: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                out.insert(
                    path.strip_prefix(root).unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// `[projection] dir` projects after each commit; `deputy project` from the store afterwards
/// writes the same bytes.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn the_live_projection_and_deputy_project_write_the_same_tree() {
    let live = tempfile::tempdir().unwrap();
    let config = format!("[projection]\ndir = {:?}\n", live.path().display().to_string());
    let mut deputy = HttpDeputy::start_with_config(&config, &[], &[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["one"])));
    let id = deputy.create_session("hi").await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["two"])));
    let (status, _) = deputy
        .rest(None, reqwest::Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "more"})))
        .await;
    assert_eq!(status, 200);
    let (status, _) = deputy.rest(None, reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(status, 200);
    let (_, page) =
        deputy.rest(None, reqwest::Method::GET, &format!("/v1/sessions/{id}/events?limit=500"), None).await;
    let events = page["events"].as_array().unwrap().len() as u64;
    assert_eq!(page["events"][events as usize - 1]["event"]["type"], "archived");

    // The projector runs in the background after each commit: wait (bounded) for the last.
    let checkpoint = live.path().join("sessions").join(&id).join("checkpoint");
    let caught_up = async {
        loop {
            if let Ok(bytes) = std::fs::read(&checkpoint)
                && serde_json::from_slice::<Value>(&bytes).unwrap()["seq"] == events
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), caught_up).await.expect("the live projection caught up");
    assert!(deputy.terminate().await.success());

    let offline = tempfile::tempdir().unwrap();
    let status = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["project", "--out"])
        .arg(offline.path())
        .env("DEPUTY_STORE", deputy.home.path().join("sessions.redb"))
        .env("XDG_CONFIG_HOME", deputy.home.path())
        .env_remove("DEPUTY_CONFIG")
        .status()
        .await
        .unwrap();
    assert!(status.success());
    assert_eq!(tree(offline.path()), tree(live.path()));
    let session: Value = serde_json::from_slice(
        &std::fs::read(live.path().join("sessions").join(&id).join("session.json")).unwrap(),
    )
    .unwrap();
    assert_eq!((session["status"].as_str(), session["turns"].as_u64()), (Some("archived"), Some(2)), "{session}");
}

#[tokio::test]
async fn a_streamed_jsonrpc_turn_is_cancelled_when_its_client_leaves() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["first"])));
    let id = deputy.create_session("hi").await;
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["never", " seen"])), 3);
    let request = rpc_request(1, "turn/start", json!({"session_id": id, "prompt": "go"}));
    let response = rpc_accepting(&deputy, "text/event-stream", &request).await;
    let mut body = response.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(20), body.next()).await.unwrap().unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("turn_started"));
    drop(body);
    let read = deputy.rpc(&rpc_request(1, "session/read", json!({"session_id": id, "wait_ms": 20000}))).await.1;
    gate.open();
    assert_eq!(read["result"]["state"]["last_turn"]["status"], "cancelled", "{read}");
}

/// Security review 2, G3: a page is bounded by bytes as well as by count (about 1 MiB of events,
/// at least one), on REST as on every surface, and a JSON-RPC batch's answer is bounded as a
/// whole (4 MiB): entries past it are answered an error asking for them alone.
#[tokio::test]
async fn g3_event_pages_and_jsonrpc_batches_are_bounded_by_bytes() {
    const PAGE_BYTES: usize = 1024 * 1024;
    let deputy = HttpDeputy::start(&[]).await;
    let big = |n: usize| format!("{n}{}", "x".repeat(700 * 1024));
    // Every call answers (compaction's too: four such prompts pass its threshold).
    deputy.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    let id = deputy.create_session(&big(0)).await;
    for n in 1..4 {
        let (status, answer) = deputy
            .rest(None, reqwest::Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": big(n)})))
            .await;
        assert_eq!(status, 200, "{answer}");
    }

    let pages = std::cell::RefCell::new(Vec::new());
    let events = every_page(500, |after| {
        let path = match after {
            Some(after) => format!("/v1/sessions/{id}/events?after_seq={after}"),
            None => format!("/v1/sessions/{id}/events"),
        };
        let deputy = &deputy;
        let pages = &pages;
        async move {
            let (status, page) = deputy.rest(None, reqwest::Method::GET, &path, None).await;
            assert_eq!(status, 200);
            pages.borrow_mut().push(serde_json::to_vec(&page["events"]).unwrap().len());
            page
        }
    })
    .await;
    let pages = pages.into_inner();
    assert!(pages.iter().all(|&bytes| bytes <= PAGE_BYTES), "page sizes {pages:?}");
    let seqs: Vec<u64> = events.iter().map(|event| event["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "every event once, in order");
    let prompts = events.iter().filter(|event| event["event"]["type"] == "prompt_received").count();
    assert_eq!(prompts, 4);

    let batch: Vec<Value> =
        (0..8).map(|n| rpc_request(n, "session/events", json!({"session_id": id, "limit": 500}))).collect();
    let (status, body) = deputy.rpc_raw(serde_json::to_vec(&batch).unwrap()).await.unwrap();
    assert_eq!(status, 200);
    assert!(body.len() <= 4 * 1024 * 1024 + 64 * 1024, "a batch answered {} bytes", body.len());
    let answers: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(answers.len(), 8);
    assert!(answers[0]["result"]["events"].is_array(), "{}", answers[0]);
    let refused = answers.last().unwrap();
    assert_eq!(refused["id"], 7);
    assert!(refused["error"]["message"].as_str().unwrap().contains("send it alone"), "{refused}");
}

/// G7: a `[projection] dir` another user could write to is refused at startup (with a clear
/// error), and a symlink planted in a session's projection is not followed: its target stays
/// as it was.
#[tokio::test]
async fn g7_projection_refuses_a_shared_dir_and_does_not_follow_symlinks() {
    use std::os::unix::fs::PermissionsExt;
    // 1. A world-writable projection directory: deputy refuses to start.
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path().join("projection");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = format!("[projection]\ndir = {:?}\n", dir.display().to_string());
    let mock = crate::common::mock_llm::MockLlm::start().await;
    let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::create_dir_all(home.path().join("deputy")).unwrap();
    std::fs::write(home.path().join("deputy").join("config.toml"), &config).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
    command.args(["serve", "--http", "127.0.0.1:0", "--ephemeral"]);
    crate::common::deputy::on_mock(&mut command, &mock, workspace.path(), home.path())
        .env_remove("DEPUTY_TOKEN")
        .env_remove("DEPUTY_STORE")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().unwrap();
    let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("deputy refuses a world-writable projection dir instead of serving")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("projection") && stderr.contains("can be written by other users"), "{stderr}");

    // 2. A private projection directory with a symlink planted in a session's projection.
    let private = tempfile::tempdir().unwrap();
    let config = format!("[projection]\ndir = {:?}\n", private.path().display().to_string());
    let deputy = HttpDeputy::start_with_config(&config, &[], &[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["one"])));
    let id = deputy.create_session("hi").await;
    let session_dir = private.path().join("sessions").join(&id);
    let events_file = session_dir.join("events.jsonl");
    let wait_for = |path: std::path::PathBuf, longer_than: u64| async move {
        let grown = async {
            while std::fs::metadata(&path).map(|meta| meta.len()).unwrap_or(0) <= longer_than {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), grown).await.expect("the projection grew");
    };
    wait_for(session_dir.join("checkpoint"), 0).await;
    let victim = shared.path().join("victim");
    std::fs::write(&victim, "precious content\n").unwrap();
    std::fs::remove_file(session_dir.join("transcript.md")).unwrap();
    std::os::unix::fs::symlink(&victim, session_dir.join("transcript.md")).unwrap();
    let events_before = std::fs::metadata(&events_file).unwrap().len();
    deputy.mock.push(MockResponse::sse(anthropic::text(&["two"])));
    let (status, _) = deputy
        .rest(
            None,
            reqwest::Method::POST,
            &format!("/v1/sessions/{id}/turns"),
            Some(json!({"prompt": "ssh-ed25519 AAAA attacker"})),
        )
        .await;
    assert_eq!(status, 200);
    // events.jsonl is appended before transcript.md: once it grew, the transcript was tried.
    wait_for(events_file, events_before).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious content\n", "the symlink was not followed");
    assert!(std::fs::symlink_metadata(session_dir.join("transcript.md")).unwrap().file_type().is_symlink());
}
