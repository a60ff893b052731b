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

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::checkpoint::{Checkpoints, FileCheckpoint};
use crate::container::{self, Format};
use crate::identity::{read_head, FileId, Fingerprint, Head, Identity, FINGERPRINT_BYTES};
use crate::lines::{Line, Splitter};
use crate::multiline::{self, Matcher, Multiline};

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

/// How a [`Tailer`] finds and reads files.
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
    /// The most bytes read from one file by one [`Tailer::poll`], and the
    /// size of the one read buffer all files share. Default 256 KiB.
    pub read_buffer_bytes: usize,
    /// How lines are joined into multiline records; `None` (the default)
    /// makes every line a record.
    pub multiline: Option<Multiline>,
    /// How the files' lines are read: as they are (the default), or as a
    /// container runtime's log files ([`crate::container`]), each record
    /// joined from its pieces, at most `max_line_bytes`, and handed on
    /// through [`LineSink::record`]. Not together with `multiline`.
    pub format: Format,
    /// What to do with gzip-compressed files. Default [`Gzip::Skip`].
    pub gzip: Gzip,
    /// How long a file that is read to its end and acknowledged may stay
    /// unwritten before its descriptor is closed; it stays known by
    /// identity and is opened again when it is written. Default 30 s.
    pub close_idle: Duration,
}

/// What a [`Tailer`] does with a gzip-compressed file its globs match.
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

/// Why [`Tailer::new`] refused a configuration.
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

/// A directory or file that [`Tailer::rescan`] could not look at; the rescan
/// goes on with the others.
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

/// An open file that [`Tailer::poll`] could not read this time; it stays
/// open and is tried again by the next poll.
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
pub struct FileKey(u64);

/// Where a line came from.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The file, for [`Tailer::ack`].
    pub key: FileKey,
    /// The path the file was last seen at.
    pub path: &'a Path,
}

/// Receives the lines a [`Tailer`] reads: the tailer drives, pushing each
/// line while it polls, and the sink copies what it keeps (the bytes borrow
/// the tailer's read buffer).
pub trait LineSink {
    /// One line, in file order within its file.
    fn line(&mut self, origin: &Origin<'_>, line: &Line<'_>);

    /// One record of a container log file ([`TailerConfig::format`]), in
    /// the order of its first piece within its file. A record with
    /// [`hold`](container::Record::hold) set must reach the same batch as
    /// the record after it, which comes in the same poll. By default, its
    /// line goes to [`LineSink::line`].
    fn record(&mut self, origin: &Origin<'_>, record: &container::Record<'_>) {
        self.line(origin, &record.line);
    }
}

/// What a [`Tailer`] has done since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Files followed now, open or idle.
    pub files_watched: u64,
    /// Files with an open descriptor now (the others are idle:
    /// [`TailerConfig::close_idle`]).
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
    /// Records made of more than one line ([`TailerConfig::multiline`]).
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
    /// Its end: [`ReadFrom::End`] at the first start.
    End,
    /// Its beginning, because it is shorter than its checkpoint says: it
    /// was truncated while no tailer ran.
    Truncated,
}

/// What one [`Tailer::rescan`] found.
#[derive(Debug, Default)]
pub struct RescanReport {
    /// Directories and files that could not be looked at; the rest of the
    /// scan was done regardless.
    pub errors: Vec<ScanError>,
    /// What happened to files, in the order it was noticed.
    pub events: Vec<Event>,
}

/// What one [`Tailer::poll`] did.
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

/// Where an include glob can match: the directory to walk and how deep.
pub(crate) struct Root {
    pub(crate) base: PathBuf,
    /// How many path components below `base` a match can be; `None` with
    /// `**`.
    pub(crate) depth: Option<usize>,
}

/// What [`PollCtx::poll_file`] makes of a file.
enum Fate {
    /// It stays open.
    Keep,
    /// It is closed and forgotten.
    Close,
    /// Its descriptor is closed, and it is known as an [`Idle`] file.
    Idle,
}

/// A file read to its end, with every line acknowledged, that stayed
/// unwritten for [`TailerConfig::close_idle`]: its descriptor is closed
/// and it is known by identity until it is written (and opened again),
/// gone, or renamed.
struct Idle {
    key: FileKey,
    head: Fingerprint,
    path: PathBuf,
    /// Its size when it went idle, read and acknowledged.
    offset: u64,
    /// Its modification time then.
    mtime: (i64, i64),
    rotated: bool,
}

