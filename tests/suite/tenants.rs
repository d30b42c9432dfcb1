//! Tenants over HTTP (security review F8), through the built binary: `[[auth.tokens]]` name
//! subjects with scopes; every session records its owner; a caller sees only its own sessions
//! (a foreign id answers `SESSION_NOT_FOUND` on every operation) unless it has `sessions:all`;
//! the shell and inline servers need the scope over HTTP; `--token` keeps every scope.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::deputy::{call_tool, error_of, ok_tool};
use crate::common::http_deputy::HttpDeputy;
use crate::common::id_of;
use crate::common::mcp_servers::bin;
use crate::common::mock_llm::{MockResponse, anthropic};

pub const ALICE: &str = "alice-token-0123456789";
pub const BOB: &str = "bob-token-0123456789ab";
const OPS: &str = "ops-token-0123456789abcdef";

/// Three subjects by digest (so a restart needs no environment): two tenants with `sessions`
/// only, and an operator who sees every session.
pub const TENANTS: &str = r#"
[[auth.tokens]]
subject = "alice"
token_sha256 = "965b04f03a8200d4bff70f6df635c1d4d3e9c9a1d164d415efc95b9304bfbaf2"
scopes = ["sessions"]
[[auth.tokens]]
subject = "bob"
token_sha256 = "9325ca38e6e02cdf7833de47c7f56eb91c36bb6447dfb8987c05cd0b700e48a7"
scopes = ["sessions"]
[[auth.tokens]]
subject = "ops"
token_sha256 = "198def7fb65832faba77a1f062df8860ee0ed05b79c6f5be881860ee7c9da86e"
scopes = ["sessions:all"]
"#;

/// An operator's token, with the admin scope.
pub const ADMIN: &str = "admin-token-0123456789abcdef";
/// Its `[[auth.tokens]]` entry, by digest.
pub const ADMIN_TOKEN: &str = r#"
[[auth.tokens]]
subject = "root"
token_sha256 = "b82c960b03eefe922830902342744b424aa2c080c8a8d4db775d181949549a6c"
scopes = ["admin"]
"#;

/// `token` creates a session over REST; its id.
async fn create(deputy: &HttpDeputy, token: &str, prompt: &str) -> String {
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let (status, created) =
        deputy.rest(Some(token), Method::POST, "/v1/sessions", Some(json!({"prompt": prompt}))).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["text"], "Hello.");
    id_of(&created)
}

/// The ids `token` lists, and the total it is told.
async fn listed(deputy: &HttpDeputy, token: &str) -> (Vec<String>, u64) {
    let (status, list) = deputy.rest(Some(token), Method::GET, "/v1/sessions", None).await;
    assert_eq!(status, 200, "{list}");
    let ids = list["sessions"].as_array().unwrap().iter().map(id_of);
    (ids.collect(), list["total"].as_u64().unwrap())
}

/// Every REST operation on session `id`, as `token`: each must answer 404 `SESSION_NOT_FOUND`.
async fn assert_foreign_over_rest(deputy: &HttpDeputy, token: &str, id: &str) {
    let calls: [(Method, String, Option<Value>); 10] = [
        (Method::GET, format!("/v1/sessions/{id}"), None),
        (Method::GET, format!("/v1/sessions/{id}?wait_ms=10"), None),
        (Method::POST, format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "mine now"}))),
        (Method::POST, format!("/v1/sessions/{id}/interrupt"), None),
        (Method::POST, format!("/v1/sessions/{id}/compact"), None),
        (Method::GET, format!("/v1/sessions/{id}/tool-outputs/toolu_1"), None),
        (Method::GET, format!("/v1/sessions/{id}/messages"), None),
        (Method::POST, format!("/v1/sessions/{id}/fork"), Some(json!({}))),
        (Method::POST, format!("/v1/sessions/{id}/rewind"), Some(json!({"to_turn": 0}))),
        (Method::DELETE, format!("/v1/sessions/{id}"), None),
    ];
    for (method, path, body) in calls {
        let (status, answer) = deputy.rest(Some(token), method.clone(), &path, body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (404, Some("SESSION_NOT_FOUND")),
            "{method} {path}: {answer}"
        );
    }
}

