//! MCP Tasks (SEP-2663, the `io.modelcontextprotocol/tasks` extension) for long turns.
//!
//! A client that declares the extension and calls `session_create` or `session_turn` gets the
//! ordinary result when the turn ends within [`TASK_GRACE`], and otherwise a task
//! (`CreateTaskResult`) that **follows** the session's turn ([`follow_turn`]): `tasks/get`
//! answers `working`, then the very result the tool would have answered. The task never owns
//! the turn: its TTL running out, or deputy restarting (tasks live in memory), loses the task
//! but never the turn, and the task's `_meta` names the session so a client can go back to
//! `session_read`. `tasks/cancel` interrupts the turn. A turn that stops on approvals alone
//! turns the task `input_required`, one form elicitation per approval ([`super::approvals`]),
//! answered with `tasks/update`.
//!
//! One [`TaskRegistry`] serves every connection (stateless 2026-07-28 HTTP clients reach a new
//! handler per request), and a task answers only the caller that made it: for anyone else it
//! is unknown, exactly like a task id that never existed (-32602).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{CallToolResult, CreateTaskResult, GetTaskResult, InputResponses, MetaObject, ProtocolVersion};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;

use super::approvals;
use super::progress::{PROGRESS_INTERVAL, ProgressState};
use crate::agent::EventReceiver;
use crate::ids::SessionId;
use crate::model::{RunResult, TurnStatus};
use crate::session::{MAX_WAIT, SessionService, TurnOptions, TurnRequest, turn_outcome};
use crate::surfaces::wire::ErrorBody;

/// How long a task-declaring caller's turn may take before the answer is a task instead.
pub const TASK_GRACE: Duration = Duration::from_secs(2);
/// How long a task is kept (from its creation; a finished one is kept as long again).
/// Past it `tasks/get` fails the task, and the turn goes on regardless.
pub const TASK_TTL: Duration = Duration::from_secs(60 * 60);
/// The polling interval deputy suggests.
pub const TASK_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Above this many remembered owners, those of tasks the manager has dropped are forgotten.
const OWNERS_KEPT: usize = 1024;

/// `_meta` keys of a task: the session (and turn) it follows, for `session_read`.
pub const SESSION_META_KEY: &str = "deputy/session_id";
pub const TURN_META_KEY: &str = "deputy/turn";

/// rmcp's task manager, plus who owns each task and the session it follows.
#[derive(Clone, Default)]
pub struct TaskRegistry {
    manager: TaskManager,
    owners: Arc<Mutex<HashMap<String, Owned>>>,
}

struct Owned {
    owner: String,
    /// The task's `_meta`: the session and turn it follows.
    meta: MetaObject,
}

impl TaskRegistry {
    /// A task following `run` (a turn still running, or held on approvals) for `owner`. The
    /// turn's `events`, when given, become the task's status message (what progress
    /// notifications would say; they cannot be routed from a task on 2026-07-28).
    pub fn follow<S: SessionService>(
        &self,
        service: Arc<S>,
        run: RunResult,
        owner: &str,
        events: Option<EventReceiver>,
    ) -> CreateTaskResult {
        let options = TaskOptions::new()
            .with_ttl_ms(TASK_TTL.as_millis() as u64)
            .with_poll_interval_ms(TASK_POLL_INTERVAL.as_millis() as u64)
            .with_status_message(status_message(&run));
        let mut meta = MetaObject::new();
        meta.insert(SESSION_META_KEY.to_owned(), Value::String(run.session_id.to_string()));
        meta.insert(TURN_META_KEY.to_owned(), Value::from(run.turn));
        let prefix = format!("session {}: turn {}", run.session_id, run.turn);
        let task = self.manager.spawn(options, move |context| {
            if let Some(events) = events {
                tokio::spawn(status_messages(events, context.clone(), prefix));
            }
            Box::pin(follow_turn(service, run, context))
        });
        self.remember(task.task_id.clone(), Owned { owner: owner.to_owned(), meta: meta.clone() });
        CreateTaskResult::new(task).with_meta(meta)
    }

