//! The REST routes under `/v1`.
//!
//! [`ROUTES`] drives the axum router ([`rest`](super::rest)) and the `paths` of the OpenAPI
//! document ([`openapi`](super::openapi)), each operation's error responses included, so the
//! three cannot drift apart. It is the operation table's REST rows
//! ([`RestRoute`](crate::surfaces::operation::RestRoute)) plus the two routes only REST has.
//! Pure data: what each route does lives in `rest`, how it is described in `openapi`.

use std::sync::LazyLock;

pub use crate::surfaces::operation::{Method, QueryParams};
use crate::surfaces::operation::{Operation, RestRoute};

/// One REST route: what it does, where it is and how the OpenAPI document describes it.
#[derive(Debug, Clone)]
pub struct Route {
    pub action: Action,
    pub rest: RestRoute,
}

/// What a route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `create_session` with a `SessionCreateParams` body (plus `stream`): 201 and `Location`,
    /// or the first turn as Server-Sent Events.
    Create,
    /// `start_turn` with a `SessionTurnParams` body (plus `stream`, the id from the path): 200,
    /// or the turn as Server-Sent Events.
    Turn,
    /// An operation whose arguments are a JSON body plus the path's session id: `send` (202),
    /// `fork` (201 and `Location`), `rewind` (200).
    Body(Operation),
    /// Any other operation: its arguments are the path's ids and the query, its answer the
    /// operation's result.
    Call(Operation),
    /// `events`, the journal feed: `Call(Operation::Events)`, or with `follow=true` Server-Sent
    /// Events that continue as the session's turns end.
    Events,
    /// `export`: answers the document itself as `application/jsonl`, not wrapped in JSON.
    Export,
    /// `import`: the body is the document itself (`application/jsonl`): 201 and `Location`.
    Import,
    /// The OpenAPI document itself.
    Document,
}

/// A `{name}` segment of a route's path: the argument it fills and what it is.
#[derive(Debug)]
pub struct PathParameter {
    pub name: &'static str,
    /// The field of the operation's params that the segment fills.
    pub argument: &'static str,
    pub description: &'static str,
}

pub const PATH_PARAMETERS: &[PathParameter] = &[
    PathParameter { name: "id", argument: "session_id", description: "The session id." },
    PathParameter { name: "name", argument: "name", description: "The agent's name." },
    PathParameter { name: "memory_id", argument: "memory_id", description: "The memory's id." },
    PathParameter {
        name: "tool_use_id",
        argument: "tool_use_id",
        description: "The `tool_use_id` named in the elision marker of a capped tool result.",
    },
];

/// Every REST route: the operations' in the table's order, then the REST-only ones.
pub static ROUTES: LazyLock<Vec<Route>> =
    LazyLock::new(|| Operation::ALL.into_iter().map(Route::of).chain(REST_ONLY.iter().cloned()).collect());

/// The route no MCP tool or JSON-RPC method shares.
const REST_ONLY: &[Route] = &[Route {
    action: Action::Document,
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/openapi.json",
        query: None,
        operation_id: "openapi",
        summary: "This document",
        description: None,
        result: None,
        answer: "The OpenAPI document.",
        errors: &[],
    },
}];

impl Route {
    /// An operation's route, from its row of the table. The operations with a body or a stream
    /// of their own have handlers of their own; any other is a [`Action::Call`].
    fn of(operation: Operation) -> Self {
        let action = match operation {
            Operation::Create => Action::Create,
            Operation::Turn => Action::Turn,
            Operation::Send | Operation::Fork | Operation::Rewind => Action::Body(operation),
            Operation::Events => Action::Events,
            Operation::Export => Action::Export,
            Operation::Import => Action::Import,
            other => Action::Call(other),
        };
        Self { action, rest: operation.spec().rest }
    }

    /// `POST /v1/sessions/{id}/turns`: how errors about the request name it.
    pub fn name(&self) -> String {
        format!("{} {}", self.rest.method.as_str(), self.rest.path)
    }

    /// Whether the route takes a JSON body (and so can be refused with 413).
    pub fn has_body(&self) -> bool {
        match self.action {
            Action::Create | Action::Turn | Action::Body(_) | Action::Import => true,
            Action::Call(_) | Action::Events | Action::Export | Action::Document => false,
        }
    }

    /// The OpenAPI component of the route's body: its operation's params, less what the path
    /// gives, plus what only REST takes.
    pub fn body_schema(&self) -> Option<&'static str> {
        Some(match self.action {
            Action::Create => "SessionCreateBody",
            Action::Turn => "SessionTurnBody",
            Action::Body(Operation::Fork) => "SessionForkBody",
            Action::Body(Operation::Rewind) => "SessionRewindBody",
            Action::Body(_) => "SessionSendBody",
            Action::Call(_) | Action::Events | Action::Export | Action::Import | Action::Document => {
                return None;
            }
        })
    }

    /// The status of a success: 201 for what creates a session, 202 for what is only queued.
    pub fn success_status(&self) -> u16 {
        match self.action {
            Action::Create | Action::Import | Action::Body(Operation::Fork) => 201,
            Action::Body(Operation::Send) => 202,
            _ => 200,
        }
    }

    /// The `{name}` segments of the path, in order.
    pub fn path_parameters(&self) -> impl Iterator<Item = &'static PathParameter> + use<> {
        self.rest
            .path
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .filter_map(|name| path_parameter(name))
    }
}

/// The parameter a `{name}` segment stands for.
pub fn path_parameter(name: &str) -> Option<&'static PathParameter> {
    PATH_PARAMETERS.iter().find(|parameter| parameter.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_segment_is_a_known_parameter_and_every_route_is_listed_once() {
        for route in ROUTES.iter() {
            let named = route.rest.path.matches('{').count();
            assert_eq!(route.path_parameters().count(), named, "{}", route.name());
            let twins = ROUTES
                .iter()
                .filter(|other| other.rest.path == route.rest.path && other.rest.method == route.rest.method);
            assert_eq!(twins.count(), 1, "{}", route.name());
        }
    }

    #[test]
    fn every_operation_has_a_route() {
        for operation in Operation::ALL {
            let routed = ROUTES.iter().any(|route| match route.action {
                Action::Create => operation == Operation::Create,
                Action::Turn => operation == Operation::Turn,
                Action::Body(called) | Action::Call(called) => operation == called,
                Action::Events => operation == Operation::Events,
                Action::Export => operation == Operation::Export,
                Action::Import => operation == Operation::Import,
                Action::Document => false,
            });
            assert!(routed, "{} has no REST route", operation.tool());
        }
    }
}
