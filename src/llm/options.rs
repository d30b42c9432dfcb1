//! What a provider's section of the config file may change about how deputy talks to it:
//! prompt caching, the name of the token limit, usage in the stream, default reasoning.
//!
//! Defaults suit the providers themselves; the switches exist for the compatible servers and
//! gateways that differ (a Mistral endpoint that rejects `stream_options`, an Azure deployment
//! of a reasoning model, a gateway without caching).

use serde::Deserialize;

use super::Reasoning;

/// How one provider is spoken to, beyond its URL and key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireOptions {
    pub prompt_cache: PromptCache,
    pub prompt_cache_ttl: CacheTtl,
    /// `None`: chosen by host and model (see the OpenAI adapter).
    pub token_limit_field: Option<TokenLimitField>,
    /// Ask an OpenAI-compatible server for usage in the stream (`stream_options`).
    pub stream_usage: StreamUsage,
    /// Reasoning for the requests that do not say.
    pub reasoning: Option<Reasoning>,
}

/// `prompt_cache = "auto" | "off"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptCache {
    /// Anthropic: cache breakpoints on the tools, the system prompt and the last message.
    /// OpenAI: a `prompt_cache_key` per session (its prefix caching is automatic).
    #[default]
    Auto,
    Off,
}

/// `prompt_cache_ttl = "5m" | "1h"`: how long Anthropic keeps a cached prefix. An hour costs
/// twice the input price to write (5 minutes, 1.25×) and outlives slow callers' pauses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum CacheTtl {
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    OneHour,
}

/// `token_limit_field`: which name an OpenAI-compatible server takes the token limit under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenLimitField {
    MaxTokens,
    MaxCompletionTokens,
}

impl TokenLimitField {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// `stream_usage = true | false`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "bool")]
pub enum StreamUsage {
    #[default]
    Requested,
    /// The server rejects `stream_options`; usage comes only if it sends it unasked.
    Omitted,
}

impl From<bool> for StreamUsage {
    fn from(requested: bool) -> Self {
        if requested { Self::Requested } else { Self::Omitted }
    }
}
