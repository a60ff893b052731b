//! Record batches (magic 2, Kafka 0.11 and later), the unit a producer
//! sends: a 61-byte header (offsets, CRC-32C, codec, timestamps, producer
//! id and sequence, count) and the records, compressed as a whole.
//!
//! [`BatchBuilder`] appends each record straight into one reused buffer
//! (length, attributes, timestamp and offset deltas, key, value and headers
//! as varints), with no allocation per record; [`BatchBuilder::finish`]
//! compresses that buffer into the caller's request buffer behind the
//! header and fills in the lengths and the CRC. This is where librdkafka
//! spends a buffer, a queue entry and a lock per record
//! (docs/benchmarks/LOG.md, "sonde's own Kafka producer").
//!
//! [`decode`] reads a batch back (CRC checked, decompressed), for tests
//! and fuzzing.

use std::io;

use sonde_encode::compress::Compression;

use crate::wire::{put_i16, put_i32, put_i64, put_i8, put_varint, set_i32, varint_len};
use crate::wire::{Malformed, Reader};

/// Bytes of a batch before its records.
pub const HEADER_BYTES: usize = 61;

/// Where the CRC-32C starts: after base offset (8), length (4), leader
/// epoch (4), magic (1) and the CRC itself (4).
const CRC_FROM: usize = 21;

/// LZ4 blocks of at most 64 KiB, the frame's smallest block size: what
/// librdkafka and the Java client write.
const LZ4_BLOCK: usize = 64 << 10;

/// The header of xerial's snappy framing: magic, version 1, compatible
/// version 1.
const SNAPPY_HEADER: [u8; 16] = [
    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
];

/// The Java client's snappy block size.
const SNAPPY_BLOCK: usize = 32 << 10;

/// The batch attribute's low three bits: how the records are compressed.
fn attribute(c: Compression) -> i16 {
    match c {
        Compression::None => 0,
        Compression::Gzip { .. } => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
        Compression::Zstd { .. } => 4,
    }
}

/// The idempotent producer's fields of a batch; [`Producer::NONE`] when
/// the producer is not idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Producer {
    /// The producer id the broker gave.
    pub id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The sequence number of the batch's first record in its partition.
    pub base_sequence: i32,
}

impl Producer {
    /// No producer id: the broker does not deduplicate.
    pub const NONE: Producer = Producer {
        id: -1,
        epoch: -1,
        base_sequence: -1,
    };
}

/// The sequence number after a batch of `records` records that began at
/// `sequence`: sequences wrap to 0 after `i32::MAX`.
pub fn next_sequence(sequence: i32, records: usize) -> i32 {
    let records = i64::try_from(records).unwrap_or(i64::MAX);
    ((i64::from(sequence) + records) % (i64::from(i32::MAX) + 1)) as i32
}

/// Compresses the records section of batches as Kafka frames each codec,
/// keeping what can be reused from one batch to the next. gzip and no
/// compression are [`Compression::compress`]'s; snappy (the Java
/// client's framing) and lz4 (64 KiB blocks) are framed here, and zstd
/// keeps one context for the producer's life.
pub struct Compressor {
    codec: Compression,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    /// The LZ4 frame header for 64 KiB independent blocks without
    /// checksums (7 bytes), taken once from `lz4_flex`'s frame encoder so
    /// that its header checksum is right.
    lz4_header: Vec<u8>,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor")
            .field("codec", &self.codec)
            .finish()
    }
}

