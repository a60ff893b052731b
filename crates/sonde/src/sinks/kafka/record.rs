//! What one Kafka record holds for one line, by `format`.
//!
//! * `raw`: the value is the line's bytes (no newline); each of the
//!   source's `fields` is a header (key = the field, value = its text).
//! * `json`: the value is one object,
//!   `{"message","file","offset","host","source", fields...}`: `message`
//!   is the line as a string (invalid UTF-8 replaced by U+FFFD), `offset`
//!   the file offset of its first byte, the fields top-level keys after
//!   those five. A field named like one of the five is left out of the
//!   object (the line's own value wins); no headers.
//!
//! Records have no key: a log batch goes to one partition at a time
//! (at least once: `at_least_once::BatchPartitioner`; exactly once:
//! librdkafka's sticky partitioner), which gives the largest batches. Order is
//! kept per partition, so the lines of a file stay in order only on a
//! one-partition topic; a consumer that needs file order on more
//! partitions sorts by `offset` per `file` (json format).

use std::io::Write as _;

use rdkafka::message::{Header, OwnedHeaders};
use sonde_io::logs::{LogLine, SourceInfo};

use super::Format;

/// The keys of a json record that fields cannot take.
const FIXED: [&str; 5] = ["message", "file", "offset", "host", "source"];

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

    /// The headers of every record of `source`: its fields in raw format,
    /// none in json.
    pub fn headers(&self, source: &SourceInfo) -> Option<OwnedHeaders> {
        if self.format == Format::Json || source.fields.is_empty() {
            return None;
        }
        let mut h = OwnedHeaders::new_with_capacity(source.fields.len());
        for (k, v) in &source.fields {
            h = h.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        }
        Some(h)
    }

    /// The value of the record of `line`.
    pub fn value<'a>(&'a mut self, source: &SourceInfo, line: &LogLine<'a>) -> &'a [u8] {
        match self.format {
            Format::Raw => line.bytes,
            Format::Json => {
                let b = &mut self.buf;
                b.clear();
                b.extend_from_slice(b"{\"message\":");
                string(b, &String::from_utf8_lossy(line.bytes));
                b.extend_from_slice(b",\"file\":");
                string(b, line.path);
                b.extend_from_slice(b",\"offset\":");
                // Writing into a Vec cannot fail.
                let _ = write!(b, "{}", line.offset);
                b.extend_from_slice(b",\"host\":");
                string(b, &source.host);
                b.extend_from_slice(b",\"source\":");
                string(b, &source.name);
                for (k, v) in &source.fields {
                    if FIXED.contains(&k.as_str()) {
                        continue;
                    }
                    b.push(b',');
                    string(b, k);
                    b.push(b':');
                    string(b, v);
                }
                b.push(b'}');
                &self.buf
            }
        }
    }
}

/// Appends `s` as a JSON string.
fn string(out: &mut Vec<u8>, s: &str) {
    // Writing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;

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
        };
        assert_eq!(e.value(&src, &line), b"GET / 200");
        let h = e.headers(&src).unwrap();
        let got: Vec<(&str, Option<&[u8]>)> = h.iter().map(|h| (h.key, h.value)).collect();
        assert_eq!(
            got,
            [("env", Some(&b"prod"[..])), ("service", Some(&b"api"[..]))]
        );
        assert!(Encoder::new(Format::Raw).headers(&source(&[])).is_none());
    }

    #[test]
    fn a_json_record_holds_the_line_its_origin_and_the_fields() {
        let src = source(&[("env", "prod"), ("host", "spoofed")]);
        let mut e = Encoder::new(Format::Json);
        let line = LogLine {
            bytes: b"say \"hi\"\t\xff!",
            path: "/var/log/a.log",
            offset: 42,
        };
        assert_eq!(
            std::str::from_utf8(e.value(&src, &line)).unwrap(),
            "{\"message\":\"say \\\"hi\\\"\\t\u{fffd}!\",\"file\":\"/var/log/a.log\",\
             \"offset\":42,\"host\":\"web-1\",\"source\":\"app\",\"env\":\"prod\"}"
        );
        assert!(e.headers(&src).is_none());
    }
}
