//! The metricserver2 msgpack protocol.
//!
//! A datagram holds one message or a bunch of them:
//!
//! * a message is a 6-element array `["emit", TYPE, NAME, VALUE, TAGS, TS]`
//!   whose elements are msgpack str or bin (VALUE may also be an int or a
//!   float; TS an int or nil);
//! * a bunch is an array (of any array encoding) whose elements are
//!   messages.
//!
//! The two are told apart by the first element of the top-level array: a
//! str or bin starts a message, an array starts a bunch.
//!
//! # Errors and recovery
//!
//! A message that is well framed but wrong (unknown command or type, wrong
//! number of elements, element of the wrong msgpack type, bad number,
//! missing `ts_store` timestamp) is dropped with its reason and skipped
//! exactly, so the other messages of the same bunch still count. Data that
//! breaks the framing itself (the datagram ends inside a value, a top-level
//! value that is not an array, the reserved marker `0xc1`) is one drop,
//! after which the rest of the datagram is ignored: there is no way to find
//! where the next message starts. Points emitted before that stay emitted.
//!
//! If the top-level value ends before the datagram does, the following
//! bytes are parsed as another top-level value, so concatenated messages
//! work and trailing garbage is counted rather than silently ignored.
//!
//! # Design
//!
//! Markers and lengths are decoded with `rmp::decode` over a borrowed
//! [`Bytes`] reader; payloads are sub-slices of the datagram, never copied.
//! Skipping an unwanted value of any shape (`Cursor::skip`) is a loop
//! over a count of values still to skip, not a recursion, so no nesting
//! depth can overflow the stack; every step consumes at least one byte, so
//! the loop is bounded by the datagram length.

use crate::number::{parse_f64, parse_i64};
use crate::{DropReason, Kind, Point, PointSink, TagSyntax, Value};
use rmp::decode::{self, Bytes};
use rmp::Marker;

/// Parses one datagram and pushes every point and drop into `sink`, in
/// input order.
///
/// Never panics and never allocates. See the module doc for what is dropped
/// and how parsing recovers.
pub fn parse<'a>(datagram: &'a [u8], sink: &mut impl PointSink<'a>) {
    let mut cur = Cursor { rest: datagram };
    while !cur.rest.is_empty() {
        if let Err(lost) = top_level(&mut cur, sink) {
            sink.drop(lost.reason());
            return;
        }
    }
}

/// Framing is lost: the rest of the datagram cannot be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lost {
    /// The datagram ends inside a value.
    Truncated,
    /// A value that cannot be a message and whose end cannot be trusted.
    Malformed,
}

impl Lost {
    fn reason(self) -> DropReason {
        match self {
            Lost::Truncated => DropReason::Truncated,
            Lost::Malformed => DropReason::Malformed,
        }
    }
}

fn top_level<'a>(cur: &mut Cursor<'a>, sink: &mut impl PointSink<'a>) -> Result<(), Lost> {
    // Anything but an array here is garbage (a stray byte, a client that
    // speaks another protocol): stop rather than count each byte.
    if !cur.peek().is_some_and(is_array) {
        return Err(Lost::Malformed);
    }
    let len = cur.array_len()?;
    if len == 0 {
        sink.drop(DropReason::Malformed);
        return Ok(());
    }
    match cur.peek() {
        None => Err(Lost::Truncated),
        Some(m) if is_text(m) => message_body(cur, len, sink),
        Some(m) if is_array(m) => {
            for _ in 0..len {
                bunch_element(cur, sink)?;
            }
            Ok(())
        }
        Some(_) => {
            cur.skip(u64::from(len))?;
            sink.drop(DropReason::Malformed);
            Ok(())
        }
    }
}

fn bunch_element<'a>(cur: &mut Cursor<'a>, sink: &mut impl PointSink<'a>) -> Result<(), Lost> {
    match cur.peek() {
        None => Err(Lost::Truncated),
        // A fixarray header, read by hand like `Cursor::short_str`.
        Some(Marker::FixArray(len)) => {
            cur.rest = &cur.rest[1..];
            message_body(cur, u32::from(len), sink)
        }
        Some(m) if is_array(m) => {
            let len = cur.array_len()?;
            message_body(cur, len, sink)
        }
        Some(_) => {
            cur.skip(1)?;
            sink.drop(DropReason::Malformed);
            Ok(())
        }
    }
}

/// Reads the `len` elements of a message whose array header is consumed.
fn message_body<'a>(
    cur: &mut Cursor<'a>,
    len: u32,
    sink: &mut impl PointSink<'a>,
) -> Result<(), Lost> {
    if len != 6 {
        // Skip before reporting: if the array is cut short, the one drop
        // for it is Truncated, not both.
        cur.skip(u64::from(len))?;
        sink.drop(DropReason::WrongArity);
        return Ok(());
    }
    // The usual message, six short strs, without the general `Field`s.
    let start = cur.rest;
    if let (Some(command), Some(kind), Some(name), Some(value), Some(tags), Some(ts)) = (
        cur.short_str(),
        cur.short_str(),
        cur.short_str(),
        cur.short_str(),
        cur.short_str(),
        cur.short_str(),
    ) {
        let fields = [command, kind, name, value, tags, ts].map(Field::Text);
        match to_point(fields) {
            Ok(point) => sink.point(&point),
            Err(reason) => sink.drop(reason),
        }
        return Ok(());
    }
    cur.rest = start;
    let fields = [
        cur.field()?,
        cur.field()?,
        cur.field()?,
        cur.field()?,
        cur.field()?,
        cur.field()?,
    ];
    match to_point(fields) {
        Ok(point) => sink.point(&point),
        Err(reason) => sink.drop(reason),
    }
    Ok(())
}

/// One message element, reduced to what a point can be made of.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Field<'a> {
    /// str or bin payload.
    Text(&'a [u8]),
    /// Any msgpack int; i128 holds both i64 and u64 without loss.
    Int(i128),
    /// float32 or float64.
    Float(f64),
    Nil,
    /// bool, map, array or ext: never valid in a message.
    Other,
}

