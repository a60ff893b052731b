//! A batch of points that an input made itself ([`crate::input`]), with
//! their names and tags in one buffer, as a receiver's worker records
//! them ([`crate::receiver::Ingest::record`]).

use std::ops::Range;

use sonde_proto::{Kind, Point, TagSyntax, Value};

/// A batch of points an input made, with their names and tags in one
/// buffer. Tags are kept in DogStatsD's syntax (`key:value,key:value`),
/// which the shard splits as it splits a StatsD line's.
#[derive(Debug, Default, Clone)]
pub struct Points {
    bytes: Vec<u8>,
    points: Vec<Owned>,
}

/// Where a name or tags shared by several points of one batch were
/// written ([`Points::shared_name`], [`Points::tags_begin`]): valid in
/// that batch until it is cleared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shared(Range<usize>);

#[derive(Debug, Clone)]
struct Owned {
    kind: Kind,
    name: Range<usize>,
    tags: Range<usize>,
    value: f64,
    timestamp: Option<i64>,
}

impl Points {
    /// An empty batch.
    pub fn new() -> Points {
        Points::default()
    }

    /// Adds a point of `kind` named `name` with `tags` (key, value) and
    /// `value`. A key's `:` and `,` and a value's `,` would split the tag
    /// elsewhere, so each becomes `_`; a tag with an empty key is left
    /// out. A value that is not finite, or an empty name, is refused
    /// (false) and not added.
    pub fn push<'t>(
        &mut self,
        kind: Kind,
        name: &str,
        tags: impl IntoIterator<Item = (&'t str, &'t str)>,
        value: f64,
    ) -> bool {
        if !value.is_finite() || name.is_empty() {
            return false;
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name.as_bytes());
        let name = start..self.bytes.len();
        let tags_start = self.bytes.len();
        for (k, v) in tags {
            let sep = self.bytes.len() > tags_start;
            append_tag(&mut self.bytes, sep, k.as_bytes(), v.as_bytes());
        }
        self.points.push(Owned {
            kind,
            name,
            tags: tags_start..self.bytes.len(),
            value,
            timestamp: None,
        });
        true
    }

    /// Writes a name, `name` then `suffix`, once for many points of this
    /// batch ([`Points::push_shared`]).
    pub fn shared_name(&mut self, name: &[u8], suffix: &[u8]) -> Shared {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(suffix);
        Shared(start..self.bytes.len())
    }

    /// Starts writing tags shared by several points, one by one as they
    /// are read ([`Points::tags_push`], [`Points::tags_end`]), with
    /// `prefix` (tags in DogStatsD's syntax as [`write_tag`] writes
    /// them); nothing else may be written to the batch until they end.
    #[inline]
    pub fn tags_begin(&mut self, prefix: &[u8]) -> usize {
        let begin = self.bytes.len();
        self.bytes.extend_from_slice(prefix);
        begin
    }

    /// Adds the tag `key:value` to the tags begun at `begin`, as
    /// [`Points::push`] writes each. Bytes that are not UTF-8 are the
    /// shard's to refuse (counted) when their series is new, as a StatsD
    /// line's are.
    #[inline]
    pub fn tags_push(&mut self, begin: usize, key: &[u8], value: &[u8]) {
        let sep = self.bytes.len() > begin;
        append_tag(&mut self.bytes, sep, key, value);
    }

    /// Forgets the tags begun at `begin`, to write them again.
    pub fn tags_reset(&mut self, begin: usize) {
        self.bytes.truncate(begin);
    }

    /// The tags begun at `begin`.
    #[inline]
    pub fn tags_end(&self, begin: usize) -> Shared {
        Shared(begin..self.bytes.len())
    }

    /// Writes `base`'s tags and then `key:value`, once for many points.
    pub fn shared_tags_with(&mut self, base: &Shared, key: &[u8], value: &[u8]) -> Shared {
        let start = self.bytes.len();
        self.bytes.extend_from_within(base.0.clone());
        let sep = self.bytes.len() > start;
        append_tag(&mut self.bytes, sep, key, value);
        Shared(start..self.bytes.len())
    }

    /// Adds a point whose name and tags were written by
    /// [`Points::shared_name`] and [`Points::tags_end`] on this batch
    /// since it was last cleared. A value that is not finite, or an empty
    /// name, is refused (false) and not added.
    #[inline]
    pub fn push_shared(&mut self, kind: Kind, name: &Shared, tags: &Shared, value: f64) -> bool {
        if !value.is_finite() || name.0.is_empty() {
            return false;
        }
        self.points.push(Owned {
            kind,
            name: name.0.clone(),
            tags: tags.0.clone(),
            value,
            timestamp: None,
        });
        true
    }

    /// Makes room for `points` more points whose names and tags take
    /// `bytes` bytes.
    pub fn reserve(&mut self, points: usize, bytes: usize) {
        self.points.reserve(points);
        self.bytes.reserve(bytes);
    }

    /// The memory the batch holds, in bytes: what it keeps once cleared.
    pub fn memory(&self) -> usize {
        self.bytes.capacity() + self.points.capacity() * std::mem::size_of::<Owned>()
    }

    /// Points added.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when no point was added.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.points.clear();
    }

    /// Each point, as the shard records it.
    pub fn each<'a>(&'a self, mut f: impl FnMut(&Point<'a>)) {
        for p in &self.points {
            f(&Point {
                kind: p.kind,
                name: &self.bytes[p.name.clone()],
                tags: &self.bytes[p.tags.clone()],
                tag_syntax: TagSyntax::DogStatsd,
                value: Value::Number(p.value),
                sample_rate: 1.0,
                timestamp: p.timestamp,
            });
        }
    }
}

