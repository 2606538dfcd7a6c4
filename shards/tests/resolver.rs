//! The proxy's origin resolver against DNS servers of the test's own
//! (issue 23 item 2): Knot (`knotd`) serving the zone `origin.test`, behind
//! a small UDP forwarder of the test's that counts every query by name and
//! type and never answers names starting with "hang" (a black hole), an
//! nginx origin, and a real `coral node` whose `[proxy] resolvers` is the
//! forwarder. Each test runs in a network namespace of its own
//! (`coral-res<N>-<pid>`, loopback only) on 127.123.N.x; the host's
//! resolver is never asked.

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    command_in, coralized, dns_query, in_netns, temp_dir, wait_until, write_file, Answer, Node,
    Proc,
};

/// The stub's whole-lookup limit (`coral::limits::RESOLVE.lookup_timeout_ms`).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries per query (`coral::limits::RESOLVE.attempts_max`).
const ATTEMPTS_MAX: usize = 4;
const A: u16 = 1;
const AAAA: u16 = 28;
/// Added to a query's type in the forwarder's counts when it came over TCP.
const TCP: u16 = 10_000;

/// A network namespace with loopback up, deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(net: u8) -> Netns {
        let name = format!("coral-res{net}-{}", std::process::id() % 100_000);
        let ip = |args: &[&str]| {
            let out = Command::new("ip")
                .args(args)
                .output()
                .expect("ip (iproute2)");
            assert!(out.status.success(), "ip {args:?}: {out:?}");
        };
        // A namespace left by a killed run of this test.
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let ns = Netns(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Moves the calling thread into the namespace `ns` (threads it starts
/// later are born there too).
fn enter(ns: &str) {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: a valid namespace descriptor; only this thread moves.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
}

/// curl in `ns` for `url`, its host on port 8090 resolved to `ip`
/// (`common::curl`, inside the namespace).
fn curl(ns: &str, ip: &str, url: &str, args: &[&str]) -> Answer {
    let host = url
        .trim_start_matches("http://")
        .split(['/', ':'])
        .next()
        .unwrap()
        .to_string();
    let tmp = temp_dir("curl");
    let hdr = tmp.path().join("h");
    let body = tmp.path().join("b");
    let out = command_in(Some(ns), "curl")
        .args(["-sS", "--max-time", "60", "-D"])
        .arg(&hdr)
        .arg("-o")
        .arg(&body)
        .args(["--resolve", &format!("{host}:8090:{ip}")])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    let head = std::fs::read_to_string(&hdr).unwrap_or_default();
    let last = head
        .split("\r\n\r\n")
        .filter(|b| !b.trim().is_empty())
        .last()
        .unwrap_or("");
    let mut lines = last.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        headers: lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect(),
        body: std::fs::read(&body).unwrap_or_default(),
        curl_ok: out.status.success(),
        curl_err: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

/// nginx (Debian's) in `ns` serving `root` on `addr`; its access log
/// counts the origin's requests.
struct Origin {
    _proc: Proc,
    log: std::path::PathBuf,
}

impl Origin {
    fn start(ns: &str, dir: &Path, addr: SocketAddr, root: &Path) -> Origin {
        let d = dir.join("nginx");
        std::fs::create_dir_all(&d).unwrap();
        let log = d.join("access.log");
        let conf = write_file(
            &d,
            "nginx.conf",
            format!(
                "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 256; }}\n\
                 http {{\n  access_log {log};\n  client_body_temp_path {d}/body;\n\
                 proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fcgi;\n\
                 uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
                 types {{ text/plain txt; }}\n\
                 server {{ listen {addr}; root {root}; expires 1h; }}\n}}\n",
                d = d.display(),
                log = log.display(),
                root = root.display(),
            ),
        );
        let proc = Proc::spawn(
            command_in(Some(ns), "/usr/sbin/nginx")
                .args(["-p", d.to_str().unwrap(), "-c", conf.to_str().unwrap()])
                .args(["-g", "daemon off;"])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit()),
            "nginx (Debian's package) is needed for this test",
        );
        in_netns(ns, move || {
            wait_until(common::START_WAIT, Duration::from_millis(20), || {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                    .map(|_| ())
                    .map_err(|e| format!("nginx on {addr}: {e}"))
            })
        });
        Origin { _proc: proc, log }
    }

    /// Requests it has logged for `path`.
    fn requests(&self, path: &str) -> usize {
        let needle = format!("GET {path} ");
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&needle))
            .count()
    }
}

