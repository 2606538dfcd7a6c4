use super::*;
use crate::dsht::wire::{ClusterInfo, Services, Value};
use crate::rng::Rng;
use std::net::{Ipv4Addr, SocketAddr};

const HOUR: u64 = 3600;

fn config() -> Config {
    Config::default()
}

fn secs(s: u64) -> Time {
    Time(s * 1_000_000)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

fn id(b: u8) -> Id {
    Id([b; 20])
}

fn view(b: u8, size: u32) -> View {
    View {
        id: id(b),
        size,
        created: Time::ZERO,
    }
}

fn contact(n: u32) -> Contact {
    let addr = SocketAddr::new(Ipv4Addr::from(0x0a00_0000 + n).into(), 7000);
    Contact {
        id: Id::from_ip(addr.ip()),
        addr,
        services: Services::NONE,
    }
}

fn info(cluster: u8, size: u32) -> ClusterInfo {
    ClusterInfo {
        id: id(cluster),
        age_secs: 0,
        size,
    }
}

#[test]
fn delta_is_a_square_wave_of_the_hour_section_4_4() {
    let c = config();
    assert_eq!(delta_log2(Duration::from_secs(0), &c), 0);
    assert_eq!(delta_log2(Duration::from_secs(HOUR - 1), &c), 0);
    assert_eq!(delta_log2(Duration::from_secs(HOUR), &c), 2);
    assert_eq!(delta_log2(Duration::from_secs(2 * HOUR - 1), &c), 2);
    assert_eq!(delta_log2(Duration::from_secs(2 * HOUR), &c), 0);
}

#[test]
fn larger_cluster_wins_only_beyond_delta_else_lower_id_section_4_4() {
    let c = config();
    let now = secs(60);
    // First hour: δ = 0, but sizes within a factor of two are a tie.
    assert!(prefers(&view(9, 50), &view(1, 20), now, &c), "2.5× larger");
    assert!(!prefers(&view(1, 20), &view(9, 50), now, &c));
    assert!(
        prefers(&view(1, 30), &view(9, 20), now, &c),
        "tie: lower id"
    );
    assert!(
        !prefers(&view(9, 30), &view(1, 20), now, &c),
        "tie: lower id"
    );
    // Second hour: δ = 2, a tie up to a factor of four.
    let later = secs(HOUR + 60);
    assert!(!prefers(&view(9, 50), &view(1, 20), later, &c));
    assert!(prefers(&view(9, 100), &view(1, 20), later, &c), "5× larger");
    // The younger cluster's age decides.
    let young = View {
        created: secs(HOUR),
        ..view(9, 50)
    };
    assert!(prefers(&young, &view(1, 20), later, &c));
}

#[test]
fn acceptability_needs_the_join_share_with_a_margin_for_sampling() {
    let c = config();
    // Every member measured: no sampling error, the bare 80 % rule.
    assert_eq!(judge(5, 4, 5, &c), Verdict::Acceptable);
    assert_eq!(judge(5, 3, 5, &c), Verdict::Unacceptable);
    // 16 of 20 sampled from 100: 80 % is not sure enough to join...
    assert_eq!(judge(20, 16, 100, &c), Verdict::Unsure);
    // ...all 32 within is.
    assert_eq!(judge(32, 32, 100, &c), Verdict::Acceptable);
    // Under 80 % is enough to split (no margin by default).
    assert_eq!(judge(32, 25, 100, &c), Verdict::Unacceptable);
    // Too few measured to tell.
    assert_eq!(judge(2, 2, 100, &c), Verdict::Unsure);
    assert_eq!(is_acceptable(2, 2, 100, &c), None);
    assert_eq!(is_acceptable(1, 1, 1, &c), Some(true));
}

/// The hysteresis: between the split rule (a blind sample under 80 %)
/// and the join rule (80 % plus two standard errors) a node neither
/// leaves its cluster nor joins one like it.
#[test]
fn a_cluster_near_the_threshold_is_neither_joined_nor_left() {
    let c = config();
    // 27 of 32 (84 %) of a 100-node cluster: not sure enough either way.
    assert_eq!(judge(32, 27, 100, &c), Verdict::Unsure);
    let mut rng = Rng::new(6);
    let mut m = Manager::new(1, 60, id(0xee));
    let now = secs(100);
    // Our own cluster, 17 of 20 members within (85 %): no split.
    observe(&mut m, now, 1..18, 0x33, ms(30), id(0x33));
    observe(&mut m, now, 18..21, 0x33, ms(90), id(0x33));
    let mut out = Vec::new();
    let current = member_of(0x33, 100);
    m.evaluate(now, current, &c, &mut rng, &mut out);
    assert_eq!(out, vec![Command::Explore], "no probe, no split");
    // Alone, with a candidate whose blind sample is 85 % within: not joined.
    let mut m = Manager::new(1, 60, id(0xee));
    observe(&mut m, now, 1..11, 0x44, ms(20), id(0xee));
    let mut out = Vec::new();
    m.evaluate(now, alone(0xee), &c, &mut rng, &mut out);
    let members: Vec<Contact> = (11..40).map(contact).collect();
    let rtt = |n: usize| if n % 7 == 0 { ms(90) } else { ms(20) };
    let rest = answer_with(&mut m, now, out, (0x44, 100), rtt, &members, &mut rng);
    assert!(
        !rest.iter().any(|c| matches!(c, Command::Switch { .. })),
        "{rest:?}"
    );
}

#[test]
fn leave_rule_is_half_the_accesses_missing_section_4_4() {
    let c = config();
    let a = |total, missed| Accesses { total, missed };
    assert!(a(8, 4).should_leave(&c));
    assert!(!a(8, 3).should_leave(&c));
    assert!(!a(7, 7).should_leave(&c), "too few accesses to judge");
}

#[test]
fn split_successors_are_hash_and_flipped_hash_iptps_2_5() {
    let (near, far) = split_ids(&id(7));
    assert_eq!(near, Id::hash(&[7; 20]));
    assert_eq!(far.0[0], near.0[0] ^ 0x80);
    assert_eq!(far.0[1..], near.0[1..]);
}

#[test]
fn hints_skip_private_routers_and_share_keys_between_prefixes() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    for a in [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "127.0.0.1",
        "169.254.1.1",
        "100.64.0.1",
        "fd00::1",
        "fe80::1",
    ] {
        assert!(!is_hint_address(ip(a)), "{a}");
    }
    for a in ["198.18.1.1", "8.8.8.8", "2001:db8::1"] {
        assert!(is_hint_address(ip(a)), "{a}");
    }
    let routers = [ip("10.0.0.1"), ip("4.1.2.1"), ip("4.9.9.9")];
    let keys = hint_keys(&routers, &[(ip("4.1.2.0"), 24), (ip("192.168.0.0"), 16)]);
    // Two public routers, each with its /24; the subnet 4.1.2.0/24 is the
    // first router's /24 (same key); the private subnet is skipped.
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(keys.contains(&Id::from_ip(ip("4.1.2.1"))));
    assert_eq!(
        hint_prefix_key(ip("4.1.2.1"), 24),
        hint_prefix_key(ip("4.1.2.200"), 24)
    );
    assert_ne!(
        hint_prefix_key(ip("4.1.2.1"), 24),
        hint_prefix_key(ip("4.1.3.1"), 24)
    );
    // At most five routers (§4.4).
    let many: Vec<IpAddr> = (1..=9).map(|i| ip(&format!("4.0.{i}.1"))).collect();
    assert_eq!(hint_keys(&many, &[]).len(), 2 * HINT_ROUTERS_MAX);
}

