//! The accept loop: HTTP/1.1 and HTTP/2 connections served by hyper, bounded before any byte
//! of a request reaches the router (security review F5).
//!
//! - **A connection cap.** A semaphore permit is taken *before* `accept`, and the connection's
//!   task holds it to the end; at the cap, new connections wait in the kernel's backlog.
//! - **Silent connections are closed.** A connection must send its first byte, and then each
//!   request's whole header, within the header-read timeout; an idle keep-alive connection is
//!   closed after the same time. (axum's `serve` sets no timer, so hyper's timeout never ran,
//!   and the HTTP/1-or-2 sniffing of hyper-util's auto builder has no timeout of its own.)
//!   A request being answered is never timed out: long polls and SSE streams last as long as
//!   they need.
//! - **Graceful shutdown.** When `shutdown` fires, accepting stops, idle connections close,
//!   and the loop returns once the requests in flight have been answered.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Connections served at once, by default; the rest wait to be accepted.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// How long a connection may take to send a request's header, or stay idle between requests.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Bounds of the accept loop.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self { max_connections: DEFAULT_MAX_CONNECTIONS, header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT }
    }
}

/// Serves `app` on `listener` until `shutdown` fires, then waits for the requests in flight.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of file descriptors, most likely: wait a little rather than spin.
                    tracing::warn!("accepting a connection failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // The router takes hyper's request bodies as they are.
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            // The first byte, before hyper's own header timer can run (peeked, not consumed:
            // `readable` may wake without data).
            let mut first = [0u8; 1];
            let first_byte = tokio::select! {
                peeked = tokio::time::timeout(limits.header_read_timeout, stream.peek(&mut first)) => peeked,
                () = shutdown.cancelled() => return,
            };
            if !matches!(first_byte, Ok(Ok(1..))) {
                tracing::debug!("closing a connection that sent nothing");
                return;
            }
            let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
            if let Err(err) = watcher.watch(connection).await {
                tracing::debug!("connection ended: {err}");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
