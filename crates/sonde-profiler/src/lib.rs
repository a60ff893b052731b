//! The profiles runtime: the agent's always-on profiler, one background thread that samples
//! every CPU and writes each period's profile (a minute by default,
//! aligned to the wall clock) into the store under `data_dir`.
//!
//! # Lifecycle
//!
//! [`spawn`] returns once the perf events are open, so a host
//! without perf-event permission is known at start and the caller logs it
//! once and goes on without a profiler. The thread then waits on the
//! rings (a ring wakes it once a quarter full, or a period ends), drains
//! them, and at each period's end symbolises and writes the period. On
//! stop it writes the partial period and exits.
//!
//! # Sinks
//!
//! Each period's profile, once stored, also goes to every [`Output`] of
//! [`Settings::outputs`] (the sinks whose `inputs` name `"profiles"`),
//! shared, never copied, through each sink's bounded channel: a sink that
//! cannot keep up has the period dropped and counted on its side, and the
//! profiler never waits. A period with no samples goes nowhere.
//!
//! # A profile that cannot be written
//!
//! A period whose profile cannot be stored (a full, read-only or removed
//! `data_dir`) is lost: it is counted in
//! `sonde_profiler_write_errors_total` and
//! `sonde_data_dir_write_errors_total{what="profile"}`, said with the path
//! and a fix at most once a minute, and the thread samples the next period
//! as if nothing happened; the store keeps every profile written before
//! (see [`Store::write`]), and the first period that can be written again
//! is, with no restart. Lost periods are not kept in memory for later:
//! a profile is a sample of a minute, and holding them would make the
//! profiler's memory grow with the length of the outage.
//!
//! # Cost
//!
//! The thread runs at the background nice value. Its own CPU time is
//! counted in [`ProfilerStats::cpu_ns`] (`sonde_profiler_cpu_seconds_total`)
//! so the profiler's overhead is always visible; docs/BENCHMARKS.md, "The
//! profiler", has the figures.
#![deny(missing_docs)]

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sonde_profile::store::Store;
use sonde_profile::{OpenError, Profile, Profiler};

use sonde_runtime::data_dir::{DataDirErrors, What};

/// What the profiler thread needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Samples per second per CPU.
    pub frequency: u32,
    /// How long each stored profile covers; periods are aligned to
    /// multiples of it since the Unix epoch.
    pub period: Duration,
    /// Where the profiles go.
    pub store: Store,
    /// The host the profiles name (`agent.hostname`).
    pub host: String,
    /// Where a profile that cannot be written is counted and said.
    pub data_dir: Arc<DataDirErrors>,
    /// The sinks that take each period's profile.
    pub outputs: Vec<Arc<dyn Output>>,
}

/// Where the profiler sends each period's profile besides the store: a
/// sink's end of its channel.
pub trait Output: Send + Sync + std::fmt::Debug {
    /// The sink's name, as on `/metrics`.
    fn name(&self) -> &str;

    /// Queues `profile` without blocking; a full queue drops it and
    /// counts it.
    fn send(&self, profile: Arc<Profile>);
}

/// The profiler's counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ProfilerStats {
    /// 1 while the profiler runs.
    pub running: AtomicU64,
    /// Non-idle samples counted.
    pub samples: AtomicU64,
    /// Samples with a user stack.
    pub user_stacks: AtomicU64,
    /// User stacks unwound to their end.
    pub user_stacks_complete: AtomicU64,
    /// Records the kernel dropped because a ring was full.
    pub lost: AtomicU64,
    /// Frames named from the symbol cache.
    pub symbol_hits: AtomicU64,
    /// Frames that had to be looked up.
    pub symbol_misses: AtomicU64,
    /// Periods written to the store.
    pub periods: AtomicU64,
    /// Periods that could not be written (lost).
    pub write_errors: AtomicU64,
    /// Bytes the store holds after the last write.
    pub store_bytes: AtomicU64,
    /// Processes tracked after the last period.
    pub processes: AtomicU64,
    /// Executable files held open after the last period.
    pub modules: AtomicU64,
    /// Frames with a cached name after the last period.
    pub symbol_cache_entries: AtomicU64,
    /// CPU time of the profiler thread, nanoseconds.
    pub cpu_ns: AtomicU64,
    /// When the period being sampled ends, and its profile is stored,
    /// Unix nanoseconds; 0 while the profiler is off. The admin site
    /// tells a reader of an empty range how long until it fills.
    pub period_end_ns: AtomicU64,
    /// The length of a period, nanoseconds (0 while the profiler is off).
    pub period_ns: AtomicU64,
}

