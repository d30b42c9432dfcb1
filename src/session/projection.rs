//! The projector: a session's journal written out as plain files, for people and tools that
//! read directories rather than APIs.
//!
//! For each session, `<root>/sessions/<id>/` holds:
//!
//! - `events.jsonl`: one line per journal event, the `StoredEvent` as canonical JSON (keys in
//!   order, no spaces), appended;
//! - `transcript.md`: the conversation as Markdown, appended one event at a time;
//! - `session.json`: the session as folded from its events only (never from the record);
//! - `checkpoint`: how far the files go: the next seq, the byte lengths of the two appended
//!   files, and the fold so far.
//!
//! **Deterministic.** Everything written comes from the events: timestamps are the events'
//! own, maps are ordered, nothing depends on when or how often the projector ran. Projecting
//! incrementally after every turn and replaying the whole journal into an empty directory give
//! byte-identical trees (the replay test in `tests/suite/events.rs`).
//!
//! **Crash-safe resume.** A step first truncates `events.jsonl` and `transcript.md` to the
//! lengths the checkpoint records (dropping whatever a crashed step appended after it), then
//! appends, then writes `session.json` and finally `checkpoint`, each to a temporary file
//! renamed into place. A crash anywhere leaves the checkpoint at the last whole step, and the
//! next step redoes the rest: no line is ever duplicated or lost.
//!
//! Directories are created 0700 and files 0600: the journal holds the conversation. The root
//! and every directory below it must belong to deputy's user and be writable by nobody else
//! (see [`prepare_root`]), and files are opened without following symlinks and must be
//! regular files: another local user cannot redirect a write elsewhere (G7).
//!
//! The projector never writes the store, and the live one ([`spawn_live`]) runs after the
//! commit, in the background, so a projection failure is logged and never fails a turn.

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use super::SessionService;
use crate::agent::AgentEvent;
use crate::ids::SessionId;
use crate::llm::Usage;
use crate::llm::pricing::Usd;
use crate::model::{MAX_EVENTS_PAGE, StoredEvent};

/// The file names of a projected session.
pub const EVENTS_FILE: &str = "events.jsonl";
pub const TRANSCRIPT_FILE: &str = "transcript.md";
pub const SESSION_FILE: &str = "session.json";
pub const CHECKPOINT_FILE: &str = "checkpoint";

/// How far a session's projection goes; written last, atomically.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The seq of the next event to project (the number projected, without gaps).
    pub seq: u64,
    pub events_bytes: u64,
    pub transcript_bytes: u64,
    /// The fold so far: what `session.json` shows.
    pub session: SessionFold,
}

impl Checkpoint {
    /// The `after_seq` to read the next events with.
    pub fn after(&self) -> Option<u64> {
        self.seq.checked_sub(1)
    }
}

/// A session as its events tell it (`session.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionFold {
    pub session_id: String,
    pub title: String,
    pub model: String,
    pub labels: BTreeMap<String, String>,
    pub host_mode: bool,
    pub created_at: Option<DateTime<Utc>>,
    /// The time of the last event.
    pub updated_at: Option<DateTime<Utc>>,
    /// `idle`, `running` (a turn started and its end is not in the journal yet) or `archived`.
    pub status: String,
    /// Turns started.
    pub turns: u64,
    /// How the last turn ended: `completed`, `cancelled` or `failed`.
    pub last_turn_end: Option<String>,
    pub last_stop_reason: Option<serde_json::Value>,
    pub usage: Usage,
    /// What the usage events cost: `null` once one of them came without a cost (its model had
    /// no price, or it was journaled before costs were).
    #[serde(default)]
    pub cost_usd: Option<Usd>,
    /// A usage event without a cost was folded: `cost_usd` stays unknown from then on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unpriced_usage: bool,
    pub tool_calls: u64,
    pub tool_errors: u64,
    pub compactions: u64,
    pub retries: u64,
    pub approvals_answered: u64,
    /// Inbox messages delivered to the agent.
    pub messages_delivered: u64,
    /// Events folded.
    pub events: u64,
}

