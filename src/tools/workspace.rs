//! The directory a session's file tools are confined to.
//!
//! Confinement is decided on canonical paths: `..`, absolute paths and symlinks are all
//! resolved first, and only then compared with the canonical root. A path that resolves
//! outside the root is refused, whatever way it was spelled.

use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Opens a workspace at `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> std::io::Result<Self> {
        let root = std::fs::canonicalize(root)?;
        if !root.is_dir() {
            return Err(std::io::Error::new(std::io::ErrorKind::NotADirectory, "workspace is not a directory"));
        }
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves an existing path given by the model (relative to the root, or absolute) and
    /// checks that it stays inside the workspace.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, String> {
        let joined = self.root.join(path);
        let canonical = std::fs::canonicalize(&joined).map_err(|err| format!("{path}: {err}"))?;
        if canonical.starts_with(&self.root) {
            Ok(canonical)
        } else {
            Err(format!("{path}: outside the workspace ({})", self.root.display()))
        }
    }

    /// Resolves a path the model wants to write, which may not exist yet, and checks that it
    /// stays inside the workspace. The nearest existing ancestor is canonicalized (so a
    /// symlinked directory pointing outside is refused even for a new file below it); the
    /// part that does not exist yet may hold only plain names, no `..`.
    pub fn resolve_for_write(&self, path: &str) -> Result<PathBuf, String> {
        let joined = self.root.join(path);
        let mut existing = joined.as_path();
        let mut missing = Vec::new();
        // `symlink_metadata` sees a dangling symlink as existing: canonicalizing it then fails,
        // which refuses it rather than writing through it to wherever it points.
        while existing.symlink_metadata().is_err() {
            let Some(name) = existing.file_name() else {
                return Err(format!("{path}: not a path inside the workspace"));
            };
            missing.push(name.to_owned());
            existing = existing.parent().ok_or_else(|| format!("{path}: not a path inside the workspace"))?;
        }
        let mut resolved = std::fs::canonicalize(existing).map_err(|err| format!("{path}: {err}"))?;
        if !resolved.starts_with(&self.root) {
            return Err(format!("{path}: outside the workspace ({})", self.root.display()));
        }
        for name in missing.iter().rev() {
            // `file_name` never yields `.` or `..`; a trailing `..` left `existing` on it.
            resolved.push(name);
        }
        let tail = joined.strip_prefix(existing).unwrap_or(Path::new(""));
        if tail.components().any(|part| !matches!(part, Component::Normal(_) | Component::CurDir)) {
            return Err(format!("{path}: `..` is not allowed below a directory that does not exist"));
        }
        Ok(resolved)
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
#[allow(clippy::unwrap_used)]
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
}
