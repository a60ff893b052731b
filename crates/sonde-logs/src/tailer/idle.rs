//! Idle files: an open file read to its end, acknowledged and unwritten
//! for [`TailerConfig::close_idle`] has its descriptor closed
//! ([`Tailer::settle`]) and is known by device, inode and head at its path.
//! A write reported for that path, or a rescan that sees its size or
//! modification time change, opens it again ([`Tailer::wake`]); a rename
//! within a walked directory follows it, and a deletion forgets it
//! ([`Tailer::idle_gone`]).
//!
//! [`TailerConfig::close_idle`]: crate::TailerConfig::close_idle

use std::fs::{self, File, Metadata};
use std::io;
use std::path::PathBuf;
use std::time::Instant;

use super::file::{mtime_of, remember, Idle, Watched};
use super::join::Joining;
use super::report::{Event, PollReport, ReadError};
use super::Tailer;
use crate::identity::FileId;
use crate::lines::Splitter;

impl Tailer {
    /// Drops the files at the indices in `shut` and makes those in `idle`
    /// idle (both ascending), in one pass over `files`.
    pub(super) fn settle(&mut self, shut: &[usize], idle: &[usize]) {
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

    /// Notes an idle file found at `path` by a rescan, with the metadata
    /// the walk got (`None`: none, as when it was met by opening).
    pub(super) fn relink_idle(&mut self, id: FileId, path: PathBuf, meta: Option<&Metadata>) {
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
    pub(super) fn idle_gone(&mut self, id: FileId, moved: Option<&PathBuf>, now: Instant) {
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
    pub(super) fn wake(&mut self, now: Instant, report: &mut PollReport) -> Vec<usize> {
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
}
