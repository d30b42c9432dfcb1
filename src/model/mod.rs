//! What deputy stores and shows: plain data shared by the layers above.
//!
//! The session record, its views and summaries, the results of every operation, and the parts
//! of an agent a record persists (its spec, budget, context state and held step). Nothing here
//! runs a turn, opens a file or names a higher layer: `store` persists these values and
//! `session` renders and updates them, so neither has to know the other. The agent loop keeps
//! the same values current (`crate::agent` depends on this module, never the reverse).

pub mod budget;
pub mod caller_info;
pub mod context;
pub mod documents;
pub mod export;
pub mod inbox;
pub mod journal;
pub mod lineage;
pub mod list_filter;
pub mod memory;
pub mod pending;
pub mod record;
pub mod result;
pub mod spec;
pub mod stop_reason;
pub mod transcript;
pub mod view;
pub mod webhooks;

pub use budget::{Budget, Consumption, Exhausted};
pub use context::{ContextOverrides, ContextSettings, ContextState};
pub use export::ExportResult;
pub use journal::{
    EventJson, EventPage, MAX_EVENTS_PAGE, MAX_EVENTS_PAGE_BYTES, StoredEvent, StoredEventRow, fits_page, json_len,
};
pub use lineage::{ChildView, DelegationBook, Escalation, Lineage, Origin};
pub use list_filter::{LabelFilter, SessionFilter};
pub use pending::{
    ApprovalAnswer, CallState, Decision, PendingCall, PendingKind, PendingStep, StepCall, ToolResultAnswer,
};
pub use record::SessionRecord;
pub use result::{
    ArchiveResult, CompactResult, InterruptResult, RunResult, SessionHistory, ToolOutputResult, TurnStatus,
    TurnUsage,
};
pub use spec::{AgentRef, AgentSpec, StructuredOutput};
pub use stop_reason::StopReason;
pub use transcript::{ForkOrigin, MAX_TURN_MARKS, RewindResult, TurnMark, TurnMarks};
pub use view::{
    Billing, BudgetRemaining, ContextView, InstructionFile, ListPosition, SessionList, SessionState, SessionStatus,
    SessionSummary, SessionView,
};
