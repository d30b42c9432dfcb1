//! A PostgreSQL store through the built binary (`--store postgres://…`), on the machine's
//! database (`DEPUTY_TEST_POSTGRES`, each test in a schema of its own): every deputy process
//! opens it directly, with no background server between, and sessions outlive the process.

use std::process::Stdio;

use reqwest::Method;
use serde_json::json;

use crate::common::database::TestDatabase;
use crate::common::deputy::{RecordingClient, connect, on_mock};
use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic};

/// `[store] key_file` in `dir`, for every process of one test.
fn key_config(dir: &std::path::Path) -> String {
    format!("[store]\nkey_file = {:?}\n", dir.join("keys").join("store.key"))
}

#[tokio::test]
async fn a_database_store_is_shared_by_every_process_and_outlives_them() {
    let Some(database) = TestDatabase::create().await else { return };
    let keys = tempfile::tempdir().unwrap();
    let config = key_config(keys.path());
    let store = ["--store", database.url.as_str()];
    let deputy = HttpDeputy::start_with_config(&config, &store, &[]).await;
    assert!(keys.path().join("keys/store.key").exists(), "the key file is where [store] key_file says");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let (status, created) = deputy
        .rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "hi", "labels": {"team": "core"}})))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    let stored: i64 = database
        .client()
        .await
        .query_one("SELECT count(*) FROM sessions WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 1, "the session is a row of the database");

    // The command line opens the database itself while the server runs: no lock, no
    // background server.
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["--store", &database.url, "sessions", "list", "--json"])
        .env("XDG_CONFIG_HOME", deputy.home.path())
        .env_remove("DEPUTY_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["sessions"][0]["session_id"], json!(id), "{listed}");

    // So does `serve` over stdio: it serves the same sessions itself.
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_deputy"));
    command.args(["serve", "--store", &database.url]);
    on_mock(&mut command, &deputy.mock, deputy.workspace.path(), deputy.home.path());
    let (client, mut child) =
        connect(&RecordingClient::default(), command, rmcp::ClientLifecycleMode::Initialize).await;
    let read = crate::common::deputy::ok_tool(&client, "session_read", json!({"session_id": id})).await;
    assert_eq!(read["state"]["labels"]["team"], "core", "{read}");
    client.cancel().await.unwrap();
    assert!(child.wait().await.unwrap().success());
    assert!(!deputy.home.path().join("sessions.redb").exists(), "no redb file beside");

    // A new server process on the same database continues the session.
    let deputy = deputy.restart(&store).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Again."])));
    let (status, turn) =
        deputy.rest(None, Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "more"}))).await;
    assert_eq!((status, turn["text"].as_str()), (200, Some("Again.")), "{turn}");
    let (_, read) = deputy.rest(None, Method::GET, &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(read["state"]["turns"], 2, "{read}");
    let sent = deputy.mock.requests().last().unwrap().body.to_string();
    assert!(sent.contains("Hello.") && sent.contains("more"), "the second turn saw the first: {sent}");
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error_without_its_password() {
    let home = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .args(["--store", "postgres://deputy:hunter2@127.0.0.1:1/none", "sessions", "list"])
        .env("XDG_CONFIG_HOME", home.path())
        .env("HOME", home.path())
        .env_remove("DEPUTY_CONFIG")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("postgres://deputy:***@127.0.0.1:1/none") && stderr.contains("refused"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
