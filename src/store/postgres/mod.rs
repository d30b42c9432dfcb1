//! [`PostgresStore`]: the session store in a PostgreSQL database (issue 29), for deployments
//! that outgrow one machine. The same contract as redb (`store::rules` decides what a save
//! may do; `store::contract` holds both to it): a save is one transaction whose writes follow
//! what the turn added, values are the same sealed, versioned JSON as redb's, and lists read
//! the summaries kept beside each record.
//!
//! Connections come from a `deadpool-postgres` pool over `tokio-postgres`. The session row
//! is locked (`FOR UPDATE`) for a save or an archive, so two writers of one session serialize
//! in the database; saves that carry journal events take their commit-order positions from a
//! sequence, and readers hold back at a position a running save still holds (`read`).
//! Fixed statements are prepared once per connection (`statement`).

use std::path::Path;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Transaction};
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::ids::{MessageId, SessionId};
use crate::llm::Message;
use crate::model::SessionRecord;
use crate::model::StoredEvent;
use crate::model::memory::MemoryRecord;
use crate::secrets::SecretSealer;
use crate::store::codec::{decode_sealed, encode_sealed};
use crate::store::{
    JournalCommit, MemoryMarks, OpenDelegated, SaveRequest, SessionStore, StoreError, StoredChild, StoredInbox,
    StoredListQuery, StoredMail, StoredPage, StoredPeer,
};

mod lease;
mod notify;
mod read;
mod schema;
mod statement;
#[cfg(any(test, feature = "test-support"))]
pub mod test_schema;
mod tls;
mod write;

use statement::Prepared;

/// Connections a store keeps at most.
const POOL_SIZE: usize = 16;

#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

/// The pool and the sealer of the store's secrets: what every operation works with; and what
/// the signals between replicas need.
struct Inner {
    pool: Pool,
    sealer: Arc<dyn SecretSealer>,
    /// Where the listening connection connects.
    config: tokio_postgres::Config,
    /// How its connections are encrypted: the listening one too.
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// This store's name in the signals it sends, unique per open.
    origin: Arc<str>,
    /// Other replicas' signals, listened for from the first subscriber on.
    listener: std::sync::OnceLock<notify::Listener>,
}

