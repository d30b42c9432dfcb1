//! MCP Tasks, approval elicitation and sessions as resources, through the `deputy` binary over
//! stdio (and HTTP for tenants), driven by the rmcp client: a 2026-07-28 client that declares
//! the tasks extension gets a task for a turn that outlives the grace, `tasks/get` follows it
//! to the tool's own result, `tasks/cancel` interrupts the turn, and approvals turn the task
//! `input_required`; a 2025-11-25 client gets no task even if it declares the extension; a
//! 2025-11-25 client that declared elicitation is asked about approvals while its call waits;
//! sessions read, list and notify as resources.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, CreateTaskResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData, GetTaskParams, GetTaskResult, Implementation,
    ProtocolVersion, ReadResourceRequestParams, ResourceContents, ResourceUpdatedNotificationParam,
    SubscribeRequestParams, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::Notify;

use deputy::surfaces::mcp::tasks::TASK_GRACE;

use crate::common::deputy::{deputy_serve, ok_tool, stateless};
use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{Gate, MockLlm, MockResponse, anthropic};
use crate::common::scenarios::{capped_log_read, model_writes};

/// What the client answers to `elicitation/create`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Elicit {
    Allow,
    Decline,
}

/// A client that may declare the tasks extension and elicitation, answers elicitations as
/// told, and records `resources/updated`.
#[derive(Clone)]
struct Client {
    tasks: bool,
    elicit: Option<Elicit>,
    asked: Arc<Mutex<Vec<String>>>,
    updated: Arc<Mutex<Vec<String>>>,
    updated_arrived: Arc<Notify>,
}

impl Client {
    fn new(tasks: bool, elicit: Option<Elicit>) -> Self {
        Self { tasks, elicit, asked: Arc::default(), updated: Arc::default(), updated_arrived: Arc::default() }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.tasks {
            capabilities = ClientCapabilities::builder().enable_tasks().build();
        }
        if self.elicit.is_some() {
            capabilities.elicitation = ClientCapabilities::builder().enable_elicitation().build().elicitation;
        }
        ClientConfig::new(capabilities, Implementation::new("deputy-task-tests", "0.0.0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        self.asked.lock().unwrap().push(message);
        Ok(match self.elicit {
            Some(Elicit::Allow) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"decision": "allow"}))
            }
            _ => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
        self.updated_arrived.notify_waiters();
    }
}

struct Deputy {
    client: RunningService<RoleClient, Client>,
    handler: Client,
    mock: MockLlm,
    workspace: TempDir,
    /// Held for the test's length (the config home and store; the process, killed on drop);
    /// read again only by a restart, which needs a store.
    #[cfg_attr(not(feature = "session-store"), allow(dead_code))]
    home: TempDir,
    #[cfg_attr(not(feature = "session-store"), allow(dead_code))]
    child: tokio::process::Child,
}

async fn start(handler: Client) -> Deputy {
    let mock = MockLlm::start().await;
    let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    spawn(handler, mock, workspace, home).await
}

/// Task clients negotiate 2026-07-28 (the protocol that defines tasks), the others 2025-11-25.
async fn spawn(handler: Client, mock: MockLlm, workspace: TempDir, home: TempDir) -> Deputy {
    let lifecycle = if handler.tasks { stateless() } else { ClientLifecycleMode::Initialize };
    spawn_with(handler, lifecycle, mock, workspace, home).await
}

async fn spawn_with(
    handler: Client,
    lifecycle: ClientLifecycleMode,
    mock: MockLlm,
    workspace: TempDir,
    home: TempDir,
) -> Deputy {
    let command = deputy_serve(&mock, workspace.path(), home.path());
    let (client, child) = crate::common::deputy::connect(&handler, command, lifecycle).await;
    Deputy { client, handler, mock, workspace, home, child }
}

