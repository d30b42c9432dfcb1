//! The session operations, as one declarative table: a row per operation ([`Spec`]) gives its
//! MCP tool, its JSON-RPC method, its description and schemas (the tool catalog and
//! `schemas/`), and its REST route (the router and the OpenAPI document); `deputy call` reaches
//! any of them by name. [`Operation::run`] is the one place that turns JSON arguments into the
//! one `SessionService` call, so no surface can drift from another.
//!
//! A new operation is a variant, its row in [`SPECS`] and its arm in [`Operation::run`] (here),
//! and its params type in [`wire`]; every surface then has it.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

mod specs;

pub use specs::SPECS;

use super::portable::portable;
use super::strict::strict_input;
use super::wire;
use crate::error::ErrorCode;
use crate::error::{ErrorKind, SessionError};
use crate::session::{SessionService, TurnOptions};

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumCount)]
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
    AgentList,
    AgentGet,
    Fork,
    Rewind,
    Export,
    Import,
    Messages,
    MemoryList,
    MemoryDelete,
    DocumentsIndex,
    CallerGet,
    WebhooksStatus,
}

/// One operation's row of the table: everything the surfaces say of it.
#[derive(Debug)]
pub struct Spec {
    /// The MCP tool's name (also `deputy call`'s).
    pub tool: &'static str,
    /// The JSON-RPC method's name (also `deputy call`'s).
    pub method: &'static str,
    /// Whether it only reads (the tool's `readOnlyHint`).
    pub read_only: bool,
    /// Whether MCP clients see it as a tool. The named agents are MCP resources instead
    /// (`deputy://agents`), and `session_create`'s description lists them: the tool list a
    /// client's model reads stays as short as it was.
    pub mcp_tool: bool,
    /// Input fields MCP's tool list leaves out of the schema (still accepted): options for
    /// programs, which would cost every call of a client's model the bytes of their schema.
    pub not_for_models: &'static [&'static str],
    /// What the operation does, for an LLM caller.
    pub description: &'static str,
    /// The params type's schema, as the tool's input schema.
    pub input_schema: fn() -> Map<String, Value>,
    /// The result type's schema, as the tool's output schema.
    pub output_schema: fn() -> Map<String, Value>,
    pub rest: RestRoute,
}

/// Where an operation is on the REST surface, and how the OpenAPI document describes it.
#[derive(Debug, Clone, Copy)]
pub struct RestRoute {
    pub method: Method,
    /// axum and OpenAPI spell path parameters alike: `{name}`, one of
    /// [`PATH_PARAMETERS`](super::http::routes::PATH_PARAMETERS).
    pub path: &'static str,
    /// Whose properties are the route's query parameters (minus those the path supplies).
    pub query: Option<QueryParams>,
    pub operation_id: &'static str,
    pub summary: &'static str,
    pub description: Option<&'static str>,
    /// The component schema of the success answer; `None`: any JSON object.
    pub result: Option<&'static str>,
    /// What the success answer means.
    pub answer: &'static str,
    /// The codes the operation can fail with (the `SessionService` method's errors). Their
    /// statuses come from the code table; 413 is added for routes with a body, and the guard's
    /// 401/403 for every route.
    pub errors: &'static [ErrorCode],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Delete,
}

impl Method {
    /// As in a request line: `GET`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Delete => "DELETE",
        }
    }

    /// As an OpenAPI path item's key: `get`.
    pub fn openapi_key(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Post => "post",
            Self::Delete => "delete",
        }
    }
}

/// The params types whose properties a route takes as query parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryParams {
    /// `SessionReadParams`: `wait_ms`.
    Read,
    /// `SessionListParams`: `cursor`, `offset`, `limit`, `include_archived`, the tree and the
    /// filters.
    List,
    /// `SessionEventsParams`: `after_seq`, `limit` (plus the REST-only `follow`).
    Events,
    /// `MemoryListParams`: `query`, `before`, `limit`.
    Memories,
    /// `DocumentsIndexParams`: `collection`.
    Documents,
}

impl Operation {
    pub const ALL: [Operation; <Operation as strum::EnumCount>::COUNT] = [
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
        Self::AgentList,
        Self::AgentGet,
        Self::Fork,
        Self::Rewind,
        Self::Export,
        Self::Import,
        Self::Messages,
        Self::MemoryList,
        Self::MemoryDelete,
        Self::DocumentsIndex,
        Self::CallerGet,
        Self::WebhooksStatus,
    ];

