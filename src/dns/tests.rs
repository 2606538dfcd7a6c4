//! dnssrv's rules, one test per RFC rule or paper rule.

use super::*;
use domain::base::iana::Rtype;
use domain::base::ParsedRecord;
use proptest::prelude::*;

const NOW: Time = Time(1_000_000_000);

fn me() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 13, 0, 1))
}

fn client() -> SocketAddr {
    "127.13.9.9:5353".parse().unwrap()
}

fn srv() -> Dnssrv {
    Dnssrv::new(DnsConfig {
        rrl_responses_per_sec: 0,
        ..DnsConfig::default()
    })
}

fn peer(ip: &str, verified: Time) -> Peer {
    Peer {
        addr: ip.parse().unwrap(),
        verified,
        rtt: Some(Duration::from_millis(1)),
        non_recursive: false,
    }
}

/// EDNS in a test query: (version, options as (code, data)).
type TestEdns<'a> = Option<(u8, &'a [(u16, &'a [u8])])>;

/// A query as a stub resolver sends it.
fn query(name: &str, qtype: Rtype, edns: TestEdns<'_>) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    q[11] = u8::from(edns.is_some());
    for l in name.split('.').filter(|l| !l.is_empty()) {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_int().to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if let Some((version, options)) = edns {
        let mut rdata = Vec::new();
        for (code, data) in options {
            rdata.extend_from_slice(&code.to_be_bytes());
            rdata.extend_from_slice(&(data.len() as u16).to_be_bytes());
            rdata.extend_from_slice(data);
        }
        q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, version, 0, 0]);
        q.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        q.extend_from_slice(&rdata);
    }
    q
}

struct Reply {
    bytes: Vec<u8>,
}

impl Reply {
    fn msg(&self) -> Message<&[u8]> {
        Message::from_octets(&self.bytes[..]).unwrap()
    }
    fn rcode(&self) -> Rcode {
        self.msg().header().rcode()
    }
    fn section(&self, which: usize) -> Vec<(String, Rtype, u32, String)> {
        let msg = self.msg();
        let mut sec = msg.answer().unwrap();
        for _ in 0..which {
            sec = sec.next_section().unwrap().unwrap();
        }
        sec.map(|r| {
            let r: ParsedRecord<'_, &[u8]> = r.unwrap();
            let data = match r.rtype() {
                Rtype::A => r
                    .to_record::<A>()
                    .unwrap()
                    .unwrap()
                    .data()
                    .addr()
                    .to_string(),
                Rtype::NS => r
                    .to_record::<Ns<ParsedName<&[u8]>>>()
                    .unwrap()
                    .unwrap()
                    .data()
                    .nsdname()
                    .to_string(),
                Rtype::CNAME => r
                    .to_record::<Cname<ParsedName<&[u8]>>>()
                    .unwrap()
                    .unwrap()
                    .data()
                    .cname()
                    .to_string(),
                Rtype::DNAME => r
                    .to_record::<Dname<ParsedName<&[u8]>>>()
                    .unwrap()
                    .unwrap()
                    .data()
                    .dname()
                    .to_string(),
                _ => String::new(),
            };
            (r.owner().to_string(), r.rtype(), r.ttl().as_secs(), data)
        })
        .collect()
    }
    fn answer(&self) -> Vec<(String, Rtype, u32, String)> {
        self.section(0)
    }
    fn authority(&self) -> Vec<(String, Rtype, u32, String)> {
        self.section(1)
    }
    fn additional(&self) -> Vec<(String, Rtype, u32, String)> {
        self.section(2)
    }
}

fn ask_via(
    s: &mut Dnssrv,
    view: &View,
    q: &[u8],
    from: SocketAddr,
    transport: Transport,
) -> Option<Reply> {
    let mut out = Vec::new();
    s.answer(NOW, q, from, transport, view, &mut out)
        .then_some(Reply { bytes: out })
}

fn ask(s: &mut Dnssrv, view: &View, q: &[u8]) -> Reply {
    ask_via(s, view, q, client(), Transport::Udp).expect("an answer")
}

fn alone() -> View {
    View::alone(me(), true, 3)
}

#[test]
fn rfc8020_empty_non_terminal_is_nodata_with_soa() {
    let mut s = srv();
    for name in [
        "L0.coralcdn.test",
        "l1.L0.coralcdn.test",
        "L2.L1.L0.coralcdn.test",
    ] {
        let r = ask(&mut s, &alone(), &query(name, Rtype::A, None));
        assert_eq!(r.rcode(), Rcode::NOERROR, "{name}");
        assert!(r.answer().is_empty());
        let auth = r.authority();
        assert_eq!(auth.len(), 1);
        assert_eq!(auth[0].1, Rtype::SOA);
        assert!(auth[0].0.eq_ignore_ascii_case(name));
        assert_eq!(auth[0].2, NEGATIVE_TTL_SECS);
        assert!(r.msg().header().aa());
    }
}

#[test]
fn rfc8020_names_that_do_not_exist_are_nxdomain_with_soa() {
    let mut s = srv();
    let r = ask(
        &mut s,
        &alone(),
        &query("nothing.coralcdn.test", Rtype::A, None),
    );
    assert_eq!(r.rcode(), Rcode::NXDOMAIN);
    assert_eq!(r.authority()[0].1, Rtype::SOA);
    assert_eq!(r.authority()[0].0, "coralcdn.test");
    let r = ask(
        &mut s,
        &alone(),
        &query("x.L1.L0.coralcdn.test", Rtype::A, None),
    );
    assert_eq!(r.rcode(), Rcode::NXDOMAIN);
    assert_eq!(r.authority()[0].0, "L1.L0.coralcdn.test");
}

#[test]
fn nsdi2004_3_1_every_name_under_http_maps_to_proxies() {
    let mut s = srv();
    for name in [
        "http.L2.L1.L0.coralcdn.test",
        "com.http.L2.L1.L0.coralcdn.test",
        "www.example.com.http.L2.L1.L0.coralcdn.test",
    ] {
        let r = ask(&mut s, &alone(), &query(name, Rtype::A, None));
        assert_eq!(r.rcode(), Rcode::NOERROR);
        let a = r.answer();
        assert_eq!(a.len(), 1, "{name}");
        assert_eq!(a[0].3, "127.13.0.1");
        assert_eq!(a[0].2, A_TTL_SECS_NEAR);
    }
}

#[test]
fn rfc6672_alias_answers_dname_and_synthesized_cname() {
    let mut s = srv();
    let r = ask(
        &mut s,
        &alone(),
        &query("www.x.com.coral.test", Rtype::A, None),
    );
    assert_eq!(r.rcode(), Rcode::NOERROR);
    let a = r.answer();
    assert_eq!(a.len(), 3, "{a:?}");
    assert_eq!(
        (a[0].0.as_str(), a[0].1, a[0].3.as_str()),
        ("coral.test", Rtype::DNAME, "http.L2.L1.L0.coralcdn.test")
    );
    assert_eq!(
        (a[1].0.as_str(), a[1].1, a[1].3.as_str()),
        (
            "www.x.com.coral.test",
            Rtype::CNAME,
            "www.x.com.http.L2.L1.L0.coralcdn.test"
        )
    );
    assert_eq!(a[1].2, a[0].2, "the CNAME has the DNAME's TTL");
    assert_eq!(a[2].0, "www.x.com.http.L2.L1.L0.coralcdn.test");
    assert_eq!((a[2].1, a[2].3.as_str()), (Rtype::A, "127.13.0.1"));
    // The apex itself owns the DNAME and is not redirected.
    let r = ask(&mut s, &alone(), &query("coral.test", Rtype::DNAME, None));
    assert_eq!(r.answer()[0].1, Rtype::DNAME);
    let r = ask(&mut s, &alone(), &query("coral.test", Rtype::A, None));
    assert!(r.answer().is_empty());
    assert_eq!(r.authority()[0].1, Rtype::SOA);
}

#[test]
fn rfc6672_synthesis_too_long_is_yxdomain() {
    let mut s = srv();
    let long = format!("{0}.{0}.{0}.{1}.coral.test", "a".repeat(63), "b".repeat(50));
    let r = ask(&mut s, &alone(), &query(&long, Rtype::A, None));
    assert_eq!(r.rcode(), Rcode::YXDOMAIN);
    assert_eq!(r.answer().len(), 1);
    assert_eq!(r.answer()[0].1, Rtype::DNAME);
}

#[test]
fn rfc6891_badvers_for_edns_version_1() {
    let mut s = srv();
    let r = ask(
        &mut s,
        &alone(),
        &query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, Some((1, &[]))),
    );
    let msg = r.msg();
    assert_eq!(msg.opt_rcode(), OptRcode::BADVERS);
    assert!(r.answer().is_empty());
    assert_eq!(msg.opt().unwrap().version(), 0);
}

