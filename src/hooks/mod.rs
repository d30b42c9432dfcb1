//! Hooks: the operator's programs and endpoints that watch, and may steer, a session's agent.
//!
//! The config file's `[[hooks]]` name an event (`session_start`, `turn_start`, `pre_tool_use`,
//! `post_tool_use`, `turn_end`, `compaction_start`, `session_end`), for tool events a
//! `matcher` (a regex over the whole tool name), and either a `command` (an argv, run without a
//! shell, the event as JSON on its stdin: [`command`]) or a `url` (the event POSTed as JSON:
//! [`url`]). A hook answers a [`HookReply`]: `allow`, `deny` or `modify`, with a `reason`,
//! `updated_arguments` (`pre_tool_use`), `updated_result` (`post_tool_use`) or
//! `additional_context` (`turn_start`, tool events). Empty output is `allow`.
//!
//! A hook that fails — cannot start, exits non-zero, answers something that is not a reply,
//! or outlives its `timeout_ms` (then it is killed, with its whole process group) — is decided
//! by its `on_error`: `allow` (the default: the failure is logged and ignored) or `deny` (as if
//! it had answered `deny`). One exception: a `pre_tool_use` hook that cannot *start* (a missing
//! or non-executable program, no descriptors or processes left) denies the call whatever its
//! `on_error` says, so a guard never fails open under load (security review 2, G2). Hooks of one event run one after another in the config file's
//! order; the first `deny` stops the rest, and a `modify` is what the next hook sees.
//!
//! Hooks are operator configuration only (sessions cannot bring their own), and command hooks
//! get the clean environment of [`crate::tools::child_env`], never deputy's secrets. This module only
//! runs hooks and folds their answers into a [`Verdict`]; the agent decides what a verdict
//! means at each event.

pub mod command;
pub mod url;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::ids::SessionId;
use crate::policy::Switch;

/// The most of a hook's answer that is read; a longer answer is a failure.
pub const MAX_REPLY_BYTES: usize = 64 * 1024;
/// `timeout_ms` when the config file does not set it.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// The largest `timeout_ms` accepted.
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum HookEventKind {
    /// A session was created (observe only).
    SessionStart,
    /// A turn starts; `additional_context` joins its prompt.
    TurnStart,
    /// A tool call is about to run: `deny` refuses it, `modify` rewrites its arguments.
    PreToolUse,
    /// A tool call ran: `deny` withholds its result, `modify` replaces it or adds to it.
    PostToolUse,
    /// A turn ended (observe only).
    TurnEnd,
    /// A compaction is about to start: `deny` skips it.
    CompactionStart,
    /// A session was archived (observe only).
    SessionEnd,
}

impl HookEventKind {
    /// Whether hooks of this event look at a tool (and so may have a `matcher`).
    pub fn is_tool_event(self) -> bool {
        matches!(self, Self::PreToolUse | Self::PostToolUse)
    }
}

/// One `[[hooks]]` entry of the config file, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    pub event: HookEventKind,
    /// A regex the whole tool name must match (tool events only); unset: every tool.
    pub matcher: Option<String>,
    /// The program and its arguments (no shell).
    pub command: Option<Vec<String>>,
    /// An `http(s)` endpoint the event is POSTed to.
    pub url: Option<String>,
    pub timeout_ms: Option<u64>,
    /// What a failed hook decides; default `allow`.
    pub on_error: Option<Switch>,
}

/// A config entry that cannot be a hook.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[[hooks]] entry {index} ({event}): {message}")]
pub struct HookConfigError {
    pub index: usize,
    pub event: HookEventKind,
    pub message: String,
}

/// What a hook runs.
#[derive(Debug, Clone)]
enum Action {
    Command(Vec<String>),
    Url(reqwest::Url),
}

/// A validated hook.
#[derive(Debug, Clone)]
struct Hook {
    /// Its place in the config file, for logs and messages.
    index: usize,
    event: HookEventKind,
    matcher: Option<Regex>,
    action: Action,
    timeout: Duration,
    on_error: Switch,
}

