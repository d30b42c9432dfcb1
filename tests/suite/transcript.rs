//! Transcript operations through the built binary: `session_fork` copies a conversation up to
//! a turn into a new session, `session_rewind` drops the turns after one; both over MCP, REST,
//! and (with a store) the command line and a restart.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::deputy::TestDeputy;
use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{MockLlm, MockResponse, RecordedRequest, anthropic};

/// The text of every message a model request carried, in order.
fn said(request: &RecordedRequest) -> Vec<String> {
    let text_of = |content: &Value| match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => {
            blocks.iter().filter_map(|block| block["text"].as_str()).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    };
    request.body["messages"].as_array().unwrap().iter().map(|message| text_of(&message["content"])).collect()
}

/// The last model request's messages.
fn last_said(mock: &MockLlm) -> Vec<String> {
    said(mock.requests().last().expect("a model request"))
}

/// A session of three turns over MCP, answered `A1`, `A2`, `A3`; its id.
async fn three_turns(deputy: &TestDeputy) -> String {
    deputy.mock.push(MockResponse::sse(anthropic::text(&["A1"])));
    let id = id_of(&deputy.ok("session_create", json!({"prompt": "one"})).await);
    for (prompt, answer) in [("two", "A2"), ("three", "A3")] {
        deputy.mock.push(MockResponse::sse(anthropic::text(&[answer])));
        deputy.ok("session_turn", json!({"session_id": id, "prompt": prompt})).await;
    }
    id
}

fn kinds(page: &Value) -> Vec<String> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["event"]["type"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_fork_at_a_turn_and_its_source_go_on_differently() {
    let deputy = TestDeputy::start().await;
    let source = three_turns(&deputy).await;

    let fork = deputy.ok("session_fork", json!({"session_id": source, "at_turn": 2})).await;
    let fork_id = id_of(&fork);
    assert_ne!(fork_id, source);
    assert_eq!(fork["state"]["forked_from"], json!({"session_id": source, "turn": 2}));
    assert_eq!((fork["state"]["status"].as_str(), fork["state"]["turns"].as_u64()), (Some("idle"), Some(2)));
    assert_eq!(fork["state"]["message_count"], 4);
    assert_eq!(fork["billing"]["total_tokens"], 0, "a fork starts with a fresh budget");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["forked answer"])));
    let turn = deputy.ok("session_turn", json!({"session_id": fork_id, "prompt": "fork asks"})).await;
    assert_eq!((turn["text"].as_str(), turn["turn"].as_u64()), (Some("forked answer"), Some(3)));
    assert_eq!(last_said(&deputy.mock), ["one", "A1", "two", "A2", "fork asks"]);

    deputy.mock.push(MockResponse::sse(anthropic::text(&["source answer"])));
    deputy.ok("session_turn", json!({"session_id": source, "prompt": "source asks"})).await;
    assert_eq!(last_said(&deputy.mock), ["one", "A1", "two", "A2", "three", "A3", "source asks"]);
    let source_view = deputy.ok("session_read", json!({"session_id": source})).await;
    assert_eq!(source_view["state"].get("forked_from"), None);
    assert_eq!(source_view["state"]["message_count"], 8);

    // Without `at_turn`: the turn the history ends with. The fork of a fork names its source.
    let again = deputy.ok("session_fork", json!({"session_id": fork_id})).await;
    assert_eq!(again["state"]["forked_from"], json!({"session_id": fork_id, "turn": 3}));
    assert_eq!(again["state"]["message_count"], 6);
    // At 0: the configuration, none of the conversation.
    let empty = deputy.ok("session_fork", json!({"session_id": source, "at_turn": 0})).await;
    assert_eq!((empty["state"]["message_count"].as_u64(), empty["state"]["turns"].as_u64()), (Some(0), Some(0)));

    let journal = deputy.ok("session_events", json!({"session_id": fork_id})).await;
    assert_eq!(kinds(&journal)[..2], ["session_created".to_owned(), "forked".to_owned()]);
    assert_eq!(journal["events"][1]["event"], json!({"type": "forked", "from_session_id": source, "at_turn": 2}));

    let (code, text) = deputy.err("session_fork", json!({"session_id": source, "at_turn": 9})).await;
    assert_eq!(code, "INVALID_REQUEST", "{text}");
    assert!(text.contains("has run 4 turns, not 9"), "{text}");
    let (code, _) = deputy.err("session_fork", json!({"session_id": "no-such-session"})).await;
    assert_eq!(code, "SESSION_NOT_FOUND");
}

