//! Issue 24 through the built binary: the scenarios the provider review found rejected
//! (`/work/shared/reviews/provider-review.md`, findings 1–11, and the ones it checked and
//! accepted), each run with the strict contract mock on ([`MockLlm::enforce`]). Every test
//! asserts that the turn succeeds, that no request broke a provider's rule
//! ([`MockLlm::violations`] is empty), and the property the finding was about.
//!
//! A scenario that applies to both wires is one `async fn` over [`Wire`]; `on_both_wires!` at
//! the end makes it a test per wire (`provider_wire::wire_anthropic::<scenario>` and
//! `provider_wire::wire_openai::<scenario>`). The Anthropic wire runs under the Bedrock profile,
//! which has every first-party rule plus strict role alternation; the OpenAI wire under
//! the first-party one. Scenarios of one wire (thinking gateways, `reasoning_content`,
//! reasoning models' token field, `stream_options`) and the config switches come after.

use std::time::{Duration, Instant};

use deputy::llm::FINAL_ANSWER_TOOL;
use deputy::llm::conform::STUB_DESCRIPTION;
use deputy::llm::tool_names::MAX_LEN;
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use serde_json::{Value, json};

use crate::common::deputy::TestDeputy;
use crate::common::mcp_servers::{marker, processes_with};
use crate::common::mock_llm::{MockLlm, MockResponse, RecordedRequest, anthropic, openai, usage};
#[cfg(feature = "session-compaction")]
use crate::common::prompt_cache::without_cache_control;
use crate::common::provider_rules::{
    Profile, ReasoningVendor, StreamOptionsVendor, ThinkingGateway, cache_controlled_blocks, thinking_signature,
};
use crate::common::{file_in, id_of};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Anthropic,
    OpenAi,
}

impl Wire {
    fn model(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic:claude-test",
            Self::OpenAi => "openai:gpt-4o",
        }
    }

    /// The strictest profile of the wire's plain rules.
    fn profile(self) -> Profile {
        match self {
            Self::Anthropic => Profile::bedrock(),
            Self::OpenAi => Profile::first_party(),
        }
    }

    fn text(self, answer: &str) -> MockResponse {
        MockResponse::sse(match self {
            Self::Anthropic => anthropic::text(&[answer]),
            Self::OpenAi => openai::text(&[answer]),
        })
    }

    #[cfg(feature = "session-compaction")]
    /// A text answer whose call the provider reports as `input` prompt tokens.
    fn text_after_input(self, answer: &str, input: u64) -> MockResponse {
        MockResponse::sse(match self {
            Self::Anthropic => anthropic::text_with_usage(&[answer], usage(input, 5)),
            Self::OpenAi => openai::text_with_usage(&[answer], usage(input, 5)),
        })
    }

    #[cfg(feature = "session-compaction")]
    /// Tool calls whose call the provider reports as `input` prompt tokens.
    fn tool_calls_after_input(self, calls: &[(&str, &str, Value)], input: u64) -> MockResponse {
        MockResponse::sse(match self {
            Self::Anthropic => anthropic::tool_calls_with_usage(None, calls, usage(input, 5)),
            Self::OpenAi => openai::tool_calls_with_usage(None, calls, usage(input, 5)),
        })
    }

    fn tool_calls(self, text: Option<&str>, calls: &[(&str, &str, Value)]) -> MockResponse {
        MockResponse::sse(match self {
            Self::Anthropic => anthropic::tool_calls(text, calls),
            Self::OpenAi => openai::tool_calls(text, calls),
        })
    }

    /// A structured answer `value` the way this wire gives it (`id`: the answer tool's call).
    fn structured_answer(self, id: &str, value: &Value) -> MockResponse {
        match self {
            Self::Anthropic => self.tool_calls(None, &[(id, FINAL_ANSWER_TOOL, value.clone())]),
            Self::OpenAi => self.text(&value.to_string()),
        }
    }

    #[cfg(feature = "session-compaction")]
    /// The provider's answer to a prompt longer than the window.
    fn prompt_too_long(self) -> MockResponse {
        match self {
            Self::Anthropic => MockResponse::json(
                400,
                anthropic::error_body(
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens > 200000 maximum",
                ),
            ),
            Self::OpenAi => MockResponse::json(
                400,
                openai::error_body(
                    "invalid_request_error",
                    Some("context_length_exceeded"),
                    "This model's maximum context length is 128000 tokens. However, your messages resulted in \
                     210000 tokens. Please reduce the length of the messages.",
                ),
            ),
        }
    }

    /// The tools a request declares: name and description.
    fn declared(self, body: &Value) -> Vec<(String, String)> {
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        tools
            .iter()
            .map(|tool| {
                let tool = match self {
                    Self::Anthropic => tool,
                    Self::OpenAi => &tool["function"],
                };
                (tool["name"].as_str().unwrap().to_owned(), tool["description"].as_str().unwrap().to_owned())
            })
            .collect()
    }

    fn declared_names(self, body: &Value) -> Vec<String> {
        self.declared(body).into_iter().map(|(name, _)| name).collect()
    }

    #[cfg(feature = "session-compaction")]
    /// Whether the request forbids tool use.
    fn forbids_tools(self, body: &Value) -> bool {
        match self {
            Self::Anthropic => body["tool_choice"] == json!({"type": "none"}),
            Self::OpenAi => body["tool_choice"] == "none",
        }
    }

    /// Every tool call of the history: `(id, name)`.
    fn calls(self, body: &Value) -> Vec<(String, String)> {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let assistant = messages.iter().filter(|message| message["role"] == "assistant");
        match self {
            Self::Anthropic => assistant
                .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
                .filter(|block| block["type"] == "tool_use")
                .map(|block| (block["id"].as_str().unwrap().to_owned(), block["name"].as_str().unwrap().to_owned()))
                .collect(),
            Self::OpenAi => assistant
                .flat_map(|message| message["tool_calls"].as_array().cloned().unwrap_or_default())
                .map(|call| {
                    (call["id"].as_str().unwrap().to_owned(), call["function"]["name"].as_str().unwrap().to_owned())
                })
                .collect(),
        }
    }

    /// Every tool result of the history: `(id, content)`.
    fn results(self, body: &Value) -> Vec<(String, String)> {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        match self {
            Self::Anthropic => messages
                .iter()
                .filter(|message| message["role"] == "user")
                .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
                .filter(|block| block["type"] == "tool_result")
                .map(|block| {
                    (
                        block["tool_use_id"].as_str().unwrap().to_owned(),
                        block["content"].as_str().unwrap().to_owned(),
                    )
                })
                .collect(),
            Self::OpenAi => messages
                .iter()
                .filter(|message| message["role"] == "tool")
                .map(|message| {
                    (
                        message["tool_call_id"].as_str().unwrap().to_owned(),
                        message["content"].as_str().unwrap().to_owned(),
                    )
                })
                .collect(),
        }
    }
}

