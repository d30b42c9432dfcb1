//! The composition root: the one place that assembles deputy's parts and runs the process's
//! lifecycle.
//!
//! `serve` reads top to bottom as the life of a server: load the [`AppState`] once, build the
//! [`LiveSessionService`] over it, install the signal handlers on the root
//! [`CancellationToken`], run one surface (MCP over stdio, or the HTTP listener) until the
//! client leaves or a signal arrives, drain the running turns within the drain timeout, and
//! stop the idle external MCP servers. The surfaces below only translate; the command line
//! above only turns flags into these calls.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use crate::caller::Caller;
use crate::config::{AppState, Environment, Settings};
use crate::mcp_transport::BoxedTransport;
use crate::policy;
use crate::session::{LiveSessionService, PerCaller, ScopedService, SessionService};
use crate::store::persistence_disabled;
use crate::surfaces::http::{self, HttpConfig};
use crate::surfaces::mcp::McpServer;
use crate::tools::mcp::McpFactory;

/// Where `serve` answers.
#[derive(Debug, Clone)]
pub enum Surface {
    /// MCP over stdin/stdout: the command an MCP client launches.
    Stdio,
    /// MCP streamable HTTP, REST and JSON-RPC on one listener (boxed: the other variants are
    /// empty).
    Http(Box<HttpConfig>),
    /// JSON-RPC over stdin/stdout (`serve --rpc`), with `session/event` notifications.
    Rpc,
}

/// Serves `surface` until the stdio client closes stdin or SIGINT/SIGTERM arrives, then gives
/// running turns `drain_timeout` to finish (interrupting the rest) and stops the idle external
/// MCP servers; the active ones go with their sessions at exit.
pub async fn serve(settings: &Settings, surface: Surface, drain_timeout: Duration) -> anyhow::Result<()> {
    let state = load(settings)?;
    let surface = match surface {
        Surface::Http(mut config) => {
            config.tokens.extend(state.tokens.iter().cloned());
            Surface::Http(config)
        }
        Surface::Stdio => Surface::Stdio,
        Surface::Rpc => Surface::Rpc,
    };
    let (service, mcp_servers) = long_running_service(state, Contexts::Server).await?;
    let shutdown = CancellationToken::new();
    // Installed before serving: rmcp's `serve` only returns after the client's first message.
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    match serve_surface(service.clone(), surface, shutdown).await {
        Ok(()) => {
            drain_and_stop(&service, &mcp_servers, drain_timeout).await;
            Ok(())
        }
        Err(err) => {
            mcp_servers.shutdown();
            Err(err)
        }
    }
}

/// Whose configuration and credentials the sessions of a long-running process run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contexts {
    /// The server's own (`serve`): every caller's sessions run with the operator's setup.
    Server,
    /// Each attached client's (the background server): a session runs with the context of
    /// the client that last drove it, never the server's own, which is its first client's.
    PerClient,
}

/// The service of a process that serves until stopped (`serve`, the background server): its
/// live set bounded by the state's session limits, with the idle reaper running. Also the MCP
/// server pool, which [`drain_and_stop`] stops at the end.
pub async fn long_running_service(
    state: AppState,
    contexts: Contexts,
) -> anyhow::Result<(Arc<LiveSessionService>, Arc<McpFactory>)> {
    let store = state.store.clone();
    let service = LiveSessionService::new(state.factory, state.store);
    let service = match contexts {
        Contexts::Server => service,
        Contexts::PerClient => service.without_server_context(),
    };
    let service = service
        .with_memory(state.memory)
        .with_limits(state.limits)
        .with_inbox_limits(state.inbox)
        .with_delegation(state.delegation)
        .with_remote_peers(state.remote)
        .with_owners(owners(&state.tokens))
        .with_lease_ttl(state.lease_ttl)
        .with_webhooks(state.webhooks.clone())
        .into_shared();
    service.start_idle_reaper();
    service.start_replica_signals();
    if let (Some(webhooks), Some(store)) = (&state.webhooks, store) {
        // Before the first request: a new webhook starts after everything already stored.
        webhooks.start(store, service.leasing().clone()).await.context("starting the webhooks' deliveries")?;
        tracing::info!(webhooks = webhooks.len(), "delivering webhooks");
    }
    // Collections are brought up to their files now, not at the first search.
    let documents = service.factory().documents().clone();
    if !documents.is_empty() {
        tokio::task::spawn_blocking(move || {
            if let Err(error) = documents.index(None) {
                tracing::warn!("indexing the document collections failed: {error}");
            }
        });
    }
    if let Some(dir) = state.projection {
        tracing::info!(dir = %dir.display(), "projecting sessions' journals");
        crate::session::projection::spawn_live(service.clone(), crate::session::projection::Projector::new(dir));
    }
    Ok((service, state.mcp))
}

