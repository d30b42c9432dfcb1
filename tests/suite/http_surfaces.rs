//! REST (`/v1`) and JSON-RPC (`/rpc`) end to end: `deputy serve --http` as a child process,
//! driven with reqwest, its provider a mock LLM. One lifecycle runs against both surfaces
//! through [`Surface`], so the two answer the same contract with the same assertions; the
//! error codes are checked against the table of DESIGN.md, written out here independently.

use std::time::Duration;

use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic};
use crate::common::scenarios::capped_log_read;
use futures::StreamExt;
use serde_json::{Value, json};

/// The number of model requests so far plus `n`, to wait for the next ones.
fn requests_plus(deputy: &HttpDeputy, n: usize) -> usize {
    deputy.mock.requests().len() + n
}

/// An error as a surface showed it.
#[derive(Debug)]
struct Failure {
    /// The string code (`body.code` / `error.data.code`).
    code: String,
    /// HTTP status (REST) or JSON-RPC error code.
    transport: i64,
    message: String,
    session_id: Option<String>,
    /// `error_kind` of an `AGENT_ERROR`.
    error_kind: Option<String>,
}

type Outcome = Result<Value, Failure>;

/// One way into deputy's session lifecycle. Params are the wire params as JSON.
trait Surface {
    /// The transport code DESIGN.md's error table gives `code` on this surface.
    fn expected(&self, code: &str) -> i64;
    async fn create(&self, params: Value) -> Outcome;
    /// `params` without the session id.
    async fn turn(&self, id: &str, params: Value) -> Outcome;
    async fn read(&self, id: &str, wait_ms: Option<u64>) -> Outcome;
    async fn list(&self, params: Value) -> Outcome;
    async fn interrupt(&self, id: &str) -> Outcome;
    async fn archive(&self, id: &str) -> Outcome;
    async fn compact(&self, id: &str) -> Outcome;
    async fn tool_output(&self, id: &str, tool_use_id: &str) -> Outcome;
}

/// Checks that `outcome` is the error `code`, shown the way this surface must show it.
fn expect_err(surface: &impl Surface, outcome: Outcome, code: &str) -> Failure {
    let failure = outcome.expect_err(&format!("expected {code}"));
    assert_eq!(failure.code, code, "{failure:?}");
    assert_eq!(failure.transport, surface.expected(code), "{code} on the wire: {failure:?}");
    assert!(!failure.message.is_empty());
    failure
}

struct Rest<'a>(&'a HttpDeputy);

impl Rest<'_> {
    async fn answer(response: reqwest::Response, success: u16) -> Outcome {
        let status = response.status().as_u16();
        let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(content_type.as_deref(), Some("application/json"), "status {status}");
        let body: Value = response.json().await.unwrap();
        if status == success {
            return Ok(body);
        }
        assert!(status >= 400, "unexpected status {status}: {body}");
        Err(Failure {
            code: body["code"].as_str().expect("code").to_owned(),
            transport: i64::from(status),
            message: body["message"].as_str().expect("message").to_owned(),
            session_id: body["session_id"].as_str().map(str::to_owned),
            error_kind: body["error_kind"].as_str().map(str::to_owned),
        })
    }

    async fn get(&self, path: &str, query: &[(String, String)]) -> Outcome {
        let url = with_query(&self.0.url(path), query);
        Self::answer(self.0.http.get(url).send().await.unwrap(), 200).await
    }

    async fn post(&self, path: &str, body: Option<Value>, success: u16) -> Outcome {
        let request = self.0.http.post(self.0.url(path));
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        Self::answer(request.send().await.unwrap(), success).await
    }
}

/// `url?k=v&…` (this reqwest build has no `query`; the tests' values need no escaping).
fn with_query(url: &str, query: &[(String, String)]) -> String {
    if query.is_empty() {
        return url.to_owned();
    }
    let pairs: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{url}?{}", pairs.join("&"))
}

