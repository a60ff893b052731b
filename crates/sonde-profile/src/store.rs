//! The agent's profile store: one gzip pprof file per period (a minute by
//! default) under `{data_dir}/profiles/`, kept for the retention and
//! within a size.
//!
//! A file is named by the Unix second its period started at,
//! `1795160400.pb.gz`, so a listing sorts by time and a range is read by
//! name alone. Files are written to a temporary name, fsynced and renamed,
//! so a reader never sees half a profile and a crash leaves at worst a
//! `.tmp` file, removed at the next write. Each file is an ordinary pprof
//! profile: `go tool pprof` reads any one of them.
//!
//! # A full, read-only or removed directory
//!
//! A write that fails costs that period's profile and nothing else: no
//! stored file is opened for writing (a period's file is new, made by
//! rename), so a write cut short by a full disk or refused by a read-only
//! one stops before the rename and leaves every stored profile as it was.
//! Its temporary file is removed at once, so that it does not hold the
//! space the next period needs. A removed directory is made again at the
//! next write. [`Store::write`] says which path failed ([`WriteError`]);
//! the profiler counts the period as lost and goes on.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::model::Profile;
use crate::pprof;

/// The store's directory under a data directory.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("profiles")
}

/// Limits on what the store keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Files whose period started more than this many seconds before the
    /// newest are removed.
    pub retention_s: u64,
    /// The most bytes all files may take; the oldest go first beyond it.
    pub max_bytes: u64,
}

/// A directory of per-period profiles.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    limits: Limits,
}

/// One stored file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// When its period started, Unix seconds.
    pub start_s: u64,
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Why [`Store::write`] failed; the profiles stored before are as they
/// were, and no temporary file is left.
#[derive(Debug, thiserror::Error)]
#[error("writing {path}: {error}")]
pub struct WriteError {
    /// The directory, the temporary file or the file that failed.
    pub path: PathBuf,
    /// What failed.
    pub error: io::Error,
}

/// Why reading the store failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The directory could not be listed.
    #[error("listing {dir}: {error}")]
    List {
        /// The store's directory.
        dir: PathBuf,
        /// What failed.
        error: io::Error,
    },
    /// A file could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        error: io::Error,
    },
    /// A file is not a profile.
    #[error("reading {path}: {error}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        error: pprof::DecodeError,
    },
}

impl Store {
    /// A store in `dir` (created at the first write).
    pub fn new(dir: PathBuf, limits: Limits) -> Store {
        Store { dir, limits }
    }