/// Keeps the offset of a gone file closed while it still has a name, in
/// case a rescan finds it again; at most [`CLOSED_KEPT`] of them.
fn remember(
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

/// What one walk of the roots found.
struct Walk {
    /// The files that match, one path each, with their metadata.
    found: Vec<(PathBuf, Metadata)>,
    /// Known files found at the paths they are known at
    /// ([`Tailer::rescan_quick`]).
    known: Vec<(PathBuf, FileId)>,
    /// The regular files that do not match, by the inode number their
    /// directory entry gives.
    others: HashMap<u64, PathBuf>,
}

/// What [`Tailer::open`] found at a path.
enum Opened {
    /// A file not open yet, now open.
    New(Box<Watched>),
    /// The open file at this index.
    Known(usize),
    /// The idle file with this device and inode.
    KnownIdle(FileId),
    /// A compressed file, now in [`Tailer`]'s skipped set.
    Skipped,
    /// No regular file.
    NotAFile,
}

struct Watched {
    key: FileKey,
    file: File,
    id: FileId,
    head: Fingerprint,
    path: PathBuf,
    /// Found at a matching path by the last rescan.
    linked: bool,
    /// Renamed, or gone from the globs, since it was found.
    rotated: bool,
    /// Reported written ([`Tailer::mark_written`]) since its last read.
    written: bool,
    /// Its last read stopped before its end.
    backlog: bool,
    /// Found through a symbolic link: inotify reports its writes in its
    /// target's directory, which may not be watched, so every poll reads it.
    via_link: bool,
    splitter: Splitter,
    /// The record being built, with [`TailerConfig::multiline`] or a
    /// container [`TailerConfig::format`].
    joining: Joining,
    /// A gzip file being read ([`Gzip::Read`]).
    gz: Option<Gz>,
    /// File offset just after the last acknowledged line.
    acked: u64,
    /// Size and modification time at the last poll, to skip the head check
    /// of a file that has not changed.
    last_size: u64,
    last_mtime: (i64, i64),
    /// When bytes were last read, or the file was found, renamed or gone:
    /// `rotate_wait` counts from there.
    active_at: Instant,
}

/// The files of one log source; see the [module docs](self).
pub struct Tailer {
    config: TailerConfig,
    roots: Vec<Root>,
    join: Join,
    include: GlobSet,
    exclude_path: GlobSet,
    exclude_name: GlobSet,
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
    /// At most [`CLOSED_KEPT`] entries.
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
        let join = match &config.multiline {
            None if config.format == Format::Lines => Join::Lines,
            None => Join::Container(config.format),
            Some(_) if config.format != Format::Lines => {
                return Err(BuildError::MultilineAndFormat)
            }
            Some(m) if m.max_lines == 0 => {
                return Err(BuildError::Zero {
                    key: "multiline.max_lines",
                })
            }
            Some(m) if m.max_bytes == 0 => {
                return Err(BuildError::Zero {
                    key: "multiline.max_bytes",
                })
            }
            Some(m) => Join::Multiline(Matcher::new(m).map_err(|source| BuildError::Regex {
                pattern: match &m.rule {
                    crate::multiline::Rule::Start(p) => p.clone(),
                    crate::multiline::Rule::Preset(p) => format!("{p:?}"),
                },
                error: source,
            })?),
        };
        let glob = |pattern: &str| {
            GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|source| BuildError::Glob {
                    pattern: pattern.to_owned(),
                    error: source,
                })
        };
        let set = |b: GlobSetBuilder| b.build().map_err(BuildError::Set);
        let mut include = GlobSetBuilder::new();
        let mut roots = Vec::new();
        for pattern in &config.include {
            if !Path::new(pattern).is_absolute() {
                return Err(BuildError::Relative {
                    pattern: pattern.clone(),
                });
            }
            include.add(glob(pattern)?);
            roots.push(root_of(pattern));
        }
        let (mut exclude_path, mut exclude_name) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        for pattern in &config.exclude {
            if pattern.contains('/') {
                exclude_path.add(glob(pattern)?);
            } else {
                exclude_name.add(glob(pattern)?);
            }
        }
        Ok(Self {
            buf: vec![0; config.read_buffer_bytes],
            config,
            roots,
            join,
            include: set(include)?,
            exclude_path: set(exclude_path)?,
            exclude_name: set(exclude_name)?,
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

    /// Walks the include globs' directories: opens the matching files not
    /// open yet, notes open files found at another path (renamed) or at no
    /// matching path (renamed away or deleted). Checkpoints given to
    /// [`Tailer::new`] that name no file found by the first rescan that
    /// could look everywhere are dropped: their files are gone.
    ///
    /// Returns the directories and files that could not be looked at (the
    /// rest of the scan is done regardless) and what happened to files.
    pub fn rescan(&mut self, now: Instant) -> RescanReport {
        let mut errors = Vec::new();
        let walk = self.walk(&mut errors, false);
        self.take(walk, errors, now)
    }

    /// [`Tailer::rescan`] for a caller that reports every write through
    /// [`Tailer::mark_written`] (inotify, without an overflow since the last
    /// full rescan): a directory entry that names a known file at the path
    /// it is known at, by the same inode number, is that file, taken
    /// without a `stat` or a glob match. An idle file written is then woken
    /// by its mark rather than by the size the `stat` would show, so a
    /// rescan costs a directory read and a lookup per file.
    pub fn rescan_quick(&mut self, now: Instant) -> RescanReport {
        self.reindex();
        let mut errors = Vec::new();
        let walk = self.walk(&mut errors, true);
        self.take(walk, errors, now)
    }

    /// Opens, relinks or marks gone the files as `found` by a walk.
    ///
    /// A path the walk stat-ed may name another file by the time it is
    /// opened (rotations rename while the walk runs), so the file opened is
    /// known by the inode of its descriptor, and every file opened here
    /// joins the map at once: a later path of the same walk that turns out
    /// to be the same file relinks it instead of opening it a second time
    /// (which would read it twice).
    fn take(&mut self, walk: Walk, mut errors: Vec<ScanError>, now: Instant) -> RescanReport {
        let Walk {
            found,
            known,
            others,
        } = walk;
        let before = self.files.len();
        let mut by_id: HashMap<FileId, usize> = self
            .files
            .iter()
            .enumerate()
            .map(|(i, w)| (w.id, i))
            .collect();
        let mut seen = HashSet::new();
        let mut idle_seen = HashSet::new();
        for (path, id) in known {
            match by_id.get(&id) {
                Some(&i) => {
                    seen.insert(i);
                    self.relink(i, path, now);
                }
                None => {
                    idle_seen.insert(id);
                }
            }
        }
        let mut skipped = HashSet::new();
        for (path, meta) in found {
            let id = FileId::of(&meta);
            if self.skipped.contains(&id) {
                skipped.insert(id);
                continue;
            }
            if let Some(&i) = by_id.get(&id) {
                // An open file keeps its inode, so the same device and inode
                // is the same file, wherever it is now.
                seen.insert(i);
                self.relink(i, path, now);
                continue;
            }
            if self.idle.contains_key(&id) {
                // So does an idle one: its inode cannot be reused while it
                // has a name, and it has this one.
                idle_seen.insert(id);
                self.relink_idle(id, path, Some(&meta));
                continue;
            }
            match self.open(&path, now, &by_id) {
                Ok(Opened::New(w)) => {
                    by_id.insert(w.id, self.files.len());
                    self.files.push(*w);
                }
                Ok(Opened::Known(i)) => {
                    seen.insert(i);
                    self.relink(i, path, now);
                }
                Ok(Opened::KnownIdle(id)) => {
                    idle_seen.insert(id);
                    self.relink_idle(id, path, None);
                }
                Ok(Opened::Skipped) => {
                    skipped.insert(id);
                }
                Ok(Opened::NotAFile) => {}
                Err(source) => errors.push(ScanError::Open {
                    path,
                    error: source,
                }),
            }
        }
        // Compressed files no longer found are forgotten, so that a new file
        // at a reused inode is looked at afresh.
        if errors.is_empty() {
            self.skipped.retain(|id| skipped.contains(id));
        }
        for (i, w) in self.files.iter_mut().enumerate() {
            if i < before && !seen.contains(&i) && w.linked {
                w.linked = false;
                w.rotated = true;
                // The writer may not have reopened yet: `rotate_wait` counts
                // from the rotation, not from the last write before it.
                w.active_at = now;
                // Deleted files are not rotations; renamed-away ones are.
                let deleted = w.file.metadata().is_ok_and(|m| m.nlink() == 0);
                if !deleted {
                    self.counters.rotations += 1;
                }
                self.events.push(Event::Gone {
                    path: w.path.clone(),
                    deleted,
                });
            }
        }
        if errors.is_empty() {
            let gone: Vec<FileId> = (self.idle.keys())
                .filter(|id| !idle_seen.contains(id))
                .copied()
                .collect();
            for id in gone {
                self.idle_gone(id, others.get(&id.ino), now);
            }
        }
        // Checkpoints that name no file found are of files gone while no
        // tailer ran, unless the scan could not look everywhere.
        if errors.is_empty() && !self.restored.is_empty() {
            self.restored.clear();
            self.layout += 1;
        }
        if !self.events.is_empty() {
            self.layout += 1;
        }
        self.scanned = true;
        self.index_valid = false;
        self.poll_all = true;
        RescanReport {
            errors,
            events: std::mem::take(&mut self.events),
        }
    }

    /// Reads what each open file appended since the last poll (at most
    /// [`TailerConfig::read_buffer_bytes`] per file) and pushes every line
    /// completed into `sink`; hands back the waiting last lines of rotated
    /// files quiet for `rotate_wait` by `now`, and closes the gone files
    /// that are read, acknowledged and quiet.
    pub fn poll(&mut self, now: Instant, sink: &mut impl LineSink) -> PollReport {
        self.poll_where(now, sink, true)
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

    /// Drops the files at the indices in `shut` and makes those in `idle`
    /// idle (both ascending), in one pass over `files`.
    fn settle(&mut self, shut: &[usize], idle: &[usize]) {
        let (mut shut, mut idle) = (shut.iter().peekable(), idle.iter().peekable());
        let files = std::mem::take(&mut self.files);
        self.files.reserve(files.len());
        for (i, w) in files.into_iter().enumerate() {
            if shut.next_if_eq(&&i).is_some() {
                continue;
            }
            if idle.next_if_eq(&&i).is_some() {
                self.idle_paths.insert(w.path.clone(), w.id);
                self.idle.insert(
                    w.id,
                    Idle {
                        key: w.key,
                        head: w.head,
                        path: w.path,
                        offset: w.acked,
                        mtime: w.last_mtime,
                        rotated: w.rotated,
                    },
                );
                continue;
            }
            self.files.push(w);
        }
    }

    /// Records that every line of file `key` up to `end` (a [`Line::end`]
    /// handed out for it) was delivered. Acknowledgements for a file closed
    /// or truncated since, or behind an earlier one, change nothing.
    pub fn ack(&mut self, key: FileKey, end: u64) {
        self.reindex();
        if let Some(w) = self.keys.get(&key).map(|&i| &mut self.files[i]) {
            if end > w.acked && end <= w.splitter.offset() {
                w.acked = end;
            }
        }
    }

    /// The checkpoints to save: per open file, its identity, path and the
    /// offset after its last acknowledged line; and the checkpoints given to
    /// [`Tailer::new`] that no rescan has matched or dropped yet.
    pub fn checkpoints(&self) -> Checkpoints {
        let open = self.files.iter().map(|w| w.checkpoint(w.acked));
        Checkpoints {
            files: open
                .chain(self.idle_checkpoints())
                .chain(self.restored.values().cloned())
                .collect(),
        }
    }

    /// Changes whenever [`Tailer::checkpoints`] may differ from the last
    /// call by more than the offsets of open files (a file found, closed,
    /// gone idle, moved, truncated or advanced): while it stays the same,
    /// [`Tailer::open_checkpoints`] holds every checkpoint that changed.
    pub fn layout(&self) -> u64 {
        self.layout
    }

    /// The checkpoints of the open files alone; see [`Tailer::layout`].
    pub fn open_checkpoints(&self) -> Vec<FileCheckpoint> {
        self.files.iter().map(|w| w.checkpoint(w.acked)).collect()
    }

    fn idle_checkpoints(&self) -> impl Iterator<Item = FileCheckpoint> + '_ {
        self.idle.iter().map(|(&id, f)| FileCheckpoint {
            identity: Identity { id, head: f.head },
            path: f.path.to_string_lossy().into_owned(),
            offset: f.offset,
        })
    }

    /// The checkpoints as if every line handed out so far were
    /// acknowledged: per open file, the offset after its last complete
    /// line read (a waiting partial line is not counted), and the restored
    /// checkpoints no rescan has taken up yet. A sink that stores offsets
    /// together with the lines it delivered (Kafka transactions) saves
    /// these, taken right after the lines it holds were read.
    pub fn positions(&self) -> Checkpoints {
        let open = self.files.iter().map(|w| {
            let read = (w.joining.start())
                .or(w.splitter.waiting())
                .unwrap_or(w.splitter.offset());
            w.checkpoint(read)
        });
        Checkpoints {
            files: open
                .chain(self.idle_checkpoints())
                .chain(self.restored.values().cloned())
                .collect(),
        }
    }

    /// Takes up `checkpoints` that are further on than this tailer: offsets
    /// a sink stored together with the lines it delivered (Kafka
    /// transactions), which may be ahead of the checkpoint file. For each
    /// checkpoint naming an open file (same device and inode, and a head
    /// that still matches) at an offset within the file, the lines before
    /// that offset count as acknowledged, and reading skips to it if it is
    /// not there yet. Returns those files and offsets: lines of them read
    /// already and starting below the offset were delivered before, and the
    /// caller drops them. Checkpoints naming no open file change nothing
    /// (before the first rescan they are kept for it).
    pub fn advance(&mut self, checkpoints: &Checkpoints) -> Vec<(FileKey, u64)> {
        self.layout += 1;
        let mut floors = Vec::new();
        for c in &checkpoints.files {
            let Some(w) = self.files.iter_mut().find(|w| w.id == c.identity.id) else {
                // An idle file was read to its end and every line of it
                // acknowledged: no stored position is ahead of it.
                if !self.scanned && !self.idle.contains_key(&c.identity.id) {
                    let ahead = self
                        .restored
                        .get(&c.identity.id)
                        .is_none_or(|r| r.identity != c.identity || r.offset < c.offset);
                    if ahead {
                        self.restored.insert(c.identity.id, c.clone());
                    }
                }
                continue;
            };
            let Ok(head) = read_head(&w.file, &mut self.head_buf) else {
                continue;
            };
            if c.identity.recognise(w.id, head).is_none() {
                continue;
            }
            let size = w.file.metadata().map_or(0, |m| m.len());
            if (c.offset > size && w.gz.is_none()) || c.offset <= w.acked {
                continue;
            }
            if c.offset > w.splitter.offset() {
                w.splitter.reset(c.offset);
                if let Some(gz) = &mut w.gz {
                    *gz = Gz::new(c.offset);
                }
            }
            w.acked = c.offset;
            w.joining.drop_below(c.offset);
            floors.push((w.key, c.offset));
        }
        floors
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

    fn relink(&mut self, i: usize, path: PathBuf, now: Instant) {
        let w = &mut self.files[i];
        w.linked = true;
        if w.path != path {
            let from = std::mem::replace(&mut w.path, path);
            self.events.push(Event::Renamed {
                from,
                to: w.path.clone(),
            });
            w.rotated = true;
            w.active_at = now;
            self.counters.rotations += 1;
        }
    }

    /// Notes an idle file found at `path` by a rescan, with the metadata
    /// the walk got (`None`: none, as when it was met by opening).
    fn relink_idle(&mut self, id: FileId, path: PathBuf, meta: Option<&Metadata>) {
        let Some(f) = self.idle.get_mut(&id) else {
            return;
        };
        if f.path != path {
            self.idle_paths.remove(&f.path);
            self.idle_paths.insert(path.clone(), id);
            let from = std::mem::replace(&mut f.path, path);
            self.events.push(Event::Renamed {
                from,
                to: f.path.clone(),
            });
            f.rotated = true;
            self.counters.rotations += 1;
        }
        // Written while idle, and inotify did not say (or is not used):
        // opened again by the next poll.
        if meta.is_none_or(|m| (m.len(), mtime_of(m)) != (f.offset, f.mtime)) {
            self.woken.push(id);
        }
    }

    /// An idle file at no matching path. Renamed within a directory
    /// walked (found at `moved` by the inode of its entry), it is opened
    /// there and read to its end like any file gone from the globs, since
    /// its writer may not have reopened yet; otherwise it is forgotten.
    fn idle_gone(&mut self, id: FileId, moved: Option<&PathBuf>, now: Instant) {
        let Some(f) = self.idle.remove(&id) else {
            return;
        };
        self.idle_paths.remove(&f.path);
        let file = moved
            .and_then(|at| File::open(at).ok())
            .filter(|file| file.metadata().is_ok_and(|m| FileId::of(&m) == id));
        self.events.push(Event::Gone {
            path: f.path.clone(),
            deleted: file.is_none(),
        });
        match (file, moved) {
            (Some(file), Some(at)) => {
                self.counters.rotations += 1;
                self.counters.files_reopened += 1;
                let mut w = self.watched(id, f, file, now);
                w.path = at.clone();
                w.linked = false;
                w.rotated = true;
                self.files.push(w);
            }
            _ => {
                self.events.push(Event::Closed {
                    path: f.path.clone(),
                });
                remember(&mut self.closed, id, f.head, &f.path, f.offset);
            }
        }
    }

    /// Opens the idle files found written at their paths, if the paths
    /// still name them; a file found elsewhere, or gone, stays idle until
    /// the rescan its move or deletion causes. Returns the indices in
    /// `files` of those opened.
    fn wake(&mut self, now: Instant, report: &mut PollReport) -> Vec<usize> {
        let mut opened = Vec::new();
        for id in std::mem::take(&mut self.woken) {
            let Some(path) = self.idle.get(&id).map(|f| f.path.clone()) else {
                continue;
            };
            let file = match File::open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(source) => {
                    report.errors.push(ReadError {
                        path,
                        error: source,
                    });
                    continue;
                }
            };
            if !file.metadata().is_ok_and(|m| FileId::of(&m) == id) {
                continue;
            }
            let Some(f) = self.idle.remove(&id) else {
                continue;
            };
            self.idle_paths.remove(&f.path);
            self.counters.files_reopened += 1;
            let w = self.watched(id, f, file, now);
            opened.push(self.files.len());
            self.files.push(w);
        }
        opened
    }

    /// An idle file, open again as `file`. Its head and size are checked
    /// by the first read.
    fn watched(&mut self, id: FileId, f: Idle, file: File, now: Instant) -> Watched {
        let via_link = fs::symlink_metadata(&f.path).is_ok_and(|m| m.file_type().is_symlink());
        self.index_valid = false;
        Watched {
            key: f.key,
            file,
            id,
            head: f.head,
            path: f.path,
            linked: true,
            rotated: f.rotated,
            written: false,
            backlog: false,
            via_link,
            splitter: Splitter::new(f.offset, self.config.max_line_bytes),
            joining: Joining::new(&self.join),
            gz: None,
            acked: f.offset,
            last_size: f.offset,
            // Never a real time: the first poll checks the head.
            last_mtime: (i64::MIN, 0),
            active_at: now,
        }
    }

    /// Opens a newly found file and decides where reading starts.
    fn open(
        &mut self,
        path: &Path,
        now: Instant,
        open: &HashMap<FileId, usize>,
    ) -> io::Result<Opened> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(Opened::NotAFile);
        }
        let id = FileId::of(&meta);
        if let Some(&i) = open.get(&id) {
            // The path was replaced between the walk's stat and the open,
            // by a file that is open already.
            return Ok(Opened::Known(i));
        }
        if self.idle.contains_key(&id) {
            return Ok(Opened::KnownIdle(id));
        }
        let head = read_head(&file, &mut self.head_buf)?;
        let gz = is_gzip(head) && self.config.gzip == Gzip::Read;
        if is_gzip(head) && !gz {
            self.skipped.insert(id);
            self.counters.files_skipped += 1;
            self.events.push(Event::Skipped {
                path: path.to_path_buf(),
            });
            return Ok(Opened::Skipped);
        }
        let size = meta.len();
        let mut offset = 0;
        let mut from = Start::Beginning;
        let fingerprint = Fingerprint::of(head);
        let restored = self
            .restored
            .remove(&id)
            .or_else(|| self.closed.remove(&id));
        if let Some(checkpoint) = &restored {
            if checkpoint.identity.recognise(id, head).is_none() {
                self.events.push(Event::Reused {
                    path: path.to_path_buf(),
                });
            } else if checkpoint.offset <= size || gz {
                // A gzip file's offsets count decompressed bytes.
                offset = checkpoint.offset;
                from = Start::Checkpoint;
            } else {
                // Truncated while no tailer ran, below the checkpoint.
                self.counters.truncations += 1;
                from = Start::Truncated;
            }
        } else if self.fresh && !self.scanned && self.config.read_from == ReadFrom::End && !gz {
            offset = line_start_before(&file, size, &mut self.buf)?;
            from = Start::End;
        }
        self.events.push(Event::Opened {
            path: path.to_path_buf(),
            offset,
            from,
        });
        let key = FileKey(self.next_key);
        self.next_key += 1;
        Ok(Opened::New(Box::new(Watched {
            key,
            file,
            id,
            head: fingerprint,
            path: path.to_path_buf(),
            linked: true,
            rotated: false,
            splitter: Splitter::new(offset, self.config.max_line_bytes),
            joining: Joining::new(&self.join),
            gz: gz.then(|| Gz::new(offset)),
            written: false,
            backlog: false,
            via_link: fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()),
            acked: offset,
            last_size: size,
            // Never a real time: the first poll checks the head.
            last_mtime: (i64::MIN, 0),
            active_at: now,
        })))
    }

    /// The regular files under the roots that match, one path per file.
    fn walk(&self, errors: &mut Vec<ScanError>, quick: bool) -> Walk {
        let mut out: Vec<(PathBuf, Metadata)> = Vec::new();
        let mut known = Vec::new();
        let mut others = HashMap::new();
        let mut ids = HashSet::new();
        let mut dirs_seen = HashSet::new();
        for root in &self.roots {
            let mut stack = vec![(root.base.clone(), root.depth)];
            while let Some((dir, depth)) = stack.pop() {
                if !dirs_seen.insert((dir.clone(), depth)) {
                    continue;
                }
                let entries = match fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    // A directory that does not exist yet may come later.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(source) => {
                        errors.push(ScanError::ReadDir {
                            path: dir,
                            error: source,
                        });
                        continue;
                    }
                };
                // In name order, each name taken once: a sort by a key
                // made per comparison would allocate it every time.
                let mut names: Vec<_> = entries.filter_map(Result::ok).collect();
                names.sort_by_cached_key(|e| e.file_name());
                for entry in names {
                    let path = entry.path();
                    let Ok(kind) = entry.file_type() else {
                        continue;
                    };
                    if kind.is_dir() {
                        // Symbolic links to directories are not followed, so
                        // a link loop cannot trap the walk.
                        match depth {
                            None => stack.push((path, None)),
                            Some(d) if d > 1 => stack.push((path, Some(d - 1))),
                            Some(_) => {}
                        }
                        continue;
                    }
                    if quick && kind.is_file() {
                        let id = (self.index.get(&path).map(|&i| self.files[i].id))
                            .or_else(|| self.idle_paths.get(&path).copied());
                        if let Some(id) = id.filter(|id| id.ino == entry.ino()) {
                            if ids.insert(id) {
                                known.push((path, id));
                            }
                            continue;
                        }
                    }
                    if !self.matches(&path) {
                        // The directory entry's inode, no stat: where an
                        // idle file renamed out of the globs went.
                        if kind.is_file() {
                            others.insert(entry.ino(), path);
                        }
                        continue;
                    }
                    // Follows a symbolic link to the file it names.
                    let Ok(meta) = fs::metadata(&path) else {
                        continue;
                    };
                    if meta.is_file() && ids.insert(FileId::of(&meta)) {
                        out.push((path, meta));
                    }
                }
            }
        }
        Walk {
            found: out,
            known,
            others,
        }
    }

    fn matches(&self, path: &Path) -> bool {
        self.include.is_match(path)
            && !self.exclude_path.is_match(path)
            && !path
                .file_name()
                .is_some_and(|name| self.exclude_name.is_match(name))
    }
}

