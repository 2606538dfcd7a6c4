//! Attacks on a real `coral node` (`--cores 1`) from loopback, one test per
//! row of the attack table in SECURITY.md. Each test asserts that the attack
//! fails, that a good client is served (at least 99 of 100 gets) during and
//! after it, and that no stored value is lost.
//!
//! Addresses: the node under attack in test `n` is 127.14.n.1, its good
//! client 127.14.n.2, attackers in 127.14.(20 + 10·n + j).x, each test in
//! a network namespace of its own (`common::own_network`).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coral::dsht::id::FastHasher;
use coral::dsht::wire::{Body, ClusterInfo, ErrorCode, Header, Message, Services, Token, Value};
use coral::Id;

use common::Node;

// ---- The node under attack ------------------------------------------------------

/// Starts a node on 127.14.`net`.1 with `config` (TOML) and, if given,
/// its file-descriptor limit lowered to `nofile`.
fn start_node(net: u8, config: &str, nofile: Option<u64>) -> Node {
    let node = Node::on(&format!("127.14.{net}.1"))
        .config_text(config)
        .rust_log(Some("error"));
    match nofile {
        Some(n) => node.nofile(n).start(),
        None => node.start(),
    }
}

/// Keys stored at `level`.
fn keys_at(node: &Node, level: usize) -> u64 {
    node.client(&["levels"])["levels"][level]["keys"]
        .as_u64()
        .unwrap()
}

/// The node's counters (core 0).
fn stats(node: &Node) -> serde_json::Value {
    node.client(&["stats"])["cores"][0].clone()
}

/// Resident memory in KiB.
fn rss_kib(node: &Node) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{}/status", node.pid())).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

// ---- A DSHT peer speaking the wire format -----------------------------------------

/// A UDP peer at one address, with the id bound to it. It answers the
/// node's pings (after `pong_delay`, with `clusters` in its header).
struct Peer {
    sock: UdpSocket,
    addr: SocketAddr,
    id: Id,
    node: SocketAddr,
    txid: u32,
    clusters: Vec<ClusterInfo>,
    pong_delay: Duration,
    pongs: u32,
}

impl Peer {
    fn new(ip: &str, node: SocketAddr) -> Peer {
        let sock = UdpSocket::bind(format!("{ip}:0")).expect("bind peer");
        let addr = sock.local_addr().unwrap();
        Peer {
            sock,
            addr,
            id: Id::from_ip(addr.ip()),
            node,
            txid: 1,
            clusters: Vec::new(),
            pong_delay: Duration::ZERO,
            pongs: 0,
        }
    }

    fn header(&self, route: u16, txid: u32) -> Header {
        Header {
            route,
            txid,
            sender: self.id,
            services: Services::NONE,
            clusters: self.clusters.iter().copied().collect(),
        }
    }

    fn request_bytes(&mut self, body: Body) -> (u32, Vec<u8>) {
        self.txid += 1;
        let route = match &body {
            Body::Get { key, .. } | Body::PutProbe { key, .. } | Body::Store { key, .. } => {
                coral::dsht::node::route_of(key)
            }
            _ => 0,
        };
        let m = Message {
            header: self.header(route, self.txid),
            body,
        };
        (self.txid, m.to_bytes())
    }

    /// Sends a request without waiting for its reply.
    fn send(&mut self, body: Body) {
        let (_, b) = self.request_bytes(body);
        let _ = self.sock.send_to(&b, self.node);
    }

    /// Answers a ping from the node; returns the datagram if it is not one.
    fn on_datagram(&mut self, buf: &[u8], from: SocketAddr) -> Option<Message> {
        let m = Message::decode(buf).ok()?;
        if m.body == Body::Ping && from == self.node {
            std::thread::sleep(self.pong_delay);
            let pong = Message {
                header: self.header(m.header.route, m.header.txid),
                body: Body::Pong,
            };
            let _ = self.sock.send_to(&pong.to_bytes(), from);
            self.pongs += 1;
            return None;
        }
        Some(m)
    }

