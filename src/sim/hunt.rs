//! The hunt for a second origin fetch (issue 24 item 2): many objects,
//! requested through different nodes at times spread across cluster
//! changes — nodes joining one by one, RTT-based clusters forming (§4.4) —
//! driven through the real fetch policy (§3.2) and the real DSHT. With
//! claims (the test-and-set of §8) each object must be fetched from the
//! origin exactly once, whatever the timing; the report counts the origin
//! fetches per object, and says, for every fetch beyond the first, what the
//! node's get and claim found and where the object's pointers were.
//!
//! Transfers are modelled as in [`origin`](crate::sim::origin): the origin
//! answers after a round trip and `origin_fetch_ms`; a peer serves a complete
//! copy after a round trip and `peer_fetch_ms`, and one still fetching by
//! cut-through when its own copy completes. The network is healthy: no
//! datagram is lost and no node fails, so every extra origin fetch is the
//! DSHT's or the policy's doing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::config::Config;
use crate::dsht::cluster::hint_keys;
use crate::dsht::id::{Id, Key};
use crate::dsht::node::{Event, Level, Node, OpId};
use crate::proxy::fetch::{Action, FetchConfig, FetchPolicy};
use crate::rng::Rng;
use crate::sim::net::{sim_addr, Links, Sim};
use crate::sim::origin::{node_of, proxy_addr};
use crate::time::{Duration, Time};

/// Parameters of the hunt.
#[derive(Clone, Debug, PartialEq)]
pub struct HuntParams {
    /// Nodes; they join one by one over `join_spread_secs`.
    pub nodes: usize,
    /// Distinct objects.
    pub objects: usize,
    /// Client requests in all, each for a random object through a random
    /// node that has joined.
    pub requests: usize,
    /// Nodes that join in the first `initial_join_secs`; the rest join one
    /// by one over `join_spread_secs` after that.
    pub initial_nodes: usize,
    /// The span over which the initial nodes join.
    pub initial_join_secs: u64,
    /// The span over which the other nodes join.
    pub join_spread_secs: u64,
    /// Requests fall at random times over this span, from the end of the
    /// initial joins.
    pub request_spread_secs: u64,
    /// How long the origin takes to send an object, after a round trip.
    pub origin_fetch_ms: u64,
    /// How long a peer takes to send a complete object, after a round trip.
    pub peer_fetch_ms: u64,
    /// Cluster levels (3: the paper's hierarchy).
    pub levels: usize,
    /// The seed: the world, the join order, the requests.
    pub seed: u64,
}

impl Default for HuntParams {
    fn default() -> Self {
        HuntParams {
            nodes: 40,
            initial_nodes: 20,
            initial_join_secs: 60,
            objects: 20,
            requests: 400,
            join_spread_secs: 600,
            request_spread_secs: 1200,
            origin_fetch_ms: 2000,
            peer_fetch_ms: 300,
            levels: 3,
            seed: 1,
        }
    }
}

/// What a node's lookup found before one of its origin fetches.
#[derive(Clone, Debug, PartialEq)]
pub struct OriginFetch {
    /// Seconds since the first join.
    pub at_secs: f64,
    /// The node that fetched.
    pub node: usize,
    /// The object.
    pub object: usize,
    /// Seconds since the node joined.
    pub joined_secs: f64,
    /// Values its get found (and the level), if it got that far.
    pub get: Option<(usize, Option<Level>)>,
    /// Whether its claim won, and the values it returned, if it claimed.
    pub claim: Option<(bool, usize)>,
    /// Nodes holding another proxy's pointer to the object at level 0 at
    /// the moment of the fetch.
    pub holders_level0: usize,
    /// Nodes holding a pointer at any level.
    pub holders_any: usize,
    /// Proxies complete or fetching the object at that moment (this one
    /// excepted).
    pub proxies_with_copy: usize,
    /// Whether the network's closest joined node to the key (another than
    /// this one) held another proxy's pointer at level 0.
    pub closest_holds: bool,
    /// Where those level-0 holders rank among the joined nodes by distance
    /// to the key (0: the closest).
    pub holder_ranks: Vec<usize>,
    /// Where the fetching node ranks.
    pub fetcher_rank: Option<usize>,
    /// Whether the closest node joined after the object's first origin
    /// fetch (so it held nothing from then).
    pub closest_joined_after_first: bool,
}

