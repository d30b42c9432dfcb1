//! Hooks through the built binary: the config file's `[[hooks]]` run at a session's events,
//! the model being the mock LLM. A `pre_tool_use` hook refuses or rewrites a call (what it
//! decided shows on disk and in what the model is sent next), a `post_tool_use` hook rewrites
//! a result, a `turn_start` hook adds context, a hook past its timeout is killed and follows
//! its `on_error`, an interrupt kills a running hook at once, and a `url` hook gets the events
//! of a whole session, in order.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::deputy::{TestDeputy, tool_results};
use crate::common::file_in;
use crate::common::mcp_servers::{marker, processes_with};
use crate::common::mock_llm::{MockResponse, anthropic};
use crate::common::scenarios::model_writes;

/// Writes `body` as a shell script into `dir`; the `command` of a hook running it.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = file_in(dir, name, body);
    format!("[\"/bin/sh\", {:?}]", path.to_str().unwrap())
}

/// The issue's example: a `pre_tool_use` hook refuses `write_file` on `*.env` paths. The model
/// is told why, the file is untouched, and the step's other call runs.
#[tokio::test]
async fn a_pre_tool_use_hook_denies_write_file_on_env_paths() {
    let hooks = tempfile::tempdir().unwrap();
    let guard = script(
        hooks.path(),
        "guard.sh",
        r#"if grep -Eq '"path":"[^"]*\.env"'; then
  echo '{"decision": "deny", "reason": "secrets live in .env files; do not write them"}'
else
  echo '{"decision": "allow"}'
fi
"#,
    );
    let config =
        format!("[[hooks]]\nevent = \"pre_tool_use\"\nmatcher = \"write_file|edit_file\"\ncommand = {guard}\n");
    let deputy = TestDeputy::start_with_config(&config).await;
    std::fs::write(deputy.workspace.path().join("app.env"), "KEY=original\n").unwrap();
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[
            ("toolu_1", "write_file", json!({"path": "app.env", "content": "KEY=stolen\n"})),
            ("toolu_2", "write_file", json!({"path": "notes.txt", "content": "fine\n"})),
        ],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Understood."])));
    let created = deputy.ok("session_create", json!({"prompt": "set the key", "builtins": ["write_file"]})).await;
    assert_eq!(created["text"], "Understood.");

    let results = tool_results(&deputy, 1);
    assert_eq!(results[0]["is_error"], true);
    assert_eq!(results[0]["content"], "denied by hook: secrets live in .env files; do not write them");
    assert_ne!(results[1]["is_error"], true, "{results:?}");
    assert_eq!(std::fs::read_to_string(deputy.workspace.path().join("app.env")).unwrap(), "KEY=original\n");
    assert_eq!(std::fs::read_to_string(deputy.workspace.path().join("notes.txt")).unwrap(), "fine\n");
}

