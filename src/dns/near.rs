//! Proxies near a client, found through clustering hints (NSDI 2004 §3.1,
//! §4.4): nodes store a pointer to themselves under the addresses (and /24
//! prefixes) of their nearby routers and their directly connected subnets.
//! dnssrv probes a client's path, takes the last hops (the routers nearest
//! the client) and the client's own /24, and gets those same keys from the
//! DSHT; the nodes named there sit near the client.
//!
//! This table remembers, per client network, what such a lookup found. It
//! is bounded ([`NearCache::new`]'s `max`) and every entry expires.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use crate::dsht::cluster::{hint_prefix_key, is_hint_address};
use crate::dsht::id::{Id, Key, KeyedBuildHasher};
use crate::time::{Duration, Time};

/// Routers at the end of a client's path whose hints are looked up.
pub const HINT_HOPS_LAST: usize = 2;
/// Hint keys looked up for one client (per hop: its address and its /24 or
/// /48; and the client's own /24 or /48).
pub const HINT_LOOKUP_KEYS_MAX: usize = 2 * HINT_HOPS_LAST + 1;
/// Nodes remembered as near one client network.
pub const NEAR_NODES_MAX: usize = crate::limits::DNS.near_nodes_max;

/// The hint keys for a client at `client` whose path (nearest the prober
/// first) is `hops`: each of the last [`HINT_HOPS_LAST`] routers' address
/// and /24 (/48) prefix, nearest the client first, then the client's own
/// /24 (/48) — exactly the keys `cluster::hint_keys` has nodes store under
/// for their gateway routers and directly connected subnets. Private
/// addresses name different places on different networks and are skipped.
pub fn lookup_keys(client: IpAddr, hops: &[IpAddr]) -> ([Key; HINT_LOOKUP_KEYS_MAX], usize) {
    let mut keys = [Id::ZERO; HINT_LOOKUP_KEYS_MAX];
    let mut n = 0;
    let mut add = |k: Key| {
        if n < HINT_LOOKUP_KEYS_MAX && !keys[..n].contains(&k) {
            keys[n] = k;
            n += 1;
        }
    };
    for &hop in hops
        .iter()
        .rev()
        .filter(|h| **h != client && is_hint_address(**h))
        .take(HINT_HOPS_LAST)
    {
        add(Id::from_ip(hop));
        add(hint_prefix_key(hop, if hop.is_ipv4() { 24 } else { 48 }));
    }
    if is_hint_address(client) {
        add(hint_prefix_key(
            client,
            if client.is_ipv4() { 24 } else { 48 },
        ));
    }
    (keys, n)
}

/// The nodes found near one client network (DSHT addresses), nearest-hop
/// first, from the front.
pub type NearNodes = [Option<SocketAddr>; NEAR_NODES_MAX];

/// What is known of the nodes near one client network.
#[derive(Clone, Copy, Debug)]
struct Near {
    /// When the lookup was asked for (pending) or answered.
    at: Time,
    /// Whether its answer came.
    done: bool,
    /// The nodes found (DSHT addresses), nearest-hop first.
    nodes: NearNodes,
    /// When the nodes found were last pinged for verification.
    pinged: Time,
}

impl Near {
    /// Whether the entry still holds: `ttl` when the lookup found nodes,
    /// `ttl_empty` while it is pending or when it found none (so a node
    /// that stores a hint later is found within that).
    fn fresh(&self, now: Time, ttl: Duration, ttl_empty: Duration) -> bool {
        now.saturating_since(self.at) <= if self.found() { ttl } else { ttl_empty }
    }

    /// Whether its lookup came back with nodes: `NearCache::found` fills
    /// `nodes` from the front, so the first says (issue 27: one look, not
    /// a scan of all four, on every query).
    fn found(&self) -> bool {
        debug_assert_eq!(
            self.nodes.first().is_some_and(Option::is_some),
            self.nodes.iter().any(Option::is_some)
        );
        self.done && self.nodes.first().is_some_and(Option::is_some)
    }
}

/// Nodes near client networks, by network key (`prefix_key`): at most
/// `max` networks, each for `ttl` (`ttl_empty` when none was found).
#[derive(Debug)]
pub struct NearCache {
    map: HashMap<u128, Near, KeyedBuildHasher>,
    max: usize,
    ttl: Duration,
    ttl_empty: Duration,
}

impl NearCache {
    /// An empty cache of at most `max` networks, each remembered for `ttl`,
    /// or `ttl_empty` (at most `ttl`) while pending or when none was found.
    pub fn new(max: usize, ttl: Duration, ttl_empty: Duration) -> NearCache {
        NearCache {
            map: HashMap::with_hasher(super::limits::unkeyed()),
            max,
            ttl,
            ttl_empty: ttl_empty.min(ttl),
        }
    }