/// A JSON object as query pairs (strings unquoted).
fn query_of(params: &Value) -> Vec<(String, String)> {
    params
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
        .collect()
}

impl Surface for Rest<'_> {
    fn expected(&self, code: &str) -> i64 {
        match code {
            "SESSION_NOT_FOUND" => 404,
            "SESSION_BUSY" | "SESSION_NOT_RUNNING" => 409,
            "SESSION_PERSISTENCE_DISABLED" | "SESSION_COMPACTION_DISABLED" => 501,
            "SESSION_STORE_ERROR" | "AGENT_ERROR" => 500,
            "INVALID_REQUEST" => 400,
            other => panic!("no such code {other}"),
        }
    }

    async fn create(&self, params: Value) -> Outcome {
        self.post("/v1/sessions", Some(params), 201).await
    }

    async fn turn(&self, id: &str, params: Value) -> Outcome {
        self.post(&format!("/v1/sessions/{id}/turns"), Some(params), 200).await
    }

    async fn read(&self, id: &str, wait_ms: Option<u64>) -> Outcome {
        let query: Vec<_> = wait_ms.map(|ms| ("wait_ms".to_owned(), ms.to_string())).into_iter().collect();
        self.get(&format!("/v1/sessions/{id}"), &query).await
    }

    async fn list(&self, params: Value) -> Outcome {
        self.get("/v1/sessions", &query_of(&params)).await
    }

    async fn interrupt(&self, id: &str) -> Outcome {
        self.post(&format!("/v1/sessions/{id}/interrupt"), None, 200).await
    }

    async fn archive(&self, id: &str) -> Outcome {
        let response = self.0.http.delete(self.0.url(&format!("/v1/sessions/{id}"))).send().await.unwrap();
        Self::answer(response, 200).await
    }

    async fn compact(&self, id: &str) -> Outcome {
        self.post(&format!("/v1/sessions/{id}/compact"), None, 200).await
    }

    async fn tool_output(&self, id: &str, tool_use_id: &str) -> Outcome {
        self.get(&format!("/v1/sessions/{id}/tool-outputs/{tool_use_id}"), &[]).await
    }
}

/// The names a [`ByName`] surface calls the lifecycle's operations by.
struct Names {
    create: &'static str,
    turn: &'static str,
    read: &'static str,
    list: &'static str,
    interrupt: &'static str,
    archive: &'static str,
    compact: &'static str,
    tool_output: &'static str,
}

/// A surface whose operations are calls by name with the wire params (JSON-RPC methods, MCP
/// tools): its [`Surface`] follows from its names.
trait ByName {
    const NAMES: Names;
    /// [`Surface::expected`].
    fn expected(&self, code: &str) -> i64;
    /// Calls `name` with `params`.
    async fn call(&self, name: &str, params: Value) -> Outcome;
}

impl<T: ByName> Surface for T {
    fn expected(&self, code: &str) -> i64 {
        ByName::expected(self, code)
    }

    async fn create(&self, params: Value) -> Outcome {
        self.call(T::NAMES.create, params).await
    }

    async fn turn(&self, id: &str, mut params: Value) -> Outcome {
        params["session_id"] = json!(id);
        self.call(T::NAMES.turn, params).await
    }

    async fn read(&self, id: &str, wait_ms: Option<u64>) -> Outcome {
        let mut params = json!({"session_id": id});
        if let Some(ms) = wait_ms {
            params["wait_ms"] = json!(ms);
        }
        self.call(T::NAMES.read, params).await
    }

    async fn list(&self, params: Value) -> Outcome {
        self.call(T::NAMES.list, params).await
    }

    async fn interrupt(&self, id: &str) -> Outcome {
        self.call(T::NAMES.interrupt, json!({"session_id": id})).await
    }

    async fn archive(&self, id: &str) -> Outcome {
        self.call(T::NAMES.archive, json!({"session_id": id})).await
    }