#[test]
fn rfc6891_unknown_options_are_ignored_and_not_echoed() {
    let mut s = srv();
    let r = ask(
        &mut s,
        &alone(),
        &query(
            "www.http.L2.L1.L0.coralcdn.test",
            Rtype::A,
            Some((0, &[(65001, b"hello"), (10, &[1, 2, 3, 4, 5, 6, 7, 8])])),
        ),
    );
    assert_eq!(r.rcode(), Rcode::NOERROR);
    assert_eq!(r.answer().len(), 1);
    let msg = r.msg();
    let opt = msg.opt().unwrap();
    assert_eq!(opt.udp_payload_size(), 1232);
    assert!(opt.opt().is_empty(), "no option echoed");
}

#[test]
fn rfc1035_refused_outside_the_zone() {
    let mut s = srv();
    let r = ask(&mut s, &alone(), &query("example.org", Rtype::A, None));
    assert_eq!(r.rcode(), Rcode::REFUSED);
    assert!(!r.msg().header().aa());
    assert!(!r.msg().header().ra());
}

#[test]
fn rfc1035_notimp_for_unknown_opcodes() {
    let mut s = srv();
    let mut q = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    q[2] = 0x10 << 1 >> 1 | (3 << 3); // opcode 3 (unassigned)
    let r = ask(&mut s, &alone(), &q);
    assert_eq!(r.rcode(), Rcode::NOTIMP);
}

#[test]
fn rfc1035_formerr_for_malformed_queries_and_silence_for_runts() {
    let mut s = srv();
    let v = alone();
    let good = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    // A compression loop in the question.
    let mut looped = good[..12].to_vec();
    looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    // A 64-octet label (the 0x40 label type).
    let mut label64 = good[..12].to_vec();
    label64.push(64);
    label64.extend_from_slice(&[b'a'; 64]);
    label64.extend_from_slice(&[0, 0, 1, 0, 1]);
    // Lying counts: two questions announced, one present.
    let mut lying = good.clone();
    lying[5] = 2;
    // An additional record announced, none present.
    let mut lying_ar = good.clone();
    lying_ar[11] = 1;
    // Bytes after the last record.
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"junk");
    for bad in [&looped, &label64, &lying, &lying_ar, &trailing] {
        let r = ask(&mut s, &v, bad);
        assert_eq!(r.rcode(), Rcode::FORMERR);
        assert_eq!(r.msg().header().id(), 0x1234);
    }
    assert!(ask_via(&mut s, &v, b"hello", client(), Transport::Udp).is_none());
    // A response is never answered.
    let mut resp = good.clone();
    resp[2] |= 0x80;
    assert!(ask_via(&mut s, &v, &resp, client(), Transport::Udp).is_none());
    // And the next query is answered.
    assert_eq!(ask(&mut s, &v, &good).answer().len(), 1);
}

#[test]
fn rfc1035_question_echoed_with_its_letter_case() {
    let mut s = srv();
    let r = ask(
        &mut s,
        &alone(),
        &query("wWw.X.cOm.coral.test", Rtype::A, None),
    );
    let msg = r.msg();
    let q = msg.question().next().unwrap().unwrap();
    let mut echoed = Vec::new();
    for l in q.qname().iter() {
        echoed.extend_from_slice(l.as_slice());
        echoed.push(b'.');
    }
    assert_eq!(echoed, b"wWw.X.cOm.coral.test..");
    assert_eq!(r.answer()[1].3, "wWw.X.cOm.http.L2.L1.L0.coralcdn.test");
    assert!(msg.header().aa());
    assert!(!msg.header().ra());
}

#[test]
fn rfc8482_any_is_answered_minimally() {
    let mut s = srv();
    let r = ask(&mut s, &alone(), &query("coralcdn.test", Rtype::ANY, None));
    assert_eq!(r.answer().len(), 1);
    assert_eq!(r.answer()[0].1, Rtype::SOA);
    let r = ask(
        &mut s,
        &alone(),
        &query("a.http.L2.L1.L0.coralcdn.test", Rtype::ANY, None),
    );
    assert!(r.answer().iter().all(|a| a.1 == Rtype::A));
}

#[test]
fn rfc1035_apex_has_soa_and_ns_with_glue() {
    let mut s = srv();
    let r = ask(&mut s, &alone(), &query("coralcdn.test", Rtype::NS, None));
    assert_eq!(
        r.answer(),
        vec![(
            "coralcdn.test".into(),
            Rtype::NS,
            NS_TTL_SECS,
            "ns-7f0d0001.coralcdn.test".into()
        )]
    );
    let glue = r.additional();
    assert_eq!(glue[0].0, "ns-7f0d0001.coralcdn.test");
    assert_eq!(glue[0].3, "127.13.0.1");
    let r = ask(
        &mut s,
        &alone(),
        &query("NS-7F0D0001.L1.L0.coralcdn.test", Rtype::A, None),
    );
    assert_eq!(r.answer()[0].3, "127.13.0.1");
}

