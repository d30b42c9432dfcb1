//! Helpers shared by the integration suites.
// Each suite uses a different subset of the helpers; unused ones are not dead code.
#![allow(dead_code)]

pub mod deputy;
pub mod http_deputy;
pub mod mcp_servers;
pub mod mock_llm;
pub mod scenarios;
