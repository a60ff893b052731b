//! Splitting raw tag strings into key/value spans.
//!
//! Parsers hand tags on as the raw bytes they received; the aggregator
//! splits them only when it needs the pairs (to build a series key). Spans
//! are offsets rather than slices so that the caller can keep one
//! `Vec<TagSpan>` for its whole life and reuse it for every point without a
//! lifetime tying the vector to one datagram.
//!
//! Two syntaxes exist:
//!
//! * [`TagSyntax::Msgpack`]: `host=a|dc=x` or `host=a dc=x`; every tag must
//!   have `=` and a non-empty key; the value may be empty and may itself
//!   contain `=`.
//! * [`TagSyntax::DogStatsd`]: `env:prod,urgent`; a tag without `:` has an
//!   empty value; the key must not be empty.
//!
//! In both, empty segments (leading, trailing or doubled separators) are
//! skipped, so `|a=1||b=2|` is two tags.
//!
//! [`split`] searches delimiters with `memchr`; [`split_scalar`] is the
//! byte-at-a-time reference it is tested against.

use crate::TagSyntax;
use std::fmt;

/// One tag as byte offsets into the raw tag string it was split from.
///
/// A tag without a value has `value_start == value_end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagSpan {
    /// Offset of the key's first byte.
    pub key_start: u32,
    /// Offset one past the key's last byte.
    pub key_end: u32,
    /// Offset of the value's first byte.
    pub value_start: u32,
    /// Offset one past the value's last byte.
    pub value_end: u32,
}

impl TagSpan {
    /// The key's bytes in `raw`, which must be the string this span was
    /// split from.
    ///
    /// # Panics
    ///
    /// If `raw` is shorter than the span, i.e. not the string it came from.
    #[inline]
    pub fn key<'a>(&self, raw: &'a [u8]) -> &'a [u8] {
        &raw[self.key_start as usize..self.key_end as usize]
    }

    /// The value's bytes in `raw` (possibly empty), which must be the string
    /// this span was split from.
    ///
    /// # Panics
    ///
    /// If `raw` is shorter than the span, i.e. not the string it came from.
    #[inline]
    pub fn value<'a>(&self, raw: &'a [u8]) -> &'a [u8] {
        &raw[self.value_start as usize..self.value_end as usize]
    }
}

/// A tag string that cannot be split: a msgpack tag without `=`, a tag with
/// an empty key, or a string too long for `u32` offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadTags;

impl fmt::Display for BadTags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tag string cannot be split")
    }
}

impl std::error::Error for BadTags {}

/// Clears `out` and appends one span per tag of `raw`, in input order.
///
/// # Errors
///
/// [`BadTags`] if any tag breaks the rules of `syntax` (see the module doc)
/// or `raw` is longer than `u32::MAX`. `out` then holds the spans of the
/// tags before the bad one; callers drop the whole point.
pub fn split(raw: &[u8], syntax: TagSyntax, out: &mut Vec<TagSpan>) -> Result<(), BadTags> {
    out.clear();
    if u32::try_from(raw.len()).is_err() {
        return Err(BadTags);
    }
    // One monomorphic loop per syntax keeps the delimiter search inlined.
    match syntax {
        TagSyntax::Msgpack => split_memchr::<true>(raw, out),
        TagSyntax::DogStatsd => split_memchr::<false>(raw, out),
    }
}

fn split_memchr<const MSGPACK: bool>(raw: &[u8], out: &mut Vec<TagSpan>) -> Result<(), BadTags> {
    let kv_sep = if MSGPACK { b'=' } else { b':' };
    let mut start = 0;
    while start < raw.len() {
        let rest = &raw[start..];
        let found = if MSGPACK {
            memchr::memchr2(b'|', b' ', rest)
        } else {
            memchr::memchr(b',', rest)
        };
        let end = start + found.unwrap_or(rest.len());
        if end > start {
            let tag = match memchr::memchr(kv_sep, &raw[start..end]) {
                Some(0) => return Err(BadTags),
                Some(i) => span(start, start + i, start + i + 1, end),
                None if MSGPACK => return Err(BadTags),
                None => span(start, end, end, end),
            };
            out.push(tag);
        }
        start = end + 1;
    }
    Ok(())
}

/// Same contract as [`split`], written as a plain byte-by-byte loop.
///
/// Kept as the obviously correct reference that [`split`] (and any future
/// SIMD version) is property-tested against; not meant for the hot path.
///
/// # Errors
///
/// Exactly those of [`split`].
pub fn split_scalar(raw: &[u8], syntax: TagSyntax, out: &mut Vec<TagSpan>) -> Result<(), BadTags> {
    out.clear();
    if u32::try_from(raw.len()).is_err() {
        return Err(BadTags);
    }
    let (kv_sep, msgpack) = match syntax {
        TagSyntax::Msgpack => (b'=', true),
        TagSyntax::DogStatsd => (b':', false),
    };
    let is_separator = |b: u8| {
        if msgpack {
            b == b'|' || b == b' '
        } else {
            b == b','
        }
    };
    let mut seg_start = 0;
    let mut sep_at: Option<usize> = None;
    // One extra iteration at i == len closes the last segment.
    for i in 0..=raw.len() {
        let at_end = i == raw.len() || is_separator(raw[i]);
        if !at_end {
            if sep_at.is_none() && raw[i] == kv_sep {
                sep_at = Some(i);
            }
            continue;
        }
        if i > seg_start {
            match sep_at {
                Some(s) if s == seg_start => return Err(BadTags),
                Some(s) => out.push(span(seg_start, s, s + 1, i)),
                None if msgpack => return Err(BadTags),
                None => out.push(span(seg_start, i, i, i)),
            }
        }
        seg_start = i + 1;
        sep_at = None;
    }
    Ok(())
}

