//! `list_dir`: the entries of a workspace directory.

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::blocking::{list_in, run_fs};
use super::{OUTPUT_CAP_BYTES, cap_output};
use crate::tools::{ToolOutput, TypedTool, Workspace};

pub struct ListDir {
    workspace: Workspace,
}

impl ListDir {
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    /// Directory relative to the workspace root. Default: the root.
    path: Option<String>,
}

impl TypedTool for ListDir {
    type Args = ListDirArgs;
    const NAME: &'static str = "list_dir";

    fn description(&self) -> String {
        "List a directory of the workspace, one entry per line, sorted; directories end \
         with '/'. Without a path, lists the workspace root."
            .into()
    }

    async fn run(&self, args: ListDirArgs, _cancel: CancellationToken) -> ToolOutput {
        let shown = args.path.unwrap_or_else(|| ".".into());
        let workspace = self.workspace.clone();
        let path = shown.clone();
        let listed = run_fs(move || {
            let dir = workspace.resolve_existing(&path).map_err(|err| err.to_string())?;
            let entries = list_in(&workspace, &dir).map_err(|err| format!("{path}: {err}"))?;
            let names: Vec<String> =
                entries.into_iter().map(|(name, is_dir)| if is_dir { name + "/" } else { name }).collect();
            Ok::<_, String>((dir, names))
        });
        let (dir, mut names) = match listed.await {
            Ok(Ok(listed)) => listed,
            Ok(Err(message)) => return ToolOutput::error(message),
            Err(err) => return ToolOutput::error(format!("{shown}: {err}")),
        };
        names.sort();
        if names.is_empty() {
            return ToolOutput::ok(format!("{} is empty", self.workspace.display(&dir)));
        }
        ToolOutput::ok(cap_output(names.join("\n"), OUTPUT_CAP_BYTES))
    }
}
