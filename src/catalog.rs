//! Definitions an operator keeps as files — agent profiles, skills — loaded from directories
//! and re-read when they change, so an edit needs no restart.
//!
//! Every look at a [`Catalog`] lists its directories again (a directory listing and one `stat`
//! per file: microseconds for the few files such directories hold) and parses only the files
//! whose size or modification time changed since the last look. A file that cannot be read or
//! parsed is an entry with its reason, never an error of the whole catalog: one malformed file
//! must not hide the others or stop the server.
//!
//! An entry's version is a hash of the file's bytes, so it names the content, not the time it
//! was saved: the same file copied to another machine has the same version.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// Larger definition files are refused (a profile or a `SKILL.md` is prose for a model, not
/// data): the catalog never reads an unbounded file into memory.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Entries read from one directory at most; the rest are ignored (and logged).
pub const MAX_ENTRIES_PER_DIR: usize = 500;

/// The longest name of a definition, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// Whether `name` may name a definition: 1 to [`MAX_NAME_CHARS`] of `a-z`, `0-9` and `-`, the
/// rule Claude Code's subagents and Agent Skills share, so one name can be a file name, a
/// folder name and a tool argument alike.
pub fn is_definition_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Where a catalog's definitions are in a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Each file with this extension is one definition (`reviewer.md`).
    Files { extension: &'static str },
    /// Each folder holding this file is one definition (`pdf/SKILL.md`).
    Folders { file: &'static str },
}

/// One definition file, parsed or not.
#[derive(Debug)]
pub struct Entry<T> {
    /// The file (for a folder layout, the folder's defining file).
    pub path: PathBuf,
    /// The directory of the catalog it was found in.
    pub dir: PathBuf,
    /// The first 16 hex digits of the SHA-256 of the file's bytes.
    pub version: String,
    /// The definition, or why the file is not one.
    pub parsed: Result<T, String>,
}

/// Turns a file's text into a definition; `path` is the file's, for definitions that keep it.
pub type Parser<T> = fn(path: &Path, text: &str) -> Result<T, String>;

/// A file's identity between looks: whatever changes when it is edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

/// Definitions from a list of directories, in the order given (the first directory's entries
/// first; a missing directory has none).
pub struct Catalog<T> {
    dirs: Vec<PathBuf>,
    layout: Layout,
    parse: Parser<T>,
    cache: Mutex<HashMap<PathBuf, Cached<T>>>,
}

/// A file's entry as last read, with the stamp it had then.
type Cached<T> = (Stamp, Arc<Entry<T>>);

impl<T> std::fmt::Debug for Catalog<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("dirs", &self.dirs).field("layout", &self.layout).finish_non_exhaustive()
    }
}

impl<T> Catalog<T> {
    pub fn new(dirs: Vec<PathBuf>, layout: Layout, parse: Parser<T>) -> Self {
        Self { dirs, layout, parse, cache: Mutex::default() }
    }