impl Watched {
    /// Its checkpoint at `offset`.
    fn checkpoint(&self, offset: u64) -> FileCheckpoint {
        FileCheckpoint {
            identity: Identity {
                id: self.id,
                head: self.head,
            },
            path: self.path.to_string_lossy().into_owned(),
            offset,
        }
    }

    /// Whether [`Tailer::poll_written`] reads it without a mark: it is
    /// open and its last read stopped short, inotify may not report its
    /// writes, or something timed is pending (rotated or gone, a multiline
    /// record, a gzip file being read).
    fn needs_attention(&self) -> bool {
        self.backlog
            || self.via_link
            || self.rotated
            || self.joining.start().is_some()
            || self.gz.as_ref().is_some_and(|g| !g.done)
    }
}

/// A file's modification time, seconds and nanoseconds.
fn mtime_of(meta: &Metadata) -> (i64, i64) {
    (meta.mtime(), meta.mtime_nsec())
}

struct PollCtx<'a> {
    buf: &'a mut [u8],
    head_buf: &'a mut [u8; FINGERPRINT_BYTES],
    counters: &'a mut Counters,
    next_key: &'a mut u64,
    now: Instant,
    rotate_wait: Duration,
    close_idle: Duration,
    join: &'a Join,
    max_line_bytes: usize,
    gzip: Gzip,
    skipped: &'a mut HashSet<FileId>,
    closed: &'a mut HashMap<FileId, FileCheckpoint>,
    report: &'a mut PollReport,
}

