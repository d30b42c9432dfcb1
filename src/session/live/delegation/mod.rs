//! Delegation on the service: a session's `delegate`, `wait` and `cancel_delegate` tools
//! ([`Delegator`]), the caps, and how a child's result reaches its parent.
//!
//! Children are ordinary sessions, created through the same path as a caller's
//! ([`LiveSessionService::start_session`]) with a [`Lineage`]; every surface works on them. What
//! is particular to them:
//!
//! - **Narrowed tools**: a child's tools are its parent's resolved ones, narrowed by the call
//!   (a sub-workspace, a subset of builtins and MCP servers, the shell only if the parent has
//!   it), never the server's defaults; no callbacks; the parent's approval policy.
//! - **Carved budgets**: see [`crate::agent::delegation`]. The parent's ledger holds the carve
//!   until the child's result reaches the parent: through `delegate` or `wait` (settled at
//!   once), or as a notice in the parent's inbox, settled when the parent's agent takes it.
//! - **Caps**: depth, children per session and delegated sessions per server, checked under one
//!   lock right before the child's first save, so no path skips them and concurrent delegates
//!   cannot overshoot; only sessions not archived count; a refusal is an error at once.
//! - **Notices**: one watcher follows every session's changes; a delegated session whose turn
//!   ended (not held) and whose result nobody collected gets a notice into its parent's inbox.
//!   The `followed` set (children a `delegate` or `wait` call is collecting) and the parent's
//!   ledger decide, under one lock, so a result reaches its parent exactly once.

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::LiveSessionService;
use crate::agent::AgentBuildConfig;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::lineage::ChildUsage;
use crate::model::{Budget, Lineage, PendingCall, RunResult, SessionView, TurnStatus, TurnUsage};
use crate::store::OpenDelegated;
use crate::tools::BuiltinTool;
use crate::tools::delegation::{CancelArgs, DelegateArgs, Delegator, WaitArgs};
use serde::Serialize;

/// Bytes of a child's answer its parent gets in a `delegate` or `wait` result or a notice.
pub const MAX_CHILD_TEXT_BYTES: usize = 8 * 1024;

/// Children one `wait` names at most.
const MAX_WAITED: usize = 64;

/// Sessions a tree walk visits at most (a guard: the caps keep real trees far smaller).
const MAX_TREE: usize = 4096;

/// The `[delegation]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelegationLimits {
    /// Sessions get the delegation tools by default, and `delegate` works.
    pub enabled: bool,
    /// How deep a tree may grow: 1 lets a caller's session delegate, but not its children.
    pub max_depth: u32,
    /// Children not archived per session.
    pub max_children_per_session: usize,
    /// Delegated sessions not archived on this server.
    pub max_live_delegated: usize,
    /// Of those, what one owner's sessions may have, so one tenant cannot take the whole
    /// server's allowance from the others (security review 2, G11).
    pub max_live_delegated_per_owner: usize,
    /// A child's budget where `delegate` names none (each limit capped to what the parent has
    /// left; a limit named by neither takes half of the parent's remaining).
    pub default_budget: Budget,
}

impl Default for DelegationLimits {
    fn default() -> Self {
        Self {
            enabled: true,
            max_depth: 1,
            max_children_per_session: 8,
            max_live_delegated: 32,
            max_live_delegated_per_owner: 16,
            default_budget: Budget::default(),
        }
    }
}

/// A child's turn as its parent learns it (`delegate`, `wait`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChildOutcome {
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub status: TurnStatus,
    /// The child's answer, at most 8 KiB (`session_read` on the child has all of it).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<TurnUsage>,
    /// Tool calls the child holds for a human's approval (answered with `session_turn` on the
    /// child; the parent cannot approve them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `wait` answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WaitOutcome {
    /// Children whose last turn ended (or stopped on approvals).
    pub finished: Vec<ChildOutcome>,
    /// Children still running.
    pub running: Vec<SessionId>,
    /// A message arrived for the parent meanwhile (it is in the conversation next).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mail: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

/// What `cancel_delegate` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cancelled {
    pub session_id: SessionId,
    pub interrupted: bool,
    pub archived: bool,
}

fn refused(why: String) -> SessionError {
    SessionError::invalid(format!("delegation refused: {why}; do the task yourself"))
}

/// A child's turn that ended for good: not running, not held for approvals.
fn ended_for_good(status: TurnStatus) -> bool {
    matches!(status, TurnStatus::Completed | TurnStatus::Cancelled | TurnStatus::Failed)
}

/// A session whose last turn ended for good and that runs nothing now: a finished child.
fn finished(view: &SessionView) -> bool {
    view.state.running_turn.is_none()
        && view.state.last_turn.as_ref().is_some_and(|turn| ended_for_good(turn.status))
}

/// What a child used, as its parent is charged: its own use and its children's (what they
/// used, and what is still held for those at work).
fn usage_of(view: &SessionView) -> ChildUsage {
    let billing = &view.billing;
    ChildUsage {
        tokens: billing.total_tokens + billing.delegated_tokens + billing.reserved_tokens,
        tool_calls: billing.tool_calls + billing.delegated_tool_calls + billing.reserved_tool_calls,
        cost_usd: billing.cost_usd.map(|cost| cost.saturating_add(billing.reserved_cost_usd)),
    }
}

