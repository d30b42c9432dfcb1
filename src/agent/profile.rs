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
        self.agent = Some(named.agent_ref());
    }
}
