//! The one error type every surface speaks, and the one table that maps it onto each transport.
//!
//! Surfaces never invent codes: MCP, REST, JSON-RPC and the CLI all go through
//! [`SessionError::code`] and the [`ErrorCode`] accessors below, so a code means the same thing
//! everywhere. The few refusals the HTTP transport makes before any session operation runs
//! have their codes in [`TransportCode`], beside it. Adding a variant forces a decision here,
//! because every match is exhaustive.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::{EnumCount, IntoStaticStr};

use crate::ids::SessionId;

/// The cause of a store failure, kept (not flattened to text) so logs show the whole chain.
pub type StoreCause = Arc<dyn std::error::Error + Send + Sync>;

/// An error of a session operation, as reported to a caller.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    /// No live (or stored) session has this id, or it was archived.
    #[error("{message}")]
    NotFound { session_id: SessionId, message: String },
    /// A turn is already running on this session; the caller may retry once it ends.
    #[error("session {0} is running a turn; wait for it to end (session_read with wait_ms) or interrupt it")]
    Busy(SessionId),
    /// The operation needs the session store, which this build does not include.
    #[error("{0} needs persistence, which this build of deputy does not include (feature session-store)")]
    PersistenceDisabled(String),
    /// The operation needs compaction, which this build does not include.
    #[error("{0} needs compaction, which this build of deputy does not include (feature session-compaction)")]
    CompactionDisabled(String),
    /// `interrupt` on a session with no turn in flight.
    #[error("session {0} has no turn running")]
    NotRunning(SessionId),
    /// The session store failed: `message` says what deputy was doing, `source` is the store's
    /// own error when there is one.
    #[error("session store: {message}")]
    Store {
        message: String,
        #[source]
        source: Option<StoreCause>,
    },
    /// Building the agent or running its turn failed; `kind` says how (provider, credentials,
    /// tools), so a caller can decide to retry or compact without reading the message.
    #[error("{message}")]
    Agent { session_id: Option<SessionId>, kind: ErrorKind, message: String },
    /// The request itself is malformed: missing or wrong-typed arguments, bad values.
    #[error("{0}")]
    InvalidRequest(String),
    /// The session's inbox holds as many waiting messages as it may; the sender may retry once
    /// the session has read some (its next turn takes them all).
    #[error("the inbox of session {session_id} is full ({capacity} messages wait); retry after its next turn")]
    InboxFull { session_id: SessionId, capacity: usize },
    /// The owner's live sessions together hold as much waiting mail as one owner may
    /// (`[inbox] max_waiting_bytes_per_owner`; security review 2, G12).
    #[error(
        "the sessions of this owner hold {held} bytes of waiting mail, over {limit} (max_waiting_bytes_per_owner) with \
         this message for session {session_id}; retry after they have read some"
    )]
    MailQuotaFull { session_id: SessionId, held: usize, limit: usize },
    /// What the caller asked for is refused by the operator's rules (`[policy]`, the caller's
    /// scopes, the workspace roots, address rules, the sandbox): the caller's error, never the
    /// server's, and not for retrying as it is.
    #[error("{0}")]
    PolicyDenied(String),
}

impl SessionError {
    pub fn not_found(session_id: SessionId) -> Self {
        let message = format!("no session {session_id}");
        Self::NotFound { session_id, message }
    }

    pub fn agent(session_id: Option<SessionId>, kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::Agent { session_id, kind, message: message.into() }
    }

    /// A store failure that deputy noticed itself (no underlying error to keep).
    pub fn store(message: impl Into<String>) -> Self {
        Self::Store { message: message.into(), source: None }
    }

