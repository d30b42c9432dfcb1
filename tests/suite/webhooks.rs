//! `[[webhooks]]` through the built binary (issue 30): deliveries signed per the Standard
//! Webhooks specification, in journal order, only the subscribed types; a failing endpoint
//! retried and shown in `GET /v1/webhooks`, and its deliveries resumed after a restart, none
//! lost and none invented; private addresses refused unless the operator allows them.
//! Without a store (Minimal profiles) only the refusal at startup is left to test.
#![cfg_attr(not(feature = "session-store"), allow(dead_code, unused_imports))]

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;

use super::tenants::{ADMIN, ADMIN_TOKEN, ALICE, TENANTS};
use crate::common::deputy::startup_error;
use crate::common::http_deputy::HttpDeputy;
use crate::common::mock_llm::{MockResponse, anthropic};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub(super) const SECRET_ENV: (&str, &str) = ("TEST_WEBHOOK_SECRET", SECRET);

/// One POST the receiver got: its headers of interest, its body, and what it answered.
#[derive(Debug, Clone)]
pub(super) struct Received {
    pub(super) id: String,
    timestamp: String,
    signature: String,
    content_type: String,
    body: Vec<u8>,
    /// 0: not answered (held until the sender went away).
    answered: u16,
    at: std::time::Instant,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub(super) fn kind(&self) -> String {
        self.json()["type"].as_str().unwrap().to_owned()
    }
}

