//! dnssrv, the authoritative DNS redirector (NSDI 2004 §3.1), sans-IO.
//!
//! [`Dnssrv::answer`] takes one query (bytes, the client's address, `now`,
//! the transport) and a [`View`] of what the node knows, and writes the
//! answer bytes, or nothing. What it wants done off the hot path (measure a
//! client, verify a level's proxies) it queues as [`FollowUp`]s. No clock,
//! socket or thread: the runtime (`shards/src/dns.rs`) moves the bytes.
//!
//! # The names (zone Z, alias A)
//!
//! | name                               | what it holds                                   |
//! |------------------------------------|-------------------------------------------------|
//! | `Z`, `L0.Z`, `L1.L0.Z`, `L2.L1.L0.Z` | zone apexes we serve: SOA, NS (+ glue); no A |
//! | `ns-<hex IP>.<apex>`               | a name server: A (8 hex digits) or AAAA (32)    |
//! | `http.L2.L1.L0.Z` and every name under it | A/AAAA of live proxies near the client   |
//! | `A`                                | SOA, NS (named under Z), DNAME → `http.L2.L1.L0.Z` |
//! | every name under `A`               | the DNAME, the synthesized CNAME, then the proxies |
//! | anything else under Z              | NXDOMAIN (SOA of the closest apex)              |
//! | anything else                      | REFUSED                                         |
//!
//! `L1.L0.Z` queried for A is NODATA with the SOA, never NXDOMAIN (RFC 8020:
//! it has names under it).
//!
//! # Locality and resolver locking
//!
//! The client (the resolver, or the EDNS Client Subnet when one is sent) is
//! put at level 2 if its network's RTT is within level 2's threshold, else
//! level 1 if within level 1's, else 0; a network not yet measured is at
//! level [`DnsConfig::default_level`] (0: no cluster is assumed) and a probe
//! is asked for ([`FollowUp::Probe`], bounded per destination, per /24 and
//! per second). A records come from that level's cluster (TTL 30 s at levels
//! 0–1, 60 s at level 2); the authority section delegates the zone of that
//! level (`L0.Z`, `L1.L0.Z` or `L2.L1.L0.Z`) to name servers of the same
//! cluster, with glue, for an hour, so a resolver keeps asking the nearest
//! dnssrv instances (§3.1). Name servers are named by their address
//! (`ns-7f0d0101.L2.L1.L0.Z` is 127.13.1.1), so every node can answer for
//! every name server's glue without any state.

mod fast;
mod limits;
mod near;
mod view;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use domain::base::iana::{Class, Opcode, OptRcode, Rcode, Rtype};
use domain::base::message_builder::{AdditionalBuilder, AnswerBuilder, MessageBuilder, PushError};
use domain::base::name::{Name, ParsedName};
use domain::base::opt::{ClientSubnet, Opt, OptRecord, UnknownOptData};
use domain::base::wire::Composer;
use domain::base::{Message, Question, Serial, Ttl};
use domain::dep::octseq::{OctetsBuilder, Truncate};
use domain::rdata::{Aaaa, Cname, Dname, Ns, Soa, A};

pub use limits::{prefix_key, Clients, ProbeLimiter, RateLimiter, Rrl};
pub use near::{lookup_keys, NearCache, HINT_HOPS_LAST, HINT_LOOKUP_KEYS_MAX, NEAR_NODES_MAX};
pub use view::{LevelView, Peer, View};

use crate::dsht::id::{keyed_hasher, Key};
use crate::dsht::node::Level;
use crate::time::{Duration, Time};

/// Levels the names have: `L0`, `L1`, `L2`.
pub const LEVELS: usize = 3;
/// Most A records in one answer.
pub const ANSWERS_MAX: usize = 16;
/// Most name servers in one delegation.
pub const NAMESERVERS_MAX: usize = 8;
/// Plain DNS over UDP without EDNS (RFC 1035).
const UDP_PLAIN_BYTES: usize = 512;
/// A DNS message over TCP.
const TCP_MESSAGE_BYTES: usize = 65_535;
/// Time-to-live of A records for clients at levels 0 and 1 (§3.1).
pub const A_TTL_SECS_NEAR: u32 = 30;
/// Time-to-live of A records for clients at level 2.
pub const A_TTL_SECS_LEVEL2: u32 = 60;
/// Time-to-live of NS records and their glue: resolvers lock onto a cluster's
/// name servers for an hour (§3.1).
pub const NS_TTL_SECS: u32 = 3600;
/// Time-to-live of the SOA, the DNAME and its synthesized CNAME.
pub const ZONE_TTL_SECS: u32 = 3600;
/// Negative answers are cached this long (the SOA minimum, RFC 2308).
pub const NEGATIVE_TTL_SECS: u32 = 30;
/// EDNS option code of Client Subnet (RFC 7871).
const OPT_CLIENT_SUBNET: u16 = 8;
/// Name servers' names kept made.
const NS_CACHE_MAX: usize = 64;
/// How often a level with no live proxy may ask for verification pings.
const VERIFY_INTERVAL: Duration = Duration::from_secs(5);
/// Verification rounds a held query may ask for, per level: at most one
/// per this interval.
const HOLD_ROUND_INTERVAL: Duration = Duration::from_millis(250);
/// The rank of a proxy a hint found near the client: above any shared
/// prefix length (at most 128 bits).
const HINT_RANK: u32 = 256;

/// dnssrv's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsConfig {
    /// The zone, lower case, no trailing dot (e.g. `coralcdn.test`).
    pub zone: String,
    /// The alias zone (DNAME to `http.L2.L1.L0.<zone>`).
    pub alias: Option<String>,
    /// RTT threshold per level in ms (level 0: `u32::MAX`), as the DSHT's.
    pub level_thresholds_ms: Vec<u32>,
    /// A records per answer (at most [`ANSWERS_MAX`]).
    pub answers_max: usize,
    /// Name servers per delegation (at most [`NAMESERVERS_MAX`]).
    pub nameservers_max: usize,
    /// A proxy is live if it answered one of our RPCs this recently.
    pub live_secs: u64,
    /// Largest UDP answer with EDNS (RFC 8906 / DNS flag day 2020: 1232).
    pub udp_payload_bytes: u16,
    /// The level of a client not measured yet.
    pub default_level: Level,
    /// Responses a second per client prefix over UDP (0: no limit).
    pub rrl_responses_per_sec: u32,
    /// Over the limit, every `rrl_slip`-th response is sent truncated.
    pub rrl_slip: u32,
    /// A destination is probed at most once this often.
    pub probe_interval_secs: u64,
    /// Probes per /24 (/56) per `probe_interval_secs`.
    pub probes_per_prefix: u32,
    /// Probes a second in all.
    pub probes_per_sec: u32,
    /// Client networks remembered.
    pub clients_max: usize,
    /// How long a client network's measured RTT is used.
    pub client_rtt_secs: u64,
    /// The zones' SOA serial.
    pub serial: u32,
    /// Longest a query with no live proxy is held while candidates are
    /// pinged (0: never held).
    pub hold_ms: u64,
    /// Queries held at once per core; beyond it they are answered at once.
    pub held_max: usize,
}

impl Default for DnsConfig {
    fn default() -> DnsConfig {
        DnsConfig {
            zone: "coralcdn.test".into(),
            alias: Some("coral.test".into()),
            level_thresholds_ms: vec![u32::MAX, 60, 20],
            answers_max: 4,
            nameservers_max: 3,
            live_secs: 300,
            udp_payload_bytes: 1232,
            default_level: 0,
            rrl_responses_per_sec: 100,
            rrl_slip: 2,
            probe_interval_secs: 600,
            probes_per_prefix: 4,
            probes_per_sec: 20,
            clients_max: 65_536,
            client_rtt_secs: 3600,
            serial: 1,
            hold_ms: 400,
            held_max: 128,
        }
    }
}

/// How the query came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// UDP: size-limited, truncated answers, rate-limited.
    Udp,
    /// TCP: the whole answer.
    Tcp,
}

/// Work the runtime should do off the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowUp {
    /// Measure the RTT to this address, then call [`Dnssrv::on_rtt`].
    Probe(IpAddr),
    /// No proxy of this level was live: ping its proxies.
    Verify(Level),
    /// Get these DSHT hint keys (the first `len`) of a client's last hops
    /// and network, then call [`Dnssrv::on_hints`] with the nodes found.
    Hints {
        /// The probed address (the resolver, or the Client Subnet's).
        client: IpAddr,
        /// The keys, nearest the client first.
        keys: [Key; HINT_LOOKUP_KEYS_MAX],
        /// How many of `keys` are set.
        len: u8,
    },
    /// Ping this node (a hint named it): its reply verifies it alive.
    Ping(SocketAddr),
}

