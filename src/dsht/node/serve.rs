//! Serving requests: who may be served at which level (§4.3, SECURITY.md),
//! and the answers to ping, find, get, put and claim.

use std::net::SocketAddr;

use crate::dsht::id::{Id, Key};
use crate::dsht::store::{ProbeState, Source, StoreOutcome, ValueRefs};
use crate::dsht::wire::{
    self, Body, Contact, Contacts, ErrorCode, Header, Message, Token, Value, Values,
};
use crate::time::{Duration, Time};

use super::pinged::Pinged;
use super::send::Purpose;
use super::{Node, MEMBER_FORGET};

impl Node {
    /// Serves one request: answers it (if it is one this node answers), and
    /// sends the reply within the amplification budget of an unverified
    /// source.
    pub(super) fn on_request(
        &mut self,
        now: Time,
        from: SocketAddr,
        msg: &Message,
        request_bytes: usize,
        verified: bool,
    ) {
        if verified && self.answer_get(now, from, msg) {
            return;
        }
        self.answer_and_reply(now, from, msg, request_bytes, verified);
    }

    /// Answers a request the general way: its reply built as a `Body`,
    /// then encoded and sent (trimmed for an unverified source).
    fn answer_and_reply(
        &mut self,
        now: Time,
        from: SocketAddr,
        msg: &Message,
        request_bytes: usize,
        verified: bool,
    ) {
        // Replies are handled in on_reply.
        let Some(mut reply) = self.answer(now, from, &msg.header, &msg.body) else {
            return;
        };
        self.send_reply(now, from, &msg.header, &mut reply, request_bytes, verified);
    }

    /// A get from a verified source at a level it may be served at (the
    /// bulk of a busy node's requests), answered with its reply written
    /// straight into bytes: the same steps, in the same order, and the same
    /// bytes as `answer` and `send_reply` (no trimming for a verified
    /// source), without building, moving and dropping a `GetReply` body
    /// (issue 27). False (nothing done) for anything else.
    fn answer_get(&mut self, now: Time, from: SocketAddr, msg: &Message) -> bool {
        let Body::Get { level, key, target } = msg.body else {
            return false;
        };
        let Ok(l) = self.served_level(&msg.header, from, level) else {
            return false;
        };
        self.stats.gets_served += 1;
        let mut bytes = self.datagram_buffer();
        {
            // The values by reference: written into the reply from the store.
            let mut values = ValueRefs::new();
            self.levels[l].store.get_refs(
                &key,
                now,
                self.hot.get_values_max,
                &mut self.rng,
                &mut values,
            );
            let contacts = if values.is_empty() {
                self.closest_for_reply(l, &target, &msg.header.sender)
            } else {
                Contacts::new()
            };
            wire::put_header(
                &mut bytes,
                wire::kind::GET | wire::kind::REPLY,
                msg.header.route,
                msg.header.txid,
                &self.id,
                self.services,
                self.our_clusters(now),
            );
            wire::put_get_reply(&mut bytes, level, &values, &contacts);
        }
        self.queue_bytes(from, bytes);
        self.observe_requester(now, from, &msg.header, true);
        true
    }

    /// The level `level` of a request from `from` may be served at: one this
    /// node has, whose cluster the sender shares and is known first-hand to
    /// belong to (§4.3).
    fn served_level(
        &self,
        header: &Header,
        from: SocketAddr,
        level: u8,
    ) -> Result<usize, ErrorCode> {
        let l = level as usize;
        if l >= self.levels.len() {
            return Err(ErrorCode::NoSuchLevel);
        }
        if !self.shares_cluster(header, l) || !self.is_member(l, &header.sender, from) {
            return Err(ErrorCode::WrongCluster);
        }
        Ok(l)
    }

    /// The reply to request `body`, or `None` for a body that is not a request.
    fn answer(
        &mut self,
        now: Time,
        from: SocketAddr,
        header: &Header,
        body: &Body,
    ) -> Option<Body> {
        let reply = match *body {
            Body::Ping => {
                self.stats.pings_served += 1;
                Body::Pong
            }
            Body::Hello { ref identity } => self.answer_hello(now, from, &header.sender, identity),
            Body::FindNode { level, target } => match self.served_level(header, from, level) {
                Ok(l) => {
                    self.stats.find_nodes_served += 1;
                    Body::Nodes {
                        level,
                        contacts: self.closest_for_reply(l, &target, &header.sender),
                    }
                }
                Err(code) => self.refuse(code),
            },
            // Served whatever the sender's cluster: a node validating our
            // cluster as a candidate asks for members to measure (§4.4).
            Body::Members { level, target } if (level as usize) < self.levels.len() => {
                self.serve_members(from, header, level, &target)
            }
            Body::Members { .. } => self.refuse(ErrorCode::NoSuchLevel),
            Body::Get { level, key, target } => match self.served_level(header, from, level) {
                Ok(l) => {
                    self.stats.gets_served += 1;
                    let values =
                        self.levels[l]
                            .store
                            .get(&key, now, self.hot.get_values_max, &mut self.rng);
                    let contacts = if values.is_empty() {
                        self.closest_for_reply(l, &target, &header.sender)
                    } else {
                        Contacts::new()
                    };
                    Body::GetReply {
                        level,
                        values,
                        contacts,
                    }
                }
                Err(code) => self.refuse(code),
            },
            Body::PutProbe { level, key, target } => match self.served_level(header, from, level) {
                Ok(l) => {
                    self.stats.put_probes_received += 1;
                    let ProbeState {
                        loaded,
                        value_count,
                        min_ttl_secs,
                        stay_mins,
                    } = self.levels[l].store.probe(&key, now);
                    Body::PutProbeReply {
                        level,
                        loaded,
                        stay_mins,
                        value_count,
                        min_ttl_secs,
                        token: self.token_for(now, from),
                        contacts: self.closest_for_reply(l, &target, &header.sender),
                    }
                }
                Err(code) => self.refuse(code),
            },
            Body::Store {
                level,
                key,
                ttl_secs,
                if_absent,
                token,
                ref value,
            } => match self.served_level(header, from, level) {
                Ok(l) => {
                    let store = StoreRequest {
                        level,
                        key,
                        ttl_secs,
                        if_absent,
                        token,
                        value: value.clone(),
                    };
                    self.serve_store(now, from, l, store)
                }
                Err(code) => self.refuse(code),
            },
            _ => return None,
        };
        Some(reply)
    }

