//! The session operations, as one declarative table: a row per operation ([`Spec`]) gives its
//! MCP tool, its JSON-RPC method, its description and schemas (the tool catalog and
//! `schemas/`), and its REST route (the router and the OpenAPI document); `deputy call` reaches
//! any of them by name. [`Operation::run`] is the one place that turns JSON arguments into the
//! one `SessionService` call, so no surface can drift from another.
//!
//! A new operation is a variant, its row in [`SPECS`] and its arm in [`Operation::run`] (here),
//! and its params type in [`wire`]; every surface then has it.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

use super::portable::portable;
use super::strict::strict_input;
use super::wire;
use crate::error::ErrorCode::{
    self, AgentError, InvalidRequest, PolicyDenied, SessionBusy, SessionCompactionDisabled, SessionInboxFull,
    SessionNotFound, SessionNotRunning, SessionPersistenceDisabled, SessionStoreError,
};
use crate::error::{ErrorKind, SessionError};
use crate::model::inbox::SendResult;
use crate::model::{
    ArchiveResult, CompactResult, EventPage, InterruptResult, RunResult, SessionList, SessionView, ToolOutputResult,
};
use crate::profiles::{AgentDetail, AgentList};
use crate::session::{SessionService, TurnOptions};

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumCount)]
pub enum Operation {
    Create,
    Turn,
    Interrupt,
    Read,
    List,
    Archive,
    Compact,
    ToolOutput,
    Send,
    Events,
    AgentList,
    AgentGet,
}

/// One operation's row of the table: everything the surfaces say of it.
#[derive(Debug)]
pub struct Spec {
    /// The MCP tool's name (also `deputy call`'s).
    pub tool: &'static str,
    /// The JSON-RPC method's name (also `deputy call`'s).
    pub method: &'static str,
    /// Whether it only reads (the tool's `readOnlyHint`).
    pub read_only: bool,
    /// Whether MCP clients see it as a tool. The named agents are MCP resources instead
    /// (`deputy://agents`), and `session_create`'s description lists them: the tool list a
    /// client's model reads stays as short as it was.
    pub mcp_tool: bool,
    /// What the operation does, for an LLM caller.
    pub description: &'static str,
    /// The params type's schema, as the tool's input schema.
    pub input_schema: fn() -> Map<String, Value>,
    /// The result type's schema, as the tool's output schema.
    pub output_schema: fn() -> Map<String, Value>,
    pub rest: RestRoute,
}

/// Where an operation is on the REST surface, and how the OpenAPI document describes it.
#[derive(Debug, Clone, Copy)]
pub struct RestRoute {
    pub method: Method,
    /// axum and OpenAPI spell path parameters alike: `{name}`, one of
    /// [`PATH_PARAMETERS`](super::http::routes::PATH_PARAMETERS).
    pub path: &'static str,
    /// Whose properties are the route's query parameters (minus those the path supplies).
    pub query: Option<QueryParams>,
    pub operation_id: &'static str,
    pub summary: &'static str,
    pub description: Option<&'static str>,
    /// The component schema of the success answer; `None`: any JSON object.
    pub result: Option<&'static str>,
    /// What the success answer means.
    pub answer: &'static str,
    /// The codes the operation can fail with (the `SessionService` method's errors). Their
    /// statuses come from the code table; 413 is added for routes with a body, and the guard's
    /// 401/403 for every route.
    pub errors: &'static [ErrorCode],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Delete,
}

impl Method {
    /// As in a request line: `GET`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Delete => "DELETE",
        }
    }

    /// As an OpenAPI path item's key: `get`.
    pub fn openapi_key(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Post => "post",
            Self::Delete => "delete",
        }
    }
}

/// The params types whose properties a route takes as query parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryParams {
    /// `SessionReadParams`: `wait_ms`.
    Read,
    /// `SessionListParams`: `offset`, `limit`, `include_archived`.
    List,
    /// `SessionEventsParams`: `after_seq`, `limit` (plus the REST-only `follow`).
    Events,
}

