//! The strict mock itself: each provider rule accepts a valid body and refuses a broken one
//! with the provider's exact text; the prompt-cache emulation counts what each provider would
//! have served from its cache; and the mock applies both to real requests over HTTP.

use serde_json::{Value, json};

use crate::common::mock_llm::{self, MockLlm, MockResponse, usage};
use crate::common::prompt_cache::{CacheFigures, CacheSettings, PromptCache, canonical, tokens_of};
use crate::common::provider_rules::{
    Profile, ReasoningVendor, StreamOptionsVendor, ThinkingGateway, Violation, Wire, check, thinking_signature,
};

// ---------------------------------------------------------------------------------------------
// Helpers

fn anthropic(body: &Value) -> Result<(), Violation> {
    check(Wire::Anthropic, body, &Profile::first_party())
}

fn openai(body: &Value) -> Result<(), Violation> {
    check(Wire::OpenAi, body, &Profile::first_party())
}

/// The refusal's message, asserting it is a refusal of `rule`.
#[track_caller]
fn refused(result: Result<(), Violation>, rule: &str) -> String {
    let violation = result.expect_err("the body should be refused");
    assert_eq!(violation.rule, rule, "{}", violation.message());
    violation.message().to_owned()
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

fn tool(name: &str) -> Value {
    json!({"name": name, "description": "d", "input_schema": {"type": "object"}})
}

fn tool_use(id: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "ls", "input": {}})
}

fn tool_result(id: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": "ok"})
}

fn thinking(text: &str) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": thinking_signature(text)})
}

/// user → assistant(blocks) → user(tool results for `answered`, then `extra`).
fn tool_turn(assistant: Vec<Value>, answered: &[&str]) -> Value {
    let results: Vec<Value> = answered.iter().map(|id| tool_result(id)).collect();
    json!({
        "model": "claude-test", "max_tokens": 2048, "tools": [tool("ls")],
        "messages": [user("list"), {"role": "assistant", "content": assistant}, {"role": "user", "content": results}],
    })
}

fn openai_tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "parameters": {"type": "object"}}})
}

fn openai_call(id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "ls", "arguments": "{}"}})
}

fn openai_tool_loop(answered: &[&str]) -> Value {
    let mut messages = vec![
        json!({"role": "user", "content": "list"}),
        json!({"role": "assistant", "content": null, "tool_calls": [openai_call("call_1"), openai_call("call_2")]}),
    ];
    messages.extend(answered.iter().map(|id| json!({"role": "tool", "tool_call_id": id, "content": "ok"})));
    json!({"model": "gpt-4o", "stream": true, "tools": [openai_tool("ls")], "messages": messages})
}

// ---------------------------------------------------------------------------------------------
// Anthropic: tools and tool history

#[test]
fn anthropic_tool_history_needs_tools() {
    let mut body = tool_turn(vec![tool_use("toolu_1")], &["toolu_1"]);
    assert_eq!(anthropic(&body), Ok(()));
    body.as_object_mut().unwrap().remove("tools");
    assert_eq!(
        refused(anthropic(&body), "anthropic.tool_history_without_tools"),
        "Requests which include `tool_use` or `tool_result` blocks must define tools."
    );
    body["tools"] = json!([]);
    let bedrock = check(Wire::Anthropic, &body, &Profile::bedrock());
    assert_eq!(
        refused(bedrock, "anthropic.tool_history_without_tools"),
        "The toolConfig field must be defined when using toolUse and toolResult content blocks."
    );
}

#[test]
fn anthropic_every_tool_use_is_answered_right_after() {
    let body = tool_turn(vec![tool_use("toolu_1"), tool_use("toolu_2")], &["toolu_1"]);
    assert_eq!(
        refused(anthropic(&body), "anthropic.tool_use_unanswered"),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_2. Each \
         `tool_use` block must have a corresponding `tool_result` block in the next message."
    );
}

#[test]
fn anthropic_tool_results_come_first() {
    let mut body = tool_turn(vec![tool_use("toolu_1")], &["toolu_1"]);
    body["messages"][2]["content"] = json!([{"type": "text", "text": "mail"}, tool_result("toolu_1")]);
    assert_eq!(
        refused(anthropic(&body), "anthropic.tool_results_first"),
        "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message. Messages following \
         `tool_use` blocks must begin with a matching number of `tool_result` blocks."
    );
    // Text after the results is fine (inbox mail between steps).
    body["messages"][2]["content"] = json!([tool_result("toolu_1"), {"type": "text", "text": "mail"}]);
    assert_eq!(anthropic(&body), Ok(()));
}