fn params(tool: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else { panic!("arguments must be an object") };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

impl Deputy {
    /// Stops deputy as a client does (closing stdin; running turns finish and are saved) and
    /// starts another on the same store.
    #[cfg(feature = "session-store")]
    async fn restart(self) -> Deputy {
        let Deputy { client, handler, mock, workspace, home, mut child } = self;
        client.cancel().await.unwrap();
        assert!(child.wait().await.unwrap().success());
        spawn(handler, mock, workspace, home).await
    }

    async fn task(&self, tool: &str, arguments: Value) -> CreateTaskResult {
        match self.client.call_tool_once(params(tool, arguments)).await.expect("tools/call") {
            CallToolResponse::Task(task) => task,
            other => panic!("expected a task, got {other:?}"),
        }
    }

    async fn get(&self, task_id: &str) -> GetTaskResult {
        self.client.get_task(GetTaskParams::new(task_id.to_owned())).await.expect("tasks/get")
    }

    /// Polls `tasks/get` until the task's status is one of `wanted`.
    async fn poll_until(&self, task_id: &str, wanted: &[TaskStatus]) -> GetTaskResult {
        for _ in 0..400 {
            let got = self.get(task_id).await;
            if wanted.contains(&got.task.task.status) {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("task {task_id} never reached {wanted:?}");
    }

    async fn read_text(&self, uri: &str) -> String {
        let read = self.client.read_resource(ReadResourceRequestParams::new(uri)).await.expect("resources/read");
        match &read.contents[0] {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => panic!("not text: {other:?}"),
        }
    }
}

/// The structured result inlined in a completed task.
fn completed(got: &GetTaskResult) -> Value {
    match &got.task.payload {
        TaskPayload::Completed { result } => result["structuredContent"].clone(),
        other => panic!("not completed: {other:?}"),
    }
}

#[tokio::test]
async fn a_slow_turn_is_a_task_that_ends_with_the_tools_own_result() {
    let deputy = start(Client::new(true, None)).await;
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["finally", " done"])), 3);
    let created = deputy.task("session_create", json!({"prompt": "long job"})).await;
    let meta = created.meta.as_ref().expect("_meta");
    let id = meta["deputy/session_id"].as_str().expect("the session it follows").to_owned();
    assert_eq!(meta["deputy/turn"], 1);
    assert_eq!(created.task.status, TaskStatus::Working);

    let working = deputy.get(&created.task.task_id).await;
    assert_eq!(working.task.task.status, TaskStatus::Working);
    assert_eq!(working.meta.as_ref().unwrap()["deputy/session_id"], id.as_str());
    // What progress would say is the task's status message (the text streamed so far).
    let mut message = String::new();
    for _ in 0..200 {
        message = deputy.get(&created.task.task_id).await.task.task.status_message.unwrap_or_default();
        if message.contains("finally") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(message, format!("session {id}: turn 1: …finally"));
    gate.open();
    let done = deputy.poll_until(&created.task.task_id, &[TaskStatus::Completed]).await;
    let result = completed(&done);
    assert_eq!((result["status"].as_str(), result["text"].as_str()), (Some("completed"), Some("finally done")));
    assert_eq!(result["session_id"], id.as_str());

    // A fast turn stays synchronous, even for a task client.
    deputy.mock.push(MockResponse::sse(anthropic::text(&["quick"])));
    match deputy
        .client
        .call_tool_once(params("session_turn", json!({"session_id": id, "prompt": "q"})))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(result) => assert_eq!(result.structured_content.unwrap()["text"], "quick"),
        other => panic!("expected a result, got {other:?}"),
    }
    // Unknown task ids are invalid params.
    let unknown = deputy.client.get_task(GetTaskParams::new("no-such-task".to_owned())).await.unwrap_err();
    assert!(unknown.to_string().contains("unknown task"), "{unknown}");
}

