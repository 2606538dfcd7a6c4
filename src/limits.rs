//! The core's fixed limits on what network input can grow, in one place:
//! dnssrv's and the proxy's tables and the bytes they read. Units are last
//! in the names; each says why.
//!
//! These are fixed: they bound the node's own structures at sizes safe on
//! any host, and changing one changes no policy. What an operator tunes is
//! a configuration field instead (`Config`'s, `dns::DnsConfig`'s,
//! `proxy::http::Limits`). The DSHT's bounds are `Config` fields. Each
//! module keeps its constants' names, defined from these structs; protocol
//! constants (RFC 1035's 253 and 63 bytes, 512-byte plain UDP) stay beside
//! their code, documented as such. SECURITY.md lists every limit.

/// dnssrv's answers and tables (`dns`).
pub struct DnsLimits {
    /// A records in one answer: the bound of `DnsConfig::answers_max`
    /// (sixteen 16-byte records fit any UDP answer with the delegation).
    pub answers_max: usize,
    /// Name servers in one delegation: the bound of
    /// `DnsConfig::nameservers_max`.
    pub nameservers_max: usize,
    /// Name servers' names kept made, per dnssrv.
    pub ns_cache_max: usize,
    /// Names the compressor remembers per message (a message names few).
    pub compress_names_max: usize,
    /// Response rate limiting's buckets (client /24s and /56s hash into
    /// them: a flood of sources shares buckets, never grows the table).
    pub rrl_buckets: usize,
    /// Nodes remembered as near one client network.
    pub near_nodes_max: usize,
    /// Liveness checks (DSHT pings of proxies an answer names, issue 24)
    /// asked a second per dnssrv (per core): each costs one ping and its
    /// pending RPC, and the proxies checked come from the routing tables.
    pub live_checks_per_sec_max: u32,
    /// Proxies whose checks one dnssrv remembers (a routing table's proxies
    /// at every level fit many times over).
    pub live_tracked_max: usize,
}

/// dnssrv's limits.
pub const DNS: DnsLimits = DnsLimits {
    answers_max: 16,
    nameservers_max: 8,
    ns_cache_max: 64,
    compress_names_max: 24,
    rrl_buckets: 4096,
    near_nodes_max: 4,
    live_checks_per_sec_max: 64,
    live_tracked_max: 1024,
};

/// The proxy's per-core tables and what a request may carry (`proxy`);
/// the HTTP head's limits are `proxy::http::Limits`.
pub struct ProxyLimits {
    /// Objects marked uncacheable at once; a full memory first drops the
    /// expired marks, then an arbitrary one.
    pub pass_keys_max: usize,
    /// URLs whose `Vary` variants one `VariantBudget` tracks; beyond it an
    /// arbitrary one is forgotten.
    pub vary_urls_tracked_max: usize,
    /// A `Range` header longer than this is abusive: the whole body is
    /// served.
    pub range_bytes_max: usize,
    /// Bytes of a chunk-size line, extensions included.
    pub chunk_line_bytes_max: usize,
    /// Bytes of a targeted cache-control field (RFC 9213), all its lines
    /// joined; a longer one is ignored as invalid.
    pub targeted_field_bytes_max: usize,
    /// Origin hosts whose `Vary` fields one core has learned
    /// (`keyed::LearnedVary`); beyond it an arbitrary one is forgotten.
    pub learned_vary_hosts_max: usize,
    /// Fields learned per origin host: the most a host's `Vary` makes
    /// coral send when the URL's own `Vary` is not yet known.
    pub learned_vary_fields_per_host_max: usize,
    /// Bytes of a learned field's name; a longer name is not learned.
    pub learned_vary_field_bytes_max: usize,
    /// URLs whose last answer's `Vary` one core remembers (answers not
    /// stored because their key did not match what was sent); beyond it an
    /// arbitrary one is forgotten.
    pub learned_vary_urls_max: usize,
    /// Bytes of the last plain request a core remembers with its parse
    /// (`proxy::hot::PlainMemo`, one fixed buffer per core); a longer
    /// request is parsed every time.
    pub plain_memo_bytes_max: usize,
}

