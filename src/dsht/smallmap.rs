//! A map for the few entries a node's collections usually hold, such as
//! the keys one of its levels stores.
//!
//! Up to [`SMALL_MAP_VEC_MAX`] entries it keeps keys and values in two
//! vectors and finds a key by scanning; beyond, it moves them into a hash
//! map. At 10,000 simulated nodes (and on a server core serving many
//! clients) nearly every first touch of a node's collection is a cache miss:
//! a hash map's entry is two dependent misses (control bytes, then bucket),
//! the vectors' are one each, loaded in parallel, and their addresses sit
//! in the map itself, so a driver that knows the node it calls next can
//! prefetch them ([`SmallMap::prefetch`]).
//!
//! No result depends on the representation: nothing iterates these maps in
//! an order that matters.

use std::collections::HashMap;
use std::hash::Hash;

use crate::dsht::id::KeyedBuildHasher;

/// Entries kept in the vectors before the map moves to a hash map.
pub const SMALL_MAP_VEC_MAX: usize = 8;

/// A map from `K` to `V`, small in two vectors, large in a hash map keyed
/// by a secret ([`SmallMap::with_hasher`]): its keys come from the network.
#[derive(Clone, Debug)]
pub struct SmallMap<K, V>(Repr<K, V>, KeyedBuildHasher);

#[derive(Clone, Debug)]
enum Repr<K, V> {
    /// At most [`SMALL_MAP_VEC_MAX`] entries; `keys[i]` maps to `values[i]`.
    Small { keys: Vec<K>, values: Vec<V> },
    /// More entries than that, once.
    Large(HashMap<K, V, KeyedBuildHasher>),
}

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        SmallMap(
            Repr::Small {
                keys: Vec::new(),
                values: Vec::new(),
            },
            KeyedBuildHasher::with_seeds(0, 0, 0, 0),
        )
    }
}

