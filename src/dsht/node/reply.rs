//! Replies and failures: matching a reply to its RPC, learning the contacts
//! it carries, and feeding it to the operation or the cluster probe that
//! sent the RPC.

use std::net::SocketAddr;

use crate::dsht::limits::LEARNED_CONTACTS_MAX;
use crate::dsht::lookup::ProbeReply;
use crate::dsht::routing::Insert;
use crate::dsht::store::ProbeState;
use crate::dsht::wire::{kind, Body, Contact, Header, Message, Values};
use crate::time::{Duration, Time};

use super::ops::{OpKind, Phase};
use super::send::{Pending, Purpose};
use super::timers::Timer;
use super::{Dropped, Level, Node, StoredAt};

impl Node {
    pub(super) fn on_reply(
        &mut self,
        now: Time,
        from: SocketAddr,
        msg: Message,
    ) -> Result<(), Dropped> {
        let txid = msg.header.txid;
        let Some(p) = self.pending.get(txid).copied() else {
            self.stats.unexpected_replies += 1;
            return Err(Dropped::Unexpected);
        };
        // A node that does not admit answers a Hello as a ping.
        let kind_matches = msg.body.kind() == p.request_kind | kind::REPLY
            || msg.body.kind() == kind::ERROR
            || (p.request_kind == kind::HELLO && msg.body.kind() == kind::PING | kind::REPLY);
        if p.to != from || !kind_matches || p.to_id.is_some_and(|id| id != msg.header.sender) {
            self.stats.unexpected_replies += 1;
            return Err(Dropped::Unexpected);
        }
        self.pending.remove(txid);
        let tag = self.answered.tag(from, &msg.header.sender);
        self.answered.insert(tag);
        let rtt = now.saturating_since(p.sent);
        let contact = Contact {
            id: msg.header.sender,
            addr: from,
            services: msg.header.services,
        };
        // A node measured because a hint named it was chosen for being near
        // us: it must not tilt the sample by which clusters are judged.
        let located = matches!(p.purpose, Purpose::HintPing);
        if let Body::HelloReply { identity } = &msg.body {
            self.on_hello_reply(now, from, &contact.id, identity);
        }
        self.observe_verified(now, contact, &msg.header, rtt, located);
        match p.purpose {
            Purpose::VerifyPing => {
                self.verify_pings_in_flight = self.verify_pings_in_flight.saturating_sub(1);
                self.pinged.set_answered(&from);
            }
            Purpose::OldestPing { level } => {
                self.levels[level].table.on_oldest_alive(&contact.id, now)
            }
            Purpose::Bootstrap => {
                // Seed every level's table with a lookup for our own id.
                for level in 0..self.levels.len() {
                    self.refresh(now, self.id, level as Level);
                }
                if !self.joined {
                    self.joined = true;
                    self.store_hints(now);
                    self.lookup_hints(now);
                    if self.hot.cluster_manage && !self.managers.is_empty() {
                        // The join decision (§4.4), once the first lookups
                        // and hint gets have measured some nodes.
                        let at = now + Duration::from_secs(self.config.cluster_join_eval_secs);
                        self.timers.push(at, Timer::ClusterEval { periodic: false });
                    }
                }
            }
            Purpose::HintPing => {}
            Purpose::ClusterProbe { level, round } => {
                let contacts: &[Contact] = match &msg.body {
                    Body::MembersReply { contacts, .. } => contacts,
                    _ => &[],
                };
                let info = msg.header.clusters.get(level as usize - 1);
                let mut out = Vec::new();
                self.managers[level as usize - 1].on_probe_reply(
                    now,
                    round,
                    contact,
                    info,
                    rtt,
                    contacts,
                    &self.config,
                    &mut self.rng,
                    &mut out,
                );
                self.run_cluster_commands(now, level, out);
            }
            Purpose::Op(op) => self.on_op_reply(op, now, txid, contact, msg.body),
        }
        Ok(())
    }

