//! The hot-spot experiment (§6.4, Fig. 8) at a size CI can afford, pinned
//! as a snapshot: the same seed must give the same numbers, and the numbers
//! must show what the paper claims — logarithmic, not linear, load at the
//! key's closest node.

use coral::rng::Rng;
use coral::sim::hotspot::{run, Bootstrap, HotspotParams};
use coral::sim::net::HashedLinks;
use coral::sim::world::World;
use coral::Duration;

fn params() -> HotspotParams {
    HotspotParams {
        nodes: 128,
        minutes: 3,
        rate: 5.0,
        seed: 7,
        baseline: true,
        bootstrap: Bootstrap::Random,
        ..Default::default()
    }
}

fn links() -> HashedLinks {
    HashedLinks {
        min: Duration::from_millis(5),
        max: Duration::from_millis(80),
        seed: 7,
    }
}

#[test]
fn hotspot_load_is_logarithmic_at_the_closest_node_section_6_4() {
    let r = run(&params(), links());
    let dht = r.dht.as_ref().unwrap();
    println!(
        "bound {} closest steady {} first {} max {} | dht closest {}",
        r.bound_rpcs_per_min,
        r.dsht.closest_steady_per_min,
        r.dsht.closest_first_minute,
        r.dsht.max_steady_per_min,
        dht.closest_steady_per_min
    );
    // β·(2^b−1)·⌈log2 128⌉ = 12·1·7.
    assert_eq!(r.bound_rpcs_per_min, 84);
    // Issue 15: the bound holds at the closest and the busiest node, and the
    // first minute stays within twice the bound.
    assert!(r.dsht.closest_steady_per_min <= r.bound_rpcs_per_min as f64);
    assert!(r.dsht.max_steady_per_min <= r.bound_rpcs_per_min);
    assert!(r.dsht.closest_first_minute <= 2 * r.bound_rpcs_per_min);
    // A plain DHT sends every put to the closest node: 128 nodes, each one
    // put at a time (back-to-back, as the paper's nodes), a probe and a store
    // each.
    assert!(
        dht.closest_steady_per_min > 20_000.0,
        "{}",
        dht.closest_steady_per_min
    );
    assert!(dht.closest_steady_per_min > 100.0 * r.dsht.closest_steady_per_min);
    // Nodes far from the key receive nothing (they route toward the key).
    let far_half = &r.dsht.per_minute[64..];
    let far_silent = far_half
        .iter()
        .filter(|m| m.iter().skip(1).all(|&c| c == 0))
        .count();
    assert!(
        far_silent >= 32,
        "only {far_silent} of the far half were silent"
    );
    // The invariants every run checks (no node over l values; gets succeed).
    assert_eq!(r.dsht.invariant_failures(&params()), Vec::<String>::new());
    // Gets keep working under the load.
    assert!(r.dsht.gets_found as f64 >= 0.999 * r.dsht.gets as f64);
}

#[test]
fn hotspot_same_seed_same_report() {
    let p = HotspotParams {
        nodes: 48,
        minutes: 2,
        baseline: false,
        ..params()
    };
    assert_eq!(run(&p, links()), run(&p, links()));
}