/// The table, one row per [`Operation`] in its order.
pub static SPECS: [Spec; <Operation as strum::EnumCount>::COUNT] = [
    // Operation::Create
    Spec {
        tool: "session_create",
        method: "session/create",
        read_only: false,
        mcp_tool: true,
        description: "Start an LLM agent session (a sub-agent with its own model, tools and budget) and run its first \
                 turn on `prompt`: answers `text` and `session_id`. Past `wait_ms`, `status: \"running\"`: \
                 collect it with session_read.",
        input_schema: input_schema::<wire::SessionCreateParams>,
        output_schema: output_schema::<RunResult>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/sessions",
            query: None,
            operation_id: "createSession",
            summary: "Create a session and run its first turn",
            description: Some(
                "Waits `wait_ms` (default 30000, max 600000) for the first turn; a turn still running then answers \
                 `status: \"running\"`: collect it with `GET /v1/sessions/{id}?wait_ms=`.",
            ),
            result: Some("RunResult"),
            answer: "The session exists: the first turn's result (or `running`); `Location` names it.",
            errors: &[InvalidRequest, AgentError, SessionStoreError, SessionCompactionDisabled, PolicyDenied],
        },
    },
    // Operation::Turn
    Spec {
        tool: "session_turn",
        method: "turn/start",
        read_only: false,
        mcp_tool: true,
        description: "Run the next turn of a session with a new message (the agent keeps the conversation), or answer \
                 its `pending` calls (`tool_results`, `approvals`).",
        input_schema: input_schema::<wire::SessionTurnParams>,
        output_schema: output_schema::<RunResult>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/sessions/{id}/turns",
            query: None,
            operation_id: "startTurn",
            summary: "Run the next turn of a session",
            description: Some(
                "One turn runs per session at a time: a turn while another runs is `SESSION_BUSY` (409). Same \
                 `wait_ms` behaviour as creating a session.",
            ),
            result: Some("RunResult"),
            answer: "The turn's result (or `running`).",
            errors: &[InvalidRequest, SessionNotFound, SessionBusy, AgentError, SessionStoreError, PolicyDenied],
        },
    },
    // Operation::Interrupt
    Spec {
        tool: "session_interrupt",
        method: "turn/interrupt",
        read_only: false,
        mcp_tool: true,
        description: "Cancel the turn a session is running; it ends `cancelled`, keeping what was done.",
        input_schema: input_schema::<wire::SessionInterruptParams>,
        output_schema: output_schema::<InterruptResult>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/sessions/{id}/interrupt",
            query: None,
            operation_id: "interruptTurn",
            summary: "Cancel the running turn",
            description: Some(
                "The turn ends `cancelled`; the session takes new turns. `SESSION_NOT_RUNNING` (409) when no turn runs.",
            ),
            result: Some("InterruptResult"),
            answer: "The turn was interrupted.",
            errors: &[SessionNotFound, SessionNotRunning, PolicyDenied],
        },
    },
    // Operation::Read
    Spec {
        tool: "session_read",
        method: "session/read",
        read_only: true,
        mcp_tool: true,
        description: "A session's state, last turn and billing; with `wait_ms`, waits for a running turn to end.",
        input_schema: input_schema::<wire::SessionReadParams>,
        output_schema: output_schema::<SessionView>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/sessions/{id}",
            query: Some(QueryParams::Read),
            operation_id: "readSession",
            summary: "Read a session's state and billing",
            description: Some(
                "Never waits behind a running turn unless `wait_ms` is given: then it long-polls the running turn and \
                 answers when it ends (or when `wait_ms` runs out).",
            ),
            result: Some("SessionView"),
            answer: "The session.",
            errors: &[InvalidRequest, SessionNotFound, SessionStoreError, PolicyDenied],
        },
    },
    // Operation::List
    Spec {
        tool: "session_list",
        method: "session/list",
        read_only: true,
        mcp_tool: true,
        description: "List your sessions, most recently updated first, paged.",
        input_schema: input_schema::<wire::SessionListParams>,
        output_schema: output_schema::<SessionList>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/sessions",
            query: Some(QueryParams::List),
            operation_id: "listSessions",
            summary: "List sessions, most recently updated first",
            description: None,
            result: Some("SessionList"),
            answer: "A page of sessions.",
            errors: &[InvalidRequest, SessionPersistenceDisabled, SessionStoreError, PolicyDenied],
        },
    },
    // Operation::Archive
    Spec {
        tool: "session_archive",
        method: "session/archive",
        read_only: false,
        mcp_tool: true,
        description: "Stop a session and archive it (a running turn finishes first).",
        input_schema: input_schema::<wire::SessionArchiveParams>,
        output_schema: output_schema::<ArchiveResult>,
        rest: RestRoute {
            method: Method::Delete,
            path: "/v1/sessions/{id}",
            query: None,
            operation_id: "archiveSession",
            summary: "Archive a session (a running turn finishes first)",
            description: None,
            result: Some("ArchiveResult"),
            answer: "The session is archived.",
            errors: &[SessionNotFound, SessionStoreError, PolicyDenied],
        },
    },
    // Operation::Compact
    Spec {
        tool: "session_compact",
        method: "session/compact",
        read_only: false,
        mcp_tool: true,
        description: "Compact a session's history now: summarize older turns, prune old tool outputs.",
        input_schema: input_schema::<wire::SessionCompactParams>,
        output_schema: output_schema::<CompactResult>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/sessions/{id}/compact",
            query: None,
            operation_id: "compactSession",
            summary: "Compact a session's history now",
            description: Some(
                "`SESSION_COMPACTION_DISABLED` (501) in builds without compaction; `SESSION_BUSY` (409) while a turn \
                 runs.",
            ),
            result: Some("CompactResult"),
            answer: "What compaction did.",
            // INVALID_REQUEST: the session holds pending tool calls, which must be answered first.
            errors: &[
                InvalidRequest,
                SessionNotFound,
                SessionBusy,
                SessionStoreError,
                SessionCompactionDisabled,
                PolicyDenied,
            ],
        },
    },
    // Operation::ToolOutput
    Spec {
        tool: "session_tool_output",
        method: "session/tool_output",
        read_only: true,
        mcp_tool: true,
        description: "The whole output of a tool result that entered the history shortened.",
        input_schema: input_schema::<wire::SessionToolOutputParams>,
        output_schema: output_schema::<ToolOutputResult>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/sessions/{id}/tool-outputs/{tool_use_id}",
            query: None,
            operation_id: "readToolOutput",
            summary: "The whole output of a capped tool result",
            description: None,
            result: Some("ToolOutputResult"),
            answer: "The tool result's whole output.",
            errors: &[InvalidRequest, SessionNotFound, SessionStoreError, PolicyDenied],
        },
    },
    // Operation::Send
    Spec {
        tool: "session_send",
        method: "session/send",
        read_only: false,
        mcp_tool: true,
        description: "Send a message to a session's inbox without waiting; the agent reads it at its next step or \
                 turn.",
        input_schema: input_schema::<wire::SessionSendParams>,
        output_schema: output_schema::<SendResult>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/sessions/{id}/inbox",
            query: None,
            operation_id: "sendMessage",
            summary: "Send a message to a session's inbox",
            description: Some(
                "Never waits for the session: the message is delivered at its next boundary (between two steps of a \
                 running turn, or before the next turn's prompt). An idle host-mode session starts a turn for it \
                 (`delivered: \"started_turn\"`). `SESSION_INBOX_FULL` (429) when 256 messages already wait.",
            ),
            result: Some("SendResult"),
            answer: "The message was taken in.",
            errors: &[InvalidRequest, SessionNotFound, SessionInboxFull, SessionStoreError, PolicyDenied],
        },
    },
    // Operation::Events
    Spec {
        tool: "session_events",
        method: "session/events",
        read_only: true,
        mcp_tool: true,
        description: "A session's event journal (prompts, text, tool calls, usage, turn ends), paged by `after_seq`.",
        input_schema: input_schema::<wire::SessionEventsParams>,
        output_schema: output_schema::<EventPage>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/sessions/{id}/events",
            query: Some(QueryParams::Events),
            operation_id: "readEvents",
            summary: "A page of a session's event journal",
            description: Some(
                "Events with a `seq` after `after_seq`, at most `limit` (1 to 500) and at most 1 MiB of them (at least \
                 one): page until an empty page. With `follow=true` the answer is Server-Sent Events: one `event` per \
                 journal event (its data a `StoredEvent`), from `after_seq` on, continuing as the session's turns \
                 end, until the client leaves or `--max-follow-secs` (600 s) pass (resume with `after_seq`); a \
                 subject holds at most `--max-follows-per-subject` (16) such streams, one more is refused 429 \
                 `TOO_MANY_STREAMS`.",
            ),
            result: Some("EventPage"),
            answer: "The page, and the `after_seq` of the next one.",
            errors: &[InvalidRequest, SessionNotFound, SessionStoreError, PolicyDenied],
        },
    },
    Spec {
        tool: "agent_list",
        method: "agent/list",
        read_only: true,
        mcp_tool: false,
        description: "The named agents (profiles) session_create and delegate take as `agent`, invalid files \
                      with their reason.",
        input_schema: input_schema::<wire::AgentListParams>,
        output_schema: output_schema::<AgentList>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/agents",
            query: None,
            operation_id: "listAgents",
            summary: "The named agents",
            description: Some("Every profile file the server reads, in lookup order; re-read as the files change."),
            result: Some("AgentList"),
            answer: "The agents.",
            errors: &[],
        },
    },
    Spec {
        tool: "agent_get",
        method: "agent/get",
        read_only: true,
        mcp_tool: false,
        description: "One named agent, whole: its system prompt and the session_create fields it sets.",
        input_schema: input_schema::<wire::AgentGetParams>,
        output_schema: output_schema::<AgentDetail>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/agents/{name}",
            query: None,
            operation_id: "getAgent",
            summary: "One named agent",
            description: None,
            result: Some("AgentDetail"),
            answer: "The agent.",
            errors: &[InvalidRequest],
        },
    },
];

