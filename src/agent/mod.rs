//! The agent: one conversation with one model, its tools and its budget.
//!
//! An [`Agent`] is plain state plus [`Agent::run_turn`] ([`turn`]): prompt → provider stream →
//! tool calls → results → repeat, until the model stops, the caller interrupts, or the
//! [`Budget`] runs out. Whatever way a turn ends, the history it leaves behind is valid for
//! the next one. Agents are built only by [`AgentFactory::build_agent`]; surfaces never build
//! them. The session actor owns its agent, so nothing here needs locks.

mod build;
#[cfg(feature = "session-compaction")]
pub mod compaction;
pub mod context;
pub mod delegation;
pub mod events;
pub mod factory;
#[cfg(test)]
mod factory_tests;
pub mod inbox;
pub mod instructions;
pub mod journal;
pub mod model_call;
pub mod pending;
mod profile;
pub mod report;
mod step;
pub mod structured;
pub mod turn;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, PoisonError};

pub use crate::model::ContextOverrides;
pub use delegation::Ledger;
pub use events::{AgentEvent, EventReceiver, EventSender, EventSink, event_channel};
pub use factory::{AgentBuildConfig, AgentFactory};
pub use inbox::{InboxLimits, MailQuota, Mailbox, NoRoom};
pub use journal::Journal;
pub use report::{TurnEnd, TurnInput, TurnReport};
pub use structured::OutputContract;

use crate::hooks::Hooks;
use crate::ids::SessionId;
use crate::llm::pricing::{Price, Usd};
use crate::llm::{Message, Provider, ToolSpec, Usage};
use crate::model::memory::Recollection;
use crate::model::{AgentSpec, Budget, Consumption, ContextSettings, ContextState, DelegationBook, PendingStep};
use crate::tools::link::SessionLink;
use crate::tools::{ToolConfig, ToolScope};

/// Fields are private to the `agent` module: its children (the loop in `turn` and `step`, and
/// `compaction`, which rewrites the history) work on them directly; everything else goes
/// through methods.
pub struct Agent {
    provider: Arc<dyn Provider>,
    /// The id the caller chose, `provider:model`.
    model_id: String,
    /// The model name sent on the wire.
    model: String,
    /// What the model's tokens cost (the config file's price, else the list price); `None`
    /// where deputy does not know it, and then the session's cost is unknown.
    price: Option<Price>,
    /// The caller's system prompt (the spec's).
    system_prompt: Option<String>,
    /// Where the project's instructions are read from at each turn start, when they are on.
    instructions_source: Option<instructions::InstructionsSource>,
    /// The project's instructions as the running (or last) turn read them.
    instructions: instructions::ProjectInstructions,
    /// The skills listed in the system prompt, read at each turn start: the server's, when the
    /// session has `load_skill`.
    skills_listed: Option<crate::skills::Skills>,
    /// The session's skills (`None`: all); kept for its record.
    skills: Option<Vec<String>>,
    /// The document collections the session searches (`None`: all of the server's).
    documents: Option<Vec<String>>,
    /// The `<skills>` section as the running (or last) turn composed it.
    skills_section: String,
    /// What every model request carries as its system prompt: [`Self::system_prompt`], then the
    /// instructions, then the skills. The same bytes while none changes (a prompt-cache prefix).
    system: Option<String>,
    max_tokens: u32,
    /// Reasoning asked of every model call; `None`: the provider's default.
    reasoning: Option<crate::llm::Reasoning>,
    tools: ToolScope,
    /// What the model is told of `tools`, built once: every model request shares it.
    tool_specs: Arc<[Arc<ToolSpec>]>,
    /// What `tool_specs` add to every request's input, estimated once with them (G9's check
    /// before each call of a delegated child).
    tool_tokens: u64,
    /// What `tools` was built from, kept for the session's record.
    tool_config: ToolConfig,
    /// The named agent this one was created from, kept for the session's record.
    agent_ref: Option<crate::model::AgentRef>,
    budget: Budget,
    context_settings: ContextSettings,
    /// Shared with the model request of the running step, so building that request copies no
    /// message. Changed only through [`Self::history_mut`] and [`Self::rewrite_history`].
    history: Arc<Vec<Message>>,
    /// What the provider's wire wrote of the history's settled turns, shared with the requests
    /// so that a call writes only what follows them (`llm::encoded_history`).
    encoded_history: Arc<crate::llm::encoded_history::EncodedHistory>,
    usage: Usage,
    used: Consumption,
    turns: u64,
    context: ContextState,
    /// Bumped each time compaction replaces the history.
    history_epoch: u64,
    /// The first message changed since the history was last saved: a save writes
    /// `history[unsaved_from..]`. Appends leave it alone; editing an old message lowers it,
    /// and a compaction sets it to 0.
    unsaved_from: usize,
    /// Full text of tool outputs that were capped in the history, by tool_use id. Shared with
    /// the session's handle, so `session_tool_output` answers while a turn runs.
    full_outputs: FullOutputs,
    /// Which of those a store has not saved yet.
    unsaved_outputs: Vec<String>,
    /// Passages a summary took out of the context, not saved yet: a save keeps them as the
    /// session's memories in the same transaction as the compacted history.
    recollections: Vec<Recollection>,
    /// Whether a turn is running, and the index of the message holding its prompt: what a
    /// compaction in the middle of a turn must keep.
    turn_running: bool,
    turn_prompt_index: usize,
    /// A step whose tool calls wait for the caller; the history ends with its `tool_use`.
    pending: Option<PendingStep>,
    /// The session's output schema: every turn's answer must validate against it, unless the
    /// turn brings its own.
    structured: Option<OutputContract>,
    /// The output schema of the running turn, if any.
    turn_output: Option<OutputContract>,
    /// The session's inbox, read at step boundaries; `None` for an agent outside a session.
    mailbox: Option<Arc<Mailbox>>,
    /// How many hops the mail the running turn handles had; shared with the comms tools.
    handling_hops: Arc<AtomicU32>,
    /// Where the comms and delegation tools reach the session service (connected by it).
    session_link: SessionLink,
    /// The session's id, for the events its hooks receive.
    session_id: SessionId,
    /// The operator's `[[hooks]]` (config file only; never part of the record).
    hooks: Hooks,
    /// What the session carved for its children; shared with the session service, which
    /// carves while the agent's `delegate` call runs.
    ledger: Arc<Ledger>,
    /// A delegated child: its budget closes when a turn ends (not held), so what it did not
    /// use stays with its parent.
    delegated: bool,
    /// A delegated child's parent's ledger, told what the child has used after each model
    /// call and step, so the parent's view counts a running child's spend (security review 2,
    /// G9). `None` for a root, and for a child resumed after a restart.
    parent_ledger: Option<Arc<Ledger>>,
}

