//! Where each finished turn ends in a session's history ([`TurnMarks`]), what a fork came from
//! ([`ForkOrigin`]), and the answers of `session_fork` and `session_rewind`.
//!
//! A turn's end is only a place to fork at or rewind to when the history there is a whole
//! conversation a provider accepts: the turn ended (completed, failed or cancelled, each of
//! which closes its tool calls) and holds no step for the caller (whose `tool_use` waits for
//! results). Compaction replaces the history, so the marks before it no longer point anywhere:
//! they are dropped, and the compacted history is the mark of the turn it happened in.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::SessionId;

/// The most turn ends a record keeps: the newest ones. A record is written at every save and
/// held by every live session, so the marks stay a few kilobytes however long the session
/// (each is stored as a `[turn, messages]` pair, about a dozen bytes); an older turn can no
/// longer be forked at or rewound to, and the error says so. Long sessions compact well before
/// this many turns, and compaction drops the marks before it anyway.
pub const MAX_TURN_MARKS: usize = 512;

/// One finished turn's end: how many messages the history held right after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u64, u64)", into = "(u64, u64)")]
pub struct TurnMark {
    pub turn: u64,
    pub messages: u64,
}

impl From<(u64, u64)> for TurnMark {
    fn from((turn, messages): (u64, u64)) -> Self {
        Self { turn, messages }
    }
}

impl From<TurnMark> for (u64, u64) {
    fn from(mark: TurnMark) -> Self {
        (mark.turn, mark.messages)
    }
}

/// The ends of the newest finished turns since the history was last replaced, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TurnMarks(Vec<TurnMark>);

impl TurnMarks {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where turn `turn` ended, if it is a mark kept.
    pub fn get(&self, turn: u64) -> Option<TurnMark> {
        self.0.iter().rev().find(|mark| mark.turn == turn).copied()
    }

    /// The newest mark.
    pub fn last(&self) -> Option<TurnMark> {
        self.0.last().copied()
    }

    /// Records where a turn ended (a mark of the same turn is replaced: a compaction after it).
    pub fn push(&mut self, mark: TurnMark) {
        self.0.retain(|kept| kept.turn < mark.turn && kept.messages <= mark.messages);
        self.0.push(mark);
        if self.0.len() > MAX_TURN_MARKS {
            let excess = self.0.len() - MAX_TURN_MARKS;
            self.0.drain(..excess);
        }
    }

    /// Forgets every mark: the history they pointed into was replaced.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Keeps the marks up to turn `turn` (a rewind to it, or a fork at it).
    pub fn truncate_after(&mut self, turn: u64) {
        self.0.retain(|mark| mark.turn <= turn);
    }

    /// The turns after `turn` that have marks (what a rewind to `turn` drops).
    pub fn after(&self, turn: u64) -> Vec<u64> {
        self.0.iter().filter(|mark| mark.turn > turn).map(|mark| mark.turn).collect()
    }

    /// The oldest turn kept, to say why an older one cannot be reached.
    pub fn oldest(&self) -> Option<u64> {
        self.0.first().map(|mark| mark.turn)
    }
}

impl super::SessionRecord {
    /// Where turn `turn` ends in the history (`None`: the turn the history ends with now),
    /// or why it cannot be reached. Turn 0 is the empty conversation before the first turn.
    pub fn turn_end(&self, turn: Option<u64>) -> Result<TurnMark, String> {
        // A record stored before marks were kept: its history ends with its last turn.
        let unmarked = (self.turn_marks.is_empty() && self.pending.is_none() && self.message_count > 0)
            .then_some(TurnMark { turn: self.turns, messages: self.message_count });
        let latest = self.turn_marks.last().or(unmarked);
        let start = TurnMark { turn: 0, messages: 0 };
        let Some(turn) = turn else { return Ok(latest.unwrap_or(start)) };
        if turn == 0 {
            return Ok(start);
        }
        if turn > self.turns {
            return Err(format!("session {} has run {} turns, not {turn}", self.session_id, self.turns));
        }
        if let Some(mark) = self.turn_marks.get(turn).or(latest.filter(|mark| mark.turn == turn)) {
            return Ok(mark);
        }
        let kept = match (self.turn_marks.oldest().or(latest.map(|mark| mark.turn)), latest) {
            (Some(oldest), Some(newest)) => format!("the ends of turns {oldest} to {}", newest.turn),
            _ => "no finished turn".to_owned(),
        };
        Err(format!(
            "turn {turn} of session {} cannot be reached: its history holds {kept} (earlier turns were compacted \
             away or are older than the newest {MAX_TURN_MARKS}; a later one was rewound, or holds tool calls for \
             the caller)",
            self.session_id
        ))
    }
}

/// The session and turn a forked session was copied from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForkOrigin {
    pub session_id: SessionId,
    /// The source's last turn the fork holds.
    pub turn: u64,
}

/// What `session_rewind` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RewindResult {
    pub session_id: SessionId,
    /// The turn the history now ends with.
    pub to_turn: u64,
    /// The turns dropped from the model's history (their events stay in the journal).
    pub rewound_turns: Vec<u64>,
    /// Messages dropped from the history.
    pub dropped_messages: u64,
    /// Messages in the history now.
    pub message_count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(turn: u64, messages: u64) -> TurnMark {
        TurnMark { turn, messages }
    }

    #[test]
    fn a_mark_replaces_those_it_contradicts_and_the_oldest_go_first() {
        let mut marks = TurnMarks::default();
        marks.push(mark(1, 2));
        marks.push(mark(2, 4));
        // Turn 2 again (compacted after it): its old mark goes.
        marks.push(mark(2, 3));
        assert_eq!(marks.0, vec![mark(1, 2), mark(2, 3)]);
        for turn in 3..3 + MAX_TURN_MARKS as u64 {
            marks.push(mark(turn, turn * 2));
        }
        assert_eq!(marks.0.len(), MAX_TURN_MARKS);
        assert_eq!(marks.oldest(), Some(3));
        assert_eq!(marks.get(2), None);
    }

    #[test]
    fn marks_are_stored_as_pairs() {
        let mut marks = TurnMarks::default();
        marks.push(mark(1, 2));
        marks.push(mark(2, 6));
        let text = serde_json::to_string(&marks).unwrap();
        assert_eq!(text, "[[1,2],[2,6]]");
        assert_eq!(serde_json::from_str::<TurnMarks>(&text).unwrap(), marks);
    }

    #[test]
    fn rewinding_keeps_the_marks_up_to_the_turn() {
        let mut marks = TurnMarks::default();
        for turn in 1..=5 {
            marks.push(mark(turn, turn * 2));
        }
        assert_eq!(marks.after(3), vec![4, 5]);
        marks.truncate_after(3);
        assert_eq!(marks.last(), Some(mark(3, 6)));
    }
}
