//! Structured output end to end: the `deputy` binary over MCP stdio (and once over REST and
//! JSON-RPC), its providers the byte-accurate mock in both wire formats. Each case runs on the
//! Anthropic wire (a forced final tool) and the OpenAI wire (`response_format`), asserting the
//! exact JSON each request carries, and what a client reads back in `structured_output`.

use deputy::llm::FINAL_ANSWER_TOOL;
use deputy::llm::structured::final_answer_description;
use serde_json::{Value, json};

use crate::common::deputy::TestDeputy;
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockLlm, MockResponse, RecordedRequest, anthropic, openai};
use crate::common::prompt_cache::without_cache_control;

#[derive(Debug, Clone, Copy)]
enum Wire {
    Anthropic,
    OpenAi,
}

const WIRES: [Wire; 2] = [Wire::Anthropic, Wire::OpenAi];

impl Wire {
    fn model(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic:claude-test",
            Self::OpenAi => "openai:gpt-test",
        }
    }

    /// `session_create` params asking this wire's model for a forecast (`forecast_schema`).
    fn forecast_request(self) -> Value {
        json!({"prompt": "forecast?", "model": self.model(), "output_schema": forecast_schema()})
    }

    /// The model's final answer `value`, the way this wire gives it for `schema`.
    fn answer(self, mock: &MockLlm, value: &Value) {
        mock.push(MockResponse::sse(match self {
            Self::Anthropic => {
                anthropic::tool_calls(Some("Here it is."), &[("toolu_final", FINAL_ANSWER_TOOL, value.clone())])
            }
            Self::OpenAi => openai::text(&[&value.to_string()]),
        }));
    }

    /// The tool result or user message a rejected answer got, as the next request shows it.
    fn feedback(self, request: &RecordedRequest) -> String {
        let messages = request.body["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        match self {
            Self::Anthropic => {
                let block = &last["content"][0];
                assert_eq!(
                    (&block["type"], &block["tool_use_id"], &block["is_error"]),
                    (&json!("tool_result"), &json!("toolu_final"), &json!(true)),
                    "{last}"
                );
                block["content"].as_str().unwrap().to_owned()
            }
            Self::OpenAi => {
                assert_eq!(last["role"], "user", "{last}");
                last["content"].as_str().unwrap().to_owned()
            }
        }
    }
}

/// Nested objects and arrays, in OpenAI's strict shape (closed objects, every property required).
fn forecast_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["city", "days"],
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "array", "minItems": 1, "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["day", "high", "tags"],
                "properties": {
                    "day": {"type": "string", "enum": ["mon", "tue", "wed"]},
                    "high": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                }
            }}
        }
    })
}

fn forecast() -> Value {
    json!({"city": "Oslo", "days": [
        {"day": "mon", "high": -3, "tags": ["snow"]},
        {"day": "tue", "high": 1.5, "tags": []}
    ]})
}

/// What the request of a structured call must carry, exactly, on each wire.
fn assert_asks_for(wire: Wire, request: &RecordedRequest, schema: &Value, strict: bool) {
    let body = &without_cache_control(&request.body);
    match wire {
        Wire::Anthropic => {
            assert_eq!(body["tool_choice"], json!({"type": "any"}));
            let tools = body["tools"].as_array().unwrap();
            assert_eq!(
                tools.last().unwrap(),
                &json!({"name": FINAL_ANSWER_TOOL, "description": final_answer_description(), "input_schema": schema})
            );
            assert!(body.get("response_format").is_none());
        }
        Wire::OpenAi => {
            assert_eq!(
                body["response_format"],
                json!({"type": "json_schema", "json_schema": {"name": FINAL_ANSWER_TOOL, "schema": schema, "strict": strict}})
            );
            assert!(body.get("tool_choice").is_none());
        }
    }
}

#[tokio::test]
async fn a_valid_first_answer_is_structured_output_a_client_uses_directly() {
    let deputy = TestDeputy::start().await;
    for wire in WIRES {
        let before = deputy.mock.requests().len();
        wire.answer(&deputy.mock, &forecast());
        let created = deputy.ok("session_create", wire.forecast_request()).await;
        assert_eq!(created["status"], "completed", "{wire:?}: {created}");
        assert_eq!(created["stop_reason"], "end_turn", "{wire:?}");
        // Straight from the tool result's structured content, no parsing of `text`.
        assert_eq!(created["structured_output"]["days"][1]["high"], json!(1.5), "{wire:?}");
        assert_eq!(created["structured_output"], forecast(), "{wire:?}");
        assert_eq!(serde_json::from_str::<Value>(created["text"].as_str().unwrap()).unwrap(), forecast());
        assert!(created.get("structured_output_errors").is_none());
        let requests = deputy.mock.requests();
        assert_eq!(requests.len(), before + 1, "{wire:?}");
        assert_asks_for(wire, &requests[before], &forecast_schema(), true);
    }
}

#[tokio::test]
async fn an_answer_valid_after_one_retry_saw_its_errors() {
    let deputy = TestDeputy::start().await;
    let wrong = json!({"city": "Oslo", "days": [{"day": "fri", "high": "cold", "tags": []}]});
    for wire in WIRES {
        let before = deputy.mock.requests().len();
        wire.answer(&deputy.mock, &wrong);
        wire.answer(&deputy.mock, &forecast());
        let created = deputy.ok("session_create", wire.forecast_request()).await;
        assert_eq!(created["structured_output"], forecast(), "{wire:?}: {created}");
        // Both calls were charged (the mock's default usage, twice).
        let requests = deputy.mock.requests();
        assert_eq!(requests.len(), before + 2, "{wire:?}");
        let feedback = wire.feedback(&requests[before + 1]);
        assert!(feedback.contains("/days/0/day: ") && feedback.contains("/days/0/high: "), "{wire:?}: {feedback}");
        assert_asks_for(wire, &requests[before + 1], &forecast_schema(), true);
    }
}

