//! Comms on the service: `send` (a message into a session's inbox, from a caller, another
//! session or another deputy), peer groups and names, and the [`PeerDirectory`] the comms
//! tools of every session reach through.
//!
//! Who can reach whom: a caller reaches the sessions it may use (its own, or all with
//! `sessions:all`); a session reaches the named sessions of its peer group, which only ever
//! holds sessions of its own owner ([`peer_key`]). A session never receives its own messages.

use std::sync::{Arc, Weak};

use futures::future::BoxFuture;

use super::LiveSessionService;
use crate::agent::{Agent, AgentFactory};
use crate::caller::{Caller, Scope};
use crate::error::SessionError;
use crate::ids::{MessageId, SessionId};
use crate::model::SessionRecord;
use crate::model::inbox::{InboxMessage, MAX_MESSAGE_BYTES, MessageSender, SendResult};
use crate::model::record::peer_key;
use crate::policy::Grants;
use crate::session::types::{RemoteSender, SendRequest};
use crate::tools::comms::{Outgoing, PeerDirectory, PeerInfo, Sent};
use crate::tools::link::SessionHub;

/// Characters a session name may have at most.
const MAX_NAME_CHARS: usize = 64;
/// Bytes of a peer group label at most.
const MAX_GROUP_BYTES: usize = 128;

/// A session's name is short, and never contains `:` (which names a remote peer in
/// `send_message {to}`) or whitespace.
pub(super) fn check_name(name: &str) -> Result<(), SessionError> {
    let fine = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name.chars().all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if fine {
        return Ok(());
    }
    Err(SessionError::invalid(format!("name {name:?}: 1 to {MAX_NAME_CHARS} letters, digits, '-', '_' or '.'")))
}

/// Characters of an id a caller passes on (`sender.session_id`, `in_reply_to`) at most.
const MAX_ID_CHARS: usize = 128;

/// An id that goes into the header the model reads (`[message … from …, in reply to …]`):
/// short, with no whitespace or brackets, so no caller can forge a header line (G13).
fn check_id(field: &str, id: &str) -> Result<(), SessionError> {
    let fine = !id.is_empty()
        && id.chars().count() <= MAX_ID_CHARS
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if fine {
        return Ok(());
    }
    Err(SessionError::invalid(format!("{field}: 1 to {MAX_ID_CHARS} ASCII letters, digits, '-', '_', '.' or ':'")))
}

/// What a caller says of a message's origin (`sender`, for another deputy passing on its
/// session's message) and what it answers: checked before anything is delivered (G13).
fn check_origin(sender: Option<&RemoteSender>, in_reply_to: Option<&str>) -> Result<(), SessionError> {
    if let Some(sender) = sender {
        if let Some(name) = &sender.name {
            check_name(name).map_err(|err| SessionError::invalid(format!("sender.{err}")))?;
        }
        if let Some(session_id) = &sender.session_id {
            check_id("sender.session_id", session_id)?;
        }
    }
    if let Some(original) = in_reply_to {
        check_id("in_reply_to", original)?;
    }
    Ok(())
}

pub(super) fn check_group(group: &str) -> Result<(), SessionError> {
    if group.is_empty() || group.len() > MAX_GROUP_BYTES || group.contains('\0') {
        return Err(SessionError::invalid(format!("peer_group: 1 to {MAX_GROUP_BYTES} bytes")));
    }
    Ok(())
}

fn check_body(body: &str) -> Result<(), SessionError> {
    if body.trim().is_empty() {
        return Err(SessionError::invalid("message must not be empty"));
    }
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(SessionError::invalid(format!(
            "message: at most {MAX_MESSAGE_BYTES} bytes, got {}",
            body.len()
        )));
    }
    Ok(())
}

/// A named session of a group, as the service finds it.
struct Peer {
    session_id: SessionId,
    name: String,
}

impl LiveSessionService {
    /// Connects a freshly built agent's linked tools (comms, delegation) to this service,
    /// when it is shared ([`LiveSessionService::into_shared`]).
    pub(super) fn connect_tools(&self, agent: &Agent) {
        if let Some(me) = self.me.get() {
            let hub: Weak<dyn SessionHub> = me.clone();
            let _ = agent.session_link().set(hub);
        }
    }

