//! The iterative lookup of §4.1, as a state machine with no I/O.
//!
//! A lookup for key k keeps a target t, initially the local id (or where the
//! previous level's lookup stopped, §4.3). Each step sets
//! `t ← splice(k, t, i)` for the smallest i that yields a new t, and the next
//! hop is the closest known node to t. Correcting only b bits per hop is what
//! spreads load over the nodes near a popular key (no tree saturation).
//!
//! The window: one RPC normally, so that each hop costs one RPC; when the
//! outstanding ones have been quiet for `rpc_stall` the lookup opens another,
//! to the next-closest node to t, up to α outstanding (slow or stale peers
//! cost a stall, not a timeout). The lookup ends when t = k and the closest
//! known live node to k has answered, or when no candidate is left. Every
//! candidate is asked at most once and t only moves toward k, so it ends.

use std::net::SocketAddr;

use smallvec::SmallVec;

use crate::dsht::id::{first_bit, id_of, last_bit, next_target, splice, words, xor, Id};
use crate::dsht::wire::{Contact, Services, Token};
use crate::time::{Duration, Time};

/// The state of one candidate node.
#[allow(missing_docs)] // fields named by the enclosing docs
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidateState {
    /// Known, not asked.
    Fresh,
    /// Asked; the RPC with this transaction id is outstanding since `sent`.
    InFlight { txid: u32, sent: Time },
    /// Answered.
    Answered,
    /// Timed out or refused.
    Failed,
}

/// What a put's forward phase learnt from a node's reply (§4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReply {
    /// Whether the node is full and loaded for the key (the forward phase stops there).
    pub full_and_loaded: bool,
    /// Whether the node is loaded for the key: more than β requests for it
    /// in the past minute (a put's forward phase stops there, §4.2).
    pub loaded: bool,
    /// Whether the node is full for the value being put: a store there
    /// would be refused, so the reverse phase skips it.
    pub full: bool,
    /// The write token it gave us.
    pub token: Token,
    /// Whether it holds values under the key (a claim loses to them).
    pub holds: bool,
}

/// A node the lookup knows of.
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    /// The node.
    pub contact: Contact,
    /// Where it stands.
    pub state: CandidateState,
    /// For a put's forward phase: what it said.
    pub probe: Option<ProbeReply>,
    /// Whether it was last asked about the key itself (not an earlier
    /// target).
    pub asked_key: bool,
}

/// A candidate as the lookup holds it: a [`Candidate`] less its id, which
/// is in [`Lookup`]'s `keys`.
#[derive(Clone, Copy, Debug)]
struct Held {
    addr: SocketAddr,
    services: Services,
    state: CandidateState,
    probe: Option<ProbeReply>,
    asked_key: bool,
}

/// A candidate's id as [`words`] and its state's kind: one entry of
/// [`Lookup`]'s `keys`, 24 bytes (the words as fields, not a tuple, so that
/// the kind sits in what would be the tuple's padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    hi: u64,
    mid: u64,
    lo: u32,
    kind: Kind,
}

impl Key {
    fn new(id: (u64, u64, u32), kind: Kind) -> Key {
        Key {
            hi: id.0,
            mid: id.1,
            lo: id.2,
            kind,
        }
    }

    /// The id as [`words`].
    fn id(&self) -> (u64, u64, u32) {
        (self.hi, self.mid, self.lo)
    }
}

/// [`CandidateState`] without its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fresh,
    InFlight,
    Answered,
    Failed,
}

impl Kind {
    fn of(state: &CandidateState) -> Kind {
        match state {
            CandidateState::Fresh => Kind::Fresh,
            CandidateState::InFlight { .. } => Kind::InFlight,
            CandidateState::Answered => Kind::Answered,
            CandidateState::Failed => Kind::Failed,
        }
    }
}

/// What the lookup wants done next.
#[allow(missing_docs)] // fields named by the enclosing docs
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send the lookup's RPC to this contact (toward `target`), then call
    /// [`Lookup::sent`].
    Send { contact: Contact, target: Id },
    /// Nothing to send now; wait for a reply, a timeout, or this time (the
    /// stall deadline of the window).
    Wait(Option<Time>),
    /// The lookup is over: `closest` is the closest live node to the key that
    /// answered (None if nobody did).
    Done { closest: Option<Contact> },
}