    /// The directories looked in, in order.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Every entry as the files are now: directories in order, each one's entries by file name.
    /// Unchanged files are not read again.
    pub fn entries(&self) -> Vec<Arc<Entry<T>>> {
        let mut found = Vec::new();
        for dir in &self.dirs {
            let mut files = self.files_in(dir);
            files.sort();
            if files.len() > MAX_ENTRIES_PER_DIR {
                tracing::warn!(dir = %dir.display(), found = files.len(), "only the first {MAX_ENTRIES_PER_DIR} definitions of this directory are read");
                files.truncate(MAX_ENTRIES_PER_DIR);
            }
            found.extend(files.into_iter().map(|file| (dir.clone(), file)));
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let mut entries = Vec::with_capacity(found.len());
        let mut seen = HashMap::with_capacity(found.len());
        for (dir, file) in found {
            let stamp =
                std::fs::metadata(&file).map(|meta| Stamp { len: meta.len(), modified: meta.modified().ok() });
            let Ok(stamp) = stamp else { continue }; // removed since it was listed
            let entry = match cache.get(&file) {
                Some((cached, entry)) if *cached == stamp && entry.dir == dir => entry.clone(),
                _ => {
                    let entry = Arc::new(self.load(&dir, &file, stamp));
                    if let Err(reason) = &entry.parsed {
                        tracing::warn!(path = %file.display(), %reason, "definition not loaded");
                    }
                    entry
                }
            };
            seen.insert(file, (stamp, entry.clone()));
            entries.push(entry);
        }
        // What is no longer there is forgotten.
        *cache = seen;
        entries
    }

    /// The definition files of one directory, unsorted.
    fn files_in(&self, dir: &Path) -> Vec<PathBuf> {
        let Ok(listing) = std::fs::read_dir(dir) else { return Vec::new() };
        listing
            .filter_map(Result::ok)
            .filter_map(|item| {
                let path = item.path();
                match self.layout {
                    Layout::Files { extension } => {
                        (path.extension().is_some_and(|ext| ext == extension) && path.is_file()).then_some(path)
                    }
                    Layout::Folders { file } => {
                        let defining = path.join(file);
                        (path.is_dir() && defining.is_file()).then_some(defining)
                    }
                }
            })
            .collect()
    }

    fn load(&self, dir: &Path, file: &Path, stamp: Stamp) -> Entry<T> {
        let read = if stamp.len > MAX_FILE_BYTES {
            Err(format!("the file is {} bytes, more than the {MAX_FILE_BYTES} a definition may have", stamp.len))
        } else {
            std::fs::read(file).map_err(|error| format!("cannot read it: {error}"))
        };
        let (version, parsed) = match read {
            Ok(bytes) => {
                let version = version_of(&bytes);
                let parsed = String::from_utf8(bytes)
                    .map_err(|_| "the file is not UTF-8 text".to_owned())
                    .and_then(|text| (self.parse)(file, &text));
                (version, parsed)
            }
            Err(reason) => (String::new(), Err(reason)),
        };
        Entry { path: file.to_path_buf(), dir: dir.to_path_buf(), version, parsed }
    }
}

/// A file's version: the first 16 hex digits of the SHA-256 of its bytes.
pub fn version_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_name_is_1_to_64_of_lowercase_letters_digits_and_hyphens() {
        for good in ["a", "code-reviewer", "pdf2", &"x".repeat(64)] {
            assert!(is_definition_name(good), "{good}");
        }
        for bad in ["", "Reviewer", "code_reviewer", "a b", "é", &"x".repeat(65)] {
            assert!(!is_definition_name(bad), "{bad}");
        }
    }

    fn word(_: &Path, text: &str) -> Result<String, String> {
        let text = text.trim();
        if text.contains(' ') { Err(format!("{text:?} is more than one word")) } else { Ok(text.to_owned()) }
    }

    #[test]
    fn files_are_read_in_order_and_again_when_they_change() {
        let root = std::env::temp_dir().join(format!("deputy-catalog-{}", uuid::Uuid::new_v4()));
        let (first, second) = (root.join("first"), root.join("second"));
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        std::fs::write(first.join("b.md"), "beta").unwrap();
        std::fs::write(first.join("a.md"), "alpha").unwrap();
        std::fs::write(first.join("notes.txt"), "ignored").unwrap();
        std::fs::write(second.join("c.md"), "two words").unwrap();
        let catalog = Catalog::new(
            vec![first.clone(), root.join("missing"), second.clone()],
            Layout::Files { extension: "md" },
            word,
        );

        let entries = catalog.entries();
        let parsed: Vec<_> = entries.iter().map(|entry| entry.parsed.clone()).collect();
        assert_eq!(
            parsed,
            [Ok("alpha".into()), Ok("beta".into()), Err("\"two words\" is more than one word".into())]
        );
        assert_eq!(entries[0].version, version_of(b"alpha"));
        assert_eq!(entries[0].version.len(), 16);
        let again = catalog.entries();
        assert!(Arc::ptr_eq(&entries[0], &again[0]), "an unchanged file is not read again");

        std::fs::write(first.join("a.md"), "alpha2").unwrap();
        std::fs::remove_file(first.join("b.md")).unwrap();
        let edited = catalog.entries();
        assert_eq!(edited[0].parsed, Ok("alpha2".into()));
        assert_eq!(edited[0].version, version_of(b"alpha2"));
        assert_eq!(edited.len(), 2, "a removed file is gone");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn folders_hold_their_definition_and_large_files_are_refused() {
        let root = std::env::temp_dir().join(format!("deputy-catalog-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(root.join("pdf")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::create_dir_all(root.join("big")).unwrap();
        std::fs::write(root.join("pdf/SKILL.md"), "pdf").unwrap();
        std::fs::write(root.join("big/SKILL.md"), "x".repeat(MAX_FILE_BYTES as usize + 1)).unwrap();
        let catalog = Catalog::new(vec![root.clone()], Layout::Folders { file: "SKILL.md" }, word);
        let entries = catalog.entries();
        assert_eq!(entries.len(), 2);
        assert!(entries[0].parsed.as_ref().unwrap_err().contains("more than"), "{:?}", entries[0].parsed);
        assert_eq!(entries[1].parsed, Ok("pdf".into()));
        assert_eq!(entries[1].path, root.join("pdf/SKILL.md"));
        std::fs::remove_dir_all(root).unwrap();
    }
}
