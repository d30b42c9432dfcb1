//! Named agents through the built binary: a profile file gives a session its system prompt,
//! model and tools, the call's own fields override it, an unknown name lists the known ones;
//! an edit is a new version while an existing session keeps its own (across a restart); a
//! malformed file is listed as invalid and stops nothing; `delegate {agent}` makes a child from
//! a profile within its parent's tools; workspace profiles count only where the operator opts
//! in; MCP resources, REST, JSON-RPC and the CLI list the same agents.

use serde_json::{Value, json};

use crate::common::deputy::TestDeputy;
use crate::common::http_deputy::{HttpDeputy, rpc_request};
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, RecordedRequest, anthropic};

const REVIEWER: &str = "---\nname: reviewer\ndescription: Reviews a change for bugs.\ntools: Read, Grep, Write\n\
                        model: anthropic:claude-profile\n---\n\nYou review code and say what is wrong.\n";

fn write_profile(home: &std::path::Path, file: &str, text: &str) {
    let dir = home.join("deputy").join("agents");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(file), text).unwrap();
}

fn tool_names(request: &RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect()
}

/// `deputy agents ARGS` on `home`'s config and `workspace`: its status and stdout.
fn agents_cli(home: &std::path::Path, workspace: &std::path::Path, args: &[&str]) -> (i32, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_deputy"))
        .arg("agents")
        .args(args)
        .env("XDG_CONFIG_HOME", home)
        .env("DEPUTY_WORKSPACE", workspace)
        .env_remove("DEPUTY_CONFIG")
        .output()
        .expect("deputy agents");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[tokio::test]
async fn a_profile_gives_its_prompt_model_and_tools_and_the_call_overrides_it() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    write_profile(deputy.home.path(), "reviewer.md", REVIEWER);

    let created = deputy.ok("session_create", json!({"agent": "reviewer", "prompt": "look at main.rs"})).await;
    let request = &deputy.mock.requests()[0];
    assert_eq!(request.body["model"], "claude-profile");
    assert!(
        request.system_text().starts_with("You review code and say what is wrong."),
        "{}",
        request.system_text()
    );
    let mut tools = tool_names(request);
    tools.sort();
    assert_eq!(tools, ["read_file", "search", "write_file"], "Read, Grep and Write, and nothing else");
    let view = deputy.ok("session_read", json!({"session_id": id_of(&created)})).await;
    let agent = &view["state"]["agent"];
    assert_eq!(agent["name"], "reviewer", "{view}");
    assert_eq!(agent["version"].as_str().map(str::len), Some(16), "{view}");

    // Fields of the call win over the profile's.
    deputy
        .ok(
            "session_create",
            json!({"agent": "reviewer", "prompt": "hi", "model": "anthropic:claude-other", "system_prompt": "Be brief.",
                   "builtins": ["list_dir"]}),
        )
        .await;
    let request = &deputy.mock.requests()[1];
    assert_eq!(request.body["model"], "claude-other");
    assert!(request.system_text().starts_with("Be brief."), "{}", request.system_text());
    assert_eq!(tool_names(request), ["list_dir"]);

    let (code, message) = deputy.err("session_create", json!({"agent": "nobody", "prompt": "hi"})).await;
    assert_eq!(code, "INVALID_REQUEST");
    assert!(message.contains("known: reviewer"), "{message}");

    // The client's model reads the agents in session_create's description.
    let tools = deputy.client.list_all_tools().await.unwrap();
    let create = tools.iter().find(|tool| tool.name == "session_create").unwrap();
    let description = create.description.as_deref().unwrap_or_default();
    assert!(description.contains("- reviewer: Reviews a change for bugs."), "{description}");
    assert!(!tools.iter().any(|tool| tool.name.starts_with("agent_")), "agents are resources, not tools");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn an_edited_profile_is_a_new_version_and_a_session_keeps_its_own_across_a_restart() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    write_profile(deputy.home.path(), "reviewer.md", REVIEWER);
    let first = id_of(&deputy.ok("session_create", json!({"agent": "reviewer", "prompt": "one"})).await);
    let version = |view: &Value| view["state"]["agent"]["version"].as_str().unwrap().to_owned();
    let v1 = version(&deputy.ok("session_read", json!({"session_id": first})).await);

    write_profile(
        deputy.home.path(),
        "reviewer.md",
        &REVIEWER.replace("say what is wrong", "praise what is right"),
    );
    let second = id_of(&deputy.ok("session_create", json!({"agent": "reviewer", "prompt": "two"})).await);
    let v2 = version(&deputy.ok("session_read", json!({"session_id": second})).await);
    assert_ne!(v1, v2, "an edited file is a new version");
    assert!(deputy.mock.requests()[1].system_text().contains("praise what is right"));

    let deputy = deputy.restart().await;
    assert_eq!(version(&deputy.ok("session_read", json!({"session_id": first})).await), v1);
    deputy.ok("session_turn", json!({"session_id": first, "prompt": "again"})).await;
    let last = deputy.mock.requests().last().cloned().unwrap();
    assert!(last.system_text().contains("say what is wrong"), "the session keeps the profile it was made from");
}

