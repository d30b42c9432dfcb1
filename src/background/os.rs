//! The few libc calls the background server needs, each with its reasoning: who we are
//! (`geteuid`), whether a pid is alive (`kill(pid, 0)`), and detaching a spawned server from
//! the terminal's session (`setsid`).

use std::io;

/// The effective user id of this process: sockets and directories must belong to it.
pub fn current_uid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments, always succeeds and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// Whether a process with this pid exists and is not a zombie waiting to be reaped.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks that the process exists; no memory is involved.
    let exists =
        unsafe { libc::kill(pid, 0) } == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !is_zombie(pid)
}

/// A zombie (state `Z` in `/proc/PID/stat`) has exited; only its parent has not reaped it.
fn is_zombie(pid: libc::pid_t) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command name, which is in parentheses and may contain spaces.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) == Some("Z")
}

/// Makes `command`'s child the leader of a new session (and process group) before it runs, so
/// it does not share the terminal, job control or signals of the process that started it.
pub fn detach(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls setsid(2), which
    // is async-signal-safe and allocates nothing.
    unsafe {
        command.pre_exec(|| if libc::setsid() < 0 { Err(io::Error::last_os_error()) } else { Ok(()) });
    }
}
