//! [`SessionRecord`]: everything about a session except its history, in one small value.
//!
//! It is the single source of a session's state and billing: the actor keeps it current after
//! every turn, `read` and `list` render it ([`SessionRecord::view`], [`SessionRecord::summary`]),
//! and the store persists it beside the append-only history. A session read from the store and
//! a live one therefore cannot disagree on what they show.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::budget::{Consumption, millis};
use super::context::ContextState;
use super::inbox::InboxView;
use super::lineage::{DelegationBook, Lineage};
use super::pending::PendingStep;
use super::result::RunResult;
use super::spec::AgentSpec;
use super::transcript::{ForkOrigin, TurnMarks};
use super::view::{
    Billing, BudgetRemaining, ContextView, SessionState, SessionStatus, SessionSummary, SessionView,
};
use crate::ids::SessionId;
use crate::llm::Usage;
use crate::llm::pricing::Usd;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub session_id: SessionId,
    pub agent: AgentSpec,
    pub title: String,
    /// The subject that created the session; `local` for records written before owners were.
    #[serde(default = "super::view::local_owner")]
    pub owner: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub host_mode: bool,
    /// The session's name among its peers, unique in its peer group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The peer group, when the caller chose one (else the session is its own group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_group: Option<String>,
    /// Turns started by mail since the caller's last turn (host mode; bounded by
    /// `max_auto_turns`).
    #[serde(default)]
    pub auto_turns: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Turns finished.
    pub turns: u64,
    /// Messages in the current history.
    pub message_count: u64,
    /// Bumped when compaction replaces the history.
    #[serde(default)]
    pub history_epoch: u64,
    pub usage: Usage,
    /// What the session's own model calls cost; `None` where that is not known (its model has
    /// no price, or the record was stored before costs were kept: it is then priced from
    /// `usage` when the session resumes, if its model has a price by then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
    pub tool_calls: u64,
    pub active_ms: u64,
    #[serde(default)]
    pub last_turn: Option<std::sync::Arc<RunResult>>,
    #[serde(default)]
    pub archived: bool,
    /// What is known about the history's size, to resume token accounting after a restart.
    #[serde(default)]
    pub context: ContextState,
    #[serde(default)]
    pub estimated_history_tokens: u64,
    /// A step held for the caller. Persisted here rather than in the history: the history
    /// keeps the step's `tool_use` message, and its results are appended once answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingStep>,
    /// The session journal's watermark: how many events are stored (the next event's seq).
    /// Records written before the journal have none: their journal starts at 0.
    #[serde(default)]
    pub event_seq: u64,
    /// Where the session sits in its delegation tree (records from before delegation: a root).
    #[serde(default)]
    pub lineage: Lineage,
    /// What the session reserved for and was charged by its children.
    #[serde(default, skip_serializing_if = "DelegationBook::is_empty")]
    pub delegation: DelegationBook,
    /// The project instruction files its last turn gave the model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub project_instructions: Vec<super::view::InstructionFile>,
    /// Where the newest finished turns end in the history: what a fork or a rewind may reach.
    #[serde(default, skip_serializing_if = "TurnMarks::is_empty")]
    pub turn_marks: TurnMarks,
    /// The session and turn this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
}

impl SessionRecord {
    /// A record with no turns yet, created `at`: what every session starts from.
    pub fn empty(session_id: SessionId, agent: AgentSpec, title: String, at: DateTime<Utc>) -> Self {
        Self {
            session_id,
            agent,
            title,
            owner: super::view::local_owner(),
            labels: BTreeMap::new(),
            host_mode: false,
            name: None,
            peer_group: None,
            auto_turns: 0,
            created_at: at,
            updated_at: at,
            turns: 0,
            message_count: 0,
            history_epoch: 0,
            usage: Usage::default(),
            cost_usd: None,
            tool_calls: 0,
            active_ms: 0,
            last_turn: None,
            archived: false,
            context: ContextState::default(),
            estimated_history_tokens: 0,
            pending: None,
            event_seq: 0,
            lineage: Lineage::default(),
            delegation: DelegationBook::default(),
            project_instructions: Vec::new(),
            turn_marks: TurnMarks::default(),
            forked_from: None,
        }
    }

    /// Counters to restore into a rehydrated agent.
    pub fn consumption(&self) -> Consumption {
        Consumption {
            tokens: self.usage.total_tokens(),
            tool_calls: self.tool_calls,
            active: std::time::Duration::from_millis(self.active_ms),
            cost: self.cost_usd.unwrap_or_default(),
        }
    }

    /// What the session cost, its children's included; `None` where a price is unknown.
    pub fn total_cost(&self) -> Option<Usd> {
        Some(self.cost_usd?.saturating_add(self.delegation.delegated_cost_usd()?))
    }

    /// The status a session at rest has: idle, or archived.
    pub fn resting_status(&self) -> SessionStatus {
        if self.archived { SessionStatus::Archived } else { SessionStatus::Idle }
    }