fn bounded(text: &str) -> (String, bool) {
    let kept = crate::text::truncate_at_char_boundary(text, MAX_CHILD_TEXT_BYTES);
    (kept.to_owned(), kept.len() < text.len())
}

fn outcome_of(result: &RunResult, name: Option<String>) -> ChildOutcome {
    let (text, truncated) = bounded(&result.text);
    let running = result.status == TurnStatus::Running;
    ChildOutcome {
        session_id: result.session_id.clone(),
        name,
        status: result.status,
        text,
        truncated,
        structured_output: result.structured_output.clone(),
        usage: (!running).then_some(result.usage),
        pending: result.pending.clone(),
        error: result.error.clone(),
    }
}

impl LiveSessionService {
    /// The same service with other `[delegation]` settings.
    pub fn with_delegation(mut self, limits: DelegationLimits) -> Self {
        self.delegation = limits;
        self
    }

    /// A caller's session gets the delegation tools by default where delegation is enabled;
    /// asking for them where it is not is refused (a switch that does nothing is a defect).
    pub(super) fn offer_delegation(&self, build: &mut AgentBuildConfig) -> Result<(), SessionError> {
        let available = self.delegation.enabled && self.delegation.max_depth > 0;
        if available {
            build.delegation_by_default = true;
            return Ok(());
        }
        let asked = build
            .tools
            .builtins
            .as_ref()
            .is_some_and(|builtins| builtins.iter().any(|builtin| BuiltinTool::DELEGATION.contains(builtin)));
        if asked {
            return Err(SessionError::invalid(
                "builtins: the delegation tools are off on this server ([delegation] enabled = false or max_depth = 0)",
            ));
        }
        Ok(())
    }

    /// Refuses a child of `parent` over the caps. Called under `delegating`, right before the
    /// child's first save, so every path to a child passes here and concurrent delegates
    /// count each other.
    pub(super) async fn check_caps(&self, parent: &SessionId) -> Result<(), SessionError> {
        let limits = self.delegation;
        let owner = self.live(parent).ok_or_else(|| SessionError::not_found(parent.clone()))?.view().state.owner;
        let (of_parent, OpenDelegated { on_server, of_owner }) = match &self.store {
            Some(store) => {
                let open = store.children(parent).await?.iter().filter(|child| child.open).count();
                (open, store.open_delegated(&owner).await?)
            }
            None => {
                let handles = self.live_handles();
                let lineages: Vec<(Lineage, String)> =
                    handles.iter().map(|handle| (handle.lineage(), handle.view().state.owner)).collect();
                let of_parent =
                    lineages.iter().filter(|(lineage, _)| lineage.parent_id.as_ref() == Some(parent)).count();
                let delegated = lineages.iter().filter(|(lineage, _)| lineage.is_delegated());
                let counts = delegated.fold(OpenDelegated::default(), |counts, (_, of)| OpenDelegated {
                    on_server: counts.on_server + 1,
                    of_owner: counts.of_owner + usize::from(*of == owner),
                });
                (of_parent, counts)
            }
        };
        if of_parent >= limits.max_children_per_session {
            return Err(refused(format!(
                "this session already has {of_parent} children not archived (max_children_per_session = {}); \
                 cancel_delegate {{archive: true}} frees a finished one's slot",
                limits.max_children_per_session
            )));
        }
        if of_owner >= limits.max_live_delegated_per_owner {
            return Err(refused(format!(
                "this owner's sessions already have {of_owner} delegated sessions not archived \
                 (max_live_delegated_per_owner = {}); cancel_delegate {{archive: true}} frees a finished one's slot",
                limits.max_live_delegated_per_owner
            )));
        }
        if on_server >= limits.max_live_delegated {
            return Err(refused(format!(
                "this server already runs {on_server} delegated sessions not archived (max_live_delegated = {})",
                limits.max_live_delegated
            )));
        }
        Ok(())
    }
}

/// The answer the model sees, or the error text.
fn for_the_model<T: Serialize>(result: Result<T, SessionError>) -> Result<serde_json::Value, String> {
    let value = result.map_err(|error| error.to_string())?;
    serde_json::to_value(value).map_err(|error| error.to_string())
}

impl Delegator for LiveSessionService {
    fn delegate(
        &self,
        parent: SessionId,
        args: DelegateArgs,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move { for_the_model(self.delegate_from(parent, args, cancel).await) })
    }

    fn wait_children(
        &self,
        parent: SessionId,
        args: WaitArgs,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move { for_the_model(self.wait_from(parent, args, cancel).await) })
    }

    fn cancel_child(
        &self,
        parent: SessionId,
        args: CancelArgs,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move { for_the_model(self.cancel_from(parent, args).await) })
    }
}

mod delegate;
mod notices;
mod tree;
mod wait;

pub(super) use notices::Followed;
