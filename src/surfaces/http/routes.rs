//! The REST routes under `/v1`.
//!
//! [`ROUTES`] drives the axum router ([`rest`](super::rest)) and the `paths` of the OpenAPI
//! document ([`openapi`](super::openapi)), each operation's error responses included, so the
//! three cannot drift apart. It is the operation table's REST rows
//! ([`RestRoute`](crate::surfaces::operation::RestRoute)) plus the one route only REST has.
//! Pure data: what each route does lives in `rest`, how it is described in `openapi`.

use std::sync::LazyLock;

pub use crate::surfaces::operation::{Method, OwnRoute, RestInput};
use crate::surfaces::operation::{Operation, RestRoute};

/// One REST route: the operation it runs (none: the OpenAPI document itself), where it is and
/// how the OpenAPI document describes it.
#[derive(Debug, Clone)]
pub struct Route {
    pub operation: Option<Operation>,
    pub rest: RestRoute,
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
pub static ROUTES: LazyLock<Vec<Route>> = LazyLock::new(|| {
    Operation::all()
        .map(|operation| Route { operation: Some(operation), rest: operation.spec().rest })
        .chain(REST_ONLY.iter().cloned())
        .collect()
});

/// The route no MCP tool or JSON-RPC method shares.
const REST_ONLY: &[Route] = &[Route {
    operation: None,
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/openapi.json",
        input: RestInput::Path,
        status: 200,
        operation_id: "openapi",
        summary: "This document",
        description: None,
        answer: "The OpenAPI document.",
        errors: &[],
    },
}];

impl Route {
    /// `POST /v1/sessions/{id}/turns`: how errors about the request name it.
    pub fn name(&self) -> String {
        format!("{} {}", self.rest.method.as_str(), self.rest.path)
    }

    /// Whether the route takes a body (and so can be refused with 413).
    pub fn has_body(&self) -> bool {
        match self.rest.input {
            RestInput::Body | RestInput::Own(OwnRoute::Create | OwnRoute::Turn | OwnRoute::Import) => true,
            RestInput::Path | RestInput::Query(_) | RestInput::Own(OwnRoute::Events | OwnRoute::Export) => false,
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
        for operation in Operation::all() {
            let routed = ROUTES.iter().any(|route| route.operation == Some(operation));
            assert!(routed, "{} has no REST route", operation.tool());
        }
    }
}
