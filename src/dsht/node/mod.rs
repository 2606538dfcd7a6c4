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
//!
//! This file holds the node's state, its public types and the API; the
//! `impl Node` is split by concern (as quinn-proto's `connection/`):
//!
//! - `ops.rs`: put, claim, get and refresh, and starting each level's phase;
//! - `drive.rs`: driving an operation step by step to its end and its event;
//! - `serve.rs`: serving requests, and who may be served at which level;
//! - `reply.rs`: replies and failed RPCs, fed to their operation or probe;
//! - `send.rs`: the header, outstanding RPCs and the transmit queue;
//! - `transmit.rs`: the transmit queue's slots, whose buffers a server's
//!   node encodes its next datagrams into;
//! - `tokens.rs`: write tokens and their rotating secret;
//! - `verified.rs`: the cache of senders found bound to their address;
//! - `clusters.rs`: reconsidering clusters (§4.4), internal operations, hints;
//! - `delegate.rs`: keyed operations handed to the core owning the key;
//! - `maintain.rs`: sweeps and bucket refreshes;
//! - `timers.rs`: the deadlines and [`Node::handle_timeout`].

mod admission;
mod clusters;
mod delegate;
mod drive;
mod maintain;
mod ops;
mod optable;
mod pending;
mod pinged;
mod reply;
mod send;
mod serve;
mod timers;
mod tokens;
mod transmit;
mod verified;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::config::{Config, ConfigError};
use crate::dsht::cluster::{ClusterStats, Manager};
use crate::dsht::id::{keyed_hasher, FastBuildHasher, Id, Key, KeyedBuildHasher, NodeId};
use crate::dsht::prefetch::prefetch;
use crate::dsht::ratelimit::{RateLimiter, Verdict};
use crate::dsht::recall::Recall;
use crate::dsht::routing::RoutingTable;
use crate::dsht::store::{Quotas, Store};
use crate::dsht::wire::{Contact, Message, Services, Value, WireError};
use crate::rng::Rng;
use crate::time::{Duration, Time};

use clusters::Internal;
use ops::Op;
use pinged::PingedAddrs;
use send::Purpose;
use timers::{Timer, Timers};
use verified::VerifiedCache;

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
/// How often expired values and quiet keys are dropped from the stores:
/// every maintenance tick, so a claim (20 s TTL) leaves memory soon after
/// it expires (`Store::sweep`; SECURITY.md, "URL floods").
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// A first-hand cluster member not heard from for this long may be
/// forgotten to make room for another.
const MEMBER_FORGET: Duration = Duration::from_secs(3600);
/// The capacity a datagram's buffer starts with: room for a header and a
/// full set of contacts, so that encoding rarely grows it.
const DATAGRAM_BUFFER_BYTES: usize = 512;

