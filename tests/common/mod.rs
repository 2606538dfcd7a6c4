//! Support shared by the core crate's integration tests.

use coral::sim::net::{sim_addr, Links, Sim};
use coral::{Config, Duration, Node};

/// `n` nodes on `links`, each bootstrapped from node 0, settled for a
/// minute; node `i`'s seed is `seed × 1000 + i`.
pub fn network<L: Links>(n: usize, config: &Config, links: L, seed: u64) -> Sim<L> {
    let mut sim = Sim::new(links, seed);
    for i in 0..n {
        let node = Node::new(
            config.clone(),
            sim_addr(i),
            sim.now(),
            seed.wrapping_mul(1000) + i as u64,
        )
        .unwrap();
        sim.add(node);
    }
    for i in 1..n {
        sim.with_node(i, |node, now| node.bootstrap(now, &[sim_addr(0)]));
        sim.run_for(Duration::from_millis(50));
    }
    sim.run_for(Duration::from_secs(60));
    sim
}
