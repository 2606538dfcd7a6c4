//! The RPCs a node has sent and not yet seen answered or timed out, by
//! transaction id.
//!
//! A node numbers its requests in sequence (`Node::next_txid`), so the
//! table is direct-mapped: the RPC with id `t` sits in slot `t mod
//! capacity`, and a new RPC whose next id would land on a slot still in use
//! takes the next id whose slot is free. A lookup is one slot, never a
//! probe, and RPCs sent together sit in neighbouring slots: the liveness
//! checks of a node's timers (`Node::prune_timers`) read one line of keys,
//! and a driver that knows the reply coming next can start loading its
//! slot ([`PendingRpcs::prefetch`]; issue 27: the probes of the node's
//! hash maps, this one's the most, were 7.6 % of the simulator's join at
//! 100,000 nodes, most of them cache misses). A reply's txid is the
//! sender's to choose: it only ever selects a slot, whose key must then
//! match it exactly.

use crate::dsht::prefetch::prefetch;
use crate::time::Time;

use super::send::{Pending, Purpose};

use super::optable::{shrunk_slots, SLOTS_MIN};

/// A slot's key: the RPC's id and deadline (what a timer's liveness check
/// reads), and whether the slot is in use.
#[derive(Clone, Copy, Debug, Default)]
struct Key {
    txid: u32,
    live: bool,
    deadline: Time,
}

/// The outstanding RPCs, direct-mapped by transaction id (see the module).
#[derive(Debug, Default)]
pub(super) struct PendingRpcs {
    keys: Vec<Key>,
    entries: Vec<Pending>,
    len: usize,
}

/// What an unused entry holds (never read as an RPC).
const VACANT: Pending = Pending {
    to: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::UNSPECIFIED,
        0,
    )),
    to_id: None,
    sent: Time::ZERO,
    deadline: Time::ZERO,
    request_kind: 0,
    purpose: Purpose::HintPing,
};

impl PendingRpcs {
    /// How many RPCs are outstanding.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How many slots the table has (a power of two, or 0).
    pub(super) fn capacity(&self) -> usize {
        self.keys.len()
    }

    /// Where `txid` would sit.
    fn slot(&self, txid: u32) -> usize {
        txid as usize & (self.keys.len().wrapping_sub(1))
    }

    /// The slot holding `txid`, if it is outstanding.
    fn find(&self, txid: u32) -> Option<usize> {
        if self.keys.is_empty() {
            return None;
        }
        let s = self.slot(txid);
        let k = &self.keys[s];
        (k.live && k.txid == txid).then_some(s)
    }

    /// The outstanding RPC `txid`.
    pub(super) fn get(&self, txid: u32) -> Option<&Pending> {
        self.find(txid).map(|s| &self.entries[s])
    }

    /// Whether RPC `txid` is outstanding with deadline `at` (a timer for
    /// it still has work): reads the keys only.
    pub(super) fn live_until(&self, txid: u32, at: Time) -> bool {
        self.find(txid).is_some_and(|s| self.keys[s].deadline == at)
    }

    /// Removes and returns the outstanding RPC `txid`.
    pub(super) fn remove(&mut self, txid: u32) -> Option<Pending> {
        let s = self.find(txid)?;
        self.keys[s].live = false;
        self.len -= 1;
        Some(self.entries[s])
    }

    /// Adds an RPC under the first id from `next` on whose slot is free,
    /// growing the table first if it is seven eighths full (as the hash
    /// map it replaced: a node's RPCs peak during its join, and the room
    /// stays until its idle sweep); returns the id. The caller bounds how
    /// many are outstanding (`pending_rpcs_max`); below seven eighths full
    /// a free slot is always found.
    pub(super) fn insert_next(&mut self, next: u32, rpc: Pending) -> u32 {
        if 8 * (self.len + 1) > 7 * self.keys.len() {
            self.rebuild((2 * self.keys.len()).max(SLOTS_MIN));
        }
        let mut txid = next;
        while self.keys[self.slot(txid)].live {
            txid = txid.wrapping_add(1);
        }
        let s = self.slot(txid);
        self.keys[s] = Key {
            txid,
            live: true,
            deadline: rpc.deadline,
        };
        self.entries[s] = rpc;
        self.len += 1;
        txid
    }

    /// Gives back room: the table shrinks to the fewest slots, at least
    /// `min`, in which its outstanding RPCs still each have a slot of their
    /// own (none if it is empty and `min` is 0).
    pub(super) fn shrink_to(&mut self, min: usize) {
        let held = self
            .keys
            .iter()
            .filter(|k| k.live)
            .map(|k| u64::from(k.txid));
        if let Some(slots) = shrunk_slots(self.len, min, self.keys.len(), held) {
            self.rebuild(slots);
        }
    }

