//! The structural index behind [`super::parse`].
//!
//! # Design
//!
//! A datagram is classified in chunks of up to [`CHUNK`] bytes: each
//! 64-byte block is compared against `\n`, `|` and `:` in one pass, giving
//! one bit per byte in three `u64` masks. Lines and fields are then found
//! by asking for the next set bit of a mask (`trailing_zeros` of a word,
//! rarely more than one word away) instead of starting a `memchr` per
//! field. The walk is the same for every backend; only the mask building
//! differs between AVX2, SSE2 and NEON, each a [`Block`] of
//! [`crate::simd`], and the tests check each against a byte loop, and the
//! whole parser against [`super::parse_reference`].
//!
//! Hand-written SIMD, rather than `memchr`, because the line parser was
//! most of the hot path, and a large part of it was about eight `memchr`
//! calls per line, each a call and a set-up for a field of a few bytes
//! ("StatsD parsing on the structural index" in `docs/benchmarks/LOG.md` has
//! the instruction counts before and after, from
//! `scripts/callgrind-hot-path.sh`).
//!
//! `#` and `@` need no mask: they only mean something as the first byte of
//! a field, which the walk reads directly.

use super::{emit, event, kind_of, parse_reference, Extras};
use crate::simd::Block;
#[cfg(target_arch = "aarch64")]
use crate::simd::Neon;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Sse2};
use crate::{DropReason, PointSink};

/// Bytes classified before they are walked. A 1432-byte DogStatsD datagram
/// fits in one chunk; the three mask arrays (768 bytes) live on the stack
/// and are zeroed once per datagram.
pub(crate) const CHUNK: usize = 2048;
const WORDS: usize = CHUNK / 64;

/// One bit per byte of a chunk for each delimiter the line parser needs:
/// bit `i % 64` of word `i / 64` is byte `i`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Masks {
    nl: [u64; WORDS],
    pipe: [u64; WORDS],
    colon: [u64; WORDS],
}

impl Masks {
    fn new() -> Self {
        Masks {
            nl: [0; WORDS],
            pipe: [0; WORDS],
            colon: [0; WORDS],
        }
    }
}

/// Builds the masks of a chunk with the [`Block`] of one backend.
pub(crate) trait Classify: Block {
    /// Fills the first `chunk.len().div_ceil(64)` words of `masks`.
    ///
    /// # Safety
    ///
    /// `chunk.len() <= CHUNK`, and the CPU must have the target features of
    /// the implementation.
    unsafe fn chunk(chunk: &[u8], masks: &mut Masks);
}

/// The `\n`, `|` and `:` masks of the 64 bytes at `at`.
///
/// # Safety
///
/// `at` must be valid for reads of 64 bytes, and the CPU must have the
/// target features of `B`.
#[inline(always)]
unsafe fn block<B: Block>(at: *const u8) -> [u64; 3] {
    // SAFETY: the caller's promise.
    unsafe {
        let v = B::load(at);
        [v.mask([b'\n']), v.mask([b'|']), v.mask([b':'])]
    }
}

/// The body of every [`Classify::chunk`], inlined there so that the block
/// compares are compiled with that implementation's target features.
///
/// # Safety
///
/// As for [`Classify::chunk`].
#[inline(always)]
unsafe fn fill<C: Classify>(chunk: &[u8], masks: &mut Masks) {
    debug_assert!(chunk.len() <= CHUNK);
    let full = chunk.len() / 64;
    for w in 0..full.min(WORDS) {
        // SAFETY: `64 * w + 64 <= chunk.len()`; features as promised.
        let [nl, pipe, colon] = unsafe { block::<C>(chunk.as_ptr().add(64 * w)) };
        masks.nl[w] = nl;
        masks.pipe[w] = pipe;
        masks.colon[w] = colon;
    }
    let tail = chunk.len() % 64;
    if tail != 0 && full < WORDS {
        // The last, partial block is copied so that no read goes past the
        // slice; the NUL padding matches no delimiter.
        let mut buf = [0u8; 64];
        buf[..tail].copy_from_slice(&chunk[64 * full..]);
        // SAFETY: `buf` is 64 bytes; features as promised.
        let [nl, pipe, colon] = unsafe { block::<C>(buf.as_ptr()) };
        masks.nl[full] = nl;
        masks.pipe[full] = pipe;
        masks.colon[full] = colon;
    }
}

/// The masks of `chunk` built one byte at a time: the reference that every
/// backend's masks are tested against.
#[cfg(test)]
pub(crate) fn classify_scalar(chunk: &[u8]) -> Masks {
    let mut m = Masks::new();
    for (i, &b) in chunk.iter().enumerate() {
        let bit = 1u64 << (i % 64);
        match b {
            b'\n' => m.nl[i / 64] |= bit,
            b'|' => m.pipe[i / 64] |= bit,
            b':' => m.colon[i / 64] |= bit,
            _ => {}
        }
    }
    m
}

