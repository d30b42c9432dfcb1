//! The store contract suite: every rule of [`SessionStore`] that a caller relies on, as one
//! case per rule, each an `async fn` over any backend. [`store_contract!`] makes each case a
//! test of one backend; every backend runs all of them (redb in its own tests).

use chrono::{Duration, TimeZone, Utc};

use super::{SaveRequest, SessionStore, StoreError, StoredListQuery, StoredMail, StoredPage};
use crate::ids::{MessageId, SessionId};
use crate::llm::Message;
use crate::model::inbox::{InboxMessage, MessageSender};
use crate::model::memory::{MemoryKind, MemoryRecord};
use crate::model::{LabelFilter, Lineage, ListPosition, SessionFilter, SessionRecord, SessionStatus, StoredEvent};
use crate::store::ARCHIVED_EVENT;

/// One test per case of the contract, for the backend `$open` makes: an expression (it may
/// `.await`) giving `Some((guard, store))`, an empty store and whatever must live as long as it
/// (a directory, a database schema), or `None` where the backend is not available here.
macro_rules! store_contract {
    ($open:expr) => {
        crate::store::contract::store_contract!(@cases $open;
            a_save_appends_and_replaces_only_from_its_index,
            a_new_history_epoch_is_saved_whole,
            an_archive_is_final_whatever_saves_race_it,
            an_owners_list_pages_over_its_own_sessions_only,
            a_filtered_list_pages_over_the_matches_only,
            journal_events_are_saved_with_the_turn_paged_and_closed_by_the_archive,
            saves_are_read_back_across_sessions_in_commit_order_from_a_persisted_cursor,
            mail_waits_until_a_save_delivers_it_and_parked_mail_stays_apart,
            peers_children_and_open_delegations_follow_first_saves_and_archives,
            capped_tool_outputs_and_secrets_come_back_whole,
            memories_get_increasing_ids_and_only_their_owner_deletes_them,
        );
    };
    (@cases $open:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let Some((_guard, store)) = $open else { return };
                crate::store::contract::$case(&store).await;
            }
        )*
    };
}
pub(crate) use store_contract;

/// A stored-session record `session-NNNNN`, updated `n` ms after a fixed instant.
pub(crate) fn record(n: u64, message_count: u64) -> SessionRecord {
    let at =
        Utc.timestamp_millis_opt(1_700_000_000_000).unwrap() + Duration::milliseconds(i64::try_from(n).unwrap());
    SessionRecord::for_test(&format!("session-{n:05}"), at, message_count)
}

/// Saves one after another (a backend's own batch, where it has one, is not the contract's).
async fn save_all(store: &dyn SessionStore, saves: Vec<SaveRequest>) {
    for save in saves {
        store.save(save).await.unwrap();
    }
}

pub(crate) fn stored_event(seq: u64, kind: &str) -> StoredEvent {
    StoredEvent { seq, turn: 1, at: Utc::now(), event: serde_json::json!({ "type": kind }).into() }
}

