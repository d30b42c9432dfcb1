//! Killing a child's whole process group: the one piece of `unsafe` (a `kill(2)` call) that
//! the shell tool and stdio MCP servers need, kept here with its reasoning, and [`GroupGuard`],
//! the one way either of them kills a group.
//!
//! A command runs as the leader of its own process group (`process_group(0)`), so every
//! process it starts (`cmd &`, pipelines, subshells) is in that group unless it deliberately
//! leaves with `setsid`. Signalling `-pgid` reaches all of them at once.
//!
//! A group id is only safe to signal while its leader has not been reaped: a zombie leader
//! keeps its pid, so no new process or group can take that id. Once the leader is waited for
//! and the group's last member is gone, the id is free and may name a stranger's group
//! (security review F18). [`GroupGuard`] therefore signals the group only while it can prove
//! the leader unreaped — through a pidfd on Linux (`pidfd_send_signal(fd, 0)` fails with
//! `ESRCH` exactly once the process is reaped, and the fd can never name another process),
//! through `waitid(WNOWAIT)` elsewhere — or while a [`DeathWatch`] it holds keeps a watcher
//! process in the group (which pins the id whatever happened to the leader), and at most once.
//! Its owners detect the leader's exit without reaping it ([`GroupGuard::leader_exited`]), kill
//! the group, and only then reap.

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
/// owner being dropped (a stopped MCP server) — but never after its leader was reaped, and
/// never twice (see the module doc).
#[derive(Debug)]
pub struct GroupGuard {
    pgid: Option<u32>,
    /// Still to be killed: cleared by the first [`GroupGuard::kill`].
    armed: bool,
    /// A pidfd of the leader, opened before anyone could wait for it.
    #[cfg(target_os = "linux")]
    pidfd: Option<std::os::fd::OwnedFd>,
    /// The group's death watcher, if it has one: a member that stays until this is dropped.
    #[cfg(target_os = "linux")]
    watch: Option<DeathWatch>,
}

impl GroupGuard {
    /// Guards group `pgid`, the pid of a child spawned with `process_group(0)` that nobody has
    /// waited for yet; `None` (a child without a pid, or no child at all) guards nothing.
    pub fn new(pgid: Option<u32>) -> Self {
        Self {
            pgid,
            armed: pgid.is_some(),
            #[cfg(target_os = "linux")]
            pidfd: pgid.and_then(pidfd::open),
            #[cfg(target_os = "linux")]
            watch: None,
        }
    }

    /// Keeps the group's [`DeathWatch`] (after [`DeathWatch::spawned`]): while the guard holds
    /// it, its watcher is a member of the group, so the group id stays the group's even after
    /// the leader was reaped (an MCP server's leader is reaped by rmcp, whenever its transport
    /// closes). Dropped by [`Self::kill`].
    #[cfg(target_os = "linux")]
    pub fn hold(&mut self, watch: DeathWatch) {
        self.watch = Some(watch);
    }

    /// The guarded group.
    pub fn pgid(&self) -> Option<u32> {
        self.pgid
    }

