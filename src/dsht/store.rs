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
//!   A key's bucket starts with one token, not β: the first request passes,
//!   then one every 60/β s, and credit builds up to β only while requests
//!   come slower than β a minute. Every node starting at once (Fig. 8's first
//!   minute) would otherwise let β requests through at once, and the node
//!   closest to a hot key would receive β from each of its predecessors before
//!   anything near it is full: with random ids that start-up wave alone was
//!   over twice the bound (ARCHITECTURE.md, "No hot spot for any id set").
//! - A store that finds the node not full evicts the value with the shortest
//!   remaining TTL if the list is at l values; a store of a value already
//!   present extends its expiry.
//!
//! On the open Internet (SECURITY.md) every value remembers its [`Source`],
//! and a store may evict only values of its own source: §4.2's eviction of
//! the shortest-lived value applies among the values a source holds itself
//! (the local node's own puts keep the paper's rule exactly; a remote
//! source's new value replaces its older one). A store that would have to
//! evict another source's value finds the node full, and an honest put goes
//! on to the next node of its reverse phase, as for any full node: sloppy
//! storage spills outward instead of displacing. Per-source and per-prefix
//! quotas ([`Quotas`]) bound what one address or one /24 can hold, per key
//! and per level, and the level's memory is bounded in bytes.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use smallvec::SmallVec;

use crate::dsht::id::{Key, KeyedBuildHasher};
use crate::dsht::smallmap::SmallMap;
use crate::dsht::wire::{Value, Values};
use crate::rng::Rng;
use crate::time::{Duration, Time};

/// One stored value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredValue {
    /// The value.
    pub value: Value,
    /// When it expires.
    pub expires: Time,
    /// Who stored it.
    pub source: Source,
}

/// Values under a key, by reference ([`Store::get_refs`]): as many as a
/// get returns by default, inline.
pub type ValueRefs<'a> = SmallVec<[&'a Value; 8]>;

/// Who stored a value: the local node, or a remote storer named by its IP
/// (and port, where node ids include the port: several nodes per address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The local node's own puts.
    Local,
    /// A storer at this address (port 0 when only the IP names a node).
    Remote(SocketAddr),
}

impl Source {
    /// The storer's network prefix: its /24 (IPv4) or /48 (IPv6).
    fn prefix(&self) -> Option<u64> {
        match self {
            Source::Local => None,
            Source::Remote(a) => Some(prefix_of(a.ip())),
        }
    }
}

/// A key for the /24 (IPv4) or /48 (IPv6) that holds `ip`.
pub fn prefix_of(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) => (4 << 56) | u64::from(u32::from(v4) >> 8),
        IpAddr::V6(v6) => (6 << 56) | (u128::from(v6) >> 80) as u64,
    }
}

/// What remote storers may hold at one level (the local node's own values
/// count only toward `bytes_max`). `usize::MAX` lifts a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quotas {
    /// Values one source may hold under one key.
    pub values_per_source_per_key: usize,
    /// Values one /24 (IPv4) or /48 (IPv6) may hold under one key.
    pub values_per_prefix_per_key: usize,
    /// Values one source may hold over all keys.
    pub values_per_source: usize,
    /// Values one prefix may hold over all keys.
    pub values_per_prefix: usize,
    /// Bytes of keys and values (as accounted by [`KEY_COST_BYTES`] and
    /// [`value_cost_bytes`]) the level may hold.
    pub bytes_max: usize,
}

impl Quotas {
    /// No limits.
    pub const NONE: Quotas = Quotas {
        values_per_source_per_key: usize::MAX,
        values_per_prefix_per_key: usize::MAX,
        values_per_source: usize::MAX,
        values_per_prefix: usize::MAX,
        bytes_max: usize::MAX,
    };
}

/// Bytes a key's entry is accounted at: the key, the entry and the map's
/// slot (its control byte and load factor, rounded up).
pub const KEY_COST_BYTES: usize = std::mem::size_of::<Key>() + std::mem::size_of::<Entry>() + 32;

/// Bytes a stored value is accounted at.
pub fn value_cost_bytes(value: &Value) -> usize {
    std::mem::size_of::<StoredValue>() + value.0.len()
}

/// Values and bytes held, per source and per prefix (the quotas' ledger).
#[derive(Clone, Debug)]
struct Ledger {
    by_source: HashMap<SocketAddr, u32, KeyedBuildHasher>,
    by_prefix: HashMap<u64, u32, KeyedBuildHasher>,
    bytes: usize,
}

impl Ledger {
    fn new(hasher: &KeyedBuildHasher) -> Ledger {
        Ledger {
            by_source: HashMap::with_hasher(hasher.clone()),
            by_prefix: HashMap::with_hasher(hasher.clone()),
            bytes: 0,
        }
    }

