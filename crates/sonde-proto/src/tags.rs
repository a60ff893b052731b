//! Splitting raw tag strings into key/value spans.
//!
//! Parsers hand tags on as the raw bytes they received; the aggregator
//! splits them only when it needs the pairs (to build a series key). Spans
//! are offsets rather than slices so that the caller can keep one
//! `Vec<TagSpan>` for its whole life and reuse it for every point without a
//! lifetime tying the vector to one datagram.
//!
//! Three syntaxes exist:
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
//! * [`TagSyntax::Prefixed`], which the agent's own inputs write: each
//!   tag's key and value after their lengths (LEB128 varints), any bytes;
//!   the key must not be empty, and a length past the end of the string
//!   (or over `u32`) is an error. Read by one loop, whatever
//!   the backend: there is no delimiter to search for.
//!
//! [`split`] finds the delimiters with the fastest [`Backend`] this CPU
//! has, chosen at run time: a SIMD structural index (AVX-512, AVX2 or SSE2
//! on x86-64, NEON on aarch64) or, elsewhere, `memchr`. [`split_scalar`] is the
//! byte-at-a-time reference that every backend is tested against.

use crate::TagSyntax;
use std::fmt;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod index;

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
/// Uses [`Backend::detected`] (the byte loop of [`split_scalar`] below 8
/// bytes, where it is faster); `out` is only grown, never shrunk, so a
/// vector kept across calls stops allocating once it has held the most tags
/// of any string.
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
    // The index has a fixed cost (it copies the partial last block into a
    // whole one), so below 8 bytes the byte loop is faster ("SIMD tag
    // splitting" in `docs/benchmarks/LOG.md` has the times by size).
    if raw.len() < 8 {
        return scalar_loop(raw, syntax, out);
    }
    // SAFETY: `detected` only returns backends this CPU supports.
    unsafe { run(Backend::detected(), raw, syntax, out) }
}

/// Same contract as [`split`], with the delimiter search of `backend`; for
/// benchmarks and tests that compare the backends.
///
/// # Errors
///
/// Exactly those of [`split`].
///
/// # Panics
///
/// If `backend` is not [available](Backend::is_available) on this CPU.
pub fn split_with(
    backend: Backend,
    raw: &[u8],
    syntax: TagSyntax,
    out: &mut Vec<TagSpan>,
) -> Result<(), BadTags> {
    assert!(
        backend.is_available(),
        "tag splitting backend {backend:?} is not supported by this CPU"
    );
    out.clear();
    if u32::try_from(raw.len()).is_err() {
        return Err(BadTags);
    }
    // SAFETY: checked just above.
    unsafe { run(backend, raw, syntax, out) }
}

/// A delimiter search that [`split`] and [`crate::statsd::parse`] can use.
///
/// Only the variants of the target architecture exist; which of them this
/// CPU supports is known at run time ([`Backend::is_available`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `memchr` for each separator: the portable fallback on architectures
    /// without a SIMD backend here ([`crate::statsd::parse_reference`] for
    /// StatsD).
    Memchr,
    /// 16-byte SSE2 compares, four per 64-byte block (every x86-64 CPU).
    #[cfg(target_arch = "x86_64")]
    Sse2,
    /// 32-byte AVX2 compares, two per 64-byte block; also needs BMI1,
    /// BMI2, LZCNT and POPCNT, which every AVX2 CPU has (BMI2 and LZCNT
    /// for the StatsD line walk compiled with them).
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// 64-byte AVX-512BW compares into mask registers, one per block (with
    /// AVX-512F and what [`Backend::Avx2`] needs; offered only on CPUs with
    /// AVX-512 VBMI2, Ice Lake, Zen 4 and later). Tag splitting only:
    /// StatsD parsing runs its AVX2 index on these CPUs, since every CPU
    /// with AVX-512BW has AVX2.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// 16-byte NEON compares (every aarch64 CPU).
    #[cfg(target_arch = "aarch64")]
    Neon,
}