#[test]
fn ipv6_hints_are_by_address_and_48() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    // An IPv6 router: its address and its /48; the node's /64 subnet by
    // its /48 (here another one); link-local and ULA subnets skipped.
    let keys = hint_keys(
        &[ip("fe80::1"), ip("2001:db8:1::1")],
        &[
            (ip("2001:db8:7:1::"), 64),
            (ip("fe80::"), 64),
            (ip("fd00:1::"), 64),
        ],
    );
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert_eq!(keys[0], Id::from_ip(ip("2001:db8:1::1")));
    assert_eq!(keys[1], hint_prefix_key(ip("2001:db8:1:ffff::9"), 48));
    // A client anywhere in 2001:db8:7::/48 is looked up by that key.
    assert_eq!(keys[2], hint_prefix_key(ip("2001:db8:7:42::5"), 48));
    assert_ne!(
        hint_prefix_key(ip("2001:db8:7::1"), 48),
        hint_prefix_key(ip("2001:db8:8::1"), 48)
    );
}

/// Feeds `m` replies from members `from..to` of `cluster`, `rtt` each.
fn observe(
    m: &mut Manager,
    now: Time,
    members: std::ops::Range<u32>,
    cluster: u8,
    rtt: Duration,
    current: Id,
) {
    for n in members {
        m.observe(
            now,
            contact(n),
            Some(&info(cluster, 40)),
            rtt,
            false,
            current,
            &config(),
        );
    }
}

