//! `TestDeputy`: the built `deputy` binary as a child process, driven over stdio by the rmcp
//! client, with its providers pointed at an in-test [`MockLlm`].

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::Notify;

use super::mock_llm::MockLlm;

/// The stateless 2026-07-28 handshake (`server/discover`), for a client of that era.
pub fn stateless() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] }
}

/// A client that records the progress notifications it receives.
#[derive(Clone, Default)]
pub struct RecordingClient {
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    pub progress_arrived: Arc<Notify>,
}

impl ClientHandler for RecordingClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("deputy-tests", "0.0.0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params);
        self.progress_arrived.notify_waiters();
    }
}

pub struct TestDeputy {
    pub client: RunningService<RoleClient, RecordingClient>,
    /// The `deputy serve` process (killed if the test drops it).
    pub child: tokio::process::Child,
    pub recorder: RecordingClient,
    pub mock: MockLlm,
    pub workspace: TempDir,
    /// Holds the config home and the session store (`sessions.redb`).
    pub home: TempDir,
}

impl TestDeputy {
    /// Starts a mock LLM and `deputy serve` using it as both `anthropic` and `openai`; the
    /// default model is `anthropic:claude-test`. The client connects with the 2025-11-25
    /// `initialize` handshake.
    pub async fn start() -> Self {
        Self::start_with(ClientLifecycleMode::Initialize).await
    }

    /// Like [`TestDeputy::start`], with the client's lifecycle mode chosen (e.g. the stateless
    /// 2026-07-28 `server/discover`).
    pub async fn start_with(lifecycle: ClientLifecycleMode) -> Self {
        Self::start_configured(lifecycle, None).await
    }

    /// Like [`TestDeputy::start`], with `config` as deputy's config file.
    pub async fn start_with_config(config: &str) -> Self {
        Self::start_configured(ClientLifecycleMode::Initialize, Some(config)).await
    }

    async fn start_configured(lifecycle: ClientLifecycleMode, config: Option<&str>) -> Self {
        let mock = MockLlm::start().await;
        let workspace = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        if let Some(config) = config {
            std::fs::create_dir_all(home.path().join("deputy")).unwrap();
            std::fs::write(home.path().join("deputy").join("config.toml"), config).unwrap();
        }
        let command = deputy_serve(&mock, workspace.path(), home.path());
        let recorder = RecordingClient::default();
        let (client, child) = connect(&recorder, command, lifecycle).await;
        Self { client, child, recorder, mock, workspace, home }
    }

    /// The session store file this deputy uses.
    pub fn store_path(&self) -> std::path::PathBuf {
        self.home.path().join("sessions.redb")
    }

    /// Stops this deputy the way an MCP client does (closing its stdin) and waits for a clean
    /// exit; what it leaves behind (mock, workspace, store) is returned.
    pub async fn stop(self) -> Stopped {
        let Self { client, mut child, recorder, mock, workspace, home } = self;
        client.cancel().await.expect("client closes");
        let status = child.wait().await.expect("deputy exits");
        assert!(status.success(), "deputy exited with {status:?}");
        drop(recorder);
        Stopped { mock, workspace, home }
    }

    /// Stops this deputy cleanly and starts a new one on the same store, mock and workspace.
    pub async fn restart(self) -> Self {
        let Stopped { mock, workspace, home } = self.stop().await;
        Self::respawn(mock, workspace, home).await
    }

    /// Kills deputy with SIGKILL, wherever it is, and starts a new one on the same store.
    pub async fn crash_and_restart(self) -> Self {
        let Self { client, mut child, recorder, mock, workspace, home } = self;
        child.start_kill().expect("kill -9");
        child.wait().await.expect("deputy dies");
        drop(client);
        drop(recorder);
        Self::respawn(mock, workspace, home).await
    }

    /// Starts a deputy on what a stopped or killed one left behind (its store, config, mock
    /// and workspace), e.g. after a test changed the config file under `home`.
    pub async fn respawn_on(mock: MockLlm, workspace: TempDir, home: TempDir) -> Self {
        Self::respawn(mock, workspace, home).await
    }

    async fn respawn(mock: MockLlm, workspace: TempDir, home: TempDir) -> Self {
        let command = deputy_serve(&mock, workspace.path(), home.path());
        let recorder = RecordingClient::default();
        let (client, child) = connect(&recorder, command, ClientLifecycleMode::Initialize).await;
        Self { client, child, recorder, mock, workspace, home }
    }
}

/// What a stopped [`TestDeputy`] leaves behind.
pub struct Stopped {
    pub mock: MockLlm,
    pub workspace: TempDir,
    pub home: TempDir,
}

/// `deputy serve --no-daemon` (today's in-process stdio server, owning the store) with its
/// providers on `mock`, its store and config under `home`. The background server has its own
/// suite (`background_server.rs`).
pub fn deputy_serve(
    mock: &MockLlm,
    workspace: &std::path::Path,
    home: &std::path::Path,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
    command.args(["serve", "--no-daemon"]);
    on_mock(&mut command, mock, workspace, home)
        .env("RUST_LOG", std::env::var("DEPUTY_TEST_LOG").unwrap_or_else(|_| "warn".into()));
    with_store(command.as_std_mut(), home);
    command
}

