//! Running a session's turns: start one (`session_create`, which starts the session too, and
//! `session_turn`), cancel it, and read how it went.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Method, OwnRoute, RestInput, RestRoute, Spec, TypeSchema, query};
use crate::agent::{AgentBuildConfig, ContextOverrides};
use crate::error::ErrorCode::{
    AgentError, InvalidRequest, PolicyDenied, SessionBusy, SessionCompactionDisabled, SessionNotFound,
    SessionNotRunning, SessionStoreError,
};
use crate::ids::SessionId;
use crate::llm::Reasoning;
use crate::model::{ApprovalAnswer, Budget, InterruptResult, RunResult, SessionView, ToolResultAnswer};
use crate::session::{CreateSessionRequest, TurnOptions, TurnRequest};
use crate::surfaces::wire;
use crate::tools::mcp::McpServerRequest;
use crate::tools::{ApprovalPolicy, BuiltinTool, CallbackTool, ShellRequest, ToolRequest};

operations! {
    /// The operations that run and read turns.
    pub enum Turns {
        Create => CREATE, |service, params: SessionCreateParams, turn_options| {
            let (options, _guard) = turn_options(wire::turn_wait(params.wait_ms));
            service.create_session(params.into_request(options)).await
        },
        Turn => TURN, |service, params: SessionTurnParams, turn_options| {
            let (options, _guard) = turn_options(wire::turn_wait(params.wait_ms));
            let (id, request) = params.into_request(options);
            service.start_turn(&id, request).await
        },
        Interrupt => INTERRUPT, |service, params: SessionInterruptParams| {
            service.interrupt(&params.session_id, params.cascade.unwrap_or(true)).await
        },
        Read => READ, |service, params: SessionReadParams| {
            service.read(&params.session_id, Some(wire::read_wait(params.wait_ms))).await
        },
    }
}

static CREATE: Spec = Spec {
    tool: "session_create",
    method: "session/create",
    read_only: false,
    mcp_tool: true,
    not_for_models: &[],
    description: "Start an LLM agent session (a sub-agent with its own model, tools and budget) and run its first \
             turn on `prompt`: answers `text` and `session_id`. Past `wait_ms`, `status: \"running\"`: \
             collect it with session_read.",
    params: TypeSchema::params::<SessionCreateParams>(),
    result: TypeSchema::result::<RunResult>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/sessions",
        input: RestInput::Own(OwnRoute::Create),
        operation_id: "createSession",
        summary: "Create a session and run its first turn",
        description: Some(
            "Waits `wait_ms` (default 30000, max 600000) for the first turn; a turn still running then answers \
             `status: \"running\"`: collect it with `GET /v1/sessions/{id}?wait_ms=`.",
        ),
        status: 201,
        answer: "The session exists: the first turn's result (or `running`); `Location` names it.",
        errors: &[InvalidRequest, AgentError, SessionStoreError, SessionCompactionDisabled, PolicyDenied],
    },
};

static TURN: Spec = Spec {
    tool: "session_turn",
    method: "turn/start",
    read_only: false,
    mcp_tool: true,
    not_for_models: &[],
    description: "Run the next turn of a session with a new message (the agent keeps the conversation), or answer \
             its `pending` calls (`tool_results`, `approvals`).",
    params: TypeSchema::params::<SessionTurnParams>(),
    result: TypeSchema::result::<RunResult>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/sessions/{id}/turns",
        input: RestInput::Own(OwnRoute::Turn),
        operation_id: "startTurn",
        summary: "Run the next turn of a session",
        description: Some(
            "One turn runs per session at a time: a turn while another runs is `SESSION_BUSY` (409). Same \
             `wait_ms` behaviour as creating a session.",
        ),
        status: 200,
        answer: "The turn's result (or `running`).",
        errors: &[InvalidRequest, SessionNotFound, SessionBusy, AgentError, SessionStoreError, PolicyDenied],
    },
};