/// The proxy's limits.
pub const PROXY: ProxyLimits = ProxyLimits {
    pass_keys_max: 4096,
    vary_urls_tracked_max: 4096,
    range_bytes_max: 256,
    chunk_line_bytes_max: 4096,
    targeted_field_bytes_max: 4096,
    learned_vary_hosts_max: 4096,
    learned_vary_fields_per_host_max: 4,
    learned_vary_field_bytes_max: 64,
    learned_vary_urls_max: 4096,
    plain_memo_bytes_max: 512,
};

/// The stub resolver's bounds (`resolve`): what resolving origin names for
/// strangers' requests may hold. The tunable ones (servers, TTL caps) are
/// `resolve::StubConfig` fields, whose defaults come from here.
pub struct ResolveLimits {
    /// Name servers asked, at most (resolv.conf's MAXNS is 3).
    pub servers_max: usize,
    /// Lookups in flight per core (each an A and an AAAA query, a socket
    /// each while waiting); beyond it a new name is refused at once.
    pub lookups_inflight_max: usize,
    /// Requests one client address may have waiting for lookups at once,
    /// per core: one client cannot take every lookup slot.
    pub waiters_per_client_max: usize,
    /// Requests waiting for one name's lookup (they share its one query).
    pub waiters_per_name_max: usize,
    /// Names whose answers (good or bad) are kept, per core; when full the
    /// half nearest to expiry goes.
    pub cache_entries_max: usize,
    /// Addresses kept per name.
    pub addresses_per_name_max: usize,
    /// CNAME records followed within one answer.
    pub cname_hops_max: usize,
    /// Longest wait for one query's answer before the next try, in
    /// milliseconds.
    pub attempt_timeout_ms: u64,
    /// Longest a whole lookup lasts, retries included, in milliseconds: its
    /// slot is freed then and its waiters told "timed out".
    pub lookup_timeout_ms: u64,
    /// Tries per query, across the servers in turn.
    pub attempts_max: u32,
    /// Longest a "no such name" or "no address" answer is remembered, in
    /// seconds (RFC 2308: the SOA's TTL and MINIMUM, capped by this).
    pub negative_ttl_max_secs: u32,
    /// How long a timed-out or failed (SERVFAIL, REFUSED) lookup is
    /// remembered, in seconds (RFC 2308 §7.1: at most five minutes).
    pub failure_ttl_secs: u32,
    /// Largest UDP answer read (the EDNS payload size the queries
    /// advertise, RFC 9715's 1232).
    pub udp_answer_bytes_max: usize,
    /// Largest answer read over TCP (the two-byte length's most).
    pub tcp_answer_bytes_max: usize,
}

/// The stub resolver's limits.
pub const RESOLVE: ResolveLimits = ResolveLimits {
    servers_max: 3,
    lookups_inflight_max: 256,
    waiters_per_client_max: 16,
    waiters_per_name_max: 1024,
    cache_entries_max: 4096,
    addresses_per_name_max: 16,
    cname_hops_max: 8,
    attempt_timeout_ms: 2000,
    lookup_timeout_ms: 10_000,
    attempts_max: 4,
    negative_ttl_max_secs: 60,
    failure_ttl_secs: 5,
    udp_answer_bytes_max: 1232,
    tcp_answer_bytes_max: 65_535,
};

/// Verified peer bytes (issue 22 items 4–5, `verify`): the unit an
/// origin-fetcher signs and what a peer's signed body may make a node hold.
pub struct VerifyLimits {
    /// Bytes of one signed chunk (the last may be shorter): a node fetching
    /// from a peer holds at most one chunk unverified, and forwards nothing
    /// of it before its signature holds. 64 KiB: one signature (64 bytes)
    /// per chunk is 0.1% of the body, and one Ed25519 verification per
    /// chunk costs far less than its SHA-256.
    pub chunk_bytes: u32,
    /// The smallest and largest chunk size a signed head may name: a
    /// stranger cannot make a node buffer more than the largest.
    pub chunk_bytes_min: u32,
    /// See `chunk_bytes_min`.
    pub chunk_bytes_max: u32,
    /// Signers a node distrusts at once (caught forging); beyond it the
    /// oldest is forgotten (it is caught again at its next forgery).
    pub distrusted_signers_max: usize,
}

