//! The client side: `deputy serve` attached to its store's background server, and
//! `deputy background status|stop`.
//!
//! `deputy serve` connects to the store's socket, sends its context in the first line and, once
//! accepted, relays bytes: stdin to the socket and the socket to stdout, unchanged, so stdout
//! carries nothing but the server's MCP frames. When nothing answers it starts the server
//! itself (detached: its own session, stdin closed, output appended to the log beside the
//! store) and retries for a bounded time. Everything here is blocking I/O on plain threads: the
//! relay is two `copy` loops, and a thread blocked on stdin must not keep the process alive
//! once the server has closed the socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::frames::{Answer, ClientContext, Hello, MAX_FRAME_BYTES, PROTOCOL, Request, ServerStatus, encode};
use super::host::STORE_HELD_EXIT;
use super::location::{Location, canonical_store};
use super::os::{detach, process_alive};
use super::stdio_handover;
use crate::config::{ConfigFile, Environment, Settings, load_config_file, provider_variables};

/// How long `serve` waits for a server it started to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// After the server we started found the store held, how long we still try the socket: the
/// holder may be a server started at the same moment, about to listen.
const HELD_GRACE: Duration = Duration::from_secs(2);
/// How often a server is started again while the store is held.
const HELD_RETRY: Duration = Duration::from_millis(250);
/// How long `background stop` waits for the process to be gone once it closed the connection.
const EXIT_WAIT: Duration = Duration::from_secs(10);
/// Pause between connection attempts while a server starts.
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// What `deputy serve` passes to a background server it starts.
#[derive(Debug, Clone)]
pub struct StartOptions {
    pub idle_exit: Duration,
    pub drain_timeout: Duration,
    /// Bounds of the live set, when `serve` was given them.
    pub idle_unload_secs: Option<u64>,
    pub max_live_sessions: Option<u64>,
}

/// `deputy serve` over stdio through the store's background server, starting it if none
/// answers. Returns when the server closes the connection (after stdin's EOF, normally).
pub fn serve_attached(settings: &Settings, options: &StartOptions) -> anyhow::Result<()> {
    let env = Environment::from_process();
    let store = canonical_store(settings, &env)?;
    let location = Location::for_store(&store, &env)?;
    let context = ClientContext { hand_over_stdio: stdio_handover::possible(), ..client_context(settings, &env)? };
    let hello = Hello { deputy: PROTOCOL, version: version(), request: Request::Attach(context) };
    let (stream, answer) = connect_or_start(&location, settings, options, &hello)?;
    if !answer.ok {
        anyhow::bail!("{}", answer.error.unwrap_or_else(|| "the background server refused this client".to_owned()));
    }
    tracing::debug!(socket = %location.socket.display(), handed_over = answer.take_stdio, "attached to the background server");
    if answer.take_stdio {
        stdio_handover::send(&stream).context("handing stdin and stdout to the background server")?;
        return wait_until_closed(stream);
    }
    relay(stream)
}

/// After the handover: waits for the server to close the socket, which it does when the MCP
/// client has gone (its stdin's EOF) or the server stops. Exiting earlier would look to the
/// client like a server that died. The socket stays open both ways meanwhile: its EOF is how
/// the server learns that this process went.
fn wait_until_closed(mut stream: UnixStream) -> anyhow::Result<()> {
    std::io::copy(&mut stream, &mut std::io::sink()).context("waiting on the background server")?;
    Ok(())
}

/// A connection speaking deputy's JSON-RPC with the store's background server, for a command
/// on a store that server owns; `None` when no server answers on the store's socket. Never
/// starts one: a command that finds the store free opens it itself.
pub fn connect_rpc(settings: &Settings) -> anyhow::Result<Option<UnixStream>> {
    let env = Environment::from_process();
    let location = Location::for_store(&canonical_store(settings, &env)?, &env)?;
    let hello =
        Hello { deputy: PROTOCOL, version: version(), request: Request::Rpc(client_context(settings, &env)?) };
    match request(&location.socket, &hello)? {
        Some((stream, answer)) if answer.ok => Ok(Some(stream)),
        Some((_, answer)) => {
            anyhow::bail!(
                "{}",
                answer.error.unwrap_or_else(|| "the background server refused this command".to_owned())
            )
        }
        None => Ok(None),
    }
}

