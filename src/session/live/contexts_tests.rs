//! Unattended resumes run with the session's own context (security review 2, G14): the one it
//! last ran with, else (on a per-client server) none, and the mail waits in the store.
#![cfg(feature = "session-store")]

use std::sync::Arc;
use std::time::Duration;

use super::test_support::*;
use super::*;
use crate::ids::MessageId;
use crate::llm::registry::ProviderRegistry;
use crate::llm::scripted::{ScriptedProvider, ScriptedResponse};
use crate::model::inbox::{Delivery, InboxMessage, MessageSender};
use crate::store::SessionStore;

const LIMIT: Duration = Duration::from_secs(20);

/// A client's own context: its own provider.
fn client(provider: Arc<ScriptedProvider>) -> (Arc<AgentFactory>, Grants) {
    let mut registry = ProviderRegistry::new();
    registry.insert("test", provider);
    let factory = Arc::new(AgentFactory::new(Arc::new(registry), Some("test:model".into()), None));
    let grants = factory.grants(&Caller::local(), Surface::Local);
    (factory, grants)
}

fn mail(body: &str) -> InboxMessage {
    InboxMessage {
        id: MessageId::new(),
        from: MessageSender::Session { session_id: SessionId::new(), name: Some("peer".into()) },
        body: body.into(),
        in_reply_to: None,
        hops: 1,
        at: chrono::Utc::now(),
        report: None,
    }
}

/// A host-mode session created by `factory`'s client, then unloaded.
async fn unloaded_session(service: &LiveSessionService, factory: &Arc<AgentFactory>, grants: &Grants) -> SessionId {
    let request = CreateSessionRequest { host_mode: Some(true), ..create("be ready") };
    let id = service.create_session_with(factory, &Caller::local(), grants, request).await.unwrap().session_id;
    let handle = service.live(&id).unwrap();
    assert!(service.unload(&id, &handle, "test").await);
    id
}

#[tokio::test]
async fn an_unattended_resume_runs_with_the_context_the_session_last_ran_with() {
    let dir = tempfile::tempdir().unwrap();
    let server = ScriptedProvider::new([]);
    let theirs = ScriptedProvider::new([ScriptedResponse::text(&["ready"]), ScriptedResponse::text(&["got it"])]);
    let service = scripted_service(server.clone(), None, Some(temp_store(dir.path()))).without_server_context();
    let (factory, grants) = client(theirs.clone());
    let id = unloaded_session(&service, &factory, &grants).await;

    let sent = service.deliver_unattended(&id, mail("the build is green")).await.unwrap();
    assert_eq!(sent.delivered, Delivery::StartedTurn);
    let view = tokio::time::timeout(LIMIT, service.read(&id, Some(LIMIT))).await.unwrap().unwrap();
    assert_eq!(view.state.last_turn.as_ref().map(|turn| turn.text.as_str()), Some("got it"));
    assert_eq!(theirs.requests().len(), 2, "the client's own provider ran the mail's turn");
    assert!(server.requests().is_empty(), "never the server's own context");
}

#[tokio::test]
async fn without_a_known_context_mail_waits_in_the_store_for_the_next_caller() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let first = ScriptedProvider::new([ScriptedResponse::text(&["ready"])]);
    let before = scripted_service(ScriptedProvider::new([]), None, Some(store.clone()));
    let (factory, grants) = client(first);
    let id = unloaded_session(&before, &factory, &grants).await;

    // A restarted server: nothing remembered.
    let server = ScriptedProvider::new([]);
    let service = scripted_service(server.clone(), None, Some(store.clone())).without_server_context();
    let sent = service.deliver_unattended(&id, mail("the build is green")).await.unwrap();
    assert_eq!(sent.delivered, Delivery::Queued);
    assert_eq!(service.live_sessions(), 0, "not resumed without its context");
    assert_eq!(store.inbox(&id).await.unwrap().waiting.len(), 1, "kept by the store");
    assert!(server.requests().is_empty());

    let next = ScriptedProvider::new([ScriptedResponse::text(&["on it"])]);
    let (factory, grants) = client(next.clone());
    let run = service.start_turn_with(&factory, &grants, &id, turn("anything new?")).await.unwrap();
    assert_eq!(run.text, "on it");
    let request = &next.requests()[0];
    let seen = serde_json::to_string(&request.messages).unwrap();
    assert!(seen.contains("the build is green"), "the next caller's turn delivers the mail: {seen}");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn remembered_contexts_are_bounded_and_the_oldest_goes_first() {
    let service = scripted_service(ScriptedProvider::new([ScriptedResponse::text(&["ready"])]), None, None);
    let id = service.create_session(create("be ready")).await.unwrap().session_id;
    let context = contexts::Context::from(&**service.live(&id).unwrap().provenance());
    let contexts = contexts::Contexts::default();
    let first = SessionId::new();
    contexts.remember(&first, context.clone());
    for _ in 0..contexts::MAX_REMEMBERED {
        contexts.remember(&SessionId::new(), context.clone());
    }
    assert_eq!(contexts.len(), contexts::MAX_REMEMBERED);
    assert!(contexts.of(&first).is_none(), "the longest remembered was forgotten");
}