    /// The store under `data_dir`, opened to read: reading needs no
    /// limits, which the profiler applies as it writes.
    pub fn reader(data_dir: &Path) -> Store {
        Store::new(
            dir(data_dir),
            Limits {
                retention_s: u64::MAX,
                max_bytes: u64::MAX,
            },
        )
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Every stored file, oldest first.
    ///
    /// # Errors
    ///
    /// When the directory exists but cannot be listed; a missing directory
    /// is an empty store.
    pub fn list(&self) -> Result<Vec<Entry>, ReadError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(ReadError::List {
                    dir: self.dir.clone(),
                    error,
                })
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(start_s) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".pb.gz"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let bytes = entry.metadata().map_or(0, |m| m.len());
            out.push(Entry {
                start_s,
                path: entry.path(),
                bytes,
            });
        }
        out.sort_by_key(|e| e.start_s);
        Ok(out)
    }

    /// Writes one period's profile, then removes what the limits no longer
    /// allow. An empty profile is written too: it records that the period
    /// was sampled and the host was idle. A period already stored under
    /// the same start (an agent stopped and started again within one
    /// period: both store theirs under the period's aligned start) is
    /// merged into the new one, not replaced.
    ///
    /// # Errors
    ///
    /// Making the directory (again, if it was removed), writing or
    /// renaming the file; see [`WriteError`].
    pub fn write(&self, profile: &Profile) -> Result<PathBuf, WriteError> {
        std::fs::create_dir_all(&self.dir).map_err(|error| WriteError {
            path: self.dir.clone(),
            error,
        })?;
        let start_s = profile.start_ns / 1_000_000_000;
        let path = self.dir.join(format!("{start_s}.pb.gz"));
        let tmp = self.dir.join(format!("{start_s}.pb.gz.tmp"));
        let before = std::fs::read(&path)
            .ok()
            .and_then(|b| pprof::decode(&b).ok());
        let bytes = match before {
            Some(before) => pprof::encode(&before.merge(profile)),
            None => pprof::encode(profile),
        };
        // Synced before the rename: else a power loss could leave an
        // empty file under the period's name (one fsync a period).
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            io::Write::write_all(&mut f, &bytes)?;
            f.sync_data()
        });
        let failed = match written {
            Ok(()) => std::fs::rename(&tmp, &path)
                .err()
                .map(|e| (path.clone(), e)),
            Err(e) => Some((tmp.clone(), e)),
        };
        if let Some((path, error)) = failed {
            // What a full disk cut short would hold the space the next
            // period needs.
            let _ = std::fs::remove_file(&tmp);
            return Err(WriteError { path, error });
        }
        self.prune(start_s);
        Ok(path)
    }

    /// Removes files older than the retention before `newest_s`, then the
    /// oldest while the total is over the size limit, and stray `.tmp`
    /// files.
    fn prune(&self, newest_s: u64) {
        if let Ok(dir) = std::fs::read_dir(&self.dir) {
            for e in dir.flatten() {
                if e.file_name().to_string_lossy().ends_with(".tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let Ok(mut entries) = self.list() else {
            return;
        };
        let oldest_kept = newest_s.saturating_sub(self.limits.retention_s);
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        entries.retain(|e| {
            let remove = e.start_s < oldest_kept;
            if remove && std::fs::remove_file(&e.path).is_ok() {
                total -= e.bytes;
            }
            !remove
        });
        for e in entries {
            if total <= self.limits.max_bytes {
                break;
            }
            if std::fs::remove_file(&e.path).is_ok() {
                total -= e.bytes;
            }
        }
    }

    /// The merged profile of every file whose period starts in
    /// `[from_s, until_s)`, and how many files that was.
    ///
    /// # Errors
    ///
    /// Listing the directory, or a file in the range that cannot be read
    /// or decoded (named in the error).
    pub fn read(&self, from_s: u64, until_s: u64) -> Result<(Profile, usize), ReadError> {
        let mut merged = Profile::default();
        let mut files = 0;
        for e in self.list()? {
            if e.start_s < from_s || e.start_s >= until_s {
                continue;
            }
            let bytes = std::fs::read(&e.path).map_err(|error| ReadError::Read {
                path: e.path.clone(),
                error,
            })?;
            let p = pprof::decode(&bytes).map_err(|error| ReadError::Decode {
                path: e.path.clone(),
                error,
            })?;
            merged = merged.merge(&p);
            files += 1;
        }
        Ok((merged, files))
    }
}

/// A span of the store named by how long ago it starts and ends, as
/// `sonde profile --since/--until`, `sonde profile diff 20m..10m 10m..0s`
/// and the admin site's `range=` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ago {
    /// How long ago the span starts.
    pub since: Duration,
    /// How long ago it ends (zero: now).
    pub until: Duration,
}

impl Ago {
    /// The span from `since` ago to `until` ago.
    ///
    /// # Errors
    ///
    /// When `until` is not shorter ago than `since`.
    pub fn new(since: Duration, until: Duration) -> Result<Ago, String> {
        if until >= since {
            return Err(format!(
                "the range runs from longer ago to shorter ago, like 20m..10m (got {}..{})",
                seconds(since),
                seconds(until)
            ));
        }
        Ok(Ago { since, until })
    }

