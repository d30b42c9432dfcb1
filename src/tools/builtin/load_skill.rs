//! `load_skill`: the instructions of one of the session's skills ([`crate::skills`]). The
//! system prompt lists the skills by name and description only; the model reads a body when a
//! task calls for it.

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::{OUTPUT_CAP_BYTES, cap_output};
use crate::skills::Skills;
use crate::tools::{ToolOutput, TypedTool};

pub struct LoadSkill {
    skills: Skills,
    /// The session's skills (`None`: all of the catalog's).
    only: Option<Vec<String>>,
}

impl LoadSkill {
    pub fn new(skills: Skills, only: Option<Vec<String>>) -> Self {
        Self { skills, only }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadSkillArgs {
    /// The skill's name, as listed in <skills>.
    name: String,
}

impl TypedTool for LoadSkill {
    type Args = LoadSkillArgs;
    const NAME: &'static str = "load_skill";

    fn description(&self) -> String {
        "Read the instructions of a skill listed in <skills>. Files the instructions mention \
         are read with read_skill_file."
            .into()
    }

    async fn run(&self, args: LoadSkillArgs, _cancel: CancellationToken) -> ToolOutput {
        // Read now, not when the session was built: an edited skill applies at once.
        match self.skills.find(&args.name, self.only.as_deref()) {
            Some(skill) => ToolOutput::ok(cap_output(skill.body.clone(), OUTPUT_CAP_BYTES)),
            None => ToolOutput::error(unknown_skill(&self.skills, self.only.as_deref(), &args.name)),
        }
    }
}

/// What the model reads when it names a skill it does not have.
pub(super) fn unknown_skill(skills: &Skills, only: Option<&[String]>, name: &str) -> String {
    format!("unknown skill {name:?}; this session's skills are {:?}", skills.names(only))
}
