//! MCP progress for a turn: agent events in, at most one `notifications/progress` per second
//! out, each with a short human message (the text so far, or the tool being run).
//!
//! Clients that reset their request timeout on progress (the TS SDK with
//! `resetTimeoutOnProgress`, Claude Code) keep long turns alive this way, so a turn-running
//! call that sends a progress token and names no `wait_ms` waits [`PROGRESS_WAIT`] instead of
//! the usual 30 s.

use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::time::Instant;

use crate::agent::{AgentEvent, EventReceiver, EventSender, event_channel};

/// At most one notification per this interval.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// Characters of recent text shown in a progress message.
const TEXT_TAIL_CHARS: usize = 120;

/// The default wait of a `session_create` / `session_turn` that sends a progress token: 4 min.
/// Claude Code (2.1.332), the client that always sends one, gives a tool call a wall-clock
/// limit of `MCP_TOOL_TIMEOUT` (default 100,000,000 ms, about 28 h) and aborts it after 5 min
/// without a response or progress over HTTP (30 min over stdio). 4 min stays under that idle
/// limit even for a turn that reports nothing (a long silent tool), so such a client gets a
/// turn of up to 4 min inline instead of polling after 30 s; longer turns answer `running`.
pub const PROGRESS_WAIT: Duration = Duration::from_secs(240);

/// Gives the arguments of a turn-running call with a progress token [`PROGRESS_WAIT`] as their
/// `wait_ms`, unless they name one.
pub fn default_progress_wait(arguments: &mut serde_json::Value) {
    if let Some(arguments) = arguments.as_object_mut() {
        arguments.entry("wait_ms").or_insert_with(|| serde_json::Value::from(PROGRESS_WAIT.as_millis() as u64));
    }
}

/// What the caller should hear about: counts events and remembers the latest activity.
#[derive(Debug, Default)]
pub struct ProgressState {
    events: u64,
    text: String,
    running_tool: Option<String>,
    compacting: bool,
}

impl ProgressState {
    pub fn apply(&mut self, event: &AgentEvent) {
        self.events += 1;
        match event {
            AgentEvent::TextDelta { text } => {
                self.text.push_str(text);
                self.running_tool = None;
                let excess = self.text.chars().count().saturating_sub(TEXT_TAIL_CHARS);
                if excess > 0 {
                    self.text = self.text.chars().skip(excess).collect();
                }
            }
            // The text streamed so far is void: the answer starts again.
            AgentEvent::ResponseRestarted { .. } | AgentEvent::StructuredOutputRejected { .. } => self.text.clear(),
            AgentEvent::ToolCallRequested { name, .. } => self.running_tool = Some(name.clone()),
            AgentEvent::ToolResult { .. } => self.running_tool = None,
            AgentEvent::CompactionStarted { .. } => self.compacting = true,
            AgentEvent::CompactionCompleted { .. } | AgentEvent::CompactionFailed { .. } => self.compacting = false,
            // Counted above, but they change neither the text nor what is running.
            AgentEvent::TurnStarted { .. }
            | AgentEvent::ReasoningDelta { .. }
            | AgentEvent::Usage { .. }
            | AgentEvent::Pruned { .. }
            | AgentEvent::InboxDelivered { .. }
            | AgentEvent::TurnCompleted { .. }
            | AgentEvent::TurnCancelled { .. }
            | AgentEvent::TurnFailed { .. }
            | AgentEvent::SessionCreated { .. }
            | AgentEvent::PromptReceived { .. }
            | AgentEvent::ApprovalsAnswered { .. }
            | AgentEvent::Retry { .. }
            | AgentEvent::Archived
            | AgentEvent::Forked { .. }
            | AgentEvent::Rewound { .. } => {}
        }
    }

    /// Monotonic progress value: the number of events seen.
    pub fn progress(&self) -> f64 {
        self.events as f64
    }

    pub fn message(&self) -> String {
        if self.compacting {
            return "compacting the history".to_owned();
        }
        match (&self.running_tool, self.text.is_empty()) {
            (Some(tool), _) => format!("running tool {tool}"),
            (None, false) => format!("…{}", self.text.trim_start()),
            (None, true) => "working".to_owned(),
        }
    }
}

/// Forwards a turn's events as progress until dropped.
pub struct ProgressForwarder {
    task: tokio::task::JoinHandle<()>,
}

impl ProgressForwarder {
    /// Starts forwarding; feed the returned sender to the turn.
    pub fn start(peer: Peer<RoleServer>, token: ProgressToken) -> (EventSender, Self) {
        let (sender, receiver) = event_channel();
        let task = tokio::spawn(forward(peer, token, receiver));
        (sender, Self { task })
    }
}

impl Drop for ProgressForwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(peer: Peer<RoleServer>, token: ProgressToken, mut events: EventReceiver) {
    let mut state = ProgressState::default();
    let mut last_sent: Option<Instant> = None;
    let mut pending = false;
    loop {
        let next_allowed = last_sent.map(|at| at + PROGRESS_INTERVAL);
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { break };
                state.apply(&event);
                pending = true;
            }
            () = tokio::time::sleep_until(next_allowed.unwrap_or_else(Instant::now)), if pending => {}
        }
        let may_send = next_allowed.is_none_or(|at| Instant::now() >= at);
        if pending && may_send {
            let notification =
                ProgressNotificationParam::new(token.clone(), state.progress()).with_message(state.message());
            if peer.notify_progress(notification).await.is_err() {
                break;
            }
            last_sent = Some(Instant::now());
            pending = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_wait_is_kept() {
        let mut unnamed = serde_json::json!({"prompt": "p"});
        default_progress_wait(&mut unnamed);
        assert_eq!(unnamed["wait_ms"], 240_000);
        let mut named = serde_json::json!({"prompt": "p", "wait_ms": 5});
        default_progress_wait(&mut named);
        assert_eq!(named["wait_ms"], 5);
    }

    #[test]
    fn messages_follow_the_turn() {
        let mut state = ProgressState::default();
        assert_eq!(state.message(), "working");
        state.apply(&AgentEvent::TextDelta { text: "Looking at the file".into() });
        assert_eq!(state.message(), "…Looking at the file");
        state.apply(&AgentEvent::ToolCallRequested {
            id: "1".into(),
            name: "read_file".into(),
            input: serde_json::json!({}),
        });
        assert_eq!(state.message(), "running tool read_file");
        state.apply(&AgentEvent::TextDelta { text: "x".repeat(500) });
        assert_eq!(state.message().chars().count(), 1 + TEXT_TAIL_CHARS);
        assert_eq!(state.progress(), 3.0);
    }
}
