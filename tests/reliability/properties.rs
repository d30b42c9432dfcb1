//! Scenario 7: property tests (proptest) over every tool's arguments, through JSON-RPC `/rpc` and
//! MCP stdio, and over raw JSON-RPC frames (arbitrary bytes, arbitrary JSON, batches): deputy
//! never panics or stops answering (`/healthz`, the process still runs), and every bad input is
//! answered with a code: one of the error table's, or a JSON-RPC specification code.

use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

use crate::common::deputy::{TestDeputy, error_of};
use crate::common::http_deputy::{HttpDeputy, rpc_request};
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic};

const CASES: u32 = 256;

/// The tools, with their JSON-RPC method names.
const TOOLS: [(&str, &str); 12] = [
    ("session_create", "session/create"),
    ("session_turn", "turn/start"),
    ("session_interrupt", "turn/interrupt"),
    ("session_read", "session/read"),
    ("session_list", "session/list"),
    ("session_archive", "session/archive"),
    ("session_compact", "session/compact"),
    ("session_tool_output", "session/tool_output"),
    ("session_send", "session/send"),
    ("session_events", "session/events"),
    ("session_fork", "session/fork"),
    ("session_rewind", "session/rewind"),
];

/// The error table's string codes (`ErrorCode::ALL`) and JSON-RPC codes, plus the specification's.
fn table_codes() -> Vec<&'static str> {
    deputy::error::ErrorCode::ALL.iter().map(|code| code.as_str()).collect()
}
fn jsonrpc_codes() -> Vec<i64> {
    let mut codes: Vec<i64> = deputy::error::ErrorCode::ALL.iter().map(|code| code.jsonrpc_code().into()).collect();
    codes.extend([-32700, -32600, -32601, -32602, -32603]);
    codes
}

/// Field names of the tools' params (so that mutations reach the validators), and others.
const KEYS: &[&str] = &[
    "prompt",
    "session_id",
    "wait_ms",
    "model",
    "system_prompt",
    "max_tokens",
    "budget",
    "context",
    "labels",
    "builtins",
    "approval",
    "approval_timeout_ms",
    "host_mode",
    "message",
    "peer_group",
    "name",
    "hops",
    "tool_results",
    "approvals",
    "cursor",
    "offset",
    "limit",
    "include_archived",
    "tool_use_id",
    "at_turn",
    "to_turn",
    "callbacks",
    "jsonrpc",
    "id",
    "method",
    "params",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![proptest::sample::select(KEYS).prop_map(str::to_owned), "[a-z_]{1,12}"]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,24}".prop_map(Value::from),
        Just(json!("00000000-0000-4000-8000-000000000000")),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid argument object for `tool`, on session `id`.
fn valid(tool: &str, id: &str) -> Map<String, Value> {
    let value = match tool {
        "session_create" => json!({"prompt": "p", "labels": {"k": "v"}, "wait_ms": 1000}),
        "session_turn" => json!({"session_id": id, "prompt": "p", "wait_ms": 1000}),
        "session_list" => json!({"limit": 5, "include_archived": true}),
        "session_read" => json!({"session_id": id, "wait_ms": 0}),
        "session_tool_output" => json!({"session_id": id, "tool_use_id": "toolu_x"}),
        "session_events" => json!({"session_id": id, "after_seq": 0, "limit": 10}),
        "session_fork" => json!({"session_id": id, "at_turn": 1}),
        "session_rewind" => json!({"session_id": id, "to_turn": 1}),
        _ => json!({"session_id": id}),
    };
    let Value::Object(map) = value else { unreachable!() };
    map
}

/// Arguments: arbitrary JSON, or a valid object with one field replaced, removed or added.
#[derive(Debug, Clone)]
enum Arguments {
    Arbitrary(Value),
    Replace(usize, Value),
    Remove(usize),
    Add(String, Value),
}

