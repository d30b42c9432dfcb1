//! The agent's side of memory: `memory_search` (find what compaction took out of the context,
//! or what earlier sessions remembered) and `remember` (keep a fact for the owner's later
//! sessions).
//!
//! Both only know their own session's id; whose memories those are (the session's owner) and
//! where they are kept is decided by the [`Recall`] side (the session service, a layer above),
//! reached through the session's [`SessionLink`]. So no argument a model writes can name
//! another owner.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::link::{SessionLink, hub};
use super::{ToolOutput, TypedTool};
use crate::ids::SessionId;

/// One passage `memory_search` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Recalled {
    pub text: String,
    /// Relevance (BM25): higher is better, comparable within one answer.
    pub score: f32,
    pub session_id: SessionId,
    pub turn: u64,
    pub at: DateTime<Utc>,
    /// `history` (compacted conversation) or `remembered`.
    pub kind: String,
}

/// Where the memory tools look and keep.
pub trait Recall: Send + Sync {
    /// The best matches of `query` in `session`'s memories, or its owner's (`whole_owner`).
    fn recall(
        &self,
        session: SessionId,
        query: String,
        whole_owner: bool,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Recalled>, String>>;

    /// Keeps `text` as a memory of `session`'s owner; its id, or the error the model sees.
    fn remember(&self, session: SessionId, text: String, tags: Vec<String>) -> BoxFuture<'_, Result<u64, String>>;
}

/// `memory_search`.
pub struct MemorySearch {
    session: SessionId,
    link: SessionLink,
}

impl MemorySearch {
    pub const NAME: &'static str = "memory_search";

    pub fn new(session: SessionId, link: SessionLink) -> Self {
        Self { session, link }
    }
}

/// Where `memory_search` looks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallScope {
    /// This session: its earlier, compacted conversation and what it remembered.
    #[default]
    Session,
    /// Every session of your user: their compacted conversations and everything remembered.
    Owner,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchArgs {
    /// Words to look for.
    query: String,
    /// Results, 1-20 (default 5).
    #[schemars(range(min = 1, max = 20))]
    limit: Option<usize>,
    /// `session` (default) or `owner`: all of your user's sessions and memories.
    #[serde(default)]
    scope: RecallScope,
}

impl TypedTool for MemorySearch {
    type Args = MemorySearchArgs;
    const NAME: &'static str = Self::NAME;

    fn description(&self) -> String {
        "Search memory: earlier parts of this conversation that were compacted out of your context, and \
         facts remembered with `remember` (scope `owner`: from every session of your user). Answers the \
         best passages with the session and turn they came from."
            .into()
    }

    async fn run(&self, args: MemorySearchArgs, _cancel: CancellationToken) -> ToolOutput {
        let recall = match hub(&self.link) {
            Ok(recall) => recall,
            Err(message) => return ToolOutput::error(message),
        };
        let limit = args.limit.unwrap_or(5);
        if !(1..=20).contains(&limit) {
            return ToolOutput::error("limit must be 1-20");
        }
        let whole_owner = args.scope == RecallScope::Owner;
        match recall.recall(self.session.clone(), args.query, whole_owner, limit).await {
            Ok(found) => ToolOutput::ok(serde_json::to_string(&found).unwrap_or_default()),
            Err(message) => ToolOutput::error(message),
        }
    }
}

/// `remember`.
pub struct Remember {
    session: SessionId,
    link: SessionLink,
}

impl Remember {
    pub const NAME: &'static str = "remember";

    pub fn new(session: SessionId, link: SessionLink) -> Self {
        Self { session, link }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberArgs {
    /// The fact or note, self-contained (it is read later without this conversation).
    text: String,
    /// Words to find it by.
    #[serde(default)]
    tags: Vec<String>,
}

#[derive(Serialize)]
struct Remembered {
    id: u64,
}

impl TypedTool for Remember {
    type Args = RememberArgs;
    const NAME: &'static str = Self::NAME;

    fn description(&self) -> String {
        "Remember a fact or note for later sessions of your user (memory_search with scope `owner` finds it)."
            .into()
    }

    async fn run(&self, args: RememberArgs, _cancel: CancellationToken) -> ToolOutput {
        let recall = match hub(&self.link) {
            Ok(recall) => recall,
            Err(message) => return ToolOutput::error(message),
        };
        match recall.remember(self.session.clone(), args.text, args.tags).await {
            Ok(id) => ToolOutput::ok(serde_json::to_string(&Remembered { id }).unwrap_or_default()),
            Err(message) => ToolOutput::error(message),
        }
    }
}
