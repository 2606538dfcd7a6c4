//! One sans-IO `Node` driven by arbitrary input: datagrams from a handful of
//! source addresses, replies that echo the transaction id of a request the
//! node really sent, timeouts, and API calls. The node must never panic, its
//! outgoing queue must drain, and every datagram it produces must decode
//! (the node only sends well-formed messages).
//!
//! Input format: a sequence of operations, each an op byte followed by its
//! arguments (a truncated last operation is dropped):
//!
//! | op % 8 | operation |
//! | 0..=3  | datagram: `len` (u16 LE), `len` bytes, from `ADDRS[(op >> 3) % 8]` |
//! | 4      | reply: `pick` (u8), `len` (u16 LE), `len` bytes, sent from the destination of the `pick`-th recent request, with its txid patched in; op bit 7 also patches the sender id to SHA-1 of that address |
//! | 5      | time: advance by `ms` (u16 LE) and run due timers |
//! | 6      | API call `(op >> 3) % 8` on key/value byte `k` (u8); the last also sets hints |
//! | 7      | `learn_verified` of contact `ADDRS[(op >> 3) % 8]` at level `k % 4` (u8) |

#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use coral::dsht::node::{DelegatedCall, Event};
use coral::dsht::wire::{Contact, Message, Services};
use coral::{Config, Duration, Id, Node, OpId, Time, Value};
use libfuzzer_sys::fuzz_target;

/// The node's own address.
const NODE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 4000);

fn addrs() -> [SocketAddr; 8] {
    let v4 = |a, b, c, d, p| SocketAddr::from((Ipv4Addr::new(a, b, c, d), p));
    [
        v4(127, 0, 0, 2, 4000),
        v4(127, 0, 0, 3, 4000),
        v4(10, 0, 0, 1, 4000),
        v4(10, 0, 0, 2, 5000),
        v4(192, 0, 2, 7, 4000),
        SocketAddr::from((Ipv6Addr::LOCALHOST, 4000)),
        SocketAddr::from((Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), 4000)),
        NODE, // a datagram that claims to come from the node itself
    ]
}

/// Recent requests the node sent: (destination, txid).
const RECENT_MAX: usize = 16;

struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (b, rest) = self.data.split_at(n);
        self.data = rest;
        b
    }
}

fn config() -> Config {
    // Small limits, so that the fuzzer reaches every bound.
    Config {
        require_id_binding: false,
        operations_max: 8,
        pending_rpcs_max: 64,
        transmit_queue_max: 256,
        event_queue_max: 64,
        verify_pings_max: 4,
        keys_per_level_max: 16,
        bucket_size: 4,
        lookup_contacts_max: 16,
        // Clusters are reconsidered often, so that validations, splits and
        // their probes run under the fuzzer too.
        cluster_eval_secs: 2,
        cluster_join_eval_secs: 1,
        cluster_observed_max: 16,
        // The open-Internet limits (SECURITY.md), small enough to be hit.
        values_per_source_max: 8,
        values_per_prefix_max: 12,
        store_bytes_per_level_max: 4096,
        bucket_contacts_per_ip_max: 1,
        bucket_contacts_per_prefix_max: 1,
        rate_requests_per_sec: 2,
        rate_verified_requests_per_sec: 20,
        rate_window_secs: 2,
        rate_block_secs: 5,
        rate_sources_max: 4,
        cluster_members_known_max: 4,
        ..Config::default()
    }
}

/// Drains every output; each datagram must decode, and requests are
/// remembered so that a later `reply` operation can answer them.
/// Delegated calls (the node is shard 0 of 2) are answered with an empty
/// result at once, as if the owning shard found nothing.
fn drain(node: &mut Node, now: Time, buf: &mut Vec<u8>, recent: &mut Vec<(SocketAddr, u32)>) {
    // Each level's store stays within its bytes.
    for l in node.levels(now) {
        assert!(
            l.store_bytes <= node.config().store_bytes_per_level_max,
            "level {} holds {} bytes",
            l.level,
            l.store_bytes
        );
    }
    while let Some(d) = node.poll_delegated() {
        let event = match d.call {
            DelegatedCall::Get { key, .. } => Event::GetDone {
                op: OpId(0),
                key,
                values: Vec::new(),
                level: None,
                local: false,
                closest: None,
                hops: 0,
                elapsed: Duration::ZERO,
            },
            DelegatedCall::Put { key, .. } => Event::PutDone {
                op: OpId(0),
                key,
                levels: Vec::new(),
                elapsed: Duration::ZERO,
            },
        };
        node.on_delegated_done(now, d.tag, event);
    }
    let limit = node.config().transmit_queue_max + 1;
    let mut n = 0;
    while let Some(to) = node.poll_transmit(buf) {
        n += 1;
        assert!(
            n <= limit,
            "poll_transmit returned more than its queue holds"
        );
        let msg = match Message::decode(buf) {
            Ok(m) => m,
            Err(e) => panic!("the node sent an undecodable datagram to {to} ({e}): {buf:02x?}"),
        };
        assert_eq!(
            &msg.to_bytes(),
            buf,
            "the node sent a non-canonical datagram"
        );
        if msg.body.is_request() {
            if recent.len() == RECENT_MAX {
                recent.remove(0);
            }
            recent.push((to, msg.header.txid));
        }
    }
    while node.poll_event().is_some() {}
    while node.poll_learned().is_some() {}
    while node.poll_cluster_change().is_some() {}
}