fn arguments() -> impl Strategy<Value = (usize, Arguments)> {
    let mutation = prop_oneof![
        json_value().prop_map(Arguments::Arbitrary),
        (any::<usize>(), json_value()).prop_map(|(n, v)| Arguments::Replace(n, v)),
        any::<usize>().prop_map(Arguments::Remove),
        (key(), json_value()).prop_map(|(k, v)| Arguments::Add(k, v)),
    ];
    (0..TOOLS.len(), mutation)
}

/// Never anything that could name a command to run (inline MCP servers, shells).
fn harmless(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            map.keys().all(|k| !matches!(k.as_str(), "command" | "mcp_servers" | "shell" | "workspace"))
                && map.values().all(harmless)
        }
        Value::Array(items) => items.iter().all(harmless),
        _ => true,
    }
}

fn build(tool: &str, id: &str, arguments: &Arguments) -> Value {
    let mut map = valid(tool, id);
    let pick = |n: usize, map: &Map<String, Value>| map.keys().nth(n % map.len().max(1)).cloned();
    match arguments {
        Arguments::Arbitrary(value) => return value.clone(),
        Arguments::Replace(n, value) => {
            if let Some(k) = pick(*n, &map) {
                map.insert(k, value.clone());
            }
        }
        Arguments::Remove(n) => {
            if let Some(k) = pick(*n, &map) {
                map.remove(&k);
            }
        }
        Arguments::Add(k, value) => {
            map.insert(k.clone(), value.clone());
        }
    }
    Value::Object(map)
}

/// Checks one JSON-RPC answer object: a result, or an error with a known code (and, for the
/// table's codes, `data.code` from the table).
fn check_answer(answer: &Value) -> Result<(), TestCaseError> {
    if answer.get("result").is_some() {
        return Ok(());
    }
    let code = answer["error"]["code"].as_i64();
    prop_assert!(code.is_some_and(|c| jsonrpc_codes().contains(&c)), "unknown code in {answer}");
    if let Some(data) = answer["error"].get("data") {
        prop_assert!(data["code"].as_str().is_some_and(|c| table_codes().contains(&c)), "{answer}");
    }
    Ok(())
}

/// POSTs a raw frame to `/rpc` and checks every answer in it.
async fn check_frame(deputy: &HttpDeputy, body: Vec<u8>) -> Result<(), TestCaseError> {
    let (status, bytes) =
        deputy.rpc_raw(body).await.map_err(|err| TestCaseError::fail(format!("no answer: {err}")))?;
    if status == 204 {
        prop_assert!(bytes.is_empty());
        return Ok(());
    }
    prop_assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let answer: Value = serde_json::from_slice(&bytes).map_err(|err| TestCaseError::fail(err.to_string()))?;
    match &answer {
        Value::Array(answers) => answers.iter().try_for_each(check_answer),
        one => check_answer(one),
    }
}