/// A 2025-11-25 client that declares the tasks extension anyway (the MCP Inspector 2.12 does)
/// gets no task: the protocol it negotiated has none. A turn longer than the task grace is the
/// ordinary result, `structuredContent` and all, and a short `wait_ms` still answers `running`.
#[tokio::test]
async fn a_2025_11_25_client_that_declares_tasks_gets_results_not_tasks() {
    let mock = MockLlm::start().await;
    let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let deputy = spawn_with(Client::new(true, None), ClientLifecycleMode::Initialize, mock, workspace, home).await;
    assert_eq!(deputy.client.peer_info().unwrap().protocol_version, ProtocolVersion::V_2025_11_25);

    let longer = TASK_GRACE + Duration::from_millis(500);
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["slow", " but whole"])), 3);
    let opener = tokio::spawn(async move {
        tokio::time::sleep(longer).await;
        gate.open();
    });
    let started = Instant::now();
    let response = deputy.client.call_tool_once(params("session_create", json!({"prompt": "long job"}))).await;
    assert!(started.elapsed() >= longer, "the turn outlived the task grace");
    let CallToolResponse::Complete(result) = response.expect("tools/call") else {
        panic!("a task on a 2025-11-25 connection")
    };
    let created = result.structured_content.expect("structuredContent");
    assert_eq!((created["status"].as_str(), created["text"].as_str()), (Some("completed"), Some("slow but whole")));
    opener.await.unwrap();

    // The `wait_ms` path: a turn still running when it runs out answers `running`.
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["later"])), 3);
    let id = id_of(&created);
    let running =
        ok_tool_any(&deputy.client, "session_turn", json!({"session_id": id, "prompt": "next", "wait_ms": 300}))
            .await;
    assert_eq!(running["status"], "running");
    gate.open();
    let read = ok_tool_any(&deputy.client, "session_read", json!({"session_id": id, "wait_ms": 10000})).await;
    assert_eq!(read["state"]["last_turn"]["text"], "later");
}

/// Tasks live in memory: after a restart `tasks/get` does not know the task, and its `_meta`
/// leads to `session_read`, which has the turn.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn after_a_restart_the_task_is_unknown_and_session_read_has_the_turn() {
    let deputy = start(Client::new(true, None)).await;
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["kept", " anyway"])), 3);
    let created = deputy.task("session_create", json!({"prompt": "long job"})).await;
    let id = created.meta.as_ref().unwrap()["deputy/session_id"].as_str().unwrap().to_owned();
    gate.open(); // the restart lets the running turn finish and saves it
    let deputy = deputy.restart().await;
    let gone = deputy.client.get_task(GetTaskParams::new(created.task.task_id.clone())).await.unwrap_err();
    assert!(gone.to_string().contains("unknown task"), "{gone}");
    let read = ok_tool_any(&deputy.client, "session_read", json!({"session_id": id, "wait_ms": 10000})).await;
    assert_eq!(read["state"]["last_turn"]["text"], "kept anyway");
}

/// Over HTTP, 2026-07-28 clients are stateless: every request reaches a new handler, and the
/// task must still be found (one registry for all of them).
#[tokio::test]
async fn over_stateless_http_a_task_is_followed_across_requests_and_cancelled() {
    let deputy = HttpDeputy::start(&[]).await;
    let transport = StreamableHttpClientTransport::from_uri(deputy.url("/mcp"));
    let modern = stateless();
    let client = Client::new(true, None).serve_with_lifecycle(transport, modern).await.expect("2026-07-28 client");
    let gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["over", " http"])), 3);
    let CallToolResponse::Task(created) =
        client.call_tool_once(params("session_create", json!({"prompt": "long job"}))).await.unwrap()
    else {
        panic!("expected a task")
    };
    let get = || client.get_task(GetTaskParams::new(created.task.task_id.clone()));
    assert_eq!(get().await.unwrap().task.task.status, TaskStatus::Working);
    gate.open();
    let mut done = get().await.unwrap();
    for _ in 0..400 {
        if done.task.task.status == TaskStatus::Completed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        done = get().await.unwrap();
    }
    assert_eq!(completed(&done)["text"], "over http");

    let never = Gate::new();
    let id = id_of(&completed(&done));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["never"])).pause_before_chunk(3, never));
    let CallToolResponse::Task(second) = client
        .call_tool_once(params("session_turn", json!({"session_id": id, "prompt": "forever"})))
        .await
        .unwrap()
    else {
        panic!("expected a task")
    };
    client.cancel_task(CancelTaskParams::new(second.task.task_id.clone())).await.unwrap();
    let mut ended = client.get_task(GetTaskParams::new(second.task.task_id.clone())).await.unwrap();
    for _ in 0..400 {
        if ended.task.task.status.is_terminal() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        ended = client.get_task(GetTaskParams::new(second.task.task_id.clone())).await.unwrap();
    }
    assert_eq!(ended.task.task.status, TaskStatus::Cancelled);
}

