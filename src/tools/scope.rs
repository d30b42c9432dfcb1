//! The tools one session can use, resolved once when its agent is built.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{CallbackTool, Tool, ToolOutput};
use crate::llm::ToolSpec;

/// The resolved tool declarations of a session plus the handles that execute them.
#[derive(Clone, Default)]
pub struct ToolScope {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Names of the tools the caller executes: the loop holds their calls instead of running them.
    callbacks: BTreeSet<String>,
}

impl ToolScope {
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        Self { tools: tools.into_iter().map(|tool| (tool.spec().name, tool)).collect(), callbacks: BTreeSet::new() }
    }

    /// Adds the caller's tools: declared to the model like the others, never run here.
    pub fn with_callbacks(mut self, callbacks: &[CallbackTool]) -> Self {
        for callback in callbacks {
            self.callbacks.insert(callback.name.clone());
            self.tools.insert(callback.name.clone(), Arc::new(callback.clone()));
        }
        self
    }

    /// Whether `name` is a callback tool, answered by the caller.
    pub fn is_callback(&self, name: &str) -> bool {
        self.callbacks.contains(name)
    }

    /// Adds tools (those of the session's MCP servers, known only after an async look-up).
    pub fn extend(&mut self, tools: Vec<Arc<dyn Tool>>) {
        self.tools.extend(tools.into_iter().map(|tool| (tool.spec().name, tool)));
    }

    /// Declarations sent to the model, in a stable (name) order so requests are reproducible.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|tool| tool.spec()).collect()
    }

    /// Runs a call by name. An unknown name is the model's mistake and is answered as such.
    pub async fn call(&self, name: &str, input: serde_json::Value, cancel: CancellationToken) -> ToolOutput {
        let Some(tool) = self.tools.get(name) else {
            let known: Vec<&str> = self.tools.keys().map(String::as_str).collect();
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
        run.instrument(tracing::debug_span!("tool", name)).await
    }
}

impl std::fmt::Debug for ToolScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}
