//! Killing a child's whole process group: the one piece of `unsafe` (a `kill(2)` call) that
//! the shell tool and stdio MCP servers need, kept here with its reasoning, and [`GroupGuard`],
//! the one way either of them kills a group.
//!
//! A command runs as the leader of its own process group (`process_group(0)`), so every
//! process it starts (`cmd &`, pipelines, subshells) is in that group unless it deliberately
//! leaves with `setsid`. Signalling `-pgid` reaches all of them at once.

/// Sends SIGKILL to every process of group `pgid`. Returns whether any process received it
/// (false once the group is empty).
#[cfg(unix)]
pub fn kill_group(pgid: u32) -> bool {
    signal_group(pgid, libc::SIGKILL)
}

/// Whether any process of group `pgid` still exists (signal 0 only checks). Zombies waiting for
/// a parent to reap them count as existing.
#[cfg(unix)]
pub fn group_exists(pgid: u32) -> bool {
    signal_group(pgid, 0)
}

#[cfg(unix)]
fn signal_group(pgid: u32, signal: libc::c_int) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return false };
    if pgid <= 1 {
        // -1 would signal every process we may signal; 0 our own group. Never.
        return false;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses a group.
    unsafe { libc::kill(-pgid, signal) == 0 }
}

/// Ensures a group is killed whatever way the code holding it ends, including the future
/// being dropped mid-way (which is how `ToolScope` abandons a tool on interrupt) and the
/// owner being dropped (a stopped MCP server).
#[derive(Debug)]
pub struct GroupGuard {
    pgid: Option<u32>,
}

impl GroupGuard {
    /// Guards group `pgid`, the pid of a child spawned with `process_group(0)`; `None` (a child
    /// without a pid, or no child at all) guards nothing.
    pub fn new(pgid: Option<u32>) -> Self {
        Self { pgid }
    }

    /// The guarded group.
    pub fn pgid(&self) -> Option<u32> {
        self.pgid
    }

    pub fn kill(&self) {
        #[cfg(unix)]
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Ties a spawned process group to deputy's life, so nothing outlives deputy even when it is
/// SIGKILLed (security review F15) and its own guards never run. Linux only.
///
/// - The child gets `PR_SET_PDEATHSIG(SIGKILL)`: the kernel kills it when deputy does. (The
///   signal follows the *thread* that spawned it; MCP servers are spawned from tokio's worker
///   threads, which live as long as deputy.)
/// - Its own children do not inherit that, so a watcher joins the group: a `sh` forked before
///   the child's `exec`, blocked reading a pipe whose only writer is deputy. When deputy dies
///   the kernel closes the pipe, the read returns, and the watcher kills the whole group,
///   itself included. Dropping the returned [`DeathWatch`] does the same on purpose.
#[cfg(target_os = "linux")]
pub fn die_with_deputy(command: &mut tokio::process::Command) -> std::io::Result<DeathWatch> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let (read_fd, write_fd) = (read_end.as_raw_fd(), write_end.as_raw_fd());
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: prctl, fork, close, dup2, open, execv and _exit are, and it allocates
    // nothing (the argv array is on the stack, its strings are static).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            match libc::fork() {
                -1 => Err(std::io::Error::last_os_error()),
                0 => {
                    // The watcher: stdin is the pipe, nothing else of the child is kept open
                    // (holding its stdout would hide the server's exit from deputy).
                    libc::close(write_fd);
                    libc::dup2(read_fd, 0);
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                    libc::dup2(null, 1);
                    libc::dup2(null, 2);
                    let argv =
                        [c"sh".as_ptr(), c"-c".as_ptr(), c"read _line; kill -KILL 0".as_ptr(), std::ptr::null()];
                    libc::execv(c"/bin/sh".as_ptr(), argv.as_ptr());
                    libc::_exit(127)
                }
                _ => Ok(()),
            }
        });
    }
    Ok(DeathWatch { _write_end: write_end, read_end: Some(read_end) })
}

/// deputy's end of a [`die_with_deputy`] pipe: while it is open, the group lives.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub struct DeathWatch {
    _write_end: std::os::fd::OwnedFd,
    /// Kept until the child is spawned (it inherits it), then closed by [`DeathWatch::spawned`].
    read_end: Option<std::os::fd::OwnedFd>,
}

#[cfg(target_os = "linux")]
impl DeathWatch {
    /// Closes deputy's copy of the read end once the child has been spawned.
    pub fn spawned(&mut self) {
        self.read_end = None;
    }
}
