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
//! delivered, in two 32-byte slots written in turn in place:
//!
//! ```text
//! segment u64 | offset u64 | counter u64 | 0 u32 | crc32 u32   (the CRC covers the first 28 bytes)
//! ```
//!
//! The slot with a good CRC and the higher counter is the position. (An
//! `ack` of 20 bytes, `segment | offset | crc32`, is read as well.)
//!
//! # A full disk
//!
//! Nothing the buffer must write to free space needs free space:
//!
//! * An acknowledgement overwrites a slot of `ack` in place: the file's
//!   blocks are its own already, so the write needs none, where a new file
//!   renamed over the old one would need a block the full disk does not
//!   have.
//! * Segments are deleted *before* the acknowledgement that passes them is
//!   written. A segment is deleted only once every record in it was
//!   delivered, so a crash in between finds an `ack` pointing into a
//!   segment that is gone, and the scan at the next start begins at the
//!   first segment left, at its start: nothing is lost, and nothing is
//!   sent again that a crash after the `ack` would not send again too.
//! * The segment being appended to is deleted as soon as everything in it
//!   was delivered, rather than when it fills, so that a drained buffer
//!   holds no space.
//! * An acknowledgement that cannot be written (a read-only or vanished
//!   directory) stays in memory and is written at the next push, pop or
//!   drop; until then a crash sends again what it covers (at-least-once,
//!   as for a crash between a delivery and its acknowledgement).
//! * A record that cannot be appended is cut off again (`ftruncate`, which
//!   frees rather than takes space), so no torn record is left behind to
//!   be skipped at the next start. The caller decides what waits: a log
//!   sink holds its sources back (its records are acknowledged to them
//!   only once on disk), a metric sink keeps the request in memory
//!   ([`Disk::spill_to_memory`]) and writes it to disk, in order, as soon
//!   as a write succeeds again.
//!
//! Each failed write is counted in `sonde_data_dir_write_errors_total{what="buffer"}`
//! and logged at most once a minute ([`DataDirErrors`]).
//!
//! # Crash safety
//!
//! A record is appended with one `write` and, by default, `fdatasync`ed
//! before the sender counts it queued. After a crash the buffer is scanned
//! from `ack`: a record whose header or checksum is wrong (a torn write) ends
//! its segment: it and anything after it in that segment are skipped and
//! counted, never replayed. New records always go to a fresh segment, so
//! nothing is ever appended after garbage. A crash between a delivery and
//! the `ack` update sends that one request again on restart
//! (at-least-once); nothing else is sent twice.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::queue::{Dropped, Queue, Request};
use sonde_runtime::data_dir::{DataDirErrors, What};

const MAGIC: [u8; 4] = *b"SNB1";
const HEADER: u64 = 20;
const ACK: &str = "ack";
/// Bytes of one of the two slots of `ack`.
const SLOT: usize = 32;

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