/// What the hunt measured.
#[derive(Clone, Debug, PartialEq)]
pub struct HuntReport {
    /// The parameters.
    pub params: HuntParams,
    /// Origin fetches per object (index = object).
    pub origin_fetches: Vec<u32>,
    /// Objects requested at least once.
    pub objects_requested: usize,
    /// Requests issued, served and failed.
    pub requests: u64,
    /// Requests served.
    pub served: u64,
    /// Requests answered with an error.
    pub failed: u64,
    /// Cluster switches the nodes made during the run.
    pub cluster_switches: u64,
    /// Every origin fetch beyond an object's first, with what was known.
    pub extra: Vec<OriginFetch>,
}

impl HuntReport {
    /// Origin fetches in all.
    pub fn total_origin_fetches(&self) -> u64 {
        self.origin_fetches.iter().map(|&c| u64::from(c)).sum()
    }

    /// What a healthy run must keep: one origin fetch per requested object,
    /// and no failed request.
    pub fn invariant_failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        if self.total_origin_fetches() != self.objects_requested as u64 {
            failed.push(format!(
                "{} origin fetches for {} objects (seed {}): {:?}",
                self.total_origin_fetches(),
                self.objects_requested,
                self.params.seed,
                self.extra
            ));
        }
        if self.failed > 0 {
            failed.push(format!("{} requests failed", self.failed));
        }
        failed
    }
}

/// How long a proxy waits on a peer's copy that is still on its way.
const PEER_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum AppEvent {
    Join {
        node: usize,
    },
    Request {
        node: usize,
        obj: usize,
    },
    Fetched {
        node: usize,
        obj: usize,
        ok: bool,
        fetch: u64,
    },
    Tick,
}

/// What a node's last get (values, level) and claim (won, values) for an
/// object found.
type Looked = (Option<(usize, Option<Level>)>, Option<(bool, usize)>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Get,
    Claim,
    Pin,
}

/// The hunt's state: the simulated network, each node's fetch policy, and
/// the transfers under way.
struct Hunt<L: Links> {
    sim: Sim<L>,
    policies: Vec<FetchPolicy>,
    keys: Vec<Key>,
    app: BinaryHeap<Reverse<(Time, u64, AppEvent)>>,
    seq: u64,
    ops: HashMap<(usize, OpId), Pending>,
    cut_through: HashMap<(usize, usize), Vec<(usize, u64)>>,
    fetches: HashMap<(usize, usize), u64>,
    next_fetch: u64,
    joined_at: Vec<Option<Time>>,
    /// What each (node, object)'s last get and claim found.
    looked: HashMap<(usize, usize), Looked>,
    origin_fetches: Vec<u32>,
    extra: Vec<OriginFetch>,
    first_fetch_at: Vec<Option<Time>>,
    start: Time,
    served: u64,
    failed: u64,
    params: HuntParams,
    actions: Vec<Action>,
}

impl<L: Links> Hunt<L> {
    fn push(&mut self, at: Time, e: AppEvent) {
        self.seq += 1;
        self.app.push(Reverse((at, self.seq, e)));
    }

    fn new_fetch(&mut self, node: usize, obj: usize) -> u64 {
        self.next_fetch += 1;
        self.fetches.insert((node, obj), self.next_fetch);
        self.next_fetch
    }

    fn object_of(&self, key: &Key) -> usize {
        self.keys.iter().position(|k| k == key).expect("known key")
    }

    fn rtt(&self, a: usize, b: usize) -> Duration {
        self.sim.links().one_way(a, b) + self.sim.links().one_way(b, a)
    }