/// `serve --http` on a store whose background server runs: asks that server to listen with
/// `flags` (and this client's context) for as long as the returned connection stays open;
/// `None` when no server answers (this process then owns the store itself).
pub fn listen_through(
    settings: &Settings,
    flags: &crate::surfaces::http::HttpFlags,
) -> anyhow::Result<Option<UnixStream>> {
    let env = Environment::from_process();
    // No socket to be had (a runtime directory that is not private): no server to ask.
    let Ok(location) = Location::for_store(&canonical_store(settings, &env)?, &env) else { return Ok(None) };
    let context = client_context(settings, &env)?;
    let hello =
        Hello { deputy: PROTOCOL, version: version(), request: Request::Http { context, flags: flags.clone() } };
    match request(&location.socket, &hello)? {
        Some((stream, answer)) if answer.ok => {
            tracing::info!(
                address = %flags.bind,
                store = %location.store.display(),
                log = %location.log_file.display(),
                "the store's background server listens on HTTP for this command (until it is stopped)"
            );
            Ok(Some(stream))
        }
        Some((_, answer)) => {
            anyhow::bail!(
                "{}",
                answer.error.unwrap_or_else(|| "the background server refused to listen".to_owned())
            )
        }
        None => Ok(None),
    }
}

/// The variables that say where a client's configuration is (`$XDG_CONFIG_HOME`, else
/// `~/.config`): paths, not credentials, handed over so the server resolves the default
/// `[skills]` directory as this client would.
const CONFIG_HOME_VARIABLES: [&str; 2] = ["XDG_CONFIG_HOME", "HOME"];

/// This client's context, resolved here so that relative paths and the default config file
/// mean what they mean in this process.
fn client_context(settings: &Settings, env: &Environment) -> anyhow::Result<ClientContext> {
    let workspace = match &settings.workspace {
        Some(dir) => std::path::absolute(dir).with_context(|| format!("workspace {}", dir.display()))?,
        None => std::env::current_dir().context("current directory")?,
    };
    // Read here too: a broken file is this client's error, and it names the key variables.
    let config_file = load_config_file(settings, env)?;
    let config = match &settings.config {
        Some(path) => Some(std::path::absolute(path).with_context(|| format!("config file {}", path.display()))?),
        None => ConfigFile::default_path(env).filter(|path| path.is_file()),
    };
    // Where this client's configuration lives, too: the default skills directory is under it.
    let mut handed_over = provider_variables(&config_file);
    handed_over.extend(CONFIG_HOME_VARIABLES.map(str::to_owned));
    Ok(ClientContext {
        workspace,
        model: settings.model.clone(),
        config,
        env: env.subset(&handed_over),
        hand_over_stdio: false,
    })
}

/// Connects and sends `hello`; starts the server when nothing answers.
fn connect_or_start(
    location: &Location,
    settings: &Settings,
    options: &StartOptions,
    hello: &Hello,
) -> anyhow::Result<(UnixStream, Answer)> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut started: Option<(Child, Instant)> = None;
    let mut held_since: Option<Instant> = None;
    loop {
        if let Some(connected) = request(&location.socket, hello)? {
            return Ok(connected);
        }
        let start = match &mut started {
            None => true,
            Some((child, at)) => match child.try_wait() {
                // The store is held: by a server about to listen (it won the election), by one
                // still exiting, or by a process that serves no socket. Try again, now and then.
                Ok(Some(status)) if status.code() == Some(i32::from(STORE_HELD_EXIT)) => {
                    held_since.get_or_insert_with(Instant::now);
                    at.elapsed() >= HELD_RETRY
                }
                Ok(Some(status)) => anyhow::bail!(
                    "the background server for {} exited at start ({status}); its log is {}",
                    location.store.display(),
                    location.log_file.display()
                ),
                Ok(None) | Err(_) => false,
            },
        };
        if held_since.is_some_and(|since| since.elapsed() >= HELD_GRACE) {
            anyhow::bail!(
                "the session store {} is in use by a deputy process that serves no background socket (a `deputy serve \
                 --http` server, one started with --no-daemon, or a background server still shutting down): use that \
                 server's HTTP endpoint (/mcp), or run this one with --no-daemon and another --store (or --ephemeral)",
                location.store.display()
            );
        }
        if start {
            started = Some((start_server(location, settings, options)?, Instant::now()));
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "no background server answered on {} within {}s; its log is {} (or run with --no-daemon)",
                location.socket.display(),
                START_TIMEOUT.as_secs(),
                location.log_file.display()
            );
        }
        std::thread::sleep(RETRY_PAUSE);
    }
}

