//! JSON-RPC 2.0 at `POST /rpc`: the session lifecycle as methods, params by name.
//!
//! The methods are the operation table's ([`operation`](crate::surfaces::operation)): each row
//! names its method (`session/create`, `turn/start`, …), its params type (the params object)
//! and its result type; `schemas/` holds their schemas under the tools' names.
//!
//! Errors: a session error has the numeric code of the error table, and `error.data` is the
//! same `{code, message, session_id?}` body as on every surface. Protocol errors have the
//! codes of the specification and no `data`: -32700 (not JSON), -32600 (not a request object,
//! empty batch), -32601 (unknown method). Bad params are `INVALID_REQUEST`, whose code is the
//! specification's -32602.
//!
//! Batches hold at most [`MAX_BATCH`] requests (a longer one is refused whole with -32600,
//! before any entry runs) and run up to [`BATCH_CONCURRENCY`] of them at a time (a long turn
//! does not hold up a read in the same batch), answering in request order, within
//! [`MAX_BATCH_ANSWER_BYTES`] (later entries are answered an error asking for them alone); notifications (no `id`) run but get no answer, and a
//! request that gets no answer at all is answered `204 No Content`, without a body, as the
//! specification asks. Responses are HTTP 200 whatever their errors.
//!
//! **Streaming.** A single request (not a batch) whose client accepts `text/event-stream` is
//! answered with Server-Sent Events: while the turn it starts runs (`session/create`,
//! `turn/start`; the turn is then waited for whatever `wait_ms` says), one
//! [`EVENT_NOTIFICATION`] per agent event, `{"jsonrpc": "2.0", "method": "session/event",
//! "params": {"session_id"?, "event"}}`, then the response itself; each SSE `data` is one
//! JSON-RPC message. A client that goes away interrupts its turn (it ends `cancelled`), as
//! with REST's streamed turns. Other methods answer the one response as the stream's only event. The
//! same messages go over stdio with `deputy serve --rpc` ([`crate::surfaces::rpc_stdio`]).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::agent::{EventSender, event_channel};
use crate::caller::Caller;
use crate::error::SessionError;
use crate::session::{CallerServices, SessionService, TurnOptions};
use crate::surfaces::operation::Operation;
use crate::surfaces::wire::ErrorBody;

pub fn router<P: CallerServices>() -> Router<Arc<P>> {
    Router::new().route("/rpc", post(handle::<P>))
}

/// Requests in one batch, at most: each entry may start a session or a turn, so a batch's cost
/// must not scale with what fits in a body (security review F4).
pub const MAX_BATCH: usize = 100;
/// Entries of a batch that run at the same time.
pub const BATCH_CONCURRENCY: usize = 16;
/// The most bytes a batch's answer holds: once its answers pass this, each further answer is
/// replaced by an `INVALID_REQUEST` error asking for that request alone (the first answer is
/// always kept). Without it a 1 KB batch of 100 `session/events` could answer gigabytes
/// (security review 2, G3).
pub const MAX_BATCH_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// A batch's answers in request order, within [`MAX_BATCH_ANSWER_BYTES`].
#[derive(Default)]
pub struct BatchAnswers {
    answers: Vec<Value>,
    bytes: usize,
}

impl BatchAnswers {
    /// Adds one entry's answer (none for a notification), or an error in its place once the
    /// batch's answer is full.
    pub fn push(&mut self, answer: Option<Value>) {
        let Some(answer) = answer else { return };
        let len = crate::model::json_len(&answer);
        if !self.answers.is_empty() && self.bytes.saturating_add(len) > MAX_BATCH_ANSWER_BYTES {
            let id = answer.get("id").cloned().unwrap_or(Value::Null);
            let error = SessionError::invalid(format!(
                "this batch's answer passed {MAX_BATCH_ANSWER_BYTES} bytes before this entry: send it alone"
            ));
            let refused = response(id, Err(error.into()));
            self.bytes = self.bytes.saturating_add(crate::model::json_len(&refused));
            self.answers.push(refused);
            return;
        }
        self.bytes = self.bytes.saturating_add(len);
        self.answers.push(answer);
    }

    /// The answers, in request order.
    pub fn into_inner(self) -> Vec<Value> {
        self.answers
    }
}

/// The specification's own error codes, for failures before any method runs.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;

/// A JSON-RPC error object.
#[derive(Debug, Serialize)]
struct RpcError {
    code: i64,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<ErrorBody>,
}

impl RpcError {
    fn protocol(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }
}

impl From<SessionError> for RpcError {
    fn from(error: SessionError) -> Self {
        let body = ErrorBody::from(&error);
        Self { code: i64::from(error.code().jsonrpc_code()), message: body.message.clone(), data: Some(body) }
    }
}

