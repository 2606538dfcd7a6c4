//! 160-bit identifiers, the XOR metric and `splice` (paper §4.1).
//!
//! Keys and node ids live in one 160-bit space. A node's id is the SHA-1 of
//! its IP address; where several nodes share one address (the paper's
//! 494-node experiment ran three per host) the UDP port joins the hash.

use core::fmt;
use std::net::{IpAddr, SocketAddr};

use sha1::{Digest, Sha1};

/// Number of bytes in an [`Id`].
pub const ID_BYTES: usize = 20;
/// Number of bits in an [`Id`].
pub const ID_BITS: u32 = 160;

/// A 160-bit identifier: a node id, a key, or a cluster id.
#[derive(Clone, Copy, PartialOrd, Ord, Default)]
pub struct Id(pub [u8; ID_BYTES]);

impl core::hash::Hash for Id {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        // Consistent with `eq`: equal ids have equal bytes.
        state.write(&self.0);
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        // Three word compares; a derived `==` calls memcmp, and ids are
        // compared on every hot path (routing tables, lookups, replies).
        let w = |b: &[u8; ID_BYTES]| {
            (
                u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
                u64::from_ne_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
                u32::from_ne_bytes([b[16], b[17], b[18], b[19]]),
            )
        };
        w(&self.0) == w(&other.0)
    }
}

impl Eq for Id {}

/// A key in the DSHT (same space as node ids).
pub type Key = Id;
/// A node's identifier (same space as keys).
pub type NodeId = Id;

impl Id {
    /// The all-zero id: the predefined level-0 cluster id `0^160` (§4.3).
    pub const ZERO: Id = Id([0; ID_BYTES]);

    /// SHA-1 of arbitrary bytes.
    pub fn hash(bytes: &[u8]) -> Id {
        let digest = Sha1::digest(bytes);
        let mut id = [0u8; ID_BYTES];
        id.copy_from_slice(&digest);
        Id(id)
    }

    /// The key of a URL as the proxy indexes it: SHA-1 of the URL's bytes (§3.2).
    pub fn from_url(url: &str) -> Key {
        Id::hash(url.as_bytes())
    }

    /// A node id bound to its IP address: SHA-1 of the address bytes (§4.1).
    pub fn from_ip(ip: IpAddr) -> NodeId {
        match ip {
            IpAddr::V4(v4) => Id::hash(&v4.octets()),
            IpAddr::V6(v6) => Id::hash(&v6.octets()),
        }
    }

    /// A node id for one of several nodes that share an IP address: SHA-1 of
    /// the address bytes followed by the big-endian port.
    pub fn from_ip_port(addr: SocketAddr) -> NodeId {
        let mut buf = [0u8; 18];
        let n = match addr.ip() {
            IpAddr::V4(v4) => {
                buf[..4].copy_from_slice(&v4.octets());
                4
            }
            IpAddr::V6(v6) => {
                buf[..16].copy_from_slice(&v6.octets());
                16
            }
        };
        buf[n..n + 2].copy_from_slice(&addr.port().to_be_bytes());
        Id::hash(&buf[..n + 2])
    }

    /// Whether `id` is one a node at `addr` may claim: SHA-1 of its IP, or of
    /// its IP and port (the address binding that keeps ids from being chosen).
    pub fn is_bound_to(&self, addr: SocketAddr) -> bool {
        *self == Id::from_ip(addr.ip()) || *self == Id::from_ip_port(addr)
    }

    /// XOR distance to `other`.
    #[inline]
    pub fn distance(&self, other: &Id) -> Distance {
        let mut d = [0u8; ID_BYTES];
        for (i, byte) in d.iter_mut().enumerate() {
            *byte = self.0[i] ^ other.0[i];
        }
        Distance(d)
    }

    /// The bit at position `i`, counted from the most significant bit (0).
    pub fn bit(&self, i: u32) -> bool {
        debug_assert!(i < ID_BITS);
        (self.0[(i / 8) as usize] >> (7 - (i % 8))) & 1 == 1
    }

    /// Flips the most significant bit (the IPTPS §2.5 `cid^F` from `cid^N`).
    pub fn flip_high_bit(mut self) -> Id {
        self.0[0] ^= 0x80;
        self
    }

    /// Number of leading bits `self` and `other` have in common (160 if equal).
    pub fn common_prefix_len(&self, other: &Id) -> u32 {
        self.distance(other).leading_zeros()
    }

