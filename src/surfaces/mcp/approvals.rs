//! Held approvals as MCP form elicitations, and the answers back: one question per call
//! (`decision`: `allow` or `deny`), asked through `elicitation/create` (2025-11-25 clients that
//! declared `elicitation`) or as a task's `inputRequests` (clients of the tasks extension).
//!
//! The rule both paths share: the approvals of a held step are answered **all or none**. Only
//! when every question comes back `accept` with a decision does deputy answer the step (a
//! `session_turn` with those `approvals`); a `decline`, a `cancel`, a malformed answer or no
//! answer in time leaves every approval pending exactly as if nobody had been asked, so the
//! caller can still answer them with `session_turn`.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, InputRequest};
use rmcp::service::{ElicitationMode, RequestContext};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::model::{ApprovalAnswer, Decision, PendingCall, PendingKind, RunResult, TurnStatus};
use crate::session::{SessionService, TurnOptions, TurnRequest};

/// The one field of the form.
pub const DECISION_FIELD: &str = "decision";
/// Characters of a call's arguments shown in the question.
const ARGUMENTS_SHOWN: usize = 600;

/// Whether a held step can be asked about: it holds approvals and nothing else (callback
/// results cannot be elicited; such a step goes back to the caller as `pending_tool_calls`).
pub fn approvals_only(pending: &[PendingCall]) -> bool {
    !pending.is_empty() && pending.iter().all(|call| call.kind == PendingKind::Approval)
}

/// The question for one held call.
pub fn message(call: &PendingCall) -> String {
    let arguments = call.arguments.to_string();
    let mut shown: String = arguments.chars().take(ARGUMENTS_SHOWN).collect();
    if arguments.chars().nth(ARGUMENTS_SHOWN).is_some() {
        shown.push('…');
    }
    format!("deputy: allow the agent to run `{}` ({}) with {shown}?", call.name, call.tool_use_id)
}

/// The form elicitation's params, as JSON (`mode`, `message`, `requestedSchema`).
fn params_json(call: &PendingCall) -> Value {
    json!({
        "mode": "form",
        "message": message(call),
        "requestedSchema": {
            "type": "object",
            "properties": {
                DECISION_FIELD: {
                    "type": "string",
                    "title": "Decision",
                    "description": format!("allow runs {}; deny tells the agent it was refused", call.name),
                    "enum": ["allow", "deny"],
                }
            },
            "required": [DECISION_FIELD],
        }
    })
}

/// The `elicitation/create` params for one held call.
pub fn elicitation(call: &PendingCall) -> Result<ElicitRequestParams, serde_json::Error> {
    serde_json::from_value(params_json(call))
}

/// The same question as a task's input request (keyed by the call's `tool_use_id`).
pub fn input_request(call: &PendingCall) -> Result<InputRequest, serde_json::Error> {
    serde_json::from_value(json!({ "method": "elicitation/create", "params": params_json(call) }))
}

/// The caller's decision in an elicitation result (`{action, content}`), or `None` when it
/// gave none: declined, cancelled, or answered something else.
pub fn decision(result: &Value) -> Option<Decision> {
    if result.get("action")?.as_str()? != "accept" {
        return None;
    }
    match result.get("content")?.get(DECISION_FIELD)?.as_str()? {
        "allow" => Some(Decision::Allow),
        "deny" => Some(Decision::Deny),
        _ => None,
    }
}

/// Every call's answer, or `None` unless all of them were answered (all or none).
pub fn answers(calls: &[PendingCall], results: &[Option<Value>]) -> Option<Vec<ApprovalAnswer>> {
    if calls.len() != results.len() {
        return None;
    }
    calls
        .iter()
        .zip(results)
        .map(|(call, result)| {
            let decision = decision(result.as_ref()?)?;
            Some(ApprovalAnswer { tool_use_id: call.tool_use_id.clone(), decision })
        })
        .collect()
}

/// How long one approval question (`elicitation/create`) waits for its answer; past it the
/// approvals stay pending and the call answers `pending_tool_calls`.
pub const ELICITATION_TIMEOUT: Duration = Duration::from_secs(120);
/// Held steps asked about within one call at most (each answer may lead to another).
const ELICITATION_ROUNDS: usize = 8;

/// Whether a turn's answer should be asked about through `elicitation/create`: it holds
/// approvals alone and the caller declared form elicitation (on 2026-07-28, where servers may
/// not send requests, rmcp refuses the request and the approvals stay pending).
pub(super) fn asks_approvals(run: &RunResult, context: &RequestContext<RoleServer>) -> bool {
    run.status == TurnStatus::PendingToolCalls
        && approvals_only(&run.pending)
        && context.peer.supported_elicitation_modes().contains(&ElicitationMode::Form)
}

