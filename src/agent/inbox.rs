//! A session's inbox: messages from callers and other agents, waiting for a boundary.
//!
//! The [`Mailbox`] sits beside the turn lock (shared by the session's handle, its actor and
//! its agent), so a sender never waits behind a running turn. Delivery happens only at a
//! boundary, never mid-stream: between two steps of a running turn (the loop takes the mail
//! after a step's tool results) or at the start of the next turn. A host-mode session's actor
//! starts a turn when mail waits and it is idle; nothing here polls or sleeps.
//!
//! Loop guards live here too: a message that went through more than `max_hops` agents is
//! parked (shown, never delivered), and [`Mailbox::handling_hops`] tells the session's
//! `send_message` tool how many hops the mail it is answering had.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::ids::MessageId;
use crate::model::inbox::{
    DEFAULT_INBOX_CAPACITY, DEFAULT_MAX_AUTO_TURNS, DEFAULT_MAX_HOPS, DEFAULT_MAX_WAITING_BYTES_PER_OWNER,
    InboxMessage, MAX_PARKED,
};

/// Bounds of every session's inbox (`[inbox]` in the config file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxLimits {
    /// Waiting messages at most; one more is refused (`SESSION_INBOX_FULL`).
    pub capacity: usize,
    /// Hops after which a message is parked.
    pub max_hops: u32,
    /// Turns a host-mode session starts on its own between two caller turns.
    pub max_auto_turns: u32,
    /// Bytes of waiting mail all live sessions of one owner hold together ([`MailQuota`]).
    pub max_waiting_bytes_per_owner: usize,
}

impl Default for InboxLimits {
    fn default() -> Self {
        Self {
            capacity: DEFAULT_INBOX_CAPACITY,
            max_hops: DEFAULT_MAX_HOPS,
            max_auto_turns: DEFAULT_MAX_AUTO_TURNS,
            max_waiting_bytes_per_owner: DEFAULT_MAX_WAITING_BYTES_PER_OWNER,
        }
    }
}

/// The waiting mail one owner's live sessions hold in memory together, in bytes of message
/// bodies (security review 2, G12). Shared by the mailboxes of all its live sessions: the
/// per-session capacity alone let one tenant hold `capacity × 64 KiB` in every one of any number
/// of sessions. Mail leaves the count when a turn takes it or its session unloads (the store
/// keeps it then, not memory).
#[derive(Debug)]
pub struct MailQuota {
    held: AtomicUsize,
    limit: usize,
}

impl MailQuota {
    pub fn new(limit: usize) -> Self {
        Self { held: AtomicUsize::new(0), limit }
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    fn charge(&self, bytes: usize) {
        self.held.fetch_add(bytes, Ordering::AcqRel);
    }

    fn refund(&self, bytes: usize) {
        let _ =
            self.held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| Some(held.saturating_sub(bytes)));
    }
}

/// What a message weighs against its owner's [`MailQuota`]: its body, which is nearly all of it.
fn weight(message: &InboxMessage) -> usize {
    message.body.len()
}

/// Why [`Mailbox::room_for`] has no room for a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// The session's inbox holds `capacity` waiting messages.
    Messages { capacity: usize },
    /// The owner's live sessions hold `held` bytes of waiting mail; `limit` is its quota.
    OwnerBytes { held: usize, limit: usize },
}

/// What [`Mailbox::admit`] did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    Queued,
    /// Parked for exceeding `max_hops`; `evicted` is the oldest parked message it pushed out.
    Parked {
        evicted: Option<MessageId>,
    },
}

#[derive(Default)]
struct MailState {
    waiting: VecDeque<InboxMessage>,
    parked: VecDeque<InboxMessage>,
    /// Delivered messages a store has not been told about yet: the next save removes them,
    /// in the same transaction as the turn that read them.
    delivered_unsaved: Vec<MessageId>,
}

pub struct Mailbox {
    state: Mutex<MailState>,
    limits: InboxLimits,
    /// The most hops of the mail the running turn has taken (0 when it took none): a message
    /// the agent sends now carries one more. Shared with the session's `send_message` tool.
    handling_hops: Arc<AtomicU32>,
    /// Serializes senders of one session, so the capacity check, the store write and the
    /// admission are one step.
    senders: tokio::sync::Mutex<()>,
    /// Woken when a message is queued: a `wait` for children returns early on mail.
    arrivals: tokio::sync::Notify,
    /// The owner's waiting mail across its live sessions; this inbox's share is charged to it.
    quota: Arc<MailQuota>,
}