#[tokio::test]
async fn a_rewound_session_continues_from_the_turn_it_kept() {
    let deputy = TestDeputy::start().await;
    let id = three_turns(&deputy).await;

    let rewound = deputy.ok("session_rewind", json!({"session_id": id, "to_turn": 1})).await;
    assert_eq!(
        rewound,
        json!({"session_id": id, "to_turn": 1, "rewound_turns": [2, 3], "dropped_messages": 4, "message_count": 2})
    );
    let view = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!((view["state"]["message_count"].as_u64(), view["state"]["turns"].as_u64()), (Some(2), Some(3)));

    // Turn numbers keep counting up: the next turn is 4, after turn 1's conversation.
    deputy.mock.push(MockResponse::sse(anthropic::text(&["A4"])));
    let turn = deputy.ok("session_turn", json!({"session_id": id, "prompt": "four"})).await;
    assert_eq!(turn["turn"], 4);
    assert_eq!(last_said(&deputy.mock), ["one", "A1", "four"]);

    // The rewound turns stay in the journal, followed by what the rewind did.
    let journal = deputy.ok("session_events", json!({"session_id": id, "limit": 500})).await;
    let rewind = journal["events"].as_array().unwrap().iter().find(|event| event["event"]["type"] == "rewound");
    assert_eq!(
        rewind.map(|event| &event["event"]),
        Some(&json!({"type": "rewound", "to_turn": 1, "rewound_turns": [2, 3], "dropped_messages": 4}))
    );
    assert!(kinds(&journal).iter().filter(|kind| *kind == "turn_completed").count() >= 4);

    // A rewound turn cannot be reached again; the new one can be forked at.
    let (code, text) = deputy.err("session_rewind", json!({"session_id": id, "to_turn": 3})).await;
    assert_eq!(code, "INVALID_REQUEST");
    assert!(text.contains("turn 3") && text.contains("cannot be reached"), "{text}");
    let fork = deputy.ok("session_fork", json!({"session_id": id, "at_turn": 4})).await;
    assert_eq!(fork["state"]["message_count"], 4);
    // Back to before the first turn.
    let all = deputy.ok("session_rewind", json!({"session_id": id, "to_turn": 0})).await;
    assert_eq!((all["message_count"].as_u64(), all["rewound_turns"].clone()), (Some(0), json!([1, 4])));
}

#[tokio::test]
async fn a_rewind_while_a_turn_runs_is_busy_and_changes_nothing() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let id = id_of(&deputy.ok("session_create", json!({"prompt": "hi"})).await);

    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["slow", " answer"])), 3);
    let running = deputy.call("session_turn", json!({"session_id": id, "prompt": "two"}));
    let refused = async {
        deputy.mock.wait_for_requests(2).await;
        let busy = deputy.err("session_rewind", json!({"session_id": id, "to_turn": 1})).await;
        gate.open();
        busy
    };
    let (turn, (code, _)) = tokio::join!(running, refused);
    assert_eq!(code, "SESSION_BUSY");
    assert_eq!(turn.structured_content.unwrap()["text"], "slow answer");
    let view = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(view["state"]["message_count"], 4);
}

/// A deputy over HTTP with a session of two turns (`one` → `A1`, `two` → `A2`), made over REST.
async fn two_turns_over_rest() -> (HttpDeputy, String) {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["A1"])));
    let id = deputy.create_session("one").await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["A2"])));
    let (status, _) =
        deputy.rest(None, Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "two"}))).await;
    assert_eq!(status, 200);
    (deputy, id)
}

