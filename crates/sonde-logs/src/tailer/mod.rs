//! The files of one log source, followed through rotation and truncation.
//!
//! The caller drives a [`Tailer`]: [`Tailer::rescan`] walks the include
//! globs and takes up new files, [`Tailer::poll`] reads what the open files
//! have appended and pushes each complete line into the caller's
//! [`LineSink`], [`Tailer::ack`] tells the tailer that a line was delivered,
//! and [`Tailer::checkpoints`] returns what to save: per file, the offset
//! just after the last acknowledged line. Nothing here spawns, sleeps or
//! keeps a clock; the caller passes the time in.
//!
//! # What happens to a file
//!
//! * **Found** by a rescan at a path that matches an include glob and no
//!   exclude glob: it is opened and read from the offset its checkpoint
//!   names, or, without one, from its beginning (or its end, with
//!   [`ReadFrom::End`], for the files found by the first rescan of a tailer
//!   built without checkpoints).
//! * **Renamed** (rename rotation): the open descriptor keeps reading it to
//!   its end; a new file at the old path is another identity, read from 0.
//!   Finding a file at another path, or at no matching path while it still
//!   exists, counts a rotation.
//! * **Truncated** (its size fell below the read offset, or its head
//!   changed, as with copytruncate): the waiting partial line is handed back
//!   as it is, the file is read again from 0 under a new [`FileKey`], and
//!   a truncation is counted. A file truncated and written past its old
//!   read offset between two polls, with a head that starts with the same
//!   bytes as before (up to the fingerprint's 1 KiB), cannot be told from a
//!   file that grew: its new bytes up to the old offset are skipped.
//! * **Deleted**, or renamed out of the globs: read through the open
//!   descriptor to its end; once every line read is acknowledged and it has
//!   been quiet for `rotate_wait`, it is closed and forgotten, so the
//!   filesystem may reuse its inode.
//! * **Idle** (read to its end, every line acknowledged, unwritten for
//!   [`TailerConfig::close_idle`]): its descriptor is closed, and it is
//!   known by device, inode and head at its path, with its offset. A write
//!   the caller reports ([`Tailer::mark_written`]), or a rescan that sees
//!   its size or modification time change, opens it again at its path
//!   (the inode must match) and reading goes on from its offset; its head
//!   is checked as any file's. Renamed within a directory walked, it is
//!   found by the inode of its directory entry and opened there (read to
//!   its end if the new name does not match); gone elsewhere, it is
//!   forgotten. Files found through a symbolic link and gzip files stay
//!   open.
//! * **Compressed** (it starts with gzip's magic bytes, as the older
//!   generations logrotate compresses do): skipped, reported once as
//!   [`Event::Skipped`] and counted, never read as text; a file that
//!   starts empty and turns out to be gzip when its first bytes come is
//!   skipped then. With [`TailerConfig::gzip`] set to [`Gzip::Read`], it is
//!   decompressed and read instead, from its first line (offsets and
//!   checkpoints count decompressed bytes); a gzip file still being
//!   written is read again from its start, skipping what was read, until
//!   it is whole.
//! * A rotated file's last line without a newline is handed back as it is
//!   once the file has been quiet for `rotate_wait`. Quiet counts from the
//!   later of the last read and the rescan that saw the rotation, since a
//!   writer may go on writing through its old descriptor until it reopens.
//!
//! # The parts
//!
//! Besides the [`Tailer`] here, which holds the files and drives the poll:
//! `config` ([`TailerConfig`], [`BuildError`]); `report` (what the caller
//! gets: lines through its [`LineSink`], and [`Event`]s and errors in each
//! [`RescanReport`] and [`PollReport`]); `discover` (the globs and the walk
//! of their directories) and `rescan` (what the tailer makes of a walk:
//! files opened, renamed, gone); `read` (one poll of one file, gzip files
//! through `gzip`) and `join` (lines handed to the file's multiline or
//! container joiner); `file` (an open file and what becomes of it after a
//! poll) and `idle` (idle files closed, woken and followed); `position`
//! (checkpoints and positions).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

mod config;
mod discover;
mod file;
mod gzip;
mod idle;
mod join;
mod position;
mod read;
mod report;
mod rescan;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use self::config::{BuildError, Gzip, ReadFrom, TailerConfig, END_LOOKBACK_BYTES};
pub(crate) use self::discover::{root_of, Root};
pub use self::report::{
    Event, FileKey, LineSink, Origin, PollReport, ReadError, RescanReport, ScanError, Start,
};
pub use crate::counters::Counters;

