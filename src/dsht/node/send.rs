//! Sending: the header every message carries, outstanding RPCs and the
//! transmit queue.

use std::net::SocketAddr;

use crate::dsht::id::Id;
use crate::dsht::wire::{Body, ClusterInfo, Header, Message};
use crate::time::Time;

use super::{Level, Node};

#[derive(Clone, Copy, Debug)]
pub(super) enum Purpose {
    Op(u64),
    VerifyPing,
    OldestPing {
        level: usize,
    },
    Bootstrap,
    /// Measuring a cluster's members for the cluster manager of `level`.
    ClusterProbe {
        level: Level,
        round: u32,
    },
    /// Measuring a node named by a clustering hint.
    HintPing,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    pub(super) to: SocketAddr,
    pub(super) to_id: Option<Id>,
    pub(super) sent: Time,
    pub(super) deadline: Time,
    pub(super) request_kind: u8,
    pub(super) purpose: Purpose,
}

impl Node {
    /// Our header: every message carries our cluster at each non-global
    /// level, its age and our estimate of its size (§4.3).
    pub(super) fn header(&self, route: u16, txid: u32, now: Time) -> Header {
        Header {
            route,
            txid,
            sender: self.id,
            services: self.services,
            clusters: self.our_clusters(now).collect(),
        }
    }

    /// Our cluster at each non-global level as our header carries it: its
    /// id, its age and our estimate of its size (§4.3).
    pub(super) fn our_clusters(
        &self,
        now: Time,
    ) -> impl ExactSizeIterator<Item = ClusterInfo> + '_ {
        self.levels[1..].iter().map(move |l| ClusterInfo {
            id: l.cluster.id,
            age_secs: now
                .saturating_since(l.cluster.created)
                .as_secs()
                .min(u64::from(u32::MAX)) as u32,
            size: l.size_estimate,
        })
    }

    pub(super) fn send_request(
        &mut self,
        now: Time,
        to: SocketAddr,
        to_id: Option<Id>,
        route: u16,
        body: Body,
        purpose: Purpose,
    ) -> Option<u32> {
        if self.pending.len() >= self.hot.pending_rpcs_max {
            return None;
        }
        let deadline = now + self.hot.rpc_timeout;
        let request_kind = body.kind();
        // The next id in sequence whose slot is free (`PendingRpcs`).
        let txid = self.pending.insert_next(
            self.next_txid,
            Pending {
                to,
                to_id,
                sent: now,
                deadline,
                request_kind,
                purpose,
            },
        );
        self.next_txid = txid.wrapping_add(1);
        let mut header = self.header(route, txid, now);
        if matches!(purpose, Purpose::VerifyPing) {
            // A verifying ping needs none of our clusters (its pong carries
            // the requester's): 30 bytes, so that it fits with the reply
            // within `reply_amplification_max` of even a small request.
            header.clusters.clear();
        }
        self.timers.push_rpc(deadline, txid);
        self.queue(to, Message { header, body });
        Some(txid)
    }

    fn queue(&mut self, to: SocketAddr, msg: Message) {
        let mut bytes = self.out.take_buffer();
        msg.encode(&mut bytes);
        self.queue_bytes(to, bytes);
    }

    /// A buffer to encode a datagram into, empty (a sent datagram's, or
    /// new): queue it with [`Node::queue_bytes`].
    #[inline]
    pub(super) fn datagram_buffer(&mut self) -> Vec<u8> {
        self.out.take_buffer()
    }

    #[inline]
    pub(super) fn queue_bytes(&mut self, to: SocketAddr, bytes: Vec<u8>) {
        if self.out.len() >= self.hot.transmit_queue_max {
            self.out.drop_front();
            self.stats.transmit_dropped += 1;
        }
        self.out.push_back(to, bytes);
    }
}
