//! A CPU cache hint: start loading memory a driver will read soon.
//!
//! The simulator and a [`SmallMap`](super::smallmap::SmallMap) know which
//! lines the next input will touch (the next node, the next key's entry);
//! asking for them early overlaps the cache misses. No result depends on it.

/// Asks the CPU to start loading `bytes` bytes at `p` into its caches: a
/// hint that changes no result. A no-op off x86-64.
#[inline]
#[allow(unsafe_code)]
pub fn prefetch(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // Every line `[p, p + bytes)` touches: from the line `p` is in, so
        // that a span that starts mid-line gets its last line too.
        if bytes == 0 {
            return;
        }
        let skew = p as usize & 63;
        let line = p.wrapping_sub(skew);
        let mut off = 0;
        while off < bytes + skew {
            // SAFETY: a prefetch never faults and reads nothing the program
            // sees, whatever the address; `wrapping_add` keeps the pointer
            // arithmetic defined.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(off) as *const i8) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}
