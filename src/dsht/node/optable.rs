//! The operations under way, by operation id: direct-mapped, as the
//! outstanding RPCs are by transaction id ([`super::pending`]).
//!
//! A node numbers its operations in sequence from 1 (`Node::alloc_op`) and
//! never reuses an id, so operation `op` sits in slot `op mod capacity`; a
//! new operation whose next id would land on a slot in use takes the next id
//! whose slot is free ([`OpTable::free_from`]). A lookup is one slot, never a
//! probe: every reply to an operation's RPC takes the operation out and puts
//! it back, and every operation timer asks whether it is still under way
//! (issue 27: those probes of the hash map this replaced were about 3 % of
//! the simulator's join at 50,000 nodes). An id only ever selects a slot,
//! whose id must then match exactly.
//!
//! One case finds its slot taken: an operation started while another was
//! out of the table (being driven) may be given the other's slot, and the
//! other, put back, goes to a small hash map beside the slots instead,
//! which is looked at only when it holds any (it held none in the
//! simulator's runs at 10,000 and 50,000 nodes; `tests` cover it).

use std::collections::HashMap;

use crate::dsht::id::FastBuildHasher;

/// The fewest slots a table that holds anything has (here and in
/// [`super::pending`]).
pub(super) const SLOTS_MIN: usize = 4;

/// The operations under way (see the module): the node's are `Box<Op>`.
pub(super) struct OpTable<V> {
    /// Slot `s` holds operation `ids[s]`, or none where it is 0 (ids start
    /// at 1). Apart from the operations, so that a timer's check reads a
    /// line of ids.
    ids: Vec<u64>,
    ops: Vec<Option<V>>,
    /// Operations whose slot was taken when they were put back (see the
    /// module).
    displaced: HashMap<u64, V, FastBuildHasher>,
    len: usize,
}

impl<V> Default for OpTable<V> {
    fn default() -> Self {
        OpTable {
            ids: Vec::new(),
            ops: Vec::new(),
            displaced: HashMap::default(),
            len: 0,
        }
    }
}

impl<V> OpTable<V> {
    /// How many operations are under way.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How many slots the table has (a power of two, or 0).
    pub(super) fn capacity(&self) -> usize {
        self.ids.len()
    }

    fn slot_in(op: u64, slots: usize) -> usize {
        op as usize & slots.wrapping_sub(1)
    }

    /// The slot holding `op`, if it is under way.
    fn find(&self, op: u64) -> Option<usize> {
        if self.ids.is_empty() || op == 0 {
            return None;
        }
        let s = Self::slot_in(op, self.ids.len());
        (self.ids[s] == op).then_some(s)
    }

    /// Whether operation `op` is under way.
    pub(super) fn contains_key(&self, op: &u64) -> bool {
        self.find(*op).is_some() || (!self.displaced.is_empty() && self.displaced.contains_key(op))
    }

    /// Operation `op`, if it is under way.
    pub(super) fn get_mut(&mut self, op: &u64) -> Option<&mut V> {
        match self.find(*op) {
            Some(s) => self.ops[s].as_mut(),
            None if self.displaced.is_empty() => None,
            None => self.displaced.get_mut(op),
        }
    }

    /// Takes operation `op` out.
    pub(super) fn remove(&mut self, op: &u64) -> Option<V> {
        let o = match self.find(*op) {
            Some(s) => {
                self.ids[s] = 0;
                self.ops[s].take()
            }
            None if self.displaced.is_empty() => None,
            None => self.displaced.remove(op),
        };
        self.len -= usize::from(o.is_some());
        o
    }

    /// The first id from `next` on whose slot is free (`next` itself in an
    /// empty table). Below seven eighths full, one is always found.
    pub(super) fn free_from(&self, next: u64) -> u64 {
        let mut op = next.max(1);
        if self.ids.is_empty() {
            return op;
        }
        while self.ids[Self::slot_in(op, self.ids.len())] != 0 {
            op += 1;
        }
        op
    }

    /// Adds operation `op` (not under way), growing the table first if it
    /// is seven eighths full. Its slot is free unless an operation started
    /// while `op` was out of the table took it: then `op` goes beside the
    /// slots (see the module).
    pub(super) fn insert(&mut self, op: u64, o: V) {
        debug_assert!(op != 0 && !self.contains_key(&op));
        if 8 * (self.len + 1) > 7 * self.ids.len() {
            self.rebuild((2 * self.ids.len()).max(SLOTS_MIN));
        }
        let s = Self::slot_in(op, self.ids.len());
        if self.ids[s] == 0 {
            self.ids[s] = op;
            self.ops[s] = Some(o);
        } else {
            self.displaced.insert(op, o);
        }
        self.len += 1;
    }

    /// Gives back room: the table shrinks to the fewest slots, at least
    /// `min`, in which the operations in slots still each have a slot of
    /// their own (none if it is empty and `min` is 0).
    pub(super) fn shrink_to(&mut self, min: usize) {
        let held = self.ids.iter().copied().filter(|&op| op != 0);
        if let Some(slots) = shrunk_slots(self.len, min, self.ids.len(), held) {
            self.rebuild(slots);
        }
    }

