//! The transmit queue: the node's encoded datagrams, oldest first, until
//! the driver polls them ([`Node::poll_transmit`]).
//!
//! A vector of slots from `head` to `end`, drained slots before `head` and
//! after `end` keeping their buffers: the next datagram is encoded into
//! one of them (issue 27: a server's node allocated and its runtime freed a
//! buffer per reply, ~70 user-space instructions a get). A node polled with
//! [`Node::poll_transmit_keeping`] (a server's, drained after every batch)
//! takes the driver's sent buffer in exchange for each datagram and keeps
//! its slots once drained, within [`TRANSMIT_SLOTS_KEPT_MAX`] slots of
//! buffers of at most [`TRANSMIT_BUFFER_KEPT_BYTES`]; one polled with
//! [`Node::poll_transmit`] (the simulator's 10,000 nodes) frees the queue
//! once drained, as the `VecDeque` before it did. The datagrams, their order
//! and what is dropped when the queue is full are the same either way.
//!
//! [`Node::poll_transmit`]: super::Node::poll_transmit
//! [`Node::poll_transmit_keeping`]: super::Node::poll_transmit_keeping

use std::net::SocketAddr;

use crate::dsht::limits::{TRANSMIT_BUFFER_KEPT_BYTES, TRANSMIT_SLOTS_KEPT_MAX};

use super::DATAGRAM_BUFFER_BYTES;

/// The node's datagrams waiting to be polled. The size of the `VecDeque`
/// it replaced (32 bytes), so the node's layout is unchanged.
#[derive(Debug, Default)]
pub(super) struct TransmitQueue {
    slots: Vec<(SocketAddr, Vec<u8>)>,
    /// The oldest datagram queued.
    head: u32,
    /// One past the newest.
    end: u32,
}

impl TransmitQueue {
    /// Datagrams queued.
    #[inline]
    pub(super) fn len(&self) -> usize {
        (self.end - self.head) as usize
    }

    /// A buffer for the next datagram, empty: a drained slot's, or new.
    /// Hand it back with [`TransmitQueue::push_back`] (the slot is the one
    /// `push_back` fills next).
    #[inline]
    pub(super) fn take_buffer(&mut self) -> Vec<u8> {
        match self.slots.get_mut(self.end as usize) {
            Some((_, b)) if b.capacity() > 0 => {
                let mut b = std::mem::take(b);
                b.clear();
                b
            }
            _ => Vec::with_capacity(DATAGRAM_BUFFER_BYTES),
        }
    }

    /// Test builds: whether the queue holds no slot at all (as a node's
    /// does once it hands a lent room back).
    #[cfg(test)]
    pub(super) fn holds_nothing(&self) -> bool {
        self.slots.capacity() == 0
    }

    /// Queues `bytes` for `to`, after every datagram queued.
    #[inline]
    pub(super) fn push_back(&mut self, to: SocketAddr, bytes: Vec<u8>) {
        if self.end as usize == self.slots.len() && self.head > 0 {
            self.compact();
        }
        match self.slots.get_mut(self.end as usize) {
            Some(slot) => *slot = (to, bytes),
            None => self.slots.push((to, bytes)),
        }
        self.end += 1;
    }

    /// The end of the vector reached with drained slots before the head:
    /// the queued datagrams move to the front.
    #[cold]
    fn compact(&mut self) {
        self.slots.drain(..self.head as usize);
        self.end -= self.head;
        self.head = 0;
    }

    /// Drops the oldest datagram (the queue is full), its buffer kept in
    /// its slot when it is small.
    #[inline]
    pub(super) fn drop_front(&mut self) {
        if self.head == self.end {
            // Nothing queued (a queue of at most none): as `VecDeque`.
            return;
        }
        if let Some((_, b)) = self.slots.get_mut(self.head as usize) {
            if b.capacity() > TRANSMIT_BUFFER_KEPT_BYTES {
                *b = Vec::new();
            }
        }
        self.advance();
    }

    /// The oldest datagram and its destination, taken out of the queue,
    /// which is freed once drained.
    pub(super) fn pop_front(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        if self.head == self.end {
            return None;
        }
        let (to, b) = self.slots.get_mut(self.head as usize)?;
        let out = (*to, std::mem::take(b));
        self.advance();
        if self.end == 0 {
            *self = TransmitQueue::default();
        }
        Some(out)
    }

    /// The oldest datagram, its bytes swapped into `buf` and `buf`'s old
    /// buffer kept in its slot (emptied; when small and among the first
    /// slots); the queue keeps its slots once drained (no more than
    /// [`TRANSMIT_SLOTS_KEPT_MAX`]).
    #[inline]
    pub(super) fn pop_front_into(&mut self, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        if self.head == self.end {
            return None;
        }
        let keep = (self.head as usize) < TRANSMIT_SLOTS_KEPT_MAX
            && buf.capacity() <= TRANSMIT_BUFFER_KEPT_BYTES;
        let (to, b) = self.slots.get_mut(self.head as usize)?;
        let to = *to;
        std::mem::swap(buf, b);
        if !keep {
            *b = Vec::new();
        }
        self.advance();
        Some(to)
    }

