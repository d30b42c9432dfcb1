//! Human-readable text for the command line: session tables and conversations.

use std::fmt::Write;

use crate::llm::pricing::Usd;
use crate::llm::{ContentBlock, Message, Role};
use crate::model::TurnUsage;
use crate::session::{SessionList, SessionView};

/// Characters of a tool result shown before it is elided.
const TOOL_RESULT_PREVIEW: usize = 400;

/// One line per session, newest first.
pub fn session_list(list: &SessionList) -> String {
    let mut out = String::new();
    for session in &list.sessions {
        let _ = writeln!(
            out,
            "{}  {:<8}  {:>3} turns  {}  {}  {}",
            session.session_id,
            session.status.as_str(),
            session.turns,
            session.updated_at.format("%Y-%m-%d %H:%M"),
            session.model,
            session.title
        );
    }
    let _ = writeln!(out, "{} of {} sessions", list.sessions.len(), list.total);
    if let Some(cursor) = &list.next_cursor {
        let _ = writeln!(out, "next page: --cursor {cursor}");
    }
    out
}

/// An amount, or that it is unknown (the model has no known price): never a guess.
pub fn cost(cost: Option<Usd>) -> String {
    match cost {
        Some(cost) => format!("cost {cost}"),
        None => "cost unknown (no price for the model)".to_owned(),
    }
}

/// The exit summary of a turn run from the command line.
pub fn turn_usage(usage: &TurnUsage) -> String {
    let tokens = &usage.tokens;
    format!(
        "usage {} tokens ({} in, {} out, {} cache read, {} cache write), {}",
        tokens.total_tokens(),
        tokens.input_tokens,
        tokens.output_tokens,
        tokens.cache_read_input_tokens,
        tokens.cache_creation_input_tokens,
        cost(usage.cost_usd)
    )
}

/// A session's header, then its conversation.
pub fn session(view: &SessionView, messages: &[Message]) -> String {
    let (state, billing) = (&view.state, &view.billing);
    let mut out = String::new();
    let _ = writeln!(out, "session  {}", view.session_id);
    let _ = writeln!(out, "model    {}", state.model);
    let _ = writeln!(out, "status   {} after {} turns", state.status.as_str(), state.turns);
    let _ = writeln!(
        out,
        "usage    {} tokens ({} in, {} out), {} tool calls, {}",
        billing.total_tokens,
        billing.usage.input_tokens,
        billing.usage.output_tokens,
        billing.tool_calls,
        cost(billing.cost_usd)
    );
    for message in messages {
        let who = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let _ = writeln!(out, "\n── {who}");
        for block in &message.content {
            match block {
                ContentBlock::Text { text } => {
                    let _ = writeln!(out, "{text}");
                }
                ContentBlock::ToolUse { id, name, input } => {
                    let _ = writeln!(out, "[tool call {name} ({id})] {input}");
                }
                ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                    let label = if *is_error { "tool error" } else { "tool result" };
                    let mut preview: String = content.chars().take(TOOL_RESULT_PREVIEW).collect();
                    if content.chars().nth(TOOL_RESULT_PREVIEW).is_some() {
                        preview.push_str(" …");
                    }
                    let _ = writeln!(out, "[{label} ({tool_use_id})] {preview}");
                }
                reasoning => {
                    let _ = writeln!(out, "[reasoning] {}", reasoning.reasoning_text().unwrap_or("(redacted)"));
                }
            }
        }
    }
    out
}
