//! Issue 24 item 2: exactly one origin fetch per object, always — hunted in
//! the simulator over many seeds, with requests spread across nodes joining
//! and clusters forming (§4.4), through the real fetch policy and DSHT; and
//! the DSHT rules that make it so, each on its own (§8's test-and-set).

mod common;

use coral::dsht::wire::Value;
use coral::rng::Rng;
use coral::sim::hunt::{run, HuntParams, HuntReport};
use coral::sim::net::{sim_addr, ConstantLinks, Links, Sim};
use coral::sim::world::World;
use coral::{Config, Duration, Event, Id, Node};

fn hunt(p: &HuntParams) -> HuntReport {
    run(p, World::planetlab(p.nodes, &mut Rng::new(p.seed)))
}

/// The hunt: 20 nodes up, 20 more joining one by one over ten minutes while
/// the clusters form and change, 400 requests for 20 objects through random
/// nodes over twenty minutes; seeds 1–30. Every object is fetched from the
/// origin once. (Before the fix: 29 to 44 origin fetches per run, none
/// exact.)
#[test]
fn one_origin_fetch_per_object_across_joins_and_cluster_changes_issue_24() {
    let mut switches = 0;
    for seed in 1..=30 {
        let r = hunt(&HuntParams {
            seed,
            ..HuntParams::default()
        });
        assert_eq!(r.objects_requested, 20, "seed {seed}");
        assert_eq!(
            r.invariant_failures(),
            Vec::<String>::new(),
            "reproduce with seed={seed}"
        );
        assert_eq!(r.served, r.requests, "seed {seed}: every request served");
        switches += r.cluster_switches;
    }
    // The hunt did cross cluster changes.
    assert!(switches >= 30 * 20, "{switches} cluster switches");
}

#[test]
fn same_seed_same_hunt() {
    let p = HuntParams {
        nodes: 16,
        initial_nodes: 8,
        requests: 60,
        join_spread_secs: 120,
        request_spread_secs: 180,
        seed: 7,
        ..HuntParams::default()
    };
    assert_eq!(hunt(&p), hunt(&p));
}

/// Prints each seed's count and what was known at every extra origin
/// fetch: `HUNT_FROM`, `HUNT_TO` (seeds), `HUNT_INITIAL` (nodes up before
/// the others join), `HUNT_QUIET` (counts only).
#[test]
#[ignore = "exploration: prints every seed's extra origin fetches"]
fn explore_seeds() {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let mut counts = Vec::new();
    for seed in var("HUNT_FROM").unwrap_or(1)..=var("HUNT_TO").unwrap_or(10) {
        let r = hunt(&HuntParams {
            seed,
            initial_nodes: var("HUNT_INITIAL")
                .map_or(HuntParams::default().initial_nodes, |n| n as usize),
            ..HuntParams::default()
        });
        println!(
            "seed {seed}: {} origin fetches for {} objects, {} requests, {} served, {} failed, {} switches",
            r.total_origin_fetches(),
            r.objects_requested,
            r.requests,
            r.served,
            r.failed,
            r.cluster_switches
        );
        counts.push(r.total_origin_fetches());
        if std::env::var("HUNT_QUIET").is_err() {
            for e in &r.extra {
                println!("   {e:?}");
            }
        }
    }
    counts.sort_unstable();
    if let (Some(min), Some(max)) = (counts.first(), counts.last()) {
        println!(
            "origin fetches min / median / max: {min} / {} / {max}",
            counts[counts.len() / 2]
        );
    }
}

fn config() -> Config {
    let mut c = Config::default();
    c.level_thresholds_ms.truncate(1);
    c
}

/// The claim (or pin) events of the last run, by node.
fn claims(sim: &mut Sim<impl Links>) -> Vec<(usize, bool, Vec<Value>)> {
    sim.take_events()
        .into_iter()
        .filter_map(|(n, e)| match e {
            Event::ClaimDone {
                claimed, values, ..
            } => Some((n, claimed, values)),
            _ => None,
        })
        .collect()
}

/// A node index beyond `from` whose id is closer to `key` than every id
/// of the first `from` nodes: a node that joins closer to the key.
fn closer_node(key: &Id, from: usize) -> usize {
    let best = (0..from)
        .map(|i| Id::from_ip(sim_addr(i).ip()).distance(key))
        .min()
        .expect("nodes");
    (from..from + 100_000)
        .find(|&i| Id::from_ip(sim_addr(i).ip()).distance(key) < best)
        .expect("a closer id among 100,000")
}

