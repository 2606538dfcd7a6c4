//! Clusters the nodes form themselves (§4.4, §6.3 Fig. 7; IPTPS 2003
//! §2.3–2.5): `coral sim clusters`.
//!
//! Nodes on the world model ([`World::planetlab`]) join one by one, each
//! through a random node that joined before it, with clustering hints from
//! synthetic router paths ([`World::hint_path`]), and then run for the given
//! minutes with nothing but the clustering machinery and routing upkeep:
//! every five minutes each node reconsiders each level, measuring as it
//! goes. Three scenarios:
//!
//! - [`Scenario::Formation`]: everyone starts alone (the paper's set-up).
//! - [`Scenario::Merge`]: the eastern US starts as two level-1 clusters,
//!   north and south of 40°N, all within 60 ms of each other; they must merge.
//! - [`Scenario::Split`]: clusters form; then at half time the latency
//!   between the Atlantic side of North America and the inland side rises
//!   by [`SPLIT_EXTRA_RTT_MS`], and the level-1 clusters that span both
//!   sides must split.
//!
//! The report measures what came out against the true RTTs of the model:
//! cluster sizes per level, the fraction of nodes whose cluster meets the
//! 80 % rule, same-cluster pairs over the threshold, singletons, the
//! regions in the largest clusters (the paper: eastern US 70 nodes, western
//! US 37, Europe 19), and how many nodes still changed cluster in the second
//! half of the run.

use std::collections::HashMap;

use crate::config::Config;
use crate::dsht::cluster::hint_keys;
use crate::dsht::id::Id;
use crate::dsht::node::Node;
use crate::rng::Rng;
use crate::sim::net::{sim_addr, HintPath, Links, Sim};
use crate::sim::world::{Region, World};
use crate::time::{Duration, Time};

/// The rise in RTT between the two sides of North America in the split
/// scenario, enough to push cross-side pairs past the 60 ms level-1 threshold.
pub const SPLIT_EXTRA_RTT_MS: u64 = 50;
/// The longitude that divides the Atlantic side from the inland side.
pub const SPLIT_LONGITUDE: f64 = -84.0;
/// How long a node that crashed stays down before it restarts.
pub const CHURN_DOWNTIME_SECS: u64 = 120;
/// The latitude that divides the two starting clusters of the merge scenario.
pub const MERGE_LATITUDE: f64 = 40.0;

/// Which experiment to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Everyone starts as a singleton.
    Formation,
    /// The eastern US starts as two level-1 clusters (north and south of 40°N).
    Merge,
    /// Latency between the two sides of North America rises at half time.
    Split,
}

impl Scenario {
    /// Its name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Formation => "formation",
            Scenario::Merge => "merge",
            Scenario::Split => "split",
        }
    }
}

/// Parameters of `coral sim clusters`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClustersParams {
    /// Nodes.
    pub nodes: usize,
    /// Simulated minutes after the last node joined.
    pub minutes: u32,
    /// The scenario.
    pub scenario: Scenario,
    /// Whether nodes store and look up router and subnet hints (§4.4).
    pub hints: bool,
    /// Churn: the percentage of nodes that crash per hour. A crashed node
    /// comes back [`CHURN_DOWNTIME_SECS`] later with no state (a restart),
    /// and joins again through a random live node.
    pub churn_per_hour: f64,
    /// The seed.
    pub seed: u64,
}

impl Default for ClustersParams {
    fn default() -> Self {
        ClustersParams {
            nodes: 166,
            minutes: 60,
            scenario: Scenario::Formation,
            hints: true,
            churn_per_hour: 0.0,
            seed: 1,
        }
    }
}

/// One cluster at the end of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSummary {
    /// Its id.
    pub id: Id,
    /// Members.
    pub size: usize,
    /// Members per region, largest first.
    pub regions: Vec<(Region, usize)>,
}