    /// A node answered us: it enters (or is refreshed in) the table of every
    /// level where it shares our cluster, and leaves those where it does not.
    fn observe_verified(
        &mut self,
        now: Time,
        contact: Contact,
        header: &Header,
        rtt: Duration,
        located: bool,
    ) {
        if !self.admits(contact.addr, &contact.id) {
            // Answered, but not (yet) found admitted: it neither enters a
            // table nor counts in a cluster's measurements until its
            // identity verifies.
            self.request_identity(now, contact);
            return;
        }
        if self.hot.cluster_manage {
            // Every reply measures a node: its clusters, their size and age,
            // and the round trip (§4.4).
            for (i, m) in self.managers.iter_mut().enumerate() {
                let current = self.levels[i + 1].cluster.id;
                m.observe(
                    now,
                    contact,
                    header.clusters.get(i),
                    rtt,
                    located,
                    current,
                    &self.config,
                );
            }
        }
        for level in 0..self.levels.len() {
            if self.shares_cluster(header, level) {
                if level > 0 {
                    self.observe_member(now, level, &contact, rtt);
                }
                let inserted = self.levels[level].table.insert(contact, now, Some(rtt));
                if inserted == Insert::Added {
                    self.push_learned(level as Level, contact, rtt);
                }
                if let Insert::PingOldest(oldest) = inserted {
                    self.send_request(
                        now,
                        oldest.addr,
                        Some(oldest.id),
                        self.route_hint,
                        Body::Ping,
                        Purpose::OldestPing { level },
                    );
                }
            } else {
                self.levels[level].table.remove(&contact.id);
                self.levels[level].members.remove(&contact.addr);
            }
        }
    }

    pub(super) fn push_learned(&mut self, level: Level, contact: Contact, rtt: Duration) {
        if self.learned.len() >= LEARNED_CONTACTS_MAX {
            self.learned.pop_front();
        }
        self.learned.push_back((level, contact, rtt));
    }

    pub(super) fn on_rpc_failed(&mut self, now: Time, txid: u32, p: Pending) {
        self.stats.rpc_timeouts += 1;
        if let Some(id) = p.to_id {
            let mut removed = false;
            for l in &mut self.levels {
                removed |= l.table.on_failure(&id);
            }
            if removed {
                // Dropped as dead: if it was restarted at its address, it
                // is pinged back in at its next request, not held out for
                // the rest of the minute by our last ping of it (which it
                // answered, before it died). One ping per removal, and a
                // removal needs our own RPCs to fail.
                self.pinged.remove(&p.to);
            }
        }
        match p.purpose {
            Purpose::VerifyPing => {
                self.verify_pings_in_flight = self.verify_pings_in_flight.saturating_sub(1)
            }
            Purpose::OldestPing { .. } | Purpose::Bootstrap | Purpose::HintPing => {}
            Purpose::ClusterProbe { level, round } => {
                let mut out = Vec::new();
                self.managers[level as usize - 1].on_probe_failed(
                    now,
                    round,
                    &self.config,
                    &mut self.rng,
                    &mut out,
                );
                self.run_cluster_commands(now, level, out);
            }
            Purpose::Op(op) => {
                if let Some(o) = self.ops.get_mut(&op) {
                    match &mut o.phase {
                        Phase::Walk(l) | Phase::Forward { lookup: l, .. } => {
                            if let Some(id) = p.to_id {
                                l.on_failure(&id);
                            }
                        }
                        Phase::Reverse { waiting, .. } => {
                            if *waiting == Some(txid) {
                                *waiting = None;
                            }
                        }
                    }
                    self.drive(op, now);
                }
            }
        }
    }

