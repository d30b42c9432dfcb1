//! The command line's shape: every subcommand and flag, as clap types. No behaviour here
//! beyond turning the global flags into [`Settings`]; [`super::commands`] runs them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{Settings, StoreLocation};
use crate::llm::pricing::Usd;
use crate::surfaces::http;

/// deputy hosts LLM agent sessions behind MCP.
///
/// Register `deputy serve` as a stdio MCP server in Claude Desktop, Claude Code, Cursor or VS Code;
/// the client then drives agent sessions through its tools (session_create, session_turn,
/// session_interrupt, session_read, session_list, session_archive, session_compact,
/// session_tool_output, session_send, session_events). Or try one prompt directly with `deputy
/// run`, and continue or inspect stored sessions with `deputy turn`, `deputy send`, `deputy
/// sessions` and `deputy project`.
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

    /// Session store: a file (default: $XDG_DATA_HOME/deputy/sessions.redb), which one process
    /// owns at a time and `deputy serve` shares with every client through the store's
    /// background server; or a PostgreSQL URL (postgres://user@host/db), which every deputy
    /// process opens directly, so replicas can share it.
    #[arg(long, global = true, env = "DEPUTY_STORE", value_parser = StoreLocation::parse)]
    pub store: Option<StoreLocation>,

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
    /// The session id goes to stderr. Exit status: 0 done, 1 error (or, with --output-schema, an
    /// answer that never validated), 2 budget exhausted.
    Run(RunArgs),
    /// Continue a stored session with one more turn, streaming the answer to stdout.
    Turn {
        /// The session's id.
        session_id: String,
        /// The next message for the agent.
        prompt: String,
        #[command(flatten)]
        structured: StructuredArgs,
    },
    /// Send a message to a stored session's inbox. A host-mode session answers it in a turn of
    /// its own, which this command waits for; any other session reads it at its next turn.
    Send {
        /// The session's id (or its name, with --peer-group).
        session_id: String,
        /// The message.
        message: String,
        /// The id of the message this one answers.
        #[arg(long, value_name = "MESSAGE_ID")]
        in_reply_to: Option<String>,
        /// Find the session by name among the sessions of this peer group.
        #[arg(long, value_name = "GROUP")]
        peer_group: Option<String>,
    },
    /// Inspect and manage stored sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// The document collections of the config file (`[documents.NAME]`).
    #[command(subcommand)]
    Documents(DocumentsCommand),
    /// Your memories: what sessions remembered and their compacted history (on the stored
    /// sessions' server).
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// The named agents (profiles) sessions can be created from: `[agents] dirs` of the config
    /// file, default `$XDG_CONFIG_HOME/deputy/agents/*.md`.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Call any session operation by its MCP tool or JSON-RPC method name (`session_read`,
    /// `session/read`, …) with its JSON arguments, on the stored sessions; prints the JSON
    /// result. The same table drives the MCP tools, JSON-RPC, REST and this command.
    Call {
        /// The operation: an MCP tool name or a JSON-RPC method name.
        operation: String,
        /// Its arguments, a JSON object (as the tool's input schema in `schemas/`).
        #[arg(default_value = "{}")]
        arguments: String,
    },
    /// Write the JSON Schemas of the MCP tools' inputs and outputs, and the REST OpenAPI document.
    Schemas {
        /// Directory to write into.
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
    },
    /// Write stored sessions' event journals out as files: `<out>/sessions/<id>/events.jsonl`,
    /// `transcript.md`, `session.json` and `checkpoint`. Incremental: a session already
    /// projected there gets only its new events (and a crashed earlier run is repaired).
    Project {
        /// Directory to write into (created 0700).
        #[arg(long)]
        out: PathBuf,
        /// Only this session (default: every stored session, archived ones included).
        #[arg(long)]
        session: Option<String>,
    },
    /// Print the URL of the store's session inspector, starting a loopback HTTP server for the
    /// store (with a fresh token, printed too) when none serves it.
    Ui,
    /// See or stop the store's background server (the process `deputy serve` attaches to).
    #[command(subcommand)]
    Background(BackgroundCommand),
    /// The background server itself, as `deputy serve` starts it (not for direct use).
    #[command(hide = true)]
    BackgroundServer(BackgroundServerArgs),
}

