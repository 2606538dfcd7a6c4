//! dnssrv (NSDI 2004 §3.1) on a running `coral node`, queried by real
//! clients (kdig, dig, a real recursive resolver: unbound) on 127.13.x.y,
//! each test in a network namespace of its own (`common::own_network`):
//! port 53, nginx's 8080 and the node's default ports are the test's,
//! whatever the host runs.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    dns_flags as flags, dns_query as query, dns_status as status, kdig, rcode, records, temp_dir,
    wait_for_port, web_root, Nginx, Node, Proc,
};

const DNS_PORT: u16 = 5300;

/// One `coral node --cores 1` serving DNS on `ip:port`.
struct DnsNode {
    node: Node,
    dns: SocketAddr,
}

impl DnsNode {
    /// Its proxy's address (in its config) on :8080; ready when it answers
    /// a query.
    fn start(ip: &str, port: u16, extra_config: &str) -> DnsNode {
        let node = Node::on(ip)
            .dns(port)
            .config_text(&format!("http = \"{ip}:8080\"\n{extra_config}"))
            .start();
        let dns: SocketAddr = format!("{ip}:{port}").parse().unwrap();
        let start = Instant::now();
        let q = query(1, "coralcdn.test", 6, false);
        while udp_exchange(dns, &q, Duration::from_millis(200)).is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "node at {ip} did not answer DNS"
            );
        }
        DnsNode { node, dns }
    }

    fn kdig(&self, args: &[&str]) -> String {
        kdig(self.dns, args)
    }
}

/// unbound (Debian's) on `listen`, resolving the zones `coralcdn.test` and
/// `coral.test` through `stub` (`ip@port`), its files in `dir`; ready once
/// it answers.
fn unbound(dir: &Path, listen: SocketAddr, stub: &str, verbosity: u8) -> Proc {
    // unbound answers the special-use `test.` itself (RFC 6761) unless told not to.
    let d = dir.display();
    let conf = dir.join("unbound.conf");
    std::fs::write(
        &conf,
        format!(
            "server:\n  interface: {ip}\n  port: {port}\n  do-not-query-localhost: no\n  \
             chroot: \"\"\n  username: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  \
             use-syslog: no\n  logfile: \"\"\n  module-config: \"iterator\"\n  do-ip6: no\n  \
             access-control: 127.0.0.0/8 allow\n  verbosity: {verbosity}\n  \
             local-zone: \"test.\" nodefault\n\
             stub-zone:\n  name: \"coralcdn.test\"\n  stub-addr: {stub}\n\
             stub-zone:\n  name: \"coral.test\"\n  stub-addr: {stub}\n",
            ip = listen.ip(),
            port = listen.port(),
        ),
    )
    .unwrap();
    let proc = Proc::spawn(
        Command::new("/usr/sbin/unbound")
            .args(["-d", "-c", conf.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit()),
        "start unbound",
    );
    let start = Instant::now();
    while udp_exchange(
        listen,
        &query(1, "coralcdn.test", 6, false),
        Duration::from_millis(300),
    )
    .is_none()
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "unbound did not start"
        );
    }
    proc
}

/// One length-prefixed DNS message read from a TCP stream (RFC 7766 §8).
fn read_tcp_message(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut a = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut a)?;
    Ok(a)
}

/// `q` over a new TCP connection to `server`, framed, and its answer.
fn tcp_exchange(server: SocketAddr, q: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(server).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&(q.len() as u16).to_be_bytes()).unwrap();
    s.write_all(q).unwrap();
    read_tcp_message(&mut s).unwrap()
}

fn udp_exchange(server: SocketAddr, q: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let s = UdpSocket::bind("127.13.0.200:0").ok()?;
    s.set_read_timeout(Some(wait)).ok()?;
    s.send_to(q, server).ok()?;
    let mut buf = [0u8; 4096];
    let (n, _) = s.recv_from(&mut buf).ok()?;
    Some(buf[..n].to_vec())
}