impl SessionFold {
    fn apply(&mut self, stored: &StoredEvent, event: Option<&AgentEvent>) {
        self.events += 1;
        self.updated_at = Some(stored.at);
        let Some(event) = event else { return };
        match event {
            AgentEvent::SessionCreated { title, model, labels, host_mode } => {
                self.title.clone_from(title);
                self.model.clone_from(model);
                self.labels.clone_from(labels);
                self.host_mode = *host_mode;
                self.created_at = Some(stored.at);
                self.status = "idle".into();
            }
            AgentEvent::TurnStarted { turn } => {
                self.turns = self.turns.max(*turn);
                self.status = "running".into();
            }
            AgentEvent::TurnCompleted { stop_reason, .. } => {
                self.end_turn("completed");
                self.last_stop_reason = serde_json::to_value(stop_reason).ok();
            }
            AgentEvent::TurnCancelled { .. } => self.end_turn("cancelled"),
            AgentEvent::TurnFailed { .. } => self.end_turn("failed"),
            AgentEvent::Usage { usage, cost_usd } => self.add_usage(usage, *cost_usd),
            AgentEvent::ToolCallRequested { .. } => self.tool_calls += 1,
            AgentEvent::ToolResult { is_error, .. } => self.tool_errors += u64::from(*is_error),
            AgentEvent::CompactionCompleted { .. } => self.compactions += 1,
            AgentEvent::Retry { .. } => self.retries += 1,
            AgentEvent::ApprovalsAnswered { answered, .. } => self.approvals_answered += answered,
            AgentEvent::InboxDelivered { messages } => self.messages_delivered += messages.len() as u64,
            AgentEvent::Archived => self.status = "archived".into(),
            AgentEvent::TextDelta { .. }
            | AgentEvent::ReasoningDelta { .. }
            | AgentEvent::ResponseRestarted { .. }
            | AgentEvent::StructuredOutputRejected { .. }
            | AgentEvent::CompactionStarted { .. }
            | AgentEvent::Pruned { .. }
            | AgentEvent::CompactionFailed { .. }
            | AgentEvent::PromptReceived { .. }
            | AgentEvent::Forked { .. }
            | AgentEvent::Rewound { .. } => {}
        }
    }

    fn add_usage(&mut self, usage: &Usage, cost: Option<Usd>) {
        // Tokens folded without a cost (a checkpoint from before costs) leave the sum unknown.
        let uncounted = self.cost_usd.is_none() && self.usage.total_tokens() > 0;
        self.usage.add(usage);
        self.unpriced_usage |= cost.is_none() || uncounted;
        self.cost_usd = match cost {
            Some(cost) if !self.unpriced_usage => Some(self.cost_usd.unwrap_or_default().saturating_add(cost)),
            _ => None,
        };
    }

    fn end_turn(&mut self, how: &str) {
        self.last_turn_end = Some(how.to_owned());
        if self.status != "archived" {
            self.status = "idle".into();
        }
    }
}

/// Why projecting failed.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("reading the journal of session {session}: {message}")]
    Source { session: SessionId, message: String },
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> ProjectionError + '_ {
    move |source| ProjectionError::Io { path: path.to_owned(), source }
}

/// Writes projections under one root directory.
#[derive(Debug, Clone)]
pub struct Projector {
    root: PathBuf,
}

impl Projector {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of a session's projection.
    pub fn session_dir(&self, id: &SessionId) -> PathBuf {
        self.root.join("sessions").join(id.as_str())
    }

