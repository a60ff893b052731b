//! A protobuf reader that borrows from the request body.
//!
//! Decoding an OTLP metrics request into opentelemetry-proto's types makes
//! a `String` of every attribute key and value and a `Vec` of every
//! point's attributes: 490 ns a point of three attributes, 15x the StatsD
//! receiver's whole cost for the same point, most of it the allocator
//! (docs/BENCHMARKS.md, "OTLP in"). The metrics mapping reads the body's
//! fields in place instead: this module walks one message's fields,
//! handing out nested messages and strings as slices of the body, so a
//! point costs no allocation before it is written into its batch. The
//! varint and key decoding is prost's own ([`prost::encoding`]).

use prost::encoding::decode_varint;

/// Why a body is not a protobuf message of the expected shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// One field's value, as its wire type carries it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// A varint (integers, booleans, enums).
    Varint(u64),
    /// Eight bytes (fixed64, sfixed64, double).
    I64(u64),
    /// A length-delimited field (strings, bytes, messages, packed
    /// repeated fields).
    Len(&'a [u8]),
    /// Four bytes (fixed32, sfixed32, float).
    I32(u32),
}

impl<'a> Value<'a> {
    /// The bytes of a length-delimited field.
    pub fn bytes(self) -> Result<&'a [u8], Malformed> {
        match self {
            Value::Len(b) => Ok(b),
            _ => Err(Malformed("a message or string field has another wire type")),
        }
    }

    /// A string field's text.
    pub fn str(self) -> Result<&'a str, Malformed> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Malformed("a string is not UTF-8"))
    }

    /// A fixed64 field.
    pub fn fixed64(self) -> Result<u64, Malformed> {
        match self {
            Value::I64(v) => Ok(v),
            _ => Err(Malformed("a fixed64 or double field has another wire type")),
        }
    }

    /// A double field.
    pub fn double(self) -> Result<f64, Malformed> {
        self.fixed64().map(f64::from_bits)
    }

    /// A varint field.
    pub fn varint(self) -> Result<u64, Malformed> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(Malformed("an integer field has another wire type")),
        }
    }
}

/// The fields of one message, in the order they were written.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    buf: &'a [u8],
}

/// The fields of the message `buf`.
pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf }
}

/// A varint; the one-byte case (every field key of OTLP's messages, and
/// the length of every attribute and most points) inline, the rest by
/// prost's decoder. Hand-written because the field walk is most of the
/// mapping's cost (docs/BENCHMARKS.md, "OTLP in").
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Result<u64, Malformed> {
    if let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 {
            *buf = rest;
            return Ok(u64::from(b));
        }
    }
    decode_varint(buf).map_err(|_| Malformed("a bad varint"))
}

impl<'a> Fields<'a> {
    /// The next `N` bytes, a fixed64 or fixed32.
    #[inline(always)]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let (v, rest) = self
            .buf
            .split_first_chunk::<N>()
            .ok_or(Malformed("a message ends inside a fixed-size field"))?;
        self.buf = rest;
        Ok(*v)
    }

    #[inline(always)]
    fn field(&mut self) -> Result<(u32, Value<'a>), Malformed> {
        let key = varint(&mut self.buf)?;
        let tag = u32::try_from(key >> 3).map_err(|_| Malformed("a bad field key"))?;
        if tag == 0 {
            return Err(Malformed("a field numbered 0"));
        }
        let value = match key & 7 {
            0 => Value::Varint(varint(&mut self.buf)?),
            1 => Value::I64(u64::from_le_bytes(self.take()?)),
            2 => {
                let n = varint(&mut self.buf)?;
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                if n > self.buf.len() {
                    return Err(Malformed("a field is longer than its message"));
                }
                let (v, rest) = self.buf.split_at(n);
                self.buf = rest;
                Value::Len(v)
            }
            5 => Value::I32(u32::from_le_bytes(self.take()?)),
            // Groups (3, 4) were retired before OTLP existed; no OTLP
            // message has one. 6 and 7 are no wire type.
            _ => return Err(Malformed("a group or unknown wire type")),
        };
        Ok((tag, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Malformed>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let r = self.field();
        if r.is_err() {
            // One error ends the walk.
            self.buf = &[];
        }
        Some(r)
    }
}

/// The values of a repeated fixed64 or double field, packed (one
/// length-delimited run) or not (one field each): `f` gets each.
pub fn each_fixed64(v: Value<'_>, mut f: impl FnMut(u64)) -> Result<(), Malformed> {
    match v {
        Value::I64(x) => f(x),
        Value::Len(b) => {
            let (chunks, rest) = b.as_chunks::<8>();
            if !rest.is_empty() {
                return Err(Malformed(
                    "a packed fixed64 field is not a multiple of 8 bytes",
                ));
            }
            for c in chunks {
                f(u64::from_le_bytes(*c));
            }
        }
        _ => return Err(Malformed("a repeated fixed64 field has another wire type")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::HistogramDataPoint;
    use prost::Message;

    #[test]
    fn fields_come_out_as_written_and_bad_bytes_are_an_error() {
        let p = HistogramDataPoint {
            time_unix_nano: 7,
            count: 3,
            sum: Some(1.5),
            bucket_counts: vec![1, 2],
            explicit_bounds: vec![0.5],
            flags: 1,
            ..Default::default()
        }
        .encode_to_vec();
        let got: Vec<(u32, Value<'_>)> = fields(&p).collect::<Result<_, _>>().unwrap();
        assert_eq!(got[0], (3, Value::I64(7)));
        assert_eq!(got[1], (4, Value::I64(3)));
        assert_eq!(got[2].1.double(), Ok(1.5));
        let mut buckets = Vec::new();
        each_fixed64(got[3].1, |c| buckets.push(c)).unwrap();
        assert_eq!(buckets, [1, 2]);
        assert_eq!(got[5], (10, Value::Varint(1)));
        // Cut short: the last field is an error, never a panic.
        for cut in 1..p.len() {
            let r: Result<Vec<_>, _> = fields(&p[..cut]).collect();
            if let Ok(v) = r {
                assert!(v.len() < got.len(), "cut at {cut}");
            }
        }
        assert!(fields(&[0x0b]).next().unwrap().is_err(), "a group");
        assert!(
            fields(&[0x0a, 0x05, 1]).next().unwrap().is_err(),
            "too long"
        );
    }
}
