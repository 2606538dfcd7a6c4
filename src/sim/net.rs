//! The simulated network: an event queue in virtual time that carries
//! datagrams between [`Node`]s over links with delay and loss.
//!
//! Time jumps from one event to the next; nothing sleeps. Every datagram is
//! encoded and parsed exactly as on a real socket, so the simulator exercises
//! the same bytes the server does. Ties in time are broken by the node that
//! made the event (the sender of a datagram, the node of a wake-up) and that
//! node's own count of the events it made, and loss is drawn from a hash of
//! the seed and that same key, so one seed gives one run: the same run on
//! one thread or several.
//!
//! **In lanes** ([`Sim::with_threads`]): each node lives in one of P
//! lanes, each lane with its own event queue: where the links say
//! ([`Links::lanes`]: the world model keeps nearby sites' nodes in one lane),
//! or else node `i` in lane `i mod P`. No datagram between lanes arrives
//! sooner than a lookahead after it is sent (the least one-way delay
//! between nodes of different lanes, at least [`Links::min_one_way`]), so
//! virtual time is cut into windows of that length: within one, the
//! lanes' events are independent
//! (what a node sends in it arrives after it), each lane runs its own, and
//! datagrams for another lane wait in a mailbox until the window's end (a
//! conservative, window-synchronous parallel simulation). Each node sees
//! the same inputs in the same order whatever P is, so the run is the
//! same. The core crate starts no thread: the `coral` binary registers a
//! [`LaneRunner`] that runs each lane on a thread of its own; without one
//! the lanes take turns on the caller's.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;

use crate::dsht::node::{Event, Node, TransmitRoom};
use crate::sim::queue::EventQueue;
use crate::time::{Duration, Time};

/// A node's first routers (nearest first) and its directly connected
/// subnets: the input of its clustering hints (§4.4).
pub type HintPath = (Vec<IpAddr>, Vec<(IpAddr, u8)>);

/// Datagrams on the wire at once, network-wide; beyond it a datagram is lost
/// (counted in [`NetStats::lost`]), as on a congested network.
pub const DATAGRAMS_IN_FLIGHT_MAX: usize = 1 << 22;

/// The links between simulated nodes, by node index.
pub trait Links: Sync {
    /// One-way delay from `a` to `b`.
    fn one_way(&self, a: usize, b: usize) -> Duration;
    /// A lower bound on every [`Links::one_way`]: the lookahead of a run on
    /// several threads (zero: one thread only).
    fn min_one_way(&self) -> Duration {
        Duration::ZERO
    }
    /// Nodes to `p` lanes, when the model knows a better cut than node `i`
    /// in lane `i mod p`: each node's lane (by index, for every node the
    /// links know), and a lower bound on every [`Links::one_way`] between
    /// nodes of different lanes, at least [`Links::min_one_way`] (the
    /// lookahead of a run on `p` threads). None: `i mod p`, with
    /// [`Links::min_one_way`].
    fn lanes(&self, _p: usize) -> Option<(Vec<u16>, Duration)> {
        None
    }
    /// Probability that a datagram from `a` to `b` is lost.
    fn loss(&self, _a: usize, _b: usize) -> f64 {
        0.0
    }
    /// The routers and subnets node `a` would find with the runtime's
    /// probe, when the model has a topology (None: no hints).
    fn hint_path(&self, _a: usize) -> Option<HintPath> {
        None
    }
}

/// Every link has the same delay and no loss.
#[derive(Clone, Copy, Debug)]
pub struct ConstantLinks(pub Duration);

impl Links for ConstantLinks {
    fn one_way(&self, _a: usize, _b: usize) -> Duration {
        self.0
    }

    fn min_one_way(&self) -> Duration {
        self.0
    }
}

/// Per-pair delays spread uniformly in `[min, max)` by hashing the pair:
/// symmetric, fixed for a seed, and free of per-pair storage.
#[derive(Clone, Copy, Debug)]
pub struct HashedLinks {
    /// Smallest one-way delay.
    pub min: Duration,
    /// Largest one-way delay.
    pub max: Duration,
    /// Varies the assignment of delays to pairs.
    pub seed: u64,
}

impl Links for HashedLinks {
    fn one_way(&self, a: usize, b: usize) -> Duration {
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let mut x = self.seed ^ ((lo as u64) << 32 | hi as u64);
        x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        let span = self
            .max
            .as_micros()
            .saturating_sub(self.min.as_micros())
            .max(1);
        Duration::from_micros(self.min.as_micros() + x % span)
    }

    fn min_one_way(&self) -> Duration {
        self.min
    }
}

/// The address of simulated node `i`: 10.x.y.z from the index, port 7000,
/// each of the first 65,535 nodes in a /24 of its own (the index's low 16
/// bits name the /24, the high bits the host): routing tables and stores
/// limit what one /24 may hold (SECURITY.md), and the simulated Internet,
/// like the real one, spreads volunteer nodes over many networks.
/// (Private addresses are fine inside the simulator: nothing leaves it.)
pub fn sim_addr(i: usize) -> SocketAddr {
    let n = (i as u32 + 1) & 0x00ff_ffff;
    let low = ((n << 8) | (n >> 16)) & 0x00ff_ffff;
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | low)), 7000)
}

/// The index whose [`sim_addr`] is `addr`, if any (its inverse).
pub fn sim_index(addr: SocketAddr) -> Option<usize> {
    let SocketAddr::V4(a) = addr else {
        return None;
    };
    let ip = u32::from(*a.ip());
    let low = ip & 0x00ff_ffff;
    let n = ((low >> 8) | (low << 16)) & 0x00ff_ffff;
    (a.port() == 7000 && ip >> 24 == 10 && n != 0).then(|| n as usize - 1)
}

/// An event: small and `Copy`, so the queue moves no bytes of datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    /// Deliver the datagram in this slot of `Lane::in_flight`.
    Deliver(u32),
    /// Wake this node for its timers.
    Wake(u32),
    /// Call the driver for this node ([`Sim::schedule`], [`Driver`]).
    Drive(u32),
}

/// A datagram on the wire. Its buffer is recycled: once delivered, it goes
/// back to a node to encode its next datagram into.
#[derive(Debug)]
#[repr(align(64))]
struct InFlight {
    to: usize,
    /// The address it was sent from.
    from: SocketAddr,
    bytes: Vec<u8>,
}