    /// Parses 40 hexadecimal digits.
    pub fn from_hex(s: &str) -> Option<Id> {
        let bytes = s.as_bytes();
        if bytes.len() != 2 * ID_BYTES {
            return None;
        }
        let mut id = [0u8; ID_BYTES];
        for (i, byte) in id.iter_mut().enumerate() {
            let hi = hex_value(bytes[2 * i])?;
            let lo = hex_value(bytes[2 * i + 1])?;
            *byte = (hi << 4) | lo;
        }
        Some(Id(id))
    }

    /// The first eight bytes as a big-endian integer (for hashing and sharding).
    pub fn prefix_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }
}

/// A fast multiplicative hasher (the Fx hash of rustc), unkeyed. Used for
/// maps keyed by what the node chooses itself (transaction ids, operation
/// ids, simulator indices) and by ids and keys. Keys that arrive from the
/// network (a store's key) could be crafted to collide in it; a hash keyed
/// from the node's seed is a hardening item. Maps keyed by source addresses
/// keep the standard library's keyed SipHash.
#[derive(Clone, Copy, Default, Debug)]
pub struct FastHasher(u64);

impl core::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }

    fn write_u16(&mut self, x: u16) {
        self.write_u64(u64::from(x));
    }

    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

/// `BuildHasher` for [`FastHasher`].
pub type FastBuildHasher = core::hash::BuildHasherDefault<FastHasher>;

/// A keyed hash (aHash with secret seeds) for maps whose keys come from the
/// network: store keys, storers' addresses, cluster observations, rate
/// records. Without the seeds, colliding keys cannot be computed offline.
pub type KeyedBuildHasher = ahash::RandomState;

/// The keyed hasher for `purpose`, seeded from `secret` (the node's own,
/// drawn from its seed: deterministic in the simulator, secret on a server).
pub fn keyed_hasher(secret: &[u8], purpose: &str) -> KeyedBuildHasher {
    let mut seeds = [0u64; 4];
    for (i, pair) in seeds.chunks_mut(2).enumerate() {
        let mut h = Sha1::new();
        h.update(b"coral keyed hasher");
        h.update([i as u8]);
        h.update(purpose.as_bytes());
        h.update(secret);
        let d = h.finalize();
        for (j, s) in pair.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[8 * j..8 * j + 8]);
            *s = u64::from_le_bytes(b);
        }
    }
    ahash::RandomState::with_seeds(seeds[0], seeds[1], seeds[2], seeds[3])
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Eight hex digits are enough to tell ids apart in logs.
        write!(f, "Id(")?;
        for b in &self.0[..4] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

/// An XOR distance between two ids, ordered as an unsigned 160-bit integer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Distance(pub [u8; ID_BYTES]);

/// 160 bits as three big-endian words, most significant first: ordered as
/// the bytes are, compared and XORed without a byte loop.
#[inline]
pub(crate) fn words(b: &[u8; ID_BYTES]) -> (u64, u64, u32) {
    (
        u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        u64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        u32::from_be_bytes([b[16], b[17], b[18], b[19]]),
    )
}

/// The id whose [`words`] these are.
pub(crate) fn id_of(w: (u64, u64, u32)) -> Id {
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&w.0.to_be_bytes());
    b[8..16].copy_from_slice(&w.1.to_be_bytes());
    b[16..].copy_from_slice(&w.2.to_be_bytes());
    Id(b)
}

/// The first set bit of an id in [`words`] form, counted from the top (bit
/// 0 is the most significant, as in [`splice`]); `w` is not zero.
pub(crate) fn first_bit(w: (u64, u64, u32)) -> u32 {
    if w.0 != 0 {
        w.0.leading_zeros()
    } else if w.1 != 0 {
        64 + w.1.leading_zeros()
    } else {
        128 + w.2.leading_zeros()
    }
}

/// The last set bit of an id in [`words`] form, counted as [`first_bit`];
/// `w` is not zero.
pub(crate) fn last_bit(w: (u64, u64, u32)) -> u32 {
    if w.2 != 0 {
        159 - w.2.trailing_zeros()
    } else if w.1 != 0 {
        127 - w.1.trailing_zeros()
    } else {
        63 - w.0.trailing_zeros()
    }
}

/// XOR distance of two ids given as [`words`], ordered as [`Distance`] is.
pub(crate) fn xor(a: (u64, u64, u32), b: (u64, u64, u32)) -> (u64, u64, u32) {
    (a.0 ^ b.0, a.1 ^ b.1, a.2 ^ b.2)
}

