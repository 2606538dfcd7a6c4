//! The flash-crowd experiment of §6.1 (Fig. 4, origin load) and the get
//! latencies of §6.2 (Fig. 6), driven through the real fetch policy.
//!
//! The paper's set-up: 166 nodes, each running a DSHT node, a proxy and a
//! client; an origin behind a 384 kbit/s uplink serving 12 files of 41 KB
//! (three embedded images on each of four pages). After a random delay of
//! 0–180 s each client requests the three files of a random page, again and
//! again, for 30 minutes: 99.6 requests a second in all. The paper saw 15
//! origin fetches for the 12 files; with claims (the test-and-set of §8) the
//! goal is exactly one per file.
//!
//! Transfers are modelled, not simulated packet by packet: the origin's link
//! serves one object at a time at its rate; a peer serves a complete object
//! after one round trip plus its size at `peer_kbit_per_sec`, and a peer
//! still fetching serves it by cut-through as soon as its own copy completes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::config::Config;
use crate::dsht::id::{Id, Key};
use crate::dsht::node::{Event, Node, OpId};
use crate::proxy::fetch::{Action, FetchConfig, FetchPolicy, Served};
use crate::rng::Rng;
use crate::sim::clusters::join_network;
use crate::sim::net::{sim_addr, Links, Sim};
use crate::time::{Duration, Time};

/// Parameters of the origin-load experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct OriginParams {
    /// Nodes (each a DSHT node, a proxy and a client).
    pub nodes: usize,
    /// Distinct objects (files); pages hold three each.
    pub objects: usize,
    /// Minutes of client load.
    pub minutes: u32,
    /// Object size in bytes.
    pub object_bytes: u64,
    /// The origin's uplink in kbit/s.
    pub origin_kbit_per_sec: u64,
    /// Bandwidth between proxies in kbit/s.
    pub peer_kbit_per_sec: u64,
    /// Requests per second per client.
    pub client_rate: f64,
    /// Longest random delay before a client starts, in seconds.
    pub client_start_spread_secs: u64,
    /// Cluster levels (1: global only; 3: the paper's hierarchy).
    pub levels: usize,
    /// Minutes the nodes run before clients start, forming their clusters
    /// (§4.4; the paper's clients began 30 minutes out, §6.3).
    pub formation_minutes: u32,
    /// Whether proxies claim a key before going to the origin.
    pub claim: bool,
    /// The seed.
    pub seed: u64,
    /// Nodes that fail during the crowd (issue 24: the crowd survives node
    /// failure), each crashing (no goodbye: its DSHT node, proxy and client
    /// stop at once) at a random time in the first `failure_window_secs` of
    /// client load. Their pointers stay in the DSHT until their TTLs run
    /// out; a peer fetching from one is cut off and tries its next source.
    pub failures: usize,
    /// The span, from the clients' start, over which the failures fall.
    pub failure_window_secs: u64,
}

impl Default for OriginParams {
    fn default() -> Self {
        OriginParams {
            nodes: 166,
            objects: 12,
            minutes: 30,
            object_bytes: 41 * 1024,
            origin_kbit_per_sec: 384,
            peer_kbit_per_sec: 10_000,
            client_rate: 0.6,
            client_start_spread_secs: 180,
            levels: 3,
            formation_minutes: 30,
            claim: true,
            seed: 1,
            failures: 0,
            failure_window_secs: 300,
        }
    }
}

/// Requests served per minute, by source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinuteCounts {
    /// From the origin.
    pub origin: u64,
    /// From a peer found at level 0 (including peers named by a lost claim).
    pub level0: u64,
    /// From a peer found at level 1.
    pub level1: u64,
    /// From a peer found at level 2.
    pub level2: u64,
    /// From the proxy's own cache, or coalesced onto its own fetch.
    pub local: u64,
    /// Failed.
    pub failed: u64,
}

/// What the experiment measured.
#[derive(Clone, Debug, PartialEq)]
pub struct OriginReport {
    /// The parameters.
    pub params: OriginParams,
    /// Fetches from the origin in the whole run.
    pub origin_fetches: u64,
    /// Distinct objects requested.
    pub unique_objects: usize,
    /// Requests served, per minute of the run.
    pub per_minute: Vec<MinuteCounts>,
    /// Latencies of every DSHT get that left the node, in milliseconds (Fig. 6).
    pub get_latencies_ms: Vec<f64>,
    /// Requests issued.
    pub requests: u64,
    /// Nodes per cluster when the clients started, per non-global level,
    /// largest first: the clusters the nodes formed.
    pub cluster_sizes: Vec<Vec<usize>>,
    /// Nodes that failed during the crowd, in the order they failed.
    pub failed_nodes: Vec<usize>,
    /// Origin fetches per object (index = object).
    pub origin_fetches_per_object: Vec<u64>,
}

