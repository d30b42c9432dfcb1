//! The sandbox of the programs a session starts: shell commands and stdio MCP servers.
//!
//! On Linux the kernel confines them: Landlock for the filesystem (reads anywhere, writes only
//! in the session's workspace, a private temporary directory and a few devices) and, when the
//! network is denied, for TCP bind/connect (ABI ≥ 4); seccomp refuses every socket that is not
//! `AF_UNIX` and a few syscalls that reach past Landlock (ptrace, io_uring, bpf…). See
//! docs/SECURITY.md, *The sandbox*, for what this covers and what it does not.
//!
//! The confinement is applied in the child, never in deputy: the caller starts deputy's own
//! binary as a launcher (`deputy sandbox-exec --policy JSON -- PROGRAM ARGS…`, see
//! [`launcher_command`]), which restricts itself ([`exec`]) and then `execvp`s the program. A
//! `pre_exec` closure must not allocate, which applying Landlock does.
//!
//! This module decides nothing about sessions or tools: [`SandboxSettings::plan`] says whether
//! a program is confined, runs unconfined (`best_effort` where the kernel lacks Landlock, with
//! a warning logged once), or is refused (`required`), and the tools act on that.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

#[cfg(target_os = "linux")]
mod linux;
mod private_tmp;

pub use private_tmp::PrivateTmp;

/// The hidden subcommand of the launcher (handled by `main` before anything else runs).
pub const LAUNCHER_SUBCOMMAND: &str = "sandbox-exec";

/// **Test seam.** When this variable is set (to anything non-empty) in deputy's environment,
/// deputy behaves as if the kernel had no Landlock: `required` refuses and `best_effort` runs
/// unconfined. It can only make deputy stricter or unconfined-with-a-warning, never weaker
/// than `best_effort` already is on such a kernel. Used by `tests/suite/sandbox.rs`.
pub const PRETEND_NO_LANDLOCK_ENV: &str = "DEPUTY_TEST_PRETEND_NO_LANDLOCK";

/// `[sandbox] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// Where the kernel lacks Landlock, the shell is refused (`POLICY_DENIED`). The default of
    /// `serve --http`.
    Required,
    /// Where the kernel lacks Landlock, programs run unconfined, with a warning. The default of
    /// stdio.
    BestEffort,
    /// Never confined.
    Off,
}

/// `[sandbox] network`: whether a confined program may open internet sockets.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPolicy {
    #[default]
    Deny,
    Allow,
}

/// `sandbox` of `session_create`: a session may narrow the operator's sandbox, never widen it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxRequest {
    /// `"deny"`: the shell gets no network.
    #[serde(default)]
    pub network: Option<NetworkPolicy>,
}

/// The operator's sandbox, resolved: the config file's `[sandbox]` over the transport's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxSettings {
    pub mode: SandboxMode,
    pub network: NetworkPolicy,
}

impl Default for SandboxSettings {
    /// Off: what code that builds tools without a config (unit tests, embedders) gets.
    fn default() -> Self {
        Self::off()
    }
}

/// What [`SandboxSettings::plan`] decided for one program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Start it through the launcher.
    Confined,
    /// Start it as it is; the reason when the sandbox wanted to apply but could not.
    Unconfined(Option<String>),
}

/// `required` and the kernel cannot confine: the program must not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SandboxRefusal(pub String);

impl SandboxSettings {
    pub fn off() -> Self {
        Self { mode: SandboxMode::Off, network: NetworkPolicy::Allow }
    }

    /// What this sandbox does on this kernel.
    pub fn plan(&self) -> Result<Plan, SandboxRefusal> {
        if self.mode == SandboxMode::Off {
            return Ok(Plan::Unconfined(None));
        }
        match unavailable_reason() {
            None => Ok(Plan::Confined),
            Some(reason) if self.mode == SandboxMode::Required => Err(SandboxRefusal(format!(
                "the sandbox is required ([sandbox] mode = \"required\") but {reason}: the shell and \
                 stdio MCP servers cannot be confined, so they are refused"
            ))),
            Some(reason) => {
                warn_unconfined_once(&reason);
                Ok(Plan::Unconfined(Some(reason)))
            }
        }
    }

    /// Why programs run unconfined under these settings, if they do although the sandbox is
    /// on (`best_effort` without Landlock). Shown in `session_read`.
    pub fn unconfined_reason(&self) -> Option<String> {
        match self.plan() {
            Ok(Plan::Unconfined(reason)) => reason,
            Ok(Plan::Confined) | Err(_) => None,
        }
    }
}