    /// The cache with its hash keyed by `hasher`.
    pub fn with_hasher(mut self, hasher: KeyedBuildHasher) -> NearCache {
        super::limits::rekey(&mut self.map, hasher);
        self
    }

    /// Records that a lookup for network `key` was started. False if the
    /// table is full of fresh entries (then no lookup is made).
    pub fn start(&mut self, key: u128, now: Time) -> bool {
        if !self.map.contains_key(&key) && self.map.len() >= self.max {
            let (ttl, ttl_empty) = (self.ttl, self.ttl_empty);
            self.map.retain(|_, n| n.fresh(now, ttl, ttl_empty));
            if self.map.len() >= self.max {
                return false;
            }
        }
        self.map.insert(
            key,
            Near {
                at: now,
                done: false,
                nodes: [None; NEAR_NODES_MAX],
                pinged: now,
            },
        );
        true
    }

    /// The lookup for network `key` found `nodes` (duplicates and `me`
    /// skipped, at most [`NEAR_NODES_MAX`] kept). Ignored if no lookup was
    /// started for it (a late or unasked answer).
    pub fn found(&mut self, key: u128, nodes: &[SocketAddr], me: IpAddr, now: Time) -> usize {
        let Some(n) = self.map.get_mut(&key) else {
            return 0;
        };
        n.at = now;
        n.done = true;
        n.pinged = now;
        n.nodes = [None; NEAR_NODES_MAX];
        let mut len = 0;
        for &a in nodes.iter().filter(|a| a.ip() != me) {
            if len == NEAR_NODES_MAX {
                break;
            }
            if n.nodes[..len]
                .iter()
                .any(|x| x.map(|x| x.ip()) == Some(a.ip()))
            {
                continue;
            }
            n.nodes[len] = Some(a);
            len += 1;
        }
        len
    }

