//! The scenarios of the reliability suite; each file is one of issue 12's.

/// Prints a scenario's figures like `eprintln!`, and appends them to [`FIGURES`]: the harness
/// hides a passing test's output (and `--nocapture` would show every log line of every deputy
/// the scenarios start), so CI shows that file instead.
macro_rules! report {
    ($($arg:tt)*) => {
        $crate::reliability::report_line(&format!($($arg)*))
    };
}

mod archive_races;
mod busy;
mod crash_loop;
mod hibernation;
mod hostile_http;
mod properties;
mod provider_chaos;

use std::io::Write;
use std::time::Duration;

/// Where [`report!`] keeps the figures of this run's scenarios, one line each.
pub const FIGURES: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/reliability-figures.txt");

pub fn report_line(line: &str) {
    eprintln!("{line}");
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(FIGURES)
        .and_then(|mut figures| writeln!(figures, "{line}"));
    if let Err(error) = appended {
        eprintln!("reliability: could not keep the figures in {FIGURES}: {error}");
    }
}

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
