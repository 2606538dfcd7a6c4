//! dnssrv's answer function on arbitrary bytes, over UDP and TCP, with a
//! view holding proxies and name servers at every level (some stale, one
//! non-recursive) and a client placed by the first input byte. It must
//! never panic; a UDP answer must fit the 1232-octet EDNS limit (512
//! without EDNS is checked by the unit tests), a TCP answer 65,535 octets,
//! and an answer must never answer a response (QR set).

#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use coral::dns::{DnsConfig, Dnssrv, LevelView, Peer, Transport, View};
use coral::{Duration, Time};
use libfuzzer_sys::fuzz_target;

fn view(now: Time) -> View {
    let peer = |c: u8, d: u8, verified: Time, non_recursive: bool| Peer {
        addr: IpAddr::V4(Ipv4Addr::new(10, 0, c, d)),
        verified,
        rtt: Some(Duration::from_millis(u64::from(d))),
        non_recursive,
    };
    let stale = Time(1);
    let level = |c: u8| LevelView {
        proxies: vec![
            peer(c, 1, now, false),
            peer(c, 2, stale, false),
            peer(c, 3, now, true),
        ],
        nameservers: vec![peer(c, 4, now, false), peer(c, 5, stale, false)],
    };
    View {
        me: IpAddr::V4(Ipv4Addr::new(10, 0, 9, 9)),
        me_http: true,
        me_non_recursive: false,
        levels: vec![level(0), level(1), level(2)],
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&who, query)) = data.split_first() else {
        return;
    };
    let now = Time(1_000_000_000);
    let mut srv = Dnssrv::new(DnsConfig {
        rrl_responses_per_sec: 50,
        ..DnsConfig::default()
    });
    let client = SocketAddr::from((Ipv4Addr::new(10, 0, who % 4, who), 5353));
    srv.pin_rtt(
        IpAddr::V4(Ipv4Addr::new(10, 0, 1, 0)),
        Duration::from_millis(40),
        now,
    );
    srv.pin_rtt(
        IpAddr::V4(Ipv4Addr::new(10, 0, 2, 0)),
        Duration::from_millis(5),
        now,
    );
    let v = view(now);
    let mut out = Vec::new();
    for (t, max) in [(Transport::Udp, 1232), (Transport::Tcp, 65_535)] {
        if srv.answer(now, query, client, t, &v, &mut out) {
            assert!(out.len() <= max, "{t:?} answer of {} octets", out.len());
            assert!(out.len() >= 12);
            assert!(out[2] & 0x80 != 0, "the answer is a response");
            assert!(
                query.len() >= 12 && query[2] & 0x80 == 0,
                "answered a runt or a response"
            );
        }
    }
    while srv.poll_followup().is_some() {}
});
