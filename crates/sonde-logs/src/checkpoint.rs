//! The checkpoints of one log source, in one file that a crash at any
//! instant leaves readable.
//!
//! [`Checkpoints`] hold, per file, its [`Identity`], the path it was last
//! seen at and the offset of its first byte not yet acknowledged. A
//! [`CheckpointFile`] saves them atomically: the new content is written to a
//! temporary file in the same directory, fsynced, renamed over the old file,
//! and the directory is fsynced, so the file on disk is always either the
//! old or the new checkpoints, never a mix.
//!
//! # Format
//!
//! One header line, then a JSON body that people can read when debugging:
//!
//! ```text
//! sonde-checkpoint 1 crc32=1c291ca3 len=87
//! {"files":[{"dev":2049,"ino":131,"head":{"len":12,"crc":...},"path":"/var/log/app.log","offset":12}]}
//! ```
//!
//! `1` is the format version, `crc32` the CRC-32 of the body and `len` its
//! length in bytes. A file whose header, length or checksum does not check
//! out is reported by [`CheckpointFile::load`] and not trusted: rename
//! makes a torn file impossible on a filesystem that keeps its promises, so
//! such a file was damaged by something else, and resuming from offsets
//! read out of it could skip lines.
//!
//! # The journal
//!
//! A source that follows thousands of files changes the offsets of a few of
//! them each second. [`CheckpointFile::update`] therefore appends what
//! changed since the last save to a journal beside the file
//! (`name.checkpoint.journal`), fsynced, and writes the whole file again
//! only when the journal has grown to the file's size: with 10,000 files
//! and 20 of them written, a second's save is a few hundred bytes instead
//! of 1.5 MB. The journal's first line names the file it continues (the
//! CRC-32 and length of that file's body); each line after it is one change,
//! `CRC32 JSON`, the JSON being `{"set":{...}}` (a file's new checkpoint)
//! or `{"del":{"dev":..,"ino":..}}` (a file no longer followed).
//! [`CheckpointFile::load`] applies the journal when it continues the file
//! as it is, up to its first line that is cut or does not check out (the
//! last append, when a crash cut it short). A journal left from an older
//! file, by a crash between writing a new file and starting a new journal,
//! names another body and is ignored.
//!
//! # A full, read-only or removed directory
//!
//! A save that fails never costs the checkpoints saved before it:
//!
//! * The whole file is only ever replaced by a rename of a complete,
//!   fsynced temporary file; it is never opened for writing itself, so a
//!   write cut short by a full disk (`ENOSPC`), a read-only file system
//!   (`EROFS`) or anything else stops before the rename, and the file
//!   holds the previous checkpoints. The temporary file is then removed,
//!   so that it does not hold the space a later save needs.
//! * An append cut short leaves at most one cut line at the journal's end,
//!   which [`CheckpointFile::load`] stops at: the lines before it are
//!   whole changes, each a file's offset that had been acknowledged, so
//!   the checkpoints loaded are those of the last save or, file by file,
//!   newer ones. After a failed append the next save writes the whole file
//!   and a new journal, never appending after the cut line.
//! * A directory removed under a running source (`rm -rf` of `data_dir`)
//!   is made again at the next save, which then writes the whole file:
//!   a journal that is gone is not a failure, only a reason to write the
//!   file again.
//!
//! A failed save returns a [`SaveError`] naming the path and the I/O
//! error; the caller counts it and tries again at its next save.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::identity::{FileId, Identity};

/// The format version written in the header.
pub const VERSION: u32 = 1;

const MAGIC: &str = "sonde-checkpoint";

/// Where one file is: what has been acknowledged of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCheckpoint {
    /// The file's identity.
    #[serde(flatten)]
    pub identity: Identity,
    /// The path the file was last seen at, for people reading the file (a
    /// path that is not UTF-8 is stored lossily; identity never uses it).
    pub path: String,
    /// File offset of the first byte not yet acknowledged.
    pub offset: u64,
}

/// The checkpoints of one source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoints {
    /// One entry per file, in no particular order.
    pub files: Vec<FileCheckpoint>,
}

/// The file that holds a source's [`Checkpoints`], and its journal.
#[derive(Debug, Clone)]
pub struct CheckpointFile {
    path: PathBuf,
    temp: PathBuf,
    dir: PathBuf,
    journal: PathBuf,
    journal_temp: PathBuf,
    /// What the file and the journal hold together, after the last
    /// [`CheckpointFile::update`]; `None` before the first.
    saved: Option<Saved>,
}

