//! The one place agents are built. Every surface hands a full [`AgentBuildConfig`] to
//! [`AgentFactory::build_agent`] (through `SessionService::create_session`); there are no side
//! channels for configuration.
//!
//! Building is async because a session's external MCP servers must be acquired from the shared
//! [`McpFactory`] and their tools listed before the model can be told about them (`Tool::spec`
//! is synchronous). Doing it here, rather than in a pre-resolution step of the service, keeps
//! create and resume on one path and the surfaces free of logic.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use super::build::{AgentBuildConfig, ChildBuild};
use super::{Agent, FullOutputs, OutputContract, RestoredState};
use crate::caller::Caller;
use crate::error::{ErrorKind, SessionError};
use crate::hooks::Hooks;
use crate::llm::catalog::known_price;
use crate::llm::pricing::Price;
use crate::llm::registry::ProviderRegistry;
use crate::llm::{FINAL_ANSWER_TOOL, Usage};
use crate::model::{AgentSpec, Consumption, ContextSettings, ContextState};
use crate::policy::AuditTag;
use crate::policy::{Grants, Surface};
use crate::profiles::Profiles;
use crate::retrieval::documents::Documents;
use crate::skills::Skills;
use crate::tools::builtin::SearchDocuments;
use crate::tools::builtin::{LoadSkill, ReadSkillFile};
use crate::tools::comms::{ListPeers, SendMessage};
use crate::tools::delegation::{CancelDelegate, Delegate, Wait};
use crate::tools::link::SessionLink;
use crate::tools::mcp::{self, McpFactory, McpServerConfig, McpServerSpec};
use crate::tools::memory::{MemorySearch, Remember};
use crate::tools::{BuiltinTool, ToolDefaults, Workspace};

/// Builds agents from the frozen, process-wide configuration.
#[derive(Debug, Clone)]
pub struct AgentFactory {
    providers: Arc<ProviderRegistry>,
    default_model: Option<String>,
    default_max_tokens: u32,
    /// The workspace of sessions that do not name one (`--workspace`, else the working
    /// directory); `None` gives such sessions no tools.
    workspace: Option<Workspace>,
    /// The config file's `[tools]` section.
    tool_defaults: ToolDefaults,
    /// Context windows configured per provider (`ollama`) or model (`ollama:llama3.2`).
    context_windows: BTreeMap<String, u64>,
    /// Prices the config file sets per model (`provider:model`), over the list prices.
    prices: BTreeMap<String, Price>,
    /// Providers whose prompt-cache writes last an hour (`prompt_cache_ttl = "1h"` on the
    /// Anthropic wire): the list price's cache writes cost 2× input there, not 1.25×.
    hour_cache_providers: std::collections::BTreeSet<String>,
    /// The process-wide MCP server pool (shared with `AppState`).
    mcp: Arc<McpFactory>,
    /// The config file's `[mcp_servers.NAME]`.
    mcp_servers: BTreeMap<String, McpServerConfig>,
    /// The config file's `[[hooks]]`, given to every agent this factory builds or resumes.
    hooks: Hooks,
    /// The named agents (`[agents]`): `delegate`'s description lists them.
    profiles: Profiles,
    /// The skills of the config file's `[skills]` directories (and, where the operator opted
    /// in, the workspace's).
    skills: Skills,
    /// The config file's `[documents.NAME]` collections.
    documents: Arc<Documents>,
}

/// Bytes of `delegate`'s description that list the named agents: every session with the tool
/// sends them with each model call.
const DELEGATE_MENU_BYTES: usize = 2048;

/// Used when neither the request nor the configuration sets `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

impl AgentFactory {
    pub fn new(
        providers: Arc<ProviderRegistry>,
        default_model: Option<String>,
        workspace: Option<Workspace>,
    ) -> Self {
        Self {
            providers,
            default_model,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            workspace,
            tool_defaults: ToolDefaults::default(),
            context_windows: BTreeMap::new(),
            prices: BTreeMap::new(),
            hour_cache_providers: std::collections::BTreeSet::new(),
            mcp: Arc::new(McpFactory::default()),
            mcp_servers: BTreeMap::new(),
            hooks: Hooks::default(),
            profiles: Profiles::default(),
            skills: Skills::default(),
            documents: Arc::default(),
        }
    }

    /// The named agents sessions may be created from and delegate to.
    pub fn with_profiles(mut self, profiles: Profiles) -> Self {
        self.profiles = profiles;
        self
    }

