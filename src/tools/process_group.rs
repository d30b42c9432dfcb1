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
