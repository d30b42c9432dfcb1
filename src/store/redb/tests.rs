//! The redb store on its own: layout rules, listing at scale, the one-process lock.

use chrono::{Duration, TimeZone, Utc};

use super::tables::{OWNER_ACTIVE_INDEX, OWNER_ARCHIVED_INDEX, RECORDS};
use super::*;
use crate::llm::Message;
use crate::model::{LabelFilter, ListPosition, SessionFilter, SessionStatus};

fn record(n: u64, message_count: u64) -> SessionRecord {
    let at =
        Utc.timestamp_millis_opt(1_700_000_000_000).unwrap() + Duration::milliseconds(i64::try_from(n).unwrap());
    SessionRecord::for_test(&format!("session-{n:05}"), at, message_count)
}

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

#[tokio::test]
async fn a_save_appends_and_replaces_only_from_its_index() {
    let (_dir, store) = open();
    let id = SessionId::from_string("session-00001");
    let history = vec![Message::user_text("a"), Message::assistant(vec![]), Message::user_text("b")];
    store.save(SaveRequest::new(record(1, 3), 0, history)).await.unwrap();
    // The next turn merged its prompt into message 2 and added an answer.
    let rewritten = vec![Message::user_text("b + c"), Message::user_text("answer")];
    store.save(SaveRequest::new(record(1, 4), 2, rewritten)).await.unwrap();
    let texts: Vec<String> = store.history(&id).await.unwrap().iter().map(Message::text).collect();
    assert_eq!(texts, ["a", "", "b + c", "answer"]);

    let gap = SaveRequest::new(record(1, 9), 7, vec![Message::user_text("x")]);
    assert!(matches!(store.save(gap).await, Err(StoreError::Corrupt(_))), "a gap is refused");
    assert_eq!(store.history(&id).await.unwrap().len(), 4, "nothing written by the refused save");
    assert!(store.record(&SessionId::from_string("missing")).await.unwrap().is_none());
    assert!(store.archive(&SessionId::from_string("missing")).await.unwrap().is_none());
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

/// Code review §5.2: archiving read the record in one transaction and wrote it in another, so
/// a save committed in between was overwritten, and a save after it made the session active
/// again. Now the archive is one write transaction and a later save of the active record is
/// refused, so the store says archived whatever order they commit in.
#[tokio::test]
async fn an_archive_is_final_whatever_saves_race_it() {
    let (_dir, store) = open();
    let first = record(1, 1);
    let id = first.session_id.clone();
    store.save(SaveRequest::new(first.clone(), 0, vec![Message::user_text("hi")])).await.unwrap();

    // A save that commits before the archive is archived with it, its counters kept.
    let mut later = first.clone();
    later.message_count = 2;
    later.updated_at = first.updated_at + Duration::milliseconds(5);
    store.save(SaveRequest::new(later.clone(), 1, vec![Message::user_text("again")])).await.unwrap();
    let archived = store.archive(&id).await.unwrap().unwrap();
    assert!(archived.archived);
    assert_eq!(archived.message_count, 2);

    // A save that commits after it is refused, and the session stays archived.
    let mut stale = later.clone();
    stale.message_count = 3;
    let refused = store.save(SaveRequest::new(stale, 2, vec![Message::user_text("late")])).await;
    assert!(matches!(refused, Err(StoreError::Archived(_))), "{refused:?}");
    let stored = store.record(&id).await.unwrap().unwrap();
    assert!(stored.archived);
    assert_eq!(stored.message_count, 2);
    let active = store.list(StoredListQuery { first: 10, ..StoredListQuery::default() }).await.unwrap();
    assert_eq!(active.total, 0, "the archived session left the active index: {active:?}");
    let all = store
        .list(StoredListQuery { first: 10, include_archived: true, ..StoredListQuery::default() })
        .await
        .unwrap();
    assert_eq!(all.total, 1);
    assert_eq!(store.history(&id).await.unwrap().len(), 2);
}

#[test]
fn f9_a_new_store_and_the_directories_made_for_it_are_private() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("made/for/it/s.redb");
    let store = RedbStore::open(&path).unwrap();
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("made")), 0o700);
    assert_eq!(mode(&dir.path().join("made/for/it")), 0o700);
    drop(store);
    // An existing store keeps the mode its operator gave it (and gets a warning).
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(RedbStore::open(&path).unwrap());
    assert_eq!(mode(&path), 0o644);
    assert!(super::files::is_shared(0o644) && !super::files::is_shared(0o600));
}

