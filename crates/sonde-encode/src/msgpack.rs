//! msgpack batches for the generic `http` sink's `format = "msgpack"`:
//! one array with one map per point, holding the fields of the JSON lines
//! contract (ARCHITECTURE.md) in the same order:
//!
//! ```text
//! [{"name": str, "tags": {key: value, ...}, "value": float 64, "timestamp": int}, ...]
//! ```
//!
//! Tags are sorted by key with a histogram's `le` in its place, exactly as
//! [`crate::json`] writes them (a series that carries its own `le` tag
//! shows both, as in JSON). `value` is always a float 64; `timestamp`
//! (unix seconds) is an integer in its smallest msgpack form. Strings are
//! msgpack `str`. The array header is written by
//! [`BatchEncoder::finish`], when the count is known, in its smallest form.
//!
//! A receiver of this generic sink decides what compression it accepts;
//! the sink sends whatever its `compression` says with the matching
//! `Content-Encoding`.
//!
//! ```
//! use sonde_aggregate::{key, OutPoint, SeriesRef, Suffix};
//! use sonde_encode::msgpack::Msgpack;
//! use sonde_encode::BatchEncoder;
//!
//! let key = key::encode(0, "up", &[]);
//! let series = SeriesRef::from_key(&key).unwrap();
//! let p = OutPoint { series, suffix: Suffix::None, le: None, value: 1.0, timestamp: 7, monotonic: false };
//! let mut enc = Msgpack::new();
//! enc.push(&p);
//! let mut body = Vec::new();
//! enc.finish(&mut body);
//! assert_eq!(&body[..2], [0x91, 0x84]); // an array of 1, a map of 4
//! ```

use sonde_aggregate::OutPoint;

use crate::{BatchEncoder, Body, Half};

/// The msgpack [`BatchEncoder`].
///
/// # Design
///
/// Points are encoded as they are pushed, after the array header's place;
/// the header, whose size depends on the count, is written in front at
/// [`BatchEncoder::finish`]. Writing into a `Vec` cannot fail, so rmp's
/// `Result`s, whose only errors are the writer's, are ignored.
#[derive(Debug, Default)]
pub struct Msgpack {
    body: Body,
    name: String,
}

impl Msgpack {
    /// An empty encoder.
    pub fn new() -> Msgpack {
        Msgpack::default()
    }

    fn count(&self) -> u32 {
        // A batch is bounded by `max_batch_points` long before this.
        u32::try_from(self.body.points).unwrap_or(u32::MAX)
    }
}

/// The size of an array header for `n` elements.
fn array_header_len(n: u32) -> usize {
    match n {
        0..=15 => 1,
        16..=0xffff => 3,
        _ => 5,
    }
}

impl BatchEncoder for Msgpack {
    fn push(&mut self, p: &OutPoint<'_>) {
        use rmp::encode::{write_f64, write_map_len, write_sint, write_str};
        let out = &mut self.body.buf;
        self.name.clear();
        p.write_name(&mut self.name);
        let _ = write_map_len(out, 4);
        let _ = write_str(out, "name");
        let _ = write_str(out, &self.name);
        let _ = write_str(out, "tags");
        let mut tags = 0u32;
        p.for_each_tag(|_, _| tags += 1);
        let _ = write_map_len(out, tags);
        p.for_each_tag(|k, v| {
            let _ = write_str(out, k);
            let _ = write_str(out, v);
        });
        let _ = write_str(out, "value");
        let _ = write_f64(out, p.value);
        let _ = write_str(out, "timestamp");
        let _ = write_sint(out, p.timestamp);
        self.body.points += 1;
    }

    fn points(&self) -> usize {
        self.body.points
    }

    fn bytes(&self) -> usize {
        array_header_len(self.count()) + self.body.buf.len()
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let _ = rmp::encode::write_array_len(out, self.count());
        self.body.finish(out);
    }

    fn content_type(&self) -> &'static str {
        "application/msgpack"
    }

    fn split(body: &[u8]) -> Option<[Half; 2]> {
        let mut rd = body;
        let n = rmp::decode::read_array_len(&mut rd).ok()?;
        if n < 2 {
            return None;
        }
        let first = n / 2;
        let start = body.len() - rd.len();
        for _ in 0..first {
            skip_value(&mut rd)?;
        }
        let cut = body.len() - rd.len();
        for _ in first..n {
            skip_value(&mut rd)?;
        }
        if !rd.is_empty() {
            return None;
        }
        let half = |count: u32, points: &[u8]| {
            let mut out = Vec::with_capacity(array_header_len(count) + points.len());
            let _ = rmp::encode::write_array_len(&mut out, count);
            out.extend_from_slice(points);
            Half {
                body: out,
                points: count as usize,
            }
        };
        Some([
            half(first, &body[start..cut]),
            half(n - first, &body[cut..]),
        ])
    }
}

/// Moves `rd` past one msgpack value; `None` when it is cut short or
/// nested deeper than a point's map of tags.
fn skip_value(rd: &mut &[u8]) -> Option<()> {
    skip_nested(rd, 3)
}

