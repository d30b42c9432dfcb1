//! What a long tool-using session costs, with prompt caching and without.
//!
//! Run with `cargo bench --bench cost`. Figures are printed, never asserted.
//!
//! A 30-step session runs through the live service against the project's mock provider, which
//! counts cached prefix tokens the way each provider does (`tests/common/prompt_cache.rs`:
//! Anthropic's breakpoints and 20-block lookback, OpenAI's automatic prefix caching). The model
//! reads one real source file of this repository per step with deputy's `read_file` tool (29
//! calls), then answers. For each wire and each `prompt_cache` setting the bench prints the
//! prompt tokens billed at full price, written to and read from the cache, their full-price
//! equivalent (writes 1.25×, reads 0.1× on Anthropic; reads at the model's cached price on
//! OpenAI, writes free), the dollars at list prices, and the ratio to the ideal: every step's
//! prompt read from the cache but for what the step added.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use deputy::agent::{AgentBuildConfig, AgentFactory};
use deputy::llm::Usage;
use deputy::llm::catalog::{Wire, known_price};
use deputy::llm::options::{PromptCache, WireOptions};
use deputy::llm::pricing::Price;
use deputy::llm::registry::ProviderRegistry;
use deputy::session::{CreateSessionRequest, LiveSessionService, SessionService, TurnOptions};
use deputy::tools::{BuiltinTool, ToolRequest, Workspace};
use serde_json::json;

use common::mock_llm::{self, MockLlm, MockResponse, usage};
use common::prompt_cache::{CacheFigures, CacheSettings};

/// Steps of the session: 29 tool calls, then the answer.
const STEPS: usize = 30;

/// The models the session runs on, one per wire; priced by deputy's own list
/// (`llm::catalog::known_price`).
const MODELS: [(Wire, &str); 2] = [(Wire::Anthropic, "claude-sonnet-4-5"), (Wire::Openai, "gpt-5")];

/// A model's list price, per million tokens, in dollars.
struct Prices {
    model: &'static str,
    price: Price,
}

impl Prices {
    fn of(model: &'static str) -> Self {
        Self { model, price: known_price(model).expect("a listed model") }
    }

    /// Full-price tokens one written (or read) token costs as much as.
    fn write_weight(&self) -> f64 {
        self.price.cache_write.dollars() / self.price.input.dollars()
    }

    fn read_weight(&self) -> f64 {
        self.price.cache_read.dollars() / self.price.input.dollars()
    }
}

/// What one run of the session cost.
#[derive(Default)]
struct Bill {
    uncached: u64,
    written: u64,
    read: u64,
    output: u64,
    /// The ideal: each request's prompt read from the cache but for what its step added.
    ideal_read: u64,
    ideal_written: u64,
}

impl Bill {
    fn full_price_equivalent(&self, prices: &Prices, written: u64, read: u64, uncached: u64) -> f64 {
        uncached as f64 + written as f64 * prices.write_weight() + read as f64 * prices.read_weight()
    }

    fn measured(&self, prices: &Prices) -> f64 {
        self.full_price_equivalent(prices, self.written, self.read, self.uncached)
    }

    fn ideal(&self, prices: &Prices) -> f64 {
        self.full_price_equivalent(prices, self.ideal_written, self.ideal_read, 0)
    }

    /// What deputy itself would bill for these tokens.
    fn dollars(&self, prices: &Prices) -> f64 {
        let usage = Usage {
            input_tokens: self.uncached,
            output_tokens: self.output,
            cache_read_input_tokens: self.read,
            cache_creation_input_tokens: self.written,
        };
        prices.price.cost(&usage).dollars()
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let files = source_files();
    println!(
        "A {STEPS}-step tool-using session (29 read_file calls of this repository's sources, then the answer):"
    );
    println!(
        "{:<10} {:<6} {:>10} {:>10} {:>10} {:>12} {:>9} {:>9} {:>8}",
        "wire", "cache", "full", "written", "read", "equivalent", "ideal", "ratio", "dollars"
    );
    for (wire, model) in MODELS {
        let prices = &Prices::of(model);
        for cache in [PromptCache::Auto, PromptCache::Off] {
            let bill = runtime.block_on(session(wire, prices, cache, &files));
            println!(
                "{:<10} {:<6} {:>10} {:>10} {:>10} {:>12.0} {:>9.0} {:>8.2}× {:>8.2}",
                format!("{wire:?}").to_lowercase(),
                if cache == PromptCache::Auto { "auto" } else { "off" },
                bill.uncached,
                bill.written,
                bill.read,
                bill.measured(prices),
                bill.ideal(prices),
                bill.measured(prices) / bill.ideal(prices),
                bill.dollars(prices),
            );
        }
    }
}

/// The 29 files the model reads: this repository's largest sources under `src/llm` and
/// `src/agent`, relative to `src/`.
fn source_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for dir in ["llm", "agent", "session/live", "model"] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
            .collect();
        entries.sort();
        files.extend(entries.into_iter().map(|path| path.strip_prefix(&root).unwrap().to_path_buf()));
    }
    files.truncate(STEPS - 1);
    assert_eq!(files.len(), STEPS - 1, "not enough source files");
    files
}

