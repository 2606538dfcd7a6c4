//! Sloppy storage (§4.2): per-key value lists with TTLs, *full* and *loaded*.
//!
//! - A node is **full** for key k with respect to a new value when it stores
//!   l values for k whose remaining TTLs are all at least half the new value's.
//! - A node is **loaded** for k when it has received more than β requests
//!   for k within the past minute. The leakage rate is kept as a token bucket
//!   of β tokens refilled at β per minute: each forward-phase request takes a
//!   token, and a request that finds none sees the node loaded. Under heavy
//!   load exactly β requests a minute find it unloaded and "leak" past it
//!   toward the key (the paper: "loaded for all but one store attempt every
//!   5 seconds"). The requests counted are forward-phase probes for the key,
//!   received from the network or made by the local node's own puts.
//! - A store that finds the node not full evicts the value with the shortest
//!   remaining TTL if the list is at l values; a store of a value already
//!   present extends its expiry.

use smallvec::SmallVec;

use crate::id::Key;
use crate::rng::Rng;
use crate::smallmap::SmallMap;
use crate::time::{Duration, Time};
use crate::wire::{Value, Values};

/// One stored value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredValue {
    /// The value.
    pub value: Value,
    /// When it expires.
    pub expires: Time,
}

/// The leakage-rate token bucket of one key.
#[derive(Clone, Copy, Debug)]
struct Leak {
    /// Accumulated credit in microseconds; one token costs 60 s / β.
    credit_us: u64,
    last: Time,
}

const MINUTE_US: u64 = 60_000_000;

impl Leak {
    fn new(now: Time) -> Leak {
        Leak {
            credit_us: MINUTE_US,
            last: now,
        }
    }

    /// Counts one request; returns whether the key is loaded for it.
    fn request(&mut self, now: Time, beta_per_min: u32) -> bool {
        let elapsed = now.saturating_since(self.last).as_micros();
        self.last = now;
        self.credit_us = (self.credit_us + elapsed).min(MINUTE_US);
        let token_us = MINUTE_US / u64::from(beta_per_min.max(1));
        if self.credit_us >= token_us {
            self.credit_us -= token_us;
            false
        } else {
            true
        }
    }

    /// Whether the bucket is back to full (the key has been quiet a minute).
    fn is_idle(&self, now: Time) -> bool {
        self.credit_us + now.saturating_since(self.last).as_micros() >= MINUTE_US
    }
}

#[derive(Clone, Debug)]
struct Entry {
    values: SmallVec<[StoredValue; 4]>,
    leak: Option<Leak>,
}

impl Entry {
    fn empty() -> Entry {
        Entry {
            values: SmallVec::new(),
            leak: None,
        }
    }
}

/// The storage state a forward-phase reply reports (§4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeState {
    /// Whether the key is loaded here.
    pub loaded: bool,
    /// How many live values are stored under the key.
    pub value_count: u16,
    /// The smallest remaining TTL of those values, in seconds (0 if none).
    pub min_ttl_secs: u32,
}

impl ProbeState {
    /// Whether a node reporting this state is full with respect to a new value
    /// of `ttl_secs`: l values whose TTLs are all at least half the new one's.
    pub fn is_full(&self, values_per_key_max: usize, ttl_secs: u32) -> bool {
        usize::from(self.value_count) >= values_per_key_max
            && u64::from(self.min_ttl_secs) * 2 >= u64::from(ttl_secs)
    }
}

/// Outcome of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// The value was added (possibly evicting a shorter-lived one).
    Added,
    /// The value was already present; its expiry was extended.
    Refreshed,
    /// The node is full for this key with respect to the value.
    Full,
    /// The node stores its maximum number of keys.
    TooManyKeys,
}

impl StoreOutcome {
    /// Whether the value is stored.
    pub fn is_stored(self) -> bool {
        matches!(self, StoreOutcome::Added | StoreOutcome::Refreshed)
    }
}

/// The values one node stores at one level.
#[derive(Clone, Debug)]
pub struct Store {
    /// Most nodes hold a few keys per level: see [`SmallMap`].
    entries: SmallMap<Key, Entry>,
    values_per_key_max: usize,
    beta_per_min: u32,
    keys_max: usize,
}

impl Store {
    /// An empty store with the given l, β and key limit.
    pub fn new(values_per_key_max: usize, beta_per_min: u32, keys_max: usize) -> Store {
        Store {
            entries: SmallMap::new(),
            values_per_key_max,
            beta_per_min,
            keys_max,
        }
    }

