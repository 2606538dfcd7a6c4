//! Self-organizing clusters (NSDI 2004 §4.4; IPTPS 2003 §2.3–2.5): what a
//! node measures of the clusters around it, and when it joins, merges into,
//! splits from or leaves one. One [`Manager`] per non-global level.
//!
//! The manager is sans-IO twice over: the [`Node`](crate::dsht::node::Node) feeds
//! it what every RPC reply carries (the sender's cluster, its age and size
//! estimate, and the measured RTT) and the results of the work it asked for,
//! and it answers with [`Command`]s — pings, lookups, a put, a switch — that
//! the node carries out. Every decision is a pure function of those inputs,
//! the configuration, `now` and the node's seeded RNG.
//!
//! The rules, with the paper's numbers (all in [`Config`]):
//!
//! - **Acceptable** (§4.4): a cluster whose measured members are at least
//!   80 % within the level's threshold. A node joins only acceptable clusters.
//! - **Re-evaluation** (§4.4): every five minutes. If at least 50 % of the
//!   node's accesses to members of its own cluster since the last evaluation
//!   missed the threshold, it leaves (by splitting, below). Otherwise it
//!   picks the most preferred acceptable cluster it has measured, validates
//!   it by contacting several of its members, and switches if they confirm.
//! - **Preference** (§4.4): the larger cluster only if
//!   `|log2 sizeA − log2 sizeB| > δ(min(ageA, ageB))`, else the lower cluster
//!   id; δ is a square wave, 0 during even hours of age and 2 during odd ones
//!   (plus a small margin for estimation noise, `cluster_size_margin_log2_centi`).
//! - **Split** (IPTPS §2.5): a node leaving cluster `cid` looks up
//!   `cid^N = SHA-1(cid)` — first in the old cluster, where a miss ends at
//!   the *cluster centre* (the node closest to `cid^N`), then in the larger
//!   levels. Members found there are measured; if none exist yet, the node
//!   measures the centre alone. Near enough: it joins `cid^N`. Otherwise it
//!   does the same for `cid^F` (`cid^N` with the high bit flipped), which it
//!   joins even when unacceptable (it may split again), up to
//!   `cluster_splits_max` times before forming a random singleton. Before
//!   switching it puts `successor → its address` at its level and below, so
//!   that later splitters find the members of the successor without pinging
//!   the centre.
//! - **Hints** (§4.4): keys for gateway routers and subnets ([`hint_keys`]),
//!   under which nodes store their own address, so that a joining node finds
//!   nearby nodes to measure at once.
//!
//! This file holds the rules as pure functions and the types the node and
//! the manager exchange; `manager.rs` holds the [`Manager`] state machine,
//! and `tests.rs` the tests of both, named after the sections they check.

use std::net::{IpAddr, SocketAddr};

use smallvec::SmallVec;

use crate::config::Config;
use crate::dsht::id::{Id, Key};
use crate::dsht::limits::{HINT_KEYS_MAX, HINT_ROUTERS_MAX};
use crate::dsht::wire::Contact;
use crate::time::{Duration, Time};

mod manager;

pub use manager::Manager;

/// A cluster level (0 is global).
pub type Level = u8;

/// How a cluster looks from here: the inputs of the preference function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    /// The cluster id.
    pub id: Id,
    /// Estimated members.
    pub size: u32,
    /// When it was created (on this node's clock).
    pub created: Time,
}

/// The node's own cluster at a level, as the manager needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Current {
    /// Id, size estimate and creation time.
    pub view: View,
    /// Whether the node knows no other member (its routing table at the level is empty).
    pub alone: bool,
}

/// δ of §4.4 in powers of two: a square wave of the cluster age, 0 during
/// even periods (hours) and `cluster_delta_log2` during odd ones.
pub fn delta_log2(age: Duration, config: &Config) -> u32 {
    let period = config.cluster_delta_period_secs.max(1);
    if (age.as_secs() / period) % 2 == 0 {
        0
    } else {
        config.cluster_delta_log2
    }
}

/// Whether cluster `a` is preferred to cluster `b` at `now` (§4.4): the
/// larger only if `|log2 sizeA − log2 sizeB| > δ(min(ageA, ageB))`, else the
/// lower id. δ is never below the noise margin
/// (`cluster_size_margin_log2_centi`), so that size estimates a little
/// apart count as a tie.
pub fn prefers(a: &View, b: &View, now: Time, config: &Config) -> bool {
    if a.id == b.id {
        return false;
    }
    let age = now
        .saturating_since(a.created)
        .min(now.saturating_since(b.created));
    let delta = f64::from(delta_log2(age, config))
        .max(f64::from(config.cluster_size_margin_log2_centi) / 100.0);
    let diff = f64::from(a.size.max(1)).log2() - f64::from(b.size.max(1)).log2();
    if diff.abs() > delta {
        diff > 0.0
    } else {
        a.id < b.id
    }
}

