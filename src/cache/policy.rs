//! Eviction policies over dense object handles (`u32` below a fixed
//! bound: the cache's index slots), byte-weighted.
//!
//! Three candidates, as the issue asks: [`Lru`], [`Sieve`] (NSDI 2024) and
//! [`S3Fifo`] (SOSP 2023). `benches/cache_eviction.rs` measures their hit
//! ratios on a Zipf(0.8) workload larger than the cache; the disk cache runs
//! the winner (see benches/README.md, "Disk cache"). Each keeps 16 bytes per handle
//! (links, size, a few bits), and S3-FIFO a ghost queue of 64-bit
//! fingerprints, so the index stays well under 200 bytes per object.
//!
//! `evict` takes a `keep` predicate: an object it names (one whose DSHT
//! pointer may still live, §3.2) is passed over as if it had been used.

use std::collections::{HashMap, VecDeque};

const NIL: u32 = u32::MAX;

/// What the cache says about an eviction candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Probe {
    /// Hits counted elsewhere since the candidate was last probed.
    pub hits: u8,
    /// The candidate must stay for now.
    pub keep: bool,
}

impl Probe {
    /// No extra hits; kept or not.
    pub fn keep(keep: bool) -> Probe {
        Probe { hits: 0, keep }
    }
}

/// An eviction policy over handles `0..handles`.
pub trait Policy {
    /// Whether `h` is cached.
    fn contains(&self, h: u32) -> bool;
    /// Admits `h` (not cached) of `size` bytes; `fingerprint` identifies the
    /// object across handle reuse (S3-FIFO's ghost queue remembers it).
    fn insert(&mut self, h: u32, size: u64, fingerprint: u64);
    /// `h` was read.
    fn hit(&mut self, h: u32);
    /// Forgets `h` (removed or replaced); false if it was not cached.
    fn remove(&mut self, h: u32) -> bool;
    /// Chooses a victim, forgets it and returns it; `None` if every cached
    /// object is kept (or none is cached).
    fn evict(&mut self, probe: &mut dyn FnMut(u32) -> Probe) -> Option<u32>;
    /// Cached bytes.
    fn bytes(&self) -> u64;
    /// Cached objects.
    fn len(&self) -> usize;
    /// Whether nothing is cached.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One request in a simulation: a hit, or a miss that admits the object and
/// evicts down to `capacity` bytes. Returns whether it hit.
pub fn request<P: Policy + ?Sized>(p: &mut P, h: u32, size: u64, capacity: u64) -> bool {
    if p.contains(h) {
        p.hit(h);
        return true;
    }
    if size > capacity {
        return false;
    }
    while p.bytes() + size > capacity {
        if p.evict(&mut |_| Probe::default()).is_none() {
            break;
        }
    }
    p.insert(h, size, u64::from(h));
    false
}

#[derive(Clone, Copy)]
struct Node {
    prev: u32,
    next: u32,
    size: u32,
    /// Bit 7: cached. Bits 0-1: frequency or visited. Bit 2: in S3-FIFO's main queue.
    bits: u8,
}

const CACHED: u8 = 0x80;
const MAIN: u8 = 0x04;
const FREQ: u8 = 0x03;

impl Node {
    const EMPTY: Node = Node {
        prev: NIL,
        next: NIL,
        size: 0,
        bits: 0,
    };
}

/// A doubly linked list threaded through a node array. `head` is the newest.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    bytes: u64,
    len: usize,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
        bytes: 0,
        len: 0,
    };

    fn push_head(&mut self, nodes: &mut [Node], h: u32) {
        let n = &mut nodes[h as usize];
        n.prev = NIL;
        n.next = self.head;
        let size = n.size;
        if self.head != NIL {
            nodes[self.head as usize].prev = h;
        } else {
            self.tail = h;
        }
        self.head = h;
        self.bytes += u64::from(size);
        self.len += 1;
    }

    fn unlink(&mut self, nodes: &mut [Node], h: u32) {
        let Node {
            prev, next, size, ..
        } = nodes[h as usize];
        if prev != NIL {
            nodes[prev as usize].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            nodes[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
        nodes[h as usize].prev = NIL;
        nodes[h as usize].next = NIL;
        self.bytes -= u64::from(size);
        self.len -= 1;
    }
}

/// Adds to a node's 2-bit frequency, saturating at 3.
fn add_freq(n: &mut Node, hits: u8) {
    let f = (n.bits & FREQ).saturating_add(hits).min(3);
    n.bits = (n.bits & !FREQ) | f;
}

fn size32(size: u64) -> u32 {
    size.min(u64::from(u32::MAX)) as u32
}

/// Least recently used: a hit moves the object to the head, the tail goes.
pub struct Lru {
    nodes: Vec<Node>,
    list: List,
}

impl Lru {
    /// A policy over handles `0..handles`.
    pub fn new(handles: u32) -> Lru {
        Lru {
            nodes: vec![Node::EMPTY; handles as usize],
            list: List::EMPTY,
        }
    }
}

impl Policy for Lru {
    fn contains(&self, h: u32) -> bool {
        self.nodes
            .get(h as usize)
            .is_some_and(|n| n.bits & CACHED != 0)
    }
    fn insert(&mut self, h: u32, size: u64, _fingerprint: u64) {
        if self.contains(h) || h as usize >= self.nodes.len() {
            return;
        }
        self.nodes[h as usize] = Node {
            size: size32(size),
            bits: CACHED,
            ..Node::EMPTY
        };
        self.list.push_head(&mut self.nodes, h);
    }
    fn hit(&mut self, h: u32) {
        if self.contains(h) {
            self.list.unlink(&mut self.nodes, h);
            self.list.push_head(&mut self.nodes, h);
        }
    }
    fn remove(&mut self, h: u32) -> bool {
        if !self.contains(h) {
            return false;
        }
        self.list.unlink(&mut self.nodes, h);
        self.nodes[h as usize].bits = 0;
        true
    }
    fn evict(&mut self, probe: &mut dyn FnMut(u32) -> Probe) -> Option<u32> {
        for _ in 0..self.list.len {
            let t = self.list.tail;
            let p = probe(t);
            if p.keep || p.hits > 0 {
                self.hit(t);
                continue;
            }
            self.remove(t);
            return Some(t);
        }
        None
    }
    fn bytes(&self) -> u64 {
        self.list.bytes
    }
    fn len(&self) -> usize {
        self.list.len
    }
}

/// SIEVE: a FIFO whose hand walks from the tail toward the head, sparing
/// (and clearing) visited objects in place and evicting the first unvisited.
pub struct Sieve {
    nodes: Vec<Node>,
    list: List,
    hand: u32,
}

impl Sieve {
    /// A policy over handles `0..handles`.
    pub fn new(handles: u32) -> Sieve {
        Sieve {
            nodes: vec![Node::EMPTY; handles as usize],
            list: List::EMPTY,
            hand: NIL,
        }
    }
}

impl Policy for Sieve {
    fn contains(&self, h: u32) -> bool {
        self.nodes
            .get(h as usize)
            .is_some_and(|n| n.bits & CACHED != 0)
    }
    fn insert(&mut self, h: u32, size: u64, _fingerprint: u64) {
        if self.contains(h) || h as usize >= self.nodes.len() {
            return;
        }
        self.nodes[h as usize] = Node {
            size: size32(size),
            bits: CACHED,
            ..Node::EMPTY
        };
        self.list.push_head(&mut self.nodes, h);
    }
    fn hit(&mut self, h: u32) {
        if self.contains(h) {
            self.nodes[h as usize].bits |= 1;
        }
    }
    fn remove(&mut self, h: u32) -> bool {
        if !self.contains(h) {
            return false;
        }
        if self.hand == h {
            self.hand = self.nodes[h as usize].prev;
        }
        self.list.unlink(&mut self.nodes, h);
        self.nodes[h as usize].bits = 0;
        true
    }
    fn evict(&mut self, probe: &mut dyn FnMut(u32) -> Probe) -> Option<u32> {
        // Every object is looked at most twice: once to clear its bit, once
        // more to evict it (or keep it).
        for _ in 0..2 * self.list.len + 1 {
            let mut h = self.hand;
            if h == NIL {
                h = self.list.tail;
            }
            if h == NIL {
                return None;
            }
            let p = probe(h);
            let n = &mut self.nodes[h as usize];
            if n.bits & FREQ != 0 || p.hits > 0 || p.keep {
                n.bits &= !FREQ;
                self.hand = n.prev;
                continue;
            }
            self.hand = n.prev;
            self.list.unlink(&mut self.nodes, h);
            self.nodes[h as usize].bits = 0;
            return Some(h);
        }
        None
    }
    fn bytes(&self) -> u64 {
        self.list.bytes
    }
    fn len(&self) -> usize {
        self.list.len
    }
}

/// S3-FIFO's queues.
struct S3Inner {
    nodes: Vec<Node>,
    small: List,
    main: List,
    /// Small queue's share of the bytes, per mille.
    small_permille: u64,
    /// Capacity in bytes the small queue's share is taken of.
    capacity: u64,
    /// Objects leave small for main when used more than this many times.
    move_threshold: u8,
    ghost: VecDeque<u64>,
    ghost_set: HashMap<u64, u32>,
    /// Handles the policy may be given: `nodes` grows to this as handles
    /// are first used, so an empty cache costs no memory per handle.
    handles_max: u32,
}

impl S3Inner {
    /// With a small-queue share (per mille) and move threshold (an object
    /// moves to main if its frequency is above it).
    pub fn with_params(
        handles: u32,
        capacity: u64,
        small_permille: u64,
        move_threshold: u8,
    ) -> S3Inner {
        S3Inner {
            nodes: Vec::new(),
            handles_max: handles,
            small: List::EMPTY,
            main: List::EMPTY,
            small_permille,
            capacity,
            move_threshold,
            ghost: VecDeque::new(),
            ghost_set: HashMap::new(),
        }
    }

    /// Changes the capacity the small queue's share is taken of.
    pub fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
    }

    fn ghost_add(&mut self, fp: u64) {
        let cap = self.main.len.max(self.small.len).max(16);
        while self.ghost.len() >= cap {
            if let Some(old) = self.ghost.pop_front() {
                if let Some(c) = self.ghost_set.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.ghost_set.remove(&old);
                    }
                }
            }
        }
        self.ghost.push_back(fp);
        *self.ghost_set.entry(fp).or_insert(0) += 1;
    }

    fn ghost_take(&mut self, fp: u64) -> bool {
        // The queue entry stays (it ages out); the set forgets it, so a
        // second return does not count twice.
        self.ghost_set.remove(&fp).is_some()
    }

    /// Fingerprints remembered in the ghost queue (for tests).
    pub fn ghost_len(&self) -> usize {
        self.ghost_set.len()
    }

    fn unlink(&mut self, h: u32) {
        if self.nodes[h as usize].bits & MAIN != 0 {
            self.main.unlink(&mut self.nodes, h);
        } else {
            self.small.unlink(&mut self.nodes, h);
        }
    }
}