/// knotd serving `origin.test` on `addr` from `dir`.
struct Knot {
    _proc: Proc,
}

impl Knot {
    fn start(ns: &str, dir: &Path, addr: SocketAddr, origin_ip: &str) -> Knot {
        let d = dir.join("knot");
        std::fs::create_dir_all(&d).unwrap();
        let zone = write_file(
            &d,
            "origin.test.zone",
            format!(
                "$ORIGIN origin.test.\n$TTL 300\n\
                 @ SOA ns.origin.test. admin.origin.test. 1 3600 600 86400 30\n\
                 @ NS ns\nns A {ip}\nwww A {origin_ip}\nslow A {origin_ip}\n\
                 big A {origin_ip}\nalias CNAME www\n",
                ip = addr.ip()
            ),
        );
        let conf = write_file(
            &d,
            "knot.conf",
            format!(
                "server:\n    rundir: \"{d}\"\n    listen: {ip}@{port}\n\
                 database:\n    storage: \"{d}\"\n\
                 zone:\n  - domain: origin.test\n    file: \"{zone}\"\n\
                 log:\n  - target: stderr\n    any: warning\n",
                d = d.display(),
                ip = addr.ip(),
                port = addr.port(),
                zone = zone.display()
            ),
        );
        let proc = Proc::spawn(
            command_in(Some(ns), "/usr/sbin/knotd")
                .arg("-c")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit()),
            "knotd (Debian's knot) is needed for this test",
        );
        // Ready once it answers for its zone.
        in_netns(ns, move || {
            let sock = UdpSocket::bind(SocketAddr::new(addr.ip(), 0)).unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            wait_until(common::START_WAIT, Duration::from_millis(50), || {
                sock.send_to(&dns_query(1, "www.origin.test", A, false), addr)
                    .map_err(|e| e.to_string())?;
                let mut buf = [0u8; 512];
                match sock.recv_from(&mut buf) {
                    Ok((n, _)) if n > 12 && common::rcode(&buf[..n]) == 0 => Ok(()),
                    other => Err(format!("knotd on {addr} not answering: {other:?}")),
                }
            })
        });
        Knot { _proc: proc }
    }
}

/// A forwarder to knotd that counts queries by (name, type); names
/// starting with "hang" are never answered, names starting with "slow"
/// are answered after `slow_delay`, names starting with "big" are answered
/// over UDP truncated (TC, no records). Over TCP (same address) every
/// query is forwarded, counted under type + `TCP`.
struct Forwarder {
    addr: SocketAddr,
    counts: Arc<Mutex<HashMap<(String, u16), usize>>>,
    stop: Arc<AtomicBool>,
}

/// The question's name (lower case) and type of a query, if it has one.
fn question(q: &[u8]) -> Option<(String, u16)> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(i)?);
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(i + 1..i + 1 + len)?).to_ascii_lowercase());
        i += 1 + len;
    }
    let t = q.get(i + 1..i + 3)?;
    Some((labels.join("."), u16::from_be_bytes([t[0], t[1]])))
}

