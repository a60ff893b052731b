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
//! profiler never waits. A period with no samples goes nowhere. A sink
//! that records how far its disk buffer got ([`Output::queued_through`])
//! is first sent, from a thread of its own, the stored periods after
//! that: the periods a kill caught between the store and the sink.
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

    /// Queues `profile`, waiting for room: for the stored periods sent
    /// again at a start. False once the sink has stopped.
    fn send_wait(&self, profile: Arc<Profile>) -> bool;

    /// The start (Unix seconds) of the newest period the sink had queued
    /// where its next start finds it (a disk buffer), as it recorded in
    /// an earlier run: the profiler sends it every stored period that
    /// starts after it, from a thread of its own, before the new ones.
    /// `None` for a sink that keeps no such record.
    fn queued_through(&self) -> Option<u64> {
        None
    }
}

/// The most periods held back for a sink while its backlog is sent; more
/// go to the sink at once, out of order.
const HELD_MAX: usize = 64;

/// The stored period that starts at `start_s`, or `None` (said) when it
/// cannot be read.
fn read_period(store: &Store, start_s: u64, sink: &str) -> Option<Profile> {
    match store.read(start_s, start_s + 1) {
        Ok((p, _)) => Some(p),
        Err(e) => {
            tracing::warn!(sink = %sink, error = %e, "cannot read a stored period; it is not sent");
            None
        }
    }
}

/// The stored periods a sink has not queued, sent to it from a thread of
/// their own at the start, oldest first, and the new periods held back
/// meanwhile so that the sink gets every period in order.
#[derive(Debug)]
struct Backlog {
    /// The periods that came while the backlog was sent; `None` once it
    /// is sent and they went after it.
    held: std::sync::Mutex<Option<Vec<Arc<Profile>>>>,
}

