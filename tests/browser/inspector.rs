//! The session inspector (`/ui`, issue 30) in Chromium: the list, a session's transcript, its
//! usage chart and live events; the token asked once and kept for the tab only; approvals,
//! archive and interrupt offered only to callers whose scopes allow them; no Content-Security-
//! Policy violation and no script error on the way.

use reqwest::Method;
use serde_json::json;

use crate::common::browser::{Browser, Page};
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockResponse, anthropic};

/// The page's problems worth failing for: policy violations and uncaught errors (a refused
/// request, such as the 401 that asks for a token, is logged too and is expected).
fn assert_clean(page: &Page) {
    let problems: Vec<String> = page
        .errors()
        .into_iter()
        .filter(|error| error.contains("Content Security Policy") || !error.contains("Failed to load resource"))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Every request the tab made went to deputy, on loopback: no CDN, no font, no beacon.
fn assert_only_deputy(page: &Page, deputy: &HttpDeputy) {
    let requested = page.requested();
    assert!(!requested.is_empty());
    let own = deputy.url("/");
    let elsewhere: Vec<&String> =
        requested.iter().filter(|url| !url.starts_with(&own) && *url != "about:blank").collect();
    assert!(elsewhere.is_empty(), "requests that left deputy: {elsewhere:#?}");
}

/// Clicks the first element matching `selector` whose text contains `text`.
async fn click(page: &Page, selector: &str, text: &str) {
    let script = format!(
        "(() => {{ const found = [...document.querySelectorAll({selector:?})].find((e) => e.innerText.includes({text:?})); \
         if (!found) return false; found.click(); return true; }})()"
    );
    page.wait_for(&script).await;
}

#[tokio::test]
async fn the_list_leads_to_a_transcript_with_its_usage_and_it_follows_new_turns() {
    let deputy = HttpDeputy::start(&[]).await;
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_1", "list_dir", json!({}))])));
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Done looking."])));
    let (status, created) =
        deputy.rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "look around"}))).await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().unwrap().to_owned();
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Hello."])));
    let (status, _) = deputy.rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "say hello"}))).await;
    assert_eq!(status, 201);

    // The page itself: served with a strict policy, no token needed for its files.
    let response = deputy.http.get(deputy.url("/ui")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let policy = response.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'") && !policy.contains("unsafe-inline"), "{policy}");

    let browser = Browser::launch().await;
    let page = browser.open(&deputy.url("/ui")).await;
    page.wait_for("document.querySelectorAll('tr.row').length === 2").await;
    let titles =
        page.eval("[...document.querySelectorAll('tr.row td:first-child')].map((cell) => cell.innerText)").await;
    assert_eq!(titles, json!(["say hello", "look around"]), "newest first");
    assert_eq!(page.eval("document.querySelector('#who').innerText").await, "anonymous · sessions");
    // The title search narrows the list, on the server: the page asks for the matches.
    let search = "(() => { const search = document.querySelector('input[name=search]'); search.value = 'LOOK'; \
                  search.dispatchEvent(new Event('input')); return true; })()";
    page.eval(search).await;
    page.wait_for("document.querySelectorAll('tr.row').length === 1").await;
    assert!(page.requested().iter().any(|url| url.contains("/v1/sessions?") && url.contains("title=LOOK")));
    assert_eq!(page.eval("document.querySelector('main p.muted').innerText").await, "1 shown of 1");
    click(&page, "tr.row a", "look around").await;
    page.wait_for("document.querySelector('.transcript') && document.querySelector('.transcript').innerText.includes('Done looking.')")
        .await;
    assert_eq!(page.eval("location.hash").await, format!("#/s/{id}"));
    let tool = page.wait_for("document.querySelector('details.tool summary').innerText").await;
    assert!(tool.as_str().unwrap().starts_with("list_dir · arguments"), "{tool}");
    assert_eq!(page.eval("document.querySelectorAll('svg.chart rect.output').length").await, 1);
    assert_eq!(page.eval("document.querySelector('.prompt').innerText").await, "look around");

    // A turn run elsewhere appears without a reload.
    deputy.mock.push(MockResponse::sse(anthropic::text(&["A second answer."])));
    let (status, _) = deputy
        .rest(None, Method::POST, &format!("/v1/sessions/{id}/turns"), Some(json!({"prompt": "and now?"})))
        .await;
    assert_eq!(status, 200);
    page.wait_for("document.querySelector('.transcript').innerText.includes('A second answer.')").await;
    page.wait_for("document.querySelectorAll('svg.chart rect.output').length === 2").await;
    // A running turn shows its words as they stream, before it is saved, and can be
    // interrupted from the page.
    let _gate = deputy.mock.push_held(MockResponse::sse(anthropic::text(&["Thinking out", " loud."])), 3);
    let (status, running) = deputy
        .rest(
            None,
            Method::POST,
            &format!("/v1/sessions/{id}/turns"),
            Some(json!({"prompt": "third", "wait_ms": 0})),
        )
        .await;
    assert_eq!((status, running["status"].as_str()), (200, Some("running")), "{running}");
    page.wait_for("[...document.querySelectorAll('.turn.provisional')].some((turn) => turn.innerText.includes('Thinking out'))")
        .await;
    page.wait_for("document.querySelector('h1 .status').innerText === 'running'").await;
    click(&page, ".actions button", "Interrupt").await;
    page.wait_for("document.querySelector('[data-turn=\"3\"] .label').innerText.includes('cancelled')").await;
    page.wait_for("document.querySelector('h1 .status').innerText === 'idle'").await;
    assert_eq!(page.eval("document.querySelectorAll('.turn.provisional').length").await, 0);
    // Kept with the test's build (CI's artifact): what the session page looks like.
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("inspector.png");
    std::fs::write(&shot, page.screenshot(1100, 900).await).unwrap();
    eprintln!("inspector screenshot: {}", shot.display());

    // Back to the list, which the session's row still leads from.
    page.eval("location.hash = '#/'").await;
    page.wait_for("document.querySelector('tr.row') !== null").await;
    assert_clean(&page);
    assert_only_deputy(&page, &deputy);
}

