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

/// The tool results the `index`th model request carried: its last message, a user message of
/// `(tool_use_id, content, is_error)`.
pub fn results_sent(provider: &ScriptedProvider, index: usize) -> Vec<(String, String, bool)> {
    let request = &provider.requests()[index];
    let last = request.messages.last().unwrap();
    assert_eq!(last.role, crate::llm::Role::User);
    last.content
        .iter()
        .filter_map(|block| match block {
            crate::llm::ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                Some((tool_use_id.clone(), content.clone(), *is_error))
            }
            _ => None,
        })
        .collect()
}
