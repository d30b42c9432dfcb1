//! Tool calls held for the caller: callback tools it executes, and calls waiting for its
//! approval.
//!
//! When a step of the model asks for such calls, the turn stops with the step *open*: the
//! history ends with the assistant's `tool_use` message, and a [`PendingStep`] holds every call
//! of that step in call order — the builtin ones already run (their outputs kept here, not yet
//! in the history), the others waiting. The caller's next `session_turn` answers all the
//! waiting calls at once ([`resolve`]); the step's results then enter the history as one user
//! message, in call order, and the loop calls the model again. The step never half-closes, so
//! the history invariant (every `tool_use` gets a `tool_result` right after it) holds at the
//! model's next call. The pending step is part of the session record, so it survives a
//! restart with the store.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::error::SessionError;
use crate::model::{ApprovalAnswer, Decision, PendingCall, PendingKind, ToolResultAnswer};
use crate::tools::ToolOutput;

/// What the model sees for a denied call.
pub const DENIED: &str = "denied by the caller";

/// How one waiting call is settled.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// The caller's result of a callback.
    Result(ToolOutput),
    /// Approved: the tool runs now (a callback tool becomes a waiting callback).
    Allow,
    /// Denied by the caller or by the timeout; the model gets this error.
    Deny(String),
}

/// Every waiting call of the open step, settled. Built only by [`resolve`], so it is complete.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Resolution {
    pub settled: BTreeMap<String, Settlement>,
}

/// Checks the caller's answers against the waiting calls and settles all of them; approvals
/// older than `expires_at` are denied whatever the caller said. Fails with `INVALID_REQUEST`
/// (and changes nothing) for an answer to no waiting call, an answer of the wrong kind, two
/// answers to one call, or a waiting call left unanswered.
pub fn resolve(
    waiting: &[PendingCall],
    tool_results: Vec<ToolResultAnswer>,
    approvals: Vec<ApprovalAnswer>,
    now: DateTime<Utc>,
) -> Result<Resolution, SessionError> {
    if waiting.is_empty() {
        if tool_results.is_empty() && approvals.is_empty() {
            return Ok(Resolution::default());
        }
        return Err(SessionError::invalid(
            "no tool calls are pending: `tool_results` and `approvals` answer a turn that stopped with \
             status \"pending_tool_calls\"",
        ));
    }
    let kinds: BTreeMap<&str, &PendingCall> =
        waiting.iter().map(|call| (call.tool_use_id.as_str(), call)).collect();
    let mut answered = BTreeSet::new();
    let mut settled = BTreeMap::new();
    let mut check = |id: &str, expected: PendingKind| -> Result<bool, SessionError> {
        let Some(call) = kinds.get(id) else {
            let known: Vec<&str> = kinds.keys().copied().collect();
            return Err(SessionError::invalid(format!(
                "unknown tool_use_id {id:?}: the pending calls are {known:?}"
            )));
        };
        if call.kind != expected {
            let (field, other) = match call.kind {
                PendingKind::Callback => ("tool_results", "a callback"),
                PendingKind::Approval => ("approvals", "an approval"),
            };
            return Err(SessionError::invalid(format!("tool_use_id {id:?} is {other}: answer it in `{field}`")));
        }
        if !answered.insert(id.to_owned()) {
            return Err(SessionError::invalid(format!("tool_use_id {id:?} is answered twice")));
        }
        Ok(call.expires_at.is_some_and(|at| now >= at))
    };
    for answer in tool_results {
        check(&answer.tool_use_id, PendingKind::Callback)?;
        let output = ToolOutput { content: answer.content, is_error: answer.is_error };
        settled.insert(answer.tool_use_id, Settlement::Result(output));
    }
    for answer in approvals {
        let expired = check(&answer.tool_use_id, PendingKind::Approval)?;
        let settlement = match answer.decision {
            _ if expired => Settlement::Deny(timed_out()),
            Decision::Allow => Settlement::Allow,
            Decision::Deny => Settlement::Deny(DENIED.to_owned()),
        };
        settled.insert(answer.tool_use_id, settlement);
    }
    let mut missing = Vec::new();
    for call in waiting {
        if settled.contains_key(&call.tool_use_id) {
            continue;
        }
        if call.expires_at.is_some_and(|at| now >= at) {
            settled.insert(call.tool_use_id.clone(), Settlement::Deny(timed_out()));
        } else {
            missing.push(call.tool_use_id.as_str());
        }
    }
    if !missing.is_empty() {
        return Err(SessionError::invalid(format!(
            "tool calls are pending: answer every one of them ({missing:?}) with `tool_results` (callbacks) or \
             `approvals`; nothing was changed"
        )));
    }
    Ok(Resolution { settled })
}

fn timed_out() -> String {
    format!("{DENIED}: the approval timed out")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn call(id: &str, kind: PendingKind, expires_at: Option<DateTime<Utc>>) -> PendingCall {
        PendingCall { tool_use_id: id.into(), name: "t".into(), arguments: serde_json::json!({}), kind, expires_at }
    }

    fn result(id: &str) -> ToolResultAnswer {
        ToolResultAnswer { tool_use_id: id.into(), content: "ok".into(), is_error: false }
    }

    #[test]
    fn every_waiting_call_must_be_answered_once_with_its_kind() {
        let now = Utc::now();
        let waiting = [call("a", PendingKind::Callback, None), call("b", PendingKind::Approval, None)];
        let allow = || vec![ApprovalAnswer { tool_use_id: "b".into(), decision: Decision::Allow }];
        let invalid = |results: Vec<ToolResultAnswer>, approvals: Vec<ApprovalAnswer>| {
            resolve(&waiting, results, approvals, now).unwrap_err().code() == ErrorCode::InvalidRequest
        };
        assert!(invalid(vec![result("a")], vec![]), "b is missing");
        assert!(invalid(vec![result("a"), result("zz")], allow()), "unknown id");
        assert!(invalid(vec![result("a"), result("a")], allow()), "twice");
        assert!(invalid(vec![result("a"), result("b")], vec![]), "b is an approval");
        let resolution = resolve(&waiting, vec![result("a")], allow(), now).unwrap();
        assert_eq!(resolution.settled["b"], Settlement::Allow);
        assert!(resolve(&[], vec![result("a")], vec![], now).is_err(), "nothing pending");
    }

    #[test]
    fn an_expired_approval_is_denied_even_unanswered() {
        let now = Utc::now();
        let waiting = [call("b", PendingKind::Approval, Some(now - chrono::Duration::seconds(1)))];
        let resolution = resolve(&waiting, vec![], vec![], now).unwrap();
        assert!(matches!(&resolution.settled["b"], Settlement::Deny(why) if why.contains("timed out")));
        let allow = vec![ApprovalAnswer { tool_use_id: "b".into(), decision: Decision::Allow }];
        assert!(matches!(resolve(&waiting, vec![], allow, now).unwrap().settled["b"], Settlement::Deny(_)));
    }
}
