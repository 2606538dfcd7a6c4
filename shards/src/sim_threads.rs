//! The simulator's lanes on threads of their own (`coral sim hotspot
//! --threads N`, issue 27): the [`LaneRunner`] the core crate's `Sim` calls
//! for a run in windows (the core starts no thread).
//!
//! Each lane runs on its own scoped thread for the whole run. At a window's
//! end a lane puts the datagrams its nodes sent to other lanes in their
//! mailboxes and its next event's time beside them, and waits at one
//! spinning barrier; after it, each lane takes its mail and starts the next
//! window at the earliest time any lane gave. Mailboxes and times come in
//! two sets, used in alternate windows, so that a lane writing the next
//! window's never meets one still reading this one's: one barrier a window.
//! Each mailbox has one writer and one reader, at different phases: its
//! lock is never contended.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use coral::sim::net::{next_start, window_end, LaneRunner, LaneWindow, Mail};

/// The runner `coral sim` registers (`coral::sim::net::set_lane_runner`).
pub static THREADS: Threads = Threads;

/// Runs each lane on a thread of its own.
pub struct Threads;

/// Spins of a thread waiting at the barrier before it yields its CPU: a
/// window is tens of microseconds of work at 100,000 nodes, and a yield
/// lets more lanes than free cores still progress.
const BARRIER_SPINS: u32 = 20_000;

/// A barrier for the lanes' threads at each window's end. A lane that
/// panics poisons it, so that the others panic too rather than wait for it
/// forever (the run's panic then reaches the caller, as on one thread).
struct SpinBarrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
    poisoned: AtomicBool,
    parties: usize,
}

impl SpinBarrier {
    fn new(parties: usize) -> SpinBarrier {
        SpinBarrier {
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
            parties,
        }
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    fn wait(&self) {
        let g = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == g {
            if self.poisoned.load(Ordering::Acquire) {
                panic!("another lane of the simulation panicked");
            }
            if spins < BARRIER_SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl LaneRunner for Threads {
    fn run(&self, lanes: &mut [&mut dyn LaneWindow], from: u64, until: u64, lookahead: u64) {
        let p = lanes.len();
        let barrier = SpinBarrier::new(p);
        // mail[set][to * p + from]: from lane `from`'s nodes to lane `to`'s.
        let mail: [Vec<Mutex<Vec<Mail>>>; 2] =
            [0, 1].map(|_| (0..p * p).map(|_| Mutex::new(Vec::new())).collect());
        let earliest: [Vec<AtomicU64>; 2] =
            [0, 1].map(|_| (0..p).map(|_| AtomicU64::new(u64::MAX)).collect());
        let window_loop = |lane: &mut dyn LaneWindow| {
            let me = lane.index();
            let mut start = from;
            let mut set = 0;
            let mut inbox = Vec::new();
            loop {
                let end = window_end(start, lookahead, until);
                let next = lane.run_window(end);
                for to in (0..p).filter(|&to| to != me) {
                    let mut out = mail[set][to * p + me].lock().expect("a lane panicked");
                    lane.send_to(to, &mut out);
                }
                earliest[set][me].store(next, Ordering::Release);
                barrier.wait();
                for from in (0..p).filter(|&from| from != me) {
                    std::mem::swap(
                        &mut inbox,
                        &mut *mail[set][me * p + from].lock().expect("a lane panicked"),
                    );
                    lane.receive(&mut inbox);
                }
                let next = earliest[set]
                    .iter()
                    .map(|e| e.load(Ordering::Acquire))
                    .min()
                    .unwrap_or(u64::MAX);
                set ^= 1;
                start = next_start(end, next);
                if start > until {
                    break;
                }
            }
        };
        let lane_loop = |lane: &mut dyn LaneWindow| {
            let run = std::panic::AssertUnwindSafe(|| window_loop(lane));
            if let Err(panic) = std::panic::catch_unwind(run) {
                barrier.poison();
                std::panic::resume_unwind(panic);
            }
        };
        std::thread::scope(|s| {
            let mut rest = lanes.iter_mut();
            let first = rest.next();
            for lane in rest {
                s.spawn(|| lane_loop(&mut **lane));
            }
            if let Some(lane) = first {
                lane_loop(&mut **lane);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::SpinBarrier;
    use coral::sim::hotspot::{run, HotspotParams};

    /// A lane that panics poisons the barrier: the lanes waiting at it
    /// panic too, where they would otherwise wait for it forever.
    #[test]
    fn a_lane_that_panics_stops_the_others() {
        let barrier = SpinBarrier::new(2);
        let waited = std::thread::scope(|s| {
            let waiter = s.spawn(|| barrier.wait());
            barrier.poison();
            waiter.join()
        });
        assert!(waited.is_err(), "the waiting lane returned");
    }
    use coral::sim::net::HashedLinks;
    use coral::Duration;

    /// Issue 27: the lanes on threads of their own run what they run in
    /// turn on one thread, and what one lane runs: the same report, the
    /// plain-DHT baseline's too, with more lanes than CI's two cores.
    #[test]
    fn lanes_on_threads_run_what_one_lane_runs() {
        coral::sim::net::set_lane_runner(&super::THREADS);
        let params = HotspotParams {
            nodes: 160,
            minutes: 2,
            rate: 5.0,
            seed: 3,
            ..HotspotParams::default()
        };
        let links = HashedLinks {
            min: Duration::from_millis(5),
            max: Duration::from_millis(80),
            seed: 3,
        };
        let one = run(&params, links);
        for threads in [2, 3] {
            let mut r = run(
                &HotspotParams {
                    threads,
                    ..params.clone()
                },
                links,
            );
            r.params.threads = 1;
            assert!(r == one, "{threads} threads ran another run");
        }
    }

    /// Issue 27: in the world model each site's nodes share a lane
    /// (`World::site_lanes`) and the windows are the least delay between
    /// lanes, longer than the least between nodes: on threads, still the
    /// run of one lane.
    #[test]
    fn site_lanes_on_threads_run_what_one_lane_runs() {
        coral::sim::net::set_lane_runner(&super::THREADS);
        let params = HotspotParams {
            nodes: 400,
            minutes: 1,
            rate: 1.0,
            seed: 5,
            baseline: false,
            ..HotspotParams::default()
        };
        let world = coral::sim::world::World::planetlab(400, &mut coral::rng::Rng::new(5));
        let one = run(&params, world.clone());
        for threads in [2, 5] {
            let mut r = run(
                &HotspotParams {
                    threads,
                    ..params.clone()
                },
                world.clone(),
            );
            r.params.threads = 1;
            assert!(r == one, "{threads} threads ran another run");
        }
    }
}