/// Requests kept in memory while the disk cannot take them
/// ([`Disk::spill_to_memory`]), newer than every record on disk.
#[derive(Debug, Default)]
struct Spill {
    max_bytes: u64,
    queue: VecDeque<Request>,
    bytes: u64,
    points: u64,
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
    writer: Option<(u64, File)>,
    /// The length of the writer's segment.
    writer_len: u64,
    next_seq: u64,
    /// The front record, read back.
    head: Option<Request>,
    /// The segment `head` reads from, kept open.
    reader: Option<(u64, File)>,
    scratch: Vec<u8>,
    /// The `ack` file, kept open to be written in place.
    ack_file: Option<File>,
    /// The position the buffer acknowledges, and the counter of its slot.
    ack: (u64, u64),
    ack_counter: u64,
    /// True while `ack` is newer than the file.
    ack_pending: bool,
    /// `None` unless the sender keeps what the disk cannot take in memory.
    spill: Option<Spill>,
    /// Requests dropped past `max_size` while writing the spilled ones
    /// after a pop, returned by the next push.
    dropped: Dropped,
    errors: Option<Arc<DataDirErrors>>,
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

/// One slot of `ack`.
fn slot(seq: u64, off: u64, counter: u64) -> [u8; SLOT] {
    let mut b = [0u8; SLOT];
    b[0..8].copy_from_slice(&seq.to_le_bytes());
    b[8..16].copy_from_slice(&off.to_le_bytes());
    b[16..24].copy_from_slice(&counter.to_le_bytes());
    let sum = crc(&b[..28], &[]);
    b[28..32].copy_from_slice(&sum.to_le_bytes());
    b
}

/// The position `ack` holds and its slot's counter: the good slot with
/// the higher counter, or the whole file of the 20-byte form.
fn read_ack(dir: &Path) -> Option<(u64, u64, u64)> {
    let b = fs::read(dir.join(ACK)).ok()?;
    let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    if b.len() == 20 {
        let sum = u32::from_le_bytes(b[16..20].try_into().ok()?);
        return (crc(&b[..16], &[]) == sum).then(|| (word(&b, 0), word(&b, 8), 0));
    }
    b.chunks_exact(SLOT)
        .filter(|s| crc(&s[..28], &[]) == u32::from_le_bytes(s[28..32].try_into().expect("4")))
        .map(|s| (word(s, 0), word(s, 8), word(s, 16)))
        .max_by_key(|&(_, _, counter)| counter)
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
        // The temporary file of an older version's acknowledgements.
        let _ = fs::remove_file(dir.join("ack.tmp"));
        let (ack_seq, ack_off, ack_counter) = read_ack(dir).unwrap_or((0, 0, 0));
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
            writer_len: 0,
            oldest_seq: seqs
                .iter()
                .copied()
                .find(|&s| s >= ack_seq)
                .unwrap_or(ack_seq),
            next_seq: seqs.last().map_or(ack_seq, |s| s + 1).max(ack_seq),
            head: None,
            reader: None,
            scratch: Vec::new(),
            ack_file: None,
            ack: (ack_seq, ack_off),
            ack_counter,
            ack_pending: false,
            spill: None,
            dropped: Dropped::default(),
            errors: None,
        };
        Ok((disk, loaded))
    }

    /// Keeps requests the disk cannot take (a full or read-only disk) in
    /// memory, up to `max_bytes` of bodies, rather than failing their
    /// push: they are written to disk in order once a write succeeds
    /// again, and past `max_bytes` the oldest of them are dropped and
    /// counted as a full buffer's. For metric sinks, whose windows have no
    /// source to wait.
    pub fn spill_to_memory(mut self, max_bytes: u64) -> Disk {
        self.spill = Some(Spill {
            max_bytes,
            ..Spill::default()
        });
        self
    }

    /// Counts failed writes in `errors` (and logs them once a minute).
    pub fn count_errors(mut self, errors: Arc<DataDirErrors>) -> Disk {
        self.errors = Some(errors);
        self
    }

    fn failed(&self, path: &Path, e: &io::Error) {
        if let Some(errors) = &self.errors {
            errors.failed(What::Buffer, path, e);
        }
    }

    /// True when a request of `body_len` bytes fits within the buffer's
    /// size without dropping another (always when the buffer is empty).
    pub fn has_room(&self, body_len: usize) -> bool {
        self.records.is_empty() || self.bytes + HEADER + body_len as u64 <= self.max_size
    }

    /// The points (log records) of the oldest request, if any: what is
    /// lost when it cannot be read back.
    pub fn front_points(&self) -> Option<u32> {
        self.records
            .front()
            .map(|r| r.points)
            .or_else(|| self.spill.as_ref()?.queue.front().map(|r| r.points))
    }

    /// Requests held in memory because the disk could not take them.
    pub fn in_memory(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.queue.len())
    }

    /// Moves the acknowledged position to the front record (or past
    /// everything), deleting first the segments it passes, then writing
    /// it (module doc, "A full disk").
    fn acknowledge(&mut self) {
        let seq = match self.records.front() {
            Some(r) => {
                self.ack = (r.seq, r.offset);
                r.seq
            }
            None => {
                // Everything on disk was delivered: the segment being
                // appended goes too, and the next record starts a new one.
                if self.writer.take().is_some() {
                    self.writer_len = 0;
                }
                self.ack = (self.next_seq, 0);
                self.next_seq
            }
        };
        while self.oldest_seq < seq {
            if self
                .reader
                .as_ref()
                .is_some_and(|(r, _)| *r == self.oldest_seq)
            {
                self.reader = None;
            }
            let path = segment_path(&self.dir, self.oldest_seq);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    // Tried again at the next acknowledgement; the `ack`
                    // below still says the segment is done with.
                    self.failed(&path, &e);
                    break;
                }
            }
            self.oldest_seq += 1;
        }
        self.ack_pending = true;
        self.write_ack();
    }

    /// Writes a pending acknowledgement to the next slot of `ack`; one
    /// that cannot be written stays pending (module doc).
    fn write_ack(&mut self) {
        if !self.ack_pending {
            return;
        }
        let path = self.dir.join(ACK);
        let counter = self.ack_counter + 1;
        let bytes = slot(self.ack.0, self.ack.1, counter);
        let at = (counter % 2) * SLOT as u64;
        let written = (|| {
            if self.ack_file.is_none() {
                fs::create_dir_all(&self.dir)?;
                self.ack_file = Some(
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(&path)?,
                );
            }
            let f = self.ack_file.as_ref().expect("opened above");
            f.write_all_at(&bytes, at)?;
            if self.sync {
                f.sync_data()?;
            }
            Ok::<_, io::Error>(())
        })();
        match written {
            Ok(()) => {
                self.ack_counter = counter;
                self.ack_pending = false;
            }
            Err(e) => {
                // A file removed with its directory is made anew next time.
                self.ack_file = None;
                self.failed(&path, &e);
            }
        }
    }

    fn remove_front(&mut self) -> Option<Rec> {
        let r = self.records.pop_front()?;
        self.bytes -= r.size();
        self.points -= u64::from(r.points);
        self.head = None;
        Some(r)
    }

    /// Appends `r` to the segment being written (a new one when it is
    /// full or there is none) and queues it, dropping the oldest records
    /// past `max_size`.
    fn append(&mut self, r: &Request) -> io::Result<Dropped> {
        let body_len = u32::try_from(r.body.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "request over 4 GiB"))?;
        let size = HEADER + u64::from(body_len);
        if self.writer.is_some() && self.writer_len + size > self.segment_max {
            self.writer = None;
        }
        if self.writer.is_none() {
            let seq = self.next_seq;
            let path = segment_path(&self.dir, seq);
            let f = OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(&path)
                .or_else(|e| {
                    // A directory removed while running is made again.
                    if e.kind() != io::ErrorKind::NotFound {
                        return Err(e);
                    }
                    fs::create_dir_all(&self.dir)?;
                    self.ack_file = None;
                    self.ack_pending = true;
                    OpenOptions::new().create_new(true).append(true).open(&path)
                })
                .inspect_err(|e| self.failed(&path, e))?;
            self.next_seq += 1;
            self.writer = Some((seq, f));
            self.writer_len = 0;
        }
        let (seq, file) = self.writer.as_mut().expect("writer opened above");
        let seq = *seq;
        self.scratch.clear();
        self.scratch.extend_from_slice(&MAGIC);
        self.scratch.extend_from_slice(&body_len.to_le_bytes());
        self.scratch.extend_from_slice(&r.points.to_le_bytes());
        self.scratch.extend_from_slice(&r.raw_bytes.to_le_bytes());
        let sum = crc(&self.scratch[4..16], &r.body);
        self.scratch.extend_from_slice(&sum.to_le_bytes());
        self.scratch.extend_from_slice(&r.body);
        let written = file.write_all(&self.scratch).and_then(|()| {
            if self.sync {
                file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            // Cut the partial record off again: that frees space rather
            // than taking it, and leaves nothing torn to skip at the next
            // start. A segment that cannot be cut is never appended to
            // again (its torn tail ends it at the next scan).
            if file.set_len(self.writer_len).is_err() {
                self.writer = None;
            }
            self.failed(&segment_path(&self.dir, seq), &e);
            return Err(e);
        }
        self.records.push_back(Rec {
            seq,
            offset: self.writer_len,
            body_len,
            points: r.points,
        });
        self.writer_len += size;
        self.bytes += size;
        self.points += u64::from(r.points);
        let mut dropped = Dropped::default();
        while self.bytes > self.max_size && self.records.len() > 1 {
            let old = self.remove_front().expect("more than one record");
            dropped.batches += 1;
            dropped.points += u64::from(old.points);
        }
        if dropped.batches > 0 {
            self.acknowledge();
        }
        Ok(dropped)
    }

    /// Writes the requests kept in memory to disk, oldest first, until
    /// one fails.
    fn unspill(&mut self) -> Dropped {
        let mut dropped = Dropped::default();
        while let Some(r) = self.spill.as_mut().and_then(|s| s.queue.pop_front()) {
            match self.append(&r) {
                Ok(d) => {
                    dropped.batches += d.batches;
                    dropped.points += d.points;
                    let s = self.spill.as_mut().expect("spilling");
                    s.bytes -= r.body.len() as u64;
                    s.points -= u64::from(r.points);
                }
                Err(_) => {
                    self.spill.as_mut().expect("spilling").queue.push_front(r);
                    break;
                }
            }
        }
        dropped
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        self.write_ack();
    }
}

