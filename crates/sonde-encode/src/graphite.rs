//! Graphite plaintext protocol, tags in Graphite's tag syntax (carbon
//! 1.1 and later), one line per point:
//!
//! ```text
//! web.api.latency.pct99;dc=x;host=a 12.5 1763800200
//! ```
//!
//! # Sanitising
//!
//! Carbon splits a line on whitespace and a path on `;`, and rejects a
//! tagged series whose tags break the rules of Graphite's tag
//! documentation (tag names non-empty, without any of `;!^=`; tag values
//! non-empty, without `;`, not starting with `~`). So, replacing each
//! offending character with `_`:
//!
//! * the name: whitespace, control characters and `;`; a leading `~`
//!   (carbon strips it, so `~a` and `a` would be one series); an empty
//!   name becomes `_`;
//! * tag names: whitespace, control characters and `;`, `!`, `^`, `=`;
//! * tag values: whitespace, control characters and `;`, and a leading
//!   `~`.
//!
//! Tags with an empty name or value are left out. The tag name `name` is
//! Graphite's own (it holds the metric name and carbon overwrites a tag
//! of that name), so it is sent as `name_`. When two tags end up with one
//! name (`a b` and `a_b`, or a histogram series with its own `le` tag)
//! **the first in tag order is kept**. Other characters, non-ASCII
//! included, are sent as they are (Graphite's documentation calls UTF-8
//! "not well tested"). Dots stay: they are Graphite's hierarchy. The
//! lines of this module's tests split and parse without error under
//! carbon 1.1.7's own `line.split()` and `TaggedSeries.parse`.
//!
//! The plaintext protocol goes over TCP with no compression: carbon's
//! line receiver reads plain text.
//!
//! ```
//! use sonde_aggregate::{key, OutPoint, SeriesRef, Suffix};
//! use sonde_encode::graphite::Plaintext;
//! use sonde_encode::BatchEncoder;
//!
//! let key = key::encode(0, "web.api.latency", &[("host", "a")]);
//! let series = SeriesRef::from_key(&key).unwrap();
//! let p = OutPoint { series, suffix: Suffix::Pct99, le: None, value: 12.5, timestamp: 1763800200, monotonic: false };
//! let mut enc = Plaintext::new();
//! enc.push(&p);
//! let mut body = Vec::new();
//! enc.finish(&mut body);
//! assert_eq!(body, b"web.api.latency.pct99;host=a 12.5 1763800200\n");
//! ```

use sonde_aggregate::OutPoint;

use crate::{end_line, write_tags, LineFormat, TextLines};

/// Appends `s` with whitespace, control characters and `forbidden`
/// (ASCII) replaced by `_`, and a leading `~` too when `no_leading_tilde`.
fn sanitize(out: &mut Vec<u8>, s: &str, forbidden: &[u8], no_leading_tilde: bool) {
    let start = out.len();
    if s.is_ascii() {
        // The usual case, a byte at a time: ASCII whitespace and control
        // characters are all at or below the space, or DEL.
        out.extend(s.bytes().map(|b| {
            if b <= b' ' || b == 0x7f || forbidden.contains(&b) {
                b'_'
            } else {
                b
            }
        }));
    } else {
        let mut buf = [0u8; 4];
        for c in s.chars() {
            let bad = c.is_whitespace()
                || c.is_control()
                || (c.is_ascii() && forbidden.contains(&(c as u8)));
            if bad {
                out.push(b'_');
            } else {
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    if no_leading_tilde && out.get(start) == Some(&b'~') {
        out[start] = b'_';
    }
}

/// The Graphite plaintext [`LineFormat`].
#[derive(Debug, Default)]
pub struct Graphite {
    name: String,
    /// Where each tag name of the current line was written in the body,
    /// to find duplicates.
    keys: Vec<(usize, usize)>,
}

/// The Graphite plaintext [`BatchEncoder`](crate::BatchEncoder).
pub type Plaintext = TextLines<Graphite>;

impl LineFormat for Graphite {
    const CONTENT_TYPE: &'static str = "text/plain";

    fn write(&mut self, p: &OutPoint<'_>, body: &mut Vec<u8>) {
        let Graphite { name, keys } = self;
        name.clear();
        p.write_name(name);
        if name.is_empty() {
            body.push(b'_');
        } else {
            sanitize(body, name, b";", true);
        }
        write_tags(
            body,
            keys,
            p,
            b';',
            "name",
            |b, k| sanitize(b, k, b";!^=", false),
            |b, v| sanitize(b, v, b";", true),
        );
        end_line(body, b" ", p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, point};
    use sonde_aggregate::Suffix;

    fn encode(points: &[OutPoint<'_>]) -> String {
        String::from_utf8(testing::encode(&mut Plaintext::new(), points)).unwrap()
    }

    #[test]
    fn a_batch_matches_golden_lines() {
        let mut bucket = point("db.lat", &[("host", "a")], 4.0, 1763800200);
        bucket.suffix = Suffix::Bucket;
        bucket.le = Some("+Inf");
        bucket.monotonic = true;
        assert_eq!(
            encode(&[
                bucket,
                point("queue.depth", &[("dc", ""), ("q", "in")], -0.25, 1763800230),
                point("plain", &[], 1e300, 0),
            ]),
            "db.lat.bucket;host=a;le=+Inf 4 1763800200\n\
             queue.depth;q=in -0.25 1763800230\n\
             plain 1e300 0\n"
        );
    }

    #[test]
    fn forbidden_characters_become_underscores() {
        assert_eq!(
            encode(&[point(
                "~a b;c\t=!~",
                &[("k;!^= \u{a0}~", "~v;= x~ü"), ("", "v"), ("\n", "\u{1c}")],
                1.0,
                5
            )]),
            "_a_b_c_=!~;_=_;k______~=_v_=_x~ü 1 5\n"
        );
    }

    #[test]
    fn ascii_input_is_sanitised_by_the_same_rules() {
        assert_eq!(
            encode(&[point(
                "~x y;z\x7f",
                &[("k;!^=\t", "~v;w\r"), ("k2", "a~b")],
                1.0,
                5
            )]),
            "_x_y_z_;k2=a~b;k_____=_v_w_ 1 5\n"
        );
    }

    #[test]
    fn the_name_tag_is_renamed_and_collisions_keep_the_first() {
        let mut p = point(
            "",
            &[("a b", "1"), ("a_b", "2"), ("le", "mine"), ("name", "n")],
            2.5,
            3,
        );
        p.le = Some("1");
        assert_eq!(encode(&[p]), "_;a_b=1;le=mine;name_=n 2.5 3\n");
    }
}
