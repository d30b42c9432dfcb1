//! The per-store background server, end to end: real `deputy serve` processes attached to the
//! background server they start, driven by the rmcp client over their stdio, their models a
//! mock LLM. Each test has its own `XDG_RUNTIME_DIR` (so its own socket) and store, and kills
//! whatever background server is left when it ends.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ClientLifecycleMode;
use rmcp::RoleClient;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common::deputy::{RecordingClient, connect};
use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{MockLlm, MockResponse, anthropic, openai};
use crate::common::scenarios::cancelled_turn;

/// Far longer than anything here takes; only a hang reaches it.
const LIMIT: Duration = Duration::from_secs(30);

/// One store, one runtime directory, one mock LLM; clients come and go.
struct Background {
    mock: MockLlm,
    /// `XDG_RUNTIME_DIR` of every client (and so of the server): the socket and pid file.
    runtime: TempDir,
    /// The store, its log, and an empty config home.
    home: TempDir,
    /// The directory [`Background::who`]'s clients start in.
    project: TempDir,
}

/// A `deputy serve` process attached to the background server, with an rmcp client on its stdio.
struct Client {
    service: RunningService<RoleClient, RecordingClient>,
    child: tokio::process::Child,
}

/// Who a client is: where it starts, its default model, its credentials.
struct Who<'a> {
    dir: &'a Path,
    model: &'a str,
    key: &'a str,
}

impl Background {
    async fn new() -> Self {
        Self {
            mock: MockLlm::start().await,
            runtime: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
        }
    }

    /// The usual client: in the project directory, on the mock's `anthropic:claude-test`.
    fn who(&self) -> Who<'_> {
        Who { dir: self.project.path(), model: "anthropic:claude-test", key: "k" }
    }

    fn store(&self) -> PathBuf {
        self.home.path().join("sessions.redb")
    }

    /// `deputy ARGS` as a client in `who.dir`: no `--workspace`, so the directory is its
    /// workspace; no `--no-daemon`.
    fn command(&self, who: &Who<'_>, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
        command
            .args(args)
            .current_dir(who.dir)
            .env("XDG_RUNTIME_DIR", self.runtime.path())
            .env("DEPUTY_STORE", self.store())
            .env("XDG_CONFIG_HOME", self.home.path())
            .env("DEPUTY_MODEL", who.model)
            .env("ANTHROPIC_API_KEY", who.key)
            .env("ANTHROPIC_BASE_URL", format!("{}/anthropic", self.mock.base_url()))
            .env("OPENAI_API_KEY", who.key)
            .env("OPENAI_BASE_URL", format!("{}/v1", self.mock.base_url()))
            .env_remove("DEPUTY_WORKSPACE")
            .env_remove("DEPUTY_CONFIG")
            .env("RUST_LOG", std::env::var("DEPUTY_TEST_LOG").unwrap_or_else(|_| "warn,deputy=info".into()));
        command
    }

    /// `deputy serve EXTRA…` attached (starting the server if none runs), `initialize` done.
    async fn client(&self, who: &Who<'_>, extra: &[&str]) -> Client {
        let mut args = vec!["serve"];
        args.extend(extra);
        let (service, child) =
            connect(&RecordingClient::default(), self.command(who, &args), ClientLifecycleMode::Initialize).await;
        Client { service, child }
    }

    fn pid_files(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(self.runtime.path().join("deputy")) else { return Vec::new() };
        entries
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "pid"))
            .collect()
    }

    /// The pid of the running background server, from its pid file.
    fn server_pid(&self) -> u32 {
        let files = self.pid_files();
        assert_eq!(files.len(), 1, "one background server per store: {files:?}");
        std::fs::read_to_string(&files[0]).unwrap().trim().parse().unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("sessions.redb.log")).unwrap_or_default()
    }
}

/// Whether `pid` is a live (not zombie) background server of ours.
fn is_background_server(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let zombie = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) == Some("Z");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !zombie && String::from_utf8_lossy(&cmdline).contains("background-server")
}

