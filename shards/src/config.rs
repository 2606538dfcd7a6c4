//! The node's configuration: a TOML file, overridden by flags.
//!
//! Every key has one typed default, defined once: here for the node's own
//! keys, and in the core crate for the keys that are its parameters
//! (`coral::Config::default()` for `[dht]`, `[clusters]`, `[limits]` and
//! `id_includes_port`; `coral::dns::DnsConfig::default()` for `zone`,
//! `alias` and most of `[dnssrv]`), which the sections below read.
//! [`FileConfig::default()`] is what `coral node` runs with no file: a
//! standalone node on loopback. A file sets any subset of the keys (serde
//! fills the rest from the defaults, and refuses unknown keys); flags then
//! override it. `deploy/coral.toml` and the README's option table are
//! tested against these defaults.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use coral::dns::DnsConfig;
use serde::{Deserialize, Serialize};

/// Shortest pointer TTL the proxy accepts (`[proxy] *_pointer_ttl_secs`):
/// pointers are renewed at 3/4 of their TTL, looked at once a second.
pub const POINTER_TTL_SECS_MIN: u32 = 2;

/// CoralProxy's port when `http` is not set (the paper's 8090).
pub const DEFAULT_HTTP_PORT: u16 = 8090;

/// The admin endpoint's address when `admin` is not set; the client
/// commands' `--node` default too.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:7080";

/// The DSHT's UDP address when `dsht` is not set: loopback, a network of one.
const DEFAULT_DSHT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7000);

/// dnssrv's port when `dns` is not set and the node is on loopback (a
/// standalone node, a test, the demo): clear of the host's own resolver and
/// needing no privilege. dnssrv's address is the DSHT address's IP.
pub const DEFAULT_DNS_PORT_LOOPBACK: u16 = 7053;

/// dnssrv's port when `dns` is not set and the node is public (its DSHT
/// address or `public_addr` is not loopback): the zone's NS records name
/// this host, and resolvers ask name servers on port 53 only.
pub const DEFAULT_DNS_PORT_PUBLIC: u16 = 53;

/// Most cores a node runs on (`cores`).
pub const CORES_MAX: usize = 1024;

/// Smallest disk cache (`[proxy] cache_size`).
pub const CACHE_SIZE_BYTES_MIN: u64 = 1 << 20;

/// The file's shape, every key with its default: `FileConfig::default()`
/// is the node `coral node` runs with no file and no flags.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// DSHT UDP address.
    pub dsht: SocketAddr,
    /// The DSHT address peers see (the node id derives from it); required
    /// when `dsht` is a wildcard. Unset: `dsht`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_addr: Option<SocketAddr>,
    /// The log filter (tracing's EnvFilter syntax).
    pub log: String,
    /// Admin HTTP address (loopback).
    pub admin: SocketAddr,
    /// Bootstrap nodes.
    pub bootstrap: Vec<SocketAddr>,
    /// Cores to use (0 = all allowed).
    pub cores: usize,
    /// Whether several nodes share this IP (the node id then hashes the port too).
    pub id_includes_port: bool,
    /// The zone dnssrv is authoritative for (§3.1; the paper's `nyucd.net`).
    pub zone: String,
    /// The short alias zone of Coralized URLs (the paper's `nyud.net`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// dnssrv's UDP and TCP address. Unset: the DSHT address's IP, port
    /// [`DEFAULT_DNS_PORT_LOOPBACK`] on loopback, [`DEFAULT_DNS_PORT_PUBLIC`]
    /// on a public node ([`NodeConfig::dns_addr`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<SocketAddr>,
    /// The HTTP proxy's address. Unset: the DSHT address's IP, port
    /// [`DEFAULT_HTTP_PORT`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<SocketAddr>,
    /// dnssrv's limits.
    pub dnssrv: DnsSection,
    /// DSHT parameters.
    pub dht: DhtSection,
    /// Clustering parameters.
    pub clusters: ClustersSection,
    /// CoralProxy and its cache.
    pub proxy: ProxySection,
    /// Limits for the open Internet (SECURITY.md).
    pub limits: LimitsSection,
    /// Where the node keeps its identity (its Ed25519 key, `node.key`).
    /// Unset: `coral-state/<DSHT IP>-<port>` under the working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// The network this node takes part in (SECURITY.md, "Threat model"):
    /// unset, its own (it admits itself only); `"open"`, any node (no
    /// admission); else the network's admission public keys, hex,
    /// comma-separated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// This node's certificate from the network (`coral network admit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_certificate: Option<PathBuf>,
    /// Labs and tests only: the network's secret admission key file; the
    /// node certifies itself with it. Never on a production node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_key: Option<PathBuf>,
}

impl Default for FileConfig {
    fn default() -> Self {
        let dns = DnsConfig::default();
        FileConfig {
            dsht: DEFAULT_DSHT,
            public_addr: None,
            log: "info".into(),
            admin: DEFAULT_ADMIN
                .parse()
                .expect("DEFAULT_ADMIN is a socket address"),
            bootstrap: Vec::new(),
            cores: 0,
            id_includes_port: coral::Config::default().id_includes_port,
            zone: dns.zone,
            alias: dns.alias,
            dns: None,
            http: None,
            dnssrv: DnsSection::default(),
            dht: DhtSection::default(),
            clusters: ClustersSection::default(),
            proxy: ProxySection::default(),
            limits: LimitsSection::default(),
            state_dir: None,
            network: None,
            network_certificate: None,
            network_key: None,
        }
    }
}

