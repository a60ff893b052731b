//! The structural index behind the SIMD backends of [`super::split`].
//!
//! # Design
//!
//! Each 64-byte block is compared against the tag separators and the
//! key/value separator in one pass, giving two `u64` masks with one bit per
//! byte. Tags are then emitted by walking the separator bits with
//! `trailing_zeros`; the key/value separator of a tag is the lowest bit of
//! the key/value mask left between the previous separator and this one.
//! Only the mask building differs between AVX-512, AVX2, SSE2 and NEON,
//! each a [`Block`] of [`crate::simd`]; the walk is shared, so every
//! backend has the exact semantics of [`super::split_scalar`], which the
//! tests check.
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
use crate::simd::Block;
#[cfg(target_arch = "aarch64")]
use crate::simd::Neon;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Sse2};

/// Bytes classified per step: one bit per byte of a `u64` mask.
const BLOCK: usize = 64;

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

/// Returns `(separators, kv_separators)` for the 64 bytes at `block`: bit
/// `i` is set when byte `i` is a tag separator (`|` or space for msgpack,
/// `,` for DogStatsD), respectively the key/value separator (`=` or `:`).
///
/// # Safety
///
/// `block` must be valid for reads of 64 bytes, and the CPU must have the
/// target features of `B`.
#[inline(always)]
unsafe fn masks<B: Block, const MSGPACK: bool>(block: *const u8) -> (u64, u64) {
    let (sep_a, sep_b, kv_byte) = delimiters::<MSGPACK>();
    // SAFETY: the caller's promise.
    unsafe {
        let v = B::load(block);
        (v.mask([sep_a, sep_b]), v.mask([kv_byte]))
    }
}

/// Splits `raw` with the masks of `B`; the caller has cleared `out` and
/// checked that `raw.len()` fits in `u32`.
///
/// Inlined into each backend's entry point so that the mask building is
/// compiled with that entry point's target features.
///
/// # Safety
///
/// The CPU must have the target features of `B`.
#[inline(always)]
unsafe fn walk<B: Block, const MSGPACK: bool>(
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
            unsafe { masks::<B, MSGPACK>(raw.as_ptr().add(base)) }
        } else {
            // The last, partial block is copied so that no read goes past
            // the slice; the NUL padding matches no delimiter.
            let mut tail = [0u8; BLOCK];
            tail[..len - base].copy_from_slice(&raw[base..]);
            // SAFETY: `tail` is 64 bytes; features as above.
            unsafe { masks::<B, MSGPACK>(tail.as_ptr()) }
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

/// SSE2 backend; SSE2 is part of the x86-64 baseline, so this is safe.
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,bmi1,popcnt")]
pub(crate) unsafe fn split_avx512<const MSGPACK: bool>(
    raw: &[u8],
    out: &mut Vec<TagSpan>,
) -> Result<(), BadTags> {
    // SAFETY: the target features are this function's own
    // precondition.
    unsafe { walk::<Avx512, MSGPACK>(raw, out) }
}

/// NEON backend; NEON is part of the aarch64 baseline, so this is safe.
#[cfg(target_arch = "aarch64")]
pub(crate) fn split_neon<const MSGPACK: bool>(
    raw: &[u8],
    out: &mut Vec<TagSpan>,
) -> Result<(), BadTags> {
    // SAFETY: every aarch64 CPU has NEON.
    unsafe { walk::<Neon, MSGPACK>(raw, out) }
}