/// An iterative lookup at one level.
#[derive(Clone, Debug)]
pub struct Lookup {
    key: Id,
    target: Id,
    i: u32,
    b: u32,
    alpha: usize,
    stall: Duration,
    capacity: usize,
    /// The candidates, less their ids (in `keys`): 64 bytes each, so that
    /// with `keys` a candidate costs what a [`Candidate`] (88 bytes) did.
    candidates: Vec<Held>,
    /// The same candidates' ids as big-endian words and their states, in
    /// 24 bytes each where a [`Candidate`] is 88: what the lookup's scans
    /// read (the closest to a target on every step, an id on every reply
    /// and every contact learnt). A scan of 64 candidates then reads 1.5 KB
    /// rather than 5.6 KB and swaps no bytes (`best_for` was 7 % of the
    /// simulator's CPU, issue 27). Kept in step by [`Lookup::set_state`]
    /// and [`Lookup::learn`].
    keys: Vec<Key>,
    /// The candidates' positions, closest to the key first: a reply's
    /// contacts are placed by a binary search (and a duplicate found by
    /// it), the farthest fresh or failed one is found from the end, and
    /// the `breadth` closest live ones from the start (a select over them
    /// all on every step after t reached k was 10 % of the simulator's
    /// instructions, issue 27).
    order: SmallVec<[u16; 64]>,
    /// How many of the closest nodes to the key must have answered before
    /// the lookup ends: 1 for gets and puts (the walk stops at the closest
    /// node), k for routing refreshes (Kademlia's node lookup, so that the k
    /// closest nodes hear of us).
    breadth: usize,
    /// Whether the closest node, asked about an earlier target, is asked
    /// about the key itself before the lookup ends (not for a put's forward
    /// phase: that would be a second put probe to one node in one walk).
    reask_closest: bool,
    /// RPCs answered so far (hops taken).
    pub answered: u32,
}

impl Lookup {
    /// A lookup for `key` that starts from `start` (the local id, or where the
    /// previous level stopped) with the given seed contacts.
    pub fn new(
        key: Id,
        start: Id,
        b: u32,
        alpha: usize,
        stall: Duration,
        capacity: usize,
        seeds: impl IntoIterator<Item = Contact>,
    ) -> Lookup {
        // Bits of `start` that already match the key count as corrected.
        let i = key.distance(&start).leading_zeros() / b;
        let mut l = Lookup {
            key,
            target: start,
            i,
            b,
            alpha,
            stall,
            // Positions in `order` are 16-bit.
            capacity: capacity.min(usize::from(u16::MAX)),
            candidates: Vec::new(),
            keys: Vec::new(),
            order: SmallVec::new(),
            breadth: 1,
            reask_closest: true,
            answered: 0,
        };
        for c in seeds {
            l.learn(c);
        }
        // t ← splice(k, t, i) comes before the first hop: the first hop is the
        // closest node to the first corrected target, not to the start.
        if let Some((t, i)) = next_target(&l.key, &l.target, l.i, l.b) {
            l.target = t;
            l.i = i;
        }
        l
    }

    /// Makes the lookup end only when the `breadth` closest live nodes to the
    /// key have answered (at most the candidate capacity).
    pub fn with_breadth(mut self, breadth: usize) -> Lookup {
        self.breadth = breadth.clamp(1, self.capacity.max(1));
        self
    }

    /// Makes the lookup end when the closest node to the key has answered,
    /// whatever target it was asked about (§4.2: a put's forward phase
    /// probes each node once; a second probe of the closest node in the same
    /// walk would count twice against its leakage rate β).
    pub fn without_reask(mut self) -> Lookup {
        self.reask_closest = false;
        self
    }

    /// The target an RPC sent now should ask about: one step beyond t, so
    /// that the hop chosen for t returns nodes "half-way closer" (Fig. 2).
    fn rpc_target(&self) -> Id {
        next_target(&self.key, &self.target, self.i, self.b).map_or(self.key, |(t, _)| t)
    }

    /// The key.
    pub fn key(&self) -> Id {
        self.key
    }

    /// The current target t.
    pub fn target(&self) -> Id {
        self.target
    }

