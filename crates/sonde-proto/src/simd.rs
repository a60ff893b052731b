//! The vector code both hand-written structural indexes share
//! (`statsd/index.rs`, `tags/index.rs`): a 64-byte block loaded into
//! registers once ([`Block`]), then, for each class of delimiter an index
//! looks for, the 64-bit mask of the bytes in that class, bit `i` for byte
//! `i`. One type per instruction set builds the masks: [`Sse2`], [`Avx2`]
//! and [`Avx512`] on x86-64, [`Neon`] on aarch64. Which bytes to look for,
//! and the walk over the masks, are each index's own.
//!
//! # Design
//!
//! Every method is inlined into the index's entry point for its backend,
//! which carries the backend's target features, so a block costs what the
//! index's own loop would: one load per register, and per class one
//! compare per byte value and register, their `or`, and one `movemask`
//! per register (AVX-512 compares straight into a mask register).

/// 64 bytes in vector registers, and the masks of the bytes among them
/// that equal given values.
pub(crate) trait Block: Sized {
    /// The 64 bytes at `at`, which need not be aligned.
    ///
    /// # Safety
    ///
    /// `at` must be valid for reads of 64 bytes, and the CPU must have the
    /// target features of the implementation.
    unsafe fn load(at: *const u8) -> Self;

    /// Bit `i` set when byte `i` of the block is one of `bytes`.
    ///
    /// # Safety
    ///
    /// The CPU must have the target features of the implementation.
    unsafe fn mask<const N: usize>(&self, bytes: [u8; N]) -> u64;
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Block;

