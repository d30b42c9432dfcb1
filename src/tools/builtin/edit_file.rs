//! `edit_file`: replace an exact piece of text in a workspace file.
//!
//! Exact match rather than line numbers or diffs: the model quotes what it saw, so an edit
//! based on a stale read fails loudly instead of landing in the wrong place. A text that occurs
//! several times must be made unique (or `replace_all` asked for), for the same reason.

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::blocking::{read_whole, run_fs, write_whole};
use crate::tools::{ToolOutput, TypedTool, Workspace};

pub struct EditFile {
    workspace: Workspace,
}

impl EditFile {
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// Path relative to the workspace root; the file must exist.
    path: String,
    /// Text to replace, exactly as it appears in the file (whitespace included).
    old_text: String,
    /// The replacement.
    new_text: String,
    /// Replace every occurrence. Default false: `old_text` must occur exactly once.
    #[serde(default)]
    replace_all: bool,
}

impl TypedTool for EditFile {
    type Args = EditFileArgs;
    const NAME: &'static str = "edit_file";

    fn description(&self) -> String {
        "Replace old_text with new_text in a workspace file. old_text must match exactly \
         (including whitespace) and occur exactly once, unless replace_all is true; include \
         surrounding lines to make it unique."
            .into()
    }

    async fn run(&self, args: EditFileArgs, _cancel: CancellationToken) -> ToolOutput {
        if args.old_text.is_empty() {
            return ToolOutput::error("old_text is empty: quote the text to replace");
        }
        let workspace = self.workspace.clone();
        let shown = args.path.clone();
        let read = run_fs(move || {
            let path = workspace.resolve_existing(&shown).map_err(|err| err.to_string())?;
            let bytes = read_whole(&workspace, &path).map_err(|err| format!("{shown}: {err}"))?;
            let text = String::from_utf8(bytes).map_err(|_| format!("{shown}: not a UTF-8 text file"))?;
            Ok::<_, String>((path, text))
        });
        let (path, text) = match read.await {
            Ok(Ok(read)) => read,
            Ok(Err(message)) => return ToolOutput::error(message),
            Err(err) => return ToolOutput::error(format!("{}: {err}", args.path)),
        };
        let count = text.matches(&args.old_text).count();
        if count == 0 {
            return ToolOutput::error(format!(
                "{}: old_text not found; read the file again and quote it exactly",
                args.path
            ));
        }
        if count > 1 && !args.replace_all {
            return ToolOutput::error(format!(
                "{}: old_text occurs {count} times; add surrounding text to make it unique, or set \
                 replace_all",
                args.path
            ));
        }
        let edited = text.replace(&args.old_text, &args.new_text);
        let (workspace, target) = (self.workspace.clone(), path.clone());
        match run_fs(move || write_whole(&workspace, &target, edited.as_bytes())).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => return ToolOutput::error(format!("{}: {err}", args.path)),
            Err(err) => return ToolOutput::error(format!("{}: {err}", args.path)),
        }
        let noun = if count == 1 { "occurrence" } else { "occurrences" };
        ToolOutput::ok(format!("replaced {count} {noun} in {}", self.workspace.display(&path)))
    }
}