/// A record whose session has an inline stdio server with `env` and an HTTP one with `headers`.
pub(crate) fn record_with_secrets(n: u64, env_value: &str, header_value: &str) -> SessionRecord {
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

pub(crate) fn mail(n: u32, parked: bool) -> StoredMail {
    let at = Utc.timestamp_millis_opt(1_700_000_000_000).unwrap() + Duration::milliseconds(i64::from(n));
    StoredMail {
        parked,
        message: InboxMessage {
            id: MessageId::from_string(format!("msg-{n}")),
            from: MessageSender::Caller { subject: "alice".into() },
            body: format!("mail {n}"),
            in_reply_to: None,
            hops: 0,
            at,
            report: None,
        },
    }
}

fn body(messages: &[InboxMessage]) -> Vec<&str> {
    messages.iter().map(|message| message.body.as_str()).collect()
}

pub(crate) async fn a_save_appends_and_replaces_only_from_its_index(store: &dyn SessionStore) {
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

/// Code review §5.2: archiving read the record in one transaction and wrote it in another, so
/// a save committed in between was overwritten, and a save after it made the session active
/// again. Now the archive is one write transaction and a later save of the active record is
/// refused, so the store says archived whatever order they commit in.
pub(crate) async fn an_archive_is_final_whatever_saves_race_it(store: &dyn SessionStore) {
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

/// F8: one owner's list is filtered before paging: pages, the cursor and `total` see only that
/// owner's sessions, live ones excluded, archived ones on request.
pub(crate) async fn an_owners_list_pages_over_its_own_sessions_only(store: &dyn SessionStore) {
    let saves: Vec<SaveRequest> = (0..10)
        .map(|n| {
            let mut record = record(n, 1);
            record.owner = if n % 2 == 0 { "alice" } else { "bob" }.to_owned();
            SaveRequest::new(record, 0, vec![Message::user_text("hi")])
        })
        .collect();
    save_all(store, saves).await;
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
pub(crate) async fn a_filtered_list_pages_over_the_matches_only(store: &dyn SessionStore) {
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
    save_all(store, saves).await;
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

pub(crate) async fn journal_events_are_saved_with_the_turn_paged_and_closed_by_the_archive(
    store: &dyn SessionStore,
) {
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

pub(crate) async fn saves_are_read_back_across_sessions_in_commit_order_from_a_persisted_cursor(
    store: &dyn SessionStore,
) {
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

pub(crate) async fn a_new_history_epoch_is_saved_whole(store: &dyn SessionStore) {
    let first = record(1, 3);
    let id = first.session_id.clone();
    let history = vec![Message::user_text("a"), Message::user_text("b"), Message::user_text("c")];
    store.save(SaveRequest::new(first.clone(), 0, history)).await.unwrap();
    let mut compacted = first.clone();
    compacted.history_epoch = 1;
    compacted.message_count = 2;
    let partial = SaveRequest::new(compacted.clone(), 1, vec![Message::user_text("summary")]);
    assert!(matches!(store.save(partial).await, Err(StoreError::Corrupt(_))), "a new epoch from message 1");
    assert_eq!(store.history(&id).await.unwrap().len(), 3, "nothing written by the refused save");
    let whole = vec![Message::user_text("summary"), Message::user_text("c")];
    store.save(SaveRequest::new(compacted, 0, whole)).await.unwrap();
    let texts: Vec<String> = store.history(&id).await.unwrap().iter().map(Message::text).collect();
    assert_eq!(texts, ["summary", "c"]);
}

pub(crate) async fn mail_waits_until_a_save_delivers_it_and_parked_mail_stays_apart(store: &dyn SessionStore) {
    let record = record(1, 1);
    let id = record.session_id.clone();
    store.save(SaveRequest::new(record.clone(), 0, vec![Message::user_text("hi")])).await.unwrap();
    assert_eq!(store.inbox(&id).await.unwrap(), super::StoredInbox::default());
    for n in [3, 1, 2] {
        store.post(&id, mail(n, false), None).await.unwrap();
    }
    store.post(&id, mail(4, true), None).await.unwrap();
    let inbox = store.inbox(&id).await.unwrap();
    assert_eq!((body(&inbox.waiting), body(&inbox.parked)), (vec!["mail 1", "mail 2", "mail 3"], vec!["mail 4"]));

    // A post may push out another message in the same write.
    let oldest = MessageId::from_string("msg-1");
    store.post(&id, mail(5, false), Some(oldest)).await.unwrap();
    assert_eq!(body(&store.inbox(&id).await.unwrap().waiting), ["mail 2", "mail 3", "mail 5"]);

    // The save of the turn that took mail removes it, in its own write.
    let mut taken = SaveRequest::new(record, 1, vec![Message::user_text("mail 2")]);
    taken.record.message_count = 2;
    taken.delivered = vec![MessageId::from_string("msg-2")];
    store.save(taken).await.unwrap();
    let inbox = store.inbox(&id).await.unwrap();
    assert_eq!((body(&inbox.waiting), body(&inbox.parked)), (vec!["mail 3", "mail 5"], vec!["mail 4"]));
}

pub(crate) async fn peers_children_and_open_delegations_follow_first_saves_and_archives(store: &dyn SessionStore) {
    let mut parent = record(1, 0);
    parent.owner = "alice".into();
    parent.name = Some("lead".into());
    parent.peer_group = Some("team".into());
    parent.lineage = Lineage::root(&parent.session_id);
    store.save(SaveRequest::new(parent.clone(), 0, vec![])).await.unwrap();
    let mut children = Vec::new();
    for n in 2..5 {
        let mut child = record(n, 0);
        child.owner = if n == 4 { "bob" } else { "alice" }.into();
        child.lineage = Lineage::child_of(&parent.session_id, &parent.lineage);
        store.save(SaveRequest::new(child.clone(), 0, vec![])).await.unwrap();
        children.push(child);
    }
    let group = parent.peer_key();
    let peers = store.peers(&group).await.unwrap();
    assert_eq!(peers, vec![super::StoredPeer { session_id: parent.session_id.clone(), name: "lead".into() }]);
    assert!(store.peers(&crate::model::record::peer_key("bob", "team")).await.unwrap().is_empty());
    let open = store.open_delegated("alice").await.unwrap();
    assert_eq!((open.on_server, open.of_owner), (3, 2));

    // A later save adds nothing twice; an archive closes a child and leaves the peers.
    store.save(SaveRequest::new(children[0].clone(), 0, vec![])).await.unwrap();
    store.archive(&children[0].session_id).await.unwrap().unwrap();
    let listed = store.children(&parent.session_id).await.unwrap();
    let open_of = |n: usize| listed.iter().find(|child| child.session_id == children[n].session_id).unwrap().open;
    assert_eq!((listed.len(), open_of(0), open_of(1), open_of(2)), (3, false, true, true));
    assert_eq!(store.open_delegated("alice").await.unwrap().on_server, 2);
    store.archive(&parent.session_id).await.unwrap().unwrap();
    assert!(store.peers(&group).await.unwrap().is_empty());
}

pub(crate) async fn capped_tool_outputs_and_secrets_come_back_whole(store: &dyn SessionStore) {
    let record = record_with_secrets(1, "s3cr3t-env-value", "Bearer s3cr3t-header");
    let id = record.session_id.clone();
    let mut save = SaveRequest::new(record.clone(), 0, vec![]);
    save.tool_outputs = vec![("toolu_1".into(), "x".repeat(100_000))];
    store.save(save).await.unwrap();
    assert_eq!(store.record(&id).await.unwrap().unwrap(), record, "secrets come back whole");
    assert_eq!(store.tool_output(&id, "toolu_1").await.unwrap().map(|output| output.len()), Some(100_000));
    assert_eq!(store.tool_output(&id, "toolu_2").await.unwrap(), None);
    store.ping().await.unwrap();
}

pub(crate) async fn memories_get_increasing_ids_and_only_their_owner_deletes_them(store: &dyn SessionStore) {
    assert_eq!(store.memory_marks().await.unwrap(), super::MemoryMarks::default());
    let memory = |owner: &str, text: &str| MemoryRecord {
        id: 0,
        owner: owner.into(),
        kind: MemoryKind::Remembered,
        session_id: SessionId::from_string("session-00001"),
        turn: 1,
        at: Utc::now(),
        text: text.into(),
        tags: vec![],
        agent: None,
    };
    let first = store.remember(memory("alice", "the build uses cargo")).await.unwrap();
    // A save keeps its memories (a compaction's passages) in its own write.
    let mut save = SaveRequest::new(record(1, 0), 0, vec![]);
    save.memories = vec![memory("alice", "passage one"), memory("bob", "passage two")];
    store.save(save).await.unwrap();
    let all = store.memories(0, 10).await.unwrap();
    let ids: Vec<u64> = all.iter().map(|memory| memory.id).collect();
    assert!(first >= 1 && ids.windows(2).all(|pair| pair[0] < pair[1]) && ids[0] == first, "{ids:?}");
    assert_eq!(
        all.iter().map(|memory| memory.text.as_str()).collect::<Vec<_>>(),
        ["the build uses cargo", "passage one", "passage two"]
    );
    assert_eq!(store.memories(ids[0], 1).await.unwrap()[0].id, ids[1]);

    assert!(!store.forget(ids[2], "alice").await.unwrap(), "bob's memory is not alice's to delete");
    assert!(store.forget(ids[2], "bob").await.unwrap());
    assert!(!store.forget(ids[2], "bob").await.unwrap(), "gone");
    let marks = store.memory_marks().await.unwrap();
    assert_eq!((marks.last_id, marks.deletes), (ids[2], 1));
    assert_eq!(store.memories(0, 10).await.unwrap().len(), 2);
}