    fn add(&mut self, v: &StoredValue) {
        self.bytes += value_cost_bytes(&v.value);
        if let Source::Remote(a) = v.source {
            *self.by_source.entry(a).or_insert(0) += 1;
            *self.by_prefix.entry(prefix_of(a.ip())).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, v: &StoredValue) {
        self.bytes = self.bytes.saturating_sub(value_cost_bytes(&v.value));
        if let Source::Remote(a) = v.source {
            dec(&mut self.by_source, &a);
            dec(&mut self.by_prefix, &prefix_of(a.ip()));
        }
    }

    fn held(&self, source: &Source) -> (usize, usize) {
        match source {
            Source::Local => (0, 0),
            Source::Remote(a) => (
                self.by_source.get(a).map_or(0, |&n| n as usize),
                self.by_prefix
                    .get(&prefix_of(a.ip()))
                    .map_or(0, |&n| n as usize),
            ),
        }
    }

    fn shrink(&mut self) {
        for m in [&mut self.by_source as &mut dyn Shrink, &mut self.by_prefix] {
            m.shrink();
        }
    }
}

trait Shrink {
    fn shrink(&mut self);
}

impl<K: Eq + std::hash::Hash, V> Shrink for HashMap<K, V, KeyedBuildHasher> {
    fn shrink(&mut self) {
        if self.capacity() > 4 * self.len() + 16 {
            self.shrink_to_fit();
        }
    }
}

fn dec<K: Eq + std::hash::Hash>(m: &mut HashMap<K, u32, KeyedBuildHasher>, k: &K) {
    if let Some(n) = m.get_mut(k) {
        *n -= 1;
        if *n == 0 {
            m.remove(k);
        }
    }
}

/// The leakage-rate token bucket of one key.
#[derive(Clone, Copy, Debug)]
struct Leak {
    /// Accumulated credit in microseconds; one token costs 60 s / β.
    credit_us: u64,
    last: Time,
}

const MINUTE_US: u64 = 60_000_000;

/// The credit one request takes: 60 s / β.
fn token_us(beta_per_min: u32) -> u64 {
    MINUTE_US / u64::from(beta_per_min.max(1))
}

impl Leak {
    /// A new key's bucket: one token (see the module docs).
    fn new(now: Time, beta_per_min: u32) -> Leak {
        Leak {
            credit_us: token_us(beta_per_min),
            last: now,
        }
    }

    /// Counts one request; returns whether the key is loaded for it.
    fn request(&mut self, now: Time, beta_per_min: u32) -> bool {
        let elapsed = now.saturating_since(self.last).as_micros();
        self.last = now;
        self.credit_us = (self.credit_us + elapsed).min(MINUTE_US);
        let token_us = token_us(beta_per_min);
        if self.credit_us >= token_us {
            self.credit_us -= token_us;
            false
        } else {
            true
        }
    }

    /// Whether the bucket holds at least the one token a new key's starts
    /// with (the key has been quiet for 60 s / β at least).
    fn has_token(&self, now: Time, beta_per_min: u32) -> bool {
        self.credit_us + now.saturating_since(self.last).as_micros() >= token_us(beta_per_min)
    }
}

/// Values kept inline in a key's entry; more spill to the heap. One: most
/// keys hold one value (a proxy's own claim or pointer), and the entry is
/// stored inline in the key map, so every inline slot costs every key
/// (four cost ~290 bytes a key; a flood of distinct URLs made that 110 MB
/// per level).
const VALUES_INLINE: usize = 1;

#[derive(Clone, Debug)]
struct Entry {
    values: SmallVec<[StoredValue; VALUES_INLINE]>,
    leak: Option<Leak>,
    /// Forward-phase requests, per minute (for the status page, and for
    /// the stay this node asks of the senders it turns away).
    requests: MinuteCount,
    /// The stay, in minutes, this node asks of a sender that finds it
    /// loaded for the key: see [`Store::set_probes_per_min_target`].
    stay_mins: u8,
}

impl Entry {
    fn empty() -> Entry {
        Entry {
            values: SmallVec::new(),
            leak: None,
            requests: MinuteCount::default(),
            stay_mins: 1,
        }
    }
}

/// Requests counted in the current and the previous whole minute of the
/// node's clock: the past minute's requests are estimated as the current
/// minute's plus the previous one's share of the sliding window.
#[derive(Clone, Copy, Debug, Default)]
struct MinuteCount {
    minute: u32,
    current: u32,
    previous: u32,
}

impl MinuteCount {
    /// Counts a request at `now`; returns whether a new minute began (the
    /// previous minute's count is then `previous`).
    fn count(&mut self, now: Time) -> bool {
        let m = (now.0 / MINUTE_US) as u32;
        let rolled = m != self.minute;
        if rolled {
            self.previous = if m == self.minute.wrapping_add(1) {
                self.current
            } else {
                0
            };
            self.current = 0;
            self.minute = m;
        }
        self.current = self.current.saturating_add(1);
        rolled
    }

    fn past_minute(&self, now: Time) -> u32 {
        let m = (now.0 / MINUTE_US) as u32;
        let (current, previous) = match m.wrapping_sub(self.minute) {
            0 => (self.current, self.previous),
            1 => (0, self.current),
            _ => (0, 0),
        };
        let left = MINUTE_US - now.0 % MINUTE_US;
        current + (u64::from(previous) * left / MINUTE_US) as u32
    }
}

/// One key's load, as the status page shows the hottest keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLoad {
    /// The key.
    pub key: Key,
    /// Forward-phase requests for it in about the past minute.
    pub requests_past_minute: u32,
    /// Whether the node is loaded for it now (§4.2).
    pub loaded: bool,
    /// Its live values.
    pub values: Vec<Value>,
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
    /// When loaded: how many minutes the node asks a sender to count it
    /// loaded without probing it again (1: the paper's window; see
    /// [`Store::set_probes_per_min_target`]).
    pub stay_mins: u8,
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
    /// The node stores its maximum number of keys (or bytes).
    TooManyKeys,
    /// The storer (or its prefix) holds its quota of values ([`Quotas`]),
    /// or the level is out of bytes.
    OverQuota,
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
    quotas: Quotas,
    ledger: Ledger,
    /// Load records for keys this node holds no values for: "loaded" is
    /// more than β requests for the key in the past minute, stored or not
    /// (§4.2), and a put's forward phase stops at a loaded node. Probes need
    /// no token, so they get no entry of their own (they could fill the key
    /// table): their buckets are `UNKNOWN_LOAD_SLOTS` shared ones, chosen by
    /// a keyed hash of the key and made on the first such probe. Keys that
    /// share a bucket look loaded together: a put then stops a step early.
    unknown: Vec<Leak>,
    /// Picks a key's bucket in `unknown` (keyed: keys come from the network).
    unknown_hasher: KeyedBuildHasher,
    /// The forward-phase requests a minute per key this node aims to stay
    /// under by the stay it asks of senders (`u32::MAX`: it asks none).
    probes_per_min_target: u32,
}