#[tokio::test]
async fn f8_tenants_see_only_their_own_sessions_over_rest_and_json_rpc() {
    let deputy = HttpDeputy::start_with_config(TENANTS, &[], &[]).await;
    let a = create(&deputy, ALICE, "alice's private task").await;
    let b = create(&deputy, BOB, "bob's private task").await;

    assert_eq!(listed(&deputy, ALICE).await, (vec![a.clone()], 1));
    assert_eq!(listed(&deputy, BOB).await, (vec![b.clone()], 1));
    assert_foreign_over_rest(&deputy, ALICE, &b).await;
    assert_foreign_over_rest(&deputy, BOB, &a).await;
    assert_eq!(deputy.mock.requests().len(), 2, "no foreign turn reached the model");

    // JSON-RPC goes through the same per-caller service.
    let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "session/read", "params": {"session_id": b}});
    let answer = deputy.rpc_as(ALICE, &rpc).await;
    assert_eq!(answer["error"]["data"]["code"], "SESSION_NOT_FOUND", "{answer}");

    // sessions:all sees both, and their owners; each session is intact.
    let (mut all, total) = listed(&deputy, OPS).await;
    all.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!((all, total), (both, 2));
    let (status, read) = deputy.rest(Some(OPS), Method::GET, &format!("/v1/sessions/{b}"), None).await;
    assert_eq!(
        (status, read["state"]["owner"].as_str(), read["state"]["turns"].as_u64()),
        (200, Some("bob"), Some(1))
    );

    // A wrong token or none is refused before any of this.
    assert_eq!(deputy.rest(None, Method::GET, "/v1/sessions", None).await.0, 401);
    assert_eq!(deputy.rest(Some("not-a-token-0123456789"), Method::GET, "/v1/sessions", None).await.0, 401);

    // Owners are stored: after a restart, the stored sessions are filtered the same way.
    #[cfg(feature = "session-store")]
    {
        let deputy = deputy.restart(&[]).await;
        assert_eq!(listed(&deputy, ALICE).await, (vec![a.clone()], 1));
        assert_eq!(listed(&deputy, BOB).await, (vec![b.clone()], 1));
        assert_foreign_over_rest(&deputy, ALICE, &b).await;
        assert_eq!(listed(&deputy, OPS).await.1, 2);
    }
}

#[tokio::test]
async fn f8_tenants_see_only_their_own_sessions_over_mcp_http() {
    let deputy = HttpDeputy::start_with_config(TENANTS, &[], &[]).await;
    let (alice, bob, ops) = (deputy.mcp_as(ALICE).await, deputy.mcp_as(BOB).await, deputy.mcp_as(OPS).await);
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let a = ok_tool(&alice, "session_create", json!({"prompt": "alice"})).await["session_id"].clone();
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let b = ok_tool(&bob, "session_create", json!({"prompt": "bob"})).await["session_id"].clone();

    let list = ok_tool(&alice, "session_list", json!({})).await;
    assert_eq!((list["total"].as_u64(), &list["sessions"][0]["session_id"]), (Some(1), &a), "{list}");
    for (tool, arguments) in [
        ("session_read", json!({"session_id": b})),
        ("session_turn", json!({"session_id": b, "prompt": "mine now"})),
        ("session_interrupt", json!({"session_id": b})),
        ("session_compact", json!({"session_id": b})),
        ("session_tool_output", json!({"session_id": b, "tool_use_id": "toolu_1"})),
        ("session_events", json!({"session_id": b})),
        ("session_archive", json!({"session_id": b})),
    ] {
        let (code, text) = error_of(&call_tool(&alice, tool, arguments).await);
        assert_eq!(code, "SESSION_NOT_FOUND", "{tool}: {text}");
    }
    let list = ok_tool(&ops, "session_list", json!({})).await;
    assert_eq!(list["total"], 2, "{list}");
    assert_eq!(ok_tool(&ops, "session_read", json!({"session_id": b})).await["state"]["turns"], 1);
    for client in [alice, bob, ops] {
        client.cancel().await.unwrap();
    }
}

