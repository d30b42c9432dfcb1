//! The background server: owns one store, serves every attached client over MCP, and exits
//! when nobody needs it.
//!
//! It is `deputy background-server`, started detached by the first `deputy serve` that found
//! no server for its store. Opening the store elects it: of several servers started at once,
//! the one that gets redb's lock binds the socket (replacing a stale one: whoever left it no
//! longer holds the store), and the others exit with [`STORE_HELD_EXIT`]. Each connection
//! proves it comes from this user (peer credentials), says what it wants in one line, and an
//! attached client then gets the same [`McpServer`] as stdio, over a [`ScopedService`] built
//! with its own context. Only `notifications/cancelled` or `session_interrupt` interrupt a
//! turn: a client that goes away leaves its turns running, and any later client collects them.
//! A command on the store (`rpc`) gets deputy's JSON-RPC instead, and its turns end with its
//! connection; a `serve --http` on the store (`http`) gets an HTTP listener for as long as it
//! stays connected. With no connection open and no turn running for `idle_exit`, or on
//! SIGTERM/SIGINT or a stop request, it stops listening, drains like `serve` and exits. A
//! `serve --http` that owns its store serves the same socket ([`super::http_owner`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::frames::{Answer, ClientContext, Hello, MAX_FRAME_BYTES, PROTOCOL, Request, ServerStatus, encode};
use super::location::{Location, check_private_dir};
use super::os::current_uid;
use super::stdio_handover;
use crate::caller::Caller;
use crate::config::{AppState, Environment, Settings, agent_factory, load_config_file};
use crate::mcp_transport::BoxedTransport;
use crate::policy::Surface;
use crate::server::{Contexts, cancel_on_signal, drain_and_stop, long_running_service};
use crate::session::{LiveSessionService, PerCaller, ScopedService};
use crate::store::StoreError;
use crate::surfaces::mcp::McpServer;
use crate::tools::mcp::McpFactory;

/// The exit status of a background server that found its store held by another process: it
/// lost the election (or an HTTP or `--no-daemon` server owns the store).
pub const STORE_HELD_EXIT: u8 = 75;

/// How long a connection may take to send its first line.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How the background server runs.
#[derive(Debug, Clone)]
pub struct HostOptions {
    pub socket: std::path::PathBuf,
    /// Exit after this long with no connection and no running turn.
    pub idle_exit: Duration,
    /// What running turns get at shutdown, as for `serve`.
    pub drain_timeout: Duration,
}

/// How a background server ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostExit {
    /// It served and shut down cleanly.
    Served,
    /// Another process holds the store; nothing was started.
    StoreHeld,
}

/// What every connection task shares.
pub(super) struct Host {
    pub(super) service: Arc<LiveSessionService>,
    pub(super) mcp: Arc<McpFactory>,
    pub(super) location: Location,
    pub(super) uid: u32,
    /// Open connections, counted from `accept` until their task ends.
    pub(super) connections: AtomicUsize,
    /// Cancelled to stop the server (signal, stop request, idle).
    pub(super) shutdown: CancellationToken,
    /// `http://ADDR` when the process also serves HTTP (`serve --http`).
    pub(super) http: Option<String>,
}

/// Runs the background server for the store of `settings` until it is stopped or idle.
pub async fn run(settings: &Settings, options: HostOptions) -> anyhow::Result<HostExit> {
    let state = match AppState::load(settings, &Environment::from_process()) {
        Ok(state) => state,
        Err(err) if matches!(err.downcast_ref::<StoreError>(), Some(StoreError::Locked(_))) => {
            tracing::info!("the store is held by another deputy process; this background server is not needed");
            return Ok(HostExit::StoreHeld);
        }
        Err(err) => return Err(err),
    };
    let store = settings.store_file().context("a background server needs --store naming a file")?;
    let location = Location::from_socket(&store, &options.socket);
    let uid = current_uid();
    let listener = bind(&location, uid)?;
    let pid = std::process::id();
    std::fs::write(&location.pid_file, format!("{pid}\n"))
        .with_context(|| format!("writing {}", location.pid_file.display()))?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        pid,
        socket = %location.socket.display(),
        store = %store.display(),
        idle_exit_secs = options.idle_exit.as_secs(),
        "background server listening"
    );

    let (service, mcp) = long_running_service(state, Contexts::PerClient).await?;
    let host = Arc::new(Host {
        service,
        mcp,
        location,
        uid,
        connections: AtomicUsize::new(0),
        shutdown: CancellationToken::new(),
        http: None,
    });
    tokio::spawn(cancel_on_signal(host.shutdown.clone()));
    accept_until_stopped(&host, &listener, options.idle_exit).await;

    // Stop listening first, so the next client starts a new server rather than attaching to
    // one that is going away; the store lock still guards against two owners.
    drop(listener);
    remove_quietly(&host.location.socket);
    remove_quietly(&host.location.pid_file);
    host.shutdown.cancel();
    drain_and_stop(&host.service, &host.mcp, options.drain_timeout).await;
    tracing::info!("background server stopped");
    Ok(HostExit::Served)
}

