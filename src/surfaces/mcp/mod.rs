//! deputy as an MCP server (rmcp): the session tools over the
//! [`SessionService`](crate::session::SessionService) of each caller.
//!
//! Every tool call is: parse the arguments ([`wire`]) → one service call → render. Errors are
//! tool results with `isError: true` and a text block `CODE: message`, so an LLM caller can
//! read them; programs find the [`ErrorBody`] in `_meta["deputy/error"]`. Error results carry
//! no `structuredContent`: each tool's `outputSchema` describes its success result, and clients
//! that validate structured content against it (TypeScript SDK ≥ 1.24, MCP Inspector) would
//! otherwise turn every error into a schema failure. Only an unknown tool name is a protocol
//! error. rmcp negotiates the protocol version (2026-07-28 and 2025-11-25).
//!
//! deputy declares `tools`, `logging`, `resources` (with `subscribe` and `listChanged`: its
//! sessions, [`super::resources`]) and the tasks extension ([`tasks`]). The methods
//! of capabilities it does not have (`prompts/*`, `completion/complete`) answer `-32601`
//! instead of rmcp's default empty lists: a client must not be told a capability is absent and
//! then find it answered.
//!
//! Tasks are offered only where the negotiated protocol defines them (2026-07-28 and later,
//! [`offers_tasks`]): a 2025-11-25 client that declares the extension anyway gets the ordinary
//! `wait_ms` / `status: "running"` result.
//!
//! A turn that stops on approvals alone is asked about: clients of the tasks extension get a
//! task that turns `input_required`; other 2026-07-28 clients that declared `elicitation` get
//! an MRTR `InputRequiredResult` and answer in their retry ([`input_required`]); 2025-11-25
//! clients that declared it get one `elicitation/create` per approval while their call waits
//! ([`approvals`]). Every way, a missing answer leaves the approvals pending, as for any
//! other client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CancelledNotificationParam,
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    Implementation, InputResponses, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, RequestId,
    ServerConfig, SubscribeRequestParams, SubscriptionFilter, Tool, ToolAnnotations, UnsubscribeRequestParams,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::operation::Operation;
use super::operation::turns::Turns;
use super::wire::ErrorBody;
use crate::agent::event_channel;
use crate::caller::Caller;
use crate::model::RunResult;
use crate::session::{CallerServices, MemoryQuery, SessionService, TurnOptions};
use crate::telemetry::caller_trace::{self, TraceParent};
use approvals::{asks_approvals, elicit_approvals};
use errors::render_error;
use input_required::{ApprovalRounds, Resumed};
use logging::{CallLog, CallSummary};
use progress::ProgressForwarder;
use resources::{SessionResource, Subscriptions, parse_resource};
use tasks::{TASK_GRACE, TaskRegistry, offers_tasks};

const INSTRUCTIONS: &str = "deputy runs LLM agent sessions for you. Start one with session_create (it runs the first \
turn and returns the answer plus a session_id), continue it with session_turn, and inspect it with session_read. \
Long turns answer status \"running\"; collect them with session_read and wait_ms (2026-07-28 clients of the MCP \
tasks extension get a task instead). Each session is also a resource, deputy://sessions/{id} (and /transcript). \
Errors carry stable codes such as SESSION_BUSY or SESSION_NOT_FOUND.";

/// Bytes of `session_create`'s description that list the caller's named agents: a client's
/// model reads them with every tool list, so the menu is bounded and points at
/// `deputy://agents` for the rest.
const AGENT_MENU_BYTES: usize = 2048;