    /// The nodes near network `key` if its entry is fresh (empty while the
    /// lookup is pending or when it found none).
    pub fn nodes(&self, key: u128, now: Time) -> impl Iterator<Item = SocketAddr> + '_ {
        self.map
            .get(&key)
            .filter(|n| n.done && n.fresh(now, self.ttl, self.ttl_empty))
            .into_iter()
            .flat_map(|n| n.nodes.iter().flatten().copied())
    }

    /// One look at network `key`: whether its entry is fresh (pending or
    /// answered: no new lookup is needed), and the nodes found near it, if
    /// there are any (`None` when none was found: no array of empty slots
    /// is written and copied for the common client, issue 27).
    pub fn get(&self, key: u128, now: Time) -> (bool, Option<NearNodes>) {
        match self.map.get(&key) {
            Some(n) if n.fresh(now, self.ttl, self.ttl_empty) => {
                (true, n.found().then_some(n.nodes))
            }
            _ => (false, None),
        }
    }

    /// Whether network `key` has a fresh entry (pending or answered): no new
    /// lookup is needed.
    pub fn fresh(&self, key: u128, now: Time) -> bool {
        self.map
            .get(&key)
            .is_some_and(|n| n.fresh(now, self.ttl, self.ttl_empty))
    }

    /// Whether the nodes near `key` may be pinged again (at most once per
    /// `interval`); if so, the ping is recorded.
    pub fn ping_due(&mut self, key: u128, now: Time, interval: Duration) -> bool {
        match self.map.get_mut(&key) {
            Some(n) if n.done && now.saturating_since(n.pinged) >= interval => {
                n.pinged = now;
                true
            }
            _ => false,
        }
    }

    /// Networks remembered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsht::cluster::hint_keys;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn lookup_keys_are_the_keys_nodes_near_the_client_store_under() {
        // A node behind the client's last router, whose first two gateway
        // routers the start-up probe found, and its own subnet.
        let stored = hint_keys(
            &[ip("198.19.1.1"), ip("198.19.5.1")],
            &[(ip("198.19.1.0"), 24)],
        );
        // dnssrv's probe toward the client 198.18.2.2: its own gateway
        // first, then the client's last router (answering from its
        // interface on the 198.19.5.0/24 link).
        let (keys, n) = lookup_keys(ip("198.18.2.2"), &[ip("198.18.6.1"), ip("198.19.5.2")]);
        let keys = &keys[..n];
        assert_eq!(n, 5);
        // The last hop first: its address, then its /24, shared with the
        // node's second router.
        assert_eq!(keys[0], Id::from_ip(ip("198.19.5.2")));
        assert_eq!(keys[1], hint_prefix_key(ip("198.19.5.0"), 24));
        assert!(stored.contains(&keys[1]));
        assert_eq!(keys[4], hint_prefix_key(ip("198.18.2.0"), 24));
        // A client on the node's own subnet meets it through its /24.
        let (k2, n2) = lookup_keys(ip("198.19.1.77"), &[]);
        assert_eq!(n2, 1);
        assert!(stored.contains(&k2[0]));
        // Private addresses are not hints.
        let (_, none) = lookup_keys(ip("10.1.2.3"), &[ip("192.168.1.1")]);
        assert_eq!(none, 0);
    }

    #[test]
    fn only_the_last_hops_are_used() {
        let hops = [ip("198.18.6.1"), ip("198.18.7.1"), ip("198.18.8.1")];
        let (keys, n) = lookup_keys(ip("203.0.113.9"), &hops);
        let keys = &keys[..n];
        assert!(keys.contains(&Id::from_ip(ip("198.18.8.1"))));
        assert!(keys.contains(&Id::from_ip(ip("198.18.7.1"))));
        // The prober's own gateway is the first hop: not near the client.
        assert!(!keys.contains(&Id::from_ip(ip("198.18.6.1"))));
    }

    /// [`NearCache::get`] as it was before issue 27's cut: an array of
    /// empty slots when no node was found.
    fn get_before(c: &NearCache, key: u128, now: Time) -> (bool, NearNodes) {
        match c.map.get(&key) {
            Some(n) if n.fresh(now, c.ttl, c.ttl_empty) => (
                true,
                if n.found() {
                    n.nodes
                } else {
                    [None; NEAR_NODES_MAX]
                },
            ),
            _ => (false, [None; NEAR_NODES_MAX]),
        }
    }

    proptest::proptest! {
        #[test]
        fn get_finds_what_it_found_before(
            ops in proptest::collection::vec(
                (0u8..3, 0u128..6, 0u64..30, proptest::collection::vec(0u8..6, 0..7)),
                0..60,
            ),
        ) {
            let mut c = NearCache::new(4, Duration::from_secs(10), Duration::from_secs(3));
            let me = ip("198.18.6.2");
            let mut now = Time(1_000_000);
            for (op, key, dt, hosts) in ops {
                now = now + Duration::from_secs(dt / 10);
                let nodes: Vec<SocketAddr> = hosts
                    .iter()
                    .map(|&h| SocketAddr::new(IpAddr::from([198, 18, 6, h]), 7000))
                    .collect();
                match op {
                    0 => {
                        c.start(key, now);
                    }
                    1 => {
                        c.found(key, &nodes, me, now);
                    }
                    _ => {}
                }
                for k in 0..6 {
                    let (fresh, near) = c.get(k, now);
                    let before = get_before(&c, k, now);
                    proptest::prop_assert_eq!((fresh, near.unwrap_or([None; NEAR_NODES_MAX])), before);
                    proptest::prop_assert!(near.is_none_or(|n| n[0].is_some()));
                }
            }
        }
    }

    #[test]
    fn near_cache_is_bounded_expires_and_skips_me() {
        let ttl = Duration::from_secs(60);
        let mut c = NearCache::new(2, ttl, Duration::from_secs(10));
        let t = Time(1_000_000);
        let me = ip("198.18.6.2");
        let a: SocketAddr = "198.19.1.2:7000".parse().unwrap();
        let mine: SocketAddr = "198.18.6.2:7000".parse().unwrap();
        assert!(c.start(1, t));
        assert!(c.fresh(1, t));
        assert_eq!(c.nodes(1, t).count(), 0, "pending: nothing yet");
        assert_eq!(c.found(1, &[mine, a, a], me, t), 1);
        assert_eq!(c.nodes(1, t).collect::<Vec<_>>(), vec![a]);
        // An answer nobody asked for is ignored.
        assert_eq!(c.found(9, &[a], me, t), 0);
        assert!(c.start(2, t));
        assert!(!c.start(3, t), "full of fresh entries");
        assert_eq!(c.len(), 2);
        let later = t + ttl + Duration::from_secs(1);
        assert_eq!(c.nodes(1, later).count(), 0, "expired");
        assert!(!c.fresh(1, later));
        assert!(c.start(3, later), "stale entries make room");
        assert!(c.len() <= 2);
        // A lookup that found none (or never came back) holds only for
        // `ttl_empty`: a node that stores a hint later is found then.
        let mut c = NearCache::new(4, ttl, Duration::from_secs(10));
        c.start(5, t);
        let t11 = t + Duration::from_secs(11);
        assert!(!c.fresh(5, t11), "pending, never answered");
        c.start(6, t);
        c.found(6, &[mine], me, t);
        assert!(c.fresh(6, t + Duration::from_secs(10)));
        assert!(!c.fresh(6, t11), "found none");
        c.start(7, t);
        c.found(7, &[a], me, t);
        assert!(c.fresh(7, t11), "found one: the full ttl");
        // Pings of the near nodes are throttled.
        let mut c = NearCache::new(4, ttl, ttl);
        c.start(1, t);
        c.found(1, &[a], me, t);
        let i = Duration::from_secs(5);
        assert!(!c.ping_due(1, t, i));
        assert!(c.ping_due(1, t + i, i));
        assert!(!c.ping_due(1, t + i, i));
    }
}
