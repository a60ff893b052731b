//! What a [`Tailer`](crate::Tailer) hands its caller: each line, pushed
//! into the caller's [`LineSink`] with its [`Origin`]; and, from every
//! rescan and poll, a report of what happened to files ([`Event`]) and of
//! what could not be looked at or read.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::container;
use crate::identity::FileId;
use crate::lines::Line;

/// A directory or file that [`Tailer::rescan`](crate::Tailer::rescan) could
/// not look at; the rescan goes on with the others.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// Listing a directory failed.
    #[error("cannot list directory {path}: {error}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        error: io::Error,
    },
    /// Opening or reading the head of a matching file failed.
    #[error("cannot open {path}: {error}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: io::Error,
    },
}

/// An open file that [`Tailer::poll`](crate::Tailer::poll) could not read
/// this time; it stays open and is tried again by the next poll.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {error}")]
pub struct ReadError {
    /// The path the file was last seen at.
    pub path: PathBuf,
    /// The I/O error.
    pub error: io::Error,
}

/// Names one file, from the moment it is found until it is closed or
/// truncated (a truncated file gets a new key, so that acknowledgements of
/// lines read before the truncation are told apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileKey(pub(super) u64);

/// Where a line came from.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The file, for [`Tailer::ack`](crate::Tailer::ack).
    pub key: FileKey,
    /// The path the file was last seen at.
    pub path: &'a Path,
    /// Its device and inode: with a line's offset, what names the line
    /// across restarts and renames (a sink that deduplicates by it).
    pub file: FileId,
}

/// Receives the lines a [`Tailer`](crate::Tailer) reads: the tailer drives,
/// pushing each line while it polls, and the sink copies what it keeps (the
/// bytes borrow the tailer's read buffer).
pub trait LineSink {
    /// One line, in file order within its file.
    fn line(&mut self, origin: &Origin<'_>, line: &Line<'_>);

    /// One record of a container log file
    /// ([`TailerConfig::format`](crate::TailerConfig::format)), in the order
    /// of its first piece within its file. A record with
    /// [`hold`](container::Record::hold) set must reach the same batch as the
    /// record after it, which comes in the same poll. By default, its line
    /// goes to [`LineSink::line`].
    fn record(&mut self, origin: &Origin<'_>, record: &container::Record<'_>) {
        self.line(origin, &record.line);
    }
}

/// Something that happened to a file, worth a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A file was found and opened; reading starts at `offset`.
    Opened {
        /// Where it was found.
        path: PathBuf,
        /// The first offset read.
        offset: u64,
        /// Why reading starts there.
        from: Start,
    },
    /// An open file was found at another matching path.
    Renamed {
        /// The path it was last seen at.
        from: PathBuf,
        /// The path it is at now.
        to: PathBuf,
    },
    /// An open file is at no matching path any more: it was renamed out of
    /// the globs, or deleted. It is still read to its end.
    Gone {
        /// The path it was last seen at.
        path: PathBuf,
        /// Whether it was deleted (no link to it is left).
        deleted: bool,
    },
    /// An open file was truncated, and is read again from offset 0.
    Truncated {
        /// Its path.
        path: PathBuf,
    },
    /// A checkpoint's device and inode now hold a file with another head:
    /// a new file at a reused inode, or the old one truncated and written
    /// again while no tailer ran. It is read from offset 0.
    Reused {
        /// Its path.
        path: PathBuf,
    },
    /// A gone file was read to its end, acknowledged and quiet, and is
    /// closed.
    Closed {
        /// The path it was last seen at.
        path: PathBuf,
    },
    /// A matching file is gzip-compressed: it is not read.
    Skipped {
        /// Its path.
        path: PathBuf,
    },
}

/// Why a newly opened file is read from where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Its checkpoint.
    Checkpoint,
    /// Its beginning: no checkpoint names it.
    Beginning,
    /// Its end: [`ReadFrom::End`](crate::tailer::ReadFrom::End) at the first
    /// start.
    End,
    /// Its beginning, because it is shorter than its checkpoint says: it
    /// was truncated while no tailer ran.
    Truncated,
}

/// What one [`Tailer::rescan`](crate::Tailer::rescan) found.
#[derive(Debug, Default)]
pub struct RescanReport {
    /// Directories and files that could not be looked at; the rest of the
    /// scan was done regardless.
    pub errors: Vec<ScanError>,
    /// What happened to files, in the order it was noticed.
    pub events: Vec<Event>,
}

/// What one [`Tailer::poll`](crate::Tailer::poll) did.
#[derive(Debug, Default)]
pub struct PollReport {
    /// Bytes read.
    pub bytes: u64,
    /// Lines handed to the sink.
    pub lines: u64,
    /// Whether some file has more bytes than one read took: poll again at
    /// once.
    pub more: bool,
    /// Files that could not be read this time.
    pub errors: Vec<ReadError>,
    /// Truncations and closes, in the order they happened.
    pub events: Vec<Event>,
    /// When the earliest multiline or container record being built times
    /// out: poll again by then.
    pub flush_at: Option<Instant>,
}