/// Whether `within` of `measured` members within the threshold make a
/// cluster of `size` acceptable (§4.4: 80 %), or `None` when too few were
/// measured to tell: at least `cluster_samples_min`, or all of a smaller cluster.
pub fn is_acceptable(measured: usize, within: usize, size: u32, config: &Config) -> Option<bool> {
    let needed = config.cluster_samples_min.min(size.max(1) as usize).max(1);
    if measured < needed {
        return None;
    }
    Some(within * 100 >= config.cluster_join_percent as usize * measured)
}

/// What a sample of members says of a cluster's acceptability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Acceptable, with the configured confidence.
    Acceptable,
    /// Not acceptable, with the configured confidence.
    Unacceptable,
    /// Too close to the threshold, or too few members measured, to tell.
    Unsure,
}

/// Judges a cluster of about `size` members from a sample of `measured`
/// of them, `within` within the threshold: acceptable if the sample's
/// fraction is at least `cluster_join_percent` plus
/// `cluster_join_sigma_centi` standard errors, not acceptable if it is
/// `cluster_split_sigma_centi` standard errors below it. The standard error is that of a
/// fraction of `measured` drawn from `size`, at the threshold:
/// `√(p(1−p)/n · (N−n)/(N−1))`, nothing once every member was measured.
pub fn judge(measured: usize, within: usize, size: u32, config: &Config) -> Verdict {
    let needed = config.cluster_samples_min.min(size.max(1) as usize).max(1);
    if measured < needed {
        return Verdict::Unsure;
    }
    let p = f64::from(config.cluster_join_percent) / 100.0;
    let n = measured as f64;
    let population = f64::from(size).max(n);
    let correction = if population > 1.0 {
        ((population - n) / (population - 1.0)).max(0.0)
    } else {
        0.0
    };
    let se = (p * (1.0 - p) / n * correction).sqrt();
    let join = f64::from(config.cluster_join_sigma_centi) / 100.0 * se;
    let split = f64::from(config.cluster_split_sigma_centi) / 100.0 * se;
    let fraction = within as f64 / n;
    if fraction >= p + join - 1e-9 {
        Verdict::Acceptable
    } else if fraction < p - split {
        Verdict::Unacceptable
    } else {
        Verdict::Unsure
    }
}

/// The two successors of cluster `cid` when it splits (IPTPS §2.5):
/// `cid^N = SHA-1(cid)`, whose closest node is the cluster centre, and
/// `cid^F`, the same with its high-order bit flipped.
pub fn split_ids(cid: &Id) -> (Id, Id) {
    let near = Id::hash(&cid.0);
    (near, near.flip_high_bit())
}

/// Whether `ip` may serve as a clustering hint: not private (RFC 1918),
/// loopback, link-local, shared (RFC 6598), unspecified, broadcast or a
/// unique-local IPv6 address — addresses that name different places on
/// different networks (§4.4 excludes RFC 1918).
pub fn is_hint_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (64..128).contains(&o[1])))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// The hint key of an address prefix: SHA-1 of a label, the prefix length
/// and the masked address. A router's /24 and a node's directly connected
/// /24 subnet give the same key, which is what lets forward and reverse
/// paths meet (§4.4).
pub fn hint_prefix_key(ip: IpAddr, prefix_len: u8) -> Key {
    let mut buf = [0u8; 32];
    buf[..10].copy_from_slice(b"coral-net/");
    let (bytes, n): ([u8; 16], usize) = match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            (b, 4)
        }
        IpAddr::V6(v6) => (v6.octets(), 16),
    };
    let len = usize::from(prefix_len).min(n * 8);
    buf[10] = len as u8;
    for i in 0..n {
        let bits = len.saturating_sub(i * 8).min(8);
        let mask = if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
        buf[11 + i] = bytes[i] & mask;
    }
    Id::hash(&buf[..11 + n])
}

/// The keys under which a node stores clustering hints (§4.4): the
/// addresses of its first [`HINT_ROUTERS_MAX`] gateway routers, their /24
/// (IPv4) or /48 (IPv6) prefixes, and its directly connected subnets (an
/// IPv6 subnet by its /48, the prefix dnssrv looks a client up by; a /64
/// alone would never be asked for) — private addresses excluded. Nearest
/// routers first, duplicates dropped, at most [`HINT_KEYS_MAX`].
pub fn hint_keys(routers: &[IpAddr], subnets: &[(IpAddr, u8)]) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::new();
    let add = |k: Key, keys: &mut Vec<Key>| {
        if keys.len() < HINT_KEYS_MAX && !keys.contains(&k) {
            keys.push(k);
        }
    };
    for &r in routers
        .iter()
        .filter(|r| is_hint_address(**r))
        .take(HINT_ROUTERS_MAX)
    {
        add(Id::from_ip(r), &mut keys);
        let prefix = if r.is_ipv4() { 24 } else { 48 };
        add(hint_prefix_key(r, prefix), &mut keys);
    }
    for &(net, len) in subnets.iter().filter(|(ip, _)| is_hint_address(*ip)) {
        let len = if net.is_ipv6() { len.min(48) } else { len };
        add(hint_prefix_key(net, len), &mut keys);
    }
    keys
}