fn kill_9(pid: u32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

/// Waits for a process that is not our child to be gone. Polling is the only way to watch
/// a process of another parent; the deadline keeps a failure from hanging.
async fn wait_gone(pid: u32, within: Duration) {
    let deadline = Instant::now() + within;
    while is_background_server(pid) {
        assert!(Instant::now() < deadline, "background server {pid} still runs after {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A test never leaves a background server behind, whatever happened.
impl Drop for Background {
    fn drop(&mut self) {
        for file in self.pid_files() {
            let pid = std::fs::read_to_string(&file).ok().and_then(|text| text.trim().parse().ok());
            if let Some(pid) = pid.filter(|pid| is_background_server(*pid)) {
                kill_9(pid);
            }
        }
    }
}

impl Client {
    async fn ok(&self, tool: &str, arguments: Value) -> Value {
        crate::common::deputy::ok_tool(&self.service, tool, arguments).await
    }

    /// Closes stdin as an MCP client does and waits for a clean exit.
    async fn stop(self) {
        let Self { service, mut child } = self;
        service.cancel().await.unwrap();
        let status = tokio::time::timeout(LIMIT, child.wait()).await.expect("the client exits").unwrap();
        assert!(status.success(), "deputy serve exited with {status:?}");
    }
}

#[tokio::test]
async fn two_clients_from_two_projects_keep_their_own_defaults_and_share_the_sessions() {
    let bg = Background::new().await;
    let (project_a, project_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(project_a.path().join("only-in-a.txt"), "a").unwrap();
    std::fs::write(project_b.path().join("only-in-b.txt"), "b").unwrap();
    let a = Who { dir: project_a.path(), model: "anthropic:model-a", key: "key-a" };
    let b = Who { dir: project_b.path(), model: "openai:model-b", key: "key-b" };
    // Started at the same moment: both may start a server; the store elects one.
    let (client_a, client_b) = tokio::join!(bg.client(&a, &[]), bg.client(&b, &[]));
    bg.server_pid();

    bg.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_a", "list_dir", json!({}))])));
    bg.mock.push(MockResponse::sse(anthropic::text(&["A done"])));
    let session_a = id_of(&client_a.ok("session_create", json!({"prompt": "list your workspace"})).await);
    bg.mock.push(MockResponse::sse(openai::tool_calls(None, &[("call_b", "list_dir", json!({}))])));
    bg.mock.push(MockResponse::sse(openai::text(&["B done"])));
    let session_b = id_of(&client_b.ok("session_create", json!({"prompt": "list your workspace"})).await);

    let requests = bg.mock.requests();
    assert_eq!(requests.len(), 4);
    // A's turns: its model, its provider, its key, its directory.
    assert_eq!(
        (requests[0].path.as_str(), &requests[0].body["model"]),
        ("/anthropic/v1/messages", &json!("model-a"))
    );
    assert_eq!(requests[0].header("x-api-key"), Some("key-a"));
    let seen_by_a = requests[1].body.to_string();
    assert!(seen_by_a.contains("only-in-a.txt") && !seen_by_a.contains("only-in-b.txt"), "{seen_by_a}");
    // B's: its own.
    assert_eq!(
        (requests[2].path.as_str(), &requests[2].body["model"]),
        ("/v1/chat/completions", &json!("model-b"))
    );
    assert_eq!(requests[2].header("authorization"), Some("Bearer key-b"));
    let seen_by_b = requests[3].body.to_string();
    assert!(seen_by_b.contains("only-in-b.txt") && !seen_by_b.contains("only-in-a.txt"), "{seen_by_b}");

    // One store: each sees both sessions, with the defaults of the client that created them.
    for client in [&client_a, &client_b] {
        let list = client.ok("session_list", json!({})).await;
        assert_eq!(list["total"], 2, "{list}");
        let model_a = client.ok("session_read", json!({"session_id": session_a})).await["state"]["model"].clone();
        let model_b = client.ok("session_read", json!({"session_id": session_b})).await["state"]["model"].clone();
        assert_eq!((model_a, model_b), (json!("anthropic:model-a"), json!("openai:model-b")));
    }
    client_a.stop().await;
    client_b.stop().await;
}

#[tokio::test]
async fn a_client_killed_mid_turn_leaves_the_turn_to_the_next_client() {
    let bg = Background::new().await;
    let who = bg.who();
    let gate = bg.mock.push_held(MockResponse::sse(anthropic::text(&["finished", " anyway"])), 1);

    let mut first = bg.client(&who, &[]).await;
    // The call is in flight, its turn paused inside the model's answer, when the client dies.
    let peer = first.service.peer().clone();
    let arguments = json!({"prompt": "a long job", "wait_ms": 600_000}).as_object().unwrap().clone();
    let call = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("session_create").with_arguments(arguments)).await
    });
    bg.mock.wait_for_requests(1).await;
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    assert!(call.await.unwrap().is_err(), "the killed client never got an answer");

    let second = bg.client(&who, &[]).await;
    let list = second.ok("session_list", json!({})).await;
    assert_eq!(list["sessions"][0]["status"], "running", "{list}");
    let id = id_of(&list["sessions"][0]);
    gate.open();
    let read = second.ok("session_read", json!({"session_id": id, "wait_ms": 30_000})).await;
    assert_eq!(read["state"]["status"], "idle", "{read}");
    assert_eq!(read["state"]["last_turn"]["status"], "completed", "{read}");
    assert_eq!(read["state"]["last_turn"]["text"], "finished anyway");
    second.stop().await;
}

#[tokio::test]
async fn a_cancelled_call_still_interrupts_its_turn_through_the_relay() {
    let bg = Background::new().await;
    let client = bg.client(&bg.who(), &[]).await;
    bg.mock.push(MockResponse::sse(anthropic::text(&["ready"])));
    let id = id_of(&client.ok("session_create", json!({"prompt": "hi"})).await);

    cancelled_turn(&bg.mock, client.service.peer(), &id, "long", "user pressed stop").await;

    let read = client.ok("session_read", json!({"session_id": id, "wait_ms": 30_000})).await;
    assert_eq!(read["state"]["last_turn"]["status"], "cancelled", "{read}");
    client.stop().await;
}

#[tokio::test]
async fn five_parallel_one_call_processes_all_succeed() {
    let bg = Background::new().await;
    let who = bg.who();
    for _ in 0..5 {
        bg.mock.push(MockResponse::sse(anthropic::text(&["done"])));
    }
    // The LangChain pattern: a process per tool call, several calls at once, no server yet.
    let (bg, who) = (&bg, &who);
    let calls = (0..5).map(|i| async move {
        let client = bg.client(who, &[]).await;
        let created = client.ok("session_create", json!({"prompt": format!("call {i}")})).await;
        client.stop().await;
        created
    });
    let created = futures::future::join_all(calls).await;
    assert!(created.iter().all(|result| result["status"] == "completed"), "{created:?}");

    let status = bg.command(who, &["background", "status"]).output().await.unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && text.contains(&format!("pid {}", bg.server_pid())), "{text}");
    let last = bg.client(who, &[]).await;
    assert_eq!(last.ok("session_list", json!({})).await["total"], 5);
    last.stop().await;

    // `deputy background stop` returns once the server is gone.
    let pid = bg.server_pid();
    let stop = bg.command(who, &["background", "stop"]).output().await.unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    wait_gone(pid, Duration::from_secs(5)).await;
    let status = bg.command(who, &["background", "status"]).output().await.unwrap();
    assert_eq!(status.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&status.stdout).contains("running: no"));
}