const ALICE: &str = "alice-inspector-token-0123";
const VIEWER: &str = "viewer-inspector-token-0123";
const TOKENS: &str = r#"
[[auth.tokens]]
subject = "alice"
token_env = "ALICE_TOKEN"
scopes = ["sessions"]

[[auth.tokens]]
subject = "auditor"
token_env = "VIEWER_TOKEN"
scopes = ["sessions:read_all"]
"#;

async fn sign_in(page: &Page, token: &str) {
    page.wait_for("document.querySelector('form.token') !== null").await;
    page.eval(&format!(
        "(() => {{ const form = document.querySelector('form.token'); form.elements.token.value = {token:?}; \
         form.requestSubmit(); return true; }})()"
    ))
    .await;
}

#[tokio::test]
async fn the_token_is_asked_once_per_tab_and_only_allowed_actions_are_offered() {
    let env = [("ALICE_TOKEN", ALICE), ("VIEWER_TOKEN", VIEWER)];
    let deputy = HttpDeputy::start_with_config(TOKENS, &[], &env).await;
    // Alice's session holds a tool call for approval.
    let write = json!({"path": "notes.txt", "content": "hello"});
    deputy.mock.push(MockResponse::sse(anthropic::tool_calls(None, &[("toolu_1", "write_file", write)])));
    let create = json!({"prompt": "write the notes", "approval": "always"});
    let (status, created) = deputy.rest(Some(ALICE), Method::POST, "/v1/sessions", Some(create)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["pending"][0]["kind"], "approval", "{created}");

    let browser = Browser::launch().await;
    let page = browser.open(&deputy.url("/ui")).await;
    sign_in(&page, ALICE).await;
    page.wait_for(
        "[...document.querySelectorAll('tr.row')].some((row) => row.innerText.includes('write the notes'))",
    )
    .await;
    assert_eq!(page.eval("document.querySelector('#who').innerText").await, "alice · sessions");
    // Kept for this tab only: not in the address, not in a cookie.
    assert_eq!(page.eval("sessionStorage.getItem('deputy.token')").await, ALICE);
    assert_eq!(page.eval("document.cookie").await, "");
    assert!(!page.eval("location.href").await.as_str().unwrap().contains(ALICE));

    // The approval, allowed from the page: the tool runs and the model answers.
    assert!(!deputy.workspace.path().join("notes.txt").exists());
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Wrote them."])));
    click(&page, "tr.row a", "write the notes").await;
    page.wait_for("document.querySelector('[data-call=\"toolu_1\"]') !== null").await;
    click(&page, "[data-call=\"toolu_1\"] button", "Allow").await;
    page.wait_for("document.querySelector('.transcript').innerText.includes('Wrote them.')").await;
    page.wait_for("document.querySelector('[data-call]') === null").await;
    assert_eq!(std::fs::read_to_string(deputy.workspace.path().join("notes.txt")).unwrap(), "hello");

    // Archived from the page (the confirmation answered yes).
    page.eval("window.confirm = () => true").await;
    click(&page, "button", "Archive").await;
    page.wait_for("document.querySelector('h1 .status').innerText === 'archived'").await;
    assert_clean(&page);

    // A new tab has no token: it asks again. The auditor reads every session, acts on none.
    let other = browser.open(&deputy.url("/ui")).await;
    sign_in(&other, VIEWER).await;
    other.wait_for("document.querySelector('#who').innerText.startsWith('auditor')").await;
    // The list's filters render after the caller is known: wait for them, not only for `#who`.
    other.wait_for("document.querySelector('input[name=archived]') !== null").await;
    other.eval("document.querySelector('input[name=archived]').click()").await;
    click(&other, "tr.row a", "write the notes").await;
    other
        .wait_for(
            "document.querySelector('.meta') && document.querySelector('.meta').innerText.includes('owner alice')",
        )
        .await;
    assert_eq!(other.eval("document.querySelectorAll('.actions button').length").await, 0);
    assert!(other.eval("document.body.innerText").await.as_str().unwrap().contains("Read only."));
    assert_clean(&other);
    assert_only_deputy(&page, &deputy);
    assert_only_deputy(&other, &deputy);
}

#[tokio::test]
async fn a_refused_token_is_said_so_and_asked_again() {
    let env = [("ALICE_TOKEN", ALICE), ("VIEWER_TOKEN", VIEWER)];
    let deputy = HttpDeputy::start_with_config(TOKENS, &[], &env).await;
    let browser = Browser::launch().await;
    let page = browser.open(&deputy.url("/ui")).await;
    sign_in(&page, "not-a-token-of-this-server").await;
    page.wait_for("document.querySelector('form.token .error') && document.querySelector('form.token .error').innerText.includes('refused')")
        .await;
    sign_in(&page, ALICE).await;
    page.wait_for("document.querySelector('#who').innerText.startsWith('alice')").await;
}
