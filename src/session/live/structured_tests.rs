//! Structured output through the live service, against the scripted provider: the agent loop
//! judges final answers (a final-answer tool call, or text), sends validation errors back,
//! retries within the limit and the budget, and leaves a history valid for the next turn.
//! The wires' request shapes are tested against the mock HTTP server (`tests/suite`).

use serde_json::{Value, json};

use super::test_support::*;
use super::*;
use crate::error::ErrorCode;
use crate::llm::scripted::{ScriptedProvider, ScriptedResponse};
use crate::llm::{ContentBlock, FINAL_ANSWER_TOOL, Role};
use crate::model::TurnStatus;
use crate::model::{Budget, SessionStatus, StopReason};
use crate::tools::{CallbackTool, ToolRequest, Workspace};

fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["city", "days"],
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "array", "items": {
                "type": "object", "required": ["day", "high"],
                "properties": {"day": {"type": "string"}, "high": {"type": "number"}}
            }}
        }
    })
}

fn valid() -> Value {
    json!({"city": "Oslo", "days": [{"day": "mon", "high": -3}, {"day": "tue", "high": 1.5}]})
}

fn structured(prompt: &str, retries: Option<u32>) -> CreateSessionRequest {
    let mut request = create(prompt);
    request.build.output_schema = Some(schema());
    request.build.structured_output_retries = retries;
    request
}

fn final_answer(id: &str, input: Value) -> ScriptedResponse {
    ScriptedResponse::tool_calls(&[(id, FINAL_ANSWER_TOOL, input)])
}

#[tokio::test]
async fn a_valid_final_answer_call_is_the_structured_output_and_text_holds_it_as_json() {
    let provider = ScriptedProvider::new([final_answer("f1", valid()), ScriptedResponse::text(&["plain"])]);
    let service = scripted_service(provider.clone(), None, None);
    let result = service.create_session(structured("weather?", Some(0))).await.unwrap();
    assert_eq!(result.structured_output, Some(valid()));
    assert_eq!(serde_json::from_str::<Value>(&result.text).unwrap(), valid());
    assert_eq!(result.stop_reason, Some(StopReason::EndTurn));
    assert!(result.structured_output_errors.is_empty());
    let request = &provider.requests()[0];
    assert_eq!(request.output.as_ref().map(|format| format.schema.as_ref().clone()), Some(schema()));

    // The final call was answered, so the next turn's history is valid; the session's schema
    // applies to it too.
    let next = service.start_turn(&result.session_id, turn("again")).await.unwrap();
    let last_but_one = &provider.requests()[1].messages;
    assert!(matches!(
        last_user_blocks(last_but_one)[0],
        ContentBlock::ToolResult { content, is_error: false, .. } if content == "accepted"
    ));
    assert!(provider.requests()[1].output.is_some());
    assert_eq!(next.stop_reason, Some(StopReason::StructuredOutputInvalid), "\"plain\" is not JSON");
}

#[tokio::test]
async fn a_text_answer_is_parsed_and_validated() {
    let text = valid().to_string();
    let provider = ScriptedProvider::new([ScriptedResponse::text(&[&text[..10], &text[10..]])]);
    let service = scripted_service(provider, None, None);
    let result = service.create_session(structured("weather?", None)).await.unwrap();
    assert_eq!(result.structured_output, Some(valid()));
    assert_eq!(result.status, TurnStatus::Completed);
}