    /// The operation's row.
    pub fn spec(self) -> &'static Spec {
        &SPECS[self as usize]
    }

    /// The MCP tool's name.
    pub fn tool(self) -> &'static str {
        self.spec().tool
    }

    /// The JSON-RPC method's name.
    pub fn method(self) -> &'static str {
        self.spec().method
    }

    pub fn from_tool(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|operation| operation.tool() == name)
    }

    pub fn from_method(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|operation| operation.method() == name)
    }

    /// By either name: the MCP tool's or the JSON-RPC method's (`deputy call`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::from_tool(name).or_else(|| Self::from_method(name))
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
            Self::AgentList => {
                let _: wire::AgentListParams = wire::parse_params(name, arguments)?;
                json(Ok(service.agents()))
            }
            Self::AgentGet => {
                let params: wire::AgentGetParams = wire::parse_params(name, arguments)?;
                json(service.agent(&params.name))
            }
            Self::Fork => {
                let params: wire::SessionForkParams = wire::parse_params(name, arguments)?;
                json(service.fork(&params.session_id, params.at_turn).await)
            }
            Self::Rewind => {
                let params: wire::SessionRewindParams = wire::parse_params(name, arguments)?;
                json(service.rewind(&params.session_id, params.to_turn).await)
            }
            Self::Export => {
                let params: wire::SessionExportParams = wire::parse_params(name, arguments)?;
                json(service.export(&params.session_id).await)
            }
            Self::Import => {
                let params: wire::SessionImportParams = wire::parse_params(name, arguments)?;
                json(service.import(&params.document).await)
            }
            Self::Messages => {
                let params: wire::SessionMessagesParams = wire::parse_params(name, arguments)?;
                json(service.history(&params.session_id).await)
            }
            Self::MemoryList => {
                let params: wire::MemoryListParams = wire::parse_params(name, arguments)?;
                json(service.memories(params.into_query()).await)
            }
            Self::MemoryDelete => {
                let params: wire::MemoryDeleteParams = wire::parse_params(name, arguments)?;
                json(service.forget_memory(params.memory_id).await)
            }
            Self::DocumentsIndex => {
                let params: wire::DocumentsIndexParams = wire::parse_params(name, arguments)?;
                json(service.index_documents(params.collection).await)
            }
            Self::CallerGet => {
                let _: wire::CallerGetParams = wire::parse_params(name, arguments)?;
                json(Ok(service.caller_info()))
            }
            Self::WebhooksStatus => {
                let _: wire::WebhooksStatusParams = wire::parse_params(name, arguments)?;
                json(service.webhooks().await)
            }
        }
    }

    /// The tool's entry in the catalog: its description for an LLM caller, whether it only
    /// reads, and the schemas of its arguments and result.
    pub fn descriptor(self) -> ToolDescriptor {
        let spec = self.spec();
        ToolDescriptor {
            name: spec.tool,
            description: spec.description,
            read_only: spec.read_only,
            input_schema: Arc::new((spec.input_schema)()),
            output_schema: Arc::new((spec.output_schema)()),
        }
    }
}

/// deputy's tools, in the order `tools/list` shows them.
/// Every operation's tool, MCP's or not (`schemas/` has them all).
pub fn tool_catalog() -> Vec<ToolDescriptor> {
    Operation::ALL.into_iter().map(Operation::descriptor).collect()
}

/// The tools an MCP client lists, without the fields that are not for models.
pub fn mcp_tool_catalog() -> Vec<ToolDescriptor> {
    Operation::ALL
        .into_iter()
        .filter(|operation| operation.spec().mcp_tool)
        .map(|operation| {
            let mut descriptor = operation.descriptor();
            let hidden = operation.spec().not_for_models;
            if !hidden.is_empty() {
                descriptor.input_schema = Arc::new(without_fields(&descriptor.input_schema, hidden));
            }
            descriptor
        })
        .collect()
}

/// An object schema less some of its properties, in `properties` and `required` alike.
fn without_fields(schema: &Map<String, Value>, fields: &[&str]) -> Map<String, Value> {
    let mut schema = schema.clone();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.retain(|name, _| !fields.contains(&name.as_str()));
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|name| name.as_str().is_none_or(|name| !fields.contains(&name)));
    }
    schema
}

/// One tool of the catalog. Its schemas are rmcp's (JSON Schema 2020-12, the input's for
/// deserializing, the output's for serializing) made [`portable`](super::portable); the input's
/// also [strict-ready](super::strict).
#[derive(Debug, Clone)]
pub struct ToolDescriptor {
    pub name: &'static str,
    pub description: &'static str,
    pub read_only: bool,
    pub input_schema: Arc<Map<String, Value>>,
    pub output_schema: Arc<Map<String, Value>>,
}

/// A params type's schema, [`portable`] and [`strict_input`]. Every params type is a struct,
/// so the object-root requirement always holds.
fn input_schema<P: JsonSchema + 'static>() -> Map<String, Value> {
    strict_input(&portable(&rmcp::handler::server::common::schema_for_input::<P>().unwrap_or_default()))
}

fn output_schema<R: JsonSchema + 'static>() -> Map<String, Value> {
    portable(&rmcp::handler::server::common::schema_for_output::<R>())
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
    fn the_table_lists_every_operation_in_order() {
        for (index, operation) in Operation::ALL.into_iter().enumerate() {
            assert_eq!(operation as usize, index);
        }
    }

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

    /// The list's filters are in `schemas/` and the OpenAPI queries, and not in the tool list
    /// a client's model reads; every field a model does see is still in the schema.
    #[test]
    fn mcp_leaves_out_the_fields_not_for_models_and_nothing_else() {
        let properties = |tools: Vec<ToolDescriptor>| {
            let list = tools.into_iter().find(|tool| tool.name == "session_list").unwrap();
            let names: Vec<String> = list.input_schema["properties"].as_object().unwrap().keys().cloned().collect();
            let required: Vec<String> = list
                .input_schema
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(|name| name.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            (names, required)
        };
        let (all, _) = properties(tool_catalog());
        let (for_models, required) = properties(mcp_tool_catalog());
        for field in wire::SessionListParams::NOT_FOR_MODELS {
            assert!(all.iter().any(|name| name == field), "{field}");
            assert!(!for_models.iter().any(|name| name == field) && !required.iter().any(|name| name == field));
        }
        assert_eq!(all.len(), for_models.len() + wire::SessionListParams::NOT_FOR_MODELS.len());
    }
}
