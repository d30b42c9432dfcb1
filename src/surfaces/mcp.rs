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
//! deputy declares only `tools` and `logging`, so the methods of capabilities it does not have
//! (`prompts/*`, `resources/*`, `completion/complete`) answer `-32601` instead of rmcp's
//! default empty lists: a client must not be told a capability is absent and then find it
//! answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam, CompleteRequestParams,
    CompleteResult, ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, MetaObject, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, RequestId, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::mcp_logging::{self, CallLog, CallSummary};
use super::operation::Operation;
use super::progress::ProgressForwarder;
use super::wire::{ERROR_META_KEY, ErrorBody};
use crate::caller::Caller;
use crate::session::{CallerServices, TurnOptions};

const INSTRUCTIONS: &str = "deputy runs LLM agent sessions for you. Start one with session_create (it runs the first \
turn and returns the answer plus a session_id), continue it with session_turn, and inspect it with session_read. \
Long turns answer status \"running\"; collect them with session_read and wait_ms. Errors carry stable codes such as \
SESSION_BUSY or SESSION_NOT_FOUND.";

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
        }
    }
}

impl<P: CallerServices> McpServer<P> {
    /// Calls that carry no caller of their own (stdio) are `caller`'s.
    pub fn new(services: Arc<P>, caller: Caller) -> Self {
        let tools = super::operation::tool_catalog()
            .into_iter()
            .map(|tool| {
                Tool::new(tool.name, tool.description, tool.input_schema)
                    .with_raw_output_schema(tool.output_schema)
                    .with_annotations(ToolAnnotations::new().read_only(tool.read_only))
            })
            .collect();
        Self { services, caller, tools: Arc::new(tools), log: CallLog::default(), explicit_cancels: None }
    }

    /// The same server for another connection: shared service and tools, its own log level.
    pub fn for_connection(&self) -> Self {
        Self {
            services: self.services.clone(),
            caller: self.caller.clone(),
            tools: self.tools.clone(),
            log: CallLog::default(),
            explicit_cancels: self.explicit_cancels.as_ref().map(|_| ExplicitCancels::default()),
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
    /// of deputy's tools.
    async fn dispatch(
        &self,
        name: &str,
        arguments: serde_json::Value,
        context: &RequestContext<RoleServer>,
    ) -> Option<(CallToolResult, CallSummary)> {
        let operation = Operation::from_tool(name)?;
        let turn_options = |wait| self.turn_options(wait, context);
        let service = self.services.for_caller(self.caller_of(context));
        let outcome = operation.run(name, &service, arguments, turn_options).await;
        if let Some(cancels) = &self.explicit_cancels {
            cancels.lock().unwrap_or_else(PoisonError::into_inner).remove(&context.id);
        }
        Some(match outcome {
            Ok(value) => {
                let summary = CallSummary::success(&value);
                (CallToolResult::structured(value), summary)
            }
            Err(error) => {
                let body = ErrorBody::from(&error);
                let summary = CallSummary::failure(&body);
                (render_error(&body), summary)
            }
        })
    }
}

/// An error as a tool result: `isError`, the text `CODE: message` for an LLM, and the whole
/// [`ErrorBody`] (whatever fields it has) in `_meta["deputy/error"]` for programs.
fn render_error(body: &ErrorBody) -> CallToolResult {
    let text = format!("{}: {}", body.code, body.message);
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    // `ErrorBody` is plain strings, so encoding cannot fail; if it ever did, the text still
    // carries the code.
    if let Ok(value) = serde_json::to_value(body) {
        let mut meta = MetaObject::new();
        meta.insert(ERROR_META_KEY.to_owned(), value);
        result.meta = Some(meta);
    }
    result
}

/// The answer to a method of a capability deputy does not declare.
fn not_declared(method: &str) -> McpError {
    McpError::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("Method not found: {method} (deputy declares only the tools and logging capabilities)"),
        None,
    )
}

impl<P: CallerServices> ServerHandler for McpServer<P> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(mcp_logging::capabilities())
            .with_server_info(Implementation::new("deputy", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
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
        match self.dispatch(&request.name, arguments, &context).instrument(span).await {
            Some((result, summary)) => {
                self.log.tool_finished(&context, &request.name, summary).await;
                Ok(CallToolResponse::Complete(result))
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

    #[allow(deprecated)] // logging/setLevel: see `mcp_logging`
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        mcp_logging::accept_level(&self.log, request.level)
    }

    // No prompts, resources or completions: rmcp's defaults would answer empty lists.

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
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Err(not_declared("resources/list"))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Err(not_declared("resources/templates/list"))
    }

    async fn read_resource(
        &self,
        _request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        Err(not_declared("resources/read"))
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Err(not_declared("completion/complete"))
    }
}