impl Forwarder {
    fn start(ns: &str, addr: SocketAddr, upstream: SocketAddr, slow_delay: Duration) -> Forwarder {
        // Its sockets and threads live in `ns`: a thread enters it, binds,
        // and starts the others from there.
        let ns = ns.to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        let in_ns = ns.clone();
        std::thread::spawn(move || {
            enter(&in_ns);
            let sock = UdpSocket::bind(addr).expect("bind the forwarder");
            let listener = std::net::TcpListener::bind(addr).expect("bind the TCP forwarder");
            tx.send((sock, listener)).unwrap();
        })
        .join()
        .unwrap();
        let (sock, listener) = rx.recv().unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let counts: Arc<Mutex<HashMap<(String, u16), usize>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s, in_ns) = (counts.clone(), stop.clone(), ns.clone());
        std::thread::spawn(move || {
            enter(&in_ns);
            let mut buf = [0u8; 1500];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, client)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let q = buf[..n].to_vec();
                let Some((name, qtype)) = question(&q) else {
                    continue;
                };
                *c.lock().unwrap().entry((name.clone(), qtype)).or_insert(0) += 1;
                if name.starts_with("hang") {
                    continue;
                }
                if name.starts_with("big") {
                    let _ = sock.send_to(&truncated(&q), client);
                    continue;
                }
                let reply_to = sock.try_clone().unwrap();
                std::thread::spawn(move || {
                    if name.starts_with("slow") {
                        std::thread::sleep(slow_delay);
                    }
                    let up = UdpSocket::bind(SocketAddr::new(addr.ip(), 0)).unwrap();
                    up.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    up.send_to(&q, upstream).unwrap();
                    let mut a = [0u8; 1500];
                    if let Ok((n, _)) = up.recv_from(&mut a) {
                        let _ = reply_to.send_to(&a[..n], client);
                    }
                });
            }
        });
        listener.set_nonblocking(true).unwrap();
        let (c, s) = (counts.clone(), stop.clone());
        std::thread::spawn(move || {
            enter(&ns);
            while !s.load(Ordering::Relaxed) {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let c = c.clone();
                std::thread::spawn(move || forward_tcp(conn, upstream, &c));
            }
        });
        Forwarder { addr, counts, stop }
    }

    /// Queries seen for `name`'s `qtype` records.
    fn count(&self, name: &str, qtype: u16) -> usize {
        let c = self.counts.lock().unwrap();
        c.get(&(name.to_string(), qtype)).copied().unwrap_or(0)
    }
}

/// A UDP answer to `q` with TC set and no records (its OPT record dropped).
fn truncated(q: &[u8]) -> Vec<u8> {
    let mut end = 12;
    while end < q.len() && q[end] != 0 {
        end += 1 + usize::from(q[end]);
    }
    let mut a = q[..(end + 5).min(q.len())].to_vec();
    a[2] |= 0x82;
    a[3] = 0x80;
    a[6..12].fill(0);
    a
}