/// The MCP face of the session service, as each caller sees it ([`CallerServices`]). Cheap to
/// clone; [`McpServer::for_connection`] gives each MCP connection its own logging level.
///
/// Who calls a tool: over HTTP, the [`Caller`] the guard put in the request's extensions (rmcp
/// hands the request's `http::request::Parts` to the call); over stdio, where there are none,
/// the server's `caller` (the local user). The surface only says who asks; the view decides.
pub struct McpServer<P> {
    services: Arc<P>,
    caller: Caller,
    tools: Arc<Vec<Tool>>,
    log: CallLog,
    /// `Some` when only `notifications/cancelled` may interrupt a turn
    /// ([`McpServer::interrupt_only_when_cancelled`]): the turn tokens of the calls in flight.
    explicit_cancels: Option<ExplicitCancels>,
    /// Every connection's tasks: one registry shared by all.
    tasks: TaskRegistry,
    /// The key of every connection's approval rounds (2026-07-28 `requestState`).
    rounds: ApprovalRounds,
    /// This connection's `resources/subscribe` URIs (2025-11-25 clients), and the watcher
    /// that tells it about them (stopped when the connection's server is dropped).
    subscriptions: Arc<Mutex<Subscriptions>>,
}

/// Turn tokens by request id, cancelled by `notifications/cancelled` only.
type ExplicitCancels = Arc<Mutex<HashMap<RequestId, CancellationToken>>>;

impl<P> Clone for McpServer<P> {
    fn clone(&self) -> Self {
        Self {
            services: self.services.clone(),
            caller: self.caller.clone(),
            tools: self.tools.clone(),
            log: self.log.clone(),
            explicit_cancels: self.explicit_cancels.clone(),
            tasks: self.tasks.clone(),
            rounds: self.rounds.clone(),
            subscriptions: self.subscriptions.clone(),
        }
    }
}

impl<P: CallerServices> McpServer<P> {
    /// Calls that carry no caller of their own (stdio) are `caller`'s.
    pub fn new(services: Arc<P>, caller: Caller) -> Self {
        let tools = super::operation::mcp_tool_catalog()
            .into_iter()
            .map(|tool| {
                Tool::new(tool.name, tool.description, tool.input_schema)
                    .with_raw_output_schema(tool.output_schema)
                    .with_annotations(ToolAnnotations::new().read_only(tool.read_only))
            })
            .collect();
        Self {
            services,
            caller,
            tools: Arc::new(tools),
            log: CallLog::default(),
            explicit_cancels: None,
            tasks: TaskRegistry::default(),
            rounds: ApprovalRounds::default(),
            subscriptions: Arc::default(),
        }
    }

    /// The same server for another connection: shared service and tools, its own log level.
    pub fn for_connection(&self) -> Self {
        Self {
            services: self.services.clone(),
            caller: self.caller.clone(),
            tools: self.tools.clone(),
            log: CallLog::default(),
            explicit_cancels: self.explicit_cancels.as_ref().map(|_| ExplicitCancels::default()),
            tasks: self.tasks.clone(),
            rounds: self.rounds.clone(),
            subscriptions: Arc::default(),
        }
    }

    /// Turns started through this server are interrupted by `notifications/cancelled` (or
    /// `session_interrupt`) only, never because the connection ended: rmcp cancels every
    /// request's token when its transport closes, which would otherwise interrupt the turns
    /// of a client that merely went away. The background server serves its clients this way,
    /// so a turn outlives the process that started it.
    pub fn interrupt_only_when_cancelled(mut self) -> Self {
        self.explicit_cancels = Some(ExplicitCancels::default());
        self
    }

    /// How a turn-running tool waits: the caller's `wait_ms`, progress if it asked for it, and
    /// its cancellation (a `notifications/cancelled` for this call interrupts the turn).
    fn turn_options(
        &self,
        wait: Duration,
        context: &RequestContext<RoleServer>,
    ) -> (TurnOptions, Option<ProgressForwarder>) {
        let (events, forwarder) = match context.meta.get_progress_token() {
            Some(token) => {
                let (events, forwarder) = ProgressForwarder::start(context.peer.clone(), token);
                (Some(events), Some(forwarder))
            }
            None => (None, None),
        };
        let cancel: CancellationToken = match &self.explicit_cancels {
            Some(cancels) => {
                let cancel = CancellationToken::new();
                cancels.lock().unwrap_or_else(PoisonError::into_inner).insert(context.id.clone(), cancel.clone());
                cancel
            }
            None => context.ct.clone(),
        };
        (TurnOptions { wait: Some(wait), events, cancel: Some(cancel) }, forwarder)
    }