/// `[dnssrv]`: dnssrv's limits (§3.1). The defaults are
/// `coral::dns::DnsConfig::default()`'s, and the TCP listener's own.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DnsSection {
    /// A records per answer (1–`coral::dns::ANSWERS_MAX`).
    pub answers_max: usize,
    /// Name servers per delegation (1–`coral::dns::NAMESERVERS_MAX`).
    pub nameservers_max: usize,
    /// A proxy is live if it answered one of our RPCs this recently.
    pub live_secs: u64,
    /// Largest UDP answer with EDNS (512–4096).
    pub udp_payload_bytes: u16,
    /// The level of a client not measured yet (0–2).
    pub default_level: u8,
    /// UDP responses a second per client /24 or /56 (0: off).
    pub rrl_responses_per_sec: u32,
    /// Over the limit every n-th response is sent truncated.
    pub rrl_slip: u32,
    /// A client address is probed at most once this often.
    pub probe_interval_secs: u64,
    /// Probes per /24 per interval.
    pub probes_per_prefix: u32,
    /// Probes a second per core (0: never probe).
    pub probes_per_sec: u32,
    /// Client networks remembered per core.
    pub clients_max: usize,
    /// How long a measured RTT is used.
    pub client_rtt_secs: u64,
    /// TCP connections per core: the bound on what one core holds open for
    /// DNS-over-TCP clients (each costs a descriptor and a buffer).
    pub tcp_connections_max: usize,
    /// Longest a query with no live proxy waits while candidates are
    /// pinged, in ms (0: never).
    pub hold_ms: u64,
    /// Queries held at once per core.
    pub held_max: usize,
    /// A TCP connection with no query this long is closed.
    pub tcp_idle_ms: u64,
    /// Longest a TCP client may take to send a whole query, from its first
    /// byte (RFC 7766 §6.2.3; issue #23).
    pub tcp_query_timeout_ms: u64,
    /// Longest a write of answers to a TCP client may make no progress (a
    /// client that pipelines queries and never reads is closed).
    pub tcp_send_timeout_ms: u64,
    /// This node's proxy is non-recursive: it serves only clients on its
    /// local network, and dnssrv (on every node) gives its address only to
    /// those (§3.1). Advertised as the non-recursive service bit.
    pub non_recursive: bool,
    /// Known RTTs of client networks instead of measured ones, by address
    /// (its /24 or /56): `{ "192.0.2.0" = 15 }`. For resolvers whose
    /// distance is known, and for tests, which place clients at a level.
    pub client_rtt_ms: BTreeMap<String, u32>,
}

impl Default for DnsSection {
    fn default() -> Self {
        let d = DnsConfig::default();
        DnsSection {
            answers_max: d.answers_max,
            nameservers_max: d.nameservers_max,
            live_secs: d.live_secs,
            udp_payload_bytes: d.udp_payload_bytes,
            default_level: d.default_level,
            rrl_responses_per_sec: d.rrl_responses_per_sec,
            rrl_slip: d.rrl_slip,
            probe_interval_secs: d.probe_interval_secs,
            probes_per_prefix: d.probes_per_prefix,
            probes_per_sec: d.probes_per_sec,
            clients_max: d.clients_max,
            client_rtt_secs: d.client_rtt_secs,
            tcp_connections_max: 256,
            hold_ms: d.hold_ms,
            held_max: d.held_max,
            tcp_idle_ms: 10_000,
            tcp_query_timeout_ms: 5_000,
            tcp_send_timeout_ms: 10_000,
            non_recursive: false,
            client_rtt_ms: BTreeMap::new(),
        }
    }
}

impl DnsSection {
    /// dnssrv's configuration for a node configured as `cfg`.
    pub fn dns_config(&self, cfg: &NodeConfig) -> DnsConfig {
        DnsConfig {
            zone: cfg.zone.clone(),
            alias: cfg.alias.clone(),
            level_thresholds_ms: cfg.dht.level_thresholds_ms.clone(),
            answers_max: self.answers_max,
            nameservers_max: self.nameservers_max,
            live_secs: self.live_secs,
            udp_payload_bytes: self.udp_payload_bytes,
            default_level: self.default_level,
            rrl_responses_per_sec: self.rrl_responses_per_sec,
            rrl_slip: self.rrl_slip,
            probe_interval_secs: self.probe_interval_secs,
            probes_per_prefix: self.probes_per_prefix,
            probes_per_sec: self.probes_per_sec,
            clients_max: self.clients_max,
            client_rtt_secs: self.client_rtt_secs,
            serial: DnsConfig::default().serial,
            hold_ms: self.hold_ms,
            held_max: self.held_max,
        }
    }

    /// Checks every limit against its bound.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |what: &str, range: &str| Err(format!("[dnssrv] {what} must be {range}"));
        if !(1..=coral::dns::ANSWERS_MAX).contains(&self.answers_max) {
            return bad("answers_max", "1-16");
        }
        if !(1..=coral::dns::NAMESERVERS_MAX).contains(&self.nameservers_max) {
            return bad("nameservers_max", "1-8");
        }
        if !(512..=4096).contains(&self.udp_payload_bytes) {
            return bad("udp_payload_bytes", "512-4096");
        }
        if self.default_level > 2 {
            return bad("default_level", "0-2");
        }
        if self.tcp_connections_max == 0 || self.tcp_idle_ms == 0 {
            return bad("tcp_connections_max and tcp_idle_ms", "above 0");
        }
        if self.tcp_query_timeout_ms == 0 || self.tcp_send_timeout_ms == 0 {
            return bad("tcp_query_timeout_ms and tcp_send_timeout_ms", "above 0");
        }
        if self.clients_max == 0 {
            return bad("clients_max", "above 0");
        }
        if self.hold_ms > 5000 {
            return bad("hold_ms", "0-5000");
        }
        if self.held_max > 65_536 {
            return bad("held_max", "0-65536");
        }
        for ip in self.client_rtt_ms.keys() {
            if ip.parse::<IpAddr>().is_err() {
                return Err(format!(
                    "[dnssrv] client_rtt_ms: {ip:?} is not an IP address"
                ));
            }
        }
        Ok(())
    }
}

