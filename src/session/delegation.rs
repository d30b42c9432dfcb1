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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::LiveSessionService;
use super::{Launch, NewSession, title_of};
use crate::agent::factory::ChildBuild;
use crate::agent::{AgentBuildConfig, AgentFactory, RestoredState};
use crate::caller::{Caller, Scope};
use crate::error::SessionError;
use crate::ids::{MessageId, SessionId};
use crate::llm::Message;
use crate::llm::Usage;
use crate::model::inbox::{InboxMessage, MessageSender};
use crate::model::lineage::{ChildUsage, MAX_CHILDREN_SHOWN};
use crate::model::{
    AgentSpec, Budget, ChildView, Escalation, Lineage, PendingCall, RunResult, SessionState, SessionView,
    TurnStatus,
};
use crate::model::{SessionList, SessionStatus, SessionSummary};
use crate::session::actor::SessionHandle;
use crate::session::types::{DEFAULT_PAGE, ListQuery, MAX_PAGE, MAX_WAIT, TurnOptions};
use crate::store::persistence_disabled;
use crate::tools::delegation::{
    CancelArgs, ChildContext, DEFAULT_WAIT_MS, DelegateArgs, Delegator, MAX_WAIT_MS, MIN_WAIT_MS, WaitArgs,
    WaitMode,
};
use crate::tools::policy::AuditTag;
use crate::tools::{BuiltinTool, Grants, ToolConfig};
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
            default_budget: Budget::default(),
        }
    }
}

