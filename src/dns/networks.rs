//! What dnssrv knows of each client network (a resolver's /24 or /56, or a
//! Client Subnet's; keyed by `prefix_key`): the RTT measured to it (§3.1:
//! the level it is at) and the nodes near it that a clustering hint lookup
//! found (§3.1, §4.4; `near.rs`). One table, so that an answer looks its
//! client's network up once (issue 27: two keyed-hash lookups of the same
//! key, in two tables, were about 170 of the 1,900 user-space instructions
//! of an answer).
//!
//! The two parts keep the bounds and lifetimes of the two tables they
//! were: at most `rtt_max` networks with an RTT, each used for `rtt_ttl`
//! (a pinned one for ever), and at most `near_max` with a hint lookup, each
//! for `near_ttl` when it found nodes, `near_ttl_empty` while pending or
//! when it found none. A full part first forgets its stale entries; if it
//! is still full, the new entry is dropped. A network with neither part is
//! not kept. The near-node part is boxed: a network known by its RTT alone
//! stays small, and the table at its worst (both parts full, of different
//! networks) holds no more than the two tables did.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use super::limits::{rekey, unkeyed};
use super::near::{NearNodes, NEAR_NODES_MAX};
use crate::dsht::id::KeyedBuildHasher;
use crate::time::{Duration, Time};

/// A measured (or configured) client network's RTT.
#[derive(Clone, Copy, Debug)]
struct Rtt {
    rtt: Duration,
    measured: Time,
    /// Configured, not measured: never expires.
    pinned: bool,
}

impl Rtt {
    /// Whether it is still used at `now`.
    fn fresh(&self, now: Time, ttl: Duration) -> bool {
        self.pinned || now.saturating_since(self.measured) <= ttl
    }
}

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

    /// Whether its lookup came back with nodes: `Networks::found` fills
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

/// One client network: its RTT, its near nodes, or both.
#[derive(Debug)]
struct Network {
    rtt: Option<Rtt>,
    near: Option<Box<Near>>,
}

/// What one look at a client network says ([`Networks::look`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Look {
    /// Its RTT, if measured (or pinned) and still fresh.
    pub rtt: Option<Duration>,
    /// Whether its hint lookup is fresh (pending or answered): no new
    /// lookup is needed.
    pub near_fresh: bool,
    /// The nodes found near it, if the lookup is fresh and found any.
    pub near: Option<NearNodes>,
}

/// [`Look`] with the near nodes by reference ([`Networks::look_ref`]).
pub(super) struct LookRef<'a> {
    pub(super) rtt: Option<Duration>,
    pub(super) near_fresh: bool,
    pub(super) near: Option<&'a NearNodes>,
}

/// Client networks by key: their RTTs and the nodes near them.
#[derive(Debug)]
pub struct Networks {
    map: HashMap<u128, Network, KeyedBuildHasher>,
    /// Networks with an RTT (at most `rtt_max`).
    rtts: usize,
    rtt_max: usize,
    rtt_ttl: Duration,
    /// Networks with a hint lookup (at most `near_max`).
    nears: usize,
    near_max: usize,
    near_ttl: Duration,
    near_ttl_empty: Duration,
}

impl Networks {
    /// An empty table: at most `rtt_max` networks' RTTs, each used for
    /// `rtt_ttl`; at most `near_max` networks' near nodes, each for
    /// `near_ttl`, or `near_ttl_empty` (at most `near_ttl`) while pending
    /// or when none was found.
    pub fn new(
        rtt_max: usize,
        rtt_ttl: Duration,
        near_max: usize,
        near_ttl: Duration,
        near_ttl_empty: Duration,
    ) -> Networks {
        Networks {
            map: HashMap::with_hasher(unkeyed()),
            rtts: 0,
            rtt_max,
            rtt_ttl,
            nears: 0,
            near_max,
            near_ttl,
            near_ttl_empty: near_ttl_empty.min(near_ttl),
        }
    }