    /// What kind of `AGENT_ERROR` this is; `None` for every other code.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Agent { kind, .. } => Some(*kind),
            Self::NotFound { .. }
            | Self::Busy(_)
            | Self::PersistenceDisabled(_)
            | Self::CompactionDisabled(_)
            | Self::NotRunning(_)
            | Self::Store { .. }
            | Self::InboxFull { .. }
            | Self::MailQuotaFull { .. }
            | Self::InvalidRequest(_)
            | Self::PolicyDenied(_) => None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest(message.into())
    }

    pub fn policy_denied(message: impl Into<String>) -> Self {
        Self::PolicyDenied(message.into())
    }

    /// The stable code of this error: the whole mapping table hangs off it.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound { .. } => ErrorCode::SessionNotFound,
            Self::Busy(_) => ErrorCode::SessionBusy,
            Self::PersistenceDisabled(_) => ErrorCode::SessionPersistenceDisabled,
            Self::CompactionDisabled(_) => ErrorCode::SessionCompactionDisabled,
            Self::NotRunning(_) => ErrorCode::SessionNotRunning,
            Self::Store { .. } => ErrorCode::SessionStoreError,
            Self::Agent { .. } => ErrorCode::AgentError,
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest,
            Self::InboxFull { .. } | Self::MailQuotaFull { .. } => ErrorCode::SessionInboxFull,
            Self::PolicyDenied(_) => ErrorCode::PolicyDenied,
        }
    }

    /// The session the error is about, when there is one (surfaces echo it to the caller).
    pub fn session_id(&self) -> Option<&SessionId> {
        match self {
            Self::NotFound { session_id, .. }
            | Self::Busy(session_id)
            | Self::NotRunning(session_id)
            | Self::InboxFull { session_id, .. }
            | Self::MailQuotaFull { session_id, .. } => Some(session_id),
            Self::Agent { session_id, .. } => session_id.as_ref(),
            Self::PersistenceDisabled(_)
            | Self::CompactionDisabled(_)
            | Self::Store { .. }
            | Self::InvalidRequest(_)
            | Self::PolicyDenied(_) => None,
        }
    }
}

/// What kind of failure an `AGENT_ERROR` (or a failed turn) is: the provider's classification
/// (`rate_limited`, `overloaded`, `context_overflow`, `auth`, …) plus deputy's own:
/// `credentials` (a provider is configured but unusable), `tools` (the session's tools could
/// not be set up), `internal` (deputy itself failed).
//
// One value per `llm::LlmErrorKind`, which converts into it (in `llm`, the layer above).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, EnumCount, IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ErrorKind {
    /// The provider's rate limit (retried already; try later).
    RateLimited,
    /// The provider is overloaded (retried already; try later).
    Overloaded,
    /// The provider failed on its side (5xx).
    Server,
    /// The provider could not be reached.
    Connect,
    /// The provider sent nothing within the idle timeout.
    Timeout,
    /// The provider's stream broke off.
    StreamBroken,
    /// The prompt does not fit the model's context window: compact, then retry.
    ContextOverflow,
    /// The provider refused the key.
    Auth,
    /// The account's spend limit or quota is exhausted.
    QuotaExhausted,
    /// The provider refused the request itself.
    InvalidRequest,
    /// The provider's answer made no sense.
    Decode,
    /// The provider's client could not be set up.
    Config,
    /// The provider is configured but unusable (for example, no API key).
    Credentials,
    /// The session's tools could not be set up (workspace, MCP servers).
    Tools,
    /// deputy itself failed.
    Internal,
}

/// The stable error codes of deputy's contract, with their representation on every transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumCount)]
pub enum ErrorCode {
    SessionNotFound,
    SessionBusy,
    SessionPersistenceDisabled,
    SessionCompactionDisabled,
    SessionNotRunning,
    SessionStoreError,
    AgentError,
    InvalidRequest,
    SessionInboxFull,
    PolicyDenied,
}

