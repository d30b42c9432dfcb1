//! The REST routes under `/v1`, listed once.
//!
//! [`ROUTES`] drives the axum router ([`rest`](super::rest)) and the `paths` of the OpenAPI
//! document ([`openapi`](super::openapi)), each operation's error responses included, so the
//! three cannot drift apart. Pure data: what each route does lives in `rest`, how it is
//! described in `openapi`.

use crate::error::ErrorCode::{
    self, AgentError, InvalidRequest, SessionBusy, SessionCompactionDisabled, SessionInboxFull, SessionNotFound,
    SessionNotRunning, SessionPersistenceDisabled, SessionStoreError,
};
use crate::surfaces::operation::Operation;

/// One REST route: where it is, what it does, how the OpenAPI document describes it.
#[derive(Debug)]
pub struct Route {
    pub method: Method,
    /// axum and OpenAPI spell path parameters alike: `{name}`, one of [`PATH_PARAMETERS`].
    pub path: &'static str,
    pub action: Action,
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

/// What a route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `create_session` with a `SessionCreateParams` body (plus `stream`): 201 and `Location`,
    /// or the first turn as Server-Sent Events.
    Create,
    /// `start_turn` with a `SessionTurnParams` body (plus `stream`, the id from the path): 200,
    /// or the turn as Server-Sent Events.
    Turn,
    /// `send` with a `SessionSendParams` body (the id from the path): 202.
    Send,
    /// Any other operation: its arguments are the path's ids and the query, its answer the
    /// operation's result.
    Call(Operation),
    /// `events`, the journal feed: `Call(Operation::Events)`, or with `follow=true` Server-Sent
    /// Events that continue as the session's turns end.
    Events,
    /// `history`, the whole conversation: REST only (no MCP tool or JSON-RPC method).
    History,
    /// The OpenAPI document itself.
    Document,
}

/// The params types whose properties a route takes as query parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryParams {
    /// `SessionReadParams`: `wait_ms`.
    Read,
    /// `SessionListParams`: `offset`, `limit`, `include_archived`.
    List,
    /// `SessionEventsParams`: `after_seq`, `limit` (plus the REST-only `follow`).
    Events,
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
    PathParameter {
        name: "tool_use_id",
        argument: "tool_use_id",
        description: "The `tool_use_id` named in the elision marker of a capped tool result.",
    },
];