/// Appends the tag `key:value` to `tags` in DogStatsD's syntax, after a
/// `,` unless `tags` is empty, as [`Points::push`] writes each: a key's
/// `:` and `,` and a value's `,` become `_`; a tag with an empty key is
/// left out.
pub fn write_tag(tags: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    let sep = !tags.is_empty();
    append_tag(tags, sep, key, value);
}

#[inline(always)]
fn append_tag(out: &mut Vec<u8>, sep: bool, key: &[u8], value: &[u8]) {
    if key.is_empty() {
        return;
    }
    // Both looked at before anything is copied, eight bytes at a time (a
    // byte loop over short keys and values was a third of an OTLP point's
    // cost, docs/BENCHMARKS.md "OTLP in"), and the source rather than the
    // copy (reading bytes just stored stalls on store forwarding). A
    // separator inside a tag is rare: then the copy is mended.
    let mend = separator(key, true) || separator(value, false);
    let comma = usize::from(sep);
    let (start, len) = (out.len(), comma + key.len() + 1 + value.len());
    out.reserve(len);
    // Written through a pointer rather than with `push` and
    // `extend_from_slice`, each of which checks the capacity again: those
    // checks were a quarter of writing a tag (docs/BENCHMARKS.md, "OTLP
    // in").
    // SAFETY: `reserve` made room for `len` bytes after `start`; the
    // writes below fill exactly those (a comma if `sep`, the key, a
    // colon, the value), from slices that cannot overlap the spare
    // capacity of `out`, which `&mut` holds alone, before `set_len` takes
    // them in.
    unsafe {
        let mut at = out.as_mut_ptr().add(start);
        if sep {
            at.write(b',');
            at = at.add(1);
        }
        std::ptr::copy_nonoverlapping(key.as_ptr(), at, key.len());
        at = at.add(key.len());
        at.write(b':');
        std::ptr::copy_nonoverlapping(value.as_ptr(), at.add(1), value.len());
        out.set_len(start + len);
    }
    let (k, v) = (start + comma, start + comma + key.len() + 1);
    if mend {
        let (key, value) = out[k..].split_at_mut(v - k);
        for b in key.iter_mut().filter(|b| **b == b',' || **b == b':') {
            *b = b'_';
        }
        key[key.len() - 1] = b':';
        for b in value.iter_mut().filter(|b| **b == b',') {
            *b = b'_';
        }
    }
}

