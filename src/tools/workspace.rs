//! The directory a session's file tools are confined to.
//!
//! Confinement has two steps. The *check* is decided on canonical paths: `..`, absolute paths
//! and symlinks are all resolved first, and only then compared with the canonical root, so a
//! path that resolves outside the root is refused with a clear error, whatever way it was
//! spelled. The *use* never reopens that checked path by name: the file tools open it relative
//! to a directory handle of the root ([`Workspace::dir`], a `cap_std::fs::Dir` opened once),
//! and cap-std resolves every component beneath that handle (`openat2` with `RESOLVE_BENEATH`
//! on Linux, a checked component walk elsewhere). A symlink or directory another process swaps
//! in between the check and the use (security review F13) therefore cannot lead the open
//! outside the workspace: it fails instead.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// Why a workspace could not be opened or a path in it resolved. The model reads the texts of
/// the path errors (a tool answers them), so each names the path as the model gave it.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The root could not be canonicalized (it does not exist, or cannot be read).
    #[error(transparent)]
    Open(std::io::Error),
    /// The root exists but is not a directory.
    #[error("workspace is not a directory")]
    NotADirectory,
    /// The path (or, for a write, its nearest existing ancestor) could not be canonicalized.
    #[error("{path}: {source}")]
    Unresolvable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The path resolves outside the root.
    #[error("{path}: outside the workspace ({})", root.display())]
    Outside { path: String, root: PathBuf },
    /// The path has no existing ancestor below the filesystem root.
    #[error("{path}: not a path inside the workspace")]
    NotAPath { path: String },
    /// The part of a path to write that does not exist yet climbs with `..`.
    #[error("{path}: `..` is not allowed below a directory that does not exist")]
    ParentOfMissing { path: String },
}

#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    /// The root, opened once: every file tool opens beneath it.
    dir: Arc<Dir>,
}

