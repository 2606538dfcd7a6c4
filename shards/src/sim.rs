//! `coral sim <experiment>`: the paper's experiments in the simulator.

use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use coral::sim::clusters::{self, ClustersParams, ClustersReport, Outcome, Scenario};
use coral::sim::hotspot::{self, Bootstrap, HotspotParams, HotspotReport};
use coral::sim::origin::{self, OriginParams};
use coral::sim::world::World;
use serde_json::json;

/// How nodes join in a simulated experiment.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootstrapMode {
    /// Each node joins through a random node already in the network.
    Random,
    /// Every node joins through node 0, as in the paper's runs.
    WellKnown,
}

impl BootstrapMode {
    /// The name as the flag writes it.
    pub fn name(self) -> &'static str {
        match self {
            BootstrapMode::Random => "random",
            BootstrapMode::WellKnown => "well-known",
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Experiment {
    /// §6.4, Fig. 8: every node puts and gets one key; put RPCs per minute
    /// received by each node, against the bound β·(2^b−1)·⌈log2(n)/b⌉ and
    /// a plain DHT baseline.
    Hotspot(HotspotArgs),
    /// §6.1, Fig. 4: a flash crowd on 12 files behind a 384 kbit/s origin;
    /// requests per minute served by the origin, each level, and local caches.
    OriginLoad(OriginArgs),
    /// §6.2, Fig. 6: latency of the gets proxies make, single level (level 0
    /// only) against the three-level hierarchy, under the flash-crowd load.
    Latency(LatencyArgs),
    /// §4.4, §6.3, Fig. 7: clusters the nodes form themselves — sizes per
    /// level, the 80 % rule, the regions of the largest clusters, stability;
    /// and the merge and split scenarios.
    Clusters(ClustersArgs),
}

/// A clustering scenario.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ScenarioArg {
    /// Every node starts alone.
    Formation,
    /// The eastern US starts as two level-1 clusters (north and south of
    /// 40°N, all within 60 ms of each other) and must merge.
    Merge,
    /// At half time the RTT between the Atlantic and the inland sides of
    /// North America rises by 50 ms; level-1 clusters must split.
    Split,
}

#[derive(Args, Debug)]
pub struct ClustersArgs {
    /// Nodes.
    #[arg(long, default_value_t = 166)]
    nodes: usize,
    /// Simulated minutes after the last node joined.
    #[arg(long, default_value_t = 60)]
    minutes: u32,
    /// The scenario.
    #[arg(long, value_enum, default_value_t = ScenarioArg::Formation)]
    scenario: ScenarioArg,
    /// Do not store or look up router and subnet hints.
    #[arg(long)]
    no_hints: bool,
    /// Churn: percentage of nodes that crash per hour; each restarts two
    /// minutes later with no state and joins again.
    #[arg(long, default_value_t = 0.0)]
    churn_per_hour: f64,
    /// The seed: same seed, same output.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print machine-readable JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write SVG maps like the paper's Fig. 7: level 1 on a world map to
    /// FILE, level 2 on a US map to FILE with "-level2" before the extension.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// Exit with status 3 when the run misses a health check (95 % of nodes
    /// in acceptable clusters, no oscillation, the scenario's outcome).
    /// Without it the checks are reported and the run exits 0: a clustering
    /// run is a measurement, and some seeds are still converging at minute 60.
    #[arg(long)]
    check: bool,
}

#[derive(Args, Debug)]
pub struct OriginArgs {
    /// Nodes (each a DSHT node, a proxy and a client).
    #[arg(long, default_value_t = 166)]
    nodes: usize,
    /// Distinct files (three per page).
    #[arg(long, default_value_t = 12)]
    objects: usize,
    /// Minutes of client load.
    #[arg(long, default_value_t = 30)]
    minutes: u32,
    /// Cluster levels: 1 (global only) or 3 (the paper's hierarchy).
    #[arg(long, default_value_t = 3)]
    levels: usize,
    /// Minutes the nodes form their clusters before the clients start.
    #[arg(long, default_value_t = 30)]
    formation_minutes: u32,
    /// Skip the test-and-set claim before origin fetches (the paper's behaviour).
    #[arg(long)]
    no_claim: bool,
    /// The seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Nodes that crash during the crowd (issue 24), at random times in the
    /// first --failure-window-secs of client load.
    #[arg(long, default_value_t = 0)]
    failures: usize,
    /// The span over which the failures fall, from the clients' start.
    #[arg(long, default_value_t = 300)]
    failure_window_secs: u64,
    /// Print machine-readable JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot like the paper's figure to FILE.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct HotspotArgs {
    /// Number of nodes (n).
    #[arg(long, default_value_t = 494)]
    nodes: usize,
    /// Bits corrected per lookup hop (b).
    #[arg(long, default_value_t = 1)]
    b: u32,
    /// Leakage rate β, requests per minute.
    #[arg(long, default_value_t = 12)]
    beta: u32,
    /// Values per key that make a node full (l).
    #[arg(long, default_value_t = 4)]
    values_per_key: usize,
    /// Simulated minutes of load.
    #[arg(long, default_value_t = 3)]
    minutes: u32,
    /// Put/get pairs per node per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// The seed: same seed, same output.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run every seed from A to B (inclusive, one after another) and print
    /// the distribution over them: min / median / max and the seeds over
    /// the bound, for the closest and the busiest node, steady state and
    /// first minute. Overrides --seed.
    #[arg(long, value_name = "A..B")]
    seeds: Option<String>,
    /// Start a put/get pair at every tick even while the last one is under
    /// way (the paper's nodes were non-concurrent: the default waits).
    #[arg(long)]
    concurrent: bool,
    /// Threads that run the simulated nodes, one lane of nodes each, in
    /// windows of the world's least one-way delay: the same report on any
    /// number (issue 27).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// How nodes join.
    #[arg(long, value_enum, default_value_t = BootstrapMode::Random)]
    bootstrap: BootstrapMode,
    /// Skip the plain-DHT baseline (it is the slow part: every put walks to the closest node).
    #[arg(long)]
    no_baseline: bool,
    /// Print machine-readable JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot like the paper's figure to FILE.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// Nodes (each a DSHT node, a proxy and a client).
    #[arg(long, default_value_t = 166)]
    nodes: usize,
    /// Minutes of client load.
    #[arg(long, default_value_t = 10)]
    minutes: u32,
    /// Minutes the nodes form their clusters before the clients start.
    #[arg(long, default_value_t = 30)]
    formation_minutes: u32,
    /// The seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print machine-readable JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot like the paper's Fig. 6 to FILE.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

pub fn run(experiment: Experiment) -> ExitCode {
    keep_freed_memory();
    fewer_heap_walks();
    // `--threads N`: each lane of nodes on a thread of its own.
    coral::sim::net::set_lane_runner(&crate::sim_threads::THREADS);
    match experiment {
        Experiment::Hotspot(args) => hotspot(args),
        Experiment::OriginLoad(args) => origin_load(args),
        Experiment::Latency(args) => latency(args),
        Experiment::Clusters(args) => clusters(args),
    }
}

/// mimalloc's `purge_delay` option (its place in `mi_option_t`, the same in
/// mimalloc 2 and 3): milliseconds before freed memory goes back to the
/// kernel; -1 never.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

// The allocator's library is linked in every build, tests included (whose
// global allocator is a counting one), so that `mi_option_set` resolves.
use mimalloc as _;

/// mimalloc 3's `generic_collect` option (its place in `mi_option_t`: 36 in
/// mimalloc 2): the allocations that miss a page's free list between two
/// collections of the whole heap. Its default.
const MI_OPTION_GENERIC_COLLECT: std::ffi::c_int = 34;
const GENERIC_COLLECT_DEFAULT: std::ffi::c_long = 10_000;

extern "C" {
    /// mimalloc's option setter and getter (linked with the allocator; the
    /// `mimalloc` crate exports them only under its `extended` feature).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
}

/// A simulation keeps the memory it freed instead of handing it back to the
/// kernel a second later (mimalloc's default purge): the simulator frees
/// and reallocates a node's state all the time, and each page given back
/// came back as a page fault and a zeroed page. About 13–17 % less user CPU at
/// 20,000 nodes (benches/README.md, "The simulator's CPU"), peak RSS within
/// 3 %, the same results. A server's allocator keeps mimalloc's default.
fn keep_freed_memory() {
    // SAFETY: `mi_option_set` takes two integers and touches only the
    // allocator's option table; purge_delay is read at each purge, so
    // setting it after the allocator started is allowed.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

/// A simulation collects mimalloc's whole heap a hundred times less often
/// (every million allocations that miss a page's free list, mimalloc's
/// most, not every 10,000). A collection visits every page of the heap;
/// at a million simulated nodes (a heap of up to 19 GB) that was 15 % of the
/// run's CPU (`perf`, session 12, benches/README.md "Session 12"). The
/// simulator is one thread that frees its own blocks, which mimalloc takes
/// back as they are freed: the walk finds little to collect. Set only if
/// the option at this place reads its default (mimalloc 3), so that a
/// mimalloc whose options are numbered otherwise is left alone.
fn fewer_heap_walks() {
    // SAFETY: both take and return integers and touch only the allocator's
    // option table; generic_collect is read at each collection's check,
    // so setting it after the allocator started is allowed.
    unsafe {
        if mi_option_get(MI_OPTION_GENERIC_COLLECT) == GENERIC_COLLECT_DEFAULT {
            mi_option_set(MI_OPTION_GENERIC_COLLECT, 1_000_000);
        }
    }
}

/// Reports failed invariants with the seed that reproduces them.
fn check_invariants(failures: &[String], seed: u64) -> ExitCode {
    if failures.is_empty() {
        return ExitCode::SUCCESS;
    }
    for f in failures {
        eprintln!("invariant failed: {f}");
    }
    eprintln!("reproduce with --seed {seed}");
    ExitCode::from(3)
}

fn write_plot(path: &std::path::Path, svg_text: &str) -> bool {
    match std::fs::write(path, svg_text) {
        Ok(()) => {
            eprintln!("plot written to {}", path.display());
            true
        }
        Err(e) => {
            eprintln!("cannot write the plot to {}: {e}", path.display());
            false
        }
    }
}

fn clusters(a: ClustersArgs) -> ExitCode {
    if a.nodes < 2 || a.minutes < 2 || !(0.0..=6000.0).contains(&a.churn_per_hour) {
        eprintln!(
            "coral sim clusters: need --nodes ≥ 2, --minutes ≥ 2 and 0 ≤ --churn-per-hour ≤ 6000"
        );
        return ExitCode::from(2);
    }
    let scenario = match a.scenario {
        ScenarioArg::Formation => Scenario::Formation,
        ScenarioArg::Merge => Scenario::Merge,
        ScenarioArg::Split => Scenario::Split,
    };
    let params = ClustersParams {
        nodes: a.nodes,
        minutes: a.minutes,
        scenario,
        hints: !a.no_hints,
        churn_per_hour: a.churn_per_hour,
        seed: a.seed,
    };
    let c = coral::Config::default();
    let header = format!(
        "coral sim clusters: seed {} nodes {} minutes {} scenario {} hints {} churn {} %/h \
         thresholds {} ms re-evaluation every {} s, join at {} %, leave at {} % missed, \
         δ 0/{} hourly, size margin ×{:.2}, links: PlanetLab-like world model (great-circle RTTs)",
        a.seed,
        a.nodes,
        a.minutes,
        scenario.name(),
        !a.no_hints,
        a.churn_per_hour,
        c.level_thresholds_ms[1..]
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join("/"),
        c.cluster_eval_secs,
        c.cluster_join_percent,
        c.cluster_leave_percent,
        c.cluster_delta_log2,
        2f64.powf(f64::from(c.cluster_size_margin_log2_centi) / 100.0),
    );
    if a.json {
        eprintln!("{header}");
    } else {
        println!("{header}");
    }
    let started = std::time::Instant::now();
    let mut last_report = std::time::Instant::now();
    let r = clusters::run_with_progress(&params, |minute| {
        if last_report.elapsed().as_secs() >= 5 {
            last_report = std::time::Instant::now();
            eprintln!("  … minute {minute} of {}", params.minutes);
        }
    });
    let wall = started.elapsed().as_secs_f64();
    let failures = r.invariant_failures();
    if let Some(path) = &a.plot {
        let level_points = |l: usize| -> Vec<coral_plot::MapPoint> {
            r.map
                .iter()
                .map(|p| &p[l])
                .filter(|p| p.group != u32::MAX)
                .map(|p| coral_plot::MapPoint {
                    lat: p.lat,
                    lon: p.lon,
                    label: p.label.clone(),
                    group: p.group,
                })
                .collect()
        };
        let world = coral_plot::world_map(
            "Level-1 clusters (60 ms) the nodes formed (cf. NSDI 2004 Fig. 7)",
            &level_points(0),
        );
        let us = coral_plot::us_map(
            "Level-2 clusters (20 ms) the nodes formed (cf. NSDI 2004 Fig. 7)",
            &level_points(1),
        );
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_else(|| "svg".into());
        let second = path.with_file_name(format!("{stem}-level2.{ext}"));
        if !write_plot(path, &world) || !write_plot(&second, &us) {
            return ExitCode::from(1);
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&clusters_json(&r, wall)).expect("json")
        );
        return clusters_checks(&failures, a.seed, a.check);
    }
    print_clusters(&r, wall);
    clusters_checks(&failures, a.seed, a.check)
}

/// The clustering checks: failing with `--check`, reported otherwise.
fn clusters_checks(failures: &[String], seed: u64, check: bool) -> ExitCode {
    if check || failures.is_empty() {
        return check_invariants(failures, seed);
    }
    for f in failures {
        eprintln!("check not met: {f}");
    }
    eprintln!("(reported only; --check makes a missed check exit 3; a longer run, --minutes 120, lets the clusters settle)");
    ExitCode::SUCCESS
}

fn clusters_json(r: &ClustersReport, wall: f64) -> serde_json::Value {
    let levels: Vec<_> = r
        .levels
        .iter()
        .map(|l| {
            json!({
                "level": l.level,
                "threshold_ms": l.threshold_ms,
                "cluster_sizes": l.sizes(),
                "clusters": l.clusters.iter().take(8).map(|c| json!({
                    "id": c.id.to_string(),
                    "size": c.size,
                    "regions": c.regions.iter().map(|(g, k)| json!({"region": g.name(), "nodes": k})).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "acceptable_fraction": l.acceptable_fraction,
                "singleton_count": l.singleton_count,
                "singletons_with_near_node": l.singletons_with_near_node,
                "pairs_over_threshold_fraction": l.pairs_over_threshold_fraction,
                "changed_in_second_half": l.changed_in_second_half,
                "returned_in_second_half": l.returned_in_second_half,
            })
        })
        .collect();
    let outcome = match &r.outcome {
        Outcome::Formed => json!({"scenario": "formation"}),
        Outcome::Merged { nodes, in_largest } => {
            json!({"scenario": "merge", "nodes": nodes, "in_largest_cluster": in_largest})
        }
        Outcome::Split {
            cross_pairs_before,
            cross_pairs_after,
            spanning_clusters_after,
        } => json!({
            "scenario": "split",
            "cross_side_pairs_before": cross_pairs_before,
            "cross_side_pairs_after": cross_pairs_after,
            "spanning_clusters_after": spanning_clusters_after,
        }),
    };
    json!({
        "experiment": "clusters",
        "seed": r.params.seed,
        "nodes": r.params.nodes,
        "minutes": r.params.minutes,
        "levels": levels,
        "outcome": outcome,
        "merges": r.merges,
        "splits": r.splits,
        "singletons_formed": r.singletons_formed,
        "datagrams": r.datagrams,
        "restarts": r.restarts,
        "rejoin_minutes": r.rejoin_minutes,
        "timeline": r.timeline.iter().map(|m| json!({
            "clusters": m.clusters, "singletons": m.singletons, "changes": m.changes,
        })).collect::<Vec<_>>(),
        "wall_seconds": wall,
    })
}

fn print_clusters(r: &ClustersReport, wall: f64) {
    println!(
        "Self-organized clusters (NSDI 2004 §4.4, §6.3 Fig. 7): {} nodes, {} minutes, scenario {}",
        r.params.nodes,
        r.params.minutes,
        r.params.scenario.name()
    );
    for l in &r.levels {
        println!();
        println!(
            "  level {} ({} ms): {} clusters, {} singletons ({} of them with a node within {} ms)",
            l.level,
            l.threshold_ms,
            l.clusters.len(),
            l.singleton_count,
            l.singletons_with_near_node,
            l.threshold_ms
        );
        println!(
            "    in acceptable clusters: {:.1} %   same-cluster pairs over {} ms: {:.1} %   second half: {} nodes moved, {} went back (oscillation)",
            l.acceptable_fraction * 100.0,
            l.threshold_ms,
            l.pairs_over_threshold_fraction * 100.0,
            l.changed_in_second_half,
            l.returned_in_second_half
        );
        for (i, c) in l.clusters.iter().take(8).enumerate() {
            let regions: Vec<String> = c
                .regions
                .iter()
                .map(|(g, k)| format!("{} {k}", g.name()))
                .collect();
            println!(
                "    {:>2} {:>4} nodes: {}",
                coral_plot::group_letter(i as u32),
                c.size,
                regions.join(", ")
            );
        }
        if l.clusters.len() > 8 {
            println!(
                "    … {} more: sizes {:?}",
                l.clusters.len() - 8,
                &l.sizes()[8..]
            );
        }
    }
    if r.params.scenario == Scenario::Formation {
        println!();
        println!("  paper (Fig. 7, level 1): eastern US 70 nodes, western US 37, Europe 19; level 2: 16 US clusters, California 22, Northeast Corridor 29");
    }
    match &r.outcome {
        Outcome::Formed => {}
        Outcome::Merged { nodes, in_largest } => println!(
            "\n  merge: {in_largest} of {nodes} eastern US nodes (started as two level-1 clusters, north and south) share one cluster"
        ),
        Outcome::Split {
            cross_pairs_before,
            cross_pairs_after,
            spanning_clusters_after,
        } => println!(
            "\n  split: Atlantic–inland pairs sharing a level-1 cluster: {cross_pairs_before} before the rise, {cross_pairs_after} at the end ({spanning_clusters_after} clusters still span both sides)"
        ),
    }
    if r.restarts > 0 {
        let median = r.rejoin_minutes.get(r.rejoin_minutes.len() / 2);
        println!(
            "\n  churn: {} restarts; {} back in a shared level-1 cluster, median after {} minutes",
            r.restarts,
            r.rejoin_minutes.len(),
            median.map_or("-".to_string(), |m| m.to_string())
        );
    }
    println!();
    println!(
        "  cluster changes: {} merges, {} splits, {} singletons formed; {} datagrams; simulated in {wall:.1} s",
        r.merges, r.splits, r.singletons_formed, r.datagrams
    );
    println!();
    println!("  minute  clusters L1/L2  singletons L1/L2  changes L1/L2");
    for (i, m) in r.timeline.iter().enumerate() {
        let minute = i + 1;
        if minute <= 10 || minute % 5 == 0 || minute == r.timeline.len() {
            println!(
                "  {:>6}  {:>6}/{:<6}  {:>8}/{:<8}  {:>5}/{:<5}",
                minute,
                m.clusters[0],
                m.clusters[1],
                m.singletons[0],
                m.singletons[1],
                m.changes[0],
                m.changes[1]
            );
        }
    }
}

fn latency(a: LatencyArgs) -> ExitCode {
    if a.nodes < 2 || a.minutes == 0 {
        eprintln!("coral sim latency: need --nodes ≥ 2 and --minutes ≥ 1");
        return ExitCode::from(2);
    }
    let header = format!(
        "coral sim latency: seed {} nodes {} minutes {} links: PlanetLab-like world model (great-circle RTTs); \
         clusters formed by the nodes (60 ms / 20 ms) over {} minutes before the clients start",
        a.seed, a.nodes, a.minutes, a.formation_minutes
    );
    if a.json {
        eprintln!("{header}");
    } else {
        println!("{header}");
    }
    let mut results = Vec::new();
    for levels in [1usize, 3] {
        let params = OriginParams {
            nodes: a.nodes,
            minutes: a.minutes,
            levels,
            formation_minutes: a.formation_minutes,
            seed: a.seed,
            ..OriginParams::default()
        };
        let world = World::planetlab(a.nodes, &mut coral::rng::Rng::new(a.seed));
        let mut r = origin::run(&params, world);
        let l = &mut r.get_latencies_ms;
        let p = (
            origin::percentile(l, 50.0),
            origin::percentile(l, 80.0),
            origin::percentile(l, 99.0),
        );
        results.push((levels, p, l.clone(), r.cluster_sizes.clone()));
    }
    let (s1, m3) = (&results[0], &results[1]);
    if let Some(path) = &a.plot {
        let cdf = |name: &str, v: &[f64]| coral_plot::Series {
            label: name.to_string(),
            points: v
                .iter()
                .enumerate()
                .map(|(i, ms)| ((i + 1) as f64 / v.len() as f64, ms / 1000.0))
                .collect(),
        };
        let text = coral_plot::line_chart(
            "Latency for proxies to get keys from Coral (cf. NSDI 2004 Fig. 6)",
            "Fraction of requests",
            "Latency (s)",
            &[cdf("single-level", &s1.2), cdf("multi-level", &m3.2)],
            true,
        );
        if !write_plot(path, &text) {
            return ExitCode::from(1);
        }
    }
    let pct = |p: (f64, f64, f64)| json!({"p50_ms": p.0, "p80_ms": p.1, "p99_ms": p.2});
    if a.json {
        let out = json!({
            "experiment": "latency",
            "single_level": pct(s1.1),
            "multi_level": pct(m3.1),
            "gets": {"single_level": s1.2.len(), "multi_level": m3.2.len()},
            "multi_level_cluster_sizes": m3.3,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return ExitCode::SUCCESS;
    }
    println!("Get latency seen by proxies (NSDI 2004 §6.2, Fig. 6)");
    println!();
    println!(
        "  {:<14} {:>9} {:>9} {:>9} {:>7}",
        "", "p50 ms", "p80 ms", "p99 ms", "gets"
    );
    println!(
        "  {:<14} {:>9.1} {:>9.1} {:>9.1} {:>7}",
        "single-level",
        s1.1 .0,
        s1.1 .1,
        s1.1 .2,
        s1.2.len()
    );
    println!(
        "  {:<14} {:>9.1} {:>9.1} {:>9.1} {:>7}",
        "multi-level",
        m3.1 .0,
        m3.1 .1,
        m3.1 .2,
        m3.2.len()
    );
    println!(
        "  clusters the nodes formed (sizes, largest first): {}",
        m3.3.iter()
            .enumerate()
            .map(|(i, sizes)| format!("level {}: {:?}", i + 1, &sizes[..sizes.len().min(10)]))
            .collect::<Vec<_>>()
            .join("; ")
    );
    println!(
        "  speed-up: {:.1}× at p50, {:.1}× at p80 (paper: 2–5× up to the 80th percentile; single-level faster past the 98th)",
        s1.1 .0 / m3.1 .0.max(1e-9),
        s1.1 .1 / m3.1 .1.max(1e-9)
    );
    ExitCode::SUCCESS
}

fn origin_load(a: OriginArgs) -> ExitCode {
    if a.nodes < 2 || a.objects == 0 || a.minutes == 0 || !(1..=3).contains(&a.levels) {
        eprintln!("coral sim origin-load: need --nodes ≥ 2, --objects ≥ 1, --minutes ≥ 1, 1 ≤ --levels ≤ 3");
        return ExitCode::from(2);
    }
    let params = OriginParams {
        nodes: a.nodes,
        objects: a.objects,
        minutes: a.minutes,
        levels: a.levels,
        formation_minutes: a.formation_minutes,
        claim: !a.no_claim,
        seed: a.seed,
        failures: a.failures,
        failure_window_secs: a.failure_window_secs,
        ..OriginParams::default()
    };
    let header = format!(
        "coral sim origin-load: seed {} nodes {} objects {} of {} bytes minutes {} levels {} formation {} minutes claim {} origin {} kbit/s \
         peers {} kbit/s client rate {}/s start spread {} s failures {} in {} s links: PlanetLab-like world model (great-circle RTTs)",
        a.seed, a.nodes, a.objects, params.object_bytes, a.minutes, a.levels, a.formation_minutes, !a.no_claim,
        params.origin_kbit_per_sec, params.peer_kbit_per_sec, params.client_rate, params.client_start_spread_secs,
        a.failures, a.failure_window_secs
    );
    if a.json {
        eprintln!("{header}");
    } else {
        println!("{header}");
    }
    let links = World::planetlab(a.nodes, &mut coral::rng::Rng::new(a.seed));
    let started = std::time::Instant::now();
    let mut r = origin::run(&params, links);
    let failures = r.invariant_failures();
    let wall = started.elapsed().as_secs_f64();
    if let Some(path) = &a.plot {
        let series = |name: &str, f: fn(&origin::MinuteCounts) -> u64| coral_plot::Series {
            label: name.to_string(),
            points: r
                .per_minute
                .iter()
                .enumerate()
                .map(|(i, m)| ((i + 1) as f64, f(m) as f64))
                .collect(),
        };
        let text = coral_plot::line_chart(
            "Requests per minute by source (cf. NSDI 2004 Fig. 4)",
            "Time (minutes)",
            "Requests / minute",
            &[
                series("origin server", |m| m.origin),
                series("level 2", |m| m.level2),
                series("level 1", |m| m.level1),
                series("level 0", |m| m.level0),
            ],
            true,
        );
        if !write_plot(path, &text) {
            return ExitCode::from(1);
        }
    }
    let mut lat = r.get_latencies_ms.clone();
    let (p50, p80, p99) = (
        origin::percentile(&mut lat, 50.0),
        origin::percentile(&mut lat, 80.0),
        origin::percentile(&mut lat, 99.0),
    );
    if a.json {
        let minutes: Vec<_> = r
            .per_minute
            .iter()
            .map(|m| json!({"origin": m.origin, "level0": m.level0, "level1": m.level1, "level2": m.level2, "local": m.local, "failed": m.failed}))
            .collect();
        let out = json!({
            "experiment": "origin-load",
            "origin_fetches": r.origin_fetches,
            "origin_fetches_per_object": r.origin_fetches_per_object,
            "failed_nodes": r.failed_nodes,
            "unique_objects": r.unique_objects,
            "requests": r.requests,
            "per_minute": minutes,
            "get_latency_ms": {"p50": p50, "p80": p80, "p99": p99, "count": r.get_latencies_ms.len()},
            "cluster_sizes": r.cluster_sizes,
            "wall_seconds": wall,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return check_invariants(&failures, a.seed);
    }
    r.per_minute.truncate(a.minutes as usize);
    println!(
        "Origin load (NSDI 2004 §6.1, Fig. 4): {} nodes, {} files, {} minutes",
        a.nodes, a.objects, a.minutes
    );
    println!();
    println!(
        "  origin fetches: {} for {} files (paper: 15 for 12)",
        r.origin_fetches, r.unique_objects
    );
    println!("  requests: {}", r.requests);
    if !r.failed_nodes.is_empty() {
        println!(
            "  nodes failed during the crowd: {} {:?}; origin fetches per file {:?}",
            r.failed_nodes.len(),
            r.failed_nodes,
            r.origin_fetches_per_object
        );
    }
    println!();
    println!(
        "  {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7}",
        "minute", "origin", "level 0", "level 1", "level 2", "local", "failed"
    );
    for (i, m) in r.per_minute.iter().enumerate() {
        println!(
            "  {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7}",
            i + 1,
            m.origin,
            m.level0,
            m.level1,
            m.level2,
            m.local,
            m.failed
        );
    }
    println!();
    println!(
        "  DSHT get latency seen by proxies ({} gets): p50 {:.0} ms, p80 {:.0} ms, p99 {:.0} ms",
        r.get_latencies_ms.len(),
        p50,
        p80,
        p99
    );
    println!("  simulated in {wall:.1} s");
    check_invariants(&failures, a.seed)
}

fn hotspot(a: HotspotArgs) -> ExitCode {
    if a.nodes < 2
        || a.minutes == 0
        || !a.rate.is_finite()
        || a.rate <= 0.0
        || a.beta == 0
        || !(1..=8).contains(&a.b)
    {
        eprintln!("coral sim hotspot: need --nodes ≥ 2, --minutes ≥ 1, a finite --rate > 0, --beta ≥ 1, 1 ≤ --b ≤ 8");
        return ExitCode::from(2);
    }
    let params = HotspotParams {
        nodes: a.nodes,
        b: a.b,
        beta: a.beta,
        values_per_key: a.values_per_key,
        minutes: a.minutes,
        rate: a.rate,
        seed: a.seed,
        baseline: !a.no_baseline,
        bootstrap: match a.bootstrap {
            BootstrapMode::Random => Bootstrap::Random,
            BootstrapMode::WellKnown => Bootstrap::WellKnown,
        },
        concurrent: a.concurrent,
        threads: usize::from(a.threads),
    };
    if let Some(range) = &a.seeds {
        let Some(seeds) = parse_seed_range(range) else {
            eprintln!("coral sim hotspot: --seeds wants A..B with A ≤ B (e.g. 1..20)");
            return ExitCode::from(2);
        };
        return hotspot_seeds(&a, params, seeds);
    }
    let links = World::planetlab(a.nodes, &mut coral::rng::Rng::new(a.seed));
    let header = format!(
        "coral sim hotspot: seed {} nodes {} b {} beta {} values-per-key {} minutes {} rate {}/s{} bootstrap {} links: PlanetLab-like world model (great-circle RTTs), baseline {}",
        a.seed, a.nodes, a.b, a.beta, a.values_per_key, a.minutes, a.rate,
        if a.concurrent { " concurrent" } else { " back-to-back" },
        a.bootstrap.name(), !a.no_baseline
    );
    // Every parameter first, so any output can be reproduced.
    if a.json {
        eprintln!("{header}");
    } else {
        println!("{header}");
    }
    let started = std::time::Instant::now();
    // Long runs say how far they have come (on stderr, so --json stays clean).
    let mut last_report = std::time::Instant::now();
    let report = hotspot::run_with_progress(&params, links, &mut |p| {
        if p.minute == 0 {
            last_report = std::time::Instant::now();
            eprintln!(
                "  [{:.0} s] {}: joined, {} events",
                started.elapsed().as_secs_f64(),
                p.system,
                p.events
            );
        } else if last_report.elapsed() >= std::time::Duration::from_secs(5)
            || p.minute == p.minutes
        {
            last_report = std::time::Instant::now();
            eprintln!(
                "  [{:.0} s] {}: minute {}/{} simulated, {} events",
                started.elapsed().as_secs_f64(),
                p.system,
                p.minute,
                p.minutes,
                p.events
            );
        }
    });
    let failures = report.dsht.invariant_failures(&params);
    let wall = started.elapsed();
    if let Some(path) = &a.plot {
        let bars: Vec<(String, f64)> = report
            .dsht
            .per_minute
            .iter()
            .enumerate()
            .map(|(i, m)| {
                (
                    format!("{i}"),
                    m.iter().skip(1).sum::<u64>() as f64 / (m.len().max(2) - 1) as f64,
                )
            })
            .collect();
        let bound = report.bound_rpcs_per_min as f64;
        let text = coral_plot::bar_chart(
            "Put RPCs/minute per node, by distance to the key (cf. Fig. 8)",
            "Nodes, closest to the key first",
            "Put RPCs / minute (after minute 1)",
            &bars,
            Some((bound, "bound β·(2^b−1)·⌈log2 n / b⌉")),
        );
        if !write_plot(path, &text) {
            return ExitCode::from(1);
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&hotspot_json(&report, wall.as_secs_f64())).expect("json")
        );
    } else {
        print_hotspot(&report, wall.as_secs_f64());
    }
    check_invariants(&failures, a.seed)
}

fn busiest_json(b: &hotspot::Busiest) -> serde_json::Value {
    json!({
        "index": b.index, "rank": b.rank, "prefix_bits": b.prefix_bits,
        "put_rpcs": b.put_rpcs, "probes": b.probes, "senders": b.senders,
        "first_hop_probes": b.first_hop_probes, "first_hop_senders": b.first_hop_senders,
        "first_hop_of": b.first_hop_of,
        "senders_knowing_it": b.senders_knowing_it,
        "in_tables": b.in_tables, "in_tables_median": b.in_tables_median,
        "probes_by_target_bits": b.by_target_bits,
        "probes_by_sender_bits": b.by_sender_bits,
    })
}

fn hotspot_json(r: &HotspotReport, wall_secs: f64) -> serde_json::Value {
    let usage = own_usage();
    let run = |x: &hotspot::HotspotRun| {
        json!({
            "closest_node_first_minute": x.closest_first_minute,
            "closest_node_put_rpcs_per_min": x.closest_steady_per_min,
            "max_node_put_rpcs_per_min": x.max_steady_per_min,
            "max_node_first_minute": x.max_first_minute,
            "put_rpcs_per_min_by_distance_rank": x.per_minute,
            "puts": x.puts,
            "gets": x.gets,
            "gets_found": x.gets_found,
            "datagrams": x.datagrams,
            "events": x.events,
            "busiest_node": x.busiest.as_ref().map(busiest_json),
            "busiest_node_first_minute": x.busiest_first.as_ref().map(busiest_json),
        })
    };
    json!({
        "experiment": "hotspot",
        "params": {
            "nodes": r.params.nodes, "b": r.params.b, "beta": r.params.beta,
            "values_per_key": r.params.values_per_key, "minutes": r.params.minutes,
            "rate": r.params.rate, "seed": r.params.seed,
            "bootstrap": match r.params.bootstrap {
                Bootstrap::Random => "random",
                Bootstrap::WellKnown => "well-known",
            },
            "concurrent": r.params.concurrent,
        },
        "bound_rpcs_per_min": r.bound_rpcs_per_min,
        "closest_node_put_rpcs_per_min": r.dsht.closest_steady_per_min,
        "dht_closest_node_put_rpcs_per_min": r.dht.as_ref().map(|d| d.closest_steady_per_min),
        "dsht": run(&r.dsht),
        "dht": r.dht.as_ref().map(run),
        "wall_seconds": wall_secs,
        "events_per_second": hotspot_events(r) as f64 / wall_secs.max(1e-9),
        "threads": r.params.threads,
        "user_cpu_seconds": usage.user_cpu_seconds,
        "peak_rss_kb": usage.peak_rss_kb,
    })
}

/// What this process has spent so far, from `getrusage(RUSAGE_SELF)`: user
/// CPU over all its threads, and its peak resident set. Goal 6 of issue 27
/// is a time and a peak RSS; a run reports both of its own (as `time -v`
/// would), and `benches/sim_ab.sh` compares two builds by them.
struct Usage {
    user_cpu_seconds: f64,
    peak_rss_kb: u64,
}

fn own_usage() -> Usage {
    // SAFETY: getrusage writes one `rusage` it is given and reads nothing.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    Usage {
        user_cpu_seconds: ru.ru_utime.tv_sec as f64 + ru.ru_utime.tv_usec as f64 / 1e6,
        // Kilobytes on Linux.
        peak_rss_kb: ru.ru_maxrss.max(0) as u64,
    }
}

/// Events simulated in both runs (the DSHT and, unless left out, the DHT
/// baseline): what the wall time was spent on.
fn hotspot_events(r: &HotspotReport) -> u64 {
    r.dsht.events + r.dht.as_ref().map_or(0, |d| d.events)
}

fn print_hotspot(r: &HotspotReport, wall_secs: f64) {
    let p = &r.params;
    println!(
        "Hot spot (NSDI 2004 §6.4, Fig. 8): {} nodes put/get one key at {}/s each",
        p.nodes, p.rate
    );
    println!();
    println!("  {:<48} {:>12} {:>12}", "", "coral DSHT", "plain DHT");
    let dht = |f: fn(&hotspot::HotspotRun) -> String| r.dht.as_ref().map_or("-".to_string(), f);
    println!(
        "  {:<48} {:>12} {:>12}",
        "closest node, put RPCs in minute 1",
        r.dsht.closest_first_minute,
        dht(|d| d.closest_first_minute.to_string())
    );
    println!(
        "  {:<48} {:>12.1} {:>12}",
        "closest node, put RPCs/min after minute 1",
        r.dsht.closest_steady_per_min,
        dht(|d| format!("{:.1}", d.closest_steady_per_min))
    );
    println!(
        "  {:<48} {:>12} {:>12}",
        "busiest node, put RPCs/min after minute 1",
        r.dsht.max_steady_per_min,
        dht(|d| d.max_steady_per_min.to_string())
    );
    println!(
        "  {:<48} {:>12}",
        "bound β·(2^b−1)·⌈log2 n / b⌉", r.bound_rpcs_per_min
    );
    println!(
        "  {:<48} {:>12}",
        "paper (n = 494): closest node steady state", 83
    );
    println!();
    let last: Vec<u64> = r
        .dsht
        .per_minute
        .iter()
        .map(|m| m.last().copied().unwrap_or(0))
        .collect();
    let silent = last.iter().filter(|&&c| c == 0).count();
    println!("  last minute, put RPCs by distance rank (closest first):");
    for chunk in last.chunks(20).take(5) {
        println!(
            "    {}",
            chunk
                .iter()
                .map(|c| format!("{c:>4}"))
                .collect::<Vec<_>>()
                .join("")
        );
    }
    println!(
        "  nodes that received no put RPC in the last minute: {silent} of {}",
        last.len()
    );
    for (b, which) in [
        (&r.dsht.busiest, "the last minute"),
        (&r.dsht.busiest_first, "minute 1"),
    ] {
        let Some(b) = b else { continue };
        println!(
            "  busiest node in {which}: node {} (joined {}th), rank {} by distance, {} bits shared with the key;",
            b.index, b.index + 1, b.rank, b.prefix_bits
        );
        println!(
            "    {} put RPCs, {} of them probes from {} senders ({} of whom hold it in their routing table);",
            b.put_rpcs, b.probes, b.senders, b.senders_knowing_it
        );
        println!(
            "    {} probes were their walk's first hop, from {} senders; it is the first hop of {} nodes' tables at the start;",
            b.first_hop_probes, b.first_hop_senders, b.first_hop_of
        );
        println!(
            "    it is in {} routing tables (the median node: {})",
            b.in_tables, b.in_tables_median
        );
    }
    println!(
        "  gets that found a value: {} of {}",
        r.dsht.gets_found, r.dsht.gets
    );
    println!();
    let events = hotspot_events(r);
    let usage = own_usage();
    println!(
        "  simulated {} datagrams, {} events in {:.1} s on {} thread{} ({:.0} events/s{}); user CPU {:.1} s, peak RSS {} KB",
        r.dsht.datagrams + r.dht.as_ref().map_or(0, |d| d.datagrams),
        events,
        wall_secs,
        r.params.threads,
        if r.params.threads == 1 { "" } else { "s" },
        events as f64 / wall_secs.max(1e-9),
        if r.dht.is_some() {
            ", DSHT and DHT baseline together"
        } else {
            ""
        },
        usage.user_cpu_seconds,
        usage.peak_rss_kb
    );
}

/// `A..B` (inclusive) as the seeds A to B.
fn parse_seed_range(s: &str) -> Option<std::ops::RangeInclusive<u64>> {
    let (a, b) = s.split_once("..")?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (a <= b).then_some(a..=b)
}

/// One figure's distribution over seeds.
struct Spread {
    min: f64,
    median: f64,
    max: f64,
    /// Seeds whose figure is over the limit.
    over: Vec<u64>,
    limit: f64,
}

impl Spread {
    fn of(per_seed: &[(u64, f64)], limit: f64) -> Spread {
        let mut v: Vec<f64> = per_seed.iter().map(|&(_, x)| x).collect();
        v.sort_by(f64::total_cmp);
        let median = match v.len() {
            0 => 0.0,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Spread {
            min: v.first().copied().unwrap_or(0.0),
            median,
            max: v.last().copied().unwrap_or(0.0),
            over: per_seed
                .iter()
                .filter(|&&(_, x)| x > limit)
                .map(|&(s, _)| s)
                .collect(),
            limit,
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "min": self.min, "median": self.median, "max": self.max,
            "limit": self.limit, "seeds_over_limit": self.over,
        })
    }

    fn row(&self, what: &str) -> String {
        format!(
            "  {:<44} {:>8.1} {:>8.1} {:>8.1} {:>7}  over {} : {}",
            what,
            self.min,
            self.median,
            self.max,
            self.limit,
            self.over.len(),
            if self.over.is_empty() {
                "-".to_string()
            } else {
                self.over
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }
        )
    }
}

/// The distributions of one system (DSHT or DHT) over the seeds: closest
/// and busiest node, steady state (against the bound) and first minute
/// (against twice the bound); gets that found a value.
fn seed_spreads(
    runs: &[(u64, &hotspot::HotspotRun)],
    bound: f64,
) -> (Vec<(&'static str, Spread)>, u64, u64) {
    let f = |g: fn(&hotspot::HotspotRun) -> f64| -> Vec<(u64, f64)> {
        runs.iter().map(|&(s, r)| (s, g(r))).collect()
    };
    let spreads = vec![
        (
            "closest_steady_per_min",
            Spread::of(&f(|r| r.closest_steady_per_min), bound),
        ),
        (
            "busiest_steady_per_min",
            Spread::of(&f(|r| r.max_steady_per_min as f64), bound),
        ),
        (
            "closest_first_minute",
            Spread::of(&f(|r| r.closest_first_minute as f64), 2.0 * bound),
        ),
        (
            "busiest_first_minute",
            Spread::of(&f(|r| r.max_first_minute as f64), 2.0 * bound),
        ),
    ];
    let gets = runs.iter().map(|(_, r)| r.gets).sum();
    let found = runs.iter().map(|(_, r)| r.gets_found).sum();
    (spreads, gets, found)
}

fn hotspot_seeds(
    a: &HotspotArgs,
    params: HotspotParams,
    seeds: std::ops::RangeInclusive<u64>,
) -> ExitCode {
    let header = format!(
        "coral sim hotspot: seeds {}..{} nodes {} b {} beta {} values-per-key {} minutes {} rate {}/s{} bootstrap {} links: PlanetLab-like world model (great-circle RTTs), baseline {}",
        seeds.start(), seeds.end(), a.nodes, a.b, a.beta, a.values_per_key, a.minutes, a.rate,
        if a.concurrent { " concurrent" } else { " back-to-back" },
        a.bootstrap.name(), !a.no_baseline
    );
    if a.json {
        eprintln!("{header}");
    } else {
        println!("{header}");
    }
    let started = std::time::Instant::now();
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for seed in seeds.clone() {
        let p = HotspotParams {
            seed,
            ..params.clone()
        };
        let links = World::planetlab(p.nodes, &mut coral::rng::Rng::new(seed));
        let r = hotspot::run(&p, links);
        eprintln!(
            "  [{:.0} s] seed {seed}: closest {:.1}/min (first minute {}), busiest {}/min, bound {}",
            started.elapsed().as_secs_f64(),
            r.dsht.closest_steady_per_min,
            r.dsht.closest_first_minute,
            r.dsht.max_steady_per_min,
            r.bound_rpcs_per_min
        );
        for f in r.dsht.invariant_failures(&p) {
            failures.push(format!("seed {seed}: {f}"));
        }
        reports.push(r);
    }
    let bound = reports.first().map_or(0, |r| r.bound_rpcs_per_min);
    let dsht: Vec<(u64, &hotspot::HotspotRun)> =
        reports.iter().map(|r| (r.params.seed, &r.dsht)).collect();
    let dht: Vec<(u64, &hotspot::HotspotRun)> = reports
        .iter()
        .filter_map(|r| r.dht.as_ref().map(|d| (r.params.seed, d)))
        .collect();
    let (dsht_spreads, gets, found) = seed_spreads(&dsht, bound as f64);
    let dht_spreads = (!dht.is_empty()).then(|| seed_spreads(&dht, bound as f64));
    if let Some(path) = &a.plot {
        let bars: Vec<(String, f64)> = dsht
            .iter()
            .map(|(s, r)| (format!("{s}"), r.closest_steady_per_min))
            .collect();
        let text = coral_plot::bar_chart(
            "Closest node's put RPCs/minute, one bar per seed (cf. Fig. 8)",
            "Seed",
            "Put RPCs / minute (after minute 1)",
            &bars,
            Some((bound as f64, "bound β·(2^b−1)·⌈log2 n / b⌉")),
        );
        if !write_plot(path, &text) {
            return ExitCode::from(1);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    if a.json {
        let spreads_json = |(sp, gets, found): &(Vec<(&'static str, Spread)>, u64, u64)| {
            let mut m = serde_json::Map::new();
            for (name, s) in sp {
                m.insert((*name).to_string(), s.json());
            }
            m.insert("gets".into(), json!(gets));
            m.insert("gets_found".into(), json!(found));
            serde_json::Value::Object(m)
        };
        let per_seed: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| {
                json!({
                    "seed": r.params.seed,
                    "closest_steady_per_min": r.dsht.closest_steady_per_min,
                    "closest_first_minute": r.dsht.closest_first_minute,
                    "busiest_steady_per_min": r.dsht.max_steady_per_min,
                    "busiest_first_minute": r.dsht.max_first_minute,
                    "gets": r.dsht.gets,
                    "gets_found": r.dsht.gets_found,
                    "dht_closest_steady_per_min": r.dht.as_ref().map(|d| d.closest_steady_per_min),
                })
            })
            .collect();
        let out = json!({
            "experiment": "hotspot",
            "params": {
                "nodes": a.nodes, "b": a.b, "beta": a.beta,
                "values_per_key": a.values_per_key, "minutes": a.minutes,
                "rate": a.rate, "seeds": [seeds.start(), seeds.end()],
                "bootstrap": a.bootstrap.name(),
                "concurrent": a.concurrent,
            },
            "bound_rpcs_per_min": bound,
            "dsht": spreads_json(&(dsht_spreads, gets, found)),
            "dht": dht_spreads.as_ref().map(spreads_json),
            "per_seed": per_seed,
            "wall_seconds": wall,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
    } else {
        println!(
            "Hot spot (NSDI 2004 §6.4, Fig. 8) over {} seeds: {} nodes put/get one key at up to {}/s each",
            reports.len(),
            a.nodes,
            a.rate
        );
        println!("  bound β·(2^b−1)·⌈log2 n / b⌉ = {bound}; first minute against 2× the bound");
        let table = |name: &str, sp: &[(&'static str, Spread)], gets: u64, found: u64| {
            println!();
            println!(
                "  {:<44} {:>8} {:>8} {:>8} {:>7}  seeds over",
                name, "min", "median", "max", "limit"
            );
            for (what, s) in sp {
                println!("{}", s.row(&what.replace('_', " ")));
            }
            println!(
                "  gets that found a value: {found} of {gets} ({:.4} %)",
                100.0 * found as f64 / gets.max(1) as f64
            );
        };
        table("coral DSHT (put RPCs)", &dsht_spreads, gets, found);
        if let Some((sp, g, f)) = &dht_spreads {
            table("plain DHT baseline (put RPCs)", sp, *g, *f);
        }
        println!();
        println!("  simulated in {wall:.1} s");
    }
    if failures.is_empty() {
        return ExitCode::SUCCESS;
    }
    for f in &failures {
        eprintln!("invariant failed: {f}");
    }
    ExitCode::from(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option's place is mimalloc 3's: its default reads there, and
    /// the simulator's setting takes. (A mimalloc that numbers its options
    /// otherwise fails this test rather than have another option set.)
    #[test]
    fn generic_collect_is_mimallocs_option_and_takes() {
        // SAFETY: as in `fewer_heap_walks`.
        let before = unsafe { mi_option_get(MI_OPTION_GENERIC_COLLECT) };
        assert!(
            before == GENERIC_COLLECT_DEFAULT || before == 1_000_000,
            "option {MI_OPTION_GENERIC_COLLECT} reads {before}"
        );
        fewer_heap_walks();
        assert_eq!(
            unsafe { mi_option_get(MI_OPTION_GENERIC_COLLECT) },
            1_000_000
        );
    }
}
