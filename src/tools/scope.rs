//! The tools one session can use, resolved once when its agent is built.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{CallbackTool, Tool, ToolOutput};
use crate::llm::ToolSpec;
use crate::telemetry::spans;

/// The resolved tool declarations of a session: the tools deputy runs, and the callbacks the
/// caller runs, which are only declared here.
#[derive(Clone, Default)]
pub struct ToolScope {
    /// The tools deputy runs, by name, each with its declaration (built once, when added).
    runnable: BTreeMap<String, Runnable>,
    /// The caller's tools, by name: declared to the model like the others, never run here. The
    /// loop holds their calls instead. A callback shadows a runnable tool of the same name.
    callbacks: BTreeMap<String, Arc<ToolSpec>>,
}

#[derive(Clone)]
struct Runnable {
    /// Shared with every other session declaring the same tool ([`super::shared_specs`]).
    spec: Arc<ToolSpec>,
    tool: Arc<dyn Tool>,
}

impl ToolScope {
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut scope = Self::default();
        scope.extend(tools);
        scope
    }

    /// Adds the caller's tools: declared to the model like the others, never run here.
    pub fn with_callbacks(mut self, callbacks: &[CallbackTool]) -> Self {
        self.callbacks.extend(callbacks.iter().map(|callback| (callback.name.clone(), Arc::new(callback.spec()))));
        self
    }

    /// Whether `name` is a callback tool, answered by the caller.
    pub fn is_callback(&self, name: &str) -> bool {
        self.callbacks.contains_key(name)
    }

    /// Adds tools (those of the session's MCP servers, known only after an async look-up).
    pub fn extend(&mut self, tools: Vec<Arc<dyn Tool>>) {
        self.runnable.extend(tools.into_iter().map(|tool| {
            let spec = tool.shared_spec();
            (spec.name.clone(), Runnable { spec, tool })
        }));
    }

    /// Declarations sent to the model, in a stable (name) order so requests are reproducible.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.declared().into_values().map(|spec| ToolSpec::clone(spec)).collect()
    }

    /// The declarations as the agent holds them for every model request: the runnable tools'
    /// shared copies ([`super::shared_specs`]), so a thousand live sessions declaring the
    /// same tools hold one schema tree, not a thousand; callbacks are the session's own.
    pub fn shared_specs(&self) -> Vec<Arc<ToolSpec>> {
        self.declared().into_values().cloned().collect()
    }

    /// Every declaration by name, runnable tools and callbacks merged.
    fn declared(&self) -> BTreeMap<&str, &Arc<ToolSpec>> {
        let runnable = self.runnable.iter().map(|(name, runnable)| (name.as_str(), &runnable.spec));
        runnable.chain(self.callbacks.iter().map(|(name, spec)| (name.as_str(), spec))).collect()
    }

    /// Runs a call by name. An unknown name is the model's mistake and is answered as such. A
    /// callback is never run here: the loop holds its calls for the caller, so reaching this
    /// with one is a bug, answered as an error rather than a panic.
    pub async fn call(&self, name: &str, input: serde_json::Value, cancel: CancellationToken) -> ToolOutput {
        if self.is_callback(name) {
            return ToolOutput::error("callback tools are executed by the caller, not by deputy");
        }
        let Some(Runnable { tool, .. }) = self.runnable.get(name) else {
            let known: Vec<&str> = self.declared().into_keys().collect();
            return ToolOutput::error(format!("unknown tool {name:?}; available tools: {known:?}"));
        };
        // Instrumented rather than entered: an entered span would stay current on the worker
        // thread while this future is parked, and other tasks' events would be logged in it.
        let run = async {
            tokio::select! {
                output = tool.call(input, cancel.clone()) => output,
                () = cancel.cancelled() => ToolOutput::error("cancelled: the turn was interrupted"),
            }
        };
        let span = spans::tool(name);
        let output = run.instrument(span.clone()).await;
        if output.is_error {
            spans::tool_failed(&span);
        }
        output
    }
}

impl std::fmt::Debug for ToolScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.declared().keys()).finish()
    }
}