/// How a tailer's lines become records, for all its files.
#[derive(Debug)]
enum Join {
    /// Each line is a record.
    Lines,
    /// By [`TailerConfig::multiline`].
    Multiline(Matcher),
    /// By a container [`TailerConfig::format`].
    Container(Format),
}

/// The record one file is building, by its tailer's [`Join`].
#[derive(Debug)]
enum Joining {
    Lines,
    Multiline(multiline::Joiner),
    Container(container::Joiner),
}

impl Joining {
    fn new(join: &Join) -> Self {
        match join {
            Join::Lines => Joining::Lines,
            Join::Multiline(_) => Joining::Multiline(multiline::Joiner::default()),
            Join::Container(_) => Joining::Container(container::Joiner::default()),
        }
    }

    /// The start offset of the earliest record not handed on yet.
    fn start(&self) -> Option<u64> {
        match self {
            Joining::Lines => None,
            Joining::Multiline(j) => j.start(),
            Joining::Container(j) => j.start(),
        }
    }

    /// When the record being built times out.
    fn due(&self, join: &Join) -> Option<Instant> {
        match (self, join) {
            (Joining::Multiline(j), Join::Multiline(m)) => j.due(m),
            (Joining::Container(j), _) => j.due(),
            _ => None,
        }
    }

