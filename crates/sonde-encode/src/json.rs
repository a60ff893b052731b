//! JSON lines: `{"name":..,"tags":{..},"value":..,"timestamp":..}` per point,
//! fields in that order, tags sorted by key.

use sonde_aggregate::OutPoint;

use crate::{write_number, LineFormat, TextLines};

fn write_str(out: &mut Vec<u8>, s: &str) {
    // serde_json does the escaping; writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Appends one line per point to `out`.
pub fn encode<'a>(points: impl IntoIterator<Item = OutPoint<'a>>, out: &mut Vec<u8>) {
    let mut name = String::new();
    for p in points {
        encode_one(&p, &mut name, out);
    }
}

/// Appends one point's line; `name` is scratch space kept by the caller.
fn encode_one(p: &OutPoint<'_>, name: &mut String, out: &mut Vec<u8>) {
    name.clear();
    p.write_name(name);
    out.extend_from_slice(b"{\"name\":");
    write_str(out, name);
    out.extend_from_slice(b",\"tags\":{");
    let mut first = true;
    p.for_each_tag(|k, v| {
        if !first {
            out.push(b',');
        }
        first = false;
        write_str(out, k);
        out.push(b':');
        write_str(out, v);
    });
    out.extend_from_slice(b"},\"value\":");
    write_number(out, p.value);
    out.extend_from_slice(b",\"timestamp\":");
    out.extend_from_slice(itoa::Buffer::new().format(p.timestamp).as_bytes());
    out.extend_from_slice(b"}\n");
}

/// The JSON lines [`LineFormat`]: [`encode`]'s lines, one per point.
#[derive(Debug, Default)]
pub struct Json {
    name: String,
}

impl LineFormat for Json {
    const CONTENT_TYPE: &'static str = "application/x-ndjson";

    fn write(&mut self, p: &OutPoint<'_>, body: &mut Vec<u8>) {
        encode_one(p, &mut self.name, body);
    }
}

/// [`encode`] as a [`crate::BatchEncoder`]: the body is JSON lines.
pub type Lines = TextLines<Json>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::series;
    use sonde_aggregate::Suffix;

    #[test]
    fn lines_match_the_contract_byte_for_byte() {
        let points = [
            OutPoint {
                series: series("h", &[("dc", "x\"y"), ("host", "a")]),
                suffix: Suffix::Bucket,
                le: Some("+Inf"),
                value: 3.0,
                timestamp: 1763800200,
                monotonic: true,
            },
            OutPoint {
                series: series("plain", &[]),
                suffix: Suffix::None,
                le: None,
                value: -0.5,
                timestamp: 5,
                monotonic: false,
            },
        ];
        let mut out = Vec::new();
        encode(points, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"name\":\"h.bucket\",\"tags\":{\"dc\":\"x\\\"y\",\"host\":\"a\",\"le\":\"+Inf\"},\"value\":3,\"timestamp\":1763800200}\n\
             {\"name\":\"plain\",\"tags\":{},\"value\":-0.5,\"timestamp\":5}\n"
        );
    }
}
