//! What happens during a turn, as a stream of events any surface can render.
//!
//! The loop emits them into an optional per-turn channel supplied by the caller
//! ([`event_channel`]); nothing in the loop waits on a consumer, so a slow or absent renderer
//! never slows a turn, and a stalled one costs bounded memory.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use crate::llm::Usage;
use crate::model::StopReason;

/// Serializable (and described by a JSON Schema) because REST streams it to clients as is;
/// deserializable because the session journal ([`super::journal`]) stores it and the projector
/// reads it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    TurnStarted {
        turn: u64,
    },
    /// Assistant text as it streams in.
    TextDelta {
        text: String,
    },
    /// The model's reasoning (thinking) as it streams in: never part of the answer's text.
    ReasoningDelta {
        text: String,
    },
    /// The model's response broke after it had begun streaming and is being sent again: the
    /// text streamed since the response began is void (a consumer showing it should drop it);
    /// the new attempt's text follows. The turn's result holds only the whole answer.
    ResponseRestarted {
        reason: String,
    },
    /// The model asked for a tool; it runs next.
    ToolCallRequested {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    /// A tool finished; `content` is what the model will see.
    ToolResult {
        id: String,
        name: String,
        content: String,
        is_error: bool,
    },
    /// The final answer did not validate against the turn's output schema (structured
    /// output). `errors` went back to the model, which answers again unless `attempt` was the
    /// last; the text streamed for the rejected answer is not the result.
    StructuredOutputRejected {
        attempt: u32,
        errors: Vec<String>,
    },
    /// Messages from the session's inbox entered the conversation: joined to the turn's
    /// prompt, or appended after a step's tool results, before the next model call.
    InboxDelivered {
        messages: Vec<crate::model::inbox::InboxMessage>,
    },
    /// Usage of one model response, and what it cost (`null` where the session's model has
    /// no known price, and in events journaled before costs were).
    Usage {
        usage: Usage,
        #[serde(default)]
        cost_usd: Option<crate::llm::pricing::Usd>,
    },
    /// Compaction began; `reason` is `threshold`, `overflow` or `manual`.
    CompactionStarted {
        reason: String,
        estimated_tokens: u64,
    },
    /// Old tool results were replaced by placeholders (stage 1).
    Pruned {
        results: u64,
        tokens_freed: u64,
    },
    /// The history was rebuilt around a summary (or pruning alone was enough).
    CompactionCompleted {
        tokens_before: u64,
        tokens_after: u64,
        summarized: bool,
    },
    /// The summary call failed; the session goes on with its history as it was.
    CompactionFailed {
        error: String,
    },
    TurnCompleted {
        turn: u64,
        stop_reason: StopReason,
    },
    TurnCancelled {
        turn: u64,
    },
    TurnFailed {
        turn: u64,
        error: String,
    },
    /// Lifecycle (journal): the session began. Recorded first in every session's journal.
    SessionCreated {
        title: String,
        model: String,
        #[serde(default)]
        labels: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        host_mode: bool,
    },
    /// Lifecycle (journal): a turn's prompt, before the turn starts.
    PromptReceived {
        turn: u64,
        prompt: String,
    },
    /// Lifecycle (journal): the caller answered the calls of a held step (`answered` of them,
    /// `denied` approvals among them) to start turn `turn`.
    ApprovalsAnswered {
        turn: u64,
        answered: u64,
        denied: u64,
    },
    /// The model call failed and is sent again after `delay_ms` (the retry gate). Streamed
    /// live too; retries before any content leave no other trace.
    Retry {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// Lifecycle (journal): the session was archived; it takes no more turns.
    Archived,
    /// Lifecycle (journal): the session began as a copy of `from_session_id`'s conversation up
    /// to its turn `at_turn` (recorded right after `session_created`).
    Forked {
        from_session_id: String,
        at_turn: u64,
    },
    /// Lifecycle (journal): the history was rewound to the end of turn `to_turn`; the events
    /// of `rewound_turns` stay above this one, no longer in the model's history.
    Rewound {
        to_turn: u64,
        rewound_turns: Vec<u64>,
        dropped_messages: u64,
    },
}

impl AgentEvent {
    /// The text of a streamed delta (answer or reasoning): what a backlog merges.
    pub fn streamed(&self) -> Option<&str> {
        match self {
            Self::TextDelta { text } | Self::ReasoningDelta { text } => Some(text),
            _ => None,
        }
    }

    pub(super) fn streamed_mut(&mut self) -> Option<&mut String> {
        match self {
            Self::TextDelta { text } | Self::ReasoningDelta { text } => Some(text),
            _ => None,
        }
    }

    /// The `type` tag of the `Archived` variant, for the store, which writes that event
    /// without knowing this enum.
    pub const ARCHIVED_TYPE: &'static str = "archived";
}

/// Events a consumer may fall behind by before streamed text is merged.
pub const EVENT_CAPACITY: usize = 256;
/// Most streamed text a merged delta holds for a consumer that fell behind; older text beyond
/// it is dropped, and the delta says how many bytes were skipped.
pub const MAX_MERGED_TEXT_BYTES: usize = 64 * 1024;

/// A turn's event channel: the loop sends, one consumer (an SSE response, MCP progress, the
/// command line's printer) receives.
///
/// Sending never waits, and a consumer that stops reading costs bounded memory: once
/// [`EVENT_CAPACITY`] events are queued, a `TextDelta` is merged into the `TextDelta` at the
/// back of the queue, which keeps only its last [`MAX_MERGED_TEXT_BYTES`] (the text it drops
/// is counted, and the delta starts with a marker saying how much). Every other event is
/// queued whatever the backlog: they are few per step and a consumer needs all of them (tool
/// calls and results, usage, the turn's end). The turn's result always has the whole text.
pub fn event_channel() -> (EventSender, EventReceiver) {
    let channel = Arc::new(Channel {
        queue: Mutex::new(Queue { events: VecDeque::new(), senders: 1, receiving: true }),
        ready: Notify::new(),
    });
    (EventSender(channel.clone()), EventReceiver(channel))
}

struct Channel {
    queue: Mutex<Queue>,
    ready: Notify,
}

struct Queue {
    events: VecDeque<Queued>,
    senders: usize,
    /// False once the receiver is dropped: sends are discarded.
    receiving: bool,
}

struct Queued {
    event: AgentEvent,
    /// Bytes of text dropped from the front of this (merged) `TextDelta`.
    skipped: usize,
}

impl Channel {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sending half of a turn's event channel ([`event_channel`]). Cloning adds a sender.
pub struct EventSender(Arc<Channel>);

impl EventSender {
    /// Queues `event` without waiting (see [`event_channel`] for what a backlog does).
    pub fn send(&self, event: AgentEvent) {
        let mut queue = self.0.lock();
        if !queue.receiving {
            return;
        }
        if queue.events.len() >= EVENT_CAPACITY
            && let Some(text) = event.streamed()
            && let Some(Queued { event: back, skipped }) = queue.events.back_mut()
            && std::mem::discriminant(back) == std::mem::discriminant(&event)
            && let Some(merged) = back.streamed_mut()
        {
            merged.push_str(text);
            if merged.len() > MAX_MERGED_TEXT_BYTES {
                let mut cut = merged.len() - MAX_MERGED_TEXT_BYTES;
                while !merged.is_char_boundary(cut) {
                    cut += 1;
                }
                merged.drain(..cut);
                *skipped += cut;
            }
            return;
        }
        queue.events.push_back(Queued { event, skipped: 0 });
        drop(queue);
        self.0.ready.notify_one();
    }
}

impl Clone for EventSender {
    fn clone(&self) -> Self {
        self.0.lock().senders += 1;
        Self(self.0.clone())
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        let last = {
            let mut queue = self.0.lock();
            queue.senders -= 1;
            queue.senders == 0
        };
        if last {
            self.0.ready.notify_one();
        }
    }
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSender").field("queued", &self.0.lock().events.len()).finish()
    }
}

/// The receiving half of a turn's event channel; dropping it discards what is queued and
/// whatever is sent later.
pub struct EventReceiver(Arc<Channel>);

impl EventReceiver {
    /// The next event; `None` once every sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<AgentEvent> {
        loop {
            {
                let mut queue = self.0.lock();
                if let Some(queued) = queue.events.pop_front() {
                    return Some(queued.into_event());
                }
                if queue.senders == 0 {
                    return None;
                }
            }
            // `notify_one` keeps a permit when nobody waits, so a send between the check
            // above and this wait is not missed.
            self.0.ready.notified().await;
        }
    }

    /// The next event if one is queued, without waiting.
    pub fn try_recv(&mut self) -> Option<AgentEvent> {
        self.0.lock().events.pop_front().map(Queued::into_event)
    }

    /// How many events are queued (merged deltas count once).
    pub fn len(&self) -> usize {
        self.0.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.receiving = false;
        queue.events.clear();
    }
}