#[derive(Debug, Clone, Subcommand)]
pub enum BackgroundCommand {
    /// Whether the store's background server runs: its socket, pid, log file, clients and
    /// running turns. Exit status 0 when it answers, 1 when it does not.
    Status,
    /// Ask the store's background server to finish its running turns (within its drain
    /// timeout) and exit; waits until it has.
    Stop,
}

#[derive(Debug, Clone, clap::Args)]
pub struct BackgroundServerArgs {
    /// The Unix socket to listen on.
    #[arg(long)]
    pub socket: PathBuf,
    /// Exit after this many seconds with no client attached and no turn running.
    #[arg(long, default_value_t = 300)]
    pub idle_exit_secs: u64,
    /// Seconds running turns get to finish at shutdown before they are interrupted.
    #[arg(long, default_value_t = 30)]
    pub drain_timeout_secs: u64,
    /// With a store, unload a session idle this long (it is rehydrated from the store by its
    /// next turn); 0 never unloads for idleness. Default: `[sessions] idle_unload_secs` of the
    /// config file, else 600.
    #[arg(long, value_name = "SECS")]
    pub idle_unload_secs: Option<u64>,
    /// Live sessions at most. Beyond, with a store the least recently used idle ones are
    /// unloaded; without one, new sessions are refused. Default: `[sessions] max_live_sessions`
    /// of the config file, else 1000.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_live_sessions: Option<u64>,
}

// The subcommand's help is the doc comment of `Command::Run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// What to ask the agent.
    pub prompt: String,
    /// Start from this named agent (`deputy agents list`); the other flags override its fields.
    #[arg(long)]
    pub agent: Option<String>,
    /// System prompt for the agent.
    #[arg(long)]
    pub system: Option<String>,
    /// Maximum tokens of each model response.
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Stop after this many tokens in total.
    #[arg(long)]
    pub budget_tokens: Option<u64>,
    /// Stop after this many tool calls.
    #[arg(long)]
    pub budget_tool_calls: Option<u64>,
    /// Stop once the model calls have cost this many US dollars (the model needs a known
    /// price).
    #[arg(long, value_parser = parse_usd)]
    pub budget_cost_usd: Option<Usd>,
    #[command(flatten)]
    pub structured: StructuredArgs,
}