impl Hook {
    fn parse(index: usize, config: &HookConfig) -> Result<Self, HookConfigError> {
        let error = |message: String| HookConfigError { index, event: config.event, message };
        let matcher = match &config.matcher {
            Some(_) if !config.event.is_tool_event() => {
                return Err(error("a matcher applies to pre_tool_use and post_tool_use only".into()));
            }
            // Anchored: the regex must match the whole tool name.
            Some(pattern) => Some(
                Regex::new(&format!("^(?:{pattern})$"))
                    .map_err(|err| error(format!("bad matcher regex: {err}")))?,
            ),
            None => None,
        };
        let action = match (&config.command, &config.url) {
            (Some(argv), None) => {
                if argv.first().is_none_or(|program| program.trim().is_empty()) {
                    return Err(error("command must name a program: [\"/path/to/hook\", \"arg\", …]".into()));
                }
                Action::Command(argv.clone())
            }
            (None, Some(url)) => {
                let url = reqwest::Url::parse(url).map_err(|err| error(format!("bad url {url:?}: {err}")))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(error(format!("url must be http or https, not {}", url.scheme())));
                }
                Action::Url(url)
            }
            _ => return Err(error("give exactly one of command and url".into())),
        };
        let timeout_ms = config.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
            return Err(error(format!("timeout_ms must be between 1 and {MAX_TIMEOUT_MS}, not {timeout_ms}")));
        }
        Ok(Self {
            index,
            event: config.event,
            matcher,
            action,
            timeout: Duration::from_millis(timeout_ms),
            on_error: config.on_error.unwrap_or(Switch::Allow),
        })
    }

    fn applies_to(&self, event: &HookEvent) -> bool {
        self.event == event.event
            && match (&self.matcher, &event.tool_name) {
                (None, _) => true,
                (Some(matcher), Some(tool)) => matcher.is_match(tool),
                (Some(_), None) => false,
            }
    }
}

/// The operator's hooks, shared by every session (cloning is an `Arc` clone).
#[derive(Clone, Default)]
pub struct Hooks(Option<Arc<Inner>>);

struct Inner {
    hooks: Vec<Hook>,
    /// For `url` hooks: no redirects, so an endpoint cannot send the event elsewhere.
    client: reqwest::Client,
}

/// Events only: a hook's argv or URL may carry a credential, and debug output reaches logs.
impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hooks = self.0.as_ref().map_or(&[][..], |inner| &inner.hooks[..]);
        f.debug_list().entries(hooks.iter().map(|hook| hook.event)).finish()
    }
}

impl Hooks {
    /// Validates the config file's `[[hooks]]`: an unknown event (refused by serde), a bad
    /// matcher regex, both or neither of `command` and `url`, or a `timeout_ms` out of bounds.
    pub fn from_config(configs: &[HookConfig]) -> Result<Self, HookConfigError> {
        if configs.is_empty() {
            return Ok(Self::default());
        }
        let hooks = configs
            .iter()
            .enumerate()
            .map(|(index, config)| Hook::parse(index, config))
            .collect::<Result<_, _>>()?;
        let client =
            crate::tls::http_client().redirect(reqwest::redirect::Policy::none()).build().map_err(|err| {
                HookConfigError { index: 0, event: configs[0].event, message: format!("HTTP client: {err}") }
            })?;
        Ok(Self(Some(Arc::new(Inner { hooks, client }))))
    }

    /// Whether any hook listens to `event` (so callers can skip building the payload).
    pub fn listens(&self, event: HookEventKind) -> bool {
        self.0.as_ref().is_some_and(|inner| inner.hooks.iter().any(|hook| hook.event == event))
    }

    /// Runs the hooks that apply to `event`, in order, and folds their answers. `cancel` stops
    /// waiting (the running hook is killed) and answers [`Verdict::interrupted`].
    pub async fn run(&self, mut event: HookEvent, cancel: &CancellationToken) -> Verdict {
        let mut verdict = Verdict::default();
        let Some(inner) = &self.0 else { return verdict };
        for hook in &inner.hooks {
            if !hook.applies_to(&event) {
                continue;
            }
            let answer = tokio::select! {
                answer = invoke(hook, &inner.client, &event) => answer,
                () = cancel.cancelled() => {
                    verdict.interrupted = true;
                    return verdict;
                }
            };
            let reply = match answer {
                Ok(reply) => reply,
                Err(err) => {
                    tracing::warn!(hook = hook.index, event = %event.event, session_id = %event.session_id, error = %err, on_error = ?hook.on_error, "hook failed");
                    let not_started = matches!(err, HookError::NotStarted(_));
                    match hook.on_error {
                        Switch::Allow if !(not_started && event.event == HookEventKind::PreToolUse) => continue,
                        Switch::Allow | Switch::Deny => {
                            verdict.denied = Some(format!("hook {} failed: {err}", hook.index));
                            return verdict;
                        }
                    }
                }
            };
            tracing::debug!(hook = hook.index, event = %event.event, decision = ?reply.decision, "hook answered");
            if reply.decision == Decision::Deny {
                verdict.denied =
                    Some(reply.reason.unwrap_or_else(|| format!("hook {} gave no reason", hook.index)));
                return verdict;
            }
            if reply.decision == Decision::Modify {
                if let Some(arguments) = reply.updated_arguments {
                    event.arguments = Some(arguments.clone());
                    verdict.arguments = Some(arguments);
                }
                if let Some(content) = reply.updated_result {
                    if let Some(result) = &mut event.result {
                        result.content.clone_from(&content);
                    }
                    verdict.result = Some(content);
                }
            }
            verdict.context.extend(reply.additional_context.filter(|context| !context.is_empty()));
        }
        verdict
    }

