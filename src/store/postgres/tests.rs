//! The store contract against PostgreSQL: every case in a schema of its own, dropped after it,
//! on the database `DEPUTY_TEST_POSTGRES` names (`.ci/run` sets it, and fails when it cannot
//! connect). Without it these cases do not run, and one line on stderr says so.

use std::io::Write;
use std::sync::Once;

use super::PostgresStore;

crate::store::contract::store_contract!(open().await);

/// The environment variable naming the test database.
const DATABASE: &str = "DEPUTY_TEST_POSTGRES";

/// One case's schema, dropped with it.
struct Schema {
    config: tokio_postgres::Config,
    name: String,
    key_dir: tempfile::TempDir,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (config, name) = (self.config.clone(), self.name.clone());
        // Drop runs outside async code; a thread of its own runs the statement.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let client = connect(&config).await;
                // Bounded: a transaction left open by a failed case must fail the drop, not hang it.
                let drop = format!("SET lock_timeout = '10s'; DROP SCHEMA {name} CASCADE");
                client.batch_execute(&drop).await.unwrap();
            });
        });
        let _ = dropped.join();
    }
}

async fn connect(config: &tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.expect("connect to the test database");
    tokio::spawn(connection);
    client
}

/// An empty store in a fresh schema of the test database, or `None` without one.
async fn open() -> Option<(Schema, PostgresStore)> {
    let Ok(url) = std::env::var(DATABASE) else {
        static SAID: Once = Once::new();
        SAID.call_once(|| {
            // Straight to stderr, past the test harness's capture: one line, whatever passes.
            let _ = writeln!(std::io::stderr(), "the PostgreSQL store tests were not run: {DATABASE} is not set");
        });
        return None;
    };
    let config: tokio_postgres::Config = url.parse().expect("DEPUTY_TEST_POSTGRES is a PostgreSQL URL");
    let name = format!("deputy_test_{}", uuid::Uuid::new_v4().simple());
    connect(&config).await.batch_execute(&format!("CREATE SCHEMA {name}")).await.unwrap();
    let mut scoped = config.clone();
    scoped.options(format!("-c search_path={name}"));
    let key_dir = tempfile::tempdir().unwrap();
    let store = PostgresStore::open_with(scoped, &key_dir.path().join("store.key")).await.unwrap();
    Some((Schema { config, name, key_dir }, store))
}

/// A database is migrated once and reopened as it is; one migrated by a newer deputy, or
/// sealed with another key, is refused at open with the reason.
#[tokio::test]
async fn a_newer_schema_or_another_key_is_refused_at_open() {
    let Some((schema, store)) = open().await else { return };
    drop(store);
    let mut scoped = schema.config.clone();
    scoped.options(format!("-c search_path={}", schema.name));
    let key_file = schema.key_dir.path().join("store.key");
    PostgresStore::open_with(scoped.clone(), &key_file).await.expect("reopened with its own key");

    let other_key = schema.key_dir.path().join("other.key");
    let refused = PostgresStore::open_with(scoped.clone(), &other_key).await.unwrap_err();
    assert!(refused.to_string().contains("missing"), "{refused}");
    crate::store::sealer::KeySealer::create(&other_key).unwrap();
    let refused = PostgresStore::open_with(scoped.clone(), &other_key).await.unwrap_err();
    assert!(refused.to_string().contains("not the key"), "{refused}");

    let client = connect(&scoped).await;
    client.batch_execute("UPDATE deputy_meta SET num = num + 1 WHERE key = 'schema_version'").await.unwrap();
    let refused = PostgresStore::open_with(scoped, &key_file).await.unwrap_err();
    assert!(refused.to_string().contains("newer than this deputy"), "{refused}");
}
