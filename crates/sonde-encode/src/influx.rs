//! InfluxDB 1.x line protocol, one line per point:
//!
//! ```text
//! web.api.latency.pct99,dc=x,host=a value=12.5 1763800200
//! ```
//!
//! The measurement is the full point name, the tags are the point's tags
//! and the one field is `value`, a float: InfluxDB types a number without
//! an `i` suffix as a float, so an integral value is written short (`3`)
//! and still lands in the same float field as `2.5`. Timestamps are unix
//! seconds: the sink POSTs to `/write?db=..&precision=s`.
//!
//! # Escaping
//!
//! * Measurement: `,` and space are escaped with a backslash; a leading
//!   `#` (a comment line to InfluxDB) becomes `_`, and an empty name `_`.
//! * Tag keys and values: `,`, `=` and space are escaped with a
//!   backslash.
//! * Everywhere: a newline or carriage return, which would end the line
//!   (line protocol cannot carry one), becomes `_`.
//! * Backslashes: InfluxDB 1.x takes any separator right after a
//!   backslash as escaped and has no escape for the backslash itself, so
//!   a backslash at the end of a name, key or value becomes `_`, and so
//!   does one right before an escaped character in a measurement (whose
//!   escapes InfluxDB 1.6 undoes twice). Every other backslash is written
//!   as it is and stored as it is. These rules were checked against
//!   InfluxDB 1.6 (Debian's `influxdb`): the lines of the
//!   `backslashes_*` test are stored exactly as its comments say.
//!
//! Tags with an empty value are left out (line protocol forbids them), as
//! are tags with an empty key. A tag key `time` is rejected by InfluxDB
//! 1.x, so it is written as `time_`. When two tags end up with one key
//! (a client tag `time_` beside `time`, or a histogram series with its own
//! `le` tag) **the first in tag order is kept**, since InfluxDB rejects a
//! point with duplicate tags.
//!
//! InfluxDB 1.x's `/write` accepts `Content-Encoding: gzip` and no other
//! compression.
//!
//! ```
//! use sonde_aggregate::{key, OutPoint, SeriesRef, Suffix};
//! use sonde_encode::influx::LineProtocol;
//! use sonde_encode::BatchEncoder;
//!
//! let key = key::encode(0, "web.api.latency", &[("host", "a b")]);
//! let series = SeriesRef::from_key(&key).unwrap();
//! let p = OutPoint { series, suffix: Suffix::Pct99, le: None, value: 12.5, timestamp: 1763800200, monotonic: false };
//! let mut enc = LineProtocol::new();
//! enc.push(&p);
//! let mut body = Vec::new();
//! enc.finish(&mut body);
//! assert_eq!(body, b"web.api.latency.pct99,host=a\\ b value=12.5 1763800200\n");
//! ```

use sonde_aggregate::OutPoint;

use crate::{end_line, write_tags, LineFormat, TextLines};

const MEASUREMENT_SPECIALS: &[u8] = b", ";
const TAG_SPECIALS: &[u8] = b",= ";