    /// Number of keys with live state (values or a recent load record).
    pub fn key_count(&self) -> usize {
        self.entries.len()
    }

    /// Counts a forward-phase request for `key` and reports the key's state.
    pub fn probe(&mut self, key: &Key, now: Time) -> ProbeState {
        let beta = self.beta_per_min;
        let Some(entry) = self
            .entries
            .get_or_insert_with(*key, self.keys_max, Entry::empty)
        else {
            // Out of room to track the key: report it loaded and full so
            // that puts stop here rather than trying to store.
            return ProbeState {
                loaded: true,
                value_count: 0,
                min_ttl_secs: 0,
            };
        };
        let loaded = entry
            .leak
            .get_or_insert_with(|| Leak::new(now))
            .request(now, beta);
        expire(&mut entry.values, now);
        state(entry, now, loaded)
    }

    /// Starts loading the first key's entry (a cache hint for a driver
    /// that knows this store is read next; it changes no result).
    pub fn prefetch(&self) {
        self.entries.prefetch();
    }

    /// The key's state without counting a request.
    pub fn peek(&self, key: &Key, now: Time) -> ProbeState {
        match self.entries.get(key) {
            None => ProbeState {
                loaded: false,
                value_count: 0,
                min_ttl_secs: 0,
            },
            Some(e) => {
                let mut live = e.clone();
                expire(&mut live.values, now);
                state(&live, now, false)
            }
        }
    }

    /// Stores `value` under `key` for `ttl` if the node is not full (§4.2).
    pub fn store(&mut self, key: &Key, value: Value, ttl: Duration, now: Time) -> StoreOutcome {
        let expires = now + ttl;
        let l = self.values_per_key_max;
        let Some(entry) = self
            .entries
            .get_or_insert_with(*key, self.keys_max, Entry::empty)
        else {
            return StoreOutcome::TooManyKeys;
        };
        expire(&mut entry.values, now);
        if let Some(v) = entry.values.iter_mut().find(|v| v.value == value) {
            v.expires = v.expires.max(expires);
            return StoreOutcome::Refreshed;
        }
        if entry.values.len() < l {
            entry.values.push(StoredValue { value, expires });
            return StoreOutcome::Added;
        }
        // Full unless the shortest-lived value has less than half the new TTL left.
        let (pos, shortest) = entry
            .values
            .iter()
            .enumerate()
            .min_by_key(|(_, v)| v.expires)
            .map(|(i, v)| (i, v.expires))
            .expect("l > 0 values");
        let remaining = shortest.saturating_since(now);
        if remaining.as_micros() * 2 >= ttl.as_micros() {
            return StoreOutcome::Full;
        }
        entry.values[pos] = StoredValue { value, expires };
        StoreOutcome::Added
    }

    /// A random subset of at most `max` live values stored under `key` (§4.2).
    pub fn get(&self, key: &Key, now: Time, max: usize, rng: &mut Rng) -> Values {
        let mut out = Values::new();
        let Some(entry) = self.entries.get(key) else {
            return out;
        };
        for v in &entry.values {
            if v.expires > now {
                out.push(v.value.clone());
            }
        }
        rng.shuffle(&mut out);
        out.truncate(max);
        out
    }

