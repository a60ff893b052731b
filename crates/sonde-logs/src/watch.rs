//! Telling the caller of a [`Tailer`](crate::Tailer) at once when its files
//! change, so that it need not wait for the next periodic rescan.
//!
//! A [`Watcher`] holds one inotify instance with a watch on every directory
//! the include globs can reach: the literal base directory of each glob
//! (the components before the first one with a glob character) and, below
//! it, as many levels of subdirectories as the glob can match (all of them
//! with `**`). A directory created later at such a level is watched as soon
//! as its creation is read. A base directory that does not exist yet is
//! waited for: its nearest existing ancestor is watched for directories
//! made in it, so that the base is watched once it is created.
//!
//! The watcher reads no file and keeps no clock. Its fd ([`Watcher`] is
//! [`AsFd`]) becomes readable when something happened; [`Watcher::drain`]
//! reads every pending event without blocking and folds them into a
//! [`Wake`]: `rescan` when a name appeared, moved or went away in a watched
//! directory (or the kernel's queue overflowed and events were lost), `poll`
//! when a file was written. [`Watcher::wait`] blocks on the fd until it is
//! readable or a timeout passes, for a caller with nothing else to wait on.
//! Writes cost little: the kernel merges an event identical to the last one
//! queued, so a file written a thousand times while nothing else happens
//! queues one event.
//!
//! The events are hints, not a record: they name no file the tailer must
//! trust, and a wake may come for a file no glob matches. What they buy is
//! timing: a file created, rotated away and deleted between two periodic
//! rescans is opened by the rescan the creation wakes, and is then read to
//! its end through the open descriptor. The periodic rescan stays the safety
//! net for what inotify cannot see (a watch refused by the kernel's limit,
//! changes made on another host of a network filesystem, events lost with an
//! overflow); [`Watcher::refresh`], called after it, watches the directories
//! that could not be watched before, so that from then on they too are seen
//! at once.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use sonde_logs::{Line, LineSink, Origin, Tailer, TailerConfig, Watcher};
//!
//! struct Count(usize);
//! impl LineSink for Count {
//!     fn line(&mut self, _: &Origin<'_>, _: &Line<'_>) {
//!         self.0 += 1;
//!     }
//! }
//!
//! let logs = tempfile::tempdir()?;
//! let config = TailerConfig::new(vec![format!("{}/*.log", logs.path().display())]);
//! let mut watcher = Watcher::new(&config)?;
//! let mut tailer = Tailer::new(config, None)?;
//! tailer.rescan(Instant::now());
//!
//! std::fs::write(logs.path().join("app.log"), "started\n")?;
//!
//! // One turn of the caller's loop: wait for the watcher, at most until the
//! // next periodic rescan is due, and do what the wake asks.
//! let mut lines = Count(0);
//! if watcher.wait(Some(Duration::from_secs(5)))? {
//!     let wake = watcher.drain()?;
//!     if wake.rescan {
//!         tailer.rescan(Instant::now());
//!     }
//!     tailer.poll(Instant::now(), &mut lines);
//! }
//! assert_eq!(lines.0, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The watch limit
//!
//! The kernel caps the watches of a user (`fs.inotify.max_user_watches`).
//! When [`Watcher::new`] hits the cap it fails with [`WatchError::Limit`],
//! naming the directory and the setting, and the caller goes on with the
//! periodic rescan alone. A cap hit later, on a directory created under a
//! `**` glob, is reported in [`Wake::unwatched`]; files there are found by
//! the periodic rescan.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

use crate::tailer::{root_of, Root, TailerConfig};

/// What the caller should do after [`Watcher::drain`].
#[derive(Debug, Default)]
pub struct Wake {
    /// A name appeared, moved or went away in a watched directory, or events
    /// were lost: call [`Tailer::rescan`](crate::Tailer::rescan).
    pub rescan: bool,
    /// A file in a watched directory was written: call
    /// [`Tailer::poll`](crate::Tailer::poll), or mark [`Wake::written`] and
    /// call [`Tailer::poll_written`](crate::Tailer::poll_written).
    pub poll: bool,
    /// The paths of the files written, once each per drain (with
    /// [`Wake::poll`]).
    pub written: Vec<PathBuf>,
    /// Directories that could not be watched while draining (created under
    /// a glob, or walked again after an overflow or a base's removal);
    /// their files are left to the periodic rescan.
    pub unwatched: Vec<WatchError>,
}