async fn session(wire: Wire, prices: &Prices, cache: PromptCache, files: &[PathBuf]) -> Bill {
    let mock = MockLlm::start().await;
    mock.emulate_cache(CacheSettings::default());
    let files: Vec<String> = files.iter().map(|path| path.display().to_string()).collect();
    let step = Arc::new(AtomicUsize::new(0));
    mock.respond_with(move |_| {
        let n = step.fetch_add(1, Ordering::SeqCst);
        // The mock puts its own emulated prompt figures in; output is what the model wrote.
        let output = usage(0, 120);
        let events = match files.get(n) {
            Some(path) => {
                let call = [(format!("call_{n}").as_str(), "read_file", json!({"path": path}))]
                    .map(|(id, name, input)| (id.to_owned(), name, input));
                let calls: Vec<(&str, &str, serde_json::Value)> =
                    call.iter().map(|(id, name, input)| (id.as_str(), *name, input.clone())).collect();
                match wire {
                    Wire::Anthropic => mock_llm::anthropic::tool_calls_with_usage(Some("Reading."), &calls, output),
                    Wire::Openai => mock_llm::openai::tool_calls_with_usage(Some("Reading."), &calls, output),
                }
            }
            None => match wire {
                Wire::Anthropic => mock_llm::anthropic::text_with_usage(&["All files read."], output),
                Wire::Openai => mock_llm::openai::text_with_usage(&["All files read."], output),
            },
        };
        MockResponse::sse(events)
    });
    let base_url = match wire {
        Wire::Anthropic => format!("{}/anthropic", mock.base_url()),
        Wire::Openai => format!("{}/v1", mock.base_url()),
    };
    let name = format!("{wire:?}").to_lowercase();
    let options = WireOptions { prompt_cache: cache, ..WireOptions::default() };
    let mut registry = ProviderRegistry::new();
    registry.insert(&name, wire.connect(base_url, Some("key".into()), options));
    let workspace = Workspace::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("src")).unwrap();
    let factory = AgentFactory::new(Arc::new(registry), None, Some(workspace));
    let service = LiveSessionService::new(factory, None);
    let request = CreateSessionRequest {
        build: AgentBuildConfig {
            model: Some(format!("{name}:{}", prices.model)),
            system_prompt: Some(
                "You are a careful code reviewer. Read each file you are asked about with read_file, \
                 one at a time, and keep notes of anything unusual."
                    .into(),
            ),
            tools: ToolRequest { builtins: Some(vec![BuiltinTool::ReadFile]), ..ToolRequest::default() },
            ..AgentBuildConfig::default()
        },
        prompt: "Review the agent loop's sources: read every file I name, in order, then summarize.".into(),
        turn: TurnOptions::default(),
        ..CreateSessionRequest::default()
    };
    let result = service.create_session(request).await.unwrap();
    assert_eq!(result.tool_calls, STEPS as u64 - 1, "{}", result.text);
    bill(&mock)
}

fn bill(mock: &MockLlm) -> Bill {
    let mut bill = Bill::default();
    let mut previous = 0;
    for record in mock.cache_log() {
        let CacheFigures { uncached, written, read } = record.figures;
        let total = uncached + written + read;
        bill.uncached += uncached;
        bill.written += written;
        bill.read += read;
        bill.ideal_read += previous;
        bill.ideal_written += total - previous.min(total);
        previous = total;
    }
    bill.output = 120 * mock.cache_log().len() as u64;
    bill
}
