//! The flusher: closes windows on wall-clock boundaries, merges the
//! workers' windows, and hands each window's points to every sink.
//!
//! # Windows
//!
//! Boundaries are multiples of the interval since the unix epoch (a 10 s
//! window closes at :00, :10, ...). A point's timestamp is its window's
//! start. At a boundary the flusher bumps the epoch and wakes the input
//! workers ([`Control::wake_inputs`]), waits for each worker's window up to
//! [`COLLECT_DEADLINE`] (a socket receiver's worker answers within
//! [`crate::receiver::ingest::WAKE_INTERVAL`], an input's worker at once),
//! merges and flushes, then sends every window back to its worker for
//! reuse. A window that arrives later is merged into the
//! next one rather than lost, and counted.
//!
//! # The first window after a start
//!
//! A restart inside a window splits it: the run that stopped flushed the
//! first part at shutdown, stamped with the window's start. Were the part
//! after the restart stamped the same way, a backend would get two
//! different values at one timestamp, and Prometheus refuses the second.
//! So the first window of a run is stamped with the time the agent started
//! receiving ([`Flusher::receiving_since`]), rounded up to the second while
//! that stays inside the window, and its rates divide by the time since
//! then. Both parts are delivered; every later window is aligned.
//!
//! # Clean shutdown
//!
//! [`FlusherCommand::Shutdown`] closes the open window early: its points get
//! the window's start as timestamp and rates divide by the time actually
//! elapsed. Then the flusher drops its sink queues, which lets each sink
//! write what it has and exit.

mod stats;

pub use stats::FlushStats;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sonde_aggregate::shard::Window;
use sonde_aggregate::{AggregateConfig, Aggregator, Batch};

use crate::receiver::{Control, Handoff};

/// Windows kept for a sink a config reload is starting, until it comes
/// ([`FlusherCommand::HoldFor`]): as many as a sink's own queue holds.
pub const QUEUE_BATCHES: usize = 8;

/// Where the flusher hands each window: the queue of one sink, which
/// never blocks (a full queue drops the window and counts it). The sinks
/// (`sonde-sinks`) implement it; one call per sink and window.
pub trait Output: Send + std::fmt::Debug {
    /// The sink's name, as `[[sinks]] name` gives it.
    fn name(&self) -> &str;
    /// Queues a window's points without blocking.
    fn send(&self, batch: Arc<Batch>);
}

/// How long the flusher waits for the workers' shards after a boundary.
pub const COLLECT_DEADLINE: Duration = Duration::from_secs(2);

/// Messages to the flusher from the rest of the agent.
#[derive(Debug)]
pub enum FlusherCommand {
    /// Flush the open window now and stop.
    Shutdown,
    /// A config reload removed these sinks (by name): stop handing them
    /// windows, which lets their threads drain and exit.
    RemoveSinks(Vec<String>),
    /// A config reload is starting these sinks: keep their windows (up to
    /// [`QUEUE_BATCHES`]) until [`FlusherCommand::AddSinks`]
    /// brings them, so that no window falls between an old and a new sink.
    HoldFor(Vec<String>),
    /// Sinks started by a config reload; each first gets what was held
    /// for its name.
    AddSinks(Vec<Box<dyn Output>>),
}

/// Unix time now, in nanoseconds.
fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// The start of the window containing `now_ns`, in nanoseconds.
pub fn window_start(now_ns: u128, interval: Duration) -> u128 {
    let i = interval.as_nanos().max(1);
    now_ns - now_ns % i
}

/// Everything the flusher thread owns.
#[derive(Debug)]
pub struct Flusher {
    /// Aggregation settings.
    pub config: Arc<AggregateConfig>,
    /// Shared with the workers.
    pub control: Arc<Control>,
    /// Worker shards arrive here.
    pub shards: Receiver<Handoff>,
    /// Commands from the main thread.
    pub commands: Receiver<FlusherCommand>,
    /// The sinks' queues.
    pub sinks: Vec<Box<dyn Output>>,
    /// Counters for `/metrics`.
    pub stats: Arc<FlushStats>,
    /// When the receivers were bound: the first window covers only the
    /// time since, and is stamped with it (see "The first window after a
    /// start" above).
    pub receiving_since: SystemTime,
}

