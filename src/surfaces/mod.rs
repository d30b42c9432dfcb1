//! Surfaces translate; they never decide.
//!
//! Each handler parses its input, converts it into a service request, makes exactly one
//! [`SessionService`](crate::session::SessionService) call and renders the answer. Anything
//! that branches on session state belongs in `session/`.
//!
//! - [`wire`]: parameter types and the tool catalog shared by every surface.
//! - [`mcp`]: the MCP server (rmcp), served over stdio or by [`http`].
//! - [`http`]: MCP streamable HTTP, REST and JSON-RPC on one axum listener.
//! - [`portable`]: the transform that keeps every generated schema portable.
//! - [`progress`]: turns agent events into throttled MCP progress notifications.
//! - [`resources`]: sessions as MCP resources; [`mcp_tasks`]: MCP Tasks for long turns;
//!   [`approvals`]: held approvals as elicitations.
//! - [`render`]: the command line's human-readable text (the CLI itself is [`crate::cli`]).

pub mod http;
pub mod mcp;
pub mod operation;
pub mod portable;
pub mod rpc_stdio;
pub mod schemas;
pub mod strict;
pub mod wire;
