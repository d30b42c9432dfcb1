//! MCP logging for deputy's tool calls.
//!
//! Logging is deprecated by SEP-2577 (protocol 2026-07-28), but 2025-11-25 clients still
//! set a level with `logging/setLevel` and show the server's `notifications/message`; on
//! 2026-07-28 a client asks per request with `_meta["io.modelcontextprotocol/logLevel"]`.
//! deputy reports one line per session tool call (tool, outcome, session id), never prompt
//! or answer text. The deprecated rmcp items are confined to this file.
#![allow(deprecated)]

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ServerCapabilities};
use serde_json::Value;

use crate::surfaces::wire::ErrorBody;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

/// Tools plus logging, resources (sessions, with subscriptions and list changes) and the
/// tasks extension: everything deputy's MCP server declares, built here where the
/// deprecated logging builder is allowed.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities::builder()
        .enable_tools()
        .enable_logging()
        .enable_resources()
        .enable_resources_subscribe()
        .enable_resources_list_changed()
        .enable_tasks()
        .build()
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The level one MCP connection asked for.
#[derive(Debug, Clone, Default)]
pub struct CallLog {
    level: Arc<Mutex<Option<LoggingLevel>>>,
}

impl CallLog {
    /// `logging/setLevel`.
    pub fn set_level(&self, level: LoggingLevel) {
        *self.level.lock().unwrap_or_else(PoisonError::into_inner) = Some(level);
    }

    /// Reports a finished tool call if the client asked for messages of its severity: errors at
    /// `warning`, the rest at `info`.
    pub async fn tool_finished(&self, context: &RequestContext<RoleServer>, tool: &str, summary: CallSummary) {
        let stored = *self.level.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(wanted) = context.meta.log_level().or(stored) else { return };
        let level = if summary.failed { LoggingLevel::Warning } else { LoggingLevel::Info };
        if severity(level) < severity(wanted) {
            return;
        }
        let data = serde_json::json!({
            "tool": tool,
            "outcome": summary.outcome,
            "session_id": summary.session_id,
        });
        let message = LoggingMessageNotificationParam::new(level, data).with_logger("deputy");
        // A client that went away cannot be told; the call itself already succeeded.
        let _ = context.peer.notify_logging_message(message).await;
    }
}

/// What the log line of one tool call says: never prompt or answer text.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSummary {
    failed: bool,
    /// The error code; for a success the turn's `status`, the session's status (`session_read`),
    /// or `ok` for results that have neither (list, archive, compact, interrupt, tool output).
    outcome: String,
    session_id: Option<String>,
}

impl CallSummary {
    pub fn success(result: &Value) -> Self {
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let state = result.get("state");
        let outcome = text(result.get("status"))
            .or_else(|| text(state.and_then(|state| state.get("status"))))
            .unwrap_or_else(|| "ok".to_owned());
        Self { failed: false, outcome, session_id: text(result.get("session_id")) }
    }

    pub fn failure(error: &ErrorBody) -> Self {
        Self {
            failed: true,
            outcome: error.code.clone(),
            session_id: error.session_id.as_ref().map(ToString::to_string),
        }
    }
}

/// The `set_level` answer.
pub fn accept_level(log: &CallLog, level: LoggingLevel) -> Result<(), McpError> {
    log.set_level(level);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_result_has_a_real_outcome() {
        let turn = CallSummary::success(&json!({"session_id": "s", "status": "completed"}));
        assert_eq!((turn.outcome.as_str(), turn.session_id.as_deref()), ("completed", Some("s")));
        let read = CallSummary::success(&json!({"session_id": "s", "state": {"status": "idle"}}));
        assert_eq!(read.outcome, "idle");
        for other in [json!({"sessions": [], "total": 0}), json!({"session_id": "s", "compacted": false})] {
            assert_eq!(CallSummary::success(&other).outcome, "ok");
        }
        let error = ErrorBody::from(&crate::error::SessionError::invalid("m"));
        let failed = CallSummary::failure(&error);
        assert!(failed.failed);
        assert_eq!((failed.outcome.as_str(), failed.session_id), ("INVALID_REQUEST", None));
    }
}
