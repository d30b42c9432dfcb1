//! Resolves `provider:model` ids to a provider and the model name it understands.
//!
//! The registry is filled once at start-up (see `config`) and then only read. A provider whose
//! credentials are missing is still registered, as [`ProviderEntry::Unavailable`], so the error
//! a caller gets names the environment variable to set instead of "unknown provider".

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Provider;
use crate::error::{ErrorKind, SessionError};

#[derive(Debug, Clone)]
pub enum ProviderEntry {
    Ready(Arc<dyn Provider>),
    /// Known but unusable; the message says how to fix it.
    Unavailable(String),
}

#[derive(Debug, Clone, Default)]
pub struct ProviderRegistry {
    entries: BTreeMap<String, ProviderEntry>,
}

impl ProviderRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, name: impl Into<String>, provider: Arc<dyn Provider>) {
        self.entries.insert(name.into(), ProviderEntry::Ready(provider));
    }

    pub fn insert_unavailable(&mut self, name: impl Into<String>, why: impl Into<String>) {
        self.entries.insert(name.into(), ProviderEntry::Unavailable(why.into()));
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Splits `provider:model` at the first colon (model names may contain colons, as in
    /// `ollama:llama3.2:3b`) and returns the provider with the model name.
    pub fn resolve(&self, model_id: &str) -> Result<(Arc<dyn Provider>, String), SessionError> {
        let Some((name, model)) =
            model_id.split_once(':').filter(|(name, model)| !name.is_empty() && !model.is_empty())
        else {
            return Err(SessionError::invalid(format!(
                "model {model_id:?} must look like provider:model, e.g. anthropic:claude-sonnet-4-5 or openai:gpt-4o-mini"
            )));
        };
        match self.entries.get(name) {
            Some(ProviderEntry::Ready(provider)) => Ok((provider.clone(), model.to_owned())),
            Some(ProviderEntry::Unavailable(why)) => Err(SessionError::agent(
                None,
                ErrorKind::Credentials,
                format!("provider {name:?} is not usable: {why}"),
            )),
            None => Err(SessionError::invalid(format!(
                "unknown provider {name:?} in model {model_id:?}; configured providers: {}",
                self.names().collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::llm::scripted::ScriptedProvider;

    #[test]
    fn resolves_and_explains_failures() {
        let mut registry = ProviderRegistry::new();
        registry.insert("ollama", ScriptedProvider::new([]));
        registry.insert_unavailable("anthropic", "set ANTHROPIC_API_KEY");

        let (_, model) = registry.resolve("ollama:llama3.2:3b").unwrap();
        assert_eq!(model, "llama3.2:3b");

        let missing_key = registry.resolve("anthropic:claude-sonnet-4-5").unwrap_err();
        assert_eq!(missing_key.code(), ErrorCode::AgentError);
        assert!(missing_key.to_string().contains("ANTHROPIC_API_KEY"));

        assert_eq!(registry.resolve("nope:x").unwrap_err().code(), ErrorCode::InvalidRequest);
        assert_eq!(registry.resolve("no-colon").unwrap_err().code(), ErrorCode::InvalidRequest);
        assert_eq!(registry.resolve("ollama:").unwrap_err().code(), ErrorCode::InvalidRequest);
    }
}
