//! One core's partition of the cache index, in memory every core can read.
//!
//! Written only by the owning core (`steer::shard_of_key`); read by every
//! core with no lock through a sequence counter (a seqlock): the owner makes
//! the counter odd, changes slots, makes it even; a reader that saw it odd,
//! or changed across its probe, probes again. Writes are a few stores, so a
//! reader retries rarely and briefly. Open addressing with linear probing
//! and backward-shift deletion (no tombstones), at most 3/4 full; the
//! table has exactly 4/3 as many slots as entries allowed (not a power of
//! two: the home slot is a multiply-shift of the key).
//!
//! A slot is six words (48 bytes): the key (20 bytes) with the state and
//! the policy handle; the location (segment, offset / 64) with the head
//! length; the body length (complete) or announced length (writing); the
//! times (stored, fresh until).

use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};

use coral::Id;

/// Nothing here; probes stop.
pub const EMPTY: u64 = 0;
/// A complete object.
pub const COMPLETE: u64 = 1;
/// An object still being written.
pub const WRITING: u64 = 2;

/// The largest handle a slot holds (28 bits).
pub const HANDLE_MAX: u32 = (1 << 28) - 1;

/// Words per slot.
const WORDS: usize = 6;
/// Bits of the segment id in the location word.
pub const SEG_BITS: u32 = 22;
/// Record offsets are multiples of 64: the location word keeps offset / 64
/// in 26 bits (segments up to 4 GiB).
const OFF_BITS: u32 = 26;
/// Complete entries: the body length was announced (so `expected_len`
/// reads back as the body length).
const ANNOUNCED: u64 = 1 << 63;

/// One slot's decoded words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub key: Id,
    pub state: u64,
    pub handle: u32,
    pub seg: u32,
    pub off: u32,
    pub head_len: u32,
    pub body_len: u64,
    pub stored_secs: u32,
    pub fresh_until_secs: u32,
    pub expected_len: u64,
}

fn key_words(key: &Id) -> (u64, u64, u64) {
    let b = &key.0;
    let w = |i: usize| {
        u64::from_le_bytes([
            b[i],
            b[i + 1],
            b[i + 2],
            b[i + 3],
            b[i + 4],
            b[i + 5],
            b[i + 6],
            b[i + 7],
        ])
    };
    (
        w(0),
        w(8),
        u64::from(u32::from_le_bytes([b[16], b[17], b[18], b[19]])),
    )
}

impl Entry {
    fn encode(&self) -> [u64; WORDS] {
        let (k0, k1, k2) = key_words(&self.key);
        let lens = if self.state == COMPLETE {
            self.body_len
                | if self.expected_len != u64::MAX {
                    ANNOUNCED
                } else {
                    0
                }
        } else {
            self.expected_len
        };
        [
            k0,
            k1,
            k2 | (self.state << 32) | (u64::from(self.handle & HANDLE_MAX) << 34),
            (u64::from(self.seg) << (OFF_BITS + 16))
                | (u64::from(self.off / 64) << 16)
                | u64::from(self.head_len & 0xffff),
            lens,
            (u64::from(self.stored_secs) << 32) | u64::from(self.fresh_until_secs),
        ]
    }

    fn decode(w: &[u64; WORDS]) -> Entry {
        let mut key = [0u8; 20];
        key[0..8].copy_from_slice(&w[0].to_le_bytes());
        key[8..16].copy_from_slice(&w[1].to_le_bytes());
        key[16..20].copy_from_slice(&(w[2] as u32).to_le_bytes());
        let state = (w[2] >> 32) & 3;
        let (body_len, expected_len) = if state == COMPLETE {
            let len = w[4] & !ANNOUNCED;
            (len, if w[4] & ANNOUNCED != 0 { len } else { u64::MAX })
        } else {
            (0, w[4])
        };
        Entry {
            key: Id(key),
            state,
            handle: ((w[2] >> 34) as u32) & HANDLE_MAX,
            seg: (w[3] >> (OFF_BITS + 16)) as u32,
            off: (((w[3] >> 16) & ((1 << OFF_BITS) - 1)) * 64) as u32,
            head_len: (w[3] & 0xffff) as u32,
            body_len,
            stored_secs: (w[5] >> 32) as u32,
            fresh_until_secs: w[5] as u32,
            expected_len,
        }
    }
}