/// What formed at one level.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelReport {
    /// The level.
    pub level: u8,
    /// Its RTT threshold.
    pub threshold_ms: u32,
    /// Non-singleton clusters, largest first.
    pub clusters: Vec<ClusterSummary>,
    /// Nodes alone in their cluster.
    pub singleton_count: usize,
    /// Singletons with some node within the threshold (a missed chance).
    pub singletons_with_near_node: usize,
    /// Nodes whose cluster meets the 80 % rule against the true RTTs to all
    /// its other members (a singleton meets it trivially).
    pub acceptable_fraction: f64,
    /// Same-cluster pairs whose RTT exceeds the threshold.
    pub pairs_over_threshold_fraction: f64,
    /// Nodes that changed cluster at this level in the second half of the run.
    pub changed_in_second_half: usize,
    /// Nodes that, in the second half, went back to a cluster they had left
    /// in the second half: oscillation (a node moving once toward where it
    /// stays is convergence, not oscillation).
    pub returned_in_second_half: usize,
}

impl LevelReport {
    /// Sizes of the non-singleton clusters, largest first.
    pub fn sizes(&self) -> Vec<usize> {
        self.clusters.iter().map(|c| c.size).collect()
    }
}

/// The state of the clusters at one minute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Minute {
    /// Non-singleton clusters at level 1 and 2.
    pub clusters: [usize; 2],
    /// Singletons at level 1 and 2.
    pub singletons: [usize; 2],
    /// Nodes that changed cluster during the minute, at level 1 and 2.
    pub changes: [usize; 2],
}

/// What the scenario was to show.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Formation: nothing beyond the levels' figures.
    Formed,
    /// Merge: the share of eastern US nodes in the one level-1 cluster
    /// most of them share (they started as two clusters).
    Merged {
        /// Nodes in the two starting clusters.
        nodes: usize,
        /// Of those, in the one cluster most of them share at the end.
        in_largest: usize,
    },
    /// Split: level-1 pairs of North American nodes on opposite sides that
    /// share a cluster, before the rise and at the end.
    Split {
        /// Cross-side same-cluster pairs just before the rise.
        cross_pairs_before: usize,
        /// Cross-side same-cluster pairs at the end.
        cross_pairs_after: usize,
        /// Level-1 clusters with members on both sides, at the end.
        spanning_clusters_after: usize,
    },
}

/// One node as Fig. 7 shows it: where it sits and its cluster at a level.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedNode {
    /// Latitude in degrees (north positive).
    pub lat: f64,
    /// Longitude in degrees (east positive).
    pub lon: f64,
    /// Its site and index, such as `MIT (node 3)`.
    pub label: String,
    /// Its cluster: the index in the level's non-singleton clusters,
    /// largest first ([`LevelReport::clusters`]); `u32::MAX` for a
    /// singleton or a node that is down (left off the map, as in the paper).
    pub group: u32,
}

/// What the experiment measured.
#[derive(Clone, Debug, PartialEq)]
pub struct ClustersReport {
    /// The parameters.
    pub params: ClustersParams,
    /// Levels 1 and 2.
    pub levels: Vec<LevelReport>,
    /// The clusters per minute.
    pub timeline: Vec<Minute>,
    /// The scenario's result.
    pub outcome: Outcome,
    /// Cluster changes by all nodes: merges (validated preferred clusters),
    /// splits started, singletons formed.
    pub merges: u64,
    /// Splits started.
    pub splits: u64,
    /// Singletons formed after failed splits.
    pub singletons_formed: u64,
    /// Datagrams sent by all nodes.
    pub datagrams: u64,
    /// Churn: restarts, and for those that found company again, the
    /// minutes from restart until they shared a level-1 cluster with a live
    /// node (sorted).
    pub restarts: u64,
    /// See `restarts`.
    pub rejoin_minutes: Vec<u32>,
    /// Where each node is and its cluster at each level (for the map).
    pub map: Vec<[PlacedNode; 2]>,
}

