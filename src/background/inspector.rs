//! `deputy ui`: where the session inspector of a store is. The store's owner is asked; when it
//! serves HTTP (`serve --http`) its `/ui` is the answer. When nothing owns the store, a
//! `deputy serve --http` on a free loopback port is started for it, detached, with a fresh
//! token of the local user (every session of the store is the user's own), and keeps serving
//! the store's socket, so `deputy serve` clients attach to it and `deputy background stop`
//! stops it. A background server without HTTP (started by a stdio client) is left alone: the
//! answer says how to get an inspector instead.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::attach::{open_log, pass_defaults, status};
use super::location::Location;
use super::os::detach;
use crate::config::Settings;

/// How long a started server may take to answer on the store's socket.
const START_WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// Where the inspector is.
#[derive(Debug)]
pub struct Inspector {
    /// `http://ADDR/ui`.
    pub url: String,
    /// The token to enter, when `deputy ui` started the server (an owner started otherwise has
    /// the tokens its operator gave it).
    pub token: Option<String>,
    pub store: std::path::PathBuf,
}

/// Finds (or starts) the inspector of the store of `settings`.
pub fn open(settings: &Settings) -> anyhow::Result<Inspector> {
    let found = status(settings)?;
    let store = found.location.store.clone();
    match found.status {
        Some(status) => match status.http {
            Some(http) => Ok(Inspector { url: format!("{http}/ui"), token: None, store }),
            None => anyhow::bail!(
                "the background server of {} (pid {}) serves no HTTP, so it has no inspector: stop it \
                 (`deputy background stop`; its clients reconnect) and run `deputy ui` again, or serve the store \
                 with `deputy serve --http 127.0.0.1:8787`",
                store.display(),
                status.pid
            ),
        },
        None => start(&found.location, settings),
    }
}

/// Starts `deputy serve --http` on a free loopback port for the store, detached, logging to the
/// background server's log file; returns once it answers on the store's socket.
fn start(location: &Location, settings: &Settings) -> anyhow::Result<Inspector> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .context("finding a free loopback port")?
        .port();
    let mut secret = [0u8; 24];
    getrandom::fill(&mut secret).map_err(|error| anyhow::anyhow!("no randomness for a token: {error}"))?;
    let token: String = secret.iter().map(|byte| format!("{byte:02x}")).collect();
    let log = open_log(location)?;
    let exe = std::env::current_exe().context("finding the deputy executable")?;
    let mut command = std::process::Command::new(exe);
    // The user's own server, as if they ran `deputy serve --http` here: their environment
    // (provider keys included), their defaults.
    command
        .arg("serve")
        .arg("--http")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--store")
        .arg(&location.store)
        .env("DEPUTY_TOKEN", &token);
    pass_defaults(&mut command, settings)?;
    command.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    detach(&mut command);
    let mut child = command.spawn().context("starting deputy serve --http")?;
    let deadline = Instant::now() + START_WAIT;
    loop {
        if let Some(http) = status(settings)?.status.and_then(|status| status.http) {
            return Ok(Inspector { url: format!("{http}/ui"), token: Some(token), store: location.store.clone() });
        }
        if let Some(exit) = child.try_wait()? {
            anyhow::bail!("the server for the inspector exited with {exit}; see {}", location.log_file.display());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the server for the inspector did not answer in time; see {}",
                location.log_file.display()
            );
        }
        std::thread::sleep(POLL);
    }
}