/// What [`CheckpointFile::update`] last left on disk.
#[derive(Debug, Clone)]
struct Saved {
    files: HashMap<FileId, FileCheckpoint>,
    /// The file's size, and the journal's.
    file_bytes: usize,
    journal_bytes: usize,
}

/// A journal's smallest size before the whole file is written again.
const JOURNAL_MIN_BYTES: usize = 64 << 10;

const JOURNAL_MAGIC: &str = "sonde-checkpoint-journal";

/// One line of the journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Change {
    /// A file's checkpoint, new or moved.
    Set(FileCheckpoint),
    /// A file no longer followed.
    Del(FileId),
}

/// Why [`CheckpointFile::new`] refused a source name.
#[derive(Debug, thiserror::Error)]
#[error("source name {name:?} cannot name a checkpoint file: use letters, digits, '-', '_' and '.', not starting with '.'")]
pub struct NameError {
    /// The name.
    pub name: String,
}

/// Why [`CheckpointFile::load`] found no checkpoints it could trust.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read checkpoint file {path}: {error}")]
    Read {
        /// The checkpoint file.
        path: PathBuf,
        /// The read error.
        error: io::Error,
    },
    /// The header line is missing or malformed, or the body is shorter or
    /// longer than the header says: the file was cut or overwritten.
    #[error("checkpoint file {path} is torn or not a checkpoint file ({problem})")]
    Torn {
        /// The checkpoint file.
        path: PathBuf,
        /// What did not check out.
        problem: &'static str,
    },
    /// The file was written by another format version.
    #[error(
        "checkpoint file {path} has format version {found}, this build reads version {VERSION}"
    )]
    Version {
        /// The checkpoint file.
        path: PathBuf,
        /// The version in its header.
        found: u32,
    },
    /// The body does not match the checksum in the header.
    #[error("checkpoint file {path} is corrupt: its checksum does not match")]
    Checksum {
        /// The checkpoint file.
        path: PathBuf,
    },
    /// The body checks out but is not valid checkpoint JSON.
    #[error("checkpoint file {path} has a malformed body: {error}")]
    Body {
        /// The checkpoint file.
        path: PathBuf,
        /// The JSON error.
        error: serde_json::Error,
    },
}

/// Why [`CheckpointFile::save`] failed; the previous checkpoints are then
/// still in place.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Writing or syncing the temporary file failed.
    #[error("cannot write checkpoint file {path}: {error}")]
    Write {
        /// The temporary file.
        path: PathBuf,
        /// The I/O error.
        error: io::Error,
    },
    /// Renaming the temporary file over the checkpoint file failed.
    #[error("cannot rename {from} to {to}: {error}")]
    Rename {
        /// The temporary file.
        from: PathBuf,
        /// The checkpoint file.
        to: PathBuf,
        /// The I/O error.
        error: io::Error,
    },
    /// Syncing the directory failed, so the rename may not survive a power
    /// loss.
    #[error("cannot sync directory {path}: {error}")]
    SyncDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        error: io::Error,
    },
}

impl SaveError {
    /// The path that could not be written, renamed or synced.
    pub fn path(&self) -> &Path {
        match self {
            SaveError::Write { path, .. } | SaveError::SyncDir { path, .. } => path,
            SaveError::Rename { to, .. } => to,
        }
    }

    /// The I/O error.
    pub fn error(&self) -> &io::Error {
        match self {
            SaveError::Write { error, .. }
            | SaveError::Rename { error, .. }
            | SaveError::SyncDir { error, .. } => error,
        }
    }
}

impl CheckpointFile {
    /// The checkpoint file of source `name` in `dir`: `dir/name.checkpoint`,
    /// with its temporary file `dir/.name.checkpoint.tmp`.
    ///
    /// # Errors
    ///
    /// A name that is empty, starts with `.` or holds anything but ASCII
    /// letters, digits, `-`, `_` and `.`, since it would name a file
    /// elsewhere or a hidden one.
    pub fn new(dir: &Path, name: &str) -> Result<Self, NameError> {
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if name.is_empty() || name.starts_with('.') || !name.chars().all(plain) {
            return Err(NameError {
                name: name.to_owned(),
            });
        }
        Ok(Self {
            path: dir.join(format!("{name}.checkpoint")),
            temp: dir.join(format!(".{name}.checkpoint.tmp")),
            dir: dir.to_path_buf(),
            journal: dir.join(format!("{name}.checkpoint.journal")),
            journal_temp: dir.join(format!(".{name}.checkpoint.journal.tmp")),
            saved: None,
        })
    }