/// Appends `s` escaped for a token in which `specials` must be escaped.
///
/// InfluxDB 1.x reads a separator right after a backslash as escaped, so
/// a token cannot end with a backslash: that one becomes `_`. Elsewhere a
/// backslash is kept, and in tags it round-trips exactly (checked against
/// InfluxDB 1.6). A measurement's escapes are undone twice on the way in
/// (1.6 stores `a\\ b` as `a b`), so there a backslash right before an
/// escaped character becomes `_` as well, rather than counting on that.
fn escape(out: &mut Vec<u8>, s: &str, specials: &[u8], measurement: bool) {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'\n' | b'\r' => out.push(b'_'),
            b'\\'
                if b.get(i + 1)
                    .is_none_or(|n| measurement && specials.contains(n)) =>
            {
                out.push(b'_')
            }
            c if specials.contains(&c) => {
                out.push(b'\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
}

/// The line protocol [`LineFormat`].
#[derive(Debug, Default)]
pub struct Influx {
    name: String,
    /// Where each tag key of the current line was written in the body, to
    /// find duplicates.
    keys: Vec<(usize, usize)>,
}

/// The line protocol [`BatchEncoder`](crate::BatchEncoder).
pub type LineProtocol = TextLines<Influx>;

impl LineFormat for Influx {
    const CONTENT_TYPE: &'static str = "text/plain; charset=utf-8";

    fn write(&mut self, p: &OutPoint<'_>, body: &mut Vec<u8>) {
        let Influx { name, keys } = self;
        name.clear();
        p.write_name(name);
        match name.strip_prefix('#') {
            _ if name.is_empty() => body.push(b'_'),
            Some(rest) => {
                body.push(b'_');
                escape(body, rest, MEASUREMENT_SPECIALS, true);
            }
            None => escape(body, name, MEASUREMENT_SPECIALS, true),
        }
        write_tags(
            body,
            keys,
            p,
            b',',
            "time",
            |b, k| escape(b, k, TAG_SPECIALS, false),
            |b, v| escape(b, v, TAG_SPECIALS, false),
        );
        end_line(body, b" value=", p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, point};
    use sonde_aggregate::Suffix;

    fn encode(points: &[OutPoint<'_>]) -> String {
        String::from_utf8(testing::encode(&mut LineProtocol::new(), points)).unwrap()
    }

    #[test]
    fn a_batch_matches_golden_lines() {
        let mut bucket = point("db.lat", &[("host", "a")], 4.0, 1763800200);
        bucket.suffix = Suffix::Bucket;
        bucket.le = Some("+Inf");
        assert_eq!(
            encode(&[
                bucket,
                point("queue.depth", &[("dc", ""), ("q", "in")], -0.25, 1763800230),
                point("plain", &[], 1e300, 0),
            ]),
            "db.lat.bucket,host=a,le=+Inf value=4 1763800200\n\
             queue.depth,q=in value=-0.25 1763800230\n\
             plain value=1e300 0\n"
        );
    }

    #[test]
    fn separators_are_escaped_where_each_token_needs_it() {
        assert_eq!(
            encode(&[point(
                "a b,c=d",
                &[("k 1,=", "v 1,=x"), ("ü", "ß\nz")],
                1.0,
                5
            )]),
            "a\\ b\\,c=d,k\\ 1\\,\\==v\\ 1\\,\\=x,ü=ß_z value=1 5\n"
        );
    }

    #[test]
    fn backslashes_never_escape_a_separator() {
        let lines = encode(&[
            // Stored as `a\b`, tag `k\x` = `v\y`.
            point("a\\b", &[("k\\x", "v\\y")], 1.0, 1),
            // Stored as `a_ b`, tag `k\ x` = `v\,y`.
            point("a\\ b", &[("k\\ x", "v\\,y")], 1.0, 2),
            // Stored as `a\_ b`, tags `k\=x` = `v\=y` and `z` = `w\\,q`.
            point("a\\\\ b", &[("k\\=x", "v\\=y"), ("z", "w\\\\,q")], 1.0, 3),
            // Stored as `e_`, tag `k2_` = `v2\_`.
            point("e\\", &[("k2\\", "v2\\\\")], 1.0, 5),
        ]);
        assert_eq!(
            lines,
            "a\\b,k\\x=v\\y value=1 1\n\
             a_\\ b,k\\\\ x=v\\\\,y value=1 2\n\
             a\\_\\ b,k\\\\=x=v\\\\=y,z=w\\\\\\,q value=1 3\n\
             e_,k2_=v2\\_ value=1 5\n"
        );
    }

    #[test]
    fn reserved_and_colliding_keys_and_odd_names_are_handled() {
        let mut p = point(
            "#x",
            &[("", "v"), ("le", "mine"), ("time", "t"), ("time_", "u")],
            2.0,
            3,
        );
        p.le = Some("1");
        assert_eq!(
            encode(&[p, point("", &[], 0.5, 3)]),
            "_x,le=mine,time_=t value=2 3\n\
             _ value=0.5 3\n"
        );
    }
}
