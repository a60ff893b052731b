//! Scheduling priority of the agent's background threads.
//!
//! The receive workers must never wait for the CPU behind work that can
//! wait: the flusher merging a window, a sink encoding and writing it, the
//! HTTP thread answering a scrape. When they share a core (an agent pinned
//! to one CPU, or a cgroup quota of one), the scheduler splits the core
//! evenly between runnable threads, so a flush of 100k series took half the
//! core from the receive thread for ~250 ms every window and the socket
//! overflowed (docs/benchmarks/LOG.md, "dog-100k at 5 M lines/s: no flush or
//! sketch burst on the receive core"). Background threads therefore run
//! at a higher nice value than the receive workers: under contention the
//! scheduler gives a nice-10 thread about a tenth of the share of a nice-0
//! one, and when the core is otherwise idle it runs at full speed.
//!
//! # Design
//!
//! The nice value is set once, before any thread starts, by
//! [`set_background_nice`], and read by each background thread as it
//! starts ([`enter_background`]). A process-wide setting rather than an
//! argument to every spawn function, because every kind of background
//! thread (flusher, file and network sinks, HTTP) takes the same value and
//! tests that spawn a sink alone want none.
//!
//! Linux applies `setpriority(PRIO_PROCESS, tid, …)` to one thread. The
//! value is added to the nice the agent was started with (a service run at
//! nice 5 gets background threads at 15) and capped at 19.

use std::sync::atomic::{AtomicI32, Ordering};

/// How much nicer than the receive workers background threads run, unless
/// configured (`agent.background_nice`).
pub const DEFAULT_BACKGROUND_NICE: i32 = 10;

/// The highest nice value Linux has.
const MAX_NICE: i32 = 19;

static BACKGROUND_NICE: AtomicI32 = AtomicI32::new(0);

/// Sets how much nicer than the process background threads started from now
/// on run: 0 (no change) to 19.
pub fn set_background_nice(n: i32) {
    BACKGROUND_NICE.store(n.clamp(0, MAX_NICE), Ordering::Relaxed);
}

/// The value [`set_background_nice`] set, 0 until then.
pub fn background_nice() -> i32 {
    BACKGROUND_NICE.load(Ordering::Relaxed)
}

/// Lowers the calling thread's priority by [`background_nice`]. Called
/// first thing by every background thread; a failure only logs, since the
/// thread works the same at any priority.
pub fn enter_background() {
    let n = background_nice();
    if n == 0 {
        return;
    }
    // A thread whose nice cannot be read starts from 0.
    let target = (current_nice().unwrap_or(0) + n).min(MAX_NICE);
    if let Err(error) = crate::sys::set_thread_nice(target) {
        tracing::warn!(
            %error,
            nice = target,
            "cannot lower a background thread's priority"
        );
    }
}

/// The calling thread's nice value.
///
/// # Errors
///
/// When `getpriority` fails.
pub fn current_nice() -> std::io::Result<i32> {
    crate::sys::thread_nice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_thread_runs_nicer_than_its_parent_by_the_set_amount() {
        set_background_nice(7);
        let parent = current_nice().unwrap();
        let child = std::thread::spawn(|| {
            enter_background();
            current_nice().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(child, (parent + 7).min(MAX_NICE));
        // Only the calling thread changed.
        assert_eq!(current_nice().unwrap(), parent);
        set_background_nice(0);
    }
}
