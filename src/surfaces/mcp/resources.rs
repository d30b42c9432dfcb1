//! deputy's sessions as MCP resources: the URIs, the templates, and what `resources/list` and
//! `resources/read` answer, each through one caller's [`SessionService`] so another tenant's
//! session is not found here either.
//!
//! - `deputy://sessions/{id}`: the session as `session_read` shows it (JSON);
//! - `deputy://sessions/{id}/transcript`: its conversation as Markdown ([`transcript`]);
//! - `deputy://sessions/{id}/export`: the session as `session/export`'s JSONL document;
//! - `deputy://sessions/{id}/tool-outputs/{tool_use_id}`: the whole output of one tool result
//!   (the capped original when the history holds it shortened).
//!
//! `resources/list` pages the caller's sessions exactly as `session_list` does (newest update
//! first), two resources per session (state and transcript); its cursor *is* the
//! `session_list` cursor. Tool outputs are reached through the template only.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::sync::{Arc, PoisonError};

use rmcp::model::{
    ListResourcesResult, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ResourceUpdatedNotificationParam,
};
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::McpServer;

use crate::error::SessionError;
use crate::ids::SessionId;
use crate::llm::{ContentBlock, Message, Role};
use crate::model::{ListPosition, SessionView};
use crate::session::{CallerServices, ListQuery, SessionService};

/// Every resource URI of deputy starts so.
pub const PREFIX: &str = "deputy://sessions/";
const TRANSCRIPT: &str = "/transcript";
const EXPORT: &str = "/export";
/// How an exported session is served.
pub const JSONL: &str = "application/jsonl";
const TOOL_OUTPUTS: &str = "/tool-outputs/";
/// Characters of a tool result the transcript shows before pointing at its own resource.
const TRANSCRIPT_TOOL_RESULT_CHARS: usize = 2000;

/// One of deputy's resources, by URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionResource {
    State(SessionId),
    Transcript(SessionId),
    Export(SessionId),
    ToolOutput(SessionId, String),
}

impl SessionResource {
    /// The resource a URI names, or `None` if it is not one of deputy's.
    pub fn parse(uri: &str) -> Option<Self> {
        let rest = uri.strip_prefix(PREFIX)?;
        let (id, tail) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if id.is_empty() {
            return None;
        }
        let id = SessionId::from_string(id);
        match tail {
            "" => Some(Self::State(id)),
            TRANSCRIPT => Some(Self::Transcript(id)),
            EXPORT => Some(Self::Export(id)),
            _ => {
                let tool_use_id = tail.strip_prefix(TOOL_OUTPUTS)?;
                (!tool_use_id.is_empty() && !tool_use_id.contains('/'))
                    .then(|| Self::ToolOutput(id, tool_use_id.to_owned()))
            }
        }
    }

    pub fn uri(&self) -> String {
        match self {
            Self::State(id) => format!("{PREFIX}{id}"),
            Self::Transcript(id) => format!("{PREFIX}{id}{TRANSCRIPT}"),
            Self::Export(id) => format!("{PREFIX}{id}{EXPORT}"),
            Self::ToolOutput(id, tool_use_id) => format!("{PREFIX}{id}{TOOL_OUTPUTS}{tool_use_id}"),
        }
    }

    pub fn session_id(&self) -> &SessionId {
        match self {
            Self::State(id) | Self::Transcript(id) | Self::Export(id) | Self::ToolOutput(id, _) => id,
        }
    }
}

/// `resources/templates/list`.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{PREFIX}{{session_id}}"), "session")
            .with_description("A deputy session as session_read shows it: state and billing.")
            .with_mime_type("application/json"),
        ResourceTemplate::new(format!("{PREFIX}{{session_id}}{TRANSCRIPT}"), "session-transcript")
            .with_description("A deputy session's conversation as Markdown.")
            .with_mime_type("text/markdown"),
        ResourceTemplate::new(format!("{PREFIX}{{session_id}}{EXPORT}"), "session-export")
            .with_description("A deputy session as one JSONL document (record, messages, journal), for import.")
            .with_mime_type(JSONL),
        ResourceTemplate::new(format!("{PREFIX}{{session_id}}{TOOL_OUTPUTS}{{tool_use_id}}"), "tool-output")
            .with_description("The whole output of one tool result of a session.")
            .with_mime_type("text/plain"),
    ]
}

