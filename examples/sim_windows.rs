//! How much of the simulator's join can run on several cores at once
//! (issue 27 goal 6; session 9's design measurement, and session 15's of
//! the lanes by site). Joins `n` nodes exactly as `coral sim hotspot
//! --no-baseline` does, lets the network settle for its minute, and cuts
//! virtual time into windows in which no datagram sent between partitions
//! can arrive, so the partitions' events are independent (the simulator's
//! lanes, `Sim::with_threads`). Two cuts into P partitions: node index
//! mod P, in windows of the links' minimum one-way delay; and whole sites
//! (`World::site_lanes`, as `coral sim` runs), in windows of the least
//! delay between partitions. Per window it counts the datagrams delivered
//! to each partition; a window takes as long as its busiest partition, so
//! `deliveries / Σ busiest` bounds the speed-up on P cores (before any
//! cost of the barriers and the exchange).
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

/// One way of cutting the nodes into P partitions and time into windows.
struct Cut {
    p: usize,
    /// Each node's partition (None: node index mod P).
    lane_of: Option<Vec<u16>>,
    window_us: u64,
    /// The window being counted and its deliveries per partition.
    current: u64,
    counts: Vec<u64>,
    in_window: u64,
    /// Totals: windows with any delivery, Σ busiest partition,
    /// deliveries in windows holding fewer than 16.
    windows: u64,
    busiest: u64,
    in_small: u64,
}

impl Cut {
    fn new(p: usize, lane_of: Option<Vec<u16>>, window_us: u64) -> Cut {
        Cut {
            p,
            lane_of,
            window_us,
            current: 0,
            counts: vec![0; p],
            in_window: 0,
            windows: 0,
            busiest: 0,
            in_small: 0,
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
        self.busiest += self.counts.iter().copied().max().unwrap_or(0);
        self.counts.iter_mut().for_each(|x| *x = 0);
        self.in_window = 0;
    }

    fn see(&mut self, at_us: u64, to: usize) {
        let window = at_us / self.window_us;
        if window != self.current {
            self.close();
            self.current = window;
        }
        self.in_window += 1;
        let part = match &self.lane_of {
            Some(l) => usize::from(l[to]),
            None => to % self.p,
        };
        self.counts[part] += 1;
    }

    fn reset(&mut self) {
        self.close();
        self.windows = 0;
        self.busiest = 0;
        self.in_small = 0;
    }
}

#[derive(Default)]
struct Windows {
    cuts: Vec<Cut>,
    /// Deliveries.
    delivered: u64,
}

impl Windows {
    fn see(&mut self, at_us: u64, to: usize) {
        self.delivered += 1;
        for c in &mut self.cuts {
            c.see(at_us, to);
        }
    }

    fn report(&mut self, phase: &str) {
        for c in &mut self.cuts {
            c.close();
        }
        let first = &self.cuts[0];
        println!(
            "{phase:>6}: {} deliveries in {} windows of {} us ({:.1} a window; {:.1} % in windows of < 16)",
            self.delivered,
            first.windows,
            first.window_us,
            self.delivered as f64 / first.windows.max(1) as f64,
            100.0 * first.in_small as f64 / self.delivered.max(1) as f64,
        );
        for c in &self.cuts {
            println!(
                "        {:>5} P = {:>2}: window {:>5} us, {:>8} windows, {:>6.1} a window, bound on the speed-up {:.2}",
                if c.lane_of.is_some() { "sites" } else { "mod" },
                c.p,
                c.window_us,
                c.windows,
                self.delivered as f64 / c.windows.max(1) as f64,
                self.delivered as f64 / c.busiest.max(1) as f64
            );
        }
        for c in &mut self.cuts {
            c.reset();
        }
        self.delivered = 0;
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
    let mut cuts: Vec<Cut> = PARTS
        .iter()
        .map(|&p| Cut::new(p, None, window_us))
        .collect();
    for &p in &PARTS[1..] {
        let (lane_of, lookahead) = world.site_lanes(p);
        cuts.push(Cut::new(p, Some(lane_of), lookahead.as_micros()));
    }
    let mut sim = network(&params, experiment_config(&params), world);
    let windows = Arc::new(Mutex::new(Windows {
        cuts,
        ..Windows::default()
    }));
    let w = windows.clone();
    sim.set_tap(Some(Box::new(move |at, _from, to, _bytes: &[u8]| {
        w.lock().unwrap().see(at.as_micros(), to);
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
