//! Group commit: saves that arrive while another commits wait for it, then commit together in
//! one write transaction, so one flush to disk. redb takes one writer at a time and flushes at
//! every commit, so without it 1,000 sessions finishing their turns together paid 1,000 flushes
//! one after another (issue 31); with it they pay a few, and a lone save pays what it did (it
//! finds no commit running and leads its own at once).
//!
//! A group commits all or nothing. When it fails (a save refused by `store::rules`, the disk),
//! nothing of it was written, and each of its saves is committed again alone, so one save's
//! refusal is its own and never another's.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::Inner;
use super::write::{save, save_all};
use crate::store::{SaveRequest, StoreError};

/// Saves committed in one transaction at most: a bound on the transaction's size, and on how
/// long the first save of a large group waits for the last.
const MAX_GROUP: usize = 256;

/// The saves waiting for the next commit, and whether a commit is running (its leader then
/// takes them when it is done).
#[derive(Default)]
pub(super) struct Queue {
    state: Mutex<State>,
    /// Transactions that held more than one save, for the tests to see groups form.
    #[cfg(test)]
    pub(super) groups: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct State {
    waiting: Vec<Waiting>,
    committing: bool,
}

impl State {
    fn stop_if_idle(&mut self) -> bool {
        let idle = self.waiting.is_empty();
        if idle {
            self.committing = false;
        }
        idle
    }
}

struct Waiting {
    save: SaveRequest,
    done: oneshot::Sender<Result<(), StoreError>>,
}

impl Queue {
    /// Queues `save`: whether the caller is to lead the commits (none runs), and where the
    /// save's outcome arrives.
    pub(super) fn push(&self, save: SaveRequest) -> (bool, oneshot::Receiver<Result<(), StoreError>>) {
        let (done, outcome) = oneshot::channel();
        let mut state = self.lock();
        state.waiting.push(Waiting { save, done });
        let lead = !std::mem::replace(&mut state.committing, true);
        (lead, outcome)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held; a poisoned lock still holds whole state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next group, or `None` (and no commit running any more) when nothing waits.
    fn next_group(&self) -> Option<Vec<Waiting>> {
        let mut state = self.lock();
        if state.stop_if_idle() {
            return None;
        }
        let size = state.waiting.len().min(MAX_GROUP);
        Some(state.waiting.drain(..size).collect())
    }

    /// Whether nothing waits; if so no commit runs any more (the next save leads).
    fn stop_if_idle(&self) -> bool {
        self.lock().stop_if_idle()
    }
}

/// The leader's work, on a blocking thread: commits groups until nothing waits. A panic in one
/// group drops that group's senders (its saves fail, their callers see an error) and the
/// leader goes on, so a waiting save is never left without a commit. The leader lets go of
/// the store before it answers its last group, so a caller whose save was answered may open
/// the file again at once (redb allows one opener).
pub(super) fn lead(store: Arc<Inner>) {
    while let Some(group) = store.commits.next_group() {
        let answers = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit(&store, group))) {
            Ok(answers) => answers,
            Err(_) => {
                tracing::error!("a group of saves panicked while committing; its saves failed");
                Vec::new()
            }
        };
        if store.commits.stop_if_idle() {
            drop(store);
            answer(answers);
            return;
        }
        answer(answers);
    }
}

type Answer = (oneshot::Sender<Result<(), StoreError>>, Result<(), StoreError>);

fn answer(answers: Vec<Answer>) {
    for (done, outcome) in answers {
        let _ = done.send(outcome);
    }
}

/// Commits `group` in one transaction, or, when that fails, each save alone: each save's
/// outcome, to be answered.
fn commit(store: &Inner, group: Vec<Waiting>) -> Vec<Answer> {
    #[cfg(test)]
    if group.len() > 1 {
        store.commits.groups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let saves: Vec<&SaveRequest> = group.iter().map(|waiting| &waiting.save).collect();
    let together = save_all(store, &saves);
    match together {
        Ok(()) => group.into_iter().map(|waiting| (waiting.done, Ok(()))).collect(),
        Err(error) if group.len() == 1 => {
            group.into_iter().map(|waiting| (waiting.done, Err(error.clone()))).collect()
        }
        Err(error) => {
            tracing::debug!(%error, saves = group.len(), "a group commit failed; committing its saves one by one");
            group.into_iter().map(|Waiting { save: request, done }| (done, save(store, &request))).collect()
        }
    }
}