impl ErrorCode {
    /// Every code, for tests and documentation that must cover the whole table.
    pub const ALL: [ErrorCode; 10] = [
        Self::SessionNotFound,
        Self::SessionBusy,
        Self::SessionPersistenceDisabled,
        Self::SessionCompactionDisabled,
        Self::SessionNotRunning,
        Self::SessionStoreError,
        Self::AgentError,
        Self::InvalidRequest,
        Self::SessionInboxFull,
        Self::PolicyDenied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionNotFound => "SESSION_NOT_FOUND",
            Self::SessionBusy => "SESSION_BUSY",
            Self::SessionPersistenceDisabled => "SESSION_PERSISTENCE_DISABLED",
            Self::SessionCompactionDisabled => "SESSION_COMPACTION_DISABLED",
            Self::SessionNotRunning => "SESSION_NOT_RUNNING",
            Self::SessionStoreError => "SESSION_STORE_ERROR",
            Self::AgentError => "AGENT_ERROR",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::SessionInboxFull => "SESSION_INBOX_FULL",
            Self::PolicyDenied => "POLICY_DENIED",
        }
    }

    /// The JSON-RPC error code; the string code travels in `error.data.code`.
    pub fn jsonrpc_code(self) -> i32 {
        match self {
            Self::SessionNotFound => -32001,
            Self::SessionBusy => -32002,
            Self::SessionPersistenceDisabled => -32003,
            Self::SessionCompactionDisabled => -32004,
            Self::SessionNotRunning => -32005,
            Self::SessionInboxFull => -32006,
            Self::PolicyDenied => -32007,
            Self::SessionStoreError | Self::AgentError => -32000,
            Self::InvalidRequest => -32602,
        }
    }

    /// The HTTP status of a REST error body `{"code", "message"}`.
    pub fn http_status(self) -> u16 {
        match self {
            Self::SessionNotFound => 404,
            Self::SessionBusy | Self::SessionNotRunning => 409,
            Self::SessionPersistenceDisabled | Self::SessionCompactionDisabled => 501,
            Self::SessionStoreError | Self::AgentError => 500,
            Self::InvalidRequest => 400,
            Self::SessionInboxFull => 429,
            Self::PolicyDenied => 403,
        }
    }

    /// The CLI exit status. Exit 2 is reserved for a turn that ran out of budget, which is a
    /// result rather than an error.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::SessionNotFound
            | Self::SessionBusy
            | Self::SessionPersistenceDisabled
            | Self::SessionCompactionDisabled
            | Self::SessionNotRunning
            | Self::SessionStoreError
            | Self::AgentError
            | Self::InvalidRequest
            | Self::SessionInboxFull
            | Self::PolicyDenied => 1,
        }
    }
}

// `ALL` is written out so it reads as the table; these fail the build when a variant is added
// to an enum but not to its `ALL` (a duplicate in `ALL` fails the tests below).
const _: () = assert!(ErrorCode::ALL.len() == ErrorCode::COUNT);
const _: () = assert!(TransportCode::ALL.len() == TransportCode::COUNT);

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The codes of the refusals the HTTP transport answers before any session operation runs: the
/// guard's (bearer token, Host and Origin) and the router's (no such path, wrong method).
///
/// They are not [`ErrorCode`]s: no [`SessionError`] produces them, and MCP over stdio, JSON-RPC
/// methods and the CLI never answer with them. They travel in the same `{code, message}` body
/// as every error, so a client reads one shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumCount)]
pub enum TransportCode {
    /// The bearer token is missing or wrong (only when deputy runs with a token).
    Unauthorized,
    /// The Host or Origin header is not allowed.
    Forbidden,
    /// No route has this path.
    NotFound,
    /// The path exists, but not with this method.
    MethodNotAllowed,
    /// The caller holds as many `follow=true` event streams as one subject may (security
    /// review 2, G8): close one, or page instead.
    TooManyStreams,
    /// The caller holds as many legacy MCP transport sessions (`Mcp-Session-Id`) as one subject
    /// may (security review 2, G11): close one, or use protocol 2026-07-28, which needs none.
    TooManyMcpSessions,
    /// The caller has as many requests in flight as one subject may (security review 2, G8):
    /// wait for one to end.
    TooManyRequests,
    /// The server holds as many connections as it serves at once (`--max-connections`): try
    /// again after `Retry-After`.
    Overloaded,
}

