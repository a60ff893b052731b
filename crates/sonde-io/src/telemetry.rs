//! The agent's own counters, exported on the admin listener's `/metrics`.
//!
//! Workers count into plain integers and publish to these atomics once per
//! batch, so the hot path pays one `fetch_add` per batch, not per point.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sonde_aggregate::SeriesCount;

use crate::drops::DropLabel;
use crate::sender::FailReason;

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

/// Why a sink let points go without delivering them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkDrop {
    /// The sink's window queue was full when the flusher handed it a window.
    QueueFull,
    /// The sink's buffer (memory or disk) was full; the oldest went.
    BufferFull,
    /// The backend refused the request for good (HTTP 4xx), or it could not
    /// be encoded.
    Rejected,
    /// The agent stopped with the request still in a memory buffer.
    Shutdown,
    /// The disk buffer could not write or read the request.
    BufferError,
}

impl SinkDrop {
    /// Every cause, indexable by `as usize`.
    pub const ALL: [SinkDrop; 5] = [
        SinkDrop::QueueFull,
        SinkDrop::BufferFull,
        SinkDrop::Rejected,
        SinkDrop::Shutdown,
        SinkDrop::BufferError,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkDrop::QueueFull => "queue_full",
            SinkDrop::BufferFull => "buffer_full",
            SinkDrop::Rejected => "rejected",
            SinkDrop::Shutdown => "shutdown",
            SinkDrop::BufferError => "buffer_error",
        }
    }
}

const FAIL_REASONS: usize = FailReason::ALL.len();
const SINK_DROPS: usize = SinkDrop::ALL.len();

/// Counters of one sink.
#[derive(Debug)]
pub struct SinkStats {
    /// The sink's name (`console`, `file:points.jsonl`, ...).
    pub name: String,
    /// Batches written (requests the backend accepted, for network sinks).
    pub batches: AtomicU64,
    /// Points written.
    pub points: AtomicU64,
    /// Write errors of the local sinks (console, file).
    pub errors: AtomicU64,
    /// Batches dropped, by [`SinkDrop`].
    pub dropped_batches: [AtomicU64; SINK_DROPS],
    /// Points dropped, by [`SinkDrop`].
    pub dropped_points: [AtomicU64; SINK_DROPS],
    /// Bytes of accepted requests before compression.
    pub bytes_raw: AtomicU64,
    /// Bytes of accepted requests as sent.
    pub bytes_sent: AtomicU64,
    /// Attempts that failed and were tried again.
    pub retries: AtomicU64,
    /// Failed attempts, by [`FailReason`].
    pub failures: [AtomicU64; FAIL_REASONS],
    /// Requests waiting in the buffer (a gauge).
    pub queue_batches: AtomicU64,
    /// Bytes waiting in the buffer (a gauge).
    pub queue_bytes: AtomicU64,
    /// Disk buffer segments found torn or corrupt at start and skipped.
    pub corrupt_segments: AtomicU64,
}

impl SinkStats {
    /// Zeroed counters for a sink.
    pub fn new(name: String) -> Self {
        SinkStats {
            name,
            batches: AtomicU64::new(0),
            points: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            dropped_batches: std::array::from_fn(|_| AtomicU64::new(0)),
            dropped_points: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes_raw: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            failures: std::array::from_fn(|_| AtomicU64::new(0)),
            queue_batches: AtomicU64::new(0),
            queue_bytes: AtomicU64::new(0),
            corrupt_segments: AtomicU64::new(0),
        }
    }

    /// Counts `batches` batches holding `points` points dropped for `why`.
    pub fn count_drop(&self, why: SinkDrop, batches: u64, points: u64) {
        if batches > 0 {
            self.dropped_batches[why as usize].fetch_add(batches, Relaxed);
        }
        if points > 0 {
            self.dropped_points[why as usize].fetch_add(points, Relaxed);
        }
    }