impl Queue for Disk {
    fn push(&mut self, r: Request) -> io::Result<Dropped> {
        self.write_ack();
        let mut dropped = std::mem::take(&mut self.dropped);
        let d = self.unspill();
        dropped.batches += d.batches;
        dropped.points += d.points;
        let spilling = self.spill.as_ref().is_some_and(|s| !s.queue.is_empty());
        if !spilling {
            match self.append(&r) {
                Ok(d) => {
                    dropped.batches += d.batches;
                    dropped.points += d.points;
                    return Ok(dropped);
                }
                Err(e) if self.spill.is_none() => return Err(e),
                Err(_) => {}
            }
        }
        let s = self.spill.as_mut().expect("spilling");
        s.bytes += r.body.len() as u64;
        s.points += u64::from(r.points);
        s.queue.push_back(r);
        while s.bytes > s.max_bytes && s.queue.len() > 1 {
            let old = s.queue.pop_front().expect("more than one");
            s.bytes -= old.body.len() as u64;
            s.points -= u64::from(old.points);
            dropped.batches += 1;
            dropped.points += u64::from(old.points);
        }
        Ok(dropped)
    }

    fn front(&mut self) -> io::Result<Option<&Request>> {
        let Some(rec) = self.records.front().copied() else {
            return Ok(self.spill.as_ref().and_then(|s| s.queue.front()));
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

    /// Removes the oldest request. An acknowledgement the disk cannot
    /// take is kept in memory and counted, not returned as an error: the
    /// request was delivered, and the sender goes on.
    fn pop(&mut self) -> io::Result<()> {
        if self.remove_front().is_some() {
            self.acknowledge();
            // The space just freed may take what waits in memory.
            if self.in_memory() > 0 {
                let d = self.unspill();
                self.dropped.batches += d.batches;
                self.dropped.points += d.points;
            }
        } else if let Some(s) = self.spill.as_mut() {
            if let Some(r) = s.queue.pop_front() {
                s.bytes -= r.body.len() as u64;
                s.points -= u64::from(r.points);
            }
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.records.len() + self.in_memory()
    }

    fn bytes(&self) -> u64 {
        self.bytes + self.spill.as_ref().map_or(0, |s| s.bytes)
    }

    fn points(&self) -> u64 {
        self.points + self.spill.as_ref().map_or(0, |s| s.points)
    }

    fn volatile(&mut self) -> Dropped {
        let _ = self.unspill();
        Dropped {
            batches: self.in_memory() as u64,
            points: self.spill.as_ref().map_or(0, |s| s.points),
        }
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

    use sonde_testkit::Tmpfs;

    fn segments(dir: &Path) -> usize {
        fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "seg")
            })
            .count()
    }

    #[test]
    fn a_full_disk_refuses_a_push_and_delivering_frees_it_without_a_restart() {
        let Some(fs_) = Tmpfs::mount("3m") else {
            return;
        };
        let dir = fs_.path().join("buffer");
        let (mut d, _) = Disk::open(&dir, 1 << 30, true).unwrap();
        let mut pushed = 0;
        let err = loop {
            match d.push(req(pushed + 1, 100 << 10)) {
                Ok(_) => pushed += 1,
                Err(e) => break e,
            }
            assert!(pushed < 100, "a 3 MiB disk took 10 MiB");
        };
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        assert!(pushed >= 20, "{pushed}");
        // Nothing torn was left behind: the refused record was cut off.
        assert_eq!(d.len() as u32, pushed);
        // Delivering everything works on the full disk, and frees it all.
        assert_eq!(drain(&mut d), (1..=pushed).collect::<Vec<_>>());
        assert_eq!(segments(&dir), 0);
        assert!(fs_.used() < 64 << 10, "{} bytes in use", fs_.used());
        // It takes records again, with no restart.
        d.push(req(1000, 100 << 10)).unwrap();
        drop(d);
        // What was delivered is not sent again after a restart.
        let (mut d, loaded) = Disk::open(&dir, 1 << 30, true).unwrap();
        assert_eq!(loaded.records, 1);
        assert_eq!(drain(&mut d), [1000]);
    }

    #[test]
    fn with_a_memory_spill_a_full_disk_keeps_requests_in_order_in_memory() {
        let Some(fs_) = Tmpfs::mount("2m") else {
            return;
        };
        let dir = fs_.path().join("buffer");
        let (d, _) = Disk::open(&dir, 1 << 30, false).unwrap();
        let mut d = d.spill_to_memory(1 << 20);
        let mut dropped = Dropped::default();
        for n in 1..=40 {
            let x = d.push(req(n, 100 << 10)).unwrap();
            dropped.batches += x.batches;
            dropped.points += x.points;
        }
        // The disk took what it could; memory holds at most 1 MiB more and
        // the oldest of those past it were dropped and counted.
        assert!(
            d.in_memory() > 0 && d.in_memory() <= 10,
            "{}",
            d.in_memory()
        );
        assert!(dropped.batches > 0);
        let got = drain(&mut d);
        assert_eq!(got.len() as u64 + dropped.batches, 40);
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert_eq!(*got.last().unwrap(), 40);
        assert_eq!(d.in_memory(), 0);
        assert_eq!(segments(&dir), 0);
    }

    #[test]
    fn an_acknowledgement_the_full_disk_cannot_take_waits_in_memory_until_a_segment_is_freed() {
        let Some(fs_) = Tmpfs::mount("3m") else {
            return;
        };
        let dir = fs_.path().join("buffer");
        let errors = Arc::new(DataDirErrors::default());
        // 1 MiB segments.
        let (d, _) = Disk::open(&dir, 8 << 20, true).unwrap();
        let mut d = d.count_errors(Arc::clone(&errors));
        let mut pushed = 0;
        while d.push(req(pushed + 1, 100 << 10)).is_ok() {
            pushed += 1;
        }
        // The refused record was cut off again; another writer takes the
        // space that freed, to the last block.
        fs_.fill();
        let full = errors.count(What::Buffer);
        // The first acknowledgement needs the `ack` file's first block,
        // which the full disk does not have: it waits in memory, and
        // delivery goes on.
        d.front().unwrap();
        d.pop().unwrap();
        assert_eq!(errors.count(What::Buffer), full + 1);
        assert_eq!(read_ack(&dir), None);
        // Once the first 1 MiB segment is delivered and deleted, it is
        // written.
        let mut popped = 1;
        while read_ack(&dir).is_none() {
            d.front().unwrap();
            d.pop().unwrap();
            popped += 1;
            assert!(popped < pushed, "no acknowledgement written");
        }
        drop(d);
        let (mut d, _) = Disk::open(&dir, 8 << 20, true).unwrap();
        assert_eq!(drain(&mut d), (popped + 1..=pushed).collect::<Vec<_>>());
    }

    #[test]
    fn a_removed_directory_is_made_again_at_the_next_push() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("buffer");
        let (mut d, _) = Disk::open(&path, 1 << 30, false).unwrap();
        d.push(req(1, 100)).unwrap();
        assert_eq!(drain(&mut d), [1]);
        fs::remove_dir_all(&path).unwrap();
        d.push(req(2, 100)).unwrap();
        d.push(req(3, 100)).unwrap();
        d.front().unwrap();
        d.pop().unwrap();
        drop(d);
        let (mut d, _) = Disk::open(&path, 1 << 30, false).unwrap();
        assert_eq!(drain(&mut d), [3]);
    }

