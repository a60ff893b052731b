//! The disk buffer: a sender's queue in append-only segment files, so that
//! requests survive a backend outage longer than memory allows and a
//! restart of the agent.
//!
//! # Layout
//!
//! A directory per sink (`{agent.data_dir}/buffers/{sink name}/`) holds
//! segments `{seq:020}.seg` and one `ack` file. A segment is a run of
//! records:
//!
//! ```text
//! magic "SNB1" | body length u32 | points u32 | raw bytes u32 | crc32 u32 | body
//! ```
//!
//! (little-endian; the CRC-32 covers the three length fields and the body).
//! `ack` holds the position (segment, offset) of the oldest record not yet
//! delivered, with its own CRC, and is replaced atomically (write a
//! temporary file, then rename) each time a request is delivered, refused
//! or dropped. Segments wholly before it are deleted.
//!
//! # Crash safety
//!
//! A record is appended with one `write` and, by default, `fdatasync`ed
//! before the sender counts it queued. After a crash the buffer is scanned
//! from `ack`: a record whose header or checksum is wrong (a torn write) ends
//! its segment: it and anything after it in that segment are skipped and
//! counted, never replayed. New records always go to a fresh segment, so
//! nothing is ever appended after garbage. A crash between a delivery and
//! the `ack` replacement replays that one request again on restart
//! (at-least-once); nothing else is replayed twice.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::queue::{Dropped, Queue, Request};

const MAGIC: [u8; 4] = *b"SNB1";
const HEADER: u64 = 20;
const ACK: &str = "ack";

/// One pending record.
#[derive(Clone, Copy, Debug)]
struct Rec {
    seq: u64,
    offset: u64,
    body_len: u32,
    points: u32,
}

impl Rec {
    fn size(&self) -> u64 {
        HEADER + u64::from(self.body_len)
    }
}

/// What [`Disk::open`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Records waiting from an earlier run.
    pub records: u64,
    /// Points in them.
    pub points: u64,
    /// Segments whose tail was torn or corrupt and was skipped.
    pub corrupt: u64,
}

/// The disk queue. See the module docs for the format.
#[derive(Debug)]
pub struct Disk {
    dir: PathBuf,
    max_size: u64,
    segment_max: u64,
    sync: bool,
    records: VecDeque<Rec>,
    bytes: u64,
    points: u64,
    /// No segment before this one is on disk.
    oldest_seq: u64,
    /// The segment being appended: its number, file and length.
    writer: Option<(u64, File, u64)>,
    next_seq: u64,
    /// The front record, read back.
    head: Option<Request>,
    /// The segment `head` reads from, kept open.
    reader: Option<(u64, File)>,
    scratch: Vec<u8>,
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.seg"))
}

fn crc(fields: &[u8], body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(fields);
    h.update(body);
    h.finalize()
}

fn read_ack(dir: &Path) -> Option<(u64, u64)> {
    let b = fs::read(dir.join(ACK)).ok()?;
    if b.len() != 20 {
        return None;
    }
    let seq = u64::from_le_bytes(b[0..8].try_into().ok()?);
    let off = u64::from_le_bytes(b[8..16].try_into().ok()?);
    let sum = u32::from_le_bytes(b[16..20].try_into().ok()?);
    (crc(&b[..16], &[]) == sum).then_some((seq, off))
}

/// Scans one segment from `from`, appending its good records to `out`.
/// Returns false when it stopped at a bad record.
fn scan(path: &Path, seq: u64, from: u64, out: &mut VecDeque<Rec>) -> io::Result<bool> {
    let data = fs::read(path)?;
    let mut at = from as usize;
    while at < data.len() {
        let Some(h) = data.get(at..at + HEADER as usize) else {
            return Ok(false);
        };
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let (body_len, points, sum) = (word(4), word(8), word(16));
        if h[..4] != MAGIC {
            return Ok(false);
        }
        let start = at + HEADER as usize;
        let Some(body) = data.get(start..start + body_len as usize) else {
            return Ok(false);
        };
        if crc(&h[4..16], body) != sum {
            return Ok(false);
        }
        out.push_back(Rec {
            seq,
            offset: at as u64,
            body_len,
            points,
        });
        at = start + body_len as usize;
    }
    Ok(true)
}