/// Over HTTP the shell and inline servers need the token's scope (or a config `allow`); a
/// `sessions`-only token cannot enable them, and the refused command never runs. What the
/// scoped caller's shell runs is audited with its subject.
#[tokio::test]
async fn f8_only_a_scoped_token_enables_the_shell_and_inline_servers() {
    let config = format!(
        "{TENANTS}[[auth.tokens]]\nsubject = \"ci\"\ntoken_env = \"CI_TOKEN\"\nscopes = [\"sessions\", \"shell\", \"mcp:inline\"]\n"
    );
    let ci = "ci-token-0123456789abcdef";
    let deputy = HttpDeputy::start_with_config(&config, &[], &[("CI_TOKEN", ci)]).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("PWNED");
    let marking = json!({"name": "x", "command": "/bin/sh", "args": ["-c", format!("id > {}", marker.display())]});
    for body in [json!({"prompt": "hi", "shell": true}), json!({"prompt": "hi", "mcp_servers": [marking]})] {
        let (status, answer) = deputy.rest(Some(ALICE), Method::POST, "/v1/sessions", Some(body)).await;
        assert_eq!((status, answer["code"].as_str()), (403, Some("POLICY_DENIED")), "{answer}");
    }
    assert!(!marker.exists(), "the refused server's command ran");

    let calls = [("toolu_1", "shell", json!({"command": "echo audited-command"}))];
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &calls)));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Ran it."])));
    let (status, answer) =
        deputy.rest(Some(ci), Method::POST, "/v1/sessions", Some(json!({"prompt": "hi", "shell": true}))).await;
    assert_eq!((status, answer["text"].as_str()), (201, Some("Ran it.")), "{answer}");
    deputy.log.wait_for("audited-command").await;
    let line = deputy.log.lines().into_iter().find(|line| line.contains("audited-command")).unwrap();
    assert!(line.contains("deputy::audit") && line.contains("subject=ci"), "{line}");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["Server ready."])));
    let everything = json!({"name": "everything", "command": bin("mcp-server-everything"), "args": ["stdio"]});
    let body = json!({"prompt": "hi", "mcp_servers": [everything]});
    let (status, answer) = deputy.rest(Some(ci), Method::POST, "/v1/sessions", Some(body)).await;
    assert_eq!((status, answer["text"].as_str()), (201, Some("Server ready.")), "{answer}");
    deputy.log.wait_for("inline_mcp_server").await;
}

