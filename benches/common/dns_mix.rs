//! The query mixes of the dnssrv benchmarks (`benches/dns.rs`, criterion)
//! and of the instruction-count driver (`examples/dns_drive.rs`, run under
//! callgrind). Shared by `#[path]`.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use coral::dns::{DnsConfig, Dnssrv, Peer, View};
use coral::{Duration, Time};

/// One query of a mix: its bytes and its sender.
pub struct Q {
    pub bytes: Vec<u8>,
    pub from: SocketAddr,
}

/// A query as a stub resolver sends it: `name`, `qtype`, and an OPT record
/// (UDP size 1232) with these options when `edns` is set.
pub fn query(id: u16, name: &str, qtype: u16, edns: Option<&[(u16, &[u8])]>) -> Vec<u8> {
    let mut q = vec![0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    q[..2].copy_from_slice(&id.to_be_bytes());
    q[11] = u8::from(edns.is_some());
    for l in name.split('.').filter(|l| !l.is_empty()) {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if let Some(options) = edns {
        let mut rdata = Vec::new();
        for (code, data) in options {
            rdata.extend_from_slice(&code.to_be_bytes());
            rdata.extend_from_slice(&(data.len() as u16).to_be_bytes());
            rdata.extend_from_slice(data);
        }
        q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
        q.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        q.extend_from_slice(&rdata);
    }
    q
}

/// The server's address in both mixes.
pub fn me() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 13, 200, 1))
}

/// dnssrv as `benches/dns.sh` runs it: response rate limiting off.
pub fn server() -> Dnssrv {
    Dnssrv::new(DnsConfig {
        rrl_responses_per_sec: 0,
        ..DnsConfig::default()
    })
}

/// `benches/dns.sh`'s mix: 10,000 distinct names
/// `www.siteN.example.com.http.L2.L1.L0.coralcdn.test A`, no EDNS (dnsperf's
/// default), from one resolver; the node alone (`--cores 1`, no peers).
pub fn dnsperf() -> (View, Vec<Q>) {
    let view = View::alone(me(), true, 3);
    let qs = (1..=10_000u32)
        .map(|i| Q {
            bytes: query(
                i as u16,
                &format!("www.site{i}.example.com.http.L2.L1.L0.coralcdn.test"),
                1,
                None,
            ),
            from: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 40_000 + (i % 4) as u16),
        })
        .collect();
    (view, qs)
}

fn peer(ip: [u8; 4], verified: Time) -> Peer {
    Peer {
        addr: IpAddr::V4(Ipv4Addr::from(ip)),
        verified,
        rtt: Some(Duration::from_millis(1)),
        non_recursive: false,
    }
}

/// A varied mix at a node with peers at every level: A and AAAA, with and
/// without EDNS, Client Subnet, the alias, letter case as resolvers
/// randomize it (0x20), from clients in 64 networks.
pub fn varied(now: Time) -> (View, Vec<Q>) {
    let mut view = View::alone(me(), true, 3);
    for (l, lv) in view.levels.iter_mut().enumerate() {
        for k in 0..3u8 {
            lv.proxies.push(peer([127, 13, l as u8, 10 + k], now));
            lv.nameservers.push(peer([127, 13, l as u8, 20 + k], now));
        }
    }
    let mut qs = Vec::new();
    for i in 0..10_000u32 {
        let from = SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(10, (i % 64) as u8, 0, 1)),
            40_000 + (i % 7) as u16,
        );
        let ecs: [u8; 7] = [0, 1, 24, 0, 198, 51, (i % 200) as u8];
        let ecs_opt: [(u16, &[u8]); 1] = [(8, &ecs)];
        let bytes = match i % 6 {
            0 => query(
                i as u16,
                &format!("www.site{i}.example.com.http.L2.L1.L0.coralcdn.test"),
                1,
                None,
            ),
            1 => query(
                i as u16,
                &format!("www.site{i}.example.com.http.L2.L1.L0.coralcdn.test"),
                1,
                Some(&[]),
            ),
            2 => query(
                i as u16,
                &format!("wWw.SiTe{i}.eXample.CoM.hTTp.l2.L1.l0.CoralCDN.test"),
                28,
                Some(&[]),
            ),
            3 => query(
                i as u16,
                &format!("www.site{i}.example.com.coral.test"),
                1,
                Some(&[]),
            ),
            4 => query(
                i as u16,
                &format!("www.site{i}.example.com.http.L2.L1.L0.coralcdn.test"),
                1,
                Some(&ecs_opt),
            ),
            _ => query(
                i as u16,
                &format!("img.site{i}.example.org.coral.test"),
                1,
                None,
            ),
        };
        qs.push(Q { bytes, from });
    }
    (view, qs)
}

/// Names under the alias only (A, EDNS), at the node of [`varied`].
pub fn alias(now: Time) -> (View, Vec<Q>) {
    let (view, _) = varied(now);
    let qs = (0..10_000u32)
        .map(|i| Q {
            bytes: query(
                i as u16,
                &format!("www.site{i}.example.com.coral.test"),
                1,
                Some(&[]),
            ),
            from: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, (i % 64) as u8, 0, 1)), 40_000),
        })
        .collect();
    (view, qs)
}