/// One DNS-over-TCP query from `conn`, counted, forwarded to knotd over TCP
/// and its answer sent back.
fn forward_tcp(
    mut conn: std::net::TcpStream,
    upstream: SocketAddr,
    counts: &Mutex<HashMap<(String, u16), usize>>,
) {
    use std::io::{Read, Write};
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut len = [0u8; 2];
    if conn.read_exact(&mut len).is_err() {
        return;
    }
    let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
    if conn.read_exact(&mut q).is_err() {
        return;
    }
    if let Some((name, qtype)) = question(&q) {
        *counts
            .lock()
            .unwrap()
            .entry((name, qtype + TCP))
            .or_insert(0) += 1;
    }
    let Ok(mut up) = std::net::TcpStream::connect(upstream) else {
        return;
    };
    up.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = up.write_all(&len).and_then(|()| up.write_all(&q));
    let mut alen = [0u8; 2];
    if up.read_exact(&mut alen).is_err() {
        return;
    }
    let mut a = vec![0u8; usize::from(u16::from_be_bytes(alen))];
    if up.read_exact(&mut a).is_ok() {
        let _ = conn.write_all(&alen).and_then(|()| conn.write_all(&a));
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// knotd, the forwarder, nginx (with `files`) and the node's address on
/// 127.123.`net`.x.
struct Lab {
    dir: tempfile::TempDir,
    _knot: Knot,
    dns: Forwarder,
    origin: Origin,
    net: u8,
    /// Last: deleted once everything in it has stopped.
    ns: Netns,
}

impl Lab {
    fn start(net: u8, files: &[(&str, &[u8])], slow_delay: Duration) -> Lab {
        let ns = Netns::new(net);
        let dir = temp_dir("resolver");
        let ip = |h: u8| format!("127.123.{net}.{h}");
        let knot_addr: SocketAddr = format!("{}:5300", ip(53)).parse().unwrap();
        let knot = Knot::start(&ns.0, dir.path(), knot_addr, &ip(80));
        let dns = Forwarder::start(
            &ns.0,
            format!("{}:5300", ip(54)).parse().unwrap(),
            knot_addr,
            slow_delay,
        );
        let root = common::web_root(dir.path(), files);
        let origin = Origin::start(
            &ns.0,
            dir.path(),
            format!("{}:8080", ip(80)).parse().unwrap(),
            &root,
        );
        Lab {
            dir,
            _knot: knot,
            dns,
            origin,
            net,
            ns,
        }
    }

    /// A one-core proxy node on 127.123.`net`.`host` asking the forwarder;
    /// `--allow-private-origins` if `allow_private` (the origin is on
    /// loopback).
    fn node(&self, host: u8, allow_private: bool) -> Node {
        let ip = format!("127.123.{}.{host}", self.net);
        let mut b = Node::on(&ip)
            .netns(&self.ns.0)
            .proxy(&self.dir.path().join(format!("cache-{host}")))
            .config_text(&format!("[proxy]\nresolvers = [\"{}\"]\n", self.dns.addr));
        if allow_private {
            b = b.args(&["--allow-private-origins"]);
        }
        b.start()
    }

    /// The namespace's name (for clients on other threads).
    fn ns(&self) -> String {
        self.ns.0.clone()
    }
}

/// Issue 23's attack: 20 requests for names whose DNS never answers, then
/// a good name. Before, lookups ran one at a time on one blocking thread
/// and the good name waited behind them (504 after 10 s); now each name's
/// lookup has its own slot and the good one is answered while the 20 still
/// wait, and each of them gets 504 once its own lookup times out.
#[test]
fn names_that_never_answer_do_not_delay_a_good_name() {
    let lab = Lab::start(1, &[("a.txt", b"good origin\n")], Duration::ZERO);
    let node = lab.node(1, true);
    let finished = Arc::new(AtomicUsize::new(0));
    let hanging: Vec<_> = (0..20)
        .map(|i| {
            let (ns, ip) = (lab.ns(), node.ip.clone());
            let finished = finished.clone();
            std::thread::spawn(move || {
                let url = coralized(&format!("hang{i}.origin.test"), 8080, "/x.txt");
                // From 20 clients: one client's share is bounded (below).
                let from = format!("127.123.1.{}", 100 + i);
                let a = curl(&ns, &ip, &url, &["--interface", &from]);
                finished.fetch_add(1, Ordering::SeqCst);
                a
            })
        })
        .collect();
    // All 20 lookups are under way: the server has seen each name's query.
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || match (0..20).find(|i| lab.dns.count(&format!("hang{i}.origin.test"), A) == 0) {
            None => Ok(()),
            Some(i) => Err(format!("no query yet for hang{i}.origin.test")),
        },
    );
    let start = Instant::now();
    let good = curl(
        &lab.ns.0,
        &node.ip,
        &coralized("www.origin.test", 8080, "/a.txt"),
        &["--interface", "127.123.1.67"],
    );
    let took = start.elapsed();
    assert_eq!(good.status, 200, "{good:?}");
    assert_eq!(good.body, b"good origin\n");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the good name was answered only after a hanging one ended ({took:?})"
    );
    for h in hanging {
        let a = h.join().unwrap();
        assert_eq!(a.status, 504, "{a:?}");
    }
    // Each name was tried a bounded number of times, and its slot freed.
    for i in 0..20 {
        let name = format!("hang{i}.origin.test");
        let n = lab.dns.count(&name, A);
        assert!((1..=ATTEMPTS_MAX).contains(&n), "{name}: {n} A queries");
    }
    let m = node.metrics();
    assert_eq!(resolver_event(&m, "timeouts"), 20.0);
    assert_eq!(resolver_event(&m, "lookups"), 21.0);
    let after = curl(
        &lab.ns.0,
        &node.ip,
        &coralized("www.origin.test", 8080, "/a.txt"),
        &[],
    );
    assert_eq!(after.status, 200);
}

