//! What the service's unit tests share: a service over the scripted provider, and the smallest
//! requests. One copy, so a change to how services are built is made once.

use std::sync::Arc;

use super::{CreateSessionRequest, LiveSessionService, TurnRequest};
use crate::agent::AgentFactory;
use crate::llm::registry::ProviderRegistry;
use crate::llm::scripted::ScriptedProvider;
#[cfg(feature = "session-store")]
use crate::store::RedbStore;
use crate::store::SharedStore;
use crate::tools::Workspace;

/// A service whose only provider, `test`, is `provider`, with `test:model` as the default model.
pub(crate) fn scripted_service(
    provider: Arc<ScriptedProvider>,
    workspace: Option<Workspace>,
    store: SharedStore,
) -> LiveSessionService {
    let mut registry = ProviderRegistry::new();
    registry.insert("test", provider);
    LiveSessionService::new(AgentFactory::new(Arc::new(registry), Some("test:model".into()), workspace), store)
}

/// A store in `dir` (a test's temporary directory), the one file every test opens.
#[cfg(feature = "session-store")]
pub(crate) fn temp_store(dir: &std::path::Path) -> Arc<RedbStore> {
    Arc::new(RedbStore::open(dir.join("s.redb")).unwrap())
}

pub(crate) fn create(prompt: &str) -> CreateSessionRequest {
    CreateSessionRequest { prompt: prompt.into(), ..CreateSessionRequest::default() }
}

pub(crate) fn turn(prompt: &str) -> TurnRequest {
    TurnRequest { prompt: prompt.into(), ..TurnRequest::default() }
}

/// The blocks of the run of user messages that ends a request: what its wire sends as one
/// last user message (a prompt is a message of its own after tool results; the wire merges
/// them, see `crate::llm::conform`).
pub fn last_user_blocks(messages: &[crate::llm::Message]) -> Vec<&crate::llm::ContentBlock> {
    let run = messages.iter().rev().take_while(|message| message.role == crate::llm::Role::User).count();
    assert!(run > 0, "the request ends with a user message");
    messages[messages.len() - run..].iter().flat_map(|message| &message.content).collect()
}

/// The tool results the `index`th model request carried: its last (wire) user message's
/// `(tool_use_id, content, is_error)`.
pub fn results_sent(provider: &ScriptedProvider, index: usize) -> Vec<(String, String, bool)> {
    let request = &provider.requests()[index];
    last_user_blocks(&request.messages)
        .into_iter()
        .filter_map(|block| match block {
            crate::llm::ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                Some((tool_use_id.clone(), content.clone(), *is_error))
            }
            _ => None,
        })
        .collect()
}
