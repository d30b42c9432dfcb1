//! Agent Skills through the built binary: the skills of the `[skills]` directories are listed
//! in the system prompt (a malformed one left out, the server unharmed); the model reads a
//! skill's instructions with `load_skill` and its files with `read_skill_file`, which refuses
//! whatever leads out of the skill's folder; `session_create`'s `skills` narrows the list and
//! refuses unknown names; a delegated child has its parent's skills; the workspace's own skills
//! count only where the operator opts in.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::deputy::{TestDeputy, tool_results};
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic};

/// The system prompt of the `index`th model request, as one string.
fn system_of(deputy: &TestDeputy, index: usize) -> String {
    deputy.mock.requests()[index].system_text()
}

/// The tool names offered in the `index`th model request.
fn offered(deputy: &TestDeputy, index: usize) -> Vec<String> {
    let tools = deputy.mock.requests()[index].body["tools"].clone();
    tools
        .as_array()
        .map_or_else(Vec::new, |tools| tools.iter().map(|tool| tool["name"].as_str().unwrap().to_owned()).collect())
}

/// Writes `dir/folder/SKILL.md`.
fn write_skill(dir: &Path, folder: &str, frontmatter: &str, body: &str) {
    std::fs::create_dir_all(dir.join(folder)).unwrap();
    std::fs::write(dir.join(folder).join("SKILL.md"), format!("---\n{frontmatter}\n---\n{body}")).unwrap();
}

#[tokio::test]
async fn a_listed_skill_is_loaded_and_its_files_read_but_nothing_outside_its_folder() {
    let skills = tempfile::tempdir().unwrap();
    let root = skills.path().canonicalize().unwrap();
    write_skill(
        &root,
        "pdf-forms",
        "name: pdf-forms\ndescription: Fill PDF forms.\nlicense: MIT",
        "Read reference.md first.\n",
    );
    std::fs::write(root.join("pdf-forms/reference.md"), "Field names are case-sensitive.\n").unwrap();
    std::fs::write(root.join("secret.txt"), "not the skill's").unwrap();
    std::os::unix::fs::symlink(root.join("secret.txt"), root.join("pdf-forms/link.txt")).unwrap();
    write_skill(&root, "broken", "name: Not A Valid Name", "");
    let deputy =
        TestDeputy::start_with_config(&format!("[skills]\ndirs = [{:?}]\n", root.display().to_string())).await;

    let read =
        |id: &str, path: &str| (id.to_owned(), "read_skill_file", json!({"name": "pdf-forms", "path": path}));
    let calls = [
        ("toolu_1".to_owned(), "load_skill", json!({"name": "pdf-forms"})),
        read("toolu_2", "reference.md"),
        read("toolu_3", "../secret.txt"),
        read("toolu_4", &root.join("secret.txt").display().to_string()),
        read("toolu_5", "link.txt"),
        ("toolu_6".to_owned(), "load_skill", json!({"name": "broken"})),
    ];
    let calls: Vec<(&str, &str, Value)> =
        calls.iter().map(|(id, name, input)| (id.as_str(), *name, input.clone())).collect();
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &calls)));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Filled."])));
    let created = deputy.ok("session_create", json!({"prompt": "fill the form"})).await;
    assert_eq!(created["text"], "Filled.", "a malformed SKILL.md stops nothing: {created}");

    let system = system_of(&deputy, 0);
    assert!(system.contains("<skills>") && system.contains("</skills>"), "{system}");
    assert!(system.contains("call load_skill") && system.contains("\n- pdf-forms: Fill PDF forms.\n"), "{system}");
    assert!(!system.contains("Not A Valid Name") && !system.contains("Read reference.md"), "{system}");
    let tools = offered(&deputy, 0);
    assert!(tools.contains(&"load_skill".to_owned()) && tools.contains(&"read_skill_file".to_owned()), "{tools:?}");

    let results = tool_results(&deputy, 1);
    let answer = |index: usize| {
        let result = &results[index];
        (result["content"].as_str().unwrap_or_default().to_owned(), result["is_error"].as_bool().unwrap_or(false))
    };
    assert_eq!(answer(0), ("Read reference.md first.\n".to_owned(), false));
    assert_eq!(answer(1), ("Field names are case-sensitive.\n".to_owned(), false));
    for refused in [2, 3, 4] {
        let (text, is_error) = answer(refused);
        assert!(is_error && text.contains("outside the folder of skill \"pdf-forms\""), "{refused}: {text}");
        assert!(!text.contains("not the skill's"), "{text}");
    }
    let (text, is_error) = answer(5);
    assert!(is_error && text.contains("unknown skill \"broken\"") && text.contains("pdf-forms"), "{text}");
}

