//! The store contract against PostgreSQL: every case in a schema of its own, dropped after it,
//! on the database `DEPUTY_TEST_POSTGRES` names (`.ci/run` sets it, and fails when it cannot
//! connect). Without it these cases do not run, and one line on stderr says so.

use std::io::Write;
use std::sync::Once;

use super::PostgresStore;
use super::test_schema::{connect, create_schema, drop_schema};

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
        drop_schema(&self.config, &self.name);
    }
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
    create_schema(&config, &name).await;
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

/// The turn lease: one holder at a time, a new epoch per take, renewals only by the holder of
/// the current epoch, and saves fenced by it: a holder that lost its lease cannot commit.
#[tokio::test]
async fn a_lease_has_one_holder_and_fences_the_saves_of_a_lost_one() {
    use std::time::Duration;

    use crate::store::{SaveRequest, SessionStore, StoreError, TurnLeases};

    let Some((_schema, store)) = open().await else { return };
    let record = crate::store::contract::record(1, 0);
    let id = record.session_id.clone();
    store.save(SaveRequest::new(record.clone(), 0, Vec::new())).await.unwrap();
    assert_eq!(store.epoch(&id).await.unwrap(), 0);

    let ttl = Duration::from_millis(300);
    let first = store.take(&id, "a", ttl).await.unwrap().expect("a free lease is taken");
    assert_eq!((first.epoch, first.stored_event_seq), (1, Some(record.event_seq)));
    assert_eq!(store.take(&id, "b", ttl).await.unwrap(), None, "held: busy at once");
    assert!(store.renew(&id, "a", 1, ttl).await.unwrap());
    assert!(!store.renew(&id, "b", 1, ttl).await.unwrap(), "only the holder renews");
    let standing = store.standing(&id).await.unwrap().unwrap();
    assert_eq!(standing.holder.as_deref(), Some("a"));
    let fenced = |epoch| SaveRequest { fence: Some(epoch), ..SaveRequest::new(record.clone(), 0, Vec::new()) };
    store.save(fenced(1)).await.expect("the holder commits");

    // The holder pauses past its lease; another takes it.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let second = store.take(&id, "b", ttl).await.unwrap().expect("an expired lease is taken");
    assert_eq!(second.epoch, 2);
    assert!(!store.renew(&id, "a", 1, ttl).await.unwrap(), "a lost lease is not renewed");
    let refused = store.save(fenced(1)).await.unwrap_err();
    assert!(matches!(refused, StoreError::Fenced { fence: 1, current: 2, .. }), "{refused}");
    store.save(fenced(2)).await.expect("the new holder commits");

    // Released: taken again at once, by anyone, with the next epoch.
    store.release(&id, "b", 2).await.unwrap();
    assert_eq!(store.standing(&id).await.unwrap().unwrap().holder, None);
    assert_eq!(store.take(&id, "a", ttl).await.unwrap().map(|grant| grant.epoch), Some(3));
    assert_eq!(store.epoch(&id).await.unwrap(), 3);
}

#[tokio::test]
async fn an_inbox_capacity_is_counted_in_the_database_for_every_poster() {
    use crate::store::{SaveRequest, SessionStore, TurnLeases};

    let Some((_schema, store)) = open().await else { return };
    let record = crate::store::contract::record(1, 0);
    let id = record.session_id.clone();
    store.save(SaveRequest::new(record, 0, Vec::new())).await.unwrap();
    // Two "replicas" are one store here: what counts is that neither's own copy is asked.
    let waiting = [crate::store::contract::mail(1, false), crate::store::contract::mail(2, false)];
    for mail in &waiting {
        assert!(store.post_within(&id, mail, None, 2).await.unwrap(), "room for two");
    }
    let third = crate::store::contract::mail(3, false);
    assert!(!store.post_within(&id, &third, None, 2).await.unwrap(), "the third is refused");
    let parked = crate::store::contract::mail(4, true);
    assert!(store.post_within(&id, &parked, None, 2).await.unwrap(), "parked mail is not counted");
    // Mail kept by a plain post counts too.
    store.post(&id, crate::store::contract::mail(5, false), None).await.unwrap();
    let inbox = store.inbox(&id).await.unwrap();
    assert_eq!((inbox.waiting.len(), inbox.parked.len()), (3, 1));
    assert!(inbox.waiting.iter().all(|message| message.id != third.message.id), "nothing kept of a refused post");

    // Concurrent posts through separate connections: exactly the capacity is kept.
    let other = crate::store::contract::record(2, 0);
    let other_id = other.session_id.clone();
    store.save(SaveRequest::new(other, 0, Vec::new())).await.unwrap();
    let store = std::sync::Arc::new(store);
    let posts = (10..30).map(|n| {
        let (store, id) = (store.clone(), other_id.clone());
        tokio::spawn(async move { store.post_within(&id, &crate::store::contract::mail(n, false), None, 5).await })
    });
    let kept = futures::future::join_all(posts)
        .await
        .into_iter()
        .filter(|posted| *posted.as_ref().unwrap().as_ref().unwrap())
        .count();
    assert_eq!(kept, 5);
    assert_eq!(store.inbox(&other_id).await.unwrap().waiting.len(), 5);
}