impl OriginReport {
    /// Checks the invariants a healthy run must keep; returns what failed.
    pub fn invariant_failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        let failures: u64 = self.per_minute.iter().map(|m| m.failed).sum();
        if failures > 0 {
            failed.push(format!("{failures} requests failed on a healthy network"));
        }
        if self.params.claim
            && self.params.failures == 0
            && self.origin_fetches != self.unique_objects as u64
        {
            failed.push(format!(
                "{} origin fetches for {} objects with claims on (test-and-set must make it one each)",
                self.origin_fetches, self.unique_objects
            ));
        }
        failed
    }
}

/// How long a proxy waits on a peer's copy that is still on its way.
const PEER_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum AppEvent {
    /// Client at node `n` requests its next page.
    Page { node: usize },
    /// A fetch by `node` of object `obj` finished.
    Fetched {
        node: usize,
        obj: usize,
        ok: bool,
        fetch: u64,
    },
    /// Renew pointers.
    Tick,
    /// Node `node` fails.
    Crash { node: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Get,
    Claim,
}

struct World<L: Links> {
    sim: Sim<L>,
    policies: Vec<FetchPolicy>,
    keys: Vec<Key>,
    app: BinaryHeap<Reverse<(Time, u64, AppEvent)>>,
    seq: u64,
    ops: HashMap<(usize, OpId), Pending>,
    /// For each (node, object): nodes (and their fetch ids) waiting on its
    /// copy by cut-through.
    cut_through: HashMap<(usize, usize), Vec<(usize, u64)>>,
    /// The current fetch id of each (node, object) being fetched.
    fetches: HashMap<(usize, usize), u64>,
    next_fetch: u64,
    origin_free_at: Time,
    origin_fetches: u64,
    origin_fetches_per_object: Vec<u64>,
    per_minute: Vec<MinuteCounts>,
    start: Time,
    requested: Vec<bool>,
    latencies: Vec<f64>,
    params: OriginParams,
    actions: Vec<Action>,
}

impl<L: Links> World<L> {
    fn push(&mut self, at: Time, e: AppEvent) {
        self.seq += 1;
        self.app.push(Reverse((at, self.seq, e)));
    }

    fn minute(&mut self, now: Time) -> &mut MinuteCounts {
        let m = (now.saturating_since(self.start).as_secs() / 60) as usize;
        if self.per_minute.len() <= m {
            self.per_minute.resize(m + 1, MinuteCounts::default());
        }
        &mut self.per_minute[m]
    }

    /// Starts a new fetch of `obj` at `node`, superseding any earlier one.
    fn new_fetch(&mut self, node: usize, obj: usize) -> u64 {
        self.next_fetch += 1;
        self.fetches.insert((node, obj), self.next_fetch);
        self.next_fetch
    }

    fn object_of(&self, key: &Key) -> usize {
        self.keys.iter().position(|k| k == key).expect("known key")
    }

    fn transfer(&self) -> Duration {
        Duration::from_micros(
            self.params.object_bytes * 8 * 1000 / self.params.peer_kbit_per_sec.max(1),
        )
    }

    /// Carries out what node `n`'s policy decided.
    fn act(&mut self, n: usize) {
        let now = self.sim.now();
        let actions = std::mem::take(&mut self.actions);
        for a in actions {
            match a {
                Action::Serve { first, count, .. } => {
                    let m = self.minute(now);
                    match first {
                        Served::Origin => m.origin += 1,
                        Served::Peer(0) | Served::ClaimedPeer => m.level0 += 1,
                        Served::Peer(1) => m.level1 += 1,
                        Served::Peer(_) => m.level2 += 1,
                        Served::LocalCache | Served::Coalesced => m.local += 1,
                    }
                    m.local += u64::from(count.saturating_sub(1));
                }
                Action::Fail { count, .. } => self.minute(now).failed += u64::from(count),
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
                    self.sim
                        .with_node(n, |node, now| node.pin(now, key, value, ttl_secs));
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
                    self.origin_fetches += 1;
                    self.origin_fetches_per_object[obj] += 1;
                    let link = Duration::from_micros(
                        self.params.object_bytes * 8 * 1000
                            / self.params.origin_kbit_per_sec.max(1),
                    );
                    // The origin sits near node 0 (its DSL line): one round trip to reach it.
                    let rtt = self.sim.links().one_way(n, 0) + self.sim.links().one_way(0, n);
                    let begin = (now + rtt).max(self.origin_free_at);
                    self.origin_free_at = begin + link;
                    let fetch = self.new_fetch(n, obj);
                    self.push(
                        begin + link,
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
                    let peer = node_of(addr).filter(|&p| p < self.sim.len());
                    let Some(peer) = peer.filter(|&p| self.sim.is_alive(p)) else {
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
                    let rtt = self.sim.links().one_way(n, peer) + self.sim.links().one_way(peer, n);
                    if self.policies[peer].is_cached(&key) {
                        let t = self.transfer();
                        self.push(
                            now + rtt + t,
                            AppEvent::Fetched {
                                node: n,
                                obj,
                                ok: true,
                                fetch,
                            },
                        );
                    } else if self.policies[peer].is_pending(&key) {
                        // Wait for the peer's copy (cut-through), but not forever:
                        // two proxies can end up waiting on each other.
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
            if !self.sim.is_alive(n) {
                continue;
            }
            match e {
                Event::GetDone {
                    op,
                    key,
                    values,
                    level,
                    local,
                    elapsed,
                    ..
                } => {
                    if self.ops.remove(&(n, op)) == Some(Pending::Get) {
                        if !local {
                            self.latencies.push(elapsed.as_millis_f64());
                        }
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

/// Runs the experiment on `links` (which should model the wide area).
pub fn run<L: Links>(params: &OriginParams, links: L) -> OriginReport {
    let n = params.nodes;
    let mut rng = Rng::new(params.seed);
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
    // Nodes join and form their own clusters before the crowd arrives.
    join_network(&mut sim, &mut rng, true);
    sim.run_for(Duration::from_secs(
        60 * u64::from(params.formation_minutes.max(1)),
    ));
    sim.take_events();
    let cluster_sizes = (1..config.levels() as u8)
        .map(|level| {
            let mut counts: HashMap<Id, usize> = HashMap::new();
            for node in sim.nodes() {
                *counts
                    .entry(node.cluster(level).map_or(Id::ZERO, |c| c.id))
                    .or_default() += 1;
            }
            let mut v: Vec<usize> = counts.into_values().collect();
            v.sort_unstable_by(|a, b| b.cmp(a));
            v
        })
        .collect();
    let fetch = FetchConfig {
        claim_before_origin: params.claim,
        ..FetchConfig::default()
    };
    let policies = (0..n)
        .map(|i| FetchPolicy::new(fetch.clone(), proxy_addr(i)))
        .collect();
    let keys = (0..params.objects)
        .map(|o| Id::from_url(&format!("http://www.x.com/img{o}.jpg")))
        .collect();
    let start = sim.now();
    let mut w = World {
        sim,
        policies,
        keys,
        app: BinaryHeap::new(),
        seq: 0,
        ops: HashMap::new(),
        cut_through: HashMap::new(),
        fetches: HashMap::new(),
        next_fetch: 0,
        origin_free_at: start,
        origin_fetches: 0,
        origin_fetches_per_object: vec![0; params.objects],
        per_minute: Vec::new(),
        start,
        requested: vec![false; params.objects],
        latencies: Vec::new(),
        params: params.clone(),
        actions: Vec::new(),
    };
    for node in 0..n {
        let delay =
            Duration::from_micros(rng.below(params.client_start_spread_secs.max(1) * 1_000_000));
        w.push(start + delay, AppEvent::Page { node });
    }
    w.push(start + Duration::from_secs(1), AppEvent::Tick);
    // The failures draw from a generator of their own, so that a run
    // without them is the run it always was.
    let mut fail_rng = Rng::new(params.seed ^ 0x6661_696c);
    let mut doomed: Vec<usize> = (0..n).collect();
    fail_rng.shuffle(&mut doomed);
    for &node in doomed.iter().take(params.failures.min(n.saturating_sub(1))) {
        let at =
            Duration::from_micros(fail_rng.below(params.failure_window_secs.max(1) * 1_000_000));
        w.push(start + at, AppEvent::Crash { node });
    }
    let mut failed_nodes = Vec::new();
    let end = start + Duration::from_secs(60 * u64::from(params.minutes));
    let page_period = Duration::from_micros((3.0 / params.client_rate.max(1e-6) * 1e6) as u64);
    let pages = params.objects.div_ceil(3).max(1);
    let mut requests = 0u64;
    const STEP: Duration = Duration::from_millis(20);
    while let Some(Reverse((at, _, _))) = w.app.peek() {
        let at = *at;
        if at > end {
            break;
        }
        // Advance the DSHT in small steps so that its results act on time.
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
            AppEvent::Page { node } if !w.sim.is_alive(node) => {}
            AppEvent::Page { node } => {
                let page = rng.below(pages as u64) as usize;
                for obj in (page * 3)..((page * 3 + 3).min(params.objects)) {
                    requests += 1;
                    w.requested[obj] = true;
                    let key = w.keys[obj];
                    let mut out = std::mem::take(&mut w.actions);
                    w.policies[node].request(at, key, &mut out);
                    w.actions = out;
                    w.act(node);
                }
                w.push(at + page_period, AppEvent::Page { node });
            }
            AppEvent::Fetched {
                node,
                obj,
                ok,
                fetch,
            } => {
                // Only the current fetch of this object at this node counts,
                // once, and only while the node runs.
                if w.fetches.get(&(node, obj)) != Some(&fetch) || !w.sim.is_alive(node) {
                    continue;
                }
                w.fetches.remove(&(node, obj));
                let key = w.keys[obj];
                let mut out = std::mem::take(&mut w.actions);
                w.policies[node].on_fetched(at, key, ok, &mut out);
                w.actions = out;
                w.act(node);
                // Peers streaming from this copy finish with it.
                if let Some(waiting) = w.cut_through.remove(&(node, obj)) {
                    for (m, fetch) in waiting {
                        let one_way = w.sim.links().one_way(node, m);
                        let t = w.transfer();
                        w.push(
                            at + one_way + t,
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
            AppEvent::Crash { node } => {
                w.sim.crash(node);
                failed_nodes.push(node);
                // Peers streaming from its copies are cut off (a reset
                // reaches them a one-way delay later).
                let cut: Vec<(usize, usize)> = w
                    .cut_through
                    .keys()
                    .filter(|k| k.0 == node)
                    .copied()
                    .collect();
                for k in cut {
                    for (m, fetch) in w.cut_through.remove(&k).unwrap_or_default() {
                        let t = at + w.sim.links().one_way(node, m);
                        w.push(
                            t,
                            AppEvent::Fetched {
                                node: m,
                                obj: k.1,
                                ok: false,
                                fetch,
                            },
                        );
                    }
                }
            }
            AppEvent::Tick => {
                for node in 0..n {
                    if !w.sim.is_alive(node) {
                        continue;
                    }
                    let mut out = std::mem::take(&mut w.actions);
                    w.policies[node].tick(at, &mut out);
                    w.actions = out;
                    w.act(node);
                }
                w.push(at + Duration::from_secs(1), AppEvent::Tick);
            }
        }
    }
    let mut per_minute = w.per_minute;
    per_minute.resize(params.minutes as usize, MinuteCounts::default());
    OriginReport {
        params: params.clone(),
        origin_fetches: w.origin_fetches,
        unique_objects: w.requested.iter().filter(|&&r| r).count(),
        per_minute,
        get_latencies_ms: w.latencies,
        requests,
        cluster_sizes,
        failed_nodes,
        origin_fetches_per_object: w.origin_fetches_per_object,
    }
}

/// The proxy address of simulated node `i` (its DSHT address, port 8090).
pub fn proxy_addr(i: usize) -> std::net::SocketAddr {
    let mut a = sim_addr(i);
    a.set_port(8090);
    a
}

/// The node whose proxy is at `addr` (inverse of [`proxy_addr`]).
pub fn node_of(addr: std::net::SocketAddr) -> Option<usize> {
    match addr.ip() {
        std::net::IpAddr::V4(_) if addr.port() == 8090 => {
            let mut a = addr;
            a.set_port(7000);
            crate::sim::net::sim_index(a)
        }
        _ => None,
    }
}

/// The `p`-th percentile (0–100) of `values` (sorted in place).
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[rank.min(values.len() - 1)]
}