impl ClustersReport {
    /// Checks what a healthy run must show; returns what failed. Every
    /// scenario: its own outcome. Formation also: at least 95 % of nodes in
    /// acceptable clusters at each level, and at most 1 % oscillating in
    /// the second half. The split scenario: 95 % acceptable at the end (its
    /// second half is the disruption itself, so moves then are expected).
    pub fn invariant_failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        let n = self.params.nodes;
        let scenario = self.params.scenario;
        for l in &self.levels {
            if scenario != Scenario::Merge && l.acceptable_fraction < 0.95 {
                failed.push(format!(
                    "level {}: only {:.1} % of nodes are in acceptable clusters (want ≥ 95 %)",
                    l.level,
                    l.acceptable_fraction * 100.0
                ));
            }
            let churn = self.params.churn_per_hour > 0.0;
            if scenario == Scenario::Formation && !churn && l.returned_in_second_half * 100 > n {
                failed.push(format!(
                    "level {}: {} nodes went back to a cluster they had left in the second half (oscillation; want at most 1 %)",
                    l.level, l.returned_in_second_half
                ));
            }
        }
        match self.outcome {
            Outcome::Formed => {}
            Outcome::Merged { nodes, in_largest } => {
                if in_largest * 100 < nodes * 85 {
                    failed.push(format!(
                        "merge: only {in_largest} of {nodes} eastern US nodes share one level-1 cluster (want ≥ 85 %)"
                    ));
                }
            }
            Outcome::Split {
                cross_pairs_before,
                cross_pairs_after,
                ..
            } => {
                if cross_pairs_before == 0 {
                    failed.push(
                        "split: no level-1 cluster spanned both sides before the rise".into(),
                    );
                }
                if cross_pairs_after * 20 > cross_pairs_before {
                    failed.push(format!(
                        "split: {cross_pairs_after} cross-side pairs still share a level-1 cluster (of {cross_pairs_before} before the rise; want ≤ 5 %)"
                    ));
                }
            }
        }
        failed
    }
}

/// The world's links, plus the split scenario's rise in latency between the
/// two sides of North America once `extra` is set.
pub struct SplitLinks {
    /// The world model.
    pub world: World,
    /// Side of each node: 0 elsewhere, 1 Atlantic, 2 inland North America.
    pub side: Vec<u8>,
    /// Added to the RTT between nodes on opposite sides.
    pub extra: Duration,
}

impl SplitLinks {
    /// The RTT between `a` and `b`, including any rise.
    pub fn rtt(&self, a: usize, b: usize) -> Duration {
        let base = self.world.rtt(a, b);
        let (sa, sb) = (self.side[a], self.side[b]);
        if sa != 0 && sb != 0 && sa != sb {
            base + self.extra
        } else {
            base
        }
    }
}

impl Links for SplitLinks {
    fn one_way(&self, a: usize, b: usize) -> Duration {
        Duration::from_micros(self.rtt(a, b).as_micros() / 2)
    }

    fn hint_path(&self, node: usize) -> Option<HintPath> {
        self.world.hint_path(node)
    }
}

/// Joins every node of `sim` in index order, 50 ms apart, each through a
/// random node that joined before it, as nodes joining an established
/// network do; with `hints`, each first learns its router and subnet hints
/// from the links (§4.4).
pub fn join_network<L: Links>(sim: &mut Sim<L>, rng: &mut Rng, hints: bool) {
    for i in 0..sim.len() {
        if hints {
            if let Some((routers, subnets)) = sim.links().hint_path(i) {
                let keys = hint_keys(&routers, &subnets);
                sim.with_node(i, |node, now| node.set_hints(now, &keys));
            }
        }
        if i > 0 {
            let via = rng.below(i as u64) as usize;
            sim.with_node(i, |node, now| node.bootstrap(now, &[sim_addr(via)]));
        }
        sim.run_for(Duration::from_millis(50));
    }
}

/// Runs the experiment.
pub fn run(params: &ClustersParams) -> ClustersReport {
    run_with_progress(params, |_| {})
}

