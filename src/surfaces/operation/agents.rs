//! The named agents (profiles) sessions start from.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Method, RestInput, RestRoute, Spec, TypeSchema};
use crate::error::ErrorCode::InvalidRequest;
use crate::profiles::{AgentDetail, AgentList};

operations! {
    /// The operations on named agents.
    pub enum Agents {
        AgentList => AGENT_LIST, |service, _: AgentListParams| Ok(service.agents()),
        AgentGet => AGENT_GET, |service, params: AgentGetParams| service.agent(&params.name),
    }
}

static AGENT_LIST: Spec = Spec {
    tool: "agent_list",
    method: "agent/list",
    read_only: true,
    mcp_tool: false,
    not_for_models: &[],
    description: "The named agents (profiles) session_create and delegate take as `agent`, invalid files \
                  with their reason.",
    params: TypeSchema::params::<AgentListParams>(),
    result: TypeSchema::result::<AgentList>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/agents",
        input: RestInput::Path,
        operation_id: "listAgents",
        summary: "The named agents",
        description: Some("Every profile file the server reads, in lookup order; re-read as the files change."),
        status: 200,
        answer: "The agents.",
        errors: &[],
    },
};

static AGENT_GET: Spec = Spec {
    tool: "agent_get",
    method: "agent/get",
    read_only: true,
    mcp_tool: false,
    not_for_models: &[],
    description: "One named agent, whole: its system prompt and the session_create fields it sets.",
    params: TypeSchema::params::<AgentGetParams>(),
    result: TypeSchema::result::<AgentDetail>(),
    rest: RestRoute {
        method: Method::Get,
        path: "/v1/agents/{name}",
        input: RestInput::Path,
        operation_id: "getAgent",
        summary: "One named agent",
        description: None,
        status: 200,
        answer: "The agent.",
        errors: &[InvalidRequest],
    },
};

/// `agent_list`'s params: none.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentListParams {}

/// `agent_get`'s params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentGetParams {
    /// The agent's name.
    pub name: String,
}