    /// The path of the checkpoint file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved checkpoints, or `None` if none were ever saved.
    ///
    /// # Errors
    ///
    /// A file that cannot be read, or whose header, length, checksum or body
    /// does not check out; see [`LoadError`].
    pub fn load(&self) -> Result<Option<Checkpoints>, LoadError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LoadError::Read {
                    path: self.path.clone(),
                    error: source,
                })
            }
        };
        let (mut checkpoints, body) = decode(&bytes, &self.path)?;
        if let Ok(journal) = fs::read(&self.journal) {
            replay(&journal, &journal_id(body), &mut checkpoints);
        }
        Ok(Some(checkpoints))
    }

    /// Saves `checkpoints` as [`CheckpointFile::save`] does, durably, but
    /// by appending what changed since the last update to the journal (see
    /// the [module docs](self)); the whole file is written at the first
    /// update and whenever the journal has grown to its size.
    ///
    /// # Errors
    ///
    /// The step that failed; the checkpoints on disk are then the previous
    /// ones, and the next update writes the whole file.
    pub fn update(&mut self, checkpoints: &Checkpoints) -> Result<(), SaveError> {
        let Some(saved) = &self.saved else {
            return self.rewrite(checkpoints);
        };
        let mut changes = Vec::new();
        let mut new = 0;
        for c in &checkpoints.files {
            match saved.files.get(&c.identity.id) {
                Some(was) if was == c => {}
                Some(_) => changes.push(Change::Set(c.clone())),
                None => {
                    new += 1;
                    changes.push(Change::Set(c.clone()));
                }
            }
        }
        // Some saved file is no longer among them.
        if saved.files.len() + new > checkpoints.files.len() {
            let now: HashSet<FileId> = checkpoints.files.iter().map(|c| c.identity.id).collect();
            for id in saved.files.keys() {
                if !now.contains(id) {
                    changes.push(Change::Del(*id));
                }
            }
        }
        if !self.append(changes)? {
            return self.rewrite(checkpoints);
        }
        Ok(())
    }

    /// [`CheckpointFile::update`] for a caller that knows which
    /// checkpoints may have changed since the last update and that no file
    /// was dropped: only `changed` are compared with what is saved.
    /// Returns false, having saved nothing, when the whole file must be
    /// written (no update yet, or the journal is full): then call
    /// [`CheckpointFile::update`] with every checkpoint.
    ///
    /// # Errors
    ///
    /// As [`CheckpointFile::update`].
    pub fn update_some(&mut self, changed: &[FileCheckpoint]) -> Result<bool, SaveError> {
        let Some(saved) = &self.saved else {
            return Ok(false);
        };
        let changes = changed
            .iter()
            .filter(|c| saved.files.get(&c.identity.id) != Some(*c))
            .map(|c| Change::Set(c.clone()))
            .collect();
        self.append(changes)
    }

    /// Appends `changes` to the journal; false if they do not fit.
    fn append(&mut self, changes: Vec<Change>) -> Result<bool, SaveError> {
        let Some(saved) = &self.saved else {
            return Ok(false);
        };
        if changes.is_empty() {
            return Ok(true);
        }
        let mut lines = Vec::new();
        for change in &changes {
            // Serialising plain structs into a Vec cannot fail.
            let json = serde_json::to_vec(change).expect("a change serialises");
            write!(lines, "{:08x} ", crc32fast::hash(&json)).expect("writing to a Vec");
            lines.extend_from_slice(&json);
            lines.push(b'\n');
        }
        if saved.journal_bytes + lines.len() > saved.file_bytes.max(JOURNAL_MIN_BYTES) {
            return Ok(false);
        }
        let appended = OpenOptions::new()
            .append(true)
            .open(&self.journal)
            .and_then(|mut f| {
                f.write_all(&lines)?;
                f.sync_data()
            });
        if let Err(source) = appended {
            self.saved = None;
            if source.kind() == io::ErrorKind::NotFound {
                // The journal, or the whole directory, was removed: the
                // whole file is written again (and the directory made).
                return Ok(false);
            }
            return Err(SaveError::Write {
                path: self.journal.clone(),
                error: source,
            });
        }
        let Some(saved) = &mut self.saved else {
            return Ok(false);
        };
        saved.journal_bytes += lines.len();
        for change in changes {
            match change {
                Change::Set(c) => {
                    saved.files.insert(c.identity.id, c);
                }
                Change::Del(id) => {
                    saved.files.remove(&id);
                }
            }
        }
        Ok(true)
    }

    /// Writes the whole file, then a new journal that continues it.
    fn rewrite(&mut self, checkpoints: &Checkpoints) -> Result<(), SaveError> {
        self.saved = None;
        let (file_bytes, id) = self.write_file(checkpoints)?;
        let header = format!("{JOURNAL_MAGIC} {id}\n");
        let written = fs::write(&self.journal_temp, &header)
            .and_then(|()| File::open(&self.journal_temp)?.sync_all());
        if let Err(source) = written {
            let _ = fs::remove_file(&self.journal_temp);
            return Err(SaveError::Write {
                path: self.journal_temp.clone(),
                error: source,
            });
        }
        // Until this rename, the old journal names the old body and is
        // ignored; a crash between the two leaves the new file alone.
        fs::rename(&self.journal_temp, &self.journal).map_err(|source| SaveError::Rename {
            from: self.journal_temp.clone(),
            to: self.journal.clone(),
            error: source,
        })?;
        self.sync_dir()?;
        self.saved = Some(Saved {
            files: checkpoints
                .files
                .iter()
                .map(|c| (c.identity.id, c.clone()))
                .collect(),
            file_bytes,
            journal_bytes: header.len(),
        });
        Ok(())
    }

    /// Replaces the saved checkpoints with `checkpoints`, atomically and
    /// durably.
    ///
    /// # Errors
    ///
    /// The step that failed; see [`SaveError`].
    pub fn save(&self, checkpoints: &Checkpoints) -> Result<(), SaveError> {
        self.write_file(checkpoints).map(|_| ())
    }

    /// [`CheckpointFile::save`]; returns the file's size and how a
    /// journal names its body.
    fn write_file(&self, checkpoints: &Checkpoints) -> Result<(usize, String), SaveError> {
        let (out, start) = encode_in_place(checkpoints);
        let bytes = &out[start..];
        if let Err(source) = self.write_temp(bytes) {
            // A temporary file cut short by a full disk would hold the
            // space the next save needs.
            let _ = fs::remove_file(&self.temp);
            return Err(SaveError::Write {
                path: self.temp.clone(),
                error: source,
            });
        }
        if let Err(source) = fs::rename(&self.temp, &self.path) {
            let _ = fs::remove_file(&self.temp);
            return Err(SaveError::Rename {
                from: self.temp.clone(),
                to: self.path.clone(),
                error: source,
            });
        }
        // The rename lives in the directory: without this fsync a power loss
        // could bring back the old checkpoints, or none at all.
        self.sync_dir()?;
        let body_at = memchr::memchr(b'\n', bytes).map_or(0, |nl| nl + 1);
        Ok((bytes.len(), journal_id(&bytes[body_at..])))
    }

    /// Writes and syncs the temporary file, making the directory again if
    /// it was removed.
    fn write_temp(&self, bytes: &[u8]) -> io::Result<()> {
        let open = || {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&self.temp)
        };
        let mut file = match open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&self.dir)?;
                open()?
            }
            file => file?,
        };
        file.write_all(bytes)?;
        file.sync_all()
    }

    fn sync_dir(&self) -> Result<(), SaveError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| SaveError::SyncDir {
                path: self.dir.clone(),
                error: source,
            })
    }
}

