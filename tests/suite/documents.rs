//! Document collections through the built binary (issue 27): a query finds the right chunk with
//! its path and lines; an edit is found by the next search without a restart; two sessions
//! share one loaded index; a named agent's `documents` narrows what its sessions search; the
//! index is the operator's (`documents/index` needs the admin scope).

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockLlm, MockResponse, anthropic};

const CONFIG: &str = r#"
[documents.handbook]
paths = ["docs/", "README.md"]
glob = "**/*.md"

[documents.code]
paths = ["src"]
"#;

const INSTALL: &str = "# Installing\n\nDownload the archive.\n\n## On Linux\n\nUnpack it with tar and run \
                       the setup script as root.\n\n## On macOS\n\nOpen the disk image.\n";

fn workspace() -> tempfile::TempDir {
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("docs").join("install.md"), INSTALL).unwrap();
    std::fs::write(root.join("docs").join("notes.txt"), "setup script notes, not markdown").unwrap();
    std::fs::write(root.join("README.md"), "# Widget\n\nA widget for counting sprockets.\n").unwrap();
    std::fs::write(root.join("src").join("lib.rs"), "pub fn count_sprockets() -> u32 {\n    42\n}\n").unwrap();
    let profiles = root.join("agents");
    std::fs::create_dir_all(&profiles).unwrap();
    workspace
}

/// A session whose model searches with `input`; the result it got, parsed (or the error text).
async fn search(deputy: &HttpDeputy, create: Value, input: Value) -> Result<Value, String> {
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_doc", "search_documents", input)])));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Found."])));
    let (status, created) = deputy.rest(None, Method::POST, "/v1/sessions", Some(create)).await;
    assert_eq!(status, 201, "{created}");
    let (text, is_error) = last_tool_result(&deputy.mock);
    if is_error { Err(text) } else { Ok(serde_json::from_str(&text).unwrap()) }
}

fn last_tool_result(mock: &MockLlm) -> (String, bool) {
    let request = mock.requests().pop().unwrap();
    let content = request.body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    let result = content.as_array().unwrap().iter().find(|block| block["type"] == "tool_result").unwrap().clone();
    let text = match &result["content"] {
        Value::String(text) => text.clone(),
        blocks => blocks[0]["text"].as_str().unwrap_or_default().to_owned(),
    };
    (text, result["is_error"].as_bool().unwrap_or(false))
}

#[tokio::test]
async fn a_collection_answers_chunks_with_lines_sees_edits_and_is_loaded_once() {
    let deputy = HttpDeputy::start_in(workspace(), CONFIG).await;
    let prompt = json!({"prompt": "how do I install it on linux?"});

    let found = search(&deputy, prompt.clone(), json!({"query": "install on linux tar", "collection": "handbook"}))
        .await
        .expect("found");
    let best = &found[0];
    assert_eq!(best["path"], "docs/install.md", "{found}");
    assert_eq!((best["start_line"].as_u64(), best["end_line"].as_u64()), (Some(5), Some(7)), "{found}");
    assert!(best["text"].as_str().unwrap().contains("Unpack it with tar"), "{found}");
    assert!(found.as_array().unwrap().iter().all(|hit| hit["path"] != "docs/notes.txt"), "the glob keeps out .txt");

    // All collections by default: the code one answers too.
    let found = search(&deputy, prompt.clone(), json!({"query": "count sprockets"})).await.expect("found");
    let paths: Vec<&str> = found.as_array().unwrap().iter().map(|hit| hit["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"src/lib.rs") && paths.contains(&"README.md"), "{paths:?}");

    // An edit while the server runs: a later search finds it (the watcher marks the collection;
    // the search after it refreshes), with no restart.
    let install = deputy.workspace.path().join("docs").join("install.md");
    std::fs::write(&install, format!("{INSTALL}\n## On FreeBSD\n\nUse the ports collection.\n")).unwrap();
    let mut seen = None;
    for _ in 0..100 {
        let found = search(&deputy, prompt.clone(), json!({"query": "freebsd ports"})).await.expect("searched");
        if let Some(hit) = found.as_array().unwrap().first() {
            seen = Some(hit.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hit = seen.expect("the edit was found");
    assert_eq!((hit["path"].as_str(), hit["start_line"].as_u64()), (Some("docs/install.md"), Some(13)), "{hit}");

    // Every session searched the same index: each collection was loaded once.
    let loads = deputy.log.lines().iter().filter(|line| line.contains("document collection loaded")).count();
    assert_eq!(loads, 2, "one load per collection: {:?}", deputy.log.lines());

    // The index is the operator's: an anonymous caller cannot re-index it.
    let (status, refused) = deputy.rest(None, Method::POST, "/v1/documents/index", None).await;
    assert_eq!((status, refused["code"].as_str()), (403, Some("POLICY_DENIED")), "{refused}");
}

#[tokio::test]
async fn a_named_agent_searches_only_its_collections() {
    let workspace = workspace();
    let profile = "---\nname: coder\ndescription: Knows the code.\ndocuments: [code]\n---\nYou code.\n";
    let config = format!("{CONFIG}\n[agents]\ndirs = [\"{}\"]\n", workspace.path().join("agents").display());
    std::fs::write(workspace.path().join("agents").join("coder.md"), profile).unwrap();
    let deputy = HttpDeputy::start_in(workspace, &config).await;

    let coder = json!({"prompt": "find it", "agent": "coder"});
    let refused = search(&deputy, coder.clone(), json!({"query": "linux", "collection": "handbook"})).await;
    let message = refused.expect_err("not its collection");
    assert!(message.contains("this session searches: code"), "{message}");
    let found = search(&deputy, coder, json!({"query": "sprockets"})).await.expect("found");
    assert!(found.as_array().unwrap().iter().all(|hit| hit["collection"] == "code"), "{found}");

    let unknown = "---\nname: lost\ndescription: d\ndocuments: [nope]\n---\nx\n";
    std::fs::write(deputy.workspace.path().join("agents").join("lost.md"), unknown).unwrap();
    let (status, answer) =
        deputy.rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "x", "agent": "lost"}))).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("no document collection \"nope\""), "{answer}");
}

