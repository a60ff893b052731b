//! Log records as rows of the `clickhouse` sink's `logs` table
//! ([`super::schema`]), in `RowBinary` ([`super::rows`] says how each
//! type is written).
//!
//! A row is `time, host, source, file, file_offset, id, message,
//! field_keys, field_values`. `id` names the record across retries,
//! restarts and renames, so that a record written twice is one record to
//! the table's `ReplacingMergeTree` and to a query that reads it with
//! `LIMIT 1 BY host, source, id` ([`record_id`]).

use std::hash::Hasher as _;

use sonde_encode::Half;
use sonde_log_sources::{record, LogLine, SourceInfo};

use super::rows::{put_len, put_str, put_u64};
use crate::logs::deliver::LogEncoder;

/// The id of the record of `line`: XXH64 (seed 0) of its file's device
/// and inode, its offset and its text for a line of a file, which a line
/// read again after a crash (from the same file, under any path) has
/// too; of its time, host, text and attributes for a record not read from
/// a file (a DogStatsD event), which is sent again only whole. A kind
/// byte first keeps the two apart.
pub fn record_id(source: &SourceInfo, line: &LogLine<'_>) -> u64 {
    let mut h = twox_hash::XxHash64::with_seed(0);
    match (line.file, line.meta) {
        (_, Some(meta)) => {
            h.write_u8(2);
            h.write(&meta.timestamp.to_le_bytes());
            put_hashed(&mut h, meta.host.as_deref().unwrap_or(&source.host));
            put_hashed_bytes(&mut h, line.bytes);
            for (k, v) in &meta.attributes {
                put_hashed(&mut h, k);
                put_hashed(&mut h, &v.to_text());
            }
        }
        (file, None) => {
            h.write_u8(1);
            let (dev, ino) = file.map_or((0, 0), |f| (f.dev, f.ino));
            h.write(&dev.to_le_bytes());
            h.write(&ino.to_le_bytes());
            h.write(&line.offset.to_le_bytes());
            put_hashed_bytes(&mut h, line.bytes);
        }
    }
    h.finish()
}

fn put_hashed(h: &mut twox_hash::XxHash64, s: &str) {
    put_hashed_bytes(h, s.as_bytes());
}

/// Length-prefixed, so that moving a byte from one part to the next is
/// another record.
fn put_hashed_bytes(h: &mut twox_hash::XxHash64, b: &[u8]) {
    h.write(&(b.len() as u64).to_le_bytes());
    h.write(b);
}

/// Writes a request's records as `logs` rows.
#[derive(Debug, Default)]
pub struct ChLogs {
    buf: Vec<u8>,
    records: usize,
    /// Seconds since the epoch when the request began: the `time` of its
    /// lines of files, which carry no time of their own.
    now: u32,
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl ChLogs {
    fn row(&mut self, source: &SourceInfo, line: &LogLine<'_>) {
        let o = &mut self.buf;
        let time = line.meta.map_or(self.now, |m| {
            u32::try_from(m.timestamp.max(0)).unwrap_or(u32::MAX)
        });
        o.extend_from_slice(&time.to_le_bytes());
        put_str(
            o,
            line.meta
                .and_then(|m| m.host.as_deref())
                .unwrap_or(&source.host),
        );
        put_str(o, &source.name);
        put_str(o, line.path);
        put_u64(o, line.offset);
        put_u64(o, record_id(source, line));
        put_len(o, line.bytes.len());
        o.extend_from_slice(line.bytes);
        self.keys.clear();
        self.values.clear();
        let mut n = 0;
        let (keys, values) = (&mut self.keys, &mut self.values);
        record::text_fields(source, line, |k, v| {
            put_str(keys, k);
            put_str(values, v);
            n += 1;
        });
        put_len(o, n);
        o.extend_from_slice(&self.keys);
        put_len(o, n);
        o.extend_from_slice(&self.values);
    }
}

impl LogEncoder for ChLogs {
    fn content_type(&self) -> &'static str {
        "application/octet-stream"
    }

    fn begin(&mut self, _: &SourceInfo) {
        self.buf.clear();
        self.records = 0;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        self.now = u32::try_from(now.as_secs()).unwrap_or(u32::MAX);
    }

    fn push(&mut self, source: &SourceInfo, line: &LogLine<'_>) {
        self.row(source, line);
        self.records += 1;
    }

    fn records(&self) -> usize {
        self.records
    }

    fn bytes(&self) -> usize {
        self.buf.len()
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
    }

    fn split(body: &[u8]) -> Option<[Half; 2]> {
        let mut ends = Vec::new();
        let mut at = 0;
        while at < body.len() {
            at = row_end(body, at)?;
            ends.push(at);
        }
        sonde_encode::split_at_ends(body, &ends)
    }
}