#[tokio::test]
async fn an_answer_never_valid_completes_structured_output_invalid_and_the_session_goes_on() {
    let deputy = TestDeputy::start().await;
    for wire in WIRES {
        let before = deputy.mock.requests().len();
        wire.answer(&deputy.mock, &json!({"city": "Oslo"}));
        wire.answer(&deputy.mock, &json!({"city": "Oslo", "days": []}));
        let mut request = wire.forecast_request();
        request["structured_output_retries"] = json!(1);
        let created = deputy.ok("session_create", request).await;
        assert_eq!(
            (&created["status"], &created["stop_reason"]),
            (&json!("completed"), &json!("structured_output_invalid"))
        );
        assert!(created.get("structured_output").is_none(), "{created}");
        let errors = created["structured_output_errors"].as_array().unwrap();
        assert!(errors.iter().any(|e| e.as_str().unwrap().starts_with("/days: ")), "{wire:?}: {errors:?}");
        assert_eq!(deputy.mock.requests().len(), before + 2, "{wire:?}: one answer, one retry");

        // The session is usable, and keeps its schema.
        let id = created["session_id"].as_str().unwrap();
        wire.answer(&deputy.mock, &forecast());
        let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "once more"})).await;
        assert_eq!(next["structured_output"], forecast(), "{wire:?}: {next}");
        let read = deputy.ok("session_read", json!({"session_id": id})).await;
        assert_eq!(read["state"]["last_turn"]["structured_output"], forecast());
    }
}

/// A root that is not an object: Anthropic wraps it as the tool's `value`, OpenAI (whose
/// `response_format` needs an object root) is instructed in the system prompt; a schema outside
/// strict mode goes to OpenAI with `strict: false`.
#[tokio::test]
async fn other_roots_are_wrapped_or_instructed_and_open_schemas_are_not_strict() {
    let deputy = TestDeputy::start().await;
    let list = json!({"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}});
    let value = json!([{"n": 1}, {"n": 2}]);

    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_1", FINAL_ANSWER_TOOL, json!({"value": value}))],
    )));
    let created = deputy.ok("session_create", json!({"prompt": "list", "output_schema": list})).await;
    assert_eq!(created["structured_output"], value);
    let request = deputy.mock.requests().pop().unwrap();
    let wrapped = json!({"type": "object", "properties": {"value": list}, "required": ["value"], "additionalProperties": false});
    assert_asks_for(Wire::Anthropic, &request, &wrapped, false);

    deputy.mock.push(MockResponse::sse(openai::text(&["```json\n", &value.to_string(), "\n```"])));
    let created = deputy
        .ok("session_create", json!({"prompt": "list", "model": Wire::OpenAi.model(), "output_schema": list}))
        .await;
    assert_eq!(created["structured_output"], value, "{created}");
    let request = deputy.mock.requests().pop().unwrap();
    assert!(request.body.get("response_format").is_none());
    let system = request.body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("only a JSON value") && system.contains(&list.to_string()), "{system}");

    let open = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    deputy.mock.push(MockResponse::sse(openai::text(&["{\"n\": 7}"])));
    let created = deputy
        .ok("session_create", json!({"prompt": "n", "model": Wire::OpenAi.model(), "output_schema": open}))
        .await;
    assert_eq!(created["structured_output"], json!({"n": 7}));
    assert_asks_for(Wire::OpenAi, &deputy.mock.requests().pop().unwrap(), &open, false);
}

#[tokio::test]
async fn a_bad_schema_is_an_invalid_request_and_reaches_no_model() {
    let deputy = TestDeputy::start().await;
    let (code, message) =
        deputy.err("session_create", json!({"prompt": "x", "output_schema": {"type": "objekt"}})).await;
    assert_eq!(code, "INVALID_REQUEST");
    assert!(message.contains("output_schema is not a valid JSON Schema"), "{message}");
    let (code, _) = deputy.err("session_create", json!({"prompt": "x", "structured_output_retries": 3})).await;
    assert_eq!(code, "INVALID_REQUEST");
    assert!(deputy.mock.requests().is_empty());
}

/// The same fields on the other surfaces: a REST body and JSON-RPC params are the MCP params.
#[tokio::test]
async fn rest_and_json_rpc_take_the_same_fields() {
    let deputy = HttpDeputy::start(&[]).await;
    Wire::Anthropic.answer(&deputy.mock, &forecast());
    let (status, created) = deputy
        .rest(
            None,
            reqwest::Method::POST,
            "/v1/sessions",
            Some(json!({"prompt": "forecast?", "output_schema": forecast_schema()})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["structured_output"], forecast());

    let id = created["session_id"].as_str().unwrap();
    let days = json!({"type": "array", "items": {"type": "string"}});
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_2", FINAL_ANSWER_TOOL, json!({"value": ["mon", "tue"]}))],
    )));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "turn/start",
                      "params": {"session_id": id, "prompt": "days only", "output_schema": days}});
    let (_, reply) = deputy.rpc(&body).await;
    assert_eq!(reply["result"]["structured_output"], json!(["mon", "tue"]), "{reply}");
}
