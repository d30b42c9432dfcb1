//! The live service over a real store: failed saves, and listing stored with live sessions.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;

use super::test_support::*;
use super::*;
use crate::error::ErrorCode;
use crate::ids::SessionId;
use crate::llm::Message;
use crate::llm::scripted::{ScriptedProvider, ScriptedResponse};
use crate::model::SessionRecord;
use crate::store::{RedbStore, SaveRequest, SessionStore, StoreError, StoredListQuery, StoredPage};

/// A real store whose saves can be made to fail, like a full disk would.
#[derive(Debug)]
pub(super) struct FaultyStore {
    pub(super) inner: RedbStore,
    pub(super) fail_saves: AtomicBool,
}

impl SessionStore for FaultyStore {
    fn save(&self, save: SaveRequest) -> BoxFuture<'_, Result<(), StoreError>> {
        if self.fail_saves.load(Ordering::SeqCst) {
            return Box::pin(async { Err(StoreError::Backend("No space left on device".into())) });
        }
        self.inner.save(save)
    }
    fn record(&self, id: &SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, StoreError>> {
        self.inner.record(id)
    }
    fn history(&self, id: &SessionId) -> BoxFuture<'_, Result<Vec<Message>, StoreError>> {
        self.inner.history(id)
    }
    fn list(&self, query: StoredListQuery) -> BoxFuture<'_, Result<StoredPage, StoreError>> {
        self.inner.list(query)
    }
    fn tool_output(&self, id: &SessionId, tool_use_id: &str) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
        self.inner.tool_output(id, tool_use_id)
    }
    fn archive(&self, id: &SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, StoreError>> {
        self.inner.archive(id)
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.ping()
    }
    fn journal_commits(
        &self,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<crate::store::JournalCommit>, StoreError>> {
        self.inner.journal_commits(from, limit)
    }
    fn journal_end(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.inner.journal_end()
    }
    fn cursor(&self, name: &str) -> BoxFuture<'_, Result<Option<u64>, StoreError>> {
        self.inner.cursor(name)
    }
    fn set_cursor(&self, name: &str, position: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.set_cursor(name, position)
    }
    fn remember(&self, memory: crate::model::memory::MemoryRecord) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.inner.remember(memory)
    }
    fn forget(&self, id: u64, owner: &str) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.inner.forget(id, owner)
    }
    fn memories(
        &self,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<crate::model::memory::MemoryRecord>, StoreError>> {
        self.inner.memories(after, limit)
    }
    fn memory_marks(&self) -> BoxFuture<'_, Result<crate::store::MemoryMarks, StoreError>> {
        self.inner.memory_marks()
    }
    fn post(
        &self,
        id: &SessionId,
        mail: crate::store::StoredMail,
        evict: Option<crate::ids::MessageId>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.post(id, mail, evict)
    }
    fn inbox(&self, id: &SessionId) -> BoxFuture<'_, Result<crate::store::StoredInbox, StoreError>> {
        self.inner.inbox(id)
    }
    fn peers(&self, group: &str) -> BoxFuture<'_, Result<Vec<crate::store::StoredPeer>, StoreError>> {
        self.inner.peers(group)
    }
    fn children(&self, parent: &SessionId) -> BoxFuture<'_, Result<Vec<crate::store::StoredChild>, StoreError>> {
        self.inner.children(parent)
    }
    fn open_delegated(&self, owner: &str) -> BoxFuture<'_, Result<crate::store::OpenDelegated, StoreError>> {
        self.inner.open_delegated(owner)
    }
    fn events(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Option<Vec<crate::model::StoredEvent>>, StoreError>> {
        self.inner.events(id, after, limit)
    }
}

fn service(provider: Arc<ScriptedProvider>, store: Arc<dyn SessionStore>) -> LiveSessionService {
    scripted_service(provider, None, Some(store))
}