/// Checks a complete, well-framed message. The checks run in element order
/// and the first failure is the reason reported.
#[inline(always)]
fn to_point(fields: [Field<'_>; 6]) -> Result<Point<'_>, DropReason> {
    let [Field::Text(command), Field::Text(kind), Field::Text(name), value, Field::Text(tags), ts] =
        fields
    else {
        return Err(DropReason::Malformed);
    };
    if matches!(value, Field::Nil | Field::Other) || matches!(ts, Field::Other) {
        return Err(DropReason::Malformed);
    }
    if command != b"emit" {
        return Err(DropReason::UnknownCommand);
    }
    let kind = kind_of(kind).ok_or(DropReason::UnknownType)?;
    if name.is_empty() {
        return Err(DropReason::EmptyName);
    }
    let value = match value {
        Field::Text(text) => parse_f64(text),
        // Every i128 that msgpack can carry converts to a finite f64.
        Field::Int(i) => Some(i as f64),
        Field::Float(f) => Some(f).filter(|f| f.is_finite()),
        Field::Nil | Field::Other => None,
    }
    .ok_or(DropReason::BadValue)?;
    // Only ts_store uses TS; SDKs send "" (or anything) for the others, so
    // it is not even looked at there.
    let timestamp = if kind == Kind::TsStore {
        let ts = match ts {
            Field::Text(text) => parse_i64(text),
            Field::Int(i) => i64::try_from(i).ok(),
            Field::Float(_) | Field::Nil | Field::Other => None,
        };
        Some(ts.ok_or(DropReason::BadTimestamp)?)
    } else {
        None
    };
    Ok(Point {
        kind,
        name,
        tags,
        tag_syntax: TagSyntax::Msgpack,
        value: Value::Number(value),
        sample_rate: 1.0,
        timestamp,
    })
}

fn kind_of(text: &[u8]) -> Option<Kind> {
    Some(match text {
        b"counter" => Kind::Counter,
        b"rate_counter" => Kind::RateCounter,
        b"meter" => Kind::Meter,
        b"timer" => Kind::Timer,
        b"store" => Kind::Store,
        b"ts_store" => Kind::TsStore,
        b"histogram" => Kind::Histogram,
        _ => return None,
    })
}

fn is_array(m: Marker) -> bool {
    matches!(m, Marker::FixArray(_) | Marker::Array16 | Marker::Array32)
}

fn is_text(m: Marker) -> bool {
    matches!(
        m,
        Marker::FixStr(_)
            | Marker::Str8
            | Marker::Str16
            | Marker::Str32
            | Marker::Bin8
            | Marker::Bin16
            | Marker::Bin32
    )
}

/// The unread part of the datagram.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<Marker> {
        self.rest.first().map(|&b| Marker::from_u8(b))
    }

    /// Runs an `rmp::decode` reader on the rest and advances past what it
    /// consumed. Callers dispatch on [`Cursor::peek`] first, so a type
    /// mismatch cannot happen; any error means the data ran out.
    fn decode<T, E>(
        &mut self,
        read: impl FnOnce(&mut Bytes<'a>) -> Result<T, E>,
    ) -> Result<T, Lost> {
        let mut rd = Bytes::new(self.rest);
        let value = read(&mut rd).map_err(|_| Lost::Truncated)?;
        self.rest = rd.remaining_slice();
        Ok(value)
    }

    fn take(&mut self, len: u32) -> Result<&'a [u8], Lost> {
        let len = usize::try_from(len).map_err(|_| Lost::Truncated)?;
        if len > self.rest.len() {
            return Err(Lost::Truncated);
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    fn array_len(&mut self) -> Result<u32, Lost> {
        self.decode(decode::read_array_len::<Bytes<'a>>)
    }

    /// A fixstr or str8 element, read by hand; `None`, with nothing
    /// consumed, for any other marker or a str cut short.
    ///
    /// # Design
    ///
    /// Nearly every element an SDK sends is a str under 256 bytes. Through
    /// `rmp`'s marker dispatch and reader, and the general [`Field`], the
    /// six elements of a message were a large share of a point's cost
    /// (`scripts/callgrind-hot-path.sh msgpack:10000`, "msgpack elements
    /// read by hand" in `docs/benchmarks/LOG.md`). Everything else goes
    /// through [`Cursor::field_any`]; the tests compare the two.
    #[inline(always)]
    fn short_str(&mut self) -> Option<&'a [u8]> {
        let (len, body) = match *self.rest {
            [b, ref rest @ ..] if b & 0xe0 == 0xa0 => (usize::from(b & 0x1f), rest),
            [0xd9, len, ref rest @ ..] => (usize::from(len), rest),
            _ => return None,
        };
        let text = body.get(..len)?;
        self.rest = &body[len..];
        Some(text)
    }

    /// Reads one message element; a value of a type no element may have is
    /// skipped whole and returned as [`Field::Other`].
    #[inline(always)]
    fn field(&mut self) -> Result<Field<'a>, Lost> {
        match self.short_str() {
            Some(text) => Ok(Field::Text(text)),
            None => self.field_any(),
        }
    }

    /// [`Cursor::field`] for any marker, through `rmp`.
    fn field_any(&mut self) -> Result<Field<'a>, Lost> {
        let Some(marker) = self.peek() else {
            return Err(Lost::Truncated);
        };
        Ok(match marker {
            Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => {
                let len = self.decode(decode::read_str_len::<Bytes<'a>>)?;
                Field::Text(self.take(len)?)
            }
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                let len = self.decode(decode::read_bin_len::<Bytes<'a>>)?;
                Field::Text(self.take(len)?)
            }
            Marker::FixPos(_)
            | Marker::FixNeg(_)
            | Marker::U8
            | Marker::U16
            | Marker::U32
            | Marker::U64
            | Marker::I8
            | Marker::I16
            | Marker::I32
            | Marker::I64 => Field::Int(self.decode(decode::read_int::<i128, Bytes<'a>>)?),
            Marker::F32 => Field::Float(f64::from(self.decode(decode::read_f32::<Bytes<'a>>)?)),
            Marker::F64 => Field::Float(self.decode(decode::read_f64::<Bytes<'a>>)?),
            Marker::Null => {
                self.decode(decode::read_nil::<Bytes<'a>>)?;
                Field::Nil
            }
            _ => {
                self.skip(1)?;
                Field::Other
            }
        })
    }

    /// Skips `count` complete values of any type, however nested.
    ///
    /// # Errors
    ///
    /// [`Lost::Truncated`] if the data ends first, [`Lost::Malformed`] on the
    /// reserved marker `0xc1`, whose length nobody knows.
    fn skip(&mut self, mut count: u64) -> Result<(), Lost> {
        // Each turn consumes at least the marker byte, so this ends within
        // `rest.len() + 1` turns whatever `count` the headers claim.
        while count > 0 {
            count -= 1;
            let Some(marker) = self.peek() else {
                return Err(Lost::Truncated);
            };
            let payload = match marker {
                Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => {
                    self.decode(decode::read_str_len::<Bytes<'a>>)?
                }
                Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                    self.decode(decode::read_bin_len::<Bytes<'a>>)?
                }
                Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => {
                    let len = self.array_len()?;
                    count = count.saturating_add(u64::from(len));
                    0
                }
                Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => {
                    let len = self.decode(decode::read_map_len::<Bytes<'a>>)?;
                    count = count.saturating_add(2 * u64::from(len));
                    0
                }
                Marker::FixExt1
                | Marker::FixExt2
                | Marker::FixExt4
                | Marker::FixExt8
                | Marker::FixExt16
                | Marker::Ext8
                | Marker::Ext16
                | Marker::Ext32 => self.decode(decode::read_ext_meta::<Bytes<'a>>)?.size,
                Marker::Reserved => return Err(Lost::Malformed),
                // Scalars: the marker plus a fixed-size payload.
                Marker::FixPos(_)
                | Marker::FixNeg(_)
                | Marker::Null
                | Marker::True
                | Marker::False => 1,
                Marker::U8 | Marker::I8 => 2,
                Marker::U16 | Marker::I16 => 3,
                Marker::U32 | Marker::I32 | Marker::F32 => 5,
                Marker::U64 | Marker::I64 | Marker::F64 => 9,
            };
            self.take(payload)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rmp::encode;

    /// What a sink saw, owned, in order.
    #[derive(Debug, Clone, PartialEq)]
    enum Seen {
        Point {
            kind: Kind,
            name: Vec<u8>,
            tags: Vec<u8>,
            value: f64,
            timestamp: Option<i64>,
        },
        Drop(DropReason),
    }

    #[derive(Default)]
    struct Collect(Vec<Seen>);

    impl PointSink<'_> for Collect {
        fn point(&mut self, p: &Point<'_>) {
            // Every msgpack point has these; checked here once for all tests.
            assert_eq!(p.tag_syntax, TagSyntax::Msgpack);
            assert_eq!(p.sample_rate, 1.0);
            let Value::Number(value) = p.value else {
                panic!("msgpack produced {:?}", p.value);
            };
            assert!(value.is_finite());
            assert!(!p.name.is_empty());
            self.0.push(Seen::Point {
                kind: p.kind,
                name: p.name.to_vec(),
                tags: p.tags.to_vec(),
                value,
                timestamp: p.timestamp,
            });
        }
        fn drop(&mut self, reason: DropReason) {
            self.0.push(Seen::Drop(reason));
        }
    }

    fn run(bytes: &[u8]) -> Vec<Seen> {
        let mut sink = Collect::default();
        parse(bytes, &mut sink);
        sink.0
    }

    fn point(kind: Kind, name: &str, tags: &str, value: f64, timestamp: Option<i64>) -> Seen {
        Seen::Point {
            kind,
            name: name.into(),
            tags: tags.into(),
            value,
            timestamp,
        }
    }

    fn drop(reason: DropReason) -> Seen {
        Seen::Drop(reason)
    }

    /// One element of a hand-built message.
    #[derive(Clone, Debug)]
    enum El<'a> {
        Str(&'a [u8]),
        Bin(&'a [u8]),
        Int(i64),
        UInt(u64),
        F32(f32),
        F64(f64),
        Nil,
        /// Raw bytes written as they are (a whole value, or garbage).
        Raw(Vec<u8>),
    }

    fn write_el(buf: &mut Vec<u8>, el: &El<'_>) {
        match el {
            El::Str(s) => {
                encode::write_str_len(buf, s.len() as u32).unwrap();
                buf.extend_from_slice(s);
            }
            El::Bin(s) => encode::write_bin(buf, s).unwrap(),
            El::Int(i) => {
                encode::write_sint(buf, *i).unwrap();
            }
            El::UInt(u) => {
                encode::write_uint(buf, *u).unwrap();
            }
            El::F32(f) => encode::write_f32(buf, *f).unwrap(),
            El::F64(f) => encode::write_f64(buf, *f).unwrap(),
            El::Nil => encode::write_nil(buf).unwrap(),
            El::Raw(raw) => buf.extend_from_slice(raw),
        }
    }

    /// A message of any arity, smallest array header.
    fn msg_of(els: &[El<'_>]) -> Vec<u8> {
        let mut buf = Vec::new();
        encode::write_array_len(&mut buf, els.len() as u32).unwrap();
        for el in els {
            write_el(&mut buf, el);
        }
        buf
    }

    /// The usual all-str message.
    fn msg(fields: [&str; 6]) -> Vec<u8> {
        msg_of(&fields.map(|f| El::Str(f.as_bytes())))
    }

    #[derive(Clone, Copy, Debug)]
    enum Header {
        Fix,
        A16,
        A32,
    }

    fn bunch_with(header: Header, msgs: &[Vec<u8>]) -> Vec<u8> {
        let mut buf = Vec::new();
        let n = msgs.len() as u32;
        match header {
            Header::Fix => buf.push(0x90 | u8::try_from(n).unwrap()),
            Header::A16 => {
                buf.push(0xdc);
                buf.extend_from_slice(&u16::try_from(n).unwrap().to_be_bytes());
            }
            Header::A32 => {
                buf.push(0xdd);
                buf.extend_from_slice(&n.to_be_bytes());
            }
        }
        for m in msgs {
            buf.extend_from_slice(m);
        }
        buf
    }

    fn bunch(msgs: &[Vec<u8>]) -> Vec<u8> {
        bunch_with(Header::A16, msgs)
    }

    #[test]
    fn single_message_becomes_one_point() {
        let bytes = msg([
            "emit",
            "timer",
            "web.api.latency",
            "12.5",
            "host=a|dc=x",
            "",
        ]);
        assert_eq!(
            run(&bytes),
            vec![point(
                Kind::Timer,
                "web.api.latency",
                "host=a|dc=x",
                12.5,
                None
            )]
        );
    }

    #[test]
    fn every_type_maps_to_its_kind() {
        for (text, kind) in [
            ("counter", Kind::Counter),
            ("rate_counter", Kind::RateCounter),
            ("meter", Kind::Meter),
            ("timer", Kind::Timer),
            ("store", Kind::Store),
            ("ts_store", Kind::TsStore),
            ("histogram", Kind::Histogram),
        ] {
            let ts = (kind == Kind::TsStore).then_some(1_763_800_200);
            let bytes = msg(["emit", text, "m", "-3e2", "", "1763800200"]);
            assert_eq!(
                run(&bytes),
                vec![point(kind, "m", "", -300.0, ts)],
                "{text}"
            );
        }
    }

    #[test]
    fn fixarray_array16_and_array32_bunches_all_parse() {
        let msgs = [
            msg(["emit", "counter", "a", "1", "", ""]),
            msg(["emit", "store", "b", "2", "k=v", ""]),
        ];
        let want = vec![
            point(Kind::Counter, "a", "", 1.0, None),
            point(Kind::Store, "b", "k=v", 2.0, None),
        ];
        for header in [Header::Fix, Header::A16, Header::A32] {
            assert_eq!(run(&bunch_with(header, &msgs)), want, "{header:?}");
        }
    }

    #[test]
    fn bunch_of_twenty_messages_keeps_their_order() {
        let names: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
        let msgs: Vec<Vec<u8>> = names
            .iter()
            .map(|n| msg(["emit", "counter", n, "1", "", ""]))
            .collect();
        let want: Vec<Seen> = names
            .iter()
            .map(|n| point(Kind::Counter, n, "", 1.0, None))
            .collect();
        assert_eq!(run(&bunch(&msgs)), want);
    }

    #[test]
    fn every_str_and_bin_encoding_is_accepted_for_every_element() {
        let long = "n".repeat(40);
        let longer = "n".repeat(300);
        let huge = "n".repeat(70_000);
        for name in [&"n".repeat(5), &long, &longer, &huge] {
            for as_bin in [false, true] {
                let el = |s: &'static str| {
                    if as_bin {
                        El::Bin(s.as_bytes())
                    } else {
                        El::Str(s.as_bytes())
                    }
                };
                let name_el = if as_bin {
                    El::Bin(name.as_bytes())
                } else {
                    El::Str(name.as_bytes())
                };
                let bytes = msg_of(&[
                    el("emit"),
                    el("counter"),
                    name_el,
                    el("2"),
                    el("a=b"),
                    el(""),
                ]);
                assert_eq!(
                    run(&bytes),
                    vec![point(Kind::Counter, name, "a=b", 2.0, None)]
                );
            }
        }
    }

    #[test]
    fn str32_and_bin32_headers_are_accepted() {
        let mut bytes = vec![0x96];
        bytes.extend_from_slice(&[0xdb, 0, 0, 0, 4]);
        bytes.extend_from_slice(b"emit");
        bytes.extend_from_slice(&[0xc6, 0, 0, 0, 7]);
        bytes.extend_from_slice(b"counter");
        bytes.extend_from_slice(&[0xa1, b'x', 0xa1, b'1', 0xa0, 0xa0]);
        assert_eq!(run(&bytes), vec![point(Kind::Counter, "x", "", 1.0, None)]);
    }

    #[test]
    fn value_may_be_any_msgpack_int_or_float() {
        let cases = [
            (El::UInt(7), 7.0),                    // positive fixint
            (El::Int(-3), -3.0),                   // negative fixint
            (El::UInt(200), 200.0),                // uint8
            (El::UInt(60_000), 60_000.0),          // uint16
            (El::UInt(4_000_000_000), 4e9),        // uint32
            (El::UInt(u64::MAX), u64::MAX as f64), // uint64
            (El::Int(-100), -100.0),               // int8
            (El::Int(-30_000), -30_000.0),         // int16
            (El::Int(-2_000_000_000), -2e9),       // int32
            (El::Int(i64::MIN), i64::MIN as f64),  // int64
            (El::F32(0.25), 0.25),
            (El::F64(-1.5e300), -1.5e300),
        ];
        for (value, want) in cases {
            let bytes = msg_of(&[
                El::Str(b"emit"),
                El::Str(b"store"),
                El::Str(b"m"),
                value.clone(),
                El::Str(b""),
                El::Str(b""),
            ]);
            assert_eq!(
                run(&bytes),
                vec![point(Kind::Store, "m", "", want, None)],
                "{value:?}"
            );
        }
    }

    #[test]
    fn value_text_in_every_str_and_bin_header_is_parsed() {
        // Non-minimal headers are valid msgpack, so each one is spelled out.
        let headers: [&[u8]; 7] = [
            &[0xa4],             // fixstr
            &[0xd9, 4],          // str8
            &[0xda, 0, 4],       // str16
            &[0xdb, 0, 0, 0, 4], // str32
            &[0xc4, 4],          // bin8
            &[0xc5, 0, 4],       // bin16
            &[0xc6, 0, 0, 0, 4], // bin32
        ];
        for header in headers {
            let mut value = header.to_vec();
            value.extend_from_slice(b"12.5");
            let bytes = msg_of(&[
                El::Str(b"emit"),
                El::Str(b"timer"),
                El::Str(b"m"),
                El::Raw(value),
                El::Str(b""),
                El::Str(b""),
            ]);
            assert_eq!(
                run(&bytes),
                vec![point(Kind::Timer, "m", "", 12.5, None)],
                "{header:x?}"
            );
        }
    }

    #[test]
    fn explicitly_sized_ints_are_accepted_even_when_not_minimal() {
        // uint8 1, uint16 1, int8 1, int64 1: not what rmp writes, still valid.
        for raw in [
            vec![0xcc, 1],
            vec![0xcd, 0, 1],
            vec![0xd0, 1],
            vec![0xd3, 0, 0, 0, 0, 0, 0, 0, 1],
            vec![0xcf, 0, 0, 0, 0, 0, 0, 0, 1],
        ] {
            let bytes = msg_of(&[
                El::Str(b"emit"),
                El::Str(b"counter"),
                El::Str(b"m"),
                El::Raw(raw.clone()),
                El::Str(b""),
                El::Str(b""),
            ]);
            assert_eq!(
                run(&bytes),
                vec![point(Kind::Counter, "m", "", 1.0, None)],
                "{raw:x?}"
            );
        }
    }

    #[test]
    fn non_finite_or_garbage_value_is_bad_value() {
        for value in [
            El::Str(b"abc"),
            El::Str(b""),
            El::Str(b"nan"),
            El::Str(b"1e400"),
            El::Str(b"1 "),
            El::F64(f64::NAN),
            El::F64(f64::INFINITY),
            El::F32(f32::NEG_INFINITY),
        ] {
            let bytes = msg_of(&[
                El::Str(b"emit"),
                El::Str(b"counter"),
                El::Str(b"m"),
                value.clone(),
                El::Str(b""),
                El::Str(b""),
            ]);
            assert_eq!(run(&bytes), vec![drop(DropReason::BadValue)], "{value:?}");
        }
    }

    #[test]
    fn ts_store_reads_its_timestamp_from_text_or_int() {
        for ts in [
            El::Str(b"1763800200"),
            El::Bin(b"1763800200"),
            El::UInt(1_763_800_200),
        ] {
            let bytes = msg_of(&[
                El::Str(b"emit"),
                El::Str(b"ts_store"),
                El::Str(b"m"),
                El::Str(b"4"),
                El::Str(b""),
                ts.clone(),
            ]);
            assert_eq!(
                run(&bytes),
                vec![point(Kind::TsStore, "m", "", 4.0, Some(1_763_800_200))],
                "{ts:?}"
            );
        }
    }

    #[test]
    fn ts_store_without_a_usable_timestamp_is_bad_timestamp() {
        for ts in [
            El::Str(b""),
            El::Nil,
            El::Str(b"soon"),
            El::Str(b"1.5"),
            El::F64(1.0),
            El::UInt(u64::MAX),
            El::Str(b"99999999999999999999"),
        ] {
            let bytes = msg_of(&[
                El::Str(b"emit"),
                El::Str(b"ts_store"),
                El::Str(b"m"),
                El::Str(b"4"),
                El::Str(b""),
                ts.clone(),
            ]);
            assert_eq!(run(&bytes), vec![drop(DropReason::BadTimestamp)], "{ts:?}");
        }
    }

    #[test]
    fn other_types_ignore_whatever_scalar_ts_holds() {
        for ts in [
            El::Str(b"garbage"),
            El::Nil,
            El::Int(-5),
            El::F64(2.5),
            El::Str(b"17"),
        ] {
            let bytes = msg_of(&[
                El::Str(b"emit"),
                El::Str(b"store"),
                El::Str(b"m"),
                El::Str(b"4"),
                El::Str(b""),
                ts.clone(),
            ]);
            assert_eq!(
                run(&bytes),
                vec![point(Kind::Store, "m", "", 4.0, None)],
                "{ts:?}"
            );
        }
    }

    #[test]
    fn unknown_command_is_dropped() {
        assert_eq!(
            run(&msg(["emitx", "counter", "m", "1", "", ""])),
            vec![drop(DropReason::UnknownCommand)]
        );
        assert_eq!(
            run(&msg(["EMIT", "counter", "m", "1", "", ""])),
            vec![drop(DropReason::UnknownCommand)]
        );
    }

    #[test]
    fn unknown_type_is_dropped() {
        for ty in ["gauge", "Counter", "", "c"] {
            assert_eq!(
                run(&msg(["emit", ty, "m", "1", "", ""])),
                vec![drop(DropReason::UnknownType)],
                "{ty}"
            );
        }
    }

    #[test]
    fn empty_name_is_dropped() {
        assert_eq!(
            run(&msg(["emit", "counter", "", "1", "", ""])),
            vec![drop(DropReason::EmptyName)]
        );
    }

    #[test]
    fn checks_report_the_first_failure_in_element_order() {
        assert_eq!(
            run(&msg(["nope", "nope", "", "x", "", ""])),
            vec![drop(DropReason::UnknownCommand)]
        );
        assert_eq!(
            run(&msg(["emit", "nope", "", "x", "", ""])),
            vec![drop(DropReason::UnknownType)]
        );
        assert_eq!(
            run(&msg(["emit", "ts_store", "", "x", "", ""])),
            vec![drop(DropReason::EmptyName)]
        );
        assert_eq!(
            run(&msg(["emit", "ts_store", "m", "x", "", ""])),
            vec![drop(DropReason::BadValue)]
        );
    }

    #[test]
    fn tags_are_passed_on_unvalidated() {
        assert_eq!(
            run(&msg(["emit", "counter", "m", "1", "no equals sign", ""])),
            vec![point(Kind::Counter, "m", "no equals sign", 1.0, None)]
        );
    }

    #[test]
    fn bunch_keeps_good_messages_after_a_bad_one() {
        let bytes = bunch(&[
            msg(["emit", "counter", "a", "1", "", ""]),
            msg_of(&[El::Str(b"emit"), El::Str(b"counter"), El::Str(b"b")]),
            msg(["emit", "bogus", "c", "1", "", ""]),
            msg(["emit", "counter", "d", "x", "", ""]),
            msg(["emit", "counter", "e", "5", "", ""]),
        ]);
        assert_eq!(
            run(&bytes),
            vec![
                point(Kind::Counter, "a", "", 1.0, None),
                drop(DropReason::WrongArity),
                drop(DropReason::UnknownType),
                drop(DropReason::BadValue),
                point(Kind::Counter, "e", "", 5.0, None),
            ]
        );
    }

    #[test]
    fn wrong_arity_skips_nested_values_exactly() {
        // Seven elements, one of them a nested map with arrays inside.
        let nested = {
            let mut b = Vec::new();
            encode::write_map_len(&mut b, 2).unwrap();
            encode::write_str(&mut b, "k").unwrap();
            encode::write_array_len(&mut b, 2).unwrap();
            encode::write_array_len(&mut b, 0).unwrap();
            encode::write_str(&mut b, "x").unwrap();
            encode::write_uint(&mut b, 1000).unwrap();
            encode::write_ext_meta(&mut b, 3, 5).unwrap();
            b.extend_from_slice(&[1, 2, 3]);
            b
        };
        let seven = msg_of(&[
            El::Str(b"emit"),
            El::Str(b"counter"),
            El::Raw(nested),
            El::Str(b"1"),
            El::Str(b""),
            El::Str(b""),
            El::Raw(vec![0xd4, 1, 9]), // fixext1
        ]);
        let bytes = bunch(&[seven, msg(["emit", "counter", "ok", "1", "", ""])]);
        assert_eq!(
            run(&bytes),
            vec![
                drop(DropReason::WrongArity),
                point(Kind::Counter, "ok", "", 1.0, None)
            ]
        );
    }

    #[test]
    fn top_level_message_of_wrong_arity_is_dropped() {
        let bytes = msg_of(&[
            El::Str(b"emit"),
            El::Str(b"counter"),
            El::Str(b"m"),
            El::Str(b"1"),
            El::Str(b""),
        ]);
        assert_eq!(run(&bytes), vec![drop(DropReason::WrongArity)]);
    }

    #[test]
    fn element_of_the_wrong_msgpack_type_is_malformed_and_skipped() {
        let wrong = [
            vec![0xc3],                   // true
            vec![0x81, 0xa1, b'k', 0x01], // {"k": 1}
            vec![0x92, 0x01, 0x02],       // [1, 2]
            vec![0xd5, 1, 0, 0],          // fixext2
            vec![0xc7, 2, 1, 0, 0],       // ext8
        ];
        for raw in wrong {
            for position in 0..6 {
                let mut els = [
                    El::Str(b"emit"),
                    El::Str(b"counter"),
                    El::Str(b"m"),
                    El::Str(b"1"),
                    El::Str(b""),
                    El::Str(b""),
                ];
                els[position] = El::Raw(raw.clone());
                let bytes = bunch(&[msg_of(&els), msg(["emit", "counter", "ok", "1", "", ""])]);
                let want = vec![
                    drop(DropReason::Malformed),
                    point(Kind::Counter, "ok", "", 1.0, None),
                ];
                assert_eq!(run(&bytes), want, "{raw:x?} at {position}");
            }
        }
    }

    #[test]
    fn nil_or_non_text_in_a_text_position_is_malformed() {
        for position in [0, 1, 2, 3, 4] {
            let mut els = [
                El::Str(b"emit"),
                El::Str(b"counter"),
                El::Str(b"m"),
                El::Str(b"1"),
                El::Str(b""),
                El::Str(b""),
            ];
            els[position] = El::Nil;
            assert_eq!(
                run(&msg_of(&els)),
                vec![drop(DropReason::Malformed)],
                "nil at {position}"
            );
            if position != 3 {
                els[position] = El::Int(1);
                assert_eq!(
                    run(&msg_of(&els)),
                    vec![drop(DropReason::Malformed)],
                    "int at {position}"
                );
            }
        }
    }

    #[test]
    fn bunch_element_that_is_not_an_array_is_malformed_and_skipped() {
        let mut str_el = Vec::new();
        encode::write_str(&mut str_el, "emit").unwrap();
        let bytes = bunch(&[
            msg(["emit", "counter", "a", "1", "", ""]),
            str_el,
            vec![0x81, 0x01, 0x02],
            msg(["emit", "counter", "b", "1", "", ""]),
        ]);
        assert_eq!(
            run(&bytes),
            vec![
                point(Kind::Counter, "a", "", 1.0, None),
                drop(DropReason::Malformed),
                drop(DropReason::Malformed),
                point(Kind::Counter, "b", "", 1.0, None),
            ]
        );
    }

    #[test]
    fn empty_top_level_array_is_malformed() {
        assert_eq!(run(&[0x90]), vec![drop(DropReason::Malformed)]);
        assert_eq!(run(&[0xdc, 0, 0]), vec![drop(DropReason::Malformed)]);
    }

    #[test]
    fn empty_message_inside_a_bunch_is_wrong_arity() {
        let bytes = bunch(&[vec![0x90], msg(["emit", "counter", "a", "1", "", ""])]);
        assert_eq!(
            run(&bytes),
            vec![
                drop(DropReason::WrongArity),
                point(Kind::Counter, "a", "", 1.0, None)
            ]
        );
    }

    #[test]
    fn top_level_array_starting_with_a_scalar_is_skipped_as_malformed() {
        let mut bytes = vec![0x93, 0x01, 0xa1, b'x', 0x80];
        bytes.extend(msg(["emit", "counter", "a", "1", "", ""]));
        assert_eq!(
            run(&bytes),
            vec![
                drop(DropReason::Malformed),
                point(Kind::Counter, "a", "", 1.0, None)
            ]
        );
    }

    #[test]
    fn top_level_non_array_is_one_malformed_drop_for_the_rest() {
        assert_eq!(run(b"hello world"), vec![drop(DropReason::Malformed)]);
        assert_eq!(run(&[0xc1]), vec![drop(DropReason::Malformed)]);
        assert_eq!(run(&[0x80]), vec![drop(DropReason::Malformed)]);
    }

    #[test]
    fn empty_datagram_yields_nothing() {
        assert_eq!(run(b""), vec![]);
    }

    #[test]
    fn concatenated_messages_all_parse() {
        let mut bytes = msg(["emit", "counter", "a", "1", "", ""]);
        bytes.extend(bunch(&[msg(["emit", "counter", "b", "2", "", ""])]));
        bytes.extend(msg(["emit", "counter", "c", "3", "", ""]));
        assert_eq!(
            run(&bytes),
            vec![
                point(Kind::Counter, "a", "", 1.0, None),
                point(Kind::Counter, "b", "", 2.0, None),
                point(Kind::Counter, "c", "", 3.0, None),
            ]
        );
    }

    #[test]
    fn trailing_garbage_is_counted_not_ignored() {
        let mut bytes = msg(["emit", "counter", "a", "1", "", ""]);
        bytes.extend_from_slice(b"\x00\xff junk");
        assert_eq!(
            run(&bytes),
            vec![
                point(Kind::Counter, "a", "", 1.0, None),
                drop(DropReason::Malformed)
            ]
        );
    }

    #[test]
    fn reserved_marker_inside_a_message_stops_the_datagram() {
        let mut els = [
            El::Str(b"emit"),
            El::Str(b"counter"),
            El::Str(b"m"),
            El::Str(b"1"),
            El::Str(b""),
            El::Str(b""),
        ];
        els[4] = El::Raw(vec![0xc1]);
        let bytes = bunch(&[
            msg(["emit", "counter", "a", "1", "", ""]),
            msg_of(&els),
            msg(["emit", "counter", "b", "1", "", ""]),
        ]);
        assert_eq!(
            run(&bytes),
            vec![
                point(Kind::Counter, "a", "", 1.0, None),
                drop(DropReason::Malformed)
            ]
        );
    }

    #[test]
    fn huge_claimed_lengths_are_truncated_not_trusted() {
        // array32 of 4 billion messages, str32 of 4 GiB, map32 of 4 billion pairs.
        assert_eq!(
            run(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x96]),
            vec![drop(DropReason::Truncated)]
        );
        assert_eq!(
            run(&[0x96, 0xdb, 0xff, 0xff, 0xff, 0xff, b'e']),
            vec![drop(DropReason::Truncated)]
        );
        assert_eq!(
            run(&[0x97, 0xa4, b'e', b'm', b'i', b't', 0xdf, 0xff, 0xff, 0xff, 0xff]),
            vec![drop(DropReason::Truncated)]
        );
    }

    #[test]
    fn deep_nesting_is_skipped_without_recursion() {
        // 100 000 nested arrays as the 7th element of a message: a recursive
        // skipper would overflow the stack here.
        let mut seven = msg(["emit", "counter", "m", "1", "", ""]);
        seven[0] = 0x97;
        seven.extend(std::iter::repeat_n(0x91, 100_000));
        seven.push(0xc0);
        let bytes = bunch(&[seven, msg(["emit", "counter", "ok", "1", "", ""])]);
        assert_eq!(
            run(&bytes),
            vec![
                drop(DropReason::WrongArity),
                point(Kind::Counter, "ok", "", 1.0, None)
            ]
        );
    }

    #[test]
    fn truncation_at_every_offset_keeps_the_messages_before_the_cut() {
        let msgs = [
            msg(["emit", "counter", "a", "1", "host=a", ""]),
            msg_of(&[
                El::Str(b"emit"),
                El::Str(b"store"),
                El::Str(b"b"),
                El::F64(2.5),
                El::Str(b""),
                El::Nil,
            ]),
            msg(["emit", "ts_store", "c", "3", "", "1763800200"]),
        ];
        let all = [
            point(Kind::Counter, "a", "host=a", 1.0, None),
            point(Kind::Store, "b", "", 2.5, None),
            point(Kind::TsStore, "c", "", 3.0, Some(1_763_800_200)),
        ];
        for header in [Header::Fix, Header::A16, Header::A32] {
            let bytes = bunch_with(header, &msgs);
            let header_len = bytes.len() - msgs.iter().map(Vec::len).sum::<usize>();
            let mut ends = Vec::new();
            let mut end = header_len;
            for m in &msgs {
                end += m.len();
                ends.push(end);
            }
            for cut in 1..bytes.len() {
                let complete = ends.iter().filter(|&&e| e <= cut).count();
                let mut want = all[..complete].to_vec();
                want.push(drop(DropReason::Truncated));
                assert_eq!(run(&bytes[..cut]), want, "{header:?} cut at {cut}");
            }
            assert_eq!(run(&bytes), all.to_vec());
        }
    }

    #[test]
    fn truncated_single_message_is_one_truncated_drop() {
        let bytes = msg(["emit", "counter", "a", "1", "", ""]);
        for cut in 1..bytes.len() {
            assert_eq!(
                run(&bytes[..cut]),
                vec![drop(DropReason::Truncated)],
                "cut at {cut}"
            );
        }
    }

    // ---- property tests ----

    #[derive(Clone, Debug)]
    enum ValueEnc {
        Text(f64, bool),
        Int(i64),
        UInt(u64),
        F32(f32),
        F64(f64),
    }

    #[derive(Clone, Debug)]
    struct Msg {
        kind: Kind,
        name: Vec<u8>,
        value: ValueEnc,
        tags: Vec<u8>,
        ts: i64,
        /// For types other than ts_store: what goes into TS.
        junk_ts: El<'static>,
        /// Per element: bin instead of str.
        bin: [bool; 6],
    }

    impl Msg {
        fn encode(&self, buf: &mut Vec<u8>) {
            let text = |buf: &mut Vec<u8>, bytes: &[u8], bin: bool| {
                let el = if bin { El::Bin(bytes) } else { El::Str(bytes) };
                write_el(buf, &el);
            };
            encode::write_array_len(buf, 6).unwrap();
            text(buf, b"emit", self.bin[0]);
            text(buf, self.kind.as_str().as_bytes(), self.bin[1]);
            text(buf, &self.name, self.bin[2]);
            match self.value {
                ValueEnc::Text(v, sci) => {
                    let s = if sci { format!("{v:e}") } else { v.to_string() };
                    text(buf, s.as_bytes(), self.bin[3]);
                }
                ValueEnc::Int(i) => write_el(buf, &El::Int(i)),
                ValueEnc::UInt(u) => write_el(buf, &El::UInt(u)),
                ValueEnc::F32(f) => write_el(buf, &El::F32(f)),
                ValueEnc::F64(f) => write_el(buf, &El::F64(f)),
            }
            text(buf, &self.tags, self.bin[4]);
            if self.kind == Kind::TsStore {
                if self.bin[5] {
                    write_el(buf, &El::Int(self.ts));
                } else {
                    text(buf, self.ts.to_string().as_bytes(), false);
                }
            } else {
                write_el(buf, &self.junk_ts);
            }
        }

        fn expected(&self) -> Seen {
            let value = match self.value {
                ValueEnc::Text(v, _) | ValueEnc::F64(v) => v,
                ValueEnc::Int(i) => i as f64,
                ValueEnc::UInt(u) => u as f64,
                ValueEnc::F32(f) => f64::from(f),
            };
            Seen::Point {
                kind: self.kind,
                name: self.name.clone(),
                tags: self.tags.clone(),
                value,
                timestamp: (self.kind == Kind::TsStore).then_some(self.ts),
            }
        }
    }

    fn finite_f64() -> impl Strategy<Value = f64> {
        any::<f64>().prop_filter("finite", |v| v.is_finite())
    }

    fn any_msg() -> impl Strategy<Value = Msg> {
        let kind = proptest::sample::select(Kind::ALL[..7].to_vec());
        let value = prop_oneof![
            (finite_f64(), any::<bool>()).prop_map(|(v, sci)| ValueEnc::Text(v, sci)),
            any::<i64>().prop_map(ValueEnc::Int),
            any::<u64>().prop_map(ValueEnc::UInt),
            any::<f32>()
                .prop_filter("finite", |v| v.is_finite())
                .prop_map(ValueEnc::F32),
            finite_f64().prop_map(ValueEnc::F64),
        ];
        let junk_ts = prop_oneof![
            Just(El::Str(b"")),
            Just(El::Str(b"garbage")),
            Just(El::Nil),
            any::<i64>().prop_map(El::Int),
        ];
        (
            kind,
            proptest::collection::vec(any::<u8>(), 1..300),
            value,
            proptest::collection::vec(any::<u8>(), 0..40),
            any::<i64>(),
            junk_ts,
            any::<[bool; 6]>(),
        )
            .prop_map(|(kind, name, value, tags, ts, junk_ts, bin)| Msg {
                kind,
                name,
                value,
                tags,
                ts,
                junk_ts,
                bin,
            })
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let seen = run(&bytes);
            // Whatever the input, at most one drop is a framing drop and it is last.
            let lost = seen.iter().position(|s| matches!(s, Seen::Drop(DropReason::Truncated)));
            if let Some(i) = lost {
                prop_assert_eq!(i, seen.len() - 1);
            }
        }

        #[test]
        fn the_hand_read_str_fast_path_agrees_with_rmp(
            bytes in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..80),
                // A str8 or fixstr header, then whatever.
                (prop_oneof![Just(0xd9u8), 0xa0u8..=0xbf], proptest::collection::vec(any::<u8>(), 0..300))
                    .prop_map(|(m, rest)| [vec![m], rest].concat()),
            ],
        ) {
            let (mut fast, mut any) = (Cursor { rest: &bytes }, Cursor { rest: &bytes });
            for _ in 0..3 {
                let before = fast.rest;
                if fast.short_str().is_none() {
                    prop_assert_eq!(fast.rest, before, "short_str consumed what it refused");
                }
                fast.rest = before;
                let (f, a) = (fast.field(), any.field_any());
                // Compared as printed: a float field may be a NaN, which
                // `==` never equals, however the two paths agree.
                prop_assert_eq!(format!("{f:?}"), format!("{a:?}"));
                // After an error framing is lost: where each stopped is moot.
                if f.is_err() {
                    break;
                }
                prop_assert_eq!(fast.rest, any.rest);
            }
        }

        #[test]
        fn never_panics_on_corrupted_messages(
            msgs in proptest::collection::vec(any_msg(), 1..4),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = Vec::new();
            encode::write_array_len(&mut bytes, msgs.len() as u32).unwrap();
            for m in &msgs {
                m.encode(&mut bytes);
            }
            for (at, byte) in flips {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            run(&bytes);
        }

        #[test]
        fn well_formed_messages_come_back_exactly(
            msgs in proptest::collection::vec(any_msg(), 1..20),
            header in prop_oneof![Just(None), Just(Some(Header::Fix)), Just(Some(Header::A16)), Just(Some(Header::A32))],
        ) {
            let encoded: Vec<Vec<u8>> = msgs.iter().map(|m| { let mut b = Vec::new(); m.encode(&mut b); b }).collect();
            let bytes = match header {
                // No header: the messages concatenated at top level.
                None => encoded.concat(),
                Some(Header::Fix) if msgs.len() > 15 => bunch_with(Header::A16, &encoded),
                Some(h) => bunch_with(h, &encoded),
            };
            let want: Vec<Seen> = msgs.iter().map(Msg::expected).collect();
            prop_assert_eq!(run(&bytes), want);
        }
    }
}
