//! Memory through the built binary (issue 27): compacted history found again by the model's
//! `memory_search`, across `kill -9` and after its session is archived; memories `remember`ed in
//! one session found from another of the same owner, never by another tenant, on every surface;
//! the per-owner bounds.

use reqwest::Method;
use serde_json::{Value, json};

use super::tenants::{ALICE, BOB, TENANTS};
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockLlm, MockResponse, anthropic};

/// The model calls `tool` with `input`, then answers `answer`.
pub(super) fn model_calls(mock: &MockLlm, tool: &str, input: Value, answer: &str) {
    mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_mem", tool, input)])));
    mock.push(MockResponse::sse(anthropic::text(&[answer])));
}

/// The tool result the model got in the last request with one: its text and whether it was an
/// error.
fn last_tool_result(mock: &MockLlm) -> (String, bool) {
    let requests = mock.requests();
    let result = requests
        .iter()
        .rev()
        .find_map(|request| {
            let content = request.body["messages"].as_array()?.last()?["content"].as_array()?.clone();
            content.into_iter().find(|block| block["type"] == "tool_result")
        })
        .expect("a tool result reached the model");
    let text = match &result["content"] {
        Value::String(text) => text.clone(),
        blocks => blocks[0]["text"].as_str().unwrap_or_default().to_owned(),
    };
    (text, result["is_error"].as_bool().unwrap_or(false))
}

pub(super) const MEMORY_TOOLS: [&str; 2] = ["memory_search", "remember"];

#[cfg(all(feature = "session-store", feature = "session-compaction"))]
#[tokio::test]
async fn compacted_history_is_found_again_after_kill_9_and_after_its_session_is_archived() {
    use crate::common::deputy::TestDeputy;
    use crate::common::id_of;

    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Noted."])));
    // A recent-turn budget of one token: a summary keeps none of the turns before it.
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "Keep this safe: the vault code is 4417.", "context": {"recent_turn_budget": 1}}),
        )
        .await;
    let id = id_of(&created);
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Goal: keep a code safe."])));
    let compacted = deputy.ok("session_compact", json!({"session_id": id})).await;
    assert_eq!(compacted["summarized"], true, "{compacted}");
    let sent_after = deputy.mock.requests().len();

    // The memory tools are there by default, and the compacted turn is found.
    model_calls(&deputy.mock, "memory_search", json!({"query": "vault code"}), "It is 4417.");
    deputy.ok("session_turn", json!({"session_id": id, "prompt": "What was the vault code?"})).await;
    let tools: Vec<String> = deputy.mock.requests()[sent_after].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(MEMORY_TOOLS.iter().all(|tool| tools.iter().any(|name| name == tool)), "{tools:?}");
    let (found, is_error) = last_tool_result(&deputy.mock);
    assert!(!is_error && found.contains("the vault code is 4417"), "{found}");
    let hits: Value = serde_json::from_str(&found).unwrap();
    assert_eq!((hits[0]["session_id"].as_str(), hits[0]["turn"].as_u64()), (Some(id.as_str()), Some(1)));
    assert_eq!(hits[0]["kind"], "history");

    // kill -9, then the same search on the restarted server.
    let deputy = deputy.crash_and_restart().await;
    model_calls(&deputy.mock, "memory_search", json!({"query": "vault code"}), "Still 4417.");
    deputy.ok("session_turn", json!({"session_id": id, "prompt": "And now?"})).await;
    assert!(last_tool_result(&deputy.mock).0.contains("the vault code is 4417"));

    // Archived, its history is still its owner's to search, from another session.
    deputy.ok("session_archive", json!({"session_id": id})).await;
    model_calls(&deputy.mock, "memory_search", json!({"query": "vault code", "scope": "owner"}), "4417.");
    let other = id_of(&deputy.ok("session_create", json!({"prompt": "Do you know the vault code?"})).await);
    let (found, _) = last_tool_result(&deputy.mock);
    assert!(found.contains("the vault code is 4417") && found.contains(&id), "{found}");
    // Its own session's memory holds none of it.
    model_calls(&deputy.mock, "memory_search", json!({"query": "vault code"}), "No.");
    deputy.ok("session_turn", json!({"session_id": other, "prompt": "Only this session?"})).await;
    assert_eq!(last_tool_result(&deputy.mock).0, "[]");
}