/// The longest stay, in minutes, a node asks of a sender that finds it
/// loaded (four hours; the wire carries a byte).
pub const STAY_MINS_MAX: u8 = 240;

/// Shared load buckets for keys a node holds no values for (16 bytes each).
pub const UNKNOWN_LOAD_SLOTS: usize = 64;

impl Store {
    /// An empty store with the given l, β and key limit, and no quotas.
    pub fn new(values_per_key_max: usize, beta_per_min: u32, keys_max: usize) -> Store {
        let hasher = KeyedBuildHasher::with_seeds(0, 0, 0, 0);
        Store {
            entries: SmallMap::new(),
            values_per_key_max,
            beta_per_min,
            keys_max,
            quotas: Quotas::NONE,
            ledger: Ledger::new(&hasher),
            unknown: Vec::new(),
            unknown_hasher: hasher,
            probes_per_min_target: u32::MAX,
        }
    }

    /// Makes the node ask senders that find it loaded for a key to stay
    /// away long enough that it receives about `target` forward-phase
    /// requests a minute for the key (issue 27: no hot spot for any node).
    ///
    /// Why: the paper's bound β·(2^b−1)·⌈log n / b⌉ counts the nodes that
    /// route to the closest node, each leaking β a minute. A node that sits
    /// in many routing tables (an early joiner, kept there by Kademlia's
    /// preference for old contacts: 25 times the median node's tables at
    /// 10,000 nodes) is the first loaded node of many more walks than that,
    /// near the key or not, and each sender probes it once per stay: at
    /// 100,000 nodes 741 a minute against a bound of 204. Only the node
    /// knows its load. So each key's stay starts at a minute (the paper's
    /// window) and, at the end of each minute, is multiplied by the ratio
    /// of that minute's requests to `target` when over it (at most
    /// [`STAY_MINS_MAX`]), and halved when under a quarter of it. Within a
    /// minute, a sender is asked at least that minute's requests so far
    /// over `target` minutes. A node never asks more than
    /// [`STAY_MINS_MAX`], and a stay only keeps a sender from probing; its
    /// gets are unaffected.
    pub fn set_probes_per_min_target(&mut self, target: u32) {
        self.probes_per_min_target = target.max(1);
    }

    /// The same store with `quotas` on remote storers, its maps hashed with
    /// `hasher` (keyed: the keys come from the network).
    pub fn with_limits(mut self, quotas: Quotas, hasher: KeyedBuildHasher) -> Store {
        self.quotas = quotas;
        self.ledger = Ledger::new(&hasher);
        self.unknown_hasher = hasher.clone();
        self.entries = SmallMap::with_hasher(hasher);
        self
    }

    /// Bytes of keys and values held, as the quotas account them.
    pub fn bytes(&self) -> usize {
        self.ledger.bytes
    }

    /// Number of keys with live state (values or a recent load record).
    pub fn key_count(&self) -> usize {
        self.entries.len()
    }

    /// Counts a forward-phase request for `key` and reports the key's state.
    pub fn probe(&mut self, key: &Key, now: Time) -> ProbeState {
        let beta = self.beta_per_min;
        let Some(entry) = self.entries.get_mut(key) else {
            // A key we hold nothing for: no entry is made for it (probes,
            // which need no token, must not fill the key table); its load
            // is counted in a shared bucket (see `unknown`).
            if self.unknown.is_empty() {
                self.unknown = vec![Leak::new(now, beta); UNKNOWN_LOAD_SLOTS];
            }
            let slot = (std::hash::BuildHasher::hash_one(&self.unknown_hasher, key) as usize)
                % UNKNOWN_LOAD_SLOTS;
            return ProbeState {
                loaded: self.unknown[slot].request(now, beta),
                value_count: 0,
                min_ttl_secs: 0,
                stay_mins: 1,
            };
        };
        let loaded = entry
            .leak
            .get_or_insert_with(|| Leak::new(now, beta))
            .request(now, beta);
        let target = self.probes_per_min_target;
        if entry.requests.count(now) && target != u32::MAX {
            entry.stay_mins = next_stay(entry.stay_mins, entry.requests.previous, target);
        }
        expire(&mut entry.values, now, &mut self.ledger);
        let mut state = state(entry, now, loaded);
        if target != u32::MAX {
            let surge = entry.requests.current.div_ceil(target);
            state.stay_mins = entry
                .stay_mins
                .max(surge.min(u32::from(STAY_MINS_MAX)) as u8);
        }
        state
    }

    /// Starts loading the first key's entry (a cache hint for a driver
    /// that knows this store is read next; it changes no result).
    pub fn prefetch(&self) {
        self.entries.prefetch();
    }

    /// Once [`Store::prefetch`]'s lines have arrived: starts loading the
    /// first key's values where they live outside its entry (the values a
    /// probe expires and a get reads). A cache hint; it changes no result.
    pub fn prefetch_values(&self) {
        if let Some(e) = self.entries.first_value() {
            if e.values.spilled() {
                crate::dsht::prefetch::prefetch(
                    e.values.as_ptr().cast(),
                    std::mem::size_of_val(&e.values[..]),
                );
            }
        }
    }

    /// The key's state without counting a request.
    pub fn peek(&self, key: &Key, now: Time) -> ProbeState {
        match self.entries.get(key) {
            None => ProbeState {
                loaded: false,
                value_count: 0,
                min_ttl_secs: 0,
                stay_mins: 1,
            },
            Some(e) => {
                let mut live = e.clone();
                live.values.retain(|v| v.expires > now);
                state(&live, now, false)
            }
        }
    }

