//! The provider registry: the built-in providers ([`BUILT_IN`], configured by their usual
//! environment variables) and the config file's `[providers.NAME]`, each behind the retry gate.

use super::{ConfigFile, Environment};
use crate::llm::catalog::{BUILT_IN, BuiltinProvider, Wire};
use crate::llm::options::WireOptions;
use crate::llm::registry::ProviderRegistry;

/// The names of the environment variables that configure providers: the built-in ones and
/// each `api_key_env` of the config file. A client attaching to a background server hands over
/// these and no others.
pub fn provider_variables(config: &ConfigFile) -> Vec<String> {
    let mut names: Vec<String> = BUILT_IN
        .iter()
        .flat_map(|provider| [provider.key_variable, provider.base_url_variable])
        .map(str::to_owned)
        .collect();
    names.extend(config.providers.values().filter_map(|provider| provider.api_key_env.clone()));
    names.sort();
    names.dedup();
    names
}

/// The built-in providers from the environment, plus the config file's named providers (which
/// may take a built-in name over).
pub fn provider_registry(config: &ConfigFile, env: &Environment) -> ProviderRegistry {
    let mut registry = ProviderRegistry::new();
    for provider in BUILT_IN {
        register_builtin(&mut registry, provider, env);
    }
    for (name, provider) in &config.providers {
        let key = match &provider.api_key_env {
            Some(var) => match env.get(var) {
                Some(key) => Some(key.to_owned()),
                None => {
                    registry.insert_unavailable(name, format!("no API key: set {var}"));
                    continue;
                }
            },
            None => None,
        };
        registry.insert(name, provider.api.connect(provider.base_url.clone(), key, provider.wire_options()));
    }
    registry
}

/// Where provider `name` is and its key, for a call that is not a model call (embeddings):
/// `(base URL, key)`. Only OpenAI-compatible providers have an embeddings API.
pub fn endpoint(config: &ConfigFile, env: &Environment, name: &str) -> Result<(String, Option<String>), String> {
    if let Some(provider) = config.providers.get(name) {
        if provider.api != Wire::Openai {
            return Err(format!("provider {name:?} is not OpenAI-compatible: it has no embeddings API"));
        }
        let key = match &provider.api_key_env {
            Some(var) => {
                Some(env.get(var).ok_or_else(|| format!("provider {name:?}: no API key: set {var}"))?.to_owned())
            }
            None => None,
        };
        return Ok((provider.base_url.clone(), key));
    }
    let builtin = BUILT_IN.iter().find(|provider| provider.name == name).ok_or_else(|| {
        format!("no provider {name:?} (a built-in one, or [providers.{name}] in the config file)")
    })?;
    if builtin.wire != Wire::Openai {
        return Err(format!("provider {name:?} is not OpenAI-compatible: it has no embeddings API"));
    }
    let base_url = env.get(builtin.base_url_variable).unwrap_or(builtin.default_base_url).to_owned();
    Ok((base_url, env.get(builtin.key_variable).map(str::to_owned)))
}

/// One built-in provider: usable with its key, or without one at another base URL where it
/// allows that; otherwise registered as unavailable, with the variable to set.
fn register_builtin(registry: &mut ProviderRegistry, provider: &BuiltinProvider, env: &Environment) {
    let base_url = env.get(provider.base_url_variable).unwrap_or(provider.default_base_url);
    let key = env.get(provider.key_variable).map(str::to_owned);
    let keyless_allowed = provider.keyless_elsewhere && base_url != provider.default_base_url;
    if key.is_none() && !keyless_allowed {
        registry.insert_unavailable(
            provider.name,
            format!("no API key: set {}{}", provider.key_variable, provider.missing_key_hint),
        );
    } else {
        registry.insert(provider.name, provider.wire.connect(base_url.to_owned(), key, WireOptions::default()));
    }
}