    /// The session's checkpoint; the empty one when there is none (or it cannot be read, in
    /// which case the projection starts over).
    pub fn checkpoint(&self, id: &SessionId) -> Checkpoint {
        let path = self.session_dir(id).join(CHECKPOINT_FILE);
        match read_nofollow(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|err| {
                tracing::warn!(path = %path.display(), "unreadable projection checkpoint, starting over: {err}");
                Checkpoint::default()
            }),
            Err(_) => Checkpoint::default(),
        }
    }

    /// One step: appends `events` (the journal from `checkpoint.seq` on; earlier ones are
    /// skipped) after truncating to `checkpoint`, then writes `session.json` and the new
    /// checkpoint. Returns it.
    pub fn append(
        &self,
        id: &SessionId,
        checkpoint: &Checkpoint,
        events: &[StoredEvent],
    ) -> Result<Checkpoint, ProjectionError> {
        let dir = self.session_dir(id);
        create_dirs(&self.root, &dir)?;
        let mut next = checkpoint.clone();
        if next.session.session_id.is_empty() {
            next.session.session_id = id.as_str().to_owned();
            next.session.status = "idle".into();
        }
        let mut lines = Vec::new();
        let mut transcript = Vec::new();
        for stored in events.iter().filter(|event| event.seq >= checkpoint.seq) {
            // The event parsed once, into a value: its line is canonical whatever the text's own
            // key order (a value's keys are in order; an event read back through a value, as the
            // CLI does, has them so), and the variant and the transcript are read from it.
            let canonical = serde_json::to_value(stored).map_err(|err| ProjectionError::Io {
                path: dir.join(EVENTS_FILE),
                source: io::Error::other(err),
            })?;
            let fields = &canonical["event"];
            let event = AgentEvent::deserialize(fields).ok();
            lines.extend_from_slice(canonical.to_string().as_bytes());
            lines.push(b'\n');
            render(&mut transcript, stored, fields, event.as_ref());
            next.session.apply(stored, event.as_ref());
            next.seq = stored.seq + 1;
        }
        next.events_bytes = append_at(&dir.join(EVENTS_FILE), checkpoint.events_bytes, &lines)?;
        next.transcript_bytes = append_at(&dir.join(TRANSCRIPT_FILE), checkpoint.transcript_bytes, &transcript)?;
        write_whole(&dir.join(SESSION_FILE), &pretty(&next.session))?;
        write_whole(&dir.join(CHECKPOINT_FILE), &pretty(&next))?;
        Ok(next)
    }
}

fn pretty<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Creates the projection root `root` (0700) if missing and checks that it is private: a
/// directory of deputy's user that no other user can write to. Called at startup (and by
/// `deputy project`), so a shared or foreign directory is refused before anything is written.
pub fn prepare_root(root: &Path) -> anyhow::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|err| anyhow::anyhow!("creating the projection directory {}: {err}", root.display()))?;
    let meta =
        fs::metadata(root).map_err(|err| anyhow::anyhow!("projection directory {}: {err}", root.display()))?;
    check_private(root, &meta).map_err(|err| anyhow::anyhow!("{err}"))
}