/// What dnssrv counted on one core: plain counters, each only ever
/// incremented. The runtime exposes them per core as `dns` in the metrics
/// JSON, one field each ([`Counters::fields`] names them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Datagrams and TCP frames handed to the answer function.
    pub queries: u64,
    /// Queries for A records.
    pub queries_a: u64,
    /// Queries for AAAA records.
    pub queries_aaaa: u64,
    /// Queries for NS records.
    pub queries_ns: u64,
    /// Queries for the SOA.
    pub queries_soa: u64,
    /// Queries for ANY (answered minimally, RFC 8482).
    pub queries_any: u64,
    /// Queries for any other type.
    pub queries_other: u64,
    /// Answers with rcode NOERROR (with data or NODATA).
    pub rcode_noerror: u64,
    /// Answers with rcode NXDOMAIN.
    pub rcode_nxdomain: u64,
    /// Answers with rcode REFUSED (outside our zones, zone transfers).
    pub rcode_refused: u64,
    /// Answers with rcode FORMERR (malformed queries).
    pub rcode_formerr: u64,
    /// Answers with rcode NOTIMP (opcodes other than QUERY).
    pub rcode_notimp: u64,
    /// Answers with extended rcode BADVERS (EDNS version above 0).
    pub rcode_badvers: u64,
    /// Answers with any other rcode (YXDOMAIN for over-long DNAME targets).
    pub rcode_other: u64,
    /// Proxy queries from clients placed at level 0 (distant or unmeasured).
    pub client_level0: u64,
    /// Proxy queries from clients placed at level 1.
    pub client_level1: u64,
    /// Proxy queries from clients placed at level 2 (nearest).
    pub client_level2: u64,
    /// Answers with proxies in them.
    pub answers_proxied: u64,
    /// Answers for proxy names with no live proxy (NODATA).
    pub answers_no_proxy: u64,
    /// Answers whose first proxy was found through a clustering hint near
    /// the client.
    pub answers_hinted: u64,
    /// UDP answers truncated for size (TC; the client retries over TCP).
    pub truncated: u64,
    /// Datagrams not answered: responses, runts, and `rrl_dropped`.
    pub dropped: u64,
    /// Responses dropped by response rate limiting.
    pub rrl_dropped: u64,
    /// Responses rate limiting sent truncated instead (slip).
    pub rrl_slipped: u64,
    /// Client probes (RTT and last hops) asked of the runtime.
    pub probes_sent: u64,
    /// Client probes refused by the probe limiter (per destination, per
    /// /24, per second) or by a full probe queue.
    pub probes_refused: u64,
    /// Probes whose destination answered (its RTT measured).
    pub probes_answered: u64,
    /// DSHT lookups of a client's hint keys started.
    pub hint_lookups: u64,
    /// Nodes those lookups found near clients.
    pub hint_nodes_found: u64,
    /// Queries held while candidate proxies were pinged (no live proxy).
    pub held: u64,
    /// Held queries answered with a proxy verified in the meantime.
    pub held_answered: u64,
    /// Held queries answered at their deadline without a live proxy.
    pub held_expired: u64,
    /// Queries not held because `held_max` were already held.
    pub held_refused: u64,
    /// Answers sent, by query type, response code and the client's level
    /// (see [`AnswerCounts`]).
    pub answers: AnswerCounts,
}

impl Counters {
    /// Every counter with its name, for the metrics JSON.
    pub fn fields(&self) -> [(&'static str, u64); 33] {
        [
            ("queries", self.queries),
            ("queries_a", self.queries_a),
            ("queries_aaaa", self.queries_aaaa),
            ("queries_ns", self.queries_ns),
            ("queries_soa", self.queries_soa),
            ("queries_any", self.queries_any),
            ("queries_other", self.queries_other),
            ("rcode_noerror", self.rcode_noerror),
            ("rcode_nxdomain", self.rcode_nxdomain),
            ("rcode_refused", self.rcode_refused),
            ("rcode_formerr", self.rcode_formerr),
            ("rcode_notimp", self.rcode_notimp),
            ("rcode_badvers", self.rcode_badvers),
            ("rcode_other", self.rcode_other),
            ("client_level0", self.client_level0),
            ("client_level1", self.client_level1),
            ("client_level2", self.client_level2),
            ("answers_proxied", self.answers_proxied),
            ("answers_no_proxy", self.answers_no_proxy),
            ("answers_hinted", self.answers_hinted),
            ("truncated", self.truncated),
            ("dropped", self.dropped),
            ("rrl_dropped", self.rrl_dropped),
            ("rrl_slipped", self.rrl_slipped),
            ("probes_sent", self.probes_sent),
            ("probes_refused", self.probes_refused),
            ("probes_answered", self.probes_answered),
            ("hint_lookups", self.hint_lookups),
            ("hint_nodes_found", self.hint_nodes_found),
            ("held", self.held),
            ("held_answered", self.held_answered),
            ("held_expired", self.held_expired),
            ("held_refused", self.held_refused),
        ]
    }
}

/// What became of one query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `out` holds the answer: send it.
    Answer,
    /// Send nothing (a response, a runt, or rate-limited).
    Silent,
    /// No proxy is live but candidates are being pinged: keep the query and
    /// ask again ([`Hold::Retry`]) when the view changes or soon; by the
    /// deadline the answer comes whatever was verified.
    Hold,
}

/// Whether the answer may wait for a proxy to be verified (§3.1: only
/// proxies verified alive first-hand, "synchronously if it must").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Never: answer now with what is live.
    Never,
    /// A new query: it may be held (within `held_max` per core).
    Allowed,
    /// A held query, asked again; it was held at this time, and is answered
    /// once a proxy is live or `hold_ms` after it.
    Retry(Time),
}

/// Answers sent, by query type (`QTYPE_NAMES`), response code
/// (`RCODE_NAMES`) and the level whose proxies the answer named
/// (`LEVEL_NAMES`: 0 to 2, or `none` for answers without proxies). Plain
/// counts, one table per core; `/metrics` adds the cores' tables up.
pub type AnswerCounts = [[[u64; LEVELS + 1]; RCODE_NAMES.len()]; QTYPE_NAMES.len()];

/// The query types counted by name; every other type counts as `OTHER`.
pub const QTYPE_NAMES: [&str; 10] = [
    "A", "AAAA", "NS", "SOA", "CNAME", "DNAME", "TXT", "MX", "ANY", "OTHER",
];
/// The response codes counted by name (BADVERS is extended, from the OPT record).
pub const RCODE_NAMES: [&str; 8] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "BADVERS", "OTHER",
];
/// The client levels counted: the level of the proxies named, or none.
pub const LEVEL_NAMES: [&str; LEVELS + 1] = ["0", "1", "2", "none"];

/// The index in `QTYPE_NAMES` of a query's type, read from its question
/// (`OTHER` for anything that does not parse).
fn qtype_index(query: &[u8]) -> usize {
    let other = QTYPE_NAMES.len() - 1;
    let mut p = 12;
    loop {
        match query.get(p) {
            Some(0) => break,
            Some(&l) if l < 64 => p += 1 + usize::from(l),
            _ => return other,
        }
    }
    let Some(t) = query.get(p + 1..p + 3) else {
        return other;
    };
    match u16::from_be_bytes([t[0], t[1]]) {
        1 => 0,
        28 => 1,
        2 => 2,
        6 => 3,
        5 => 4,
        39 => 5,
        16 => 6,
        15 => 7,
        255 => 8,
        _ => other,
    }
}

/// The zone apexes we serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Apex {
    Z,
    L0,
    L1,
    L2,
    Alias,
}

impl Apex {
    /// The level whose cluster's name servers the apex's NS set names.
    fn level(self) -> usize {
        match self {
            Apex::Z | Apex::L0 | Apex::Alias => 0,
            Apex::L1 => 1,
            Apex::L2 => 2,
        }
    }

    fn for_level(level: usize) -> Apex {
        match level {
            0 => Apex::L0,
            1 => Apex::L1,
            _ => Apex::L2,
        }
    }
}

/// The apex's index in `apex_flat` and `apex_names`.
fn apex_index(apex: Apex) -> usize {
    match apex {
        Apex::Z => 0,
        Apex::L0 => 1,
        Apex::L1 => 2,
        Apex::L2 => 3,
        Apex::Alias => 4,
    }
}

/// Where a query name falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Outside,
    Apex(Apex),
    NsHost(Apex, IpAddr),
    Proxy,
    /// Under the alias; `n` labels precede it.
    BelowAlias(usize),
    NxDomain(Apex),
}

/// What the query said about EDNS.
#[derive(Clone, Copy, Debug, Default)]
struct Edns {
    present: bool,
    udp: u16,
    version: u8,
    dnssec_ok: bool,
    ecs: Option<Ecs>,
}

/// An EDNS Client Subnet option (RFC 7871).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ecs {
    addr: IpAddr,
    source: u8,
}

/// Why a query is answered with an error before its name is looked at.
enum Bad {
    /// Answered with this code, without the question.
    Rcode(Rcode),
}

/// Names the compressor remembers per message.
const COMPRESS_NAMES_MAX: usize = 24;

/// The answer buffer: a plain `Vec` the builder appends to, reused across
/// queries (domain's own `Vec` builder needs its `std` feature), and name
/// compression (RFC 1035 §4.1.4) over flat copies of the names written.
///
/// domain's `StaticCompressor` compares label by label through generic
/// iterators, for every suffix against every name: a quarter of the CPU
/// time of an answer. Here each name is flattened once and each of its
/// suffixes compared as bytes (ASCII case folded) with the tails of the
/// names already written; the longest match becomes a pointer.
struct Wire {
    buf: Vec<u8>,
    /// Boxed: the builders move the target by value at every section.
    c: Box<Compress>,
}

/// What the compressor remembers of the names written.
#[derive(Debug)]
struct Compress {
    /// Flat (uncompressed) copies of the names written, back to back.
    arena: Vec<u8>,
    /// (offset in the message, offset in the arena, flat length, octets
    /// written literally: positions below it may be pointed at).
    names: [(u16, u16, u8, u8); COMPRESS_NAMES_MAX],
    count: usize,
}

impl Compress {
    fn new() -> Box<Compress> {
        Box::new(Compress {
            arena: Vec::with_capacity(512),
            names: [(0, 0, 0, 0); COMPRESS_NAMES_MAX],
            count: 0,
        })
    }