impl Compressor {
    /// A compressor for `codec`.
    ///
    /// # Errors
    ///
    /// zstd refused the level.
    pub fn new(codec: Compression) -> io::Result<Self> {
        let zstd = match codec {
            Compression::Zstd { level } => Some(zstd::bulk::Compressor::new(level)?),
            _ => None,
        };
        let lz4_header = if codec == Compression::Lz4 {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let empty = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new())
                .finish()
                .map_err(io::Error::other)?;
            // Magic (4), flags (1), block descriptor (1), header checksum
            // (1), then the end mark (4).
            if empty.len() != 11 {
                return Err(io::Error::other("unexpected LZ4 frame header"));
            }
            empty[..7].to_vec()
        } else {
            Vec::new()
        };
        Ok(Compressor {
            codec,
            zstd,
            lz4_header,
        })
    }

    /// The codec.
    pub fn codec(&self) -> Compression {
        self.codec
    }

    /// Appends `src`, compressed, to `out`.
    fn compress(&mut self, src: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        match self.codec {
            c @ (Compression::None | Compression::Gzip { .. }) => {
                c.compress(src, out).map_err(|e| e.error)?;
            }
            Compression::Snappy => {
                out.extend_from_slice(&SNAPPY_HEADER);
                let mut enc = snap::raw::Encoder::new();
                for block in src.chunks(SNAPPY_BLOCK) {
                    let at = out.len();
                    out.resize(at + 4 + snap::raw::max_compress_len(block.len()), 0);
                    let n = enc
                        .compress(block, &mut out[at + 4..])
                        .map_err(io::Error::other)?;
                    out[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
                    out.truncate(at + 4 + n);
                }
            }
            Compression::Lz4 => {
                // The frame is written here, around lz4_flex's block
                // compressor, rather than by its FrameEncoder, which copies
                // every block through a buffer of its own: 0.82 against
                // 0.99 CPU-s per GB for a whole producer
                // (docs/benchmarks/LOG.md, "sonde's own Kafka producer").
                out.extend_from_slice(&self.lz4_header);
                for block in src.chunks(LZ4_BLOCK) {
                    let at = out.len();
                    let max = lz4_flex::block::get_maximum_output_size(block.len());
                    out.resize(at + 4 + max, 0);
                    let n = lz4_flex::block::compress_into(block, &mut out[at + 4..])
                        .map_err(io::Error::other)?;
                    if n < block.len() {
                        out[at..at + 4].copy_from_slice(&(n as u32).to_le_bytes());
                        out.truncate(at + 4 + n);
                    } else {
                        // Incompressible: stored, the size's high bit set.
                        out.truncate(at);
                        out.extend_from_slice(&(block.len() as u32 | 1 << 31).to_le_bytes());
                        out.extend_from_slice(block);
                    }
                }
                out.extend_from_slice(&0u32.to_le_bytes());
            }
            Compression::Zstd { .. } => {
                let z = self.zstd.as_mut().expect("made with the codec");
                let at = out.len();
                out.reserve(zstd::zstd_safe::compress_bound(src.len()));
                // A cursor at the end appends within the spare capacity.
                let mut tail = io::Cursor::new(&mut *out);
                tail.set_position(at as u64);
                z.compress_to_buffer(src, &mut tail)?;
            }
        }
        Ok(())
    }
}

/// Builds one batch at a time: records pushed, then [`BatchBuilder::finish`].
#[derive(Debug, Default)]
pub struct BatchBuilder {
    records: Vec<u8>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    transactional: bool,
}

/// The batch attribute of a transactional producer's batches.
const TRANSACTIONAL: i16 = 0x10;
/// The control bit of a batch's attributes.
const CONTROL: i16 = 0x20;