    /// Members of our cluster at `level` near `target`, for a node that
    /// validates that cluster (§4.4).
    fn serve_members(&mut self, from: SocketAddr, header: &Header, level: u8, target: &Id) -> Body {
        self.stats.members_served += 1;
        // A sender that has answered our ping (it is in our table)
        // gets up to the validation sample; anyone else no more
        // than a find-node reply, so that a forged source address
        // cannot make us a reflector of large replies.
        let verified = self.levels[0].table.contains(&header.sender, from);
        let count = if verified {
            self.config.cluster_validate_probes.min(wire::CONTACTS_MAX)
        } else {
            self.hot.reply_contacts_max
        };
        let mut contacts = Contacts::new();
        contacts.extend(
            self.levels[level as usize]
                .table
                .closest_matching(target, count, |id| *id != header.sender),
        );
        Body::MembersReply { level, contacts }
    }

    /// A store (or claim, `if_absent`) at level index `l` from `from` (§4.2):
    /// refused without a valid token or for a value naming another address;
    /// a claim that finds values returns them.
    fn serve_store(&mut self, now: Time, from: SocketAddr, l: usize, req: StoreRequest) -> Body {
        let StoreRequest {
            level,
            key,
            ttl_secs,
            if_absent,
            token,
            value,
        } = req;
        self.stats.stores_received += 1;
        if !self.token_is_valid(now, from, &token) {
            self.stats.bad_token += 1;
            Body::Error {
                code: ErrorCode::BadToken,
            }
        } else if value.0.len() > self.hot.value_bytes_max
            || crate::identity::named_addr(&value).is_some_and(|a| a.ip() != from.ip())
        {
            // A value naming an address must name the storer's
            // own (§3.2: proxies insert pointers to themselves,
            // hints point to the storing node): no pointers to
            // a victim.
            self.stats.stores_refused += 1;
            Body::StoreReply {
                level,
                stored: false,
                values: Values::new(),
            }
        } else if if_absent
            && self.levels[l]
                .store
                .holds_other_than(&key, now, self.source_of(from))
        {
            // Test-and-set lost: here is who got there first. (The
            // claimer's own value is no one else's: a claim refreshes it.)
            let values =
                self.levels[l]
                    .store
                    .get(&key, now, self.hot.get_values_max, &mut self.rng);
            Body::StoreReply {
                level,
                stored: false,
                values,
            }
        } else {
            let ttl = Duration::from_secs(u64::from(ttl_secs.min(self.hot.ttl_max_secs)));
            let source = self.source_of(from);
            let outcome = self.levels[l]
                .store
                .store_from(&key, value, ttl, now, source);
            self.stats.stores_accepted += u64::from(outcome.is_stored());
            self.stats.stores_refused += u64::from(matches!(outcome, StoreOutcome::OverQuota));
            Body::StoreReply {
                level,
                stored: outcome.is_stored(),
                values: Values::new(),
            }
        }
    }

    /// Whose values a store from `from` makes: its address, or only its IP
    /// where the IP names a node.
    fn source_of(&self, from: SocketAddr) -> Source {
        if self.hot.id_includes_port {
            Source::Remote(from)
        } else {
            Source::Remote(SocketAddr::new(from.ip(), 0))
        }
    }

    /// Sends `reply` to the request `header` from `from`. A source that has
    /// not answered our ping may have been forged: what we send it (the
    /// reply, and any verifying ping) is at most `reply_amplification_max`
    /// times its request of `request_bytes`.
    ///
    /// Our header is written straight from our state (the bytes of
    /// `self.header(..)` encoded, without building it: issue 27).
    fn send_reply(
        &mut self,
        now: Time,
        from: SocketAddr,
        header: &Header,
        reply: &mut Body,
        request_bytes: usize,
        verified: bool,
    ) {
        let mut bytes = self.datagram_buffer();
        wire::put_header(
            &mut bytes,
            reply.kind(),
            header.route,
            header.txid,
            &self.id,
            self.services,
            self.our_clusters(now),
        );
        let header_bytes = bytes.len();
        reply.encode(&mut bytes);
        // The verifying ping comes first: once the source answers it, it
        // is served in full.
        let mut ping = verified;
        if !verified {
            let full = request_bytes.saturating_mul(self.hot.reply_amplification_max);
            let wanted = self.verify_wanted(now, from, header, false);
            let budget = if wanted {
                full.saturating_sub(wire::HEADER_FIXED_BYTES)
            } else {
                full
            };
            if bytes.len() > budget {
                trim_reply(reply, bytes.len() - budget);
                self.stats.replies_trimmed += 1;
                bytes.truncate(header_bytes);
                reply.encode(&mut bytes);
            }
            ping = wanted && bytes.len() + wire::HEADER_FIXED_BYTES <= full;
        }
        self.queue_bytes(from, bytes);
        if ping {
            self.observe_requester(now, from, header, verified);
        }
    }