/// Where the row that starts at `at` ends; `None` for a row cut short.
fn row_end(body: &[u8], mut at: usize) -> Option<usize> {
    let skip = |at: usize, n: usize| (at + n <= body.len()).then_some(at + n);
    let string = |at: usize| {
        let (len, after) = get_len(body, at)?;
        skip(after, len)
    };
    at = skip(at, 4)?;
    for _ in 0..3 {
        at = string(at)?;
    }
    at = skip(at, 16)?;
    at = string(at)?;
    for _ in 0..2 {
        let (n, after) = get_len(body, at)?;
        at = after;
        for _ in 0..n {
            at = string(at)?;
        }
    }
    Some(at)
}

/// The LEB128 length at `at`, and where it ends.
fn get_len(body: &[u8], mut at: usize) -> Option<(usize, usize)> {
    let mut n = 0usize;
    for shift in (0..64).step_by(7) {
        let b = *body.get(at)?;
        at += 1;
        n |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((n, at));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_encode::record::{AttrValue, RecordMeta};
    use sonde_logs::identity::FileId;

    fn source() -> SourceInfo {
        SourceInfo {
            name: "app".into(),
            host: "web-1".into(),
            fields: vec![("env".into(), "prod".into())],
        }
    }

    fn line<'a>(bytes: &'a [u8], offset: u64, ino: u64) -> LogLine<'a> {
        LogLine {
            bytes,
            path: "/var/log/app.log",
            offset,
            file: Some(FileId { dev: 8, ino }),
            meta: None,
            container: None,
        }
    }

    #[test]
    fn a_line_is_named_by_its_file_offset_and_text_not_its_path() {
        let src = source();
        let a = record_id(&src, &line(b"x", 10, 5));
        assert_eq!(a, record_id(&src, &line(b"x", 10, 5)));
        let renamed = LogLine {
            path: "/var/log/app.log.1",
            ..line(b"x", 10, 5)
        };
        assert_eq!(a, record_id(&src, &renamed));
        // Another file at the same path, another offset, another text.
        assert_ne!(a, record_id(&src, &line(b"x", 10, 6)));
        assert_ne!(a, record_id(&src, &line(b"x", 11, 5)));
        assert_ne!(a, record_id(&src, &line(b"y", 10, 5)));
        // Events: by time, host, text and attributes.
        let meta = RecordMeta {
            host: None,
            timestamp: 1_700_000_000,
            severity: None,
            attributes: vec![("title", AttrValue::Str("t".into()))]
                .into_iter()
                .map(|(k, v)| (k.into(), v))
                .collect(),
        };
        let event = LogLine {
            path: "",
            offset: 0,
            file: None,
            meta: Some(&meta),
            ..line(b"x", 0, 0)
        };
        let later = RecordMeta {
            timestamp: 1_700_000_001,
            ..meta.clone()
        };
        let e = record_id(&src, &event);
        assert_ne!(
            e,
            record_id(
                &src,
                &LogLine {
                    meta: Some(&later),
                    ..event
                }
            )
        );
        assert_ne!(e, record_id(&src, &line(b"x", 0, 0)));
    }

    #[test]
    fn rows_split_at_a_row_boundary_and_a_cut_row_is_refused() {
        let src = source();
        let mut e = ChLogs::default();
        e.begin(&src);
        for i in 0..5u64 {
            e.push(&src, &line(format!("line {i} é").as_bytes(), i * 10, 1));
        }
        let mut body = Vec::new();
        e.finish(&mut body);
        let [a, b] = ChLogs::split(&body).expect("five rows");
        assert_eq!((a.points, b.points), (2, 3));
        assert_eq!([a.body, b.body].concat(), body);
        // Each half is whole rows: it splits again down to one row.
        let [c, d] = ChLogs::split(&body[..row_end(&body, 0).unwrap() * 2]).unwrap();
        assert_eq!((c.points, d.points), (1, 1));
        assert!(ChLogs::split(&c.body).is_none());
        assert!(ChLogs::split(&body[..body.len() - 1]).is_none());
    }

    #[test]
    fn a_row_holds_the_record_and_its_fields() {
        let src = source();
        let mut e = ChLogs::default();
        e.begin(&src);
        e.now = 1_700_000_000;
        let l = line(b"hello", 42, 3);
        e.push(&src, &l);
        let mut want = Vec::new();
        want.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        for s in ["web-1", "app", "/var/log/app.log"] {
            put_str(&mut want, s);
        }
        put_u64(&mut want, 42);
        put_u64(&mut want, record_id(&src, &l));
        put_str(&mut want, "hello");
        put_len(&mut want, 1);
        put_str(&mut want, "env");
        put_len(&mut want, 1);
        put_str(&mut want, "prod");
        let mut body = Vec::new();
        e.finish(&mut body);
        assert_eq!(body, want);
        assert_eq!(row_end(&body, 0), Some(body.len()));
    }
}
