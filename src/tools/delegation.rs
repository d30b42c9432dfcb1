//! The agent's side of delegation: `delegate`, `wait` and `cancel_delegate`.
//!
//! A child is an ordinary session the service creates on the parent's behalf; these tools only
//! carry the model's request and the parent's id through the session's [`SessionLink`] to the
//! [`Delegator`] (the session service), which narrows the tools, carves the budget, enforces
//! the caps and runs the child. A refusal is an error result at once — never a wait for a
//! slot, which could deadlock a parent that holds one.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::link::{SessionLink, hub};
use super::{BuiltinTool, ToolOutput, TypedTool};
use crate::ids::SessionId;

/// Bounds of `wait {timeout_ms}`: long enough to matter, short enough that a forgotten wait
/// ends (a turn interrupt or the time budget end it sooner).
pub const MIN_WAIT_MS: u64 = 1_000;
pub const MAX_WAIT_MS: u64 = 600_000;
pub const DEFAULT_WAIT_MS: u64 = 60_000;

/// What the child starts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChildContext {
    /// An empty conversation: the task is all it knows.
    #[default]
    None,
    /// A copy of this conversation up to its last completed turn, then the task.
    Fork,
}

/// The limits a parent asks for its child (absent: the default, else what the parent has left).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChildBudget {
    pub max_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub max_duration_ms: Option<u64>,
    /// US dollars the child may spend (its model's price must be known).
    pub max_cost_usd: Option<crate::llm::pricing::Usd>,
}

/// `delegate`'s arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegateArgs {
    /// What the child should do: the prompt of its first turn.
    pub task: String,
    /// A named agent to start the child from (its prompt, model and tools, within yours); the
    /// other fields here override its.
    pub agent: Option<String>,
    /// The child's name among this session's peers (send_message uses it); default
    /// `child-<8 characters of its id>`.
    pub name: Option<String>,
    pub system_prompt: Option<String>,
    /// `provider:model`; default this session's model.
    pub model: Option<String>,
    /// A subset of this session's builtin tools; default all of them.
    pub builtins: Option<Vec<BuiltinTool>>,
    /// A directory at or below this session's workspace (relative paths start there);
    /// default the same workspace.
    pub workspace: Option<String>,
    /// The shell, only if this session has it; default: as this session.
    pub shell: Option<bool>,
    /// A subset of this session's MCP servers, by name; default all of them.
    pub mcp_servers: Option<Vec<String>>,
    /// The child's budget; each limit is capped to what this session has left (a limit you do
    /// not name: half of it), and its tokens and tool calls are held from this session until
    /// the child's result arrives (the unused rest comes back then).
    pub budget: Option<ChildBudget>,
    /// `none` (default) or `fork`: start from a copy of this conversation.
    #[serde(default)]
    pub context: ChildContext,
    /// Wait for the child's turn to end (default true). With false, the answer comes at once
    /// and the child's result arrives later as a message.
    pub wait: Option<bool>,
    /// With wait: answer `running` after this long (the result then arrives as a message).
    pub wait_ms: Option<u64>,
    /// A JSON Schema the child's final answer must validate against.
    pub output_schema: Option<serde_json::Value>,
}

/// How `wait` ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    /// When the first child ends (default).
    #[default]
    Any,
    /// When every child ended.
    All,
}

/// `wait`'s arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// The children to wait for; default every child still working.
    pub session_ids: Option<Vec<SessionId>>,
    #[serde(default)]
    pub mode: WaitMode,
    /// How long to wait at most, 1000 to 600000 ms (default 60000).
    pub timeout_ms: Option<u64>,
}

/// `cancel_delegate`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelArgs {
    pub session_id: SessionId,
    /// Also archive it, which frees its slot among this session's children.
    #[serde(default)]
    pub archive: bool,
}

