//! Delegation as data: where a session sits in its tree ([`Lineage`]), what a parent reserved
//! for and was charged by its children ([`DelegationBook`]), and how a view shows children and
//! the approvals that wait somewhere below a root ([`ChildView`], [`Escalation`]).
//!
//! Children are ordinary sessions: nothing here changes how a session runs. The record keeps
//! its lineage so lists can filter by tree, and the parent's record keeps its book so budget
//! reservations survive a restart.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::budget::Budget;
use super::pending::PendingCall;
use super::result::TurnStatus;
use super::view::SessionStatus;
use crate::ids::SessionId;
use crate::llm::pricing::Usd;

/// How a session came to be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Created by a caller (`session_create`, the command line).
    #[default]
    Caller,
    /// Created by its parent's `delegate` tool call.
    Delegated,
}

/// Where a session sits in its delegation tree. A caller's session is a root: no parent,
/// its own root, depth 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Lineage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<SessionId>,
    /// The session at the top of the tree (the session itself for a root). `None` only in
    /// records written before delegation, which are roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_id: Option<SessionId>,
    #[serde(default)]
    pub depth: u32,
    #[serde(default)]
    pub origin: Origin,
}

impl Lineage {
    /// The lineage of a root session.
    pub fn root(id: &SessionId) -> Self {
        Self { parent_id: None, root_id: Some(id.clone()), depth: 0, origin: Origin::Caller }
    }

    /// The lineage of a child delegated by `parent`, whose own lineage is `of_parent`.
    pub fn child_of(parent: &SessionId, of_parent: &Lineage) -> Self {
        Self {
            parent_id: Some(parent.clone()),
            root_id: Some(of_parent.root_id.clone().unwrap_or_else(|| parent.clone())),
            depth: of_parent.depth.saturating_add(1),
            origin: Origin::Delegated,
        }
    }

    /// The root of the tree of session `id`.
    pub fn root_of(&self, id: &SessionId) -> SessionId {
        self.root_id.clone().unwrap_or_else(|| id.clone())
    }

    pub fn is_delegated(&self) -> bool {
        self.parent_id.is_some()
    }
}

/// What one child has on its parent's book.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Tokens and tool calls held for the child until its result reaches the parent; `None`
    /// where the parent is unlimited (nothing to hold).
    pub tokens: Option<u64>,
    pub tool_calls: Option<u64>,
    /// Dollars held the same way, where the parent has a cost limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Usd>,
}

/// A parent's side of delegation: budgets held for children whose result has not reached it
/// yet, and what its children used once it did. Both count against the parent's own budget.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegationBook {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reserved: BTreeMap<SessionId, Reservation>,
    /// Tokens the children used, charged as their results arrived.
    #[serde(default)]
    pub delegated_tokens: u64,
    #[serde(default)]
    pub delegated_tool_calls: u64,
    /// What the children's tokens cost, charged as their results arrived (those with a price).
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub delegated_cost: Usd,
    /// Children whose results arrived without a cost (their model has no known price): while
    /// there are any, the session's total cost is unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unpriced_children: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl DelegationBook {
    /// Tokens and tool calls held for children right now.
    pub fn held(&self) -> (u64, u64) {
        self.reserved.values().fold((0, 0), |(tokens, calls), held| {
            (tokens + held.tokens.unwrap_or(0), calls + held.tool_calls.unwrap_or(0))
        })
    }

    /// Everything delegation costs the parent's budget: what is held plus what was charged.
    pub fn charged(&self) -> (u64, u64) {
        let (tokens, calls) = self.held();
        (tokens + self.delegated_tokens, calls + self.delegated_tool_calls)
    }

    /// Dollars held for children right now.
    pub fn held_cost(&self) -> Usd {
        self.reserved.values().filter_map(|held| held.cost).sum()
    }

    /// Everything delegation costs the parent's cost budget: held plus charged.
    pub fn charged_cost(&self) -> Usd {
        self.held_cost().saturating_add(self.delegated_cost)
    }

    /// What the children that reported cost: `None` while one of them had no price.
    pub fn delegated_cost_usd(&self) -> Option<Usd> {
        (self.unpriced_children == 0).then_some(self.delegated_cost)
    }

    /// Charges a child's result: what it used replaces what was held for it.
    pub fn charge(&mut self, used: ChildUsage) {
        self.delegated_tokens += used.tokens;
        self.delegated_tool_calls += used.tool_calls;
        match used.cost_usd {
            Some(cost) => self.delegated_cost += cost,
            None => self.unpriced_children += 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// The budget a child gets: per dimension the smaller of what was asked (or the default) and
/// what the parent has left. Where neither names a limit, a limited parent gives half of what
/// it has left — never all of it, or a parent that starts a child in the background would be
/// out of budget before it could wait for it; a dimension unlimited on both sides stays
/// unlimited.
pub fn carve(asked: Budget, default: Budget, parent_left: Budget) -> Budget {
    let pick = |asked: Option<u64>, default: Option<u64>, left: Option<u64>| match (asked.or(default), left) {
        (Some(asked), Some(left)) => Some(asked.min(left)),
        (None, Some(left)) => Some(left.div_ceil(2)),
        (asked, None) => asked,
    };
    Budget {
        max_tokens: pick(asked.max_tokens, default.max_tokens, parent_left.max_tokens),
        max_tool_calls: pick(asked.max_tool_calls, default.max_tool_calls, parent_left.max_tool_calls),
        max_duration_ms: pick(asked.max_duration_ms, default.max_duration_ms, parent_left.max_duration_ms),
        max_cost_usd: pick(
            asked.max_cost_usd.map(Usd::picos),
            default.max_cost_usd.map(Usd::picos),
            parent_left.max_cost_usd.map(Usd::picos),
        )
        .map(Usd::from_picos),
    }
}

/// A child's result as it reaches its parent: everything the child used so far. The parent
/// settles its reservation for the child when it takes the message carrying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChildUsage {
    pub tokens: u64,
    pub tool_calls: u64,
    /// What its tokens cost; absent where its model (or a child of its own) has no price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
}

/// A child as its parent's view lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChildView {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub status: SessionStatus,
    /// How its last turn ended (absent before it ended one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<TurnStatus>,
    pub total_tokens: u64,
}