    /// Takes what arrived within `wait`, answering pings.
    fn drain(&mut self, wait: Duration) -> Vec<Message> {
        let mut out = Vec::new();
        let end = Instant::now() + wait;
        let mut buf = vec![0u8; 65_536];
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            self.sock
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) => out.extend(self.on_datagram(&buf[..n], from)),
                Err(_) => break,
            }
        }
        out
    }

    /// A request and its reply (two retries a second apart), answering the
    /// node's pings meanwhile.
    fn call(&mut self, body: Body) -> Option<Message> {
        let (txid, bytes) = self.request_bytes(body);
        let mut buf = vec![0u8; 65_536];
        for _ in 0..3 {
            let _ = self.sock.send_to(&bytes, self.node);
            let end = Instant::now() + Duration::from_secs(1);
            while let Some(left) = end.checked_duration_since(Instant::now()) {
                self.sock
                    .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                    .unwrap();
                let Ok((n, from)) = self.sock.recv_from(&mut buf) else {
                    break;
                };
                if let Some(m) = self.on_datagram(&buf[..n], from) {
                    if m.header.txid == txid && from == self.node {
                        return Some(m);
                    }
                }
            }
        }
        None
    }

    /// Makes the node verify us: a request it answers with a ping, which
    /// we answer. Verified peers are served in full and at their rate.
    fn verify(&mut self) {
        for _ in 0..5 {
            if self.pongs > 0 {
                return;
            }
            let _ = self.call(Body::FindNode {
                level: 0,
                target: self.id,
            });
            self.drain(Duration::from_millis(100));
        }
        assert!(self.pongs > 0, "{} was never pinged", self.addr);
    }

    fn token(&mut self, level: u8, key: Id) -> Token {
        match self.call(Body::PutProbe {
            level,
            key,
            target: key,
        }) {
            Some(Message {
                body: Body::PutProbeReply { token, .. },
                ..
            }) => token,
            other => panic!("no token: {other:?}"),
        }
    }

    /// Stores and returns the reply's body.
    fn store(&mut self, level: u8, key: Id, value: Value, ttl_secs: u32) -> Option<Body> {
        let token = self.token(0, key);
        self.call(Body::Store {
            level,
            key,
            ttl_secs,
            if_absent: false,
            token,
            value,
        })
        .map(|m| m.body)
    }

    fn get(&mut self, level: u8, key: Id) -> Option<Vec<Value>> {
        match self
            .call(Body::Get {
                level,
                key,
                target: key,
            })?
            .body
        {
            Body::GetReply { values, .. } => Some(values.to_vec()),
            _ => None,
        }
    }
}

fn stored(b: &Option<Body>) -> bool {
    matches!(b, Some(Body::StoreReply { stored: true, .. }))
}

// ---- The honest side: stored values and a good client ------------------------------

/// What the honest side stored before the attack.
struct Honest {
    good: Peer,
    key: Id,
    values: Vec<Value>,
}

impl Honest {
    /// A good client at 127.14.`net`.2, verified, and two values under one
    /// key: the node's own (an admin put) and the good client's pointer to
    /// itself (a remote store).
    fn new(net: u8, node: &Node) -> Honest {
        let mut good = Peer::new(&format!("127.14.{net}.2"), node.dsht);
        good.verify();
        let key = Id::hash(format!("honest key {net}").as_bytes());
        node.client(&[
            "put",
            &key.to_string(),
            "honest local value",
            "--ttl",
            "3600",
        ]);
        let mine = Value::from_addr(SocketAddr::new(good.addr.ip(), 8090));
        assert!(stored(&good.store(0, key, mine.clone(), 3600)));
        Honest {
            good,
            key,
            values: vec![Value::new(b"honest local value").unwrap(), mine],
        }
    }

