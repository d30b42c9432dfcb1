//! How a named agent's profile fills a session's build config: every field the caller left
//! unset takes the profile's, a field the caller gave replaces the profile's whole field.
//! Nothing here checks what the result may do: the factory judges a filled config against the
//! caller's grants exactly as one the caller wrote out (a profile never widens a caller).

use super::AgentBuildConfig;
use crate::model::Budget;
use crate::profiles::NamedProfile;

impl AgentBuildConfig {
    /// Fills what the caller left unset from `named`, and records which agent (and version)
    /// the session is made from.
    pub fn apply_profile(&mut self, named: &NamedProfile) {
        let profile = &named.profile;
        let fields = &profile.fields;
        self.model = self.model.take().or_else(|| fields.model.clone());
        if self.system_prompt.is_none() && !profile.system_prompt.is_empty() {
            self.system_prompt = Some(profile.system_prompt.clone());
        }
        self.max_tokens = self.max_tokens.or(fields.max_tokens);
        if self.budget == Budget::default() {
            self.budget = fields.budget.unwrap_or_default();
        }
        if self.context == Default::default() {
            self.context = fields.context.unwrap_or_default();
        }
        self.tools.builtins = self.tools.builtins.take().or_else(|| fields.builtins.clone());
        self.tools.shell = self.tools.shell.or(fields.shell);
        if self.tools.mcp_servers.is_empty() {
            self.tools.mcp_servers = fields.mcp_servers.clone().unwrap_or_default();
        }
        self.output_schema = self.output_schema.take().or_else(|| fields.output_schema.clone());
        self.reasoning = self.reasoning.or(fields.reasoning);
        self.skills = self.skills.take().or_else(|| fields.skills.clone());
        self.documents = self.documents.take().or_else(|| fields.documents.clone());
        self.agent = Some(named.agent_ref());
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::AgentRef;
    use crate::tools::{BuiltinTool, ShellRequest};

    fn named() -> NamedProfile {
        let profile = crate::profiles::file::parse(
            Path::new("r.md"),
            "---\nname: r\ndescription: d\nmodel: a:m\ntools: Read, Bash\nbudget: {max_tokens: 10}\nskills: [pdf]\n\
             max_tokens: 99\nhost_mode: true\n---\nBody.\n",
        )
        .unwrap();
        NamedProfile { profile, version: "v1".into() }
    }

    #[test]
    fn a_profile_fills_only_what_the_caller_left_unset() {
        let mut empty = AgentBuildConfig::default();
        empty.apply_profile(&named());
        assert_eq!(empty.model.as_deref(), Some("a:m"));
        assert_eq!(empty.system_prompt.as_deref(), Some("Body."));
        assert_eq!(empty.tools.builtins, Some(vec![BuiltinTool::ReadFile]));
        assert_eq!(empty.tools.shell, Some(ShellRequest::Enabled(true)));
        assert_eq!((empty.budget.max_tokens, empty.max_tokens), (Some(10), Some(99)));
        assert_eq!(empty.skills, Some(vec!["pdf".to_owned()]));
        assert_eq!(empty.agent, Some(AgentRef { name: "r".into(), version: "v1".into() }));

        let mut given = AgentBuildConfig {
            model: Some("b:n".into()),
            system_prompt: Some("Mine.".into()),
            budget: Budget { max_tool_calls: Some(3), ..Budget::default() },
            skills: Some(Vec::new()),
            ..AgentBuildConfig::default()
        };
        given.tools.shell = Some(ShellRequest::Enabled(false));
        given.apply_profile(&named());
        assert_eq!((given.model.as_deref(), given.system_prompt.as_deref()), (Some("b:n"), Some("Mine.")));
        assert_eq!(
            given.budget,
            Budget { max_tool_calls: Some(3), ..Budget::default() },
            "a given field replaces the profile's whole field"
        );
        assert_eq!(given.tools.shell, Some(ShellRequest::Enabled(false)));
        assert_eq!(given.skills, Some(Vec::new()));
    }
}
