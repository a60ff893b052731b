//! Encodings of output points for sonde's sinks.
//!
//! Every encoder is a pure function from points to bytes appended to a
//! caller-owned buffer, so a sink reuses one buffer per batch and the
//! encoders can be tested against exact bytes.
//!
//! * [`json`]: one JSON object per point per line, the contract of
//!   ARCHITECTURE.md ("Output format for the file and console sinks").
//! * [`console`]: the same points for a person reading a terminal.
//! * [`prometheus`]: the Prometheus text exposition format, names
//!   sanitised to `[a-zA-Z0-9_:]`.
//! * [`compress`]: zstd, gzip, snappy and lz4 for an encoded batch.
//!
//! Request bodies for the sinks, each a [`BatchEncoder`]:
//!
//! | module | encoder | body | `Content-Type` |
//! |---|---|---|---|
//! | [`json`] | [`json::Lines`] | JSON lines (`http` and `tcp` sinks) | `application/x-ndjson` |
//! | [`msgpack`] | [`msgpack::Msgpack`] | one msgpack array of the JSON lines' maps (`http`, `format = "msgpack"`) | `application/msgpack` |
//! | [`remote_write`] | [`remote_write::RemoteWrite`] | Prometheus remote write 1.0 `WriteRequest` | `application/x-protobuf` |
//! | [`otlp`] | [`otlp::Otlp`] | OTLP/HTTP `ExportMetricsServiceRequest` | `application/x-protobuf` |
//! | [`influx`] | [`influx::LineProtocol`] | InfluxDB 1.x line protocol, seconds | `text/plain; charset=utf-8` |
//! | [`graphite`] | [`graphite::Plaintext`] | Graphite plaintext with tags | `text/plain` |
//!
//! The three line-per-point bodies (JSON lines, line protocol, Graphite)
//! are one encoder, [`TextLines`], over each module's [`LineFormat`].
//!
//! Every encoder can also cut a body it wrote into two valid halves
//! ([`BatchEncoder::split`]), for a backend that refuses a request as too
//! large (HTTP 413).
//!
//! Names, tag keys and values may be any UTF-8: each module says how it
//! sanitises or escapes what its backend cannot take, and none panics on
//! any input.
//!
//! ```
//! use sonde_aggregate::{key, OutPoint, SeriesRef, Suffix};
//!
//! let key = key::encode(0, "web.api.latency", &[("host", "a")]);
//! let series = SeriesRef::from_key(&key).unwrap();
//! let p = OutPoint { series, suffix: Suffix::Pct99, le: None, value: 12.5, timestamp: 1763800200, monotonic: false };
//! let mut out = Vec::new();
//! sonde_encode::json::encode([p], &mut out);
//! assert_eq!(out, b"{\"name\":\"web.api.latency.pct99\",\"tags\":{\"host\":\"a\"},\"value\":12.5,\"timestamp\":1763800200}\n");
//! ```
#![deny(missing_docs)]

pub mod compress;
pub mod console;
pub mod graphite;
pub mod influx;
pub mod json;
pub mod msgpack;
pub mod otlp;
pub mod otlp_logs;
pub mod prometheus;
pub mod record;
pub mod remote_write;

use sonde_aggregate::OutPoint;

/// A backend's request body, built one point at a time.
///
/// The sender drives: it calls [`BatchEncoder::push`] while
/// [`BatchEncoder::points`] and [`BatchEncoder::bytes`] are under its batch
/// limits, then [`BatchEncoder::finish`] to take the body, which also makes
/// the encoder empty and ready for the next batch. An encoder keeps its
/// buffers across batches, so a warm sender does not allocate per batch.
pub trait BatchEncoder: Send + 'static {
    /// Adds one point to the batch being built.
    fn push(&mut self, p: &OutPoint<'_>);

    /// Points pushed since the last [`BatchEncoder::finish`].
    fn points(&self) -> usize;

    /// The body's size so far in bytes, uncompressed (exact or a close
    /// estimate; used only against `max_batch_bytes`).
    fn bytes(&self) -> usize;

    /// Appends the finished body to `out` and empties the encoder. A batch
    /// with no points still gives a valid (empty) body.
    fn finish(&mut self, out: &mut Vec<u8>);

    /// The body's `Content-Type`, for HTTP sinks.
    fn content_type(&self) -> &'static str;

    /// Cuts `body`, a finished body of this encoder's, into two bodies
    /// each valid on its own: the first with half its points (rounded
    /// down), the second with the rest. Every point is in exactly one
    /// half; a line or protobuf format keeps the points' order.
    ///
    /// For a backend that refuses a request as too large (HTTP 413): the
    /// sender sends the halves instead, halving again as needed, down to
    /// one point. `None` when the body holds fewer than two points or is
    /// not a body this encoder writes.
    fn split(body: &[u8]) -> Option<[Half; 2]>
    where
        Self: Sized;
}