impl BatchBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        BatchBuilder::default()
    }

    /// An empty builder of a transactional producer: its batches carry
    /// the transactional attribute, and a `read_committed` reader sees
    /// them once their transaction commits.
    pub fn transactional() -> Self {
        BatchBuilder {
            transactional: true,
            ..BatchBuilder::default()
        }
    }

    /// Records pushed since the last finish.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the records before compression.
    pub fn raw_bytes(&self) -> usize {
        self.records.len()
    }

    /// Drops the records pushed since the last finish.
    pub fn clear(&mut self) {
        self.records.clear();
        self.count = 0;
    }

    /// Appends a record with no key and no headers.
    #[inline]
    pub fn push_value(&mut self, timestamp_ms: i64, value: &[u8]) {
        self.push(timestamp_ms, None, value, &[]);
    }

    /// Appends a record: its time (milliseconds since the epoch), key,
    /// value and headers (key, value).
    pub fn push(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[(&str, &[u8])],
    ) {
        if self.count == 0 {
            self.base_timestamp = timestamp_ms;
            self.max_timestamp = timestamp_ms;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp_ms);
        let ts_delta = timestamp_ms.wrapping_sub(self.base_timestamp);
        let offset_delta = i64::from(self.count);
        let key_len = key.map_or(-1, |k| k.len() as i64);
        let mut body = 1
            + varint_len(ts_delta)
            + varint_len(offset_delta)
            + varint_len(key_len)
            + key.map_or(0, <[u8]>::len)
            + varint_len(value.len() as i64)
            + value.len()
            + varint_len(headers.len() as i64);
        for (k, v) in headers {
            body += varint_len(k.len() as i64) + k.len() + varint_len(v.len() as i64) + v.len();
        }
        let r = &mut self.records;
        r.reserve(varint_len(body as i64) + body);
        put_varint(r, body as i64);
        r.push(0); // attributes: none defined for records
        put_varint(r, ts_delta);
        put_varint(r, offset_delta);
        put_varint(r, key_len);
        if let Some(k) = key {
            r.extend_from_slice(k);
        }
        put_varint(r, value.len() as i64);
        r.extend_from_slice(value);
        put_varint(r, headers.len() as i64);
        for (k, v) in headers {
            put_varint(r, k.len() as i64);
            r.extend_from_slice(k.as_bytes());
            put_varint(r, v.len() as i64);
            r.extend_from_slice(v);
        }
        self.count += 1;
    }

    /// Appends the batch of the records pushed so far to `out` (a batch
    /// of none when none was pushed), compressed by `compressor`, and
    /// starts over. Returns the batch's size.
    ///
    /// # Errors
    ///
    /// Compression failed; `out` is then as it was.
    pub fn finish(
        &mut self,
        compressor: &mut Compressor,
        producer: Producer,
        out: &mut Vec<u8>,
    ) -> io::Result<usize> {
        let start = out.len();
        put_i64(out, 0); // base offset: the broker assigns it
        put_i32(out, 0); // batch length, set below
        put_i32(out, -1); // partition leader epoch
        put_i8(out, 2); // magic
        put_i32(out, 0); // CRC-32C, set below
        let txn = if self.transactional { TRANSACTIONAL } else { 0 };
        put_i16(out, attribute(compressor.codec()) | txn);
        put_i32(out, self.count - 1); // last offset delta
        put_i64(out, self.base_timestamp);
        put_i64(out, self.max_timestamp);
        put_i64(out, producer.id);
        put_i16(out, producer.epoch);
        put_i32(out, producer.base_sequence);
        put_i32(out, self.count);
        debug_assert_eq!(out.len() - start, HEADER_BYTES);
        if let Err(e) = compressor.compress(&self.records, out) {
            out.truncate(start);
            return Err(e);
        }
        let size = out.len() - start;
        let Ok(length) = i32::try_from(size - 12) else {
            out.truncate(start);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "batch over 2 GiB",
            ));
        };
        set_i32(out, start + 8, length);
        let crc = crc32c::crc32c(&out[start + CRC_FROM..]);
        out[start + CRC_FROM - 4..start + CRC_FROM].copy_from_slice(&crc.to_be_bytes());
        self.records.clear();
        self.count = 0;
        Ok(size)
    }
}

/// A record read back by [`decode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedRecord {
    /// Its offset within the batch.
    pub offset_delta: i64,
    /// Its time, milliseconds since the epoch.
    pub timestamp_ms: i64,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value (empty when null).
    pub value: Vec<u8>,
    /// The value is null (a tombstone), which Kafka tells apart from an
    /// empty one; [`BatchBuilder`] writes none, other producers do.
    pub null_value: bool,
    /// Its headers: key and value, `None` for a null value.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// A batch read back by [`decode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The offset of its first record.
    pub base_offset: i64,
    /// The offset of its last record, less `base_offset`.
    pub last_offset_delta: i32,
    /// The codec attribute (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub codec: i16,
    /// The transactional attribute.
    pub transactional: bool,
    /// The control attribute: the batch holds a transaction's commit or
    /// abort marker, not records of the topic.
    pub control: bool,
    /// The producer fields.
    pub producer: Producer,
    /// The largest timestamp, as the header says.
    pub max_timestamp: i64,
    /// The records.
    pub records: Vec<DecodedRecord>,
}

