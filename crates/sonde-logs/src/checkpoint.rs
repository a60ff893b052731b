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

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::identity::Identity;

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

/// The file that holds a source's [`Checkpoints`].
#[derive(Debug, Clone)]
pub struct CheckpointFile {
    path: PathBuf,
    temp: PathBuf,
    dir: PathBuf,
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
    #[error("cannot read checkpoint file {path}: {source}")]
    Read {
        /// The checkpoint file.
        path: PathBuf,
        /// The read error.
        source: io::Error,
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
    #[error("checkpoint file {path} has a malformed body: {source}")]
    Body {
        /// The checkpoint file.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
}

/// Why [`CheckpointFile::save`] failed; the previous checkpoints are then
/// still in place.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Writing or syncing the temporary file failed.
    #[error("cannot write checkpoint file {path}: {source}")]
    Write {
        /// The temporary file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Renaming the temporary file over the checkpoint file failed.
    #[error("cannot rename {from} to {to}: {source}")]
    Rename {
        /// The temporary file.
        from: PathBuf,
        /// The checkpoint file.
        to: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Syncing the directory failed, so the rename may not survive a power
    /// loss.
    #[error("cannot sync directory {path}: {source}")]
    SyncDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
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
                    source,
                })
            }
        };
        decode(&bytes, &self.path).map(Some)
    }

    /// Replaces the saved checkpoints with `checkpoints`, atomically and
    /// durably.
    ///
    /// # Errors
    ///
    /// The step that failed; see [`SaveError`].
    pub fn save(&self, checkpoints: &Checkpoints) -> Result<(), SaveError> {
        let (out, start) = encode_in_place(checkpoints);
        let bytes = &out[start..];
        let write = |source| SaveError::Write {
            path: self.temp.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.temp)
            .map_err(write)?;
        file.write_all(bytes).map_err(write)?;
        file.sync_all().map_err(write)?;
        drop(file);
        fs::rename(&self.temp, &self.path).map_err(|source| SaveError::Rename {
            from: self.temp.clone(),
            to: self.path.clone(),
            source,
        })?;
        // The rename lives in the directory: without this fsync a power loss
        // could bring back the old checkpoints, or none at all.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| SaveError::SyncDir {
                path: self.dir.clone(),
                source,
            })
    }
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

fn decode(bytes: &[u8], path: &Path) -> Result<Checkpoints, LoadError> {
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
    serde_json::from_slice(body).map_err(|source| LoadError::Body {
        path: path.to_path_buf(),
        source,
    })
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
}