fn warn_unconfined_once(reason: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "sandbox: {reason}; with [sandbox] mode = \"best_effort\" the shell and stdio MCP servers run \
             UNCONFINED"
        );
    }
}

/// Why this kernel cannot confine a program (`None`: it can).
fn unavailable_reason() -> Option<String> {
    if std::env::var_os(PRETEND_NO_LANDLOCK_ENV).is_some_and(|value| !value.is_empty()) {
        return Some(format!("the kernel has no Landlock (pretended: {PRETEND_NO_LANDLOCK_ENV} is set)"));
    }
    #[cfg(target_os = "linux")]
    {
        match linux::landlock_abi() {
            Some(_) => None,
            None => Some("the kernel has no Landlock (not built in, or not enabled at boot)".to_owned()),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Some("deputy's sandbox exists only on Linux".to_owned())
    }
}

/// What the launcher applies to itself before it runs the program: sent as JSON on its
/// command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// Directories (and what is beneath them) the program may write. Everything else is
    /// read-only, except a few devices (`/dev/null`, `/dev/tty`…).
    pub writable: Vec<PathBuf>,
    pub network: NetworkPolicy,
    /// `true`: if the kernel enforces nothing, the launcher fails rather than run the program.
    pub required: bool,
}

/// The launcher's command: deputy's own binary running `program args…` under `policy`.
/// Fails only if deputy cannot name its own executable.
pub fn launcher_command(
    policy: &SandboxPolicy,
    program: impl Into<OsString>,
    args: impl IntoIterator<Item = impl Into<OsString>>,
) -> std::io::Result<tokio::process::Command> {
    let exe = std::env::current_exe()?;
    let json = serde_json::to_string(policy).map_err(std::io::Error::other)?;
    let mut command = tokio::process::Command::new(exe);
    command.arg(LAUNCHER_SUBCOMMAND).arg("--policy").arg(json).arg("--").arg(program.into());
    command.args(args.into_iter().map(Into::into));
    Ok(command)
}

/// Exit status of the launcher when it could not confine itself or run the program.
pub const LAUNCHER_FAILED: u8 = 126;

/// The launcher: `args` are what follows [`LAUNCHER_SUBCOMMAND`] (`--policy JSON -- PROGRAM
/// ARGS…`). Confines this process and replaces it with the program; returns only on failure,
/// with the message to print.
pub fn exec(args: &[OsString]) -> String {
    let (policy, program) = match parse_launcher_args(args) {
        Ok(parsed) => parsed,
        Err(message) => return message,
    };
    #[cfg(target_os = "linux")]
    {
        if let Err(message) = linux::confine(&policy) {
            return message;
        }
        linux::execvp(program)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (policy, program);
        "deputy's sandbox exists only on Linux".to_owned()
    }
}

fn parse_launcher_args(args: &[OsString]) -> Result<(SandboxPolicy, &[OsString]), String> {
    let usage = || format!("usage: deputy {LAUNCHER_SUBCOMMAND} --policy JSON -- PROGRAM [ARGS...]");
    match args {
        [flag, json, separator, program @ ..] if flag == "--policy" && separator == "--" && !program.is_empty() => {
            let json = json.to_str().ok_or_else(usage)?;
            let policy = serde_json::from_str(json).map_err(|err| format!("--policy: {err}"))?;
            Ok((policy, program))
        }
        _ => Err(usage()),
    }
}

/// The canonical form of `dir` if it exists (Landlock rules are opened by path, and a
/// workspace is already canonical).
pub fn writable_dir(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_arguments_round_trip_the_policy() {
        let policy = SandboxPolicy { writable: vec!["/w".into()], network: NetworkPolicy::Deny, required: true };
        let json = serde_json::to_string(&policy).unwrap();
        let args: Vec<OsString> = ["--policy", &json, "--", "sh", "-c", "true"].map(OsString::from).to_vec();
        let (parsed, program) = parse_launcher_args(&args).unwrap();
        assert_eq!(parsed, policy);
        assert_eq!(program, &args[3..]);
        assert!(parse_launcher_args(&args[..3]).is_err());
    }

    /// This suite's machines have Landlock (ABI 7); the probe must see it.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_probe_finds_landlock_here() {
        assert!(linux::landlock_abi().is_some_and(|abi| abi >= 1));
    }

    #[test]
    fn off_never_confines_and_never_refuses() {
        assert_eq!(SandboxSettings::off().plan(), Ok(Plan::Unconfined(None)));
    }
}
