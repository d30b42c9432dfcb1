//! The process's memory allocator: jemalloc on Linux, with the settings a server of many
//! sessions needs. Elsewhere the system's allocator, and [`start`] and [`release_freed`] do
//! nothing.
//!
//! A session's actor, its turns and the requests that drive it hop between worker threads, so
//! memory is freed on another thread than the one that took it, all the time. glibc's malloc
//! spent 19% of deputy's CPU under load on that; jemalloc's thread caches serve the same load at
//! half again the turns per second (docs/BENCHMARKS.md, the allocator). A server that unloads
//! and reloads sessions also frees memory in the middle of its heap all the time: jemalloc hands
//! such pages back by itself, after they have been unused for [`CONFIGURATION`]'s decay time,
//! from a background thread ([`start`]), and at once after sessions are unloaded
//! ([`release_freed`]) — glibc kept 40 MiB of it resident in reliability scenario 5.

#[cfg(target_os = "linux")]
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
#[cfg(target_os = "linux")]
use std::time::Instant;

/// The allocator `main` declares global (`#[global_allocator]` belongs to the executable, so
/// the benches that count allocations can declare their own).
#[cfg(target_os = "linux")]
pub use tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation, before `main`; `_RJEM_MALLOC_CONF` in the
/// environment still overrides them.
///
/// - `narenas:2`: two arenas, not four per core. Memory freed in an arena serves only that
///   arena, so each one more keeps more free pages resident: scenario 5 of the reliability
///   suite peaked at 166 MiB with the default eight and 157 MiB with two; two cores contend
///   little for two arenas, and each thread's own cache takes most allocations without a lock.
/// - `dirty_decay_ms:1000`: freed pages are handed back to the system within about a second of
///   being unused (10 s by default), so memory follows the sessions loaded, not their peak.
/// - `muzzy_decay_ms:0`: handed back means gone from the resident set at once (`MADV_DONTNEED`),
///   not lazily freed pages the kernel takes back only under pressure, which still count in RSS.
/// - `max_background_threads:1`: one thread does that for every arena once [`start`]ed (by
///   default, one per core); it sleeps until there is something to hand back.
#[cfg(target_os = "linux")]
const CONFIGURATION: &[u8] = b"narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,max_background_threads:1\0";

/// The options as jemalloc looks for them: a C string named `malloc_conf`, under the prefix
/// tikv-jemalloc-sys builds jemalloc with on Linux (its own definition is weak).
#[cfg(target_os = "linux")]
#[unsafe(export_name = "_rjem_malloc_conf")]
#[used]
static MALLOC_CONF: Option<&'static libc::c_char> = Some(as_c_char(&CONFIGURATION[0]));

#[cfg(target_os = "linux")]
const fn as_c_char(byte: &'static u8) -> &'static libc::c_char {
    // SAFETY: u8 and c_char (i8 or u8) have the same size and alignment, and every bit pattern.
    unsafe { std::mem::transmute::<&'static u8, &'static libc::c_char>(byte) }
}

/// The shortest time between two releases. A release walks every arena and hands back all of
/// its unused pages, holding the arena's lock meanwhile; once a second bounds that cost, and a
/// burst of unloads needs one release, after it.
const RELEASE_INTERVAL: Duration = Duration::from_secs(1);

/// Starts jemalloc's background thread, which hands unused pages back on its own schedule
/// rather than on the time of whatever allocation comes next, so an idle server shrinks. Called
/// by `main` once logs have somewhere to go; never by the sandbox launcher (the same
/// executable), which must stay a single thread until it becomes the sandboxed program.
pub fn start() {
    #[cfg(target_os = "linux")]
    {
        let mut enable = true;
        // SAFETY: "background_thread" is a documented bool control; the new value is a bool of
        // the size given, and no old value is asked for.
        let status = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"background_thread".as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                (&raw mut enable).cast(),
                size_of::<bool>(),
            )
        };
        if status != 0 {
            // Memory is still handed back, by the allocating threads instead.
            tracing::debug!(status, "jemalloc's background thread did not start");
        }
    }
}

/// Hands every arena's unused pages back to the system, at most once per [`RELEASE_INTERVAL`]:
/// the memory unloaded sessions held stops counting as deputy's now rather than after the decay
/// time. The walk runs on the blocking pool, never on an async worker. Called by every unload
/// of a session, from within the runtime; a call inside the interval does nothing, as the next
/// unload's call, or the decay, will release what it left.
pub fn release_freed() {
    #[cfg(target_os = "linux")]
    {
        static RELEASES: Throttle = Throttle::new(RELEASE_INTERVAL);
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        if RELEASES.claim(EPOCH.get_or_init(Instant::now).elapsed()) {
            tokio::task::spawn_blocking(purge_all_arenas);
        }
    }
}

#[cfg(target_os = "linux")]
fn purge_all_arenas() {
    // MALLCTL_ARENAS_ALL (4096) names every arena at once.
    // SAFETY: "arena.<i>.purge" is a documented control that takes and returns nothing.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
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
        drop(runtime); // waits for the blocking pool's purge, if one ran
        assert!(kept.iter().all(|&byte| byte == 7));
    }

    /// A jemalloc control's value, read through `mallctl`.
    #[cfg(target_os = "linux")]
    fn read<T: Default>(name: &std::ffi::CStr) -> T {
        let mut value = T::default();
        let mut size = size_of::<T>();
        // SAFETY: each control read below is of the type asked for; the old value fits.
        let status = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&raw mut value).cast(),
                &raw mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(status, 0, "{name:?}");
        value
    }

    /// The options are in force: jemalloc found them under the name it looks for.
    #[cfg(target_os = "linux")]
    #[test]
    fn jemalloc_runs_with_deputys_options() {
        assert_eq!(read::<u32>(c"opt.narenas"), 2);
        assert_eq!(read::<isize>(c"opt.dirty_decay_ms"), 1000);
        assert_eq!(read::<isize>(c"opt.muzzy_decay_ms"), 0);
        assert_eq!(read::<usize>(c"opt.max_background_threads"), 1);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_background_thread_starts() {
        start();
        assert!(read::<bool>(c"background_thread"));
    }
}
