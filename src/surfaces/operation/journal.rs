//! A session's event journal, paged.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Method, OwnRoute, RestInput, RestRoute, Spec, TypeSchema};
use crate::error::ErrorCode::{InvalidRequest, PolicyDenied, SessionNotFound, SessionStoreError};
use crate::ids::SessionId;
use crate::model::EventPage;

operations! {
    /// The journal's operation.
    pub enum Journal {
        Events => EVENTS, |service, params: SessionEventsParams| {
            let limit = params.limit.unwrap_or(DEFAULT_EVENTS_LIMIT);
            service.events(&params.session_id, params.after_seq, limit).await
        },
    }
}

static EVENTS: Spec = Spec {
    tool: "session_events",
    method: "session/events",
    read_only: true,
    mcp_tool: true,
    not_for_models: &[],
    description: "A session's event journal (prompts, text, tool calls, usage, turn ends), paged by `after_seq`.",
    params: TypeSchema::params::<SessionEventsParams>(),
    result: TypeSchema::result::<EventPage>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/sessions/{id}/events",
        input: RestInput::Own(OwnRoute::Events),
        operation_id: "readEvents",
        summary: "A page of a session's event journal",
        description: Some(
            "Events with a `seq` after `after_seq`, at most `limit` (1 to 500) and at most 1 MiB of them (at least \
             one): page until an empty page. With `follow=true` the answer is Server-Sent Events: one `event` per \
             journal event (its data a `StoredEvent`), from `after_seq` on, continuing as the session's turns \
             end, until the client leaves or `--max-follow-secs` (600 s) pass (resume with `after_seq`); a \
             subject holds at most `--max-follows-per-subject` (16) such streams, one more is refused 429 \
             `TOO_MANY_STREAMS`.",
        ),
        status: 200,
        answer: "The page, and the `after_seq` of the next one.",
        errors: &[InvalidRequest, SessionNotFound, SessionStoreError, PolicyDenied],
    },
};

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionEventsParams {
    pub session_id: SessionId,
    /// Only events after this `seq` (a page's `next_seq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// Events per page, 1 to 500 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// The default page size of `session_events`.
pub const DEFAULT_EVENTS_LIMIT: usize = 100;