impl Flusher {
    /// Runs until shutdown; returns after the final flush.
    pub fn run(self) {
        let Flusher {
            config,
            control,
            shards,
            commands,
            mut sinks,
            stats,
            receiving_since,
        } = self;
        // Windows kept for sinks a reload is starting.
        let mut held: HashMap<String, Vec<Arc<Batch>>> = HashMap::new();
        // Shards whose worker sent its last window, forgotten after the
        // flush that merges it.
        let mut retired: Vec<u32> = Vec::new();
        let interval = config.interval;
        let mut agg = Aggregator::new(Arc::clone(&config));
        // Where each shard's windows go back after a flush.
        let mut give_back: HashMap<u32, Sender<Window>> = HashMap::new();
        let mut epoch = control.epoch.load(Ordering::Acquire);
        let mut start = window_start(now_ns(), interval);
        let mut first = Some(since_epoch_ns(receiving_since));
        let mut last_sizes = (0, 0);
        loop {
            let end = start + interval.as_nanos();
            let mut stopping = false;
            // Sleep until the boundary, waking early only for a command.
            loop {
                let now = now_ns();
                if now >= end {
                    break;
                }
                let wait = Duration::from_nanos(u64::try_from(end - now).unwrap_or(u64::MAX));
                match commands.recv_timeout(wait) {
                    Ok(FlusherCommand::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                        stopping = true;
                        break;
                    }
                    Ok(FlusherCommand::RemoveSinks(names)) => {
                        sinks.retain(|s| !names.iter().any(|n| n == s.name()));
                        for n in &names {
                            held.remove(n);
                        }
                    }
                    Ok(FlusherCommand::HoldFor(names)) => {
                        for n in names {
                            held.entry(n).or_default();
                        }
                    }
                    Ok(FlusherCommand::AddSinks(added)) => {
                        for s in added {
                            for b in held.remove(s.name()).unwrap_or_default() {
                                s.send(b);
                            }
                            sinks.push(s);
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                }
            }
            let closed_at = now_ns().min(end);
            if stopping {
                control.shutdown.store(true, Ordering::Release);
            }
            let closing = epoch;
            epoch += 1;
            control.epoch.store(epoch, Ordering::Release);
            // Input workers sleep until woken; socket workers poll.
            control.wake_inputs();
            // Shards of a closed epoch. Earlier-epoch stragglers are merged too.
            let mut got = 0;
            let deadline = Instant::now() + COLLECT_DEADLINE;
            // The number of running workers can change under a reload, so
            // it is read again while waiting.
            while got < control.workers.load(Ordering::Acquire) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match shards.recv_timeout(left.min(Duration::from_millis(50))) {
                    Ok(h) => {
                        if h.last {
                            // A retired worker's final window, not one of
                            // the shards waited for.
                            control.workers.fetch_sub(1, Ordering::AcqRel);
                            retired.push(h.window.shard());
                        } else if h.epoch == closing {
                            got += 1;
                        } else {
                            stats.late_shards.fetch_add(1, Ordering::Relaxed);
                        }
                        absorb(&mut agg, &mut give_back, h);
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            // Shards from workers that missed an earlier deadline.
            while let Ok(h) = shards.try_recv() {
                if h.last {
                    control.workers.fetch_sub(1, Ordering::AcqRel);
                    retired.push(h.window.shard());
                } else {
                    stats.late_shards.fetch_add(1, Ordering::Relaxed);
                }
                absorb(&mut agg, &mut give_back, h);
            }
            let merged = Instant::now();
            let (from, stamp) = first_stamp(first.take(), start, end);
            let secs = ((closed_at.saturating_sub(from)) as f64 / 1e9).max(1e-3);
            // Sized from the last window with a sixteenth to spare: a
            // steady load never reallocates the batch while it is built.
            let mut batch = Batch::with_capacity(
                stamp,
                last_sizes.0 + last_sizes.0 / 16,
                last_sizes.1 + last_sizes.1 / 16,
            );
            let fs = agg.flush(batch.window_start, secs, &mut batch);
            for w in agg.take_done() {
                // The worker may be gone at shutdown; then the window is freed.
                if let Some(tx) = give_back.get(&w.shard()) {
                    let _ = tx.send(w);
                }
            }
            for shard in retired.drain(..) {
                agg.forget_shard(shard);
                give_back.remove(&shard);
            }
            stats.flushes.fetch_add(1, Ordering::Relaxed);
            stats.series.store(fs.series as u64, Ordering::Relaxed);
            stats
                .expired
                .fetch_add(fs.expired as u64, Ordering::Relaxed);
            stats
                .non_finite
                .fetch_add(fs.non_finite as u64, Ordering::Relaxed);
            if fs.mismatched > 0 {
                // The shard and the aggregator disagree about a series'
                // kind: a bug, whose windows are lost. Said, not hidden.
                tracing::error!(
                    series = fs.mismatched,
                    "series whose window value did not match their kind were not flushed (a bug: please report it)"
                );
            }
            stats
                .points
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            last_sizes = batch.sizes();
            let batch = Arc::new(batch);
            for sink in &sinks {
                sink.send(Arc::clone(&batch));
            }
            for h in held.values_mut() {
                if h.len() < QUEUE_BATCHES {
                    h.push(Arc::clone(&batch));
                }
            }
            // The flush itself, not the wait for worker shards.
            let spent = merged.elapsed();
            stats
                .last_duration_ns
                .store(spent.as_nanos() as u64, Ordering::Relaxed);
            if stopping {
                break;
            }
            start = next_start(end, now_ns(), interval, &stats);
        }
        drop(sinks);
    }
}

/// The start of the window after the one that ended at `end`: `end`
/// itself, unless whole windows passed since without the flusher running
/// (the agent stopped with SIGSTOP, the host suspended, the clock stepped
/// forward). Those are skipped rather than flushed one after another: no
/// point can belong to them, and what the sockets queued meanwhile is
/// read now, so it goes into the window of now, stamped after the gap,
/// rather than into windows of the past.
fn next_start(end: u128, now: u128, interval: Duration, stats: &FlushStats) -> u128 {
    let current = window_start(now, interval);
    if current <= end {
        return end;
    }
    let skipped = (current - end) / interval.as_nanos().max(1);
    stats
        .skipped_windows
        .fetch_add(skipped as u64, Ordering::Relaxed);
    tracing::warn!(
        skipped,
        seconds = (current - end) / 1_000_000_000,
        "the agent did not run for a while (stopped, suspended, or the clock jumped): windows skipped; what arrived meanwhile goes into the current window"
    );
    current
}

fn since_epoch_ns(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos()
}

/// Where the window `[start, end)` (nanoseconds) begins for rates, and its
/// timestamp in seconds. `since` is when the run started receiving, given
/// for the run's first window only: when it falls inside the window, the
/// window covers only the time since, and is stamped with that time rounded
/// up to the second, or down when rounding up would reach the next window.
/// Otherwise the window's start gives both.
fn first_stamp(since: Option<u128>, start: u128, end: u128) -> (u128, i64) {
    const SEC: u128 = 1_000_000_000;
    match since {
        Some(t) if t > start && t < end => {
            let up = t.div_ceil(SEC);
            let secs = if up * SEC < end { up } else { t / SEC };
            (t, secs as i64)
        }
        _ => (start, (start / SEC) as i64),
    }
}

fn absorb(agg: &mut Aggregator, give_back: &mut HashMap<u32, Sender<Window>>, h: Handoff) {
    let Handoff {
        window,
        give_back: tx,
        ..
    } = h;
    give_back.entry(window.shard()).or_insert(tx);
    agg.absorb_window(window);
}

/// A channel pair for the flusher's commands.
pub fn command_channel() -> (Sender<FlusherCommand>, Receiver<FlusherCommand>) {
    std::sync::mpsc::channel()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_align_to_multiples_of_the_interval() {
        let s = 1_000_000_000u128;
        assert_eq!(
            window_start(1_763_800_217 * s + 5, Duration::from_secs(10)),
            1_763_800_210 * s
        );
        assert_eq!(
            window_start(1_763_800_230 * s, Duration::from_secs(30)),
            1_763_800_230 * s
        );
        assert_eq!(window_start(59 * s, Duration::from_secs(60)), 0);
    }

    #[test]
    fn the_first_window_is_stamped_with_the_start_of_receiving() {
        let s = 1_000_000_000u128;
        let (start, end) = (1_800 * s, 1_830 * s);
        // Later windows, and a start before the window, keep the window's start.
        assert_eq!(first_stamp(None, start, end), (start, 1_800));
        assert_eq!(first_stamp(Some(start - 5), start, end), (start, 1_800));
        assert_eq!(first_stamp(Some(start), start, end), (start, 1_800));
        // A start inside the window: rounded up to the second, so a run
        // that began 0.3 s after the boundary does not share the stamp of
        // the window's first part.
        assert_eq!(first_stamp(Some(start + 3), start, end), (start + 3, 1_801));
        assert_eq!(
            first_stamp(Some(1_812 * s + 400), start, end),
            (1_812 * s + 400, 1_813)
        );
        assert_eq!(first_stamp(Some(1_812 * s), start, end), (1_812 * s, 1_812));
        // Rounding up would reach the next window's stamp: rounded down.
        assert_eq!(
            first_stamp(Some(1_829 * s + 1), start, end),
            (1_829 * s + 1, 1_829)
        );
    }
}