#[test]
fn anthropic_tool_result_answers_the_previous_message() {
    let body = tool_turn(vec![tool_use("toolu_1")], &["toolu_1", "toolu_9"]);
    assert_eq!(
        refused(anthropic(&body), "anthropic.tool_result_unexpected"),
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. Each \
         `tool_result` block must have a corresponding `tool_use` block in the previous message."
    );
}

#[test]
fn anthropic_tool_names() {
    let long = "a".repeat(65);
    let body =
        |tools: Vec<Value>| json!({"model": "m", "max_tokens": 10, "tools": tools, "messages": [user("hi")]});
    assert_eq!(anthropic(&body(vec![tool(&"a".repeat(64)), tool("fs__read-file")])), Ok(()));
    assert_eq!(
        refused(anthropic(&body(vec![tool("ok"), tool(&long)])), "anthropic.tool_name_pattern"),
        "tools.1.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"
    );
    assert_eq!(
        refused(anthropic(&body(vec![tool("fs.read")])), "anthropic.tool_name_pattern"),
        "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"
    );
    assert_eq!(
        refused(anthropic(&body(vec![tool("ls"), tool("ls")])), "anthropic.tool_names_unique"),
        "tools: Tool names must be unique."
    );
}

#[test]
fn anthropic_tool_choice() {
    let body = |choice: Value| json!({"model": "m", "max_tokens": 10, "tools": [tool("ls")], "tool_choice": choice, "messages": [user("hi")]});
    for choice in [
        json!({"type": "none"}),
        json!({"type": "auto"}),
        json!({"type": "any"}),
        json!({"type": "tool", "name": "ls"}),
    ] {
        assert_eq!(anthropic(&body(choice)), Ok(()));
    }
    refused(anthropic(&body(json!({"type": "required"}))), "anthropic.tool_choice_type");
    refused(anthropic(&body(json!({"type": "tool", "name": "rm"}))), "anthropic.tool_choice_unknown_tool");
}

// ---------------------------------------------------------------------------------------------
// Anthropic: content and roles

#[test]
fn anthropic_text_blocks_must_hold_text() {
    let body = |assistant: Value| json!({"model": "m", "max_tokens": 10, "messages": [user("hi"), {"role": "assistant", "content": assistant}, user("go")]});
    assert_eq!(anthropic(&body(json!([{"type": "text", "text": "ok"}]))), Ok(()));
    assert_eq!(
        refused(anthropic(&body(json!([{"type": "text", "text": ""}]))), "anthropic.text_empty"),
        "messages: text content blocks must be non-empty"
    );
    assert_eq!(
        refused(anthropic(&body(json!([{"type": "text", "text": "\n\n"}]))), "anthropic.text_whitespace"),
        "messages: text content blocks must contain non-whitespace text"
    );
    assert_eq!(
        refused(anthropic(&body(json!([]))), "anthropic.content_empty"),
        "messages.1: all messages must have non-empty content except for the optional final assistant message"
    );
    // A final (prefill) assistant message may be empty.
    let prefill =
        json!({"model": "m", "max_tokens": 10, "messages": [user("hi"), {"role": "assistant", "content": []}]});
    assert_eq!(anthropic(&prefill), Ok(()));
}

#[test]
fn anthropic_system_blocks_follow_the_text_rules() {
    let body = |system: Value| json!({"model": "m", "max_tokens": 10, "system": system, "messages": [user("hi")]});
    assert_eq!(anthropic(&body(json!("You are terse."))), Ok(()));
    assert_eq!(anthropic(&body(json!([{"type": "text", "text": "You are terse."}]))), Ok(()));
    refused(anthropic(&body(json!([{"type": "text", "text": " "}]))), "anthropic.text_whitespace");
}