/// F8: one owner's list is filtered before paging: pages, the cursor and `total` see only that
/// owner's sessions, live ones excluded, archived ones on request.
#[tokio::test]
async fn f8_an_owners_list_pages_over_its_own_sessions_only() {
    let (_dir, store) = open();
    let saves: Vec<SaveRequest> = (0..10)
        .map(|n| {
            let mut record = record(n, 1);
            record.owner = if n % 2 == 0 { "alice" } else { "bob" }.to_owned();
            SaveRequest::new(record, 0, vec![Message::user_text("hi")])
        })
        .collect();
    store.save_batch(&saves).unwrap();
    let alice = |first, after: Option<ListPosition>| StoredListQuery {
        first,
        after,
        owner: Some("alice".into()),
        ..StoredListQuery::default()
    };
    let ids =
        |page: &StoredPage| page.summaries.iter().map(|s| s.session_id.as_str().to_owned()).collect::<Vec<_>>();

    let first = store.list(alice(2, None)).await.unwrap();
    assert_eq!((ids(&first), first.total), (vec!["session-00008".to_owned(), "session-00006".to_owned()], 5));
    let next = store.list(alice(2, Some(first.summaries[1].list_position()))).await.unwrap();
    assert_eq!((ids(&next), next.total), (vec!["session-00004".to_owned(), "session-00002".to_owned()], 5));

    let exclude = vec![SessionId::from_string("session-00008")];
    let page = store.list(StoredListQuery { exclude, ..alice(10, None) }).await.unwrap();
    assert_eq!((page.summaries.len(), page.total), (4, 4));
    store.archive(&SessionId::from_string("session-00000")).await.unwrap();
    assert_eq!(store.list(alice(10, None)).await.unwrap().total, 4);
    let with_archived = store.list(StoredListQuery { include_archived: true, ..alice(10, None) }).await.unwrap();
    assert_eq!((with_archived.summaries[0].session_id.as_str(), with_archived.total), ("session-00000", 5));
    let everyone = store.list(StoredListQuery { first: 10, ..StoredListQuery::default() }).await.unwrap();
    assert_eq!(everyone.total, 9);
}

