//! Answers a query mix many times, for instruction counts per query:
//!
//! ```text
//! cargo build --release --example dns_drive
//! valgrind --tool=callgrind target/release/examples/dns_drive dnsperf 100000
//! ```
//!
//! Ir per query = (total Ir of the run − total Ir of a run with 0 queries)
//! / queries. The mixes are `benches/common/dns_mix.rs`'s (`dnsperf`:
//! benches/dns.sh's; `varied`: A/AAAA, EDNS, Client Subnet, the alias;
//! `alias`: names under the alias only).

#[path = "../benches/common/dns_mix.rs"]
mod dns_mix;

use coral::dns::Transport;
use coral::Time;

fn main() {
    let mut args = std::env::args().skip(1);
    let mix = args.next().unwrap_or_else(|| "dnsperf".into());
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mut now = Time(1_000_000_000);
    let (view, qs) = match mix.as_str() {
        "varied" => dns_mix::varied(now),
        "alias" => dns_mix::alias(now),
        _ => dns_mix::dnsperf(),
    };
    let mut srv = dns_mix::server();
    let mut out = Vec::with_capacity(1232);
    let mut bytes = 0usize;
    for i in 0..n {
        let q = &qs[i % qs.len()];
        // The shard loop reads the clock once per batch of 32.
        if i % 32 == 0 {
            now = Time(now.0 + 100);
        }
        if srv.answer(now, &q.bytes, q.from, Transport::Udp, &view, &mut out) {
            bytes += out.len();
        }
        while srv.poll_followup().is_some() {}
    }
    println!(
        "{mix}: {n} queries, {bytes} answer bytes, {:?}",
        srv.counters().answers_proxied
    );
}