    /// Whether any live value is stored under `key`.
    pub fn has_values(&self, key: &Key, now: Time) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| e.values.iter().any(|v| v.expires > now))
    }

    /// The live values under `key` with their expiries (for inspection).
    pub fn values(&self, key: &Key, now: Time) -> Vec<StoredValue> {
        self.entries
            .get(key)
            .map(|e| {
                e.values
                    .iter()
                    .filter(|v| v.expires > now)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Drops expired values and keys that hold nothing and have been quiet
    /// for a minute. Returns the number of keys removed.
    pub fn sweep(&mut self, now: Time) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| {
            expire(&mut e.values, now);
            !e.values.is_empty() || e.leak.is_some_and(|l| !l.is_idle(now))
        });
        before - self.entries.len()
    }

    /// Live values stored, over all keys (a walk: for metrics, not a hot path).
    pub fn value_count(&self, now: Time) -> usize {
        self.entries
            .values()
            .map(|e| e.values.iter().filter(|v| v.expires > now).count())
            .sum()
    }

    /// Keys that are loaded now (§4.2): their leakage bucket has no token
    /// left for another request (a walk: for metrics, not a hot path).
    pub fn loaded_key_count(&self, now: Time) -> usize {
        let token_us = MINUTE_US / u64::from(self.beta_per_min.max(1));
        self.entries
            .values()
            .filter(|e| {
                e.leak.is_some_and(|l| {
                    let credit =
                        (l.credit_us + now.saturating_since(l.last).as_micros()).min(MINUTE_US);
                    credit < token_us
                })
            })
            .count()
    }

    /// Drops everything (the node left this level's cluster).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

fn expire(values: &mut SmallVec<[StoredValue; 4]>, now: Time) {
    values.retain(|v| v.expires > now);
}

fn state(entry: &Entry, now: Time, loaded: bool) -> ProbeState {
    let min_ttl_secs = entry
        .values
        .iter()
        .map(|v| v.expires.saturating_since(now).as_secs())
        .min()
        .unwrap_or(0);
    ProbeState {
        loaded,
        value_count: entry.values.len().min(usize::from(u16::MAX)) as u16,
        min_ttl_secs: min_ttl_secs.min(u64::from(u32::MAX)) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::Id;
    use crate::rng::Rng;
    use proptest::prelude::*;

    fn v(x: u8) -> Value {
        Value::new(&[x]).unwrap()
    }

    #[test]
    fn full_means_l_values_with_at_least_half_the_new_ttl_section_4_2() {
        let mut s = Store::new(4, 12, 100);
        let k = Id([1; 20]);
        let now = Time::ZERO;
        for i in 0..4 {
            assert_eq!(
                s.store(&k, v(i), Duration::from_secs(100), now),
                StoreOutcome::Added
            );
        }
        // A value with TTL 200: the stored ones have 100 ≥ 200/2 left: full.
        assert_eq!(
            s.store(&k, v(9), Duration::from_secs(200), now),
            StoreOutcome::Full
        );
        assert!(s.peek(&k, now).is_full(4, 200));
        // With TTL 201 they have less than half: the shortest-lived is evicted.
        assert!(!s.peek(&k, now).is_full(4, 201));
        s.store(&k, v(0), Duration::from_secs(150), now); // refresh v0: now the longest
        assert_eq!(
            s.store(&k, v(9), Duration::from_secs(201), now),
            StoreOutcome::Added
        );
        let kept: Vec<_> = s.values(&k, now).into_iter().map(|sv| sv.value).collect();
        assert_eq!(kept.len(), 4);
        assert!(kept.contains(&v(9)) && kept.contains(&v(0)));
    }

    #[test]
    fn shorter_ttls_are_evicted_first() {
        let mut s = Store::new(2, 12, 100);
        let k = Id([1; 20]);
        s.store(&k, v(1), Duration::from_secs(10), Time::ZERO);
        s.store(&k, v(2), Duration::from_secs(20), Time::ZERO);
        assert_eq!(
            s.store(&k, v(3), Duration::from_secs(3600), Time::ZERO),
            StoreOutcome::Added
        );
        let kept: Vec<_> = s
            .values(&k, Time::ZERO)
            .into_iter()
            .map(|sv| sv.value)
            .collect();
        assert!(kept.contains(&v(2)) && kept.contains(&v(3)) && !kept.contains(&v(1)));
    }

    #[test]
    fn loaded_after_beta_requests_in_a_minute_then_leaks_beta_per_minute() {
        let mut s = Store::new(4, 12, 100);
        let k = Id([1; 20]);
        // 12 requests at once are not loaded; the 13th is.
        for i in 0..12 {
            assert!(!s.probe(&k, Time(i)).loaded, "request {i}");
        }
        assert!(s.probe(&k, Time(12)).loaded);
        // At 10 requests a second for ten minutes, 12 a minute leak through.
        let mut unloaded = 0;
        let start = Time::ZERO + Duration::from_secs(1);
        for i in 0..6000u64 {
            let now = start + Duration::from_millis(100 * i);
            if !s.probe(&k, now).loaded {
                unloaded += 1;
            }
        }
        assert!(
            (118..=122).contains(&unloaded),
            "{unloaded} leaked in 10 minutes"
        );
    }

    #[test]
    fn counts_for_metrics_follow_values_and_load_section_4_2() {
        let mut s = Store::new(4, 12, 100);
        let (a, b) = (Id([1; 20]), Id([2; 20]));
        s.store(&a, v(1), Duration::from_secs(10), Time::ZERO);
        s.store(&a, v(2), Duration::from_secs(100), Time::ZERO);
        s.store(&b, v(3), Duration::from_secs(100), Time::ZERO);
        assert_eq!(s.value_count(Time::ZERO), 3);
        assert_eq!(s.value_count(Time::ZERO + Duration::from_secs(11)), 2);
        assert_eq!(s.loaded_key_count(Time::ZERO), 0);
        // β requests use up the bucket: the key is loaded until it leaks.
        for i in 0..12 {
            s.probe(&a, Time(i));
        }
        assert_eq!(s.loaded_key_count(Time(12)), 1);
        assert_eq!(s.loaded_key_count(Time::ZERO + Duration::from_secs(5)), 0);
    }

    #[test]
    fn values_expire() {
        let mut s = Store::new(4, 12, 100);
        let k = Id([1; 20]);
        s.store(&k, v(1), Duration::from_secs(10), Time::ZERO);
        let mut rng = Rng::new(1);
        assert_eq!(
            s.get(&k, Time::ZERO + Duration::from_secs(9), 4, &mut rng)
                .len(),
            1
        );
        assert_eq!(
            s.get(&k, Time::ZERO + Duration::from_secs(10), 4, &mut rng)
                .len(),
            0
        );
        assert_eq!(s.sweep(Time::ZERO + Duration::from_secs(100)), 1);
        assert_eq!(s.key_count(), 0);
    }

    #[test]
    fn key_limit_is_enforced() {
        let mut s = Store::new(4, 12, 1);
        assert!(s
            .store(&Id([1; 20]), v(1), Duration::from_secs(1), Time::ZERO)
            .is_stored());
        assert_eq!(
            s.store(&Id([2; 20]), v(1), Duration::from_secs(1), Time::ZERO),
            StoreOutcome::TooManyKeys
        );
        assert!(s.probe(&Id([2; 20]), Time::ZERO).loaded);
    }

    #[test]
    fn many_keys_move_from_the_vector_to_the_map_and_keep_their_state() {
        let keys_max = 3 * crate::smallmap::SMALL_MAP_VEC_MAX;
        let mut s = Store::new(4, 12, keys_max);
        let key = |i: usize| Id::hash(&i.to_be_bytes());
        let long = Duration::from_secs(1000);
        let short = Duration::from_secs(10);
        for i in 0..keys_max + 5 {
            let ttl = if i % 2 == 0 { long } else { short };
            let out = s.store(&key(i), v(i as u8), ttl, Time::ZERO);
            assert_eq!(out.is_stored(), i < keys_max, "key {i}");
            // A load record counts as a key too.
            let _ = s.probe(&key(i), Time::ZERO);
        }
        assert_eq!(s.key_count(), keys_max);
        let mut rng = Rng::new(1);
        for i in 0..keys_max {
            let got = s.get(&key(i), Time::ZERO, 4, &mut rng);
            assert_eq!(got.as_slice(), &[v(i as u8)], "key {i}");
        }
        // Odd keys expire; once quiet for a minute they are swept.
        let later = Time::ZERO + Duration::from_secs(100);
        assert_eq!(s.sweep(later), keys_max / 2);
        assert!(!s.has_values(&key(1), later) && s.has_values(&key(0), later));
        // Room again for new keys.
        assert!(s.store(&key(keys_max), v(0), long, later).is_stored());
        s.clear();
        assert_eq!(s.key_count(), 0);
        assert!(s.store(&key(0), v(0), long, later).is_stored());
    }

    proptest! {
        #[test]
        fn never_more_than_l_values_and_get_is_a_subset(
            ops in proptest::collection::vec((0u8..20, 1u64..1000, 0u64..2000), 1..200),
            l in 1usize..6,
        ) {
            let mut s = Store::new(l, 12, 100);
            let k = Id([1; 20]);
            let mut rng = Rng::new(5);
            let mut now = Time::ZERO;
            for (val, ttl, dt) in ops {
                now = now + Duration::from_secs(dt / 10);
                let before = s.peek(&k, now);
                let out = s.store(&k, v(val), Duration::from_secs(ttl), now);
                // A full node never accepts a new value.
                if before.is_full(l, ttl as u32) && !s.values(&k, now).iter().any(|x| x.value == v(val)) {
                    prop_assert!(!out.is_stored() || out == StoreOutcome::Refreshed);
                }
                let stored = s.values(&k, now);
                prop_assert!(stored.len() <= l);
                let got = s.get(&k, now, 3, &mut rng);
                prop_assert!(got.len() <= 3);
                for g in &got {
                    prop_assert!(stored.iter().any(|sv| &sv.value == g));
                }
            }
        }
    }
}