/// Builds a span from offsets already known to fit in `u32`: both splitters
/// reject longer input before calling this.
#[inline]
fn span(key_start: usize, key_end: usize, value_start: usize, value_end: usize) -> TagSpan {
    TagSpan {
        key_start: key_start as u32,
        key_end: key_end as u32,
        value_start: value_start as u32,
        value_end: value_end as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Pairs = Vec<(String, String)>;

    /// Runs both splitters, checks they agree, and returns the pairs as text.
    fn pairs(raw: &str, syntax: TagSyntax) -> Result<Pairs, BadTags> {
        let mut fast = Vec::new();
        let mut scalar = Vec::new();
        let fast_result = split(raw.as_bytes(), syntax, &mut fast);
        let scalar_result = split_scalar(raw.as_bytes(), syntax, &mut scalar);
        assert_eq!(fast_result, scalar_result, "{raw:?}");
        assert_eq!(fast, scalar, "{raw:?}");
        fast_result?;
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        Ok(fast
            .iter()
            .map(|s| (text(s.key(raw.as_bytes())), text(s.value(raw.as_bytes()))))
            .collect())
    }

    fn expect(list: &[(&str, &str)]) -> Result<Pairs, BadTags> {
        Ok(list
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    #[test]
    fn msgpack_tags_split_on_pipes_and_spaces() {
        assert_eq!(
            pairs("host=a|dc=x env=prod", TagSyntax::Msgpack),
            expect(&[("host", "a"), ("dc", "x"), ("env", "prod")])
        );
    }

    #[test]
    fn msgpack_tags_skip_empty_segments() {
        assert_eq!(
            pairs("|a=1|| b=2 |", TagSyntax::Msgpack),
            expect(&[("a", "1"), ("b", "2")])
        );
        assert_eq!(pairs("", TagSyntax::Msgpack), expect(&[]));
        assert_eq!(pairs("| |", TagSyntax::Msgpack), expect(&[]));
    }

    #[test]
    fn msgpack_tag_value_may_be_empty_or_contain_equals() {
        assert_eq!(
            pairs("k=|q=a=b", TagSyntax::Msgpack),
            expect(&[("k", ""), ("q", "a=b")])
        );
    }

    #[test]
    fn msgpack_tag_without_equals_or_key_is_rejected() {
        assert_eq!(pairs("a=1|urgent", TagSyntax::Msgpack), Err(BadTags));
        assert_eq!(pairs("=v", TagSyntax::Msgpack), Err(BadTags));
        assert_eq!(pairs("a=1 =v", TagSyntax::Msgpack), Err(BadTags));
    }

    #[test]
    fn dogstatsd_tags_split_on_commas_with_valueless_tags() {
        assert_eq!(
            pairs("env:prod,urgent,,url:http://x", TagSyntax::DogStatsd),
            expect(&[("env", "prod"), ("urgent", ""), ("url", "http://x")])
        );
    }

    #[test]
    fn dogstatsd_keeps_pipes_equals_and_spaces_inside_tags() {
        assert_eq!(
            pairs("a b:c=d|e", TagSyntax::DogStatsd),
            expect(&[("a b", "c=d|e")])
        );
    }

    #[test]
    fn dogstatsd_tag_with_empty_key_is_rejected() {
        assert_eq!(pairs(":v", TagSyntax::DogStatsd), Err(BadTags));
        assert_eq!(pairs("a:1,:", TagSyntax::DogStatsd), Err(BadTags));
    }

    #[test]
    fn valueless_span_is_empty_at_the_end_of_its_key() {
        let mut out = Vec::new();
        split(b"ab,c:d", TagSyntax::DogStatsd, &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                TagSpan {
                    key_start: 0,
                    key_end: 2,
                    value_start: 2,
                    value_end: 2
                },
                TagSpan {
                    key_start: 3,
                    key_end: 4,
                    value_start: 5,
                    value_end: 6
                },
            ]
        );
    }

    #[test]
    fn split_clears_what_the_vector_held_before() {
        let mut out = vec![TagSpan {
            key_start: 9,
            key_end: 9,
            value_start: 9,
            value_end: 9,
        }];
        split(b"a=1", TagSyntax::Msgpack, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        split_scalar(b"", TagSyntax::Msgpack, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn bad_tags_message_is_for_a_person() {
        assert_eq!(BadTags.to_string(), "tag string cannot be split");
    }

    fn syntax() -> impl Strategy<Value = TagSyntax> {
        prop_oneof![Just(TagSyntax::Msgpack), Just(TagSyntax::DogStatsd)]
    }

    /// Bytes drawn mostly from the delimiters, so that every rule is hit.
    fn tag_bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                Just(b'|'),
                Just(b' '),
                Just(b'='),
                Just(b','),
                Just(b':'),
                Just(b'a'),
                any::<u8>()
            ],
            0..40,
        )
    }

    proptest! {
        #[test]
        fn fast_and_scalar_splitters_agree_on_arbitrary_bytes(raw in tag_bytes(), syntax in syntax()) {
            let mut fast = Vec::new();
            let mut scalar = Vec::new();
            let fast_result = split(&raw, syntax, &mut fast);
            let scalar_result = split_scalar(&raw, syntax, &mut scalar);
            prop_assert_eq!(fast_result, scalar_result);
            prop_assert_eq!(fast, scalar);
        }

        #[test]
        fn joined_msgpack_pairs_split_back_into_themselves(
            list in proptest::collection::vec(("[a-z.]{1,5}", "[a-z=:]{0,5}"), 0..6),
            sep in prop_oneof![Just("|"), Just(" ")],
        ) {
            let raw = list.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(sep);
            prop_assert_eq!(pairs(&raw, TagSyntax::Msgpack), Ok(list));
        }
    }
}
