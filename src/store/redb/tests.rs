//! The redb store: the contract suite, and what only redb has (its layout, listing at scale
//! with `save_batch`, the one-process lock, sealing in the file).

use super::tables::{OWNER_ACTIVE_INDEX, OWNER_ARCHIVED_INDEX, RECORDS};
use super::*;
use super::{wal, write};
use crate::llm::Message;
use crate::model::SessionStatus;
use crate::store::contract::{record, record_with_secrets};

crate::store::contract::store_contract!(Some(open()));

fn open() -> (tempfile::TempDir, RedbStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path().join("nested/dir/sessions.redb")).unwrap();
    (dir, store)
}

#[tokio::test]
async fn listing_thousands_pages_newest_first_without_duplicates() {
    let (_dir, store) = open();
    let saves: Vec<SaveRequest> =
        (0..3000).map(|n| SaveRequest::new(record(n, 1), 0, vec![Message::user_text("hi")])).collect();
    store.save_batch(&saves).unwrap();

    let first = store.list(StoredListQuery { first: 50, ..StoredListQuery::default() }).await.unwrap();
    assert_eq!(first.total, 3000);
    assert_eq!(first.summaries.len(), 50);
    assert_eq!(first.summaries[0].session_id.as_str(), "session-02999");
    assert_eq!(first.summaries[49].session_id.as_str(), "session-02950");
    assert!(first.summaries.windows(2).all(|w| w[0].updated_at > w[1].updated_at));

    // The service asks for offset + limit and slices; deep pages stay in order.
    let deep = store.list(StoredListQuery { first: 1050, ..StoredListQuery::default() }).await.unwrap();
    assert_eq!(deep.summaries[1000].session_id.as_str(), "session-01999");

    // Live sessions are excluded and not counted twice.
    let exclude = vec![SessionId::from_string("session-02999"), SessionId::from_string("not-stored")];
    let page = store.list(StoredListQuery { first: 2, exclude, ..StoredListQuery::default() }).await.unwrap();
    assert_eq!(page.total, 2999);
    assert_eq!(page.summaries[0].session_id.as_str(), "session-02998");

    // Archived sessions move to their own index and come back only on request.
    for n in [10, 2998] {
        let archived = store.archive(&SessionId::from_string(format!("session-{n:05}"))).await.unwrap().unwrap();
        assert!(archived.archived);
    }
    let active = store.list(StoredListQuery { first: 3, ..StoredListQuery::default() }).await.unwrap();
    assert_eq!(active.total, 2998);
    assert!(active.summaries.iter().all(|s| s.status == SessionStatus::Idle));
    let all = store.list(StoredListQuery { first: 3000, include_archived: true, ..StoredListQuery::default() });
    let all = all.await.unwrap();
    assert_eq!((all.total, all.summaries.len()), (3000, 3000));
    // Archiving updated them, so they are the newest.
    assert_eq!(all.summaries[0].status, SessionStatus::Archived);
    assert_eq!(all.summaries[1].status, SessionStatus::Archived);
    assert!(all.summaries[2..].iter().all(|s| s.status == SessionStatus::Idle));
}

/// Saves arriving together commit in shared transactions (group commit), and one refused save
/// (its session archived) fails alone: every other save of its group is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_committed_together_fail_only_where_refused() {
    let (_dir, store) = open();
    let archived = record(999, 1);
    store.save(SaveRequest::new(archived.clone(), 0, vec![Message::user_text("hi")])).await.unwrap();
    store.archive(&archived.session_id).await.unwrap();

    let saves = (0..200u64).map(|n| {
        let store = store.clone();
        tokio::spawn(async move {
            let record = if n == 100 { record(999, 2) } else { record(n, 1) };
            let replace_from = u64::from(n == 100);
            store.save(SaveRequest::new(record, replace_from, vec![Message::user_text("again")])).await
        })
    });
    let outcomes = futures::future::join_all(saves).await;
    for (n, outcome) in outcomes.into_iter().enumerate() {
        match outcome.unwrap() {
            Err(StoreError::Archived(id)) if n == 100 => assert_eq!(id, "session-00999"),
            Ok(()) if n != 100 => {}
            other => panic!("save {n}: {other:?}"),
        }
    }
    assert!(store.inner.commits.groups.load(std::sync::atomic::Ordering::Relaxed) > 0, "no group formed");
    let all = store.list(StoredListQuery { first: 300, include_archived: true, ..StoredListQuery::default() });
    assert_eq!(all.await.unwrap().total, 200, "199 saves and the archived session");
    let kept = store.history(&archived.session_id).await.unwrap();
    assert_eq!(kept.len(), 1, "the refused save wrote nothing");
}