use self::discover::Globs;
use self::file::{Fate, Idle, Watched};
use self::join::Join;
use self::read::PollCtx;
use crate::checkpoint::{Checkpoints, FileCheckpoint};
use crate::identity::{FileId, FINGERPRINT_BYTES};

/// The files of one log source; see the [module docs](self).
pub struct Tailer {
    config: TailerConfig,
    globs: Globs,
    join: Join,
    files: Vec<Watched>,
    /// Bumped whenever a file is added, dropped, moved, truncated or
    /// advanced: see [`Tailer::layout`].
    layout: u64,
    /// Files whose descriptors are closed ([`TailerConfig::close_idle`]),
    /// by device and inode, and by path for [`Tailer::mark_written`].
    idle: HashMap<FileId, Idle>,
    idle_paths: HashMap<PathBuf, FileId>,
    /// Idle files found written, opened again by the next poll.
    woken: Vec<FileId>,
    /// The index in `files` of each open file's path and key, for
    /// [`Tailer::mark_written`] and [`Tailer::ack`]; rebuilt when `files`
    /// changed.
    index: HashMap<PathBuf, usize>,
    keys: HashMap<FileKey, usize>,
    index_valid: bool,
    /// Indices of the files [`Tailer::poll_written`] reads: those marked
    /// written, and those that needed it after their last read.
    attention: Vec<usize>,
    /// Set by a rescan: the next poll reads every file, whichever is asked.
    poll_all: bool,
    /// Compressed files found by the globs, not read; kept while a rescan
    /// finds them, so that they are not opened again every rescan.
    skipped: HashSet<FileId>,
    /// Checkpoints given at build, by device and inode, consumed by the
    /// first rescan.
    restored: HashMap<FileId, FileCheckpoint>,
    /// Gone files closed while they still had a name somewhere: a rescan
    /// that misses a file being renamed (a directory read while renames
    /// run may skip an entry) marks it gone, and if it is found again
    /// after it was closed, it resumes here instead of from its start.
    /// At most [`CLOSED_KEPT`](file::CLOSED_KEPT) entries.
    closed: HashMap<FileId, FileCheckpoint>,
    /// Whether the first rescan still has to run and the tailer was built
    /// without checkpoints: then [`ReadFrom`] applies.
    fresh: bool,
    scanned: bool,
    next_key: u64,
    buf: Vec<u8>,
    head_buf: Box<[u8; FINGERPRINT_BYTES]>,
    counters: Counters,
    /// Events of the rescan under way.
    events: Vec<Event>,
}

impl Tailer {
    /// A tailer for `config` that resumes from `checkpoints` (`None` at the
    /// agent's first start, when [`TailerConfig::read_from`] applies). It
    /// has no files until the first [`Tailer::rescan`].
    ///
    /// # Errors
    ///
    /// An invalid glob, a relative include pattern, or a zero size.
    pub fn new(config: TailerConfig, checkpoints: Option<Checkpoints>) -> Result<Self, BuildError> {
        if config.max_line_bytes == 0 {
            return Err(BuildError::Zero {
                key: "max_line_bytes",
            });
        }
        if config.read_buffer_bytes == 0 {
            return Err(BuildError::Zero {
                key: "read_buffer_bytes",
            });
        }
        let join = Join::new(&config)?;
        let globs = Globs::new(&config)?;
        Ok(Self {
            buf: vec![0; config.read_buffer_bytes],
            config,
            globs,
            join,
            files: Vec::new(),
            layout: 0,
            idle: HashMap::new(),
            idle_paths: HashMap::new(),
            woken: Vec::new(),
            index: HashMap::new(),
            keys: HashMap::new(),
            index_valid: false,
            attention: Vec::new(),
            poll_all: true,
            skipped: HashSet::new(),
            fresh: checkpoints.is_none(),
            closed: HashMap::new(),
            restored: checkpoints
                .map(|c| c.files.into_iter().map(|f| (f.identity.id, f)).collect())
                .unwrap_or_default(),
            scanned: false,
            next_key: 0,
            head_buf: Box::new([0; FINGERPRINT_BYTES]),
            counters: Counters::default(),
            events: Vec::new(),
        })
    }

    /// Reads what each open file appended since the last poll (at most
    /// [`TailerConfig::read_buffer_bytes`] per file) and pushes every line
    /// completed into `sink`; hands back the waiting last lines of rotated
    /// files quiet for `rotate_wait` by `now`, and closes the gone files
    /// that are read, acknowledged and quiet.
    pub fn poll(&mut self, now: Instant, sink: &mut impl LineSink) -> PollReport {
        self.poll_where(now, sink, true)
    }

