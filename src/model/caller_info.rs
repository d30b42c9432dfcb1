//! What `caller/get` answers: who the caller is and what its scopes let it do, so a client (the
//! inspector) offers only what it may.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::caller::Caller;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CallerInfo {
    pub subject: String,
    pub scopes: Vec<String>,
    /// It may create sessions and act on its own (turns, interrupts, archives, approvals).
    pub acts: bool,
    /// It may act on every session (`sessions:all`).
    pub acts_on_all: bool,
    /// It sees every session (`sessions:all` or `sessions:read_all`).
    pub reads_all: bool,
}

impl CallerInfo {
    pub fn of(caller: &Caller) -> Self {
        Self {
            subject: caller.subject().to_owned(),
            scopes: caller.scopes().map(|scope| scope.to_string()).collect(),
            acts: caller.uses_sessions(),
            acts_on_all: caller.sees_all(),
            reads_all: caller.reads_all(),
        }
    }
}
