//! The machine's PostgreSQL for tests of a database store: a schema of its own per test on the
//! database `DEPUTY_TEST_POSTGRES` names, dropped with it. `.ci/run` sets the variable (and
//! fails when it cannot connect); without it these tests return at once, and one line on stderr
//! says so.

use std::io::Write;
use std::sync::Once;

use deputy::store::test_schema::{connect, create_schema, drop_schema};

/// The environment variable naming the test database.
const DATABASE: &str = "DEPUTY_TEST_POSTGRES";

/// A schema of the test database, and the URL that makes it a deputy store.
pub struct TestDatabase {
    config: tokio_postgres::Config,
    pub schema: String,
    /// `--store` for deputy: the test database with this schema as its search path.
    pub url: String,
}

impl TestDatabase {
    /// A fresh schema, or `None` when no test database is given.
    pub async fn create() -> Option<Self> {
        let Ok(base) = std::env::var(DATABASE) else {
            static SAID: Once = Once::new();
            SAID.call_once(|| {
                // Straight to stderr, past the harness's capture: one line, whatever passes.
                let _ =
                    writeln!(std::io::stderr(), "the PostgreSQL replica tests were not run: {DATABASE} is not set");
            });
            return None;
        };
        let config: tokio_postgres::Config = base.parse().expect("DEPUTY_TEST_POSTGRES is a PostgreSQL URL");
        let schema = format!("deputy_e2e_{}", uuid::Uuid::new_v4().simple());
        create_schema(&config, &schema).await;
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}options=-c%20search_path%3D{schema}");
        Some(Self { config, schema, url })
    }

    /// A client on this schema, to look at what deputy wrote.
    pub async fn client(&self) -> tokio_postgres::Client {
        let mut scoped = self.config.clone();
        scoped.options(format!("-c search_path={}", self.schema));
        connect(&scoped).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        drop_schema(&self.config, &self.schema);
    }
}
