//! The start-up hint probe (§3.1, §4.4) across real hosts: three network
//! namespaces, A — R — B, with R routing between two subnets. Needs root and
//! iproute2 (`.ci/run` installs it).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{
    command_in, dns_query, in_netns, kdig_in, temp_dir, wait_until, write_file, Node, CORAL,
    START_WAIT,
};

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2 `ip` is needed for this test");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What `coral hints ARGS --json` run in the namespace `ns` found.
fn probe(ns: &str, args: &[&str]) -> serde_json::Value {
    let out = command_in(Some(ns), CORAL)
        .arg("hints")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Three namespaces, A — R — B, R routing between 198.18.1.0/24 and
/// 198.18.2.0/24.
#[test]
fn probe_finds_the_router_and_the_node_stores_its_hint() {
    let mut net = Net::with_prefix("4");
    let (a, r, b) = (net.host("a"), net.host("r"), net.host("b"));
    net.link(&a, "198.18.1.2", &r, "198.18.1.1");
    net.link(&r, "198.18.2.1", &b, "198.18.2.2");
    net.route(&a, "default", "198.18.1.1");
    net.route(&b, "default", "198.18.2.1");
    net.forward(&r);
    let found = probe(&a, &["--to", "198.18.2.2"]);
    let routers = found["routers"].as_array().unwrap();
    assert_eq!(routers.len(), 1, "{found}");
    assert_eq!(routers[0]["ttl"], 1);
    assert_eq!(routers[0]["addr"], "198.18.1.1");

    // A node in B, and a node in A joining through it: A's start-up probe
    // finds R and stores a hint under R's address pointing at A. A's
    // bootstrap needs B up: B serves before A starts.
    let node_b = Node::with_args(&["--dsht", "198.18.2.2:7000"])
        .netns(&b)
        .start();
    let node_a = Node::with_args(&["--dsht", "198.18.1.2:7000"])
        .args(&["--bootstrap", "198.18.2.2:7000"])
        .netns(&a)
        .spawn();
    let router_key = coral::Id::from_ip("198.18.1.1".parse().unwrap()).to_string();
    let hint = wait_until(START_WAIT, Duration::from_millis(500), || {
        let out = node_b.client_output(&["get", &router_key]);
        let hint: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if out.status.success() && hint["values"].as_array().is_some_and(|v| !v.is_empty()) {
            Ok(hint)
        } else {
            Err(format!(
                "no hint under the router's address pointing at node A: {hint}"
            ))
        }
    });
    drop(node_a);
    drop(node_b);
    let values = hint["values"].as_array().cloned().unwrap_or_default();
    assert!(
        values.iter().any(|v| v["addr"] == "198.18.1.2:7000"),
        "no hint under the router's address pointing at node A: {hint}"
    );
}

/// A network of namespaces joined by veth links, deleted when dropped.
struct Net {
    tag: u32,
    /// Set apart this network's namespaces and links from those of the
    /// other tests running at once (one process, one tag).
    prefix: &'static str,
    namespaces: Vec<String>,
    links: u32,
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Net {
    fn with_prefix(prefix: &'static str) -> Net {
        Net {
            tag: std::process::id() % 100_000,
            prefix,
            namespaces: Vec::new(),
            links: 0,
        }
    }

    /// A namespace named `coral-<prefix><name><tag>`, loopback up, IPv6
    /// duplicate address detection off (addresses usable at once).
    fn host(&mut self, name: &str) -> String {
        let ns = format!("coral-{}{name}{}", self.prefix, self.tag);
        ip(&["netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        sysctl(&ns, "net.ipv6.conf.default.accept_dad=0");
        ns
    }

    /// A veth link between `a` (address `a_addr`) and `b`, each with its
    /// prefix length: a /24 for IPv4, a /64 for IPv6. Returns the two
    /// ends' names.
    fn link(&mut self, a: &str, a_addr: &str, b: &str, b_addr: &str) -> (String, String) {
        self.links += 1;
        let (va, vb) = (
            format!("{}v{}a{}", self.prefix, self.links, self.tag),
            format!("{}v{}b{}", self.prefix, self.links, self.tag),
        );
        ip(&[
            "link", "add", &va, "netns", a, "type", "veth", "peer", "name", &vb, "netns", b,
        ]);
        for (ns, addr, dev) in [(a, a_addr, &va), (b, b_addr, &vb)] {
            if addr.contains(':') {
                self.addr6(ns, dev, addr);
            } else {
                ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            }
        }
        ip(&["-n", a, "link", "set", &va, "up"]);
        ip(&["-n", b, "link", "set", &vb, "up"]);
        (va, vb)
    }

    /// One more IPv6 address (a /64) on `dev` in `ns`.
    fn addr6(&self, ns: &str, dev: &str, addr: &str) {
        ip(&[
            "-n",
            ns,
            "-6",
            "addr",
            "add",
            &format!("{addr}/64"),
            "dev",
            dev,
            "nodad",
        ]);
    }

    fn route(&self, ns: &str, to: &str, via: &str) {
        if via.contains(':') {
            ip(&["-n", ns, "-6", "route", "add", to, "via", via]);
        } else {
            ip(&["-n", ns, "route", "add", to, "via", via]);
        }
    }

    /// Turns IPv6 forwarding on in `ns` (a router).
    fn forward6(&self, ns: &str) {
        sysctl(ns, "net.ipv6.conf.all.forwarding=1");
    }

    /// Turns IPv4 forwarding on in `ns` (a router).
    fn forward(&self, ns: &str) {
        sysctl(ns, "net.ipv4.ip_forward=1");
    }
}

/// Sets a sysctl inside `ns`.
fn sysctl(ns: &str, setting: &str) {
    let ok = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw", setting])
        .status()
        .unwrap();
    assert!(ok.success(), "sysctl {setting} in {ns}");
}

/// The address records of `name` (A, or AAAA when `server` is an IPv6
/// address) as dnssrv at `server` answers a client in `ns`.
fn kdig_addrs(ns: &str, server: &str, port: &str, name: &str) -> Vec<String> {
    let v6 = server.contains(':');
    let server = common::sock(server, port.parse().unwrap()).parse().unwrap();
    let qtype = if v6 { "AAAA" } else { "A" };
    kdig_in(
        Some(ns),
        server,
        &["+retry=2", "+timeout=2", "+short", name, qtype],
    )
    .lines()
    .filter(|l| {
        l.parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_ipv6() == v6)
    })
    .map(str::to_string)
    .collect()
}

/// Waits until dnssrv at `server`:5300 answers `name` to a client in `ns`.
fn wait_answered(ns: &str, server: &str, name: &str) {
    wait_until(Duration::from_secs(30), Duration::ZERO, || {
        (!kdig_addrs(ns, server, "5300", name).is_empty())
            .then_some(())
            .ok_or_else(|| "D never answered".to_string())
    });
}

/// The addresses of the five hosts of the hint lab (see the tests below):
/// dnssrv D, routers R2 and R1, node N and client C.
struct HintPlan {
    /// The lab's namespace and veth prefix.
    prefix: &'static str,
    /// D, and R2 on D's link.
    d: &'static str,
    r2_d: &'static str,
    /// R2 and R1 on their link, whose prefix holds N's hint.
    r2_r1: &'static str,
    r1_r2: &'static str,
    /// R1 and N on N's link, and N's network.
    r1_n: &'static str,
    n: &'static str,
    n_net: &'static str,
    /// R1 and C on C's link, and C's network.
    r1_c: &'static str,
    c: &'static str,
    c_net: &'static str,
    /// The R1–R2 link's prefix and its length, a key N's hints are under.
    link_prefix: &'static str,
    link_bits: u8,
}

impl HintPlan {
    fn v6(&self) -> bool {
        self.d.contains(':')
    }

    /// `addr:port`, bracketed for IPv6.
    fn sock(&self, addr: &str, port: u16) -> String {
        if self.v6() {
            format!("[{addr}]:{port}")
        } else {
            format!("{addr}:{port}")
        }
    }

    /// The A (or, over IPv6, AAAA) records dnssrv on D answers a client in `ns`.
    fn query(&self, ns: &str, name: &str) -> Vec<String> {
        kdig_addrs(ns, self.d, "5300", name)
    }
}

/// The hint lab end to end: N's start-up probe toward D finds R1 and R2 and
/// stores hints under their addresses and prefixes; C's first query is
/// answered with D (nearer C by prefix); D's probe toward C ends at R1,
/// answering from the R1–R2 link whose prefix is one of N's hint keys, so
/// then N is the answer.
///
/// ```text
///  D ── R2 ── R1–R2 link ── R1 ─┬─ N's link ── N
///  (dnssrv)                     └─ C's link ── C (client)
/// ```
fn dnssrv_answers_with_the_node_a_hint_names(p: &HintPlan) {
    let mut net = Net::with_prefix(p.prefix);
    let (d, r2, r1, n, c) = (
        net.host("d"),
        net.host("s"),
        net.host("q"),
        net.host("n"),
        net.host("c"),
    );
    net.link(&d, p.d, &r2, p.r2_d);
    net.link(&r2, p.r2_r1, &r1, p.r1_r2);
    net.link(&r1, p.r1_n, &n, p.n);
    net.link(&r1, p.r1_c, &c, p.c);
    net.route(&d, "default", p.r2_d);
    net.route(&r2, p.n_net, p.r1_r2);
    net.route(&r2, p.c_net, p.r1_r2);
    net.route(&r1, "default", p.r2_r1);
    net.route(&n, "default", p.r1_n);
    net.route(&c, "default", p.r1_c);
    if p.v6() {
        net.forward6(&r1);
        net.forward6(&r2);
    } else {
        net.forward(&r1);
        net.forward(&r2);
    }

    let dir = temp_dir("dns-hint");
    // One proxy per answer, so the order is the test.
    let config = write_file(
        dir.path(),
        "d.toml",
        format!(
            "http = \"{}\"\n[dnssrv]\nanswers_max = 1\n",
            p.sock(p.d, 8080)
        ),
    );
    let node_d = Node::with_args(&["--dsht", &p.sock(p.d, 7000)])
        .args(&["--dns", &p.sock(p.d, 5300)])
        .config(&config)
        .netns(&d)
        .start();
    let name = "www.x.com.http.L2.L1.L0.coralcdn.test";
    wait_answered(&d, p.d, name);
    let _n = Node::with_args(&["--dsht", &p.sock(p.n, 7000)])
        .args(&["--bootstrap", &p.sock(p.d, 7000)])
        .netns(&n)
        .spawn();
    // N's hint under the R1–R2 link's prefix is in the DSHT.
    let key = coral::dsht::cluster::hint_prefix_key(p.link_prefix.parse().unwrap(), p.link_bits)
        .to_string();
    wait_for_hint(
        &node_d,
        &key,
        &p.sock(p.n, 7000),
        "N's hint (the R1-R2 link)",
    );
    // C's first query: D knows nothing of C yet, and D's address shares
    // more of C's prefix than N's does: D answers with itself, and probes C.
    let first = p.query(&c, name);
    assert_eq!(first, vec![p.d.to_string()]);
    // Then the probe's last hop names N: once D has pinged it, it is the
    // answer.
    wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        let got = p.query(&c, name);
        if got == vec![p.n.to_string()] {
            Ok(())
        } else {
            Err(format!(
                "never answered with the node near the client: {got:?}"
            ))
        }
    });
}

/// §3.1 and §4.4 end to end: dnssrv probes a client's path, looks up the
/// clustering hints stored under the client's last hops, and answers with
/// the node near the client that stored them — not with itself, which is
/// nearer by address prefix and RTT level alone.
///
/// ```text
///  D 198.18.6.2 ── R2 ── 198.19.5.0/24 ── R1 ─┬─ 198.19.1.0/24 ── N 198.19.1.2
///  (dnssrv)                                   └─ 198.18.2.0/24 ── C 198.18.2.2 (client)
/// ```
///
/// N's start-up probe toward D finds R1 and R2 and stores hints under their
/// addresses and /24s; D's probe toward C ends at R1, answering from
/// 198.19.5.2, whose /24 is one of N's hint keys.
#[test]
fn dnssrv_answers_with_the_node_a_hint_names_near_the_client() {
    dnssrv_answers_with_the_node_a_hint_names(&HintPlan {
        prefix: "",
        d: "198.18.6.2",
        r2_d: "198.18.6.1",
        r2_r1: "198.19.5.1",
        r1_r2: "198.19.5.2",
        r1_n: "198.19.1.1",
        n: "198.19.1.2",
        n_net: "198.19.1.0/24",
        r1_c: "198.18.2.1",
        c: "198.18.2.2",
        c_net: "198.18.2.0/24",
        link_prefix: "198.19.5.0",
        link_bits: 24,
    });
}

/// Waits (up to 60 s) until the DSHT, asked through `node`, holds a value
/// under `key` naming the node at `addr`.
fn wait_for_hint(node: &Node, key: &str, addr: &str, what: &str) {
    wait_until(START_WAIT, Duration::from_millis(300), || {
        let out = node.client_output(&["get", key]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if v["values"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["addr"] == addr))
        {
            Ok(())
        } else {
            Err(format!("no value under {key}: {what}: {v}"))
        }
    })
}

/// The IPv6 probe (ICMPv6 time exceeded through `IPV6_RECVERR`) across a
/// router, and a node's start-up hint under its IPv6 router:
///
/// ```text
///  A 2001:db8:1::2 ── 2001:db8:1::1 R 2001:db8:2::1 ── B 2001:db8:2::2
/// ```
#[test]
fn ipv6_probe_finds_the_router_and_the_node_stores_its_hint() {
    let mut net = Net::with_prefix("6");
    let (a, r, b) = (net.host("a"), net.host("r"), net.host("b"));
    net.link(&a, "2001:db8:1::2", &r, "2001:db8:1::1");
    net.link(&r, "2001:db8:2::1", &b, "2001:db8:2::2");
    net.route(&a, "default", "2001:db8:1::1");
    net.route(&b, "default", "2001:db8:2::1");
    net.forward6(&r);

    let found = probe(&a, &["--to", "2001:db8:2::2", "--timeout-ms", "3000"]);
    let routers = found["routers"].as_array().unwrap();
    assert_eq!(routers.len(), 1, "{found}");
    assert_eq!(routers[0]["ttl"], 1);
    assert_eq!(routers[0]["addr"], "2001:db8:1::1");
    assert_eq!(routers[0]["hint"], true);

    // A node in B, and a node in A joining through it over IPv6: A's
    // start-up probe finds R and stores hints under R's address and its /48
    // pointing at A.
    let node_b = Node::with_args(&["--dsht", "[2001:db8:2::2]:7000"])
        .netns(&b)
        .start();
    let _a = Node::with_args(&["--dsht", "[2001:db8:1::2]:7000"])
        .args(&["--bootstrap", "[2001:db8:2::2]:7000"])
        .netns(&a)
        .spawn();
    let router: std::net::IpAddr = "2001:db8:1::1".parse().unwrap();
    for key in [
        coral::Id::from_ip(router),
        coral::dsht::cluster::hint_prefix_key(router, 48),
    ] {
        wait_for_hint(
            &node_b,
            &key.to_string(),
            "[2001:db8:1::2]:7000",
            "node A's hint (the router 2001:db8:1::1)",
        );
    }
}

/// §3.1 and §4.4 end to end over IPv6, as
/// `dnssrv_answers_with_the_node_a_hint_names_near_the_client` over IPv4:
///
/// ```text
///  D 2001:db8:6::2 ── R2 ── 2001:db8:5::/64 ── R1 ─┬─ 2001:db8:11::/64 ── N 2001:db8:11::2
///  (dnssrv)                                        └─ 2001:db8:2::/64 ── C 2001:db8:2::2 (client)
/// ```
///
/// N's start-up probe toward D finds R1 and R2 and stores hints under their
/// addresses and /48s; D's probe toward C (ICMPv6 from each hop) ends at
/// R1, answering from 2001:db8:5::2, whose /48 is one of N's hint keys.
#[test]
fn ipv6_dnssrv_answers_with_the_node_a_hint_names_near_the_client() {
    dnssrv_answers_with_the_node_a_hint_names(&HintPlan {
        prefix: "6h",
        d: "2001:db8:6::2",
        r2_d: "2001:db8:6::1",
        r2_r1: "2001:db8:5::1",
        r1_r2: "2001:db8:5::2",
        r1_n: "2001:db8:11::1",
        n: "2001:db8:11::2",
        n_net: "2001:db8:11::/64",
        r1_c: "2001:db8:2::1",
        c: "2001:db8:2::2",
        c_net: "2001:db8:2::/64",
        link_prefix: "2001:db8:5::",
        link_bits: 48,
    });
}

/// Sends `q` from each of `sources` (addresses in `ns`) to `server` at
/// once, then waits for every answer and checks that it is NOERROR.
fn query_from(ns: &str, sources: Vec<String>, server: std::net::SocketAddr, q: Vec<u8>) {
    in_netns(ns, move || {
        let sockets: Vec<std::net::UdpSocket> = sources
            .iter()
            .map(|a| std::net::UdpSocket::bind(format!("[{a}]:0")).unwrap())
            .collect();
        for s in &sockets {
            s.send_to(&q, server).unwrap();
        }
        for s in &sockets {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut b = [0u8; 1500];
            let (n, _) = s.recv_from(&mut b).expect("an answer for every client");
            assert!(n >= 12);
            assert_eq!(b[3] & 0x0f, 0, "rcode");
        }
    });
}

/// Coral is no probe reflector over IPv6 either: queries from twenty
/// addresses of one /56, all before any probe has come back, start at most
/// `probes_per_prefix` (4) probes; two clients of another /56 of the same
/// /48 have a budget of their own.
#[test]
fn ipv6_client_probes_are_bounded_per_slash_56() {
    let mut net = Net::with_prefix("6p");
    let (d, c) = (net.host("d"), net.host("c"));
    let (vd, vc) = net.link(&d, "2001:db8:6::2", &c, "2001:db8:6::1");
    // Two /56s of D's /48 (not D's own /56), on the link.
    let one: Vec<String> = (1..=20).map(|i| format!("2001:db8:6:200::{i}")).collect();
    let next: Vec<String> = (1..=2).map(|i| format!("2001:db8:6:300::{i}")).collect();
    for a in one.iter().chain(&next) {
        net.addr6(&c, &vc, a);
    }
    for p in ["2001:db8:6:200::/64", "2001:db8:6:300::/64"] {
        ip(&["-n", &d, "-6", "route", "add", p, "dev", &vd]);
    }

    let dir = temp_dir("dns-probe6");
    let config = write_file(
        dir.path(),
        "d.toml",
        "http = \"[2001:db8:6::2]:8080\"\n[dnssrv]\nrrl_responses_per_sec = 0\n",
    );
    let node_d = Node::with_args(&["--dsht", "[2001:db8:6::2]:7000"])
        .args(&["--dns", "[2001:db8:6::2]:5300", "--config"])
        .args(&[config.to_str().unwrap()])
        .netns(&d)
        .start();
    let name = "www.x.com.http.L2.L1.L0.coralcdn.test";
    // D's own loopback asks (not counted against C's prefixes).
    wait_answered(&d, "2001:db8:6::2", name);
    let before = node_d.dns_counters();
    let sent0 = before["probes_sent"].as_u64().unwrap();
    let refused0 = before["probes_refused"].as_u64().unwrap();
    let server: std::net::SocketAddr = "[2001:db8:6::2]:5300".parse().unwrap();
    query_from(&c, one, server, dns_query(7, name, 28, false));
    let c1 = node_d.dns_counters();
    assert_eq!(c1["probes_sent"].as_u64().unwrap() - sent0, 4, "{c1}");
    assert_eq!(
        c1["probes_refused"].as_u64().unwrap() - refused0,
        16,
        "{c1}"
    );
    query_from(&c, next, server, dns_query(8, name, 28, false));
    let c2 = node_d.dns_counters();
    assert_eq!(c2["probes_sent"].as_u64().unwrap() - sent0, 6, "{c2}");
    assert_eq!(
        c2["probes_refused"].as_u64().unwrap() - refused0,
        16,
        "{c2}"
    );
}
