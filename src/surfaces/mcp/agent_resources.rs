//! The named agents as MCP resources: `deputy://agents` (every profile file, as `agent/list`
//! answers) and `deputy://agents/{name}` (one, as `agent/get`), through the caller's own
//! [`SessionService`] (a background server's client sees its own config's agents).

use rmcp::ErrorData as McpError;
use rmcp::model::{ReadResourceResult, Resource, ResourceTemplate};

use super::resources::json_contents;
use crate::session::SessionService;

/// The list of every named agent.
pub const AGENTS: &str = "deputy://agents";

/// One of the agents' resources, by URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentResource {
    List,
    One(String),
}

impl AgentResource {
    /// The resource a URI names, or `None` if it is not an agents resource.
    pub fn parse(uri: &str) -> Option<Self> {
        let rest = uri.strip_prefix(AGENTS)?;
        match rest {
            "" | "/" => Some(Self::List),
            _ => {
                let name = rest.strip_prefix('/')?;
                (!name.is_empty() && !name.contains('/')).then(|| Self::One(name.to_owned()))
            }
        }
    }
}

/// The list's entry in `resources/list`.
pub fn listed() -> Resource {
    Resource::new(AGENTS, "agents")
        .with_title("Named agents".to_owned())
        .with_description("The agents session_create and delegate take by name (`agent`), as JSON.")
        .with_mime_type("application/json")
}

/// `deputy://agents/{name}`.
pub fn template() -> ResourceTemplate {
    ResourceTemplate::new(format!("{AGENTS}/{{name}}"), "agent")
        .with_description("One named agent: its system prompt and the session_create fields it sets.")
        .with_mime_type("application/json")
}

/// `resources/read` of an agents resource.
pub fn read<S: SessionService>(
    service: &S,
    uri: &str,
    resource: &AgentResource,
) -> Result<ReadResourceResult, McpError> {
    match resource {
        AgentResource::List => json_contents(uri, &service.agents()),
        AgentResource::One(name) => {
            let agent = service.agent(name).map_err(|error| {
                McpError::resource_not_found(
                    error.to_string(),
                    Some(serde_json::json!({"uri": uri, "code": error.code().as_str()})),
                )
            })?;
            json_contents(uri, &agent)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_uris_parse() {
        assert_eq!(AgentResource::parse("deputy://agents"), Some(AgentResource::List));
        assert_eq!(AgentResource::parse("deputy://agents/reviewer"), Some(AgentResource::One("reviewer".into())));
        assert_eq!(AgentResource::parse("deputy://agents/a/b"), None);
        assert_eq!(AgentResource::parse("deputy://agentsx"), None);
        assert_eq!(AgentResource::parse("deputy://sessions/x"), None);
    }
}
