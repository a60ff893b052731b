//! The per-worker pipeline stage: parse a datagram, record its points into
//! the worker's shard, count what happened.
//!
//! # Window hand-off
//!
//! The flusher announces a closed window by bumping [`Control::epoch`].
//! Every worker checks the epoch after each batch (and at least every
//! [`WAKE_INTERVAL`] when idle), closes its shard's open [`Window`] (the
//! series themselves stay with the worker) and sends it to the flusher,
//! which sends it back for reuse after the flush. That is the only
//! cross-thread traffic of the hot path: one atomic load per batch and one
//! message per window.
//!
//! # Clean shutdown
//!
//! The flusher sets [`Control::shutdown`] *before* it bumps the epoch, so a
//! worker that sees the new epoch also sees the shutdown, hands over its last
//! shard and exits. No worker exits without handing over what it received.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use sonde_aggregate::shard::Window;
use sonde_aggregate::{AggregateConfig, Shard};
use sonde_proto::{msgpack, statsd, DropReason, Point, PointSink};

use crate::telemetry::{LocalCounts, ReceiverStats};

/// How often an idle worker wakes up to check for a window boundary.
pub const WAKE_INTERVAL: Duration = Duration::from_millis(100);

/// The wire protocol a receiver speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// metricserver2 msgpack.
    Msgpack,
    /// StatsD / DogStatsD text.
    Statsd,
}

impl Protocol {
    /// `msgpack` or `statsd`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Msgpack => "msgpack",
            Protocol::Statsd => "statsd",
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
}

struct Recorder<'a> {
    shard: &'a mut Shard,
    counts: &'a mut LocalCounts,
}

impl PointSink for Recorder<'_> {
    fn point(&mut self, point: &Point<'_>) {
        match self.shard.record(point) {
            Ok(()) => self.counts.points += 1,
            Err(reason) => self.counts.drops[reason as usize] += 1,
        }
    }

    fn drop(&mut self, reason: DropReason) {
        self.counts.drops[reason as usize] += 1;
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
        Ingest {
            protocol,
            shard: Shard::new(config),
            counts: LocalCounts::default(),
            stats,
            epoch: control.epoch.load(Ordering::Acquire),
            control,
            handoff,
            give_back,
            recycled,
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
        let mut rec = Recorder {
            shard: &mut self.shard,
            counts: &mut self.counts,
        };
        match self.protocol {
            Protocol::Msgpack => msgpack::parse(data, &mut rec),
            Protocol::Statsd => statsd::parse(data, &mut rec),
        }
    }

    /// Counts a drop found by the receiver itself (an oversized datagram).
    pub fn drop(&mut self, reason: DropReason) {
        self.counts.drops[reason as usize] += 1;
    }

    /// Counts a stream read without parsing it yet.
    pub fn count_read(&mut self) {
        self.counts.datagrams += 1;
    }

    /// Publishes counts and hands the shard over if the window closed.
    /// Returns `false` when the worker must exit.
    pub fn end_batch(&mut self) -> bool {
        self.counts.publish(&self.stats);
        let epoch = self.control.epoch.load(Ordering::Acquire);
        if epoch == self.epoch {
            return true;
        }
        let window = self.shard.take_window(self.recycled.try_recv().ok());
        let sent = self.handoff.send(Handoff {
            epoch: self.epoch,
            window,
            give_back: self.give_back.clone(),
        });
        self.epoch = epoch;
        // The flusher gone means the agent is stopping.
        sent.is_ok() && !self.control.shutdown.load(Ordering::Acquire)
    }

    /// The receiver's counters.
    pub fn stats(&self) -> &Arc<ReceiverStats> {
        &self.stats
    }
}
