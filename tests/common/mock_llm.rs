//! A byte-accurate mock LLM HTTP/1.1 server on a loopback `TcpListener`.
//!
//! Tests script every response (status, headers, the exact SSE chunks, delays, pauses and
//! abrupt disconnects) and inspect every request afterwards. Written on raw TCP rather than a
//! web framework precisely so that chunk boundaries and broken connections are under the
//! test's control. One connection serves one request (`Connection: close`); a streamed body is
//! written raw until the socket closes, as many real SSE servers do.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::prompt_cache::{self, CacheFigures, CacheSettings, PromptCache};
use super::provider_rules::{self, Profile, Violation, Wire};

/// How long [`MockLlm::wait_for_requests`] waits before failing the test instead of hanging.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// The running server. Dropping it stops the accept loop and every open connection.
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// Answers a request when no scripted response is queued (for conversations whose order is
/// not known in advance).
pub type Responder = Box<dyn Fn(&RecordedRequest) -> MockResponse + Send + Sync>;

struct Shared {
    queue: Mutex<VecDeque<MockResponse>>,
    responder: Mutex<Option<Responder>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Number of requests recorded so far; waiters subscribe instead of polling.
    arrived: watch::Sender<usize>,
    /// When set, every request is checked against the real providers' rules first.
    enforced: Mutex<Option<Profile>>,
    violations: Mutex<Vec<RecordedViolation>>,
    /// When set, responses report the usage the provider's prompt cache would have.
    cache: Mutex<Option<PromptCache>>,
    cache_log: Mutex<Vec<CacheRecord>>,
}