/// How a journal names the file body it continues.
fn journal_id(body: &[u8]) -> String {
    format!("body={:08x}-{}", crc32fast::hash(body), body.len())
}

/// Applies to `checkpoints` the changes of `journal` if it continues the
/// body named `id`, up to its first line that is cut or does not check
/// out.
fn replay(journal: &[u8], id: &str, checkpoints: &mut Checkpoints) {
    let mut lines = journal.split_inclusive(|&b| b == b'\n');
    let header = format!("{JOURNAL_MAGIC} {id}\n");
    if lines.next() != Some(header.as_bytes()) {
        return;
    }
    let mut at: HashMap<FileId, usize> = (checkpoints.files.iter().enumerate())
        .map(|(i, c)| (c.identity.id, i))
        .collect();
    let mut files: Vec<Option<FileCheckpoint>> = std::mem::take(&mut checkpoints.files)
        .into_iter()
        .map(Some)
        .collect();
    for line in lines {
        let Some(line) = line.strip_suffix(b"\n") else {
            break;
        };
        let Some((crc, json)) = line.split_at_checked(9) else {
            break;
        };
        let crc = std::str::from_utf8(&crc[..8])
            .ok()
            .and_then(|c| u32::from_str_radix(c, 16).ok());
        if crc != Some(crc32fast::hash(json)) {
            break;
        }
        let Ok(change) = serde_json::from_slice::<Change>(json) else {
            break;
        };
        match change {
            Change::Set(c) => match at.get(&c.identity.id) {
                Some(&i) => files[i] = Some(c),
                None => {
                    at.insert(c.identity.id, files.len());
                    files.push(Some(c));
                }
            },
            Change::Del(id) => {
                if let Some(i) = at.remove(&id) {
                    files[i] = None;
                }
            }
        }
    }
    checkpoints.files = files.into_iter().flatten().collect();
}