fn skip_nested(rd: &mut &[u8], depth: u8) -> Option<()> {
    use rmp::Marker;
    let marker = rmp::decode::read_marker(rd).ok()?;
    let be = |rd: &mut &[u8], n: usize| -> Option<usize> {
        let (bytes, rest) = rd.split_at_checked(n)?;
        *rd = rest;
        Some(
            bytes
                .iter()
                .fold(0usize, |acc, &b| acc << 8 | usize::from(b)),
        )
    };
    let entries = |n: usize| -> Option<usize> { n.checked_mul(2) };
    let (items, bytes) = match marker {
        Marker::Null | Marker::True | Marker::False | Marker::FixPos(_) | Marker::FixNeg(_) => {
            (0, 0)
        }
        Marker::U8 | Marker::I8 => (0, 1),
        Marker::U16 | Marker::I16 => (0, 2),
        Marker::U32 | Marker::I32 | Marker::F32 => (0, 4),
        Marker::U64 | Marker::I64 | Marker::F64 => (0, 8),
        Marker::FixStr(n) => (0, usize::from(n)),
        Marker::Str8 | Marker::Bin8 => (0, be(rd, 1)?),
        Marker::Str16 | Marker::Bin16 => (0, be(rd, 2)?),
        Marker::Str32 | Marker::Bin32 => (0, be(rd, 4)?),
        Marker::FixArray(n) => (usize::from(n), 0),
        Marker::Array16 => (be(rd, 2)?, 0),
        Marker::Array32 => (be(rd, 4)?, 0),
        Marker::FixMap(n) => (entries(usize::from(n))?, 0),
        Marker::Map16 => (entries(be(rd, 2)?)?, 0),
        Marker::Map32 => (entries(be(rd, 4)?)?, 0),
        _ => return None,
    };
    *rd = rd.get(bytes..)?;
    if items > 0 {
        let depth = depth.checked_sub(1)?;
        for _ in 0..items {
            skip_nested(rd, depth)?;
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{encode, point};
    use rmpv::Value;
    use sonde_aggregate::Suffix;

    fn batch() -> Vec<OutPoint<'static>> {
        let mut bucket = point("h", &[("dc", "x")], 3.0, 1763800200);
        bucket.suffix = Suffix::Bucket;
        bucket.le = Some("+Inf");
        bucket.monotonic = true;
        vec![bucket, point("p", &[], -0.5, 5)]
    }

    #[test]
    fn a_two_point_batch_matches_golden_bytes() {
        let body = encode(&mut Msgpack::new(), &batch());
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x92, // array of 2
            0x84, // map of 4
              0xa4, b'n', b'a', b'm', b'e', 0xa8, b'h', b'.', b'b', b'u', b'c', b'k', b'e', b't',
              0xa4, b't', b'a', b'g', b's', 0x82,
                0xa2, b'd', b'c', 0xa1, b'x',
                0xa2, b'l', b'e', 0xa4, b'+', b'I', b'n', b'f',
              0xa5, b'v', b'a', b'l', b'u', b'e', 0xcb, 0x40, 0x08, 0, 0, 0, 0, 0, 0,
              // 1763800200 = 0x6921_7488, uint 32
              0xa9, b't', b'i', b'm', b'e', b's', b't', b'a', b'm', b'p', 0xce, 0x69, 0x21, 0x74, 0x88,
            0x84,
              0xa4, b'n', b'a', b'm', b'e', 0xa1, b'p',
              0xa4, b't', b'a', b'g', b's', 0x80,
              0xa5, b'v', b'a', b'l', b'u', b'e', 0xcb, 0xbf, 0xe0, 0, 0, 0, 0, 0, 0,
              0xa9, b't', b'i', b'm', b'e', b's', b't', b'a', b'm', b'p', 0x05,
        ];
        assert_eq!(body, want);
    }

    #[test]
    fn the_body_decodes_to_the_json_lines_fields() {
        let body = encode(&mut Msgpack::new(), &batch());
        let v = rmpv::decode::read_value(&mut &body[..]).unwrap();
        let s = |s: &str| Value::from(s);
        assert_eq!(
            v,
            Value::Array(vec![
                Value::Map(vec![
                    (s("name"), s("h.bucket")),
                    (
                        s("tags"),
                        Value::Map(vec![(s("dc"), s("x")), (s("le"), s("+Inf"))])
                    ),
                    (s("value"), Value::F64(3.0)),
                    (s("timestamp"), Value::from(1763800200)),
                ]),
                Value::Map(vec![
                    (s("name"), s("p")),
                    (s("tags"), Value::Map(vec![])),
                    (s("value"), Value::F64(-0.5)),
                    (s("timestamp"), Value::from(5)),
                ]),
            ])
        );
    }

    #[test]
    fn a_split_body_is_two_arrays_of_the_points_halves() {
        crate::testing::split_matches_encoding_the_halves(Msgpack::new);
        assert_eq!(Msgpack::split(&[0x92, 0xc1]), None, "not a point");
        assert_eq!(Msgpack::split(&[0x92, 0x01]), None, "cut short");
    }

    #[test]
    fn the_array_header_grows_with_the_batch_and_empty_batches_are_empty_arrays() {
        let mut enc = Msgpack::new();
        assert_eq!(encode(&mut enc, &[]), [0x90]);
        let many: Vec<_> = (0..16).map(|i| point("m", &[("", "")], 1.0, -i)).collect();
        let body = encode(&mut enc, &many);
        assert_eq!(&body[..3], [0xdc, 0x00, 0x10], "array 16 of 16");
        let v = rmpv::decode::read_value(&mut &body[..]).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 16);
        assert_eq!(v[15]["timestamp"], Value::from(-15));
        assert_eq!(
            v[0]["tags"],
            Value::Map(vec![(Value::from(""), Value::from(""))])
        );
    }
}
