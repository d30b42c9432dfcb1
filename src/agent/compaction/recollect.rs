//! What a summary takes out of the context, kept as passages `memory_search` can find again
//! (seeds 000–001: discarded history is kept "for future memory indexing").
//!
//! A passage is the text of one turn (prompts, answers, tool calls and their results, each
//! capped), cut into pieces of about [`PASSAGE_BYTES`] at line boundaries so one hit is
//! something a model can read, not a whole session. Reasoning is left out (it is the model's
//! scratch work, and the Anthropic wire signs it), and so are earlier summaries (their facts
//! were recollected when the turns they summarize were).

use super::rebuild::{SUMMARY_PREFIX, clean_turn_starts};
use crate::llm::{ContentBlock, Message, Role};
use crate::model::memory::Recollection;
use crate::text::truncate_at_char_boundary;

/// Bytes of one passage at most: about 500 tokens.
pub const PASSAGE_BYTES: usize = 2_000;
/// Bytes kept of one tool call's arguments and of one tool result.
const TOOL_BYTES: usize = 600;

/// The passages of `dropped`, the front of a history whose turns end at `last_turn` with
/// `starts_after` more turns beginning after it (the part the summary keeps). A turn is
/// numbered by counting turn starts back from the history's last turn; a turn that began
/// without a prompt (answering held calls) continues the turn before it.
pub fn recollect(dropped: &[Message], last_turn: u64, starts_after: usize) -> Vec<Recollection> {
    let starts = clean_turn_starts(dropped);
    let mut passages = Vec::new();
    let mut begin = 0;
    let mut bounds: Vec<usize> = starts.iter().copied().filter(|&start| start > 0).collect();
    bounds.push(dropped.len());
    for end in bounds {
        // Turn starts from this piece's own start on: the turns after it plus itself.
        let later = starts.iter().filter(|&&start| start > begin).count() + starts_after;
        let turn = last_turn.saturating_sub(later as u64);
        let text = render(&dropped[begin..end]);
        passages.extend(split(&text).into_iter().map(|text| Recollection { turn, text }));
        begin = end;
    }
    passages
}

/// A turn's messages as plain lines.
fn render(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        for block in &message.content {
            match block {
                ContentBlock::Text { text } => {
                    let text = text.strip_prefix(SUMMARY_PREFIX).map_or(text.as_str(), |_| "");
                    if text.trim().is_empty() {
                        continue;
                    }
                    let who = if message.role == Role::User { "user" } else { "assistant" };
                    out.push_str(&format!("{who}: {}\n", text.trim()));
                }
                ContentBlock::ToolUse { name, input, .. } => {
                    let arguments = input.to_string();
                    out.push_str(&format!("tool call {name}: {}\n", capped(&arguments)));
                }
                ContentBlock::ToolResult { content, is_error, .. } => {
                    let label = if *is_error { "tool error" } else { "tool result" };
                    out.push_str(&format!("{label}: {}\n", capped(content.trim())));
                }
                ContentBlock::Thinking { .. }
                | ContentBlock::RedactedThinking { .. }
                | ContentBlock::Reasoning { .. } => {}
            }
        }
    }
    out
}

fn capped(text: &str) -> String {
    let kept = truncate_at_char_boundary(text, TOOL_BYTES);
    if kept.len() < text.len() { format!("{kept} […]") } else { kept.to_owned() }
}

/// `text` in pieces of at most [`PASSAGE_BYTES`], cut after a line where one ends in reach.
fn split(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if rest.len() <= PASSAGE_BYTES {
            pieces.push(rest.to_owned());
            break;
        }
        let window = truncate_at_char_boundary(rest, PASSAGE_BYTES);
        // Cut at the last line break in the window's second half, else at its last space.
        let cut = window
            .rfind('\n')
            .filter(|&at| at >= PASSAGE_BYTES / 2)
            .or_else(|| window.rfind(' ').filter(|&at| at >= PASSAGE_BYTES / 2))
            .unwrap_or(window.len());
        pieces.push(rest[..cut].trim().to_owned());
        rest = rest[cut..].trim_start();
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_turn_is_a_passage_numbered_back_from_the_last_turn() {
        let dropped = vec![
            Message::user_text("the vault code is 4417"),
            Message::assistant(vec![ContentBlock::Text { text: "noted".into() }]),
            Message::user_text("and the door is blue"),
            Message::assistant(vec![
                ContentBlock::Reasoning { text: "secret scratch".into() },
                ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "read_file".into(),
                    input: serde_json::json!({"path": "a"}),
                },
            ]),
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "c1".into(),
                    content: "file body".into(),
                    is_error: false,
                }],
            },
        ];
        // Turns 3 and 4 were dropped; turn 5 (one start) is kept.
        let passages = recollect(&dropped, 5, 1);
        assert_eq!(passages.len(), 2);
        assert_eq!(
            passages[0],
            Recollection { turn: 3, text: "user: the vault code is 4417\nassistant: noted".into() }
        );
        assert_eq!(passages[1].turn, 4);
        assert!(passages[1].text.contains("tool call read_file: {\"path\":\"a\"}"));
        assert!(passages[1].text.contains("tool result: file body"));
        assert!(!passages[1].text.contains("secret scratch"), "reasoning is never recollected");
    }

    #[test]
    fn earlier_summaries_are_left_out_and_long_turns_are_cut_at_lines() {
        let summary = Message::user_text(format!("{SUMMARY_PREFIX}old summary"));
        let long: String = (0..200).map(|line| format!("line {line} of a long answer\n")).collect();
        let dropped = vec![summary, Message::assistant(vec![ContentBlock::Text { text: long }])];
        let passages = recollect(&dropped, 2, 0);
        assert!(passages.len() > 1);
        assert!(passages.iter().all(|passage| passage.text.len() <= PASSAGE_BYTES && passage.turn == 2));
        assert!(!passages[0].text.contains("old summary"));
        assert!(passages[1].text.starts_with("line "), "cut at a line: {:?}", &passages[1].text[..20]);
    }
}
