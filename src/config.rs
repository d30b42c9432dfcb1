//! Configuration, resolved once at start-up into an immutable [`AppState`].
//!
//! Sources, by precedence: command-line flags (and their `DEPUTY_*` env vars, via clap), the
//! optional TOML config file, then the providers' usual environment variables
//! (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, `OPENAI_API_KEY`, `OPENAI_BASE_URL`). Nothing
//! reads the environment after this; requests never mutate it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::Deserialize;

use crate::agent::{AgentFactory, InboxLimits};
use crate::caller::Scope;
use crate::hooks::{HookConfig, Hooks};
use crate::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use crate::llm::openai::{OpenAiConfig, OpenAiProvider};
use crate::llm::registry::ProviderRegistry;
use crate::llm::retry::{RetryPolicy, RetryingProvider};
use crate::llm::{HttpTimeouts, Provider};
use crate::peers::{PeerServerConfig, RemotePeers};
use crate::policy::{PolicySwitches, Switch};
use crate::session::DelegationLimits;
use crate::session::SessionLimits;
use crate::store::SharedStore;
use crate::tools::mcp::{self, McpFactory, McpPoolSettings, McpServerConfig};
use crate::tools::{ToolDefaults, Workspace};

pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The process environment, captured once so configuration is a pure function of it.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: BTreeMap<String, String>,
}

impl Environment {
    pub fn from_process() -> Self {
        Self { vars: std::env::vars().collect() }
    }

    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self { vars: pairs.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect() }
    }

    /// The given variables that are set (and not empty), for handing over to another process.
    pub fn subset(&self, names: &[String]) -> BTreeMap<String, String> {
        names.iter().filter_map(|name| Some((name.clone(), self.get(name)?.to_owned()))).collect()
    }

    pub fn from_map(vars: BTreeMap<String, String>) -> Self {
        Self { vars }
    }

    /// A variable's value; an empty value counts as unset.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).filter(|value| !value.is_empty())
    }
}

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
    /// Who may call over HTTP, as whom.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Bounds of every session's inbox (comms).
    #[serde(default)]
    pub inbox: InboxConfig,
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
}

/// The `[delegation]` section.
///
/// ```toml
/// [delegation]
/// enabled = true                   # sessions get delegate / wait / cancel_delegate by default
/// max_depth = 1                    # a caller's session may delegate; its children may not
/// max_children_per_session = 8     # children not archived, per session
/// max_live_delegated = 32          # delegated sessions not archived, on this server
/// default_child_budget = { max_tokens = 200000 }   # where delegate names no budget
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DelegationConfig {
    pub enabled: Option<bool>,
    pub max_depth: Option<u32>,
    pub max_children_per_session: Option<usize>,
    pub max_live_delegated: Option<usize>,
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
}

impl InboxConfig {
    pub fn limits(&self) -> InboxLimits {
        let default = InboxLimits::default();
        InboxLimits {
            capacity: self.capacity.unwrap_or(default.capacity),
            max_hops: self.max_hops.unwrap_or(default.max_hops),
            max_auto_turns: self.max_auto_turns.unwrap_or(default.max_auto_turns),
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
}

impl PolicyConfig {
    pub fn switches(&self) -> PolicySwitches {
        PolicySwitches {
            shell: self.shell,
            inline_mcp_commands: self.inline_mcp_commands,
            inline_mcp_urls: self.inline_mcp_urls,
            inline_mcp_private_urls: self.inline_mcp_private_urls,
        }
    }
}

/// The `[auth]` section: the tokens HTTP callers present, each naming a subject (who owns the
/// sessions it creates) and its scopes. `--token` may be used beside them; it is the local
/// user, with every scope.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
}

/// One `[[auth.tokens]]` entry: exactly one of `token_env` and `token_sha256`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub subject: String,
    /// The environment variable holding the token (at least 16 characters).
    pub token_env: Option<String>,
    /// The token's SHA-256, 64 hex digits, so the config file holds no secret.
    pub token_sha256: Option<String>,
    pub scopes: Vec<Scope>,
}

/// How a configured token is recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSecret {
    Plain(String),
    Sha256([u8; 32]),
}

/// A token the HTTP guard accepts, and the caller it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessToken {
    pub subject: String,
    pub secret: TokenSecret,
    pub scopes: Vec<Scope>,
}