impl Inner {
    /// Every value goes through the sealer, as in redb.
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, StoreError> {
        encode_sealed(&self.sealer, value)
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, StoreError> {
        decode_sealed(&self.sealer, bytes)
    }

    /// Sends `signal` to the other replicas: at once, or, inside a transaction, at its commit.
    async fn notify(&self, client: &impl Prepared, signal: &crate::store::Signal) -> Result<(), StoreError> {
        let payload = notify::payload(&self.origin, signal);
        client.run("SELECT pg_notify($1, $2)", &[&notify::CHANNEL, &payload]).await?;
        Ok(())
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(unreachable)
    }

    /// One statement on a pooled connection, a transaction of its own: the rows it changed.
    async fn run(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        self.client().await?.run(sql, params).await
    }

    /// One statement's rows, read on a pooled connection.
    async fn rows(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        self.client().await?.rows(sql, params).await
    }

    /// One statement's row, if any.
    async fn row_if_any(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>, StoreError> {
        self.client().await?.row_if_any(sql, params).await
    }

    /// One statement's one row (an aggregate, say).
    async fn one_row(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, StoreError> {
        self.client().await?.one_row(sql, params).await
    }

    /// Runs `work` in one transaction (a read-only snapshot with `read_only`): committed when
    /// it succeeds, rolled back, and the rollback awaited, when it fails. A refused save then
    /// never leaves its session's row locked behind it until the connection is next used.
    async fn in_transaction<T>(
        &self,
        read_only: bool,
        work: impl AsyncFnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.build_transaction().read_only(read_only).start().await.map_err(backend)?;
        match work(&transaction).await {
            Ok(value) => {
                transaction.commit().await.map_err(backend)?;
                Ok(value)
            }
            Err(error) => {
                transaction.rollback().await.map_err(backend)?;
                Err(error)
            }
        }
    }
}

/// Folds a driver error into the store's one backend variant, with the server's own message
/// where it gave one.
/// A connection the pool could not make, with its causes: "error connecting to server" alone
/// does not say that the port refused or the password was wrong.
fn unreachable(error: deadpool_postgres::PoolError) -> StoreError {
    let mut message = format!("PostgreSQL: {error}");
    let mut cause = std::error::Error::source(&error);
    while let Some(error) = cause {
        let text = error.to_string();
        if !message.ends_with(&text) {
            message.push_str(&format!(": {text}"));
        }
        cause = error.source();
    }
    StoreError::Backend(message)
}

fn backend(error: tokio_postgres::Error) -> StoreError {
    let detail = error.as_db_error().map_or_else(|| error.to_string(), |db| db.to_string());
    StoreError::Backend(format!("PostgreSQL: {detail}"))
}

/// A count or sequence number as PostgreSQL's `bigint`.
fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A `bigint` back as a count or sequence number.
fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`), creates or migrates
    /// its tables, and binds the store to the key in `key_file` (created if the database holds
    /// no sealed values yet). TLS as libpq reads `sslmode` and `sslrootcert` ([`tls`]).
    ///
    /// Errors: `Backend` (a bad URL, an unreachable or refusing database), `Corrupt` (a schema
    /// newer than this binary), `Key` (a missing or foreign key file).
    pub async fn open(url: &str, key_file: &Path) -> Result<Self, StoreError> {
        Self::open_connection(tls::Connection::from_url(url)?, key_file).await
    }

    /// [`PostgresStore::open`] with a connection configuration already made (TLS as its
    /// `sslmode` says, the server's certificate unchecked).
    pub async fn open_with(config: tokio_postgres::Config, key_file: &Path) -> Result<Self, StoreError> {
        Self::open_connection(tls::Connection::unverified(config)?, key_file).await
    }

    async fn open_connection(connection: tls::Connection, key_file: &Path) -> Result<Self, StoreError> {
        let tls::Connection { config, tls } = connection;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|error| StoreError::Backend(format!("PostgreSQL pool: {error}")))?;
        let mut client = pool.get().await.map_err(unreachable)?;
        schema::migrate(&mut client).await?;
        let sealer = write::bind_key(&client, key_file).await?;
        drop(client);
        let origin = uuid::Uuid::new_v4().simple().to_string().into();
        let listener = std::sync::OnceLock::new();
        Ok(Self { inner: Arc::new(Inner { pool, sealer: Arc::new(sealer), config, tls, origin, listener }) })
    }
}

impl SessionStore for PostgresStore {
    fn save(&self, request: SaveRequest) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(write::save(&self.inner, request))
    }

    fn record(&self, id: &SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, StoreError>> {
        let id = id.clone();
        Box::pin(async move { read::record(&self.inner, id.as_str()).await })
    }

    fn history(&self, id: &SessionId) -> BoxFuture<'_, Result<Vec<Message>, StoreError>> {
        let id = id.clone();
        Box::pin(async move { read::history(&self.inner, id.as_str()).await })
    }

    fn list(&self, query: StoredListQuery) -> BoxFuture<'_, Result<StoredPage, StoreError>> {
        Box::pin(async move { read::list(&self.inner, &query).await })
    }

    fn tool_output(&self, id: &SessionId, tool_use_id: &str) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
        let (id, tool_use_id) = (id.clone(), tool_use_id.to_owned());
        Box::pin(async move { read::tool_output(&self.inner, id.as_str(), &tool_use_id).await })
    }

    fn archive(&self, id: &SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, StoreError>> {
        let id = id.clone();
        Box::pin(async move { write::archive(&self.inner, id.as_str()).await })
    }

    fn post(
        &self,
        id: &SessionId,
        mail: StoredMail,
        evict: Option<MessageId>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let id = id.clone();
        Box::pin(async move { write::post(&self.inner, id.as_str(), &mail, evict.as_ref(), None).await.map(drop) })
    }

    fn inbox(&self, id: &SessionId) -> BoxFuture<'_, Result<StoredInbox, StoreError>> {
        let id = id.clone();
        Box::pin(async move { read::inbox(&self.inner, id.as_str()).await })
    }

    fn peers(&self, group: &str) -> BoxFuture<'_, Result<Vec<StoredPeer>, StoreError>> {
        let group = group.to_owned();
        Box::pin(async move { read::peers(&self.inner, &group).await })
    }

    fn children(&self, parent: &SessionId) -> BoxFuture<'_, Result<Vec<StoredChild>, StoreError>> {
        let parent = parent.clone();
        Box::pin(async move { read::children(&self.inner, parent.as_str()).await })
    }

    fn open_delegated(&self, owner: &str) -> BoxFuture<'_, Result<OpenDelegated, StoreError>> {
        let owner = owner.to_owned();
        Box::pin(async move { read::open_delegated(&self.inner, &owner).await })
    }

    fn events(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Option<Vec<StoredEvent>>, StoreError>> {
        let id = id.clone();
        Box::pin(async move { read::events(&self.inner, id.as_str(), after, limit).await })
    }

    fn journal_commits(&self, from: u64, limit: usize) -> BoxFuture<'_, Result<Vec<JournalCommit>, StoreError>> {
        Box::pin(read::journal_commits(&self.inner, from, limit))
    }

    fn journal_end(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(read::journal_end(&self.inner))
    }

    fn cursor(&self, name: &str) -> BoxFuture<'_, Result<Option<u64>, StoreError>> {
        let key = write::cursor_key(name);
        Box::pin(async move { read::meta_num(&self.inner, &key).await })
    }

    fn set_cursor(&self, name: &str, position: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        let key = write::cursor_key(name);
        Box::pin(async move { write::set_meta_num(&self.inner, &key, position).await })
    }

    fn remember(&self, memory: MemoryRecord) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move { write::remember(&self.inner, memory).await })
    }

    fn forget(&self, id: u64, owner: &str) -> BoxFuture<'_, Result<bool, StoreError>> {
        let owner = owner.to_owned();
        Box::pin(async move { write::forget(&self.inner, id, &owner).await })
    }

    fn memories(&self, after: u64, limit: usize) -> BoxFuture<'_, Result<Vec<MemoryRecord>, StoreError>> {
        Box::pin(read::memories(&self.inner, after, limit))
    }

    fn memory_marks(&self) -> BoxFuture<'_, Result<MemoryMarks, StoreError>> {
        Box::pin(read::memory_marks(&self.inner))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.inner.run("SELECT 1", &[]).await?;
            Ok(())
        })
    }

    /// Any number of replicas may open one database.
    fn leases(&self) -> Option<&dyn crate::store::TurnLeases> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