/// A node's wake-up: its next deadline and the wake-ups queued for it.
///
/// A node's deadline moves all the time (an RPC sent brings it nearer, an
/// answer takes it back to the next RPC's or the maintenance tick), and
/// queueing a wake-up at every move left about a fifth of all events
/// stale (issue 27). So a wake-up is queued only when the deadline moves
/// earlier than every one queued for the node; a deadline that moves later
/// is found when the earliest queued wake-up comes, and queued then. Every
/// deadline still takes its place in the order (the node's next key,
/// `Lane::next_key`) when it is set, and a deadline that comes back
/// to the time of a wake-up still queued takes that one's place, as the
/// first of a node's wake-ups queued for a time fired when every move was
/// queued: each wake-up fires where it fired then, and every other event
/// keeps its number. One cache line a node: read on every input to the
/// node, it must cost no more than the 16-byte deadline it replaced
/// (benches/README.md, "Session 9, the simulator's CPU").
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Wake {
    /// The node's next deadline ([`Time::MAX`]: none).
    at: Time,
    /// Its place among events of the same time.
    seq: u64,
    /// The (time, place) of wake-ups queued for the node and not yet come,
    /// earliest first ([`Time::MAX`]: none); one pushed out of the last
    /// entry is still queued, and fires or is skipped by its time alone.
    queued: [(Time, u64); WAKES_KEPT],
    /// Deadlines set before and left, or pushed out of `queued`, whose
    /// wake-ups would still be to come: one that comes back takes its
    /// first place. The latest are kept (see [`Wake::leave`]).
    left: [(Time, u64); LEFT_KEPT],
}

/// The deadlines left that [`Wake`] keeps.
const LEFT_KEPT: usize = 1;

/// The wake-ups queued for a node that [`Wake`] keeps track of.
const WAKES_KEPT: usize = 2;

impl Wake {
    const NONE: Wake = Wake {
        at: Time::MAX,
        seq: 0,
        queued: [(Time::MAX, 0); WAKES_KEPT],
        left: [(Time::MAX, 0); LEFT_KEPT],
    };

    /// Records a wake-up queued at (`at`, `seq`), earlier than all others.
    fn queue(&mut self, at: Time, seq: u64, popped: (Time, u64)) {
        let (t, s) = self.queued[WAKES_KEPT - 1];
        if t != Time::MAX {
            self.leave(t, s, popped);
        }
        self.queued.copy_within(0..WAKES_KEPT - 1, 1);
        self.queued[0] = (at, seq);
    }

    /// Keeps (`at`, `seq`), a deadline's place that may come back, in
    /// `left`: in the place of one past or else of the earliest, as the
    /// latest are the ones that come back (the maintenance tick, while RPC
    /// deadlines come and go).
    fn leave(&mut self, at: Time, seq: u64, popped: (Time, u64)) {
        let k = (0..LEFT_KEPT)
            .min_by_key(|&k| {
                let (t, s) = self.left[k];
                if t == Time::MAX || (t, s) <= popped {
                    Time::ZERO
                } else {
                    t
                }
            })
            .unwrap_or(0);
        let (t, s) = self.left[k];
        if t == Time::MAX || t < at || (t, s) <= popped {
            self.left[k] = (at, seq);
        }
    }

    /// Forgets the earliest queued wake-up if it is (`at`, `seq`).
    fn came(&mut self, at: Time, seq: u64) {
        if self.queued[0] == (at, seq) {
            self.queued.copy_within(1.., 0);
            self.queued[WAKES_KEPT - 1] = (Time::MAX, 0);
        }
    }
}

/// Network-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams sent by all nodes.
    pub datagrams: u64,
    /// Bytes sent by all nodes.
    pub bytes: u64,
    /// Datagrams lost on links or sent to crashed nodes.
    pub lost: u64,
    /// Datagrams sent to addresses no node has.
    pub unroutable: u64,
    /// Events processed.
    pub events: u64,
    /// Wake-ups skipped as superseded (the node's deadline moved after
    /// they were queued): events that touch no node. Since session 9 a
    /// node has one wake-up queued at a time, so these are few: one is
    /// stale when the deadline moved later (it queues the deadline) or the
    /// node crashed.
    pub stale_wakes: u64,
}

impl NetStats {
    fn add(&mut self, o: &NetStats) {
        self.datagrams += o.datagrams;
        self.bytes += o.bytes;
        self.lost += o.lost;
        self.unroutable += o.unroutable;
        self.events += o.events;
        self.stale_wakes += o.stale_wakes;
    }
}

/// Bits of an event's key that count the events its node made; the node's
/// index takes the bits above (a node may make 2^40 events).
const KEY_COUNT_BITS: u32 = 40;

/// What the simulator calls at a node's driver events ([`Sim::schedule`]):
/// an experiment's load, given to [`Sim::run_until_with`], one driver a
/// lane. It runs on the lane's thread, between the node's other events.
pub trait Driver: Send {
    /// Node `i`'s driver event came at `now`: call into the node (its
    /// output is sent after); returns when to come again, if ever.
    fn fire(&mut self, i: usize, node: &mut Node, now: Time) -> Option<Time>;
    /// Node `i` completed an operation; false drops it, true keeps it for
    /// [`Sim::take_events`].
    fn completed(&mut self, _i: usize, _e: &Event) -> bool {
        true
    }
}

/// The driver of a run with no driver events.
struct NoDriver;

impl Driver for NoDriver {
    fn fire(&mut self, _i: usize, _node: &mut Node, _now: Time) -> Option<Time> {
        None
    }
}

/// A datagram for another lane, held until the window's end (opaque: a
/// [`LaneRunner`] only moves it from lane to lane).
pub struct Mail {
    at: Time,
    key: u64,
    to: usize,
    from: SocketAddr,
    bytes: Vec<u8>,
}

/// Buffers a lane keeps for datagrams that came from other lanes' nodes,
/// to encode its own next datagrams into.
const SPARE_BUFFERS_KEPT: usize = 256;

/// What every lane reads and none changes while the lanes run: the links
/// and where each address leads.
struct Wires<'a, L> {
    links: &'a L,
    at_home: &'a [bool],
    by_addr: &'a HashMap<SocketAddr, usize, crate::dsht::id::FastBuildHasher>,
    seed: u64,
    /// Each node's lane and place in it (empty on one lane: node `i` at `i`).
    places: &'a [Place],
    /// The least one-way delay between nodes of different lanes.
    lookahead: Duration,
}

/// Where a node lives on several lanes: its lane, and its place in the
/// lane's arrays.
#[derive(Clone, Copy, Debug)]
struct Place {
    lane: u32,
    local: u32,
}

impl<L> Wires<'_, L> {
    /// Node `i`'s lane.
    fn lane(&self, i: usize) -> usize {
        self.places.get(i).map_or(0, |p| p.lane as usize)
    }

    /// Node `i`'s place in its lane's arrays.
    fn local(&self, i: usize) -> usize {
        if self.places.is_empty() {
            i
        } else {
            self.places[i].local as usize
        }
    }

    /// The node at `addr`, if any.
    fn index_of(&self, addr: SocketAddr) -> Option<usize> {
        match sim_index(addr) {
            Some(i) if self.at_home.get(i) == Some(&true) => Some(i),
            _ => self.by_addr.get(&addr).copied(),
        }
    }
}