/// One client cannot take every lookup slot: of its 20 requests for names
/// that never answer, `waiters_per_client_max` (16) wait for lookups and
/// the other 4 are refused at once (503); another client's good name is
/// served meanwhile.
#[test]
fn one_client_waits_for_at_most_its_share_of_lookups() {
    const PER_CLIENT: usize = 16;
    let lab = Lab::start(5, &[("a.txt", b"good origin\n")], Duration::ZERO);
    let node = lab.node(1, true);
    let hanging: Vec<_> = (0..20)
        .map(|i| {
            let (ns, ip) = (lab.ns(), node.ip.clone());
            std::thread::spawn(move || {
                let url = coralized(&format!("hang{i}.origin.test"), 8080, "/x.txt");
                let start = Instant::now();
                let a = curl(&ns, &ip, &url, &["--interface", "127.123.5.66"]);
                (a, start.elapsed())
            })
        })
        .collect();
    // Every request has reached the node: asked of the server, or refused.
    wait_until(Duration::from_secs(30), Duration::from_millis(20), || {
        let m = node.metrics();
        let asked = (0..20)
            .filter(|i| lab.dns.count(&format!("hang{i}.origin.test"), A) > 0)
            .count();
        let busy = resolver_event(&m, "busy") as usize;
        if asked + busy == 20 {
            Ok(())
        } else {
            Err(format!("{asked} asked, {busy} refused"))
        }
    });
    let good = curl(
        &lab.ns.0,
        &node.ip,
        &coralized("www.origin.test", 8080, "/a.txt"),
        &["--interface", "127.123.5.67"],
    );
    assert_eq!(good.status, 200, "{good:?}");
    let answers: Vec<_> = hanging.into_iter().map(|h| h.join().unwrap()).collect();
    let refused = answers.iter().filter(|(a, _)| a.status == 503).count();
    let timed_out = answers.iter().filter(|(a, _)| a.status == 504).count();
    assert_eq!(
        (refused, timed_out),
        (20 - PER_CLIENT, PER_CLIENT),
        "{answers:?}"
    );
    let asked = (0..20)
        .filter(|i| lab.dns.count(&format!("hang{i}.origin.test"), A) > 0)
        .count();
    assert_eq!(asked, PER_CLIENT);
}

/// RFC 7766: an answer truncated over UDP (TC) is asked again over TCP of
/// the same server, and its addresses used.
#[test]
fn rfc7766_a_truncated_answer_is_asked_again_over_tcp() {
    let lab = Lab::start(6, &[("a.txt", b"big\n")], Duration::ZERO);
    let node = lab.node(1, true);
    let a = curl(
        &lab.ns.0,
        &node.ip,
        &coralized("big.origin.test", 8080, "/a.txt"),
        &[],
    );
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body, b"big\n");
    assert_eq!(lab.dns.count("big.origin.test", A), 1, "UDP");
    assert_eq!(lab.dns.count("big.origin.test", A + TCP), 1, "then TCP");
}

/// Lookups waiting on a dead name do not hold the node up: SIGTERM stops
/// it (exit 0) while they wait.
#[test]
fn sigterm_stops_a_node_while_lookups_hang() {
    let lab = Lab::start(7, &[("a.txt", b"x\n")], Duration::ZERO);
    let mut node = lab.node(1, true);
    let clients: Vec<_> = (0..5)
        .map(|i| {
            let (ns, ip) = (lab.ns(), node.ip.clone());
            std::thread::spawn(move || {
                let url = coralized(&format!("hang{i}.origin.test"), 8080, "/x.txt");
                curl(&ns, &ip, &url, &[])
            })
        })
        .collect();
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || match (0..5).find(|i| lab.dns.count(&format!("hang{i}.origin.test"), A) == 0) {
            None => Ok(()),
            Some(i) => Err(format!("no query yet for hang{i}.origin.test")),
        },
    );
    node.signal(libc::SIGTERM);
    assert!(node.wait_exit(Duration::from_secs(15)).success());
    for c in clients {
        c.join().unwrap();
    }
}

