//! The files a tailer follows, and what becomes of each: an open file
//! ([`Watched`]) is read on, closed once it is gone and done with, or
//! closed to an [`Idle`] file while it is still linked but unwritten; a
//! closed file's offset is remembered in case a rescan finds it again.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::gzip::Gz;
use super::join::Joining;
use super::report::FileKey;
use crate::checkpoint::FileCheckpoint;
use crate::identity::{FileId, Fingerprint, Identity};
use crate::lines::Splitter;

/// An open file: its descriptor, where it was last seen, and how far it is
/// read and acknowledged.
pub(super) struct Watched {
    pub(super) key: FileKey,
    pub(super) file: File,
    pub(super) id: FileId,
    pub(super) head: Fingerprint,
    pub(super) path: PathBuf,
    /// Found at a matching path by the last rescan.
    pub(super) linked: bool,
    /// Renamed, or gone from the globs, since it was found.
    pub(super) rotated: bool,
    /// Reported written ([`Tailer::mark_written`](crate::Tailer::mark_written))
    /// since its last read.
    pub(super) written: bool,
    /// Its last read stopped before its end.
    pub(super) backlog: bool,
    /// Found through a symbolic link: inotify reports its writes in its
    /// target's directory, which may not be watched, so every poll reads it.
    pub(super) via_link: bool,
    pub(super) splitter: Splitter,
    /// The record being built, with
    /// [`TailerConfig::multiline`](crate::TailerConfig::multiline) or a
    /// container [`TailerConfig::format`](crate::TailerConfig::format).
    pub(super) joining: Joining,
    /// A gzip file being read ([`Gzip::Read`](crate::tailer::Gzip::Read)).
    pub(super) gz: Option<Gz>,
    /// File offset just after the last acknowledged line.
    pub(super) acked: u64,
    /// Size and modification time at the last poll, to skip the head check
    /// of a file that has not changed.
    pub(super) last_size: u64,
    pub(super) last_mtime: (i64, i64),
    /// When bytes were last read, or the file was found, renamed or gone:
    /// `rotate_wait` counts from there.
    pub(super) active_at: Instant,
}

/// What becomes of a file after a poll ([`Watched::fate`]).
pub(super) enum Fate {
    /// It stays open.
    Keep,
    /// It is closed and forgotten.
    Close,
    /// Its descriptor is closed, and it is known as an [`Idle`] file.
    Idle,
}

/// A file read to its end, with every line acknowledged, that stayed
/// unwritten for [`TailerConfig::close_idle`](crate::TailerConfig::close_idle):
/// its descriptor is closed and it is known by identity until it is written
/// (and opened again), gone, or renamed.
pub(super) struct Idle {
    pub(super) key: FileKey,
    pub(super) head: Fingerprint,
    pub(super) path: PathBuf,
    /// Its size when it went idle, read and acknowledged.
    pub(super) offset: u64,
    /// Its modification time then.
    pub(super) mtime: (i64, i64),
    pub(super) rotated: bool,
}

impl Watched {
    /// Its checkpoint at `offset`.
    pub(super) fn checkpoint(&self, offset: u64) -> FileCheckpoint {
        FileCheckpoint {
            identity: Identity {
                id: self.id,
                head: self.head,
            },
            path: self.path.to_string_lossy().into_owned(),
            offset,
        }
    }

    /// Whether [`Tailer::poll_written`](crate::Tailer::poll_written) reads it
    /// without a mark: it is open and its last read stopped short, inotify
    /// may not report its writes, or something timed is pending (rotated or
    /// gone, a multiline record, a gzip file being read).
    pub(super) fn needs_attention(&self) -> bool {
        self.backlog
            || self.via_link
            || self.rotated
            || self.joining.start().is_some()
            || self.gz.as_ref().is_some_and(|g| !g.done)
    }

    /// What becomes of it once a poll has read it and handed on what was
    /// due. A file is done with when it is read to its end, nothing of it
    /// waits in its splitter or joiner, and every line is acknowledged.
    /// Then, gone from the globs and `quiet` for `rotate_wait`, it is
    /// closed; still at its path and `unwritten` for `close_idle`, it goes
    /// idle.
    pub(super) fn fate(&self, quiet: bool, unwritten: bool) -> Fate {
        let read_all = match &self.gz {
            Some(gz) => gz.done,
            None => self.splitter.offset() >= self.last_size,
        };
        let drained =
            read_all && self.splitter.waiting().is_none() && self.joining.start().is_none();
        let done = drained && self.acked >= self.splitter.offset();
        if !self.linked && done && quiet {
            return Fate::Close;
        }
        // A file found through a symbolic link stays open: inotify reports
        // its writes in its target's directory, which may not be watched.
        if self.linked && done && self.gz.is_none() && !self.via_link && unwritten {
            return Fate::Idle;
        }
        Fate::Keep
    }
}

/// Keeps the offset of a gone file closed while it still has a name, in
/// case a rescan finds it again; at most [`CLOSED_KEPT`] of them.
pub(super) fn remember(
    closed: &mut HashMap<FileId, FileCheckpoint>,
    id: FileId,
    head: Fingerprint,
    path: &Path,
    offset: u64,
) {
    if closed.len() >= CLOSED_KEPT {
        let any = closed.keys().next().copied();
        any.map(|k| closed.remove(&k));
    }
    closed.insert(
        id,
        FileCheckpoint {
            identity: Identity { id, head },
            path: path.to_string_lossy().into_owned(),
            offset,
        },
    );
}

/// How many closed files' offsets a [`Tailer`](crate::Tailer) keeps.
pub(super) const CLOSED_KEPT: usize = 4096;

/// A file's modification time, seconds and nanoseconds.
pub(super) fn mtime_of(meta: &Metadata) -> (i64, i64) {
    (meta.mtime(), meta.mtime_nsec())
}

#[cfg(test)]
mod tests;