    /// Who makes this call: the HTTP request's caller, else the server's own.
    fn caller_of<'a>(&'a self, context: &'a RequestContext<RoleServer>) -> &'a Caller {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .unwrap_or(&self.caller)
    }

    /// One session operation and what the log says about it; `None` for a name that is not one
    /// of deputy's tools. `as_task`: the caller declared the tasks extension, so a turn that
    /// outlives [`TASK_GRACE`] (or holds approvals) is answered with a task.
    async fn dispatch(
        &self,
        name: &str,
        arguments: serde_json::Value,
        context: &RequestContext<RoleServer>,
        as_task: bool,
    ) -> Option<(CallToolResponse, CallSummary)> {
        let operation = Operation::from_tool(name).filter(|operation| operation.spec().mcp_tool)?;
        let runs_turn = operation.runs_turn();
        let as_task = as_task && runs_turn;
        let waited = Mutex::new(None);
        // A task's turn reports through its status message instead of progress notifications.
        let task_events = Mutex::new(None);
        let turn_options = |wait| {
            *waited.lock().unwrap_or_else(PoisonError::into_inner) = Some(wait);
            if !as_task {
                return self.turn_options(wait, context);
            }
            let (mut options, forwarder) = self.turn_options(TASK_GRACE, context);
            let (events, receiver) = event_channel();
            options.events = Some(events);
            *task_events.lock().unwrap_or_else(PoisonError::into_inner) = Some(receiver);
            (options, forwarder)
        };
        let mut arguments = arguments;
        if runs_turn && context.meta.get_progress_token().is_some() {
            progress::default_progress_wait(&mut arguments);
        }
        let caller = self.caller_of(context);
        let service = self.services.for_caller(caller);
        let outcome = operation.run(name, &service, arguments, turn_options).await;
        if let Some(cancels) = &self.explicit_cancels {
            cancels.lock().unwrap_or_else(PoisonError::into_inner).remove(&context.id);
        }
        let outcome = match outcome {
            Ok(value) if runs_turn => match serde_json::from_value::<RunResult>(value.clone()) {
                Ok(run) if as_task && tasks::needs_task(&run) => {
                    let summary = CallSummary::success(&value);
                    let events = task_events.lock().unwrap_or_else(PoisonError::into_inner).take();
                    let task = self.tasks.follow(Arc::new(service), run, caller.subject(), events);
                    return Some((CallToolResponse::Task(task), summary));
                }
                Ok(run) if !as_task && input_required::asks(&run, context) => {
                    let wait = waited
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .unwrap_or(crate::session::DEFAULT_WAIT);
                    match self.rounds.ask(&run, caller.subject(), name, wait, 0) {
                        Some(ask) => return Some((CallToolResponse::InputRequired(ask), asking(&run.session_id))),
                        None => Ok(value),
                    }
                }
                Ok(run) if !as_task && asks_approvals(&run, context) => {
                    let wait = waited
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .unwrap_or(crate::session::DEFAULT_WAIT);
                    // As for the call's own turn: with explicit cancels, only `notifications/cancelled`
                    // (which no longer reaches this call's token once it is answered) interrupts.
                    let cancel = self.explicit_cancels.is_none().then(|| context.ct.clone());
                    elicit_approvals(&service, run, context, wait, cancel).await
                }
                _ => Ok(value),
            },
            other => other,
        };
        Some(complete(outcome))
    }