#[test]
fn nsdi2004_3_1_ttls_and_resolver_locking_at_each_level() {
    common::own_network();
    // Clients in 127.13.2/24 are 100 ms away (level 0), 127.13.3/24 40 ms
    // (level 1 within 60 ms), 127.13.4/24 5 ms (level 2 within 20 ms).
    let node = DnsNode::start(
        "127.13.1.1",
        DNS_PORT,
        "[dnssrv]\nclient_rtt_ms = { \"127.13.2.0\" = 100, \"127.13.3.0\" = 40, \"127.13.4.0\" = 5 }\n",
    );
    let name = "www.x.com.http.L2.L1.L0.coralcdn.test";
    for (client, ttl, zone) in [
        ("127.13.2.1", 20, "L0.coralcdn.test."),
        ("127.13.3.1", 20, "L1.L0.coralcdn.test."),
        ("127.13.4.1", 30, "L2.L1.L0.coralcdn.test."),
    ] {
        let out = node.kdig(&["-b", client, name, "A"]);
        assert_eq!(status(&out), "NOERROR", "{out}");
        assert!(flags(&out).contains("aa"), "{out}");
        assert!(!flags(&out).contains("ra"), "{out}");
        let answer = records(&out, "ANSWER");
        assert_eq!(answer.len(), 1, "{out}");
        assert_eq!(
            (answer[0].1, answer[0].2.as_str(), answer[0].3.as_str()),
            (ttl, "A", "127.13.1.1")
        );
        let auth = records(&out, "AUTHORITY");
        assert_eq!(auth.len(), 1, "{out}");
        let ns_name = format!("ns-7f0d0101.{zone}");
        assert!(auth[0].0.eq_ignore_ascii_case(zone), "{out}");
        assert_eq!((auth[0].1, auth[0].2.as_str()), (3600, "NS"));
        assert!(auth[0].3.eq_ignore_ascii_case(&ns_name), "{out}");
        let glue = records(&out, "ADDITIONAL");
        assert!(
            glue.iter().any(|g| g.0.eq_ignore_ascii_case(&ns_name)
                && g.1 == 3600
                && g.2 == "A"
                && g.3 == "127.13.1.1"),
            "{out}"
        );
    }
    // RFC 7871: a far resolver (level 0) asking for a client subnet that is
    // near (level 2) gets level 2's answer, scoped to the subnet's /24.
    let out = node.kdig(&["-b", "127.13.2.1", "+subnet=127.13.4.0/24", name, "A"]);
    assert_eq!(records(&out, "ANSWER")[0].1, 30, "{out}");
    assert!(out.contains("CLIENT-SUBNET: 127.13.4.0/24/24"), "{out}");
    // A client not measured yet starts at level 0 and is measured in the
    // background (loopback: well within level 2's 20 ms).
    let out = node.kdig(&["-b", "127.13.5.1", name, "A"]);
    assert_eq!(records(&out, "ANSWER")[0].1, 20, "{out}");
    let start = Instant::now();
    loop {
        let out = node.kdig(&["-b", "127.13.5.1", name, "A"]);
        if records(&out, "ANSWER").first().is_some_and(|a| a.1 == 30) {
            let auth = records(&out, "AUTHORITY");
            assert!(
                auth[0].0.eq_ignore_ascii_case("L2.L1.L0.coralcdn.test."),
                "{out}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never measured: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rfc6672_alias_dname_nodata_refused_badvers_and_case() {
    common::own_network();
    let node = DnsNode::start("127.13.1.2", DNS_PORT, "");
    // DNAME, the synthesized CNAME, then the proxy.
    let out = node.kdig(&["www.x.com.coral.test", "A"]);
    let answer = records(&out, "ANSWER");
    assert_eq!(answer.len(), 3, "{out}");
    assert_eq!(
        (
            answer[0].0.as_str(),
            answer[0].2.as_str(),
            answer[0].3.as_str()
        ),
        ("coral.test.", "DNAME", "http.L2.L1.L0.coralcdn.test.")
    );
    assert_eq!(answer[1].2, "CNAME");
    assert!(answer[1]
        .3
        .eq_ignore_ascii_case("www.x.com.http.L2.L1.L0.coralcdn.test."));
    assert_eq!(
        (answer[2].2.as_str(), answer[2].3.as_str()),
        ("A", "127.13.1.2")
    );
    // RFC 8020: a name with names under it is NODATA with the SOA.
    for name in ["L1.L0.coralcdn.test", "L0.coralcdn.test"] {
        let out = node.kdig(&[name, "A"]);
        assert_eq!(status(&out), "NOERROR", "{out}");
        assert!(records(&out, "ANSWER").is_empty(), "{out}");
        let auth = records(&out, "AUTHORITY");
        assert_eq!(auth[0].2, "SOA", "{out}");
        assert!(auth[0].0.eq_ignore_ascii_case(&format!("{name}.")));
    }
    // A name that does not exist: NXDOMAIN with the SOA.
    let out = node.kdig(&["nothing.coralcdn.test", "A"]);
    assert_eq!(status(&out), "NXDOMAIN", "{out}");
    assert_eq!(records(&out, "AUTHORITY")[0].2, "SOA");
    // Outside the zones.
    assert_eq!(status(&node.kdig(&["example.org", "A"])), "REFUSED");
    // EDNS version 1.
    let out = node.kdig(&["+edns=1", "www.x.com.coral.test", "A"]);
    assert_eq!(status(&out), "BADVERS", "{out}");
    // Letter case: dig sends the name as typed; the question and the
    // synthesized CNAME keep it.
    let out = Command::new("dig")
        .args(["@127.13.1.2", "-p", &DNS_PORT.to_string(), "+norecurse"])
        .args(["wWw.X.cOm.coral.test", "A"])
        .output()
        .expect("run dig");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains(";wWw.X.cOm.coral.test."), "{out}");
    assert!(
        out.contains("wWw.X.cOm.http.L2.L1.L0.coralcdn.test."),
        "{out}"
    );
    // The same through the raw wire: byte for byte.
    let q = query(7, "wWw.X.cOm.coral.test", 1, false);
    let a = udp_exchange(node.dns, &q, Duration::from_secs(5)).unwrap();
    assert_eq!(&a[12..12 + 22], &q[12..12 + 22]);
}

#[test]
fn rfc7766_tc_over_udp_and_the_whole_answer_over_pipelined_tcp() {
    common::own_network();
    let node = DnsNode::start("127.13.1.3", DNS_PORT, "");
    // A long alias name: DNAME, CNAME and A exceed 512 octets without EDNS.
    let name = format!("{0}.{0}.{0}.{1}.coral.test", "a".repeat(63), "b".repeat(33));
    let out = node.kdig(&["+noedns", "+ignore", &name, "A"]);
    assert!(flags(&out).contains("tc"), "{out}");
    assert!(records(&out, "ANSWER").is_empty(), "{out}");
    let out = node.kdig(&["+tcp", &name, "A"]);
    assert!(!flags(&out).contains("tc"), "{out}");
    assert_eq!(records(&out, "ANSWER").len(), 3, "{out}");
    // Pipelined: three queries in one write, three answers in order.
    let mut s = TcpStream::connect(node.dns).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut batch = Vec::new();
    for (id, n) in [
        (11u16, "a.coral.test"),
        (12, &name[..]),
        (13, "example.org"),
    ] {
        let q = query(id, n, 1, false);
        batch.extend_from_slice(&(q.len() as u16).to_be_bytes());
        batch.extend_from_slice(&q);
    }
    s.write_all(&batch).unwrap();
    for (id, rc) in [(11u16, 0u8), (12, 0), (13, 5)] {
        let a = read_tcp_message(&mut s).unwrap();
        assert_eq!(u16::from_be_bytes([a[0], a[1]]), id);
        assert_eq!(rcode(&a), rc);
        assert_eq!(a[2] & 0x02, 0, "no TC over TCP");
    }
}

#[test]
fn malformed_packets_get_formerr_or_silence_and_the_next_query_is_answered() {
    common::own_network();
    let node = DnsNode::start("127.13.1.4", DNS_PORT, "");
    let good = query(42, "www.x.com.coral.test", 1, true);
    let header = |id: u8, qd: u8, ar: u8| vec![0, id, 1, 0, 0, qd, 0, 0, 0, 0, 0, ar];
    // A compression loop: the name points at itself.
    let mut looped = header(1, 1, 0);
    looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    // A label of 64 octets.
    let mut label64 = header(2, 1, 0);
    label64.push(64);
    label64.extend_from_slice(&[b'a'; 64]);
    label64.extend_from_slice(&[0, 0, 1, 0, 1]);
    // Lying counts: two questions announced, one there; an additional
    // record announced, none there.
    let mut lying = query(3, "www.x.com.coral.test", 1, false);
    lying[5] = 2;
    let mut lying_ar = query(4, "www.x.com.coral.test", 1, false);
    lying_ar[11] = 1;
    for (bad, id) in [(&looped, 1u8), (&label64, 2), (&lying, 3), (&lying_ar, 4)] {
        let a = udp_exchange(node.dns, bad, Duration::from_secs(5)).expect("an answer");
        assert_eq!(a[1], id);
        assert_eq!(rcode(&a), 1, "FORMERR");
        let a = udp_exchange(node.dns, &good, Duration::from_secs(5)).expect("still answering");
        assert_eq!(rcode(&a), 0);
    }
    // A bare `hello` is not a DNS message: silence, and the server goes on.
    assert!(udp_exchange(node.dns, b"hello", Duration::from_millis(300)).is_none());
    let a = udp_exchange(node.dns, &good, Duration::from_secs(5)).expect("still answering");
    assert_eq!(rcode(&a), 0);
    // Over TCP too.
    let a = tcp_exchange(node.dns, &looped);
    assert_eq!(rcode(&a), 1);
}

#[test]
fn unbound_resolves_the_alias_through_dname_and_cname_to_the_proxy() {
    common::own_network();
    // Port 53 (the test's own network has it free), so the name servers'
    // glue, which carries no port, is reachable too.
    let ip = "127.13.7.1";
    let port = 53;
    let _node = DnsNode::start(ip, port, "");
    let dir = temp_dir("unbound");
    let resolver: SocketAddr = "127.13.7.53:5301".parse().unwrap();
    let _unbound = unbound(dir.path(), resolver, &format!("{ip}@{port}"), 1);
    let out = kdig(resolver, &["www.x.com.coral.test", "A"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    assert!(flags(&out).contains("ra"), "a recursive answer: {out}");
    let answer = records(&out, "ANSWER");
    assert!(answer.iter().any(|r| r.2 == "DNAME"), "{out}");
    assert!(answer.iter().any(|r| r.2 == "CNAME"), "{out}");
    assert!(
        answer.iter().any(|r| r.2 == "A" && r.3 == ip),
        "the proxy's address through the resolver: {out}"
    );
    // A second Coralized name resolves through the same resolver's cache
    // of the DNAME.
    let out = kdig(resolver, &["img.y.org.coral.test", "A"]);
    assert!(
        records(&out, "ANSWER")
            .iter()
            .any(|r| r.2 == "A" && r.3 == ip),
        "{out}"
    );
}

#[test]
fn rfc7766_tcp_connections_are_capped_and_idle_ones_closed() {
    common::own_network();
    let node = DnsNode::start(
        "127.13.1.5",
        DNS_PORT,
        "[dnssrv]\ntcp_connections_max = 2\ntcp_idle_ms = 500\n",
    );
    let ask = |s: &mut TcpStream, id: u16| -> std::io::Result<u16> {
        let q = query(id, "a.coral.test", 1, false);
        s.write_all(&(q.len() as u16).to_be_bytes())?;
        s.write_all(&q)?;
        let a = read_tcp_message(s)?;
        Ok(u16::from_be_bytes([a[0], a[1]]))
    };
    let open = || {
        let s = TcpStream::connect(node.dns).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let (mut a, mut b) = (open(), open());
    assert_eq!(ask(&mut a, 1).unwrap(), 1);
    assert_eq!(ask(&mut b, 2).unwrap(), 2);
    // A third while two are open: the older idle one (a) is evicted for it
    // (issue #23), and it is answered.
    let mut c = open();
    assert_eq!(ask(&mut c, 3).unwrap(), 3);
    let mut buf = [0u8; 1];
    assert!(matches!(a.read(&mut buf), Ok(0) | Err(_)), "a was evicted");
    // An idle connection is closed after tcp_idle_ms (the read sees the
    // end of the stream), which makes room for a new one.
    assert_eq!(b.read(&mut buf).unwrap(), 0);
    let start = Instant::now();
    loop {
        let mut d = open();
        if ask(&mut d, 4).is_ok_and(|id| id == 4) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no room after the idle ones closed"
        );
    }
}

#[test]
fn nsdi2004_3_1_a_non_recursive_proxy_only_for_clients_on_its_network() {
    common::own_network();
    let node = DnsNode::start("127.13.1.6", DNS_PORT, "[dnssrv]\nnon_recursive = true\n");
    let name = "www.x.com.http.L2.L1.L0.coralcdn.test";
    let near = node.kdig(&["-b", "127.13.1.77", name, "A"]);
    assert_eq!(records(&near, "ANSWER")[0].3, "127.13.1.6", "{near}");
    let far = node.kdig(&["-b", "127.13.6.77", name, "A"]);
    assert_eq!(status(&far), "NOERROR", "{far}");
    assert!(records(&far, "ANSWER").is_empty(), "{far}");
    assert_eq!(records(&far, "AUTHORITY")[0].2, "SOA", "{far}");
}

#[test]
fn nsdi2004_3_1_with_no_live_proxy_the_answer_waits_for_a_ping() {
    common::own_network();
    // D's own proxy is non-recursive, so a client on another network can
    // only be sent to N; D counts N live for one second after it last
    // answered an RPC, and holds a query up to 3 s while it pings.
    let d = DnsNode::start(
        "127.13.11.1",
        DNS_PORT,
        "[dnssrv]\nnon_recursive = true\nlive_secs = 1\nhold_ms = 3000\n",
    );
    let n = Node::on("127.13.12.1").bootstrap("127.13.11.1").spawn();
    let name = "www.x.com.http.L2.L1.L0.coralcdn.test";
    let far = "127.13.13.1";
    let a_records = |out: &str| -> Vec<String> {
        records(out, "ANSWER")
            .into_iter()
            .filter(|r| r.2 == "A")
            .map(|r| r.3)
            .collect()
    };
    // N joined and D verified it.
    let start = Instant::now();
    loop {
        let out = d.kdig(&["-b", far, name, "A"]);
        if a_records(&out) == ["127.13.12.1"] {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "N never offered: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Whenever N's verification has aged past a second, the query waits
    // for D's ping of N and is answered with N, never with nothing.
    let start = Instant::now();
    loop {
        // Let N's last verification age past `live_secs`.
        std::thread::sleep(Duration::from_millis(1200));
        let out = d.kdig(&["-b", far, name, "A"]);
        assert_eq!(a_records(&out), ["127.13.12.1"], "{out}");
        let c = d.node.dns_counters();
        if c["held_answered"].as_u64().unwrap_or(0) >= 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "no query was ever held: {c}"
        );
    }
    // N stops: a held query is answered at its deadline, with no proxy
    // rather than a dead one.
    drop(n);
    std::thread::sleep(Duration::from_millis(1200));
    let held = Instant::now();
    // (One try, waiting out the 3 s hold.)
    let out = d.kdig(&["+retry=0", "+timeout=8", "-b", far, name, "A"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    assert!(a_records(&out).is_empty(), "{out}");
    assert!(held.elapsed() >= Duration::from_millis(1000), "not held");
    let c = d.node.dns_counters();
    assert!(c["held_expired"].as_u64().unwrap_or(0) >= 1, "{c}");
    assert!(c["queries_a"].as_u64().unwrap_or(0) >= 3, "{c}");
    assert!(c["rcode_noerror"].as_u64().unwrap_or(0) >= 3, "{c}");
}

/// The paper's path for an unmodified client, end to end: curl resolves a
/// Coralized URL through the system resolver (glibc, `/etc/resolv.conf`
/// bind-mounted in a mount namespace) to unbound, which recurses through
/// the alias's DNAME into dnssrv's zone and gets the proxy's address; curl
/// then fetches the object through that proxy from an nginx origin.
#[test]
fn curl_through_unbound_fetches_a_coralized_url_through_the_proxy_it_was_given() {
    common::own_network();
    let (ip, resolver_ip, origin) = ("127.13.14.1", "127.13.14.53", "127.13.14.100:8080");
    let dir = temp_dir("curl");
    let d = dir.path().display().to_string();
    // The origin: nginx serving one file.
    let hello = "served by nginx, through coral\n";
    let root = web_root(dir.path(), &[("hello.txt", hello.as_bytes())]);
    let nginx = Nginx::start(dir.path(), origin.parse().unwrap(), &root);
    let _node = DnsNode::start(
        ip,
        53,
        &format!(
            "[proxy]\ncache_dir = \"{d}/cache\"\ncache_size = \"64MiB\"\n\
             allow_private_origins = true\nresolve = [\"origin.demo.test=127.13.14.100\"]\n"
        ),
    );
    wait_for_port(format!("{ip}:8080").parse().unwrap(), "the proxy");
    let resolver: SocketAddr = format!("{resolver_ip}:53").parse().unwrap();
    let _unbound = unbound(dir.path(), resolver, &format!("{ip}@53"), 0);
    std::fs::write(
        dir.path().join("resolv.conf"),
        format!("nameserver {resolver_ip}\noptions timeout:2 attempts:3\n"),
    )
    .unwrap();
    // The Coralized URL: origin host, its port, the alias; the proxy's port.
    let url = "http://origin.demo.test.8080.coral.test:8080/hello.txt";
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c"])
        .arg(format!(
            "mount --bind {d}/resolv.conf /etc/resolv.conf && \
             curl -4 -sS --max-time 30 -o {d}/fetched.txt -w '%{{http_code}} %{{remote_ip}}' {url}"
        ))
        .output()
        .expect("unshare and curl");
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        summary,
        format!("200 {ip}"),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = std::fs::read_to_string(dir.path().join("fetched.txt")).unwrap_or_default();
    assert_eq!(body, "served by nginx, through coral\n");
    let log = nginx.log();
    assert!(
        log.contains("GET /hello.txt"),
        "the proxy fetched from the origin: {log}"
    );
    drop(nginx);
}

/// Coral is no probe reflector: queries from twenty addresses of one /24,
/// all before any probe has come back, start at most `probes_per_prefix`
/// (4) probes; the rest are refused and counted.
#[test]
fn client_probes_are_bounded_per_slash_24() {
    common::own_network();
    let node = DnsNode::start(
        "127.13.15.1",
        DNS_PORT,
        "[dnssrv]\nrrl_responses_per_sec = 0\n",
    );
    let q = query(7, "www.x.com.http.L2.L1.L0.coralcdn.test", 1, false);
    let sockets: Vec<UdpSocket> = (1..=20)
        .map(|i| UdpSocket::bind(format!("127.13.16.{i}:0")).unwrap())
        .collect();
    for s in &sockets {
        s.send_to(&q, node.dns).unwrap();
    }
    for s in &sockets {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 1500];
        let (n, _) = s.recv_from(&mut b).expect("an answer for every client");
        assert_eq!(rcode(&b[..n]), 0);
    }
    let c = node.node.dns_counters();
    assert_eq!(c["probes_sent"], 4, "{c}");
    assert_eq!(c["probes_refused"], 16, "{c}");
    assert_eq!(c["client_level0"], 20, "not measured yet: level 0; {c}");
}

/// Queries that arrive together are read in batches (`recvmmsg`) and
/// answered in batches (`sendmmsg`), each answer to the address its query
/// came from as the kernel gave it: a burst from eight senders gets every
/// answer, each to its own sender, with its own id and question (issue 27:
/// the batch keeps the kernel's addresses instead of rebuilding them).
#[test]
fn a_burst_from_many_senders_is_answered_each_to_its_sender() {
    common::own_network();
    let node = DnsNode::start(
        "127.13.16.1",
        DNS_PORT,
        "[dnssrv]\nrrl_responses_per_sec = 0\n",
    );
    const SENDERS: u16 = 8;
    const EACH: u16 = 24;
    let socks = senders("127.13.16", SENDERS);
    burst_until_answered(&socks, node.dns, EACH, "unanswered", |i, j, a| {
        assert!(j < EACH);
        // The question is echoed: the answer is to this query.
        let q = query(i * 1000 + j, &burst_name(i, j), 1, false);
        assert_eq!(&a[12..q.len()], &q[12..]);
        assert!(u16::from_be_bytes([a[6], a[7]]) >= 1, "an address record");
    });
}

/// `n` UDP sockets on `net`.10, .11, ... (a /24 of the test's own), each
/// waiting at most half a second for an answer.
fn senders(net: &str, n: u16) -> Vec<UdpSocket> {
    (0..n)
        .map(|i| {
            let s = UdpSocket::bind(format!("{net}.{}:0", 10 + i)).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            s
        })
        .collect()
}

/// The name sender `i`'s query `j` of a burst asks for.
fn burst_name(i: u16, j: u16) -> String {
    format!("www.s{i}q{j}.example.com.http.L2.L1.L0.coralcdn.test")
}

/// Each of `socks` sends its `each` queries (id `1000 × sender + j`) to `dns`
/// at once, without waiting, so that they queue at the node's socket
/// together; those unanswered are sent again until every one is answered
/// (within a minute, else panics with `what`). Every answer must come from
/// `dns` to the sender that asked, with NOERROR; `check(sender, j, answer)`
/// looks at each one too. Returns the queries answered.
fn burst_until_answered(
    socks: &[UdpSocket],
    dns: SocketAddr,
    each: u16,
    what: &str,
    mut check: impl FnMut(u16, u16, &[u8]),
) -> u64 {
    let mut missing: Vec<Vec<u16>> = socks.iter().map(|_| (0..each).collect()).collect();
    let mut answered = 0;
    let start = Instant::now();
    while missing.iter().any(|m| !m.is_empty()) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what} after a minute: {missing:?}"
        );
        for (i, s) in socks.iter().enumerate() {
            for &j in &missing[i] {
                let id = i as u16 * 1000 + j;
                s.send_to(&query(id, &burst_name(i as u16, j), 1, false), dns)
                    .unwrap();
            }
        }
        for (i, s) in socks.iter().enumerate() {
            let mut buf = [0u8; 4096];
            while !missing[i].is_empty() {
                let Ok((n, from)) = s.recv_from(&mut buf) else {
                    break;
                };
                assert_eq!(from, dns);
                let a = &buf[..n];
                let id = u16::from_be_bytes([a[0], a[1]]);
                assert_eq!(id / 1000, i as u16, "an answer for another sender");
                assert_eq!(rcode(a), 0);
                check(i as u16, id % 1000, a);
                if let Some(k) = missing[i].iter().position(|&m| m == id % 1000) {
                    missing[i].swap_remove(k);
                    answered += 1;
                }
            }
        }
    }
    answered
}

/// `query` with an EDNS OPT record whose Padding option (RFC 7830, code
/// 12) makes the whole datagram `total` octets: a valid query of any size.
fn padded_query(id: u16, name: &str, total: usize) -> Vec<u8> {
    let mut q = query(id, name, 1, false);
    q[11] = 1; // ARCOUNT
               // OPT: root name, type 41, payload 1232, rcode/version/flags 0.
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    let pad = total - q.len() - 2 - 4;
    q.extend_from_slice(&((pad + 4) as u16).to_be_bytes());
    q.extend_from_slice(&[0, 12]);
    q.extend_from_slice(&(pad as u16).to_be_bytes());
    q.resize(total, 0);
    q
}

/// A UDP datagram longer than dnssrv reads (`limits::DNS.udp_query_bytes_max`,
/// 4,096 octets) was read cut and answered as if whole (issue 27, session
/// 9): now the kernel's MSG_TRUNC drops it unread and counts it
/// (`oversized`), and the next query is answered. RFC 1035 §4.2.1 bounds a
/// plain query at 512 octets and RFC 6891 §6.2.5 lets a requester offer at
/// most its own payload size; no query comes near 4,096 (a question is at
/// most 259 octets, RFC 8467 pads queries to 128-octet blocks). Knot and NSD
/// read up to 64 KiB a datagram; coral reads 4,096 and drops the rest
/// rather than answer a prefix, or FORMERR bytes the sender never sent as a
/// message. Real datagrams from a small client: a padded EDNS query of
/// exactly 4,096 octets is answered, the same at 4,097 and 9,000 octets (and
/// one of 5,000 with plain trailing bytes, which a cut read answers
/// NOERROR) get nothing; over TCP, where the frame says its length and is
/// read whole, the 5,000-octet padded query is answered.
#[test]
fn rfc6891_a_udp_query_over_the_receive_buffer_is_dropped_and_counted() {
    common::own_network();
    let node = DnsNode::start("127.13.17.1", DNS_PORT, "");
    let name = "www.x.com.coral.test";
    let s = UdpSocket::bind("127.13.17.10:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut recv = |s: &UdpSocket| -> Vec<u8> {
        let (n, from) = s.recv_from(&mut buf).expect("an answer");
        assert_eq!(from, node.dns);
        buf[..n].to_vec()
    };
    // The largest datagram read whole is answered.
    let whole = padded_query(7, name, 4096);
    assert_eq!(whole.len(), 4096);
    s.send_to(&whole, node.dns).unwrap();
    let a = recv(&s);
    assert_eq!((a[1], rcode(&a)), (7, 0), "a 4,096-octet query is answered");
    let before = node.node.dns_counters()["oversized"].as_u64();
    assert_eq!(before, Some(0));
    // One octet more, far more, and a plain query with trailing bytes:
    // each followed at once by a small query from the same socket. The
    // node reads its socket in order, so the first answer to come is the
    // small query's, and nothing comes after it.
    let mut trailing = query(13, name, 1, false);
    trailing.resize(5000, 0xab);
    for (big, id) in [
        (padded_query(11, name, 4097), 11u16),
        (padded_query(12, name, 9000), 12),
        (trailing, 13),
    ] {
        s.send_to(&big, node.dns).unwrap();
        s.send_to(&query(100 + id, name, 1, false), node.dns)
            .unwrap();
        let a = recv(&s);
        assert_eq!(
            u16::from_be_bytes([a[0], a[1]]),
            100 + id,
            "the oversized query {id} got an answer"
        );
        assert_eq!(rcode(&a), 0);
    }
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(s.recv_from(&mut [0u8; 16]).is_err(), "a late answer");
    let c = node.node.dns_counters();
    assert_eq!(c["oversized"].as_u64(), Some(3), "{c}");
    assert_eq!(node.node.metric("coral_dns_oversized_total"), 3.0);
    // Over TCP the frame is read whole: the padded 5,000 octets answered.
    let big = padded_query(21, name, 5000);
    let a = tcp_exchange(node.dns, &big);
    assert_eq!((a[1], rcode(&a)), (21, 0));
}

/// The tasks (threads) of process `pid` that `tracer` traces, and all of
/// its tasks.
fn traced_tasks(pid: u32, tracer: u32) -> (usize, usize) {
    let mut traced = 0;
    let mut all = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        all += 1;
        if status.lines().any(|l| l == format!("TracerPid:\t{tracer}")) {
            traced += 1;
        }
    }
    (traced, all)
}

/// Issue 27 goal 5, DNS on two cores: each core answers the queries the
/// kernel gives its own socket, and nothing it does per answer or per batch
/// reaches the other core. `coral node --cores 2` is traced (strace, its
/// `membarrier` and `write` calls) while 32 senders' queries, spread over
/// both cores by the kernel's reuseport hash, are answered in rounds (each
/// core drains its socket and sleeps between them): both cores answer, and
/// there is no `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` — the
/// executor's sleep used to issue one, a synchronous IPI to the other busy
/// core, every time (the starting build: one per sleep) — and no
/// cross-core wake (an 8-octet eventfd `write`) per answer.
#[test]
fn two_cores_answer_each_on_its_own_with_no_barrier_or_wake_between_them() {
    common::own_network();
    let ip = "127.13.18.1";
    let node = Node::on(ip)
        .cores(2)
        .dns(DNS_PORT)
        .config_text(&format!(
            "http = \"{ip}:8080\"\n[dnssrv]\nrrl_responses_per_sec = 0\n"
        ))
        .start();
    let dns: SocketAddr = format!("{ip}:{DNS_PORT}").parse().unwrap();
    let start = Instant::now();
    while udp_exchange(
        dns,
        &query(1, "coralcdn.test", 6, false),
        Duration::from_millis(200),
    )
    .is_none()
    {
        assert!(start.elapsed() < Duration::from_secs(20), "no DNS answer");
    }
    let dir = temp_dir("dns-two-cores");
    let trace = dir.path().join("trace");
    let mut strace = Proc::spawn(
        Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=membarrier,write", "-o"])
            .arg(&trace)
            .args(["-p", &node.pid().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "start strace (installed with the test tools)",
    );
    // Until every thread of the node is traced.
    let start = Instant::now();
    loop {
        let (traced, all) = traced_tasks(node.pid(), strace.id());
        if all > 0 && traced == all {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "strace did not attach: {traced} of {all} threads"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = node.admin_get("/stats").2;
    const SENDERS: u16 = 32;
    const ROUNDS: u16 = 8;
    const EACH: u16 = 16;
    let socks = senders("127.13.18", SENDERS);
    let mut answered = 0u64;
    for round in 0..ROUNDS {
        answered += burst_until_answered(
            &socks,
            dns,
            EACH,
            &format!("round {round} unanswered"),
            |_, _, _| {},
        );
    }
    let after = node.admin_get("/stats").2;
    // strace detaches on SIGINT and writes out what it has.
    strace.signal(libc::SIGINT);
    assert!(
        strace.exit_within(Duration::from_secs(30)).is_some(),
        "strace did not detach"
    );
    let by_core = |body: &str| -> Vec<u64> {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["cores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["dns"]["queries"].as_u64().unwrap())
            .collect()
    };
    let (b, a) = (by_core(&before), by_core(&after));
    assert_eq!(a.len(), 2);
    let each: Vec<u64> = a.iter().zip(&b).map(|(a, b)| a - b).collect();
    assert!(
        each.iter().all(|&n| n > 0),
        "both cores answer their share: {each:?}"
    );
    assert!(
        each.iter().sum::<u64>() >= answered,
        "{each:?} for {answered}"
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let barriers = text
        .lines()
        .filter(|l| l.contains("membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED,"))
        .count();
    let wakes = text
        .lines()
        .filter(|l| l.contains("write(") && l.ends_with("= 8"))
        .count();
    eprintln!(
        "{answered} answers ({each:?} by core): {barriers} membarriers, {wakes} eventfd writes"
    );
    assert_eq!(barriers, 0, "a barrier IPI from a sleeping core");
    assert!(
        (wakes as u64) * 100 < answered,
        "{wakes} cross-core wakes for {answered} answers"
    );
}