#[tokio::test]
async fn the_server_exits_when_idle_but_never_while_a_turn_runs() {
    let bg = Background::new().await;
    let who = bg.who();
    let gate = bg.mock.push_held(MockResponse::sse(anthropic::text(&["late", " answer"])), 1);

    let client = bg.client(&who, &["--idle-exit-secs", "1"]).await;
    let created = client.ok("session_create", json!({"prompt": "slow", "wait_ms": 100})).await;
    assert_eq!(created["status"], "running");
    let id = id_of(&created);
    client.stop().await;
    let pid = bg.server_pid();

    // No client, but a turn runs: the server stays well past its idle timeout. (Nothing
    // happens here to wait for: this is time passing.)
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(is_background_server(pid), "the server exited with a turn running:\n{}", bg.log());

    // The turn ends; with no client and no turn the server exits after the timeout.
    gate.open();
    wait_gone(pid, Duration::from_secs(10)).await;
    assert!(bg.log().contains("idle: no client and no running turn"), "{}", bg.log());
    assert!(bg.pid_files().is_empty(), "the pid file goes with the server");

    // The finished turn was saved: the next client (and a new server) has it.
    let next = bg.client(&who, &[]).await;
    assert_ne!(bg.server_pid(), pid);
    let read = next.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["last_turn"]["text"], "late answer", "{read}");
    next.stop().await;
}

#[tokio::test]
async fn a_killed_server_is_replaced_by_the_next_client_and_no_completed_turn_is_lost() {
    let bg = Background::new().await;
    let who = bg.who();
    let mut first = bg.client(&who, &[]).await;
    bg.mock.push(MockResponse::sse(anthropic::text(&["one"])));
    let id = id_of(&first.ok("session_create", json!({"prompt": "first"})).await);
    bg.mock.push(MockResponse::sse(anthropic::text(&["two"])));
    first.ok("session_turn", json!({"session_id": id, "prompt": "second"})).await;

    let pid = bg.server_pid();
    kill_9(pid);
    wait_gone(pid, Duration::from_secs(5)).await;
    // The relay sees the socket close and exits.
    let exited = tokio::time::timeout(LIMIT, first.child.wait()).await.expect("the client exits").unwrap();
    assert!(exited.success(), "{exited:?}");

    // Stale socket and pid file left behind; the next client starts a new server anyway.
    let second = bg.client(&who, &[]).await;
    assert_ne!(bg.server_pid(), pid);
    let read = second.ok("session_read", json!({"session_id": id})).await;
    assert_eq!((read["state"]["turns"].as_u64(), &read["state"]["last_turn"]["text"]), (Some(2), &json!("two")));
    bg.mock.push(MockResponse::sse(anthropic::text(&["three"])));
    let turn = second.ok("session_turn", json!({"session_id": id, "prompt": "third"})).await;
    assert_eq!((turn["turn"].as_u64(), turn["text"].as_str()), (Some(3), Some("three")));
    second.stop().await;
}