/// S3-FIFO: a small FIFO (10% of the bytes) that new objects enter, a main
/// FIFO with reinsertion for objects used while in the small one, and a
/// ghost FIFO of the fingerprints of objects recently evicted from the
/// small one (those enter main directly when they come back).
pub struct S3Fifo {
    policy: S3Inner,
    fingerprints: Vec<u64>,
}

impl S3Fifo {
    /// The paper's parameters: small queue 10% of `capacity` bytes, objects
    /// used more than once while small move to main (freq > 1), a ghost as
    /// long as main.
    pub fn new(handles: u32, capacity: u64) -> S3Fifo {
        S3Fifo::with_params(handles, capacity, 100, 1)
    }
    /// With a small-queue share (per mille) and move threshold (an object
    /// moves to main if its frequency is above it).
    pub fn with_params(
        handles: u32,
        capacity: u64,
        small_permille: u64,
        move_threshold: u8,
    ) -> S3Fifo {
        S3Fifo {
            policy: S3Inner::with_params(handles, capacity, small_permille, move_threshold),
            fingerprints: Vec::new(),
        }
    }
    /// Changes the capacity the small queue's share is taken of.
    pub fn set_capacity(&mut self, capacity: u64) {
        self.policy.set_capacity(capacity);
    }
    /// Fingerprints in the ghost queue.
    pub fn ghost_len(&self) -> usize {
        self.policy.ghost_len()
    }
    /// Bytes of memory the policy uses: 16 per handle, 8 per handle for
    /// fingerprints, the ghost queue and its set.
    pub fn memory_bytes(&self) -> usize {
        let p = &self.policy;
        p.nodes.capacity() * std::mem::size_of::<Node>()
            + self.fingerprints.capacity() * 8
            + p.ghost.capacity() * 8
            // hashbrown: key, value and one control byte per bucket.
            + p.ghost_set.capacity() * (8 + 4 + 1)
    }

