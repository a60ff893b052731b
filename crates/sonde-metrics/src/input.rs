//! Inputs that make their points themselves rather than parse a socket's
//! bytes: the host's own metrics, scraped Prometheus endpoints, OTLP
//! requests. Each fills a [`Points`] batch (owned names, tags and values)
//! and sends it through a [`PointsSender`] to a worker thread of its own
//! ([`spawn_worker`]), which records it into its shard through the same
//! [`Ingest`] stage as a receiver's points: the same series limits, drop
//! counters, tap and window hand-off to the flusher.
//!
//! The channel is bounded: an input that makes points faster than its
//! worker records them finds it full ([`TrySendError::Full`]) and says so
//! to its own client (an OTLP request answered 429), or waits
//! ([`PointsSender::send`]) where it has no client to tell.
//!
//! # Waking
//!
//! The worker sleeps ([`std::thread::park`]) while its channel is empty,
//! and three things wake it: a batch (each send unparks it), the flusher
//! after each window boundary and at shutdown ([`Control::wake_inputs`]),
//! and the last sender dropped (the input is gone). An idle input so costs
//! one wake-up per window rather than one per
//! [`crate::receiver::ingest::WAKE_INTERVAL`]; with `[host_metrics]` at
//! 10 s that polling was most of the input's CPU (docs/BENCHMARKS.md,
//! "Host metrics"). Park and unpark keep a token, so a wake that comes
//! between the worker's last look and its park is not lost: the park
//! returns at once.

use std::io;
use std::sync::mpsc::{sync_channel, SendError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};

pub use crate::points::{tags_text, write_tag, Points, Shared};
#[cfg(doc)]
use crate::receiver::Control;
use crate::receiver::Ingest;

/// The sending end of an input worker's channel: a [`SyncSender`] that
/// wakes the worker after each batch and when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct PointsSender {
    // Declared before `wake`, so that it is dropped first: the worker,
    // woken by the drop, then finds the channel disconnected.
    tx: SyncSender<Points>,
    wake: Wake,
    spare: Spare,
}

/// Batches the worker has recorded, emptied, for the input to fill again:
/// a batch's memory is reused rather than freed by one thread and taken
/// fresh from the system (page faults) by the other. At most
/// [`SPARE_BATCHES`], each of at most [`SPARE_BYTES`].
type Spare = Arc<Mutex<Vec<Points>>>;

/// The most emptied batches kept for reuse.
pub const SPARE_BATCHES: usize = 2;

/// The most memory a batch kept for reuse may hold.
pub const SPARE_BYTES: usize = 1 << 20;

/// Unparks the worker's thread when dropped.
#[derive(Clone, Debug)]
struct Wake(Thread);

impl Drop for Wake {
    fn drop(&mut self) {
        self.0.unpark();
    }
}

impl PointsSender {
    /// Sends to `tx`, whose receiving end is read by `worker`: the thread
    /// unparked after each batch and when the sender is dropped.
    pub fn new(tx: SyncSender<Points>, worker: Thread) -> PointsSender {
        PointsSender {
            tx,
            wake: Wake(worker),
            spare: Spare::default(),
        }
    }

