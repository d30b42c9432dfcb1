//! The store holds every conversation, the tool outputs the agent read and the settings of its
//! MCP servers, so only its owner may read it (security review F9): directories deputy creates
//! for it are 0700 and a new store file is 0600, whatever the umask. An existing file or
//! directory that others can read is left as the operator made it, with a warning.

use std::fs::{DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Group and other permission bits.
const SHARED_BITS: u32 = 0o077;

pub fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Creates the file 0600 if it does not exist yet; redb then opens it as it is.
pub fn create_file(path: &Path) -> io::Result<()> {
    match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

/// The file is what holds the secrets: a directory others may list but whose store file is
/// 0600 reveals nothing, so only the file's mode is checked.
pub fn warn_if_shared(path: &Path) {
    if let Ok(metadata) = std::fs::metadata(path)
        && is_shared(metadata.mode())
    {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{:o}", metadata.mode() & 0o777),
            "the session store file is readable by other users; chmod go-rwx it"
        );
    }
}

pub fn is_shared(mode: u32) -> bool {
    mode & SHARED_BITS != 0
}