/// A running profiler thread.
pub struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Running {
    /// Writes the partial period and stops the thread.
    pub fn stop(self) {
        self.stop.store(true, Relaxed);
        let _ = self.thread.join();
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Starts sampling and the thread that stores each period.
///
/// # Errors
///
/// [`OpenError::NotPermitted`] without perf-event permission (its message
/// says what to change), or another failure to open the events.
pub fn spawn(settings: Settings, stats: Arc<ProfilerStats>) -> Result<Running, OpenError> {
    let stop = Arc::new(AtomicBool::new(false));
    // blazesym's symbolizer is not Send, so the profiler is built on its
    // own thread, which reports back whether the events opened.
    let (opened_tx, opened_rx) = std::sync::mpsc::sync_channel(1);
    let thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("profiler".into())
            .spawn(
                move || match Profiler::start(settings.frequency, &settings.host) {
                    Ok(profiler) => {
                        let _ = opened_tx.send(Ok(()));
                        run(profiler, &settings, &stats, &stop);
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                    }
                },
            )
            .map_err(|error| OpenError::Io { cpu: 0, error })?
    };
    match opened_rx.recv() {
        Ok(Ok(())) => Ok(Running { stop, thread }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err(OpenError::Io {
                cpu: 0,
                error: io::Error::other("the profiler thread ended before opening its events"),
            })
        }
    }
}

fn run(mut profiler: Profiler, settings: &Settings, stats: &ProfilerStats, stop: &AtomicBool) {
    sonde_runtime::priority::enter_background();
    stats.running.store(1, Relaxed);
    let period_ns = settings.period.as_nanos().max(1) as u64;
    let mut period_end = (now_ns() / period_ns + 1) * period_ns;
    // The first period starts now, not at its aligned start: it is
    // stored under the aligned start, as every later one.
    let mut period_start = period_end - period_ns;
    stats.period_ns.store(period_ns, Relaxed);
    stats.period_end_ns.store(period_end, Relaxed);
    loop {
        let stopping = stop.load(Relaxed);
        let now = now_ns();
        if now >= period_end || stopping {
            if stopping {
                profiler.stop();
            }
            let (mut profile, s) = profiler.take();
            profile.start_ns = period_start;
            stats.samples.fetch_add(s.samples, Relaxed);
            stats.user_stacks.fetch_add(s.user, Relaxed);
            stats
                .user_stacks_complete
                .fetch_add(s.user_complete, Relaxed);
            stats.lost.fetch_add(s.lost, Relaxed);
            let cache = profiler.symbol_cache();
            stats.symbol_hits.store(cache.hits, Relaxed);
            stats.symbol_misses.store(cache.misses, Relaxed);
            let held = profiler.footprint();
            stats.processes.store(held.processes as u64, Relaxed);
            stats.modules.store(held.modules as u64, Relaxed);
            stats.symbol_cache_entries.store(held.names as u64, Relaxed);
            store(settings, stats, &profile);
            if !profile.stacks.is_empty() && !settings.outputs.is_empty() {
                let profile = Arc::new(profile);
                for o in &settings.outputs {
                    o.send(Arc::clone(&profile));
                }
            }
            stats
                .cpu_ns
                .store(sonde_runtime::sys::thread_cpu_ns(), Relaxed);
            if stopping {
                break;
            }
            period_start = (now / period_ns) * period_ns;
            period_end = period_start + period_ns;
            stats.period_end_ns.store(period_end, Relaxed);
            continue;
        }
        // Wake at the period's end, to notice a stop within a second,
        // or when a ring is a quarter full.
        let wait_ms = ((period_end - now) / 1_000_000).clamp(1, 1000) as i32;
        profiler.poll(wait_ms);
        stats
            .cpu_ns
            .store(sonde_runtime::sys::thread_cpu_ns(), Relaxed);
    }
    stats.running.store(0, Relaxed);
    stats.period_end_ns.store(0, Relaxed);
}

/// Stores one period's profile, counting it as written or lost.
fn store(settings: &Settings, stats: &ProfilerStats, profile: &sonde_profile::Profile) {
    match settings.store.write(profile) {
        Ok(_) => {
            stats.periods.fetch_add(1, Relaxed);
            // A store that cannot be listed keeps the last size.
            if let Ok(files) = settings.store.list() {
                stats
                    .store_bytes
                    .store(files.iter().map(|e| e.bytes).sum(), Relaxed);
            }
        }
        Err(e) => {
            stats.write_errors.fetch_add(1, Relaxed);
            settings.data_dir.failed(What::Profile, &e.path, &e.error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_profile::store::Limits;

    #[test]
    fn a_period_that_cannot_be_stored_is_counted_lost_and_the_next_one_is_stored() {
        let data = tempfile::tempdir().unwrap();
        let dir = sonde_profile::store::dir(data.path());
        let settings = Settings {
            frequency: 19,
            period: Duration::from_secs(60),
            store: Store::new(
                dir.clone(),
                Limits {
                    retention_s: 3600,
                    max_bytes: u64::MAX,
                },
            ),
            host: "h".into(),
            data_dir: Arc::default(),
            outputs: Vec::new(),
        };
        let stats = ProfilerStats::default();
        let period = |start_s: u64| {
            sonde_profile::ProfileBuilder::new(19, start_s * 1_000_000_000, 60_000_000_000).finish()
        };
        // A file where the store's directory goes: nothing can be written
        // there, for root too.
        std::fs::write(&dir, "not a directory").unwrap();
        store(&settings, &stats, &period(1_000_000));
        store(&settings, &stats, &period(1_000_060));
        assert_eq!(stats.write_errors.load(Relaxed), 2);
        assert_eq!(settings.data_dir.count(What::Profile), 2);
        assert_eq!(stats.periods.load(Relaxed), 0);

        std::fs::remove_file(&dir).unwrap();
        store(&settings, &stats, &period(1_000_120));
        assert_eq!(stats.periods.load(Relaxed), 1);
        assert_eq!(stats.write_errors.load(Relaxed), 2);
        assert!(stats.store_bytes.load(Relaxed) > 0);
        assert_eq!(settings.store.list().unwrap().len(), 1);
    }
}
