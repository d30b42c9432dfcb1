//! Cost in dollars (issue 24, part 5) through the built binary: a turn's `usage.cost_usd`,
//! `session_read`'s billing, `session_list`, the journal's usage events and the CLI's exit
//! summary, at the list price of a real model name served by the mock; the config file's price
//! overriding it; an unknown model's `null`; `budget.max_cost_usd` ending a turn
//! `budget_exhausted` and carved for a delegated child.
//!
//! Every figure is exact: deputy keeps money in picodollars and shows dollars as the nearest
//! `f64`, which is the literal written here.

use serde_json::{Value, json};

use crate::common::deputy::TestDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{Gate, MockResponse, RecordedRequest, anthropic, openai, usage};

/// The cost of one scripted call at Claude Sonnet 4.5's list price ($3 in, $15 out, $3.75
/// cache write, $0.30 cache read per million): 1000 in, 500 out, 2000 read, 400 written.
const SONNET_CALL_USD: f64 = 0.0126;

fn sonnet_call() -> MockResponse {
    MockResponse::sse(anthropic::text_with_usage(&["priced"], usage(1000, 500).cache(2000, 400)))
}

fn usage_events(events: &Value) -> Vec<Value> {
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|stored| stored["event"]["type"] == "usage")
        .map(|stored| stored["event"].clone())
        .collect()
}

#[tokio::test]
async fn a_turn_costs_its_tokens_at_the_models_list_price_everywhere_usage_is_shown() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(sonnet_call());
    let done = deputy.ok("session_create", json!({"prompt": "hi", "model": "anthropic:claude-sonnet-4-5"})).await;
    assert_eq!(done["status"], "completed", "{done}");
    let usage = &done["usage"];
    assert_eq!(usage["input_tokens"], 1000, "the token counts stay beside the cost: {usage}");
    assert_eq!(usage["cost_usd"].as_f64(), Some(SONNET_CALL_USD), "{usage}");
    let id = id_of(&done);

    deputy.mock.push(sonnet_call());
    let second = deputy.ok("session_turn", json!({"session_id": id, "prompt": "again"})).await;
    assert_eq!(second["usage"]["cost_usd"].as_f64(), Some(SONNET_CALL_USD), "a turn shows its own cost");

    let view = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(view["billing"]["cost_usd"].as_f64(), Some(2.0 * SONNET_CALL_USD), "{}", view["billing"]);
    let list = deputy.ok("session_list", json!({})).await;
    assert_eq!(list["sessions"][0]["cost_usd"].as_f64(), Some(2.0 * SONNET_CALL_USD), "{list}");

    let events = deputy.ok("session_events", json!({"session_id": id})).await;
    let costs: Vec<Option<f64>> = usage_events(&events).iter().map(|event| event["cost_usd"].as_f64()).collect();
    assert_eq!(costs, [Some(SONNET_CALL_USD); 2], "{events}");
}

#[tokio::test]
async fn an_openai_model_prices_cached_input_at_its_own_rate() {
    let deputy = TestDeputy::start().await;
    // 1000 uncached + 2000 cached prompt tokens, 500 out, at gpt-4o's $2.50 / $1.25 / $10.
    deputy.mock.push(MockResponse::sse(openai::text_with_usage(&["priced"], usage(1000, 500).cache(2000, 0))));
    let done = deputy.ok("session_create", json!({"prompt": "hi", "model": "openai:gpt-4o"})).await;
    assert_eq!(done["usage"]["cache_read_input_tokens"], 2000, "{done}");
    assert_eq!(done["usage"]["cost_usd"].as_f64(), Some(0.01), "{done}");
}