#[tokio::test]
async fn a_failed_save_is_reported_and_the_next_save_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FaultyStore {
        inner: RedbStore::open(dir.path().join("s.redb")).unwrap(),
        fail_saves: AtomicBool::new(false),
    });
    let provider = ScriptedProvider::new(["one", "two", "three"].map(|text| ScriptedResponse::text(&[text])));
    let service = service(provider, store.clone());
    let request = CreateSessionRequest { prompt: "first".into(), ..CreateSessionRequest::default() };
    let id = service.create_session(request).await.unwrap().session_id;

    store.fail_saves.store(true, Ordering::SeqCst);
    let error = service.start_turn(&id, turn("second")).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::SessionStoreError);
    assert!(error.to_string().contains("could not be saved") && error.to_string().contains("No space left"));
    // The turn happened and the live session shows it.
    let view = service.read(&id, None).await.unwrap();
    assert_eq!(view.state.last_turn.as_ref().map(|t| t.text.as_str()), Some("two"));

    // The store is behind the actor: unloading now would lose the turn.
    let handle = service.live(&id).unwrap();
    assert!(!service.unload(&id, &handle, "test").await, "a session with unsaved state stays live");

    store.fail_saves.store(false, Ordering::SeqCst);
    assert_eq!(service.start_turn(&id, turn("third")).await.unwrap().text, "three");
    assert!(service.unload(&id, &handle, "test").await, "saved again: now it may be unloaded");
    let stored = store.inner.record(&id).await.unwrap().unwrap();
    assert_eq!((stored.turns, stored.message_count), (3, 6));
    let texts: Vec<String> = store.inner.history(&id).await.unwrap().iter().map(Message::text).collect();
    assert_eq!(texts, ["first", "one", "second", "two", "third", "three"], "nothing of the unsaved turn was lost");
}

#[tokio::test]
async fn listing_merges_thousands_of_stored_sessions_with_live_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let old = chrono::Utc::now() - chrono::Duration::days(1);
    let saves: Vec<SaveRequest> = (0..2000)
        .map(|n| {
            let at = old + chrono::Duration::milliseconds(n);
            let mut record = SessionRecord::for_test(&format!("stored-{n:04}"), at, 2);
            record.turns = 1;
            let messages = vec![Message::user_text("q"), Message::assistant(vec![])];
            SaveRequest::new(record, 0, messages)
        })
        .collect();
    store.save_batch(&saves).unwrap();

    let provider = ScriptedProvider::new((0..3).map(|_| ScriptedResponse::text(&["x"])));
    let service = service(provider, store);
    let resumed = SessionId::from_string("stored-0500");
    service.start_turn(&resumed, turn("again")).await.unwrap();
    let mut live = Vec::new();
    for n in 0..2 {
        let request = CreateSessionRequest { prompt: format!("live {n}"), ..CreateSessionRequest::default() };
        let id = service.create_session(request).await.unwrap().session_id;
        // Lists order by the millisecond of the last update: let the clock pass this one's.
        let stamp = service.read(&id, None).await.unwrap().state.updated_at;
        while chrono::Utc::now().timestamp_millis() <= stamp.timestamp_millis() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        live.push(id);
    }

    let first = service.list(ListQuery { limit: Some(5), ..ListQuery::default() }).await.unwrap();
    assert_eq!(first.total, 2002, "2000 stored + 2 new; the resumed one counts once");
    let ids: Vec<&str> = first.sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, [live[1].as_str(), live[0].as_str(), "stored-0500", "stored-1999", "stored-1998"]);

    let mut seen = HashSet::new();
    let mut offset = 0;
    loop {
        let page = service.list(ListQuery { offset, limit: Some(700), ..ListQuery::default() }).await.unwrap();
        if page.sessions.is_empty() {
            break;
        }
        offset += page.sessions.len();
        seen.extend(page.sessions.into_iter().map(|s| s.session_id));
    }
    assert_eq!((offset, seen.len()), (2002, 2002), "every session exactly once across pages");

    // The same walk by cursor: every session once, in the same order as one big page.
    let everything = service.list(ListQuery { limit: Some(1000), ..ListQuery::default() }).await.unwrap();
    let mut by_cursor = Vec::new();
    let mut after = None;
    loop {
        let page = service.list(ListQuery { after, limit: Some(300), ..ListQuery::default() }).await.unwrap();
        assert_eq!(page.total, 2002);
        by_cursor.extend(page.sessions.into_iter().map(|s| s.session_id));
        match page.next_cursor {
            Some(cursor) => after = Some(crate::model::ListPosition::from_cursor(&cursor).unwrap()),
            None => break,
        }
    }
    assert_eq!(by_cursor.len(), 2002);
    assert_eq!(by_cursor.iter().collect::<HashSet<_>>().len(), 2002, "no session twice");
    let first_thousand: Vec<_> = everything.sessions.into_iter().map(|s| s.session_id).collect();
    assert_eq!(by_cursor[..1000], first_thousand[..], "cursor pages follow the list's order");
}