static INTERRUPT: Spec = Spec {
    tool: "session_interrupt",
    method: "turn/interrupt",
    read_only: false,
    mcp_tool: true,
    not_for_models: &[],
    description: "Cancel the turn a session is running; it ends `cancelled`, keeping what was done.",
    params: TypeSchema::params::<SessionInterruptParams>(),
    result: TypeSchema::result::<InterruptResult>(),
    rest: RestRoute {
        method: Method::Post,
        path: "/v1/sessions/{id}/interrupt",
        input: RestInput::Path,
        operation_id: "interruptTurn",
        summary: "Cancel the running turn",
        description: Some(
            "The turn ends `cancelled`; the session takes new turns. `SESSION_NOT_RUNNING` (409) when no turn runs.",
        ),
        status: 200,
        answer: "The turn was interrupted.",
        errors: &[SessionNotFound, SessionNotRunning, PolicyDenied],
    },
};

static READ: Spec = Spec {
    tool: "session_read",
    method: "session/read",
    read_only: true,
    mcp_tool: true,
    not_for_models: &[],
    description: "A session's state, last turn and billing; with `wait_ms`, waits for a running turn to end.",
    params: TypeSchema::params::<SessionReadParams>(),
    result: TypeSchema::result::<SessionView>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/sessions/{id}",
        input: RestInput::Query(query::<SessionReadQuery>),
        operation_id: "readSession",
        summary: "Read a session's state and billing",
        description: Some(
            "Never waits behind a running turn unless `wait_ms` is given: then it long-polls the running turn and \
             answers when it ends (or when `wait_ms` runs out).",
        ),
        status: 200,
        answer: "The session.",
        errors: &[InvalidRequest, SessionNotFound, SessionStoreError, PolicyDenied],
    },
};

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreateParams {
    /// The task for the agent: the first turn's prompt.
    pub prompt: String,
    /// A named agent to start from (listed below); fields here override its.
    #[serde(default)]
    pub agent: Option<String>,
    /// `provider:model`, e.g. `anthropic:claude-sonnet-4-5`. Default: the server's.
    #[serde(default)]
    pub model: Option<String>,
    /// System prompt, kept for the whole session.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Maximum tokens of each model response.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Session limits (a turn reaching one ends `budget_exhausted`).
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Context window and compaction (default: the model's).
    #[serde(default)]
    pub context: Option<ContextOverrides>,
    /// Directory of the file tools and shell. Default: the server's.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// Builtin tools (default: the file tools).
    #[serde(default)]
    pub builtins: Option<Vec<BuiltinTool>>,
    /// The `shell` tool: `true`, `false` (default) or limits.
    #[serde(default)]
    pub shell: Option<ShellRequest>,
    /// Narrows the shell's sandbox.
    #[serde(default)]
    pub sandbox: Option<crate::sandbox::SandboxRequest>,
    /// Your own tools: a call ends the turn `pending_tool_calls`; answer with session_turn `tool_results`.
    #[serde(default)]
    pub callbacks: Option<Vec<CallbackTool>>,
    /// Calls held for approval: `"never"` (default), `"always"` (shell, file writes) or `{"tools": [names]}`.
    #[serde(default)]
    pub approval: Option<ApprovalPolicy>,
    /// Deny approvals unanswered this long (ms).
    #[serde(default)]
    pub approval_timeout_ms: Option<u64>,
    /// MCP servers whose tools the agent gets (`server__tool`): config names or inline servers.
    #[serde(default)]
    pub mcp_servers: Option<Vec<McpServerRequest>>,
    /// After each turn, wait for messages (session_send) and answer each.
    #[serde(default)]
    pub host_mode: Option<bool>,
    /// Its name among its peers: 1-64 letters, digits, `-`, `_`, `.`.
    #[serde(default)]
    pub name: Option<String>,
    /// Sessions of one peer_group can message each other.
    #[serde(default)]
    pub peer_group: Option<String>,
    /// Key/value labels, to find the session in session_list.
    #[serde(default, deserialize_with = "crate::text::json::option")]
    #[schemars(schema_with = "crate::text::json::option_schema::<BTreeMap<String, String>>")]
    pub labels: Option<BTreeMap<String, String>>,
    /// JSON Schema the answer must match; it is then parsed in `structured_output`.
    #[serde(default, deserialize_with = "crate::text::json::option")]
    #[schemars(schema_with = "crate::text::json::option_schema::<crate::text::json::AnyObject>")]
    pub output_schema: Option<serde_json::Value>,
    /// Retries of an answer not matching `output_schema` (default 2).
    #[serde(default)]
    pub structured_output_retries: Option<u32>,
    /// Extended thinking for every model call.
    #[serde(default)]
    pub reasoning: Option<Reasoning>,
    /// Only these skills (default: all).
    #[serde(default)]
    pub skills: Option<Vec<String>>,
    /// Wait this long (ms; default 30000) before answering `status: "running"`.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

impl SessionCreateParams {
    pub fn into_request(self, turn: TurnOptions) -> CreateSessionRequest {
        CreateSessionRequest {
            build: AgentBuildConfig {
                model: self.model,
                system_prompt: self.system_prompt,
                max_tokens: self.max_tokens,
                budget: self.budget.unwrap_or_default(),
                context: self.context.unwrap_or_default(),
                tools: ToolRequest {
                    workspace: self.workspace,
                    builtins: self.builtins,
                    shell: self.shell,
                    callbacks: self.callbacks.unwrap_or_default(),
                    approval: self.approval,
                    approval_timeout_ms: self.approval_timeout_ms,
                    mcp_servers: self.mcp_servers.unwrap_or_default(),
                    network: self.sandbox.and_then(|sandbox| sandbox.network),
                },
                output_schema: self.output_schema,
                structured_output_retries: self.structured_output_retries,
                reasoning: self.reasoning,
                comms_by_default: false,
                delegation_by_default: false,
                agent: None,
                skills: self.skills,
                // Collections come from a named agent's `documents` (or are all of them).
                documents: None,
            },
            prompt: self.prompt,
            labels: self.labels.unwrap_or_default(),
            host_mode: self.host_mode,
            agent: self.agent,
            name: self.name,
            peer_group: self.peer_group,
            turn,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionTurnParams {
    /// The session to continue.
    pub session_id: SessionId,
    /// The next message; optional when answering pending calls.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Results of every pending callback call.
    #[serde(default)]
    pub tool_results: Option<Vec<ToolResultAnswer>>,
    /// Decisions on every pending approval.
    #[serde(default)]
    pub approvals: Option<Vec<ApprovalAnswer>>,
    /// This turn's output schema, instead of the session's.
    #[serde(default, deserialize_with = "crate::text::json::option")]
    #[schemars(schema_with = "crate::text::json::option_schema::<crate::text::json::AnyObject>")]
    pub output_schema: Option<serde_json::Value>,
    /// Retries of an answer not matching `output_schema` (default 2).
    #[serde(default)]
    pub structured_output_retries: Option<u32>,
    /// As in session_create.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

impl SessionTurnParams {
    pub fn into_request(self, options: TurnOptions) -> (SessionId, TurnRequest) {
        let request = TurnRequest {
            prompt: self.prompt.unwrap_or_default(),
            tool_results: self.tool_results.unwrap_or_default(),
            approvals: self.approvals.unwrap_or_default(),
            output_schema: self.output_schema,
            structured_output_retries: self.structured_output_retries,
            options,
        };
        (self.session_id, request)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionInterruptParams {
    /// The session whose running turn to cancel.
    pub session_id: SessionId,
    /// Also cancel its delegated sessions' turns (default true).
    #[serde(default)]
    pub cascade: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionReadParams {
    /// The session to read.
    pub session_id: SessionId,
    /// Wait up to this long (ms) for a running turn to end.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// The query of `GET /v1/sessions/{id}`: [`SessionReadParams`] without the id, which is in the
/// path.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SessionReadQuery {
    #[serde(default)]
    wait_ms: Option<u64>,
}
