//! What deputy knows of providers and models without being told: the wire formats it speaks,
//! the built-in providers, the context windows of well-known model families and the list prices
//! of well-known models.
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
use super::pricing::Price;
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

/// List prices of current Anthropic and OpenAI models (USD per million tokens), by model name.
/// A row names a model, and also covers its dated snapshots (`claude-sonnet-4-5-20250929`,
/// `gpt-4o-2024-08-06`) and `-latest` alias, but no other model that merely starts with it:
/// `gpt-4o` does not price `gpt-4o-audio-preview`, nor `claude-opus-4` a later `claude-opus-4-7`,
/// whose prices differ or are not known here. An unknown model has no price (`cost_usd: null`)
/// until the config file gives it one.
const MODEL_PRICES: &[(&str, Price)] = &[
    // Embeddings (input only): what `[embeddings]` spends.
    ("text-embedding-3-small", Price::openai(20, 20, 0)),
    ("text-embedding-3-large", Price::openai(130, 130, 0)),
    ("claude-opus-4-6", Price::anthropic(5_000, 25_000)),
    ("claude-opus-4-5", Price::anthropic(5_000, 25_000)),
    ("claude-opus-4-1", Price::anthropic(15_000, 75_000)),
    ("claude-opus-4", Price::anthropic(15_000, 75_000)),
    ("claude-opus-4-0", Price::anthropic(15_000, 75_000)),
    ("claude-sonnet-4-6", Price::anthropic(3_000, 15_000)),
    ("claude-sonnet-4-5", Price::anthropic(3_000, 15_000)),
    ("claude-sonnet-4", Price::anthropic(3_000, 15_000)),
    ("claude-sonnet-4-0", Price::anthropic(3_000, 15_000)),
    ("claude-3-7-sonnet", Price::anthropic(3_000, 15_000)),
    ("claude-haiku-4-5", Price::anthropic(1_000, 5_000)),
    ("claude-3-5-haiku", Price::anthropic(800, 4_000)),
    ("gpt-5", Price::openai(1_250, 125, 10_000)),
    ("gpt-5-mini", Price::openai(250, 25, 2_000)),
    ("gpt-5-nano", Price::openai(50, 5, 400)),
    ("gpt-4.1", Price::openai(2_000, 500, 8_000)),
    ("gpt-4.1-mini", Price::openai(400, 100, 1_600)),
    ("gpt-4o", Price::openai(2_500, 1_250, 10_000)),
    ("gpt-4o-mini", Price::openai(150, 75, 600)),
    ("o3", Price::openai(2_000, 500, 8_000)),
    ("o4-mini", Price::openai(1_100, 275, 4_400)),
];

/// The list price of a well-known model (`provider:model` or the bare model name), whichever
/// provider serves it: a gateway serving `claude-sonnet-4-5` bills the same tokens. The
/// config file can say otherwise.
pub fn known_price(model: &str) -> Option<Price> {
    let name = model.rsplit(':').next().unwrap_or(model).to_ascii_lowercase();
    MODEL_PRICES.iter().find(|(row, _)| names_snapshot_of(&name, row)).map(|(_, price)| *price)
}

/// Whether `name` is the model `row`, one of its dated snapshots (`-20250929`, `-2024-08-06`)
/// or its `-latest` alias.
fn names_snapshot_of(name: &str, row: &str) -> bool {
    let Some(rest) = name.strip_prefix(row) else { return false };
    let Some(suffix) = rest.strip_prefix('-') else { return rest.is_empty() };
    let digits = suffix.chars().filter(char::is_ascii_digit).count();
    suffix == "latest" || (digits >= 8 && suffix.chars().all(|c| c.is_ascii_digit() || c == '-'))
}

#[cfg(test)]
mod price_tests {
    use super::*;

    #[test]
    fn a_model_its_snapshots_and_its_alias_have_its_price_and_nothing_else_does() {
        let sonnet = Price::anthropic(3_000, 15_000);
        assert_eq!(known_price("anthropic:claude-sonnet-4-5"), Some(sonnet));
        assert_eq!(known_price("claude-sonnet-4-5-20250929"), Some(sonnet));
        assert_eq!(known_price("claude-opus-4-1-20250805"), Some(Price::anthropic(15_000, 75_000)));
        assert_eq!(known_price("claude-opus-4-5"), Some(Price::anthropic(5_000, 25_000)));
        assert_eq!(known_price("claude-3-5-haiku-latest"), Some(Price::anthropic(800, 4_000)));
        assert_eq!(known_price("openai:gpt-4o-2024-08-06"), Some(Price::openai(2_500, 1_250, 10_000)));
        assert_eq!(known_price("openai:gpt-4o-mini"), Some(Price::openai(150, 75, 600)));
        assert_eq!(known_price("gpt-5-mini-2025-08-07"), Some(Price::openai(250, 25, 2_000)));
        assert_eq!(known_price("o4-mini"), Some(Price::openai(1_100, 275, 4_400)));
        // Not a snapshot of a row: an unknown model, whatever it starts with.
        for unknown in
            ["claude-opus-4-7", "gpt-4o-audio-preview", "gpt-5.1", "o3-pro", "ollama:llama3.2", "gpt-5-1"]
        {
            assert_eq!(known_price(unknown), None, "{unknown}");
        }
    }
}
