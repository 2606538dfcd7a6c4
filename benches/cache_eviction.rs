//! Hit ratios of the disk cache's eviction candidates — LRU, SIEVE and
//! S3-FIFO — on Zipf(α) request streams over more objects than the cache
//! holds, at several cache sizes. Deterministic (seeded). The disk cache
//! runs the policy that wins here (benches/README.md, "Disk cache").
//!
//! `cargo bench -p coral --bench cache_eviction` (env: OBJECTS, REQUESTS,
//! ALPHA, SEEDS to change the workload).

use coral::cache::policy::{self, Lru, Policy, S3Fifo, Sieve};
use coral::rng::Rng;

/// A Zipf(α) sampler over ranks 0..n (rank 0 most popular) by inverse CDF.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, alpha: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for i in 0..n {
            sum += 1.0 / ((i + 1) as f64).powf(alpha);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }

    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let objects = env("OBJECTS", 200_000) as usize;
    let requests = env("REQUESTS", 4_000_000) as usize;
    let alpha = std::env::var("ALPHA")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.8);
    let seeds = env("SEEDS", 3);
    let zipf = Zipf::new(objects, alpha);
    println!(
        "Zipf({alpha}) over {objects} objects, {requests} requests per run, seeds 1..={seeds}"
    );
    for sized in [false, true] {
        // Object sizes: unit, or 4 KiB to 1 MiB log-uniform per object
        // (fixed per object, independent of popularity).
        let mut size_rng = Rng::new(99);
        let sizes: Vec<u64> = (0..objects)
            .map(|_| {
                if sized {
                    (4096.0 * 256f64.powf(size_rng.unit())) as u64
                } else {
                    1
                }
            })
            .collect();
        let total: u64 = sizes.iter().sum();
        println!(
            "\n{} sizes; object hit ratio (min..max over seeds)",
            if sized { "4 KiB..1 MiB" } else { "unit" }
        );
        println!(
            "{:>8} {:>22} {:>22} {:>22} {:>22} {:>12} {:>12}",
            "cache", "lru", "sieve", "s3fifo(freq>0)", "s3fifo", "sieve/lru", "s3fifo/lru"
        );
        for percent in [1u64, 5, 10, 25] {
            let capacity = total * percent / 100;
            let mut ratios: Vec<Vec<f64>> = vec![vec![]; 4];
            for seed in 1..=seeds {
                let mut rng = Rng::new(seed);
                // A random popularity order, so rank and handle are unrelated.
                let mut perm: Vec<u32> = (0..objects as u32).collect();
                rng.shuffle(&mut perm);
                let stream: Vec<u32> = (0..requests).map(|_| perm[zipf.sample(&mut rng)]).collect();
                let mut candidates: Vec<Box<dyn Policy>> = vec![
                    Box::new(Lru::new(objects as u32)),
                    Box::new(Sieve::new(objects as u32)),
                    Box::new(S3Fifo::with_params(objects as u32, capacity, 100, 0)),
                    Box::new(S3Fifo::new(objects as u32, capacity)),
                ];
                for (i, p) in candidates.iter_mut().enumerate() {
                    let mut hits = 0u64;
                    // Warm up on the first fifth; count the rest.
                    let warm = requests / 5;
                    for (n, &h) in stream.iter().enumerate() {
                        let hit = policy::request(p.as_mut(), h, sizes[h as usize], capacity);
                        if n >= warm && hit {
                            hits += 1;
                        }
                    }
                    ratios[i].push(hits as f64 / (requests - warm) as f64);
                }
            }
            let range = |v: &[f64]| {
                let lo = v.iter().cloned().fold(f64::MAX, f64::min);
                let hi = v.iter().cloned().fold(f64::MIN, f64::max);
                format!("{:.4}..{:.4}", lo, hi)
            };
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            println!(
                "{:>7}% {:>22} {:>22} {:>22} {:>22} {:>12.3} {:>12.3}",
                percent,
                range(&ratios[0]),
                range(&ratios[1]),
                range(&ratios[2]),
                range(&ratios[3]),
                mean(&ratios[1]) / mean(&ratios[0]),
                mean(&ratios[3]) / mean(&ratios[0]),
            );
        }
    }
}