    /// The named agents (the config file's `[agents]`).
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// The document collections sessions search.
    pub fn with_documents(mut self, documents: Arc<Documents>) -> Self {
        self.documents = documents;
        self
    }

    pub fn documents(&self) -> &Arc<Documents> {
        &self.documents
    }

    /// The skills sessions may use.
    pub fn with_skills(mut self, skills: Skills) -> Self {
        self.skills = skills;
        self
    }

    /// The operator's hooks (the config file's `[[hooks]]`).
    pub fn with_hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// The operator's hooks, for the events outside a turn (`session_start`, `session_end`).
    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// The MCP server pool to acquire sessions' servers from, and the config file's named
    /// servers.
    pub fn with_mcp(mut self, pool: Arc<McpFactory>, named: BTreeMap<String, McpServerConfig>) -> Self {
        self.mcp = pool;
        self.mcp_servers = named;
        self
    }

    /// The MCP server pool.
    pub fn mcp(&self) -> &Arc<McpFactory> {
        &self.mcp
    }

    /// Tool defaults from the config file, for sessions that do not choose.
    pub fn with_tool_defaults(mut self, defaults: ToolDefaults) -> Self {
        self.tool_defaults = defaults;
        self
    }

    /// Context windows the configuration knows, keyed by provider or `provider:model`.
    pub fn with_context_windows(mut self, windows: BTreeMap<String, u64>) -> Self {
        self.context_windows = windows;
        self
    }

    /// Prices the configuration sets, keyed by `provider:model`; they win over the list prices.
    pub fn with_prices(mut self, prices: BTreeMap<String, Price>) -> Self {
        self.prices = prices;
        self
    }

    /// Providers whose cache writes last an hour, so list prices bill them 2× input.
    pub fn with_hour_cache_providers(mut self, providers: std::collections::BTreeSet<String>) -> Self {
        self.hour_cache_providers = providers;
        self
    }

    /// The price of `model_id` (`provider:model`): the configured one, else the list price of
    /// the model's name whichever provider serves it (with hour-long cache writes where the
    /// provider asks for them), else none (its cost is unknown).
    pub fn price_of(&self, model_id: &str) -> Option<Price> {
        if let Some(price) = self.prices.get(model_id) {
            return Some(*price);
        }
        let listed = known_price(model_id)?;
        let provider = model_id.split(':').next().unwrap_or(model_id);
        Some(if self.hour_cache_providers.contains(provider) { listed.with_hour_cache_writes() } else { listed })
    }

    /// Whether `server` is one of the config file's `[mcp_servers.NAME]`, exactly as configured.
    fn is_configured(&self, server: &McpServerSpec) -> bool {
        self.mcp_servers
            .get(&server.name)
            .and_then(|config| mcp::config::spec_of(&server.name, config).ok())
            .is_some_and(|configured| configured == *server)
    }

    /// What `caller`, arriving on `surface`, may enable under this factory's config file.
    pub fn grants(&self, caller: &Caller, surface: Surface) -> Grants {
        self.tool_defaults.switches().grants(caller, surface)
    }

    fn configured_window(&self, model_id: &str) -> Option<u64> {
        let provider = model_id.split(':').next().unwrap_or(model_id);
        self.context_windows.get(model_id).or_else(|| self.context_windows.get(provider)).copied()
    }