fn runner() -> TestRunner {
    TestRunner::new(Config { cases: CASES, failure_persistence: None, ..Config::default() })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Scripts plenty of answers, so that every turn the cases start completes at once.
fn feed(mock: &crate::common::mock_llm::MockLlm) {
    for _ in 0..4 * CASES {
        mock.push(MockResponse::sse(anthropic::text(&["fine"])));
    }
}

/// `deputy serve --http`, its model answering every turn the cases start.
fn http_deputy(rt: &tokio::runtime::Runtime) -> HttpDeputy {
    let deputy = rt.block_on(HttpDeputy::start(&[]));
    feed(&deputy.mock);
    deputy
}

/// Prints a test's figure: `CASES` `what`, every one answered with a code.
fn report(what: &str, started: Instant) {
    report!(
        "reliability: properties: {CASES} {what}, every one answered with a code, no panic; {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn properties_every_tools_arguments_over_jsonrpc_are_answered_with_a_code() {
    let rt = runtime();
    let started = Instant::now();
    let deputy = http_deputy(&rt);
    let (_, created) = rt.block_on(deputy.rpc(&rpc_request(1, "session/create", json!({"prompt": "hi"}))));
    let id = id_of(&created["result"]);
    let strategy = (arguments(), any::<bool>()).prop_filter("harmless", |((_, arguments), _)| match arguments {
        Arguments::Arbitrary(v) | Arguments::Replace(_, v) | Arguments::Add(_, v) => harmless(v),
        Arguments::Remove(_) => true,
    });
    runner()
        .run(&strategy, |((tool, arguments), positional)| {
            let params = build(TOOLS[tool].0, &id, &arguments);
            // Params by position are refused (-32602) whatever they hold.
            let params = if positional { json!([params]) } else { params };
            let frame = rpc_request(7, TOOLS[tool].1, params);
            rt.block_on(check_frame(&deputy, frame.to_string().into_bytes()))
        })
        .unwrap();
    alive(&rt, &deputy);
    report("cases of the tools' arguments over JSON-RPC", started);
}

#[test]
fn properties_raw_jsonrpc_frames_are_answered_with_a_code() {
    let rt = runtime();
    let started = Instant::now();
    let deputy = http_deputy(&rt);
    let frame =
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            json_value().prop_filter("harmless", harmless).prop_map(|v| v.to_string().into_bytes()),
            (proptest::sample::select(TOOLS.map(|(_, m)| m).to_vec()), json_value(), json_value())
                .prop_filter("harmless", |(_, id, params)| harmless(params) && harmless(id))
                .prop_map(|(method, id, params)| {
                    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().into_bytes()
                }),
            proptest::collection::vec(json_value().prop_filter("harmless", harmless), 0..8)
                .prop_map(|v| Value::Array(v).to_string().into_bytes()),
        ];
    runner().run(&frame, |bytes| rt.block_on(check_frame(&deputy, bytes))).unwrap();
    alive(&rt, &deputy);
    report("raw JSON-RPC frames (bytes, JSON, requests, batches)", started);
}

#[test]
fn properties_every_tools_arguments_over_mcp_stdio_are_answered_with_a_code() {
    let rt = runtime();
    let started = Instant::now();
    let deputy = rt.block_on(TestDeputy::start());
    feed(&deputy.mock);
    let id = id_of(&rt.block_on(deputy.ok("session_create", json!({"prompt": "hi"}))));
    let strategy = arguments().prop_filter("harmless and an object", |(_, arguments)| match arguments {
        Arguments::Arbitrary(v) => v.is_object() && harmless(v),
        Arguments::Replace(_, v) | Arguments::Add(_, v) => harmless(v),
        Arguments::Remove(_) => true,
    });
    let codes = table_codes();
    runner()
        .run(&strategy, |(tool, arguments)| {
            let Value::Object(map) = build(TOOLS[tool].0, &id, &arguments) else { unreachable!() };
            let request = rmcp::model::CallToolRequestParams::new(TOOLS[tool].0).with_arguments(map);
            match rt.block_on(deputy.client.call_tool(request)) {
                Ok(result) if result.is_error == Some(true) => {
                    let (code, _) = error_of(&result);
                    prop_assert!(codes.contains(&code.as_str()), "{code}");
                }
                Ok(result) => prop_assert!(result.structured_content.is_some(), "{result:?}"),
                Err(rmcp::ServiceError::McpError(error)) => {
                    prop_assert!(jsonrpc_codes().contains(&i64::from(error.code.0)), "{error:?}");
                }
                Err(other) => return Err(TestCaseError::fail(format!("no answer: {other}"))),
            }
            Ok(())
        })
        .unwrap();
    let read = rt.block_on(deputy.ok("session_read", json!({"session_id": id})));
    assert!(read["state"]["status"].is_string());
    report("cases of the tools' arguments over MCP stdio", started);
}

/// The server still answers and its process still runs.
fn alive(rt: &tokio::runtime::Runtime, deputy: &HttpDeputy) {
    let health = rt.block_on(deputy.http.get(deputy.url("/healthz")).send()).unwrap();
    assert_eq!(health.status(), 200);
    let pid = deputy.child.id().expect("deputy still runs");
    assert!(std::fs::metadata(format!("/proc/{pid}")).is_ok());
}