    /// Stores `value` under `key` for `ttl` if the node is not full (§4.2),
    /// as the local node's own value.
    pub fn store(&mut self, key: &Key, value: Value, ttl: Duration, now: Time) -> StoreOutcome {
        self.store_from(key, value, ttl, now, Source::Local)
    }

    /// Stores `value` from `source` under `key` for `ttl` if the node is not
    /// full for it (§4.2, within the source's own values: see the module
    /// docs) and the source is within its [`Quotas`].
    pub fn store_from(
        &mut self,
        key: &Key,
        value: Value,
        ttl: Duration,
        now: Time,
        source: Source,
    ) -> StoreOutcome {
        let expires = now + ttl;
        let l = self.values_per_key_max;
        let q = self.quotas;
        let cost = value_cost_bytes(&value);
        let remote = source != Source::Local;
        let (held, held_prefix) = self.ledger.held(&source);
        if remote && (held >= q.values_per_source || held_prefix >= q.values_per_prefix) {
            // Checked before the key's entry is made: a source over its
            // quota makes no state at all.
            if !self
                .entries
                .get(key)
                .is_some_and(|e| e.values.iter().any(|v| v.value == value))
            {
                return StoreOutcome::OverQuota;
            }
        }
        let new_key = self.entries.get(key).is_none();
        if new_key && self.ledger.bytes + KEY_COST_BYTES + cost > q.bytes_max {
            return StoreOutcome::TooManyKeys;
        }
        let Some(entry) = self
            .entries
            .get_or_insert_with(*key, self.keys_max, Entry::empty)
        else {
            return StoreOutcome::TooManyKeys;
        };
        if new_key {
            self.ledger.bytes += KEY_COST_BYTES;
        }
        expire(&mut entry.values, now, &mut self.ledger);
        if let Some(v) = entry.values.iter_mut().find(|v| v.value == value) {
            v.expires = v.expires.max(expires);
            return StoreOutcome::Refreshed;
        }
        let new = StoredValue {
            value,
            expires,
            source,
        };
        let own = entry.values.iter().filter(|v| v.source == source).count();
        let own_max = if remote {
            q.values_per_source_per_key.min(l)
        } else {
            l
        };
        if own_max == 0 {
            return StoreOutcome::OverQuota;
        }
        if own >= own_max {
            // The source replaces its own shortest-lived value. The local
            // node keeps §4.2's rule: only one with under half the new TTL.
            let (pos, shortest) = entry
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.source == source)
                .min_by_key(|(_, v)| v.expires)
                .map(|(i, v)| (i, v.expires))
                .expect("own_max > 0 values of this source");
            let remaining = shortest.saturating_since(now);
            if !remote && remaining.as_micros() * 2 >= ttl.as_micros() {
                return StoreOutcome::Full;
            }
            let old_cost = value_cost_bytes(&entry.values[pos].value);
            if self.ledger.bytes - old_cost + cost > q.bytes_max {
                return StoreOutcome::OverQuota;
            }
            self.ledger.remove(&entry.values[pos]);
            self.ledger.add(&new);
            entry.values[pos] = new;
            return StoreOutcome::Added;
        }
        if remote {
            let prefix = source.prefix();
            let same_prefix = entry
                .values
                .iter()
                .filter(|v| v.source.prefix() == prefix)
                .count();
            if same_prefix >= q.values_per_prefix_per_key {
                return StoreOutcome::OverQuota;
            }
        }
        if self.ledger.bytes + cost > q.bytes_max {
            return StoreOutcome::OverQuota;
        }
        if entry.values.len() < l {
            self.ledger.add(&new);
            entry.values.push(new);
            return StoreOutcome::Added;
        }
        // Full of other sources' values: none of them is evicted (a
        // remote source could otherwise push out every honest value with
        // long TTLs); the put goes on to the next node.
        StoreOutcome::Full
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