/// Presented tokens are trimmed, so spaces cannot count towards the length (F17).
pub const MIN_TOKEN_CHARS: usize = 16;

impl AuthConfig {
    /// The tokens, their secrets read from `env`. Fails on an entry with neither or both of
    /// `token_env` and `token_sha256`, an unset or short token, a malformed digest, or a subject
    /// given twice.
    pub fn resolve(&self, env: &Environment) -> anyhow::Result<Vec<AccessToken>> {
        let mut subjects = std::collections::BTreeSet::new();
        self.tokens
            .iter()
            .map(|entry| {
                let subject = entry.subject.trim();
                anyhow::ensure!(!subject.is_empty(), "[[auth.tokens]]: a subject must not be empty");
                anyhow::ensure!(
                    subjects.insert(subject),
                    "[[auth.tokens]]: the subject {subject:?} is given twice"
                );
                let secret = match (&entry.token_env, &entry.token_sha256) {
                    (Some(var), None) => {
                        let token = env.get(var).map(str::trim).unwrap_or_default();
                        anyhow::ensure!(
                            token.chars().count() >= MIN_TOKEN_CHARS,
                            "[[auth.tokens]] {subject:?}: {var} must hold a token of at least {MIN_TOKEN_CHARS} \
                             characters"
                        );
                        TokenSecret::Plain(token.to_owned())
                    }
                    (None, Some(hex)) => TokenSecret::Sha256(parse_sha256(hex).ok_or_else(|| {
                        anyhow::anyhow!("[[auth.tokens]] {subject:?}: token_sha256 must be 64 hex digits")
                    })?),
                    _ => {
                        anyhow::bail!("[[auth.tokens]] {subject:?}: give exactly one of token_env and token_sha256")
                    }
                };
                Ok(AccessToken { subject: subject.to_owned(), secret, scopes: entry.scopes.clone() })
            })
            .collect()
    }
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(digest)
}

/// The `[sessions]` section: bounds of the live set (see [`SessionLimits`]).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    pub idle_unload_secs: Option<u64>,
    pub max_live_sessions: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub api: WireApi,
    pub base_url: String,
    pub api_key_env: Option<String>,
    /// The context window of this provider's models, in tokens (for compaction).
    pub context_window: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WireApi {
    Openai,
    Anthropic,
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
        let base = match env.get("XDG_CONFIG_HOME") {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(env.get("HOME")?).join(".config"),
        };
        Some(base.join("deputy").join("config.toml"))
    }
}

/// Start-up choices from the command line.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub model: Option<String>,
    pub config: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    /// The session store file; `None` means the default location.
    pub store: Option<PathBuf>,
    /// Run without a store: sessions live as long as the process.
    pub ephemeral: bool,
    /// `serve --idle-unload-secs`, over the config file's `[sessions]`.
    pub idle_unload_secs: Option<u64>,
    /// `serve --max-live-sessions`, over the config file's `[sessions]`.
    pub max_live_sessions: Option<usize>,
}

impl Settings {
    /// The live set's bounds: the flags, else the config file, else the defaults.
    pub fn session_limits(&self, config: &SessionsConfig) -> SessionLimits {
        let idle_unload_secs =
            self.idle_unload_secs.or(config.idle_unload_secs).unwrap_or(SessionLimits::DEFAULT_IDLE_UNLOAD_SECS);
        SessionLimits {
            idle_unload: std::time::Duration::from_secs(idle_unload_secs),
            max_live: self
                .max_live_sessions
                .or(config.max_live_sessions)
                .unwrap_or(SessionLimits::DEFAULT_MAX_LIVE),
        }
    }
}

/// Everything built once and shared read-only by every request. The config file and the
/// provider registry are consumed into the factory (and the MCP pool): nothing else reads them.
#[derive(Debug, Clone)]
pub struct AppState {
    pub factory: AgentFactory,
    /// The session store, opened once per process (`None`: ephemeral).
    pub store: SharedStore,
    /// External MCP servers, shared by every session (the factory holds the same `Arc`).
    pub mcp: Arc<McpFactory>,
    /// Bounds of the live set.
    pub limits: SessionLimits,
    /// The config file's `[[auth.tokens]]`, secrets read (used by `serve --http`).
    pub tokens: Vec<AccessToken>,
    /// The config file's `[inbox]`.
    pub inbox: InboxLimits,
    /// The config file's `[delegation]`.
    pub delegation: DelegationLimits,
    /// The config file's `[peers.NAME]`, tokens read.
    pub remote: RemotePeers,
    /// `[projection] dir`: where the live projector writes, if anywhere.
    pub projection: Option<PathBuf>,
}