    /// Parses `SINCE..UNTIL`, each a duration for [`parse_ago`]
    /// (`20m..10m`, `1h..0s`).
    ///
    /// # Errors
    ///
    /// A message naming what is wrong, for the user.
    pub fn parse(s: &str) -> Result<Ago, String> {
        let (since, until) = s
            .split_once("..")
            .ok_or_else(|| format!("{s:?} is not a range like 20m..10m"))?;
        let since = parse_ago(since).map_err(|e| format!("{s:?}: {e}"))?;
        let until = parse_ago(until).map_err(|e| format!("{s:?}: {e}"))?;
        Ago::new(since, until).map_err(|e| format!("{s:?}: {e}"))
    }

    /// The span as Unix seconds `[from, until)` at `now_s`.
    pub fn bounds(&self, now_s: u64) -> (u64, u64) {
        (
            now_s.saturating_sub(self.since.as_secs()),
            now_s.saturating_sub(self.until.as_secs()),
        )
    }
}

impl std::fmt::Display for Ago {
    /// `20m..10m`, both sides in the largest unit that holds each whole
    /// (`48h..47h`, not `2d..47h`); `0s` for now.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (since, until) = (self.since.as_secs(), self.until.as_secs());
        let (unit, name) = [(86_400, "d"), (3600, "h"), (60, "m"), (1, "s")]
            .into_iter()
            .find(|(u, _)| since.is_multiple_of(*u) && until.is_multiple_of(*u))
            .unwrap_or((1, "s"));
        let side = |s: u64| {
            if s == 0 {
                "0s".to_string()
            } else {
                format!("{}{name}", s / unit)
            }
        };
        write!(f, "{}..{}", side(since), side(until))
    }
}

/// A duration in its largest whole unit, as [`parse_ago`] reads it:
/// `90s`, `10m`, `2h`, `1d`, `0s`.
pub fn ago_name(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0s".to_string(),
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// A duration before now: a whole number and a unit, `s`, `m`, `h` or
/// `d` (`90s`, `10m`, `2h`, `1d`; `0s` is now).
///
/// # Errors
///
/// A message saying how to write one.
pub fn parse_ago(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration like 90s, 10m, 2h or 1d");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let unit_s = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(n.saturating_mul(unit_s)))
}

/// Why a span of the store gave no profile. Each says what is true of
/// the store, so that a user in the agent's first minutes is not sent
/// looking for a misconfiguration.
#[derive(Debug)]
pub enum SpanError {
    /// Reading the store failed.
    Read(ReadError),
    /// The store holds no profile at all.
    Empty {
        /// The store's directory.
        dir: PathBuf,
    },
    /// The span ends before the first stored profile's period starts.
    BeforeFirst {
        /// The store's directory.
        dir: PathBuf,
        /// The span asked for.
        span: Ago,
        /// When the first stored period started, Unix seconds.
        first_s: u64,
        /// The time the span was read at, Unix seconds.
        now_s: u64,
    },
    /// No stored period starts in the span, though the store holds
    /// periods before or around it.
    NoneIn {
        /// The store's directory.
        dir: PathBuf,
        /// The span asked for.
        span: Ago,
        /// When the first stored period started, Unix seconds.
        first_s: u64,
        /// When the newest stored period started, Unix seconds.
        last_s: u64,
        /// The time the span was read at, Unix seconds.
        now_s: u64,
    },
}

impl From<ReadError> for SpanError {
    fn from(e: ReadError) -> Self {
        SpanError::Read(e)
    }
}

impl std::error::Error for SpanError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpanError::Read(e) => e.source(),
            _ => None,
        }
    }
}