    /// Drops what starts below `offset`: delivered before a restart.
    fn drop_below(&mut self, offset: u64) {
        match self {
            Joining::Lines => {}
            Joining::Multiline(j) => j.drop_below(offset),
            Joining::Container(j) => j.drop_below(offset),
        }
    }

    /// Forgets everything, as after a truncation.
    fn reset(&mut self) {
        match self {
            Joining::Lines => {}
            Joining::Multiline(j) => j.reset(),
            Joining::Container(j) => j.reset(),
        }
    }
}

/// Where a poll's lines go: counted, then through the file's [`Joining`],
/// to the sink.
struct Hand<'c, S> {
    counters: &'c mut Counters,
    report: &'c mut PollReport,
    join: &'c Join,
    max_line_bytes: usize,
    now: Instant,
    sink: &'c mut S,
}

impl<S: LineSink> Hand<'_, S> {
    fn line(&mut self, joining: &mut Joining, origin: &Origin<'_>, line: &Line<'_>) {
        count(self.counters, self.report, line);
        let sink = &mut *self.sink;
        match (joining, self.join) {
            (Joining::Multiline(j), Join::Multiline(m)) => {
                j.push(m, line, self.now, self.counters, |record| {
                    sink.line(origin, record);
                });
            }
            (Joining::Container(j), &Join::Container(format)) => {
                let limits = (self.max_line_bytes, self.now);
                j.push(format, line, limits, self.counters, &mut |record| {
                    sink.record(origin, record);
                });
            }
            _ => sink.line(origin, line),
        }
    }

    /// Hands on the record `joining` is building, if any; `consumed` is
    /// the end offset of the file's last line pushed.
    fn flush(&mut self, joining: &mut Joining, origin: &Origin<'_>, consumed: u64) {
        let sink = &mut *self.sink;
        match joining {
            Joining::Lines => {}
            Joining::Multiline(j) => j.flush(self.counters, &mut |record: &Line<'_>| {
                sink.line(origin, record);
            }),
            Joining::Container(j) => j.flush(consumed, self.counters, &mut |record| {
                sink.record(origin, record);
            }),
        }
    }
}

