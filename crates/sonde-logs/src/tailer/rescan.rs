//! Rescans: the walk's files taken up by the tailer. A file not known yet
//! is opened, and where reading starts is decided from its checkpoint or
//! [`ReadFrom`]; a known file found at another path is renamed; a file
//! found at no matching path is gone (renamed away or deleted), and read
//! to its end through its descriptor.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::config::{Gzip, ReadFrom};
use super::discover::Walk;
use super::file::Watched;
use super::gzip::{is_gzip, Gz};
use super::join::Joining;
use super::read::line_start_before;
use super::report::{Event, FileKey, RescanReport, ScanError, Start};
use super::Tailer;
use crate::identity::{read_head, FileId, Fingerprint};
use crate::lines::Splitter;

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

impl Tailer {
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

    /// The files the globs match; with `quick`, an entry at the path of a
    /// file the tailer knows, open or idle, is looked up by that path.
    fn walk(&self, errors: &mut Vec<ScanError>, quick: bool) -> Walk {
        self.globs.walk(errors, quick, |path| {
            (self.index.get(path).map(|&i| self.files[i].id))
                .or_else(|| self.idle_paths.get(path).copied())
        })
    }
}

#[cfg(test)]
mod tests;