impl Queued {
    fn into_event(mut self) -> AgentEvent {
        if self.skipped > 0
            && let Some(text) = self.event.streamed_mut()
        {
            let marker = format!("[… {} bytes of streamed text skipped: the reader fell behind …]", self.skipped);
            text.insert_str(0, &marker);
        }
        self.event
    }
}

/// Where the loop sends its events: the session's journal (always, when the session has one)
/// and one caller's channel (optional).
#[derive(Debug, Clone, Default)]
pub struct EventSink(Option<EventSender>, Option<super::journal::Journal>);

impl EventSink {
    pub fn new(sender: Option<EventSender>) -> Self {
        Self(sender, None)
    }

    /// The same sink, recording every event into `journal` as well.
    pub fn with_journal(mut self, journal: super::journal::Journal) -> Self {
        self.1 = Some(journal);
        self
    }

    pub fn emit(&self, event: AgentEvent) {
        match (&self.0, &self.1) {
            (Some(sender), Some(journal)) => {
                journal.record(event.clone());
                // A dropped receiver means the caller stopped listening; the turn goes on.
                sender.send(event);
            }
            (Some(sender), None) => sender.send(event),
            (None, Some(journal)) => journal.record(event),
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str) -> AgentEvent {
        AgentEvent::TextDelta { text: text.into() }
    }

    /// Security review F14 / code review §5.5: a consumer that stops reading used to make the
    /// server buffer every delta of the turn. Now the backlog is bounded, sending never waits,
    /// and no event but streamed text is lost.
    #[tokio::test]
    async fn f14_a_stalled_consumer_costs_bounded_memory_and_loses_no_control_event() {
        let (sender, mut receiver) = event_channel();
        let chunk = "x".repeat(1024);
        for step in 0..50u64 {
            for _ in 0..1000 {
                sender.send(delta(&chunk));
            }
            sender.send(AgentEvent::Usage { usage: crate::llm::Usage::default(), cost_usd: None });
            sender.send(AgentEvent::TurnStarted { turn: step });
        }
        // 50 MB were streamed; the queue holds the capacity, the 100 control events, and one
        // merged delta per run of deltas between them, each within its cap.
        assert!(receiver.len() <= EVENT_CAPACITY + 100 + 50, "{}", receiver.len());
        drop(sender);
        let mut turns = Vec::new();
        let mut text_bytes = 0;
        let mut skipped_markers = 0;
        while let Some(event) = receiver.recv().await {
            match event {
                AgentEvent::TextDelta { text } => {
                    assert!(text.len() <= MAX_MERGED_TEXT_BYTES + 100);
                    skipped_markers += usize::from(text.starts_with("[… "));
                    text_bytes += text.len();
                }
                AgentEvent::TurnStarted { turn } => turns.push(turn),
                _ => {}
            }
        }
        assert_eq!(turns, (0..50).collect::<Vec<_>>(), "every control event, in order");
        assert!(skipped_markers > 0 && text_bytes < 20 * 1024 * 1024, "{skipped_markers} {text_bytes}");
    }

    #[tokio::test]
    async fn a_consumer_that_keeps_up_sees_every_delta_as_sent() {
        let (sender, mut receiver) = event_channel();
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(event) = receiver.recv().await {
                seen.push(event);
            }
            seen
        });
        for n in 0..10 {
            sender.send(delta(&n.to_string()));
        }
        drop(sender);
        let seen = reader.await.unwrap();
        assert_eq!(seen, (0..10).map(|n| delta(&n.to_string())).collect::<Vec<_>>());
    }

    #[test]
    fn a_dropped_receiver_discards_what_is_sent() {
        let (sender, receiver) = event_channel();
        drop(receiver);
        sender.send(delta("nobody listens"));
        assert!(sender.0.lock().events.is_empty());
    }
}