#[tokio::test]
async fn fork_and_rewind_over_rest() {
    let (deputy, id) = two_turns_over_rest().await;

    let response = deputy
        .http
        .post(deputy.url(&format!("/v1/sessions/{id}/fork")))
        .json(&json!({"at_turn": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let fork: Value = response.json().await.unwrap();
    assert_eq!(location, format!("/v1/sessions/{}", id_of(&fork)));
    assert_eq!(fork["state"]["forked_from"], json!({"session_id": id, "turn": 1}));

    let (status, rewound) =
        deputy.rest(None, Method::POST, &format!("/v1/sessions/{id}/rewind"), Some(json!({"to_turn": 1}))).await;
    assert_eq!((status, rewound["rewound_turns"].clone()), (200, json!([2])));
    let (status, error) = deputy
        .rest(None, Method::POST, &format!("/v1/sessions/{id}/rewind"), Some(json!({"to_turn": "two"})))
        .await;
    assert_eq!((status, error["code"].as_str()), (400, Some("INVALID_REQUEST")), "{error}");
    let (status, error) = deputy
        .rest(
            None,
            Method::POST,
            &format!("/v1/sessions/{id}/rewind"),
            Some(json!({"session_id": id, "to_turn": 0})),
        )
        .await;
    assert_eq!((status, error["code"].as_str()), (400, Some("INVALID_REQUEST")), "{error}");
}

/// With a store: what a fork and a rewind did survives a restart, and the command line does
/// both on a stored session.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn forks_and_rewinds_are_saved_like_turns() {
    let deputy = TestDeputy::start().await;
    let id = three_turns(&deputy).await;
    let fork_id = id_of(&deputy.ok("session_fork", json!({"session_id": id, "at_turn": 2})).await);
    deputy.ok("session_rewind", json!({"session_id": id, "to_turn": 1})).await;
    let deputy = deputy.restart().await;

    let fork = deputy.ok("session_read", json!({"session_id": fork_id})).await;
    assert_eq!(fork["state"]["forked_from"], json!({"session_id": id, "turn": 2}));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["F3"])));
    deputy.ok("session_turn", json!({"session_id": fork_id, "prompt": "fork again"})).await;
    assert_eq!(last_said(&deputy.mock), ["one", "A1", "two", "A2", "fork again"]);
    deputy.mock.push(MockResponse::sse(anthropic::text(&["A4"])));
    deputy.ok("session_turn", json!({"session_id": id, "prompt": "after the rewind"})).await;
    assert_eq!(last_said(&deputy.mock), ["one", "A1", "after the rewind"]);

    let stopped = deputy.stop().await;
    let cli = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
        command.env_remove("DEPUTY_MODEL").env_remove("DEPUTY_CONFIG").env("XDG_CONFIG_HOME", stopped.home.path());
        command.env("ANTHROPIC_API_KEY", "k").env("ANTHROPIC_BASE_URL", stopped.mock.base_url());
        crate::common::deputy::with_store(&mut command, stopped.home.path());
        command.current_dir(stopped.workspace.path()).args(args).output().unwrap()
    };
    let output = cli(&["sessions", "fork", &id, "--at-turn", "1"]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with(&format!("forked {id} at turn 1 into ")), "{stdout}");
    let output = cli(&["sessions", "rewind", &id, "--to-turn", "1"]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(stdout, format!("rewound {id} to turn 1: 2 messages dropped, 2 kept\n"));
    let output = cli(&["sessions", "rewind", &id, "--to-turn", "7"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("INVALID_REQUEST"));

    // `sessions export ID > FILE`, then `sessions import FILE`.
    let output = cli(&["sessions", "export", &id]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let file = stopped.workspace.path().join("session.jsonl");
    std::fs::write(&file, &output.stdout).unwrap();
    let output = cli(&["sessions", "import", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let imported = stdout.trim_end().rsplit(' ').next().unwrap().to_owned();
    assert!(stdout.starts_with("imported ") && imported != id, "{stdout}");
    let output = cli(&["sessions", "export", &imported]);
    let again = String::from_utf8_lossy(&output.stdout).into_owned();
    let first = std::fs::read_to_string(&file).unwrap();
    assert_eq!(comparable(&again, &[&imported]), comparable(&first, &[&id]));
}

/// A document with its ids and times taken out: what export → import → export must keep.
fn comparable(document: &str, ids: &[&str]) -> Vec<Value> {
    fn scrub(value: &mut Value, ids: &[&str]) {
        match value {
            Value::Object(fields) => {
                for time in ["exported_at", "created_at", "updated_at", "at"] {
                    fields.remove(time);
                }
                fields.values_mut().for_each(|field| scrub(field, ids));
            }
            Value::Array(items) => items.iter_mut().for_each(|item| scrub(item, ids)),
            Value::String(text) if ids.contains(&text.as_str()) => *text = "ID".to_owned(),
            _ => {}
        }
    }
    document
        .lines()
        .map(|line| {
            let mut value: Value = serde_json::from_str(line).unwrap();
            scrub(&mut value, ids);
            value
        })
        .collect()
}

/// Export over REST, import it back, export the import: the same document apart from ids and
/// times; the imported session goes on from the whole conversation. A damaged or newer
/// document creates nothing.
#[tokio::test]
async fn an_exported_session_imports_as_a_new_session_that_exports_the_same() {
    let (deputy, id) = two_turns_over_rest().await;

    let export = |id: String| {
        let request = deputy.http.get(deputy.url(&format!("/v1/sessions/{id}/export")));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200);
            assert_eq!(response.headers()["content-type"], "application/jsonl");
            response.text().await.unwrap()
        }
    };
    let import = |document: String| {
        let request = deputy.http.post(deputy.url("/v1/sessions/import")).body(document);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let document = export(id.clone()).await;
    let header: Value = serde_json::from_str(document.lines().next().unwrap()).unwrap();
    assert_eq!((header["type"].as_str(), header["format"].as_str()), (Some("header"), Some("deputy.session")));
    assert_eq!((header["version"].as_u64(), header["messages"].as_u64()), (Some(1), Some(4)));

    let (status, imported) = import(document.clone()).await;
    assert_eq!(status, 201, "{imported}");
    let new_id = id_of(&imported);
    assert_ne!(new_id, id);
    assert_eq!(
        (imported["state"]["turns"].as_u64(), imported["state"]["message_count"].as_u64()),
        (Some(2), Some(4))
    );
    let (_, source) = deputy.rest(None, Method::GET, &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(imported["state"]["owner"], source["state"]["owner"], "the importer owns it");

    if cfg!(feature = "session-store") {
        // Without a store the imported journal is not kept, so only stored sessions export it.
        let again = export(new_id.clone()).await;
        assert_eq!(comparable(&again, &[&new_id]), comparable(&document, &[&id]));
    }

    deputy.mock.push(MockResponse::sse(anthropic::text(&["A3"])));
    let (status, turn) = deputy
        .rest(None, Method::POST, &format!("/v1/sessions/{new_id}/turns"), Some(json!({"prompt": "three"})))
        .await;
    assert_eq!((status, turn["turn"].as_u64()), (200, Some(3)), "{turn}");
    assert_eq!(last_said(&deputy.mock), ["one", "A1", "two", "A2", "three"]);

    let (_, before) = deputy.rest(None, Method::GET, "/v1/sessions", None).await;
    let newer = document.replacen("\"version\":1", "\"version\":7", 1);
    let lines: Vec<&str> = document.lines().collect();
    let damaged = format!("{}\n{}\n{}\n", lines[0], lines[1], &lines[2][..lines[2].len() / 2]);
    let missing = lines.iter().enumerate().filter(|(at, _)| *at != 3).map(|(_, line)| *line).collect::<Vec<_>>();
    for (bad, says) in [
        (newer, "format version 7, newer than this deputy reads"),
        (damaged, "line 3:"),
        (missing.join("\n"), "announced"),
        ("not a document".to_owned(), "line 1"),
    ] {
        let (status, error) = import(bad).await;
        assert_eq!((status, error["code"].as_str()), (400, Some("INVALID_REQUEST")), "{error}");
        assert!(error["message"].as_str().unwrap().contains(says), "{error}");
    }
    let (_, after) = deputy.rest(None, Method::GET, "/v1/sessions", None).await;
    assert_eq!(after["total"], before["total"], "a refused import creates nothing");
}

/// An MCP client reads the document as a resource; the secret values of the session's MCP
/// servers are not in it, and its header says which were left out.
#[tokio::test]
async fn mcp_clients_read_the_export_as_a_resource_without_its_secrets() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["A1"])));
    let server = json!({
        "name": "ev",
        "command": crate::common::mcp_servers::bin("mcp-server-everything"),
        "args": ["stdio", format!("--deputy-test={}", crate::common::mcp_servers::marker())],
        "env": {"SECRET_TOKEN": "s3cr3t-value-42"},
    });
    let created = deputy.ok("session_create", json!({"prompt": "one", "mcp_servers": [server]})).await;
    let id = id_of(&created);
    let uri = format!("deputy://sessions/{id}/export");
    let read = deputy.client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri)).await.unwrap();
    let rmcp::model::ResourceContents::TextResourceContents { text, mime_type, .. } = &read.contents[0] else {
        panic!("a text resource: {read:?}")
    };
    assert_eq!(mime_type.as_deref(), Some("application/jsonl"));
    assert_eq!(
        text.lines().count(),
        2 + 2 + text.lines().filter(|line| line.contains("\"type\":\"event\"")).count()
    );
    assert!(text.lines().nth(1).unwrap().starts_with("{\"type\":\"record\""));
    assert!(!text.contains("s3cr3t-value-42"));
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["secrets_left_out"], json!(["mcp_servers.ev.env.SECRET_TOKEN"]));
}