/// A deputy whose mock enforces `wire`'s rules.
async fn start(wire: Wire) -> TestDeputy {
    let deputy = TestDeputy::start().await;
    deputy.mock.enforce(wire.profile());
    deputy
}

/// A deputy whose config file is `config` of the mock's base URL (for `[providers.NAME]`
/// sections pointing at the mock).
async fn start_with_providers(config: impl FnOnce(&str) -> String) -> TestDeputy {
    let mock = MockLlm::start().await;
    let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::create_dir_all(home.path().join("deputy")).unwrap();
    std::fs::write(home.path().join("deputy").join("config.toml"), config(&mock.base_url())).unwrap();
    TestDeputy::respawn_on(mock, workspace, home).await
}

/// No request was refused; the rules broken otherwise, with the providers' texts.
#[track_caller]
fn assert_clean(deputy: &TestDeputy) {
    let violations: Vec<String> = deputy
        .mock
        .violations()
        .iter()
        .map(|v| format!("{} {}: {}", v.path, v.violation.rule, v.violation.message()))
        .collect();
    assert!(violations.is_empty(), "requests refused by the providers' rules: {violations:#?}");
}

fn requests(deputy: &TestDeputy) -> Vec<RecordedRequest> {
    deputy.mock.requests()
}

/// The text of a completed turn.
#[track_caller]
fn completed(answer: &Value) -> &str {
    assert_eq!(answer["status"], "completed", "{answer}");
    answer["text"].as_str().unwrap_or_else(|| panic!("no text: {answer}"))
}

/// A file the model reads in the tool loops below.
fn notes(deputy: &TestDeputy) {
    file_in(deputy.workspace.path(), "notes.txt", "the launch moved to Friday\n");
}

fn read_notes(id: &str) -> (&str, &'static str, Value) {
    (id, "read_file", json!({"path": "notes.txt"}))
}

#[cfg(any(feature = "session-store", feature = "session-compaction"))]
/// Creates a session on `wire` with `extra` fields whose first turn reads `notes.txt` and
/// answers; returns its id.
async fn session_that_used_a_tool(deputy: &TestDeputy, wire: Wire, extra: Value) -> String {
    notes(deputy);
    deputy.mock.push(wire.tool_calls(None, &[read_notes("toolu_1")]));
    deputy.mock.push(wire.text("The launch is on Friday."));
    let mut create = json!({"prompt": "When is the launch? Read notes.txt.", "model": wire.model(),
                            "builtins": ["read_file", "list_dir"]});
    create.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let created = deputy.ok("session_create", create).await;
    assert_eq!(completed(&created), "The launch is on Friday.");
    id_of(&created)
}

// ---------------------------------------------------------------------------------------------
// Finding 1: compaction after tool use

/// The summary request is the session's own: its tools declared, their use forbidden.
#[track_caller]
#[cfg(feature = "session-compaction")]
fn assert_summary_request(wire: Wire, summary: &RecordedRequest, turn: &RecordedRequest) {
    let body = &summary.body;
    assert!(summary.last_message().contains("CONTEXT CHECKPOINT"), "not the summary call: {body}");
    assert!(wire.forbids_tools(body), "{wire:?}: tool_choice {}", body["tool_choice"]);
    assert_eq!(
        without_cache_control(&body["tools"]),
        without_cache_control(&turn.body["tools"]),
        "{wire:?}: the summary declares the session's tools"
    );
    assert!(wire.calls(body).iter().any(|(_, name)| name == "read_file"), "the tool history is summarized: {body}");
}

/// `session_compact` of a session that used a tool (finding 1, manual trigger); the session
/// then takes another turn.
#[cfg(feature = "session-compaction")]
async fn manual_compaction_after_tool_use(wire: Wire) {
    let deputy = start(wire).await;
    let id = session_that_used_a_tool(&deputy, wire, json!({})).await;
    deputy.mock.push(wire.text("Goal: the launch date. Found: Friday."));
    let compacted = deputy.ok("session_compact", json!({"session_id": id})).await;
    assert_eq!((compacted["compacted"].as_bool(), compacted["summarized"].as_bool()), (Some(true), Some(true)));
    let all = requests(&deputy);
    assert_summary_request(wire, &all[2], &all[1]);

    deputy.mock.push(wire.text("Still Friday."));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Still?"})).await;
    assert_eq!(completed(&next), "Still Friday.");
    assert_clean(&deputy);
}

/// The threshold trigger, before the second turn's model call (finding 1, `turn.rs:411`).
#[cfg(feature = "session-compaction")]
async fn threshold_compaction_after_tool_use(wire: Wire) {
    let deputy = start(wire).await;
    // The provider reports a prompt over the threshold; the first prompt alone is over it too,
    // so pruning the tool result cannot get under it.
    let long = format!("When is the launch? Read notes.txt. {}", "Some background on the launch. ".repeat(80));
    notes(&deputy);
    deputy.mock.push(wire.tool_calls(None, &[read_notes("toolu_1")]));
    deputy.mock.push(wire.text_after_input("The launch is on Friday.", 5_000));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": long, "model": wire.model(), "builtins": ["read_file", "list_dir"],
                   "context": {"threshold_tokens": 300}}),
        )
        .await;
    assert_eq!(completed(&created), "The launch is on Friday.");
    let id = id_of(&created);
    deputy.mock.push(wire.text("Goal: the launch date. Found: Friday."));
    deputy.mock.push(wire.text("Friday, still."));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Still?"})).await;
    assert_eq!(completed(&next), "Friday, still.");
    let all = requests(&deputy);
    assert_eq!(all.len(), 4, "tool call, answer, summary, answer");
    assert_summary_request(wire, &all[2], &all[1]);
    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["context"]["compactions"], 1, "{read}");
    assert_clean(&deputy);
}

