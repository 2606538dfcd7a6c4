//! The stub's policy, driven by hand: shared lookups, the bounds, tries
//! across servers, TC → TCP, negative caching (RFC 2308) and a hostile
//! network's stray answers.

use super::wire::tests::{answer, name_wire, soa};
use super::*;
use proptest::prelude::*;

const S1: &str = "192.0.2.53:53";
const S2: &str = "198.51.100.53:53";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn stub_with(f: impl FnOnce(&mut StubConfig)) -> Stub {
    let mut cfg = StubConfig {
        servers: vec![sa(S1), sa(S2)],
        ..StubConfig::default()
    };
    f(&mut cfg);
    Stub::new(
        cfg,
        crate::rng::Rng::new(7),
        crate::dsht::id::keyed_hasher(b"test", "resolve"),
    )
}

fn stub() -> Stub {
    stub_with(|_| {})
}

/// A sent try, as the runtime would see it.
#[derive(Clone, Debug)]
struct Sent {
    handle: QueryHandle,
    server: SocketAddr,
    tcp: bool,
    bytes: Vec<u8>,
    deadline: Time,
}

impl Sent {
    fn qtype(&self) -> u16 {
        let n = self.bytes.len() - 11;
        u16::from_be_bytes([self.bytes[n - 4], self.bytes[n - 3]])
    }
    fn id(&self) -> u16 {
        u16::from_be_bytes([self.bytes[0], self.bytes[1]])
    }
}

fn drain(s: &mut Stub) -> (Vec<Sent>, Vec<(Ticket, Outcome)>) {
    let mut sent = Vec::new();
    let mut done = Vec::new();
    while let Some(o) = s.poll_output() {
        match o {
            Output::Query {
                handle,
                server,
                tcp,
                bytes,
                deadline,
            } => sent.push(Sent {
                handle,
                server,
                tcp,
                bytes,
                deadline,
            }),
            Output::Done { ticket, outcome } => done.push((ticket, outcome)),
        }
    }
    (sent, done)
}

fn wait(r: Resolve) -> Ticket {
    match r {
        Resolve::Wait(t) => t,
        other => panic!("expected to wait, got {other:?}"),
    }
}

fn a_record(owner: &str, ttl: u32, ip: [u8; 4]) -> (&str, u16, u32, Vec<u8>) {
    (owner, 1, ttl, ip.to_vec())
}

const T0: Time = Time(1_000_000);

fn at_ms(ms: u64) -> Time {
    Time(T0.0 + ms * 1000)
}

#[test]
fn one_lookup_per_name_is_shared_by_its_waiters() {
    let mut s = stub();
    let t1 = wait(s.resolve(T0, "www.example", Some(ip("203.0.113.1"))));
    let t2 = wait(s.resolve(T0, "www.example", Some(ip("203.0.113.2"))));
    let (sent, done) = drain(&mut s);
    assert!(done.is_empty());
    // One A and one AAAA query, to the first server, for both requests.
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|q| q.server == sa(S1) && !q.tcp));
    assert_eq!(s.counters().joined, 1);
    let a = sent.iter().find(|q| q.qtype() == 1).unwrap();
    let reply = answer(
        &a.bytes,
        0,
        false,
        &[a_record("www.example", 300, [192, 0, 2, 80])],
        0,
    );
    s.handle_answer(at_ms(5), a.handle, sa(S1), &reply);
    let (sent, mut done) = drain(&mut s);
    assert!(sent.is_empty());
    done.sort_by_key(|(t, _)| *t);
    let want: Outcome = Ok(vec![ip("192.0.2.80")]);
    assert_eq!(done, vec![(t1, want.clone()), (t2, want.clone())]);
    assert_eq!(s.lookups_inflight(), 0);
    // Remembered for its TTL capped by ttl_max (60 s).
    assert_eq!(
        s.resolve(at_ms(59_000), "www.example", None),
        Resolve::Done(want)
    );
    assert!(matches!(
        s.resolve(at_ms(60_010), "www.example", None),
        Resolve::Wait(_)
    ));
}