/// §8's test-and-set with nodes joining: once a proxy's pointer is at the
/// key's closest node, nodes that join closer to the key (they hold
/// nothing) do not make a later claim win — it asks the key's k closest
/// nodes, and the one holding the pointer answers with it.
#[test]
fn a_claim_loses_to_a_pointer_after_closer_nodes_joined_section_8() {
    let key = Id::from_url("http://joined.example/a.jpg");
    let mut sim = common::network(24, &config(), ConstantLinks(Duration::from_millis(10)), 4);
    let owner = Value::from_addr(sim_addr(3));
    sim.with_node(3, |node, now| node.claim(now, key, owner.clone(), 3600));
    sim.run_for(Duration::from_secs(10));
    assert!(matches!(claims(&mut sim)[..], [(3, true, _)]));
    // Three nodes closer to the key than any before join, one by one.
    let mut n = sim.len();
    for _ in 0..3 {
        let i = closer_node(&key, n);
        while sim.len() < i {
            // Placeholders keep indices aligned with addresses; never started.
            let filler = Node::new(config(), sim_addr(sim.len()), sim.now(), 1).unwrap();
            let f = sim.add(filler);
            sim.crash(f);
        }
        let node = Node::new(config(), sim_addr(i), sim.now(), i as u64).unwrap();
        let j = sim.add(node);
        assert_eq!(j, i);
        sim.with_node(i, |node, now| node.bootstrap(now, &[sim_addr(0)]));
        sim.run_for(Duration::from_secs(30));
        n = i + 1;
    }
    sim.take_events();
    for claimer in [5, 11, 17] {
        let v = Value::from_addr(sim_addr(claimer));
        sim.with_node(claimer, |node, now| node.claim(now, key, v, 20));
        sim.run_for(Duration::from_secs(10));
        let c = claims(&mut sim);
        assert_eq!(c.len(), 1, "{c:?}");
        let (_, claimed, values) = &c[0];
        assert!(
            !claimed,
            "node {claimer} won the claim: a second origin fetch"
        );
        assert_eq!(values, &vec![owner.clone()], "node {claimer}");
    }
}

/// A claim by the source of the value already at the closest node refreshes
/// it instead of losing to it (the test-and-set is against *other*
/// sources); a claim by anyone else still loses.
#[test]
fn a_claim_by_the_values_own_source_refreshes_it_section_8() {
    let key = Id::from_url("http://own.example/b.jpg");
    let mut sim = common::network(16, &config(), ConstantLinks(Duration::from_millis(10)), 5);
    let mine = Value::from_addr(sim_addr(2));
    for _ in 0..2 {
        sim.with_node(2, |node, now| node.claim(now, key, mine.clone(), 20));
        sim.run_for(Duration::from_secs(5));
        assert!(matches!(claims(&mut sim)[..], [(2, true, _)]));
    }
    // 10 s after the second claim, 25 s after the first: still held.
    sim.run_for(Duration::from_secs(10));
    let theirs = Value::from_addr(sim_addr(9));
    sim.with_node(9, |node, now| node.claim(now, key, theirs, 20));
    sim.run_for(Duration::from_secs(5));
    let c = claims(&mut sim);
    assert!(
        matches!(&c[..], [(9, false, v)] if v == &vec![mine.clone()]),
        "{c:?}"
    );
}

/// A pin stores at the key's closest node whatever it holds: the proxy
/// that fetched from the origin keeps its pointer there after a short-lived
/// claim of another proxy lapses.
#[test]
fn a_pin_stores_beside_other_values_and_outlives_them_section_8() {
    let key = Id::from_url("http://pin.example/c.jpg");
    let mut sim = common::network(16, &config(), ConstantLinks(Duration::from_millis(10)), 6);
    let other = Value::from_addr(sim_addr(7));
    sim.with_node(7, |node, now| node.claim(now, key, other, 20));
    sim.run_for(Duration::from_secs(5));
    assert!(matches!(claims(&mut sim)[..], [(7, true, _)]));
    let pinned = Value::from_addr(sim_addr(4));
    sim.with_node(4, |node, now| node.pin(now, key, pinned.clone(), 3600));
    sim.run_for(Duration::from_secs(5));
    assert!(
        matches!(claims(&mut sim)[..], [(4, true, _)]),
        "the pin stored"
    );
    // The other claim's 20 s lapse; the pin answers the next claim.
    sim.run_for(Duration::from_secs(30));
    let v = Value::from_addr(sim_addr(12));
    sim.with_node(12, |node, now| node.claim(now, key, v, 20));
    sim.run_for(Duration::from_secs(5));
    let c = claims(&mut sim);
    assert!(
        matches!(&c[..], [(12, false, v)] if v == &vec![pinned.clone()]),
        "{c:?}"
    );
}

/// The Fig. 4 flash crowd (§6.1) with node failures during the crowd
/// (issue 24): 6 of 60 nodes crash in its first two minutes. Every request
/// at a surviving node is served (a peer fetch cut off by a crash goes on to
/// the next source), every file still reaches the origin at least once, and
/// the extra origin fetches the failures cost stay below one per failure
/// per file. Seeds 1–5.
#[test]
fn fig4_with_node_failures_serves_every_surviving_client_issue_24() {
    use coral::sim::net::HashedLinks;
    use coral::sim::origin::{self, OriginParams};
    for seed in 1..=5 {
        let p = OriginParams {
            nodes: 60,
            minutes: 6,
            client_start_spread_secs: 30,
            formation_minutes: 1,
            failures: 6,
            failure_window_secs: 120,
            seed,
            ..OriginParams::default()
        };
        let links = HashedLinks {
            min: Duration::from_millis(2),
            max: Duration::from_millis(90),
            seed,
        };
        let r = origin::run(&p, links);
        println!(
            "seed {seed}: {} origin fetches for {} files, per file {:?}, failed nodes {:?}",
            r.origin_fetches, r.unique_objects, r.origin_fetches_per_object, r.failed_nodes
        );
        assert_eq!(r.failed_nodes.len(), 6, "seed {seed}");
        assert_eq!(r.invariant_failures(), Vec::<String>::new(), "seed {seed}");
        assert!(
            r.origin_fetches_per_object.iter().all(|&c| c >= 1),
            "seed {seed}"
        );
        assert!(
            r.origin_fetches_per_object.iter().all(|&c| c <= 1 + 6),
            "seed {seed}: {:?}",
            r.origin_fetches_per_object
        );
    }
}
