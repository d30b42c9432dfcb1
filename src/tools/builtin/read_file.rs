//! `read_file`: a text file of the workspace, optionally a range of its lines.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::{OUTPUT_CAP_BYTES, cap_output};
use crate::llm::ToolSpec;
use crate::tools::{Tool, ToolOutput, Workspace, parse_args};

pub struct ReadFile {
    workspace: Workspace,
}

impl ReadFile {
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFileArgs {
    /// Path relative to the workspace root.
    path: String,
    /// First line to return, counting from 1. Default 1.
    start_line: Option<usize>,
    /// How many lines to return. Default: to the end of the file.
    line_count: Option<usize>,
}

impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: "Read a UTF-8 text file from the workspace. Optionally pass start_line (1-based) \
                          and line_count to read part of a large file. Output is capped at 64 KiB."
                .into(),
            input_schema: serde_json::to_value(schemars::schema_for!(ReadFileArgs)).unwrap_or_default(),
        }
    }

    fn call(&self, input: serde_json::Value, _cancel: CancellationToken) -> BoxFuture<'_, ToolOutput> {
        Box::pin(async move {
            let args: ReadFileArgs = match parse_args(input) {
                Ok(args) => args,
                Err(output) => return output,
            };
            let path = match self.workspace.resolve_existing(&args.path) {
                Ok(path) => path,
                Err(message) => return ToolOutput::error(message),
            };
            let bytes = match tokio::fs::read(&path).await {
                Ok(bytes) => bytes,
                Err(err) => return ToolOutput::error(format!("{}: {err}", args.path)),
            };
            let Ok(text) = String::from_utf8(bytes) else {
                return ToolOutput::error(format!("{}: not a UTF-8 text file", args.path));
            };
            let start = args.start_line.unwrap_or(1).max(1) - 1;
            let selected: String = match args.line_count {
                None if start == 0 => text,
                count => {
                    let lines = text.split_inclusive('\n').skip(start);
                    match count {
                        Some(count) => lines.take(count).collect(),
                        None => lines.collect(),
                    }
                }
            };
            ToolOutput::ok(cap_output(selected, OUTPUT_CAP_BYTES))
        })
    }
}
