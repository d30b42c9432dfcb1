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
use crate::session::actor::SessionHandle;
use crate::session::types::{MAX_WAIT, TurnOptions};
use crate::tools::delegation::{CancelArgs, ChildContext, DelegateArgs};

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
        wait: bool,
        cancel: CancellationToken,
    ) -> Result<RunResult, SessionError> {
        super::super::comms::check_name(&name)?;
        self.check_room()?;
        let provenance = parent.provenance().clone();
        let tools = provenance.spec.tools.narrow(&args)?;
        let audit = AuditTag { subject: state.owner.as_str().into(), session_id: id.clone() };
        let build = ChildBuild {
            model: args.model.clone().unwrap_or_else(|| provenance.spec.model.clone()),
            system_prompt: args.system_prompt.clone(),
            max_tokens: provenance.spec.max_tokens,
            budget,
            tools,
            output_schema: args.output_schema.clone(),
            reasoning: provenance.spec.reasoning,
            skills: provenance.spec.skills.clone(),
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