/// A filtered list walks the summaries once: pages, the cursor and `total` see only what the
/// filter lets through, for one owner or all, archived ones on request or by status.
#[tokio::test]
async fn a_filtered_list_pages_over_the_matches_only() {
    let (_dir, store) = open();
    let saves: Vec<SaveRequest> = (0..200)
        .map(|n| {
            let mut record = record(n, 1);
            record.owner = if n % 2 == 0 { "alice" } else { "bob" }.to_owned();
            if n % 10 == 0 {
                record.labels.insert("team".into(), if n % 20 == 0 { "core" } else { "web" }.into());
            }
            record.title = if n % 3 == 0 { format!("Fix the Parser {n}") } else { format!("chore {n}") };
            SaveRequest::new(record, 0, vec![Message::user_text("hi")])
        })
        .collect();
    store.save_batch(&saves).unwrap();
    let ids =
        |page: &StoredPage| page.summaries.iter().map(|s| s.session_id.as_str().to_owned()).collect::<Vec<_>>();
    let filtered = |filter: SessionFilter, first, after: Option<ListPosition>| StoredListQuery {
        first,
        after,
        filter,
        ..StoredListQuery::default()
    };
    let team = |text: &str| SessionFilter::new(None, Some(LabelFilter::parse(text)), None);

    // 20 sessions labelled, 10 of them core: paged three by three, newest first, no repeats.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store.list(filtered(team("team=core"), 3, after.clone())).await.unwrap();
        assert_eq!(page.total, 10);
        seen.extend(ids(&page));
        match page.summaries.last() {
            Some(last) if page.summaries.len() == 3 => after = Some(last.list_position()),
            _ => break,
        }
    }
    let core: Vec<String> = (0..200).rev().filter(|n| n % 20 == 0).map(|n| format!("session-{n:05}")).collect();
    assert_eq!(seen, core);
    assert_eq!(store.list(filtered(team("team"), 100, None)).await.unwrap().total, 20);

    // Words of the title, case-insensitive, within one owner's sessions.
    let parser = SessionFilter::new(None, None, Some("PARSER"));
    let alice = StoredListQuery { owner: Some("alice".into()), ..filtered(parser.clone(), 2, None) };
    let page = store.list(alice).await.unwrap();
    // alice has the even ones; multiples of 6 below 200: 0, 6, …, 198.
    assert_eq!((ids(&page), page.total), (vec!["session-00198".to_owned(), "session-00192".to_owned()], 34));
    assert_eq!(store.list(filtered(parser, 1, None)).await.unwrap().total, 67);

    // Status: archived ones only by asking, or by their status.
    store.archive(&SessionId::from_string("session-00180")).await.unwrap();
    assert_eq!(store.list(filtered(team("team=core"), 100, None)).await.unwrap().total, 9);
    let with_archived = StoredListQuery { include_archived: true, ..filtered(team("team=core"), 100, None) };
    assert_eq!(store.list(with_archived).await.unwrap().total, 10);
    let archived = SessionFilter::new(Some(SessionStatus::Archived), None, None);
    let page = store.list(filtered(archived, 10, None)).await.unwrap();
    assert_eq!((ids(&page), page.total), (vec!["session-00180".to_owned()], 1));
    let idle = SessionFilter::new(Some(SessionStatus::Idle), None, None);
    let page = store.list(StoredListQuery { include_archived: true, ..filtered(idle, 1, None) }).await.unwrap();
    assert_eq!(page.total, 199);

    // Live sessions are excluded and not counted.
    let exclude = vec![SessionId::from_string("session-00160")];
    let page = store.list(StoredListQuery { exclude, ..filtered(team("team=core"), 100, None) }).await.unwrap();
    assert_eq!((page.summaries.len(), page.total), (8, 8));
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

