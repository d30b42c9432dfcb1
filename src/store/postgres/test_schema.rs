//! A schema of its own per test on a test database, for the store's tests and the binary's
//! (`tests/`, through the `test-support` feature): created empty, dropped after.
// Test support: a failed setup is a failed test, said at once.
#![allow(clippy::expect_used)]

/// Creates schema `name` on `config`'s database.
pub async fn create_schema(config: &tokio_postgres::Config, name: &str) {
    connect(config).await.batch_execute(&format!("CREATE SCHEMA {name}")).await.expect("create the test schema");
}

/// Drops schema `name` with everything in it. Called from `Drop`, outside async code, so a
/// thread of its own runs the statement; bounded by a lock timeout, so a transaction a broken
/// test left open fails the drop rather than hang it.
pub fn drop_schema(config: &tokio_postgres::Config, name: &str) {
    let (config, name) = (config.clone(), name.to_owned());
    let dropped = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async {
            let drop = format!("SET lock_timeout = '10s'; DROP SCHEMA {name} CASCADE");
            connect(&config).await.batch_execute(&drop).await.expect("drop the test schema");
        });
    });
    let _ = dropped.join();
}

/// A client on `config`'s database, its connection driven in the background.
pub async fn connect(config: &tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.expect("connect to the test database");
    tokio::spawn(connection);
    client
}
