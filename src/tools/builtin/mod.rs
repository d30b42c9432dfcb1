//! Builtin tools, one per file. All are confined to the session's workspace and cap what they
//! return, so one call cannot flood the model's context.

mod list_dir;
mod read_file;

use std::sync::Arc;

pub use list_dir::ListDir;
pub use read_file::ReadFile;

use super::{Tool, Workspace};

/// Largest tool output, in bytes, that enters the history; the rest is elided with a marker.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024;

/// The read-only file tools every session gets.
pub fn read_only(workspace: &Workspace) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(ReadFile::new(workspace.clone())), Arc::new(ListDir::new(workspace.clone()))]
}

/// Cuts `text` to at most `cap` bytes on a char boundary, saying how much was left out.
pub(crate) fn cap_output(mut text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let total = text.len();
    let mut cut = cap;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("\n[output truncated: {} of {total} bytes shown]", cut));
    text
}