impl PollCtx<'_> {
    fn hand<'c, S>(&'c mut self, sink: &'c mut S) -> Hand<'c, S> {
        Hand {
            counters: self.counters,
            report: self.report,
            join: self.join,
            max_line_bytes: self.max_line_bytes,
            now: self.now,
            sink,
        }
    }

    /// Polls one file; returns what becomes of it.
    fn poll_file(&mut self, w: &mut Watched, sink: &mut impl LineSink) -> Fate {
        match self.read_file(w, sink) {
            Err(source) => {
                self.report.errors.push(ReadError {
                    path: w.path.clone(),
                    error: source,
                });
                return Fate::Keep;
            }
            Ok(Read::Compressed) => {
                self.skipped.insert(w.id);
                self.counters.files_skipped += 1;
                self.report.events.push(Event::Skipped {
                    path: w.path.clone(),
                });
                return Fate::Close;
            }
            Ok(Read::Text) => {}
        }
        let quiet = self.now.saturating_duration_since(w.active_at) >= self.rotate_wait;
        let origin = Origin {
            key: w.key,
            path: &w.path,
        };
        let now = self.now;
        let join = self.join;
        let mut hand = self.hand(sink);
        // A gzip file read to its end is done with like a rotated one: its
        // last line without a newline will never get one.
        let done_with = (w.rotated || w.gz.as_ref().is_some_and(|g| g.done)) && quiet;
        if done_with && w.splitter.waiting().is_some() {
            let joining = &mut w.joining;
            w.splitter.flush(|line| hand.line(joining, &origin, line));
        }
        let timed_out = w.joining.due(join).is_some_and(|due| now >= due);
        if timed_out || done_with {
            let consumed = w.splitter.waiting().unwrap_or(w.splitter.offset());
            hand.flush(&mut w.joining, &origin, consumed);
        }
        if let Some(due) = w.joining.due(join) {
            let at = &mut self.report.flush_at;
            *at = Some(at.map_or(due, |at| at.min(due)));
        }
        let read_all = match &w.gz {
            Some(gz) => gz.done,
            None => w.splitter.offset() >= w.last_size,
        };
        let drained = read_all && w.splitter.waiting().is_none() && w.joining.start().is_none();
        let done = drained && w.acked >= w.splitter.offset();
        if !w.linked && done && quiet {
            self.report.events.push(Event::Closed {
                path: w.path.clone(),
            });
            if w.file.metadata().is_ok_and(|m| m.nlink() > 0) {
                remember(self.closed, w.id, w.head, &w.path, w.acked);
            }
            return Fate::Close;
        }
        let unwritten = self.now.saturating_duration_since(w.active_at) >= self.close_idle;
        // A file found through a symbolic link stays open: inotify reports
        // its writes in its target's directory, which may not be watched.
        if w.linked && done && w.gz.is_none() && !w.via_link && unwritten {
            return Fate::Idle;
        }
        Fate::Keep
    }

    fn read_file(&mut self, w: &mut Watched, sink: &mut impl LineSink) -> io::Result<Read> {
        if w.gz.is_some() {
            return self.read_gz(w, sink).map(|()| Read::Text);
        }
        let meta = w.file.metadata()?;
        let size = meta.len();
        let mtime = mtime_of(&meta);
        if size != w.last_size || mtime != w.last_mtime {
            let mut truncated = size < w.splitter.offset();
            let head = read_head(&w.file, self.head_buf)?;
            match w.head.check(head) {
                Head::Same(now) if !truncated => w.head = now,
                _ => truncated = true,
            }
            if truncated {
                self.restart(w, sink);
                let head = read_head(&w.file, self.head_buf)?;
                w.head = Fingerprint::of(head);
            }
            w.last_size = size;
            w.last_mtime = mtime;
        }
        let offset = w.splitter.offset();
        w.backlog = false;
        if offset >= size {
            return Ok(Read::Text);
        }
        let want = ((size - offset) as usize).min(self.buf.len());
        let n = loop {
            match w.file.read_at(&mut self.buf[..want], offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        if n == 0 {
            return Ok(Read::Text);
        }
        if offset == 0 && is_gzip(&self.buf[..n]) {
            // Empty when found, and gzip's output now.
            if self.gzip == Gzip::Skip {
                return Ok(Read::Compressed);
            }
            w.gz = Some(Gz::new(0));
            return self.read_gz(w, sink).map(|()| Read::Text);
        }
        w.backlog = offset + (n as u64) < size;
        self.report.more |= w.backlog;
        self.split(w, n, sink);
        Ok(Read::Text)
    }

    /// Reads the next decompressed bytes of a gzip file.
    fn read_gz(&mut self, w: &mut Watched, sink: &mut impl LineSink) -> io::Result<()> {
        let Some(gz) = w.gz.as_mut() else {
            return Ok(());
        };
        let meta = w.file.metadata()?;
        let (size, mtime) = (meta.len(), mtime_of(&meta));
        if gz.done && (size, mtime) == (w.last_size, w.last_mtime) {
            return Ok(());
        }
        if gz.done {
            gz.done = false;
            if size > w.last_size {
                // Another member appended (`cat a.gz b.gz`): read on.
                gz.restart(w.splitter.offset());
            } else {
                // Rewritten in place: another file's content, read from
                // its start as a truncated file would be.
                gz.restart(0);
                self.restart(w, sink);
                return Ok(());
            }
        }
        w.last_size = size;
        w.last_mtime = mtime;
        let n = match gz.read(&w.file, self.buf) {
            Ok(n) => n,
            // Cut short: still being written. Read again from the start
            // next time, skipping what the splitter has.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                gz.restart(w.splitter.offset());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            gz.done = true;
            return Ok(());
        }
        self.report.more = true;
        self.split(w, n, sink);
        Ok(())
    }

    /// Hands the `n` bytes just read into the buffer to `w`'s splitter,
    /// and its lines on.
    fn split(&mut self, w: &mut Watched, n: usize, sink: &mut impl LineSink) {
        w.active_at = self.now;
        self.counters.bytes_read += n as u64;
        self.report.bytes += n as u64;
        let origin = Origin {
            key: w.key,
            path: &w.path,
        };
        let mut hand = Hand {
            counters: self.counters,
            report: self.report,
            join: self.join,
            max_line_bytes: self.max_line_bytes,
            now: self.now,
            sink,
        };
        let joining = &mut w.joining;
        w.splitter
            .push(&self.buf[..n], |line| hand.line(joining, &origin, line));
    }

    /// The file was truncated: what it held is gone, so its waiting line
    /// and record are handed back as they are, and it is read again from 0
    /// under a new key.
    fn restart(&mut self, w: &mut Watched, sink: &mut impl LineSink) {
        let origin = Origin {
            key: w.key,
            path: &w.path,
        };
        let mut hand = self.hand(sink);
        let joining = &mut w.joining;
        w.splitter.flush(|line| hand.line(joining, &origin, line));
        hand.flush(&mut w.joining, &origin, w.splitter.offset());
        w.joining.reset();
        self.counters.truncations += 1;
        self.report.events.push(Event::Truncated {
            path: w.path.clone(),
        });
        w.key = FileKey(*self.next_key);
        *self.next_key += 1;
        w.splitter.reset(0);
        w.acked = 0;
    }
}

/// A gzip file being read: a decoder over the file from its first byte,
/// and how many decompressed bytes to drop before handing on the rest
/// (what was read before a restart or a checkpoint).
struct Gz {
    decoder: Option<flate2::read::MultiGzDecoder<FileAt>>,
    skip: u64,
    /// The decoder reached the end of the last member.
    done: bool,
}

impl Gz {
    /// A reader that hands on decompressed bytes from offset `from`.
    fn new(from: u64) -> Gz {
        Gz {
            decoder: None,
            skip: from,
            done: false,
        }
    }

    /// Starts over from the file's first byte, dropping `skip` bytes.
    fn restart(&mut self, skip: u64) {
        self.decoder = None;
        self.skip = skip;
    }

    /// Fills `buf` with the next decompressed bytes of `file` past the
    /// skip; 0 at the end.
    fn read(&mut self, file: &File, buf: &mut [u8]) -> io::Result<usize> {
        use std::io::Read as _;
        let decoder = match &mut self.decoder {
            Some(d) => d,
            None => self
                .decoder
                .insert(flate2::read::MultiGzDecoder::new(FileAt {
                    file: file.try_clone()?,
                    at: 0,
                })),
        };
        loop {
            let n = decoder.read(buf)?;
            if n == 0 || self.skip == 0 {
                return Ok(n);
            }
            let dropped = (n as u64).min(self.skip);
            self.skip -= dropped;
            if dropped < n as u64 {
                let keep = n - dropped as usize;
                buf.copy_within(dropped as usize..n, 0);
                return Ok(keep);
            }
        }
    }
}

/// A file read sequentially by `pread`, so that its descriptor's offset,
/// shared with every clone, is never moved.
struct FileAt {
    file: File,
    at: u64,
}

impl io::Read for FileAt {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// How many closed files' offsets a [`Tailer`] keeps.
const CLOSED_KEPT: usize = 4096;

/// What reading a file found.
enum Read {
    /// Text, read as lines (or nothing new).
    Text,
    /// gzip's output: the file is to be skipped.
    Compressed,
}

/// Whether `head`, a file's first bytes, is gzip's magic number (RFC 1952);
/// no text log starts with these two control bytes.
fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&[0x1f, 0x8b])
}