    /// Gets the honest key `n` times; returns how many answers held every
    /// honest value.
    fn served(&mut self, n: usize) -> usize {
        let (mut served, mut unanswered, mut partial) = (0, 0, 0);
        for _ in 0..n {
            match self.good.get(0, self.key) {
                None => unanswered += 1,
                Some(got) if self.values.iter().all(|v| got.contains(v)) => served += 1,
                Some(got) => {
                    partial += 1;
                    eprintln!("good client: a partial answer of {} values", got.len());
                }
            }
        }
        if served < n {
            eprintln!("good client: {served} served, {unanswered} unanswered, {partial} partial");
        }
        served
    }

    /// The checks every row ends with: the good client is served during
    /// the attack (`during`) and after it, and nothing stored was lost.
    fn assert_served(&mut self, during: usize) {
        assert!(
            during >= 99,
            "good client served {during} of 100 during the attack"
        );
        let after = self.served(100);
        assert!(
            after >= 99,
            "good client served {after} of 100 after the attack"
        );
    }
}

/// Runs `attack` in a thread until the good client has made 100 gets;
/// returns how many were served and what the attack returned.
fn during<T: Send + 'static>(
    honest: &mut Honest,
    attack: impl FnOnce(Arc<AtomicBool>) -> T + Send + 'static,
) -> (usize, T) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || attack(s));
    let served = honest.served(100);
    stop.store(true, Ordering::Relaxed);
    (served, t.join().expect("attacker thread"))
}

/// The attackers' addresses in test `net`: /24 number `j`, host `h`.
fn attacker_ip(net: u8, j: u8, h: u8) -> String {
    format!("127.14.{}.{h}", 20 + 10 * net + j)
}

// An open network (SECURITY.md, "Trust"): these rows test the DSHT's limits
// against strangers that take part, which admission would keep out.
const CONFIG: &str = "network = \"open\"\n[clusters]\nmanage = false\n";

/// Paces a flood to at most about 10,000 datagrams a second (call after
/// each send): bounded traffic, so that tests running side by side on two
/// cores do not starve each other's good clients.
fn pace(sent: u64) {
    if sent % 10 == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---- One test per row -------------------------------------------------------------

/// Row "fd exhaustion": connections to the admin endpoint until the process
/// is out of descriptors. `accept` fails with EMFILE; the loop backs off
/// instead of spinning, so the DSHT socket and timers are served, the admin
/// endpoint recovers, and SIGTERM ends the node.
#[test]
fn admin_fd_exhaustion_backs_off_and_keeps_the_dsht_served() {
    common::own_network();
    let mut node = start_node(1, CONFIG, Some(40));
    let mut honest = Honest::new(1, &node);
    let admin = node.admin;
    // The flood opens connections until they stall (the node is out of
    // descriptors and its listen backlog is full), says so, and holds them;
    // the good client runs once the node is out of descriptors.
    let exhausted = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (exhausted, stop) = (exhausted.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut conns = Vec::new();
            let mut stalls = 0;
            while conns.len() < 300 && stalls < 5 {
                match TcpStream::connect_timeout(&admin, Duration::from_millis(100)) {
                    Ok(c) => conns.push(c),
                    Err(_) => stalls += 1,
                }
            }
            exhausted.store(true, Ordering::Relaxed);
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
            conns.len()
        })
    };
    let start = Instant::now();
    while !exhausted.load(Ordering::Relaxed) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the flood never stalled"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let served = honest.served(100);
    stop.store(true, Ordering::Relaxed);
    let opened = flood.join().expect("attacker thread");
    assert!(
        opened > 40,
        "only {opened} connections: the fd limit was not reached"
    );
    honest.assert_served(served);
    // The admin endpoint serves again once the flood is gone.
    let start = Instant::now();
    while TcpStream::connect_timeout(&admin, Duration::from_millis(200)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20));
    }
    assert_eq!(
        node.client(&["levels"])["levels"].as_array().unwrap().len(),
        3
    );
    // Out of descriptors again, SIGTERM still ends the node.
    let conns: Vec<_> = (0..100)
        .filter_map(|_| TcpStream::connect_timeout(&admin, Duration::from_millis(100)).ok())
        .collect();
    node.signal(libc::SIGTERM);
    assert!(
        node.exit_within(Duration::from_secs(20)).is_some(),
        "SIGTERM did not end a node out of descriptors"
    );
    drop(conns);
}

