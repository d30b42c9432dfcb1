//! `shell`: runs a command with `sh -c` in the session's workspace. Off unless the session
//! enables it.
//!
//! The command runs in its own process group with stdin closed. When it ends, times out, or
//! the turn is interrupted, the whole group is killed with SIGKILL and the shell is reaped, so
//! no background process (`sleep 300 &`) outlives the call. Each of stdout and stderr keeps
//! at most `max_output_bytes`; the rest is drained and counted, so a chatty command never
//! blocks on a full pipe.
//!
//! Under the operator's sandbox ([`crate::sandbox`]) the command runs through deputy's
//! launcher, which confines itself and then execs `sh`: the same process, so the group and
//! its leader are the same as without it. It may write only in the workspace and the
//! session's private `TMPDIR`.

use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::process_group::GroupGuard;
use super::{ToolOutput, TypedTool, Workspace};
use crate::policy::AuditTag;
use crate::sandbox::{Plan, PrivateTmp, SandboxMode, SandboxPolicy, SandboxSettings};

/// How long to keep reading output after the group was killed: only a process that escaped
/// the group (`setsid`) can still hold the pipes open, and it is not waited for.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

pub struct Shell {
    workspace: Workspace,
    config: ShellConfig,
    /// Every command is logged to `deputy::audit` with the session and its owner.
    audit: AuditTag,
    /// The operator's sandbox: commands run through the launcher when it applies.
    sandbox: SandboxSettings,
    /// The session's private temporary directory (`TMPDIR` of confined commands), made at the
    /// first confined command and removed with the session's tools.
    tmp: OnceLock<PrivateTmp>,
}

impl Shell {
    pub fn new(workspace: Workspace, config: ShellConfig, audit: AuditTag, sandbox: SandboxSettings) -> Self {
        Self { workspace, config, audit, sandbox, tmp: OnceLock::new() }
    }

    /// `sh -c command`, through the sandbox's launcher when it applies.
    fn command(&self, command: &str) -> Result<tokio::process::Command, String> {
        let plan = self.sandbox.plan().map_err(|refusal| format!("POLICY_DENIED: {refusal}"))?;
        if plan != Plan::Confined {
            let mut sh = tokio::process::Command::new("sh");
            super::child_env::clean(&mut sh, []);
            sh.arg("-c").arg(command);
            return Ok(sh);
        }
        let tmp = match self.tmp.get() {
            Some(tmp) => tmp,
            None => {
                let made =
                    PrivateTmp::create().map_err(|err| format!("could not create the sandbox's tmp: {err}"))?;
                self.tmp.get_or_init(|| made)
            }
        };
        let policy = SandboxPolicy {
            writable: vec![self.workspace.root().to_path_buf(), tmp.path().to_path_buf()],
            network: self.sandbox.network,
            required: self.sandbox.mode == SandboxMode::Required,
        };
        let mut sh = crate::sandbox::launcher_command(&policy, "sh", ["-c", command])
            .map_err(|err| format!("could not start the sandbox: {err}"))?;
        super::child_env::clean(&mut sh, []);
        sh.env("TMPDIR", tmp.path());
        Ok(sh)
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The command line, run by `sh -c` in the workspace root.
    command: String,
    /// Time limit in ms; the session's limit is both the default and the maximum.
    timeout_ms: Option<u64>,
}

/// Why the command stopped.
enum Ending {
    Exited(std::io::Result<ExitStatus>),
    TimedOut(u64),
    Interrupted,
}

impl TypedTool for Shell {
    type Args = ShellArgs;
    const NAME: &'static str = "shell";

    fn description(&self) -> String {
        format!(
            "Run a shell command (sh -c) in the workspace root, stdin closed. Answers the exit status, stdout \
             and stderr (each capped at {} bytes). Commands are killed, with everything they started, after \
             timeout_ms (default and maximum {} ms); background processes do not outlive the call.",
            self.config.max_output_bytes, self.config.timeout_ms
        )
    }