/// Every REST route, in the order the OpenAPI document lists them.
pub const ROUTES: &[Route] = &[
    Route {
        method: Method::Post,
        path: "/v1/sessions",
        action: Action::Create,
        query: None,
        operation_id: "createSession",
        summary: "Create a session and run its first turn",
        description: Some(
            "Waits `wait_ms` (default 30000, max 600000) for the first turn; a turn still running then answers \
             `status: \"running\"`: collect it with `GET /v1/sessions/{id}?wait_ms=`.",
        ),
        result: Some("RunResult"),
        answer: "The session exists: the first turn's result (or `running`); `Location` names it.",
        errors: &[InvalidRequest, AgentError, SessionStoreError, SessionCompactionDisabled],
    },
    Route {
        method: Method::Get,
        path: "/v1/sessions",
        action: Action::Call(Operation::List),
        query: Some(QueryParams::List),
        operation_id: "listSessions",
        summary: "List sessions, most recently updated first",
        description: None,
        result: Some("SessionList"),
        answer: "A page of sessions.",
        errors: &[InvalidRequest, SessionPersistenceDisabled, SessionStoreError],
    },
    Route {
        method: Method::Get,
        path: "/v1/sessions/{id}",
        action: Action::Call(Operation::Read),
        query: Some(QueryParams::Read),
        operation_id: "readSession",
        summary: "Read a session's state and billing",
        description: Some(
            "Never waits behind a running turn unless `wait_ms` is given: then it long-polls the running turn and \
             answers when it ends (or when `wait_ms` runs out).",
        ),
        result: Some("SessionView"),
        answer: "The session.",
        errors: &[InvalidRequest, SessionNotFound, SessionStoreError],
    },
    Route {
        method: Method::Delete,
        path: "/v1/sessions/{id}",
        action: Action::Call(Operation::Archive),
        query: None,
        operation_id: "archiveSession",
        summary: "Archive a session (a running turn finishes first)",
        description: None,
        result: Some("ArchiveResult"),
        answer: "The session is archived.",
        errors: &[SessionNotFound, SessionStoreError],
    },
    Route {
        method: Method::Post,
        path: "/v1/sessions/{id}/turns",
        action: Action::Turn,
        query: None,
        operation_id: "startTurn",
        summary: "Run the next turn of a session",
        description: Some(
            "One turn runs per session at a time: a turn while another runs is `SESSION_BUSY` (409). Same \
             `wait_ms` behaviour as creating a session.",
        ),
        result: Some("RunResult"),
        answer: "The turn's result (or `running`).",
        errors: &[InvalidRequest, SessionNotFound, SessionBusy, AgentError, SessionStoreError],
    },
    Route {
        method: Method::Post,
        path: "/v1/sessions/{id}/inbox",
        action: Action::Send,
        query: None,
        operation_id: "sendMessage",
        summary: "Send a message to a session's inbox",
        description: Some(
            "Never waits for the session: the message is delivered at its next boundary (between two steps of a \
             running turn, or before the next turn's prompt). An idle host-mode session starts a turn for it \
             (`delivered: \"started_turn\"`). `SESSION_INBOX_FULL` (429) when 256 messages already wait.",
        ),
        result: Some("SendResult"),
        answer: "The message was taken in.",
        errors: &[InvalidRequest, SessionNotFound, SessionInboxFull, SessionStoreError],
    },
    Route {
        method: Method::Post,
        path: "/v1/sessions/{id}/interrupt",
        action: Action::Call(Operation::Interrupt),
        query: None,
        operation_id: "interruptTurn",
        summary: "Cancel the running turn",
        description: Some(
            "The turn ends `cancelled`; the session takes new turns. `SESSION_NOT_RUNNING` (409) when no turn runs.",
        ),
        result: Some("InterruptResult"),
        answer: "The turn was interrupted.",
        errors: &[SessionNotFound, SessionNotRunning],
    },
    Route {
        method: Method::Post,
        path: "/v1/sessions/{id}/compact",
        action: Action::Call(Operation::Compact),
        query: None,
        operation_id: "compactSession",
        summary: "Compact a session's history now",
        description: Some(
            "`SESSION_COMPACTION_DISABLED` (501) in builds without compaction; `SESSION_BUSY` (409) while a turn \
             runs.",
        ),
        result: Some("CompactResult"),
        answer: "What compaction did.",
        // INVALID_REQUEST: the session holds pending tool calls, which must be answered first.
        errors: &[InvalidRequest, SessionNotFound, SessionBusy, SessionStoreError, SessionCompactionDisabled],
    },
    Route {
        method: Method::Get,
        path: "/v1/sessions/{id}/tool-outputs/{tool_use_id}",
        action: Action::Call(Operation::ToolOutput),
        query: None,
        operation_id: "readToolOutput",
        summary: "The whole output of a capped tool result",
        description: None,
        result: Some("ToolOutputResult"),
        answer: "The tool result's whole output.",
        errors: &[InvalidRequest, SessionNotFound, SessionStoreError],
    },
    Route {
        method: Method::Get,
        path: "/v1/sessions/{id}/messages",
        action: Action::History,
        query: None,
        operation_id: "readMessages",
        summary: "A session's whole conversation",
        description: Some("Waits for a running turn to end."),
        result: Some("SessionHistory"),
        answer: "The messages, oldest first.",
        errors: &[SessionNotFound, SessionStoreError],
    },
    Route {
        method: Method::Get,
        path: "/v1/sessions/{id}/events",
        action: Action::Events,
        query: Some(QueryParams::Events),
        operation_id: "readEvents",
        summary: "A page of a session's event journal",
        description: Some(
            "Events with a `seq` after `after_seq`, at most `limit` (1 to 500). With `follow=true` the answer is \
             Server-Sent Events: one `event` per journal event (its data a `StoredEvent`), from `after_seq` on, \
             continuing as the session's turns end, until the client leaves.",
        ),
        result: Some("EventPage"),
        answer: "The page, and the `after_seq` of the next one.",
        errors: &[InvalidRequest, SessionNotFound, SessionStoreError],
    },
    Route {
        method: Method::Get,
        path: "/v1/openapi.json",
        action: Action::Document,
        query: None,
        operation_id: "openapi",
        summary: "This document",
        description: None,
        result: None,
        answer: "The OpenAPI document.",
        errors: &[],
    },
];

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

impl Route {
    /// `POST /v1/sessions/{id}/turns`: how errors about the request name it.
    pub fn name(&self) -> String {
        format!("{} {}", self.method.as_str(), self.path)
    }

    /// Whether the route takes a JSON body (and so can be refused with 413).
    pub fn has_body(&self) -> bool {
        match self.action {
            Action::Create | Action::Turn | Action::Send => true,
            Action::Call(_) | Action::Events | Action::History | Action::Document => false,
        }
    }

    /// The `{name}` segments of the path, in order.
    pub fn path_parameters(&self) -> impl Iterator<Item = &'static PathParameter> + use<> {
        self.path
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
        for route in ROUTES {
            let named = route.path.matches('{').count();
            assert_eq!(route.path_parameters().count(), named, "{}", route.name());
            let twins = ROUTES.iter().filter(|other| other.path == route.path && other.method == route.method);
            assert_eq!(twins.count(), 1, "{}", route.name());
        }
    }

    #[test]
    fn every_operation_has_a_route() {
        for operation in Operation::ALL {
            let routed = ROUTES.iter().any(|route| match route.action {
                Action::Create => operation == Operation::Create,
                Action::Turn => operation == Operation::Turn,
                Action::Send => operation == Operation::Send,
                Action::Call(called) => operation == called,
                Action::Events => operation == Operation::Events,
                Action::History | Action::Document => false,
            });
            assert!(routed, "{} has no REST route", operation.tool());
        }
    }
}
