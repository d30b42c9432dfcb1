//! The rules every provider enforces on a conversation, applied to any history deputy can hold.
//!
//! A history is written by many hands: streamed responses (whitespace before a tool call),
//! interrupts and cut-off responses, held approvals and callbacks, pruning and compaction,
//! inbox mail and hooks' added context, forks of another session's history, structured-output
//! retries, restarts. Rather than trust every writer, each wire adapter passes the history
//! through [`conform`] when it writes a request, and what comes out keeps the rules whatever
//! came in:
//!
//! - no empty or whitespace-only text block, no message left without content;
//! - no two consecutive messages of one role (they are merged), and the first is the user's;
//! - every tool call is answered at the start of the very next user message: results are moved
//!   there, a call left without one gets a "not run" error result, and a result answering no
//!   call of the message before becomes text (its content is kept, its pairing cannot be);
//! - reasoning goes back only to the wire it came from ([`Keep`]);
//! - every tool the history names is declared: the request's tools, or else a stub
//!   declaration ([`Conformed::stubs`]) for a tool the session no longer has (the structured
//!   answer tool of an earlier turn, a fork's parent tools). Stubs rather than rewriting the
//!   old calls as text: the history's bytes stay as they were, so the prompt cache still reads
//!   them, and the model does not learn to write tool calls as prose.
//!
//! The stored history is never changed: this is a view, borrowing every block it keeps.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::{ContentBlock, Message, Role, ToolSpec};

/// What a stub declaration tells the model.
pub const STUB_DESCRIPTION: &str =
    "Not available in this session any more (earlier messages called it). Do not call it.";

/// The content of the result given to a call the history never answered.
pub const NOT_RUN: &str = "not run: no result was recorded for this call";

/// What opens a history that would otherwise begin with the assistant.
pub const CONTINUED: &str = "(The conversation continues.)";

/// Which reasoning blocks a wire takes back.
pub type Keep = fn(&ContentBlock) -> bool;

/// One message as it goes on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn<'a> {
    pub role: Role,
    pub blocks: Vec<Cow<'a, ContentBlock>>,
}

/// A history in the providers' rules, borrowed from the original.
#[derive(Debug, Clone, PartialEq)]
pub struct Conformed<'a> {
    /// The turns, after those [`conform_after`] was told were settled.
    pub turns: Vec<Turn<'a>>,
    /// Declarations for the tools the history calls that the request does not declare.
    pub stubs: Vec<ToolSpec>,
    /// What is settled now (see [`Settled`]).
    pub settled: Settled,
    /// How many of `turns`, from the first, this conform settled.
    pub newly_settled: usize,
}

/// The first turns of a conformed history that no message appended later changes: those up to
/// the last user turn followed by an assistant turn. Appending only merges into the last turn,
/// a call's results are paired into the turn after it, and a user turn followed by an
/// assistant turn is neither last nor after a call of its own; so a wire can keep what it wrote
/// for them and conform only the messages after them at its next call ([`conform_after`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settled {
    /// The messages they hold (the history's first `messages`).
    pub messages: usize,
    /// The tools the settled turns call, by first call: a stub's place in the declarations.
    pub calls: Vec<String>,
}

/// `messages` in the providers' rules. `declared` says whether the request declares a tool;
/// `keep` which reasoning blocks the wire takes back.
pub fn conform<'a>(messages: &'a [Message], declared: &dyn Fn(&str) -> bool, keep: Keep) -> Conformed<'a> {
    conform_after(messages, &Settled::default(), declared, keep)
}

/// `messages` after the turns `before` says are settled (an earlier conform of the same
/// history, which has only been appended to since): the turns that follow them, and what is
/// settled now. The result is what [`conform`] gives for the whole history, less those turns.
pub fn conform_after<'a>(
    messages: &'a [Message],
    before: &Settled,
    declared: &dyn Fn(&str) -> bool,
    keep: Keep,
) -> Conformed<'a> {
    let from = before.messages.min(messages.len());
    let (mut turns, mut ends) = merged_turns(&messages[from..], keep);
    pair_tool_calls(&mut turns, &mut ends, from == 0);
    if from == 0 && turns.first().is_some_and(|turn| turn.role == Role::Assistant) {
        turns.insert(0, Turn { role: Role::User, blocks: vec![Cow::Owned(text(CONTINUED))] });
        ends.insert(0, 0);
    }
    // A settled turn holds a message: the turn that opens a history with the assistant's
    // message (`CONTINUED`) holds none, and is written again with the history's first message.
    let newly = (1..turns.len())
        .rev()
        .find(|&next| {
            turns[next - 1].role == Role::User && turns[next].role == Role::Assistant && ends[next - 1] > 0
        })
        .unwrap_or(0);
    let mut calls = before.calls.clone();
    add_calls(&mut calls, &turns[..newly]);
    let settled = Settled {
        messages: if newly == 0 { before.messages } else { from + ends[newly - 1] },
        calls: calls.clone(),
    };
    add_calls(&mut calls, &turns[newly..]);
    let stubs = stubs(&calls, declared);
    Conformed { turns, stubs, settled, newly_settled: newly }
}

fn text(text: impl Into<String>) -> ContentBlock {
    ContentBlock::Text { text: text.into() }
}

/// Whether a block may go out at all.
fn sendable(block: &ContentBlock, keep: Keep) -> bool {
    match block {
        ContentBlock::Text { text } => !text.trim().is_empty(),
        block if block.is_reasoning() => keep(block),
        _ => true,
    }
}

