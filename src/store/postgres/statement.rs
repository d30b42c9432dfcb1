//! Statements prepared once per connection. A statement sent as text is parsed and planned by
//! PostgreSQL at every use, and `tokio-postgres` spends a round trip preparing it first; a turn
//! runs about a dozen, so on a busy database that parsing is a good part of a turn's cost
//! (docs/BENCHMARKS.md, replicas). Every fixed statement of the store therefore goes through
//! [`Prepared`], which keeps it in the pooled connection's cache (`deadpool-postgres`) and
//! maps errors to the store's. Statements built at run time (the list filters) stay text:
//! a cache keyed by their every shape would only grow.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::backend;
use crate::store::StoreError;

/// Prepared statements on a pooled connection or a transaction on one.
pub(super) trait Prepared: GenericClient {
    /// Runs `sql`: the rows it changed.
    async fn run(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        let statement = self.prepare_cached(sql).await.map_err(backend)?;
        self.execute(&statement, params).await.map_err(backend)
    }

    /// The rows `sql` returns.
    async fn rows(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        let statement = self.prepare_cached(sql).await.map_err(backend)?;
        self.query(&statement, params).await.map_err(backend)
    }

    /// The row `sql` returns, if any.
    async fn row_if_any(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>, StoreError> {
        let statement = self.prepare_cached(sql).await.map_err(backend)?;
        self.query_opt(&statement, params).await.map_err(backend)
    }

    /// The one row `sql` returns (an aggregate, say).
    async fn one_row(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, StoreError> {
        let statement = self.prepare_cached(sql).await.map_err(backend)?;
        self.query_one(&statement, params).await.map_err(backend)
    }
}

impl<C: GenericClient> Prepared for C {}
