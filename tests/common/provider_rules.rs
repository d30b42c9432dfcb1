//! The rules real providers enforce on a request body, as pure functions over its JSON.
//!
//! The mock answers whatever a test scripts, so a request a real provider would refuse passed
//! the suite unnoticed (docs: `/work/shared/reviews/provider-review.md`, findings 1–12). These
//! checks are the providers' own validation, worded with their own error texts, so that a test
//! that switches them on ([`super::mock_llm::MockLlm::enforce`]) fails exactly where a user
//! would. Each check returns the first rule broken, the way the APIs stop at the first error.
//!
//! Texts marked *confirmed* are quoted from public reports of the real API answering; texts
//! marked *guessed* were not found and are written in the provider's style.

use std::collections::HashSet;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The two request formats the mock speaks, told apart by the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `POST …/v1/messages`
    Anthropic,
    /// `POST …/chat/completions`
    OpenAi,
}

impl Wire {
    /// The wire a request path belongs to; `None` for any other path (the rules leave it alone).
    pub fn of_path(path: &str) -> Option<Wire> {
        let path = path.split('?').next().unwrap_or(path);
        if path.ends_with("/v1/messages") {
            Some(Wire::Anthropic)
        } else if path.ends_with("/chat/completions") {
            Some(Wire::OpenAi)
        } else {
            None
        }
    }
}

/// A refused request: the HTTP status and error body the provider answers with, and which
/// rule it broke (a short stable name tests can match on).
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub status: u16,
    pub body: Value,
    pub rule: &'static str,
}

impl Violation {
    /// The human-readable error text, wherever the wire puts it.
    pub fn message(&self) -> &str {
        ["/error/message", "/message", "/message/detail/0/msg"]
            .iter()
            .find_map(|pointer| self.body.pointer(pointer).and_then(Value::as_str))
            .unwrap_or_default()
    }
}

/// How strict the emulated endpoint is. `Default` is the first-party API (api.anthropic.com,
/// api.openai.com); each field adds what a gateway or another vendor checks on top.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Profile {
    /// Anthropic models behind Bedrock: Bedrock's wording for tool history without tools.
    pub bedrock: bool,
    /// Bedrock-like strictness: consecutive messages of one role are refused.
    pub alternation: bool,
    /// A gateway that turns thinking on whatever the request says.
    pub injected_thinking: Option<ThinkingGateway>,
    /// An OpenAI-compatible reasoning model that wants its `reasoning_content` back.
    pub reasoning_passback: Option<ReasoningVendor>,
    /// An OpenAI-compatible server that refuses `stream_options`.
    pub no_stream_options: Option<StreamOptionsVendor>,
    /// Old LM Studio: an assistant message's `content` must be a string or an array.
    pub string_content: bool,
}

/// Who injects thinking into Anthropic requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingGateway {
    /// A gateway aliasing a model name to its thinking variant (first-party thinking rules).
    Alias,
    /// DeepSeek's Anthropic endpoint: also every assistant tool_use turn must carry its thinking.
    DeepSeek,
}

/// Which vendor's wording a missing `reasoning_content` gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningVendor {
    DeepSeek,
    Kimi,
}

/// Which server refuses `stream_options`, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamOptionsVendor {
    /// Azure OpenAI before API version 2024-09-01-preview.
    Azure,
    Mistral,
}

impl Profile {
    /// The first-party APIs.
    pub fn first_party() -> Self {
        Self::default()
    }

    /// Claude on Bedrock: its tool-config wording and strict role alternation.
    pub fn bedrock() -> Self {
        Self { bedrock: true, alternation: true, ..Self::default() }
    }

    pub fn thinking_gateway(gateway: ThinkingGateway) -> Self {
        Self { injected_thinking: Some(gateway), ..Self::default() }
    }

    pub fn reasoning_passback(vendor: ReasoningVendor) -> Self {
        Self { reasoning_passback: Some(vendor), ..Self::default() }
    }

    pub fn no_stream_options(vendor: StreamOptionsVendor) -> Self {
        Self { no_stream_options: Some(vendor), ..Self::default() }
    }

