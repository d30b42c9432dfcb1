//! `read_file`: a text file of the workspace, optionally a range of its lines.

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use std::io::BufRead;
use std::path::Path;

use super::OUTPUT_CAP_BYTES;
use super::blocking::{open_for_read, run_fs};
use crate::tools::{ToolOutput, TypedTool, Workspace};

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
pub struct ReadFileArgs {
    /// Path relative to the workspace root.
    path: String,
    /// First line to return, counting from 1. Default 1.
    start_line: Option<usize>,
    /// How many lines to return. Default: to the end of the file.
    line_count: Option<usize>,
}

impl ReadFileArgs {
    /// The arguments of a read made on the model's behalf by another tool (`read_skill_file`).
    pub(super) fn new(path: String, start_line: Option<usize>, line_count: Option<usize>) -> Self {
        Self { path, start_line, line_count }
    }
}

impl TypedTool for ReadFile {
    type Args = ReadFileArgs;
    const NAME: &'static str = "read_file";

    fn description(&self) -> String {
        "Read a UTF-8 text file from the workspace. Optionally pass start_line (1-based) \
         and line_count to read part of a large file. Output is capped at 64 KiB."
            .into()
    }

    async fn run(&self, args: ReadFileArgs, _cancel: CancellationToken) -> ToolOutput {
        let start = args.start_line.unwrap_or(1).max(1) - 1;
        let end = args.line_count.map(|count| start.saturating_add(count));
        let workspace = self.workspace.clone();
        let shown = args.path.clone();
        let read = run_fs(move || {
            let path = workspace.resolve_existing(&shown).map_err(|err| err.to_string())?;
            read_lines(&workspace, &path, start, end, OUTPUT_CAP_BYTES).map_err(|err| format!("{shown}: {err}"))
        });
        match read.await {
            Ok(Ok(text)) => ToolOutput::ok(text),
            Ok(Err(message)) => ToolOutput::error(message),
            Err(err) => ToolOutput::error(format!("{}: {err}", args.path)),
        }
    }
}

/// Why a file could not be read as text; the model reads it after the file's path.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("not a UTF-8 text file")]
    NotUtf8,
}

/// Lines `start..end` (0-based, `end` exclusive or to the end of the file), at most `cap`
/// bytes of them. The file is streamed, so a huge file costs no more memory than the cap.
/// Blocking: runs on the file tools' pool.
fn read_lines(
    workspace: &Workspace,
    path: &Path,
    start: usize,
    end: Option<usize>,
    cap: usize,
) -> Result<String, ReadError> {
    let file = open_for_read(workspace, path)?;
    let mut reader = std::io::BufReader::new(file);
    let mut line = 0usize;
    let mut out = Vec::new();
    let mut truncated = false;
    'read: loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let len = chunk.len();
        let mut pos = 0;
        while pos < len {
            if end.is_some_and(|end| line >= end) {
                break 'read;
            }
            let newline = chunk[pos..].iter().position(|&byte| byte == b'\n');
            let segment_end = newline.map_or(len, |at| pos + at + 1);
            if line >= start {
                out.extend_from_slice(&chunk[pos..segment_end]);
                if out.len() > cap {
                    truncated = true;
                    break 'read;
                }
            }
            if newline.is_some() {
                line += 1;
            }
            pos = segment_end;
        }
        reader.consume(len);
    }
    if !truncated {
        return String::from_utf8(out).map_err(|_| ReadError::NotUtf8);
    }
    out.truncate(cap);
    let valid = match std::str::from_utf8(&out) {
        Ok(text) => text.len(),
        // Only a character cut by the cap may be incomplete; anything else is binary.
        Err(err) if err.error_len().is_none() => err.valid_up_to(),
        Err(_) => return Err(ReadError::NotUtf8),
    };
    out.truncate(valid);
    let mut text = String::from_utf8(out).map_err(|_| ReadError::NotUtf8)?;
    text.push_str(&format!(
        "\n[output truncated at {cap} bytes, in line {}; read on with start_line and line_count]",
        line + 1
    ));
    Ok(text)
}