/// Reads one batch: checks its length and CRC-32C, decompresses its
/// records and reads them.
///
/// # Errors
///
/// Anything that does not parse, fails its CRC or does not decompress.
pub fn decode(batch: &[u8]) -> Result<Decoded, Malformed> {
    let mut r = Reader::new(batch);
    let base_offset = r.i64("base offset")?;
    let length = r.i32("batch length")?;
    if usize::try_from(length).ok() != Some(batch.len() - 12) {
        return Err(Malformed("batch length"));
    }
    r.i32("leader epoch")?;
    if r.i8("magic")? != 2 {
        return Err(Malformed("magic"));
    }
    let crc = r.i32("crc")? as u32;
    if crc32c::crc32c(r.rest()) != crc {
        return Err(Malformed("crc"));
    }
    let attributes = r.i16("attributes")?;
    let last_offset_delta = r.i32("last offset delta")?;
    let base_timestamp = r.i64("base timestamp")?;
    let max_timestamp = r.i64("max timestamp")?;
    let producer = Producer {
        id: r.i64("producer id")?,
        epoch: r.i16("producer epoch")?,
        base_sequence: r.i32("base sequence")?,
    };
    let count = r.i32("record count")?;
    let data = r.rest();
    let codec = attributes & 7;
    let records = match codec {
        0 => data.to_vec(),
        1 => Compression::Gzip { level: 0 }
            .decompress(data)
            .map_err(|_| Malformed("gzip data"))?,
        2 => unsnappy(data)?,
        3 => Compression::Lz4
            .decompress(data)
            .map_err(|_| Malformed("lz4 data"))?,
        4 => Compression::Zstd { level: 0 }
            .decompress(data)
            .map_err(|_| Malformed("zstd data"))?,
        _ => return Err(Malformed("codec")),
    };
    let mut r = Reader::new(&records);
    let mut out = Vec::new();
    for _ in 0..count.max(0) {
        let len = r.varint("record length")?;
        let body = r.bytes(
            usize::try_from(len).map_err(|_| Malformed("record length"))?,
            "record",
        )?;
        let mut b = Reader::new(body);
        b.i8("record attributes")?;
        let ts_delta = b.varint("timestamp delta")?;
        let offset_delta = b.varint("offset delta")?;
        let key = nullable_bytes(&mut b, "key")?;
        let value = nullable_bytes(&mut b, "value")?;
        let n = b.varint("header count")?;
        let mut headers = Vec::new();
        for _ in 0..n.max(0) {
            let k = nullable_bytes(&mut b, "header key")?.unwrap_or_default();
            let v = nullable_bytes(&mut b, "header value")?;
            headers.push((String::from_utf8_lossy(&k).into_owned(), v));
        }
        // The record's length covers its fields exactly, as the Java
        // client checks.
        if !b.rest().is_empty() {
            return Err(Malformed("bytes after a record's headers"));
        }
        out.push(DecodedRecord {
            offset_delta,
            timestamp_ms: base_timestamp.wrapping_add(ts_delta),
            key,
            null_value: value.is_none(),
            value: value.unwrap_or_default(),
            headers,
        });
    }
    if !r.rest().is_empty() {
        return Err(Malformed("bytes after the last record"));
    }
    Ok(Decoded {
        base_offset,
        last_offset_delta,
        codec,
        transactional: attributes & TRANSACTIONAL != 0,
        control: attributes & CONTROL != 0,
        producer,
        max_timestamp,
        records: out,
    })
}

fn unsnappy(data: &[u8]) -> Result<Vec<u8>, Malformed> {
    let mut r = Reader::new(data);
    if r.bytes(16, "snappy header")? != SNAPPY_HEADER {
        return Err(Malformed("snappy header"));
    }
    let mut out = Vec::new();
    let mut dec = snap::raw::Decoder::new();
    while !r.rest().is_empty() {
        let n = usize::try_from(r.i32("snappy block length")?)
            .map_err(|_| Malformed("snappy block length"))?;
        let block = r.bytes(n, "snappy block")?;
        out.extend(
            dec.decompress_vec(block)
                .map_err(|_| Malformed("snappy block"))?,
        );
    }
    Ok(out)
}

