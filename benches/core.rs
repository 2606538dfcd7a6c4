//! Criterion benchmarks of the sans-IO core's hot paths.
//!
//! - `wire/*`: encoding and decoding the replies a busy node sends most
//!   (a get hit with four proxy pointers, a find-node reply with eight
//!   contacts), each with a two-level cluster header.
//! - `node/handle_get_hit`: the headline figure — one `Get` request datagram
//!   handed to a node that stores the key, and the reply encoded by
//!   `poll_transmit`. The goal is ≥ 1 million handled gets per second per core
//!   (≤ 1 µs each).
//! - `node/handle_find_node`: a `FindNode` request at a node with ~100
//!   contacts in its level-0 routing table, from a requester that has
//!   answered the node's verifying ping (so it gets a full 8-contact reply).
//!
//! Run: `cargo bench --bench core` (add `-- wire` or `-- node` to filter).
//! Runtimes are kept short (3 s of measurement, 30 samples per bench).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration as StdDuration;

use coral::dsht::id::Id;
use coral::dsht::node::route_of;
use coral::dsht::wire::{Body, ClusterInfo, Contact, Contacts, Header, Message, Services, Values};
use coral::{Config, Node, Time, Value};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use smallvec::SmallVec;

fn v4(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), port)
}

/// A header with a two-level cluster header (levels 1 and 2), as a node with
/// the default three levels sends.
fn header(sender: Id, txid: u32) -> Header {
    let mut clusters = SmallVec::new();
    clusters.push(ClusterInfo {
        id: Id::hash(b"cluster level 1"),
        age_secs: 86_400,
        size: 120,
    });
    clusters.push(ClusterInfo {
        id: Id::hash(b"cluster level 2"),
        age_secs: 3_600,
        size: 14,
    });
    Header {
        route: 0x5a3c,
        txid,
        sender,
        services: Services::HTTP.with(Services::DNS),
        clusters,
    }
}

/// Four proxy pointers (6-byte IPv4 address values).
fn proxy_values() -> Values {
    (1..=4)
        .map(|i| Value::from_addr(v4(192, 0, 2, i, 8080)))
        .collect()
}

fn contacts(n: u8) -> Contacts {
    (0..n)
        .map(|i| {
            let addr = v4(10, 0, 1, i + 1, 4000);
            Contact {
                id: Id::from_ip(addr.ip()),
                addr,
                services: Services::HTTP,
            }
        })
        .collect()
}

fn get_reply() -> Message {
    Message {
        header: header(Id::from_ip(IpAddr::V4(Ipv4Addr::LOCALHOST)), 0x0102_0304),
        body: Body::GetReply {
            level: 0,
            values: proxy_values(),
            contacts: Contacts::new(),
        },
    }
}

fn nodes_reply() -> Message {
    Message {
        header: header(Id::from_ip(IpAddr::V4(Ipv4Addr::LOCALHOST)), 0x0102_0304),
        body: Body::Nodes {
            level: 0,
            contacts: contacts(8),
        },
    }
}

fn bench_wire(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(1));
    for (name, msg) in [("get_reply", get_reply()), ("nodes_reply", nodes_reply())] {
        let bytes = msg.to_bytes();
        assert_eq!(Message::decode(&bytes).as_ref(), Ok(&msg));
        let mut buf = Vec::with_capacity(1500);
        g.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| {
                buf.clear();
                black_box(&msg).encode(&mut buf);
                black_box(buf.len())
            })
        });
        g.bench_function(format!("decode_{name}"), |b| {
            // Return nothing: criterion 0.5 without `real_blackbox` passes
            // the output through a byte-wise volatile read, which for a
            // ~700-byte `Message` costs more than the decode itself.
            b.iter(|| {
                let m = Message::decode(black_box(&bytes));
                black_box(&m);
            })
        });
        eprintln!(
            "wire/{name}: {} bytes on the wire, size_of::<Message>() = {}",
            bytes.len(),
            std::mem::size_of::<Message>()
        );
    }
    g.finish();
}

const NODE_ADDR: ([u8; 4], u16) = ([127, 0, 0, 1], 4000);
const REQUESTER: ([u8; 4], u16) = ([127, 0, 0, 2], 4000);

fn node_at(now: Time) -> Node {
    let addr = SocketAddr::from(NODE_ADDR);
    // The requester sends one request per simulated microsecond: the
    // per-source rate limits (SECURITY.md) are raised to that, so that
    // every request is served; the limiter still runs for each one.
    let config = Config {
        rate_requests_per_sec: 1_000_000,
        rate_verified_requests_per_sec: 1_000_000,
        ..Config::default()
    };
    Node::new(config, addr, now, 0x00c0_7a1d).expect("bench config is valid")
}

/// A request datagram from the requester (its header sender id bound to its
/// address, no cluster header: it asks at level 0).
fn request(body: Body, route: u16) -> Vec<u8> {
    let from = SocketAddr::from(REQUESTER);
    Message {
        header: Header {
            route,
            txid: 0x7e57_0001,
            sender: Id::from_ip(from.ip()),
            services: Services::NONE,
            clusters: SmallVec::new(),
        },
        body,
    }
    .to_bytes()
}

/// Hands `node` the datagram and drains every transmit; returns how many.
#[inline(always)]
fn serve(node: &mut Node, now: Time, from: SocketAddr, req: &[u8], out: &mut Vec<u8>) -> usize {
    node.handle(now, from, req).expect("request accepted");
    let mut n = 0;
    while node.poll_transmit(out).is_some() {
        n += 1;
    }
    n
}