#[tokio::test]
async fn an_invalid_answer_goes_back_with_its_errors_and_the_retry_validates() {
    let wrong = json!({"city": "Oslo", "days": [{"day": "mon", "high": "cold"}]});
    let provider = ScriptedProvider::new([final_answer("f1", wrong), final_answer("f2", valid())]);
    let service = scripted_service(provider.clone(), None, None);
    let (events, mut receiver) = crate::agent::event_channel();
    let mut request = structured("weather?", None);
    request.turn.events = Some(events);
    let result = service.create_session(request).await.unwrap();
    assert_eq!(result.structured_output, Some(valid()));
    let rejections: Vec<_> = std::iter::from_fn(|| receiver.try_recv())
        .filter_map(|event| match event {
            crate::agent::AgentEvent::StructuredOutputRejected { attempt, errors } => Some((attempt, errors.len())),
            _ => None,
        })
        .collect();
    assert_eq!(rejections, [(1, 1)], "one rejected answer, one error in it");
    // Both calls were charged: 15 tokens each.
    assert_eq!(result.usage.tokens.total_tokens(), 30);
    let sent = results_sent(&provider, 1);
    assert_eq!(sent.len(), 1);
    let (id, content, is_error) = &sent[0];
    assert_eq!((id.as_str(), *is_error), ("f1", true));
    assert!(content.contains("/days/0/high: ") && content.contains("\"cold\""), "{content}");
}

#[tokio::test]
async fn a_text_answer_that_fails_gets_the_errors_as_a_user_message() {
    let provider = ScriptedProvider::new([
        ScriptedResponse::text(&["Here you go: {}"]),
        ScriptedResponse::text(&[&valid().to_string()]),
    ]);
    let service = scripted_service(provider.clone(), None, None);
    let result = service.create_session(structured("weather?", None)).await.unwrap();
    assert_eq!(result.structured_output, Some(valid()));
    let retry = &provider.requests()[1].messages;
    let feedback = retry.last().unwrap();
    assert_eq!(feedback.role, Role::User);
    assert!(feedback.text().contains("the answer is not JSON"), "{}", feedback.text());
    assert_eq!(retry[retry.len() - 2].text(), "Here you go: {}");
}

#[tokio::test]
async fn an_answer_that_never_validates_ends_the_turn_structured_output_invalid_and_the_session_goes_on() {
    let provider = ScriptedProvider::new([
        final_answer("f1", json!({"city": 1})),
        final_answer("f2", json!({"city": "Oslo"})),
        final_answer("f3", valid()),
    ]);
    let service = scripted_service(provider.clone(), None, None);
    let result = service.create_session(structured("weather?", Some(1))).await.unwrap();
    assert_eq!(result.status, TurnStatus::Completed);
    assert_eq!(result.stop_reason, Some(StopReason::StructuredOutputInvalid));
    assert_eq!(result.structured_output, None);
    assert!(result.structured_output_errors.iter().any(|e| e.contains("\"days\"")), "{result:?}");
    assert_eq!(result.text, json!({"city": "Oslo"}).to_string(), "the last answer, as given");
    assert_eq!(provider.requests().len(), 2, "one answer and one retry");
    let wire = serde_json::to_value(&result).unwrap();
    assert_eq!(wire["stop_reason"], "structured_output_invalid");

    let view = service.read(&result.session_id, None).await.unwrap();
    assert_eq!(view.state.status, SessionStatus::Idle);
    let next = service.start_turn(&result.session_id, turn("try once more")).await.unwrap();
    assert_eq!(next.structured_output, Some(valid()));
    // The last rejected call was answered too: its error result opens the next turn's message.
    assert_eq!(results_sent(&provider, 2)[0].0, "f2");
}

#[tokio::test]
async fn tools_run_as_usual_before_the_final_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let provider = ScriptedProvider::new([
        ScriptedResponse::tool_calls(&[("t1", "list_dir", json!({}))]),
        final_answer("f1", valid()),
    ]);
    let workspace = Some(Workspace::new(dir.path()).unwrap());
    let service = scripted_service(provider.clone(), workspace, None);
    let result = service.create_session(structured("look, then answer", None)).await.unwrap();
    assert_eq!((result.tool_calls, result.structured_output), (1, Some(valid())));
    assert!(results_sent(&provider, 1)[0].1.contains("a.txt"));
}