/// The distribution over seeds (issue 15): no id set makes a hot spot. At
/// n = 128 and 256, b = 1 and 2, seeds 1–3: the closest and the busiest node
/// at or under the bound in steady state, the closest node's first minute at
/// most twice it, every get after the first few finds a value. Pinned for
/// one run so that a change in the put rules shows.
#[test]
fn hotspot_bound_holds_across_seeds_sizes_and_b_section_6_4() {
    let mut pinned = None;
    for nodes in [128, 256] {
        for b in [1, 2] {
            for seed in 1..=3 {
                let p = HotspotParams {
                    nodes,
                    b,
                    seed,
                    minutes: 3,
                    rate: 5.0,
                    baseline: false,
                    ..params()
                };
                let r = run(&p, links());
                let bound = r.bound_rpcs_per_min;
                let d = &r.dsht;
                let what = format!(
                    "n {nodes} b {b} seed {seed}: closest {} first {} busiest {} bound {bound}",
                    d.closest_steady_per_min, d.closest_first_minute, d.max_steady_per_min
                );
                println!("{what}");
                assert!(d.closest_steady_per_min <= bound as f64, "{what}");
                assert!(d.max_steady_per_min <= bound, "{what}");
                assert!(d.closest_first_minute <= 2 * bound, "{what}");
                // With one token at the start, not β, from each predecessor,
                // the start-up wave stays under the bound itself here.
                assert!(d.closest_first_minute <= bound, "{what}");
                assert_eq!(d.invariant_failures(&p), Vec::<String>::new(), "{what}");
                if (nodes, b, seed) == (256, 1, 1) {
                    pinned = Some((
                        d.closest_steady_per_min,
                        d.closest_first_minute,
                        d.max_steady_per_min,
                    ));
                }
            }
        }
    }
    // (2.0, 48, 26) before the open-Internet rules (SECURITY.md), whose
    // simulated addresses (one node per /24) give the nodes other ids;
    // (11.0, 109, 25) with them, before a new key's leakage bucket started
    // with one token instead of β (store.rs); (12.0, 41, 25) before a
    // sender stayed away longer from a node loaded over consecutive
    // windows (recall.rs); (6.0, 41, 24) before that stay was spread by a
    // random jitter, (6.0, 41, 22) with a jitter over one window, not two;
    // (6.0, 41, 19) before a loaded node asked its senders to stay away
    // longer when over half the bound for its estimate of n (issue 27);
    // (5.0, 41, 19) before a sender also recalled a node that answered
    // loaded but could take the value (issue 27); (6.0, 32, 20) before a
    // joining node's far buckets took its refreshes' answers (issue 27);
    // (8.0, 29, 20) before a node filled its far buckets again at each
    // 4-fold growth of its estimate of n (rule 10, issue 27).
    assert_eq!(pinned, Some((9.0, 33, 17)), "pinned figures changed");
}

/// Issue 27: the report names the last minute's busiest node and who
/// probed it, consistently with the per-node counts.
#[test]
fn hotspot_names_the_busiest_node_and_its_senders() {
    let p = HotspotParams {
        baseline: false,
        ..params()
    };
    let r = run(&p, links());
    let b = r.dsht.busiest.as_ref().expect("a busiest node");
    let last = |m: &Vec<u64>| m.last().copied().unwrap_or(0);
    let most = r.dsht.per_minute.iter().map(last).max().unwrap_or(0);
    println!("{b:?}");
    assert_eq!(b.put_rpcs, most);
    assert_eq!(last(&r.dsht.per_minute[b.rank]), b.put_rpcs);
    assert!(b.probes <= b.put_rpcs && b.probes > 0, "{b:?}");
    assert!(b.senders as u64 <= b.probes && b.senders > 0, "{b:?}");
    assert!(b.senders_knowing_it <= b.senders);
    assert!(b.senders_knowing_it <= b.in_tables);
    let by_target: u64 = b.by_target_bits.iter().map(|&(_, c)| c).sum();
    let by_sender: u64 = b.by_sender_bits.iter().map(|&(_, c)| c).sum();
    assert_eq!((by_target, by_sender), (b.probes, b.probes));
    assert!(b.index < p.nodes && b.rank < p.nodes);
}

/// Issue 27: the simulator on several threads (`HotspotParams::threads`,
/// `coral sim hotspot --threads`) runs exactly what it runs on one: each
/// lane's nodes see the same datagrams in the same order, so every figure
/// of the report is the same, the plain-DHT baseline's too. Three threads
/// on CI's two cores also takes the barrier's path that yields the CPU.
/// Issue 27: in the world model, whole sites in lanes (`World::site_lanes`)
/// in windows of the least delay between lanes, taking turns on one
/// thread: the same report as one lane.
#[test]
fn hotspot_report_is_the_same_in_site_lanes() {
    let params = HotspotParams {
        nodes: 300,
        minutes: 1,
        rate: 1.0,
        seed: 2,
        baseline: false,
        ..Default::default()
    };
    let world = World::planetlab(300, &mut Rng::new(2));
    let one = run(&params, world.clone());
    for threads in [2, 4] {
        let mut r = run(
            &HotspotParams {
                threads,
                ..params.clone()
            },
            world.clone(),
        );
        r.params.threads = 1;
        assert_eq!(r, one, "{threads} lanes");
    }
}

#[test]
fn hotspot_report_is_the_same_on_several_threads() {
    let one = run(&params(), links());
    for threads in [2, 3] {
        let p = HotspotParams {
            threads,
            ..params()
        };
        let mut r = run(&p, links());
        assert_eq!(r.params.threads, threads);
        r.params.threads = 1;
        assert_eq!(r, one, "{threads} threads");
    }
}
