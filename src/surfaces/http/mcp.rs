//! MCP streamable HTTP at `/mcp`: rmcp's service around the same [`McpServer`] as stdio.
//!
//! Clients on 2026-07-28 are served statelessly; older clients get rmcp's `Mcp-Session-Id`
//! sessions (legacy mode). Either way, deputy's sessions are application handles in tool
//! arguments and never tied to an MCP transport session. Host and Origin are checked by the
//! shared guard in front of every route, so rmcp's own checks are turned off here.
//!
//! Three behaviours of rmcp 3.9 have no setting, so a thin layer in front of it ([`hygiene`])
//! changes them:
//!
//! - **A transport session belongs to its subject** (security review G10): rmcp keys sessions
//!   by id alone, and every request carries its own bearer token. The subject whose request
//!   created a session is remembered, and a request naming that `Mcp-Session-Id` with another
//!   subject's token answers 404, as for an unknown session (what the MCP specification has a
//!   server answer for a session it does not know): no tool calls through it, no answers to
//!   its server requests (elicitations), no standalone stream of its notifications, no DELETE.
//!
//! - **A subject holds at most its share of transport sessions** (G11): an `initialize` that
//!   would open one more than `--max-mcp-sessions-per-subject` for its subject answers 429
//!   `TOO_MANY_MCP_SESSIONS`, so one tenant cannot take the whole `--max-mcp-sessions` pool
//!   from the others (idle ones expire after 30 minutes, and a ping keeps one alive).
//!
//! - **The SSE priming event** (an event with an id, `retry` and empty data, SEP-1699) came
//!   with protocol 2025-11-25, but rmcp sends it on every stream. Clients that negotiated an
//!   older version do not expect it (Python `mcp` 1.9 logs a parse error for every response),
//!   so it is removed from their streams. The negotiated version is the one `initialize` agreed
//!   on, remembered per `Mcp-Session-Id`; for a request outside such a session, its
//!   `MCP-Protocol-Version` header, or 2025-03-26 without one (what the specification says a
//!   server assumes then).
//! - **`DELETE /mcp`** of an unknown `Mcp-Session-Id` answers 404, as every other request with
//!   that id does (rmcp answers 202 whatever the id), and a successful one answers 204 rather
//!   than 202, which clients treat as a failed termination.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use rmcp::model::ProtocolVersion;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::HttpConfig;
use super::api_error::ApiError;
use super::mcp_sessions::CappedSessionManager;
use crate::caller::Caller;
use crate::error::TransportCode;
use crate::session::CallerServices;
use crate::surfaces::mcp::McpServer;

/// The first protocol version whose clients expect the SSE priming event.
const PRIMING_SINCE: &str = "2025-11-25";
/// What a request without `MCP-Protocol-Version` speaks, outside a session and unless it is an
/// `initialize`.
const NO_HEADER_VERSION: &str = "2025-03-26";

/// The `/mcp` route: rmcp's streamable HTTP service behind [`hygiene`].
pub fn router<P: CallerServices>(services: Arc<P>, config: &HttpConfig, shutdown: CancellationToken) -> Router {
    // Every call's caller comes from its request, put there by the guard; a request without
    // one (which the guard never lets through) could do nothing.
    let server = McpServer::new(services, Caller::new("unidentified", []));
    // MCP transport sessions of legacy clients: capped, and reaped after an idle time.
    let sessions = Arc::new(CappedSessionManager::new(config.max_mcp_sessions));
    let http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_sse_keep_alive(Some(Duration::from_secs(15)))
        .with_max_request_body_bytes(config.max_body_bytes)
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_cancellation_token(shutdown);
    let mcp = StreamableHttpService::new(move || Ok(server.for_connection()), sessions.clone(), http);
    let state = Hygiene {
        sessions,
        versions: Arc::default(),
        owners: Arc::default(),
        per_subject: config.max_mcp_sessions_per_subject,
        opening: Arc::default(),
    };
    Router::new().fallback_service(mcp).layer(axum::middleware::from_fn_with_state(state, hygiene))
}

