//! The session operations, as one declarative table: a row per operation ([`Spec`]) gives its
//! MCP tool, its JSON-RPC method, its description, its params and result types (the tool
//! catalog, `schemas/` and the OpenAPI components), and its REST route (the router and the
//! OpenAPI document); `deputy call` reaches any of them by name. [`Operation::run`] is the one
//! place that turns JSON arguments into the one `SessionService` call, so no surface can drift
//! from another.
//!
//! The operations come in groups, a file each, by what they are about ([`turns`],
//! [`sessions`], [`inbox`], [`journal`], [`agents`], [`history`], [`memory`], [`caller`]). A
//! group's file holds everything of its operations: the variant, the row, the arm that runs it
//! and the params type. A new operation in a group is written there and nowhere else in the
//! surfaces; every surface then has it.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use axum::http::Uri;
use schemars::JsonSchema;
use schemars::SchemaGenerator;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use strum::VariantArray;

/// A group of operations: its enum, each operation's row (a `static` of the group's file) and
/// its `run` arm. An arm is written as a closure of the service and the parsed params (plus
/// `turn_options` for the operations that run a turn) whose value is the service call's
/// result: the macro parses the arguments into the params type and renders the result.
macro_rules! operations {
    (
        $(#[$meta:meta])*
        pub enum $group:ident {
            $($variant:ident => $row:ident, |$service:ident, $params:tt: $type:ty $(, $turn:ident)?| $call:expr,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, strum::VariantArray)]
        pub enum $group {
            $($variant,)*
        }

        impl $group {
            /// The operation's row.
            pub fn spec(self) -> &'static $crate::surfaces::operation::Spec {
                match self {
                    $(Self::$variant => &$row,)*
                }
            }

            /// Parses `arguments` as the operation's params, makes its one service call and
            /// renders the result ([`Operation::run`](super::Operation::run)).
            pub(super) async fn run<S: $crate::session::SessionService, G>(
                self,
                name: &str,
                service: &S,
                arguments: serde_json::Value,
                turn_options: impl FnOnce(std::time::Duration) -> ($crate::session::TurnOptions, G),
            ) -> Result<serde_json::Value, $crate::error::SessionError> {
                // Only the operations that run a turn take it.
                let _ = &turn_options;
                match self {
                    $(Self::$variant => {
                        let $params: $type = $crate::surfaces::wire::parse_params(name, arguments)?;
                        let $service = service;
                        $(let $turn = turn_options;)?
                        $crate::surfaces::operation::json($call)
                    })*
                }
            }
        }
    };
}

pub mod agents;
pub mod caller;
pub mod history;
pub mod inbox;
pub mod journal;
pub mod memory;
pub mod sessions;
pub mod turns;

use self::agents::Agents;
use self::caller::Caller;
use self::history::History;
use self::inbox::Inbox;
use self::journal::Journal;
use self::memory::Memory;
use self::sessions::Sessions;
use self::turns::Turns;
use super::portable::portable;
use super::strict::strict_input;
use crate::error::ErrorCode;
use crate::error::{ErrorKind, SessionError};
use crate::session::{SessionService, TurnOptions};

/// One operation: its group and which of the group's it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Turns(Turns),
    Sessions(Sessions),
    Inbox(Inbox),
    Journal(Journal),
    Agents(Agents),
    History(History),
    Memory(Memory),
    Caller(Caller),
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
    /// The params type: the tool's input schema, and the REST body's or query's.
    pub params: TypeSchema,
    /// The result type: the tool's output schema, and the REST answer's.
    pub result: TypeSchema,
    pub rest: RestRoute,
}

/// A params or result type's schemas, as functions: the table is static data, and a schema is
/// only built when a catalog or document asks for it.
#[derive(Debug, Clone, Copy)]
pub struct TypeSchema {
    /// As an MCP tool's schema: [`portable`], and [`strict_input`] for params.
    pub tool: fn() -> Map<String, Value>,
    /// Adds the type (and the types it names) to an OpenAPI document's components, and names
    /// its component.
    pub component: fn(&mut SchemaGenerator) -> String,
}

