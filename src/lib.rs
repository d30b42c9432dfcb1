//! deputy: an MCP server that hosts LLM agent sessions.
//!
//! # How one request travels
//!
//! A surface (`surfaces::mcp` for MCP over stdio, `surfaces::cli` for the command line) parses
//! its input into a request type and makes exactly one call on [`session::SessionService`].
//! The live service keeps one actor task per session ([`session::actor`]); a turn runs the
//! agent loop ([`agent::turn`]) which streams from an LLM [`llm::Provider`] and executes tools
//! from the session's [`tools::ToolScope`] until the model stops, the caller interrupts, or the
//! [`agent::Budget`] runs out. Results and errors travel back the same way; every error is a
//! [`error::SessionError`] whose code means the same thing on every surface.
//!
//! # Layout
//!
//! - [`error`]: the error enum and the one code table.
//! - [`ids`]: id newtypes.
//! - [`config`]: config file + environment, resolved once into an immutable [`config::AppState`].
//! - [`llm`]: provider trait, wire adapters, retry gate, scripted test provider.
//! - [`tools`]: the `Tool` trait, `ToolScope`, builtin tools.
//! - [`agent`]: the agent loop, its events, budget and factory.
//! - [`session`]: the `SessionService` contract and its live implementation.
//! - [`surfaces`]: MCP and CLI adapters; they translate and never decide.

pub mod agent;
#[cfg(feature = "session-compaction")]
pub mod compaction;
pub mod config;
pub mod error;
pub mod ids;
pub mod llm;
pub mod session;
pub mod store;
pub mod surfaces;
pub mod tools;
