//! The read path: one poll of one open file ([`PollCtx::poll_file`]).
//! It checks the file's size and head for a truncation, reads what was
//! appended into the tailer's one buffer (or, for a gzip file, the next
//! decompressed bytes), splits it into lines and hands them on through the
//! file's joiner, flushes what is due, and says what becomes of the file.
//! Also where the line being written at a file's end starts
//! ([`line_start_before`]), for a file read from its end.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::{Duration, Instant};

use super::config::{Gzip, END_LOOKBACK_BYTES};
use super::file::{mtime_of, remember, Fate, Watched};
use super::gzip::{is_gzip, Gz};
use super::join::{Hand, Join};
use super::report::{Event, FileKey, LineSink, Origin, PollReport, ReadError};
use crate::checkpoint::FileCheckpoint;
use crate::counters::Counters;
use crate::identity::{read_head, FileId, Fingerprint, Head, FINGERPRINT_BYTES};

/// What one poll shares with the read of each file: the tailer's buffers,
/// counters and settings, and the poll's report.
pub(super) struct PollCtx<'a> {
    pub(super) buf: &'a mut [u8],
    pub(super) head_buf: &'a mut [u8; FINGERPRINT_BYTES],
    pub(super) counters: &'a mut Counters,
    pub(super) next_key: &'a mut u64,
    pub(super) now: Instant,
    pub(super) rotate_wait: Duration,
    pub(super) close_idle: Duration,
    pub(super) join: &'a Join,
    pub(super) max_line_bytes: usize,
    pub(super) gzip: Gzip,
    pub(super) skipped: &'a mut HashSet<FileId>,
    pub(super) closed: &'a mut HashMap<FileId, FileCheckpoint>,
    pub(super) report: &'a mut PollReport,
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
    pub(super) fn poll_file(&mut self, w: &mut Watched, sink: &mut impl LineSink) -> Fate {
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
            file: w.id,
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
        let unwritten = self.now.saturating_duration_since(w.active_at) >= self.close_idle;
        let fate = w.fate(quiet, unwritten);
        if matches!(fate, Fate::Close) {
            self.report.events.push(Event::Closed {
                path: w.path.clone(),
            });
            if w.file.metadata().is_ok_and(|m| m.nlink() > 0) {
                remember(self.closed, w.id, w.head, &w.path, w.acked);
            }
        }
        fate
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
            file: w.id,
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
            file: w.id,
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

/// What reading a file found.
enum Read {
    /// Text, read as lines (or nothing new).
    Text,
    /// gzip's output: the file is to be skipped.
    Compressed,
}

/// The offset of the first byte after the last newline before `size` (so
/// `size` itself if the file ends in a newline), looking back at most
/// [`END_LOOKBACK_BYTES`] (or `buf`'s length); `size` if no newline is
/// there.
pub(super) fn line_start_before(file: &File, size: u64, buf: &mut [u8]) -> io::Result<u64> {
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

#[cfg(test)]
mod tests;