/// One thread's share of the network: its nodes (those the links put in
/// its lane, [`Links::lanes`], or else those with `i mod lanes == index`),
/// in the order they were added, and their events.
struct Lane {
    index: usize,
    lanes: usize,
    now: Time,
    nodes: Vec<Node>,
    alive: Vec<bool>,
    wakes: Vec<Wake>,
    /// Each node's count of the events it made: the low bits of their keys.
    made: Vec<u64>,
    /// The key (time, node and count) of the last event popped: a wake-up
    /// keyed later is still queued.
    popped: (Time, u64),
    /// Test builds: each node's moves to each deadline, by key.
    #[cfg(test)]
    moves_to: HashMap<(usize, Time), Vec<u64>>,
    /// Test builds: deadlines given another place than queueing every
    /// move would give them.
    #[cfg(test)]
    misplaced_wakes: u64,
    queue: EventQueue<What>,
    /// Datagrams on the wire to this lane's nodes, by slot; at most
    /// [`DATAGRAMS_IN_FLIGHT_MAX`] over all lanes.
    in_flight: Vec<InFlight>,
    /// Free slots of `in_flight`.
    free: Vec<u32>,
    /// Datagrams for other lanes sent in this window, by lane.
    out: Vec<Vec<Mail>>,
    /// Buffers of datagrams that came from other lanes.
    spare: Vec<Vec<u8>>,
    events: Vec<(usize, Event)>,
    buf: Vec<u8>,
    /// The transmit queue lent to each node given an input
    /// ([`Lane::lend`]), and whether a node holds it.
    room: TransmitRoom,
    lent: bool,
    stats: NetStats,
    /// Sees every datagram delivered to this lane's nodes.
    tap: Option<Tap>,
}

impl Lane {
    fn new(index: usize, lanes: usize) -> Lane {
        Lane {
            index,
            lanes,
            now: Time::ZERO,
            nodes: Vec::new(),
            alive: Vec::new(),
            wakes: Vec::new(),
            made: Vec::new(),
            popped: (Time::ZERO, 0),
            #[cfg(test)]
            moves_to: HashMap::new(),
            #[cfg(test)]
            misplaced_wakes: 0,
            queue: EventQueue::new(),
            in_flight: Vec::new(),
            free: Vec::new(),
            out: (0..lanes).map(|_| Vec::new()).collect(),
            spare: Vec::new(),
            events: Vec::new(),
            buf: Vec::with_capacity(2048),
            room: TransmitRoom::default(),
            lent: false,
            stats: NetStats::default(),
            tap: None,
        }
    }

    /// The key of the next event node `i` (at `l` in this lane) makes: the
    /// node, then its count.
    fn next_key(&mut self, i: usize, l: usize) -> u64 {
        let n = self.made[l];
        assert!(n < 1 << KEY_COUNT_BITS, "node {i} made 2^40 events");
        self.made[l] = n + 1;
        (i as u64) << KEY_COUNT_BITS | n
    }

    /// Processes every event of this lane up to and including `until`.
    ///
    /// A node's state depends only on its own events (datagrams to it, its
    /// wake-ups and driver events), all in its lane, and a lane pops them
    /// in key order: (time, the node that made the event, that node's
    /// count). Nothing is queued behind the event being handled (a
    /// datagram takes at least [`Links::min_one_way`] to another lane, a
    /// wake-up comes at least a microsecond later), and the wake-ups'
    /// bookkeeping compares keys only with the key of the node's own event
    /// being handled, or with (`until`, max) between runs. So every node
    /// sees the same events in the same order on any number of lanes.
    fn run<L: Links, D: Driver>(&mut self, until: Time, wires: &Wires<'_, L>, driver: &mut D) {
        while let Some((at, key, what)) = self.queue.pop_until_keyed(until) {
            self.now = at;
            self.popped = (at, key);
            self.stats.events += 1;
            let next = self.prefetch_ahead(wires);
            match what {
                What::Deliver(slot) => {
                    self.free.push(slot);
                    let d = &self.in_flight[slot as usize];
                    let to = d.to;
                    let l = wires.local(to);
                    if !self.alive[l] {
                        self.stats.lost += 1;
                        continue;
                    }
                    if let Some(tap) = self.tap.as_mut() {
                        let from = wires.index_of(d.from).unwrap_or(usize::MAX);
                        tap(at, from, to, &d.bytes);
                    }
                    let from = d.from;
                    self.lend(l);
                    let d = &self.in_flight[slot as usize];
                    let _ = self.nodes[l].handle(at, from, &d.bytes);
                    self.flush(to, wires);
                }
                What::Wake(node) => {
                    let node = node as usize;
                    let l = wires.local(node);
                    let w = &mut self.wakes[l];
                    w.came(at, key);
                    let alive = self.alive[l];
                    if !alive || w.at != at {
                        self.stats.stale_wakes += 1;
                        // The deadline moved later: queue it now, unless
                        // a wake-up no later is still to come.
                        if alive && w.at < w.queued[0].0 {
                            w.queue(w.at, w.seq, self.popped);
                            self.queue.push_keyed(w.at, w.seq, What::Wake(node as u32));
                        }
                        continue;
                    }
                    // `arm` keeps the deadline at the node's next one, so a
                    // wake-up that is still current finds a timer due.
                    self.set_deadline(node, l, Time::MAX);
                    self.lend(l);
                    self.nodes[l].handle_timeout(at);
                    self.flush(node, wires);
                }
                What::Drive(node) => {
                    let node = node as usize;
                    let l = wires.local(node);
                    if !self.alive[l] {
                        continue;
                    }
                    self.lend(l);
                    let again = driver.fire(node, &mut self.nodes[l], at);
                    self.flush(node, wires);
                    if let Some(t) = again {
                        self.schedule(node, l, t.max(at));
                    }
                }
            }
            if !self.events.is_empty() {
                self.events.retain(|(i, e)| driver.completed(*i, e));
            }
            if let Some((n, slot)) = next {
                self.nodes[n].prefetch_top_values();
                if let Some(slot) = slot {
                    self.nodes[n].prefetch_sender_contacts(&self.in_flight[slot as usize].bytes);
                }
            }
        }
        self.now = self.now.max(until);
        // Every event up to `until` has come: the same place for the calls
        // between runs (`Sim::with_node`, crashes) on any number of lanes,
        // where the last event popped would differ from lane to lane.
        self.popped = self.popped.max((until, u64::MAX));
    }

