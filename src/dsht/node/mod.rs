//! One DSHT node as a sans-IO state machine (the interface of §2.3).
//!
//! The driving contract, in the style of quinn-proto and str0m:
//!
//! - Inputs: [`Node::handle`] for each received datagram, [`Node::handle_timeout`]
//!   when the deadline from [`Node::poll_timeout`] passes, and the API calls
//!   [`Node::put`], [`Node::get`], [`Node::nodes`], [`Node::levels`],
//!   [`Node::bootstrap`].
//! - Outputs: after every input, drain [`Node::poll_transmit`] (datagrams to
//!   send) and [`Node::poll_event`] (completed operations), then sleep until
//!   [`Node::poll_timeout`]. A spurious timeout is harmless.
//!
//! Time (`now`) and randomness (a seed) are inputs, so the same inputs give
//! the same outputs: the simulator runs this code for thousands of nodes, and
//! the runtime runs it on every core.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use sha1::{Digest, Sha1};
use smallvec::SmallVec;

use crate::config::{Config, ConfigError};
use crate::dsht::cluster::{self, ClusterStats, Command, Current, Manager, View};
use crate::dsht::id::{keyed_hasher, FastBuildHasher, Id, Key, KeyedBuildHasher, NodeId};
use crate::dsht::lookup::{Lookup, ProbeReply, Step};
use crate::dsht::prefetch::prefetch;
use crate::dsht::ratelimit::{RateLimiter, Verdict};
use crate::dsht::recall::Recall;
use crate::dsht::routing::{Insert, RoutingTable};
use crate::dsht::store::{ProbeState, Quotas, Source, Store, StoreOutcome};
use crate::dsht::wire::{
    self, kind, Body, ClusterInfo, Contact, Contacts, ErrorCode, Header, Message, Services, Token,
    Value, Values, WireError, TOKEN_BYTES,
};
use crate::rng::Rng;
use crate::time::{Duration, Time};

/// Identifies an operation started by [`Node::get`] or [`Node::put`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct OpId(pub u64);

/// A cluster level: 0 is the global cluster, higher levels are smaller and faster.
pub type Level = u8;

/// The cluster a node belongs to at one level (§4.3).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Cluster {
    /// The cluster id (0^160 at level 0, random otherwise).
    pub id: Id,
    /// When the cluster was created, on this node's clock.
    pub created: Time,
}

/// What `levels()` reports for one level (§2.3).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LevelInfo {
    /// The level.
    pub level: Level,
    /// Its RTT threshold in milliseconds (`u32::MAX` for the global level).
    pub threshold_ms: u32,
    /// Our cluster at this level.
    pub cluster: Id,
    /// Seconds since that cluster was created.
    pub age_secs: u64,
    /// Our estimate of the cluster's size.
    pub size_estimate: u32,
    /// Contacts in this level's routing table.
    pub contacts: usize,
    /// Keys stored at this level.
    pub keys: usize,
    /// Bytes of keys and values stored at this level (as its quotas count them).
    pub store_bytes: usize,
    /// What the cluster manager of this level has done (zero at level 0,
    /// and on a node that follows another's clusters).
    pub clustering: ClusterStats,
}

/// Where a put stored its value at one level.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StoredAt {
    /// In the local node's own store.
    Local,
    /// At this remote node.
    Remote(Contact),
}

/// The outcome of a put at one level.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PutLevel {
    /// The level.
    pub level: Level,
    /// Where the value landed, if anywhere.
    pub stored_at: Option<StoredAt>,
    /// Whether the forward phase stopped at a full and loaded node.
    pub stopped_at_loaded: bool,
}

/// A completed operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A get finished.
    GetDone {
        /// The operation.
        op: OpId,
        /// The key.
        key: Key,
        /// The values found (a random subset of those stored where found).
        values: Vec<Value>,
        /// The level at which they were found (None: not found).
        level: Option<Level>,
        /// Whether they came from the local node's own store.
        local: bool,
        /// When nothing was found: where the walk ended at the last level
        /// searched, the closest node to the key that answered (at a
        /// cluster's own level and for a cluster id, its *centre*, IPTPS §2.5).
        closest: Option<Contact>,
        /// RPCs answered during the get.
        hops: u32,
        /// Time from the call to completion.
        elapsed: Duration,
    },
    /// A claim (test-and-set put) finished.
    ClaimDone {
        /// The operation.
        op: OpId,
        /// The key.
        key: Key,
        /// Whether our value is now stored at the key's closest node, which
        /// held no value before: we are first.
        claimed: bool,
        /// When not: the values that were there first (empty if the closest
        /// node could not be reached or refused for its limits).
        values: Vec<Value>,
        /// Time from the call to completion.
        elapsed: Duration,
    },
    /// A put finished.
    PutDone {
        /// The operation.
        op: OpId,
        /// The key.
        key: Key,
        /// Per level tried, highest first.
        levels: Vec<PutLevel>,
        /// Time from the call to completion.
        elapsed: Duration,
    },
}

impl Event {
    /// The operation that completed.
    pub fn op(&self) -> OpId {
        match self {
            Event::GetDone { op, .. } | Event::ClaimDone { op, .. } | Event::PutDone { op, .. } => {
                *op
            }
        }
    }
}

/// A keyed operation the node wants run by the shard that owns its key
/// ([`Node::set_shard`]); the runtime runs it there with [`Node::get`] or
/// [`Node::put`] and hands the event back with [`Node::on_delegated_done`].
#[derive(Clone, Debug, PartialEq)]
pub struct Delegated {
    /// Names the call in `on_delegated_done`.
    pub tag: u64,
    /// The call.
    pub call: DelegatedCall,
}

/// The calls a node delegates.
#[derive(Clone, Debug, PartialEq)]
pub enum DelegatedCall {
    /// `get(key, levels)`.
    Get {
        /// The key.
        key: Key,
        /// Levels to search.
        levels: Vec<Level>,
    },
    /// `put(key, value, ttl, levels)`.
    Put {
        /// The key.
        key: Key,
        /// The value.
        value: Value,
        /// Its TTL.
        ttl_secs: u32,
        /// Levels to insert at.
        levels: Vec<Level>,
    },
}

/// Counters, for metrics and tests.
#[allow(missing_docs)] // each counter is named for what it counts
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams handed to `handle`.
    pub datagrams_in: u64,
    /// Datagrams produced by `poll_transmit`.
    pub datagrams_out: u64,
    /// Datagrams dropped because they did not parse.
    pub malformed: u64,
    /// Datagrams dropped because the sender's id is not bound to its address.
    pub unbound_sender: u64,
    /// Replies that matched no outstanding RPC (late, duplicate or forged).
    pub unexpected_replies: u64,
    /// Requests served, by kind.
    pub pings_served: u64,
    pub find_nodes_served: u64,
    pub gets_served: u64,
    /// Forward-phase put RPCs received (PutProbe).
    pub put_probes_received: u64,
    /// Reverse-phase put RPCs received (Store).
    pub stores_received: u64,
    /// Stores accepted.
    pub stores_accepted: u64,
    /// Requests refused because the sender is in another cluster at that level.
    pub wrong_cluster: u64,
    /// Stores refused for a bad or missing token.
    pub bad_token: u64,
    /// RPCs that timed out.
    pub rpc_timeouts: u64,
    /// Outgoing datagrams dropped because the transmit queue was full.
    pub transmit_dropped: u64,
    /// Operations refused because `operations_max` were in progress.
    pub ops_refused: u64,
    /// Members requests served (candidates being validated, §4.4).
    pub members_served: u64,
    /// Cluster changes this node made at any level (§4.4).
    pub cluster_switches: u64,
    /// Requests dropped for their source's rate (or block).
    pub rate_limited: u64,
    /// Replies cut to `reply_amplification_max` times their request,
    /// for a source that has not answered our ping.
    pub replies_trimmed: u64,
    /// Stores refused: a value naming an address other than the storer's,
    /// or a storer over its quota.
    pub stores_refused: u64,
}

/// Why a datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// It did not parse.
    Malformed(WireError),
    /// The sender's id is not SHA-1 of its address.
    UnboundSender,
    /// A reply that matched no outstanding RPC.
    Unexpected,
    /// A request over its source's rate, or from a blocked source.
    RateLimited,
}

const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(10);
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// Slots of the cache of senders whose id was found bound to their address
/// ([`VerifiedCache`]): 4 KiB per node.
const VERIFIED_CACHE_SLOTS: usize = 512;
const PINGED_RECENTLY: Duration = Duration::from_secs(60);
/// A first-hand cluster member not heard from for this long may be
/// forgotten to make room for another.
const MEMBER_FORGET: Duration = Duration::from_secs(3600);
/// The capacity a datagram's buffer starts with: room for a header and a
/// full set of contacts, so that encoding rarely grows it.
const DATAGRAM_BUFFER_BYTES: usize = 512;
/// Newly verified contacts kept for [`Node::poll_learned`] before the oldest are dropped.
const LEARNED_QUEUE_MAX: usize = 1024;
/// Bucket refreshes a node starts after joining, per level.
const JOIN_REFRESHES_MAX: usize = 20;
/// Cluster changes kept for [`Node::poll_cluster_change`] before the oldest are dropped.
const CLUSTER_CHANGES_MAX: usize = 64;
/// Calls queued for [`Node::poll_delegated`], and delegated calls awaiting
/// their results, before the oldest are dropped.
const DELEGATED_MAX: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
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
struct Timers {
    /// The earliest deadline in `heap` and `rpc` (first: it is read the most).
    next: Option<Time>,
    heap: BinaryHeap<Reverse<(Time, Timer)>>,
    /// RPC deadlines in the order the RPCs went out. Every RPC has the same
    /// timeout, so this is sorted by deadline: a FIFO, not a heap. Bounded by
    /// the RPCs sent in one `rpc_timeout_ms` (answered ones are dropped from
    /// the front as soon as they get there).
    rpc: VecDeque<(Time, u32)>,
}

impl Timers {
    fn next(&self) -> Option<Time> {
        self.next
    }

    fn push(&mut self, at: Time, timer: Timer) {
        self.heap.push(Reverse((at, timer)));
        self.next = Some(self.next.map_or(at, |n| n.min(at)));
    }