/// What [`hygiene`] knows: rmcp's MCP sessions, and the version each one negotiated.
#[derive(Clone)]
struct Hygiene {
    sessions: Arc<CappedSessionManager>,
    versions: Arc<Mutex<HashMap<String, String>>>,
    /// The subject that opened each session (G10).
    owners: Arc<Mutex<HashMap<String, Arc<str>>>>,
    /// Transport sessions one subject may hold (G11).
    per_subject: usize,
    /// Held from a subject's count to its new session's binding, so concurrent `initialize`s
    /// cannot overshoot the share.
    opening: Arc<tokio::sync::Mutex<()>>,
}

/// Above this many remembered versions, those of sessions rmcp has reaped are forgotten.
const VERSIONS_KEPT: usize = 256;

impl Hygiene {
    fn version_of(&self, session: &str) -> Option<String> {
        self.versions.lock().unwrap_or_else(PoisonError::into_inner).get(session).cloned()
    }

    async fn remember(&self, session: String, version: String) {
        self.keep(&self.versions, session, version).await;
    }

    fn forget(&self, session: &str) {
        self.versions.lock().unwrap_or_else(PoisonError::into_inner).remove(session);
        self.owners.lock().unwrap_or_else(PoisonError::into_inner).remove(session);
    }

    /// Records `subject` as the owner of the new `session` (G10).
    async fn bind(&self, session: String, subject: Arc<str>) {
        self.keep(&self.owners, session, subject).await;
    }

    /// Records `value` for `session` in `map`; once more than [`VERSIONS_KEPT`] sessions are
    /// remembered there, forgets those rmcp has reaped. Versions and owners are kept alike.
    async fn keep<V>(&self, map: &Mutex<HashMap<String, V>>, session: String, value: V) {
        let known: Vec<String> = {
            let mut entries = map.lock().unwrap_or_else(PoisonError::into_inner);
            entries.insert(session, value);
            if entries.len() <= VERSIONS_KEPT {
                return;
            }
            entries.keys().cloned().collect()
        };
        let mut gone = Vec::new();
        for session in known {
            if let Ok(false) = self.sessions.has_session(&session.clone().into()).await {
                gone.push(session);
            }
        }
        let mut entries = map.lock().unwrap_or_else(PoisonError::into_inner);
        for session in gone {
            entries.remove(&session);
        }
    }

    /// The transport sessions `subject` holds now (those rmcp has not reaped).
    async fn held_by(&self, subject: &str) -> usize {
        let theirs: Vec<String> = {
            let owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
            owners.iter().filter(|(_, owner)| &***owner == subject).map(|(session, _)| session.clone()).collect()
        };
        let mut held = 0;
        for session in theirs {
            if !matches!(self.sessions.has_session(&session.into()).await, Ok(false)) {
                held += 1;
            }
        }
        held
    }

    /// Whether `subject` may use `session`: it opened it, or nobody is recorded (then rmcp
    /// decides, and it does not know the session).
    fn allows(&self, session: &str, subject: Option<&str>) -> bool {
        match self.owners.lock().unwrap_or_else(PoisonError::into_inner).get(session) {
            Some(owner) => subject == Some(&**owner),
            None => true,
        }
    }
}

/// The subject the guard identified for `request`.
fn subject_of(request: &Request) -> Option<Arc<str>> {
    request.extensions().get::<Caller>().map(Caller::subject_arc)
}