/// The messages' sendable blocks, consecutive messages of one role merged, empty ones gone;
/// and where each turn ends (after the last message that went into it).
fn merged_turns(messages: &[Message], keep: Keep) -> (Vec<Turn<'_>>, Vec<usize>) {
    let mut turns: Vec<Turn<'_>> = Vec::with_capacity(messages.len());
    let mut ends: Vec<usize> = Vec::with_capacity(messages.len());
    for (index, message) in messages.iter().enumerate() {
        let blocks = message.content.iter().filter(|block| sendable(block, keep)).map(Cow::Borrowed);
        match turns.last_mut() {
            Some(last) if last.role == message.role => {
                last.blocks.extend(blocks);
                if let Some(end) = ends.last_mut() {
                    *end = index + 1;
                }
            }
            _ => {
                let blocks: Vec<_> = blocks.collect();
                if !blocks.is_empty() {
                    turns.push(Turn { role: message.role, blocks });
                    ends.push(index + 1);
                }
            }
        }
    }
    (turns, ends)
}

/// Every call answered at the start of the next user message; results answering nothing
/// become text (in the first turn too when `first` holds the history's first message). A
/// turn added for answers ends where its call's does.
fn pair_tool_calls(turns: &mut Vec<Turn<'_>>, ends: &mut Vec<usize>, first: bool) {
    let mut index = 0;
    while index < turns.len() {
        let calls: Vec<String> = match turns[index].role {
            Role::Assistant => call_ids(&turns[index]),
            Role::User => Vec::new(),
        };
        let answers = index + 1;
        match turns[index].role {
            Role::User if index == 0 && first => rest_to_text(&mut turns[index], &HashSet::new()),
            Role::User => {}
            Role::Assistant if calls.is_empty() => {
                if let Some(next) = turns.get_mut(answers).filter(|next| next.role == Role::User) {
                    rest_to_text(next, &HashSet::new());
                }
            }
            Role::Assistant => {
                if turns.get(answers).is_none_or(|next| next.role != Role::User) {
                    turns.insert(answers, Turn { role: Role::User, blocks: Vec::new() });
                    ends.insert(answers, ends[index]);
                }
                answer_calls(&mut turns[answers], &calls);
            }
        }
        index += 1;
    }
}

fn call_ids(turn: &Turn<'_>) -> Vec<String> {
    turn.blocks
        .iter()
        .filter_map(|block| match block.as_ref() {
            ContentBlock::ToolUse { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// Puts the results of `calls` first in `turn`, in call order (a missing one as "not run"),
/// and turns every other result into text.
fn answer_calls(turn: &mut Turn<'_>, calls: &[String]) {
    let mut found: HashMap<&str, usize> = HashMap::new();
    for (position, block) in turn.blocks.iter().enumerate() {
        if let ContentBlock::ToolResult { tool_use_id, .. } = block.as_ref()
            && calls.contains(tool_use_id)
        {
            found.entry(tool_use_id.as_str()).or_insert(position);
        }
    }
    let positions: Vec<Option<usize>> = calls.iter().map(|id| found.get(id.as_str()).copied()).collect();
    let in_order = positions.iter().enumerate().all(|(rank, position)| *position == Some(rank));
    if in_order {
        let answered: HashSet<usize> = (0..calls.len()).collect();
        return rest_to_text(turn, &answered);
    }
    let mut blocks = std::mem::take(&mut turn.blocks);
    let answered: HashSet<usize> = positions.iter().flatten().copied().collect();
    let mut results: Vec<Cow<'_, ContentBlock>> = Vec::with_capacity(blocks.len() + calls.len());
    for (id, position) in calls.iter().zip(&positions) {
        results.push(match position {
            Some(position) => std::mem::replace(&mut blocks[*position], Cow::Owned(text(""))),
            None => Cow::Owned(ContentBlock::ToolResult {
                tool_use_id: id.clone(),
                content: NOT_RUN.to_owned(),
                is_error: true,
            }),
        });
    }
    let rest = blocks.into_iter().enumerate().filter(|(position, _)| !answered.contains(position));
    results.extend(rest.map(|(_, block)| block));
    turn.blocks = results;
    let answered: HashSet<usize> = (0..calls.len()).collect();
    rest_to_text(turn, &answered);
}

/// Every tool result of `turn` outside `answered` (positions) becomes text.
fn rest_to_text(turn: &mut Turn<'_>, answered: &HashSet<usize>) {
    for (position, block) in turn.blocks.iter_mut().enumerate() {
        if answered.contains(&position) {
            continue;
        }
        if let ContentBlock::ToolResult { tool_use_id, content, is_error } = block.as_ref() {
            let error = if *is_error { ", an error" } else { "" };
            *block = Cow::Owned(text(format!("[result of tool call {tool_use_id}{error}]\n{content}")));
        }
    }
}

/// Adds the tools `turns` call to `calls`, each once, by first call.
fn add_calls(calls: &mut Vec<String>, turns: &[Turn<'_>]) {
    for block in turns.iter().flat_map(|turn| &turn.blocks) {
        if let ContentBlock::ToolUse { name, .. } = block.as_ref()
            && !calls.contains(name)
        {
            calls.push(name.clone());
        }
    }
}

/// Declarations for the tools called (`calls`, by first call) that are not declared.
fn stubs(calls: &[String], declared: &dyn Fn(&str) -> bool) -> Vec<ToolSpec> {
    calls
        .iter()
        .filter(|name| !declared(name))
        .map(|name| ToolSpec {
            name: name.clone(),
            description: STUB_DESCRIPTION.to_owned(),
            input_schema: json!({"type": "object"}).into(),
        })
        .collect()
}

#[cfg(test)]
mod tests;
