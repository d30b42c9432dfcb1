//! deputy's stdio transport seen as raw JSON-RPC lines, the way a careless client writes them:
//! malformed frames, unknown methods and unknown tools must never kill the server.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

struct RawDeputy {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl RawDeputy {
    fn spawn() -> Self {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
            .args(["serve", "--ephemeral"])
            .env("XDG_CONFIG_HOME", "/nonexistent")
            .env("RUST_LOG", "off")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, stdin, stdout }
    }

    async fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends `initialize` (id 1, protocol 2025-11-25); its answer is the next response.
    async fn send_initialize(&mut self) {
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
        self.send(&initialize.to_string()).await;
    }

    /// The next JSON-RPC message with an id (responses), skipping notifications.
    async fn response(&mut self) -> Value {
        loop {
            let line = self.stdout.next_line().await.unwrap().expect("deputy closed stdout");
            let message: Value = serde_json::from_str(&line).expect("stdout carries only JSON-RPC");
            if message.get("id").is_some() {
                return message;
            }
        }
    }
}

#[tokio::test]
async fn malformed_frames_never_kill_the_server() {
    let mut deputy = RawDeputy::spawn();
    deputy.send_initialize().await;
    let reply = deputy.response().await;
    assert_eq!(reply["result"]["serverInfo"]["name"], "deputy");
    deputy.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;

    for garbage in ["{not json", "", "[]", r#"{"jsonrpc":"2.0","id":99}"#, "\u{0}\u{1}binary"] {
        deputy.send(garbage).await;
    }
    deputy.send(r#"{"jsonrpc":"2.0","id":2,"method":"no/such_method"}"#).await;
    let unknown_method = deputy.response().await;
    assert_eq!(unknown_method["id"], 2);
    assert!(unknown_method["error"]["code"].is_i64());

    let unknown_tool = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "no_such_tool", "arguments": {}}});
    deputy.send(&unknown_tool.to_string()).await;
    let reply = deputy.response().await;
    assert_eq!((reply["id"].as_i64(), reply["error"]["code"].as_i64()), (Some(3), Some(-32602)));

    let wrong_types = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "session_read", "arguments": {"session_id": ["not", "a", "string"]}}});
    deputy.send(&wrong_types.to_string()).await;
    let reply = deputy.response().await;
    assert_eq!(reply["result"]["isError"], true);
    assert_eq!(reply["result"]["_meta"]["deputy/error"]["code"], "INVALID_REQUEST");
    assert!(reply["result"].get("structuredContent").is_none(), "an error has no structured content: {reply}");

    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "session_list", "arguments": {}}});
    deputy.send(&list.to_string()).await;
    let reply = deputy.response().await;
    assert_eq!(reply["result"]["structuredContent"]["total"], 0, "still serving: {reply}");

    // Closing stdin ends the server cleanly.
    drop(deputy.stdin);
    let status = deputy.child.wait().await.unwrap();
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn sigterm_ends_the_stdio_server_cleanly() {
    let mut deputy = RawDeputy::spawn();
    deputy.send_initialize().await;
    assert_eq!(deputy.response().await["result"]["serverInfo"]["name"], "deputy");
    let pid = deputy.child.id().unwrap().to_string();
    assert!(tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.unwrap().success());
    let status =
        tokio::time::timeout(std::time::Duration::from_secs(30), deputy.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exit status {status:?}");
}
