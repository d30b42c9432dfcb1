//! Turn leases in PostgreSQL (`store::lease`): one row per session, `turn_leases`, each
//! statement a short transaction of its own. Times are the database's clock
//! (`clock_timestamp()`), so replicas' clocks never need to agree.

use std::time::Duration;

use deadpool_postgres::Transaction;
use futures::future::BoxFuture;
use tokio::sync::broadcast;

use super::{PostgresStore, Prepared, int, uint};
use crate::ids::{MessageId, SessionId};
use crate::store::{ExclusiveGuard, LeaseGrant, Signal, Standing, StoreError, StoredMail, TurnLeases};

/// A lease's length in whole milliseconds, as the statements take it.
fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

impl TurnLeases for PostgresStore {
    fn take<'a>(
        &'a self,
        id: &'a SessionId,
        holder: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<LeaseGrant>, StoreError>> {
        Box::pin(async move {
            // One statement, so of two takers exactly one wins (the other waits on the row,
            // then finds it unexpired), and one round trip. The watermark is read with the
            // statement's snapshot: a save that commits while the take waits (its holder's
            // lease expired meanwhile) is not seen, and a copy that misses it is refused at
            // its own save by the journal's order (`store::rules`), never merged over it.
            let row = self
                .inner
                .row_if_any(
                    "WITH previous AS (
                         SELECT holder, expires_at > '-infinity' AS unreleased
                         FROM turn_leases WHERE session_id = $1),
                     taken AS (
                         INSERT INTO turn_leases (session_id, holder, epoch, expires_at)
                         VALUES ($1, $2, 1, clock_timestamp() + $3::float8 * interval '1 millisecond')
                         ON CONFLICT (session_id) DO UPDATE SET holder = EXCLUDED.holder,
                             epoch = turn_leases.epoch + 1, expires_at = EXCLUDED.expires_at
                         WHERE turn_leases.expires_at <= clock_timestamp()
                         RETURNING epoch)
                     SELECT taken.epoch, (SELECT event_seq FROM sessions WHERE id = $1),
                         (SELECT holder FROM previous WHERE unreleased)
                     FROM taken",
                    &[&id.as_str(), &holder, &(millis(ttl) as f64)],
                )
                .await?;
            Ok(row.map(|row| LeaseGrant {
                epoch: uint(row.get(0)),
                stored_event_seq: row.get::<_, Option<i64>>(1).map(uint),
                lost: row.get::<_, Option<String>>(2).filter(|previous| previous != holder),
            }))
        })
    }

    fn renew<'a>(
        &'a self,
        id: &'a SessionId,
        holder: &'a str,
        epoch: u64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let renewed = self
                .inner
                .run(
                    "UPDATE turn_leases SET expires_at = clock_timestamp() + $4::float8 * interval '1 millisecond'
                     WHERE session_id = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()",
                    &[&id.as_str(), &holder, &int(epoch), &(millis(ttl) as f64)],
                )
                .await?;
            Ok(renewed == 1)
        })
    }

    fn release<'a>(
        &'a self,
        id: &'a SessionId,
        holder: &'a str,
        epoch: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.inner
                .run(
                    "UPDATE turn_leases SET expires_at = '-infinity'
                     WHERE session_id = $1 AND holder = $2 AND epoch = $3",
                    &[&id.as_str(), &holder, &int(epoch)],
                )
                .await?;
            Ok(())
        })
    }

    fn epoch<'a>(&'a self, id: &'a SessionId) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let row = self
                .inner
                .row_if_any("SELECT epoch FROM turn_leases WHERE session_id = $1", &[&id.as_str()])
                .await?;
            Ok(row.map_or(0, |row| uint(row.get(0))))
        })
    }

    fn standing<'a>(&'a self, id: &'a SessionId) -> BoxFuture<'a, Result<Option<Standing>, StoreError>> {
        Box::pin(async move {
            let row = self
                .inner
                .row_if_any(
                    "SELECT s.event_seq, CASE WHEN l.expires_at > clock_timestamp() THEN l.holder END
                     FROM sessions s LEFT JOIN turn_leases l ON l.session_id = s.id WHERE s.id = $1",
                    &[&id.as_str()],
                )
                .await?;
            Ok(row.map(|row| Standing { event_seq: uint(row.get(0)), holder: row.get(1) }))
        })
    }

    fn post_within<'a>(
        &'a self,
        id: &'a SessionId,
        mail: &'a StoredMail,
        evict: Option<&'a MessageId>,
        capacity: usize,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(super::write::post(&self.inner, id.as_str(), mail, evict, Some(capacity)))
    }

    fn signal(&self, signal: Signal) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.inner.client().await?;
            self.inner.notify(&client, &signal).await
        })
    }

    fn exclusive<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<ExclusiveGuard, StoreError>> {
        Box::pin(async move {
            let client = self.inner.client().await?;
            client.run("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&name]).await?;
            Ok(ExclusiveGuard::new(Box::new(Section { client: Some(client) })))
        })
    }

    fn signals(&self) -> broadcast::Receiver<Signal> {
        let inner = &self.inner;
        inner
            .listener
            .get_or_init(|| {
                super::notify::Listener::start(inner.config.clone(), inner.tls.clone(), inner.origin.clone())
            })
            .subscribe()
    }
}

/// Refuses a save whose epoch is not the lease's current one (0 when never taken). The row is
/// locked in share mode to the commit, so a take waits for the save, and a save after a take
/// sees its epoch.
pub(super) async fn check_fence(transaction: &Transaction<'_>, id: &str, fence: u64) -> Result<(), StoreError> {
    let row =
        transaction.row_if_any("SELECT epoch FROM turn_leases WHERE session_id = $1 FOR SHARE", &[&id]).await?;
    let current = row.map_or(0, |row| uint(row.get(0)));
    if current != fence {
        return Err(StoreError::Fenced { id: id.to_owned(), fence, current });
    }
    Ok(())
}

/// A session-level advisory lock on a pooled connection. Dropped, the lock is released on that
/// connection before it goes back to the pool; if that cannot be done, the connection is
/// closed instead, which releases it too. Never returned to the pool still locked.
struct Section {
    client: Option<deadpool_postgres::Object>,
}

impl Drop for Section {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(deadpool_postgres::Object::take(client));
            return;
        };
        runtime.spawn(async move {
            if let Err(error) = client.run("SELECT pg_advisory_unlock_all()", &[]).await {
                tracing::warn!("leaving an exclusive section: {error}; closing its connection");
                drop(deadpool_postgres::Object::take(client));
            }
        });
    }
}