/// `$XDG_DATA_HOME/deputy/sessions.redb`, else `~/.local/share/deputy/sessions.redb`.
pub fn default_store_path(env: &Environment) -> Option<PathBuf> {
    let base = match env.get("XDG_DATA_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env.get("HOME")?).join(".local").join("share"),
    };
    Some(base.join("deputy").join("sessions.redb"))
}

/// Opens the session store the settings ask for, once.
#[cfg(feature = "session-store")]
fn open_store(settings: &Settings, env: &Environment) -> anyhow::Result<SharedStore> {
    if settings.ephemeral {
        return Ok(None);
    }
    let path = match &settings.store {
        Some(path) => path.clone(),
        None => default_store_path(env)
            .context("no place for the session store: set --store / DEPUTY_STORE (or HOME), or use --ephemeral")?,
    };
    let store = crate::store::RedbStore::open(&path)?;
    tracing::info!(path = %path.display(), "session store open");
    Ok(Some(Arc::new(store)))
}

/// This build has no store: every run is ephemeral, and asking for a file is an error.
#[cfg(not(feature = "session-store"))]
fn open_store(settings: &Settings, _env: &Environment) -> anyhow::Result<SharedStore> {
    if let Some(path) = &settings.store {
        anyhow::bail!(
            "--store {} needs persistence, which this build of deputy does not include (feature session-store)",
            path.display()
        );
    }
    Ok(None)
}

impl AppState {
    pub fn load(settings: &Settings, env: &Environment) -> anyhow::Result<Self> {
        let config = load_config_file(settings, env)?;
        let mcp = Arc::new(McpFactory::new(config.mcp_pool.into()));
        let factory = agent_factory(settings, env, &config, mcp.clone())?;
        let store = open_store(settings, env)?;
        let limits = settings.session_limits(&config.sessions);
        let tokens = config.auth.resolve(env)?;
        let remote = RemotePeers::new(&config.peers, mcp.clone(), |variable| env.get(variable).map(str::to_owned))
            .map_err(anyhow::Error::msg)?;
        let projection = config.projection.dir.clone();
        let (inbox, delegation) = (config.inbox.limits(), config.delegation.limits());
        Ok(Self { factory, store, mcp, limits, tokens, inbox, delegation, remote, projection })
    }
}

/// The config file the settings name (`--config`), else the default one if it exists, else
/// none.
pub fn load_config_file(settings: &Settings, env: &Environment) -> anyhow::Result<ConfigFile> {
    match (&settings.config, ConfigFile::default_path(env)) {
        (Some(path), _) => ConfigFile::load(path, true),
        (None, Some(path)) => ConfigFile::load(&path, false),
        (None, None) => Ok(ConfigFile::default()),
    }
}

/// The agent factory one client's settings, config file and environment describe (default
/// model and workspace, providers and their credentials, tool defaults, named MCP servers),
/// over an MCP server pool owned elsewhere. It opens no store, so a background server builds
/// one per attached client while it owns the store and the pool once.
pub fn agent_factory(
    settings: &Settings,
    env: &Environment,
    config: &ConfigFile,
    mcp: Arc<McpFactory>,
) -> anyhow::Result<AgentFactory> {
    let providers = Arc::new(provider_registry(config, env));
    let workspace_dir = match &settings.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("current directory")?,
    };
    let workspace =
        Workspace::new(&workspace_dir).with_context(|| format!("workspace {}", workspace_dir.display()))?;
    let default_model = settings.model.clone().or_else(|| config.default_model.clone());
    let windows = config
        .providers
        .iter()
        .filter_map(|(name, provider)| provider.context_window.map(|window| (name.clone(), window)))
        .collect();
    for (name, server) in &config.mcp_servers {
        mcp::config::spec_of(name, server).map_err(|err| anyhow::anyhow!("config file: {err}"))?;
    }
    let hooks = Hooks::from_config(&config.hooks).map_err(|err| anyhow::anyhow!("config file: {err}"))?;
    let mut factory = AgentFactory::new(providers, default_model, Some(workspace))
        .with_context_windows(windows)
        .with_tool_defaults(ToolDefaults {
            workspace_roots: config.policy.workspace_roots.clone(),
            policy: config.policy.switches(),
            ..config.tools.clone()
        })
        .with_mcp(mcp, config.mcp_servers.clone())
        .with_hooks(hooks);
    if let Some(max_tokens) = config.max_tokens {
        factory = factory.with_default_max_tokens(max_tokens);
    }
    Ok(factory)
}