#[test]
fn rfc1035_tc_when_the_answer_does_not_fit_and_all_of_it_over_tcp() {
    let mut s = srv();
    let name = format!("{0}.{0}.{0}.{1}.coral.test", "a".repeat(63), "b".repeat(33));
    let q = query(&name, Rtype::A, None);
    let udp = ask(&mut s, &alone(), &q);
    assert!(udp.bytes.len() <= 512);
    assert!(udp.msg().header().tc());
    assert!(udp.answer().is_empty());
    let tcp = ask_via(&mut s, &alone(), &q, client(), Transport::Tcp).unwrap();
    assert!(!tcp.msg().header().tc());
    assert!(tcp.bytes.len() > 512);
    assert_eq!(tcp.answer().len(), 3);
    // With EDNS the same answer fits in 1232 octets.
    let q = query(&name, Rtype::A, Some((0, &[])));
    let edns = ask(&mut s, &alone(), &q);
    assert!(!edns.msg().header().tc());
}

fn view_with_levels() -> View {
    let mut v = alone();
    v.me_http = false;
    v.levels[0].proxies.push(peer("127.13.0.10", NOW));
    v.levels[1].proxies.push(peer("127.13.1.10", NOW));
    v.levels[2].proxies.push(peer("127.13.2.10", NOW));
    for (l, ip) in [(0, "127.13.0.20"), (1, "127.13.1.20"), (2, "127.13.2.20")] {
        v.levels[l].nameservers.push(peer(ip, NOW));
    }
    v
}

#[test]
fn nsdi2004_3_1_client_level_sets_the_proxies_ttl_and_locked_zone() {
    let v = view_with_levels();
    let q = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let mut s = srv();
    // Not measured: level 0, and a probe is asked for.
    let r = ask(&mut s, &v, &q);
    assert_eq!(r.answer()[0].2, A_TTL_SECS_NEAR);
    assert_eq!(r.answer()[0].3, "127.13.0.10");
    assert!(r
        .authority()
        .iter()
        .all(|a| a.0 == "L0.coralcdn.test" && a.2 == NS_TTL_SECS));
    assert_eq!(s.poll_followup(), Some(FollowUp::Probe(client().ip())));
    // Within level 1's threshold (60 ms).
    s.on_rtt(client().ip(), Duration::from_millis(40), NOW);
    let r = ask(&mut s, &v, &q);
    assert_eq!(r.answer()[0].3, "127.13.1.10");
    assert_eq!(r.answer()[0].2, A_TTL_SECS_NEAR);
    assert!(r.authority().iter().all(|a| a.0 == "L1.L0.coralcdn.test"));
    let ns: Vec<_> = r.authority().iter().map(|a| a.3.clone()).collect();
    assert!(
        ns.contains(&"ns-7f0d0114.L1.L0.coralcdn.test".to_string()),
        "{ns:?}"
    );
    assert!(r
        .additional()
        .iter()
        .any(|g| g.0 == "ns-7f0d0114.L1.L0.coralcdn.test" && g.3 == "127.13.1.20"));
    // Within level 2's (20 ms).
    s.pin_rtt(client().ip(), Duration::from_millis(3), NOW);
    let r = ask(&mut s, &v, &q);
    assert_eq!(r.answer()[0].3, "127.13.2.10");
    assert_eq!(r.answer()[0].2, A_TTL_SECS_LEVEL2);
    assert!(r
        .authority()
        .iter()
        .all(|a| a.0 == "L2.L1.L0.coralcdn.test"));
}

#[test]
fn nsdi2004_3_1_only_proxies_verified_alive_recently() {
    let mut v = view_with_levels();
    let stale = Time(NOW.0 - 400_000_000);
    v.levels[2].proxies[0].verified = stale;
    let mut s = srv();
    s.pin_rtt(client().ip(), Duration::from_millis(3), NOW);
    let r = ask(
        &mut s,
        &v,
        &query("x.http.L2.L1.L0.coralcdn.test", Rtype::A, None),
    );
    // Level 2 has none live: its proxies are to be verified, and the answer
    // falls back to level 1's.
    assert_eq!(r.answer()[0].3, "127.13.1.10");
    // (A probe for its last hops comes first: a pinned RTT has no hints.)
    assert!(followups(&mut s).contains(&FollowUp::Verify(2)));
    // Nothing live anywhere and no proxy here: NODATA, never a dead proxy.
    for l in 0..3 {
        v.levels[l].proxies[0].verified = stale;
    }
    let r = ask(
        &mut s,
        &v,
        &query("x.http.L2.L1.L0.coralcdn.test", Rtype::A, None),
    );
    assert!(r.answer().is_empty());
    assert_eq!(r.authority()[0].1, Rtype::SOA);
}

