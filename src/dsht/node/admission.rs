//! Admission (issue 22; SECURITY.md, "Threat model"): with an identity set
//! ([`Node::set_identity`]), a contact enters a routing table only once its
//! identity — key, network certificate, and its signature binding them to
//! the contact's address and node id — was verified. Each peer is verified
//! once: its pings are Hellos that carry identities both ways, and the
//! verdict is cached per (address, id) in the node's [`Verifier`]; a reply
//! from a contact not yet admitted costs a cache probe, never a signature
//! check.

use std::net::SocketAddr;

use crate::dsht::id::Id;
use crate::dsht::wire::{Body, Contact, Identity};
use crate::identity::{LocalIdentity, Verifier, VerifyStats};
use crate::time::Time;

use super::pinged::Pinged;
use super::send::Purpose;
use super::Node;

/// This node's identity as Hello carries it, and its verdicts on others'.
pub(super) struct Admission {
    identity: Box<Identity>,
    verifier: Verifier,
}

impl Node {
    /// Makes this node an admitting one: it carries `identity` on every
    /// ping (as a Hello), and admits to its routing tables only the
    /// contacts whose identity `verifier` accepts.
    pub fn set_identity(&mut self, identity: &LocalIdentity, verifier: Verifier) {
        let blob = identity.identity(self.addr, &self.id);
        self.admission = Some(Box::new(Admission {
            identity: Box::new(blob),
            verifier,
        }));
    }

    /// Counters of identity verification (`None`: not an admitting node).
    pub fn identity_stats(&self) -> Option<VerifyStats> {
        self.admission.as_ref().map(|a| a.verifier.stats())
    }

    /// Whether `contact` may enter a routing table: always without
    /// admission; else if its identity was verified (a cache probe).
    pub(super) fn admits(&self, addr: SocketAddr, id: &Id) -> bool {
        self.admission
            .as_ref()
            .is_none_or(|a| a.verifier.is_admitted(addr, id))
    }

    /// What this node pings with: a Hello carrying its identity where it
    /// admits, else a plain ping.
    pub(super) fn ping_body(&self) -> Body {
        match &self.admission {
            Some(a) => Body::Hello {
                identity: a.identity.clone(),
            },
            None => Body::Ping,
        }
    }

    /// This node's reply to a Hello, after checking the sender's identity
    /// (a request's source can be forged, but the identity is signed for
    /// the source's address and id: a replay elsewhere fails).
    pub(super) fn answer_hello(
        &mut self,
        now: Time,
        from: SocketAddr,
        sender: &Id,
        identity: &Identity,
    ) -> Body {
        self.stats.pings_served += 1;
        match &mut self.admission {
            Some(a) => {
                a.verifier.check_identity(now, identity, from, sender);
                Body::HelloReply {
                    identity: a.identity.clone(),
                }
            }
            // Not an admitting node: answered as a ping is (the reply's kind
            // tells the sender no identity came).
            None => Body::Pong,
        }
    }

    /// A Hello's reply carries the identity of the node that answered.
    pub(super) fn on_hello_reply(
        &mut self,
        now: Time,
        from: SocketAddr,
        sender: &Id,
        identity: &Identity,
    ) {
        if let Some(a) = &mut self.admission {
            a.verifier.check_identity(now, identity, from, sender);
        }
    }

    /// A contact not yet admitted answered us or was named to us: ask it
    /// for its identity (a Hello, at most once a minute per address and
    /// within the verification pings' limit). It enters the tables when
    /// its reply verifies.
    pub(super) fn request_identity(&mut self, now: Time, contact: Contact) {
        if self.admission.is_none()
            || self.verify_pings_in_flight >= self.hot.verify_pings_max
            || self
                .pinged
                .get(&contact.addr)
                .is_some_and(|p| p.recent(now))
        {
            return;
        }
        if self.pinged.len() >= self.hot.verify_pings_max * 16 {
            self.pinged.retain_recent(now);
        }
        self.pinged.insert(contact.addr, Pinged::new(now));
        self.verify_pings_in_flight += 1;
        let body = self.ping_body();
        self.send_request(
            now,
            contact.addr,
            Some(contact.id),
            self.route_hint,
            body,
            Purpose::VerifyPing,
        );
    }

    /// A contact another core verified: this core's verifier admits it too.
    pub(super) fn mark_admitted(&mut self, addr: SocketAddr, id: &Id) {
        if let Some(a) = &mut self.admission {
            a.verifier.mark_admitted(addr, id);
        }
    }
}

#[cfg(test)]
mod tests {
    use smallvec::smallvec;

    use super::*;
    use crate::config::Config;
    use crate::identity::{KeyPair, Membership};
    use crate::time::Duration;

    fn node(i: u8, network: &KeyPair, trusted: &KeyPair) -> Node {
        let addr = SocketAddr::from(([10, 0, 0, i], 7000));
        let mut n = Node::new(Config::default(), addr, Time::ZERO, u64::from(i)).unwrap();
        let key = KeyPair::from_secret(&[i; 32]);
        let cert = network.certify(&key.public());
        let membership = Membership::Admitted(smallvec![trusted.public()]);
        n.set_identity(
            &LocalIdentity::new(key, cert),
            Verifier::new(membership, &[i]),
        );
        n
    }

    /// Delivers every datagram until none is left (or a bound is reached),
    /// advancing the clock.
    fn run(nodes: &mut [Node], secs: u64) {
        let mut buf = Vec::new();
        let mut now = Time::ZERO;
        for _ in 0..secs * 10 {
            now = now + Duration::from_millis(100);
            for i in 0..nodes.len() {
                nodes[i].handle_timeout(now);
                while let Some(to) = nodes[i].poll_transmit(&mut buf) {
                    let from = nodes[i].addr();
                    if let Some(j) = nodes.iter().position(|n| n.addr() == to) {
                        let _ = nodes[j].handle(now, from, &buf);
                    }
                }
                while nodes[i].poll_event().is_some() {}
            }
        }
    }

    fn knows(n: &Node, other: &Node) -> bool {
        n.routing_table(0)
            .unwrap()
            .contains(&other.id(), other.addr())
    }

    #[test]
    fn only_admitted_contacts_enter_the_routing_tables() {
        let (net, other_net) = (
            KeyPair::from_secret(&[100; 32]),
            KeyPair::from_secret(&[101; 32]),
        );
        // a, b, c are admitted by `net`; d carries a certificate of another
        // network (it trusts only its own) and bootstraps into a's.
        let mut nodes = vec![
            node(1, &net, &net),
            node(2, &net, &net),
            node(3, &net, &net),
            node(4, &other_net, &other_net),
        ];
        let first = nodes[0].addr();
        for n in nodes.iter_mut().skip(1) {
            n.bootstrap(Time::ZERO, &[first]);
        }
        run(&mut nodes, 20);
        let (a, b, c, d) = (&nodes[0], &nodes[1], &nodes[2], &nodes[3]);
        assert!(knows(a, b) && knows(a, c) && knows(b, a) && knows(c, a));
        assert!(
            knows(b, c) && knows(c, b),
            "b and c find each other through a"
        );
        for n in [a, b, c] {
            assert!(!knows(n, d), "{} admitted the stranger", n.addr());
        }
        assert!(
            !knows(d, a),
            "the stranger admitted a node of another network"
        );
        assert!(a.identity_stats().unwrap().rejected >= 1);
        // Verified once per peer, not per RPC.
        assert!(a.identity_stats().unwrap().accepted <= 3);
    }
}
