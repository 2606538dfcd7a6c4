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
    pub(super) fn tag(&self, from: SocketAddr, id: &Id) -> u64 {
        use std::hash::{Hash, Hasher};
        // SipHash-1-3 with the secret as a prefix of the message.
        let mut h = std::hash::DefaultHasher::new();
        h.write(&self.key);
        from.hash(&mut h);
        h.write(&id.0);
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
