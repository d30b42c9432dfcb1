//! External MCP servers as tools, through rmcp's client (stdio child processes and streamable
//! HTTP).
//!
//! - [`spec`]: a resolved server and the [`McpServerKey`] that decides sharing;
//! - [`config`]: named servers and pool settings of the config file, `session_create` entries;
//! - [`error`]: [`McpServerError`], what went wrong at which stage;
//! - [`live`]: one running server (rmcp session + process group);
//! - [`factory`]: the process-wide [`McpFactory`] (active sharing, idle pool, reaper);
//! - [`tool`]: each server tool exposed to the model as `server__tool`.

pub mod config;
pub mod error;
pub mod factory;
pub mod live;
pub mod reach;
pub mod spec;
pub mod tool;

pub use config::{McpPoolConfig, McpPoolSettings, McpServerConfig, McpServerRequest, resolve_servers};
pub use error::McpServerError;
pub use factory::{McpConnection, McpFactory, McpStats};
pub use reach::Reach;
pub use spec::{McpServerKey, McpServerSpec, McpTransport};
pub use tool::{McpTool, session_tools};
