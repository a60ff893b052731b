//! [`Counters`]: what a log source's reading has done since it started,
//! counted by the [`Tailer`](crate::Tailer) and by the
//! [multiline](crate::multiline) and [container](crate::container)
//! joiners it hands lines to.

/// What a [`Tailer`](crate::Tailer) has done since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Files followed now, open or idle.
    pub files_watched: u64,
    /// Files with an open descriptor now (the others are idle:
    /// [`TailerConfig::close_idle`](crate::TailerConfig::close_idle)).
    pub files_open: u64,
    /// Idle files opened again because they were written.
    pub files_reopened: u64,
    /// Bytes read from files.
    pub bytes_read: u64,
    /// Lines handed to the sink.
    pub lines_read: u64,
    /// Lines cut at `max_line_bytes`.
    pub lines_truncated: u64,
    /// Files found truncated, and read again from 0.
    pub truncations: u64,
    /// Files found renamed, or gone from the globs while still existing.
    pub rotations: u64,
    /// Records made of more than one line
    /// ([`TailerConfig::multiline`](crate::TailerConfig::multiline)).
    pub multiline_records: u64,
    /// Multiline records handed on at `max_lines` or `max_bytes`, before
    /// their end: the lines after them start another record.
    pub multiline_limited: u64,
    /// Files skipped because they are gzip-compressed.
    pub files_skipped: u64,
    /// Lines of a container log format that did not parse, delivered as
    /// they are ([`crate::container`]).
    pub malformed_lines: u64,
    /// Container log records joined from more than one piece.
    pub joined_records: u64,
    /// Container log records handed on before their last piece came (the
    /// file was done with, or the other stream waited too long).
    pub unfinished_records: u64,
}