fn response(id: Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

/// The method of the notifications that carry a turn's events.
pub const EVENT_NOTIFICATION: &str = "session/event";

/// A `session/event` notification of `event`, naming the session when it is known.
pub fn event_notification(session_id: Option<&str>, event: &crate::agent::AgentEvent) -> Value {
    let mut params = json!({ "event": event });
    if let Some(id) = session_id {
        params["session_id"] = Value::String(id.to_owned());
    }
    json!({"jsonrpc": "2.0", "method": EVENT_NOTIFICATION, "params": params})
}

/// The session a request addresses, if its params name one.
pub fn addressed_session(message: &Value) -> Option<String> {
    message.get("params")?.get("session_id")?.as_str().map(str::to_owned)
}

/// Whether the client accepts Server-Sent Events.
fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.split(',').any(|mime| mime.trim().starts_with("text/event-stream")))
}

/// A single request answered as Server-Sent Events: the turn's notifications, then the answer.
async fn streamed<S: SessionService>(service: S, message: Value) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let session = addressed_session(&message);
    let (sender, mut events) = event_channel();
    // A client that goes away cancels its turn, as with REST's streamed turns: the response
    // stream owns the guard.
    let cancel = tokio_util::sync::CancellationToken::new();
    let guard = cancel.clone().drop_guard();
    let stream_to = Streamed { events: sender, cancel };
    let mut call = tokio::spawn(async move { answer_streaming(&service, message, Some(stream_to)).await });
    let stream = async_stream(move |out| async move {
        let mut answered = None;
        while answered.is_none() {
            tokio::select! {
                biased;
                Some(event) = events.recv() => out(event_notification(session.as_deref(), &event)),
                joined = &mut call => answered = Some(joined),
            }
        }
        while let Some(event) = events.try_recv() {
            out(event_notification(session.as_deref(), &event));
        }
        if let Some(Ok(Some(answer))) = answered {
            out(answer);
        }
    });
    let stream = futures::StreamExt::map(stream, move |message: Value| {
        let _owned = &guard;
        Ok::<_, std::convert::Infallible>(Event::default().data(message.to_string()))
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

/// A stream of what `produce` hands its callback, produced on a task: the callback queues.
fn async_stream<F, Fut>(produce: F) -> impl futures::Stream<Item = Value> + Send + 'static
where
    F: FnOnce(Box<dyn Fn(Value) + Send + Sync>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let out: Box<dyn Fn(Value) + Send + Sync> = Box::new(move |value| {
        // The client left: the rest is dropped; the turn goes on.
        let _ = sender.send(value);
    });
    tokio::spawn(produce(out));
    futures::stream::unfold(
        receiver,
        |mut receiver| async move { receiver.recv().await.map(|value| (value, receiver)) },
    )
}

async fn handle<P: CallerServices>(
    State(services): State<Arc<P>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if !is_json(&headers) {
        let error = RpcError::protocol(INVALID_REQUEST, "Content-Type must be application/json");
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Json(response(Value::Null, Err(error)))).into_response();
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let error = RpcError::protocol(INVALID_REQUEST, rejection.body_text());
            return (rejection.status(), Json(response(Value::Null, Err(error)))).into_response();
        }
    };
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(err) => {
            let error = RpcError::protocol(PARSE_ERROR, format!("parse error: {err}"));
            return Json(response(Value::Null, Err(error))).into_response();
        }
    };
    match message {
        Value::Array(batch) if batch.is_empty() => {
            let error = RpcError::protocol(INVALID_REQUEST, "an empty batch is not a request");
            Json(response(Value::Null, Err(error))).into_response()
        }
        Value::Array(batch) if batch.len() > MAX_BATCH => {
            let error = RpcError::protocol(
                INVALID_REQUEST,
                format!("a batch holds at most {MAX_BATCH} requests, this one has {}: split it", batch.len()),
            );
            Json(response(Value::Null, Err(error))).into_response()
        }
        Value::Array(batch) => {
            // Boxed, so a batch of small calls does not reserve the largest call's state each.
            let service = services.for_caller(&caller);
            let calls = batch.into_iter().map(|message| Box::pin(call(&service, message)));
            let mut answered = futures::StreamExt::buffered(futures::stream::iter(calls), BATCH_CONCURRENCY);
            let mut answers = BatchAnswers::default();
            while let Some(answer) = futures::StreamExt::next(&mut answered).await {
                answers.push(answer);
            }
            let answers = answers.into_inner();
            if answers.is_empty() { StatusCode::NO_CONTENT.into_response() } else { Json(answers).into_response() }
        }
        message if accepts_sse(&headers) => streamed(services.for_caller(&caller), message).await,
        message => match call(&services.for_caller(&caller), message).await {
            Some(answer) => Json(answer).into_response(),
            None => StatusCode::NO_CONTENT.into_response(),
        },
    }
}