    /// A retry that carries the `requestState` of an approval round: its answers go to the held
    /// step the state names (never a new session or turn from the call's own arguments).
    async fn resume(
        &self,
        name: &str,
        arguments: &serde_json::Value,
        sealed: &str,
        responses: Option<InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> Result<(CallToolResponse, CallSummary), McpError> {
        let caller = self.caller_of(context);
        let step = self.rounds.open(sealed, caller.subject(), name, arguments)?;
        let service = self.services.for_caller(caller);
        let (options, _progress) = self.turn_options(step.wait(), context);
        let session_id = step.session_id().clone();
        let resumed = self.rounds.resume(&service, step, responses.as_ref(), options, caller.subject(), name).await;
        if let Some(cancels) = &self.explicit_cancels {
            cancels.lock().unwrap_or_else(PoisonError::into_inner).remove(&context.id);
        }
        Ok(match resumed {
            Resumed::Ask(ask) => (CallToolResponse::InputRequired(ask), asking(&session_id)),
            Resumed::Done(outcome) => complete(outcome.and_then(|run| tasks::encode(&run))),
        })
    }
}

/// The tool's answer to a service result, and its log line.
fn complete(outcome: Result<serde_json::Value, crate::error::SessionError>) -> (CallToolResponse, CallSummary) {
    match outcome {
        Ok(value) => {
            let summary = CallSummary::success(&value);
            (CallToolResponse::Complete(CallToolResult::structured(value)), summary)
        }
        Err(error) => {
            let body = ErrorBody::from(&error);
            let summary = CallSummary::failure(&body);
            (CallToolResponse::Complete(render_error(&body)), summary)
        }
    }
}

/// The log line of a call answered with questions about a session's held step.
fn asking(session_id: &crate::ids::SessionId) -> CallSummary {
    CallSummary::success(&serde_json::json!({"status": "input_required", "session_id": session_id}))
}

/// The answer to a method of a capability deputy does not declare.
fn not_declared(method: &str) -> McpError {
    McpError::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("Method not found: {method} (deputy declares the tools, logging and resources capabilities)"),
        None,
    )
}