/// One page of `resources/list`: the caller's sessions after `cursor` (a `session_list`
/// cursor), newest update first.
pub async fn list<S: SessionService>(service: &S, cursor: Option<String>) -> Result<ListResourcesResult, McpError> {
    let after =
        match cursor {
            Some(cursor) => Some(ListPosition::from_cursor(&cursor).ok_or_else(|| {
                McpError::invalid_params(format!("cursor {cursor:?} is not one of deputy's"), None)
            })?),
            None => None,
        };
    let page =
        service.list(ListQuery { after, ..ListQuery::default() }).await.map_err(|error| to_mcp(&error, None))?;
    let mut resources = Vec::with_capacity(page.sessions.len() * 2);
    for session in &page.sessions {
        let title = if session.title.is_empty() { session.session_id.to_string() } else { session.title.clone() };
        resources.push(
            Resource::new(
                SessionResource::State(session.session_id.clone()).uri(),
                format!("session {}", session.session_id),
            )
            .with_title(title.clone())
            .with_description(format!("{} turns, {}", session.turns, session.model))
            .with_mime_type("application/json"),
        );
        resources.push(
            Resource::new(
                SessionResource::Transcript(session.session_id.clone()).uri(),
                format!("transcript {}", session.session_id),
            )
            .with_title(format!("Transcript: {title}"))
            .with_mime_type("text/markdown"),
        );
    }
    let mut result = ListResourcesResult::with_all_items(resources);
    result.next_cursor = page.next_cursor;
    Ok(result)
}

/// `resources/read` of one of deputy's resources.
pub async fn read<S: SessionService>(
    service: &S,
    resource: &SessionResource,
) -> Result<ReadResourceResult, McpError> {
    let uri = resource.uri();
    let fail = |error: SessionError| to_mcp(&error, Some(&uri));
    let contents = match resource {
        SessionResource::State(id) => {
            let view = service.read(id, None).await.map_err(fail)?;
            let text = serde_json::to_string_pretty(&view).map_err(|error| {
                McpError::internal_error(format!("could not encode the session: {error}"), None)
            })?;
            ResourceContents::text(text, uri.clone()).with_mime_type("application/json")
        }
        SessionResource::Transcript(id) => {
            let view = service.read(id, None).await.map_err(fail)?;
            let history = service.history(id).await.map_err(fail)?;
            ResourceContents::text(transcript(&view, &history.messages), uri.clone())
                .with_mime_type("text/markdown")
        }
        SessionResource::Export(id) => {
            let export = service.export(id).await.map_err(fail)?;
            ResourceContents::text(export.document, uri.clone()).with_mime_type(JSONL)
        }
        SessionResource::ToolOutput(id, tool_use_id) => {
            let text = match service.tool_output(id, tool_use_id).await {
                Ok(output) => output.content,
                // Not capped: the history holds it whole.
                Err(SessionError::InvalidRequest(_)) => {
                    let history = service.history(id).await.map_err(fail)?;
                    find_tool_result(&history.messages, tool_use_id).ok_or_else(|| {
                        McpError::resource_not_found(
                            format!("session {id} has no tool result {tool_use_id}"),
                            Some(serde_json::json!({ "uri": uri })),
                        )
                    })?
                }
                Err(error) => return Err(fail(error)),
            };
            ResourceContents::text(text, uri.clone()).with_mime_type("text/plain")
        }
    };
    Ok(ReadResourceResult::new(vec![contents]))
}

fn find_tool_result(messages: &[Message], tool_use_id: &str) -> Option<String> {
    messages.iter().flat_map(|message| &message.content).find_map(|block| match block {
        ContentBlock::ToolResult { tool_use_id: id, content, .. } if id == tool_use_id => Some(content.clone()),
        _ => None,
    })
}

/// A session error as the resource methods answer it: an unknown (or foreign) session is
/// `resource_not_found` (rmcp sends -32002, or -32602 to 2026-07-28 peers), a bad request
/// `invalid_params`, the rest an internal error carrying deputy's code.
/// `value` as a resource's JSON contents.
pub fn json_contents(uri: &str, value: &impl serde::Serialize) -> Result<ReadResourceResult, McpError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|error| to_mcp(&SessionError::invalid(error.to_string()), Some(uri)))?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri.to_owned()).with_mime_type("application/json"),
    ]))
}

pub fn to_mcp(error: &SessionError, uri: Option<&str>) -> McpError {
    let data = serde_json::json!({ "uri": uri, "code": error.code().as_str() });
    match error {
        SessionError::NotFound { .. } => McpError::resource_not_found(error.to_string(), Some(data)),
        SessionError::InvalidRequest(_) => McpError::invalid_params(error.to_string(), Some(data)),
        _ => McpError::internal_error(error.to_string(), Some(data)),
    }
}

