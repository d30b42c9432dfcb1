//! Keeping long sessions inside the model's window (feature `session-compaction`).
//!
//! Before every model call, the agent asks [`due`] whether the history must shrink. If so:
//! stage 1 ([`prune`]) replaces the bodies of old tool results with placeholders, keeping every
//! call/result pair; if that is not enough, stage 2 asks the model for a structured hand-off
//! summary and [`rebuild_history`] makes the new history from it and the most recent complete turns.
//! A failed summary is not fatal: the session goes on uncompacted. Stage 0 (capping tool
//! outputs at ingest) is in `agent::context` and works in every build.

mod prune;
mod rebuild;
mod recollect;
mod run;

pub use prune::{PLACEHOLDER_PREFIX, Pruned, prune};
pub use rebuild::{COMPACTION_PROMPT, SUMMARY_PREFIX, clean_turn_starts, rebuild_history, summarized_len};
pub use recollect::{PASSAGE_BYTES, recollect};
pub use run::{Outcome, Report};

use crate::agent::{ContextSettings, ContextState};

/// The trigger rules: either threshold is reached (the provider's last prompt size, or the
/// estimate of the whole history), never during the first turn, and never within
/// `min_turns_between_compactions` turns of the last compaction. One exception to the last
/// rule: a history that would no longer fit next to the answer (`hard_limit`) is compacted
/// anyway, at most once per turn, because the guard exists to prevent thrashing, not to let a
/// session overflow. `turn` is the running turn, counted from 1.
pub fn due(settings: &ContextSettings, state: &ContextState, turn: u64, estimated_history_tokens: u64) -> bool {
    if turn <= 1 {
        return false;
    }
    let size = state.last_input_tokens.max(estimated_history_tokens);
    if size >= settings.hard_limit() && state.last_compaction_turn != Some(turn) {
        return true;
    }
    if let Some(last) = state.last_compaction_turn
        && turn.saturating_sub(last) < settings.min_turns_between_compactions
    {
        return false;
    }
    size >= settings.threshold_tokens
}

#[cfg(test)]
mod rules {
    use super::*;
    use crate::agent::ContextOverrides;

    fn settings() -> ContextSettings {
        let overrides = ContextOverrides {
            context_window: Some(10_000),
            threshold_tokens: Some(1000),
            ..ContextOverrides::default()
        };
        ContextSettings::resolve("x:y", 100, &overrides, None).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn either_threshold_triggers_at_its_boundary() {
        let settings = settings();
        let mut state = ContextState { last_input_tokens: 999, ..ContextState::default() };
        assert!(!due(&settings, &state, 2, 999));
        assert!(due(&settings, &state, 2, 1000), "the estimate alone");
        state.last_input_tokens = 1000;
        assert!(due(&settings, &state, 2, 0), "the reported input alone");
    }

    #[test]
    fn never_on_the_first_turn() {
        let state = ContextState { last_input_tokens: 50_000, ..ContextState::default() };
        assert!(!due(&settings(), &state, 1, 50_000));
        assert!(due(&settings(), &state, 2, 50_000));
    }

    #[test]
    fn a_history_that_would_not_fit_compacts_even_within_min_turns_but_once_per_turn() {
        let settings = settings();
        assert_eq!(settings.hard_limit(), 9_900);
        let mut state = ContextState { last_compaction_turn: Some(5), ..ContextState::default() };
        assert!(!due(&settings, &state, 6, 9_899));
        assert!(due(&settings, &state, 6, 9_900));
        state.last_compaction_turn = Some(6);
        assert!(!due(&settings, &state, 6, 20_000), "not twice in one turn");
        assert!(!due(&settings, &ContextState::default(), 1, 20_000), "never in the first turn");
    }

    #[test]
    fn not_within_min_turns_of_the_last_compaction() {
        let settings = settings();
        let state =
            ContextState { last_input_tokens: 5000, last_compaction_turn: Some(4), ..ContextState::default() };
        assert!(!due(&settings, &state, 4, 5000));
        assert!(!due(&settings, &state, 6, 5000), "two turns later");
        assert!(due(&settings, &state, 7, 5000), "three turns later");
    }
}