/// The masks of `chunk` built by `C`, for the tests.
///
/// # Safety
///
/// As for [`Classify::chunk`].
#[cfg(test)]
pub(crate) unsafe fn classify<C: Classify>(chunk: &[u8]) -> Masks {
    let mut m = Masks::new();
    // SAFETY: the caller's promise.
    unsafe { C::chunk(chunk, &mut m) };
    m
}

/// Parses `datagram` like [`super::parse_reference`], finding delimiters
/// with the masks of `C`.
///
/// # Safety
///
/// The CPU must have the target features of `C`.
#[inline(always)]
pub(crate) unsafe fn parse<'a, C: Classify>(datagram: &'a [u8], sink: &mut impl PointSink<'a>) {
    let mut masks = Masks::new();
    let mut rest = datagram;
    loop {
        let chunk = &rest[..rest.len().min(CHUNK)];
        // SAFETY: `chunk.len() <= CHUNK`; features as promised.
        unsafe { C::chunk(chunk, &mut masks) };
        if chunk.len() == rest.len() {
            walk(chunk, &masks, sink);
            return;
        }
        // Lines are independent: walk the whole lines of this chunk and
        // classify the rest again as the start of the next one.
        match last_newline(&masks) {
            Some(nl) => {
                walk(&chunk[..nl], &masks, sink);
                rest = &rest[nl + 1..];
            }
            None => {
                // One line longer than a chunk: rare enough for `memchr`.
                let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
                parse_reference(&rest[..end], sink);
                match rest.get(end + 1..) {
                    Some(after) => rest = after,
                    None => return,
                }
            }
        }
    }
}

/// The position of the last `\n` of a full chunk.
fn last_newline(masks: &Masks) -> Option<usize> {
    let w = masks.nl.iter().rposition(|&word| word != 0)?;
    Some(w * 64 + 63 - masks.nl[w].leading_zeros() as usize)
}

/// The set bits of one mask from a position on, in order, up to `end`.
///
/// # Design
///
/// A line's fields are found by taking the next set bit of the `|` (and
/// `:`) mask again and again. Searching afresh from the end of the last
/// field puts a load and two shifts on the path from one field
/// to the next; taking bits off a word already loaded (`bits &= bits - 1`)
/// leaves one instruction there ("StatsD fields taken off the mask word"
/// in `docs/benchmarks/LOG.md`).
struct Bits<'m> {
    mask: &'m [u64; WORDS],
    /// The word `bits` came from.
    w: usize,
    /// The bits of word `w` not taken yet.
    bits: u64,
    end: usize,
}

impl<'m> Bits<'m> {
    /// The bits of `mask` in `[from, end)`. `end` is at most the length of
    /// the classified text, so no word past the ones [`fill`] wrote is
    /// read, and `w % WORDS` never wraps: it only lets the compiler drop
    /// the bounds check.
    #[inline(always)]
    fn new(mask: &'m [u64; WORDS], from: usize, end: usize) -> Self {
        let w = from / 64;
        let bits = if from < end {
            mask[w % WORDS] & (u64::MAX << (from % 64))
        } else {
            0
        };
        Bits { mask, w, bits, end }
    }

    /// The next set position, or `end` when there is none before it.
    #[inline(always)]
    fn next(&mut self) -> usize {
        while self.bits == 0 {
            self.w += 1;
            if self.w * 64 >= self.end {
                return self.end;
            }
            self.bits = self.mask[self.w % WORDS];
        }
        let at = self.w * 64 + self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        at.min(self.end)
    }
}

/// Parses the lines of `text`, whose masks are `m`; the last line may end
/// without `\n`.
#[inline(always)]
fn walk<'a>(text: &'a [u8], m: &Masks, sink: &mut impl PointSink<'a>) {
    let len = text.len();
    let mut newlines = Bits::new(&m.nl, 0, len);
    let mut start = 0;
    while start < len {
        let nl = newlines.next();
        let end = if nl > start && text[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        if end > start {
            if let Err(reason) = line(text, m, start, end, sink) {
                sink.drop(reason);
            }
        }
        start = nl + 1;
    }
}

/// Parses the non-empty line `text[start..end]` (without its terminator),
/// with the checks of [`super::parse_line`] in the same order.
#[inline(always)]
fn line<'a>(
    text: &'a [u8],
    m: &Masks,
    start: usize,
    end: usize,
    sink: &mut impl PointSink<'a>,
) -> Result<(), DropReason> {
    let line = &text[start..end];
    if event::is_happening(line) {
        sink.event(line);
        return Ok(());
    }
    // The name ends at the first `:` before the first `|`.
    let mut pipes = Bits::new(&m.pipe, start, end);
    let pipe = pipes.next();
    if pipe == end {
        return Err(DropReason::MalformedLine);
    }
    let mut colons = Bits::new(&m.colon, start, pipe);
    let colon = colons.next();
    if colon == pipe {
        return Err(DropReason::MalformedLine);
    }
    if colon == start {
        return Err(DropReason::EmptyName);
    }
    let name = &text[start..colon];
    let values = &text[colon + 1..pipe];

    let mut field_end = pipes.next();
    let kind = kind_of(&text[pipe + 1..field_end])?;
    let mut extras = Extras::default();
    while field_end < end {
        let from = field_end + 1;
        field_end = pipes.next();
        extras.take(&text[from..field_end])?;
    }
    let several = || colons.next() != pipe;
    emit(kind, name, values, several, &extras, sink)
}