/// What a [`Watcher`] has counted since it was made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WatchCounters {
    /// Times the kernel's event queue overflowed and events were lost; each
    /// one asks for a rescan.
    pub overflows: u64,
    /// Directories watched now.
    pub directories: u64,
}

/// Why a directory could not be watched, or the watcher not made.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The inotify instance could not be made (the per-user cap on
    /// instances, `fs.inotify.max_user_instances`, is the usual cause).
    #[error("cannot start inotify: {0}")]
    Init(io::Error),
    /// The kernel's cap on watches is reached.
    #[error(
        "cannot watch {path:?}: the inotify watch limit is reached (raise \
         fs.inotify.max_user_watches); new files are found by the periodic \
         rescan only"
    )]
    Limit {
        /// The directory left unwatched.
        path: PathBuf,
    },
    /// Any other refusal (permissions, the path is not a directory...).
    #[error("cannot watch {path:?}: {error}")]
    Add {
        /// The directory left unwatched.
        path: PathBuf,
        /// What the kernel said.
        error: io::Error,
    },
}

/// Why [`Watcher::drain`] failed: reading the inotify fd.
#[derive(Debug, thiserror::Error)]
#[error("cannot read inotify events: {0}")]
pub struct DrainError(io::Error);

/// Why [`Watcher::wait`] failed: `poll(2)` on the inotify fd.
#[derive(Debug, thiserror::Error)]
#[error("cannot wait for inotify events: {0}")]
pub struct WaitError(io::Error);

/// The inotify watches over the directories of one source's include globs.
#[derive(Debug)]
pub struct Watcher {
    inotify: Inotify,
    /// Each watched directory, with how many more levels below it a glob
    /// can reach (`None`: any number).
    dirs: HashMap<WatchDescriptor, Watched>,
    /// The base directory of each include glob and how deep below it
    /// matches can be.
    roots: Vec<(PathBuf, Option<usize>)>,
    /// The nearest existing ancestors of base directories that do not
    /// exist, watched for the directories made on the way to them.
    ancestors: HashSet<WatchDescriptor>,
    overflows: u64,
}

#[derive(Debug)]
struct Watched {
    path: PathBuf,
    depth: Option<usize>,
}

/// The most reads of the inotify fd one [`Watcher::drain`] makes; each takes
/// up to 4 KiB of events (at least 15 of them, at most 256).
pub const DRAIN_READS: usize = 64;

/// What a watched directory reports: names coming and going, files written,
/// and (always delivered) overflow and removal of the watch.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_ONLYDIR
}

