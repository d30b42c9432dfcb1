//! Where a live agent meets its [`SessionRecord`]: the record of a new session, the counters a
//! turn leaves behind, the state a stored session resumes from, and a turn's report as the
//! result callers see.
//!
//! The record itself is plain data in [`crate::model`] (the store persists it and never sees an
//! agent); everything here needs the agent, so it lives in the session layer above both.

use std::collections::BTreeMap;

use chrono::Utc;

use crate::agent::{Agent, RestoredState, TurnEnd, TurnReport};
use crate::error::ErrorKind;
use crate::ids::SessionId;
use crate::llm::Message;
use crate::model::budget::millis;
use crate::model::{RunResult, SessionRecord, TurnMark, TurnStatus, TurnUsage};

impl SessionRecord {
    /// The record of a session whose agent was just built.
    pub fn new(
        session_id: SessionId,
        agent: &Agent,
        title: String,
        labels: BTreeMap<String, String>,
        host_mode: bool,
        owner: &str,
    ) -> Self {
        let mut record = Self::empty(session_id, agent.spec(), title, Utc::now());
        record.owner = owner.to_owned();
        record.labels = labels;
        record.host_mode = host_mode;
        record.absorb(agent, false);
        record
    }

    /// Takes the agent's counters after a turn (`turn_ended`), a compaction or a rewind.
    ///
    /// A turn that left a whole conversation (it ended holding no step for the caller) marks
    /// where it ends, for forks and rewinds. A replaced history (compaction) forgets the marks
    /// that pointed into the old one; the new history ends with the turn the old one did.
    pub fn absorb(&mut self, agent: &Agent, turn_ended: bool) {
        let mut ending = turn_ended.then_some(agent.turns());
        if agent.history_epoch() != self.history_epoch {
            ending = ending.or(self.turn_marks.last().map(|mark| mark.turn));
            self.turn_marks.clear();
        }
        let used = agent.consumption();
        self.turns = agent.turns();
        self.message_count = agent.history().len() as u64;
        self.usage = agent.usage();
        self.cost_usd = agent.cost();
        self.tool_calls = used.tool_calls;
        self.active_ms = millis(used.active);
        self.context = agent.context_state();
        self.estimated_history_tokens = agent.estimated_history_tokens();
        self.history_epoch = agent.history_epoch();
        self.pending = agent.pending_step().cloned();
        self.delegation = agent.ledger().book();
        self.project_instructions = agent.project_instruction_files().to_vec();
        // A delegated child's budget closes when its turn ends.
        self.agent.budget = agent.budget();
        if let Some(turn) = ending.filter(|&turn| turn > 0 && self.pending.is_none()) {
            self.turn_marks.push(TurnMark { turn, messages: self.message_count });
        }
    }

    /// The state to hand a rebuilt agent, with the stored history.
    pub fn restored_state(&self, history: Vec<Message>) -> RestoredState {
        RestoredState {
            history,
            usage: self.usage,
            used: self.consumption(),
            turns: self.turns,
            context: self.context,
            history_epoch: self.history_epoch,
            pending: self.pending.clone(),
            delegation: self.delegation.clone(),
            delegated: self.lineage.is_delegated(),
            cost: self.cost_usd,
        }
    }
}

impl RunResult {
    pub fn from_report(session_id: SessionId, report: &TurnReport) -> Self {
        let (status, error, error_kind) = match &report.end {
            TurnEnd::Completed { .. } | TurnEnd::BudgetExhausted(_) => (TurnStatus::Completed, None, None),
            TurnEnd::Cancelled => (TurnStatus::Cancelled, None, None),
            TurnEnd::Failed(error) => (TurnStatus::Failed, Some(error.message.clone()), Some(error.kind.into())),
            TurnEnd::PendingToolCalls => (TurnStatus::PendingToolCalls, None, None),
            TurnEnd::Panicked(message) => (TurnStatus::Failed, Some(message.clone()), Some(ErrorKind::Internal)),
        };
        Self {
            session_id,
            status,
            turn: report.turn,
            text: report.text.clone(),
            reasoning: report.reasoning.clone(),
            stop_reason: Some(report.stop_reason()),
            usage: TurnUsage { tokens: report.usage, cost_usd: report.cost },
            tool_calls: report.tool_calls,
            error,
            error_kind,
            pending: report.pending.clone(),
            structured_output: report.structured_output.clone(),
            structured_output_errors: report.structured_output_errors.clone(),
        }
    }
}