/// What a node remembers of another node it measured at one level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observed {
    /// The node.
    pub contact: Contact,
    /// Its cluster at this level, as it last said.
    pub cluster: Id,
    /// Its estimate of that cluster's size.
    pub size: u32,
    /// That cluster's creation time, from the age it reported.
    pub created: Time,
    /// Whether every measurement of it so far was of a node chosen for being
    /// near (named by a hint): such a node helps find clusters, but does not
    /// count when judging one, whose members must be sampled blind.
    pub located: bool,
    /// Minimum RTT measured since the last evaluation.
    rtt_recent: Option<Duration>,
    /// Minimum RTT measured in the period before.
    rtt_before: Option<Duration>,
}

impl Observed {
    /// The minimum RTT of the last one or two periods (§4.4: "recording
    /// minimum round-trip-times"; older measurements are forgotten so that a
    /// rise in latency shows).
    pub fn rtt(&self) -> Option<Duration> {
        match (self.rtt_recent, self.rtt_before) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A candidate cluster, summarised from the nodes observed in it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Its id, median size estimate and median creation time.
    pub view: View,
    /// Members measured.
    pub measured: usize,
    /// Of those, members within the threshold.
    pub within: usize,
}

/// Accesses to members of the node's own cluster since the last evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accesses {
    /// RPC replies from members.
    pub total: u32,
    /// Of those, replies slower than the threshold.
    pub missed: u32,
}

impl Accesses {
    /// The leave rule of §4.4: at least `cluster_leave_percent` of enough accesses missed.
    pub fn should_leave(&self, config: &Config) -> bool {
        self.total >= config.cluster_accesses_min.max(1)
            && u64::from(self.missed) * 100
                >= u64::from(config.cluster_leave_percent) * u64::from(self.total)
    }
}

/// What the manager wants done.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Ping `addr` (whose id is `id`, if known) as part of probe `round`.
    Ping {
        /// Where.
        addr: SocketAddr,
        /// The id it must answer with, if known.
        id: Option<Id>,
        /// The probe.
        round: u32,
    },
    /// Ask `contact` for members of its cluster near `target` (a Members
    /// RPC), as part of probe `round`; the reply measures it like a ping.
    Members {
        /// Whom.
        contact: Contact,
        /// A random key to route toward.
        target: Id,
        /// The probe.
        round: u32,
    },
    /// `get(key, levels)`; report the result with [`Manager::on_get_done`].
    Get {
        /// The key.
        key: Key,
        /// Levels, highest first.
        levels: SmallVec<[Level; 4]>,
        /// Ties the result to this request.
        round: u32,
    },
    /// `put(key, our address, levels)`; report with [`Manager::on_put_done`].
    Put {
        /// The key.
        key: Key,
        /// Levels, highest first.
        levels: SmallVec<[Level; 4]>,
        /// Ties the result to this request.
        round: u32,
    },
    /// A routing refresh at this level toward a random id: keeps the table
    /// fresh and measures members (accesses for the leave rule).
    Explore,
    /// Join `cluster` at this level: drop the old cluster's table and store,
    /// seed the new table with `members`, and look up our own id in it.
    Switch {
        /// The cluster.
        cluster: Id,
        /// Its creation time.
        created: Time,
        /// Members known to have answered us.
        members: Vec<Contact>,
        /// Why.
        reason: SwitchReason,
    },
}

/// Why a node changed cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchReason {
    /// It validated a preferred acceptable cluster (merging, §4.4).
    Merge,
    /// It split from a cluster that missed the threshold (IPTPS §2.5).
    Split,
    /// Splits kept failing: it formed a singleton with a random id.
    Singleton,
}

/// Clustering counters for one level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Evaluations run.
    pub evaluations: u64,
    /// Candidates validated by probing.
    pub validations: u64,
    /// Switches to a validated preferred cluster.
    pub merges: u64,
    /// Splits started (the cluster was no longer acceptable).
    pub splits: u64,
    /// Departures by the leave rule (half the accesses missed).
    pub leaves: u64,
    /// Singletons formed (by the leave rule, or after failed splits).
    pub singletons: u64,
}

#[cfg(test)]
mod tests;