    /// Returns a `movemask` result unchanged, through a register the
    /// optimiser cannot see into.
    ///
    /// Without it LLVM fused the 32-bit masks of one block into a vector
    /// of 64 booleans, which AVX2 cannot hold, and rebuilt the `u64` bit by
    /// bit through the stack, which made the AVX2 index several times
    /// slower than with this barrier and slower than SSE2 ("SIMD tag
    /// splitting" in `docs/benchmarks/LOG.md`). An empty `asm!` costs no
    /// instruction.
    #[inline(always)]
    fn opaque(mut mask: i32) -> i32 {
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

    /// A block in four 16-byte registers; SSE2 is part of the x86-64
    /// baseline.
    pub(crate) struct Sse2([__m128i; 4]);

    impl Block for Sse2 {
        #[inline(always)]
        unsafe fn load(at: *const u8) -> Self {
            // SAFETY: the caller promises 64 readable bytes at `at`; each
            // load reads 16 of them, unaligned.
            unsafe {
                Sse2([
                    _mm_loadu_si128(at.cast::<__m128i>()),
                    _mm_loadu_si128(at.add(16).cast::<__m128i>()),
                    _mm_loadu_si128(at.add(32).cast::<__m128i>()),
                    _mm_loadu_si128(at.add(48).cast::<__m128i>()),
                ])
            }
        }

        #[inline(always)]
        unsafe fn mask<const N: usize>(&self, bytes: [u8; N]) -> u64 {
            let mut mask = 0u64;
            for (i, &v) in self.0.iter().enumerate() {
                // SAFETY: SSE2 is part of the x86-64 baseline.
                let bits = unsafe {
                    let mut eq = _mm_setzero_si128();
                    for b in bytes {
                        eq = _mm_or_si128(eq, _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8)));
                    }
                    opaque(_mm_movemask_epi8(eq))
                };
                // movemask fills the low 16 bits only.
                mask |= u64::from(bits as u16) << (16 * i);
            }
            mask
        }
    }

    /// A block in two 32-byte registers.
    pub(crate) struct Avx2([__m256i; 2]);

    impl Block for Avx2 {
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn load(at: *const u8) -> Self {
            // SAFETY: the caller promises 64 readable bytes at `at` and
            // AVX2; each load reads 32 of them, unaligned.
            unsafe {
                Avx2([
                    _mm256_loadu_si256(at.cast::<__m256i>()),
                    _mm256_loadu_si256(at.add(32).cast::<__m256i>()),
                ])
            }
        }

        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn mask<const N: usize>(&self, bytes: [u8; N]) -> u64 {
            let mut mask = 0u64;
            for (i, &v) in self.0.iter().enumerate() {
                let mut eq = _mm256_setzero_si256();
                for b in bytes {
                    eq = _mm256_or_si256(eq, _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b as i8)));
                }
                let bits = opaque(_mm256_movemask_epi8(eq));
                mask |= u64::from(bits as u32) << (32 * i);
            }
            mask
        }
    }

    /// A block in one 64-byte register (AVX-512F and BW).
    pub(crate) struct Avx512(__m512i);

    impl Block for Avx512 {
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw")]
        unsafe fn load(at: *const u8) -> Self {
            // SAFETY: the caller promises 64 readable bytes at `at` and
            // the target features; the load is unaligned.
            unsafe { Avx512(_mm512_loadu_si512(at.cast())) }
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw")]
        unsafe fn mask<const N: usize>(&self, bytes: [u8; N]) -> u64 {
            // One 64-byte compare per byte value, straight into a mask
            // register: no movemask and no shifting halves together.
            let mut mask = 0u64;
            for b in bytes {
                mask |= _mm512_cmpeq_epi8_mask(self.0, _mm512_set1_epi8(b as i8));
            }
            mask
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512, Sse2};

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    use super::Block;

    /// Packs four 16-byte compare results (each byte 0x00 or 0xff) into a
    /// 64-bit mask, bit `i` for byte `i`: NEON has no `movemask`, so each
    /// byte keeps its bit weight within its group of eight and three rounds
    /// of pairwise adds sum every group of eight into one mask byte.
    #[inline(always)]
    fn bitmask(c: [uint8x16_t; 4]) -> u64 {
        const WEIGHTS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
        // SAFETY: `WEIGHTS` is 16 readable bytes; NEON is part of the
        // aarch64 baseline.
        unsafe {
            let w = vld1q_u8(WEIGHTS.as_ptr());
            let pairs_ab = vpaddq_u8(vandq_u8(c[0], w), vandq_u8(c[1], w));
            let pairs_cd = vpaddq_u8(vandq_u8(c[2], w), vandq_u8(c[3], w));
            let quads = vpaddq_u8(pairs_ab, pairs_cd);
            let octets = vpaddq_u8(quads, quads);
            vgetq_lane_u64::<0>(vreinterpretq_u64_u8(octets))
        }
    }

    /// A block in four 16-byte registers; NEON is part of the aarch64
    /// baseline.
    pub(crate) struct Neon([uint8x16_t; 4]);

    impl Block for Neon {
        #[inline(always)]
        unsafe fn load(at: *const u8) -> Self {
            // SAFETY: the caller promises 64 readable bytes at `at`; NEON
            // is part of the aarch64 baseline.
            unsafe {
                Neon([
                    vld1q_u8(at),
                    vld1q_u8(at.add(16)),
                    vld1q_u8(at.add(32)),
                    vld1q_u8(at.add(48)),
                ])
            }
        }

        #[inline(always)]
        unsafe fn mask<const N: usize>(&self, bytes: [u8; N]) -> u64 {
            // SAFETY: NEON is part of the aarch64 baseline.
            let eq = self.0.map(|v| unsafe {
                let mut eq = vdupq_n_u8(0);
                for b in bytes {
                    eq = vorrq_u8(eq, vceqq_u8(v, vdupq_n_u8(b)));
                }
                eq
            });
            bitmask(eq)
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) use arm::Neon;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The masks of `block` for each class in `classes`, byte by byte.
    fn scalar(block: &[u8; 64], classes: &[&[u8]]) -> Vec<u64> {
        (classes.iter())
            .map(|class| {
                (block.iter().enumerate())
                    .filter(|(_, b)| class.contains(b))
                    .fold(0, |mask, (i, _)| mask | 1 << i)
            })
            .collect()
    }

    /// The masks of `block` for a one-byte and a two-byte class, as `B`
    /// builds them.
    ///
    /// # Safety
    ///
    /// The CPU must have the target features of `B`.
    unsafe fn masks<B: Block>(block: &[u8; 64]) -> Vec<u64> {
        // SAFETY: 64 readable bytes; the features are the caller's promise.
        unsafe {
            let v = B::load(block.as_ptr());
            vec![v.mask([b':']), v.mask([b'|', b' '])]
        }
    }

    /// Every block type this CPU has, with its masks of `block`.
    fn every_block(block: &[u8; 64]) -> Vec<(&'static str, Vec<u64>)> {
        let mut out = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: SSE2 is part of the x86-64 baseline.
            out.push(("sse2", unsafe { masks::<Sse2>(block) }));
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was detected on this CPU just above.
                out.push(("avx2", unsafe { masks::<Avx2>(block) }));
            }
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw")
            {
                // SAFETY: both features were detected just above.
                out.push(("avx512", unsafe { masks::<Avx512>(block) }));
            }
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of the aarch64 baseline.
        out.push(("neon", unsafe { masks::<Neon>(block) }));
        out
    }

    #[test]
    fn every_block_marks_exactly_its_class_at_every_position() {
        for at in 0..64 {
            for b in [b':', b'|', b' ', 0xff] {
                let mut block = [b'a'; 64];
                block[at] = b;
                let want = scalar(&block, &[b":", b"| "]);
                for (name, got) in every_block(&block) {
                    assert_eq!(got, want, "{name} byte {b} at {at}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn every_block_builds_the_masks_of_the_byte_loop(block in proptest::array::uniform::<_, 64>(
            prop_oneof![Just(b':'), Just(b'|'), Just(b' '), any::<u8>()],
        )) {
            let want = scalar(&block, &[b":", b"| "]);
            for (name, got) in every_block(&block) {
                prop_assert_eq!(&got, &want, "{}", name);
            }
        }
    }
}
