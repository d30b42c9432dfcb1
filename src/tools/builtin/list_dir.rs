//! `list_dir`: the entries of a workspace directory.

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

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
        let dir = match self.workspace.resolve_existing(&shown) {
            Ok(dir) => dir,
            Err(err) => return ToolOutput::error(err.to_string()),
        };
        let mut reader = match tokio::fs::read_dir(&dir).await {
            Ok(reader) => reader,
            Err(err) => return ToolOutput::error(format!("{shown}: {err}")),
        };
        let mut names = Vec::new();
        loop {
            match reader.next_entry().await {
                Ok(Some(entry)) => {
                    let mut name = entry.file_name().to_string_lossy().into_owned();
                    if entry.file_type().await.is_ok_and(|kind| kind.is_dir()) {
                        name.push('/');
                    }
                    names.push(name);
                }
                Ok(None) => break,
                Err(err) => return ToolOutput::error(format!("{shown}: {err}")),
            }
        }
        names.sort();
        if names.is_empty() {
            return ToolOutput::ok(format!("{} is empty", self.workspace.display(&dir)));
        }
        ToolOutput::ok(cap_output(names.join("\n"), OUTPUT_CAP_BYTES))
    }
}
