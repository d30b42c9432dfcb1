//! The event types a webhook subscribes to, and which journal events raise them.

use strum::{EnumIter, IntoEnumIterator};

use crate::model::StoredEvent;

/// A webhook event type, named as on the wire (`turn.completed`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter)]
pub enum EventType {
    /// A turn ended with an answer (whatever its stop reason).
    TurnCompleted,
    TurnFailed,
    TurnCancelled,
    /// The session has no turn running: after every turn, however it ended.
    SessionIdle,
    /// A turn ended because a limit of the session's budget was reached.
    BudgetExhausted,
    /// A turn ended holding tool calls for the caller: approvals to give, or client-side tools.
    ApprovalPending,
    SessionArchived,
}

impl EventType {
    pub fn name(self) -> &'static str {
        match self {
            Self::TurnCompleted => "turn.completed",
            Self::TurnFailed => "turn.failed",
            Self::TurnCancelled => "turn.cancelled",
            Self::SessionIdle => "session.idle",
            Self::BudgetExhausted => "budget.exhausted",
            Self::ApprovalPending => "approval.pending",
            Self::SessionArchived => "session.archived",
        }
    }

    /// The type named `name`; the error lists every name.
    pub fn parse(name: &str) -> Result<Self, String> {
        Self::iter().find(|kind| kind.name() == name).ok_or_else(|| {
            let known: Vec<&str> = Self::iter().map(Self::name).collect();
            format!("unknown webhook event {name:?} (known: {})", known.join(", "))
        })
    }

    /// The types journal event `event` raises, in the order they are delivered.
    pub fn raised_by(event: &StoredEvent) -> Vec<Self> {
        match event.kind() {
            "turn_completed" => {
                let mut raised = vec![Self::TurnCompleted];
                let fields = event.event.to_value();
                match fields.get("stop_reason").and_then(serde_json::Value::as_str) {
                    Some("budget_exhausted") => raised.push(Self::BudgetExhausted),
                    Some("pending_tool_calls") => raised.push(Self::ApprovalPending),
                    _ => {}
                }
                raised.push(Self::SessionIdle);
                raised
            }
            "turn_failed" => vec![Self::TurnFailed, Self::SessionIdle],
            "turn_cancelled" => vec![Self::TurnCancelled, Self::SessionIdle],
            "archived" => vec![Self::SessionArchived],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(value: serde_json::Value) -> StoredEvent {
        StoredEvent { seq: 4, turn: 2, at: chrono::Utc::now(), event: value.into() }
    }

    #[test]
    fn turn_ends_raise_their_type_and_idle_and_the_rest_raise_nothing() {
        let names =
            |value| EventType::raised_by(&event(value)).into_iter().map(EventType::name).collect::<Vec<_>>();
        let completed = serde_json::json!({"type": "turn_completed", "turn": 2, "stop_reason": "end_turn"});
        assert_eq!(names(completed), ["turn.completed", "session.idle"]);
        let budget = serde_json::json!({"type": "turn_completed", "turn": 2, "stop_reason": "budget_exhausted"});
        assert_eq!(names(budget), ["turn.completed", "budget.exhausted", "session.idle"]);
        let held = serde_json::json!({"type": "turn_completed", "turn": 2, "stop_reason": "pending_tool_calls"});
        assert_eq!(names(held), ["turn.completed", "approval.pending", "session.idle"]);
        assert_eq!(
            names(serde_json::json!({"type": "turn_failed", "turn": 2, "error": "x"})),
            ["turn.failed", "session.idle"]
        );
        assert_eq!(
            names(serde_json::json!({"type": "turn_cancelled", "turn": 2})),
            ["turn.cancelled", "session.idle"]
        );
        assert_eq!(names(serde_json::json!({"type": "archived"})), ["session.archived"]);
        assert!(names(serde_json::json!({"type": "text_delta", "text": "hi"})).is_empty());
    }

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_known() {
        for kind in EventType::iter() {
            assert_eq!(EventType::parse(kind.name()), Ok(kind));
        }
        let refused = EventType::parse("turn.done").unwrap_err();
        assert!(refused.contains("turn.completed") && refused.contains("session.archived"), "{refused}");
    }
}
