//! Series keys: a metric's identity laid out in one contiguous buffer.
//!
//! A key is `[kind][name_len u16][name][tag_count u16]` followed by
//! `[key_len u16][key][value_len u16][value]` per tag, tags sorted by key
//! then value. Length prefixes (rather than separators) mean no byte value
//! is forbidden in names or tags, and two keys are the same series exactly
//! when their bytes are equal: a lookup is one hash and one `memcmp`.
//!
//! The key is built into a reused scratch buffer for every point and copied
//! to the heap only when a new series is stored.

use sonde_proto::tags::{self, TagSpan};
use sonde_proto::TagSyntax;

use crate::error::RecordError;

/// Reusable buffers for building keys without allocating per point.
#[derive(Debug, Default)]
pub struct KeyBuilder {
    spans: Vec<TagSpan>,
    order: Vec<u16>,
    buf: Vec<u8>,
}

fn push_len(buf: &mut Vec<u8>, len: usize) -> Result<(), RecordError> {
    let len = u16::try_from(len).map_err(|_| RecordError::FieldTooLong)?;
    buf.extend_from_slice(&len.to_le_bytes());
    Ok(())
}

impl KeyBuilder {
    /// Builds the key for `name` with `raw_tags`, returning it borrowed from
    /// the builder.
    ///
    /// # Errors
    ///
    /// [`RecordError::BadTags`] when the tag string cannot be split, and
    /// [`RecordError::FieldTooLong`] when a name, tag or the tag count
    /// exceeds 65535.
    pub fn build(
        &mut self,
        kind: u8,
        name: &[u8],
        raw_tags: &[u8],
        syntax: TagSyntax,
    ) -> Result<&[u8], RecordError> {
        tags::split(raw_tags, syntax, &mut self.spans)?;
        let spans = &self.spans;
        let pair = |i: u16| {
            let s = spans[usize::from(i)];
            (s.key(raw_tags), s.value(raw_tags))
        };
        self.order.clear();
        let count = u16::try_from(spans.len()).map_err(|_| RecordError::FieldTooLong)?;
        self.order.extend(0..count);
        // Clients almost always send tags in the same order, and usually
        // sorted: check first so the common case costs one pass.
        if !self.order.windows(2).all(|w| pair(w[0]) <= pair(w[1])) {
            self.order.sort_unstable_by(|&a, &b| pair(a).cmp(&pair(b)));
        }
        self.buf.clear();
        self.buf.push(kind);
        push_len(&mut self.buf, name.len())?;
        self.buf.extend_from_slice(name);
        push_len(&mut self.buf, spans.len())?;
        for &i in &self.order {
            let (k, v) = pair(i);
            push_len(&mut self.buf, k.len())?;
            self.buf.extend_from_slice(k);
            push_len(&mut self.buf, v.len())?;
            self.buf.extend_from_slice(v);
        }
        Ok(&self.buf)
    }
}

/// Lays out the key of a series from tags already split, sorting them.
/// For tests and tools; the receive path uses [`KeyBuilder::build`].
///
/// # Panics
///
/// When a name, tag or the tag count exceeds 65535 bytes.
pub fn encode(kind: u8, name: &str, tags: &[(&str, &str)]) -> Vec<u8> {
    let mut sorted = tags.to_vec();
    sorted.sort_unstable();
    let mut buf = vec![kind];
    let len = |n: usize| {
        u16::try_from(n)
            .expect("field over 65535 bytes")
            .to_le_bytes()
    };
    buf.extend_from_slice(&len(name.len()));
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(&len(sorted.len()));
    for (k, v) in sorted {
        buf.extend_from_slice(&len(k.len()));
        buf.extend_from_slice(k.as_bytes());
        buf.extend_from_slice(&len(v.len()));
        buf.extend_from_slice(v.as_bytes());
    }
    buf
}

impl KeyBuilder {
    /// The key the last successful [`KeyBuilder::build`] returned.
    pub(crate) fn key(&self) -> &[u8] {
        &self.buf
    }
}