#[tokio::test]
async fn session_create_skills_narrows_the_list_refuses_unknown_names_and_edits_reach_the_next_turn() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    // The default directory: $XDG_CONFIG_HOME/deputy/skills.
    let dir = deputy.home.path().join("deputy/skills");
    write_skill(&dir, "alpha", "name: alpha\ndescription: The first.", "A.");
    write_skill(&dir, "beta", "name: beta\ndescription: The second.", "B.");

    let narrowed = deputy.ok("session_create", json!({"prompt": "hi", "skills": ["beta"]})).await;
    let system = system_of(&deputy, 0);
    assert!(system.contains("- beta: The second.") && !system.contains("alpha"), "{system}");

    let (code, text) = deputy.err("session_create", json!({"prompt": "hi", "skills": ["gamma"]})).await;
    assert_eq!(code, "INVALID_REQUEST", "{text}");
    assert!(text.contains("\"gamma\"") && text.contains("\"alpha\", \"beta\""), "{text}");

    // Nothing changed: the same bytes (the prompt cache's prefix). Then an edit applies.
    let id = id_of(&narrowed);
    deputy.ok("session_turn", json!({"session_id": id, "prompt": "again"})).await;
    assert_eq!(system_of(&deputy, 1), system);
    write_skill(&dir, "beta", "name: beta\ndescription: The second, edited.", "B.");
    deputy.ok("session_turn", json!({"session_id": id, "prompt": "and now?"})).await;
    assert!(system_of(&deputy, 2).contains("- beta: The second, edited."), "{}", system_of(&deputy, 2));

    // Builtins named without the skill tools: no skills in the prompt.
    deputy.ok("session_create", json!({"prompt": "hi", "builtins": ["read_file"]})).await;
    assert!(!system_of(&deputy, 3).contains("<skills>"), "{}", system_of(&deputy, 3));
    assert_eq!(offered(&deputy, 3), ["read_file"]);
}

#[tokio::test]
async fn the_workspace_skills_count_only_where_the_operator_opts_in() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    write_skill(
        &deputy.workspace.path().join(".deputy/skills"),
        "repo-skill",
        "name: repo-skill\ndescription: From the repository.",
        "R.",
    );

    deputy.ok("session_create", json!({"prompt": "hi"})).await;
    assert!(!system_of(&deputy, 0).contains("repo-skill"), "{}", system_of(&deputy, 0));
    assert!(!offered(&deputy, 0).contains(&"load_skill".to_owned()), "no skills, no skill tools");

    let stopped = deputy.stop().await;
    std::fs::create_dir_all(stopped.home.path().join("deputy")).unwrap();
    std::fs::write(stopped.home.path().join("deputy/config.toml"), "[skills]\nworkspace_dirs = true\n").unwrap();
    let deputy = TestDeputy::respawn_on(stopped.mock, stopped.workspace, stopped.home).await;
    deputy.ok("session_create", json!({"prompt": "hi"})).await;
    let system = system_of(&deputy, 1);
    assert!(system.contains("- repo-skill: From the repository."), "{system}");
}

#[tokio::test]
async fn a_delegated_child_has_its_parents_skills_and_skill_tools() {
    let deputy = TestDeputy::start().await;
    let dir = deputy.home.path().join("deputy/skills");
    write_skill(&dir, "alpha", "name: alpha\ndescription: The first.", "A.");
    write_skill(&dir, "beta", "name: beta\ndescription: The second.", "B.");
    let is_child = |request: &crate::common::mock_llm::RecordedRequest| {
        request.body["messages"][0].to_string().contains("CHILD")
    };
    deputy.mock.respond_with(move |request| {
        if is_child(request) || request.last_message().contains("tool_result") {
            return MockResponse::sse(anthropic::text(&["done"]));
        }
        MockResponse::sse(anthropic::tool_calls(None, &[("toolu_1", "delegate", json!({"task": "CHILD: go"}))]))
    });
    let done = deputy.ok("session_create", json!({"prompt": "PARENT: delegate", "skills": ["beta"]})).await;
    assert_eq!(done["text"], "done", "{done}");

    let child =
        deputy.mock.requests().into_iter().position(|request| is_child(&request)).expect("the child's request");
    let system = system_of(&deputy, child);
    assert!(system.contains("- beta: The second.") && !system.contains("alpha"), "{system}");
    let tools = offered(&deputy, child);
    assert!(tools.contains(&"load_skill".to_owned()) && tools.contains(&"read_skill_file".to_owned()), "{tools:?}");
}
