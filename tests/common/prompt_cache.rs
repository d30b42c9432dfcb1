//! Prompt-cache emulation: how much of a request each provider would have served from its
//! cache, so tests can measure whether deputy's requests are cacheable at all (review finding
//! 9: without `cache_control` Anthropic caches nothing; finding 10: OpenAI's automatic cache
//! needs a byte-stable prefix).
//!
//! Tokens are estimated as bytes / 4 of a canonical JSON of each block, with `cache_control`
//! removed first, since a marker does not change what is cached. The two providers differ:
//!
//! - Anthropic caches only up to explicit breakpoints (`cache_control` on a block, or the
//!   top-level `cache_control`, which marks the last block). A breakpoint reads the longest
//!   earlier-cached prefix ending within 20 blocks before it, and writes from there to the last
//!   breakpoint.
//! - OpenAI caches automatically: the longest common prefix with an earlier request of the same
//!   `prompt_cache_key`, in 128-token steps, from 1,024 tokens.
//!
//! Entries never expire here: the tests run well inside the five-minute TTL.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value, json};

use super::provider_rules::Wire;

/// The documented cache parameters, adjustable so tests can use small prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSettings {
    /// Anthropic's minimum cacheable prefix (1,024 tokens for Sonnet/Opus; more for Haiku).
    pub min_cacheable_tokens: u64,
    /// How many block boundaries a breakpoint looks back for an earlier entry (itself included).
    pub lookback_blocks: usize,
    /// OpenAI's minimum prompt length for caching.
    pub openai_min_tokens: u64,
    /// OpenAI's cache granularity.
    pub openai_step_tokens: u64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self { min_cacheable_tokens: 1024, lookback_blocks: 20, openai_min_tokens: 1024, openai_step_tokens: 128 }
    }
}

/// One request's prompt tokens, split the way the provider bills them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheFigures {
    /// Billed at the full input price (Anthropic `input_tokens`).
    pub uncached: u64,
    /// Written to the cache (Anthropic `cache_creation_input_tokens`; always 0 on OpenAI).
    pub written: u64,
    /// Read from the cache (Anthropic `cache_read_input_tokens`, OpenAI `cached_tokens`).
    pub read: u64,
}

impl CacheFigures {
    /// Every prompt token (OpenAI's `prompt_tokens`).
    pub fn total(&self) -> u64 {
        self.uncached + self.written + self.read
    }
}

/// The emulated caches of one mock server: everything earlier requests left behind.
#[derive(Debug, Default)]
pub struct PromptCache {
    settings: CacheSettings,
    /// Anthropic entries: the hash of each cached prefix (tools → system → messages up to a
    /// breakpoint).
    anthropic: HashSet<u64>,
    /// OpenAI prompts seen so far, by `prompt_cache_key` (`None`: sent without one).
    openai: HashMap<Option<String>, Vec<Vec<u8>>>,
}

impl PromptCache {
    pub fn new(settings: CacheSettings) -> Self {
        Self { settings, ..Self::default() }
    }

    /// Serves a request of `wire` from the cache and caches what it would: its figures.
    pub fn observe(&mut self, wire: Wire, body: &Value) -> CacheFigures {
        match wire {
            Wire::Anthropic => self.anthropic(body),
            Wire::OpenAi => self.openai(body),
        }
    }

    pub fn anthropic(&mut self, body: &Value) -> CacheFigures {
        let blocks = anthropic_blocks(body);
        let mut prefix_hashes = Vec::with_capacity(blocks.len());
        let mut cumulative = Vec::with_capacity(blocks.len());
        let (mut hash, mut tokens) = (0u64, 0u64);
        for block in &blocks {
            hash = chain(hash, &block.key);
            tokens += block.tokens;
            prefix_hashes.push(hash);
            cumulative.push(tokens);
        }
        let total = tokens;
        let mut breakpoints: Vec<usize> = (0..blocks.len()).filter(|&at| blocks[at].breakpoint).collect();
        if !body["cache_control"].is_null() && !blocks.is_empty() {
            breakpoints.push(blocks.len() - 1);
        }
        breakpoints.sort_unstable();
        breakpoints.dedup();
        let Some(&last) = breakpoints.last() else {
            return CacheFigures { uncached: total, written: 0, read: 0 };
        };
        let lookback = self.settings.lookback_blocks.max(1);
        let read_at = breakpoints
            .iter()
            .filter_map(|&at| {
                (at.saturating_sub(lookback - 1)..=at).rev().find(|&k| self.anthropic.contains(&prefix_hashes[k]))
            })
            .max();
        let read = read_at.map_or(0, |at| cumulative[at]);
        let min = self.settings.min_cacheable_tokens;
        let written =
            if cumulative[last] >= min && read_at.is_none_or(|at| at < last) { cumulative[last] - read } else { 0 };
        for &at in breakpoints.iter().filter(|&&at| cumulative[at] >= min) {
            self.anthropic.insert(prefix_hashes[at]);
        }
        CacheFigures { uncached: total - read - written, written, read }
    }