impl Backlog {
    /// Starts sending `output` the periods of `store` after `through_s`,
    /// those from `current_s` on read at once (a period this run will
    /// merge its own into: the sink gets what an earlier run stored of it,
    /// and this run's part as it comes). `None` when there are none.
    fn start(
        output: &Arc<dyn Output>,
        store: &Store,
        through_s: u64,
        current_s: u64,
    ) -> Option<Arc<Backlog>> {
        let starts: Vec<u64> = match store.list() {
            Ok(entries) => entries
                .iter()
                .map(|e| e.start_s)
                .filter(|&s| s > through_s)
                .collect(),
            Err(e) => {
                tracing::warn!(sink = %output.name(), error = %e, "cannot list the profile store; the periods the sink had not queued are not sent");
                return None;
            }
        };
        let (first, last) = (*starts.first()?, *starts.last()?);
        tracing::info!(
            sink = %output.name(),
            periods = starts.len(),
            first = first,
            last = last,
            "sending the stored periods this sink had not queued"
        );
        let mut early: Vec<(u64, Option<Profile>)> = Vec::new();
        for &s in starts.iter().filter(|&&s| s >= current_s) {
            early.push((s, read_period(store, s, output.name())));
        }
        let backlog = Arc::new(Backlog {
            held: std::sync::Mutex::new(Some(Vec::new())),
        });
        let (b, output, store) = (Arc::clone(&backlog), Arc::clone(output), store.clone());
        let spawned = std::thread::Builder::new()
            .name("profile backlog".into())
            .spawn(move || {
                sonde_runtime::priority::enter_background();
                for s in starts {
                    let profile = match early.iter_mut().find(|(e, _)| *e == s) {
                        Some((_, p)) => p.take(),
                        None => read_period(&store, s, output.name()),
                    };
                    if let Some(p) = profile.filter(|p| !p.stacks.is_empty()) {
                        if !output.send_wait(Arc::new(p)) {
                            return;
                        }
                    }
                }
                let mut held = b.held.lock().unwrap_or_else(|e| e.into_inner());
                for p in held.take().unwrap_or_default() {
                    if !output.send_wait(p) {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the thread that sends stored periods; they are not sent");
            return None;
        }
        Some(backlog)
    }

    /// Holds `profile` back while the backlog is being sent; gives it
    /// back once the backlog is sent (or too much is held).
    fn hold(&self, profile: Arc<Profile>) -> Option<Arc<Profile>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.as_mut() {
            Some(h) if h.len() < HELD_MAX => {
                h.push(profile);
                None
            }
            _ => Some(profile),
        }
    }
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
    let backlogs: Vec<Option<Arc<Backlog>>> = settings
        .outputs
        .iter()
        .map(|o| {
            let through = o.queued_through()?;
            Backlog::start(o, &settings.store, through, period_start / 1_000_000_000)
        })
        .collect();
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
                for (o, backlog) in settings.outputs.iter().zip(&backlogs) {
                    let p = Arc::clone(&profile);
                    match backlog {
                        Some(b) => {
                            if let Some(p) = b.hold(p) {
                                o.send(p);
                            }
                        }
                        None => o.send(p),
                    }
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
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::sync::Mutex;

    /// A sink that records the periods it gets (start, samples), each
    /// `send_wait` waiting for a permit.
    #[derive(Debug)]
    struct Recorder {
        got: Mutex<Vec<(u64, u64)>>,
        permits: Mutex<Receiver<()>>,
    }

    impl Recorder {
        fn take(&self, p: &Profile) {
            let n = p.stacks.iter().map(|s| s.count).sum();
            self.got
                .lock()
                .unwrap()
                .push((p.start_ns / 1_000_000_000, n));
        }
    }

    impl Output for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }
        fn send(&self, profile: Arc<Profile>) {
            self.take(&profile);
        }
        fn send_wait(&self, profile: Arc<Profile>) -> bool {
            self.permits.lock().unwrap().recv().unwrap();
            self.take(&profile);
            true
        }
    }

    fn period(start_s: u64, samples: u64) -> Profile {
        let mut b = sonde_profile::ProfileBuilder::new(19, start_s * 1_000_000_000, 1_000_000_000);
        let p = sonde_profile::model::Process {
            pid: 1,
            name: "p".into(),
            tid: 1,
            thread: "t".into(),
            host: String::new(),
            container: String::new(),
            pod: String::new(),
        };
        let f = sonde_profile::model::Function {
            name: "main".into(),
            module: "/bin/p".into(),
        };
        b.add(&p, [&f], samples);
        b.finish()
    }

    #[test]
    fn a_sink_gets_the_stored_periods_it_had_not_queued_then_the_new_ones_in_order() {
        let data = tempfile::tempdir().unwrap();
        let store = Store::reader(data.path());
        for s in 100..=105 {
            store.write(&period(s, s)).unwrap();
        }
        let (permit, permits): (Sender<()>, _) = channel();
        let rec = Arc::new(Recorder {
            got: Mutex::default(),
            permits: Mutex::new(permits),
        });
        let output: Arc<dyn Output> = rec.clone();
        // The sink had queued through 102; this run samples 105, which an
        // earlier run stored part of.
        let backlog = Backlog::start(&output, &store, 102, 105).unwrap();
        // This run's part of 105 merges into the file: the sink gets the
        // earlier part from the backlog, this run's part as it comes.
        store.write(&period(105, 1)).unwrap();
        // A new period while the backlog waits on the sink is held back.
        assert!(backlog.hold(Arc::new(period(105, 1))).is_none());
        assert!(backlog.hold(Arc::new(period(106, 106))).is_none());
        for _ in 0..5 {
            permit.send(()).unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while rec.got.lock().unwrap().len() < 5 {
            assert!(std::time::Instant::now() < deadline, "{:?}", rec.got);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            *rec.got.lock().unwrap(),
            [(103, 103), (104, 104), (105, 105), (105, 1), (106, 106)]
        );
        // Sent: the next goes straight to the sink.
        let next = backlog.hold(Arc::new(period(107, 107))).unwrap();
        assert_eq!(next.start_ns, 107_000_000_000);
        // Nothing after the cursor: no backlog at all.
        assert!(Backlog::start(&output, &store, 105, 106).is_none());
    }

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
