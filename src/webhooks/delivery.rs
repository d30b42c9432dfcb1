//! One webhook's worker: follows the journal from its cursor and delivers each event it
//! subscribes to until the endpoint acknowledges it, then moves the cursor on.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use super::Hook;
use super::events::EventType;
use crate::ids::SessionId;
use crate::model::StoredEvent;
use tokio_util::sync::CancellationToken;

use crate::store::{HeldLease, Leasing, SessionStore};
use crate::tools::mcp::reach::{self, Reach};

/// How often an idle worker looks for new journal commits: a read transaction, nothing more.
const POLL: Duration = Duration::from_millis(200);
/// Journal commits read at once; the cursor is saved after each such batch.
const BATCH: usize = 32;
/// How long one delivery may take, answer included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait before the first retry, doubled after each failure up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_secs(1);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);
/// A failing delivery is logged at its first failure and every this many after.
const LOG_EVERY: u64 = 10;

/// The worker of `hook`, from journal position `position`, for as long as the process runs.
/// On a store several processes share, it delivers only while it holds the webhook's lease,
/// so one replica delivers each event (another takes over, from the saved cursor, when that
/// one stops); the others wait for the lease.
pub(super) async fn run(
    hook: Arc<Hook>,
    store: Arc<dyn SessionStore>,
    reach: Reach,
    leasing: Leasing,
    mut position: u64,
) {
    let key = hook.cursor_key();
    let client = reach::client(reach);
    let lease_id = SessionId::from_string(format!("~{key}"));
    let mut held: Option<(HeldLease, CancellationToken)> = None;
    loop {
        if let Some(leases) = store.leases()
            && held.as_ref().is_none_or(|(_, lost)| lost.is_cancelled())
        {
            held = None;
            match leases.take(&lease_id, &leasing.holder, leasing.ttl).await {
                Ok(Some(grant)) => match start_position(store.as_ref(), &key).await {
                    Ok(saved) => {
                        let lost = CancellationToken::new();
                        let lease =
                            HeldLease::start(store.clone(), lease_id.clone(), &leasing, grant.epoch, lost.clone());
                        held = Some((lease, lost));
                        position = saved;
                        hook.at(position);
                        tracing::info!(webhook = %hook.spec.name, position, "delivering this webhook from this replica");
                    }
                    Err(error) => tracing::warn!(webhook = %hook.spec.name, %error, "reading the webhook's cursor"),
                },
                Ok(None) => {}
                Err(error) => tracing::warn!(webhook = %hook.spec.name, %error, "taking the webhook's lease"),
            }
            if held.is_none() {
                tokio::time::sleep(leasing.ttl / 3).await;
                continue;
            }
        }
        let commits = match store.journal_commits(position, BATCH).await {
            Ok(commits) => commits,
            Err(error) => {
                tracing::warn!(webhook = %hook.spec.name, %error, "reading the journal for webhooks");
                tokio::time::sleep(MAX_RETRY_DELAY).await;
                continue;
            }
        };
        if commits.is_empty() {
            tokio::time::sleep(POLL).await;
            continue;
        }
        for commit in &commits {
            for event in &commit.events {
                for kind in EventType::raised_by(event).into_iter().filter(|kind| hook.spec.events.contains(kind)) {
                    deliver(&hook, &client, reach, &commit.session_id, event, kind).await;
                }
            }
            position = commit.position + 1;
            hook.at(position);
        }
        // A lease lost meanwhile: the replica that holds it now keeps the cursor.
        if held.as_ref().is_some_and(|(_, lost)| lost.is_cancelled()) {
            continue;
        }
        // Not saved (a full disk): the next batch's save tries again; a restart in between
        // sends this batch again, which `webhook-id` lets receivers recognise.
        if let Err(error) = store.set_cursor(&key, position).await {
            tracing::warn!(webhook = %hook.spec.name, %error, "saving the webhook's cursor");
        }
    }
}

/// Where the worker starts: its saved cursor, else (a new webhook) the journal's end, saved.
pub(super) async fn start_position(store: &dyn SessionStore, key: &str) -> Result<u64, crate::store::StoreError> {
    if let Some(position) = store.cursor(key).await? {
        return Ok(position);
    }
    let end = store.journal_end().await?;
    store.set_cursor(key, end).await?;
    Ok(end)
}

/// Sends `kind` of journal event `event` until the endpoint answers 2xx.
async fn deliver(
    hook: &Hook,
    client: &reqwest::Client,
    reach: Reach,
    session_id: &SessionId,
    event: &StoredEvent,
    kind: EventType,
) {
    // The same id at every attempt and after a restart: what receivers deduplicate by.
    let id = format!("{session_id}.{}.{}", event.seq, kind.name());
    let payload = json!({
        "type": kind.name(),
        "timestamp": event.at,
        "data": {"session_id": session_id, "turn": event.turn, "seq": event.seq, "event": event.event},
    });
    let body = payload.to_string().into_bytes();
    let mut delay = FIRST_RETRY_DELAY;
    loop {
        let error = match attempt(hook, client, reach, &id, &body).await {
            Ok(()) => {
                hook.delivered();
                return;
            }
            Err(error) => error,
        };
        let failures = hook.failed(error.clone());
        if failures == 1 || failures.is_multiple_of(LOG_EVERY) {
            tracing::warn!(webhook = %hook.spec.name, %id, failures, %error, "webhook delivery failed; retrying");
        }
        // Up to a quarter more, so webhooks failing together do not retry in step.
        let jitter = delay.mul_f64(fastrand::f64() / 4.0);
        tokio::time::sleep(delay + jitter).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

/// One signed POST; why it was not acknowledged.
async fn attempt(hook: &Hook, client: &reqwest::Client, reach: Reach, id: &str, body: &[u8]) -> Result<(), String> {
    // A name that resolves off the public internet is refused here with a clear reason; the
    // client's resolver refuses it again at connection time.
    if let Err(why) = reach::check(&hook.spec.url, reach).await {
        return Err(super::unreachable(&hook.spec.url, why));
    }
    let timestamp = Utc::now().timestamp();
    let response = client
        .post(&hook.spec.url)
        .timeout(REQUEST_TIMEOUT)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", hook.spec.secret.sign(id, timestamp, body))
        .body(body.to_vec())
        .send()
        .await
        .map_err(|error| with_sources(&error))?;
    let status = response.status();
    if status.is_success() { Ok(()) } else { Err(format!("the endpoint answered {status}")) }
}

/// An error with its causes (reqwest's own text is only "error sending request").
fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
