//! Held approvals for 2026-07-28 clients that declare form elicitation but not the tasks
//! extension (as Claude Code does), through the `deputy` binary over stdio and stateless HTTP,
//! driven by the rmcp client: the call answers an MRTR `InputRequiredResult` (one allow/deny
//! form per held call), and rmcp's `RunningService::call_tool` asks `create_elicitation` and
//! retries with the answers. Allow runs the call, deny refuses it to the model, decline and
//! cancel leave the approvals pending; the sealed `requestState` opens for its caller only, and
//! a step already answered is not answered twice.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ErrorData, Implementation, InputRequiredResult, InputResponses,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common::deputy::{connect, deputy_serve, stateless};
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockLlm, MockResponse, anthropic};
use crate::common::scenarios::model_writes;

/// What the user answers to an approval form.
#[derive(Clone, Copy)]
enum Answer {
    Allow,
    Deny,
    Decline,
    Cancel,
}

/// A 2026-07-28 client like Claude Code: form elicitation declared, no tasks extension.
#[derive(Clone)]
struct Asked {
    answer: Answer,
    questions: Arc<Mutex<Vec<String>>>,
}

impl Asked {
    fn new(answer: Answer) -> Self {
        Self { answer, questions: Arc::default() }
    }

    fn questions(&self) -> Vec<String> {
        self.questions.lock().unwrap().clone()
    }
}