#[test]
fn nsdi2004_3_1_non_recursive_proxies_only_to_local_clients() {
    let mut v = alone();
    v.me_http = false;
    let mut p = peer("127.13.0.10", NOW);
    p.non_recursive = true;
    v.levels[0].proxies.push(p);
    let mut s = srv();
    let q = query("x.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let far: SocketAddr = "127.99.0.1:53".parse().unwrap();
    let near: SocketAddr = "127.13.0.99:53".parse().unwrap();
    let r = ask_via(&mut s, &v, &q, far, Transport::Udp).unwrap();
    assert!(r.answer().is_empty());
    let r = ask_via(&mut s, &v, &q, near, Transport::Udp).unwrap();
    assert_eq!(r.answer()[0].3, "127.13.0.10");
}

#[test]
fn rfc7871_client_subnet_locates_the_client_and_sets_the_scope() {
    let v = view_with_levels();
    let mut s = srv();
    // The resolver is far; the client subnet 127.13.2.0/24 is near.
    s.pin_rtt("127.13.2.0".parse().unwrap(), Duration::from_millis(2), NOW);
    let ecs: &[u8] = &[0, 1, 24, 0, 127, 13, 2];
    let q = query(
        "x.http.L2.L1.L0.coralcdn.test",
        Rtype::A,
        Some((0, &[(8, ecs)])),
    );
    let r = ask(&mut s, &v, &q);
    assert_eq!(r.answer()[0].3, "127.13.2.10");
    let msg = r.msg();
    let opt = msg.opt().unwrap();
    let echoed = opt.opt().client_subnet().unwrap();
    assert_eq!(echoed.source_prefix_len(), 24);
    assert_eq!(echoed.scope_prefix_len(), 24);
    // Bits set beyond the source prefix: FORMERR (RFC 7871 §7.1.2).
    let bad: &[u8] = &[0, 1, 16, 0, 127, 13, 2];
    let r = ask(
        &mut s,
        &v,
        &query(
            "x.http.L2.L1.L0.coralcdn.test",
            Rtype::A,
            Some((0, &[(8, bad)])),
        ),
    );
    assert_eq!(r.rcode(), Rcode::FORMERR);
}

#[test]
fn rrl_over_the_limit_drops_and_slips_truncated_answers() {
    let mut s = Dnssrv::new(DnsConfig {
        rrl_responses_per_sec: 3,
        rrl_slip: 2,
        ..DnsConfig::default()
    });
    let q = query("x.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let v = alone();
    let mut sent = 0;
    let mut slipped = 0;
    for _ in 0..10 {
        if let Some(r) = ask_via(&mut s, &v, &q, client(), Transport::Udp) {
            if r.msg().header().tc() {
                slipped += 1;
            } else {
                sent += 1;
            }
        }
    }
    assert_eq!(sent, 3);
    assert!(slipped >= 3);
    // TCP is not limited.
    assert!(
        ask_via(&mut s, &v, &q, client(), Transport::Tcp).is_some_and(|r| !r.msg().header().tc())
    );
}

proptest! {
    #[test]
    fn answer_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut s = srv();
        let v = view_with_levels();
        let mut out = Vec::new();
        let _ = s.answer(NOW, &bytes, client(), Transport::Udp, &v, &mut out);
        prop_assert!(out.len() <= 1232);
    }

    #[test]
    fn answer_never_panics_on_mutated_queries(
        flips in proptest::collection::vec((0usize..80, any::<u8>()), 1..6),
        name in "[a-zA-Z0-9]{1,20}(\\.[a-z]{1,10}){0,3}",
    ) {
        let mut s = srv();
        let v = view_with_levels();
        let mut q = query(&format!("{name}.coral.test"), Rtype::A, Some((0, &[(8, &[0, 1, 24, 0, 1, 2, 3])])));
        for (i, b) in flips {
            if let Some(x) = q.get_mut(i) { *x = b; }
        }
        let mut out = Vec::new();
        for t in [Transport::Udp, Transport::Tcp] {
            let _ = s.answer(NOW, &q, client(), t, &v, &mut out);
        }
    }
}

#[test]
fn rfc1035_names_are_compressed_against_the_question() {
    let mut s = srv();
    let name = "x.http.L2.L1.L0.coralcdn.test";
    let r = ask(&mut s, &alone(), &query(name, Rtype::A, None));
    let answer_at = 12 + name.len() + 2 + 4;
    // The A record's owner is a pointer to the question's name at 12.
    assert_eq!(&r.bytes[answer_at..answer_at + 2], &[0xc0, 12]);
    // And the delegation's owner L0.coralcdn.test points into it too: the
    // whole answer stays small.
    assert!(r.bytes.len() < 130, "{} octets", r.bytes.len());
    assert_eq!(r.authority()[0].0, "L0.coralcdn.test");
}

fn ask_at(
    s: &mut Dnssrv,
    now: Time,
    view: &View,
    q: &[u8],
    from: SocketAddr,
    hold: Hold,
) -> (Outcome, Reply) {
    let mut out = Vec::new();
    let o = s.answer_or_hold(now, q, from, Transport::Udp, view, &mut out, hold);
    (o, Reply { bytes: out })
}

fn followups(s: &mut Dnssrv) -> Vec<FollowUp> {
    std::iter::from_fn(|| s.poll_followup()).collect()
}

#[test]
fn nsdi2004_3_1_proxies_near_the_client_found_through_hints_rank_first() {
    // A client behind a router; a proxy whose address shares more of the
    // client's prefix, and a node the hints name (near the client's last
    // router), not yet known to this node.
    let client: SocketAddr = "198.18.2.2:5353".parse().unwrap();
    let near: SocketAddr = "198.19.1.2:7000".parse().unwrap();
    let mut v = alone();
    v.me = "198.18.6.2".parse().unwrap();
    v.me_http = false;
    v.levels[0].proxies.push(peer("198.18.3.10", NOW));
    let mut s = Dnssrv::new(DnsConfig {
        rrl_responses_per_sec: 0,
        answers_max: 2,
        ..DnsConfig::default()
    });
    let q = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let (o, r) = ask_at(&mut s, NOW, &v, &q, client, Hold::Never);
    assert_eq!(o, Outcome::Answer);
    assert_eq!(r.answer()[0].3, "198.18.3.10");
    assert_eq!(followups(&mut s), vec![FollowUp::Probe(client.ip())]);
    // The probe: RTT 80 ms (level 0) and the path's routers, this node's
    // gateway first, the client's last router last.
    let hops: [IpAddr; 2] = ["198.18.6.1".parse().unwrap(), "198.19.5.2".parse().unwrap()];
    s.on_probe(client.ip(), Some(Duration::from_millis(80)), &hops, NOW);
    let (keys, len) = lookup_keys(client.ip(), &hops);
    assert_eq!(
        followups(&mut s),
        vec![FollowUp::Hints {
            client: client.ip(),
            keys,
            len: len as u8
        }]
    );
    // A second probe result within the TTL looks nothing up again.
    s.on_probe(client.ip(), Some(Duration::from_millis(80)), &hops, NOW);
    assert!(followups(&mut s).is_empty());
    // The lookup found the near node (and this node, skipped): it is
    // pinged, and not used before it answers.
    let mine: SocketAddr = "198.18.6.2:7000".parse().unwrap();
    s.on_hints(client.ip(), &[mine, near], v.me, NOW);
    assert_eq!(followups(&mut s), vec![FollowUp::Ping(near)]);
    let (_, r) = ask_at(&mut s, NOW, &v, &q, client, Hold::Never);
    let got: Vec<_> = r.answer().iter().map(|a| a.3.clone()).collect();
    assert_eq!(got, vec!["198.18.3.10"]);
    // Verified alive: it comes first, ahead of the level's proxies.
    v.levels[0].proxies.push(peer("198.19.1.2", NOW));
    let (_, r) = ask_at(&mut s, NOW, &v, &q, client, Hold::Never);
    let got: Vec<_> = r.answer().iter().map(|a| a.3.clone()).collect();
    assert_eq!(got, vec!["198.19.1.2", "198.18.3.10"]);
    assert_eq!(s.counters().answers_hinted, 1);
    assert_eq!(s.counters().hint_lookups, 1);
    assert_eq!(s.counters().hint_nodes_found, 1);
    // Without the hint the level ranks it last (fewer shared bits).
    let other: SocketAddr = "198.18.9.9:5353".parse().unwrap();
    let (_, r) = ask_at(&mut s, NOW, &v, &q, other, Hold::Never);
    assert_eq!(r.answer()[0].3, "198.18.3.10");
    // No longer verified lately: not returned, and pinged again (at most
    // once per verification interval).
    let later = NOW + Duration::from_secs(400);
    v.levels[0].proxies[0].verified = later;
    let _ = followups(&mut s);
    let (_, r) = ask_at(&mut s, later, &v, &q, client, Hold::Never);
    let got: Vec<_> = r.answer().iter().map(|a| a.3.clone()).collect();
    assert_eq!(got, vec!["198.18.3.10"]);
    assert!(followups(&mut s).contains(&FollowUp::Ping(near)));
    let (_, _) = ask_at(&mut s, later, &v, &q, client, Hold::Never);
    assert!(!followups(&mut s).contains(&FollowUp::Ping(near)));
}

#[test]
fn nsdi2004_3_1_clients_with_private_addresses_look_up_no_hints() {
    let mut s = srv();
    let ip: IpAddr = "10.1.2.3".parse().unwrap();
    s.on_probe(
        ip,
        Some(Duration::from_millis(5)),
        &["192.168.0.1".parse().unwrap()],
        NOW,
    );
    assert!(followups(&mut s).is_empty());
    // Measured and known to have no hints: no further probe.
    let from = SocketAddr::new(ip, 53);
    let q = query("x.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let _ = ask_at(&mut s, NOW, &alone(), &q, from, Hold::Never);
    assert!(followups(&mut s).is_empty());
    assert_eq!(s.counters().client_level2, 1);
}

#[test]
fn nsdi2004_3_1_with_no_live_proxy_the_answer_waits_for_a_ping() {
    let mut v = view_with_levels();
    let stale = Time(NOW.0 - 400_000_000);
    for l in 0..3 {
        v.levels[l].proxies[0].verified = stale;
    }
    let mut s = Dnssrv::new(DnsConfig {
        rrl_responses_per_sec: 0,
        hold_ms: 400,
        held_max: 1,
        ..DnsConfig::default()
    });
    s.pin_rtt(client().ip(), Duration::from_millis(3), NOW);
    let q = query("x.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    // Held, and every level's proxies are to be pinged.
    let (o, _) = ask_at(&mut s, NOW, &v, &q, client(), Hold::Allowed);
    assert_eq!(o, Outcome::Hold);
    assert_eq!(s.held(), 1);
    let f = followups(&mut s);
    for l in 0..3 {
        assert!(f.contains(&FollowUp::Verify(l)), "{f:?}");
    }
    // The cap on held queries: the next is answered at once (NODATA).
    let (o, r) = ask_at(&mut s, NOW, &v, &q, client(), Hold::Allowed);
    assert_eq!(o, Outcome::Answer);
    assert!(r.answer().is_empty());
    assert_eq!(s.counters().held_refused, 1);
    // Asked again before any ping answered: still held.
    let t1 = NOW + Duration::from_millis(100);
    let (o, _) = ask_at(&mut s, t1, &v, &q, client(), Hold::Retry(NOW));
    assert_eq!(o, Outcome::Hold);
    // Level 1's proxy answered: the held query gets it.
    v.levels[1].proxies[0].verified = t1;
    let (o, r) = ask_at(&mut s, t1, &v, &q, client(), Hold::Retry(NOW));
    assert_eq!(o, Outcome::Answer);
    assert_eq!(r.answer()[0].3, "127.13.1.10");
    assert_eq!(s.held(), 0);
    assert_eq!(s.counters().held_answered, 1);
    v.levels[1].proxies[0].verified = stale;
    // Held again while the pings are out; at the deadline it is answered
    // with what is live: nothing, NODATA, never a dead proxy.
    let t2 = NOW + Duration::from_millis(200);
    let (o, _) = ask_at(&mut s, t2, &v, &q, client(), Hold::Allowed);
    assert_eq!(o, Outcome::Hold);
    let t3 = t2 + Duration::from_millis(400);
    let (o, r) = ask_at(&mut s, t3, &v, &q, client(), Hold::Retry(t2));
    assert_eq!(o, Outcome::Answer);
    assert!(r.answer().is_empty());
    assert_eq!(r.authority()[0].1, Rtype::SOA);
    assert_eq!(s.counters().held_expired, 1);
    assert_eq!(s.held(), 0);
    // The pings went unanswered: until the next verification round, queries
    // are not held for them.
    let (o, _) = ask_at(&mut s, t3, &v, &q, client(), Hold::Allowed);
    assert_eq!(o, Outcome::Answer);
    // Once a round is due again, they are.
    let t4 = NOW + Duration::from_secs(6);
    let (o, _) = ask_at(&mut s, t4, &v, &q, client(), Hold::Allowed);
    assert_eq!(o, Outcome::Hold);
    s.abandon_held();
    assert_eq!(s.held(), 0);
    assert_eq!(s.counters().held, 3);
}

#[test]
fn counters_count_types_rcodes_levels_and_probes() {
    let mut s = srv();
    let v = alone();
    let _ = ask(
        &mut s,
        &v,
        &query("x.http.L2.L1.L0.coralcdn.test", Rtype::A, None),
    );
    let _ = ask(
        &mut s,
        &v,
        &query("x.http.L2.L1.L0.coralcdn.test", Rtype::AAAA, None),
    );
    let _ = ask(&mut s, &v, &query("coralcdn.test", Rtype::NS, None));
    let _ = ask(&mut s, &v, &query("example.org", Rtype::A, None));
    let _ = ask(
        &mut s,
        &v,
        &query("nothing.coralcdn.test", Rtype::TXT, None),
    );
    let _ = ask(
        &mut s,
        &v,
        &query("coralcdn.test", Rtype::SOA, Some((1, &[]))),
    );
    let c = *s.counters();
    assert_eq!(c.queries, 6);
    assert_eq!((c.queries_a, c.queries_aaaa, c.queries_ns), (2, 1, 1));
    assert_eq!((c.queries_soa, c.queries_other), (1, 1));
    assert_eq!(c.rcode_refused, 1);
    assert_eq!(c.rcode_nxdomain, 1);
    assert_eq!(c.rcode_badvers, 1);
    assert_eq!(c.rcode_noerror, 3);
    assert_eq!(c.client_level0, 2);
    assert_eq!(c.answers_proxied, 1, "A here; no AAAA proxy");
    assert_eq!(c.answers_no_proxy, 1);
    assert_eq!(c.probes_sent, 1);
    assert_eq!(
        c.probes_refused, 1,
        "the same client again within the interval"
    );
    let names: Vec<_> = c.fields().iter().map(|f| f.0).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len());
    assert!(c.fields().contains(&("queries_a", 2)));
}

/// The per-answer counts behind `coral_dns_queries_total{qtype,rcode,level}`.
#[test]
fn answers_are_counted_by_qtype_rcode_and_client_level() {
    let v = view_with_levels();
    let mut s = srv();
    let q = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    ask(&mut s, &v, &q); // not measured: level 0
    s.on_rtt(client().ip(), Duration::from_millis(40), NOW);
    ask(&mut s, &v, &q); // level 1
    ask(&mut s, &v, &query("coralcdn.test", Rtype::SOA, None));
    ask(
        &mut s,
        &v,
        &query("nothing.coralcdn.test", Rtype::AAAA, None),
    );
    ask(&mut s, &v, &query("www.example.com", Rtype::MX, None));
    ask(
        &mut s,
        &v,
        &query("coralcdn.test", Rtype::SOA, Some((1, &[]))),
    );
    let idx = |t: &str, r: &str, l: &str| {
        (
            QTYPE_NAMES.iter().position(|x| *x == t).unwrap(),
            RCODE_NAMES.iter().position(|x| *x == r).unwrap(),
            LEVEL_NAMES.iter().position(|x| *x == l).unwrap(),
        )
    };
    let c = s.counters().answers;
    let mut want = [[[0u64; LEVELS + 1]; RCODE_NAMES.len()]; QTYPE_NAMES.len()];
    for (t, r, l) in [
        ("A", "NOERROR", "0"),
        ("A", "NOERROR", "1"),
        ("SOA", "NOERROR", "none"),
        ("AAAA", "NXDOMAIN", "none"),
        ("MX", "REFUSED", "none"),
        ("SOA", "BADVERS", "none"),
    ] {
        let (t, r, l) = idx(t, r, l);
        want[t][r][l] += 1;
    }
    assert_eq!(c, want);
    // A runt is not answered, so not counted here (it is `dropped`).
    let mut out = Vec::new();
    assert!(!s.answer(NOW, &[0u8; 5], client(), Transport::Udp, &v, &mut out));
    assert_eq!(s.counters().answers, want);
    assert_eq!(qtype_index(&[0u8; 12]), QTYPE_NAMES.len() - 1);
}

#[test]
fn ipv4_mapped_clients_of_a_dual_stack_socket_are_ipv4_clients() {
    let v = view_with_levels();
    let q = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let mut s = srv();
    // The /24 is within level 2; a query through a `[::]` socket from an
    // address in it is answered at level 2, and the probe is of the IPv4
    // address.
    s.pin_rtt(client().ip(), Duration::from_millis(3), NOW);
    let mapped: SocketAddr = "[::ffff:127.13.9.77]:5353".parse().unwrap();
    let (o, r) = ask_at(&mut s, NOW, &v, &q, mapped, Hold::Never);
    assert_eq!(o, Outcome::Answer);
    assert_eq!(r.answer()[0].3, "127.13.2.10");
    assert_eq!(
        followups(&mut s),
        vec![FollowUp::Probe("127.13.9.77".parse().unwrap())]
    );
    // Another IPv4 network through the same socket is not in that /24.
    let other: SocketAddr = "[::ffff:127.14.1.1]:5353".parse().unwrap();
    let (_, r) = ask_at(&mut s, NOW, &v, &q, other, Hold::Never);
    assert_eq!(r.answer()[0].3, "127.13.0.10");
}

#[test]
fn nsdi2004_3_1_ipv6_clients_look_up_hints_under_their_last_hops() {
    // An IPv6 client: the probe's hops (IPv6 routers) key the lookup, by
    // address and /48, as for IPv4.
    let client: IpAddr = "2001:db8:2::2".parse().unwrap();
    let hops: [IpAddr; 2] = [
        "2001:db8:6::1".parse().unwrap(),
        "2001:db8:5::2".parse().unwrap(),
    ];
    let mut s = srv();
    s.on_probe(client, Some(Duration::from_millis(80)), &hops, NOW);
    let (keys, len) = lookup_keys(client, &hops);
    assert_eq!(len, 5);
    assert_eq!(keys[0], crate::Id::from_ip(hops[1]));
    assert_eq!(
        keys[1],
        crate::dsht::cluster::hint_prefix_key("2001:db8:5::".parse().unwrap(), 48)
    );
    assert_eq!(
        followups(&mut s),
        vec![FollowUp::Hints {
            client,
            keys,
            len: len as u8
        }]
    );
}

// ---- The fast path (`fast.rs`) against the builder's path ----

/// A query's EDNS in the equivalence test: (UDP size, DO, version, Client
/// Subnet as (family, source, address octets), an unknown option).
type FuzzEdns = Option<(u16, bool, u8, Option<(u16, u8, [u8; 16])>, bool)>;

/// A query built from the test's draws: its name (labels), type and EDNS.
fn fuzz_query(id: u16, rd_cd: u8, labels: &[String], qtype: u16, edns: &FuzzEdns) -> Vec<u8> {
    let mut q = vec![
        (id >> 8) as u8,
        id as u8,
        rd_cd & 0x01,
        rd_cd & 0x10,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    q[11] = u8::from(edns.is_some());
    for l in labels {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if let Some((udp, dnssec_ok, version, ecs, unknown)) = edns {
        let mut rdata = Vec::new();
        if *unknown {
            rdata.extend_from_slice(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
        }
        if let Some((family, source, addr)) = ecs {
            let max = if *family == 1 { 32 } else { 128 };
            let source = (*source).min(max);
            let n = usize::from(source).div_ceil(8);
            let mut a = *addr;
            // Only the source prefix's bits (RFC 7871 §6).
            for (i, b) in a.iter_mut().enumerate() {
                let keep = (usize::from(source)).saturating_sub(8 * i).min(8);
                *b &= if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
            }
            rdata.extend_from_slice(&8u16.to_be_bytes());
            rdata.extend_from_slice(&(4 + n as u16).to_be_bytes());
            rdata.extend_from_slice(&family.to_be_bytes());
            rdata.extend_from_slice(&[source, 0]);
            rdata.extend_from_slice(&a[..n]);
        }
        q.extend_from_slice(&[0, 0, 41]);
        q.extend_from_slice(&udp.to_be_bytes());
        q.extend_from_slice(&[0, *version, if *dnssec_ok { 0x80 } else { 0 }, 0]);
        q.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        q.extend_from_slice(&rdata);
    }
    q
}

/// Letter case as resolvers randomize it (0x20): `mask` bit i flips
/// letter i.
fn mixed_case(s: &str, mask: u64) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

fn fuzz_view(me_http: bool, peers: &[(u8, u8, bool, bool, bool, bool)]) -> View {
    let mut v = alone();
    v.me_http = me_http;
    for &(level, host, v6, stale, non_recursive, ns) in peers {
        let addr = if v6 {
            IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0xdb8,
                u16::from(level),
                0,
                0,
                0,
                0,
                u16::from(host),
            ))
        } else {
            IpAddr::V4(Ipv4Addr::new(127, 13, level, host))
        };
        let p = Peer {
            addr,
            verified: if stale {
                Time(NOW.0 - 400_000_000)
            } else {
                NOW
            },
            rtt: Some(Duration::from_micros(u64::from(host) * 100)),
            non_recursive,
        };
        let lv = &mut v.levels[usize::from(level % 3)];
        if ns {
            lv.nameservers.push(p);
        } else {
            lv.proxies.push(p);
        }
    }
    v
}

fn fuzz_name() -> impl Strategy<Value = (Vec<String>, u8, u64)> {
    (
        proptest::collection::vec("[a-zA-Z0-9-]{1,63}", 0..5),
        0u8..6,
        any::<u64>(),
    )
}

fn fuzz_edns() -> impl Strategy<Value = FuzzEdns> {
    proptest::option::of((
        prop_oneof![Just(512u16), Just(1232), Just(4096), any::<u16>()],
        any::<bool>(),
        prop_oneof![9 => Just(0u8), 1 => Just(1u8)],
        proptest::option::of((
            prop_oneof![Just(1u16), Just(2)],
            0u8..=128,
            any::<[u8; 16]>(),
        )),
        any::<bool>(),
    ))
}

/// Answers `qs` with the fast path on and off, from the same state: the
/// same outcomes, answer bytes, counters and follow-ups.
fn same_both_ways(
    cfg: DnsConfig,
    views: &[View],
    qs: &[(Vec<u8>, SocketAddr, Transport, u32)],
) -> Result<u64, TestCaseError> {
    let mut fast = Dnssrv::new(cfg.clone());
    let mut slow = Dnssrv::new(cfg);
    slow.set_fast_path(false);
    for s in [&mut fast, &mut slow] {
        s.pin_rtt("10.1.1.1".parse().unwrap(), Duration::from_millis(5), NOW);
        s.pin_rtt("10.2.2.2".parse().unwrap(), Duration::from_millis(40), NOW);
        s.pin_rtt(
            "198.51.100.7".parse().unwrap(),
            Duration::from_millis(1),
            NOW,
        );
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (i, (q, from, transport, dt_ms)) in qs.iter().enumerate() {
        // The view changes partway through (proxies come and go).
        let view = &views[i * views.len() / qs.len()];
        let now = NOW + Duration::from_millis(u64::from(*dt_ms));
        let hold = if i % 3 == 0 {
            Hold::Allowed
        } else {
            Hold::Never
        };
        let oa = fast.answer_or_hold(now, q, *from, *transport, view, &mut a, hold);
        let ob = slow.answer_or_hold(now, q, *from, *transport, view, &mut b, hold);
        prop_assert_eq!(oa, ob, "query {:?}", q);
        if oa == Outcome::Answer {
            prop_assert_eq!(&a, &b, "query {:?}", q);
        }
        if oa == Outcome::Hold {
            fast.abandon_held();
            slow.abandon_held();
        }
        prop_assert_eq!(fast.counters(), slow.counters());
        loop {
            let (fa, fb) = (fast.poll_followup(), slow.poll_followup());
            prop_assert_eq!(fa, fb);
            if fa.is_none() {
                break;
            }
        }
    }
    prop_assert_eq!(slow.fast_answered, 0);
    Ok(fast.fast_answered)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn eq_fold_is_eq_ignore_ascii_case(
        a in proptest::collection::vec(any::<u8>(), 0..40),
        flips in proptest::collection::vec((0usize..40, any::<u8>()), 0..4),
        case in any::<u64>(),
    ) {
        // `b`: `a` with letters' case changed, and some octets changed.
        let mut b: Vec<u8> = a
            .iter()
            .enumerate()
            .map(|(i, &c)| if case >> (i % 64) & 1 == 1 { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() })
            .collect();
        for (i, x) in flips {
            if let Some(c) = b.get_mut(i) {
                *c = x;
            }
        }
        prop_assert_eq!(eq_fold(&a, &b), a.eq_ignore_ascii_case(&b));
        prop_assert!(eq_fold(&a, &a));
    }

    #[test]
    fn fast_path_answers_byte_for_byte_as_the_builder(
        queries in proptest::collection::vec(
            (
                fuzz_name(),
                prop_oneof![6 => Just(1u16), 3 => Just(28u16), 1 => Just(2u16), 1 => Just(255u16), 1 => Just(5u16)],
                fuzz_edns(),
                0u8..6,
                any::<bool>(),
                0u32..20_000,
                any::<(u16, u8)>(),
            ),
            1..24,
        ),
        views in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec((0u8..3, 1u8..40, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()), 0..12)),
            1..3,
        ),
        rrl in prop_oneof![Just(0u32), Just(3u32)],
        zones in 0usize..5,
    ) {
        // Zones and aliases: apart, sharing a tail, the alias under the
        // zone, the alias under L0 (the fast path declines it), no alias.
        let (zone, alias) = [
            ("coralcdn.test", Some("coral.test")),
            ("coralcdn.test", Some("example.net")),
            ("coralcdn.test", Some("cdn.coralcdn.test")),
            ("coralcdn.test", Some("x.L0.coralcdn.test")),
            ("nyud.net", None),
        ][zones];
        let suffixes = [
            format!("http.L2.L1.L0.{zone}"),
            alias.unwrap_or("coral.test").to_string(),
            format!("http.l2.l1.l0.{}", zone.to_ascii_uppercase()),
            format!("L1.L0.{zone}"),
            "example.org".to_string(),
            alias.unwrap_or("Coral.Test").to_ascii_uppercase(),
        ];
        let clients = ["10.1.1.1", "10.2.2.2", "10.3.3.3", "127.13.0.9", "198.51.100.7", "2001:db8:0:0:1::9"];
        let qs: Vec<_> = queries
            .iter()
            .map(|((prefix, suffix, case), qtype, edns, who, tcp, dt, (id, rd_cd))| {
                let mut labels: Vec<String> = prefix.clone();
                for l in suffixes[usize::from(*suffix)].split('.') {
                    labels.push(mixed_case(l, *case));
                }
                let ip: IpAddr = clients[usize::from(*who)].parse().unwrap();
                let t = if *tcp { Transport::Tcp } else { Transport::Udp };
                (fuzz_query(*id, *rd_cd, &labels, *qtype, edns), SocketAddr::new(ip, 5353), t, *dt)
            })
            .collect();
        let views: Vec<View> = views.iter().map(|(h, p)| fuzz_view(*h, p)).collect();
        let cfg = DnsConfig {
            zone: zone.into(),
            alias: alias.map(Into::into),
            rrl_responses_per_sec: rrl,
            ..DnsConfig::default()
        };
        same_both_ways(cfg, &views, &qs)?;
    }
}

#[test]
fn fast_path_answers_the_common_queries() {
    // The benchmark's query, and the alias's, with and without EDNS and
    // Client Subnet, before and after the view changes: byte for byte as
    // the builder's path, and by the fast path.
    let ecs: &[(u16, &[u8])] = &[(8, &[0, 1, 24, 0, 198, 51, 100])];
    let mut qs = Vec::new();
    for (i, name) in [
        "www.site1.example.com.http.L2.L1.L0.coralcdn.test",
        "WwW.sItE2.example.com.HTTP.l2.L1.l0.coralcdn.TEST",
        "www.site3.example.com.coral.test",
        "http.L2.L1.L0.coralcdn.test",
    ]
    .iter()
    .enumerate()
    {
        for (qtype, edns) in [
            (Rtype::A, None),
            (Rtype::AAAA, Some((0, &[][..]))),
            (Rtype::A, Some((0, ecs))),
        ] {
            let q = query(name, qtype, edns);
            qs.push((q, client(), Transport::Udp, i as u32));
        }
    }
    let mut v6 = view_with_levels();
    v6.levels[0].proxies.push(peer("2001:db8::10", NOW));
    let views = [alone(), view_with_levels(), v6];
    let cfg = DnsConfig {
        rrl_responses_per_sec: 0,
        ..DnsConfig::default()
    };
    let fast = same_both_ways(cfg, &views, &qs).unwrap();
    assert!(fast >= 8, "fast path answered {fast}");
}

/// Issue 24: a proxy that stops answering leaves the answers within
/// `FRESH` + `CHECK_TIMEOUT` of its last answer, in virtual time through
/// the whole answer function: queries every 100 ms name it and ask for
/// checks (`FollowUp::Check`) once it has not answered for `FRESH`; the
/// runtime's pings are answered (its `verified` moves) until it is killed;
/// then the first unanswered check makes it dead, and the answers name the
/// other proxy alone. When it answers again it comes back.
#[test]
fn issue24_a_killed_proxy_leaves_the_answers_within_seconds() {
    let victim: IpAddr = "127.13.0.10".parse().unwrap();
    let other: IpAddr = "127.13.0.11".parse().unwrap();
    let mut v = alone();
    v.me_http = false;
    v.levels[0].proxies.push(peer("127.13.0.10", NOW));
    v.levels[0].proxies.push(peer("127.13.0.11", NOW));
    let q = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let mut s = srv();
    let step = Duration::from_millis(100);
    let named =
        |r: &Reply| -> Vec<IpAddr> { r.answer().iter().map(|a| a.3.parse().unwrap()).collect() };
    let mut now = NOW;
    let killed = Time(NOW.0 + 5_000_000);
    let mut checks = 0;
    let mut gone_at = None;
    while now < Time(NOW.0 + 12_000_000) {
        let (o, r) = ask_at(&mut s, now, &v, &q, client(), Hold::Never);
        assert_eq!(o, Outcome::Answer);
        let names = named(&r);
        assert!(names.contains(&other), "{names:?}");
        match (names.contains(&victim), gone_at) {
            (true, Some(t)) => panic!("named again at {now:?} after leaving at {t:?}"),
            (false, None) => gone_at = Some(now),
            _ => {}
        }
        for f in followups(&mut s) {
            if let FollowUp::Check(ip) = f {
                checks += 1;
                // The runtime pings it; alive, it answers 1 ms later.
                let p = v.levels[0]
                    .proxies
                    .iter_mut()
                    .find(|p| p.addr == ip)
                    .unwrap();
                if now < killed || ip != victim {
                    p.verified = Time(now.0 + 1000);
                }
            }
        }
        now = Time(now.0 + step.as_micros());
    }
    let gone = gone_at.expect("the killed proxy was never left out");
    let took = gone.saturating_since(killed);
    assert!(
        took <= Duration::from_micros(FRESH.as_micros() + CHECK_TIMEOUT.as_micros() + 200_000),
        "left the answers {took:?} after the kill"
    );
    assert!(checks >= 10, "{checks} checks");
    assert!(s.counters().checks_sent >= 10 && s.counters().proxies_withheld > 0);
    // It answers again (restarted; the DSHT's traffic or a re-check):
    // named again at once.
    v.levels[0].proxies[0].verified = now;
    let (_, r) = ask_at(&mut s, now, &v, &q, client(), Hold::Never);
    assert!(named(&r).contains(&victim));
}

/// Issue 24: a node withdrawing (SIGTERM) answers checks without the HTTP
/// service, so the snapshot lists it as a proxy no more: the next answer
/// leaves it out. A node's own proxy is never named while it is leaving.
#[test]
fn issue24_a_withdrawn_proxy_is_not_named() {
    let mut v = alone();
    v.levels[0].proxies.push(peer("127.13.0.10", NOW));
    let q = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let mut s = srv();
    let names = |r: &Reply| -> Vec<String> { r.answer().iter().map(|a| a.3.clone()).collect() };
    let r = ask(&mut s, &v, &q);
    assert_eq!(names(&r).len(), 2, "{:?}", names(&r));
    // It withdrew: gone from the snapshot's proxies; and this node leaves.
    v.levels[0].proxies.clear();
    v.me_http = false;
    let r = ask(&mut s, &v, &q);
    assert!(r.answer().is_empty(), "{:?}", names(&r));
}

/// Issue 24: after a quiet spell (no answer from a proxy for
/// `UNCONFIRMED`), an answer naming it is kept briefly by resolvers
/// (`A_TTL_SECS_UNCONFIRMED`): had it died meanwhile, they ask again soon
/// after its check. Once it answered the check, the full TTL again.
#[test]
fn issue24_after_a_quiet_spell_an_unconfirmed_proxy_is_named_briefly() {
    let mut v = alone();
    v.levels[0].proxies.push(peer("127.13.0.10", NOW));
    let q = query("www.http.L2.L1.L0.coralcdn.test", Rtype::A, None);
    let mut s = srv();
    let (_, r) = ask_at(&mut s, NOW, &v, &q, client(), Hold::Never);
    assert!(r.answer().iter().all(|a| a.2 == A_TTL_SECS_NEAR));
    let quiet = Time(NOW.0 + UNCONFIRMED.as_micros() + 1_000_000);
    let (_, r) = ask_at(&mut s, quiet, &v, &q, client(), Hold::Never);
    assert_eq!(r.answer().len(), 2);
    assert!(r.answer().iter().all(|a| a.2 == A_TTL_SECS_UNCONFIRMED));
    assert!(followups(&mut s).contains(&FollowUp::Check("127.13.0.10".parse().unwrap())));
    // It answered the check.
    v.levels[0].proxies[0].verified = quiet;
    let (_, r) = ask_at(&mut s, quiet, &v, &q, client(), Hold::Never);
    assert!(r.answer().iter().all(|a| a.2 == A_TTL_SECS_NEAR));
}

/// `canonical` (issue 27, session 8) against the rebuild it replaced, over
/// seeded addresses of both families: IPv4, IPv4-mapped IPv6 (the
/// dual-stack socket's IPv4 clients), and other IPv6 addresses with flow
/// labels and scopes.
#[test]
fn canonical_is_the_address_rebuilt_as_before() {
    use std::net::{SocketAddrV4, SocketAddrV6};
    let before = |c: SocketAddr| SocketAddr::new(c.ip().to_canonical(), c.port());
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..30_000u32 {
        let r = next();
        let c = match i % 3 {
            0 => SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(r as u32),
                (r >> 32) as u16,
            )),
            1 => SocketAddr::V6(SocketAddrV6::new(
                Ipv4Addr::from(r as u32).to_ipv6_mapped(),
                (r >> 32) as u16,
                (r >> 44) as u32 & 0xf_ffff,
                (r >> 20) as u32,
            )),
            _ => SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(u128::from(next()) << 64 | u128::from(r)),
                (r >> 32) as u16,
                (r >> 44) as u32 & 0xf_ffff,
                (r >> 20) as u32,
            )),
        };
        assert_eq!(canonical(c), before(c), "{c}");
    }
}
