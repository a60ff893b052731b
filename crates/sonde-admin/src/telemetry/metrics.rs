//! The table of every metric the admin listener's `/metrics` shows: name,
//! type, help and where its samples come from. The renderer
//! ([`super::Telemetry::render`]) walks it in order; adding a metric is
//! adding a row here and, if it counts something new, a counter to the
//! component's stats.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use sonde_log_sources::LogStats;
use sonde_metrics::flusher::FlushStats;
use sonde_metrics::receiver::ReceiverStats;
use sonde_profiler::ProfilerStats;
use sonde_sinks::sink::{SinkDrop, SinkStats};

use super::Telemetry;

/// A Prometheus metric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows (until the agent restarts); named `..._total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Kind {
    /// The word on the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One value of an unlabelled agent-wide metric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A count or a size.
    Int(u64),
    /// A quantity with a fraction, such as seconds.
    Float(f64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => v.fmt(f),
            Value::Float(v) => v.fmt(f),
        }
    }
}

/// Where a metric's samples come from, which also fixes its labels.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// One sample per receiver, labelled `receiver` and `protocol`.
    Receiver(fn(&ReceiverStats) -> u64),
    /// One sample per receiver and [`sonde_runtime::drops::DropLabel`], labelled
    /// `receiver`, `protocol` and `reason`.
    ReceiverDrops,
    /// One unlabelled sample for the whole agent.
    Agent(fn(&Telemetry) -> Value),
    /// One unlabelled host-wide sample: the named field of the `Udp:` lines
    /// of `/proc/net/snmp`. Where that cannot be read the metric is left
    /// out, `# HELP` and `# TYPE` included.
    HostUdp(&'static str),
    /// One sample per sink, labelled `sink`.
    Sink(fn(&SinkStats) -> u64),
    /// One sample per sink, labelled `sink`, a fraction.
    SinkFloat(fn(&SinkStats) -> f64),
    /// One sample per sink and [`sonde_sinks::sink::FailReason`], labelled `sink`
    /// and `reason`.
    SinkFailures,
    /// One sample per sink and [`SinkDrop`], labelled `sink` and `reason`:
    /// the counters indexed by the drop.
    SinkDrops(fn(&SinkStats) -> &[AtomicU64; SinkDrop::ALL.len()]),
    /// One sample per log source, labelled `source`.
    Log(fn(&LogStats) -> u64),
    /// One sample per writer under `data_dir`, labelled `what`.
    DataDir,
}

/// A metric's descriptor: one row of [`METRICS`].
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// The metric name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// The `# HELP` text.
    pub help: &'static str,
    /// Its samples.
    pub source: Source,
}

const fn counter(name: &'static str, help: &'static str, source: Source) -> Metric {
    Metric {
        name,
        kind: Kind::Counter,
        help,
        source,
    }
}

const fn gauge(name: &'static str, help: &'static str, source: Source) -> Metric {
    Metric {
        name,
        kind: Kind::Gauge,
        help,
        source,
    }
}

fn prof(t: &Telemetry, get: fn(&ProfilerStats) -> &AtomicU64) -> Value {
    Value::Int(get(&t.profiler).load(Relaxed))
}

fn flush(t: &Telemetry, get: fn(&FlushStats) -> &AtomicU64) -> Value {
    Value::Int(get(&t.flush).load(Relaxed))
}