#[tokio::test]
async fn the_config_files_price_wins_and_a_gateway_model_without_one_has_its_list_price_and_ttl() {
    let config = r#"
[providers.gw]
api = "anthropic"
base_url = "BASE/anthropic"

[providers.gw.models."claude-sonnet-4-5"]
input = 1.0
output = 2.0
cache_write = 3.0
cache_read = 4.0

[providers.hourly]
api = "anthropic"
base_url = "BASE/anthropic"
prompt_cache_ttl = "1h"
"#;
    // The config file names the mock's address, known only once the mock runs: start a deputy
    // to learn it, then one with the file.
    let probe = TestDeputy::start().await;
    let config = config.replace("BASE", &probe.mock.base_url());
    let stopped = probe.stop().await;
    std::fs::create_dir_all(stopped.home.path().join("deputy")).unwrap();
    std::fs::write(stopped.home.path().join("deputy").join("config.toml"), config).unwrap();
    let deputy = TestDeputy::respawn_on(stopped.mock, stopped.workspace, stopped.home).await;

    deputy.mock.push(MockResponse::sse(anthropic::text_with_usage(&["a"], usage(1000, 500).cache(100, 10))));
    let overridden = deputy.ok("session_create", json!({"prompt": "hi", "model": "gw:claude-sonnet-4-5"})).await;
    // 1000 × $1 + 500 × $2 + 10 × $3 + 100 × $4, per million.
    assert_eq!(overridden["usage"]["cost_usd"].as_f64(), Some(0.00243), "{overridden}");

    deputy.mock.push(MockResponse::sse(anthropic::text_with_usage(&["b"], usage(1000, 500))));
    let listed = deputy.ok("session_create", json!({"prompt": "hi", "model": "gw:claude-haiku-4-5"})).await;
    // Haiku 4.5's list price, $1 in and $5 out, whoever serves it.
    assert_eq!(listed["usage"]["cost_usd"].as_f64(), Some(0.0035), "{listed}");

    // Cache writes that last an hour cost 2× input ($2 for Haiku 4.5), not the 5-minute 1.25×.
    for (provider, expected) in [("gw", 0.00125), ("hourly", 0.002)] {
        deputy.mock.push(MockResponse::sse(anthropic::text_with_usage(&["c"], usage(0, 0).cache(0, 1000))));
        let model = format!("{provider}:claude-haiku-4-5");
        let written = deputy.ok("session_create", json!({"prompt": "hi", "model": model})).await;
        assert_eq!(written["usage"]["cost_usd"].as_f64(), Some(expected), "{provider}: {written}");
    }
}

#[tokio::test]
async fn an_unknown_price_is_null_and_no_cost_limit_is_pretended_for_it() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["unpriced"])));
    let done = deputy.ok("session_create", json!({"prompt": "hi", "model": "anthropic:claude-test"})).await;
    assert!(done["usage"]["cost_usd"].is_null(), "present and null: {done}");
    assert!(done["usage"].as_object().unwrap().contains_key("cost_usd"), "{done}");
    let id = id_of(&done);
    let view = deputy.ok("session_read", json!({"session_id": id})).await;
    assert!(view["billing"]["cost_usd"].is_null(), "{}", view["billing"]);
    let list = deputy.ok("session_list", json!({})).await;
    assert!(list["sessions"][0]["cost_usd"].is_null(), "{list}");
    let events = deputy.ok("session_events", json!({"session_id": id})).await;
    assert!(usage_events(&events).iter().all(|event| event["cost_usd"].is_null()), "{events}");

    let (code, message) = deputy
        .err(
            "session_create",
            json!({"prompt": "hi", "model": "anthropic:claude-test", "budget": {"max_cost_usd": 1.0}}),
        )
        .await;
    assert_eq!(code, "INVALID_REQUEST", "{message}");
    assert!(message.contains("max_cost_usd") && message.contains("price"), "{message}");
    assert_eq!(deputy.mock.requests().len(), 1, "the refused session never called the model");
}

