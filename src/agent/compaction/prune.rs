//! Stage 1: drop the bodies of old tool results, the cheapest way to shrink a history.

use crate::llm::{ContentBlock, Message};
use crate::model::context::{estimate_message, estimate_text};

/// How a pruned tool result begins; a result that already does is not pruned again.
pub const PLACEHOLDER_PREFIX: &str = "[pruned:";

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub results: u64,
    pub tokens_freed: u64,
}

/// Replaces the content of every tool result that lies entirely before the last
/// `protect_tokens` of the history with a placeholder. Blocks, ids and pairs stay as they are,
/// so the history remains valid for every provider.
pub fn prune(history: &mut [Message], protect_tokens: u64) -> Pruned {
    let mut pruned = Pruned::default();
    let mut newer = 0u64;
    for message in history.iter_mut().rev() {
        let size = estimate_message(message);
        if newer >= protect_tokens {
            for block in &mut message.content {
                if let ContentBlock::ToolResult { content, .. } = block
                    && !content.starts_with(PLACEHOLDER_PREFIX)
                {
                    let before = estimate_text(content);
                    *content = format!(
                        "{PLACEHOLDER_PREFIX} this older tool output ({} bytes) was removed to save context; run the \
                         tool again if it is needed]",
                        content.len()
                    );
                    pruned.results += 1;
                    pruned.tokens_freed += before.saturating_sub(estimate_text(content));
                }
            }
        }
        newer += size;
    }
    pruned
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Role;

    fn result(id: &str, content: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: content.into(),
                is_error: false,
            }],
        }
    }

    #[test]
    fn old_results_lose_their_bodies_and_keep_their_ids() {
        let big = "x".repeat(4000);
        let mut history = vec![result("old", &big), result("recent", &big)];
        let pruned = prune(&mut history, 1000);
        assert_eq!(pruned.results, 1);
        assert!(pruned.tokens_freed > 900);
        match &history[0].content[0] {
            ContentBlock::ToolResult { tool_use_id, content, .. } => {
                assert_eq!(tool_use_id, "old");
                assert!(content.starts_with(PLACEHOLDER_PREFIX) && content.contains("4000 bytes"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(history[1], result("recent", &big), "within the protected tail");
        assert_eq!(prune(&mut history, 1000), Pruned::default(), "nothing is pruned twice");
    }
}