    async fn compact(&self, id: &str) -> Outcome {
        self.call(T::NAMES.compact, json!({"session_id": id})).await
    }

    async fn tool_output(&self, id: &str, tool_use_id: &str) -> Outcome {
        self.call(T::NAMES.tool_output, json!({"session_id": id, "tool_use_id": tool_use_id})).await
    }
}

struct Rpc<'a>(&'a HttpDeputy);

impl Rpc<'_> {
    async fn post(&self, body: &Value) -> reqwest::Response {
        self.0.http.post(self.0.url("/rpc")).json(body).send().await.unwrap()
    }
}

impl ByName for Rpc<'_> {
    const NAMES: Names = Names {
        create: "session/create",
        turn: "turn/start",
        read: "session/read",
        list: "session/list",
        interrupt: "turn/interrupt",
        archive: "session/archive",
        compact: "session/compact",
        tool_output: "session/tool_output",
    };

    fn expected(&self, code: &str) -> i64 {
        match code {
            "SESSION_NOT_FOUND" => -32001,
            "SESSION_BUSY" => -32002,
            "SESSION_PERSISTENCE_DISABLED" => -32003,
            "SESSION_COMPACTION_DISABLED" => -32004,
            "SESSION_NOT_RUNNING" => -32005,
            "SESSION_STORE_ERROR" | "AGENT_ERROR" => -32000,
            "INVALID_REQUEST" => -32602,
            other => panic!("no such code {other}"),
        }
    }

    async fn call(&self, method: &str, params: Value) -> Outcome {
        let id = fastrand::u32(..);
        let response = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!((&body["jsonrpc"], &body["id"]), (&json!("2.0"), &json!(id)), "{body}");
        let Some(error) = body.get("error") else { return Ok(body["result"].clone()) };
        assert!(body.get("result").is_none());
        let data = &error["data"];
        assert_eq!(data["message"], error["message"], "data repeats the message: {error}");
        Err(Failure {
            code: data["code"].as_str().expect("error.data.code").to_owned(),
            transport: error["code"].as_i64().expect("error.code"),
            message: error["message"].as_str().expect("error.message").to_owned(),
            session_id: data["session_id"].as_str().map(str::to_owned),
            error_kind: data["error_kind"].as_str().map(str::to_owned),
        })
    }
}

/// MCP streamable HTTP through the rmcp client. Its column of the error table is "isError
/// result" for every code: the code travels in `_meta["deputy/error"]` and `transport` is 0.
struct Mcp {
    client: rmcp::service::RunningService<rmcp::RoleClient, crate::common::deputy::RecordingClient>,
}

impl ByName for Mcp {
    const NAMES: Names = Names {
        create: "session_create",
        turn: "session_turn",
        read: "session_read",
        list: "session_list",
        interrupt: "session_interrupt",
        archive: "session_archive",
        compact: "session_compact",
        tool_output: "session_tool_output",
    };

    fn expected(&self, code: &str) -> i64 {
        assert!(
            ["SESSION_NOT_FOUND", "SESSION_BUSY", "SESSION_PERSISTENCE_DISABLED", "SESSION_COMPACTION_DISABLED"]
                .iter()
                .chain(&["SESSION_NOT_RUNNING", "SESSION_STORE_ERROR", "AGENT_ERROR", "INVALID_REQUEST"])
                .any(|known| *known == code),
            "no such code {code}"
        );
        0
    }

    async fn call(&self, tool: &str, arguments: Value) -> Outcome {
        let Value::Object(arguments) = arguments else { panic!("arguments must be an object") };
        let params = rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let result = self.client.call_tool(params).await.unwrap_or_else(|err| panic!("{tool}: {err}"));
        if result.is_error != Some(true) {
            return Ok(result.structured_content.clone().expect("structured content"));
        }
        let (code, text) = crate::common::deputy::error_of(&result);
        let body = crate::common::deputy::error_body(&result);
        Err(Failure {
            code,
            transport: 0,
            message: text,
            session_id: body["session_id"].as_str().map(str::to_owned),
            error_kind: body["error_kind"].as_str().map(str::to_owned),
        })
    }
}