    pub fn with_default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
    }

    /// Resolves the model and tools. Fails with `INVALID_REQUEST` for a malformed request and
    /// `AGENT_ERROR` when the provider cannot be used (e.g. missing credentials).
    ///
    /// `grants` are what the caller may enable (shell, inline MCP servers); `audit` names the
    /// new session and its owner in the audit log.
    pub async fn build_agent(
        &self,
        mut config: AgentBuildConfig,
        grants: &Grants,
        audit: &AuditTag,
    ) -> Result<Agent, SessionError> {
        let model_id = config.model.or_else(|| self.default_model.clone()).ok_or_else(|| {
            SessionError::invalid(
                "no model given: pass `model` (e.g. \"anthropic:claude-sonnet-4-5\") or start deputy with \
                 --model / DEPUTY_MODEL",
            )
        })?;
        let max_tokens = config.max_tokens.unwrap_or(self.default_max_tokens);
        if max_tokens == 0 {
            return Err(SessionError::invalid("max_tokens must be at least 1"));
        }
        if let Some(reasoning) = &config.reasoning {
            reasoning.check().map_err(SessionError::invalid)?;
        }
        if !cfg!(feature = "session-compaction") && config.context.asks_for_compaction() {
            return Err(SessionError::CompactionDisabled("compaction settings".into()));
        }
        self.tool_defaults.check_tool_output_cap(config.context.tool_output_cap_bytes)?;
        let context =
            ContextSettings::resolve(&model_id, max_tokens, &config.context, self.configured_window(&model_id))?;
        let structured = output_contract(config.output_schema, config.structured_output_retries)?;
        if config.tools.callbacks.iter().any(|callback| callback.name == FINAL_ANSWER_TOOL) {
            return Err(SessionError::invalid(format!(
                "the tool name {FINAL_ANSWER_TOOL} is reserved for structured output; name the callback otherwise"
            )));
        }
        let system_prompt = config.system_prompt.filter(|prompt| !prompt.is_empty());
        self.tool_defaults.check_mcp_requests(&config.tools.mcp_servers, grants)?;
        let mcp_requests = std::mem::take(&mut config.tools.mcp_servers);
        let skills = config.skills.map(|mut names| {
            names.sort();
            names.dedup();
            names
        });
        if let Some(names) = &config.documents {
            self.documents
                .check_names(names)
                .map_err(|message| SessionError::invalid(format!("documents: {message}")))?;
        }
        if let Some(names) = &skills {
            self.skills
                .check_names(names)
                .map_err(|message| SessionError::invalid(format!("skills: {message}")))?;
        }
        let chose_builtins = config.tools.builtins.is_some();
        let mut tools = self.tool_defaults.resolve(config.tools, self.workspace.as_ref(), grants)?;
        if !chose_builtins {
            if config.comms_by_default || config.delegation_by_default {
                tools.builtins.extend(BuiltinTool::COMMS);
            }
            if config.delegation_by_default {
                tools.builtins.extend(BuiltinTool::DELEGATION);
            }
            // Compacted history is only worth keeping if the session can search it.
            if cfg!(feature = "session-compaction") {
                tools.builtins.extend(BuiltinTool::MEMORY);
            }
            // Decided once, with the skills there are now: the session's record keeps its tools.
            if !self.skills.available(skills.as_deref()).is_empty() {
                tools.builtins.extend(BuiltinTool::SKILLS);
            }
            if !self.documents.is_empty() && config.documents.as_ref().is_none_or(|names| !names.is_empty()) {
                tools.builtins.push(BuiltinTool::SearchDocuments);
            }
            tools.builtins.sort();
            tools.builtins.dedup();
        }
        tools.mcp_servers = mcp::resolve_servers(&mcp_requests, &self.mcp_servers)?;
        let confinable = tools.shell.is_some()
            || tools
                .mcp_servers
                .iter()
                .any(|server| matches!(server.transport, mcp::McpTransport::Stdio { .. }) && !server.unconfined);
        if confinable {
            // `required` on a kernel that cannot confine: refused here, before anything starts.
            self.tool_defaults.check_sandbox()?;
            tools.unconfined = self.tool_defaults.sandbox.unconfined_reason();
        }
        self.assemble(
            AgentSpec {
                model: model_id,
                system_prompt,
                max_tokens,
                budget: config.budget,
                context,
                tools,
                structured_output: structured.as_ref().map(|contract| contract.spec().clone()),
                reasoning: config.reasoning,
                agent: config.agent,
                skills,
                documents: config.documents,
            },
            structured,
            audit,
        )
        .await
    }

    /// The agent of a delegated child. Its `tools` were narrowed from its parent's resolved
    /// ones (nothing is resolved against the server's defaults again); the model's context
    /// settings are resolved afresh, and the operator's switches and `grants` are checked as
    /// for a resumed session.
    pub async fn build_child(
        &self,
        child: ChildBuild,
        grants: &Grants,
        audit: &AuditTag,
    ) -> Result<Agent, SessionError> {
        let ChildBuild {
            model,
            system_prompt,
            max_tokens,
            budget,
            tools,
            output_schema,
            reasoning,
            context,
            agent,
            skills,
            documents,
        } = child;
        if !cfg!(feature = "session-compaction") && context.asks_for_compaction() {
            return Err(SessionError::CompactionDisabled("compaction settings".into()));
        }
        let context = ContextSettings::resolve(&model, max_tokens, &context, self.configured_window(&model))?;
        let structured = output_contract(output_schema, None)?;
        self.tool_defaults
            .check_resumed(&tools, self.workspace.as_ref(), grants, |server| self.is_configured(server))?;
        let spec = AgentSpec {
            model,
            system_prompt: system_prompt.filter(|prompt| !prompt.is_empty()),
            max_tokens,
            budget,
            context,
            tools,
            structured_output: structured.as_ref().map(|contract| contract.spec().clone()),
            reasoning,
            agent,
            skills,
            documents,
        };
        self.assemble(spec, structured, audit).await
    }

    /// Rebuilds the agent of a stored session from its resolved spec, with its history and
    /// counters. The spec was valid when the session was created; the operator's switches and
    /// the resuming caller's `grants` are applied again (security review F18).
    pub async fn restore_agent(
        &self,
        spec: AgentSpec,
        state: RestoredState,
        grants: &Grants,
        audit: &AuditTag,
    ) -> Result<Agent, SessionError> {
        self.tool_defaults
            .check_resumed(&spec.tools, self.workspace.as_ref(), grants, |server| self.is_configured(server))?;
        // Compiled when it was given; a stored one that no longer compiles is deputy's fault.
        let structured = spec
            .structured_output
            .clone()
            .map(OutputContract::from_spec)
            .transpose()
            .map_err(|err| SessionError::agent(None, ErrorKind::Internal, err.to_string()))?;
        let mut agent = self.assemble(spec, structured, audit).await?;
        agent.restore(state);
        Ok(agent)
    }

    /// An agent for a fully resolved spec (its output schema compiled: `structured`): provider
    /// and tools attached, empty history. A
    /// session's MCP servers that cannot be started fail the build (`AGENT_ERROR`).
    async fn assemble(
        &self,
        spec: AgentSpec,
        structured: Option<OutputContract>,
        audit: &AuditTag,
    ) -> Result<Agent, SessionError> {
        let AgentSpec {
            model: model_id,
            system_prompt,
            max_tokens,
            budget,
            context: context_settings,
            tools: tool_config,
            structured_output: _,
            reasoning,
            agent: agent_ref,
            skills,
            documents,
        } = spec;
        let (provider, model) = self.providers.resolve(&model_id)?;
        let price = self.price_of(&model_id);
        if budget.max_cost_usd.is_some() && price.is_none() {
            return Err(SessionError::invalid(format!(
                "budget.max_cost_usd: deputy does not know the price of {model_id:?}, so it cannot hold \
                 a session to a cost; give the model a price in the config file \
                 ([providers.NAME.models.\"MODEL\"] input, output, cache_write, cache_read in USD per \
                 million tokens) or use max_tokens"
            )));
        }
        let handling_hops = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let session_link = SessionLink::default();
        // A workspace that existed when the session was created may be gone when it resumes.
        let mut tools = tool_config
            .scope(self.workspace.as_ref(), audit, self.tool_defaults.sandbox)
            .map_err(|err| SessionError::agent(None, ErrorKind::Tools, err.to_string()))?;
        if !tool_config.mcp_servers.is_empty() {
            for inline in tool_config.mcp_servers.iter().filter(|server| !self.is_configured(server)) {
                audit.inline_server(&inline.key().to_string());
            }
            // Inline `url` servers reach public addresses only, unless the operator allows more.
            let inline_reach = match self.tool_defaults.policy.inline_mcp_private_urls {
                Some(crate::policy::Switch::Allow) => mcp::Reach::Any,
                _ => mcp::Reach::Public,
            };
            let reach_of = |server: &McpServerSpec| {
                if self.is_configured(server) { mcp::Reach::Any } else { inline_reach }
            };
            let mcp_tools =
                mcp::session_tools(&self.mcp, &tool_config.mcp_servers, reach_of).await.map_err(|err| {
                    if err.is_policy_refusal() {
                        SessionError::policy_denied(err.to_string())
                    } else {
                        SessionError::agent(None, ErrorKind::Tools, err.to_string())
                    }
                })?;
            tools.extend(mcp_tools);
        }
        // The linked tools know their session and reach the service through the link, which
        // the service connects when it spawns the session; the skill tools read the catalog.
        let session = &audit.session_id;
        let linked: Vec<Arc<dyn crate::tools::Tool>> = tool_config
            .builtins
            .iter()
            .filter_map(|builtin| -> Option<Arc<dyn crate::tools::Tool>> {
                let (id, link) = (session.clone(), session_link.clone());
                Some(match builtin {
                    BuiltinTool::SendMessage => Arc::new(SendMessage::new(id, link, handling_hops.clone())),
                    BuiltinTool::ListPeers => Arc::new(ListPeers::new(id, link)),
                    BuiltinTool::Delegate => {
                        Arc::new(Delegate::new(id, link, self.profiles.menu(DELEGATE_MENU_BYTES)))
                    }
                    BuiltinTool::Wait => Arc::new(Wait::new(id, link)),
                    BuiltinTool::CancelDelegate => Arc::new(CancelDelegate::new(id, link)),
                    BuiltinTool::LoadSkill => Arc::new(LoadSkill::new(self.skills.clone(), skills.clone())),
                    BuiltinTool::ReadSkillFile => Arc::new(ReadSkillFile::new(self.skills.clone(), skills.clone())),
                    BuiltinTool::MemorySearch => Arc::new(MemorySearch::new(id, link)),
                    BuiltinTool::Remember => Arc::new(Remember::new(id, link)),
                    BuiltinTool::SearchDocuments => {
                        Arc::new(SearchDocuments::new(self.documents.clone(), documents.clone()))
                    }
                    _ => return None,
                })
            })
            .collect();
        if !linked.is_empty() {
            tools.extend(linked);
        }
        // The session's workspace (its own, else the server's), searched up to the roots.
        let instructions_source = context_settings
            .project_instructions
            .then(|| {
                tool_config.workspace.clone().or_else(|| self.workspace.as_ref().map(|ws| ws.root().to_path_buf()))
            })
            .flatten()
            .and_then(|workspace| {
                let ceilings = self.tool_defaults.workspace_roots(self.workspace.as_ref());
                super::instructions::InstructionsSource::new(&workspace, &ceilings)
            });
        // Skills are listed in the prompt only to a session that can load them.
        let skills_listed = tool_config.builtins.contains(&BuiltinTool::LoadSkill).then(|| self.skills.clone());
        let tool_specs: Arc<[Arc<crate::llm::ToolSpec>]> = tools.shared_specs().into();
        let tool_tokens = estimated_tokens(&tool_specs);
        Ok(Agent {
            provider,
            model_id,
            model,
            price,
            system: system_prompt.clone(),
            system_prompt,
            instructions_source,
            instructions: super::instructions::ProjectInstructions::default(),
            max_tokens,
            reasoning,
            tool_specs,
            tool_tokens,
            tools,
            tool_config,
            agent_ref,
            ledger: Arc::new(super::Ledger::new(budget)),
            delegated: false,
            parent_ledger: None,
            budget,
            context_settings,
            history: Arc::default(),
            encoded_history: Arc::default(),
            usage: Usage::default(),
            used: Consumption::default(),
            turns: 0,
            context: ContextState::default(),
            history_epoch: 0,
            unsaved_from: 0,
            full_outputs: FullOutputs::default(),
            unsaved_outputs: Vec::new(),
            recollections: Vec::new(),
            turn_running: false,
            turn_prompt_index: 0,
            pending: None,
            structured,
            turn_output: None,
            mailbox: None,
            handling_hops,
            session_link,
            session_id: audit.session_id.clone(),
            hooks: self.hooks.clone(),
            skills_listed,
            skills_section: String::new(),
            skills,
            documents,
        })
    }
}

/// Compiles an output schema given with its retries; retries alone are `INVALID_REQUEST`.
pub fn output_contract(
    schema: Option<serde_json::Value>,
    retries: Option<u32>,
) -> Result<Option<OutputContract>, SessionError> {
    match (schema, retries) {
        (Some(schema), retries) => OutputContract::compile(schema, retries).map(Some),
        (None, Some(_)) => {
            Err(SessionError::invalid("structured_output_retries needs an output_schema in the same call"))
        }
        (None, None) => Ok(None),
    }
}

/// What tool declarations add to a request's input, estimated like the history.
fn estimated_tokens(specs: &[Arc<crate::llm::ToolSpec>]) -> u64 {
    use crate::model::context::estimate_text;
    specs
        .iter()
        .map(|spec| {
            estimate_text(&spec.name)
                + estimate_text(&spec.description)
                + estimate_text(spec.input_schema.json().get())
        })
        .sum()
}