/// Binds the socket, replacing a stale file (we hold the store, so its server is gone), with
/// mode 0600 inside the private directory.
pub(super) fn bind(location: &Location, uid: u32) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let dir = location.socket.parent().context("the socket path has no directory")?;
    check_private_dir(dir, uid)?;
    remove_quietly(&location.socket);
    let listener =
        UnixListener::bind(&location.socket).with_context(|| format!("binding {}", location.socket.display()))?;
    std::fs::set_permissions(&location.socket, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", location.socket.display()))?;
    Ok(listener)
}

pub(super) fn remove_quietly(path: &std::path::Path) {
    if let Err(err) = std::fs::remove_file(path)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), "could not remove: {err}");
    }
}

/// Accepts connections until a stop is asked for or the server has been idle for `idle_exit`.
pub(super) async fn accept_until_stopped(host: &Arc<Host>, listener: &UnixListener, idle_exit: Duration) {
    // The idle check is a cheap look at two counters; a quarter of the timeout keeps the exit
    // within 25% of it, and one second at most keeps long timeouts responsive.
    let tick = (idle_exit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut ticker = tokio::time::interval(tick);
    let mut idle_since = Some(Instant::now());
    loop {
        tokio::select! {
            () = host.shutdown.cancelled() => {
                tracing::info!("stop requested");
                return;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    host.connections.fetch_add(1, Ordering::AcqRel);
                    idle_since = None;
                    let host = host.clone();
                    tokio::spawn(async move {
                        serve_connection(&host, stream).await;
                        host.connections.fetch_sub(1, Ordering::AcqRel);
                    });
                }
                Err(err) => tracing::warn!("accept failed: {err}"),
            },
            _ = ticker.tick() => {
                let busy = host.connections.load(Ordering::Acquire) > 0 || host.service.running_turns() > 0;
                if busy {
                    idle_since = None;
                } else if idle_since.get_or_insert_with(Instant::now).elapsed() >= idle_exit {
                    tracing::info!(idle_exit_secs = idle_exit.as_secs(), "idle: no client and no running turn");
                    return;
                }
            }
        }
    }
}

/// One connection: check who it is, read what it wants, answer, and for an attach serve MCP
/// until the client goes away.
async fn serve_connection(host: &Host, stream: UnixStream) {
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == host.uid => {}
        Ok(cred) => {
            tracing::warn!(peer_uid = cred.uid(), peer_pid = ?cred.pid(), "refused a connection from another user");
            return;
        }
        Err(err) => {
            tracing::warn!("refused a connection without peer credentials: {err}");
            return;
        }
    }
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut reader)).await {
        Ok(Ok(hello)) => hello,
        Ok(Err(err)) => {
            tracing::debug!("a connection sent no usable first line: {err:#}");
            let _ = write.write_all(&encode(&Answer::refused(format!("{err:#}")))).await;
            return;
        }
        Err(_) => {
            tracing::debug!("a connection sent nothing within {HELLO_TIMEOUT:?}");
            return;
        }
    };
    if hello.deputy != PROTOCOL {
        let message = format!(
            "the background server for {} speaks protocol {PROTOCOL} (deputy {}), this client {} (deputy {}): stop the \
             server with `deputy background stop`, or run this client with --no-daemon",
            host.location.store.display(),
            env!("CARGO_PKG_VERSION"),
            hello.deputy,
            hello.version
        );
        let _ = write.write_all(&encode(&Answer::refused(message))).await;
        return;
    }
    match hello.request {
        Request::Status => {
            let _ = write.write_all(&encode(&Answer { status: Some(host.status()), ..Answer::ok() })).await;
        }
        Request::Stop => {
            tracing::info!("stop requested by a client");
            // The pid lets the client wait for the exit, which is when the store is free.
            let _ = write.write_all(&encode(&Answer { status: Some(host.status()), ..Answer::ok() })).await;
            host.shutdown.cancel();
            // Held open until the process exits: the client's EOF means "stopped".
            std::future::pending::<()>().await;
        }
        Request::Attach(context) => attach(host, context, hello.version, reader, write).await,
        Request::Rpc(context) => rpc(host, context, reader, write).await,
        Request::Http { context, flags } => http(host, context, flags, reader, write).await,
    }
}

