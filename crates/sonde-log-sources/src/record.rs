//! A log record as JSON, the one shape every sink that writes JSON gives
//! a line: `{"message","file","offset","host","source", fields...}`.
//!
//! `message` is the line (a multiline record's lines joined with `\n`) as
//! a string, invalid UTF-8 replaced by U+FFFD; `file` the path its file was
//! at when it was read; `offset` the file offset of its first byte; `host`
//! and `source` name where it comes from; then the source's `fields` as
//! top-level keys. A field named like one of the first five is left out
//! (the line's own value wins).
//!
//! A record of a container log file (a source with a container `format`)
//! has, after `source`, `time` (as the runtime wrote it) and `stream`
//! (`stdout` or `stderr`) unless its line did not parse, then what its
//! path names of its container: `namespace`, `pod_name`, `pod_uid`,
//! `container_name`, `container_id`, those it names
//! ([`sonde_logs::container::ContainerPath`]).
//!
//! A record not read from a file (a DogStatsD event or service check,
//! with a [`RecordMeta`]) has no `file` and `offset`; its `host` is the
//! one it names, if it does; `source` is followed by `timestamp` (seconds
//! since the epoch) and its meta's attributes as top-level keys (a list as
//! an array of strings), then the fields whose keys they do not take.

use std::io::Write as _;

use sonde_encode::record::{AttrValue, RecordMeta};
use sonde_logs::container;

use crate::batch::ContainerLine;
use crate::{LogLine, SourceInfo};

/// The keys of a record that fields cannot take.
pub const FIXED: [&str; 5] = ["message", "file", "offset", "host", "source"];

/// Appends the JSON object of `line` of `source` to `out`, without a
/// newline.
pub fn json(out: &mut Vec<u8>, source: &SourceInfo, line: &LogLine<'_>) {
    let meta = line.meta;
    out.extend_from_slice(b"{\"message\":");
    string(out, &String::from_utf8_lossy(line.bytes));
    if meta.is_none() {
        out.extend_from_slice(b",\"file\":");
        string(out, line.path);
        // Writing into a Vec cannot fail.
        let _ = write!(out, ",\"offset\":{}", line.offset);
    }
    out.extend_from_slice(b",\"host\":");
    string(
        out,
        meta.and_then(|m| m.host.as_deref()).unwrap_or(&source.host),
    );
    out.extend_from_slice(b",\"source\":");
    string(out, &source.name);
    if let Some(m) = meta {
        attributes(out, m);
    }
    if let Some(c) = &line.container {
        container_keys(out, c);
    }
    for (k, v) in own_fields(source, line) {
        key(out, k);
        string(out, v);
    }
    out.push(b'}');
}

/// The source's fields that `line`'s record keeps: those whose keys
/// neither the record's fixed keys ([`FIXED`]) nor its own keys (a
/// meta's `timestamp` and attributes, a container record's keys) take.
fn own_fields<'a>(
    source: &'a SourceInfo,
    line: &'a LogLine<'_>,
) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
    source.fields.iter().filter_map(move |(k, v)| {
        let taken = line
            .meta
            .is_some_and(|m| k == "timestamp" || m.attributes.iter().any(|(a, _)| a == k))
            || (line.container.is_some() && container::RECORD_KEYS.contains(&k.as_str()));
        (!FIXED.contains(&k.as_str()) && !taken).then_some((k.as_str(), v.as_str()))
    })
}

/// Hands `f` each key a record of `line` has after `source`, in the order
/// [`json`] writes them, with its value as text (a number in decimal, a
/// list comma-joined): for stores whose fields are strings.
pub fn text_fields(source: &SourceInfo, line: &LogLine<'_>, mut f: impl FnMut(&str, &str)) {
    if let Some(m) = line.meta {
        f("timestamp", &m.timestamp.to_string());
        for (k, v) in &m.attributes {
            f(k, &v.to_text());
        }
    }
    if let Some(c) = &line.container {
        if !c.time.is_empty() {
            f("time", c.time);
        }
        if let Some(s) = c.stream {
            f("stream", s.as_str());
        }
        for (k, v) in c.path_fields {
            f(k, v);
        }
    }
    for (k, v) in own_fields(source, line) {
        f(k, v);
    }
}

/// A container record's time, stream and path fields, each after a comma.
fn container_keys(out: &mut Vec<u8>, c: &ContainerLine<'_>) {
    if !c.time.is_empty() {
        key(out, "time");
        string(out, c.time);
    }
    if let Some(s) = c.stream {
        key(out, "stream");
        string(out, s.as_str());
    }
    for (k, v) in c.path_fields {
        key(out, k);
        string(out, v);
    }
}

/// The `timestamp` and attributes of a record with a meta, each after a
/// comma.
fn attributes(out: &mut Vec<u8>, meta: &RecordMeta) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, ",\"timestamp\":{}", meta.timestamp);
    for (k, v) in &meta.attributes {
        key(out, k);
        match v {
            AttrValue::Str(s) => string(out, s),
            AttrValue::Int(n) => {
                let _ = write!(out, "{n}");
            }
            AttrValue::List(l) => {
                let _ = serde_json::to_writer(&mut *out, l);
            }
        }
    }
}

/// Appends `,"k":`, before a value.
fn key(out: &mut Vec<u8>, k: &str) {
    out.push(b',');
    string(out, k);
    out.push(b':');
}

