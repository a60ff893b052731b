//! What one Kafka record holds for one line, by `format`.
//!
//! * `raw`: the value is the line's bytes (no newline); each of the
//!   source's `fields` is a header (key = the field, value = its text).
//!   A record with a meta (a DogStatsD event) also has the headers
//!   `host`, `timestamp` and one per attribute (a list comma-joined). A
//!   record of a container log file also has the headers `time` and
//!   `stream` (unless its line did not parse) and those of its path:
//!   `namespace`, `pod_name`, `pod_uid`, `container_name`,
//!   `container_id`, where the path names them.
//! * `json`: the value is one object,
//!   `{"message","file","offset","host","source", fields...}`, as
//!   [`sonde_log_sources::record`] writes it; no headers.
//!
//! Records have no key: a log batch goes to one partition at a time
//! (at least once: the next partition for each batch; exactly once: the
//! next partition for each transaction), which gives the largest batches. Order is
//! kept per partition, so the lines of a file stay in order only on a
//! one-partition topic; a consumer that needs file order on more
//! partitions sorts by `offset` per `file` (json format).

use std::ops::Range;

use sonde_log_sources::{record, LogBatch, LogLine, SourceInfo};

use super::Format;

/// The time of the records produced now, in milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Encodes lines of one source, reusing its buffer from line to line.
#[derive(Debug)]
pub struct Encoder {
    format: Format,
    buf: Vec<u8>,
}

impl Encoder {
    /// An encoder for `format`.
    pub fn new(format: Format) -> Self {
        Encoder {
            format,
            buf: Vec::new(),
        }
    }