impl MockLlm {
    pub async fn start() -> MockLlm {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("mock LLM: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("mock LLM: local addr");
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            responder: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            arrived: watch::channel(0).0,
            enforced: Mutex::new(None),
            violations: Mutex::new(Vec::new()),
            cache: Mutex::new(None),
            cache_log: Mutex::new(Vec::new()),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        MockLlm { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues the answer to a future request (FIFO: each request pops the next one).
    pub fn push(&self, response: MockResponse) {
        self.shared.queue.lock().unwrap().push_back(response);
    }

    /// Queues `response` held before its chunk `chunk` until the returned gate opens (for ever,
    /// if it never does).
    pub fn push_held(&self, response: MockResponse, chunk: usize) -> Gate {
        let gate = Gate::new();
        self.push(response.pause_before_chunk(chunk, gate.clone()));
        gate
    }

    /// Answers requests with `responder` once the queue is empty.
    pub fn respond_with(&self, responder: impl Fn(&RecordedRequest) -> MockResponse + Send + Sync + 'static) {
        *self.shared.responder.lock().unwrap() = Some(Box::new(responder));
    }

    /// Drops every queued response not taken yet (e.g. after killing the client mid-script).
    pub fn clear_queue(&self) {
        self.shared.queue.lock().unwrap().clear();
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Drops the requests recorded so far (their count stays), so a test sending thousands of
    /// large requests does not hold them all.
    pub fn forget_requests(&self) {
        self.shared.requests.lock().unwrap().clear();
    }

    /// Checks every later request against the real rules of its wire (picked by path) under
    /// `profile`. A request that breaks one is answered with the provider's own error (400, or
    /// Mistral's 422) instead of the next scripted response, which stays queued, and is
    /// recorded in [`MockLlm::violations`]. Off by default: existing scripts stay as they are.
    pub fn enforce(&self, profile: Profile) {
        *self.shared.enforced.lock().unwrap() = Some(profile);
    }

    /// Every request refused by [`MockLlm::enforce`], in arrival order.
    pub fn violations(&self) -> Vec<RecordedViolation> {
        self.shared.violations.lock().unwrap().clone()
    }

    /// Emulates the providers' prompt caches from now on: each 200 response reports the
    /// emulated usage (Anthropic `message_start` and `message_delta`, OpenAI's usage chunk)
    /// instead of its scripted input figures, and each is recorded in [`MockLlm::cache_log`].
    pub fn emulate_cache(&self, settings: CacheSettings) {
        *self.shared.cache.lock().unwrap() = Some(PromptCache::new(settings));
    }

    /// The emulated cache figures of every request answered since [`MockLlm::emulate_cache`].
    pub fn cache_log(&self) -> Vec<CacheRecord> {
        self.shared.cache_log.lock().unwrap().clone()
    }

    /// Resolves once at least `n` requests have arrived; panics after 30 s rather than hang.
    pub async fn wait_for_requests(&self, n: usize) {
        let mut arrived = self.shared.arrived.subscribe();
        let waited = tokio::time::timeout(WAIT_LIMIT, arrived.wait_for(|count| *count >= n)).await;
        assert!(
            matches!(waited, Ok(Ok(_))),
            "mock LLM: expected {n} requests within {WAIT_LIMIT:?}, got {}",
            self.requests().len()
        );
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A request [`MockLlm::enforce`] refused, and why.
#[derive(Debug, Clone)]
pub struct RecordedViolation {
    pub path: String,
    pub violation: Violation,
}

/// What the emulated prompt cache made of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRecord {
    pub wire: Wire,
    pub figures: CacheFigures,
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The JSON body; `Null` when empty, a JSON string when the body was not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// The Anthropic request's system prompt as one string (its text blocks joined by `\n`).
    pub fn system_text(&self) -> String {
        match &self.body["system"] {
            Value::Array(blocks) => {
                blocks.iter().filter_map(|block| block["text"].as_str()).collect::<Vec<_>>().join("\n")
            }
            other => other.as_str().unwrap_or_default().to_owned(),
        }
    }

    /// The last message of a chat request, as JSON text (empty when there is none).
    pub fn last_message(&self) -> String {
        self.body["messages"]
            .as_array()
            .and_then(|messages| messages.last())
            .map(Value::to_string)
            .unwrap_or_default()
    }
}

impl RecordedRequest {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// The latch that holds paused responses until opened: the crate's own test-support latch, so
/// the in-process scripted provider and this mock server pause the same way. Opening is
/// permanent, so opening before a response reaches its pause point also works.
pub use deputy::llm::scripted::Gate;

/// A scripted response.
pub struct MockResponse {
    status: u16,
    headers: Vec<(String, String)>,
    chunks: Vec<Vec<u8>>,
    /// Streamed bodies have no content-length and end when the socket closes.
    streamed: bool,
    chunk_delay: Option<Duration>,
    pauses: Vec<(usize, Gate)>,
    cut_after: Option<usize>,
}

impl MockResponse {
    fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            chunks: Vec::new(),
            streamed: false,
            chunk_delay: None,
            pauses: Vec::new(),
            cut_after: None,
        }
    }

    /// A response with an empty body.
    pub fn status(code: u16) -> Self {
        Self::new(code)
    }

    pub fn json(code: u16, body: Value) -> Self {
        let mut response = Self::new(code).header("content-type", "application/json");
        response.chunks.push(body.to_string().into_bytes());
        response
    }

    /// 200 `text/event-stream`; each string is written verbatim as one chunk.
    pub fn sse(events: Vec<String>) -> Self {
        let mut response =
            Self::new(200).header("content-type", "text/event-stream").header("cache-control", "no-cache");
        response.chunks = events.into_iter().map(String::into_bytes).collect();
        response.streamed = true;
        response
    }

    /// A streamed body of arbitrary bytes (e.g. to split inside a UTF-8 character).
    pub fn raw_chunks(code: u16, content_type: &str, chunks: Vec<Vec<u8>>) -> Self {
        let mut response = Self::new(code).header("content-type", content_type);
        response.chunks = chunks;
        response.streamed = true;
        response
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sleep before each chunk after the first.
    pub fn chunk_delay(mut self, d: Duration) -> Self {
        self.chunk_delay = Some(d);
        self
    }

    /// Wait for `gate` before writing chunk `index` (the head is always written first).
    pub fn pause_before_chunk(mut self, index: usize, gate: Gate) -> Self {
        self.pauses.push((index, gate));
        self
    }

    /// Close the socket right after `n_chunks` chunks, whatever remains.
    pub fn cut_after(mut self, n_chunks: usize) -> Self {
        self.cut_after = Some(n_chunks);
        self
    }

    /// Rewrites the JSON of every `data:` line of a streamed body in place (other lines and
    /// chunk boundaries stay as scripted).
    fn map_sse_data(mut self, edit: impl Fn(&mut Value)) -> Self {
        if !self.streamed {
            return self;
        }
        for chunk in &mut self.chunks {
            let Ok(text) = std::str::from_utf8(chunk) else {
                continue;
            };
            let mut rewritten = String::with_capacity(text.len());
            for line in text.split_inclusive('\n') {
                let data = line.strip_prefix("data: ").map(str::trim_end);
                match data.and_then(|data| serde_json::from_str::<Value>(data).ok().map(|json| (data, json))) {
                    Some((data, mut json)) => {
                        edit(&mut json);
                        rewritten.push_str("data: ");
                        rewritten.push_str(&json.to_string());
                        rewritten.push_str(&line["data: ".len() + data.len()..]);
                    }
                    None => rewritten.push_str(line),
                }
            }
            *chunk = rewritten.into_bytes();
        }
        self
    }

    fn no_script() -> Self {
        Self::json(
            500,
            json!({"type": "error", "error": {"type": "api_error", "message": "mock: no scripted response"}}),
        )
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Connections live in the JoinSet so that aborting this task (on drop) aborts them too.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((socket, peer)) = accepted
                    && peer.ip().is_loopback()
                {
                    connections.spawn(serve(socket, shared.clone()));
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve(mut socket: TcpStream, shared: Arc<Shared>) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let response = answer(&shared, &request);
    shared.requests.lock().unwrap().push(request);
    shared.arrived.send_modify(|count| *count += 1);
    // A write error means the client went away, which some tests do on purpose.
    let _ = write_response(&mut socket, response).await;
}

/// The response to `request`: the provider's error if it breaks an enforced rule, else the
/// next scripted one, with its usage replaced by the emulated cache's figures if emulating.
fn answer(shared: &Shared, request: &RecordedRequest) -> MockResponse {
    let wire = Wire::of_path(&request.path);
    if let (Some(profile), Some(wire)) = (*shared.enforced.lock().unwrap(), wire)
        && let Err(violation) = provider_rules::check(wire, &request.body, &profile)
    {
        let response = MockResponse::json(violation.status, violation.body.clone());
        shared.violations.lock().unwrap().push(RecordedViolation { path: request.path.clone(), violation });
        return response;
    }
    let queued = shared.queue.lock().unwrap().pop_front();
    let response = queued.unwrap_or_else(|| match &*shared.responder.lock().unwrap() {
        Some(responder) => responder(request),
        None => MockResponse::no_script(),
    });
    let Some(wire) = wire.filter(|_| response.status == 200) else {
        return response;
    };
    let Some(figures) = shared.cache.lock().unwrap().as_mut().map(|cache| cache.observe(wire, &request.body))
    else {
        return response;
    };
    shared.cache_log.lock().unwrap().push(CacheRecord { wire, figures });
    response.map_sse_data(|data| match wire {
        Wire::Anthropic => prompt_cache::set_anthropic_usage(data, figures),
        Wire::OpenAi => prompt_cache::set_openai_usage(data, figures),
    })
}

/// Reads one request: head up to the blank line, then exactly `content-length` body bytes.
async fn read_request(socket: &mut TcpStream) -> Option<RecordedRequest> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split_whitespace();
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    Some(RecordedRequest { method, path, headers, body })
}

async fn write_response(socket: &mut TcpStream, response: MockResponse) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\nconnection: close\r\n", response.status, reason(response.status));
    if !response.streamed {
        let length: usize = response.chunks.iter().map(Vec::len).sum();
        head.push_str(&format!("content-length: {length}\r\n"));
    }
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await?;
    for (index, chunk) in response.chunks.iter().enumerate() {
        if response.cut_after == Some(index) {
            return Ok(()); // dropping the socket closes it mid-body
        }
        if index > 0
            && let Some(delay) = response.chunk_delay
        {
            tokio::time::sleep(delay).await;
        }
        for (_, gate) in response.pauses.iter().filter(|(at, _)| *at == index) {
            gate.wait().await;
        }
        socket.write_all(chunk).await?;
        socket.flush().await?;
    }
    socket.shutdown().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

// ---------------------------------------------------------------------------------------------
// Wire-format builders

/// Token counts a scripted response reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MockUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
}

impl MockUsage {
    pub fn cache(mut self, read: u64, creation: u64) -> Self {
        self.cache_read = read;
        self.cache_creation = creation;
        self
    }
}

pub fn usage(input: u64, output: u64) -> MockUsage {
    MockUsage { input, output, cache_read: 0, cache_creation: 0 }
}

const DEFAULT_USAGE: MockUsage = MockUsage { input: 12, output: 5, cache_read: 0, cache_creation: 0 };

/// A wire module's `text` and `tool_calls`: its `text_with_usage` and `tool_calls_with_usage`
/// with the default usage.
macro_rules! with_default_usage {
    () => {
        pub fn text(chunks: &[&str]) -> Vec<String> {
            text_with_usage(chunks, super::DEFAULT_USAGE)
        }

        pub fn tool_calls(text: Option<&str>, calls: &[(&str, &str, Value)]) -> Vec<String> {
            tool_calls_with_usage(text, calls, super::DEFAULT_USAGE)
        }
    };
}

/// Splits `text` into `parts` pieces at character boundaries (some may be empty for tiny
/// inputs, but there are always `parts` of them), to stream tool arguments in fragments.
pub fn fragments(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let parts = parts.max(1);
    (0..parts).map(|i| chars[i * chars.len() / parts..(i + 1) * chars.len() / parts].iter().collect()).collect()
}

/// Anthropic Messages SSE, one event per chunk.
pub mod anthropic {
    use serde_json::{Value, json};

    use super::super::provider_rules::thinking_signature;
    use super::MockUsage;
    use super::fragments;

    pub fn event(name: &str, data: Value) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    pub fn message_start(usage: MockUsage) -> String {
        event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": "msg_mock", "type": "message", "role": "assistant", "content": [], "model": "mock",
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": usage.input, "cache_creation_input_tokens": usage.cache_creation,
                          "cache_read_input_tokens": usage.cache_read, "output_tokens": 1},
            }}),
        )
    }