/// RFC 2308: NXDOMAIN is answered as soon as the server says so (502),
/// and remembered: a second request for the name
/// asks no server.
#[test]
fn rfc2308_nxdomain_is_answered_at_once_and_remembered() {
    let lab = Lab::start(2, &[("a.txt", b"x\n")], Duration::ZERO);
    let node = lab.node(1, true);
    let start = Instant::now();
    let a = curl(
        &lab.ns.0,
        &node.ip,
        &coralized("nx.origin.test", 8080, "/a.txt"),
        &[],
    );
    assert!(start.elapsed() < LOOKUP_TIMEOUT, "not a timeout");
    assert_eq!(a.status, 502, "{a:?}");
    // One query per type: answered, never retried.
    assert_eq!(lab.dns.count("nx.origin.test", A), 1);
    assert_eq!(lab.dns.count("nx.origin.test", AAAA), 1);
    // Another object of the same origin: the name's answer is remembered.
    let b = curl(
        &lab.ns.0,
        &node.ip,
        &coralized("nx.origin.test", 8080, "/b.txt"),
        &[],
    );
    assert_eq!(b.status, 502, "{b:?}");
    assert_eq!(lab.dns.count("nx.origin.test", A), 1, "negatively cached");
    // And the good name still works, through a CNAME.
    let c = curl(
        &lab.ns.0,
        &node.ip,
        &coralized("alias.origin.test", 8080, "/a.txt"),
        &[],
    );
    assert_eq!(c.status, 200, "{c:?}");
}

/// Concurrent requests for different objects of one origin share its one
/// lookup: the server sees one A query for the name.
#[test]
fn concurrent_requests_for_one_name_share_one_query() {
    let files: Vec<(String, Vec<u8>)> = (0..10)
        .map(|i| (format!("s{i}.txt"), format!("object {i}\n").into_bytes()))
        .collect();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    // The server takes 1 s to answer (less than a try's 2 s): the
    // requests arrive meanwhile.
    let lab = Lab::start(3, &refs, Duration::from_secs(1));
    let node = lab.node(1, true);
    let clients: Vec<_> = (0..10)
        .map(|i| {
            let (ns, ip) = (lab.ns(), node.ip.clone());
            std::thread::spawn(move || {
                curl(
                    &ns,
                    &ip,
                    &coralized("slow.origin.test", 8080, &format!("/s{i}.txt")),
                    &[],
                )
            })
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let a = c.join().unwrap();
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.body, format!("object {i}\n").into_bytes());
    }
    assert_eq!(lab.dns.count("slow.origin.test", A), 1);
    assert!(lab.dns.count("slow.origin.test", AAAA) <= 1);
    // The node's side: one lookup; the other nine requests joined it (or,
    // arriving after it ended, were answered from its cache).
    let m = node.metrics();
    assert_eq!(resolver_event(&m, "lookups"), 1.0);
    assert_eq!(
        resolver_event(&m, "joined") + resolver_event(&m, "cache_hits"),
        9.0
    );
}

/// `coral_resolver_events_total{event}` in a `/metrics` body.
fn resolver_event(metrics: &str, event: &str) -> f64 {
    common::metric(
        metrics,
        &format!("coral_resolver_events_total{{event=\"{event}\"}}"),
    )
}

/// The SSRF check is unchanged: a name whose DNS answer is a loopback
/// address (directly or through a CNAME) is refused (403) without
/// `--allow-private-origins`, and the origin never asked.
#[test]
fn a_name_on_a_private_address_is_still_refused() {
    let lab = Lab::start(4, &[("a.txt", b"secret\n")], Duration::ZERO);
    let node = lab.node(1, false);
    for name in ["www.origin.test", "alias.origin.test"] {
        let a = curl(&lab.ns.0, &node.ip, &coralized(name, 8080, "/a.txt"), &[]);
        assert_eq!(a.status, 403, "{name}: {a:?}");
        assert_ne!(a.body, b"secret\n");
    }
    assert_eq!(lab.origin.requests("/a.txt"), 0);
    assert_eq!(lab.dns.count("www.origin.test", A), 1);
}
