//! deputy over HTTP, on one listener (axum):
//!
//! - `/mcp`: MCP streamable HTTP (rmcp), the same tools as stdio ([`mcp`]);
//! - `/v1`: REST ([`rest`]); `/rpc`: JSON-RPC 2.0 ([`jsonrpc`]);
//! - `/healthz` (liveness, always open) and `/readyz` (the service answers, store included);
//! - `/metrics`: Prometheus metrics ([`metrics`]), for operators;
//! - `/ui`: the session inspector's page and files ([`inspector`]), which read through `/v1`.
//!
//! Every route but `/healthz` and the inspector's files passes the [`security`] guard: Host
//! and Origin allowlists against DNS rebinding, and the bearer token when one is configured.
//! Like every surface, the routes only translate to [`SessionService`] calls.

pub mod api_error;
pub mod follow;
pub mod inspector;
pub mod jsonrpc;
pub mod listener;
pub mod mcp;
pub mod mcp_sessions;
pub mod metrics;
pub mod openapi;
pub mod rest;
pub mod routes;
pub mod security;
pub mod shares;
pub mod streaming;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::StatusCode;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use self::api_error::ApiError;
use crate::caller::Caller;
use crate::config::AccessToken;
use crate::error::TransportCode;
use crate::session::{CallerServices, SessionService};
use crate::telemetry::caller_trace::{self, TraceParent};
use crate::telemetry::otlp;

/// How the HTTP surfaces are exposed.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub bind: SocketAddr,
    /// `--token`: accepted as `Authorization: Bearer …` for the local user, with every scope.
    pub token: Option<String>,
    /// The config file's `[[auth.tokens]]`: one subject and its scopes each. With any token
    /// (this or `token`), every route but `/healthz` requires one.
    pub tokens: Vec<AccessToken>,
    /// Accepted `Host` header names (without port). Default: loopback names.
    pub allowed_hosts: Vec<String>,
    /// Accepted `Origin` values (`scheme://host[:port]`, `*` as a port wildcard). A request
    /// without `Origin` (not from a browser) passes. Default: loopback origins, any port.
    pub allowed_origins: Vec<String>,
    /// Largest request body, in bytes (413 above it).
    pub max_body_bytes: usize,
    /// Connections served at once, and how long one may stay silent.
    pub limits: listener::ConnectionLimits,
    /// Legacy (2025-11-25) MCP transport sessions held at once.
    pub max_mcp_sessions: usize,
    /// Of those, what one subject (token) may hold, so one tenant cannot take them all (G11).
    pub max_mcp_sessions_per_subject: usize,
    /// `follow=true` event streams per subject, and how long each lasts.
    pub follows: follow::FollowLimits,
    /// Requests one subject may have in flight at once (G8).
    pub max_requests_per_subject: usize,
}

pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// What `serve --http` says of its listener, as plain data: the flags, before the config
/// file's tokens join them. A `serve --http` on a store whose background server runs hands
/// them to that server, which listens in its place.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct HttpFlags {
    pub bind: SocketAddr,
    pub token: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub max_connections: usize,
    pub header_read_timeout_secs: u64,
    pub max_mcp_sessions: usize,
    pub max_mcp_sessions_per_subject: usize,
    /// `None`: half of `max_connections`.
    pub max_requests_per_subject: Option<usize>,
    pub max_follows_per_subject: usize,
    pub max_follow_secs: u64,
}

/// Never prints the token.
impl std::fmt::Debug for HttpFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFlags").field("bind", &self.bind).field("token", &self.token.is_some()).finish()
    }
}

impl HttpFlags {
    /// The listener's configuration; the config file's `[[auth.tokens]]` are added by whoever
    /// read the file.
    pub fn config(self) -> HttpConfig {
        let mut config = HttpConfig::new(self.bind);
        config.token = self.token.filter(|token| !token.is_empty());
        config.allowed_hosts.extend(self.allowed_hosts);
        config.allowed_origins.extend(self.allowed_origins);
        config.max_body_bytes = self.max_body_bytes;
        config.limits.max_connections = self.max_connections;
        config.limits.header_read_timeout = std::time::Duration::from_secs(self.header_read_timeout_secs.max(1));
        config.max_mcp_sessions = self.max_mcp_sessions;
        config.max_mcp_sessions_per_subject = self.max_mcp_sessions_per_subject.max(1);
        config.max_requests_per_subject = self.max_requests_per_subject.unwrap_or(self.max_connections / 2).max(1);
        config.follows = follow::FollowLimits {
            per_subject: self.max_follows_per_subject.max(1),
            max_duration: std::time::Duration::from_secs(self.max_follow_secs.max(1)),
        };
        config
    }
}

impl HttpConfig {
    pub fn new(bind: SocketAddr) -> Self {
        Self {
            bind,
            token: None,
            tokens: Vec::new(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into(), "[::1]".into()],
            allowed_origins: vec![
                "http://localhost:*".into(),
                "http://127.0.0.1:*".into(),
                "http://[::1]:*".into(),
                "https://localhost:*".into(),
                "https://127.0.0.1:*".into(),
                "https://[::1]:*".into(),
            ],
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            limits: listener::ConnectionLimits::default(),
            max_mcp_sessions: mcp_sessions::DEFAULT_MAX_MCP_SESSIONS,
            max_mcp_sessions_per_subject: mcp_sessions::DEFAULT_MAX_MCP_SESSIONS_PER_SUBJECT,
            follows: follow::FollowLimits::default(),
            max_requests_per_subject: shares::DEFAULT_MAX_REQUESTS_PER_SUBJECT,
        }
    }

