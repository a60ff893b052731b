//! The per-worker pipeline stage: parse a datagram, record its points into
//! the worker's shard, count what happened.
//!
//! # Window hand-off
//!
//! The flusher announces a closed window by bumping [`Control::epoch`],
//! then wakes the input workers ([`Control::wake_inputs`]). Every worker
//! checks the epoch after each batch, closes its shard's open [`Window`]
//! (the series themselves stay with the worker) and sends it to the
//! flusher, which sends it back for reuse after the flush. That is the
//! only cross-thread traffic of the hot path: one atomic load per batch and
//! one message per window.
//!
//! An idle worker notices the bump in one of two ways. A socket receiver's
//! worker wakes at least every [`WAKE_INTERVAL`] from its read timeout,
//! which costs nothing on the hot path (the read is made anyway). An input
//! worker ([`crate::input`]) sleeps until a batch comes or the flusher
//! unparks it: an input sends a batch every few seconds at most (a host
//! metrics collection every 10 s), so polling every 100 ms would be most
//! of its cost (docs/BENCHMARKS.md, "Host metrics").
//!
//! # Clean shutdown
//!
//! The flusher sets [`Control::shutdown`] *before* it bumps the epoch and
//! wakes the input workers, so a worker that sees the new epoch also sees
//! the shutdown, hands over its last shard and exits. No worker exits
//! without handing over what it received.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::{Thread, ThreadId};
use std::time::{Duration, Instant};

use sonde_aggregate::shard::{PointBatch, Window};
use sonde_aggregate::{AggregateConfig, RecordError, SeriesCount, Shard};
use sonde_proto::statsd::event;
use sonde_proto::{msgpack, statsd, DropReason, Point, PointSink};

use crate::receiver::{LocalCounts, ReceiverStats};
use sonde_log_sources::events::EventQueue;
use sonde_runtime::drops::DropLabel;
use sonde_runtime::tap::Tap;

/// How often an idle socket receiver's worker wakes up to check for a
/// window boundary (input workers are woken instead: [`Control::wake_inputs`]).
pub const WAKE_INTERVAL: Duration = sonde_runtime::socket::READ_TIMEOUT;

/// The shortest time between two log lines of one receiver about points
/// dropped by a series limit: a flood of new series must not flood the log.
pub const LIMIT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The wire protocol a receiver speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// metricserver2 msgpack.
    Msgpack,
    /// StatsD / DogStatsD text.
    Statsd,
    /// OTLP requests, decoded by their own input into points
    /// ([`Ingest::record`]): no bytes to parse here.
    Otlp,
}

impl Protocol {
    /// `msgpack` or `statsd`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Msgpack => "msgpack",
            Protocol::Statsd => "statsd",
            Protocol::Otlp => "otlp",
        }
    }
}

/// State shared by the flusher and every worker.
#[derive(Debug, Default)]
pub struct Control {
    /// Incremented by the flusher when a window closes.
    pub epoch: AtomicU64,
    /// Set by the flusher before its last epoch bump.
    pub shutdown: AtomicBool,
    /// Live series of every worker's shard, for `agent.max_series`.
    pub series: Arc<SeriesCount>,
    /// Workers: each [`Ingest`] counts itself in when created, and the
    /// flusher counts a worker out when it gets its last window (a reload
    /// removed its receiver). The flusher waits for this many shards per
    /// window; a worker stopping at shutdown still counts, so that its final
    /// shard is waited for.
    pub workers: AtomicUsize,
    /// The threads of the running input workers ([`crate::input`]), which
    /// sleep until a batch comes: [`Control::wake_inputs`] unparks them.
    inputs: Mutex<Vec<Thread>>,
}

