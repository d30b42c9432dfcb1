//! The accept loop: HTTP/1.1 and HTTP/2 connections served by hyper, bounded before any byte
//! of a request reaches the router (security review F5).
//!
//! - **A connection cap, and a fast answer beyond it.** A semaphore permit is taken *before*
//!   `accept`, and the connection's task holds it to the end. At the cap, up to
//!   [`MAX_REFUSALS`] more connections are accepted only to be answered `503 Service
//!   Unavailable` (`OVERLOADED`, `Retry-After: 1`) and closed, each within
//!   [`REFUSAL_DEADLINE`]: a burst learns at once to come back, instead of waiting in the
//!   backlog behind keep-alive connections until its own client gives up. Beyond those, new
//!   connections wait in the kernel's backlog: both bounds stay bounds.
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
use axum::response::IntoResponse;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::telemetry::metrics::metrics;

/// Connections served at once, by default; the rest wait to be accepted.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// How long a connection may take to send a request's header, or stay idle between requests.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections answered `503` at once while every permit is taken, at most; beyond, new
/// connections wait in the kernel's backlog.
pub const MAX_REFUSALS: usize = 256;
/// How long a refused connection may take to send its request and read the answer.
pub const REFUSAL_DEADLINE: Duration = Duration::from_secs(5);
/// Bytes of a refused request's body read before the answer (the rest is not waited for).
const REFUSAL_READ_BYTES: usize = 64 * 1024;
/// What a refused client is told to wait before it tries again.
const RETRY_AFTER_SECS: u64 = 1;

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
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    raise_descriptor_limit(limits.max_connections.saturating_add(MAX_REFUSALS));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout);
    loop {
        let slot = tokio::select! {
            slot = next_slot(&permits, &refusals) => match slot {
                Some(slot) => slot,
                None => break,
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
        // A permit freed while this connection was accepted serves it after all.
        let permit = match slot {
            Slot::Serve(permit) => permit,
            Slot::Refuse(refusal) => match permits.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    tokio::spawn(refuse(stream, refusal, shutdown.clone()));
                    continue;
                }
            },
        };
        // The router takes hyper's request bodies as they are.
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _counted = Counted::open();
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

/// A connection as `deputy_http_connections` counts it: from its task's start to its end.
struct Counted;

impl Counted {
    fn open() -> Self {
        metrics().connection_opened();
        Self
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        metrics().connection_closed();
    }
}

/// What the accept loop holds for the next connection: a place among those served, or one
/// among those refused.
enum Slot {
    Serve(OwnedSemaphorePermit),
    Refuse(OwnedSemaphorePermit),
}

/// A place to serve the next connection if there is one, else a place to refuse it, else waits
/// for either (`None`: the semaphores are closed).
async fn next_slot(permits: &Arc<Semaphore>, refusals: &Arc<Semaphore>) -> Option<Slot> {
    if let Ok(permit) = permits.clone().try_acquire_owned() {
        return Some(Slot::Serve(permit));
    }
    tokio::select! {
        biased;
        permit = permits.clone().acquire_owned() => permit.ok().map(Slot::Serve),
        refusal = refusals.clone().acquire_owned() => refusal.ok().map(Slot::Refuse),
    }
}

/// Answers every request of a connection accepted beyond the cap with `503 OVERLOADED` and
/// `Retry-After`, then closes it; HTTP/1 or HTTP/2 alike, within [`REFUSAL_DEADLINE`].
async fn refuse(stream: tokio::net::TcpStream, refusal: OwnedSemaphorePermit, shutdown: CancellationToken) {
    let _refusal = refusal;
    let service = hyper::service::service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
        // The request is read (a little of it, at most) before the answer: closing a socket
        // with unread bytes resets it, and the client would lose the answer with it.
        let version = request.version();
        let _ = axum::body::to_bytes(axum::body::Body::new(request.into_body()), REFUSAL_READ_BYTES).await;
        Ok::<_, std::convert::Infallible>(overloaded(version))
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(REFUSAL_DEADLINE).keep_alive(false);
    builder.http2().timer(TokioTimer::new());
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = tokio::time::timeout(REFUSAL_DEADLINE, connection) => {}
        () = shutdown.cancelled() => {}
    }
}

/// The answer of a connection beyond the cap. HTTP/1 is told the connection closes; HTTP/2
/// has no such header (it is a protocol error there), the connection's end says it.
fn overloaded(version: axum::http::Version) -> axum::response::Response {
    let message = format!(
        "this deputy serves as many connections as it may (--max-connections); try again in {RETRY_AFTER_SECS} s"
    );
    let mut response =
        super::api_error::ApiError::refused(crate::error::TransportCode::Overloaded, message).into_response();
    let headers = response.headers_mut();
    headers.insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(RETRY_AFTER_SECS));
    if version < axum::http::Version::HTTP_2 {
        headers.insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    response
}

/// Raises this process's soft limit of open files toward `needed` (plus room for the store,
/// the MCP servers' pipes and the provider connections), within the hard limit: the default
/// soft limit of many systems (1024) is below what `--max-connections` asks for, and a server
/// out of descriptors fails to accept instead of answering.
fn raise_descriptor_limit(needed: usize) {
    #[cfg(unix)]
    {
        let wanted = u64::try_from(needed).unwrap_or(u64::MAX).saturating_add(256);
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit and setrlimit only read and write the struct given.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= wanted as libc::rlim_t {
                return;
            }
            let raised =
                libc::rlimit { rlim_cur: (wanted as libc::rlim_t).min(limit.rlim_max), rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 || raised.rlim_cur < wanted as libc::rlim_t {
                tracing::warn!(
                    soft = raised.rlim_cur,
                    wanted,
                    "the open-files limit is below what --max-connections needs; raise it (ulimit -n) or lower the cap"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{Version, header};

    use super::*;

    #[test]
    fn a_refusal_says_when_to_come_back_and_closes_http_1_only_by_header() {
        let http1 = overloaded(Version::HTTP_11);
        assert_eq!(http1.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(http1.headers()[header::RETRY_AFTER], RETRY_AFTER_SECS.to_string().as_str());
        assert_eq!(http1.headers()[header::CONNECTION], "close");
        let http2 = overloaded(Version::HTTP_2);
        assert_eq!(http2.headers()[header::RETRY_AFTER], RETRY_AFTER_SECS.to_string().as_str());
        assert!(http2.headers().get(header::CONNECTION).is_none(), "no connection header in HTTP/2");
    }
}
