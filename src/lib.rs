//! deputy: an MCP server that hosts LLM agent sessions.
//!
//! # Layers
//!
//! Each module names only modules below it; `tests/suite/layering.rs` fails on a back-edge.
//!
//! ```text
//!  cli ─────────── the command line: flags → calls, results → stdout and exit codes
//!  server ──────── the composition root: load, build the service, signals, serve, drain
//!  surfaces ────── MCP (stdio, /mcp), REST, JSON-RPC: translate, never decide
//!  config ──────── config file + environment → one frozen AppState
//!  session ─────── SessionService: the lifecycle contract, one actor per session
//!  agent ───────── the loop (turn, step), compaction, pending calls, events, factory
//!  store ───────── SessionStore: redb tables, codec (feature session-store)
//!  model ───────── plain data: record, views, results, spec, budget, held steps
//!  hooks, peers ── operator hooks around sessions, turns and tools; remote deputy servers
//!  tools ───────── Tool, ToolScope, builtins, shell, external MCP servers
//!  sandbox, skills ─ Landlock/seccomp of the shell; Agent Skills, a catalog of SKILL.md folders
//!  llm ─────────── Provider, wire adapters, the retry gate
//!  policy ──────── Grants: what a caller on a surface may switch on; audit tags
//!  caller ──────── Caller: a subject and its scopes (who asks, what they may do)
//!  error ───────── SessionError, the one code table, ErrorKind
//!  ids, text, secrets ─ id newtypes; char-boundary truncation; Secret, a value never echoed
//!  tls ─────────── the one TLS crypto provider (ring), and the HTTP client builder on it
//! ```
//!
//! # How one request travels
//!
//! A surface parses its input into a request type and makes exactly one call on
//! [`session::SessionService`]. The live service keeps one actor task per session
//! ([`session::actor`]); a turn runs the agent loop ([`agent::turn`], with held tool calls in
//! `agent::step`), which streams from an LLM [`llm::Provider`] and executes tools from the
//! session's [`tools::ToolScope`] (builtins, shell, external MCP servers, caller callbacks)
//! until the model stops, the caller interrupts, calls wait for the caller, or the
//! [`model::Budget`] runs out. Before each model call the history may be compacted
//! (`agent::compaction`). After the turn the actor saves what the turn added ([`store`]), as
//! [`model`] values. Results and errors travel back the same way; every error is an
//! [`error::SessionError`] whose code means the same thing on every surface.

pub mod agent;
pub mod allocator;
pub mod background;
pub mod caller;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod error;
pub mod hooks;
pub mod ids;
pub mod llm;
pub mod mcp_transport;
pub mod memory;
pub mod model;
pub mod peers;
pub mod policy;
pub mod profiles;
pub mod retrieval;
pub mod sandbox;
pub mod secrets;
pub mod server;
pub mod session;
pub mod skills;
pub mod store;
pub mod surfaces;
pub mod telemetry;
pub mod text;
pub mod tls;
pub mod tools;
pub mod webhooks;
