//! The one place agents are built. Every surface hands a full [`AgentBuildConfig`] to
//! [`AgentFactory::build_agent`] (through `SessionService::create_session`); there are no side
//! channels for configuration.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Agent, Budget, Consumption};
use crate::error::SessionError;
use crate::llm::registry::ProviderRegistry;
use crate::llm::{Message, Usage};
use crate::tools::{ToolScope, Workspace, builtin};

/// Everything that decides how a session's agent behaves. Unset fields take the server's
/// defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentBuildConfig {
    /// `provider:model`, e.g. `anthropic:claude-sonnet-4-5`.
    pub model: Option<String>,
    pub system_prompt: Option<String>,
    /// Upper bound on the tokens of each model response.
    pub max_tokens: Option<u32>,
    pub budget: Budget,
}

/// How an agent was built, with every default resolved: what a store keeps, so a session
/// resumed after a restart behaves as it did even if the server's defaults changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSpec {
    /// `provider:model`.
    pub model: String,
    pub system_prompt: Option<String>,
    pub max_tokens: u32,
    pub budget: Budget,
}

impl From<AgentSpec> for AgentBuildConfig {
    fn from(spec: AgentSpec) -> Self {
        AgentBuildConfig {
            model: Some(spec.model),
            system_prompt: spec.system_prompt,
            max_tokens: Some(spec.max_tokens),
            budget: spec.budget,
        }
    }
}

/// Builds agents from the frozen, process-wide configuration.
#[derive(Debug, Clone)]
pub struct AgentFactory {
    providers: Arc<ProviderRegistry>,
    default_model: Option<String>,
    default_max_tokens: u32,
    /// Root of the builtin file tools; `None` gives agents no tools.
    workspace: Option<Workspace>,
}

/// Used when neither the request nor the configuration sets `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

impl AgentFactory {
    pub fn new(
        providers: Arc<ProviderRegistry>,
        default_model: Option<String>,
        workspace: Option<Workspace>,
    ) -> Self {
        Self { providers, default_model, default_max_tokens: DEFAULT_MAX_TOKENS, workspace }
    }

    pub fn with_default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
    }

    /// Resolves the model and tools. Fails with `INVALID_REQUEST` for a malformed request and
    /// `AGENT_ERROR` when the provider cannot be used (e.g. missing credentials).
    pub fn build_agent(&self, config: AgentBuildConfig) -> Result<Agent, SessionError> {
        let model_id = config.model.or_else(|| self.default_model.clone()).ok_or_else(|| {
            SessionError::invalid(
                "no model given: pass `model` (e.g. \"anthropic:claude-sonnet-4-5\") or start deputy with \
                 --model / DEPUTY_MODEL",
            )
        })?;
        let max_tokens = config.max_tokens.unwrap_or(self.default_max_tokens);
        if max_tokens == 0 {
            return Err(SessionError::invalid("max_tokens must be at least 1"));
        }
        let (provider, model) = self.providers.resolve(&model_id)?;
        let tools = match &self.workspace {
            Some(workspace) => ToolScope::new(builtin::read_only(workspace)),
            None => ToolScope::default(),
        };
        Ok(Agent {
            provider,
            model_id,
            model,
            system_prompt: config.system_prompt.filter(|prompt| !prompt.is_empty()),
            max_tokens,
            tools,
            budget: config.budget,
            history: Vec::new(),
            usage: Usage::default(),
            used: Consumption::default(),
            turns: 0,
            unsaved_from: 0,
        })
    }

    /// Rebuilds the agent of a stored session: same spec, with its history and counters.
    pub fn restore_agent(
        &self,
        spec: AgentSpec,
        history: Vec<Message>,
        usage: Usage,
        used: Consumption,
        turns: u64,
    ) -> Result<Agent, SessionError> {
        let mut agent = self.build_agent(spec.into())?;
        agent.restore(history, usage, used, turns);
        Ok(agent)
    }
}