    /// The values [`Store::get`] returns, in its order and drawing the same
    /// random numbers, by reference (into `out`, cleared first): a get's
    /// reply is written from them without a copy of each value, a vector of
    /// values returned and dropped (issue 27).
    pub fn get_refs<'a>(
        &'a self,
        key: &Key,
        now: Time,
        max: usize,
        rng: &mut Rng,
        out: &mut ValueRefs<'a>,
    ) {
        out.clear();
        let Some(entry) = self.entries.get(key) else {
            return;
        };
        // Pushed one by one: `SmallVec::extend` through a filter cost ~50
        // instructions for one value.
        for v in &entry.values {
            if v.expires > now {
                out.push(&v.value);
            }
        }
        rng.shuffle(out);
        out.truncate(max);
    }

    /// Whether a live value from a source other than `source` is stored
    /// under `key` (a claim's test-and-set: the claimer's own value does not
    /// make it lose).
    pub fn holds_other_than(&self, key: &Key, now: Time, source: Source) -> bool {
        self.entries.get(key).is_some_and(|e| {
            e.values
                .iter()
                .any(|v| v.expires > now && v.source != source)
        })
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
        let beta = self.beta_per_min;
        let ledger = &mut self.ledger;
        self.entries.retain(|_, e| {
            expire(&mut e.values, now, ledger);
            // A key whose values have all expired is kept only while its
            // leakage bucket holds less than the one token a new key's
            // starts with: dropped then, a later request finds it no less
            // loaded than it would (a fresh or shared bucket), and a flood
            // of distinct keys — claims for objects never completed — costs
            // memory for their 20 s TTL, not for a further minute.
            let keep = !e.values.is_empty() || e.leak.is_some_and(|l| !l.has_token(now, beta));
            if !keep {
                ledger.bytes = ledger.bytes.saturating_sub(KEY_COST_BYTES);
            } else if e.values.spilled() && e.values.len() <= VALUES_INLINE {
                e.values.shrink_to_fit();
            }
            keep
        });
        // Memory a burst of keys took goes back once they are gone.
        self.entries.shrink();
        self.ledger.shrink();
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
        self.entries
            .values()
            .filter(|e| self.is_loaded(e, now))
            .count()
    }

    fn is_loaded(&self, e: &Entry, now: Time) -> bool {
        let token_us = token_us(self.beta_per_min);
        e.leak.is_some_and(|l| {
            let credit = (l.credit_us + now.saturating_since(l.last).as_micros()).min(MINUTE_US);
            credit < token_us
        })
    }

    /// The `n` keys with the most requests in the past minute (then the
    /// most values), with their load and live values (a walk: for the
    /// status page, not a hot path).
    pub fn hottest(&self, now: Time, n: usize) -> Vec<KeyLoad> {
        let mut all: Vec<(u32, usize, &Key, &Entry)> = self
            .entries
            .iter()
            .map(|(k, e)| {
                let live = e.values.iter().filter(|v| v.expires > now).count();
                (e.requests.past_minute(now), live, k, e)
            })
            .filter(|&(r, live, _, _)| r > 0 || live > 0)
            .collect();
        all.sort_by(|a, b| (b.0, b.1, a.2).cmp(&(a.0, a.1, b.2)));
        all.truncate(n);
        all.into_iter()
            .map(|(r, _, k, e)| KeyLoad {
                key: *k,
                requests_past_minute: r,
                loaded: self.is_loaded(e, now),
                values: e
                    .values
                    .iter()
                    .filter(|v| v.expires > now)
                    .map(|v| v.value.clone())
                    .collect(),
            })
            .collect()
    }

    /// Drops everything (the node left this level's cluster).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.unknown = Vec::new();
        let hasher = self.ledger.by_source.hasher().clone();
        self.ledger = Ledger::new(&hasher);
    }
}

fn expire(values: &mut SmallVec<[StoredValue; VALUES_INLINE]>, now: Time, ledger: &mut Ledger) {
    values.retain(|v| {
        let live = v.expires > now;
        if !live {
            ledger.remove(v);
        }
        live
    });
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
        stay_mins: entry.stay_mins,
    }
}

