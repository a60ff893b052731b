//! A running profiler: the events, the collector and the symbol cache,
//! driven by one thread.
//!
//! The owner calls [`Profiler::poll`] in a loop (it waits for a ring to
//! fill a quarter or for its timeout, then drains every ring) and
//! [`Profiler::take`] whenever it wants the profile of the period since
//! the last take.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::collect::{Collector, ProcessKey, Stats};
use crate::model::Profile;
use crate::perf::{Events, OpenError};
use crate::symbolize::{CacheStats, Symbols};

/// The highest sampling frequency accepted: above it the rings and the
/// unwinding cost grow past what an always-on profiler should spend.
pub const MAX_FREQUENCY: u32 = 1000;

/// How often the pages of the files that unwinding read are given back
/// (see [`crate::module::Module::release_pages`]). Every second, a debug
/// build's profiler with 1 s periods fell behind on a host running
/// builds (the `madvise` of every module and the faults after it), and
/// the store test timed out; the build figures in docs/BENCHMARKS.md
/// were measured with 1 s.
const RELEASE_PAGES_EVERY: Duration = Duration::from_secs(10);

/// What a profiler holds between periods (see [`Profiler::footprint`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Processes in the process table.
    pub processes: usize,
    /// Executable files held open and mapped.
    pub modules: usize,
    /// Frames with a cached name.
    pub names: usize,
}

/// Samples every CPU and keeps the stacks of the current period.
pub struct Profiler {
    events: Events,
    collector: Collector,
    symbols: Symbols,
    frequency: u32,
    host: String,
    period_start: (SystemTime, Instant),
    pages_released: Instant,
}

impl Profiler {
    /// Opens the events at `frequency` Hz per CPU and starts sampling;
    /// the profiles name `host` as where they were taken.
    ///
    /// # Errors
    ///
    /// See [`Events::open`]; a frequency of 0 or above [`MAX_FREQUENCY`]
    /// is clamped into range.
    pub fn start(frequency: u32, host: &str) -> Result<Profiler, OpenError> {
        let frequency = frequency.clamp(1, MAX_FREQUENCY);
        let events = Events::open(frequency)?;
        events.enable();
        Ok(Profiler {
            events,
            collector: Collector::new(),
            symbols: Symbols::new(),
            frequency,
            host: host.to_owned(),
            period_start: (SystemTime::now(), Instant::now()),
            pages_released: Instant::now(),
        })
    }

    /// Samples per second per CPU.
    pub fn frequency(&self) -> u32 {
        self.frequency
    }

    /// Waits up to `timeout_ms` for data, then reads every ring.
    pub fn poll(&mut self, timeout_ms: i32) {
        self.events.wait(timeout_ms);
        self.drain();
        if self.pages_released.elapsed() >= RELEASE_PAGES_EVERY {
            self.collector.modules().release_pages();
            self.pages_released = Instant::now();
        }
    }

    fn drain(&mut self) {
        drain(&mut self.events, &mut self.collector);
    }

    /// Stops sampling and reads what the rings still hold.
    pub fn stop(&mut self) {
        self.events.disable();
        self.drain();
    }

    /// The profile of the period since the start or the last take, and
    /// the collection's counters for it; a new period starts.
    pub fn take(&mut self) -> (Profile, Stats) {
        self.take_where(|_| true)
    }

    /// As [`Profiler::take`], with only the processes `keep` accepts,
    /// whose frames alone are symbolised.
    pub fn take_where(&mut self, keep: impl Fn(&ProcessKey) -> bool) -> (Profile, Stats) {
        let now = (SystemTime::now(), Instant::now());
        let (mut stacks, stats) = self.collector.take();
        stacks.retain(|(p, _), _| keep(p));
        let start_ns = self
            .period_start
            .0
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let duration_ns = now.1.duration_since(self.period_start.1).as_nanos() as u64;
        self.period_start = now;
        // Symbolising reads each new module's symbols, which can outlast
        // what a ring holds at high frequencies: the rings are drained
        // between modules, into the next period, while a snapshot of the
        // module table names this one's frames.
        let modules = self.collector.modules().clone();
        let (events, collector) = (&mut self.events, &mut self.collector);
        let mut profile = self.symbols.profile_between(
            &modules,
            &stacks,
            self.frequency,
            start_ns,
            duration_ns,
            &mut || drain(events, collector),
        );
        drop(modules);
        // One host for every process keeps them distinct.
        for p in &mut profile.processes {
            p.host.clone_from(&self.host);
        }
        // What the period no longer needs: processes gone, modules no
        // process maps, and their cached names.
        let dropped = self.collector.prune();
        self.symbols.forget(&dropped);
        (profile, stats)
    }

    /// What the profiler holds between periods, which stays bounded by
    /// what the host runs now.
    pub fn footprint(&self) -> Footprint {
        Footprint {
            processes: self.collector.processes(),
            modules: self.collector.modules().len(),
            names: self.symbols.len(),
        }
    }

    /// The symbol cache's hits and misses since the start.
    pub fn symbol_cache(&self) -> CacheStats {
        self.symbols.stats()
    }
}

/// Reads every ring into the collector, counting what the kernel lost.
fn drain(events: &mut Events, collector: &mut Collector) {
    let lost_before = events.lost();
    events.drain(|r| collector.record(r));
    collector.add_lost(events.lost() - lost_before);
}