    /// Prefetching, in steps an event apart: at 10,000 nodes nearly every
    /// line a node reads is a cache miss, and the misses depend on one
    /// another (the node, then its levels, then the top level's store, then
    /// that store's values: a hot key's put and get read all four). Before
    /// each event, the fourth event ahead's datagram slot (`in_flight`,
    /// whose entry names the node and the bytes) starts loading; the
    /// third's node, with its datagram and wake-up; the second's levels
    /// and, for a reply, its RPC's slot among the node's outstanding ones
    /// ([`Node::prefetch_datagram`]); the next one's top-level store and
    /// the buckets of its datagram's sender in every level's table
    /// ([`Node::prefetch_sender_bucket`]). After it, the next one's values
    /// and those buckets' contacts. (Those were the join's largest misses
    /// at 100,000 nodes; benches/README.md "Session 17".) A put/get tick loads only
    /// the node's lines an API call reads ([`Node::prefetch_call`]): whole
    /// nodes three events ahead kept the CPU's fill buffers full. (With
    /// two steps, node then levels, a hot key's store and values were
    /// misses on the path; this chain: 0.83–0.96× the CPU at 10,000 nodes,
    /// the same report, benches/README.md "Session 16".) A hint only:
    /// results never depend on it. Returns the next event's node's place
    /// in the lane, and its datagram's slot if it is a delivery.
    fn prefetch_ahead<L>(&self, wires: &Wires<'_, L>) -> Option<(usize, Option<u32>)> {
        if let Some(&What::Deliver(slot)) = self.queue.peek_hint_nth(3) {
            let d = &self.in_flight[slot as usize];
            crate::dsht::prefetch::prefetch((d as *const InFlight).cast(), 1);
        }
        let third = self.queue.peek_hint_nth(2);
        if let Some(n) = self.place_of(third, wires, true) {
            if matches!(third, Some(What::Drive(_))) {
                self.nodes[n].prefetch_call();
            } else {
                self.nodes[n].prefetch();
            }
            crate::dsht::prefetch::prefetch((&self.wakes[n] as *const Wake).cast(), 1);
        }
        let second = self.queue.peek_hint_nth(1);
        if let Some(n) = self.place_of(second, wires, false) {
            self.nodes[n].prefetch_levels();
            if let Some(&What::Deliver(slot)) = second {
                self.nodes[n].prefetch_datagram(&self.in_flight[slot as usize].bytes);
            }
        }
        let first = self.queue.peek_hint();
        let next = self.place_of(first, wires, false)?;
        self.nodes[next].prefetch_top_store();
        let slot = match first {
            Some(&What::Deliver(slot)) => {
                self.nodes[next].prefetch_sender_bucket(&self.in_flight[slot as usize].bytes);
                Some(slot)
            }
            _ => None,
        };
        Some((next, slot))
    }

    /// The place in this lane of the node event `what` is for; with
    /// `bytes`, a datagram's bytes start loading too.
    fn place_of<L>(&self, what: Option<&What>, wires: &Wires<'_, L>, bytes: bool) -> Option<usize> {
        Some(wires.local(match *what? {
            What::Deliver(slot) => {
                let d = &self.in_flight[slot as usize];
                if bytes {
                    crate::dsht::prefetch::prefetch(d.bytes.as_ptr(), d.bytes.len());
                }
                d.to
            }
            What::Wake(n) | What::Drive(n) => n as usize,
        }))
    }

    /// Queues a driver event for node `i` (at `l` in this lane) at `at`.
    fn schedule(&mut self, i: usize, l: usize, at: Time) {
        let key = self.next_key(i, l);
        self.queue.push_keyed(at, key, What::Drive(i as u32));
    }

    /// Takes a datagram from another lane onto this lane's queue.
    fn receive(&mut self, m: Mail) {
        let Some(slot) = self.slot() else {
            self.stats.lost += 1;
            return;
        };
        let d = &mut self.in_flight[slot as usize];
        d.to = m.to;
        d.from = m.from;
        let old = std::mem::replace(&mut d.bytes, m.bytes);
        if self.spare.len() < SPARE_BUFFERS_KEPT {
            self.spare.push(old);
        }
        self.queue.push_keyed(m.at, m.key, What::Deliver(slot));
    }

    /// A free slot of `in_flight`, if the lane may hold one more datagram.
    fn slot(&mut self) -> Option<u32> {
        match self.free.pop() {
            Some(slot) => Some(slot),
            None if self.in_flight.len() < DATAGRAMS_IN_FLIGHT_MAX / self.lanes => {
                self.in_flight.push(InFlight {
                    to: 0,
                    from: sim_addr(0),
                    bytes: Vec::new(),
                });
                Some((self.in_flight.len() - 1) as u32)
            }
            None => None,
        }
    }

    /// Lends node `l` the lane's transmit room for an input
    /// ([`Node::swap_transmit_room`]): its datagrams are encoded into the
    /// buffers of those delivered before, and [`Lane::flush`] takes the
    /// room back. (Each datagram had a buffer allocated and freed, often by
    /// the other thread, and each input a queue: 5.7 % of a run on two
    /// threads, benches/README.md "Session 19".)
    #[inline]
    fn lend(&mut self, l: usize) {
        debug_assert!(!self.lent, "the transmit room lent twice");
        self.nodes[l].swap_transmit_room(&mut self.room);
        self.lent = true;
    }

    /// Sends everything node `i` has queued and schedules its next wake-up;
    /// takes back the transmit room if the node holds it ([`Lane::lend`]).
    fn flush<L: Links>(&mut self, i: usize, wires: &Wires<'_, L>) {
        let now = self.now;
        let l = wires.local(i);
        let from = self.nodes[l].addr();
        let lent = std::mem::take(&mut self.lent);
        loop {
            let polled = if lent {
                self.nodes[l].poll_transmit_keeping(&mut self.buf)
            } else {
                self.nodes[l].poll_transmit(&mut self.buf)
            };
            let Some(to_addr) = polled else {
                break;
            };
            self.stats.datagrams += 1;
            self.stats.bytes += self.buf.len() as u64;
            let key = self.next_key(i, l);
            let Some(to) = wires.index_of(to_addr) else {
                self.stats.unroutable += 1;
                continue;
            };
            let loss = wires.links.loss(i, to);
            if loss > 0.0 && crate::rng::Rng::new(wires.seed ^ key.rotate_left(17)).chance(loss) {
                self.stats.lost += 1;
                continue;
            }
            let one_way = wires.links.one_way(i, to);
            let at = now + one_way;
            let lane = wires.lane(to);
            if lane != self.index {
                // It must arrive after the window the lanes are running.
                assert!(
                    one_way >= wires.lookahead,
                    "a delay between lanes under the lookahead (Links::lanes, Links::min_one_way)"
                );
                let fresh = self.spare.pop().unwrap_or_default();
                let bytes = std::mem::replace(&mut self.buf, fresh);
                self.out[lane].push(Mail {
                    at,
                    key,
                    to,
                    from,
                    bytes,
                });
                continue;
            }
            let Some(slot) = self.slot() else {
                self.stats.lost += 1;
                continue;
            };
            // The datagram moves into the slot; the slot's old buffer goes
            // back to the next node that sends.
            let d = &mut self.in_flight[slot as usize];
            d.to = to;
            d.from = from;
            std::mem::swap(&mut d.bytes, &mut self.buf);
            self.queue.push_keyed(at, key, What::Deliver(slot));
        }
        if lent {
            self.nodes[l].swap_transmit_room(&mut self.room);
        }
        while let Some(e) = self.nodes[l].poll_event() {
            self.events.push((i, e));
        }
        // Contacts a node learnt are for other cores of a real node; here
        // nobody wants them (left alone, each node would hold 1,024).
        while self.nodes[l].poll_learned().is_some() {}
        self.arm(i, l);
    }

