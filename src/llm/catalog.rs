//! What deputy knows of providers and models without being told: the wire formats it speaks,
//! the built-in providers, and the context windows of well-known model families.
//!
//! Extension points are data here. An OpenAI- or Anthropic-compatible provider is one row of
//! [`BUILT_IN`] (or one `[providers.NAME]` section of the config file); a new wire format is one
//! adapter module beside `anthropic` and `openai`, one [`Wire`] variant and its arm in
//! [`Wire::connect`], then rows that use it.

use std::sync::Arc;

use serde::Deserialize;

use super::HttpTimeouts;
use super::Provider;
use super::anthropic::{AnthropicConfig, AnthropicProvider};
use super::openai::{OpenAiConfig, OpenAiProvider};
use super::options::WireOptions;
use super::retry::{RetryPolicy, RetryingProvider};

/// A wire format deputy speaks (`api` in a `[providers.NAME]` section).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    /// OpenAI Chat Completions, and the servers compatible with it (Ollama, vLLM, llama.cpp).
    Openai,
    /// Anthropic Messages, and gateways that speak it.
    Anthropic,
}

impl Wire {
    /// A provider speaking this wire at `base_url`, behind the retry gate. Anthropic's wire
    /// always sends a key header (empty where none is configured, for keyless gateways).
    pub fn connect(self, base_url: String, api_key: Option<String>, options: WireOptions) -> Arc<dyn Provider> {
        let timeouts = HttpTimeouts::default();
        let inner: Arc<dyn Provider> = match self {
            Wire::Openai => Arc::new(OpenAiProvider::new(OpenAiConfig { base_url, api_key, timeouts, options })),
            Wire::Anthropic => Arc::new(AnthropicProvider::new(AnthropicConfig {
                base_url,
                api_key: api_key.unwrap_or_default(),
                timeouts,
                options,
            })),
        };
        Arc::new(RetryingProvider::new(inner, RetryPolicy::default()))
    }
}

/// A provider every deputy knows, configured by its usual environment variables.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinProvider {
    /// The `provider` of `provider:model`.
    pub name: &'static str,
    pub wire: Wire,
    /// The variable holding the API key.
    pub key_variable: &'static str,
    /// The variable that points the provider elsewhere (a proxy, a gateway, a local server).
    pub base_url_variable: &'static str,
    pub default_base_url: &'static str,
    /// Whether a server at another base URL may go without a key: compatible local servers
    /// (Ollama, vLLM, llama.cpp) usually need none, the provider itself always does.
    pub keyless_elsewhere: bool,
    /// What the "no API key" message adds after naming `key_variable`.
    pub missing_key_hint: &'static str,
}

/// The built-in providers, one row each.
pub const BUILT_IN: &[BuiltinProvider] = &[
    BuiltinProvider {
        name: "anthropic",
        wire: Wire::Anthropic,
        key_variable: "ANTHROPIC_API_KEY",
        base_url_variable: "ANTHROPIC_BASE_URL",
        default_base_url: "https://api.anthropic.com",
        keyless_elsewhere: false,
        missing_key_hint: " (and ANTHROPIC_BASE_URL to use a proxy or gateway)",
    },
    BuiltinProvider {
        name: "openai",
        wire: Wire::Openai,
        key_variable: "OPENAI_API_KEY",
        base_url_variable: "OPENAI_BASE_URL",
        default_base_url: "https://api.openai.com/v1",
        keyless_elsewhere: true,
        missing_key_hint: ", or OPENAI_BASE_URL to use a compatible server such as Ollama",
    },
];

/// Context windows of well-known model families, by prefix of the model name (first match
/// wins, so a longer prefix goes before a shorter one it starts with).
const MODEL_WINDOWS: &[(&str, u64)] = &[
    ("claude", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
];

/// The context window of a well-known model (`provider:model` or the bare model name); the
/// config file or the caller can say otherwise.
pub fn known_context_window(model: &str) -> Option<u64> {
    let name = model.rsplit(':').next().unwrap_or(model).to_ascii_lowercase();
    MODEL_WINDOWS.iter().find(|(prefix, _)| name.starts_with(prefix)).map(|(_, window)| *window)
}