/// Runs the experiment, calling `progress` with each simulated minute.
pub fn run_with_progress(params: &ClustersParams, mut progress: impl FnMut(u32)) -> ClustersReport {
    let n = params.nodes.max(2);
    let mut rng = Rng::new(params.seed);
    let world = World::planetlab(n, &mut rng);
    let side: Vec<u8> = (0..n)
        .map(|i| {
            let r = world.region_of(i);
            if !matches!(r, Region::UsEast | Region::UsCentral | Region::UsWest) {
                0
            } else if world.nodes[i].lon > SPLIT_LONGITUDE {
                1
            } else {
                2
            }
        })
        .collect();
    let config = Config::default();
    let levels = config.levels();
    let mut sim = Sim::new(
        SplitLinks {
            world,
            side,
            extra: Duration::ZERO,
        },
        params.seed,
    );
    // Merge: the eastern US starts as two level-1 clusters, north and south.
    let mut starting = [Id::ZERO; 2];
    rng.fill(&mut starting[0].0);
    rng.fill(&mut starting[1].0);
    for i in 0..n {
        let mut node = Node::new(
            config.clone(),
            sim_addr(i),
            sim.now(),
            params.seed.wrapping_add(i as u64 * 7919),
        )
        .expect("valid config");
        let world = &sim.links().world;
        if params.scenario == Scenario::Merge && world.region_of(i) == Region::UsEast {
            let half = usize::from(world.nodes[i].lat < MERGE_LATITUDE);
            node.set_cluster(1, starting[half], Time::ZERO);
        }
        sim.add(node);
    }
    join_network(&mut sim, &mut rng, params.hints);
    let start = sim.now();
    let mut last: Vec<[Id; 2]> = (0..n).map(|i| clusters_of(sim.node(i))).collect();
    let mut changed_at: Vec<[Option<u32>; 2]> = vec![[None; 2]; n];
    // The clusters each node held in the second half, in order.
    let mut visits: Vec<[Vec<Id>; 2]> = vec![[Vec::new(), Vec::new()]; n];
    let half = params.minutes / 2;
    let mut timeline = Vec::new();
    let mut cross_pairs_before = 0;
    let split_minute = params.minutes / 2;
    // Churn: when each down node comes back, and when each restarted node
    // came back (until it finds company).
    let mut down_until: Vec<Option<u32>> = vec![None; n];
    let mut restarted_at: Vec<Option<u32>> = vec![None; n];
    let mut restarts = 0u64;
    let mut rejoin_minutes = Vec::new();
    let crash_chance = (params.churn_per_hour / 100.0 / 60.0).clamp(0.0, 1.0);
    let downtime = CHURN_DOWNTIME_SECS.div_ceil(60).max(1) as u32;
    for minute in 1..=params.minutes {
        if params.scenario == Scenario::Split && minute == split_minute + 1 {
            cross_pairs_before = cross_side_pairs(&sim, n).0;
            sim.links_mut().extra = Duration::from_millis(SPLIT_EXTRA_RTT_MS);
        }
        sim.run_until(start + Duration::from_secs(60 * u64::from(minute)));
        sim.take_events();
        if crash_chance > 0.0 {
            for i in 0..n {
                if down_until[i] == Some(minute) {
                    down_until[i] = None;
                    restarts += 1;
                    restarted_at[i] = Some(minute);
                    let node = Node::new(
                        config.clone(),
                        sim_addr(i),
                        sim.now(),
                        params.seed ^ (u64::from(minute) << 32 | i as u64),
                    )
                    .expect("valid config");
                    sim.restart(i, node);
                    let live: Vec<usize> = (0..n).filter(|&j| j != i && sim.is_alive(j)).collect();
                    if params.hints {
                        if let Some((routers, subnets)) = sim.links().hint_path(i) {
                            let keys = hint_keys(&routers, &subnets);
                            sim.with_node(i, |node, now| node.set_hints(now, &keys));
                        }
                    }
                    if !live.is_empty() {
                        let via = live[rng.below(live.len() as u64) as usize];
                        sim.with_node(i, |node, now| node.bootstrap(now, &[sim_addr(via)]));
                    }
                    visits[i] = [Vec::new(), Vec::new()];
                } else if sim.is_alive(i) && rng.chance(crash_chance) {
                    sim.crash(i);
                    down_until[i] = Some(minute + downtime);
                    restarted_at[i] = None;
                }
            }
        }
        let mut m = Minute::default();
        if minute == half + 1 {
            for (v, c) in visits.iter_mut().zip(&last) {
                *v = [vec![c[0]], vec![c[1]]];
            }
        }
        for (i, last) in last.iter_mut().enumerate() {
            let now = clusters_of(sim.node(i));
            for l in 0..2 {
                if now[l] != last[l] {
                    m.changes[l] += 1;
                    changed_at[i][l] = Some(minute);
                    if minute > half {
                        visits[i][l].push(now[l]);
                    }
                }
            }
            *last = now;
        }
        let alive: Vec<bool> = (0..n).map(|i| sim.is_alive(i)).collect();
        for l in 0..2 {
            let sizes = sizes_at(&last, &alive, l);
            m.clusters[l] = sizes.values().filter(|&&s| s > 1).count();
            m.singletons[l] = sizes.values().filter(|&&s| s == 1).count();
        }
        let sizes = sizes_at(&last, &alive, 0);
        for i in 0..n {
            if let Some(at) = restarted_at[i] {
                if alive[i] && sizes.get(&last[i][0]).is_some_and(|&s| s > 1) {
                    rejoin_minutes.push(minute - at);
                    restarted_at[i] = None;
                }
            }
        }
        timeline.push(m);
        progress(minute);
    }
    let thresholds = &config.level_thresholds_ms;
    let level_reports: Vec<LevelReport> = (1..levels.min(3))
        .map(|level| {
            let mut r = level_report(&sim, &last, &changed_at, level, thresholds[level], half);
            r.returned_in_second_half = visits
                .iter()
                .filter(|v| {
                    let v = &v[level - 1];
                    (0..v.len()).any(|a| v[a + 1..].contains(&v[a]))
                })
                .count();
            r
        })
        .collect();
    let outcome = match params.scenario {
        Scenario::Formation => Outcome::Formed,
        Scenario::Merge => {
            let members: Vec<usize> = (0..n)
                .filter(|&i| sim.is_alive(i) && sim.links().world.region_of(i) == Region::UsEast)
                .collect();
            let mut counts: HashMap<Id, usize> = HashMap::new();
            for &i in &members {
                *counts.entry(last[i][0]).or_default() += 1;
            }
            Outcome::Merged {
                nodes: members.len(),
                in_largest: counts.values().copied().max().unwrap_or(0),
            }
        }
        Scenario::Split => {
            let (cross_pairs_after, spanning_clusters_after) = cross_side_pairs(&sim, n);
            Outcome::Split {
                cross_pairs_before,
                cross_pairs_after,
                spanning_clusters_after,
            }
        }
    };
    rejoin_minutes.sort_unstable();
    let mut stats = [0u64; 3];
    for node in sim.nodes() {
        for level in 1..levels as u8 {
            let s = node.cluster_stats(level);
            stats[0] += s.merges;
            stats[1] += s.splits;
            stats[2] += s.singletons;
        }
    }
    let map = map_points(&sim, &last, &level_reports);
    ClustersReport {
        params: params.clone(),
        levels: level_reports,
        timeline,
        outcome,
        merges: stats[0],
        splits: stats[1],
        singletons_formed: stats[2],
        datagrams: sim.stats().datagrams,
        restarts,
        rejoin_minutes,
        map,
    }
}