    /// Where the message already holds `suffix` (flat), if anywhere.
    fn find(&self, suffix: &[u8]) -> Option<u16> {
        for &(msg_off, arena_off, len, literal) in &self.names[..self.count] {
            let (len, literal) = (usize::from(len), usize::from(literal));
            if len < suffix.len() {
                continue;
            }
            let at = len - suffix.len();
            if at >= literal {
                continue;
            }
            let start = usize::from(arena_off);
            let Some(tail) = self.arena.get(start + at..start + len) else {
                continue;
            };
            if !eq_fold(tail, suffix) {
                continue;
            }
            // `at` must be a label boundary of the remembered name.
            let mut p = 0;
            while p < at {
                p += 1 + usize::from(*self.arena.get(start + p)?);
            }
            if p == at {
                return Some(msg_off + at as u16);
            }
        }
        None
    }
}

impl Wire {
    fn new(mut buf: Vec<u8>, mut c: Box<Compress>) -> Wire {
        buf.clear();
        c.arena.clear();
        c.count = 0;
        Wire { buf, c }
    }
}

impl OctetsBuilder for Wire {
    type AppendError = Infallible;
    fn append_slice(&mut self, slice: &[u8]) -> Result<(), Infallible> {
        self.buf.extend_from_slice(slice);
        Ok(())
    }
}

impl Truncate for Wire {
    fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
        let c = &mut self.c;
        while c.count > 0 && usize::from(c.names[c.count - 1].0) >= len {
            c.count -= 1;
        }
    }
}

impl AsRef<[u8]> for Wire {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl AsMut<[u8]> for Wire {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Composer for Wire {
    fn append_compressed_name<N: domain::base::ToName + ?Sized>(
        &mut self,
        name: &N,
    ) -> Result<(), Infallible> {
        // The name as flat octets: as it is when it has them (the query
        // name, copied flat once per query), else label by label.
        let mut local = [0u8; 256];
        let flat: &[u8] = match name.as_flat_slice() {
            Some(f) => f,
            None => {
                let mut len = 0;
                for label in name.iter_labels() {
                    let l = label.as_slice();
                    let Some(dst) = local.get_mut(len..len + 1 + l.len()) else {
                        break;
                    };
                    dst[0] = l.len() as u8;
                    dst[1..].copy_from_slice(l);
                    len += 1 + l.len();
                    if l.is_empty() {
                        break;
                    }
                }
                &local[..len]
            }
        };
        put_name(&mut self.buf, &mut self.c, flat);
        Ok(())
    }

    fn can_compress(&self) -> bool {
        true
    }
}

type Target = Wire;

/// Eight octets with ASCII capitals made small (every other octet kept),
/// all at once (the SWAR form of `u8::to_ascii_lowercase`).
fn lower8(x: u64) -> u64 {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low7 = x & !HIGH;
    // Bit 7 of each octet: set if its low seven bits are > 'Z', >= 'A'.
    let above_z = low7.wrapping_add(0x2525_2525_2525_2525);
    let from_a = low7.wrapping_add(0x3f3f_3f3f_3f3f_3f3f);
    let upper = (from_a ^ above_z) & !x & HIGH;
    x | (upper >> 2)
}

/// `a.eq_ignore_ascii_case(b)`, eight octets at a time: the compressor
/// compares names' tails with it for every name of every answer.
fn eq_fold(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| -> u64 {
        let mut w = [0u8; 8];
        if let Some(c) = s.get(at..at + 8) {
            w.copy_from_slice(c);
        }
        u64::from_le_bytes(w)
    };
    let same = |at: usize| {
        let (x, y) = (word(a, at), word(b, at));
        x == y || lower8(x) == lower8(y)
    };
    if len < 8 {
        return a.eq_ignore_ascii_case(b);
    }
    // Eight octets at a time, the last eight overlapping the one before.
    let mut at = 0;
    while at + 8 < len {
        if !same(at) {
            return false;
        }
        at += 8;
    }
    same(len - 8)
}

/// Appends `flat` (a name in wire form, with its root label) to `buf`,
/// compressed against the names `c` remembers (RFC 1035 §4.1.4), and
/// remembers it: the one compression rule of every answer, built through
/// domain's builder ([`Wire`]) or directly (the fast path).
fn put_name(buf: &mut Vec<u8>, c: &mut Compress, flat: &[u8]) {
    let len = flat.len();
    let mut bounds = [0u8; 128];
    let mut labels = 0;
    let mut p = 0;
    while p < len {
        let Some(b) = bounds.get_mut(labels) else {
            break;
        };
        *b = p as u8;
        labels += 1;
        p += 1 + usize::from(flat[p]);
    }
    // The root label is never pointed at.
    let named = labels.saturating_sub(1);
    let start = buf.len();
    let mut literal = len;
    let mut pointer = None;
    for &b in &bounds[..named] {
        if let Some(p) = c.find(&flat[usize::from(b)..len]) {
            literal = usize::from(b);
            pointer = Some(p);
            break;
        }
    }
    buf.extend_from_slice(&flat[..literal]);
    if let Some(p) = pointer {
        buf.extend_from_slice(&(p | 0xc000).to_be_bytes());
    }
    if literal > 0 && start < 0x3fff && c.count < COMPRESS_NAMES_MAX {
        let arena_off = c.arena.len();
        if arena_off + len <= usize::from(u16::MAX) {
            c.arena.extend_from_slice(&flat[..len]);
            c.names[c.count] = (
                start as u16,
                arena_off as u16,
                len as u8,
                literal.min(255) as u8,
            );
            c.count += 1;
        }
    }
}

/// A domain name built on the stack.
struct NameBuf {
    b: [u8; 255],
    len: usize,
}

impl NameBuf {
    fn new() -> NameBuf {
        NameBuf {
            b: [0; 255],
            len: 0,
        }
    }

    /// Appends a label; false if it does not fit (the name stays as it was).
    fn push(&mut self, label: &[u8]) -> bool {
        let n = label.len();
        if n == 0 || n > 63 || self.len + n + 2 > 255 {
            return false;
        }
        let Some(dst) = self.b.get_mut(self.len..self.len + 1 + n) else {
            return false;
        };
        dst[0] = n as u8;
        dst[1..].copy_from_slice(label);
        self.len += 1 + n;
        true
    }

    fn push_all(&mut self, labels: &[Vec<u8>]) -> bool {
        labels.iter().all(|l| self.push(l))
    }

    /// Appends labels already in wire form (without the root).
    fn push_flat(&mut self, flat: &[u8]) -> bool {
        let Some(dst) = self.b.get_mut(self.len..self.len + flat.len()) else {
            return false;
        };
        if self.len + flat.len() + 1 > 255 {
            return false;
        }
        dst.copy_from_slice(flat);
        self.len += flat.len();
        true
    }

    /// The name, with its root label.
    /// (A sized `Name<&[u8]>`: domain forwards `as_flat_slice`, which the
    /// compressor uses, for it but not through a reference.)
    fn name(&mut self) -> Option<Flat<'_>> {
        *self.b.get_mut(self.len)? = 0;
        Name::from_octets(self.b.get(..self.len + 1)?).ok()
    }
}

/// dnssrv: one per core.
#[derive(Debug)]
pub struct Dnssrv {
    cfg: DnsConfig,
    zone: Vec<Vec<u8>>,
    alias: Option<Vec<Vec<u8>>>,
    clients: Clients,
    probes: ProbeLimiter,
    rrl: RateLimiter,
    followups: VecDeque<FollowUp>,
    verify_asked: [Option<Time>; LEVELS],
    counters: Counters,
    /// Nodes near client networks, found through hints.
    near: NearCache,
    /// Queries held now (at most `held_max`).
    held: usize,
    /// How the query being answered may be held.
    hold: Hold,
    /// Set while answering: hold this query rather than answer it.
    hold_now: bool,
    /// Set while answering: the answer is BADVERS.
    badvers: bool,
    /// When a held query last reached its deadline with no proxy verified.
    hold_failed: Option<Time>,
    /// The level whose proxies the answer being built names, if any.
    answer_level: Option<Level>,
    /// The compressor's state, kept between answers.
    compress: Option<Box<Compress>>,
    /// The apexes' names in wire form, without the root: Z, L0, L1, L2, A.
    apex_flat: Vec<Vec<u8>>,
    /// The apexes' names.
    apex_names: Vec<Name<Vec<u8>>>,
    /// Name servers' names by (apex, address).
    ns_cache: Vec<(Apex, IpAddr, Name<Vec<u8>>)>,
    /// What the fast path picked for the query being answered, when it
    /// hands the writing to the builder.
    picked: Option<(Pick, Best<ANSWERS_MAX>)>,
    /// Whether the common query takes the fast path (`fast.rs`).
    fast_path: bool,
    /// The fast path's name tails.
    tails: fast::Tails,
    /// The fast path's proxies and name servers picked, kept between
    /// queries (not made, and zeroed, for each).
    scratch: Option<Box<(Best<ANSWERS_MAX>, Best<NAMESERVERS_MAX>)>>,
    /// Answers the fast path wrote itself (for the tests).
    fast_answered: u64,
}

fn labels_of(name: &str) -> Vec<Vec<u8>> {
    name.split('.')
        .filter(|l| !l.is_empty())
        .map(|l| l.to_ascii_lowercase().into_bytes())
        .collect()
}

/// Whether `labels` ends with `suffix` (letter case ignored).
fn ends_with(labels: &[&[u8]], suffix: &[Vec<u8>]) -> bool {
    labels.len() >= suffix.len()
        && labels[labels.len() - suffix.len()..]
            .iter()
            .zip(suffix)
            .all(|(a, b)| a.eq_ignore_ascii_case(b))
}

/// Decodes `ns-<8 or 32 hex digits>` into the address it names.
fn ns_host(label: &[u8]) -> Option<IpAddr> {
    let hex = label
        .get(..3)
        .filter(|p| p.eq_ignore_ascii_case(b"ns-"))
        .and(label.get(3..))?;
    let mut v: u128 = 0;
    for &c in hex {
        v = (v << 4) | u128::from((c as char).to_digit(16)?);
    }
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(v as u32))),
        32 => Some(IpAddr::V6(Ipv6Addr::from(v))),
        _ => None,
    }
}