/// The overflow trigger: the provider says the prompt is too long, deputy compacts and sends
/// the call again (finding 1, `turn.rs:423`).
#[cfg(feature = "session-compaction")]
async fn overflow_compaction_after_tool_use(wire: Wire) {
    let deputy = start(wire).await;
    let id = session_that_used_a_tool(&deputy, wire, json!({})).await;
    deputy.mock.push(wire.prompt_too_long());
    deputy.mock.push(wire.text("Goal: the launch date. Found: Friday."));
    deputy.mock.push(wire.text("Friday, still."));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Still?"})).await;
    assert_eq!(completed(&next), "Friday, still.");
    let all = requests(&deputy);
    assert_eq!(all.len(), 5, "tool call, answer, too long, summary, answer");
    assert_summary_request(wire, &all[3], &all[2]);
    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["context"]["compactions"], 1, "{read}");
    assert_clean(&deputy);
}

/// Pruning alone gets the history under the threshold, in the middle of a turn, after a call
/// that settled the old result's turn: the call after the pruning sends the placeholder, not
/// the output the wire wrote and kept for the earlier call (`llm::encoded_history`: a rewritten
/// history lets go of what was kept).
#[cfg(feature = "session-compaction")]
async fn pruning_mid_turn_after_tool_use(wire: Wire) {
    use deputy::agent::compaction::PLACEHOLDER_PREFIX;

    let deputy = start(wire).await;
    file_in(deputy.workspace.path(), "big.txt", &"word ".repeat(1200));
    let read_big = |id| (id, "read_file", json!({"path": "big.txt"}));
    deputy.mock.push(wire.tool_calls(None, &[read_big("toolu_1")]));
    deputy.mock.push(wire.text("Read it."));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "Read big.txt.", "model": wire.model(), "builtins": ["read_file"],
                   "context": {"context_window": 20_000, "threshold_tokens": 2_600}}),
        )
        .await;
    assert_eq!(completed(&created), "Read it.");
    // The second turn's first call settles the first turn, result and all (the provider counts
    // its prompt at about what deputy estimates); its second call comes after a second result
    // has pushed the history over the threshold.
    deputy.mock.push(wire.tool_calls_after_input(&[read_big("toolu_2")], 1_600));
    deputy.mock.push(wire.text("Read it again."));
    let id = id_of(&created);
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Read it again."})).await;
    assert_eq!(completed(&next), "Read it again.");

    let all = requests(&deputy);
    assert_eq!(all.len(), 4, "pruning was enough: no summary call");
    let before = wire.results(&all[2].body);
    assert!(before[0].1.starts_with("word"), "the first result, whole before the pruning: {before:?}");
    let after = wire.results(&all[3].body);
    assert_eq!(after.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["toolu_1", "toolu_2"]);
    assert!(after[0].1.starts_with(PLACEHOLDER_PREFIX), "the old result is sent pruned: {:?}", after[0].1);
    assert!(after[1].1.starts_with("word"), "the recent result stays");
    assert_clean(&deputy);
}

// ---------------------------------------------------------------------------------------------
// Findings 2 and 3: tool history in a tool-less session

fn verdict_schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["label"],
           "properties": {"label": {"type": "string", "enum": ["bug", "feature"]}}})
}

/// A plain turn after a structured-output turn in a session without tools (finding 2): on
/// Anthropic the answer tool the history calls is declared as a stub.
async fn plain_turn_after_a_structured_turn_without_tools(wire: Wire) {
    let deputy = start(wire).await;
    deputy.mock.push(wire.text("Hello."));
    let created = deputy.ok("session_create", json!({"prompt": "Hi", "model": wire.model(), "builtins": []})).await;
    assert_eq!(completed(&created), "Hello.");
    let id = id_of(&created);
    deputy.mock.push(wire.structured_answer("toolu_final", &json!({"label": "bug"})));
    let structured = deputy
        .ok(
            "session_turn",
            json!({"session_id": id, "prompt": "Classify: the app crashes.", "output_schema": verdict_schema()}),
        )
        .await;
    assert_eq!(structured["structured_output"], json!({"label": "bug"}), "{structured}");

    for (prompt, answer) in [("Thanks. Why?", "Crashes are bugs."), ("And now?", "Still a bug.")] {
        deputy.mock.push(wire.text(answer));
        let plain = deputy.ok("session_turn", json!({"session_id": id, "prompt": prompt})).await;
        assert_eq!(completed(&plain), answer);
        assert!(plain.get("structured_output").is_none(), "{plain}");
    }
    let last = requests(&deputy).pop().unwrap();
    assert!(last.body.get("response_format").is_none() && last.body.get("tool_choice").is_none(), "{}", last.body);
    match wire {
        Wire::Anthropic => assert_eq!(
            wire.declared(&last.body),
            [(FINAL_ANSWER_TOOL.to_owned(), STUB_DESCRIPTION.to_owned())],
            "the answer tool the history calls is declared, and nothing else"
        ),
        Wire::OpenAi => assert!(last.body.get("tools").is_none(), "{}", last.body),
    }
    assert_clean(&deputy);
}

