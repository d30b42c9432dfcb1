//! The session lifecycle contract, one implementation per deployment shape.
//!
//! Every surface (MCP, REST, JSON-RPC and the CLI) calls only [`SessionService`]; the
//! contract and its error codes are the same whichever way a caller arrives. The service
//! answers with the plain data types of [`crate::model`], re-exported here so a caller of the
//! service names one module.
//!
//! Implementations:
//! - [`live::LiveSessionService`]: sessions in memory, one actor task each ([`actor`]), over an
//!   optional [`SessionStore`](crate::store::SessionStore).
//! - [`scoped::ScopedService`]: one caller's view of a shared live service: its
//!   [`Caller`](crate::caller::Caller) (which sessions it sees), its grants (shell, inline MCP
//!   servers) and its [`AgentFactory`](crate::agent::AgentFactory). [`scoped::PerCaller`] makes
//!   one per caller for the HTTP surface; the background server gives one to each client.

pub mod actor;
pub mod agent_record;
pub mod live;
pub mod projection;
pub mod scoped;
pub mod types;

use std::future::Future;
use std::time::Duration;

pub use live::delegation::{DelegationLimits, MAX_CHILD_TEXT_BYTES};
pub use live::{LiveSessionService, turn_outcome};
pub use scoped::{CallerServices, PerCaller, ScopedService};
pub use types::*;

pub use crate::model::{
    ApprovalAnswer, ArchiveResult, CompactResult, Decision, ExportResult, InterruptResult, PendingCall,
    PendingKind, RewindResult, RunResult, SessionHistory, SessionList, SessionStatus, SessionSummary, SessionView,
    ToolOutputResult, ToolResultAnswer, TurnStatus,
};

use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::caller_info::CallerInfo;
use crate::model::inbox::SendResult;
use crate::model::webhooks::WebhooksStatus;