/// Declares a section of the file whose keys are fields of `coral::Config`
/// (of the same type): its defaults are read from `coral::Config::default()`
/// — one definition of each — and `apply` writes the section into a core
/// configuration.
macro_rules! core_section {
    ($(#[$doc:meta])* $name:ident {
        $($(#[$fdoc:meta])* $field:ident: $ty:ty => $core:ident,)*
    }) => {
        $(#[$doc])*
        #[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                let c = coral::Config::default();
                $name { $($field: c.$core,)* }
            }
        }

        impl $name {
            /// Writes the section's values into `c`.
            fn apply(&self, c: &mut coral::Config) {
                $(c.$core = self.$field;)*
            }
        }
    };
}

core_section! {
    /// `[limits]`: what one source may cost the node (SECURITY.md); each is
    /// the `coral::Config` field of the same name, with its unit in the name.
    LimitsSection {
        /// Longest TTL a stored value keeps.
        ttl_max_secs: u32 => ttl_max_secs,
        /// Keys one level of the store holds.
        keys_per_level_max: usize => keys_per_level_max,
        /// Bytes (keys and values) one level of the store holds.
        store_bytes_per_level_max: usize => store_bytes_per_level_max,
        /// Values one source stores under one key.
        values_per_source_per_key_max: usize => values_per_source_per_key_max,
        /// Values one /24 stores under one key.
        values_per_prefix_per_key_max: usize => values_per_prefix_per_key_max,
        /// Values one source stores in all.
        values_per_source_max: usize => values_per_source_max,
        /// Values one /24 stores in all.
        values_per_prefix_max: usize => values_per_prefix_max,
        /// Contacts of one IP address in one routing-table bucket.
        bucket_contacts_per_ip_max: usize => bucket_contacts_per_ip_max,
        /// Contacts of one /24 in one routing-table bucket.
        bucket_contacts_per_prefix_max: usize => bucket_contacts_per_prefix_max,
        /// Bytes sent to an unverified source per byte of its request.
        reply_amplification_max: u32 => reply_amplification_max,
        /// Requests a second from a source that has not answered our ping.
        rate_requests_per_sec: u32 => rate_requests_per_sec,
        /// Requests a second from a verified source.
        rate_verified_requests_per_sec: u32 => rate_verified_requests_per_sec,
        /// The window the rates are averaged over.
        rate_window_secs: u32 => rate_window_secs,
        /// How long a source over its rate is ignored.
        rate_block_secs: u32 => rate_block_secs,
        /// Sources the rate limiter remembers.
        rate_sources_max: usize => rate_sources_max,
    }
}

core_section! {
    /// `[clusters]`: self-organizing clusters (§4.4).
    ClustersSection {
        /// Whether this node organizes its own clusters (false: it stays in
        /// the singleton clusters it starts with).
        manage: bool => cluster_manage,
        /// Re-evaluation period.
        eval_secs: u64 => cluster_eval_secs,
        /// How long after joining the first decision comes.
        join_eval_secs: u64 => cluster_join_eval_secs,
        /// Acceptability: share of members within the threshold.
        join_percent: u32 => cluster_join_percent,
        /// The leave rule: share of accesses that miss the threshold.
        leave_percent: u32 => cluster_leave_percent,
    }
}

/// `[dht]`: the DSHT's parameters (paper symbols); the defaults are
/// `coral::Config::default()`'s.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DhtSection {
    /// RTT threshold per level in ms; level 0's is written 0 (unbounded).
    pub level_thresholds_ms: Vec<u32>,
    /// b.
    pub b: u32,
    /// α.
    pub alpha: usize,
    /// l.
    pub values_per_key_max: usize,
    /// β.
    pub beta_per_min: u32,
    /// RPC timeout.
    pub rpc_timeout_ms: u64,
}

impl Default for DhtSection {
    fn default() -> Self {
        let c = coral::Config::default();
        DhtSection {
            // Level 0 is unbounded: the file writes it 0.
            level_thresholds_ms: c
                .level_thresholds_ms
                .iter()
                .enumerate()
                .map(|(i, &ms)| if i == 0 { 0 } else { ms })
                .collect(),
            b: c.b,
            alpha: c.alpha,
            values_per_key_max: c.values_per_key_max,
            beta_per_min: c.beta_per_min,
            rpc_timeout_ms: c.rpc_timeout_ms,
        }
    }
}

impl DhtSection {
    /// Writes the section's values into `c`.
    fn apply(&self, c: &mut coral::Config) {
        c.level_thresholds_ms = self
            .level_thresholds_ms
            .iter()
            .enumerate()
            .map(|(i, &ms)| if i == 0 { u32::MAX } else { ms })
            .collect();
        c.b = self.b;
        c.alpha = self.alpha;
        c.values_per_key_max = self.values_per_key_max;
        c.beta_per_min = self.beta_per_min;
        c.rpc_timeout_ms = self.rpc_timeout_ms;
    }
}

/// `[proxy]`: CoralProxy and its disk cache (§2.2, §3.2), as the file
/// writes them; [`ProxySection::proxy_config`] resolves them.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProxySection {
    /// Directory of the disk cache. Unset: `coral-cache/<DSHT IP>-<port>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// Size of the disk cache, e.g. "1GiB" ([`parse_size`]).
    pub cache_size: String,
    /// The most objects the disk cache holds (its index's RAM is at most
    /// 200 bytes per object). Unset: one per 16 KiB of `cache_size`,
    /// within 4096 ..= 16 Mi (`cache::plan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_objects_max: Option<u64>,
    /// Whether origins may be on loopback, private, link-local ... addresses.
    pub allow_private_origins: bool,
    /// Static answers for origin names, "NAME=IP".
    pub resolve: Vec<String>,
    /// Origin/peer connect timeout.
    pub connect_timeout_ms: u64,
    /// Origin/peer time to the response head.
    pub first_byte_timeout_ms: u64,
    /// Origin/peer silence mid-response.
    pub idle_timeout_ms: u64,
    /// Client keep-alive idle time.
    pub client_idle_timeout_ms: u64,
    /// Largest object fetched (50 MB: enforced while streaming, since
    /// origins may omit Content-Length).
    pub object_bytes_max: u64,
    /// Client connections per core.
    pub connections_max: usize,
    /// Longest an error answer is cached.
    pub negative_ttl_secs: u64,
    /// Heuristic freshness (RFC 9111 §4.2.2) of responses that carry no
    /// explicit freshness: "coral" (Last-Modified-based, at least
    /// `heuristic_default_secs`) or "rfc" (Last-Modified-based only; no
    /// caching without explicit freshness or Last-Modified).
    pub heuristic: String,
    /// Heuristic lifetime without Last-Modified, and the least with it
    /// ("coral" only).
    pub heuristic_default_secs: u64,
    /// Percent of the time since Last-Modified given as lifetime.
    pub heuristic_last_modified_percent: u64,
    /// Cap of the Last-Modified-based lifetime.
    pub heuristic_max_secs: u64,
    /// How long a resolved origin address is reused.
    pub resolve_ttl_secs: u64,
    /// `Vary`: variants of one URL stored beside the first, per core.
    pub vary_variants_max: usize,
    /// TTL of the pointer to this proxy while it fetches an object (§3.2).
    pub fetching_pointer_ttl_secs: u32,
    /// TTL of the pointer to this proxy once it holds the object (§3.2).
    pub complete_pointer_ttl_secs: u32,
    /// The access log's path, or "off".
    pub access_log: String,
    /// The recursive resolvers origin names are asked of, "IP:PORT" or
    /// "IP" (port 53), at most three; empty: /etc/resolv.conf's.
    pub resolvers: Vec<String>,
    /// Longest a client may take to send a whole request head, from its
    /// first byte (a new connection: from the accept); one deadline, not
    /// one per read (issue #23).
    pub client_head_timeout_ms: u64,
    /// Longest a client may take to send a whole request body.
    pub client_body_timeout_ms: u64,
    /// Longest a write to a client may make no progress (a client that
    /// stops reading is closed; a slow one that reads is not).
    pub client_send_timeout_ms: u64,
    /// Request fields forwarded to origins beyond coral's allowlist
    /// (`coral::proxy::keyed`), lower case: each lets any client choose
    /// its value for what everyone receives, unless the origin's `Vary`
    /// names it (SECURITY.md, "Keyed upstream requests").
    pub forward_request_fields: Vec<String>,
    /// Audits of verified peer copies (issue 22 item 5 b): per million
    /// copies received from peers, how many are fetched again from the
    /// origin and compared (each one origin request and its bytes). 0
    /// (the default): none.
    pub audit_per_million: u32,
}