    /// Arms the deadline of RPC `txid`.
    fn push_rpc(&mut self, at: Time, txid: u32) {
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
    fn pop_due(&mut self, now: Time) -> Option<(Time, Timer)> {
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

    /// Sets `next` again after timers were removed.
    fn update_next(&mut self) {
        let heap = self.heap.peek().map(|Reverse((t, _))| *t);
        let fifo = self.rpc.front().map(|&(t, _)| t);
        self.next = match (heap, fifo) {
            (Some(h), Some(f)) => Some(h.min(f)),
            (h, f) => h.or(f),
        };
    }
}

#[derive(Clone, Copy, Debug)]
enum Purpose {
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

/// What an operation started by the node itself is for: its event goes to
/// the node, not to the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Internal {
    /// A get or put the cluster manager of `level` asked for.
    Cluster { level: Level, round: u32 },
    /// A get for a clustering hint: measure the nodes it names.
    HintGet,
    /// Nothing to do with the result (storing a hint).
    Quiet,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    to: SocketAddr,
    to_id: Option<Id>,
    sent: Time,
    deadline: Time,
    request_kind: u8,
    purpose: Purpose,
}

struct LevelState {
    threshold_ms: u32,
    cluster: Cluster,
    table: RoutingTable,
    store: Store,
    size_estimate: u32,
    /// The table's generation `size_estimate` was computed at: the estimate
    /// reads every contact of the lowest buckets, and most maintenance
    /// rounds find the table holding the same contacts as the last.
    estimated_at: Option<u64>,
    /// Nodes known first-hand to share this level's cluster: each answered
    /// one of our RPCs from this address with our cluster in its header,
    /// within the level's RTT threshold. A request at this level is served
    /// only to them (§4.3; a cluster id copied into a header is not enough).
    /// Bounded by `cluster_members_known_max`.
    members: HashMap<SocketAddr, (Id, Time), KeyedBuildHasher>,
}

#[derive(Clone, Copy, Debug)]
struct StackEntry {
    at: StoredAt,
    token: Token,
}

enum Phase {
    /// A get, or a routing refresh, walking one level.
    Walk(Lookup),
    /// A put's forward phase at one level; `stack` holds every node that was
    /// not both full and loaded (the local node first when eligible).
    Forward {
        lookup: Lookup,
        stack: Vec<StackEntry>,
    },
    /// A put's reverse phase: try the stack from the node closest to the key
    /// outward until a store succeeds.
    Reverse {
        stack: Vec<StackEntry>,
        stopped_at_loaded: bool,
        waiting: Option<u32>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Get,
    Put,
    Claim,
    Refresh,
}

struct Op {
    kind: OpKind,
    key: Key,
    started: Time,
    deadline: Time,
    /// Levels still to do after the current one, next first.
    levels_left: SmallVec<[Level; 4]>,
    level: Level,
    phase: Phase,
    hops: u32,
    value: Value,
    ttl_secs: u32,
    put_levels: Vec<PutLevel>,
}

/// Senders whose id was found bound to their address (SHA-1 of it), so that
/// a node does not hash every datagram's source: a direct-mapped array of
/// 64-bit tags, each a keyed hash of the (address, id) pair.
///
/// Safe against a flood of spoofed sources: the array never grows
/// ([`VERIFIED_CACHE_SLOTS`]), and a flood only evicts tags, which costs a
/// SHA-1 for the next datagram of an evicted sender. No probing, so no
/// collision attack on the layout; and a forged pair passes only if its tag
/// equals a verified pair's, which takes the node's secret key (SipHash keyed
/// by it) or a 2^-64 chance. (The `HashMap<SocketAddr, NodeId>` this replaces
/// held up to 4,096 entries of 52 bytes, 16 KiB per node at 10,000 simulated
/// nodes, and cost two cache misses per datagram.)
struct VerifiedCache {
    /// Secret, fixed for the node's life: the keyed hash's prefix.
    key: [u8; 16],
    /// Tags by slot (0: empty); allocated on first use.
    tags: Vec<u64>,
}

impl VerifiedCache {
    /// A cache keyed by a hash of the node's first token secrets (so that
    /// creating it draws nothing from the node's `Rng`).
    fn new(secret: &[u8; 16], previous: &[u8; 16]) -> VerifiedCache {
        let mut h = Sha1::new();
        h.update(b"coral verified-sender cache key");
        h.update(secret);
        h.update(previous);
        let digest = h.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        VerifiedCache {
            key,
            tags: Vec::new(),
        }
    }

    /// The pair's tag: never 0, which marks an empty slot.
    fn tag(&self, from: SocketAddr, id: &Id) -> u64 {
        use std::hash::{Hash, Hasher};
        // SipHash-1-3 with the secret as a prefix of the message.
        let mut h = std::hash::DefaultHasher::new();
        h.write(&self.key);
        from.hash(&mut h);
        h.write(&id.0);
        h.finish() | 1
    }

    fn slot(tag: u64) -> usize {
        (tag >> 32) as usize % VERIFIED_CACHE_SLOTS
    }

    fn contains(&self, tag: u64) -> bool {
        self.tags.get(Self::slot(tag)) == Some(&tag)
    }

    fn insert(&mut self, tag: u64) {
        if self.tags.is_empty() {
            self.tags = vec![0; VERIFIED_CACHE_SLOTS];
        }
        self.tags[Self::slot(tag)] = tag;
    }
}

/// The configuration values read on every input, copied out of `config`.
/// `Config` spreads them over its 296 bytes (five cache lines, all of which
/// every datagram touched); here they sit together, next to the node's other
/// hot fields. `config` never changes after [`Node::new`], so the copy cannot
/// go stale. Ordered as `Node`: what every API call reads first.
#[derive(Clone, Copy, Debug)]
struct HotConfig {
    operations_max: usize,
    value_bytes_max: usize,
    values_per_key_max: usize,
    get_values_max: usize,
    event_queue_max: usize,
    ttl_max_secs: u32,
    require_id_binding: bool,
    id_includes_port: bool,
    reply_amplification_max: usize,
    cluster_manage: bool,
    reply_contacts_max: usize,
    transmit_queue_max: usize,
    pending_rpcs_max: usize,
    verify_pings_max: usize,
    token_rotate_secs: u64,
    rpc_timeout: Duration,
    alpha: usize,
    lookup_contacts_max: usize,
    rpc_stall: Duration,
    operation_timeout: Duration,
    b: u32,
}

impl HotConfig {
    fn new(c: &Config) -> HotConfig {
        HotConfig {
            operations_max: c.operations_max,
            value_bytes_max: c.value_bytes_max,
            values_per_key_max: c.values_per_key_max,
            get_values_max: c.get_values_max,
            event_queue_max: c.event_queue_max,
            ttl_max_secs: c.ttl_max_secs,
            require_id_binding: c.require_id_binding,
            id_includes_port: c.id_includes_port,
            reply_amplification_max: c.reply_amplification_max as usize,
            cluster_manage: c.cluster_manage,
            reply_contacts_max: c.reply_contacts_max,
            transmit_queue_max: c.transmit_queue_max,
            pending_rpcs_max: c.pending_rpcs_max,
            verify_pings_max: c.verify_pings_max,
            token_rotate_secs: c.token_rotate_secs,
            rpc_timeout: c.rpc_timeout(),
            alpha: c.alpha,
            lookup_contacts_max: c.lookup_contacts_max,
            rpc_stall: c.rpc_stall(),
            operation_timeout: Duration::from_millis(c.operation_timeout_ms),
            b: c.b,
        }
    }
}

/// One DSHT node.
///
/// Laid out by hand (`repr(C)`, fields in order of use, each node starting a
/// cache line): the simulator calls into 10,000 nodes at random, so nearly
/// every line of a node it touches is a cache miss. An API call answered
/// from the local store reads only the first group of fields, a datagram
/// the first two; what only cluster management, delegation and hints use
/// comes last. (With the compiler's order, one put and get read 12 of the
/// node's 18 lines.)
#[repr(C, align(64))]
pub struct Node {
    // -- Read by every API call and by the driver after every input.
    levels: Vec<LevelState>,
    next_op: u64,
    ops: HashMap<u64, Op, FastBuildHasher>,
    events: VecDeque<Event>,
    out: VecDeque<(SocketAddr, Vec<u8>)>,
    learned: VecDeque<(Level, Contact, Duration)>,
    /// Operations the node started for itself, by operation id.
    internal: HashMap<u64, Internal, FastBuildHasher>,
    timers: Timers,
    hot: HotConfig,
    rng: Rng,
    addr: SocketAddr,
    // -- Read by every datagram.
    stats: Stats,
    id: NodeId,
    services: Services,
    route_hint: u16,
    next_txid: u32,
    pending: HashMap<u32, Pending, FastBuildHasher>,
    verified: VerifiedCache,
    /// Senders that answered one of our RPCs from their address (the
    /// address is theirs): served in full and at the verified rate.
    answered: VerifiedCache,
    limiter: RateLimiter,
    secret: [u8; 16],
    previous_secret: [u8; 16],
    secret_epoch: u64,
    verify_pings_in_flight: usize,
    pinged: HashMap<SocketAddr, Time>,
    /// The cluster manager of each non-global level (index 0 = level 1).
    managers: Vec<Manager>,
    // -- Cold.
    config: Config,
    last_sweep: Time,
    /// Delegated calls awaiting results, by tag.
    delegated: BTreeMap<u64, Internal>,
    delegated_out: VecDeque<Delegated>,
    next_tag: u64,
    /// This node's shard (index, count): keyed operations for keys another
    /// shard owns are delegated.
    shard: (usize, usize),
    /// The keys of our clustering hints (§4.4).
    hints: Vec<Key>,
    /// Whether a bootstrap node has answered.
    joined: bool,
    /// Whether a hint renewal is scheduled.
    hints_renewing: bool,
    /// Whether the current hints have been stored.
    hints_stored: bool,
    /// When the hints were last looked up.
    hints_looked_up: Time,
    cluster_changes: VecDeque<(Level, Cluster)>,
    /// Nodes that answered a put probe "full and loaded" (§4.2): not probed
    /// again before they could accept a store.
    recall: Recall,
}

impl Node {
    /// Starts loading the lines every input reads (a hint for a driver that
    /// knows which node it calls next, such as the simulator).
    pub fn prefetch(&self) {
        prefetch(
            (self as *const Node).cast(),
            std::mem::offset_of!(Node, config),
        );
    }

    /// Once [`Node::prefetch`]'s lines have arrived: starts loading the
    /// levels (their tables' and stores' headers).
    pub fn prefetch_levels(&self) {
        prefetch(
            self.levels.as_ptr().cast(),
            self.levels.len() * std::mem::size_of::<LevelState>(),
        );
    }

    /// Once [`Node::prefetch_levels`]' lines have arrived: starts loading
    /// the first entry of the highest level's store, where puts and gets
    /// start (the state of a hot key).
    pub fn prefetch_top_store(&self) {
        if let Some(l) = self.levels.last() {
            l.store.prefetch();
        }
    }

    /// A node at `addr` whose id is SHA-1 of its IP (or of IP and port when
    /// `config.id_includes_port`), started at `now`, with all randomness
    /// drawn from `seed`. Each non-global level starts as a singleton cluster
    /// with a random id (§4.4).
    pub fn new(
        config: Config,
        addr: SocketAddr,
        now: Time,
        seed: u64,
    ) -> Result<Node, ConfigError> {
        config.validate()?;
        let id = if config.id_includes_port {
            Id::from_ip_port(addr)
        } else {
            Id::from_ip(addr.ip())
        };
        let mut rng = Rng::new(seed);
        let mut secret = [0u8; 16];
        rng.fill(&mut secret);
        let mut previous_secret = [0u8; 16];
        rng.fill(&mut previous_secret);
        // Keys for the hashes of maps whose keys come from the network:
        // from the secrets, so that no draw of the Rng changes.
        let hash_secret = [secret, previous_secret].concat();
        let lab = config.id_includes_port;
        let lift = |n: usize| if lab { usize::MAX } else { n };
        let quotas = Quotas {
            values_per_source_per_key: config.values_per_source_per_key_max,
            values_per_prefix_per_key: lift(config.values_per_prefix_per_key_max),
            values_per_source: config.values_per_source_max,
            values_per_prefix: lift(config.values_per_prefix_max),
            bytes_max: config.store_bytes_per_level_max,
        };
        let levels = config
            .level_thresholds_ms
            .iter()
            .enumerate()
            .map(|(level, &threshold_ms)| {
                let mut cid = Id::ZERO;
                if level > 0 {
                    rng.fill(&mut cid.0);
                }
                LevelState {
                    threshold_ms,
                    cluster: Cluster {
                        id: cid,
                        created: now,
                    },
                    table: new_table(&config, id),
                    store: Store::new(
                        config.values_per_key_max,
                        config.beta_per_min,
                        config.keys_per_level_max,
                    )
                    .with_limits(quotas, keyed_hasher(&hash_secret, "store")),
                    size_estimate: 1,
                    estimated_at: None,
                    members: HashMap::with_hasher(keyed_hasher(&hash_secret, "members")),
                }
            })
            .collect();
        let next_txid = rng.next_u64() as u32;
        let limiter = RateLimiter::new(
            config.rate_requests_per_sec,
            config.rate_verified_requests_per_sec,
            config.rate_window_secs,
            config.rate_block_secs,
            config.rate_sources_max,
            keyed_hasher(&hash_secret, "rate"),
        );
        let mut node = Node {
            secret_epoch: now.as_secs() / config.token_rotate_secs,
            hot: HotConfig::new(&config),
            config,
            id,
            addr,
            services: Services::NONE,
            route_hint: rng.next_u64() as u16,
            rng,
            levels,
            pending: HashMap::default(),
            timers: Timers::default(),
            ops: HashMap::default(),
            next_op: 1,
            next_txid,
            out: VecDeque::new(),
            events: VecDeque::new(),
            secret,
            previous_secret,
            verified: VerifiedCache::new(&secret, &previous_secret),
            answered: VerifiedCache::new(&previous_secret, &secret),
            limiter,
            pinged: HashMap::new(),
            verify_pings_in_flight: 0,
            learned: VecDeque::new(),
            last_sweep: now,
            stats: Stats::default(),
            managers: Vec::new(),
            internal: HashMap::default(),
            delegated: BTreeMap::new(),
            delegated_out: VecDeque::new(),
            next_tag: 1,
            shard: (0, 1),
            hints: Vec::new(),
            joined: false,
            hints_renewing: false,
            hints_stored: false,
            hints_looked_up: Time::ZERO,
            cluster_changes: VecDeque::new(),
            recall: Recall::new(),
        };
        node.managers = node.config.level_thresholds_ms[1..]
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                Manager::new(i as Level + 1, t, id)
                    .with_hasher(keyed_hasher(&hash_secret, "cluster"))
            })
            .collect();
        node.timers
            .push(now + MAINTENANCE_INTERVAL, Timer::Maintenance);
        if node.config.cluster_manage && !node.managers.is_empty() {
            // The first periodic evaluation at a random point of the first
            // period, so that nodes started together do not move together.
            let period = node.config.cluster_eval().as_micros().max(1);
            let first = Duration::from_micros(1 + node.rng.below(period));
            node.timers
                .push(now + first, Timer::ClusterEval { periodic: true });
        }
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// This node's DSHT address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The services this node advertises.
    pub fn services(&self) -> Services {
        self.services
    }

    /// Pings `addr` to verify it is alive (dnssrv returns only proxies
    /// verified first-hand, §3.1). An answer refreshes its routing entries;
    /// like a hint ping, the measurement does not count toward judging our
    /// clusters (the node was chosen, not sampled).
    pub fn verify_alive(&mut self, now: Time, addr: SocketAddr) {
        if addr != self.addr {
            self.send_request(
                now,
                addr,
                None,
                self.route_hint,
                Body::Ping,
                Purpose::HintPing,
            );
        }
    }

    /// Sets the services this node advertises in every header.
    pub fn set_services(&mut self, services: Services) {
        self.services = services;
    }

    /// Sets the route value of requests that are not for a key (pings, node
    /// lookups), so that their replies come back to the calling core.
    pub fn set_route_hint(&mut self, route: u16) {
        self.route_hint = route;
    }

    /// Joins cluster `id` (created at `created`) at `level` ≥ 1. Values and
    /// contacts of the old cluster at that level are dropped: they belong to
    /// it, not to the new one.
    pub fn set_cluster(&mut self, level: Level, id: Id, created: Time) {
        let l = level as usize;
        assert!(
            l > 0 && l < self.levels.len(),
            "level {level} is not a non-global level"
        );
        let state = &mut self.levels[l];
        if state.cluster.id != id {
            state.cluster = Cluster { id, created };
            state.table = new_table(&self.config, self.id);
            state.store.clear();
            state.size_estimate = 1;
            state.estimated_at = None;
            state.members.clear();
            state.members.shrink_to_fit();
            self.managers[l - 1].on_switched();
        }
    }

    /// The next change of cluster this node made itself (§4.4), for a
    /// runtime whose other cores follow this one ([`Node::set_cluster`]).
    /// Bounded: the oldest are dropped if nobody drains them.
    pub fn poll_cluster_change(&mut self) -> Option<(Level, Cluster)> {
        self.cluster_changes.pop_front()
    }

    /// The cluster manager of non-global `level`.
    pub fn cluster_manager(&self, level: Level) -> Option<&Manager> {
        (level as usize)
            .checked_sub(1)
            .and_then(|i| self.managers.get(i))
    }

    /// Clustering counters of non-global `level`.
    pub fn cluster_stats(&self, level: Level) -> ClusterStats {
        self.cluster_manager(level)
            .map(Manager::stats)
            .unwrap_or_default()
    }

    /// Makes this node shard `index` of `count` of one address: keyed
    /// operations the node starts itself (hints, splits) for keys another
    /// shard owns are then delegated ([`Node::poll_delegated`]), because
    /// their replies are steered to, and their values stored at, the owner.
    /// Ownership follows the route: shard `(route · count) >> 16`.
    pub fn set_shard(&mut self, index: usize, count: usize) {
        self.shard = (index, count.max(1));
    }

    /// Whether this shard owns `key`.
    fn owns(&self, key: &Key) -> bool {
        shard_of_route(route_of(key), self.shard.1) == self.shard.0
    }

    /// The next call to run on the shard that owns its key.
    pub fn poll_delegated(&mut self) -> Option<Delegated> {
        self.delegated_out.pop_front()
    }

    /// The result of a delegated call: the event its owner's `get` or `put` produced.
    pub fn on_delegated_done(&mut self, now: Time, tag: u64, event: Event) {
        if let Some(internal) = self.delegated.remove(&tag) {
            self.on_internal_done(now, internal, event);
        }
    }

    /// Sets this node's clustering hints (§4.4) — keys from
    /// [`cluster::hint_keys`] for its gateway routers and subnets — and
    /// stores a pointer to itself under each, renewed until replaced. Once
    /// joined, it also looks them up to measure the nodes they name.
    pub fn set_hints(&mut self, now: Time, keys: &[Key]) {
        self.hints = keys.iter().copied().take(cluster::HINT_KEYS_MAX).collect();
        self.hints_stored = false;
        if self.joined {
            self.store_hints(now);
            self.lookup_hints(now);
        }
    }

    /// Our cluster at `level`.
    pub fn cluster(&self, level: Level) -> Option<Cluster> {
        self.levels.get(level as usize).map(|l| l.cluster)
    }

    /// The routing table of `level`.
    pub fn routing_table(&self, level: Level) -> Option<&RoutingTable> {
        self.levels.get(level as usize).map(|l| &l.table)
    }

    /// The local store of `level`.
    pub fn store(&self, level: Level) -> Option<&Store> {
        self.levels.get(level as usize).map(|l| &l.store)
    }

    /// `levels()` (§2.3): the hierarchy and our place in it.
    pub fn levels(&self, now: Time) -> Vec<LevelInfo> {
        self.levels
            .iter()
            .enumerate()
            .map(|(i, l)| LevelInfo {
                level: i as Level,
                threshold_ms: l.threshold_ms,
                cluster: l.cluster.id,
                age_secs: now.saturating_since(l.cluster.created).as_secs(),
                size_estimate: l.size_estimate,
                contacts: l.table.len(),
                keys: l.store.key_count(),
                store_bytes: l.store.bytes(),
                clustering: self.cluster_stats(i as Level),
            })
            .collect()
    }

    /// `nodes(level, count, [target], [services])` (§2.3): up to `count`
    /// members of our cluster at `level` running `services`. With a target
    /// address, nodes sharing the longest address prefix with it come first
    /// (a stand-in for the network hints of §4.4); otherwise the nodes with
    /// the lowest measured RTT.
    pub fn nodes(
        &self,
        level: Level,
        count: usize,
        target: Option<IpAddr>,
        services: Services,
    ) -> Vec<Contact> {
        let Some(l) = self.levels.get(level as usize) else {
            return Vec::new();
        };
        let mut v: Vec<_> = l.table.with_services(services).collect();
        match target {
            Some(ip) => v.sort_by_key(|e| {
                (
                    Reverse(ip_common_prefix(ip, e.contact.addr.ip())),
                    e.rtt_min.unwrap_or(Duration(u64::MAX)),
                )
            }),
            None => v.sort_by_key(|e| e.rtt_min.unwrap_or(Duration(u64::MAX))),
        }
        v.into_iter().take(count).map(|e| e.contact).collect()
    }

    /// Per level: (keys, live values, loaded keys) in this node's store, for
    /// metrics (walks the stores: not for a hot path).
    pub fn store_counts(&self, now: Time) -> Vec<(usize, usize, usize)> {
        self.levels
            .iter()
            .map(|l| {
                (
                    l.store.key_count(),
                    l.store.value_count(now),
                    l.store.loaded_key_count(now),
                )
            })
            .collect()
    }

    /// Contacts the nodes at `addrs` to join the network; once one answers, a
    /// lookup for our own id seeds the routing tables (§4.4).
    pub fn bootstrap(&mut self, now: Time, addrs: &[SocketAddr]) {
        for &addr in addrs {
            if addr != self.addr {
                self.send_request(
                    now,
                    addr,
                    None,
                    self.route_hint,
                    Body::Ping,
                    Purpose::Bootstrap,
                );
            }
        }
    }

    /// Makes a contact known without an RPC (the runtime shares what one core
    /// learnt with the others). It must already have been verified.
    pub fn learn_verified(
        &mut self,
        contact: Contact,
        level: Level,
        now: Time,
        rtt: Option<Duration>,
    ) {
        if let Some(l) = self.levels.get_mut(level as usize) {
            l.table.insert(contact, now, rtt);
        }
    }

    // ---- The API: put and get --------------------------------------------------

    /// `put(key, val, ttl, [levels])` (§2.3, §4.2–4.3): inserts at the highest
    /// level first, then at each lower level from where the last one stored,
    /// unless the key is loaded. `levels` defaults to all.
    pub fn put(
        &mut self,
        now: Time,
        key: Key,
        value: Value,
        ttl_secs: u32,
        levels: Option<&[Level]>,
    ) -> OpId {
        self.put_for(now, key, value, ttl_secs, levels, None)
    }

    fn put_for(
        &mut self,
        now: Time,
        key: Key,
        value: Value,
        ttl_secs: u32,
        levels: Option<&[Level]>,
        internal: Option<Internal>,
    ) -> OpId {
        let ttl_secs = ttl_secs.min(self.hot.ttl_max_secs).max(1);
        let mut order = self.level_order(levels);
        let op = self.alloc_op(internal);
        if order.is_empty()
            || value.0.len() > self.hot.value_bytes_max
            || self.ops.len() >= self.hot.operations_max
        {
            self.stats.ops_refused += 1;
            self.push_event(
                now,
                Event::PutDone {
                    op: OpId(op),
                    key,
                    levels: Vec::new(),
                    elapsed: Duration::ZERO,
                },
            );
            return OpId(op);
        }
        let level = order.remove(0);
        let phase = self.put_phase(key, level, ttl_secs, now, self.id);
        if matches!(
            phase,
            Phase::Reverse {
                stopped_at_loaded: true,
                ..
            }
        ) {
            // Full and loaded here at the first level tried: the put ends now,
            // with no RPC, no operation state and no timer (the common case
            // for a hot key, so it must be cheap).
            self.push_event(
                now,
                Event::PutDone {
                    op: OpId(op),
                    key,
                    levels: vec![PutLevel {
                        level,
                        stored_at: None,
                        stopped_at_loaded: true,
                    }],
                    elapsed: Duration::ZERO,
                },
            );
            return OpId(op);
        }
        self.start_op(
            now,
            op,
            OpKind::Put,
            key,
            level,
            order,
            phase,
            value,
            ttl_secs,
        );
        OpId(op)
    }

    /// A test-and-set put at the global level (NSDI 2004 §8, "Multi-cast
    /// Tree Formation"): walks to the key's closest node, ignoring
    /// sloppiness, and stores `value` there only if it holds no value yet;
    /// otherwise returns the values it holds. Proxies use it before going to
    /// the origin, so that a flash crowd's simultaneous first requests make
    /// one origin fetch, not several.
    pub fn claim(&mut self, now: Time, key: Key, value: Value, ttl_secs: u32) -> OpId {
        let ttl_secs = ttl_secs.min(self.hot.ttl_max_secs).max(1);
        let op = self.alloc_op(None);
        if value.0.len() > self.hot.value_bytes_max || self.ops.len() >= self.hot.operations_max {
            self.stats.ops_refused += 1;
            self.push_event(
                now,
                Event::ClaimDone {
                    op: OpId(op),
                    key,
                    claimed: false,
                    values: Vec::new(),
                    elapsed: Duration::ZERO,
                },
            );
            return OpId(op);
        }
        let lookup = self.new_lookup(key, 0, self.id);
        self.start_op(
            now,
            op,
            OpKind::Claim,
            key,
            0,
            SmallVec::new(),
            Phase::Forward {
                lookup,
                stack: Vec::new(),
            },
            value,
            ttl_secs,
        );
        OpId(op)
    }

    /// `get(key, [levels])` (§2.3, §4.3): searches the highest level first,
    /// each lower level continuing from where the last one stopped in id
    /// space, and stops at the first node storing the key.
    pub fn get(&mut self, now: Time, key: Key, levels: Option<&[Level]>) -> OpId {
        self.get_for(now, key, levels, None)
    }

    fn get_for(
        &mut self,
        now: Time,
        key: Key,
        levels: Option<&[Level]>,
        internal: Option<Internal>,
    ) -> OpId {
        let mut order = self.level_order(levels);
        let op = self.alloc_op(internal);
        if order.is_empty() || self.ops.len() >= self.hot.operations_max {
            self.stats.ops_refused += 1;
            self.finish_get(op, key, now, now, Values::new(), None, false, None, 0);
            return OpId(op);
        }
        // The local store at every level answers first, without an RPC.
        for &level in &order {
            let values = self.levels[level as usize].store.get(
                &key,
                now,
                self.hot.get_values_max,
                &mut self.rng,
            );
            if !values.is_empty() {
                self.finish_get(op, key, now, now, values, Some(level), true, None, 0);
                return OpId(op);
            }
        }
        let level = order.remove(0);
        let lookup = self.new_lookup(key, level, self.id);
        self.start_op(
            now,
            op,
            OpKind::Get,
            key,
            level,
            order,
            Phase::Walk(lookup),
            Value::default(),
            0,
        );
        OpId(op)
    }

    /// Starts a lookup for `target` at `level` that only refreshes routing
    /// tables (no event).
    pub fn refresh(&mut self, now: Time, target: Id, level: Level) {
        if level as usize >= self.levels.len() || self.ops.len() >= self.hot.operations_max {
            return;
        }
        let op = self.alloc_op(None);
        let lookup = self
            .new_lookup(target, level, self.id)
            .with_breadth(self.config.bucket_size);
        self.start_op(
            now,
            op,
            OpKind::Refresh,
            target,
            level,
            SmallVec::new(),
            Phase::Walk(lookup),
            Value::default(),
            0,
        );
    }

    // ---- Driving: input and output --------------------------------------------

    /// Handles one datagram from `from`. Bad datagrams are dropped and
    /// counted; the reason is returned for logging.
    pub fn handle(&mut self, now: Time, from: SocketAddr, datagram: &[u8]) -> Result<(), Dropped> {
        self.stats.datagrams_in += 1;
        let msg = match Message::decode(datagram) {
            Ok(m) => m,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(Dropped::Malformed(e));
            }
        };
        if !self.sender_is_bound(&msg.header.sender, from) {
            self.stats.unbound_sender += 1;
            return Err(Dropped::UnboundSender);
        }
        if msg.body.is_request() {
            // The local host (other cores, a local proxy) is trusted.
            let local = from.ip() == self.addr.ip();
            let verified = local || self.has_answered(&msg.header.sender, from);
            if !local && self.limiter.request(now, from.ip(), verified) != Verdict::Allow {
                self.stats.rate_limited += 1;
                if !verified {
                    // A busy honest node not yet verified (or forgotten by
                    // the cache) gets out by answering this ping (at most
                    // one a minute per address, smaller than the request).
                    self.observe_requester(now, from, &msg.header, false);
                }
                return Err(Dropped::RateLimited);
            }
            self.on_request(now, from, msg, datagram.len(), verified);
            Ok(())
        } else {
            let r = self.on_reply(now, from, msg);
            self.prune_timers();
            r
        }
    }

    /// Handles every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some((_, timer)) = self.timers.pop_due(now) {
            match timer {
                Timer::Rpc(txid) => {
                    if self.pending.get(&txid).is_some_and(|p| p.deadline <= now) {
                        let p = self.pending.remove(&txid).expect("checked");
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
    fn prune_timers(&mut self) {
        let rpc_live = |pending: &HashMap<u32, Pending, FastBuildHasher>, at: Time, txid: u32| {
            pending.get(&txid).is_some_and(|p| p.deadline == at)
        };
        while let Some(&(at, txid)) = self.timers.rpc.front() {
            if rpc_live(&self.pending, at, txid) {
                break;
            }
            self.timers.rpc.pop_front();
        }
        while let Some(&Reverse((at, timer))) = self.timers.heap.peek() {
            let live = match timer {
                Timer::Rpc(txid) => rpc_live(&self.pending, at, txid),
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

    /// The next datagram to send: its bytes replace the contents of `buf`,
    /// and its destination is returned. Datagrams are encoded when queued,
    /// so a whole `Message` is never moved. Each gets a fresh buffer and the
    /// caller's old one is freed: the allocator hands back the buffer freed
    /// last, which is in cache, where a pool of the node's own would be cold
    /// by the time the node sends again (at 10,000 simulated nodes, every
    /// line of it a miss; 2–4% of the hotspot run).
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        let (to, bytes) = self.out.pop_front()?;
        if self.out.is_empty() {
            self.out = VecDeque::new();
        }
        *buf = bytes;
        self.stats.datagrams_out += 1;
        Some(to)
    }

    /// The next contact this node verified and added to a routing table, with
    /// its level and measured RTT. A runtime with one node per core hands these
    /// to the other cores ([`Node::learn_verified`]) so that what one core
    /// learns, all know. Bounded: the oldest are dropped if nobody drains them.
    pub fn poll_learned(&mut self) -> Option<(Level, Contact, Duration)> {
        self.learned.pop_front()
    }

    /// The next completed operation.
    pub fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front();
        if self.events.is_empty() {
            self.events = VecDeque::new();
        }
        e
    }

    // ---- Serving requests --------------------------------------------------------

    fn on_request(
        &mut self,
        now: Time,
        from: SocketAddr,
        msg: Message,
        request_bytes: usize,
        verified: bool,
    ) {
        let Message { header, body } = msg;
        let level_ok = |node: &Node, level: u8| -> Result<usize, ErrorCode> {
            let l = level as usize;
            if l >= node.levels.len() {
                return Err(ErrorCode::NoSuchLevel);
            }
            if !node.shares_cluster(&header, l) || !node.is_member(l, &header.sender, from) {
                return Err(ErrorCode::WrongCluster);
            }
            Ok(l)
        };
        let reply = match body {
            Body::Ping => {
                self.stats.pings_served += 1;
                Body::Pong
            }
            Body::FindNode { level, target } => match level_ok(self, level) {
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
                contacts.extend(self.levels[level as usize].table.closest_matching(
                    &target,
                    count,
                    |id| *id != header.sender,
                ));
                Body::MembersReply { level, contacts }
            }
            Body::Members { .. } => self.refuse(ErrorCode::NoSuchLevel),
            Body::Get { level, key, target } => match level_ok(self, level) {
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
            Body::PutProbe { level, key, target } => match level_ok(self, level) {
                Ok(l) => {
                    self.stats.put_probes_received += 1;
                    let ProbeState {
                        loaded,
                        value_count,
                        min_ttl_secs,
                    } = self.levels[l].store.probe(&key, now);
                    Body::PutProbeReply {
                        level,
                        loaded,
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
                value,
            } => match level_ok(self, level) {
                Ok(l) => {
                    self.stats.stores_received += 1;
                    if !self.token_is_valid(now, from, &token) {
                        self.stats.bad_token += 1;
                        Body::Error {
                            code: ErrorCode::BadToken,
                        }
                    } else if value.0.len() > self.hot.value_bytes_max
                        || value.to_addr().is_some_and(|a| a.ip() != from.ip())
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
                    } else if if_absent && self.levels[l].store.has_values(&key, now) {
                        // Test-and-set lost: here is who got there first.
                        let values = self.levels[l].store.get(
                            &key,
                            now,
                            self.hot.get_values_max,
                            &mut self.rng,
                        );
                        Body::StoreReply {
                            level,
                            stored: false,
                            values,
                        }
                    } else {
                        let ttl =
                            Duration::from_secs(u64::from(ttl_secs.min(self.hot.ttl_max_secs)));
                        let source = if self.hot.id_includes_port {
                            Source::Remote(from)
                        } else {
                            Source::Remote(SocketAddr::new(from.ip(), 0))
                        };
                        let outcome = self.levels[l]
                            .store
                            .store_from(&key, value, ttl, now, source);
                        self.stats.stores_accepted += u64::from(outcome.is_stored());
                        self.stats.stores_refused +=
                            u64::from(matches!(outcome, StoreOutcome::OverQuota));
                        Body::StoreReply {
                            level,
                            stored: outcome.is_stored(),
                            values: Values::new(),
                        }
                    }
                }
                Err(code) => self.refuse(code),
            },
            // Replies are handled in on_reply.
            _ => return,
        };
        let mut msg = Message {
            header: self.header(header.route, header.txid, now),
            body: reply,
        };
        let mut bytes = Vec::with_capacity(DATAGRAM_BUFFER_BYTES);
        msg.encode(&mut bytes);
        // A source that has not answered our ping may have been forged:
        // what we send it (the reply, and any verifying ping) is at most
        // `reply_amplification_max` times its request.
        // The verifying ping comes first: once the source answers it, it
        // is served in full.
        let mut ping = verified;
        if !verified {
            let full = request_bytes.saturating_mul(self.hot.reply_amplification_max);
            let wanted = self.verify_wanted(now, from, &header, false);
            let budget = if wanted {
                full.saturating_sub(wire::HEADER_FIXED_BYTES)
            } else {
                full
            };
            if bytes.len() > budget {
                trim_reply(&mut msg.body, bytes.len() - budget);
                self.stats.replies_trimmed += 1;
                bytes.clear();
                msg.encode(&mut bytes);
            }
            ping = wanted && bytes.len() + wire::HEADER_FIXED_BYTES <= full;
        }
        self.queue_bytes(from, bytes);
        if ping {
            self.observe_requester(now, from, &header, verified);
        }
    }

    /// Whether the node at `from` claiming `sender` has answered one of our
    /// RPCs from that address.
    fn has_answered(&self, sender: &Id, from: SocketAddr) -> bool {
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
    fn observe_member(&mut self, now: Time, level: usize, contact: &Contact, rtt: Duration) {
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
    fn shares_cluster(&self, header: &Header, level: usize) -> bool {
        level == 0
            || header
                .clusters
                .get(level - 1)
                .is_some_and(|c| c.id == self.levels[level].cluster.id)
    }

    fn sender_is_bound(&mut self, sender: &Id, from: SocketAddr) -> bool {
        if !self.hot.require_id_binding {
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
    fn observe_requester(&mut self, now: Time, from: SocketAddr, header: &Header, verified: bool) {
        if !self.verify_wanted(now, from, header, verified) {
            return;
        }
        if self.pinged.len() >= self.hot.verify_pings_max * 16 {
            self.pinged
                .retain(|_, t| now.saturating_since(*t) < PINGED_RECENTLY);
        }
        self.pinged.insert(from, now);
        self.verify_pings_in_flight += 1;
        self.send_request(
            now,
            from,
            Some(header.sender),
            self.route_hint,
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
        let wanted = (0..self.levels.len()).any(|level| {
            self.shares_cluster(header, level)
                && (self.levels[level].table.has_room_for(&header.sender)
                    || !self.is_member(level, &header.sender, from))
        }) || (!verified && !self.has_answered(&header.sender, from));
        wanted
            && self.verify_pings_in_flight < self.hot.verify_pings_max
            && self
                .pinged
                .get(&from)
                .is_none_or(|&t| now.saturating_since(t) >= PINGED_RECENTLY)
    }

    // ---- Replies and failures ----------------------------------------------------------

    fn on_reply(&mut self, now: Time, from: SocketAddr, msg: Message) -> Result<(), Dropped> {
        let txid = msg.header.txid;
        let Some(p) = self.pending.get(&txid).copied() else {
            self.stats.unexpected_replies += 1;
            return Err(Dropped::Unexpected);
        };
        let kind_matches =
            msg.body.kind() == p.request_kind | kind::REPLY || msg.body.kind() == kind::ERROR;
        if p.to != from || !kind_matches || p.to_id.is_some_and(|id| id != msg.header.sender) {
            self.stats.unexpected_replies += 1;
            return Err(Dropped::Unexpected);
        }
        self.pending.remove(&txid);
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
        self.observe_verified(now, contact, &msg.header, rtt, located);
        match p.purpose {
            Purpose::VerifyPing => {
                self.verify_pings_in_flight = self.verify_pings_in_flight.saturating_sub(1)
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

    fn push_learned(&mut self, level: Level, contact: Contact, rtt: Duration) {
        if self.learned.len() >= LEARNED_QUEUE_MAX {
            self.learned.pop_front();
        }
        self.learned.push_back((level, contact, rtt));
    }

    fn on_rpc_failed(&mut self, now: Time, txid: u32, p: Pending) {
        self.stats.rpc_timeouts += 1;
        if let Some(id) = p.to_id {
            for l in &mut self.levels {
                l.table.on_failure(&id);
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
        let claiming = o.kind == OpKind::Claim;
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
                };
                let full = state.is_full(l_max, ttl_secs);
                let probe = ProbeReply {
                    full_and_loaded: !claiming && loaded && full,
                    loaded: !claiming && loaded,
                    full: !claiming && full,
                    token,
                };
                if probe.full_and_loaded {
                    let jitter = self.rng.next_u64();
                    self.recall
                        .remember(o.key, o.level, from.id, min_ttl_secs, now, jitter);
                } else if !claiming && !self.recall.is_empty() {
                    // No longer full and loaded: a later answer that is
                    // starts its recall over at a minute.
                    self.recall.forget(&o.key, o.level, &from.id);
                }
                lookup.on_answer(&from.id, Some(probe), &contacts);
            }
            (Phase::Reverse { waiting, .. }, Body::StoreReply { stored, values, .. })
                if *waiting == Some(txid) =>
            {
                *waiting = None;
                if o.kind == OpKind::Claim && (stored || !values.is_empty()) {
                    self.finish_claim(op, o, now, stored, values);
                    return;
                }
                if stored {
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

    // ---- Operations ----------------------------------------------------------------

    /// A fresh operation id; an internal operation is registered before it
    /// can complete (a get may complete at once from the local store).
    fn alloc_op(&mut self, internal: Option<Internal>) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        if let Some(i) = internal {
            self.internal.insert(op, i);
        }
        op
    }

    fn level_order(&self, levels: Option<&[Level]>) -> SmallVec<[Level; 4]> {
        let n = self.levels.len() as Level;
        let mut v: SmallVec<[Level; 4]> = match levels {
            Some(ls) => ls.iter().copied().filter(|&l| l < n).collect(),
            None => (0..n).collect(),
        };
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.dedup();
        v
    }

    fn new_lookup(&self, key: Key, level: Level, start: Id) -> Lookup {
        let l = &self.levels[level as usize];
        // Seed with the contacts closest to where the walk will go first.
        let first = crate::dsht::id::next_target(
            &key,
            &start,
            key.distance(&start).leading_zeros() / self.hot.b,
            self.hot.b,
        )
        .map_or(key, |(t, _)| t);
        let seeds = l.table.closest(&first, self.hot.reply_contacts_max);
        Lookup::new(
            key,
            start,
            self.hot.b,
            self.hot.alpha,
            self.hot.rpc_stall,
            self.hot.lookup_contacts_max,
            seeds,
        )
    }

    /// The first phase of a put at `level`, walking from `start`. The local
    /// node is the first node of the forward phase (§4.2: "including itself").
    fn put_phase(&mut self, key: Key, level: Level, ttl_secs: u32, now: Time, start: Id) -> Phase {
        let state = self.levels[level as usize].store.probe(&key, now);
        if state.loaded && state.is_full(self.hot.values_per_key_max, ttl_secs) {
            // Full and loaded right here: the forward phase ends before it starts.
            return Phase::Reverse {
                stack: Vec::new(),
                stopped_at_loaded: true,
                waiting: None,
            };
        }
        let stack = vec![StackEntry {
            at: StoredAt::Local,
            token: [0; TOKEN_BYTES],
        }];
        Phase::Forward {
            // One probe per node per walk (a claim, not a put, re-asks).
            lookup: self.new_lookup(key, level, start).without_reask(),
            stack,
        }
    }

    /// Registers a new operation, arms its deadline and drives it as far as
    /// it goes.
    #[allow(clippy::too_many_arguments)]
    fn start_op(
        &mut self,
        now: Time,
        op: u64,
        kind: OpKind,
        key: Key,
        level: Level,
        levels_left: SmallVec<[Level; 4]>,
        phase: Phase,
        value: Value,
        ttl_secs: u32,
    ) {
        let deadline = now + self.hot.operation_timeout;
        let o = Op {
            kind,
            key,
            started: now,
            deadline,
            levels_left,
            level,
            phase,
            hops: 0,
            value,
            ttl_secs,
            put_levels: Vec::new(),
        };
        self.ops.insert(op, o);
        self.timers.push(deadline, Timer::Op(op));
        self.drive(op, now);
    }

    /// Sends one of a lookup's RPCs and records it (or its failure to go out,
    /// when the pending-RPC limit is reached) in the lookup.
    #[allow(clippy::too_many_arguments)]
    fn send_lookup_rpc(
        &mut self,
        now: Time,
        op: u64,
        lookup: &mut Lookup,
        contact: Contact,
        target: Id,
        route: u16,
        body: Body,
    ) {
        match self.send_request(
            now,
            contact.addr,
            Some(contact.id),
            route,
            body,
            Purpose::Op(op),
        ) {
            Some(txid) => lookup.sent(&contact.id, target, txid, now),
            None => lookup.on_failure(&contact.id),
        }
    }

    /// Advances operation `op` as far as it can go without input.
    fn drive(&mut self, op: u64, now: Time) {
        let Some(mut o) = self.ops.remove(&op) else {
            return;
        };
        if now >= o.deadline {
            self.abandon(op, o, now);
            return;
        }
        loop {
            match &mut o.phase {
                Phase::Walk(lookup) => match lookup.step(now) {
                    Step::Send { contact, target } => {
                        let key = lookup.key();
                        let body = match o.kind {
                            OpKind::Get => Body::Get {
                                level: o.level,
                                key,
                                target,
                            },
                            _ => Body::FindNode {
                                level: o.level,
                                target,
                            },
                        };
                        // Keyed walks route by key (their replies return to the
                        // core that owns the key); refreshes by our route hint.
                        let route = if o.kind == OpKind::Get {
                            route_of(&key)
                        } else {
                            self.route_hint
                        };
                        self.send_lookup_rpc(now, op, lookup, contact, target, route, body);
                    }
                    Step::Wait(at) => {
                        if let Some(at) = at {
                            self.timers.push(at, Timer::Op(op));
                        }
                        break;
                    }
                    Step::Done { closest } => {
                        if o.kind == OpKind::Refresh || o.levels_left.is_empty() {
                            match o.kind {
                                OpKind::Get => self.finish_get_miss(op, &o, now, closest),
                                OpKind::Refresh if o.key == self.id => {
                                    self.refresh_far_buckets(now, o.level)
                                }
                                _ => {}
                            }
                            return;
                        }
                        // §4.3: continue at the next level from where this one stopped.
                        o.level = o.levels_left.remove(0);
                        let start = closest.map_or(self.id, |c| c.id);
                        o.phase = Phase::Walk(self.new_lookup(o.key, o.level, start));
                    }
                },
                Phase::Forward { lookup, stack } => {
                    // Stop at the first node that is full and loaded.
                    let stop = lookup.met_loaded();
                    let step = if stop {
                        Step::Done { closest: None }
                    } else {
                        lookup.step(now)
                    };
                    match step {
                        Step::Send { contact, .. }
                            if o.kind == OpKind::Put
                                && self.recall.is_full_and_loaded(
                                    &o.key,
                                    o.level,
                                    &contact.id,
                                    o.ttl_secs,
                                    now,
                                ) =>
                        {
                            // It answered full and loaded within the minute and
                            // is still full for this value: the forward phase
                            // stops there without probing it again (§4.2).
                            lookup.on_known(
                                &contact.id,
                                ProbeReply {
                                    full_and_loaded: true,
                                    loaded: true,
                                    full: true,
                                    token: [0; TOKEN_BYTES],
                                },
                            );
                        }
                        Step::Send { contact, target } => {
                            let key = lookup.key();
                            let body = Body::PutProbe {
                                level: o.level,
                                key,
                                target,
                            };
                            self.send_lookup_rpc(
                                now,
                                op,
                                lookup,
                                contact,
                                target,
                                route_of(&key),
                                body,
                            );
                        }
                        Step::Wait(at) => {
                            if let Some(at) = at {
                                self.timers.push(at, Timer::Op(op));
                            }
                            break;
                        }
                        Step::Done { .. } => {
                            if o.kind == OpKind::Claim {
                                // A test-and-set goes to the closest node (the one
                                // every claimer agrees on), the local node included;
                                // farther ones only if it does not answer.
                                let key = lookup.key();
                                let mut entries: Vec<StackEntry> = lookup
                                    .answered_by_distance()
                                    .into_iter()
                                    .filter_map(|c| {
                                        Some(StackEntry {
                                            at: StoredAt::Remote(c.contact),
                                            token: c.probe?.token,
                                        })
                                    })
                                    .collect();
                                entries.push(StackEntry {
                                    at: StoredAt::Local,
                                    token: [0; TOKEN_BYTES],
                                });
                                let local = self.id;
                                entries.sort_by_key(|e| {
                                    Reverse(match e.at {
                                        StoredAt::Remote(c) => c.id.distance(&key),
                                        StoredAt::Local => local.distance(&key),
                                    })
                                });
                                o.phase = Phase::Reverse {
                                    stack: entries,
                                    stopped_at_loaded: false,
                                    waiting: None,
                                };
                                continue;
                            }
                            // The stack: every answered node that was not full
                            // (§4.2: a full node refuses the store, so storing
                            // there costs an RPC for nothing), ordered by
                            // distance to the key, and the local node
                            // (farthest, first pushed) when eligible.
                            let mut s = std::mem::take(stack);
                            let mut remote: Vec<StackEntry> = lookup
                                .answered_by_distance()
                                .into_iter()
                                .filter_map(|c| {
                                    let p = c.probe?;
                                    (!p.full_and_loaded && !p.full).then_some(StackEntry {
                                        at: StoredAt::Remote(c.contact),
                                        token: p.token,
                                    })
                                })
                                .collect();
                            if stop {
                                // Only the loaded node where the walk stopped and
                                // nodes farther from the key are candidates (a full
                                // one among them is out of the stack already).
                                let key = lookup.key();
                                if let Some(limit) = lookup
                                    .answered_by_distance()
                                    .iter()
                                    .filter(|c| c.probe.is_some_and(|p| p.loaded))
                                    .map(|c| c.contact.id.distance(&key))
                                    .max()
                                {
                                    remote.retain(|e| match e.at {
                                        StoredAt::Remote(c) => c.id.distance(&key) >= limit,
                                        StoredAt::Local => true,
                                    });
                                }
                            }
                            // Pop order: closest first, so push farthest first.
                            remote.reverse();
                            s.extend(remote);
                            o.phase = Phase::Reverse {
                                stack: s,
                                stopped_at_loaded: stop,
                                waiting: None,
                            };
                        }
                    }
                }
                Phase::Reverse { stack, waiting, .. } => {
                    if waiting.is_some() {
                        break;
                    }
                    let Some(top) = stack.pop() else {
                        if o.kind == OpKind::Claim {
                            self.finish_claim(op, o, now, false, Values::new());
                            return;
                        }
                        self.ops.insert(op, o);
                        self.finish_put_level(op, now, None);
                        return;
                    };
                    match top.at {
                        StoredAt::Local if o.kind == OpKind::Claim => {
                            let store = &mut self.levels[o.level as usize].store;
                            let (claimed, values) = if store.has_values(&o.key, now) {
                                let v =
                                    store.get(&o.key, now, self.hot.get_values_max, &mut self.rng);
                                (false, v)
                            } else {
                                let ttl = Duration::from_secs(u64::from(o.ttl_secs));
                                let outcome = store.store(&o.key, o.value.clone(), ttl, now);
                                (outcome.is_stored(), Values::new())
                            };
                            self.finish_claim(op, o, now, claimed, values);
                            return;
                        }
                        StoredAt::Local => {
                            let ttl = Duration::from_secs(u64::from(o.ttl_secs));
                            let outcome = self.levels[o.level as usize].store.store(
                                &o.key,
                                o.value.clone(),
                                ttl,
                                now,
                            );
                            if outcome.is_stored() {
                                self.ops.insert(op, o);
                                self.finish_put_level(op, now, Some(StoredAt::Local));
                                return;
                            }
                            debug_assert!(matches!(
                                outcome,
                                StoreOutcome::Full | StoreOutcome::TooManyKeys
                            ));
                        }
                        StoredAt::Remote(c) => {
                            let body = Body::Store {
                                level: o.level,
                                key: o.key,
                                ttl_secs: o.ttl_secs,
                                if_absent: o.kind == OpKind::Claim,
                                token: top.token,
                                value: o.value.clone(),
                            };
                            *waiting = self.send_request(
                                now,
                                c.addr,
                                Some(c.id),
                                route_of(&o.key),
                                body,
                                Purpose::Op(op),
                            );
                        }
                    }
                }
            }
        }
        self.ops.insert(op, o);
    }

    /// A put finished one level: record it, then go on to the next level from
    /// where the value was inserted, unless the key was loaded (§4.3).
    fn finish_put_level(&mut self, op: u64, now: Time, stored_at: Option<StoredAt>) {
        let Some(mut o) = self.ops.remove(&op) else {
            return;
        };
        let stopped_at_loaded = matches!(
            o.phase,
            Phase::Reverse {
                stopped_at_loaded: true,
                ..
            }
        );
        o.put_levels.push(PutLevel {
            level: o.level,
            stored_at,
            stopped_at_loaded,
        });
        if stopped_at_loaded || o.levels_left.is_empty() {
            self.push_event(
                now,
                Event::PutDone {
                    op: OpId(op),
                    key: o.key,
                    levels: o.put_levels,
                    elapsed: now.saturating_since(o.started),
                },
            );
            return;
        }
        o.level = o.levels_left.remove(0);
        let start = match stored_at {
            Some(StoredAt::Remote(c)) => c.id,
            _ => self.id,
        };
        o.phase = self.put_phase(o.key, o.level, o.ttl_secs, now, start);
        self.ops.insert(op, o);
        self.drive(op, now);
    }

    /// `o` is out of `ops` already, as in [`Node::finish_get`].
    fn finish_claim(&mut self, op: u64, o: Op, now: Time, claimed: bool, values: Values) {
        self.push_event(
            now,
            Event::ClaimDone {
                op: OpId(op),
                key: o.key,
                claimed,
                values: values.into_vec(),
                elapsed: now.saturating_since(o.started),
            },
        );
    }

    /// The operation ran out of time: report what it has.
    fn abandon(&mut self, op: u64, mut o: Op, now: Time) {
        match o.kind {
            OpKind::Get => self.finish_get_miss(op, &o, now, None),
            OpKind::Put => {
                o.put_levels.push(PutLevel {
                    level: o.level,
                    stored_at: None,
                    stopped_at_loaded: false,
                });
                self.push_event(
                    now,
                    Event::PutDone {
                        op: OpId(op),
                        key: o.key,
                        levels: o.put_levels,
                        elapsed: now.saturating_since(o.started),
                    },
                );
            }
            OpKind::Claim => self.finish_claim(op, o, now, false, Values::new()),
            OpKind::Refresh => {}
        }
    }

    /// A get found nothing at any level it searched.
    fn finish_get_miss(&mut self, op: u64, o: &Op, now: Time, closest: Option<Contact>) {
        self.finish_get(
            op,
            o.key,
            o.started,
            now,
            Values::new(),
            None,
            false,
            closest,
            o.hops,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_get(
        &mut self,
        op: u64,
        key: Key,
        started: Time,
        now: Time,
        values: Values,
        level: Option<Level>,
        local: bool,
        closest: Option<Contact>,
        hops: u32,
    ) {
        // Every caller has taken the operation out of `ops` (or never put it
        // there): replies still outstanding find no operation and only
        // refresh routing tables (operation ids are never reused).
        debug_assert!(!self.ops.contains_key(&op));
        self.push_event(
            now,
            Event::GetDone {
                op: OpId(op),
                key,
                values: values.into_vec(),
                level,
                local,
                closest,
                hops,
                elapsed: now.saturating_since(started),
            },
        );
    }

    /// Hands a completed operation to the application, or to the node when
    /// the node started it.
    fn push_event(&mut self, now: Time, e: Event) {
        if !self.internal.is_empty() {
            if let Some(internal) = self.internal.remove(&e.op().0) {
                self.on_internal_done(now, internal, e);
                return;
            }
        }
        if self.events.len() >= self.hot.event_queue_max {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    // ---- Sending -------------------------------------------------------------------------

    /// Our header: every message carries our cluster at each non-global
    /// level, its age and our estimate of its size (§4.3).
    fn header(&self, route: u16, txid: u32, now: Time) -> Header {
        Header {
            route,
            txid,
            sender: self.id,
            services: self.services,
            clusters: self.levels[1..]
                .iter()
                .map(|l| ClusterInfo {
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

    fn send_request(
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
        let mut txid = self.next_txid;
        while self.pending.contains_key(&txid) {
            txid = txid.wrapping_add(1);
        }
        self.next_txid = txid.wrapping_add(1);
        let deadline = now + self.hot.rpc_timeout;
        let request_kind = body.kind();
        let mut header = self.header(route, txid, now);
        if matches!(purpose, Purpose::VerifyPing) {
            // A verifying ping needs none of our clusters (its pong carries
            // the requester's): 30 bytes, so that it fits with the reply
            // within `reply_amplification_max` of even a small request.
            header.clusters.clear();
        }
        self.pending.insert(
            txid,
            Pending {
                to,
                to_id,
                sent: now,
                deadline,
                request_kind,
                purpose,
            },
        );
        self.timers.push_rpc(deadline, txid);
        self.queue(to, Message { header, body });
        Some(txid)
    }

    fn queue(&mut self, to: SocketAddr, msg: Message) {
        let mut bytes = Vec::with_capacity(DATAGRAM_BUFFER_BYTES);
        msg.encode(&mut bytes);
        self.queue_bytes(to, bytes);
    }

    fn queue_bytes(&mut self, to: SocketAddr, bytes: Vec<u8>) {
        if self.out.len() >= self.hot.transmit_queue_max {
            self.out.pop_front();
            self.stats.transmit_dropped += 1;
        }
        self.out.push_back((to, bytes));
    }

    // ---- Tokens ----------------------------------------------------------------------------

    fn rotate_secret(&mut self, now: Time) {
        let epoch = now.as_secs() / self.hot.token_rotate_secs;
        if epoch != self.secret_epoch {
            self.previous_secret = if epoch == self.secret_epoch + 1 {
                self.secret
            } else {
                [0; 16]
            };
            self.rng.fill(&mut self.secret);
            self.secret_epoch = epoch;
        }
    }

    fn token_for(&mut self, now: Time, addr: SocketAddr) -> Token {
        self.rotate_secret(now);
        token(&self.secret, addr)
    }

    fn token_is_valid(&mut self, now: Time, addr: SocketAddr, t: &Token) -> bool {
        self.rotate_secret(now);
        token(&self.secret, addr) == *t
            || (self.previous_secret != [0; 16] && token(&self.previous_secret, addr) == *t)
    }

    // ---- Clusters (§4.4) -------------------------------------------------------------------

    /// Every level reconsiders its cluster; level 0 explores a little, so
    /// that even an idle node keeps measuring nodes of other clusters.
    fn evaluate_clusters(&mut self, now: Time) {
        if !self.hot.cluster_manage || self.managers.is_empty() {
            return;
        }
        let mut target = Id::ZERO;
        self.rng.fill(&mut target.0);
        self.refresh(now, target, 0);
        if !self.hints_stored {
            // A node that never bootstrapped (the first) stores them now.
            self.store_hints(now);
        }
        let mut singleton = false;
        for i in 0..self.managers.len() {
            let level = i + 1;
            let l = &self.levels[level];
            let current = Current {
                view: View {
                    id: l.cluster.id,
                    size: l.size_estimate,
                    created: l.cluster.created,
                },
                alone: l.table.is_empty(),
            };
            singleton |= current.alone;
            let mut out = Vec::new();
            self.managers[i].evaluate(now, current, &self.config, &mut self.rng, &mut out);
            self.run_cluster_commands(now, level as Level, out);
        }
        let since = now.saturating_since(self.hints_looked_up);
        if singleton && since >= Duration::from_secs(u64::from(self.config.hint_ttl_secs / 2)) {
            // Still alone somewhere: the hints may name someone new by now.
            self.lookup_hints(now);
        }
    }

    /// Carries out what the cluster manager of `level` asked for.
    fn run_cluster_commands(&mut self, now: Time, level: Level, commands: Vec<Command>) {
        let mut queue: VecDeque<Command> = commands.into();
        while let Some(command) = queue.pop_front() {
            let mut more = Vec::new();
            match command {
                Command::Ping { addr, id, round } => {
                    self.send_probe(now, level, round, addr, id, Body::Ping, &mut more);
                }
                Command::Members {
                    contact,
                    target,
                    round,
                } => {
                    let body = Body::Members { level, target };
                    let (addr, id) = (contact.addr, Some(contact.id));
                    self.send_probe(now, level, round, addr, id, body, &mut more);
                }
                Command::Get { key, levels, round } => {
                    self.start_internal_get(now, key, &levels, Internal::Cluster { level, round });
                }
                Command::Put { key, levels, round } => {
                    let value = Value::from_addr(self.addr);
                    let ttl = self.config.hint_ttl_secs;
                    let internal = Internal::Cluster { level, round };
                    self.start_internal_put(now, key, value, ttl, &levels, internal);
                }
                Command::Explore => {
                    let mut target = Id::ZERO;
                    self.rng.fill(&mut target.0);
                    self.refresh(now, target, level);
                }
                Command::Switch {
                    cluster,
                    created,
                    members,
                    ..
                } => self.switch_cluster(now, level, cluster, created, &members),
            }
            queue.extend(more);
        }
    }

    /// Sends one RPC of the cluster manager's probe `round` at `level`; one
    /// that cannot be sent (the pending-RPC limit) counts as failed.
    #[allow(clippy::too_many_arguments)]
    fn send_probe(
        &mut self,
        now: Time,
        level: Level,
        round: u32,
        addr: SocketAddr,
        id: Option<Id>,
        body: Body,
        more: &mut Vec<Command>,
    ) {
        let purpose = Purpose::ClusterProbe { level, round };
        if self
            .send_request(now, addr, id, self.route_hint, body, purpose)
            .is_none()
        {
            self.managers[level as usize - 1].on_probe_failed(
                now,
                round,
                &self.config,
                &mut self.rng,
                more,
            );
        }
    }

    /// Joins `cluster` at `level` (§4.4): the old cluster's table and store
    /// go; members that have answered us seed the new table, and a lookup for
    /// our own id in the new cluster fills it.
    fn switch_cluster(
        &mut self,
        now: Time,
        level: Level,
        cluster: Id,
        created: Time,
        members: &[Contact],
    ) {
        self.set_cluster(level, cluster, created);
        let l = level as usize;
        let observed: Vec<(Contact, Option<Duration>)> = self.managers[l - 1]
            .observed()
            .filter(|o| o.cluster == cluster)
            .map(|o| (o.contact, o.rtt()))
            .collect();
        for (c, rtt) in members.iter().map(|c| (*c, None)).chain(observed) {
            if self.levels[l].table.insert(c, now, rtt) == Insert::Added {
                // Cores that follow this one hear of the new members too.
                self.push_learned(level, c, rtt.unwrap_or_default());
            }
        }
        self.refresh(now, self.id, level);
        self.stats.cluster_switches += 1;
        if self.cluster_changes.len() >= CLUSTER_CHANGES_MAX {
            self.cluster_changes.pop_front();
        }
        self.cluster_changes.push_back((
            level,
            Cluster {
                id: cluster,
                created,
            },
        ));
    }

    /// Starts a get the node needs itself, here or on the shard that owns the key.
    fn start_internal_get(&mut self, now: Time, key: Key, levels: &[Level], internal: Internal) {
        if self.owns(&key) {
            self.get_for(now, key, Some(levels), Some(internal));
        } else {
            let call = DelegatedCall::Get {
                key,
                levels: levels.to_vec(),
            };
            self.delegate(call, internal);
        }
    }

    /// Starts a put the node needs itself, here or on the shard that owns the key.
    fn start_internal_put(
        &mut self,
        now: Time,
        key: Key,
        value: Value,
        ttl_secs: u32,
        levels: &[Level],
        internal: Internal,
    ) {
        if self.owns(&key) {
            self.put_for(now, key, value, ttl_secs, Some(levels), Some(internal));
        } else {
            let call = DelegatedCall::Put {
                key,
                value,
                ttl_secs,
                levels: levels.to_vec(),
            };
            self.delegate(call, internal);
        }
    }

    fn delegate(&mut self, call: DelegatedCall, internal: Internal) {
        let tag = self.next_tag;
        self.next_tag += 1;
        if self.delegated.len() >= DELEGATED_MAX {
            self.delegated.pop_first(); // its result never came
        }
        if self.delegated_out.len() >= DELEGATED_MAX {
            self.delegated_out.pop_front();
        }
        self.delegated.insert(tag, internal);
        self.delegated_out.push_back(Delegated { tag, call });
    }

    /// An operation the node started for itself completed.
    fn on_internal_done(&mut self, now: Time, internal: Internal, event: Event) {
        match (internal, event) {
            (
                Internal::Cluster { level, round },
                Event::GetDone {
                    values, closest, ..
                },
            ) => {
                let mut out = Vec::new();
                self.managers[level as usize - 1].on_get_done(
                    now,
                    round,
                    &values,
                    closest,
                    &self.config,
                    &mut self.rng,
                    &mut out,
                );
                self.run_cluster_commands(now, level, out);
            }
            (Internal::Cluster { level, round }, Event::PutDone { .. }) => {
                let mut out = Vec::new();
                self.managers[level as usize - 1].on_put_done(round, &mut out);
                self.run_cluster_commands(now, level, out);
            }
            (Internal::HintGet, Event::GetDone { values, .. }) => {
                // Measure the nodes the hint names: their replies are
                // observed like any other (RTT, clusters).
                let me = self.addr;
                for addr in values
                    .iter()
                    .filter_map(Value::to_addr)
                    .filter(|a| *a != me)
                    .take(self.config.hint_probes_max)
                {
                    self.send_request(
                        now,
                        addr,
                        None,
                        self.route_hint,
                        Body::Ping,
                        Purpose::HintPing,
                    );
                }
            }
            _ => {}
        }
    }

    /// Stores a pointer to this node under each hint key, at every level
    /// (§4.4), and schedules the renewal.
    fn store_hints(&mut self, now: Time) {
        if self.hints.is_empty() {
            return;
        }
        self.hints_stored = true;
        let levels: Vec<Level> = (0..self.levels.len() as Level).rev().collect();
        for key in self.hints.clone() {
            let value = Value::from_addr(self.addr);
            let ttl = self.config.hint_ttl_secs;
            self.start_internal_put(now, key, value, ttl, &levels, Internal::Quiet);
        }
        if !self.hints_renewing {
            self.hints_renewing = true;
            let at = now + Duration::from_secs(u64::from(self.config.hint_ttl_secs / 2));
            self.timers.push(at, Timer::HintRenew);
        }
    }

    /// Looks up every hint key: the nodes found are measured, and the join
    /// decision sees their clusters (§4.4).
    fn lookup_hints(&mut self, now: Time) {
        if !self.hot.cluster_manage {
            return;
        }
        self.hints_looked_up = now;
        let levels: Vec<Level> = (0..self.levels.len() as Level).rev().collect();
        for key in self.hints.clone() {
            self.start_internal_get(now, key, &levels, Internal::HintGet);
        }
    }

    // ---- Maintenance ---------------------------------------------------------------------

    fn maintain(&mut self, now: Time) {
        self.timers
            .push(now + MAINTENANCE_INTERVAL, Timer::Maintenance);
        for l in &mut self.levels {
            let generation = l.table.generation();
            if l.estimated_at != Some(generation) {
                l.size_estimate = l.table.size_estimate();
                l.estimated_at = Some(generation);
            }
        }
        if now.saturating_since(self.last_sweep) >= SWEEP_INTERVAL {
            self.last_sweep = now;
            for l in &mut self.levels {
                l.store.sweep(now);
            }
            self.pinged
                .retain(|_, t| now.saturating_since(*t) < PINGED_RECENTLY);
        }
        // Kademlia's refresh: a lookup for a random id in one quiet bucket per level.
        let quiet_since = now - Duration::from_secs(self.config.bucket_refresh_secs);
        if now.as_micros() >= Duration::from_secs(self.config.bucket_refresh_secs).as_micros() {
            for level in 0..self.levels.len() {
                let stale = self.levels[level].table.stale_buckets(quiet_since);
                if let Some(&bucket) = stale.first() {
                    let target = self.random_id_in_bucket(bucket);
                    self.refresh(now, target, level as Level);
                }
            }
        }
    }

    /// After a lookup for our own id (joining), refresh every bucket farther
    /// than our closest neighbour with a lookup for a random id in it, as
    /// Kademlia does, so the table holds contacts across the whole id space.
    fn refresh_far_buckets(&mut self, now: Time, level: Level) {
        let table = &self.levels[level as usize].table;
        let Some(nearest) = table
            .entries()
            .map(|e| self.id.distance(&e.contact.id).bit_len())
            .min()
        else {
            return;
        };
        // Bucket i holds distances of bit length i + 1.
        let first = nearest as usize; // the bucket just past the closest neighbour's
        for bucket in (first..crate::dsht::id::ID_BITS as usize)
            .rev()
            .take(JOIN_REFRESHES_MAX)
        {
            let target = self.random_id_in_bucket(bucket);
            self.refresh(now, target, level);
        }
    }

    fn random_id_in_bucket(&mut self, bucket: usize) -> Id {
        // Distance with bit length bucket+1: flip bit (159 − bucket), randomise below it.
        let mut d = Id::ZERO;
        self.rng.fill(&mut d.0);
        let top = 159 - bucket as u32;
        for bit in 0..=top {
            let (byte, mask) = ((bit / 8) as usize, 0x80u8 >> (bit % 8));
            if bit < top {
                d.0[byte] &= !mask;
            } else {
                d.0[byte] |= mask;
            }
        }
        let mut out = self.id;
        for i in 0..out.0.len() {
            out.0[i] ^= d.0[i];
        }
        out
    }
}

/// A routing table for `id` with the address limits of `config` (lifted
/// where ids include the port: many nodes per address by design).
fn new_table(config: &Config, id: Id) -> RoutingTable {
    let mut t = RoutingTable::new(id, config.bucket_size);
    if !config.id_includes_port {
        t.set_address_limits(
            config.bucket_contacts_per_ip_max,
            config.bucket_contacts_per_prefix_max,
        );
    }
    t
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

/// The route value of requests for `key`: its first two bytes.
pub fn route_of(key: &Key) -> u16 {
    u16::from_be_bytes([key.0[0], key.0[1]])
}

/// The shard of `count` that owns `route`: `(route · count) >> 16`, so that
/// each shard owns one contiguous range of routes (the runtime's steering
/// program computes the same).
pub fn shard_of_route(route: u16, count: usize) -> usize {
    ((u64::from(route) * count as u64) >> 16) as usize
}

fn token(secret: &[u8; 16], addr: SocketAddr) -> Token {
    let mut h = Sha1::new();
    h.update(secret);
    match addr.ip() {
        IpAddr::V4(v4) => h.update(v4.octets()),
        IpAddr::V6(v6) => h.update(v6.octets()),
    }
    h.update(addr.port().to_be_bytes());
    let d = h.finalize();
    let mut t = [0u8; TOKEN_BYTES];
    t.copy_from_slice(&d[..TOKEN_BYTES]);
    t
}

fn ip_common_prefix(a: IpAddr, b: IpAddr) -> u32 {
    match (a, b) {
        (IpAddr::V4(x), IpAddr::V4(y)) => (u32::from(x) ^ u32::from(y)).leading_zeros(),
        (IpAddr::V6(x), IpAddr::V6(y)) => (u128::from(x) ^ u128::from(y)).leading_zeros(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_cache_is_bounded_and_tags_name_the_pair() {
        let mut c = VerifiedCache::new(&[1; 16], &[2; 16]);
        let a = SocketAddr::from(([10, 0, 0, 1], 7000));
        let id = Id::from_ip(a.ip());
        let tag = c.tag(a, &id);
        assert!(!c.contains(tag));
        c.insert(tag);
        assert!(c.contains(c.tag(a, &id)));
        // Another id from the same address, or the same id from another
        // address or port, is another pair.
        assert!(!c.contains(c.tag(a, &Id::hash(b"forged"))));
        assert!(!c.contains(c.tag(SocketAddr::from(([10, 0, 0, 1], 7001)), &id)));
        assert!(!c.contains(c.tag(SocketAddr::from(([10, 0, 0, 2], 7000)), &id)));
        // Another key, other tags.
        let other = VerifiedCache::new(&[3; 16], &[2; 16]);
        assert_ne!(other.tag(a, &id), tag);
        // A flood of sources evicts, never grows.
        for i in 0..100_000u32 {
            let from = SocketAddr::from((i.to_be_bytes(), 1));
            c.insert(c.tag(from, &id));
        }
        assert_eq!(c.tags.len(), VERIFIED_CACHE_SLOTS);
    }
}