/// How far back from a file's end [`ReadFrom::End`] looks for the start of
/// a line still being written.
pub const END_LOOKBACK_BYTES: usize = 64 * 1024;

/// The offset of the first byte after the last newline before `size` (so
/// `size` itself if the file ends in a newline), looking back at most
/// [`END_LOOKBACK_BYTES`] (or `buf`'s length); `size` if no newline is
/// there.
fn line_start_before(file: &File, size: u64, buf: &mut [u8]) -> io::Result<u64> {
    let window = (END_LOOKBACK_BYTES.min(buf.len()) as u64).min(size);
    let from = size - window;
    let buf = &mut buf[..window as usize];
    file.read_exact_at(buf, from)?;
    Ok(match memchr::memrchr(b'\n', buf) {
        Some(nl) => from + nl as u64 + 1,
        None if from == 0 => 0,
        None => size,
    })
}

fn count(counters: &mut Counters, report: &mut PollReport, line: &Line<'_>) {
    counters.lines_read += 1;
    report.lines += 1;
    if line.is_cut() {
        counters.lines_truncated += 1;
    }
}

/// The directory to walk for `pattern` (its components before the first
/// one with a glob character) and how deep below it matches can be.
pub(crate) fn root_of(pattern: &str) -> Root {
    let is_glob = |c: &str| c.contains(['*', '?', '[', '{']);
    let components: Vec<&str> = Path::new(pattern)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let literal = components
        .iter()
        .position(|c| is_glob(c))
        .unwrap_or(components.len().saturating_sub(1));
    let mut base = PathBuf::from("/");
    base.extend(&components[..literal]);
    let rest = &components[literal..];
    Root {
        base,
        depth: (!rest.iter().any(|c| c.contains("**"))).then_some(rest.len()),
    }
}

#[cfg(test)]
mod tests;