    /// What the network held for `obj` when `node` went to the origin.
    fn diagnose(&self, node: usize, obj: usize, now: Time) -> OriginFetch {
        let key = self.keys[obj];
        let mine = proxy_addr(node);
        let other_pointer = |n: &Node, level: Level| {
            n.store(level).is_some_and(|s| {
                s.values(&key, now)
                    .iter()
                    .any(|v| v.value.to_addr().is_some_and(|a| a != mine))
            })
        };
        let mut holders_level0 = 0;
        let mut holders_any = 0;
        for (i, n) in self.sim.nodes().enumerate() {
            if self.joined_at[i].is_none() {
                continue;
            }
            if other_pointer(n, 0) {
                holders_level0 += 1;
            }
            if (0..self.params.levels as Level).any(|l| other_pointer(n, l)) {
                holders_any += 1;
            }
        }
        let proxies_with_copy = self
            .policies
            .iter()
            .enumerate()
            .filter(|(i, p)| *i != node && (p.is_cached(&key) || p.is_pending(&key)))
            .count();
        let closest = (0..self.sim.len())
            .filter(|&i| self.joined_at[i].is_some() && i != node)
            .min_by_key(|&i| self.sim.node(i).id().distance(&key));
        let closest_holds = closest.is_some_and(|i| other_pointer(self.sim.node(i), 0));
        let mut ranked: Vec<usize> = (0..self.sim.len())
            .filter(|&i| self.joined_at[i].is_some())
            .collect();
        ranked.sort_by_key(|&i| self.sim.node(i).id().distance(&key));
        let holder_ranks: Vec<usize> = ranked
            .iter()
            .enumerate()
            .filter(|(_, &i)| other_pointer(self.sim.node(i), 0))
            .map(|(r, _)| r)
            .collect();
        let first = self.first_fetch_at[obj];
        let closest_joined_after_first = closest
            .and_then(|i| self.joined_at[i])
            .zip(first)
            .is_some_and(|(j, f)| j > f);
        let fetcher_rank = ranked.iter().position(|&i| i == node);
        let (get, claim) = self
            .looked
            .get(&(node, obj))
            .cloned()
            .unwrap_or((None, None));
        OriginFetch {
            at_secs: now.saturating_since(self.start).as_millis_f64() / 1000.0,
            node,
            object: obj,
            joined_secs: self.joined_at[node]
                .map_or(0.0, |t| now.saturating_since(t).as_millis_f64() / 1000.0),
            get,
            claim,
            holders_level0,
            holders_any,
            proxies_with_copy,
            closest_holds,
            holder_ranks,
            fetcher_rank,
            closest_joined_after_first,
        }
    }

    fn act(&mut self, n: usize) {
        let now = self.sim.now();
        let actions = std::mem::take(&mut self.actions);
        for a in actions {
            match a {
                Action::Serve { count, .. } => self.served += u64::from(count),
                Action::Fail { count, .. } => self.failed += u64::from(count),
                Action::DshtGet { key } => {
                    let op = self.sim.with_node(n, |node, now| node.get(now, key, None));
                    self.ops.insert((n, op), Pending::Get);
                }
                Action::DshtClaim {
                    key,
                    value,
                    ttl_secs,
                } => {
                    let op = self
                        .sim
                        .with_node(n, |node, now| node.claim(now, key, value, ttl_secs));
                    self.ops.insert((n, op), Pending::Claim);
                }
                Action::DshtPin {
                    key,
                    value,
                    ttl_secs,
                } => {
                    let op = self
                        .sim
                        .with_node(n, |node, now| node.pin(now, key, value, ttl_secs));
                    self.ops.insert((n, op), Pending::Pin);
                }
                Action::DshtPut {
                    key,
                    value,
                    ttl_secs,
                } => {
                    self.sim
                        .with_node(n, |node, now| node.put(now, key, value, ttl_secs, None));
                }
                Action::FetchOrigin { key } => {
                    let obj = self.object_of(&key);
                    if self.origin_fetches[obj] > 0 {
                        let d = self.diagnose(n, obj, now);
                        self.extra.push(d);
                    }
                    self.origin_fetches[obj] += 1;
                    self.first_fetch_at[obj].get_or_insert(now);
                    let at =
                        now + self.rtt(n, 0) + Duration::from_millis(self.params.origin_fetch_ms);
                    let fetch = self.new_fetch(n, obj);
                    self.push(
                        at,
                        AppEvent::Fetched {
                            node: n,
                            obj,
                            ok: true,
                            fetch,
                        },
                    );
                }
                Action::FetchPeer { key, addr } => {
                    let obj = self.object_of(&key);
                    let fetch = self.new_fetch(n, obj);
                    let Some(peer) = node_of(addr).filter(|&p| p < self.sim.len()) else {
                        self.push(
                            now + Duration::from_secs(1),
                            AppEvent::Fetched {
                                node: n,
                                obj,
                                ok: false,
                                fetch,
                            },
                        );
                        continue;
                    };
                    let rtt = self.rtt(n, peer);
                    if self.policies[peer].is_cached(&key) {
                        let at = now + rtt + Duration::from_millis(self.params.peer_fetch_ms);
                        self.push(
                            at,
                            AppEvent::Fetched {
                                node: n,
                                obj,
                                ok: true,
                                fetch,
                            },
                        );
                    } else if self.policies[peer].is_pending(&key) {
                        self.cut_through
                            .entry((peer, obj))
                            .or_default()
                            .push((n, fetch));
                        self.push(
                            now + PEER_FETCH_TIMEOUT,
                            AppEvent::Fetched {
                                node: n,
                                obj,
                                ok: false,
                                fetch,
                            },
                        );
                    } else {
                        self.push(
                            now + rtt,
                            AppEvent::Fetched {
                                node: n,
                                obj,
                                ok: false,
                                fetch,
                            },
                        );
                    }
                }
            }
        }
    }