/// Structured output from the command line: the answer must be JSON valid against a schema.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StructuredArgs {
    /// A JSON Schema file (2020-12) the answer must be valid against. stdout then gets the
    /// validated JSON value alone, on one line (not the streamed text). With `deputy run` it
    /// becomes the session's schema for its later turns too; with `deputy turn` it applies to
    /// that turn. An answer that never validates exits 1 with the validation errors on stderr.
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
    /// How many times an answer that does not validate is sent back to the model (default 2).
    #[arg(long, value_name = "N", requires = "output_schema")]
    pub structured_output_retries: Option<u32>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Serve HTTP on this address (e.g. 127.0.0.1:8787) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Serve JSON-RPC over stdin/stdout instead of MCP (one message per line; a turn's events
    /// arrive as `session/event` notifications before its response), in this process.
    #[arg(long, conflicts_with = "http")]
    pub rpc: bool,
    /// Bearer token required on every HTTP route but /healthz (this or [[auth.tokens]] is needed
    /// to bind a non-loopback address). Its holder is the local user, with every scope.
    #[arg(long, env = "DEPUTY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Another accepted Host name (loopback names and the bind address always are).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Another accepted browser Origin, e.g. `https://app.example.com:443` (`:*` = any port).
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Largest HTTP request body in bytes.
    #[arg(long, default_value_t = http::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// HTTP connections served at once; up to 256 more are answered 503 (Retry-After) at once,
    /// the rest wait to be accepted.
    #[arg(long, default_value_t = http::listener::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Seconds an HTTP connection may take to send a request's header, or stay idle between
    /// requests, before it is closed.
    #[arg(long, default_value_t = http::listener::DEFAULT_HEADER_READ_TIMEOUT.as_secs())]
    pub header_read_timeout_secs: u64,
    /// Legacy (2025-11-25) MCP transport sessions held at once on /mcp.
    #[arg(long, default_value_t = http::mcp_sessions::DEFAULT_MAX_MCP_SESSIONS)]
    pub max_mcp_sessions: usize,
    /// Of those, what one subject (token) may hold; one more is refused 429.
    #[arg(long, default_value_t = http::mcp_sessions::DEFAULT_MAX_MCP_SESSIONS_PER_SUBJECT)]
    pub max_mcp_sessions_per_subject: usize,
    /// `events?follow=true` streams one subject (token) may hold at once; one more is refused 429.
    #[arg(long, default_value_t = http::follow::DEFAULT_MAX_FOLLOWS_PER_SUBJECT)]
    pub max_follows_per_subject: usize,
    /// Requests one subject (token) may have in flight at once (long polls, streamed turns and
    /// follows hold theirs while they last); one more is refused 429. Default: half of
    /// --max-connections.
    #[arg(long)]
    pub max_requests_per_subject: Option<usize>,
    /// Seconds a `events?follow=true` stream lasts at most (the client resumes with `after_seq`).
    #[arg(long, default_value_t = http::follow::DEFAULT_MAX_FOLLOW.as_secs())]
    pub max_follow_secs: u64,
    /// Seconds running turns get to finish at shutdown before they are interrupted.
    #[arg(long, default_value_t = 30)]
    pub drain_timeout_secs: u64,
    /// Serve stdio in this process, owning the store, instead of attaching to the store's
    /// background server. Without it, `deputy serve` (stdio, with a store) relays to that server,
    /// starting it when none runs, so sessions outlive this process and every client shares the
    /// store. Implied by --ephemeral, and by builds without a store; --http always serves in
    /// this process.
    #[arg(long)]
    pub no_daemon: bool,
    /// For a background server this command starts: exit after this many seconds with no
    /// client attached and no turn running.
    #[arg(long, default_value_t = 300)]
    pub idle_exit_secs: u64,
    /// With a store (for a background server this command starts: an attached server keeps
    /// its own), unload a session idle this long (it is rehydrated from the store by its
    /// next turn); 0 never unloads for idleness. Default: `[sessions] idle_unload_secs` of the
    /// config file, else 600.
    #[arg(long, value_name = "SECS")]
    pub idle_unload_secs: Option<u64>,
    /// Live sessions at most. Beyond, with a store the least recently used idle ones are
    /// unloaded; without one, new sessions are refused. Default: `[sessions] max_live_sessions`
    /// of the config file, else 1000.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_live_sessions: Option<u64>,
}

/// `deputy agents …`.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Every profile file, valid or not (an invalid one with its reason).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One agent, whole, as JSON: its version, fields and system prompt.
    Show { name: String },
}

/// `deputy documents …`.
#[derive(Debug, Subcommand)]
pub enum DocumentsCommand {
    /// Bring the collections (or one) up to their files now: only what changed is read again.
    Index { collection: Option<String> },
}