/// A transmit queue's slots and buffers, with nothing queued, that a driver
/// lends to one node after another ([`Node::swap_transmit_room`]). What it
/// keeps is bounded as a server's node's queue is
/// (`dsht::limits::TRANSMIT_SLOTS_KEPT_MAX`, `TRANSMIT_BUFFER_KEPT_BYTES`).
#[derive(Debug, Default)]
pub struct TransmitRoom(transmit::TransmitQueue);

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
    /// The size estimate when this level's far buckets were last filled by
    /// refreshes (`Node::refresh_far_buckets`), 0 before the join's.
    filled_for: u32,
    /// Nodes known first-hand to share this level's cluster: each answered
    /// one of our RPCs from this address with our cluster in its header,
    /// within the level's RTT threshold. A request at this level is served
    /// only to them (§4.3; a cluster id copied into a header is not enough).
    /// Bounded by `cluster_members_known_max`.
    members: HashMap<SocketAddr, (Id, Time), KeyedBuildHasher>,
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
    /// Operations under way, by id (`optable.rs`). Boxed: the table keeps
    /// room for twice or four times its entries, and an operation is 264
    /// bytes (a node with a put under way held 1.1 KB of map for it);
    /// moving one in and out of the table, as driving it does, moves a
    /// pointer.
    ops: optable::OpTable<Box<Op>>,
    events: VecDeque<Event>,
    out: transmit::TransmitQueue,
    learned: VecDeque<(Level, Contact, Duration)>,
    /// Operations the node started for itself, by operation id.
    internal: HashMap<u64, Internal, FastBuildHasher>,
    timers: Timers,
    hot: HotConfig,
    rng: Rng,
    addr: SocketAddr,
    /// Every put and get starts its walk from it.
    id: NodeId,
    // -- Read by every datagram.
    stats: Stats,
    services: Services,
    route_hint: u16,
    next_txid: u32,
    pending: pending::PendingRpcs,
    verified: VerifiedCache,
    /// Senders that answered one of our RPCs from their address (the
    /// address is theirs): served in full and at the verified rate.
    answered: VerifiedCache,
    limiter: RateLimiter,
    secret: [u8; 16],
    previous_secret: [u8; 16],
    secret_epoch: u64,
    verify_pings_in_flight: usize,
    /// Addresses pinged to verify them, within the last minute.
    pinged: PingedAddrs,
    /// Identity and admission (`admission.rs`); `None`: every contact that
    /// answers enters the tables (the simulator, and nodes of old).
    admission: Option<Box<admission::Admission>>,
    /// The cluster manager of each non-global level (index 0 = level 1).
    managers: Vec<Manager>,
    // -- Cold.
    /// Never changes after [`Node::new`]; shared between nodes where the
    /// driver gives them one ([`Node::with_shared_config`]).
    config: Arc<Config>,
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
    /// The nodes [`Node::bootstrap`] was given (not our own address), tried
    /// again while level 0 holds no live contact ([`Node::maintain`]).
    bootstrap_addrs: Box<[SocketAddr]>,
    /// When we last contacted them.
    bootstrapped_at: Time,
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

    /// [`Node::prefetch`] for a node about to be called through its API
    /// (a put or a get): only the lines every API call reads, not those
    /// only a datagram does (8 lines of the 18 before the cold state: the
    /// simulator's prefetches of whole nodes three events ahead kept the
    /// CPU's fill buffers busy).
    pub fn prefetch_call(&self) {
        prefetch(
            (self as *const Node).cast(),
            std::mem::offset_of!(Node, stats),
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

    /// Once [`Node::prefetch`]'s lines and `datagram`'s first line have
    /// arrived: if the datagram is a reply, starts loading its RPC's slot
    /// in the table of outstanding RPCs (a hint: a datagram that is not
    /// well formed, or not a reply to us, changes nothing).
    pub fn prefetch_datagram(&self, datagram: &[u8]) {
        if let Some(txid) = crate::dsht::wire::peek_reply_txid(datagram) {
            self.pending.prefetch(txid);
        }
    }

    /// Once [`Node::prefetch_levels`]' lines and `datagram`'s first line
    /// have arrived: starts loading, in every level's routing table, the
    /// bucket of the datagram's sender (which every well-formed datagram
    /// from it inserts, refreshes or removes). A hint only.
    pub fn prefetch_sender_bucket(&self, datagram: &[u8]) {
        if let Some(sender) = crate::dsht::wire::peek_sender(datagram) {
            for l in &self.levels {
                l.table.prefetch_bucket(&sender);
            }
        }
    }

    /// Once [`Node::prefetch_sender_bucket`]'s lines have arrived: starts
    /// loading the contacts of those buckets. A hint only.
    pub fn prefetch_sender_contacts(&self, datagram: &[u8]) {
        if let Some(sender) = crate::dsht::wire::peek_sender(datagram) {
            for l in &self.levels {
                l.table.prefetch_contacts(&sender);
            }
        }
    }

    /// Once [`Node::prefetch_levels`]' lines have arrived: starts loading
    /// the first entry of the highest level's store, where puts and gets
    /// start (the state of a hot key).
    pub fn prefetch_top_store(&self) {
        if let Some(l) = self.levels.last() {
            l.store.prefetch();
        }
    }

    /// Once [`Node::prefetch_top_store`]'s lines have arrived: starts
    /// loading the values of the highest level's first key (a hot key's,
    /// which its puts and gets read).
    pub fn prefetch_top_values(&self) {
        if let Some(l) = self.levels.last() {
            l.store.prefetch_values();
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
        Node::with_shared_config(Arc::new(config), addr, now, seed)
    }

    /// [`Node::new`] with a configuration other nodes may share: a driver
    /// of many nodes with one configuration (the simulator) keeps one copy
    /// of its 384 bytes, not one a node (issue 27: a million simulated
    /// nodes held 384 MB of identical configurations).
    pub fn with_shared_config(
        config: Arc<Config>,
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
                    table: {
                        let mut t = new_table(&config, id);
                        if level == 0 {
                            t.keep_last_contact();
                        }
                        t
                    },
                    store: Store::new(
                        config.values_per_key_max,
                        config.beta_per_min,
                        config.keys_per_level_max,
                    )
                    .with_limits(quotas, keyed_hasher(&hash_secret, "store")),
                    size_estimate: 1,
                    estimated_at: None,
                    filled_for: 0,
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
            pending: pending::PendingRpcs::default(),
            timers: Timers::default(),
            ops: optable::OpTable::default(),
            next_op: 1,
            next_txid,
            out: transmit::TransmitQueue::default(),
            events: VecDeque::new(),
            secret,
            previous_secret,
            verified: VerifiedCache::new(&secret, &previous_secret),
            answered: VerifiedCache::new(&previous_secret, &secret),
            limiter,
            pinged: PingedAddrs::new(
                keyed_hasher(&hash_secret, "pinged"),
                keyed_hasher(&hash_secret, "pinged6"),
            ),
            admission: None,
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
            bootstrap_addrs: Box::default(),
            bootstrapped_at: now,
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
            let body = self.ping_body();
            self.send_request(now, addr, None, self.route_hint, body, Purpose::HintPing);
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
    /// They are tried again, every
    /// [`REBOOTSTRAP_INTERVAL`](crate::dsht::limits::REBOOTSTRAP_INTERVAL), while level 0
    /// holds no live contact: none answered (they started after us), or
    /// every contact since failed (our link went down, or the network we
    /// knew died); see `RoutingTable::is_stranded`.
    pub fn bootstrap(&mut self, now: Time, addrs: &[SocketAddr]) {
        self.bootstrap_addrs = addrs.iter().copied().filter(|a| *a != self.addr).collect();
        self.send_bootstrap(now);
    }

    pub(super) fn send_bootstrap(&mut self, now: Time) {
        self.bootstrapped_at = now;
        for i in 0..self.bootstrap_addrs.len() {
            let addr = self.bootstrap_addrs[i];
            let body = self.ping_body();
            self.send_request(now, addr, None, self.route_hint, body, Purpose::Bootstrap);
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
        self.mark_admitted(contact.addr, &contact.id);
        if let Some(l) = self.levels.get_mut(level as usize) {
            l.table.insert(contact, now, rtt);
        }
    }

    /// Handles one datagram from `from`. Bad datagrams are dropped and
    /// counted; the reason is returned for logging.
    pub fn handle(&mut self, now: Time, from: SocketAddr, datagram: &[u8]) -> Result<(), Dropped> {
        self.stats.datagrams_in += 1;
        // Decoded where it stays (a move of its ~300 bytes cost ~60
        // instructions a get, issue 27): a request is answered from it by
        // reference; a reply is moved on.
        let mut msg = Message::empty();
        if let Err(e) = Message::decode_into(datagram, &mut msg) {
            self.stats.malformed += 1;
            return Err(Dropped::Malformed(e));
        }
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
            self.on_request(now, from, &msg, datagram.len(), verified);
            if msg.body.holds_no_heap() && !msg.header.clusters.spilled() {
                // Nothing of it is on the heap: its drop glue is skipped
                // (issue 27; a store's value or a hello's identity is
                // dropped as usual).
                std::mem::forget(msg);
            }
            Ok(())
        } else {
            let r = self.on_reply(now, from, msg);
            self.prune_timers();
            r
        }
    }

    /// The next datagram to send: its bytes replace the contents of `buf`,
    /// and its destination is returned. Datagrams are encoded when queued,
    /// so a whole `Message` is never moved. Each gets a fresh buffer and the
    /// caller's old one is freed: the allocator hands back the buffer freed
    /// last, which is in cache, where a pool of the node's own would be cold
    /// by the time the node sends again (at 10,000 simulated nodes, every
    /// line of it a miss; 2–4% of the hotspot run).
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        // Freed once drained (`TransmitQueue::pop_front`).
        let (to, bytes) = self.out.pop_front()?;
        *buf = bytes;
        self.stats.datagrams_out += 1;
        Some(to)
    }

    /// [`Node::poll_transmit`] for a node that keeps its transmit queue's
    /// room once drained (a server's node, drained after every batch: the
    /// queue regrew from nothing each time, and each datagram had a buffer
    /// allocated and freed, issue 27), where the simulator's 10,000 nodes
    /// free theirs. The datagram's bytes are swapped into `buf`, whose old
    /// buffer (emptied) the node encodes a later datagram into; what it keeps
    /// is bounded (`dsht::limits::TRANSMIT_SLOTS_KEPT_MAX`,
    /// `TRANSMIT_BUFFER_KEPT_BYTES`). The same datagrams in the same order.
    #[inline]
    pub fn poll_transmit_keeping(&mut self, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        let to = self.out.pop_front_into(buf)?;
        self.stats.datagrams_out += 1;
        Some(to)
    }

    /// Swaps this node's transmit queue with `room`: a driver of many nodes
    /// on one thread (the simulator's lanes, issue 27) lends its one room to
    /// each node it gives an input, and takes it back once it has drained
    /// the node's datagrams with [`Node::poll_transmit_keeping`]. The node
    /// encodes into the room's buffers, warm from the datagrams just
    /// delivered, where on its own it would allocate a buffer per datagram
    /// and a queue per input and free both once polled (with the lanes on
    /// threads, often another thread's). Both must have nothing queued, so
    /// that no datagram changes hands: the same datagrams in the same order.
    #[inline]
    pub fn swap_transmit_room(&mut self, room: &mut TransmitRoom) {
        debug_assert!(
            self.out.len() == 0 && room.0.len() == 0,
            "a transmit room swapped with datagrams queued"
        );
        std::mem::swap(&mut self.out, &mut room.0);
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

fn ip_common_prefix(a: IpAddr, b: IpAddr) -> u32 {
    match (a, b) {
        (IpAddr::V4(x), IpAddr::V4(y)) => (u32::from(x) ^ u32::from(y)).leading_zeros(),
        (IpAddr::V6(x), IpAddr::V6(y)) => (u128::from(x) ^ u128::from(y)).leading_zeros(),
        _ => 0,
    }
}