impl Mailbox {
    /// An inbox holding what a store kept (both lists oldest first), its waiting mail charged
    /// to its owner's `quota` (even beyond it: that mail was accepted before).
    pub fn new(
        limits: InboxLimits,
        handling_hops: Arc<AtomicU32>,
        (waiting, parked): (Vec<InboxMessage>, Vec<InboxMessage>),
        quota: Arc<MailQuota>,
    ) -> Self {
        quota.charge(waiting.iter().map(weight).sum());
        let state = MailState { waiting: waiting.into(), parked: parked.into(), delivered_unsaved: Vec::new() };
        Self {
            state: Mutex::new(state),
            limits,
            handling_hops,
            senders: tokio::sync::Mutex::new(()),
            arrivals: tokio::sync::Notify::new(),
            quota,
        }
    }

    pub fn limits(&self) -> InboxLimits {
        self.limits
    }

    /// Notified each time a message is queued (create the `notified()` future before
    /// checking [`Self::has_mail`], so no arrival falls in between).
    pub fn arrivals(&self) -> &tokio::sync::Notify {
        &self.arrivals
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MailState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Held by a sender from its capacity check to its admission.
    pub async fn sending(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.senders.lock().await
    }

    /// Whether `message` would be parked (too many hops).
    pub fn parks(&self, message: &InboxMessage) -> bool {
        message.hops > self.limits.max_hops
    }

    /// Whether `message` fits as one more waiting message: in this inbox's capacity and its
    /// owner's quota. Senders to other sessions of the owner may pass the same check at the
    /// same moment, so the quota can be overshot by one message per concurrent sender.
    pub fn room_for(&self, message: &InboxMessage) -> Result<(), NoRoom> {
        if self.state().waiting.len() >= self.limits.capacity {
            return Err(NoRoom::Messages { capacity: self.limits.capacity });
        }
        let (held, limit) = (self.quota.held(), self.quota.limit);
        if held.saturating_add(weight(message)) > limit {
            return Err(NoRoom::OwnerBytes { held, limit });
        }
        Ok(())
    }

    /// Takes a message in: parked past `max_hops`, otherwise queued. The sender checked
    /// [`Self::room_for`] under [`Self::sending`].
    pub fn admit(&self, message: InboxMessage) -> Admitted {
        let mut state = self.state();
        // Held already, or delivered and not saved yet (the store still has it): once only.
        if state.waiting.iter().chain(state.parked.iter()).any(|held| held.id == message.id)
            || state.delivered_unsaved.contains(&message.id)
        {
            return Admitted::Queued;
        }
        if self.parks(&message) {
            state.parked.push_back(message);
            let evicted = (state.parked.len() > MAX_PARKED).then(|| state.parked.pop_front()).flatten();
            return Admitted::Parked { evicted: evicted.map(|message| message.id) };
        }
        self.quota.charge(weight(&message));
        state.waiting.push_back(message);
        self.arrivals.notify_waiters();
        Admitted::Queued
    }

    /// The oldest parked message that `admit` would push out for one more, if any.
    pub fn would_evict(&self) -> Option<MessageId> {
        let state = self.state();
        (state.parked.len() >= MAX_PARKED).then(|| state.parked.front().map(|message| message.id.clone())).flatten()
    }

    pub fn has_mail(&self) -> bool {
        !self.state().waiting.is_empty()
    }

    /// Takes every waiting message for delivery, and notes the hops the turn now handles.
    pub fn take(&self) -> Vec<InboxMessage> {
        let mut state = self.state();
        let taken: Vec<InboxMessage> = state.waiting.drain(..).collect();
        self.quota.refund(taken.iter().map(weight).sum());
        state.delivered_unsaved.extend(taken.iter().map(|message| message.id.clone()));
        if let Some(hops) = taken.iter().map(|message| message.hops).max() {
            self.handling_hops.fetch_max(hops, Ordering::AcqRel);
        }
        taken
    }

    /// A turn begins: it handles no mail yet.
    pub fn begin_turn(&self) {
        self.handling_hops.store(0, Ordering::Release);
    }

    /// Delivered messages the store still holds as waiting.
    pub fn delivered_unsaved(&self) -> Vec<MessageId> {
        self.state().delivered_unsaved.clone()
    }

    /// A save removed the first `count` of [`Self::delivered_unsaved`] from the store.
    pub fn mark_delivered_saved(&self, count: usize) {
        let mut state = self.state();
        let count = count.min(state.delivered_unsaved.len());
        state.delivered_unsaved.drain(..count);
    }

    /// How many wait, and when the oldest arrived.
    pub fn waiting(&self) -> (usize, Option<chrono::DateTime<chrono::Utc>>) {
        let state = self.state();
        (state.waiting.len(), state.waiting.front().map(|message| message.at))
    }

    pub fn parked(&self) -> Vec<InboxMessage> {
        self.state().parked.iter().cloned().collect()
    }
}

/// An unloaded or archived session's waiting mail leaves memory, and its owner's count.
impl Drop for Mailbox {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        self.quota.refund(state.waiting.iter().map(weight).sum());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::inbox::MessageSender;