    /// Whether the node at `from` claiming `sender` has answered one of our
    /// RPCs from that address.
    pub(super) fn has_answered(&self, sender: &Id, from: SocketAddr) -> bool {
        self.levels[0].table.contains(sender, from)
            || self.answered.contains(self.answered.tag(from, sender))
    }

    /// Whether `sender` at `from` is known first-hand to be in our cluster
    /// at `level` (§4.3): it is in that level's table, which it entered by
    /// answering our RPC with our cluster in its header, and its measured
    /// RTT is within the level's threshold. A cluster id copied into a
    /// header is not enough.
    fn is_member(&self, level: usize, sender: &Id, from: SocketAddr) -> bool {
        if level == 0 {
            return true;
        }
        self.levels[level]
            .members
            .get(&from)
            .is_some_and(|(id, _)| id == sender)
    }

    /// Records that `contact` answered us with our cluster at `level` in its
    /// header, `rtt` after we asked.
    pub(super) fn observe_member(
        &mut self,
        now: Time,
        level: usize,
        contact: &Contact,
        rtt: Duration,
    ) {
        let max = self.config.cluster_members_known_max;
        let l = &mut self.levels[level];
        if rtt.as_micros() > u64::from(l.threshold_ms) * 1000 {
            return;
        }
        if l.members.len() >= max && !l.members.contains_key(&contact.addr) {
            // Forget those not heard from in an hour; if none, no room.
            l.members
                .retain(|_, (_, t)| now.saturating_since(*t) < MEMBER_FORGET);
            if l.members.len() >= max {
                return;
            }
        }
        l.members.insert(contact.addr, (contact.id, now));
    }

    fn refuse(&mut self, code: ErrorCode) -> Body {
        if code == ErrorCode::WrongCluster {
            self.stats.wrong_cluster += 1;
        }
        Body::Error { code }
    }

    fn closest_for_reply(&self, level: usize, target: &Id, requester: &Id) -> Contacts {
        // Takes over the vector's buffer: no second allocation, no copy.
        Contacts::from_vec(self.levels[level].table.closest_matching(
            target,
            self.hot.reply_contacts_max,
            |id| id != requester,
        ))
    }

    /// Whether the sender of `header` is in our cluster at `level` (level 0: always).
    pub(super) fn shares_cluster(&self, header: &Header, level: usize) -> bool {
        level == 0
            || header
                .clusters
                .get(level - 1)
                .is_some_and(|c| c.id == self.levels[level].cluster.id)
    }

    pub(super) fn sender_is_bound(&mut self, sender: &Id, from: SocketAddr) -> bool {
        if !self.hot.require_id_binding {
            return true;
        }
        // A sender on this node's own IP (IP and port where ids include the
        // port) is bound exactly when it claims this node's id, which is
        // that hash: no table, no cache, no SHA-1 for a local proxy's
        // requests (issue 27; any other claim goes the usual way below,
        // and is refused there).
        let own_address = if self.hot.id_includes_port {
            from == self.addr
        } else {
            from.ip() == self.addr.ip()
        };
        if own_address && *sender == self.id {
            return true;
        }
        // A contact in the level-0 table answered one of our RPCs from this
        // address with this id, which was checked then (or, from
        // `learn_verified`, by another core). The bucket is read again at
        // once by `observe_requester` or `observe_verified`, so this check
        // costs no extra cache misses; about half the datagrams of a loaded
        // network end here.
        if self.levels[0].table.contains(sender, from) {
            return true;
        }
        let tag = self.verified.tag(from, sender);
        if self.verified.contains(tag) {
            return true;
        }
        // One rule per node, for peers as for itself: SHA-1 of the IP, or
        // of the IP and port only where so configured (a lab of many nodes
        // on one address). Accepting either would let one address choose
        // among 65,536 ids.
        let bound = if self.hot.id_includes_port {
            *sender == Id::from_ip_port(from)
        } else {
            *sender == Id::from_ip(from.ip())
        };
        if bound {
            self.verified.insert(tag);
        }
        bound
    }

