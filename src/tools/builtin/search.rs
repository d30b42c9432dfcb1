//! `search`: a regular expression over the text files of the workspace.
//!
//! The walk is bounded (entries visited, file size, results) so one call costs little whatever
//! the workspace holds: every file and directory the walk looks at counts, whether or not it
//! matches the glob (security review F16), and the walk stops as soon as the turn is
//! interrupted. It runs on the file tools' bounded pool ([`super::blocking`]). It does not
//! follow symlinks, skips hidden directories such as `.git`, and skips binary files (a NUL
//! byte in the first 8 KiB, or not UTF-8). It walks directory handles, each opened beneath the
//! one before it and the first beneath the workspace's, so nothing it opens can be outside the
//! workspace, even if the tree changes under it (security review F13).

use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::blocking::{open_in, run_fs};
use super::{OUTPUT_CAP_BYTES, cap_output};
use crate::text::glob::Glob;
use crate::text::truncate_at_char_boundary;
use crate::tools::{ToolOutput, TypedTool, Workspace};

/// Entries (files and directories) visited per call, at most.
pub const MAX_ENTRIES: usize = 20_000;
/// Larger files are skipped.
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;
pub const DEFAULT_MAX_RESULTS: usize = 100;
pub const MAX_RESULTS: usize = 1000;
/// A matching line is cut to this many bytes.
const MAX_LINE_BYTES: usize = 300;

pub struct Search {
    workspace: Workspace,
}

impl Search {
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Regular expression (Rust `regex` syntax), matched against each line.
    pattern: String,
    /// File or directory to search, relative to the workspace root. Default: the root.
    path: Option<String>,
    /// Only files whose path (relative to the root) matches this glob, e.g. `*.rs` or
    /// `src/**/*.toml`. A glob without `/` matches the file name.
    glob: Option<String>,
    /// Most matching lines to return (default 100, max 1000).
    max_results: Option<usize>,
}

impl TypedTool for Search {
    type Args = SearchArgs;
    const NAME: &'static str = "search";

    fn description(&self) -> String {
        "Search the workspace's text files for a regular expression; answers `path:line: \
         text` lines. Narrow it with path (a file or directory) and glob (e.g. \"*.rs\"). \
         Hidden directories (.git) and binary files are skipped."
            .into()
    }

    async fn run(&self, args: SearchArgs, cancel: CancellationToken) -> ToolOutput {
        let pattern = match Regex::new(&args.pattern) {
            Ok(pattern) => pattern,
            Err(err) => return ToolOutput::error(format!("invalid pattern: {err}")),
        };
        let glob = match args.glob.as_deref().map(Glob::new).transpose() {
            Ok(glob) => glob,
            Err(err) => return ToolOutput::error(format!("invalid glob: {err}")),
        };
        let max_results = args.max_results.unwrap_or(DEFAULT_MAX_RESULTS).clamp(1, MAX_RESULTS);
        // The walk stops when the turn is interrupted, and when this call ends for any other
        // reason (the pool's timeout): dropping the guard cancels it.
        let stop = cancel.child_token();
        let _stop_walk = stop.clone().drop_guard();
        let query = Query { pattern, glob, max_results, stop };
        let workspace = self.workspace.clone();
        let path = args.path.unwrap_or_else(|| ".".into());
        let found = run_fs(move || {
            let start = workspace.resolve_existing(&path).map_err(|err| err.to_string())?;
            Ok::<_, String>(query.run(workspace.dir(), workspace.beneath(&start)))
        });
        match found.await {
            Ok(Ok(found)) => ToolOutput::ok(cap_output(found, OUTPUT_CAP_BYTES)),
            Ok(Err(message)) => ToolOutput::error(message),
            Err(err) => ToolOutput::error(format!("search failed: {err}")),
        }
    }
}

struct Query {
    pattern: Regex,
    glob: Option<Glob>,
    max_results: usize,
    /// Fired by an interrupt of the turn, or when the call gave up.
    stop: CancellationToken,
}

#[derive(Default)]
struct Walk {
    lines: Vec<String>,
    /// Files searched (they passed the glob and size filters).
    files: usize,
    /// Entries looked at, directories included: what [`MAX_ENTRIES`] bounds.
    visited: usize,
    /// Why the walk stopped early, if it did.
    stopped: Option<String>,
}