impl Distance {
    fn words(&self) -> (u64, u64, u32) {
        words(&self.0)
    }
}

impl Ord for Distance {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.words().cmp(&other.words())
    }
}

impl PartialOrd for Distance {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Distance {
    /// The distance of an id to itself.
    pub const ZERO: Distance = Distance([0; ID_BYTES]);

    /// Number of leading zero bits (160 for the zero distance).
    pub fn leading_zeros(&self) -> u32 {
        // Two words, not twenty bytes (issue 27: a routing-table lookup).
        let (hi, lo) = self.0.split_at(16);
        let hi = u128::from_be_bytes(hi.try_into().unwrap_or([0; 16]));
        if hi != 0 {
            return hi.leading_zeros();
        }
        let lo = u32::from_be_bytes(lo.try_into().unwrap_or([0; 4]));
        128 + lo.leading_zeros()
    }

    /// Bit length of the distance as a binary number: 0 for the zero
    /// distance, 160 when the most significant bit differs. A node in bucket
    /// `i` of a routing table is at a distance whose bit length is `i + 1`.
    pub fn bit_len(&self) -> u32 {
        ID_BITS - self.leading_zeros()
    }

    /// log2 of the distance as a float (approximate; -inf for zero).
    pub fn log2(&self) -> f64 {
        let lz = self.leading_zeros();
        if lz == ID_BITS {
            return f64::NEG_INFINITY;
        }
        // The eight bytes starting at the one holding the leading one carry
        // at least 57 significant bits: plenty for an f64.
        let first = (lz / 8) as usize;
        let mut b = [0u8; 8];
        let avail = (ID_BYTES - first).min(8);
        b[..avail].copy_from_slice(&self.0[first..first + avail]);
        let top = u64::from_be_bytes(b) as f64;
        // top ≈ distance / 2^(8·(ID_BYTES − first − 8)).
        top.log2() + 8.0 * (ID_BYTES as f64 - first as f64 - 8.0)
    }
}

/// `splice(k, r, i)` (§4.1): the most significant `b·i` bits of `k` followed
/// by the least significant `160 − b·i` bits of `r`. `b·i` is clamped to 160.
pub fn splice(k: &Id, r: &Id, i: u32, b: u32) -> Id {
    let bits = (b.saturating_mul(i)).min(ID_BITS);
    let mut out = r.0;
    let full = (bits / 8) as usize;
    out[..full].copy_from_slice(&k.0[..full]);
    let rem = bits % 8;
    if rem != 0 {
        let mask = 0xffu8 << (8 - rem);
        out[full] = (k.0[full] & mask) | (r.0[full] & !mask);
    }
    Id(out)
}

/// One step of the lookup target sequence (§4.1): `t ← splice(k, t, i)` with
/// the smallest `i > i_prev` that yields a new value of `t`. Returns the new
/// target and its `i`, or `None` when `t` already equals `k`.
pub fn next_target(k: &Id, t: &Id, i_prev: u32, b: u32) -> Option<(Id, u32)> {
    if t == k {
        return None;
    }
    // The first differing bit decides the smallest i that changes t:
    // splice(k, t, i) differs from t iff b·i > first differing bit.
    let first_diff = k.distance(t).leading_zeros();
    let i = (first_diff / b + 1).max(i_prev + 1);
    Some((splice(k, t, i, b), i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The word-wise count equals the byte-by-byte one for every single
    /// set bit, the zero distance, and every byte value at every position.
    #[test]
    fn leading_zeros_counts_like_bytes() {
        let bytewise = |d: &Distance| {
            for (i, b) in d.0.iter().enumerate() {
                if *b != 0 {
                    return i as u32 * 8 + b.leading_zeros();
                }
            }
            ID_BITS
        };
        assert_eq!(Distance::ZERO.leading_zeros(), ID_BITS);
        for pos in 0..ID_BYTES {
            for v in 0..=255u8 {
                let mut d = [0u8; ID_BYTES];
                d[pos] = v;
                if pos + 1 < ID_BYTES {
                    d[ID_BYTES - 1] = 0x55;
                }
                let d = Distance(d);
                assert_eq!(d.leading_zeros(), bytewise(&d), "{pos} {v}");
            }
        }
    }

    fn id_from_u8(x: u8) -> Id {
        let mut id = [0u8; ID_BYTES];
        id[ID_BYTES - 1] = x;
        Id(id)
    }

    fn arb_id() -> impl Strategy<Value = Id> {
        proptest::array::uniform20(any::<u8>()).prop_map(Id)
    }

    #[test]
    fn node_id_is_sha1_of_ip_section_4_1() {
        // SHA-1 of the four bytes 127.0.0.1, computed independently.
        let id = Id::from_ip("127.0.0.1".parse().unwrap());
        // SHA-1 of the bytes 7f 00 00 01, computed independently (Python's hashlib).
        assert_eq!(id.to_string(), "11d1def534ea1be07cf4e4ced4b128798aff7599");
        assert_eq!(id, Id::hash(&[127, 0, 0, 1]));
        assert!(id.is_bound_to("127.0.0.1:4000".parse().unwrap()));
        let shared = Id::from_ip_port("127.0.0.1:4000".parse().unwrap());
        assert!(shared.is_bound_to("127.0.0.1:4000".parse().unwrap()));
        assert!(!shared.is_bound_to("127.0.0.1:4001".parse().unwrap()));
        assert!(!Id::ZERO.is_bound_to("127.0.0.1:4000".parse().unwrap()));
    }

    #[test]
    fn sha1_known_vector() {
        // FIPS 180 test vector: SHA-1("abc").
        assert_eq!(
            Id::hash(b"abc").to_string(),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            Id::from_hex("a9993e364706816aba3e25717850c26c9cd0d89d"),
            Some(Id::hash(b"abc"))
        );
        assert_eq!(Id::from_hex("a9993e"), None);
        assert_eq!(Id::from_hex(&"g".repeat(40)), None);
    }

    #[test]
    fn figure_2_distances() {
        // Fig. 2: key 4; node 0 is at distance 4, node 5 at 1, node 14 at 10.
        let k = id_from_u8(4);
        assert_eq!(id_from_u8(0).distance(&k).0[19], 4);
        assert_eq!(id_from_u8(5).distance(&k).0[19], 1);
        assert_eq!(id_from_u8(14).distance(&k).0[19], 10);
        assert_eq!(id_from_u8(14).distance(&k).bit_len(), 4);
    }

    #[test]
    fn splice_takes_high_bits_of_k_and_low_bits_of_r() {
        let k = Id([0xff; ID_BYTES]);
        let r = Id::ZERO;
        assert_eq!(splice(&k, &r, 0, 1), r);
        let s = splice(&k, &r, 3, 1);
        assert_eq!(s.0[0], 0b1110_0000);
        assert_eq!(&s.0[1..], &[0u8; 19]);
        let s = splice(&k, &r, 3, 4);
        assert_eq!(s.0[0], 0xff);
        assert_eq!(s.0[1], 0xf0);
        assert_eq!(splice(&k, &r, 1000, 1), k);
    }

    /// `id_of` undoes `words`; `first_bit` and `last_bit` find an id's
    /// first and last set bits, counted from the top, at every position.
    #[test]
    fn words_helpers_agree_with_the_bytes() {
        for pos in 0..ID_BITS {
            let mut id = Id::ZERO;
            id.0[(pos / 8) as usize] = 0x80 >> (pos % 8);
            assert_eq!(id_of(words(&id.0)), id);
            assert_eq!(first_bit(words(&id.0)), pos);
            assert_eq!(last_bit(words(&id.0)), pos);
            let mut two = id;
            two.0[19] |= 1;
            assert_eq!(first_bit(words(&two.0)), pos);
            assert_eq!(last_bit(words(&two.0)), ID_BITS - 1);
            let a = Id::hash(&pos.to_be_bytes());
            assert_eq!(id_of(xor(words(&a.0), words(&id.0))).0, a.distance(&id).0);
        }
    }

    #[test]
    fn next_target_skips_bits_already_matching() {
        // k = 1000..., t = 1011...: the first bit matches, the second differs.
        let mut k = Id::ZERO;
        k.0[0] = 0b1000_0000;
        let mut t = Id::ZERO;
        t.0[0] = 0b1011_0000;
        let (t1, i1) = next_target(&k, &t, 0, 1).unwrap();
        assert_eq!(i1, 3);
        assert_eq!(t1.0[0], 0b1001_0000);
        let (t2, i2) = next_target(&k, &t1, i1, 1).unwrap();
        assert_eq!(i2, 4);
        assert_eq!(t2, k);
        assert_eq!(next_target(&k, &t2, i2, 1), None);
    }

    /// Keys with one unkeyed (Fx) hash, computed in closed form (what a
    /// hash-flooding attacker does offline), spread out under the keyed
    /// hash the store uses.
    #[test]
    fn precomputed_collisions_of_the_unkeyed_hash_spread_under_the_keyed_one() {
        use core::hash::{Hash, Hasher};
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut inv = K;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(K.wrapping_mul(inv)));
        }
        let target: u64 = 0x0123_4567_89ab_cdef;
        let keys: Vec<Id> = (0..1000u64)
            .map(|w0| {
                let h2 = (target.wrapping_mul(inv)).rotate_right(5);
                let w1 = h2.wrapping_mul(inv) ^ w0.wrapping_mul(K).rotate_left(5);
                let mut b = [0u8; ID_BYTES];
                b[..8].copy_from_slice(&w0.to_le_bytes());
                b[8..16].copy_from_slice(&w1.to_le_bytes());
                Id(b)
            })
            .collect();
        let fx = |k: &Id| {
            let mut h = FastHasher::default();
            k.hash(&mut h);
            h.finish()
        };
        assert!(keys.iter().all(|k| fx(k) == target));
        let keyed = keyed_hasher(b"node secret", "store");
        let mut hashes: Vec<u64> = keys.iter().map(|k| keyed.hash_one(k)).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), keys.len());
        // Another node's key hashes them differently.
        let other = keyed_hasher(b"another secret", "store");
        assert_ne!(keyed.hash_one(keys[0]), other.hash_one(keys[0]));
    }

    proptest! {
        #[test]
        fn xor_metric_is_a_metric(a in arb_id(), b in arb_id(), c in arb_id()) {
            prop_assert_eq!(a.distance(&a), Distance::ZERO);
            prop_assert_eq!(a.distance(&b), b.distance(&a));
            prop_assert_eq!(a.distance(&b) == Distance::ZERO, a == b);
            // Unidirectionality: for a fixed point and distance there is exactly one id.
            let d = a.distance(&b);
            let mut back = a;
            for i in 0..ID_BYTES { back.0[i] ^= d.0[i]; }
            prop_assert_eq!(back, b);
            // Triangle inequality, in its XOR form: d(a,c) ≤ d(a,b) ⊕ d(b,c) ≤ d(a,b) + d(b,c).
            let ac = a.distance(&c).bit_len();
            let ab = a.distance(&b).bit_len();
            let bc = b.distance(&c).bit_len();
            prop_assert!(ac <= ab.max(bc));
        }

        #[test]
        fn splice_prefix_and_suffix(k in arb_id(), r in arb_id(), i in 0u32..200, b in 1u32..8) {
            let s = splice(&k, &r, i, b);
            let bits = (b * i).min(ID_BITS);
            for bit in 0..ID_BITS {
                let want = if bit < bits { k.bit(bit) } else { r.bit(bit) };
                prop_assert_eq!(s.bit(bit), want);
            }
        }

        #[test]
        fn target_sequence_reaches_key_and_gets_strictly_closer(k in arb_id(), r in arb_id(), b in 1u32..5) {
            let mut t = r;
            let mut i = 0;
            let mut steps = 0;
            while let Some((nt, ni)) = next_target(&k, &t, i, b) {
                prop_assert!(nt.distance(&k) < t.distance(&k));
                // Each step corrects at most b bits beyond the first difference... and
                // never changes the bits beyond b·i.
                prop_assert_eq!(nt, splice(&k, &r, ni, b));
                t = nt;
                i = ni;
                steps += 1;
                prop_assert!(steps <= ID_BITS.div_ceil(b));
            }
            prop_assert_eq!(t, k);
        }

        #[test]
        fn distance_order_is_the_byte_order(a in arb_id(), b in arb_id(), c in arb_id()) {
            let (x, y) = (a.distance(&b), a.distance(&c));
            prop_assert_eq!(x.cmp(&y), x.0.cmp(&y.0));
        }

        #[test]
        fn log2_agrees_with_bit_len(a in arb_id(), b in arb_id()) {
            let d = a.distance(&b);
            if d != Distance::ZERO {
                let l = d.log2();
                prop_assert!(l >= f64::from(d.bit_len() - 1) - 1e-9);
                prop_assert!(l < f64::from(d.bit_len()) + 1e-9);
            }
        }
    }
}