impl Control {
    /// Wakes every input worker, so that it looks at the epoch and the
    /// shutdown flag: the flusher calls it after each bump of
    /// [`Control::epoch`]. One unpark per input per window; a worker busy
    /// with a batch finds the token when it next parks and looks again.
    pub fn wake_inputs(&self) {
        for t in self.inputs.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            t.unpark();
        }
    }

    /// Registers an input worker's thread for [`Control::wake_inputs`].
    pub(crate) fn add_input(&self, thread: Thread) {
        self.inputs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(thread);
    }

    /// True when no input worker is registered.
    #[cfg(test)]
    pub(crate) fn inputs_is_empty(&self) -> bool {
        self.inputs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Forgets an input worker's thread that is ending.
    pub(crate) fn remove_input(&self, id: ThreadId) {
        self.inputs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|t| t.id() != id);
    }
}

/// A worker's closed window, on its way to the flusher.
#[derive(Debug)]
pub struct Handoff {
    /// The epoch the window's data belongs to.
    pub epoch: u64,
    /// The data.
    pub window: Window,
    /// Where the flusher returns the window for reuse.
    pub give_back: Sender<Window>,
    /// The worker's last window: its receiver was removed by a config
    /// reload, so it hands over the open window early and exits. It is not
    /// one of the shards the flusher waits for.
    pub last: bool,
}

/// Parses and aggregates for one worker.
#[derive(Debug)]
pub struct Ingest {
    protocol: Protocol,
    shard: Shard,
    counts: LocalCounts,
    stats: Arc<ReceiverStats>,
    control: Arc<Control>,
    epoch: u64,
    handoff: SyncSender<Handoff>,
    give_back: Sender<Window>,
    recycled: Receiver<Window>,
    limited: LimitSample,
    /// The last `SO_RXQ_OVFL` count of this worker's socket.
    kernel_drops: u32,
    /// Set when a config reload removes this worker's receiver.
    retire: Arc<AtomicBool>,
    /// Where DogStatsD events and service checks go, when a sink takes
    /// them.
    events: Option<EventQueue>,
    /// Who watches the points (`sonde tap`, `sonde top`).
    tap: Arc<Tap>,
}

/// Points dropped by a series limit since this worker last logged, and the
/// metric name of the first of them.
#[derive(Debug)]
struct LimitSample {
    pending: u64,
    /// Empty until a point is dropped; its capacity is kept, so sampling a
    /// name allocates only when a longer name than before comes along.
    name: Vec<u8>,
    /// This worker does not look at the clock before then.
    next_check: Instant,
}

struct Recorder<'s, 'd> {
    shard: &'s mut Shard,
    counts: &'s mut LocalCounts,
    limited: &'s mut LimitSample,
    /// Points of this input waiting to be looked up together.
    pending: PointBatch<'d>,
    events: Option<&'s EventQueue>,
}

impl<'s, 'd> Recorder<'s, 'd> {
    fn new(
        shard: &'s mut Shard,
        counts: &'s mut LocalCounts,
        limited: &'s mut LimitSample,
        events: Option<&'s EventQueue>,
    ) -> Self {
        Recorder {
            shard,
            counts,
            limited,
            pending: PointBatch::default(),
            events,
        }
    }

    /// Records the pending points; called when the batch is full and once
    /// the input is parsed.
    fn flush(&mut self) {
        let Recorder {
            shard,
            counts,
            limited,
            pending,
            ..
        } = self;
        let points = pending.points();
        shard.record_batch(points, |i, result| match result {
            Ok(()) => counts.points += 1,
            Err(reason) => {
                counts.drops[DropLabel::from(reason) as usize] += 1;
                if matches!(
                    reason,
                    RecordError::SeriesLimit | RecordError::MetricSeriesLimit
                ) {
                    if limited.pending == 0 {
                        limited.name.clear();
                        limited.name.extend_from_slice(points[i].name);
                    }
                    limited.pending += 1;
                }
            }
        });
        pending.clear();
    }
}

impl<'d> PointSink<'d> for Recorder<'_, 'd> {
    fn point(&mut self, point: &Point<'d>) {
        if self.pending.push(*point) {
            self.flush();
        }
    }

