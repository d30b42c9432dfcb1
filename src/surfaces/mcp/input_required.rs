//! Held approvals for 2026-07-28 clients that declared form elicitation but not the tasks
//! extension (Claude Code, the official SDKs' plain clients). On 2026-07-28 a server may not
//! send `elicitation/create` itself, so the call that stopped on approvals answers an MRTR
//! `InputRequiredResult` instead: one allow/deny form per held call ([`super::approvals`]),
//! keyed by its `tool_use_id`, and a sealed `requestState`. The client asks its user and
//! retries the very same `tools/call` with the answers and the state; deputy then answers the
//! held step (a `session_turn` with those approvals) and the retry gets the turn's next result,
//! or another round if the turn stops on approvals again.
//!
//! Nothing waits on deputy's side between the rounds: the turn is simply held, as for any
//! caller, so a client that never retries leaves the approvals pending (its model can still
//! answer them with `session_turn`). The same all-or-none rule as the other paths applies: a
//! `decline`, a `cancel`, a missing answer or a retry later than [`ELICITATION_TIMEOUT`]
//! answers the held `pending_tool_calls` result unchanged.
//!
//! The state is untrusted input echoed by the client: it is sealed with rmcp's
//! [`RequestStateCodec`] (HMAC-SHA256 under a key drawn per process), its payload names the
//! session, the turn and the held call ids, and it is bound (associated data) to the caller
//! and the tool, so another caller, another tool or an edited state cannot open it. A state
//! of a step that is no longer held (answered already, or another turn since) is refused.
//! After a restart the key is new and old states are refused; the approvals stay pending.

use std::time::Duration;

use chrono::Utc;
use rmcp::model::{ClientCapabilities, InputRequests, InputRequiredResult, InputResponses, ProtocolVersion};
use rmcp::model::{RequestStateCodec, SealOptions};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approvals::{self, ELICITATION_TIMEOUT};
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::{ApprovalAnswer, RunResult, TurnStatus};
use crate::session::{SessionService, TurnOptions, TurnRequest};

/// Rounds of questions within one call at most (each answer may lead to another held step).
const ROUNDS: u32 = 8;

/// What the sealed `requestState` says: the held step deputy asked about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldStep {
    session_id: SessionId,
    turn: u64,
    /// The held calls' `tool_use_id`s, in call order: the keys of the input requests.
    calls: Vec<String>,
    /// The call's wait, for the turn its answers continue.
    wait_ms: u64,
    round: u32,
    /// When deputy asked (Unix ms): answers later than [`ELICITATION_TIMEOUT`] are not applied.
    asked_at_ms: i64,
}

impl HeldStep {
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.wait_ms)
    }

    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }
}

/// What a retry with answers comes to.
pub enum Resumed {
    /// The turn stopped on approvals again: another round.
    Ask(InputRequiredResult),
    /// The tool's answer: the turn's new result, the held one (nothing applied), or an error.
    Done(Result<RunResult, SessionError>),
}

/// Seals and opens the `requestState` of approval rounds. Cheap to clone; one per server, so
/// every connection (and every stateless HTTP request) opens what another sealed.
#[derive(Clone)]
pub struct ApprovalRounds {
    /// `None` when the system had no randomness for a key: nobody is asked, approvals stay pending.
    codec: Option<RequestStateCodec>,
}

impl Default for ApprovalRounds {
    fn default() -> Self {
        let mut key = [0_u8; 32];
        let codec = match getrandom::fill(&mut key) {
            Ok(()) => RequestStateCodec::try_new(key.to_vec()).ok(),
            Err(error) => {
                tracing::warn!("no randomness for the request-state key ({error}): approvals will not be asked");
                None
            }
        };
        Self { codec }
    }
}

/// Binds a state to who may retry with it and to which tool.
fn associated_data(caller: &str, tool: &str) -> Vec<u8> {
    format!("deputy/approval-rounds/v1\n{caller}\n{tool}").into_bytes()
}

/// Whether the client declared form elicitation (a bare `elicitation: {}` means form).
fn declares_form(capabilities: &ClientCapabilities) -> bool {
    capabilities
        .elicitation
        .as_ref()
        .is_some_and(|elicitation| elicitation.form.is_some() || elicitation.url.is_none())
}

