//! Per-session limits. Running out ends a turn cleanly with `stop_reason: "budget_exhausted"`,
//! keeping the history valid; it is a result, not an error.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::llm::pricing::Usd;

/// Limits over the whole life of a session. An absent limit means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Tokens of all model calls.
    pub max_tokens: Option<u64>,
    /// Tool calls.
    pub max_tool_calls: Option<u64>,
    /// Time running turns, in ms.
    pub max_duration_ms: Option<u64>,
    /// Cost in USD (models of known price).
    #[serde(default)]
    pub max_cost_usd: Option<Usd>,
}

/// What a session has consumed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Consumption {
    pub tokens: u64,
    pub tool_calls: u64,
    pub active: Duration,
    /// What the tokens cost at the session's price (zero where it has none).
    pub cost: Usd,
}

/// Which limit ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    Tokens,
    ToolCalls,
    Duration,
    Cost,
}

impl Exhausted {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Tokens => "token budget exhausted",
            Self::ToolCalls => "tool-call budget exhausted",
            Self::Duration => "time budget exhausted",
            Self::Cost => "cost budget exhausted",
        }
    }
}

impl Budget {
    /// The first limit that is used up, if any. Checked before every model call.
    pub fn exhausted(&self, used: &Consumption) -> Option<Exhausted> {
        if self.max_tokens.is_some_and(|max| used.tokens >= max) {
            return Some(Exhausted::Tokens);
        }
        if self.max_tool_calls.is_some_and(|max| used.tool_calls >= max) {
            return Some(Exhausted::ToolCalls);
        }
        if self.remaining_time(used).is_some_and(|left| left.is_zero()) {
            return Some(Exhausted::Duration);
        }
        if self.max_cost_usd.is_some_and(|max| used.cost >= max) {
            return Some(Exhausted::Cost);
        }
        None
    }

    /// How many more tool calls may run, if limited.
    pub fn remaining_tool_calls(&self, used: &Consumption) -> Option<u64> {
        self.max_tool_calls.map(|max| max.saturating_sub(used.tool_calls))
    }

    /// How much money is left, if limited.
    pub fn remaining_cost(&self, used: &Consumption) -> Option<Usd> {
        self.max_cost_usd.map(|max| max.saturating_sub(used.cost))
    }

    /// How much turn time is left, if limited.
    pub fn remaining_time(&self, used: &Consumption) -> Option<Duration> {
        self.max_duration_ms.map(|max| Duration::from_millis(max).saturating_sub(used.active))
    }
}

/// A duration in whole milliseconds, as records and views report it (saturating: no real
/// duration reaches `u64::MAX` ms).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_is_checked_at_its_boundary() {
        let budget = Budget {
            max_tokens: Some(100),
            max_tool_calls: Some(2),
            max_duration_ms: Some(1000),
            max_cost_usd: Some(Usd::from_mills(10)),
        };
        let mut used = Consumption {
            tokens: 99,
            tool_calls: 1,
            active: Duration::from_millis(999),
            cost: Usd::from_picos(Usd::from_mills(10).picos() - 1),
        };
        assert_eq!(budget.exhausted(&used), None);
        used.tokens = 100;
        assert_eq!(budget.exhausted(&used), Some(Exhausted::Tokens));
        used.tokens = 0;
        used.tool_calls = 2;
        assert_eq!(budget.exhausted(&used), Some(Exhausted::ToolCalls));
        used.tool_calls = 0;
        used.active = Duration::from_millis(1000);
        assert_eq!(budget.exhausted(&used), Some(Exhausted::Duration));
        used.active = Duration::ZERO;
        used.cost = Usd::from_mills(10);
        assert_eq!(budget.exhausted(&used), Some(Exhausted::Cost));
        assert_eq!(budget.remaining_cost(&used), Some(Usd::ZERO));
        assert_eq!(Budget::default().exhausted(&used), None);
    }
}
