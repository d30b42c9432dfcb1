//! An in-process provider that plays back scripted responses, for unit tests of the agent loop
//! and the session lifecycle. It can pause a stream on a [`Gate`], so tests wait on events
//! rather than sleeping. Provider wire formats are tested against a real HTTP mock instead.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{EventStream, LlmError, LlmErrorKind, ModelRequest, Provider, StopReason, StreamEvent, Usage};

/// A one-shot latch: closed until [`Gate::open`], then open forever. Cheap to clone. The
/// integration tests' mock LLM server pauses its responses on the same latch.
#[derive(Debug, Clone, Default)]
pub struct Gate(CancellationToken);

impl Gate {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn open(&self) {
        self.0.cancel();
    }

    pub async fn wait(&self) {
        self.0.cancelled().await;
    }
}

/// One step of a scripted stream.
#[derive(Debug, Clone)]
pub enum Step {
    Event(StreamEvent),
    Fail(LlmError),
    /// Pause until the gate opens.
    Wait(Gate),
    Sleep(Duration),
    /// Panics with this message, like a bug in an adapter would, to test that a panicking
    /// turn ends `failed` and leaves its session usable.
    Panic(String),
}

/// One scripted model response.
#[derive(Debug, Clone)]
pub struct ScriptedResponse {
    /// Fails the request itself, before any event (like an HTTP error status).
    pub refuse: Option<LlmError>,
    pub steps: Vec<Step>,
    /// Opened when the request for this response arrives.
    pub arrived: Option<Gate>,
}

impl ScriptedResponse {
    pub fn new(steps: Vec<Step>) -> Self {
        Self { refuse: None, steps, arrived: None }
    }

    /// Text in the given deltas, then `end_turn`, with a small usage record.
    pub fn text(deltas: &[&str]) -> Self {
        let mut steps: Vec<Step> =
            deltas.iter().map(|delta| Step::Event(StreamEvent::TextDelta((*delta).to_owned()))).collect();
        steps.push(Step::Event(StreamEvent::Usage(Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        })));
        steps.push(Step::Event(StreamEvent::Finished { stop_reason: StopReason::EndTurn }));
        Self::new(steps)
    }

    /// Tool calls `(id, name, input)`, then `tool_use`.
    pub fn tool_calls(calls: &[(&str, &str, serde_json::Value)]) -> Self {
        let mut steps = Vec::new();
        for (id, name, input) in calls {
            steps.push(Step::Event(StreamEvent::ToolCallStart { id: (*id).into(), name: (*name).into() }));
            steps.push(Step::Event(StreamEvent::ToolCallEnd {
                id: (*id).into(),
                name: (*name).into(),
                input: input.clone(),
            }));
        }
        steps.push(Step::Event(StreamEvent::Usage(Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        })));
        steps.push(Step::Event(StreamEvent::Finished { stop_reason: StopReason::ToolUse }));
        Self::new(steps)
    }

    /// Like [`ScriptedResponse::text`] with the given usage.
    pub fn text_with_usage(deltas: &[&str], usage: Usage) -> Self {
        Self::text(deltas).with_usage(usage)
    }

    /// Reports `usage` instead of the default figures.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        for step in &mut self.steps {
            if let Step::Event(StreamEvent::Usage(reported)) = step {
                *reported = usage;
            }
        }
        self
    }

    /// A request refused outright with `error`.
    pub fn refused(error: LlmError) -> Self {
        Self { refuse: Some(error), steps: Vec::new(), arrived: None }
    }

    /// Inserts a pause on `gate` before step `index`.
    pub fn pause_before(mut self, index: usize, gate: &Gate) -> Self {
        self.steps.insert(index.min(self.steps.len()), Step::Wait(gate.clone()));
        self
    }

    /// Opens `gate` as soon as the request for this response arrives.
    pub fn signal_arrival(mut self, gate: &Gate) -> Self {
        self.arrived = Some(gate.clone());
        self
    }
}

/// Chooses the response to a request, for scripts whose order is not known in advance
/// (compaction calls come when the history says so).
pub type Responder = Box<dyn Fn(&ModelRequest) -> ScriptedResponse + Send + Sync>;

/// Plays back [`ScriptedResponse`]s in order (or asks a [`Responder`]) and records every
/// request.
#[derive(Default)]
pub struct ScriptedProvider {
    script: Mutex<VecDeque<ScriptedResponse>>,
    responder: Option<Responder>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl std::fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedProvider").field("requests", &lock(&self.requests).len()).finish_non_exhaustive()
    }
}

impl ScriptedProvider {
    pub fn new(responses: impl IntoIterator<Item = ScriptedResponse>) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(responses.into_iter().collect()),
            responder: None,
            requests: Mutex::default(),
        })
    }

    /// A provider that answers every request with `responder` once the script is used up.
    pub fn responding(responder: impl Fn(&ModelRequest) -> ScriptedResponse + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::default(),
            responder: Some(Box::new(responder)),
            requests: Mutex::default(),
        })
    }

    pub fn push(&self, response: ScriptedResponse) {
        lock(&self.script).push_back(response);
    }

    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.requests).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Provider for ScriptedProvider {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<EventStream, LlmError>> {
        let next =
            lock(&self.script).pop_front().or_else(|| self.responder.as_ref().map(|respond| respond(&request)));
        lock(&self.requests).push(request);
        Box::pin(async move {
            let response = next.ok_or_else(|| {
                LlmError::new(LlmErrorKind::Config, "scripted provider: no scripted response left")
            })?;
            if let Some(gate) = &response.arrived {
                gate.open();
            }
            if let Some(error) = response.refuse {
                return Err(error);
            }
            let stream = futures::stream::unfold(response.steps.into_iter(), |mut steps| async move {
                loop {
                    match steps.next()? {
                        Step::Event(event) => return Some((Ok(event), steps)),
                        Step::Fail(error) => return Some((Err(error), steps)),
                        Step::Wait(gate) => gate.wait().await,
                        Step::Sleep(duration) => tokio::time::sleep(duration).await,
                        Step::Panic(message) => panic!("{message}"),
                    }
                }
            });
            Ok(Box::pin(stream) as EventStream)
        })
    }
}