/// `modify`: a `pre_tool_use` hook rewrites the call's arguments (the history keeps what the
/// model sent), a `post_tool_use` hook replaces the result and adds context, and a `turn_start`
/// hook adds a text block to the prompt. Every hook reads the event on its stdin.
#[tokio::test]
async fn modify_rewrites_arguments_and_results_and_turn_start_adds_context() {
    let hooks = tempfile::tempdir().unwrap();
    let log = hooks.path().join("events.log");
    let log = log.to_str().unwrap();
    let rewrite = script(
        hooks.path(),
        "rewrite.sh",
        &format!(
            "cat >> {log}; echo >> {log}\necho '{{\"decision\": \"modify\", \"updated_arguments\": {{\"path\": \
             \"rewritten.txt\", \"content\": \"from the hook\"}}}}'\n"
        ),
    );
    let result = script(
        hooks.path(),
        "result.sh",
        &format!(
            "cat >> {log}; echo >> {log}\necho '{{\"decision\": \"modify\", \"updated_result\": \"written where \
             the hook said\", \"additional_context\": \"(checked by the operator)\"}}'\n"
        ),
    );
    let context = script(
        hooks.path(),
        "context.sh",
        &format!(
            "cat >> {log}; echo >> {log}\necho '{{\"decision\": \"allow\", \"additional_context\": \"Hook says: today is Tuesday.\"}}'\n"
        ),
    );
    let config = format!(
        "[[hooks]]\nevent = \"turn_start\"\ncommand = {context}\n\n[[hooks]]\nevent = \"pre_tool_use\"\nmatcher = \
         \"write_file\"\ncommand = {rewrite}\n\n[[hooks]]\nevent = \"post_tool_use\"\nmatcher = \"write_.*\"\ncommand = \
         {result}\n"
    );
    let deputy = TestDeputy::start_with_config(&config).await;
    let sent = json!({"path": "asked.txt", "content": "from the model\n"});
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_1", "write_file", sent.clone())])));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Done."])));
    let created = deputy.ok("session_create", json!({"prompt": "write it", "builtins": ["write_file"]})).await;
    assert_eq!(created["text"], "Done.");

    let workspace = deputy.workspace.path();
    assert!(!workspace.join("asked.txt").exists());
    assert_eq!(std::fs::read_to_string(workspace.join("rewritten.txt")).unwrap(), "from the hook");
    let results = tool_results(&deputy, 1);
    assert_eq!(results[0]["content"], "written where the hook said\n\n(checked by the operator)");
    assert_ne!(results[0]["is_error"], true);

    let requests = deputy.mock.requests();
    let prompt = &requests[0].body["messages"][0]["content"];
    let texts: Vec<&str> = prompt.as_array().unwrap().iter().map(|block| block["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["write it", "Hook says: today is Tuesday."]);
    let tool_use = &requests[1].body["messages"][1]["content"][0];
    assert_eq!(
        (&tool_use["type"], &tool_use["input"]),
        (&json!("tool_use"), &sent),
        "the history keeps the model's call"
    );

    let events: Vec<Value> =
        std::fs::read_to_string(log).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let session_id = created["session_id"].clone();
    assert_eq!(
        events[0],
        json!({"event": "turn_start", "session_id": session_id, "turn": 1, "prompt": "write it"})
    );
    assert_eq!(
        events[1],
        json!({"event": "pre_tool_use", "session_id": session_id, "turn": 1, "tool_name": "write_file",
               "tool_use_id": "toolu_1", "arguments": sent})
    );
    assert_eq!(events[2]["event"], "post_tool_use");
    assert_eq!(
        events[2]["arguments"]["path"], "rewritten.txt",
        "post_tool_use sees the arguments the tool ran with"
    );
    assert_eq!(events[2]["result"]["is_error"], false);
    assert_eq!(events.len(), 3);
}

/// A hook that hangs is killed at its timeout (with its process group) and never wedges the
/// turn: `on_error = "deny"` refuses its call, `on_error = "allow"` lets its call run.
#[tokio::test]
async fn a_hook_past_its_timeout_is_killed_and_follows_on_error() {
    let marker = marker();
    let hang = format!("[\"/bin/sh\", \"-c\", \"sleep 30; : {marker}\"]");
    let config = format!(
        "[[hooks]]\nevent = \"pre_tool_use\"\nmatcher = \"write_file\"\ncommand = {hang}\ntimeout_ms = 300\non_error = \
         \"deny\"\n\n[[hooks]]\nevent = \"pre_tool_use\"\nmatcher = \"list_dir\"\ncommand = {hang}\ntimeout_ms = \
         300\non_error = \"allow\"\n"
    );
    let deputy = TestDeputy::start_with_config(&config).await;
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
        None,
        &[
            ("toolu_1", "write_file", json!({"path": "blocked.txt", "content": "x"})),
            ("toolu_2", "list_dir", json!({"path": "."})),
        ],
    )));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Moving on."])));
    let started = Instant::now();
    let created =
        deputy.ok("session_create", json!({"prompt": "go", "builtins": ["write_file", "list_dir"]})).await;
    assert_eq!(created["text"], "Moving on.");
    assert!(started.elapsed() < Duration::from_secs(10), "the turn waited {:?}", started.elapsed());

    let results = tool_results(&deputy, 1);
    assert_eq!(results[0]["is_error"], true);
    assert_eq!(results[0]["content"], "denied by hook: hook 0 failed: timed out after 300 ms (killed)");
    assert_ne!(results[1]["is_error"], true, "on_error = allow runs the call: {results:?}");
    assert!(!deputy.workspace.path().join("blocked.txt").exists());
    assert_eq!(processes_with(&marker), Vec::<u32>::new(), "the hung hooks were killed");
}