impl Watcher {
    /// Watches the directories that `config`'s include globs can reach and
    /// that exist now. For a base directory that does not exist, its
    /// nearest existing ancestor is watched, so that the base is watched by
    /// the drain that reads its creation.
    ///
    /// # Errors
    ///
    /// No inotify instance, or a directory that exists and cannot be
    /// watched; [`WatchError::Limit`] when the kernel's cap on watches is
    /// reached.
    pub fn new(config: &TailerConfig) -> Result<Self, WatchError> {
        let (watcher, refused) = Self::start(config)?;
        match refused.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(watcher),
        }
    }

    /// [`Watcher::new`] that goes on without the directories it could not
    /// watch (as [`Watcher::refresh`] does), and returns them: a source
    /// with one unreadable directory still gets inotify for the others.
    ///
    /// # Errors
    ///
    /// No inotify instance.
    pub fn start(config: &TailerConfig) -> Result<(Self, Vec<WatchError>), WatchError> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| WatchError::Init(e.into()))?;
        let roots = config
            .include
            .iter()
            .map(|pattern| {
                let Root { base, depth } = root_of(pattern);
                (base, depth)
            })
            .collect();
        let mut watcher = Self {
            inotify,
            dirs: HashMap::new(),
            roots,
            ancestors: HashSet::new(),
            overflows: 0,
        };
        let refused = watcher.refresh();
        Ok((watcher, refused))
    }

    /// Watches again every directory the globs reach that exists now: a
    /// base directory made or remade since, a subdirectory whose watch was
    /// refused before. Meant to follow each periodic rescan; directories
    /// already watched keep their watch.
    ///
    /// Returns the directories that exist and could not be watched (a base
    /// that does not exist is no error: the next call may find it).
    pub fn refresh(&mut self) -> Vec<WatchError> {
        let mut errors = Vec::new();
        // Ancestors are chosen afresh: one whose base now exists is no
        // longer watched for it.
        let before = std::mem::take(&mut self.ancestors);
        for (base, depth) in self.roots.clone() {
            if !base.is_dir() {
                // Watched before the base is looked at again, so that a base
                // made meanwhile is either found below or reported.
                self.watch_ancestor(&base, &mut errors);
            }
            self.watch_tree(base, depth, &mut errors);
        }
        for wd in before.difference(&self.ancestors) {
            // A glob's directory keeps its watch, whose events include the
            // ancestor's. The watch may be gone with its directory already.
            if !self.dirs.contains_key(wd) {
                let _ = self.inotify.rm_watch(*wd);
            }
        }
        errors
    }

    /// Watches the nearest existing ancestor of `base` for directories made
    /// in it, each of which brings [`Watcher::refresh`] one level closer.
    /// Only directory events are asked for on top of what the ancestor may
    /// already be watched for, and only they are read from it.
    fn watch_ancestor(&mut self, base: &Path, errors: &mut Vec<WatchError>) {
        let Some(ancestor) = base.ancestors().skip(1).find(|a| a.is_dir()) else {
            return;
        };
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_ONLYDIR
            // nix names no flag for IN_MASK_ADD: added to, not replacing,
            // the events the directory is watched for as a glob's.
            | AddWatchFlags::from_bits_retain(nix::libc::IN_MASK_ADD);
        match self.inotify.add_watch(ancestor, flags) {
            Ok(wd) => {
                self.ancestors.insert(wd);
            }
            Err(e) => {
                let e = refused(ancestor, e);
                if !is_gone(&e) {
                    errors.push(e);
                }
            }
        }
    }

    /// Reads the pending events without blocking and says what to do.
    /// Watches directories created under a glob that reaches below them.
    ///
    /// Reads at most [`DRAIN_READS`] times, so that writers quicker than the
    /// reading cannot keep it here: events left stay pending, and the fd
    /// stays readable for the next wait.
    ///
    /// # Errors
    ///
    /// Reading the fd failed.
    pub fn drain(&mut self) -> Result<Wake, DrainError> {
        let mut wake = Wake::default();
        for _ in 0..DRAIN_READS {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => return Ok(wake),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(DrainError(e.into())),
            };
            for event in events {
                self.take(event, &mut wake);
            }
        }
        Ok(wake)
    }

    /// Blocks until an event is pending or `timeout` has passed (`None`:
    /// no timeout). Returns whether an event is pending; [`Watcher::drain`]
    /// then reads it.
    ///
    /// # Errors
    ///
    /// `poll(2)` on the fd failed.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool, WaitError> {
        let timeout = match timeout {
            None => PollTimeout::NONE,
            // Rounded up, so that a short timeout does not become a busy
            // loop of zero-length polls.
            Some(t) => {
                let ms = t.as_nanos().div_ceil(1_000_000);
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, timeout) {
            Ok(n) => Ok(n > 0),
            // A signal cut the wait short; the caller's loop comes back.
            Err(Errno::EINTR) => Ok(false),
            Err(e) => Err(WaitError(e.into())),
        }
    }

    /// What has been counted.
    pub fn counters(&self) -> WatchCounters {
        WatchCounters {
            overflows: self.overflows,
            directories: self.dirs.len() as u64,
        }
    }

    fn take(&mut self, event: InotifyEvent, wake: &mut Wake) {
        let mask = event.mask;
        if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            // Events were dropped: only a full rescan knows what changed,
            // and directories created meanwhile may be unwatched.
            self.overflows += 1;
            wake.rescan = true;
            wake.unwatched.extend(self.refresh());
            return;
        }
        if mask.contains(AddWatchFlags::IN_IGNORED) {
            // The directory was deleted or unmounted: the kernel dropped
            // its watch. If it was a base or an ancestor, the watches are
            // chosen again, so that the base is waited for.
            let dir = self.dirs.remove(&event.wd);
            let ancestor = self.ancestors.remove(&event.wd);
            let base = dir.is_some_and(|d| self.roots.iter().any(|(b, _)| *b == d.path));
            wake.rescan = true;
            if base || ancestor {
                wake.unwatched.extend(self.refresh());
            }
            return;
        }
        let arrived = mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO);
        let dir_arrived = arrived && mask.contains(AddWatchFlags::IN_ISDIR);
        if dir_arrived && self.ancestors.contains(&event.wd) {
            // A step towards a missing base directory, perhaps the base.
            wake.unwatched.extend(self.refresh());
            wake.rescan = true;
        }
        if !self.dirs.contains_key(&event.wd) {
            // An ancestor only: its other events are not ours.
            return;
        }
        if mask.intersects(AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CLOSE_WRITE) {
            wake.poll = true;
            if let (Some(dir), Some(name)) = (self.dirs.get(&event.wd), &event.name) {
                let path = dir.path.join(name);
                // A writer's events come in runs: one entry per run.
                if wake.written.last() != Some(&path) {
                    wake.written.push(path);
                }
            }
        }
        if mask.intersects(
            AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_MOVED_FROM
                | AddWatchFlags::IN_DELETE,
        ) {
            wake.rescan = true;
        }
        if dir_arrived {
            let Some(parent) = self.dirs.get(&event.wd) else {
                return;
            };
            let depth = match parent.depth {
                None => None,
                Some(d) if d > 1 => Some(d - 1),
                // Matches cannot be below this level.
                Some(_) => return,
            };
            let Some(name) = event.name else { return };
            let path = parent.path.join(name);
            self.watch_tree(path, depth, &mut wake.unwatched);
        } else if mask.contains(AddWatchFlags::IN_MOVED_FROM | AddWatchFlags::IN_ISDIR) {
            let (Some(parent), Some(name)) = (self.dirs.get(&event.wd), event.name) else {
                return;
            };
            self.unwatch_moved(parent.path.join(name), wake);
        }
    }

    /// Lets go of the watches of `dir`, moved away, and of the directories
    /// below it: a watch follows its inode, so they would otherwise report
    /// on directories outside the globs under paths that are no longer
    /// theirs. If the move lands within a glob's reach, its `IN_MOVED_TO`
    /// watches the directory again under its new path.
    fn unwatch_moved(&mut self, dir: PathBuf, wake: &mut Wake) {
        let moved: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, w)| w.path.starts_with(&dir))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in moved {
            self.dirs.remove(&wd);
            if !self.ancestors.contains(&wd) {
                // The IN_IGNORED this queues finds no entry left.
                let _ = self.inotify.rm_watch(wd);
            }
        }
        if self.roots.iter().any(|(base, _)| base.starts_with(&dir)) {
            // A base moved away: wait for it at its ancestor.
            wake.unwatched.extend(self.refresh());
        }
    }

    /// Watches `dir` and the subdirectories below it that a glob reaching
    /// `depth` levels below `dir` can match in, pushing onto `errors` the
    /// directories that exist and could not be watched. Watching a
    /// directory again is harmless: the kernel hands back its existing
    /// watch. Stops at the watch limit, where every further watch would
    /// fail the same way.
    fn watch_tree(&mut self, dir: PathBuf, depth: Option<usize>, errors: &mut Vec<WatchError>) {
        let mut stack = vec![(dir, depth)];
        while let Some((dir, depth)) = stack.pop() {
            match self.watch(&dir, depth) {
                Ok(()) => {}
                // Not there (yet, or any more): nothing to watch.
                Err(e) if is_gone(&e) => continue,
                Err(e @ WatchError::Limit { .. }) => {
                    errors.push(e);
                    return;
                }
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            }
            let below = match depth {
                None => None,
                Some(d) if d > 1 => Some(d - 1),
                Some(_) => continue,
            };
            // The watch is placed before the listing, so a subdirectory
            // created meanwhile is either listed here or reported as an
            // event.
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                // Symbolic links to directories are not followed, as in the
                // tailer's walk.
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((entry.path(), below));
                }
            }
        }
    }

    fn watch(&mut self, dir: &Path, depth: Option<usize>) -> Result<(), WatchError> {
        let wd = self
            .inotify
            .add_watch(dir, mask())
            .map_err(|e| refused(dir, e))?;
        // The same directory reached through two globs keeps the deepest
        // reach of the two.
        let deeper = |a: Option<usize>, b: Option<usize>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        self.dirs
            .entry(wd)
            .and_modify(|w| w.depth = deeper(w.depth, depth))
            .or_insert_with(|| Watched {
                path: dir.to_path_buf(),
                depth,
            });
        Ok(())
    }
}