/// A deterministic embeddings server: four concepts (vehicles, installing, sprockets, the
/// rest), so "automobile" is near "car" although no word is shared.
pub(super) fn embed(request: &crate::common::mock_llm::RecordedRequest) -> MockResponse {
    const CONCEPTS: [&[&str]; 3] = [
        &["car", "automobile", "vehicle", "truck"],
        &["install", "setup", "unpack", "tar"],
        &["sprocket", "widget"],
    ];
    let inputs = request.body["input"].as_array().cloned().unwrap_or_default();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            let text = input.as_str().unwrap_or_default().to_lowercase();
            let mut vector = vec![0.0f32, 0.0, 0.0, 0.05];
            for word in text.split(|c: char| !c.is_alphanumeric()) {
                for (dimension, concept) in CONCEPTS.iter().enumerate() {
                    if concept.iter().any(|stem| word.starts_with(stem)) {
                        vector[dimension] += 1.0;
                    }
                }
            }
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    let tokens = inputs.len() * 10;
    MockResponse::json(
        200,
        json!({"object": "list", "data": data, "model": "test-embed",
               "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}),
    )
}

#[tokio::test]
async fn with_an_embeddings_model_search_is_hybrid_cached_and_survives_an_outage() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let embeddings = MockLlm::start().await;
    let outage = Arc::new(AtomicBool::new(false));
    let down = outage.clone();
    embeddings.respond_with(move |request| {
        if down.load(Ordering::SeqCst) {
            MockResponse::json(503, json!({"error": {"message": "down", "type": "server_error"}}))
                .header("x-should-retry", "false")
        } else {
            embed(request)
        }
    });
    let workspace = workspace();
    std::fs::write(workspace.path().join("docs").join("garage.md"), "# Garage\n\nPark the car inside overnight.\n")
        .unwrap();
    let config = format!(
        "{CONFIG}\n[providers.emb]\napi = \"openai\"\nbase_url = \"{}/v1\"\n\n[embeddings]\nmodel = \"emb:test-embed\"\n",
        embeddings.base_url()
    );
    let deputy = HttpDeputy::start_in(workspace, &config).await;
    let loaded = |deputy: &HttpDeputy| {
        deputy.log.lines().iter().filter(|line| line.contains("document collection loaded")).count()
    };
    for _ in 0..200 {
        if loaded(&deputy) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(loaded(&deputy), 2, "{:?}", deputy.log.lines());
    let indexing = embeddings.requests();
    assert!(!indexing.is_empty() && indexing.iter().all(|request| request.path == "/v1/embeddings"));
    assert_eq!(indexing[0].body["model"], "test-embed");

    // No document says "automobile": words alone find nothing, the vectors find the car.
    let prompt = json!({"prompt": "where does the automobile go?"});
    let found = search(&deputy, prompt.clone(), json!({"query": "automobile", "collection": "handbook"}))
        .await
        .expect("found");
    assert_eq!(found[0]["path"], "docs/garage.md", "{found}");
    // A lexical query still ranks its lexical match first.
    let found = search(&deputy, prompt.clone(), json!({"query": "unpack tar linux"})).await.expect("found");
    assert_eq!(found[0]["path"], "docs/install.md", "{found}");

    // Cached: a restart re-reads nothing and embeds no chunk again (the vectors are kept in
    // the index beside the store).
    #[cfg(feature = "session-store")]
    let deputy = {
        let before = embeddings.requests().len();
        let deputy = deputy.restart(&[]).await;
        for _ in 0..200 {
            if loaded(&deputy) == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(loaded(&deputy), 2);
        assert_eq!(embeddings.requests().len(), before, "no chunk embedded twice");
        deputy
    };

    // An outage of the embeddings server: words alone answer, with a warning; the turn goes on.
    outage.store(true, Ordering::SeqCst);
    let found = search(&deputy, prompt, json!({"query": "install setup script"})).await.expect("found by words");
    assert_eq!(found[0]["path"], "docs/install.md", "{found}");
    deputy.log.wait_for("embedding the query failed, searching by words only").await;
}

/// The operator brings collections up to their files: `POST /v1/documents/index` (admin scope)
/// while the server runs, `deputy documents index [NAME]` while none does. Each re-reads only
/// what changed and says so.
#[cfg(feature = "session-store")]
#[tokio::test]
async fn the_operator_reindexes_over_rest_and_with_the_cli() {
    use super::persistence::{deputy_cli, run, stdout};
    use super::tenants::{ADMIN, ADMIN_TOKEN};

    let mut deputy = HttpDeputy::start_in(workspace(), &format!("{CONFIG}\n{ADMIN_TOKEN}")).await;
    for _ in 0..200 {
        if deputy.log.lines().iter().filter(|line| line.contains("document collection loaded")).count() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let install = deputy.workspace.path().join("docs").join("install.md");
    std::fs::write(&install, format!("{INSTALL}\n## On FreeBSD\n\nUse the ports collection.\n")).unwrap();
    let (status, indexed) =
        deputy.rest(Some(ADMIN), Method::POST, "/v1/documents/index?collection=handbook", None).await;
    assert_eq!(status, 200, "{indexed}");
    let collections = indexed["collections"].as_array().unwrap();
    assert_eq!(collections.len(), 1, "only the one named: {indexed}");
    let handbook = &collections[0];
    assert_eq!(handbook["name"], "handbook");
    assert_eq!((handbook["files"].as_u64(), handbook["indexed"].as_u64()), (Some(2), Some(1)), "{indexed}");
    let (status, unknown) =
        deputy.rest(Some(ADMIN), Method::POST, "/v1/documents/index?collection=nope", None).await;
    assert_eq!((status, unknown["code"].as_str()), (400, Some("INVALID_REQUEST")), "{unknown}");

    // With the server stopped, the command indexes in its own process, beside the same store.
    assert!(deputy.terminate().await.success());
    std::fs::remove_file(deputy.workspace.path().join("README.md")).unwrap();
    let cli = |args: &[&str]| deputy_cli(&deputy.mock, deputy.workspace.path(), deputy.home.path(), args);
    let output = run(cli(&["documents", "index", "handbook"])).await;
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "handbook: 1 files, 0 indexed again (0 chunks), 1 removed\n");
    let output = run(cli(&["documents", "index"])).await;
    assert_eq!(
        stdout(&output),
        "code: 1 files, 0 indexed again (0 chunks), 0 removed\nhandbook: 1 files, 0 indexed again (0 chunks), 0 removed\n"
    );
    let refused = run(cli(&["documents", "index", "nope"])).await;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("no document collection \"nope\""), "{refused:?}");
}