#[tokio::test]
async fn tasks_cancel_interrupts_the_turn() {
    let deputy = start(Client::new(true, None)).await;
    deputy.mock.push_held(MockResponse::sse(anthropic::text(&["never", " sent"])), 3);
    let created = deputy.task("session_create", json!({"prompt": "forever"})).await;
    let id = created.meta.as_ref().unwrap()["deputy/session_id"].as_str().unwrap().to_owned();
    deputy.client.cancel_task(CancelTaskParams::new(created.task.task_id.clone())).await.expect("tasks/cancel");
    let ended = deputy.poll_until(&created.task.task_id, &[TaskStatus::Cancelled, TaskStatus::Completed]).await;
    assert_eq!(ended.task.task.status, TaskStatus::Cancelled);
    let read = ok_tool_any(&deputy.client, "session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["last_turn"]["status"], "cancelled");
    assert_eq!(read["state"]["status"], "idle");
}

#[tokio::test]
async fn approvals_turn_the_task_input_required_and_tasks_update_answers_them() {
    let deputy = start(Client::new(true, None)).await;
    model_writes(&deputy.mock, "ok.txt", "yes");
    deputy.mock.push(MockResponse::sse(anthropic::text(&["written"])));
    let created = deputy.task("session_create", json!({"prompt": "write it", "approval": "always"})).await;
    let asking = deputy.poll_until(&created.task.task_id, &[TaskStatus::InputRequired]).await;
    let TaskPayload::InputRequired { input_requests } = &asking.task.payload else { panic!("{asking:?}") };
    let request = serde_json::to_value(&input_requests["toolu_1"]).unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["requestedSchema"]["properties"]["decision"]["enum"], json!(["allow", "deny"]));
    assert!(!deputy.workspace.path().join("ok.txt").exists());

    let answer =
        BTreeMap::from([("toolu_1".to_owned(), json!({"action": "accept", "content": {"decision": "allow"}}))]);
    deputy
        .client
        .update_task(UpdateTaskParams::new(created.task.task_id.clone(), answer))
        .await
        .expect("tasks/update");
    let done = deputy.poll_until(&created.task.task_id, &[TaskStatus::Completed]).await;
    assert_eq!(completed(&done)["text"], "written");
    assert_eq!(std::fs::read_to_string(deputy.workspace.path().join("ok.txt")).unwrap(), "yes");
}

#[tokio::test]
async fn an_elicitation_client_is_asked_about_approvals_while_its_call_waits() {
    let deputy = start(Client::new(false, Some(Elicit::Allow))).await;
    model_writes(&deputy.mock, "ok.txt", "yes");
    deputy.mock.push(MockResponse::sse(anthropic::text(&["written"])));
    let done =
        ok_tool_any(&deputy.client, "session_create", json!({"prompt": "write it", "approval": "always"})).await;
    assert_eq!((done["status"].as_str(), done["text"].as_str()), (Some("completed"), Some("written")));
    let asked = deputy.handler.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].contains("write_file") && asked[0].contains("toolu_1"), "{asked:?}");
    assert!(deputy.workspace.path().join("ok.txt").exists());
}

#[tokio::test]
async fn a_declined_elicitation_leaves_the_approvals_pending() {
    let deputy = start(Client::new(false, Some(Elicit::Decline))).await;
    model_writes(&deputy.mock, "no.txt", "x");
    let held =
        ok_tool_any(&deputy.client, "session_create", json!({"prompt": "write it", "approval": "always"})).await;
    assert_eq!(held["status"], "pending_tool_calls");
    assert_eq!(held["pending"][0]["tool_use_id"], "toolu_1");
    assert_eq!(deputy.handler.asked.lock().unwrap().len(), 1);
    assert!(!deputy.workspace.path().join("no.txt").exists());
}