/// Writes the `ns-<hex>` label for `ip`.
fn ns_label(ip: IpAddr, out: &mut [u8; 35]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out[..3].copy_from_slice(b"ns-");
    let (v, digits) = match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 8),
        IpAddr::V6(a) => (u128::from(a), 32),
    };
    for i in 0..digits {
        out[3 + i] = HEX[((v >> (4 * (digits - 1 - i))) & 0xf) as usize];
    }
    &out[..3 + digits]
}

/// Bits two addresses share from the left (0 across families).
fn common_prefix(a: IpAddr, b: IpAddr) -> u32 {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) ^ u32::from(b)).leading_zeros(),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a) ^ u128::from(b)).leading_zeros(),
        _ => 0,
    }
}

/// Whether `client` is on `proxy`'s local network (/24, /64).
fn same_local_net(client: IpAddr, proxy: IpAddr) -> bool {
    match client {
        IpAddr::V4(_) => common_prefix(client, proxy) >= 24,
        IpAddr::V6(_) => common_prefix(client, proxy) >= 64,
    }
}

/// Up to `N` peers, best first.
#[derive(Clone, Copy, Debug)]
struct Best<const N: usize> {
    items: [(u32, u64, IpAddr); N],
    len: usize,
    cap: usize,
}

impl<const N: usize> Best<N> {
    fn new(cap: usize) -> Self {
        Best {
            items: [(0, 0, IpAddr::V4(Ipv4Addr::UNSPECIFIED)); N],
            len: 0,
            cap: cap.min(N),
        }
    }

    /// Offers a peer: more shared prefix bits with the target first, then
    /// lower RTT. Duplicates (several levels name one node) are skipped.
    fn offer(&mut self, prefix: u32, rtt_us: u64, addr: IpAddr) {
        if self.cap == 0 || self.items[..self.len].iter().any(|i| i.2 == addr) {
            return;
        }
        let key = (std::cmp::Reverse(prefix), rtt_us);
        let mut at = self.len;
        while at > 0 {
            let p = self.items[at - 1];
            if (std::cmp::Reverse(p.0), p.1) <= key {
                break;
            }
            at -= 1;
        }
        if at >= self.cap {
            return;
        }
        let end = self.len.min(self.cap - 1);
        self.items.copy_within(at..end, at + 1);
        self.items[at] = (prefix, rtt_us, addr);
        self.len = (self.len + 1).min(self.cap);
    }

    /// Empties it, to hold up to `cap` (the items are overwritten before
    /// they are read).
    fn clear(&mut self, cap: usize) {
        self.len = 0;
        self.cap = cap.min(N);
    }

    fn addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.items[..self.len].iter().map(|i| i.2)
    }
}

/// Record data for an IPv4 address (domain without `std` has its own
/// address types).
fn a4(a: Ipv4Addr) -> A {
    A::new(a.octets().into())
}

/// Record data for an IPv6 address.
fn a6(a: Ipv6Addr) -> Aaaa {
    Aaaa::new(a.octets().into())
}

fn net_ip(ip: IpAddr) -> domain::base::net::IpAddr {
    match ip {
        IpAddr::V4(a) => a.octets().into(),
        IpAddr::V6(a) => a.octets().into(),
    }
}

/// The record type of an address.
fn family_rtype(ip: IpAddr) -> Rtype {
    match ip {
        IpAddr::V4(_) => Rtype::A,
        IpAddr::V6(_) => Rtype::AAAA,
    }
}

impl Dnssrv {
    /// dnssrv with `cfg`; the zone and alias must be domain names.
    pub fn new(cfg: DnsConfig) -> Dnssrv {
        let zone = labels_of(&cfg.zone);
        let alias = cfg.alias.as_deref().map(labels_of);
        let mut srv = Dnssrv {
            clients: Clients::new(cfg.clients_max, Duration::from_secs(cfg.client_rtt_secs)),
            probes: ProbeLimiter::new(
                cfg.clients_max,
                Duration::from_secs(cfg.probe_interval_secs),
                cfg.probes_per_prefix,
                cfg.probes_per_sec,
            ),
            rrl: RateLimiter::new(cfg.rrl_responses_per_sec, cfg.rrl_slip),
            zone,
            alias,
            followups: VecDeque::new(),
            verify_asked: [None; LEVELS],
            counters: Counters::default(),
            near: NearCache::new(
                cfg.clients_max,
                Duration::from_secs(cfg.client_rtt_secs),
                Duration::from_secs(cfg.probe_interval_secs),
            ),
            held: 0,
            hold: Hold::Never,
            hold_now: false,
            badvers: false,
            hold_failed: None,
            answer_level: None,
            compress: None,
            apex_flat: Vec::new(),
            apex_names: Vec::new(),
            ns_cache: Vec::new(),
            picked: None,
            fast_path: true,
            fast_answered: 0,
            tails: fast::Tails::default(),
            scratch: Some(Box::new((Best::new(0), Best::new(0)))),
            cfg,
        };
        srv.apex_flat = [Apex::Z, Apex::L0, Apex::L1, Apex::L2, Apex::Alias]
            .iter()
            .map(|&a| {
                let mut nb = NameBuf::new();
                srv.apex_name_slow(a, &mut nb);
                nb.b[..nb.len].to_vec()
            })
            .collect();
        srv.apex_names = srv
            .apex_flat
            .iter()
            .map(|f| {
                let mut w = f.clone();
                w.push(0);
                Name::from_octets(w).unwrap_or_else(|_| {
                    Name::from_octets(vec![0]).unwrap_or_else(|_| unreachable!())
                })
            })
            .collect();
        srv.tails = fast::Tails::new(&srv.apex_flat, srv.alias.is_some());
        srv
    }

    /// dnssrv with the hashes of its tables of clients (measured networks,
    /// probe limits, nodes near networks) keyed by `secret`: their keys are
    /// addresses anyone can send from (SECURITY.md, hash flooding). A
    /// server calls it once, before any query; `new` alone keys them with
    /// fixed seeds (tests, benchmarks).
    pub fn with_hash_secret(mut self, secret: &[u8]) -> Dnssrv {
        self.clients = self
            .clients
            .with_hasher(keyed_hasher(secret, "dns clients"));
        self.probes = self.probes.with_hasher(keyed_hasher(secret, "dns probes"));
        self.near = self.near.with_hasher(keyed_hasher(secret, "dns near"));
        self
    }

    /// The configuration.
    pub fn config(&self) -> &DnsConfig {
        &self.cfg
    }

    /// What was counted.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The next piece of work for the runtime.
    pub fn poll_followup(&mut self) -> Option<FollowUp> {
        self.followups.pop_front()
    }

    /// A probe measured `rtt` to `ip`: its network (/24, /56) is at the
    /// level that RTT puts it in.
    pub fn on_rtt(&mut self, ip: IpAddr, rtt: Duration, now: Time) {
        self.clients.insert(prefix_key(ip, 24, 56), rtt, now, false);
    }

    /// A probe of `ip` came back: its RTT (if the destination answered) and
    /// the routers on the path, nearest the prober first. The RTT places the
    /// client's network at a level; the last hops and the network itself
    /// give the hint keys to look up ([`FollowUp::Hints`]), once per
    /// network per `client_rtt_secs`.
    pub fn on_probe(&mut self, ip: IpAddr, rtt: Option<Duration>, hops: &[IpAddr], now: Time) {
        if let Some(rtt) = rtt {
            self.counters.probes_answered += 1;
            self.on_rtt(ip, rtt, now);
        }
        let key = prefix_key(ip, 24, 56);
        if self.near.fresh(key, now) || !self.near.start(key, now) {
            return;
        }
        let (keys, len) = lookup_keys(ip, hops);
        if len == 0 {
            // No key to look up (private addresses): known to have none.
            self.near
                .found(key, &[], IpAddr::V4(Ipv4Addr::UNSPECIFIED), now);
            return;
        }
        self.counters.hint_lookups += 1;
        self.followups.push_back(FollowUp::Hints {
            client: ip,
            keys,
            len: len as u8,
        });
    }

    /// The hint lookup for `client` found `nodes` (their DSHT addresses,
    /// nearest-hop keys first); `me` is this node's address. The nodes are
    /// pinged ([`FollowUp::Ping`]) so that answers may use them once
    /// verified alive.
    pub fn on_hints(&mut self, client: IpAddr, nodes: &[SocketAddr], me: IpAddr, now: Time) {
        let key = prefix_key(client, 24, 56);
        let n = self.near.found(key, nodes, me, now);
        self.counters.hint_nodes_found += n as u64;
        let mut found = [None; NEAR_NODES_MAX];
        for (slot, a) in found.iter_mut().zip(self.near.nodes(key, now)) {
            *slot = Some(a);
        }
        for a in found.into_iter().flatten() {
            self.followups.push_back(FollowUp::Ping(a));
        }
    }

    /// The runtime could not carry out a probe asked for (its queue full).
    pub fn on_probe_dropped(&mut self) {
        self.counters.probes_sent = self.counters.probes_sent.saturating_sub(1);
        self.counters.probes_refused += 1;
    }

    /// Queries held now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The runtime gave up on a held query without asking again (its TCP
    /// connection closed, say).
    pub fn abandon_held(&mut self) {
        self.held = self.held.saturating_sub(1);
    }

    /// Fixes the RTT of `ip`'s network (/24, /56) instead of measuring it:
    /// for clients whose distance is known (the `[dns] client_rtt_ms`
    /// config; tests place clients at a level with it).
    pub fn pin_rtt(&mut self, ip: IpAddr, rtt: Duration, now: Time) {
        self.clients.insert(prefix_key(ip, 24, 56), rtt, now, true);
    }