impl TypeSchema {
    pub const fn params<P: JsonSchema + 'static>() -> Self {
        Self { tool: input_schema::<P>, component: component::<P> }
    }

    pub const fn result<R: JsonSchema + 'static>() -> Self {
        Self { tool: output_schema::<R>, component: component::<R> }
    }
}

/// Where an operation is on the REST surface, and how the OpenAPI document describes it.
#[derive(Debug, Clone, Copy)]
pub struct RestRoute {
    pub method: Method,
    /// axum and OpenAPI spell path parameters alike: `{name}`, one of
    /// [`PATH_PARAMETERS`](super::http::routes::PATH_PARAMETERS).
    pub path: &'static str,
    /// Where its arguments come from besides the path's ids.
    pub input: RestInput,
    /// The status of a success: 201 for what creates a session, 202 for what is only queued.
    pub status: u16,
    pub operation_id: &'static str,
    pub summary: &'static str,
    pub description: Option<&'static str>,
    /// What the success answer means.
    pub answer: &'static str,
    /// The codes the operation can fail with (the `SessionService` method's errors). Their
    /// statuses come from the code table; 413 is added for routes with a body, and the guard's
    /// 401/403 for every route.
    pub errors: &'static [ErrorCode],
}

/// How a REST route takes an operation's arguments: the path's ids (`{id}` is `session_id`),
/// plus one of these. The answer is the operation's result as JSON, with the row's status.
#[derive(Debug, Clone, Copy)]
pub enum RestInput {
    /// Nothing else.
    Path,
    /// The query, parsed as the params less what the path gives ([`query`]): typed, so a
    /// mistyped value is refused naming it. The OpenAPI document lists the params' properties.
    Query(fn(&Uri) -> Result<Map<String, Value>, QueryRejection>),
    /// A JSON body: the params less what the path gives (a session id in it too is refused).
    /// Its OpenAPI component is the params' with `Body` for `Params`.
    Body,
    /// A handler of the REST surface's own.
    Own(OwnRoute),
}

/// The routes whose body or answer is more than JSON arguments and a JSON result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnRoute {
    /// A body, plus the REST-only `stream` flag (the first turn as Server-Sent Events); 201 and
    /// `Location`.
    Create,
    /// A body plus `stream`, the session id from the path.
    Turn,
    /// The journal: a page, or with `follow=true` Server-Sent Events that continue as the
    /// session's turns end.
    Events,
    /// Answers the document itself, as `application/jsonl`.
    Export,
    /// The body is the document itself (`application/jsonl`): 201 and `Location`.
    Import,
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

/// A route's query as JSON arguments, parsed as `T` (typed, so a mistyped value is refused
/// naming it).
pub fn query<T: DeserializeOwned + Serialize>(uri: &Uri) -> Result<Map<String, Value>, QueryRejection> {
    Ok(arguments(Query::<T>::try_from_uri(uri)?.0))
}

/// A parsed query as JSON arguments. The query types are structs of optional scalars, which
/// always serialize to an object.
pub fn arguments<T: Serialize>(query: T) -> Map<String, Value> {
    match serde_json::to_value(query) {
        Ok(Value::Object(arguments)) => arguments,
        _ => Map::new(),
    }
}

macro_rules! groups {
    ($($group:ident),* $(,)?) => {
        $(impl From<$group> for Operation {
            fn from(operation: $group) -> Self {
                Self::$group(operation)
            }
        })*

        impl Operation {
            /// Every operation, in the order `tools/list` shows them: by group, in each group's
            /// order.
            pub fn all() -> impl Iterator<Item = Operation> {
                std::iter::empty()
                    $(.chain($group::VARIANTS.iter().copied().map(Operation::from)))*
            }

            /// The operation's row.
            pub fn spec(self) -> &'static Spec {
                match self {
                    $(Self::$group(operation) => operation.spec(),)*
                }
            }

            /// Parses `arguments` (errors name the operation as `name`), makes the one service
            /// call and renders its result as JSON. `turn_options` turns the wait of a
            /// turn-running operation into the surface's options (MCP adds progress and
            /// cancellation); whatever else it returns (a progress forwarder) lives until the
            /// call ends.
            pub async fn run<S: SessionService, G>(
                self,
                name: &str,
                service: &S,
                arguments: Value,
                turn_options: impl FnOnce(Duration) -> (TurnOptions, G),
            ) -> Result<Value, SessionError> {
                match self {
                    $(Self::$group(operation) => operation.run(name, service, arguments, turn_options).await,)*
                }
            }
        }
    };
}