#[cfg(feature = "session-store")]
/// `delegate {context: "fork", builtins: []}` (finding 3): the child starts from the parent's
/// tool history without tools of its own; what its history calls is declared as stubs.
async fn forked_child_without_tools(wire: Wire) {
    let deputy = start(wire).await;
    let id =
        session_that_used_a_tool(&deputy, wire, json!({"builtins": ["read_file", "list_dir", "delegate"]})).await;
    let task = "CHILD: write the announcement for the launch day";
    deputy.mock.push(
        wire.tool_calls(None, &[("toolu_2", "delegate", json!({"task": task, "context": "fork", "builtins": []}))]),
    );
    deputy.mock.push(wire.text("The launch is on Friday: come and see."));
    deputy.mock.push(wire.text("My child wrote it."));
    let turn = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Have a child announce it."})).await;
    assert_eq!(completed(&turn), "My child wrote it.");

    let all = requests(&deputy);
    let child = &all[3];
    assert!(child.last_message().contains(task), "not the child's call: {}", child.body);
    assert!(wire.calls(&child.body).iter().any(|(_, name)| name == "read_file"), "the fork keeps the tool history");
    let declared = wire.declared(&child.body);
    assert!(declared.iter().all(|(_, description)| description == STUB_DESCRIPTION), "{declared:?}");
    assert!(declared.iter().any(|(name, _)| name == "read_file"), "{declared:?}");
    assert!(
        !declared.iter().any(|(name, _)| name == "delegate"),
        "the unfinished turn is not forked: {declared:?}"
    );
    let parent = &all[4];
    let result = wire.results(&parent.body).into_iter().find(|(id, _)| id == "toolu_2").unwrap().1;
    assert!(result.contains("come and see"), "{result}");
    assert_clean(&deputy);
}

// ---------------------------------------------------------------------------------------------
// Finding 6: whitespace-only text

/// Whitespace streamed before a tool call, and a `turn_start` hook adding whitespace-only
/// context (finding 6): no whitespace-only text goes out, and the session is not wedged.
async fn whitespace_text_and_hook_context(wire: Wire) {
    let hooks = tempfile::tempdir().unwrap();
    // Whitespace-only context at the first turn; at the second, text that shows the hook's
    // answers are read.
    let seen = hooks.path().join("seen");
    let hook = file_in(
        hooks.path(),
        "blank.sh",
        &format!(
            "cat > /dev/null\nif [ -e {seen:?} ]; then context='Context: Friday is confirmed.'; else context=' \\n\\t '; \
             touch {seen:?}; fi\nprintf '{{\"decision\": \"allow\", \"additional_context\": \"%s\"}}\\n' \"$context\"\n"
        ),
    );
    let config =
        format!("[[hooks]]\nevent = \"turn_start\"\ncommand = [\"/bin/sh\", {:?}]\n", hook.to_str().unwrap());
    let deputy = TestDeputy::start_with_config(&config).await;
    deputy.mock.enforce(wire.profile());
    notes(&deputy);
    deputy.mock.push(wire.tool_calls(Some("\n\n"), &[read_notes("toolu_1")]));
    deputy.mock.push(wire.text("Friday."));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "When? Read notes.txt.", "model": wire.model(), "builtins": ["read_file"]}),
        )
        .await;
    assert_eq!(completed(&created), "Friday.");
    let id = id_of(&created);
    deputy.mock.push(wire.tool_calls(Some(" "), &[read_notes("toolu_2")]));
    deputy.mock.push(wire.text("Still Friday."));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Check again."})).await;
    assert_eq!(completed(&next), "Still Friday.");
    let second_turn = &requests(&deputy)[2];
    assert!(second_turn.last_message().contains("Context: Friday is confirmed."), "{}", second_turn.body);

    for request in requests(&deputy) {
        let messages = request.body["messages"].as_array().unwrap();
        for message in messages {
            match &message["content"] {
                Value::String(text) => assert!(!text.trim().is_empty() || message["role"] == "tool", "{message}"),
                Value::Array(blocks) => {
                    for block in blocks.iter().filter(|block| block["type"] == "text") {
                        assert!(!block["text"].as_str().unwrap().trim().is_empty(), "{message}");
                    }
                }
                _ => {}
            }
        }
    }
    assert_clean(&deputy);
}

// ---------------------------------------------------------------------------------------------
// Finding 8: a tool name over 64 characters

/// A stdio MCP server (plain JSON-RPC lines) with one tool, named by its first argument.
const REPORTS_SERVER: &str = r#"
import json, sys
NAME = sys.argv[1]
def send(o):
    sys.stdout.write(json.dumps(o) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "reports", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{"name": NAME,
              "description": "The revenue of a region in a fiscal quarter",
              "inputSchema": {"type": "object", "properties": {"region": {"type": "string"}}}}]}})
    elif method == "tools/call":
        region = (msg["params"].get("arguments") or {}).get("region")
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text",
              "text": "revenue of %s: 42" % region}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
"#;

/// An MCP tool whose namespaced name is 82 characters (finding 8): it goes out shortened to
/// at most 64 safe characters, the model calls it by that name, and deputy maps the call back:
/// the held approval shows the original name, and the call reaches the server.
async fn long_tool_name_is_shortened_and_mapped_back(wire: Wire) {
    let deputy = start(wire).await;
    let tool = "fetch_the_quarterly_revenue_report_for_a_region.and_a_fiscal_year";
    let original = format!("reports__{}", tool.replace('.', "_"));
    assert!(original.len() > MAX_LEN);
    let dir = tempfile::tempdir().unwrap();
    let script = file_in(dir.path(), "reports.py", REPORTS_SERVER);
    let server = json!({"name": "reports", "command": "python3", "args": [script.to_str().unwrap(), tool]});

    // The wire name is the one the first request declares.
    deputy.mock.push(wire.text("I will look it up."));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "Revenue of the north?", "model": wire.model(), "builtins": [],
                   "mcp_servers": [server], "approval": {"tools": [original]}}),
        )
        .await;
    let id = id_of(&created);
    let declared = wire.declared_names(&requests(&deputy)[0].body);
    assert_eq!(declared.len(), 1, "{declared:?}");
    let short = declared[0].clone();
    assert!(short.len() <= MAX_LEN && short != original, "{short}");
    assert!(short.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'), "{short}");

    deputy.mock.push(wire.tool_calls(None, &[("toolu_1", &short, json!({"region": "north"}))]));
    let held = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Look it up now."})).await;
    assert_eq!(held["status"], "pending_tool_calls", "{held}");
    assert_eq!(
        held["pending"],
        json!([{"tool_use_id": "toolu_1", "name": original, "arguments": {"region": "north"}, "kind": "approval"}])
    );

    deputy.mock.push(wire.text("North made 42."));
    let done = deputy
        .ok(
            "session_turn",
            json!({"session_id": id, "approvals": [{"tool_use_id": "toolu_1", "decision": "allow"}]}),
        )
        .await;
    assert_eq!(completed(&done), "North made 42.");
    let last = requests(&deputy).pop().unwrap();
    assert_eq!(wire.declared_names(&last.body), std::slice::from_ref(&short));
    assert_eq!(wire.calls(&last.body), [("toolu_1".to_owned(), short)], "the history calls it by its wire name");
    assert_eq!(wire.results(&last.body), [("toolu_1".to_owned(), "revenue of north: 42".to_owned())]);
    assert_clean(&deputy);
}

