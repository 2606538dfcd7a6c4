//! Writes the seed corpora: one small valid message of every kind for
//! `wire_decode`, and short operation sequences for `node_handle`.
//!
//! Run from `fuzz/`: `cargo run --example gen_corpus` (rewrites
//! `corpus/wire_decode/seed-*` and `corpus/node_handle/seed-*`).

use std::fs;
use std::net::SocketAddr;
use std::path::Path;

use coral::dsht::wire::{
    Body, ClusterInfo, Contact, Contacts, ErrorCode, Header, Message, Services, Values,
};
use coral::{Id, Value};

fn header(clusters: usize) -> Header {
    Header {
        route: 0xabcd,
        txid: 0x0102_0304,
        sender: Id::from_ip("127.0.0.2".parse().unwrap()),
        services: Services::HTTP,
        clusters: (0..clusters)
            .map(|i| ClusterInfo {
                id: Id([0x11 * (i as u8 + 1); 20]),
                age_secs: 3600,
                size: 70,
            })
            .collect(),
    }
}

fn contacts() -> Contacts {
    ["10.0.0.1:4000", "[2001:db8::1]:4000"]
        .iter()
        .map(|a| {
            let addr: SocketAddr = a.parse().unwrap();
            Contact {
                id: Id::from_ip(addr.ip()),
                addr,
                services: Services::DNS,
            }
        })
        .collect()
}

fn values() -> Values {
    let proxy = Value::from_addr("192.0.2.7:8080".parse().unwrap());
    [proxy, Value::new(b"hi").unwrap()].into_iter().collect()
}

fn messages() -> Vec<(&'static str, Message)> {
    let key = Id::from_url("http://example.com/");
    let token = [7u8; 8];
    let bodies = vec![
        ("ping", 0, Body::Ping),
        ("pong", 1, Body::Pong),
        (
            "find_node",
            0,
            Body::FindNode {
                level: 0,
                target: key,
            },
        ),
        (
            "nodes",
            2,
            Body::Nodes {
                level: 1,
                contacts: contacts(),
            },
        ),
        (
            "members",
            2,
            Body::Members {
                level: 2,
                target: key,
            },
        ),
        (
            "members_reply",
            2,
            Body::MembersReply {
                level: 2,
                contacts: contacts(),
            },
        ),
        (
            "get",
            2,
            Body::Get {
                level: 2,
                key,
                target: key,
            },
        ),
        (
            "get_reply_values",
            2,
            Body::GetReply {
                level: 0,
                values: values(),
                contacts: Contacts::new(),
            },
        ),
        (
            "get_reply_contacts",
            0,
            Body::GetReply {
                level: 0,
                values: Values::new(),
                contacts: contacts(),
            },
        ),
        (
            "put_probe",
            1,
            Body::PutProbe {
                level: 1,
                key,
                target: key,
            },
        ),
        (
            "put_probe_reply",
            2,
            Body::PutProbeReply {
                level: 0,
                loaded: true,
                stay_mins: 2,
                value_count: 3,
                min_ttl_secs: 60,
                token,
                contacts: contacts(),
            },
        ),
        (
            "store",
            0,
            Body::Store {
                level: 0,
                key,
                ttl_secs: 3600,
                if_absent: true,
                token,
                value: values()[0].clone(),
            },
        ),
        (
            "store_reply",
            1,
            Body::StoreReply {
                level: 0,
                stored: false,
                values: values(),
            },
        ),
        (
            "error",
            0,
            Body::Error {
                code: ErrorCode::WrongCluster,
            },
        ),
    ];
    bodies
        .into_iter()
        .map(|(name, clusters, body)| {
            (
                name,
                Message {
                    header: header(clusters),
                    body,
                },
            )
        })
        .collect()
}

