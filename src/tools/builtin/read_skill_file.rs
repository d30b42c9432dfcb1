//! `read_skill_file`: a file of one of the session's skills, such as a reference its
//! instructions point to. Confined to the skill's folder exactly as `read_file` is to the
//! workspace (the same resolution and the same open beneath a directory handle): `..`, absolute
//! paths and links that lead out of the folder are refused.

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::ReadFile;
use super::load_skill::unknown_skill;
use crate::skills::Skills;
use crate::tools::{ToolOutput, TypedTool, Workspace, WorkspaceError};

pub struct ReadSkillFile {
    skills: Skills,
    /// The session's skills (`None`: all of the catalog's).
    only: Option<Vec<String>>,
}

impl ReadSkillFile {
    pub fn new(skills: Skills, only: Option<Vec<String>>) -> Self {
        Self { skills, only }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadSkillFileArgs {
    /// The skill's name.
    name: String,
    /// Path relative to the skill's folder (where its SKILL.md is).
    path: String,
    /// First line to return, counting from 1. Default 1.
    start_line: Option<usize>,
    /// How many lines to return. Default: to the end of the file.
    line_count: Option<usize>,
}

impl TypedTool for ReadSkillFile {
    type Args = ReadSkillFileArgs;
    const NAME: &'static str = "read_skill_file";

    fn description(&self) -> String {
        "Read a UTF-8 text file of a skill, by its path in the skill's folder. Optionally pass \
         start_line (1-based) and line_count. Output is capped at 64 KiB."
            .into()
    }

    async fn run(&self, args: ReadSkillFileArgs, cancel: CancellationToken) -> ToolOutput {
        let Some(skill) = self.skills.find(&args.name, self.only.as_deref()) else {
            return ToolOutput::error(unknown_skill(&self.skills, self.only.as_deref(), &args.name));
        };
        let folder = match Workspace::new(&skill.folder) {
            Ok(folder) => folder,
            Err(error) => return ToolOutput::error(format!("skill {:?}: {error}", args.name)),
        };
        // Checked here too, for a refusal that speaks of the skill rather than a workspace;
        // `read_file` checks again and opens beneath the folder's handle.
        if let Err(WorkspaceError::Outside { path, .. }) = folder.resolve_existing(&args.path) {
            return ToolOutput::error(format!(
                "{path}: outside the folder of skill {:?}; read_skill_file reads only the skill's own files",
                args.name
            ));
        }
        let read = super::read_file::ReadFileArgs::new(args.path, args.start_line, args.line_count);
        ReadFile::new(folder).run(read, cancel).await
    }
}