#[test]
fn a_second_opener_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.redb");
    let first = RedbStore::open(&path).unwrap();
    let second = RedbStore::open(&path).unwrap_err();
    assert!(matches!(second, StoreError::Locked(_)));
    assert!(second.to_string().contains("in use by another deputy process"));
    drop(first);
    RedbStore::open(&path).expect("free again once the first is closed");
}

#[test]
fn f9_a_new_store_and_the_directories_made_for_it_are_private() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("made/for/it/s.redb");
    let store = RedbStore::open(&path).unwrap();
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&wal::path_of(&path)), 0o600, "the write-ahead log holds the same saves");
    assert_eq!(mode(&dir.path().join("made")), 0o700);
    assert_eq!(mode(&dir.path().join("made/for/it")), 0o700);
    drop(store);
    // An existing store keeps the mode its operator gave it (and gets a warning).
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(RedbStore::open(&path).unwrap());
    assert_eq!(mode(&path), 0o644);
    assert!(super::files::is_shared(0o644) && !super::files::is_shared(0o600));
}

/// A store written before the owner indexes existed gets them built from its summaries when it
/// is opened, so its tenants' lists are complete at once.
#[tokio::test]
async fn a_store_without_owner_indexes_gets_them_backfilled_on_open() {
    let (dir, store) = open();
    let saves: Vec<SaveRequest> = (0..6)
        .map(|n| {
            let mut record = record(n, 1);
            record.owner = if n < 4 { "alice" } else { "bob" }.to_owned();
            SaveRequest::new(record, 0, vec![Message::user_text("hi")])
        })
        .collect();
    store.save_batch(&saves).unwrap();
    store.archive(&SessionId::from_string("session-00000")).await.unwrap();
    let path = store.path().to_path_buf();
    {
        let write = store.inner.db.begin_write().unwrap();
        write.delete_table(OWNER_ACTIVE_INDEX).unwrap();
        write.delete_table(OWNER_ARCHIVED_INDEX).unwrap();
        write.commit().unwrap();
    }
    drop(store);
    let store = RedbStore::open(&path).unwrap();
    let alice = StoredListQuery { first: 10, owner: Some("alice".into()), ..StoredListQuery::default() };
    let page = store.list(alice.clone()).await.unwrap();
    assert_eq!((page.summaries.len(), page.total), (3, 3));
    let page = store.list(StoredListQuery { include_archived: true, ..alice }).await.unwrap();
    assert_eq!(page.total, 4);
    drop(dir);
}

#[tokio::test]
async fn f9_secrets_are_sealed_in_the_store_file_and_come_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.redb");
    let key_file = dir.path().join("sessions.redb.key");
    let record = record_with_secrets(1, "s3cr3t-env-value-f9", "Bearer s3cr3t-header-f9");
    let id = record.session_id.clone();
    {
        let store = RedbStore::open(&path).unwrap();
        store.save(SaveRequest::new(record.clone(), 0, vec![])).await.unwrap();
        assert_eq!(store.record(&id).await.unwrap().unwrap(), record, "secrets come back whole");
        store.archive(&id).await.unwrap().unwrap();
    }
    // The write-ahead log holds the save as the tables do: sealed.
    let log = std::fs::read(wal::path_of(&path)).unwrap();
    assert!(log.windows(10).any(|window| window == b"API_SECRET"), "the save was logged");
    let bytes = std::fs::read(&path).unwrap();
    for secret in ["s3cr3t-env-value-f9", "s3cr3t-header-f9", "[redacted]"] {
        for file in [&bytes, &log] {
            assert!(!file.windows(secret.len()).any(|window| window == secret.as_bytes()), "{secret} is stored");
        }
    }
    // The names stay readable.
    assert!(bytes.windows(10).any(|window| window == b"API_SECRET"));

    // Reopened with its key: the archived record still holds the real values.
    let store = RedbStore::open(&path).unwrap();
    let stored = store.record(&id).await.unwrap().unwrap();
    assert_eq!(stored.agent.tools.mcp_servers, record.agent.tools.mcp_servers);
    drop(store);

    // Without its key file, or with another key, the store is refused, naming the key file.
    let key = std::fs::read(&key_file).unwrap();
    std::fs::remove_file(&key_file).unwrap();
    let missing = RedbStore::open(&path).unwrap_err();
    assert!(matches!(missing, StoreError::Key { .. }), "{missing:?}");
    assert!(missing.to_string().contains("sessions.redb.key") && missing.to_string().contains("missing"));
    assert!(!key_file.exists(), "no new key is made for a sealed store");
    crate::store::sealer::KeySealer::create(&key_file).unwrap();
    let other = RedbStore::open(&path).unwrap_err().to_string();
    assert!(other.contains("sessions.redb.key") && other.contains("not the key"), "{other}");
    std::fs::remove_file(&key_file).unwrap();
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&key_file).unwrap();
        file.write_all(&key).unwrap();
    }
    assert!(RedbStore::open(&path).is_ok(), "its own key opens it again");
}

