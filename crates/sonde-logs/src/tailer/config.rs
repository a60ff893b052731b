//! How a [`Tailer`](crate::Tailer) finds and reads files
//! ([`TailerConfig`]), and why [`Tailer::new`](crate::Tailer::new)
//! refuses one ([`BuildError`]).

use std::time::Duration;

use crate::container::Format;
use crate::multiline::Multiline;

/// Where a file found by the first rescan of a fresh tailer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadFrom {
    /// At its first byte.
    #[default]
    Beginning,
    /// At its end as found: only lines written afterwards are read. A line
    /// still being written (the file does not end in a newline) is read
    /// whole once complete, if it started within the last
    /// [`END_LOOKBACK_BYTES`] bytes.
    End,
}

/// How a [`Tailer`](crate::Tailer) finds and reads files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailerConfig {
    /// Absolute glob patterns of the files to read; `*` stays within one
    /// path component, `**` crosses any number of them.
    pub include: Vec<String>,
    /// Glob patterns of files to leave alone: a pattern with a `/` is matched
    /// against the whole path, one without against the file name. Default
    /// none.
    pub exclude: Vec<String>,
    /// Where files found at the first start begin. Default
    /// [`ReadFrom::Beginning`].
    pub read_from: ReadFrom,
    /// The longest line handed back whole; longer lines are cut. Default
    /// 1 MiB.
    pub max_line_bytes: usize,
    /// How long a rotated file must stay quiet before its last line without
    /// a newline is handed back and, if it is gone, it is closed. Default 5 s.
    pub rotate_wait: Duration,
    /// The most bytes read from one file by one
    /// [`Tailer::poll`](crate::Tailer::poll), and the size of the one read
    /// buffer all files share. Default 256 KiB.
    pub read_buffer_bytes: usize,
    /// How lines are joined into multiline records; `None` (the default)
    /// makes every line a record.
    pub multiline: Option<Multiline>,
    /// How the files' lines are read: as they are (the default), or as a
    /// container runtime's log files ([`crate::container`]), each record
    /// joined from its pieces, at most `max_line_bytes`, and handed on
    /// through [`LineSink::record`](crate::LineSink::record). Not together
    /// with `multiline`.
    pub format: Format,
    /// What to do with gzip-compressed files. Default [`Gzip::Skip`].
    pub gzip: Gzip,
    /// How long a file that is read to its end and acknowledged may stay
    /// unwritten before its descriptor is closed; it stays known by
    /// identity and is opened again when it is written. Default 30 s.
    pub close_idle: Duration,
}

/// What a [`Tailer`](crate::Tailer) does with a gzip-compressed file its globs match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gzip {
    /// Leave it unread: logrotate's `compress` makes one of a file that
    /// was read already, so reading it would send its lines twice.
    #[default]
    Skip,
    /// Decompress it and read its lines, for archives nobody read yet.
    Read,
}

impl TailerConfig {
    /// The defaults, reading the files that match `include`.
    pub fn new(include: Vec<String>) -> Self {
        Self {
            include,
            exclude: Vec::new(),
            read_from: ReadFrom::Beginning,
            max_line_bytes: 1024 * 1024,
            rotate_wait: Duration::from_secs(5),
            read_buffer_bytes: 256 * 1024,
            multiline: None,
            format: Format::Lines,
            gzip: Gzip::Skip,
            close_idle: Duration::from_secs(30),
        }
    }
}

/// Why [`Tailer::new`](crate::Tailer::new) refused a configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A glob does not parse.
    #[error("invalid glob {pattern:?}: {error}")]
    Glob {
        /// The pattern.
        pattern: String,
        /// What is wrong with it.
        error: globset::Error,
    },
    /// An include pattern is relative, so where to look would depend on the
    /// working directory.
    #[error("include pattern {pattern:?} is not an absolute path")]
    Relative {
        /// The pattern.
        pattern: String,
    },
    /// The patterns parse one by one but not as one set (the regex they
    /// make together is too large).
    #[error("the glob patterns together are too large to match: {0}")]
    Set(globset::Error),
    /// `max_line_bytes`, `read_buffer_bytes` or a multiline limit is 0.
    #[error("{key} must be at least 1")]
    Zero {
        /// The setting.
        key: &'static str,
    },
    /// `multiline` and a container `format` are both set: a container
    /// record is joined from its runtime's pieces.
    #[error("multiline joining does not apply to a container log format")]
    MultilineAndFormat,
    /// `multiline`'s start pattern is not a regular expression.
    #[error("invalid multiline start pattern {pattern:?}: {error}")]
    Regex {
        /// The pattern.
        pattern: String,
        /// What is wrong with it.
        error: regex::Error,
    },
}

/// How far back from a file's end [`ReadFrom::End`] looks for the start of
/// a line still being written.
pub const END_LOOKBACK_BYTES: usize = 64 * 1024;
