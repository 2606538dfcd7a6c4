//! `coral node` processes on loopback addresses, driven through the client
//! commands, and datagrams sent straight at a node's sockets.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use coral::dsht::wire::{Body, Header, Message, Services};
use coral::Id;

use common::{temp_dir, write_file, Node};

/// Node processes, killed when dropped.
struct Cluster {
    nodes: Vec<Node>,
}

impl Cluster {
    /// Starts `n` nodes on 127.0.`net`.1..=n, each joining through the first.
    fn start(net: u8, n: u8, cores: usize) -> Cluster {
        Cluster::start_with(net, n, cores, None)
    }

    /// Like [`Cluster::start`], with a config file.
    fn start_with(net: u8, n: u8, cores: usize, config: Option<&Path>) -> Cluster {
        let first = format!("127.0.{net}.1");
        let mut nodes: Vec<Node> = Vec::new();
        for i in 1..=n {
            let mut node = Node::on(&format!("127.0.{net}.{i}")).cores(cores);
            if let Some(path) = config {
                node = node.config(path);
            }
            if i > 1 {
                node = node.bootstrap(&first);
            }
            let node = node.spawn();
            // The others join through the first: it serves before they start.
            if i == 1 {
                node.wait_ready();
            }
            nodes.push(node);
        }
        for node in &nodes {
            node.wait_ready();
        }
        Cluster { nodes }
    }

    fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    fn client(&self, i: usize, args: &[&str]) -> serde_json::Value {
        self.nodes[i].client(args)
    }
}

/// Answers `msg` if it is a ping (a node verifies the sources it serves).
fn answer_ping(sock: &UdpSocket, sender: Id, msg: &Message, from: SocketAddr) {
    if msg.body == Body::Ping {
        let pong = Message {
            header: Header {
                route: msg.header.route,
                txid: msg.header.txid,
                sender,
                services: Services::NONE,
                clusters: Default::default(),
            },
            body: Body::Pong,
        };
        let _ = sock.send_to(&pong.to_bytes(), from);
    }
}

/// A get for `key` at level 0 from `sender`, carrying the key's route.
fn get_request(key: Id, txid: u32, sender: Id) -> Message {
    Message {
        header: Header {
            route: coral::dsht::node::route_of(&key),
            txid,
            sender,
            services: Services::NONE,
            clusters: Default::default(),
        },
        body: Body::Get {
            level: 0,
            key,
            target: key,
        },
    }
}

fn found(v: &serde_json::Value) -> usize {
    v["values"].as_array().map_or(0, Vec::len)
}

