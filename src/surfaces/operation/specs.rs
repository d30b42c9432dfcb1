//! The operation table's rows: what every surface says of each operation.

use super::{Method, Operation, QueryParams, RestRoute, Spec, input_schema, output_schema};
use crate::error::ErrorCode::{
    AgentError, InvalidRequest, PolicyDenied, SessionBusy, SessionCompactionDisabled, SessionInboxFull,
    SessionNotFound, SessionNotRunning, SessionPersistenceDisabled, SessionStoreError,
};
use crate::model::caller_info::CallerInfo;
use crate::model::documents::DocumentsIndexed;
use crate::model::inbox::SendResult;
use crate::model::memory::{MemoryDeleted, MemoryList};
use crate::model::webhooks::WebhooksStatus;
use crate::model::{
    ArchiveResult, CompactResult, EventPage, ExportResult, InterruptResult, RewindResult, RunResult,
    SessionHistory, SessionList, SessionView, ToolOutputResult,
};
use crate::profiles::{AgentDetail, AgentList};
use crate::surfaces::wire;

/// The table, one row per [`Operation`] in its order.
pub static SPECS: [Spec; <Operation as strum::EnumCount>::COUNT] = [
    // Operation::Create
    Spec {
        tool: "session_create",
        method: "session/create",
        read_only: false,
        mcp_tool: true,
        not_for_models: &[],
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
        not_for_models: &[],
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
        not_for_models: &[],
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
        not_for_models: &[],
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
        not_for_models: wire::SessionListParams::NOT_FOR_MODELS,
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
        not_for_models: &[],
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
        not_for_models: &[],
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
        not_for_models: &[],
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
        not_for_models: &[],
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
        not_for_models: &[],
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
        not_for_models: &[],
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
        not_for_models: &[],
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
    Spec {
        tool: "session_fork",
        method: "session/fork",
        read_only: false,
        mcp_tool: true,
        not_for_models: &[],
        description: "Copy a session up to a turn into a new session.",
        input_schema: input_schema::<wire::SessionForkParams>,
        output_schema: output_schema::<SessionView>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/sessions/{id}/fork",
            query: None,
            operation_id: "forkSession",
            summary: "Fork a session at a turn",
            description: Some(
                "A new session with the source's configuration, a fresh budget and its conversation up to the end of \
                 turn `at_turn`; `state.forked_from` names the source. Waits for a running turn of the source. Turns \
                 before the last compaction, or rewound, cannot be reached (`INVALID_REQUEST`).",
            ),
            result: Some("SessionView"),
            answer: "The new session, idle; `Location` names it.",
            errors: &[
                InvalidRequest,
                SessionNotFound,
                AgentError,
                SessionPersistenceDisabled,
                SessionStoreError,
                PolicyDenied,
            ],
        },
    },
    Spec {
        tool: "session_rewind",
        method: "session/rewind",
        read_only: false,
        mcp_tool: true,
        not_for_models: &[],
        description: "Drop the turns of a session after `to_turn`.",
        input_schema: input_schema::<wire::SessionRewindParams>,
        output_schema: output_schema::<RewindResult>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/sessions/{id}/rewind",
            query: None,
            operation_id: "rewindSession",
            summary: "Rewind a session to a turn",
            description: Some(
                "The dropped turns' events stay in the journal, followed by a `rewound` event; turn numbers keep \
                 counting up. `SESSION_BUSY` (409) while a turn runs.",
            ),
            result: Some("RewindResult"),
            answer: "What the rewind dropped.",
            errors: &[InvalidRequest, SessionNotFound, SessionBusy, SessionStoreError, PolicyDenied],
        },
    },
    Spec {
        tool: "session_export",
        method: "session/export",
        read_only: true,
        mcp_tool: false,
        not_for_models: &[],
        description: "A session as one JSONL document: its record, messages and journal (secret values left out).",
        input_schema: input_schema::<wire::SessionExportParams>,
        output_schema: output_schema::<ExportResult>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/sessions/{id}/export",
            query: None,
            operation_id: "exportSession",
            summary: "Export a session as JSONL",
            description: Some(
                "The answer is the document itself (`application/jsonl`): a header line (format `deputy.session`, \
                 its version, counts, the secret values left out), the record, one line per message, one per journal \
                 event. MCP clients read it as the resource `deputy://sessions/{id}/export`.",
            ),
            result: None,
            answer: "The document.",
            errors: &[SessionNotFound, SessionStoreError, PolicyDenied],
        },
    },
    Spec {
        tool: "session_import",
        method: "session/import",
        read_only: false,
        mcp_tool: false,
        not_for_models: &[],
        description: "A new session of yours from an exported document.",
        input_schema: input_schema::<wire::SessionImportParams>,
        output_schema: output_schema::<SessionView>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/sessions/import",
            query: None,
            operation_id: "importSession",
            summary: "Import an exported session",
            description: Some(
                "The body is the document (`application/jsonl`, within `--max-body-bytes`). Every line is checked \
                 before anything is created: a damaged document, or one of a newer format version, is \
                 `INVALID_REQUEST` and creates nothing. The new session has its own id and the caller as owner.",
            ),
            result: Some("SessionView"),
            answer: "The new session, idle; `Location` names it.",
            errors: &[InvalidRequest, AgentError, SessionPersistenceDisabled, SessionStoreError, PolicyDenied],
        },
    },
    Spec {
        tool: "session_messages",
        method: "session/messages",
        read_only: true,
        mcp_tool: false,
        not_for_models: &[],
        description: "A session's whole conversation, oldest message first (waits for a running turn).",
        input_schema: input_schema::<wire::SessionMessagesParams>,
        output_schema: output_schema::<SessionHistory>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/sessions/{id}/messages",
            query: None,
            operation_id: "readMessages",
            summary: "A session's whole conversation",
            description: Some(
                "Waits for a running turn to end. MCP clients read it as the resource \
                 `deputy://sessions/{id}/transcript` (Markdown).",
            ),
            result: Some("SessionHistory"),
            answer: "The messages, oldest first.",
            errors: &[SessionNotFound, SessionStoreError, PolicyDenied],
        },
    },
    // Operation::MemoryList
    Spec {
        tool: "memory_list",
        method: "memory/list",
        read_only: true,
        mcp_tool: false,
        not_for_models: &[],
        description: "Your memories: what your sessions remembered and their compacted history. With `query`, the \
                 best matches; without, the newest first.",
        input_schema: input_schema::<wire::MemoryListParams>,
        output_schema: output_schema::<MemoryList>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/memories",
            query: Some(QueryParams::Memories),
            operation_id: "listMemories",
            summary: "The caller's memories, newest first or searched",
            description: Some(
                "Only the caller's own (its token's subject), whatever its scopes. Page with `before` = the \
                 previous page's `next_before`. MCP clients read them as the resource `deputy://memories`.",
            ),
            result: Some("MemoryList"),
            answer: "A page of memories.",
            errors: &[InvalidRequest, SessionStoreError],
        },
    },
    // Operation::MemoryDelete
    Spec {
        tool: "memory_delete",
        method: "memory/delete",
        read_only: false,
        mcp_tool: false,
        not_for_models: &[],
        description: "Delete one of your memories by id; `deleted: false` when you have none of that id.",
        input_schema: input_schema::<wire::MemoryDeleteParams>,
        output_schema: output_schema::<MemoryDeleted>,
        rest: RestRoute {
            method: Method::Delete,
            path: "/v1/memories/{memory_id}",
            query: None,
            operation_id: "deleteMemory",
            summary: "Delete one of the caller's memories",
            description: Some("Another subject's memory of that id is as absent as one that never was."),
            result: Some("MemoryDeleted"),
            answer: "Whether it was deleted.",
            errors: &[InvalidRequest, SessionStoreError],
        },
    },
    // Operation::DocumentsIndex
    Spec {
        tool: "documents_index",
        method: "documents/index",
        read_only: false,
        mcp_tool: false,
        not_for_models: &[],
        description: "Bring the document collections (or one) up to their files now; only what changed is read \
                 again. Needs the admin scope.",
        input_schema: input_schema::<wire::DocumentsIndexParams>,
        output_schema: output_schema::<DocumentsIndexed>,
        rest: RestRoute {
            method: Method::Post,
            path: "/v1/documents/index",
            query: Some(QueryParams::Documents),
            operation_id: "indexDocuments",
            summary: "Re-index the document collections",
            description: Some(
                "Collections also refresh when the server starts and when their files change; this is for a \
                 refresh on demand (`deputy documents index`).",
            ),
            result: Some("DocumentsIndexed"),
            answer: "Each collection's files, and what was indexed again.",
            errors: &[InvalidRequest, PolicyDenied],
        },
    },
    // Operation::CallerGet
    Spec {
        tool: "caller_get",
        method: "caller/get",
        read_only: true,
        mcp_tool: false,
        not_for_models: &[],
        description: "Who the caller is (its token's subject) and what its scopes let it do.",
        input_schema: input_schema::<wire::CallerGetParams>,
        output_schema: output_schema::<CallerInfo>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/caller",
            query: None,
            operation_id: "getCaller",
            summary: "The caller and its scopes",
            description: Some(
                "What a client needs to offer only what the caller may do (the inspector at `/ui` reads it).",
            ),
            result: Some("CallerInfo"),
            answer: "The caller.",
            errors: &[],
        },
    },
    // Operation::WebhooksStatus
    Spec {
        tool: "webhooks_status",
        method: "webhooks/status",
        read_only: true,
        mcp_tool: false,
        not_for_models: &[],
        description: "The configured webhooks and how their deliveries go: the journal position each delivers \
                 next, deliveries acknowledged, and a delivery that keeps failing with its last error. Needs the \
                 admin scope.",
        input_schema: input_schema::<wire::WebhooksStatusParams>,
        output_schema: output_schema::<WebhooksStatus>,
        rest: RestRoute {
            method: Method::Get,
            path: "/v1/webhooks",
            query: None,
            operation_id: "webhooksStatus",
            summary: "The webhooks' delivery status",
            description: Some(
                "Each `[[webhooks]]` entry of the server's config file (its secret never shown). A failing \
                 delivery is retried with backoff, never skipped: `failing` stays true until it succeeds.",
            ),
            result: Some("WebhooksStatus"),
            answer: "Every webhook.",
            errors: &[PolicyDenied],
        },
    },
];
