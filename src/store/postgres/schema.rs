//! The PostgreSQL store's tables, created and migrated by deputy at open: versioned
//! migrations, each in one transaction under an advisory lock (so replicas starting together
//! migrate once), refused when the database is newer than this binary.
//!
//! Every id column is `COLLATE "C"`: lists order by id as bytes, as redb does, whatever the
//! database's default collation. A peer group's key is `bytea`: it joins owner and group with
//! a NUL byte, which `text` cannot hold.

use tokio_postgres::Client;

use super::backend;
use crate::store::StoreError;

/// The migrations, in order: the database's `schema_version` is how many it has run.
const MIGRATIONS: &[&str] = &[
    // 1: sessions, their history, journal, mail, tree, memories and the numbers of the store.
    r#"
    CREATE TABLE deputy_meta (key text COLLATE "C" PRIMARY KEY, num bigint, text text);
    CREATE TABLE sessions (
        id text COLLATE "C" PRIMARY KEY,
        owner text COLLATE "C" NOT NULL,
        archived boolean NOT NULL,
        updated_ms bigint NOT NULL,
        record bytea NOT NULL,
        summary bytea NOT NULL
    );
    CREATE INDEX sessions_by_update ON sessions (archived, updated_ms, id);
    CREATE INDEX sessions_by_owner ON sessions (owner, archived, updated_ms, id);
    CREATE TABLE messages (
        session_id text COLLATE "C" NOT NULL, seq bigint NOT NULL, body bytea NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE discarded (
        session_id text COLLATE "C" NOT NULL, epoch bigint NOT NULL, seq bigint NOT NULL, body bytea NOT NULL,
        PRIMARY KEY (session_id, epoch, seq)
    );
    CREATE TABLE tool_outputs (
        session_id text COLLATE "C" NOT NULL, tool_use_id text COLLATE "C" NOT NULL, content text NOT NULL,
        PRIMARY KEY (session_id, tool_use_id)
    );
    CREATE TABLE events (
        session_id text COLLATE "C" NOT NULL, seq bigint NOT NULL, body bytea NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE journal_order (
        position bigint PRIMARY KEY, session_id text COLLATE "C" NOT NULL,
        first_seq bigint NOT NULL, end_seq bigint NOT NULL
    );
    CREATE TABLE inbox (
        session_id text COLLATE "C" NOT NULL, message_id text COLLATE "C" NOT NULL, body bytea NOT NULL,
        PRIMARY KEY (session_id, message_id)
    );
    CREATE TABLE peers (
        group_key bytea NOT NULL, session_id text COLLATE "C" NOT NULL, name text NOT NULL,
        PRIMARY KEY (group_key, session_id)
    );
    CREATE TABLE children (
        parent_id text COLLATE "C" NOT NULL, child_id text COLLATE "C" NOT NULL,
        PRIMARY KEY (parent_id, child_id)
    );
    CREATE TABLE delegated (child_id text COLLATE "C" PRIMARY KEY, parent_id text COLLATE "C" NOT NULL);
    CREATE TABLE memories (id bigint PRIMARY KEY, owner text COLLATE "C" NOT NULL, body bytea NOT NULL);
    "#,
    // 2: turn leases across replicas (`store::lease`), and each session's journal watermark in
    // the clear, so a lease's grant says whether a replica's copy is behind.
    r#"
    ALTER TABLE sessions ADD COLUMN event_seq bigint NOT NULL DEFAULT 0;
    CREATE TABLE turn_leases (
        session_id text COLLATE "C" PRIMARY KEY,
        holder text NOT NULL,
        epoch bigint NOT NULL,
        expires_at timestamptz NOT NULL
    );
    "#,
    // 3: whether mail is parked, in the clear, so an inbox's waiting mail is counted in the
    // database (`TurnLeases::post_within`) and its capacity holds across replicas. Mail kept
    // before counts as waiting until it is delivered: at most a message too few for a while.
    r#"
    ALTER TABLE inbox ADD COLUMN parked boolean NOT NULL DEFAULT false;
    "#,
    // 4: the journal's commit order without serializing commits: positions from a sequence
    // (`write::order`); a reader holds back at a gap until the save holding it ends, and
    // fills a gap left by a rollback with an empty row (`read::journal_commits`).
    r#"
    CREATE SEQUENCE journal_position MINVALUE 0 START 0;
    SELECT setval('journal_position', (SELECT coalesce(max(position) + 1, 0) FROM journal_order), false);
    "#,
];

/// The advisory lock key migrations run under. (`0x…0002` ordered the journal's commits
/// before migration 4: not to be reused.)
pub(super) const MIGRATION_LOCK: i64 = 0x6465_7075_7479_0001;

/// Brings the database up to this binary's schema.
///
/// Errors: `Backend` (the database is unreachable or refuses), `Corrupt` (the database was
/// migrated by a newer deputy: this one would not know its tables).
pub(super) async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let transaction = client.transaction().await.map_err(backend)?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(backend)?;
    let has_meta = transaction
        .query_one("SELECT to_regclass('deputy_meta') IS NOT NULL", &[])
        .await
        .map_err(backend)?
        .get::<_, bool>(0);
    let version = if has_meta {
        let row = transaction
            .query_opt("SELECT num FROM deputy_meta WHERE key = 'schema_version'", &[])
            .await
            .map_err(backend)?;
        row.and_then(|row| row.get::<_, Option<i64>>(0)).unwrap_or(0)
    } else {
        0
    };
    let known = MIGRATIONS.len() as i64;
    if version > known {
        // Rolled back before answering: the advisory lock is the whole database's.
        transaction.rollback().await.map_err(backend)?;
        return Err(StoreError::Corrupt(format!(
            "the database's schema is version {version}, newer than this deputy's {known}: run a newer deputy"
        )));
    }
    for migration in &MIGRATIONS[usize::try_from(version).unwrap_or(0)..] {
        transaction.batch_execute(migration).await.map_err(backend)?;
    }
    transaction
        .execute(
            "INSERT INTO deputy_meta (key, num) VALUES ('schema_version', $1)
             ON CONFLICT (key) DO UPDATE SET num = EXCLUDED.num",
            &[&known],
        )
        .await
        .map_err(backend)?;
    transaction.commit().await.map_err(backend)
}
