//! The optional TOML config file and its sections, as read; [`super::AppState`] turns them into
//! what the server uses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use super::{AuthConfig, Environment};
use crate::agent::InboxLimits;
use crate::hooks::HookConfig;
use crate::llm::Reasoning;
use crate::llm::catalog::Wire;
use crate::llm::options::{CacheTtl, PromptCache, StreamUsage, TokenLimitField, WireOptions};
use crate::model::memory::MemoryBounds;
use crate::peers::PeerServerConfig;
use crate::policy::{PolicySwitches, Switch};
use crate::retrieval::documents::CollectionSpec;
use crate::sandbox::{NetworkPolicy, SandboxMode, SandboxSettings};
use crate::session::DelegationLimits;
use crate::tools::ToolDefaults;
use crate::tools::mcp::{McpPoolSettings, McpServerConfig};

/// The optional TOML config file.
///
/// ```toml
/// default_model = "ollama:llama3.2"
/// max_tokens = 8192
///
/// [providers.ollama]
/// api = "openai"                      # wire format: "openai" (Chat Completions) or "anthropic"
/// base_url = "http://127.0.0.1:11434/v1"
/// # api_key_env = "OLLAMA_API_KEY"    # env var holding the key, if the server needs one
/// context_window = 32768              # tokens; compaction keeps histories below it
/// # prompt_cache = "auto"             # "auto" | "off"; prompt_cache_ttl = "5m" | "1h"
/// # token_limit_field = "max_tokens"  # or "max_completion_tokens"; unset: by host and model
/// # stream_usage = true               # false for servers that reject `stream_options`
/// # reasoning = { effort = "medium" } # for sessions that do not ask; or { budget_tokens = 4096 }
/// [providers.ollama.models."llama3.2"] # its price, USD per million tokens (all four)
/// input = 0.10
/// output = 0.40
/// cache_write = 0.10
/// cache_read = 0.01
///
/// [tools]                             # defaults for sessions that do not choose
/// builtins = ["read_file", "list_dir", "search"]   # default: all five file tools
/// shell = false                       # default: off
/// shell_timeout_ms = 60000
/// shell_max_output_bytes = 65536
///
/// [mcp_servers.files]                 # sessions opt in with `mcp_servers: ["files"]`
/// command = "npx"
/// args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
/// env = { LOG_LEVEL = "warn" }        # part of the sharing key
/// idle_timeout_secs = 60              # overrides [mcp_pool] for this server
/// [mcp_servers.remote]
/// url = "https://mcp.example.com/mcp"
/// headers = { Authorization = "Bearer ..." }
///
/// [mcp_pool]                          # unused servers stay warm, then stop
/// idle_timeout_secs = 300
/// max_idle_servers = 32
///
/// [sessions]                          # the live set (hibernation); flags of `serve` override
/// idle_unload_secs = 600              # unload a session idle this long (with a store); 0: never
/// max_live_sessions = 1000            # beyond: unload the least recently used, or refuse (no store)
/// max_open_per_owner = 10000          # sessions not archived per owner (subject), with a store;
///                                     # default: no limit (set it on a server tenants share)
///
/// [store]                             # with --store postgres://… (redb keeps its key beside it)
/// key_file = "/etc/deputy/store.key"  # the key sealing secrets; every replica needs the same
///                                     # file (default: $XDG_DATA_HOME/deputy/postgres.key)
/// lease_secs = 15                     # a turn's lease unrenewed: how long a dead replica's
///                                     # sessions stay busy
///
/// [policy]                            # what callers may do, whatever they ask (PolicyConfig)
/// shell = "deny"                      # "allow" | "deny"; unset: stdio allows, HTTP denies
/// inline_mcp_commands = "deny"
/// inline_mcp_urls = "allow"
///
/// [[auth.tokens]]                     # HTTP callers: one subject and its scopes per token
/// subject = "alice"
/// token_env = "DEPUTY_TOKEN_ALICE"    # env var holding the token (at least 16 characters)
/// scopes = ["sessions", "shell"]
/// [[auth.tokens]]
/// subject = "ops"
/// token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
/// scopes = ["sessions:all"]
///
/// [[hooks]]                           # run by deputy at an event of every session
/// event = "pre_tool_use"              # session_start, turn_start, pre_tool_use, post_tool_use,
///                                     # turn_end, compaction_start, session_end
/// matcher = "write_file|edit_file"    # tool events: a regex over the whole tool name
/// command = ["/usr/local/bin/guard"]  # argv, no shell; the event as JSON on stdin
/// # url = "http://127.0.0.1:8080/hook" # or: the event POSTed as JSON
/// timeout_ms = 5000                   # default 10000; killed (whole process group) after it
/// on_error = "deny"                   # a failed hook: "allow" (default) or "deny"
/// ```
///
/// `[tools] shell_timeout_ms`, `shell_max_output_bytes` and `max_tool_output_cap_bytes` are
/// ceilings: a session may ask for less, never more. `[tools] allow_shell` and
/// `allow_inline_mcp_servers` are deprecated aliases of the `[policy]` switches, which win.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub default_model: Option<String>,
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Defaults for the tools of sessions that do not choose their own.
    #[serde(default)]
    pub tools: ToolDefaults,
    /// External MCP servers sessions may name in `mcp_servers`.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// How long unused MCP servers stay warm.
    #[serde(default)]
    pub mcp_pool: McpPoolSettings,
    /// What callers may do, whatever they ask.
    #[serde(default)]
    pub policy: PolicyConfig,
    /// How many sessions stay live, and for how long.
    #[serde(default)]
    pub sessions: SessionsConfig,
    /// `[store]`: settings of a database store.
    #[serde(default)]
    pub store: StoreConfig,
    /// Who may call over HTTP, as whom.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Bounds of every session's inbox (comms).
    #[serde(default)]
    pub inbox: InboxConfig,
    /// Bounds of what each owner may remember.
    #[serde(default)]
    pub memory: MemoryConfig,
    /// Other deputy servers this one's sessions may message (`send_message {to: "NAME:…"}`).
    #[serde(default)]
    pub peers: BTreeMap<String, PeerServerConfig>,
    /// Programs and endpoints that watch and steer sessions (see [`crate::hooks`]).
    #[serde(default)]
    pub hooks: Vec<HookConfig>,
    /// Where the live projector writes sessions' journals as files, if anywhere.
    #[serde(default)]
    pub projection: ProjectionConfig,
    /// Sub-agents: whether sessions may delegate, and the caps.
    #[serde(default)]
    pub delegation: DelegationConfig,
    /// The sandbox of the shell and stdio MCP servers (see [`crate::sandbox`]).
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// Where named agent profiles are read from.
    #[serde(default)]
    pub agents: DefinitionDirs,
    /// Where skills are read from.
    #[serde(default)]
    pub skills: DefinitionDirs,
    /// Document collections sessions search (`search_documents`), by name.
    #[serde(default)]
    pub documents: BTreeMap<String, DocumentsConfig>,
    /// An embeddings model: document search becomes hybrid (BM25 and vectors).
    #[serde(default)]
    pub embeddings: Option<EmbeddingsConfig>,
    /// Where traces go, if anywhere.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Endpoints told about sessions' turns and lifecycle (see [`crate::webhooks`]).
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
}