/// Asks the caller about each held approval and, when every one is answered, answers the
/// step with a `session_turn` (waiting `wait` as the call did): the turn's new result. Any
/// other outcome (declined, cancelled, no answer within [`ELICITATION_TIMEOUT`], a client
/// error) is the held result, pending as before.
pub(super) async fn elicit_approvals<S: SessionService>(
    service: &S,
    mut run: RunResult,
    context: &RequestContext<RoleServer>,
    wait: Duration,
    cancel: Option<CancellationToken>,
) -> Result<serde_json::Value, crate::error::SessionError> {
    for _ in 0..ELICITATION_ROUNDS {
        if !(run.status == TurnStatus::PendingToolCalls && approvals_only(&run.pending)) {
            break;
        }
        let mut results = Vec::with_capacity(run.pending.len());
        for call in &run.pending {
            let Ok(params) = elicitation(call) else { break };
            let reply = context.peer.create_elicitation_with_timeout(params, Some(ELICITATION_TIMEOUT)).await;
            match reply {
                Ok(result) => results.push(serde_json::to_value(result).ok()),
                Err(error) => {
                    tracing::info!(session_id = %run.session_id, "approval not elicited: {error}");
                    break;
                }
            }
        }
        let Some(answers) = answers(&run.pending, &results) else { break };
        let request = TurnRequest {
            approvals: answers,
            options: TurnOptions { wait: Some(wait), events: None, cancel: cancel.clone() },
            ..TurnRequest::default()
        };
        run = service.start_turn(&run.session_id.clone(), request).await?;
    }
    super::tasks::encode(&run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, kind: PendingKind) -> PendingCall {
        PendingCall {
            tool_use_id: id.into(),
            name: "write_file".into(),
            arguments: json!({"path": "a.txt", "content": "x"}),
            kind,
            expires_at: None,
        }
    }

    #[test]
    fn the_question_is_a_form_with_one_required_choice() {
        let approval = call("toolu_1", PendingKind::Approval);
        let ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } =
            elicitation(&approval).unwrap()
        else {
            panic!("not a form")
        };
        assert!(message.contains("write_file") && message.contains("toolu_1") && message.contains("a.txt"));
        let schema = serde_json::to_value(&requested_schema).unwrap();
        assert_eq!(schema["properties"]["decision"]["enum"], json!(["allow", "deny"]));
        assert_eq!(schema["required"], json!(["decision"]));
        let request = serde_json::to_value(input_request(&approval).unwrap()).unwrap();
        assert_eq!(request["method"], "elicitation/create");
        assert_eq!(request["params"]["mode"], "form");
    }

    #[test]
    fn only_an_accepted_choice_is_a_decision() {
        let accept = |choice: &str| json!({"action": "accept", "content": {"decision": choice}});
        assert_eq!(decision(&accept("allow")), Some(Decision::Allow));
        assert_eq!(decision(&accept("deny")), Some(Decision::Deny));
        assert_eq!(decision(&accept("maybe")), None);
        assert_eq!(decision(&json!({"action": "accept"})), None);
        assert_eq!(decision(&json!({"action": "decline"})), None);
        assert_eq!(decision(&json!({"action": "cancel", "content": {"decision": "allow"}})), None);
        assert_eq!(decision(&json!("allow")), None);
    }

    #[test]
    fn approvals_are_answered_all_or_none() {
        let calls = [call("a", PendingKind::Approval), call("b", PendingKind::Approval)];
        let allow = json!({"action": "accept", "content": {"decision": "allow"}});
        let deny = json!({"action": "accept", "content": {"decision": "deny"}});
        assert_eq!(
            answers(&calls, &[Some(allow.clone()), Some(deny.clone())]),
            Some(vec![
                ApprovalAnswer { tool_use_id: "a".into(), decision: Decision::Allow },
                ApprovalAnswer { tool_use_id: "b".into(), decision: Decision::Deny },
            ])
        );
        assert_eq!(answers(&calls, &[Some(allow.clone()), None]), None);
        assert_eq!(answers(&calls, &[Some(allow), Some(json!({"action": "decline"}))]), None);
        assert_eq!(answers(&calls, &[Some(deny)]), None);
    }

    #[test]
    fn only_steps_of_approvals_alone_are_asked_about() {
        assert!(approvals_only(&[call("a", PendingKind::Approval)]));
        assert!(!approvals_only(&[call("a", PendingKind::Approval), call("b", PendingKind::Callback)]));
        assert!(!approvals_only(&[]));
    }
}