    fn drop(&mut self, reason: DropReason) {
        self.counts.drops[DropLabel::from(reason) as usize] += 1;
    }

    #[cold]
    fn event(&mut self, line: &'d [u8]) {
        let label = match self.events {
            Some(queue) => match queue.push(line) {
                Ok(()) => return,
                Err(label) => label,
            },
            None => DropLabel::from(event::unrouted(line)),
        };
        self.counts.drops[label as usize] += 1;
    }
}

impl Ingest {
    /// A worker stage that hands its shards to `handoff`.
    pub fn new(
        protocol: Protocol,
        stats: Arc<ReceiverStats>,
        config: Arc<AggregateConfig>,
        control: Arc<Control>,
        handoff: SyncSender<Handoff>,
    ) -> Ingest {
        let (give_back, recycled) = std::sync::mpsc::channel();
        control.workers.fetch_add(1, Ordering::AcqRel);
        Ingest {
            protocol,
            shard: Shard::with_count(config, Arc::clone(&control.series)),
            counts: LocalCounts::default(),
            stats,
            epoch: control.epoch.load(Ordering::Acquire),
            control,
            handoff,
            give_back,
            recycled,
            limited: LimitSample {
                pending: 0,
                name: Vec::new(),
                next_check: Instant::now(),
            },
            kernel_drops: 0,
            retire: Arc::default(),
            events: None,
            tap: Arc::default(),
        }
    }

    /// Makes the worker queue the DogStatsD events and service checks it
    /// parses into `queue` rather than count them as dropped.
    pub fn events_to(mut self, queue: Option<EventQueue>) -> Ingest {
        self.events = queue;
        self
    }

    /// Shows the points the worker parses to the sessions of `tap`.
    pub fn tap_to(mut self, tap: Arc<Tap>) -> Ingest {
        self.tap = tap;
        self
    }

    /// True once a config reload has removed this worker's receiver.
    pub fn retiring(&self) -> bool {
        self.retire.load(Ordering::Acquire)
    }

    /// Makes the worker hand over its open window and exit once `retire`
    /// is set (a config reload removed its receiver).
    pub fn retire_on(mut self, retire: Arc<AtomicBool>) -> Ingest {
        self.retire = retire;
        self
    }