/// A session below a root whose tool calls wait for a human: answer them with `session_turn`
/// on that session (seed 004's root escalation queue, as a view).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Escalation {
    pub session_id: SessionId,
    pub depth: u32,
    pub pending: Vec<PendingCall>,
}

/// Children a view lists at most.
pub const MAX_CHILDREN_SHOWN: usize = 50;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carve_is_the_smaller_of_asked_and_left_per_dimension() {
        let left = Budget {
            max_tokens: Some(1000),
            max_tool_calls: None,
            max_duration_ms: Some(5000),
            max_cost_usd: Some(Usd::from_mills(1_000)),
        };
        let asked = Budget {
            max_tokens: Some(5000),
            max_tool_calls: Some(3),
            max_duration_ms: None,
            max_cost_usd: Some(Usd::from_mills(5_000)),
        };
        let carved = carve(asked, Budget::default(), left);
        let expected = Budget {
            max_tokens: Some(1000),
            max_tool_calls: Some(3),
            max_duration_ms: Some(2500),
            max_cost_usd: Some(Usd::from_mills(1_000)),
        };
        assert_eq!(carved, expected);
        let half = carve(Budget::default(), Budget::default(), left).max_cost_usd;
        assert_eq!(half, Some(Usd::from_mills(500)), "half of the money left where nobody names a limit");
        let default = Budget { max_tokens: Some(200), ..Budget::default() };
        assert_eq!(carve(Budget::default(), default, left).max_tokens, Some(200));
        assert_eq!(carve(Budget::default(), Budget::default(), left).max_tokens, Some(500), "half of what is left");
        assert_eq!(carve(Budget::default(), Budget::default(), Budget::default()), Budget::default());
    }

    #[test]
    fn the_book_charges_what_is_held_and_what_was_used() {
        let mut book = DelegationBook::default();
        let child = SessionId::from_string("c");
        book.reserved
            .insert(child, Reservation { tokens: Some(300), tool_calls: None, cost: Some(Usd::from_mills(2)) });
        book.delegated_tokens = 50;
        book.delegated_cost = Usd::from_mills(1);
        assert_eq!(book.charged(), (350, 0));
        assert_eq!(book.held(), (300, 0));
        assert_eq!(book.charged_cost(), Usd::from_mills(3));
        assert_eq!(book.delegated_cost_usd(), Some(Usd::from_mills(1)));
        book.charge(ChildUsage { tokens: 10, tool_calls: 1, cost_usd: None });
        assert_eq!(book.delegated_cost_usd(), None, "a child without a price makes the total unknown");
        assert_eq!(book.delegated_tokens, 60);
    }
}