    /// An empty batch to fill: one the worker recorded and gave back when
    /// there is one, with its memory, else a new one.
    pub fn batch(&self) -> Points {
        self.spare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// Sends a batch, waiting while the channel is full.
    ///
    /// # Errors
    ///
    /// The batch back when the worker has ended (the agent is stopping).
    pub fn send(&self, points: Points) -> Result<(), SendError<Points>> {
        self.tx.send(points)?;
        self.wake.0.unpark();
        Ok(())
    }

    /// Sends a batch if the channel has room.
    ///
    /// # Errors
    ///
    /// The batch back when the channel is full or the worker has ended.
    pub fn try_send(&self, points: Points) -> Result<(), TrySendError<Points>> {
        self.tx.try_send(points)?;
        self.wake.0.unpark();
        Ok(())
    }
}

/// Starts the worker thread `name` that records every batch sent to the
/// returned sender (at most `capacity` waiting) into `ingest`'s shard,
/// and hands its windows to the flusher as a receiver's worker does. The
/// thread ends once the agent stops (after handing over its last window)
/// or once every clone of the sender is dropped (the input was removed by
/// a reload: its open window goes to the flusher first).
///
/// # Errors
///
/// When the thread cannot be spawned.
pub fn spawn_worker(
    name: String,
    mut ingest: Ingest,
    capacity: usize,
) -> io::Result<(PointsSender, JoinHandle<()>)> {
    let (tx, rx) = sync_channel::<Points>(capacity.max(1));
    let spare = Spare::default();
    let given_back = Arc::clone(&spare);
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let control = Arc::clone(ingest.control());
        let me = std::thread::current();
        // Registered before the first look at the epoch: a bump before
        // this is seen by that look, a bump after it unparks the thread.
        control.add_input(me.clone());
        loop {
            if !ingest.end_batch() {
                break;
            }
            match rx.try_recv() {
                Ok(mut points) => {
                    ingest.record(&points);
                    if points.memory() <= SPARE_BYTES {
                        points.clear();
                        let mut spare = given_back.lock().unwrap_or_else(|e| e.into_inner());
                        if spare.len() < SPARE_BATCHES {
                            spare.push(points);
                        }
                    }
                }
                // Until a batch, a window boundary, a shutdown or the
                // input's end; a spurious wake-up only looks again.
                Err(TryRecvError::Empty) => std::thread::park(),
                Err(TryRecvError::Disconnected) => {
                    ingest.retire_now();
                    ingest.end_batch();
                    break;
                }
            }
        }
        control.remove_input(me.id());
    })?;
    let mut tx = PointsSender::new(tx, thread.thread().clone());
    tx.spare = spare;
    Ok((tx, thread))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_proto::Kind;

    #[test]
    fn a_worker_records_each_batch_and_hands_its_window_to_the_flusher() {
        use crate::receiver::{Control, ReceiverStats};
        use sonde_aggregate::{AggregateConfig, Aggregator, Batch};
        use std::sync::atomic::Ordering;
        use std::sync::Arc;

        let config = Arc::new(AggregateConfig::default());
        let control = Arc::new(Control::default());
        let stats = Arc::new(ReceiverStats::new("host_metrics".into(), "host_metrics"));
        let (handoff, windows) = sync_channel(4);
        let ingest = Ingest::new(
            crate::receiver::Protocol::Statsd,
            Arc::clone(&stats),
            Arc::clone(&config),
            Arc::clone(&control),
            handoff,
        );
        let (tx, thread) = spawn_worker("input test".into(), ingest, 2).unwrap();
        for v in [2.0, 3.0] {
            let mut b = Points::new();
            b.push(Kind::Count, "disk.writes", [("device", "vda")], v);
            tx.send(b).unwrap();
        }
        // The worker takes both batches before it looks at the epoch
        // again: wait until it counted them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stats.points.load(Ordering::Relaxed) < 2 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // The batches recorded come back empty, with their memory, for
        // the input to fill again.
        let reused = loop {
            let b = tx.batch();
            if b.memory() > 0 {
                break b;
            }
            assert!(std::time::Instant::now() < deadline, "no batch given back");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert!(reused.is_empty());
        control.epoch.fetch_add(1, Ordering::AcqRel);
        control.wake_inputs();
        let h = windows
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        assert!(!h.last);
        let mut agg = Aggregator::new(config);
        agg.absorb_window(h.window);
        let mut out = Batch::new(1_763_800_200);
        agg.flush(1_763_800_200, 10.0, &mut out);
        let got: Vec<String> = out
            .points()
            .map(|p| {
                let tags: Vec<String> = p.series.tags().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{} {} {}", p.name(), tags.join(","), p.value)
            })
            .collect();
        assert_eq!(got, ["disk.writes device=vda 5"]);
        // The input gone: the worker hands over its open window and ends.
        drop(tx);
        let h = windows
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        assert!(h.last);
        thread.join().unwrap();
    }

    /// The input worker's stage, over `control` and `handoff`.
    fn ingest(
        config: &std::sync::Arc<sonde_aggregate::AggregateConfig>,
        control: &std::sync::Arc<crate::receiver::Control>,
        handoff: SyncSender<crate::receiver::Handoff>,
    ) -> (Ingest, std::sync::Arc<crate::receiver::ReceiverStats>) {
        use std::sync::Arc;
        let stats = Arc::new(crate::receiver::ReceiverStats::new(
            "host_metrics".into(),
            "host_metrics",
        ));
        let ingest = Ingest::new(
            crate::receiver::Protocol::Statsd,
            Arc::clone(&stats),
            Arc::clone(config),
            Arc::clone(control),
            handoff,
        );
        (ingest, stats)
    }

    /// The voluntary context switches of this process's thread `comm`, and
    /// whether it is asleep, from `/proc/self/task/*/`; `None` until the
    /// thread has its name.
    fn switches(comm: &str) -> Option<(u64, bool)> {
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let path = task.path();
            if std::fs::read_to_string(path.join("comm")).ok()?.trim_end() != comm {
                continue;
            }
            let status = std::fs::read_to_string(path.join("status")).ok()?;
            let field = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .map(str::trim)
                    .map(str::to_owned)
            };
            let n = field("voluntary_ctxt_switches:")?.parse().ok()?;
            let asleep = field("State:")?.starts_with('S');
            return Some((n, asleep));
        }
        None
    }

    #[test]
    fn an_idle_worker_sleeps_until_woken_then_hands_over_its_window_and_at_shutdown_its_last() {
        use crate::flusher::COLLECT_DEADLINE;
        use crate::receiver::Control;
        use sonde_aggregate::AggregateConfig;
        use std::sync::atomic::Ordering;
        use std::time::{Duration, Instant};

        let config = Arc::new(AggregateConfig::default());
        let control = Arc::new(Control::default());
        let (handoff, windows) = sync_channel(4);
        let (ingest, _) = ingest(&config, &control, handoff);
        let (tx, thread) = spawn_worker("idle-input".into(), ingest, 2).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let before = loop {
            match switches("idle-input") {
                Some((n, true)) => break n,
                _ => assert!(Instant::now() < deadline, "the worker never went to sleep"),
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // Five read timeouts' worth of idleness: a worker polling every
        // WAKE_INTERVAL would have woken five times.
        std::thread::sleep(5 * crate::receiver::ingest::WAKE_INTERVAL);
        let (after, _) = switches("idle-input").unwrap();
        assert!(
            after - before <= 1,
            "{} wake-ups while idle",
            after - before
        );

        // A window boundary: the flusher bumps the epoch and wakes inputs.
        control.epoch.fetch_add(1, Ordering::AcqRel);
        control.wake_inputs();
        let h = windows.recv_timeout(COLLECT_DEADLINE).unwrap();
        assert_eq!((h.epoch, h.last), (0, false));

        // Shutdown: the flag first, then the bump; the worker hands over
        // the window of epoch 1 as one of the shards waited for, and ends.
        control.shutdown.store(true, Ordering::Release);
        control.epoch.fetch_add(1, Ordering::AcqRel);
        control.wake_inputs();
        let h = windows.recv_timeout(COLLECT_DEADLINE).unwrap();
        assert_eq!((h.epoch, h.last), (1, false));
        let deadline = Instant::now() + COLLECT_DEADLINE;
        while !thread.is_finished() {
            assert!(Instant::now() < deadline, "the worker did not end");
            std::thread::sleep(Duration::from_millis(5));
        }
        thread.join().unwrap();
        assert!(tx.send(Points::new()).is_err());
        assert!(control.inputs_is_empty());
    }

    /// A sink that passes each window on to the test.
    #[derive(Debug)]
    struct Windows(std::sync::Mutex<std::sync::mpsc::Sender<Arc<sonde_aggregate::Batch>>>);

    impl crate::flusher::Output for Windows {
        fn name(&self) -> &str {
            "test"
        }
        fn send(&self, batch: Arc<sonde_aggregate::Batch>) {
            let _ = self.0.lock().unwrap().send(batch);
        }
    }

    #[test]
    fn the_flusher_gets_an_idle_inputs_windows_on_time_and_its_last_at_once_at_shutdown() {
        use crate::flusher::COLLECT_DEADLINE;
        use crate::flusher::{command_channel, FlushStats, Flusher, FlusherCommand};
        use crate::receiver::Control;
        use sonde_aggregate::{AggregateConfig, Batch};
        use std::sync::atomic::Ordering;
        use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

        let config = Arc::new(AggregateConfig {
            interval: Duration::from_secs(1),
            ..AggregateConfig::default()
        });
        let control = Arc::new(Control::default());
        let (handoff, shards) = sync_channel(16);
        let (ingest, stats) = ingest(&config, &control, handoff);
        let (tx, worker) = spawn_worker("input test".into(), ingest, 2).unwrap();
        let (out_tx, out) = std::sync::mpsc::channel();
        let (commands_tx, commands) = command_channel();
        let flush_stats = Arc::new(FlushStats::default());
        let flusher = Flusher {
            config: Arc::clone(&config),
            control: Arc::clone(&control),
            shards,
            commands,
            sinks: vec![Box::new(Windows(std::sync::Mutex::new(out_tx)))],
            stats: Arc::clone(&flush_stats),
            receiving_since: SystemTime::now(),
        };
        let flusher = std::thread::spawn(move || flusher.run());
        let holds = |b: &Batch, v: &str| {
            b.points()
                .any(|p| format!("{} {}", p.name(), p.value) == format!("disk.writes {v}"))
        };
        let send = |v: f64| {
            let mut b = Points::new();
            b.push(Kind::Count, "disk.writes", [("device", "vda")], v);
            tx.send(b).unwrap();
        };

        send(1.0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !holds(&out.recv_timeout(Duration::from_secs(10)).unwrap(), "1") {
            assert!(Instant::now() < deadline, "the point never came");
        }
        // Idle windows: each flushed well before the flusher would give up
        // waiting for the worker (COLLECT_DEADLINE after the boundary).
        for _ in 0..3 {
            let b = out.recv_timeout(Duration::from_secs(10)).unwrap();
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            let end = Duration::from_secs(u64::try_from(b.window_start).unwrap() + 1);
            let late = now.saturating_sub(end);
            assert!(
                late < COLLECT_DEADLINE / 2,
                "flushed {late:?} after the boundary"
            );
        }
        assert_eq!(flush_stats.late_shards.load(Ordering::Relaxed), 0);

        // A point, then a shutdown: the last window holds it, at once.
        send(2.0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while stats.points.load(Ordering::Relaxed) < 2 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        let asked = Instant::now();
        commands_tx.send(FlusherCommand::Shutdown).unwrap();
        let deadline = asked + COLLECT_DEADLINE / 2;
        while !flusher.is_finished() || !worker.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the shutdown waited for the worker"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        flusher.join().unwrap();
        worker.join().unwrap();
        assert!(out.try_iter().any(|b| holds(&b, "2")));
        assert_eq!(flush_stats.late_shards.load(Ordering::Relaxed), 0);
    }
}