impl Query {
    /// Searches `start` (a file or directory beneath `root`, relative to it).
    fn run(&self, root: &Dir, start: &Path) -> String {
        let mut walk = Walk::default();
        // Paths are shown relative to the root: `.` is the empty path.
        let shown = if start == Path::new(".") { PathBuf::new() } else { start.to_path_buf() };
        self.visit(root, start, shown, &mut walk);
        let mut out = if walk.lines.is_empty() {
            format!("no matches ({} files searched)", walk.files)
        } else {
            walk.lines.join("\n")
        };
        if let Some(reason) = walk.stopped {
            out.push_str(&format!("\n[search stopped: {reason}]"));
        }
        out
    }

    /// Visits `name` (relative to `parent`), shown as `shown`.
    fn visit(&self, parent: &Dir, name: &Path, shown: PathBuf, walk: &mut Walk) {
        if walk.stopped.is_some() {
            return;
        }
        if self.stop.is_cancelled() {
            walk.stopped = Some("the turn was interrupted".to_owned());
            return;
        }
        if walk.visited >= MAX_ENTRIES {
            walk.stopped = Some(format!("looked at {MAX_ENTRIES} entries; narrow the search with path or glob"));
            return;
        }
        walk.visited += 1;
        let Ok(meta) = parent.symlink_metadata(name) else { return };
        if meta.is_dir() {
            // A handle beneath `parent`: a symlink swapped in since cannot lead out of it.
            let Ok(dir) = parent.open_dir(name) else { return };
            let Ok(entries) = dir.entries() else { return };
            let mut children: Vec<String> = entries
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| !name.starts_with('.'))
                .collect();
            children.sort();
            for child in children {
                let shown = shown.join(&child);
                self.visit(&dir, Path::new(&child), shown, walk);
            }
        } else if meta.is_file() {
            self.search_file(parent, name, &shown, meta.len(), walk);
        }
    }

    fn search_file(&self, parent: &Dir, name: &Path, relative: &Path, len: u64, walk: &mut Walk) {
        if self.glob.as_ref().is_some_and(|glob| !glob.matches(relative)) {
            return;
        }
        if len > MAX_FILE_BYTES {
            return;
        }
        walk.files += 1;
        let mut bytes = Vec::new();
        let Ok(mut file) = open_in(parent, name) else { return };
        if std::io::Read::read_to_end(&mut file, &mut bytes).is_err() {
            return;
        }
        if bytes[..bytes.len().min(8192)].contains(&0) {
            return;
        }
        let Ok(text) = std::str::from_utf8(&bytes) else { return };
        for (index, line) in text.lines().enumerate() {
            if !self.pattern.is_match(line) {
                continue;
            }
            if walk.lines.len() >= self.max_results {
                walk.stopped =
                    Some(format!("{} results shown; raise max_results or narrow the search", self.max_results));
                return;
            }
            walk.lines.push(format!(
                "{}:{}: {}",
                relative.display(),
                index + 1,
                truncate_at_char_boundary(line, MAX_LINE_BYTES)
            ));
        }
    }
}

#[cfg(test)]
mod walk_tests {
    use super::*;

    fn query(glob: Option<&str>, stop: CancellationToken) -> Query {
        Query {
            pattern: Regex::new("needle").unwrap(),
            glob: glob.map(|glob| Glob::new(glob).unwrap()),
            max_results: 10,
            stop,
        }
    }

    fn root(dir: &Path) -> Dir {
        Dir::open_ambient_dir(dir, cap_std::ambient_authority()).unwrap()
    }

    /// Security review F16: a glob matching nothing walked the whole tree, since only files
    /// that passed the glob counted against the bound.
    #[test]
    fn f16_a_glob_matching_nothing_still_stops_at_the_entry_bound() {
        let dir = tempfile::tempdir().unwrap();
        for d in 0..110 {
            let sub = dir.path().join(format!("d{d:03}"));
            std::fs::create_dir(&sub).unwrap();
            for f in 0..200 {
                std::fs::write(sub.join(format!("f{f:03}.txt")), "hay").unwrap();
            }
        }
        let found = query(Some("*.nomatch"), CancellationToken::new()).run(&root(dir.path()), Path::new("."));
        assert!(found.contains(&format!("looked at {MAX_ENTRIES} entries")), "{found}");
        assert!(found.starts_with("no matches (0 files searched)"), "{found}");
    }

    #[test]
    fn an_interrupted_turn_stops_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "needle").unwrap();
        let stop = CancellationToken::new();
        stop.cancel();
        let found = query(None, stop).run(&root(dir.path()), Path::new("."));
        assert!(found.contains("[search stopped: the turn was interrupted]"), "{found}");
    }
}