/// `n` empty slots, allocated zeroed (`calloc`: fresh anonymous pages the
/// kernel maps on first touch), so a partition sized for millions of
/// objects costs memory only as its slots are used, never at start.
fn zeroed_slots(n: usize) -> Box<[[AtomicU64; WORDS]]> {
    let words: Box<[[u64; WORDS]]> = vec![[0u64; WORDS]; n].into_boxed_slice();
    // SAFETY: `AtomicU64` has the same size, alignment and bit validity as
    // `u64` (documented), so `[[u64; WORDS]]` and `[[AtomicU64; WORDS]]`
    // have the same layout; the box's ownership moves whole.
    unsafe { Box::from_raw(Box::into_raw(words) as *mut [[AtomicU64; WORDS]]) }
}

/// `n` zero hit counters, allocated zeroed (as `zeroed_slots`).
fn zeroed_hits(n: usize) -> Box<[AtomicU8]> {
    let bytes: Box<[u8]> = vec![0u8; n].into_boxed_slice();
    // SAFETY: `AtomicU8` has the same layout and bit validity as `u8`.
    unsafe { Box::from_raw(Box::into_raw(bytes) as *mut [AtomicU8]) }
}

/// Keeps the sequence counter on its own cache line: readers on every core
/// load it, and it should not share a line with data the owner writes often.
#[repr(align(64))]
struct Seq(AtomicU64);

/// A partition: one core writes it, every core reads it.
pub struct Partition {
    seq: Seq,
    slots: Box<[[AtomicU64; WORDS]]>,
    /// Entries allowed (3/4 of the slots).
    capacity: usize,
    /// Hits counted by readers on every core, per handle, saturating at 3;
    /// the owner's eviction policy collects them (`take_hits`).
    hits: Box<[AtomicU8]>,
    /// Occupied slots (owner only).
    used: std::cell::Cell<usize>,
}

// SAFETY: `used` is touched only by the owning core (the single writer);
// every other field is atomic.
unsafe impl Sync for Partition {}

impl Partition {
    /// A partition for up to `objects` entries (4/3 as many slots) and as
    /// many policy handles.
    pub fn new(objects: usize) -> Partition {
        let objects = objects.max(16);
        let slots = objects * 4 / 3 + 1;
        Partition {
            seq: Seq(AtomicU64::new(0)),
            slots: zeroed_slots(slots),
            capacity: objects,
            hits: zeroed_hits(objects),
            used: std::cell::Cell::new(0),
        }
    }

    /// Bytes of memory a partition for `objects` entries takes once every
    /// page of it has been touched (its slots and hit counters; an empty
    /// partition's pages are untouched zero pages, see `zeroed_slots`).
    pub fn memory_bytes_for(objects: usize) -> usize {
        let objects = objects.max(16);
        (objects * 4 / 3 + 1) * WORDS * 8 + objects + std::mem::size_of::<Self>()
    }

    /// Where its tables lie (address, bytes): the slots, then the hit
    /// counters (a test measures the memory they hold).
    #[cfg(test)]
    pub fn tables(&self) -> [(usize, usize); 2] {
        [
            (
                self.slots.as_ptr() as usize,
                std::mem::size_of_val(&*self.slots),
            ),
            (self.hits.as_ptr() as usize, self.hits.len()),
        ]
    }

    /// Entries the partition may hold (3/4 of its slots).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Occupied slots.
    pub fn len(&self) -> usize {
        self.used.get()
    }

