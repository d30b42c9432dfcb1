//! Project instructions: the `AGENTS.md` files of the repository a session works in, given to
//! the model with its system prompt.
//!
//! The convention of 2026's coding agents (Codex, Cursor, Copilot, opencode; Claude Code reads
//! `CLAUDE.md`): the files from the root of the repository holding the workspace — the nearest
//! ancestor with `.git`, never above the server's workspace roots; the workspace itself where
//! there is none — down to the workspace, root first, each directory's `AGENTS.md` or else its
//! `CLAUDE.md`. They are read again at each turn start, so an edit applies to the next turn,
//! and the text stays byte for byte the same while the files do, so the prompt cache keeps
//! hitting. At most [`MAX_BYTES`] in all; the cut is said in the text.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::model::InstructionFile;

/// The most bytes of instructions a session's prompt carries.
pub const MAX_BYTES: usize = 32 * 1024;

/// The file names read in each directory, the first that exists.
const NAMES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// Where a session's project instructions come from.
#[derive(Debug, Clone)]
pub struct InstructionsSource {
    /// The session's workspace (canonical).
    workspace: PathBuf,
    /// The server's workspace roots (canonical): the search for the repository root never goes
    /// above them.
    ceilings: Vec<PathBuf>,
}

/// The instructions as read: the files used and the section for the system prompt (empty when
/// there are none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectInstructions {
    pub files: Vec<InstructionFile>,
    pub text: String,
}

impl InstructionsSource {
    /// The source of a session working in `workspace` under the server's `ceilings`, the paths
    /// resolved once here rather than at every turn; `None` when the workspace does not resolve.
    pub fn new(workspace: &Path, ceilings: &[PathBuf]) -> Option<Self> {
        let workspace = std::fs::canonicalize(workspace).ok()?;
        let ceilings = ceilings.iter().filter_map(|ceiling| std::fs::canonicalize(ceiling).ok()).collect();
        Some(Self { workspace, ceilings })
    }

    /// Reads the files now. Unreadable files are left out (and logged): instructions are
    /// advice, never a reason for a turn to fail.
    pub fn read(&self) -> ProjectInstructions {
        let workspace = &self.workspace;
        let root = repository_root(workspace, &self.ceilings);
        let mut files = Vec::new();
        let mut section = String::new();
        let mut left = MAX_BYTES;
        let mut cut = 0u64;
        for dir in chain(&root, workspace) {
            let Some((path, content, size)) = NAMES.iter().find_map(|name| read_confined(&dir.join(name), &root))
            else {
                continue;
            };
            let shown_path = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
            let shown = crate::text::truncate_at_char_boundary(&content, left);
            left -= shown.len();
            cut += size - shown.len() as u64;
            if !shown.is_empty() {
                section.push_str(&format!("\n## {shown_path}\n\n{}\n", shown.trim_end()));
            }
            files.push(InstructionFile { path: shown_path, bytes: size });
        }
        if files.is_empty() {
            return ProjectInstructions::default();
        }
        if cut > 0 {
            section.push_str(&format!(
                "\n[… {cut} more bytes of project instructions not shown: at most {MAX_BYTES} bytes are given]\n"
            ));
        }
        let text = format!(
            "<project_instructions>\nThe instructions of the project this session works in, from its AGENTS.md \
             files (the repository's root first):\n{section}</project_instructions>"
        );
        ProjectInstructions { files, text }
    }
}

/// The nearest ancestor of `workspace` (itself included) holding `.git`, within the ceilings;
/// the workspace itself where none does.
fn repository_root(workspace: &Path, ceilings: &[PathBuf]) -> PathBuf {
    let within = |dir: &Path| ceilings.iter().any(|ceiling| dir.starts_with(ceiling));
    workspace
        .ancestors()
        .take_while(|dir| within(dir))
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(workspace)
        .to_path_buf()
}

/// The directories from `root` down to `workspace`, both included.
fn chain(root: &Path, workspace: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        workspace.ancestors().take_while(|dir| dir.starts_with(root)).map(Path::to_path_buf).collect();
    dirs.reverse();
    dirs
}

/// The file at `path` (its text, whole size) if it is a regular file that resolves beneath
/// `root`: a link to a file elsewhere is not read (it could carry any of the user's files into
/// a prompt). At most [`MAX_BYTES`] of it are read.
fn read_confined(path: &Path, root: &Path) -> Option<(PathBuf, String, u64)> {
    // Most directories hold neither name, and every turn start looks: one `statx` says so,
    // where resolving the path walks it a component at a time (a `readlink` each).
    std::fs::symlink_metadata(path).ok()?;
    let resolved = std::fs::canonicalize(path).ok()?;
    if !resolved.starts_with(root) {
        tracing::warn!(path = %path.display(), "project instructions: a link out of the repository is not read");
        return None;
    }
    let file = std::fs::File::open(&resolved).ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    if let Err(error) = file.take(MAX_BYTES as u64).read_to_end(&mut bytes) {
        tracing::warn!(path = %path.display(), %error, "project instructions: unreadable, left out");
        return None;
    }
    Some((path.to_path_buf(), String::from_utf8_lossy(&bytes).into_owned(), metadata.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(workspace: &Path, ceiling: &Path) -> InstructionsSource {
        InstructionsSource::new(workspace, &[ceiling.to_path_buf()]).unwrap()
    }

    #[test]
    fn the_repository_root_comes_first_then_each_directory_down_to_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let sub = root.join("crates/sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(root.join("crates/CLAUDE.md"), "crates rules").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "sub rules").unwrap();
        std::fs::write(sub.join("CLAUDE.md"), "not read: AGENTS.md is there").unwrap();

        let read = source(&sub, &root).read();
        let paths: Vec<&str> = read.files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(paths, ["AGENTS.md", "crates/CLAUDE.md", "crates/sub/AGENTS.md"]);
        let (a, b, c) = (read.text.find("root rules"), read.text.find("crates rules"), read.text.find("sub rules"));
        assert!(a < b && b < c && a.is_some(), "{}", read.text);
        assert!(!read.text.contains("not read"));
        assert_eq!(read, source(&sub, &root).read(), "the same files give the same text");

        // The ceiling: a workspace root below the repository's stops the search there.
        let below = source(&sub, &sub).read();
        let paths: Vec<&str> = below.files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(paths, ["AGENTS.md"]);
    }

    #[test]
    fn more_than_32_kib_is_cut_and_said_and_links_out_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.md"), "do not leak").unwrap();
        std::fs::write(root.join("AGENTS.md"), "x".repeat(40 * 1024)).unwrap();
        let read = source(&root, &root).read();
        assert_eq!(read.files[0].bytes, 40 * 1024);
        assert!(
            read.text.contains(&format!("[… {} more bytes", 8 * 1024)),
            "{}",
            &read.text[read.text.len() - 200..]
        );
        assert!(read.text.len() < MAX_BYTES + 1024);

        std::fs::remove_file(root.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), root.join("AGENTS.md")).unwrap();
        assert_eq!(source(&root, &root).read(), ProjectInstructions::default());
    }
}