#[test]
fn twelve_nodes_put_get_nodes_levels_and_survive_losing_a_third() {
    // Twelve nodes in one /24 are a lab: the routing tables' limit of two
    // contacts per /24 per bucket (SECURITY.md) is raised for it.
    let dir = temp_dir("twelve");
    let config = write_file(
        dir.path(),
        "coral.toml",
        "[limits]\nbucket_contacts_per_prefix_max = 8\n",
    );
    let mut c = Cluster::start_with(31, 12, 1, Some(&config));
    // Let the joins settle (self-lookups and bucket refreshes): wait until
    // node 5 knows at least 6 others, with a deadline a loaded machine meets.
    let start = Instant::now();
    let levels = loop {
        let levels = c.client(5, &["levels"]);
        if levels["levels"][0]["contacts"].as_u64().unwrap_or(0) >= 6 {
            break levels;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "node 5 knows fewer than 6 others after 60 s: {levels}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(levels["levels"].as_array().unwrap().len(), 3);
    let nodes = c.client(7, &["nodes", "--level", "0", "--count", "5"]);
    assert_eq!(nodes["nodes"].as_array().unwrap().len(), 5);
    // Ten objects, each cached by the four proxies j, j+3, j+6, j+9 (mod 12).
    let putters = |j: usize| [j % 12, (j + 3) % 12, (j + 6) % 12, (j + 9) % 12];
    for j in 0..10 {
        let key = format!("url:http://www.x.com/{j}.jpg");
        for p in putters(j) {
            let put = c.client(
                p,
                &[
                    "put",
                    &key,
                    &format!("127.0.31.{}:8090", p + 1),
                    "--ttl",
                    "600",
                ],
            );
            assert!(put["levels"][0]["stored_at"].is_string(), "{put}");
        }
    }
    for j in 0..10 {
        let key = format!("url:http://www.x.com/{j}.jpg");
        let got = c.client((j + 1) % 12, &["get", &key]);
        assert!(found(&got) > 0, "{key}: {got}");
    }
    // A third of the nodes die (never node 0, the one the others joined through).
    for i in [1, 4, 7, 10] {
        c.kill(i);
    }
    let alive = |i: usize| ![1, 4, 7, 10].contains(&i);
    // Proxies renew their pointers (§3.2); then every object is found from
    // every surviving node, through lookups that meet dead nodes on the way.
    for j in 0..10 {
        let key = format!("url:http://www.x.com/{j}.jpg");
        for p in putters(j).into_iter().filter(|&p| alive(p)) {
            c.client(
                p,
                &[
                    "put",
                    &key,
                    &format!("127.0.31.{}:8090", p + 1),
                    "--ttl",
                    "600",
                ],
            );
        }
    }
    for j in 0..10 {
        let key = format!("url:http://www.x.com/{j}.jpg");
        let from = (0..12).filter(|&i| alive(i)).nth(j % 8).unwrap();
        let got = c.client(from, &["get", &key]);
        assert!(
            found(&got) > 0,
            "after the crash, {key} from node {from}: {got}"
        );
    }
}

#[test]
fn keys_are_served_by_their_owning_core() {
    let c = Cluster::start(32, 1, 2);
    let node: SocketAddr = "127.0.32.1:7000".parse().unwrap();
    let me = UdpSocket::bind("127.0.32.9:0").unwrap();
    me.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let sender = Id::from_ip(me.local_addr().unwrap().ip());
    // 200 gets for keys spread over the id space; each carries its key's route.
    let mut want = [0u64; 2];
    let mut buf = [0u8; 2048];
    for k in 0..200u32 {
        let msg = get_request(Id::hash(&k.to_be_bytes()), k, sender);
        let route = msg.header.route;
        want[((u32::from(route) * 2) >> 16) as usize] += 1;
        me.send_to(&msg.to_bytes(), node).unwrap();
        // Read the answer, answering the node's verifying pings (a client
        // that does not is held to 5 requests a second, SECURITY.md).
        loop {
            let (n, from) = me.recv_from(&mut buf).expect("an answer");
            let reply = Message::decode(&buf[..n]).unwrap();
            answer_ping(&me, sender, &reply, from);
            if reply.header.txid == k && matches!(reply.body, Body::GetReply { .. }) {
                assert_eq!(reply.header.route, route, "the reply echoes the route");
                break;
            }
        }
    }
    // Malformed datagrams are dropped and counted; the node keeps answering.
    for junk in [
        &b""[..],
        b"\x01",
        b"\x09\x01\x00\x00garbage",
        &[0xffu8; 300][..],
    ] {
        me.send_to(junk, node).unwrap();
    }
    let stats = c.client(0, &["stats"]);
    let cores = stats["cores"].as_array().unwrap();
    let served: Vec<u64> = cores
        .iter()
        .map(|c| c["gets_served"].as_u64().unwrap())
        .collect();
    assert_eq!(served, want, "gets served per core vs keys owned per core");
    let malformed: u64 = cores.iter().map(|c| c["malformed"].as_u64().unwrap()).sum();
    assert_eq!(malformed, 4);
    let levels = c.client(0, &["levels"]);
    assert_eq!(levels["cores"], 2);
}

/// A burst of gets, more than one `recvmmsg` batch (32) and sent without
/// waiting for answers, is answered in full: every datagram of every batch
/// is handed to the node and every reply leaves in the batch's `sendmmsg`.
/// The client is on the node's own IP (a local proxy: not rate-limited,
/// not pinged), as the DSHT bench's is.
#[test]
fn a_burst_longer_than_one_recvmmsg_is_all_answered() {
    const BURST: u32 = 100;
    let c = Cluster::start(36, 1, 1);
    let node: SocketAddr = "127.0.36.1:7000".parse().unwrap();
    let me = UdpSocket::bind("127.0.36.1:0").unwrap();
    me.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let sender = Id::from_ip(me.local_addr().unwrap().ip());
    // Replies are read as they come, while the burst goes out.
    let reader = {
        let me = me.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut seen = vec![false; BURST as usize];
            let mut buf = [0u8; 2048];
            let deadline = Instant::now() + Duration::from_secs(60);
            while seen.iter().any(|s| !s) && Instant::now() < deadline {
                let Ok((n, _)) = me.recv_from(&mut buf) else {
                    continue;
                };
                let reply = Message::decode(&buf[..n]).expect("a reply that decodes");
                if let (Body::GetReply { .. }, Some(s)) =
                    (&reply.body, seen.get_mut(reply.header.txid as usize))
                {
                    assert!(!*s, "txid {} answered twice", reply.header.txid);
                    *s = true;
                }
            }
            seen.iter().filter(|s| **s).count()
        })
    };
    let burst: Vec<Vec<u8>> = (0..BURST)
        .map(|k| get_request(Id::hash(&k.to_be_bytes()), k, sender).to_bytes())
        .collect();
    for msg in &burst {
        me.send_to(msg, node).unwrap();
    }
    let answered = reader.join().unwrap();
    assert_eq!(answered, BURST as usize, "gets of the burst answered");
    let stats = c.client(0, &["stats"]);
    let core = &stats["cores"][0];
    assert_eq!(core["gets_served"].as_u64(), Some(u64::from(BURST)));
    assert_eq!(core["send_errors"].as_u64(), Some(0));
}

