//! The builtin tools and the shell through a [`ToolScope`], as the agent loop calls them:
//! confinement, match rules, caps, and process-group handling.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::builtin::OUTPUT_CAP_BYTES;
use super::process_group::group_exists;
use super::{BuiltinTool, CallbackTool, ShellConfig, ToolConfig, ToolOutput, ToolScope};
use crate::policy::AuditTag;

fn scope(root: &Path, shell: Option<ShellConfig>) -> ToolScope {
    let config = ToolConfig {
        workspace: Some(root.to_path_buf()),
        builtins: BuiltinTool::ALL.to_vec(),
        shell,
        ..ToolConfig::none()
    };
    config
        .scope(None, &AuditTag::local(crate::ids::SessionId::new()), crate::sandbox::SandboxSettings::off())
        .unwrap()
}

async fn call(scope: &ToolScope, name: &str, input: serde_json::Value) -> ToolOutput {
    scope.call(name, input, CancellationToken::new()).await
}

/// A workspace, a directory outside it holding `secret.txt`, and symlinks from inside to it.
struct Fixture {
    workspace: tempfile::TempDir,
    outside: tempfile::TempDir,
    scope: ToolScope,
}

fn fixture() -> Fixture {
    let workspace = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "inside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), workspace.path().join("out_dir")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), workspace.path().join("out_file")).unwrap();
    let scope = scope(workspace.path(), None);
    Fixture { workspace, outside, scope }
}

fn outside_entries(fixture: &Fixture) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture.outside.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn reads_cannot_leave_the_workspace() {
    let fx = fixture();
    let secret = fx.outside.path().join("secret.txt");
    let escapes = [
        "../secret.txt".to_owned(),
        format!("../{}/secret.txt", fx.outside.path().file_name().unwrap().to_string_lossy()),
        secret.to_string_lossy().into_owned(),
        "out_file".to_owned(),
        "out_dir/secret.txt".to_owned(),
    ];
    for path in &escapes {
        let output = call(&fx.scope, "read_file", json!({"path": path})).await;
        assert!(output.is_error && !output.content.contains("secret\n"), "{path}: {output:?}");
        assert_ne!(output.content, "secret", "{path}");
    }
    let listed = call(&fx.scope, "list_dir", json!({"path": "out_dir"})).await;
    assert!(listed.is_error && listed.content.contains("outside the workspace"), "{listed:?}");
    let searched = call(&fx.scope, "search", json!({"pattern": "secret", "path": "out_dir"})).await;
    assert!(searched.is_error, "{searched:?}");
    assert_eq!(call(&fx.scope, "read_file", json!({"path": "notes.txt"})).await, ToolOutput::ok("inside\n"));
}

#[tokio::test]
async fn writes_and_edits_cannot_leave_the_workspace() {
    let fx = fixture();
    let secret = fx.outside.path().join("secret.txt");
    let escapes = [
        "../planted.txt".to_owned(),
        "new_dir/../../planted.txt".to_owned(),
        fx.outside.path().join("planted.txt").to_string_lossy().into_owned(),
        "out_file".to_owned(),
        "out_dir/planted.txt".to_owned(),
        "out_dir/deeper/planted.txt".to_owned(),
        secret.to_string_lossy().into_owned(),
    ];
    for path in &escapes {
        let output = call(&fx.scope, "write_file", json!({"path": path, "content": "pwned"})).await;
        assert!(output.is_error, "{path}: {output:?}");
        let output =
            call(&fx.scope, "edit_file", json!({"path": path, "old_text": "secret", "new_text": "pwned"})).await;
        assert!(output.is_error, "{path}: {output:?}");
    }
    assert_eq!(outside_entries(&fx), ["secret.txt"]);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
    assert!(!fx.workspace.path().join("new_dir").exists(), "a refused write creates no directory");
}