    /// Schedules node `i`'s (at `l` in this lane) next wake-up at its next
    /// deadline.
    ///
    /// Called after every input to the node, while it is in cache. A
    /// deadline earlier than the wake-up queued for the node is queued; a
    /// later one waits for that wake-up (see [`Wake`]).
    fn arm(&mut self, i: usize, l: usize) {
        // A deadline at `Time::MAX` is never reached: none. One due now
        // comes a microsecond later, after every event of this time: a
        // wake-up is never queued behind the event being handled, so its
        // key is later than every key popped (the order of a node's events
        // on any number of lanes depends on that; see `Lane::run`).
        let next = self.nodes[l]
            .poll_timeout()
            .map_or(Time::MAX, |t| t.max(self.now + Duration::from_micros(1)));
        if next == self.wakes[l].at {
            return;
        }
        self.set_deadline(i, l, next);
        let w = &mut self.wakes[l];
        if next < w.queued[0].0 {
            w.queue(next, w.seq, self.popped);
            self.queue.push_keyed(next, w.seq, What::Wake(i as u32));
        }
    }

    /// Sets node `i`'s (at `l` in this lane) next deadline to `next`
    /// (`Time::MAX`: none), taking its place in the order: the node's next
    /// key, or that of a wake-up still queued for that time (see [`Wake`]).
    fn set_deadline(&mut self, i: usize, l: usize, next: Time) {
        let popped = self.popped;
        let w = &mut self.wakes[l];
        if w.at != Time::MAX && w.queued.iter().all(|&(t, _)| t != w.at) {
            w.leave(w.at, w.seq, popped);
        }
        w.at = next;
        if next == Time::MAX {
            return;
        }
        let reserved = self.next_key(i, l);
        let w = &mut self.wakes[l];
        let mut seq = reserved;
        for &(t, s) in &w.queued {
            if t == next {
                seq = seq.min(s);
            }
        }
        for &(t, s) in &w.left {
            if t == next && (t, s) > popped {
                seq = seq.min(s);
            }
        }
        w.seq = seq;
        #[cfg(test)]
        self.check_place(i, next, reserved, seq);
    }

    /// Test builds: checks that a deadline's place is the one it had when
    /// every move queued a wake-up: the first of the node's moves to that
    /// time whose wake-up would not have come yet. Counts each that is not
    /// in `misplaced_wakes`.
    #[cfg(test)]
    fn check_place(&mut self, i: usize, at: Time, reserved: u64, seq: u64) {
        let moves = self.moves_to.entry((i, at)).or_default();
        moves.push(reserved);
        let popped = self.popped;
        let first = moves.iter().copied().filter(|&s| (at, s) > popped).min();
        if first != Some(seq) {
            self.misplaced_wakes += 1;
        }
    }
}

/// Many nodes on one simulated network.
pub struct Sim<L: Links> {
    now: Time,
    /// The nodes and their events, in lanes (one per thread).
    lanes: Vec<Lane>,
    len: usize,
    /// Whether node `i` has the address [`sim_addr`]`(i)`: such nodes are
    /// found from their address with no look-up (every node of the
    /// experiments; a hash probe per datagram was a cache miss at 10,000
    /// nodes). Nodes with any other address are in `by_addr`.
    at_home: Vec<bool>,
    by_addr: HashMap<SocketAddr, usize, crate::dsht::id::FastBuildHasher>,
    seed: u64,
    links: L,
    /// On several lanes: each node's lane from the links ([`Links::lanes`];
    /// None: node `i` in lane `i mod lanes`).
    lane_map: Option<Vec<u16>>,
    /// On several lanes: where each node added lives (empty on one lane).
    places: Vec<Place>,
    /// The least one-way delay between nodes of different lanes: the
    /// windows' length.
    lookahead: Duration,
}

/// A callback that sees every delivered datagram: (time, sender index,
/// receiver index, bytes). For experiments that ask who sends what to whom
/// (the hot-spot experiment's busiest node); results never depend on it.
/// On several threads, each lane has its own ([`Sim::set_taps`]).
pub type Tap = Box<dyn FnMut(Time, usize, usize, &[u8]) + Send>;

impl<L: Links> Sim<L> {
    /// An empty network at time zero, run on one thread; `seed` drives
    /// link loss.
    pub fn new(links: L, seed: u64) -> Sim<L> {
        Sim::with_threads(links, seed, 1)
    }

    /// An empty network at time zero whose nodes are run by `threads`
    /// threads (at least one; one lane each): the same run as on one
    /// thread. More than one needs links with a [`Links::min_one_way`]
    /// above zero. The nodes go to lanes as [`Links::lanes`] says, or
    /// else node `i` to lane `i mod threads`.
    pub fn with_threads(links: L, seed: u64, threads: usize) -> Sim<L> {
        let lanes = threads.max(1);
        assert!(
            lanes == 1 || links.min_one_way() > Duration::ZERO,
            "several threads need links with a least one-way delay"
        );
        assert!(lanes <= usize::from(u16::MAX), "at most 65,535 threads");
        let placed = if lanes > 1 { links.lanes(lanes) } else { None };
        let (lane_map, lookahead) = match placed {
            Some((map, lookahead)) => {
                assert!(
                    lookahead >= links.min_one_way(),
                    "lanes' lookahead under the links' min_one_way"
                );
                (Some(map), lookahead)
            }
            _ => (None, links.min_one_way()),
        };
        Sim {
            now: Time::ZERO,
            lanes: (0..lanes).map(|k| Lane::new(k, lanes)).collect(),
            len: 0,
            at_home: Vec::new(),
            by_addr: HashMap::default(),
            seed,
            links,
            lane_map,
            places: Vec::new(),
            lookahead,
        }
    }

    /// The lane node `i` goes to (it need not be added yet).
    fn lane_for(&self, i: usize) -> usize {
        let p = self.lanes.len();
        match &self.lane_map {
            _ if p == 1 => 0,
            Some(map) => usize::from(
                *map.get(i)
                    .expect("Links::lanes places every node the simulation adds"),
            ),
            None => i % p,
        }
    }

    /// Node `i`'s lane and place in it.
    fn place(&self, i: usize) -> (usize, usize) {
        match self.places.get(i) {
            Some(p) => (p.lane as usize, p.local as usize),
            None => (0, i),
        }
    }

    /// The least one-way delay between nodes of different lanes: the length
    /// of the windows a run on several threads is cut into.
    pub fn lookahead(&self) -> Duration {
        self.lookahead
    }