/// The whole lifecycle and every error code a surface can be made to produce from outside
/// (all but SESSION_STORE_ERROR, which needs a failing disk).
async fn lifecycle(deputy: &HttpDeputy, surface: &impl Surface) {
    let mock = &deputy.mock;

    // create → turn → read → list
    mock.push(MockResponse::sse(anthropic::text(&["Hello", " there"])));
    let created = surface.create(json!({"prompt": "hi", "labels": {"team": "qa"}})).await.unwrap();
    assert_eq!((created["status"].as_str(), created["text"].as_str()), (Some("completed"), Some("Hello there")));
    assert_eq!(created["turn"], 1);
    let id = id_of(&created);

    mock.push(MockResponse::sse(anthropic::text(&["Second"])));
    let turn = surface.turn(&id, json!({"prompt": "more"})).await.unwrap();
    assert_eq!((turn["text"].as_str(), turn["turn"].as_u64()), (Some("Second"), Some(2)));

    let read = surface.read(&id, None).await.unwrap();
    assert_eq!((read["state"]["status"].as_str(), read["state"]["turns"].as_u64()), (Some("idle"), Some(2)));
    assert_eq!(read["state"]["labels"]["team"], "qa");
    assert_eq!(read["state"]["last_turn"]["text"], "Second");

    let list = surface.list(json!({})).await.unwrap();
    assert_eq!(list["total"], 1);
    assert_eq!(list["sessions"][0]["session_id"], id.as_str());
    assert_eq!(surface.list(json!({"offset": 1, "limit": 5})).await.unwrap()["sessions"], json!([]));
    assert!(list.get("next_cursor").is_none(), "one page holds everything: {list}");

    // interrupt with nothing running
    let failure = expect_err(surface, surface.interrupt(&id).await, "SESSION_NOT_RUNNING");
    assert_eq!(failure.session_id.as_deref(), Some(id.as_str()));

    // bad params
    for params in [
        json!({"prompt": "x", "unknown_field": true}),
        json!({"prompt": "x", "budget": {"max_tokens": "lots"}}),
        json!({"prompt": "   "}),
        json!({"prompt": "x", "model": "no-provider-prefix"}),
        json!({}),
    ] {
        expect_err(surface, surface.create(params).await, "INVALID_REQUEST");
    }
    expect_err(surface, surface.turn(&id, json!({"prompt": 5})).await, "INVALID_REQUEST");
    expect_err(surface, surface.turn(&id, json!({"prompt": "x", "wait": 5})).await, "INVALID_REQUEST");
    expect_err(surface, surface.list(json!({"limit": -1})).await, "INVALID_REQUEST");
    expect_err(surface, surface.list(json!({"cursor": "not-a-cursor"})).await, "INVALID_REQUEST");
    expect_err(surface, surface.tool_output(&id, "toolu_none").await, "INVALID_REQUEST");

    // busy: a second turn while the first is held inside its model response
    let gate = mock.push_held(MockResponse::sse(anthropic::text(&["slow", " answer"])), 3);
    let arrived = requests_plus(deputy, 1);
    let first = surface.turn(&id, json!({"prompt": "one"}));
    let second = async {
        mock.wait_for_requests(arrived).await;
        let busy = surface.turn(&id, json!({"prompt": "two"})).await;
        gate.open();
        busy
    };
    let (first, busy) = tokio::join!(first, second);
    assert_eq!(first.unwrap()["text"], "slow answer");
    let failure = expect_err(surface, busy, "SESSION_BUSY");
    assert_eq!(failure.session_id.as_deref(), Some(id.as_str()));

    // wait_ms: the turn answers `running`, then a read long-polls it
    let gate = mock.push_held(MockResponse::sse(anthropic::text(&["finally", " done"])), 3);
    let running = surface.turn(&id, json!({"prompt": "long job", "wait_ms": 100})).await.unwrap();
    assert_eq!((running["status"].as_str(), running["turn"].as_u64()), (Some("running"), Some(4)));
    assert_eq!(surface.read(&id, None).await.unwrap()["state"]["status"], "running");
    let arrived = requests_plus(deputy, 0);
    let release = async {
        mock.wait_for_requests(arrived).await;
        gate.open();
    };
    let (read, ()) = tokio::join!(surface.read(&id, Some(60_000)), release);
    let read = read.unwrap();
    assert_eq!(read["state"]["status"], "idle");
    assert_eq!(
        (read["state"]["last_turn"]["status"].as_str(), read["state"]["last_turn"]["text"].as_str()),
        (Some("completed"), Some("finally done"))
    );

    // a provider failure is AGENT_ERROR, with the session id and the provider's classification
    mock.push(MockResponse::json(400, anthropic::error_body("invalid_request_error", "mock says no")));
    let failure = expect_err(surface, surface.turn(&id, json!({"prompt": "fail"})).await, "AGENT_ERROR");
    assert_eq!(failure.session_id.as_deref(), Some(id.as_str()));
    assert_eq!(failure.error_kind.as_deref(), Some("invalid_request"), "{failure:?}");
    let failed_turn = surface.read(&id, None).await.unwrap();
    assert_eq!(failed_turn["state"]["last_turn"]["error_kind"], "invalid_request");

    // compaction, per build
    if cfg!(feature = "session-compaction") {
        mock.push(MockResponse::sse(anthropic::text(&["Goal: chat. Done."])));
        let compacted = surface.compact(&id).await.unwrap();
        assert_eq!(compacted["session_id"], id.as_str());
    } else {
        expect_err(surface, surface.compact(&id).await, "SESSION_COMPACTION_DISABLED");
    }

    // archive, then the session takes no turns
    assert_eq!(surface.archive(&id).await.unwrap(), json!({"session_id": id, "archived": true}));
    assert_eq!(surface.list(json!({})).await.unwrap()["total"], 0);
    let failure = expect_err(surface, surface.turn(&id, json!({"prompt": "more"})).await, "SESSION_NOT_FOUND");
    assert_eq!(failure.session_id.as_deref(), Some(id.as_str()));
    if cfg!(feature = "session-store") {
        let all = surface.list(json!({"include_archived": true})).await.unwrap();
        assert_eq!((all["total"].as_u64(), all["sessions"][0]["status"].as_str()), (Some(1), Some("archived")));
        assert_eq!(surface.read(&id, None).await.unwrap()["state"]["status"], "archived");
    } else {
        expect_err(surface, surface.list(json!({"include_archived": true})).await, "SESSION_PERSISTENCE_DISABLED");
        expect_err(surface, surface.read(&id, None).await, "SESSION_NOT_FOUND");
    }

    // unknown ids
    let unknown = "00000000-0000-4000-8000-000000000000";
    expect_err(surface, surface.read(unknown, None).await, "SESSION_NOT_FOUND");
    expect_err(surface, surface.turn(unknown, json!({"prompt": "x"})).await, "SESSION_NOT_FOUND");
    expect_err(surface, surface.interrupt(unknown).await, "SESSION_NOT_FOUND");
    expect_err(surface, surface.archive(unknown).await, "SESSION_NOT_FOUND");
}