    pub fn ping() -> String {
        event("ping", json!({"type": "ping"}))
    }

    pub fn text_block(index: usize, chunks: &[&str]) -> Vec<String> {
        let mut out = vec![event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        )];
        for chunk in chunks {
            out.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": chunk}}),
            ));
        }
        out.push(block_stop(index));
        out
    }

    /// A tool_use block whose arguments stream as `""` and then two real fragments.
    pub fn tool_use_block(index: usize, id: &str, name: &str, input: &Value) -> Vec<String> {
        let mut out = vec![event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        )];
        let mut parts = vec![String::new()];
        parts.extend(fragments(&input.to_string(), 2));
        for part in parts {
            out.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        out.push(block_stop(index));
        out
    }

    /// A thinking block: its text in `chunks`, then the signature the mock issues for exactly
    /// that text (see [`thinking_signature`]), so a client that sends it back unchanged passes
    /// the enforced signature rule.
    pub fn thinking_block(index: usize, chunks: &[&str]) -> Vec<String> {
        let mut out = vec![event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "thinking", "thinking": ""}}),
        )];
        for chunk in chunks {
            out.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "thinking_delta", "thinking": chunk}}),
            ));
        }
        out.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "signature_delta", "signature": thinking_signature(&chunks.concat())}}),
        ));
        out.push(block_stop(index));
        out
    }

    /// A redacted thinking block: opaque `data`, complete in its `content_block_start`.
    pub fn redacted_thinking_block(index: usize, data: &str) -> Vec<String> {
        vec![
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                       "content_block": {"type": "redacted_thinking", "data": data}}),
            ),
            block_stop(index),
        ]
    }

    /// A thinking turn that ends in tool calls: thinking, then each `tool_use` block.
    pub fn thinking_then_tool_calls(
        thinking: &str,
        calls: &[(&str, &str, Value)],
        usage: MockUsage,
    ) -> Vec<String> {
        let mut out = vec![message_start(usage)];
        out.extend(thinking_block(0, &[thinking]));
        for (offset, (id, name, input)) in calls.iter().enumerate() {
            out.extend(tool_use_block(1 + offset, id, name, input));
        }
        out.push(message_delta("tool_use", usage.output));
        out.push(message_stop());
        out
    }

    /// A thinking turn that ends in text.
    pub fn thinking_then_text(thinking: &str, chunks: &[&str], usage: MockUsage) -> Vec<String> {
        let mut out = vec![message_start(usage)];
        out.extend(thinking_block(0, &[thinking]));
        out.extend(text_block(1, chunks));
        out.push(message_delta("end_turn", usage.output));
        out.push(message_stop());
        out
    }

    pub fn block_stop(index: usize) -> String {
        event("content_block_stop", json!({"type": "content_block_stop", "index": index}))
    }

    pub fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": output_tokens}}),
        )
    }

    pub fn message_stop() -> String {
        event("message_stop", json!({"type": "message_stop"}))
    }

    /// An in-band error event (e.g. `overloaded_error`).
    pub fn error(error_type: &str, message: &str) -> String {
        event("error", json!({"type": "error", "error": {"type": error_type, "message": message}}))
    }

    with_default_usage!();

    pub fn text_with_usage(chunks: &[&str], usage: MockUsage) -> Vec<String> {
        let mut out = vec![message_start(usage)];
        out.extend(text_block(0, chunks));
        out.push(message_delta("end_turn", usage.output));
        out.push(message_stop());
        out
    }

    pub fn tool_calls_with_usage(
        text: Option<&str>,
        calls: &[(&str, &str, Value)],
        usage: MockUsage,
    ) -> Vec<String> {
        let mut out = vec![message_start(usage)];
        let mut index = 0;
        if let Some(text) = text {
            out.extend(text_block(0, &[text]));
            index = 1;
        }
        for (offset, (id, name, input)) in calls.iter().enumerate() {
            out.extend(tool_use_block(index + offset, id, name, input));
        }
        out.push(message_delta("tool_use", usage.output));
        out.push(message_stop());
        out
    }

    /// The HTTP error body Anthropic sends with a non-2xx status.
    pub fn error_body(error_type: &str, message: &str) -> Value {
        json!({"type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_mock"})
    }
}