    /// Moves every outstanding RPC into a table of `slots` slots (a power
    /// of two, or 0; each RPC has a slot of its own there).
    fn rebuild(&mut self, slots: usize) {
        let mut keys = vec![Key::default(); slots];
        let mut entries = vec![VACANT; slots];
        for (k, e) in self.keys.iter().zip(&self.entries).filter(|(k, _)| k.live) {
            let s = k.txid as usize & (slots - 1);
            debug_assert!(!keys[s].live, "an RPC's slot taken twice");
            keys[s] = *k;
            entries[s] = *e;
        }
        self.keys = keys;
        self.entries = entries;
    }

    /// Starts loading the slot of RPC `txid` (a reply about to arrive): a
    /// hint that changes no result.
    #[inline]
    pub(super) fn prefetch(&self, txid: u32) {
        if self.keys.is_empty() {
            return;
        }
        let s = self.slot(txid);
        prefetch((&self.keys[s] as *const Key).cast(), 1);
        prefetch((&self.entries[s] as *const Pending).cast(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;

    fn rpc(deadline_ms: u64) -> Pending {
        Pending {
            deadline: Time::ZERO + Duration::from_millis(deadline_ms),
            ..VACANT
        }
    }

    #[test]
    fn ids_follow_the_sequence_and_skip_slots_in_use() {
        let mut p = PendingRpcs::default();
        assert_eq!(p.insert_next(5, rpc(1)), 5);
        assert_eq!(p.insert_next(6, rpc(2)), 6);
        assert_eq!(p.capacity(), SLOTS_MIN);
        // 9 mod 4 is 5's slot: the next free one is 11's (10 lands on 6's,
        // still in use; 11 on the last).
        assert_eq!(p.insert_next(9, rpc(3)), 9 + 2);
        assert_eq!(p.get(5).map(|r| r.deadline), Some(rpc(1).deadline));
        assert!(p.get(9).is_none(), "never issued");
        assert!(p.live_until(11, rpc(3).deadline));
        assert!(!p.live_until(11, rpc(2).deadline), "another deadline");
        assert_eq!(p.remove(5).map(|r| r.deadline), Some(rpc(1).deadline));
        assert!(p.remove(5).is_none());
        assert_eq!(p.len(), 2);
        // Its slot is free again.
        assert_eq!(p.insert_next(13, rpc(4)), 13);
    }

    #[test]
    fn it_grows_and_shrinks_keeping_every_rpc() {
        let mut p = PendingRpcs::default();
        let mut ids = Vec::new();
        let mut next = u32::MAX - 40; // across the wrap
        for i in 0..100 {
            let t = p.insert_next(next, rpc(i));
            next = t.wrapping_add(1);
            ids.push(t);
        }
        assert_eq!(p.len(), 100);
        assert!(p.capacity() >= 128 && p.capacity().is_power_of_two());
        for (i, &t) in ids.iter().enumerate() {
            assert!(p.live_until(t, rpc(i as u64).deadline), "rpc {i}");
        }
        // All but a few answered: the table shrinks and keeps them.
        for &t in &ids[..97] {
            assert!(p.remove(t).is_some());
        }
        p.shrink_to(2 * p.len());
        assert_eq!(p.capacity(), 8);
        for (i, &t) in ids.iter().enumerate().skip(97) {
            assert!(p.live_until(t, rpc(i as u64).deadline), "rpc {i}");
        }
        for &t in &ids[97..] {
            assert!(p.remove(t).is_some());
        }
        p.shrink_to(0);
        assert_eq!(p.capacity(), 0);
        assert!(p.get(ids[0]).is_none());
        assert_eq!(p.insert_next(7, rpc(0)), 7);
    }

    /// SECURITY.md's figure: a slot is 16 bytes of key and 88 of RPC, so a
    /// node at `pending_rpcs_max` (16,384; 32,768 slots) holds 3.25 MiB.
    #[test]
    fn a_slot_is_104_bytes() {
        assert_eq!(std::mem::size_of::<Key>(), 16);
        assert_eq!(std::mem::size_of::<Pending>(), 88);
        let mut p = PendingRpcs::default();
        for t in 0..16_384 {
            p.insert_next(t, rpc(0));
        }
        assert_eq!(p.capacity(), 32_768);
    }

    #[test]
    fn a_shrink_that_would_put_two_rpcs_in_one_slot_keeps_more_slots() {
        let mut p = PendingRpcs::default();
        for t in 0..20 {
            p.insert_next(t, rpc(0));
        }
        for t in 0..20 {
            if t != 3 && t != 3 + 8 {
                p.remove(t);
            }
        }
        // 3 and 11 share a slot of 8: 16 slots it is.
        p.shrink_to(2 * p.len());
        assert_eq!(p.capacity(), 16);
        assert!(p.get(3).is_some() && p.get(11).is_some());
    }
}
