//! A sink's counters, shown on `/metrics` by the admin site's telemetry (`sonde-admin`): the
//! local sinks' writes and the senders' deliveries, failures and drops,
//! with the reasons they are labelled by.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why a request failed, as counted on `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailReason {
    /// The backend could not be reached (refused, reset, no route, DNS).
    Connect,
    /// No answer within the request timeout.
    Timeout,
    /// HTTP 429 Too Many Requests.
    Throttled,
    /// HTTP 5xx.
    ServerError,
    /// HTTP 4xx other than 408, 413 and 429: the backend refused the data.
    Rejected,
    /// HTTP 413: the request was too large for the backend (it is sent
    /// again in halves).
    TooLarge,
    /// Any other I/O or protocol error.
    Io,
    /// The batch could not be compressed.
    Encode,
    /// The disk buffer could not write or read a request.
    Buffer,
    /// The TLS handshake failed: a certificate not trusted, not naming
    /// the server, or the client's refused.
    Tls,
    /// The backend refused the credentials (Kafka's SASL).
    Auth,
}

impl FailReason {
    /// Every reason, in the order of [`FailReason::as_str`]'s table.
    pub const ALL: [FailReason; 11] = [
        FailReason::Connect,
        FailReason::Timeout,
        FailReason::Throttled,
        FailReason::ServerError,
        FailReason::Rejected,
        FailReason::TooLarge,
        FailReason::Io,
        FailReason::Encode,
        FailReason::Buffer,
        FailReason::Tls,
        FailReason::Auth,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            FailReason::Connect => "connect",
            FailReason::Timeout => "timeout",
            FailReason::Throttled => "http_429",
            FailReason::ServerError => "http_5xx",
            FailReason::Rejected => "http_4xx",
            FailReason::TooLarge => "http_413",
            FailReason::Io => "io",
            FailReason::Encode => "encode",
            FailReason::Buffer => "buffer",
            FailReason::Tls => "tls",
            FailReason::Auth => "auth",
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
    /// The backend refused a request of one point or record as too large
    /// (HTTP 413): it cannot be halved further.
    TooLarge,
    /// The agent stopped with the request still in a memory buffer.
    Shutdown,
    /// The disk buffer could not write or read the request.
    BufferError,
}

impl SinkDrop {
    /// Every cause, indexable by `as usize`.
    pub const ALL: [SinkDrop; 6] = [
        SinkDrop::QueueFull,
        SinkDrop::BufferFull,
        SinkDrop::Rejected,
        SinkDrop::TooLarge,
        SinkDrop::Shutdown,
        SinkDrop::BufferError,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkDrop::QueueFull => "queue_full",
            SinkDrop::BufferFull => "buffer_full",
            SinkDrop::Rejected => "rejected",
            SinkDrop::TooLarge => "too_large",
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
    /// Log records delivered (acknowledged by the backend).
    pub records: AtomicU64,
    /// Log records dropped, by [`SinkDrop`].
    pub dropped_records: [AtomicU64; SINK_DROPS],
    /// The profiler's periods delivered (accepted by the backend).
    pub profiles: AtomicU64,
    /// The profiler's periods dropped, by [`SinkDrop`].
    pub dropped_profiles: [AtomicU64; SINK_DROPS],
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
    /// Milliseconds the backend asked the sink to hold its requests
    /// (Kafka's quota `throttle_time_ms`), which it did.
    pub throttled_ms: AtomicU64,
    /// Retries the backend's `Retry-After` put off longer than the
    /// backoff would have.
    pub retry_after_waits: AtomicU64,
    /// Failed attempts, by [`FailReason`].
    pub failures: [AtomicU64; FAIL_REASONS],
    /// Requests waiting in the buffer (a gauge).
    pub queue_batches: AtomicU64,
    /// Bytes waiting in the buffer (a gauge).
    pub queue_bytes: AtomicU64,
    /// Disk buffer segments found torn or corrupt at start and skipped.
    pub corrupt_segments: AtomicU64,
    /// Log records waiting in the sink's log disk buffer (a gauge).
    pub log_buffer_records: AtomicU64,
    /// Bytes waiting in the sink's log disk buffer (a gauge).
    pub log_buffer_bytes: AtomicU64,
}

impl SinkStats {
    /// Zeroed counters for a sink.
    pub fn new(name: String) -> Self {
        SinkStats {
            name,
            batches: AtomicU64::new(0),
            points: AtomicU64::new(0),
            records: AtomicU64::new(0),
            dropped_records: std::array::from_fn(|_| AtomicU64::new(0)),
            profiles: AtomicU64::new(0),
            dropped_profiles: std::array::from_fn(|_| AtomicU64::new(0)),
            errors: AtomicU64::new(0),
            dropped_batches: std::array::from_fn(|_| AtomicU64::new(0)),
            dropped_points: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes_raw: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            throttled_ms: AtomicU64::new(0),
            retry_after_waits: AtomicU64::new(0),
            failures: std::array::from_fn(|_| AtomicU64::new(0)),
            queue_batches: AtomicU64::new(0),
            queue_bytes: AtomicU64::new(0),
            corrupt_segments: AtomicU64::new(0),
            log_buffer_records: AtomicU64::new(0),
            log_buffer_bytes: AtomicU64::new(0),
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