/// The fixes in front of rmcp described in the module documentation.
async fn hygiene(State(state): State<Hygiene>, request: Request, next: Next) -> Response {
    let session = header(request.headers(), "mcp-session-id");
    let subject = subject_of(&request);
    if let Some(session) = &session
        && !state.allows(session, subject.as_deref())
    {
        tracing::info!(subject = ?subject, "refused another subject's MCP transport session");
        return ApiError::refused(TransportCode::NotFound, format!("no MCP session {session}")).into_response();
    }
    if request.method() == Method::DELETE {
        return delete(&state, request, next).await;
    }
    let (request, version, initialize) = match session.as_deref().and_then(|session| state.version_of(session)) {
        Some(version) => (request, version, false),
        None => match protocol_version(request).await {
            Ok(read) => read,
            Err(refusal) => return refusal.into_response(),
        },
    };
    let opened = session.is_none();
    // An `initialize` outside a session opens one: within the subject's share (G11).
    let _opening = match (&subject, opened && initialize) {
        (Some(subject), true) => {
            let opening = state.opening.clone().lock_owned().await;
            let held = state.held_by(subject).await;
            if held >= state.per_subject {
                tracing::info!(%subject, held, "refused an MCP transport session: the subject's share is taken");
                let message = format!(
                    "this caller holds {held} MCP transport sessions, its share (--max-mcp-sessions-per-subject): close \
                     one (HTTP DELETE with its Mcp-Session-Id), wait for idle ones to expire, or use protocol version \
                     2026-07-28, which needs none"
                );
                return ApiError::refused(TransportCode::TooManyMcpSessions, message).into_response();
            }
            Some(opening)
        }
        _ => None,
    };
    let response = next.run(request).await;
    if opened
        && let Some(new) = header(response.headers(), "mcp-session-id")
        && let Some(subject) = subject
    {
        state.bind(new, subject).await;
    }
    if initialize && let Some(session) = header(response.headers(), "mcp-session-id") {
        state.remember(session, version.clone()).await;
    }
    if version.as_str() >= PRIMING_SINCE || !is_event_stream(response.headers()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, Body::from_stream(without_priming(body.into_data_stream())))
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|value| value.to_str().ok()).map(str::to_owned)
}

async fn delete(state: &Hygiene, request: Request, next: Next) -> Response {
    let session = header(request.headers(), "mcp-session-id");
    if let Some(session) = &session {
        // The local manager's lookup cannot fail; if it did, rmcp decides as before.
        if let Ok(false) = state.sessions.has_session(&session.clone().into()).await {
            return ApiError::refused(TransportCode::NotFound, format!("no MCP session {session}")).into_response();
        }
    }
    let mut response = next.run(request).await;
    if response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    if let Some(session) = session.filter(|_| response.status().is_success()) {
        state.forget(&session);
    }
    response
}

/// The protocol version of a request outside a known session, the request (its body read when
/// that was needed to tell), and whether it is an `initialize`.
async fn protocol_version(request: Request) -> Result<(Request, String, bool), ApiError> {
    if let Some(version) = header(request.headers(), "mcp-protocol-version") {
        return Ok((request, version, false));
    }
    if request.method() != Method::POST {
        return Ok((request, NO_HEADER_VERSION.to_owned(), false));
    }
    let (parts, body) = request.into_parts();
    // The body limit of the whole listener applies here too (413 above it).
    let bytes = Bytes::from_request(Request::from_parts(parts.clone(), body), &()).await?;
    let (version, initialize) = match initialize_version(&bytes) {
        Some(version) => (version, true),
        None => (NO_HEADER_VERSION.to_owned(), false),
    };
    Ok((Request::from_parts(parts, Body::from(bytes)), version, initialize))
}

/// The version an `initialize` request will negotiate: the one it asks for when rmcp knows it,
/// else rmcp's fallback, the newest version with `initialize`. `None` for other messages.
fn initialize_version(body: &[u8]) -> Option<String> {
    let message: serde_json::Value = serde_json::from_slice(body).ok()?;
    if message.get("method")?.as_str()? != "initialize" {
        return None;
    }
    let asked = message.pointer("/params/protocolVersion").and_then(serde_json::Value::as_str).unwrap_or_default();
    let known = ProtocolVersion::KNOWN_VERSIONS.iter().any(|version| version.as_str() == asked);
    Some(if known { asked.to_owned() } else { ProtocolVersion::LATEST_WITH_INITIALIZE.as_str().to_owned() })
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}

