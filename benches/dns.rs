//! Criterion benchmarks of dnssrv's answer function (sans-IO: bytes in,
//! bytes out, no socket).
//!
//! - `dns/answer/<mix>/fast`: the answer path as served, over a mix of
//!   queries (`benches/common/dns_mix.rs`): `dnsperf` is benches/dns.sh's
//!   (10,000 names `www.siteN.example.com.http.L2.L1.L0.coralcdn.test A`,
//!   no EDNS, the node alone); `varied` mixes A/AAAA, EDNS, Client Subnet,
//!   letter case and the alias at a node with peers at every level;
//!   `alias` is names under the alias only.
//! - `dns/answer/<mix>/builder`: the same with the fast path off (every
//!   query through domain's parser and message builder, as before it).
//!
//! Run: `cargo bench --bench dns` (add `-- dnsperf` to filter). Each
//! iteration answers 1,000 queries; throughput is in queries.

#[path = "common/dns_mix.rs"]
mod dns_mix;

use std::hint::black_box;
use std::time::Duration as StdDuration;

use coral::dns::Transport;
use coral::Time;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const PER_ITER: usize = 1_000;

fn answer(c: &mut Criterion) {
    let mut g = c.benchmark_group("dns/answer");
    g.throughput(Throughput::Elements(PER_ITER as u64));
    let now = Time(1_000_000_000);
    for (mix, (view, qs)) in [
        ("dnsperf", dns_mix::dnsperf()),
        ("varied", dns_mix::varied(now)),
        ("alias", dns_mix::alias(now)),
    ] {
        for fast in [true, false] {
            let mut srv = dns_mix::server();
            srv.set_fast_path(fast);
            let mut out = Vec::with_capacity(1232);
            let mut i = 0usize;
            let name = format!("{mix}/{}", if fast { "fast" } else { "builder" });
            g.bench_function(name, |b| {
                b.iter(|| {
                    for _ in 0..PER_ITER {
                        let q = &qs[i % qs.len()];
                        i += 1;
                        let sent =
                            srv.answer(now, &q.bytes, q.from, Transport::Udp, &view, &mut out);
                        black_box((sent, out.len()));
                        while srv.poll_followup().is_some() {}
                    }
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(StdDuration::from_secs(3))
        .warm_up_time(StdDuration::from_secs(1))
        .sample_size(30);
    targets = answer
}
criterion_main!(benches);
