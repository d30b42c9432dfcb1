//! [`StopReason`]: why a turn stopped, as callers read it in `stop_reason`.
//!
//! The model's own reasons (`end_turn`, `max_tokens`, …) and deputy's (`budget_exhausted`,
//! `cancelled`, `error`, `pending_tool_calls`, `structured_output_invalid`) in one enum, so code branches on a variant and
//! never on a string. On the wire it is the same snake_case string as always; a reason this
//! build does not know (a provider's new value, or a newer record) travels as
//! [`StopReason::Other`] unchanged.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::llm;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model stopped to call tools (a turn normally goes on after them).
    ToolUse,
    /// The model's answer reached `max_tokens`.
    MaxTokens,
    StopSequence,
    Refusal,
    /// A limit of the session's budget ended the turn; the history is valid.
    BudgetExhausted,
    /// The caller interrupted the turn.
    Cancelled,
    /// The provider failed.
    Error,
    /// Tool calls wait for the caller's answers.
    PendingToolCalls,
    /// The final answer never validated against the turn's output schema, retries included;
    /// `structured_output_errors` says why. The session stays usable.
    StructuredOutputInvalid,
    /// A reason this build does not know, kept as sent.
    Other(String),
}

impl StopReason {
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::Refusal => "refusal",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Cancelled => "cancelled",
            Self::Error => "error",
            Self::PendingToolCalls => "pending_tool_calls",
            Self::StructuredOutputInvalid => "structured_output_invalid",
            Self::Other(other) => other,
        }
    }

    /// The reason a wire string names; unknown strings become [`StopReason::Other`].
    pub fn parse(text: &str) -> Self {
        match text {
            "end_turn" => Self::EndTurn,
            "tool_use" => Self::ToolUse,
            "max_tokens" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            "refusal" => Self::Refusal,
            "budget_exhausted" => Self::BudgetExhausted,
            "cancelled" => Self::Cancelled,
            "error" => Self::Error,
            "pending_tool_calls" => Self::PendingToolCalls,
            "structured_output_invalid" => Self::StructuredOutputInvalid,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl From<llm::StopReason> for StopReason {
    fn from(reason: llm::StopReason) -> Self {
        match reason {
            llm::StopReason::EndTurn => Self::EndTurn,
            llm::StopReason::ToolUse => Self::ToolUse,
            llm::StopReason::MaxTokens => Self::MaxTokens,
            llm::StopReason::StopSequence => Self::StopSequence,
            llm::StopReason::Refusal => Self::Refusal,
            llm::StopReason::Other(other) => Self::parse(&other),
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StopReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        Ok(Self::parse(&text))
    }
}

/// A plain string in schemas, as before the enum existed: `Other` keeps the set open, so an
/// `enum` of today's values would be a promise the wire does not keep.
impl JsonSchema for StopReason {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "StopReason".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_round_trips_through_its_wire_string() {
        let all = [
            StopReason::EndTurn,
            StopReason::ToolUse,
            StopReason::MaxTokens,
            StopReason::StopSequence,
            StopReason::Refusal,
            StopReason::BudgetExhausted,
            StopReason::Cancelled,
            StopReason::Error,
            StopReason::PendingToolCalls,
            StopReason::StructuredOutputInvalid,
            StopReason::Other("pause_turn".into()),
        ];
        for reason in all {
            let wire = serde_json::to_value(&reason).unwrap();
            assert_eq!(wire, serde_json::Value::String(reason.as_str().to_owned()));
            assert_eq!(serde_json::from_value::<StopReason>(wire).unwrap(), reason);
        }
        assert_eq!(StopReason::from(llm::StopReason::Other("end_turn".into())), StopReason::EndTurn);
    }
}