/// How a live session's agent was built: its children are built with the same factory and
/// grants, from its resolved spec.
pub struct Provenance {
    pub factory: Arc<AgentFactory>,
    pub grants: Grants,
    pub spec: AgentSpec,
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
    pub usage: Option<Usage>,
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

/// Children whose results are being collected, and children whose notice was sent.
#[derive(Debug, Default)]
pub(super) struct Followed {
    /// Children a `delegate` or `wait` call collects itself, with the number of such calls.
    collecting: HashMap<SessionId, usize>,
    /// Children whose notice is in their parent's inbox (removed when they are archived).
    noticed: HashSet<SessionId>,
}

impl Followed {
    /// An archived session leaves the bookkeeping.
    pub(super) fn forget(&mut self, id: &SessionId) {
        self.noticed.remove(id);
    }
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

/// What a child used, as its parent is charged: its own use and its children's.
fn usage_of(view: &SessionView) -> ChildUsage {
    let billing = &view.billing;
    ChildUsage {
        tokens: billing.total_tokens + billing.delegated_tokens + billing.reserved_tokens,
        tool_calls: billing.tool_calls + billing.delegated_tool_calls + billing.reserved_tool_calls,
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

/// A child's tools: its parent's resolved ones, narrowed by the `delegate` call.
fn narrow(parent: &ToolConfig, args: &DelegateArgs) -> Result<ToolConfig, SessionError> {
    let workspace = match (&args.workspace, &parent.workspace) {
        (None, workspace) => workspace.clone(),
        (Some(_), None) => {
            return Err(SessionError::invalid("workspace: this session has no workspace to give a child part of"));
        }
        (Some(dir), Some(root)) => {
            let asked = Path::new(dir);
            let joined = if asked.is_absolute() { asked.to_path_buf() } else { root.join(asked) };
            let canonical = std::fs::canonicalize(&joined)
                .map_err(|err| SessionError::invalid(format!("workspace {dir}: {err}")))?;
            if !canonical.starts_with(root) || !canonical.is_dir() {
                return Err(SessionError::invalid(format!(
                    "workspace {dir}: a child's workspace is a directory at or below this session's ({})",
                    root.display()
                )));
            }
            Some(canonical)
        }
    };
    let builtins = match &args.builtins {
        None => parent.builtins.clone(),
        Some(asked) => {
            if let Some(missing) = asked.iter().find(|tool| !parent.builtins.contains(tool)) {
                return Err(SessionError::invalid(format!(
                    "builtins: {} is not among this session's tools, and a child gets only a subset",
                    missing.name()
                )));
            }
            let mut builtins = asked.clone();
            builtins.sort();
            builtins.dedup();
            builtins
        }
    };
    let shell = match args.shell {
        None => parent.shell,
        Some(false) => None,
        Some(true) => Some(
            parent
                .shell
                .ok_or_else(|| SessionError::invalid("shell: this session has no shell to give a child"))?,
        ),
    };
    let mcp_servers = match &args.mcp_servers {
        None => parent.mcp_servers.clone(),
        Some(names) => names
            .iter()
            .map(|name| {
                parent.mcp_servers.iter().find(|server| server.name == *name).cloned().ok_or_else(|| {
                    SessionError::invalid(format!("mcp_servers: {name:?} is not one of this session's servers"))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(ToolConfig {
        workspace,
        builtins,
        shell,
        callbacks: Vec::new(),
        approval: parent.approval.clone(),
        approval_timeout_ms: parent.approval_timeout_ms,
        mcp_servers,
    })
}

impl LiveSessionService {
    /// The same service with other `[delegation]` settings.
    pub fn with_delegation(mut self, limits: DelegationLimits) -> Self {
        self.delegation = limits;
        self
    }

    fn followed(&self) -> MutexGuard<'_, Followed> {
        self.followed.lock().unwrap_or_else(PoisonError::into_inner)
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
        let (of_parent, on_server) = match &self.store {
            Some(store) => {
                let open = store.children(parent).await?.iter().filter(|child| child.open).count();
                (open, store.open_delegated().await?)
            }
            None => {
                let lineages: Vec<Lineage> = self.live_handles().iter().map(SessionHandle::lineage).collect();
                let of_parent =
                    lineages.iter().filter(|lineage| lineage.parent_id.as_ref() == Some(parent)).count();
                (of_parent, lineages.iter().filter(|lineage| lineage.is_delegated()).count())
            }
        };
        if of_parent >= limits.max_children_per_session {
            return Err(refused(format!(
                "this session already has {of_parent} children not archived (max_children_per_session = {}); \
                 cancel_delegate {{archive: true}} frees a finished one's slot",
                limits.max_children_per_session
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

    /// The children of `parent`: every one ever with a store (archived too), the live ones
    /// without.
    async fn children_of(&self, parent: &SessionId, open_only: bool) -> Result<Vec<SessionId>, SessionError> {
        if let Some(store) = &self.store {
            let children = store.children(parent).await?;
            return Ok(children
                .into_iter()
                .filter(|child| child.open || !open_only)
                .map(|child| child.session_id)
                .collect());
        }
        Ok(self
            .live_handles()
            .iter()
            .filter(|handle| handle.lineage().parent_id.as_ref() == Some(parent))
            .map(|handle| handle.id().clone())
            .collect())
    }

    /// `id`'s descendants not archived, breadth first (so every parent before its children).
    pub(super) async fn descendants(&self, id: &SessionId) -> Result<Vec<SessionId>, SessionError> {
        self.tree_below(id, true).await
    }

    /// `id`'s descendants, breadth first; archived ones too unless `open_only`.
    async fn tree_below(&self, id: &SessionId, open_only: bool) -> Result<Vec<SessionId>, SessionError> {
        let mut found = Vec::new();
        let mut queue = VecDeque::from([id.clone()]);
        let mut seen = HashSet::from([id.clone()]);
        while let Some(next) = queue.pop_front() {
            for child in self.children_of(&next, open_only).await? {
                if found.len() >= MAX_TREE {
                    return Ok(found);
                }
                if seen.insert(child.clone()) {
                    found.push(child.clone());
                    queue.push_back(child);
                }
            }
        }
        Ok(found)
    }

    /// A session's view, live or stored.
    pub(super) async fn view_of(&self, id: &SessionId) -> Result<Option<SessionView>, SessionError> {
        if let Some(handle) = self.live(id) {
            return Ok(Some(handle.view()));
        }
        match &self.store {
            Some(store) => Ok(store.record(id).await?.map(|record| record.view(record.resting_status(), None))),
            None => Ok(None),
        }
    }

    /// `list` filtered to a tree (`parent_id`, `root_id`): the tree's sessions the caller may
    /// see, paged like any list.
    pub(super) async fn list_tree(&self, caller: &Caller, query: ListQuery) -> Result<SessionList, SessionError> {
        let open_only = !query.include_archived;
        let ids = match (&query.parent_id, &query.root_id) {
            (Some(parent), _) => self.children_of(parent, open_only).await?,
            (None, Some(root)) => {
                let mut ids = vec![root.clone()];
                ids.extend(self.tree_below(root, open_only).await?);
                ids
            }
            (None, None) => Vec::new(),
        };
        let mut summaries = Vec::new();
        for id in ids {
            let Some(view) = self.view_of(&id).await? else { continue };
            let lineage = &view.state.lineage;
            let fits = caller.may_use(&view.state.owner)
                && (query.include_archived || view.state.status != SessionStatus::Archived)
                && query.root_id.as_ref().is_none_or(|root| lineage.root_id.as_ref() == Some(root));
            if fits {
                summaries.push(SessionSummary::from(&view));
            }
        }
        summaries.sort_by_key(|summary| std::cmp::Reverse(summary.list_position()));
        let total = summaries.len();
        let after = query.after.as_ref();
        let limit = query.limit.unwrap_or(DEFAULT_PAGE).min(MAX_PAGE);
        let candidates: Vec<SessionSummary> = summaries
            .into_iter()
            .filter(|summary| after.is_none_or(|after| after.is_before(&summary.list_position())))
            .skip(query.offset)
            .collect();
        let more = candidates.len() > limit;
        let sessions: Vec<SessionSummary> = candidates.into_iter().take(limit).collect();
        let next_cursor = if more { sessions.last().map(|summary| summary.list_position().cursor()) } else { None };
        Ok(SessionList { sessions, total, next_cursor })
    }

    /// Adds the session's children and the escalations below it to its view.
    pub(super) async fn with_tree(&self, mut view: SessionView) -> Result<SessionView, SessionError> {
        let id = view.session_id.clone();
        let children = self.children_of(&id, false).await?;
        if children.is_empty() {
            return Ok(view);
        }
        let mut shown = Vec::new();
        for child in &children {
            if let Some(child_view) = self.view_of(child).await? {
                shown.push((child_view.state.created_at, child_view));
            }
        }
        shown.sort_by_key(|(created_at, _)| std::cmp::Reverse(*created_at));
        view.state.children = shown
            .iter()
            .take(MAX_CHILDREN_SHOWN)
            .map(|(_, child)| ChildView {
                session_id: child.session_id.clone(),
                name: child.state.name.clone(),
                status: child.state.status,
                last_turn: child.state.last_turn.as_ref().map(|turn| turn.status),
                total_tokens: child.billing.total_tokens,
            })
            .collect();
        for descendant in self.descendants(&id).await? {
            let Some(below) = self.view_of(&descendant).await? else { continue };
            if !below.state.pending.is_empty() {
                view.state.escalations.push(Escalation {
                    session_id: descendant,
                    depth: below.state.lineage.depth,
                    pending: below.state.pending,
                });
            }
        }
        Ok(view)
    }

    /// The history a forked child starts from: its parent's up to the last completed turn,
    /// which is what the store holds while the parent's turn runs (a held step's `tool_use`,
    /// still unanswered, is left out).
    async fn fork_history(&self, parent: &SessionId) -> Result<Vec<Message>, SessionError> {
        let Some(store) = &self.store else {
            return Err(persistence_disabled("delegate {context: \"fork\"} (it copies the stored conversation)"));
        };
        let record = store.record(parent).await?.ok_or_else(|| SessionError::not_found(parent.clone()))?;
        let mut history = store.history(parent).await?;
        if record.pending.is_some() {
            history.pop();
        }
        Ok(history)
    }

    /// `delegate` of session `parent_id`.
    async fn delegate_from(
        &self,
        parent_id: SessionId,
        args: DelegateArgs,
        cancel: CancellationToken,
    ) -> Result<ChildOutcome, SessionError> {
        if !self.delegation.enabled {
            return Err(refused("delegation is off on this server ([delegation] enabled = false)".into()));
        }
        if args.task.trim().is_empty() {
            return Err(SessionError::invalid("task must not be empty"));
        }
        let parent = self.live(&parent_id).ok_or_else(|| SessionError::not_found(parent_id.clone()))?;
        let state = parent.view().state;
        let lineage = Lineage::child_of(&parent_id, &state.lineage);
        if lineage.depth > self.delegation.max_depth {
            return Err(refused(format!(
                "a child of this session would be at depth {}, and this server allows {} (max_depth)",
                lineage.depth, self.delegation.max_depth
            )));
        }
        let child_id = SessionId::new();
        let asked = args.budget.map_or_else(Budget::default, |asked| Budget {
            max_tokens: asked.max_tokens,
            max_tool_calls: asked.max_tool_calls,
            max_duration_ms: asked.max_duration_ms,
        });
        let budget = parent
            .ledger()
            .reserve(&child_id, asked, self.delegation.default_budget)
            .map_err(SessionError::invalid)?;
        let wait = args.wait.unwrap_or(true);
        if wait {
            self.collect_start(std::slice::from_ref(&child_id));
        }
        let name = args.name.clone().unwrap_or_else(|| format!("child-{}", &child_id.as_str()[..8]));
        let created = self
            .create_child(
                &parent_id,
                &parent,
                &state,
                lineage,
                child_id.clone(),
                budget,
                name.clone(),
                args,
                wait,
                cancel,
            )
            .await;
        let result = match created {
            Ok(result) => result,
            Err(error) => {
                // A child that exists (its turn failed) used what it used; one refused before
                // it was created gives its hold back whole.
                if self.live(&child_id).is_some() {
                    self.settle(&parent, &child_id);
                } else {
                    parent.ledger().release(&child_id);
                }
                if wait {
                    self.collect_end(std::slice::from_ref(&child_id)).await;
                }
                return Err(error);
            }
        };
        if !wait {
            return Ok(outcome_of(&result, Some(name)));
        }
        if ended_for_good(result.status) {
            self.settle(&parent, &child_id);
        }
        self.collect_end(std::slice::from_ref(&child_id)).await;
        Ok(outcome_of(&result, Some(name)))
    }

    #[allow(clippy::too_many_arguments)]
    async fn create_child(
        &self,
        parent_id: &SessionId,
        parent: &SessionHandle,
        state: &SessionState,
        lineage: Lineage,
        id: SessionId,
        budget: Budget,
        name: String,
        args: DelegateArgs,
        wait: bool,
        cancel: CancellationToken,
    ) -> Result<RunResult, SessionError> {
        super::comms::check_name(&name)?;
        self.check_room()?;
        let provenance = parent.provenance().clone();
        let tools = narrow(&provenance.spec.tools, &args)?;
        let audit = AuditTag { subject: state.owner.as_str().into(), session_id: id.clone() };
        let build = ChildBuild {
            model: args.model.clone().unwrap_or_else(|| provenance.spec.model.clone()),
            system_prompt: args.system_prompt.clone(),
            max_tokens: provenance.spec.max_tokens,
            budget,
            tools,
            output_schema: args.output_schema.clone(),
        };
        let mut agent = provenance.factory.build_child(build, &provenance.grants, &audit).await?;
        let history = match args.context {
            ChildContext::Fork => self.fork_history(parent_id).await?,
            ChildContext::None => Vec::new(),
        };
        agent.restore(RestoredState { history: history.clone(), delegated: true, ..RestoredState::default() });
        let owner = Caller::new(state.owner.as_str(), [Scope::Sessions]);
        let options = if wait {
            TurnOptions {
                wait: args.wait_ms.map(|ms| Duration::from_millis(ms).min(MAX_WAIT)),
                events: None,
                cancel: Some(cancel),
            }
        } else {
            TurnOptions::waiting(Duration::ZERO)
        };
        let launch = Launch {
            id,
            agent,
            new: NewSession {
                title: title_of(&args.task),
                labels: BTreeMap::new(),
                host_mode: false,
                name: Some(name),
                peer_group: Some(state.peer_group.clone().unwrap_or_else(|| parent_id.to_string())),
                lineage,
            },
            history,
            prompt: args.task,
            options,
        };
        self.start_session(&provenance.factory, &provenance.grants, &owner, launch).await
    }

    /// Children a `delegate` or `wait` call collects itself: no notice for them meanwhile.
    fn collect_start(&self, children: &[SessionId]) {
        let mut followed = self.followed();
        for child in children {
            *followed.collecting.entry(child.clone()).or_default() += 1;
        }
    }

    /// The call stops collecting. A child whose turn ended for good after the call last
    /// looked was held back from a notice meanwhile: it gets one now.
    async fn collect_end(&self, children: &[SessionId]) {
        {
            let mut followed = self.followed();
            for child in children {
                if let Some(count) = followed.collecting.get_mut(child) {
                    *count -= 1;
                    if *count == 0 {
                        followed.collecting.remove(child);
                    }
                }
            }
        }
        for child in children {
            let Some(view) = self.live(child).map(|handle| handle.view()) else { continue };
            if finished(&view) {
                self.notify_parent(&view, "finished").await;
            }
        }
    }

    /// A child's result reached its parent through a tool: its hold becomes what it used.
    fn settle(&self, parent: &SessionHandle, child: &SessionId) {
        let Some(view) = self.live(child).map(|handle| handle.view()) else { return };
        let _followed = self.followed();
        parent.ledger().settle(child, usage_of(&view));
    }

    /// `wait` of session `parent_id`.
    async fn wait_from(
        &self,
        parent_id: SessionId,
        args: WaitArgs,
        cancel: CancellationToken,
    ) -> Result<WaitOutcome, SessionError> {
        let parent = self.live(&parent_id).ok_or_else(|| SessionError::not_found(parent_id.clone()))?;
        let ids = match args.session_ids {
            Some(ids) if ids.len() > MAX_WAITED => {
                return Err(SessionError::invalid(format!("session_ids: at most {MAX_WAITED} children at once")));
            }
            Some(ids) => {
                for id in &ids {
                    let is_child = self
                        .view_of(id)
                        .await?
                        .is_some_and(|view| view.state.lineage.parent_id.as_ref() == Some(&parent_id));
                    if !is_child {
                        return Err(SessionError::invalid(format!("{id} is not a child of this session")));
                    }
                }
                ids
            }
            None => parent.ledger().book().reserved.into_keys().collect(),
        };
        if ids.is_empty() {
            return Err(SessionError::invalid(
                "no child is working: there is nothing to wait for (results that arrived are in the conversation)",
            ));
        }
        let timeout =
            Duration::from_millis(args.timeout_ms.unwrap_or(DEFAULT_WAIT_MS).clamp(MIN_WAIT_MS, MAX_WAIT_MS));
        self.collect_start(&ids);
        // Whatever ends the wait, the children are let go (and settled when finished).
        let waited = self.watch_children(&parent, &ids, args.mode, timeout, &cancel).await;
        if let Ok(outcome) = &waited {
            for child in &outcome.finished {
                if ended_for_good(child.status) {
                    self.settle(&parent, &child.session_id);
                }
            }
        }
        self.collect_end(&ids).await;
        waited
    }

    /// Looks at `ids` each time a session changes or mail arrives for `parent`, until `mode`
    /// is met, mail waits, the parent's turn is cancelled or `timeout` passes.
    async fn watch_children(
        &self,
        parent: &SessionHandle,
        ids: &[SessionId],
        mode: WaitMode,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome, SessionError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.changes.subscribe();
        loop {
            let arrival = parent.mailbox().arrivals().notified();
            tokio::pin!(arrival);
            arrival.as_mut().enable();
            let (finished, running) = self.ended(ids).await?;
            let done = match mode {
                WaitMode::Any => !finished.is_empty(),
                WaitMode::All => running.is_empty(),
            };
            let mail = parent.mailbox().has_mail();
            if done || mail {
                return Ok(WaitOutcome { finished, running, mail, timed_out: false });
            }
            tokio::select! {
                _ = changes.recv() => {}
                () = &mut arrival => {}
                () = cancel.cancelled() => return Ok(WaitOutcome { running, ..WaitOutcome::default() }),
                () = tokio::time::sleep_until(deadline) => {
                    return Ok(WaitOutcome { finished, running, mail: false, timed_out: true });
                }
            }
        }
    }

    /// Which of `ids` ended their last turn (or hold it for approvals), and which still run.
    async fn ended(&self, ids: &[SessionId]) -> Result<(Vec<ChildOutcome>, Vec<SessionId>), SessionError> {
        let (mut finished, mut running) = (Vec::new(), Vec::new());
        for id in ids {
            let Some(view) = self.view_of(id).await? else { continue };
            match (&view.state.last_turn, view.state.running_turn) {
                (Some(turn), None) => finished.push(outcome_of(turn, view.state.name.clone())),
                _ => running.push(id.clone()),
            }
        }
        Ok((finished, running))
    }

    /// `cancel_delegate` of session `parent_id`.
    async fn cancel_from(&self, parent_id: SessionId, args: CancelArgs) -> Result<Cancelled, SessionError> {
        let child = args.session_id;
        let is_child = self
            .view_of(&child)
            .await?
            .is_some_and(|view| view.state.lineage.parent_id.as_ref() == Some(&parent_id));
        if !is_child {
            return Err(SessionError::invalid(format!("{child} is not a child of this session")));
        }
        let interrupted = self.interrupt_tree(&child, true).await?;
        let archived = if args.archive {
            self.archive_with(&self.factory, &child).await?;
            true
        } else {
            false
        };
        Ok(Cancelled { session_id: child, interrupted: !interrupted.is_empty(), archived })
    }

    /// Cancels the running turns of `id` and (with `cascade`) of its descendants; returns the
    /// sessions whose turn was cancelled.
    pub(super) async fn interrupt_tree(
        &self,
        id: &SessionId,
        cascade: bool,
    ) -> Result<Vec<SessionId>, SessionError> {
        let mut interrupted = Vec::new();
        if self.live(id).is_some_and(|handle| handle.interrupt()) {
            interrupted.push(id.clone());
        }
        if cascade {
            for descendant in self.descendants(id).await? {
                if self.live(&descendant).is_some_and(|handle| handle.interrupt()) {
                    interrupted.push(descendant);
                }
            }
        }
        Ok(interrupted)
    }

    /// Starts the watcher that sends a finished child's notice to its parent (with delegation
    /// on). One task for every session, woken by [`Self::changes`]; it stops at `drain`.
    pub(super) fn start_notices(self: &Arc<Self>) {
        if !self.delegation.enabled || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let service = Arc::downgrade(self);
        let mut changes = self.changes.subscribe();
        let stopping = self.stopping.clone();
        self.actors.spawn(async move {
            loop {
                let changed = tokio::select! {
                    () = stopping.cancelled() => return,
                    changed = changes.recv() => match changed {
                        Ok(id) => Some(id),
                        // Missed announcements: every live child is looked at instead.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                };
                let Some(service) = service.upgrade() else { return };
                let handles = match changed {
                    Some(id) => service.live(&id).into_iter().collect(),
                    None => service.live_handles(),
                };
                // Most changes are not a child's: those cost one small clone.
                for handle in handles.iter().filter(|handle| handle.lineage().is_delegated()) {
                    let view = handle.view();
                    if finished(&view) {
                        service.notify_parent(&view, "finished").await;
                    }
                }
            }
        });
    }

    /// Sends a delegated session's result to its parent's inbox, unless a call collects it,
    /// it was sent before, or the parent's ledger no longer holds the child (settled).
    pub(super) async fn notify_parent(&self, view: &SessionView, what: &str) {
        let Some(parent_id) = view.state.lineage.parent_id.clone() else { return };
        let child = &view.session_id;
        let parent = self.live(&parent_id);
        let stored_hold = match (&parent, &self.store) {
            (Some(_), _) => None,
            (None, Some(store)) => match store.record(&parent_id).await {
                Ok(Some(record)) if !record.archived => Some(record.delegation.reserved.contains_key(child)),
                _ => Some(false),
            },
            (None, None) => Some(false),
        };
        {
            let mut followed = self.followed();
            let held = match (&parent, stored_hold) {
                (Some(parent), _) => parent.ledger().holds(child),
                (None, held) => held.unwrap_or(false),
            };
            if followed.collecting.contains_key(child) || followed.noticed.contains(child) || !held {
                return;
            }
            followed.noticed.insert(child.clone());
        }
        let used = usage_of(view);
        let name = view.state.name.clone().unwrap_or_else(|| child.to_string());
        let (status, text) = match &view.state.last_turn {
            Some(turn) => (turn.status.as_str(), bounded(&turn.text).0),
            None => ("archived", String::new()),
        };
        let body = format!(
            "[child {name} ({child}) {what}: {status}; {} tokens; {} tool calls]\n{text}",
            used.tokens, used.tool_calls
        );
        let message = InboxMessage {
            id: MessageId::new(),
            from: MessageSender::Session { session_id: child.clone(), name: view.state.name.clone() },
            body,
            in_reply_to: None,
            hops: 0,
            at: chrono::Utc::now(),
            report: Some(used),
        };
        let (factory, grants) = match &parent {
            Some(parent) => (parent.provenance().factory.clone(), parent.provenance().grants.clone()),
            None => (self.factory.clone(), self.factory.grants(&Caller::local(), crate::tools::Surface::Local)),
        };
        if let Err(error) = self.deliver(&factory, &grants, &parent_id, message).await {
            tracing::warn!(session_id = %child, parent_id = %parent_id, %error, "a child's result could not reach its parent");
        }
    }

    /// Archived descendants leave the notice bookkeeping.
    pub(super) fn forget_children(&self, archived: &[SessionId]) {
        let mut followed = self.followed();
        for id in archived {
            followed.forget(id);
        }
    }

    /// After a child was archived on its own: its result goes to its parent if it has not
    /// (so the parent's hold is settled), and it leaves the notice bookkeeping.
    pub(super) async fn archived_child(&self, view: &SessionView) {
        self.notify_parent(view, "archived").await;
        self.followed().forget(&view.session_id);
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
