//! Replicas benchmark: turns per second and turn latency of 1,000 sessions driven at once
//! over HTTP against 1, 2 and 3 `deputy serve --http` processes on one PostgreSQL, with a
//! provider that answers every request after 50 ms.
//!
//! Everything here is native: the load generator is this process (reqwest, one task per
//! session, each turn sent to the next replica in turn — no stickiness, so a session's turns
//! move between replicas, each reloading what another saved); the provider is an Anthropic
//! Messages stream served by this process after its delay; the replicas are the built binary.
//! Each run gets a schema of its own on the database, dropped after it. Figures are printed,
//! never asserted.
//!
//! Run with `cargo bench --bench replicas`. `DEPUTY_BENCH_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `DEPUTY_BENCH_SESSIONS` (1000),
//! `DEPUTY_BENCH_SECONDS` (measured window per replica count, 10, after
//! `DEPUTY_BENCH_WARMUP_SECONDS`, 5), `DEPUTY_BENCH_REPLICAS` (`1,2,3`),
//! `DEPUTY_BENCH_LATENCY_MS` (50).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::{Figures, HttpServer, Window, create_over_http, drive, setting, start_provider, turn_over_http};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let database: String = setting("DEPUTY_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let sessions: usize = setting("DEPUTY_BENCH_SESSIONS", 1000);
    let window = Window::from_env();
    let latency = Duration::from_millis(setting("DEPUTY_BENCH_LATENCY_MS", 50));
    let counts: Vec<usize> = setting("DEPUTY_BENCH_REPLICAS", "1,2,3".to_owned())
        .split(',')
        .filter_map(|count| count.trim().parse().ok())
        .collect();
    let provider = start_provider(latency).await;
    println!(
        "replicas: {sessions} sessions at once over HTTP, provider latency {} ms, {window}, {} cores",
        latency.as_millis(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!("{}", Figures::header("replicas"));
    for count in counts {
        let schema = Schema::create(&database).await;
        let figures = measure(&schema.url, &provider, count, sessions, window).await;
        println!("{}", figures.row(&count.to_string()));
        schema.drop().await;
    }
}

/// `count` replicas on the schema at `url`, `sessions` created, then each session's turns
/// driven back to back for `window`, each turn sent to the next replica in turn.
async fn measure(url: &str, provider: &str, count: usize, sessions: usize, window: Window) -> Figures {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("deputy").join("config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, format!("[store]\nkey_file = {:?}\n", home.path().join("store.key"))).unwrap();
    let replicas: Vec<HttpServer> = (0..count).map(|_| HttpServer::spawn(url, provider, home.path())).collect();
    let http = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(sessions).build().unwrap();
    for replica in &replicas {
        replica.wait_ready(&http).await;
    }
    let bases: Arc<Vec<String>> = Arc::new(replicas.iter().map(|replica| replica.base.clone()).collect());
    let ids = create_over_http(&http, &bases, sessions).await;
    let next = Arc::new(AtomicUsize::new(0));
    let pids: Vec<u32> = replicas.iter().map(HttpServer::pid).collect();
    drive(ids, window, &pids, move |id| {
        let (http, bases, next) = (http.clone(), bases.clone(), next.clone());
        async move {
            let base = &bases[next.fetch_add(1, Ordering::Relaxed) % bases.len()];
            turn_over_http(&http, base, &id).await
        }
    })
    .await
}

/// A schema of its own on the bench database.
struct Schema {
    base: String,
    name: String,
    url: String,
}

impl Schema {
    async fn create(base: &str) -> Self {
        let name = format!("deputy_bench_{}", uuid::Uuid::new_v4().simple());
        client(base).await.batch_execute(&format!("CREATE SCHEMA {name}")).await.unwrap();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}options=-c%20search_path%3D{name}");
        Self { base: base.to_owned(), name, url }
    }

    async fn drop(self) {
        client(&self.base).await.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name)).await.unwrap();
    }
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("the bench database");
    tokio::spawn(connection);
    client
}