    pub fn string_content() -> Self {
        Self { string_content: true, ..Self::default() }
    }
}

/// The signature the mock issues for a thinking block with this exact text. Real signatures
/// are opaque and bound to the text; a digest gives the mock the same property, so a block
/// sent back edited, merged or with another block's signature is caught.
pub fn thinking_signature(thinking: &str) -> String {
    let digest = Sha256::digest(format!("deputy-mock-thinking\n{thinking}").as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Checks `body` against `wire`'s rules under `profile`.
pub fn check(wire: Wire, body: &Value, profile: &Profile) -> Result<(), Violation> {
    match wire {
        Wire::Anthropic => check_anthropic(body, profile),
        Wire::OpenAi => check_openai(body, profile),
    }
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages

/// The error body Anthropic answers a refused request with (always HTTP 400 here).
fn anthropic_error(rule: &'static str, message: String) -> Violation {
    Violation {
        status: 400,
        body: json!({"type": "error", "error": {"type": "invalid_request_error", "message": message},
                     "request_id": "req_mock_strict"}),
        rule,
    }
}

/// Confirmed: anthropics/claude-code#1213 and sigoden/llm-functions#222 (Vertex and first party).
const THINKING_FINAL_ASSISTANT_TAIL: &str = "When `thinking` is enabled, a final `assistant` message must start \
    with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you \
    include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our \
    documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking";

pub fn check_anthropic(body: &Value, profile: &Profile) -> Result<(), Violation> {
    let tools = as_slice(&body["tools"]);
    let messages = as_slice(&body["messages"]);
    anthropic_tool_names(tools)?;
    anthropic_tool_choice(&body["tool_choice"], tools)?;
    let thinking = thinking_is_on(body, profile);
    if thinking {
        thinking_parameters(body)?;
    }
    system_text(&body["system"])?;
    roles(messages, profile)?;
    message_content(messages)?;
    tool_history_needs_tools(messages, tools, profile)?;
    tool_pairing(messages)?;
    if thinking {
        final_assistant_starts_with_thinking(messages)?;
    }
    thinking_signatures(messages)?;
    if profile.injected_thinking == Some(ThinkingGateway::DeepSeek) {
        thinking_passed_back(messages)?;
    }
    cache_breakpoints(body)
}

fn as_slice(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// A message's content as blocks: a string content is one text block.
fn blocks(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks.clone(),
        _ => Vec::new(),
    }
}

fn block_type(block: &Value) -> &str {
    block["type"].as_str().unwrap_or_default()
}

fn role(message: &Value) -> &str {
    message["role"].as_str().unwrap_or_default()
}

/// Custom tools (no `type`, or `type: "custom"`) must have a name of the documented pattern.
/// The API has been reported with both `{1,64}` and `{1,128}`; 64 is the strict one.
fn anthropic_tool_names(tools: &[Value]) -> Result<(), Violation> {
    let mut seen = HashSet::new();
    for (index, tool) in tools.iter().enumerate() {
        let custom = matches!(tool["type"].as_str(), None | Some("custom"));
        let name = tool["name"].as_str().unwrap_or_default();
        if custom && !valid_tool_name(name, 64) {
            // Confirmed: apify/tester-mcp-client#11, inngest/agent-kit#108.
            return Err(anthropic_error(
                "anthropic.tool_name_pattern",
                format!("tools.{index}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"),
            ));
        }
        if !seen.insert(name) {
            // Confirmed: anthropics/claude-code#10687.
            return Err(anthropic_error("anthropic.tool_names_unique", "tools: Tool names must be unique.".into()));
        }
    }
    Ok(())
}

fn valid_tool_name(name: &str, max: usize) -> bool {
    (1..=max).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn anthropic_tool_choice(choice: &Value, tools: &[Value]) -> Result<(), Violation> {
    if choice.is_null() {
        return Ok(());
    }
    match choice["type"].as_str() {
        Some("none" | "auto" | "any") => Ok(()),
        Some("tool") => {
            let name = choice["name"].as_str().unwrap_or_default();
            if tools.iter().any(|tool| tool["name"] == name) {
                Ok(())
            } else {
                // Guessed wording.
                Err(anthropic_error(
                    "anthropic.tool_choice_unknown_tool",
                    format!("tool_choice.tool.name: Tool '{name}' not found in provided tools"),
                ))
            }
        }
        other => Err(anthropic_error(
            "anthropic.tool_choice_type",
            // Guessed wording (pydantic's tagged-union message).
            format!(
                "tool_choice: Input tag '{}' found using 'type' does not match any of the expected tags: \
                 'auto', 'any', 'tool', 'none'",
                other.unwrap_or_default()
            ),
        )),
    }
}

/// Thinking applies when the request turns it on, or when a gateway does it for the request.
fn thinking_is_on(body: &Value, profile: &Profile) -> bool {
    matches!(body["thinking"]["type"].as_str(), Some("enabled" | "adaptive")) || profile.injected_thinking.is_some()
}

fn thinking_parameters(body: &Value) -> Result<(), Violation> {
    if body["thinking"]["type"] == "enabled" {
        let budget = body["thinking"]["budget_tokens"].as_u64().unwrap_or(0);
        if budget < 1024 {
            // Confirmed: danny-avila/LibreChat#8346 (via Bedrock), tingly-dev/tingly-box#569.
            return Err(anthropic_error(
                "anthropic.thinking_budget_minimum",
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024".into(),
            ));
        }
        if body["max_tokens"].as_u64().unwrap_or(0) <= budget {
            // Confirmed: liuw1535/antigravity2api-nodejs#149.
            return Err(anthropic_error(
                "anthropic.thinking_budget_below_max_tokens",
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at \
                 https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
                    .into(),
            ));
        }
    }
    if matches!(body["tool_choice"]["type"].as_str(), Some("any" | "tool")) {
        // Confirmed: mastra-ai/mastra#7507, can1357/oh-my-pi#341.
        return Err(anthropic_error(
            "anthropic.thinking_forced_tool_choice",
            "Thinking may not be enabled when tool_choice forces tool use.".into(),
        ));
    }
    if let Some(temperature) = body["temperature"].as_f64()
        && temperature != 1.0
    {
        // Confirmed: MartialBE/one-hub#529.
        return Err(anthropic_error(
            "anthropic.thinking_temperature",
            "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at \
             https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking"
                .into(),
        ));
    }
    Ok(())
}

/// A `system` given as blocks follows the text-block rules. A `system` string has no known
/// rule and is left alone.
fn system_text(system: &Value) -> Result<(), Violation> {
    for block in as_slice(system) {
        if block_type(block) == "text" {
            // Guessed: the messages wording with the `system` prefix.
            text_block(block, "system")?;
        }
    }
    Ok(())
}

fn text_block(block: &Value, place: &str) -> Result<(), Violation> {
    let text = block["text"].as_str().unwrap_or_default();
    if text.is_empty() {
        // Confirmed for `messages`: anthropics/claude-code#59812.
        return Err(anthropic_error(
            "anthropic.text_empty",
            format!("{place}: text content blocks must be non-empty"),
        ));
    }
    if text.trim().is_empty() {
        // Confirmed for `messages`: anthropics/claude-code#23440.
        return Err(anthropic_error(
            "anthropic.text_whitespace",
            format!("{place}: text content blocks must contain non-whitespace text"),
        ));
    }
    Ok(())
}

fn roles(messages: &[Value], profile: &Profile) -> Result<(), Violation> {
    if let Some(first) = messages.first()
        && role(first) != "user"
    {
        // Reported by clients (e.g. the checks quoted in anthropic SDK wrappers); no API
        // response found to quote.
        return Err(anthropic_error(
            "anthropic.first_role",
            "messages: first message must use the \"user\" role".into(),
        ));
    }
    if profile.alternation && messages.windows(2).any(|pair| role(&pair[0]) == role(&pair[1])) {
        // Confirmed (Bedrock Converse): microsoft/semantic-kernel#10277.
        return Err(anthropic_error(
            "anthropic.alternation",
            "A conversation must alternate between user and assistant roles. Make sure the conversation \
             alternates between user and assistant roles and try again."
                .into(),
        ));
    }
    Ok(())
}

fn message_content(messages: &[Value]) -> Result<(), Violation> {
    for (index, message) in messages.iter().enumerate() {
        let final_assistant = index + 1 == messages.len() && role(message) == "assistant";
        let empty = match &message["content"] {
            Value::String(text) => text.is_empty(),
            Value::Array(blocks) => blocks.is_empty(),
            _ => true,
        };
        if empty {
            if final_assistant {
                continue;
            }
            // Confirmed: anthropics/claude-code#6774.
            return Err(anthropic_error(
                "anthropic.content_empty",
                format!(
                    "messages.{index}: all messages must have non-empty content except for the optional final \
                     assistant message"
                ),
            ));
        }
        // Only top-level text blocks: whether the API applies the rule inside tool_result
        // content is unknown, and a false refusal would be worse than a missed one here.
        for block in blocks(message).iter().filter(|block| block_type(block) == "text") {
            text_block(block, "messages")?;
        }
    }
    Ok(())
}

fn tool_history_needs_tools(messages: &[Value], tools: &[Value], profile: &Profile) -> Result<(), Violation> {
    let has_tool_blocks =
        messages.iter().flat_map(blocks).any(|block| matches!(block_type(&block), "tool_use" | "tool_result"));
    if !has_tool_blocks || !tools.is_empty() {
        return Ok(());
    }
    let message = if profile.bedrock {
        // Confirmed: langgenius/dify#16421, anomalyco/opencode#10259.
        "The toolConfig field must be defined when using toolUse and toolResult content blocks."
    } else {
        // Confirmed: BerriAI/litellm#4689.
        "Requests which include `tool_use` or `tool_result` blocks must define tools."
    };
    Err(anthropic_error("anthropic.tool_history_without_tools", message.into()))
}

fn tool_use_ids(message: &Value) -> Vec<String> {
    blocks(message)
        .iter()
        .filter(|block| block_type(block) == "tool_use")
        .filter_map(|block| block["id"].as_str().map(str::to_owned))
        .collect()
}

/// Every `tool_use` is answered in the very next message, whose content starts with the
/// results; every `tool_result` answers a `tool_use` of the message just before it.
fn tool_pairing(messages: &[Value]) -> Result<(), Violation> {
    for (index, message) in messages.iter().enumerate() {
        if role(message) == "user" {
            let asked = if index > 0 && role(&messages[index - 1]) == "assistant" {
                tool_use_ids(&messages[index - 1])
            } else {
                Vec::new()
            };
            for (position, block) in blocks(message).iter().enumerate() {
                let id = block["tool_use_id"].as_str().unwrap_or_default();
                if block_type(block) == "tool_result" && !asked.iter().any(|asked| asked == id) {
                    // Confirmed: anthropics/claude-code#13460, router-for-me/CLIProxyAPI#497.
                    return Err(anthropic_error(
                        "anthropic.tool_result_unexpected",
                        format!(
                            "messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` \
                             blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in \
                             the previous message."
                        ),
                    ));
                }
            }
            continue;
        }
        let asked = tool_use_ids(message);
        if asked.is_empty() {
            continue;
        }
        let next = messages.get(index + 1).filter(|next| role(next) == "user");
        let next_blocks = next.map(blocks).unwrap_or_default();
        let answered: Vec<&str> = next_blocks
            .iter()
            .filter(|block| block_type(block) == "tool_result")
            .filter_map(|block| block["tool_use_id"].as_str())
            .collect();
        let missing: Vec<&str> = asked.iter().map(String::as_str).filter(|id| !answered.contains(id)).collect();
        if !missing.is_empty() {
            // Confirmed: anthropics/claude-code#5989, Kilo-Org/kilocode#5163. The index is the
            // assistant message's (the reports do not settle which one the API names).
            return Err(anthropic_error(
                "anthropic.tool_use_unanswered",
                format!(
                    "messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: \
                     {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    missing.join(", ")
                ),
            ));
        }
        let leading = next_blocks.iter().take_while(|block| block_type(block) == "tool_result").count();
        if leading < asked.len() {
            // Confirmed: anthropics/anthropic-sdk-typescript#653 (text), Bedrock reports with
            // the `messages.N` prefix of the user message.
            return Err(anthropic_error(
                "anthropic.tool_results_first",
                format!(
                    "messages.{}: Did not find {} `tool_result` block(s) at the beginning of this message. \
                     Messages following `tool_use` blocks must begin with a matching number of `tool_result` \
                     blocks.",
                    index + 1,
                    asked.len()
                ),
            ));
        }
    }
    Ok(())
}

/// In a tool loop (the last user message starts with tool results) the assistant message that
/// asked for them must start with its thinking.
fn final_assistant_starts_with_thinking(messages: &[Value]) -> Result<(), Violation> {
    let [.., assistant, last] = messages else {
        return Ok(());
    };
    let in_tool_loop = role(last) == "user" && blocks(last).first().is_some_and(|b| block_type(b) == "tool_result");
    if !in_tool_loop || role(assistant) != "assistant" {
        return Ok(());
    }
    let first = blocks(assistant).first().map(|block| block_type(block).to_owned()).unwrap_or_default();
    if first == "thinking" || first == "redacted_thinking" {
        return Ok(());
    }
    let index = messages.len() - 2;
    Err(anthropic_error(
        "anthropic.thinking_final_assistant",
        format!(
            "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. \
             {THINKING_FINAL_ASSISTANT_TAIL}"
        ),
    ))
}

/// A thinking block sent back must be exactly as issued: its text with the mock's signature.
fn thinking_signatures(messages: &[Value]) -> Result<(), Violation> {
    for (index, message) in messages.iter().enumerate().filter(|(_, m)| role(m) == "assistant") {
        for (position, block) in blocks(message).iter().enumerate() {
            if block_type(block) != "thinking" {
                continue;
            }
            let Some(signature) = block["signature"].as_str() else {
                // Guessed wording (pydantic's missing-field message).
                return Err(anthropic_error(
                    "anthropic.thinking_signature_missing",
                    format!("messages.{index}.content.{position}.thinking.signature: Field required"),
                ));
            };
            if signature != thinking_signature(block["thinking"].as_str().unwrap_or_default()) {
                // Confirmed: ding113/claude-code-hub#518, lbjlaq/Antigravity-Manager#498.
                return Err(anthropic_error(
                    "anthropic.thinking_signature",
                    format!("messages.{index}.content.{position}: Invalid `signature` in `thinking` block"),
                ));
            }
        }
    }
    Ok(())
}

/// DeepSeek's Anthropic endpoint: every assistant turn that used a tool carries its thinking.
fn thinking_passed_back(messages: &[Value]) -> Result<(), Violation> {
    let bare_tool_turn = messages.iter().filter(|m| role(m) == "assistant").any(|message| {
        let blocks = blocks(message);
        blocks.iter().any(|b| block_type(b) == "tool_use")
            && !blocks.iter().any(|b| matches!(block_type(b), "thinking" | "redacted_thinking"))
    });
    if bare_tool_turn {
        // Confirmed: decolua/9router#2397, leookun/cursor-byok#268.
        return Err(anthropic_error(
            "anthropic.deepseek_thinking_passback",
            "The `content[].thinking` in the thinking mode must be passed back to the API.".into(),
        ));
    }
    Ok(())
}

/// Every block carrying `cache_control`, with its path, in the order the API processes them:
/// tools, system, messages.
pub fn cache_controlled_blocks(body: &Value) -> Vec<(String, &Value)> {
    let mut found = Vec::new();
    for (index, tool) in as_slice(&body["tools"]).iter().enumerate() {
        found.push((format!("tools.{index}"), tool));
    }
    for (index, block) in as_slice(&body["system"]).iter().enumerate() {
        found.push((format!("system.{index}"), block));
    }
    for (index, message) in as_slice(&body["messages"]).iter().enumerate() {
        for (position, block) in as_slice(&message["content"]).iter().enumerate() {
            found.push((format!("messages.{index}.content.{position}"), block));
        }
    }
    found.retain(|(_, block)| !block["cache_control"].is_null());
    found
}

fn cache_breakpoints(body: &Value) -> Result<(), Violation> {
    let marked = cache_controlled_blocks(body);
    // The top-level (automatic) `cache_control` takes a breakpoint slot too.
    let count = marked.len() + usize::from(!body["cache_control"].is_null());
    if count > 4 {
        // Confirmed: tghamm/Anthropic.SDK#50, Wei-Shaw/sub2api#176.
        return Err(anthropic_error(
            "anthropic.cache_control_count",
            format!("A maximum of 4 blocks with cache_control may be provided. Found {count}."),
        ));
    }
    let mut five_minutes_seen = false;
    for (path, block) in marked {
        match block["cache_control"]["ttl"].as_str() {
            None | Some("5m") => five_minutes_seen = true,
            Some("1h") if five_minutes_seen => {
                // Confirmed: cnighswonger/claude-code-cache-fix#44.
                return Err(anthropic_error(
                    "anthropic.cache_control_ttl_order",
                    format!(
                        "{path}.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' \
                         cache_control block. Note that blocks are processed in the following order: `tools`, \
                         `system`, `messages`."
                    ),
                ));
            }
            Some("1h") => {}
            Some(_) => {
                // Guessed wording (pydantic's literal message).
                return Err(anthropic_error(
                    "anthropic.cache_control_ttl",
                    format!("{path}.cache_control.ttl: Input should be '5m' or '1h'"),
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions

fn openai_error(rule: &'static str, message: String, param: Option<String>, code: Option<&str>) -> Violation {
    Violation {
        status: 400,
        body: json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}),
        rule,
    }
}

pub fn check_openai(body: &Value, profile: &Profile) -> Result<(), Violation> {
    let tools = as_slice(&body["tools"]);
    let messages = as_slice(&body["messages"]);
    stream_options(body, profile)?;
    reasoning_model_parameters(body)?;
    openai_tool_names(tools)?;
    openai_tool_choice(&body["tool_choice"], tools)?;
    assistant_content(messages, profile)?;
    openai_tool_pairing(messages)?;
    reasoning_passed_back(messages, profile)
}

/// o-series and gpt-5 models, whatever host serves them (Azure deployments included).
pub fn is_reasoning_model(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|prefix| name.starts_with(prefix))
}

fn reasoning_model_parameters(body: &Value) -> Result<(), Violation> {
    if !is_reasoning_model(body["model"].as_str().unwrap_or_default()) {
        return Ok(());
    }
    if body.get("max_tokens").is_some_and(|v| !v.is_null()) {
        // Confirmed: lobehub/lobehub#5909, anomalyco/opencode#37964.
        return Err(openai_error(
            "openai.max_tokens_on_reasoning_model",
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' \
             instead."
                .into(),
            Some("max_tokens".into()),
            Some("unsupported_parameter"),
        ));
    }
    if let Some(temperature) = body.get("temperature").filter(|v| !v.is_null())
        && temperature.as_f64() != Some(1.0)
    {
        // Confirmed: gabrii/Cursor-Azure-GPT-5#33, OpenHands/OpenHands#4131.
        return Err(openai_error(
            "openai.temperature_on_reasoning_model",
            format!(
                "Unsupported value: 'temperature' does not support {temperature} with this model. Only the \
                 default (1) value is supported."
            ),
            Some("temperature".into()),
            Some("unsupported_value"),
        ));
    }
    if let Some(effort) = body.get("reasoning_effort").filter(|v| !v.is_null()) {
        let effort = effort.as_str().unwrap_or_default();
        if !["minimal", "low", "medium", "high"].contains(&effort) {
            // Confirmed (as relayed by an OpenAI-compatible host): Kilo-Org/cloud#3807.
            return Err(openai_error(
                "openai.reasoning_effort",
                format!(
                    "Unsupported value: 'reasoning_effort' does not support '{effort}' with this model. Supported \
                     values are: 'minimal', 'low', 'medium', and 'high'."
                ),
                Some("reasoning_effort".into()),
                Some("unsupported_value"),
            ));
        }
    }
    Ok(())
}

fn openai_tool_names(tools: &[Value]) -> Result<(), Violation> {
    let mut seen = HashSet::new();
    for (index, tool) in tools.iter().enumerate() {
        let name = tool["function"]["name"].as_str().unwrap_or_default();
        let param = format!("tools[{index}].function.name");
        if name.chars().count() > 64 {
            // Confirmed text: mastra-ai/mastra#6302. The code is guessed.
            return Err(openai_error(
                "openai.tool_name_length",
                format!(
                    "Invalid '{param}': string too long. Expected a string with maximum length 64, but got a \
                     string with length {} instead.",
                    name.chars().count()
                ),
                Some(param),
                Some("string_above_max_length"),
            ));
        }
        if !valid_tool_name(name, 64) {
            // Confirmed: brekkylab/ailoy#109.
            return Err(openai_error(
                "openai.tool_name_pattern",
                format!(
                    "Invalid '{param}': string does not match pattern. Expected a string that matches the \
                     pattern '^[a-zA-Z0-9_-]+$'."
                ),
                Some(param),
                Some("invalid_value"),
            ));
        }
        if !seen.insert(name) {
            // Guessed wording: duplicates make the call ambiguous; no public report of OpenAI's text.
            return Err(openai_error(
                "openai.tool_names_unique",
                format!("Invalid 'tools': function names must be unique, but '{name}' appears more than once."),
                Some("tools".into()),
                Some("invalid_value"),
            ));
        }
    }
    Ok(())
}

fn openai_tool_choice(choice: &Value, tools: &[Value]) -> Result<(), Violation> {
    if choice.is_null() {
        return Ok(());
    }
    if tools.is_empty() {
        // Confirmed text: quoted in several clients' guards (e.g. alexrudall/ruby-openai).
        return Err(openai_error(
            "openai.tool_choice_without_tools",
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.".into(),
            Some("tool_choice".into()),
            None,
        ));
    }
    let valid = match choice {
        Value::String(mode) => matches!(mode.as_str(), "none" | "auto" | "required"),
        Value::Object(_) => {
            choice["type"] == "function"
                && tools.iter().any(|tool| tool["function"]["name"] == choice["function"]["name"])
        }
        _ => false,
    };
    if valid {
        return Ok(());
    }
    // Guessed wording.
    Err(openai_error(
        "openai.tool_choice_value",
        format!(
            "Invalid value for 'tool_choice': {choice} is not 'none', 'auto', 'required' or a declared function."
        ),
        Some("tool_choice".into()),
        Some("invalid_value"),
    ))
}

fn assistant_content(messages: &[Value], profile: &Profile) -> Result<(), Violation> {
    if !profile.string_content {
        return Ok(());
    }
    for (index, message) in messages.iter().enumerate() {
        if role(message) == "assistant" && !matches!(message["content"], Value::String(_) | Value::Array(_)) {
            // Confirmed: lmstudio-ai/lmstudio-bug-tracker#261 (LM Studio's body shape may differ).
            return Err(openai_error(
                "openai.content_not_string",
                "Invalid 'content': 'content' field must be a string or an array of objects.".into(),
                Some(format!("messages.[{index}].content")),
                None,
            ));
        }
    }
    Ok(())
}

/// Each assistant message with `tool_calls` is followed by one `tool` message per call; each
/// `tool` message answers a call of the assistant message its run of tool messages follows.
fn openai_tool_pairing(messages: &[Value]) -> Result<(), Violation> {
    let mut open: Option<Vec<&str>> = None;
    for (index, message) in messages.iter().enumerate() {
        match role(message) {
            "tool" => {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                let Some(calls) = &open else {
                    // Confirmed: smarter-sh/smarter#264, miurla/morphic#136.
                    return Err(openai_error(
                        "openai.tool_without_call",
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message \
                         with 'tool_calls'."
                            .into(),
                        Some(format!("messages.[{index}].role")),
                        None,
                    ));
                };
                if !calls.contains(&id) {
                    // Guessed wording.
                    return Err(openai_error(
                        "openai.tool_call_id_unknown",
                        format!(
                            "Invalid parameter: 'tool_call_id' of '{id}' not found in 'tool_calls' of previous message."
                        ),
                        Some(format!("messages.[{index}].tool_call_id")),
                        None,
                    ));
                }
            }
            "assistant" => {
                let calls: Vec<&str> =
                    as_slice(&message["tool_calls"]).iter().filter_map(|call| call["id"].as_str()).collect();
                let answered: Vec<&str> = messages[index + 1..]
                    .iter()
                    .take_while(|next| role(next) == "tool")
                    .filter_map(|next| next["tool_call_id"].as_str())
                    .collect();
                let missing: Vec<&str> = calls.iter().copied().filter(|id| !answered.contains(id)).collect();
                if !missing.is_empty() {
                    // Confirmed: router-for-me/CLIProxyAPI#2798.
                    return Err(openai_error(
                        "openai.tool_calls_unanswered",
                        format!(
                            "An assistant message with 'tool_calls' must be followed by tool messages responding \
                             to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                            missing.join(", ")
                        ),
                        Some(format!("messages.[{index}].role")),
                        None,
                    ));
                }
                open = (!calls.is_empty()).then_some(calls);
            }
            _ => open = None,
        }
    }
    Ok(())
}

fn reasoning_passed_back(messages: &[Value], profile: &Profile) -> Result<(), Violation> {
    let Some(vendor) = profile.reasoning_passback else {
        return Ok(());
    };
    let bare = messages.iter().position(|message| {
        role(message) == "assistant"
            && !as_slice(&message["tool_calls"]).is_empty()
            && !message["reasoning_content"].is_string()
    });
    let Some(index) = bare else {
        return Ok(());
    };
    Err(match vendor {
        // Confirmed: endolith/open-interpreter#215 (the body as relayed by OpenRouter).
        ReasoningVendor::DeepSeek => openai_error(
            "openai.deepseek_reasoning_passback",
            "The `reasoning_content` in the thinking mode must be passed back to the API.".into(),
            None,
            Some("invalid_request_error"),
        ),
        // Confirmed: VicBilibily/GCMP#162 (Moonshot's body shape).
        ReasoningVendor::Kimi => Violation {
            status: 400,
            body: json!({"error": {"type": "invalid_request_error", "message": format!(
                "thinking is enabled but reasoning_content is missing in assistant tool call message at index {index}"
            )}, "type": "error"}),
            rule: "openai.kimi_reasoning_passback",
        },
    })
}

fn stream_options(body: &Value, profile: &Profile) -> Result<(), Violation> {
    let Some(vendor) = profile.no_stream_options else {
        return Ok(());
    };
    let Some(options) = body.get("stream_options").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    Err(match vendor {
        // Confirmed: langchain-ai/langchain#23552.
        StreamOptionsVendor::Azure => openai_error(
            "openai.azure_stream_options",
            "Unrecognized request argument supplied: stream_options".into(),
            None,
            None,
        ),
        // The shape of Mistral's 422 for an unknown field: mistralai/platform-docs-public#7
        // (reported for `frequency_penalty`; the same validator answers for `stream_options`).
        StreamOptionsVendor::Mistral => Violation {
            status: 422,
            body: json!({"object": "error", "message": {"detail": [{"type": "extra_forbidden",
                "loc": ["body", "stream_options"], "msg": "Extra inputs are not permitted", "input": options}]},
                "type": "invalid_request_error", "param": null, "code": null}),
            rule: "openai.mistral_stream_options",
        },
    })
}