/// Full tool outputs not saved yet, by tool_use id; written only at the end of a step and
/// after a save, so the lock is never held for long.
pub type FullOutputs = Arc<Mutex<BTreeMap<String, String>>>;

/// The state of a stored session, handed to a freshly built agent to resume it.
#[derive(Debug, Clone, Default)]
pub struct RestoredState {
    pub history: Vec<Message>,
    pub usage: Usage,
    pub used: Consumption,
    pub turns: u64,
    pub context: ContextState,
    pub history_epoch: u64,
    pub pending: Option<PendingStep>,
    pub delegation: DelegationBook,
    pub delegated: bool,
    /// What the session's own tokens cost so far; `None` where it was not known (a record
    /// stored before costs were kept, or while its model had no price).
    pub cost: Option<Usd>,
}

impl Agent {
    /// Connects the session's inbox; it must share [`Self::handling_hops`].
    pub fn attach_mailbox(&mut self, mailbox: Arc<Mailbox>) {
        self.mailbox = Some(mailbox);
    }

    /// The counter the session's inbox raises as the turn takes mail (see [`Mailbox::take`]).
    pub fn handling_hops(&self) -> Arc<AtomicU32> {
        self.handling_hops.clone()
    }

    /// The link the comms and delegation tools reach the service through; the service
    /// connects it when it spawns the session.
    pub fn session_link(&self) -> &SessionLink {
        &self.session_link
    }

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

    /// What the session's own model calls cost so far; `None` where its model has no price.
    pub fn cost(&self) -> Option<Usd> {
        self.price.map(|_| self.used.cost)
    }

    /// The provider part of the model id (`anthropic` of `anthropic:claude-sonnet-4-5`).
    pub fn provider_name(&self) -> &str {
        self.model_id.split_once(':').map_or(self.model_id.as_str(), |(provider, _)| provider)
    }

    /// What `usage` costs at the session's price; `None` where it has none.
    pub fn cost_of(&self, usage: &Usage) -> Option<Usd> {
        self.price.map(|price| price.cost(usage))
    }

    /// Its own consumption plus what its children hold and were charged: what its budget is
    /// checked against.
    pub fn charged_consumption(&self) -> Consumption {
        let (tokens, tool_calls) = self.ledger.charged();
        Consumption {
            tokens: self.used.tokens + tokens,
            tool_calls: self.used.tool_calls + tool_calls,
            cost: self.used.cost.saturating_add(self.ledger.charged_cost()),
            ..self.used
        }
    }