/// One of the two bodies [`BatchEncoder::split`] cuts a body into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Half {
    /// The body, valid on its own (uncompressed).
    pub body: Vec<u8>,
    /// Points (or log records) in it.
    pub points: usize,
}

/// Cuts a body of lines, one point or record each and each ending in
/// `\n`, after its middle line: the [`BatchEncoder::split`] of every
/// [`TextLines`] format, and of log records as JSON lines. `None` for
/// fewer than two lines.
pub fn split_lines(body: &[u8]) -> Option<[Half; 2]> {
    let ends: Vec<usize> = body
        .iter()
        .enumerate()
        .filter_map(|(i, &b)| (b == b'\n').then_some(i + 1))
        .collect();
    if ends.last() != Some(&body.len()) {
        return None;
    }
    split_at_ends(body, &ends)
}

/// Cuts `body`, a run of points (or records) whose ends are at the
/// offsets `ends`, after its middle one. `None` for fewer than two.
pub fn split_at_ends(body: &[u8], ends: &[usize]) -> Option<[Half; 2]> {
    if ends.len() < 2 {
        return None;
    }
    let first = ends.len() / 2;
    let cut = ends[first - 1].min(body.len());
    Some([
        Half {
            body: body[..cut].to_vec(),
            points: first,
        },
        Half {
            body: body[cut..].to_vec(),
            points: ends.len() - first,
        },
    ])
}

/// One line-per-point text format: the [`TextLines`] encoder calls
/// [`LineFormat::write`] once per point, appending one line to the body.
///
/// A format holds only its per-line scratch state (a name buffer, where
/// the current line's tag keys stand); the body and the point count are
/// [`TextLines`]'s, so every text encoder keeps its batch the same way.
pub trait LineFormat: Default + Send + 'static {
    /// The body's `Content-Type`, for HTTP sinks.
    const CONTENT_TYPE: &'static str;

    /// Appends `p`'s line, its newline included, to `body`.
    fn write(&mut self, p: &OutPoint<'_>, body: &mut Vec<u8>);
}

/// A body that grows by one encoded point per push, and how many points
/// it holds: the batch state of every encoder that writes points as they
/// come ([`TextLines`], [`msgpack::Msgpack`], [`remote_write::RemoteWrite`]).
#[derive(Debug, Default)]
pub(crate) struct Body {
    /// The encoded points.
    pub(crate) buf: Vec<u8>,
    /// Points pushed since the last [`Body::finish`].
    pub(crate) points: usize,
}

impl Body {
    /// Appends the encoded points to `out` and empties the body for the
    /// next batch, keeping its capacity.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
        self.buf.clear();
        self.points = 0;
    }
}

/// The [`BatchEncoder`] of every [`LineFormat`]: the body is the lines of
/// the points pushed, in order, and [`BatchEncoder::bytes`] is exact.
#[derive(Debug, Default)]
pub struct TextLines<F> {
    body: Body,
    format: F,
}

impl<F: LineFormat> TextLines<F> {
    /// An empty encoder.
    pub fn new() -> TextLines<F> {
        TextLines::default()
    }
}

impl<F: LineFormat> BatchEncoder for TextLines<F> {
    fn push(&mut self, p: &OutPoint<'_>) {
        self.format.write(p, &mut self.body.buf);
        self.body.points += 1;
    }

    fn points(&self) -> usize {
        self.body.points
    }

    fn bytes(&self) -> usize {
        self.body.buf.len()
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.body.finish(out);
    }

    fn content_type(&self) -> &'static str {
        F::CONTENT_TYPE
    }

    fn split(body: &[u8]) -> Option<[Half; 2]> {
        split_lines(body)
    }
}

/// Appends `p`'s tags to `body` as `{sep}key=value`, the way the line
/// protocol and Graphite both need them: a tag with an empty key or value
/// is left out, a key equal to `reserved` gets a `_` after it, and when two
/// keys come out the same **the first in tag order is kept**. `keys` is
/// the caller's scratch space for where this line's keys stand in `body`.
pub(crate) fn write_tags(
    body: &mut Vec<u8>,
    keys: &mut Vec<(usize, usize)>,
    p: &OutPoint<'_>,
    sep: u8,
    reserved: &str,
    mut write_key: impl FnMut(&mut Vec<u8>, &str),
    mut write_value: impl FnMut(&mut Vec<u8>, &str),
) {
    keys.clear();
    p.for_each_tag(|k, v| {
        if k.is_empty() || v.is_empty() {
            return;
        }
        let start = body.len();
        body.push(sep);
        write_key(body, k);
        if k == reserved {
            body.push(b'_');
        }
        let key = (start + 1, body.len());
        if keys.iter().any(|&(s, e)| body[s..e] == body[key.0..key.1]) {
            body.truncate(start);
            return;
        }
        keys.push(key);
        body.push(b'=');
        write_value(body, v);
    });
}

