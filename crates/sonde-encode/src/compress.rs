//! Compression of encoded batches, before a sink sends them.
//!
//! [`Compression`] names a codec and its level; [`Compression::compress`]
//! appends the compressed form of a whole batch to a caller-owned buffer,
//! so a sink keeps one output buffer for its life. Every codec here comes
//! from the crate made for it (zstd, flate2 on zlib-rs, snap, lz4_flex);
//! none is written by hand.
//!
//! | codec | format on the wire | `Content-Encoding` |
//! |---|---|---|
//! | [`Compression::Zstd`] | one zstd frame | `zstd` |
//! | [`Compression::Gzip`] | one gzip member | `gzip` |
//! | [`Compression::Snappy`] | snappy *block* format (what Prometheus remote write expects) | `snappy` |
//! | [`Compression::Lz4`] | one LZ4 frame (self-describing, with a content checksum) | `lz4` |
//! | [`Compression::None`] | the bytes as they are | none |
//!
//! Which codec and level pay best on metric batches is measured by the
//! `compress` group of `cargo bench -p sonde-encode` (docs/BENCHMARKS.md).
//!
//! ```
//! use sonde_encode::compress::Compression;
//!
//! let batch = b"{\"name\":\"web.requests\",\"tags\":{},\"value\":1,\"timestamp\":1763800200}\n".repeat(100);
//! let mut out = Vec::new();
//! Compression::Zstd { level: 3 }.compress(&batch, &mut out).unwrap();
//! assert!(out.len() < batch.len() / 10);
//! assert_eq!(Compression::Zstd { level: 3 }.decompress(&out).unwrap(), batch);
//! ```

use std::fmt;
use std::io::{Read, Write};

/// A compression codec and its level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    None,
    /// gzip (deflate), level 0 (store) to 9 (smallest).
    Gzip {
        /// 0 to 9.
        level: u32,
    },
    /// Zstandard, level 1 (fastest) to 22; negative levels trade ratio for
    /// speed.
    Zstd {
        /// -7 to 22.
        level: i32,
    },
    /// Snappy, block format.
    Snappy,
    /// LZ4, frame format.
    Lz4,
}

/// A batch that could not be compressed or decompressed.
#[derive(Debug, thiserror::Error)]
#[error("{codec}: {error}")]
pub struct CompressError {
    /// The codec's name, as in `Content-Encoding`.
    pub codec: &'static str,
    /// What the codec said.
    pub error: std::io::Error,
}