/// OpenAI Chat Completions SSE (`data:` lines only), one chunk per line.
pub mod openai {
    use serde_json::{Value, json};

    use super::MockUsage;
    use super::fragments;

    pub fn data(value: Value) -> String {
        format!("data: {value}\n\n")
    }

    pub fn done() -> String {
        "data: [DONE]\n\n".to_owned()
    }

    fn envelope(choices: Value, usage: Value) -> Value {
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": "mock",
               "choices": choices, "usage": usage})
    }

    pub fn delta(delta: Value) -> String {
        data(envelope(json!([{"index": 0, "delta": delta, "finish_reason": null}]), Value::Null))
    }

    pub fn finish(reason: &str) -> String {
        data(envelope(json!([{"index": 0, "delta": {}, "finish_reason": reason}]), Value::Null))
    }

    pub fn usage_value(usage: MockUsage) -> Value {
        json!({"prompt_tokens": usage.input + usage.cache_read, "completion_tokens": usage.output,
               "total_tokens": usage.input + usage.cache_read + usage.output,
               "prompt_tokens_details": {"cached_tokens": usage.cache_read},
               "completion_tokens_details": {"reasoning_tokens": 0}})
    }

    /// The `include_usage` chunk: `choices: []`.
    pub fn usage_chunk(usage: MockUsage) -> String {
        data(envelope(json!([]), usage_value(usage)))
    }

    /// A mid-stream error chunk.
    pub fn error_chunk(error_type: &str, code: Option<&str>, message: &str) -> String {
        data(json!({"error": {"message": message, "type": error_type, "param": null, "code": code}}))
    }

    with_default_usage!();

    pub fn text_with_usage(chunks: &[&str], usage: MockUsage) -> Vec<String> {
        let mut out = vec![delta(json!({"role": "assistant", "content": ""}))];
        out.extend(chunks.iter().map(|c| delta(json!({"content": c}))));
        out.push(finish("stop"));
        out.push(usage_chunk(usage));
        out.push(done());
        out
    }

    /// A `reasoning_content` delta (DeepSeek, Kimi, vLLM and other reasoning servers).
    pub fn reasoning_delta(text: &str) -> String {
        delta(json!({"reasoning_content": text}))
    }

    /// Reasoning, then text.
    pub fn reasoning_then_text(reasoning: &[&str], chunks: &[&str], usage: MockUsage) -> Vec<String> {
        let mut out = vec![delta(json!({"role": "assistant", "content": null, "reasoning_content": ""}))];
        out.extend(reasoning.iter().map(|r| reasoning_delta(r)));
        out.extend(chunks.iter().map(|c| delta(json!({"content": c}))));
        out.push(finish("stop"));
        out.push(usage_chunk(usage));
        out.push(done());
        out
    }

    /// Reasoning, then tool calls (streamed like [`tool_calls_with_usage`]).
    pub fn reasoning_then_tool_calls(
        reasoning: &[&str],
        calls: &[(&str, &str, Value)],
        usage: MockUsage,
    ) -> Vec<String> {
        let mut out = vec![delta(json!({"role": "assistant", "content": null, "reasoning_content": ""}))];
        out.extend(reasoning.iter().map(|r| reasoning_delta(r)));
        // The tool-call stream after its role chunk: the same bytes as a plain tool-call turn.
        out.extend(tool_calls_with_usage(None, calls, usage).into_iter().skip(1));
        out
    }

    /// Each call: a first fragment with id, name and `""`, then the arguments in two pieces.
    pub fn tool_calls_with_usage(
        text: Option<&str>,
        calls: &[(&str, &str, Value)],
        usage: MockUsage,
    ) -> Vec<String> {
        let mut out = vec![delta(json!({"role": "assistant", "content": null}))];
        if let Some(text) = text {
            out.push(delta(json!({"content": text})));
        }
        for (index, (id, name, input)) in calls.iter().enumerate() {
            out.push(delta(json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                                  "function": {"name": name, "arguments": ""}}]})));
            for part in fragments(&input.to_string(), 2) {
                out.push(delta(json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]})));
            }
        }
        out.push(finish("tool_calls"));
        out.push(usage_chunk(usage));
        out.push(done());
        out
    }

    /// The HTTP error body OpenAI sends with a non-2xx status.
    pub fn error_body(error_type: &str, code: Option<&str>, message: &str) -> Value {
        json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
    }
}