#[tokio::test]
async fn f9_a_store_from_before_sealing_stays_readable_and_gets_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    let record = record_with_secrets(1, "plain-old-env", "plain-old-header");
    {
        // What an older deputy wrote: no meta table, secret values as plain strings.
        let db = redb::Database::create(&path).unwrap();
        let mut json = serde_json::to_value(&record).unwrap();
        json["agent"]["tools"]["mcp_servers"][0]["env"]["API_SECRET"] = "plain-old-env".into();
        json["agent"]["tools"]["mcp_servers"][1]["headers"]["Authorization"] = "plain-old-header".into();
        let write = db.begin_write().unwrap();
        write
            .open_table(RECORDS)
            .unwrap()
            .insert(record.session_id.as_str(), crate::store::codec::encode(&json).unwrap().as_slice())
            .unwrap();
        write.commit().unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    assert!(dir.path().join("old.redb.key").exists());
    assert_eq!(store.record(&record.session_id).await.unwrap().unwrap(), record);
}

#[test]
fn a_record_written_before_the_journal_loads_with_no_events() {
    let mut json = serde_json::to_value(record(1, 1)).unwrap();
    json.as_object_mut().unwrap().remove("event_seq");
    let old: SessionRecord = serde_json::from_value(json).unwrap();
    assert_eq!(old.event_seq, 0);
}

/// The store's files as a crash would leave them: copied while the store is open, after the
/// saves were answered. `with_log`: the write-ahead log is copied too.
fn crash_image(store: &RedbStore, dir: &std::path::Path, name: &str, with_log: bool) -> std::path::PathBuf {
    let image = dir.join(name);
    std::fs::copy(store.path(), &image).unwrap();
    std::fs::copy(crate::store::sealer::key_path(store.path()), crate::store::sealer::key_path(&image)).unwrap();
    if with_log {
        std::fs::copy(wal::path_of(store.path()), wal::path_of(&image)).unwrap();
    }
    image
}

async fn stored_sessions(path: &std::path::Path) -> usize {
    let store = RedbStore::open(path).unwrap();
    let all = StoredListQuery { first: 1000, include_archived: true, ..StoredListQuery::default() };
    store.list(all).await.unwrap().total
}

/// An answered save is on disk in the log, not in redb's file: a crash image without the log
/// misses the saves since redb's last durable commit (the archive), one with it has them all,
/// and the store it opens goes on logging.
#[tokio::test]
async fn a_crash_image_with_its_log_holds_every_answered_save() {
    let (dir, store) = open();
    store.save(SaveRequest::new(record(0, 1), 0, vec![Message::user_text("first")])).await.unwrap();
    store.archive(&SessionId::from_string("session-00000")).await.unwrap();
    for n in 1..=5 {
        store.save(SaveRequest::new(record(n, 1), 0, vec![Message::user_text("logged")])).await.unwrap();
    }
    let without = crash_image(&store, dir.path(), "without.redb", false);
    let with = crash_image(&store, dir.path(), "with.redb", true);

    assert_eq!(stored_sessions(&without).await, 1, "redb flushed only up to the archive");
    assert_eq!(stored_sessions(&with).await, 6);
    let reopened = RedbStore::open(&with).unwrap();
    let history = reopened.history(&SessionId::from_string("session-00005")).await.unwrap();
    assert_eq!(history, vec![Message::user_text("logged")]);
    reopened.save(SaveRequest::new(record(6, 1), 0, vec![Message::user_text("after")])).await.unwrap();
    let again = crash_image(&reopened, dir.path(), "again.redb", true);
    assert_eq!(stored_sessions(&again).await, 7);
}

