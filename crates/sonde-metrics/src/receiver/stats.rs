//! A receiver's counters, shown on `/metrics` by the admin site's telemetry (`sonde-admin`).
//!
//! Workers count into plain integers ([`LocalCounts`]) and publish to the
//! atomics of [`ReceiverStats`] once per batch, so the hot path pays one
//! `fetch_add` per batch, not per point.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use sonde_runtime::drops::DropLabel;

const REASONS: usize = DropLabel::ALL.len();

/// Counters of one receiver.
#[derive(Debug)]
pub struct ReceiverStats {
    /// The listen address, as configured.
    pub listen: String,
    /// `msgpack` or `statsd`.
    pub protocol: &'static str,
    /// Datagrams (datagram sockets), packets (seqpacket) or read chunks (streams).
    pub datagrams: AtomicU64,
    /// Bytes received.
    pub bytes: AtomicU64,
    /// Points parsed and aggregated.
    pub points: AtomicU64,
    /// Messages, lines or points dropped, by [`DropLabel`].
    pub drops: [AtomicU64; REASONS],
    /// Connections accepted (stream and seqpacket receivers).
    pub connections: AtomicU64,
    /// Connections closed at once because the receiver already had
    /// `max_connections` open.
    pub connections_refused: AtomicU64,
    /// Datagrams the kernel dropped because the socket's queue was full
    /// (`SO_RXQ_OVFL`, summed over the receiver's sockets).
    pub kernel_drops: AtomicU64,
    /// The receive buffer the kernel granted per socket, in bytes.
    pub receive_buffer: AtomicU64,
    /// When the counters were made: the origin of `limit_logged_ms`.
    started: Instant,
    /// Milliseconds after `started` of the last series-limit log line, or
    /// `u64::MAX` before the first.
    limit_logged_ms: AtomicU64,
    /// Series-limit drops already reported in the log.
    limit_logged: AtomicU64,
}

impl ReceiverStats {
    /// Zeroed counters for a receiver.
    pub fn new(listen: String, protocol: &'static str) -> Self {
        ReceiverStats {
            listen,
            protocol,
            datagrams: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            points: AtomicU64::new(0),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
            connections: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            kernel_drops: AtomicU64::new(0),
            receive_buffer: AtomicU64::new(0),
            started: Instant::now(),
            limit_logged_ms: AtomicU64::new(u64::MAX),
            limit_logged: AtomicU64::new(0),
        }
    }

    /// Claims the receiver's series-limit log line for `now`, if the last
    /// one is at least `every` old. Returns the series-limit drops since the
    /// last line (published counts; a worker publishes before it asks).
    pub fn claim_limit_log(&self, now: Instant, every: Duration) -> Option<u64> {
        let ms = now.saturating_duration_since(self.started).as_millis() as u64;
        let last = self.limit_logged_ms.load(Relaxed);
        if last != u64::MAX && ms.saturating_sub(last) < every.as_millis() as u64 {
            return None;
        }
        self.limit_logged_ms
            .compare_exchange(last, ms, Relaxed, Relaxed)
            .ok()?;
        let total =
            self.dropped(DropLabel::SeriesLimit) + self.dropped(DropLabel::MetricSeriesLimit);
        Some(total - self.limit_logged.swap(total, Relaxed).min(total))
    }

    /// Total drops for one reason.
    pub fn dropped(&self, reason: DropLabel) -> u64 {
        self.drops[reason as usize].load(Relaxed)
    }
}

/// A worker's unpublished counts.
#[derive(Debug, Default)]
pub struct LocalCounts {
    /// See [`ReceiverStats::datagrams`].
    pub datagrams: u64,
    /// See [`ReceiverStats::bytes`].
    pub bytes: u64,
    /// See [`ReceiverStats::points`].
    pub points: u64,
    /// See [`ReceiverStats::drops`].
    pub drops: [u64; REASONS],
}

impl LocalCounts {
    /// Adds the counts to `stats` and zeroes them.
    pub fn publish(&mut self, stats: &ReceiverStats) {
        fn add(a: &AtomicU64, v: &mut u64) {
            if *v != 0 {
                a.fetch_add(*v, Relaxed);
                *v = 0;
            }
        }
        add(&stats.datagrams, &mut self.datagrams);
        add(&stats.bytes, &mut self.bytes);
        add(&stats.points, &mut self.points);
        for (a, v) in stats.drops.iter().zip(self.drops.iter_mut()) {
            add(a, v);
        }
    }
}
