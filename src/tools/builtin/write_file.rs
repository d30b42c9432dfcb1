//! `write_file`: create or overwrite a file of the workspace.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::llm::ToolSpec;
use crate::tools::{Tool, ToolOutput, Workspace, parse_args};

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
struct WriteFileArgs {
    /// Path relative to the workspace root. Missing parent directories are created.
    path: String,
    /// The whole new content of the file.
    content: String,
}

impl Tool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description: "Write a text file in the workspace, replacing it if it exists and creating missing \
                          parent directories. To change part of an existing file, prefer edit_file."
                .into(),
            input_schema: serde_json::to_value(schemars::schema_for!(WriteFileArgs)).unwrap_or_default(),
        }
    }

    fn call(&self, input: serde_json::Value, _cancel: CancellationToken) -> BoxFuture<'_, ToolOutput> {
        Box::pin(async move {
            let args: WriteFileArgs = match parse_args(input) {
                Ok(args) => args,
                Err(output) => return output,
            };
            let path = match self.workspace.resolve_for_write(&args.path) {
                Ok(path) => path,
                Err(message) => return ToolOutput::error(message),
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
        })
    }
}