/// Row "admin slowloris": connections that send one byte a second. Each is
/// closed at the request deadline (5 s for the whole request, not per
/// read), and at most 64 are served at once.
#[test]
fn admin_slowloris_is_cut_at_the_request_deadline() {
    common::own_network();
    let node = start_node(2, CONFIG, None);
    let mut honest = Honest::new(2, &node);
    let admin = node.admin;
    let slowloris = move |_stop: Arc<AtomicBool>| {
        let mut conns: Vec<Option<TcpStream>> = (0..80)
            .map(|_| {
                let c = TcpStream::connect(admin).expect("connect");
                c.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
                Some(c)
            })
            .collect();
        let start = Instant::now();
        let mut closed_at = Vec::new();
        while conns.iter().any(Option::is_some) && start.elapsed() < Duration::from_secs(60) {
            for slot in conns.iter_mut() {
                let Some(c) = slot else { continue };
                let _ = c.write_all(b"G");
                let mut b = [0u8; 512];
                match c.read(&mut b) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
                    Err(_) => {}
                }
                closed_at.push(start.elapsed());
                *slot = None;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        closed_at
    };
    let (served, closed_at) = during(&mut honest, slowloris);
    honest.assert_served(served);
    assert_eq!(closed_at.len(), 80, "connections left open: {closed_at:?}");
    // 64 at once, each for at most about 5 s: all 80 are gone in two rounds.
    assert!(
        closed_at.iter().all(|t| *t < Duration::from_secs(30)),
        "{closed_at:?}"
    );
    assert_eq!(
        node.client(&["levels"])["levels"].as_array().unwrap().len(),
        3
    );
}

/// Keys whose unkeyed (Fx) hash is the same 64-bit value: the attacker can
/// compute as many as it likes, offline.
fn fx_colliding_keys(n: usize) -> Vec<Id> {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    // K is odd: its inverse modulo 2^64 by Newton's iteration.
    let mut inv = K;
    for _ in 0..6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(K.wrapping_mul(inv)));
    }
    let target: u64 = 0x0123_4567_89ab_cdef;
    (0..n as u64)
        .map(|w0| {
            let w2: u64 = 0;
            let h1 = w0.wrapping_mul(K);
            let h2 = (target.wrapping_mul(inv) ^ w2).rotate_right(5);
            let w1 = h2.wrapping_mul(inv) ^ h1.rotate_left(5);
            let mut b = [0u8; 20];
            b[..8].copy_from_slice(&w0.to_le_bytes());
            b[8..16].copy_from_slice(&w1.to_le_bytes());
            b[16..].copy_from_slice(&w2.to_le_bytes()[..4]);
            Id(b)
        })
        .collect()
}

