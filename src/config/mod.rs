//! Configuration, resolved once at start-up into an immutable [`AppState`].
//!
//! Sources, by precedence: command-line flags (and their `DEPUTY_*` env vars, via clap), the
//! optional TOML config file, then the providers' usual environment variables
//! (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, `OPENAI_API_KEY`, `OPENAI_BASE_URL`). Nothing
//! reads the environment after this; requests never mutate it.
//!
//! - [`file`]: the TOML config file and its sections;
//! - [`auth`]: `[auth]`, the tokens HTTP callers present;
//! - [`providers`]: the provider registry, from the built-in rows of
//!   [`crate::llm::catalog::BUILT_IN`] and the file's `[providers.NAME]`;
//! - here: the captured environment, the command line's settings, and [`AppState`], everything
//!   built once from them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use crate::agent::{AgentFactory, InboxLimits};
use crate::hooks::Hooks;
use crate::llm::embeddings::EmbeddingModel;
use crate::memory::{Memory, SharedMemory};
use crate::peers::RemotePeers;
use crate::profiles::Profiles;
use crate::retrieval::documents::Documents;
use crate::retrieval::embeddings::Embedder;
use crate::session::DelegationLimits;
use crate::session::SessionLimits;
use crate::skills::Skills;
use crate::store::SharedStore;
use crate::tools::mcp::{self, McpFactory};
use crate::tools::{ToolDefaults, Workspace};
use crate::webhooks::events::EventType;
use crate::webhooks::signature::Secret;
use crate::webhooks::{WebhookSpec, Webhooks};

mod auth;
mod file;
mod providers;
mod store_location;

pub use auth::{AccessToken, AuthConfig, MIN_TOKEN_CHARS, TokenConfig, TokenSecret};
pub use file::{
    ConfigFile, DelegationConfig, InboxConfig, PolicyConfig, ProjectionConfig, ProviderConfig, SessionsConfig,
    StoreConfig, TelemetryConfig,
};
pub use providers::{provider_registry, provider_variables};
pub use store_location::StoreLocation;

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

#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub model: Option<String>,
    pub config: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    /// The session store: a file or a database; `None` means the default file.
    pub store: Option<StoreLocation>,
    /// Run without a store: sessions live as long as the process.
    pub ephemeral: bool,
    /// `serve --idle-unload-secs`, over the config file's `[sessions]`.
    pub idle_unload_secs: Option<u64>,
    /// `serve --max-live-sessions`, over the config file's `[sessions]`.
    pub max_live_sessions: Option<usize>,
    /// `serve --http`: the sandbox defaults to `required` rather than `best_effort`.
    pub serves_http: bool,
}

impl Settings {
    /// The store's file, when the store is a redb file (its default included).
    pub fn store_file(&self) -> Option<PathBuf> {
        match &self.store {
            Some(location) => location.file().map(std::path::Path::to_path_buf),
            None => None,
        }
    }

    /// Whether the store is a database every process opens directly: no background server
    /// stands between a client and it.
    pub fn opens_database(&self) -> bool {
        !self.ephemeral && matches!(self.store, Some(StoreLocation::Database(_)))
    }

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
            max_open_per_owner: config.max_open_per_owner,
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
    /// Every owner's memories, the index beside the store (`[memory]` bounds them).
    pub memory: SharedMemory,
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
    /// The config file's `[[webhooks]]`, secrets read (`None`: none configured).
    pub webhooks: Option<Arc<Webhooks>>,
    /// `[store] lease_secs`: how long a turn's lease lasts unrenewed, on a database.
    pub lease_ttl: std::time::Duration,
}

/// `$XDG_DATA_HOME/deputy/sessions.redb`, else `~/.local/share/deputy/sessions.redb`.
pub fn default_store_path(env: &Environment) -> Option<PathBuf> {
    let base = match env.get("XDG_DATA_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env.get("HOME")?).join(".local").join("share"),
    };
    Some(base.join("deputy").join("sessions.redb"))
}

/// `$XDG_DATA_HOME/deputy/postgres.key`, else under `~/.local/share`: the default key of a
/// database store, for a single host's replicas (replicas on several hosts name one in
/// `[store] key_file`).
#[cfg(feature = "session-store")]
fn default_database_key(env: &Environment) -> Option<PathBuf> {
    default_store_path(env).map(|path| path.with_file_name("postgres.key"))
}

/// Opens the session store the settings ask for, once; with the file its indexes live beside
/// (`None` for a database: every replica keeps its indexes in memory, caught up from the store).
#[cfg(feature = "session-store")]
fn open_store(
    settings: &Settings,
    env: &Environment,
    config: &StoreConfig,
) -> anyhow::Result<(SharedStore, Option<PathBuf>)> {
    if settings.ephemeral {
        return Ok((None, None));
    }
    let path = match &settings.store {
        Some(StoreLocation::File(path)) => path.clone(),
        Some(location @ StoreLocation::Database(url)) => {
            let key_file = config.key_file.clone().or_else(|| default_database_key(env)).context(
                "no place for the database store's key file: set [store] key_file in the config file (or HOME)",
            )?;
            let store = open_database(url, &key_file).with_context(|| format!("opening the store {location}"))?;
            tracing::info!(store = %location, key_file = %key_file.display(), "session store open");
            return Ok((Some(Arc::new(store)), None));
        }
        None => default_store_path(env)
            .context("no place for the session store: set --store / DEPUTY_STORE (or HOME), or use --ephemeral")?,
    };
    let store = crate::store::RedbStore::open(&path)?;
    tracing::info!(path = %path.display(), "session store open");
    Ok((Some(Arc::new(store)), Some(path)))
}