    /// Whether `h` is in the main queue.
    pub fn in_main(&self, h: u32) -> bool {
        self.policy
            .nodes
            .get(h as usize)
            .is_some_and(|n| n.bits & (CACHED | MAIN) == CACHED | MAIN)
    }
}

impl Policy for S3Fifo {
    fn contains(&self, h: u32) -> bool {
        self.policy
            .nodes
            .get(h as usize)
            .is_some_and(|n| n.bits & CACHED != 0)
    }
    fn insert(&mut self, h: u32, size: u64, fingerprint: u64) {
        if self.contains(h) || h >= self.policy.handles_max {
            return;
        }
        if h as usize >= self.policy.nodes.len() {
            // Grown as handles are first used (they are handed out lowest
            // first), at most to `handles_max`.
            let len = (h as usize + 1)
                .max(self.policy.nodes.len() * 2)
                .min(self.policy.handles_max as usize);
            let more = len - self.policy.nodes.len();
            self.policy.nodes.reserve_exact(more);
            self.policy.nodes.resize(len, Node::EMPTY);
            self.fingerprints
                .reserve_exact(len - self.fingerprints.len());
            self.fingerprints.resize(len, 0);
        }
        self.fingerprints[h as usize] = fingerprint;
        let p = &mut self.policy;
        let to_main = p.ghost_take(fingerprint);
        p.nodes[h as usize] = Node {
            size: size32(size),
            bits: CACHED | if to_main { MAIN } else { 0 },
            ..Node::EMPTY
        };
        if to_main {
            p.main.push_head(&mut p.nodes, h);
        } else {
            p.small.push_head(&mut p.nodes, h);
        }
    }
    fn hit(&mut self, h: u32) {
        if self.contains(h) {
            add_freq(&mut self.policy.nodes[h as usize], 1);
        }
    }
    fn remove(&mut self, h: u32) -> bool {
        if !self.contains(h) {
            return false;
        }
        self.policy.unlink(h);
        self.policy.nodes[h as usize].bits = 0;
        true
    }
    fn evict(&mut self, probe: &mut dyn FnMut(u32) -> Probe) -> Option<u32> {
        let p = &mut self.policy;
        // Each step moves one object or evicts one; each object moves from
        // small to main at most once and is reinserted at most three times
        // before its frequency is spent, so the bound is generous.
        let mut main_spins = 0;
        for _ in 0..5 * (p.small.len + p.main.len) + 1 {
            let small_target = p.capacity / 1000 * p.small_permille;
            // Main spinning through kept objects: take from small instead.
            let main_stuck = main_spins > 4 * p.main.len;
            let from_small =
                p.small.len > 0 && (p.small.bytes >= small_target || p.main.len == 0 || main_stuck);
            if from_small {
                let t = p.small.tail;
                p.small.unlink(&mut p.nodes, t);
                let pr = probe(t);
                let n = &mut p.nodes[t as usize];
                add_freq(n, pr.hits);
                if n.bits & FREQ > p.move_threshold || pr.keep {
                    n.bits = (n.bits & !FREQ) | MAIN;
                    p.main.push_head(&mut p.nodes, t);
                    continue;
                }
                n.bits = 0;
                let fp = self.fingerprints[t as usize];
                p.ghost_add(fp);
                return Some(t);
            }
            let t = p.main.tail;
            if t == NIL {
                return None;
            }
            p.main.unlink(&mut p.nodes, t);
            let pr = probe(t);
            let n = &mut p.nodes[t as usize];
            add_freq(n, pr.hits);
            let freq = n.bits & FREQ;
            if freq > 0 || pr.keep {
                n.bits = (n.bits & !FREQ) | freq.saturating_sub(1);
                p.main.push_head(&mut p.nodes, t);
                main_spins += 1;
                continue;
            }
            n.bits = 0;
            return Some(t);
        }
        None
    }
    fn bytes(&self) -> u64 {
        self.policy.small.bytes + self.policy.main.bytes
    }
    fn len(&self) -> usize {
        self.policy.small.len + self.policy.main.len
    }
}

#[cfg(test)]
mod tests;