/// Points a deputy command's providers (`anthropic` and `openai`) at `mock`, with the default
/// model `anthropic:claude-test`, its workspace at `workspace` and its config home at `home`
/// (no `DEPUTY_CONFIG` from the environment).
pub fn on_mock<'a>(
    command: &'a mut tokio::process::Command,
    mock: &MockLlm,
    workspace: &std::path::Path,
    home: &std::path::Path,
) -> &'a mut tokio::process::Command {
    command
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", format!("{}/anthropic", mock.base_url()))
        .env("OPENAI_API_KEY", "test-key")
        .env("OPENAI_BASE_URL", format!("{}/v1", mock.base_url()))
        .env("DEPUTY_MODEL", "anthropic:claude-test")
        .env("DEPUTY_WORKSPACE", workspace)
        .env("XDG_CONFIG_HOME", home)
        .env_remove("DEPUTY_CONFIG")
}

/// Points a deputy command at a store under `home`, in builds that have one.
pub fn with_store(command: &mut std::process::Command, home: &std::path::Path) {
    if cfg!(feature = "session-store") {
        command.env("DEPUTY_STORE", home.join("sessions.redb"));
    } else {
        command.env_remove("DEPUTY_STORE");
    }
}

/// Spawns deputy and connects the rmcp client over its stdin/stdout. The test keeps the
/// child, so it can wait for a clean exit or kill it.
pub async fn connect<H: rmcp::ClientHandler + Clone>(
    recorder: &H,
    mut command: tokio::process::Command,
    lifecycle: ClientLifecycleMode,
) -> (RunningService<RoleClient, H>, tokio::process::Child) {
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn deputy");
    let transport = (child.stdout.take().expect("stdout"), child.stdin.take().expect("stdin"));
    let client = match lifecycle {
        ClientLifecycleMode::Initialize => recorder.clone().serve(transport).await,
        mode => recorder.clone().serve_with_lifecycle(transport, mode).await,
    }
    .expect("MCP handshake with deputy");
    (client, child)
}

/// Calls `tool` with an object of `arguments`; a protocol error fails the test.
pub async fn call_tool(
    client: &RunningService<RoleClient, RecordingClient>,
    tool: &str,
    arguments: Value,
) -> CallToolResult {
    let Value::Object(arguments) = arguments else { panic!("arguments must be an object") };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|err| panic!("{tool}: protocol error {err}"))
}

/// Calls a tool that must succeed; returns its structured content.
pub async fn ok_tool(client: &RunningService<RoleClient, RecordingClient>, tool: &str, arguments: Value) -> Value {
    let result = call_tool(client, tool, arguments).await;
    assert_ne!(result.is_error, Some(true), "{tool} failed: {:?}", result.content);
    result.structured_content.expect("structured content")
}

impl TestDeputy {
    /// Reads session `id` (long-polling a running turn) until it is idle and `done` holds;
    /// fails after 30 s instead of hanging.
    pub async fn settled(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let view = self.ok("session_read", serde_json::json!({"session_id": id, "wait_ms": 1000})).await;
            if view["state"]["status"] == "idle" && done(&view) {
                return view;
            }
            assert!(tokio::time::Instant::now() < deadline, "did not settle: {view}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The tool results the model received in request `index`: the content of its last message.
pub fn tool_results(deputy: &TestDeputy, index: usize) -> Vec<Value> {
    let requests = deputy.mock.requests();
    let messages = requests[index].body["messages"].as_array().unwrap().clone();
    messages.last().unwrap()["content"].as_array().unwrap().clone()
}

impl TestDeputy {
    pub async fn call(&self, tool: &str, arguments: Value) -> CallToolResult {
        call_tool(&self.client, tool, arguments).await
    }

    /// Calls a tool that must succeed; returns its structured content.
    pub async fn ok(&self, tool: &str, arguments: Value) -> Value {
        ok_tool(&self.client, tool, arguments).await
    }

    /// Calls a tool that must fail; returns `(code, text)` after checking the error shape.
    pub async fn err(&self, tool: &str, arguments: Value) -> (String, String) {
        error_of(&self.call(tool, arguments).await)
    }

    pub fn progress(&self) -> Vec<ProgressNotificationParam> {
        self.recorder.progress.lock().unwrap().clone()
    }
}

/// Checks the error contract of a result and returns `(code, text)`: `isError`, the text
/// `CODE: message`, no `structuredContent` (it would not match the tool's `outputSchema`), and
/// the error body in `_meta["deputy/error"]`.
pub fn error_of(result: &CallToolResult) -> (String, String) {
    assert_eq!(result.is_error, Some(true), "expected an error result: {result:?}");
    assert_eq!(result.structured_content, None, "an error result has no structured content: {result:?}");
    let text = result.content[0].as_text().expect("text content").text.clone();
    let body = error_body(result);
    let code = body["code"].as_str().expect("code").to_owned();
    assert!(text.starts_with(&format!("{code}: ")), "text {text:?} must begin with the code");
    assert_eq!(body["message"].as_str().map(|m| format!("{code}: {m}")), Some(text.clone()));
    (code, text)
}

/// The `_meta["deputy/error"]` of an error result.
pub fn error_body(result: &CallToolResult) -> &Value {
    result.meta.as_ref().and_then(|meta| meta.get("deputy/error")).expect("_meta[\"deputy/error\"]")
}

/// `deputy serve --http` on loopback with `config` as its config file and `env` set, which must
/// refuse to start: the error it exits with (its stderr).
pub async fn startup_error(config: &str, env: &[(&str, &str)]) -> String {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("deputy")).unwrap();
    std::fs::write(home.path().join("deputy").join("config.toml"), config).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
    command
        .args(["serve", "--http", "127.0.0.1:0"])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null());
    with_store(command.as_std_mut(), home.path());
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), command.output()).await.unwrap().unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}