/// The file's bytes: the header line, then the JSON body.
#[cfg(test)]
fn encode(checkpoints: &Checkpoints) -> Vec<u8> {
    let (out, start) = encode_in_place(checkpoints);
    out[start..].to_vec()
}

/// The file's bytes are `out[start..]`: the body is written first, after
/// room for the header, which then goes right before it.
fn encode_in_place(checkpoints: &Checkpoints) -> (Vec<u8>, usize) {
    // Room for the header and about 150 bytes a file, so that the buffer
    // is not grown (and copied) while thousands of files are written out.
    let mut out = Vec::with_capacity(HEADER_ROOM + 160 * checkpoints.files.len());
    out.resize(HEADER_ROOM, b' ');
    // Serialising plain structs of numbers and strings into a Vec cannot
    // fail.
    serde_json::to_writer(&mut out, checkpoints).expect("checkpoints serialise");
    let body = &out[HEADER_ROOM..];
    let header = format!(
        "{MAGIC} {VERSION} crc32={:08x} len={}\n",
        crc32fast::hash(body),
        body.len()
    );
    let start = HEADER_ROOM - header.len();
    out[start..HEADER_ROOM].copy_from_slice(header.as_bytes());
    (out, start)
}

/// Bytes kept before the body for the header line, more than it takes.
const HEADER_ROOM: usize = 64;

