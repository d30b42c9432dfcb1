//! MCP logging for deputy's tool calls.
//!
//! Logging is deprecated by SEP-2577 (protocol 2026-07-28), but 2025-11-25 clients still
//! set a level with `logging/setLevel` and show the server's `notifications/message`; on
//! 2026-07-28 a client asks per request with `_meta["io.modelcontextprotocol/logLevel"]`.
//! deputy reports one line per session tool call (tool, outcome, session id), never prompt
//! or answer text. The deprecated rmcp items are confined to this file.
#![allow(deprecated)]

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{CallToolResult, LoggingLevel, LoggingMessageNotificationParam, ServerCapabilities};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

/// Tools plus logging.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities::builder().enable_tools().enable_logging().build()
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
    pub async fn tool_finished(&self, context: &RequestContext<RoleServer>, tool: &str, result: &CallToolResult) {
        let stored = *self.level.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(wanted) = context.meta.log_level().or(stored) else { return };
        let failed = result.is_error == Some(true);
        let level = if failed { LoggingLevel::Warning } else { LoggingLevel::Info };
        if severity(level) < severity(wanted) {
            return;
        }
        let content = result.structured_content.as_ref();
        let field = |name: &str| content.and_then(|c| c.get(name)).cloned().unwrap_or_default();
        let data = serde_json::json!({
            "tool": tool,
            "outcome": if failed { field("code") } else { field("status") },
            "session_id": field("session_id"),
        });
        let message = LoggingMessageNotificationParam::new(level, data).with_logger("deputy");
        // A client that went away cannot be told; the call itself already succeeded.
        let _ = context.peer.notify_logging_message(message).await;
    }
}

/// The `set_level` answer.
pub fn accept_level(log: &CallLog, level: LoggingLevel) -> Result<(), McpError> {
    log.set_level(level);
    Ok(())
}