impl Operation {
    pub const ALL: [Operation; <Operation as strum::EnumCount>::COUNT] = [
        Self::Create,
        Self::Turn,
        Self::Interrupt,
        Self::Read,
        Self::List,
        Self::Archive,
        Self::Compact,
        Self::ToolOutput,
        Self::Send,
        Self::Events,
        Self::AgentList,
        Self::AgentGet,
    ];

    /// The operation's row.
    pub fn spec(self) -> &'static Spec {
        &SPECS[self as usize]
    }

    /// The MCP tool's name.
    pub fn tool(self) -> &'static str {
        self.spec().tool
    }

    /// The JSON-RPC method's name.
    pub fn method(self) -> &'static str {
        self.spec().method
    }

    pub fn from_tool(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|operation| operation.tool() == name)
    }

    pub fn from_method(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|operation| operation.method() == name)
    }

    /// By either name: the MCP tool's or the JSON-RPC method's (`deputy call`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::from_tool(name).or_else(|| Self::from_method(name))
    }

    /// Parses `arguments` (errors name the operation as `name`), makes the one service call and
    /// renders its result as JSON. `turn_options` turns the wait of a turn-running operation
    /// into the surface's options (MCP adds progress and cancellation); whatever else it returns
    /// (a progress forwarder) lives until the call ends.
    pub async fn run<S: SessionService, G>(
        self,
        name: &str,
        service: &S,
        arguments: Value,
        turn_options: impl FnOnce(Duration) -> (TurnOptions, G),
    ) -> Result<Value, SessionError> {
        match self {
            Self::Create => {
                let params: wire::SessionCreateParams = wire::parse_params(name, arguments)?;
                let (options, _guard) = turn_options(wire::turn_wait(params.wait_ms));
                json(service.create_session(params.into_request(options)).await)
            }
            Self::Turn => {
                let params: wire::SessionTurnParams = wire::parse_params(name, arguments)?;
                let (options, _guard) = turn_options(wire::turn_wait(params.wait_ms));
                let (id, request) = params.into_request(options);
                json(service.start_turn(&id, request).await)
            }
            Self::Interrupt => {
                let params: wire::SessionInterruptParams = wire::parse_params(name, arguments)?;
                json(service.interrupt(&params.session_id, params.cascade.unwrap_or(true)).await)
            }
            Self::Read => {
                let params: wire::SessionReadParams = wire::parse_params(name, arguments)?;
                json(service.read(&params.session_id, Some(wire::read_wait(params.wait_ms))).await)
            }
            Self::List => {
                let params: wire::SessionListParams = wire::parse_params(name, arguments)?;
                json(service.list(params.into_query()?).await)
            }
            Self::Archive => {
                let params: wire::SessionArchiveParams = wire::parse_params(name, arguments)?;
                json(service.archive(&params.session_id).await)
            }
            Self::Compact => {
                let params: wire::SessionCompactParams = wire::parse_params(name, arguments)?;
                json(service.compact(&params.session_id).await)
            }
            Self::ToolOutput => {
                let params: wire::SessionToolOutputParams = wire::parse_params(name, arguments)?;
                json(service.tool_output(&params.session_id, &params.tool_use_id).await)
            }
            Self::Send => {
                let params: wire::SessionSendParams = wire::parse_params(name, arguments)?;
                let (id, request) = params.into_request();
                json(service.send(&id, request).await)
            }
            Self::Events => {
                let params: wire::SessionEventsParams = wire::parse_params(name, arguments)?;
                let limit = params.limit.unwrap_or(wire::DEFAULT_EVENTS_LIMIT);
                json(service.events(&params.session_id, params.after_seq, limit).await)
            }
            Self::AgentList => {
                let _: wire::AgentListParams = wire::parse_params(name, arguments)?;
                json(Ok(service.agents()))
            }
            Self::AgentGet => {
                let params: wire::AgentGetParams = wire::parse_params(name, arguments)?;
                json(service.agent(&params.name))
            }
        }
    }

    /// The tool's entry in the catalog: its description for an LLM caller, whether it only
    /// reads, and the schemas of its arguments and result.
    pub fn descriptor(self) -> ToolDescriptor {
        let spec = self.spec();
        ToolDescriptor {
            name: spec.tool,
            description: spec.description,
            read_only: spec.read_only,
            input_schema: Arc::new((spec.input_schema)()),
            output_schema: Arc::new((spec.output_schema)()),
        }
    }
}