impl Host {
    fn status(&self) -> ServerStatus {
        ServerStatus {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            store: self.location.store.clone(),
            log: self.location.log_file.clone(),
            connections: self.connections.load(Ordering::Acquire),
            running_turns: self.service.running_turns(),
            http: self.http.clone(),
        }
    }
}

async fn read_hello(reader: &mut BufReader<tokio::net::unix::OwnedReadHalf>) -> anyhow::Result<Hello> {
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_FRAME_BYTES).unwrap_or(u64::MAX);
    (&mut *reader).take(limit).read_until(b'\n', &mut line).await.context("reading the first line")?;
    if !line.ends_with(b"\n") {
        anyhow::bail!("the first line must be a JSON object ending in a newline, at most {MAX_FRAME_BYTES} bytes");
    }
    serde_json::from_slice(&line).context("the first line is not a deputy hello")
}

/// Serves MCP to an attached client with its own context until it disconnects (or the server
/// stops). Turns it started keep running either way. The client's stdin and stdout when it
/// hands them over ([`stdio_handover`]), else the socket, relayed.
async fn attach(
    host: &Host,
    context: ClientContext,
    version: String,
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut write: tokio::net::unix::OwnedWriteHalf,
) {
    let workspace = context.workspace.clone();
    let take_stdio = context.hand_over_stdio;
    let Some(service) = accept(host, context, take_stdio, &mut write).await else { return };
    tracing::info!(workspace = %workspace.display(), client_version = %version, take_stdio, "client attached");
    let server = McpServer::new(Arc::new(service), Caller::local()).interrupt_only_when_cancelled();
    let stop = host.shutdown.child_token();
    if !take_stdio {
        return serve_mcp(server, (reader, write), stop).await;
    }
    // Nothing follows the hello before our answer, so the reader holds nothing buffered.
    let socket = match reader.into_inner().reunite(write) {
        Ok(socket) => socket,
        Err(err) => return tracing::warn!("an attached client's socket: {err}"),
    };
    let stdio = match tokio::time::timeout(HELLO_TIMEOUT, stdio_handover::receive(&socket)).await {
        Ok(Ok(stdio)) => stdio,
        Ok(Err(err)) => return tracing::info!("a client did not hand its stdio over: {err}"),
        Err(_) => return tracing::info!("a client did not hand its stdio over within {HELLO_TIMEOUT:?}"),
    };
    // `serve` sends nothing more: the socket's end is that process's end, and its client's.
    let gone = stop.clone();
    let watch = tokio::spawn(async move {
        let mut socket = socket;
        let _ = socket.read(&mut [0u8; 1]).await;
        gone.cancel();
    });
    serve_mcp(server, stdio, stop).await;
    // Dropping the socket (after the client's pipes, above) lets `serve` exit.
    watch.abort();
}

async fn serve_mcp<T, E, A>(server: McpServer<ScopedService>, transport: T, stop: CancellationToken)
where
    T: rmcp::transport::IntoTransport<rmcp::RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match server.serve_with_ct(BoxedTransport::new(transport), stop).await {
        Ok(running) => match running.waiting().await {
            Ok(reason) => tracing::info!(?reason, "client detached"),
            Err(err) => tracing::warn!("client connection failed: {err}"),
        },
        Err(err) => tracing::info!("client left before the MCP handshake: {err}"),
    }
}

