//! A batch of points that an input made itself ([`crate::input`]), with
//! their names and tags in one buffer, as a receiver's worker records
//! them ([`crate::receiver::Ingest::record`]).

use std::ops::Range;

use sonde_proto::{Kind, Point, TagSyntax, Value};

/// A batch of points an input made, with their names and tags in one
/// buffer. Tags are written in [`TagSyntax::Prefixed`] (each key and
/// value after its length), which takes any bytes as they are and costs
/// two copies a tag; the shard splits it only for a series it has not
/// seen, as it splits a StatsD line's tags.
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
    /// `value`, each tag as it is; a tag with an empty key is left out. A
    /// value that is not finite, or an empty name, is refused (false) and
    /// not added.
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
            append_tag(&mut self.bytes, k.as_bytes(), v.as_bytes());
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
    /// `prefix` (tags as [`write_tag`] writes them); nothing else may be
    /// written to the batch until they end.
    #[inline]
    pub fn tags_begin(&mut self, prefix: &[u8]) -> usize {
        let begin = self.bytes.len();
        self.bytes.extend_from_slice(prefix);
        begin
    }

    /// Adds the tag `key`, `value` to the tags begun by
    /// [`Points::tags_begin`], as [`Points::push`] writes each. Bytes that
    /// are not UTF-8 are the shard's to refuse (counted) when their series
    /// is new, as a StatsD line's are.
    #[inline]
    pub fn tags_push(&mut self, key: &[u8], value: &[u8]) {
        append_tag(&mut self.bytes, key, value);
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

    /// Writes `base`'s tags and then `key`, `value`, once for many points.
    pub fn shared_tags_with(&mut self, base: &Shared, key: &[u8], value: &[u8]) -> Shared {
        let start = self.bytes.len();
        self.bytes.extend_from_within(base.0.clone());
        append_tag(&mut self.bytes, key, value);
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
                tag_syntax: TagSyntax::Prefixed,
                value: Value::Number(p.value),
                sample_rate: 1.0,
                timestamp: p.timestamp,
            });
        }
    }
}

/// Appends the tag `key`, `value` to `tags` as [`Points::push`] writes
/// each (a tag with an empty key is left out): for tags written once and
/// given to [`Points::tags_begin`].
pub fn write_tag(tags: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    append_tag(tags, key, value);
}

/// Renders tags a batch wrote as `key:value,key:value`, for logs and
/// tests; tags that are not what a batch writes render as what of them
/// reads, then `…`.
pub fn tags_text(tags: &[u8]) -> String {
    let mut spans = Vec::new();
    let whole = sonde_proto::tags::split(tags, TagSyntax::Prefixed, &mut spans).is_ok();
    let mut out: Vec<String> = spans
        .iter()
        .map(|s| {
            format!(
                "{}:{}",
                String::from_utf8_lossy(s.key(tags)),
                String::from_utf8_lossy(s.value(tags))
            )
        })
        .collect();
    if !whole {
        out.push("…".into());
    }
    out.join(",")
}

