//! What every operation shares on the wire: the error body every surface sends, how long the
//! turn-running and reading operations wait, and the parsing of arguments into a params type.
//! Each operation's own params types are beside its row of the table, in its group of
//! [`super::operation`].
//!
//! Pure data: no I/O, no service calls, no knowledge of which surface is speaking.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, SessionError, TransportCode};
use crate::ids::SessionId;
use crate::session::{DEFAULT_WAIT, clamp_wait};

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

/// Every surface answers an error through this conversion, once per answer: where errors are
/// counted by code.
impl From<&SessionError> for ErrorBody {
    fn from(error: &SessionError) -> Self {
        crate::telemetry::spans::error_answered(error.code().as_str());
        Self {
            code: error.code().as_str().to_owned(),
            message: error.to_string(),
            session_id: error.session_id().cloned(),
            error_kind: error.kind(),
        }
    }
}

/// An error another deputy answered (the background server that owns a store), back as the
/// error it was there: the same code, session and message (the variants whose message deputy
/// composes are composed again from the numbers in it).
impl From<ErrorBody> for SessionError {
    fn from(body: ErrorBody) -> Self {
        let ErrorBody { code, message, session_id, error_kind } = body;
        let id = || session_id.clone().unwrap_or_else(|| SessionId::from_string(""));
        let numbers: Vec<usize> =
            message.split(|c: char| !c.is_ascii_digit()).filter_map(|digits| digits.parse().ok()).collect();
        let number = |at: usize| numbers.get(at).copied().unwrap_or_default();
        match code.as_str() {
            "SESSION_NOT_FOUND" => Self::NotFound { session_id: id(), message },
            "SESSION_BUSY" => Self::Busy(id()),
            "SESSION_NOT_RUNNING" => Self::NotRunning(id()),
            "SESSION_PERSISTENCE_DISABLED" => Self::PersistenceDisabled(message),
            "SESSION_COMPACTION_DISABLED" => Self::CompactionDisabled(message),
            "SESSION_STORE_ERROR" => {
                Self::store(message.strip_prefix("session store: ").map(str::to_owned).unwrap_or(message))
            }
            "SESSION_INBOX_FULL" if message.starts_with("the sessions of this owner") => {
                Self::MailQuotaFull { session_id: id(), held: number(0), limit: number(1) }
            }
            "SESSION_INBOX_FULL" => {
                Self::InboxFull { session_id: id(), capacity: number(numbers.len().saturating_sub(1)) }
            }
            "POLICY_DENIED" => Self::PolicyDenied(message),
            "AGENT_ERROR" => Self::Agent { session_id, kind: error_kind.unwrap_or(ErrorKind::Internal), message },
            _ => Self::InvalidRequest(message),
        }
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