    /// The session's delegation ledger (see [`delegation`]).
    pub fn ledger(&self) -> Arc<Ledger> {
        self.ledger.clone()
    }

    /// Makes this the agent of a delegated child (see [`Agent::delegated`]).
    pub fn mark_delegated(&mut self) {
        self.delegated = true;
    }

    /// Reports this child's spend to its parent's `ledger` from now on (see `parent_ledger`).
    pub fn report_spend_to(&mut self, ledger: Arc<Ledger>) {
        self.parent_ledger = Some(ledger);
    }

    /// Tells the parent's ledger, if any, what this child has used so far.
    fn report_spend(&self) {
        if let Some(parent) = &self.parent_ledger {
            parent.child_spent(&self.session_id, &self.charged_consumption());
        }
    }

    /// What a delegated child may still spend on its next model call, checked before the call
    /// is made (security review 2, G9): a carve smaller than the call's input (the history, the
    /// system prompt and the tool declarations, estimated; a lower bound of what the provider
    /// counts) refuses the call
    /// with `Exhausted::Tokens`, and otherwise the call's output is capped to what is left
    /// after that input. `Ok(None)`: no cap (a root session, or no token limit).
    fn call_allowance(&self) -> Result<Option<u32>, crate::model::Exhausted> {
        if !self.delegated {
            return Ok(None);
        }
        let Some(max) = self.budget.max_tokens else { return Ok(None) };
        let left = max.saturating_sub(self.charged_consumption().tokens);
        let input = self.estimated_history_tokens()
            + self.system.as_deref().map_or(0, crate::model::context::estimate_text)
            + self.tool_tokens;
        if input >= left {
            return Err(crate::model::Exhausted::Tokens);
        }
        Ok(Some(u32::try_from(left - input).unwrap_or(u32::MAX)))
    }

    /// Reads the project's instructions and the skills again (a turn starts): an edit applies
    /// from now on. The system text is composed again only when one of them changed.
    fn refresh_instructions(&mut self) {
        let mut changed = false;
        if let Some(source) = &self.instructions_source {
            let read = source.read();
            if read != self.instructions {
                self.instructions = read;
                changed = true;
            }
        }
        if let Some(skills) = &self.skills_listed {
            let section = crate::skills::prompt_section(&skills.available(self.skills.as_deref()));
            if section != self.skills_section {
                self.skills_section = section;
                changed = true;
            }
        }
        if changed {
            let parts = [self.system_prompt.as_deref(), Some(&self.instructions.text), Some(&self.skills_section)];
            let parts: Vec<&str> = parts.into_iter().flatten().filter(|part| !part.is_empty()).collect();
            self.system = (!parts.is_empty()).then(|| parts.join("\n\n"));
        }
    }

    /// The project instruction files the last turn read, root first.
    pub fn project_instruction_files(&self) -> &[crate::model::InstructionFile] {
        &self.instructions.files
    }