/// deputy's tools, in the order `tools/list` shows them.
/// Every operation's tool, MCP's or not (`schemas/` has them all).
pub fn tool_catalog() -> Vec<ToolDescriptor> {
    Operation::ALL.into_iter().map(Operation::descriptor).collect()
}

/// The tools an MCP client lists.
pub fn mcp_tool_catalog() -> Vec<ToolDescriptor> {
    Operation::ALL.into_iter().filter(|operation| operation.spec().mcp_tool).map(Operation::descriptor).collect()
}

/// One tool of the catalog. Its schemas are rmcp's (JSON Schema 2020-12, the input's for
/// deserializing, the output's for serializing) made [`portable`](super::portable); the input's
/// also [strict-ready](super::strict).
#[derive(Debug, Clone)]
pub struct ToolDescriptor {
    pub name: &'static str,
    pub description: &'static str,
    pub read_only: bool,
    pub input_schema: Arc<Map<String, Value>>,
    pub output_schema: Arc<Map<String, Value>>,
}

/// A params type's schema, [`portable`] and [`strict_input`]. Every params type is a struct,
/// so the object-root requirement always holds.
fn input_schema<P: JsonSchema + 'static>() -> Map<String, Value> {
    strict_input(&portable(&rmcp::handler::server::common::schema_for_input::<P>().unwrap_or_default()))
}