/// Sends one request line and reads the answer line. `None` when no server answers: no
/// socket, nobody listening, or a server that closed the connection without answering (one
/// that was just exiting idle).
fn request(socket: &Path, hello: &Hello) -> anyhow::Result<Option<(UnixStream, Answer)>> {
    let mut stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(err) if is_absent(&err) => return Ok(None),
        Err(err) => return Err(err).with_context(|| format!("connecting to {}", socket.display())),
    };
    if stream.write_all(&encode(hello)).is_err() {
        return Ok(None);
    }
    // Byte by byte, so nothing after the answer is consumed: the rest of the stream is MCP.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte) {
            Ok(0) => return Ok(None),
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) if line.len() >= MAX_FRAME_BYTES => anyhow::bail!("the background server's answer is too long"),
            Ok(_) => line.push(byte[0]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
            Err(err) => return Err(err).context("reading the background server's answer"),
        }
    }
    let answer = serde_json::from_slice(&line).context("the background server's answer is not JSON")?;
    Ok(Some((stream, answer)))
}

fn is_absent(err: &std::io::Error) -> bool {
    matches!(err.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused)
}

/// Starts `deputy background-server` for the store, detached, logging to the file beside it.
fn start_server(location: &Location, settings: &Settings, options: &StartOptions) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding the deputy executable")?;
    let log = open_log(location)?;
    let mut command = std::process::Command::new(exe);
    // Not this client's environment: the server serves every client of the store, each with
    // the provider variables it brings (G14). Only the machine's settings pass.
    command.env_clear().envs(std::env::vars_os().filter(|(name, _)| is_machine_setting(name)));
    command
        .arg("background-server")
        .arg("--store")
        .arg(&location.store)
        .arg("--socket")
        .arg(&location.socket)
        .arg("--idle-exit-secs")
        .arg(options.idle_exit.as_secs().to_string())
        .arg("--drain-timeout-secs")
        .arg(options.drain_timeout.as_secs().to_string());
    if let Some(secs) = options.idle_unload_secs {
        command.arg("--idle-unload-secs").arg(secs.to_string());
    }
    if let Some(max) = options.max_live_sessions {
        command.arg("--max-live-sessions").arg(max.to_string());
    }
    // The server's own defaults are the starting client's; each client brings its own anyway.
    pass_defaults(&mut command, settings)?;
    command.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    detach(&mut command);
    let child = command.spawn().context("starting the background server")?;
    tracing::debug!(pid = child.id(), log = %location.log_file.display(), "started a background server");
    Ok(child)
}

/// The log file beside the store, opened for appending (created private).
pub(super) fn open_log(location: &Location) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&location.log_file)
        .with_context(|| format!("opening the log {}", location.log_file.display()))
}

/// Gives a server started for a client the client's defaults (`--model`, `--config`,
/// `--workspace`, paths made absolute) and runs it from `/`, pinning no directory.
pub(super) fn pass_defaults(command: &mut std::process::Command, settings: &Settings) -> anyhow::Result<()> {
    if let Some(model) = &settings.model {
        command.arg("--model").arg(model);
    }
    if let Some(config) = &settings.config {
        command.arg("--config").arg(std::path::absolute(config)?);
    }
    let workspace = match &settings.workspace {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::current_dir()?,
    };
    command.arg("--workspace").arg(workspace).current_dir("/");
    Ok(())
}

