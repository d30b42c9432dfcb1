//! The caller itself: who it is, and (for an admin) how the webhooks deliver.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Method, RestInput, RestRoute, Spec, TypeSchema};
use crate::error::ErrorCode::PolicyDenied;
use crate::model::caller_info::CallerInfo;
use crate::model::webhooks::WebhooksStatus;

operations! {
    /// The operations about the caller.
    pub enum Caller {
        CallerGet => CALLER_GET, |service, _: CallerGetParams| Ok(service.caller_info()),
        WebhooksStatus => WEBHOOKS_STATUS, |service, _: WebhooksStatusParams| service.webhooks().await,
    }
}

static CALLER_GET: Spec = Spec {
    tool: "caller_get",
    method: "caller/get",
    read_only: true,
    mcp_tool: false,
    not_for_models: &[],
    description: "Who the caller is (its token's subject) and what its scopes let it do.",
    params: TypeSchema::params::<CallerGetParams>(),
    result: TypeSchema::result::<CallerInfo>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/caller",
        input: RestInput::Path,
        operation_id: "getCaller",
        summary: "The caller and its scopes",
        description: Some(
            "What a client needs to offer only what the caller may do (the inspector at `/ui` reads it).",
        ),
        status: 200,
        answer: "The caller.",
        errors: &[],
    },
};

static WEBHOOKS_STATUS: Spec = Spec {
    tool: "webhooks_status",
    method: "webhooks/status",
    read_only: true,
    mcp_tool: false,
    not_for_models: &[],
    description: "The configured webhooks and how their deliveries go: the journal position each delivers \
             next, deliveries acknowledged, and a delivery that keeps failing with its last error. Needs the \
             admin scope.",
    params: TypeSchema::params::<WebhooksStatusParams>(),
    result: TypeSchema::result::<WebhooksStatus>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/webhooks",
        input: RestInput::Path,
        operation_id: "webhooksStatus",
        summary: "The webhooks' delivery status",
        description: Some(
            "Each `[[webhooks]]` entry of the server's config file (its secret never shown). A failing \
             delivery is retried with backoff, never skipped: `failing` stays true until it succeeds.",
        ),
        status: 200,
        answer: "Every webhook.",
        errors: &[PolicyDenied],
    },
};

/// `caller_get`'s params: none.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallerGetParams {}

/// `webhooks_status`'s params: none.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhooksStatusParams {}
