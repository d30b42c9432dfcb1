//! A parent's [`Ledger`]: the budgets it carved for its children, shared by its agent (whose
//! budget checks count them) and the session service (which carves them when the agent's
//! `delegate` tool asks, while the agent's turn is running).
//!
//! Tokens and tool calls are *transferred*: a child's carve is held from the parent at once,
//! and when the child's result reaches the parent the hold is replaced by what the child
//! actually used. Turn time is *capped*, not transferred: a child runs beside its parent's
//! clock (a parent that waits spends its own time too), so charging the child's seconds again
//! would bill them twice; a child just never gets more time than its parent has left. Money is
//! transferred like tokens.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::ids::SessionId;
use crate::llm::pricing::Usd;
use crate::model::lineage::{ChildUsage, Reservation, carve};
use crate::model::{Budget, Consumption, DelegationBook};

#[derive(Debug, Default)]
pub struct Ledger {
    state: Mutex<LedgerState>,
}

#[derive(Debug, Default)]
struct LedgerState {
    book: DelegationBook,
    budget: Budget,
    /// The agent's own consumption as of its last step (published before tools run).
    own: Consumption,
}

impl Ledger {
    pub fn new(budget: Budget) -> Self {
        Self { state: Mutex::new(LedgerState { budget, ..LedgerState::default() }) }
    }

    fn state(&self) -> MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The book of a stored session, on resume.
    pub fn restore(&self, book: DelegationBook) {
        self.state().book = book;
    }

    /// The agent's own consumption, published before each step's tools run so a carve sees it.
    pub fn observe(&self, own: Consumption) {
        self.state().own = own;
    }

    /// Tokens and tool calls delegation costs the budget now: held plus charged.
    pub fn charged(&self) -> (u64, u64) {
        self.state().book.charged()
    }

    /// Dollars delegation costs the budget now: held plus charged.
    pub fn charged_cost(&self) -> Usd {
        self.state().book.charged_cost()
    }

    pub fn book(&self) -> DelegationBook {
        self.state().book.clone()
    }

    /// Carves a budget for `child` (per dimension the smaller of `asked`, or `default`, and
    /// what is left) and holds its tokens and tool calls. Refuses when a limited dimension has
    /// nothing left: the parent must do the work itself.
    pub fn reserve(&self, child: &SessionId, asked: Budget, default: Budget) -> Result<Budget, String> {
        let mut state = self.state();
        let (held_tokens, held_calls) = state.book.charged();
        let budget = state.budget;
        let left = Budget {
            max_tokens: budget.max_tokens.map(|max| max.saturating_sub(state.own.tokens + held_tokens)),
            max_tool_calls: budget.max_tool_calls.map(|max| max.saturating_sub(state.own.tool_calls + held_calls)),
            max_duration_ms: budget.remaining_time(&state.own).map(crate::model::budget::millis),
            max_cost_usd: budget
                .max_cost_usd
                .map(|max| max.saturating_sub(state.own.cost.saturating_add(state.book.charged_cost()))),
        };
        let spent = [
            ("tokens", left.max_tokens),
            ("tool calls", left.max_tool_calls),
            ("time", left.max_duration_ms),
            ("money", left.max_cost_usd.map(Usd::picos)),
        ]
        .into_iter()
        .find(|(_, left)| *left == Some(0));
        if let Some((what, _)) = spent {
            return Err(format!(
                "this session has no {what} left in its budget to give a child; do the task yourself"
            ));
        }
        let carved = carve(asked, default, left);
        let reservation = Reservation {
            tokens: budget.max_tokens.and(carved.max_tokens),
            tool_calls: budget.max_tool_calls.and(carved.max_tool_calls),
            cost: budget.max_cost_usd.and(carved.max_cost_usd),
        };
        state.book.reserved.insert(child.clone(), reservation);
        Ok(carved)
    }

    /// A running child reports what it has used so far: its hold grows to at least that, so
    /// the parent's budget and view count a child's spend while it runs, not only once its
    /// result arrives (security review 2, G9). Nothing for a child not held here.
    pub fn child_spent(&self, child: &SessionId, used: &Consumption) {
        let mut state = self.state();
        if let Some(held) = state.book.reserved.get_mut(child) {
            held.tokens = held.tokens.map(|tokens| tokens.max(used.tokens));
            held.tool_calls = held.tool_calls.map(|calls| calls.max(used.tool_calls));
            held.cost = held.cost.map(|cost| cost.max(used.cost));
        }
    }

