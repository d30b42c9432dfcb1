//! Which tool calls wait for the caller's approval before they run.
//!
//! `never` (the default), `always` (every side-effecting builtin: `shell`, `write_file`,
//! `edit_file`), or `{tools: [...]}`: exactly the named tools, which may also name callback
//! tools and external MCP tools (`server__tool`). A call needing approval is held like a
//! callback ([`crate::agent::pending`]) with `kind: "approval"`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The tools `always` covers: the builtins that change something.
pub const SIDE_EFFECTING: [&str; 3] = ["shell", "write_file", "edit_file"];

/// `approval` of `session_create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ApprovalPolicy {
    // `"never"` or `"always"`. (Plain comments: `session_create`'s `approval` says it all.)
    Mode(ApprovalMode),
    // Exactly these tools, by the name the model calls them.
    Tools { tools: Vec<String> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    Never,
    Always,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self::Mode(ApprovalMode::Never)
    }
}

impl ApprovalPolicy {
    /// Whether a call of `name` must be approved before it runs.
    pub fn requires(&self, name: &str) -> bool {
        match self {
            Self::Mode(ApprovalMode::Never) => false,
            Self::Mode(ApprovalMode::Always) => SIDE_EFFECTING.contains(&name),
            Self::Tools { tools } => tools.iter().any(|tool| tool == name),
        }
    }

    pub fn is_never(&self) -> bool {
        matches!(self, Self::Mode(ApprovalMode::Never))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse_and_decide() {
        let never: ApprovalPolicy = serde_json::from_str(r#""never""#).unwrap();
        let always: ApprovalPolicy = serde_json::from_str(r#""always""#).unwrap();
        let some: ApprovalPolicy = serde_json::from_str(r#"{"tools": ["deploy", "fs__write"]}"#).unwrap();
        assert!(!never.requires("shell"));
        assert!(always.requires("shell") && always.requires("edit_file") && !always.requires("read_file"));
        assert!(some.requires("deploy") && some.requires("fs__write") && !some.requires("shell"));
        assert!(serde_json::from_str::<ApprovalPolicy>(r#""sometimes""#).is_err());
    }
}