/// The end of such a process: running turns get `drain_timeout` to finish (the rest are
/// interrupted), then the idle external MCP servers stop; the active ones go with their
/// sessions at exit.
pub async fn drain_and_stop(service: &LiveSessionService, mcp_servers: &McpFactory, drain_timeout: Duration) {
    tracing::info!(timeout_secs = drain_timeout.as_secs(), "draining running turns");
    service.drain(drain_timeout).await;
    mcp_servers.shutdown();
}

/// The service for one command-line turn (`deputy run`), stored if the build and settings
/// have a store, in memory otherwise.
pub fn live_service(settings: &Settings) -> anyhow::Result<Arc<LiveSessionService>> {
    let state = load(settings)?;
    Ok(LiveSessionService::new(state.factory, state.store)
        .with_memory(state.memory)
        .with_inbox_limits(state.inbox)
        .with_delegation(state.delegation)
        .with_remote_peers(state.remote)
        .with_owners(owners(&state.tokens))
        .with_lease_ttl(state.lease_ttl)
        .into_shared())
}

/// The service for commands that only make sense on stored sessions (`deputy turn`, `deputy
/// sessions`): without a store it is `SESSION_PERSISTENCE_DISABLED`, naming `operation`
/// (a row of the capability matrix).
pub fn stored_service(settings: &Settings, operation: &str) -> anyhow::Result<Arc<LiveSessionService>> {
    let state = load(settings)?;
    if state.store.is_none() {
        return Err(persistence_disabled(operation).into());
    }
    Ok(LiveSessionService::new(state.factory, state.store)
        .with_memory(state.memory)
        .with_inbox_limits(state.inbox)
        .with_delegation(state.delegation)
        .with_remote_peers(state.remote)
        .with_owners(owners(&state.tokens))
        .with_lease_ttl(state.lease_ttl)
        .into_shared())
}

/// The owners of stored sessions as the token table has them now (security review G5).
fn owners(tokens: &[crate::config::AccessToken]) -> crate::policy::Owners {
    crate::policy::Owners::new(tokens.iter().map(|token| (token.subject.as_str(), token.scopes.as_slice())))
}

/// Fires `token` on the first SIGINT (Ctrl-C) or SIGTERM. `serve` stops on it; a command-line
/// turn uses a token of its own to interrupt the turn.
///
/// The signals are listened for from the moment this is called, not from the returned future's
/// first poll: callers spawn it, and a spawned task may not run before the turn it guards has
/// started. A signal arriving in that gap killed the process (the default action), or, while
/// Tokio was still subscribing the new listener, was lost: the command then waited for a turn
/// nobody interrupted. Must be called on a runtime.
pub fn cancel_on_signal(token: CancellationToken) -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let (mut interrupt, mut terminate) = {
        use tokio::signal::unix::{SignalKind, signal};
        (signal(SignalKind::interrupt()).ok(), signal(SignalKind::terminate()).ok())
    };
    async move {
        #[cfg(unix)]
        tokio::select! {
            () = next_signal(&mut interrupt) => {}
            () = next_signal(&mut terminate) => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    }
}

/// The next delivery of `signal`; never, when it could not be listened for.
#[cfg(unix)]
async fn next_signal(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        // `recv` gives `None` only when the runtime shuts down, which stops everything anyway.
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Reads the config file and environment and opens the store. Blocking file I/O on an async
/// worker, which is harmless here: it happens once, before anything else runs.
fn load(settings: &Settings) -> anyhow::Result<AppState> {
    AppState::load(settings, &Environment::from_process())
}

/// Runs one surface until it ends; an error means it never served (bad address, failed
/// handshake), so there is nothing to drain.
async fn serve_surface(
    service: Arc<LiveSessionService>,
    surface: Surface,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    match surface {
        // Each request is its caller's: the guard says who, the policy's HTTP defaults apply.
        Surface::Http(config) => {
            http::serve(Arc::new(PerCaller::new(service, policy::Surface::Http)), *config, shutdown).await
        }
        // The one caller is the user's own client.
        Surface::Stdio => {
            let factory = service.factory();
            serve_stdio(Arc::new(ScopedService::local(service, factory)), shutdown).await
        }
        Surface::Rpc => {
            let factory = service.factory();
            crate::surfaces::rpc_stdio::serve(ScopedService::local(service, factory), shutdown).await
        }
    }
}

async fn serve_stdio(service: Arc<ScopedService>, shutdown: CancellationToken) -> anyhow::Result<()> {
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving MCP over stdio");
    let served = McpServer::new(service, Caller::local())
        .serve_with_ct(BoxedTransport::new(rmcp::transport::stdio_pipes()), shutdown.clone())
        .await;
    match served {
        Ok(running) => {
            let reason = running.waiting().await.context("MCP service")?;
            tracing::info!(?reason, "MCP connection ended");
        }
        Err(err) if shutdown.is_cancelled() => tracing::info!("stopped before the client connected: {err}"),
        Err(err) => return Err(err).context("MCP handshake"),
    }
    Ok(())
}
