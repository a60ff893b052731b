//! A period's profile as rows of the `clickhouse` sink's tables
//! ([`super::schema`]), in ClickHouse's `RowBinary` format: integers
//! little-endian, a `DateTime` as its `UInt32` seconds, a string as its
//! LEB128 length and bytes, an array as its LEB128 length and elements.
//! Written by hand: the format is these few rules, and a row is written
//! straight from the profile without an intermediate value per cell.

use std::collections::{HashMap, HashSet};
use std::hash::Hasher as _;
use std::time::{Duration, Instant};

use sonde_profile::Profile;

/// The id of a stack of `(module, function)` frames, root first: XXH64
/// (seed 0) of each frame's module and name, each length-prefixed. Every
/// agent, of any version, computes the same id for the same frames, so a
/// stack shared by a fleet is stored once.
pub fn stack_id<'a>(frames: impl IntoIterator<Item = (&'a str, &'a str)>) -> u64 {
    let mut h = twox_hash::XxHash64::with_seed(0);
    for (module, name) in frames {
        for part in [module, name] {
            h.write(&(part.len() as u32).to_le_bytes());
            h.write(part.as_bytes());
        }
    }
    h.finish()
}

/// How long a stack counts as stored at most. A request that never
/// arrives (dropped, counted in `sonde_sink_dropped_profiles_total`)
/// empties the set at once ([`Rows::forget_sent`]), so the next periods
/// write their stacks again; this bounds the damage of what no counter
/// sees (a table emptied by hand) to a day of samples whose stacks are
/// missing.
pub const SENT_FOR: Duration = Duration::from_secs(24 * 3600);

/// The most stack ids remembered as stored (8 bytes each, plus the set's
/// overhead: about 10 MiB at most).
const SENT_MAX: usize = 500_000;

/// The rows of the profiles the sink writes, and the stacks written
/// already.
#[derive(Debug)]
pub struct Rows {
    host: String,
    sent: HashSet<u64>,
    since: Instant,
}

/// One period's rows: new stacks, and samples.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PeriodRows {
    /// `profile_stacks` rows of the stacks not written before.
    pub stacks: Vec<u8>,
    /// How many.
    pub stack_rows: usize,
    /// `profile_samples` rows.
    pub samples: Vec<u8>,
    /// How many.
    pub sample_rows: usize,
}

impl Rows {
    /// Rows naming `host` (`agent.hostname`) for processes that name none.
    pub fn new(host: &str) -> Rows {
        Rows {
            host: host.to_string(),
            sent: HashSet::new(),
            since: Instant::now(),
        }
    }

    /// Forgets which stacks were written, so that the next periods write
    /// theirs again: a request of them was lost.
    pub fn forget_sent(&mut self) {
        self.sent.clear();
        self.since = Instant::now();
    }