/// The transcript resource: a header, then one `##` section per message. Text is verbatim;
/// a tool call is its name, id and input as a JSON block; a tool result is fenced and cut
/// after [`TRANSCRIPT_TOOL_RESULT_CHARS`] characters with the URI of its whole output.
pub fn transcript(view: &SessionView, messages: &[Message]) -> String {
    let state = &view.state;
    let mut out = String::new();
    let _ = writeln!(out, "# Session {}\n", view.session_id);
    let _ = writeln!(out, "- model: {}", state.model);
    let _ = writeln!(out, "- turns: {}", state.turns);
    let _ = writeln!(out, "- updated: {}", state.updated_at.to_rfc3339());
    for message in messages {
        let who = match message.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        let _ = writeln!(out, "\n## {who}\n");
        for block in &message.content {
            match block {
                ContentBlock::Text { text } => {
                    let _ = writeln!(out, "{text}\n");
                }
                ContentBlock::Thinking { thinking: text, .. } | ContentBlock::Reasoning { text } => {
                    let _ = writeln!(out, "*Reasoning*\n\n> {}\n", text.replace('\n', "\n> "));
                }
                ContentBlock::RedactedThinking { .. } => {
                    let _ = writeln!(out, "*Reasoning (redacted)*\n");
                }
                ContentBlock::ToolUse { id, name, input } => {
                    let input = serde_json::to_string_pretty(input).unwrap_or_else(|_| input.to_string());
                    let _ = writeln!(out, "**Tool call** `{name}` (`{id}`)\n\n```json\n{input}\n```\n");
                }
                ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                    let label = if *is_error { "Tool error" } else { "Tool result" };
                    let mut shown: String = content.chars().take(TRANSCRIPT_TOOL_RESULT_CHARS).collect();
                    let cut = content.chars().nth(TRANSCRIPT_TOOL_RESULT_CHARS).is_some();
                    let fence = if content.contains("```") { "````" } else { "```" };
                    if cut {
                        shown.push_str("\n…");
                    }
                    let _ = writeln!(out, "**{label}** (`{tool_use_id}`)\n\n{fence}\n{shown}\n{fence}\n");
                    if cut {
                        let whole = SessionResource::ToolOutput(view.session_id.clone(), tool_use_id.clone()).uri();
                        let _ = writeln!(out, "The whole output: <{whole}>\n");
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_and_foreign_ones_are_refused() {
        let id = SessionId::from_string("s_1");
        for resource in [
            SessionResource::State(id.clone()),
            SessionResource::Transcript(id.clone()),
            SessionResource::ToolOutput(id.clone(), "toolu_9".into()),
        ] {
            assert_eq!(SessionResource::parse(&resource.uri()), Some(resource.clone()));
        }
        assert_eq!(SessionResource::State(id).uri(), "deputy://sessions/s_1");
        for foreign in [
            "deputy://sessions/",
            "deputy://sessions/s_1/other",
            "deputy://sessions/s_1/tool-outputs/",
            "deputy://sessions/s_1/tool-outputs/a/b",
            "file:///etc/passwd",
        ] {
            assert_eq!(SessionResource::parse(foreign), None, "{foreign}");
        }
    }
}

#[derive(Default)]
pub(super) struct Subscriptions {
    pub(super) uris: BTreeSet<String>,
    pub(super) watcher: Option<DropGuard>,
}

/// One of deputy's resources, or `resource_not_found` for any other URI.
pub(super) fn parse_resource(uri: &str) -> Result<SessionResource, McpError> {
    SessionResource::parse(uri).ok_or_else(|| {
        McpError::resource_not_found(
            format!("{uri} is not a deputy resource (deputy://sessions/...)"),
            Some(serde_json::json!({ "uri": uri })),
        )
    })
}

impl<P: CallerServices> McpServer<P> {
    /// Starts telling this connection about changes to its subscribed resources, once.
    pub(super) fn watch_subscriptions(&self, peer: Peer<RoleServer>, service: <P as CallerServices>::Service) {
        let mut subscriptions = self.subscriptions.lock().unwrap_or_else(PoisonError::into_inner);
        if subscriptions.watcher.is_some() {
            return;
        }
        let stop = CancellationToken::new();
        subscriptions.watcher = Some(stop.clone().drop_guard());
        let watched = Arc::downgrade(&self.subscriptions);
        let mut changes = service.changes();
        tokio::spawn(async move {
            loop {
                let changed = tokio::select! {
                    changed = changes.recv() => changed,
                    () = stop.cancelled() => return,
                };
                let id = match changed {
                    Ok(id) => id,
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                let Some(watched) = watched.upgrade() else { return };
                let uris: Vec<String> = {
                    let subscriptions = watched.lock().unwrap_or_else(PoisonError::into_inner);
                    subscriptions
                        .uris
                        .iter()
                        .filter(|uri| {
                            SessionResource::parse(uri).is_some_and(|resource| *resource.session_id() == id)
                        })
                        .cloned()
                        .collect()
                };
                for uri in uris {
                    if peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await.is_err() {
                        return; // the client went away
                    }
                }
            }
        });
    }
}
