//! The scenarios of the reliability suite; each file is one of issue 12's.

mod archive_races;
mod busy;
mod crash_loop;
mod hibernation;
mod hostile_http;
mod properties;
mod provider_chaos;

use std::time::Duration;

/// Every scenario's overall deadline: a test fails rather than hang.
pub const DEADLINE: Duration = Duration::from_secs(300);

/// A seed for `scenario`'s randomness: `DEPUTY_RELIABILITY_SEED` if set (to replay a run),
/// else fresh; printed with how to replay it.
pub fn seed(scenario: &str) -> u64 {
    let seed = std::env::var("DEPUTY_RELIABILITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("reliability: {scenario}: seed {seed} (DEPUTY_RELIABILITY_SEED={seed} replays it)");
    seed
}