    fn handle_dsht_events(&mut self) {
        let now = self.sim.now();
        for (n, e) in self.sim.take_events() {
            match e {
                Event::GetDone {
                    op,
                    key,
                    values,
                    level,
                    ..
                } => {
                    if self.ops.remove(&(n, op)) == Some(Pending::Get) {
                        let obj = self.object_of(&key);
                        self.looked
                            .insert((n, obj), (Some((values.len(), level)), None));
                        let mut out = std::mem::take(&mut self.actions);
                        self.policies[n].on_get(now, key, &values, level, &mut out);
                        self.actions = out;
                        self.act(n);
                    }
                }
                Event::ClaimDone {
                    op,
                    key,
                    claimed,
                    values,
                    ..
                } => {
                    if self.ops.remove(&(n, op)) == Some(Pending::Claim) {
                        let obj = self.object_of(&key);
                        if let Some(l) = self.looked.get_mut(&(n, obj)) {
                            l.1 = Some((claimed, values.len()));
                        }
                        let mut out = std::mem::take(&mut self.actions);
                        self.policies[n].on_claim(now, key, claimed, &values, &mut out);
                        self.actions = out;
                        self.act(n);
                    }
                }
                Event::PutDone { .. } => {}
            }
        }
    }
}

/// Runs the hunt on `links` (which should model the wide area, with hint
/// paths, so that nodes form clusters as they join).
pub fn run<L: Links>(params: &HuntParams, links: L) -> HuntReport {
    let n = params.nodes.max(2);
    let mut rng = Rng::new(params.seed ^ 0x6875_6e74);
    let thresholds: Vec<u32> = Config::default()
        .level_thresholds_ms
        .into_iter()
        .take(params.levels.max(1))
        .collect();
    let config = Config {
        level_thresholds_ms: thresholds,
        ..Config::default()
    };
    let mut sim = Sim::new(links, params.seed);
    for i in 0..n {
        let node = Node::new(
            config.clone(),
            sim_addr(i),
            sim.now(),
            params.seed.wrapping_add(i as u64 * 7919),
        )
        .expect("valid config");
        sim.add(node);
    }
    let fetch = FetchConfig::default();
    let policies = (0..n)
        .map(|i| FetchPolicy::new(fetch.clone(), proxy_addr(i)))
        .collect();
    let keys: Vec<Key> = (0..params.objects)
        .map(|o| Id::from_url(&format!("http://hunt.example/{}/{o}", params.seed)))
        .collect();
    let start = sim.now();
    let mut w = Hunt {
        sim,
        policies,
        keys,
        app: BinaryHeap::new(),
        seq: 0,
        ops: HashMap::new(),
        cut_through: HashMap::new(),
        fetches: HashMap::new(),
        next_fetch: 0,
        joined_at: vec![None; n],
        looked: HashMap::new(),
        origin_fetches: vec![0; params.objects],
        extra: Vec::new(),
        first_fetch_at: vec![None; params.objects],
        start,
        served: 0,
        failed: 0,
        params: params.clone(),
        actions: Vec::new(),
    };
    // Join times: the first two at once, the initial nodes over the first
    // span, the rest over the next.
    let initial = params.initial_nodes.clamp(2, n);
    for node in 0..n {
        let at = if node < 2 {
            Duration::ZERO
        } else if node < initial {
            Duration::from_micros(rng.below(params.initial_join_secs.max(1) * 1_000_000))
        } else {
            Duration::from_secs(params.initial_join_secs)
                + Duration::from_micros(rng.below(params.join_spread_secs.max(1) * 1_000_000))
        };
        w.push(start + at, AppEvent::Join { node });
    }
    let mut requested = vec![false; params.objects];
    for _ in 0..params.requests {
        let at = Duration::from_secs(params.initial_join_secs)
            + Duration::from_micros(rng.below(params.request_spread_secs.max(1) * 1_000_000));
        let node = rng.below(n as u64) as usize;
        let obj = rng.below(params.objects.max(1) as u64) as usize;
        w.push(start + at, AppEvent::Request { node, obj });
    }
    w.push(start + Duration::from_secs(1), AppEvent::Tick);
    let end = start
        + Duration::from_secs(params.initial_join_secs)
        + Duration::from_secs(params.request_spread_secs.max(params.join_spread_secs))
        + Duration::from_secs(60);
    let mut requests = 0u64;
    let mut joined: Vec<usize> = Vec::new();
    const STEP: Duration = Duration::from_millis(20);
    while let Some(Reverse((at, _, _))) = w.app.peek() {
        let at = *at;
        if at > end {
            break;
        }
        while w.sim.now() + STEP < at {
            let t = w.sim.now() + STEP;
            w.sim.run_until(t);
            w.handle_dsht_events();
        }
        w.sim.run_until(at);
        w.handle_dsht_events();
        let Some(Reverse((_, _, e))) = w.app.pop() else {
            break;
        };
        match e {
            AppEvent::Join { node } => {
                if let Some((routers, subnets)) = w.sim.links().hint_path(node) {
                    let keys = hint_keys(&routers, &subnets);
                    w.sim.with_node(node, |x, now| x.set_hints(now, &keys));
                }
                if let Some(&via) = joined.get(rng.below(joined.len().max(1) as u64) as usize) {
                    w.sim
                        .with_node(node, |x, now| x.bootstrap(now, &[sim_addr(via)]));
                }
                joined.push(node);
                w.joined_at[node] = Some(at);
            }
            AppEvent::Request { node, obj } => {
                // A request for a node not yet up goes to one that is (as
                // DNS names only running proxies).
                let node = if w.joined_at[node].is_some() {
                    node
                } else {
                    joined[node % joined.len()]
                };
                requests += 1;
                requested[obj] = true;
                let key = w.keys[obj];
                let mut out = std::mem::take(&mut w.actions);
                w.policies[node].request(at, key, &mut out);
                w.actions = out;
                w.act(node);
            }
            AppEvent::Fetched {
                node,
                obj,
                ok,
                fetch,
            } => {
                if w.fetches.get(&(node, obj)) != Some(&fetch) {
                    continue;
                }
                w.fetches.remove(&(node, obj));
                let key = w.keys[obj];
                let mut out = std::mem::take(&mut w.actions);
                w.policies[node].on_fetched(at, key, ok, &mut out);
                w.actions = out;
                w.act(node);
                if let Some(waiting) = w.cut_through.remove(&(node, obj)) {
                    for (m, fetch) in waiting {
                        let t = at
                            + w.sim.links().one_way(node, m)
                            + Duration::from_millis(w.params.peer_fetch_ms);
                        w.push(
                            t,
                            AppEvent::Fetched {
                                node: m,
                                obj,
                                ok,
                                fetch,
                            },
                        );
                    }
                }
            }
            AppEvent::Tick => {
                for node in 0..n {
                    let mut out = std::mem::take(&mut w.actions);
                    w.policies[node].tick(at, &mut out);
                    w.actions = out;
                    w.act(node);
                }
                w.push(at + Duration::from_secs(1), AppEvent::Tick);
            }
        }
    }
    let cluster_switches = w.sim.nodes().map(|x| x.stats().cluster_switches).sum();
    HuntReport {
        params: params.clone(),
        origin_fetches: w.origin_fetches,
        objects_requested: requested.iter().filter(|&&r| r).count(),
        requests,
        served: w.served,
        failed: w.failed,
        cluster_switches,
        extra: w.extra,
    }
}