/// Answers every probe command in `cmds` (pings and Members) as members
/// of cluster `(id byte, size)`, the n-th reply after `rtt(n)`; Members
/// replies name `contacts`. Returns the other commands the manager gave.
fn answer_with(
    m: &mut Manager,
    now: Time,
    cmds: Vec<Command>,
    (cluster, size): (u8, u32),
    mut rtt: impl FnMut(usize) -> Duration,
    contacts: &[Contact],
    rng: &mut Rng,
) -> Vec<Command> {
    let mut rest = Vec::new();
    let mut queue = cmds;
    let mut n = 0;
    let (info, cfg) = (info(cluster, size), config());
    while !queue.is_empty() {
        let mut out = Vec::new();
        for cmd in queue {
            let (from, named, round) = match cmd {
                Command::Members { contact, round, .. } => (contact, contacts, round),
                Command::Ping { addr, round, .. } => {
                    let c = Contact {
                        id: Id::from_ip(addr.ip()),
                        addr,
                        services: Services::NONE,
                    };
                    (c, &[][..], round)
                }
                other => {
                    rest.push(other);
                    continue;
                }
            };
            n += 1;
            m.on_probe_reply(
                now,
                round,
                from,
                Some(&info),
                rtt(n),
                named,
                &cfg,
                rng,
                &mut out,
            );
        }
        queue = out;
    }
    rest
}

/// [`answer_with`] at one RTT.
fn answer(
    m: &mut Manager,
    now: Time,
    cmds: Vec<Command>,
    cluster: u8,
    rtt: Duration,
    contacts: &[Contact],
    rng: &mut Rng,
) -> Vec<Command> {
    answer_with(m, now, cmds, (cluster, 40), |_| rtt, contacts, rng)
}

fn alone(cluster: u8) -> Current {
    Current {
        view: view(cluster, 1),
        alone: true,
    }
}

/// A member of `cluster` of `size` nodes, with others.
fn member_of(cluster: u8, size: u32) -> Current {
    Current {
        view: view(cluster, size),
        alone: false,
    }
}

#[test]
fn a_lone_node_validates_and_joins_an_acceptable_cluster_section_4_4() {
    let mut rng = Rng::new(1);
    let mut m = Manager::new(1, 60, id(0xee));
    let now = secs(100);
    observe(&mut m, now, 1..11, 0x11, ms(20), id(0xee));
    let mut out = Vec::new();
    m.evaluate(now, alone(0xee), &config(), &mut rng, &mut out);
    assert!(
        out.iter().any(|c| matches!(c, Command::Members { .. })),
        "{out:?}"
    );
    let members: Vec<Contact> = (11..40).map(contact).collect();
    let rest = answer(&mut m, now, out, 0x11, ms(20), &members, &mut rng);
    let switched = rest.iter().find_map(|c| match c {
        Command::Switch {
            cluster,
            reason,
            members,
            ..
        } => Some((*cluster, *reason, members.len())),
        _ => None,
    });
    assert_eq!(
        switched.map(|s| (s.0, s.1)),
        Some((id(0x11), SwitchReason::Merge))
    );
    assert!(switched.unwrap().2 > 0, "members seed the new table");
    assert_eq!(m.stats().merges, 1);
}