/// The stream without its first event when that is a priming event (an id or `retry`, and no
/// data); everything after the first event passes untouched.
fn without_priming<E>(
    body: impl Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static
where
    E: Send + 'static,
{
    // The first event is held until it is complete (rmcp writes it in one frame anyway).
    futures::stream::unfold((body, Some(Vec::new())), |(mut body, mut first)| async move {
        let Some(held) = first.as_mut() else {
            let chunk = body.next().await?;
            return Some((chunk, (body, None)));
        };
        loop {
            match body.next().await {
                Some(Ok(chunk)) => {
                    held.extend_from_slice(&chunk);
                    let Some(end) = event_end(held) else { continue };
                    let mut held = std::mem::take(held);
                    let out = if is_priming(&held[..end]) { held.split_off(end) } else { held };
                    return Some((Ok(Bytes::from(out)), (body, None)));
                }
                Some(Err(error)) => return Some((Err(error), (body, None))),
                // The stream ended inside the first event: pass on what there was.
                None => {
                    let held = std::mem::take(held);
                    return (!held.is_empty()).then(|| (Ok(Bytes::from(held)), (body, None)));
                }
            }
        }
    })
}

/// Where the first event of `buffer` ends (after its blank line), if it is complete.
fn event_end(buffer: &[u8]) -> Option<usize> {
    let lf = buffer.windows(2).position(|pair| pair == b"\n\n").map(|at| at + 2);
    let crlf = buffer.windows(4).position(|quad| quad == b"\r\n\r\n").map(|at| at + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// An SSE event that carries an id or a retry interval and only empty data.
fn is_priming(event: &[u8]) -> bool {
    let text = String::from_utf8_lossy(event);
    let mut marks = false;
    for line in text.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        match field {
            "id" | "retry" => marks = true,
            "data" if !value.trim().is_empty() => return false,
            _ => {}
        }
    }
    marks
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn filtered(chunks: &[&str]) -> String {
        let chunks: Vec<Result<Bytes, std::convert::Infallible>> =
            chunks.iter().map(|chunk| Ok(Bytes::from(chunk.to_string()))).collect();
        let out: Vec<_> = without_priming(futures::stream::iter(chunks)).collect().await;
        out.into_iter().map(|chunk| String::from_utf8(chunk.unwrap().to_vec()).unwrap()).collect()
    }

    #[tokio::test]
    async fn only_a_leading_priming_event_is_dropped() {
        let message = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\nid: 1\n\n";
        assert_eq!(filtered(&["data: \nid: 0\nretry: 3000\n\n", message]).await, message);
        assert_eq!(
            filtered(&["data:\nid: 0/1\nretry: 3000\n\n", message, ": ping\n\n"]).await,
            [message, ": ping\n\n"].concat()
        );
        // Split over frames, and followed by more in the same frame.
        assert_eq!(filtered(&["data: \nid: 0\n", "retry: 3000\n\n", message]).await, message);
        assert_eq!(filtered(&[&format!("retry: 3000\n\n{message}")]).await, message);
        // Not a priming event: kept as it is.
        assert_eq!(filtered(&[message, "data: \nid: 0\n\n"]).await, [message, "data: \nid: 0\n\n"].concat());
        assert_eq!(filtered(&[": ping\n\n", message]).await, [": ping\n\n", message].concat());
        assert_eq!(filtered(&["data: \nid: 0"]).await, "data: \nid: 0");
    }

    #[test]
    fn initialize_negotiates_what_it_asks_for_when_known() {
        let init = |version: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}"}}}}"#
            )
        };
        assert_eq!(initialize_version(init("2025-03-26").as_bytes()).as_deref(), Some("2025-03-26"));
        assert_eq!(initialize_version(init("2099-01-01").as_bytes()).as_deref(), Some("2025-11-25"));
        assert_eq!(initialize_version(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), None);
        assert_eq!(initialize_version(b"not json"), None);
    }
}