/// A key's stay for the next minute, from the last one's and the requests
/// the last minute received (see [`Store::set_probes_per_min_target`]).
fn next_stay(stay_mins: u8, last_minute: u32, target: u32) -> u8 {
    let stay = u32::from(stay_mins.max(1));
    let next = if last_minute > target {
        stay.saturating_mul(last_minute.div_ceil(target))
    } else if last_minute.saturating_mul(4) < target {
        stay / 2
    } else {
        stay
    };
    next.clamp(1, u32::from(STAY_MINS_MAX)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsht::id::{Id, KeyedBuildHasher};
    use crate::rng::Rng;
    use proptest::prelude::*;

    fn v(x: u8) -> Value {
        Value::new(&[x]).unwrap()
    }

    /// `get_refs` is `get` by reference: the same values in the same order
    /// and the same random state after, over seeded random stores (keys
    /// absent, values expiring, more live values than a get returns).
    #[test]
    fn values_by_reference_are_the_values_get_returns() {
        let mut rng = Rng::new(27);
        let mut sample = 0;
        for round in 0..2_000u64 {
            let mut s = Store::new(1 + rng.below(12) as usize, 12, 100);
            let keys: Vec<Key> = (0..3u8).map(|i| Id([i; 20])).collect();
            let mut now = Time::ZERO;
            for _ in 0..rng.below(40) {
                let key = keys[rng.below(3) as usize];
                let mut bytes = vec![0u8; 1 + rng.below(30) as usize];
                rng.fill(&mut bytes);
                let source =
                    Source::Remote(SocketAddr::new([10, 0, 0, rng.below(20) as u8].into(), 0));
                let ttl = Duration::from_secs(1 + rng.below(20));
                s.store_from(&key, Value::new(&bytes).unwrap(), ttl, now, source);
                now = now + Duration::from_millis(rng.below(3_000));
            }
            let (mut a, mut b) = (Rng::new(round), Rng::new(round));
            let mut refs = ValueRefs::new();
            for _ in 0..4 {
                let key = keys[rng.below(3) as usize];
                let max = 1 + rng.below(6) as usize;
                let at = now + Duration::from_millis(rng.below(10_000));
                let want = s.get(&key, at, max, &mut a);
                s.get_refs(&key, at, max, &mut b, &mut refs);
                let got: Vec<&Value> = refs.iter().copied().collect();
                assert_eq!(got, want.iter().collect::<Vec<_>>(), "round {round}");
                sample += usize::from(want.len() > 1);
            }
            assert_eq!(a.next_u64(), b.next_u64(), "round {round}");
        }
        assert!(sample > 500, "{sample} gets of several values");
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
    fn s4_2_loaded_a_new_key_leaks_one_request_then_beta_per_minute() {
        let mut s = Store::new(4, 12, 100);
        let k = Id([1; 20]);
        s.store(&k, v(1), Duration::from_secs(3600), Time::ZERO);
        // A burst on a new key: the first request passes, the rest find
        // the node loaded (the bucket starts with one token, not β).
        assert!(!s.probe(&k, Time(0)).loaded);
        for i in 1..12 {
            assert!(s.probe(&k, Time(i)).loaded, "request {i}");
        }
        // One more passes 60/β = 5 s later, and not before.
        let t = Time::ZERO + Duration::from_millis(4_900);
        assert!(s.probe(&k, t).loaded);
        let t = Time::ZERO + Duration::from_millis(10_100);
        assert!(!s.probe(&k, t).loaded);
        // At 10 requests a second for ten minutes, 12 a minute leak through.
        let mut unloaded = 0;
        let start = Time::ZERO + Duration::from_secs(11);
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
        // After a quiet minute the credit is β again: a key requested no
        // faster than β a minute is never loaded (more than β in a minute).
        let quiet = start + Duration::from_secs(600 + 60);
        for i in 0..12 {
            assert!(
                !s.probe(&k, quiet + Duration::from_millis(i)).loaded,
                "request {i}"
            );
        }
        assert!(s.probe(&k, quiet + Duration::from_millis(12)).loaded);
    }

    #[test]
    fn s4_2_loaded_at_beta_a_minute_never_loaded() {
        let mut s = Store::new(4, 12, 100);
        let k = Id([1; 20]);
        s.store(&k, v(1), Duration::from_secs(3600), Time::ZERO);
        // One request every 5 s (β = 12 a minute) from the start: none is
        // more than β within a minute, none finds the node loaded.
        for i in 0..120u64 {
            let now = Time::ZERO + Duration::from_secs(5 * i);
            assert!(!s.probe(&k, now).loaded, "request {i}");
        }
    }

    #[test]
    fn loaded_after_beta_requests_in_a_quiet_minute_then_leaks_beta_per_minute() {
        let mut s = Store::new(4, 12, 100);
        let k = Id([1; 20]);
        // Loaded-ness is kept for keys with values (the only ones for
        // which a node can be full).
        s.store(&k, v(1), Duration::from_secs(3600), Time::ZERO);
        assert!(!s.probe(&k, Time::ZERO).loaded);
        // After a quiet minute, 12 requests at once are not loaded; the
        // 13th is.
        let q = Time::ZERO + Duration::from_secs(60);
        for i in 0..12 {
            assert!(
                !s.probe(&k, q + Duration::from_micros(i)).loaded,
                "request {i}"
            );
        }
        assert!(s.probe(&k, q + Duration::from_micros(12)).loaded);
        // At 10 requests a second for ten minutes, 12 a minute leak through.
        let mut unloaded = 0;
        let start = q + Duration::from_secs(1);
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
        // A new key's one token: the key is loaded until it leaks.
        for i in 0..2 {
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
        // A probe for a key not stored makes no state and finds it unloaded.
        assert!(!s.probe(&Id([2; 20]), Time::ZERO).loaded);
        assert_eq!(s.key_count(), 1);
    }

    fn remote(a: &str) -> Source {
        Source::Remote(a.parse().unwrap())
    }

    fn quotas() -> Quotas {
        Quotas {
            values_per_source_per_key: 1,
            values_per_prefix_per_key: 2,
            values_per_source: 3,
            values_per_prefix: 5,
            bytes_max: usize::MAX,
        }
    }

    #[test]
    fn a_claims_test_and_set_is_against_other_sources_values_section_8() {
        let mut s = Store::new(4, 12, 100);
        let k = Id([7; 20]);
        let (a, b) = (remote("10.0.1.1:0"), remote("10.0.2.1:0"));
        let now = Time::ZERO;
        assert!(!s.holds_other_than(&k, now, a));
        s.store_from(&k, v(1), Duration::from_secs(20), now, a);
        assert!(!s.holds_other_than(&k, now, a), "its own value");
        assert!(s.holds_other_than(&k, now, b));
        assert!(s.holds_other_than(&k, now, Source::Local));
        // Expired values hold nothing.
        let later = now + Duration::from_secs(21);
        assert!(!s.holds_other_than(&k, later, b));
    }

    #[test]
    fn put_probes_for_unknown_keys_allocate_nothing() {
        let mut s = Store::new(4, 12, 10);
        for i in 0..10_000u32 {
            let p = s.probe(&Id::hash(&i.to_be_bytes()), Time(u64::from(i)));
            assert_eq!(p.value_count, 0);
        }
        assert_eq!((s.key_count(), s.bytes()), (0, 0));
        // Their load is counted in a fixed set of shared buckets.
        assert_eq!(s.unknown.len(), UNKNOWN_LOAD_SLOTS);
        // New-key stores are still taken.
        assert!(s
            .store(&Id([1; 20]), v(1), Duration::from_secs(60), Time::ZERO)
            .is_stored());
    }

    #[test]
    fn hottest_keys_rank_by_requests_in_the_past_minute_and_flag_loaded() {
        let mut s = Store::new(4, 12, 100);
        let (hot, warm, cold) = (Id([1; 20]), Id([2; 20]), Id([3; 20]));
        for k in [&hot, &warm, &cold] {
            s.store(k, v(k.0[0]), Duration::from_secs(3600), Time::ZERO);
        }
        // 20 requests for `hot` in a moment (past its bucket: loaded), 3 for
        // `warm` 5 s apart long enough ago (at β = 12 a minute, never
        // loaded), none for `cold`.
        for i in 0..20u64 {
            s.probe(&hot, Time(29_980_000 + i * 1000));
        }
        for i in 0..3u64 {
            s.probe(&warm, Time(i * 5_000_000));
        }
        let now = Time(30_000_000);
        let top = s.hottest(now, 2);
        assert_eq!(top.len(), 2);
        assert_eq!(
            (top[0].key, top[0].requests_past_minute, top[0].loaded),
            (hot, 20, true)
        );
        assert_eq!(
            (top[1].key, top[1].requests_past_minute, top[1].loaded),
            (warm, 3, false)
        );
        assert_eq!(top[0].values, vec![v(1)]);
        // The sliding window forgets: 90 s later half the previous minute counts.
        let later = Time(90_000_000);
        assert_eq!(s.hottest(later, 3)[0].requests_past_minute, 10);
        // Two minutes on, only the stored values rank them.
        let quiet = s.hottest(Time(200_000_000), 3);
        assert_eq!(quiet.len(), 3);
        assert!(quiet
            .iter()
            .all(|k| k.requests_past_minute == 0 && !k.loaded));
    }

    #[test]
    fn section_4_2_a_key_held_nowhere_here_is_loaded_past_beta_a_minute() {
        // Loaded counts requests for the key whether or not this node stores
        // it: the forward phase stops at a loaded node (issue 15).
        let mut s = Store::new(4, 12, 10);
        let key = Id([7; 20]);
        let loaded: Vec<bool> = (0..13u64)
            .map(|i| s.probe(&key, Time(i * 1000)).loaded)
            .collect();
        // A new key's bucket holds one token (s4_2_loaded_a_new_key_...).
        assert!(!loaded[0], "{loaded:?}");
        assert!(loaded[1..].iter().all(|&l| l), "{loaded:?}");
        // A minute later it is not, and the credit is β again.
        let t = Time(61_000_000);
        let loaded: Vec<bool> = (0..13u64)
            .map(|i| s.probe(&key, t + Duration::from_micros(i)).loaded)
            .collect();
        assert!(loaded[..12].iter().all(|l| !l), "{loaded:?}");
        assert!(
            loaded[12],
            "the 13th request within a minute finds it loaded"
        );
        assert_eq!(s.key_count(), 0);
    }

    #[test]
    fn a_source_cannot_evict_other_sources_values_section_4_2() {
        let mut s =
            Store::new(4, 12, 100).with_limits(quotas(), KeyedBuildHasher::with_seeds(1, 2, 3, 4));
        let k = Id([1; 20]);
        let now = Time::ZERO;
        let short = Duration::from_secs(60);
        let long = Duration::from_secs(86_400);
        // Four honest storers in four networks, short TTLs.
        for (i, a) in [
            "192.0.2.1:0",
            "198.51.100.1:0",
            "203.0.113.1:0",
            "192.0.3.1:0",
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(
                s.store_from(&k, v(i as u8), short, now, remote(a)),
                StoreOutcome::Added
            );
        }
        // An attacker with a day-long TTL evicts nobody (§4.2 would have
        // evicted the shortest-lived): the node is full for it.
        for i in 0..4u8 {
            let out = s.store_from(&k, v(100 + i), long, now, remote(&format!("10.9.{i}.1:0")));
            assert_eq!(out, StoreOutcome::Full);
        }
        assert_eq!(s.values(&k, now).len(), 4);
        assert!(s.values(&k, now).iter().all(|sv| sv.value.0[0] < 4));
        // A storer replaces its own value (one per source per key).
        assert_eq!(
            s.store_from(&k, v(50), long, now, remote("192.0.2.1:0")),
            StoreOutcome::Added
        );
        let vals: Vec<u8> = s.values(&k, now).iter().map(|sv| sv.value.0[0]).collect();
        assert!(vals.contains(&50) && !vals.contains(&0) && vals.len() == 4);
        // The local node keeps §4.2's rule among its own values.
        let k2 = Id([2; 20]);
        for i in 0..4 {
            s.store(&k2, v(i), short, now);
        }
        assert_eq!(s.store(&k2, v(9), long, now), StoreOutcome::Added);
    }

    #[test]
    fn per_source_and_per_prefix_quotas_per_key_and_overall() {
        let mut s =
            Store::new(4, 12, 100).with_limits(quotas(), KeyedBuildHasher::with_seeds(1, 2, 3, 4));
        let now = Time::ZERO;
        let ttl = Duration::from_secs(60);
        let k = Id([1; 20]);
        // Per /24 per key: two values.
        assert!(s
            .store_from(&k, v(1), ttl, now, remote("192.0.2.1:0"))
            .is_stored());
        assert!(s
            .store_from(&k, v(2), ttl, now, remote("192.0.2.2:0"))
            .is_stored());
        assert_eq!(
            s.store_from(&k, v(3), ttl, now, remote("192.0.2.3:0")),
            StoreOutcome::OverQuota
        );
        // Per source overall: three values over all keys; no entry is made.
        let src = remote("198.51.100.7:0");
        for i in 0..3u8 {
            assert!(s
                .store_from(&Id([10 + i; 20]), v(i), ttl, now, src)
                .is_stored());
        }
        let keys = s.key_count();
        assert_eq!(
            s.store_from(&Id([20; 20]), v(0), ttl, now, src),
            StoreOutcome::OverQuota
        );
        assert_eq!(s.key_count(), keys);
        // Per prefix overall: five.
        assert!(s
            .store_from(&Id([30; 20]), v(0), ttl, now, remote("198.51.100.8:0"))
            .is_stored());
        assert!(s
            .store_from(&Id([31; 20]), v(0), ttl, now, remote("198.51.100.9:0"))
            .is_stored());
        assert_eq!(
            s.store_from(&Id([32; 20]), v(0), ttl, now, remote("198.51.100.10:0")),
            StoreOutcome::OverQuota
        );
        // Quotas come back as values expire (once a sweep counts them).
        let later = now + Duration::from_secs(61);
        s.sweep(later);
        assert!(s
            .store_from(&Id([20; 20]), v(0), ttl, later, src)
            .is_stored());
    }

    /// Bytes a key holding one value is accounted at (the key, its entry
    /// in the map, the value): what each URL of a flood costs a level. It
    /// was 466 with four values inline.
    pub const ONE_VALUE_KEY_BYTES_MAX: usize = 256;

    #[test]
    fn a_key_with_one_value_costs_under_256_bytes() {
        let claim = Value::new(&[127, 0, 0, 1, 0x1f, 0x90]).unwrap();
        let cost = KEY_COST_BYTES + value_cost_bytes(&claim);
        assert!(
            cost <= ONE_VALUE_KEY_BYTES_MAX,
            "{cost} bytes a key (entry {} bytes, stored value {} bytes)",
            std::mem::size_of::<Entry>(),
            std::mem::size_of::<StoredValue>()
        );
    }

    #[test]
    fn claims_for_a_flood_of_keys_leave_soon_after_their_ttl() {
        // A flood of distinct URLs: each makes a 20 s claim, its put's
        // forward phase probing the key once.
        let mut s = Store::new(4, 12, 1 << 20);
        let claim = Value::new(&[127, 0, 0, 1, 0x1f, 0x90]).unwrap();
        let ttl = Duration::from_secs(20);
        for i in 0..20_000u32 {
            let k = Id::hash(&i.to_be_bytes());
            let now = Time::ZERO + Duration::from_micros(u64::from(i) * 500);
            assert!(s.store(&k, claim.clone(), ttl, now).is_stored());
            let _ = s.probe(&k, now);
        }
        assert_eq!(s.key_count(), 20_000);
        // 10 s after the last claim expired (one sweep interval), every key
        // is gone with its bytes.
        let later = Time::ZERO + Duration::from_secs(10 + 20 + 10);
        assert_eq!(s.sweep(later), 20_000);
        assert_eq!((s.key_count(), s.bytes()), (0, 0));
    }

    #[test]
    fn a_loaded_key_keeps_its_bucket_after_its_values_expire() {
        // β = 12: a token every 5 s. A key requested hard stays loaded for
        // the next request even after its values are gone and a sweep ran.
        let mut s = Store::new(4, 12, 1 << 20);
        let k = Id([9; 20]);
        let now = Time::ZERO;
        assert!(s.store(&k, v(1), Duration::from_secs(1), now).is_stored());
        for _ in 0..5 {
            let _ = s.probe(&k, now);
        }
        let later = now + Duration::from_secs(2);
        assert_eq!(s.sweep(later), 0, "a loaded key is kept");
        assert!(s.probe(&k, later).loaded);
        // Quiet for a token's time: dropped.
        assert_eq!(s.sweep(later + Duration::from_secs(6)), 1);
    }

    #[test]
    fn bytes_per_level_are_bounded_and_returned_after_a_sweep() {
        let q = Quotas {
            bytes_max: 64 << 10,
            ..Quotas::NONE
        };
        let mut s =
            Store::new(4, 12, 1 << 20).with_limits(q, KeyedBuildHasher::with_seeds(1, 2, 3, 4));
        let big = Value::new(&[7; 255]).unwrap();
        let mut stored = 0;
        for i in 0..10_000u32 {
            stored += usize::from(
                s.store(
                    &Id::hash(&i.to_be_bytes()),
                    big.clone(),
                    Duration::from_secs(10),
                    Time::ZERO,
                )
                .is_stored(),
            );
        }
        assert!(s.bytes() <= 64 << 10, "{} bytes", s.bytes());
        assert!(stored > 50 && stored < 300, "{stored} stored");
        assert_eq!(s.sweep(Time::ZERO + Duration::from_secs(100)), stored);
        assert_eq!((s.key_count(), s.bytes()), (0, 0));
    }

    #[test]
    fn many_keys_move_from_the_vector_to_the_map_and_keep_their_state() {
        let keys_max = 3 * crate::dsht::smallmap::SMALL_MAP_VEC_MAX;
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

    #[test]
    fn issue_27_a_loaded_node_asks_senders_to_stay_until_its_load_is_under_target() {
        let mut s = Store::new(4, 12, 100);
        s.set_probes_per_min_target(100);
        let k = Id([7; 20]);
        let v = Value::new(b"v").unwrap();
        assert_eq!(
            s.store(&k, v.clone(), Duration::from_secs(3600), Time::ZERO),
            StoreOutcome::Added
        );
        let minute = |m: u64, i: u64, of: u64| Time(m * MINUTE_US + i * MINUTE_US / of);
        // Minute 0: 1,000 requests (ten times the target). Within the
        // minute the stay asked grows with the requests so far.
        let mut last = ProbeState {
            loaded: false,
            value_count: 0,
            min_ttl_secs: 0,
            stay_mins: 0,
        };
        for i in 0..1000 {
            last = s.probe(&k, minute(0, i, 1000));
            if i < 100 {
                assert_eq!(last.stay_mins, 1, "request {i}");
            }
        }
        assert!(last.loaded);
        assert_eq!(last.stay_mins, 10);
        // Minute 1 starts with the stay times ten; 50 requests leave it.
        for i in 0..50 {
            last = s.probe(&k, minute(1, i, 50));
        }
        assert_eq!(last.stay_mins, 10);
        // Quiet minutes (under a quarter of the target) halve it.
        last = s.probe(&k, minute(2, 0, 1));
        assert_eq!(last.stay_mins, 10);
        last = s.probe(&k, minute(3, 0, 1));
        assert_eq!(last.stay_mins, 5);
        last = s.probe(&k, minute(5, 0, 1));
        assert_eq!(last.stay_mins, 2);
        last = s.probe(&k, minute(6, 0, 1));
        assert_eq!(last.stay_mins, 1);
        // Never over the wire's cap, however many requests.
        for i in 0..100_000 {
            last = s.probe(&k, minute(7, i, 100_000));
        }
        assert_eq!(last.stay_mins, STAY_MINS_MAX);
        // A node that sets no target asks for nothing more than a minute.
        let mut plain = Store::new(4, 12, 100);
        plain.store(&k, v, Duration::from_secs(3600), Time::ZERO);
        for i in 0..1000 {
            last = plain.probe(&k, minute(0, i, 1000));
        }
        assert_eq!(last.stay_mins, 1);
    }
}