    /// The level a client at `rtt` is in: the highest whose threshold it is
    /// within.
    pub fn level_for(&self, rtt: Duration) -> Level {
        let levels = self.cfg.level_thresholds_ms.len().min(LEVELS);
        let ms = rtt.as_micros() / 1000;
        (1..levels)
            .rev()
            .find(|&l| {
                self.cfg
                    .level_thresholds_ms
                    .get(l)
                    .is_some_and(|&t| ms <= u64::from(t))
            })
            .unwrap_or(0) as Level
    }

    /// Answers one query now (never held). `out` receives the answer;
    /// false means send nothing (a response, a runt, or rate-limited).
    pub fn answer(
        &mut self,
        now: Time,
        query: &[u8],
        client: SocketAddr,
        transport: Transport,
        view: &View,
        out: &mut Vec<u8>,
    ) -> bool {
        self.answer_or_hold(now, query, client, transport, view, out, Hold::Never)
            == Outcome::Answer
    }

    /// Answers one query, or holds it ([`Outcome::Hold`]) when it asks for
    /// proxies, none is live and candidates are being pinged, as `hold`
    /// allows. A held query must be asked again with [`Hold::Retry`] (with
    /// the time it was first held) until it is answered, or given up with
    /// [`Dnssrv::abandon_held`].
    #[allow(clippy::too_many_arguments)]
    pub fn answer_or_hold(
        &mut self,
        now: Time,
        query: &[u8],
        client: SocketAddr,
        transport: Transport,
        view: &View,
        out: &mut Vec<u8>,
        hold: Hold,
    ) -> Outcome {
        // An IPv4 client of a dual-stack (`[::]`) socket comes as an
        // IPv4-mapped IPv6 address: it is the IPv4 client, of its /24 (its
        // RTT, its rate limit, its probe), not of one /56 with every other
        // IPv4 client.
        let client = SocketAddr::new(client.ip().to_canonical(), client.port());
        let retry = matches!(hold, Hold::Retry(_));
        if !retry {
            self.counters.queries += 1;
        }
        // A runt or a response is never answered (no reflection, no loops),
        // nor what response rate limiting drops; `out` keeps its buffer.
        let Ok(msg) = Message::from_octets(query) else {
            self.counters.dropped += 1;
            return self.settle(retry, Outcome::Silent);
        };
        if msg.header().qr() {
            self.counters.dropped += 1;
            return self.settle(retry, Outcome::Silent);
        }
        // A held query was rate-limited when it came.
        let rrl = match transport {
            Transport::Udp if !retry => self.rrl.check(client.ip(), now),
            _ => Rrl::Send,
        };
        if rrl == Rrl::Drop {
            self.counters.dropped += 1;
            self.counters.rrl_dropped += 1;
            return Outcome::Silent;
        }
        self.hold = hold;
        self.hold_now = false;
        self.badvers = false;
        let buf = std::mem::take(out);
        self.answer_level = None;
        self.picked = None;
        let fast = fast::fast_parse(query);
        // The query type's counter index, known if the fast parse read it.
        let qtype = match &fast {
            Some(q) => q.qtype_index(),
            None => qtype_index(query),
        };
        let r = match fast {
            Some(q) if self.fast_path && rrl == Rrl::Send => {
                self.respond_fast(now, &msg, &q, client, transport, view, buf)
            }
            _ => self.respond(now, &msg, rrl, client, transport, view, buf),
        };
        self.picked = None;
        self.hold = Hold::Never;
        match r {
            Some(b) if self.hold_now => {
                *out = b;
                if !retry {
                    self.held += 1;
                    self.counters.held += 1;
                }
                Outcome::Hold
            }
            Some(b) => {
                self.count_rcode(&b);
                self.count_answer(qtype, &b, self.badvers);
                *out = b;
                self.settle(retry, Outcome::Answer)
            }
            None => {
                self.counters.dropped += 1;
                self.settle(retry, Outcome::Silent)
            }
        }
    }

    /// A held query's final outcome: it is no longer held.
    fn settle(&mut self, retry: bool, o: Outcome) -> Outcome {
        if retry {
            self.held = self.held.saturating_sub(1);
        }
        o
    }

    /// Counts the answer's rcode.
    fn count_rcode(&mut self, answer: &[u8]) {
        let c = &mut self.counters;
        if self.badvers {
            c.rcode_badvers += 1;
            return;
        }
        match answer.get(3).map(|b| b & 0x0f) {
            Some(0) => c.rcode_noerror += 1,
            Some(1) => c.rcode_formerr += 1,
            Some(3) => c.rcode_nxdomain += 1,
            Some(4) => c.rcode_notimp += 1,
            Some(5) => c.rcode_refused += 1,
            _ => c.rcode_other += 1,
        }
    }

    /// Counts an answer sent by its query type (index in `QTYPE_NAMES`),
    /// rcode and client level.
    fn count_answer(&mut self, qtype: usize, answer: &[u8], badvers: bool) {
        let rcode = if badvers {
            6
        } else {
            match answer.get(3).map_or(0xf, |b| b & 0xf) {
                r @ 0..=5 => usize::from(r),
                _ => RCODE_NAMES.len() - 1,
            }
        };
        let level = self
            .answer_level
            .map_or(LEVELS, |l| usize::from(l).min(LEVELS - 1));
        self.counters.answers[qtype][rcode][level] += 1;
    }

    #[allow(clippy::too_many_arguments)]
    fn respond(
        &mut self,
        now: Time,
        msg: &Message<&[u8]>,
        rrl: Rrl,
        client: SocketAddr,
        transport: Transport,
        view: &View,
        buf: Vec<u8>,
    ) -> Option<Vec<u8>> {
        let head = msg.header();
        let c = self.compress.take().unwrap_or_else(Compress::new);
        let Ok(mut b) = MessageBuilder::from_target(Wire::new(buf, c));
        {
            let h = b.header_mut();
            h.set_id(head.id());
            h.set_qr(true);
            h.set_opcode(head.opcode());
            h.set_rd(head.rd());
            h.set_cd(head.cd());
        }
        if head.opcode() != Opcode::QUERY {
            b.header_mut().set_rcode(Rcode::NOTIMP);
            return Some(self.done(b.finish()));
        }
        let counts = msg.header_counts();
        let parsed = if counts.qdcount() != 1 || counts.ancount() != 0 || counts.nscount() != 0 {
            Err(Bad::Rcode(Rcode::FORMERR))
        } else {
            parse(msg, msg.as_slice().len())
        };
        let (question, edns) = match parsed {
            Ok(p) => p,
            Err(Bad::Rcode(rcode)) => {
                b.header_mut().set_rcode(rcode);
                return Some(self.done(b.finish()));
            }
        };
        if !matches!(self.hold, Hold::Retry(_)) {
            let c = &mut self.counters;
            match question.qtype() {
                Rtype::A => c.queries_a += 1,
                Rtype::AAAA => c.queries_aaaa += 1,
                Rtype::NS => c.queries_ns += 1,
                Rtype::SOA => c.queries_soa += 1,
                Rtype::ANY => c.queries_any += 1,
                _ => c.queries_other += 1,
            }
        }
        let limit = match transport {
            Transport::Tcp => TCP_MESSAGE_BYTES,
            Transport::Udp if edns.present => {
                usize::from(edns.udp.min(self.cfg.udp_payload_bytes)).max(UDP_PLAIN_BYTES)
            }
            Transport::Udp => UDP_PLAIN_BYTES,
        };
        // The query name, flat, once: classified, echoed and pointed at
        // from it (letter case as sent).
        let mut flat = [0u8; 256];
        let mut flen = 0;
        for l in question.qname().iter() {
            let l = l.as_slice();
            let dst = flat.get_mut(flen..flen + 1 + l.len())?;
            dst[0] = l.len() as u8;
            dst[1..].copy_from_slice(l);
            flen += 1 + l.len();
            if l.is_empty() {
                break;
            }
        }
        let qname: Flat<'_> = Name::from_octets(flat.get(..flen)?).ok()?;
        let mut qb = b.question();
        qb.push(Question::new(
            qname.clone(),
            question.qtype(),
            question.qclass(),
        ))
        .ok()?;
        let mut b = qb;
        if edns.version > 0 {
            self.badvers = true;
            let add = b.additional();
            return self.finish(add, &edns, Some(OptRcode::BADVERS), 0);
        }
        if rrl == Rrl::Slip {
            self.counters.rrl_slipped += 1;
            b.header_mut().set_tc(true);
            return self.finish(b.additional(), &edns, None, 0);
        }
        let qtype = question.qtype();
        if question.qclass() != Class::IN || matches!(qtype, Rtype::AXFR | Rtype::IXFR) {
            b.header_mut().set_rcode(Rcode::REFUSED);
            return self.finish(b.additional(), &edns, None, 0);
        }
        if qtype == Rtype::OPT {
            b.header_mut().set_rcode(Rcode::FORMERR);
            return self.finish(b.additional(), &edns, None, 0);
        }
        let mut labels: [&[u8]; 128] = [&[]; 128];
        let mut n = 0;
        let mut p = 0;
        while let Some(&l) = flat.get(p).filter(|&&l| l != 0) {
            *labels.get_mut(n)? = flat.get(p + 1..p + 1 + usize::from(l))?;
            n += 1;
            p += 1 + usize::from(l);
        }
        let labels = &labels[..n];
        let place = self.classify(labels);
        if place == Place::Outside {
            b.header_mut().set_rcode(Rcode::REFUSED);
            return self.finish(b.additional(), &edns, None, 0);
        }
        b.header_mut().set_aa(true);
        // The cap leaves room for the OPT record (11 octets, plus an echoed
        // Client Subnet option of at most 4 + 4 + 16).
        let opt_room = if edns.present { 11 + 24 } else { 0 };
        b.set_push_limit(limit.saturating_sub(opt_room));
        let ctx = Ctx {
            who: Who {
                now,
                client: client.ip(),
                qtype,
                view,
                edns,
            },
            qname,
            labels,
        };
        let (add, scope, res) = self.build(&ctx, place, b.answer());
        let mut add = match res {
            Ok(()) => add,
            Err(_) => {
                // Too big for this transport: the question alone with TC
                // (RFC 1035 §4.2.1; the client retries over TCP).
                self.counters.truncated += 1;
                let mut ans = add.answer();
                ans.rewind();
                ans.header_mut().set_tc(true);
                ans.additional()
            }
        };
        add.as_builder_mut().set_push_limit(limit);
        self.finish(add, &edns, None, scope)
    }

