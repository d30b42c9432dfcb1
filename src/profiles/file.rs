//! One profile file: Markdown whose YAML frontmatter names the agent and sets any
//! `session_create` field, and whose body is its system prompt — Claude Code's subagent format,
//! so a `.claude/agents/*.md` file is a deputy profile as it is.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::catalog::{MAX_NAME_CHARS, is_definition_name};
use crate::llm::Reasoning;
use crate::model::{Budget, ContextOverrides};
use crate::text::frontmatter;
use crate::tools::mcp::McpServerRequest;
use crate::tools::{BuiltinTool, ShellRequest};

/// Longest description: it is what a caller's model reads to choose an agent.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// A named agent, as its file defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// The body: the system prompt of its sessions (empty: none).
    pub system_prompt: String,
    pub fields: ProfileFields,
    /// The frontmatter as written, for `agent/get` to show.
    pub frontmatter: serde_json::Map<String, Value>,
}

/// What a profile sets of a session, each unset field left to the caller or the server.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileFields {
    /// `provider:model`; Claude Code's `inherit` is no model (the server's, or a delegating
    /// parent's).
    pub model: Option<String>,
    pub builtins: Option<Vec<BuiltinTool>>,
    pub shell: Option<ShellRequest>,
    pub mcp_servers: Option<Vec<McpServerRequest>>,
    pub budget: Option<Budget>,
    pub context: Option<ContextOverrides>,
    pub reasoning: Option<Reasoning>,
    pub output_schema: Option<Value>,
    pub host_mode: Option<bool>,
    pub max_tokens: Option<u32>,
    pub skills: Option<Vec<String>>,
    /// The document collections its sessions search (`[documents.NAME]`).
    pub documents: Option<Vec<String>>,
}

/// The frontmatter's keys, checked as `session_create` checks its arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Frontmatter {
    name: String,
    description: String,
    model: Option<String>,
    builtins: Option<Vec<BuiltinTool>>,
    /// Claude Code's list (`Read, Grep, Bash` or a YAML list), mapped onto deputy's builtins.
    tools: Option<ToolNames>,
    shell: Option<ShellRequest>,
    mcp_servers: Option<Vec<McpServerRequest>>,
    budget: Option<Budget>,
    context: Option<ContextOverrides>,
    reasoning: Option<Reasoning>,
    output_schema: Option<Value>,
    host_mode: Option<bool>,
    max_tokens: Option<u32>,
    skills: Option<Vec<String>>,
    documents: Option<Vec<String>>,
    /// Claude Code's display colour: nothing deputy shows, accepted so its files load as they are.
    #[serde(rename = "color")]
    _color: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ToolNames {
    Text(String),
    List(Vec<String>),
}

impl ToolNames {
    fn names(&self) -> Vec<String> {
        match self {
            Self::Text(text) => {
                text.split(',').map(|name| name.trim().to_owned()).filter(|n| !n.is_empty()).collect()
            }
            Self::List(names) => names.iter().map(|name| name.trim().to_owned()).collect(),
        }
    }
}

/// Claude Code's tool names and what each is in deputy: builtins, or the shell.
const CLAUDE_TOOLS: &[(&str, &[BuiltinTool])] = &[
    ("Read", &[BuiltinTool::ReadFile]),
    ("Write", &[BuiltinTool::WriteFile]),
    ("Edit", &[BuiltinTool::EditFile]),
    ("MultiEdit", &[BuiltinTool::EditFile]),
    ("LS", &[BuiltinTool::ListDir]),
    ("Glob", &[BuiltinTool::ListDir]),
    ("Grep", &[BuiltinTool::Search]),
    ("Task", &BuiltinTool::DELEGATION),
    ("Bash", &[]),
];

/// Reads a profile file; the reason says which key is wrong and why.
pub fn parse(_path: &Path, text: &str) -> Result<std::sync::Arc<Profile>, String> {
    let document = frontmatter::parse(text)?;
    let front: Frontmatter =
        serde_json::from_value(Value::Object(document.fields.clone())).map_err(|error| error.to_string())?;
    check_name(&front.name)?;
    let description = front.description.trim().to_owned();
    if description.is_empty() {
        return Err("description: must not be empty (it is what callers and their models read)".into());
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(format!("description: at most {MAX_DESCRIPTION_CHARS} characters"));
    }
    let model = match front.model {
        Some(model) if model == "inherit" => None,
        Some(model) if !model.contains(':') => {
            return Err(format!(
                "model: {model:?} is not `provider:model` (e.g. \"anthropic:claude-sonnet-4-5\"), nor `inherit`"
            ));
        }
        model => model,
    };
    let (builtins, shell) = match (front.builtins, front.tools) {
        (Some(_), Some(_)) => {
            return Err("give either `builtins` (deputy's names) or `tools` (Claude Code's)".into());
        }
        (builtins, None) => (builtins, front.shell),
        (None, Some(tools)) => {
            let (builtins, wants_shell) = map_tools(&tools.names())?;
            let shell = match (front.shell, wants_shell) {
                (Some(shell), _) => Some(shell),
                (None, true) => Some(ShellRequest::Enabled(true)),
                (None, false) => None,
            };
            (Some(builtins), shell)
        }
    };
    Ok(std::sync::Arc::new(Profile {
        name: front.name,
        description,
        system_prompt: document.body.trim_end().to_owned(),
        fields: ProfileFields {
            model,
            builtins,
            shell,
            mcp_servers: front.mcp_servers,
            budget: front.budget,
            context: front.context,
            reasoning: front.reasoning,
            output_schema: front.output_schema,
            host_mode: front.host_mode,
            max_tokens: front.max_tokens,
            skills: front.skills,
            documents: front.documents,
        },
        frontmatter: document.fields,
    }))
}