// ---------------------------------------------------------------------------------------------
// Checked and accepted by the review: interrupts, approvals, inbox mail, retries

/// `session_interrupt` while a tool runs; the next turn answers the interrupted call.
async fn interrupt_mid_tool_then_next_turn(wire: Wire) {
    let deputy = start(wire).await;
    let mark = marker();
    deputy
        .mock
        .push(wire.tool_calls(None, &[("toolu_1", "shell", json!({"command": format!("sleep 30; : {mark}")}))]));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "Wait a bit.", "model": wire.model(), "builtins": [], "shell": true, "wait_ms": 100}),
        )
        .await;
    assert_eq!(created["status"], "running", "{created}");
    let id = id_of(&created);
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(&mark).is_empty() {
        assert!(Instant::now() < deadline, "the tool never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    deputy.ok("session_interrupt", json!({"session_id": id})).await;
    let read = deputy.ok("session_read", json!({"session_id": id, "wait_ms": 30_000})).await;
    assert_eq!(read["state"]["last_turn"]["stop_reason"], "cancelled", "{read}");

    deputy.mock.push(wire.text("Going on."));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Go on."})).await;
    assert_eq!(completed(&next), "Going on.");
    let last = requests(&deputy).pop().unwrap();
    let results = wire.results(&last.body);
    assert_eq!(results.len(), 1, "the interrupted call is answered: {}", last.body);
    assert_eq!(results[0].0, "toolu_1");
    assert_clean(&deputy);
}

/// Two calls held for approval, one allowed and one denied; then a plain turn.
async fn held_approvals_answered(wire: Wire) {
    let deputy = start(wire).await;
    deputy.mock.push(wire.tool_calls(
        Some("Writing both."),
        &[
            ("toolu_1", "write_file", json!({"path": "a.txt", "content": "a"})),
            ("toolu_2", "write_file", json!({"path": "b.txt", "content": "b"})),
        ],
    ));
    let held = deputy
        .ok("session_create", json!({"prompt": "Write a and b.", "model": wire.model(), "approval": "always"}))
        .await;
    assert_eq!(held["status"], "pending_tool_calls", "{held}");
    let id = id_of(&held);
    deputy.mock.push(wire.text("Wrote a only."));
    let done = deputy
        .ok(
            "session_turn",
            json!({"session_id": id, "approvals": [{"tool_use_id": "toolu_2", "decision": "deny"},
                                                   {"tool_use_id": "toolu_1", "decision": "allow"}]}),
        )
        .await;
    assert_eq!(completed(&done), "Wrote a only.");
    assert!(deputy.workspace.path().join("a.txt").exists() && !deputy.workspace.path().join("b.txt").exists());
    let ids: Vec<String> = wire.results(&requests(&deputy)[1].body).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["toolu_1", "toolu_2"]);

    deputy.mock.push(wire.text("Fine."));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "OK?"})).await;
    assert_eq!(completed(&next), "Fine.");
    assert_clean(&deputy);
}

/// Mail that arrives while a step runs joins the step's results: after them, as text.
async fn inbox_mail_between_steps(wire: Wire) {
    let deputy = start(wire).await;
    notes(&deputy);
    let call = wire.tool_calls(None, &[read_notes("toolu_1")]);
    let gate = deputy.mock.push_held(call, 1);
    deputy.mock.push(wire.text("Friday, and noted."));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "When? Read notes.txt.", "model": wire.model(), "builtins": ["read_file"], "wait_ms": 0}),
        )
        .await;
    let id = id_of(&created);
    deputy.mock.wait_for_requests(1).await;
    let sent = deputy.ok("session_send", json!({"session_id": id, "message": "the venue changed too"})).await;
    assert_eq!(sent["delivered"], "queued", "{sent}");
    gate.open();
    let read = deputy.settled(&id, |view| view["state"]["last_turn"]["text"].is_string()).await;
    assert_eq!(read["state"]["last_turn"]["text"], "Friday, and noted.", "{read}");
    let second = &requests(&deputy)[1];
    assert!(second.last_message().contains("the venue changed too"), "{}", second.body);
    assert_eq!(wire.results(&second.body).len(), 1);
    assert_clean(&deputy);
}

/// An invalid structured answer sent back, then a valid one, in a session without tools; and
/// another structured turn.
async fn structured_output_retries(wire: Wire) {
    let deputy = start(wire).await;
    deputy.mock.push(wire.structured_answer("toolu_final_1", &json!({"label": "regression"})));
    deputy.mock.push(wire.structured_answer("toolu_final_2", &json!({"label": "bug"})));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "Classify: the app crashes.", "model": wire.model(), "builtins": [],
                   "output_schema": verdict_schema()}),
        )
        .await;
    assert_eq!(created["structured_output"], json!({"label": "bug"}), "{created}");
    assert_eq!(requests(&deputy).len(), 2);
    let id = id_of(&created);
    deputy.mock.push(wire.structured_answer("toolu_final_3", &json!({"label": "feature"})));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Classify: add dark mode."})).await;
    assert_eq!(next["structured_output"], json!({"label": "feature"}), "{next}");
    assert_clean(&deputy);
}

// ---------------------------------------------------------------------------------------------
// Finding 4: Anthropic thinking injected by a gateway (Anthropic only)

/// The thinking block the mock streams for `text`, as it must come back.
fn thinking_block(text: &str) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": thinking_signature(text)})
}

