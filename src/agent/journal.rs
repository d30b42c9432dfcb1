//! The session journal's recorder: every [`AgentEvent`] a session emits, numbered, stamped and
//! kept until the store has committed it.
//!
//! The actor owns one [`Journal`] per session and hands it to every turn's [`EventSink`]
//! (`EventSink::with_journal`), beside the caller's optional channel: the journal records
//! whether or not anybody listens. Consecutive `TextDelta`s are merged into one event (they are
//! one content block: anything else in between, a tool call, a restart, usage, ends it), so
//! the journal holds a row per block, not per token, and loses nothing (the merged text is the
//! concatenation).
//!
//! Events wait in `unsaved` until a save commits them together with the turn's messages and
//! record (`SaveRequest::events`); a failed save keeps them, and the next save writes them with
//! the same numbers, like messages. Without a store there is no commit: a save *publishes*
//! them into a bounded in-memory tail ([`IN_MEMORY_EVENTS`]), which is what the feed of a
//! store-less session reads.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::events::AgentEvent;
use super::report::TurnInput;
use crate::model::{EventJson, SessionRecord, StoredEvent};

/// Events a store-less session keeps for its feed; older ones are dropped (the feed then
/// starts at the oldest kept).
pub const IN_MEMORY_EVENTS: usize = 10_000;

/// A session's journal recorder; cloning shares it.
#[derive(Clone, Debug)]
pub struct Journal(Arc<Mutex<State>>);

#[derive(Debug)]
struct State {
    /// The seq of the next event recorded.
    next_seq: u64,
    /// The turn events are attributed to: the last one started (0 before the first).
    turn: u64,
    /// Recorded, not committed yet, in order; `run` follows them.
    unsaved: Vec<StoredEvent>,
    /// The streamed text event still growing, if any: recorded (it has its seq) and after
    /// every event in `unsaved`, written out as JSON each time it is read, since it changes.
    run: Option<Run>,
    /// Without a store: the newest committed (published) events, at most `keep`.
    published: VecDeque<StoredEvent>,
    keep: usize,
    /// Bumped whenever an event is recorded, grows or is committed: what a follower of the
    /// running turn waits on ([`Journal::activity`]).
    activity: watch::Sender<u64>,
}