    /// A request tells us a node exists; it enters our tables only after it
    /// answers a ping of ours (a request's source can be forged).
    /// Also, a sender in one of our clusters that is missing from that
    /// level's table (it has just joined our cluster, §4.3: tables follow
    /// the cluster information in headers) is pinged, so that it enters.
    pub(super) fn observe_requester(
        &mut self,
        now: Time,
        from: SocketAddr,
        header: &Header,
        verified: bool,
    ) {
        if !self.verify_wanted(now, from, header, verified) {
            return;
        }
        if self.pinged.len() >= self.hot.verify_pings_max * 16 {
            self.pinged.retain_recent(now);
        }
        self.pinged.insert(from, Pinged::new(now));
        self.verify_pings_in_flight += 1;
        self.send_request(
            now,
            from,
            Some(header.sender),
            self.route_hint,
            // A plain ping: it proves the source's address within the
            // amplification budget; a node that answers and is not yet
            // admitted is asked for its identity then (`admission.rs`).
            Body::Ping,
            Purpose::VerifyPing,
        );
    }

    /// Whether [`Node::observe_requester`] would ping this requester.
    /// `verified`: the sender is known to have answered us (or is local).
    fn verify_wanted(&self, now: Time, from: SocketAddr, header: &Header, verified: bool) -> bool {
        // `has_room_for` implies the sender is not in the table (so not
        // `contains`), and reads only the bucket's length when it is full,
        // as the far buckets nearly always are: no scan of its ids.
        // A sender claiming one of our clusters that we have not measured
        // in it is pinged too: its pong makes it a first-hand member.
        // And so is any sender that has not answered us yet: until it does,
        // it is held to the unverified rate and to small replies.
        let unverified = !verified && !self.has_answered(&header.sender, from);
        // Level 0 is everyone's cluster and everyone is a member of it;
        // a level above is shared only with a sender whose header names a
        // cluster there: the levels past its entries are not looked at
        // (a local sender's get, with none, reads level 0 only: issue 27).
        // Every table is of our id, which has no room in any
        // (`has_room_for` would find out by its distance).
        let shared = self.levels.len().min(header.clusters.len() + 1);
        let wanted = unverified
            || (header.sender != self.id && self.levels[0].table.has_room_for(&header.sender))
            || (1..shared).any(|level| {
                self.shares_cluster(header, level)
                    && ((header.sender != self.id
                        && self.levels[level].table.has_room_for(&header.sender))
                        || !self.is_member(level, &header.sender, from))
            });
        // An address that answered our last ping and is unverified again
        // was forgotten, not forged: it is asked again at once (`Pinged`).
        wanted
            && self.verify_pings_in_flight < self.hot.verify_pings_max
            && self
                .pinged
                .get(&from)
                .is_none_or(|p| !p.recent(now) || (unverified && p.answered))
    }
}

/// Drops contacts, then values, from a reply until it is `excess` bytes
/// shorter (or has none left).
fn trim_reply(body: &mut Body, mut excess: usize) {
    let contact_bytes = |c: &Contact| if c.addr.is_ipv4() { 28 } else { 40 };
    let (contacts, values): (Option<&mut Contacts>, Option<&mut Values>) = match body {
        Body::Nodes { contacts, .. }
        | Body::MembersReply { contacts, .. }
        | Body::PutProbeReply { contacts, .. } => (Some(contacts), None),
        Body::GetReply {
            values, contacts, ..
        } => (Some(contacts), Some(values)),
        Body::StoreReply { values, .. } => (None, Some(values)),
        _ => (None, None),
    };
    if let Some(c) = contacts {
        while excess > 0 {
            let Some(last) = c.pop() else { break };
            excess = excess.saturating_sub(contact_bytes(&last));
        }
    }
    if let Some(v) = values {
        while excess > 0 {
            let Some(last) = v.pop() else { break };
            excess = excess.saturating_sub(1 + last.0.len());
        }
    }
}

/// The fields of a store request, as [`Node::serve_store`] takes them.
struct StoreRequest {
    level: u8,
    key: Key,
    ttl_secs: u32,
    if_absent: bool,
    token: Token,
    value: Value,
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::super::verified::VerifiedCache;
    use super::*;
    use crate::config::Config;
    use crate::dsht::wire::Services;

    const NODE: &str = "10.0.0.1:7000";

    /// A peer at `addr`: its request of `body` with transaction `txid`.
    fn request(addr: SocketAddr, txid: u32, body: Body) -> Vec<u8> {
        Message {
            header: Header {
                route: 0,
                txid,
                sender: Id::from_ip(addr.ip()),
                services: Services::NONE,
                clusters: Default::default(),
            },
            body,
        }
        .to_bytes()
    }

    /// The transaction ids of the pings the node sent to `to`.
    fn pings_to(node: &mut Node, to: SocketAddr) -> Vec<u32> {
        let mut buf = Vec::new();
        let mut pings = Vec::new();
        while let Some(dest) = node.poll_transmit(&mut buf) {
            let m = Message::decode(&buf).unwrap();
            if dest == to && m.body == Body::Ping {
                pings.push(m.header.txid);
            }
        }
        pings
    }

    fn get(at: SocketAddr, txid: u32) -> Vec<u8> {
        let key = Id::hash(b"a key");
        request(
            at,
            txid,
            Body::Get {
                level: 0,
                key,
                target: key,
            },
        )
    }

    /// The header before issue 27, built field by field (send_reply
    /// encoded it with the reply): what `put_header` with `our_clusters`
    /// must write, byte for byte.
    fn header_before(node: &Node, route: u16, txid: u32, now: Time) -> Header {
        Header {
            route,
            txid,
            sender: node.id,
            services: node.services,
            clusters: node.levels[1..]
                .iter()
                .map(|l| crate::dsht::wire::ClusterInfo {
                    id: l.cluster.id,
                    age_secs: now
                        .saturating_since(l.cluster.created)
                        .as_secs()
                        .min(u64::from(u32::MAX)) as u32,
                    size: l.size_estimate,
                })
                .collect(),
        }
    }