/// A gateway that turns thinking on (an alias, or DeepSeek's Anthropic endpoint): two turns of
/// tool loops; every thinking block comes back byte-exact with its signature, first in its
/// message, and deputy does not itself ask for thinking.
async fn thinking_gateway_tool_loops(gateway: ThinkingGateway) {
    let deputy = TestDeputy::start().await;
    deputy.mock.enforce(Profile::thinking_gateway(gateway));
    notes(&deputy);
    let thoughts = [
        "The user asks about the launch.\nI should read \"notes.txt\" — carefully.  ",
        "Friday, per the notes.",
        "Asked again; read it again.",
        "Unchanged: Friday.",
    ];
    let reads = |thinking: &str, id: &str| {
        MockResponse::sse(anthropic::thinking_then_tool_calls(thinking, &[read_notes(id)], usage(12, 5)))
    };
    let answers =
        |thinking: &str| MockResponse::sse(anthropic::thinking_then_text(thinking, &["Friday."], usage(12, 5)));
    deputy.mock.push(reads(thoughts[0], "toolu_1"));
    deputy.mock.push(answers(thoughts[1]));
    let created =
        deputy.ok("session_create", json!({"prompt": "When? Read notes.txt.", "builtins": ["read_file"]})).await;
    assert_eq!(completed(&created), "Friday.");
    let id = id_of(&created);
    deputy.mock.push(reads(thoughts[2], "toolu_2"));
    deputy.mock.push(answers(thoughts[3]));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Check again."})).await;
    assert_eq!(completed(&next), "Friday.", "the thinking is not in the answer");

    let all = requests(&deputy);
    assert_eq!(all.len(), 4);
    assert!(all.iter().all(|request| request.body.get("thinking").is_none()), "the gateway thinks, not deputy");
    let last = &all[3].body;
    let assistants: Vec<&Value> =
        last["messages"].as_array().unwrap().iter().filter(|message| message["role"] == "assistant").collect();
    assert_eq!(assistants.len(), 3, "{last}");
    for (message, thought) in assistants.iter().zip(thoughts) {
        assert_eq!(message["content"][0], thinking_block(thought), "{message}");
    }
    assert_eq!(assistants[2]["content"][1]["type"], "tool_use", "the open tool loop's message");
    assert_clean(&deputy);
}

#[tokio::test]
async fn thinking_gateway_alias_gets_thinking_back_in_tool_loops() {
    thinking_gateway_tool_loops(ThinkingGateway::Alias).await;
}

#[tokio::test]
async fn thinking_gateway_deepseek_gets_thinking_back_in_tool_loops() {
    thinking_gateway_tool_loops(ThinkingGateway::DeepSeek).await;
}

// ---------------------------------------------------------------------------------------------
// Finding 5: `reasoning_content` passback (OpenAI-compatible reasoning models)

/// Two turns of tool loops on a server that wants `reasoning_content` back on every assistant
/// message with tool calls.
async fn reasoning_content_tool_loops(vendor: ReasoningVendor) {
    let deputy = TestDeputy::start().await;
    deputy.mock.enforce(Profile::reasoning_passback(vendor));
    notes(&deputy);
    let reasoned_call = |reasoning: &[&str], id: &str| {
        MockResponse::sse(openai::reasoning_then_tool_calls(reasoning, &[read_notes(id)], usage(12, 5)))
    };
    let reasoned_text =
        |reasoning: &[&str]| MockResponse::sse(openai::reasoning_then_text(reasoning, &["Friday."], usage(12, 5)));
    deputy.mock.push(reasoned_call(&["The user asks", " about the launch."], "call_1"));
    deputy.mock.push(reasoned_text(&["Friday, per the notes."]));
    let model = "openai:deepseek-reasoner";
    let created = deputy
        .ok("session_create", json!({"prompt": "When? Read notes.txt.", "model": model, "builtins": ["read_file"]}))
        .await;
    assert_eq!(completed(&created), "Friday.");
    let id = id_of(&created);
    deputy.mock.push(reasoned_call(&["Read it again."], "call_2"));
    deputy.mock.push(reasoned_text(&["Unchanged."]));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Check again."})).await;
    assert_eq!(completed(&next), "Friday.");

    let last = &requests(&deputy)[3].body;
    let assistants: Vec<&Value> =
        last["messages"].as_array().unwrap().iter().filter(|message| message["role"] == "assistant").collect();
    let reasoning: Vec<&str> = assistants.iter().map(|m| m["reasoning_content"].as_str().unwrap_or("")).collect();
    assert_eq!(
        reasoning,
        ["The user asks about the launch.", "Friday, per the notes.", "Read it again."],
        "{last}"
    );
    assert_clean(&deputy);
}

#[tokio::test]
async fn deepseek_gets_reasoning_content_back_in_tool_loops() {
    reasoning_content_tool_loops(ReasoningVendor::DeepSeek).await;
}

#[tokio::test]
async fn kimi_gets_reasoning_content_back_in_tool_loops() {
    reasoning_content_tool_loops(ReasoningVendor::Kimi).await;
}

// ---------------------------------------------------------------------------------------------
// Finding 7: reasoning models on a host other than api.openai.com

/// gpt-5 and o-series models on the mock (not `api.openai.com`) get `max_completion_tokens`,
/// through a tool loop.
#[tokio::test]
async fn reasoning_models_on_another_host_get_max_completion_tokens() {
    let deputy = TestDeputy::start().await;
    deputy.mock.enforce(Profile::first_party());
    notes(&deputy);
    for model in ["openai:gpt-5-mini", "openai:o3-mini"] {
        let before = requests(&deputy).len();
        deputy.mock.push(Wire::OpenAi.tool_calls(None, &[read_notes("call_1")]));
        deputy.mock.push(Wire::OpenAi.text("Friday."));
        let created = deputy
            .ok(
                "session_create",
                json!({"prompt": "When? Read notes.txt.", "model": model, "builtins": ["read_file"], "max_tokens": 900}),
            )
            .await;
        assert_eq!(completed(&created), "Friday.");
        for request in &requests(&deputy)[before..] {
            assert_eq!(request.body["max_completion_tokens"], 900, "{model}: {}", request.body);
            assert!(request.body.get("max_tokens").is_none(), "{model}: {}", request.body);
        }
    }
    assert_clean(&deputy);
}

