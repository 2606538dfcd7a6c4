//! Maintenance: periodic sweeps of the stores and tables, and refreshing the
//! buckets no lookup has touched (Kademlia's bucket refresh).

use crate::dsht::id::Id;
use crate::dsht::limits::JOIN_REFRESHES_MAX;
use crate::time::{Duration, Time};

use super::timers::Timer;
use super::{Level, Node, MAINTENANCE_INTERVAL, PINGED_RECENTLY, SWEEP_INTERVAL};

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
        if now.saturating_since(self.last_sweep) >= SWEEP_INTERVAL {
            self.last_sweep = now;
            for l in &mut self.levels {
                l.store.sweep(now);
            }
            self.pinged
                .retain(|_, t| now.saturating_since(*t) < PINGED_RECENTLY);
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

    /// After a lookup for our own id (joining), refresh every bucket farther
    /// than our closest neighbour with a lookup for a random id in it, as
    /// Kademlia does, so the table holds contacts across the whole id space.
    pub(super) fn refresh_far_buckets(&mut self, now: Time, level: Level) {
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
            let target = self.random_id_in_bucket(bucket);
            self.refresh(now, target, level);
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
