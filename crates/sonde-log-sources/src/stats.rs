//! A log source's counters, shown on `/metrics` by the admin site's telemetry (`sonde-admin`)
//! with the label `source`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use sonde_logs::tailer::Counters;

/// Counters of one log source. The source thread stores its tailer's
/// counters here after every round; the rest it counts itself.
#[derive(Debug)]
pub struct LogStats {
    /// The source's name.
    pub source: String,
    /// Files followed now, open or idle (a gauge).
    pub files_watched: AtomicU64,
    /// Files with an open descriptor now (a gauge).
    pub files_open: AtomicU64,
    /// Idle files opened again because they were written.
    pub files_reopened: AtomicU64,
    /// Bytes read from files.
    pub bytes_read: AtomicU64,
    /// Lines read.
    pub lines_read: AtomicU64,
    /// Lines cut at `max_line_bytes`.
    pub lines_truncated: AtomicU64,
    /// Records joined from more than one line (`multiline`).
    pub multiline_records: AtomicU64,
    /// Multiline records handed on at `max_lines` or `max_bytes`.
    pub multiline_limited: AtomicU64,
    /// Files skipped because they are gzip-compressed.
    pub files_skipped: AtomicU64,
    /// Lines of a container log format that did not parse, sent as they
    /// are.
    pub malformed_lines: AtomicU64,
    /// Container records joined from more than one piece.
    pub joined_records: AtomicU64,
    /// Container records sent before their last piece came.
    pub unfinished_records: AtomicU64,
    /// Files found truncated and read again from 0.
    pub truncations: AtomicU64,
    /// Files found renamed, or gone from the globs while still existing.
    pub rotations: AtomicU64,
    /// Bytes of the open files not acknowledged yet (a gauge).
    pub bytes_behind: AtomicU64,
    /// Checkpoint files that could not be saved.
    pub checkpoint_errors: AtomicU64,
    /// Checkpoint files found unreadable or corrupt at start.
    pub corrupt_checkpoints: AtomicU64,
    /// inotify queue overflows (each followed by a rescan).
    pub watch_overflows: AtomicU64,
}

impl LogStats {
    /// Zeroed counters for source `source`.
    pub fn new(source: String) -> Self {
        LogStats {
            source,
            files_watched: AtomicU64::new(0),
            files_open: AtomicU64::new(0),
            files_reopened: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            lines_read: AtomicU64::new(0),
            lines_truncated: AtomicU64::new(0),
            multiline_records: AtomicU64::new(0),
            multiline_limited: AtomicU64::new(0),
            files_skipped: AtomicU64::new(0),
            malformed_lines: AtomicU64::new(0),
            joined_records: AtomicU64::new(0),
            unfinished_records: AtomicU64::new(0),
            truncations: AtomicU64::new(0),
            rotations: AtomicU64::new(0),
            bytes_behind: AtomicU64::new(0),
            checkpoint_errors: AtomicU64::new(0),
            corrupt_checkpoints: AtomicU64::new(0),
            watch_overflows: AtomicU64::new(0),
        }
    }

    /// Stores a tailer's counters and bytes behind.
    pub(crate) fn store(&self, c: &Counters, bytes_behind: u64) {
        self.files_watched.store(c.files_watched, Relaxed);
        self.files_open.store(c.files_open, Relaxed);
        self.files_reopened.store(c.files_reopened, Relaxed);
        self.bytes_read.store(c.bytes_read, Relaxed);
        self.lines_read.store(c.lines_read, Relaxed);
        self.lines_truncated.store(c.lines_truncated, Relaxed);
        self.multiline_records.store(c.multiline_records, Relaxed);
        self.multiline_limited.store(c.multiline_limited, Relaxed);
        self.files_skipped.store(c.files_skipped, Relaxed);
        self.malformed_lines.store(c.malformed_lines, Relaxed);
        self.joined_records.store(c.joined_records, Relaxed);
        self.unfinished_records.store(c.unfinished_records, Relaxed);
        self.truncations.store(c.truncations, Relaxed);
        self.rotations.store(c.rotations, Relaxed);
        self.bytes_behind.store(bytes_behind, Relaxed);
    }
}