    /// The named sessions of the group `key` ([`peer_key`]).
    async fn peers_in(&self, key: &str) -> Result<Vec<Peer>, SessionError> {
        if let Some(store) = &self.store {
            let stored = store.peers(key).await?;
            return Ok(stored
                .into_iter()
                .map(|peer| Peer { session_id: peer.session_id, name: peer.name })
                .collect());
        }
        // Without a store nothing is unloaded: the live sessions are all of them.
        Ok(self
            .live_handles()
            .iter()
            .filter_map(|handle| {
                let state = handle.view().state;
                let group = state.peer_group.clone().unwrap_or_else(|| handle.id().to_string());
                let name = state.name?;
                (peer_key(&state.owner, &group) == key).then(|| Peer { session_id: handle.id().clone(), name })
            })
            .collect())
    }

    /// Refuses a name already taken in the group; the caller holds `naming`.
    pub(super) async fn check_name_free(&self, record: &SessionRecord) -> Result<(), SessionError> {
        let Some(name) = &record.name else { return Ok(()) };
        if self.peers_in(&record.peer_key()).await?.iter().any(|peer| peer.name == *name) {
            return Err(SessionError::invalid(format!(
                "name {name:?} is taken in peer group {:?}: names are unique among peers",
                record.peer_group()
            )));
        }
        Ok(())
    }

    /// Finds `target` (a name or a session id) in the group `key`.
    async fn find_peer(&self, key: &str, target: &str) -> Result<Option<SessionId>, SessionError> {
        let peers = self.peers_in(key).await?;
        Ok(peers
            .iter()
            .find(|peer| peer.name == target)
            .or_else(|| peers.iter().find(|peer| peer.session_id.as_str() == target))
            .map(|peer| peer.session_id.clone()))
    }

    /// `send` on behalf of `caller`: `target` is a session id, or a name in
    /// `request.peer_group` (of the caller's own sessions).
    ///
    /// Errors: `InvalidRequest` (empty or oversized message, unknown name), `NotFound`,
    /// `InboxFull`, `Store`.
    pub async fn send_as(
        &self,
        factory: &Arc<AgentFactory>,
        caller: &Caller,
        grants: &Grants,
        target: &SessionId,
        request: SendRequest,
    ) -> Result<SendResult, SessionError> {
        check_body(&request.body)?;
        check_origin(request.sender.as_ref(), request.in_reply_to.as_ref().map(MessageId::as_str))?;
        // Relaying another deputy's session's message is a peer server's (G1, G13).
        if (request.sender.is_some() || request.hops > 0) && !caller.has(Scope::SessionsSend) {
            tracing::info!(target: "deputy::audit", subject = %caller.subject(), what = "policy_refusal", refused = "relay", "refused: sender/hops without sessions:send");
            return Err(SessionError::policy_denied(
                "sender and hops relay another deputy's message: they need a token with the scope \
                 \"sessions:send\"",
            ));
        }
        // A send-only token reaches its own subject's sessions by name in a peer group, only.
        let send_only = !caller.uses_sessions() && caller.has(Scope::SessionsSend);
        if send_only && request.peer_group.is_none() {
            return Err(SessionError::policy_denied(
                "the scope \"sessions:send\" sends by name in a peer group only: give peer_group",
            ));
        }
        let id = match &request.peer_group {
            Some(group) => {
                check_group(group)?;
                let key = peer_key(caller.subject(), group);
                self.find_peer(&key, target.as_str()).await?.ok_or_else(|| {
                    SessionError::invalid(format!("no session named {target} in peer group {group:?}"))
                })?
            }
            None => target.clone(),
        };
        if !send_only {
            self.check_access(caller, &id).await?;
        }
        let from = match request.sender {
            Some(sender) => MessageSender::Remote {
                peer: caller.subject().to_owned(),
                session_id: sender.session_id,
                name: sender.name,
            },
            None => MessageSender::Caller { subject: caller.subject().to_owned() },
        };
        let message = InboxMessage {
            id: MessageId::new(),
            from,
            body: request.body,
            in_reply_to: request.in_reply_to,
            hops: request.hops,
            at: chrono::Utc::now(),
            report: None,
        };
        self.deliver(factory, grants, &id, message).await
    }

