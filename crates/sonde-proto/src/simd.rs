//! Helpers shared by the hand-written SIMD indexes (`tags/index.rs`,
//! `statsd/index.rs`): `opaque` for x86-64, `neon_bitmask` for aarch64.

/// Returns a `movemask` result unchanged, through a register the optimiser
/// cannot see into.
///
/// Without it LLVM fused the 32-bit masks of one block into a vector of 64
/// booleans, which AVX2 cannot hold, and rebuilt the `u64` bit by bit
/// through the stack, which made the AVX2 index several times slower than
/// with this barrier and slower than SSE2 ("SIMD tag splitting" in
/// `docs/BENCHMARKS.md`). An empty `asm!` costs no instruction.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn opaque(mut mask: i32) -> i32 {
    // SAFETY: the template is only a comment: no instruction runs and
    // nothing but the register holding `mask` is touched.
    unsafe {
        std::arch::asm!(
            "/* {0:e} */",
            inout(reg) mask,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    mask
}

/// Packs four 16-byte compare results (each byte 0x00 or 0xff) into a
/// 64-bit mask, bit `i` for byte `i`: NEON has no `movemask`, so each byte
/// keeps its bit weight within its group of eight and three rounds of
/// pairwise adds sum every group of eight into one mask byte.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(crate) fn neon_bitmask(c: [std::arch::aarch64::uint8x16_t; 4]) -> u64 {
    use std::arch::aarch64::*;
    const WEIGHTS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: `WEIGHTS` is 16 readable bytes; NEON is part of the aarch64
    // baseline.
    unsafe {
        let w = vld1q_u8(WEIGHTS.as_ptr());
        let pairs_ab = vpaddq_u8(vandq_u8(c[0], w), vandq_u8(c[1], w));
        let pairs_cd = vpaddq_u8(vandq_u8(c[2], w), vandq_u8(c[3], w));
        let quads = vpaddq_u8(pairs_ab, pairs_cd);
        let octets = vpaddq_u8(quads, quads);
        vgetq_lane_u64::<0>(vreinterpretq_u64_u8(octets))
    }
}