    async fn run(&self, args: ShellArgs, cancel: CancellationToken) -> ToolOutput {
        let timeout_ms = args.timeout_ms.unwrap_or(self.config.timeout_ms).clamp(1, self.config.timeout_ms);
        self.audit.shell_command(&args.command);
        self.execute(&args.command, timeout_ms, cancel).await
    }
}

impl Shell {
    async fn execute(&self, command: &str, timeout_ms: u64, cancel: CancellationToken) -> ToolOutput {
        let mut sh = match self.command(command) {
            Ok(sh) => sh,
            Err(message) => return ToolOutput::error(message),
        };
        let mut child = match sh
            .current_dir(self.workspace.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
        {
            Ok(child) => child,
            Err(err) => return ToolOutput::error(format!("could not start sh: {err}")),
        };
        let mut group = GroupGuard::new(child.id());
        let finished = CancellationToken::new();
        let cap = self.config.max_output_bytes;
        let stdout = read_capped(child.stdout.take(), cap, finished.clone());
        let stderr = read_capped(child.stderr.take(), cap, finished.clone());
        let wait = async {
            // The shell's exit is noticed without reaping it, so its group id cannot have been
            // reused when the group is killed (security review F18).
            let ending = tokio::select! {
                () = group.leader_exited() => None,
                () = tokio::time::sleep(Duration::from_millis(timeout_ms)) => Some(Ending::TimedOut(timeout_ms)),
                () = cancel.cancelled() => Some(Ending::Interrupted),
            };
            // Also after a normal exit: whatever the command left running in the background
            // dies with it. Once, and before the shell is reaped.
            group.kill();
            // Reap the shell; the group's other processes are reparented and reaped by init.
            let status = child.wait().await;
            finished.cancel();
            ending.unwrap_or(Ending::Exited(status))
        };
        let (ending, (stdout, stdout_total), (stderr, stderr_total)) = tokio::join!(wait, stdout, stderr);
        let (header, is_error) = match ending {
            Ending::Exited(Ok(status)) => match status.code() {
                Some(code) => (format!("exit code {code}"), code != 0),
                None => (format!("terminated by a signal ({status})"), true),
            },
            Ending::Exited(Err(err)) => (format!("could not wait for the command: {err}"), true),
            Ending::TimedOut(ms) => {
                (format!("killed: timed out after {ms} ms (with its whole process group)"), true)
            }
            Ending::Interrupted => ("killed: the turn was interrupted (with its whole process group)".into(), true),
        };
        let mut text = header;
        for (name, kept, total) in [("stdout", stdout, stdout_total), ("stderr", stderr, stderr_total)] {
            if total == 0 {
                continue;
            }
            text.push_str(&format!("\n--- {name} ---\n"));
            text.push_str(&String::from_utf8_lossy(&kept));
            if total > kept.len() {
                text.push_str(&format!("\n[{name} truncated: {} of {total} bytes shown]", kept.len()));
            }
        }
        if is_error { ToolOutput::error(text) } else { ToolOutput::ok(text) }
    }
}

/// Reads `reader` to its end, keeping the first `cap` bytes and counting all of them. Stops
/// [`DRAIN_GRACE`] after `finished` fires even if the pipe is still open.
pub async fn read_capped(
    reader: Option<impl AsyncRead + Unpin>,
    cap: usize,
    finished: CancellationToken,
) -> (Vec<u8>, usize) {
    let mut kept = Vec::new();
    let mut total = 0;
    let Some(mut reader) = reader else { return (kept, total) };
    let grace = async {
        finished.cancelled().await;
        tokio::time::sleep(DRAIN_GRACE).await;
    };
    tokio::pin!(grace);
    let mut buf = vec![0u8; 8192];
    loop {
        tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n;
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            },
            () = &mut grace => break,
        }
    }
    (kept, total)
}

/// Limits of the shell tool of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShellConfig {
    /// Default and maximum time of one command, in ms.
    pub timeout_ms: u64,
    /// Bytes kept of each of stdout and stderr.
    pub max_output_bytes: usize,
}
