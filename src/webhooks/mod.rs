//! Webhooks: the operator's `[[webhooks]]` endpoints hear about sessions (a turn completed or
//! failed, a session idle, a budget exhausted, approvals pending, a session archived) as
//! signed HTTP POSTs, per the Standard Webhooks specification ([`signature`]).
//!
//! Deliveries come from the store's journal, in the order saves committed
//! (`SessionStore::journal_commits`), each webhook with a cursor persisted in the store: a
//! restart resumes where the last acknowledged delivery left off, so nothing is lost, and
//! only events that happened are sent (a new webhook starts at the journal's end, it is not
//! sent the past). A delivery is retried with backoff until the endpoint acknowledges it (2xx);
//! each webhook has one request in flight, in a task of its own, so a slow or failing endpoint
//! delays only its own deliveries, never a turn. Receivers deduplicate by `webhook-id`: a
//! crash between a delivery and the cursor's save sends it again (at least once).

pub mod delivery;
pub mod events;
pub mod signature;

use std::sync::{Arc, Mutex, PoisonError};

use chrono::Utc;

use self::events::EventType;
use self::signature::Secret;
use crate::model::webhooks::{WebhookStatus, WebhooksStatus};
use crate::store::{SessionStore, StoreError};
use crate::tools::mcp::reach::{self, Reach, Unreachable};

/// One endpoint, as the config file describes it (secret read).
#[derive(Debug, Clone)]
pub struct WebhookSpec {
    /// Its cursor's key: the entry's `name`, else its URL.
    pub name: String,
    pub url: String,
    pub events: Vec<EventType>,
    pub secret: Secret,
}

/// The configured webhooks, their workers' shared state, and what `webhooks/status` shows.
#[derive(Debug)]
pub struct Webhooks {
    hooks: Vec<Arc<Hook>>,
    reach: Reach,
}

/// One webhook and how its deliveries go.
#[derive(Debug)]
pub(crate) struct Hook {
    pub(crate) spec: WebhookSpec,
    status: Mutex<WebhookStatus>,
}

impl Webhooks {
    /// Checks every endpoint: an http(s) URL, and, unless `private_urls` (`[policy]
    /// webhook_private_urls = "allow"`), not an address literal off the public internet (a name
    /// is checked at every connection, as for inline MCP servers).
    pub fn new(specs: Vec<WebhookSpec>, private_urls: bool) -> Result<Self, String> {
        let reach = if private_urls { Reach::Any } else { Reach::Public };
        let mut hooks = Vec::with_capacity(specs.len());
        for spec in specs {
            check_url(&spec.url, reach)?;
            if hooks.iter().any(|hook: &Arc<Hook>| hook.spec.name == spec.name) {
                return Err(format!("two [[webhooks]] are named {:?}: give each a distinct `name`", spec.name));
            }
            let status = WebhookStatus {
                name: spec.name.clone(),
                url: spec.url.clone(),
                events: spec.events.iter().map(|kind| kind.name().to_owned()).collect(),
                position: 0,
                delivered: 0,
                failures: 0,
                failing: false,
                last_error: None,
                last_success_at: None,
                last_failure_at: None,
            };
            hooks.push(Arc::new(Hook { spec, status: Mutex::new(status) }));
        }
        Ok(Self { hooks, reach })
    }

    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Starts one delivery task per webhook, reading `store`'s journal from the webhook's
    /// cursor; a webhook without one (new) gets the journal's end now, so it is sent what
    /// happens from here on, not the past. Called before the server takes requests.
    /// On a store several processes share, each webhook delivers from the one replica that
    /// holds its lease (`leasing`).
    pub async fn start(
        &self,
        store: Arc<dyn SessionStore>,
        leasing: crate::store::Leasing,
    ) -> Result<(), StoreError> {
        for hook in &self.hooks {
            let position = delivery::start_position(store.as_ref(), &hook.cursor_key()).await?;
            hook.at(position);
            tokio::spawn(delivery::run(hook.clone(), store.clone(), self.reach, leasing.clone(), position));
        }
        Ok(())
    }

    pub fn status(&self) -> WebhooksStatus {
        WebhooksStatus { webhooks: self.hooks.iter().map(|hook| hook.lock().clone()).collect() }
    }
}

impl Hook {
    fn lock(&self) -> std::sync::MutexGuard<'_, WebhookStatus> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store's name for this webhook's cursor.
    pub(crate) fn cursor_key(&self) -> String {
        format!("webhook:{}", self.spec.name)
    }

    pub(crate) fn at(&self, position: u64) {
        self.lock().position = position;
    }

    pub(crate) fn delivered(&self) {
        let mut status = self.lock();
        status.delivered += 1;
        status.failures = 0;
        status.failing = false;
        status.last_success_at = Some(Utc::now());
    }

    /// Records a failed attempt; how many failed in a row.
    pub(crate) fn failed(&self, error: String) -> u64 {
        let mut status = self.lock();
        status.failures += 1;
        status.failing = true;
        status.last_error = Some(error);
        status.last_failure_at = Some(Utc::now());
        status.failures
    }
}

/// An http(s) URL whose host, when an address literal, `reach` allows (a name is judged at
/// every delivery).
fn check_url(url: &str, reach: Reach) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|_| format!("webhook url {url:?} is not a valid URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("webhook url {url:?} is not http:// or https://"));
    }
    reach::check_address(url, reach).map_err(|why| unreachable(url, why))
}

/// Why a webhook's `url` may not be reached, in the words of its own switch.
fn unreachable(url: &str, why: Unreachable) -> String {
    match why {
        Unreachable::NotPublic { .. } => format!(
            "webhook url {url:?} is not a public address; webhooks may reach only public addresses (the operator \
             allows others with [policy] webhook_private_urls = \"allow\")"
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, url: &str) -> WebhookSpec {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        WebhookSpec { name: name.into(), url: url.into(), events: vec![EventType::TurnCompleted], secret }
    }

    #[test]
    fn urls_are_http_and_public_unless_the_operator_allows_private_ones() {
        assert!(Webhooks::new(vec![spec("a", "https://hooks.example.com/deputy")], false).is_ok());
        let refused = Webhooks::new(vec![spec("a", "http://127.0.0.1:9/hook")], false).unwrap_err();
        assert!(refused.contains("webhook_private_urls"), "{refused}");
        assert!(Webhooks::new(vec![spec("a", "http://[::1]:9/hook")], false).is_err());
        assert!(Webhooks::new(vec![spec("a", "http://127.0.0.1:9/hook")], true).is_ok());
        assert!(Webhooks::new(vec![spec("a", "ftp://hooks.example.com/")], true).unwrap_err().contains("http"));
        let twice = vec![spec("a", "https://one.example.com/"), spec("a", "https://two.example.com/")];
        assert!(Webhooks::new(twice, false).unwrap_err().contains("distinct"));
    }

    #[test]
    fn the_status_shows_the_endpoint_and_never_the_secret() {
        let webhooks = Webhooks::new(vec![spec("a", "https://hooks.example.com/deputy")], false).unwrap();
        let shown = serde_json::to_string(&webhooks.status()).unwrap();
        assert!(shown.contains("hooks.example.com") && shown.contains("turn.completed"), "{shown}");
        assert!(!shown.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{shown}");
    }
}