    /// Kills the group, once, if its leader has not been reaped; afterwards the guard is
    /// disarmed (its `Drop` does nothing). Owners call it after [`Self::leader_exited`] and
    /// before they reap the leader, so background processes die with it.
    pub fn kill(&mut self) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        #[cfg(unix)]
        if let Some(pgid) = self.pgid
            && self.group_pinned(pgid)
        {
            kill_group(pgid);
        }
        // The watcher's pipe closes: it kills what is left of its own group, from inside it.
        #[cfg(target_os = "linux")]
        drop(self.watch.take());
    }

    /// Whether the group id is still certainly the group's: its watcher is held, or its leader
    /// still holds its pid (running, or a zombie nobody has waited for).
    #[cfg(unix)]
    fn group_pinned(&self, pid: u32) -> bool {
        #[cfg(target_os = "linux")]
        {
            if self.watch.is_some() {
                return true;
            }
            if let Some(fd) = &self.pidfd {
                return pidfd::unreaped(fd);
            }
        }
        waitid_unreaped(pid)
    }

    /// Resolves once the leader has exited, without reaping it (so [`Self::kill`] still may
    /// signal its group). Resolves at once for a guard of nothing.
    pub async fn leader_exited(&self) {
        let Some(pid) = self.pgid else { return };
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.pidfd
            && pidfd::exited(fd).await.is_ok()
        {
            return;
        }
        // No pidfd (another system, a kernel before 5.3): ask waitid, without reaping.
        while !waitid_exited(pid) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`: `Some(exited)` while `pid` is an
/// unreaped child of this process, `None` once it has been reaped (or is not our child).
#[cfg(unix)]
fn waitid_state(pid: u32) -> Option<bool> {
    let id = libc::id_t::from(pid);
    // SAFETY: an all-zero siginfo_t is a valid value; waitid only writes into it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves the child unreaped.
    let result = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
    if result != 0 {
        return None;
    }
    // SAFETY: waitid succeeded, so si_pid is set (0 when the child has not exited yet).
    Some(unsafe { info.si_pid() } != 0)
}

#[cfg(unix)]
fn waitid_unreaped(pid: u32) -> bool {
    waitid_state(pid).is_some()
}

#[cfg(unix)]
fn waitid_exited(pid: u32) -> bool {
    waitid_state(pid).is_none_or(|exited| exited)
}

/// The leader's pidfd: a handle on that one process that no pid reuse can redirect.
#[cfg(target_os = "linux")]
mod pidfd {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    /// `pidfd_open(pid)`; `None` if the kernel has no pidfds or the process is gone.
    pub fn open(pid: u32) -> Option<OwnedFd> {
        let pid = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = RawFd::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: the descriptor was just created and is owned by nothing else.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Whether the process still holds its pid: signal 0 through the pidfd succeeds for a
    /// running or zombie process and fails (`ESRCH`) once it has been reaped.
    pub fn unreaped(fd: &OwnedFd) -> bool {
        // SAFETY: pidfd_send_signal with signal 0 and no siginfo only checks; `fd` is open.
        let result = unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), 0, std::ptr::null::<libc::siginfo_t>(), 0)
        };
        result == 0
    }

    /// A pidfd polls readable once its process has exited (reaped or not).
    pub async fn exited(fd: &OwnedFd) -> std::io::Result<()> {
        struct Borrowed(RawFd);
        impl AsRawFd for Borrowed {
            fn as_raw_fd(&self) -> RawFd {
                self.0
            }
        }
        let interest = tokio::io::Interest::READABLE;
        // SAFETY: the descriptor stays open while it is registered: `fd` is borrowed for this
        // whole call, and the registration is dropped before it returns.
        let readable =
            unsafe { tokio::io::unix::AsyncFd::register_with_interest(Borrowed(fd.as_raw_fd()), interest)? };
        let _ready = readable.readable().await?;
        Ok(())
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

#[cfg(all(test, unix))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    async fn gone(pgid: u32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while group_exists(pgid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        !group_exists(pgid)
    }

    /// Security review F18: the shell's group was killed after its leader was reaped, and again
    /// by the guard's `Drop` up to 500 ms later, when the id may name another group. Now the
    /// leader's exit is seen without reaping it, the group is killed once while the leader
    /// pins its id, and a guard whose leader was reaped signals nothing.
    #[tokio::test]
    async fn f18_a_group_is_signalled_once_and_only_while_its_leader_is_unreaped() {
        let mut shell =
            tokio::process::Command::new("sh").args(["-c", "sleep 30 & exit 0"]).process_group(0).spawn().unwrap();
        let mut guard = GroupGuard::new(shell.id());
        let pgid = guard.pgid().unwrap();
        guard.leader_exited().await;
        assert!(guard.group_pinned(pgid), "an exited leader nobody waited for still pins its group");
        assert!(group_exists(pgid), "its background sleep is still running");
        guard.kill();
        assert!(!guard.armed, "disarmed: its Drop signals nothing");
        shell.wait().await.unwrap();
        assert!(gone(pgid).await, "the background process died with the group");

        let mut reaped = tokio::process::Command::new("true").process_group(0).spawn().unwrap();
        let mut guard = GroupGuard::new(reaped.id());
        let pgid = guard.pgid().unwrap();
        reaped.wait().await.unwrap();
        assert!(!guard.group_pinned(pgid), "once reaped, the id may be anyone's");
        guard.kill(); // signals nothing
    }
}
