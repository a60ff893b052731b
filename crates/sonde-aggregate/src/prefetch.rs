//! Cache prefetch hints for the hot path: loads it will need soon, asked
//! for ahead so that the misses of several points overlap.

/// Asks the CPU to bring the cache lines of `bytes` in (up to three: a
/// stored spelling is ~100 to 200 bytes). A hint only: it never faults.
#[inline(always)]
pub(crate) fn prefetch_bytes(bytes: &[u8]) {
    let start = bytes.as_ptr();
    for offset in [0, 64, 128] {
        if offset < bytes.len() {
            prefetch(start.wrapping_add(offset));
        }
    }
}

#[inline(always)]
pub(crate) fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(at.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above; `prfm` is a hint.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) at, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = at;
}