    /// Points dropped for `why` so far.
    pub fn dropped(&self, why: SinkDrop) -> u64 {
        self.dropped_points[why as usize].load(Relaxed)
    }
}

/// Counters of the flusher.
#[derive(Debug, Default)]
pub struct FlushStats {
    /// Windows flushed.
    pub flushes: AtomicU64,
    /// Live series after the last flush.
    pub series: AtomicU64,
    /// Series expired for idleness.
    pub expired: AtomicU64,
    /// Points dropped because their value was not finite.
    pub non_finite: AtomicU64,
    /// Points produced.
    pub points: AtomicU64,
    /// Duration of the last flush, in nanoseconds.
    pub last_duration_ns: AtomicU64,
    /// Worker shards that arrived after their window was flushed (their data
    /// went into the next window).
    pub late_shards: AtomicU64,
}

/// Everything `/metrics` shows.
#[derive(Debug, Default)]
pub struct Telemetry {
    /// One per running receiver; a config reload adds and removes some.
    pub receivers: Mutex<Vec<Arc<ReceiverStats>>>,
    /// One per running sink; a config reload adds and removes some.
    pub sinks: Mutex<Vec<Arc<SinkStats>>>,
    /// The flusher's counters.
    pub flush: Arc<FlushStats>,
    /// Live series of the receive workers, which `agent.max_series` limits.
    pub worker_series: Arc<SeriesCount>,
    /// `agent.max_series`.
    pub max_series: usize,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Telemetry {
    /// Renders every counter in the Prometheus text format.
    pub fn render(&self) -> String {
        let receivers = self
            .receivers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut o = String::new();
        let family = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        let recv = |o: &mut String, f: &dyn Fn(&ReceiverStats) -> u64, name: &str| {
            for r in &receivers {
                let _ = writeln!(
                    o,
                    "{name}{{receiver=\"{}\",protocol=\"{}\"}} {}",
                    escape(&r.listen),
                    r.protocol,
                    f(r)
                );
            }
        };
        family(
            &mut o,
            "sonde_receiver_datagrams_total",
            "counter",
            "Datagrams, packets or stream reads received.",
        );
        recv(
            &mut o,
            &|r| r.datagrams.load(Relaxed),
            "sonde_receiver_datagrams_total",
        );
        family(
            &mut o,
            "sonde_receiver_bytes_total",
            "counter",
            "Bytes received.",
        );
        recv(
            &mut o,
            &|r| r.bytes.load(Relaxed),
            "sonde_receiver_bytes_total",
        );
        family(
            &mut o,
            "sonde_receiver_points_total",
            "counter",
            "Points parsed and aggregated.",
        );
        recv(
            &mut o,
            &|r| r.points.load(Relaxed),
            "sonde_receiver_points_total",
        );
        family(
            &mut o,
            "sonde_receiver_connections_total",
            "counter",
            "Stream and seqpacket connections accepted.",
        );
        recv(
            &mut o,
            &|r| r.connections.load(Relaxed),
            "sonde_receiver_connections_total",
        );
        family(
            &mut o,
            "sonde_receiver_connections_refused_total",
            "counter",
            "Stream connections closed at once: the receiver had as many open as it takes.",
        );
        recv(
            &mut o,
            &|r| r.connections_refused.load(Relaxed),
            "sonde_receiver_connections_refused_total",
        );
        family(
            &mut o,
            "sonde_receiver_kernel_dropped_total",
            "counter",
            "Datagrams the kernel dropped because the receiver's socket queue was full (SO_RXQ_OVFL; seen when the next datagram arrives).",
        );
        recv(
            &mut o,
            &|r| r.kernel_drops.load(Relaxed),
            "sonde_receiver_kernel_dropped_total",
        );
        family(
            &mut o,
            "sonde_receiver_receive_buffer_bytes",
            "gauge",
            "Receive buffer the kernel granted per socket (datagram receivers).",
        );
        recv(
            &mut o,
            &|r| r.receive_buffer.load(Relaxed),
            "sonde_receiver_receive_buffer_bytes",
        );
        family(
            &mut o,
            "sonde_receiver_dropped_total",
            "counter",
            "Messages, lines or points dropped, by reason.",
        );
        for r in &receivers {
            for reason in DropLabel::ALL {
                let _ = writeln!(
                    o,
                    "sonde_receiver_dropped_total{{receiver=\"{}\",protocol=\"{}\",reason=\"{}\"}} {}",
                    escape(&r.listen),
                    r.protocol,
                    reason.as_str(),
                    r.dropped(reason)
                );
            }
        }
        let f = &self.flush;
        for (name, kind, help, v) in [
            (
                "sonde_series",
                "gauge",
                "Live series.",
                f.series.load(Relaxed),
            ),
            (
                "sonde_worker_series",
                "gauge",
                "Live series held by the receive workers (a series two workers receive counts twice); agent.max_series limits it.",
                self.worker_series.get() as u64,
            ),
            (
                "sonde_max_series",
                "gauge",
                "agent.max_series: beyond it, points for new series are dropped with reason series_limit.",
                self.max_series as u64,
            ),
            (
                "sonde_flushes_total",
                "counter",
                "Windows flushed.",
                f.flushes.load(Relaxed),
            ),
            (
                "sonde_flush_points_total",
                "counter",
                "Points produced by flushes.",
                f.points.load(Relaxed),
            ),
            (
                "sonde_series_expired_total",
                "counter",
                "Series expired after idle windows.",
                f.expired.load(Relaxed),
            ),
            (
                "sonde_non_finite_dropped_total",
                "counter",
                "Output points dropped for a non-finite value.",
                f.non_finite.load(Relaxed),
            ),
            (
                "sonde_late_shards_total",
                "counter",
                "Worker shards merged into the window after the one they belonged to.",
                f.late_shards.load(Relaxed),
            ),
        ] {
            family(&mut o, name, kind, help);
            let _ = writeln!(o, "{name} {v}");
        }
        for (name, field, help) in [
            (
                "sonde_host_udp_rcvbuf_errors_total",
                "RcvbufErrors",
                "UDP datagrams the kernel dropped host-wide for a full receive buffer (/proc/net/snmp Udp RcvbufErrors).",
            ),
            (
                "sonde_host_udp_in_errors_total",
                "InErrors",
                "UDP datagrams the kernel could not deliver host-wide (/proc/net/snmp Udp InErrors).",
            ),
        ] {
            if let Some(v) = udp_snmp(field) {
                family(&mut o, name, "counter", help);
                let _ = writeln!(o, "{name} {v}");
            }
        }
        family(
            &mut o,
            "sonde_flush_duration_seconds",
            "gauge",
            "Duration of the last flush.",
        );
        let _ = writeln!(
            o,
            "sonde_flush_duration_seconds {}",
            f.last_duration_ns.load(Relaxed) as f64 / 1e9
        );
        for (name, help, get) in [
            (
                "sonde_sink_batches_total",
                "Batches written by a sink.",
                (|s: &SinkStats| s.batches.load(Relaxed)) as fn(&SinkStats) -> u64,
            ),
            (
                "sonde_sink_points_total",
                "Points written by a sink.",
                |s| s.points.load(Relaxed),
            ),
            ("sonde_sink_errors_total", "Write errors of a sink.", |s| {
                s.errors.load(Relaxed)
            }),
        ] {
            family(&mut o, name, "counter", help);
            for s in &sinks {
                let _ = writeln!(o, "{name}{{sink=\"{}\"}} {}", escape(&s.name), get(s));
            }
        }
        for (name, kind, help, get) in [
            (
                "sonde_sink_bytes_total",
                "counter",
                "Bytes of accepted requests before compression.",
                (|s: &SinkStats| s.bytes_raw.load(Relaxed)) as fn(&SinkStats) -> u64,
            ),
            (
                "sonde_sink_sent_bytes_total",
                "counter",
                "Bytes of accepted requests as sent (after compression).",
                |s| s.bytes_sent.load(Relaxed),
            ),
            (
                "sonde_sink_retries_total",
                "counter",
                "Failed attempts that were tried again.",
                |s| s.retries.load(Relaxed),
            ),
            (
                "sonde_sink_queue_batches",
                "gauge",
                "Requests waiting in the sink's buffer.",
                |s| s.queue_batches.load(Relaxed),
            ),
            (
                "sonde_sink_queue_bytes",
                "gauge",
                "Bytes waiting in the sink's buffer.",
                |s| s.queue_bytes.load(Relaxed),
            ),
            (
                "sonde_sink_corrupt_segments_total",
                "counter",
                "Disk buffer segments found torn or corrupt at start; their tails were skipped.",
                |s| s.corrupt_segments.load(Relaxed),
            ),
        ] {
            family(&mut o, name, kind, help);
            for s in &sinks {
                let _ = writeln!(o, "{name}{{sink=\"{}\"}} {}", escape(&s.name), get(s));
            }
        }
        family(
            &mut o,
            "sonde_sink_failures_total",
            "counter",
            "Failed delivery attempts, by reason.",
        );
        for s in &sinks {
            for r in FailReason::ALL {
                let _ = writeln!(
                    o,
                    "sonde_sink_failures_total{{sink=\"{}\",reason=\"{}\"}} {}",
                    escape(&s.name),
                    r.as_str(),
                    s.failures[r as usize].load(Relaxed)
                );
            }
        }
        for (name, help, arr) in [
            (
                "sonde_sink_dropped_batches_total",
                "Batches a sink let go undelivered, by reason.",
                (|s: &SinkStats| &s.dropped_batches) as fn(&SinkStats) -> &[AtomicU64; SINK_DROPS],
            ),
            (
                "sonde_sink_dropped_points_total",
                "Points a sink let go undelivered, by reason.",
                |s| &s.dropped_points,
            ),
        ] {
            family(&mut o, name, "counter", help);
            for s in &sinks {
                for d in SinkDrop::ALL {
                    let _ = writeln!(
                        o,
                        "{name}{{sink=\"{}\",reason=\"{}\"}} {}",
                        escape(&s.name),
                        d.as_str(),
                        arr(s)[d as usize].load(Relaxed)
                    );
                }
            }
        }
        o
    }
}

/// One field of the `Udp:` lines of `/proc/net/snmp` (a header line of
/// names, then a line of values), or `None` where there is no such file.
fn udp_snmp(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    parse_snmp(&text, "Udp:", field)
}

fn parse_snmp(text: &str, proto: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(proto));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_fields_are_found_by_name() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\nUdp: 10 2 7 9 5\nUdpLite: InDatagrams\nUdpLite: 0\n";
        assert_eq!(parse_snmp(text, "Udp:", "RcvbufErrors"), Some(5));
        assert_eq!(parse_snmp(text, "Udp:", "InErrors"), Some(7));
        assert_eq!(parse_snmp(text, "Udp:", "Nope"), None);
    }

    #[test]
    fn published_counts_show_up_by_receiver_and_reason() {
        let stats = Arc::new(ReceiverStats::new("udp://127.0.0.1:1".into(), "statsd"));
        let mut local = LocalCounts {
            points: 5,
            ..LocalCounts::default()
        };
        local.drops[DropLabel::BadValue as usize] = 2;
        local.publish(&stats);
        assert_eq!(local.points, 0);
        let t = Telemetry {
            receivers: Mutex::new(vec![stats]),
            ..Telemetry::default()
        };
        let text = t.render();
        assert!(text.contains(
            "sonde_receiver_points_total{receiver=\"udp://127.0.0.1:1\",protocol=\"statsd\"} 5\n"
        ));
        assert!(text.contains("reason=\"bad_value\"} 2\n"));
    }
}