/// The limits of verified peer bytes.
pub const VERIFY: VerifyLimits = VerifyLimits {
    chunk_bytes: 64 << 10,
    chunk_bytes_min: 4 << 10,
    chunk_bytes_max: 1 << 20,
    distrusted_signers_max: 1024,
};

/// Evidence against a lying origin-fetcher (issue 22 item 5 c,
/// `verify::evidence`): what publishing, finding and checking it may cost.
pub struct EvidenceLimits {
    /// Seconds an evidence pointer lives in the DSHT (the DSHT's own
    /// `ttl_max_secs`, a day): every node that looks the forger up within
    /// it finds the evidence.
    pub ttl_secs: u32,
    /// Seconds a signer looked up without evidence stays clean; a signer
    /// whose copies a node still keeps is looked up again after it, so a
    /// node stops using a forger proven elsewhere within about this long.
    pub verdict_ttl_secs: u32,
    /// Milliseconds a fill from a peer waits for the lookup of a signer not
    /// looked up before (a DSHT get); past it, the peer's copy is not used
    /// and the fill goes to the origin.
    pub lookup_wait_ms: u32,
    /// Milliseconds the checks of one signer's evidence may take (fetching
    /// each accuser's record, and the origin's object); past it the signer
    /// is looked up again.
    pub check_wait_ms: u32,
    /// Signers whose verdicts a node keeps (about 40 bytes each); the
    /// oldest is forgotten first (and looked up again when next used).
    pub signers_tracked_max: usize,
    /// Accusers' evidence checked per lookup of one signer at most (one
    /// HTTP request each, and at most one origin request each).
    pub accusers_per_lookup_max: usize,
    /// Origin requests a node spends on checking evidence per minute; the
    /// checks beyond wait for the signer's next lookup.
    pub origin_checks_per_minute_max: u32,
    /// (forger, accuser) pairs remembered as checked: each pair is checked
    /// once.
    pub checked_pairs_max: usize,
    /// Accusers remembered as having accused falsely: their evidence is
    /// never checked again.
    pub ignored_accusers_max: usize,
    /// Bytes of one evidence record (two claims are 1,050): a node reads no
    /// more from an accuser.
    pub bytes_max: usize,
    /// Bytes of the URL a record names.
    pub url_bytes_max: usize,
    /// Records a node serves as accuser (its own catches); the oldest is
    /// dropped first.
    pub served_max: usize,
}

/// The limits of evidence.
pub const EVIDENCE: EvidenceLimits = EvidenceLimits {
    ttl_secs: 86_400,
    verdict_ttl_secs: 120,
    lookup_wait_ms: 3_000,
    check_wait_ms: 30_000,
    signers_tracked_max: 4096,
    accusers_per_lookup_max: 4,
    origin_checks_per_minute_max: 30,
    checked_pairs_max: 4096,
    ignored_accusers_max: 1024,
    bytes_max: 4096,
    url_bytes_max: 2048,
    served_max: 256,
};

/// Resuming a fill that lost its source mid-body (`proxy::fetch`, issue 24
/// item 1).
pub struct ResumeLimits {
    /// Sources a fill turns to after losing one, in all: a fill whose
    /// sources keep failing is cut after this many (each is one range
    /// request, at most one of them to the origin per loss).
    pub sources_max: usize,
    /// Peers remembered per fill as failed or lying, never asked again for
    /// it.
    pub bad_peers_max: usize,
}

/// The limits of resumption.
pub const RESUME: ResumeLimits = ResumeLimits {
    sources_max: 4,
    bad_peers_max: 8,
};