    /// `sender_is_bound` before issue 27: the table, then the cache of
    /// bound senders, then the hash.
    fn sender_is_bound_before(node: &mut Node, sender: &Id, from: SocketAddr) -> bool {
        if !node.hot.require_id_binding {
            return true;
        }
        if node.levels[0].table.contains(sender, from) {
            return true;
        }
        let tag = node.verified.tag(from, sender);
        if node.verified.contains(tag) {
            return true;
        }
        let bound = if node.hot.id_includes_port {
            *sender == Id::from_ip_port(from)
        } else {
            *sender == Id::from_ip(from.ip())
        };
        if bound {
            node.verified.insert(tag);
        }
        bound
    }

    /// A reply's header written straight from the node's state is the
    /// header built and encoded before, over seeded random clusters, ages,
    /// size estimates, clocks, services and bodies; and so is the whole
    /// reply, trimmed or not.
    #[test]
    fn the_reply_header_written_is_the_header_built_before() {
        let mut rng = crate::rng::Rng::new(27);
        for round in 0..2_000u32 {
            let config = Config {
                id_includes_port: round % 3 == 0,
                ..Config::default()
            };
            let mut node =
                Node::new(config, NODE.parse().unwrap(), Time::ZERO, round as u64).unwrap();
            for level in 1..node.levels.len() {
                if rng.below(2) == 0 {
                    let mut id = Id::ZERO;
                    rng.fill(&mut id.0);
                    let created = Time(rng.below(1 << 50));
                    node.set_cluster(level as u8, id, created);
                }
                node.levels[level].size_estimate = rng.next_u64() as u32;
            }
            node.services = crate::dsht::wire::Services(rng.below(8) as u8);
            let now = Time(rng.next_u64() >> rng.below(64));
            let (route, txid) = (rng.next_u64() as u16, rng.next_u64() as u32);
            let mut value = vec![0u8; rng.below(256) as usize];
            rng.fill(&mut value);
            let mut values = Values::new();
            for _ in 0..rng.below(5) {
                values.push(Value::new(&value).unwrap());
            }
            let body = Body::GetReply {
                level: rng.below(3) as u8,
                values,
                contacts: Contacts::new(),
            };
            let want = Message {
                header: header_before(&node, route, txid, now),
                body: body.clone(),
            }
            .to_bytes();
            let mut got = vec![0xee; rng.below(3) as usize];
            let prefix = got.len();
            crate::dsht::wire::put_header(
                &mut got,
                body.kind(),
                route,
                txid,
                &node.id,
                node.services,
                node.our_clusters(now),
            );
            body.encode(&mut got);
            assert_eq!(&got[prefix..], &want[..], "round {round}");
            assert_eq!(
                node.header(route, txid, now),
                header_before(&node, route, txid, now)
            );
        }
    }

    /// The reply bytes of a get, trimmed for an unverified source and not,
    /// are the header built before and the body: checked through the node.
    #[test]
    fn a_get_reply_is_the_header_built_before_and_the_body() {
        let mut node = Node::new(Config::default(), NODE.parse().unwrap(), Time::ZERO, 5).unwrap();
        let now = Time::ZERO + Duration::from_secs(100);
        node.set_cluster(1, Id::hash(b"c1"), Time::ZERO + Duration::from_secs(7));
        let peer: SocketAddr = "10.0.1.2:7000".parse().unwrap();
        let key = Id::hash(b"a key");
        node.levels[0].store.store_from(
            &key,
            Value::new(b"v").unwrap(),
            Duration::from_secs(60),
            now,
            crate::dsht::store::Source::Local,
        );
        node.handle(now, peer, &get(peer, 9)).unwrap();
        let mut buf = Vec::new();
        let mut replies = 0;
        while let Some(to) = node.poll_transmit(&mut buf) {
            let m = Message::decode(&buf).unwrap();
            if m.body.kind() == crate::dsht::wire::kind::GET | crate::dsht::wire::kind::REPLY {
                replies += 1;
                assert_eq!(to, peer);
                let want = Message {
                    header: header_before(&node, m.header.route, 9, now),
                    body: m.body.clone(),
                };
                assert_eq!(want.to_bytes(), buf);
                assert!(matches!(&m.body, Body::GetReply { values, .. } if values.len() == 1));
            }
        }
        assert_eq!(replies, 1);
    }

