//! Where the file tools do their blocking work: a bounded pool with a timeout, and opening that
//! refuses anything but regular files (security review F7).
//!
//! tokio's blocking pool is shared with every store transaction. A read that never returns (a
//! FIFO nobody writes, a hung network mount) used to hold one of its threads for ever, and 600
//! such calls in one step starved every session's store. Now a file tool takes one of
//! [`FS_THREADS`] permits before it runs, keeps it while its thread is busy (even after its
//! caller gave up), and answers an error once [`FS_TIMEOUT`] has passed, so at most
//! `FS_THREADS` threads are ever stuck in file tools and the store always has the rest.
//! FIFOs, devices and sockets are refused before they are opened, and opened with
//! `O_NONBLOCK`, so one swapped in between is refused too instead of blocking the open.
//!
//! Every open here is relative to a directory handle ([`Workspace::dir`], or a directory
//! opened beneath it), never by absolute name: a path swapped for a symlink out of the
//! workspace after it was checked fails to open (security review F13).

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Duration;

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use tokio::sync::Semaphore;

use crate::tools::Workspace;

/// Blocking threads the file tools may use at once.
pub const FS_THREADS: usize = 16;
/// Longest a file tool's blocking work may take (waiting for a thread included).
pub const FS_TIMEOUT: Duration = Duration::from_secs(30);

static FS_PERMITS: Semaphore = Semaphore::const_new(FS_THREADS);

/// Why a file tool's blocking work did not answer.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("the file system did not answer within {}s", .0.as_secs())]
    TimedOut(Duration),
    #[error("the file operation failed: {0}")]
    Failed(String),
}

/// Runs `work` on the file tools' pool, answering within [`FS_TIMEOUT`].
pub async fn run_fs<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, PoolError> {
    run_within(FS_TIMEOUT, work).await
}

/// [`run_fs`] with another time limit.
pub async fn run_within<T: Send + 'static>(
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PoolError> {
    let deadline = tokio::time::Instant::now() + limit;
    let permit = match tokio::time::timeout_at(deadline, FS_PERMITS.acquire()).await {
        Ok(Ok(permit)) => permit,
        Ok(Err(_)) | Err(_) => return Err(PoolError::TimedOut(limit)),
    };
    // The thread keeps the permit until its work returns, however long that takes.
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    });
    match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(join)) => Err(PoolError::Failed(join.to_string())),
        Err(_) => Err(PoolError::TimedOut(limit)),
    }
}

fn not_regular() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a regular file (a FIFO, device or socket): file tools read and write regular files only",
    )
}

/// Refuses what is not a regular file once opened (the path may have changed since it was
/// checked).
fn regular(file: File) -> io::Result<File> {
    if file.metadata()?.is_file() { Ok(file) } else { Err(not_regular()) }
}

/// Opens an existing regular file for reading, `path` relative to `dir`.
pub fn open_in(dir: &Dir, path: &Path) -> io::Result<File> {
    if !dir.metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(libc::O_NONBLOCK);
    regular(dir.open_with(path, &options)?.into_std())
}

/// Opens an existing regular file of the workspace for reading; `path` comes from
/// [`Workspace::resolve_existing`].
pub fn open_for_read(workspace: &Workspace, path: &Path) -> io::Result<File> {
    open_in(workspace.dir(), workspace.beneath(path))
}

/// Opens a regular file of the workspace for writing, creating it if missing; its content is
/// left as is (truncate after the check, with `File::set_len`). `path` comes from
/// [`Workspace::resolve_for_write`].
pub fn open_for_write(workspace: &Workspace, path: &Path) -> io::Result<File> {
    let (dir, path) = (workspace.dir(), workspace.beneath(path));
    if dir.symlink_metadata(path).is_ok_and(|meta| !meta.is_file()) {
        return Err(not_regular());
    }
    // A FIFO without a reader fails at once (ENXIO) instead of blocking the open.
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(false).custom_flags(libc::O_NONBLOCK);
    regular(dir.open_with(path, &options)?.into_std())
}

/// Creates the missing directories of `path` (from [`Workspace::resolve_for_write`]), beneath
/// the workspace's handle.
pub fn create_dirs(workspace: &Workspace, path: &Path) -> io::Result<()> {
    match workspace.beneath(path).parent().filter(|parent| !parent.as_os_str().is_empty()) {
        Some(parent) => workspace.dir().create_dir_all(parent),
        None => Ok(()),
    }
}

/// Replaces the whole content of a regular file (created if missing).
pub fn write_whole(workspace: &Workspace, path: &Path, content: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = open_for_write(workspace, path)?;
    file.set_len(0)?;
    file.write_all(content)
}

/// The whole content of an existing regular file.
pub fn read_whole(workspace: &Workspace, path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_for_read(workspace, path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The entries of a directory of the workspace (`path` from [`Workspace::resolve_existing`]):
/// `(name, is a directory)`, read through a handle opened beneath the root.
pub fn list_in(workspace: &Workspace, path: &Path) -> io::Result<Vec<(String, bool)>> {
    let mut names = Vec::new();
    for entry in workspace.dir().read_dir(workspace.beneath(path))? {
        let entry = entry?;
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        names.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stuck blocking call answers an error at its time limit; its thread keeps its permit
    /// until it returns.
    #[tokio::test]
    async fn f7_stuck_work_answers_an_error_and_keeps_its_permit_until_it_returns() {
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let answer = run_within(Duration::from_millis(50), move || stuck.recv()).await;
        assert!(matches!(answer, Err(PoolError::TimedOut(_))), "{answer:?}");
        release.send(()).unwrap();
        assert_eq!(run_fs(|| 7).await.unwrap(), 7);
    }
}
