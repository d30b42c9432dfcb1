//! Secrets through the built binary (security review F9, F12): an inline MCP server's `env`
//! and `headers` values reach the server, and nothing else — not `session_read`,
//! `session_list`, the history, an error, deputy's debug log or the store file's bytes — and
//! no child inherits deputy's token or the providers' API keys.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mcp_servers::bin;
use crate::common::mock_llm::{MockResponse, anthropic};

const ENV_SECRET: &str = "s3cr3t-value-env-7f3a9c";
const HEADER_SECRET: &str = "s3cr3t-value-header-2b8e1d";
const TOKEN: &str = "deputy-token-f12-91c4e0";

async fn send(deputy: &HttpDeputy, request: reqwest::RequestBuilder) -> (u16, String) {
    let response = request.bearer_auth(TOKEN).timeout(Duration::from_secs(60)).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap_or_else(|err| panic!("{}: {err}", deputy.port)))
}

/// A stdio MCP server (`server-everything`) behind `sh`, which first writes its environment
/// to `dump`.
fn env_dumping_server(name: &str, dump: &std::path::Path, env: Value) -> Value {
    let script = format!("env > '{}'; exec '{}' stdio", dump.display(), bin("mcp-server-everything"));
    json!({"name": name, "command": "sh", "args": ["-c", script], "env": env})
}

#[tokio::test]
async fn f9_inline_mcp_secrets_reach_the_server_and_no_view_log_error_or_store_byte() {
    // The inline HTTP server is the mock on loopback, which inline servers may reach only when
    // the operator allows private addresses (security review F6).
    // The sandbox is off: the server reports its environment in a file of the test's, which a
    // sandboxed server could not write (tests/suite/sandbox.rs covers the sandbox).
    let deputy = HttpDeputy::start_with_config(
        "[policy]\ninline_mcp_private_urls = \"allow\"\n[sandbox]\nmode = \"off\"\n",
        &[],
        &[("RUST_LOG", "debug"), ("DEPUTY_TOKEN", TOKEN)],
    )
    .await;
    let scratch = tempfile::tempdir().unwrap();
    let dump = scratch.path().join("child_env.txt");

    // A stdio server with a secret env value: created, and its child has the value.
    deputy.mock.push(MockResponse::sse(anthropic::text(&["ok"])));
    let server = env_dumping_server("envsrv", &dump, json!({"API_SECRET": ENV_SECRET}));
    let create =
        deputy.http.post(deputy.url("/v1/sessions")).json(&json!({"prompt": "hi", "mcp_servers": [server]}));
    let (status, created) = send(&deputy, create).await;
    assert!(status < 300, "{status}: {created}");
    let session_id = id_of(&serde_json::from_str::<Value>(&created).unwrap());
    let child_env = std::fs::read_to_string(&dump).unwrap();
    assert!(child_env.lines().any(|line| line == format!("API_SECRET={ENV_SECRET}")), "{child_env}");

    // An HTTP server with a secret header value: the request carries it (the mock answers 500,
    // so the session is refused), and the error does not.
    let web = json!({"name": "web", "url": deputy.mock.base_url() + "/mcp",
                     "headers": {"Authorization": format!("Bearer {HEADER_SECRET}")}});
    let create = deputy.http.post(deputy.url("/v1/sessions")).json(&json!({"prompt": "hi", "mcp_servers": [web]}));
    let (status, refused) = send(&deputy, create).await;
    assert!(status >= 400, "{status}: {refused}");
    let sent =
        deputy.mock.requests().into_iter().find(|request| request.path == "/mcp").expect("a request to /mcp");
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {HEADER_SECRET}").as_str()));

    let read = send(&deputy, deputy.http.get(deputy.url(&format!("/v1/sessions/{session_id}")))).await.1;
    let list = send(&deputy, deputy.http.get(deputy.url("/v1/sessions"))).await.1;
    let history =
        send(&deputy, deputy.http.get(deputy.url(&format!("/v1/sessions/{session_id}/messages")))).await.1;
    assert!(read.contains(&session_id) && list.contains(&session_id), "{read}\n{list}");
    let mut shown = vec![("create", created), ("refused create", refused), ("read", read), ("list", list)];
    shown.push(("history", history));
    let log = deputy.log.clone();
    let status = {
        let mut deputy = deputy;
        let status = deputy.terminate().await;
        // Everything it logged while it handled the secrets (and since, up to its exit).
        shown.push(("stderr (RUST_LOG=debug)", log.lines().join("\n")));
        if cfg!(feature = "session-store") {
            let store = std::fs::read(deputy.home.path().join("sessions.redb")).unwrap();
            shown.push(("store file", String::from_utf8_lossy(&store).into_owned()));
            let key = std::fs::metadata(deputy.home.path().join("sessions.redb.key")).unwrap();
            assert_eq!(std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777, 0o600);
            assert_eq!(key.len(), 32);
        }
        status
    };
    assert!(status.success(), "{status:?}");
    assert!(shown.iter().any(|(what, text)| *what == "stderr (RUST_LOG=debug)" && text.contains("DEBUG")));
    for (what, text) in &shown {
        for secret in [ENV_SECRET, HEADER_SECRET] {
            assert!(!text.contains(secret), "{secret} appears in the {what}:\n{text}");
        }
    }
}

#[tokio::test]
async fn f12_shell_commands_and_mcp_children_get_neither_deputys_token_nor_provider_keys() {
    let scratch = tempfile::tempdir().unwrap();
    // The sandbox is off: both children report their environment in a file of the test's,
    // which sandboxed ones could not write (tests/suite/sandbox.rs covers the sandbox).
    let config = scratch.path().join("config.toml");
    std::fs::write(&config, "[sandbox]\nmode = \"off\"\n").unwrap();
    let deputy =
        HttpDeputy::start_with_token_and_env(Some(TOKEN), &[], &[("DEPUTY_CONFIG", config.to_str().unwrap())])
            .await;
    let dump = scratch.path().join("mcp_env.txt");
    let shell_dump = scratch.path().join("shell_env.txt");
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[("toolu_1", "shell", json!({"command": format!("env > '{}'", shell_dump.display())}))],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["done"])));
    let server = env_dumping_server("envsrv", &dump, json!({"OWN_VARIABLE": "for-the-server"}));
    let body = json!({"prompt": "run it", "shell": true, "mcp_servers": [server]});
    let (status, created) = send(&deputy, deputy.http.post(deputy.url("/v1/sessions")).json(&body)).await;
    assert!(status < 300, "{status}: {created}");

    for (who, path) in [("the MCP server", &dump), ("the shell command", &shell_dump)] {
        let env = std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{who} wrote no env: {err}"));
        let names: Vec<&str> = env.lines().filter_map(|line| line.split_once('=').map(|(name, _)| name)).collect();
        assert!(names.contains(&"PATH"), "{who}: {names:?}");
        for forbidden in ["DEPUTY_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL"] {
            assert!(!names.contains(&forbidden), "{who} inherited {forbidden}: {names:?}");
        }
        assert!(!env.contains(TOKEN), "{who} got the token");
    }
    assert!(std::fs::read_to_string(&dump).unwrap().contains("OWN_VARIABLE=for-the-server"));
}