    fn on_op_reply(&mut self, op: u64, now: Time, txid: u32, from: Contact, body: Body) {
        let Some(mut o) = self.ops.remove(&op) else {
            return;
        };
        let mut found: Option<Values> = None;
        let ttl_secs = o.ttl_secs;
        let l_max = self.hot.values_per_key_max;
        // A claim walks to the closest node whatever the load on the way.
        let claiming = o.kind.goes_to_closest();
        match (&mut o.phase, body) {
            (
                Phase::Walk(lookup),
                Body::GetReply {
                    values, contacts, ..
                },
            ) => {
                if values.is_empty() {
                    lookup.on_answer(&from.id, None, &contacts);
                } else {
                    lookup.on_answer(&from.id, None, &[]);
                    found = Some(values);
                }
            }
            (Phase::Walk(lookup), Body::Nodes { contacts, .. }) => {
                lookup.on_answer(&from.id, None, &contacts);
            }
            (
                Phase::Forward { lookup, .. },
                Body::PutProbeReply {
                    loaded,
                    stay_mins,
                    value_count,
                    min_ttl_secs,
                    token,
                    contacts,
                    ..
                },
            ) => {
                let state = ProbeState {
                    loaded,
                    value_count,
                    min_ttl_secs,
                    stay_mins,
                };
                let full = state.is_full(l_max, ttl_secs);
                let probe = ProbeReply {
                    full_and_loaded: !claiming && loaded && full,
                    loaded: !claiming && loaded,
                    full: !claiming && full,
                    token,
                    holds: value_count > 0,
                };
                if probe.full_and_loaded {
                    let jitter = self.rng.next_u64();
                    self.recall.remember(
                        o.key,
                        o.level,
                        from.id,
                        min_ttl_secs,
                        now,
                        jitter,
                        stay_mins,
                    );
                } else if probe.loaded {
                    // Loaded but able to take the value: the walk stores
                    // there (rule 4), and the next ones stop before it for
                    // the stay it asks (at least the paper's minute). A node
                    // held under l values by the per-source quota is never
                    // full: at 100,000 nodes three senders stored at one
                    // such node every second, 360 put RPCs a minute.
                    let jitter = self.rng.next_u64();
                    self.recall
                        .remember_loaded(o.key, o.level, from.id, now, jitter, stay_mins);
                } else if !claiming && !self.recall.is_empty() {
                    // No longer full and loaded: a later answer that is
                    // starts its recall over at a minute.
                    self.recall.forget(&o.key, o.level, &from.id);
                }
                lookup.on_answer(&from.id, Some(probe), &contacts);
            }
            (
                Phase::Reverse {
                    waiting, at_holder, ..
                },
                Body::StoreReply { stored, values, .. },
            ) if *waiting == Some(txid) => {
                *waiting = None;
                let holder = std::mem::take(at_holder);
                if o.kind == OpKind::Claim && stored && holder {
                    // The holder held only our own value (now refreshed):
                    // on to the closest node.
                } else if o.kind == OpKind::Claim && (stored || !values.is_empty()) {
                    self.finish_claim(op, o, now, stored, values);
                    return;
                } else if o.kind == OpKind::Pin && stored {
                    self.finish_claim(op, o, now, true, Values::new());
                    return;
                }
                if stored && !o.kind.goes_to_closest() {
                    self.ops.insert(op, o);
                    self.finish_put_level(op, now, Some(StoredAt::Remote(from)));
                    return;
                }
            }
            (Phase::Reverse { waiting, .. }, Body::Error { .. }) if *waiting == Some(txid) => {
                *waiting = None;
            }
            (Phase::Walk(lookup) | Phase::Forward { lookup, .. }, _) => {
                // An error (wrong cluster, overloaded) or a reply of the wrong shape.
                lookup.on_failure(&from.id);
            }
            _ => {}
        }
        o.hops += 1;
        if let Some(values) = found {
            let level = o.level;
            self.finish_get(
                op,
                o.key,
                o.started,
                now,
                values,
                Some(level),
                false,
                None,
                o.hops,
            );
            return;
        }
        self.ops.insert(op, o);
        self.drive(op, now);
    }
}
