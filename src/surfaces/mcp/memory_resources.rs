//! The caller's memories as an MCP resource: `deputy://memories` (the newest, as `memory/list`
//! answers) and `deputy://memories?query=WORDS` (the best matches), through the caller's own
//! [`SessionService`], so a client only ever reads its own subject's memories.

use rmcp::ErrorData as McpError;
use rmcp::model::{ReadResourceResult, Resource};

use super::resources::{json_contents, to_mcp};
use crate::session::{MemoryQuery, SessionService};

pub const MEMORIES: &str = "deputy://memories";

/// The memories a URI asks for, or `None` if it is not the memories resource.
pub fn parse(uri: &str) -> Option<MemoryQuery> {
    let rest = uri.strip_prefix(MEMORIES)?;
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let query = match rest.strip_prefix('?') {
        Some(query) => query,
        None if rest.is_empty() => "",
        None => return None,
    };
    let mut asked = MemoryQuery { limit: Some(crate::model::memory::MAX_LIST_PAGE), ..MemoryQuery::default() };
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "query" => asked.query = Some(value.into_owned()),
            "before" => asked.before = value.parse().ok(),
            _ => {}
        }
    }
    Some(asked)
}

/// Its entry in `resources/list`.
pub fn listed() -> Resource {
    Resource::new(MEMORIES, "memories")
        .with_title("Your memories".to_owned())
        .with_description(
            "What your sessions remembered and their compacted history, newest first, as JSON; add \
             `?query=WORDS` to search them.",
        )
        .with_mime_type("application/json")
}

/// `resources/read` of the memories resource.
pub async fn read<S: SessionService>(
    service: &S,
    uri: &str,
    query: MemoryQuery,
) -> Result<ReadResourceResult, McpError> {
    let list = service.memories(query).await.map_err(|error| to_mcp(&error, Some(uri)))?;
    json_contents(uri, &list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_uris_parse() {
        let all = parse("deputy://memories").expect("the list");
        assert_eq!((all.query, all.before), (None, None));
        let searched = parse("deputy://memories?query=vault%20code&before=9").expect("a search");
        assert_eq!((searched.query.as_deref(), searched.before), (Some("vault code"), Some(9)));
        assert!(parse("deputy://memoriesx").is_none());
        assert!(parse("deputy://agents").is_none());
    }
}