impl Default for ProxySection {
    fn default() -> Self {
        let fetch = coral::proxy::fetch::FetchConfig::default();
        ProxySection {
            cache_dir: None,
            cache_size: "1GiB".into(),
            cache_objects_max: None,
            allow_private_origins: false,
            resolve: Vec::new(),
            connect_timeout_ms: 5000,
            first_byte_timeout_ms: 15000,
            idle_timeout_ms: 15000,
            client_idle_timeout_ms: 30000,
            // The largest object the disk cache stores.
            object_bytes_max: crate::limits::CACHE.object_bytes_max,
            connections_max: 10000,
            negative_ttl_secs: 60,
            heuristic: "coral".into(),
            heuristic_default_secs: coral::proxy::policy::HEURISTIC_DEFAULT_SECS,
            heuristic_last_modified_percent: coral::proxy::policy::HEURISTIC_LAST_MODIFIED_PERCENT,
            heuristic_max_secs: coral::proxy::policy::HEURISTIC_MAX_SECS,
            resolve_ttl_secs: 60,
            vary_variants_max: coral::proxy::vary::VARY_VARIANTS_MAX,
            fetching_pointer_ttl_secs: fetch.fetching_pointer_ttl_secs,
            complete_pointer_ttl_secs: fetch.complete_pointer_ttl_secs,
            access_log: "off".into(),
            resolvers: Vec::new(),
            client_head_timeout_ms: 5000,
            client_body_timeout_ms: 10000,
            client_send_timeout_ms: 20000,
            forward_request_fields: Vec::new(),
            audit_per_million: 0,
        }
    }
}

impl ProxySection {
    /// The settings the proxy runs with: sizes, static answers and the
    /// access log parsed.
    pub fn proxy_config(&self) -> Result<ProxyConfig, String> {
        Ok(ProxyConfig {
            cache_dir: self.cache_dir.clone(),
            cache_size_bytes: parse_size(&self.cache_size)
                .map_err(|e| format!("[proxy] cache_size: {e}"))?,
            cache_objects_max: self.cache_objects_max,
            allow_private_origins: self.allow_private_origins,
            resolve: self
                .resolve
                .iter()
                .map(|s| parse_resolve(s))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("[proxy] {e}"))?,
            connect_timeout_ms: self.connect_timeout_ms,
            first_byte_timeout_ms: self.first_byte_timeout_ms,
            idle_timeout_ms: self.idle_timeout_ms,
            client_idle_timeout_ms: self.client_idle_timeout_ms,
            object_bytes_max: self.object_bytes_max,
            connections_max: self.connections_max,
            negative_ttl_secs: self.negative_ttl_secs,
            heuristic: parse_heuristic(self)?,
            resolve_ttl_secs: self.resolve_ttl_secs,
            vary_variants_max: self.vary_variants_max,
            fetching_pointer_ttl_secs: self.fetching_pointer_ttl_secs,
            complete_pointer_ttl_secs: self.complete_pointer_ttl_secs,
            access_log: parse_access_log(&self.access_log).map_err(|e| format!("[proxy] {e}"))?,
            resolvers: parse_resolvers(&self.resolvers).map_err(|e| format!("[proxy] {e}"))?,
            client_head_timeout_ms: self.client_head_timeout_ms,
            client_body_timeout_ms: self.client_body_timeout_ms,
            client_send_timeout_ms: self.client_send_timeout_ms,
            forward_request_fields: parse_forward_request_fields(&self.forward_request_fields)
                .map_err(|e| format!("[proxy] {e}"))?,
            audit_per_million: if self.audit_per_million <= 1_000_000 {
                self.audit_per_million
            } else {
                return Err("[proxy] audit_per_million: at most 1000000".into());
            },
        })
    }
}

/// CoralProxy's resolved settings (from [`ProxySection`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    /// Directory of the disk cache; `None`: `coral-cache/<DSHT IP>-<port>`
    /// ([`NodeConfig::cache_dir`]), so that nodes sharing a working
    /// directory never share a cache.
    pub cache_dir: Option<PathBuf>,
    /// Size of the disk cache in bytes.
    pub cache_size_bytes: u64,
    /// The most objects the disk cache holds (`None`: derived from the
    /// size, `cache::plan`).
    pub cache_objects_max: Option<u64>,
    /// Whether origins may be on non-global addresses.
    pub allow_private_origins: bool,
    /// Static answers for origin names (lower case, no trailing dot).
    pub resolve: Vec<(String, IpAddr)>,
    /// Origin/peer connect timeout.
    pub connect_timeout_ms: u64,
    /// Origin/peer time from the request to the response head.
    pub first_byte_timeout_ms: u64,
    /// Origin/peer silence mid-response.
    pub idle_timeout_ms: u64,
    /// Client keep-alive idle time (and time to send a request head).
    pub client_idle_timeout_ms: u64,
    /// Largest object fetched, enforced while streaming.
    pub object_bytes_max: u64,
    /// Client connections per core.
    pub connections_max: usize,
    /// Longest an error answer is cached.
    pub negative_ttl_secs: u64,
    /// Heuristic freshness of responses without explicit freshness.
    pub heuristic: coral::proxy::policy::Heuristic,
    /// How long a resolved origin address is reused.
    pub resolve_ttl_secs: u64,
    /// `Vary`: variants of one URL stored beside the first response, per
    /// core (0: only the first is stored, others pass through).
    pub vary_variants_max: usize,
    /// TTL of the DSHT pointer to this proxy while it fetches an object
    /// (§3.2: 20 s), renewed at 3/4 of it until the fetch ends.
    pub fetching_pointer_ttl_secs: u32,
    /// TTL of the DSHT pointer to this proxy once it holds the object
    /// (§3.2: 1 h), renewed at 3/4 of it while the object stays cached.
    pub complete_pointer_ttl_secs: u32,
    /// Where the access log is appended (`None`: no access log).
    pub access_log: Option<PathBuf>,
    /// The recursive resolvers origin names are asked of (empty: the
    /// host's, from /etc/resolv.conf).
    pub resolvers: Vec<SocketAddr>,
    /// Longest a client may take to send a whole request head.
    pub client_head_timeout_ms: u64,
    /// Longest a client may take to send a whole request body.
    pub client_body_timeout_ms: u64,
    /// Longest a write to a client may make no progress.
    pub client_send_timeout_ms: u64,
    /// Request fields forwarded to origins beyond the allowlist, lower
    /// case (at most `limits::RELAY.forward_request_fields_max`).
    pub forward_request_fields: Vec<String>,
    /// Verified peer copies audited against the origin, per million.
    pub audit_per_million: u32,
}