/// Whether a turn's answer should be asked about with an `InputRequiredResult`: it holds
/// approvals alone, the call negotiated 2026-07-28 or later (older peers cannot read the
/// result) and its client declared form elicitation.
pub fn asks(run: &RunResult, context: &RequestContext<RoleServer>) -> bool {
    run.status == TurnStatus::PendingToolCalls
        && approvals::approvals_only(&run.pending)
        && context
            .protocol_version()
            .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
        && context.client_capabilities().is_some_and(|capabilities| declares_form(&capabilities))
}

/// Every held call's answer, or `None` unless all of them were accepted with a decision.
fn answers(calls: &[String], responses: Option<&InputResponses>) -> Option<Vec<ApprovalAnswer>> {
    let responses = responses?;
    calls
        .iter()
        .map(|id| {
            let decision = approvals::decision(responses.get(id)?)?;
            Some(ApprovalAnswer { tool_use_id: id.clone(), decision })
        })
        .collect()
}

impl ApprovalRounds {
    /// The `InputRequiredResult` asking about `run`'s held approvals, or `None` if it cannot
    /// be built (no key, a question that does not encode): the held result is answered then.
    pub fn ask(
        &self,
        run: &RunResult,
        caller: &str,
        tool: &str,
        wait: Duration,
        round: u32,
    ) -> Option<InputRequiredResult> {
        let codec = self.codec.as_ref()?;
        let mut requests = InputRequests::new();
        for call in &run.pending {
            requests.insert(call.tool_use_id.clone(), approvals::input_request(call).ok()?);
        }
        let step = HeldStep {
            session_id: run.session_id.clone(),
            turn: run.turn,
            calls: run.pending.iter().map(|call| call.tool_use_id.clone()).collect(),
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            round,
            asked_at_ms: Utc::now().timestamp_millis(),
        };
        let aad = associated_data(caller, tool);
        let sealed = codec.seal_json_with(&step, &SealOptions::new().associated_data(&aad)).ok()?;
        Some(InputRequiredResult::new(Some(requests), Some(sealed)))
    }

    /// Opens a retry's `requestState`: only a state deputy sealed for this caller and tool,
    /// unchanged, naming the session the arguments name (if they name one). Any failure is
    /// one error (the codec's details stay in the log).
    pub fn open(&self, sealed: &str, caller: &str, tool: &str, arguments: &Value) -> Result<HeldStep, McpError> {
        let refused = || McpError::invalid_params("requestState is not one deputy issued for this call", None);
        let codec = self.codec.as_ref().ok_or_else(refused)?;
        let step: HeldStep = codec.open_json_with(sealed, &associated_data(caller, tool)).map_err(|error| {
            tracing::info!("requestState refused: {error}");
            refused()
        })?;
        match arguments.get("session_id").and_then(Value::as_str) {
            Some(named) if named != step.session_id.as_str() => Err(refused()),
            _ => Ok(step),
        }
    }

