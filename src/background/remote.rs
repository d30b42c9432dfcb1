//! A command's line to the background server that owns its store: deputy's JSON-RPC over the
//! server's socket ([`super::frames::Request::Rpc`]).
//!
//! One connection per command. Requests carry increasing ids and are answered in completion
//! order; a reader task hands each answer to its caller and each `session/event` notification
//! (a turn's events) to whoever asked for events. A command runs one turn at a time, so the
//! events need no routing beyond that. Closing the connection (the command exits, or is
//! stopped with Ctrl-C) interrupts the turns it started on the server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::oneshot;

use crate::agent::{AgentEvent, EventSender};
use crate::error::SessionError;
use crate::surfaces::http::jsonrpc::EVENT_NOTIFICATION;
use crate::surfaces::wire::ErrorBody;

/// The longest line the server may send (an exported session's document is one value).
const MAX_LINE_BYTES: usize = 512 * 1024 * 1024;

/// A connection to the store's owner.
pub struct RemoteOwner {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Shared {
    /// Callers waiting for the answer to their request, by id.
    waiting: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    /// Where a running turn's events go.
    events: Mutex<Option<EventSender>>,
}

impl RemoteOwner {
    /// Speaks JSON-RPC on `stream`, a connection the server accepted for it; needs a runtime.
    pub fn new(stream: std::os::unix::net::UnixStream) -> anyhow::Result<Self> {
        stream.set_nonblocking(true)?;
        let (read, write) = tokio::net::UnixStream::from_std(stream)?.into_split();
        let shared = Arc::new(Shared::default());
        tokio::spawn(read_answers(BufReader::new(read), shared.clone(), MAX_LINE_BYTES));
        Ok(Self { writer: tokio::sync::Mutex::new(write), shared, next_id: AtomicU64::new(1) })
    }

    /// Calls `method` with `params`; a turn it starts streams its events to `events`. The
    /// server's error comes back as the same [`SessionError`] (its code, message and session).
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        events: Option<EventSender>,
    ) -> Result<Value, SessionError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        self.shared.waiting.lock().unwrap_or_else(PoisonError::into_inner).insert(id, answer);
        *self.shared.events.lock().unwrap_or_else(PoisonError::into_inner) = events;
        let mut line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        let written = self.writer.lock().await.write_all(line.as_bytes()).await;
        if let Err(err) = written {
            return Err(lost(&format!("sending {method}: {err}")));
        }
        let mut answer = answered.await.map_err(|_| lost(&format!("it closed the connection during {method}")))?;
        *self.shared.events.lock().unwrap_or_else(PoisonError::into_inner) = None;
        if let Some(result) = answer.get_mut("result") {
            return Ok(result.take());
        }
        let error = answer.get_mut("error").map(Value::take).unwrap_or(Value::Null);
        match serde_json::from_value::<ErrorBody>(error["data"].clone()) {
            Ok(body) => Err(SessionError::from(body)),
            Err(_) => {
                Err(SessionError::invalid(format!("{method}: {}", error["message"].as_str().unwrap_or("failed"))))
            }
        }
    }
}

impl RemoteOwner {
    /// Tells the server nothing more will be asked: it interrupts the turns still running for
    /// this connection, and answers them.
    pub async fn close_input(&self) {
        let _ = self.writer.lock().await.shutdown().await;
    }
}

/// Hands each line the server sends to its reader until the connection closes; then every
/// caller still waiting learns it (its sender is dropped). A line longer than `max_line` ends
/// the connection too: the rest of it cannot be told from the next line, and the answer it
/// held is lost, so its caller must hear of it rather than wait for ever.
async fn read_answers(
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    shared: Arc<Shared>,
    max_line: usize,
) {
    let mut line = Vec::new();
    let limit = u64::try_from(max_line).unwrap_or(u64::MAX);
    loop {
        line.clear();
        match tokio::io::AsyncReadExt::take(&mut reader, limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(read) if read >= max_line && line.last() != Some(&b'\n') => {
                tracing::warn!(
                    max_line,
                    "the background server sent a line longer than this command reads; closing"
                );
                break;
            }
            Ok(_) => {}
        }
        let Ok(message) = serde_json::from_slice::<Value>(&line) else { continue };
        if message.get("method").and_then(Value::as_str) == Some(EVENT_NOTIFICATION) {
            let event = serde_json::from_value::<AgentEvent>(message["params"]["event"].clone());
            let events = shared.events.lock().unwrap_or_else(PoisonError::into_inner);
            if let (Ok(event), Some(events)) = (event, events.as_ref()) {
                events.send(event);
            }
            continue;
        }
        let id = message.get("id").and_then(Value::as_u64);
        let waiting = id.and_then(|id| shared.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&id));
        if let Some(waiting) = waiting {
            let _ = waiting.send(message);
        }
    }
    shared.waiting.lock().unwrap_or_else(PoisonError::into_inner).clear();
}

fn lost(what: &str) -> SessionError {
    SessionError::store(format!("the background server that owns the store: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_longer_than_a_line_may_be_fails_its_call_instead_of_hanging_it() {
        let (client, server) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        client.set_nonblocking(true).expect("nonblocking");
        let (read, write) = tokio::net::UnixStream::from_std(client).expect("tokio").into_split();
        let shared = Arc::new(Shared::default());
        let reader = tokio::spawn(read_answers(BufReader::new(read), shared.clone(), 64));
        let owner = RemoteOwner { writer: tokio::sync::Mutex::new(write), shared, next_id: AtomicU64::new(1) };
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let answering = std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            let mut lines = std::io::BufReader::new(server.try_clone().expect("clone"));
            let mut request = String::new();
            lines.read_line(&mut request).expect("the request");
            let long = json!({"jsonrpc": "2.0", "id": 1, "result": {"text": "x".repeat(200)}}).to_string();
            let mut server = server;
            let _ = writeln!(server, "{long}");
            // The connection stays open until the test ends: only the reader's own limit can
            // end the wait.
            let _ = finished.recv_timeout(std::time::Duration::from_secs(30));
        });
        let answer =
            tokio::time::timeout(std::time::Duration::from_secs(5), owner.call("session/read", json!({}), None))
                .await
                .expect("the call ends rather than waits");
        assert!(answer.is_err(), "{answer:?}");
        done.send(()).expect("the server side waits");
        reader.await.expect("the reader ends");
        answering.join().expect("the server side");
    }
}