fn clusters_of(node: &Node) -> [Id; 2] {
    let id = |l: u8| node.cluster(l).map_or(Id::ZERO, |c| c.id);
    [id(1), id(2)]
}

/// Live nodes per cluster at non-global level `l + 1`.
fn sizes_at(clusters: &[[Id; 2]], alive: &[bool], l: usize) -> HashMap<Id, usize> {
    let mut sizes: HashMap<Id, usize> = HashMap::new();
    for (c, _) in clusters.iter().zip(alive).filter(|(_, a)| **a) {
        *sizes.entry(c[l]).or_default() += 1;
    }
    sizes
}

/// Level-1 pairs of North American nodes on opposite sides in one cluster,
/// and the level-1 clusters with members on both sides.
fn cross_side_pairs(sim: &Sim<SplitLinks>, n: usize) -> (usize, usize) {
    let side = &sim.links().side;
    let mut per_cluster: HashMap<Id, [usize; 2]> = HashMap::new();
    for (i, &s) in side.iter().enumerate().take(n) {
        if s != 0 && sim.is_alive(i) {
            let c = sim.node(i).cluster(1).map_or(Id::ZERO, |c| c.id);
            per_cluster.entry(c).or_default()[s as usize - 1] += 1;
        }
    }
    let pairs = per_cluster.values().map(|s| s[0] * s[1]).sum();
    let spanning = per_cluster
        .values()
        .filter(|s| s[0] > 0 && s[1] > 0)
        .count();
    (pairs, spanning)
}