    /// [`Tailer::poll`] for the files that need it: those marked written,
    /// those whose last read stopped before their end, those found through
    /// a symbolic link, and those with something timed pending (rotated or
    /// gone files, a multiline record, a gzip file being read). The others
    /// are not looked at, so a poll costs the files written, not the files
    /// open; a caller that marks every write inotify reports and polls
    /// every file now and then (at each rescan) misses nothing.
    pub fn poll_written(&mut self, now: Instant, sink: &mut impl LineSink) -> PollReport {
        self.poll_where(now, sink, false)
    }

    /// Notes that the files at `paths` were written (inotify said so), for
    /// [`Tailer::poll_written`]; paths of no open file are ignored.
    pub fn mark_written<'p>(&mut self, paths: impl IntoIterator<Item = &'p Path>) {
        self.reindex();
        for p in paths {
            if let Some(&i) = self.index.get(p) {
                if !self.files[i].written {
                    self.files[i].written = true;
                    self.attention.push(i);
                }
            } else if let Some(&id) = self.idle_paths.get(p) {
                self.woken.push(id);
            }
        }
    }

    /// Rebuilds the path and key indices of `files` if they changed.
    fn reindex(&mut self) {
        if self.index_valid {
            return;
        }
        self.index = self
            .files
            .iter()
            .enumerate()
            .map(|(i, w)| (w.path.clone(), i))
            .collect();
        self.keys = self
            .files
            .iter()
            .enumerate()
            .map(|(i, w)| (w.key, i))
            .collect();
        self.index_valid = true;
    }

    /// Polls every file (`all`, or after a rescan or a change of `files`)
    /// or those that need it; then closes the files done with and makes
    /// idle those unwritten.
    fn poll_where(&mut self, now: Instant, sink: &mut impl LineSink, all: bool) -> PollReport {
        let mut report = PollReport::default();
        let woken = self.wake(now, &mut report);
        let mut which = std::mem::take(&mut self.attention);
        if all || self.poll_all {
            self.poll_all = false;
            which = (0..self.files.len()).collect();
        } else {
            which.extend(woken);
            which.sort_unstable();
            which.dedup();
        }
        let mut shut = Vec::new();
        let mut idle = Vec::new();
        let Self {
            files,
            buf,
            head_buf,
            counters,
            config,
            next_key,
            join,
            skipped,
            closed,
            attention,
            ..
        } = self;
        for i in which {
            let w = &mut files[i];
            let mut ctx = PollCtx {
                buf,
                head_buf,
                counters,
                next_key,
                now,
                rotate_wait: config.rotate_wait,
                close_idle: config.close_idle,
                join,
                max_line_bytes: config.max_line_bytes,
                gzip: config.gzip,
                skipped,
                closed,
                report: &mut report,
            };
            let fate = ctx.poll_file(w, sink);
            w.written = false;
            match fate {
                Fate::Close => shut.push(i),
                Fate::Idle => idle.push(i),
                Fate::Keep if w.needs_attention() => attention.push(i),
                Fate::Keep => {}
            }
        }
        let truncated = report
            .events
            .iter()
            .any(|e| matches!(e, Event::Truncated { .. }));
        if !shut.is_empty() || !idle.is_empty() || truncated {
            self.layout += 1;
            self.settle(&shut, &idle);
            // Indices or keys changed: the next poll looks at every file.
            self.index_valid = false;
            self.poll_all = true;
            self.attention.clear();
        }
        report
    }

    /// Records that every line of file `key` up to `end` (a
    /// [`Line::end`](crate::lines::Line::end) handed out for it) was
    /// delivered. Acknowledgements for a file closed or truncated since, or
    /// behind an earlier one, change nothing.
    pub fn ack(&mut self, key: FileKey, end: u64) {
        self.reindex();
        if let Some(w) = self.keys.get(&key).map(|&i| &mut self.files[i]) {
            if end > w.acked && end <= w.splitter.offset() {
                w.acked = end;
            }
        }
    }

    /// What the tailer has done so far.
    pub fn counters(&self) -> Counters {
        Counters {
            files_watched: (self.files.len() + self.idle.len()) as u64,
            files_open: self.files.len() as u64,
            ..self.counters
        }
    }

    /// Bytes of the open files, as of the last poll, that are not
    /// acknowledged yet: 0 when every byte written is delivered.
    pub fn bytes_behind(&self) -> u64 {
        self.files
            .iter()
            .map(|w| match &w.gz {
                // Decompressed offsets: the whole file until it is read
                // and acknowledged.
                Some(gz) if gz.done && w.acked >= w.splitter.offset() => 0,
                Some(_) => w.last_size,
                None => w.last_size.saturating_sub(w.acked),
            })
            .sum()
    }
}
