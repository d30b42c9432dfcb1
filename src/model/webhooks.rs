//! What `webhooks/status` answers: each configured webhook and how its deliveries go.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhooksStatus {
    pub webhooks: Vec<WebhookStatus>,
}

/// One `[[webhooks]]` entry. Its secret is never shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookStatus {
    /// Its `name`, else its URL: the key of its persisted cursor.
    pub name: String,
    pub url: String,
    /// The event types it receives.
    pub events: Vec<String>,
    /// The journal position it delivers next (everything before it was delivered).
    pub position: u64,
    /// Deliveries acknowledged (2xx) since the server started.
    pub delivered: u64,
    /// Attempts of the delivery under way that failed in a row; 0 when the last one succeeded.
    pub failures: u64,
    /// Whether the delivery under way keeps failing (it is retried with backoff, never skipped).
    pub failing: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_at: Option<DateTime<Utc>>,
}
