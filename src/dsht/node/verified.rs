//! The cache of senders whose id was found bound to their address.

use std::net::SocketAddr;

use sha1::{Digest, Sha1};

use crate::dsht::id::Id;

/// Slots of the cache of senders whose id was found bound to their address
/// ([`VerifiedCache`]): 2 KiB per node.
const VERIFIED_CACHE_SLOTS: usize = 512;

/// Senders whose id was found bound to their address (SHA-1 of it), so that
/// a node does not hash every datagram's source: a direct-mapped array of
/// 32-bit tags, each the low half of a keyed 64-bit hash of the (address,
/// id) pair whose high half picks the slot.
///
/// Safe against a flood of spoofed sources: the array never grows
/// ([`VERIFIED_CACHE_SLOTS`]), and a flood only evicts tags, which costs a
/// SHA-1 for the next datagram of an evicted sender. No probing, so no
/// collision attack on the layout; and a forged pair passes only if its tag
/// equals a verified pair's, which takes the node's secret key (SipHash keyed
/// by it) or a 2^-31 chance per datagram (the tag's low bit is always set).
/// 32 bits, not 64: two such caches per node were 8 KiB of the 50 KiB a
/// simulated node held at 100,000 nodes (issue 27), and a blind forger
/// needs about two billion datagrams per expected success. (The `HashMap<SocketAddr, NodeId>` this replaces
/// held up to 4,096 entries of 52 bytes, 16 KiB per node at 10,000 simulated
/// nodes, and cost two cache misses per datagram.)
pub(super) struct VerifiedCache {
    /// Secret, fixed for the node's life: the keyed hash's prefix.
    key: [u8; 16],
    /// Tags by slot (0: empty); allocated on first use.
    tags: Vec<u32>,
}

impl VerifiedCache {
    /// A cache keyed by a hash of the node's first token secrets (so that
    /// creating it draws nothing from the node's `Rng`).
    pub(super) fn new(secret: &[u8; 16], previous: &[u8; 16]) -> VerifiedCache {
        let mut h = Sha1::new();
        h.update(b"coral verified-sender cache key");
        h.update(secret);
        h.update(previous);
        let digest = h.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        VerifiedCache {
            key,
            tags: Vec::new(),
        }
    }

    /// The pair's tag: never 0, which marks an empty slot.
    ///
    /// SipHash-1-3 with the secret as a prefix of the message. The message
    /// is the bytes `SocketAddr`'s `Hash` feeds a hasher (the variant as an
    /// `isize`, the address as one integer of its octets in memory order,
    /// the port; for IPv6 also the
    /// flow label and scope), written at once: the
    /// same tag as hashing the address field by field, at a third of the
    /// cost (issue 27: six short writes cost ~490 instructions a datagram;
    /// `tag_is_the_field_by_field_hash` checks the two agree).
    pub(super) fn tag(&self, from: SocketAddr, id: &Id) -> u64 {
        use std::hash::Hasher;
        let mut m = [0u8; 16 + 8 + 16 + 2 + 4 + 4 + 20];
        m[..16].copy_from_slice(&self.key);
        let mut n = 16;
        let mut put = |b: &[u8]| {
            m[n..n + b.len()].copy_from_slice(b);
            n += b.len();
        };
        match from {
            SocketAddr::V4(a) => {
                put(&0isize.to_ne_bytes());
                put(&a.ip().octets());
                put(&a.port().to_ne_bytes());
            }
            SocketAddr::V6(a) => {
                put(&1isize.to_ne_bytes());
                put(&a.ip().octets());
                put(&a.port().to_ne_bytes());
                put(&a.flowinfo().to_ne_bytes());
                put(&a.scope_id().to_ne_bytes());
            }
        }
        put(&id.0);
        let mut h = std::hash::DefaultHasher::new();
        h.write(&m[..n]);
        h.finish() | 1
    }

    pub(super) fn slot(tag: u64) -> usize {
        (tag >> 32) as usize % VERIFIED_CACHE_SLOTS
    }

    /// What a slot holds for `tag`: its low 32 bits (never 0).
    fn stored(tag: u64) -> u32 {
        tag as u32 | 1
    }

    pub(super) fn contains(&self, tag: u64) -> bool {
        self.tags.get(Self::slot(tag)) == Some(&Self::stored(tag))
    }

    pub(super) fn insert(&mut self, tag: u64) {
        if self.tags.is_empty() {
            self.tags = vec![0; VERIFIED_CACHE_SLOTS];
        }
        self.tags[Self::slot(tag)] = Self::stored(tag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-write tag equals SipHash over the key and the pair hashed
    /// field by field (the tag before issue 27), for both families.
    #[test]
    fn tag_is_the_field_by_field_hash() {
        use std::hash::{Hash, Hasher};
        let c = VerifiedCache::new(&[7; 16], &[9; 16]);
        let reference = |from: SocketAddr, id: &Id| {
            let mut h = std::hash::DefaultHasher::new();
            h.write(&c.key);
            from.hash(&mut h);
            h.write(&id.0);
            h.finish() | 1
        };
        let v6 = std::net::SocketAddrV6::new(
            std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6),
            53,
            0x12345,
            7,
        );
        for from in [
            SocketAddr::from(([10, 0, 0, 1], 7000)),
            SocketAddr::from(([255, 1, 2, 3], 1)),
            SocketAddr::V6(v6),
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 65535)),
        ] {
            for id in [Id::from_ip(from.ip()), Id::hash(b"x"), Id([0; 20])] {
                assert_eq!(c.tag(from, &id), reference(from, &id), "{from}");
            }
        }
    }

    #[test]
    fn verified_cache_is_bounded_and_tags_name_the_pair() {
        let mut c = VerifiedCache::new(&[1; 16], &[2; 16]);
        let a = SocketAddr::from(([10, 0, 0, 1], 7000));
        let id = Id::from_ip(a.ip());
        let tag = c.tag(a, &id);
        assert!(!c.contains(tag));
        c.insert(tag);
        assert!(c.contains(c.tag(a, &id)));
        // Another id from the same address, or the same id from another
        // address or port, is another pair.
        assert!(!c.contains(c.tag(a, &Id::hash(b"forged"))));
        assert!(!c.contains(c.tag(SocketAddr::from(([10, 0, 0, 1], 7001)), &id)));
        assert!(!c.contains(c.tag(SocketAddr::from(([10, 0, 0, 2], 7000)), &id)));
        // Another key, other tags.
        let other = VerifiedCache::new(&[3; 16], &[2; 16]);
        assert_ne!(other.tag(a, &id), tag);
        // A flood of sources evicts, never grows.
        for i in 0..100_000u32 {
            let from = SocketAddr::from((i.to_be_bytes(), 1));
            c.insert(c.tag(from, &id));
        }
        assert_eq!(c.tags.len(), VERIFIED_CACHE_SLOTS);
    }
}