#[tokio::test]
async fn a_spent_cost_budget_ends_the_turn_budget_exhausted() {
    let deputy = TestDeputy::start().await;
    // The first call costs $0.0105 and asks for a tool; the limit is $0.01, so no second call.
    let calls = [("t1", "list_dir", json!({}))];
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls_with_usage(None, &calls, usage(1000, 500))));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["never sent"])));
    let done = deputy
        .ok(
            "session_create",
            json!({"prompt": "look", "model": "anthropic:claude-sonnet-4-5", "budget": {"max_cost_usd": 0.01}}),
        )
        .await;
    assert_eq!(
        (done["status"].as_str(), done["stop_reason"].as_str()),
        (Some("completed"), Some("budget_exhausted"))
    );
    assert_eq!(done["usage"]["cost_usd"].as_f64(), Some(0.0105), "{done}");
    assert_eq!(deputy.mock.requests().len(), 1, "the budget was checked before the second call");
    let billing = &deputy.ok("session_read", json!({"session_id": id_of(&done)})).await["billing"];
    assert_eq!(billing["budget"]["max_cost_usd"].as_f64(), Some(0.01), "{billing}");
    assert_eq!(billing["remaining"]["cost_usd"].as_f64(), Some(0.0), "{billing}");
}

/// One scripted call of the delegation test: the mock's default usage (12 in, 5 out) at
/// Sonnet's price.
const DEFAULT_CALL_USD: f64 = 0.000111;

fn is_child(request: &RecordedRequest) -> bool {
    request.body["messages"][0].to_string().contains("CHILD")
}

fn has_tool_result(request: &RecordedRequest) -> bool {
    request.last_message().contains("tool_result")
}

#[tokio::test]
async fn a_child_gets_a_carve_of_the_parents_money_and_the_rest_comes_back() {
    let deputy = TestDeputy::start().await;
    let release = Gate::new();
    let gate = release.clone();
    deputy.mock.respond_with(move |request: &RecordedRequest| {
        if is_child(request) {
            // Held until the test has read the child's carved budget (it closes when it ends).
            return MockResponse::sse(anthropic::text(&["child done"])).pause_before_chunk(1, gate.clone());
        }
        if has_tool_result(request) {
            return MockResponse::sse(anthropic::text(&["parent done"]));
        }
        let input = json!({"task": "CHILD: work", "budget": {"max_cost_usd": 5.0}});
        MockResponse::sse(anthropic::tool_calls(None, &[("toolu_0", "delegate", input)]))
    });
    let started = deputy
        .ok(
            "session_create",
            json!({"prompt": "PARENT: delegate", "model": "anthropic:claude-sonnet-4-5",
                   "budget": {"max_cost_usd": 1.0}, "wait_ms": 0}),
        )
        .await;
    let parent = id_of(&started);
    let child = loop {
        let list = deputy.ok("session_list", json!({"parent_id": parent})).await;
        if let Some(child) = list["sessions"].as_array().unwrap().first() {
            break id_of(child);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let child_view = deputy.ok("session_read", json!({"session_id": child})).await;
    let carved = child_view["billing"]["budget"]["max_cost_usd"].as_f64();
    assert_eq!(carved, Some(1.0 - DEFAULT_CALL_USD), "the $5 asked, capped to what the parent had left");

    release.open();
    let done = deputy.settled(&parent, |view| view["state"]["last_turn"]["status"].as_str().is_some()).await;
    assert_eq!(done["state"]["last_turn"]["text"], "parent done", "{done}");
    let billing = &done["billing"];
    assert_eq!(billing["delegated_cost_usd"].as_f64(), Some(DEFAULT_CALL_USD), "{billing}");
    assert!(billing.get("reserved_cost_usd").is_none(), "nothing held once the result is in: {billing}");
    // Its own two calls and its child's one.
    assert_eq!(billing["cost_usd"].as_f64(), Some(0.000333), "{billing}");
    assert_eq!(billing["remaining"]["cost_usd"].as_f64(), Some(0.999667), "{billing}");
}

#[tokio::test]
async fn a_child_without_a_price_is_refused_to_a_parent_with_a_cost_limit() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|request: &RecordedRequest| {
        if has_tool_result(request) {
            return MockResponse::sse(anthropic::text(&["did it myself"]));
        }
        let input = json!({"task": "CHILD: work", "model": "anthropic:claude-test"});
        MockResponse::sse(anthropic::tool_calls(None, &[("toolu_0", "delegate", input)]))
    });
    let done = deputy
        .ok(
            "session_create",
            json!({"prompt": "PARENT: delegate", "model": "anthropic:claude-sonnet-4-5",
                   "budget": {"max_cost_usd": 1.0}}),
        )
        .await;
    assert_eq!(done["text"], "did it myself", "{done}");
    let after = deputy.mock.requests().into_iter().find(has_tool_result).unwrap();
    let refusal = after.last_message();
    assert!(refusal.contains("max_cost_usd") && refusal.contains("claude-test"), "{refusal}");
    assert!(!deputy.mock.requests().iter().any(is_child), "no child was started");
    let billing = &deputy.ok("session_read", json!({"session_id": id_of(&done)})).await["billing"];
    assert!(billing.get("reserved_cost_usd").is_none(), "the hold came back whole: {billing}");
    assert_eq!(billing["delegated_cost_usd"].as_f64(), Some(0.0), "{billing}");
}