/// `dir` (whose metadata is `meta`) is a directory of deputy's user with no group or world
/// write bits.
fn check_private(dir: &Path, meta: &fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid(2) takes no arguments, always succeeds and touches no memory of ours.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err(io::Error::other(format!("projection directory {} is not a directory", dir.display())));
    }
    if meta.uid() != uid {
        return Err(io::Error::other(format!(
            "projection directory {} belongs to uid {}, not to this user ({uid})",
            dir.display(),
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "projection directory {} can be written by other users (mode {:o}); make it 0700",
            dir.display(),
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// Creates `dir` (0700) if missing; refuses a symlink or a directory that is not private.
fn private_dir(dir: &Path) -> Result<(), ProjectionError> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(at(dir)(err)),
    }
    let meta = fs::symlink_metadata(dir).map_err(at(dir))?;
    check_private(dir, &meta).map_err(at(dir))
}

fn create_dirs(root: &Path, dir: &Path) -> Result<(), ProjectionError> {
    DirBuilder::new().recursive(true).mode(0o700).create(root).map_err(at(root))?;
    let meta = fs::metadata(root).map_err(at(root))?;
    check_private(root, &meta).map_err(at(root))?;
    if let Some(sessions) = dir.parent() {
        private_dir(sessions)?;
    }
    private_dir(dir)
}

/// Opens `options` at `path` without following a symlink there, and only a regular file.
fn open_nofollow(options: &mut OpenOptions, path: &Path) -> Result<fs::File, ProjectionError> {
    let file = options.custom_flags(libc::O_NOFOLLOW).open(path).map_err(at(path))?;
    if !file.metadata().map_err(at(path))?.is_file() {
        return Err(at(path)(io::Error::other("not a regular file")));
    }
    Ok(file)
}

fn read_nofollow(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Cuts `path` to `length` (creating it empty if missing), appends `bytes`; the new length.
fn append_at(path: &Path, length: u64, bytes: &[u8]) -> Result<u64, ProjectionError> {
    use std::io::Seek;
    let mut file = open_nofollow(OpenOptions::new().create(true).write(true).truncate(false).mode(0o600), path)?;
    file.set_len(length).map_err(at(path))?;
    file.seek(io::SeekFrom::End(0)).map_err(at(path))?;
    file.write_all(bytes).map_err(at(path))?;
    Ok(length + bytes.len() as u64)
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), ProjectionError> {
    let temporary = path.with_extension("tmp");
    // A leftover (a crashed step's, or a planted symlink) goes; the new one is created afresh.
    match fs::remove_file(&temporary) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(at(&temporary)(err)),
        _ => {}
    }
    let mut file = open_nofollow(OpenOptions::new().create_new(true).write(true).mode(0o600), &temporary)?;
    file.write_all(bytes).map_err(at(&temporary))?;
    drop(file);
    fs::rename(&temporary, path).map_err(at(path))
}

fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// One event's part of `transcript.md`: a function of the event alone, so appending is the
/// same as rendering the whole journal at once. `fields` is the event as a value, `event` the
/// variant it reads as (none for one this build does not know).
fn render(out: &mut Vec<u8>, stored: &StoredEvent, fields: &serde_json::Value, event: Option<&AgentEvent>) {
    let at = stamp(stored.at);
    let text = match event {
        Some(AgentEvent::SessionCreated { title, model, .. }) => {
            format!("# {title}\n\nSession created {at} with `{model}`.\n\n")
        }
        Some(AgentEvent::PromptReceived { turn, prompt }) => {
            format!("## Turn {turn}\n\n**User** ({at}):\n\n{prompt}\n\n")
        }
        Some(AgentEvent::TextDelta { text }) => format!("**Assistant** ({at}):\n\n{text}\n\n"),
        Some(AgentEvent::ToolCallRequested { id, name, input }) => {
            format!("**Tool call** `{name}` ({id}):\n\n```json\n{input}\n```\n\n")
        }
        Some(AgentEvent::ToolResult { id, name, content, is_error }) => {
            let error = if *is_error { " (error)" } else { "" };
            format!("**Tool result** `{name}` ({id}){error}:\n\n```\n{content}\n```\n\n")
        }
        Some(AgentEvent::TurnStarted { .. } | AgentEvent::Usage { .. }) => String::new(),
        Some(AgentEvent::TurnCompleted { turn, stop_reason }) => {
            let reason = serde_json::to_value(stop_reason).unwrap_or_default();
            format!("_Turn {turn} completed ({}) at {at}._\n\n", reason.as_str().unwrap_or("?"))
        }
        Some(AgentEvent::TurnCancelled { turn }) => format!("_Turn {turn} cancelled at {at}._\n\n"),
        Some(AgentEvent::TurnFailed { turn, error }) => format!("_Turn {turn} failed at {at}: {error}_\n\n"),
        Some(AgentEvent::Archived) => format!("_Archived at {at}._\n"),
        Some(AgentEvent::InboxDelivered { messages }) => {
            let mail = messages.iter().map(|message| format!("> {}\n", message.render().replace('\n', "\n> ")));
            format!("**Mail delivered** ({at}):\n\n{}\n", mail.collect::<String>())
        }
        // Everything else is one line naming the event and its fields.
        Some(_) | None => {
            let mut fields = fields.clone();
            if let Some(object) = fields.as_object_mut() {
                object.remove("type");
            }
            format!("_{} at {at}_ `{fields}`\n\n", stored.kind())
        }
    };
    out.extend_from_slice(text.as_bytes());
}

/// Projects one session up to the end of its journal, reading pages from `fetch(after_seq)`;
/// returns how many events it wrote.
pub async fn project_session<F, Fut>(
    projector: &Projector,
    id: &SessionId,
    mut fetch: F,
) -> Result<u64, ProjectionError>
where
    F: FnMut(Option<u64>) -> Fut,
    Fut: Future<Output = Result<Vec<StoredEvent>, String>>,
{
    let mut checkpoint = projector.checkpoint(id);
    let mut written = 0;
    loop {
        let events = fetch(checkpoint.after())
            .await
            .map_err(|message| ProjectionError::Source { session: id.clone(), message })?;
        let Some(last) = events.last() else { return Ok(written) };
        if last.seq < checkpoint.seq {
            return Ok(written);
        }
        let (step, id_owned) = (projector.clone(), id.clone());
        let before = checkpoint.seq;
        checkpoint = tokio::task::spawn_blocking(move || step.append(&id_owned, &checkpoint, &events))
            .await
            .map_err(|err| ProjectionError::Source { session: id.clone(), message: err.to_string() })??;
        written += checkpoint.seq - before;
        // Pages are bounded by bytes as well as by count, so a short page need not be the
        // last: read on until one comes back empty.
    }
}

/// The live projector (`[projection] dir`): after each commit a session announces on
/// [`SessionService::changes`], its new events are projected under `projector`'s root. Runs
/// until the service's change feed closes; failures are logged, never reported to a turn.
pub fn spawn_live<S: SessionService>(service: Arc<S>, projector: Projector) -> tokio::task::JoinHandle<()> {
    let mut changes = service.changes();
    tokio::spawn(async move {
        loop {
            let id = match changes.recv().await {
                Ok(id) => id,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    // Those sessions are projected at their next change.
                    tracing::warn!(missed, "the live projector fell behind");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let fetch = |after| {
                let (service, id) = (service.clone(), id.clone());
                async move {
                    service
                        .events(&id, after, MAX_EVENTS_PAGE)
                        .await
                        .map(|page| page.events)
                        .map_err(|err| err.to_string())
                }
            };
            if let Err(error) = project_session(&projector, &id, fetch).await {
                tracing::warn!(session_id = %id, "projecting the session failed: {error}");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, event: serde_json::Value) -> StoredEvent {
        let at = DateTime::from_timestamp(1_800_000_000 + seq as i64, 0).unwrap_or_default();
        StoredEvent { seq, turn: 1, at, event: event.into() }
    }

    fn journal() -> Vec<StoredEvent> {
        vec![
            event(
                0,
                serde_json::json!({"type": "session_created", "title": "t", "model": "m", "labels": {}, "host_mode": false}),
            ),
            event(1, serde_json::json!({"type": "prompt_received", "turn": 1, "prompt": "hi"})),
            event(2, serde_json::json!({"type": "turn_started", "turn": 1})),
            event(3, serde_json::json!({"type": "text_delta", "text": "hello"})),
            event(4, serde_json::json!({"type": "something_new", "x": 1})),
            event(5, serde_json::json!({"type": "turn_completed", "turn": 1, "stop_reason": "end_turn"})),
        ]
    }

    fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut files = BTreeMap::new();
        for entry in fs::read_dir(root.join("sessions/s")).unwrap() {
            let entry = entry.unwrap();
            files.insert(entry.file_name().to_string_lossy().into_owned(), fs::read(entry.path()).unwrap());
        }
        files
    }

    #[test]
    fn projection_is_the_same_in_steps_in_one_go_and_after_a_crash() {
        let id = SessionId::from_string("s");
        let events = journal();
        let whole = tempfile::tempdir().unwrap();
        let projector = Projector::new(whole.path());
        projector.append(&id, &Checkpoint::default(), &events).unwrap();

        let steps = tempfile::tempdir().unwrap();
        let projector = Projector::new(steps.path());
        let mut checkpoint = Checkpoint::default();
        for chunk in events.chunks(2) {
            checkpoint = projector.append(&id, &projector.checkpoint(&id), chunk).unwrap();
        }
        assert_eq!(checkpoint.seq, 6);
        assert_eq!(tree(whole.path()), tree(steps.path()));
        let fold: SessionFold = serde_json::from_slice(&tree(steps.path())[SESSION_FILE]).unwrap();
        assert_eq!((fold.status.as_str(), fold.turns, fold.events), ("idle", 1, 6));

        // A crashed step: garbage appended after an older checkpoint.
        let crashed = tempfile::tempdir().unwrap();
        let projector = Projector::new(crashed.path());
        let early = projector.append(&id, &Checkpoint::default(), &events[..3]).unwrap();
        projector.append(&id, &early, &events[3..]).unwrap();
        let dir = projector.session_dir(&id);
        fs::write(dir.join(CHECKPOINT_FILE), pretty(&early)).unwrap();
        let mut file = OpenOptions::new().append(true).open(dir.join(EVENTS_FILE)).unwrap();
        file.write_all(b"{\"garbage\":").unwrap();
        projector.append(&id, &projector.checkpoint(&id), &events[3..]).unwrap();
        assert_eq!(tree(whole.path()), tree(crashed.path()));
    }
}