impl Workspace {
    /// Opens a workspace at `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let root = std::fs::canonicalize(root).map_err(WorkspaceError::Open)?;
        if !root.is_dir() {
            return Err(WorkspaceError::NotADirectory);
        }
        let dir = Dir::open_ambient_dir(&root, ambient_authority()).map_err(WorkspaceError::Open)?;
        Ok(Self { root, dir: Arc::new(dir) })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The handle of the root that file tools open paths beneath (see the module doc).
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// A path returned by [`Self::resolve_existing`] or [`Self::resolve_for_write`], relative
    /// to the root, to open beneath [`Self::dir`]; `.` for the root itself.
    pub fn beneath<'a>(&self, resolved: &'a Path) -> &'a Path {
        match resolved.strip_prefix(&self.root) {
            Ok(relative) if relative.as_os_str().is_empty() => Path::new("."),
            Ok(relative) => relative,
            // Not from the resolvers: left absolute, which cap-std refuses to open.
            Err(_) => resolved,
        }
    }

    /// Resolves an existing path given by the model (relative to the root, or absolute) and
    /// checks that it stays inside the workspace.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, WorkspaceError> {
        let joined = self.root.join(path);
        let canonical = std::fs::canonicalize(&joined)
            .map_err(|source| WorkspaceError::Unresolvable { path: path.to_owned(), source })?;
        if canonical.starts_with(&self.root) { Ok(canonical) } else { Err(self.outside(path)) }
    }

    /// Resolves a path the model wants to write, which may not exist yet, and checks that it
    /// stays inside the workspace. The nearest existing ancestor is canonicalized (so a
    /// symlinked directory pointing outside is refused even for a new file below it); the
    /// part that does not exist yet may hold only plain names, no `..`.
    pub fn resolve_for_write(&self, path: &str) -> Result<PathBuf, WorkspaceError> {
        let joined = self.root.join(path);
        let mut existing = joined.as_path();
        let mut missing = Vec::new();
        // `symlink_metadata` sees a dangling symlink as existing: canonicalizing it then fails,
        // which refuses it rather than writing through it to wherever it points.
        while existing.symlink_metadata().is_err() {
            let not_a_path = || WorkspaceError::NotAPath { path: path.to_owned() };
            let name = existing.file_name().ok_or_else(not_a_path)?;
            missing.push(name.to_owned());
            existing = existing.parent().ok_or_else(not_a_path)?;
        }
        let mut resolved = std::fs::canonicalize(existing)
            .map_err(|source| WorkspaceError::Unresolvable { path: path.to_owned(), source })?;
        if !resolved.starts_with(&self.root) {
            return Err(self.outside(path));
        }
        for name in missing.iter().rev() {
            // `file_name` never yields `.` or `..`; a trailing `..` left `existing` on it.
            resolved.push(name);
        }
        let tail = joined.strip_prefix(existing).unwrap_or(Path::new(""));
        if tail.components().any(|part| !matches!(part, Component::Normal(_) | Component::CurDir)) {
            return Err(WorkspaceError::ParentOfMissing { path: path.to_owned() });
        }
        Ok(resolved)
    }

    fn outside(&self, path: &str) -> WorkspaceError {
        WorkspaceError::Outside { path: path.to_owned(), root: self.root.clone() }
    }

    /// The path as shown to the model: relative to the root.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_everything_that_leaves_the_root() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.txt"), "a").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(outside.path(), dir.path().join("escape")).unwrap();
        let ws = Workspace::new(dir.path()).unwrap();

        assert!(ws.resolve_existing("sub/a.txt").is_ok());
        assert!(ws.resolve_existing("sub/../sub/a.txt").is_ok());
        assert!(ws.resolve_existing("../").is_err());
        let absolute = outside.path().join("secret.txt");
        assert!(ws.resolve_existing(absolute.to_str().unwrap()).is_err());
        #[cfg(unix)]
        assert!(ws.resolve_existing("escape/secret.txt").is_err());
        assert!(ws.resolve_existing("missing.txt").is_err());
    }

    #[test]
    fn new_paths_must_resolve_inside_the_root() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(outside.path(), dir.path().join("escape")).unwrap();
            std::os::unix::fs::symlink(outside.path().join("nowhere"), dir.path().join("dangling")).unwrap();
        }
        let ws = Workspace::new(dir.path()).unwrap();
        let root = ws.root().to_path_buf();

        assert_eq!(ws.resolve_for_write("new.txt").unwrap(), root.join("new.txt"));
        assert_eq!(ws.resolve_for_write("a/b/c.txt").unwrap(), root.join("a/b/c.txt"));
        assert_eq!(ws.resolve_for_write("sub/../x.txt").unwrap(), root.join("x.txt"));
        assert_eq!(ws.resolve_for_write("./sub/./y.txt").unwrap(), root.join("sub/y.txt"));
        assert!(ws.resolve_for_write("../x.txt").is_err());
        assert!(ws.resolve_for_write("sub/../../x.txt").is_err());
        assert!(ws.resolve_for_write("new/../../x.txt").is_err());
        assert!(ws.resolve_for_write("new/..").is_err());
        let absolute = outside.path().join("x.txt");
        assert!(ws.resolve_for_write(absolute.to_str().unwrap()).is_err());
        assert!(ws.resolve_for_write(root.join("abs.txt").to_str().unwrap()).is_ok());
        #[cfg(unix)]
        {
            assert!(ws.resolve_for_write("escape/new.txt").is_err());
            assert!(ws.resolve_for_write("escape/deeper/new.txt").is_err());
            assert!(ws.resolve_for_write("dangling").is_err());
        }
    }

    #[test]
    fn errors_read_as_before_naming_the_path_as_given() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let root = ws.root().display();
        let not_found = std::io::Error::from_raw_os_error(2);

        assert_eq!(
            ws.resolve_existing("../").unwrap_err().to_string(),
            format!("../: outside the workspace ({root})")
        );
        assert_eq!(
            ws.resolve_existing("missing.txt").unwrap_err().to_string(),
            format!("missing.txt: {not_found}")
        );
        assert_eq!(
            ws.resolve_for_write("../x.txt").unwrap_err().to_string(),
            format!("../x.txt: outside the workspace ({root})")
        );
        assert_eq!(
            ws.resolve_for_write("new/..").unwrap_err().to_string(),
            "new/..: not a path inside the workspace"
        );
        assert_eq!(
            Workspace::new(dir.path().join("file")).unwrap_err().to_string(),
            "workspace is not a directory"
        );
        assert_eq!(Workspace::new(dir.path().join("missing")).unwrap_err().to_string(), not_found.to_string());
    }
}