    /// The threads (lanes) the nodes are run by.
    pub fn threads(&self) -> usize {
        self.lanes.len()
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// The links.
    pub fn links(&self) -> &L {
        &self.links
    }

    /// The links, to change them mid-run (a rise in latency, a partition).
    pub fn links_mut(&mut self) -> &mut L {
        &mut self.links
    }

    /// Network-wide counters.
    pub fn stats(&self) -> NetStats {
        let mut s = NetStats::default();
        for lane in &self.lanes {
            s.add(&lane.stats);
        }
        s
    }

    /// Calls `tap` with every datagram delivered from now on (None: stop).
    /// One thread only: see [`Sim::set_taps`].
    pub fn set_tap(&mut self, tap: Option<Tap>) {
        assert_eq!(self.lanes.len(), 1, "set_tap on several threads");
        self.lanes[0].tap = tap;
    }

    /// Gives each lane the tap `make(lane)`, called for the datagrams
    /// delivered to the lane's nodes (on its thread).
    pub fn set_taps(&mut self, mut make: impl FnMut(usize) -> Tap) {
        for (k, lane) in self.lanes.iter_mut().enumerate() {
            lane.tap = Some(make(k));
        }
    }

    /// Removes every lane's tap.
    pub fn clear_taps(&mut self) {
        for lane in &mut self.lanes {
            lane.tap = None;
        }
    }

    /// Makes room for `additional` more nodes at once, so that adding them
    /// does not double the nodes' array past what it needs (a node is
    /// 1.7 KB inline: at 100,000 nodes, doubling to 131,072 slots held 53 MB
    /// for nobody).
    pub fn reserve(&mut self, additional: usize) {
        let mut more = vec![0usize; self.lanes.len()];
        for i in self.len..self.len + additional {
            more[self.lane_for(i)] += 1;
        }
        if self.lanes.len() > 1 {
            self.places.reserve_exact(additional);
        }
        for (lane, &more) in self.lanes.iter_mut().zip(&more) {
            lane.nodes.reserve_exact(more);
            lane.alive.reserve_exact(more);
            lane.wakes.reserve_exact(more);
            lane.made.reserve_exact(more);
        }
        self.at_home.reserve_exact(additional);
    }

    /// The lane of node `i` and its place in it, with the wires, at the
    /// current time.
    fn lane_of(&mut self, i: usize) -> (&mut Lane, usize, Wires<'_, L>) {
        let (k, l) = self.place(i);
        let lane = &mut self.lanes[k];
        lane.now = self.now;
        let wires = Wires {
            links: &self.links,
            at_home: &self.at_home,
            by_addr: &self.by_addr,
            seed: self.seed,
            places: &self.places,
            lookahead: self.lookahead,
        };
        (lane, l, wires)
    }

    /// Adds a node; returns its index.
    pub fn add(&mut self, node: Node) -> usize {
        let i = self.len;
        // An event's key holds its node's index above the count's bits.
        assert!(i < 1 << (64 - KEY_COUNT_BITS), "at most 2^24 nodes");
        self.len += 1;
        self.at_home.push(false);
        self.bind(i, node.addr());
        if self.lanes.len() > 1 {
            let k = self.lane_for(i);
            let local = self.lanes[k].nodes.len();
            self.places.push(Place {
                lane: k as u32,
                local: u32::try_from(local).expect("at most 2^24 nodes"),
            });
        }
        let (lane, _, wires) = self.lane_of(i);
        lane.nodes.push(node);
        lane.alive.push(true);
        lane.wakes.push(Wake::NONE);
        lane.made.push(0);
        lane.flush(i, &wires);
        i
    }

    /// Makes `addr` reach node `i`.
    fn bind(&mut self, i: usize, addr: SocketAddr) {
        if sim_index(addr) == Some(i) {
            self.at_home[i] = true;
        } else {
            self.at_home[i] = false;
            self.by_addr.insert(addr, i);
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Node {
        let (k, l) = self.place(i);
        &self.lanes[k].nodes[l]
    }

    /// All nodes, in index order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &Node> + '_ {
        (0..self.len).map(move |i| self.node(i))
    }

    /// Whether node `i` is running.
    pub fn is_alive(&self, i: usize) -> bool {
        let (k, l) = self.place(i);
        self.lanes[k].alive[l]
    }

    /// Calls into node `i` at the current time (an API call such as `put`),
    /// then sends what it produced.
    pub fn with_node<R>(&mut self, i: usize, f: impl FnOnce(&mut Node, Time) -> R) -> R {
        let now = self.now;
        let (lane, l, wires) = self.lane_of(i);
        lane.lend(l);
        let r = f(&mut lane.nodes[l], now);
        lane.flush(i, &wires);
        r
    }

    /// Queues a driver event for node `i` at `at` (not before now): the
    /// [`Driver`] given to [`Sim::run_until_with`] is called for it. With
    /// [`Sim::run_until`] such an event does nothing.
    pub fn schedule(&mut self, i: usize, at: Time) {
        let at = at.max(self.now);
        let (lane, l, _) = self.lane_of(i);
        lane.schedule(i, l, at);
    }

    /// Crashes node `i`: datagrams to it are lost until it is replaced.
    pub fn crash(&mut self, i: usize) {
        let (lane, l, _) = self.lane_of(i);
        lane.alive[l] = false;
        lane.set_deadline(i, l, Time::MAX);
    }

    /// Replaces node `i` with a fresh one (a restart: state is lost).
    pub fn restart(&mut self, i: usize, node: Node) {
        let old = self.node(i).addr();
        self.by_addr.remove(&old);
        self.bind(i, node.addr());
        let (lane, l, wires) = self.lane_of(i);
        lane.nodes[l] = node;
        lane.alive[l] = true;
        lane.set_deadline(i, l, Time::MAX);
        lane.flush(i, &wires);
    }

    /// Delivers a raw datagram to node `to` at the current time, as if sent
    /// from `from` (for injecting malformed input).
    pub fn inject(&mut self, to: usize, from: SocketAddr, bytes: &[u8]) {
        let now = self.now;
        let (lane, l, wires) = self.lane_of(to);
        lane.lend(l);
        let _ = lane.nodes[l].handle(now, from, bytes);
        lane.flush(to, &wires);
    }

    /// Completed operations since the last call, with the node that
    /// completed them (lane by lane: on one thread, in the order completed).
    pub fn take_events(&mut self) -> Vec<(usize, Event)> {
        if self.lanes.len() == 1 {
            return std::mem::take(&mut self.lanes[0].events);
        }
        self.drain_events().collect()
    }

    /// Completed operations since the last call, drained in place: unlike
    /// [`Sim::take_events`], the buffers keep their capacity, so a driver
    /// that drains often allocates nothing for them.
    pub fn drain_events(&mut self) -> impl Iterator<Item = (usize, Event)> + '_ {
        self.lanes.iter_mut().flat_map(|lane| lane.events.drain(..))
    }

    /// Processes every event up to and including `until`, then sets the
    /// clock to `until`.
    pub fn run_until(&mut self, until: Time) {
        let mut none: Vec<NoDriver> = (0..self.lanes.len()).map(|_| NoDriver).collect();
        self.run_until_with(until, &mut none);
    }

    /// [`Sim::run_until`], calling `drivers[k]` for the driver events of
    /// lane `k`'s nodes ([`Sim::with_threads`]); on several threads, in
    /// windows of the [`Sim::lookahead`].
    pub fn run_until_with<D: Driver>(&mut self, until: Time, drivers: &mut [D]) {
        assert_eq!(drivers.len(), self.lanes.len(), "one driver a lane");
        let wires = Wires {
            links: &self.links,
            at_home: &self.at_home,
            by_addr: &self.by_addr,
            seed: self.seed,
            places: &self.places,
            lookahead: self.lookahead,
        };
        if self.lanes.len() == 1 {
            self.lanes[0].run(until, &wires, &mut drivers[0]);
        } else if until >= self.now {
            run_windows(&mut self.lanes, self.now, until, &wires, drivers);
        }
        self.now = self.now.max(until);
        for lane in &mut self.lanes {
            lane.now = self.now;
        }
    }

    /// Starts loading node `i` and its wake-up's line (a cache hint for a
    /// driver about to call [`Sim::with_node`] on it: results never
    /// depend on it).
    pub fn prefetch(&self, i: usize) {
        if i >= self.len {
            return;
        }
        let (k, l) = self.place(i);
        let lane = &self.lanes[k];
        if let (Some(node), Some(w)) = (lane.nodes.get(l), lane.wakes.get(l)) {
            node.prefetch();
            crate::dsht::prefetch::prefetch((w as *const Wake).cast(), 1);
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// Test builds: deadlines given another place than queueing every
    /// move would give (see `check_place`): none, or the run may differ.
    #[cfg(test)]
    pub(crate) fn misplaced_wakes(&self) -> u64 {
        self.lanes.iter().map(|l| l.misplaced_wakes).sum()
    }
}

/// One lane's part of a run in windows ([`LaneRunner`]): what a runner on
/// several threads calls, each lane on its own thread.
pub trait LaneWindow: Send {
    /// The lane's index.
    fn index(&self) -> usize;
    /// Runs the lane's events before `end` (µs of virtual time); returns
    /// when its next event is: the earliest of its queue's and of the
    /// datagrams it sent to other lanes in the window (µs; `u64::MAX`:
    /// none).
    fn run_window(&mut self, end: u64) -> u64;
    /// Moves the datagrams sent in the window to lane `to` onto `into`.
    fn send_to(&mut self, to: usize, into: &mut Vec<Mail>);
    /// Takes datagrams sent to this lane by other lanes' nodes (in any
    /// order: a lane's queue orders them by key), leaving `mail` empty.
    fn receive(&mut self, mail: &mut Vec<Mail>);
}

/// Runs the lanes of a run in windows at once, one thread each (the
/// `coral` binary's, registered with [`set_lane_runner`]: the core crate
/// starts no thread). A runner does what [`run_windows_in_turn`] does, in
/// the same windows: from `from`, each window ends at [`window_end`]; in
/// it every lane runs ([`LaneWindow::run_window`]); then every lane's mail
/// goes to its lane, and the next window starts at [`next_start`] of the
/// window's end and the earliest time any lane returned; the run ends once
/// that is past `until`.
pub trait LaneRunner: Sync {
    /// Runs `lanes` from `from` to `until` (µs of virtual time, inclusive)
    /// in windows of `lookahead` µs.
    fn run(&self, lanes: &mut [&mut dyn LaneWindow], from: u64, until: u64, lookahead: u64);
}

static LANE_RUNNER: OnceLock<&'static dyn LaneRunner> = OnceLock::new();

/// Makes `runner` run every simulation on several lanes from now on (once
/// a process; later calls change nothing). Without one, the lanes of a
/// window run one after another on the caller's thread: the same run,
/// slower.
pub fn set_lane_runner(runner: &'static dyn LaneRunner) {
    let _ = LANE_RUNNER.set(runner);
}

/// The end (exclusive, µs) of the window that starts at `start`: a
/// lookahead later, or just past `until`.
pub fn window_end(start: u64, lookahead: u64, until: u64) -> u64 {
    start
        .saturating_add(lookahead.max(1))
        .min(until.saturating_add(1))
}

/// Where the window after one that ended at `end` starts, when the
/// earliest next event of any lane is at `earliest`: empty spans of time
/// are skipped.
pub fn next_start(end: u64, earliest: u64) -> u64 {
    end.max(earliest)
}

/// A lane with what it needs to run windows.
struct LaneJob<'a, 'w, L, D> {
    lane: &'a mut Lane,
    driver: &'a mut D,
    wires: &'a Wires<'w, L>,
}

impl<L: Links, D: Driver> LaneWindow for LaneJob<'_, '_, L, D> {
    fn index(&self) -> usize {
        self.lane.index
    }

    fn run_window(&mut self, end: u64) -> u64 {
        let lane = &mut *self.lane;
        lane.run(Time(end.saturating_sub(1)), self.wires, self.driver);
        let mut next = lane.queue.earliest().map_or(u64::MAX, |t| t.as_micros());
        for m in lane.out.iter().flatten() {
            next = next.min(m.at.as_micros());
        }
        next
    }

    fn send_to(&mut self, to: usize, into: &mut Vec<Mail>) {
        into.append(&mut self.lane.out[to]);
    }

    fn receive(&mut self, mail: &mut Vec<Mail>) {
        for m in mail.drain(..) {
            self.lane.receive(m);
        }
    }
}

/// Runs the lanes from `from` to `until` (inclusive) in windows of the
/// least one-way delay between lanes: on the registered [`LaneRunner`]'s
/// threads, or else [`run_windows_in_turn`].
fn run_windows<L: Links, D: Driver>(
    lanes: &mut [Lane],
    from: Time,
    until: Time,
    wires: &Wires<'_, L>,
    drivers: &mut [D],
) {
    let lookahead = wires.lookahead.as_micros().max(1);
    let mut jobs: Vec<LaneJob<'_, '_, L, D>> = lanes
        .iter_mut()
        .zip(drivers.iter_mut())
        .map(|(lane, driver)| LaneJob {
            lane,
            driver,
            wires,
        })
        .collect();
    let mut windows: Vec<&mut dyn LaneWindow> =
        jobs.iter_mut().map(|j| j as &mut dyn LaneWindow).collect();
    let (from, until) = (from.as_micros(), until.as_micros());
    match LANE_RUNNER.get() {
        Some(runner) => runner.run(&mut windows, from, until, lookahead),
        None => run_windows_in_turn(&mut windows, from, until, lookahead),
    }
}

/// [`LaneRunner::run`] on one thread: in each window the lanes run one
/// after another, then their mail goes round.
pub fn run_windows_in_turn(
    lanes: &mut [&mut dyn LaneWindow],
    from: u64,
    until: u64,
    lookahead: u64,
) {
    let p = lanes.len();
    let mut mail = Vec::new();
    let mut start = from;
    loop {
        let end = window_end(start, lookahead, until);
        let mut earliest = u64::MAX;
        for lane in lanes.iter_mut() {
            earliest = earliest.min(lane.run_window(end));
        }
        for src in 0..p {
            for dst in 0..p {
                if src != dst {
                    lanes[src].send_to(dst, &mut mail);
                    lanes[dst].receive(&mut mail);
                }
            }
        }
        start = next_start(end, earliest);
        if start > until {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsht::id::Id;
    use crate::dsht::wire::Value;
    use crate::sim::hotspot::{experiment_config, join_all, network, HotspotParams};

    /// Session 9 (issue 27): a node has one wake-up queued, at its earliest
    /// deadline, instead of one for every move of its deadline. Each
    /// deadline must still fire at the place in the order (time, insertion
    /// number) that queueing every move gave it, or a run would differ
    /// from the one before; the test build checks every deadline set
    /// against the moves themselves (`Sim::check_place`). The experiment's
    /// join and a minute of settling, then a crash, restarts and load on
    /// links of one delay (where many events share a time).
    #[test]
    fn every_wake_up_fires_where_queueing_every_move_fired_it() {
        let params = HotspotParams {
            nodes: 600,
            seed: 7,
            baseline: false,
            ..HotspotParams::default()
        };
        let links = HashedLinks {
            min: Duration::from_millis(5),
            max: Duration::from_millis(80),
            seed: 7,
        };
        let mut sim = network(&params, experiment_config(&params), links);
        join_all(&params, &mut sim);
        sim.run_for(Duration::from_secs(60));
        let st = sim.stats();
        assert_eq!(sim.misplaced_wakes(), 0, "{st:?}");
        // The stale wake-ups were about a fifth of the join's events.
        assert!(st.stale_wakes * 20 < st.events, "{st:?}");

        let params = HotspotParams {
            nodes: 200,
            seed: 3,
            ..params
        };
        let mut sim = network(
            &params,
            experiment_config(&params),
            ConstantLinks(Duration::from_millis(10)),
        );
        join_all(&params, &mut sim);
        sim.run_for(Duration::from_secs(30));
        let churn = Churn {
            key: Id::hash(b"k"),
            rounds: 20,
            crash_at: 5,
            restart_at: 8,
            churned: (10, 17),
            loaded: 7,
            gap: Duration::from_millis(1500),
        };
        churn.run(&mut sim, &params, |round, _| round);
        let st = sim.stats();
        assert_eq!(sim.misplaced_wakes(), 0, "{st:?}");
        assert!(st.events > 20_000, "{st:?}");
    }

    /// Rounds of load with churn on a joined network of `params.nodes`:
    /// each round every `loaded`th node puts and gets `key`; at round
    /// `crash_at` the nodes `churned.0, churned.0 + churned.1, ...` crash,
    /// at `restart_at` they restart and join again through node 0.
    struct Churn {
        key: Id,
        rounds: u64,
        crash_at: u64,
        restart_at: u64,
        churned: (usize, usize),
        loaded: usize,
        gap: Duration,
    }

    impl Churn {
        fn run<L: Links>(
            &self,
            sim: &mut Sim<L>,
            params: &HotspotParams,
            value: impl Fn(u64, usize) -> u64,
        ) {
            let n = params.nodes;
            let churned = (self.churned.0..n).step_by(self.churned.1);
            for round in 0..self.rounds {
                if round == self.crash_at {
                    for i in churned.clone() {
                        sim.crash(i);
                    }
                }
                if round == self.restart_at {
                    for i in churned.clone() {
                        let node = Node::new(
                            experiment_config(params),
                            sim_addr(i),
                            sim.now(),
                            round ^ i as u64,
                        )
                        .expect("valid config");
                        sim.restart(i, node);
                        sim.with_node(i, |n, now| n.bootstrap(now, &[sim_addr(0)]));
                    }
                }
                for i in (0..n).step_by(self.loaded) {
                    let v = Value::new(&value(round, i).to_be_bytes()).expect("8 bytes");
                    sim.with_node(i, |node, now| {
                        node.put(now, self.key, v, 600, None);
                        node.get(now, self.key, None);
                    });
                }
                sim.run_for(self.gap);
            }
        }
    }

    /// Links with hashed delays of at least 5 ms and 2 % loss.
    #[derive(Clone, Copy)]
    /// Hashed links with 2 % loss; with `blocks`, nodes in lanes in
    /// blocks of consecutive indices (`Links::lanes`), not `i mod P`.
    struct LossyHashed {
        links: HashedLinks,
        blocks: Option<usize>,
    }

    impl Links for LossyHashed {
        fn one_way(&self, a: usize, b: usize) -> Duration {
            self.links.one_way(a, b)
        }
        fn min_one_way(&self) -> Duration {
            self.links.min_one_way()
        }
        fn lanes(&self, p: usize) -> Option<(Vec<u16>, Duration)> {
            let n = self.blocks?;
            let lanes = (0..n).map(|i| (i * p / n) as u16).collect();
            Some((lanes, self.links.min_one_way()))
        }
        fn loss(&self, _a: usize, _b: usize) -> f64 {
            0.02
        }
    }

    /// Issue 27: a run on several threads is the run on one. Every node
    /// of every lane ends with the same id, counters and completed
    /// operations, through a join, loss, crashes, restarts and load given
    /// between windows, with four lanes on CI's two cores; nodes in lanes
    /// `i mod P` and where the links place them (`Links::lanes`).
    #[test]
    fn several_threads_run_what_one_runs() {
        let run = |threads: usize, blocks: Option<usize>| {
            let params = HotspotParams {
                nodes: 240,
                seed: 5,
                baseline: false,
                threads,
                ..HotspotParams::default()
            };
            let links = LossyHashed {
                links: HashedLinks {
                    min: Duration::from_millis(5),
                    max: Duration::from_millis(60),
                    seed: 5,
                },
                blocks,
            };
            let mut sim = network(&params, experiment_config(&params), links);
            assert_eq!(sim.threads(), threads);
            join_all(&params, &mut sim);
            sim.run_for(Duration::from_secs(20));
            let churn = Churn {
                key: Id::hash(b"lanes"),
                rounds: 12,
                crash_at: 3,
                restart_at: 6,
                churned: (5, 13),
                loaded: 5,
                gap: Duration::from_millis(1700),
            };
            churn.run(&mut sim, &params, |round, i| round * 1000 + i as u64);
            let mut events = sim.take_events();
            // Lane by lane on several threads; each node's in its order.
            events.sort_by_key(|&(i, _)| i);
            let nodes: Vec<String> = sim
                .nodes()
                .map(|n| format!("{:?} {:?}", n.id(), n.stats()))
                .collect();
            // With loss, deadlines move more often than `Wake` keeps their
            // places: a few take a new one, the same on every lane count.
            (
                sim.stats(),
                format!("{events:?}"),
                nodes,
                sim.misplaced_wakes(),
            )
        };
        let one = run(1, None);
        assert!(one.0.lost > 100, "{:?}", one.0);
        assert!(one.0.events > 50_000, "{:?}", one.0);
        for threads in [2, 4] {
            assert!(
                run(threads, None) == one,
                "{threads} threads ran another run"
            );
            assert!(
                run(threads, Some(240)) == one,
                "{threads} threads, nodes in blocks, ran another run"
            );
        }
    }
}
