//! Which file is which: device and inode, checked against a fingerprint of
//! the file's head.
//!
//! A path names a file only until the file is rotated, so a file is known by
//! its device and inode number. Those alone are not enough across time: a
//! filesystem hands a freed inode to the next file it creates (ext4 does so
//! at once), so a checkpoint that names a deleted file's inode would resume
//! the new file in its middle. The identity therefore also holds a
//! [`Fingerprint`] of the file's first [`FINGERPRINT_BYTES`] bytes, and a
//! file is the one a checkpoint names only when both agree.
//!
//! # The fingerprint's rules
//!
//! * It covers the first `min(size, FINGERPRINT_BYTES)` bytes, with their
//!   count, and is taken again as a short file grows: a head that still
//!   starts with the bytes the old fingerprint covered is the same file
//!   ([`Fingerprint::check`] returns [`Head::Same`]).
//! * An empty file has the empty fingerprint, which every head matches:
//!   until it gets bytes, an empty file is known by device and inode alone.
//!   Losing nothing is safe here, since there is nothing to resume into.
//! * A head shorter than the fingerprint, or with other bytes, is
//!   [`Head::Changed`]: a different file at a reused inode, or the same file
//!   truncated and written again. Either way it is read from offset 0.
//! * The same device, inode and head at another path is the same file,
//!   renamed.
//!
//! # Design
//!
//! The hash is CRC-32 (`crc32fast`, hardware-accelerated, stable across
//! versions, which a checkpoint on disk needs). It only has to tell apart
//! two heads that already share a device and inode, so a false match needs
//! an inode reused by a file whose head collides: odds of 2^-32 per reuse.
//! 1 KiB is enough to cover the timestamp of the first line of nearly every
//! log format while costing one small `pread` per check.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};

use serde::{Deserialize, Serialize};

/// How many head bytes a fingerprint covers at most.
pub const FINGERPRINT_BYTES: usize = 1024;

/// A file's device and inode: unique among the files that exist at one
/// instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileId {
    /// The device (`st_dev`).
    pub dev: u64,
    /// The inode number (`st_ino`).
    pub ino: u64,
}

impl FileId {
    /// The device and inode of a file's metadata.
    pub fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// CRC-32 of the first `len` bytes of a file; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// How many head bytes it covers (at most [`FINGERPRINT_BYTES`]).
    pub len: u32,
    /// CRC-32 of those bytes.
    pub crc: u32,
}

/// What [`Fingerprint::check`] found in a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// The head starts with the fingerprinted bytes; the fingerprint of the
    /// head as it is now is given, covering as many bytes or more.
    Same(Fingerprint),
    /// The head is shorter than the fingerprint or has other bytes.
    Changed,
}

impl Fingerprint {
    /// The empty fingerprint, which every head matches.
    pub const EMPTY: Fingerprint = Fingerprint { len: 0, crc: 0 };

    /// The fingerprint of `head`, of which the first [`FINGERPRINT_BYTES`]
    /// are used.
    pub fn of(head: &[u8]) -> Self {
        let head = &head[..head.len().min(FINGERPRINT_BYTES)];
        Self {
            len: head.len() as u32,
            crc: crc32fast::hash(head),
        }
    }

    /// Whether `head` (a file's first bytes, up to [`FINGERPRINT_BYTES`]) is
    /// the head this fingerprint was taken of, possibly grown since.
    pub fn check(&self, head: &[u8]) -> Head {
        let len = self.len as usize;
        if head.len() < len || crc32fast::hash(&head[..len]) != self.crc {
            return Head::Changed;
        }
        Head::Same(Fingerprint::of(head))
    }

    /// Whether the fingerprint covers all it ever will.
    pub fn is_complete(&self) -> bool {
        self.len as usize >= FINGERPRINT_BYTES
    }
}