#[test]
fn no_a_records_waits_for_aaaa() {
    let mut s = stub();
    let t = wait(s.resolve(T0, "v6.example", None));
    let (sent, _) = drain(&mut s);
    let a = sent.iter().find(|q| q.qtype() == 1).unwrap();
    let aaaa = sent.iter().find(|q| q.qtype() == 28).unwrap();
    s.handle_answer(
        at_ms(1),
        a.handle,
        sa(S1),
        &answer(&a.bytes, 0, false, &[soa(300, 300)], 1),
    );
    assert!(drain(&mut s).1.is_empty());
    let v6 = vec![0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    s.handle_answer(
        at_ms(2),
        aaaa.handle,
        sa(S1),
        &answer(&aaaa.bytes, 0, false, &[("v6.example", 28, 30, v6)], 0),
    );
    assert_eq!(drain(&mut s).1, vec![(t, Ok(vec![ip("2001:db8::1")]))]);
}

#[test]
fn rfc2308_nxdomain_is_remembered_for_the_soa_ttl_capped() {
    let mut s = stub();
    let t = wait(s.resolve(T0, "nx.example", None));
    let (sent, _) = drain(&mut s);
    for q in &sent {
        // SOA TTL 10 s, MINIMUM 900 s: 10 s.
        let reply = answer(&q.bytes, 3, false, &[soa(10, 900)], 1);
        s.handle_answer(at_ms(1), q.handle, sa(S1), &reply);
    }
    assert_eq!(drain(&mut s).1, vec![(t, Err(Failure::NoSuchName))]);
    assert_eq!(
        s.resolve(at_ms(9_000), "nx.example", None),
        Resolve::Done(Err(Failure::NoSuchName))
    );
    assert_eq!(s.counters().lookups, 1);
    assert!(matches!(
        s.resolve(at_ms(10_002), "nx.example", None),
        Resolve::Wait(_)
    ));
    // A huge SOA TTL is capped by negative_ttl_max (60 s).
    let (sent, _) = drain(&mut s);
    for q in &sent {
        let reply = answer(&q.bytes, 3, false, &[soa(86_400, 86_400)], 1);
        s.handle_answer(at_ms(10_003), q.handle, sa(S1), &reply);
    }
    drain(&mut s);
    assert!(matches!(
        s.resolve(at_ms(10_003 + 60_001), "nx.example", None),
        Resolve::Wait(_)
    ));
}

#[test]
fn a_silent_server_is_retried_on_the_next_then_the_lookup_times_out_and_frees_its_slot() {
    let mut s = stub_with(|c| c.lookups_inflight_max = 1);
    let t = wait(s.resolve(T0, "slow.example", Some(ip("203.0.113.9"))));
    let (sent, _) = drain(&mut s);
    assert!(sent.iter().all(|q| q.server == sa(S1)));
    // The slot is taken: another name is refused at once.
    assert_eq!(
        s.resolve(T0, "other.example", None),
        Resolve::Done(Err(Failure::Busy))
    );
    let first_deadline = sent[0].deadline;
    assert_eq!(s.poll_timeout(), Some(first_deadline));
    s.handle_timeout(first_deadline);
    let (sent2, done) = drain(&mut s);
    assert!(done.is_empty());
    assert_eq!(sent2.len(), 2);
    assert!(sent2.iter().all(|q| q.server == sa(S2)));
    // Each try has its own handle (socket) and a fresh random id.
    for q in &sent2 {
        let before = sent.iter().find(|o| o.qtype() == q.qtype()).unwrap();
        assert_ne!(q.handle, before.handle);
        assert_ne!(q.id(), before.id());
    }
    // An answer on the old try's socket is no longer heard.
    let late = answer(
        &sent[0].bytes,
        0,
        false,
        &[a_record("slow.example", 60, [192, 0, 2, 1])],
        0,
    );
    s.handle_answer(first_deadline, sent[0].handle, sa(S1), &late);
    assert!(drain(&mut s).1.is_empty());
    // Keep timing out: the whole lookup ends at lookup_timeout (10 s).
    let mut now = first_deadline;
    let mut done = Vec::new();
    while done.is_empty() {
        now = s.poll_timeout().expect("a deadline while waiting");
        assert!(now <= at_ms(10_000));
        s.handle_timeout(now);
        done = drain(&mut s).1;
    }
    assert_eq!(done, vec![(t, Err(Failure::Timeout))]);
    assert_eq!(s.lookups_inflight(), 0);
    assert_eq!(s.poll_timeout(), None);
    assert_eq!(s.counters().timeouts, 1);
    // Tries: attempts_max per query, at most.
    assert!(s.counters().queries <= 2 * u64::from(RESOLVE.attempts_max));
    // The slot is free again; the failure is remembered briefly.
    assert!(matches!(
        s.resolve(now, "other.example", None),
        Resolve::Wait(_)
    ));
    assert_eq!(
        s.resolve(now, "slow.example", None),
        Resolve::Done(Err(Failure::Timeout))
    );
}

#[test]
fn servfail_moves_to_the_next_server_at_once() {
    let mut s = stub();
    let t = wait(s.resolve(T0, "www.example", None));
    let (sent, _) = drain(&mut s);
    let a = sent.iter().find(|q| q.qtype() == 1).unwrap();
    s.handle_answer(
        at_ms(1),
        a.handle,
        sa(S1),
        &answer(&a.bytes, 2, false, &[], 0),
    );
    let (sent2, _) = drain(&mut s);
    assert_eq!(sent2.len(), 1);
    assert_eq!(sent2[0].server, sa(S2));
    assert_eq!(sent2[0].qtype(), 1);
    let reply = answer(
        &sent2[0].bytes,
        0,
        false,
        &[a_record("www.example", 60, [192, 0, 2, 7])],
        0,
    );
    s.handle_answer(at_ms(2), sent2[0].handle, sa(S2), &reply);
    assert_eq!(drain(&mut s).1, vec![(t, Ok(vec![ip("192.0.2.7")]))]);
}

#[test]
fn every_server_failing_is_a_server_failure() {
    let mut s = stub();
    let t = wait(s.resolve(T0, "www.example", None));
    let mut now = T0;
    loop {
        let (sent, done) = drain(&mut s);
        if !done.is_empty() {
            assert_eq!(done, vec![(t, Err(Failure::ServerFailure))]);
            break;
        }
        now = Time(now.0 + 1000);
        for q in sent {
            s.handle_answer(now, q.handle, q.server, &answer(&q.bytes, 5, false, &[], 0));
        }
    }
    assert_eq!(s.lookups_inflight(), 0);
}

#[test]
fn rfc7766_truncated_answer_is_asked_again_over_tcp() {
    let mut s = stub();
    let t = wait(s.resolve(T0, "big.example", None));
    let (sent, _) = drain(&mut s);
    let a = sent.iter().find(|q| q.qtype() == 1).unwrap();
    s.handle_answer(
        at_ms(1),
        a.handle,
        sa(S1),
        &answer(&a.bytes, 0, true, &[], 0),
    );
    let (tcp, _) = drain(&mut s);
    assert_eq!(tcp.len(), 1);
    assert!(tcp[0].tcp);
    assert_eq!(tcp[0].server, sa(S1));
    let reply = answer(
        &tcp[0].bytes,
        0,
        false,
        &[a_record("big.example", 60, [192, 0, 2, 9])],
        0,
    );
    s.handle_answer(at_ms(2), tcp[0].handle, sa(S1), &reply);
    assert_eq!(drain(&mut s).1, vec![(t, Ok(vec![ip("192.0.2.9")]))]);
}

#[test]
fn spoofed_answers_are_ignored() {
    let mut s = stub();
    let t = wait(s.resolve(T0, "www.example", None));
    let (sent, _) = drain(&mut s);
    let a = sent.iter().find(|q| q.qtype() == 1).unwrap();
    let evil = answer(
        &a.bytes,
        0,
        false,
        &[a_record("www.example", 60, [10, 6, 6, 6])],
        0,
    );
    // From another address.
    s.handle_answer(at_ms(1), a.handle, sa("192.0.2.66:53"), &evil);
    // With another id.
    let mut wrong_id = evil.clone();
    wrong_id[0] ^= 0xff;
    s.handle_answer(at_ms(1), a.handle, sa(S1), &wrong_id);
    // For another question.
    let other = answer(
        &{
            let mut q = Vec::new();
            wire::build_query(a.id(), "other.example", Qtype::A, &mut q).unwrap();
            q
        },
        0,
        false,
        &[a_record("other.example", 60, [10, 6, 6, 6])],
        0,
    );
    s.handle_answer(at_ms(1), a.handle, sa(S1), &other);
    // Garbage.
    s.handle_answer(at_ms(1), a.handle, sa(S1), &[0xff; 7]);
    assert_eq!(s.counters().ignored, 4);
    assert!(drain(&mut s).1.is_empty());
    // The real answer still counts.
    let good = answer(
        &a.bytes,
        0,
        false,
        &[a_record("www.example", 60, [192, 0, 2, 1])],
        0,
    );
    s.handle_answer(at_ms(2), a.handle, sa(S1), &good);
    assert_eq!(drain(&mut s).1, vec![(t, Ok(vec![ip("192.0.2.1")]))]);
}

#[test]
fn one_client_cannot_take_every_slot_and_cancel_frees_its_place() {
    let mut s = stub_with(|c| c.waiters_per_client_max = 2);
    let bad = Some(ip("203.0.113.66"));
    let t1 = wait(s.resolve(T0, "a.example", bad));
    let _t2 = wait(s.resolve(T0, "b.example", bad));
    assert_eq!(
        s.resolve(T0, "c.example", bad),
        Resolve::Done(Err(Failure::Busy))
    );
    // Another client still gets a lookup.
    assert!(matches!(
        s.resolve(T0, "c.example", Some(ip("203.0.113.7"))),
        Resolve::Wait(_)
    ));
    s.cancel(t1);
    assert!(matches!(s.resolve(T0, "d.example", bad), Resolve::Wait(_)));
    // The cancelled request is never answered; the lookup goes on.
    assert_eq!(s.lookups_inflight(), 4);
}

#[test]
fn waiters_per_name_are_bounded() {
    let mut s = stub_with(|c| c.waiters_per_name_max = 3);
    for _ in 0..3 {
        wait(s.resolve(T0, "hot.example", None));
    }
    assert_eq!(
        s.resolve(T0, "hot.example", None),
        Resolve::Done(Err(Failure::Busy))
    );
}

#[test]
fn no_servers_and_bad_names_fail_at_once() {
    let mut s = stub_with(|c| c.servers.clear());
    assert_eq!(
        s.resolve(T0, "www.example", None),
        Resolve::Done(Err(Failure::ServerFailure))
    );
    let mut s = stub();
    assert_eq!(
        s.resolve(T0, "a..example", None),
        Resolve::Done(Err(Failure::BadName))
    );
    assert!(drain(&mut s).0.is_empty());
}

#[test]
fn cname_to_nowhere_is_no_address() {
    let mut s = stub();
    let t = wait(s.resolve(T0, "alias.example", None));
    let (sent, _) = drain(&mut s);
    for q in &sent {
        let reply = answer(
            &q.bytes,
            0,
            false,
            &[("alias.example", 5, 60, name_wire("gone.example"))],
            0,
        );
        s.handle_answer(at_ms(1), q.handle, sa(S1), &reply);
    }
    assert_eq!(drain(&mut s).1, vec![(t, Err(Failure::NoAddress))]);
}

/// Answers every try of `s` from a table: A records for `good` names,
/// NXDOMAIN for the rest; silent for names starting with "hang".
fn answer_all(s: &mut Stub, now: Time, sent: &[Sent]) {
    for q in sent {
        let msg = domain::base::Message::from_octets(&q.bytes[..]).unwrap();
        let name = msg.first_question().unwrap().qname().to_string();
        if name.starts_with("hang") {
            continue;
        }
        let reply = if name.starts_with("good") && q.qtype() == 1 {
            answer(
                &q.bytes,
                0,
                false,
                &[a_record(&name, 30, [192, 0, 2, 1])],
                0,
            )
        } else {
            answer(&q.bytes, 3, false, &[soa(30, 30)], 1)
        };
        s.handle_answer(now, q.handle, q.server, &reply);
    }
}

proptest! {
    /// Whatever mix of names, clients and timings: every request that
    /// waits is answered exactly once (by the lookup timeout at the
    /// latest), cancelled ones never; the tables stay within their bounds.
    #[test]
    fn every_waiter_is_answered_once_and_tables_stay_bounded(
        ops in proptest::collection::vec((0u8..4, 0u8..40, 0u8..6, 0u16..3000), 1..200),
    ) {
        let mut s = stub_with(|c| {
            c.lookups_inflight_max = 8;
            c.waiters_per_client_max = 5;
            c.waiters_per_name_max = 4;
            c.cache_entries_max = 10;
        });
        let mut now = T0;
        let mut waiting = std::collections::BTreeSet::new();
        let mut answered = std::collections::BTreeSet::new();
        let mut pending: Vec<Sent> = Vec::new();
        for (op, n, client, dt) in ops {
            now = Time(now.0 + u64::from(dt) * 1000);
            match op {
                0 | 1 => {
                    let kind = ["good", "nx", "hang"][usize::from(n % 3)];
                    let name = format!("{kind}{n}.example");
                    let client = Some(IpAddr::from([203, 0, 113, client]));
                    if let Resolve::Wait(t) = s.resolve(now, &name, client) {
                        prop_assert!(waiting.insert(t));
                    }
                }
                2 => {
                    answer_all(&mut s, now, &pending);
                    pending.clear();
                }
                _ => {
                    if let Some(t) = waiting.iter().nth(usize::from(n)).copied() {
                        s.cancel(t);
                        waiting.remove(&t);
                    }
                }
            }
            s.handle_timeout(now);
            let (sent, done) = drain(&mut s);
            pending.extend(sent);
            for (t, _) in done {
                prop_assert!(waiting.remove(&t), "answered a ticket not waiting: {t:?}");
                prop_assert!(answered.insert(t));
            }
            prop_assert!(s.lookups_inflight() <= 8);
            prop_assert!(s.remembered() <= 10);
        }
        // Past every lookup's deadline, nobody is left waiting.
        let end = Time(now.0 + s.config().lookup_timeout.0);
        while let Some(t) = s.poll_timeout() {
            prop_assert!(t <= end);
            s.handle_timeout(t);
            for (t, _) in drain(&mut s).1 {
                prop_assert!(waiting.remove(&t));
            }
        }
        prop_assert!(waiting.is_empty(), "left waiting: {waiting:?}");
        prop_assert_eq!(s.lookups_inflight(), 0);
    }
}