/// Serves deputy's JSON-RPC to a command with its own context until it disconnects (or the
/// server stops); a turn still running then is interrupted, as the command was stopped.
async fn rpc(
    host: &Host,
    context: ClientContext,
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut write: tokio::net::unix::OwnedWriteHalf,
) {
    let Some(service) = accept(host, context, false, &mut write).await else { return };
    tracing::debug!("command connected");
    let closing = crate::surfaces::rpc_stdio::OnClose::Interrupt;
    if let Err(err) =
        crate::surfaces::rpc_stdio::serve_on(service, reader, write, host.shutdown.child_token(), closing).await
    {
        tracing::info!("command connection failed: {err:#}");
    }
}

/// Listens on HTTP for a `serve --http` on this server's store, with its context, flags and
/// config file's tokens, until its connection closes (or the server stops): HTTP callers then
/// share the live sessions of every attached client. The tokens' subjects join the table that
/// decides whose resumed sessions may run (G5).
async fn http(
    host: &Host,
    context: ClientContext,
    flags: crate::surfaces::http::HttpFlags,
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut write: tokio::net::unix::OwnedWriteHalf,
) {
    let loaded = client_factory_and_tokens(context, host.mcp.clone());
    let (factory, tokens) = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            let _ = write.write_all(&encode(&Answer::refused(format!("{err:#}")))).await;
            return;
        }
    };
    let mut config = flags.config();
    config.tokens.extend(tokens);
    let listener = match crate::surfaces::http::bind(&config).await {
        Ok(listener) => listener,
        Err(err) => {
            let _ = write.write_all(&encode(&Answer::refused(format!("{err:#}")))).await;
            return;
        }
    };
    if write.write_all(&encode(&Answer::ok())).await.is_err() {
        return;
    }
    host.service.admit_owners(config.tokens.iter().map(|token| (token.subject.as_str(), token.scopes.as_slice())));
    let stop = host.shutdown.child_token();
    let closed = stop.clone();
    tokio::spawn(async move {
        // The command sends nothing more: its end of file (or its death) ends the listener.
        let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
        closed.cancel();
    });
    let services = Arc::new(PerCaller::with_factory(host.service.clone(), Arc::new(factory), Surface::Http));
    if let Err(err) = crate::surfaces::http::serve_bound(services, config, listener, stop).await {
        tracing::warn!("the HTTP listener failed: {err:#}");
    }
    drop(write);
}

/// The service of a client with `context`, once it is told it was accepted; `None` (and the
/// client told why) when its context does not load.
async fn accept(
    host: &Host,
    context: ClientContext,
    take_stdio: bool,
    write: &mut tokio::net::unix::OwnedWriteHalf,
) -> Option<ScopedService> {
    let workspace = context.workspace.clone();
    let factory = match client_factory(context, host.mcp.clone()) {
        Ok(factory) => factory,
        Err(err) => {
            tracing::info!(workspace = %workspace.display(), "refused a client: {err:#}");
            let _ = write.write_all(&encode(&Answer::refused(format!("{err:#}")))).await;
            return None;
        }
    };
    if write.write_all(&encode(&Answer { take_stdio, ..Answer::ok() })).await.is_err() {
        return None;
    }
    Some(ScopedService::local(host.service.clone(), Arc::new(factory)))
}

/// The agent factory of one client: its workspace, default model, config file and provider
/// variables, over the server's one MCP server pool.
fn client_factory(context: ClientContext, mcp: Arc<McpFactory>) -> anyhow::Result<crate::agent::AgentFactory> {
    Ok(client_factory_and_tokens(context, mcp)?.0)
}

/// [`client_factory`], and the tokens of the client's config file (`[[auth.tokens]]`).
fn client_factory_and_tokens(
    context: ClientContext,
    mcp: Arc<McpFactory>,
) -> anyhow::Result<(crate::agent::AgentFactory, Vec<crate::config::AccessToken>)> {
    let settings = Settings {
        model: context.model,
        config: context.config,
        workspace: Some(context.workspace),
        store: None,
        ephemeral: true,
        ..Settings::default()
    };
    let env = Environment::from_map(context.env);
    let config = load_config_file(&settings, &env)?;
    let tokens = config.auth.resolve(&env)?;
    Ok((agent_factory(&settings, &env, &config, mcp, None)?, tokens))
}