/// `resolvers` values: "IP:PORT" or a bare IP (port 53), at most
/// `coral::limits::RESOLVE.servers_max`.
pub fn parse_resolvers(list: &[String]) -> Result<Vec<SocketAddr>, String> {
    if list.len() > coral::limits::RESOLVE.servers_max {
        return Err(format!(
            "resolvers: at most {} servers",
            coral::limits::RESOLVE.servers_max
        ));
    }
    list.iter()
        .map(|s| {
            s.parse::<SocketAddr>()
                .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                .map_err(|_| format!("resolvers: {s:?} is not IP:PORT or an IP address"))
        })
        .collect()
}

/// The `heuristic*` settings of `[proxy]`: the mode "coral" or "rfc", and a
/// percent of at most 100.
pub fn parse_heuristic(p: &ProxySection) -> Result<coral::proxy::policy::Heuristic, String> {
    use coral::proxy::policy::{Heuristic, HeuristicMode};
    let mode = match p.heuristic.as_str() {
        "coral" => HeuristicMode::Coral,
        "rfc" => HeuristicMode::Rfc,
        other => return Err(format!("heuristic: \"coral\" or \"rfc\", not {other:?}")),
    };
    if p.heuristic_last_modified_percent > 100 {
        return Err("heuristic_last_modified_percent: at most 100".into());
    }
    Ok(Heuristic {
        mode,
        default_secs: p.heuristic_default_secs,
        last_modified_percent: p.heuristic_last_modified_percent,
        max_secs: p.heuristic_max_secs,
    })
}

/// `forward_request_fields`: field names (tokens), lower-cased, at most
/// `limits::RELAY.forward_request_fields_max`; fields coral writes itself
/// (`Host`, `Via`, framing, hop-by-hop, conditionals) cannot be listed.
pub fn parse_forward_request_fields(names: &[String]) -> Result<Vec<String>, String> {
    let max = crate::limits::RELAY.forward_request_fields_max;
    if names.len() > max {
        return Err(format!("forward_request_fields: at most {max} fields"));
    }
    names
        .iter()
        .map(|n| {
            let lower = n.to_ascii_lowercase();
            if lower.is_empty() || !lower.bytes().all(coral::proxy::http::is_tchar) {
                return Err(format!("forward_request_fields: {n:?} is not a field name"));
            }
            if !coral::proxy::keyed::may_be_listed(&lower) {
                return Err(format!(
                    "forward_request_fields: coral writes {n:?} itself; it cannot be forwarded"
                ));
            }
            Ok(lower)
        })
        .collect()
}

/// An `access_log` value: "off", or the path of the file.
pub fn parse_access_log(s: &str) -> Result<Option<PathBuf>, String> {
    match s {
        "off" => Ok(None),
        "" => Err("access_log: \"off\" or the path of a file".into()),
        p => Ok(Some(p.into())),
    }
}

/// Parses a size: bytes, or a number with K/M/G/T (powers of 1000) or
/// KiB/MiB/GiB/TiB (powers of 1024), e.g. `1GiB`, `500MB`, `65536`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("size {s:?}: expected a number with an optional unit (KiB, MiB, GiB, KB, MB, GB)")
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        u => return Err(format!("size {s:?}: unknown unit {u:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Parses a static answer `NAME=IP` (as curl's `--resolve`, without the port).
pub fn parse_resolve(s: &str) -> Result<(String, IpAddr), String> {
    let (name, ip) = s
        .split_once('=')
        .ok_or_else(|| format!("resolve {s:?}: expected NAME=IP"))?;
    let name = dns_name("resolve name", name)?;
    let ip = ip
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| format!("resolve {s:?}: {ip:?} is not an IP address"))?;
    Ok((name, ip))
}

/// The resolved configuration of a node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// DSHT UDP address.
    pub dsht: SocketAddr,
    /// The DSHT address peers see, when it differs from `dsht` (a wildcard
    /// bind, NAT).
    pub public_addr: Option<SocketAddr>,
    /// The log filter (tracing's EnvFilter syntax).
    pub log: String,
    /// Admin HTTP address.
    pub admin: SocketAddr,
    /// Bootstrap nodes.
    pub bootstrap: Vec<SocketAddr>,
    /// Cores to use (0 = all allowed).
    pub cores: usize,
    /// The zone dnssrv serves, lower case, no trailing dot (§3.1).
    pub zone: String,
    /// The alias zone, lower case, no trailing dot (a DNAME to
    /// `http.L2.L1.L0.<zone>`).
    pub alias: Option<String>,
    /// dnssrv's UDP and TCP address as set (`dns`, `--dns`); `None`: it
    /// follows the DSHT address ([`NodeConfig::dns_addr`]).
    pub dns: Option<SocketAddr>,
    /// dnssrv's limits.
    pub dnssrv: DnsSection,
    /// The DSHT's parameters.
    pub dht: coral::Config,
    /// CoralProxy's HTTP address; `None`: the DSHT address's IP, port 8090
    /// ([`NodeConfig::http_addr`]). dnssrv advertises the HTTP service when
    /// it is set.
    pub http: Option<SocketAddr>,
    /// CoralProxy and its cache.
    pub proxy: ProxyConfig,
    /// The state directory (`state_dir`); see [`NodeConfig::state_dir`].
    pub state_dir: Option<PathBuf>,
    /// The network this node takes part in.
    pub network: Network,
    /// This node's certificate file.
    pub network_certificate: Option<PathBuf>,
    /// Labs and tests only: the network's secret key file (self-certifying).
    pub network_key: Option<PathBuf>,
}