impl<P: CallerServices> ServerHandler for McpServer<P> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(logging::capabilities())
            .with_server_info(Implementation::new("deputy", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self.tools.as_ref().clone();
        // session_create names the caller's agents, as the files are now.
        let menu = self.services.for_caller(self.caller_of(&context)).agents().menu(AGENT_MENU_BYTES);
        if !menu.is_empty()
            && let Some(create) = tools.iter_mut().find(|tool| tool.name == Turns::Create.spec().tool)
        {
            let description = create.description.as_deref().unwrap_or_default();
            create.description = Some(format!("{description}\n\nNamed agents (`agent`):{menu}").into());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let subject = self.caller_of(&context).subject();
        let span =
            tracing::info_span!("tool_call", tool = %request.name, request_id = ?context.id, subject = %subject);
        let tasks = offers_tasks(&context);
        let trace = trace_of(&context);
        let answered = match request.request_state.as_deref() {
            Some(sealed) => {
                let resumed = self.resume(&request.name, &arguments, sealed, request.input_responses, &context);
                Some(caller_trace::within(trace, resumed).instrument(span).await?)
            }
            None => {
                let dispatched = self.dispatch(&request.name, arguments, &context, tasks);
                caller_trace::within(trace, dispatched).instrument(span).await
            }
        };
        match answered {
            Some((response, summary)) => {
                self.log.tool_finished(&context, &request.name, summary).await;
                Ok(response)
            }
            None => Err(McpError::invalid_params(format!("unknown tool {:?}", request.name), None)),
        }
    }

    /// With [`McpServer::interrupt_only_when_cancelled`], the one way a client interrupts the
    /// turn of a call in flight. (Otherwise rmcp has already cancelled the call's own token.)
    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        let (Some(cancels), Some(id)) = (&self.explicit_cancels, notification.request_id) else { return };
        if let Some(cancel) = cancels.lock().unwrap_or_else(PoisonError::into_inner).remove(&id) {
            cancel.cancel();
        }
    }

    #[allow(deprecated)] // logging/setLevel: see `logging`
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        logging::accept_level(&self.log, request.level)
    }

    // No prompts or completions: rmcp's defaults would answer empty lists.

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Err(not_declared("prompts/list"))
    }

    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        Err(not_declared("prompts/get"))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let service = self.services.for_caller(self.caller_of(&context));
        let cursor = request.and_then(|request| request.cursor);
        let first_page = cursor.is_none();
        let mut page = resources::list(&service, cursor).await?;
        // The agents' list is one resource more where there are agents; it is readable always.
        if first_page && !service.agents().agents.is_empty() {
            page.resources.insert(0, agent_resources::listed());
        }
        // The memories are one resource more for a caller that has some.
        let one = MemoryQuery { limit: Some(1), ..MemoryQuery::default() };
        if first_page && service.memories(one).await.is_ok_and(|list| !list.memories.is_empty()) {
            page.resources.insert(0, memory_resources::listed());
        }
        Ok(page)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let mut templates = resources::templates();
        templates.push(agent_resources::template());
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let service = self.services.for_caller(self.caller_of(&context));
        if let Some(agents) = agent_resources::AgentResource::parse(&request.uri) {
            return Ok(agent_resources::read(&service, &request.uri, &agents)?.into());
        }
        if let Some(query) = memory_resources::parse(&request.uri) {
            return Ok(memory_resources::read(&service, &request.uri, query).await?.into());
        }
        let resource = parse_resource(&request.uri)?;
        Ok(resources::read(&service, &resource).await?.into())
    }

    #[allow(deprecated)] // resources/subscribe: 2025-11-25 clients; 2026-07-28 ones `listen`
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let resource = parse_resource(&request.uri)?;
        let service = self.services.for_caller(self.caller_of(&context));
        // Only what the caller may read: another tenant's session is not found here either.
        service
            .read(resource.session_id(), None)
            .await
            .map_err(|error| resources::to_mcp(&error, Some(&request.uri)))?;
        self.subscriptions.lock().unwrap_or_else(PoisonError::into_inner).uris.insert(request.uri);
        self.watch_subscriptions(context.peer.clone(), service);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscriptions.lock().unwrap_or_else(PoisonError::into_inner).uris.remove(&request.uri);
        Ok(())
    }

    /// `subscriptions/listen` (2026-07-28): deputy's resource URIs and the list.
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let uris: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| SessionResource::parse(uri).is_some())
            .cloned()
            .collect();
        let mut accepted = SubscriptionFilter::builder();
        if !uris.is_empty() {
            accepted = accepted.resource_subscriptions(uris);
        }
        if requested.resources_list_changed == Some(true) {
            accepted = accepted.resources_list_changed();
        }
        Some(accepted.build())
    }

    /// Tells the listener when a turn of one of its sessions ends (`resources/updated` for its
    /// URIs of that session, `resources/list_changed` if it asked), for sessions it may read.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let service = self.services.for_caller(self.caller_of(context.request_context()));
        let accepted = context.accepted().clone();
        let mut uris = Vec::new();
        for uri in accepted.resource_subscriptions.iter().flatten() {
            if let Some(resource) = SessionResource::parse(uri)
                && service.read(resource.session_id(), None).await.is_ok()
            {
                uris.push((resource.session_id().clone(), uri.clone()));
            }
        }
        let list_changed = accepted.resources_list_changed == Some(true);
        let mut changes = service.changes();
        loop {
            let changed = tokio::select! {
                changed = changes.recv() => changed,
                () = context.cancelled() => return Ok(()),
            };
            let id = match changed {
                Ok(id) => id,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return Ok(()),
            };
            for (_, uri) in uris.iter().filter(|(session, _)| *session == id) {
                if context.sink().notify_resource_updated(uri.clone()).await.is_err() {
                    return Ok(());
                }
            }
            if list_changed
                && service.read(&id, None).await.is_ok()
                && context.sink().notify_resource_list_changed().await.is_err()
            {
                return Ok(());
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.tasks.get(&request.task_id, self.caller_of(&context).subject())
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.update(&request.task_id, self.caller_of(&context).subject(), request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel(&request.task_id, self.caller_of(&context).subject())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Err(not_declared("completion/complete"))
    }
}

/// The trace context the HTTP request carrying this call sent (none over stdio).
fn trace_of(context: &RequestContext<RoleServer>) -> Option<TraceParent> {
    context.extensions.get::<axum::http::request::Parts>()?.extensions.get::<TraceParent>().cloned()
}

mod agent_resources;
pub mod approvals;
mod errors;
pub mod input_required;
pub mod logging;
mod memory_resources;
pub mod progress;
pub mod resources;
pub mod tasks;