#[tokio::test]
async fn huge_files_are_read_capped_and_written_whole() {
    let fx = fixture();
    let line = "x".repeat(99) + "\n";
    let huge = line.repeat(100_000); // 10 MB
    let written = call(&fx.scope, "write_file", json!({"path": "deep/er/huge.txt", "content": huge})).await;
    assert!(!written.is_error && written.content.contains("10000000 bytes"), "{written:?}");
    assert_eq!(std::fs::read(fx.workspace.path().join("deep/er/huge.txt")).unwrap().len(), 10_000_000);

    let read = call(&fx.scope, "read_file", json!({"path": "deep/er/huge.txt"})).await;
    assert!(!read.is_error && read.content.len() < OUTPUT_CAP_BYTES + 200, "{}", read.content.len());
    assert!(read.content.contains("[output truncated at"), "{}", &read.content[read.content.len() - 200..]);
    let range =
        call(&fx.scope, "read_file", json!({"path": "deep/er/huge.txt", "start_line": 99_999, "line_count": 5}))
            .await;
    assert_eq!(range, ToolOutput::ok(line.repeat(2)));

    // One line longer than the cap, without a newline, is cut on a character boundary.
    let wide = "é".repeat(OUTPUT_CAP_BYTES);
    std::fs::write(fx.workspace.path().join("wide.txt"), &wide).unwrap();
    let read = call(&fx.scope, "read_file", json!({"path": "wide.txt"})).await;
    assert!(!read.is_error && read.content.starts_with("éé") && read.content.contains("truncated"));
    std::fs::write(fx.workspace.path().join("binary.bin"), [0xff, 0xfe, 0x00, 0x80]).unwrap();
    assert!(call(&fx.scope, "read_file", json!({"path": "binary.bin"})).await.is_error);
}

#[tokio::test]
async fn write_file_overwrites_and_reports() {
    let fx = fixture();
    let first = call(&fx.scope, "write_file", json!({"path": "notes.txt", "content": "replaced"})).await;
    assert_eq!(first, ToolOutput::ok("wrote 8 bytes to notes.txt"));
    assert_eq!(std::fs::read_to_string(fx.workspace.path().join("notes.txt")).unwrap(), "replaced");
    let bad = call(&fx.scope, "write_file", json!({"path": "a.txt"})).await;
    assert!(bad.is_error && bad.content.contains("invalid arguments"), "{bad:?}");
}