/// `application/json`, with or without parameters (or a `+json` type). Refusing form and text
/// bodies keeps browsers' simple cross-site requests out even before the Origin check.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(|mime| mime.trim().to_ascii_lowercase())
        .is_some_and(|mime| {
            mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
        })
}

/// One request of a call or a batch: its response, or `None` for a notification.
async fn call<S: SessionService>(service: &S, message: Value) -> Option<Value> {
    answer(service, message, None).await
}

/// Where a streamed request's turn sends its events, and the caller's cancellation of it.
pub struct Streamed {
    pub events: EventSender,
    pub cancel: tokio_util::sync::CancellationToken,
}

/// One request: its response, or `None` for a notification. With `events`, a turn it starts
/// is waited for to its end and streams its events there.
pub async fn answer<S: SessionService>(service: &S, message: Value, events: Option<EventSender>) -> Option<Value> {
    let streamed = events.map(|events| Streamed { events, cancel: tokio_util::sync::CancellationToken::new() });
    answer_streaming(service, message, streamed).await
}

/// [`answer`], with the caller's cancellation of a streamed turn.
pub async fn answer_streaming<S: SessionService>(
    service: &S,
    message: Value,
    events: Option<Streamed>,
) -> Option<Value> {
    let Value::Object(mut request) = message else {
        return Some(response(
            Value::Null,
            Err(RpcError::protocol(INVALID_REQUEST, "a request must be an object")),
        ));
    };
    let id = request.remove("id");
    let answer_id = match &id {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            let error = RpcError::protocol(INVALID_REQUEST, "`id` must be a string, a number or null");
            return Some(response(Value::Null, Err(error)));
        }
    };
    let outcome = match parse_request(&mut request) {
        Ok((method, params)) => dispatch(service, &method, params, events).await,
        // A malformed request is answered even without an id: it may not be a notification.
        Err(error) => return Some(response(answer_id, Err(error))),
    };
    id.map(|_| response(answer_id, outcome))
}

/// Checks the envelope: `"jsonrpc": "2.0"`, a string `method`, `params` by name (an object) or
/// absent.
fn parse_request(request: &mut Map<String, Value>) -> Result<(String, Value), RpcError> {
    if request.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err(RpcError::protocol(INVALID_REQUEST, "`jsonrpc` must be \"2.0\""));
    }
    let Some(Value::String(method)) = request.remove("method") else {
        return Err(RpcError::protocol(INVALID_REQUEST, "`method` must be a string"));
    };
    let params = match request.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(params @ Value::Object(_)) => params,
        Some(Value::Array(_)) => {
            return Err(
                SessionError::invalid(format!("{method}: params must be passed by name (an object)")).into()
            );
        }
        Some(_) => return Err(RpcError::protocol(INVALID_REQUEST, "`params` must be an object or an array")),
    };
    Ok((method, params))
}

/// Parse → one service call → render, through the table every name-addressed surface shares.
async fn dispatch<S: SessionService>(
    service: &S,
    method: &str,
    params: Value,
    events: Option<Streamed>,
) -> Result<Value, RpcError> {
    let Some(operation) = Operation::from_method(method) else {
        let known: Vec<&str> = Operation::all().map(Operation::method).collect();
        return Err(RpcError::protocol(
            METHOD_NOT_FOUND,
            format!("unknown method {method:?}; known: {}", known.join(", ")),
        ));
    };
    let options = |wait| match events {
        Some(Streamed { events, cancel }) => {
            (TurnOptions { wait: None, events: Some(events), cancel: Some(cancel) }, ())
        }
        None => (TurnOptions::waiting(wait), ()),
    };
    Ok(operation.run(method, service, params, options).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_checked() {
        let mut ok = json!({"jsonrpc": "2.0", "method": "session/list"}).as_object().cloned().unwrap_or_default();
        assert!(
            matches!(parse_request(&mut ok), Ok((method, params)) if method == "session/list" && params == json!({}))
        );
        for (bad, code) in [
            (json!({"jsonrpc": "1.0", "method": "session/list"}), INVALID_REQUEST),
            (json!({"jsonrpc": "2.0"}), INVALID_REQUEST),
            (json!({"jsonrpc": "2.0", "method": "session/list", "params": 3}), INVALID_REQUEST),
            (json!({"jsonrpc": "2.0", "method": "session/list", "params": [1]}), -32602),
        ] {
            let mut request = bad.as_object().cloned().unwrap_or_default();
            assert_eq!(parse_request(&mut request).map(|_| ()).map_err(|error| error.code), Err(code), "{bad}");
        }
    }

    #[test]
    fn session_errors_keep_their_code_in_data() {
        let error = RpcError::from(SessionError::invalid("nope"));
        assert_eq!(error.code, -32602);
        assert_eq!(error.data.map(|data| data.code), Some("INVALID_REQUEST".to_owned()));
    }
}