fn level_report(
    sim: &Sim<SplitLinks>,
    clusters: &[[Id; 2]],
    changed_at: &[[Option<u32>; 2]],
    level: usize,
    threshold_ms: u32,
    half: u32,
) -> LevelReport {
    let l = level - 1;
    let n = clusters.len();
    let threshold = Duration::from_millis(u64::from(threshold_ms));
    let links = sim.links();
    // Nodes down at the end (churn) are in no cluster.
    let live: Vec<usize> = (0..n).filter(|&i| sim.is_alive(i)).collect();
    let mut members: HashMap<Id, Vec<usize>> = HashMap::new();
    for &i in &live {
        members.entry(clusters[i][l]).or_default().push(i);
    }
    let (mut acceptable, mut pairs, mut over) = (0usize, 0usize, 0usize);
    let (mut singletons, mut lonely_but_near) = (0usize, 0usize);
    for &i in &live {
        let c = &clusters[i];
        let group = &members[&c[l]];
        if group.len() == 1 {
            singletons += 1;
            acceptable += 1;
            if live.iter().any(|&j| j != i && links.rtt(i, j) <= threshold) {
                lonely_but_near += 1;
            }
            continue;
        }
        let within = group
            .iter()
            .filter(|&&j| j != i && links.rtt(i, j) <= threshold)
            .count();
        let others = group.len() - 1;
        if within * 100 >= 80 * others {
            acceptable += 1;
        }
        for &j in group.iter().filter(|&&j| j > i) {
            pairs += 1;
            over += usize::from(links.rtt(i, j) > threshold);
        }
    }
    let mut summaries: Vec<ClusterSummary> = members
        .iter()
        .filter(|(_, m)| m.len() > 1)
        .map(|(id, m)| {
            let mut regions: Vec<(Region, usize)> = Region::ALL
                .iter()
                .map(|r| {
                    (
                        *r,
                        m.iter()
                            .filter(|&&i| links.world.region_of(i) == *r)
                            .count(),
                    )
                })
                .filter(|(_, c)| *c > 0)
                .collect();
            regions.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            ClusterSummary {
                id: *id,
                size: m.len(),
                regions,
            }
        })
        .collect();
    summaries.sort_by(|a, b| b.size.cmp(&a.size).then(a.id.cmp(&b.id)));
    LevelReport {
        level: level as u8,
        threshold_ms,
        clusters: summaries,
        singleton_count: singletons,
        singletons_with_near_node: lonely_but_near,
        acceptable_fraction: acceptable as f64 / live.len().max(1) as f64,
        pairs_over_threshold_fraction: if pairs == 0 {
            0.0
        } else {
            over as f64 / pairs as f64
        },
        changed_in_second_half: changed_at
            .iter()
            .filter(|c| c[l].is_some_and(|m| m > half))
            .count(),
        returned_in_second_half: 0,
    }
}

/// Each node on the map with its cluster at levels 1 and 2: clusters are
/// numbered by size (A the largest); singletons get no letter of their own
/// (`u32::MAX`), as the paper leaves them off its maps.
fn map_points(
    sim: &Sim<SplitLinks>,
    clusters: &[[Id; 2]],
    levels: &[LevelReport],
) -> Vec<[PlacedNode; 2]> {
    let world = &sim.links().world;
    clusters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let place = &world.nodes[i];
            let point = |l: usize| {
                let group = levels
                    .get(l)
                    .filter(|_| sim.is_alive(i))
                    .and_then(|r| r.clusters.iter().position(|s| s.id == c[l]))
                    .map_or(u32::MAX, |g| g as u32);
                PlacedNode {
                    lat: place.lat,
                    lon: place.lon,
                    label: format!("{} (node {i})", world.site_name(i)),
                    group,
                }
            };
            [point(0), point(1)]
        })
        .collect()
}