/// Connects to a database store. Start-up is synchronous and runs on the multi-threaded
/// runtime, whose worker this blocks for the connection and the migrations: nothing else runs
/// yet.
#[cfg(feature = "session-store")]
fn open_database(url: &str, key_file: &std::path::Path) -> anyhow::Result<crate::store::PostgresStore> {
    let runtime = tokio::runtime::Handle::try_current().context("a database store needs the async runtime")?;
    if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        anyhow::bail!("a database store is opened on the multi-threaded runtime");
    }
    let opening = crate::store::PostgresStore::open(url, key_file);
    Ok(tokio::task::block_in_place(|| runtime.block_on(opening))?)
}

/// This build has no store: every run is ephemeral, and asking for one is an error.
#[cfg(not(feature = "session-store"))]
fn open_store(
    settings: &Settings,
    _env: &Environment,
    _config: &StoreConfig,
) -> anyhow::Result<(SharedStore, Option<PathBuf>)> {
    if let Some(location) = &settings.store {
        anyhow::bail!(
            "--store {location} needs persistence, which this build of deputy does not include (feature session-store)"
        );
    }
    Ok((None, None))
}

impl AppState {
    pub fn load(settings: &Settings, env: &Environment) -> anyhow::Result<Self> {
        let config = load_config_file(settings, env)?;
        let exporting = crate::telemetry::otlp::start(config.telemetry.otlp_endpoint.as_deref(), &|name| {
            env.get(name).map(str::to_owned)
        })?;
        if exporting {
            tracing::info!("exporting traces over OTLP/HTTP");
        }
        let pool =
            mcp::McpPoolConfig { sandbox: config.sandbox.settings(settings.serves_http), ..config.mcp_pool.into() };
        let mcp = Arc::new(McpFactory::new(pool));
        let (store, store_path) = open_store(settings, env, &config.store)?;
        // The indexes live beside the store's file: `sessions.redb` → `sessions.memory/` and
        // `sessions.documents/`.
        let documents_dir = store_path.as_ref().map(|path| path.with_extension("documents"));
        let factory = agent_factory(settings, env, &config, mcp.clone(), documents_dir)?;
        let memory_dir = store_path.map(|path| path.with_extension("memory"));
        // Memories are searched with the documents' embeddings model, if there is one.
        let embedder = factory.documents().embedder().cloned();
        let memory =
            Arc::new(Memory::new(store.clone(), memory_dir, config.memory.bounds()).with_embedder(embedder));
        let limits = settings.session_limits(&config.sessions);
        let tokens = config.auth.resolve(env)?;
        let remote = RemotePeers::new(&config.peers, mcp.clone(), |variable| env.get(variable).map(str::to_owned))
            .map_err(anyhow::Error::msg)?;
        let projection = config.projection.dir.clone();
        if let Some(dir) = &projection {
            crate::session::projection::prepare_root(dir)?;
        }
        let (inbox, delegation) = (config.inbox.limits(), config.delegation.limits());
        let webhooks = webhooks(&config, env, store.is_some())?;
        let lease_ttl = config.store.lease_ttl()?;
        Ok(Self {
            factory,
            store,
            memory,
            mcp,
            limits,
            tokens,
            inbox,
            delegation,
            remote,
            projection,
            webhooks,
            lease_ttl,
        })
    }
}

