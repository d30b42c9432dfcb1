//! The settled turns of a session's history as a wire wrote them, kept between its model calls.
//!
//! Every model call sends the whole history, so every call conformed all of it again and
//! escaped every string in it again: a tenth of deputy's CPU under load with sessions of 60
//! short messages, 29% at 460 (docs/BENCHMARKS.md), and milliseconds a call with long tool
//! outputs. Yet all of a history but its last turns is settled ([`conform::Settled`]): a
//! wire's JSON for those turns is the same at every later call. So the wire keeps it here, and
//! a call conforms and writes only the messages after it.
//!
//! What is kept belongs to one agent's history, and holds while the agent only appends to it
//! or changes its last message (which no settled turn holds). So the agent starts a new
//! `EncodedHistory` for every other change (a rewind, pruning, compaction, a restore), and a
//! request whose messages are not its agent's history as it stands carries a new one too
//! (compaction's summary call, which edits its own copy). As a guard, what is kept names the
//! allocation of the history it was written for, and a request sharing another allocation
//! (a copy) is written whole. The guard is not a weak reference: one would make the agent's
//! in-place appends (`Arc::make_mut`) move the history to a new allocation every time.
//!
//! It holds about what the settled history is as JSON, for as long as its agent lives: a
//! session unloaded from memory lets go of it with its agent.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::value::RawValue;

use super::Message;
use super::conform::Settled;

/// A history's settled turns as one wire wrote them, empty until a wire writes them.
#[derive(Default)]
pub struct EncodedHistory {
    kept: Mutex<Option<Kept>>,
}

/// What a wire wrote of a history's settled turns.
pub struct Kept {
    /// The address of the history's allocation (see the module's note).
    history: usize,
    wire: &'static str,
    /// Which turns are settled, and the tools they call.
    pub settled: Settled,
    /// The elements of the request's message array the settled turns are written as, in order.
    pub elements: Vec<Box<RawValue>>,
}

impl EncodedHistory {
    /// What `wire` kept of `history`, taken out for a call to extend and give back
    /// ([`keep`](Self::keep)); nothing settled when it kept none of this history.
    pub fn take(&self, history: &Arc<Vec<Message>>, wire: &'static str) -> Kept {
        let kept = self.lock().take();
        match kept {
            Some(kept) if kept.wire == wire && kept.history == address(history) => kept,
            _ => Kept { history: address(history), wire, settled: Settled::default(), elements: Vec::new() },
        }
    }

    /// Keeps what a call wrote, for the next.
    pub fn keep(&self, kept: Kept) {
        *self.lock() = Some(kept);
    }

    /// How many of the history's first messages it holds the turns of.
    pub fn settled_messages(&self) -> usize {
        self.lock().as_ref().map_or(0, |kept| kept.settled.messages)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kept>> {
        // Nothing panics while the lock is held; a poisoned lock holds a whole value.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for EncodedHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodedHistory").field("settled_messages", &self.settled_messages()).finish()
    }
}

fn address(history: &Arc<Vec<Message>>) -> usize {
    Arc::as_ptr(history) as usize
}
