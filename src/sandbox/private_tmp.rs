//! A private temporary directory: the one place outside the workspace a confined program may
//! write. One per session (per MCP server process), mode 0700, removed when dropped.

use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct PrivateTmp {
    dir: PathBuf,
}

impl PrivateTmp {
    /// Creates `deputy-sandbox-XXXXXXXX` (0700) in the system's temporary directory.
    pub fn create() -> std::io::Result<Self> {
        let base = std::env::temp_dir();
        let mut last_error = None;
        for _ in 0..16 {
            let dir = base.join(format!("deputy-sandbox-{:016x}", fastrand::u64(..)));
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&dir) {
                Ok(()) => return Ok(Self { dir: super::writable_dir(&dir) }),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last_error.unwrap_or_else(|| std::io::Error::other("no free name")))
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
