//! A real headless browser for the tests of pages: Debian's Chromium, driven over the Chrome
//! DevTools Protocol (one WebSocket, flattened sessions: one per tab). Tests evaluate scripts
//! in a tab as a user's clicks would, and read what the page logged (Content-Security-Policy
//! violations and uncaught errors included).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::SinkExt;
use futures::stream::{SplitSink, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long [`Page::wait_for`] waits before failing the test instead of hanging.
const WAIT_LIMIT: Duration = Duration::from_secs(20);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The DevTools connection: commands out, answers matched by id, events kept.
struct Cdp {
    sink: tokio::sync::Mutex<SplitSink<Socket, Message>>,
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    events: Mutex<Vec<Value>>,
}

impl Cdp {
    async fn call(&self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (answer, answered) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, answer);
        let mut command = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            command["sessionId"] = json!(session);
        }
        self.sink.lock().await.send(Message::text(command.to_string())).await.unwrap();
        let reply = tokio::time::timeout(WAIT_LIMIT, answered).await.expect("the browser answers").unwrap();
        assert!(reply.get("error").is_none(), "{method}: {reply}");
        reply["result"].clone()
    }
}

/// A headless Chromium, killed when dropped.
pub struct Browser {
    _child: tokio::process::Child,
    _profile: tempfile::TempDir,
    cdp: Arc<Cdp>,
}

/// The browser to run: `DEPUTY_TEST_CHROMIUM`, else Debian's `chromium`.
fn chromium() -> String {
    std::env::var("DEPUTY_TEST_CHROMIUM").unwrap_or_else(|_| "chromium".to_owned())
}

impl Browser {
    pub async fn launch() -> Self {
        let profile = tempfile::tempdir().unwrap();
        let child = tokio::process::Command::new(chromium())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("starting {} (Debian's chromium package): {error}", chromium()));
        // Chromium writes the port it took, and the browser target's path, to this file.
        let active = profile.path().join("DevToolsActivePort");
        let mut written = String::new();
        for _ in 0..400 {
            written = std::fs::read_to_string(&active).unwrap_or_default();
            if written.lines().count() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let mut lines = written.lines();
        let (port, path) = (lines.next().expect("DevToolsActivePort"), lines.next().expect("the browser's path"));
        let (socket, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}{path}")).await.unwrap();
        let (sink, mut stream) = socket.split();
        let cdp = Arc::new(Cdp {
            sink: tokio::sync::Mutex::new(sink),
            next_id: AtomicU64::new(1),
            waiting: Mutex::new(HashMap::new()),
            events: Mutex::new(Vec::new()),
        });
        let reader = cdp.clone();
        tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                let Ok(text) = message.to_text() else { continue };
                let Ok(value) = serde_json::from_str::<Value>(text) else { continue };
                match value.get("id").and_then(Value::as_u64) {
                    Some(id) => {
                        if let Some(answer) = reader.waiting.lock().unwrap().remove(&id) {
                            let _ = answer.send(value);
                        }
                    }
                    None => reader.events.lock().unwrap().push(value),
                }
            }
        });
        Self { _child: child, _profile: profile, cdp }
    }

    /// A new tab (its own `sessionStorage`) showing `url`, loaded.
    pub async fn open(&self, url: &str) -> Page {
        let target = self.cdp.call(None, "Target.createTarget", json!({"url": "about:blank"})).await;
        let attached = self
            .cdp
            .call(None, "Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true}))
            .await;
        let page = Page { cdp: self.cdp.clone(), session: attached["sessionId"].as_str().unwrap().to_owned() };
        for domain in ["Runtime.enable", "Log.enable", "Page.enable", "Network.enable"] {
            page.cdp.call(Some(&page.session), domain, json!({})).await;
        }
        page.navigate(url).await;
        page
    }
}

/// One tab.
pub struct Page {
    cdp: Arc<Cdp>,
    session: String,
}

impl Page {
    pub async fn navigate(&self, url: &str) {
        self.cdp.call(Some(&self.session), "Page.navigate", json!({"url": url})).await;
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'").await;
    }

    /// The value of `expression` (awaited if a promise); panics on an exception in the page.
    pub async fn eval(&self, expression: &str) -> Value {
        let params = json!({"expression": expression, "awaitPromise": true, "returnByValue": true});
        let result = self.cdp.call(Some(&self.session), "Runtime.evaluate", params).await;
        assert!(result.get("exceptionDetails").is_none(), "{expression}: {result}");
        result["result"]["value"].clone()
    }

    /// Waits until `condition` is truthy in the page; its value. Panics after 20 s, showing the
    /// page's text.
    pub async fn wait_for(&self, condition: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
        loop {
            let params = json!({"expression": condition, "awaitPromise": true, "returnByValue": true});
            let result = self.cdp.call(Some(&self.session), "Runtime.evaluate", params).await;
            let value = result["result"]["value"].clone();
            let truthy =
                !matches!(value, Value::Null | Value::Bool(false)) && value != json!(0) && value != json!("");
            if result.get("exceptionDetails").is_none() && truthy {
                return value;
            }
            if tokio::time::Instant::now() > deadline {
                let text = self.eval("document.body ? document.body.innerText : ''").await;
                panic!("waited 20 s for {condition}; the page shows:\n{}", text.as_str().unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A PNG of the tab as it is now, `width` × `height` CSS pixels.
    pub async fn screenshot(&self, width: u32, height: u32) -> Vec<u8> {
        use base64::Engine;
        let metrics = json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false});
        self.cdp.call(Some(&self.session), "Emulation.setDeviceMetricsOverride", metrics).await;
        let shot = self.cdp.call(Some(&self.session), "Page.captureScreenshot", json!({"format": "png"})).await;
        base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().unwrap()).unwrap()
    }

    /// Every URL the tab has requested so far (the browser's own request log).
    pub fn requested(&self) -> Vec<String> {
        let events = self.cdp.events.lock().unwrap();
        events
            .iter()
            .filter(|event| {
                event["sessionId"] == self.session.as_str() && event["method"] == "Network.requestWillBeSent"
            })
            .map(|event| event["params"]["request"]["url"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// What the tab logged as errors: failed loads, Content-Security-Policy violations,
    /// uncaught exceptions.
    pub fn errors(&self) -> Vec<String> {
        let events = self.cdp.events.lock().unwrap();
        events
            .iter()
            .filter(|event| event["sessionId"] == self.session.as_str())
            .filter_map(|event| match event["method"].as_str() {
                Some("Log.entryAdded") if event["params"]["entry"]["level"] == "error" => {
                    Some(event["params"]["entry"]["text"].as_str().unwrap_or_default().to_owned())
                }
                Some("Runtime.exceptionThrown") => Some(event["params"]["exceptionDetails"].to_string()),
                _ => None,
            })
            .collect()
    }
}
