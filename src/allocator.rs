//! What deputy asks of the process's memory allocator: glibc's malloc, on Linux.
//!
//! A server that unloads and reloads sessions frees memory in the middle of its heap all the
//! time. glibc keeps such memory for later allocations but gives back to the system only what
//! ends its heap, so the resident set grows with the heap's holes, not with what is in use:
//! 20,000 sessions of 50 KB reloaded one after another left 40 MiB free yet resident beside
//! 104 MiB in use (docs/RELIABILITY.md, scenario 5). Two habits keep it to what is used:
//! few arenas ([`limit_arenas`]), and the free pages handed back after sessions are unloaded
//! ([`release_freed`]). Elsewhere both do nothing.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shortest time between two releases. A release walks every free chunk of the heap and
/// hands back what was freed since the last one, holding each arena's lock meanwhile, so an
/// allocation on another thread may wait for it: measured on the 2-core VM, 0.7 ms for a
/// fragmented heap with nothing new to hand back, 8 ms after 75 MB was freed. Once a second
/// bounds that cost, and a burst of unloads needs one release, after it.
const RELEASE_INTERVAL: Duration = Duration::from_secs(1);

/// glibc gives threads that allocate at the same time arenas of their own, up to 8 per core,
/// and memory freed in one arena serves only that arena. A server whose requests and session
/// actors hop between worker threads then keeps growing: with 1,000 live sessions of 50 KB its
/// RSS rose from 211 to 280 MiB while sessions were merely reloaded (scenario 5). Two arenas
/// keep contention low on the few cores deputy uses and the heap reusable. To be called before
/// any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Hands the heap's whole free pages back to the system (glibc's `malloc_trim`), at most once
/// per [`RELEASE_INTERVAL`]: the memory unloaded sessions held stops counting as deputy's. The
/// walk runs on the blocking pool, never on an async worker. Called by every unload of a
/// session, from within the runtime; a call inside the interval does nothing, as the next
/// unload's call will release what it left.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static RELEASES: Throttle = Throttle::new(RELEASE_INTERVAL);
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        if RELEASES.claim(EPOCH.get_or_init(Instant::now).elapsed()) {
            tokio::task::spawn_blocking(|| {
                // SAFETY: malloc_trim only returns free memory; it takes each arena's lock itself.
                unsafe { libc::malloc_trim(0) };
            });
        }
    }
}

/// Lets something run at most once per interval, whoever asks, without a lock.
struct Throttle {
    interval_ms: u64,
    /// When it last ran, in milliseconds since the caller's epoch, plus one (0: never).
    last: AtomicU64,
}

impl Throttle {
    const fn new(interval: Duration) -> Self {
        Self { interval_ms: interval.as_millis() as u64, last: AtomicU64::new(0) }
    }

    /// Whether it may run `now` (time since the caller's epoch): the first time, or one
    /// interval after the last. Of callers at once, one wins.
    fn claim(&self, now: Duration) -> bool {
        let at = now.as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        let due = last == 0 || at >= last + self.interval_ms;
        due && self.last.compare_exchange(last, at, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_run_per_interval() {
        let throttle = Throttle::new(Duration::from_secs(1));
        let claimed: Vec<u64> =
            (0..=25).map(|step| step * 100).filter(|&ms| throttle.claim(Duration::from_millis(ms))).collect();
        assert_eq!(claimed, [0, 1000, 2000]);
    }

    /// Another test of this process may have released less than a second ago: then this call
    /// does nothing, and the check holds all the same.
    #[test]
    fn releasing_from_the_runtime_leaves_memory_in_use_as_it_was() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let kept = vec![7u8; 1 << 20];
        runtime.block_on(async { release_freed() });
        drop(runtime); // waits for the blocking pool's trim, if one ran
        assert!(kept.iter().all(|&byte| byte == 7));
    }
}