    /// The rows of `profile`: one sample row per process, thread name and
    /// stack (the threads of one name merged), and a stack row for each
    /// stack not written before ([`SENT_FOR`]). The sample rows are one batch:
    /// each names it and its number of rows.
    ///
    /// A batch's id is its content's: XXH64 of the wrapping sum of each
    /// row's XXH64 (the row's bytes before its batch columns; a sum, so
    /// that the rows' order does not matter) and of their number. The
    /// same period sent twice (a retry, or a period the agent sent again
    /// from its local store after a restart, [`crate::profiles`]) is the
    /// same batch, which the views count once; two different sets of
    /// rows (the two halves of a period an agent restarted within, two
    /// hosts) are two batches but with a chance of 2^-64.
    pub fn period(&mut self, profile: &Profile) -> PeriodRows {
        if self.since.elapsed() >= SENT_FOR || self.sent.len() >= SENT_MAX {
            self.forget_sent();
        }
        let mut out = PeriodRows::default();
        // (process index of the first thread of this pid and name, stack) → count.
        let mut merged: HashMap<(u32, &str, u64), (usize, u64)> = HashMap::new();
        let mut order = Vec::new();
        for s in &profile.stacks {
            let process = &profile.processes[s.process as usize];
            let frames = s.frames.iter().map(|&f| {
                let f = &profile.functions[f as usize];
                (f.module.as_str(), f.name.as_str())
            });
            let id = stack_id(frames);
            if self.sent.insert(id) {
                put_u64(&mut out.stacks, id);
                put_len(&mut out.stacks, s.frames.len());
                for &f in &s.frames {
                    put_str(&mut out.stacks, &profile.functions[f as usize].name);
                }
                put_len(&mut out.stacks, s.frames.len());
                for &f in &s.frames {
                    put_str(&mut out.stacks, &profile.functions[f as usize].module);
                }
                out.stack_rows += 1;
            }
            let key = (process.pid, process.thread.as_str(), id);
            match merged.get_mut(&key) {
                Some((_, count)) => *count += s.count,
                None => {
                    merged.insert(key, (s.process as usize, s.count));
                    order.push(key);
                }
            }
        }
        let period = u32::try_from(profile.start_ns / 1_000_000_000).unwrap_or(u32::MAX);
        let duration_ms = u32::try_from(profile.duration_ns / 1_000_000).unwrap_or(u32::MAX);
        let frequency = u16::try_from(profile.frequency).unwrap_or(u16::MAX);
        let batch_rows = u32::try_from(order.len()).unwrap_or(u32::MAX);
        // Where each row's batch id goes, filled in once every row is
        // written and the id known.
        let mut batch_at = Vec::with_capacity(order.len());
        let mut content: u64 = 0;
        for key in order {
            let (process, count) = merged[&key];
            let p = &profile.processes[process];
            let host = if p.host.is_empty() {
                &self.host
            } else {
                &p.host
            };
            let o = &mut out.samples;
            let row_start = o.len();
            o.extend_from_slice(&period.to_le_bytes());
            o.extend_from_slice(&duration_ms.to_le_bytes());
            o.extend_from_slice(&frequency.to_le_bytes());
            put_str(o, host);
            o.extend_from_slice(&p.pid.to_le_bytes());
            put_str(o, &p.name);
            put_str(o, &p.thread);
            put_str(o, &p.container);
            put_str(o, &p.pod);
            put_u64(o, key.2);
            o.extend_from_slice(&u32::try_from(count).unwrap_or(u32::MAX).to_le_bytes());
            content = content.wrapping_add(twox_hash::XxHash64::oneshot(0, &o[row_start..]));
            batch_at.push(o.len());
            put_u64(o, 0);
            o.extend_from_slice(&batch_rows.to_le_bytes());
            out.sample_rows += 1;
        }
        let mut h = twox_hash::XxHash64::with_seed(0);
        h.write(&content.to_le_bytes());
        h.write(&batch_rows.to_le_bytes());
        let batch = h.finish().to_le_bytes();
        for at in batch_at {
            out.samples[at..at + 8].copy_from_slice(&batch);
        }
        out
    }
}

pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// LEB128, as RowBinary writes lengths.
pub(super) fn put_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_profile::model::{Function, Process, ProfileBuilder};

    fn process(tid: u32, thread: &str) -> Process {
        Process {
            pid: 7,
            name: "server".into(),
            tid,
            thread: thread.into(),
            host: String::new(),
            container: String::new(),
            pod: String::new(),
        }
    }

    #[test]
    fn lengths_are_leb128() {
        for (n, want) in [
            (0usize, vec![0u8]),
            (127, vec![0x7f]),
            (128, vec![0x80, 0x01]),
            (300, vec![0xac, 0x02]),
        ] {
            let mut out = Vec::new();
            put_len(&mut out, n);
            assert_eq!(out, want, "{n}");
        }
    }

    #[test]
    fn stack_ids_depend_on_every_frame_and_its_module_and_are_fixed() {
        let a = stack_id([("/bin/a", "main"), ("/bin/a", "work")]);
        assert_eq!(a, stack_id([("/bin/a", "main"), ("/bin/a", "work")]));
        assert_ne!(a, stack_id([("/bin/a", "work"), ("/bin/a", "main")]));
        assert_ne!(a, stack_id([("/bin/b", "main"), ("/bin/a", "work")]));
        // Length prefixes: moving a byte from one name to the next is
        // another stack.
        assert_ne!(
            stack_id([("m", "ab"), ("m", "c")]),
            stack_id([("m", "a"), ("m", "bc")])
        );
        // The same on every machine and version: XXH64 of these bytes.
        assert_eq!(stack_id([]), 0xef46_db37_51d8_e999);
    }

    #[test]
    fn threads_of_one_name_are_one_row_and_a_stack_is_written_once() {
        let mut b = ProfileBuilder::new(19, 1_700_000_000_000_000_000, 60_000_000_000);
        let main = Function {
            name: "main".into(),
            module: "/bin/server".into(),
        };
        let work = Function {
            name: "work".into(),
            module: "/bin/server".into(),
        };
        // Four threads of the pool "worker" run one stack; "io" another.
        for tid in 1..=4 {
            b.add(&process(tid, "worker"), [&main, &work], 10);
        }
        b.add(&process(9, "io"), [&main], 3);
        let profile = b.finish();
        let mut rows = Rows::new("h1");
        let first = rows.period(&profile);
        assert_eq!((first.stack_rows, first.sample_rows), (2, 2));
        // One sample row: period, duration, frequency, then strings.
        let mut want = Vec::new();
        want.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        want.extend_from_slice(&60_000u32.to_le_bytes());
        want.extend_from_slice(&19u16.to_le_bytes());
        put_str(&mut want, "h1");
        want.extend_from_slice(&7u32.to_le_bytes());
        for s in ["server", "worker", "", ""] {
            put_str(&mut want, s);
        }
        put_u64(
            &mut want,
            stack_id([("/bin/server", "main"), ("/bin/server", "work")]),
        );
        want.extend_from_slice(&40u32.to_le_bytes());
        assert!(first.samples.starts_with(&want), "{:?}", first.samples);
        // Then the batch's id and its two rows.
        let batch = |rows: &[u8]| u64::from_le_bytes(rows[want.len()..][..8].try_into().unwrap());
        let count = &first.samples[want.len() + 8..][..4];
        assert_eq!(count, 2u32.to_le_bytes());
        // The same period again writes its samples, not the stacks, as
        // the same batch: a copy, which the views count once.
        let again = rows.period(&profile);
        assert_eq!((again.stack_rows, again.sample_rows), (0, 2));
        assert_eq!(again.samples, first.samples);
        // So does a later run of the agent sending it from its store:
        // the period read back from the store's file is the same batch.
        let stored = sonde_profile::pprof::decode(&sonde_profile::pprof::encode(&profile)).unwrap();
        let resent = Rows::new("h1").period(&stored);
        assert_eq!(resent.samples.len(), first.samples.len());
        assert_eq!(batch(&resent.samples), batch(&first.samples));
        // Another period, another host, another count: another batch.
        let mut b = ProfileBuilder::new(19, 1_700_000_060_000_000_000, 60_000_000_000);
        for tid in 1..=4 {
            b.add(&process(tid, "worker"), [&main, &work], 10);
        }
        b.add(&process(9, "io"), [&main], 3);
        let next = rows.period(&b.finish());
        assert_ne!(batch(&next.samples), batch(&first.samples));
        assert_ne!(
            batch(&Rows::new("h2").period(&profile).samples),
            batch(&first.samples)
        );
        let mut b = ProfileBuilder::new(19, 1_700_000_000_000_000_000, 60_000_000_000);
        b.add(&process(1, "worker"), [&main, &work], 40);
        b.add(&process(9, "io"), [&main], 4);
        let more = rows.period(&b.finish());
        assert_ne!(batch(&more.samples), batch(&first.samples));
        // Every row of a batch names it: the last row ends with it too.
        let end = first.samples.len();
        assert_eq!(
            first.samples[end - 12..end - 4],
            batch(&first.samples).to_le_bytes()
        );
    }
}
