//! The structural index behind the SIMD backends of [`super::split`].
//!
//! # Design
//!
//! Each 64-byte block is compared against the tag separators and the
//! key/value separator in one pass, giving two `u64` masks with one bit per
//! byte. Tags are then emitted by walking the separator bits with
//! `trailing_zeros`; the key/value separator of a tag is the lowest bit of
//! the key/value mask left between the previous separator and this one.
//! Only the mask building differs between AVX-512, AVX2, SSE2 and NEON;
//! the walk is shared, so every backend has the exact semantics of
//! [`super::split_scalar`], which the tests check.
//!
//! Hand-written SIMD, rather than `memchr`, because splitting was measured
//! as a hot spot (before series were looked up by their raw spelling) and
//! `memchr` did little for it: it restarts a search for every short field,
//! two per tag, while the index classifies 64 bytes at once and finds
//! every delimiter of a block from its masks (`tags/split` in
//! `docs/benchmarks/LOG.md`, "SIMD tag splitting" and "tag splitting with
//! AVX-512", has the rates of each). It now runs once per new series or
//! spelling, not per point.

use super::{span, BadTags, TagSpan};

/// Bytes classified per step: one bit per byte of a `u64` mask.
const BLOCK: usize = 64;

/// Builds the separator and key/value-separator masks of one block.
trait Classify {
    /// Returns `(separators, kv_separators)` for the 64 bytes at `block`:
    /// bit `i` is set when byte `i` is a tag separator (`|` or space for
    /// msgpack, `,` for DogStatsD), respectively the key/value separator
    /// (`=` or `:`).
    ///
    /// # Safety
    ///
    /// `block` must be valid for reads of 64 bytes, and the CPU must have
    /// the target features of the implementation.
    unsafe fn masks<const MSGPACK: bool>(block: *const u8) -> (u64, u64);
}

/// The bytes each backend compares against: the two tag separators (the
/// same byte twice for DogStatsD) and the key/value separator.
#[inline(always)]
const fn delimiters<const MSGPACK: bool>() -> (u8, u8, u8) {
    if MSGPACK {
        (b'|', b' ', b'=')
    } else {
        (b',', b',', b':')
    }
}

/// Splits `raw` with the masks of `C`; the caller has cleared `out` and
/// checked that `raw.len()` fits in `u32`.
///
/// Inlined into each backend's entry point so that the mask building is
/// compiled with that entry point's target features.
///
/// # Safety
///
/// The CPU must have the target features of `C`.
#[inline(always)]
unsafe fn walk<C: Classify, const MSGPACK: bool>(
    raw: &[u8],
    out: &mut Vec<TagSpan>,
) -> Result<(), BadTags> {
    let len = raw.len();
    // Start of the tag being read, and the position of its first key/value
    // separator when that lies in an earlier block (else `usize::MAX`).
    let mut seg_start = 0;
    let mut kv_open = usize::MAX;
    let mut base = 0;
    while base < len {
        let (mut sep, mut kv) = if len - base >= BLOCK {
            // SAFETY: `base + BLOCK <= len`, so the block is inside `raw`;
            // the target features are the caller's promise.
            unsafe { C::masks::<MSGPACK>(raw.as_ptr().add(base)) }
        } else {
            // The last, partial block is copied so that no read goes past
            // the slice; the NUL padding matches no delimiter.
            let mut tail = [0u8; BLOCK];
            tail[..len - base].copy_from_slice(&raw[base..]);
            // SAFETY: `tail` is 64 bytes; features as above.
            unsafe { C::masks::<MSGPACK>(tail.as_ptr()) }
        };
        // Each separator closes at most one tag. Writing through a pointer
        // with the count in a register, instead of `push`, halves the
        // instructions per tag: `push` reloads the length and capacity after
        // every store. The vector only grows, so a reused one stops
        // allocating.
        out.reserve(sep.count_ones() as usize);
        let mut n = out.len();
        let dst = out.as_mut_ptr();
        while sep != 0 {
            let p = sep.trailing_zeros() as usize;
            // Bits up to and including this separator; key/value
            // separators among them that earlier separators have not
            // already cleared belong to this tag.
            let upto = sep ^ (sep - 1);
            sep &= sep - 1;
            let here = kv & upto;
            kv &= !upto;
            let end = base + p;
            if end > seg_start {
                // With `here == 0` this is `base + 64`, past `end`: no
                // separator, with no branch on it.
                let kv_at = kv_open.min(base + here.trailing_zeros() as usize);
                let Some(tag) = tag::<MSGPACK>(seg_start, kv_at, end) else {
                    // SAFETY: the first `n` spans are initialised.
                    unsafe { out.set_len(n) };
                    return Err(BadTags);
                };
                // SAFETY: `reserve` above made room for one span per
                // separator of this block, and this is one of them.
                unsafe { dst.add(n).write(tag) };
                n += 1;
            }
            seg_start = end + 1;
            kv_open = usize::MAX;
        }
        // SAFETY: the spans up to `n` were written just above.
        unsafe { out.set_len(n) };
        if kv != 0 {
            // Separators after the last tag separator of the block belong
            // to a tag that continues into the next block.
            kv_open = kv_open.min(base + kv.trailing_zeros() as usize);
        }
        base += BLOCK;
    }
    if len > seg_start {
        out.push(tag::<MSGPACK>(seg_start, kv_open, len).ok_or(BadTags)?);
    }
    Ok(())
}