/// One `[[webhooks]]` entry.
///
/// ```toml
/// [[webhooks]]
/// url = "https://hooks.example.com/deputy"
/// events = ["turn.completed", "turn.failed", "session.archived"]
/// secret_env = "DEPUTY_WEBHOOK_SECRET"   # whsec_… (Standard Webhooks)
/// name = "ops"                           # optional: the key of its cursor (default: the url)
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
    pub events: Vec<String>,
    pub secret_env: String,
    pub name: Option<String>,
}

/// The `[telemetry]` section: traces of turns, model calls and tool calls over OTLP/HTTP.
/// Without it, the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) turns the
/// export on; with neither, nothing is exported and nothing costs.
///
/// ```toml
/// [telemetry]
/// otlp_endpoint = "http://127.0.0.1:4318"   # a base URL: traces go to …/v1/traces
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    pub otlp_endpoint: Option<String>,
}

/// The `[embeddings]` section.
///
/// ```toml
/// [embeddings]
/// model = "openai:text-embedding-3-small"   # provider:model, any OpenAI-compatible provider
/// dimensions = 512                          # optional, for models that can shorten vectors
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsConfig {
    pub model: String,
    pub dimensions: Option<u32>,
}

/// A `[documents.NAME]` section: the files of one collection.
///
/// ```toml
/// [documents.handbook]
/// paths = ["docs/", "README.md"]   # relative to the workspace
/// glob = "**/*.md"                 # default: every text file under the paths
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DocumentsConfig {
    pub paths: Vec<PathBuf>,
    pub glob: Option<String>,
}