    /// The headers of every record of `source`: its fields in raw
    /// format, none in json.
    fn field_pairs<'a>(&self, source: &'a SourceInfo) -> Vec<(&'a str, &'a [u8])> {
        if self.format == Format::Json {
            return Vec::new();
        }
        source
            .fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_bytes()))
            .collect()
    }

    /// The headers a record of `line` has beyond its source's fields: for
    /// a record with a meta in raw format, its host, timestamp and
    /// attributes (a list comma-joined); none otherwise.
    fn meta_headers(&self, source: &SourceInfo, line: &LogLine<'_>) -> Vec<(String, Vec<u8>)> {
        let meta = match line.meta {
            Some(m) if self.format == Format::Raw => m,
            _ => return Vec::new(),
        };
        let host = meta.host.as_deref().unwrap_or(&source.host);
        let mut h = Vec::with_capacity(meta.attributes.len() + 2);
        h.push(("host".to_string(), host.as_bytes().to_vec()));
        h.push((
            "timestamp".to_string(),
            meta.timestamp.to_string().into_bytes(),
        ));
        for (k, v) in &meta.attributes {
            h.push((k.to_string(), v.to_text().into_bytes()));
        }
        h
    }

    /// Appends the records of the lines `lines` of `batch` to `builder`
    /// (which may hold records already) while it holds fewer than
    /// `max_bytes` bytes and `max_records` records, at least one; returns
    /// where the lines it took end. Each record has the line's value,
    /// the source's fields (raw format) and the line's meta (host,
    /// timestamp, attributes) as headers, and the time `now`.
    pub fn fill(
        &mut self,
        builder: &mut sonde_kafka::BatchBuilder,
        batch: &LogBatch,
        lines: Range<usize>,
        (max_bytes, max_records): (usize, usize),
        now: i64,
    ) -> usize {
        let source = batch.source();
        let fields = self.field_pairs(source);
        // A container record's headers, reused from record to record.
        let mut headers: Vec<(&str, &[u8])> = Vec::new();
        let mut end = lines.start;
        for line in batch.lines_in(lines) {
            if !builder.is_empty()
                && (builder.raw_bytes() >= max_bytes || builder.len() >= max_records)
            {
                break;
            }
            let meta = self.meta_headers(source, &line);
            let container = line.container.filter(|_| self.format == Format::Raw);
            let value = self.value(source, &line);
            if let Some(c) = container {
                headers.clear();
                headers.extend_from_slice(&fields);
                if !c.time.is_empty() {
                    headers.push(("time", c.time.as_bytes()));
                }
                if let Some(s) = c.stream {
                    headers.push(("stream", s.as_str().as_bytes()));
                }
                headers.extend(c.path_fields.iter().map(|(k, v)| (*k, v.as_bytes())));
                builder.push(now, None, value, &headers);
            } else if meta.is_empty() {
                builder.push(now, None, value, &fields);
            } else {
                let mut h = fields.clone();
                h.extend(meta.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
                builder.push(now, None, value, &h);
            }
            end += 1;
        }
        end
    }

    /// The value of the record of `line`.
    pub fn value<'a>(&'a mut self, source: &SourceInfo, line: &LogLine<'a>) -> &'a [u8] {
        match self.format {
            Format::Raw => line.bytes,
            Format::Json => {
                self.buf.clear();
                record::json(&mut self.buf, source, line);
                &self.buf
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(fields: &[(&str, &str)]) -> SourceInfo {
        SourceInfo {
            name: "app".into(),
            host: "web-1".into(),
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_raw_record_is_the_line_with_the_fields_as_headers() {
        let src = source(&[("env", "prod"), ("service", "api")]);
        let mut e = Encoder::new(Format::Raw);
        let line = LogLine {
            bytes: b"GET / 200",
            path: "/var/log/a.log",
            offset: 7,
            file: None,
            meta: None,
            container: None,
        };
        assert_eq!(e.value(&src, &line), b"GET / 200");
        assert_eq!(
            e.field_pairs(&src),
            [("env", &b"prod"[..]), ("service", &b"api"[..])]
        );
        assert!(e.meta_headers(&src, &line).is_empty());
        assert!(Encoder::new(Format::Raw)
            .field_pairs(&source(&[]))
            .is_empty());
    }

    #[test]
    fn a_json_record_holds_the_line_its_origin_and_the_fields() {
        let src = source(&[("env", "prod"), ("host", "spoofed")]);
        let mut e = Encoder::new(Format::Json);
        let line = LogLine {
            bytes: b"say \"hi\"\t\xff!",
            path: "/var/log/a.log",
            offset: 42,
            file: None,
            meta: None,
            container: None,
        };
        assert_eq!(
            std::str::from_utf8(e.value(&src, &line)).unwrap(),
            "{\"message\":\"say \\\"hi\\\"\\t\u{fffd}!\",\"file\":\"/var/log/a.log\",\
             \"offset\":42,\"host\":\"web-1\",\"source\":\"app\",\"env\":\"prod\"}"
        );
        assert!(e.field_pairs(&src).is_empty());
    }

    #[test]
    fn a_raw_record_with_meta_has_its_host_time_and_attributes_as_headers() {
        use sonde_encode::record::{AttrValue, RecordMeta};
        let src = source(&[("env", "prod")]);
        let meta = RecordMeta {
            host: None,
            timestamp: 1_700_000_000,
            severity: None,
            attributes: vec![
                ("type", AttrValue::Str("service_check".into())),
                ("tags", AttrValue::List(vec!["a:1".into(), "b".into()])),
            ]
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect(),
        };
        let line = LogLine {
            bytes: b"down",
            path: "",
            offset: 0,
            file: None,
            meta: Some(&meta),
            container: None,
        };
        let e = Encoder::new(Format::Raw);
        let meta = e.meta_headers(&src, &line);
        let mut got = e.field_pairs(&src);
        got.extend(meta.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        assert_eq!(
            got,
            [
                ("env", &b"prod"[..]),
                ("host", b"web-1"),
                ("timestamp", b"1700000000"),
                ("type", b"service_check"),
                ("tags", b"a:1,b"),
            ]
        );
        // A line of a file keeps its batch's headers; json has none.
        let file_line = LogLine { meta: None, ..line };
        assert!(e.meta_headers(&src, &file_line).is_empty());
        assert_eq!(e.field_pairs(&src).len(), 1);
        let j = Encoder::new(Format::Json);
        assert!(j.field_pairs(&src).is_empty() && j.meta_headers(&src, &line).is_empty());
    }
}