// ---------------------------------------------------------------------------------------------
// Finding 11: servers that reject `stream_options`

async fn stream_usage_off(vendor: StreamOptionsVendor) {
    let deputy = start_with_providers(|mock| {
        format!(
            "[providers.compat]\napi = \"openai\"\nbase_url = \"{mock}/v1\"\napi_key_env = \"OPENAI_API_KEY\"\n\
             stream_usage = false\n"
        )
    })
    .await;
    deputy.mock.enforce(Profile::no_stream_options(vendor));
    notes(&deputy);
    deputy.mock.push(Wire::OpenAi.tool_calls(None, &[read_notes("call_1")]));
    deputy.mock.push(Wire::OpenAi.text("Friday."));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "When? Read notes.txt.", "model": "compat:mistral-large", "builtins": ["read_file"]}),
        )
        .await;
    assert_eq!(completed(&created), "Friday.");
    let all = requests(&deputy);
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|request| request.body.get("stream_options").is_none()));
    assert_clean(&deputy);
}

#[tokio::test]
async fn stream_usage_false_suits_azure_without_stream_options() {
    stream_usage_off(StreamOptionsVendor::Azure).await;
}

#[tokio::test]
async fn stream_usage_false_suits_mistral() {
    stream_usage_off(StreamOptionsVendor::Mistral).await;
}

// ---------------------------------------------------------------------------------------------
// `session_create {reasoning}`

/// Every event of a session.
async fn events(deputy: &TestDeputy, id: &str) -> Vec<Value> {
    let page = deputy.ok("session_events", json!({"session_id": id, "limit": 500})).await;
    page["events"].as_array().unwrap().iter().map(|event| event["event"].clone()).collect()
}

fn deltas(events: &[Value], kind: &str) -> String {
    events.iter().filter(|event| event["type"] == kind).map(|event| event["text"].as_str().unwrap()).collect()
}

async fn transcript(deputy: &TestDeputy, id: &str) -> String {
    let uri = format!("deputy://sessions/{id}/transcript");
    let read = deputy.client.read_resource(ReadResourceRequestParams::new(uri)).await.expect("resources/read");
    match &read.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

/// `reasoning: {effort: "high"}` on Anthropic: thinking with a 16,384-token budget on top of
/// `max_tokens`, the interleaved-thinking beta, the thinking passed back in the tool loop; the
/// reasoning shows as `reasoning_delta` events and in the transcript, never in the text.
#[tokio::test]
async fn reasoning_effort_high_on_anthropic_is_thinking_with_its_budget() {
    let deputy = TestDeputy::start().await;
    deputy.mock.enforce(Profile::first_party());
    notes(&deputy);
    let (first, second) = ("I need the notes.", "They say Friday.");
    deputy.mock.push(MockResponse::sse(anthropic::thinking_then_tool_calls(
        first,
        &[read_notes("toolu_1")],
        usage(12, 5),
    )));
    deputy.mock.push(MockResponse::sse(anthropic::thinking_then_text(second, &["Fri", "day."], usage(12, 5))));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "When? Read notes.txt.", "builtins": ["read_file"], "max_tokens": 1000,
                   "reasoning": {"effort": "high"}}),
        )
        .await;
    assert_eq!(completed(&created), "Friday.");
    assert_eq!(created["reasoning"], second, "the answer's reasoning, apart from its text");
    let id = id_of(&created);
    let read = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["last_turn"]["reasoning"], second, "{read}");

    let all = requests(&deputy);
    for request in &all {
        assert_eq!(request.body["thinking"], json!({"type": "enabled", "budget_tokens": 16384}));
        assert_eq!(request.body["max_tokens"], 1000 + 16384);
        assert_eq!(request.header("anthropic-beta"), Some("interleaved-thinking-2025-05-14"));
        assert!(request.body.get("tool_choice").is_none());
    }
    assert_eq!(all[1].body["messages"][1]["content"][0], thinking_block(first));

    let events = events(&deputy, &id).await;
    assert_eq!(deltas(&events, "reasoning_delta"), format!("{first}{second}"), "{events:?}");
    assert_eq!(deltas(&events, "text_delta"), "Friday.");
    let transcript = transcript(&deputy, &id).await;
    assert!(transcript.contains(&format!("*Reasoning*\n\n> {first}")), "{transcript}");
    assert!(transcript.contains(&format!("> {second}")), "{transcript}");
    assert_clean(&deputy);
}

/// Thinking refuses a forced tool: a structured turn with reasoning asks for the answer tool
/// in the system prompt (`tool_choice` left out), and the answer is taken.
#[tokio::test]
async fn structured_output_with_thinking_does_not_force_the_tool() {
    let deputy = TestDeputy::start().await;
    deputy.mock.enforce(Profile::first_party());
    deputy.mock.push(MockResponse::sse(anthropic::thinking_then_tool_calls(
        "A crash is a bug.",
        &[("toolu_final", FINAL_ANSWER_TOOL, json!({"label": "bug"}))],
        usage(12, 5),
    )));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "Classify: the app crashes.", "builtins": [], "output_schema": verdict_schema(),
                   "reasoning": {"budget_tokens": 2048}}),
        )
        .await;
    assert_eq!(created["structured_output"], json!({"label": "bug"}), "{created}");
    let body = &requests(&deputy)[0].body;
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    assert!(body.get("tool_choice").is_none(), "{body}");
    assert!(body["system"].to_string().contains(FINAL_ANSWER_TOOL), "asked in the system prompt: {body}");

    // A session-wide schema: the next turn is structured too, after the answer tool's result.
    let id = id_of(&created);
    deputy.mock.push(MockResponse::sse(anthropic::thinking_then_tool_calls(
        "Still a bug.",
        &[("toolu_final2", FINAL_ANSWER_TOOL, json!({"label": "bug"}))],
        usage(12, 5),
    )));
    let next = deputy.ok("session_turn", json!({"session_id": id, "prompt": "Thanks. Again?"})).await;
    assert_eq!(next["structured_output"], json!({"label": "bug"}), "{next}");
    assert_clean(&deputy);
}