    /// Takes the socket's cumulative kernel drop count (`SO_RXQ_OVFL`) and
    /// adds what is new to the receiver's counter. Each worker has its own
    /// socket, hence its own count.
    pub fn kernel_drops(&mut self, total: u32) {
        let new = total.wrapping_sub(self.kernel_drops);
        if new != 0 {
            self.kernel_drops = total;
            self.stats
                .kernel_drops
                .fetch_add(u64::from(new), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Parses one datagram (or packet, or run of complete lines).
    pub fn datagram(&mut self, data: &[u8]) {
        self.counts.datagrams += 1;
        self.bytes(data);
    }

    /// Parses bytes without counting a datagram (stream chunks).
    pub fn bytes(&mut self, data: &[u8]) {
        self.counts.bytes += data.len() as u64;
        let mut rec = Recorder::new(
            &mut self.shard,
            &mut self.counts,
            &mut self.limited,
            self.events.as_ref(),
        );
        match self.protocol {
            Protocol::Msgpack => msgpack::parse(data, &mut rec),
            Protocol::Statsd => statsd::parse(data, &mut rec),
            Protocol::Otlp => {}
        }
        rec.flush();
        // One relaxed load per datagram while nobody watches.
        if self.tap.watching() {
            self.tap(data);
        }
    }

    /// Parses `data` again for the tap's sessions.
    #[cold]
    fn tap(&self, data: &[u8]) {
        if let Some(mut sink) = self.tap.points(&self.stats.listen, self.stats.protocol) {
            match self.protocol {
                Protocol::Msgpack => msgpack::parse(data, &mut sink),
                Protocol::Statsd => statsd::parse(data, &mut sink),
                Protocol::Otlp => {}
            }
            sink.finish();
        }
    }

    /// Records the points an input made itself ([`crate::input`]): the
    /// same series limits and counters as parsed points, shown to the tap.
    pub fn record(&mut self, points: &crate::points::Points) {
        self.counts.datagrams += 1;
        let mut rec = Recorder::new(
            &mut self.shard,
            &mut self.counts,
            &mut self.limited,
            self.events.as_ref(),
        );
        points.each(|p| rec.point(p));
        rec.flush();
        if self.tap.watching() {
            if let Some(mut sink) = self.tap.points(&self.stats.listen, self.stats.protocol) {
                points.each(|p| sink.point(p));
                sink.finish();
            }
        }
    }

    /// Makes the worker hand over its open window at its next
    /// [`Ingest::end_batch`] and exit: its input is gone.
    pub fn retire_now(&mut self) {
        self.retire.store(true, Ordering::Release);
    }

    /// Counts a drop found by the receiver itself (an oversized datagram).
    pub fn drop(&mut self, reason: DropReason) {
        self.counts.drops[DropLabel::from(reason) as usize] += 1;
    }

    /// Counts a stream read without parsing it yet.
    pub fn count_read(&mut self) {
        self.counts.datagrams += 1;
    }

    /// Publishes counts and hands the shard over if the window closed.
    /// Returns `false` when the worker must exit.
    pub fn end_batch(&mut self) -> bool {
        self.counts.publish(&self.stats);
        if self.limited.pending != 0 {
            self.log_limited();
        }
        let epoch = self.control.epoch.load(Ordering::Acquire);
        if self.retire.load(Ordering::Acquire) {
            // The open window's data goes to the flusher now, with the
            // window it belongs to.
            let window = self.shard.take_window(None);
            let _ = self.handoff.send(Handoff {
                epoch: self.epoch,
                window,
                give_back: self.give_back.clone(),
                last: true,
            });
            return false;
        }
        if epoch == self.epoch {
            return true;
        }
        // Read with the epoch, before the hand-off: the flag set before
        // this bump is the shutdown this window ends. One set after it (the
        // flusher may get this window and a shutdown command before this
        // thread runs on) closes the next window, which the flusher waits
        // for: exiting on it would leave the flusher waiting in vain until
        // COLLECT_DEADLINE.
        let stopping = self.control.shutdown.load(Ordering::Acquire);
        let window = self.shard.take_window(self.recycled.try_recv().ok());
        let sent = self.handoff.send(Handoff {
            epoch: self.epoch,
            window,
            give_back: self.give_back.clone(),
            last: false,
        });
        self.epoch = epoch;
        // The flusher gone means the agent is stopping.
        sent.is_ok() && !stopping
    }

    /// Logs points dropped by a series limit, at most once per
    /// [`LIMIT_LOG_INTERVAL`] per receiver (its workers share the slot), with
    /// the receiver's count since its last line and one metric name.
    #[cold]
    fn log_limited(&mut self) {
        let now = Instant::now();
        if now < self.limited.next_check {
            return;
        }
        self.limited.next_check = now + LIMIT_LOG_INTERVAL;
        if let Some(dropped) = self.stats.claim_limit_log(now, LIMIT_LOG_INTERVAL) {
            tracing::warn!(
                receiver = %self.stats.listen,
                dropped,
                metric = %String::from_utf8_lossy(&self.limited.name),
                live_series = self.control.series.get(),
                "points for new series dropped: agent.max_series or agent.max_series_per_metric reached (the series already live keep their data); one metric name sampled"
            );
        }
        self.limited.pending = 0;
    }

    /// What the worker shares with the flusher.
    pub(crate) fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// The receiver's counters.
    pub fn stats(&self) -> &Arc<ReceiverStats> {
        &self.stats
    }
}
