//! [`McpServerError`]: what can go wrong with an external MCP server, by stage.
//!
//! The texts are what the model (a failed call) or the caller (a session whose servers do not
//! start, `AGENT_ERROR`) reads, so they name the server. They name it by its display form
//! (`name (command)` or `name (url)`), never by its key, whose env and headers may hold secrets.

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;

/// Why a server could not be started or a call to it failed.
#[derive(Debug, thiserror::Error)]
pub enum McpServerError {
    /// The stdio server's program could not be started.
    #[error("MCP server {server}: cannot start {command:?}: {source}")]
    Spawn {
        server: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// `[sandbox] mode = "required"` and the kernel cannot confine the server.
    #[error("MCP server {server}: POLICY_DENIED: {refusal}")]
    Sandbox { server: String, refusal: crate::sandbox::SandboxRefusal },
    /// A configured HTTP header name is not a valid header name.
    #[error("MCP server {server}: header {name:?}: {source}")]
    HeaderName {
        server: String,
        name: String,
        #[source]
        source: reqwest::header::InvalidHeaderName,
    },
    /// A configured HTTP header value is not a valid header value.
    #[error("MCP server {server}: header {name}: {source}")]
    HeaderValue {
        server: String,
        name: reqwest::header::HeaderName,
        #[source]
        source: reqwest::header::InvalidHeaderValue,
    },
    /// The server started (or was reached) but the `initialize` handshake failed.
    #[error("MCP server {server}: handshake failed: {source}")]
    Handshake {
        server: String,
        #[source]
        source: Box<ClientInitializeError>,
    },
    /// An HTTP server's `initialize` handshake failed. Unlike [`Self::Handshake`], the
    /// answer is not quoted: whatever the URL returned (an internal service's body, security
    /// review F6) stays in deputy's debug log.
    #[error(
        "MCP server {server}: handshake failed: it did not answer as an MCP server (details in deputy's debug log)"
    )]
    HttpHandshake { server: String },
    /// An HTTP server's URL may not be reached (security review F6).
    #[error("MCP server {server}: refused: {source}")]
    Unreachable {
        server: String,
        #[source]
        source: super::reach::Unreachable,
    },
    /// The server answered `initialize` but not `tools/list`.
    #[error("MCP server {server}: tools/list failed: {source}")]
    ListTools {
        server: String,
        #[source]
        source: ServiceError,
    },
    /// Starting, handshake and `tools/list` together took longer than the start-up limit.
    #[error("MCP server {server} did not start within {secs}s")]
    StartTimeout { server: String, secs: u64 },
    /// A tool call failed while the server stayed up: the server's own error, reported as is.
    #[error(transparent)]
    Call(ServiceError),
    /// The server went away during a call. The pool starts it again on the next use.
    #[error("MCP server {server} closed during the call ({source}); it is restarted on the next call")]
    Closed {
        server: String,
        #[source]
        source: ServiceError,
    },
}

impl McpServerError {
    /// Whether the operator's address rules refused the server (`POLICY_DENIED`), rather than
    /// the server failing (`AGENT_ERROR`).
    pub fn is_policy_refusal(&self) -> bool {
        matches!(self, Self::Unreachable { source: super::reach::Unreachable::NotPublic { .. }, .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_errors_read_as_the_server_error_or_say_the_server_closed() {
        let server = "files (npx server)".to_owned();
        let call = McpServerError::Call(ServiceError::UnexpectedResponse);
        assert_eq!(call.to_string(), "Unexpected response type");
        let closed = McpServerError::Closed { server: server.clone(), source: ServiceError::TransportClosed };
        assert_eq!(
            closed.to_string(),
            "MCP server files (npx server) closed during the call (Transport closed); it is restarted on the next call"
        );
        let slow = McpServerError::StartTimeout { server, secs: 30 };
        assert_eq!(slow.to_string(), "MCP server files (npx server) did not start within 30s");
    }
}