impl Journal {
    /// The journal of a session whose record says how many events are stored. A session with
    /// none yet (new, or stored before the journal existed) starts with `session_created`,
    /// stamped with the record's creation time. `in_memory`: no store; committed events are
    /// kept for the feed.
    pub fn open(record: &SessionRecord, in_memory: bool) -> Self {
        let journal = Self(Arc::new(Mutex::new(State {
            next_seq: record.event_seq,
            turn: record.turns,
            unsaved: Vec::new(),
            run: None,
            published: VecDeque::new(),
            keep: if in_memory { IN_MEMORY_EVENTS } else { 0 },
            activity: watch::Sender::new(0),
        })));
        if record.event_seq == 0 {
            let created = AgentEvent::SessionCreated {
                title: record.title.clone(),
                model: record.agent.model.clone(),
                labels: record.labels.clone(),
                host_mode: record.host_mode,
            };
            journal.record_at(created, record.created_at);
            if let Some(origin) = &record.forked_from {
                let forked =
                    AgentEvent::Forked { from_session_id: origin.session_id.to_string(), at_turn: origin.turn };
                journal.record_at(forked, record.created_at);
            }
        }
        journal
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one event, now.
    pub fn record(&self, event: AgentEvent) {
        self.record_at(event, Utc::now());
    }

    fn record_at(&self, event: AgentEvent, at: DateTime<Utc>) {
        let mut guard = self.lock();
        let state = &mut *guard;
        if let Some(run) = &mut state.run {
            if let Some(text) = event.streamed()
                && std::mem::discriminant(&run.event) == std::mem::discriminant(&event)
                && let Some(merged) = run.event.streamed_mut()
            {
                merged.push_str(text);
                state.activity.send_modify(|count| *count += 1);
                return;
            }
            state.unsaved.push(run.stored());
            state.run = None;
        }
        match &event {
            AgentEvent::TurnStarted { turn }
            | AgentEvent::PromptReceived { turn, .. }
            | AgentEvent::ApprovalsAnswered { turn, .. }
            // A turn lost with another replica is recorded before the next one starts.
            | AgentEvent::TurnFailed { turn, .. } => state.turn = *turn,
            _ => {}
        }
        let (seq, turn) = (state.next_seq, state.turn);
        state.next_seq += 1;
        if event.streamed().is_some() {
            state.run = Some(Run { seq, turn, at, event });
        } else {
            let stored = StoredEvent { seq, turn, at, event: json_of(&event) };
            state.unsaved.push(stored);
        }
        state.activity.send_modify(|count| *count += 1);
    }

    /// What starts turn `turn`: the caller's answers to a held step, then its prompt.
    pub fn turn_input(&self, turn: u64, input: &TurnInput) {
        let settled = &input.resolution.settled;
        if !settled.is_empty() {
            let denied = settled
                .values()
                .filter(|settlement| matches!(settlement, super::pending::Settlement::Deny(_)))
                .count();
            self.record(AgentEvent::ApprovalsAnswered {
                turn,
                answered: settled.len() as u64,
                denied: denied as u64,
            });
        }
        if let Some(prompt) = input.prompt.as_ref().filter(|prompt| !prompt.is_empty()) {
            self.record(AgentEvent::PromptReceived { turn, prompt: prompt.clone() });
        }
    }

    /// The seq the next event gets: with a store, the record's watermark once saved.
    pub fn next_seq(&self) -> u64 {
        self.lock().next_seq
    }

    /// The events recorded and not committed yet, for a save.
    pub fn unsaved(&self) -> Vec<StoredEvent> {
        self.lock().unsaved_after(None)
    }

    /// The first `count` unsaved events were committed (or, without a store, published).
    pub fn mark_saved(&self, count: usize) {
        let mut state = self.lock();
        let closed = count.min(state.unsaved.len());
        let mut saved: Vec<StoredEvent> = state.unsaved.drain(..closed).collect();
        // The growing run was saved as it was then: what streams after it is a new event.
        if count > closed
            && let Some(run) = state.run.take()
        {
            saved.push(run.stored());
        }
        state.activity.send_modify(|count| *count += 1);
        if state.keep > 0 {
            state.published.extend(saved);
            let excess = state.published.len().saturating_sub(state.keep);
            state.published.drain(..excess);
        }
    }

    /// The events recorded and not committed yet with a seq after `after`: a running turn's
    /// progress, provisional until its save (the last may still grow, and a save that fails
    /// keeps them for the next one).
    pub fn provisional(&self, after: Option<u64>) -> Vec<StoredEvent> {
        self.lock().unsaved_after(after)
    }

    /// Changes whenever an event is recorded, grows or is committed.
    pub fn activity(&self) -> watch::Receiver<u64> {
        self.lock().activity.subscribe()
    }

    /// Every event held here, in order: without a store, those published (the newest
    /// [`IN_MEMORY_EVENTS`]) and then those not yet; with one, those not committed yet.
    pub fn held(&self) -> Vec<StoredEvent> {
        let state = self.lock();
        let mut held: Vec<StoredEvent> = state.published.iter().cloned().collect();
        held.extend(state.unsaved_after(None));
        held
    }

    /// Without a store: up to `limit` published events with a seq after `after` (from the
    /// oldest kept when `None`), within [`crate::model::MAX_EVENTS_PAGE_BYTES`] (at least one).
    pub fn page(&self, after: Option<u64>, limit: usize) -> Vec<StoredEvent> {
        let state = self.lock();
        let mut taken = 0;
        state
            .published
            .iter()
            .filter(|event| after.is_none_or(|after| event.seq > after))
            .take(limit)
            .take_while(|event| crate::model::fits_page(&mut taken, crate::model::json_len(event)))
            .cloned()
            .collect()
    }
}

impl State {
    /// The unsaved events with a seq after `after` (all when `None`), the growing run last.
    fn unsaved_after(&self, after: Option<u64>) -> Vec<StoredEvent> {
        let after = |event: &&StoredEvent| after.is_none_or(|after| event.seq > after);
        let mut events: Vec<StoredEvent> = self.unsaved.iter().filter(after).cloned().collect();
        events.extend(self.run.as_ref().map(Run::stored).filter(|run| after(&run)));
        events
    }
}

/// A run of streamed text (`text_delta` or `reasoning_delta`) being recorded: one event whose
/// text grows with each delta until anything else is recorded or it is saved.
#[derive(Debug)]
struct Run {
    seq: u64,
    turn: u64,
    /// When its first delta was recorded.
    at: DateTime<Utc>,
    /// The delta holding the text so far.
    event: AgentEvent,
}

impl Run {
    fn stored(&self) -> StoredEvent {
        StoredEvent { seq: self.seq, turn: self.turn, at: self.at, event: json_of(&self.event) }
    }
}

/// `event` as the journal keeps it.
fn json_of(event: &AgentEvent) -> EventJson {
    EventJson::of(event).unwrap_or_else(|err| {
        // Plain data always serializes; keep the place in the journal all the same.
        EventJson::from(serde_json::json!({ "type": "unencodable", "error": err.to_string() }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal() -> Journal {
        let record = SessionRecord::empty(
            crate::ids::SessionId::from_string("s"),
            crate::model::AgentSpec {
                model: "scripted:test".into(),
                system_prompt: None,
                max_tokens: 100,
                budget: crate::model::Budget::default(),
                context: crate::model::ContextSettings::default(),
                tools: crate::tools::ToolConfig::legacy(),
                structured_output: None,
                reasoning: None,
                agent: None,
                skills: None,
                documents: None,
            },
            "title".into(),
            Utc::now(),
        );
        Journal::open(&record, true)
    }

    fn kinds(events: &[StoredEvent]) -> Vec<&str> {
        events.iter().map(StoredEvent::kind).collect()
    }

    #[test]
    fn the_running_turns_events_are_provisional_until_saved_and_every_change_is_signalled() {
        let journal = journal();
        let mut activity = journal.activity();
        journal.record(AgentEvent::TurnStarted { turn: 1 });
        assert!(activity.has_changed().unwrap());
        activity.mark_unchanged();
        journal.record(AgentEvent::TextDelta { text: "Hel".into() });
        let first = journal.provisional(None);
        let text_seq = first.last().unwrap().seq;
        activity.mark_unchanged();
        // A delta that grows the last event changes it in place, and says so.
        journal.record(AgentEvent::TextDelta { text: "lo".into() });
        assert!(activity.has_changed().unwrap());
        let grown = journal.provisional(Some(text_seq - 1));
        assert_eq!(
            (grown.len(), grown[0].seq, grown[0].event.to_value()["text"].as_str()),
            (1, text_seq, Some("Hello"))
        );
        activity.mark_unchanged();
        journal.mark_saved(journal.unsaved().len());
        assert!(activity.has_changed().unwrap(), "a commit is a change too");
        assert!(journal.provisional(None).is_empty());
    }

    #[test]
    fn journal_merges_a_run_of_text_deltas_losslessly_and_numbers_events_without_gaps() {
        let journal = journal();
        journal.record(AgentEvent::TurnStarted { turn: 1 });
        for part in ["Hel", "lo", ", wor", "ld"] {
            journal.record(AgentEvent::TextDelta { text: part.into() });
        }
        journal.record(AgentEvent::ToolCallRequested {
            id: "t".into(),
            name: "x".into(),
            input: serde_json::json!({}),
        });
        journal.record(AgentEvent::TextDelta { text: "again".into() });
        let events = journal.unsaved();
        assert_eq!(
            kinds(&events),
            ["session_created", "turn_started", "text_delta", "tool_call_requested", "text_delta"]
        );
        assert_eq!(events.iter().map(|event| event.seq).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        assert_eq!(events[2].event.to_value()["text"], "Hello, world");
        assert_eq!(events[2].turn, 1);
        assert_eq!(events[0].turn, 0);
    }

    #[test]
    fn a_saved_run_of_text_is_closed_and_an_unsaved_one_keeps_growing() {
        let journal = journal();
        journal.record(AgentEvent::TextDelta { text: "one".into() });
        // A save that fails reads the run and commits nothing: the run goes on growing.
        assert_eq!(journal.unsaved().len(), 2);
        journal.record(AgentEvent::TextDelta { text: " two".into() });
        let text = |event: &StoredEvent| event.event.to_value()["text"].as_str().unwrap_or_default().to_owned();
        assert_eq!(text(&journal.unsaved()[1]), "one two");
        // One that commits it closes it: what streams next is a new event.
        journal.mark_saved(2);
        journal.record(AgentEvent::TextDelta { text: " three".into() });
        journal.record(AgentEvent::ReasoningDelta { text: "hm".into() });
        let events = journal.held();
        assert_eq!(kinds(&events), ["session_created", "text_delta", "text_delta", "reasoning_delta"]);
        assert_eq!(events.iter().map(text).collect::<Vec<_>>(), ["", "one two", " three", "hm"]);
        assert_eq!(events.iter().map(|event| event.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(kinds(&journal.provisional(Some(2))), ["reasoning_delta"]);
    }

    #[test]
    fn journal_archived_tag_is_the_one_the_store_writes() {
        assert_eq!(serde_json::to_value(AgentEvent::Archived).unwrap()["type"], AgentEvent::ARCHIVED_TYPE);
        #[cfg(feature = "session-store")]
        assert_eq!(AgentEvent::ARCHIVED_TYPE, crate::store::ARCHIVED_EVENT);
    }

    #[test]
    fn journal_keeps_unsaved_events_until_marked_and_publishes_them_in_memory() {
        let journal = journal();
        journal.record(AgentEvent::TurnStarted { turn: 1 });
        assert!(journal.page(None, 10).is_empty(), "nothing is published before a save");
        journal.mark_saved(1);
        assert_eq!(kinds(&journal.page(None, 10)), ["session_created"]);
        assert_eq!(kinds(&journal.unsaved()), ["turn_started"]);
        journal.mark_saved(1);
        assert_eq!(kinds(&journal.page(Some(0), 10)), ["turn_started"]);
        assert_eq!(journal.next_seq(), 2);
    }
}