#[cfg(target_arch = "x86_64")]
impl Classify for Sse2 {
    #[inline]
    unsafe fn chunk(chunk: &[u8], masks: &mut Masks) {
        // SAFETY: the caller's promise; SSE2 needs no more.
        unsafe { fill::<Self>(chunk, masks) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    #[target_feature(enable = "avx2")]
    unsafe fn chunk(chunk: &[u8], masks: &mut Masks) {
        // SAFETY: the caller's promise, which includes AVX2.
        unsafe { fill::<Self>(chunk, masks) }
    }
}

#[cfg(target_arch = "aarch64")]
impl Classify for Neon {
    #[inline]
    unsafe fn chunk(chunk: &[u8], masks: &mut Masks) {
        // SAFETY: the caller's promise; NEON needs no more.
        unsafe { fill::<Self>(chunk, masks) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every backend this CPU has, with its masks of `chunk`.
    fn every_backend(chunk: &[u8]) -> Vec<(&'static str, Masks)> {
        let mut out = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: SSE2 is part of the x86_64 baseline, so every such CPU
            // has it.
            out.push(("sse2", unsafe { classify::<Sse2>(chunk) }));
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was detected on this CPU just above.
                out.push(("avx2", unsafe { classify::<Avx2>(chunk) }));
            }
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline.
        out.push(("neon", unsafe { classify::<Neon>(chunk) }));
        out
    }

    #[test]
    fn masks_mark_exactly_the_three_delimiters_at_every_position() {
        for len in [0, 1, 63, 64, 65, 127, 128, 1000, CHUNK - 1, CHUNK] {
            for at in [0, len / 2, len.saturating_sub(1)] {
                for d in [b'\n', b'|', b':'] {
                    let mut chunk = vec![b'a'; len];
                    if len > 0 {
                        chunk[at] = d;
                    }
                    let want = classify_scalar(&chunk);
                    assert_eq!(
                        want.nl
                            .iter()
                            .chain(&want.pipe)
                            .chain(&want.colon)
                            .map(|w| w.count_ones())
                            .sum::<u32>(),
                        u32::from(len > 0)
                    );
                    for (name, got) in every_backend(&chunk) {
                        assert_eq!(got, want, "{name} len {len} at {at} {d}");
                    }
                }
            }
        }
    }

    #[test]
    fn bits_are_taken_in_order_across_words_and_stop_at_end() {
        let mut chunk = vec![b'a'; 300];
        for at in [5, 6, 63, 64, 200] {
            chunk[at] = b'|';
        }
        let m = classify_scalar(&chunk);
        let all = |from, end| {
            let mut b = Bits::new(&m.pipe, from, end);
            let mut got = Vec::new();
            loop {
                let at = b.next();
                got.push(at);
                if at == end {
                    return got;
                }
            }
        };
        assert_eq!(all(0, 300), [5, 6, 63, 64, 200, 300]);
        assert_eq!(all(6, 300), [6, 63, 64, 200, 300]);
        assert_eq!(all(7, 200), [63, 64, 200]);
        assert_eq!(all(65, 150), [150]);
        assert_eq!(all(201, 300), [300]);
        assert_eq!(all(300, 300), [300]);
        // Once at the end it stays there.
        let mut b = Bits::new(&m.pipe, 100, 120);
        assert_eq!((b.next(), b.next()), (120, 120));
    }

    #[test]
    fn last_newline_of_a_full_chunk() {
        let mut chunk = vec![b'a'; CHUNK];
        assert_eq!(last_newline(&classify_scalar(&chunk)), None);
        chunk[3] = b'\n';
        chunk[1500] = b'\n';
        assert_eq!(last_newline(&classify_scalar(&chunk)), Some(1500));
        chunk[CHUNK - 1] = b'\n';
        assert_eq!(last_newline(&classify_scalar(&chunk)), Some(CHUNK - 1));
    }

    proptest! {
        #[test]
        fn every_backend_builds_the_masks_of_the_byte_loop(chunk in proptest::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'|'), Just(b':'), Just(b','), Just(b'#'), any::<u8>()],
            0..=CHUNK,
        )) {
            let want = classify_scalar(&chunk);
            for (name, got) in every_backend(&chunk) {
                prop_assert_eq!(&got, &want, "{}", name);
            }
        }
    }
}