#[tokio::test]
async fn edit_file_replaces_exactly_one_match_unless_told_otherwise() {
    let fx = fixture();
    let path = fx.workspace.path().join("code.txt");
    std::fs::write(&path, "let a = 1;\nlet b = 1;\nlet c = 2;\n").unwrap();
    let edit = |old: &str, new: &str, all: bool| json!({"path": "code.txt", "old_text": old, "new_text": new, "replace_all": all});

    let none = call(&fx.scope, "edit_file", edit("let d", "x", false)).await;
    assert!(none.is_error && none.content.contains("not found"), "{none:?}");
    let many = call(&fx.scope, "edit_file", edit("= 1;", "= 9;", false)).await;
    assert!(many.is_error && many.content.contains("occurs 2 times"), "{many:?}");
    let empty = call(&fx.scope, "edit_file", edit("", "x", false)).await;
    assert!(empty.is_error, "{empty:?}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "let a = 1;\nlet b = 1;\nlet c = 2;\n",
        "failed edits change nothing"
    );

    let once = call(&fx.scope, "edit_file", edit("let c = 2;", "let c = 3;", false)).await;
    assert_eq!(once, ToolOutput::ok("replaced 1 occurrence in code.txt"));
    let all = call(&fx.scope, "edit_file", edit("= 1;", "= 9;", true)).await;
    assert_eq!(all, ToolOutput::ok("replaced 2 occurrences in code.txt"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "let a = 9;\nlet b = 9;\nlet c = 3;\n");
    let missing = call(&fx.scope, "edit_file", json!({"path": "nope.txt", "old_text": "a", "new_text": "b"})).await;
    assert!(missing.is_error);
}

#[tokio::test]
async fn search_finds_lines_by_regex_and_glob_within_caps() {
    let fx = fixture();
    let root = fx.workspace.path();
    std::fs::create_dir_all(root.join("src/nested")).unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {}\n// TODO: one\n").unwrap();
    std::fs::write(root.join("src/nested/lib.rs"), "pub fn lib() {}\n// TODO: two\n").unwrap();
    std::fs::write(root.join("src/notes.md"), "TODO: three\n").unwrap();
    std::fs::write(root.join(".git/config"), "TODO: hidden\n").unwrap();
    std::fs::write(root.join("blob.bin"), b"TODO\0binary").unwrap();
    let many: String = (0..500).map(|n| format!("match {n}\n")).collect();
    std::fs::write(root.join("many.txt"), many).unwrap();

    let todo = call(&fx.scope, "search", json!({"pattern": r"TODO: \w+"})).await;
    assert_eq!(
        todo,
        ToolOutput::ok(
            "src/main.rs:2: // TODO: one\nsrc/nested/lib.rs:2: // TODO: two\nsrc/notes.md:1: TODO: three"
        )
    );
    let rust = call(&fx.scope, "search", json!({"pattern": "TODO", "glob": "*.rs"})).await;
    assert_eq!(rust.content.lines().count(), 2, "{rust:?}");
    let nested = call(&fx.scope, "search", json!({"pattern": "fn", "glob": "src/**/lib.rs"})).await;
    assert_eq!(nested, ToolOutput::ok("src/nested/lib.rs:1: pub fn lib() {}"));
    let under = call(&fx.scope, "search", json!({"pattern": "TODO", "path": "src/nested"})).await;
    assert_eq!(under, ToolOutput::ok("src/nested/lib.rs:2: // TODO: two"));

    let capped = call(&fx.scope, "search", json!({"pattern": "^match", "max_results": 10})).await;
    assert_eq!(capped.content.lines().filter(|line| line.starts_with("many.txt:")).count(), 10);
    assert!(capped.content.contains("[search stopped: 10 results shown"), "{capped:?}");
    let default_cap = call(&fx.scope, "search", json!({"pattern": "^match"})).await;
    assert_eq!(default_cap.content.lines().filter(|line| line.starts_with("many.txt:")).count(), 100);

    let nothing = call(&fx.scope, "search", json!({"pattern": "no such text"})).await;
    assert!(!nothing.is_error && nothing.content.starts_with("no matches"), "{nothing:?}");
    let invalid = call(&fx.scope, "search", json!({"pattern": "(unclosed"})).await;
    assert!(invalid.is_error && invalid.content.contains("invalid pattern"), "{invalid:?}");
}

fn shell_config(timeout_ms: u64) -> Option<ShellConfig> {
    Some(ShellConfig { timeout_ms, max_output_bytes: 1024 })
}

#[tokio::test]
async fn the_shell_is_absent_unless_enabled() {
    let fx = fixture();
    let output = call(&fx.scope, "shell", json!({"command": "touch pwned"})).await;
    assert!(output.is_error && output.content.contains("unknown tool"), "{output:?}");
    assert!(!fx.workspace.path().join("pwned").exists());
    assert!(fx.scope.specs().iter().all(|spec| spec.name != "shell"));
}

#[tokio::test]
async fn the_shell_reports_exit_code_and_both_streams_from_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let scope = scope(dir.path(), shell_config(10_000));
    let ok = call(&scope, "shell", json!({"command": "pwd; echo oops >&2"})).await;
    let root = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        ok,
        ToolOutput::ok(format!("exit code 0\n--- stdout ---\n{}\n\n--- stderr ---\noops\n", root.display()))
    );
    let failed = call(&scope, "shell", json!({"command": "exit 3"})).await;
    assert_eq!(failed, ToolOutput::error("exit code 3"));
    let stdin = call(&scope, "shell", json!({"command": "cat; echo done"})).await;
    assert_eq!(stdin, ToolOutput::ok("exit code 0\n--- stdout ---\ndone\n"), "stdin is closed");

    let flood = call(&scope, "shell", json!({"command": "yes | head -c 100000"})).await;
    assert!(
        !flood.is_error && flood.content.contains("[stdout truncated: 1024 of 100000 bytes shown]"),
        "{flood:?}"
    );
    assert!(flood.content.len() < 1200);
}

