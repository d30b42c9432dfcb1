//! What the service's unit tests share: a service over the scripted provider, and the smallest
//! requests. One copy, so a change to how services are built is made once.

use std::sync::Arc;

use super::{CreateSessionRequest, LiveSessionService, TurnRequest};
use crate::agent::AgentFactory;
use crate::llm::registry::ProviderRegistry;
use crate::llm::scripted::ScriptedProvider;
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

pub(crate) fn create(prompt: &str) -> CreateSessionRequest {
    CreateSessionRequest { prompt: prompt.into(), ..CreateSessionRequest::default() }
}

pub(crate) fn turn(prompt: &str) -> TurnRequest {
    TurnRequest { prompt: prompt.into(), ..TurnRequest::default() }
}
