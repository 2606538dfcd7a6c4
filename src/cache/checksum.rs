//! A streaming 64-bit checksum for cache records: word at a time, so a
//! restart that verifies every record reads at memory speed, and strong
//! enough that a torn write (zeroes, old bytes, a shifted block) is caught.
//! Not a cryptographic hash: records are our own writes, checked against
//! crashes, not against an adversary.

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// The running state; feed bytes in any split, the result is the same.
#[derive(Debug, Clone)]
pub struct Checksum {
    h: u64,
    tail: [u8; 8],
    tail_len: usize,
    total: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Self::new()
    }
}

impl Checksum {
    /// A fresh state.
    pub fn new() -> Self {
        Checksum {
            h: K1,
            tail: [0; 8],
            tail_len: 0,
            total: 0,
        }
    }

    /// The checksum of one slice.
    pub fn of(bytes: &[u8]) -> u64 {
        let mut c = Checksum::new();
        c.update(bytes);
        c.finish()
    }

    #[inline]
    fn word(&mut self, w: u64) {
        self.h = (self.h ^ w).wrapping_mul(K0).rotate_left(29);
    }

    /// Feeds `bytes`.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.tail_len > 0 {
            let take = (8 - self.tail_len).min(bytes.len());
            self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&bytes[..take]);
            self.tail_len += take;
            bytes = &bytes[take..];
            if self.tail_len < 8 {
                return;
            }
            let w = u64::from_le_bytes(self.tail);
            self.word(w);
            self.tail_len = 0;
        }
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.word(u64::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_len = rest.len();
    }

    /// The checksum of everything fed.
    pub fn finish(&self) -> u64 {
        let mut s = self.clone();
        let mut last = [0u8; 8];
        last[..s.tail_len].copy_from_slice(&s.tail[..s.tail_len]);
        s.word(u64::from_le_bytes(last));
        s.word(s.total);
        let mut h = s.h;
        h ^= h >> 33;
        h = h.wrapping_mul(K1);
        h ^= h >> 29;
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn any_split_gives_the_same_checksum(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            cuts in proptest::collection::vec(0usize..200, 0..6),
        ) {
            let mut c = Checksum::new();
            let mut at = 0;
            let mut cuts = cuts;
            cuts.sort();
            for cut in cuts {
                let cut = cut.min(bytes.len()).max(at);
                c.update(&bytes[at..cut]);
                at = cut;
            }
            c.update(&bytes[at..]);
            proptest::prop_assert_eq!(c.finish(), Checksum::of(&bytes));
        }
    }

    #[test]
    fn trailing_zeroes_change_the_checksum() {
        // A body cut short and zero-filled must not match the full one.
        assert_ne!(Checksum::of(b"abc"), Checksum::of(b"abc\0"));
        assert_ne!(Checksum::of(&[0u8; 16]), Checksum::of(&[0u8; 24]));
    }
}