/// The non-empty tag `[seg_start, end)` whose first key/value separator is
/// at `kv_at`, or anywhere at or past `end` when it has none; `None` when
/// the syntax rejects it.
#[inline(always)]
fn tag<const MSGPACK: bool>(seg_start: usize, kv_at: usize, end: usize) -> Option<TagSpan> {
    if kv_at == seg_start || (MSGPACK && kv_at >= end) {
        return None;
    }
    // A DogStatsD tag without `:` is all key, with an empty value at its end.
    let key_end = kv_at.min(end);
    let value_start = key_end + usize::from(key_end < end);
    Some(span(seg_start, key_end, value_start, end))
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{delimiters, walk, BadTags, Classify, TagSpan};
    use std::arch::x86_64::*;

    use crate::simd::opaque;

    /// Byte to compare against, in the `i8` the intrinsics take.
    #[inline(always)]
    fn byte(b: u8) -> i8 {
        b as i8
    }

    pub(crate) struct Sse2;

    impl Classify for Sse2 {
        #[inline(always)]
        unsafe fn masks<const MSGPACK: bool>(block: *const u8) -> (u64, u64) {
            let (sep_a, sep_b, kv_byte) = delimiters::<MSGPACK>();
            let mut sep = 0u64;
            let mut kv = 0u64;
            for i in 0..4 {
                // SAFETY: the caller promises 64 readable bytes at `block`,
                // and this reads bytes 16 * i .. 16 * i + 16 unaligned; SSE2
                // is part of the x86-64 baseline.
                let (s, k) = unsafe {
                    let v = _mm_loadu_si128(block.add(16 * i).cast::<__m128i>());
                    let s = _mm_or_si128(
                        _mm_cmpeq_epi8(v, _mm_set1_epi8(byte(sep_a))),
                        _mm_cmpeq_epi8(v, _mm_set1_epi8(byte(sep_b))),
                    );
                    let k = _mm_cmpeq_epi8(v, _mm_set1_epi8(byte(kv_byte)));
                    (opaque(_mm_movemask_epi8(s)), opaque(_mm_movemask_epi8(k)))
                };
                // movemask fills the low 16 bits only.
                sep |= u64::from(s as u16) << (16 * i);
                kv |= u64::from(k as u16) << (16 * i);
            }
            (sep, kv)
        }
    }

    pub(crate) struct Avx2;

    impl Classify for Avx2 {
        #[inline]
        #[target_feature(enable = "avx2,bmi1,popcnt")]
        unsafe fn masks<const MSGPACK: bool>(block: *const u8) -> (u64, u64) {
            let (sep_a, sep_b, kv_byte) = delimiters::<MSGPACK>();
            let mut sep = 0u64;
            let mut kv = 0u64;
            for i in 0..2 {
                // SAFETY: the caller promises 64 readable bytes at `block`
                // and the target features; this reads bytes 32 * i .. 32 * i + 32 unaligned.
                let (s, k) = unsafe {
                    let v = _mm256_loadu_si256(block.add(32 * i).cast::<__m256i>());
                    let s = _mm256_or_si256(
                        _mm256_cmpeq_epi8(v, _mm256_set1_epi8(byte(sep_a))),
                        _mm256_cmpeq_epi8(v, _mm256_set1_epi8(byte(sep_b))),
                    );
                    let k = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(byte(kv_byte)));
                    (
                        opaque(_mm256_movemask_epi8(s)),
                        opaque(_mm256_movemask_epi8(k)),
                    )
                };
                sep |= u64::from(s as u32) << (32 * i);
                kv |= u64::from(k as u32) << (32 * i);
            }
            (sep, kv)
        }
    }

    pub(crate) struct Avx512;

    impl Classify for Avx512 {
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi1,popcnt")]
        unsafe fn masks<const MSGPACK: bool>(block: *const u8) -> (u64, u64) {
            let (sep_a, sep_b, kv_byte) = delimiters::<MSGPACK>();
            // One 64-byte compare per byte class, straight into a mask
            // register: no movemask and no shifting halves together.
            // SAFETY: the caller promises 64 readable bytes at `block` and
            // the target features; the load is unaligned.
            unsafe {
                let v = _mm512_loadu_si512(block.cast());
                let sep = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(byte(sep_a)))
                    | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(byte(sep_b)));
                let kv = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(byte(kv_byte)));
                (sep, kv)
            }
        }
    }

    /// SSE2 backend; SSE2 is part of the x86-64 baseline, so this is safe.
    pub(crate) fn split_sse2<const MSGPACK: bool>(
        raw: &[u8],
        out: &mut Vec<TagSpan>,
    ) -> Result<(), BadTags> {
        // SAFETY: every x86-64 CPU has SSE2.
        unsafe { walk::<Sse2, MSGPACK>(raw, out) }
    }

    /// AVX2 backend, with BMI1 and POPCNT for the bit walk (every CPU with
    /// AVX2 has both; `tzcnt`, `blsr` and `popcnt` save a few instructions
    /// per tag).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, BMI1 and POPCNT.
    #[target_feature(enable = "avx2,bmi1,popcnt")]
    pub(crate) unsafe fn split_avx2<const MSGPACK: bool>(
        raw: &[u8],
        out: &mut Vec<TagSpan>,
    ) -> Result<(), BadTags> {
        // SAFETY: AVX2, BMI1 and POPCNT are this function's own
        // precondition.
        unsafe { walk::<Avx2, MSGPACK>(raw, out) }
    }

    /// AVX-512 backend (AVX-512F and BW, with BMI1 and POPCNT for the bit
    /// walk).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F, AVX-512BW, BMI1 and POPCNT.
    #[target_feature(enable = "avx512f,avx512bw,bmi1,popcnt")]
    pub(crate) unsafe fn split_avx512<const MSGPACK: bool>(
        raw: &[u8],
        out: &mut Vec<TagSpan>,
    ) -> Result<(), BadTags> {
        // SAFETY: the target features are this function's own
        // precondition.
        unsafe { walk::<Avx512, MSGPACK>(raw, out) }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{split_avx2, split_avx512, split_sse2};

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::{delimiters, walk, BadTags, Classify, TagSpan};
    use crate::simd::neon_bitmask as bitmask;
    use std::arch::aarch64::*;

    pub(crate) struct Neon;

    impl Classify for Neon {
        #[inline(always)]
        unsafe fn masks<const MSGPACK: bool>(block: *const u8) -> (u64, u64) {
            let (sep_a, sep_b, kv_byte) = delimiters::<MSGPACK>();
            // SAFETY: the caller promises 64 readable bytes at `block`;
            // NEON is part of the aarch64 baseline.
            unsafe {
                let v = [
                    vld1q_u8(block),
                    vld1q_u8(block.add(16)),
                    vld1q_u8(block.add(32)),
                    vld1q_u8(block.add(48)),
                ];
                let is_sep = |x: uint8x16_t| {
                    vorrq_u8(
                        vceqq_u8(x, vdupq_n_u8(sep_a)),
                        vceqq_u8(x, vdupq_n_u8(sep_b)),
                    )
                };
                let is_kv = |x: uint8x16_t| vceqq_u8(x, vdupq_n_u8(kv_byte));
                (
                    bitmask([is_sep(v[0]), is_sep(v[1]), is_sep(v[2]), is_sep(v[3])]),
                    bitmask([is_kv(v[0]), is_kv(v[1]), is_kv(v[2]), is_kv(v[3])]),
                )
            }
        }
    }

    /// NEON backend; NEON is part of the aarch64 baseline, so this is safe.
    pub(crate) fn split_neon<const MSGPACK: bool>(
        raw: &[u8],
        out: &mut Vec<TagSpan>,
    ) -> Result<(), BadTags> {
        // SAFETY: every aarch64 CPU has NEON.
        unsafe { walk::<Neon, MSGPACK>(raw, out) }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) use arm::split_neon;