impl std::fmt::Display for SpanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpanError::Read(e) => e.fmt(f),
            SpanError::Empty { dir } => write!(
                f,
                "no stored profiles in {}: the agent stores its first profile at the end of its \
                 first period (profiler.period, a minute by default); if it has run longer than \
                 that, is it running with [profiler], and is this its data_dir?",
                dir.display()
            ),
            SpanError::BeforeFirst {
                dir,
                span,
                first_s,
                now_s,
            } => {
                let ago = rough_ago(now_s.saturating_sub(*first_s));
                write!(
                    f,
                    "{span} is before the first stored profile, at {} ({ago} ago) in {}: \
                     {ago}..0s holds every stored profile",
                    utc(*first_s),
                    dir.display()
                )
            }
            SpanError::NoneIn {
                dir,
                span,
                first_s,
                last_s,
                now_s,
            } => write!(
                f,
                "no stored profile starts in {span} in {}; the store holds the periods from {} \
                 ({} ago) to {} ({} ago)",
                dir.display(),
                utc(*first_s),
                rough_ago(now_s.saturating_sub(*first_s)),
                utc(*last_s),
                rough_ago(now_s.saturating_sub(*last_s)),
            ),
        }
    }
}

/// Unix seconds as an RFC 3339 time in UTC, `2026-05-01T14:03:00Z`.
fn utc(s: u64) -> String {
    i64::try_from(s)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(|| format!("{s} s after the epoch"), |t| t.to_string())
}

/// Seconds ago rounded up to a unit a range can name, so that
/// `{ago}..0s` holds the instant: `45s`, `4m` for 187 s, `3h`, `2d`.
pub fn rough_ago(s: u64) -> String {
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s.div_ceil(60)),
        7200..172_800 => format!("{}h", s.div_ceil(3600)),
        _ => format!("{}d", s.div_ceil(86_400)),
    }
}

