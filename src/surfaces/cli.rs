//! The command line: `deputy serve`, `deputy run`, `deputy schemas`.
//!
//! Like every surface it only translates: flags become service requests, results become
//! stdout text and exit codes (0 ok, 1 error with `CODE: message` on stderr, 2 when the turn
//! ran out of budget).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use super::mcp::McpServer;
use super::{http, render};
use crate::agent::{AgentBuildConfig, AgentEvent, ContextOverrides};
use crate::config::{AppState, Environment, Settings};
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::Budget;
use crate::session::{
    CreateSessionRequest, ListQuery, LiveSessionService, RunResult, SessionService, TurnOptions, TurnRequest,
    TurnStatus,
};
use crate::store::persistence_disabled;
use crate::tools::ToolRequest;

/// deputy hosts LLM agent sessions behind MCP.
///
/// Register `deputy serve` as a stdio MCP server in Claude Desktop, Claude Code, Cursor or VS Code;
/// the client then drives agent sessions through six tools (session_create, session_turn,
/// session_interrupt, session_read, session_list, session_archive). Or try one prompt directly
/// with `deputy run`.
///
/// Providers come from the usual environment variables: ANTHROPIC_API_KEY (and
/// ANTHROPIC_BASE_URL), OPENAI_API_KEY and OPENAI_BASE_URL (any OpenAI-compatible server, e.g.
/// Ollama at http://127.0.0.1:11434/v1). Models are named provider:model, e.g.
/// anthropic:claude-sonnet-4-5, openai:gpt-4o-mini.
#[derive(Debug, Parser)]
#[command(name = "deputy", version, about, long_about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Default model for new sessions, as provider:model.
    #[arg(long, global = true, env = "DEPUTY_MODEL")]
    pub model: Option<String>,

    /// TOML config file (default: $XDG_CONFIG_HOME/deputy/config.toml, if it exists).
    #[arg(long, global = true, env = "DEPUTY_CONFIG")]
    pub config: Option<PathBuf>,

    /// Directory the agents' file tools can read (default: the current directory).
    #[arg(long, global = true, env = "DEPUTY_WORKSPACE")]
    pub workspace: Option<PathBuf>,

    /// Session store file (default: $XDG_DATA_HOME/deputy/sessions.redb). One process at a time
    /// may use a store: give each MCP client its own.
    #[arg(long, global = true, env = "DEPUTY_STORE")]
    pub store: Option<PathBuf>,

    /// Keep sessions in memory only: nothing is saved, nothing survives the process.
    #[arg(long, global = true, conflicts_with = "store")]
    pub ephemeral: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP over stdio (the command to register in an MCP client), or with --http, MCP
    /// streamable HTTP at /mcp plus REST (/v1) and JSON-RPC (/rpc) on one listener.
    Serve(ServeArgs),
    /// Run one prompt in a new session, streaming the answer to stdout.
    ///
    /// The session id goes to stderr. Exit status: 0 done, 1 error, 2 budget exhausted.
    Run {
        /// What to ask the agent.
        prompt: String,
        /// System prompt for the agent.
        #[arg(long)]
        system: Option<String>,
        /// Maximum tokens of each model response.
        #[arg(long)]
        max_tokens: Option<u32>,
        /// Stop after this many tokens in total.
        #[arg(long)]
        budget_tokens: Option<u64>,
        /// Stop after this many tool calls.
        #[arg(long)]
        budget_tool_calls: Option<u64>,
    },
    /// Continue a stored session with one more turn, streaming the answer to stdout.
    Turn {
        /// The session's id.
        session_id: String,
        /// The next message for the agent.
        prompt: String,
    },
    /// Inspect and manage stored sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Write the JSON Schemas of the MCP tools' inputs and outputs, and the REST OpenAPI document.
    Schemas {
        /// Directory to write into.
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Serve HTTP on this address (e.g. 127.0.0.1:8787) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Bearer token required on every HTTP route but /healthz (needed to bind a non-loopback
    /// address).
    #[arg(long, env = "DEPUTY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Another accepted Host name (loopback names and the bind address always are).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Another accepted browser Origin, e.g. `https://app.example.com:443` (`:*` = any port).
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Largest HTTP request body in bytes.
    #[arg(long, default_value_t = crate::surfaces::http::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Seconds running turns get to finish at shutdown before they are interrupted.
    #[arg(long, default_value_t = 30)]
    pub drain_timeout_secs: u64,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, most recently updated first.
    List {
        /// Include archived sessions.
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = 0)]
        offset: usize,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show a session: its state, billing and whole conversation.
    Show {
        session_id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Archive a session: it keeps its history but takes no more turns.
    Archive { session_id: String },
    /// Compact a session's history now (prune old tool outputs, summarize older turns).
    Compact { session_id: String },
    /// Print the whole output of a tool result that entered the history shortened.
    ToolOutput { session_id: String, tool_use_id: String },
}

impl Cli {
    fn settings(&self) -> Settings {
        Settings {
            model: self.model.clone(),
            config: self.config.clone(),
            workspace: self.workspace.clone(),
            store: self.store.clone(),
            ephemeral: self.ephemeral,
        }
    }
}

/// Runs a parsed command line to completion.
pub async fn run(cli: Cli) -> ExitCode {
    let settings = cli.settings();
    let outcome = match cli.command {
        Command::Serve(args) => serve(&settings, args).await,
        Command::Schemas { out } => write_schemas(&out),
        Command::Run { prompt, system, max_tokens, budget_tokens, budget_tool_calls } => {
            let build = AgentBuildConfig {
                model: None,
                system_prompt: system,
                max_tokens,
                budget: Budget {
                    max_tokens: budget_tokens,
                    max_tool_calls: budget_tool_calls,
                    max_duration_ms: None,
                },
                context: ContextOverrides::default(),
                tools: ToolRequest::default(),
            };
            return match live_service(&settings) {
                Ok(service) => {
                    stream_turn(|turn| async move {
                        let request =
                            CreateSessionRequest { build, prompt, turn, ..CreateSessionRequest::default() };
                        service.create_session(request).await
                    })
                    .await
                }
                Err(err) => report_failure(&err),
            };
        }
        Command::Turn { session_id, prompt } => {
            return match stored_service(&settings, "resuming a session from the command line") {
                Ok(service) => {
                    stream_turn(|options| async move {
                        let id = SessionId::from_string(session_id);
                        service.start_turn(&id, TurnRequest { prompt, options, ..TurnRequest::default() }).await
                    })
                    .await
                }
                Err(err) => report_failure(&err),
            };
        }
        Command::Sessions(command) => match stored_service(&settings, "deputy sessions") {
            Ok(service) => return sessions(service.as_ref(), command).await,
            Err(err) => Err(err),
        },
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => report_failure(&err),
    }
}

/// Prints a failure; a [`SessionError`] inside keeps its code and exit status.
fn report_failure(err: &anyhow::Error) -> ExitCode {
    match err.downcast_ref::<SessionError>() {
        Some(error) => exit_with(error),
        None => {
            eprintln!("deputy: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn live_service(settings: &Settings) -> anyhow::Result<Arc<LiveSessionService>> {
    let state = AppState::load(settings, &Environment::from_process())?;
    Ok(Arc::new(LiveSessionService::new(state.factory, state.store)))
}

/// A service for commands that only make sense on stored sessions.
fn stored_service(settings: &Settings, operation: &str) -> anyhow::Result<Arc<LiveSessionService>> {
    let state = AppState::load(settings, &Environment::from_process())?;
    if state.store.is_none() {
        return Err(persistence_disabled(operation).into());
    }
    Ok(Arc::new(LiveSessionService::new(state.factory, state.store)))
}

/// Serves MCP on stdin/stdout until the client closes stdin or a signal arrives, or the HTTP
/// surfaces until a signal arrives; then running turns are drained.
async fn serve(settings: &Settings, args: ServeArgs) -> anyhow::Result<()> {
    let state = AppState::load(settings, &Environment::from_process())?;
    let mcp_servers = state.mcp.clone();
    let service = Arc::new(LiveSessionService::new(state.factory, state.store));
    let served = serve_surfaces(service, args).await;
    // Idle external MCP servers stop now; the active ones go with their sessions at exit.
    mcp_servers.shutdown();
    served
}

async fn serve_surfaces(service: Arc<LiveSessionService>, args: ServeArgs) -> anyhow::Result<()> {
    let drain = std::time::Duration::from_secs(args.drain_timeout_secs);
    let shutdown = CancellationToken::new();
    // Installed before serving: rmcp's `serve` only returns after the client's first message.
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    if let Some(bind) = args.http {
        let mut config = http::HttpConfig::new(bind);
        config.token = args.token.filter(|token| !token.is_empty());
        config.allowed_hosts.extend(args.allowed_hosts);
        config.allowed_origins.extend(args.allowed_origins);
        config.max_body_bytes = args.max_body_bytes;
        config.drain_timeout = drain;
        return http::serve(service, config, shutdown).await;
    }
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving MCP over stdio");
    let served =
        McpServer::new(service.clone()).serve_with_ct(rmcp::transport::stdio_pipes(), shutdown.clone()).await;
    match served {
        Ok(running) => {
            let reason = running.waiting().await.context("MCP service")?;
            tracing::info!(?reason, "MCP connection ended; draining running turns");
        }
        Err(err) if shutdown.is_cancelled() => tracing::info!("stopped before the client connected: {err}"),
        Err(err) => return Err(err).context("MCP handshake"),
    }
    service.drain(drain).await;
    Ok(())
}

async fn cancel_on_signal(token: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    token.cancel();
}

/// Runs one turn with its text streamed to stdout as it arrives; Ctrl-C interrupts it.
/// Exit 0 done, 1 error or interrupted, 2 budget exhausted; the session id goes to stderr.
async fn stream_turn<F, Fut>(start: F) -> ExitCode
where
    F: FnOnce(TurnOptions) -> Fut,
    Fut: std::future::Future<Output = Result<RunResult, SessionError>>,
{
    let (events, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        let mut stdout = std::io::stdout();
        let mut wrote_text = false;
        while let Some(event) = receiver.recv().await {
            if let AgentEvent::TextDelta { text } = event {
                wrote_text |= !text.is_empty();
                let _ = stdout.write_all(text.as_bytes());
                let _ = stdout.flush();
            }
        }
        if wrote_text {
            let _ = stdout.write_all(b"\n");
        }
    });
    let interrupt = CancellationToken::new();
    tokio::spawn(cancel_on_signal(interrupt.clone()));
    let result = start(TurnOptions { wait: None, events: Some(events), cancel: Some(interrupt) }).await;
    let _ = printer.await;
    match result {
        Ok(result) => {
            eprintln!("session {}", result.session_id);
            match (result.status, result.stop_reason.as_deref()) {
                (TurnStatus::Completed, Some("budget_exhausted")) => {
                    eprintln!("stopped: budget exhausted");
                    ExitCode::from(2)
                }
                (TurnStatus::Cancelled, _) => {
                    eprintln!("interrupted");
                    ExitCode::FAILURE
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Err(error) => exit_with(&error),
    }
}

/// `deputy sessions …`.
async fn sessions(service: &LiveSessionService, command: SessionsCommand) -> ExitCode {
    let outcome = match command {
        SessionsCommand::List { all, offset, limit, json } => service
            .list(ListQuery { offset, limit: Some(limit), include_archived: all })
            .await
            .map(|list| if json { to_json(&list) } else { render::session_list(&list) }),
        SessionsCommand::Show { session_id, json } => {
            let id = SessionId::from_string(session_id);
            match (service.read(&id, None).await, service.history(&id).await) {
                (Ok(view), Ok(history)) if json => {
                    Ok(to_json(&serde_json::json!({"session": view, "messages": history.messages})))
                }
                (Ok(view), Ok(history)) => Ok(render::session(&view, &history.messages)),
                (Err(error), _) | (_, Err(error)) => Err(error),
            }
        }
        SessionsCommand::Archive { session_id } => {
            let id = SessionId::from_string(session_id);
            service.archive(&id).await.map(|archived| format!("archived {}\n", archived.session_id))
        }
        SessionsCommand::Compact { session_id } => {
            let id = SessionId::from_string(session_id);
            service.compact(&id).await.map(|done| {
                format!(
                    "{} {}: about {} → {} tokens (summarized: {}, tool outputs pruned: {})\n",
                    if done.compacted { "compacted" } else { "nothing to compact in" },
                    done.session_id,
                    done.tokens_before,
                    done.tokens_after,
                    done.summarized,
                    done.pruned_results
                )
            })
        }
        SessionsCommand::ToolOutput { session_id, tool_use_id } => {
            let id = SessionId::from_string(session_id);
            service.tool_output(&id, &tool_use_id).await.map(|output| output.content)
        }
    };
    match outcome {
        Ok(text) => {
            let mut stdout = std::io::stdout();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(error) => exit_with(&error),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

fn exit_with(error: &SessionError) -> ExitCode {
    if let Some(id) = error.session_id() {
        eprintln!("session {id}");
    }
    eprintln!("{}: {error}", error.code());
    ExitCode::from(u8::try_from(error.code().exit_code()).unwrap_or(1))
}

/// Writes `<tool>.input.json` and `<tool>.output.json` for every tool, and `openapi.json`.
fn write_schemas(out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, contents) in super::schemas::schema_files() {
        let path = out.join(&name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("wrote the tool schemas to {}", out.display());
    Ok(())
}