/// A record whose session has an inline stdio server with `env` and an HTTP one with `headers`.
fn record_with_secrets(n: u64, env_value: &str, header_value: &str) -> SessionRecord {
    use crate::tools::mcp::{McpServerSpec, McpTransport};
    let mut record = record(n, 0);
    let server = |name: &str, transport| McpServerSpec {
        name: name.into(),
        transport,
        idle_timeout_secs: None,
        call_timeout_secs: None,
        unconfined: false,
    };
    record.agent.tools.mcp_servers = vec![
        server(
            "local",
            McpTransport::Stdio {
                command: "srv".into(),
                args: vec![],
                env: [("API_SECRET".to_owned(), env_value.into())].into(),
            },
        ),
        server(
            "web",
            McpTransport::Http {
                url: "http://127.0.0.1:9/mcp".into(),
                headers: [("Authorization".to_owned(), header_value.into())].into(),
            },
        ),
    ];
    record
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
    let bytes = std::fs::read(&path).unwrap();
    for secret in ["s3cr3t-env-value-f9", "s3cr3t-header-f9", "[redacted]"] {
        assert!(!bytes.windows(secret.len()).any(|window| window == secret.as_bytes()), "{secret} is in the file");
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

fn stored_event(seq: u64, kind: &str) -> StoredEvent {
    StoredEvent { seq, turn: 1, at: Utc::now(), event: serde_json::json!({ "type": kind }) }
}

#[tokio::test]
async fn journal_events_are_saved_with_the_turn_paged_and_closed_by_the_archive() {
    let (_dir, store) = open();
    let mut record = record(1, 1);
    let id = record.session_id.clone();
    assert_eq!(store.events(&id, None, 10).await.unwrap(), None, "not stored: no journal");
    record.event_seq = 3;
    let mut save = SaveRequest::new(record.clone(), 0, vec![Message::user_text("hi")]);
    save.events = vec![
        stored_event(0, "session_created"),
        stored_event(1, "turn_started"),
        stored_event(2, "turn_completed"),
    ];
    store.save(save).await.unwrap();
    let all = store.events(&id, None, 10).await.unwrap().unwrap();
    assert_eq!(
        all.iter().map(StoredEvent::kind).collect::<Vec<_>>(),
        ["session_created", "turn_started", "turn_completed"]
    );
    let page = store.events(&id, Some(0), 1).await.unwrap().unwrap();
    assert_eq!(page.iter().map(|event| event.seq).collect::<Vec<_>>(), [1]);
    assert!(store.events(&id, Some(u64::MAX), 10).await.unwrap().unwrap().is_empty());

    // A save whose events do not follow the stored watermark is refused, and writes nothing.
    let mut gap = SaveRequest::new(record.clone(), 1, vec![Message::user_text("more")]);
    gap.record.message_count = 2;
    gap.record.event_seq = 6;
    gap.events = vec![stored_event(5, "turn_started")];
    assert!(matches!(store.save(gap).await, Err(StoreError::Corrupt(_))));
    assert_eq!(store.record(&id).await.unwrap().unwrap().event_seq, 3);

    let archived = store.archive(&id).await.unwrap().unwrap();
    assert_eq!(archived.event_seq, 4);
    let last = store.events(&id, Some(2), 10).await.unwrap().unwrap();
    assert_eq!((last.len(), last[0].seq, last[0].kind()), (1, 3, ARCHIVED_EVENT));
}

#[tokio::test]
async fn saves_are_read_back_across_sessions_in_commit_order_from_a_persisted_cursor() {
    let (_dir, store) = open();
    assert_eq!(store.journal_end().await.unwrap(), 0);
    let (mut first, mut second) = (record(1, 1), record(2, 1));
    first.event_seq = 2;
    let mut save = SaveRequest::new(first.clone(), 0, vec![Message::user_text("a")]);
    save.events = vec![stored_event(0, "session_created"), stored_event(1, "turn_completed")];
    store.save(save).await.unwrap();
    second.event_seq = 1;
    let mut save = SaveRequest::new(second.clone(), 0, vec![Message::user_text("b")]);
    save.events = vec![stored_event(0, "session_created")];
    store.save(save).await.unwrap();
    // A save without events takes no place in the order.
    store.save(SaveRequest::new(second.clone(), 1, vec![])).await.unwrap();
    store.archive(&first.session_id).await.unwrap();

    let commits = store.journal_commits(0, 10).await.unwrap();
    let seen: Vec<(u64, &str, Vec<&str>)> = commits
        .iter()
        .map(|commit| {
            (commit.position, commit.session_id.as_str(), commit.events.iter().map(StoredEvent::kind).collect())
        })
        .collect();
    assert_eq!(
        seen,
        [
            (0, "session-00001", vec!["session_created", "turn_completed"]),
            (1, "session-00002", vec!["session_created"]),
            (2, "session-00001", vec![ARCHIVED_EVENT]),
        ]
    );
    assert_eq!(store.journal_commits(2, 10).await.unwrap().len(), 1);
    assert_eq!(store.journal_commits(0, 1).await.unwrap().len(), 1);
    assert_eq!(store.journal_end().await.unwrap(), 3);

    assert_eq!(store.cursor("webhook:a").await.unwrap(), None);
    store.set_cursor("webhook:a", 2).await.unwrap();
    assert_eq!(store.cursor("webhook:a").await.unwrap(), Some(2));
    assert_eq!(store.cursor("webhook:b").await.unwrap(), None);
}

#[test]
fn a_record_written_before_the_journal_loads_with_no_events() {
    let mut json = serde_json::to_value(record(1, 1)).unwrap();
    json.as_object_mut().unwrap().remove("event_seq");
    let old: SessionRecord = serde_json::from_value(json).unwrap();
    assert_eq!(old.event_seq, 0);
}
