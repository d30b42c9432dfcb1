//! Property: whatever history deputy can hold, every request body either wire writes keeps the
//! real providers' rules (`common::provider_rules`, each with its real error text).
//!
//! Histories are generated the ways deputy writes them: prompts (joining a message of tool
//! results, as the next prompt after a tool loop does), streamed responses (whitespace before a
//! tool call, thinking and reasoning blocks, long and odd tool names, the structured-output
//! tool), results answered in any order or not at all (held approvals and callbacks, a crash),
//! inbox mail and hooks' added context after results, interrupted responses closed with "not
//! run" results, compaction (a summary followed by any tail, which can open with an answer or
//! with results), pruning, and forks (a prefix of another session's history). Each is sent
//! with a random request: tools the session has now (maybe none), structured output, the
//! compaction summary's forbidden tool use, reasoning, a reasoning model, caching on or off.

use std::sync::Arc;

use deputy::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use deputy::llm::encoded_history::EncodedHistory;
use deputy::llm::openai::{OpenAiConfig, OpenAiProvider};
use deputy::llm::options::{PromptCache, WireOptions};
use deputy::llm::{
    ContentBlock, Effort, HttpTimeouts, Message, ModelRequest, OutputFormat, Reasoning, Resendable, Role,
    ToolChoice, ToolSpec,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::common::provider_rules::{Profile, check_anthropic, check_openai, thinking_signature};

/// Tool names a history may hold: plain, the structured-output tool, an MCP name over 64
/// characters, one with characters no wire takes, and two alike in their first 60.
const NAMES: &[&str] = &[
    "read_file",
    "deputy_final_answer",
    "filesystem__read_text_file_with_a_very_long_descriptive_name_from_an_mcp_server",
    "fs.read/v2",
    "filesystem__read_text_file_with_a_very_long_descriptive_name_from_an_mcp_server_2",
];

#[derive(Debug, Clone)]
enum Text {
    Words,
    Whitespace,
    Empty,
}

impl Text {
    fn render(&self, words: &str) -> String {
        match self {
            Text::Words => words.to_owned(),
            Text::Whitespace => "\n\n ".to_owned(),
            Text::Empty => String::new(),
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Prompt(Text),
    Response {
        lead: Option<Text>,
        calls: Vec<usize>,
        thinking: bool,
        reasoning: bool,
    },
    /// Results of the last response's calls: which are answered (in reverse order if
    /// `reversed`), then mail and hook context.
    Results {
        answered: Vec<bool>,
        reversed: bool,
        mail: Option<Text>,
        hook: Option<Text>,
    },
    Interrupted {
        calls: Vec<usize>,
    },
    Summary {
        keep: usize,
    },
    Prune,
    Fork {
        at: usize,
    },
}

fn text() -> impl Strategy<Value = Text> {
    prop_oneof![4 => Just(Text::Words), 1 => Just(Text::Whitespace), 1 => Just(Text::Empty)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => text().prop_map(Step::Prompt),
        4 => (proptest::option::of(text()), proptest::collection::vec(0..NAMES.len(), 0..3), any::<bool>(), any::<bool>())
            .prop_map(|(lead, calls, thinking, reasoning)| Step::Response { lead, calls, thinking, reasoning }),
        4 => (proptest::collection::vec(prop::bool::weighted(0.85), 0..3), any::<bool>(), proptest::option::of(text()), proptest::option::of(text()))
            .prop_map(|(answered, reversed, mail, hook)| Step::Results { answered, reversed, mail, hook }),
        1 => proptest::collection::vec(0..NAMES.len(), 0..3).prop_map(|calls| Step::Interrupted { calls }),
        1 => (0usize..5).prop_map(|keep| Step::Summary { keep }),
        1 => Just(Step::Prune),
        1 => (0usize..12).prop_map(|at| Step::Fork { at }),
    ]
}

/// Writes the history the steps describe, the way the agent writes each.
struct Writer {
    history: Vec<Message>,
    next_id: usize,
}

impl Writer {
    fn new() -> Self {
        Self { history: vec![Message::user_text("First question.")], next_id: 0 }
    }

    fn id(&mut self) -> String {
        self.next_id += 1;
        format!("toolu_{}", self.next_id)
    }

    fn last_calls(&self) -> Vec<String> {
        match self.history.last() {
            Some(Message { role: Role::Assistant, content }) => content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolUse { id, .. } => Some(id.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn push_user(&mut self, blocks: Vec<ContentBlock>) {
        match self.history.last_mut() {
            // The next prompt joins a message of tool results.
            Some(last) if last.role == Role::User => last.content.extend(blocks),
            _ => self.history.push(Message { role: Role::User, content: blocks }),
        }
    }

    fn apply(&mut self, step: &Step) {
        match step {
            Step::Prompt(text) => self.push_user(vec![ContentBlock::Text { text: text.render("Next question.") }]),
            Step::Response { lead, calls, thinking, reasoning } => {
                let mut blocks = Vec::new();
                if *thinking {
                    let thought = format!("thinking {}", self.next_id);
                    blocks.push(ContentBlock::Thinking {
                        signature: Some(thinking_signature(&thought)),
                        thinking: thought,
                    });
                }
                if *reasoning {
                    blocks.push(ContentBlock::Reasoning { text: format!("reasoning {}", self.next_id) });
                }
                if let Some(lead) = lead {
                    blocks.push(ContentBlock::Text { text: lead.render("Let me look.") });
                }
                for name in calls {
                    let id = self.id();
                    blocks.push(ContentBlock::ToolUse {
                        id,
                        name: NAMES[*name].into(),
                        input: json!({"path": "a"}),
                    });
                }
                self.history.push(Message::assistant(blocks));
            }
            Step::Results { answered, reversed, mail, hook } => {
                // Calls of the last response, or (a result answering nothing) made-up ids.
                let mut ids = self.last_calls();
                if ids.is_empty() {
                    ids = (0..answered.len()).map(|n| format!("toolu_gone_{n}")).collect();
                }
                let mut blocks: Vec<ContentBlock> = ids
                    .iter()
                    .zip(answered.iter().chain(std::iter::repeat(&true)))
                    .filter(|(_, answered)| **answered)
                    .map(|(id, _)| ContentBlock::ToolResult {
                        tool_use_id: id.clone(),
                        content: "contents".into(),
                        is_error: false,
                    })
                    .collect();
                if *reversed {
                    blocks.reverse();
                }
                for extra in [mail, hook].into_iter().flatten() {
                    blocks.push(ContentBlock::Text { text: extra.render("A message arrived.") });
                }
                if !blocks.is_empty() {
                    self.history.push(Message { role: Role::User, content: blocks });
                }
            }
            Step::Interrupted { calls } => {
                let mut blocks = vec![ContentBlock::Text { text: "Partial answer\n\n[interrupted]".into() }];
                let mut results = Vec::new();
                for name in calls {
                    let id = self.id();
                    blocks.push(ContentBlock::ToolUse {
                        id: id.clone(),
                        name: NAMES[*name].into(),
                        input: json!({}),
                    });
                    results.push(ContentBlock::ToolResult {
                        tool_use_id: id,
                        content: "not run: [interrupted]".into(),
                        is_error: true,
                    });
                }
                self.history.push(Message::assistant(blocks));
                if !results.is_empty() {
                    self.history.push(Message { role: Role::User, content: results });
                }
            }
            Step::Summary { keep } => {
                let tail = self.history.split_off(self.history.len().saturating_sub(*keep));
                self.history = vec![Message::user_text("Summary of the conversation so far: …")];
                self.history.extend(tail);
            }
            Step::Prune => {
                for block in self.history.iter_mut().flat_map(|message| &mut message.content) {
                    if let ContentBlock::ToolResult { content, .. } = block {
                        *content = "[pruned]".into();
                        break;
                    }
                }
            }
            Step::Fork { at } => self.history.truncate(*at),
        }
    }
}

#[derive(Debug, Clone)]
struct Call {
    tools: Vec<usize>,
    structured: bool,
    summary: bool,
    reasoning: Option<Effort>,
    reasoning_model: bool,
    cache: bool,
}

fn call() -> impl Strategy<Value = Call> {
    (
        proptest::collection::vec(0..NAMES.len(), 0..3),
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(prop_oneof![Just(Effort::Low), Just(Effort::High)]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(tools, structured, summary, reasoning, reasoning_model, cache)| Call {
            tools,
            structured,
            summary,
            reasoning,
            reasoning_model,
            cache,
        })
}

fn request(history: Vec<Message>, call: &Call) -> ModelRequest {
    let mut names: Vec<&str> =
        call.tools.iter().map(|index| NAMES[*index]).filter(|name| *name != "deputy_final_answer").collect();
    names.sort();
    names.dedup();
    let tools = ToolSpec::list(names.into_iter().map(|name| ToolSpec {
        name: name.into(),
        description: "a tool".into(),
        input_schema: json!({"type": "object"}).into(),
    }));
    ModelRequest {
        model: if call.reasoning_model { "gpt-5".into() } else { "claude-sonnet-4-5".into() },
        system: Some("You are terse.".into()),
        messages: history.into(),
        tools,
        tool_choice: if call.summary { ToolChoice::Forbidden } else { ToolChoice::Allowed },
        max_tokens: 1024,
        reasoning: call.reasoning.map(|effort| Reasoning { effort: Some(effort), budget_tokens: None }),
        cache_key: Some("ses_property".into()),
        output: (call.structured && !call.summary).then(|| {
            OutputFormat::new(std::sync::Arc::new(
                json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            ))
        }),
        retries: Default::default(),
        encoded: Default::default(),
    }
}

fn options(call: &Call) -> WireOptions {
    WireOptions {
        prompt_cache: if call.cache { PromptCache::Auto } else { PromptCache::Off },
        ..WireOptions::default()
    }
}

fn bodies(request: ModelRequest, call: &Call) -> (Value, Value) {
    let parse = |bytes: bytes::Bytes| serde_json::from_slice::<Value>(&bytes).unwrap();
    let [anthropic, openai] = Wires::new(call).bodies(request, Default::default());
    (parse(anthropic), parse(openai))
}

/// The two wires, set up for `call`.
struct Wires {
    anthropic: AnthropicProvider,
    openai: OpenAiProvider,
}

impl Wires {
    fn new(call: &Call) -> Self {
        let base_url = "http://127.0.0.1:9".to_owned();
        let anthropic = AnthropicProvider::new(AnthropicConfig {
            base_url: base_url.clone(),
            api_key: "k".into(),
            timeouts: HttpTimeouts::default(),
            options: options(call),
        });
        let openai = OpenAiProvider::new(OpenAiConfig {
            base_url,
            api_key: None,
            timeouts: HttpTimeouts::default(),
            options: options(call),
        });
        Self { anthropic, openai }
    }

    /// The bodies of `request`, Anthropic's then OpenAI's, each written with what that wire
    /// kept of the history before (`encoded`, one per wire, as a session has one wire).
    fn bodies(&self, request: ModelRequest, encoded: [Arc<EncodedHistory>; 2]) -> [bytes::Bytes; 2] {
        // One resendable request per wire: it keeps the bytes its first body was written as.
        let [for_anthropic, for_openai] = encoded;
        let anthropic =
            self.anthropic.body(&Resendable::new(ModelRequest { encoded: for_anthropic, ..request.clone() }));
        let openai = self.openai.body(&Resendable::new(ModelRequest { encoded: for_openai, ..request }));
        [anthropic.unwrap(), openai.unwrap()]
    }
}

/// Whether the agent changes its history this way in place only by appending to it or
/// changing its last message, so that what a wire wrote of its settled turns still holds.
fn appends(step: &Step) -> bool {
    !matches!(step, Step::Summary { .. } | Step::Prune | Step::Fork { .. })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_request_either_wire_writes_keeps_the_providers_rules(
        steps in proptest::collection::vec(step(), 1..14),
        call in call(),
    ) {
        let mut writer = Writer::new();
        for step in &steps {
            writer.apply(step);
        }
        let (anthropic, openai) = bodies(request(writer.history, &call), &call);
        for profile in [Profile::first_party(), Profile::bedrock()] {
            if let Err(violation) = check_anthropic(&anthropic, &profile) {
                prop_assert!(false, "anthropic ({}): {}\n{anthropic:#}", violation.rule, violation.message());
            }
        }
        if let Err(violation) = check_openai(&openai, &Profile::first_party()) {
            prop_assert!(false, "openai ({}): {}\n{openai:#}", violation.rule, violation.message());
        }
    }
}

proptest! {
    // Each case is a session of calls on both wires: fewer cases, as many bodies.
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A session's calls, each after one more step, write on either wire what a call writing the
    /// whole history writes, byte for byte, though each wrote only what followed the turns
    /// settled at the calls before it.
    #[test]
    fn writing_only_what_follows_the_settled_turns_gives_the_whole_body(
        steps in proptest::collection::vec(step(), 1..24),
        call in call(),
    ) {
        let mut session = Session::new(call);
        for step in &steps {
            let (kept, whole) = session.call_after(step);
            prop_assert_eq!(&kept, &whole, "after {:?}", step);
        }
    }
}

/// Not vacuous: a session's turns settle and are kept, call after call.
#[test]
fn a_session_keeps_its_settled_turns_from_call_to_call() {
    let call = Call {
        tools: vec![0],
        structured: false,
        summary: false,
        reasoning: None,
        reasoning_model: false,
        cache: true,
    };
    let mut session = Session::new(call);
    let steps = [
        Step::Response { lead: Some(Text::Words), calls: vec![0], thinking: false, reasoning: false },
        Step::Results { answered: vec![true], reversed: false, mail: None, hook: None },
        Step::Response { lead: Some(Text::Words), calls: vec![], thinking: false, reasoning: false },
        Step::Prompt(Text::Words),
    ];
    let mut settled = Vec::new();
    for step in steps.iter().cycle().take(20) {
        let (kept, whole) = session.call_after(step);
        assert_eq!(kept, whole);
        settled.push(session.encoded.each_ref().map(|encoded| encoded.settled_messages()));
    }
    // Each response settles the turns before it: 20 steps of 4 messages each 4 steps.
    assert_eq!(settled.last(), Some(&[19, 19]), "{settled:?}");
    assert!(settled.windows(2).all(|pair| pair[0][0] <= pair[1][0]), "{settled:?}");
}

/// A session as the agent keeps it: its history changed in place, and what each wire kept of it.
struct Session {
    writer: Writer,
    history: Arc<Vec<Message>>,
    encoded: [Arc<EncodedHistory>; 2],
    wires: Wires,
    call: Call,
}

impl Session {
    fn new(call: Call) -> Self {
        let writer = Writer::new();
        let history = Arc::new(writer.history.clone());
        Self { writer, history, encoded: Default::default(), wires: Wires::new(&call), call }
    }

    /// The bodies of a call after `step`, written from what the wires kept, then written whole.
    fn call_after(&mut self, step: &Step) -> ([bytes::Bytes; 2], [bytes::Bytes; 2]) {
        self.writer.apply(step);
        if !appends(step) {
            self.encoded = Default::default();
        }
        *Arc::get_mut(&mut self.history).expect("no request holds the history") = self.writer.history.clone();
        let shared = ModelRequest { messages: Arc::clone(&self.history), ..request(Vec::new(), &self.call) };
        let kept = self.wires.bodies(shared, self.encoded.clone());
        let whole = self.wires.bodies(request(self.writer.history.clone(), &self.call), Default::default());
        (kept, whole)
    }
}