/// The names of the environment variables that configure providers: the built-in ones and
/// each `api_key_env` of the config file. A client attaching to a background server hands over
/// these and no others.
pub fn provider_variables(config: &ConfigFile) -> Vec<String> {
    let mut names: Vec<String> = PROVIDER_VARIABLES.iter().map(|name| (*name).to_owned()).collect();
    names.extend(config.providers.values().filter_map(|provider| provider.api_key_env.clone()));
    names.sort();
    names.dedup();
    names
}

/// The variables [`provider_registry`] reads for the built-in providers.
const PROVIDER_VARIABLES: &[&str] =
    &["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"];

/// The built-in `anthropic` and `openai` providers from the environment, plus the config
/// file's named providers. Each is wrapped in the retry gate.
pub fn provider_registry(config: &ConfigFile, env: &Environment) -> ProviderRegistry {
    let mut registry = ProviderRegistry::new();
    let base_url = env.get("ANTHROPIC_BASE_URL").unwrap_or(ANTHROPIC_DEFAULT_BASE_URL).to_owned();
    match env.get("ANTHROPIC_API_KEY") {
        Some(key) => registry.insert("anthropic", anthropic(base_url, key.to_owned())),
        None => registry.insert_unavailable(
            "anthropic",
            "no API key: set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL to use a proxy or gateway)",
        ),
    }

    let base_url = env.get("OPENAI_BASE_URL").unwrap_or(OPENAI_DEFAULT_BASE_URL).to_owned();
    let key = env.get("OPENAI_API_KEY").map(str::to_owned);
    // A compatible local server (Ollama, vLLM, llama.cpp) usually needs no key; OpenAI does.
    if key.is_none() && base_url == OPENAI_DEFAULT_BASE_URL {
        registry.insert_unavailable(
            "openai",
            "no API key: set OPENAI_API_KEY, or OPENAI_BASE_URL to use a compatible server such as Ollama",
        );
    } else {
        registry.insert("openai", openai(base_url, key));
    }

    for (name, provider) in &config.providers {
        let key = match &provider.api_key_env {
            Some(var) => match env.get(var) {
                Some(key) => Some(key.to_owned()),
                None => {
                    registry.insert_unavailable(name, format!("no API key: set {var}"));
                    continue;
                }
            },
            None => None,
        };
        let base_url = provider.base_url.clone();
        match provider.api {
            WireApi::Openai => registry.insert(name, openai(base_url, key)),
            WireApi::Anthropic => registry.insert(name, anthropic(base_url, key.unwrap_or_default())),
        }
    }
    registry
}

fn anthropic(base_url: String, api_key: String) -> Arc<dyn Provider> {
    let inner = AnthropicProvider::new(AnthropicConfig { base_url, api_key, timeouts: HttpTimeouts::default() });
    Arc::new(RetryingProvider::new(Arc::new(inner), RetryPolicy::default()))
}