impl<K: Eq + Hash + Copy, V> SmallMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map whose hash map (once it has one) uses `hasher`.
    pub fn with_hasher(hasher: KeyedBuildHasher) -> Self {
        SmallMap(
            Repr::Small {
                keys: Vec::new(),
                values: Vec::new(),
            },
            hasher,
        )
    }

    /// The value under `key`, to change.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.0 {
            Repr::Small { keys, values } => keys
                .iter()
                .position(|k| k == key)
                .map(move |i| &mut values[i]),
            Repr::Large(m) => m.get_mut(key),
        }
    }

    /// Returns memory the map no longer needs (after a sweep removed many
    /// entries): a hash map at under a quarter of its capacity shrinks, and
    /// one that fits the vectors again moves back into them.
    pub fn shrink(&mut self) {
        if let Repr::Large(m) = &mut self.0 {
            if m.len() <= SMALL_MAP_VEC_MAX / 2 {
                let m = std::mem::replace(m, HashMap::with_hasher(self.1.clone()));
                let (keys, values) = m.into_iter().unzip();
                self.0 = Repr::Small { keys, values };
            } else if m.capacity() > 4 * m.len() {
                m.shrink_to_fit();
            }
        }
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Small { keys, .. } => keys.len(),
            Repr::Large(m) => m.len(),
        }
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value under `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        match &self.0 {
            Repr::Small { keys, values } => keys.iter().position(|k| k == key).map(|i| &values[i]),
            Repr::Large(m) => m.get(key),
        }
    }

    /// The value under `key`, made by `make` if there was none, unless
    /// there was none and the map holds `len_max` entries already (`None`).
    /// One scan (or one hash probe) finds the key.
    pub fn get_or_insert_with(
        &mut self,
        key: K,
        len_max: usize,
        make: impl FnOnce() -> V,
    ) -> Option<&mut V> {
        let len = self.len();
        let at = match &self.0 {
            Repr::Small { keys, .. } => keys.iter().position(|k| *k == key),
            Repr::Large(_) => None,
        };
        if at.is_none() {
            // Not in the vectors; in the map, only a full one looks first.
            if len >= len_max && !matches!(&self.0, Repr::Large(m) if m.contains_key(&key)) {
                return None;
            }
            self.grow_for_one();
        }
        match &mut self.0 {
            Repr::Small { keys, values } => {
                let i = at.unwrap_or_else(|| {
                    keys.push(key);
                    values.push(make());
                    len
                });
                Some(&mut values[i])
            }
            Repr::Large(m) => Some(m.entry(key).or_insert_with(make)),
        }
    }

    /// Keeps only the entries `keep` accepts (it may change them).
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        match &mut self.0 {
            Repr::Small { keys, values } => {
                let mut i = 0;
                while i < keys.len() {
                    if keep(&keys[i], &mut values[i]) {
                        i += 1;
                    } else {
                        keys.swap_remove(i);
                        values.swap_remove(i);
                    }
                }
            }
            Repr::Large(m) => m.retain(|k, v| keep(k, v)),
        }
    }

    /// Every value, in no particular order (for counting at scrape time).
    pub fn values(&self) -> Box<dyn Iterator<Item = &V> + '_> {
        match &self.0 {
            Repr::Small { values, .. } => Box::new(values.iter()),
            Repr::Large(m) => Box::new(m.values()),
        }
    }

    /// Every entry, in no particular order (for the status page at scrape time).
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&K, &V)> + '_> {
        match &self.0 {
            Repr::Small { keys, values } => Box::new(keys.iter().zip(values.iter())),
            Repr::Large(m) => Box::new(m.iter()),
        }
    }

    /// Drops every entry and any memory beyond the small form's.
    pub fn clear(&mut self) {
        let hasher = self.1.clone();
        *self = SmallMap::with_hasher(hasher);
    }

    /// Starts loading the keys and the first value (a cache hint for a
    /// driver that knows this map is read next; it changes no result).
    pub fn prefetch(&self) {
        if let Repr::Small { keys, values } = &self.0 {
            crate::dsht::prefetch::prefetch(keys.as_ptr().cast(), std::mem::size_of_val(&keys[..]));
            crate::dsht::prefetch::prefetch(
                values.as_ptr().cast(),
                std::mem::size_of::<V>().min(std::mem::size_of_val(&values[..])),
            );
        }
    }

    /// The value [`prefetch`](SmallMap::prefetch) starts loading (the
    /// first entry's, in the small form), for a driver that prefetches what
    /// it points to in turn.
    pub fn first_value(&self) -> Option<&V> {
        match &self.0 {
            Repr::Small { values, .. } => values.first(),
            Repr::Large(_) => None,
        }
    }

    /// Moves to the hash map when one more entry would not fit the vectors.
    fn grow_for_one(&mut self) {
        if let Repr::Small { keys, values } = &mut self.0 {
            if keys.len() >= SMALL_MAP_VEC_MAX {
                let mut map = HashMap::with_capacity_and_hasher(2 * keys.len(), self.1.clone());
                map.extend(std::mem::take(keys).into_iter().zip(std::mem::take(values)));
                self.0 = Repr::Large(map);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        /// get-or-insert `k` (made as `v`), then add one to its value.
        Bump(u8, u32),
        RetainEven,
        Clear,
        Shrink,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u8..24, any::<u32>()).prop_map(|(k, v)| Op::Bump(k, v)),
            1 => Just(Op::RetainEven),
            1 => Just(Op::Clear),
            1 => Just(Op::Shrink),
        ]
    }

    proptest! {
        /// Through any sequence of operations, in both forms and across the
        /// move between them, the map answers as an ordered map would.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec(op(), 1..300), len_max in 1usize..30) {
            let mut m: SmallMap<u8, u32> = SmallMap::new();
            let mut model: BTreeMap<u8, u32> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Bump(k, v) => {
                        let got = m.get_or_insert_with(k, len_max, || v).map(|x| {
                            *x = x.wrapping_add(1);
                            *x
                        });
                        let want = if model.contains_key(&k) || model.len() < len_max {
                            let x = model.entry(k).or_insert(v);
                            *x = x.wrapping_add(1);
                            Some(*x)
                        } else {
                            None
                        };
                        prop_assert_eq!(got, want);
                    }
                    Op::RetainEven => {
                        m.retain(|_, v| *v % 2 == 0);
                        model.retain(|_, v| *v % 2 == 0);
                    }
                    Op::Clear => {
                        m.clear();
                        model.clear();
                    }
                    Op::Shrink => m.shrink(),
                }
                prop_assert_eq!(m.len(), model.len());
                for k in 0u8..24 {
                    prop_assert_eq!(m.get(&k), model.get(&k));
                }
            }
        }
    }

    #[test]
    fn moves_to_a_hash_map_beyond_the_vectors() {
        let mut m = SmallMap::new();
        for k in 0..SMALL_MAP_VEC_MAX as u32 {
            m.get_or_insert_with(k, usize::MAX, || k);
        }
        assert!(matches!(m.0, Repr::Small { .. }));
        m.get_or_insert_with(100, usize::MAX, || 100);
        assert!(matches!(m.0, Repr::Large(_)));
        assert_eq!(m.len(), SMALL_MAP_VEC_MAX + 1);
        assert_eq!(m.get(&3), Some(&3));
        assert_eq!(m.get(&100), Some(&100));
        m.clear();
        assert!(matches!(m.0, Repr::Small { .. }) && m.is_empty());
    }
}
