//! What dnssrv counts: plain per-core counters, and answers by query type,
//! response code and the client's level (the metrics JSON's `dns`).

use super::*;

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
    /// Datagrams not answered: responses, runts, `rrl_dropped` and
    /// `oversized`.
    pub dropped: u64,
    /// Responses dropped by response rate limiting.
    pub rrl_dropped: u64,
    /// Responses rate limiting sent truncated instead (slip).
    pub rrl_slipped: u64,
    /// Liveness checks (pings of proxies an answer names that have not
    /// answered lately, issue 24) asked of the runtime.
    pub checks_sent: u64,
    /// Checks due but refused by their rate or table bound.
    pub checks_refused: u64,
    /// Proxies left out of an answer because a check of them went
    /// unanswered (counted per candidate per answer).
    pub proxies_withheld: u64,
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
    /// UDP datagrams longer than the runtime reads (`udp_query_bytes_max`):
    /// dropped unread, never answered from a cut prefix (also counted in
    /// `dropped`).
    pub oversized: u64,
    /// Answers sent, by query type, response code and the client's level
    /// (see [`AnswerCounts`]).
    pub answers: AnswerCounts,
}

impl Counters {
    /// Every counter with its name, for the metrics JSON.
    pub fn fields(&self) -> [(&'static str, u64); 37] {
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
            ("oversized", self.oversized),
            ("checks_sent", self.checks_sent),
            ("checks_refused", self.checks_refused),
            ("proxies_withheld", self.proxies_withheld),
        ]
    }
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
pub(super) fn qtype_index(query: &[u8]) -> usize {
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

impl Dnssrv {
    /// Counts a query by its type.
    pub(super) fn count_query_type(&mut self, qtype: Rtype) {
        let c = &mut self.counters;
        match qtype {
            Rtype::A => c.queries_a += 1,
            Rtype::AAAA => c.queries_aaaa += 1,
            Rtype::NS => c.queries_ns += 1,
            Rtype::SOA => c.queries_soa += 1,
            Rtype::ANY => c.queries_any += 1,
            _ => c.queries_other += 1,
        }
    }

    /// Counts the answer's rcode.
    pub(super) fn count_rcode(&mut self, answer: &[u8]) {
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
    pub(super) fn count_answer(&mut self, qtype: usize, answer: &[u8], badvers: bool) {
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
}