    pub fn openai(&mut self, body: &Value) -> CacheFigures {
        let mut prompt = Vec::new();
        if !body["tools"].is_null() {
            prompt.extend(canonical(&body["tools"]).into_bytes());
        }
        for message in body["messages"].as_array().into_iter().flatten() {
            prompt.extend(canonical(message).into_bytes());
        }
        let total = tokens_of(prompt.len());
        let earlier = self.openai.entry(body["prompt_cache_key"].as_str().map(str::to_owned)).or_default();
        let common = earlier.iter().map(|seen| common_prefix(seen, &prompt)).max().unwrap_or(0);
        let step = self.settings.openai_step_tokens.max(1);
        let mut read = tokens_of(common) / step * step;
        if read < self.settings.openai_min_tokens {
            read = 0;
        }
        earlier.push(prompt);
        CacheFigures { uncached: total - read, written: 0, read }
    }
}

/// One cacheable unit of an Anthropic prompt.
struct PromptBlock {
    /// What identifies the block in a prefix: where it sits (tool, system, a role) and its JSON.
    key: String,
    tokens: u64,
    breakpoint: bool,
}

/// Tools, then system, then every message's content blocks (a string is one text block).
fn anthropic_blocks(body: &Value) -> Vec<PromptBlock> {
    let mut blocks = Vec::new();
    let mut push = |place: &str, block: &Value| {
        let json = canonical(block);
        blocks.push(PromptBlock {
            tokens: tokens_of(json.len()),
            key: format!("{place}\n{json}"),
            breakpoint: !block["cache_control"].is_null(),
        });
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        push("tool", tool);
    }
    match &body["system"] {
        Value::String(text) => push("system", &json!({"type": "text", "text": text})),
        Value::Array(system) => system.iter().for_each(|block| push("system", block)),
        _ => {}
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        match &message["content"] {
            Value::String(text) => push(role, &json!({"type": "text", "text": text})),
            Value::Array(content) => content.iter().for_each(|block| push(role, block)),
            _ => {}
        }
    }
    blocks
}

/// The estimate every figure here uses.
pub fn tokens_of(bytes: usize) -> u64 {
    bytes as u64 / 4
}

/// `value` as compact JSON with every `cache_control` removed, at any depth.
pub fn canonical(value: &Value) -> String {
    without_cache_control(value).to_string()
}

/// `value` with every `cache_control` removed, at any depth: a body as it would be without
/// prompt caching, for tests about anything else.
pub fn without_cache_control(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| *key != "cache_control")
                .map(|(k, v)| (k.clone(), without_cache_control(v)))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_cache_control).collect()),
        other => other.clone(),
    }
}

fn chain(previous: u64, key: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    previous.hash(&mut hasher);
    key.hash(&mut hasher);
    hasher.finish()
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Puts `figures` into one Anthropic SSE event's usage: `message_start` and `message_delta`
/// both carry the input figures on the real API (the delta's are cumulative).
pub fn set_anthropic_usage(event: &mut Value, figures: CacheFigures) {
    let usage = match event["type"].as_str() {
        Some("message_start") => event.pointer_mut("/message/usage"),
        Some("message_delta") => {
            if event["usage"].is_null() {
                event["usage"] = json!({});
            }
            event.get_mut("usage")
        }
        _ => None,
    };
    if let Some(usage) = usage.and_then(Value::as_object_mut) {
        usage.insert("input_tokens".into(), figures.uncached.into());
        usage.insert("cache_creation_input_tokens".into(), figures.written.into());
        usage.insert("cache_read_input_tokens".into(), figures.read.into());
    }
}

/// Puts `figures` into an OpenAI chunk's usage, if it has one (the `include_usage` chunk).
pub fn set_openai_usage(chunk: &mut Value, figures: CacheFigures) {
    let Some(usage) = chunk.get_mut("usage").and_then(Value::as_object_mut) else {
        return;
    };
    let completion = usage.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0);
    usage.insert("prompt_tokens".into(), figures.total().into());
    usage.insert("total_tokens".into(), (figures.total() + completion).into());
    usage.insert("prompt_tokens_details".into(), json!({"cached_tokens": figures.read}));
}