/// Hands `node` the request from `from`, then answers the verifying ping it
/// sends to `from` with a pong from `from`, as a live peer would: afterwards
/// `from` is a source that has answered the node.
fn verify_requester(node: &mut Node, now: Time, from: SocketAddr, req: &[u8], out: &mut Vec<u8>) {
    node.handle(now, from, req).expect("request accepted");
    let mut ping = None;
    while let Some(to) = node.poll_transmit(out) {
        let m = Message::decode(out).expect("the node sends well-formed datagrams");
        if to == from && matches!(m.body, Body::Ping) {
            ping = Some(m.header);
        }
    }
    let ping = ping.expect("the node pings an unknown requester to verify it");
    let pong = Message {
        header: Header {
            route: ping.route,
            txid: ping.txid,
            sender: Id::from_ip(from.ip()),
            services: Services::NONE,
            clusters: SmallVec::new(),
        },
        body: Body::Pong,
    }
    .to_bytes();
    node.handle(now, from, &pong).expect("the pong is accepted");
    while node.poll_transmit(out).is_some() {}
}

fn bench_node(c: &mut Criterion) {
    let mut g = c.benchmark_group("node");
    g.throughput(Throughput::Elements(1));
    let from = SocketAddr::from(REQUESTER);
    let mut out = Vec::with_capacity(1500);

    // ---- handle_get_hit: the node stores four values under the key at level 0.
    {
        let now = Time(1_000_000);
        let mut node = node_at(now);
        let key = Id::from_url("http://www.example.com/flash-crowd.jpg");
        for v in proxy_values() {
            // No contacts: the put's lookup ends at once and stores locally.
            node.put(now, key, v, 3_600, Some(&[0]));
        }
        while node.poll_transmit(&mut out).is_some() {}
        let store = node.store(0).unwrap();
        assert!(store.has_values(&key, now), "the put stored locally");
        assert_eq!(store.values(&key, now).len(), 4);
        let req = request(
            Body::Get {
                level: 0,
                key,
                target: key,
            },
            route_of(&key),
        );
        // The first request may queue a verifying ping to the unknown
        // requester besides the reply; check the reply is a hit.
        serve(&mut node, now, from, &req, &mut out);
        let mut reply = None;
        let mut sent = 0;
        node.handle(now, from, &req).unwrap();
        while node.poll_transmit(&mut out).is_some() {
            reply = Some(Message::decode(&out).unwrap());
            sent += 1;
        }
        assert_eq!(sent, 1, "in the steady state a get sends only its reply");
        match reply.map(|m| m.body) {
            Some(Body::GetReply { values, .. }) => assert_eq!(values.len(), 4),
            other => panic!("expected a get hit, got {other:?}"),
        }
        let mut t = now;
        g.bench_function("handle_get_hit", |b| {
            b.iter(|| {
                t = Time(t.0 + 1);
                black_box(serve(&mut node, t, from, black_box(&req), &mut out))
            })
        });
        eprintln!(
            "node/handle_get_hit: request {} bytes, reply {} bytes",
            req.len(),
            out.len()
        );
    }

    // ---- handle_find_node: ~100 contacts in the level-0 table.
    {
        let now = Time(1_000_000);
        let mut node = node_at(now);
        let mut n = 0u32;
        while node.routing_table(0).unwrap().len() < 100 && n < 65_536 {
            let addr = v4(10, (n >> 8) as u8, n as u8, 1 + (n % 200) as u8, 4000);
            n += 1;
            let contact = Contact {
                id: Id::from_ip(addr.ip()),
                addr,
                services: Services::HTTP,
            };
            node.learn_verified(contact, 0, now, Some(coral::Duration::from_millis(20)));
        }
        let table_len = node.routing_table(0).unwrap().len();
        assert!(table_len >= 100, "routing table holds {table_len}");
        let target = Id::hash(b"some target");
        let req = request(Body::FindNode { level: 0, target }, 0x1234);
        // The first request from the unknown requester queues a verifying
        // ping; until the requester answers it, its replies are bounded (a
        // #16 rule: small replies to unverified sources). Answer the ping as
        // a real peer would, so the bench measures the verified case.
        verify_requester(&mut node, now, from, &req, &mut out);
        let mut t = now;
        g.bench_function("handle_find_node", |b| {
            b.iter(|| {
                t = Time(t.0 + 1);
                black_box(serve(&mut node, t, from, black_box(&req), &mut out))
            })
        });
        match Message::decode(&out).unwrap().body {
            Body::Nodes { contacts, .. } => assert_eq!(contacts.len(), 8),
            other => panic!("expected a nodes reply, got {other:?}"),
        }
        eprintln!(
            "node/handle_find_node: {table_len} contacts, request {} bytes, reply {} bytes",
            req.len(),
            out.len()
        );
    }

    // ---- A fresh node per batch: the cost of the first request from an
    // unknown peer (decode, verify, reply, and the verifying ping).
    {
        let now = Time(1_000_000);
        let key = Id::from_url("http://www.example.com/flash-crowd.jpg");
        let req = request(
            Body::Get {
                level: 0,
                key,
                target: key,
            },
            route_of(&key),
        );
        g.bench_function("handle_get_first_contact", |b| {
            b.iter_batched_ref(
                || node_at(now),
                |node| black_box(serve(node, now, from, black_box(&req), &mut out)),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(StdDuration::from_secs(3))
        .warm_up_time(StdDuration::from_secs(1))
        .sample_size(30);
    targets = bench_wire, bench_node
}
criterion_main!(benches);