    fn remember(&self, task_id: String, owned: Owned) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        owners.insert(task_id, owned);
        if owners.len() > OWNERS_KEPT {
            owners.retain(|task_id, _| self.manager.get_task(task_id).is_ok());
        }
    }

    /// A task is unknown to anyone but its owner; its `_meta` for the owner.
    fn check(&self, task_id: &str, caller: &str) -> Result<MetaObject, McpError> {
        let owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        match owners.get(task_id) {
            Some(owned) if owned.owner == caller => Ok(owned.meta.clone()),
            _ => Err(McpError::invalid_params(format!("unknown task: {task_id}"), None)),
        }
    }

    /// `tasks/get`, with the task's `_meta` (the session it follows).
    pub fn get(&self, task_id: &str, caller: &str) -> Result<GetTaskResult, McpError> {
        let meta = self.check(task_id, caller)?;
        let mut result = GetTaskResult::new(self.manager.get_task(task_id)?);
        result.meta = Some(meta);
        Ok(result)
    }

    pub fn update(&self, task_id: &str, caller: &str, responses: InputResponses) -> Result<(), McpError> {
        self.check(task_id, caller)?;
        self.manager.update_task(task_id, responses)
    }

    pub fn cancel(&self, task_id: &str, caller: &str) -> Result<(), McpError> {
        self.check(task_id, caller)?;
        self.manager.cancel_task(task_id)
    }
}

/// Whether a turn of this call may be answered with a task: the client declared the tasks
/// extension *and* the negotiated protocol defines it (SEP-2663 is a 2026-07-28 extension). A
/// 2025-11-25 client that advertises the extension anyway (the MCP Inspector 2.12 does) cannot
/// read a `CreateTaskResult` there; it takes the `wait_ms` path like any other.
pub(super) fn offers_tasks(context: &RequestContext<RoleServer>) -> bool {
    let declared = context.client_capabilities().is_some_and(|capabilities| capabilities.supports_tasks());
    declared && context.protocol_version().is_some_and(|version| defines_tasks(&version))
}

/// Whether `version` defines the tasks extension: 2026-07-28 and later (dated versions compare
/// lexically as they do chronologically).
fn defines_tasks(version: &ProtocolVersion) -> bool {
    version.as_str() >= ProtocolVersion::V_2026_07_28.as_str()
}

/// Whether a turn's answer becomes a task: it still runs, or it holds approvals (which the
/// task asks about as input requests).
pub fn needs_task(run: &RunResult) -> bool {
    run.status == TurnStatus::Running
        || (run.status == TurnStatus::PendingToolCalls && approvals::approvals_only(&run.pending))
}

fn status_message(run: &RunResult) -> String {
    match run.status {
        TurnStatus::PendingToolCalls => {
            format!("session {}: turn {} waits for approvals", run.session_id, run.turn)
        }
        _ => format!("session {}: turn {} running", run.session_id, run.turn),
    }
}

/// A turn's result as the tool's structured content.
pub fn encode(run: &RunResult) -> Result<Value, crate::error::SessionError> {
    serde_json::to_value(run).map_err(|error| {
        crate::error::SessionError::agent(
            Some(run.session_id.clone()),
            crate::error::ErrorKind::Internal,
            format!("could not encode the result: {error}"),
        )
    })
}

/// The tool's answer for a service result, as the synchronous path renders it.
pub fn render(outcome: Result<RunResult, crate::error::SessionError>) -> CallToolResult {
    match outcome.and_then(|run| encode(&run)) {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => super::errors::render_error(&ErrorBody::from(&error)),
    }
}

/// Follows a session's turn to its end and answers what the tool would have. Never owns the
/// turn: if this future is dropped (TTL, shutdown) the turn goes on.
pub async fn follow_turn<S: SessionService>(
    service: Arc<S>,
    mut run: RunResult,
    context: TaskContext,
) -> Result<CallToolResult, TaskExit> {
    let id = run.session_id.clone();
    loop {
        match run.status {
            TurnStatus::Running => {
                let view = tokio::select! {
                    view = service.read(&id, Some(MAX_WAIT)) => view,
                    () = context.cancelled() => return Err(interrupt(&*service, &id).await),
                };
                let view = match view {
                    Ok(view) => view,
                    Err(error) => return Ok(render(Err(error))),
                };
                if view.state.running_turn == Some(run.turn) {
                    continue; // the read's wait ran out
                }
                run = match view.state.last_turn.as_deref() {
                    Some(last) if last.turn >= run.turn => last.clone(),
                    _ => {
                        return Err(TaskExit::Error(McpError::internal_error(
                            format!("session {id}: turn {} ended without a result; see session_read", run.turn),
                            None,
                        )));
                    }
                };
            }
            TurnStatus::PendingToolCalls if approvals::approvals_only(&run.pending) => {
                let Some(answers) = ask_approvals(&run, &context).await? else {
                    return Ok(render(Ok(run))); // left pending, as if nobody had been asked
                };
                let request = TurnRequest {
                    approvals: answers,
                    options: TurnOptions::waiting(Duration::ZERO),
                    ..TurnRequest::default()
                };
                run = match service.start_turn(&id, request).await {
                    Ok(next) => next,
                    Err(error) => return Ok(render(Err(error))),
                };
                context.set_status_message(status_message(&run));
            }
            _ => return Ok(render(turn_outcome(run))),
        }
    }
}

