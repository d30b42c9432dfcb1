//! How much a model may think before it answers, in one vocabulary for both wires.
//!
//! Anthropic counts thinking in tokens (`thinking.budget_tokens`), OpenAI's reasoning models in
//! a level (`reasoning_effort`). A session gives either or both; each wire derives what it
//! needs from what was given, so a session moved to the other wire keeps thinking about as
//! hard.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Reasoning asked of the model (`session_create {reasoning: …}`, or a provider's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reasoning {
    /// How hard to think.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
    /// Thinking budget in tokens (Anthropic; at least 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    Low,
    Medium,
    High,
}

impl Effort {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

impl Reasoning {
    /// The smallest thinking budget Anthropic accepts.
    pub const MIN_BUDGET_TOKENS: u32 = 1024;

    /// Refuses what no provider would take, in the caller's terms.
    pub fn check(&self) -> Result<(), String> {
        match self.budget_tokens {
            Some(budget) if budget < Self::MIN_BUDGET_TOKENS => {
                Err(format!("reasoning.budget_tokens is at least {}, not {budget}", Self::MIN_BUDGET_TOKENS))
            }
            _ => Ok(()),
        }
    }

    /// Anthropic's `thinking.budget_tokens`.
    pub fn budget_tokens(&self) -> u32 {
        let by_effort = match self.effort.unwrap_or(Effort::Medium) {
            Effort::Low => 2_048,
            Effort::Medium => 8_192,
            Effort::High => 16_384,
        };
        self.budget_tokens.unwrap_or(by_effort).max(Self::MIN_BUDGET_TOKENS)
    }

    /// OpenAI's `reasoning_effort`.
    pub fn effort(&self) -> Effort {
        match (self.effort, self.budget_tokens) {
            (Some(effort), _) => effort,
            (None, Some(budget)) if budget < 4_096 => Effort::Low,
            (None, Some(budget)) if budget < 12_288 => Effort::Medium,
            (None, Some(_)) => Effort::High,
            (None, None) => Effort::Medium,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wire_derives_its_own_measure_from_either() {
        let effort = Reasoning { effort: Some(Effort::High), budget_tokens: None };
        assert_eq!((effort.budget_tokens(), effort.effort()), (16_384, Effort::High));
        let budget = Reasoning { effort: None, budget_tokens: Some(3_000) };
        assert_eq!((budget.budget_tokens(), budget.effort()), (3_000, Effort::Low));
        let neither = Reasoning::default();
        assert_eq!((neither.budget_tokens(), neither.effort()), (8_192, Effort::Medium));
        assert!(Reasoning { effort: None, budget_tokens: Some(512) }.check().is_err());
    }
}