    fn unlimited() -> Arc<MailQuota> {
        Arc::new(MailQuota::new(usize::MAX))
    }

    fn message(hops: u32) -> InboxMessage {
        InboxMessage {
            id: MessageId::new(),
            from: MessageSender::Caller { subject: "local".into() },
            body: "hi".into(),
            in_reply_to: None,
            hops,
            at: chrono::Utc::now(),
            report: None,
        }
    }

    #[test]
    fn mail_past_max_hops_is_parked_and_the_oldest_parked_is_evicted() {
        let limits = InboxLimits { max_hops: 2, ..InboxLimits::default() };
        let mailbox = Mailbox::new(limits, Arc::default(), (Vec::new(), Vec::new()), unlimited());
        assert_eq!(mailbox.admit(message(2)), Admitted::Queued);
        let first = message(3);
        assert_eq!(mailbox.admit(first.clone()), Admitted::Parked { evicted: None });
        for _ in 1..MAX_PARKED {
            mailbox.admit(message(3));
        }
        assert_eq!(mailbox.would_evict(), Some(first.id.clone()));
        assert_eq!(mailbox.admit(message(9)), Admitted::Parked { evicted: Some(first.id) });
        assert_eq!(mailbox.parked().len(), MAX_PARKED);
        assert_eq!(mailbox.waiting().0, 1);
    }

    #[test]
    fn taking_mail_raises_the_hops_the_turn_handles_until_the_next_turn() {
        let hops = Arc::new(AtomicU32::new(0));
        let mailbox = Mailbox::new(InboxLimits::default(), hops.clone(), (Vec::new(), Vec::new()), unlimited());
        mailbox.admit(message(1));
        mailbox.admit(message(4));
        assert_eq!(mailbox.take().len(), 2);
        assert_eq!(hops.load(Ordering::Acquire), 4);
        assert_eq!(mailbox.delivered_unsaved().len(), 2);
        mailbox.mark_delivered_saved(2);
        assert!(mailbox.delivered_unsaved().is_empty());
        mailbox.begin_turn();
        assert_eq!(hops.load(Ordering::Acquire), 0);
    }

    #[test]
    fn an_owners_sessions_share_one_quota_of_waiting_bytes_freed_by_taking_and_unloading() {
        let limits = InboxLimits { max_waiting_bytes_per_owner: 5, ..InboxLimits::default() };
        let quota = Arc::new(MailQuota::new(limits.max_waiting_bytes_per_owner));
        let one = Mailbox::new(limits, Arc::default(), (vec![message(0)], Vec::new()), quota.clone());
        let two = Mailbox::new(limits, Arc::default(), (Vec::new(), Vec::new()), quota.clone());
        assert_eq!(quota.held(), 2, "stored mail is charged when its session loads");
        let hi = message(0);
        assert_eq!(two.room_for(&hi), Ok(()));
        two.admit(hi.clone());
        two.admit(hi.clone());
        assert_eq!(quota.held(), 4, "a message admitted twice is charged once");
        assert_eq!(one.room_for(&message(0)), Err(NoRoom::OwnerBytes { held: 4, limit: 5 }));
        one.take();
        assert_eq!(quota.held(), 2);
        drop(two);
        assert_eq!(quota.held(), 0, "an unloaded session's mail leaves the count");
        let full = Mailbox::new(
            InboxLimits { capacity: 1, ..limits },
            Arc::default(),
            (vec![message(0)], Vec::new()),
            quota,
        );
        assert_eq!(full.room_for(&message(0)), Err(NoRoom::Messages { capacity: 1 }));
    }
}
