//! The core of sonde's log source: reading the lines of a set of files so
//! that, across rotations, truncations and restarts, none is lost and none
//! is read twice.
//!
//! Everything here is synchronous and keeps no clock: the caller drives. It
//! calls [`Tailer::rescan`] now and then to take up new files and notice
//! renamed and deleted ones, and [`Tailer::poll`] to read what the files
//! have appended; the tailer pushes each complete line into the caller's
//! [`LineSink`] as a span of its read buffer, with the line's file offsets.
//! When a line has been delivered, the caller acknowledges it with
//! [`Tailer::ack`]; [`Tailer::checkpoints`] holds, per file, the offset after
//! the last acknowledged line, which the caller saves with a
//! [`CheckpointFile`] and hands to the next [`Tailer::new`] after a restart.
//! Rescans and polls also report what happened to files (opened, renamed,
//! gone, truncated, inode reused, closed) as [`tailer::Event`]s, for the
//! caller's log, and [`Tailer::counters`] counts it all.
//!
//! # The pieces
//!
//! * [`identity`]: a file is its device and inode, checked against a
//!   CRC-32 of its first 1 KiB, so that a rename keeps the file and a reused
//!   inode does not; short and empty files have rules of their own.
//! * [`lines`]: the [`Splitter`](lines::Splitter) turns chunks into lines
//!   (`\n` ends a line, a `\r` before it is dropped, a last line waits for
//!   its newline, a line over `max_line_bytes` is cut and counted).
//! * [`multiline`]: joining the lines of one event (a stack trace) into one
//!   record, by a start pattern or a preset, so that a checkpoint never
//!   falls inside a record.
//! * [`container`]: container runtimes' log files (the kubelet's CRI
//!   format, dockerd's json-file): each line the container wrote joined
//!   from its pieces, with its time and stream, handed on through
//!   [`LineSink::record`] so that a checkpoint never falls inside one;
//!   and the pod and container a file's path names.
//! * [`counters`]: what the tailer and the joiners count as they read.
//! * [`checkpoint`]: the acknowledged offsets of a source's files, in one
//!   file written atomically and loaded only if its checksum agrees.
//! * [`tailer`]: the files of one source, followed through rename and
//!   copytruncate rotation, truncation and deletion.
//! * [`watch`]: inotify on the directories the globs reach, telling the
//!   caller when to rescan and when to poll.
//!
//! # The promise these pieces support
//!
//! A checkpoint only ever names the end of an acknowledged line, and a file
//! is resumed from it only when its identity agrees; otherwise the file is
//! read from its start. So a caller that acknowledges a line only after
//! delivering it, and saves checkpoints only from [`Tailer::checkpoints`],
//! loses no line across a crash, and reads again only lines read but not yet
//! acknowledged at the crash. Files are kept open until everything read from
//! them is acknowledged, so a rotated or deleted file is read to its end.
//!
//! Discovery is at once for a caller that rescans when the [`Watcher`]
//! (inotify on the globs' directories) wakes it: a file created, rotated
//! away from the globs and deleted between two periodic rescans is opened
//! by the rescan its creation wakes, and read to its end through the open
//! descriptor. The periodic rescan stays the safety net, for what inotify
//! misses (a watch limit reached, events lost with a queue overflow).
//!
//! What the pieces cannot promise on their own: a file that is created and
//! gone again before the caller's rescan opens it is never seen; with
//! copytruncate, lines written after the last read and before the
//! truncation are only in the copy; and a truncation hidden by a head that
//! starts with the same bytes and a size past the old offset is read as
//! growth (see [`tailer`]).
//!
//! ```
//! use std::time::Instant;
//! use sonde_logs::{CheckpointFile, Line, LineSink, Origin, Tailer, TailerConfig};
//!
//! /// Keeps what the tailer pushes: file, text and end offset of each line.
//! struct Keep(Vec<(sonde_logs::FileKey, String, u64)>);
//! impl LineSink for Keep {
//!     fn line(&mut self, origin: &Origin<'_>, line: &Line<'_>) {
//!         // The bytes borrow the tailer's read buffer: copy what is kept.
//!         let text = String::from_utf8_lossy(line.bytes).into_owned();
//!         self.0.push((origin.key, text, line.end));
//!     }
//! }
//!
//! let logs = tempfile::tempdir()?;
//! let data = tempfile::tempdir()?;
//! std::fs::write(logs.path().join("app.log"), "started\nserving\npartial")?;
//!
//! let store = CheckpointFile::new(data.path(), "app")?;
//! let config = TailerConfig::new(vec![format!("{}/*.log", logs.path().display())]);
//! let mut tailer = Tailer::new(config, store.load()?)?;
//! tailer.rescan(Instant::now());
//! let mut sink = Keep(Vec::new());
//! tailer.poll(Instant::now(), &mut sink);
//! let texts: Vec<&str> = sink.0.iter().map(|(_, t, _)| t.as_str()).collect();
//! assert_eq!(texts, ["started", "serving"]); // "partial" waits for its newline
//!
//! // Once delivered, the lines are acknowledged and the checkpoint saved.
//! for (key, _, end) in &sink.0 {
//!     tailer.ack(*key, *end);
//! }
//! store.save(&tailer.checkpoints())?;
//! assert_eq!(store.load()?.unwrap().files[0].offset, 16);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod checkpoint;
pub mod container;
pub mod counters;
pub mod identity;
pub mod lines;
pub mod multiline;
pub mod tailer;
#[cfg(target_os = "linux")]
pub mod watch;

pub use checkpoint::{CheckpointFile, Checkpoints};
pub use lines::Line;
pub use tailer::{FileKey, LineSink, Origin, Tailer, TailerConfig};
#[cfg(target_os = "linux")]
pub use watch::{Wake, Watcher};