    /// Appends the OPT record (if the query had one) and hands out the bytes.
    fn finish(
        &mut self,
        mut add: AdditionalBuilder<Target>,
        edns: &Edns,
        rcode: Option<OptRcode>,
        scope: u8,
    ) -> Option<Vec<u8>> {
        if edns.present {
            let udp = self.cfg.udp_payload_bytes;
            let r = add.opt(|ob| {
                ob.set_udp_payload_size(udp);
                ob.set_dnssec_ok(edns.dnssec_ok);
                if let Some(r) = rcode {
                    ob.set_rcode(r);
                }
                if let Some(ecs) = edns.ecs {
                    ob.push(&ClientSubnet::new(ecs.source, scope, net_ip(ecs.addr)))?;
                }
                Ok(())
            });
            if r.is_err() {
                // Cannot happen within the limits; answer without options
                // rather than not at all.
                add.rewind();
            }
        }
        Some(self.done(add.finish()))
    }

    /// The answer's bytes; the compressor's state is kept for the next.
    fn done(&mut self, w: Wire) -> Vec<u8> {
        self.compress = Some(w.c);
        w.buf
    }

    fn classify(&self, labels: &[&[u8]]) -> Place {
        let zone_len = self.zone.len();
        let alias_len = self.alias.as_ref().map_or(0, Vec::len);
        let in_zone = ends_with(labels, &self.zone);
        let in_alias = self.alias.as_ref().is_some_and(|a| ends_with(labels, a));
        if in_alias && (!in_zone || alias_len > zone_len) {
            let rel = labels.len() - alias_len;
            return if rel == 0 {
                Place::Apex(Apex::Alias)
            } else {
                Place::BelowAlias(rel)
            };
        }
        if !in_zone {
            return Place::Outside;
        }
        let rel = &labels[..labels.len() - zone_len];
        let mut i = rel.len();
        let mut apex = Apex::Z;
        loop {
            if i == 0 {
                return Place::Apex(apex);
            }
            let next = rel[i - 1];
            let (want, then): (&[u8], Option<Apex>) = match apex {
                Apex::Z => (b"l0", Some(Apex::L0)),
                Apex::L0 => (b"l1", Some(Apex::L1)),
                Apex::L1 => (b"l2", Some(Apex::L2)),
                _ => (b"http", None),
            };
            if next.eq_ignore_ascii_case(want) {
                match then {
                    Some(a) => {
                        apex = a;
                        i -= 1;
                        continue;
                    }
                    None => return Place::Proxy,
                }
            }
            if i == 1 {
                if let Some(ip) = ns_host(next) {
                    return Place::NsHost(apex, ip);
                }
            }
            return Place::NxDomain(apex);
        }
    }

    /// Where the client is: its level and the Client Subnet scope the
    /// answer holds for.
    /// Also the nodes hints found near it (one look at the near cache).
    fn locate(
        &mut self,
        now: Time,
        client: IpAddr,
        ecs: Option<Ecs>,
    ) -> (Level, u8, [Option<SocketAddr>; NEAR_NODES_MAX]) {
        let (ip, scope) = match ecs {
            Some(e) if e.source > 0 => {
                let bits = match e.addr {
                    IpAddr::V4(_) => 24,
                    IpAddr::V6(_) => 56,
                };
                (e.addr, e.source.min(bits))
            }
            _ => (client, 0),
        };
        let key = prefix_key(ip, 24, 56);
        let rtt = self.clients.rtt(key, now);
        // Probe a network not measured, or whose near nodes (hints) are not
        // known: its RTT and its last hops come back in `on_probe`.
        let retry = matches!(self.hold, Hold::Retry(_));
        let (near_fresh, near) = self.near.get(key, now);
        if !retry && (rtt.is_none() || !near_fresh) {
            if self.probes.allow(ip, now) {
                self.counters.probes_sent += 1;
                self.followups.push_back(FollowUp::Probe(ip));
            } else if rtt.is_none() {
                self.counters.probes_refused += 1;
            }
        }
        match rtt {
            Some(rtt) => (self.level_for(rtt), scope, near),
            None => (self.cfg.default_level, scope, near),
        }
    }

    /// The live proxies nearest `target` at `level`: first those a
    /// clustering hint found near the target (verified alive, in the order
    /// of their hops, nearest the client first), then that level's cluster
    /// by shared prefix and RTT, falling back to lower levels (larger
    /// clusters) when a level has none. With none live at all while
    /// candidates are being pinged, it asks to hold the query
    /// (`self.hold_now`) if `self.hold` allows.
    fn pick_proxies(
        &mut self,
        ctx: &Who,
        level: usize,
        target: IpAddr,
        want: Rtype,
        near: [Option<SocketAddr>; NEAR_NODES_MAX],
        best: &mut Best<ANSWERS_MAX>,
    ) -> bool {
        let live = Duration::from_secs(self.cfg.live_secs);
        let hold_window = Duration::from_millis(self.cfg.hold_ms);
        best.clear(self.cfg.answers_max);
        let usable = |p: &Peer| {
            family_rtype(p.addr) == want
                && ctx.now.saturating_since(p.verified) <= live
                && (!p.non_recursive || same_local_net(ctx.client, p.addr))
        };
        // Nodes near the target, found through hints: ranked above every
        // proxy of the level (they are near by topology, not only by RTT).
        let mut unverified = false;
        for (i, a) in near.iter().flatten().enumerate() {
            let ip = a.ip();
            if ip == ctx.view.me {
                continue;
            }
            let found = ctx
                .view
                .levels
                .iter()
                .flat_map(|lv| lv.proxies.iter())
                .find(|p| p.addr == ip && usable(p));
            match found {
                Some(p) => best.offer(HINT_RANK, i as u64, p.addr),
                None => unverified = true,
            }
        }
        let hinted = best.len > 0;
        if unverified
            && self
                .near
                .ping_due(prefix_key(target, 24, 56), ctx.now, VERIFY_INTERVAL)
        {
            for a in near.into_iter().flatten() {
                self.followups.push_back(FollowUp::Ping(a));
            }
        }
        // A query that may be held asks for a fresh round of pings (at most
        // one per HOLD_ROUND_INTERVAL), unless a held query recently waited
        // for one in vain (then only the periodic rounds).
        let hold_may_ping = self.hold == Hold::Allowed
            && self.cfg.hold_ms > 0
            && self
                .hold_failed
                .is_none_or(|t| ctx.now.saturating_since(t) >= VERIFY_INTERVAL);
        let mut pinging = false;
        for l in (0..=level).rev() {
            if let Some(lv) = ctx.view.levels.get(l) {
                for p in lv.proxies.iter().filter(|p| usable(p)) {
                    best.offer(
                        common_prefix(target, p.addr),
                        p.rtt.map_or(u64::MAX, |d| d.as_micros()),
                        p.addr,
                    );
                }
            }
            if ctx.view.me_http
                && family_rtype(ctx.view.me) == want
                && (!ctx.view.me_non_recursive || same_local_net(ctx.client, ctx.view.me))
            {
                best.offer(common_prefix(target, ctx.view.me), 0, ctx.view.me);
            }
            if best.len > 0 {
                break;
            }
            if l < LEVELS
                && ctx
                    .view
                    .levels
                    .get(l)
                    .is_some_and(|lv| lv.proxies.iter().any(|p| family_rtype(p.addr) == want))
            {
                let since = self.verify_asked[l].map(|t| ctx.now.saturating_since(t));
                let due = since.is_none_or(|s| {
                    s >= VERIFY_INTERVAL || (hold_may_ping && s >= HOLD_ROUND_INTERVAL)
                });
                if due {
                    self.verify_asked[l] = Some(ctx.now);
                    self.followups.push_back(FollowUp::Verify(l as Level));
                }
                // Pings of this level are out (just now, or recently
                // enough that their answers may still come).
                pinging |=
                    self.verify_asked[l].is_some_and(|t| ctx.now.saturating_since(t) < hold_window);
            }
        }
        if best.len == 0 && pinging && hold_may_ping {
            if self.held < self.cfg.held_max {
                self.hold_now = true;
            } else {
                self.counters.held_refused += 1;
            }
        }
        if let Hold::Retry(since) = self.hold {
            if best.len == 0 && ctx.now.saturating_since(since) < hold_window {
                // Still waiting on the pings asked for when it was held.
                self.hold_now = true;
            }
        }
        hinted
    }

    /// The name servers of `level`'s cluster nearest `target` (this node
    /// always among the candidates: it is answering).
    fn pick_nameservers(&self, ctx: &Who, level: usize, target: IpAddr) -> Best<NAMESERVERS_MAX> {
        let mut best = Best::new(self.cfg.nameservers_max);
        self.pick_nameservers_into(ctx, level, target, &mut best);
        best
    }

