//! Hit-for-pass (Varnish's name): objects whose origin answered with something we may not
//! store (`no-store`, `private`, `Vary: *` ...) are remembered for a while, so that the
//! next requests for them go straight to the origin for their own client, instead of
//! first through the owning core's fetch, whose answer would be thrown away (two origin
//! requests for one client).

use std::collections::HashMap;

use crate::dsht::id::{Id, KeyedBuildHasher};

/// How long an object stays marked uncacheable (Varnish's hit-for-miss default, 120 s);
/// after it, the next request tries to store it again.
pub const PASS_MEMORY_SECS: u64 = 120;
/// Objects marked at once; a full memory first drops the expired marks, then an
/// arbitrary one.
pub const PASS_KEYS_MAX: usize = crate::limits::PROXY.pass_keys_max;

/// The objects recently found uncacheable (one per core: no sharing).
pub struct PassMemory {
    until: HashMap<Id, u64, KeyedBuildHasher>,
}

impl PassMemory {
    /// An empty memory; `hasher` keys the map (its keys come from clients).
    pub fn new(hasher: KeyedBuildHasher) -> PassMemory {
        PassMemory {
            until: HashMap::with_hasher(hasher),
        }
    }

    /// `key`'s origin answered with something not storable, at `now_secs`.
    pub fn mark(&mut self, key: Id, now_secs: u64) {
        if !self.until.contains_key(&key) && self.until.len() >= PASS_KEYS_MAX {
            self.until.retain(|_, until| *until > now_secs);
            if self.until.len() >= PASS_KEYS_MAX {
                if let Some(k) = self.until.keys().next().copied() {
                    self.until.remove(&k);
                }
            }
        }
        self.until
            .insert(key, now_secs.saturating_add(PASS_MEMORY_SECS));
    }

    /// Whether requests for `key` should go straight to the origin at `now_secs`.
    pub fn pass(&mut self, key: &Id, now_secs: u64) -> bool {
        match self.until.get(key) {
            Some(&until) if now_secs < until => true,
            Some(_) => {
                self.until.remove(key);
                false
            }
            None => false,
        }
    }

    /// Objects marked.
    pub fn len(&self) -> usize {
        self.until.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> PassMemory {
        PassMemory::new(crate::dsht::id::keyed_hasher(b"test", "pass"))
    }

    #[test]
    fn an_uncacheable_object_passes_for_pass_memory_secs_then_is_tried_again() {
        let mut m = memory();
        let k = Id::hash(b"http://x.com:80/private");
        assert!(!m.pass(&k, 1000));
        m.mark(k, 1000);
        assert!(m.pass(&k, 1000));
        assert!(m.pass(&k, 1000 + PASS_MEMORY_SECS - 1));
        assert!(!m.pass(&k, 1000 + PASS_MEMORY_SECS), "tried again");
        assert!(m.is_empty(), "an expired mark is dropped");
        assert!(!m.pass(&Id::hash(b"other"), 1000));
    }

    #[test]
    fn the_memory_holds_at_most_pass_keys_max() {
        let mut m = memory();
        for i in 0..(PASS_KEYS_MAX as u32) {
            m.mark(Id::hash(&i.to_le_bytes()), 0);
        }
        assert_eq!(m.len(), PASS_KEYS_MAX);
        // Full of live marks: one is dropped for the new one.
        let new = Id::hash(b"new");
        m.mark(new, 1);
        assert_eq!(m.len(), PASS_KEYS_MAX);
        assert!(m.pass(&new, 1));
        // Full of expired marks: they go first.
        m.mark(Id::hash(b"later"), PASS_MEMORY_SECS + 10);
        assert_eq!(m.len(), 1);
    }
}
