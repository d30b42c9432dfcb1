//! The session operations of the surfaces that address them by name (MCP tools, JSON-RPC
//! methods): one table from a name and JSON arguments to exactly one `SessionService` call, so
//! the two surfaces cannot drift apart, and the tool catalog that describes each operation to
//! an LLM caller. REST addresses the same operations by path instead.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::portable::portable;
use super::wire;
use crate::error::{ErrorKind, SessionError};
use crate::model::inbox::SendResult;
use crate::model::{
    ArchiveResult, CompactResult, EventPage, InterruptResult, RunResult, SessionList, SessionView, ToolOutputResult,
};
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
    Send,
    Events,
}

impl Operation {
    pub const ALL: [Operation; 10] = [
        Self::Create,
        Self::Turn,
        Self::Interrupt,
        Self::Read,
        Self::List,
        Self::Archive,
        Self::Compact,
        Self::ToolOutput,
        Self::Send,
        Self::Events,
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
            Self::Send => "session_send",
            Self::Events => "session_events",
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
            Self::Send => "session/send",
            Self::Events => "session/events",
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
                json(service.interrupt(&params.session_id, params.cascade.unwrap_or(true)).await)
            }
            Self::Read => {
                let params: wire::SessionReadParams = wire::parse_params(name, arguments)?;
                json(service.read(&params.session_id, Some(wire::read_wait(params.wait_ms))).await)
            }
            Self::List => {
                let params: wire::SessionListParams = wire::parse_params(name, arguments)?;
                json(service.list(params.into_query()?).await)
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
            Self::Send => {
                let params: wire::SessionSendParams = wire::parse_params(name, arguments)?;
                let (id, request) = params.into_request();
                json(service.send(&id, request).await)
            }
            Self::Events => {
                let params: wire::SessionEventsParams = wire::parse_params(name, arguments)?;
                let limit = params.limit.unwrap_or(wire::DEFAULT_EVENTS_LIMIT);
                json(service.events(&params.session_id, params.after_seq, limit).await)
            }
        }
    }

    /// The tool's entry in the catalog: its description for an LLM caller, whether it only
    /// reads, and the schemas of its arguments and result.
    pub fn descriptor(self) -> ToolDescriptor {
        match self {
            Self::Create => descriptor::<wire::SessionCreateParams, RunResult>(
                self.tool(),
                false,
                "Start a new agent session and run its first turn. The agent works on `prompt` with its model and \
                 tools and answers in `text`. Keep `session_id` to continue the conversation with session_turn. If \
                 the turn takes longer than `wait_ms`, the answer is `status: \"running\"`: the agent keeps working, \
                 and session_read with `wait_ms` collects the result (clients of the MCP tasks extension get a \
                 task after 2 s instead).",
            ),
            Self::Turn => descriptor::<wire::SessionTurnParams, RunResult>(
                self.tool(),
                false,
                "Send the next message to an existing session and run one turn; the agent remembers the whole \
                 conversation. Only one turn runs per session at a time: a call while a turn runs fails with \
                 SESSION_BUSY. Same `wait_ms` / `status: \"running\"` behaviour as session_create. After \
                 `status: \"pending_tool_calls\"`, answer every call in `pending` here (`tool_results` for \
                 callbacks, `approvals` for approvals; `prompt` optional) and the agent goes on from there.",
            ),
            Self::Interrupt => descriptor::<wire::SessionInterruptParams, InterruptResult>(
                self.tool(),
                false,
                "Cancel the turn a session is running. The turn ends with status `cancelled`, keeping what was done \
                 so far, and the session accepts new turns. Fails with SESSION_NOT_RUNNING when no turn runs.",
            ),
            Self::Read => descriptor::<wire::SessionReadParams, SessionView>(
                self.tool(),
                true,
                "Read a session: `state` (status, model, turns, the last turn's result in `last_turn`) and `billing` \
                 (tokens, tool calls, budget left). Never waits behind a running turn unless `wait_ms` is given, in \
                 which case it waits for the running turn to end and returns its result.",
            ),
            Self::List => descriptor::<wire::SessionListParams, SessionList>(
                self.tool(),
                true,
                "List sessions, most recently updated first, with paging (`offset`, `limit`).",
            ),
            Self::Archive => descriptor::<wire::SessionArchiveParams, ArchiveResult>(
                self.tool(),
                false,
                "Stop a session and remove it from the live sessions. A running turn is allowed to finish first.",
            ),
            Self::Compact => descriptor::<wire::SessionCompactParams, CompactResult>(
                self.tool(),
                false,
                "Compact a session's history now: old tool outputs are pruned and older turns are replaced by a \
                 summary, so the session can go on within the model's context window. Sessions also compact by \
                 themselves when their history nears the threshold. Fails with SESSION_BUSY while a turn runs.",
            ),
            Self::ToolOutput => descriptor::<wire::SessionToolOutputParams, ToolOutputResult>(
                self.tool(),
                true,
                "Read the whole output of a tool result that entered a session's history shortened (its middle \
                 replaced by an elision marker naming the tool_use_id).",
            ),
            Self::Send => descriptor::<wire::SessionSendParams, SendResult>(
                self.tool(),
                false,
                "Send a message to a session's inbox without waiting for it. The agent reads it at the next \
                 boundary: between two steps of a running turn, or before the prompt of its next turn. A session \
                 in host mode that is idle starts a turn for it by itself (`delivered: \"started_turn\"`); \
                 otherwise the message waits (`queued`). Read the answer with session_read (`wait_ms`). Fails \
                 with SESSION_INBOX_FULL when 256 messages already wait.",
            ),
            Self::Events => descriptor::<wire::SessionEventsParams, EventPage>(
                self.tool(),
                true,
                "Read a session's event journal: everything that happened (prompts, streamed text merged per \
                 block, tool calls and results, usage, retries, compactions, approvals, turn ends), numbered by \
                 `seq`, with timestamps. Pages of up to `limit` events after `after_seq`; pass the answer's \
                 `next_seq` as `after_seq` to get what happened since. A turn's events appear once it ended.",
            ),
        }
    }
}