    /// Moves every operation in a slot into a table of `slots` slots (a
    /// power of two, or 0; each has a slot of its own there), and the
    /// displaced into theirs where they are free.
    fn rebuild(&mut self, slots: usize) {
        let mut ids = vec![0u64; slots];
        let mut ops: Vec<Option<V>> = Vec::with_capacity(slots);
        ops.resize_with(slots, || None);
        for (op, o) in self.ids.iter().zip(self.ops.iter_mut()) {
            if *op != 0 {
                let s = Self::slot_in(*op, slots);
                debug_assert!(ids[s] == 0, "an operation's slot taken twice");
                ids[s] = *op;
                ops[s] = o.take();
            }
        }
        self.ids = ids;
        self.ops = ops;
        // The displaced take their slots where these are free now.
        if !self.displaced.is_empty() && slots > 0 {
            let displaced = std::mem::take(&mut self.displaced);
            for (op, o) in displaced {
                let s = Self::slot_in(op, slots);
                if self.ids[s] == 0 {
                    self.ids[s] = op;
                    self.ops[s] = Some(o);
                } else {
                    self.displaced.insert(op, o);
                }
            }
        }
    }
}

/// The fewest slots, at least `min` (a power of two, at least
/// [`SLOTS_MIN`]; 0 for an empty table and `min` 0), fewer than
/// `capacity`, in which a direct-mapped table's ids `held` (`len` of them)
/// each have a slot of their own: the size its idle sweep shrinks it to
/// (here, and the outstanding RPCs' in [`super::pending`]), if any.
pub(super) fn shrunk_slots(
    len: usize,
    min: usize,
    capacity: usize,
    held: impl Iterator<Item = u64> + Clone,
) -> Option<usize> {
    let mut slots = if len == 0 && min == 0 {
        0
    } else {
        min.max(SLOTS_MIN).next_power_of_two()
    };
    while slots < capacity {
        if slots == 0 {
            if len == 0 {
                return Some(0);
            }
        } else {
            let mut used = vec![false; slots];
            if !held
                .clone()
                .any(|id| std::mem::replace(&mut used[id as usize & (slots - 1)], true))
            {
                return Some(slots);
            }
        }
        slots = (2 * slots).max(SLOTS_MIN);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(ids: &[u64]) -> OpTable<u32> {
        let mut t = OpTable::default();
        for &op in ids {
            t.insert(op, 0);
        }
        t
    }

    #[test]
    fn ids_follow_the_sequence_and_skip_slots_in_use() {
        let mut t = OpTable::<u32>::default();
        assert_eq!(t.free_from(0), 1, "ids start at 1");
        assert_eq!(t.free_from(1), 1);
        t.insert(1, 0);
        t.insert(2, 0);
        assert_eq!(t.capacity(), SLOTS_MIN);
        // 5 lands on 1's slot, 6 on 2's: 7 it is.
        assert_eq!(t.free_from(5), 7);
        assert!(t.contains_key(&1) && t.contains_key(&2));
        assert!(!t.contains_key(&5), "never started");
        assert!(!t.contains_key(&0));
        assert!(t.get_mut(&5).is_none());
        assert!(t.remove(&1).is_some());
        assert!(t.remove(&1).is_none());
        assert!(!t.contains_key(&1));
        assert_eq!(t.len(), 1);
        assert_eq!(t.free_from(5), 5, "1's slot is free again");
    }

    #[test]
    fn it_grows_and_shrinks_keeping_every_operation() {
        let mut t = OpTable::<u32>::default();
        let mut ids = Vec::new();
        let mut next = 1;
        for _ in 0..100 {
            let op = t.free_from(next);
            t.insert(op, 0);
            ids.push(op);
            next = op + 1;
        }
        assert_eq!(t.len(), 100);
        assert!(t.capacity() >= 128 && t.capacity().is_power_of_two());
        assert!(ids.iter().all(|op| t.contains_key(op)));
        for op in &ids[..97] {
            assert!(t.remove(op).is_some());
        }
        t.shrink_to(2 * t.len());
        assert_eq!(t.capacity(), 8);
        assert!(ids[97..].iter().all(|op| t.get_mut(op).is_some()));
        for op in &ids[97..] {
            assert!(t.remove(op).is_some());
        }
        t.shrink_to(0);
        assert_eq!(t.capacity(), 0);
        assert!(!t.contains_key(&ids[0]));
        assert_eq!(t.free_from(7), 7);
    }

    /// An operation started while another was out of the table took its
    /// slot: the other, put back, goes beside the slots, and is found,
    /// taken out and moved into a slot of its own as any other.
    #[test]
    fn an_operation_put_back_onto_a_taken_slot_is_displaced() {
        let mut t = table_with(&[1, 2]);
        assert_eq!(t.remove(&1), Some(0));
        let op = t.free_from(5);
        assert_eq!(op, 5, "1's slot, free while 1 is out");
        t.insert(op, 5);
        t.insert(1, 1);
        assert_eq!((t.len(), t.capacity(), t.displaced.len()), (3, 4, 1));
        assert!([1, 2, 5].iter().all(|op| t.contains_key(op)));
        assert_eq!(t.get_mut(&1).copied(), Some(1));
        // Out and back while 5 holds the slot: displaced again.
        assert_eq!(t.remove(&1), Some(1));
        assert!(!t.contains_key(&1));
        t.insert(1, 1);
        // A grown table has room for both: 1 and 5 part at 8 slots.
        for op in 6..=8 {
            t.insert(op, 0);
        }
        assert_eq!((t.capacity(), t.displaced.len()), (8, 0));
        assert!([1, 2, 5, 6, 7, 8].iter().all(|op| t.contains_key(op)));
        assert_eq!(t.remove(&5), Some(5));
        assert_eq!(t.remove(&1), Some(1));
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_shrink_that_would_put_two_operations_in_one_slot_keeps_more_slots() {
        let mut t = table_with(&(1..=20).collect::<Vec<_>>());
        for op in 1..=20 {
            if op != 3 && op != 3 + 8 {
                t.remove(&op);
            }
        }
        // 3 and 11 share a slot of 8: 16 slots it is.
        t.shrink_to(2 * t.len());
        assert_eq!(t.capacity(), 16);
        assert!(t.contains_key(&3) && t.contains_key(&11));
    }
}