#[tokio::test]
async fn a_malformed_profile_is_listed_invalid_and_stops_nothing() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    write_profile(deputy.home.path(), "reviewer.md", REVIEWER);
    write_profile(deputy.home.path(), "broken.md", "---\nname: broken\ndescription: d\nshel: true\n---\n");

    deputy.ok("session_create", json!({"agent": "reviewer", "prompt": "still works"})).await;
    let (code, message) = deputy.err("session_create", json!({"agent": "broken", "prompt": "hi"})).await;
    assert_eq!(code, "INVALID_REQUEST");
    assert!(message.contains("not valid") && message.contains("shel"), "{message}");

    let (status, table) = agents_cli(deputy.home.path(), deputy.workspace.path(), &["list"]);
    assert_eq!(status, 0);
    let broken = table.lines().find(|line| line.starts_with("broken")).unwrap_or_default();
    assert!(broken.contains("invalid") && broken.contains("unknown field `shel`"), "{table}");
    assert!(table.lines().any(|line| line.starts_with("reviewer\t")), "{table}");
    let (status, shown) = agents_cli(deputy.home.path(), deputy.workspace.path(), &["show", "reviewer"]);
    assert_eq!(status, 0);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["fields"]["tools"], "Read, Grep, Write");
    assert_eq!(shown["system_prompt"], "You review code and say what is wrong.");
    let (status, _) = agents_cli(deputy.home.path(), deputy.workspace.path(), &["show", "nobody"]);
    assert_eq!(status, 1, "INVALID_REQUEST's exit status");
}

#[tokio::test]
async fn delegate_by_name_makes_a_child_from_the_profile_within_its_parents_tools() {
    let deputy = TestDeputy::start().await;
    write_profile(deputy.home.path(), "reviewer.md", REVIEWER);
    deputy.mock.respond_with(|request: &RecordedRequest| {
        if request.system_text().contains("You review code") {
            return MockResponse::sse(anthropic::text(&["the child reviewed"]));
        }
        if request.last_message().contains("tool_result") {
            return MockResponse::sse(anthropic::text(&["done"]));
        }
        let input = json!({"agent": "reviewer", "task": "review main.rs"});
        MockResponse::sse(anthropic::tool_calls(None, &[("call-1", "delegate", input)]))
    });
    let done = deputy
        .ok(
            "session_create",
            json!({"prompt": "PARENT", "builtins": ["read_file", "list_dir", "delegate", "wait", "cancel_delegate"]}),
        )
        .await;
    assert_eq!(done["text"], "done", "{done}");
    let requests = deputy.mock.requests();
    let parent = &requests[0];
    let delegate = parent.body["tools"].as_array().unwrap().iter().find(|tool| tool["name"] == "delegate").unwrap();
    assert!(delegate["description"].as_str().unwrap().contains("- reviewer: Reviews"), "{delegate}");
    let child =
        requests.iter().find(|request| request.system_text().contains("You review code")).expect("child call");
    assert_eq!(child.body["model"], "claude-profile");
    assert_eq!(tool_names(child), ["read_file"], "Read, Grep, Write narrowed to the parent's read_file");
    let children = deputy.ok("session_list", json!({"parent_id": id_of(&done)})).await;
    let child_id = children["sessions"][0]["session_id"].as_str().unwrap().to_owned();
    let view = deputy.ok("session_read", json!({"session_id": child_id})).await;
    assert_eq!(view["state"]["agent"]["name"], "reviewer", "{view}");
}

