//! Signals between the processes sharing a database (`store::lease::Signal`), over one
//! `LISTEN`/`NOTIFY` channel: `NOTIFY` rides on the pool's connections (inside the saving
//! transaction for `Changed`, so it is delivered at commit and never for a rolled-back save);
//! `LISTEN` holds one connection of its own, opened at the first subscriber and reopened if it
//! drops. A payload is `ORIGIN KIND SESSION`: each store names itself, and skips its own.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::ids::SessionId;
use crate::store::Signal;

/// The channel every deputy on a database listens on.
pub(super) const CHANNEL: &str = "deputy_signals";

/// Signals a slow subscriber may fall behind by before it misses some.
const BUFFER: usize = 1024;

/// `signal` as a payload from `origin`.
pub(super) fn payload(origin: &str, signal: &Signal) -> String {
    match signal {
        Signal::Interrupt { id, cascade: false } => format!("{origin} interrupt {id}"),
        Signal::Interrupt { id, cascade: true } => format!("{origin} interrupt-tree {id}"),
        Signal::Changed(id) => format!("{origin} changed {id}"),
        Signal::Mail(id) => format!("{origin} mail {id}"),
    }
}

/// A payload back as the signal and its origin; `None` for one this deputy does not know (a
/// newer replica's), which is skipped.
fn parse(payload: &str) -> Option<(&str, Signal)> {
    let mut parts = payload.splitn(3, ' ');
    let (origin, kind, id) = (parts.next()?, parts.next()?, parts.next()?);
    let id = SessionId::from_string(id.to_owned());
    let signal = match kind {
        "interrupt" => Signal::Interrupt { id, cascade: false },
        "interrupt-tree" => Signal::Interrupt { id, cascade: true },
        "changed" => Signal::Changed(id),
        "mail" => Signal::Mail(id),
        _ => return None,
    };
    Some((origin, signal))
}

/// The subscribers of one store, fed by one listening connection.
pub(super) struct Listener {
    sender: broadcast::Sender<Signal>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Starts listening on a connection of its own to `config`'s database.
    pub(super) fn start(config: tokio_postgres::Config, tls: MakeRustlsConnect, origin: Arc<str>) -> Self {
        let sender = broadcast::Sender::new(BUFFER);
        let task = tokio::spawn(listen(config, tls, origin, sender.clone()));
        Self { sender, task }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.sender.subscribe()
    }
}

/// Listens until aborted, reconnecting after a pause (1 s, doubling to 30 s) when the
/// connection fails. Signals sent while it was down are lost: followers catch up at their
/// next wake-up, and an interrupt is sent again by its caller.
async fn listen(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    origin: Arc<str>,
    sender: broadcast::Sender<Signal>,
) {
    let mut pause = Duration::from_secs(1);
    loop {
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                let statement = format!("LISTEN {CHANNEL}");
                let listening = client.batch_execute(&statement);
                tokio::pin!(listening);
                let mut listened = false;
                loop {
                    tokio::select! {
                        done = &mut listening, if !listened => {
                            if let Err(error) = done {
                                tracing::warn!("listening for other replicas' signals: {error}");
                                break;
                            }
                            listened = true;
                            pause = Duration::from_secs(1);
                            tracing::debug!("listening for other replicas' signals");
                        }
                        message = messages.next() => match message {
                            Some(Ok(AsyncMessage::Notification(note))) => {
                                if let Some((from, signal)) = parse(note.payload())
                                    && from != &*origin
                                {
                                    // Nobody subscribed is not an error.
                                    let _ = sender.send(signal);
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(error)) => {
                                tracing::warn!("the connection listening for other replicas' signals failed: {error}");
                                break;
                            }
                            None => {
                                tracing::warn!("the connection listening for other replicas' signals closed");
                                break;
                            }
                        }
                    }
                }
            }
            Err(error) => tracing::warn!("connecting to listen for other replicas' signals: {error}"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_say_who_sent_what_for_which_session() {
        let id = SessionId::from_string("s-1");
        for signal in [
            Signal::Interrupt { id: id.clone(), cascade: false },
            Signal::Interrupt { id: id.clone(), cascade: true },
            Signal::Changed(id.clone()),
            Signal::Mail(id.clone()),
        ] {
            let payload = payload("replica-a", &signal);
            assert_eq!(parse(&payload), Some(("replica-a", signal)));
        }
        assert_eq!(parse("replica-b shout s-1"), None, "an unknown kind is skipped");
    }
}
