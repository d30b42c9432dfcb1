//! Landlock and seccomp, applied by the launcher to itself just before `execvp`.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use super::{NetworkPolicy, SandboxPolicy};

/// The Landlock ABI whose rights deputy asks for; the crate's best-effort mode drops what an
/// older kernel lacks (the ruleset is then only partially enforced).
const TARGET_ABI: ABI = ABI::V6;

/// Devices a shell needs to write (`> /dev/null`, a terminal).
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts"];

/// The kernel's Landlock ABI version, `None` without Landlock.
pub fn landlock_abi() -> Option<i64> {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute and size 0 only asks for
    // the ABI version; no memory is read or written.
    let version =
        unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, 1u32) };
    (version > 0).then_some(version)
}

/// Confines this process (and what it execs) by `policy`.
pub fn confine(policy: &SandboxPolicy) -> Result<(), String> {
    let status = landlock(policy).map_err(|err| format!("sandbox: Landlock: {err}"))?;
    if policy.required && status == RulesetStatus::NotEnforced {
        return Err("sandbox: the kernel enforces no Landlock rule and the sandbox is required".to_owned());
    }
    seccomp(policy.network).map_err(|err| format!("sandbox: seccomp: {err}"))
}

fn landlock(policy: &SandboxPolicy) -> Result<RulesetStatus, landlock::RulesetError> {
    let abi = TARGET_ABI;
    let mut ruleset =
        Ruleset::default().set_compatibility(CompatLevel::BestEffort).handle_access(AccessFs::from_all(abi))?;
    if policy.network == NetworkPolicy::Deny {
        // Handled without any rule: every TCP bind and connect is refused (ABI ≥ 4).
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    // ABI ≥ 6: no abstract unix socket or signal out of the sandbox's domain.
    ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    let status = ruleset
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(&policy.writable, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(WRITABLE_DEVICES, AccessFs::from_all(abi)))?
        .restrict_self()?;
    Ok(status.ruleset)
}

/// Syscalls refused whatever the network policy: they reach other processes' memory or the
/// kernel in ways Landlock does not see (io_uring can open sockets without `socket(2)`).
const DENIED_SYSCALLS: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_kexec_load,
];

fn seccomp(network: NetworkPolicy) -> Result<(), seccompiler::Error> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED_SYSCALLS.iter().map(|syscall| (*syscall, Vec::new())).collect();
    if network == NetworkPolicy::Deny {
        // socket(domain, …) with any domain but AF_UNIX fails with EPERM.
        let not_unix = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?;
        rules.insert(libc::SYS_socket, vec![SeccompRule::new(vec![not_unix])?]);
    }
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)?;
    let program: BpfProgram = filter.try_into()?;
    seccompiler::apply_filter(&program)
}

/// Replaces this process with `program[0]` (searched in `PATH`), arguments `program[1..]`.
/// Returns only on failure.
pub fn execvp(program: &[OsString]) -> String {
    let args: Result<Vec<CString>, _> = program.iter().map(|arg| CString::new(arg.as_bytes())).collect();
    let Ok(args) = args else { return "sandbox: an argument holds a NUL byte".to_owned() };
    let Some(file) = args.first() else { return "sandbox: no program".to_owned() };
    let mut pointers: Vec<*const libc::c_char> = args.iter().map(|arg| arg.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: `file` and every pointer are NUL-terminated strings that outlive the call, and
    // the array ends with a null pointer.
    unsafe { libc::execvp(file.as_ptr(), pointers.as_ptr()) };
    format!("sandbox: cannot run {}: {}", file.to_string_lossy(), std::io::Error::last_os_error())
}
