//! `write_file`: create or overwrite a file of the workspace.

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::blocking::{create_dirs, run_fs, write_whole};
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
        let workspace = self.workspace.clone();
        let (shown, content) = (args.path.clone(), args.content);
        let len = content.len();
        let written = run_fs(move || {
            let path = workspace.resolve_for_write(&shown).map_err(|err| err.to_string())?;
            create_dirs(&workspace, &path).map_err(|err| format!("{shown}: creating its directory: {err}"))?;
            let existed = workspace.dir().symlink_metadata(workspace.beneath(&path)).is_ok();
            write_whole(&workspace, &path, content.as_bytes()).map_err(|err| format!("{shown}: {err}"))?;
            Ok::<_, String>((path, existed))
        });
        match written.await {
            Ok(Ok((path, existed))) => ToolOutput::ok(format!(
                "{} {len} bytes to {}",
                if existed { "wrote" } else { "created with" },
                self.workspace.display(&path)
            )),
            Ok(Err(message)) => ToolOutput::error(message),
            Err(err) => ToolOutput::error(format!("{}: {err}", args.path)),
        }
    }
}