impl Disk {
    /// Opens (creating if needed) the buffer in `dir`, holding at most
    /// `max_size` bytes of records, and loads what an earlier run left.
    /// `sync` makes every push wait for `fdatasync`.
    ///
    /// # Errors
    ///
    /// When the directory cannot be created or listed, or a segment cannot
    /// be read.
    pub fn open(dir: &Path, max_size: u64, sync: bool) -> io::Result<(Disk, Loaded)> {
        fs::create_dir_all(dir)?;
        let (ack_seq, ack_off) = read_ack(dir).unwrap_or((0, 0));
        let mut seqs = Vec::new();
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(n) = name
                .strip_suffix(".seg")
                .and_then(|s| s.parse::<u64>().ok())
            {
                seqs.push(n);
            }
        }
        seqs.sort_unstable();
        let mut records = VecDeque::new();
        let mut loaded = Loaded::default();
        for &seq in &seqs {
            let path = segment_path(dir, seq);
            if seq < ack_seq {
                fs::remove_file(&path)?;
                continue;
            }
            let from = if seq == ack_seq { ack_off } else { 0 };
            if !scan(&path, seq, from, &mut records)? {
                loaded.corrupt += 1;
            }
        }
        let bytes = records.iter().map(Rec::size).sum();
        let points = records.iter().map(|r| u64::from(r.points)).sum();
        loaded.records = records.len() as u64;
        loaded.points = points;
        let disk = Disk {
            dir: dir.to_path_buf(),
            max_size,
            // Small enough that dropping the oldest frees space soon, large
            // enough that a segment holds many requests.
            segment_max: (max_size / 8).clamp(1 << 20, 128 << 20),
            sync,
            records,
            bytes,
            points,
            writer: None,
            oldest_seq: seqs
                .iter()
                .copied()
                .find(|&s| s >= ack_seq)
                .unwrap_or(ack_seq),
            next_seq: seqs.last().map_or(ack_seq, |s| s + 1).max(ack_seq),
            head: None,
            reader: None,
            scratch: Vec::new(),
        };
        Ok((disk, loaded))
    }

    /// True when a request of `body_len` bytes fits within the buffer's
    /// size without dropping another (always when the buffer is empty).
    pub fn has_room(&self, body_len: usize) -> bool {
        self.records.is_empty() || self.bytes + HEADER + body_len as u64 <= self.max_size
    }

    /// The points (log records) of the oldest request, if any: what is
    /// lost when it cannot be read back.
    pub fn front_points(&self) -> Option<u32> {
        self.records.front().map(|r| r.points)
    }

    /// Records the front's position as the next to deliver, and deletes
    /// segments wholly before it.
    fn write_ack(&mut self) -> io::Result<()> {
        let (seq, off) = match self.records.front() {
            Some(r) => (r.seq, r.offset),
            None => match &self.writer {
                Some((seq, _, len)) => (*seq, *len),
                None => (self.next_seq, 0),
            },
        };
        let mut b = [0u8; 20];
        b[0..8].copy_from_slice(&seq.to_le_bytes());
        b[8..16].copy_from_slice(&off.to_le_bytes());
        let sum = crc(&b[..16], &[]);
        b[16..20].copy_from_slice(&sum.to_le_bytes());
        let tmp = self.dir.join("ack.tmp");
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&b)?;
            if self.sync {
                f.sync_data()?;
            }
        }
        fs::rename(&tmp, self.dir.join(ACK))?;
        // Segments before the acknowledged one are done with.
        while self.oldest_seq < seq {
            if self
                .reader
                .as_ref()
                .is_some_and(|(r, _)| *r == self.oldest_seq)
            {
                self.reader = None;
            }
            match fs::remove_file(segment_path(&self.dir, self.oldest_seq)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            self.oldest_seq += 1;
        }
        Ok(())
    }

    fn remove_front(&mut self) -> Option<Rec> {
        let r = self.records.pop_front()?;
        self.bytes -= r.size();
        self.points -= u64::from(r.points);
        self.head = None;
        Some(r)
    }
}