groups!(Turns, Sessions, Inbox, Journal, Agents, History, Memory, Caller);

impl Operation {
    /// The MCP tool's name.
    pub fn tool(self) -> &'static str {
        self.spec().tool
    }

    /// The JSON-RPC method's name.
    pub fn method(self) -> &'static str {
        self.spec().method
    }

    pub fn from_tool(name: &str) -> Option<Self> {
        Self::all().find(|operation| operation.tool() == name)
    }

    pub fn from_method(name: &str) -> Option<Self> {
        Self::all().find(|operation| operation.method() == name)
    }

    /// By either name: the MCP tool's or the JSON-RPC method's (`deputy call`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::from_tool(name).or_else(|| Self::from_method(name))
    }

    /// Whether it runs a turn (and so takes the surface's turn options: MCP's progress and
    /// cancellation, a task's status).
    pub fn runs_turn(self) -> bool {
        matches!(self, Self::Turns(Turns::Create | Turns::Turn))
    }

    /// The tool's entry in the catalog: its description for an LLM caller, whether it only
    /// reads, and the schemas of its arguments and result.
    pub fn descriptor(self) -> ToolDescriptor {
        let spec = self.spec();
        ToolDescriptor {
            name: spec.tool,
            description: spec.description,
            read_only: spec.read_only,
            input_schema: Arc::new((spec.params.tool)()),
            output_schema: Arc::new((spec.result.tool)()),
        }
    }
}

/// deputy's tools, in the order `tools/list` shows them.
/// Every operation's tool, MCP's or not (`schemas/` has them all).
pub fn tool_catalog() -> Vec<ToolDescriptor> {
    Operation::all().map(Operation::descriptor).collect()
}

/// The tools an MCP client lists, without the fields that are not for models.
pub fn mcp_tool_catalog() -> Vec<ToolDescriptor> {
    Operation::all()
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

fn component<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
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

    /// `tools/list` and `schemas/` show the tools in this order, the one they had before the
    /// table was split into groups; a new operation may come anywhere among them.
    #[test]
    fn the_groups_keep_the_order_clients_have_seen() {
        let tools: Vec<&str> = Operation::all().map(Operation::tool).collect();
        let expected = [
            "session_create",
            "session_turn",
            "session_interrupt",
            "session_read",
            "session_list",
            "session_archive",
            "session_compact",
            "session_tool_output",
            "session_send",
            "session_events",
            "agent_list",
            "agent_get",
            "session_fork",
            "session_rewind",
            "session_export",
            "session_import",
            "session_messages",
            "memory_list",
            "memory_delete",
            "documents_index",
            "caller_get",
            "webhooks_status",
        ];
        let mut seen = tools.iter();
        for tool in expected {
            assert!(seen.any(|listed| *listed == tool), "{tool} is out of order in {tools:?}");
        }
    }

    #[test]
    fn every_operation_has_one_tool_and_one_method_and_the_catalog_lists_the_tools() {
        let catalog: Vec<&str> = tool_catalog().iter().map(|tool| tool.name).collect();
        let tools: Vec<&str> = Operation::all().map(Operation::tool).collect();
        assert_eq!(catalog, tools);
        for operation in Operation::all() {
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
        for field in sessions::SessionListParams::NOT_FOR_MODELS {
            assert!(all.iter().any(|name| name == field), "{field}");
            assert!(!for_models.iter().any(|name| name == field) && !required.iter().any(|name| name == field));
        }
        assert_eq!(all.len(), for_models.len() + sessions::SessionListParams::NOT_FOR_MODELS.len());
    }
}