#[tokio::test]
async fn a_workspace_profile_counts_only_where_the_operator_opts_in() {
    let local = "---\nname: local\ndescription: From the repository.\nshell: true\n---\nLocal.\n";
    let closed = TestDeputy::start().await;
    closed.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    std::fs::create_dir_all(closed.workspace.path().join(".deputy/agents")).unwrap();
    std::fs::write(closed.workspace.path().join(".deputy/agents/local.md"), local).unwrap();
    let (code, message) = closed.err("session_create", json!({"agent": "local", "prompt": "hi"})).await;
    assert_eq!(code, "INVALID_REQUEST", "{message}");

    let open = TestDeputy::start_with_config("[agents]\nworkspace_dirs = true\n").await;
    open.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    std::fs::create_dir_all(open.workspace.path().join(".claude/agents")).unwrap();
    std::fs::write(open.workspace.path().join(".claude/agents/local.md"), local).unwrap();
    open.ok("session_create", json!({"agent": "local", "prompt": "hi"})).await;
    assert!(open.mock.requests()[0].system_text().starts_with("Local."));
}

#[tokio::test]
async fn mcp_resources_rest_json_rpc_and_the_cli_list_the_same_agents() {
    let token = "agents-token-0123456789";
    let deputy = HttpDeputy::start_with_token(Some(token), &[]).await;
    write_profile(deputy.home.path(), "reviewer.md", REVIEWER);
    write_profile(deputy.home.path(), "broken.md", "no frontmatter at all");

    let (status, rest) = deputy.rest(Some(token), reqwest::Method::GET, "/v1/agents", None).await;
    assert_eq!(status, 200, "{rest}");
    let agents = rest["agents"].clone();
    assert_eq!(agents.as_array().map(Vec::len), Some(2), "{rest}");

    let rpc = |frame: Value| {
        let request = deputy.http.post(format!("http://127.0.0.1:{}/rpc", deputy.port)).bearer_auth(token);
        async move { request.json(&frame).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let rpc_list = rpc(rpc_request(1, "agent/list", json!({}))).await;
    let rpc = &rpc;
    assert_eq!(rpc_list["result"]["agents"], agents, "{rpc_list}");

    let client = deputy.mcp_as(token).await;
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new("deputy://agents"))
        .await
        .expect("deputy://agents");
    let text = match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["agents"], agents);
    let one = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new("deputy://agents/reviewer"))
        .await
        .expect("deputy://agents/reviewer");
    let (status, rest_one) = deputy.rest(Some(token), reqwest::Method::GET, "/v1/agents/reviewer", None).await;
    assert_eq!(status, 200, "{rest_one}");
    let one_text = match &one.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(serde_json::from_str::<Value>(&one_text).unwrap(), rest_one);
    let rpc_one = rpc(rpc_request(2, "agent/get", json!({"name": "reviewer"}))).await;
    assert_eq!(rpc_one["result"], rest_one);
    let (status, _) = deputy.rest(Some(token), reqwest::Method::GET, "/v1/agents/nobody", None).await;
    assert_eq!(status, 400);

    let (status, cli) = agents_cli(deputy.home.path(), deputy.workspace.path(), &["list", "--json"]);
    assert_eq!(status, 0);
    assert_eq!(serde_json::from_str::<Value>(&cli).unwrap()["agents"], agents);
    client.cancel().await.unwrap();
}
