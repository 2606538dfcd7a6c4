//! The simulator's event queue: a timer wheel of 1.024 ms slots with a
//! binary heap for events beyond its horizon.
//!
//! Almost every event in a simulated network falls within a few seconds of
//! now (one-way delays, RPC deadlines, lookup stalls), so a push is an append
//! to its slot's list and a pop takes from the current slot, which is sorted
//! once when the clock reaches it (it holds a handful of events). Events
//! further out wait in the overflow heap and move onto the wheel as it turns.
//!
//! The order is exactly that of a priority queue on (time, key), the key
//! the caller's (the simulator's: the node that made the event and that
//! node's count), so one seed gives one run whatever the wheel's geometry.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::time::Time;

/// log2 of a slot's width in microseconds (1.024 ms).
const SLOT_WIDTH_US_LOG2: u32 = 10;
/// Slots on the wheel (a power of two): the horizon is 8.4 s of virtual time.
const WHEEL_SLOTS: usize = 1 << 13;
const SLOT_MASK: u64 = WHEEL_SLOTS as u64 - 1;
const BITMAP_WORDS: usize = WHEEL_SLOTS / 64;
/// Events a drained slot keeps room for (24 bytes each). Slots keep their
/// capacity for a turn of the wheel; without a cap each held room for the
/// most events it ever saw (the join's bursts): 30 MB, 3 KB a node, at
/// 10,000 simulated nodes, whichever slot a burst had passed through.
const SLOT_CAPACITY_KEPT: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Entry<T> {
    at: Time,
    seq: u64,
    item: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (Time, u64) {
        (self.at, self.seq)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// A priority queue of `T`s by time, ties broken by the caller's keys.
///
/// Pushes must not be earlier than the last event popped (the simulator's
/// now); one that is anyway is delivered next, still in (time, key)
/// order among the events in the current slot.
#[derive(Debug)]
pub struct EventQueue<T> {
    /// `slots[s & SLOT_MASK]` holds the events of absolute slot `s`, for
    /// `cursor <= s < cursor + WHEEL_SLOTS`.
    slots: Vec<Vec<Entry<T>>>,
    /// One bit per slot: whether it holds any event.
    occupied: Vec<u64>,
    /// The absolute slot number (time >> SLOT_WIDTH_US_LOG2) of the current slot.
    cursor: u64,
    /// Whether the current slot is sorted, latest first (it is being drained).
    current_sorted: bool,
    /// Events on the wheel.
    on_wheel: usize,
    /// Events at or beyond `cursor + WHEEL_SLOTS`.
    overflow: BinaryHeap<Reverse<Entry<T>>>,
}

impl<T: Copy> Default for EventQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> EventQueue<T> {
    /// An empty queue at time zero.
    pub fn new() -> EventQueue<T> {
        EventQueue {
            slots: (0..WHEEL_SLOTS).map(|_| Vec::new()).collect(),
            occupied: vec![0; BITMAP_WORDS],
            cursor: 0,
            current_sorted: false,
            on_wheel: 0,
            overflow: BinaryHeap::new(),
        }
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.on_wheel + self.overflow.len()
    }

    /// Whether no event is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `item` at `at` with the tie-break `seq` (the simulator's:
    /// the node that made the event and that node's count). The key (`at`,
    /// `seq`) must not be earlier than the last event popped; one that is
    /// anyway is popped next, in key order among the events of its slot.
    pub fn push_keyed(&mut self, at: Time, seq: u64, item: T) {
        let e = Entry { at, seq, item };
        let slot = slot_of(at).max(self.cursor);
        if slot - self.cursor >= WHEEL_SLOTS as u64 {
            self.overflow.push(Reverse(e));
        } else {
            self.put_on_wheel(slot, e);
        }
    }

    /// The event most likely to be popped next, if the wheel's current slot
    /// holds it: a hint for prefetching, not an answer (an event pushed in
    /// between may come first).
    pub fn peek_hint(&self) -> Option<&T> {
        self.peek_hint_nth(0)
    }

    /// The event most likely to be popped `k` events after the next one
    /// ([`peek_hint`](Self::peek_hint) is `k` = 0), if the wheel's current
    /// slot holds it: a hint for prefetching further ahead.
    pub fn peek_hint_nth(&self, k: usize) -> Option<&T> {
        if !self.current_sorted {
            return None;
        }
        let slot = &self.slots[(self.cursor & SLOT_MASK) as usize];
        slot.len().checked_sub(k + 1).map(|i| &slot[i].item)
    }

    /// The time of the earliest event queued, if any.
    pub fn earliest(&self) -> Option<Time> {
        if self.on_wheel == 0 {
            // Every event beyond the wheel's horizon is later than every
            // event on it: it would have moved on as the wheel turned.
            return self.overflow.peek().map(|Reverse(e)| e.at);
        }
        let s = self.next_occupied()?;
        let slot = &self.slots[(s & SLOT_MASK) as usize];
        if s == self.cursor && self.current_sorted {
            return slot.last().map(|e| e.at);
        }
        slot.iter().map(|e| e.at).min()
    }

    /// Removes and returns the earliest event if it is due at or before `until`.
    pub fn pop_until(&mut self, until: Time) -> Option<(Time, T)> {
        self.pop_until_keyed(until).map(|(at, _, item)| (at, item))
    }

    /// [`EventQueue::pop_until`], with the event's key.
    pub fn pop_until_keyed(&mut self, until: Time) -> Option<(Time, u64, T)> {
        loop {
            if self.current_sorted {
                let idx = (self.cursor & SLOT_MASK) as usize;
                let slot = &mut self.slots[idx];
                if let Some(e) = slot.last() {
                    if e.at > until {
                        return None;
                    }
                    let e = slot.pop().expect("not empty");
                    if slot.is_empty() {
                        self.occupied[idx / 64] &= !(1 << (idx % 64));
                        // A drained slot is next used a turn of the wheel
                        // later: it keeps room for a usual slot's events,
                        // not for the busiest moment it ever saw.
                        if slot.capacity() > SLOT_CAPACITY_KEPT {
                            slot.shrink_to(SLOT_CAPACITY_KEPT);
                        }
                    }
                    self.on_wheel -= 1;
                    return Some((e.at, e.seq, e.item));
                }
            }
            // The current slot is drained (or not yet sorted): turn the wheel
            // to the next slot with events, but never past `until`, so that
            // events pushed at `until` still land at or after the cursor.
            let limit = slot_of(until);
            let next = self.next_occupied().or_else(|| {
                self.overflow
                    .peek()
                    .map(|Reverse(e)| slot_of(e.at).max(self.cursor))
            });
            match next {
                Some(s) if s <= limit => {
                    self.turn_to(s);
                    let idx = (s & SLOT_MASK) as usize;
                    // Latest first, so that draining pops from the end.
                    self.slots[idx].sort_unstable_by_key(|e| Reverse(e.key()));
                    self.current_sorted = true;
                }
                _ => {
                    self.turn_to(limit.max(self.cursor));
                    return None;
                }
            }
        }
    }

    fn put_on_wheel(&mut self, slot: u64, e: Entry<T>) {
        let idx = (slot & SLOT_MASK) as usize;
        let list = &mut self.slots[idx];
        if slot == self.cursor && self.current_sorted {
            // Keep the slot being drained sorted, latest first.
            let pos = list.partition_point(|x| x.key() > e.key());
            list.insert(pos, e);
        } else {
            list.push(e);
        }
        self.occupied[idx / 64] |= 1 << (idx % 64);
        self.on_wheel += 1;
    }

    /// Moves the cursor to absolute slot `s` (no event lies between) and
    /// brings overflow events within the new horizon onto the wheel.
    fn turn_to(&mut self, s: u64) {
        if s == self.cursor {
            return;
        }
        debug_assert!(s > self.cursor);
        self.cursor = s;
        self.current_sorted = false;
        while let Some(Reverse(e)) = self.overflow.peek() {
            let slot = slot_of(e.at).max(self.cursor);
            if slot - self.cursor >= WHEEL_SLOTS as u64 {
                break;
            }
            let Some(Reverse(e)) = self.overflow.pop() else {
                break;
            };
            self.put_on_wheel(slot, e);
        }
    }

    /// The absolute number of the first slot at or after the cursor that
    /// holds events, if any does.
    fn next_occupied(&self) -> Option<u64> {
        if self.on_wheel == 0 {
            return None;
        }
        let start = (self.cursor & SLOT_MASK) as usize;
        let (w0, b0) = (start / 64, start % 64);
        for k in 0..=BITMAP_WORDS {
            let w = (w0 + k) % BITMAP_WORDS;
            let mut bits = self.occupied[w];
            if k == 0 {
                bits &= !0u64 << b0;
            } else if k == BITMAP_WORDS {
                bits &= !(!0u64 << b0);
            }
            if bits != 0 {
                let idx = w * 64 + bits.trailing_zeros() as usize;
                let ahead = (idx + WHEEL_SLOTS - start) % WHEEL_SLOTS;
                return Some(self.cursor + ahead as u64);
            }
        }
        unreachable!("on_wheel > 0 but no slot is marked")
    }
}

fn slot_of(t: Time) -> u64 {
    t.as_micros() >> SLOT_WIDTH_US_LOG2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The reference: a binary heap on (time, key), the keys given in
    /// increasing order as the simulator's are for each node.
    #[derive(Default)]
    struct Reference {
        heap: BinaryHeap<Reverse<(Time, u64, u32)>>,
        seq: u64,
    }

    impl Reference {
        fn push(&mut self, at: Time, item: u32) {
            self.seq += 1;
            self.heap.push(Reverse((at, self.seq, item)));
        }
        fn pop_until(&mut self, until: Time) -> Option<(Time, u32)> {
            match self.heap.peek() {
                Some(Reverse((at, _, _))) if *at <= until => {
                    let Reverse((at, _, item)) = self.heap.pop().expect("peeked");
                    Some((at, item))
                }
                _ => None,
            }
        }
    }

    #[test]
    fn pops_in_time_then_key_order_like_a_heap() {
        let mut rng = Rng::new(3);
        let mut q = EventQueue::new();
        let mut r = Reference::default();
        let mut now = Time::ZERO;
        let mut item = 0u32;
        for round in 0..20_000u64 {
            // Pushes near now (ties included), a few seconds out, and far beyond the horizon.
            for _ in 0..rng.below(4) {
                let d = match rng.below(10) {
                    0 => 0,
                    1 => rng.below(3),
                    2..=6 => rng.below(300_000),
                    7 | 8 => 2_000_000 + rng.below(1000),
                    _ => rng.below(60_000_000),
                };
                item += 1;
                q.push_keyed(Time(now.0 + d), u64::from(item), item);
                r.push(Time(now.0 + d), item);
            }
            let least = r.heap.peek().map(|Reverse((at, _, _))| *at);
            assert_eq!(q.earliest(), least, "round {round}");
            // Run to a limit, sometimes far ahead with nothing in between.
            let step = if round % 1000 == 0 {
                30_000_000
            } else {
                rng.below(5_000)
            };
            let until = Time(now.0 + step);
            loop {
                let (a, b) = (q.pop_until(until), r.pop_until(until));
                assert_eq!(a, b, "round {round}");
                let Some((at, _)) = a else { break };
                assert!(at >= now);
                now = at;
            }
            now = until;
            assert_eq!(q.len(), r.heap.len());
        }
        loop {
            let (a, b) = (q.pop_until(Time::MAX), r.pop_until(Time::MAX));
            assert_eq!(a, b);
            if a.is_none() {
                break;
            }
        }
        assert!(q.is_empty());
    }

    #[test]
    fn an_event_pushed_at_now_while_draining_keeps_its_place() {
        let mut q = EventQueue::new();
        for (at, item) in [(100, 1), (100, 2), (101, 3)] {
            q.push_keyed(Time(at), item, item);
        }
        assert_eq!(q.pop_until(Time(1000)), Some((Time(100), 1)));
        for (at, item) in [(100, 4), (101, 5)] {
            q.push_keyed(Time(at), item, item);
        }
        let rest: Vec<_> = std::iter::from_fn(|| q.pop_until(Time(1000))).collect();
        assert_eq!(
            rest,
            vec![
                (Time(100), 2),
                (Time(100), 4),
                (Time(101), 3),
                (Time(101), 5)
            ]
        );
    }

    /// The hints name the events popped next, in order, when nothing is
    /// pushed in between (within the wheel's current slot).
    #[test]
    fn the_hints_name_the_next_events_in_order() {
        let mut q = EventQueue::new();
        for item in 1..=5u64 {
            q.push_keyed(Time(100 + item), item, item);
        }
        assert_eq!(q.pop_until(Time(1000)), Some((Time(101), 1)));
        let hinted: Vec<_> = (0..5).map(|k| q.peek_hint_nth(k).copied()).collect();
        assert_eq!(hinted, vec![Some(2), Some(3), Some(4), Some(5), None]);
        assert_eq!(q.peek_hint(), Some(&2));
        let rest: Vec<_> = std::iter::from_fn(|| q.pop_until(Time(1000)).map(|(_, i)| i)).collect();
        assert_eq!(rest, vec![2, 3, 4, 5]);
    }
}