    /// A get answered by `answer_get` leaves what the general path leaves:
    /// the same datagrams (reply and verifying pings), the same counters and
    /// the same random state, over seeded random keys, stores, levels,
    /// senders and cluster claims (served, refused, absent keys).
    #[test]
    fn a_get_written_straight_is_the_get_answered_the_general_way() {
        let mut rng = crate::rng::Rng::new(11);
        let me: SocketAddr = NODE.parse().unwrap();
        let mut fast = Node::new(Config::default(), me, Time::ZERO, 7).unwrap();
        let mut general = Node::new(Config::default(), me, Time::ZERO, 7).unwrap();
        let keys: Vec<Id> = (0..8u32).map(|i| Id::hash(&i.to_be_bytes())).collect();
        let cluster = Id::hash(b"c1");
        for node in [&mut fast, &mut general] {
            node.set_cluster(1, cluster, Time::ZERO);
        }
        let mut now = Time::ZERO + Duration::from_secs(1);
        let mut written = 0;
        for round in 0..4_000u32 {
            now = now + Duration::from_millis(rng.below(2_000));
            let key = keys[rng.below(keys.len() as u64) as usize];
            if rng.below(4) == 0 {
                // Values under a key, some of them expiring.
                let v =
                    Value::new(&rng.next_u64().to_be_bytes()[..1 + rng.below(8) as usize]).unwrap();
                let ttl = Duration::from_secs(1 + rng.below(30));
                let level = rng.below(2) as usize;
                let source = crate::dsht::store::Source::Remote(SocketAddr::new(
                    [10, 0, 9, rng.below(40) as u8].into(),
                    0,
                ));
                for node in [&mut fast, &mut general] {
                    node.levels[level]
                        .store
                        .store_from(&key, v.clone(), ttl, now, source);
                }
            }
            let from: SocketAddr = if rng.below(2) == 0 {
                SocketAddr::new(me.ip(), 40_000 + rng.below(4) as u16)
            } else {
                SocketAddr::new([10, 0, 1, rng.below(6) as u8].into(), 7000)
            };
            let level = rng.below(4) as u8;
            let mut header = Header {
                route: rng.next_u64() as u16,
                txid: round,
                sender: Id::from_ip(from.ip()),
                services: crate::dsht::wire::Services::NONE,
                clusters: Default::default(),
            };
            if rng.below(2) == 0 {
                header.clusters.push(crate::dsht::wire::ClusterInfo {
                    id: cluster,
                    age_secs: 5,
                    size: 3,
                });
            }
            let body = if rng.below(8) == 0 {
                Body::Ping
            } else {
                Body::Get {
                    level,
                    key,
                    target: key,
                }
            };
            let msg = Message { header, body };
            let bytes = msg.to_bytes().len();
            // What answer_get does not take goes the general way, as in
            // on_request.
            let took = fast.answer_get(now, from, &msg);
            written += usize::from(took);
            if !took {
                fast.answer_and_reply(now, from, &msg, bytes, true);
            }
            general.answer_and_reply(now, from, &msg, bytes, true);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            loop {
                let x = fast.poll_transmit(&mut a);
                let y = general.poll_transmit(&mut b);
                assert_eq!(x, y, "round {round}");
                if x.is_none() {
                    break;
                }
                assert_eq!(a, b, "round {round}");
            }
            assert_eq!(fast.stats, general.stats, "round {round}");
            assert_eq!(fast.rng.next_u64(), general.rng.next_u64(), "round {round}");
        }
        assert!(written > 500, "{written} gets written straight");
        assert!(fast.stats.wrong_cluster > 100, "some gets refused");
        assert_eq!(fast.stats.gets_served, written as u64);
    }

    /// `verify_wanted` before issue 27's cut: every level tried in turn.
    fn verify_wanted_before(
        node: &Node,
        now: Time,
        from: SocketAddr,
        header: &Header,
        verified: bool,
    ) -> bool {
        let unverified = !verified && !node.has_answered(&header.sender, from);
        let wanted = unverified
            || (0..node.levels.len()).any(|level| {
                node.shares_cluster(header, level)
                    && ((header.sender != node.id
                        && node.levels[level].table.has_room_for(&header.sender))
                        || !node.is_member(level, &header.sender, from))
            });
        wanted
            && node.verify_pings_in_flight < node.hot.verify_pings_max
            && node
                .pinged
                .get(&from)
                .is_none_or(|p| !p.recent(now) || (unverified && p.answered))
    }

