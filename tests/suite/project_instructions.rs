//! Project instructions through the built binary: the repository's `AGENTS.md` files, from
//! its root down to the session's workspace, reach the model after the system prompt, root
//! first; an edit applies to the next turn; `context.project_instructions: false` leaves them
//! out; more than 32 KiB is cut, and the cut is said.

use serde_json::json;

use crate::common::deputy::TestDeputy;
use crate::common::id_of;
use crate::common::mock_llm::{MockResponse, anthropic};

/// The system prompt of the `index`th model request, as one string.
fn system_of(deputy: &TestDeputy, index: usize) -> String {
    deputy.mock.requests()[index].system_text()
}

#[tokio::test]
async fn agents_md_from_the_repository_root_down_to_the_workspace_reach_the_model_root_first() {
    let deputy = TestDeputy::start().await;
    deputy.mock.respond_with(|_| MockResponse::sse(anthropic::text(&["ok"])));
    let root = deputy.workspace.path();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("app")).unwrap();
    std::fs::write(root.join("AGENTS.md"), "Indent with tabs.").unwrap();
    std::fs::write(root.join("app/CLAUDE.md"), "Run make test before you answer.").unwrap();
    let app = root.join("app").canonicalize().unwrap();

    let created = deputy
        .ok("session_create", json!({"prompt": "hi", "workspace": app, "system_prompt": "You are terse."}))
        .await;
    let id = id_of(&created);
    let system = system_of(&deputy, 0);
    let (base, first, second) =
        (system.find("You are terse."), system.find("Indent with tabs."), system.find("Run make test"));
    assert!(base.is_some() && base < first && first < second, "{system}");
    assert!(system.contains("<project_instructions>") && system.contains("</project_instructions>"), "{system}");
    let view = deputy.ok("session_read", json!({"session_id": id})).await;
    assert_eq!(
        view["state"]["project_instructions"],
        json!([{"path": "AGENTS.md", "bytes": 17}, {"path": "app/CLAUDE.md", "bytes": 32}]),
        "{view}"
    );

    // An edit reaches the next turn.
    std::fs::write(root.join("AGENTS.md"), "Indent with four spaces.").unwrap();
    deputy.ok("session_turn", json!({"session_id": id, "prompt": "and now?"})).await;
    let system = system_of(&deputy, 1);
    assert!(system.contains("four spaces") && !system.contains("tabs"), "{system}");

    // Off for one session.
    let off = deputy
        .ok("session_create", json!({"prompt": "hi", "workspace": app, "context": {"project_instructions": false}}))
        .await;
    assert!(!system_of(&deputy, 2).contains("project_instructions"), "{}", system_of(&deputy, 2));
    let view = deputy.ok("session_read", json!({"session_id": id_of(&off)})).await;
    assert!(view["state"].get("project_instructions").is_none(), "{view}");

    // More than 32 KiB is cut, and the model is told.
    std::fs::write(root.join("AGENTS.md"), "y".repeat(40 * 1024)).unwrap();
    deputy.ok("session_create", json!({"prompt": "hi"})).await;
    let system = system_of(&deputy, 3);
    assert!(system.contains("more bytes of project instructions not shown"), "{}", &system[system.len() - 300..]);
    assert!(system.len() < 33 * 1024, "{} bytes", system.len());
}
