//! deputy: an MCP server that hosts LLM agent sessions.
//!
//! # How one request travels
//!
//! A surface (`surfaces::mcp` for MCP over stdio or `/mcp`, `surfaces::http` for REST and
//! JSON-RPC, [`cli`] for the command line) parses its input into a request type and
//! makes exactly one call on [`session::SessionService`]. The live service keeps one actor task
//! per session ([`session::actor`]); a turn runs the agent loop ([`agent::turn`]), which streams
//! from an LLM [`llm::Provider`] and executes tools from the session's [`tools::ToolScope`]
//! (builtins, shell, external MCP servers, caller callbacks) until the model stops, the caller
//! interrupts, calls wait for the caller, or the [`agent::Budget`] runs out. Before each model
//! call the history may be compacted (`compaction`). After the turn the actor saves what the
//! turn added ([`store`]). Results and errors travel back the same way; every error is a
//! [`error::SessionError`] whose code means the same thing on every surface.
//!
//! # Layout
//!
//! - [`error`]: the error enum and the one code table.
//! - [`ids`]: id newtypes.
//! - [`config`]: config file + environment, resolved once into an immutable [`config::AppState`].
//! - [`llm`]: provider trait, wire adapters, retry gate, scripted test provider.
//! - [`tools`]: the `Tool` trait, `ToolScope`, workspace-confined builtins, shell, external MCP
//!   servers (`McpFactory` pool), callback tools, approval policy.
//! - [`agent`]: the agent loop, its events, budget, context accounting, pending calls, factory.
//! - `compaction` (feature `session-compaction`): pruning and summarizing long histories.
//! - [`session`]: the `SessionService` contract and its live implementation.
//! - [`store`]: the `SessionStore` contract and its redb implementation (feature `session-store`).
//! - [`text`]: cutting text to a size on char boundaries; the bottom layer, depends on nothing.
//! - [`surfaces`]: MCP (stdio and HTTP), REST and JSON-RPC adapters; they translate and never
//!   decide.
//! - [`server`]: the composition root: builds the service once and runs the process's lifecycle
//!   (signals, serving a surface, draining, stopping the MCP server pool).
//! - [`cli`]: the command line (clap types and the subcommands), on top of `server`; `main.rs`
//!   only parses it, sends logs to stderr and runs it.

pub mod agent;
pub mod background;
pub mod cli;
pub mod config;
pub mod error;
pub mod ids;
pub mod llm;
pub mod model;
pub mod server;
pub mod session;
pub mod store;
pub mod surfaces;
pub mod text;
pub mod tools;
