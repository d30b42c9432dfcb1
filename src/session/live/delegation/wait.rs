//! `wait`, and collecting children's results: the children a call collects itself are
//! followed, so their notices are not sent as well, and their holds settle exactly once.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::super::LiveSessionService;
use super::{ChildOutcome, MAX_WAITED, WaitOutcome, ended_for_good, finished, outcome_of, usage_of};
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::session::actor::SessionHandle;
use crate::tools::delegation::{DEFAULT_WAIT_MS, MAX_WAIT_MS, MIN_WAIT_MS, WaitArgs, WaitMode};

impl LiveSessionService {
    /// Children a `delegate` or `wait` call collects itself: no notice for them meanwhile.
    pub(in super::super) fn collect_start(&self, children: &[SessionId]) {
        let mut followed = self.followed();
        for child in children {
            *followed.collecting.entry(child.clone()).or_default() += 1;
        }
    }

    /// The call stops collecting. A child whose turn ended for good after the call last
    /// looked was held back from a notice meanwhile: it gets one now.
    pub(in super::super) async fn collect_end(&self, children: &[SessionId]) {
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
    pub(in super::super) fn settle(&self, parent: &SessionHandle, child: &SessionId) {
        let Some(view) = self.live(child).map(|handle| handle.view()) else { return };
        let _followed = self.followed();
        parent.ledger().settle(child, usage_of(&view));
    }

    /// `wait` of session `parent_id`.
    pub(in super::super) async fn wait_from(
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
    pub(in super::super) async fn watch_children(
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
    pub(in super::super) async fn ended(
        &self,
        ids: &[SessionId],
    ) -> Result<(Vec<ChildOutcome>, Vec<SessionId>), SessionError> {
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
}