/// Whether a process of group `pgid` is still alive (zombies waiting to be reaped do not count).
fn group_alive(pgid: u32) -> bool {
    live_in_group(pgid) > 0
}

/// How many processes of group `pgid` are alive (zombies waiting to be reaped do not count).
fn live_in_group(pgid: u32) -> usize {
    if !group_exists(pgid) {
        return 0;
    }
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
            let Some((_, rest)) = stat.rsplit_once(')') else { return false };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z"
        })
        .count()
}

/// Waits a little for the group to be gone (the kernel delivers SIGKILL asynchronously).
async fn assert_group_gone(pgid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while group_alive(pgid) {
        assert!(Instant::now() < deadline, "process group {pgid} still has live processes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const SPAWN_BACKGROUND: &str = "echo $$ > pgid; sleep 300 & sleep 300 & wait";

fn pgid_of(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("pgid")).unwrap().trim().parse().unwrap()
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let scope = scope(dir.path(), shell_config(60_000));
    let started = Instant::now();
    let output = call(&scope, "shell", json!({"command": SPAWN_BACKGROUND, "timeout_ms": 500})).await;
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(output.is_error && output.content.contains("killed: timed out after 500 ms"), "{output:?}");
    assert_group_gone(pgid_of(dir.path())).await;

    // The session's limit caps what a call asks for.
    let capped = scope_with_limit(dir.path(), 300);
    let output = call(&capped, "shell", json!({"command": "sleep 30", "timeout_ms": 100_000})).await;
    assert!(output.content.contains("timed out after 300 ms"), "{output:?}");
}

fn scope_with_limit(dir: &Path, timeout_ms: u64) -> ToolScope {
    scope(dir, shell_config(timeout_ms))
}

#[tokio::test]
async fn an_interrupt_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let scope = scope(dir.path(), shell_config(60_000));
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    let pgid_file = dir.path().join("pgid");
    let watcher = tokio::spawn(async move {
        while !std::fs::read_to_string(&pgid_file).is_ok_and(|text| text.ends_with('\n')) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The shell and both background sleeps: the interrupt must find the whole group forked.
        let pgid = pgid_of(pgid_file.parent().unwrap());
        let deadline = Instant::now() + Duration::from_secs(5);
        while live_in_group(pgid) < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let alive_before = live_in_group(pgid);
        canceller.cancel();
        alive_before
    });
    let started = Instant::now();
    let output = scope.call("shell", json!({"command": SPAWN_BACKGROUND}), cancel).await;
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(output.is_error, "{output:?}");
    let alive_before = watcher.await.unwrap();
    assert!(
        alive_before >= 3,
        "the shell and its two background sleeps were alive before the interrupt: {alive_before}"
    );
    assert_group_gone(pgid_of(dir.path())).await;
}

#[tokio::test]
async fn background_processes_do_not_outlive_a_finished_command() {
    let dir = tempfile::tempdir().unwrap();
    let scope = scope(dir.path(), shell_config(10_000));
    let output =
        call(&scope, "shell", json!({"command": "echo $$ > pgid; (sleep 300 >/dev/null 2>&1 &); echo started"}))
            .await;
    assert_eq!(output, ToolOutput::ok("exit code 0\n--- stdout ---\nstarted\n"));
    assert_group_gone(pgid_of(dir.path())).await;
}

/// The declarations the model sees, pinned byte for byte (one compact JSON spec per line, in
/// the scope's name order, a callback declaration among them): how a tool builds its spec may
/// change, what is sent must not.
#[test]
fn tool_specs_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let callback = CallbackTool {
        name: "notify".into(),
        description: "Tell the caller.".into(),
        input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
    };
    let config = ToolConfig {
        workspace: Some(dir.path().to_path_buf()),
        builtins: BuiltinTool::ALL.to_vec(),
        shell: Some(ShellConfig { timeout_ms: 60_000, max_output_bytes: 65_536 }),
        callbacks: vec![callback],
        ..ToolConfig::none()
    };
    let scope = config
        .scope(None, &AuditTag::local(crate::ids::SessionId::new()), crate::sandbox::SandboxSettings::off())
        .unwrap();
    let sent: Vec<String> = scope.specs().iter().map(|spec| serde_json::to_string(spec).unwrap()).collect();
    let pinned: Vec<&str> = include_str!("testdata/tool_specs.jsonl").lines().collect();
    assert_eq!(sent, pinned);
}

