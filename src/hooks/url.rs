//! `url` hooks: the event is POSTed as JSON; a 2xx body, at most [`MAX_REPLY_BYTES`], is the
//! answer. Redirects are not followed. The endpoint is the operator's, from the config file,
//! so it may be on a private address (unlike a session's inline MCP `url`).

use std::time::Duration;

use futures::StreamExt;

use super::{HookError, MAX_REPLY_BYTES};

/// POSTs `body` to `url`; answers the response body, or why there is none. The whole exchange
/// (connect, send, read) fits in `timeout`.
pub async fn post(
    client: &reqwest::Client,
    url: &reqwest::Url,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, HookError> {
    let shown = shown(url);
    let exchange = async {
        let response = client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|err| HookError::Failed(format!("POST {shown}: {}", err.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            return Err(HookError::Failed(format!("POST {shown}: HTTP {status}")));
        }
        let mut answer = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|err| {
                HookError::Failed(format!("POST {shown}: reading the answer: {}", err.without_url()))
            })?;
            if answer.len() + chunk.len() > MAX_REPLY_BYTES {
                return Err(HookError::Failed(format!("answer longer than {MAX_REPLY_BYTES} bytes")));
            }
            answer.extend_from_slice(&chunk);
        }
        Ok(answer)
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| HookError::TimedOut(timeout.as_millis()))?
}

/// `url` as messages and logs show it: without its user info and query, which may hold a
/// credential.
fn shown(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.to_string()
}
