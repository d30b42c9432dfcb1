//! Where a command's operations run: in this process, over the store it opened, or in the
//! background server that owns the store (the one a stdio client such as Claude Code started).
//!
//! Every command speaks in operations of the table every surface shares ([`Operation`]) with
//! their wire params as JSON, so the two places answer the same: here through
//! [`Operation::run`] on the local service, there as the same JSON-RPC method over the server's
//! socket. Turns stream their events either way; stopping the command (Ctrl-C) interrupts its
//! turn either way: here through the turn's cancellation, there by closing the connection.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::EventSender;
use crate::background::attach::connect_rpc;
use crate::background::remote::RemoteOwner;
use crate::config::Settings;
use crate::error::SessionError;
use crate::server;
use crate::session::{LiveSessionService, TurnOptions};
use crate::store::StoreError;
use crate::surfaces::operation::Operation;

/// The process that runs a command's operations.
pub enum Owner {
    /// This one: the store was free (or there is none).
    Here(Arc<LiveSessionService>),
    /// The store's background server.
    Background(RemoteOwner),
}

/// How a turn a command starts is followed.
pub struct Following {
    pub events: EventSender,
    /// Fired by Ctrl-C: interrupts the turn.
    pub cancel: CancellationToken,
}

impl Owner {
    /// The owner for a command on `settings`' store: this process when it can open the store,
    /// else the background server that holds it. `stored`: the command needs a store (named
    /// `operation` in the error when there is none).
    pub fn open(settings: &Settings, operation: &str, stored: bool) -> anyhow::Result<Self> {
        let opened =
            if stored { server::stored_service(settings, operation) } else { server::live_service(settings) };
        match opened {
            Ok(service) => Ok(Self::Here(service)),
            Err(err) if matches!(err.downcast_ref::<StoreError>(), Some(StoreError::Locked(_))) => {
                match connect_rpc(settings)? {
                    Some(stream) => {
                        tracing::debug!("the store's background server runs this command");
                        Ok(Self::Background(RemoteOwner::new(stream)?))
                    }
                    // Held by a process with no socket (`serve --http`, `--no-daemon`).
                    None => Err(err),
                }
            }
            Err(err) => Err(err),
        }
    }

    /// The service of this process, when the operations run here.
    pub fn here(&self) -> Option<&Arc<LiveSessionService>> {
        match self {
            Self::Here(service) => Some(service),
            Self::Background(_) => None,
        }
    }

    /// Runs `operation` with its wire params `arguments`. A turn it starts is waited for to its
    /// end, its events going to `following`; without `following`, it waits as `wait_ms` says.
    pub async fn call(
        &self,
        operation: impl Into<Operation>,
        arguments: Value,
        following: Option<Following>,
    ) -> Result<Value, SessionError> {
        let operation = operation.into();
        match self {
            Self::Here(service) => {
                let options = |wait| match following {
                    Some(Following { events, cancel }) => {
                        (TurnOptions { wait: None, events: Some(events), cancel: Some(cancel) }, ())
                    }
                    None => (TurnOptions::waiting(wait), ()),
                };
                operation.run(operation.tool(), &**service, arguments, options).await
            }
            Self::Background(remote) => {
                let (events, cancel) = match following {
                    Some(Following { events, cancel }) => (Some(events), Some(cancel)),
                    None => (None, None),
                };
                let call = remote.call(operation.method(), arguments, events);
                tokio::pin!(call);
                let Some(cancel) = cancel else { return call.await };
                tokio::select! {
                    answer = &mut call => answer,
                    () = cancel.cancelled() => {
                        // The server interrupts the turns of a connection whose input closed,
                        // and still answers them: the turn ends `cancelled`, as it does here.
                        remote.close_input().await;
                        call.await
                    }
                }
            }
        }
    }

    /// [`Self::call`], its result as `T`.
    pub async fn call_as<T: DeserializeOwned>(
        &self,
        operation: impl Into<Operation>,
        arguments: Value,
        following: Option<Following>,
    ) -> Result<T, SessionError> {
        let operation = operation.into();
        let result = self.call(operation, arguments, following).await?;
        serde_json::from_value(result).map_err(|err| {
            SessionError::invalid(format!("{}: the answer is not what this deputy reads ({err})", operation.tool()))
        })
    }
}