fn openai(base_url: String, api_key: Option<String>) -> Arc<dyn Provider> {
    let inner = OpenAiProvider::new(OpenAiConfig { base_url, api_key, timeouts: HttpTimeouts::default() });
    Arc::new(RetryingProvider::new(Arc::new(inner), RetryPolicy::default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn providers_follow_the_environment_and_the_config_file() {
        let config: ConfigFile = toml::from_str(
            r#"
            default_model = "ollama:llama3.2"
            [providers.ollama]
            api = "openai"
            base_url = "http://127.0.0.1:11434/v1"
            context_window = 32768
            [providers.gateway]
            api = "anthropic"
            base_url = "http://127.0.0.1:9/anthropic"
            api_key_env = "GATEWAY_KEY"
            "#,
        )
        .unwrap();
        let registry = provider_registry(&config, &Environment::default());
        let error = registry.resolve("anthropic:claude-sonnet-4-5").unwrap_err();
        assert_eq!(error.code(), ErrorCode::AgentError);
        assert!(error.to_string().contains("ANTHROPIC_API_KEY"));
        assert!(registry.resolve("openai:gpt-4o-mini").unwrap_err().to_string().contains("OPENAI_API_KEY"));
        assert!(registry.resolve("gateway:claude").unwrap_err().to_string().contains("GATEWAY_KEY"));
        assert!(registry.resolve("ollama:llama3.2:3b").is_ok());
        assert_eq!(config.providers["ollama"].context_window, Some(32768));

        let env =
            Environment::from_pairs([("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"), ("ANTHROPIC_API_KEY", "k")]);
        let registry = provider_registry(&ConfigFile::default(), &env);
        assert!(registry.resolve("openai:llama3.2").is_ok(), "a compatible server needs no key");
        assert!(registry.resolve("anthropic:claude-sonnet-4-5").is_ok());
    }

    #[test]
    fn the_tools_section_sets_session_defaults() {
        use crate::tools::BuiltinTool;
        let config: ConfigFile = toml::from_str(
            r#"
            [tools]
            builtins = ["read_file", "search"]
            shell = true
            shell_timeout_ms = 5000
            allow_inline_mcp_servers = false
            "#,
        )
        .unwrap();
        assert_eq!(config.tools.builtins, Some(vec![BuiltinTool::ReadFile, BuiltinTool::Search]));
        assert_eq!((config.tools.allow_shell, config.tools.allow_inline_mcp_servers), (None, Some(false)));
        assert!(config.tools.shell);
        assert_eq!((config.tools.shell_timeout_ms, config.tools.shell_max_output_bytes), (Some(5000), None));
        assert!(toml::from_str::<ConfigFile>("[tools]\nbuiltins = [\"rm\"]").is_err());
        assert!(toml::from_str::<ConfigFile>("[tools]\nshel = true").is_err());
    }

    #[test]
    fn mcp_servers_and_the_pool_come_from_the_config_file() {
        let config: ConfigFile = toml::from_str(
            r#"
            [mcp_servers.files]
            command = "mcp-server-filesystem"
            args = ["/srv"]
            env = { LOG = "1" }
            idle_timeout_secs = 60
            [mcp_servers.web]
            url = "http://127.0.0.1:9/mcp"
            headers = { Authorization = "Bearer t" }
            [mcp_pool]
            idle_timeout_secs = 30
            max_idle_servers = 2
            "#,
        )
        .unwrap();
        assert_eq!(config.mcp_servers["files"].args, ["/srv"]);
        assert_eq!(config.mcp_servers["web"].headers["Authorization"].expose(), "Bearer t");
        let pool = crate::tools::mcp::McpPoolConfig::from(config.mcp_pool);
        assert_eq!((pool.idle_timeout.as_secs(), pool.max_idle), (30, 2));
        assert!(toml::from_str::<ConfigFile>("[mcp_servers.x]\ncommand = \"a\"\nurl2 = \"b\"").is_err());
    }

    #[test]
    fn the_sessions_section_bounds_the_live_set_and_flags_override_it() {
        use std::time::Duration;
        let config: ConfigFile =
            toml::from_str("[sessions]\nidle_unload_secs = 60\nmax_live_sessions = 5").unwrap();
        let limits = Settings::default().session_limits(&config.sessions);
        assert_eq!(limits, SessionLimits { idle_unload: Duration::from_secs(60), max_live: 5 });
        let flags = Settings { max_live_sessions: Some(2), ..Settings::default() };
        assert_eq!(flags.session_limits(&config.sessions).max_live, 2);
        assert_eq!(flags.session_limits(&config.sessions).idle_unload, Duration::from_secs(60));
        assert_eq!(Settings::default().session_limits(&SessionsConfig::default()), SessionLimits::default());
        assert!(toml::from_str::<ConfigFile>("[sessions]\nmax_live = 5").is_err());
    }

    #[test]
    fn policy_switches_and_auth_tokens_parse() {
        let config: ConfigFile = toml::from_str(
            r#"
            [policy]
            shell = "deny"
            inline_mcp_urls = "allow"
            [[auth.tokens]]
            subject = "alice"
            token_env = "ALICE_TOKEN"
            scopes = ["sessions", "shell"]
            [[auth.tokens]]
            subject = "ops"
            token_sha256 = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"
            scopes = ["sessions:all"]
            "#,
        )
        .unwrap();
        let switches = config.policy.switches();
        assert_eq!((switches.shell, switches.inline_mcp_commands), (Some(Switch::Deny), None));
        let env = Environment::from_pairs([("ALICE_TOKEN", " alice-0123456789abcdef ")]);
        let tokens = config.auth.resolve(&env).unwrap();
        assert_eq!(tokens[0].secret, TokenSecret::Plain("alice-0123456789abcdef".into()));
        assert_eq!(tokens[0].scopes, [Scope::Sessions, Scope::Shell]);
        let TokenSecret::Sha256(digest) = tokens[1].secret else { panic!("a digest") };
        assert_eq!(digest[..2], [0x9f, 0x86]);

        assert!(config.auth.resolve(&Environment::default()).is_err(), "an unset token_env");
        let short = Environment::from_pairs([("ALICE_TOKEN", "short")]);
        assert!(config.auth.resolve(&short).unwrap_err().to_string().contains("at least 16"));
        for bad in [
            "[[auth.tokens]]\nsubject = \"a\"\nscopes = []",
            "[[auth.tokens]]\nsubject = \"a\"\ntoken_sha256 = \"abc\"\nscopes = []",
            "[[auth.tokens]]\nsubject = \"a\"\ntoken_env = \"X\"\ntoken_sha256 = \"abc\"\nscopes = []",
        ] {
            let config: ConfigFile = toml::from_str(bad).unwrap();
            assert!(config.auth.resolve(&Environment::default()).is_err(), "{bad}");
        }
        assert!(toml::from_str::<ConfigFile>("[policy]\nshell = \"maybe\"").is_err());
        assert!(toml::from_str::<ConfigFile>("[[auth.tokens]]\nsubject = \"a\"\nscopes = [\"root\"]").is_err());
        assert!(toml::from_str::<ConfigFile>("[[auth.tokens]]\nsubject = \"a\"\nscope = []").is_err());
    }

    #[test]
    fn hooks_parse_and_bad_ones_are_refused_at_load() {
        use crate::hooks::HookEventKind;
        let config: ConfigFile = toml::from_str(
            r#"
            [[hooks]]
            event = "pre_tool_use"
            matcher = "write_file"
            command = ["/bin/guard", "--strict"]
            timeout_ms = 500
            on_error = "deny"
            [[hooks]]
            event = "turn_end"
            url = "http://127.0.0.1:9/hook"
            "#,
        )
        .unwrap();
        assert_eq!(config.hooks.len(), 2);
        assert_eq!(
            (config.hooks[0].event, config.hooks[0].on_error),
            (HookEventKind::PreToolUse, Some(Switch::Deny))
        );
        assert!(Hooks::from_config(&config.hooks).is_ok());
        assert!(toml::from_str::<ConfigFile>("[[hooks]]\nevent = \"tool_use\"\ncommand = [\"x\"]").is_err());
        assert!(toml::from_str::<ConfigFile>("[[hooks]]\nevent = \"turn_end\"\ncmd = [\"x\"]").is_err());
        let settings = Settings { workspace: Some(std::env::temp_dir()), ..Settings::default() };
        let bad: ConfigFile =
            toml::from_str("[[hooks]]\nevent = \"pre_tool_use\"\nmatcher = \"(\"\ncommand = [\"x\"]").unwrap();
        let err = agent_factory(&settings, &Environment::default(), &bad, Arc::default()).unwrap_err().to_string();
        assert!(err.contains("[[hooks]] entry 0 (pre_tool_use): bad matcher regex"), "{err}");
    }

    #[test]
    fn a_missing_config_file_is_fine_unless_named() {
        let missing = Path::new("/nonexistent/deputy.toml");
        assert_eq!(ConfigFile::load(missing, false).unwrap(), ConfigFile::default());
        assert!(ConfigFile::load(missing, true).is_err());
        let env = Environment::from_pairs([("HOME", "/home/u")]);
        assert_eq!(ConfigFile::default_path(&env).unwrap(), PathBuf::from("/home/u/.config/deputy/config.toml"));
        assert_eq!(default_store_path(&env).unwrap(), PathBuf::from("/home/u/.local/share/deputy/sessions.redb"));
        let env = Environment::from_pairs([("HOME", "/home/u"), ("XDG_DATA_HOME", "/data")]);
        assert_eq!(default_store_path(&env).unwrap(), PathBuf::from("/data/deputy/sessions.redb"));
    }
}