/// Appends `s` as a JSON string.
fn string(out: &mut Vec<u8>, s: &str) {
    // Writing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that [`text_fields`] hands out the keys [`json`] writes
    /// after `source`, with their values as text (compared sorted: the
    /// parsed object is).
    fn text_fields_follow_json(src: &SourceInfo, line: &LogLine<'_>) {
        let mut out = Vec::new();
        json(&mut out, src, line);
        let parsed: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&out).unwrap();
        let want: Vec<(String, String)> = parsed
            .into_iter()
            .filter(|(k, _)| !FIXED.contains(&k.as_str()))
            .map(|(k, v)| {
                let text = match v {
                    serde_json::Value::String(s) => s,
                    serde_json::Value::Array(a) => a
                        .iter()
                        .map(|e| e.as_str().unwrap().to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect();
        let mut got = Vec::new();
        text_fields(src, line, |k, v| got.push((k.to_string(), v.to_string())));
        got.sort();
        assert!(!got.is_empty());
        assert_eq!(got, want);
    }

    #[test]
    fn a_record_holds_the_line_its_origin_and_the_fields() {
        let src = SourceInfo {
            name: "app".into(),
            host: "web-1".into(),
            fields: vec![
                ("env".into(), "prod".into()),
                ("host".into(), "spoofed".into()),
            ],
        };
        let line = LogLine {
            bytes: b"say \"hi\"\t\xff!\n  at x",
            path: "/var/log/a.log",
            offset: 42,
            file: None,
            meta: None,
            container: None,
        };
        let mut out = b"before ".to_vec();
        json(&mut out, &src, &line);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "before {\"message\":\"say \\\"hi\\\"\\t\u{fffd}!\\n  at x\",\"file\":\"/var/log/a.log\",\
             \"offset\":42,\"host\":\"web-1\",\"source\":\"app\",\"env\":\"prod\"}"
        );
        let parsed: serde_json::Value = serde_json::from_slice(&out[7..]).unwrap();
        assert_eq!(parsed["message"], "say \"hi\"\t\u{fffd}!\n  at x");
        text_fields_follow_json(&src, &line);
    }

    #[test]
    fn a_record_with_meta_has_its_host_time_and_attributes_and_no_file() {
        use sonde_encode::record::Severity;
        let src = SourceInfo {
            name: "dogstatsd_events".into(),
            host: "agent-host".into(),
            fields: vec![
                ("dc".into(), "eu".into()),
                ("title".into(), "shadowed".into()),
            ],
        };
        let meta = RecordMeta {
            host: Some("web-1".into()),
            timestamp: 1_700_000_000,
            severity: Some(Severity::Error),
            attributes: vec![
                ("type", AttrValue::Str("event".into())),
                ("title", AttrValue::Str("disk \"full\"".into())),
                ("n", AttrValue::Int(-3)),
                (
                    "tags",
                    AttrValue::List(vec!["env:prod".into(), "blue".into()]),
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect(),
        };
        let line = LogLine {
            bytes: b"on /var\nand /tmp",
            path: "",
            offset: 0,
            file: None,
            meta: Some(&meta),
            container: None,
        };
        let mut out = Vec::new();
        json(&mut out, &src, &line);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "{\"message\":\"on /var\\nand /tmp\",\"host\":\"web-1\",\"source\":\"dogstatsd_events\",\
             \"timestamp\":1700000000,\"type\":\"event\",\"title\":\"disk \\\"full\\\"\",\"n\":-3,\
             \"tags\":[\"env:prod\",\"blue\"],\"dc\":\"eu\"}"
        );
        text_fields_follow_json(&src, &line);
        let no_host = RecordMeta {
            host: None,
            ..meta.clone()
        };
        let line = LogLine {
            meta: Some(&no_host),
            ..line
        };
        out.clear();
        json(&mut out, &src, &line);
        let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed["host"], "agent-host");
    }

    #[test]
    fn a_container_record_has_its_time_stream_and_pod_after_the_source() {
        let src = SourceInfo {
            name: "pods".into(),
            host: "node-1".into(),
            fields: vec![("cluster".into(), "eu-1".into())],
        };
        let path_fields: Vec<(&'static str, Box<str>)> = vec![
            ("namespace", "shop".into()),
            ("pod_name", "web-0".into()),
            ("pod_uid", "0b2c".into()),
            ("container_name", "nginx".into()),
        ];
        let line = LogLine {
            bytes: b"GET / 200",
            path: "/var/log/pods/shop_web-0_0b2c/nginx/0.log",
            offset: 7,
            file: None,
            meta: None,
            container: Some(ContainerLine {
                time: "2024-05-06T07:08:09.123456789Z",
                stream: Some(container::Stream::Stderr),
                path_fields: &path_fields,
            }),
        };
        let mut out = Vec::new();
        json(&mut out, &src, &line);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "{\"message\":\"GET / 200\",\"file\":\"/var/log/pods/shop_web-0_0b2c/nginx/0.log\",\
             \"offset\":7,\"host\":\"node-1\",\"source\":\"pods\",\
             \"time\":\"2024-05-06T07:08:09.123456789Z\",\"stream\":\"stderr\",\
             \"namespace\":\"shop\",\"pod_name\":\"web-0\",\"pod_uid\":\"0b2c\",\
             \"container_name\":\"nginx\",\"cluster\":\"eu-1\"}"
        );
        text_fields_follow_json(&src, &line);
        // A line that did not parse keeps its path's fields alone.
        let raw = LogLine {
            container: Some(ContainerLine {
                time: "",
                stream: None,
                path_fields: &path_fields[..1],
            }),
            ..line
        };
        out.clear();
        json(&mut out, &src, &raw);
        let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed["namespace"], "shop");
        assert!(parsed.get("time").is_none() && parsed.get("stream").is_none());
    }
}
