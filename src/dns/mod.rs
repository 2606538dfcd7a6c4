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
//! per second). A records come from that level's live proxies (TTL 20 s at
//! levels 0–1, 30 s at level 2; a dead proxy leaves the answers within
//! seconds, `live.rs`); the authority section delegates the zone of that
//! level (`L0.Z`, `L1.L0.Z` or `L2.L1.L0.Z`) to name servers of the same
//! cluster, with glue, for an hour, so a resolver keeps asking the nearest
//! dnssrv instances (§3.1). Name servers are named by their address
//! (`ns-7f0d0101.L2.L1.L0.Z` is 127.13.1.1), so every node can answer for
//! every name server's glue without any state.

mod compress;
mod counters;
mod fast;
mod limits;
mod live;
mod names;
mod near;
mod networks;
mod parse;
mod pick;
mod respond;
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

pub use counters::{AnswerCounts, Counters, LEVEL_NAMES, QTYPE_NAMES, RCODE_NAMES};
pub use limits::{prefix_key, ProbeLimiter, RateLimiter, Rrl};
pub use live::{Check, Liveness, Verdict, CHECK_INTERVAL, CHECK_TIMEOUT, FRESH, UNCONFIRMED};
pub use near::{lookup_keys, NearNodes, HINT_HOPS_LAST, HINT_LOOKUP_KEYS_MAX, NEAR_NODES_MAX};
pub use networks::{Look, Networks};
pub use view::{LevelView, Peer, View};

use crate::dsht::id::{keyed_hasher, Key};
use crate::dsht::node::Level;
use crate::time::{Duration, Time};

use compress::{eq_fold, Compress, Target, Wire};
use counters::qtype_index;
use names::{apex_index, labels_of, Apex, Flat, NameBuf, Place};
use parse::{parse, parse_ecs, Bad, Ecs, Edns};
use pick::{Best, Pick};
use respond::{a_ttl_secs, family_rtype, Who};

/// Levels the names have: `L0`, `L1`, `L2`.
pub const LEVELS: usize = 3;
/// Most A records in one answer.
pub const ANSWERS_MAX: usize = crate::limits::DNS.answers_max;
/// Most name servers in one delegation.
pub const NAMESERVERS_MAX: usize = crate::limits::DNS.nameservers_max;
/// Protocol constant: plain DNS over UDP without EDNS (RFC 1035 §4.2.1).
const UDP_PLAIN_BYTES: usize = 512;
/// Protocol constant: a DNS message over TCP (a two-octet length, RFC 1035 §4.2.2).
const TCP_MESSAGE_BYTES: usize = 65_535;
/// Time-to-live of A records for clients at levels 0 and 1 (§3.1). A
/// resolver keeps naming a proxy this long after dnssrv stops: a client's
/// failover time is the detection time (`live.rs`, about 2 s) plus up to
/// this (README.md, "Failover time and TTLs"). Shorter than level 2's: a
/// client placed at level 0 or 1 is often one not measured yet, whose next
/// answer may be nearer.
pub const A_TTL_SECS_NEAR: u32 = 20;
/// Time-to-live of A records for clients at level 2: the answer is the
/// nearest cluster's and changes least, so resolvers may keep it longer;
/// but every second of it is a second of failover (issue 24: 60 s meant
/// clients failing for over a minute after a proxy died).
pub const A_TTL_SECS_LEVEL2: u32 = 30;
/// Time-to-live of A records when a proxy named has not been confirmed
/// alive for [`UNCONFIRMED`] (the first answers after a quiet spell): if it
/// died meanwhile, resolvers ask again this soon, after its check.
pub const A_TTL_SECS_UNCONFIRMED: u32 = 5;
/// Time-to-live of NS records and their glue: resolvers lock onto a cluster's
/// name servers for an hour (§3.1).
pub const NS_TTL_SECS: u32 = 3600;
/// Time-to-live of the SOA, the DNAME and its synthesized CNAME.
pub const ZONE_TTL_SECS: u32 = 3600;
/// Negative answers are cached this long (the SOA minimum, RFC 2308). A
/// NODATA for a proxy name (no proxy live) is one: kept short so clients
/// get proxies again soon after they come back.
pub const NEGATIVE_TTL_SECS: u32 = 10;
/// EDNS option code of Client Subnet (RFC 7871).
const OPT_CLIENT_SUBNET: u16 = 8;
/// Name servers' names kept made.
const NS_CACHE_MAX: usize = crate::limits::DNS.ns_cache_max;
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
    /// Check the proxy at this address (an answer names it and it has not
    /// answered lately, or a check of it went unanswered): ping its DSHT
    /// address; the answer refreshes its routing entries (`live.rs`).
    Check(IpAddr),
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

