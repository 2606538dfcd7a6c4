//! Where the simulator's join spends its events: joins `n` nodes exactly as
//! `coral sim hotspot --no-baseline` does (the same world, seed, experiment
//! configuration and join order), lets the network settle for its minute,
//! and counts the events of each phase by kind, per node:
//!
//! ```text
//! cargo build --release --example sim_join_events
//! target/release/examples/sim_join_events 10000 1      # nodes, seed
//! ```
//!
//! Datagrams are counted as they are delivered (a tap on the simulated
//! network), by message kind; a FIND_NODE whose target is its sender's own
//! id is the sender's self-lookup (§4.1's walk for key = own id keeps the
//! target at the id), any other a bucket refresh. The events that are not
//! deliveries are wake-ups (timers, including wake-ups left stale by a
//! moved deadline).

use std::sync::{Arc, Mutex};

use coral::dsht::wire::{kind, Body, Message};
use coral::sim::hotspot::{experiment_config, join_all, join_gap, network, HotspotParams};
use coral::sim::world::World;
use coral::time::Duration;

#[derive(Default, Clone, Copy)]
struct Counts {
    delivered: u64,
    pings: u64,
    pongs: u64,
    find_self: u64,
    find_refresh: u64,
    nodes_replies: u64,
    other: u64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let params = HotspotParams {
        nodes: n,
        rate: 1.0,
        seed,
        baseline: false,
        ..HotspotParams::default()
    };
    let links = World::planetlab(n, &mut coral::rng::Rng::new(seed));
    let started = std::time::Instant::now();
    let mut sim = network(&params, experiment_config(&params), links);
    let counts: Arc<Mutex<Counts>> = Default::default();
    let c = counts.clone();
    sim.set_tap(Some(Box::new(move |_at, _from, _to, bytes: &[u8]| {
        let mut c = c.lock().unwrap();
        c.delivered += 1;
        match bytes.get(1).copied() {
            Some(kind::PING) => c.pings += 1,
            Some(k) if k == kind::PING | kind::REPLY => c.pongs += 1,
            Some(k) if k == kind::FIND_NODE | kind::REPLY => c.nodes_replies += 1,
            Some(kind::FIND_NODE) => match Message::decode(bytes) {
                Ok(m) => match m.body {
                    Body::FindNode { target, .. } if target == m.header.sender => c.find_self += 1,
                    _ => c.find_refresh += 1,
                },
                Err(_) => c.other += 1,
            },
            _ => c.other += 1,
        }
    })));
    let gap = join_gap(n);
    join_all(&params, &mut sim);
    let joined = (*counts.lock().unwrap(), sim.stats(), started.elapsed());
    sim.run_for(Duration::from_secs(60));
    let settled = (*counts.lock().unwrap(), sim.stats(), started.elapsed());
    let per = |x: u64| x as f64 / n as f64;
    println!("nodes {n} seed {seed} (join gap {} us)", gap.as_micros());
    let mut prev = (Counts::default(), coral::sim::net::NetStats::default());
    for (phase, (c, st, t)) in [("join", joined), ("settle", settled)] {
        let (p, ps) = prev;
        let ev = st.events - ps.events;
        let stale = st.stale_wakes - ps.stale_wakes;
        let dl = c.delivered - p.delivered;
        println!(
            "{phase:>6}: {:>7.2} s  events {ev:>11} ({:>6.1}/node)  delivered {:>6.1}/node  wake-ups {:>6.1}/node (stale {:>6.1})  \
             ping {:>5.1} pong {:>5.1} find(self) {:>5.1} find(refresh) {:>6.1} nodes-reply {:>6.1} other {:>5.1}",
            t.as_secs_f64(),
            per(ev),
            per(dl),
            per(ev - dl),
            per(stale),
            per(c.pings - p.pings),
            per(c.pongs - p.pongs),
            per(c.find_self - p.find_self),
            per(c.find_refresh - p.find_refresh),
            per(c.nodes_replies - p.nodes_replies),
            per(c.other - p.other),
        );
        prev = (c, st);
    }
}