/// A webhook endpoint on loopback answering `status` (settable) to every POST, or, while
/// `hold` is set, answering nothing for a minute (a delivery in flight).
pub(super) struct Receiver {
    url: String,
    status: Arc<AtomicU16>,
    hold: Arc<AtomicBool>,
    received: Arc<Mutex<Vec<Received>>>,
    _server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub(super) async fn start(status: u16) -> Self {
        let status = Arc::new(AtomicU16::new(status));
        let hold = Arc::new(AtomicBool::new(false));
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let (answer, recorded, held) = (status.clone(), received.clone(), hold.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let (answer, recorded, held) = (answer.clone(), recorded.clone(), held.clone());
                async move {
                    let header = |name: &str| {
                        headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned()
                    };
                    let holding = held.load(Ordering::SeqCst);
                    let answered = if holding { 0 } else { answer.load(Ordering::SeqCst) };
                    recorded.lock().unwrap().push(Received {
                        id: header("webhook-id"),
                        timestamp: header("webhook-timestamp"),
                        signature: header("webhook-signature"),
                        content_type: header("content-type"),
                        body: body.to_vec(),
                        answered,
                        at: std::time::Instant::now(),
                    });
                    if holding {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    axum::http::StatusCode::from_u16(answer.load(Ordering::SeqCst)).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, status, hold, received, _server: server }
    }

    pub(super) fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The deliveries acknowledged (answered 2xx), in arrival order.
    fn acknowledged(&self) -> Vec<Received> {
        self.received().into_iter().filter(|delivery| (200..300).contains(&delivery.answered)).collect()
    }

    pub(super) async fn wait_for_acknowledged(&self, count: usize) -> Vec<Received> {
        for _ in 0..300 {
            let acknowledged = self.acknowledged();
            if acknowledged.len() >= count {
                return acknowledged;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("expected {count} acknowledged deliveries: {:#?}", self.received());
    }
}

pub(super) fn config(receiver: &Receiver, events: &str) -> String {
    format!(
        "[policy]\nwebhook_private_urls = \"allow\"\n\n[[webhooks]]\nurl = \"{}\"\nevents = {events}\nsecret_env = \"{}\"\n",
        receiver.url, SECRET_ENV.0
    )
}

/// deputy delivering `events` to `receiver`, and a session whose first turn answered `answer`.
async fn delivering(receiver: &Receiver, events: &str, answer: &str) -> (HttpDeputy, String) {
    let deputy = HttpDeputy::start_with_config(&config(receiver, events), &[], &[SECRET_ENV]).await;
    deputy.mock.push(MockResponse::sse(anthropic::text(&[answer])));
    let (status, created) = deputy.rest(None, Method::POST, "/v1/sessions", Some(json!({"prompt": "hi"}))).await;
    assert_eq!(status, 201, "{created}");
    let session = created["session_id"].as_str().unwrap().to_owned();
    (deputy, session)
}

/// Verifies a delivery as a Standard Webhooks receiver does: HMAC-SHA256 of
/// `id.timestamp.body` under the base64 secret, a recent timestamp.
fn assert_signed(delivery: &Received) {
    let key = STANDARD.decode(SECRET.trim_start_matches("whsec_")).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.", delivery.id, delivery.timestamp).as_bytes());
    mac.update(&delivery.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    assert!(delivery.signature.split(' ').any(|signature| signature == expected), "{delivery:#?}");
    let sent_at: i64 = delivery.timestamp.parse().unwrap();
    assert!((chrono::Utc::now().timestamp() - sent_at).abs() < 300, "{delivery:#?}");
    assert_eq!(delivery.content_type, "application/json");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn deliveries_are_signed_in_journal_order_and_only_of_the_subscribed_types() {
    let receiver = Receiver::start(204).await;
    let events = r#"["turn.completed", "session.idle", "session.archived"]"#;
    let (deputy, session_id) = delivering(&receiver, events, "Hello.").await;
    let (status, _) = deputy.rest(None, Method::DELETE, &format!("/v1/sessions/{session_id}"), None).await;
    assert_eq!(status, 200);

    let delivered = receiver.wait_for_acknowledged(3).await;
    let kinds: Vec<String> = delivered.iter().map(Received::kind).collect();
    assert_eq!(kinds, ["turn.completed", "session.idle", "session.archived"]);
    for delivery in &delivered {
        assert_signed(delivery);
        let body = delivery.json();
        assert_eq!(body["data"]["session_id"], session_id.as_str(), "{body}");
        assert!(body["timestamp"].as_str().is_some(), "{body}");
    }
    assert_eq!(delivered[0].json()["data"]["event"]["stop_reason"], "end_turn");
    assert_eq!(delivered[0].json()["data"]["turn"], 1);
    let mut ids: Vec<&str> = delivered.iter().map(|delivery| delivery.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "one id per delivery: {ids:?}");

    // Nothing more comes: the other types are not subscribed, and nothing is sent twice.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(receiver.received().len(), 3, "{:#?}", receiver.received());

    let (status, shown) = deputy.rest(None, Method::GET, "/v1/webhooks", None).await;
    assert_eq!(status, 200, "{shown}");
    let webhook = &shown["webhooks"][0];
    assert_eq!((webhook["delivered"].as_u64(), webhook["failing"].as_bool()), (Some(3), Some(false)), "{shown}");
    assert_eq!(webhook["url"], receiver.url.as_str());
    assert_eq!(webhook["name"], receiver.url.as_str(), "unnamed: its url names it");
    assert!(!shown.to_string().contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "the secret is never shown: {shown}");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn a_failing_endpoint_is_retried_shown_and_resumed_after_a_restart_losing_nothing() {
    let receiver = Receiver::start(503).await;
    let events = r#"["turn.completed", "turn.failed", "session.idle"]"#;
    let (deputy, session) = delivering(&receiver, events, "Hello.").await;

    // The first attempt and a retry (after about a second) both fail, and the status says so.
    let mut shown = Value::Null;
    for _ in 0..100 {
        shown = deputy.rest(None, Method::GET, "/v1/webhooks", None).await.1;
        if shown["webhooks"][0]["failures"].as_u64() >= Some(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let webhook = &shown["webhooks"][0];
    assert_eq!(webhook["failing"], true, "{shown}");
    assert!(webhook["failures"].as_u64() >= Some(2), "{shown}");
    // Failing deliveries never hold a turn up.
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Still here."])));
    let started = std::time::Instant::now();
    let (status, turn) = deputy
        .rest(None, Method::POST, &format!("/v1/sessions/{session}/turns"), Some(json!({"prompt": "go on"})))
        .await;
    assert_eq!((status, turn["text"].as_str()), (200, Some("Still here.")), "{turn}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    // Retried with backoff: each wait longer than the one before (1 s, then 2 s, plus jitter).
    let mut attempts = receiver.received();
    for _ in 0..100 {
        if attempts.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        attempts = receiver.received();
    }
    let gaps: Vec<Duration> = attempts.windows(2).take(2).map(|pair| pair[1].at - pair[0].at).collect();
    assert!(gaps[0] >= Duration::from_millis(900) && gaps[1] > gaps[0] + Duration::from_millis(500), "{gaps:?}");
    assert!(webhook["last_error"].as_str().unwrap().contains("503"), "{shown}");
    assert_eq!(webhook["delivered"], 0, "{shown}");
    let failed_ids: Vec<String> = receiver.received().iter().take(3).map(|delivery| delivery.id.clone()).collect();
    assert!(failed_ids.iter().all(|id| *id == failed_ids[0]), "the same delivery retried: {failed_ids:?}");

    // A restart with the endpoint healthy: the turn's deliveries arrive, each once, with the
    // ids the failed attempts had.
    receiver.status.store(200, Ordering::SeqCst);
    let deputy = deputy.restart_with_env(&[], &[SECRET_ENV]).await;
    let delivered = receiver.wait_for_acknowledged(4).await;
    let kinds: Vec<String> = delivered.iter().map(Received::kind).collect();
    assert_eq!(kinds, ["turn.completed", "session.idle", "turn.completed", "session.idle"]);
    assert_eq!(delivered[0].id, failed_ids[0]);
    assert_eq!(
        (delivered[0].json()["data"]["turn"].as_u64(), delivered[2].json()["data"]["turn"].as_u64()),
        (Some(1), Some(2))
    );
    delivered.iter().for_each(assert_signed);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(receiver.acknowledged().len(), 4, "nothing invented: {:#?}", receiver.received());
    let (_, shown) = deputy.rest(None, Method::GET, "/v1/webhooks", None).await;
    assert_eq!(shown["webhooks"][0]["failing"], false, "{shown}");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn a_delivery_cut_by_kill_9_is_sent_again_after_the_restart_and_nothing_is_invented() {
    let receiver = Receiver::start(200).await;
    receiver.hold.store(true, Ordering::SeqCst);
    let events = r#"["turn.completed", "session.idle"]"#;
    let (deputy, session) = delivering(&receiver, events, "One.").await;
    // The first delivery is in flight (the endpoint holds it) while a second turn runs.
    for _ in 0..200 {
        if !receiver.received().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(receiver.received().len(), 1, "{:#?}", receiver.received());
    deputy.mock.push(MockResponse::sse(anthropic::text(&["Two."])));
    let (status, _) = deputy
        .rest(None, Method::POST, &format!("/v1/sessions/{session}/turns"), Some(json!({"prompt": "two"})))
        .await;
    assert_eq!(status, 200);

    receiver.hold.store(false, Ordering::SeqCst);
    let _deputy = deputy.kill_and_restart_with_env(&[], &[SECRET_ENV]).await;
    let delivered = receiver.wait_for_acknowledged(4).await;
    let expected: Vec<String> =
        [(1, "turn.completed"), (1, "session.idle"), (2, "turn.completed"), (2, "session.idle")]
            .iter()
            .map(|(turn, kind)| format!("{turn}:{kind}"))
            .collect();
    let seen: Vec<String> = delivered
        .iter()
        .map(|delivery| format!("{}:{}", delivery.json()["data"]["turn"], delivery.kind()))
        .collect();
    assert_eq!(seen, expected, "every event, once acknowledged, in order");
    tokio::time::sleep(Duration::from_millis(600)).await;
    // The cut delivery came again with its id; nothing else was sent, nothing twice acknowledged.
    let all = receiver.received();
    assert_eq!(all[0].id, delivered[0].id);
    assert_eq!(receiver.acknowledged().len(), 4, "{all:#?}");
    assert!(
        all.iter().all(|delivery| delivered.iter().any(|acknowledged| acknowledged.id == delivery.id)),
        "{all:#?}"
    );
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn the_status_is_the_operators() {
    let receiver = Receiver::start(200).await;
    // Named: the status (and the cursor) go by the name instead of the url.
    let config =
        format!("{TENANTS}\n{ADMIN_TOKEN}\n{}name = \"ops\"\n", config(&receiver, r#"["session.archived"]"#));
    let deputy = HttpDeputy::start_with_config(&config, &[], &[SECRET_ENV]).await;
    let (status, refused) = deputy.rest(Some(ALICE), Method::GET, "/v1/webhooks", None).await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused.to_string().contains("admin scope"), "{refused}");
    let (status, shown) = deputy.rest(Some(ADMIN), Method::GET, "/v1/webhooks", None).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["webhooks"][0]["events"], json!(["session.archived"]));
    assert_eq!(shown["webhooks"][0]["name"], "ops", "{shown}");
}

#[cfg(feature = "session-store")]
#[tokio::test]
async fn private_addresses_bad_secrets_and_unknown_events_are_refused_at_startup() {
    let webhook = |url: &str, events: &str| {
        format!("[[webhooks]]\nurl = \"{url}\"\nevents = {events}\nsecret_env = \"{}\"\n", SECRET_ENV.0)
    };
    let private = startup_error(&webhook("http://127.0.0.1:9/hook", r#"["turn.completed"]"#), &[SECRET_ENV]).await;
    assert!(private.contains("webhook_private_urls"), "{private}");
    let unset = startup_error(&webhook("https://hooks.example.com/", r#"["turn.completed"]"#), &[]).await;
    assert!(unset.contains("TEST_WEBHOOK_SECRET is not set"), "{unset}");
    let short = startup_error(
        &webhook("https://hooks.example.com/", r#"["turn.completed"]"#),
        &[(SECRET_ENV.0, "whsec_c2hvcnQ=")],
    )
    .await;
    assert!(short.contains("at least 16"), "{short}");
    let unknown = startup_error(&webhook("https://hooks.example.com/", r#"["turn.done"]"#), &[SECRET_ENV]).await;
    assert!(unknown.contains("unknown webhook event \"turn.done\""), "{unknown}");
}

/// Deliveries resume from the store's journal: a build or run without a store refuses
/// `[[webhooks]]` at startup rather than deliver what it could lose.
#[cfg(not(feature = "session-store"))]
#[tokio::test]
async fn without_a_store_webhooks_are_refused_at_startup() {
    let webhook = format!(
        "[[webhooks]]\nurl = \"https://hooks.example.com/\"\nevents = [\"turn.completed\"]\nsecret_env = \"{}\"\n",
        SECRET_ENV.0
    );
    let refused = startup_error(&webhook, &[SECRET_ENV]).await;
    assert!(refused.contains("[[webhooks]] need the session store"), "{refused}");
}