#[tokio::test]
async fn callbacks_are_declared_among_the_tools_but_never_run_here() {
    let dir = tempfile::tempdir().unwrap();
    let callback =
        CallbackTool { name: "notify".into(), description: String::new(), input_schema: json!({"type": "object"}) };
    let scope = scope(dir.path(), None).with_callbacks(std::slice::from_ref(&callback));
    let names: Vec<String> = scope.specs().into_iter().map(|spec| spec.name).collect();
    assert_eq!(names, ["edit_file", "list_dir", "notify", "read_file", "search", "write_file"]);
    assert!(scope.is_callback("notify") && !scope.is_callback("read_file"));
    let output = call(&scope, "notify", json!({})).await;
    assert_eq!(output, ToolOutput::error("callback tools are executed by the caller, not by deputy"));
    let unknown = call(&scope, "nope", json!({})).await;
    assert!(unknown.content.contains(r#"available tools: ["edit_file", "list_dir", "notify", "#), "{unknown:?}");
}

/// Security review F7: `read_file` on a FIFO blocked a thread of the shared blocking pool for
/// ever; 600 of them in one step starved every session's store. FIFOs (and devices, sockets)
/// are refused before they are opened, at once, and the tools keep working.
#[tokio::test]
async fn f7_file_tools_refuse_fifos_at_once_and_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    std::fs::write(dir.path().join("plain.txt"), "plain needle\n").unwrap();
    let scope = scope(dir.path(), None);

    // More calls than the file tools' pool has threads: none may block.
    let calls =
        (0..3 * super::builtin::blocking::FS_THREADS).map(|_| call(&scope, "read_file", json!({"path": "pipe"})));
    let answers = tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(calls)).await.unwrap();
    for answer in answers {
        assert!(answer.is_error && answer.content.contains("not a regular file"), "{}", answer.content);
    }
    for (tool, input) in [
        ("edit_file", json!({"path": "pipe", "old_text": "a", "new_text": "b"})),
        ("write_file", json!({"path": "pipe", "content": "x"})),
    ] {
        let answer = tokio::time::timeout(Duration::from_secs(20), call(&scope, tool, input)).await.unwrap();
        assert!(answer.is_error && answer.content.contains("not a regular file"), "{tool}: {}", answer.content);
    }
    let searched = call(&scope, "search", json!({"pattern": "needle"})).await;
    assert!(!searched.is_error && searched.content.contains("plain.txt:1"), "{}", searched.content);
    let read = call(&scope, "read_file", json!({"path": "plain.txt"})).await;
    assert_eq!(read.content, "plain needle\n");
}