/// TLS as libpq reads the URL, against the test database's own TLS (Debian's PostgreSQL
/// offers it with a self-signed "snakeoil" certificate for "localhost"; the test database is
/// the machine's own, at 127.0.0.1): encrypted unless disabled, the certificate checked only
/// when asked, against the roots asked for.
#[tokio::test]
async fn tls_follows_the_url_sslmode_as_libpq_does() {
    let Some((schema, store)) = open().await else { return };
    drop(store);
    let url = std::env::var(DATABASE).unwrap();
    let client = connect(&schema.config).await;
    let certificate: String = client.query_one("SHOW ssl_cert_file", &[]).await.unwrap().get(0);
    let offered: String = client.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    assert_eq!(offered, "on", "the test database must offer TLS for this test (Debian's PostgreSQL does)");
    let key_file = schema.key_dir.path().join("store.key");
    let at = |settings: &str| {
        let joiner = if url.contains('?') { '&' } else { '?' };
        format!("{url}{joiner}options=-c%20search_path%3D{}{settings}", schema.name)
    };
    let encrypted = async |store: &PostgresStore| -> bool {
        let row = store.inner.one_row("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await;
        row.unwrap().get(0)
    };

    for (settings, expected) in [("", true), ("&sslmode=require", true), ("&sslmode=disable", false)] {
        let store = PostgresStore::open(&at(settings), &key_file).await.unwrap();
        assert_eq!(encrypted(&store).await, expected, "with {settings:?}");
    }
    // The system's roots: a self-signed certificate that they do not hold, or (Debian keeps
    // the snakeoil certificate among them) one naming "localhost", reached as 127.0.0.1.
    let refused = PostgresStore::open(&at("&sslmode=verify-full"), &key_file).await.unwrap_err().to_string();
    assert!(refused.contains("invalid peer certificate"), "{refused}");
    // With the certificate as its own root: the chain holds (verify-ca), the name does not,
    // as the certificate names the host it was made on, not 127.0.0.1 (verify-full).
    let root =
        format!("&sslrootcert={}", form_urlencoded::byte_serialize(certificate.as_bytes()).collect::<String>());
    let store = PostgresStore::open(&at(&format!("&sslmode=verify-ca{root}")), &key_file).await.unwrap();
    assert!(encrypted(&store).await);
    let refused =
        PostgresStore::open(&at(&format!("&sslmode=verify-full{root}")), &key_file).await.unwrap_err().to_string();
    assert!(refused.contains("not valid for name \"127.0.0.1\""), "{refused}");
    // Reached by the name it holds, it passes both.
    let by_name = at(&format!("&sslmode=verify-full{root}")).replacen("127.0.0.1", "localhost", 1);
    let store = PostgresStore::open(&by_name, &key_file).await.unwrap();
    assert!(encrypted(&store).await);
}

/// Commits do not wait for each other to order the journal: a reader holds back at a
/// position a save still running holds, reads it once that save commits, and passes one a
/// rolled-back save left.
#[tokio::test]
async fn a_reader_holds_back_at_a_position_a_running_save_holds() {
    use crate::store::contract::{record, stored_event};
    use crate::store::{SaveRequest, SessionStore};

    let Some((schema, store)) = open().await else { return };
    let save_with_events = async |n: u64| {
        let mut record = record(n, 0);
        record.event_seq = 1;
        let mut save = SaveRequest::new(record, 0, Vec::new());
        save.events = vec![stored_event(0, "session_created")];
        store.save(save).await.unwrap();
    };
    let positions = async |from: u64| -> Vec<(u64, usize)> {
        let commits = store.journal_commits(from, 10).await.unwrap();
        commits.iter().map(|commit| (commit.position, commit.events.len())).collect()
    };
    save_with_events(1).await;
    let mut scoped = schema.config.clone();
    scoped.options(format!("-c search_path={}", schema.name));
    // Saves that took their positions (1, then 3) and stall before their commits.
    let (committing, rolling_back) = (connect(&scoped).await, connect(&scoped).await);
    let take = "BEGIN; INSERT INTO journal_order (position, session_id, first_seq, end_seq)
                VALUES (nextval('journal_position'), 'session-00001', 0, 1)";
    committing.batch_execute(take).await.unwrap();
    save_with_events(2).await;
    rolling_back.batch_execute(take).await.unwrap();
    save_with_events(3).await;

    assert_eq!(positions(0).await, [(0, 1)], "held back at 1, which a running save holds");
    assert_eq!(positions(1).await, [], "from the gap, it waits and then holds back");
    committing.batch_execute("COMMIT").await.unwrap();
    assert_eq!(positions(1).await, [(1, 1), (2, 1)], "committed: read, up to the next gap");
    rolling_back.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(positions(3).await, [(3, 0), (4, 1)], "a rolled-back save's position is passed, empty");
    // The next save takes the next position, whatever readers filled.
    save_with_events(4).await;
    assert_eq!(positions(5).await, [(5, 1)]);
}