#[test]
fn a_cluster_too_far_is_not_joined_and_not_retested_at_once() {
    let mut rng = Rng::new(2);
    let mut m = Manager::new(1, 60, id(0xee));
    let now = secs(100);
    // Ordinary traffic makes it look acceptable...
    observe(&mut m, now, 1..11, 0x11, ms(20), id(0xee));
    let mut out = Vec::new();
    m.evaluate(now, alone(0xee), &config(), &mut rng, &mut out);
    // ...but the blind sample is 90 ms away.
    let members: Vec<Contact> = (11..40).map(contact).collect();
    let rest = answer(&mut m, now, out, 0x11, ms(90), &members, &mut rng);
    assert!(
        !rest.iter().any(|c| matches!(c, Command::Switch { .. })),
        "{rest:?}"
    );
    // Five minutes on, the same observations do not start another validation.
    let later = now + Duration::from_secs(300);
    observe(&mut m, later, 1..11, 0x11, ms(20), id(0xee));
    let mut out = Vec::new();
    m.evaluate(later, alone(0xee), &config(), &mut rng, &mut out);
    assert!(
        !out.iter().any(|c| matches!(c, Command::Members { .. })),
        "{out:?}"
    );
}

#[test]
fn half_the_accesses_missing_makes_a_singleton_section_4_4() {
    let mut rng = Rng::new(3);
    let mut m = Manager::new(2, 20, id(0xee));
    let now = secs(100);
    // Ten accesses to our cluster 0x22, six over 20 ms.
    observe(&mut m, now, 1..5, 0x22, ms(5), id(0x22));
    observe(&mut m, now, 5..11, 0x22, ms(35), id(0x22));
    let mut out = Vec::new();
    let current = member_of(0x22, 11);
    m.evaluate(now, current, &config(), &mut rng, &mut out);
    let s = out.iter().find_map(|c| match c {
        Command::Switch {
            cluster, reason, ..
        } => Some((*cluster, *reason)),
        _ => None,
    });
    let (cluster, reason) = s.expect("left");
    assert_eq!(reason, SwitchReason::Singleton);
    assert_ne!(cluster, id(0x22));
    assert_eq!(m.stats().leaves, 1);
}

#[test]
fn an_unacceptable_cluster_splits_around_its_centre_iptps_2_5() {
    let mut rng = Rng::new(4);
    let cfg = config();
    let mut m = Manager::new(1, 60, id(0xee));
    let now = secs(100);
    let old = id(0x33);
    let (near, far) = split_ids(&old);
    // Our cluster: 10 members measured, 4 of them over 60 ms (60 % within,
    // but fewer than half the accesses missed: not the leave rule).
    observe(&mut m, now, 1..7, 0x33, ms(30), old);
    observe(&mut m, now, 7..11, 0x33, ms(90), old);
    let mut out = Vec::new();
    let current = member_of(0x33, 40);
    m.evaluate(now, current, &cfg, &mut rng, &mut out);
    // It first confirms with a blind sample of its cluster: 60 % again.
    let members: Vec<Contact> = (11..40).map(contact).collect();
    let mixed: Vec<Command> = out
        .into_iter()
        .filter(|c| !matches!(c, Command::Explore))
        .collect();
    let rtt = |n: usize| if (n - 1) % 5 < 3 { ms(30) } else { ms(90) };
    let rest = answer_with(&mut m, now, mixed, (0x33, 40), rtt, &members, &mut rng);
    // Split: get(cid^N) in our own cluster first.
    let (key, round) = match rest.as_slice() {
        [Command::Get { key, levels, round }] => {
            assert_eq!(levels.as_slice(), &[1]);
            (*key, *round)
        }
        other => panic!("expected the get for cid^N, got {other:?}"),
    };
    assert_eq!(key, near);
    assert_eq!(m.stats().splits, 1);
    // Nobody has split yet: the lookup ends at the centre, which is not us...
    let centre = Contact {
        id: near,
        ..contact(99)
    };
    let mut out = Vec::new();
    m.on_get_done(now, round, &[], Some(centre), &cfg, &mut rng, &mut out);
    let round = match out.as_slice() {
        [Command::Get { key, levels, round }] if *key == near && levels.as_slice() == [0] => *round,
        other => panic!("expected the get for cid^N at level 0, got {other:?}"),
    };
    let mut out = Vec::new();
    m.on_get_done(now, round, &[], None, &cfg, &mut rng, &mut out);
    // ...so it measures the centre: 40 ms, beyond half the threshold.
    let (addr, round) = match out.as_slice() {
        [Command::Ping { addr, round, .. }] => (*addr, *round),
        other => panic!("expected a ping to the centre, got {other:?}"),
    };
    assert_eq!(addr, centre.addr);
    let mut out = Vec::new();
    m.on_probe_reply(
        now,
        round,
        centre,
        Some(&info(0x33, 40)),
        ms(40),
        &[],
        &cfg,
        &mut rng,
        &mut out,
    );
    // Far from the centre: cid^F, where nobody is yet either.
    let round = match out.as_slice() {
        [Command::Get { key, round, .. }] if *key == far => *round,
        other => panic!("expected the get for cid^F, got {other:?}"),
    };
    let mut out = Vec::new();
    m.on_get_done(now, round, &[], None, &cfg, &mut rng, &mut out);
    let round = match out.as_slice() {
        [Command::Get { key, round, .. }] if *key == far => *round,
        other => panic!("expected the get for cid^F at level 0, got {other:?}"),
    };
    let mut out = Vec::new();
    m.on_get_done(now, round, &[], None, &cfg, &mut rng, &mut out);
    // It founds cid^F: first a put of cid^F → its address (levels 1, 0)...
    let round = match out.as_slice() {
        [Command::Put { key, levels, round }] if *key == far => {
            assert_eq!(levels.as_slice(), &[1, 0]);
            *round
        }
        other => panic!("expected the put for cid^F, got {other:?}"),
    };
    // ...then the switch.
    let mut out = Vec::new();
    m.on_put_done(round, &mut out);
    assert!(
        matches!(
            out.as_slice(),
            [Command::Switch { cluster, reason: SwitchReason::Split, .. }] if *cluster == far
        ),
        "{out:?}"
    );
}