/// Which network a node takes part in (`network`; SECURITY.md, "Threat
/// model").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// Its own: it admits itself only (no `network` set).
    Own,
    /// Any node: no admission (`network = "open"`).
    Open,
    /// The nodes certified by these admission keys.
    Keys(Vec<coral::identity::PublicKey>),
}

impl Network {
    /// Parses `network`'s value: `"open"`, or admission public keys (64 hex
    /// digits each), comma-separated.
    pub fn parse(s: &str) -> Result<Network, String> {
        if s.trim() == "open" {
            return Ok(Network::Open);
        }
        let keys = s
            .split(',')
            .map(|k| {
                coral::identity::PublicKey::from_hex(k).ok_or_else(|| {
                    format!(
                        "network = {s:?}: \"open\" or admission public keys (64 hex digits, \
                         comma-separated, as `coral network init` prints)"
                    )
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Network::Keys(keys))
    }
}

impl NodeConfig {
    /// The configuration in the file at `path`, or the defaults with no
    /// file; errors name the file, the line and the key as written.
    pub fn load(file: Option<&Path>) -> Result<NodeConfig, String> {
        NodeConfig::load_with_file(file).map(|(_, c)| c)
    }

    /// [`NodeConfig::load`], with the file's values as written (the
    /// defaults where it says nothing): what a SIGHUP compares key by key.
    pub fn load_with_file(file: Option<&Path>) -> Result<(FileConfig, NodeConfig), String> {
        let Some(path) = file else {
            let f = FileConfig::default();
            let c = NodeConfig::from_file(&f)?;
            return Ok((f, c));
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let f: FileConfig = toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?;
        let c = NodeConfig::from_file(&f).map_err(|e| locate(path, &text, &e))?;
        Ok((f, c))
    }

    /// Resolves and checks a file's values (everything but what depends on
    /// how the node is started, see [`NodeConfig::validate`]).
    pub fn from_file(f: &FileConfig) -> Result<NodeConfig, String> {
        crate::logging::check_filter(&f.log).map_err(|e| format!("log = {:?}: {e}", f.log))?;
        let mut dht = coral::Config {
            id_includes_port: f.id_includes_port,
            ..coral::Config::default()
        };
        f.dht.apply(&mut dht);
        f.clusters.apply(&mut dht);
        f.limits.apply(&mut dht);
        let cfg = NodeConfig {
            dsht: f.dsht,
            public_addr: f.public_addr,
            log: f.log.clone(),
            admin: f.admin,
            bootstrap: f.bootstrap.clone(),
            cores: f.cores,
            zone: dns_name("zone", &f.zone)?,
            alias: f
                .alias
                .as_deref()
                .map(|a| dns_name("alias", a))
                .transpose()?,
            dns: f.dns,
            dnssrv: f.dnssrv.clone(),
            dht,
            http: f.http,
            proxy: f.proxy.proxy_config()?,
            state_dir: f.state_dir.clone(),
            network: match &f.network {
                None => Network::Own,
                Some(s) => Network::parse(s)?,
            },
            network_certificate: f.network_certificate.clone(),
            network_key: f.network_key.clone(),
        };
        cfg.validate_values()?;
        Ok(cfg)
    }

    /// The address the node id derives from: what peers see.
    pub fn id_addr(&self) -> SocketAddr {
        self.public_addr.unwrap_or(self.dsht)
    }

    /// CoralProxy's HTTP address: `http`, or the DSHT address's IP, port 8090.
    pub fn http_addr(&self) -> SocketAddr {
        self.http
            .unwrap_or_else(|| SocketAddr::new(self.dsht.ip(), DEFAULT_HTTP_PORT))
    }

    /// Whether the node faces other hosts: the address peers see (its
    /// `public_addr`, else its DSHT address) is not loopback.
    pub fn is_public(&self) -> bool {
        !self.id_addr().ip().is_loopback()
    }

    /// The address peers and clients reach the proxy at (the pointer the
    /// node puts in the DSHT, §3.2): `http_addr`, with a wildcard IP
    /// replaced by `public_addr`'s.
    pub fn http_public_addr(&self) -> SocketAddr {
        let h = self.http_addr();
        if h.ip().is_unspecified() {
            SocketAddr::new(self.id_addr().ip(), h.port())
        } else {
            h
        }
    }

    /// dnssrv's UDP and TCP address: `dns`, or the DSHT address's IP, port
    /// 7053 on loopback and 53 on a public node (its zone's NS records name
    /// this host, and resolvers ask on port 53).
    pub fn dns_addr(&self) -> SocketAddr {
        self.dns.unwrap_or_else(|| {
            let port = if self.is_public() {
                DEFAULT_DNS_PORT_PUBLIC
            } else {
                DEFAULT_DNS_PORT_LOOPBACK
            };
            SocketAddr::new(self.dsht.ip(), port)
        })
    }

    /// Every address the node listens on: what it is, its flag and file
    /// key, the protocol, the address. The start-up check
    /// (`lifecycle::check_addresses_free`) probes each.
    pub fn listeners(&self) -> [Listener; 5] {
        let dns = self.dns_addr();
        [
            Listener::new("DSHT", "dsht", Proto::Udp, self.dsht),
            Listener::new("admin", "admin", Proto::Tcp, self.admin),
            Listener::new("HTTP", "http", Proto::Tcp, self.http_addr()),
            Listener::new("DNS", "dns", Proto::Udp, dns),
            Listener::new("DNS", "dns", Proto::Tcp, dns),
        ]
    }

    /// The disk cache's directory: `proxy.cache_dir`, or
    /// `coral-cache/<DSHT IP>-<port>` under the working directory.
    pub fn cache_dir(&self) -> std::path::PathBuf {
        self.proxy.cache_dir.clone().unwrap_or_else(|| {
            std::path::Path::new("coral-cache").join(format!(
                "{}-{}",
                self.dsht.ip(),
                self.dsht.port()
            ))
        })
    }

    /// The state directory, where the node key lives: `state_dir`, or
    /// `coral-state/<DSHT IP>-<port>` under the working directory (as
    /// `cache_dir`'s default; a packaged node sets `/var/lib/coral`).
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(|| {
            Path::new("coral-state").join(format!("{}-{}", self.dsht.ip(), self.dsht.port()))
        })
    }

    /// Checks everything, including what depends on how the node is
    /// started (flags applied): a wildcard DSHT address needs `public_addr`.
    pub fn validate(&self) -> Result<(), String> {
        if self.dsht.ip().is_unspecified() && self.public_addr.is_none() {
            return Err(format!(
                "dsht = \"{}\" is a wildcard address: set public_addr (or --public-addr) to the \
                 address peers reach this node at; the node id derives from it, and every host \
                 binding a wildcard would otherwise have the same id",
                self.dsht
            ));
        }
        if let Some(p) = self.public_addr {
            if p.ip().is_unspecified() || p.port() == 0 {
                return Err(format!(
                    "public_addr = \"{p}\": must be a specific address and port peers can reach"
                ));
            }
        }
        self.validate_addresses()?;
        self.validate_values()
    }

    /// Checks the listeners together: no two on one address and protocol,
    /// and a public node's dnssrv and proxy where other hosts reach them.
    fn validate_addresses(&self) -> Result<(), String> {
        if self.is_public() {
            let public = self.id_addr();
            let dns = self.dns_addr();
            if dns.ip().is_loopback() {
                return Err(format!(
                    "dns = \"{dns}\" is loopback, but this node is public (peers see it at \
                     {public}): its zone's NS records name {}, where resolvers ask on port 53; \
                     set dns (--dns) to \"0.0.0.0:53\" or \"{}:53\", or leave it unset to follow \
                     the DSHT address",
                    public.ip(),
                    public.ip()
                ));
            }
            let http = self.http_addr();
            if http.ip().is_loopback() {
                return Err(format!(
                    "http = \"{http}\" is loopback, but this node is public (peers see it at \
                     {public}): its DSHT pointers and dnssrv's answers send clients and peers to \
                     {}; set http (--http) to \"0.0.0.0:{}\", or leave it unset to follow the \
                     DSHT address",
                    self.http_public_addr(),
                    http.port()
                ));
            }
        }
        // A clash names the later listener first (dns before dsht): the one
        // most often set by hand.
        let all = self.listeners();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                if a.proto == b.proto && a.key != b.key && overlaps(a.addr, b.addr) {
                    return Err(format!(
                        "{} = \"{}\" and {} = \"{}\" are one {} address: give each its own \
                         ({} and {})",
                        b.key,
                        b.addr,
                        a.key,
                        a.addr,
                        a.proto.name(),
                        b.flag(),
                        a.flag()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks the values, one by one and together (everything but what
    /// depends on how the node is started, see `validate`).
    fn validate_values(&self) -> Result<(), String> {
        self.dht.validate().map_err(|e| file_words(&e.0))?;
        if !self.admin.ip().is_loopback() {
            return Err(format!(
                "admin = \"{}\": must be loopback: it has no authentication",
                self.admin
            ));
        }
        let p = &self.proxy;
        for (name, v) in [
            ("connect_timeout_ms", p.connect_timeout_ms),
            ("first_byte_timeout_ms", p.first_byte_timeout_ms),
            ("idle_timeout_ms", p.idle_timeout_ms),
            ("client_idle_timeout_ms", p.client_idle_timeout_ms),
            ("object_bytes_max", p.object_bytes_max),
            ("connections_max", p.connections_max as u64),
            ("client_head_timeout_ms", p.client_head_timeout_ms),
            ("client_body_timeout_ms", p.client_body_timeout_ms),
            ("client_send_timeout_ms", p.client_send_timeout_ms),
        ] {
            if v == 0 {
                return Err(format!("[proxy] {name} must be positive"));
            }
        }
        for (name, t) in [
            ("fetching_pointer_ttl_secs", p.fetching_pointer_ttl_secs),
            ("complete_pointer_ttl_secs", p.complete_pointer_ttl_secs),
        ] {
            if t < POINTER_TTL_SECS_MIN {
                return Err(format!(
                    "[proxy] {name} = {t}: at least {POINTER_TTL_SECS_MIN} (pointers are renewed at \
                     3/4 of their TTL, looked at once a second)"
                ));
            }
            if t > self.dht.ttl_max_secs {
                return Err(format!(
                    "[proxy] {name} = {t}: at most [limits] ttl_max_secs ({}), the longest TTL the \
                     DSHT keeps",
                    self.dht.ttl_max_secs
                ));
            }
        }
        if p.fetching_pointer_ttl_secs > p.complete_pointer_ttl_secs {
            return Err(format!(
                "[proxy] fetching_pointer_ttl_secs = {} exceeds complete_pointer_ttl_secs = {}",
                p.fetching_pointer_ttl_secs, p.complete_pointer_ttl_secs
            ));
        }
        if p.cache_size_bytes < CACHE_SIZE_BYTES_MIN {
            return Err("[proxy] cache_size: at least 1MiB".into());
        }
        if self.cores > CORES_MAX {
            return Err(format!("cores = {}: at most {CORES_MAX}", self.cores));
        }
        dns_name("zone", &self.zone)?;
        self.dnssrv.validate()?;
        if let Some(a) = &self.alias {
            dns_name("alias", a)?;
            if *a == self.zone {
                return Err(format!("alias {a} must differ from the zone"));
            }
        }
        Ok(())
    }
}

/// A socket's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// UDP.
    Udp,
    /// TCP.
    Tcp,
}

impl Proto {
    /// "UDP" or "TCP".
    pub fn name(self) -> &'static str {
        match self {
            Proto::Udp => "UDP",
            Proto::Tcp => "TCP",
        }
    }
}

/// One address the node listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    /// What listens there, as messages name it ("DSHT", "admin", "HTTP", "DNS").
    pub what: &'static str,
    /// Its key in the file; the flag is `--<key>`.
    pub key: &'static str,
    /// The protocol.
    pub proto: Proto,
    /// The address.
    pub addr: SocketAddr,
}

impl Listener {
    fn new(what: &'static str, key: &'static str, proto: Proto, addr: SocketAddr) -> Listener {
        Listener {
            what,
            key,
            proto,
            addr,
        }
    }

    /// Its flag, `--<key>`.
    pub fn flag(&self) -> String {
        format!("--{}", self.key)
    }
}

/// Whether two sockets of one protocol would share an address: one port,
/// and one IP or a wildcard of the same family.
pub fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && (a.ip() == b.ip()
            || (a.is_ipv4() == b.is_ipv4() && (a.ip().is_unspecified() || b.ip().is_unspecified())))
}

/// `coral check-config FILE`: loads `path` as `coral node --config` would and
/// returns a short summary, or the first error located in the file.
pub fn check_file(path: &Path) -> Result<String, String> {
    let cfg = NodeConfig::load(Some(path))?;
    if let Err(e) = cfg.validate() {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        return Err(locate(path, &text, &e));
    }
    let levels: Vec<String> = cfg
        .dht
        .level_thresholds_ms
        .iter()
        .map(|&t| {
            if t == u32::MAX {
                "∞".into()
            } else {
                format!("{t} ms")
            }
        })
        .collect();
    let cache_dir = cfg.cache_dir();
    let relative = if cache_dir.is_relative() {
        " (relative to the working directory)"
    } else {
        ""
    };
    let http = if cfg.http_public_addr() == cfg.http_addr() {
        cfg.http_addr().to_string()
    } else {
        format!(
            "{} (peers reach it at {})",
            cfg.http_addr(),
            cfg.http_public_addr()
        )
    };
    Ok(format!(
        "{}: ok: dsht {} (id from {}), admin {}, http {http}, dns {} (UDP and TCP), cache_dir {}{relative} \
         of {} bytes, {} bootstrap node(s), cores {}, zone {}, levels {}, l = {}, β = {}/min",
        path.display(),
        cfg.dsht,
        cfg.id_addr(),
        cfg.admin,
        cfg.dns_addr(),
        cache_dir.display(),
        cfg.proxy.cache_size_bytes,
        cfg.bootstrap.len(),
        if cfg.cores == 0 {
            "all".to_string()
        } else {
            cfg.cores.to_string()
        },
        cfg.zone,
        levels.join(" / "),
        cfg.dht.values_per_key_max,
        cfg.dht.beta_per_min,
    ))
}

/// Every key of `f` as the file writes it (`key`, `[section] key`) with its
/// value in TOML, the defaults included; an unset optional key is absent.
pub fn file_keys(f: &FileConfig) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(toml::Value::Table(top)) = toml::Value::try_from(f) else {
        return out;
    };
    for (k, v) in top {
        match v {
            toml::Value::Table(section) => {
                for (sk, sv) in section {
                    out.insert(format!("[{k}] {sk}"), sv.to_string());
                }
            }
            v => {
                out.insert(k, v.to_string());
            }
        }
    }
    out
}

/// Rewrites the core's field names in `msg` as the file spells them.
fn file_words(msg: &str) -> String {
    const NAMES: &[(&str, &str)] = &[
        ("cluster_join_percent", "[clusters] join_percent"),
        ("cluster_leave_percent", "[clusters] leave_percent"),
        ("cluster_eval_secs", "[clusters] eval_secs"),
        ("cluster_join_eval_secs", "[clusters] join_eval_secs"),
        ("operation_timeout_ms", "the operation timeout (built in)"),
        ("level thresholds", "[dht] level_thresholds_ms"),
        ("level_thresholds_ms", "[dht] level_thresholds_ms"),
    ];
    let mut out = msg.to_string();
    for (internal, written) in NAMES {
        out = out.replace(internal, written);
    }
    out
}

/// A key as the file writes it, and the line it is on.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyLine {
    /// `key` at the top level, `[section] key` in a table.
    pub key: String,
    /// The key's bare name.
    pub name: String,
    /// 1-based.
    pub line: usize,
}

/// The keys of a TOML file and their lines (tables' headers set the section;
/// enough for the flat files coral reads, whatever sections they have).
pub fn key_lines(text: &str) -> Vec<KeyLine> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.starts_with('[') {
            let head = l.split('#').next().unwrap_or("").trim();
            section = head
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            continue;
        }
        let Some((k, _)) = l.split_once('=') else {
            continue;
        };
        let name = k.trim().trim_matches('"').to_string();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        {
            continue;
        }
        let key = if section.is_empty() {
            name.clone()
        } else {
            format!("[{section}] {name}")
        };
        out.push(KeyLine {
            key,
            name,
            line: i + 1,
        });
    }
    out
}

