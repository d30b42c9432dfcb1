//! Stage 2's history rebuild: the summary, then the most recent complete turns.

use crate::llm::{ContentBlock, Message, Role};
use crate::model::context::estimate_message;

/// Starts the user message that carries the summary, so the model knows what it reads.
pub const SUMMARY_PREFIX: &str = "[The earlier part of this conversation was compacted. This is a summary of it, \
written as a hand-off to you. Build on it; do not redo work it says is done.]\n\n";

/// The request appended (as a user message) to a copy of the history to get the summary.
pub const COMPACTION_PROMPT: &str = "CONTEXT CHECKPOINT. The conversation above is about to be replaced by a summary \
so that the work can go on within the context window. Write that summary now, as a hand-off to another assistant \
who will continue the work without seeing anything above. Use these sections:\n\
1. Goal: what the user wants overall.\n\
2. User requests: every request and instruction the user gave, in order, quoting them where wording matters.\n\
3. Constraints and preferences.\n\
4. Progress: what is done, what is in progress, what is blocked.\n\
5. Key decisions and why.\n\
6. Exact details still needed: file paths, names, commands, error messages, values, ids.\n\
7. Next steps.\n\
Be complete but concise. Do not call tools. Answer with the summary only.";

/// Indices of user messages where a complete turn can begin: they carry a prompt and no tool
/// results, so no tool call/result pair crosses them.
pub fn clean_turn_starts(history: &[Message]) -> Vec<usize> {
    history
        .iter()
        .enumerate()
        .filter(|(_, message)| {
            message.role == Role::User
                && message.content.iter().any(|block| matches!(block, ContentBlock::Text { .. }))
                && !message.content.iter().any(|block| matches!(block, ContentBlock::ToolResult { .. }))
        })
        .map(|(index, _)| index)
        .collect()
}

/// How many messages at the front of `history` a summary replaces (see [`rebuild_history`]).
pub fn summarized_len(history: &[Message], recent_turn_budget: u64, keep_from: usize) -> usize {
    let keep_from = if keep_from >= history.len() {
        history.len()
    } else {
        clean_turn_starts(&history[..=keep_from]).last().copied().unwrap_or(0)
    };
    let mut start = keep_from;
    let mut spent = 0u64;
    let starts = clean_turn_starts(&history[..keep_from]);
    for &candidate in starts.iter().rev() {
        let cost: u64 = history[candidate..start].iter().map(estimate_message).sum();
        if spent + cost > recent_turn_budget {
            break;
        }
        spent += cost;
        start = candidate;
    }
    start
}

/// The history after a summary: one user message with the summary, joined with the earliest
/// kept turn, then the kept turns. Kept are the turn in progress (from `keep_from`, or the
/// history's end when no turn runs) and as many complete turns before it as fit in
/// `recent_turn_budget` tokens. `keep_from` is moved back to a clean turn start if needed, so
/// no tool call/result pair is ever split. The system prompt is not part of the history: it is
/// sent verbatim with every request.
pub fn rebuild_history(
    history: &[Message],
    summary: &str,
    recent_turn_budget: u64,
    keep_from: usize,
) -> Vec<Message> {
    let start = summarized_len(history, recent_turn_budget, keep_from);
    let mut summary_message = Message::user_text(format!("{SUMMARY_PREFIX}{summary}"));
    let mut kept = history[start..].iter().cloned();
    let mut rebuilt = Vec::with_capacity(history.len() - start + 1);
    match kept.next() {
        // The first kept message is a clean turn start (a user prompt): the summary joins it,
        // so roles keep alternating.
        Some(first) => {
            summary_message.content.extend(first.content);
            rebuilt.push(summary_message);
            rebuilt.extend(kept);
        }
        None => rebuilt.push(summary_message),
    }
    rebuilt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(prompt: &str, tool: bool) -> Vec<Message> {
        let mut messages = vec![Message::user_text(prompt)];
        if tool {
            messages.push(Message::assistant(vec![ContentBlock::ToolUse {
                id: format!("{prompt}-call"),
                name: "t".into(),
                input: serde_json::json!({}),
            }]));
            messages.push(Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: format!("{prompt}-call"),
                    content: "x".repeat(400),
                    is_error: false,
                }],
            });
        }
        messages.push(Message::assistant(vec![ContentBlock::Text { text: format!("answer to {prompt}") }]));
        messages
    }

    #[test]
    fn keeps_recent_whole_turns_within_the_budget_and_the_turn_in_progress() {
        let mut history: Vec<Message> = ["a", "b", "c"].iter().flat_map(|p| turn(p, true)).collect();
        let in_progress = history.len();
        history.push(Message::user_text("now"));

        let rebuilt = rebuild_history(&history, "SUMMARY", 200, in_progress);
        // Turn c (about 140 tokens) fits in 200, turn b would not.
        assert_eq!(rebuilt[0].role, Role::User);
        assert!(rebuilt[0].text().starts_with(SUMMARY_PREFIX) && rebuilt[0].text().contains("SUMMARYc"));
        assert_eq!(rebuilt.len(), 1 + 3 + 1, "summary+c prompt, c's call/result/answer, the prompt in progress");
        assert_eq!(rebuilt.last().map(Message::text).as_deref(), Some("now"));
        // Every tool result still follows its call.
        assert!(matches!(&rebuilt[1].content[0], ContentBlock::ToolUse { id, .. } if id == "c-call"));
        assert!(
            matches!(&rebuilt[2].content[0], ContentBlock::ToolResult { tool_use_id, .. } if tool_use_id == "c-call")
        );

        let nothing_recent = rebuild_history(&history, "S", 0, in_progress);
        assert_eq!(nothing_recent.len(), 1, "the in-progress prompt joins the summary");
        assert!(nothing_recent[0].text().ends_with("Snow"));

        let idle = rebuild_history(&history[..in_progress], "S", 0, in_progress);
        assert_eq!(idle.len(), 1);
    }

    #[test]
    fn a_message_with_tool_results_is_never_a_turn_start() {
        let mut merged = turn("a", true);
        // An interrupted turn left tool results; the next prompt joined them.
        merged.pop();
        if let Some(last) = merged.last_mut() {
            last.content.push(ContentBlock::Text { text: "next".into() });
        }
        assert_eq!(clean_turn_starts(&merged), vec![0]);
        let rebuilt = rebuild_history(&merged, "S", 0, 2);
        assert_eq!(rebuilt.len(), 3, "kept from the clean start before it, so the pair stays whole");
    }
}