impl Backend {
    /// Every backend compiled for this architecture, available or not.
    pub const ALL: &'static [Backend] = &[
        Backend::Memchr,
        #[cfg(target_arch = "x86_64")]
        Backend::Sse2,
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2,
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512,
        #[cfg(target_arch = "aarch64")]
        Backend::Neon,
    ];

    /// The fastest backend this CPU supports: the one [`split`] and
    /// [`crate::statsd::parse`] use.
    ///
    /// Cheap enough to call per split: `is_x86_feature_detected!` caches
    /// the CPUID result in a static after the first call.
    #[inline]
    pub fn detected() -> Backend {
        #[cfg(target_arch = "x86_64")]
        {
            if Backend::Avx512.is_available() {
                Backend::Avx512
            } else if Backend::Avx2.is_available() {
                Backend::Avx2
            } else {
                Backend::Sse2
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            Backend::Neon
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            Backend::Memchr
        }
    }

    /// Whether this CPU can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Memchr => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Sse2 => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => {
                std::is_x86_feature_detected!("avx2")
                    && std::is_x86_feature_detected!("bmi1")
                    && std::is_x86_feature_detected!("bmi2")
                    && std::is_x86_feature_detected!("lzcnt")
                    && std::is_x86_feature_detected!("popcnt")
            }
            #[cfg(target_arch = "x86_64")]
            // All that AVX2 needs too: StatsD parsing runs its AVX2 index
            // under this backend (every AVX-512 CPU has it; a hypervisor
            // could hide it).
            // VBMI2 is not used; it marks Ice Lake, Zen 4 and later, and
            // keeps out Skylake-SP, whose cores slow their clock for a while
            // after a 512-bit instruction: a split runs now and then (for a
            // new series), which is the worst case for that.
            Backend::Avx512 => {
                Backend::Avx2.is_available()
                    && std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512vbmi2")
            }
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => true,
        }
    }
}

