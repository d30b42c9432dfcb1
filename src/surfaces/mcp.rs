//! deputy as an MCP server (rmcp): the session tools over one [`SessionService`].
//!
//! Every tool call is: parse the arguments ([`wire`]) → one service call → render. Errors are
//! tool results with `isError: true`, a text block `CODE: message`, and `{code, message}` as
//! structured content, so an LLM caller can read them; only an unknown tool name is a protocol
//! error. rmcp negotiates the protocol version (2026-07-28 and 2025-11-25).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam, ContentBlock,
    Implementation, ListToolsResult, PaginatedRequestParams, RequestId, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::mcp_logging::{self, CallLog};
use super::operation::Operation;
use super::progress::ProgressForwarder;
use super::wire::ErrorBody;
use crate::error::SessionError;
use crate::session::{SessionService, TurnOptions};

const INSTRUCTIONS: &str = "deputy runs LLM agent sessions for you. Start one with session_create (it runs the first \
turn and returns the answer plus a session_id), continue it with session_turn, and inspect it with session_read. \
Long turns answer status \"running\"; collect them with session_read and wait_ms. Errors carry stable codes such as \
SESSION_BUSY or SESSION_NOT_FOUND.";

/// The MCP face of a [`SessionService`]. Cheap to clone; [`McpServer::for_connection`] gives
/// each MCP connection its own logging level.
pub struct McpServer<S> {
    service: Arc<S>,
    tools: Arc<Vec<Tool>>,
    log: CallLog,
    /// `Some` when only `notifications/cancelled` may interrupt a turn
    /// ([`McpServer::interrupt_only_when_cancelled`]): the turn tokens of the calls in flight.
    explicit_cancels: Option<ExplicitCancels>,
}

/// Turn tokens by request id, cancelled by `notifications/cancelled` only.
type ExplicitCancels = Arc<Mutex<HashMap<RequestId, CancellationToken>>>;

impl<S> Clone for McpServer<S> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            tools: self.tools.clone(),
            log: self.log.clone(),
            explicit_cancels: self.explicit_cancels.clone(),
        }
    }
}

impl<S: SessionService> McpServer<S> {
    pub fn new(service: Arc<S>) -> Self {
        let tools = super::operation::tool_catalog()
            .into_iter()
            .map(|tool| {
                Tool::new(tool.name, tool.description, tool.input_schema)
                    .with_raw_output_schema(tool.output_schema)
                    .with_annotations(ToolAnnotations::new().read_only(tool.read_only))
            })
            .collect();
        Self { service, tools: Arc::new(tools), log: CallLog::default(), explicit_cancels: None }
    }

    /// The same server for another connection: shared service and tools, its own log level.
    pub fn for_connection(&self) -> Self {
        Self {
            service: self.service.clone(),
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

    /// One session operation; `None` for a name that is not one of deputy's tools.
    async fn dispatch(
        &self,
        name: &str,
        arguments: serde_json::Value,
        context: &RequestContext<RoleServer>,
    ) -> Option<CallToolResult> {
        let operation = Operation::from_tool(name)?;
        let turn_options = |wait| self.turn_options(wait, context);
        let outcome = operation.run(name, self.service.as_ref(), arguments, turn_options).await;
        if let Some(cancels) = &self.explicit_cancels {
            cancels.lock().unwrap_or_else(PoisonError::into_inner).remove(&context.id);
        }
        Some(match outcome {
            Ok(value) => CallToolResult::structured(value),
            Err(error) => render_error(&error),
        })
    }
}

fn render_error(error: &SessionError) -> CallToolResult {
    let body = ErrorBody::from(error);
    let text = format!("{}: {}", body.code, body.message);
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = serde_json::to_value(&body).ok();
    result
}

impl<S: SessionService> ServerHandler for McpServer<S> {
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
        let span = tracing::info_span!("tool_call", tool = %request.name, request_id = ?context.id);
        match self.dispatch(&request.name, arguments, &context).instrument(span).await {
            Some(result) => {
                self.log.tool_finished(&context, &request.name, &result).await;
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
}