/// Where `word` first occurs in `msg` as a whole word.
fn word_at(msg: &str, word: &str) -> Option<usize> {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut from = 0;
    while let Some(p) = msg[from..].find(word) {
        let at = from + p;
        let before = msg[..at].chars().next_back();
        let after = msg[at + word.len()..].chars().next();
        if !ident(before) && !ident(after) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Names the file, the line and the key as written for an error `msg`
/// about the file at `path`: the key the message mentions first.
pub fn locate(path: &Path, text: &str, msg: &str) -> String {
    let keys = key_lines(text);
    let best = keys
        .iter()
        .filter_map(|k| {
            let qualified = msg.find(&k.key).map(|p| (p, 0));
            let bare = word_at(msg, &k.name).map(|p| (p, 1));
            qualified.or(bare).map(|(p, rank)| ((p, rank), k))
        })
        .min_by_key(|(pos, _)| *pos)
        .map(|(_, k)| k);
    match best {
        Some(k) if msg.starts_with(&k.key) => format!("{}:{}: {msg}", path.display(), k.line),
        Some(k) => format!("{}:{}: {}: {msg}", path.display(), k.line, k.key),
        None => format!("{}: {msg}", path.display()),
    }
}

/// A TOML or type error, with the file, the line and the key as written.
fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    let Some(span) = e.span() else {
        return format!("{}: {msg}", path.display());
    };
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    match key_lines(text).into_iter().find(|k| k.line == line) {
        Some(k) => format!("{}:{line}: {}: {msg}", path.display(), k.key),
        None => format!("{}:{line}: {msg}", path.display()),
    }
}

/// Checks that `name` is a domain name (RFC 1035 §2.3.4: labels of 1–63
/// letters, digits and hyphens, 253 characters in all) and returns it in
/// lower case without a trailing dot.
pub fn dns_name(what: &str, name: &str) -> Result<String, String> {
    let n = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if n.is_empty() || n.len() > 253 || !n.split('.').all(label_ok) {
        return Err(format!(
            "{what} {name:?} is not a domain name (labels of 1-63 letters, digits or hyphens)"
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