#[tokio::test]
async fn rest_runs_the_lifecycle_with_the_error_table() {
    let deputy = HttpDeputy::start(&[]).await;
    lifecycle(&deputy, &Rest(&deputy)).await;
}

#[tokio::test]
async fn jsonrpc_runs_the_lifecycle_with_the_error_table() {
    let deputy = HttpDeputy::start(&[]).await;
    lifecycle(&deputy, &Rpc(&deputy)).await;
}

#[tokio::test]
async fn mcp_over_http_runs_the_lifecycle_with_the_error_table() {
    let deputy = HttpDeputy::start(&[]).await;
    let client = deputy.mcp(rmcp::ClientLifecycleMode::Initialize).await;
    lifecycle(&deputy, &Mcp { client }).await;
}

/// One SSE frame: `(event, data)`; keep-alive comments are skipped.
fn sse_frames(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|frame| {
            let mut event = None;
            let mut data = None;
            for line in frame.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = Some(name.to_owned());
                } else if let Some(json) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(json).unwrap());
                }
            }
            Some((event?, data?))
        })
        .collect()
}

async fn post_stream(deputy: &HttpDeputy, path: &str, body: Value) -> reqwest::Response {
    deputy.http.post(deputy.url(path)).json(&body).send().await.unwrap()
}

