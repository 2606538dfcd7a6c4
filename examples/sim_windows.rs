//! How much of the simulator's join could run on several cores at once
//! (issue 27 goal 6, session 9: a design measurement, not a parallel
//! simulator). Joins `n` nodes exactly as `coral sim hotspot --no-baseline`
//! does, lets the network settle for its minute, and cuts virtual time into
//! windows of the links' minimum one-way delay: within a window no datagram
//! sent can arrive, so the events of different nodes are independent and a
//! conservative, window-synchronous parallel simulation could hand each
//! partition of the nodes its own events and exchange datagrams at the
//! window's end. Per window it counts the datagrams delivered to each
//! partition (node index mod P); a window takes as long as its busiest
//! partition, so `deliveries / Σ busiest` bounds the speed-up on P cores
//! (before any cost of the barriers and the exchange).
//!
//! ```text
//! cargo build --release --example sim_windows
//! target/release/examples/sim_windows 10000 1          # nodes, seed
//! target/release/examples/sim_windows 10000 1 475      # ... window in µs
//! ```
//!
//! Wake-ups (timers) are not counted: since session 9 they are about a
//! tenth of the join's events, each on its own node's partition.

use std::sync::{Arc, Mutex};

use coral::sim::hotspot::{experiment_config, join_all, network, HotspotParams};
use coral::sim::world::World;
use coral::time::Duration;

/// Partition counts measured.
const PARTS: [usize; 5] = [1, 2, 4, 8, 16];

#[derive(Default)]
struct Windows {
    /// The window being counted and its deliveries per partition, per P.
    current: u64,
    counts: Vec<Vec<u64>>,
    in_window: u64,
    /// Totals: deliveries, windows with any, Σ busiest partition per P,
    /// deliveries in windows holding fewer than 16.
    delivered: u64,
    windows: u64,
    busiest: [u64; PARTS.len()],
    in_small: u64,
}

impl Windows {
    fn new() -> Windows {
        Windows {
            counts: PARTS.iter().map(|&p| vec![0; p]).collect(),
            ..Windows::default()
        }
    }

    fn close(&mut self) {
        if self.in_window == 0 {
            return;
        }
        self.windows += 1;
        if self.in_window < 16 {
            self.in_small += self.in_window;
        }
        for (k, c) in self.counts.iter_mut().enumerate() {
            self.busiest[k] += c.iter().copied().max().unwrap_or(0);
            c.iter_mut().for_each(|x| *x = 0);
        }
        self.in_window = 0;
    }

    fn see(&mut self, window: u64, to: usize) {
        if window != self.current {
            self.close();
            self.current = window;
        }
        self.in_window += 1;
        self.delivered += 1;
        for (k, &p) in PARTS.iter().enumerate() {
            self.counts[k][to % p] += 1;
        }
    }

    fn report(&mut self, phase: &str) {
        self.close();
        let per = self.delivered as f64 / self.windows.max(1) as f64;
        print!(
            "{phase:>6}: {} deliveries in {} windows ({per:.1} a window; {:.1} % in windows of < 16); bound on the speed-up, P = ",
            self.delivered,
            self.windows,
            100.0 * self.in_small as f64 / self.delivered.max(1) as f64,
        );
        for (k, &p) in PARTS.iter().enumerate() {
            print!(
                "{p}: {:.2}  ",
                self.delivered as f64 / self.busiest[k].max(1) as f64
            );
        }
        println!();
        let fresh = Windows::new();
        *self = fresh;
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let world = World::planetlab(n, &mut coral::rng::Rng::new(seed));
    // The world's least one-way delay: over every pair up to 20,000 nodes,
    // else the model's floor (a LAN hop of 0.15 ms and four access delays
    // of at least 0.2 ms, a round trip of 0.95 ms).
    let floor = Duration::from_micros(475);
    let least = if n <= 20_000 {
        (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .map(|(a, b)| world.one_way(a, b))
            .min()
            .unwrap_or(floor)
    } else {
        floor
    };
    let window_us: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(least.as_micros());
    println!(
        "nodes {n} seed {seed}: least one-way delay {} us (the model's floor {} us); window {window_us} us",
        least.as_micros(),
        floor.as_micros()
    );
    let params = HotspotParams {
        nodes: n,
        rate: 1.0,
        seed,
        baseline: false,
        ..HotspotParams::default()
    };
    let mut sim = network(&params, experiment_config(&params), world);
    let windows = Arc::new(Mutex::new(Windows::new()));
    let w = windows.clone();
    sim.set_tap(Some(Box::new(move |at, _from, to, _bytes: &[u8]| {
        w.lock().unwrap().see(at.as_micros() / window_us, to);
    })));
    let started = std::time::Instant::now();
    join_all(&params, &mut sim);
    let events = sim.stats().events;
    windows.lock().unwrap().report("join");
    sim.run_for(Duration::from_secs(60));
    windows.lock().unwrap().report("settle");
    println!(
        "events: join {events}, settle {}; {:.1} s",
        sim.stats().events - events,
        started.elapsed().as_secs_f64()
    );
}