    /// The table with its hash keyed by `hasher`.
    pub fn with_hasher(mut self, hasher: KeyedBuildHasher) -> Networks {
        rekey(&mut self.map, hasher);
        self
    }

    /// One look at network `key`, for an answer: its RTT, whether its hint
    /// lookup is fresh, and the nodes found near it.
    pub fn look(&self, key: u128, now: Time) -> Look {
        let l = self.look_ref(key, now);
        Look {
            rtt: l.rtt,
            near_fresh: l.near_fresh,
            near: l.near.copied(),
        }
    }

    /// [`Networks::look`] with the near nodes by reference: an answer
    /// copies them only when there are some (the 128-octet array was
    /// copied twice per answer, found or not: about 30 instructions, issue
    /// 27, session 8).
    #[inline]
    pub(super) fn look_ref(&self, key: u128, now: Time) -> LookRef<'_> {
        let Some(n) = self.map.get(&key) else {
            return LookRef {
                rtt: None,
                near_fresh: false,
                near: None,
            };
        };
        let rtt = n.rtt.filter(|r| r.fresh(now, self.rtt_ttl)).map(|r| r.rtt);
        match &n.near {
            Some(near) if near.fresh(now, self.near_ttl, self.near_ttl_empty) => LookRef {
                rtt,
                near_fresh: true,
                near: near.found().then_some(&near.nodes),
            },
            _ => LookRef {
                rtt,
                near_fresh: false,
                near: None,
            },
        }
    }

    /// The RTT measured to network `key`, if still fresh.
    pub fn rtt(&self, key: u128, now: Time) -> Option<Duration> {
        self.look(key, now).rtt
    }

    /// Records an RTT measurement (`pinned`: configured, never expires; a
    /// measurement does not replace a pinned RTT). A full table first
    /// forgets stale RTTs; if it is still full the measurement is dropped
    /// (it will be taken again).
    pub fn insert_rtt(&mut self, key: u128, rtt: Duration, now: Time, pinned: bool) {
        let new = Rtt {
            rtt,
            measured: now,
            pinned,
        };
        if let Some(r) = self.map.get_mut(&key).and_then(|n| n.rtt.as_mut()) {
            if !r.pinned || pinned {
                *r = new;
            }
            return;
        }
        if self.rtts >= self.rtt_max {
            let ttl = self.rtt_ttl;
            let mut forgotten = 0;
            self.map.retain(|_, n| {
                if n.rtt.is_some_and(|r| !r.fresh(now, ttl)) {
                    n.rtt = None;
                    forgotten += 1;
                }
                n.rtt.is_some() || n.near.is_some()
            });
            self.rtts -= forgotten;
            if self.rtts >= self.rtt_max {
                return;
            }
        }
        self.map
            .entry(key)
            .or_insert(Network {
                rtt: None,
                near: None,
            })
            .rtt = Some(new);
        self.rtts += 1;
    }

    /// Networks with an RTT.
    pub fn rtts(&self) -> usize {
        self.rtts
    }

    /// Networks with a hint lookup (pending or answered, fresh or not).
    pub fn nears(&self) -> usize {
        self.nears
    }

    /// Records that a hint lookup for network `key` was started. False if
    /// the table is full of fresh lookups (then no lookup is made).
    pub fn start(&mut self, key: u128, now: Time) -> bool {
        let near = Near {
            at: now,
            done: false,
            nodes: [None; NEAR_NODES_MAX],
            pinged: now,
        };
        if let Some(n) = self.map.get_mut(&key).and_then(|n| n.near.as_mut()) {
            **n = near;
            return true;
        }
        if self.nears >= self.near_max {
            let (ttl, ttl_empty) = (self.near_ttl, self.near_ttl_empty);
            let mut forgotten = 0;
            self.map.retain(|_, n| {
                if n.near
                    .as_ref()
                    .is_some_and(|x| !x.fresh(now, ttl, ttl_empty))
                {
                    n.near = None;
                    forgotten += 1;
                }
                n.rtt.is_some() || n.near.is_some()
            });
            self.nears -= forgotten;
            if self.nears >= self.near_max {
                return false;
            }
        }
        self.map
            .entry(key)
            .or_insert(Network {
                rtt: None,
                near: None,
            })
            .near = Some(Box::new(near));
        self.nears += 1;
        true
    }

    /// The hint lookup for network `key` found `nodes` (duplicates and
    /// `me` skipped, at most [`NEAR_NODES_MAX`] kept). Ignored if no
    /// lookup was started for it (a late or unasked answer).
    pub fn found(&mut self, key: u128, nodes: &[SocketAddr], me: IpAddr, now: Time) -> usize {
        let Some(n) = self.map.get_mut(&key).and_then(|n| n.near.as_mut()) else {
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

    /// The nodes near network `key` if its lookup is fresh (none while it
    /// is pending or when it found none).
    pub fn nodes(&self, key: u128, now: Time) -> impl Iterator<Item = SocketAddr> + '_ {
        self.map
            .get(&key)
            .and_then(|n| n.near.as_deref())
            .filter(|n| n.done && n.fresh(now, self.near_ttl, self.near_ttl_empty))
            .into_iter()
            .flat_map(|n| n.nodes.iter().flatten().copied())
    }

    /// Whether network `key` has a fresh hint lookup (pending or answered):
    /// no new lookup is needed.
    pub fn near_fresh(&self, key: u128, now: Time) -> bool {
        self.look(key, now).near_fresh
    }

    /// Whether the nodes near `key` may be pinged again (at most once per
    /// `interval`); if so, the ping is recorded.
    pub fn ping_due(&mut self, key: u128, now: Time, interval: Duration) -> bool {
        match self.map.get_mut(&key).and_then(|n| n.near.as_mut()) {
            Some(n) if n.done && now.saturating_since(n.pinged) >= interval => {
                n.pinged = now;
                true
            }
            _ => false,
        }
    }

    /// Networks kept (with an RTT, a hint lookup, or both).
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
    use proptest::prelude::*;

    /// The two tables this one replaced (issue 27), as they were: the
    /// client-RTT table of `limits.rs` and the near-node cache of
    /// `near.rs`, the reference `one_table_answers_as_the_two_did`
    /// compares with.
    #[allow(dead_code)]
    mod before {
        use std::collections::HashMap;
        use std::net::{IpAddr, SocketAddr};

        use super::super::super::limits::{rekey, unkeyed};
        use super::super::super::near::{NearNodes, NEAR_NODES_MAX};
        use crate::dsht::id::KeyedBuildHasher;
        use crate::time::{Duration, Time};

        /// A measured (or configured) client network.
        #[derive(Clone, Copy, Debug)]
        struct Client {
            rtt: Duration,
            measured: Time,
            /// Configured, not measured: never expires.
            pinned: bool,
        }

        /// Round-trip times to client networks (resolvers' /24 or /56, or an EDNS
        /// Client Subnet), at most `max` of them.
        #[derive(Debug)]
        pub(super) struct Clients {
            map: HashMap<u128, Client, KeyedBuildHasher>,
            max: usize,
            ttl: Duration,
        }

        impl Clients {
            /// An empty table of at most `max` networks, each remembered for `ttl`.
            pub fn new(max: usize, ttl: Duration) -> Clients {
                Clients {
                    map: HashMap::with_hasher(unkeyed()),
                    max,
                    ttl,
                }
            }

            /// The table with its hash keyed by `hasher`.
            pub fn with_hasher(mut self, hasher: KeyedBuildHasher) -> Clients {
                rekey(&mut self.map, hasher);
                self
            }

            /// The RTT measured to network `key`, if still fresh.
            pub fn rtt(&self, key: u128, now: Time) -> Option<Duration> {
                let c = self.map.get(&key)?;
                (c.pinned || now.saturating_since(c.measured) <= self.ttl).then_some(c.rtt)
            }

            /// Records a measurement. A full table first forgets stale entries; if
            /// it is still full the measurement is dropped (it will be taken again).
            pub fn insert(&mut self, key: u128, rtt: Duration, now: Time, pinned: bool) {
                if let Some(c) = self.map.get_mut(&key) {
                    if !c.pinned || pinned {
                        *c = Client {
                            rtt,
                            measured: now,
                            pinned,
                        };
                    }
                    return;
                }
                if self.map.len() >= self.max {
                    let ttl = self.ttl;
                    self.map
                        .retain(|_, c| c.pinned || now.saturating_since(c.measured) <= ttl);
                    if self.map.len() >= self.max {
                        return;
                    }
                }
                self.map.insert(
                    key,
                    Client {
                        rtt,
                        measured: now,
                        pinned,
                    },
                );
            }

            /// Networks known.
            pub fn len(&self) -> usize {
                self.map.len()
            }

            /// Whether no network is known.
            pub fn is_empty(&self) -> bool {
                self.map.is_empty()
            }
        }

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
        pub(super) struct NearCache {
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
                    map: HashMap::with_hasher(unkeyed()),
                    max,
                    ttl,
                    ttl_empty: ttl_empty.min(ttl),
                }
            }

            /// The cache with its hash keyed by `hasher`.
            pub fn with_hasher(mut self, hasher: KeyedBuildHasher) -> NearCache {
                rekey(&mut self.map, hasher);
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
            pub fn found(
                &mut self,
                key: u128,
                nodes: &[SocketAddr],
                me: IpAddr,
                now: Time,
            ) -> usize {
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
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn table(max: usize, ttl: Duration, ttl_empty: Duration) -> Networks {
        Networks::new(max, ttl, max, ttl, ttl_empty)
    }

    #[test]
    fn rtts_are_bounded_and_stale_measurements_forgotten() {
        let mut c = table(2, Duration::from_secs(60), Duration::from_secs(60));
        let t = Time(1_000_000);
        c.insert_rtt(1, Duration::from_millis(5), t, false);
        c.insert_rtt(2, Duration::from_millis(5), t, true);
        c.insert_rtt(3, Duration::from_millis(5), t, false);
        assert_eq!(c.rtts(), 2);
        assert!(c.rtt(3, t).is_none());
        let later = t + Duration::from_secs(61);
        assert!(c.rtt(1, later).is_none());
        assert!(c.rtt(2, later).is_some());
        c.insert_rtt(3, Duration::from_millis(5), later, false);
        assert!(c.rtt(3, later).is_some());
        assert_eq!(c.rtts(), 2);
    }

    #[test]
    fn near_nodes_are_bounded_expire_and_skip_me() {
        let ttl = Duration::from_secs(60);
        let mut c = table(2, ttl, Duration::from_secs(10));
        let t = Time(1_000_000);
        let me = ip("198.18.6.2");
        let a: SocketAddr = "198.19.1.2:7000".parse().unwrap();
        let mine: SocketAddr = "198.18.6.2:7000".parse().unwrap();
        assert!(c.start(1, t));
        assert!(c.near_fresh(1, t));
        assert_eq!(c.nodes(1, t).count(), 0, "pending: nothing yet");
        assert_eq!(c.found(1, &[mine, a, a], me, t), 1);
        assert_eq!(c.nodes(1, t).collect::<Vec<_>>(), vec![a]);
        // An answer nobody asked for is ignored.
        assert_eq!(c.found(9, &[a], me, t), 0);
        assert!(c.start(2, t));
        assert!(!c.start(3, t), "full of fresh entries");
        assert_eq!(c.nears(), 2);
        let later = t + ttl + Duration::from_secs(1);
        assert_eq!(c.nodes(1, later).count(), 0, "expired");
        assert!(!c.near_fresh(1, later));
        assert!(c.start(3, later), "stale entries make room");
        assert!(c.nears() <= 2);
        // A lookup that found none (or never came back) holds only for
        // `ttl_empty`: a node that stores a hint later is found then.
        let mut c = table(4, ttl, Duration::from_secs(10));
        c.start(5, t);
        let t11 = t + Duration::from_secs(11);
        assert!(!c.near_fresh(5, t11), "pending, never answered");
        c.start(6, t);
        c.found(6, &[mine], me, t);
        assert!(c.near_fresh(6, t + Duration::from_secs(10)));
        assert!(!c.near_fresh(6, t11), "found none");
        c.start(7, t);
        c.found(7, &[a], me, t);
        assert!(c.near_fresh(7, t11), "found one: the full ttl");
        // Pings of the near nodes are throttled.
        let mut c = table(4, ttl, ttl);
        c.start(1, t);
        c.found(1, &[a], me, t);
        let i = Duration::from_secs(5);
        assert!(!c.ping_due(1, t, i));
        assert!(c.ping_due(1, t + i, i));
        assert!(!c.ping_due(1, t + i, i));
    }

    #[test]
    fn a_network_with_neither_part_is_not_kept() {
        let ttl = Duration::from_secs(60);
        let mut c = table(1, ttl, ttl);
        let t = Time(1_000_000);
        c.insert_rtt(1, Duration::from_millis(5), t, false);
        c.start(2, t);
        assert_eq!(c.len(), 2);
        // Both stale: a new RTT forgets 1's, a new lookup 2's.
        let later = t + ttl + Duration::from_secs(1);
        c.insert_rtt(3, Duration::from_millis(5), later, false);
        c.start(4, later);
        assert_eq!((c.len(), c.rtts(), c.nears()), (2, 1, 1));
        assert!(c.rtt(1, later).is_none() && !c.near_fresh(2, later));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn one_table_answers_as_the_two_did(
            ops in proptest::collection::vec(
                (0u8..6, 0u128..8, 0u64..40, any::<bool>(), proptest::collection::vec(0u8..6, 0..7)),
                0..80,
            ),
            max in 1usize..5,
        ) {
            let (ttl, ttl_empty) = (Duration::from_secs(20), Duration::from_secs(6));
            let mut new = Networks::new(max, ttl, max + 1, ttl, ttl_empty);
            let mut rtts = before::Clients::new(max, ttl);
            let mut near = before::NearCache::new(max + 1, ttl, ttl_empty);
            let me = ip("198.18.6.2");
            let mut now = Time(1_000_000);
            for (op, key, dt, flag, hosts) in ops {
                now = now + Duration::from_millis(dt * 250);
                let nodes: Vec<SocketAddr> = hosts
                    .iter()
                    .map(|&h| SocketAddr::new(IpAddr::from([198, 18, 6, h]), 7000))
                    .collect();
                let rtt = Duration::from_millis(dt);
                match op {
                    0 | 1 => {
                        new.insert_rtt(key, rtt, now, flag);
                        rtts.insert(key, rtt, now, flag);
                    }
                    2 => prop_assert_eq!(new.start(key, now), near.start(key, now)),
                    3 => prop_assert_eq!(
                        new.found(key, &nodes, me, now),
                        near.found(key, &nodes, me, now)
                    ),
                    4 => {
                        let i = Duration::from_secs(dt / 10);
                        prop_assert_eq!(new.ping_due(key, now, i), near.ping_due(key, now, i));
                    }
                    _ => {}
                }
                prop_assert_eq!(new.rtts(), rtts.len());
                prop_assert_eq!(new.nears(), near.len());
                for k in 0..8 {
                    let (near_fresh, nodes) = near.get(k, now);
                    prop_assert_eq!(
                        new.look(k, now),
                        Look { rtt: rtts.rtt(k, now), near_fresh, near: nodes }
                    );
                    prop_assert_eq!(new.near_fresh(k, now), near.fresh(k, now));
                    prop_assert!(new.nodes(k, now).eq(near.nodes(k, now)));
                }
            }
        }
    }
}