/// Every approval of a held step as one input request; `None` unless all were answered.
async fn ask_approvals(
    run: &RunResult,
    context: &TaskContext,
) -> Result<Option<Vec<crate::model::ApprovalAnswer>>, TaskExit> {
    let mut asks = Vec::with_capacity(run.pending.len());
    for call in &run.pending {
        let request = approvals::input_request(call)
            .map_err(|error| TaskExit::Error(McpError::internal_error(error.to_string(), None)))?;
        asks.push(context.request_input(call.tool_use_id.clone(), request));
    }
    context.set_status_message(status_message(run));
    let replies = futures::future::join_all(asks).await;
    let mut results = Vec::with_capacity(replies.len());
    for reply in replies {
        // A cancelled input request is `tasks/cancel`: the approvals stay pending.
        results.push(Some(reply?));
    }
    Ok(approvals::answers(&run.pending, &results))
}

/// The turn's events as the task's status message, at most one change per
/// [`PROGRESS_INTERVAL`], until the turn ends (its sender is dropped).
async fn status_messages(mut events: EventReceiver, context: TaskContext, prefix: String) {
    let mut state = ProgressState::default();
    let mut last: Option<tokio::time::Instant> = None;
    let mut pending = false;
    loop {
        let next = last.map(|at| at + PROGRESS_INTERVAL);
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { break };
                state.apply(&event);
                pending = true;
            }
            () = tokio::time::sleep_until(next.unwrap_or_else(tokio::time::Instant::now)), if pending => {}
        }
        if pending && next.is_none_or(|at| tokio::time::Instant::now() >= at) {
            context.set_status_message(format!("{prefix}: {}", state.message()));
            last = Some(tokio::time::Instant::now());
            pending = false;
        }
    }
}

/// `tasks/cancel`: interrupts the turn and lets it end (and be saved) before the task ends.
async fn interrupt<S: SessionService>(service: &S, id: &SessionId) -> TaskExit {
    // NotRunning: it has just ended by itself; cancelled either way as far as the task goes.
    let _ = service.interrupt(id, true).await;
    let _ = service.read(id, Some(MAX_WAIT)).await;
    TaskExit::Cancelled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2026_07_28_and_later_define_tasks() {
        assert!(defines_tasks(&ProtocolVersion::V_2026_07_28));
        assert!(defines_tasks(&ProtocolVersion::LATEST));
        for older in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2024_11_05] {
            assert!(!defines_tasks(&older), "{older}");
        }
    }
    use crate::model::PendingCall;
    use crate::model::PendingKind;

    #[tokio::test]
    async fn a_task_is_unknown_to_everyone_but_its_creator() {
        let registry = TaskRegistry::default();
        let task = registry.manager.spawn(TaskOptions::new(), |_| {
            Box::pin(async { Ok(CallToolResult::structured(serde_json::json!({}))) })
        });
        registry.remember(task.task_id.clone(), Owned { owner: "alice".into(), meta: MetaObject::new() });
        assert!(registry.get(&task.task_id, "alice").is_ok());
        for refused in [
            registry.get(&task.task_id, "bob").map(drop),
            registry.cancel(&task.task_id, "bob"),
            registry.update(&task.task_id, "bob", InputResponses::new()),
        ] {
            let error = refused.unwrap_err();
            assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(error.message.contains("unknown task"), "{error:?}");
        }
        assert!(registry.get("never-made", "alice").is_err());
    }

    #[test]
    fn running_turns_and_steps_of_approvals_become_tasks_and_nothing_else() {
        let mut run = RunResult::running(SessionId::from_string("s"), 1);
        assert!(needs_task(&run));
        run.status = TurnStatus::PendingToolCalls;
        let call = |kind| PendingCall {
            tool_use_id: "t".into(),
            name: "write_file".into(),
            arguments: serde_json::json!({}),
            kind,
            expires_at: None,
        };
        run.pending = vec![call(PendingKind::Approval)];
        assert!(needs_task(&run));
        run.pending.push(call(PendingKind::Callback));
        assert!(!needs_task(&run), "a callback's result cannot be asked for");
        run.status = TurnStatus::Completed;
        run.pending.clear();
        assert!(!needs_task(&run));
    }
}