/// The spend is part of the stored record: a restart shows the same figure.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn the_spend_survives_a_restart() {
    let deputy = TestDeputy::start().await;
    deputy.mock.push(sonnet_call());
    let done = deputy.ok("session_create", json!({"prompt": "hi", "model": "anthropic:claude-sonnet-4-5"})).await;
    let id = id_of(&done);
    let deputy = deputy.restart().await;
    let view = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(view["billing"]["cost_usd"].as_f64(), Some(SONNET_CALL_USD), "{}", view["billing"]);
    deputy.mock.push(sonnet_call());
    deputy.ok("session_turn", json!({"session_id": id, "prompt": "again"})).await;
    let view = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(view["billing"]["cost_usd"].as_f64(), Some(2.0 * SONNET_CALL_USD), "{}", view["billing"]);
}

/// `deputy run` prints the turn's tokens and dollars when it exits, and `--budget-cost-usd`
/// holds it to a cost (exit 2, as for any budget).
#[tokio::test]
async fn the_command_line_prints_the_cost_and_takes_a_cost_budget() {
    use crate::common::mock_llm::MockLlm;

    let mock = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let calls = [("t1", "list_dir", json!({}))];
    mock.push(MockResponse::sse(anthropic::tool_calls_with_usage(None, &calls, usage(1000, 500))));
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
    command.env_remove("DEPUTY_MODEL").env_remove("DEPUTY_CONFIG").env("XDG_CONFIG_HOME", home.path());
    crate::common::deputy::with_store(&mut command, home.path());
    let output = tokio::process::Command::from(command)
        .args(["run", "--model", "anthropic:claude-sonnet-4-5", "--budget-cost-usd", "0.01", "look"])
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("DEPUTY_WORKSPACE", home.path())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("usage 1500 tokens (1000 in, 500 out, 0 cache read, 0 cache write), cost $0.0105"),
        "{stderr}"
    );
    assert_eq!(mock.requests().len(), 1, "{stderr}");

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["run", "--budget-cost-usd=-1", "look"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not an amount of dollars"));
}

/// A price in the config file names all four rates; one that does not stops deputy at start,
/// naming the missing one.
#[test]
fn a_config_price_without_all_four_rates_stops_deputy_at_start() {
    let home = tempfile::tempdir().unwrap();
    let config = crate::common::file_in(
        home.path(),
        "config.toml",
        "[providers.gw]\napi = \"anthropic\"\nbase_url = \"http://127.0.0.1:9\"\n\
         [providers.gw.models.\"m\"]\ninput = 1\noutput = 2\ncache_write = 1.25\n",
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["run", "--model", "gw:m", "--config"])
        .arg(&config)
        .arg("hi")
        .env_remove("DEPUTY_STORE")
        .env("XDG_CONFIG_HOME", home.path())
        .env("XDG_DATA_HOME", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("cache_read"), "{stderr}");
}