impl DocumentsConfig {
    /// The collection `name`, its relative paths resolved against `workspace`.
    pub fn spec(&self, name: &str, workspace: &Path) -> Result<CollectionSpec, String> {
        crate::catalog::is_definition_name(name)
            .then_some(())
            .ok_or_else(|| format!("[documents.{name}]: a collection's name is 1-64 of a-z, 0-9 and -"))?;
        if self.paths.is_empty() {
            return Err(format!("[documents.{name}] paths: give at least one file or directory"));
        }
        let paths = self
            .paths
            .iter()
            .map(|path| {
                let absolute = if path.is_absolute() { path.clone() } else { workspace.join(path) };
                (absolute, path.clone())
            })
            .collect();
        Ok(CollectionSpec { name: name.to_owned(), paths, glob: self.glob.clone() })
    }
}

/// The `[agents]` and `[skills]` sections: directories of definitions.
///
/// ```toml
/// [agents]
/// dirs = ["/etc/deputy/agents"]   # default: $XDG_CONFIG_HOME/deputy/agents (~/.config/…)
/// workspace_dirs = true           # also <workspace>/.deputy/agents and .claude/agents
/// [skills]
/// dirs = ["/etc/deputy/skills"]   # default: $XDG_CONFIG_HOME/deputy/skills
/// workspace_dirs = false          # default: a repository cannot give itself agents or skills
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DefinitionDirs {
    pub dirs: Option<Vec<PathBuf>>,
    #[serde(default)]
    pub workspace_dirs: bool,
}

impl DefinitionDirs {
    /// The directories to read `kind` (`agents`, `skills`) from, first wins: the workspace's
    /// `.deputy/KIND` and `.claude/KIND` where the operator opted in (a project's own
    /// definitions shadow the user's, as in Claude Code), then `dirs`, else the default one.
    pub fn resolve(&self, kind: &str, env: &Environment, workspace: Option<&Path>) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if self.workspace_dirs
            && let Some(workspace) = workspace
        {
            dirs.push(workspace.join(".deputy").join(kind));
            dirs.push(workspace.join(".claude").join(kind));
        }
        match &self.dirs {
            Some(configured) => dirs.extend(configured.iter().cloned()),
            None => dirs.extend(config_home(env).map(|base| base.join("deputy").join(kind))),
        }
        dirs
    }
}

/// `$XDG_CONFIG_HOME`, else `~/.config`.
fn config_home(env: &Environment) -> Option<PathBuf> {
    match env.get("XDG_CONFIG_HOME") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => Some(PathBuf::from(env.get("HOME")?).join(".config")),
    }
}

/// The `[sandbox]` section.
///
/// ```toml
/// [sandbox]
/// mode = "required"     # or "best_effort", "off"; default: required for `serve --http`,
///                       # best_effort otherwise
/// network = "deny"      # or "allow"; default: deny
/// ```
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: Option<SandboxMode>,
    pub network: Option<NetworkPolicy>,
}

impl SandboxConfig {
    /// The settings in force: what the file says, else the transport's default mode
    /// (`required` when serving HTTP, `best_effort` otherwise) and no network.
    pub fn settings(&self, serves_http: bool) -> SandboxSettings {
        let default_mode = if serves_http { SandboxMode::Required } else { SandboxMode::BestEffort };
        SandboxSettings { mode: self.mode.unwrap_or(default_mode), network: self.network.unwrap_or_default() }
    }
}

/// The `[delegation]` section.
///
/// ```toml
/// [delegation]
/// enabled = true                   # sessions get delegate / wait / cancel_delegate by default
/// max_depth = 1                    # a caller's session may delegate; its children may not
/// max_children_per_session = 8     # children not archived, per session
/// max_live_delegated = 32          # delegated sessions not archived, on this server
/// max_live_delegated_per_owner = 16   # of those, one owner's (subject's)
/// default_child_budget = { max_tokens = 200000 }   # where delegate names no budget
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DelegationConfig {
    pub enabled: Option<bool>,
    pub max_depth: Option<u32>,
    pub max_children_per_session: Option<usize>,
    pub max_live_delegated: Option<usize>,
    pub max_live_delegated_per_owner: Option<usize>,
    pub default_child_budget: Option<crate::model::Budget>,
}