/// A file's identity: where it is ([`FileId`]) and what it starts with
/// ([`Fingerprint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Device and inode.
    #[serde(flatten)]
    pub id: FileId,
    /// The fingerprint of the head.
    pub head: Fingerprint,
}

impl Identity {
    /// Whether a file with `id` and `head` is this file (possibly grown or
    /// renamed since); the fingerprint of its head as it is now if so.
    pub fn recognise(&self, id: FileId, head: &[u8]) -> Option<Fingerprint> {
        if id != self.id {
            return None;
        }
        match self.head.check(head) {
            Head::Same(now) => Some(now),
            Head::Changed => None,
        }
    }
}

/// Reads the first `min(size, FINGERPRINT_BYTES)` bytes of `file` into
/// `buf` (without moving its read position) and returns them.
///
/// # Errors
///
/// The error of the read.
pub fn read_head<'b>(file: &File, buf: &'b mut [u8; FINGERPRINT_BYTES]) -> io::Result<&'b [u8]> {
    let mut filled = 0;
    while filled < FINGERPRINT_BYTES {
        match file.read_at(&mut buf[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(&buf[..filled])
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: FileId = FileId { dev: 8, ino: 42 };

    #[test]
    fn a_short_head_is_recognised_as_it_grows() {
        let short = Identity {
            id: ID,
            head: Fingerprint::of(b"2026-01-01 first"),
        };
        let grown = b"2026-01-01 first line\n2026-01-01 second line\n";
        let now = short.recognise(ID, grown).expect("same file, grown");
        assert_eq!(now, Fingerprint::of(grown));
        assert_eq!(now.len as usize, grown.len());
    }

    #[test]
    fn the_fingerprint_stops_at_its_size() {
        let big = vec![b'x'; 5000];
        let fp = Fingerprint::of(&big);
        assert_eq!(fp.len as usize, FINGERPRINT_BYTES);
        assert!(fp.is_complete());
        let mut other = big.clone();
        other[FINGERPRINT_BYTES + 1] = b'y';
        assert_eq!(fp.check(&other[..FINGERPRINT_BYTES]), Head::Same(fp));
    }

    #[test]
    fn an_empty_file_is_known_by_device_and_inode_alone() {
        let empty = Identity {
            id: ID,
            head: Fingerprint::of(b""),
        };
        assert_eq!(empty.head, Fingerprint::EMPTY);
        assert!(empty.recognise(ID, b"").is_some());
        assert!(empty.recognise(ID, b"anything\n").is_some());
        assert!(empty.recognise(FileId { dev: 8, ino: 43 }, b"").is_none());
    }

    #[test]
    fn a_reused_inode_with_another_head_is_another_file() {
        let old = Identity {
            id: ID,
            head: Fingerprint::of(b"old file's first line\n"),
        };
        assert_eq!(old.recognise(ID, b"new file's first line\n"), None);
        // Shorter than what was fingerprinted: not the same head either.
        assert_eq!(old.recognise(ID, b"old file"), None);
        assert_eq!(old.head.check(b""), Head::Changed);
    }

    #[test]
    fn identical_heads_on_other_inodes_are_other_files() {
        let head = b"same banner\n";
        let a = Identity {
            id: ID,
            head: Fingerprint::of(head),
        };
        assert!(a.recognise(FileId { dev: 8, ino: 99 }, head).is_none());
        assert!(a.recognise(FileId { dev: 9, ino: 42 }, head).is_none());
    }

    #[test]
    fn read_head_reads_at_most_the_fingerprint_and_keeps_the_position() {
        use std::io::{Read, Seek, SeekFrom, Write};
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![b'a'; 3000]).unwrap();
        f.seek(SeekFrom::Start(2990)).unwrap();
        let mut buf = [0; FINGERPRINT_BYTES];
        assert_eq!(read_head(&f, &mut buf).unwrap().len(), FINGERPRINT_BYTES);
        let mut rest = Vec::new();
        f.read_to_end(&mut rest).unwrap();
        assert_eq!(rest.len(), 10);
    }
}
