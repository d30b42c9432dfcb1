//! MCP streamable HTTP at `/mcp`: rmcp's service around the same [`McpServer`] as stdio.
//!
//! Clients on 2026-07-28 are served statelessly; older clients get rmcp's `Mcp-Session-Id`
//! sessions (legacy mode). Either way, deputy's sessions are application handles in tool
//! arguments and never tied to an MCP transport session. Host and Origin are checked by the
//! shared guard in front of every route, so rmcp's own checks are turned off here.

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::HttpConfig;
use super::mcp_sessions::CappedSessionManager;
use crate::session::SessionService;
use crate::surfaces::mcp::McpServer;

pub fn service<S: SessionService>(
    service: Arc<S>,
    config: &HttpConfig,
    shutdown: CancellationToken,
) -> StreamableHttpService<McpServer<S>, CappedSessionManager> {
    let server = McpServer::new(service);
    // MCP transport sessions of legacy clients: capped, and reaped after an idle time.
    let sessions = CappedSessionManager::new(config.max_mcp_sessions);
    let http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_sse_keep_alive(Some(Duration::from_secs(15)))
        .with_max_request_body_bytes(config.max_body_bytes)
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_cancellation_token(shutdown);
    StreamableHttpService::new(move || Ok(server.for_connection()), Arc::new(sessions), http)
}