/// The events a `url` hook test server received, and how it answers: `deny` for `write_file`,
/// `allow` for everything else.
async fn hook_server() -> (String, Arc<Mutex<Vec<Value>>>) {
    use axum::Json;
    use axum::extract::State;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(
                |State(seen): State<Arc<Mutex<Vec<Value>>>>, Json(event): Json<Value>| async move {
                    let answer = if event["tool_name"] == "write_file" {
                        json!({"decision": "deny", "reason": "the url hook says no"})
                    } else {
                        json!({"decision": "allow"})
                    };
                    seen.lock().unwrap().push(event);
                    Json(answer)
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/hook"), seen)
}

/// A `url` hook against a local server gets a whole session's events, in order, and its `deny`
/// refuses a call like a command hook's.
#[tokio::test]
async fn a_url_hook_gets_a_sessions_events_and_can_deny() {
    let (url, seen) = hook_server().await;
    let config: String =
        ["session_start", "turn_start", "pre_tool_use", "post_tool_use", "turn_end", "session_end"]
            .iter()
            .map(|event| format!("[[hooks]]\nevent = \"{event}\"\nurl = \"{url}\"\ntimeout_ms = 5000\n\n"))
            .collect();
    let deputy = TestDeputy::start_with_config(&config).await;
    model_writes(&deputy.mock, "a.txt", "x");
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Refused, then."])));
    let created = deputy.ok("session_create", json!({"prompt": "write a.txt", "builtins": ["write_file"]})).await;
    assert_eq!(created["text"], "Refused, then.");
    assert_eq!(tool_results(&deputy, 1)[0]["content"], "denied by hook: the url hook says no");
    assert!(!deputy.workspace.path().join("a.txt").exists());
    let session_id = created["session_id"].clone();
    deputy.ok("session_archive", json!({"session_id": session_id})).await;

    let seen = seen.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|event| event["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["session_start", "turn_start", "pre_tool_use", "turn_end", "session_end"]);
    assert!(seen.iter().all(|event| event["session_id"] == session_id), "{seen:?}");
    assert_eq!(seen[0], json!({"event": "session_start", "session_id": session_id}));
    assert_eq!(
        seen[3],
        json!({"event": "turn_end", "session_id": session_id, "turn": 1, "stop_reason": "end_turn"})
    );
}

/// `session_interrupt` while a hook runs: the hook is killed (with its process group) at once,
/// not at its timeout, its call is not run, and the turn ends `cancelled`.
#[tokio::test]
async fn an_interrupt_kills_a_running_hook_and_ends_the_turn() {
    let marker = marker();
    let hang = format!("[\"/bin/sh\", \"-c\", \"sleep 60; : {marker}\"]");
    let config = format!(
        "[[hooks]]\nevent = \"pre_tool_use\"\ncommand = {hang}\ntimeout_ms = 120000\non_error = \"allow\"\n"
    );
    let deputy = TestDeputy::start_with_config(&config).await;
    model_writes(&deputy.mock, "late.txt", "x");
    let created =
        deputy.ok("session_create", json!({"prompt": "go", "builtins": ["write_file"], "wait_ms": 100})).await;
    assert_eq!(created["status"], "running");
    let id = created["session_id"].clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the hook never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let started = Instant::now();
    deputy.ok("session_interrupt", json!({"session_id": id})).await;
    let read = deputy.ok("session_read", json!({"session_id": id, "wait_ms": 30_000})).await;
    assert!(started.elapsed() < Duration::from_secs(10), "the interrupt waited {:?}", started.elapsed());
    assert_eq!(read["state"]["last_turn"]["stop_reason"], "cancelled", "{read}");
    assert_eq!(processes_with(&marker), Vec::<u32>::new(), "the hook was killed");
    assert!(!deputy.workspace.path().join("late.txt").exists());
}

/// Security review 2, G2: a `pre_tool_use` hook that cannot start (a command that does not
/// exist, or a file that is not executable) denies the tool, even with `on_error = "allow"`:
/// a guard that fails to run is not a guard that said yes.
#[tokio::test]
async fn g2_a_pre_tool_use_hook_that_cannot_start_denies_whatever_on_error_says() {
    let hooks = tempfile::tempdir().unwrap();
    let not_executable = file_in(hooks.path(), "guard.sh", "#!/bin/sh\necho '{\"decision\": \"allow\"}'\n");
    for program in [Path::new("/nonexistent/deputy-guard"), not_executable.as_path()] {
        let config = format!(
            "[[hooks]]\nevent = \"pre_tool_use\"\nmatcher = \"write_file\"\non_error = \"allow\"\ncommand = [{:?}]\n",
            program.to_str().unwrap()
        );
        let deputy = TestDeputy::start_with_config(&config).await;
        deputy.mock.push(MockResponse::sse(anthropic::tool_calls(
            None,
            &[("toolu_1", "write_file", json!({"path": "pwn.txt", "content": "x"}))],
        )));
        deputy.mock.push(MockResponse::sse(anthropic::text(&["Done."])));
        let created = deputy.ok("session_create", json!({"prompt": "write", "builtins": ["write_file"]})).await;
        assert_eq!(created["text"], "Done.");
        let results = tool_results(&deputy, 1);
        assert_eq!(results[0]["is_error"], true, "{program:?}: {results:?}");
        let content = results[0]["content"].as_str().unwrap();
        assert!(content.starts_with("denied by hook: hook 0 failed: could not start"), "{program:?}: {content}");
        assert!(!deputy.workspace.path().join("pwn.txt").exists(), "{program:?}");
    }
}

/// Security review 2, G2: one model response of many calls runs at most
/// `MAX_CONCURRENT_TOOL_CALLS` (8) of them at a time. A `pre_tool_use` hook records how many
/// of its instances are running at once.
#[tokio::test]
async fn g2_many_calls_of_one_step_run_at_most_eight_at_a_time() {
    let hooks = tempfile::tempdir().unwrap();
    let running = hooks.path().join("running");
    std::fs::create_dir(&running).unwrap();
    let log = hooks.path().join("counts.log");
    let guard = script(
        hooks.path(),
        "count.sh",
        &format!(
            "touch {running}/$$\n/bin/ls {running} | /usr/bin/wc -l >> {log}\n/bin/sleep 0.3\nrm {running}/$$\necho \
             '{{\"decision\": \"allow\"}}'\n",
            running = running.display(),
            log = log.display()
        ),
    );
    let config = format!("[[hooks]]\nevent = \"pre_tool_use\"\nmatcher = \"write_file\"\ncommand = {guard}\n");
    let deputy = TestDeputy::start_with_config(&config).await;
    let calls: Vec<(String, Value)> =
        (0..24).map(|i| (format!("toolu_{i}"), json!({"path": format!("f{i}.txt"), "content": "x"}))).collect();
    let calls: Vec<(&str, &str, Value)> =
        calls.iter().map(|(id, input)| (id.as_str(), "write_file", input.clone())).collect();
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &calls)));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Done."])));
    let created = deputy.ok("session_create", json!({"prompt": "write", "builtins": ["write_file"]})).await;
    assert_eq!(created["text"], "Done.");
    for i in 0..24 {
        assert!(deputy.workspace.path().join(format!("f{i}.txt")).exists(), "f{i}.txt");
    }
    let counts: Vec<usize> =
        std::fs::read_to_string(&log).unwrap().lines().map(|line| line.trim().parse().unwrap()).collect();
    assert_eq!(counts.len(), 24);
    let most = counts.iter().max().copied().unwrap();
    assert!(most <= 8, "{most} hooks ran at once: {counts:?}");
}
