//! `HttpDeputy`: the built binary serving HTTP on a free loopback port, its providers on a
//! [`MockLlm`], plus clients for its surfaces.

use std::process::Stdio;
use std::time::Duration;

use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::watch;

use super::deputy::{RecordingClient, on_mock, with_store};
use super::mock_llm::MockLlm;

pub struct HttpDeputy {
    pub child: tokio::process::Child,
    /// A client for REST and JSON-RPC (no proxy: the server is on loopback).
    pub http: reqwest::Client,
    pub port: u16,
    pub mock: MockLlm,
    pub token: Option<String>,
    pub workspace: TempDir,
    pub home: TempDir,
    /// Everything the child logs, so a test can wait for a lifecycle step instead of sleeping.
    pub log: StderrLog,
}

/// A JSON-RPC request: `{"jsonrpc": "2.0", "id": id, "method": method, "params": params}`.
pub fn rpc_request(id: u64, method: &str, params: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The TCP port process `pid` listens on, once it does (within 10 s): its listening socket
/// found in `/proc/net/tcp` by the inode of one of its descriptors. This does not depend on
/// what deputy logs, which a test may filter.
async fn listening_port(pid: u32) -> u16 {
    for _ in 0..400 {
        if let Some(port) = listening_port_now(pid) {
            return port;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("deputy (pid {pid}) did not listen on a TCP port within 10 s");
}

fn listening_port_now(pid: u32) -> Option<u16> {
    let sockets: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| Some(target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned()))
        .collect();
    // `sl local_address rem_address st … inode`; state 0A is LISTEN, the port is hexadecimal.
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let listening = fields.get(3) == Some(&"0A") && fields.get(9).is_some_and(|inode| sockets.contains(*inode));
        listening.then(|| u16::from_str_radix(fields[1].rsplit(':').next()?, 16).ok()).flatten()
    })
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl HttpDeputy {
    pub async fn start(extra: &[&str]) -> Self {
        Self::start_with_token(None, extra).await
    }

    /// `deputy serve --http 127.0.0.1:PORT [--token T] EXTRA…`, ready when `/healthz` answers.
    pub async fn start_with_token(token: Option<&str>, extra: &[&str]) -> Self {
        let mock = MockLlm::start().await;
        let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        Self::spawn_on(None, mock, workspace, home, token, extra, &[]).await
    }

    /// Like [`HttpDeputy::start`], with environment variables set after the defaults (e.g. a
    /// provider's base URL pointed elsewhere than the mock).
    pub async fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mock = MockLlm::start().await;
        let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        Self::spawn_on(None, mock, workspace, home, None, extra, env).await
    }

    /// Like [`HttpDeputy::start_with_env`], with `config` as deputy's config file (the default
    /// one, under the home it gets), e.g. `[policy]` switches or `[[auth.tokens]]`.
    pub async fn start_with_config(config: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mock = MockLlm::start().await;
        let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::create_dir_all(home.path().join("deputy")).unwrap();
        std::fs::write(home.path().join("deputy").join("config.toml"), config).unwrap();
        Self::spawn_on(None, mock, workspace, home, None, extra, env).await
    }

    /// Like [`HttpDeputy::start_with_config`], in a workspace the test filled first.
    pub async fn start_in(workspace: TempDir, config: &str) -> Self {
        let (mock, home) = (MockLlm::start().await, tempfile::tempdir().unwrap());
        std::fs::create_dir_all(home.path().join("deputy")).unwrap();
        std::fs::write(home.path().join("deputy").join("config.toml"), config).unwrap();
        Self::spawn_on(None, mock, workspace, home, None, &[], &[]).await
    }

    /// Like [`HttpDeputy::start_with_config`], on `port` (to configure two deputies as each
    /// other's peers, each must know the other's port before it starts).
    pub async fn start_with_config_on(port: u16, config: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mock = MockLlm::start().await;
        let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::create_dir_all(home.path().join("deputy")).unwrap();
        std::fs::write(home.path().join("deputy").join("config.toml"), config).unwrap();
        Self::spawn_on(Some(port), mock, workspace, home, None, extra, env).await
    }

    /// One REST call with `token` as the bearer token (none: no header): the status and the
    /// JSON body (`null` when there is none).
    pub async fn rest(
        &self,
        token: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut request = self.http.request(method, self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response =
            request.send().await.unwrap_or_else(|error| panic!("{path}: {error}; {}", self.whereabouts()));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// For a request that failed on the connection: whether deputy still runs (its state in
    /// `/proc`) and the last lines it logged, since a reset alone cannot tell a crash from a
    /// closed connection.
    fn whereabouts(&self) -> String {
        let state = self.child.id().map_or_else(
            || "deputy has exited".to_owned(),
            |pid| {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let state = status.lines().find(|line| line.starts_with("State:")).unwrap_or("State: gone");
                format!("deputy (pid {pid}) {state}")
            },
        );
        let lines = self.log.lines();
        let last = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("{state}; its last lines:\n{last}")
    }

    /// `POST /rpc` with `frame` as the JSON body (a request, a batch, or any bytes at all): the
    /// status and the body as it came.
    pub async fn rpc_raw(&self, frame: impl Into<reqwest::Body>) -> reqwest::Result<(u16, Vec<u8>)> {
        let request = self.http.post(self.url("/rpc")).header("content-type", "application/json");
        let response = request.body(frame).send().await?;
        let status = response.status().as_u16();
        Ok((status, response.bytes().await?.to_vec()))
    }

    /// `POST /rpc` of one JSON-RPC request or a batch: the status and the answer (`null` when
    /// there is none, as for notifications).
    pub async fn rpc(&self, frame: &serde_json::Value) -> (u16, serde_json::Value) {
        let (status, body) = self.rpc_raw(frame.to_string()).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
    }

    /// `POST /rpc` of one JSON-RPC request as the caller `token` names: the answer.
    pub async fn rpc_as(&self, token: &str, frame: &serde_json::Value) -> serde_json::Value {
        let response = self.http.post(self.url("/rpc")).bearer_auth(token).json(frame).send().await.unwrap();
        response.json().await.unwrap()
    }

    /// An rmcp client on `/mcp` presenting `token` (whatever [`HttpDeputy::token`] is).
    pub async fn mcp_as(&self, token: &str) -> RunningService<RoleClient, RecordingClient> {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url("/mcp")).auth_header(token.to_owned());
        let transport = StreamableHttpClientTransport::from_config(config);
        RecordingClient::default().serve(transport).await.expect("MCP over HTTP")
    }

    /// With a token and extra environment variables (e.g. `RUST_LOG`).
    pub async fn start_with_token_and_env(token: Option<&str>, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mock = MockLlm::start().await;
        let (workspace, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        Self::spawn_on(None, mock, workspace, home, token, extra, env).await
    }

    /// Stops this deputy with SIGTERM (a clean exit) and starts a new one on the same store,
    /// mock and workspace, with the same extra arguments, on a new port.
    pub async fn restart(self, extra: &[&str]) -> Self {
        self.restart_with_env(extra, &[]).await
    }

    /// [`HttpDeputy::restart`] with `env` set for the new process.
    pub async fn restart_with_env(mut self, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let status = self.terminate().await;
        assert!(status.success(), "deputy exited with {status:?}");
        self.respawn(extra, env).await
    }

    /// Kills this deputy with SIGKILL (no drain, no flush: a crash) and starts a new one on the
    /// same store, mock and workspace, with `env`.
    pub async fn kill_and_restart_with_env(mut self, extra: &[&str], env: &[(&str, &str)]) -> Self {
        self.child.kill().await.unwrap();
        self.respawn(extra, env).await
    }

    async fn respawn(self, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let Self { mock, workspace, home, token, .. } = self;
        Self::spawn_on(None, mock, workspace, home, token.as_deref(), extra, env).await
    }

    /// `port`: the one to listen on, when the test must know it beforehand; otherwise deputy
    /// binds port 0 and says which it got. A port found free here and handed over could be
    /// taken by another test's listener in between (a mock's, say, whose queue the requests
    /// meant for this deputy would then drain).
    async fn spawn_on(
        port: Option<u16>,
        mock: MockLlm,
        workspace: TempDir,
        home: TempDir,
        token: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
        command.args(["serve", "--http", &format!("127.0.0.1:{}", port.unwrap_or(0))]).args(extra);
        on_mock(&mut command, &mock, workspace.path(), home.path())
            .env_remove("DEPUTY_TOKEN")
            // deputy's own info lines mark lifecycle steps (serving, draining) tests wait for.
            .env("RUST_LOG", std::env::var("DEPUTY_TEST_LOG").unwrap_or_else(|_| "warn,deputy=info".into()))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(token) = token {
            command.env("DEPUTY_TOKEN", token);
        }
        with_store(command.as_std_mut(), home.path());
        let mut child = command.spawn().unwrap();
        let log = StderrLog::follow(child.stderr.take().unwrap());
        let port = match port {
            Some(port) => port,
            None => listening_port(child.id().expect("deputy was just started")).await,
        };
        // Idle connections are dropped before deputy's own idle timeout (30 s) closes them, so a
        // request is never sent on a connection the server is closing at that moment.
        let http =
            reqwest::Client::builder().no_proxy().pool_idle_timeout(Duration::from_secs(10)).build().unwrap();
        let deputy = Self { child, http, port, mock, token: token.map(str::to_owned), workspace, home, log };
        deputy.wait_ready().await;
        deputy
    }

    /// deputy's resident set size in KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|line| line.starts_with("VmRSS:")).expect("VmRSS");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// What of deputy's resident set is its executable's own pages, in KiB (the `Rss` of the
    /// mappings of the binary in `/proc/PID/smaps`): code and read-only data, clean and
    /// shared with the page cache. The debug build the tests run is several times the release
    /// binary, so a bound on the memory sessions take leaves them out.
    pub fn executable_rss_kib(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let binary = std::fs::canonicalize(env!("CARGO_BIN_EXE_deputy")).unwrap();
        let binary = binary.to_string_lossy();
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
        let mut in_binary = false;
        let mut total = 0;
        for line in smaps.lines() {
            let mut fields = line.split_whitespace();
            match fields.next() {
                // A mapping's header: `start-end perms offset dev inode [path]`.
                Some(range) if range.contains('-') && !range.ends_with(':') => {
                    in_binary = fields.nth(4).is_some_and(|path| path == binary);
                }
                Some("Rss:") if in_binary => {
                    total += fields.next().and_then(|kib| kib.parse::<u64>().ok()).unwrap_or(0)
                }
                _ => {}
            }
        }
        total
    }

    async fn wait_ready(&self) {
        for _ in 0..200 {
            if self.http.get(self.url("/healthz")).send().await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("deputy did not start serving HTTP on port {}", self.port);
    }

    /// `POST /v1/sessions {prompt}` (its first turn answered by whatever the mock has queued);
    /// the new session's id.
    pub async fn create_session(&self, prompt: &str) -> String {
        let response = self.http.post(self.url("/v1/sessions")).json(&serde_json::json!({"prompt": prompt})).send();
        let created: serde_json::Value = response.await.unwrap().json().await.unwrap();
        created["session_id"].as_str().expect("a created session's id").to_owned()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// An rmcp client on `/mcp`: `Initialize` is the 2025-11-25 session handshake, `Discover`
    /// the stateless 2026-07-28 one.
    pub async fn mcp(&self, lifecycle: ClientLifecycleMode) -> RunningService<RoleClient, RecordingClient> {
        self.mcp_with_headers(lifecycle, &[]).await
    }

    /// [`HttpDeputy::mcp`] sending `headers` with every request.
    pub async fn mcp_with_headers(
        &self,
        lifecycle: ClientLifecycleMode,
        headers: &[(&'static str, &str)],
    ) -> RunningService<RoleClient, RecordingClient> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url("/mcp"));
        for (name, value) in headers {
            config.custom_headers.insert(
                reqwest::header::HeaderName::from_static(name),
                reqwest::header::HeaderValue::from_str(value).unwrap(),
            );
        }
        if let Some(token) = &self.token {
            config = config.auth_header(token.clone());
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let client = RecordingClient::default();
        match lifecycle {
            ClientLifecycleMode::Initialize => client.serve(transport).await,
            mode => client.serve_with_lifecycle(transport, mode).await,
        }
        .expect("MCP over HTTP")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running").to_string();
        let killed = tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.unwrap();
        assert!(killed.success());
        tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await.expect("exits").unwrap()
    }
}

/// How long [`StderrLog::wait_for`] waits before failing the test instead of hanging.
const LOG_WAIT_LIMIT: Duration = Duration::from_secs(30);

/// The lines a child has written to stderr so far. Clones share them.
#[derive(Clone)]
pub struct StderrLog(watch::Receiver<Vec<String>>);

impl StderrLog {
    /// Keeps every line of `stderr`, and copies it to the test's own stderr so that a failing
    /// test still shows what deputy said.
    fn follow(stderr: ChildStderr) -> Self {
        let (lines_tx, lines_rx) = watch::channel(Vec::new());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{line}");
                lines_tx.send_modify(|all| all.push(line));
            }
        });
        Self(lines_rx)
    }

    /// Every line logged so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.borrow().clone()
    }

    /// Resolves once a line containing `needle` has been logged; panics if the child exits
    /// first or after 30 s, rather than hang.
    pub async fn wait_for(&self, needle: &str) {
        let mut lines = self.0.clone();
        let found = tokio::time::timeout(
            LOG_WAIT_LIMIT,
            lines.wait_for(|lines| lines.iter().any(|line| line.contains(needle))),
        )
        .await;
        assert!(matches!(found, Ok(Ok(_))), "deputy did not log {needle:?} within {LOG_WAIT_LIMIT:?}");
    }
}
