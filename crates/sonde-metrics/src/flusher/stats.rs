//! The flusher's counters, shown on `/metrics` by the admin site's telemetry (`sonde-admin`).

use std::sync::atomic::AtomicU64;

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
    /// Windows that passed while the agent did not run (stopped with
    /// SIGSTOP, suspended, or the clock stepped forward): skipped, not
    /// flushed.
    pub skipped_windows: AtomicU64,
}