    /// Whether a requester is pinged is what it was before the levels past
    /// its header's cluster entries were left out, over seeded random
    /// requests (local and remote senders, our id and theirs, cluster
    /// claims ours and not, at every level) to a node whose tables, members
    /// and pings fill as its peers answer its pings.
    #[test]
    fn a_requester_is_pinged_as_before() {
        let mut rng = crate::rng::Rng::new(8);
        let me: SocketAddr = NODE.parse().unwrap();
        let mut node = Node::new(Config::default(), me, Time::ZERO, 3).unwrap();
        let ours = [Id::hash(b"c1"), Id::hash(b"c2")];
        node.set_cluster(1, ours[0], Time::ZERO);
        node.set_cluster(2, ours[1], Time::ZERO);
        let mut now = Time::ZERO + Duration::from_secs(1);
        let (mut wanted, mut checks) = (0, 0);
        let mut buf = Vec::new();
        for round in 0..20_000u32 {
            now = now + Duration::from_millis(rng.below(500));
            if rng.below(50) == 0 {
                node.handle_timeout(now);
            }
            let from: SocketAddr = match rng.below(3) {
                0 => SocketAddr::new(me.ip(), 40_000 + rng.below(3) as u16),
                _ => SocketAddr::new([10, 0, 1, rng.below(64) as u8].into(), 7000),
            };
            let sender = if from.ip() == me.ip() && rng.below(4) != 0 {
                node.id
            } else {
                Id::from_ip(from.ip())
            };
            let mut clusters = smallvec::SmallVec::new();
            for (level, our) in ours.iter().enumerate().take(rng.below(3) as usize) {
                let id = if rng.below(3) == 0 {
                    Id::hash(&[level as u8, 9])
                } else {
                    *our
                };
                clusters.push(crate::dsht::wire::ClusterInfo {
                    id,
                    age_secs: 5,
                    size: 3,
                });
            }
            let header = Header {
                route: 0,
                txid: round,
                sender,
                services: crate::dsht::wire::Services::NONE,
                clusters,
            };
            for verified in [false, true] {
                let got = node.verify_wanted(now, from, &header, verified);
                assert_eq!(
                    got,
                    verify_wanted_before(&node, now, from, &header, verified),
                    "round {round}, verified {verified}"
                );
                wanted += usize::from(got);
                checks += 1;
            }
            let level = rng.below(3) as u8;
            let key = Id::hash(&round.to_be_bytes());
            let body = match rng.below(3) {
                0 => Body::Ping,
                1 => Body::FindNode { level, target: key },
                _ => Body::Get {
                    level,
                    key,
                    target: key,
                },
            };
            let _ = node.handle(
                now,
                from,
                &Message {
                    header: header.clone(),
                    body,
                }
                .to_bytes(),
            );
            // The peers answer the node's pings, most of them from our
            // clusters: they enter its tables and become members.
            let mut pongs = Vec::new();
            while let Some(to) = node.poll_transmit(&mut buf) {
                let m = Message::decode(&buf).unwrap();
                if m.body == Body::Ping && to.ip() != me.ip() && rng.below(4) != 0 {
                    let mut h = header.clone();
                    h.txid = m.header.txid;
                    h.sender = Id::from_ip(to.ip());
                    pongs.push((
                        to,
                        Message {
                            header: h,
                            body: Body::Pong,
                        }
                        .to_bytes(),
                    ));
                }
            }
            for (to, pong) in pongs {
                let _ = node.handle(now, to, &pong);
            }
        }
        assert!(
            wanted > checks / 20 && wanted < checks - checks / 20,
            "{wanted} of {checks} wanted"
        );
        assert!(node.levels[0].table.len() > 10, "the table filled");
    }

    /// A node drained with `poll_transmit_keeping` sends what one drained
    /// with `poll_transmit` sends: the same datagrams, counters and random
    /// state, over seeded random requests.
    #[test]
    fn a_node_that_keeps_its_queue_sends_the_same() {
        let mut rng = crate::rng::Rng::new(5);
        let me: SocketAddr = NODE.parse().unwrap();
        let mut keeps = Node::new(Config::default(), me, Time::ZERO, 9).unwrap();
        let mut frees = Node::new(Config::default(), me, Time::ZERO, 9).unwrap();
        let mut now = Time::ZERO;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut sent = 0;
        for round in 0..2_000u32 {
            now = now + Duration::from_millis(rng.below(300));
            let from = SocketAddr::new([10, 0, 2, rng.below(30) as u8].into(), 7000);
            let bytes = if rng.below(2) == 0 {
                get(from, round)
            } else {
                request(from, round, Body::Ping)
            };
            for _ in 0..rng.below(4) {
                let x = keeps.handle(now, from, &bytes);
                assert_eq!(x, frees.handle(now, from, &bytes));
            }
            loop {
                let x = keeps.poll_transmit_keeping(&mut a);
                assert_eq!(x, frees.poll_transmit(&mut b), "round {round}");
                if x.is_none() {
                    break;
                }
                assert_eq!(a, b, "round {round}");
                sent += 1;
            }
            assert_eq!(keeps.stats, frees.stats);
            assert_eq!(keeps.rng.next_u64(), frees.rng.next_u64());
        }
        assert!(sent > 2_000, "{sent} datagrams");
    }

    /// Two nodes lent one transmit room in turn (`Node::swap_transmit_room`,
    /// as a simulator's lane lends its room to each node it gives an input)
    /// send what two nodes drained with `poll_transmit` send: the same
    /// datagrams, counters and random state, over seeded random requests;
    /// each hands the room back holding its buffers, and keeps no queue.
    #[test]
    fn nodes_lent_one_room_send_the_same() {
        let mut rng = crate::rng::Rng::new(11);
        let me: SocketAddr = NODE.parse().unwrap();
        let two = |seed: u64| {
            [0u64, 1].map(|k| Node::new(Config::default(), me, Time::ZERO, seed + k).unwrap())
        };
        let (mut lent, mut plain) = (two(21), two(21));
        let mut room = super::super::TransmitRoom::default();
        let mut now = Time::ZERO;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut sent = 0;
        for round in 0..2_000u32 {
            now = now + Duration::from_millis(rng.below(300));
            let k = rng.below(2) as usize;
            let from = SocketAddr::new([10, 0, 3, rng.below(30) as u8].into(), 7000);
            let bytes = if rng.below(2) == 0 {
                get(from, round)
            } else {
                request(from, round, Body::Ping)
            };
            lent[k].swap_transmit_room(&mut room);
            for _ in 0..1 + rng.below(3) {
                let x = lent[k].handle(now, from, &bytes);
                assert_eq!(x, plain[k].handle(now, from, &bytes));
            }
            loop {
                let x = lent[k].poll_transmit_keeping(&mut a);
                assert_eq!(x, plain[k].poll_transmit(&mut b), "round {round}");
                if x.is_none() {
                    break;
                }
                assert_eq!(a, b, "round {round}");
                sent += 1;
            }
            lent[k].swap_transmit_room(&mut room);
            assert!(lent[k].out.holds_nothing(), "round {round}: a queue kept");
            assert!(
                !room.0.holds_nothing(),
                "round {round}: the room came back empty"
            );
            assert_eq!(lent[k].stats, plain[k].stats);
            assert_eq!(lent[k].rng.next_u64(), plain[k].rng.next_u64());
        }
        assert!(sent > 2_000, "{sent} datagrams");
    }

