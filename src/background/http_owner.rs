//! `deputy serve --http` that owns its store (no background server ran when it started): it
//! serves the store's socket too, as a background server would, so a stdio client (Claude Code)
//! attaches to it and the other commands on the store run in it instead of being refused.
//!
//! The process stays an HTTP server first: it never exits idle, its sessions' unattended
//! resumes run with the operator's context (`Contexts::Server`), and a `background stop` on
//! its store stops it as SIGTERM would. Where the socket cannot be had (a runtime directory
//! that is not private), it serves HTTP alone and says so.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::host::{Host, accept_until_stopped, bind, remove_quietly};
use super::location::{Location, canonical_store};
use super::os::current_uid;
use crate::config::{AppState, Environment, Settings};
use crate::policy::Surface;
use crate::server::{Contexts, cancel_on_signal, drain_and_stop, long_running_service};
use crate::session::PerCaller;
use crate::surfaces::http::{self, HttpConfig};

/// Serves HTTP with `config`, and the store's socket, until SIGINT/SIGTERM or a stop request;
/// then drains like `serve`.
pub async fn serve(settings: &Settings, mut config: HttpConfig, drain_timeout: Duration) -> anyhow::Result<()> {
    let env = Environment::from_process();
    let state = AppState::load(settings, &env)?;
    config.tokens.extend(state.tokens.iter().cloned());
    let (service, mcp) = long_running_service(state, Contexts::Server).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let host = match socket_location(settings, &env) {
        Ok(location) => Some(Arc::new(Host {
            service: service.clone(),
            mcp: mcp.clone(),
            location,
            uid: current_uid(),
            connections: AtomicUsize::new(0),
            shutdown: shutdown.clone(),
            http: Some(local_url(config.bind)),
        })),
        Err(err) => {
            tracing::warn!("serving HTTP only: the store's socket is not available ({err:#})");
            None
        }
    };
    let socket = host.as_ref().and_then(|host| match bind(&host.location, host.uid) {
        Ok(listener) => {
            let _ = std::fs::write(&host.location.pid_file, format!("{}\n", std::process::id()));
            tracing::info!(socket = %host.location.socket.display(), "serving the store's socket to its other clients");
            let host = host.clone();
            // Never idle: the HTTP server decides when this process ends.
            Some(tokio::spawn(async move { accept_until_stopped(&host, &listener, Duration::MAX).await }))
        }
        Err(err) => {
            tracing::warn!("serving HTTP only: the store's socket is not available ({err:#})");
            None
        }
    });
    let served =
        http::serve(Arc::new(PerCaller::new(service.clone(), Surface::Http)), config, shutdown.clone()).await;
    shutdown.cancel();
    if let (Some(socket), Some(host)) = (socket, &host) {
        let _ = socket.await;
        remove_quietly(&host.location.socket);
        remove_quietly(&host.location.pid_file);
    }
    match served {
        Ok(()) => {
            drain_and_stop(&service, &mcp, drain_timeout).await;
            Ok(())
        }
        Err(err) => {
            mcp.shutdown();
            Err(err)
        }
    }
}

fn socket_location(settings: &Settings, env: &Environment) -> anyhow::Result<Location> {
    Location::for_store(&canonical_store(settings, env)?, env)
}

/// The URL a client on this host reaches `bind` at: an unspecified address (all interfaces)
/// is reached on loopback.
fn local_url(bind: std::net::SocketAddr) -> String {
    let ip = match bind.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", std::net::SocketAddr::new(ip, bind.port()))
}