    /// A delegated child's turn ended for good: its budget shrinks to what it used, so the
    /// rest, refunded to its parent with its result, cannot be spent here after all.
    fn close_delegated_budget(&mut self) {
        let used = self.charged_consumption();
        let at_most = |limit: Option<u64>, used: u64| Some(limit.map_or(used, |limit| limit.min(used)));
        self.budget = Budget {
            max_tokens: at_most(self.budget.max_tokens, used.tokens),
            max_tool_calls: at_most(self.budget.max_tool_calls, used.tool_calls),
            max_duration_ms: at_most(self.budget.max_duration_ms, crate::model::budget::millis(used.active)),
            // Money closes only where it was limited: a child without a price has no cost to
            // close on, and an unlimited one gave its parent nothing to refund.
            max_cost_usd: self.budget.max_cost_usd.map(|limit| limit.min(used.cost)),
        };
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
            context: self.context_settings,
            tools: self.tool_config.clone(),
            structured_output: self.structured.as_ref().map(|contract| contract.spec().clone()),
            reasoning: self.reasoning,
            agent: self.agent_ref.clone(),
            skills: self.skills.clone(),
            documents: self.documents.clone(),
        }
    }

    /// The held step, if tool calls wait for the caller.
    pub fn pending_step(&self) -> Option<&PendingStep> {
        self.pending.as_ref()
    }

    /// What is known about the history's size.
    pub fn context_state(&self) -> ContextState {
        self.context
    }

    /// Last reported prompt + output, plus estimates of everything appended since.
    pub fn estimated_history_tokens(&self) -> u64 {
        self.context.estimated_history_tokens(&self.history)
    }

    pub fn history_epoch(&self) -> u64 {
        self.history_epoch
    }

    /// The full text of a tool output that was capped in the history, while the agent has it.
    pub fn full_tool_output(&self, tool_use_id: &str) -> Option<String> {
        self.full_outputs.lock().unwrap_or_else(PoisonError::into_inner).get(tool_use_id).cloned()
    }

    /// The agent's full tool outputs, readable from outside the turn (they leave it once saved).
    pub fn full_outputs(&self) -> FullOutputs {
        self.full_outputs.clone()
    }

    /// Full tool outputs a store has not saved yet, `(tool_use_id, content)`.
    pub fn unsaved_tool_outputs(&self) -> Vec<(String, String)> {
        let full_outputs = self.full_outputs.lock().unwrap_or_else(PoisonError::into_inner);
        self.unsaved_outputs
            .iter()
            .filter_map(|id| full_outputs.get(id).map(|content| (id.clone(), content.clone())))
            .collect()
    }

    /// The part of the history not saved yet: its first index and the messages from there on.
    /// Saving these (replacing any stored message at or after that index) brings a store up to
    /// date at a cost proportional to what changed, never to the history's size.
    pub fn unsaved(&self) -> (usize, &[Message]) {
        let from = self.unsaved_from.min(self.history.len());
        (from, &self.history[from..])
    }

    /// Passages of compacted history not saved yet, oldest first.
    pub fn unsaved_recollections(&self) -> &[Recollection] {
        &self.recollections
    }

    /// Passages of compacted history, handed over for good (a service without a store keeps
    /// them in its memory index).
    pub fn take_recollections(&mut self) -> Vec<Recollection> {
        std::mem::take(&mut self.recollections)
    }

    /// Records that everything is saved. Saved full tool outputs leave memory: the store
    /// answers for them from now on.
    pub fn mark_saved(&mut self) {
        self.unsaved_from = self.history.len();
        self.recollections.clear();
        let mut full_outputs = self.full_outputs.lock().unwrap_or_else(PoisonError::into_inner);
        for id in std::mem::take(&mut self.unsaved_outputs) {
            full_outputs.remove(&id);
        }
    }

    /// Drops the history after its first `messages` messages (a rewind to a turn's end, which
    /// holds no step for the caller). The store replaces its copy from there at the next save;
    /// the token figures the provider gave describe the longer history, so they are forgotten.
    pub fn rewind(&mut self, messages: usize) {
        if messages >= self.history.len() {
            return;
        }
        self.rewrite_history().truncate(messages);
        self.unsaved_from = self.unsaved_from.min(messages);
        self.pending = None;
        self.context.history_rewritten();
    }

    /// The history to append to, or whose last message to change. Copy-on-write: a request
    /// still holding the history (one a test provider keeps) keeps it as it was; in a turn,
    /// none does by the time the loop writes.
    fn history_mut(&mut self) -> &mut Vec<Message> {
        Arc::make_mut(&mut self.history)
    }

    /// The history to change anywhere (a rewind, pruning): what the wire wrote of its settled
    /// turns is let go, as they may change.
    fn rewrite_history(&mut self) -> &mut Vec<Message> {
        self.encoded_history = Arc::default();
        Arc::make_mut(&mut self.history)
    }

    /// Counts a model call's tokens in the session's usage and against its budget, and what
    /// they cost: the one place these totals move, for turns, restarted attempts and
    /// compaction's summary calls alike.
    fn charge(&mut self, usage: &Usage) {
        self.usage.add(usage);
        self.used.tokens += usage.total_tokens();
        if let Some(cost) = self.cost_of(usage) {
            self.used.cost += cost;
        }
    }

    /// Gives a freshly built agent the state of a stored session.
    pub(crate) fn restore(&mut self, state: RestoredState) {
        self.unsaved_from = state.history.len();
        self.history = Arc::new(state.history);
        self.encoded_history = Arc::default();
        self.usage = state.usage;
        // A spend not known when it was stored is priced now, from its token totals, if the
        // model has a price today.
        let cost = state.cost.or_else(|| self.cost_of(&state.usage)).unwrap_or_default();
        self.used = Consumption { cost, ..state.used };
        self.turns = state.turns;
        self.context = state.context;
        self.history_epoch = state.history_epoch;
        self.pending = state.pending;
        self.ledger.restore(state.delegation);
        self.delegated = state.delegated;
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
