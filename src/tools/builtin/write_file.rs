//! `write_file`: create or overwrite a file of the workspace.

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::tools::{ToolOutput, TypedTool, Workspace};

pub struct WriteFile {
    workspace: Workspace,
}

impl WriteFile {
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path relative to the workspace root. Missing parent directories are created.
    path: String,
    /// The whole new content of the file.
    content: String,
}

impl TypedTool for WriteFile {
    type Args = WriteFileArgs;
    const NAME: &'static str = "write_file";

    fn description(&self) -> String {
        "Write a text file in the workspace, replacing it if it exists and creating missing \
         parent directories. To change part of an existing file, prefer edit_file."
            .into()
    }

    async fn run(&self, args: WriteFileArgs, _cancel: CancellationToken) -> ToolOutput {
        let path = match self.workspace.resolve_for_write(&args.path) {
            Ok(path) => path,
            Err(err) => return ToolOutput::error(err.to_string()),
        };
        if let Some(parent) = path.parent()
            && let Err(err) = tokio::fs::create_dir_all(parent).await
        {
            return ToolOutput::error(format!("{}: creating its directory: {err}", args.path));
        }
        let existed = tokio::fs::symlink_metadata(&path).await.is_ok();
        match tokio::fs::write(&path, args.content.as_bytes()).await {
            Ok(()) => ToolOutput::ok(format!(
                "{} {} bytes to {}",
                if existed { "wrote" } else { "created with" },
                args.content.len(),
                self.workspace.display(&path)
            )),
            Err(err) => ToolOutput::error(format!("{}: {err}", args.path)),
        }
    }
}