#[inline(always)]
fn append_tag(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    if key.is_empty() {
        return;
    }
    if key.len() >= 0x80 || value.len() >= 0x80 {
        sonde_proto::tags::push_prefixed(out, key);
        sonde_proto::tags::push_prefixed(out, value);
        return;
    }
    // Lengths of one byte each, the tag written through a pointer after
    // one capacity check rather than with `push` and `extend_from_slice`,
    // which check it again each: those checks were a fifth of mapping an
    // OTLP point (docs/benchmarks/LOG.md, "OTLP tags written for less").
    let (start, len) = (out.len(), key.len() + value.len() + 2);
    out.reserve(len);
    // SAFETY: `reserve` made room for `len` bytes after `start`; the
    // writes fill exactly those (a length byte, the key, a length byte,
    // the value), from slices that cannot overlap the spare capacity of
    // `out`, which `&mut` holds alone, before `set_len` takes them in.
    unsafe {
        let at = out.as_mut_ptr().add(start);
        at.write(key.len() as u8);
        std::ptr::copy_nonoverlapping(key.as_ptr(), at.add(1), key.len());
        let at = at.add(1 + key.len());
        at.write(value.len() as u8);
        std::ptr::copy_nonoverlapping(value.as_ptr(), at.add(1), value.len());
        out.set_len(start + len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    /// The tags as the shard splits them.
    fn pairs(tags: &[u8]) -> Pairs {
        let mut spans = Vec::new();
        sonde_proto::tags::split(tags, TagSyntax::Prefixed, &mut spans).unwrap();
        spans
            .iter()
            .map(|s| (s.key(tags).to_vec(), s.value(tags).to_vec()))
            .collect()
    }

    fn expect(tags: &[(&str, &str)]) -> Pairs {
        tags.iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn a_batch_keeps_names_tags_and_values_and_refuses_what_cannot_be_a_point() {
        let mut b = Points::new();
        assert!(b.push(
            Kind::Count,
            "system.network.io",
            [("device", "lo"), ("direction", "transmit")],
            1500.0
        ));
        // Separators of other syntaxes are bytes like any other; a tag
        // with an empty key is left out.
        assert!(b.push(
            Kind::Store,
            "odd",
            [("a:b,c", "x,y:z"), ("", "dropped"), ("k|=", "")],
            -2.5
        ));
        assert!(!b.push(Kind::Store, "nan", [], f64::NAN));
        assert!(!b.push(Kind::Store, "", [], 1.0));
        assert_eq!(b.len(), 2);
        let mut got = Vec::new();
        b.each(|p| {
            assert_eq!(p.tag_syntax, TagSyntax::Prefixed);
            got.push((
                p.kind,
                String::from_utf8(p.name.to_vec()).unwrap(),
                pairs(p.tags),
                p.value,
            ));
        });
        assert_eq!(
            got,
            [
                (
                    Kind::Count,
                    "system.network.io".to_string(),
                    expect(&[("device", "lo"), ("direction", "transmit")]),
                    Value::Number(1500.0)
                ),
                (
                    Kind::Store,
                    "odd".to_string(),
                    expect(&[("a:b,c", "x,y:z"), ("k|=", "")]),
                    Value::Number(-2.5)
                ),
            ]
        );
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn keys_and_values_of_any_length_and_bytes_split_back_as_written() {
        let long_key = vec![b','; 128];
        let long_value: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        let mut tags = Vec::new();
        write_tag(&mut tags, &long_key, b"v");
        write_tag(&mut tags, b"k", &long_value);
        write_tag(&mut tags, &[0xff, 0], &[]);
        assert_eq!(
            pairs(&tags),
            [
                (long_key.clone(), b"v".to_vec()),
                (b"k".to_vec(), long_value.clone()),
                (vec![0xff, 0], vec![]),
            ]
        );
        // One byte of length under 128, two from 128, three from 16,384.
        assert_eq!(
            tags.len(),
            (2 + 128 + 1 + 1) + (1 + 1 + 3 + 70_000) + (1 + 2 + 1)
        );
        assert_eq!(tags_text(b"\x01k\x01v\x01a\x00"), "k:v,a:");
        // Cut short: what reads, then the mark.
        assert_eq!(tags_text(b"\x01k\x01v\x05ab"), "k:v,…");
    }

    #[test]
    fn a_name_and_tags_written_once_are_shared_by_several_points() {
        let mut t = Points::new();
        let name = t.shared_name(b"lat", b".bucket");
        let mut prefix = Vec::new();
        write_tag(&mut prefix, b"service", b"api");
        let begin = t.tags_begin(&prefix);
        t.tags_push(b"a:b,c", b"x,y:z");
        t.tags_push(b"", b"dropped");
        let base = t.tags_end(begin);
        let le = t.shared_tags_with(&base, b"le", b"+Inf");
        assert!(t.push_shared(Kind::Count, &name, &base, 1.0));
        assert!(t.push_shared(Kind::Count, &name, &le, 2.0));
        assert!(!t.push_shared(Kind::Count, &name, &le, f64::NAN));
        let mut shared = Vec::new();
        t.each(|p| shared.push((String::from_utf8_lossy(p.name).into_owned(), pairs(p.tags))));
        assert_eq!(
            shared,
            [
                (
                    "lat.bucket".to_string(),
                    expect(&[("service", "api"), ("a:b,c", "x,y:z")])
                ),
                (
                    "lat.bucket".to_string(),
                    expect(&[("service", "api"), ("a:b,c", "x,y:z"), ("le", "+Inf")])
                ),
            ]
        );
        // Tags written again from their beginning.
        let begin = t.tags_begin(&prefix);
        t.tags_push(b"x", b"1");
        t.tags_reset(begin);
        let begin = t.tags_begin(&prefix);
        let again = t.tags_end(begin);
        assert!(t.push_shared(Kind::Count, &name, &again, 3.0));
        let mut last = Vec::new();
        t.each(|p| last = pairs(p.tags));
        assert_eq!(last, expect(&[("service", "api")]));
    }
}