/// The variables a background server keeps from the client that starts it: where things are
/// (paths, locale, time zone), how to reach the network, and logging. Never credentials or a
/// client's configuration: those arrive with each client ([`super::frames::ClientContext`]).
fn is_machine_setting(name: &std::ffi::OsStr) -> bool {
    const NAMES: [&str; 19] = [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "XDG_RUNTIME_DIR",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "RUST_LOG",
        "RUST_BACKTRACE",
        crate::sandbox::PRETEND_NO_LANDLOCK_ENV,
    ];
    let Some(name) = name.to_str() else { return false };
    NAMES.contains(&name)
        || name.starts_with("LC_")
        || matches!(name.to_ascii_uppercase().as_str(), "HTTP_PROXY" | "HTTPS_PROXY" | "ALL_PROXY" | "NO_PROXY")
}

/// Copies stdin to the socket and the socket to stdout until the server closes the socket.
fn relay(stream: UnixStream) -> anyhow::Result<()> {
    let mut upstream = stream.try_clone().context("cloning the socket")?;
    // Not joined: at the server's EOF the process exits, even with stdin still open.
    std::thread::spawn(move || {
        let _ = pump(&mut std::io::stdin().lock(), &mut upstream);
        // EOF on stdin: the server sees ours, answers what is in flight, then closes.
        let _ = upstream.shutdown(std::net::Shutdown::Write);
    });
    pump(&mut &stream, &mut std::io::stdout().lock()).context("relaying to stdout")
}

/// Writes every chunk on as soon as it is read, until EOF. A plain loop on purpose:
/// `std::io::copy` may hand a pipe-to-socket copy to `splice(2)`, which can hold the data of
/// an interactive peer back.
fn pump(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(read) => read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        to.write_all(&buffer[..read])?;
        to.flush()?;
    }
}

fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}

/// What `deputy background status` found.
#[derive(Debug)]
pub struct Found {
    pub location: Location,
    /// `None`: nothing answers on the socket.
    pub status: Option<ServerStatus>,
}

/// `deputy background status`: asks the store's server, if one answers.
pub fn status(settings: &Settings) -> anyhow::Result<Found> {
    let (location, answer) = control(settings, Request::Status)?;
    let status = match answer {
        Some((_, answer)) if answer.ok => answer.status,
        Some((_, answer)) => anyhow::bail!("{}", answer.error.unwrap_or_default()),
        None => None,
    };
    Ok(Found { location, status })
}

/// `deputy background stop`: asks the store's server to drain and exit, and waits until it
/// has. Returns the location and whether a server was running.
pub fn stop(settings: &Settings) -> anyhow::Result<(Location, bool)> {
    let (location, answer) = control(settings, Request::Stop)?;
    let Some((mut stream, answer)) = answer else { return Ok((location, false)) };
    if !answer.ok {
        anyhow::bail!("{}", answer.error.unwrap_or_default());
    }
    // The server holds the connection until it has drained; then the process exits, and with
    // it the store's lock, which is what a caller of `stop` may want next.
    let _ = std::io::copy(&mut stream, &mut std::io::sink());
    if let Some(pid) = answer.status.map(|status| status.pid) {
        let deadline = Instant::now() + EXIT_WAIT;
        while process_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(RETRY_PAUSE);
        }
    }
    Ok((location, true))
}

fn control(settings: &Settings, request: Request) -> anyhow::Result<(Location, Option<(UnixStream, Answer)>)> {
    let env = Environment::from_process();
    let location = Location::for_store(&canonical_store(settings, &env)?, &env)?;
    let answer = self::request(&location.socket, &Hello { deputy: PROTOCOL, version: version(), request })?;
    Ok((location, answer))
}

/// The pid a server recorded, if that process is still alive (for `status` when the socket
/// does not answer).
pub fn recorded_live_pid(location: &Location) -> Option<u32> {
    location.recorded_pid().filter(|pid| process_alive(*pid))
}