/// deputy's tools, in the order `tools/list` shows them.
pub fn tool_catalog() -> Vec<ToolDescriptor> {
    Operation::ALL.into_iter().map(Operation::descriptor).collect()
}

/// One tool of the catalog. Its schemas are rmcp's (JSON Schema 2020-12, the input's for
/// deserializing, the output's for serializing) made [`portable`](super::portable).
#[derive(Debug, Clone)]
pub struct ToolDescriptor {
    pub name: &'static str,
    pub description: &'static str,
    pub read_only: bool,
    pub input_schema: Arc<serde_json::Map<String, serde_json::Value>>,
    pub output_schema: Arc<serde_json::Map<String, serde_json::Value>>,
}

fn descriptor<P, R>(name: &'static str, read_only: bool, description: &'static str) -> ToolDescriptor
where
    P: JsonSchema + 'static,
    R: JsonSchema + 'static,
{
    ToolDescriptor {
        name,
        description,
        read_only,
        // Every params type is a struct, so the object-root requirement always holds.
        input_schema: Arc::new(portable(
            &rmcp::handler::server::common::schema_for_input::<P>().unwrap_or_default(),
        )),
        output_schema: Arc::new(portable(&rmcp::handler::server::common::schema_for_output::<R>())),
    }
}

/// Renders a service result as JSON. The result types are plain data that always serialize, so
/// the error arm cannot happen in practice. It would be an internal error, not the agent's, but
/// the code table has no internal code and adding one changes the contract: it stays
/// `AGENT_ERROR`.
fn json<T: Serialize>(result: Result<T, SessionError>) -> Result<Value, SessionError> {
    serde_json::to_value(result?).map_err(|err| {
        SessionError::agent(None, ErrorKind::Internal, format!("could not encode the result: {err}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_one_tool_and_one_method_and_the_catalog_lists_the_tools() {
        let catalog: Vec<&str> = tool_catalog().iter().map(|tool| tool.name).collect();
        let tools: Vec<&str> = Operation::ALL.iter().map(|operation| operation.tool()).collect();
        assert_eq!(catalog, tools);
        for operation in Operation::ALL {
            assert_eq!(Operation::from_tool(operation.tool()), Some(operation));
            assert_eq!(Operation::from_method(operation.method()), Some(operation));
        }
    }
}