/// Row "hash flooding the store": keys that collide in the unkeyed hash are
/// stored, then absent colliding keys are asked for. The store's hash is
/// keyed (they do not collide there: `coral::dsht::id` tests), a source holds at
/// most `values_per_source_max` values, and the good client is served.
#[test]
fn hash_flooding_the_store_finds_a_keyed_hash_and_a_quota() {
    common::own_network();
    use std::hash::Hasher;
    let keys = fx_colliding_keys(3000);
    // They do collide in the unkeyed hash.
    let fx = |k: &Id| {
        let mut h = FastHasher::default();
        std::hash::Hash::hash(k, &mut h);
        h.finish()
    };
    assert!(keys.iter().all(|k| fx(k) == fx(&keys[0])));
    let node = start_node(
        3,
        &format!("{CONFIG}[limits]\nvalues_per_source_max = 1000\n"),
        None,
    );
    let mut honest = Honest::new(3, &node);
    let dsht = node.dsht;
    let flood = move |stop: Arc<AtomicBool>| {
        let mut a = Peer::new(&attacker_ip(3, 0, 1), dsht);
        a.verify();
        let token = a.token(0, keys[0]);
        for (i, k) in keys.iter().enumerate().take(2000) {
            a.send(Body::Store {
                level: 0,
                key: *k,
                ttl_secs: 3600,
                if_absent: false,
                token,
                value: Value::new(&[i as u8]).unwrap(),
            });
            if i % 200 == 199 {
                a.drain(Duration::from_millis(20));
            }
        }
        let mut accepted = 0;
        for m in a.drain(Duration::from_millis(500)) {
            accepted += usize::from(matches!(m.body, Body::StoreReply { stored: true, .. }));
        }
        // Gets for absent colliding keys, until the good client is done.
        let mut i = 2000;
        while !stop.load(Ordering::Relaxed) {
            let k = keys[i % keys.len()];
            a.send(Body::Get {
                level: 0,
                key: k,
                target: k,
            });
            i += 1;
            pace(i as u64);
            if i % 100 == 0 {
                a.drain(Duration::from_millis(1));
            }
        }
        accepted
    };
    let (served, accepted) = during(&mut honest, flood);
    honest.assert_served(served);
    assert!(accepted <= 1000, "{accepted} stores from one source");
    assert!(keys_at(&node, 0) <= 1002, "{} keys", keys_at(&node, 0));
}

/// Row "fill the key table with put-probes": probes for unknown keys make
/// no store entry, so they cannot fill `keys_per_level_max`.
#[test]
fn put_probes_for_unknown_keys_fill_nothing() {
    common::own_network();
    let node = start_node(4, CONFIG, None);
    let mut honest = Honest::new(4, &node);
    let keys_before = keys_at(&node, 0);
    let dsht = node.dsht;
    let flood = move |stop: Arc<AtomicBool>| {
        let mut a = Peer::new(&attacker_ip(4, 0, 1), dsht);
        a.verify();
        let mut i = 0u32;
        while !stop.load(Ordering::Relaxed) || i < 3000 {
            let k = Id::hash(&i.to_be_bytes());
            a.send(Body::PutProbe {
                level: 0,
                key: k,
                target: k,
            });
            i += 1;
            pace(u64::from(i));
            if i % 100 == 0 {
                a.drain(Duration::from_millis(5));
            }
        }
        a.drain(Duration::from_millis(200));
        i
    };
    let (served, probes) = during(&mut honest, flood);
    honest.assert_served(served);
    assert!(probes >= 3000);
    assert_eq!(keys_at(&node, 0), keys_before, "probes made store entries");
    // New keys are still stored.
    let k = Id::hash(b"a new key after the probes");
    let v = Value::from_addr(SocketAddr::new(honest.good.addr.ip(), 8090));
    assert!(stored(&honest.good.store(0, k, v, 600)));
}

/// Row "poison a key": values naming another address are refused; a
/// source holds one value per key and evicts nobody else's, however long
/// its TTL; a /24 holds at most two; honest re-puts keep working.
#[test]
fn poisoning_a_key_neither_points_elsewhere_nor_evicts() {
    common::own_network();
    let node = start_node(5, CONFIG, None);
    let mut honest = Honest::new(5, &node);
    let (dsht, key) = (node.dsht, honest.key);
    let victim = Value::from_addr("192.0.2.80:80".parse().unwrap());
    let victim2 = victim.clone();
    let poison = move |_stop: Arc<AtomicBool>| {
        let victim = victim2;
        let mut results = Vec::new();
        // One source: a pointer to a victim, then four long-lived values.
        let mut a = Peer::new(&attacker_ip(5, 0, 1), dsht);
        a.verify();
        results.push((
            "victim pointer",
            stored(&a.store(0, key, victim.clone(), 86_400)),
        ));
        let mut own = 0;
        for i in 0..4u8 {
            own += usize::from(stored(&a.store(
                0,
                key,
                Value::new(&[b'x', i]).unwrap(),
                86_400,
            )));
        }
        // Five sources in one /24, each trying too.
        let mut from_net = 0;
        for h in 1..=5 {
            let mut b = Peer::new(&attacker_ip(5, 1, h), dsht);
            b.verify();
            from_net += usize::from(stored(&b.store(
                0,
                key,
                Value::new(&[b'y', h]).unwrap(),
                86_400,
            )));
        }
        (results, own, from_net)
    };
    let (served, (results, own, from_net)) = during(&mut honest, poison);
    assert_eq!(results, vec![("victim pointer", false)]);
    assert_eq!(own, 4, "each replaces the source's own value");
    // l = 4: two honest values, one from the first attacker; one more fits.
    assert!(
        from_net <= 1,
        "{from_net} values from one /24 beside the others"
    );
    honest.assert_served(served);
    let got = honest.good.get(0, key).unwrap();
    assert!(!got.contains(&victim));
    assert!(
        got.iter()
            .filter(|v| v.as_bytes().first() == Some(&b'x'))
            .count()
            <= 1
    );
    // The honest storer's re-put (a refresh) still works.
    let mine = honest.values[1].clone();
    assert!(stored(&honest.good.store(0, key, mine, 3600)));
}