/// Hashes a key. One fixed seed per process, so hashes computed on any
/// worker agree when shards are merged.
pub fn hash(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    hash_state().hash_one(key)
}

/// The process-wide hasher state behind [`hash`].
pub fn hash_state() -> &'static foldhash::quality::RandomState {
    static STATE: std::sync::OnceLock<foldhash::quality::RandomState> = std::sync::OnceLock::new();
    STATE.get_or_init(foldhash::quality::RandomState::default)
}

/// The canonical key at the front of `bytes`: a key alone, or a key
/// followed by other data (a shard's stored series: the key, then the
/// client's first spelling). Walks the length prefixes, so it costs a few
/// reads per tag: for the flusher and the sinks, never per point. Returns
/// `bytes` when they do not start with a well-formed key.
pub fn canonical(bytes: &[u8]) -> &[u8] {
    let end = (|| {
        let (_kind, mut rest) = bytes.split_first()?;
        take_field(&mut rest)?;
        let (count, tail) = rest.split_first_chunk::<2>()?;
        rest = tail;
        for _ in 0..u16::from_le_bytes(*count) {
            take_field(&mut rest)?;
            take_field(&mut rest)?;
        }
        Some(bytes.len() - rest.len())
    })();
    end.map_or(bytes, |end| &bytes[..end])
}

/// Bytes after the spelling's tags in a stored series: the key's length.
const STORED_TRAILER: usize = 4;

/// Lays out a series as a shard stores it, in one allocation:
/// `[key][syntax][raw tags][key_len u32]`. The key comes first, so the
/// allocation can be shared as the series key with the flusher and the
/// output (which read it through [`canonical`]); the client's first
/// spelling follows, so the receive path matches it with no second
/// pointer. The spelling's kind and name are the key's own.
pub(crate) fn stored(key: &[u8], syntax: u8, raw_tags: &[u8]) -> std::sync::Arc<[u8]> {
    let mut buf = Vec::with_capacity(key.len() + 1 + raw_tags.len() + STORED_TRAILER);
    buf.extend_from_slice(key);
    buf.push(syntax);
    buf.extend_from_slice(raw_tags);
    buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
    buf.into()
}

/// A stored series split into its key, the spelling's syntax byte and the
/// spelling's raw tags. Constant time: the key length is in the trailer.
///
/// # Panics
///
/// When `stored` was not made by [`stored`].
#[inline]
pub(crate) fn stored_parts(stored: &[u8]) -> (&[u8], u8, &[u8]) {
    let (rest, trailer) = stored.split_at(stored.len() - STORED_TRAILER);
    let key_len = u32::from_le_bytes(trailer.try_into().unwrap_or_default()) as usize;
    let (key, spelling) = rest.split_at(key_len);
    (key, spelling[0], &spelling[1..])
}

/// A key split back into its parts.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// The kind byte.
    pub kind: u8,
    /// The metric name.
    pub name: &'a [u8],
    /// The tags, sorted.
    pub tags: Vec<(&'a [u8], &'a [u8])>,
}

/// Takes one length-prefixed field off the front of `rest`.
pub(crate) fn take_field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, tail) = rest.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_le_bytes(*len));
    let (field, tail) = tail.split_at_checked(len)?;
    *rest = tail;
    Some(field)
}

/// A key's name and its tag section (the pairs after the tag count), or
/// `None` when the key is too short for its own length prefixes.
pub(crate) fn split_name(key: &[u8]) -> Option<(&[u8], &[u8])> {
    let (_kind, mut rest) = key.split_first()?;
    let name = take_field(&mut rest)?;
    let (_count, tags) = rest.split_first_chunk::<2>()?;
    Some((name, tags))
}