#[test]
fn anthropic_roles() {
    let body = |messages: Value| json!({"model": "m", "max_tokens": 10, "messages": messages});
    let assistant_first = body(json!([{"role": "assistant", "content": "hello"}, user("hi")]));
    assert_eq!(
        refused(anthropic(&assistant_first), "anthropic.first_role"),
        "messages: first message must use the \"user\" role"
    );
    let two_users = body(json!([user("hi"), user("again")]));
    assert_eq!(anthropic(&two_users), Ok(()));
    assert_eq!(
        refused(check(Wire::Anthropic, &two_users, &Profile::bedrock()), "anthropic.alternation"),
        "A conversation must alternate between user and assistant roles. Make sure the conversation alternates \
         between user and assistant roles and try again."
    );
}

// ---------------------------------------------------------------------------------------------
// Anthropic: cache_control

fn marked(ttl: Option<&str>) -> Value {
    let mut control = json!({"type": "ephemeral"});
    if let Some(ttl) = ttl {
        control["ttl"] = json!(ttl);
    }
    json!({"type": "text", "text": "x", "cache_control": control})
}

#[test]
fn anthropic_at_most_four_cache_breakpoints() {
    let body = |blocks: usize, automatic: bool| {
        let mut body = json!({"model": "m", "max_tokens": 10, "system": vec![marked(None); 2],
                              "messages": [{"role": "user", "content": vec![marked(None); blocks]}]});
        if automatic {
            body["cache_control"] = json!({"type": "ephemeral"});
        }
        body
    };
    assert_eq!(anthropic(&body(2, false)), Ok(()));
    assert_eq!(
        refused(anthropic(&body(3, false)), "anthropic.cache_control_count"),
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    );
    refused(anthropic(&body(2, true)), "anthropic.cache_control_count");
}

#[test]
fn anthropic_cache_ttls() {
    let body = |system: Option<&str>, message: Option<&str>| {
        json!({"model": "m", "max_tokens": 10, "system": [marked(system)],
               "messages": [{"role": "user", "content": [marked(message)]}]})
    };
    assert_eq!(anthropic(&body(Some("1h"), Some("5m"))), Ok(()));
    assert_eq!(anthropic(&body(Some("1h"), Some("1h"))), Ok(()));
    assert_eq!(
        refused(anthropic(&body(None, Some("1h"))), "anthropic.cache_control_ttl_order"),
        "messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' \
         cache_control block. Note that blocks are processed in the following order: `tools`, `system`, \
         `messages`."
    );
    refused(anthropic(&body(Some("10m"), None)), "anthropic.cache_control_ttl");
}

// ---------------------------------------------------------------------------------------------
// Anthropic: thinking

fn thinking_body(budget: u64, max_tokens: u64) -> Value {
    json!({"model": "m", "max_tokens": max_tokens, "thinking": {"type": "enabled", "budget_tokens": budget},
           "messages": [user("hi")]})
}

#[test]
fn anthropic_thinking_parameters() {
    assert_eq!(anthropic(&thinking_body(1024, 2048)), Ok(()));
    assert_eq!(
        refused(anthropic(&thinking_body(1000, 2048)), "anthropic.thinking_budget_minimum"),
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    );
    assert_eq!(
        refused(anthropic(&thinking_body(2048, 2048)), "anthropic.thinking_budget_below_max_tokens"),
        "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at \
         https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
    );
    let mut forced = thinking_body(1024, 2048);
    forced["tools"] = json!([tool("deputy_final_answer")]);
    forced["tool_choice"] = json!({"type": "any"});
    assert_eq!(
        refused(anthropic(&forced), "anthropic.thinking_forced_tool_choice"),
        "Thinking may not be enabled when tool_choice forces tool use."
    );
    let mut warm = thinking_body(1024, 2048);
    warm["temperature"] = json!(0.2);
    refused(anthropic(&warm), "anthropic.thinking_temperature");
    warm["temperature"] = json!(1);
    assert_eq!(anthropic(&warm), Ok(()));
}