/// Names the compressor remembers per message.
const COMPRESS_NAMES_MAX: usize = crate::limits::DNS.compress_names_max;

/// A name server's name under an apex, made once and kept
/// (`Dnssrv::ns_cache`).
#[derive(Debug)]
struct NsName {
    apex: Apex,
    /// Its address (the glue's).
    ip: IpAddr,
    /// `ns-<hex ip>.<apex>`.
    name: Name<Vec<u8>>,
    /// Its NS record as the fast path writes it.
    record: fast::NsRecord,
}

/// dnssrv: one per core.
#[derive(Debug)]
pub struct Dnssrv {
    cfg: DnsConfig,
    zone: Vec<Vec<u8>>,
    alias: Option<Vec<Vec<u8>>>,
    /// Client networks: their measured RTTs and the nodes near them found
    /// through hints (one table: an answer looks its client up once).
    networks: Networks,
    probes: ProbeLimiter,
    rrl: RateLimiter,
    followups: VecDeque<FollowUp>,
    verify_asked: [Option<Time>; LEVELS],
    counters: Counters,
    /// The checks of proxies' liveness (`live.rs`).
    live: Liveness,
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
    ns_cache: Vec<NsName>,
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

impl Dnssrv {
    /// dnssrv with `cfg`; the zone and alias must be domain names.
    pub fn new(cfg: DnsConfig) -> Dnssrv {
        let zone = labels_of(&cfg.zone);
        let alias = cfg.alias.as_deref().map(labels_of);
        let mut srv = Dnssrv {
            networks: Networks::new(
                cfg.clients_max,
                Duration::from_secs(cfg.client_rtt_secs),
                cfg.clients_max,
                Duration::from_secs(cfg.client_rtt_secs),
                Duration::from_secs(cfg.probe_interval_secs),
            ),
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
            live: Liveness::new(
                crate::limits::DNS.live_tracked_max,
                crate::limits::DNS.live_checks_per_sec_max,
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
        self.networks = self
            .networks
            .with_hasher(keyed_hasher(secret, "dns networks"));
        self.probes = self.probes.with_hasher(keyed_hasher(secret, "dns probes"));
        self.live = self.live.with_hasher(keyed_hasher(secret, "dns live"));
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
        self.networks
            .insert_rtt(prefix_key(ip, 24, 56), rtt, now, false);
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
        if self.networks.near_fresh(key, now) || !self.networks.start(key, now) {
            return;
        }
        let (keys, len) = lookup_keys(ip, hops);
        if len == 0 {
            // No key to look up (private addresses): known to have none.
            self.networks
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
        let n = self.networks.found(key, nodes, me, now);
        self.counters.hint_nodes_found += n as u64;
        let mut found = [None; NEAR_NODES_MAX];
        for (slot, a) in found.iter_mut().zip(self.networks.nodes(key, now)) {
            *slot = Some(a);
        }
        for a in found.into_iter().flatten() {
            self.followups.push_back(FollowUp::Ping(a));
        }
    }

    /// The runtime received a UDP datagram longer than it reads
    /// (`MSG_TRUNC`) and dropped it unread: counted, never answered.
    pub fn on_oversized(&mut self) {
        self.counters.oversized += 1;
        self.counters.dropped += 1;
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
        self.networks
            .insert_rtt(prefix_key(ip, 24, 56), rtt, now, true);
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
        let client = canonical(client);
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
        let r = match &fast {
            Some(q) if self.fast_path && rrl == Rrl::Send => {
                self.respond_fast(now, &msg, q, client, transport, view, buf)
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
}

/// A client's address as an answer sees it: an IPv4-mapped IPv6 address
/// as the IPv4 client, any IPv6 address without its flow label and scope
/// (`SocketAddr::new` of the canonical IP), an IPv4 one as it came, not
/// rebuilt (about 10 instructions an answer, issue 27, session 8;
/// `canonical_is_the_address_rebuilt_as_before`).
#[inline]
fn canonical(client: SocketAddr) -> SocketAddr {
    match client {
        SocketAddr::V4(_) => client,
        SocketAddr::V6(a) => SocketAddr::new(IpAddr::V6(*a.ip()).to_canonical(), a.port()),
    }
}

#[cfg(test)]
mod tests;