/// Every metric of `/metrics`, in the order they are shown.
pub const METRICS: &[Metric] = &[
    // Receivers.
    counter(
        "sonde_receiver_datagrams_total",
        "Datagrams, packets or stream reads received.",
        Source::Receiver(|r| r.datagrams.load(Relaxed)),
    ),
    counter(
        "sonde_receiver_bytes_total",
        "Bytes received.",
        Source::Receiver(|r| r.bytes.load(Relaxed)),
    ),
    counter(
        "sonde_receiver_points_total",
        "Points parsed and aggregated.",
        Source::Receiver(|r| r.points.load(Relaxed)),
    ),
    counter(
        "sonde_receiver_connections_total",
        "Stream and seqpacket connections accepted.",
        Source::Receiver(|r| r.connections.load(Relaxed)),
    ),
    counter(
        "sonde_receiver_connections_refused_total",
        "Stream connections closed at once: the receiver had as many open as it takes.",
        Source::Receiver(|r| r.connections_refused.load(Relaxed)),
    ),
    counter(
        "sonde_receiver_kernel_dropped_total",
        "Datagrams the kernel dropped because the receiver's socket queue was full (SO_RXQ_OVFL; seen when the next datagram arrives).",
        Source::Receiver(|r| r.kernel_drops.load(Relaxed)),
    ),
    gauge(
        "sonde_receiver_receive_buffer_bytes",
        "Receive buffer the kernel granted per socket (datagram receivers).",
        Source::Receiver(|r| r.receive_buffer.load(Relaxed)),
    ),
    counter(
        "sonde_receiver_dropped_total",
        "Messages, lines or points dropped, by reason.",
        Source::ReceiverDrops,
    ),
    // The series and the flusher.
    gauge(
        "sonde_series",
        "Live series.",
        Source::Agent(|t| flush(t, |f| &f.series)),
    ),
    gauge(
        "sonde_worker_series",
        "Live series held by the receive workers (a series two workers receive counts twice); agent.max_series limits it.",
        Source::Agent(|t| Value::Int(t.worker_series.get() as u64)),
    ),
    gauge(
        "sonde_max_series",
        "agent.max_series: beyond it, points for new series are dropped with reason series_limit.",
        Source::Agent(|t| Value::Int(t.max_series as u64)),
    ),
    counter(
        "sonde_admin_unauthorized_total",
        "Admin site requests refused (401) for a missing or wrong token (agent.admin_auth).",
        Source::Agent(|t| Value::Int(t.admin_unauthorized.load(Relaxed))),
    ),
    counter(
        "sonde_admin_too_large_total",
        "Admin site requests refused for their size: a target over 8 KiB (414), a head over 16 KiB (431), a login form over 4 KiB (413).",
        Source::Agent(|t| Value::Int(t.admin_too_large.load(Relaxed))),
    ),
    counter(
        "sonde_admin_connections_refused_total",
        "Admin site connections answered 503 and closed because 64 were open.",
        Source::Agent(|t| Value::Int(t.admin_connections_refused.load(Relaxed))),
    ),
    counter(
        "sonde_data_dir_write_errors_total",
        "Writes under agent.data_dir that failed (a full or read-only disk, a removed directory), by writer: buffer, checkpoint, profile.",
        Source::DataDir,
    ),
    gauge(
        "sonde_admin_taps",
        "Taps open on the admin site (sonde tap, sonde top): while there are none, the data path does not look at what it carries for them.",
        Source::Agent(|t| Value::Int(t.tap.sessions() as u64)),
    ),
    counter(
        "sonde_admin_tls_handshake_failures_total",
        "Admin site connections closed because their TLS handshake failed or took over 10 s (agent.admin_tls): plain HTTP to the port, a client that does not trust the certificate.",
        Source::Agent(|t| Value::Int(t.admin_tls_handshake_failures.load(Relaxed))),
    ),
    counter(
        "sonde_flushes_total",
        "Windows flushed.",
        Source::Agent(|t| flush(t, |f| &f.flushes)),
    ),
    counter(
        "sonde_flush_points_total",
        "Points produced by flushes.",
        Source::Agent(|t| flush(t, |f| &f.points)),
    ),
    counter(
        "sonde_series_expired_total",
        "Series expired after idle windows.",
        Source::Agent(|t| flush(t, |f| &f.expired)),
    ),
    counter(
        "sonde_non_finite_dropped_total",
        "Output points dropped for a non-finite value.",
        Source::Agent(|t| flush(t, |f| &f.non_finite)),
    ),
    counter(
        "sonde_late_shards_total",
        "Worker shards merged into the window after the one they belonged to.",
        Source::Agent(|t| flush(t, |f| &f.late_shards)),
    ),
    counter(
        "sonde_skipped_windows_total",
        "Windows that passed while the agent did not run (stopped, suspended, or the clock stepped forward): skipped rather than flushed empty; what arrived meanwhile goes into the window after.",
        Source::Agent(|t| flush(t, |f| &f.skipped_windows)),
    ),
    // The host's UDP stack.
    counter(
        "sonde_host_udp_rcvbuf_errors_total",
        "UDP datagrams the kernel dropped host-wide for a full receive buffer (/proc/net/snmp Udp RcvbufErrors).",
        Source::HostUdp("RcvbufErrors"),
    ),
    counter(
        "sonde_host_udp_in_errors_total",
        "UDP datagrams the kernel could not deliver host-wide (/proc/net/snmp Udp InErrors).",
        Source::HostUdp("InErrors"),
    ),
    // The last flush.
    gauge(
        "sonde_flush_duration_seconds",
        "Duration of the last flush.",
        Source::Agent(|t| Value::Float(t.flush.last_duration_ns.load(Relaxed) as f64 / 1e9)),
    ),
    // Sinks.
    counter(
        "sonde_sink_batches_total",
        "Batches written by a sink.",
        Source::Sink(|s| s.batches.load(Relaxed)),
    ),
    counter(
        "sonde_sink_points_total",
        "Points written by a sink.",
        Source::Sink(|s| s.points.load(Relaxed)),
    ),
    counter(
        "sonde_sink_errors_total",
        "Write errors of a sink.",
        Source::Sink(|s| s.errors.load(Relaxed)),
    ),
    counter(
        "sonde_sink_bytes_total",
        "Bytes of accepted requests before compression.",
        Source::Sink(|s| s.bytes_raw.load(Relaxed)),
    ),
    counter(
        "sonde_sink_sent_bytes_total",
        "Bytes of accepted requests as sent (after compression).",
        Source::Sink(|s| s.bytes_sent.load(Relaxed)),
    ),
    counter(
        "sonde_sink_retries_total",
        "Failed attempts that were tried again.",
        Source::Sink(|s| s.retries.load(Relaxed)),
    ),
    counter(
        "sonde_sink_throttled_seconds_total",
        "Time a sink held its requests because the backend throttled it (a Kafka quota's throttle_time_ms).",
        Source::SinkFloat(|s| s.throttled_ms.load(Relaxed) as f64 / 1e3),
    ),
    counter(
        "sonde_sink_retry_after_waits_total",
        "Retries put off longer than the backoff because the backend's Retry-After asked so.",
        Source::Sink(|s| s.retry_after_waits.load(Relaxed)),
    ),
    gauge(
        "sonde_sink_queue_batches",
        "Requests waiting in the sink's buffer.",
        Source::Sink(|s| s.queue_batches.load(Relaxed)),
    ),
    gauge(
        "sonde_sink_queue_bytes",
        "Bytes waiting in the sink's buffer.",
        Source::Sink(|s| s.queue_bytes.load(Relaxed)),
    ),
    gauge(
        "sonde_sink_log_buffer_records",
        "Log records stored in the sink's disk buffer and not yet delivered.",
        Source::Sink(|s| s.log_buffer_records.load(Relaxed)),
    ),
    gauge(
        "sonde_sink_log_buffer_bytes",
        "Bytes of the log records stored in the sink's disk buffer.",
        Source::Sink(|s| s.log_buffer_bytes.load(Relaxed)),
    ),
    counter(
        "sonde_sink_corrupt_segments_total",
        "Disk buffer segments found torn or corrupt at start; their tails were skipped.",
        Source::Sink(|s| s.corrupt_segments.load(Relaxed)),
    ),
    counter(
        "sonde_sink_failures_total",
        "Failed delivery attempts, by reason.",
        Source::SinkFailures,
    ),
    counter(
        "sonde_sink_dropped_batches_total",
        "Batches a sink let go undelivered, by reason.",
        Source::SinkDrops(|s| &s.dropped_batches),
    ),
    counter(
        "sonde_sink_dropped_points_total",
        "Points a sink let go undelivered, by reason.",
        Source::SinkDrops(|s| &s.dropped_points),
    ),
    counter(
        "sonde_sink_records_total",
        "Log records a sink delivered (acknowledged by its backend).",
        Source::Sink(|s| s.records.load(Relaxed)),
    ),
    counter(
        "sonde_sink_dropped_records_total",
        "Log records a sink let go undelivered, by reason.",
        Source::SinkDrops(|s| &s.dropped_records),
    ),
    counter(
        "sonde_sink_profiles_total",
        "The profiler's periods a sink delivered (accepted by its backend).",
        Source::Sink(|s| s.profiles.load(Relaxed)),
    ),
    counter(
        "sonde_sink_dropped_profiles_total",
        "The profiler's periods a sink let go undelivered, by reason.",
        Source::SinkDrops(|s| &s.dropped_profiles),
    ),
    // Log sources.
    gauge(
        "sonde_log_files_watched",
        "Files a log source follows, open or idle.",
        Source::Log(|l| l.files_watched.load(Relaxed)),
    ),
    gauge(
        "sonde_log_files_open",
        "Files a log source holds a descriptor of; idle ones are closed (close_idle).",
        Source::Log(|l| l.files_open.load(Relaxed)),
    ),
    counter(
        "sonde_log_files_reopened_total",
        "Idle files a log source opened again because they were written.",
        Source::Log(|l| l.files_reopened.load(Relaxed)),
    ),
    counter(
        "sonde_log_bytes_read_total",
        "Bytes a log source read from its files.",
        Source::Log(|l| l.bytes_read.load(Relaxed)),
    ),
    counter(
        "sonde_log_lines_read_total",
        "Lines a log source read.",
        Source::Log(|l| l.lines_read.load(Relaxed)),
    ),
    counter(
        "sonde_log_lines_truncated_total",
        "Lines cut at max_line_bytes; the rest of each was dropped.",
        Source::Log(|l| l.lines_truncated.load(Relaxed)),
    ),
    counter(
        "sonde_log_multiline_records_total",
        "Records a log source joined from more than one line (multiline).",
        Source::Log(|l| l.multiline_records.load(Relaxed)),
    ),
    counter(
        "sonde_log_multiline_limited_total",
        "Multiline records handed on at max_lines or max_bytes; the lines after each started another record.",
        Source::Log(|l| l.multiline_limited.load(Relaxed)),
    ),
    counter(
        "sonde_log_malformed_lines_total",
        "Lines of a container log format (cri, docker_json) that did not parse; each was sent as it is.",
        Source::Log(|l| l.malformed_lines.load(Relaxed)),
    ),
    counter(
        "sonde_log_joined_records_total",
        "Container log records joined from more than one partial piece.",
        Source::Log(|l| l.joined_records.load(Relaxed)),
    ),
    counter(
        "sonde_log_unfinished_records_total",
        "Container log records sent before their last piece came: their file was done with, or the piece waited too long.",
        Source::Log(|l| l.unfinished_records.load(Relaxed)),
    ),
    counter(
        "sonde_log_files_skipped_total",
        "Files a log source's globs matched but it did not read: gzip-compressed.",
        Source::Log(|l| l.files_skipped.load(Relaxed)),
    ),
    counter(
        "sonde_log_truncations_total",
        "Files found truncated (or with a changed head) and read again from offset 0.",
        Source::Log(|l| l.truncations.load(Relaxed)),
    ),
    counter(
        "sonde_log_rotations_total",
        "Files found renamed, or gone from the globs while still existing.",
        Source::Log(|l| l.rotations.load(Relaxed)),
    ),
    gauge(
        "sonde_log_bytes_behind",
        "Bytes of the open files not yet acknowledged by every sink of the source (file sizes minus checkpoints).",
        Source::Log(|l| l.bytes_behind.load(Relaxed)),
    ),
    counter(
        "sonde_log_checkpoint_errors_total",
        "Checkpoint saves that failed (the last saved checkpoints stay).",
        Source::Log(|l| l.checkpoint_errors.load(Relaxed)),
    ),
    counter(
        "sonde_log_corrupt_checkpoints_total",
        "Checkpoint files found unreadable or corrupt at start; set aside, every file read from its beginning.",
        Source::Log(|l| l.corrupt_checkpoints.load(Relaxed)),
    ),
    counter(
        "sonde_log_watch_overflows_total",
        "inotify queue overflows, each followed by a rescan.",
        Source::Log(|l| l.watch_overflows.load(Relaxed)),
    ),
    // The profiler ([profiler]); zeros while it is off.
    gauge(
        "sonde_profiler_running",
        "1 while the host profiler samples, 0 when it is off or could not open its events.",
        Source::Agent(|t| prof(t, |p| &p.running)),
    ),
    counter(
        "sonde_profiler_samples_total",
        "Non-idle stack samples the profiler counted.",
        Source::Agent(|t| prof(t, |p| &p.samples)),
    ),
    counter(
        "sonde_profiler_user_stacks_total",
        "Samples with a user stack to unwind.",
        Source::Agent(|t| prof(t, |p| &p.user_stacks)),
    ),
    counter(
        "sonde_profiler_user_stacks_complete_total",
        "User stacks unwound to their end (the entry point or the thread's start).",
        Source::Agent(|t| prof(t, |p| &p.user_stacks_complete)),
    ),
    counter(
        "sonde_profiler_lost_total",
        "Records the kernel dropped because a profiler ring was full.",
        Source::Agent(|t| prof(t, |p| &p.lost)),
    ),
    counter(
        "sonde_profiler_symbol_cache_hits_total",
        "Frames named from the profiler's symbol cache.",
        Source::Agent(|t| prof(t, |p| &p.symbol_hits)),
    ),
    counter(
        "sonde_profiler_symbol_cache_misses_total",
        "Frames the profiler had to look up in a module.",
        Source::Agent(|t| prof(t, |p| &p.symbol_misses)),
    ),
    counter(
        "sonde_profiler_periods_total",
        "Profiles written to the store (one per period).",
        Source::Agent(|t| prof(t, |p| &p.periods)),
    ),
    counter(
        "sonde_profiler_write_errors_total",
        "Profiles that could not be written to the store.",
        Source::Agent(|t| prof(t, |p| &p.write_errors)),
    ),
    gauge(
        "sonde_profiler_store_bytes",
        "Bytes the profile store holds under data_dir.",
        Source::Agent(|t| prof(t, |p| &p.store_bytes)),
    ),
    gauge(
        "sonde_profiler_processes",
        "Processes in the profiler's process table after the last period.",
        Source::Agent(|t| prof(t, |p| &p.processes)),
    ),
    gauge(
        "sonde_profiler_modules",
        "Executable files the profiler holds open after the last period (those some process maps).",
        Source::Agent(|t| prof(t, |p| &p.modules)),
    ),
    gauge(
        "sonde_profiler_symbol_cache_entries",
        "Frames with a cached name after the last period.",
        Source::Agent(|t| prof(t, |p| &p.symbol_cache_entries)),
    ),
    counter(
        "sonde_profiler_cpu_seconds_total",
        "CPU time of the profiler's own thread: its overhead.",
        Source::Agent(|t| Value::Float(t.profiler.cpu_ns.load(Relaxed) as f64 / 1e9)),
    ),
];