    /// Whether a sender is bound to its address is what it was before the
    /// shortcut for the node's own address, over seeded random senders and
    /// addresses (the node's own IP and port among them), for both rules.
    #[test]
    fn sender_binding_is_what_it_was_before() {
        let mut rng = crate::rng::Rng::new(3);
        for includes_port in [false, true] {
            let config = Config {
                id_includes_port: includes_port,
                ..Config::default()
            };
            let me: SocketAddr = NODE.parse().unwrap();
            let mut ours = Node::new(config.clone(), me, Time::ZERO, 1).unwrap();
            let mut theirs = Node::new(config, me, Time::ZERO, 1).unwrap();
            let (mut bound, mut checks) = (0, 0);
            for _ in 0..20_000 {
                let ip: std::net::IpAddr = match rng.below(3) {
                    0 => me.ip(),
                    1 => [10, 0, 0, rng.below(4) as u8].into(),
                    _ => std::net::Ipv6Addr::from(rng.next_u64() as u128).into(),
                };
                let port = if rng.below(2) == 0 {
                    me.port()
                } else {
                    rng.below(4) as u16 + 7000
                };
                let from = SocketAddr::new(ip, port);
                let sender = match rng.below(5) {
                    0 => ours.id,
                    1 => Id::from_ip(from.ip()),
                    2 => Id::from_ip_port(from),
                    3 => Id::from_ip(me.ip()),
                    _ => {
                        let mut id = Id::ZERO;
                        rng.fill(&mut id.0);
                        id
                    }
                };
                let got = ours.sender_is_bound(&sender, from);
                assert_eq!(
                    got,
                    sender_is_bound_before(&mut theirs, &sender, from),
                    "{sender:?} at {from}, ids with ports: {includes_port}"
                );
                bound += usize::from(got);
                checks += 1;
            }
            assert!(
                bound > checks / 10 && bound < checks,
                "{bound} of {checks} bound"
            );
        }
    }

    /// A peer that proved its address and was then forgotten (out of the
    /// table, its tag in the cache of answered senders overwritten) is pinged
    /// again at its next request, not held to the unverified rate until a
    /// minute has passed (the adversarial test's good client was blocked for
    /// 33 s so); a source that never answered is still pinged at most once a
    /// minute.
    #[test]
    fn a_forgotten_peer_that_answered_is_pinged_again_at_once() {
        let mut node = Node::new(Config::default(), NODE.parse().unwrap(), Time::ZERO, 1).unwrap();
        let (peer, forger): (SocketAddr, SocketAddr) = (
            "10.0.1.2:7000".parse().unwrap(),
            "10.0.2.3:7000".parse().unwrap(),
        );
        let mut now = Time::ZERO + Duration::from_secs(1);
        // The peer's first request: a verification ping, which it answers.
        node.handle(now, peer, &get(peer, 1)).unwrap();
        let ping = pings_to(&mut node, peer);
        assert_eq!(ping.len(), 1, "the first request is answered with a ping");
        let pong = request(peer, ping[0], Body::Pong);
        node.handle(now, peer, &pong).unwrap();
        assert!(node.has_answered(&Id::from_ip(peer.ip()), peer));
        // The node forgets it.
        node.levels[0].table.remove(&Id::from_ip(peer.ip()));
        node.answered = VerifiedCache::new(&[7; 16], &[8; 16]);
        assert!(!node.has_answered(&Id::from_ip(peer.ip()), peer));
        now = now + Duration::from_secs(5);
        node.handle(now, peer, &get(peer, 2)).unwrap();
        let again = pings_to(&mut node, peer);
        assert_eq!(again.len(), 1, "the forgotten peer is asked again at once");
        node.handle(now, peer, &request(peer, again[0], Body::Pong))
            .unwrap();
        assert!(node.has_answered(&Id::from_ip(peer.ip()), peer));
        // A source that never answers: one ping, then none within the minute.
        node.handle(now, forger, &get(forger, 1)).unwrap();
        assert_eq!(pings_to(&mut node, forger).len(), 1);
        for (i, secs) in [5u64, 20, 50].into_iter().enumerate() {
            let t = now + Duration::from_secs(secs);
            node.handle_timeout(t);
            let _ = node.handle(t, forger, &get(forger, 2 + i as u32));
            assert!(
                pings_to(&mut node, forger).is_empty(),
                "pinged again after {secs} s"
            );
        }
        let later = now + Duration::from_secs(61);
        node.handle_timeout(later);
        let _ = node.handle(later, forger, &get(forger, 9));
        assert_eq!(
            pings_to(&mut node, forger).len(),
            1,
            "after a minute, once more"
        );
    }
}
