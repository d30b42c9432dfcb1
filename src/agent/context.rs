//! What the model sees of a session: resolving its context settings, and the ingest cap.
//!
//! Compiled in every build. The ingest cap (stage 0) protects every session from one huge tool
//! output; pruning and summarizing (stages 1 and 2) live in [`super::compaction`] behind the
//! `session-compaction` feature. The settings and token estimates themselves are plain data in
//! [`crate::model::context`], because the session record stores them.

use crate::error::SessionError;
use crate::llm::catalog::known_context_window;
use crate::model::context::{
    ContextOverrides, ContextSettings, DEFAULT_CONTEXT_WINDOW, DEFAULT_TOOL_OUTPUT_CAP_BYTES,
};
use crate::text::{tail_at_char_boundary, truncate_at_char_boundary};

const MIN_TOOL_OUTPUT_CAP_BYTES: u64 = 1024;

impl ContextSettings {
    /// Fills the defaults for `model` (`provider:model`) answering with `max_tokens` per response.
    pub fn resolve(
        model: &str,
        max_tokens: u32,
        overrides: &ContextOverrides,
        configured_window: Option<u64>,
    ) -> Result<Self, SessionError> {
        let context_window = overrides
            .context_window
            .or(configured_window)
            .or_else(|| known_context_window(model))
            .unwrap_or(DEFAULT_CONTEXT_WINDOW);
        let reserve = u64::from(max_tokens);
        if context_window <= reserve {
            return Err(SessionError::invalid(format!(
                "context_window ({context_window}) must be larger than max_tokens ({reserve})"
            )));
        }
        let threshold_tokens = overrides.threshold_tokens.unwrap_or((context_window - reserve) * 4 / 5);
        if threshold_tokens == 0 || threshold_tokens >= context_window {
            return Err(SessionError::invalid(format!(
                "threshold_tokens ({threshold_tokens}) must be between 1 and the context window ({context_window})"
            )));
        }
        let tool_output_cap_bytes = overrides.tool_output_cap_bytes.unwrap_or(DEFAULT_TOOL_OUTPUT_CAP_BYTES);
        if tool_output_cap_bytes < MIN_TOOL_OUTPUT_CAP_BYTES {
            return Err(SessionError::invalid(format!(
                "tool_output_cap_bytes must be at least {MIN_TOOL_OUTPUT_CAP_BYTES}"
            )));
        }
        let default_summary = u32::try_from((threshold_tokens / 4).min(4096)).unwrap_or(4096);
        let max_summary_tokens = overrides.max_summary_tokens.unwrap_or(default_summary);
        if max_summary_tokens == 0 {
            return Err(SessionError::invalid("max_summary_tokens must be at least 1"));
        }
        Ok(Self {
            context_window,
            threshold_tokens,
            min_turns_between_compactions: overrides.min_turns_between_compactions.unwrap_or(3),
            recent_turn_budget: overrides.recent_turn_budget.unwrap_or((threshold_tokens / 4).min(20_000)),
            max_summary_tokens,
            tool_output_cap_bytes,
            prune_protect_tokens: (threshold_tokens / 2).min(40_000),
            output_reserve_tokens: reserve,
            project_instructions: overrides.project_instructions.unwrap_or(true),
        })
    }
}

/// Caps a tool output at `cap` bytes: the head and tail stay, the middle is replaced by a
/// marker that says how to get the whole output. Returns the visible text and, when capped,
/// the full output to keep.
pub fn cap_tool_output(content: String, cap: u64, tool_use_id: &str) -> (String, Option<String>) {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    if content.len() <= cap {
        return (content, None);
    }
    let (head, tail) = (truncate_at_char_boundary(&content, cap / 2), tail_at_char_boundary(&content, cap / 2));
    let elided = content.len() - head.len() - tail.len();
    let visible = format!(
        "{}\n[… {elided} bytes of this tool output elided; the caller can read the whole output with \
         session_tool_output (tool_use_id {tool_use_id}) …]\n{}",
        head, tail
    );
    (visible, Some(content))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Message, Usage};
    use crate::model::context::{ContextState, estimate_text};

    #[test]
    fn defaults_follow_the_model_and_bad_values_are_refused() {
        let claude =
            ContextSettings::resolve("anthropic:claude-sonnet-4-5", 8192, &ContextOverrides::default(), None);
        let claude = claude.unwrap();
        assert_eq!(claude.context_window, 200_000);
        assert_eq!(claude.threshold_tokens, (200_000 - 8192) * 4 / 5);
        assert_eq!((claude.min_turns_between_compactions, claude.recent_turn_budget), (3, 20_000));
        let local = ContextSettings::resolve("ollama:llama3.2", 1000, &ContextOverrides::default(), Some(8192));
        assert_eq!(local.unwrap().context_window, 8192);
        let unknown = ContextSettings::resolve("x:y", 1000, &ContextOverrides::default(), None).unwrap();
        assert_eq!(unknown.context_window, DEFAULT_CONTEXT_WINDOW);

        let small = ContextOverrides { context_window: Some(1000), ..ContextOverrides::default() };
        assert!(ContextSettings::resolve("x:y", 1000, &small, None).is_err());
        let threshold = ContextOverrides { threshold_tokens: Some(500_000), ..ContextOverrides::default() };
        assert!(ContextSettings::resolve("x:y", 1000, &threshold, None).is_err());
        let cap = ContextOverrides { tool_output_cap_bytes: Some(10), ..ContextOverrides::default() };
        assert!(ContextSettings::resolve("x:y", 1000, &cap, None).is_err());
    }

    #[test]
    fn the_default_matches_an_unknown_model_with_the_default_max_tokens() {
        let resolved = ContextSettings::resolve("x:y", 8192, &ContextOverrides::default(), None).unwrap();
        assert_eq!(ContextSettings::default(), resolved);
    }

    #[test]
    fn estimates_are_denser_for_json_and_non_ascii() {
        assert_eq!(estimate_text("abcdefgh"), 2);
        assert_eq!(estimate_text(r#"{"a": 1, "b":2}"#), 5);
        assert_eq!(estimate_text("日本語のテキスト"), 8);
        let mut state = ContextState::default();
        let history = vec![Message::user_text("x".repeat(400)), Message::user_text("y".repeat(40))];
        assert_eq!(state.estimated_history_tokens(&history), 104 + 14);
        state.measured(&Usage { input_tokens: 1000, output_tokens: 50, ..Usage::default() }, 1);
        assert_eq!(state.estimated_history_tokens(&history), 1050 + 14);
    }

    #[test]
    fn capped_outputs_keep_head_and_tail_and_say_how_to_get_the_rest() {
        let (same, full) = cap_tool_output("short".into(), 1024, "t1");
        assert_eq!((same.as_str(), full), ("short", None));
        let long = format!("{}{}{}", "h".repeat(600), "m".repeat(5000), "t".repeat(600));
        let (visible, full) = cap_tool_output(long.clone(), 1024, "t1");
        assert_eq!(full.as_deref(), Some(long.as_str()));
        assert!(visible.starts_with(&"h".repeat(512)) && visible.ends_with(&"t".repeat(512)));
        assert!(visible.contains("5176 bytes of this tool output elided") && visible.contains("tool_use_id t1"));
        let (unicode, _) = cap_tool_output("é".repeat(2000), 1025, "t2");
        assert!(unicode.starts_with('é'));
    }
}