fuzz_target!(|data: &[u8]| {
    let addrs = addrs();
    let mut now = Time(1_000_000);
    let mut node = Node::new(config(), NODE, now, 7).expect("valid config");
    // Known cluster ids at levels 1 and 2, so requests can name them.
    node.set_cluster(1, Id([0x11; 20]), now);
    node.set_cluster(2, Id([0x22; 20]), now);
    node.set_shard(0, 2);
    let mut buf = Vec::new();
    let mut recent: Vec<(SocketAddr, u32)> = Vec::new();
    let mut input = Input { data };
    while let Some(op) = input.u8() {
        let pick = usize::from(op >> 3) % addrs.len();
        match op % 8 {
            0..=3 => {
                let Some(len) = input.u16() else { break };
                let datagram = input.bytes(usize::from(len));
                let _ = node.handle(now, addrs[pick], datagram);
            }
            4 => {
                let (Some(i), Some(len)) = (input.u8(), input.u16()) else {
                    break;
                };
                let mut datagram = input.bytes(usize::from(len)).to_vec();
                let picked = (!recent.is_empty()).then(|| recent[usize::from(i) % recent.len()]);
                if let Some((to, txid)) = picked {
                    if datagram.len() >= 8 {
                        datagram[4..8].copy_from_slice(&txid.to_be_bytes());
                    }
                    if op & 0x80 != 0 && datagram.len() >= 28 {
                        datagram[8..28].copy_from_slice(&Id::from_ip(to.ip()).0);
                    }
                    let _ = node.handle(now, to, &datagram);
                } else {
                    let _ = node.handle(now, addrs[pick], &datagram);
                }
            }
            5 => {
                let Some(ms) = input.u16() else { break };
                now = now + Duration::from_millis(u64::from(ms));
                node.handle_timeout(now);
                assert!(
                    node.poll_timeout().is_none_or(|t| t > now),
                    "handle_timeout left a due timer"
                );
            }
            6 => {
                let Some(k) = input.u8() else { break };
                let key = Id::hash(&[k]);
                let value = Value::from_addr(addrs[usize::from(k) % addrs.len()]);
                match (op >> 3) % 8 {
                    0 => {
                        node.get(now, key, None);
                    }
                    1 => {
                        node.get(now, key, Some(&[k % 4]));
                    }
                    2 => {
                        node.put(now, key, value, u32::from(k) * 60, None);
                    }
                    3 => {
                        node.put(now, key, value, u32::from(k), Some(&[k % 4, 0]));
                    }
                    4 => {
                        node.claim(now, key, value, 600);
                    }
                    5 => node.bootstrap(now, &addrs),
                    6 => node.refresh(now, key, k % 4),
                    _ => {
                        let _ = node.levels(now);
                        let _ = node.nodes(k % 4, usize::from(k), None, Services(k & 7));
                        node.set_hints(now, &[key, Id::hash(&[k, k])]);
                    }
                }
            }
            _ => {
                let Some(k) = input.u8() else { break };
                let addr = addrs[pick];
                let contact = Contact {
                    id: Id::from_ip(addr.ip()),
                    addr,
                    services: Services(k & 7),
                };
                node.learn_verified(
                    contact,
                    k % 4,
                    now,
                    Some(Duration::from_millis(u64::from(k))),
                );
            }
        }
        drain(&mut node, now, &mut buf, &mut recent);
    }
    drain(&mut node, now, &mut buf, &mut recent);
});