/// The config file's `[[webhooks]]`, each secret read from the variable it names and checked.
/// Deliveries resume from the store's journal, so webhooks need a store.
fn webhooks(config: &ConfigFile, env: &Environment, stored: bool) -> anyhow::Result<Option<Arc<Webhooks>>> {
    if config.webhooks.is_empty() {
        return Ok(None);
    }
    if !stored {
        anyhow::bail!(
            "[[webhooks]] need the session store: deliveries resume from its journal (drop --ephemeral, or use a \
             build with the session-store feature)"
        );
    }
    let mut specs = Vec::with_capacity(config.webhooks.len());
    for entry in &config.webhooks {
        let name = entry.name.clone().unwrap_or_else(|| entry.url.clone());
        let value = env
            .get(&entry.secret_env)
            .with_context(|| format!("webhook {name:?}: secret_env {} is not set", entry.secret_env))?;
        let secret = Secret::parse(value).map_err(|error| anyhow::anyhow!("webhook {name:?}: {error}"))?;
        let events = entry.events.iter().map(|event| EventType::parse(event)).collect::<Result<Vec<_>, _>>();
        let events = events.map_err(|error| anyhow::anyhow!("webhook {name:?}: {error}"))?;
        if events.is_empty() {
            anyhow::bail!("webhook {name:?}: `events` names none");
        }
        specs.push(WebhookSpec { name, url: entry.url.clone(), events, secret });
    }
    let private_urls = config.policy.webhook_private_urls == Some(crate::policy::Switch::Allow);
    Ok(Some(Arc::new(Webhooks::new(specs, private_urls).map_err(anyhow::Error::msg)?)))
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

/// The named agents the config file's `[agents]` gives sessions in `workspace`.
pub fn profiles(workspace: &std::path::Path, env: &Environment, config: &ConfigFile) -> Profiles {
    Profiles::new(config.agents.resolve("agents", env, Some(workspace)))
}

/// The named agents of the settings' config file and workspace, for `deputy agents` (no store,
/// no server).
pub fn settings_profiles(settings: &Settings, env: &Environment) -> anyhow::Result<Profiles> {
    let config = load_config_file(settings, env)?;
    let workspace = match &settings.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("current directory")?,
    };
    Ok(profiles(&workspace, env, &config))
}

/// The agent factory one client's settings, config file and environment describe (default
/// model and workspace, providers and their credentials, tool defaults, named MCP servers,
/// skills, document collections), over an MCP server pool owned elsewhere. It opens no store,
/// so a background server builds one per attached client while it owns the store and the
/// pool once. The collections' indexes are kept in `documents_dir` (`None`: in memory).
pub fn agent_factory(
    settings: &Settings,
    env: &Environment,
    config: &ConfigFile,
    mcp: Arc<McpFactory>,
    documents_dir: Option<PathBuf>,
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
    let prices = config
        .providers
        .iter()
        .flat_map(|(name, provider)| {
            provider.models.iter().map(move |(model, price)| (format!("{name}:{model}"), *price))
        })
        .collect();
    let hour_cache = config
        .providers
        .iter()
        .filter(|(_, provider)| {
            provider.api == crate::llm::catalog::Wire::Anthropic
                && provider.prompt_cache == crate::llm::options::PromptCache::Auto
                && provider.prompt_cache_ttl == crate::llm::options::CacheTtl::OneHour
        })
        .map(|(name, _)| name.clone())
        .collect();
    for (name, server) in &config.mcp_servers {
        mcp::config::spec_of(name, server).map_err(|err| anyhow::anyhow!("config file: {err}"))?;
    }
    let hooks = Hooks::from_config(&config.hooks).map_err(|err| anyhow::anyhow!("config file: {err}"))?;
    let skills = Skills::new(config.skills.resolve("skills", env, Some(workspace.root())));
    let collections = config
        .documents
        .iter()
        .map(|(name, collection)| collection.spec(name, workspace.root()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| anyhow::anyhow!("config file: {err}"))?;
    let mut documents =
        Documents::new(collections, documents_dir).map_err(|err| anyhow::anyhow!("config file: {err}"))?;
    if let Some(embeddings) = &config.embeddings {
        documents = documents.with_embedder(Arc::new(embedder(config, env, embeddings)?));
    }
    let mut factory = AgentFactory::new(providers, default_model, Some(workspace))
        .with_context_windows(windows)
        .with_prices(prices)
        .with_hour_cache_providers(hour_cache)
        .with_tool_defaults(ToolDefaults {
            workspace_roots: config.policy.workspace_roots.clone(),
            policy: config.policy.switches(),
            sandbox: config.sandbox.settings(settings.serves_http),
            ..config.tools.clone()
        })
        .with_mcp(mcp, config.mcp_servers.clone())
        .with_hooks(hooks)
        .with_profiles(profiles(&workspace_dir, env, config))
        .with_skills(skills)
        .with_documents(Arc::new(documents));
    if let Some(max_tokens) = config.max_tokens {
        factory = factory.with_default_max_tokens(max_tokens);
    }
    Ok(factory)
}

/// The `[embeddings]` model, over its provider's endpoint.
fn embedder(
    config: &ConfigFile,
    env: &Environment,
    embeddings: &crate::config::file::EmbeddingsConfig,
) -> anyhow::Result<Embedder> {
    let (provider, model) = embeddings.model.split_once(':').ok_or_else(|| {
        anyhow::anyhow!("config file: [embeddings] model: {:?} is not `provider:model`", embeddings.model)
    })?;
    let (base_url, key) = providers::endpoint(config, env, provider)
        .map_err(|err| anyhow::anyhow!("config file: [embeddings]: {err}"))?;
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| anyhow::anyhow!("[embeddings] needs deputy's async runtime"))?;
    let configured = config.providers.get(provider).and_then(|provider| provider.models.get(model)).copied();
    let price = configured.or_else(|| crate::llm::catalog::known_price(model));
    Ok(Embedder::new(EmbeddingModel::new(&base_url, key, model, embeddings.dimensions), price, runtime))
}

#[cfg(test)]
mod tests;