/// `--token` (`DEPUTY_TOKEN`) is the local user with every scope: today's deployments keep
/// their shell and inline servers, and see every session.
#[tokio::test]
async fn f8_the_single_token_keeps_every_scope() {
    let token = "legacy-token-0123456789";
    let deputy = HttpDeputy::start_with_token(Some(token), &[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Shell ready."])));
    let body = json!({"prompt": "hi", "shell": true});
    let (status, answer) = deputy.rest(Some(token), Method::POST, "/v1/sessions", Some(body)).await;
    assert_eq!((status, answer["text"].as_str()), (201, Some("Shell ready.")), "{answer}");
    let (_, list) = deputy.rest(Some(token), Method::GET, "/v1/sessions", None).await;
    assert_eq!(list["sessions"][0]["owner"], "local", "{list}");
}

/// G10: a legacy `/mcp` transport session (`Mcp-Session-Id`) belongs to the subject that opened
/// it. Another subject presenting its id gets 404 (as for an unknown session, which is what the
/// MCP spec prescribes) on every method: no tool calls through it, no answers to its server
/// requests (an approval elicitation), no standalone stream of its notifications, no DELETE;
/// the owner's session keeps working.
#[tokio::test]
async fn g10_an_mcp_transport_session_is_bound_to_the_subject_that_opened_it() {
    let deputy = HttpDeputy::start_with_config(TENANTS, &[], &[]).await;
    let send = |token: &str, method: Method, session: Option<&str>, body: Option<Value>| {
        let mut request = deputy
            .http
            .request(method, deputy.url("/mcp"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let response = send(ALICE, Method::POST, None, Some(initialize)).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    drop(response);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(send(ALICE, Method::POST, Some(&session), Some(initialized)).await.unwrap().status().as_u16(), 202);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let mine = send(ALICE, Method::POST, Some(&session), Some(list.clone())).await.unwrap();
    assert_eq!(mine.status().as_u16(), 200);
    drop(mine);

    let answer =
        json!({"jsonrpc": "2.0", "id": 0, "result": {"action": "accept", "content": {"decision": "allow"}}});
    let attempts: [(Method, Option<Value>); 4] = [
        (Method::POST, Some(list.clone())),
        (Method::POST, Some(answer)),
        (Method::GET, None),
        (Method::DELETE, None),
    ];
    for (method, body) in attempts {
        let refused = send(BOB, method.clone(), Some(&session), body.clone()).await.unwrap();
        assert_eq!(refused.status().as_u16(), 404, "bob {method} {body:?} with alice's Mcp-Session-Id");
    }
    let still = send(ALICE, Method::POST, Some(&session), Some(list)).await.unwrap();
    assert_eq!(still.status().as_u16(), 200, "alice's transport session is intact");
}

/// G11: the pool of legacy `/mcp` transport sessions is shared, so one subject holds at most
/// its share (`--max-mcp-sessions-per-subject`): alice's third `initialize` answers 429
/// `TOO_MANY_MCP_SESSIONS` while bob still opens his; closing one gives alice her place back.
#[tokio::test]
async fn g11_one_subject_holds_at_most_its_share_of_mcp_transport_sessions() {
    let extra = ["--max-mcp-sessions", "6", "--max-mcp-sessions-per-subject", "2"];
    let deputy = HttpDeputy::start_with_config(TENANTS, &extra, &[]).await;
    let open = |token: &'static str| {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}});
        deputy
            .http
            .post(deputy.url("/mcp"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
    };
    let mut alices = Vec::new();
    for _ in 0..2 {
        let response = open(ALICE).await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        alices.push(response.headers()["mcp-session-id"].to_str().unwrap().to_owned());
    }
    let refused = open(ALICE).await.unwrap();
    assert_eq!(refused.status().as_u16(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "TOO_MANY_MCP_SESSIONS", "{body}");
    assert!(body["message"].as_str().unwrap().contains("--max-mcp-sessions-per-subject"), "{body}");
    for _ in 0..2 {
        assert_eq!(open(BOB).await.unwrap().status().as_u16(), 200, "bob's share is his");
    }
    let closed = deputy
        .http
        .delete(deputy.url("/mcp"))
        .bearer_auth(ALICE)
        .header("mcp-session-id", &alices[0])
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status().as_u16(), 204);
    assert_eq!(open(ALICE).await.unwrap().status().as_u16(), 200, "a closed session frees its place");
}

/// G12: waiting mail is bounded per owner as well as per session, so one tenant cannot fill
/// the server's memory through many sessions' inboxes: with a 100,000-byte quota, alice's
/// second 60,000-byte message (to another of her sessions) answers 429 `SESSION_INBOX_FULL`
/// naming `max_waiting_bytes_per_owner`, bob's goes through, and alice sends again once her
/// first session has read its mail.
#[tokio::test]
async fn g12_waiting_mail_is_bounded_per_owner_across_its_sessions() {
    let config = format!("{TENANTS}\n[inbox]\nmax_waiting_bytes_per_owner = 100000\n");
    let deputy = HttpDeputy::start_with_config(&config, &[], &[]).await;
    let body = "x".repeat(60_000);
    let deputy = &deputy;
    let send = |token: &'static str, id: String| {
        let body = json!({"message": body});
        async move { deputy.rest(Some(token), Method::POST, &format!("/v1/sessions/{id}/inbox"), Some(body)).await }
    };
    let (alice_one, alice_two, bobs) =
        (create(deputy, ALICE, "one").await, create(deputy, ALICE, "two").await, create(deputy, BOB, "b").await);
    let (status, sent) = send(ALICE, alice_one.clone()).await;
    assert_eq!(status, 202, "{sent}");
    let (status, refused) = send(ALICE, alice_two.clone()).await;
    assert_eq!((status, refused["code"].as_str()), (429, Some("SESSION_INBOX_FULL")), "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("max_waiting_bytes_per_owner"), "{refused}");
    let (status, sent) = send(BOB, bobs).await;
    assert_eq!(status, 202, "bob's quota is his own: {sent}");

    deputy.mock.push(MockResponse::sse(anthropic::text(&["read it"])));
    let turn = json!({"prompt": "read your mail"});
    let (status, read) =
        deputy.rest(Some(ALICE), Method::POST, &format!("/v1/sessions/{alice_one}/turns"), Some(turn)).await;
    assert_eq!((status, read["text"].as_str()), (200, Some("read it")), "{read}");
    let (status, sent) = send(ALICE, alice_two).await;
    assert_eq!(status, 202, "a read message leaves the owner's count: {sent}");
}

/// G12, the store's side: one owner has at most `[sessions] max_open_per_owner` sessions not
/// archived. Alice's third answers 403 `POLICY_DENIED`; bob still creates his; archiving one
/// gives alice her place back.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn g12_sessions_not_archived_are_bounded_per_owner() {
    let config = format!("{TENANTS}\n[sessions]\nmax_open_per_owner = 2\n");
    let deputy = HttpDeputy::start_with_config(&config, &[], &[]).await;
    let first = create(&deputy, ALICE, "one").await;
    create(&deputy, ALICE, "two").await;
    let (status, refused) =
        deputy.rest(Some(ALICE), Method::POST, "/v1/sessions", Some(json!({"prompt": "three"}))).await;
    assert_eq!((status, refused["code"].as_str()), (403, Some("POLICY_DENIED")), "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("max_open_per_owner"), "{refused}");
    create(&deputy, BOB, "bob's own").await;
    let (status, _) = deputy.rest(Some(ALICE), Method::DELETE, &format!("/v1/sessions/{first}"), None).await;
    assert_eq!(status, 200);
    create(&deputy, ALICE, "three, after an archive").await;
}

/// Viewers: alice's read-only token and an auditor who reads every session; neither acts.
const VIEWERS: &str = r#"
[[auth.tokens]]
subject = "alice"
token_sha256 = "1d340de7cdec7e83f000da55c95aaa111f7c393c48ec578bc231fbbf306b2004"
scopes = ["sessions:read"]
[[auth.tokens]]
subject = "auditor"
token_sha256 = "f54bcd5121e1f2d396484aa3fa36a67cd009af3e3b66d42f0fc753005661b972"
scopes = ["sessions:read_all"]
"#;
const ALICE_VIEWER: &str = "viewer-alice-0123456789";
const AUDITOR: &str = "auditor-token-0123456789";

#[tokio::test]
async fn viewers_read_what_their_scope_shows_and_act_on_nothing() {
    let deputy = HttpDeputy::start_with_config(&format!("{TENANTS}{VIEWERS}"), &[], &[]).await;
    let a = create(&deputy, ALICE, "alice's task").await;
    let b = create(&deputy, BOB, "bob's task").await;

    // sessions:read: alice's own sessions, read, listed, their events and messages.
    assert_eq!(listed(&deputy, ALICE_VIEWER).await, (vec![a.clone()], 1));
    for path in
        [format!("/v1/sessions/{a}"), format!("/v1/sessions/{a}/events"), format!("/v1/sessions/{a}/messages")]
    {
        let (status, answer) = deputy.rest(Some(ALICE_VIEWER), Method::GET, &path, None).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    // ... bob's are as absent as ever.
    let (status, _) = deputy.rest(Some(ALICE_VIEWER), Method::GET, &format!("/v1/sessions/{b}"), None).await;
    assert_eq!(status, 404);

    // sessions:read_all: every session, listed and read.
    let (mut all, total) = listed(&deputy, AUDITOR).await;
    all.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!((all, total), (both, 2));
    let (status, read) = deputy.rest(Some(AUDITOR), Method::GET, &format!("/v1/sessions/{b}"), None).await;
    assert_eq!((status, read["state"]["owner"].as_str()), (200, Some("bob")));

    // Neither acts: every action is POLICY_DENIED, on any session (unknown ones too).
    for (token, id) in [(ALICE_VIEWER, &a), (AUDITOR, &b), (AUDITOR, &"nope".to_owned())] {
        let actions: [(Method, String, Option<Value>); 7] = [
            (Method::POST, format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "act"}))),
            (Method::POST, format!("/v1/sessions/{id}/interrupt"), None),
            (Method::POST, format!("/v1/sessions/{id}/compact"), None),
            (Method::POST, format!("/v1/sessions/{id}/fork"), Some(json!({}))),
            (Method::POST, format!("/v1/sessions/{id}/rewind"), Some(json!({"to_turn": 0}))),
            (Method::DELETE, format!("/v1/sessions/{id}"), None),
            (Method::POST, "/v1/sessions".to_owned(), Some(json!({"prompt": "a new one"}))),
        ];
        for (method, path, body) in actions {
            let (status, answer) = deputy.rest(Some(token), method.clone(), &path, body).await;
            assert_eq!(
                (status, answer["code"].as_str()),
                (403, Some("POLICY_DENIED")),
                "{method} {path}: {answer}"
            );
        }
    }
    let send = json!({"message": "hello"});
    let (status, _) =
        deputy.rest(Some(AUDITOR), Method::POST, &format!("/v1/sessions/{b}/inbox"), Some(send)).await;
    assert_eq!(status, 403);
    assert_eq!(deputy.mock.requests().len(), 2, "no viewer's action reached the model");
}

/// `token` creates a session over REST with `labels`; its id.
async fn create_labelled(deputy: &HttpDeputy, token: &str, prompt: &str, labels: Value) -> String {
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Done."])));
    let body = json!({"prompt": prompt, "labels": labels});
    let (status, created) = deputy.rest(Some(token), Method::POST, "/v1/sessions", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    id_of(&created)
}

/// The list's filters apply on the server, before paging, over REST and JSON-RPC: a label
/// (key or key=value), words of the title, a status, and an owner for a caller who reads every
/// session; another owner's list is refused to one who does not.
#[tokio::test]
async fn lists_filter_by_label_title_status_and_owner_before_paging() {
    let deputy = HttpDeputy::start_with_config(TENANTS, &[], &[]).await;
    let core_parser = create_labelled(&deputy, ALICE, "Fix the parser", json!({"team": "core"})).await;
    let web_parser = create_labelled(&deputy, ALICE, "Parser docs for the site", json!({"team": "web"})).await;
    let plain = create_labelled(&deputy, ALICE, "Tidy up", json!({})).await;
    let bobs = create_labelled(&deputy, BOB, "Fix bob's parser", json!({"team": "core"})).await;

    let list = |token: &'static str, query: &'static str| {
        let deputy = &deputy;
        async move {
            let (status, list) =
                deputy.rest(Some(token), Method::GET, &format!("/v1/sessions?{query}"), None).await;
            assert_eq!(status, 200, "{query}: {list}");
            let ids: Vec<String> = list["sessions"].as_array().unwrap().iter().map(id_of).collect();
            (ids, list["total"].as_u64().unwrap(), list["next_cursor"].as_str().map(str::to_owned))
        }
    };
    assert_eq!(list(ALICE, "label=team").await.0, vec![web_parser.clone(), core_parser.clone()]);
    assert_eq!(list(ALICE, "label=team%3Dcore").await.0, vec![core_parser.clone()]);
    assert_eq!(list(ALICE, "title=PARSER").await.0, vec![web_parser.clone(), core_parser.clone()]);
    assert_eq!(list(ALICE, "title=parser&label=team%3Dweb").await.0, vec![web_parser.clone()]);
    assert_eq!(list(ALICE, "status=idle").await.1, 3);
    assert_eq!(list(ALICE, "status=running").await, (vec![], 0, None));

    // Pages and totals count the matches only.
    let (first, total, cursor) = list(ALICE, "title=parser&limit=1").await;
    assert_eq!((first, total), (vec![web_parser.clone()], 2));
    let cursor = cursor.expect("a second page");
    let (status, second) = deputy
        .rest(Some(ALICE), Method::GET, &format!("/v1/sessions?title=parser&limit=1&cursor={cursor}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(second["sessions"][0]["session_id"], json!(core_parser));
    assert!(second.get("next_cursor").is_none(), "{second}");

    // An owner: any for sessions:all, only one's own otherwise.
    assert_eq!(list(OPS, "label=team%3Dcore").await.1, 2);
    assert_eq!(list(OPS, "label=team%3Dcore&owner=bob").await.0, vec![bobs.clone()]);
    assert_eq!(list(ALICE, "owner=alice").await.1, 3);
    let (status, refused) = deputy.rest(Some(ALICE), Method::GET, "/v1/sessions?owner=bob", None).await;
    assert_eq!((status, refused["code"].as_str()), (403, Some("POLICY_DENIED")), "{refused}");
    let (status, refused) = deputy.rest(Some(ALICE), Method::GET, "/v1/sessions?status=sleeping", None).await;
    assert_eq!((status, refused["code"].as_str()), (400, Some("INVALID_REQUEST")), "{refused}");

    // JSON-RPC takes the same filters.
    let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {"title": "tidy"}});
    let answer = deputy.rpc_as(ALICE, &rpc).await;
    assert_eq!(answer["result"]["sessions"][0]["session_id"], json!(plain), "{answer}");
    assert_eq!(answer["result"]["total"], 1);

    // Archived sessions are listed by their status (with a store).
    #[cfg(feature = "session-store")]
    {
        let (status, _) = deputy.rest(Some(ALICE), Method::DELETE, &format!("/v1/sessions/{plain}"), None).await;
        assert_eq!(status, 200);
        assert_eq!(list(ALICE, "status=archived").await.0, vec![plain.clone()]);
        assert_eq!(list(ALICE, "status=idle").await.1, 2);
        // Stored (not live) sessions are filtered the same way after a restart.
        let deputy = deputy.restart(&[]).await;
        let (status, list) = deputy.rest(Some(ALICE), Method::GET, "/v1/sessions?label=team%3Dcore", None).await;
        assert_eq!((status, list["total"].as_u64()), (200, Some(1)), "{list}");
        assert_eq!(list["sessions"][0]["session_id"], json!(core_parser));
    }
}
