//! `deputy serve --rpc`: JSON-RPC 2.0 over stdin/stdout, one message per line, the shape IDE
//! integrations use for an app server.
//!
//! The methods, params, results and errors are those of `POST /rpc`
//! ([`crate::surfaces::http::jsonrpc`]). Every request runs on its own task, so a
//! `turn/interrupt` or a `session/read` answers while a turn runs; answers therefore come in
//! completion order, paired by `id`. A turn started here (`session/create`, `turn/start`) is
//! waited for to its end whatever `wait_ms` says, and while it runs every agent event goes out
//! as a `session/event` notification before the response. stdout carries nothing else (logs go
//! to stderr). The server ends when stdin closes (after the requests in flight answer) or on
//! shutdown.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::http::jsonrpc::{
    BatchAnswers, Streamed, addressed_session, answer, answer_streaming, event_notification,
};
use crate::agent::event_channel;
use crate::session::SessionService;

/// What the turns in flight do when the input closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnClose {
    /// They run to their end and are answered (`serve --rpc`: the client may close stdin
    /// after its last request).
    Finish,
    /// They are interrupted: the client was stopped (a command on a background server's
    /// socket, whose Ctrl-C closes the connection).
    Interrupt,
}

/// Serves JSON-RPC on this process's stdin and stdout until stdin closes or `shutdown` fires.
pub async fn serve<S: SessionService + Clone>(service: S, shutdown: CancellationToken) -> anyhow::Result<()> {
    serve_on(service, tokio::io::stdin(), tokio::io::stdout(), shutdown, OnClose::Finish).await
}

/// [`serve`] on any pair of streams (a background server's socket; tests use pipes).
pub async fn serve_on<S, R, W>(
    service: S,
    input: R,
    output: W,
    shutdown: CancellationToken,
    on_close: OnClose,
) -> anyhow::Result<()>
where
    S: SessionService + Clone,
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving JSON-RPC over stdio");
    let (out, mut outgoing) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(message) = outgoing.recv().await {
            let mut line = message.to_string();
            line.push('\n');
            if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    let tasks = TaskTracker::new();
    // Fired when the input closes with `OnClose::Interrupt`: every streamed turn's cancel.
    let closed = CancellationToken::new();
    let mut lines = BufReader::new(input).lines();
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line?,
            () = shutdown.cancelled() => break,
        };
        let Some(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let message: Value = match serde_json::from_str(&line) {
            Ok(message) => message,
            Err(err) => {
                let _ = out.send(json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": format!("parse error: {err}")}}));
                continue;
            }
        };
        let (service, out, closed) = (service.clone(), out.clone(), closed.clone());
        tasks.spawn(async move {
            if let Value::Array(batch) = message {
                let mut answers = BatchAnswers::default();
                for message in batch {
                    answers.push(answer(&service, message, None).await);
                }
                let answers = answers.into_inner();
                if !answers.is_empty() {
                    let _ = out.send(Value::Array(answers));
                }
                return;
            }
            let session = addressed_session(&message);
            let (sender, mut events) = event_channel();
            let call = answer_streaming(&service, message, Some(Streamed { events: sender, cancel: closed }));
            tokio::pin!(call);
            let answered = loop {
                tokio::select! {
                    biased;
                    Some(event) = events.recv() => { let _ = out.send(event_notification(session.as_deref(), &event)); }
                    answered = &mut call => break answered,
                }
            };
            while let Some(event) = events.try_recv() {
                let _ = out.send(event_notification(session.as_deref(), &event));
            }
            if let Some(answered) = answered {
                let _ = out.send(answered);
            }
        });
    }
    tasks.close();
    if on_close == OnClose::Interrupt {
        closed.cancel();
    }
    tokio::select! {
        () = tasks.wait() => {}
        () = shutdown.cancelled() => {}
    }
    drop(out);
    let _ = writer.await;
    Ok(())
}