impl ClientHandler for Asked {
    fn get_info(&self) -> ClientConfig {
        let capabilities = ClientCapabilities::builder().enable_elicitation().build();
        ClientConfig::new(capabilities, Implementation::new("deputy-mrtr-tests", "0.0.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        self.questions.lock().unwrap().push(message);
        let choose = |decision: &str| {
            ElicitResult::new(ElicitationAction::Accept).with_content(json!({"decision": decision}))
        };
        Ok(match self.answer {
            Answer::Allow => choose("allow"),
            Answer::Deny => choose("deny"),
            Answer::Decline => ElicitResult::new(ElicitationAction::Decline),
            Answer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }
}

struct Stdio {
    client: RunningService<RoleClient, Asked>,
    mock: MockLlm,
    workspace: TempDir,
    _home: TempDir,
    _child: tokio::process::Child,
}

async fn over_stdio(answer: Answer) -> (Stdio, Asked) {
    let mock = MockLlm::start().await;
    let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let handler = Asked::new(answer);
    let (client, child) = connect(&handler, deputy_serve(&mock, workspace.path(), home.path()), stateless()).await;
    (Stdio { client, mock, workspace, _home: home, _child: child }, handler)
}

fn params(tool: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else { panic!("arguments must be an object") };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

/// `tools/call` with rmcp's MRTR rounds; a protocol error or an error result fails the test.
async fn ok_call(client: &RunningService<RoleClient, Asked>, tool: &str, arguments: Value) -> Value {
    let result = client.call_tool(params(tool, arguments)).await.unwrap_or_else(|err| panic!("{tool}: {err}"));
    assert_ne!(result.is_error, Some(true), "{tool} failed: {:?}", result.content);
    result.structured_content.expect("structured content")
}

/// One `tools/call` round, no retries: the `InputRequiredResult` itself.
async fn ask_once(client: &RunningService<RoleClient, Asked>, tool: &str, arguments: Value) -> InputRequiredResult {
    match client.call_tool_once(params(tool, arguments)).await.expect("tools/call") {
        CallToolResponse::InputRequired(ask) => ask,
        other => panic!("expected input_required, got {other:?}"),
    }
}

fn allow(id: &str) -> InputResponses {
    InputResponses::from([(id.to_owned(), json!({"action": "accept", "content": {"decision": "allow"}}))])
}

#[tokio::test]
async fn a_2026_client_with_elicitation_allows_a_held_call_through_input_required() {
    let (deputy, asked) = over_stdio(Answer::Allow).await;
    model_writes(&deputy.mock, "ok.txt", "yes");
    deputy.mock.push(MockResponse::sse(anthropic::text(&["written"])));
    let done = ok_call(&deputy.client, "session_create", json!({"prompt": "write it", "approval": "always"})).await;
    assert_eq!((done["status"].as_str(), done["text"].as_str()), (Some("completed"), Some("written")));
    let questions = asked.questions();
    assert_eq!(questions.len(), 1, "one form per held call");
    let question = &questions[0];
    assert!(
        question.contains("write_file") && question.contains("toolu_1") && question.contains("ok.txt"),
        "{question}"
    );
    assert_eq!(std::fs::read_to_string(deputy.workspace.path().join("ok.txt")).unwrap(), "yes");
    assert_eq!(
        deputy.mock.requests().len(),
        2,
        "one session, one turn continued: no second session from the retry"
    );
}

#[tokio::test]
async fn a_denied_call_is_refused_to_the_model_and_the_turn_goes_on() {
    let (deputy, asked) = over_stdio(Answer::Deny).await;
    model_writes(&deputy.mock, "no.txt", "x");
    deputy.mock.push(MockResponse::sse(anthropic::text(&["understood"])));
    let done = ok_call(&deputy.client, "session_create", json!({"prompt": "write it", "approval": "always"})).await;
    assert_eq!((done["status"].as_str(), done["text"].as_str()), (Some("completed"), Some("understood")));
    assert_eq!(asked.questions().len(), 1);
    assert!(!deputy.workspace.path().join("no.txt").exists());
    let told = serde_json::to_string(&deputy.mock.requests()[1].body).unwrap();
    assert!(told.contains("denied by the caller"), "{told}");
}

#[tokio::test]
async fn declined_or_cancelled_forms_leave_the_approvals_pending() {
    for answer in [Answer::Decline, Answer::Cancel] {
        let (deputy, asked) = over_stdio(answer).await;
        model_writes(&deputy.mock, "no.txt", "x");
        let held =
            ok_call(&deputy.client, "session_create", json!({"prompt": "write it", "approval": "always"})).await;
        assert_eq!(held["status"], "pending_tool_calls");
        assert_eq!(held["pending"][0]["tool_use_id"], "toolu_1");
        assert_eq!(asked.questions().len(), 1);
        assert!(!deputy.workspace.path().join("no.txt").exists());
        // Still pending: the caller's model answers them as any caller would.
        deputy.mock.push(MockResponse::sse(anthropic::text(&["after all"])));
        let approvals = json!([{"tool_use_id": "toolu_1", "decision": "allow"}]);
        let id = held["session_id"].as_str().unwrap();
        let done = ok_call(&deputy.client, "session_turn", json!({"session_id": id, "approvals": approvals})).await;
        assert_eq!(done["text"], "after all");
        assert!(deputy.workspace.path().join("no.txt").exists());
    }
}

/// The rounds by hand: the state opens only unchanged, for the session it names, and once.
#[tokio::test]
async fn the_request_state_is_sealed_and_answers_a_held_step_once() {
    let (deputy, _) = over_stdio(Answer::Allow).await;
    model_writes(&deputy.mock, "ok.txt", "yes");
    deputy.mock.push(MockResponse::sse(anthropic::text(&["written"])));
    let create = json!({"prompt": "write it", "approval": "always"});
    let ask = ask_once(&deputy.client, "session_create", create.clone()).await;
    let requests = serde_json::to_value(ask.input_requests.as_ref().unwrap()).unwrap();
    assert_eq!(requests["toolu_1"]["method"], "elicitation/create");
    assert_eq!(requests["toolu_1"]["params"]["mode"], "form");
    assert_eq!(
        requests["toolu_1"]["params"]["requestedSchema"]["properties"]["decision"]["enum"],
        json!(["allow", "deny"])
    );
    let sealed = ask.request_state.clone().expect("requestState");

    let retry = |state: String, tool: &str, arguments: Value| {
        params(tool, arguments).with_request_state(state).with_input_responses(allow("toolu_1"))
    };
    let mut edited = sealed.clone();
    edited.insert(12, 'x');
    for (state, tool, arguments) in [
        (edited, "session_create", create.clone()),
        (sealed.clone(), "session_turn", json!({"session_id": "x", "prompt": "p"})),
    ] {
        let refused = deputy.client.call_tool_once(retry(state, tool, arguments)).await.unwrap_err();
        assert!(refused.to_string().contains("requestState"), "{refused}");
    }
    assert!(!deputy.workspace.path().join("ok.txt").exists());

    let CallToolResponse::Complete(done) =
        deputy.client.call_tool_once(retry(sealed.clone(), "session_create", create.clone())).await.unwrap()
    else {
        panic!("expected the turn's result")
    };
    assert_eq!(done.structured_content.unwrap()["text"], "written");
    let CallToolResponse::Complete(again) =
        deputy.client.call_tool_once(retry(sealed, "session_create", create)).await.unwrap()
    else {
        panic!("expected an error result")
    };
    assert_eq!(again.is_error, Some(true));
    assert!(format!("{:?}", again.content).contains("no longer pending"), "{:?}", again.content);
    assert_eq!(deputy.mock.requests().len(), 2);
}

/// Stateless HTTP: every round reaches a new handler, and the state is bound to its caller.
#[tokio::test]
async fn over_stateless_http_the_rounds_work_and_the_state_is_the_callers_own() {
    use super::tenants::{ALICE, BOB, TENANTS};
    let deputy = HttpDeputy::start_with_config(TENANTS, &[], &[]).await;
    let client_as = |token: &str, handler: Asked| {
        let config =
            StreamableHttpClientTransportConfig::with_uri(deputy.url("/mcp")).auth_header(token.to_owned());
        handler.serve_with_lifecycle(StreamableHttpClientTransport::from_config(config), stateless())
    };
    let asked = Asked::new(Answer::Allow);
    let alice = client_as(ALICE, asked.clone()).await.expect("alice");
    let bob = client_as(BOB, Asked::new(Answer::Allow)).await.expect("bob");
    let arguments = json!({"prompt": "write it", "approval": "always"});
    model_writes(&deputy.mock, "ok.txt", "yes");
    deputy.mock.push(MockResponse::sse(anthropic::text(&["first"])));
    let ask = ask_once(&alice, "session_create", arguments.clone()).await;
    let retry = params("session_create", arguments)
        .with_request_state(ask.request_state.unwrap())
        .with_input_responses(allow("toolu_1"));
    let refused = bob.call_tool_once(retry.clone()).await.unwrap_err();
    assert!(refused.to_string().contains("requestState"), "{refused}");
    let CallToolResponse::Complete(first) = alice.call_tool_once(retry).await.unwrap() else {
        panic!("expected the turn's result")
    };
    let first = first.structured_content.expect("structured content");
    assert_eq!(first["text"], "first");
    assert_eq!(std::fs::read_to_string(deputy.workspace.path().join("ok.txt")).unwrap(), "yes");

    // The whole thing through rmcp's rounds, each a request of its own.
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_2", "write_file", json!({"path": "two.txt", "content": "2"}))],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["written"])));
    let id = first["session_id"].as_str().unwrap();
    let done = ok_call(&alice, "session_turn", json!({"session_id": id, "prompt": "write two"})).await;
    assert_eq!((done["status"].as_str(), done["text"].as_str()), (Some("completed"), Some("written")));
    let questions = asked.questions();
    assert!(questions.len() == 1 && questions[0].contains("toolu_2"), "{questions:?}");
    assert!(deputy.workspace.path().join("two.txt").exists());
}