/// Row "Sybil ids": an id bound to IP‖port is refused by a node configured
/// for SHA-1(IP), and one /24 gets at most two contacts per bucket.
#[test]
fn sybil_ids_one_id_per_address_and_two_per_24_per_bucket() {
    common::own_network();
    let node = start_node(6, CONFIG, None);
    let mut honest = Honest::new(6, &node);
    let dsht = node.dsht;
    let sybil = move |_stop: Arc<AtomicBool>| {
        // Ids from the port: no answer at all.
        let mut a = Peer::new(&attacker_ip(6, 0, 1), dsht);
        a.id = Id::from_ip_port(a.addr);
        let port_id_answered = a.call(Body::Ping).is_some();
        // Twenty nodes of one /24, each with its bound id, each answering.
        for h in 1..=20 {
            let mut b = Peer::new(&attacker_ip(6, 1, h), dsht);
            b.verify();
        }
        port_id_answered
    };
    let (served, port_id_answered) = during(&mut honest, sybil);
    assert!(!port_id_answered, "an IP‖port id was served");
    honest.assert_served(served);
    let nodes = node.client(&["nodes", "--level", "0", "--count", "100"]);
    let me = Id::from_ip("127.14.6.1".parse().unwrap());
    let mut per_bucket = std::collections::HashMap::<u32, usize>::new();
    let net = attacker_ip(6, 1, 0);
    let net = net.trim_end_matches(".0");
    let mut from_net = 0;
    for n in nodes["nodes"].as_array().unwrap() {
        let addr: SocketAddr = n["addr"].as_str().unwrap().parse().unwrap();
        let id = Id::from_hex(n["id"].as_str().unwrap()).unwrap();
        if addr.ip().to_string().rsplit_once('.').unwrap().0 == net {
            from_net += 1;
            *per_bucket.entry(me.distance(&id).bit_len()).or_default() += 1;
        }
    }
    assert!(
        from_net >= 2,
        "the /24's first contacts are taken: {from_net}"
    );
    assert!(per_bucket.values().all(|&n| n <= 2), "{per_bucket:?}");
    assert!(from_net < 20);
}