/// Ends a line of the line protocol or Graphite: `value_prefix`, the
/// value, a space, the timestamp in seconds and the newline.
pub(crate) fn end_line(body: &mut Vec<u8>, value_prefix: &[u8], p: &OutPoint<'_>) {
    body.extend_from_slice(value_prefix);
    write_number(body, p.value);
    body.push(b' ');
    body.extend_from_slice(itoa::Buffer::new().format(p.timestamp).as_bytes());
    body.push(b'\n');
}

/// Appends a finite number the shortest way that reads back exactly;
/// integral values below 2^53 are written without a fraction (`3`, not `3.0`).
pub fn write_number(out: &mut Vec<u8>, v: f64) {
    if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        out.extend_from_slice(itoa::Buffer::new().format(v as i64).as_bytes());
    } else {
        out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
    }
}

/// Points and drivers shared by the encoders' tests.
#[cfg(test)]
pub(crate) mod testing {
    use sonde_aggregate::{OutPoint, SeriesRef, Suffix};

    use crate::BatchEncoder;

    /// The series `name` with `tags`, its key leaked to live for the test.
    pub(crate) fn series(name: &str, tags: &[(&str, &str)]) -> SeriesRef<'static> {
        let key = sonde_aggregate::key::encode(0, name, tags);
        SeriesRef::from_key(Box::leak(key.into_boxed_slice())).unwrap()
    }

    /// A plain point: no suffix, no `le`, not monotonic.
    pub(crate) fn point(
        name: &str,
        tags: &[(&str, &str)],
        value: f64,
        timestamp: i64,
    ) -> OutPoint<'static> {
        OutPoint {
            series: series(name, tags),
            suffix: Suffix::None,
            le: None,
            value,
            timestamp,
            monotonic: false,
        }
    }

    /// Pushes `points` into `enc` and finishes the batch, checking that
    /// [`BatchEncoder::bytes`] was the body's exact size.
    pub(crate) fn encode(enc: &mut impl BatchEncoder, points: &[OutPoint<'_>]) -> Vec<u8> {
        for p in points {
            enc.push(p);
        }
        let size = enc.bytes();
        let mut out = Vec::new();
        enc.finish(&mut out);
        assert_eq!(out.len(), size, "bytes() is exact");
        out
    }

    /// `n` points of distinct series `s0`, `s1`, ... with values 0, 1, ...
    pub(crate) fn numbered(n: usize) -> Vec<OutPoint<'static>> {
        (0..n)
            .map(|i| {
                point(
                    &format!("s{i}"),
                    &[("id", &i.to_string())],
                    i as f64,
                    1_700_000_000,
                )
            })
            .collect()
    }

    /// Checks `E::split` against encoding the two halves of `points`
    /// directly: byte for byte, for 0 to 9, 17 and 40 points.
    pub(crate) fn split_matches_encoding_the_halves<E: BatchEncoder>(new: impl Fn() -> E) {
        for n in (0..10).chain([17, 40]) {
            let points = numbered(n);
            let whole = encode(&mut new(), &points);
            let Some([a, b]) = E::split(&whole) else {
                assert!(n < 2, "{n} points split");
                continue;
            };
            assert!(n >= 2, "{n} points cannot split");
            assert_eq!((a.points, b.points), (n / 2, n - n / 2));
            assert_eq!(
                a.body,
                encode(&mut new(), &points[..n / 2]),
                "first half of {n}"
            );
            assert_eq!(
                b.body,
                encode(&mut new(), &points[n / 2..]),
                "second half of {n}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lines_split_after_the_middle_line() {
        testing::split_matches_encoding_the_halves(json::Lines::new);
        testing::split_matches_encoding_the_halves(influx::LineProtocol::new);
        testing::split_matches_encoding_the_halves(graphite::Plaintext::new);
    }

    #[test]
    fn a_body_that_is_not_whole_lines_does_not_split() {
        assert_eq!(split_lines(b"a\nb"), None);
        assert_eq!(split_lines(b"a\n"), None);
        assert_eq!(split_lines(b""), None);
        let [a, b] = split_lines(b"a\nb\nc\n").unwrap();
        assert_eq!(
            (&a.body[..], a.points, &b.body[..], b.points),
            (&b"a\n"[..], 1, &b"b\nc\n"[..], 2)
        );
    }

    #[test]
    fn numbers_are_short_and_exact() {
        for (v, want) in [
            (3.0, "3"),
            (-0.25, "-0.25"),
            (12.5, "12.5"),
            (1e300, "1e300"),
            (0.1, "0.1"),
        ] {
            let mut out = Vec::new();
            write_number(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }
}