impl Store {
    /// The merged profile of the periods that start in `span`, now.
    ///
    /// # Errors
    ///
    /// See [`Store::read_at`].
    pub fn read_ago(&self, span: Ago) -> Result<Profile, SpanError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.read_at(span, now)
    }

    /// The merged profile of the periods that start in `span`, at `now_s`
    /// (Unix seconds).
    ///
    /// # Errors
    ///
    /// See [`Store::read`]; when no period starts in the span,
    /// [`SpanError::Empty`] for an empty store, [`SpanError::BeforeFirst`]
    /// for a span that ends before its first period, else
    /// [`SpanError::NoneIn`].
    pub fn read_at(&self, span: Ago, now_s: u64) -> Result<Profile, SpanError> {
        let (from, until) = span.bounds(now_s);
        let (profile, files) = self.read(from, until)?;
        if files > 0 {
            return Ok(profile);
        }
        let entries = self.list()?;
        let dir = self.dir.clone();
        Err(match (entries.first(), entries.last()) {
            (Some(first), _) if until <= first.start_s => SpanError::BeforeFirst {
                dir,
                span,
                first_s: first.start_s,
                now_s,
            },
            (Some(first), Some(last)) => SpanError::NoneIn {
                dir,
                span,
                first_s: first.start_s,
                last_s: last.start_s,
                now_s,
            },
            _ => SpanError::Empty { dir },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Function, Process, ProfileBuilder};

    fn profile(start_s: u64, hot: u64) -> Profile {
        let mut b = ProfileBuilder::new(19, start_s * 1_000_000_000, 60_000_000_000);
        let f = |n: &str| Function {
            name: n.into(),
            module: "/bin/x".into(),
        };
        let p = Process {
            pid: 1,
            name: "x".into(),
            container: String::new(),
            ..Default::default()
        };
        b.add(&p, &[f("main"), f("hot")], hot);
        b.add(&p, &[f("main"), f("cold")], 10);
        b.finish()
    }

    fn store(dir: &Path, retention_s: u64, max_bytes: u64) -> Store {
        Store::new(
            dir.join("profiles"),
            Limits {
                retention_s,
                max_bytes,
            },
        )
    }

    use sonde_testkit::Tmpfs;

    /// The names in the store's directory.
    fn names(s: &Store) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(s.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_profile_that_does_not_fit_is_refused_whole_and_leaves_no_temporary_file() {
        let Some(tmpfs) = Tmpfs::mount("256k") else {
            return;
        };
        let s = store(tmpfs.path(), 3600, u64::MAX);
        s.write(&profile(1_000_000, 5)).unwrap();
        s.write(&profile(1_000_060, 7)).unwrap();
        let filler = tmpfs.fill();
        let e = s.write(&profile(1_000_120, 11)).unwrap_err();
        assert_eq!(e.error.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert_eq!(e.path, s.path().join("1000120.pb.gz.tmp"));
        assert_eq!(names(&s), ["1000000.pb.gz", "1000060.pb.gz"]);
        let (_, files) = s.read(0, u64::MAX).unwrap();
        assert_eq!(files, 2, "the stored profiles still read");
        // Space comes back: the next period is stored.
        std::fs::remove_file(filler).unwrap();
        s.write(&profile(1_000_180, 13)).unwrap();
        assert_eq!(s.read(0, u64::MAX).unwrap().1, 3);
    }

    #[test]
    fn a_read_only_store_refuses_the_write_and_a_writable_one_takes_the_next() {
        let Some(tmpfs) = Tmpfs::mount("1m") else {
            return;
        };
        let s = store(tmpfs.path(), 3600, u64::MAX);
        s.write(&profile(1_000_000, 5)).unwrap();
        tmpfs.remount("ro");
        let e = s.write(&profile(1_000_060, 7)).unwrap_err();
        assert_eq!(e.error.raw_os_error(), Some(libc::EROFS), "{e}");
        assert_eq!(names(&s), ["1000000.pb.gz"]);
        tmpfs.remount("rw");
        s.write(&profile(1_000_120, 11)).unwrap();
        assert_eq!(names(&s), ["1000000.pb.gz", "1000120.pb.gz"]);
    }

    #[test]
    fn a_removed_store_directory_is_made_again_at_the_next_write() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 3600, u64::MAX);
        s.write(&profile(1_000_000, 5)).unwrap();
        std::fs::remove_dir_all(tmp.path()).unwrap();
        s.write(&profile(1_000_060, 7)).unwrap();
        assert_eq!(names(&s), ["1000060.pb.gz"]);
    }

    #[test]
    fn a_period_stored_again_under_its_start_keeps_the_first_ones_samples() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 3600, u64::MAX);
        // The part of a period before a restart, then the rest after it.
        s.write(&profile(1_000_000, 5)).unwrap();
        s.write(&profile(1_000_000, 7)).unwrap();
        let (p, files) = s.read(1_000_000, 1_000_060).unwrap();
        assert_eq!(files, 1);
        assert_eq!(p.samples(), 5 + 7 + 2 * 10);
        assert_eq!(names(&s), ["1000000.pb.gz"]);
    }

    #[test]
    fn a_range_merges_the_files_that_start_in_it() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 3600, u64::MAX);
        for (i, hot) in [(0, 5), (1, 7), (2, 11)] {
            s.write(&profile(1_000_000 + i * 60, hot)).unwrap();
        }
        let (p, files) = s.read(1_000_060, 1_000_180).unwrap();
        assert_eq!(files, 2);
        assert_eq!(p.samples(), 7 + 11 + 20);
        assert_eq!(p.start_ns, 1_000_060 * 1_000_000_000);
        assert_eq!(p.duration_ns, 120_000_000_000);
        let (_, none) = s.read(0, 1_000_000).unwrap();
        assert_eq!(none, 0);
    }

    #[test]
    fn files_older_than_the_retention_are_removed_at_the_next_write() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 120, u64::MAX);
        for i in 0..5 {
            s.write(&profile(1_000_000 + i * 60, 1)).unwrap();
        }
        let starts: Vec<u64> = s.list().unwrap().iter().map(|e| e.start_s).collect();
        assert_eq!(starts, [1_000_120, 1_000_180, 1_000_240]);
    }

    #[test]
    fn the_oldest_files_go_when_the_store_is_over_its_size() {
        let tmp = tempfile::tempdir().unwrap();
        let one = pprof::encode(&profile(1_000_000, 1)).len() as u64;
        let s = store(tmp.path(), u64::MAX, one * 3 + one / 2);
        for i in 0..6 {
            s.write(&profile(1_000_000 + i * 60, 1)).unwrap();
        }
        let entries = s.list().unwrap();
        assert_eq!(entries.len(), 3, "{entries:?}");
        assert_eq!(entries[0].start_s, 1_000_180);
        assert!(entries.iter().map(|e| e.bytes).sum::<u64>() <= one * 3 + one / 2);
    }

    #[test]
    fn a_missing_store_is_empty_and_a_corrupt_file_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 60, u64::MAX);
        assert!(s.list().unwrap().is_empty());
        std::fs::create_dir_all(s.path()).unwrap();
        std::fs::write(s.path().join("1000.pb.gz"), b"not a profile").unwrap();
        std::fs::write(s.path().join("notes.txt"), b"ignored").unwrap();
        let err = s.read(0, u64::MAX).unwrap_err().to_string();
        assert!(err.contains("1000.pb.gz"), "{err}");
    }

    #[test]
    fn an_empty_range_says_whether_the_store_is_empty_begins_later_or_has_a_gap() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), u64::MAX, u64::MAX);
        let span = |r: &str| Ago::parse(r).unwrap();
        let now = 1_800_000_000;
        let e = s.read_at(span("10m..0s"), now).unwrap_err();
        assert!(matches!(e, SpanError::Empty { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&tmp.path().join("profiles").display().to_string())
                && text.contains("at the end of its first period"),
            "{text}"
        );

        // The agent's first three minutes: two periods stored, the first
        // started 187 s ago.
        s.write(&profile(now - 187, 1)).unwrap();
        s.write(&profile(now - 127, 1)).unwrap();
        let e = s.read_at(span("20m..10m"), now).unwrap_err();
        assert!(
            matches!(e, SpanError::BeforeFirst { first_s, .. } if first_s == now - 187),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "20m..10m is before the first stored profile, at 2027-01-15T07:56:53Z (4m ago) \
                 in {}: 4m..0s holds every stored profile",
                s.path().display()
            )
        );
        assert_eq!(s.read_at(span("4m..0s"), now).unwrap().samples(), 22);
        // A span after the newest period is not "before the first".
        let e = s.read_at(span("60s..0s"), now).unwrap_err();
        assert!(matches!(e, SpanError::NoneIn { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("(4m ago) to 2027-01-15T07:57:53Z (3m ago)"),
            "{e}"
        );
    }

    #[test]
    fn times_ago_round_up_to_a_unit_a_range_can_name() {
        assert_eq!(rough_ago(0), "0s");
        assert_eq!(rough_ago(119), "119s");
        assert_eq!(rough_ago(120), "2m");
        assert_eq!(rough_ago(187), "4m");
        assert_eq!(rough_ago(7200), "2h");
        assert_eq!(rough_ago(7201), "3h");
        assert_eq!(rough_ago(200_000), "3d");
        for (range, shown) in [
            ("7200s..90s", "7200s..90s"),
            ("48h..47h", "48h..47h"),
            ("2d..1d", "2d..1d"),
            ("120m..0s", "2h..0s"),
            ("20m..10m", "20m..10m"),
        ] {
            assert_eq!(Ago::parse(range).unwrap().to_string(), shown);
        }
    }

    #[test]
    fn spans_parse_from_longer_ago_to_shorter_ago() {
        let m = |n: u64| Duration::from_secs(n * 60);
        assert_eq!(
            Ago::parse("20m..10m"),
            Ok(Ago {
                since: m(20),
                until: m(10)
            })
        );
        assert_eq!(Ago::parse("1d..0s").unwrap().since, m(24 * 60));
        assert_eq!(Ago::parse("90s..0s").unwrap().bounds(1000), (910, 1000));
        for bad in [
            "10m..20m", "10m..10m", "10m", "10x..0s", "..0s", "-5m..0s", "m..0s",
        ] {
            assert!(Ago::parse(bad).is_err(), "{bad}");
        }
        assert!(Ago::parse("10m..20m")
            .unwrap_err()
            .contains("longer ago to shorter ago"));
    }
}
