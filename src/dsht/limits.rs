//! The DSHT's bounds on its queues and tables that are not fields of
//! [`Config`](crate::config::Config): fixed sizes chosen once, each named
//! with its unit and saying why it is that size. Every other DSHT limit an
//! operator may tune (operations, RPCs, transmit queue, stores, quotas, rate
//! limits) is a field of `Config`; the wire format's protocol maxima
//! (contacts and values per message, value and datagram bytes) are in
//! [`wire`](super::wire).
//!
//! A full queue drops its oldest entry (or refuses the newest, as each use
//! says); nothing here grows with what the network sends.

/// Newly verified contacts kept for
/// [`Node::poll_learned`](super::node::Node::poll_learned) before the oldest
/// are dropped: a driver that does not poll them loses only the oldest.
pub const LEARNED_CONTACTS_MAX: usize = 1024;

/// Bucket refreshes a node starts after joining, per level: enough to fill
/// the buckets of a network of millions, without a burst of lookups.
pub const JOIN_REFRESHES_MAX: usize = 20;

/// Growth of a node's estimate of the network's size (a factor) since it
/// last filled a level's far buckets at which it fills them again
/// (`Node::refill_if_grown`, rule 10 of ARCHITECTURE.md "No hot spot for
/// any id set"). A node refills at most log_4(2^32) = 16 times a level in
/// its life, whatever its estimate does: it refills only past 4× the
/// estimate of its last fill, which never falls.
pub const REFILL_GROWTH_FACTOR: u32 = 4;

/// How often a node whose level 0 holds no live contact contacts its
/// bootstrap nodes again ([`Node::bootstrap`](super::node::Node::bootstrap)):
/// a node started before its bootstrap nodes, or cut off from the network,
/// joins once one answers. One ping per bootstrap node a minute.
pub const REBOOTSTRAP_INTERVAL: crate::time::Duration = crate::time::Duration::from_secs(60);

/// Cluster changes kept for
/// [`Node::poll_cluster_change`](super::node::Node::poll_cluster_change)
/// before the oldest are dropped.
pub const CLUSTER_CHANGES_MAX: usize = 64;

/// Calls queued for [`Node::poll_delegated`](super::node::Node::poll_delegated),
/// and delegated calls awaiting their results, before the oldest are
/// dropped: a core that does not answer cannot grow another's memory.
pub const DELEGATED_CALLS_MAX: usize = 256;

/// Most routers (hops out) whose addresses become clustering hints (§4.4:
/// five).
pub const HINT_ROUTERS_MAX: usize = 5;

/// Most hint keys one node stores: the routers, their prefixes and the
/// node's own subnets, duplicates dropped.
pub const HINT_KEYS_MAX: usize = 16;

/// Members a cluster validation asks for more members ("routing to selected
/// keys", §4.4): a few, so that one lying member cannot fill the sample.
pub const MEMBER_QUERIES_MAX: usize = 4;

/// Clusters avoided at once (see `cluster_rejoin_holdoff_secs`): the oldest
/// avoidance ends early when a ninth comes.
pub const AVOIDED_CLUSTERS_MAX: usize = 8;

/// Confirmed members remembered by a cluster probe, to seed the routing
/// table after a switch.
pub const PROBE_MEMBERS_MAX: usize = 16;

/// Nodes closest to a key a claim asks about it at the global level before
/// its test-and-set (issue 24 item 2): the claim loses to a pointer any of
/// them holds, not only to one at the single closest node. Pointers are put
/// sloppily (a put stops early at a loaded node) and the closest node changes
/// as nodes join, so a pointer to a live copy often sits one or a few nodes
/// from the closest; a bucket's worth (k = 8) covers that at the cost of a
/// few more put probes, paid only by a miss that found no pointer.
pub const CLAIM_BREADTH_NODES: usize = 8;

/// The most "full and loaded" answers a putting node remembers (§4.2), for
/// all keys and levels together; a new one replaces an expired or the
/// oldest entry.
pub const RECALL_ENTRIES_MAX: usize = 256;

/// Slots a drained transmit queue keeps for the next datagrams, in a
/// server's node ([`Node::poll_transmit_keeping`]): a batch's replies and
/// their pings (a burst of up to `transmit_queue_max` datagrams is freed
/// once sent). With [`TRANSMIT_BUFFER_KEPT_BYTES`], at most about 270 KiB
/// per core stays allocated after a burst.
///
/// [`Node::poll_transmit_keeping`]: super::node::Node::poll_transmit_keeping
pub const TRANSMIT_SLOTS_KEPT_MAX: usize = 256;

/// The largest buffer the transmit queue keeps for a later datagram: twice
/// the 512 bytes a datagram's buffer starts with (a get's reply, a ping, a
/// reply with a full set of contacts); a larger one is freed once sent.
pub const TRANSMIT_BUFFER_KEPT_BYTES: usize = 1024;
