//! Where the simulator's memory goes: runs the hot-spot experiment (as
//! `coral sim hotspot --no-baseline`, the same world and seed) under a
//! counting allocator and prints the live heap after the join and after each
//! simulated minute, and its peak, in bytes per node:
//!
//! ```text
//! cargo build --release --example sim_memory
//! target/release/examples/sim_memory 20000 3 1      # nodes, minutes, seed
//! heaptrack target/release/examples/sim_memory 10000 1 1   # by allocation site
//! heaptrack target/release/examples/sim_memory 10000 1 1 exit
//! ```
//!
//! With `exit`, the process ends as soon as the last minute is simulated,
//! with every node still alive: heaptrack's "leaks" are then what the
//! network holds in steady state, by allocation site (its "peak" is the
//! moment of most memory, during the join).
//!
//! The allocator is the system's (so heaptrack sees every allocation); the
//! `coral` binary's mimalloc adds its own overhead on top (compare peak RSS
//! with `/usr/bin/time -v`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use coral::sim::hotspot::{self, HotspotParams};
use coral::sim::world::World;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Relaxed) + by;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged; the
// counters are only read for the report.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Relaxed);
        grew(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let minutes: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let exit_at_end = args.next().as_deref() == Some("exit");
    let params = HotspotParams {
        nodes,
        minutes,
        rate: 1.0,
        seed,
        baseline: false,
        ..HotspotParams::default()
    };
    let links = World::planetlab(nodes, &mut coral::rng::Rng::new(seed));
    let per_node = |b: usize| b as f64 / nodes as f64;
    let started = std::time::Instant::now();
    println!("nodes {nodes} minutes {minutes} seed {seed}");
    let report = hotspot::run_with_progress(&params, links, &mut |p| {
        let (live, peak) = (LIVE.load(Relaxed), PEAK.load(Relaxed));
        println!(
            "{:>6.1} s  minute {:>2}  events {:>11}  live {:>7.0} B/node  peak so far {:>7.0} B/node",
            started.elapsed().as_secs_f64(),
            p.minute,
            p.events,
            per_node(live),
            per_node(peak)
        );
        if exit_at_end && p.minute == p.minutes {
            std::process::exit(0);
        }
    });
    println!(
        "busiest node after minute 1: {} put RPCs a minute (bound {}); peak live heap {:.1} MB",
        report.dsht.max_steady_per_min,
        report.bound_rpcs_per_min,
        PEAK.load(Relaxed) as f64 / 1e6
    );
}