#[tokio::test]
async fn other_calls_beside_the_final_answer_are_not_run() {
    let provider = ScriptedProvider::new([ScriptedResponse::tool_calls(&[
        ("t1", "list_dir", json!({})),
        ("f1", FINAL_ANSWER_TOOL, valid()),
    ])]);
    let service = scripted_service(provider, None, None);
    let result = service.create_session(structured("go", None)).await.unwrap();
    assert_eq!((result.tool_calls, result.structured_output), (0, Some(valid())));
    let history = service.history(&result.session_id).await.unwrap().messages;
    let ContentBlock::ToolResult { tool_use_id, is_error, .. } = &history.last().unwrap().content[0] else {
        panic!("{history:?}");
    };
    assert_eq!((tool_use_id.as_str(), *is_error), ("t1", true));
}

#[tokio::test]
async fn retries_count_in_the_budget() {
    let provider = ScriptedProvider::new([final_answer("f1", json!({})), final_answer("f2", valid())]);
    let service = scripted_service(provider.clone(), None, None);
    let mut request = structured("go", Some(5));
    request.build.budget = Budget { max_tokens: Some(15), ..Budget::default() };
    let result = service.create_session(request).await.unwrap();
    assert_eq!(result.stop_reason, Some(StopReason::BudgetExhausted));
    assert!(!result.structured_output_errors.is_empty());
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test]
async fn a_turn_may_bring_its_own_schema_and_bad_schemas_are_refused_before_anything_runs() {
    let provider = ScriptedProvider::new([
        final_answer("f1", valid()),
        ScriptedResponse::text(&["[1, 2, 3]"]),
        ScriptedResponse::text(&["{\"n\": 1}"]),
    ]);
    let service = scripted_service(provider.clone(), None, None);
    let id = service.create_session(structured("go", Some(0))).await.unwrap().session_id;

    let own = TurnRequest {
        prompt: "numbers".into(),
        output_schema: Some(json!({"type": "array", "items": {"type": "integer"}})),
        ..TurnRequest::default()
    };
    let result = service.start_turn(&id, own).await.unwrap();
    assert_eq!(result.structured_output, Some(json!([1, 2, 3])));

    for (schema, retries) in [(Some(json!({"type": 5})), None), (None, Some(1)), (Some(json!({})), Some(99))] {
        let bad = TurnRequest {
            prompt: "x".into(),
            output_schema: schema,
            structured_output_retries: retries,
            ..TurnRequest::default()
        };
        let error = service.start_turn(&id, bad).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidRequest, "{error}");
    }
    assert_eq!(provider.requests().len(), 2, "no refused turn reached the model");
    let mut bad_create = create("go");
    bad_create.build.output_schema = Some(json!({"properties": []}));
    let error = service.create_session(bad_create).await.unwrap_err();
    assert!(error.to_string().contains("output_schema is not a valid JSON Schema"), "{error}");

    // The session's own schema is back for the next turn.
    let back = service.start_turn(&id, turn("again")).await.unwrap();
    assert_eq!(back.stop_reason, Some(StopReason::StructuredOutputInvalid));
}

#[tokio::test]
async fn a_callback_with_the_final_answer_tools_name_is_refused() {
    let service = scripted_service(ScriptedProvider::new([]), None, None);
    let mut request = create("go");
    request.build.tools = ToolRequest {
        callbacks: vec![CallbackTool {
            name: FINAL_ANSWER_TOOL.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        }],
        ..ToolRequest::default()
    };
    let error = service.create_session(request).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidRequest);
    assert!(error.to_string().contains("reserved"), "{error}");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn the_sessions_schema_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store: crate::store::SharedStore = Some(temp_store(dir.path()));
    let before_restart =
        scripted_service(ScriptedProvider::new([final_answer("f1", valid())]), None, store.clone());
    let id = before_restart.create_session(structured("go", Some(0))).await.unwrap().session_id;
    drop(before_restart);
    let provider = ScriptedProvider::new([ScriptedResponse::text(&["not json"])]);
    let service = scripted_service(provider.clone(), None, store);
    let result = service.start_turn(&id, turn("again")).await.unwrap();
    assert_eq!(result.stop_reason, Some(StopReason::StructuredOutputInvalid), "retries 0: one answer only");
    assert_eq!(provider.requests()[0].output.as_ref().map(|f| f.schema.as_ref().clone()), Some(schema()));
}