/// A profile name: 1-64 of `a-z`, `0-9` and `-`.
pub fn check_name(name: &str) -> Result<(), String> {
    if is_definition_name(name) {
        Ok(())
    } else {
        Err(format!("name: {name:?} must be 1-{MAX_NAME_CHARS} of a-z, 0-9 and -"))
    }
}

/// Claude Code's tool names (or deputy's own) as builtins, and whether `Bash` asked for the
/// shell. A name with no counterpart is an error: a profile must not quietly lose a tool.
fn map_tools(names: &[String]) -> Result<(Vec<BuiltinTool>, bool), String> {
    let mut builtins = Vec::new();
    let mut shell = false;
    for name in names {
        if let Some((_, mapped)) = CLAUDE_TOOLS.iter().find(|(claude, _)| claude == name) {
            builtins.extend_from_slice(mapped);
            shell |= name == "Bash";
        } else if let Ok(builtin) = serde_json::from_value::<BuiltinTool>(Value::String(name.clone())) {
            builtins.push(builtin);
        } else {
            let known: Vec<&str> = CLAUDE_TOOLS.iter().map(|(claude, _)| *claude).collect();
            return Err(format!(
                "tools: {name:?} has no counterpart in deputy (Claude Code's {} map onto its builtins, as do \
                 deputy's own builtin names)",
                known.join(", ")
            ));
        }
    }
    builtins.sort();
    builtins.dedup();
    Ok((builtins, shell))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(text: &str) -> Result<std::sync::Arc<Profile>, String> {
        parse(Path::new("x.md"), text)
    }

    #[test]
    fn a_claude_code_subagent_is_a_profile() {
        let reviewer = profile(
            "---\nname: code-reviewer\ndescription: Reviews code for bugs.\ntools: Read, Grep, Glob, Bash\n\
             model: inherit\ncolor: blue\n---\n\nYou are a careful reviewer.\n",
        )
        .unwrap();
        assert_eq!(reviewer.name, "code-reviewer");
        assert_eq!(reviewer.system_prompt, "You are a careful reviewer.");
        assert_eq!(reviewer.fields.model, None);
        assert_eq!(
            reviewer.fields.builtins,
            Some(vec![BuiltinTool::ReadFile, BuiltinTool::ListDir, BuiltinTool::Search])
        );
        assert_eq!(reviewer.fields.shell, Some(ShellRequest::Enabled(true)));
    }

    #[test]
    fn deputy_fields_are_read_as_session_create_reads_them() {
        let planner = profile(
            "---\nname: planner\ndescription: Plans.\nmodel: anthropic:claude-haiku-4-5\nbuiltins: [read_file]\n\
             budget: {max_tokens: 5000}\ncontext: {project_instructions: false}\nmax_tokens: 900\nskills: [pdf]\n---\nPlan.",
        )
        .unwrap();
        assert_eq!(planner.fields.model.as_deref(), Some("anthropic:claude-haiku-4-5"));
        assert_eq!(planner.fields.budget.unwrap().max_tokens, Some(5000));
        assert_eq!(planner.fields.context.unwrap().project_instructions, Some(false));
        assert_eq!(planner.fields.max_tokens, Some(900));
        assert_eq!(planner.fields.skills, Some(vec!["pdf".to_owned()]));
    }

    #[test]
    fn mistakes_are_named() {
        let reason = |text: &str| profile(text).unwrap_err();
        assert!(reason("---\ndescription: d\n---\n").contains("missing field `name`"));
        assert!(reason("---\nname: Bad_Name\ndescription: d\n---\n").contains("a-z, 0-9"));
        assert!(reason("---\nname: a\ndescription: d\ntools: Read, WebFetch\n---\n").contains("WebFetch"));
        assert!(reason("---\nname: a\ndescription: d\nshel: true\n---\n").contains("unknown field `shel`"));
        assert!(reason("---\nname: a\ndescription: d\nmodel: sonnet\n---\n").contains("provider:model"));
        assert!(reason("---\nname: a\ndescription: d\nbuiltins: [nope]\n---\n").contains("nope"));
        assert!(reason("---\nname: a\ndescription: \" \"\n---\n").contains("description"));
    }
}