/// `reasoning: {effort: "high"}` on OpenAI: `reasoning_effort`, and the reasoning as events.
#[tokio::test]
async fn reasoning_effort_high_on_openai_is_reasoning_effort() {
    let deputy = TestDeputy::start().await;
    deputy.mock.enforce(Profile::first_party());
    notes(&deputy);
    deputy.mock.push(MockResponse::sse(openai::reasoning_then_tool_calls(
        &["I need the notes."],
        &[read_notes("call_1")],
        usage(12, 5),
    )));
    deputy.mock.push(MockResponse::sse(openai::reasoning_then_text(
        &["They say Friday."],
        &["Friday."],
        usage(12, 5),
    )));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "When? Read notes.txt.", "model": "openai:o3-mini", "builtins": ["read_file"],
                   "reasoning": {"effort": "high"}}),
        )
        .await;
    assert_eq!(completed(&created), "Friday.");
    for request in requests(&deputy) {
        assert_eq!(request.body["reasoning_effort"], "high", "{}", request.body);
        assert!(request.body.get("max_tokens").is_none());
    }
    let events = events(&deputy, &id_of(&created)).await;
    assert_eq!(deltas(&events, "reasoning_delta"), "I need the notes.They say Friday.");
    assert_eq!(deltas(&events, "text_delta"), "Friday.");
    assert_clean(&deputy);
}

// ---------------------------------------------------------------------------------------------
// Prompt caching switches

/// Both built-in providers taken over by the config file, at the mock, with `extra` options.
fn both_providers(mock: &str, extra: &str) -> String {
    format!(
        "[providers.anthropic]\napi = \"anthropic\"\nbase_url = \"{mock}/anthropic\"\napi_key_env = \
         \"ANTHROPIC_API_KEY\"\n{extra}\n\n[providers.openai]\napi = \"openai\"\nbase_url = \"{mock}/v1\"\n\
         api_key_env = \"OPENAI_API_KEY\"\n{extra}\n"
    )
}

/// A tool loop with a system prompt on `wire`; its session id.
async fn cached_tool_loop(deputy: &TestDeputy, wire: Wire) -> String {
    notes(deputy);
    deputy.mock.push(wire.tool_calls(None, &[read_notes("toolu_1")]));
    deputy.mock.push(wire.text("Friday."));
    let created = deputy
        .ok(
            "session_create",
            json!({"prompt": "When? Read notes.txt.", "model": wire.model(), "builtins": ["read_file", "list_dir"],
                   "system_prompt": "You answer from the notes."}),
        )
        .await;
    assert_eq!(completed(&created), "Friday.");
    id_of(&created)
}

/// `prompt_cache = "off"`: no `cache_control` anywhere, no `prompt_cache_key`.
#[tokio::test]
async fn prompt_cache_off_sends_no_breakpoint_and_no_cache_key() {
    let deputy = start_with_providers(|mock| both_providers(mock, "prompt_cache = \"off\"")).await;
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        deputy.mock.enforce(wire.profile());
        cached_tool_loop(&deputy, wire).await;
    }
    let all = requests(&deputy);
    assert_eq!(all.len(), 4);
    for request in all {
        assert!(!request.body.to_string().contains("cache_control"), "{}", request.body);
        assert!(request.body.get("prompt_cache_key").is_none(), "{}", request.body);
    }
    assert_clean(&deputy);
}

/// `prompt_cache_ttl = "1h"`: every breakpoint (tools, system, last message) says so.
#[tokio::test]
async fn prompt_cache_ttl_1h_marks_every_breakpoint() {
    let deputy = start_with_providers(|mock| both_providers(mock, "prompt_cache_ttl = \"1h\"")).await;
    deputy.mock.enforce(Wire::Anthropic.profile());
    cached_tool_loop(&deputy, Wire::Anthropic).await;
    for request in requests(&deputy) {
        let marked = cache_controlled_blocks(&request.body);
        let paths: Vec<&str> = marked.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(marked.len(), 3, "{paths:?}");
        assert!(paths[0].starts_with("tools.") && paths[1] == "system.0" && paths[2].starts_with("messages."));
        for (path, block) in marked {
            assert_eq!(block["cache_control"], json!({"type": "ephemeral", "ttl": "1h"}), "{path}");
        }
    }
    assert_clean(&deputy);
}

/// OpenAI's `prompt_cache_key` is the session's id: the same for a session's calls, another
/// for another session.
#[tokio::test]
async fn prompt_cache_key_is_per_session() {
    let deputy = TestDeputy::start().await;
    deputy.mock.enforce(Profile::first_party());
    let first = cached_tool_loop(&deputy, Wire::OpenAi).await;
    let second = cached_tool_loop(&deputy, Wire::OpenAi).await;
    assert_ne!(first, second);
    let keys: Vec<Value> =
        requests(&deputy).iter().map(|request| request.body["prompt_cache_key"].clone()).collect();
    assert_eq!(keys, [json!(first), json!(first), json!(second), json!(second)]);
    assert_clean(&deputy);
}

// ---------------------------------------------------------------------------------------------

/// One test per wire for each scenario: `provider_wire::wire_<wire>::<scenario>`.
macro_rules! on_both_wires {
    ($($(#[$attr:meta])* $scenario:ident),* $(,)?) => {
        mod wire_anthropic {
            $(
                $(#[$attr])*
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Wire::Anthropic).await;
                }
            )*
        }
        mod wire_openai {
            $(
                $(#[$attr])*
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Wire::OpenAi).await;
                }
            )*
        }
    };
}

on_both_wires!(
    #[cfg(feature = "session-compaction")]
    manual_compaction_after_tool_use,
    #[cfg(feature = "session-compaction")]
    threshold_compaction_after_tool_use,
    #[cfg(feature = "session-compaction")]
    overflow_compaction_after_tool_use,
    #[cfg(feature = "session-compaction")]
    pruning_mid_turn_after_tool_use,
    plain_turn_after_a_structured_turn_without_tools,
    #[cfg(feature = "session-store")]
    forked_child_without_tools,
    whitespace_text_and_hook_context,
    long_tool_name_is_shortened_and_mapped_back,
    interrupt_mid_tool_then_next_turn,
    held_approvals_answered,
    inbox_mail_between_steps,
    structured_output_retries,
);