/// Why the kernel refused to watch `dir`.
fn refused(dir: &Path, e: Errno) -> WatchError {
    match e {
        Errno::ENOSPC => WatchError::Limit {
            path: dir.to_path_buf(),
        },
        e => WatchError::Add {
            path: dir.to_path_buf(),
            error: e.into(),
        },
    }
}

/// The directory went away before it could be watched.
fn is_gone(e: &WatchError) -> bool {
    matches!(e, WatchError::Add { error, .. }
        if error.kind() == io::ErrorKind::NotFound
            || error.raw_os_error() == Some(Errno::ENOTDIR as i32))
}

impl AsFd for Watcher {
    /// Readable when events are pending: for a caller that polls it with
    /// other fds.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Line, LineSink, Origin, Tailer};
    use std::fs;
    use std::io::Write;
    use std::time::Instant;

    /// Waits on the fd and drains until `done` holds for the wakes seen so
    /// far, or fails after a deadline.
    fn wake_until(w: &mut Watcher, done: impl Fn(&Wake) -> bool) -> Wake {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut all = Wake::default();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no wake before the deadline: {all:?}");
            if w.wait(Some(left)).unwrap() {
                let wake = w.drain().unwrap();
                all.rescan |= wake.rescan;
                all.poll |= wake.poll;
                all.written.extend(wake.written);
                all.unwatched.extend(wake.unwatched);
                if done(&all) {
                    return all;
                }
            }
        }
    }

    fn config(dir: &Path, include: &str) -> TailerConfig {
        TailerConfig::new(vec![format!("{}/{include}", dir.display())])
    }

    #[derive(Default)]
    struct Texts(Vec<String>);
    impl LineSink for Texts {
        fn line(&mut self, _: &Origin<'_>, line: &Line<'_>) {
            self.0
                .push(String::from_utf8_lossy(line.bytes).into_owned());
        }
    }

    #[test]
    fn nothing_pending_drains_to_no_wake_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watcher::new(&config(dir.path(), "*.log")).unwrap();
        assert!(!w.wait(Some(Duration::ZERO)).unwrap());
        let wake = w.drain().unwrap();
        assert!(!wake.rescan && !wake.poll);
        assert_eq!(w.counters().directories, 1);
    }

    #[test]
    fn a_created_file_wakes_with_rescan() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watcher::new(&config(dir.path(), "*.log")).unwrap();
        fs::File::create(dir.path().join("app.log")).unwrap();
        wake_until(&mut w, |k| k.rescan);
    }

    #[test]
    fn a_write_wakes_with_poll() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.log");
        let mut file = fs::File::create(&path).unwrap();
        let mut w = Watcher::new(&config(dir.path(), "*.log")).unwrap();
        file.write_all(b"one\n").unwrap();
        let wake = wake_until(&mut w, |k| k.poll);
        assert!(!wake.rescan, "a write is no reason to rescan");
        assert_eq!(wake.written, [path]);
    }

    #[test]
    fn a_file_created_rotated_away_and_deleted_between_rescans_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let away = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), "*.log");
        let mut w = Watcher::new(&cfg).unwrap();
        let mut t = Tailer::new(cfg, None).unwrap();
        t.rescan(Instant::now());

        let path = dir.path().join("app.log");
        fs::write(&path, "one\ntwo\n").unwrap();
        wake_until(&mut w, |k| k.rescan);
        t.rescan(Instant::now());
        // Written on after the rescan opened it, then rotated out of the
        // globs and deleted before any poll or later rescan.
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"three\n").unwrap();
        drop(f);
        let moved = away.path().join("app.log.1");
        fs::rename(&path, &moved).unwrap();
        fs::remove_file(&moved).unwrap();

        let mut sink = Texts::default();
        t.poll(Instant::now(), &mut sink);
        assert_eq!(sink.0, ["one", "two", "three"]);
    }

    #[test]
    fn a_directory_created_under_double_star_is_watched_and_its_files_seen() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), "**/*.log");
        let mut w = Watcher::new(&cfg).unwrap();
        let mut t = Tailer::new(cfg, None).unwrap();
        let sub = dir.path().join("a");
        fs::create_dir(&sub).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 2);

        // A directory inside the new one, then a file in it: both come as
        // events of watches made after the first wake.
        let deeper = sub.join("b");
        fs::create_dir(&deeper).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 3);
        fs::write(deeper.join("app.log"), "deep\n").unwrap();
        wake_until(&mut w, |k| k.rescan);
        t.rescan(Instant::now());
        let mut sink = Texts::default();
        t.poll(Instant::now(), &mut sink);
        assert_eq!(sink.0, ["deep"]);
    }

    #[test]
    fn a_directory_below_a_single_level_glob_is_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watcher::new(&config(dir.path(), "*.log")).unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 1);
    }

    #[test]
    fn a_glob_with_levels_watches_the_existing_subdirectories_it_reaches() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/deeper")).unwrap();
        let w = Watcher::new(&config(dir.path(), "*/*.log")).unwrap();
        // The base and `a`; `a/deeper` is beyond what `*/*.log` matches.
        assert_eq!(w.counters().directories, 2);
    }

    #[test]
    fn a_rename_into_the_glob_directory_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir_in(dir.path().parent().unwrap()).unwrap();
        let cfg = config(dir.path(), "*.log");
        let mut w = Watcher::new(&cfg).unwrap();
        let mut t = Tailer::new(cfg, None).unwrap();
        t.rescan(Instant::now());
        let staged = outside.path().join("staged");
        fs::write(&staged, "moved in\n").unwrap();
        fs::rename(&staged, dir.path().join("app.log")).unwrap();
        wake_until(&mut w, |k| k.rescan);
        t.rescan(Instant::now());
        let mut sink = Texts::default();
        t.poll(Instant::now(), &mut sink);
        assert_eq!(sink.0, ["moved in"]);
    }

    #[test]
    fn a_base_directory_made_after_the_watcher_is_watched_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("later/logs");
        let mut w = Watcher::new(&config(&base, "*.log")).unwrap();
        assert_eq!(w.counters().directories, 0);
        // A file created in the ancestor is none of the watcher's business.
        fs::File::create(dir.path().join("other.log")).unwrap();
        assert!(!w.drain().unwrap().rescan);

        fs::create_dir_all(&base).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 1);
        fs::File::create(base.join("app.log")).unwrap();
        wake_until(&mut w, |k| k.rescan);
    }

    #[test]
    fn a_base_directory_made_one_level_at_a_time_is_watched() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("later/logs");
        let mut w = Watcher::new(&config(&base, "*.log")).unwrap();
        fs::create_dir(dir.path().join("later")).unwrap();
        wake_until(&mut w, |k| k.rescan);
        // Now `later` is the nearest ancestor, watched for `logs`.
        assert_eq!(w.counters().directories, 0);
        fs::create_dir(&base).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 1);
    }

    #[test]
    fn an_ancestor_is_let_go_once_its_base_exists() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("logs");
        let mut w = Watcher::new(&config(&base, "*.log")).unwrap();
        fs::create_dir(&base).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 1);
        // Directories made beside the base no longer wake anyone.
        fs::create_dir(dir.path().join("other")).unwrap();
        assert!(!w.wait(Some(Duration::ZERO)).unwrap());
    }

    #[test]
    fn a_directory_moved_out_of_the_globs_is_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        let mut w = Watcher::new(&config(dir.path(), "**/*.log")).unwrap();
        assert_eq!(w.counters().directories, 3);
        let moved = outside.path().join("a");
        fs::rename(dir.path().join("a"), &moved).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 1);
        // What happens there now is none of the watcher's business.
        fs::File::create(moved.join("b/app.log")).unwrap();
        assert!(!w.drain().unwrap().rescan);
        // Moved back, it is watched again.
        fs::rename(&moved, dir.path().join("a")).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 3);
    }

    #[test]
    fn refresh_watches_a_base_directory_made_after_the_watcher() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("later");
        let mut w = Watcher::new(&config(&base, "*.log")).unwrap();
        assert_eq!(w.counters().directories, 0);
        fs::create_dir(&base).unwrap();
        assert!(w.refresh().is_empty());
        assert_eq!(w.counters().directories, 1);
        fs::File::create(base.join("app.log")).unwrap();
        wake_until(&mut w, |k| k.rescan);
    }

    #[test]
    fn a_deleted_base_directory_wakes_and_is_watched_again_once_remade() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("logs");
        fs::create_dir(&base).unwrap();
        let mut w = Watcher::new(&config(&base, "*.log")).unwrap();
        fs::remove_dir(&base).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 0);
        fs::create_dir(&base).unwrap();
        wake_until(&mut w, |k| k.rescan);
        assert_eq!(w.counters().directories, 1);
        fs::File::create(base.join("app.log")).unwrap();
        wake_until(&mut w, |k| k.rescan);
    }

    #[test]
    fn an_overflowed_queue_wakes_with_rescan_and_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), "**/*.log");
        let mut w = Watcher::new(&cfg).unwrap();
        // Each file created gives two events (creation, close after
        // writing), so this many files fill the kernel's queue.
        let queue: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        for i in 0..queue / 2 + 1 {
            fs::File::create(dir.path().join(format!("{i}"))).unwrap();
        }
        // A directory whose creation is lost in the overflow is still
        // watched: the overflow walks the globs' directories again.
        fs::create_dir(dir.path().join("sub")).unwrap();
        // The overflow comes after a full queue of events, which takes
        // several drains.
        let mut wakes = 0;
        while w.counters().overflows == 0 {
            wakes += 1;
            assert!(wakes <= queue, "no overflow read");
            assert!(w.wait(Some(Duration::from_secs(10))).unwrap());
            assert!(w.drain().unwrap().rescan);
        }
        assert_eq!(w.counters().overflows, 1);
        assert!(!w.wait(Some(Duration::ZERO)).unwrap(), "nothing after it");
        assert_eq!(w.counters().directories, 2);
    }

    #[test]
    fn the_wakes_alone_drive_a_tailer_through_rotations_by_a_concurrent_writer() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), "app.log*");
        let mut w = Watcher::new(&cfg).unwrap();
        let mut t = Tailer::new(cfg, None).unwrap();
        t.rescan(Instant::now());
        let (files, per_file) = (20, 50);
        let base = dir.path().to_path_buf();
        // Renames to numbered names, so that every file stays reachable and
        // only the timing of discovery is under test: no periodic rescan
        // runs here.
        let writer = std::thread::spawn(move || {
            for f in 0..files {
                let path = base.join("app.log");
                let mut out = fs::File::create(&path).unwrap();
                for l in 0..per_file {
                    writeln!(out, "{f} {l}").unwrap();
                }
                drop(out);
                fs::rename(&path, base.join(format!("app.log.{f}"))).unwrap();
            }
        });
        let mut sink = Texts::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        while sink.0.len() < files * per_file {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "read {} lines by the deadline",
                sink.0.len()
            );
            if !w.wait(Some(left)).unwrap() {
                continue;
            }
            let wake = w.drain().unwrap();
            if wake.rescan {
                t.rescan(Instant::now());
            }
            if wake.rescan || wake.poll {
                while t.poll(Instant::now(), &mut sink).more {}
            }
        }
        writer.join().unwrap();
        assert_eq!(sink.0.len(), files * per_file);
        let mut got = sink.0.clone();
        got.sort();
        got.dedup();
        assert_eq!(got.len(), files * per_file, "every line once");
    }

    #[test]
    fn the_watch_limit_is_named_with_its_setting() {
        // ENOSPC from inotify_add_watch(2) is the watch limit, not a full
        // disk.
        let e = refused(Path::new("/var/log/app"), Errno::ENOSPC);
        assert!(matches!(e, WatchError::Limit { .. }));
        assert_eq!(
            e.to_string(),
            "cannot watch \"/var/log/app\": the inotify watch limit is reached \
             (raise fs.inotify.max_user_watches); new files are found by the \
             periodic rescan only"
        );
    }
}
