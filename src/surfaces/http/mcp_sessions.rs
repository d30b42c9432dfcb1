//! Legacy (2025-11-25) MCP transport sessions, capped in number.
//!
//! rmcp's `LocalSessionManager` reaps a session after an idle time (`keep_alive`) but holds any
//! number of them: every `initialize` without an `Mcp-Session-Id` made one (security review
//! F10: 3,000 POSTs, 3,000 sessions, +180 MiB). [`CappedSessionManager`] wraps it and refuses a
//! new session once [`DEFAULT_MAX_MCP_SESSIONS`] are open; rmcp answers that refusal with a
//! 500 whose body carries the message. Sessions leave the count when they are closed, reaped
//! idle, or their client deletes them. deputy's own sessions are unaffected: they are ids in
//! tool arguments, not transport sessions.

use std::time::Duration;

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionManager};

/// Legacy MCP transport sessions held at once, by default.
pub const DEFAULT_MAX_MCP_SESSIONS: usize = 256;
/// Of those, what one subject may hold by default: a quarter, so one tenant leaves the rest to
/// the others (security review 2, G11). The `/mcp` layer counts them ([`super::mcp`]).
pub const DEFAULT_MAX_MCP_SESSIONS_PER_SUBJECT: usize = DEFAULT_MAX_MCP_SESSIONS / 4;
/// A legacy MCP transport session idle this long is closed.
pub const MCP_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// rmcp's local session manager with a cap on the number of sessions.
#[derive(Debug)]
pub struct CappedSessionManager {
    inner: LocalSessionManager,
    max_sessions: usize,
    /// Serialises creations, so concurrent `initialize`s cannot overshoot the cap.
    creating: tokio::sync::Mutex<()>,
}

impl CappedSessionManager {
    pub fn new(max_sessions: usize) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(MCP_SESSION_IDLE);
        Self { inner, max_sessions, creating: tokio::sync::Mutex::new(()) }
    }

    /// Sessions open now.
    pub async fn len(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    pub async fn is_empty(&self) -> bool {
        self.len().await == 0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CappedSessionError {
    #[error(
        "deputy holds {0} MCP transport sessions already, its limit: close one (HTTP DELETE with its \
         Mcp-Session-Id), wait for idle ones to expire, or use protocol version 2026-07-28, which needs none"
    )]
    Full(usize),
    #[error(transparent)]
    Session(#[from] LocalSessionManagerError),
}

type Transport = <LocalSessionManager as SessionManager>::Transport;

impl SessionManager for CappedSessionManager {
    type Error = CappedSessionError;
    type Transport = Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let _creating = self.creating.lock().await;
        if self.len().await >= self.max_sessions {
            tracing::warn!(max = self.max_sessions, "refusing a new MCP transport session: at the limit");
            return Err(CappedSessionError::Full(self.max_sessions));
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::create_stream(&self.inner, id, message).await?)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::create_standalone_stream(&self.inner, id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::resume(&self.inner, id, last_event_id).await?)
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // Restoring re-creates a session: it counts against the cap like a new one.
        let _creating = self.creating.lock().await;
        if !self.inner.has_session(&id).await? && self.len().await >= self.max_sessions {
            return Err(CappedSessionError::Full(self.max_sessions));
        }
        Ok(self.inner.restore_session(id).await?)
    }

    fn event_store(
        &self,
    ) -> Option<std::sync::Arc<dyn rmcp::transport::streamable_http_server::session::EventStore>> {
        self.inner.event_store()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Security review F10: every legacy `initialize` made a transport session, without limit.
    #[tokio::test]
    async fn f10_legacy_mcp_sessions_are_capped_and_a_closed_one_frees_its_place() {
        let manager = CappedSessionManager::new(3);
        let mut ids = Vec::new();
        for _ in 0..3 {
            let (id, _transport) = manager.create_session().await.unwrap();
            ids.push(id);
        }
        let refused = manager.create_session().await.map(|(id, _)| id).unwrap_err();
        assert!(matches!(refused, CappedSessionError::Full(3)), "{refused}");
        assert!(refused.to_string().contains("limit"));

        manager.close_session(&ids[0]).await.unwrap();
        assert_eq!(manager.len().await, 2);
        assert!(manager.create_session().await.is_ok());
    }
}
