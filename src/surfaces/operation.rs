//! The session operations of the surfaces that address them by name (MCP tools, JSON-RPC
//! methods): one table from a name and JSON arguments to exactly one `SessionService` call, so
//! the two surfaces cannot drift apart. REST addresses the same operations by path instead.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::wire;
use crate::error::SessionError;
use crate::session::{SessionService, TurnOptions};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Turn,
    Interrupt,
    Read,
    List,
    Archive,
    Compact,
    ToolOutput,
}

impl Operation {
    pub const ALL: [Operation; 8] = [
        Self::Create,
        Self::Turn,
        Self::Interrupt,
        Self::Read,
        Self::List,
        Self::Archive,
        Self::Compact,
        Self::ToolOutput,
    ];

    /// The MCP tool's name.
    pub fn tool(self) -> &'static str {
        match self {
            Self::Create => "session_create",
            Self::Turn => "session_turn",
            Self::Interrupt => "session_interrupt",
            Self::Read => "session_read",
            Self::List => "session_list",
            Self::Archive => "session_archive",
            Self::Compact => "session_compact",
            Self::ToolOutput => "session_tool_output",
        }
    }

    /// The JSON-RPC method's name.
    pub fn method(self) -> &'static str {
        match self {
            Self::Create => "session/create",
            Self::Turn => "turn/start",
            Self::Interrupt => "turn/interrupt",
            Self::Read => "session/read",
            Self::List => "session/list",
            Self::Archive => "session/archive",
            Self::Compact => "session/compact",
            Self::ToolOutput => "session/tool_output",
        }
    }

    pub fn from_tool(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|operation| operation.tool() == name)
    }

    pub fn from_method(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|operation| operation.method() == name)
    }

    /// Parses `arguments` (errors name the operation as `name`), makes the one service call and
    /// renders its result as JSON. `turn_options` turns the wait of a turn-running operation
    /// into the surface's options (MCP adds progress and cancellation); whatever else it returns
    /// (a progress forwarder) lives until the call ends.
    pub async fn run<S: SessionService, G>(
        self,
        name: &str,
        service: &S,
        arguments: Value,
        turn_options: impl FnOnce(Duration) -> (TurnOptions, G),
    ) -> Result<Value, SessionError> {
        match self {
            Self::Create => {
                let params: wire::SessionCreateParams = wire::parse_params(name, arguments)?;
                let (options, _guard) = turn_options(wire::turn_wait(params.wait_ms));
                json(service.create_session(params.into_request(options)).await)
            }
            Self::Turn => {
                let params: wire::SessionTurnParams = wire::parse_params(name, arguments)?;
                let (options, _guard) = turn_options(wire::turn_wait(params.wait_ms));
                let (id, request) = params.into_request(options);
                json(service.start_turn(&id, request).await)
            }
            Self::Interrupt => {
                let params: wire::SessionInterruptParams = wire::parse_params(name, arguments)?;
                json(service.interrupt(&params.session_id).await)
            }
            Self::Read => {
                let params: wire::SessionReadParams = wire::parse_params(name, arguments)?;
                json(service.read(&params.session_id, Some(wire::read_wait(params.wait_ms))).await)
            }
            Self::List => {
                let params: wire::SessionListParams = wire::parse_params(name, arguments)?;
                json(service.list(params.into()).await)
            }
            Self::Archive => {
                let params: wire::SessionArchiveParams = wire::parse_params(name, arguments)?;
                json(service.archive(&params.session_id).await)
            }
            Self::Compact => {
                let params: wire::SessionCompactParams = wire::parse_params(name, arguments)?;
                json(service.compact(&params.session_id).await)
            }
            Self::ToolOutput => {
                let params: wire::SessionToolOutputParams = wire::parse_params(name, arguments)?;
                json(service.tool_output(&params.session_id, &params.tool_use_id).await)
            }
        }
    }
}

/// Renders a service result as JSON. The result types are plain data that always serialize, so
/// the error arm cannot happen in practice. It would be an internal error, not the agent's, but
/// the code table has no internal code and adding one changes the contract: it stays
/// `AGENT_ERROR`.
fn json<T: Serialize>(result: Result<T, SessionError>) -> Result<Value, SessionError> {
    serde_json::to_value(result?)
        .map_err(|err| SessionError::agent(None, format!("could not encode the result: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_one_tool_and_one_method_and_the_catalog_lists_the_tools() {
        let catalog: Vec<&str> = wire::tool_catalog().iter().map(|tool| tool.name).collect();
        let tools: Vec<&str> = Operation::ALL.iter().map(|operation| operation.tool()).collect();
        assert_eq!(catalog, tools);
        for operation in Operation::ALL {
            assert_eq!(Operation::from_tool(operation.tool()), Some(operation));
            assert_eq!(Operation::from_method(operation.method()), Some(operation));
        }
    }
}