    /// Adds a contact learnt from a reply (ignored if already known; if over
    /// capacity, the contact farthest from the key is forgotten unless it is
    /// in flight or has answered).
    pub fn learn(&mut self, contact: Contact) {
        let key = words(&self.key.0);
        let id = words(&contact.id.0);
        let d = xor(id, key);
        let keys = &self.keys;
        let at = self
            .order
            .partition_point(|&j| xor(keys[usize::from(j)].id(), key) < d);
        if self
            .order
            .get(at)
            .is_some_and(|&j| keys[usize::from(j)].id() == id)
        {
            return;
        }
        let new = Held {
            addr: contact.addr,
            services: contact.services,
            state: CandidateState::Fresh,
            probe: None,
            asked_key: false,
        };
        let new_key = Key::new(id, Kind::Fresh);
        if self.candidates.len() < self.capacity {
            self.order.insert(at, self.candidates.len() as u16);
            self.candidates.push(new);
            self.keys.push(new_key);
            return;
        }
        // Full: the farthest from the key of the new contact and the fresh
        // or failed candidates goes. Decided before anything is added, so
        // that the list never holds more than `capacity` (pushing first
        // made a list of 64 grow room for 128, 5.6 KB per lookup).
        let farthest = self
            .order
            .iter()
            .rposition(|&j| matches!(keys[usize::from(j)].kind, Kind::Fresh | Kind::Failed));
        if let Some(p) = farthest {
            let j = self.order[p];
            // Farther than the new contact: then p ≥ at, and removing it
            // leaves `at` where it is.
            if p >= at {
                self.candidates[usize::from(j)] = new;
                self.keys[usize::from(j)] = new_key;
                self.order.remove(p);
                self.order.insert(at, j);
            }
        }
    }

    /// The position of the candidate with this id.
    fn position(&self, id: &Id) -> Option<usize> {
        let id = words(&id.0);
        self.keys.iter().position(|k| k.id() == id)
    }

    /// Sets candidate `i`'s state (and its kind in `keys`).
    fn set_state(&mut self, i: usize, state: CandidateState) {
        self.candidates[i].state = state;
        self.keys[i].kind = Kind::of(&state);
    }

    /// Records that the RPC for a [`Step::Send`] to `id` about `target`
    /// went out as `txid` at `now`.
    pub fn sent(&mut self, id: &Id, target: Id, txid: u32, now: Time) {
        if let Some(i) = self.position(id) {
            self.set_state(i, CandidateState::InFlight { txid, sent: now });
            self.candidates[i].asked_key = target == self.key;
        }
    }

    /// Records an answer from `id` (with the put probe's result, if any) and
    /// learns the contacts it returned. Returns false if no RPC to `id` was
    /// outstanding (a late or unexpected reply).
    pub fn on_answer(&mut self, id: &Id, probe: Option<ProbeReply>, contacts: &[Contact]) -> bool {
        let Some(i) = self.position(id) else {
            return false;
        };
        if self.keys[i].kind != Kind::InFlight {
            return false;
        }
        self.set_state(i, CandidateState::Answered);
        self.candidates[i].probe = probe;
        self.answered += 1;
        for contact in contacts {
            self.learn(*contact);
        }
        true
    }

    /// Records what the caller already knows of `id` without asking it (a
    /// node remembered as full and loaded, §4.2): it counts as answered with
    /// `probe` and no contacts, and no RPC goes to it.
    pub fn on_known(&mut self, id: &Id, probe: ProbeReply) {
        if let Some(i) = self.position(id) {
            if self.keys[i].kind == Kind::Fresh {
                self.set_state(i, CandidateState::Answered);
                self.candidates[i].probe = Some(probe);
            }
        }
    }

    /// Records that the RPC to `id` failed.
    pub fn on_failure(&mut self, id: &Id) {
        if let Some(i) = self.position(id) {
            self.set_state(i, CandidateState::Failed);
        }
    }

    /// Whether any node that answered reported itself full and loaded (a
    /// put's forward phase stops there).
    pub fn met_full_and_loaded(&self) -> bool {
        self.candidates.iter().any(|c| {
            c.state == CandidateState::Answered && c.probe.is_some_and(|p| p.full_and_loaded)
        })
    }

    /// Whether any node that answered reported itself loaded for the key,
    /// full or not (a put's forward phase stops there: see `Node`'s put).
    pub fn met_loaded(&self) -> bool {
        self.candidates
            .iter()
            .any(|c| c.state == CandidateState::Answered && c.probe.is_some_and(|p| p.loaded))
    }

    /// Candidates that answered, closest to the key first.
    pub fn answered_by_distance(&self) -> Vec<Candidate> {
        self.order
            .iter()
            .map(|&j| usize::from(j))
            .filter(|&j| self.keys[j].kind == Kind::Answered)
            .map(|j| self.candidate(j))
            .collect()
    }

