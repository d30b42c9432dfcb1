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
pub use factory::{AgentBuildConfig, AgentFactory};
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