/// The checkpoints in a file's bytes, and the body they came from.
fn decode<'b>(bytes: &'b [u8], path: &Path) -> Result<(Checkpoints, &'b [u8]), LoadError> {
    let torn = |problem| LoadError::Torn {
        path: path.to_path_buf(),
        problem,
    };
    let nl = memchr::memchr(b'\n', bytes).ok_or(torn("no header line"))?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| torn("header is not text"))?;
    let body = &bytes[nl + 1..];
    let mut fields = header.split(' ');
    if fields.next() != Some(MAGIC) {
        return Err(torn("header does not start with sonde-checkpoint"));
    }
    let version: u32 = fields
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or(torn("header has no version"))?;
    if version != VERSION {
        return Err(LoadError::Version {
            path: path.to_path_buf(),
            found: version,
        });
    }
    let crc = fields
        .next()
        .and_then(|f| f.strip_prefix("crc32="))
        .and_then(|v| u32::from_str_radix(v, 16).ok())
        .ok_or(torn("header has no crc32"))?;
    let len: usize = fields
        .next()
        .and_then(|f| f.strip_prefix("len="))
        .and_then(|v| v.parse().ok())
        .ok_or(torn("header has no len"))?;
    if fields.next().is_some() {
        return Err(torn("header has extra fields"));
    }
    if body.len() != len {
        return Err(torn("body length differs from the header's"));
    }
    if crc32fast::hash(body) != crc {
        return Err(LoadError::Checksum {
            path: path.to_path_buf(),
        });
    }
    let checkpoints = serde_json::from_slice(body).map_err(|source| LoadError::Body {
        path: path.to_path_buf(),
        error: source,
    })?;
    Ok((checkpoints, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{FileId, Fingerprint};

    fn sample() -> Checkpoints {
        Checkpoints {
            files: vec![
                FileCheckpoint {
                    identity: Identity {
                        id: FileId {
                            dev: 2049,
                            ino: 131,
                        },
                        head: Fingerprint::of(b"first line\n"),
                    },
                    path: "/var/log/app.log".into(),
                    offset: 11,
                },
                FileCheckpoint {
                    identity: Identity {
                        id: FileId { dev: 2049, ino: 7 },
                        head: Fingerprint::EMPTY,
                    },
                    path: "/var/log/app \"quoted\".log".into(),
                    offset: 0,
                },
            ],
        }
    }

    #[test]
    fn checkpoints_round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), "app").unwrap();
        assert!(file.load().unwrap().is_none(), "nothing saved yet");
        file.save(&sample()).unwrap();
        assert_eq!(file.load().unwrap(), Some(sample()));
        let mut next = sample();
        next.files[0].offset = 500;
        file.save(&next).unwrap();
        assert_eq!(file.load().unwrap(), Some(next));
        // Only the checkpoint file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("app.checkpoint")]);
    }

    #[test]
    fn the_file_is_readable_json_under_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), "app").unwrap();
        file.save(&sample()).unwrap();
        let text = fs::read_to_string(file.path()).unwrap();
        let (header, body) = text.split_once('\n').unwrap();
        assert_eq!(
            header,
            format!(
                "sonde-checkpoint 1 crc32={:08x} len={}",
                crc32fast::hash(body.as_bytes()),
                body.len()
            )
        );
        assert!(
            body.starts_with(r#"{"files":[{"dev":2049,"ino":131,"head":{"len":11,"#),
            "{body}"
        );
        assert!(
            body.contains(r#""path":"/var/log/app.log","offset":11}"#),
            "{body}"
        );
    }

    #[test]
    fn a_torn_file_is_rejected_at_every_length() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), "app").unwrap();
        let whole = encode(&sample());
        for len in 0..whole.len() {
            fs::write(file.path(), &whole[..len]).unwrap();
            match file.load() {
                Err(LoadError::Torn { .. }) => {}
                other => panic!("cut at {len}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_corrupt_body_is_rejected_by_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), "app").unwrap();
        file.save(&sample()).unwrap();
        let mut bytes = fs::read(file.path()).unwrap();
        let at = bytes.iter().rposition(|&b| b == b'1').unwrap();
        bytes[at] = b'9'; // offset 11 becomes 19: still valid JSON
        fs::write(file.path(), &bytes).unwrap();
        let err = file.load().unwrap_err();
        assert!(matches!(err, LoadError::Checksum { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "checkpoint file {} is corrupt: its checksum does not match",
                file.path().display()
            )
        );
    }

    #[test]
    fn a_name_that_would_leave_the_directory_is_refused() {
        let dir = Path::new("/var/lib/sonde");
        for bad in ["", "../etc", "a/b", ".hidden", "sp ace"] {
            assert!(CheckpointFile::new(dir, bad).is_err(), "{bad:?}");
        }
        let ok = CheckpointFile::new(dir, "app-1.v2_x").unwrap();
        assert_eq!(ok.path(), Path::new("/var/lib/sonde/app-1.v2_x.checkpoint"));
    }

    #[test]
    fn another_version_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), "app").unwrap();
        fs::write(file.path(), "sonde-checkpoint 2 crc32=00000000 len=0\n").unwrap();
        assert!(matches!(
            file.load(),
            Err(LoadError::Version { found: 2, .. })
        ));
    }

    #[test]
    fn a_checked_body_that_is_not_checkpoints_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), "app").unwrap();
        let body = br#"{"files":[{"dev":1}]}"#;
        let mut bytes = format!(
            "sonde-checkpoint 1 crc32={:08x} len={}\n",
            crc32fast::hash(body),
            body.len()
        )
        .into_bytes();
        bytes.extend_from_slice(body);
        fs::write(file.path(), &bytes).unwrap();
        assert!(matches!(file.load(), Err(LoadError::Body { .. })));
    }

    /// A checkpoint of file `ino` at `offset`.
    fn at(ino: u64, offset: u64) -> FileCheckpoint {
        FileCheckpoint {
            identity: Identity {
                id: FileId { dev: 8, ino },
                head: Fingerprint::of(format!("head {ino}").as_bytes()),
            },
            path: format!("/var/log/f{ino}.log"),
            offset,
        }
    }

    fn sorted(mut c: Checkpoints) -> Vec<FileCheckpoint> {
        c.files.sort_by_key(|f| f.identity.id.ino);
        c.files
    }

    #[test]
    fn an_update_appends_what_changed_to_the_journal_and_leaves_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = CheckpointFile::new(dir.path(), "app").unwrap();
        let mut now = Checkpoints {
            files: (0..1000).map(|i| at(i, 100)).collect(),
        };
        file.update(&now).unwrap();
        let whole = fs::read(file.path()).unwrap();
        let journal_path = dir.path().join("app.checkpoint.journal");
        let journal = fs::metadata(&journal_path).unwrap().len();
        now.files[7].offset = 250;
        now.files.remove(3);
        now.files.push(at(5000, 0));
        file.update(&now).unwrap();
        assert_eq!(
            fs::read(file.path()).unwrap(),
            whole,
            "the file is untouched"
        );
        let grown = fs::metadata(&journal_path).unwrap().len() - journal;
        assert!(
            grown > 0 && grown < 400,
            "three short lines, not the whole file: {grown} bytes"
        );
        assert_eq!(sorted(file.load().unwrap().unwrap()), sorted(now.clone()));
        // Nothing changed: nothing written.
        file.update(&now).unwrap();
        assert_eq!(fs::metadata(&journal_path).unwrap().len(), journal + grown);
    }

    #[test]
    fn update_some_compares_the_checkpoints_given_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = CheckpointFile::new(dir.path(), "app").unwrap();
        assert!(!file.update_some(&[at(1, 5)]).unwrap(), "nothing saved yet");
        assert!(file.load().unwrap().is_none());
        file.update(&Checkpoints {
            files: vec![at(1, 10), at(2, 20)],
        })
        .unwrap();
        assert!(file.update_some(&[at(2, 25)]).unwrap());
        assert_eq!(
            file.load().unwrap().unwrap().files,
            vec![at(1, 10), at(2, 25)]
        );
    }

    #[test]
    fn a_journal_cut_short_is_applied_up_to_its_last_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = CheckpointFile::new(dir.path(), "app").unwrap();
        let mut now = Checkpoints {
            files: vec![at(1, 10), at(2, 20)],
        };
        file.update(&now).unwrap();
        now.files[0].offset = 11;
        file.update(&now).unwrap();
        now.files[1].offset = 21;
        file.update(&now).unwrap();
        let journal_path = dir.path().join("app.checkpoint.journal");
        let journal = fs::read(&journal_path).unwrap();
        // The last append cut in its middle, as a crash would leave it.
        fs::write(&journal_path, &journal[..journal.len() - 5]).unwrap();
        assert_eq!(
            file.load().unwrap().unwrap().files,
            vec![at(1, 11), at(2, 20)]
        );
        // A line whose checksum does not match ends the replay too.
        let mut bad = journal.clone();
        let last_line = bad[..bad.len() - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .unwrap()
            + 1;
        bad[last_line] = if bad[last_line] == b'0' { b'1' } else { b'0' };
        fs::write(&journal_path, &bad).unwrap();
        assert_eq!(
            file.load().unwrap().unwrap().files,
            vec![at(1, 11), at(2, 20)]
        );
    }

    #[test]
    fn a_journal_that_continues_another_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = CheckpointFile::new(dir.path(), "app").unwrap();
        file.update(&Checkpoints {
            files: vec![at(1, 10)],
        })
        .unwrap();
        file.update(&Checkpoints {
            files: vec![at(1, 99)],
        })
        .unwrap();
        // A whole file written after the journal (a crash before a new
        // journal was started): the journal's change is older than it.
        file.save(&Checkpoints {
            files: vec![at(1, 50)],
        })
        .unwrap();
        assert_eq!(file.load().unwrap().unwrap().files, vec![at(1, 50)]);
    }

    #[test]
    fn the_whole_file_is_written_again_once_the_journal_reaches_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = CheckpointFile::new(dir.path(), "app").unwrap();
        let mut now = Checkpoints {
            files: (0..10).map(|i| at(i, 0)).collect(),
        };
        let journal_path = dir.path().join("app.checkpoint.journal");
        let mut largest = 0;
        for n in 1..2000 {
            now.files[n % 10].offset = n as u64;
            file.update(&now).unwrap();
            largest = largest.max(fs::metadata(&journal_path).unwrap().len());
        }
        assert!(
            largest <= (JOURNAL_MIN_BYTES + 200) as u64,
            "the journal is bounded: {largest} bytes"
        );
        assert_eq!(sorted(file.load().unwrap().unwrap()), sorted(now));
    }

    use sonde_testkit::Tmpfs;

    /// The files in `dir` other than `keep`.
    fn others(dir: &Path, keep: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !keep.contains(&n.as_str()))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_full_disk_fails_the_save_and_keeps_the_previous_checkpoints() {
        let Some(tmpfs) = Tmpfs::mount("256k") else {
            return;
        };
        // The directory does not exist yet: the first save makes it.
        let dir = tmpfs.path().join("checkpoints");
        let mut file = CheckpointFile::new(&dir, "app").unwrap();
        let before = Checkpoints {
            files: (0..100).map(|i| at(i, 10)).collect(),
        };
        file.update(&before).unwrap();
        let whole = fs::read(file.path()).unwrap();
        let filler = tmpfs.fill();

        // 100 changed lines do not fit in the journal's last page: the
        // append is cut part-way.
        let mut after = before.clone();
        for f in &mut after.files {
            f.offset = 20;
        }
        let e = file.update(&after).unwrap_err();
        assert_eq!(e.error().raw_os_error(), Some(nix::libc::ENOSPC), "{e}");
        assert_eq!(e.path(), dir.join("app.checkpoint.journal"));
        let loaded = file.load().unwrap().unwrap();
        assert_eq!(loaded.files.len(), 100);
        let moved = loaded.files.iter().filter(|f| f.offset == 20).count();
        assert!(
            loaded
                .files
                .iter()
                .all(|f| f.offset == 10 || f.offset == 20)
                && moved < 100,
            "each file as before or as acknowledged since: {loaded:?}"
        );
        // The next save writes the whole file, which does not fit either.
        let e = file.update(&after).unwrap_err();
        assert_eq!(e.error().raw_os_error(), Some(nix::libc::ENOSPC), "{e}");
        assert_eq!(fs::read(file.path()).unwrap(), whole, "the file untouched");
        assert_eq!(
            others(&dir, &["app.checkpoint", "app.checkpoint.journal"]),
            Vec::<String>::new(),
            "no temporary file left to hold space"
        );
        assert_eq!(file.load().unwrap().unwrap().files.len(), 100);

        // Space comes back: the next save goes through.
        fs::remove_file(filler).unwrap();
        file.update(&after).unwrap();
        assert_eq!(sorted(file.load().unwrap().unwrap()), sorted(after));
    }

    #[test]
    fn a_read_only_directory_fails_the_save_and_a_writable_one_takes_it() {
        let Some(tmpfs) = Tmpfs::mount("1m") else {
            return;
        };
        let mut file = CheckpointFile::new(tmpfs.path(), "app").unwrap();
        let before = Checkpoints {
            files: vec![at(1, 10), at(2, 20)],
        };
        file.update(&before).unwrap();
        tmpfs.remount("ro");
        let after = Checkpoints {
            files: vec![at(1, 11), at(2, 21)],
        };
        for _ in 0..2 {
            // An append to the journal, then a whole file: both refused.
            let e = file.update(&after).unwrap_err();
            assert_eq!(e.error().raw_os_error(), Some(nix::libc::EROFS), "{e}");
            assert_eq!(file.load().unwrap().unwrap(), before);
        }
        tmpfs.remount("rw");
        file.update(&after).unwrap();
        assert_eq!(file.load().unwrap().unwrap(), after);
        assert_eq!(
            others(tmpfs.path(), &["app.checkpoint", "app.checkpoint.journal"]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_removed_directory_is_made_again_at_the_next_save() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("checkpoints");
        let mut file = CheckpointFile::new(&dir, "app").unwrap();
        file.update(&Checkpoints {
            files: vec![at(1, 10), at(2, 20)],
        })
        .unwrap();
        file.update(&Checkpoints {
            files: vec![at(1, 11), at(2, 20)],
        })
        .unwrap();
        fs::remove_dir_all(data.path()).unwrap();
        // The journal is gone: update_some asks for the whole file, which
        // update writes, making the directory.
        assert!(!file.update_some(&[at(1, 12)]).unwrap());
        let now = Checkpoints {
            files: vec![at(1, 12), at(2, 20)],
        };
        file.update(&now).unwrap();
        assert_eq!(file.load().unwrap().unwrap(), now);
        // And the journal goes on from there.
        assert!(file.update_some(&[at(2, 21)]).unwrap());
        fs::remove_dir_all(&dir).unwrap();
        let now = Checkpoints {
            files: vec![at(1, 13), at(2, 21)],
        };
        file.update(&now).unwrap();
        assert_eq!(file.load().unwrap().unwrap(), now);
    }

    use proptest::prelude::*;

    proptest! {
        /// Whatever sequence of checkpoints is saved by updates, with
        /// restarts (a new CheckpointFile) between them, loading gives the
        /// last one.
        #[test]
        fn loading_gives_what_the_last_update_saved(
            steps in proptest::collection::vec(
                (proptest::collection::btree_map(0u64..30, 0u64..1000, 0..20), any::<bool>()),
                1..40,
            )
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut file = CheckpointFile::new(dir.path(), "app").unwrap();
            for (files, restart) in steps {
                if restart {
                    file = CheckpointFile::new(dir.path(), "app").unwrap();
                }
                let now = Checkpoints {
                    files: files.into_iter().map(|(ino, off)| at(ino, off)).collect(),
                };
                file.update(&now).unwrap();
                prop_assert_eq!(sorted(file.load().unwrap().unwrap()), sorted(now));
            }
        }
    }
}