    /// Bytes of memory the partition uses.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * WORDS * 8 + self.hits.len() + std::mem::size_of::<Self>()
    }

    fn home(&self, key: &Id) -> usize {
        // Bytes 8..16 (the first two pick the owning core), mapped onto
        // 0..slots by a multiply-shift.
        let (_, k1, _) = key_words(key);
        ((u128::from(k1) * self.slots.len() as u128) >> 64) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// Steps from `from` forward to `to`, around the end.
    fn dist(&self, from: usize, to: usize) -> usize {
        if to >= from {
            to - from
        } else {
            to + self.slots.len() - from
        }
    }

    fn load(&self, i: usize) -> [u64; WORDS] {
        let s = &self.slots[i];
        std::array::from_fn(|w| s[w].load(Ordering::Relaxed))
    }

    /// The sequence value now (odd while the owner writes).
    pub fn seq_now(&self) -> u64 {
        self.seq.0.load(Ordering::Acquire)
    }

    /// Whether nothing changed since `seq` was read (a SeqCst load: after
    /// the caller's SeqCst increment of a reader count, see `sweep`).
    pub fn unchanged_since(&self, seq: u64) -> bool {
        self.seq.0.load(Ordering::SeqCst) == seq
    }

    /// Any core: the complete entry for `key`, else the one being written.
    /// Returns the entry and the sequence value it is valid for.
    pub fn lookup(&self, key: &Id) -> Option<(Entry, u64)> {
        let (k0, k1, k2) = key_words(key);
        let mut spins = 0u32;
        loop {
            let s1 = self.seq.0.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                // The owner is mid-write (a few stores); if its thread was
                // preempted there, let it run.
                spins += 1;
                if spins % 64 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let mut found: Option<[u64; WORDS]> = None;
            let mut i = self.home(key);
            for _ in 0..self.slots.len() {
                let w2 = self.slots[i][2].load(Ordering::Relaxed);
                let state = (w2 >> 32) & 3;
                if state == EMPTY {
                    break;
                }
                if w2 as u32 as u64 == k2
                    && self.slots[i][0].load(Ordering::Relaxed) == k0
                    && self.slots[i][1].load(Ordering::Relaxed) == k1
                {
                    let w = self.load(i);
                    if state == COMPLETE {
                        found = Some(w);
                        break;
                    }
                    found.get_or_insert(w);
                }
                i = self.next(i);
            }
            fence(Ordering::Acquire);
            if self.seq.0.load(Ordering::Relaxed) == s1 {
                return found.map(|w| (Entry::decode(&w), s1));
            }
        }
    }

    /// Any core: counts a hit on `handle` (at most 3 between collections;
    /// after that the line is only read).
    pub fn count_hit(&self, handle: u32) {
        if let Some(h) = self.hits.get(handle as usize) {
            if h.load(Ordering::Relaxed) < 3 {
                h.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Owner: the hits counted on `handle` since the last call.
    pub fn take_hits(&self, handle: u32) -> u8 {
        self.hits
            .get(handle as usize)
            .map_or(0, |h| h.swap(0, Ordering::Relaxed).min(3))
    }

    fn write_begin(&self) {
        let s = self.seq.0.load(Ordering::Relaxed);
        self.seq.0.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    fn write_end(&self) {
        let s = self.seq.0.load(Ordering::Relaxed);
        self.seq.0.store(s + 1, Ordering::Release);
    }

    fn store(&self, i: usize, w: &[u64; WORDS]) {
        for (slot, v) in self.slots[i].iter().zip(w) {
            slot.store(*v, Ordering::Relaxed);
        }
    }

    /// Owner: the slot holding `key` with `handle`.
    pub fn find(&self, key: &Id, handle: u32) -> Option<usize> {
        let mut i = self.home(key);
        for _ in 0..self.slots.len() {
            let e = Entry::decode(&self.load(i));
            if e.state == EMPTY {
                return None;
            }
            if e.key == *key && e.handle == handle {
                return Some(i);
            }
            i = self.next(i);
        }
        None
    }

    /// Owner: the entry in slot `i`.
    pub fn get(&self, i: usize) -> Entry {
        Entry::decode(&self.load(i))
    }

    /// Owner: inserts `e` (a key may have two entries: complete and
    /// writing). False when the partition is at capacity.
    pub fn insert(&self, e: &Entry) -> bool {
        if self.used.get() >= self.capacity() {
            return false;
        }
        let mut i = self.home(&e.key);
        while (self.slots[i][2].load(Ordering::Relaxed) >> 32) & 3 != EMPTY {
            i = self.next(i);
        }
        self.write_begin();
        self.store(i, &e.encode());
        self.write_end();
        self.used.set(self.used.get() + 1);
        true
    }

    /// Owner: replaces slot `i`'s entry (same key).
    pub fn update(&self, i: usize, e: &Entry) {
        self.write_begin();
        self.store(i, &e.encode());
        self.write_end();
    }

    /// Owner: updates slot `i` and removes slot `j` in one change, so no
    /// reader sees both or neither (a new copy replacing an old one).
    pub fn update_and_remove(&self, i: usize, e: &Entry, j: usize) {
        self.write_begin();
        self.store(i, &e.encode());
        self.remove_inner(j);
        self.write_end();
        self.used.set(self.used.get() - 1);
    }

    /// Owner: empties slot `i`, shifting later entries of its probe run back.
    pub fn remove(&self, i: usize) {
        self.write_begin();
        self.remove_inner(i);
        self.write_end();
        self.used.set(self.used.get() - 1);
    }

    fn remove_inner(&self, mut hole: usize) {
        let mut j = hole;
        loop {
            j = self.next(j);
            let w = self.load(j);
            if (w[2] >> 32) & 3 == EMPTY {
                break;
            }
            let home = self.home(&Entry::decode(&w).key);
            // The entry at j may move to the hole unless its home lies in
            // the cyclic range (hole, j].
            let dist_home = self.dist(home, j);
            let dist_hole = self.dist(hole, j);
            if dist_home >= dist_hole {
                self.store(hole, &w);
                hole = j;
            }
        }
        self.store(hole, &[0; WORDS]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(key: Id, state: u64, handle: u32) -> Entry {
        Entry {
            key,
            state,
            handle,
            seg: handle & ((1 << SEG_BITS) - 1),
            off: (handle % 1000) * 64,
            head_len: 17,
            body_len: if state == COMPLETE {
                u64::from(handle) * 1000
            } else {
                0
            },
            stored_secs: 5,
            fresh_until_secs: 9,
            expected_len: u64::MAX,
        }
    }

    #[test]
    fn entries_round_trip_through_their_words() {
        let e = entry(Id::hash(b"x"), WRITING, HANDLE_MAX);
        assert_eq!(Entry::decode(&e.encode()), e);
    }

    proptest! {
        /// The partition agrees with a map through inserts and removals
        /// (backward shifts included), with keys that collide on purpose.
        #[test]
        fn partition_agrees_with_a_map(ops in proptest::collection::vec((0u8..40, any::<bool>()), 0..400)) {
            let p = Partition::new(48);
            let mut model = std::collections::HashMap::new();
            for (n, insert) in ops {
                // Keys whose home bytes agree in their low bits: long runs.
                let mut k = [0u8; 20];
                k[8] = n % 4;
                k[0] = n;
                let key = Id(k);
                if insert {
                    if let std::collections::hash_map::Entry::Vacant(v) = model.entry(key) {
                        if p.insert(&entry(key, COMPLETE, u32::from(n))) {
                            v.insert(u32::from(n));
                        }
                    }
                } else if model.remove(&key).is_some() {
                    let i = p.find(&key, u32::from(n)).unwrap();
                    p.remove(i);
                }
                prop_assert_eq!(p.len(), model.len());
                for m in 0u8..40 {
                    let mut k = [0u8; 20];
                    k[8] = m % 4;
                    k[0] = m;
                    let found = p.lookup(&Id(k)).map(|(e, _)| e.handle);
                    prop_assert_eq!(found, model.get(&Id(k)).copied());
                }
            }
        }
    }

    #[test]
    fn lookup_prefers_the_complete_copy() {
        let p = Partition::new(16);
        let key = Id::hash(b"k");
        p.insert(&entry(key, WRITING, 1));
        assert_eq!(p.lookup(&key).unwrap().0.handle, 1);
        p.insert(&entry(key, COMPLETE, 2));
        assert_eq!(p.lookup(&key).unwrap().0.handle, 2);
    }
}