impl Queue for Disk {
    fn push(&mut self, r: Request) -> io::Result<Dropped> {
        let body_len = u32::try_from(r.body.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "request over 4 GiB"))?;
        let size = HEADER + u64::from(body_len);
        if self
            .writer
            .as_ref()
            .is_some_and(|(_, _, len)| len + size > self.segment_max)
        {
            self.writer = None;
        }
        if self.writer.is_none() {
            let seq = self.next_seq;
            self.next_seq += 1;
            let f = OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(segment_path(&self.dir, seq))?;
            self.writer = Some((seq, f, 0));
        }
        let (seq, file, len) = self.writer.as_mut().expect("writer opened above");
        self.scratch.clear();
        self.scratch.extend_from_slice(&MAGIC);
        self.scratch.extend_from_slice(&body_len.to_le_bytes());
        self.scratch.extend_from_slice(&r.points.to_le_bytes());
        self.scratch.extend_from_slice(&r.raw_bytes.to_le_bytes());
        let sum = crc(&self.scratch[4..16], &r.body);
        self.scratch.extend_from_slice(&sum.to_le_bytes());
        self.scratch.extend_from_slice(&r.body);
        if let Err(e) = file.write_all(&self.scratch) {
            // A partial record may be on disk: never append after it.
            self.writer = None;
            return Err(e);
        }
        if self.sync {
            file.sync_data()?;
        }
        self.records.push_back(Rec {
            seq: *seq,
            offset: *len,
            body_len,
            points: r.points,
        });
        *len += size;
        self.bytes += size;
        self.points += u64::from(r.points);
        let mut dropped = Dropped::default();
        while self.bytes > self.max_size && self.records.len() > 1 {
            let old = self.remove_front().expect("more than one record");
            dropped.batches += 1;
            dropped.points += u64::from(old.points);
        }
        if dropped.batches > 0 {
            self.write_ack()?;
        }
        Ok(dropped)
    }

    fn front(&mut self) -> io::Result<Option<&Request>> {
        let Some(rec) = self.records.front().copied() else {
            return Ok(None);
        };
        if self.head.is_none() {
            if self.reader.as_ref().is_none_or(|(s, _)| *s != rec.seq) {
                self.reader = Some((rec.seq, File::open(segment_path(&self.dir, rec.seq))?));
            }
            let (_, f) = self.reader.as_mut().expect("opened above");
            f.seek(SeekFrom::Start(rec.offset))?;
            let mut header = [0u8; HEADER as usize];
            f.read_exact(&mut header)?;
            let mut body = vec![0u8; rec.body_len as usize];
            f.read_exact(&mut body)?;
            if crc(&header[4..16], &body)
                != u32::from_le_bytes(header[16..20].try_into().expect("4"))
            {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "disk buffer record changed on disk since it was written",
                ));
            }
            self.head = Some(Request {
                body,
                points: rec.points,
                raw_bytes: u32::from_le_bytes(header[12..16].try_into().expect("4")),
            });
        }
        Ok(self.head.as_ref())
    }

    fn pop(&mut self) -> io::Result<()> {
        if self.remove_front().is_some() {
            self.write_ack()?;
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.records.len()
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn points(&self) -> u64 {
        self.points
    }

    fn durable(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(n: u32, size: usize) -> Request {
        Request {
            body: (0..size).map(|i| (i as u32 ^ n) as u8).collect(),
            points: n,
            raw_bytes: size as u32 * 3,
        }
    }

    fn drain(d: &mut Disk) -> Vec<u32> {
        let mut got = Vec::new();
        while let Some(r) = d.front().unwrap() {
            assert_eq!(*r, req(r.points, r.body.len()));
            got.push(r.points);
            d.pop().unwrap();
        }
        got
    }

    #[test]
    fn survives_a_reopen_in_order_without_replaying_what_was_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, loaded) = Disk::open(dir.path(), 1 << 30, true).unwrap();
        assert_eq!(loaded, Loaded::default());
        for n in 1..=5 {
            d.push(req(n, 1000)).unwrap();
        }
        assert_eq!(d.front().unwrap().unwrap().points, 1);
        d.pop().unwrap();
        d.pop().unwrap();
        drop(d);
        let (mut d, loaded) = Disk::open(dir.path(), 1 << 30, true).unwrap();
        assert_eq!(
            loaded,
            Loaded {
                records: 3,
                points: 12,
                corrupt: 0
            }
        );
        d.push(req(6, 10)).unwrap();
        assert_eq!(drain(&mut d), [3, 4, 5, 6]);
        drop(d);
        let (mut d, loaded) = Disk::open(dir.path(), 1 << 30, true).unwrap();
        assert_eq!(loaded.records, 0);
        assert!(d.front().unwrap().is_none());
    }

    #[test]
    fn a_torn_tail_is_skipped_and_new_records_follow_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        d.push(req(1, 100)).unwrap();
        d.push(req(2, 100)).unwrap();
        drop(d);
        // Tear the second record: cut the file in the middle of its body.
        let seg = segment_path(dir.path(), 0);
        let len = fs::metadata(&seg).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(len - 30)
            .unwrap();
        let (mut d, loaded) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        assert_eq!((loaded.records, loaded.corrupt), (1, 1));
        d.push(req(3, 100)).unwrap();
        assert_eq!(drain(&mut d), [1, 3]);
    }

    #[test]
    fn a_flipped_bit_is_caught_by_the_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        for n in 1..=3 {
            d.push(req(n, 100)).unwrap();
        }
        drop(d);
        let seg = segment_path(dir.path(), 0);
        let mut data = fs::read(&seg).unwrap();
        data[(HEADER as usize + 100) + HEADER as usize + 50] ^= 0x10;
        fs::write(&seg, &data).unwrap();
        let (mut d, loaded) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        assert_eq!((loaded.records, loaded.corrupt), (1, 1));
        assert_eq!(drain(&mut d), [1]);
    }

    #[test]
    fn full_buffers_drop_the_oldest_and_free_their_segments() {
        let dir = tempfile::tempdir().unwrap();
        // 1 MiB segments (the minimum); 3 MiB in all.
        let (mut d, _) = Disk::open(dir.path(), 3 << 20, false).unwrap();
        let mut dropped = Dropped::default();
        for n in 1..=40 {
            let x = d.push(req(n, 200 << 10)).unwrap();
            dropped.batches += x.batches;
            dropped.points += x.points;
        }
        assert!(d.bytes() <= 3 << 20);
        let kept = drain(&mut d);
        assert_eq!(dropped.batches as usize + kept.len(), 40);
        // The newest survive, in order.
        assert_eq!(*kept.last().unwrap(), 40);
        assert!(kept.windows(2).all(|w| w[0] + 1 == w[1]));
        let segs = fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "seg")
            })
            .count();
        assert!(segs <= 2, "{segs} segments left after draining");
    }

    #[test]
    fn a_corrupt_ack_file_replays_from_the_start_rather_than_losing_data() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        d.push(req(1, 10)).unwrap();
        d.push(req(2, 10)).unwrap();
        d.pop().unwrap();
        drop(d);
        fs::write(dir.path().join(ACK), b"garbage").unwrap();
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        assert_eq!(drain(&mut d), [1, 2]);
    }
}