    /// Runs an observe-only event's hooks: whatever they answer is logged, never acted on,
    /// and the operation goes on.
    pub async fn observe(&self, event: HookEvent) {
        let kind = event.event;
        if !self.listens(kind) {
            return;
        }
        let session_id = event.session_id.clone();
        if let Some(denied) = self.run(event, &CancellationToken::new()).await.denied {
            tracing::warn!(event = %kind, %session_id, reason = %denied, "a hook denied an event it can only observe");
        }
    }
}

async fn invoke(hook: &Hook, client: &reqwest::Client, event: &HookEvent) -> Result<HookReply, HookError> {
    let body =
        serde_json::to_vec(event).map_err(|err| HookError::Failed(format!("event not serializable: {err}")))?;
    let output = match &hook.action {
        Action::Command(argv) => command::run(argv, &body, hook.timeout).await?,
        Action::Url(url) => url::post(client, url, body, hook.timeout).await?,
    };
    HookReply::parse(&output)
}

/// Why a hook gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    #[error("timed out after {0} ms (killed)")]
    TimedOut(u128),
    /// The hook's program could not be started (missing, not executable, out of descriptors or
    /// processes). A `pre_tool_use` hook that could not start denies the call whatever its
    /// `on_error` says (security review 2, G2): a guard that never ran did not say yes.
    #[error("could not start {0}")]
    NotStarted(String),
    #[error("{0}")]
    Failed(String),
}

/// The JSON a hook receives. Fields that do not apply to the event are left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookEvent {
    pub event: HookEventKind,
    pub session_id: String,
    /// The turn's number in the session (1-based); absent for `session_start`/`session_end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// The tool call's arguments (as rewritten by earlier hooks, if any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// `post_tool_use`: what the tool answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<HookToolResult>,
    /// `turn_start`: the turn's prompt (absent when the turn only answers held calls).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `compaction_start`: `threshold`, `overflow` or `manual`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// `turn_end`: the turn's `stop_reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

impl HookEvent {
    /// An event of `session_id` with only the common fields set.
    pub fn new(event: HookEventKind, session_id: &SessionId, turn: Option<u64>) -> Self {
        Self {
            event,
            session_id: session_id.to_string(),
            turn,
            tool_name: None,
            tool_use_id: None,
            arguments: None,
            result: None,
            prompt: None,
            trigger: None,
            stop_reason: None,
        }
    }
}

/// A tool's result, as a `post_tool_use` hook sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookToolResult {
    pub content: String,
    pub is_error: bool,
}

/// A hook's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
    Modify,
}

/// What a hook answers. Unknown fields are ignored, so hooks may carry their own notes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HookReply {
    pub decision: Decision,
    #[serde(default)]
    pub reason: Option<String>,
    /// `pre_tool_use` + `modify`: the arguments the tool runs with.
    #[serde(default)]
    pub updated_arguments: Option<serde_json::Value>,
    /// `post_tool_use` + `modify`: the result the model sees instead of the tool's.
    #[serde(default)]
    pub updated_result: Option<String>,
    /// `turn_start`: joins the prompt; `pre_tool_use`, `post_tool_use`: appended to the result.
    #[serde(default)]
    pub additional_context: Option<String>,
}

impl HookReply {
    /// Parses a hook's output; empty output (or only whitespace) is `allow`.
    pub fn parse(output: &[u8]) -> Result<Self, HookError> {
        if output.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::allow());
        }
        serde_json::from_slice(output).map_err(|err| {
            let text = String::from_utf8_lossy(output);
            HookError::Failed(format!("answer is not a hook reply ({err}): {}", crate::text::excerpt(&text, 200)))
        })
    }

    fn allow() -> Self {
        Self {
            decision: Decision::Allow,
            reason: None,
            updated_arguments: None,
            updated_result: None,
            additional_context: None,
        }
    }
}

/// What the hooks of one event decided together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// A hook denied (or failed with `on_error = "deny"`): why.
    pub denied: Option<String>,
    /// The last `updated_arguments` (`pre_tool_use`).
    pub arguments: Option<serde_json::Value>,
    /// The last `updated_result` (`post_tool_use`).
    pub result: Option<String>,
    /// Every hook's `additional_context`, in order.
    pub context: Vec<String>,
    /// The turn was interrupted while a hook ran: the hooks after it did not run, and what the
    /// earlier ones answered is not to be acted on.
    pub interrupted: bool,
}

#[cfg(test)]
mod tests;