    #[test]
    fn a_torn_acknowledgement_slot_falls_back_to_the_other() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        for n in 1..=4 {
            d.push(req(n, 10)).unwrap();
        }
        for _ in 0..2 {
            d.front().unwrap();
            d.pop().unwrap();
        }
        drop(d);
        // The newer slot (the second acknowledgement's) torn: the older
        // one holds, and one request more is sent again, none lost.
        let mut ack = fs::read(dir.path().join(ACK)).unwrap();
        assert_eq!(ack.len(), 2 * SLOT);
        let newer = (0..2)
            .max_by_key(|i| {
                u64::from_le_bytes(ack[i * SLOT + 16..i * SLOT + 24].try_into().unwrap())
            })
            .unwrap();
        ack[newer * SLOT + 3] ^= 0xff;
        fs::write(dir.path().join(ACK), &ack).unwrap();
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        assert_eq!(drain(&mut d), [2, 3, 4]);
    }

    #[test]
    fn an_acknowledgement_of_the_twenty_byte_form_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        for n in 1..=3 {
            d.push(req(n, 10)).unwrap();
        }
        drop(d);
        // (segment 0, the second record) in the form older versions wrote.
        let mut b = [0u8; 20];
        b[8..16].copy_from_slice(&(HEADER + 10).to_le_bytes());
        let sum = crc(&b[..16], &[]);
        b[16..20].copy_from_slice(&sum.to_le_bytes());
        fs::write(dir.path().join(ACK), b).unwrap();
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        assert_eq!(drain(&mut d), [2, 3]);
        drop(d);
        let (mut d, _) = Disk::open(dir.path(), 1 << 30, false).unwrap();
        assert_eq!(drain(&mut d), Vec::<u32>::new());
    }
}