/// Splits a key built by [`KeyBuilder::build`]. Returns `None` for bytes
/// that are not such a key.
pub fn decode(key: &[u8]) -> Option<Decoded<'_>> {
    let (&kind, mut rest) = key.split_first()?;
    let name = take_field(&mut rest)?;
    let (count, tail) = rest.split_first_chunk::<2>()?;
    rest = tail;
    let count = u16::from_le_bytes(*count);
    let mut tags = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let k = take_field(&mut rest)?;
        let v = take_field(&mut rest)?;
        tags.push((k, v));
    }
    rest.is_empty().then_some(Decoded { kind, name, tags })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_order_does_not_change_the_key() {
        let mut b = KeyBuilder::default();
        let a = b
            .build(0, b"m", b"host=a|dc=x", TagSyntax::Msgpack)
            .unwrap()
            .to_vec();
        let c = b
            .build(0, b"m", b"dc=x host=a", TagSyntax::Msgpack)
            .unwrap()
            .to_vec();
        assert_eq!(a, c);
        assert_eq!(hash(&a), hash(&c));
    }

    #[test]
    fn kind_name_and_tag_values_all_distinguish_keys() {
        let mut b = KeyBuilder::default();
        let base = b
            .build(0, b"m", b"a=1", TagSyntax::Msgpack)
            .unwrap()
            .to_vec();
        for other in [
            b.build(1, b"m", b"a=1", TagSyntax::Msgpack)
                .unwrap()
                .to_vec(),
            b.build(0, b"n", b"a=1", TagSyntax::Msgpack)
                .unwrap()
                .to_vec(),
            b.build(0, b"m", b"a=2", TagSyntax::Msgpack)
                .unwrap()
                .to_vec(),
            b.build(0, b"m", b"", TagSyntax::Msgpack).unwrap().to_vec(),
            // Separators cannot smuggle one layout into another.
            b.build(0, b"m", b"a=1|b=", TagSyntax::Msgpack)
                .unwrap()
                .to_vec(),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn keys_decode_to_sorted_tags() {
        let mut b = KeyBuilder::default();
        let key = b
            .build(8, b"web.hits", b"z:1,urgent,a:b", TagSyntax::DogStatsd)
            .unwrap();
        let d = decode(key).unwrap();
        assert_eq!(d.kind, 8);
        assert_eq!(d.name, b"web.hits");
        assert_eq!(
            d.tags,
            vec![(&b"a"[..], &b"b"[..]), (b"urgent", b""), (b"z", b"1")]
        );
    }

    #[test]
    fn encoding_split_tags_gives_the_key_the_receive_path_builds() {
        let mut b = KeyBuilder::default();
        let built = b
            .build(3, b"m", b"z=1|a=b", TagSyntax::Msgpack)
            .unwrap()
            .to_vec();
        assert_eq!(encode(3, "m", &[("z", "1"), ("a", "b")]), built);
    }

    #[test]
    fn a_stored_series_keeps_its_key_in_front_and_its_spelling_behind() {
        let mut b = KeyBuilder::default();
        let key = b
            .build(2, b"m", b"z=1|a=b", TagSyntax::Msgpack)
            .unwrap()
            .to_vec();
        let stored = stored(&key, 7, b"z=1|a=b");
        assert_eq!(stored_parts(&stored), (&key[..], 7, &b"z=1|a=b"[..]));
        assert_eq!(canonical(&stored), &key[..]);
        assert_eq!(canonical(&key), &key[..]);
        // Empty tags and an empty spelling.
        let bare = b.build(2, b"m", b"", TagSyntax::Msgpack).unwrap().to_vec();
        let stored = super::stored(&bare, 0, b"");
        assert_eq!(stored_parts(&stored), (&bare[..], 0, &b""[..]));
        assert_eq!(canonical(&stored), &bare[..]);
    }

    #[test]
    fn unsplittable_tags_are_a_drop_reason() {
        let mut b = KeyBuilder::default();
        assert_eq!(
            b.build(0, b"m", b"novalue", TagSyntax::Msgpack),
            Err(RecordError::BadTags)
        );
    }

    #[test]
    fn decode_rejects_truncated_keys() {
        let mut b = KeyBuilder::default();
        let key = b
            .build(0, b"m", b"a=1", TagSyntax::Msgpack)
            .unwrap()
            .to_vec();
        for cut in 0..key.len() {
            assert_eq!(decode(&key[..cut]), None);
        }
    }
}
