//! dnssrv's answer path allocates nothing per query: a counting global
//! allocator (this test binary's own) counts the allocations made while a
//! warmed-up `Dnssrv` answers the common queries (names under
//! http.L2.L1.L0.<zone> and under the alias; A and AAAA; with and without
//! EDNS and Client Subnet; UDP and TCP).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use coral::dns::{DnsConfig, Dnssrv, Peer, Transport, View};
use coral::{Duration, Time};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}

// SAFETY: forwards every call to the system allocator unchanged; the
// counter is a const-initialized thread-local without a destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn query(name: &str, qtype: u16, edns: Option<&[u8]>) -> Vec<u8> {
    let mut q = vec![
        0x12,
        0x34,
        0x01,
        0x00,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        u8::from(edns.is_some()),
    ];
    for l in name.split('.') {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if let Some(options) = edns {
        q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0]);
        q.extend_from_slice(&(options.len() as u16).to_be_bytes());
        q.extend_from_slice(options);
    }
    q
}

#[test]
fn common_queries_are_answered_without_allocating() {
    let now = Time(1_000_000_000);
    let mut view = View::alone(IpAddr::V4(Ipv4Addr::new(127, 13, 0, 1)), true, 3);
    for (l, lv) in view.levels.iter_mut().enumerate() {
        for k in 0..3u8 {
            let peer = |host: u8| Peer {
                addr: IpAddr::V4(Ipv4Addr::new(127, 13, l as u8, host)),
                verified: now,
                rtt: Some(Duration::from_millis(1)),
                non_recursive: false,
            };
            lv.proxies.push(peer(10 + k));
            lv.nameservers.push(peer(20 + k));
        }
        lv.proxies.push(Peer {
            addr: format!("2001:db8::{l}").parse().unwrap(),
            verified: now,
            rtt: None,
            non_recursive: false,
        });
    }
    let mut srv = Dnssrv::new(DnsConfig {
        rrl_responses_per_sec: 0,
        ..DnsConfig::default()
    });
    let ecs = [0, 8, 0, 7, 0, 1, 24, 0, 198, 51, 100];
    let queries = [
        query("www.site1.example.com.http.L2.L1.L0.coralcdn.test", 1, None),
        query(
            "WWW.site2.Example.com.http.l2.l1.l0.coralcdn.test",
            28,
            Some(&[]),
        ),
        query(
            "www.site3.example.com.http.L2.L1.L0.coralcdn.test",
            1,
            Some(&ecs),
        ),
        query("www.site4.example.com.coral.test", 1, Some(&[])),
        query("www.site5.example.com.coral.test", 28, None),
    ];
    let clients: Vec<SocketAddr> = ["10.1.1.1:53", "10.2.2.2:53", "198.51.100.9:53"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    for (i, c) in clients.iter().enumerate() {
        srv.pin_rtt(c.ip(), Duration::from_millis(5 + 20 * i as u64), now);
    }
    let mut out = Vec::with_capacity(1232);
    let mut run = |srv: &mut Dnssrv, rounds: usize| {
        let mut answered = 0;
        for r in 0..rounds {
            for q in &queries {
                for c in &clients {
                    let t = if r % 2 == 0 {
                        Transport::Udp
                    } else {
                        Transport::Tcp
                    };
                    if srv.answer(now, q, *c, t, &view, &mut out) {
                        answered += 1;
                    }
                    while srv.poll_followup().is_some() {}
                }
            }
        }
        answered
    };
    // Warm-up: name servers' names made, probe tables filled.
    run(&mut srv, 4);
    let before = allocations();
    let answered = run(&mut srv, 100);
    let allocated = allocations() - before;
    assert_eq!(answered, 100 * queries.len() * clients.len());
    assert_eq!(
        allocated, 0,
        "{allocated} allocations for {answered} answers"
    );
}