/// Row "cluster-level spoofing": a node 60 ms away copies the cluster ids
/// from a pong into its header (and answers pings with them); its stores
/// and gets at level 2 (threshold 20 ms) are refused: membership is known
/// first-hand, from our own measurement, not from a header.
#[test]
fn copied_cluster_ids_do_not_open_level_2() {
    common::own_network();
    let node = start_node(7, CONFIG, None);
    let mut honest = Honest::new(7, &node);
    let dsht = node.dsht;
    let spoof = move |_stop: Arc<AtomicBool>| {
        let mut a = Peer::new(&attacker_ip(7, 0, 1), dsht);
        let pong = a.call(Body::Ping).expect("pong");
        a.clusters = pong.header.clusters.to_vec();
        assert_eq!(a.clusters.len(), 2);
        // Far away: its pongs take 60 ms (an attacker can delay, never hasten).
        a.pong_delay = Duration::from_millis(60);
        a.verify();
        let key = Id::hash(b"level 2 key");
        let token = a.token(0, key);
        let store = a.call(Body::Store {
            level: 2,
            key,
            ttl_secs: 600,
            if_absent: false,
            token,
            value: Value::new(b"spoofed").unwrap(),
        });
        let get = a.call(Body::Get {
            level: 2,
            key,
            target: key,
        });
        (store.map(|m| m.body), get.map(|m| m.body))
    };
    let (served, (store, get)) = during(&mut honest, spoof);
    let refused = Some(Body::Error {
        code: ErrorCode::WrongCluster,
    });
    assert_eq!(store, refused);
    assert_eq!(get, refused);
    let key = Id::hash(b"level 2 key").to_string();
    let got = node.client(&["get", &key, "--levels", "2"]);
    assert_eq!(got["values"].as_array().map_or(0, Vec::len), 0, "{got}");
    honest.assert_served(served);
}

/// Row "amplification": a source that never answers our ping (a forged
/// address) gets at most 3× the bytes it sent, for every request kind,
/// counting our verifying ping.
#[test]
fn replies_to_unverified_sources_are_at_most_three_times_the_request() {
    common::own_network();
    let node = start_node(8, CONFIG, None);
    let mut honest = Honest::new(8, &node);
    // Contacts to fill replies: verified peers in ten /24s.
    let mut peers: Vec<Peer> = (0..10)
        .map(|j| {
            let mut p = Peer::new(&attacker_ip(8, j, 9), node.dsht);
            p.verify();
            p
        })
        .collect();
    // A key with four long values.
    let key = Id::hash(b"amplified key");
    for i in 0..4 {
        let v = format!("{i}{}", "v".repeat(200));
        node.client(&["put", &key.to_string(), &v, "--ttl", "600", "--levels", "0"]);
    }
    let dsht = node.dsht;
    let amplify = move |_stop: Arc<AtomicBool>| {
        let mut out = Vec::new();
        let miss = Id::hash(b"no such key");
        let bodies = [
            ("ping", Body::Ping),
            (
                "find-node",
                Body::FindNode {
                    level: 0,
                    target: miss,
                },
            ),
            (
                "members",
                Body::Members {
                    level: 0,
                    target: miss,
                },
            ),
            (
                "get with values",
                Body::Get {
                    level: 0,
                    key,
                    target: key,
                },
            ),
            (
                "get miss",
                Body::Get {
                    level: 0,
                    key: miss,
                    target: miss,
                },
            ),
            (
                "put-probe",
                Body::PutProbe {
                    level: 0,
                    key,
                    target: key,
                },
            ),
        ];
        for (h, (name, body)) in bodies.into_iter().enumerate() {
            // A fresh source per kind; it never answers pings.
            let a = Peer::new(&attacker_ip(8, 9, 10 + h as u8), dsht);
            let m = Message {
                header: a.header(0, 7),
                body,
            };
            let req = m.to_bytes();
            a.sock.send_to(&req, dsht).unwrap();
            let mut got = 0;
            let mut buf = vec![0u8; 65_536];
            a.sock
                .set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            while let Ok((n, _)) = a.sock.recv_from(&mut buf) {
                got += n;
            }
            out.push((name, req.len(), got));
        }
        out
    };
    let (served, ratios) = during(&mut honest, amplify);
    for (name, sent, got) in &ratios {
        println!(
            "{name}: {sent} bytes in, {got} bytes out ({:.2}x)",
            *got as f64 / *sent as f64
        );
        assert!(*got > 0, "{name}: no answer at all");
        assert!(got <= &(3 * sent), "{name}: {got} bytes for {sent}");
    }
    honest.assert_served(served);
    // Verified peers are served in full.
    let full = peers[0].get(0, key).unwrap();
    assert_eq!(full.len(), 4);
}