    /// Puts `message` into session `id`'s inbox, resuming the session if it is stored.
    pub(super) async fn deliver(
        &self,
        factory: &Arc<AgentFactory>,
        grants: &Grants,
        id: &SessionId,
        message: InboxMessage,
    ) -> Result<SendResult, SessionError> {
        let message_id = message.id.clone();
        // On a store several processes share, a copy behind it is dropped first: the mail
        // goes to a current one.
        self.current_copy(id).await?;
        loop {
            let handle = self.live_or_resumed(factory, grants, id).await?;
            // `None`: the handle was unloaded meanwhile; the store has the message and the
            // session's next handle reads it (admission is idempotent by id).
            if let Some(delivered) = handle.deliver(message.clone(), &self.store).await? {
                tracing::info!(session_id = %id, message_id = %message_id, ?delivered, "message delivered");
                return Ok(SendResult { session_id: id.clone(), message_id, delivered });
            }
        }
    }

    /// A session's own message to a peer (its `send_message` tool).
    async fn send_from_session(&self, outgoing: Outgoing) -> Result<Sent, SessionError> {
        check_body(&outgoing.body)?;
        check_origin(None, outgoing.in_reply_to.as_deref())?;
        let sender = self.live(&outgoing.from).ok_or_else(|| SessionError::not_found(outgoing.from.clone()))?;
        let state = sender.view().state;
        let group = state.peer_group.clone().unwrap_or_else(|| outgoing.from.to_string());
        if let Some((peer, target)) = outgoing.to.split_once(':') {
            return self.remote.send(peer, target, &group, &outgoing, state.name.as_deref(), &state.owner).await;
        }
        let key = peer_key(&state.owner, &group);
        // A delegated session reaches its parent as `parent`, named or not.
        let parent = state.lineage.parent_id.clone().filter(|_| outgoing.to == "parent");
        let found = match parent {
            Some(parent) => Some(parent),
            None => self.find_peer(&key, &outgoing.to).await?,
        };
        let Some(id) = found else {
            return Err(SessionError::invalid(format!(
                "no peer {:?} in this session's peer group; list_peers shows who can be reached",
                outgoing.to
            )));
        };
        if id == outgoing.from {
            return Err(SessionError::invalid("a session never receives its own messages"));
        }
        let message = InboxMessage {
            id: MessageId::new(),
            from: MessageSender::Session { session_id: outgoing.from.clone(), name: state.name.clone() },
            body: outgoing.body,
            in_reply_to: outgoing.in_reply_to.map(MessageId::from_string),
            hops: outgoing.hops,
            at: chrono::Utc::now(),
            report: None,
        };
        // Nobody's call: a stored recipient resumes with the context it last ran with (G14),
        // and its owner's grants as of now (the token table; G5).
        let sent = self.deliver_unattended(&id, message).await?;
        Ok(Sent { message_id: sent.message_id.to_string(), delivered: sent.delivered.as_str().to_owned() })
    }

    async fn peers_of(&self, of: &SessionId) -> Result<Vec<PeerInfo>, SessionError> {
        let handle = self.live(of).ok_or_else(|| SessionError::not_found(of.clone()))?;
        let state = handle.view().state;
        let group = state.peer_group.clone().unwrap_or_else(|| of.to_string());
        let mut found: Vec<Peer> = self.peers_in(&peer_key(&state.owner, &group)).await?;
        // A delegated session's parent is its peer too, as `parent` when it has no name.
        if let Some(parent) = &state.lineage.parent_id
            && !found.iter().any(|peer| peer.session_id == *parent)
        {
            found.insert(0, Peer { session_id: parent.clone(), name: "parent".into() });
        }
        let mut peers = Vec::new();
        for peer in found {
            if peer.session_id == *of {
                continue;
            }
            let Some(view) = self.view_of(&peer.session_id).await? else { continue };
            peers.push(PeerInfo {
                name: peer.name,
                session_id: peer.session_id,
                title: view.state.title,
                status: view.state.status.as_str().to_owned(),
                host_mode: view.state.host_mode,
            });
        }
        Ok(peers)
    }
}

impl PeerDirectory for LiveSessionService {
    fn send(&self, message: Outgoing) -> BoxFuture<'_, Result<Sent, String>> {
        Box::pin(async move { self.send_from_session(message).await.map_err(|error| error.to_string()) })
    }

    fn peers(&self, of: SessionId) -> BoxFuture<'_, Result<Vec<PeerInfo>, String>> {
        Box::pin(async move { self.peers_of(&of).await.map_err(|error| error.to_string()) })
    }
}

/// Shares a service so its sessions' linked tools (comms, delegation) can reach it.
impl LiveSessionService {
    pub fn into_shared(self) -> Arc<Self> {
        let shared = Arc::new(self);
        let _ = shared.me.set(Arc::downgrade(&shared));
        shared.start_notices();
        shared
    }
}
