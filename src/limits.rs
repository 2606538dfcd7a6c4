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
}

/// dnssrv's limits.
pub const DNS: DnsLimits = DnsLimits {
    answers_max: 16,
    nameservers_max: 8,
    ns_cache_max: 64,
    compress_names_max: 24,
    rrl_buckets: 4096,
    near_nodes_max: 4,
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
}

/// The proxy's limits.
pub const PROXY: ProxyLimits = ProxyLimits {
    pass_keys_max: 4096,
    vary_urls_tracked_max: 4096,
    range_bytes_max: 256,
    chunk_line_bytes_max: 4096,
    targeted_field_bytes_max: 4096,
};