    /// [`Dnssrv::pick_nameservers`] into `best` (cleared first).
    fn pick_nameservers_into(
        &self,
        ctx: &Who,
        level: usize,
        target: IpAddr,
        best: &mut Best<NAMESERVERS_MAX>,
    ) {
        let live = Duration::from_secs(self.cfg.live_secs);
        best.clear(self.cfg.nameservers_max);
        best.offer(common_prefix(target, ctx.view.me), 0, ctx.view.me);
        if let Some(lv) = ctx.view.levels.get(level) {
            for p in &lv.nameservers {
                if ctx.now.saturating_since(p.verified) <= live {
                    best.offer(
                        common_prefix(target, p.addr),
                        p.rtt.map_or(u64::MAX, |d| d.as_micros()),
                        p.addr,
                    );
                }
            }
        }
    }

    /// Writes the apex's name (from its wire form, made once).
    fn apex_name(&self, apex: Apex, nb: &mut NameBuf) -> bool {
        match self.apex_flat.get(apex_index(apex)) {
            Some(f) if apex != Apex::Alias || self.alias.is_some() => nb.push_flat(f),
            _ => false,
        }
    }

    /// Builds the apex's name label by label.
    fn apex_name_slow(&self, apex: Apex, nb: &mut NameBuf) -> bool {
        let ok = match apex {
            Apex::Z => true,
            Apex::L0 => nb.push(b"L0"),
            Apex::L1 => nb.push(b"L1") && nb.push(b"L0"),
            Apex::L2 => nb.push(b"L2") && nb.push(b"L1") && nb.push(b"L0"),
            Apex::Alias => {
                return self.alias.as_ref().is_some_and(|a| nb.push_all(a));
            }
        };
        ok && nb.push_all(&self.zone)
    }

    /// Writes `ns-<hex>.<apex>`; the alias's name servers live in Z.
    fn ns_name(&self, apex: Apex, ip: IpAddr, nb: &mut NameBuf) -> bool {
        let mut l = [0u8; 35];
        let apex = if apex == Apex::Alias { Apex::Z } else { apex };
        nb.push(ns_label(ip, &mut l)) && self.apex_name(apex, nb)
    }

    fn push_soa(
        &self,
        view: &View,
        apex: Apex,
        ttl: u32,
        push: impl FnOnce(Flat<'_>, Ttl, Soa<Flat<'_>>) -> Result<(), PushError>,
    ) -> Result<(), PushError> {
        let (mut owner, mut mname, mut rname) = (NameBuf::new(), NameBuf::new(), NameBuf::new());
        let ok = self.apex_name(apex, &mut owner)
            && self.ns_name(Apex::Z, view.me, &mut mname)
            && rname.push(b"hostmaster")
            && rname.push_all(&self.zone);
        let (Some(owner), Some(mname), Some(rname), true) =
            (owner.name(), mname.name(), rname.name(), ok)
        else {
            return Err(PushError::ShortBuf);
        };
        let soa = Soa::new(
            mname,
            rname,
            Serial(self.cfg.serial),
            Ttl::from_secs(3600),
            Ttl::from_secs(600),
            Ttl::from_secs(604_800),
            Ttl::from_secs(NEGATIVE_TTL_SECS),
        );
        push(owner, Ttl::from_secs(ttl), soa)
    }

    /// A negative answer: the SOA of `apex` in the authority section.
    fn negative(
        &mut self,
        ctx: &Ctx,
        apex: Apex,
        rcode: Rcode,
        ans: AnswerBuilder<Target>,
    ) -> (AdditionalBuilder<Target>, Result<(), PushError>) {
        let mut auth = ans.authority();
        auth.header_mut().set_rcode(rcode);
        let r = self.push_soa(ctx.view, apex, NEGATIVE_TTL_SECS, |o, t, s| {
            auth.push((o, t, s))
        });
        (auth.additional(), r)
    }

    /// The NS set of `apex` (name servers of its level's cluster) into the
    /// authority (`in_answer` false) or answer section, then their glue.
    fn delegation(
        &mut self,
        ctx: &Ctx,
        apex: Apex,
        in_answer: bool,
        mut ans: AnswerBuilder<Target>,
    ) -> (AdditionalBuilder<Target>, Result<(), PushError>) {
        let level = apex.level().min(ctx.view.levels.len().saturating_sub(1));
        let servers = self.pick_nameservers(ctx, level, ctx.client);
        // The name servers' names, made once per (apex, address) and kept.
        let mut idx = [usize::MAX; NAMESERVERS_MAX];
        for (slot, ip) in idx.iter_mut().zip(servers.addrs()) {
            *slot = match self.ns_name_cached(apex, ip) {
                Some(i) => i,
                None => return (ans.additional(), Err(PushError::ShortBuf)),
            };
        }
        let owner = &self.apex_names[apex_index(apex)];
        let cache = &self.ns_cache;
        let names = || {
            idx.iter()
                .filter_map(|&i| cache.get(i))
                .map(|(_, ip, n)| (*ip, n.for_ref()))
        };
        let ttl = Ttl::from_secs(NS_TTL_SECS);
        let mut add = if in_answer {
            for (_, n) in names() {
                if let Err(e) = ans.push((owner.for_ref(), ttl, Ns::new(n))) {
                    return (ans.additional(), Err(e));
                }
            }
            ans.additional()
        } else {
            let mut auth = ans.authority();
            for (_, n) in names() {
                if let Err(e) = auth.push((owner.for_ref(), ttl, Ns::new(n))) {
                    return (auth.additional(), Err(e));
                }
            }
            auth.additional()
        };
        for (ip, n) in names() {
            let r = match ip {
                IpAddr::V4(a) => add.push((n, ttl, a4(a))),
                IpAddr::V6(a) => add.push((n, ttl, a6(a))),
            };
            if let Err(e) = r {
                return (add, Err(e));
            }
        }
        (add, Ok(()))
    }

    /// The index in `ns_cache` of `ns-<hex ip>.<apex>`, made if missing (a
    /// full cache is emptied first: it holds what the view names, a few).
    fn ns_name_cached(&mut self, apex: Apex, ip: IpAddr) -> Option<usize> {
        if let Some(i) = self
            .ns_cache
            .iter()
            .position(|(a, i, _)| *a == apex && *i == ip)
        {
            return Some(i);
        }
        if self.ns_cache.len() >= NS_CACHE_MAX {
            self.ns_cache.clear();
        }
        let mut nb = NameBuf::new();
        if !self.ns_name(apex, ip, &mut nb) {
            return None;
        }
        let name = Name::from_octets(nb.name()?.as_slice().to_vec()).ok()?;
        self.ns_cache.push((apex, ip, name));
        Some(self.ns_cache.len() - 1)
    }

    /// Builds the answer for a name in our zones. Returns the builder at the
    /// additional section, the Client Subnet scope, and whether it all fit.
    fn build(
        &mut self,
        ctx: &Ctx,
        place: Place,
        mut ans: AnswerBuilder<Target>,
    ) -> (AdditionalBuilder<Target>, u8, Result<(), PushError>) {
        let qtype = ctx.qtype;
        match place {
            Place::Outside => (ans.additional(), 0, Ok(())),
            Place::Apex(apex) => {
                let (add, r) = match qtype {
                    Rtype::SOA | Rtype::ANY => {
                        let r = self
                            .push_soa(ctx.view, apex, ZONE_TTL_SECS, |o, t, s| ans.push((o, t, s)));
                        (ans.additional(), r)
                    }
                    Rtype::NS => self.delegation(ctx, apex, true, ans),
                    Rtype::DNAME if apex == Apex::Alias => {
                        let r = self.push_dname(ctx, &mut ans);
                        (ans.additional(), r)
                    }
                    _ => self.negative(ctx, apex, Rcode::NOERROR, ans),
                };
                (add, 0, r)
            }
            Place::NsHost(apex, ip) => {
                let (add, r) = if qtype == family_rtype(ip) || qtype == Rtype::ANY {
                    let ttl = Ttl::from_secs(NS_TTL_SECS);
                    let r = match ip {
                        IpAddr::V4(a) => ans.push((ctx.qname.clone(), ttl, a4(a))),
                        IpAddr::V6(a) => ans.push((ctx.qname.clone(), ttl, a6(a))),
                    };
                    (ans.additional(), r)
                } else {
                    self.negative(ctx, apex, Rcode::NOERROR, ans)
                };
                (add, 0, r)
            }
            Place::NxDomain(apex) => {
                let (add, r) = self.negative(ctx, apex, Rcode::NXDOMAIN, ans);
                (add, 0, r)
            }
            Place::Proxy => self.proxies(ctx, None, ans),
            Place::BelowAlias(prefix) => {
                if let Err(e) = self.push_dname(ctx, &mut ans) {
                    return (ans.additional(), 0, Err(e));
                }
                // The synthesized CNAME (RFC 6672 §2.2): the query name with
                // the alias replaced by http.L2.L1.L0.Z, letter case kept.
                let mut target = NameBuf::new();
                let fits = ctx.labels[..prefix].iter().all(|l| target.push(l))
                    && target.push(b"http")
                    && self.apex_name(Apex::L2, &mut target);
                if !fits {
                    // Too long a name: YXDOMAIN, with the DNAME.
                    ans.header_mut().set_rcode(Rcode::YXDOMAIN);
                    return (ans.additional(), 0, Ok(()));
                }
                let Some(tname) = target.name() else {
                    return (ans.additional(), 0, Err(PushError::ShortBuf));
                };
                let r = ans.push((
                    ctx.qname.clone(),
                    Ttl::from_secs(ZONE_TTL_SECS),
                    Cname::new(tname.clone()),
                ));
                if r.is_err() || matches!(qtype, Rtype::CNAME | Rtype::DNAME | Rtype::ANY) {
                    return (ans.additional(), 0, r);
                }
                self.proxies(ctx, Some(tname), ans)
            }
        }
    }

