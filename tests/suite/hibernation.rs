//! Hibernation through the built binary: `serve --idle-unload-secs` and `--max-live-sessions`
//! over stdio. With a store, sessions beyond the bound or idle too long are unloaded (the log
//! says "session unloaded") and come back on their next turn with their whole history; without
//! one, the bound refuses new sessions.

use std::process::Stdio;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::service::RunningService;
use serde_json::{Value, json};

use crate::common::deputy::{RecordingClient, deputy_serve, error_of};
#[cfg(feature = "session-store")]
use crate::common::id_of;
use crate::common::mock_llm::{MockLlm, MockResponse, anthropic};

/// Far longer than anything here takes; only a hang reaches it.
const LIMIT: Duration = Duration::from_secs(30);

/// `deputy serve --no-daemon EXTRA…` with its stderr (at `deputy=info`) in a file, so a test
/// can wait for what it logs.
struct Served {
    client: RunningService<RoleClient, RecordingClient>,
    child: tokio::process::Child,
    mock: MockLlm,
    log: std::path::PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Served {
    async fn start(extra: &[&str], store: bool) -> Self {
        let mock = MockLlm::start().await;
        let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut command = deputy_serve(&mock, workspace.path(), home.path());
        command.args(extra).env("RUST_LOG", "warn,deputy=info");
        if !store {
            command.env_remove("DEPUTY_STORE");
            if cfg!(feature = "session-store") {
                command.arg("--ephemeral");
            }
        }
        let log = home.path().join("deputy.log");
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
        let client = RecordingClient::default().serve(transport).await.expect("MCP handshake");
        Self { client, child, mock, log, _dirs: (workspace, home) }
    }

    async fn call(&self, tool: &str, arguments: Value) -> rmcp::model::CallToolResult {
        crate::common::deputy::call_tool(&self.client, tool, arguments).await
    }

    async fn ok(&self, tool: &str, arguments: Value) -> Value {
        crate::common::deputy::ok_tool(&self.client, tool, arguments).await
    }

    fn unloads(&self) -> usize {
        std::fs::read_to_string(&self.log).unwrap_or_default().matches("session unloaded").count()
    }

    #[cfg(feature = "session-store")]
    /// Waits until deputy has logged `count` unloads. Polls the log file; the deadline keeps a
    /// failure from hanging.
    async fn wait_for_unloads(&self, count: usize) {
        let deadline = std::time::Instant::now() + LIMIT;
        while self.unloads() < count {
            assert!(std::time::Instant::now() < deadline, "deputy logged {} unloads, not {count}", self.unloads());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        let Self { client, mut child, .. } = self;
        client.cancel().await.unwrap();
        let status = tokio::time::timeout(LIMIT, child.wait()).await.expect("deputy exits").unwrap();
        assert!(status.success(), "deputy exited with {status:?}");
    }
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn beyond_max_live_sessions_the_oldest_is_unloaded_and_comes_back_whole() {
    let served = Served::start(&["--max-live-sessions", "2"], true).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        served.mock.push(MockResponse::sse(anthropic::text(&[&format!("answer {n}")])));
        ids.push(id_of(&served.ok("session_create", json!({"prompt": format!("question {n}")})).await));
    }
    served.wait_for_unloads(1).await;
    assert_eq!(served.unloads(), 1, "two sessions stay live");
    let read = served.ok("session_read", json!({"session_id": ids[0]})).await;
    let list = served.ok("session_list", json!({})).await;
    assert_eq!(list["total"], 3);

    // The unloaded session continues with its whole history; another one makes room.
    served.mock.push(MockResponse::sse(anthropic::text(&["again 0"])));
    let turn = served.ok("session_turn", json!({"session_id": ids[0], "prompt": "more"})).await;
    assert_eq!((turn["text"].as_str(), turn["turn"].as_u64()), (Some("again 0"), Some(2)));
    let sent = served.mock.requests().last().unwrap().body["messages"].clone();
    let texts: Vec<String> = sent.as_array().unwrap().iter().map(|m| m["content"].to_string()).collect();
    assert_eq!(texts.len(), 3, "{sent}");
    assert!(texts[0].contains("question 0") && texts[1].contains("answer 0") && texts[2].contains("more"));
    served.wait_for_unloads(2).await;
    let after = served.ok("session_read", json!({"session_id": ids[0]})).await;
    assert_eq!(after["state"]["created_at"], read["state"]["created_at"]);
    assert_eq!((read["state"]["turns"].as_u64(), after["state"]["turns"].as_u64()), (Some(1), Some(2)));
    for id in &ids[1..] {
        served.mock.push(MockResponse::sse(anthropic::text(&["fine"])));
        served.ok("session_turn", json!({"session_id": id, "prompt": "still there?"})).await;
    }
    served.stop().await;
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn an_idle_session_is_unloaded_after_idle_unload_secs_and_its_next_turn_resumes_it() {
    let served = Served::start(&["--idle-unload-secs", "1"], true).await;
    served.mock.push(MockResponse::sse(anthropic::text(&["one"])));
    let id = id_of(&served.ok("session_create", json!({"prompt": "first"})).await);
    let live = served.ok("session_read", json!({"session_id": id})).await;
    served.wait_for_unloads(1).await;
    assert_eq!(served.ok("session_read", json!({"session_id": id})).await, live, "read cannot tell");
    served.mock.push(MockResponse::sse(anthropic::text(&["two"])));
    let turn = served.ok("session_turn", json!({"session_id": id, "prompt": "second"})).await;
    assert_eq!(turn["text"], "two");
    let sent = &served.mock.requests()[1].body["messages"];
    assert_eq!(sent.as_array().unwrap().len(), 3, "{sent}");
    served.stop().await;
}

#[tokio::test]
async fn without_a_store_max_live_sessions_refuses_new_sessions() {
    let served = Served::start(&["--max-live-sessions", "2"], false).await;
    for n in 0..2 {
        served.mock.push(MockResponse::sse(anthropic::text(&["ok"])));
        served.ok("session_create", json!({"prompt": format!("q{n}")})).await;
    }
    let (code, text) = error_of(&served.call("session_create", json!({"prompt": "one too many"})).await);
    assert_eq!(code, "SESSION_PERSISTENCE_DISABLED");
    assert!(text.contains("more than 2 live sessions (max_live_sessions)"), "{text}");
    assert_eq!(served.mock.requests().len(), 2, "the refused session never reached the model");
    assert_eq!(served.unloads(), 0);
    served.stop().await;
}

/// What unloaded sessions held goes back to the system from jemalloc's one background thread
/// (`deputy::allocator`): the server started it, and only one.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_server_runs_one_allocator_thread_that_hands_freed_memory_back() {
    let deputy = crate::common::http_deputy::HttpDeputy::start(&[]).await;
    let pid = deputy.child.id().expect("running");
    let names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect();
    let allocator_threads = names.iter().filter(|name| *name == "jemalloc_bg_thd").count();
    assert_eq!(allocator_threads, 1, "{names:?}");
}