impl DelegationConfig {
    pub fn limits(&self) -> DelegationLimits {
        let default = DelegationLimits::default();
        DelegationLimits {
            enabled: self.enabled.unwrap_or(default.enabled),
            max_depth: self.max_depth.unwrap_or(default.max_depth),
            max_children_per_session: self.max_children_per_session.unwrap_or(default.max_children_per_session),
            max_live_delegated: self.max_live_delegated.unwrap_or(default.max_live_delegated),
            max_live_delegated_per_owner: self
                .max_live_delegated_per_owner
                .unwrap_or(default.max_live_delegated_per_owner),
            default_budget: self.default_child_budget.unwrap_or(default.default_budget),
        }
    }
}

/// The `[inbox]` section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct InboxConfig {
    /// Waiting messages per session at most (default 256).
    pub capacity: Option<usize>,
    /// Hops after which a message is parked instead of delivered (default 8).
    pub max_hops: Option<u32>,
    /// Turns a host-mode session starts by itself between two caller turns (default 50).
    pub max_auto_turns: Option<u32>,
    /// Bytes of waiting mail the live sessions of one owner hold together (default 64 MiB).
    pub max_waiting_bytes_per_owner: Option<usize>,
}

impl InboxConfig {
    pub fn limits(&self) -> InboxLimits {
        let default = InboxLimits::default();
        InboxLimits {
            capacity: self.capacity.unwrap_or(default.capacity),
            max_hops: self.max_hops.unwrap_or(default.max_hops),
            max_auto_turns: self.max_auto_turns.unwrap_or(default.max_auto_turns),
            max_waiting_bytes_per_owner: self
                .max_waiting_bytes_per_owner
                .unwrap_or(default.max_waiting_bytes_per_owner),
        }
    }
}

/// The `[memory]` section: what one owner (a token's subject) may `remember`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Remembered memories per owner at most (default 10,000).
    pub max_per_owner: Option<u64>,
    /// Bytes of remembered text per owner at most (default 64 MiB).
    pub max_bytes_per_owner: Option<u64>,
}

impl MemoryConfig {
    pub fn bounds(&self) -> MemoryBounds {
        let default = MemoryBounds::default();
        MemoryBounds {
            max_per_owner: self.max_per_owner.unwrap_or(default.max_per_owner),
            max_bytes_per_owner: self.max_bytes_per_owner.unwrap_or(default.max_bytes_per_owner),
        }
    }
}

/// The `[projection]` section: with `dir`, a long-running deputy writes every session's journal
/// under `dir/sessions/<id>/` after each commit (see `crate::session::projection`), in the
/// background; a projection failure is logged and never fails a turn.
///
/// ```toml
/// [projection]
/// dir = "/srv/deputy/projection"
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProjectionConfig {
    pub dir: Option<PathBuf>,
}

/// The `[policy]` section: limits the operator sets for every caller.
///
/// ```toml
/// [policy]
/// workspace_roots = ["/srv/work"]   # default: the server's --workspace only
/// shell = "allow"                   # "allow" | "deny"
/// inline_mcp_commands = "deny"      # inline MCP servers with a `command` (programs on this host)
/// inline_mcp_urls = "deny"          # inline MCP servers with a `url` (requests from this host)
/// inline_mcp_private_urls = "deny"  # may those reach loopback/private/link-local addresses?
/// webhook_private_urls = "deny"     # may [[webhooks]] reach them?
/// anonymous_writes = "deny"         # may token-less loopback HTTP callers write files?
/// ```
///
/// An unset switch takes the surface's default: stdio and the background server's clients
/// allow (the caller is the user's own client), `serve --http` denies unless the caller's token
/// has the scope (`shell`, `mcp:inline`). An explicit `deny` is a hard deny no scope overrides;
/// an explicit `allow` allows every caller. See [`crate::policy`].
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// A session's `workspace` must be one of these directories or below one.
    pub workspace_roots: Option<Vec<PathBuf>>,
    pub shell: Option<Switch>,
    pub inline_mcp_commands: Option<Switch>,
    pub inline_mcp_urls: Option<Switch>,
    pub inline_mcp_private_urls: Option<Switch>,
    /// `[[webhooks]]` endpoints on loopback, private or link-local addresses: denied unless
    /// `allow` (the operator's own choice, never a caller's).
    pub webhook_private_urls: Option<Switch>,
    pub anonymous_writes: Option<Switch>,
}

