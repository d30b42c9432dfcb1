//! deputy's errors as MCP tool results.

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};

use crate::surfaces::wire::{ERROR_META_KEY, ErrorBody};

/// An error as a tool result: `isError`, the text `CODE: message` for an LLM, and the whole
/// [`ErrorBody`] (whatever fields it has) in `_meta["deputy/error"]` for programs.
pub(crate) fn render_error(body: &ErrorBody) -> CallToolResult {
    let text = format!("{}: {}", body.code, body.message);
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    // `ErrorBody` is plain strings, so encoding cannot fail; if it ever did, the text still
    // carries the code.
    if let Ok(value) = serde_json::to_value(body) {
        let mut meta = MetaObject::new();
        meta.insert(ERROR_META_KEY.to_owned(), value);
        result.meta = Some(meta);
    }
    result
}