/// True when `bytes` holds a `,` (or a `:` when `colon`): eight bytes to
/// a word, each tested with the carry-free zero-byte test. Under eight
/// bytes, one word made of overlapping reads covers them all: the first
/// and last four of 4 to 7 bytes, and the first, middle and last of 1 to
/// 3 (with bytes that are no separator above them).
#[inline(always)]
fn separator(bytes: &[u8], colon: bool) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| (x.wrapping_sub(LO) & !x & HI) != 0;
    let has =
        |w: u64| zero(w ^ (LO * u64::from(b','))) | (colon & zero(w ^ (LO * u64::from(b':'))));
    // Bytes that are no separator, above the three of a short input.
    const FILL: u64 = 0x0101_0101_0100_0000;
    let n = bytes.len();
    let four = |b: &[u8]| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    match n {
        0 => false,
        1..=3 => {
            let [a, m, z] = [bytes[0], bytes[n / 2], bytes[n - 1]].map(u64::from);
            has(a | m << 8 | z << 16 | FILL)
        }
        4..=7 => has(four(bytes) | four(&bytes[n - 4..]) << 32),
        _ => {
            let (words, rest) = bytes.as_chunks::<8>();
            words.iter().any(|w| has(u64::from_le_bytes(*w)))
                || (!rest.is_empty()
                    && has(u64::from_le_bytes(
                        bytes[n - 8..].try_into().unwrap_or([0; 8]),
                    )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_keeps_names_tags_and_values_and_refuses_what_cannot_be_a_point() {
        let mut b = Points::new();
        assert!(b.push(
            Kind::Count,
            "system.network.io",
            [("device", "lo"), ("direction", "transmit")],
            1500.0
        ));
        assert!(b.push(
            Kind::Store,
            "odd",
            [("a:b,c", "x,y:z"), ("", "dropped")],
            -2.5
        ));
        assert!(!b.push(Kind::Store, "nan", [], f64::NAN));
        assert!(!b.push(Kind::Store, "", [], 1.0));
        assert_eq!(b.len(), 2);
        let mut got = Vec::new();
        b.each(|p| {
            got.push((
                p.kind,
                String::from_utf8(p.name.to_vec()).unwrap(),
                String::from_utf8(p.tags.to_vec()).unwrap(),
                p.value,
            ));
        });
        assert_eq!(
            got,
            [
                (
                    Kind::Count,
                    "system.network.io".to_string(),
                    "device:lo,direction:transmit".to_string(),
                    Value::Number(1500.0)
                ),
                (
                    Kind::Store,
                    "odd".to_string(),
                    "a_b_c:x_y:z".to_string(),
                    Value::Number(-2.5)
                ),
            ]
        );
        // The tags split back into what was given, as the shard splits
        // them.
        let mut spans = Vec::new();
        sonde_proto::tags::split_scalar(b"a_b_c:x_y:z", TagSyntax::DogStatsd, &mut spans).unwrap();
        assert_eq!(spans.len(), 1);
        // Separators found wherever they are, in every length, among
        // bytes next to them in value and bytes with the high bit set.
        let fill = [b'a', 0x2b, 0x2d, 0x39, 0x3b, 0x80, 0xff, 0, 1];
        for n in 1..24 {
            let clean: Vec<u8> = (0..n).map(|i| fill[i % fill.len()]).collect();
            assert!(!separator(&clean, true), "{clean:?}");
            for at in 0..n {
                for sep in [b',', b':'] {
                    let mut k = clean.clone();
                    k[at] = sep;
                    assert!(separator(&k, true), "{k:?}");
                    assert_eq!(separator(&k, false), sep == b',', "{k:?}");
                }
            }
        }
        assert!(!separator(b"", true));
        // A tag mended where it held separators, the colon between key
        // and value kept.
        let mut tags = Vec::new();
        write_tag(&mut tags, b"k", b"v");
        write_tag(&mut tags, b":", b",");
        write_tag(&mut tags, b"ab,cd:ef", b"g:h,i");
        assert_eq!(tags, b"k:v,_:_,ab_cd_ef:g:h_i");
        assert!(separator(&[0x80, b':'], true));
        assert!(!separator(
            &[0x80, 0xba, 0x3b, 0x39, 0x2d, 0x2b, 0, 1, 0x80],
            true
        ));
        // A name and tags written once, shared by several points.
        let mut t = Points::new();
        let name = t.shared_name(b"lat", b".bucket");
        let begin = t.tags_begin(b"service:api");
        t.tags_push(begin, b"a:b,c", b"x,y:z");
        t.tags_push(begin, b"", b"dropped");
        let base = t.tags_end(begin);
        let le = t.shared_tags_with(&base, b"le", b"+Inf");
        assert!(t.push_shared(Kind::Count, &name, &base, 1.0));
        assert!(t.push_shared(Kind::Count, &name, &le, 2.0));
        assert!(!t.push_shared(Kind::Count, &name, &le, f64::NAN));
        let mut shared = Vec::new();
        t.each(|p| {
            shared.push((
                String::from_utf8_lossy(p.name).into_owned(),
                String::from_utf8_lossy(p.tags).into_owned(),
            ))
        });
        assert_eq!(
            shared,
            [
                (
                    "lat.bucket".to_string(),
                    "service:api,a_b_c:x_y:z".to_string()
                ),
                (
                    "lat.bucket".to_string(),
                    "service:api,a_b_c:x_y:z,le:+Inf".to_string()
                ),
            ]
        );
        let mut tags = Vec::new();
        write_tag(&mut tags, b"a:b,c", b"x,y:z");
        assert_eq!(tags, b"a_b_c:x_y:z");
        b.clear();
        assert!(b.is_empty());
    }
}