/// Row "memory": one source storing large values under new keys is held
/// to its quota, and the level to its bytes; the node's memory stays flat.
#[test]
fn memory_per_level_is_bounded_by_bytes() {
    common::own_network();
    let node = start_node(
        9,
        &format!("{CONFIG}[limits]\nstore_bytes_per_level_max = 1048576\nvalues_per_source_max = 100000\nvalues_per_prefix_max = 100000\n"),
        None,
    );
    let mut honest = Honest::new(9, &node);
    let rss_before = rss_kib(&node);
    let dsht = node.dsht;
    let fill = move |_stop: Arc<AtomicBool>| {
        let mut accepted = 0;
        for j in 0..4 {
            let mut a = Peer::new(&attacker_ip(9, j, 1), dsht);
            a.verify();
            let token = a.token(0, Id::ZERO);
            for i in 0..2500u32 {
                let k = Id::hash(&[j.to_be_bytes().as_slice(), &i.to_be_bytes()].concat());
                a.send(Body::Store {
                    level: 0,
                    key: k,
                    ttl_secs: 3600,
                    if_absent: false,
                    token,
                    value: Value::new(&[j; 255]).unwrap(),
                });
                if i % 100 == 99 {
                    for m in a.drain(Duration::from_millis(10)) {
                        accepted +=
                            usize::from(matches!(m.body, Body::StoreReply { stored: true, .. }));
                    }
                }
            }
            for m in a.drain(Duration::from_millis(300)) {
                accepted += usize::from(matches!(m.body, Body::StoreReply { stored: true, .. }));
            }
        }
        accepted
    };
    let (served, accepted) = during(&mut honest, fill);
    honest.assert_served(served);
    let levels = node.client(&["levels"]);
    let bytes = levels["levels"][0]["store_bytes"].as_u64().unwrap();
    assert!(bytes <= 1 << 20, "{bytes} bytes at level 0");
    assert!(
        accepted < 10_000 && accepted > 1000,
        "{accepted} of 10,000 stored"
    );
    // 10,000 values of 255 bytes would be 2.5 MB of values alone.
    let grown = rss_kib(&node).saturating_sub(rss_before);
    assert!(grown < 8 * 1024, "RSS grew by {grown} KiB");
}

/// Row "rate": one source that never answers our ping sends gets as fast as
/// it can; it gets about 5 a second over 10 s (50) and is then blocked,
/// while the good client (which answered our ping) is served.
#[test]
fn one_source_flooding_gets_is_rate_limited_and_blocked() {
    common::own_network();
    let node = start_node(10, CONFIG, None);
    let mut honest = Honest::new(10, &node);
    let (dsht, key) = (node.dsht, honest.key);
    let flood = move |stop: Arc<AtomicBool>| {
        let a = Peer::new(&attacker_ip(10, 0, 1), dsht);
        let m = Message {
            header: a.header(coral::dsht::node::route_of(&key), 9),
            body: Body::Get {
                level: 0,
                key,
                target: key,
            },
        }
        .to_bytes();
        a.sock.set_nonblocking(true).unwrap();
        let (mut sent, mut answers) = (0u64, 0u64);
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) || sent < 20_000 {
            if a.sock.send_to(&m, dsht).is_ok() {
                sent += 1;
                pace(sent);
            }
            while let Ok((n, _)) = a.sock.recv_from(&mut buf) {
                answers += u64::from(n > 1 && buf[1] == 0x83);
            }
        }
        a.sock.set_nonblocking(false).unwrap();
        a.sock
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        while let Ok((n, _)) = a.sock.recv_from(&mut buf) {
            answers += u64::from(n > 1 && buf[1] == 0x83);
        }
        (sent, answers)
    };
    let (served, (sent, answers)) = during(&mut honest, flood);
    assert!(sent >= 20_000);
    assert!(answers <= 60, "{answers} of {sent} gets answered");
    honest.assert_served(served);
    assert!(stats(&node)["rate_limited"].as_u64().unwrap() > 0);
}