/// A server that owns its store in-process without a socket (`--no-daemon`).
#[tokio::test]
async fn a_stdio_client_on_a_store_an_http_server_holds_is_told_what_to_do() {
    let http = HttpDeputy::start(&["--no-daemon"]).await;
    let runtime = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .arg("serve")
        .env("DEPUTY_STORE", http.home.path().join("sessions.redb"))
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env("XDG_CONFIG_HOME", http.home.path())
        .env("DEPUTY_MODEL", "anthropic:claude-test")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("in use by a deputy process that serves no background socket"), "{stderr}");
    assert!(stderr.contains("HTTP endpoint") && stderr.contains("--no-daemon"), "{stderr}");
    assert!(output.stdout.is_empty(), "stdout carries only MCP frames");
}

/// `serve --max-live-sessions` reaches the background server it starts: beyond the bound the
/// server unloads the least recently used session, and a client continues it transparently
/// (rehydrated with that client's own factory).
#[tokio::test]
async fn max_live_sessions_reaches_the_background_server_and_unloaded_sessions_continue() {
    let bg = Background::new().await;
    let who = bg.who();
    let client = bg.client(&who, &["--max-live-sessions", "2"]).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        bg.mock.push(MockResponse::sse(anthropic::text(&[&format!("answer {n}")])));
        ids.push(id_of(&client.ok("session_create", json!({"prompt": format!("question {n}")})).await));
    }
    let deadline = Instant::now() + LIMIT;
    while !bg.log().contains("session unloaded") {
        assert!(Instant::now() < deadline, "the server never unloaded a session:\n{}", bg.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bg.mock.push(MockResponse::sse(anthropic::text(&["again"])));
    let turn = client.ok("session_turn", json!({"session_id": ids[0], "prompt": "more"})).await;
    assert_eq!((turn["text"].as_str(), turn["turn"].as_u64()), (Some("again"), Some(2)));
    let sent = &bg.mock.requests()[3].body["messages"];
    assert_eq!(sent.as_array().unwrap().len(), 3, "the whole history went to the model: {sent}");
    client.stop().await;
}

/// G14: with no `XDG_RUNTIME_DIR`, another user (or a wrong mode) owning the shared
/// `$TMPDIR/deputy-$UID` first no longer stops the background server: that directory is never
/// used (nothing is written into it) and the socket goes to the private fallback under the
/// user's cache directory, where the next client finds the same server.
#[tokio::test]
async fn g14_a_precreated_shared_socket_directory_is_refused_and_a_private_one_used() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let bg = Background::new().await;
    let tmp = tempfile::tempdir().unwrap();
    // SAFETY: geteuid(2) has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let shared = tmp.path().join(format!("deputy-{uid}"));
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    if uid == 0 {
        // As root the test can play the other user outright ("nobody").
        std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
    }
    let fallback = bg.home.path().join(".cache").join("deputy").join("run");
    struct KillServer(PathBuf);
    impl Drop for KillServer {
        fn drop(&mut self) {
            let Ok(entries) = std::fs::read_dir(&self.0) else { return };
            for entry in entries.flatten().filter(|entry| entry.path().extension().is_some_and(|ext| ext == "pid"))
            {
                let pid = std::fs::read_to_string(entry.path()).ok().and_then(|text| text.trim().parse().ok());
                if let Some(pid) = pid.filter(|pid| is_background_server(*pid)) {
                    kill_9(pid);
                }
            }
        }
    }
    let _cleanup = KillServer(fallback.clone());
    let client = |bg: &Background| {
        let mut command = bg.command(&bg.who(), &["serve"]);
        command
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("XDG_CACHE_HOME")
            .env("TMPDIR", tmp.path())
            .env("HOME", bg.home.path());
        command
    };
    let (service, child) = connect(&RecordingClient::default(), client(&bg), ClientLifecycleMode::Initialize).await;
    let first = Client { service, child };
    first.ok("session_list", json!({})).await;
    assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 0, "nothing in the foreign directory");
    let meta = std::fs::metadata(&fallback).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o700));
    let pids: Vec<_> = std::fs::read_dir(&fallback)
        .unwrap()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "pid"))
        .collect();
    assert_eq!(pids.len(), 1, "the background server's pid file is in the fallback");
    let (service, child) = connect(&RecordingClient::default(), client(&bg), ClientLifecycleMode::Initialize).await;
    let second = Client { service, child };
    second.ok("session_list", json!({})).await;
    assert_eq!(
        std::fs::read_dir(&fallback).unwrap().flatten().count(),
        2,
        "one socket and one pid file: {fallback:?}"
    );
    second.stop().await;
    first.stop().await;
}

