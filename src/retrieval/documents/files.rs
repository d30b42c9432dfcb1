//! The files of a collection: walked beneath directory handles of its paths (so nothing read
//! can be outside them, whatever the tree does meanwhile), hidden directories and symlinks
//! skipped, bounded in count and size, read only when they are text.

use std::io::Read;
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::text::glob::Glob;

/// Files one collection indexes at most; the rest are left out with a warning.
pub const MAX_FILES: usize = 10_000;
/// Entries (files and directories) one walk looks at, at most.
pub const MAX_ENTRIES: usize = 100_000;
/// Larger files are left out.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// One path of a collection: a directory, or a single file.
#[derive(Debug)]
pub struct Root {
    /// As the operator configured it (how results name its files).
    pub shown: PathBuf,
    /// The directory, or a file's parent, opened once.
    dir: Dir,
    /// A single file's name in `dir`.
    file: Option<PathBuf>,
}

impl Root {
    /// Opens `path` (absolute), shown as `shown`.
    pub fn open(path: &Path, shown: PathBuf) -> std::io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        if meta.is_dir() {
            return Ok(Self { shown, dir: Dir::open_ambient_dir(path, ambient_authority())?, file: None });
        }
        let parent = path.parent().unwrap_or(Path::new("/"));
        let name =
            path.file_name().map(PathBuf::from).ok_or_else(|| std::io::Error::other("a path without a name"))?;
        Ok(Self { shown, dir: Dir::open_ambient_dir(parent, ambient_authority())?, file: Some(name) })
    }
}

/// A file found by a walk: where it is and what its metadata says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// How results name it: the root's shown path joined with the path below it.
    pub path: String,
    pub root: usize,
    /// Below the root's directory.
    pub relative: PathBuf,
    pub size: u64,
    /// Modification time, in nanoseconds since the epoch (0 if unknown).
    pub modified: u128,
}

/// Every file of `roots` that `glob` (matched against the shown path) lets in, in path order,
/// and why the walk stopped early, if it did.
pub fn walk(roots: &[Root], glob: Option<&Glob>) -> (Vec<Found>, Option<String>) {
    let mut walk = Walk { found: Vec::new(), visited: 0, stopped: None, glob };
    for (index, root) in roots.iter().enumerate() {
        match &root.file {
            Some(name) => walk.file(&root.dir, name, index, name.clone(), root.shown.clone()),
            None => walk.dir(&root.dir, index, PathBuf::new(), root.shown.clone()),
        }
    }
    walk.found.sort_by(|a, b| a.path.cmp(&b.path));
    walk.found.dedup_by(|a, b| a.path == b.path);
    (walk.found, walk.stopped)
}

struct Walk<'a> {
    found: Vec<Found>,
    visited: usize,
    stopped: Option<String>,
    glob: Option<&'a Glob>,
}

impl Walk<'_> {
    fn counts(&mut self) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        self.visited += 1;
        if self.visited > MAX_ENTRIES {
            self.stopped = Some(format!("looked at {MAX_ENTRIES} entries"));
            return false;
        }
        true
    }

    fn dir(&mut self, dir: &Dir, root: usize, relative: PathBuf, shown: PathBuf) {
        let Ok(entries) = dir.entries() else { return };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect();
        names.sort();
        for name in names {
            if !self.counts() {
                return;
            }
            let Ok(meta) = dir.symlink_metadata(&name) else { continue };
            if meta.is_dir() {
                // A handle beneath this one: a symlink swapped in since cannot lead out.
                let Ok(child) = dir.open_dir(&name) else { continue };
                self.dir(&child, root, relative.join(&name), shown.join(&name));
            } else if meta.is_file() {
                self.file(dir, Path::new(&name), root, relative.join(&name), shown.join(&name));
            }
        }
    }

    fn file(&mut self, dir: &Dir, name: &Path, root: usize, relative: PathBuf, shown: PathBuf) {
        if self.glob.is_some_and(|glob| !glob.matches(&shown)) {
            return;
        }
        let Ok(meta) = dir.symlink_metadata(name) else { return };
        if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
            return;
        }
        if self.found.len() >= MAX_FILES {
            self.stopped = Some(format!("{MAX_FILES} files"));
            return;
        }
        let modified = meta
            .modified()
            .ok()
            .and_then(|time| time.into_std().duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_nanos());
        let path = shown.to_string_lossy().into_owned();
        self.found.push(Found { path, root, relative, size: meta.len(), modified });
    }
}

/// The text of a found file, or `None` if it is gone, too large now, or not text (a NUL byte in
/// its first 8 KiB, or not UTF-8).
pub fn read(roots: &[Root], found: &Found) -> Option<String> {
    let root = roots.get(found.root)?;
    let mut file = root.dir.open(&found.relative).ok()?;
    let mut bytes = Vec::new();
    (&mut file).take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > MAX_FILE_BYTES || bytes[..bytes.len().min(8192)].contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_finds_text_files_by_glob_skipping_hidden_directories_and_links_out() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.md"), "secret").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let docs = dir.path().join("docs");
        std::fs::create_dir_all(docs.join("guide")).unwrap();
        std::fs::create_dir_all(docs.join(".git")).unwrap();
        std::fs::write(docs.join("guide").join("a.md"), "# A").unwrap();
        std::fs::write(docs.join("b.txt"), "b").unwrap();
        std::fs::write(docs.join(".git").join("c.md"), "c").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), docs.join("link.md")).unwrap();
        std::fs::write(dir.path().join("README.md"), "# Read me").unwrap();

        let roots = vec![
            Root::open(&docs, PathBuf::from("docs")).unwrap(),
            Root::open(&dir.path().join("README.md"), PathBuf::from("README.md")).unwrap(),
        ];
        let glob = Glob::new("**/*.md").unwrap();
        let (found, stopped) = walk(&roots, Some(&glob));
        let paths: Vec<&str> = found.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(paths, ["README.md", "docs/guide/a.md"]);
        assert_eq!(stopped, None);
        assert_eq!(read(&roots, &found[1]).as_deref(), Some("# A"));
    }
}