/// Where the delegation tools create, wait for and cancel children. Answers are the JSON the
/// model sees (their shapes are the service's); errors are its text.
pub trait Delegator: Send + Sync {
    /// Creates a child of `parent` and runs its first turn; `cancel` is the parent's turn,
    /// whose interrupt also cancels a child it waits for.
    fn delegate(
        &self,
        parent: SessionId,
        args: DelegateArgs,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>>;

    fn wait_children(
        &self,
        parent: SessionId,
        args: WaitArgs,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>>;

    fn cancel_child(&self, parent: SessionId, args: CancelArgs)
    -> BoxFuture<'_, Result<serde_json::Value, String>>;
}

fn answer(result: Result<serde_json::Value, String>) -> ToolOutput {
    match result {
        Ok(value) => ToolOutput::ok(value.to_string()),
        Err(message) => ToolOutput::error(message),
    }
}

/// `delegate`.
pub struct Delegate {
    session: SessionId,
    link: SessionLink,
    /// The named agents a child can be made from, `- name: description` lines (empty: none).
    agents: String,
}

impl Delegate {
    pub const NAME: &'static str = "delegate";

    pub fn new(session: SessionId, link: SessionLink, agents: String) -> Self {
        Self { session, link, agents }
    }
}

impl TypedTool for Delegate {
    type Args = DelegateArgs;
    const NAME: &'static str = Self::NAME;

    fn description(&self) -> String {
        "Hand a self-contained task to a child agent session with its own conversation, and get its \
         answer. The child gets at most your tools and a share of your remaining budget. With wait: \
         false it runs in the background (start several, then call wait); its result arrives as a \
         message. A refusal (too deep, too many children, no budget left) means: do it yourself."
            .to_owned()
            + &if self.agents.is_empty() {
                String::new()
            } else {
                format!("\n\nNamed agents (`agent`), each with its own instructions:{}", self.agents)
            }
    }

    async fn run(&self, args: DelegateArgs, cancel: CancellationToken) -> ToolOutput {
        let hub = match hub(&self.link) {
            Ok(hub) => hub,
            Err(message) => return ToolOutput::error(message),
        };
        answer(hub.delegate(self.session.clone(), args, cancel).await)
    }
}

/// `wait`.
pub struct Wait {
    session: SessionId,
    link: SessionLink,
}

impl Wait {
    pub const NAME: &'static str = "wait";

    pub fn new(session: SessionId, link: SessionLink) -> Self {
        Self { session, link }
    }
}

impl TypedTool for Wait {
    type Args = WaitArgs;
    const NAME: &'static str = Self::NAME;

    fn description(&self) -> String {
        "Wait for child sessions you delegated to with wait: false: until any (or all) of them ends, \
         a message arrives, or timeout_ms passes. Returns each finished child's answer once."
            .into()
    }

    async fn run(&self, args: WaitArgs, cancel: CancellationToken) -> ToolOutput {
        let hub = match hub(&self.link) {
            Ok(hub) => hub,
            Err(message) => return ToolOutput::error(message),
        };
        answer(hub.wait_children(self.session.clone(), args, cancel).await)
    }
}

/// `cancel_delegate`.
pub struct CancelDelegate {
    session: SessionId,
    link: SessionLink,
}

impl CancelDelegate {
    pub const NAME: &'static str = "cancel_delegate";

    pub fn new(session: SessionId, link: SessionLink) -> Self {
        Self { session, link }
    }
}

impl TypedTool for CancelDelegate {
    type Args = CancelArgs;
    const NAME: &'static str = Self::NAME;

    fn description(&self) -> String {
        "Stop a child session you delegated to; with archive: true also archive it, freeing its slot.".into()
    }

    async fn run(&self, args: CancelArgs, _cancel: CancellationToken) -> ToolOutput {
        let hub = match hub(&self.link) {
            Ok(hub) => hub,
            Err(message) => return ToolOutput::error(message),
        };
        answer(hub.cancel_child(self.session.clone(), args).await)
    }
}