/// G14: the background server does not lend its first client's context. Client ONE starts it
/// (with a private variable and its own key); client TWO's host session, unloaded, is woken by
/// a peer's message: that turn runs with TWO's key, and the server's environment holds neither
/// ONE's variable nor its key (only the machine's settings pass to the server).
#[tokio::test]
async fn g14_a_mail_woken_session_runs_with_its_own_client_context_not_the_first_clients() {
    let bg = Background::new().await;
    let one = Who { dir: bg.project.path(), model: "anthropic:claude-test", key: "key-of-client-ONE" };
    let two = Who { dir: bg.project.path(), model: "anthropic:claude-test", key: "key-of-client-TWO" };
    let mut command = bg.command(&one, &["serve", "--idle-unload-secs", "1"]);
    command.env("SOME_PRIVATE_SECRET", "first-client-secret");
    let (service, child) = connect(&RecordingClient::default(), command, ClientLifecycleMode::Initialize).await;
    let client_one = Client { service, child };
    let client_two = bg.client(&two, &[]).await;

    let host =
        |name: &str, prompt: &str| json!({"prompt": prompt, "host_mode": true, "name": name, "peer_group": "g"});
    bg.mock.push(MockResponse::sse(anthropic::text(&["waiting"])));
    client_two.ok("session_create", host("h", "wait for mail")).await;
    let deadline = Instant::now() + LIMIT;
    while !bg.log().contains("session unloaded") {
        assert!(Instant::now() < deadline, "the server never unloaded h:\n{}", bg.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let send = json!({"to": "h", "body": "wake up, h"});
    bg.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_s", "send_message", send)])));
    bg.mock.push(MockResponse::sse(anthropic::text(&["done"])));
    bg.mock.push(MockResponse::sse(anthropic::text(&["done"])));
    client_two.ok("session_create", host("s", "tell h to wake up")).await;

    let deadline = Instant::now() + LIMIT;
    let woken = loop {
        let requests = bg.mock.requests();
        let found = requests.into_iter().find(|request| {
            let messages = request.body["messages"].to_string();
            messages.contains("wake up, h") && messages.contains("wait for mail")
        });
        if let Some(request) = found {
            break request;
        }
        assert!(Instant::now() < deadline, "h was never woken:\n{}", bg.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(woken.header("x-api-key"), Some("key-of-client-TWO"), "h runs with its own client's key");

    let environ = std::fs::read(format!("/proc/{}/environ", bg.server_pid())).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(!environ.contains("first-client-secret"), "the first client's variables stay with it");
    assert!(!environ.contains("key-of-client-ONE"), "and its credentials");
    assert!(environ.contains("PATH="), "the machine's settings pass");
    client_one.stop().await;
    client_two.stop().await;
}

/// Skills: each client's default `[skills]` directory is under its own `XDG_CONFIG_HOME`, which
/// it hands over with its provider variables (the server keeps no client's configuration).
#[tokio::test]
async fn each_client_lists_the_skills_of_its_own_config_home() {
    let bg = Background::new().await;
    let other_home = tempfile::tempdir().unwrap();
    for (home, name) in [(bg.home.path(), "first-skill"), (other_home.path(), "second-skill")] {
        let folder = home.join("deputy/skills").join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("SKILL.md"), format!("---\nname: {name}\ndescription: Of {name}.\n---\nBody."))
            .unwrap();
    }
    bg.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    let first = bg.client(&bg.who(), &[]).await;
    let mut command = bg.command(&bg.who(), &["serve"]);
    command.env("XDG_CONFIG_HOME", other_home.path());
    let (service, child) = connect(&RecordingClient::default(), command, ClientLifecycleMode::Initialize).await;
    let second = Client { service, child };
    bg.server_pid();

    first.ok("session_create", json!({"prompt": "hi"})).await;
    second.ok("session_create", json!({"prompt": "hi"})).await;
    let requests = bg.mock.requests();
    let system = |index: usize| requests[index].body["system"].to_string();
    assert!(
        system(0).contains("- first-skill: Of first-skill.") && !system(0).contains("second-skill"),
        "{}",
        system(0)
    );
    assert!(
        system(1).contains("- second-skill: Of second-skill.") && !system(1).contains("first-skill"),
        "{}",
        system(1)
    );
    first.stop().await;
    second.stop().await;
}

/// Issue 28: with a stdio client's background server owning the store, the other commands on
/// that store run in that server instead of being refused: they see the client's sessions, and
/// the client sees theirs. A turn streams as in-process and Ctrl-C interrupts it there;
/// `background stop` still stops everything.
#[tokio::test]
async fn commands_on_a_store_the_background_server_owns_run_there() {
    let bg = Background::new().await;
    let who = bg.who();
    let client = bg.client(&who, &[]).await;
    let server = bg.server_pid();
    bg.mock.push(MockResponse::sse(anthropic::text(&["A1"])));
    let id = id_of(&client.ok("session_create", json!({"prompt": "one"})).await);

    let run = |args: &[&str]| {
        let mut command = bg.command(&who, args);
        async move {
            let output = tokio::time::timeout(LIMIT, command.output()).await.expect("the command ends").unwrap();
            let (stdout, stderr) = (
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            );
            (output.status.code(), stdout, stderr)
        }
    };
    let id_arg = id.as_str();

    let (code, stdout, stderr) = run(&["sessions", "list", "--json"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed["sessions"][0]["session_id"], json!(id));

    bg.mock.push(MockResponse::sse(anthropic::text(&["A", "2"])));
    let (code, stdout, stderr) = run(&["turn", id_arg, "two"]).await;
    assert_eq!((code, stdout.as_str()), (Some(0), "A2\n"), "{stderr}");
    assert!(stderr.contains(&format!("session {id}")), "{stderr}");
    let seen = client.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(seen["state"]["turns"], 2, "the stdio client sees the command's turn");

    let (code, stdout, stderr) = run(&["sessions", "show", id_arg]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("one") && stdout.contains("A2"), "{stdout}");
    let (code, stdout, stderr) = run(&["send", id_arg, "a note"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.trim_end().ends_with(" queued"), "{stdout}");
    let (code, stdout, stderr) = run(&["sessions", "fork", id_arg, "--at-turn", "1"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with(&format!("forked {id} at turn 1 into ")), "{stdout}");
    let out = bg.home.path().join("projection");
    let (code, _, stderr) = run(&["project", "--out", out.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("of 2 sessions"), "{stderr}");
    let (code, _, stderr) = run(&["agents", "list"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = run(&["sessions", "show", "no-such-session"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("SESSION_NOT_FOUND"), "{stderr}");

    bg.mock.push(MockResponse::sse(anthropic::text(&["ran"])));
    let (code, stdout, stderr) = run(&["run", "a new one"]).await;
    assert_eq!((code, stdout.as_str()), (Some(0), "ran\n"), "{stderr}");
    assert_eq!(client.ok("session_list", json!({})).await["total"], 3);

    // Ctrl-C interrupts the turn in the server, which ends it `cancelled`, as in-process.
    let gate = bg.mock.push_held(MockResponse::sse(anthropic::text(&["never", " seen"])), 1);
    let requests = bg.mock.requests().len();
    let mut turn = bg.command(&who, &["turn", id_arg, "a long one"]);
    let turn = turn.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    bg.mock.wait_for_requests(requests + 1).await;
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(turn.id().unwrap() as libc::pid_t, libc::SIGINT) };
    let output = tokio::time::timeout(LIMIT, turn.wait_with_output()).await.expect("the command ends").unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let view = client.ok("session_read", json!({"session_id": id, "wait_ms": 10000})).await;
    assert_eq!(view["state"]["last_turn"]["status"], "cancelled", "{view}");
    gate.open();

    let (code, _, stderr) = run(&["background", "stop"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    wait_gone(server, LIMIT).await;
    drop(client);
}

/// Issue 28: `deputy serve --http` on a store a stdio client's background server owns asks
/// that server to listen on HTTP as well: HTTP callers and the stdio client share one live set
/// of sessions, and stopping `serve --http` stops only the listener.
#[tokio::test]
async fn serve_http_on_a_store_the_background_server_owns_listens_through_it() {
    const TOKEN: &str = "a-token-of-the-local-user-0123";
    let bg = Background::new().await;
    let who = bg.who();
    let client = bg.client(&who, &[]).await;
    bg.mock.push(MockResponse::sse(anthropic::text(&["A1"])));
    let id = id_of(&client.ok("session_create", json!({"prompt": "one"})).await);

    let port = crate::common::http_deputy::free_port();
    let address = format!("127.0.0.1:{port}");
    let mut serve = bg.command(&who, &["serve", "--http", &address, "--token", TOKEN]);
    let serve = serve.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = |path: &str| format!("http://{address}{path}");
    let deadline = Instant::now() + LIMIT;
    while http.get(url("/healthz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "the HTTP listener never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let listed: Value =
        http.get(url("/v1/sessions")).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["sessions"][0]["session_id"], json!(id), "{listed}");
    bg.mock.push(MockResponse::sse(anthropic::text(&["over HTTP"])));
    let turn =
        http.post(url(&format!("/v1/sessions/{id}/turns"))).bearer_auth(TOKEN).json(&json!({"prompt": "two"}));
    let turn: Value = turn.send().await.unwrap().json().await.unwrap();
    assert_eq!(turn["text"], "over HTTP", "{turn}");
    bg.mock.push(MockResponse::sse(anthropic::text(&["over stdio"])));
    let turn = client.ok("session_turn", json!({"session_id": id, "prompt": "three"})).await;
    assert_eq!((turn["text"].as_str(), turn["turn"].as_u64()), (Some("over stdio"), Some(3)));

    // SIGINT stops the listener, not the server: the stdio client goes on.
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(serve.id().unwrap() as libc::pid_t, libc::SIGINT) };
    let output = tokio::time::timeout(LIMIT, serve.wait_with_output()).await.expect("serve --http ends").unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let deadline = Instant::now() + LIMIT;
    while http.get(url("/healthz")).send().await.is_ok() {
        assert!(Instant::now() < deadline, "the HTTP listener still answers");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let view = client.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(view["state"]["turns"], 3);
    client.stop().await;
}

/// Issue 28: `deputy serve --http` that owns its store (no background server ran) serves the
/// store's socket too: a stdio client attaches to it, commands run in it, `background status`
/// names it and `background stop` stops it.
#[tokio::test]
async fn a_stdio_client_and_commands_on_a_store_an_http_server_owns_go_through_it() {
    const TOKEN: &str = "a-token-of-the-local-user-0123";
    let bg = Background::new().await;
    let runtime = bg.runtime.path().to_str().unwrap().to_owned();
    let mut http = HttpDeputy::start_with_token_and_env(Some(TOKEN), &[], &[("XDG_RUNTIME_DIR", &runtime)]).await;
    // Every command below on the HTTP server's store.
    let store = http.home.path().join("sessions.redb");
    let command = |args: &[&str]| {
        let mut command = bg.command(&bg.who(), args);
        command.env("DEPUTY_STORE", &store);
        command
    };
    http.mock.push(MockResponse::sse(anthropic::text(&["over HTTP"])));
    let response = http.http.post(http.url("/v1/sessions")).bearer_auth(TOKEN).json(&json!({"prompt": "one"}));
    let created: Value = response.send().await.unwrap().json().await.unwrap();
    let id = id_of(&created);

    let (service, _child) =
        connect(&RecordingClient::default(), command(&["serve"]), ClientLifecycleMode::Initialize).await;
    let client = Client { service, child: _child };
    let listed = client.ok("session_list", json!({})).await;
    assert_eq!(listed["sessions"][0]["session_id"], json!(id), "{listed}");
    let output = command(&["sessions", "show", &id]).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("over HTTP"), "{stdout}");
    let output = command(&["background", "status"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains(&http.child.id().unwrap().to_string()));

    let output = command(&["background", "stop"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let status = tokio::time::timeout(LIMIT, http.child.wait()).await.expect("the HTTP server stops").unwrap();
    assert!(status.success(), "{status:?}");
    drop(client);
}

/// `deputy ARGS` run to its end (30 s at most): status, stdout, stderr.
async fn run_to_end(command: &mut tokio::process::Command) -> (std::process::ExitStatus, String, String) {
    let output = command.stdin(Stdio::null()).output();
    let output = tokio::time::timeout(LIMIT, output).await.expect("the command ends").unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn deputy_ui_starts_an_inspector_for_an_unserved_store_and_finds_it_again() {
    let bg = Background::new().await;
    let who = bg.who();
    // Nothing owns the store: a loopback HTTP server is started for it, with a fresh token.
    let (status, out, err) = run_to_end(&mut bg.command(&who, &["ui"])).await;
    assert!(status.success(), "{out}{err}");
    let mut lines = out.lines();
    let url = lines.next().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/ui"), "{out}");
    let token = lines.next().unwrap().strip_prefix("token: ").expect("the token to enter").to_owned();
    assert_eq!(token.len(), 48, "{out}");

    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let page = http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let base = url.trim_end_matches("/ui");
    let refused = http.get(format!("{base}/v1/caller")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let caller: Value =
        http.get(format!("{base}/v1/caller")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        (caller["subject"].as_str(), caller["acts_on_all"].as_bool()),
        (Some("local"), Some(true)),
        "{caller}"
    );

    // It owns the store now: a stdio client's sessions are the ones the inspector shows.
    let client = bg.client(&who, &[]).await;
    bg.mock.push(MockResponse::sse(anthropic::text(&["Hi."])));
    let arguments = json!({"prompt": "from the terminal"}).as_object().unwrap().clone();
    let created = client.service.call_tool(CallToolRequestParams::new("session_create").with_arguments(arguments));
    let created = created.await.unwrap().structured_content.unwrap();
    let listed: Value =
        http.get(format!("{base}/v1/sessions")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["sessions"][0]["session_id"], created["session_id"], "{listed}");

    // Asked again, the same inspector, and no new token (the running server has its own).
    let (status, again, err) = run_to_end(&mut bg.command(&who, &["ui"])).await;
    assert!(status.success(), "{again}{err}");
    assert_eq!(again.trim(), url);

    client.service.cancel().await.unwrap();
    let (status, out, err) = run_to_end(&mut bg.command(&who, &["background", "stop"])).await;
    assert!(status.success() && out.starts_with("stopped"), "{out}{err}");
    assert!(http.get(&url).send().await.is_err(), "stopped");
}

#[tokio::test]
async fn deputy_ui_leaves_a_stdio_background_server_alone_and_says_what_to_do() {
    let bg = Background::new().await;
    let who = bg.who();
    let client = bg.client(&who, &[]).await;
    let (status, out, err) = run_to_end(&mut bg.command(&who, &["ui"])).await;
    assert!(!status.success(), "{out}");
    assert!(err.contains("serves no HTTP") && err.contains("deputy background stop"), "{err}");
    client.service.cancel().await.unwrap();
}

/// What `/proc/PID/fd/FD` names (`pipe:[INODE]` for a pipe).
fn fd_target(pid: u32, fd: &str) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap()
}

/// Every open descriptor of `pid`, by what it names.
fn open_files(pid: u32) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    entries.filter_map(|entry| std::fs::read_link(entry.unwrap().path()).ok()).collect()
}

/// Whether each descriptor of `pid` that names `file` is non-blocking (`O_NONBLOCK` in its
/// fdinfo flags, which are octal).
fn non_blocking(pid: u32, file: &Path) -> Vec<bool> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    let fds =
        entries.map(|entry| entry.unwrap().path()).filter(|fd| std::fs::read_link(fd).is_ok_and(|to| to == file));
    fds.map(|fd| {
        let info =
            std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().unwrap().display())).unwrap();
        let flags = info.lines().find_map(|line| line.strip_prefix("flags:")).expect("fdinfo has flags");
        u32::from_str_radix(flags.trim(), 8).unwrap() & libc::O_NONBLOCK as u32 != 0
    })
    .collect()
}

#[tokio::test]
async fn piped_stdio_is_handed_to_the_server_a_killed_serve_takes_it_back_and_a_file_is_relayed() {
    let bg = Background::new().await;
    let who = bg.who();

    // Piped, as MCP clients start servers: the background server holds the very pipes.
    let mut client = bg.client(&who, &[]).await;
    let (server, serve) = (bg.server_pid(), client.child.id().unwrap());
    let pipes = [fd_target(serve, "0"), fd_target(serve, "1")];
    assert!(pipes.iter().all(|pipe| pipe.to_string_lossy().starts_with("pipe:")), "{pipes:?}");
    let held = open_files(server);
    assert!(pipes.iter().all(|pipe| held.contains(pipe)), "the server holds {pipes:?}: {held:?}");
    // Non-blocking, else a read with nothing to read stalls a runtime thread, and with it the
    // server's exit (CI saw `background stop` wait for an attached client that said nothing).
    for pipe in &pipes {
        let flags = non_blocking(server, pipe);
        assert!(!flags.is_empty() && flags.iter().all(|non_blocking| *non_blocking), "{pipe:?}: {flags:?}");
    }
    assert!(client.ok("session_list", json!({})).await["sessions"].is_array());

    // `serve` killed while its client keeps the pipes: the server ends that client's session
    // and lets go of them, and the client sees its server gone.
    client.child.start_kill().unwrap();
    client.child.wait().await.unwrap();
    let deadline = Instant::now() + LIMIT;
    while open_files(server).iter().any(|file| pipes.contains(file)) {
        assert!(Instant::now() < deadline, "the server still holds the killed client's pipes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::timeout(LIMIT, client.service.waiting()).await.expect("the client sees the end").unwrap();

    // stdin from a file, which the server could not wait on: relayed, and answered all the same.
    let requests = bg.home.path().join("requests.jsonl");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
               "capabilities": {}, "clientInfo": {"name": "file", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "session_list", "arguments": {}}}),
    ];
    std::fs::write(&requests, lines.iter().map(|line| format!("{line}\n")).collect::<String>()).unwrap();
    let output = bg.command(&who, &["serve"]).stdin(std::fs::File::open(&requests).unwrap()).output();
    let output = tokio::time::timeout(LIMIT, output).await.expect("serve ends at its stdin's end").unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let answers: Vec<Value> =
        String::from_utf8_lossy(&output.stdout).lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let listed = answers.iter().find(|answer| answer["id"] == 2).expect("the call's answer");
    assert_eq!(listed["result"]["isError"], false, "{listed}");
}
