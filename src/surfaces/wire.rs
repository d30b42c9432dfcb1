//! The wire contract of deputy's operations: parameter types and their conversion into service
//! requests, plus the error body every surface sends.
//!
//! Pure data: no I/O, no service calls, no knowledge of which surface is speaking. The same
//! parameter types serve MCP tool arguments, REST bodies and JSON-RPC params; the tool catalog
//! built from them lives in [`super::operation`], the checked-in schema files in
//! [`super::schemas`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agent::{AgentBuildConfig, ContextOverrides};
use crate::error::{ErrorKind, SessionError, TransportCode};
use crate::ids::{MessageId, SessionId};
use crate::llm::Reasoning;
use crate::model::{ApprovalAnswer, Budget, ListPosition, ToolResultAnswer};
use crate::session::{
    CreateSessionRequest, DEFAULT_WAIT, ListQuery, RemoteSender, SendRequest, TurnOptions, TurnRequest, clamp_wait,
};
use crate::tools::mcp::McpServerRequest;
use crate::tools::{ApprovalPolicy, BuiltinTool, CallbackTool, ShellRequest, ToolRequest};

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreateParams {
    /// The task or question for the agent: the first turn's prompt.
    pub prompt: String,
    /// Model as `provider:model`, e.g. `anthropic:claude-sonnet-4-5`, `openai:gpt-4o-mini`,
    /// `ollama:llama3.2`. Default: the server's configured model.
    #[serde(default)]
    pub model: Option<String>,
    /// System prompt for the agent (kept verbatim for the whole session).
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Maximum tokens of each model response.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Limits over the whole session; a turn that reaches one ends with
    /// `stop_reason: "budget_exhausted"`.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Context management: the model's window, when to compact, how much to keep, and the cap
    /// on tool outputs. Every field has a default from the model.
    #[serde(default)]
    pub context: Option<ContextOverrides>,
    /// Directory the agent's file tools and shell work in (must exist). Paths that leave it
    /// (`..`, absolute paths, symlinks) are refused. Default: the server's workspace.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// Which builtin file tools the agent gets. Default: all of `read_file`, `write_file`,
    /// `edit_file`, `list_dir`, `search` (or the config file's `[tools] builtins`).
    #[serde(default)]
    pub builtins: Option<Vec<BuiltinTool>>,
    /// The `shell` tool: `false` (the default) leaves it out; `true` enables it, or
    /// `{timeout_ms, max_output_bytes}` enables it with those limits (default 60000 ms and
    /// 65536 bytes of each of stdout and stderr).
    #[serde(default)]
    pub shell: Option<ShellRequest>,
    /// The sandbox of this session's shell, narrower than the operator's: `{"network":
    /// "deny"}` keeps it off the network where the operator allows the network. Asking for
    /// more than the operator allows is `POLICY_DENIED`.
    #[serde(default)]
    pub sandbox: Option<crate::sandbox::SandboxRequest>,
    /// Tools you execute yourself: `{name, description, input_schema}`. The model sees them as
    /// ordinary tools; when it calls one, the turn stops with `status: "pending_tool_calls"`
    /// and `pending` lists the calls. Answer them with session_turn `tool_results`.
    #[serde(default)]
    pub callbacks: Option<Vec<CallbackTool>>,
    /// Which tool calls wait for your approval before they run: `"never"` (default),
    /// `"always"` (`shell`, `write_file`, `edit_file`), or `{"tools": [names]}`. A held call
    /// shows in `pending` with `kind: "approval"`; answer with session_turn `approvals`.
    #[serde(default)]
    pub approval: Option<ApprovalPolicy>,
    /// Deny an unanswered approval once it is this old (ms), when the next session_turn finds
    /// it. Default: approvals wait for ever.
    #[serde(default)]
    pub approval_timeout_ms: Option<u64>,
    /// External MCP servers whose tools the agent gets, named `server__tool`: names of the
    /// config file's `[mcp_servers.NAME]`, or inline `{name, command, args?, env?}` (stdio) /
    /// `{name, url, headers?}` (streamable HTTP). Sessions with the same server (same command,
    /// args and env, or url and headers) share one process. Default: none.
    #[serde(default)]
    pub mcp_servers: Option<Vec<McpServerRequest>>,
    /// Host mode: after its turn the session waits for messages (session_send, or other
    /// agents' send_message); mail that arrives while it is idle starts a turn by itself.
    /// Host sessions get the tools send_message and list_peers unless `builtins` says
    /// otherwise. Default false: mail then waits for the next session_turn (or the next step
    /// of a running turn).
    #[serde(default)]
    pub host_mode: Option<bool>,
    /// The session's name among its peers (unique in its peer group): other sessions send it
    /// messages by this name. 1-64 letters, digits, '-', '_' or '.'.
    #[serde(default)]
    pub name: Option<String>,
    /// Sessions of yours created with the same peer_group see each other (list_peers,
    /// send_message). Default: the session is a group of its own.
    #[serde(default)]
    pub peer_group: Option<String>,
    /// Free-form key/value labels to find the session again in `session_list`.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Structured output: a JSON Schema (2020-12) the final answer of every turn of this
    /// session must be valid against (a session_turn may give its own for that turn). The
    /// agent works as usual, tools included; its answer is then in `structured_output`, parsed
    /// (and in `text` as JSON text). An answer that does not validate is sent back to the
    /// model with the errors; if it never validates, the turn ends with
    /// `stop_reason: "structured_output_invalid"` and `structured_output_errors`.
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
    /// How many times an answer that does not validate is sent back (default 2, max 10); each
    /// retry is a model call that counts in the budget. Only with `output_schema`.
    #[serde(default)]
    pub structured_output_retries: Option<u32>,
    /// Extended thinking / reasoning for every model call of the session: `effort` ("low",
    /// "medium", "high"; OpenAI's `reasoning_effort`, or an Anthropic thinking budget of 2,048 /
    /// 8,192 / 16,384 tokens) and/or `budget_tokens` (Anthropic's thinking budget, at least
    /// 1,024, on top of `max_tokens`). Default: the provider's configured `reasoning`, else off.
    /// Reasoning shows as `reasoning` events and in the history, apart from the text.
    #[serde(default)]
    pub reasoning: Option<Reasoning>,
    /// How long to wait for the turn, in ms (default 30000, max 600000). If the turn is not done
    /// by then, the answer is `status: "running"`; collect the result with `session_read`.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionTurnParams {
    /// The session to continue.
    pub session_id: SessionId,
    /// The next message for the agent. Optional when the call answers pending tool calls (it
    /// then follows their results); required otherwise.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Results of the pending callback calls: `{tool_use_id, content, is_error?}`. Every
    /// pending call must be answered in the same session_turn.
    #[serde(default)]
    pub tool_results: Option<Vec<ToolResultAnswer>>,
    /// Decisions on the pending approvals: `{tool_use_id, decision: "allow" | "deny"}`.
    #[serde(default)]
    pub approvals: Option<Vec<ApprovalAnswer>>,
    /// This turn's output schema (JSON Schema 2020-12), instead of the session's; see
    /// `session_create`.
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
    /// Retries of an answer that does not validate (default 2, max 10); only with
    /// `output_schema`.
    #[serde(default)]
    pub structured_output_retries: Option<u32>,
    /// How long to wait for the turn, in ms (default 30000, max 600000); see `session_create`.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionInterruptParams {
    /// The session whose running turn to cancel.
    pub session_id: SessionId,
    /// Also cancel the running turns of its descendants (delegated sessions); default true.
    #[serde(default)]
    pub cascade: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionReadParams {
    /// The session to read.
    pub session_id: SessionId,
    /// If a turn is running, wait up to this many ms (max 600000) for it to end and return its
    /// result in `state.last_turn`. Default 0: answer at once.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionListParams {
    /// Continue after an earlier page: its `next_cursor`. A page found by cursor costs the same
    /// at any depth; `offset` then skips from there.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Sessions to skip (default 0).
    #[serde(default)]
    pub offset: Option<usize>,
    /// Page size (default 50, max 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Also list archived sessions (needs persistence; without it the answer is
    /// SESSION_PERSISTENCE_DISABLED).
    #[serde(default)]
    pub include_archived: Option<bool>,
    /// Only the children of this session (delegated by it).
    #[serde(default)]
    pub parent_id: Option<SessionId>,
    /// Only the sessions of this delegation tree, its root included.
    #[serde(default)]
    pub root_id: Option<SessionId>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionArchiveParams {
    /// The session to stop and remove. A running turn finishes first.
    pub session_id: SessionId,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCompactParams {
    /// The session whose history to compact now.
    pub session_id: SessionId,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSendParams {
    /// The receiving session: its id, or its name when `peer_group` is given.
    pub session_id: SessionId,
    /// The message (at most 64 KiB of text).
    pub message: String,
    /// The id of the message this one answers.
    #[serde(default)]
    pub in_reply_to: Option<MessageId>,
    /// Find `session_id` by name among your sessions of this peer group.
    #[serde(default)]
    pub peer_group: Option<String>,
    /// Hops the message already made (set by another deputy passing on an agent's message;
    /// past the receiver's max_hops it is parked instead of delivered). Default 0. Above 0 it
    /// needs a token with the scope sessions:send.
    #[serde(default)]
    pub hops: Option<u32>,
    /// The sending session, when another deputy sends on its behalf: recorded as a remote
    /// peer's message, with your token's subject as the peer. Needs a token with the scope
    /// sessions:send; name follows the rules of session names, session_id is an id.
    #[serde(default)]
    pub sender: Option<RemoteSenderParams>,
}

/// A session of another deputy, as it names itself.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteSenderParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

impl SessionSendParams {
    pub fn into_request(self) -> (SessionId, SendRequest) {
        let request = SendRequest {
            body: self.message,
            in_reply_to: self.in_reply_to,
            peer_group: self.peer_group,
            hops: self.hops.unwrap_or(0),
            sender: self.sender.map(|sender| RemoteSender { session_id: sender.session_id, name: sender.name }),
        };
        (self.session_id, request)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionToolOutputParams {
    pub session_id: SessionId,
    /// The `tool_use_id` named in the elision marker of a capped tool result.
    pub tool_use_id: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionEventsParams {
    pub session_id: SessionId,
    /// Only events with a larger `seq` (a page's `next_seq`); from the first event when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// Events per page, 1 to 500 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// The default page size of `session_events`.
pub const DEFAULT_EVENTS_LIMIT: usize = 100;

/// The `_meta` key under which an MCP error result carries its [`ErrorBody`].
pub const ERROR_META_KEY: &str = "deputy/error";

/// The error of every surface: an MCP error result's `_meta["deputy/error"]`, a REST error
/// body, JSON-RPC `error.data`, a streamed turn's `error` event.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// Stable code, e.g. `SESSION_BUSY`.
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// With `AGENT_ERROR`: how it failed (`rate_limited`, `context_overflow`, `credentials`, …),
    /// so a caller can decide to retry or compact without parsing `message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
}

impl ErrorBody {
    /// The body of a refusal the HTTP transport makes before any session operation runs.
    pub fn transport(code: TransportCode, message: impl Into<String>) -> Self {
        Self { code: code.as_str().to_owned(), message: message.into(), session_id: None, error_kind: None }
    }
}

impl From<&SessionError> for ErrorBody {
    fn from(error: &SessionError) -> Self {
        Self {
            code: error.code().as_str().to_owned(),
            message: error.to_string(),
            session_id: error.session_id().cloned(),
            error_kind: error.kind(),
        }
    }
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
            },
            prompt: self.prompt,
            labels: self.labels.unwrap_or_default(),
            host_mode: self.host_mode.unwrap_or(false),
            name: self.name,
            peer_group: self.peer_group,
            turn,
        }
    }
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

impl SessionListParams {
    /// An unknown cursor is `INVALID_REQUEST`: it was not made by this server.
    pub fn into_query(self) -> Result<ListQuery, SessionError> {
        let after = match &self.cursor {
            Some(cursor) => Some(ListPosition::from_cursor(cursor).ok_or_else(|| {
                SessionError::invalid(format!("cursor {cursor:?} is not a next_cursor of session_list"))
            })?),
            None => None,
        };
        Ok(ListQuery {
            after,
            offset: self.offset.unwrap_or(0),
            limit: self.limit,
            include_archived: self.include_archived.unwrap_or(false),
            parent_id: self.parent_id,
            root_id: self.root_id,
        })
    }
}

/// How long `session_create` / `session_turn` wait for their turn (`wait_ms`: default 30 s,
/// at most 600 s), the same on every surface.
pub fn turn_wait(wait_ms: Option<u64>) -> Duration {
    clamp_wait(wait_ms, DEFAULT_WAIT)
}

/// How long `session_read` waits for a running turn (`wait_ms`: default 0, at most 600 s).
pub fn read_wait(wait_ms: Option<u64>) -> Duration {
    clamp_wait(wait_ms, Duration::ZERO)
}

/// Parses tool arguments, turning any mismatch into `INVALID_REQUEST` with serde's explanation.
pub fn parse_params<P: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: serde_json::Value,
) -> Result<P, SessionError> {
    serde_json::from_value(arguments)
        .map_err(|err| SessionError::invalid(format!("invalid arguments for {tool}: {err}")))
}