    /// Refuses what would expose sessions to the network unprotected.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !self.bind.ip().is_loopback() && self.token.is_none() && self.tokens.is_empty() {
            anyhow::bail!(
                "refusing to listen on {} without a token: anyone on the network could run agents. Set --token \
                 (or DEPUTY_TOKEN) or [[auth.tokens]] in the config file, or bind a loopback address such as \
                 127.0.0.1",
                self.bind
            );
        }
        // Presented tokens are trimmed, so spaces cannot count towards the length (F17).
        if self.token.as_deref().is_some_and(|token| token.trim().len() < 16) {
            anyhow::bail!("the token must be at least 16 characters");
        }
        Ok(())
    }
}

/// The whole HTTP surface as one router. Each request is served by the view of the caller the
/// guard identified ([`CallerServices::for_caller`]).
pub fn router<P: CallerServices>(services: Arc<P>, config: &HttpConfig, shutdown: CancellationToken) -> Router {
    let guarded = Router::new()
        .nest_service("/mcp", mcp::router(services.clone(), config, shutdown))
        .merge(rest::router())
        .merge(jsonrpc::router())
        .route("/readyz", get(readyz::<P>))
        .route("/metrics", get(metrics::scrape::<P>))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(services)
        .layer(Extension(Arc::new(follow::Follows::new(config.follows))))
        // Inside the guard, which identifies the caller whose share a request takes.
        .layer(axum::middleware::from_fn_with_state(
            shares::Shares::new(config.max_requests_per_subject),
            shares::limit_in_flight,
        ))
        .layer(axum::middleware::from_fn_with_state(Arc::new(security::Guard::new(config)), security::guard));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        // The inspector's files hold no data: no token needed (what the page reads needs one).
        .route("/ui", get(inspector::page))
        .route("/ui/", get(inspector::page))
        .route("/ui/{file}", get(inspector::file))
        .merge(guarded)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(axum::middleware::from_fn(request_span))
}

/// One span per request (request id, method, path, and the caller's subject once the guard
/// knows it), so every log line of a request can be told apart and attributed; the outcome is
/// logged at debug level. While traces are exported, a caller's `traceparent` is kept for the
/// turn the request may start: in the request's extensions (MCP handlers run in tasks of
/// their own) and around the rest of the request (REST and JSON-RPC).
async fn request_span(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let trace = otlp::enabled()
        .then(|| request.headers().get("traceparent")?.to_str().ok().and_then(TraceParent::parse))
        .flatten();
    if let Some(trace) = &trace {
        request.extensions_mut().insert(trace.clone());
    }
    let span = tracing::info_span!(
        "http",
        request_id = %uuid::Uuid::new_v4(),
        method = %request.method(),
        path = %request.uri().path(),
        subject = tracing::field::Empty
    );
    let started = std::time::Instant::now();
    let response =
        tracing::Instrument::instrument(caller_trace::within(trace, next.run(request)), span.clone()).await;
    span.in_scope(|| {
        tracing::debug!(
            status = response.status().as_u16(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "request done"
        )
    });
    response
}

/// Unknown paths answer the same error body as every other refusal.
async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::refused(
        TransportCode::NotFound,
        format!("no route {}: see /v1/openapi.json, /rpc and /mcp", uri.path()),
    )
}

async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::refused(TransportCode::MethodNotAllowed, format!("{method} is not allowed on {}", uri.path()))
}

/// Ready when the service is: O(1), one read transaction of the store when there is one (never
/// a walk of the sessions).
async fn readyz<P: CallerServices>(
    State(services): State<Arc<P>>,
    Extension(caller): Extension<Caller>,
) -> (StatusCode, &'static str) {
    match services.for_caller(&caller).ready().await {
        Ok(_) => (StatusCode::OK, "ready"),
        Err(error) => {
            tracing::warn!(code = %error.code(), "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "not ready")
        }
    }
}

/// Serves until `shutdown` fires, then stops accepting and lets the requests in flight finish.
/// Draining the running turns is the caller's part of shutdown ([`crate::server`]).
pub async fn serve<P: CallerServices>(
    services: Arc<P>,
    config: HttpConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = bind(&config).await?;
    serve_bound(services, config, listener, shutdown).await
}

/// The listener of `config`, once it is known to be safe to expose.
pub async fn bind(config: &HttpConfig) -> anyhow::Result<tokio::net::TcpListener> {
    config.validate()?;
    tokio::net::TcpListener::bind(config.bind).await.with_context(|| format!("listening on {}", config.bind))
}

/// [`serve`] on a listener [`bind`] gave.
pub async fn serve_bound<P: CallerServices>(
    services: Arc<P>,
    config: HttpConfig,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let address = listener.local_addr()?;
    let tokens = usize::from(config.token.is_some()) + config.tokens.len();
    tracing::info!(%address, tokens, "serving HTTP: /mcp, /v1, /rpc, /healthz, /readyz, /metrics");
    if tokens == 0 {
        tracing::warn!(
            %address,
            "no token configured: every local account can reach this listener; callers get their own sessions \
             only, without shell or inline MCP servers (set --token or [[auth.tokens]])"
        );
    }
    let app = router(services, &config, shutdown.child_token());
    listener::serve_connections(listener, app, config.limits, shutdown).await;
    tracing::info!("HTTP server stopped accepting");
    Ok(())
}