/// The concurrent writer of security review F13: a thread running `flip` over and over until
/// dropped (or 10 s pass).
struct Flipper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    flips: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flipper {
    /// Starts flipping; returns once the first flip is done, so the path exists.
    fn start(mut flip: impl FnMut() + Send + 'static) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flips = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (stopped, count) = (stop.clone(), flips.clone());
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !stopped.load(Relaxed) && Instant::now() < deadline {
                flip();
                count.fetch_add(1, Relaxed);
            }
        });
        let started = Instant::now();
        while flips.load(Relaxed) == 0 && started.elapsed() < Duration::from_secs(10) {
            std::thread::yield_now();
        }
        Self { stop, flips, thread: Some(thread) }
    }

    fn flips(&self) -> usize {
        self.flips.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the race has run long enough: `calls` tool calls made against at least as many
    /// flips (up to 2,000), or 3 s (a loaded machine).
    fn enough(&self, calls: usize, started: Instant) -> bool {
        (calls >= 2_000 && self.flips() >= 2_000.min(calls)) || started.elapsed() > Duration::from_secs(3)
    }
}

impl Drop for Flipper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

/// Security review F13: `read_file` checked the canonical path, then reopened it by name, so a
/// file swapped for a symlink to outside in between was read (2 of 2,000 reads). Now the open
/// is beneath the workspace's directory handle: the swapped-in symlink fails to open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f13_a_symlink_swapped_mid_call_does_not_escape_reads() {
    let fx = fixture();
    let secret = fx.outside.path().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-OUTSIDE").unwrap();
    let root = fx.workspace.path().to_path_buf();
    let flipper = Flipper::start(move || {
        // Atomic replacements of `flip`: a regular file inside, then a symlink out.
        std::fs::write(root.join("flip.file"), "inside").unwrap();
        std::fs::rename(root.join("flip.file"), root.join("flip")).unwrap();
        let _ = std::fs::remove_file(root.join("flip.link"));
        std::os::unix::fs::symlink(&secret, root.join("flip.link")).unwrap();
        std::fs::rename(root.join("flip.link"), root.join("flip")).unwrap();
    });
    let (mut inside, started) = (0, Instant::now());
    for calls in 0.. {
        if flipper.enough(calls, started) {
            break;
        }
        for tool in ["read_file", "edit_file"] {
            let input = json!({"path": "flip", "old_text": "TOP", "new_text": "pwned"});
            let input = if tool == "read_file" { json!({"path": "flip"}) } else { input };
            let output = call(&fx.scope, tool, input).await;
            assert!(!output.content.contains("TOP-SECRET"), "{tool} escaped: {output:?}");
            inside += usize::from(output.content == "inside");
        }
    }
    assert!(flipper.flips() > 1, "the path never flipped: the race was not exercised");
    drop(flipper);
    assert!(inside > 0, "no read ever saw the inside file: the race was not exercised");
    assert_eq!(std::fs::read_to_string(fx.outside.path().join("secret.txt")).unwrap(), "TOP-SECRET-OUTSIDE");
}

/// The write side of F13: `dir` flips between a directory and a symlink to a directory outside
/// while `write_file("dir/…")` runs; the review saw 88 files created outside. None may be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f13_a_directory_swapped_for_a_symlink_mid_call_does_not_escape_writes() {
    let fx = fixture();
    let (root, outside) = (fx.workspace.path().to_path_buf(), fx.outside.path().to_path_buf());
    let flipper = Flipper::start(move || {
        let target = root.join("dir");
        let _ = std::fs::remove_file(&target).or_else(|_| std::fs::remove_dir_all(&target));
        let _ = std::fs::create_dir(&target);
        std::thread::yield_now();
        let _ = std::fs::remove_file(&target).or_else(|_| std::fs::remove_dir_all(&target));
        let _ = std::os::unix::fs::symlink(&outside, &target);
    });
    let started = Instant::now();
    let mut written = 0;
    for n in 0.. {
        if flipper.enough(n, started) {
            break;
        }
        let output =
            call(&fx.scope, "write_file", json!({"path": format!("dir/pwn{n}.txt"), "content": "x"})).await;
        written += usize::from(!output.is_error);
    }
    assert!(flipper.flips() > 1, "the directory never flipped: the race was not exercised");
    drop(flipper);
    assert_eq!(outside_entries(&fx), ["secret.txt"], "{written} writes reported success");
}