/// Splits with `backend` into the already cleared `out`, for a `raw` known
/// to fit `u32` offsets. One monomorphic function per backend and syntax
/// keeps the delimiter search inlined into its loop.
///
/// # Safety
///
/// `backend` must be [available](Backend::is_available).
#[inline]
unsafe fn run(
    backend: Backend,
    raw: &[u8],
    syntax: TagSyntax,
    out: &mut Vec<TagSpan>,
) -> Result<(), BadTags> {
    if syntax == TagSyntax::Prefixed {
        return split_prefixed(raw, out);
    }
    let msgpack = syntax == TagSyntax::Msgpack;
    match (backend, msgpack) {
        (Backend::Memchr, true) => split_memchr::<true>(raw, out),
        (Backend::Memchr, false) => split_memchr::<false>(raw, out),
        #[cfg(target_arch = "x86_64")]
        (Backend::Sse2, true) => index::split_sse2::<true>(raw, out),
        #[cfg(target_arch = "x86_64")]
        (Backend::Sse2, false) => index::split_sse2::<false>(raw, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller promises that the backend is available.
        (Backend::Avx2, true) => unsafe { index::split_avx2::<true>(raw, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Backend::Avx2, false) => unsafe { index::split_avx2::<false>(raw, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Backend::Avx512, true) => unsafe { index::split_avx512::<true>(raw, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Backend::Avx512, false) => unsafe { index::split_avx512::<false>(raw, out) },
        #[cfg(target_arch = "aarch64")]
        (Backend::Neon, true) => index::split_neon::<true>(raw, out),
        #[cfg(target_arch = "aarch64")]
        (Backend::Neon, false) => index::split_neon::<false>(raw, out),
    }
}

/// Splits a [`TagSyntax::Prefixed`] string into the already cleared
/// `out`, for a `raw` known to fit `u32` offsets.
fn split_prefixed(raw: &[u8], out: &mut Vec<TagSpan>) -> Result<(), BadTags> {
    let mut at = 0;
    while at < raw.len() {
        let (key_start, key_end) = prefixed_field(raw, at)?;
        if key_start == key_end {
            return Err(BadTags);
        }
        let (value_start, value_end) = prefixed_field(raw, key_end)?;
        out.push(span(key_start, key_end, value_start, value_end));
        at = value_end;
    }
    Ok(())
}

/// The field whose length is the varint at `at`: its start and end.
#[inline]
fn prefixed_field(raw: &[u8], at: usize) -> Result<(usize, usize), BadTags> {
    let mut len: u64 = 0;
    let mut i = at;
    loop {
        let b = *raw.get(i).ok_or(BadTags)?;
        let shift = 7 * (i - at);
        if shift > 28 {
            return Err(BadTags);
        }
        len |= u64::from(b & 0x7f) << shift;
        i += 1;
        if b < 0x80 {
            break;
        }
    }
    let end = i as u64 + len;
    if end > raw.len() as u64 {
        return Err(BadTags);
    }
    Ok((i, end as usize))
}

/// Appends `bytes` to `out` as one field of a [`TagSyntax::Prefixed`]
/// string: its length as a LEB128 varint, then the bytes.
#[inline]
pub fn push_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut n = bytes.len();
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out.extend_from_slice(bytes);
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
/// Kept as the obviously correct reference that every [`Backend`] is
/// tested against; not meant for the hot path.
///
/// # Errors
///
/// Exactly those of [`split`].
pub fn split_scalar(raw: &[u8], syntax: TagSyntax, out: &mut Vec<TagSpan>) -> Result<(), BadTags> {
    out.clear();
    if u32::try_from(raw.len()).is_err() {
        return Err(BadTags);
    }
    scalar_loop(raw, syntax, out)
}

/// The loop of [`split_scalar`], into the already cleared `out`, for a
/// `raw` known to fit `u32` offsets.
fn scalar_loop(raw: &[u8], syntax: TagSyntax, out: &mut Vec<TagSpan>) -> Result<(), BadTags> {
    let (kv_sep, msgpack) = match syntax {
        TagSyntax::Msgpack => (b'=', true),
        TagSyntax::DogStatsd => (b':', false),
        TagSyntax::Prefixed => return split_prefixed(raw, out),
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

    /// The backends this CPU can run, each called directly.
    fn backends() -> impl Iterator<Item = Backend> {
        Backend::ALL.iter().copied().filter(|b| b.is_available())
    }

    /// Checks that [`split`] and every available backend give exactly what
    /// [`split_scalar`] gives, spans and result, and returns the result.
    fn agree(raw: &[u8], syntax: TagSyntax) -> Result<Vec<TagSpan>, BadTags> {
        let mut expected = Vec::new();
        let expected_result = split_scalar(raw, syntax, &mut expected);
        let mut got = Vec::new();
        let result = split(raw, syntax, &mut got);
        assert_eq!(
            (result, &got),
            (expected_result, &expected),
            "split, {syntax:?} {raw:?}"
        );
        for backend in backends() {
            let result = split_with(backend, raw, syntax, &mut got);
            assert_eq!(
                (result, &got),
                (expected_result, &expected),
                "{backend:?}, {syntax:?} {:?}",
                String::from_utf8_lossy(raw)
            );
        }
        expected_result.map(|()| expected)
    }

    /// Runs every splitter, checks they agree, and returns the pairs as text.
    fn pairs(raw: &str, syntax: TagSyntax) -> Result<Pairs, BadTags> {
        let spans = agree(raw.as_bytes(), syntax)?;
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        Ok(spans
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
    fn prefixed_tags_split_by_their_lengths_and_keep_any_byte() {
        let mut raw = Vec::new();
        for (k, v) in [("a:b,c", "x|y=z"), ("k", ""), (" ", "\u{e9}")] {
            push_prefixed(&mut raw, k.as_bytes());
            push_prefixed(&mut raw, v.as_bytes());
        }
        let raw = String::from_utf8(raw).unwrap();
        assert_eq!(
            pairs(&raw, TagSyntax::Prefixed),
            expect(&[("a:b,c", "x|y=z"), ("k", ""), (" ", "\u{e9}")])
        );
        assert_eq!(pairs("", TagSyntax::Prefixed), expect(&[]));
        // Lengths of two and three bytes.
        for n in [127, 128, 300, 16_383, 16_384, 70_000] {
            let (mut raw, mut spans) = (Vec::new(), Vec::new());
            push_prefixed(&mut raw, &vec![b'k'; n]);
            push_prefixed(&mut raw, b"v");
            split(&raw, TagSyntax::Prefixed, &mut spans).unwrap();
            assert_eq!(spans.len(), 1);
            assert_eq!(spans[0].key(&raw).len(), n);
            assert_eq!(spans[0].value(&raw), b"v");
        }
    }

    #[test]
    fn prefixed_tags_cut_short_or_with_an_empty_key_are_rejected() {
        let bad: [&[u8]; 7] = [
            b"\x01k",                          // no value
            b"\x01k\x02v",                     // a value shorter than its length
            b"\x05key",                        // a key shorter than its length
            b"\x00\x01v",                      // an empty key
            b"\x80",                           // a length cut short
            b"\x01k\x01v\x01",                 // a second tag cut short
            b"\xff\xff\xff\xff\xff\x01k\x01v", // a length over 35 bits
        ];
        for raw in bad {
            let mut spans = Vec::new();
            assert_eq!(
                split(raw, TagSyntax::Prefixed, &mut spans),
                Err(BadTags),
                "{raw:?}"
            );
            assert_eq!(agree(raw, TagSyntax::Prefixed), Err(BadTags), "{raw:?}");
        }
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

    #[test]
    fn a_simd_backend_is_available_and_tested_on_this_cpu() {
        #[cfg(target_arch = "x86_64")]
        assert!(backends().any(|b| b == Backend::Sse2));
        #[cfg(target_arch = "aarch64")]
        assert!(backends().any(|b| b == Backend::Neon));
        assert!(Backend::detected().is_available());
        assert!(backends().any(|b| b == Backend::detected()));
    }

    #[test]
    fn backends_agree_with_one_delimiter_at_every_position_around_blocks() {
        for len in [1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200] {
            for at in 0..len {
                for delimiter in *b"| =,:\n" {
                    let mut raw = vec![b'a'; len];
                    raw[at] = delimiter;
                    for syntax in [TagSyntax::Msgpack, TagSyntax::DogStatsd] {
                        let _ = agree(&raw, syntax);
                    }
                }
            }
        }
    }

    #[test]
    fn backends_agree_with_a_separator_and_a_key_value_separator_anywhere() {
        // Covers tags that straddle one or two block boundaries with their
        // `=` or `:` before, on, or after the boundary.
        for len in [33, 70, 130] {
            for sep_at in 0..len {
                for kv_at in 0..len {
                    let mut msgpack = vec![b'k'; len];
                    let mut dogstatsd = vec![b'k'; len];
                    msgpack[kv_at] = b'=';
                    dogstatsd[kv_at] = b':';
                    msgpack[sep_at] = b'|';
                    dogstatsd[sep_at] = b',';
                    let _ = agree(&msgpack, TagSyntax::Msgpack);
                    let _ = agree(&dogstatsd, TagSyntax::DogStatsd);
                }
            }
        }
    }

    #[test]
    fn backends_agree_on_empty_strings_and_runs_of_separators() {
        for len in 0..=140 {
            for (fill, syntax) in [
                (b'|', TagSyntax::Msgpack),
                (b' ', TagSyntax::Msgpack),
                (b',', TagSyntax::DogStatsd),
            ] {
                let raw = vec![fill; len];
                assert_eq!(agree(&raw, syntax).map(|s| s.len()), Ok(0));
            }
        }
    }

    #[test]
    fn backends_keep_equals_signs_inside_values_across_blocks() {
        let value = "a=b".repeat(40);
        let raw = format!("k={value}|j==|i= ");
        assert_eq!(
            pairs(&raw, TagSyntax::Msgpack),
            expect(&[("k", &value), ("j", "="), ("i", "")])
        );
        let raw = format!("k:{}:x,j::", value.replace('=', ":"));
        assert_eq!(pairs(&raw, TagSyntax::DogStatsd).map(|p| p.len()), Ok(2));
    }

    #[test]
    fn backends_reject_a_bad_tag_at_every_position_keeping_the_tags_before_it() {
        let good: Vec<String> = (0..24).map(|i| format!("key{i:02}=value_{i:04}")).collect();
        for bad in ["urgent", "=v", "=", "x"] {
            for at in 0..good.len() {
                let mut list = good.clone();
                list[at] = bad.to_string();
                let raw = list.join("|");
                let mut out = Vec::new();
                let result = split(raw.as_bytes(), TagSyntax::Msgpack, &mut out);
                assert_eq!((result, out.len()), (Err(BadTags), at), "{raw}");
                assert_eq!(agree(raw.as_bytes(), TagSyntax::Msgpack), Err(BadTags));
                let raw = list.join(",").replace('=', ":");
                if bad.starts_with('=') {
                    assert_eq!(agree(raw.as_bytes(), TagSyntax::DogStatsd), Err(BadTags));
                } else {
                    assert!(agree(raw.as_bytes(), TagSyntax::DogStatsd).is_ok());
                }
            }
        }
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
                Just(b'\n'),
                Just(b'a'),
                Just(b'a'),
                any::<u8>()
            ],
            0..300,
        )
    }

    /// Realistic tags with a few delimiters thrown in, so that long valid
    /// strings (many spans per block) are as common as early rejections.
    fn mostly_valid_tags() -> impl Strategy<Value = (Vec<u8>, TagSyntax)> {
        (
            proptest::collection::vec(("[a-z]{0,9}", "[a-z=:]{0,12}"), 0..24),
            prop_oneof![Just(("|", "=")), Just((" ", "=")), Just((",", ":"))],
        )
            .prop_map(|(list, (sep, kv))| {
                let raw = list
                    .iter()
                    .map(|(k, v)| format!("{k}{kv}{v}"))
                    .collect::<Vec<_>>()
                    .join(sep);
                let syntax = if kv == "=" {
                    TagSyntax::Msgpack
                } else {
                    TagSyntax::DogStatsd
                };
                (raw.into_bytes(), syntax)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn every_backend_agrees_with_the_scalar_loop_on_arbitrary_bytes(
            raw in tag_bytes(),
            syntax in syntax(),
        ) {
            let _ = agree(&raw, syntax);
        }

        #[test]
        fn every_backend_agrees_with_the_scalar_loop_on_mostly_valid_tags(
            (raw, syntax) in mostly_valid_tags(),
        ) {
            let _ = agree(&raw, syntax);
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