#[test]
fn sigterm_stops_a_node_cleanly() {
    let mut c = Cluster::start(33, 1, 2);
    c.nodes[0].signal(libc::SIGTERM);
    let status = c.nodes[0]
        .exit_within(Duration::from_secs(30))
        .expect("node did not stop on SIGTERM in 30 s");
    assert!(status.success(), "exit status {status}");
}

#[test]
fn a_flood_of_bad_datagrams_does_not_stop_good_answers() {
    let c = Cluster::start(34, 1, 2);
    let node: SocketAddr = "127.0.34.1:7000".parse().unwrap();
    // A flooder sends junk as fast as it can for the whole test.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let flooder = {
        let (stop, progress) = (stop.clone(), progress.clone());
        std::thread::spawn(move || {
            let s = UdpSocket::bind("127.0.34.8:0").unwrap();
            let mut sent = 0u64;
            let mut junk = [0u8; 96];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && sent < 2_000_000 {
                junk[0] = (sent % 7) as u8; // mostly bad versions, sometimes a valid one with a bad body
                junk[2] = sent as u8;
                junk[3] = (sent >> 8) as u8;
                let _ = s.send_to(&junk[..(sent % 96) as usize], node);
                sent += 1;
                progress.store(sent, std::sync::atomic::Ordering::Relaxed);
            }
            sent
        })
    };
    // The flood is well under way before the good requests start.
    let start = Instant::now();
    while progress.load(std::sync::atomic::Ordering::Relaxed) < 20_000 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the flooder did not get going"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let me = UdpSocket::bind("127.0.34.9:0").unwrap();
    me.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let sender = Id::from_ip(me.local_addr().unwrap().ip());
    let mut buf = [0u8; 2048];
    let mut answered = 0;
    for k in 0..100u32 {
        let msg = get_request(Id::hash(&k.to_be_bytes()), k, sender).to_bytes();
        // UDP under a flood may drop a datagram: up to five tries each.
        'tries: for _ in 0..5 {
            me.send_to(&msg, node).unwrap();
            while let Ok((n, from)) = me.recv_from(&mut buf) {
                if let Ok(reply) = Message::decode(&buf[..n]) {
                    answer_ping(&me, sender, &reply, from);
                    if reply.header.txid == k && matches!(reply.body, Body::GetReply { .. }) {
                        answered += 1;
                        break 'tries;
                    }
                }
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = flooder.join().unwrap();
    assert_eq!(
        answered, 100,
        "good requests answered during a flood of {sent} bad datagrams"
    );
    let stats = c.client(0, &["stats"]);
    let malformed: u64 = stats["cores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["malformed"].as_u64().unwrap())
        .sum();
    assert!(malformed > 1000, "only {malformed} counted as malformed");
}

/// How long the nodes may take to settle into one stable cluster per level:
/// generous, for a loaded machine (it takes seconds when idle).
const CLUSTERS_STABLE_TIMEOUT_SECS: u64 = 240;

/// §4.4 on real processes: nodes a loopback hop apart (well within the
/// thresholds) start as singletons and end in one cluster at levels 1 and 2.
/// With two cores each, core 0 decides and core 1 follows: a value put at
/// level 2 only is found at level 2 only, wherever its key's owning core is.
#[test]
fn nodes_a_loopback_hop_apart_form_one_cluster_at_every_level_section_4_4() {
    let dir = temp_dir("clusters");
    let config = dir.path().join("coral.toml");
    // The thresholds: a loopback hop is a few µs of network, but what a node
    // measures is the RPC's whole round trip, run-queue waits included. On a
    // loaded 2-core machine (load average 11) that is often over 20 ms, so
    // with the default [60, 20] ms more than half of a 2 s period's accesses
    // can miss level 2's threshold: nodes leave by the §4.4 leave rule, the
    // clusters never hold still, and the wait below ran out. The test's
    // premise is "a hop well within the thresholds"; it keeps that premise
    // with thresholds a loaded machine's hop stays within. What it checks is
    // unchanged: singletons merge into one cluster per level, it holds, and
    // level-2-only puts are found at level 2.
    std::fs::write(
        &config,
        "[dht]\nlevel_thresholds_ms = [0, 1000, 500]\n[clusters]\neval_secs = 2\njoin_eval_secs = 1\n",
    )
    .unwrap();
    let c = Cluster::start_with(35, 4, 2, Some(&config));
    // (cluster, contacts, switches) at each non-global level of node i.
    type Levels = Vec<(String, u64, u64)>;
    let clusters_of = |i: usize| -> Levels {
        let l = c.client(i, &["levels"]);
        l["levels"]
            .as_array()
            .unwrap()
            .iter()
            .skip(1)
            .map(|l| {
                let id = l["cluster"].as_str().unwrap().to_string();
                let k = &l["clustering"];
                let switches = ["merges", "splits", "leaves", "singletons"]
                    .iter()
                    .map(|n| k[*n].as_u64().unwrap_or(0))
                    .sum();
                (id, l["contacts"].as_u64().unwrap(), switches)
            })
            .collect()
    };
    let ids = |seen: &[Levels]| -> Vec<Vec<String>> {
        seen.iter()
            .map(|s| s.iter().map(|l| l.0.clone()).collect())
            .collect()
    };
    // Wait for one cluster per level with members in every table, and for
    // it to hold: no node changes cluster over two evaluation periods (a
    // node that switches clusters empties that level's store, §4.4, so a
    // put made just before a late switch is rightly gone).
    let start = Instant::now();
    let mut stable_since: Option<(Instant, Vec<Levels>)> = None;
    let seen = loop {
        let seen = (0..4).map(clusters_of).collect::<Vec<_>>();
        let same = seen
            .iter()
            .all(|s| s.iter().zip(&seen[0]).all(|(a, b)| a.0 == b.0) && s.iter().all(|l| l.1 >= 1));
        let counters =
            |s: &[Levels]| -> Vec<u64> { s.iter().flat_map(|n| n.iter().map(|l| l.2)).collect() };
        match &stable_since {
            Some((t, before))
                if same && ids(before) == ids(&seen) && counters(before) == counters(&seen) =>
            {
                if t.elapsed() >= Duration::from_secs(4) {
                    break seen;
                }
            }
            _ => stable_since = same.then(|| (Instant::now(), seen.clone())),
        }
        assert!(
            start.elapsed() < Duration::from_secs(CLUSTERS_STABLE_TIMEOUT_SECS),
            "no common, stable clusters with members in every table after {CLUSTERS_STABLE_TIMEOUT_SECS} s: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("clusters after {:?}: {:?}", start.elapsed(), seen[0]);
    // Keys whose owners are core 0 and core 1, put at level 2 only.
    for key in ["00".repeat(20), "ff".repeat(20)] {
        let put = c.client(
            1,
            &["put", &key, "level-two", "--ttl", "600", "--levels", "2"],
        );
        assert!(put["levels"][0]["stored_at"].is_string(), "{put}");
        // Follower cores hear of the new cluster's members over the mesh
        // (as they happen, and core 0's whole table every 2 s).
        let start = Instant::now();
        let get = loop {
            let get = c.client(3, &["get", &key, "--levels", "2"]);
            if found(&get) == 1 || start.elapsed() > Duration::from_secs(60) {
                break get;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let after = (0..4).map(clusters_of).collect::<Vec<_>>();
        assert_eq!(
            found(&get),
            1,
            "{get}\nput: {put}\nclusters before: {seen:?}\nclusters now: {after:?}"
        );
        assert_eq!(get["level"], 2, "{get}");
    }
}
