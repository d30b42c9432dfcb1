//! The directory a session's file tools are confined to.
//!
//! Confinement is decided on canonical paths: `..`, absolute paths and symlinks are all
//! resolved first, and only then compared with the canonical root. A path that resolves
//! outside the root is refused, whatever way it was spelled.

use std::path::{Path, PathBuf};

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
}