impl PolicyConfig {
    pub fn switches(&self) -> PolicySwitches {
        PolicySwitches {
            shell: self.shell,
            inline_mcp_commands: self.inline_mcp_commands,
            inline_mcp_urls: self.inline_mcp_urls,
            inline_mcp_private_urls: self.inline_mcp_private_urls,
            anonymous_writes: self.anonymous_writes,
        }
    }
}

/// The `[store]` section: what a database store needs beyond its URL.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The key file sealing the store's secrets. A redb store keeps its key beside its file; a
    /// database's replicas must all read the same key, so the operator places it.
    pub key_file: Option<PathBuf>,
    /// How long a turn's lease lasts unrenewed: a replica that dies mid-turn holds its
    /// sessions at most this long. Default 15.
    pub lease_secs: Option<u64>,
}

impl StoreConfig {
    /// `lease_secs`, at least one second.
    pub fn lease_ttl(&self) -> anyhow::Result<std::time::Duration> {
        match self.lease_secs {
            None => Ok(std::time::Duration::from_secs(15)),
            Some(0) => anyhow::bail!("[store] lease_secs must be at least 1"),
            Some(secs) => Ok(std::time::Duration::from_secs(secs)),
        }
    }
}

/// The `[sessions]` section: bounds of the live set (see [`SessionLimits`]).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    pub idle_unload_secs: Option<u64>,
    pub max_live_sessions: Option<usize>,
    pub max_open_per_owner: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub api: Wire,
    pub base_url: String,
    pub api_key_env: Option<String>,
    /// The context window of this provider's models, in tokens (for compaction).
    pub context_window: Option<u64>,
    /// Prices of this provider's models, by model name (`[providers.NAME.models."MODEL"]`,
    /// USD per million tokens: `input`, `output`, `cache_write`, `cache_read`, all four); they
    /// win over the list prices deputy knows.
    #[serde(default)]
    pub models: BTreeMap<String, crate::llm::pricing::Price>,
    /// `"auto"` (default) or `"off"`: prompt caching (see [`PromptCache`]).
    #[serde(default)]
    pub prompt_cache: PromptCache,
    /// `"5m"` (default) or `"1h"`: how long Anthropic keeps a cached prefix.
    #[serde(default)]
    pub prompt_cache_ttl: CacheTtl,
    /// `"max_tokens"` or `"max_completion_tokens"`; unset: by host and model.
    pub token_limit_field: Option<TokenLimitField>,
    /// `false` for OpenAI-compatible servers that reject `stream_options`.
    #[serde(default)]
    pub stream_usage: StreamUsage,
    /// Reasoning for sessions that do not ask (`{ effort = "medium" }`, `{ budget_tokens = 4096 }`).
    pub reasoning: Option<Reasoning>,
}

impl ProviderConfig {
    /// How the provider is spoken to, from this section.
    pub fn wire_options(&self) -> WireOptions {
        WireOptions {
            prompt_cache: self.prompt_cache,
            prompt_cache_ttl: self.prompt_cache_ttl,
            token_limit_field: self.token_limit_field,
            stream_usage: self.stream_usage,
            reasoning: self.reasoning,
        }
    }
}

impl ConfigFile {
    /// Reads `path`. A missing file is an error only when the path was given explicitly.
    pub fn load(path: &Path, explicit: bool) -> anyhow::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).with_context(|| format!("config file {}", path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !explicit => Ok(Self::default()),
            Err(err) => Err(err).with_context(|| format!("config file {}", path.display())),
        }
    }

    /// `$XDG_CONFIG_HOME/deputy/config.toml`, else `~/.config/deputy/config.toml`.
    pub fn default_path(env: &Environment) -> Option<PathBuf> {
        Some(config_home(env)?.join("deputy").join("config.toml"))
    }
}
