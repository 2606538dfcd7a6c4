//! Maintenance: periodic sweeps of the stores and tables, and refreshing the
//! buckets no lookup has touched (Kademlia's bucket refresh).

use smallvec::SmallVec;

use crate::dsht::id::Id;
use crate::dsht::limits::{JOIN_REFRESHES_MAX, REBOOTSTRAP_INTERVAL, REFILL_GROWTH_FACTOR};
use crate::dsht::lookup::Lookup;
use crate::dsht::wire::Contact;
use crate::time::{Duration, Time};

use super::ops::OpKind;
use super::timers::Timer;
use super::{Level, Node, MAINTENANCE_INTERVAL, SWEEP_INTERVAL};

/// Capacity (entries) up to which a drained map or queue keeps what it has:
/// a node in steady use holds a few operations and RPCs at a time. (An
/// operation is about 230 bytes: a node's 14 join refreshes left a table of
/// 16 of them, 3.7 KB, behind.)
const IDLE_CAPACITY_MIN: usize = 4;

impl Node {
    pub(super) fn maintain(&mut self, now: Time) {
        self.timers
            .push(now + MAINTENANCE_INTERVAL, Timer::Maintenance);
        for l in &mut self.levels {
            let generation = l.table.generation();
            if l.estimated_at != Some(generation) {
                l.size_estimate = l.table.size_estimate();
                l.estimated_at = Some(generation);
                // Each node holds itself to half the paper's bound for
                // its own estimate of n (`Store::set_probes_per_min_target`).
                let bound = self
                    .config
                    .hotspot_bound_per_min(u64::from(l.size_estimate));
                l.store
                    .set_probes_per_min_target((bound / 2).min(u64::from(u32::MAX)) as u32);
            }
        }
        for level in 0..self.levels.len() {
            self.refill_if_grown(now, level as Level);
        }
        if !self.bootstrap_addrs.is_empty()
            && now.saturating_since(self.bootstrapped_at) >= REBOOTSTRAP_INTERVAL
            && (self.levels[0].table.is_empty() || self.levels[0].table.is_stranded().is_some())
        {
            self.send_bootstrap(now);
        }
        if now.saturating_since(self.last_sweep) >= SWEEP_INTERVAL {
            self.last_sweep = now;
            for l in &mut self.levels {
                l.store.sweep(now);
            }
            self.pinged.retain_recent(now);
            self.release_idle_capacity();
        }
        // Kademlia's refresh: a lookup for a random id in one quiet bucket per level.
        let quiet_since = now - Duration::from_secs(self.config.bucket_refresh_secs);
        if now.as_micros() >= Duration::from_secs(self.config.bucket_refresh_secs).as_micros() {
            for level in 0..self.levels.len() {
                let stale = self.levels[level].table.stale_buckets(quiet_since);
                if let Some(&bucket) = stale.first() {
                    let target = self.random_id_in_bucket(bucket);
                    self.refresh(now, target, level as Level);
                }
            }
        }
    }

    /// Hands back what a burst of work left allocated: maps and queues keep
    /// their capacity after they drain, and a node holds its state for life.
    /// Joining (twenty refresh walks at once, the RPCs and timers they send,
    /// the verification pings of every node that learns of us) leaves a
    /// node's operations, outstanding RPCs, pinged sources and timers sized
    /// for their peak: 16 KB of a simulated node's 42 KB at 10,000 nodes
    /// (issue 27). Nothing iterates these in an order that depends on their
    /// capacity (they are looked up by key, and timers pop in deadline
    /// order), so shrinking them changes no behaviour; only those holding
    /// four times what they need are shrunk, so a node in steady use does
    /// not reallocate every sweep.
    fn release_idle_capacity(&mut self) {
        fn roomy(capacity: usize, len: usize) -> bool {
            capacity > IDLE_CAPACITY_MIN && capacity > 4 * len
        }
        if roomy(self.ops.capacity(), self.ops.len()) {
            self.ops.shrink_to(2 * self.ops.len());
        }
        if roomy(self.pending.capacity(), self.pending.len()) {
            self.pending.shrink_to(2 * self.pending.len());
        }
        self.pinged.release_idle_capacity(roomy);
        if roomy(self.internal.capacity(), self.internal.len()) {
            self.internal.shrink_to(2 * self.internal.len());
        }
        self.timers.release_idle_capacity(IDLE_CAPACITY_MIN);
        if self.learned.is_empty() {
            self.learned = std::collections::VecDeque::new();
        }
    }