#[test]
fn a_later_splitter_joins_the_successor_others_put_iptps_2_5() {
    let mut rng = Rng::new(5);
    let cfg = config();
    let mut m = Manager::new(1, 60, id(0xee));
    let now = secs(100);
    let old = id(0x44);
    let (near, _) = split_ids(&old);
    // Drive the manager into the split directly: all members are far.
    observe(&mut m, now, 1..11, 0x44, ms(70), old);
    let mut out = Vec::new();
    let current = member_of(0x44, 10);
    // Every access missed would make a singleton (the leave rule); with
    // fewer accesses than it needs, the split runs instead.
    m.accesses = Accesses {
        total: 2,
        missed: 2,
    };
    m.evaluate(now, current, &cfg, &mut rng, &mut out);
    let probe: Vec<Command> = out
        .into_iter()
        .filter(|c| !matches!(c, Command::Explore))
        .collect();
    let members: Vec<Contact> = (1..11).map(contact).collect();
    let rest = answer(&mut m, now, probe, 0x44, ms(70), &members, &mut rng);
    let round = match rest.as_slice() {
        [Command::Get { key, round, .. }] if *key == near => *round,
        other => panic!("expected the get for cid^N, got {other:?}"),
    };
    // Earlier splitters put themselves under cid^N: measure them.
    let joined: Vec<Value> = (50..54)
        .map(|n| Value::from_addr(contact(n).addr))
        .collect();
    let mut out = Vec::new();
    m.on_get_done(now, round, &joined, None, &cfg, &mut rng, &mut out);
    assert_eq!(out.len(), 4, "{out:?}");
    let rest = {
        let mut next = Vec::new();
        for cmd in out {
            if let Command::Ping { addr, round, .. } = cmd {
                let c = Contact {
                    id: Id::from_ip(addr.ip()),
                    addr,
                    services: Services::NONE,
                };
                let i = ClusterInfo {
                    id: near,
                    age_secs: 30,
                    size: 4,
                };
                m.on_probe_reply(
                    now,
                    round,
                    c,
                    Some(&i),
                    ms(10),
                    &[],
                    &cfg,
                    &mut rng,
                    &mut next,
                );
            }
        }
        next
    };
    let round = match rest.as_slice() {
        [Command::Put { key, round, .. }] if *key == near => *round,
        other => panic!("expected the put for cid^N, got {other:?}"),
    };
    let mut out = Vec::new();
    m.on_put_done(round, &mut out);
    match out.as_slice() {
        [Command::Switch {
            cluster,
            created,
            members,
            reason: SwitchReason::Split,
        }] => {
            assert_eq!(*cluster, near);
            assert_eq!(
                *created,
                now - Duration::from_secs(30),
                "the successor's age"
            );
            assert_eq!(members.len(), 4);
        }
        other => panic!("expected the switch to cid^N, got {other:?}"),
    }
}
