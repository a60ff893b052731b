//! gzip files read as the lines they hold
//! ([`Gzip::Read`](crate::tailer::Gzip::Read)): a decoder over the file
//! from its first byte, whose offsets count decompressed bytes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// A gzip file being read: a decoder over the file from its first byte,
/// and how many decompressed bytes to drop before handing on the rest
/// (what was read before a restart or a checkpoint).
pub(super) struct Gz {
    decoder: Option<flate2::read::MultiGzDecoder<FileAt>>,
    skip: u64,
    /// The decoder reached the end of the last member.
    pub(super) done: bool,
}

impl Gz {
    /// A reader that hands on decompressed bytes from offset `from`.
    pub(super) fn new(from: u64) -> Gz {
        Gz {
            decoder: None,
            skip: from,
            done: false,
        }
    }

    /// Starts over from the file's first byte, dropping `skip` bytes.
    pub(super) fn restart(&mut self, skip: u64) {
        self.decoder = None;
        self.skip = skip;
    }

    /// Fills `buf` with the next decompressed bytes of `file` past the
    /// skip; 0 at the end.
    pub(super) fn read(&mut self, file: &File, buf: &mut [u8]) -> io::Result<usize> {
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

/// Whether `head`, a file's first bytes, is gzip's magic number (RFC 1952);
/// no text log starts with these two control bytes.
pub(super) fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&[0x1f, 0x8b])
}