fn output_schema<R: JsonSchema + 'static>() -> Map<String, Value> {
    portable(&rmcp::handler::server::common::schema_for_output::<R>())
}

/// Renders a service result as JSON. The result types are plain data that always serialize, so
/// the error arm cannot happen in practice. It would be an internal error, not the agent's, but
/// the code table has no internal code and adding one changes the contract: it stays
/// `AGENT_ERROR`.
fn json<T: Serialize>(result: Result<T, SessionError>) -> Result<Value, SessionError> {
    serde_json::to_value(result?).map_err(|err| {
        SessionError::agent(None, ErrorKind::Internal, format!("could not encode the result: {err}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_every_operation_in_order() {
        for (index, operation) in Operation::ALL.into_iter().enumerate() {
            assert_eq!(operation as usize, index);
        }
    }

    #[test]
    fn every_operation_has_one_tool_and_one_method_and_the_catalog_lists_the_tools() {
        let catalog: Vec<&str> = tool_catalog().iter().map(|tool| tool.name).collect();
        let tools: Vec<&str> = Operation::ALL.iter().map(|operation| operation.tool()).collect();
        assert_eq!(catalog, tools);
        for operation in Operation::ALL {
            assert_eq!(Operation::from_tool(operation.tool()), Some(operation));
            assert_eq!(Operation::from_method(operation.method()), Some(operation));
        }
    }
}