impl TransportCode {
    /// Every code, for tests and documentation that must cover the whole table.
    pub const ALL: [TransportCode; 8] = [
        Self::Unauthorized,
        Self::Forbidden,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::TooManyStreams,
        Self::TooManyMcpSessions,
        Self::TooManyRequests,
        Self::Overloaded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "UNAUTHORIZED",
            Self::Forbidden => "FORBIDDEN",
            Self::NotFound => "NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::TooManyStreams => "TOO_MANY_STREAMS",
            Self::TooManyMcpSessions => "TOO_MANY_MCP_SESSIONS",
            Self::TooManyRequests => "TOO_MANY_REQUESTS",
            Self::Overloaded => "OVERLOADED",
        }
    }

    /// The HTTP status the refusal is answered with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::TooManyStreams | Self::TooManyMcpSessions | Self::TooManyRequests => 429,
            Self::Overloaded => 503,
        }
    }
}

impl std::fmt::Display for TransportCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_table_lists_each_variant_once() {
        assert_eq!(ErrorCode::ALL.iter().collect::<HashSet<_>>().len(), ErrorCode::COUNT);
        assert_eq!(TransportCode::ALL.iter().collect::<HashSet<_>>().len(), TransportCode::COUNT);
    }

    /// The table of DESIGN.md, row by row; a new code must be added here to compile the test.
    #[test]
    fn every_code_maps_as_the_design_table_says() {
        for code in ErrorCode::ALL {
            let row = match code {
                ErrorCode::SessionNotFound => ("SESSION_NOT_FOUND", -32001, 404, 1),
                ErrorCode::SessionBusy => ("SESSION_BUSY", -32002, 409, 1),
                ErrorCode::SessionPersistenceDisabled => ("SESSION_PERSISTENCE_DISABLED", -32003, 501, 1),
                ErrorCode::SessionCompactionDisabled => ("SESSION_COMPACTION_DISABLED", -32004, 501, 1),
                ErrorCode::SessionNotRunning => ("SESSION_NOT_RUNNING", -32005, 409, 1),
                ErrorCode::SessionStoreError => ("SESSION_STORE_ERROR", -32000, 500, 1),
                ErrorCode::AgentError => ("AGENT_ERROR", -32000, 500, 1),
                ErrorCode::InvalidRequest => ("INVALID_REQUEST", -32602, 400, 1),
                ErrorCode::SessionInboxFull => ("SESSION_INBOX_FULL", -32006, 429, 1),
                ErrorCode::PolicyDenied => ("POLICY_DENIED", -32007, 403, 1),
            };
            assert_eq!((code.as_str(), code.jsonrpc_code(), code.http_status(), code.exit_code()), row);
        }
    }

    /// The transport refusals, row by row; a new code must be added here to compile the test.
    #[test]
    fn every_transport_code_maps_to_its_status_and_never_reuses_an_error_code() {
        for code in TransportCode::ALL {
            let row = match code {
                TransportCode::Unauthorized => ("UNAUTHORIZED", 401),
                TransportCode::Forbidden => ("FORBIDDEN", 403),
                TransportCode::NotFound => ("NOT_FOUND", 404),
                TransportCode::MethodNotAllowed => ("METHOD_NOT_ALLOWED", 405),
                TransportCode::TooManyStreams => ("TOO_MANY_STREAMS", 429),
                TransportCode::TooManyMcpSessions => ("TOO_MANY_MCP_SESSIONS", 429),
                TransportCode::TooManyRequests => ("TOO_MANY_REQUESTS", 429),
                TransportCode::Overloaded => ("OVERLOADED", 503),
            };
            assert_eq!((code.as_str(), code.http_status()), row);
            assert!(ErrorCode::ALL.iter().all(|error| error.as_str() != code.as_str()), "{code} is taken");
        }
    }

    #[test]
    fn errors_carry_their_session_id() {
        let id = SessionId::new();
        assert_eq!(SessionError::Busy(id.clone()).session_id(), Some(&id));
        assert_eq!(SessionError::not_found(id.clone()).code(), ErrorCode::SessionNotFound);
        assert_eq!(SessionError::invalid("x").session_id(), None);
    }
}
