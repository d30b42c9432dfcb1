//! The agent: one conversation with one model, its tools and its budget.
//!
//! An [`Agent`] is plain state plus [`Agent::run_turn`] ([`turn`]): prompt → provider stream →
//! tool calls → results → repeat, until the model stops, the caller interrupts, or the
//! [`Budget`] runs out. Whatever way a turn ends, the history it leaves behind is valid for
//! the next one. Agents are built only by [`AgentFactory::build_agent`]; surfaces never build
//! them. The session actor owns its agent, so nothing here needs locks.

pub mod budget;
pub mod events;
pub mod factory;
pub mod turn;

use std::sync::Arc;

pub use budget::{Budget, Consumption, Exhausted};
pub use events::{AgentEvent, EventSender, EventSink};
pub use factory::{AgentBuildConfig, AgentFactory, AgentSpec};
pub use turn::{TurnEnd, TurnReport};

use crate::llm::{Message, Provider, Usage};
use crate::tools::ToolScope;

pub struct Agent {
    provider: Arc<dyn Provider>,
    /// The id the caller chose, `provider:model`.
    model_id: String,
    /// The model name sent on the wire.
    model: String,
    system_prompt: Option<String>,
    max_tokens: u32,
    tools: ToolScope,
    budget: Budget,
    history: Vec<Message>,
    usage: Usage,
    used: Consumption,
    turns: u64,
    /// The first message changed since the history was last saved: a save writes
    /// `history[unsaved_from..]`. Appends leave it alone; editing an old message lowers it.
    unsaved_from: usize,
}

impl Agent {
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// Token totals over every model call of the session.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    pub fn consumption(&self) -> Consumption {
        self.used
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Number of turns started so far.
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// How this agent was built, with every default resolved.
    pub fn spec(&self) -> AgentSpec {
        AgentSpec {
            model: self.model_id.clone(),
            system_prompt: self.system_prompt.clone(),
            max_tokens: self.max_tokens,
            budget: self.budget,
        }
    }

    /// The part of the history not saved yet: its first index and the messages from there on.
    /// Saving these (replacing any stored message at or after that index) brings a store up to
    /// date at a cost proportional to what changed, never to the history's size.
    pub fn unsaved(&self) -> (usize, &[Message]) {
        let from = self.unsaved_from.min(self.history.len());
        (from, &self.history[from..])
    }

    /// Records that everything in the history is saved.
    pub fn mark_saved(&mut self) {
        self.unsaved_from = self.history.len();
    }

    /// Gives a freshly built agent the state of a stored session.
    pub(crate) fn restore(&mut self, history: Vec<Message>, usage: Usage, used: Consumption, turns: u64) {
        self.unsaved_from = history.len();
        self.history = history;
        self.usage = usage;
        self.used = used;
        self.turns = turns;
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model_id", &self.model_id)
            .field("messages", &self.history.len())
            .field("turns", &self.turns)
            .finish_non_exhaustive()
    }
}