    /// Gives a hold back whole: the child was never created.
    pub fn release(&self, child: &SessionId) {
        self.state().book.reserved.remove(child);
    }

    /// The child's result reached the parent: the hold becomes what the child used. Once per
    /// child (a child's budget closes with its first finished turn); `false` if already
    /// settled, or never held here.
    pub fn settle(&self, child: &SessionId, used: ChildUsage) -> bool {
        let mut state = self.state();
        if state.book.reserved.remove(child).is_none() {
            return false;
        }
        state.book.charge(used);
        true
    }

    /// Whether `child` still holds a reservation here (its result has not arrived).
    pub fn holds(&self, child: &SessionId) -> bool {
        self.state().book.reserved.contains_key(child)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carve_is_held_then_settled_to_what_the_child_used() {
        let ledger = Ledger::new(Budget { max_tokens: Some(1000), ..Budget::default() });
        ledger.observe(Consumption { tokens: 100, ..Consumption::default() });
        let child = SessionId::from_string("c");
        let asked = Budget { max_tokens: Some(5000), ..Budget::default() };
        let carved = ledger.reserve(&child, asked, Budget::default()).unwrap();
        assert_eq!(carved.max_tokens, Some(900), "capped to what the parent has left");
        assert_eq!(ledger.charged(), (900, 0));
        let second = SessionId::from_string("d");
        assert!(ledger.reserve(&second, Budget::default(), Budget::default()).is_err(), "nothing left to give");
        assert!(ledger.settle(&child, ChildUsage { tokens: 250, tool_calls: 2, cost_usd: None }));
        assert_eq!(ledger.charged(), (250, 2), "the refund landed");
        assert!(!ledger.settle(&child, ChildUsage { tokens: 250, tool_calls: 2, cost_usd: None }), "settled once");
    }

    #[test]
    fn a_running_childs_spend_past_its_hold_counts_at_once() {
        let ledger = Ledger::new(Budget { max_tokens: Some(1000), ..Budget::default() });
        let child = SessionId::from_string("c");
        let carved = ledger.reserve(&child, Budget::default(), Budget::default()).unwrap();
        assert_eq!(carved.max_tokens, Some(500));
        ledger.child_spent(&child, &Consumption { tokens: 100, ..Consumption::default() });
        assert_eq!(ledger.charged(), (500, 0), "within its hold");
        ledger.child_spent(&child, &Consumption { tokens: 5000, tool_calls: 1, ..Consumption::default() });
        assert_eq!(ledger.charged(), (5000, 0), "past its hold: what it used");
        ledger.child_spent(&SessionId::from_string("other"), &Consumption { tokens: 9, ..Consumption::default() });
        assert_eq!(ledger.charged(), (5000, 0));
    }

    #[test]
    fn an_unlimited_parent_holds_nothing_but_records_what_children_used() {
        let ledger = Ledger::new(Budget::default());
        let child = SessionId::from_string("c");
        let asked = Budget { max_tool_calls: Some(3), ..Budget::default() };
        assert_eq!(ledger.reserve(&child, asked, Budget::default()).unwrap(), asked);
        assert_eq!(ledger.charged(), (0, 0));
        assert!(ledger.settle(&child, ChildUsage { tokens: 40, tool_calls: 1, cost_usd: None }));
        assert_eq!(ledger.book().delegated_tokens, 40);
    }

    #[test]
    fn money_is_held_and_settled_like_tokens() {
        let ledger = Ledger::new(Budget { max_cost_usd: Some(Usd::from_mills(100)), ..Budget::default() });
        ledger.observe(Consumption { cost: Usd::from_mills(20), ..Consumption::default() });
        let child = SessionId::from_string("c");
        let carved = ledger.reserve(&child, Budget::default(), Budget::default()).unwrap();
        assert_eq!(carved.max_cost_usd, Some(Usd::from_mills(40)), "half of the $0.08 left");
        assert_eq!(ledger.charged_cost(), Usd::from_mills(40));
        let used = ChildUsage { tokens: 10, tool_calls: 0, cost_usd: Some(Usd::from_mills(7)) };
        assert!(ledger.settle(&child, used));
        assert_eq!(ledger.charged_cost(), Usd::from_mills(7), "the unused $0.033 came back");
        let spender = SessionId::from_string("d");
        ledger.observe(Consumption { cost: Usd::from_mills(93), ..Consumption::default() });
        let refusal = ledger.reserve(&spender, Budget::default(), Budget::default()).unwrap_err();
        assert!(refusal.contains("no money left"), "{refusal}");
    }
}