    /// Candidate `i`'s contact.
    fn contact(&self, i: usize) -> Contact {
        let c = &self.candidates[i];
        Contact {
            id: id_of(self.keys[i].id()),
            addr: c.addr,
            services: c.services,
        }
    }

    /// Candidate `i`, whole.
    fn candidate(&self, i: usize) -> Candidate {
        let c = &self.candidates[i];
        Candidate {
            contact: self.contact(i),
            state: c.state,
            probe: c.probe,
            asked_key: c.asked_key,
        }
    }

    /// The closest candidate to `target` that has not failed (and, with
    /// `skip_in_flight`, has not been asked), and how many RPCs are
    /// outstanding: one pass over the candidates, the hot loop of a lookup.
    fn best_for(&self, target: &Id, skip_in_flight: bool) -> (Option<usize>, usize) {
        // XOR distances as big-endian words (ordered as `Distance` is), so no
        // byte-wise distance per candidate.
        let t = words(&target.0);
        let mut best: Option<((u64, u64, u32), usize)> = None;
        let mut outstanding = 0;
        for (i, k) in self.keys.iter().enumerate() {
            match k.kind {
                Kind::Failed => continue,
                Kind::InFlight => {
                    outstanding += 1;
                    if skip_in_flight {
                        continue;
                    }
                }
                Kind::Answered if skip_in_flight => continue,
                _ => {}
            }
            let d = xor(k.id(), t);
            if best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, i));
            }
        }
        (best.map(|(_, i)| i), outstanding)
    }

    /// Decides the next step at `now`.
    pub fn step(&mut self, now: Time) -> Step {
        loop {
            let (best, outstanding) = self.best_for(&self.target, false);
            let Some(best) = best else {
                return if outstanding == 0 {
                    Step::Done { closest: None }
                } else {
                    Step::Wait(None)
                };
            };
            let c = self.candidate(best);
            match c.state {
                CandidateState::Fresh => {
                    if outstanding == 0 {
                        return Step::Send {
                            contact: c.contact,
                            target: self.rpc_target(),
                        };
                    }
                    return self.widen(now, outstanding);
                }
                CandidateState::InFlight { .. } => return self.widen(now, outstanding),
                CandidateState::Answered => {
                    if self.advance_past(best) {
                        continue;
                    }
                    // t = k and the closest live node to k has answered. If it
                    // was asked about an earlier target, its table may still
                    // hold a node closer to k (Kademlia's routing property):
                    // ask it about k itself once before ending.
                    let reask = self.reask_closest && !c.asked_key;
                    if reask && outstanding == 0 {
                        return Step::Send {
                            contact: c.contact,
                            target: self.key,
                        };
                    }
                    if reask {
                        return Step::Wait(None);
                    }
                    if self.breadth > 1 {
                        return self.widen_to_breadth(c.contact, outstanding);
                    }
                    // RPCs still outstanding went to nodes no closer to k:
                    // their answers cannot change the result.
                    return Step::Done {
                        closest: Some(c.contact),
                    };
                }
                CandidateState::Failed => unreachable!("best_for skips failed candidates"),
            }
        }
    }

    /// Moves t toward k past the targets to which candidate `c`, closest
    /// to t, stays the closest; true when t has moved to one where another
    /// may be closer, false when t has reached k with `c` the closest.
    ///
    /// Which of `c` and a candidate x is closer to t depends only on t's bit
    /// where their ids first differ, so `c` stays the closest while t's
    /// moves change none of those bits ([`Lookup::rivals`]), and t moves on
    /// without a scan of the candidates. At the end of a walk t moved a bit
    /// at a time through the ~150 bits past log2 n with the closest node
    /// fixed: a scan for each was most of the lookup's CPU (issue 27).
    fn advance_past(&mut self, c: usize) -> bool {
        let rivals = self.rivals(c);
        // The bits t has still to change: t is k's first b·i bits, then the
        // start's, so each step of `next_target` changes the b-bit block
        // holding the first of them. No step is taken one at a time: t goes
        // at once to the step that changes the first rival bit, or, if it
        // changes none, to the last step (t = k).
        let left = xor(words(&self.target.0), words(&self.key.0));
        if left == (0, 0, 0) {
            return false;
        }
        let hits = (left.0 & rivals.0, left.1 & rivals.1, left.2 & rivals.2);
        let (bit, rival) = if hits != (0, 0, 0) {
            (first_bit(hits), true)
        } else {
            (last_bit(left), false)
        };
        let i = (bit / self.b + 1).max(self.i + 1);
        self.target = splice(&self.key, &self.target, i, self.b);
        self.i = i;
        rival
    }

    /// The bits where candidate `c`'s id first differs from each other live
    /// candidate's (the top bit of their XOR), as a mask in [`words`] form.
    fn rivals(&self, c: usize) -> (u64, u64, u32) {
        let id = self.keys[c].id();
        let mut m = (0u64, 0u64, 0u32);
        for k in &self.keys {
            if k.kind == Kind::Failed {
                continue;
            }
            let d = xor(k.id(), id);
            if d.0 != 0 {
                m.0 |= 1 << (63 - d.0.leading_zeros());
            } else if d.1 != 0 {
                m.1 |= 1 << (63 - d.1.leading_zeros());
            } else if d.2 != 0 {
                m.2 |= 1 << (31 - d.2.leading_zeros());
            }
        }
        m
    }

    /// The closest node has answered; ask the rest of the `breadth` closest
    /// live nodes about the key, up to α at a time, then end.
    fn widen_to_breadth(&self, closest: Contact, outstanding: usize) -> Step {
        // The `breadth` closest live candidates, closest first.
        let live = self
            .order
            .iter()
            .map(|&j| usize::from(j))
            .filter(|&j| self.keys[j].kind != Kind::Failed)
            .take(self.breadth);
        let mut waiting = false;
        for c in live.map(|j| self.candidate(j)) {
            match c.state {
                CandidateState::Fresh if outstanding < self.alpha => {
                    return Step::Send {
                        contact: c.contact,
                        target: self.key,
                    };
                }
                CandidateState::Fresh | CandidateState::InFlight { .. } => waiting = true,
                _ => {}
            }
        }
        if waiting {
            Step::Wait(None)
        } else {
            Step::Done {
                closest: Some(closest),
            }
        }
    }

    /// With RPCs outstanding: open another to the next-closest fresh node to t
    /// if they have all stalled and the window allows, else wait.
    fn widen(&self, now: Time, outstanding: usize) -> Step {
        let newest = self
            .candidates
            .iter()
            .filter_map(|c| match c.state {
                CandidateState::InFlight { sent, .. } => Some(sent),
                _ => None,
            })
            .max()
            .unwrap_or(now);
        let stall_at = newest + self.stall;
        if outstanding >= self.alpha {
            return Step::Wait(None);
        }
        if now < stall_at {
            return Step::Wait(Some(stall_at));
        }
        match self.best_for(&self.target, true).0 {
            Some(i) => Step::Send {
                contact: self.contact(i),
                target: self.rpc_target(),
            },
            None => Step::Wait(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsht::wire::Services;
    use crate::rng::Rng;
    use std::collections::BTreeMap;
    use std::net::SocketAddr;

    fn contact(id: Id) -> Contact {
        Contact {
            id,
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            services: Services::NONE,
        }
    }

    /// A static network of `n` random ids where every node knows every other:
    /// a reply returns the 8 closest to the target.
    fn network(n: usize, seed: u64) -> Vec<Id> {
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|_| {
                let mut id = Id::ZERO;
                rng.fill(&mut id.0);
                id
            })
            .collect()
    }

    fn closest_to(ids: &[Id], t: &Id, count: usize, exclude: &Id) -> Vec<Contact> {
        let mut v: Vec<Id> = ids.iter().copied().filter(|i| i != exclude).collect();
        v.sort_by_key(|i| i.distance(t));
        v.truncate(count);
        v.into_iter().map(contact).collect()
    }

    #[test]
    fn lookup_finds_the_closest_node_and_terminates() {
        let ids = network(500, 1);
        let mut rng = Rng::new(2);
        for trial in 0..50 {
            let mut key = Id::ZERO;
            rng.fill(&mut key.0);
            let me = ids[trial];
            let seeds = closest_to(&ids, &me, 8, &me);
            let mut l = Lookup::new(key, me, 1, 3, Duration::from_millis(500), 64, seeds);
            let mut now = Time::ZERO;
            let mut txid = 0;
            let mut rpcs = 0;
            let closest = loop {
                match l.step(now) {
                    Step::Send { contact, target } => {
                        txid += 1;
                        rpcs += 1;
                        l.sent(&contact.id, target, txid, now);
                        let reply = closest_to(&ids, &target, 8, &contact.id);
                        now = now + Duration::from_millis(10);
                        assert!(l.on_answer(&contact.id, None, &reply));
                    }
                    Step::Wait(_) => panic!("nothing outstanding, nothing to wait for"),
                    Step::Done { closest } => break closest,
                }
                assert!(rpcs < 200, "lookup did not terminate");
            };
            let want = closest_to(&ids, &key, 1, &me)[0].id;
            let got = closest.unwrap().id;
            // The local node is not a candidate; the closest other node must be found.
            assert_eq!(got, want, "trial {trial}");
            // About log2(500) ≈ 9 hops with b = 1, never wildly more.
            assert!(rpcs <= 20, "{rpcs} RPCs");
        }
    }

    #[test]
    fn window_opens_after_a_stall_and_failures_are_skipped() {
        let ids = network(100, 3);
        let me = ids[0];
        let key = ids[50];
        let seeds = closest_to(&ids, &me, 8, &me);
        let mut l = Lookup::new(key, me, 1, 2, Duration::from_millis(500), 64, seeds);
        let first = match l.step(Time::ZERO) {
            Step::Send { contact, target } => {
                l.sent(&contact.id, target, 1, Time::ZERO);
                contact
            }
            s => panic!("{s:?}"),
        };
        assert_eq!(
            l.step(Time(1)),
            Step::Wait(Some(Time::ZERO + Duration::from_millis(500)))
        );
        let second = match l.step(Time::ZERO + Duration::from_millis(500)) {
            Step::Send { contact, target } => {
                l.sent(
                    &contact.id,
                    target,
                    2,
                    Time::ZERO + Duration::from_millis(500),
                );
                contact
            }
            s => panic!("{s:?}"),
        };
        assert_ne!(first.id, second.id);
        // α = 2 outstanding: wait without a deadline.
        assert_eq!(
            l.step(Time::ZERO + Duration::from_secs(5)),
            Step::Wait(None)
        );
        l.on_failure(&first.id);
        l.on_failure(&second.id);
        let mut answered = BTreeMap::new();
        let mut now = Time::ZERO + Duration::from_secs(5);
        let mut tx = 10;
        let closest = loop {
            match l.step(now) {
                Step::Send { contact, target } => {
                    assert!(contact.id != first.id && contact.id != second.id);
                    tx += 1;
                    l.sent(&contact.id, target, tx, now);
                    answered.insert(contact.id, ());
                    let mut reply = closest_to(&ids, &target, 8, &contact.id);
                    reply.retain(|c| c.id != first.id && c.id != second.id);
                    now = now + Duration::from_millis(1);
                    l.on_answer(&contact.id, None, &reply);
                }
                Step::Wait(_) => panic!("stuck"),
                Step::Done { closest } => break closest,
            }
        };
        assert_eq!(closest.unwrap().id, key);
    }

    #[test]
    fn section_4_2_put_walk_probes_each_node_once() {
        // A put's forward phase (without_reask) never sends two RPCs to one
        // node: the closest node is not asked a second time about the key.
        let ids = network(500, 5);
        let mut rng = Rng::new(6);
        let mut reasked_without_rule = 0;
        for trial in 0..50 {
            let mut key = Id::ZERO;
            rng.fill(&mut key.0);
            let me = ids[trial];
            for reask in [false, true] {
                let seeds = closest_to(&ids, &me, 8, &me);
                let mut l = Lookup::new(key, me, 1, 3, Duration::from_millis(500), 64, seeds);
                if !reask {
                    l = l.without_reask();
                }
                let mut asked = BTreeMap::new();
                let mut txid = 0;
                loop {
                    match l.step(Time::ZERO) {
                        Step::Send { contact, target } => {
                            txid += 1;
                            *asked.entry(contact.id).or_insert(0) += 1;
                            l.sent(&contact.id, target, txid, Time::ZERO);
                            let reply = closest_to(&ids, &target, 8, &contact.id);
                            l.on_answer(&contact.id, None, &reply);
                        }
                        Step::Wait(_) => panic!("nothing outstanding"),
                        Step::Done { closest } => {
                            assert!(closest.is_some());
                            break;
                        }
                    }
                }
                let twice = asked.values().filter(|&&n| n > 1).count();
                if reask {
                    reasked_without_rule += twice;
                } else {
                    assert_eq!(twice, 0, "trial {trial}: a node probed twice");
                }
            }
        }
        // The rule matters: a walk that re-asks does ask some node twice.
        assert!(reasked_without_rule > 0);
    }

    /// `keys` mirrors `candidates` (ids and states) through learning over
    /// capacity, sends, answers, known answers and failures, and `best_for`
    /// over it picks what a scan of the candidates by [`Distance`](crate::dsht::id::Distance) picks.
    #[test]
    fn keys_follow_the_candidates_through_every_change() {
        let ids = network(300, 7);
        let mut rng = Rng::new(8);
        let check = |l: &Lookup| {
            assert_eq!(l.keys.len(), l.candidates.len());
            let all: Vec<Candidate> = (0..l.candidates.len()).map(|i| l.candidate(i)).collect();
            let mut by_key: Vec<usize> = (0..all.len()).collect();
            by_key.sort_by_key(|&i| all[i].contact.id.distance(&l.key));
            let order: Vec<usize> = l.order.iter().map(|&j| usize::from(j)).collect();
            assert_eq!(order, by_key);
            for (k, c) in l.keys.iter().zip(&all) {
                assert_eq!(k.kind, Kind::of(&c.state));
                // The id comes back whole from its words.
                assert!(ids.contains(&c.contact.id));
                assert_eq!(c.contact.addr, SocketAddr::from(([127, 0, 0, 1], 1)));
            }
            let mut answered: Vec<Id> = all
                .iter()
                .filter(|c| c.state == CandidateState::Answered)
                .map(|c| c.contact.id)
                .collect();
            answered.sort_by_key(|id| id.distance(&l.key));
            let got: Vec<Id> = l
                .answered_by_distance()
                .iter()
                .map(|c| c.contact.id)
                .collect();
            assert_eq!(got, answered);
            for skip in [false, true] {
                let by_distance = all
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| match c.state {
                        CandidateState::Failed => false,
                        CandidateState::InFlight { .. } | CandidateState::Answered => !skip,
                        CandidateState::Fresh => true,
                    })
                    .min_by_key(|(_, c)| c.contact.id.distance(&l.target))
                    .map(|(i, _)| i);
                assert_eq!(l.best_for(&l.target, skip).0, by_distance);
            }
        };
        let probe = ProbeReply {
            full_and_loaded: false,
            loaded: false,
            full: false,
            token: Token::default(),
            holds: false,
        };
        let mut ops = [0usize; 4];
        for trial in 0..40 {
            let mut key = Id::ZERO;
            rng.fill(&mut key.0);
            let me = ids[trial];
            // Capacity 8: replies of 8 overflow it at once.
            let seeds = closest_to(&ids, &me, 8, &me);
            let mut l = Lookup::new(key, me, 1, 3, Duration::from_millis(500), 8, seeds);
            check(&l);
            let mut now = Time::ZERO;
            for txid in 0..60 {
                now = now + Duration::from_secs(1);
                let Step::Send { contact, target } = l.step(now) else {
                    break;
                };
                l.sent(&contact.id, target, txid, now);
                check(&l);
                let op = rng.below(4) as usize;
                ops[op] += 1;
                match op {
                    0 => l.on_failure(&contact.id),
                    1 => {
                        // Another fresh candidate known without asking.
                        let fresh = (0..l.candidates.len())
                            .map(|i| l.candidate(i))
                            .find(|c| c.state == CandidateState::Fresh);
                        if let Some(id) = fresh.map(|c| c.contact.id) {
                            l.on_known(&id, probe);
                        }
                        l.on_answer(&contact.id, Some(probe), &[]);
                    }
                    _ => {
                        let reply = closest_to(&ids, &target, 8, &contact.id);
                        assert!(l.on_answer(&contact.id, None, &reply));
                    }
                }
                check(&l);
            }
        }
        assert!(ops.iter().all(|&n| n > 10), "{ops:?}");
    }

    /// `step` as it was before `advance_past`: a scan of the candidates for
    /// every target t moves through.
    fn step_by_scans(l: &mut Lookup, now: Time) -> Step {
        loop {
            let (best, outstanding) = l.best_for(&l.target, false);
            let Some(best) = best else {
                return if outstanding == 0 {
                    Step::Done { closest: None }
                } else {
                    Step::Wait(None)
                };
            };
            let c = l.candidate(best);
            match c.state {
                CandidateState::Fresh if outstanding == 0 => {
                    return Step::Send {
                        contact: c.contact,
                        target: l.rpc_target(),
                    }
                }
                CandidateState::Fresh | CandidateState::InFlight { .. } => {
                    return l.widen(now, outstanding)
                }
                CandidateState::Answered => match next_target(&l.key, &l.target, l.i, l.b) {
                    Some((t, i)) => {
                        l.target = t;
                        l.i = i;
                    }
                    None => {
                        let reask = l.reask_closest && !c.asked_key;
                        if reask && outstanding == 0 {
                            return Step::Send {
                                contact: c.contact,
                                target: l.key,
                            };
                        }
                        if reask {
                            return Step::Wait(None);
                        }
                        if l.breadth > 1 {
                            return l.widen_to_breadth(c.contact, outstanding);
                        }
                        return Step::Done {
                            closest: Some(c.contact),
                        };
                    }
                },
                CandidateState::Failed => unreachable!(),
            }
        }
    }

    /// Skipping the targets to which the closest node stays the closest
    /// decides every step as a scan for each target did, and leaves t and i
    /// where it left them: b = 1, 2 and 4, walks with failures, stalls
    /// (α = 3), breadth 1 and 8, with and without the re-ask.
    #[test]
    fn skipping_targets_steps_as_a_scan_for_each_did() {
        let ids = network(400, 11);
        let mut rng = Rng::new(12);
        let mut sends = 0;
        for trial in 0..120 {
            let mut key = Id::ZERO;
            rng.fill(&mut key.0);
            if trial % 10 == 0 {
                // A key held by a node: t reaches k with it the closest.
                key = ids[trial + 1];
            }
            let me = ids[trial];
            let b = [1, 2, 4][trial % 3];
            let seeds = closest_to(&ids, &me, 8, &me);
            let mut fast = Lookup::new(key, me, b, 3, Duration::from_millis(500), 16, seeds);
            if trial % 4 == 1 {
                fast = fast.with_breadth(8);
            }
            if trial % 4 == 2 {
                fast = fast.without_reask();
            }
            let mut slow = fast.clone();
            let mut now = Time::ZERO;
            let mut in_flight: Vec<(Contact, Id)> = Vec::new();
            for txid in 0..200 {
                now = now + Duration::from_millis(200);
                let a = fast.step(now);
                let e = step_by_scans(&mut slow, now);
                assert_eq!(a, e, "trial {trial} step {txid}");
                assert_eq!((fast.target, fast.i), (slow.target, slow.i));
                match a {
                    Step::Send { contact, target } => {
                        sends += 1;
                        fast.sent(&contact.id, target, txid, now);
                        slow.sent(&contact.id, target, txid, now);
                        in_flight.push((contact, target));
                    }
                    Step::Wait(_) if in_flight.is_empty() => break,
                    Step::Wait(_) => {}
                    Step::Done { .. } => break,
                }
                // Answer or fail one of the RPCs in flight, or none (a stall).
                if !in_flight.is_empty() && rng.below(3) > 0 {
                    let (c, t) = in_flight.remove(rng.below(in_flight.len() as u64) as usize);
                    if rng.below(5) == 0 {
                        fast.on_failure(&c.id);
                        slow.on_failure(&c.id);
                    } else {
                        let reply = closest_to(&ids, &t, 8, &c.id);
                        assert!(fast.on_answer(&c.id, None, &reply));
                        assert!(slow.on_answer(&c.id, None, &reply));
                    }
                }
            }
        }
        assert!(sends > 600, "{sends}");
    }

    /// A candidate costs the lookup no more than a whole [`Candidate`] did
    /// before its id and state moved to `keys`.
    #[test]
    fn a_candidate_costs_what_it_did() {
        use std::mem::size_of;
        assert!(
            size_of::<Held>() + size_of::<Key>() <= size_of::<Candidate>(),
            "{} + {} > {}",
            size_of::<Held>(),
            size_of::<Key>(),
            size_of::<Candidate>()
        );
    }

    #[test]
    fn lookup_with_no_candidates_is_done_at_once() {
        let mut l = Lookup::new(
            Id([1; 20]),
            Id::ZERO,
            1,
            3,
            Duration::from_millis(500),
            64,
            [],
        );
        assert_eq!(l.step(Time::ZERO), Step::Done { closest: None });
    }
}
