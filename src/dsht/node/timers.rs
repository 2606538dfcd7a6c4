//! The node's timers: the deadline heap beside a FIFO of RPC deadlines, and
//! [`Node::handle_timeout`], which fires what is due.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::time::Time;

use super::Node;

impl Node {
    /// Handles every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some((_, timer)) = self.timers.pop_due(now) {
            match timer {
                Timer::Rpc(txid) => {
                    if self.pending.get(txid).is_some_and(|p| p.deadline <= now) {
                        let p = self.pending.remove(txid).expect("checked");
                        self.on_rpc_failed(now, txid, p);
                    }
                }
                Timer::Op(op) => {
                    if self.ops.contains_key(&op) {
                        self.drive(op, now);
                    }
                }
                Timer::Maintenance => self.maintain(now),
                Timer::ClusterEval { periodic } => {
                    if periodic {
                        let next = now + self.config.cluster_eval();
                        self.timers
                            .push(next, Timer::ClusterEval { periodic: true });
                    }
                    self.evaluate_clusters(now);
                }
                Timer::HintRenew => {
                    self.hints_renewing = false;
                    self.store_hints(now);
                }
            }
        }
        self.prune_timers();
    }

    /// The next time `handle_timeout` has work (None: nothing scheduled).
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.next()
    }

    /// Drops timers at the front that can no longer do anything (RPCs
    /// answered, operations finished), so that `poll_timeout` does not wake
    /// the driver for nothing. Timers further back go when they reach the front.
    pub(super) fn prune_timers(&mut self) {
        while let Some(&(at, txid)) = self.timers.rpc.front() {
            if self.pending.live_until(txid, at) {
                break;
            }
            self.timers.rpc.pop_front();
        }
        while let Some(&Reverse((at, timer))) = self.timers.heap.peek() {
            let live = match timer {
                Timer::Rpc(txid) => self.pending.live_until(txid, at),
                Timer::Op(op) => self.ops.contains_key(&op),
                Timer::Maintenance | Timer::ClusterEval { .. } | Timer::HintRenew => true,
            };
            if live {
                break;
            }
            self.timers.heap.pop();
        }
        self.timers.update_next();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    Rpc(u32),
    Op(u64),
    Maintenance,
    /// Reconsider clusters (§4.4); a periodic one re-arms itself.
    ClusterEval {
        periodic: bool,
    },
    /// Store the clustering hints again before their TTL runs out.
    HintRenew,
}

/// The node's timers: a heap, and the RPC deadlines in a FIFO beside it.
/// The earliest of both is kept in `next`, so that [`Node::poll_timeout`],
/// which the driver calls after every input, reads one field of the node
/// instead of the fronts of two structures that most inputs leave untouched
/// (two cold cache lines per call in the simulator).
#[derive(Default)]
#[repr(C)]
pub(super) struct Timers {
    /// The earliest deadline in `heap` and `rpc` (first: it is read the most).
    pub(super) next: Option<Time>,
    pub(super) heap: BinaryHeap<Reverse<(Time, Timer)>>,
    /// RPC deadlines in the order the RPCs went out. Every RPC has the same
    /// timeout, so this is sorted by deadline: a FIFO, not a heap. Bounded by
    /// the RPCs sent in one `rpc_timeout_ms` (answered ones are dropped from
    /// the front as soon as they get there).
    pub(super) rpc: VecDeque<(Time, u32)>,
}

impl Timers {
    pub(super) fn next(&self) -> Option<Time> {
        self.next
    }

    pub(super) fn push(&mut self, at: Time, timer: Timer) {
        self.heap.push(Reverse((at, timer)));
        self.next = Some(self.next.map_or(at, |n| n.min(at)));
    }

    /// Arms the deadline of RPC `txid`.
    pub(super) fn push_rpc(&mut self, at: Time, txid: u32) {
        if self.rpc.back().is_none_or(|&(last, _)| last <= at) {
            self.rpc.push_back((at, txid));
            self.next = Some(self.next.map_or(at, |n| n.min(at)));
        } else {
            // `now` went backwards: keep the FIFO sorted.
            self.push(at, Timer::Rpc(txid));
        }
    }

    /// Removes and returns the earliest timer if it is due at `now`: the
    /// earlier of the heap's next timer and the oldest RPC deadline (ties in
    /// the heap's order: RPCs first).
    pub(super) fn pop_due(&mut self, now: Time) -> Option<(Time, Timer)> {
        let heap = self.heap.peek().map(|&Reverse(t)| t);
        let fifo = self.rpc.front().map(|&(at, txid)| (at, Timer::Rpc(txid)));
        let (at, timer) = match (heap, fifo) {
            (Some(h), Some(f)) if f <= h => f,
            (Some(h), _) => h,
            (None, Some(f)) => f,
            (None, None) => return None,
        };
        if at > now {
            return None;
        }
        if fifo == Some((at, timer)) {
            self.rpc.pop_front();
        } else {
            self.heap.pop();
        }
        self.update_next();
        Some((at, timer))
    }

    /// Shrinks the heap and the RPC FIFO where they hold over four times
    /// their timers and more than `min` (see `Node::release_idle_capacity`).
    pub(super) fn release_idle_capacity(&mut self, min: usize) {
        if self.heap.capacity() > min && self.heap.capacity() > 4 * self.heap.len() {
            self.heap.shrink_to(2 * self.heap.len());
        }
        if self.rpc.capacity() > min && self.rpc.capacity() > 4 * self.rpc.len() {
            self.rpc.shrink_to(2 * self.rpc.len());
        }
    }

    /// Sets `next` again after timers were removed.
    pub(super) fn update_next(&mut self) {
        let heap = self.heap.peek().map(|Reverse((t, _))| *t);
        let fifo = self.rpc.front().map(|&(t, _)| t);
        self.next = match (heap, fifo) {
            (Some(h), Some(f)) => Some(h.min(f)),
            (h, f) => h.or(f),
        };
    }
}
