//! `delegate` and `cancel_delegate`: a child created from its parent's provenance, with its
//! tools narrowed and its budget carved, then waited for or left running; and cancelled.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::super::LiveSessionService;
use super::super::admission::{Launch, NewSession, title_of};
use super::{Cancelled, ChildOutcome, ended_for_good, outcome_of, refused};
use crate::agent::RestoredState;
use crate::agent::factory::ChildBuild;
use crate::caller::{Caller, Scope};
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::{Budget, Lineage, RunResult, SessionState};
use crate::policy::AuditTag;
use crate::profiles::NamedProfile;
use crate::session::actor::SessionHandle;
use crate::session::types::{MAX_WAIT, TurnOptions};
use crate::tools::delegation::{CancelArgs, ChildContext, DelegateArgs};
use crate::tools::mcp::McpServerRequest;
use crate::tools::{ShellRequest, ToolConfig};

impl LiveSessionService {
    /// `delegate` of session `parent_id`.
    pub(in super::super) async fn delegate_from(
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
        let mut args = args;
        // The named agent fills the request first, so its budget is carved like an asked one.
        let named = match args.agent.as_deref() {
            Some(name) => {
                let named = parent.provenance().factory.profiles().get(name)?;
                fill_from_profile(&mut args, &named, &parent.provenance().spec.tools);
                Some(named)
            }
            None => None,
        };
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
            max_cost_usd: asked.max_cost_usd,
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
                named,
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
    pub(in super::super) async fn create_child(
        &self,
        parent_id: &SessionId,
        parent: &SessionHandle,
        state: &SessionState,
        lineage: Lineage,
        id: SessionId,
        budget: Budget,
        name: String,
        args: DelegateArgs,
        named: Option<NamedProfile>,
        wait: bool,
        cancel: CancellationToken,
    ) -> Result<RunResult, SessionError> {
        super::super::comms::check_name(&name)?;
        self.check_room()?;
        let provenance = parent.provenance().clone();
        let tools = provenance.spec.tools.narrow(&args)?;
        let audit = AuditTag { subject: state.owner.as_str().into(), session_id: id.clone() };
        let fields = named.as_ref().map(|named| &named.profile.fields);
        let build = ChildBuild {
            model: args.model.clone().unwrap_or_else(|| provenance.spec.model.clone()),
            system_prompt: args.system_prompt.clone(),
            max_tokens: fields.and_then(|fields| fields.max_tokens).unwrap_or(provenance.spec.max_tokens),
            budget,
            tools,
            output_schema: args.output_schema.clone(),
            reasoning: fields.and_then(|fields| fields.reasoning).or(provenance.spec.reasoning),
            context: fields.and_then(|fields| fields.context).unwrap_or_default(),
            agent: named.as_ref().map(NamedProfile::agent_ref),
            skills: child_skills(
                provenance.spec.skills.as_deref(),
                fields.and_then(|fields| fields.skills.as_deref()),
            ),
            documents: provenance.spec.documents.clone(),
        };
        let mut agent = provenance.factory.build_child(build, &provenance.grants, &audit).await?;
        let history = match args.context {
            ChildContext::Fork => self.fork_history(parent_id).await?,
            ChildContext::None => Vec::new(),
        };
        agent.restore(RestoredState { history: history.clone(), delegated: true, ..RestoredState::default() });
        agent.report_spend_to(parent.ledger().clone());
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

    /// `cancel_delegate` of session `parent_id`.
    pub(in super::super) async fn cancel_from(
        &self,
        parent_id: SessionId,
        args: CancelArgs,
    ) -> Result<Cancelled, SessionError> {
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
            // The parent's `session_end` hooks, not the server's own (G14).
            let factory = match self.live(&parent_id) {
                Some(parent) => parent.provenance().factory.clone(),
                None => self.factory.clone(),
            };
            self.archive_with(&factory, &child).await?;
            true
        } else {
            false
        };
        Ok(Cancelled { session_id: child, interrupted: !interrupted.is_empty(), archived })
    }
}

/// A child made from a named agent: the profile gives what the parent's model left unset, and
/// the parent's own tools bound it as they bound any child — the profile's builtins, shell and
/// servers that the parent lacks are left out rather than refused (a profile is a template,
/// the parent's tools the ceiling). The profile's tool choices are its own: without a shell in
/// the profile, the child has none.
fn fill_from_profile(args: &mut DelegateArgs, named: &NamedProfile, parent: &ToolConfig) {
    let profile = &named.profile;
    let fields = &profile.fields;
    if args.system_prompt.is_none() && !profile.system_prompt.is_empty() {
        args.system_prompt = Some(profile.system_prompt.clone());
    }
    args.model = args.model.take().or_else(|| fields.model.clone());
    if args.builtins.is_none()
        && let Some(builtins) = &fields.builtins
    {
        args.builtins = Some(builtins.iter().copied().filter(|tool| parent.builtins.contains(tool)).collect());
    }
    if args.shell.is_none() {
        let asks = matches!(fields.shell, Some(ShellRequest::Enabled(true) | ShellRequest::Limits(_)));
        args.shell = Some(asks && parent.shell.is_some());
    }
    if args.mcp_servers.is_none()
        && let Some(servers) = &fields.mcp_servers
    {
        let names = servers.iter().filter_map(|server| match server {
            McpServerRequest::Named(name) => Some(name.clone()),
            McpServerRequest::Inline(_) => None,
        });
        args.mcp_servers =
            Some(names.filter(|name| parent.mcp_servers.iter().any(|server| server.name == *name)).collect());
    }
    if args.budget.is_none()
        && let Some(budget) = fields.budget
    {
        args.budget = Some(crate::tools::delegation::ChildBudget {
            max_tokens: budget.max_tokens,
            max_tool_calls: budget.max_tool_calls,
            max_duration_ms: budget.max_duration_ms,
            max_cost_usd: budget.max_cost_usd,
        });
    }
    args.output_schema = args.output_schema.take().or_else(|| fields.output_schema.clone());
}

/// A child's skills: its parent's, narrowed to its named agent's where that names some.
fn child_skills(parent: Option<&[String]>, profile: Option<&[String]>) -> Option<Vec<String>> {
    match (parent, profile) {
        (parent, None) => parent.map(<[String]>::to_vec),
        (None, Some(profile)) => Some(profile.to_vec()),
        (Some(parent), Some(profile)) => {
            Some(profile.iter().filter(|name| parent.contains(name)).cloned().collect())
        }
    }
}
