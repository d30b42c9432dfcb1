//! The live map: which sessions have a running actor, and the tombstones and the archive count
//! that keep a resume from racing an archive.

use std::collections::HashMap;
use std::sync::PoisonError;

use super::LiveSessionService;
use crate::ids::SessionId;
use crate::session::actor::SessionHandle;

/// The live sessions, and what keeps a resume from racing an archive.
#[derive(Default)]
pub(super) struct Registry {
    pub(super) sessions: HashMap<SessionId, Slot>,
    /// Archives committed to the store so far. A resume notes it before reading the record
    /// and registers only if it has not moved, so a record read before an archive committed
    /// can never bring the session back after it.
    pub(super) archives_committed: u64,
}

/// An entry of the live map.
pub(super) enum Slot {
    /// A running actor (while it is being archived, its handle refuses turns).
    Live(SessionHandle),
    /// `archive` of a session that was not live is committing: the tombstone that keeps a
    /// racing turn from resuming it from the store meanwhile.
    Archiving,
}

/// What the live map says about a session.
pub(super) enum Lookup {
    Live(SessionHandle),
    Archiving,
    /// Not in the map; the number of archives committed when it was looked at.
    Absent(u64),
}

impl LiveSessionService {
    /// How many sessions are live (actors running), unloaded ones not counted.
    pub fn live_sessions(&self) -> usize {
        let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
        registry.sessions.values().filter(|slot| matches!(slot, Slot::Live(_))).count()
    }

    pub(super) fn lookup(&self, id: &SessionId) -> Lookup {
        let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
        match registry.sessions.get(id) {
            Some(Slot::Live(handle)) => Lookup::Live(handle.clone()),
            Some(Slot::Archiving) => Lookup::Archiving,
            None => Lookup::Absent(registry.archives_committed),
        }
    }

    pub(super) fn live(&self, id: &SessionId) -> Option<SessionHandle> {
        match self.lookup(id) {
            Lookup::Live(handle) => Some(handle),
            Lookup::Archiving | Lookup::Absent(_) => None,
        }
    }

    pub(super) fn live_handles(&self) -> Vec<SessionHandle> {
        let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
        registry
            .sessions
            .values()
            .filter_map(|slot| match slot {
                Slot::Live(handle) => Some(handle.clone()),
                Slot::Archiving => None,
            })
            .collect()
    }

    /// How many sessions are running a turn (or compacting) right now. Cheap: one atomic per
    /// live session; the background server asks it before exiting idle.
    pub fn running_turns(&self) -> usize {
        self.live_handles().iter().filter(|handle| handle.is_busy()).count()
    }
}