/// A session of `token` whose model calls `tool`; the result the model got.
async fn session_calling(deputy: &HttpDeputy, token: &str, tool: &str, input: Value) -> (String, bool) {
    model_calls(&deputy.mock, tool, input, "Done.");
    let body = json!({"prompt": "go", "builtins": MEMORY_TOOLS});
    let (status, created) = deputy.rest(Some(token), Method::POST, "/v1/sessions", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    last_tool_result(&deputy.mock)
}

async fn rpc_as(deputy: &HttpDeputy, token: &str, method: &str, params: Value) -> Value {
    let frame = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let request = deputy.http.post(deputy.url("/rpc")).bearer_auth(token).json(&frame);
    request.send().await.unwrap().json().await.unwrap()
}

async fn resource_text(deputy: &HttpDeputy, token: &str, uri: &str) -> String {
    let client = deputy.mcp_as(token).await;
    let read = client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri)).await.expect("read");
    let text = match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("not text: {other:?}"),
    };
    client.cancel().await.ok();
    text
}

#[tokio::test]
async fn remembered_in_one_session_found_in_another_of_the_owner_and_never_by_another_tenant() {
    let config = format!("{TENANTS}\n[memory]\nmax_per_owner = 2\nmax_bytes_per_owner = 100\n");
    let deputy = HttpDeputy::start_with_config(&config, &[], &[]).await;

    let (kept, is_error) = session_calling(
        &deputy,
        ALICE,
        "remember",
        json!({"text": "Alice prefers tabs over spaces", "tags": ["style"]}),
    )
    .await;
    assert!(!is_error, "{kept}");
    let memory_id = serde_json::from_str::<Value>(&kept).unwrap()["id"].as_u64().expect("an id");

    let (found, _) =
        session_calling(&deputy, ALICE, "memory_search", json!({"query": "tabs or spaces?", "scope": "owner"}))
            .await;
    assert!(found.contains("Alice prefers tabs over spaces"), "{found}");
    let (found, _) =
        session_calling(&deputy, BOB, "memory_search", json!({"query": "tabs or spaces?", "scope": "owner"})).await;
    assert_eq!(found, "[]", "bob's model never sees alice's memory");

    // REST: each caller lists and searches only its own.
    let (status, mine) = deputy.rest(Some(ALICE), Method::GET, "/v1/memories", None).await;
    assert_eq!(status, 200, "{mine}");
    assert_eq!(mine["memories"][0]["text"], "Alice prefers tabs over spaces");
    assert_eq!(mine["memories"][0]["tags"], json!(["style"]));
    let (_, searched) = deputy.rest(Some(ALICE), Method::GET, "/v1/memories?query=tabs", None).await;
    assert!(searched["memories"][0]["score"].as_f64().is_some_and(|score| score > 0.0), "{searched}");
    let (_, theirs) = deputy.rest(Some(BOB), Method::GET, "/v1/memories?query=tabs", None).await;
    assert_eq!(theirs["memories"], json!([]));
    // JSON-RPC: bob can neither list nor delete it.
    let listed = rpc_as(&deputy, BOB, "memory/list", json!({})).await;
    assert_eq!(listed["result"]["memories"], json!([]), "{listed}");
    let deleted = rpc_as(&deputy, BOB, "memory/delete", json!({"memory_id": memory_id})).await;
    assert_eq!(deleted["result"]["deleted"], false, "{deleted}");
    // MCP resources: the same.
    assert!(resource_text(&deputy, ALICE, "deputy://memories").await.contains("Alice prefers tabs"));
    assert!(!resource_text(&deputy, BOB, "deputy://memories?query=tabs").await.contains("Alice"));

    // The bound: a second memory fits, a third is refused to the model as INVALID_REQUEST.
    let (_, is_error) = session_calling(&deputy, ALICE, "remember", json!({"text": "Alice uses vim"})).await;
    assert!(!is_error);
    // Pages, newest first, over REST and JSON-RPC alike.
    let (_, newest) = deputy.rest(Some(ALICE), Method::GET, "/v1/memories?limit=1", None).await;
    assert_eq!(newest["memories"][0]["text"], "Alice uses vim", "{newest}");
    let before = newest["next_before"].as_u64().expect("an older page");
    let path = format!("/v1/memories?limit=1&before={before}");
    let (_, older) = deputy.rest(Some(ALICE), Method::GET, &path, None).await;
    assert_eq!(older["memories"][0]["text"], "Alice prefers tabs over spaces", "{older}");
    assert_eq!(older.get("next_before"), None, "the last page: {older}");
    let paged = rpc_as(&deputy, ALICE, "memory/list", json!({"limit": 1, "before": before})).await;
    assert_eq!(paged["result"], older, "{paged}");
    let (refused, is_error) = session_calling(&deputy, ALICE, "remember", json!({"text": "Alice likes tea"})).await;
    assert!(is_error && refused.starts_with("INVALID_REQUEST: memory is full"), "{refused}");
    // The bytes bound: bob has room for one memory, but not for 101 bytes of it.
    let (refused, is_error) = session_calling(&deputy, BOB, "remember", json!({"text": "b".repeat(101)})).await;
    assert!(is_error && refused.contains("max_bytes_per_owner"), "{refused}");
    assert!(refused.starts_with("INVALID_REQUEST: memory is full"), "{refused}");

    // Deleting one makes room; the deleted one is gone from every answer.
    let path = format!("/v1/memories/{memory_id}");
    let (status, deleted) = deputy.rest(Some(ALICE), Method::DELETE, &path, None).await;
    assert_eq!((status, deleted["deleted"].as_bool()), (200, Some(true)), "{deleted}");
    let (_, searched) = deputy.rest(Some(ALICE), Method::GET, "/v1/memories?query=tabs", None).await;
    assert_eq!(searched["memories"], json!([]));
    let (_, is_error) = session_calling(&deputy, ALICE, "remember", json!({"text": "Alice likes tea"})).await;
    assert!(!is_error);
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn deputy_memory_lists_searches_and_deletes_the_stored_memories() {
    use super::persistence::{deputy_cli, run, stdout};
    use crate::common::deputy::TestDeputy;

    let deputy = TestDeputy::start().await;
    model_calls(&deputy.mock, "remember", json!({"text": "The staging database is on port 6543"}), "Kept.");
    deputy.ok("session_create", json!({"prompt": "remember the port", "builtins": MEMORY_TOOLS})).await;
    let stopped = deputy.stop().await;
    let cli = |args: &[&str]| deputy_cli(&stopped.mock, stopped.workspace.path(), stopped.home.path(), args);

    let listed = stdout(&run(cli(&["memory", "list"])).await);
    assert!(listed.contains("remembered") && listed.contains("staging database is on port 6543"), "{listed}");
    let found: Value =
        serde_json::from_str(&stdout(&run(cli(&["memory", "search", "staging port", "--json"])).await)).unwrap();
    let id = found["memories"][0]["id"].as_u64().expect("found");
    assert!(found["memories"][0]["score"].as_f64().is_some(), "{found}");
    assert_eq!(stdout(&run(cli(&["memory", "delete", &id.to_string()])).await), format!("deleted memory {id}\n"));
    assert_eq!(stdout(&run(cli(&["memory", "delete", &id.to_string()])).await), format!("no memory {id}\n"));
    assert_eq!(stdout(&run(cli(&["memory", "list"])).await), "no memories\n");
}

#[tokio::test]
async fn with_an_embeddings_model_memory_search_finds_a_meaning_without_its_words() {
    let embeddings = MockLlm::start().await;
    embeddings.respond_with(super::documents::embed);
    let config = format!(
        "{TENANTS}\n[providers.emb]\napi = \"openai\"\nbase_url = \"{}/v1\"\n\n[embeddings]\nmodel = \"emb:test-embed\"\ndimensions = 4\n",
        embeddings.base_url()
    );
    let deputy = HttpDeputy::start_with_config(&config, &[], &[]).await;
    let (_, is_error) =
        session_calling(&deputy, ALICE, "remember", json!({"text": "I parked the car on level 4"})).await;
    assert!(!is_error);
    let sent = embeddings.requests();
    let embedded = sent.iter().find(|request| request.body["input"][0] == "I parked the car on level 4");
    let embedded = embedded.expect("the memory was embedded");
    assert_eq!(embedded.body["dimensions"], 4, "[embeddings] dimensions reaches the wire");

    // No word in common: the vectors find it.
    let query = json!({"query": "automobile", "scope": "owner"});
    let (found, _) = session_calling(&deputy, ALICE, "memory_search", query.clone()).await;
    assert!(found.contains("I parked the car on level 4"), "{found}");
    let (found, _) = session_calling(&deputy, BOB, "memory_search", query).await;
    assert_eq!(found, "[]", "vectors never cross owners");
}