    pub fn view(&self, status: SessionStatus, running_turn: Option<u64>) -> SessionView {
        let budget = self.agent.budget;
        let used = self.charged_consumption();
        let (reserved_tokens, reserved_tool_calls) = self.delegation.held();
        SessionView {
            session_id: self.session_id.clone(),
            state: SessionState {
                status,
                model: self.agent.model.clone(),
                title: self.title.clone(),
                owner: self.owner.clone(),
                labels: self.labels.clone(),
                host_mode: self.host_mode,
                name: self.name.clone(),
                peer_group: self.peer_group.clone(),
                lineage: Lineage { root_id: Some(self.lineage.root_of(&self.session_id)), ..self.lineage.clone() },
                children: Vec::new(),
                escalations: Vec::new(),
                inbox: InboxView { auto_turns: self.auto_turns, ..InboxView::default() },
                inbox_parked: Vec::new(),
                turns: self.turns,
                running_turn,
                message_count: usize::try_from(self.message_count).unwrap_or(usize::MAX),
                created_at: self.created_at,
                updated_at: self.updated_at,
                last_turn: self.last_turn.clone(),
                pending: self
                    .pending
                    .as_ref()
                    .map(|step| step.waiting(self.agent.tools.approval_timeout_ms))
                    .unwrap_or_default(),
                context: ContextView {
                    context_window: self.agent.context.context_window,
                    threshold_tokens: self.agent.context.threshold_tokens,
                    last_input_tokens: self.context.last_input_tokens,
                    estimated_history_tokens: self.estimated_history_tokens,
                    compactions: self.context.compactions,
                    history_epoch: self.history_epoch,
                },
                unconfined: self.agent.tools.unconfined.clone(),
                project_instructions: self.project_instructions.clone(),
                agent: self.agent.agent.clone(),
                forked_from: self.forked_from.clone(),
            },
            billing: Billing {
                usage: self.usage,
                total_tokens: self.usage.total_tokens(),
                cost_usd: self.total_cost(),
                tool_calls: self.tool_calls,
                active_ms: self.active_ms,
                delegated_tokens: self.delegation.delegated_tokens,
                delegated_tool_calls: self.delegation.delegated_tool_calls,
                reserved_tokens,
                reserved_tool_calls,
                delegated_cost_usd: self.delegation.delegated_cost_usd(),
                reserved_cost_usd: self.delegation.held_cost(),
                budget,
                remaining: BudgetRemaining {
                    tokens: budget.max_tokens.map(|max| max.saturating_sub(used.tokens)),
                    tool_calls: budget.remaining_tool_calls(&used),
                    duration_ms: budget.remaining_time(&used).map(millis),
                    cost_usd: budget.remaining_cost(&used),
                },
            },
        }
    }

    pub fn summary(&self, status: SessionStatus) -> SessionSummary {
        SessionSummary {
            session_id: self.session_id.clone(),
            status,
            model: self.agent.model.clone(),
            title: self.title.clone(),
            owner: self.owner.clone(),
            labels: self.labels.clone(),
            turns: self.turns,
            cost_usd: self.total_cost(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            host_mode: self.host_mode,
            name: self.name.clone(),
            parent_id: self.lineage.parent_id.clone(),
            depth: self.lineage.depth,
        }
    }

    /// The session's own consumption plus what its children hold and were charged: what its
    /// budget is measured against.
    pub fn charged_consumption(&self) -> Consumption {
        let (tokens, tool_calls) = self.delegation.charged();
        let own = self.consumption();
        Consumption {
            tokens: own.tokens + tokens,
            tool_calls: own.tool_calls + tool_calls,
            active: own.active,
            cost: own.cost.saturating_add(self.delegation.charged_cost()),
        }
    }

    /// The group whose sessions see this one as a peer: the chosen label, else the session
    /// itself (until delegation gives it a tree).
    pub fn peer_group(&self) -> String {
        self.peer_group.clone().unwrap_or_else(|| self.session_id.to_string())
    }

    /// Where the session is found among peers: its group, within its owner's sessions (one
    /// subject never sees another's sessions as peers, whatever group label both chose).
    pub fn peer_key(&self) -> String {
        peer_key(&self.owner, &self.peer_group())
    }
}

/// The key of a peer group of `owner`'s sessions.
pub fn peer_key(owner: &str, group: &str) -> String {
    format!("{owner}\u{0}{group}")
}

#[cfg(test)]
impl SessionRecord {
    /// A stored-session record for tests that need many sessions without running turns.
    pub(crate) fn for_test(id: &str, updated_at: DateTime<Utc>, message_count: u64) -> Self {
        let spec = AgentSpec {
            model: "test:model".into(),
            system_prompt: None,
            max_tokens: 100,
            budget: super::budget::Budget::default(),
            context: super::context::ContextSettings::default(),
            tools: crate::tools::ToolConfig::legacy(),
            structured_output: None,
            reasoning: None,
            agent: None,
            skills: None,
            documents: None,
        };
        let mut record = Self::empty(SessionId::from_string(id), spec, format!("title of {id}"), updated_at);
        record.message_count = message_count;
        record
    }
}
