//! `command` hooks: the argv runs without a shell, with the clean environment of
//! [`crate::tools::child_env`], as the leader of its own process group. The event goes to its
//! stdin (then stdin closes); its stdout, at most [`MAX_REPLY_BYTES`], is the answer. At its
//! timeout the whole group is killed, as is whatever the hook left running once it exits, so a
//! hook never outlives its call (the shell tool's discipline: [`GroupGuard`]).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::{HookError, MAX_REPLY_BYTES};
use crate::tools::process_group::GroupGuard;
use crate::tools::shell::read_capped;

/// Bytes of stderr kept for the failure message.
const STDERR_BYTES: usize = 2048;

/// Runs `argv` with `input` on its stdin; answers its stdout, or why it gave none.
pub async fn run(argv: &[String], input: &[u8], timeout: Duration) -> Result<Vec<u8>, HookError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(HookError::Failed("empty command".into()));
    };
    let mut command = tokio::process::Command::new(program);
    crate::tools::child_env::clean(&mut command, []);
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| HookError::NotStarted(format!("{program}: {err}")))?;
    let mut group = GroupGuard::new(child.id());
    let finished = CancellationToken::new();
    let stdout = read_capped(child.stdout.take(), MAX_REPLY_BYTES, finished.clone());
    let stderr = read_capped(child.stderr.take(), STDERR_BYTES, finished.clone());
    let stdin = child.stdin.take();
    let feed = async move {
        // A hook may not read its stdin at all: a broken pipe is not an error.
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(input).await;
            let _ = stdin.shutdown().await;
        }
    };
    let wait = async {
        // The leader's exit is noticed without reaping it, so its group id is still its own
        // when the group is killed (security review F18).
        let timed_out = tokio::select! {
            () = group.leader_exited() => false,
            () = tokio::time::sleep(timeout) => true,
        };
        group.kill();
        let status = child.wait().await;
        finished.cancel();
        (timed_out, status)
    };
    let ((), (timed_out, status), (stdout, stdout_total), (stderr, _)) = tokio::join!(feed, wait, stdout, stderr);
    if timed_out {
        return Err(HookError::TimedOut(timeout.as_millis()));
    }
    let status = status.map_err(|err| HookError::Failed(format!("could not wait for {program}: {err}")))?;
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr);
        let stderr = stderr.trim();
        let detail =
            if stderr.is_empty() { String::new() } else { format!(": {}", crate::text::excerpt(stderr, 300)) };
        return Err(HookError::Failed(format!("{program} ended with {status}{detail}")));
    }
    if stdout_total > MAX_REPLY_BYTES {
        return Err(HookError::Failed(format!("answer longer than {MAX_REPLY_BYTES} bytes")));
    }
    Ok(stdout)
}