    /// Past the oldest datagram; back to the front once drained, with no
    /// more than [`TRANSMIT_SLOTS_KEPT_MAX`] slots.
    #[inline]
    fn advance(&mut self) {
        self.head += 1;
        if self.head == self.end {
            self.head = 0;
            self.end = 0;
            if self.slots.len() > TRANSMIT_SLOTS_KEPT_MAX {
                self.shrink();
            }
        }
    }

    /// Frees the slots past [`TRANSMIT_SLOTS_KEPT_MAX`] of a drained queue
    /// (after a burst).
    #[cold]
    fn shrink(&mut self) {
        self.slots.truncate(TRANSMIT_SLOTS_KEPT_MAX);
        self.slots.shrink_to(TRANSMIT_SLOTS_KEPT_MAX);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::rng::Rng;

    /// The queue holds what the `VecDeque` it replaced held, in order,
    /// whichever way it is drained, over seeded random pushes, drops of the
    /// oldest and polls (some to empty, some not); and what it keeps once
    /// drained is bounded.
    #[test]
    fn the_queue_holds_what_a_vecdeque_holds() {
        let mut rng = Rng::new(17);
        for keeping in [false, true] {
            let mut q = TransmitQueue::default();
            let mut want: VecDeque<(SocketAddr, Vec<u8>)> = VecDeque::new();
            let mut buf = Vec::new();
            let mut n = 0u32;
            for round in 0..20_000 {
                match rng.below(10) {
                    0..=5 => {
                        let to = SocketAddr::from(([10, 0, 0, 1], n as u16));
                        let mut b = q.take_buffer();
                        assert!(b.is_empty());
                        b.extend_from_slice(&n.to_be_bytes());
                        if rng.below(50) == 0 {
                            b.resize(3_000, 7);
                        }
                        want.push_back((to, b.clone()));
                        q.push_back(to, b);
                        n += 1;
                    }
                    6 => {
                        q.drop_front();
                        want.pop_front();
                    }
                    _ => {
                        for _ in 0..rng.below(8) {
                            let got = if keeping {
                                q.pop_front_into(&mut buf).map(|to| (to, buf.clone()))
                            } else {
                                q.pop_front()
                            };
                            assert_eq!(got, want.pop_front(), "round {round}");
                            if keeping {
                                buf.clear();
                            }
                        }
                    }
                }
                assert_eq!(q.len(), want.len());
                if want.is_empty() {
                    // What a drained queue keeps is bounded.
                    assert!(q.slots.len() <= TRANSMIT_SLOTS_KEPT_MAX);
                    for (_, b) in &q.slots {
                        assert!(b.capacity() <= TRANSMIT_BUFFER_KEPT_BYTES);
                    }
                }
            }
            // Drained at last.
            while let Some(to) = q.pop_front_into(&mut buf) {
                assert_eq!(Some((to, buf.clone())), want.pop_front());
            }
            assert!(want.is_empty());
            assert!(q.slots.len() <= TRANSMIT_SLOTS_KEPT_MAX);
            let _ = q.pop_front();
        }
    }

    /// The node's layout is unchanged: the queue is the size of the
    /// `VecDeque` it replaced.
    #[test]
    fn the_queue_is_the_size_of_the_vecdeque_it_replaced() {
        assert_eq!(
            std::mem::size_of::<TransmitQueue>(),
            std::mem::size_of::<VecDeque<(SocketAddr, Vec<u8>)>>()
        );
    }

    /// A queue drained by `pop_front` is freed; one drained by
    /// `pop_front_into` keeps its slots and small buffers (no more than
    /// the bound), and encodes the next datagrams into them.
    #[test]
    fn a_drained_queue_is_freed_or_kept_within_bounds() {
        let to = SocketAddr::from(([10, 0, 0, 1], 7000));
        let mut q = TransmitQueue::default();
        for _ in 0..3 {
            let b = q.take_buffer();
            q.push_back(to, b);
        }
        while q.pop_front().is_some() {}
        assert_eq!(q.slots.capacity(), 0, "freed");
        for i in 0..TRANSMIT_SLOTS_KEPT_MAX + 10 {
            let mut b = q.take_buffer();
            b.push(i as u8);
            q.push_back(to, b);
        }
        let mut buf = Vec::with_capacity(100);
        let mut big = Vec::with_capacity(TRANSMIT_BUFFER_KEPT_BYTES + 1);
        assert!(q.pop_front_into(&mut big).is_some());
        while q.pop_front_into(&mut buf).is_some() {
            buf = Vec::with_capacity(100);
        }
        assert_eq!(q.slots.len(), TRANSMIT_SLOTS_KEPT_MAX);
        assert_eq!(q.slots[0].1.capacity(), 0, "a large buffer is not kept");
        assert!(q.slots[1].1.capacity() >= 100, "a small one is");
        let ptr = q.slots[1].1.as_ptr();
        let first = q.take_buffer();
        q.push_back(to, first);
        let b = q.take_buffer();
        assert_eq!(b.as_ptr(), ptr, "the next datagram goes into a kept buffer");
    }
}