    /// Rule 10 (issue 27): a node fills its full far buckets again, as it
    /// did when it joined, once its estimate of the network's size has grown
    /// [`REFILL_GROWTH_FACTOR`]-fold since it last did. A join fills each
    /// far bucket with a random neighbourhood of its range (rule 9), a fair
    /// sample of the network *as it was*; the nodes that join later enter
    /// it only when a contact fails, since a full bucket keeps contacts of
    /// known uptime. So a node that joined when the network was j nodes
    /// was adopted by each later joiner with a chance that falls as 1/j,
    /// and the early joiners sat in many times the median node's tables:
    /// at 10,000 nodes (seed 1) the 65th to join was in 526 tables against
    /// the median's 58, the first hop of 95 nodes' walks toward the key,
    /// and took 185 put RPCs in the load's first minute, before anything
    /// was loaded; at 1,000,000 nodes its like took 583 against the bound
    /// 240. Refilled at each 4-fold growth, a table is a sample of a
    /// network at least a quarter of today's (a bucket with room needs no
    /// refill: it takes every node it hears from). The preference for uptime is
    /// given up for the contacts the refill finds in their place: a bucket
    /// takes the k closest answers to a random id in its range, ahead of
    /// older contacts (`RoutingTable::adopt`), which keep only the room
    /// left. At most 16 refills a level in a node's life
    /// ([`REFILL_GROWTH_FACTOR`]); levels above 0 start again when the node
    /// switches cluster.
    fn refill_if_grown(&mut self, now: Time, level: Level) {
        let l = &self.levels[level as usize];
        if l.filled_for > 0 && l.size_estimate >= l.filled_for.saturating_mul(REFILL_GROWTH_FACTOR)
        {
            self.refresh_far_buckets(now, level, true);
        }
    }

    /// After a lookup for our own id (joining), refresh every bucket farther
    /// than our closest neighbour with a lookup for a random id in it, as
    /// Kademlia does, so the table holds contacts across the whole id space;
    /// each refresh's answers take its bucket (rule 9). Also a refill
    /// ([`Node::refill_if_grown`]), `only_full`: a bucket with room takes
    /// every node it hears from, so only a full one holds a stale sample.
    pub(super) fn refresh_far_buckets(&mut self, now: Time, level: Level, only_full: bool) {
        let l = &mut self.levels[level as usize];
        l.filled_for = l.filled_for.max(l.table.size_estimate()).max(1);
        let table = &self.levels[level as usize].table;
        let Some(nearest) = table
            .entries()
            .map(|e| self.id.distance(&e.contact.id).bit_len())
            .min()
        else {
            return;
        };
        // Bucket i holds distances of bit length i + 1.
        let first = nearest as usize; // the bucket just past the closest neighbour's
        for bucket in (first..crate::dsht::id::ID_BITS as usize)
            .rev()
            .take(JOIN_REFRESHES_MAX)
        {
            if only_full && !self.levels[level as usize].table.bucket_is_full(bucket) {
                continue;
            }
            let target = self.random_id_in_bucket(bucket);
            self.refresh_as(now, target, level, OpKind::JoinRefresh);
        }
    }

    /// A join refresh of the bucket holding `lookup`'s key (a random id in
    /// it) is over: the bucket takes the k closest nodes to that id that
    /// answered, in place of whichever nodes answered this newcomer first
    /// (`RoutingTable::adopt`). Kademlia keeps a full bucket's old contacts
    /// because a node seen long ago is likely to stay up; a node that has
    /// just joined has known all of its contacts for a second or less, so
    /// that preference says nothing here, and the first to answer a
    /// newcomer are the contacts every other table already holds (the
    /// early joiners: issue 27). Without this, those nodes sit in the far
    /// buckets of every later node and are the first hop of hundreds of
    /// senders' walks toward any key (§4.1: the first hop is the contact
    /// closest to splice(k, r, 1)); with it, a far bucket holds a random
    /// neighbourhood of its range, as the refresh's random target intends.
    pub(super) fn adopt_join_refresh(&mut self, now: Time, level: Level, lookup: &Lookup) {
        let k = self.config.bucket_size;
        let Some(l) = self.levels.get(level as usize) else {
            return;
        };
        let bucket = self.id.distance(&lookup.key()).bit_len();
        let mut chosen: SmallVec<[Contact; 16]> = SmallVec::new();
        for c in lookup.answered_by_distance() {
            if chosen.len() == k {
                break;
            }
            // Only nodes that this node admits and that fall in the
            // refreshed bucket (a walk's early hops may lie elsewhere).
            if self.id.distance(&c.contact.id).bit_len() == bucket
                && self.admits(c.contact.addr, &c.contact.id)
                && (level == 0 || l.table.get(&c.contact.id).is_some())
            {
                chosen.push(c.contact);
            }
        }
        if !chosen.is_empty() {
            self.levels[level as usize]
                .table
                .adopt(&lookup.key(), &chosen, now);
        }
    }

    fn random_id_in_bucket(&mut self, bucket: usize) -> Id {
        // Distance with bit length bucket+1: flip bit (159 − bucket), randomise below it.
        let mut d = Id::ZERO;
        self.rng.fill(&mut d.0);
        let top = 159 - bucket as u32;
        for bit in 0..=top {
            let (byte, mask) = ((bit / 8) as usize, 0x80u8 >> (bit % 8));
            if bit < top {
                d.0[byte] &= !mask;
            } else {
                d.0[byte] |= mask;
            }
        }
        let mut out = self.id;
        for i in 0..out.0.len() {
            out.0[i] ^= d.0[i];
        }
        out
    }
}
