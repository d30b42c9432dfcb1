//! Builtin tools, one per file. The file tools are confined to the session's workspace, the
//! skill tools to the skills' folders; all cap what they return, so one call cannot flood the
//! model's context.

pub mod blocking;
mod edit_file;
mod list_dir;
mod load_skill;
mod read_file;
mod read_skill_file;
pub mod search;
mod search_documents;
mod write_file;

pub use edit_file::EditFile;
pub use list_dir::ListDir;
pub use load_skill::LoadSkill;
pub use read_file::ReadFile;
pub use read_skill_file::ReadSkillFile;
pub use search::Search;
pub use search_documents::SearchDocuments;
pub use write_file::WriteFile;

use crate::text::truncate_at_char_boundary;

/// Largest tool output, in bytes, that enters the history; the rest is elided with a marker.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024;

/// Cuts `text` to at most `cap` bytes on a char boundary, saying how much was left out.
pub(crate) fn cap_output(mut text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let total = text.len();
    let cut = truncate_at_char_boundary(&text, cap).len();
    text.truncate(cut);
    text.push_str(&format!("\n[output truncated: {} of {total} bytes shown]", cut));
    text
}