/// Checks a streamed turn: events in order, each named by its type, ending with `result`.
fn assert_streamed_turn(frames: &[(String, Value)], text: &str, turn: u64) -> Value {
    let names: Vec<&str> = frames.iter().map(|(event, _)| event.as_str()).collect();
    assert_eq!(names.first(), Some(&"turn_started"), "{names:?}");
    assert_eq!(names[names.len() - 2..], ["turn_completed", "result"], "{names:?}");
    for (event, data) in &frames[..frames.len() - 1] {
        assert_eq!(data["type"], event.as_str());
    }
    let deltas: String = frames
        .iter()
        .filter(|(event, _)| event == "text_delta")
        .map(|(_, data)| data["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, text);
    let result = frames.last().unwrap().1.clone();
    assert_eq!((result["status"].as_str(), result["text"].as_str()), (Some("completed"), Some(text)));
    assert_eq!(result["turn"], turn);
    result
}

#[tokio::test]
async fn rest_streams_turns_as_server_sent_events() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hel", "lo"])));
    let response = post_stream(&deputy, "/v1/sessions", json!({"prompt": "hi", "stream": true})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let result = assert_streamed_turn(&sse_frames(&response.text().await.unwrap()), "Hello", 1);
    let id = id_of(&result);

    deputy.mock.push(MockResponse::sse(anthropic::text(&["Again"])));
    let turns = format!("/v1/sessions/{id}/turns");
    let response = post_stream(&deputy, &turns, json!({"prompt": "more", "stream": true})).await;
    assert_streamed_turn(&sse_frames(&response.text().await.unwrap()), "Again", 2);

    // A failure during the turn is an `error` event after the turn's own events.
    deputy.mock.push(MockResponse::json(400, anthropic::error_body("invalid_request_error", "mock says no")));
    let response = post_stream(&deputy, &turns, json!({"prompt": "fail", "stream": true})).await;
    assert_eq!(response.status(), 200);
    let frames = sse_frames(&response.text().await.unwrap());
    let names: Vec<&str> = frames.iter().map(|(event, _)| event.as_str()).collect();
    assert_eq!(names, ["turn_started", "turn_failed", "error"]);
    let error = &frames[2].1;
    assert_eq!((error["code"].as_str(), error["session_id"].as_str()), (Some("AGENT_ERROR"), Some(id.as_str())));

    // An error before the turn starts is a plain JSON error with its status.
    let response = post_stream(&deputy, "/v1/sessions/nope/turns", json!({"prompt": "x", "stream": true})).await;
    assert_eq!(response.status(), 404);
    assert_eq!(response.json::<Value>().await.unwrap()["code"], "SESSION_NOT_FOUND");
    let response = post_stream(&deputy, &turns, json!({"prompt": "x", "stream": "yes"})).await;
    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn dropping_a_rest_stream_cancels_its_turn() {
    let deputy = HttpDeputy::start(&[]).await;
    let rest = Rest(&deputy);
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let id = id_of(&rest.create(json!({"prompt": "hi"})).await.unwrap());

    deputy.mock.push_held(MockResponse::sse(anthropic::text(&["started"])), 3);
    let response =
        post_stream(&deputy, &format!("/v1/sessions/{id}/turns"), json!({"prompt": "long", "stream": true})).await;
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("event: text_delta") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next()).await.unwrap().unwrap().unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(seen.starts_with("event: turn_started"), "{seen}");
    drop(body);

    let read = rest.read(&id, Some(30_000)).await.unwrap();
    assert_eq!(read["state"]["status"], "idle");
    assert_eq!(read["state"]["last_turn"]["status"], "cancelled");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["after"])));
    assert_eq!(rest.turn(&id, json!({"prompt": "next"})).await.unwrap()["text"], "after");
}

