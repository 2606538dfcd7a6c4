//! The flash crowd of §6.1 (Fig. 4) at a size CI can afford: with claims
//! (the test-and-set of §8) every file is fetched from the origin exactly
//! once across the network, and every request is served.

use coral::sim::net::HashedLinks;
use coral::sim::origin::{run, OriginParams};
use coral::Duration;

fn params() -> OriginParams {
    OriginParams {
        nodes: 60,
        minutes: 6,
        client_start_spread_secs: 30,
        formation_minutes: 1,
        seed: 3,
        ..OriginParams::default()
    }
}

fn links() -> HashedLinks {
    HashedLinks {
        min: Duration::from_millis(2),
        max: Duration::from_millis(90),
        seed: 3,
    }
}

#[test]
fn one_origin_fetch_per_file_with_claims_section_6_1() {
    let r = run(&params(), links());
    assert_eq!(r.unique_objects, 12);
    assert_eq!(r.origin_fetches, 12, "origin fetches");
    let served: u64 = r
        .per_minute
        .iter()
        .map(|m| m.origin + m.level0 + m.level1 + m.level2 + m.local)
        .sum();
    let failed: u64 = r.per_minute.iter().map(|m| m.failed).sum();
    assert_eq!(failed, 0);
    assert_eq!(r.invariant_failures(), Vec::<String>::new());
    // Requests still waiting on a fetch when the run ends are not yet served.
    assert!(
        served <= r.requests && served + 60 * 3 >= r.requests,
        "{served} of {}",
        r.requests
    );
    // After the first minutes, local caches serve nearly everything.
    let last = r.per_minute.last().unwrap();
    assert!(
        last.local as f64
            >= 0.95 * (last.local + last.level0 + last.level1 + last.level2 + last.origin) as f64
    );
}

#[test]
fn same_seed_same_flash_crowd() {
    let p = OriginParams {
        minutes: 3,
        ..params()
    };
    assert_eq!(run(&p, links()), run(&p, links()));
}

/// With clusters the nodes formed themselves (§4.4) over the paper's 30
/// minutes before the clients start.
#[test]
fn multi_level_gets_are_faster_than_single_level_section_6_2() {
    use coral::sim::origin::percentile;
    use coral::sim::world::World;
    let run_levels = |levels| {
        let p = OriginParams {
            nodes: 80,
            minutes: 5,
            levels,
            seed: 5,
            ..OriginParams::default()
        };
        let mut r = run(&p, World::planetlab(80, &mut coral::rng::Rng::new(5)));
        let l = &mut r.get_latencies_ms;
        (percentile(l, 50.0), percentile(l, 80.0))
    };
    let (single, multi) = (run_levels(1), run_levels(3));
    println!(
        "single-level p50 {:.1} p80 {:.1}; multi-level p50 {:.1} p80 {:.1}",
        single.0, single.1, multi.0, multi.1
    );
    // The paper: 2–5× faster up to the 80th percentile.
    assert!(
        multi.0 * 2.0 <= single.0,
        "p50: multi {} vs single {}",
        multi.0,
        single.0
    );
    assert!(
        multi.1 * 1.5 <= single.1,
        "p80: multi {} vs single {}",
        multi.1,
        single.1
    );
}
