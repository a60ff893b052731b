//! A log record as JSON, the one shape every sink that writes JSON gives
//! a line: `{"message","file","offset","host","source", fields...}`.
//!
//! `message` is the line (a multiline record's lines joined with `\n`) as
//! a string, invalid UTF-8 replaced by U+FFFD; `file` the path its file was
//! at when it was read; `offset` the file offset of its first byte; `host`
//! and `source` name where it comes from; then the source's `fields` as
//! top-level keys. A field named like one of the first five is left out
//! (the line's own value wins).

use std::io::Write as _;

use super::{LogLine, SourceInfo};

/// The keys of a record that fields cannot take.
pub const FIXED: [&str; 5] = ["message", "file", "offset", "host", "source"];

/// Appends the JSON object of `line` of `source` to `out`, without a
/// newline.
pub fn json(out: &mut Vec<u8>, source: &SourceInfo, line: &LogLine<'_>) {
    out.extend_from_slice(b"{\"message\":");
    string(out, &String::from_utf8_lossy(line.bytes));
    out.extend_from_slice(b",\"file\":");
    string(out, line.path);
    out.extend_from_slice(b",\"offset\":");
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{}", line.offset);
    out.extend_from_slice(b",\"host\":");
    string(out, &source.host);
    out.extend_from_slice(b",\"source\":");
    string(out, &source.name);
    for (k, v) in &source.fields {
        if FIXED.contains(&k.as_str()) {
            continue;
        }
        out.push(b',');
        string(out, k);
        out.push(b':');
        string(out, v);
    }
    out.push(b'}');
}

/// Appends `s` as a JSON string.
fn string(out: &mut Vec<u8>, s: &str) {
    // Writing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