/// A `node_handle` datagram operation from `ADDRS[addr]`.
fn datagram(out: &mut Vec<u8>, addr: u8, bytes: &[u8]) {
    out.push(addr << 3);
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A `node_handle` reply operation: answers the `i`-th recent request, with
/// the sender id patched to SHA-1 of its address.
fn reply(out: &mut Vec<u8>, i: u8, bytes: &[u8]) {
    out.extend_from_slice(&[4 | 0x80, i]);
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let msgs = messages();
    for (name, m) in &msgs {
        let bytes = m.to_bytes();
        assert_eq!(Message::decode(&bytes).as_ref(), Ok(m));
        write(&root.join("wire_decode"), name, &bytes);
    }

    let nh = root.join("node_handle");
    // Every request kind from one peer, then a minute passes.
    let mut seq = Vec::new();
    for (_, m) in msgs.iter().filter(|(_, m)| m.body.is_request()) {
        datagram(&mut seq, 0, &m.to_bytes());
    }
    seq.extend_from_slice(&[5, 0x60, 0xea]); // +60 s
    write(&nh, "requests", &seq);
    // Learn two contacts, start a get and a put; answer the get (recent
    // request 0) with values, the put's two probes (1, 2) with a write token,
    // then the store that follows (3); time out the rest.
    let msg = |name: &str| msgs.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    let mut seq = vec![7 | (2 << 3), 0, 7 | (3 << 3), 0, 6, 1, 6 | (2 << 3), 9];
    let store_reply = Message {
        header: header(2),
        body: Body::StoreReply {
            level: 0,
            stored: true,
            values: Values::new(),
        },
    };
    let mut probe_reply = msg("put_probe_reply");
    if let Body::PutProbeReply {
        loaded,
        value_count,
        contacts,
        ..
    } = &mut probe_reply.body
    {
        *loaded = false;
        *value_count = 0;
        contacts.clear();
    }
    for (i, m) in [
        (0u8, msg("get_reply_values")),
        (1, probe_reply.clone()),
        (2, probe_reply),
        (3, store_reply),
    ] {
        reply(&mut seq, i, &m.to_bytes());
    }
    seq.extend_from_slice(&[5, 0xd0, 0x07, 5, 0x30, 0x75]); // +2 s, +30 s
    write(&nh, "ops", &seq);
    // Bootstrap: pings to the seven other addresses (recent requests 0..=6);
    // the first answers, which starts a lookup for our own id (request 7),
    // answered with two contacts; then two seconds pass.
    let mut seq = vec![6 | (5 << 3), 0];
    let pong = Message {
        header: header(0),
        body: Body::Pong,
    };
    reply(&mut seq, 0, &pong.to_bytes());
    let mut nodes = msg("nodes");
    if let Body::Nodes { level, .. } = &mut nodes.body {
        *level = 0;
    }
    reply(&mut seq, 7, &nodes.to_bytes());
    seq.extend_from_slice(&[5, 0xd0, 0x07]);
    write(&nh, "bootstrap", &seq);
    // Cache segments as a restart reads them: complete records, one cut
    // short before its commit word, one removed.
    let cr = root.join("cache_record");
    let meta = coral::cache::ObjectMeta {
        stored_secs: 1000,
        fresh_until_secs: 2000,
        expected_len: Some(5),
    };
    let mut seg = vec![0u8; 1024];
    let mut off = 0;
    for (i, body) in [&b"hello"[..], b"cut short", b"world"].iter().enumerate() {
        let key = coral::Id::hash(&[i as u8]);
        let n = coral::cache::record::write_record(&mut seg[off..], &key, &meta, b"HTTP/1.1 200 OK\r\n\r\n", body);
        if i == 1 {
            let at = off + coral::cache::record::COMMIT_AT;
            seg[at..at + 8].fill(0);
        }
        off += n as usize;
    }
    write(&cr, "segment", &seg[..off + 64]);
    let mut removed = seg.clone();
    removed[coral::cache::record::FLAGS_AT] |= coral::cache::record::FLAG_REMOVED as u8;
    write(&cr, "removed", &removed[..off]);
    let dns = dns_seeds();
    for (name, bytes) in &dns {
        write(&root.join("dns_answer"), name, bytes);
    }
    println!(
        "wrote {} wire_decode seeds, 3 node_handle seeds, 2 cache_record seeds and {} dns_answer seeds",
        msgs.len(),
        dns.len()
    );
}

/// A `dns_answer` input: the client byte, then a query (flags, name, type,
/// and an OPT record with `edns = Some((version, options))`).
fn dns_query(
    who: u8,
    flags: u16,
    name: &str,
    qtype: u16,
    edns: Option<(u8, &[(u16, &[u8])])>,
) -> Vec<u8> {
    let mut b = vec![who, 0x12, 0x34];
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    for l in name.split('.').filter(|l| !l.is_empty()) {
        b.push(l.len() as u8);
        b.extend_from_slice(l.as_bytes());
    }
    b.push(0);
    b.extend_from_slice(&qtype.to_be_bytes());
    b.extend_from_slice(&[0, 1]);
    if let Some((version, options)) = edns {
        let mut rdata = Vec::new();
        for (code, data) in options {
            rdata.extend_from_slice(&code.to_be_bytes());
            rdata.extend_from_slice(&(data.len() as u16).to_be_bytes());
            rdata.extend_from_slice(data);
        }
        b.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, version, 0, 0]);
        b.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        b.extend_from_slice(&rdata);
    }
    b
}

/// One query per kind of name and per protocol rule dnssrv answers.
fn dns_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let long = format!("{0}.{0}.{0}.{1}.coral.test", "a".repeat(63), "b".repeat(33));
    let ecs: &[u8] = &[0, 1, 24, 0, 10, 0, 2];
    vec![
        (
            "proxy_a",
            dns_query(1, 0x0100, "www.x.com.http.L2.L1.L0.coralcdn.test", 1, None),
        ),
        (
            "proxy_aaaa",
            dns_query(
                1,
                0x0100,
                "a.http.L2.L1.L0.coralcdn.test",
                28,
                Some((0, &[])),
            ),
        ),
        (
            "alias_ecs",
            dns_query(2, 0x0100, "wWw.X.cOm.coral.test", 1, Some((0, &[(8, ecs)]))),
        ),
        ("alias_long", dns_query(1, 0x0100, &long, 1, None)),
        (
            "apex_ns",
            dns_query(1, 0x0100, "coralcdn.test", 2, Some((0, &[(65001, b"x")]))),
        ),
        (
            "apex_soa",
            dns_query(1, 0x0100, "L1.L0.coralcdn.test", 6, None),
        ),
        (
            "empty_non_terminal",
            dns_query(1, 0x0100, "L0.coralcdn.test", 1, None),
        ),
        (
            "ns_host",
            dns_query(1, 0x0100, "ns-0a000004.L2.L1.L0.coralcdn.test", 1, None),
        ),
        (
            "nxdomain",
            dns_query(1, 0x0100, "nothing.coralcdn.test", 1, None),
        ),
        ("refused", dns_query(1, 0x0100, "example.org", 1, None)),
        (
            "badvers",
            dns_query(1, 0x0100, "coral.test", 39, Some((1, &[]))),
        ),
        ("any", dns_query(1, 0x0100, "coral.test", 255, None)),
        ("notimp", dns_query(1, 0x2800, "coral.test", 1, None)),
    ]
}