    fn push_dname(&self, ctx: &Ctx, ans: &mut AnswerBuilder<Target>) -> Result<(), PushError> {
        let (mut owner, mut target) = (NameBuf::new(), NameBuf::new());
        let ok = self.apex_name(Apex::Alias, &mut owner)
            && target.push(b"http")
            && self.apex_name(Apex::L2, &mut target);
        let _ = ctx;
        match (ok, owner.name(), target.name()) {
            (true, Some(o), Some(t)) => ans.push((o, Ttl::from_secs(ZONE_TTL_SECS), Dname::new(t))),
            _ => Err(PushError::ShortBuf),
        }
    }

    /// What the answer for a proxy name holds: the client located, the
    /// proxies picked, the counters and follow-ups of that done (the
    /// answer function's side effects, taken once per query whichever way
    /// the answer is then written).
    fn pick(&mut self, ctx: &Who, best: &mut Best<ANSWERS_MAX>) -> Pick {
        let want = match ctx.qtype {
            Rtype::A | Rtype::ANY => Rtype::A,
            Rtype::AAAA => Rtype::AAAA,
            _ => return Pick::NoAddress,
        };
        let (level, scope, near) = self.locate(ctx.now, ctx.client, ctx.edns.ecs);
        let level = (level as usize).min(ctx.view.levels.len().saturating_sub(1));
        let target = match ctx.edns.ecs {
            Some(e) if e.source > 0 => e.addr,
            _ => ctx.client,
        };
        let hinted = self.pick_proxies(ctx, level, target, want, near, best);
        if self.hold_now {
            // Held: nothing is sent now; the query is asked again.
            return Pick::Held(scope);
        }
        if !matches!(self.hold, Hold::Retry(_)) {
            match level {
                0 => self.counters.client_level0 += 1,
                1 => self.counters.client_level1 += 1,
                _ => self.counters.client_level2 += 1,
            }
        }
        match self.hold {
            Hold::Retry(_) if best.len > 0 => self.counters.held_answered += 1,
            Hold::Retry(_) => {
                self.counters.held_expired += 1;
                self.hold_failed = Some(ctx.now);
            }
            _ => {}
        }
        if best.len == 0 {
            self.counters.answers_no_proxy += 1;
            return Pick::NoProxy(scope);
        }
        if hinted {
            self.counters.answers_hinted += 1;
        }
        self.counters.answers_proxied += 1;
        self.answer_level = Some(level as Level);
        Pick::Proxies { level, scope }
    }

    /// The proxies for `owner` (the query name, or a CNAME's target), and
    /// the delegation that locks the resolver onto the client's cluster.
    fn proxies(
        &mut self,
        ctx: &Ctx,
        owner: Option<Flat<'_>>,
        mut ans: AnswerBuilder<Target>,
    ) -> (AdditionalBuilder<Target>, u8, Result<(), PushError>) {
        // The fast path may have picked already (then it could not write
        // the answer itself: no proxy, or too big).
        let (pick, best) = match self.picked.take() {
            Some(p) => p,
            None => {
                let mut best = Best::new(self.cfg.answers_max);
                (self.pick(ctx, &mut best), best)
            }
        };
        let (level, scope) = match pick {
            Pick::NoAddress => {
                let (add, r) = self.negative(ctx, Apex::L2, Rcode::NOERROR, ans);
                return (add, 0, r);
            }
            Pick::Held(scope) => return (ans.additional(), scope, Ok(())),
            Pick::NoProxy(scope) => {
                let (add, r) = self.negative(ctx, Apex::L2, Rcode::NOERROR, ans);
                return (add, scope, r);
            }
            Pick::Proxies { level, scope } => (level, scope),
        };
        let ttl = Ttl::from_secs(a_ttl_secs(level));
        for ip in best.addrs() {
            let r = match (ip, owner.clone()) {
                (IpAddr::V4(a), Some(o)) => ans.push((o, ttl, a4(a))),
                (IpAddr::V4(a), None) => ans.push((ctx.qname.clone(), ttl, a4(a))),
                (IpAddr::V6(a), Some(o)) => ans.push((o, ttl, a6(a))),
                (IpAddr::V6(a), None) => ans.push((ctx.qname.clone(), ttl, a6(a))),
            };
            if let Err(e) = r {
                return (ans.additional(), scope, Err(e));
            }
        }
        // The lock (§3.1): the zone of the client's level, delegated to
        // its cluster's name servers. If it does not fit, the answer goes
        // without it rather than truncated.
        let (add, r) = self.delegation(ctx, Apex::for_level(level), false, ans);
        match r {
            Ok(()) => (add, scope, Ok(())),
            Err(_) => {
                let mut auth = add.authority();
                auth.rewind();
                (auth.additional(), scope, Ok(()))
            }
        }
    }
}

/// The TTL of A records for a client at `level`.
fn a_ttl_secs(level: usize) -> u32 {
    if level >= 2 {
        A_TTL_SECS_LEVEL2
    } else {
        A_TTL_SECS_NEAR
    }
}

/// What [`Dnssrv::pick`] decided for a proxy name.
#[derive(Clone, Copy, Debug)]
enum Pick {
    /// The query type has no addresses (NODATA).
    NoAddress,
    /// Held (with the Client Subnet scope).
    Held(u8),
    /// No proxy live: NODATA (with the scope).
    NoProxy(u8),
    /// The proxies picked, for a client at `level`.
    Proxies { level: usize, scope: u8 },
}

/// A parsed question.
type ParsedQuestion<'q> = Question<ParsedName<&'q [u8]>>;

/// A name as flat octets (sized, so that the compressor sees them flat).
type Flat<'a> = Name<&'a [u8]>;

/// What one query's answer is built from.
struct Ctx<'a> {
    who: Who<'a>,
    qname: Flat<'a>,
    labels: &'a [&'a [u8]],
}

/// What picking the proxies and name servers reads: the query without its
/// name.
struct Who<'a> {
    now: Time,
    client: IpAddr,
    qtype: Rtype,
    view: &'a View,
    edns: Edns,
}

impl<'a> std::ops::Deref for Ctx<'a> {
    type Target = Who<'a>;
    fn deref(&self) -> &Who<'a> {
        &self.who
    }
}

/// Parses the question and the EDNS record, checking the whole message.
fn parse<'q>(msg: &'q Message<&'q [u8]>, len: usize) -> Result<(ParsedQuestion<'q>, Edns), Bad> {
    let formerr = Bad::Rcode(Rcode::FORMERR);
    let mut qs = msg.question();
    let question = match qs.next() {
        Some(Ok(q)) => q,
        _ => return Err(formerr),
    };
    let answer = qs.answer().map_err(|_| Bad::Rcode(Rcode::FORMERR))?;
    let authority = answer
        .next_section()
        .map_err(|_| Bad::Rcode(Rcode::FORMERR))?
        .ok_or(Bad::Rcode(Rcode::FORMERR))?;
    let mut additional = authority
        .next_section()
        .map_err(|_| Bad::Rcode(Rcode::FORMERR))?
        .ok_or(Bad::Rcode(Rcode::FORMERR))?;
    let mut edns = Edns::default();
    for rec in additional.by_ref() {
        let rec = rec.map_err(|_| Bad::Rcode(Rcode::FORMERR))?;
        if rec.rtype() != Rtype::OPT {
            continue;
        }
        // One OPT, owned by the root (RFC 6891 §6.1.1).
        if edns.present || !rec.owner().is_root() {
            return Err(Bad::Rcode(Rcode::FORMERR));
        }
        let opt = match rec.to_record::<Opt<&[u8]>>() {
            Ok(Some(r)) => OptRecord::from_record(r),
            _ => return Err(Bad::Rcode(Rcode::FORMERR)),
        };
        edns.present = true;
        edns.udp = opt.udp_payload_size();
        edns.version = opt.version();
        edns.dnssec_ok = opt.dnssec_ok();
        for o in opt.opt().iter::<UnknownOptData<&[u8]>>() {
            let o = o.map_err(|_| Bad::Rcode(Rcode::FORMERR))?;
            if o.code().to_int() == OPT_CLIENT_SUBNET {
                if edns.ecs.is_some() {
                    return Err(Bad::Rcode(Rcode::FORMERR));
                }
                edns.ecs = Some(parse_ecs(o.as_slice()).ok_or(Bad::Rcode(Rcode::FORMERR))?);
            }
            // Other options are ignored and not echoed (RFC 6891 §6.1.2).
        }
    }
    // Octets beyond what the counts announce: a malformed message.
    if additional.pos() != len {
        return Err(Bad::Rcode(Rcode::FORMERR));
    }
    Ok((question, edns))
}

/// An EDNS Client Subnet option, checked as RFC 7871 §7.1.2 asks: a known
/// family, a source prefix that fits it, exactly the octets it needs, no
/// bits set beyond it, and a zero scope.
fn parse_ecs(data: &[u8]) -> Option<Ecs> {
    let (&[f0, f1, source, scope], addr) = data.split_first_chunk::<4>()?;
    let family = u16::from_be_bytes([f0, f1]);
    let max = match family {
        1 => 32,
        2 => 128,
        _ => return None,
    };
    if source > max || scope != 0 || addr.len() != usize::from(source).div_ceil(8) {
        return None;
    }
    let mut full = [0u8; 16];
    full.get_mut(..addr.len())?.copy_from_slice(addr);
    let v = u128::from_be_bytes(full);
    let keep = if source == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(source))
    };
    if v & !keep != 0 {
        return None;
    }
    let addr = if family == 1 {
        IpAddr::V4(Ipv4Addr::from((v >> 96) as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(v))
    };
    Some(Ecs { addr, source })
}

#[cfg(test)]
mod tests;