#[tokio::test]
async fn sessions_are_resources_listed_read_and_notified_after_each_turn() {
    let deputy = start(Client::new(false, None)).await;
    let capabilities = deputy.client.peer_info().unwrap().capabilities.clone();
    let resources = capabilities.resources.expect("resources declared");
    assert_eq!((resources.subscribe, resources.list_changed), (Some(true), Some(true)));
    assert!(capabilities.extensions.unwrap().contains_key("io.modelcontextprotocol/tasks"));

    let log = capped_log_read(&deputy.mock, deputy.workspace.path());
    let created = ok_tool_any(&deputy.client, "session_create", json!({"prompt": "read log.txt"})).await;
    let id = id_of(&created);

    let listed = deputy.client.list_resources(None).await.expect("resources/list");
    let uris: Vec<&str> = listed.resources.iter().map(|resource| resource.uri.as_str()).collect();
    let (state_uri, transcript_uri) =
        (format!("deputy://sessions/{id}"), format!("deputy://sessions/{id}/transcript"));
    assert_eq!(uris, [state_uri.as_str(), transcript_uri.as_str()]);
    let templates = deputy.client.list_resource_templates(None).await.expect("templates");
    assert_eq!(templates.resource_templates.len(), 5, "four of sessions, deputy://agents/{{name}}");

    let state: Value = serde_json::from_str(&deputy.read_text(&state_uri).await).unwrap();
    assert_eq!((state["session_id"].as_str(), state["state"]["turns"].as_u64()), (Some(id.as_str()), Some(1)));
    let transcript = deputy.read_text(&transcript_uri).await;
    assert!(transcript.starts_with(&format!("# Session {id}")), "{transcript}");
    assert!(transcript.contains("## User\n\nread log.txt"), "{transcript}");
    assert!(transcript.contains("**Tool call** `read_file` (`toolu_log`)"), "{transcript}");
    assert!(transcript.contains("It is long."), "{transcript}");
    assert!(transcript.contains(&format!("deputy://sessions/{id}/tool-outputs/toolu_log")), "{transcript}");
    let output = deputy.read_text(&format!("deputy://sessions/{id}/tool-outputs/toolu_log")).await;
    assert!(output.contains(log.trim_end()), "the whole output, {} bytes", output.len());

    let missing = deputy.client.read_resource(ReadResourceRequestParams::new("deputy://sessions/nope")).await;
    assert!(missing.unwrap_err().to_string().contains("no session"));

    #[allow(deprecated)]
    deputy.client.subscribe(SubscribeRequestParams::new(state_uri.clone())).await.expect("resources/subscribe");
    let arrived = deputy.handler.updated_arrived.notified();
    deputy.mock.push(MockResponse::sse(anthropic::text(&["again"])));
    ok_tool_any(&deputy.client, "session_turn", json!({"session_id": id, "prompt": "again"})).await;
    tokio::time::timeout(Duration::from_secs(10), arrived).await.expect("resources/updated after the turn");
    assert_eq!(deputy.handler.updated.lock().unwrap().clone(), [state_uri]);
}

#[tokio::test]
async fn another_tenants_session_is_no_resource_over_http() {
    use super::tenants::{ALICE, BOB, TENANTS};
    let deputy = HttpDeputy::start_with_config(TENANTS, &[], &[]).await;
    let (alice, bob) = (deputy.mcp_as(ALICE).await, deputy.mcp_as(BOB).await);
    deputy.mock.push(MockResponse::sse(anthropic::text(&["mine"])));
    let id = id_of(&ok_tool(&alice, "session_create", json!({"prompt": "alice's"})).await);
    let uri = format!("deputy://sessions/{id}");
    assert!(alice.read_resource(ReadResourceRequestParams::new(uri.clone())).await.is_ok());
    let foreign = bob.read_resource(ReadResourceRequestParams::new(uri.clone())).await.unwrap_err();
    assert!(foreign.to_string().contains("no session"), "{foreign}");
    #[allow(deprecated)]
    let subscribed = bob.subscribe(SubscribeRequestParams::new(uri)).await;
    assert!(subscribed.is_err());
    assert!(bob.list_resources(None).await.unwrap().resources.is_empty());
    assert_eq!(alice.list_resources(None).await.unwrap().resources.len(), 2);
}

/// `session_*` through any client: a protocol error or an error result fails the test.
async fn ok_tool_any(client: &RunningService<RoleClient, Client>, tool: &str, arguments: Value) -> Value {
    let result = client.call_tool(params(tool, arguments)).await.unwrap_or_else(|err| panic!("{tool}: {err}"));
    assert_ne!(result.is_error, Some(true), "{tool} failed: {:?}", result.content);
    result.structured_content.expect("structured content")
}