    /// Applies a retry's answers to the held step: all accepted in time → the step is answered
    /// (the turn goes on, waiting as `options` say) and the result is the turn's next; anything
    /// else → the held result as it is.
    pub async fn resume<S: SessionService>(
        &self,
        service: &S,
        step: HeldStep,
        responses: Option<&InputResponses>,
        options: TurnOptions,
        caller: &str,
        tool: &str,
    ) -> Resumed {
        let view = match service.read(&step.session_id, None).await {
            Ok(view) => view,
            Err(error) => return Resumed::Done(Err(error)),
        };
        let held = match view.state.last_turn.as_deref() {
            Some(held)
                if held.turn == step.turn
                    && held.status == TurnStatus::PendingToolCalls
                    && held.pending.iter().map(|call| &call.tool_use_id).eq(step.calls.iter()) =>
            {
                held.clone()
            }
            _ => {
                return Resumed::Done(Err(SessionError::invalid(format!(
                    "the approvals of turn {} of session {} are no longer pending; see session_read",
                    step.turn, step.session_id
                ))));
            }
        };
        let late = Utc::now().timestamp_millis().saturating_sub(step.asked_at_ms)
            > i64::try_from(ELICITATION_TIMEOUT.as_millis()).unwrap_or(i64::MAX);
        let Some(answers) = answers(&step.calls, responses).filter(|_| !late) else {
            return Resumed::Done(Ok(held));
        };
        let request = TurnRequest { approvals: answers, options, ..TurnRequest::default() };
        let run = match service.start_turn(&step.session_id, request).await {
            Ok(run) => run,
            Err(error) => return Resumed::Done(Err(error)),
        };
        let again = run.status == TurnStatus::PendingToolCalls && approvals::approvals_only(&run.pending);
        if again
            && step.round + 1 < ROUNDS
            && let Some(ask) = self.ask(&run, caller, tool, step.wait(), step.round + 1)
        {
            return Resumed::Ask(ask);
        }
        Resumed::Done(Ok(run))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::{PendingCall, PendingKind};

    fn held() -> RunResult {
        let mut run = RunResult::running(SessionId::from_string("s1"), 3);
        run.status = TurnStatus::PendingToolCalls;
        run.pending = vec![PendingCall {
            tool_use_id: "toolu_1".into(),
            name: "write_file".into(),
            arguments: json!({"path": "a.txt"}),
            kind: PendingKind::Approval,
            expires_at: None,
        }];
        run
    }

    #[test]
    fn a_state_opens_only_for_its_caller_its_tool_and_its_session() {
        let rounds = ApprovalRounds::default();
        let ask = rounds.ask(&held(), "alice", "session_turn", Duration::from_secs(30), 0).unwrap();
        let requests = serde_json::to_value(ask.input_requests.as_ref().unwrap()).unwrap();
        assert_eq!(requests["toolu_1"]["method"], "elicitation/create");
        assert_eq!(
            requests["toolu_1"]["params"]["requestedSchema"]["properties"]["decision"]["enum"],
            json!(["allow", "deny"])
        );
        let sealed = ask.request_state.unwrap();

        let step = rounds.open(&sealed, "alice", "session_turn", &json!({"session_id": "s1"})).unwrap();
        assert_eq!(
            (step.session_id.as_str(), step.turn, step.calls.as_slice()),
            ("s1", 3, ["toolu_1".to_owned()].as_slice())
        );
        assert_eq!(step.wait(), Duration::from_secs(30));
        assert!(rounds.open(&sealed, "bob", "session_turn", &json!({"session_id": "s1"})).is_err());
        assert!(rounds.open(&sealed, "alice", "session_create", &json!({})).is_err());
        assert!(rounds.open(&sealed, "alice", "session_turn", &json!({"session_id": "s2"})).is_err());
        let mut edited = sealed.clone();
        edited.insert(10, 'A');
        assert!(rounds.open(&edited, "alice", "session_turn", &json!({"session_id": "s1"})).is_err());
        assert!(
            ApprovalRounds::default().open(&sealed, "alice", "session_turn", &json!({})).is_err(),
            "another key"
        );
    }

    #[test]
    fn only_accepted_decisions_for_every_call_are_answers() {
        let calls = ["a".to_owned(), "b".to_owned()];
        let allow = json!({"action": "accept", "content": {"decision": "allow"}});
        let both = InputResponses::from([("a".to_owned(), allow.clone()), ("b".to_owned(), allow.clone())]);
        assert_eq!(answers(&calls, Some(&both)).map(|answers| answers.len()), Some(2));
        let declined =
            InputResponses::from([("a".to_owned(), allow), ("b".to_owned(), json!({"action": "decline"}))]);
        assert_eq!(answers(&calls, Some(&declined)), None);
        assert_eq!(answers(&calls, None), None);
    }

    #[test]
    fn a_bare_elicitation_capability_means_form() {
        let caps =
            |value: Value| serde_json::from_value::<ClientCapabilities>(json!({"elicitation": value})).unwrap();
        assert!(declares_form(&caps(json!({}))));
        assert!(declares_form(&caps(json!({"form": {}, "url": {}}))));
        assert!(!declares_form(&caps(json!({"url": {}}))));
        assert!(!declares_form(&ClientCapabilities::default()));
    }
}