#[test]
fn anthropic_thinking_final_assistant_starts_with_thinking() {
    let with_thinking = |mut body: Value| {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        body
    };
    let good = with_thinking(tool_turn(vec![thinking("I should list."), tool_use("toolu_1")], &["toolu_1"]));
    assert_eq!(anthropic(&good), Ok(()));
    let bare = with_thinking(tool_turn(vec![tool_use("toolu_1")], &["toolu_1"]));
    assert_eq!(
        refused(anthropic(&bare), "anthropic.thinking_final_assistant"),
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When \
         `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the \
         lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from \
         previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at \
         https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    );
    // The wedge: the next prompt joined the tool-result message, so the same turn stays final.
    let mut joined = bare.clone();
    joined["messages"][2]["content"].as_array_mut().unwrap().push(json!({"type": "text", "text": "next"}));
    refused(anthropic(&joined), "anthropic.thinking_final_assistant");
    // Without thinking the same history is fine; a redacted block satisfies the rule too.
    assert_eq!(anthropic(&tool_turn(vec![tool_use("toolu_1")], &["toolu_1"])), Ok(()));
    let redacted = json!({"type": "redacted_thinking", "data": "opaque"});
    assert_eq!(anthropic(&with_thinking(tool_turn(vec![redacted, tool_use("toolu_1")], &["toolu_1"]))), Ok(()));
}

#[test]
fn anthropic_thinking_blocks_keep_their_signature() {
    let mut edited = thinking("I should list.");
    edited["thinking"] = json!("I should list files.");
    let body = tool_turn(vec![edited, tool_use("toolu_1")], &["toolu_1"]);
    assert_eq!(
        refused(anthropic(&body), "anthropic.thinking_signature"),
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    );
    let unsigned = json!({"type": "thinking", "thinking": "I should list."});
    refused(
        anthropic(&tool_turn(vec![unsigned, tool_use("toolu_1")], &["toolu_1"])),
        "anthropic.thinking_signature_missing",
    );
}

#[test]
fn anthropic_gateway_injected_thinking() {
    // The request never asks for thinking; the gateway turns it on anyway.
    let bare = tool_turn(vec![tool_use("toolu_1")], &["toolu_1"]);
    let alias = Profile::thinking_gateway(ThinkingGateway::Alias);
    refused(check(Wire::Anthropic, &bare, &alias), "anthropic.thinking_final_assistant");
    let mut structured = json!({"model": "m", "max_tokens": 10, "tools": [tool("deputy_final_answer")],
                                "tool_choice": {"type": "any"}, "messages": [user("hi")]});
    refused(check(Wire::Anthropic, &structured, &alias), "anthropic.thinking_forced_tool_choice");
    structured["tool_choice"] = json!({"type": "auto"});
    assert_eq!(check(Wire::Anthropic, &structured, &alias), Ok(()));

    // DeepSeek also wants the thinking of earlier tool turns, not only the final one.
    let deepseek = Profile::thinking_gateway(ThinkingGateway::DeepSeek);
    let mut history = tool_turn(vec![tool_use("toolu_1")], &["toolu_1"]);
    let messages = history["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": [thinking("Now read."), tool_use("toolu_2")]}));
    messages.push(json!({"role": "user", "content": [tool_result("toolu_2")]}));
    assert_eq!(check(Wire::Anthropic, &history, &alias), Ok(()));
    assert_eq!(
        refused(check(Wire::Anthropic, &history, &deepseek), "anthropic.deepseek_thinking_passback"),
        "The `content[].thinking` in the thinking mode must be passed back to the API."
    );
}

// ---------------------------------------------------------------------------------------------
// OpenAI

#[test]
fn openai_tool_names() {
    let body = |names: &[&str]| {
        json!({"model": "gpt-4o", "tools": names.iter().map(|n| openai_tool(n)).collect::<Vec<_>>(),
               "messages": [{"role": "user", "content": "hi"}]})
    };
    assert_eq!(openai(&body(&["fs__read_file", &"a".repeat(64)])), Ok(()));
    let long = "a".repeat(73);
    let violation = openai(&body(&[&long])).unwrap_err();
    assert_eq!(
        violation.body,
        json!({"error": {"message": "Invalid 'tools[0].function.name': string too long. Expected a string with \
            maximum length 64, but got a string with length 73 instead.", "type": "invalid_request_error",
            "param": "tools[0].function.name", "code": "string_above_max_length"}})
    );
    assert_eq!(
        refused(openai(&body(&["ok", "fs/read"])), "openai.tool_name_pattern"),
        "Invalid 'tools[1].function.name': string does not match pattern. Expected a string that matches the \
         pattern '^[a-zA-Z0-9_-]+$'."
    );
    refused(openai(&body(&["ls", "ls"])), "openai.tool_names_unique");
}

#[test]
fn openai_tool_calls_are_answered() {
    assert_eq!(openai(&openai_tool_loop(&["call_2", "call_1"])), Ok(()));
    let violation = openai(&openai_tool_loop(&["call_1"])).unwrap_err();
    assert_eq!(violation.rule, "openai.tool_calls_unanswered");
    assert_eq!(violation.body["error"]["param"], "messages.[1].role");
    assert_eq!(
        violation.message(),
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
         'tool_call_id'. The following tool_call_ids did not have response messages: call_2"
    );
    // A user message between the call and its answer breaks the pairing too.
    let mut interrupted = openai_tool_loop(&["call_1", "call_2"]);
    interrupted["messages"].as_array_mut().unwrap().insert(2, json!({"role": "user", "content": "wait"}));
    refused(openai(&interrupted), "openai.tool_calls_unanswered");
}

#[test]
fn openai_tool_messages_answer_a_call() {
    let stray = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]});
    assert_eq!(
        refused(openai(&stray), "openai.tool_without_call"),
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
    );
    refused(openai(&openai_tool_loop(&["call_1", "call_2", "call_3"])), "openai.tool_call_id_unknown");
}

#[test]
fn openai_reasoning_models_on_any_host() {
    let body = |model: &str, extra: Value| {
        let mut body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    assert_eq!(openai(&body("gpt-4o", json!({"max_tokens": 100, "temperature": 0.2}))), Ok(()));
    assert_eq!(openai(&body("gpt-5.1", json!({"max_completion_tokens": 100, "reasoning_effort": "low"}))), Ok(()));
    let violation = openai(&body("gpt-5.1", json!({"max_tokens": 100}))).unwrap_err();
    assert_eq!(
        violation.body,
        json!({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use \
            'max_completion_tokens' instead.", "type": "invalid_request_error", "param": "max_tokens",
            "code": "unsupported_parameter"}})
    );
    refused(openai(&body("openai/o4-mini", json!({"max_tokens": 100}))), "openai.max_tokens_on_reasoning_model");
    assert_eq!(
        refused(openai(&body("o3", json!({"temperature": 0.7}))), "openai.temperature_on_reasoning_model"),
        "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is \
         supported."
    );
    assert_eq!(openai(&body("o3", json!({"temperature": 1}))), Ok(()));
    assert_eq!(
        refused(openai(&body("gpt-5", json!({"reasoning_effort": "max"}))), "openai.reasoning_effort"),
        "Unsupported value: 'reasoning_effort' does not support 'max' with this model. Supported values are: \
         'minimal', 'low', 'medium', and 'high'."
    );
}

#[test]
fn openai_tool_choice_needs_tools() {
    let mut body = openai_tool_loop(&["call_1", "call_2"]);
    for choice in
        [json!("none"), json!("auto"), json!("required"), json!({"type": "function", "function": {"name": "ls"}})]
    {
        body["tool_choice"] = choice;
        assert_eq!(openai(&body), Ok(()));
    }
    body["tool_choice"] = json!("any");
    refused(openai(&body), "openai.tool_choice_value");
    let no_tools =
        json!({"model": "gpt-4o", "tool_choice": "none", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        refused(openai(&no_tools), "openai.tool_choice_without_tools"),
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    );
}

#[test]
fn openai_reasoning_content_passed_back() {
    let bare = openai_tool_loop(&["call_1", "call_2"]);
    assert_eq!(openai(&bare), Ok(()));
    let deepseek = check(Wire::OpenAi, &bare, &Profile::reasoning_passback(ReasoningVendor::DeepSeek));
    assert_eq!(
        deepseek.unwrap_err().body,
        json!({"error": {"message": "The `reasoning_content` in the thinking mode must be passed back to the API.",
            "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}})
    );
    let kimi = Profile::reasoning_passback(ReasoningVendor::Kimi);
    assert_eq!(
        refused(check(Wire::OpenAi, &bare, &kimi), "openai.kimi_reasoning_passback"),
        "thinking is enabled but reasoning_content is missing in assistant tool call message at index 1"
    );
    let mut passed = bare.clone();
    passed["messages"][1]["reasoning_content"] = json!("List first.");
    assert_eq!(check(Wire::OpenAi, &passed, &kimi), Ok(()));
}

#[test]
fn openai_vendor_profiles() {
    let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null,
                      "tool_calls": [openai_call("call_1")]}, {"role": "tool", "tool_call_id": "call_1", "content": "ok"}],
                      "tools": [openai_tool("ls")]});
    assert_eq!(openai(&body), Ok(()));
    let azure = check(Wire::OpenAi, &body, &Profile::no_stream_options(StreamOptionsVendor::Azure));
    assert_eq!(
        refused(azure, "openai.azure_stream_options"),
        "Unrecognized request argument supplied: stream_options"
    );
    let mistral =
        check(Wire::OpenAi, &body, &Profile::no_stream_options(StreamOptionsVendor::Mistral)).unwrap_err();
    assert_eq!((mistral.status, mistral.message()), (422, "Extra inputs are not permitted"));
    assert_eq!(
        refused(check(Wire::OpenAi, &body, &Profile::string_content()), "openai.content_not_string"),
        "Invalid 'content': 'content' field must be a string or an array of objects."
    );
}

// ---------------------------------------------------------------------------------------------
// Prompt-cache emulation

/// Small thresholds so a few kilobytes of JSON make a cacheable prompt.
fn small_cache() -> CacheSettings {
    CacheSettings { min_cacheable_tokens: 100, lookback_blocks: 20, openai_min_tokens: 100, openai_step_tokens: 16 }
}

/// A growing Anthropic conversation: the system prompt, then `steps` tool round trips, with a
/// breakpoint on the system prompt and (if `rolling`) one on the last block.
fn conversation(steps: usize, rolling: bool) -> Value {
    let mut messages = vec![user("Read every file.")];
    for step in 0..steps {
        let id = format!("toolu_{step}");
        messages.push(json!({"role": "assistant", "content": [tool_use(&id)]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": format!("file {step}: {}", "x".repeat(400))}
        ]}));
    }
    if rolling {
        let last = messages.last_mut().unwrap();
        let blocks = last["content"].as_array_mut().unwrap();
        blocks.last_mut().unwrap()["cache_control"] = json!({"type": "ephemeral"});
    }
    json!({"model": "m", "max_tokens": 10, "tools": [tool("ls")],
           "system": [{"type": "text", "text": "You are terse. ".repeat(40), "cache_control": {"type": "ephemeral"}}],
           "messages": messages})
}

fn prompt_tokens(body: &Value) -> u64 {
    PromptCache::new(CacheSettings { min_cacheable_tokens: u64::MAX, ..small_cache() }).anthropic(body).total()
}

#[test]
fn anthropic_rolling_breakpoint_reads_the_previous_prefix() {
    let mut cache = PromptCache::new(small_cache());
    let first = cache.anthropic(&conversation(1, true));
    assert_eq!(first.read, 0);
    assert!(first.written > 0 && first.written == first.total() - first.uncached);
    for steps in 2..6 {
        let figures = cache.anthropic(&conversation(steps, true));
        // Everything up to the previous request's last block is read back; the new step is written.
        assert_eq!(figures.read, prompt_tokens(&conversation(steps - 1, false)), "step {steps}");
        assert_eq!(figures.uncached, 0, "step {steps}");
        assert_eq!(figures.total(), prompt_tokens(&conversation(steps, false)));
    }
}

#[test]
fn anthropic_caches_nothing_without_breakpoints() {
    let mut cache = PromptCache::new(small_cache());
    let mut body = conversation(3, false);
    body["system"][0].as_object_mut().unwrap().remove("cache_control");
    for _ in 0..3 {
        let figures = cache.anthropic(&body);
        assert_eq!(figures, CacheFigures { uncached: figures.total(), written: 0, read: 0 });
    }
}

#[test]
fn anthropic_system_breakpoint_alone_reads_only_the_system_prefix() {
    let mut cache = PromptCache::new(small_cache());
    cache.anthropic(&conversation(1, false));
    let figures = cache.anthropic(&conversation(4, false));
    let system_prefix =
        tokens_of(canonical(&tool("ls")).len()) + tokens_of(canonical(&conversation(0, false)["system"][0]).len());
    assert_eq!((figures.read, figures.written), (system_prefix, 0));
}

#[test]
fn anthropic_lookback_is_twenty_blocks() {
    let mut cache = PromptCache::new(small_cache());
    cache.anthropic(&conversation(1, true));
    // 12 more steps add 24 blocks: the old entry is out of the rolling breakpoint's reach, and
    // only the system breakpoint's entry is read.
    let figures = cache.anthropic(&conversation(13, true));
    let system_prefix = prompt_tokens(&json!({"tools": [tool("ls")], "system": conversation(0, false)["system"]}));
    assert_eq!(figures.read, system_prefix);
}

#[test]
fn anthropic_automatic_cache_control_marks_the_last_block() {
    let mut cache = PromptCache::new(small_cache());
    let automatic = |steps| {
        let mut body = conversation(steps, false);
        body["system"][0].as_object_mut().unwrap().remove("cache_control");
        body["cache_control"] = json!({"type": "ephemeral"});
        body
    };
    cache.anthropic(&automatic(2));
    assert_eq!(cache.anthropic(&automatic(3)).read, prompt_tokens(&conversation(2, false)));
}

#[test]
fn anthropic_short_prefixes_are_not_cached() {
    let mut cache = PromptCache::new(CacheSettings::default());
    for _ in 0..2 {
        let figures = cache.anthropic(&conversation(1, true));
        assert!(figures.total() < 1024);
        assert_eq!((figures.read, figures.written), (0, 0));
    }
}

fn openai_conversation(steps: usize, key: Option<&str>) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "You are terse. ".repeat(40)})];
    for step in 0..steps {
        messages.push(json!({"role": "user", "content": format!("question {step}: {}", "y".repeat(300))}));
    }
    let mut body = json!({"model": "gpt-4o", "tools": [openai_tool("ls")], "messages": messages});
    if let Some(key) = key {
        body["prompt_cache_key"] = json!(key);
    }
    body
}

#[test]
fn openai_prefix_cache_by_key() {
    let mut cache = PromptCache::new(small_cache());
    assert_eq!(cache.openai(&openai_conversation(2, Some("a"))).read, 0);
    let grown = cache.openai(&openai_conversation(3, Some("a")));
    assert!(grown.read > 0 && grown.read.is_multiple_of(16), "{grown:?}");
    assert!(grown.read <= prompt_tokens_openai(&openai_conversation(2, Some("a"))));
    assert_eq!(grown.written, 0);
    // Another key (or none) shares nothing with key "a".
    assert_eq!(cache.openai(&openai_conversation(3, Some("b"))).read, 0);
    assert_eq!(cache.openai(&openai_conversation(3, None)).read, 0);
    // Requests without a key share their own prefixes.
    assert!(cache.openai(&openai_conversation(4, None)).read > grown.read);
}

fn prompt_tokens_openai(body: &Value) -> u64 {
    PromptCache::new(small_cache()).openai(body).total()
}

#[test]
fn openai_caches_nothing_below_the_minimum() {
    let mut cache = PromptCache::new(CacheSettings::default());
    cache.openai(&openai_conversation(1, None));
    assert_eq!(cache.openai(&openai_conversation(2, None)).read, 0);
}

// ---------------------------------------------------------------------------------------------
// The mock server

async fn post(mock: &MockLlm, path: &str, body: &Value) -> (u16, String) {
    let response =
        reqwest::Client::new().post(format!("{}{path}", mock.base_url())).json(body).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn enforced_mock_refuses_without_consuming_the_script() {
    let mock = MockLlm::start().await;
    mock.enforce(Profile::first_party());
    mock.push(MockResponse::sse(mock_llm::anthropic::text(&["ok"])));
    let mut bad = tool_turn(vec![tool_use("toolu_1")], &["toolu_1"]);
    bad.as_object_mut().unwrap().remove("tools");
    let (status, text) = post(&mock, "/anthropic/v1/messages", &bad).await;
    assert_eq!(status, 400);
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        error["error"]["message"],
        "Requests which include `tool_use` or `tool_result` blocks must define tools."
    );
    let violations = mock.violations();
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].path, "/anthropic/v1/messages");
    assert_eq!(violations[0].violation.rule, "anthropic.tool_history_without_tools");
    // The scripted answer is still there for the valid request.
    let (status, text) =
        post(&mock, "/anthropic/v1/messages", &tool_turn(vec![tool_use("toolu_1")], &["toolu_1"])).await;
    assert_eq!(status, 200);
    assert!(text.contains("\"text\":\"ok\""), "{text}");
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(mock.violations().len(), 1);
}

#[tokio::test]
async fn unenforced_mock_answers_anything() {
    let mock = MockLlm::start().await;
    mock.push(MockResponse::sse(mock_llm::openai::text(&["ok"])));
    let (status, _) = post(&mock, "/v1/chat/completions", &openai_tool_loop(&[])).await;
    assert_eq!(status, 200);
    assert!(mock.violations().is_empty());
}

/// The usage figures the SSE stream carries: each `data:` JSON with a usage.
fn usages_in(stream: &str) -> Vec<Value> {
    stream
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| event.pointer("/message/usage").or_else(|| event.get("usage")).cloned())
        .filter(|usage| !usage.is_null())
        .collect()
}

#[tokio::test]
async fn emulated_cache_rewrites_anthropic_usage() {
    let mock = MockLlm::start().await;
    mock.emulate_cache(small_cache());
    mock.respond_with(|_| {
        MockResponse::sse(mock_llm::anthropic::text_with_usage(&["ok"], usage(12, 5).cache(7, 7)))
    });
    post(&mock, "/anthropic/v1/messages", &conversation(1, true)).await;
    let (_, stream) = post(&mock, "/anthropic/v1/messages", &conversation(2, true)).await;
    let log = mock.cache_log();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].wire, Wire::Anthropic);
    let figures = log[1].figures;
    assert_eq!(figures.read, prompt_tokens(&conversation(1, false)));
    let usages = usages_in(&stream);
    assert_eq!(usages.len(), 2, "message_start and message_delta: {stream}");
    for usage in usages {
        assert_eq!(usage["input_tokens"], figures.uncached);
        assert_eq!(usage["cache_creation_input_tokens"], figures.written);
        assert_eq!(usage["cache_read_input_tokens"], figures.read);
    }
    assert!(stream.contains("\"output_tokens\":5"), "output figures stay as scripted: {stream}");
}

#[tokio::test]
async fn emulated_cache_rewrites_openai_usage() {
    let mock = MockLlm::start().await;
    mock.emulate_cache(small_cache());
    mock.respond_with(|_| MockResponse::sse(mock_llm::openai::text_with_usage(&["ok"], usage(12, 5))));
    post(&mock, "/v1/chat/completions", &openai_conversation(2, None)).await;
    let (_, stream) = post(&mock, "/v1/chat/completions", &openai_conversation(3, None)).await;
    let figures = mock.cache_log()[1].figures;
    assert!(figures.read > 0);
    let usages = usages_in(&stream);
    assert_eq!(usages.len(), 1, "{stream}");
    assert_eq!(usages[0]["prompt_tokens"], figures.total());
    assert_eq!(usages[0]["prompt_tokens_details"]["cached_tokens"], figures.read);
    assert_eq!(usages[0]["total_tokens"], figures.total() + 5);
    assert!(stream.ends_with("data: [DONE]\n\n"));
}

// ---------------------------------------------------------------------------------------------
// The SSE builders for thinking and reasoning

#[test]
fn thinking_builders_sign_what_they_stream() {
    let events =
        mock_llm::anthropic::thinking_then_tool_calls("Let me look.", &[("toolu_1", "ls", json!({}))], usage(1, 1));
    let joined = events.concat();
    assert!(joined.contains(&format!("\"signature\":\"{}\"", thinking_signature("Let me look."))));
    assert!(joined.contains("\"type\":\"thinking_delta\""));
    let split = mock_llm::anthropic::thinking_block(0, &["Let me ", "look."]).concat();
    assert!(split.contains(&thinking_signature("Let me look.")));
    let redacted = mock_llm::anthropic::redacted_thinking_block(2, "opaque").concat();
    assert!(redacted.contains("\"type\":\"redacted_thinking\"") && redacted.contains("\"data\":\"opaque\""));
    let reasoning =
        mock_llm::openai::reasoning_then_tool_calls(&["Plan."], &[("call_1", "ls", json!({}))], usage(1, 1));
    let joined = reasoning.concat();
    assert!(joined.find("\"reasoning_content\":\"Plan.\"").unwrap() < joined.find("\"id\":\"call_1\"").unwrap());
}