fn nullable_bytes(r: &mut Reader<'_>, what: &'static str) -> Result<Option<Vec<u8>>, Malformed> {
    let n = r.varint(what)?;
    if n < 0 {
        return Ok(None);
    }
    let n = usize::try_from(n).map_err(|_| Malformed(what))?;
    Ok(Some(r.bytes(n, what)?.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip { level: 1 },
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd { level: 1 },
    ];

    type In = (i64, Option<Vec<u8>>, Vec<u8>, Vec<(String, Vec<u8>)>);

    fn round_trip(codec: Compression, records: &[In], producer: Producer) -> Decoded {
        let mut b = BatchBuilder::new();
        for (ts, key, value, headers) in records {
            let h: Vec<(&str, &[u8])> = headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_slice()))
                .collect();
            b.push(*ts, key.as_deref(), value, &h);
        }
        let mut c = Compressor::new(codec).unwrap();
        let mut out = vec![9, 9, 9];
        let size = b.finish(&mut c, producer, &mut out).unwrap();
        assert_eq!(size, out.len() - 3);
        assert!(b.is_empty());
        decode(&out[3..]).unwrap()
    }

    proptest! {
        #[test]
        fn batches_read_back_as_pushed_with_every_codec(
            records in proptest::collection::vec(
                (
                    0i64..4_000_000_000_000,
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
                    proptest::collection::vec(any::<u8>(), 0..300),
                    proptest::collection::vec(("[a-z]{0,6}", proptest::collection::vec(any::<u8>(), 0..8)), 0..3),
                ),
                1..40,
            ),
            codec in 0usize..5,
        ) {
            let got = round_trip(CODECS[codec], &records, Producer::NONE);
            prop_assert_eq!(got.codec, attribute(CODECS[codec]));
            prop_assert_eq!(got.records.len(), records.len());
            for (i, (r, (ts, key, value, headers))) in got.records.iter().zip(&records).enumerate() {
                prop_assert_eq!(r.offset_delta, i as i64);
                prop_assert_eq!(r.timestamp_ms, *ts);
                prop_assert_eq!(&r.key, key);
                prop_assert_eq!(&r.value, value);
                prop_assert!(!r.null_value);
                let want: Vec<(String, Option<Vec<u8>>)> =
                    headers.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
                prop_assert_eq!(&r.headers, &want);
            }
            prop_assert_eq!(got.max_timestamp, records.iter().map(|r| r.0).max().unwrap());
        }

        #[test]
        fn decoding_garbage_errs_and_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&data);
        }
    }

    #[test]
    fn large_batches_of_log_lines_cross_lz4_blocks_and_keep_the_producer_fields() {
        let lines: Vec<In> = (0..20_000)
            .map(|i| {
                (
                    1_700_000_000_000 + i,
                    None,
                    format!("line {i:06} of the log").into_bytes(),
                    Vec::new(),
                )
            })
            .collect();
        let producer = Producer {
            id: 42,
            epoch: 3,
            base_sequence: 1000,
        };
        for codec in CODECS {
            let got = round_trip(codec, &lines, producer);
            assert_eq!(got.producer, producer);
            assert_eq!(got.records.len(), 20_000);
            assert_eq!(got.records[19_999].value, b"line 019999 of the log");
        }
    }

    #[test]
    fn incompressible_lz4_blocks_are_stored() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..200_000)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        let got = round_trip(
            Compression::Lz4,
            &[(0, None, noise.clone(), Vec::new())],
            Producer::NONE,
        );
        assert_eq!(got.records[0].value, noise);
    }

    #[test]
    fn a_record_longer_than_its_fields_is_malformed() {
        let mut b = BatchBuilder::new();
        b.push_value(1, b"hello");
        let mut out = Vec::new();
        b.finish(
            &mut Compressor::new(Compression::None).unwrap(),
            Producer::NONE,
            &mut out,
        )
        .unwrap();
        // The record's length (a one-byte varint right after the header)
        // one more, a byte more after its headers, and the batch's length
        // and CRC made right again.
        assert_eq!(out[HEADER_BYTES], 2 * (out.len() - HEADER_BYTES - 1) as u8);
        out[HEADER_BYTES] += 2;
        out.push(0);
        let length = (out.len() - 12) as i32;
        set_i32(&mut out, 8, length);
        let crc = crc32c::crc32c(&out[CRC_FROM..]);
        out[CRC_FROM - 4..CRC_FROM].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            decode(&out),
            Err(Malformed("bytes after a record's headers"))
        );
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut b = BatchBuilder::new();
        b.push_value(1, b"hello");
        let mut out = Vec::new();
        b.finish(
            &mut Compressor::new(Compression::None).unwrap(),
            Producer::NONE,
            &mut out,
        )
        .unwrap();
        assert!(decode(&out).is_ok());
        let last = out.len() - 2;
        out[last] ^= 1;
        assert_eq!(decode(&out), Err(Malformed("crc")));
    }
}