/// `deputy memory …`: the caller's memories (the local caller's, `local`, unless a token
/// says otherwise).
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// The newest memories first.
    List {
        /// Continue with memories older than this id (the `next page: --before …` printed).
        #[arg(long)]
        before: Option<u64>,
        /// How many (default 20, max 100).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The memories that best match some words.
    Search {
        query: String,
        /// How many (default 5, max 20).
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a memory by id.
    Delete { id: u64 },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, most recently updated first.
    List {
        /// Include archived sessions.
        #[arg(long)]
        all: bool,
        /// Continue after an earlier page (the `next page: --cursor …` it printed).
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long, default_value_t = 0)]
        offset: usize,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Only the children of this session (delegated by it).
        #[arg(long)]
        parent: Option<String>,
        /// Only the sessions of this delegation tree, its root included.
        #[arg(long)]
        root: Option<String>,
        #[command(flatten)]
        filters: ListFilters,
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
    /// Copy a session's conversation up to a finished turn into a new session (prints its id).
    Fork {
        session_id: String,
        /// The last turn copied (default: the last; 0: none).
        #[arg(long)]
        at_turn: Option<u64>,
    },
    /// Write a session as one JSONL document on stdout (record, messages, journal; secret
    /// values left out): `deputy sessions export ID > FILE`.
    Export { session_id: String },
    /// Create a new session from a document `sessions export` wrote (`-`: read stdin).
    Import { file: std::path::PathBuf },
    /// Drop a session's turns after `--to-turn` from its history (their events stay in its
    /// journal); its next turn continues from there.
    Rewind {
        session_id: String,
        /// The last turn kept (0: none).
        #[arg(long)]
        to_turn: u64,
    },
}

impl Cli {
    /// The start-up choices every command shares (global flags).
    pub fn settings(&self) -> Settings {
        Settings {
            model: self.model.clone(),
            config: self.config.clone(),
            workspace: self.workspace.clone(),
            store: self.store.clone(),
            ephemeral: self.ephemeral,
            idle_unload_secs: None,
            max_live_sessions: None,
            serves_http: false,
        }
    }
}

impl Command {
    /// The log filter when `RUST_LOG` says nothing. Logs go to stderr whatever the command:
    /// `serve` reports its lifecycle, the others stay quiet so stderr carries only their answer.
    pub fn default_log_filter(&self) -> &'static str {
        match self {
            Self::Serve(_) | Self::BackgroundServer(_) => "deputy=info,rmcp=warn",
            Self::Run(_)
            | Self::Turn { .. }
            | Self::Send { .. }
            | Self::Sessions(_)
            | Self::Memory(_)
            | Self::Documents(_)
            | Self::Call { .. }
            | Self::Schemas { .. }
            | Self::Project { .. }
            | Self::Background(_)
            | Self::Ui => "warn",
            // The listing itself says which files are invalid and why.
            Self::Agents(_) => "error",
        }
    }
}

/// A dollar amount given on the command line (`0.50`).
fn parse_usd(text: &str) -> Result<Usd, String> {
    text.parse::<f64>()
        .ok()
        .and_then(Usd::from_dollars)
        .ok_or_else(|| format!("{text:?} is not an amount of dollars (a number, 0 or more)"))
}

/// `deputy sessions list`'s filters, applied by the server before paging.
#[derive(Debug, Clone, clap::Args)]
pub struct ListFilters {
    /// Only sessions with this status (`archived` lists the archived ones).
    #[arg(long, value_enum)]
    pub status: Option<StatusArg>,
    /// Only this owner's sessions (another owner's needs `sessions:all` or `sessions:read_all`).
    #[arg(long)]
    pub owner: Option<String>,
    /// Only sessions with this label: `key` or `key=value`.
    #[arg(long)]
    pub label: Option<String>,
    /// Only sessions whose title contains this text (case-insensitive).
    #[arg(long)]
    pub title: Option<String>,
}

/// A session status as `--status` takes it.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StatusArg {
    Idle,
    Running,
    Archived,
}

impl From<StatusArg> for crate::model::SessionStatus {
    fn from(status: StatusArg) -> Self {
        match status {
            StatusArg::Idle => Self::Idle,
            StatusArg::Running => Self::Running,
            StatusArg::Archived => Self::Archived,
        }
    }
}