/// The log restarts after each checkpoint, so it keeps its first length however much is
/// saved, and a crash image still holds every save.
#[tokio::test]
async fn the_log_stays_bounded_across_checkpoints() {
    let (dir, store) = open();
    let long = "x".repeat(200_000);
    for n in 0..30 {
        store.save(SaveRequest::new(record(n, 1), 0, vec![Message::user_text(long.clone())])).await.unwrap();
    }
    let log = std::fs::metadata(wal::path_of(store.path())).unwrap().len();
    assert_eq!(log, wal::ALLOCATED_BYTES, "6 MB saved through a log of its first length");
    let image = crash_image(&store, dir.path(), "image.redb", true);
    assert_eq!(stored_sessions(&image).await, 30);
}

/// A group too large to log commits durably in redb: its crash image needs no log.
#[tokio::test]
async fn a_group_too_large_to_log_is_durable_in_redb() {
    let (dir, store) = open();
    let long = "y".repeat(wal::MAX_RECORD_BYTES / 4);
    let saves: Vec<SaveRequest> =
        (0..5).map(|n| SaveRequest::new(record(n, 1), 0, vec![Message::user_text(long.clone())])).collect();
    let writer = store.clone();
    tokio::task::spawn_blocking(move || writer.save_batch(&saves)).await.unwrap().unwrap();
    let image = crash_image(&store, dir.path(), "image.redb", false);
    assert_eq!(stored_sessions(&image).await, 5);
}

/// A log that does not continue the store (a record missing after what the store holds) is
/// refused rather than replayed with a hole in it.
#[tokio::test]
async fn a_log_that_skips_records_refuses_the_open() {
    let (_dir, store) = open();
    let path = store.path().to_path_buf();
    store.save(SaveRequest::new(record(0, 1), 0, vec![])).await.unwrap();
    drop(store);
    {
        let salt = write::log_salt(&redb::Database::open(&path).unwrap()).unwrap();
        let (log, _) = wal::Wal::open(&wal::path_of(&path), salt).unwrap();
        log.restart(1000);
        log.append(1000, b"\x01[]").unwrap().keep();
    }
    let refused = RedbStore::open(&path).unwrap_err();
    assert!(matches!(refused, StoreError::Corrupt(_)), "{refused:?}");
    assert!(refused.to_string().contains("does not continue the store"), "{refused}");
}

/// A store deleted and made again beside its old log does not take the old saves in.
#[tokio::test]
async fn a_log_left_beside_a_new_store_is_not_replayed_into_it() {
    let (dir, store) = open();
    for n in 0..3 {
        store.save(SaveRequest::new(record(n, 1), 0, vec![Message::user_text("old")])).await.unwrap();
    }
    let image = crash_image(&store, dir.path(), "image.redb", true);
    std::fs::remove_file(&image).unwrap();
    std::fs::remove_file(crate::store::sealer::key_path(&image)).unwrap();
    assert_eq!(stored_sessions(&image).await, 0);
}

/// A save reads only the head of the record stored before it: the same facts as the whole
/// record's, from a record whose secrets are sealed, without a key to open them.
#[test]
fn a_stored_head_is_read_from_a_sealed_record_without_its_key() {
    let (_dir, store) = open();
    let mut stored = record_with_secrets(3, "env-secret", "header-secret");
    stored.history_epoch = 2;
    stored.event_seq = 9;
    stored.owner = "tenant-a".into();
    let bytes = store.inner.encode(&stored).unwrap();
    let head: crate::store::rules::StoredHead = crate::store::codec::decode(&bytes).unwrap();
    assert_eq!(head, crate::store::rules::StoredHead::from(&stored));
}