pub trait SessionService: Send + Sync + 'static {
    /// Builds the agent from `request.build`, registers the session and runs its first turn.
    ///
    /// Errors: `InvalidRequest` (empty prompt, bad model id), `Agent` (provider unusable, or
    /// the first turn failed — the session then exists and its id is in the error).
    fn create_session(
        &self,
        request: CreateSessionRequest,
    ) -> impl Future<Output = Result<RunResult, SessionError>> + Send;

    /// Runs a turn on a session, resuming it from the store if it is not live. Exactly one
    /// concurrent caller wins; the others get `Busy` at once, without queueing.
    ///
    /// Errors: `NotFound` (also for archived sessions), `Busy`, `InvalidRequest`, `Agent` (the
    /// turn failed; the session stays usable), `Store` (the turn ran but was not saved).
    fn start_turn(
        &self,
        id: &SessionId,
        request: TurnRequest,
    ) -> impl Future<Output = Result<RunResult, SessionError>> + Send;

    /// Puts a message into a session's inbox (comms). It is delivered at a boundary: between
    /// two steps of a running turn, or in front of the next turn's prompt; an idle host-mode
    /// session starts a turn for it by itself. Sending to a stored session resumes it. With
    /// `request.peer_group`, `id` may be a session's name in that group.
    ///
    /// Errors: `NotFound`, `InvalidRequest` (empty or oversized message, unknown name),
    /// `InboxFull`, `Store`.
    fn send(
        &self,
        id: &SessionId,
        request: SendRequest,
    ) -> impl Future<Output = Result<SendResult, SessionError>> + Send;

    /// Cancels the turn in flight; it ends `cancelled` and the history stays valid. With
    /// `cascade`, the running turns of the session's descendants (delegated sessions) too.
    ///
    /// Errors: `NotFound`, `NotRunning` (no turn in flight, here or below with `cascade`).
    fn interrupt(
        &self,
        id: &SessionId,
        cascade: bool,
    ) -> impl Future<Output = Result<InterruptResult, SessionError>> + Send;

    /// The session's state and billing, never waiting behind a running turn. With `wait`, a
    /// running turn is long-polled: the answer comes when it ends (or when `wait` runs out).
    ///
    /// Falls back to the store for sessions that are not live (including archived ones).
    ///
    /// Errors: `NotFound`, `Store`.
    fn read(
        &self,
        id: &SessionId,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<SessionView, SessionError>> + Send;

    /// Session summaries, live and stored (deduplicated), newest first, paged.
    ///
    /// Errors: `PersistenceDisabled` (archived sessions asked for without a store), `Store`.
    fn list(&self, query: ListQuery) -> impl Future<Output = Result<SessionList, SessionError>> + Send;

    /// Stops the session and removes it from the live sessions. A turn in flight finishes
    /// first. With a store, the session stays there, archived: readable, but it takes no turns.
    ///
    /// Errors: `NotFound`, `Store`.
    fn archive(&self, id: &SessionId) -> impl Future<Output = Result<ArchiveResult, SessionError>> + Send;

    /// Compacts a session's history now (feature `session-compaction`): prunes old tool
    /// results and summarizes older turns, whatever the thresholds say.
    ///
    /// Errors: `CompactionDisabled` (builds without the feature), `NotFound`, `Busy` (a turn
    /// runs), `Store`.
    fn compact(&self, id: &SessionId) -> impl Future<Output = Result<CompactResult, SessionError>> + Send;

    /// A new session, owned by the caller, holding `id`'s conversation up to the end of its
    /// turn `at_turn` (`None`: the turn its history ends with now; 0: none of it), with the
    /// source's configuration and a fresh budget. The source is untouched; the fork's
    /// `forked_from` names it. Waits for a running turn of the source to end.
    ///
    /// Errors: `NotFound`, `InvalidRequest` (a turn its history cannot reach), `PolicyDenied`
    /// (the caller's grants or quota), `PersistenceDisabled` (live set full without a store),
    /// `AgentError`, `Store`.
    fn fork(
        &self,
        id: &SessionId,
        at_turn: Option<u64>,
    ) -> impl Future<Output = Result<SessionView, SessionError>> + Send;

    /// Drops the turns after `to_turn` from the model's history (their journal events stay,
    /// followed by a `rewound` event); the next turn continues from `to_turn`'s end. Turn
    /// numbers keep counting up.
    ///
    /// Errors: `NotFound`, `Busy` (a turn or a compaction runs), `InvalidRequest` (a turn its
    /// history cannot reach), `Store`.
    fn rewind(
        &self,
        id: &SessionId,
        to_turn: u64,
    ) -> impl Future<Output = Result<RewindResult, SessionError>> + Send;

    /// The session as one JSONL document ([`crate::model::export`]): its record, history and
    /// journal, secret values left out (the header names them). Waits for a running turn.
    ///
    /// Errors: `NotFound`, `Store`.
    fn export(&self, id: &SessionId) -> impl Future<Output = Result<ExportResult, SessionError>> + Send;

    /// A new session of the caller's from an exported document: a new id, the caller its owner,
    /// its history and journal as the document has them. Every line is checked first; a
    /// document that does not read, or of a newer format version, creates nothing.
    ///
    /// Errors: `InvalidRequest`, `PolicyDenied` (the caller's grants or quota),
    /// `PersistenceDisabled` (live set full without a store), `AgentError`, `Store`.
    fn import(&self, document: &str) -> impl Future<Output = Result<SessionView, SessionError>> + Send;

    /// The whole output of a tool result that entered the history capped.
    ///
    /// Errors: `NotFound`, `InvalidRequest` (no such capped output), `Store`.
    fn tool_output(
        &self,
        id: &SessionId,
        tool_use_id: &str,
    ) -> impl Future<Output = Result<ToolOutputResult, SessionError>> + Send;

    /// At shutdown: waits up to `timeout` for running turns to finish (they are saved as
    /// usual), then interrupts the rest and waits briefly for them to end, saved as cancelled.
    fn drain(&self, timeout: Duration) -> impl Future<Output = ()> + Send;

    /// What the service holds now, for `/metrics`: sessions live and hibernated, turns
    /// running, mail waiting. For operators: the admin scope, or the anonymous caller of a
    /// server without tokens (which listens on loopback only).
    ///
    /// Errors: `PolicyDenied`, `Store`.
    fn gauges(&self) -> impl Future<Output = Result<crate::telemetry::metrics::Gauges, SessionError>> + Send;

    /// Who the caller is and what it may do (`caller/get`): the local caller for the service
    /// itself.
    fn caller_info(&self) -> CallerInfo;

    /// The `[[webhooks]]` and how their deliveries go (`webhooks/status`): the operator's, so
    /// for the same callers as [`SessionService::gauges`].
    ///
    /// Errors: `PolicyDenied`.
    fn webhooks(&self) -> impl Future<Output = Result<WebhooksStatus, SessionError>> + Send;

    /// Whether the service can serve, in O(1) whatever the number of sessions (`/readyz`):
    /// the store answers a read transaction, when there is one.
    ///
    /// Errors: `Store`.
    fn ready(&self) -> impl Future<Output = Result<(), SessionError>> + Send;

    /// The whole conversation of a session (live, or stored). Waits for a running turn.
    ///
    /// Errors: `NotFound`, `Store`.
    fn history(&self, id: &SessionId) -> impl Future<Output = Result<SessionHistory, SessionError>> + Send;

    /// The ids of sessions whose view just changed: a turn (or a compaction) ended and was
    /// saved, so a `read` now shows it. Live announcements only, nothing is replayed; a
    /// listener that falls behind is told it lagged. Ids carry no content, so this is not
    /// scoped to a caller: whoever passes one on must `read` it through its own view first.
    fn changes(&self) -> tokio::sync::broadcast::Receiver<SessionId>;

    /// The session's journal: up to `limit` (1 to 500) committed events with a seq after
    /// `after` (from the first when `None`), in order. Events of a turn appear when the turn
    /// has been saved; poll with the page's `next_seq` to follow, or wait on
    /// [`Self::changes`].
    ///
    /// Errors: `NotFound`, `InvalidRequest` (limit), `Store`.
    fn events(
        &self,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<crate::model::EventPage, SessionError>> + Send;

    /// The running turn's journal events not committed yet, after `after`, and a receiver that
    /// changes as more are recorded: what a follower asking for provisional events streams
    /// before the turn is saved. `None` while the session is not live (it runs no turn).
    ///
    /// Errors: `NotFound` (a session the caller may not read).
    fn provisional(
        &self,
        id: &SessionId,
        after: Option<u64>,
    ) -> impl Future<Output = Result<Option<Provisional>, SessionError>> + Send;

    /// The named agents sessions can be created from (`session_create {agent}`): every profile
    /// file this caller's configuration reads, valid or not, as the files are now.
    fn agents(&self) -> crate::profiles::AgentList;

    /// One named agent, whole.
    ///
    /// Errors: `InvalidRequest` (no agent of that name, or its file is not valid).
    fn agent(&self, name: &str) -> Result<crate::profiles::AgentDetail, SessionError>;

    /// The caller's memories (what its sessions remembered, and their compacted history): the
    /// best matches of `query.query`, or newest first, paged by `before`.
    ///
    /// Errors: `Store` (the store or the memory index failed).
    fn memories(
        &self,
        query: MemoryQuery,
    ) -> impl Future<Output = Result<crate::model::memory::MemoryList, SessionError>> + Send;

    /// Brings the document collections (or `collection`) up to their files: what changed is
    /// read and indexed again.
    ///
    /// Errors: `InvalidRequest` (no such collection, or its index failed), `PolicyDenied` (a
    /// caller without the `admin` scope: collections are the operator's).
    fn index_documents(
        &self,
        collection: Option<String>,
    ) -> impl Future<Output = Result<crate::model::documents::DocumentsIndexed, SessionError>> + Send;

    /// Deletes one of the caller's memories; `deleted: false` when it has none of that id.
    ///
    /// Errors: `Store`.
    fn forget_memory(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<crate::model::memory::MemoryDeleted, SessionError>> + Send;
}