impl Compression {
    /// The name of the codec (`zstd`, `gzip`, `snappy`, `lz4`, `none`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip { .. } => "gzip",
            Compression::Zstd { .. } => "zstd",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
        }
    }

    /// The HTTP `Content-Encoding` value, or `None` for no compression.
    pub fn content_encoding(self) -> Option<&'static str> {
        match self {
            Compression::None => None,
            other => Some(other.name()),
        }
    }

    /// Appends the compressed form of `input` to `out`.
    ///
    /// # Errors
    ///
    /// A [`CompressError`] if the codec fails (an invalid zstd level, or
    /// the codec running out of memory); `out` may then hold a partial
    /// result past its old length.
    pub fn compress(self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressError> {
        let err = |source| CompressError {
            codec: self.name(),
            error: source,
        };
        match self {
            Compression::None => out.extend_from_slice(input),
            Compression::Gzip { level } => {
                let mut enc =
                    flate2::write::GzEncoder::new(out, flate2::Compression::new(level.min(9)));
                enc.write_all(input).map_err(err)?;
                enc.finish().map_err(err)?;
            }
            Compression::Zstd { level } => {
                // Straight into the output buffer, sized to zstd's bound.
                let start = out.len();
                out.resize(start + zstd::zstd_safe::compress_bound(input.len()), 0);
                let n =
                    zstd::bulk::compress_to_buffer(input, &mut out[start..], level).map_err(err)?;
                out.truncate(start + n);
            }
            Compression::Snappy => {
                let start = out.len();
                out.resize(start + snap::raw::max_compress_len(input.len()), 0);
                let n = snap::raw::Encoder::new()
                    .compress(input, &mut out[start..])
                    .map_err(|e| err(std::io::Error::other(e)))?;
                out.truncate(start + n);
            }
            Compression::Lz4 => {
                let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
                    lz4_flex::frame::FrameInfo::new().content_checksum(true),
                    out,
                );
                enc.write_all(input).map_err(err)?;
                enc.finish().map_err(|e| err(std::io::Error::other(e)))?;
            }
        }
        Ok(())
    }

    /// Decompresses a whole buffer made by [`Compression::compress`]: for
    /// tests, and for buffers read back from disk.
    ///
    /// # Errors
    ///
    /// A [`CompressError`] if `input` is not valid data of this codec.
    pub fn decompress(self, input: &[u8]) -> Result<Vec<u8>, CompressError> {
        let err = |source| CompressError {
            codec: self.name(),
            error: source,
        };
        let mut out = Vec::new();
        match self {
            Compression::None => out.extend_from_slice(input),
            Compression::Gzip { .. } => {
                flate2::read::GzDecoder::new(input)
                    .read_to_end(&mut out)
                    .map_err(err)?;
            }
            Compression::Zstd { .. } => {
                zstd::stream::read::Decoder::new(input)
                    .and_then(|mut d| d.read_to_end(&mut out))
                    .map_err(err)?;
            }
            Compression::Snappy => {
                out = snap::raw::Decoder::new()
                    .decompress_vec(input)
                    .map_err(|e| err(std::io::Error::other(e)))?;
            }
            Compression::Lz4 => {
                lz4_flex::frame::FrameDecoder::new(input)
                    .read_to_end(&mut out)
                    .map_err(err)?;
            }
        }
        Ok(out)
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::Gzip { level } => write!(f, "gzip level {level}"),
            Compression::Zstd { level } => write!(f, "zstd level {level}"),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip { level: 6 },
        Compression::Zstd { level: 3 },
        Compression::Snappy,
        Compression::Lz4,
    ];

    fn batch() -> Vec<u8> {
        let mut b = Vec::new();
        for i in 0..2000 {
            b.extend_from_slice(
                format!(
                    "{{\"name\":\"web.api.latency.pct99\",\"tags\":{{\"host\":\"h{}\"}},\"value\":{}.5,\"timestamp\":1763800200}}\n",
                    i % 50,
                    i
                )
                .as_bytes(),
            );
        }
        b
    }

    #[test]
    fn every_codec_round_trips_a_batch() {
        let input = batch();
        for c in ALL {
            let mut out = Vec::new();
            c.compress(&input, &mut out).unwrap();
            assert_eq!(c.decompress(&out).unwrap(), input, "{c}");
            if c != Compression::None {
                assert!(out.len() < input.len() / 4, "{c}: {} bytes", out.len());
            }
        }
    }

    #[test]
    fn compressed_bytes_are_appended_after_what_the_buffer_held() {
        let input = batch();
        for c in ALL {
            let mut out = b"HEAD".to_vec();
            c.compress(&input, &mut out).unwrap();
            assert_eq!(&out[..4], b"HEAD", "{c}");
            assert_eq!(c.decompress(&out[4..]).unwrap(), input, "{c}");
        }
    }

    #[test]
    fn an_empty_batch_round_trips() {
        for c in ALL {
            let mut out = Vec::new();
            c.compress(b"", &mut out).unwrap();
            assert_eq!(c.decompress(&out).unwrap(), b"", "{c}");
        }
    }

    #[test]
    fn each_codec_writes_its_own_format() {
        let input = batch();
        let mut out = Vec::new();
        Compression::Gzip { level: 6 }
            .compress(&input, &mut out)
            .unwrap();
        assert_eq!(&out[..2], [0x1f, 0x8b], "gzip magic");
        out.clear();
        Compression::Zstd { level: 3 }
            .compress(&input, &mut out)
            .unwrap();
        assert_eq!(&out[..4], [0x28, 0xb5, 0x2f, 0xfd], "zstd frame magic");
        out.clear();
        Compression::Lz4.compress(&input, &mut out).unwrap();
        assert_eq!(&out[..4], [0x04, 0x22, 0x4d, 0x18], "lz4 frame magic");
        out.clear();
        // Snappy block format starts with the uncompressed length as a
        // varint, not with the framing format's stream identifier.
        Compression::Snappy.compress(&input, &mut out).unwrap();
        let mut len = 0usize;
        for (i, b) in out.iter().enumerate() {
            len |= ((b & 0x7f) as usize) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
        }
        assert_eq!(len, input.len());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for c in ALL.into_iter().filter(|c| *c != Compression::None) {
            let e = c.decompress(b"definitely not compressed").unwrap_err();
            assert_eq!(e.codec, c.name());
        }
    }

    #[test]
    fn content_encoding_names_the_codec() {
        assert_eq!(Compression::None.content_encoding(), None);
        assert_eq!(
            Compression::Zstd { level: 1 }.content_encoding(),
            Some("zstd")
        );
        assert_eq!(
            Compression::Gzip { level: 1 }.content_encoding(),
            Some("gzip")
        );
        assert_eq!(Compression::Snappy.content_encoding(), Some("snappy"));
        assert_eq!(Compression::Lz4.content_encoding(), Some("lz4"));
    }
}