#[tokio::test]
async fn rest_refusals_are_json_errors() {
    let deputy = HttpDeputy::start(&[]).await;
    let http = &deputy.http;
    let sessions = deputy.url("/v1/sessions");
    let bad = [
        http.post(&sessions).header("content-type", "application/json").body("{oops"),
        http.post(&sessions).body(r#"{"prompt": "no content type"}"#),
        http.post(&sessions).json(&json!(["not", "an", "object"])),
        http.get(format!("{sessions}?limit=many")),
        http.get(format!("{sessions}?bogus=1")),
        http.get(deputy.url("/v1/sessions/x?wait_ms=-5")),
        http.post(deputy.url("/v1/sessions/x/turns")).json(&json!({"session_id": "y", "prompt": "z"})),
    ];
    for request in bad {
        let response = request.send().await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!((status.as_u16(), body["code"].as_str()), (400, Some("INVALID_REQUEST")), "{body}");
        assert!(body["message"].as_str().is_some_and(|message| !message.is_empty()));
    }

    deputy.mock.push(MockResponse::sse(anthropic::text(&["made"])));
    let response = http.post(&sessions).json(&json!({"prompt": "hi"})).send().await.unwrap();
    assert_eq!(response.status(), 201);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let created: Value = response.json().await.unwrap();
    assert_eq!(location, format!("/v1/sessions/{}", created["session_id"].as_str().unwrap()));

    // The conversation, for clients that show it.
    let messages: Value =
        http.get(deputy.url(&format!("{location}/messages"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(messages["messages"][0]["role"], "user");
    assert_eq!(messages["messages"][1]["content"][0], json!({"type": "text", "text": "made"}));
}

#[tokio::test]
async fn rest_reads_a_capped_tool_output() {
    let deputy = HttpDeputy::start(&[]).await;
    let rest = Rest(&deputy);
    let log = capped_log_read(&deputy.mock, deputy.workspace.path());
    let created =
        rest.create(json!({"prompt": "read log.txt", "context": {"tool_output_cap_bytes": 2048}})).await.unwrap();
    let id = created["session_id"].as_str().unwrap();
    let whole = rest.tool_output(id, "toolu_log").await.unwrap();
    assert_eq!(whole["content"].as_str(), Some(log.as_str()));
}

#[tokio::test]
async fn jsonrpc_batches_notifications_and_protocol_errors() {
    let deputy = HttpDeputy::start(&[]).await;
    let rpc = Rpc(&deputy);
    deputy.mock.push(MockResponse::sse(anthropic::text(&["hi"])));
    let id = id_of(&rpc.create(json!({"prompt": "hi"})).await.unwrap());

    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "session/list"},
        {"jsonrpc": "2.0", "method": "session/read", "params": {"session_id": id}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/nope"},
        42,
        {"jsonrpc": "2.0", "id": 3, "method": "session/read", "params": {"session_id": 5}},
        {"jsonrpc": "2.0", "id": "four", "method": "turn/interrupt", "params": {"session_id": id}},
        {"jsonrpc": "1.0", "id": 5, "method": "session/list"},
        {"jsonrpc": "2.0", "id": 6, "method": "session/list", "params": [0, 10]},
    ]);
    let response = rpc.post(&batch).await;
    assert_eq!(response.status(), 200);
    let answers: Vec<Value> = response.json().await.unwrap();
    let ids: Vec<&Value> = answers.iter().map(|answer| &answer["id"]).collect();
    assert_eq!(ids, [&json!(1), &json!(2), &Value::Null, &json!(3), &json!("four"), &json!(5), &json!(6)]);
    assert_eq!(answers[0]["result"]["total"], 1);
    assert_eq!(answers[1]["error"]["code"], -32601);
    assert_eq!(answers[2]["error"]["code"], -32600);
    assert_eq!(answers[3]["error"]["code"], -32602);
    assert_eq!(answers[3]["error"]["data"]["code"], "INVALID_REQUEST");
    assert_eq!(answers[4]["error"]["code"], -32005);
    assert_eq!(
        answers[4]["error"]["data"],
        json!({"code": "SESSION_NOT_RUNNING", "session_id": id,
                                                   "message": answers[4]["error"]["message"]})
    );
    assert_eq!(answers[5]["error"]["code"], -32600);
    assert_eq!(answers[6]["error"]["code"], -32602);
    assert!(answers.iter().all(|answer| answer["jsonrpc"] == "2.0"));

    // Notifications only: nothing to answer, not even an empty array.
    let notifications = json!([{"jsonrpc": "2.0", "method": "session/list"}, {"jsonrpc": "2.0", "method": "nope"}]);
    let response = rpc.post(&notifications).await;
    assert_eq!(response.status(), 204);
    assert!(response.bytes().await.unwrap().is_empty());
    let response = rpc.post(&json!({"jsonrpc": "2.0", "method": "session/list"})).await;
    assert_eq!(response.status(), 204);

    // Parse error, empty batch, unknown method.
    let response = deputy
        .http
        .post(deputy.url("/rpc"))
        .header("content-type", "application/json")
        .body("{\"jsonrpc\": \"2.0\", \"method\"")
        .send()
        .await
        .unwrap();
    let answer: Value = response.json().await.unwrap();
    assert_eq!((answer["error"]["code"].as_i64(), &answer["id"]), (Some(-32700), &Value::Null));
    let answer: Value = rpc.post(&json!([])).await.json().await.unwrap();
    assert_eq!((answer["error"]["code"].as_i64(), &answer["id"]), (Some(-32600), &Value::Null));
    let answer: Value =
        rpc.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call"})).await.json().await.unwrap();
    assert_eq!((answer["error"]["code"].as_i64(), &answer["id"]), (Some(-32601), &json!(9)));
    let response = deputy.http.post(deputy.url("/rpc")).body("{}").send().await.unwrap();
    assert_eq!(response.status(), 415);
}

#[tokio::test]
async fn the_openapi_document_is_served_and_checked_in() {
    let deputy = HttpDeputy::start(&[]).await;
    let response = deputy.http.get(deputy.url("/v1/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let served: Value = response.json().await.unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/openapi.json");
    let checked_in: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(served, checked_in, "schemas/openapi.json is stale: run `cargo run -- schemas --out schemas`");
    assert_eq!(served["openapi"], "3.1.0");
    let paths = served["paths"].as_object().unwrap();
    for (path, method) in [
        ("/v1/sessions", "post"),
        ("/v1/sessions", "get"),
        ("/v1/sessions/{id}", "get"),
        ("/v1/sessions/{id}", "delete"),
        ("/v1/sessions/{id}/turns", "post"),
        ("/v1/sessions/{id}/interrupt", "post"),
        ("/v1/sessions/{id}/compact", "post"),
        ("/v1/sessions/{id}/tool-outputs/{tool_use_id}", "get"),
        ("/v1/sessions/{id}/messages", "get"),
    ] {
        assert!(paths[path][method]["responses"].is_object(), "{method} {path}");
    }
}
