use super::*;
use crate::model::memory::MemoryKind;

fn memory_of(owner: &str, session: &str, text: &str) -> MemoryRecord {
    MemoryRecord {
        id: 0,
        owner: owner.into(),
        kind: MemoryKind::Remembered,
        session_id: SessionId::from_string(session),
        turn: 1,
        at: chrono::Utc::now(),
        text: text.into(),
        tags: Vec::new(),
        agent: None,
    }
}

fn texts(hits: &[MemoryHit]) -> Vec<&str> {
    hits.iter().map(|hit| hit.text.as_str()).collect()
}

#[tokio::test]
async fn an_owner_finds_its_own_memories_and_never_another_owners() {
    let memory = Memory::new(None, None, MemoryBounds::default());
    memory.remember(memory_of("alice", "s1", "the vault code is 4417")).await.expect("kept");
    memory.remember(memory_of("alice", "s2", "the door is painted blue")).await.expect("kept");
    memory.remember(memory_of("bob", "s3", "bob's vault code is 9999")).await.expect("kept");

    let found = memory.search("alice", None, "what is the vault code?", 5).await.expect("searched");
    assert_eq!(texts(&found), ["the vault code is 4417"]);
    let only_s2 = memory.search("alice", Some(&SessionId::from_string("s2")), "vault door", 5).await;
    assert_eq!(texts(&only_s2.expect("searched")), ["the door is painted blue"]);
    let bob = memory.search("bob", None, "vault code door", 5).await.expect("searched");
    assert_eq!(texts(&bob), ["bob's vault code is 9999"]);
    assert!(memory.search("carol", None, "vault", 5).await.expect("searched").is_empty());
    assert_eq!(memory.opened(), 1, "one index, opened once");
}

#[tokio::test]
async fn listing_pages_newest_first_and_only_the_owner_deletes() {
    let memory = Memory::new(None, None, MemoryBounds::default());
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(memory.remember(memory_of("alice", "s1", &format!("fact number {n}"))).await.expect("kept").id);
    }
    let first = memory.list("alice", None, None, 2).await.expect("listed");
    let listed: Vec<u64> = first.memories.iter().map(|entry| entry.record.id).collect();
    assert_eq!(listed, [ids[4], ids[3]]);
    assert_eq!(first.next_before, Some(ids[3]));
    let rest = memory.list("alice", None, first.next_before, 10).await.expect("listed");
    assert_eq!(rest.memories.len(), 3);
    assert_eq!(rest.next_before, None);

    assert!(!memory.forget("bob", ids[0]).await.expect("answered"), "bob cannot delete alice's memory");
    assert!(memory.forget("alice", ids[0]).await.expect("answered"));
    assert!(!memory.forget("alice", ids[0]).await.expect("answered"), "gone");
    let left = memory.list("alice", None, None, 10).await.expect("listed");
    assert_eq!(left.memories.len(), 4);
}

#[tokio::test]
async fn remembering_past_an_owners_bounds_is_refused_and_deleting_makes_room() {
    let bounds = MemoryBounds { max_per_owner: 2, max_bytes_per_owner: 1_000 };
    let memory = Memory::new(None, None, bounds);
    let first = memory.remember(memory_of("alice", "s1", "one")).await.expect("kept");
    memory.remember(memory_of("alice", "s1", "two")).await.expect("kept");
    let refused = memory.remember(memory_of("alice", "s1", "three")).await.expect_err("full");
    assert_eq!(refused.code().as_str(), "INVALID_REQUEST");
    assert!(refused.to_string().contains("max_per_owner"), "{refused}");
    memory.remember(memory_of("bob", "s2", "bob has his own room")).await.expect("another owner's bound");
    let too_big = memory.remember(memory_of("bob", "s2", &"x".repeat(1_000))).await.expect_err("too many bytes");
    assert!(too_big.to_string().contains("max_bytes_per_owner"), "{too_big}");
    assert!(memory.forget("alice", first.id).await.expect("deleted"));
    memory.remember(memory_of("alice", "s1", "three")).await.expect("room again");
}

#[cfg(feature = "session-store")]
mod stored {
    use super::*;
    use crate::store::{RedbStore, SessionStore};

    fn open(dir: &std::path::Path) -> (Arc<RedbStore>, Memory) {
        let store = Arc::new(RedbStore::open(dir.join("sessions.redb")).expect("store"));
        let shared: SharedStore = Some(store.clone());
        (store, Memory::new(shared, Some(dir.join("sessions.memory")), MemoryBounds::default()))
    }

    #[tokio::test]
    async fn a_store_without_memories_opens_no_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_store, memory) = open(dir.path());
        assert!(memory.list("alice", None, None, 10).await.expect("listed").memories.is_empty());
        assert!(memory.search("alice", None, "vault", 5).await.expect("searched").is_empty());
        assert!(!memory.forget("alice", 1).await.expect("answered"));
        assert_eq!(memory.opened(), 0);
        assert!(!dir.path().join("sessions.memory").exists(), "no index directory made");
        memory.remember(memory_of("alice", "s1", "the vault code is 4417")).await.expect("kept");
        assert_eq!(memory.list("alice", None, None, 10).await.expect("listed").memories.len(), 1);
        assert_eq!(memory.opened(), 1);
    }

    #[tokio::test]
    async fn the_index_follows_the_store_across_restarts_losses_and_deletions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept = {
            let (_store, memory) = open(dir.path());
            memory.remember(memory_of("alice", "s1", "the vault code is 4417")).await.expect("kept");
            memory.remember(memory_of("alice", "s1", "the door is blue")).await.expect("kept").id
        };
        // A restart finds them in the index it left.
        {
            let (store, memory) = open(dir.path());
            let found = memory.search("alice", None, "vault", 5).await.expect("searched");
            assert_eq!(texts(&found), ["the vault code is 4417"]);
            // The store changes behind the index's back (a crash between the two commits).
            store.remember(memory_of("alice", "s1", "the cellar key is under the mat")).await.expect("stored");
            assert!(store.forget(kept, "alice").await.expect("deleted"));
        }
        // The next open catches up with the addition and rebuilds for the deletion.
        {
            let (_store, memory) = open(dir.path());
            assert_eq!(texts(&memory.search("alice", None, "cellar key", 5).await.expect("searched")).len(), 1);
            assert!(memory.search("alice", None, "door blue", 5).await.expect("searched").is_empty());
        }
        // A lost index is rebuilt from the store.
        std::fs::remove_dir_all(dir.path().join("sessions.memory")).expect("removed");
        let (_store, memory) = open(dir.path());
        let all = memory.list("alice", None, None, 10).await.expect("listed");
        assert_eq!(all.memories.len(), 2);
    }
}
