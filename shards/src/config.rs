//! The node's configuration: a TOML file, overridden by flags, on top of an
//! embedded default that runs a standalone node on loopback.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use coral::dns::DnsConfig;
use serde::Deserialize;

/// The embedded default: what `coral node` runs with no file and no flags.
pub const DEFAULT_CONFIG: &str = r#"
# A standalone node on loopback, ready to serve.
dsht = "127.0.0.1:7000"    # UDP address of the DSHT RPCs
# public_addr = "192.0.2.1:7000"  # the DSHT address peers see (required when dsht is a wildcard)
admin = "127.0.0.1:7080"   # loopback HTTP endpoint for the client commands
bootstrap = []             # other nodes' DSHT addresses
cores = 0                  # 0: every core in the process's CPU mask
zone = "coralcdn.test"     # the zone dnssrv serves: proxies are *.http.L2.L1.L0.<zone> (§3.1)
alias = "coral.test"       # the short alias (a DNAME to http.L2.L1.L0.<zone>): www.x.com.<alias>
log = "info"               # log filter (tracing EnvFilter syntax; RUST_LOG overrides; SIGHUP reloads)
# http = "127.0.0.1:8090"  # CoralProxy's HTTP address (one SO_REUSEPORT listener per core, §2.2);
                           # default: the DSHT address's IP, port 8090 (the pointers it stores name it)
dns = "127.0.0.1:7053"     # dnssrv's UDP and TCP address (53 in production; SO_REUSEPORT)

[dht]
level_thresholds_ms = [0, 60, 20]  # level 0 is unbounded (written 0 here)
b = 1
alpha = 3
values_per_key_max = 4
beta_per_min = 12
rpc_timeout_ms = 2000

[clusters]                 # self-organizing clusters (NSDI 2004 §4.4)
eval_secs = 300            # reconsider each level's cluster this often
join_percent = 80          # acceptable: this share of members within the threshold
leave_percent = 50         # leave when this share of accesses misses it

[proxy]                    # CoralProxy (§2.2, §3.2) and its disk cache
# cache_dir = "coral-cache" # default: coral-cache/<DSHT IP>-<port> under the working directory
cache_size = "1GiB"
allow_private_origins = false   # true: origins on loopback/private addresses (labs, tests)
resolve = []               # static answers for origin names, "NAME=IP" (like curl --resolve)
connect_timeout_ms = 5000
first_byte_timeout_ms = 15000
idle_timeout_ms = 15000    # origin or peer silent this long mid-response: the fetch fails
client_idle_timeout_ms = 30000
object_bytes_max = 50000000     # 50 MB, enforced while streaming (origins omit Content-Length)
connections_max = 10000    # client connections per core
negative_ttl_secs = 60     # longest an error answer (404, 410 ...) is cached
resolve_ttl_secs = 60      # how long a resolved origin address is reused
vary_variants_max = 8      # Vary: variants of one URL stored beside the first, per core
fetching_pointer_ttl_secs = 20     # §3.2: TTL of the DSHT pointer to this proxy while it fetches
complete_pointer_ttl_secs = 3600   # §3.2: ... once it holds the object (renewed at 3/4 of the TTL)
access_log = "off"         # "off", or a file: one Combined Log Format line per response, plus
                           # cache= and rt= (SIGUSR1 reopens it; "/dev/stdout" for a terminal)
"#;

/// Shortest pointer TTL the proxy accepts (`[proxy] *_pointer_ttl_secs`).
pub const POINTER_TTL_SECS_MIN: u32 = 2;

/// CoralProxy's port when `http` is not set (the paper's 8090).
pub const DEFAULT_HTTP_PORT: u16 = 8090;

/// The file's shape.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// DSHT UDP address.
    pub dsht: Option<SocketAddr>,
    /// The DSHT address peers see (the node id derives from it); required
    /// when `dsht` is a wildcard.
    pub public_addr: Option<SocketAddr>,
    /// The log filter (tracing's EnvFilter syntax).
    pub log: Option<String>,
    /// Admin HTTP address (loopback).
    pub admin: Option<SocketAddr>,
    /// Bootstrap nodes.
    #[serde(default)]
    pub bootstrap: Vec<SocketAddr>,
    /// Cores to use (0 = all allowed).
    pub cores: Option<usize>,
    /// Whether several nodes share this IP (the node id then hashes the port too).
    pub id_includes_port: Option<bool>,
    /// The zone dnssrv is authoritative for (§3.1; the paper's `nyucd.net`).
    pub zone: Option<String>,
    /// The short alias zone of Coralized URLs (the paper's `nyud.net`).
    pub alias: Option<String>,
    /// dnssrv's UDP and TCP address.
    pub dns: Option<SocketAddr>,
    /// The HTTP proxy's address: the node advertises the HTTP service.
    pub http: Option<SocketAddr>,
    /// dnssrv's limits.
    #[serde(default)]
    pub dnssrv: DnsSection,
    /// DSHT parameters.
    #[serde(default)]
    pub dht: DhtSection,
    /// Clustering parameters.
    #[serde(default)]
    pub clusters: ClustersSection,
    /// CoralProxy and its cache.
    #[serde(default)]
    pub proxy: ProxySection,
    /// Limits for the open Internet (SECURITY.md).
    #[serde(default)]
    pub limits: LimitsSection,
}

/// `[limits]`: what one source may cost the node (SECURITY.md); each is
/// the `coral::Config` field of the same name, with its unit in the name.
#[derive(Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub ttl_max_secs: Option<u32>,
    pub keys_per_level_max: Option<usize>,
    pub store_bytes_per_level_max: Option<usize>,
    pub values_per_source_per_key_max: Option<usize>,
    pub values_per_prefix_per_key_max: Option<usize>,
    pub values_per_source_max: Option<usize>,
    pub values_per_prefix_max: Option<usize>,
    pub bucket_contacts_per_ip_max: Option<usize>,
    pub bucket_contacts_per_prefix_max: Option<usize>,
    pub reply_amplification_max: Option<u32>,
    pub rate_requests_per_sec: Option<u32>,
    pub rate_verified_requests_per_sec: Option<u32>,
    pub rate_window_secs: Option<u32>,
    pub rate_block_secs: Option<u32>,
    pub rate_sources_max: Option<usize>,
}

/// `[proxy]`: CoralProxy and its disk cache (§2.2, §3.2).
#[derive(Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ProxySection {
    /// Directory of the disk cache.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Size of the disk cache, e.g. "1GiB".
    pub cache_size: Option<String>,
    /// Whether origins may be on loopback, private, link-local ... addresses.
    pub allow_private_origins: Option<bool>,
    /// Static answers for origin names, "NAME=IP".
    pub resolve: Option<Vec<String>>,
    /// Origin/peer connect timeout.
    pub connect_timeout_ms: Option<u64>,
    /// Origin/peer time to the response head.
    pub first_byte_timeout_ms: Option<u64>,
    /// Origin/peer silence mid-response.
    pub idle_timeout_ms: Option<u64>,
    /// Client keep-alive idle time.
    pub client_idle_timeout_ms: Option<u64>,
    /// Largest object fetched.
    pub object_bytes_max: Option<u64>,
    /// Client connections per core.
    pub connections_max: Option<usize>,
    /// Longest an error answer is cached.
    pub negative_ttl_secs: Option<u64>,
    /// How long a resolved origin address is reused.
    pub resolve_ttl_secs: Option<u64>,
    /// `Vary`: variants of one URL stored beside the first, per core.
    pub vary_variants_max: Option<usize>,
    /// TTL of the pointer to this proxy while it fetches an object (§3.2).
    pub fetching_pointer_ttl_secs: Option<u32>,
    /// TTL of the pointer to this proxy once it holds the object (§3.2).
    pub complete_pointer_ttl_secs: Option<u32>,
    /// The access log's path, or "off".
    pub access_log: Option<String>,
}

/// CoralProxy's resolved settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    /// Directory of the disk cache; `None`: `coral-cache/<DSHT IP>-<port>`
    /// ([`NodeConfig::cache_dir`]), so that nodes sharing a working
    /// directory never share a cache.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Size of the disk cache in bytes.
    pub cache_size_bytes: u64,
    /// Whether origins may be on non-global addresses.
    pub allow_private_origins: bool,
    /// Static answers for origin names (lower case, no trailing dot).
    pub resolve: Vec<(String, std::net::IpAddr)>,
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
    pub access_log: Option<std::path::PathBuf>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            cache_dir: None,
            cache_size_bytes: 1 << 30,
            allow_private_origins: false,
            resolve: Vec::new(),
            connect_timeout_ms: 5000,
            first_byte_timeout_ms: 15000,
            idle_timeout_ms: 15000,
            client_idle_timeout_ms: 30000,
            object_bytes_max: 50_000_000,
            connections_max: 10000,
            negative_ttl_secs: 60,
            resolve_ttl_secs: 60,
            vary_variants_max: coral::proxy::vary::VARY_VARIANTS_MAX,
            fetching_pointer_ttl_secs: coral::proxy::fetch::FetchConfig::default()
                .fetching_pointer_ttl_secs,
            complete_pointer_ttl_secs: coral::proxy::fetch::FetchConfig::default()
                .complete_pointer_ttl_secs,
            access_log: None,
        }
    }
}

/// An `access_log` value: "off", or the path of the file.
pub fn parse_access_log(s: &str) -> Result<Option<std::path::PathBuf>, String> {
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
pub fn parse_resolve(s: &str) -> Result<(String, std::net::IpAddr), String> {
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

/// `[clusters]`: self-organizing clusters (§4.4).
#[derive(Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ClustersSection {
    /// Whether this node organizes its own clusters (false: it stays in the
    /// singleton clusters it starts with).
    pub manage: Option<bool>,
    /// Re-evaluation period.
    pub eval_secs: Option<u64>,
    /// How long after joining the first decision comes.
    pub join_eval_secs: Option<u64>,
    /// Acceptability: share of members within the threshold.
    pub join_percent: Option<u32>,
    /// The leave rule: share of accesses that miss the threshold.
    pub leave_percent: Option<u32>,
}

/// `[dht]`: the DSHT's parameters (paper symbols).
#[derive(Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct DhtSection {
    /// RTT threshold per level in ms; level 0's is written 0 (unbounded).
    pub level_thresholds_ms: Option<Vec<u32>>,
    /// b.
    pub b: Option<u32>,
    /// α.
    pub alpha: Option<usize>,
    /// l.
    pub values_per_key_max: Option<usize>,
    /// β.
    pub beta_per_min: Option<u32>,
    /// RPC timeout.
    pub rpc_timeout_ms: Option<u64>,
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
    /// dnssrv's UDP and TCP address (none: no DNS server).
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
}

impl NodeConfig {
    /// The embedded default, overlaid with `file` (if any).
    pub fn load(file: Option<&Path>) -> Result<NodeConfig, String> {
        let base: FileConfig =
            toml::from_str(DEFAULT_CONFIG).map_err(|e| format!("embedded default: {e}"))?;
        let mut cfg = NodeConfig::from_file(&base)?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let f: FileConfig = toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?;
            cfg.overlay(&f).map_err(|e| locate(path, &text, &e))?;
        }
        Ok(cfg)
    }

    fn from_file(f: &FileConfig) -> Result<NodeConfig, String> {
        let mut cfg = NodeConfig {
            dsht: f.dsht.ok_or("dsht address missing")?,
            public_addr: None,
            log: "info".into(),
            admin: f.admin.ok_or("admin address missing")?,
            bootstrap: Vec::new(),
            cores: 0,
            zone: String::new(),
            alias: None,
            dns: None,
            http: None,
            dnssrv: DnsSection::default(),
            dht: coral::Config::default(),
            proxy: ProxyConfig::default(),
        };
        cfg.overlay(f)?;
        Ok(cfg)
    }

    fn overlay(&mut self, f: &FileConfig) -> Result<(), String> {
        if let Some(a) = f.dsht {
            self.dsht = a;
        }
        if let Some(a) = f.public_addr {
            self.public_addr = Some(a);
        }
        if let Some(l) = &f.log {
            crate::logging::check_filter(l).map_err(|e| format!("log = {l:?}: {e}"))?;
            self.log = l.clone();
        }
        if let Some(a) = f.admin {
            self.admin = a;
        }
        if !f.bootstrap.is_empty() {
            self.bootstrap = f.bootstrap.clone();
        }
        if let Some(c) = f.cores {
            self.cores = c;
        }
        if let Some(p) = f.id_includes_port {
            self.dht.id_includes_port = p;
        }
        if let Some(z) = &f.zone {
            self.zone = dns_name("zone", z)?;
        }
        if let Some(a) = &f.alias {
            self.alias = Some(dns_name("alias", a)?);
        }
        if let Some(a) = f.dns {
            self.dns = Some(a);
        }
        if let Some(a) = f.http {
            self.http = Some(a);
        }
        if f.dnssrv != DnsSection::default() {
            self.dnssrv = f.dnssrv.clone();
        }
        let d = &f.dht;
        if let Some(t) = &d.level_thresholds_ms {
            self.dht.level_thresholds_ms = t
                .iter()
                .enumerate()
                .map(|(i, &ms)| if i == 0 { u32::MAX } else { ms })
                .collect();
        }
        dht_key(&self.dht, "[dht] level_thresholds_ms")?;
        if let Some(b) = d.b {
            self.dht.b = b;
        }
        dht_key(&self.dht, "[dht] b")?;
        if let Some(a) = d.alpha {
            self.dht.alpha = a;
        }
        dht_key(&self.dht, "[dht] alpha")?;
        if let Some(l) = d.values_per_key_max {
            self.dht.values_per_key_max = l;
        }
        dht_key(&self.dht, "[dht] values_per_key_max")?;
        if let Some(beta) = d.beta_per_min {
            self.dht.beta_per_min = beta;
        }
        dht_key(&self.dht, "[dht] beta_per_min")?;
        if let Some(t) = d.rpc_timeout_ms {
            self.dht.rpc_timeout_ms = t;
        }
        dht_key(&self.dht, "[dht] rpc_timeout_ms")?;
        let lim = &f.limits;
        macro_rules! limit {
            ($($name:ident),*) => {$(
                if let Some(v) = lim.$name {
                    self.dht.$name = v;
                }
            )*};
        }
        limit!(
            ttl_max_secs,
            keys_per_level_max,
            store_bytes_per_level_max,
            values_per_source_per_key_max,
            values_per_prefix_per_key_max,
            values_per_source_max,
            values_per_prefix_max,
            bucket_contacts_per_ip_max,
            bucket_contacts_per_prefix_max,
            reply_amplification_max,
            rate_requests_per_sec,
            rate_verified_requests_per_sec,
            rate_window_secs,
            rate_block_secs,
            rate_sources_max
        );
        let c = &f.clusters;
        if let Some(m) = c.manage {
            self.dht.cluster_manage = m;
        }
        dht_key(&self.dht, "[clusters] manage")?;
        if let Some(s) = c.eval_secs {
            self.dht.cluster_eval_secs = s;
        }
        dht_key(&self.dht, "[clusters] eval_secs")?;
        if let Some(s) = c.join_eval_secs {
            self.dht.cluster_join_eval_secs = s;
        }
        dht_key(&self.dht, "[clusters] join_eval_secs")?;
        if let Some(p) = c.join_percent {
            self.dht.cluster_join_percent = p;
        }
        dht_key(&self.dht, "[clusters] join_percent")?;
        if let Some(p) = c.leave_percent {
            self.dht.cluster_leave_percent = p;
        }
        let p = &f.proxy;
        if let Some(d) = &p.cache_dir {
            self.proxy.cache_dir = Some(d.clone());
        }
        if let Some(s) = &p.cache_size {
            self.proxy.cache_size_bytes = parse_size(s)?;
        }
        if let Some(a) = p.allow_private_origins {
            self.proxy.allow_private_origins = a;
        }
        if let Some(r) = &p.resolve {
            self.proxy.resolve = r
                .iter()
                .map(|s| parse_resolve(s))
                .collect::<Result<_, _>>()?;
        }
        let set = |dst: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *dst = v;
            }
        };
        set(&mut self.proxy.connect_timeout_ms, p.connect_timeout_ms);
        set(
            &mut self.proxy.first_byte_timeout_ms,
            p.first_byte_timeout_ms,
        );
        set(&mut self.proxy.idle_timeout_ms, p.idle_timeout_ms);
        set(
            &mut self.proxy.client_idle_timeout_ms,
            p.client_idle_timeout_ms,
        );
        set(&mut self.proxy.object_bytes_max, p.object_bytes_max);
        set(&mut self.proxy.negative_ttl_secs, p.negative_ttl_secs);
        set(&mut self.proxy.resolve_ttl_secs, p.resolve_ttl_secs);
        if let Some(c) = p.connections_max {
            self.proxy.connections_max = c;
        }
        if let Some(v) = p.vary_variants_max {
            self.proxy.vary_variants_max = v;
        }
        if let Some(t) = p.fetching_pointer_ttl_secs {
            self.proxy.fetching_pointer_ttl_secs = t;
        }
        if let Some(t) = p.complete_pointer_ttl_secs {
            self.proxy.complete_pointer_ttl_secs = t;
        }
        if let Some(a) = &p.access_log {
            self.proxy.access_log = parse_access_log(a)?;
        }
        dht_key(&self.dht, "[clusters] leave_percent")?;
        self.validate_values()
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
        self.validate_values()
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
        ] {
            if v == 0 {
                return Err(format!("proxy.{name} must be positive"));
            }
        }
        for (name, t) in [
            ("fetching_pointer_ttl_secs", p.fetching_pointer_ttl_secs),
            ("complete_pointer_ttl_secs", p.complete_pointer_ttl_secs),
        ] {
            if t < POINTER_TTL_SECS_MIN {
                return Err(format!(
                    "proxy.{name} = {t}: at least {POINTER_TTL_SECS_MIN} (pointers are renewed at \
                     3/4 of their TTL, looked at once a second)"
                ));
            }
            if t > self.dht.ttl_max_secs {
                return Err(format!(
                    "proxy.{name} = {t}: at most [limits] ttl_max_secs ({}), the longest TTL the \
                     DSHT keeps",
                    self.dht.ttl_max_secs
                ));
            }
        }
        if p.fetching_pointer_ttl_secs > p.complete_pointer_ttl_secs {
            return Err(format!(
                "proxy.fetching_pointer_ttl_secs = {} exceeds proxy.complete_pointer_ttl_secs = {}",
                p.fetching_pointer_ttl_secs, p.complete_pointer_ttl_secs
            ));
        }
        if p.cache_size_bytes < 1 << 20 {
            return Err("proxy.cache_size: at least 1MiB".into());
        }
        if self.cores > 1024 {
            return Err(format!("cores = {}: at most 1024", self.cores));
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
    Ok(format!(
        "{}: ok: dsht {} (id from {}), admin {}, {} bootstrap node(s), cores {}, zone {}, \
         levels {}, l = {}, β = {}/min",
        path.display(),
        cfg.dsht,
        cfg.id_addr(),
        cfg.admin,
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

/// Checks the DSHT parameters after the file set `key`, so that an invalid
/// value is reported against the key that set it.
fn dht_key(dht: &coral::Config, key: &str) -> Result<(), String> {
    dht.validate()
        .map_err(|e| format!("{key}: {}", file_words(&e.0)))
}

/// Rewrites the core's field names in `msg` as the file spells them.
fn file_words(msg: &str) -> String {
    const NAMES: &[(&str, &str)] = &[
        ("cluster_join_percent", "[clusters] join_percent"),
        ("cluster_leave_percent", "[clusters] leave_percent"),
        ("cluster_eval_secs", "[clusters] eval_secs"),
        ("cluster_join_eval_secs", "[clusters] join_eval_secs"),
        ("operation_timeout_ms", "the operation timeout (built in)"),
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

/// `[dnssrv]`: dnssrv's limits (each optional; `coral::dns::DnsConfig` has
/// the defaults).
#[derive(Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct DnsSection {
    /// A records per answer (1–16; default 4).
    pub answers_max: Option<usize>,
    /// Name servers per delegation (1–8; default 3).
    pub nameservers_max: Option<usize>,
    /// A proxy is live if it answered one of our RPCs this recently (300).
    pub live_secs: Option<u64>,
    /// Largest UDP answer with EDNS (512–4096; default 1232).
    pub udp_payload_bytes: Option<u16>,
    /// The level of a client not measured yet (0–2; default 0).
    pub default_level: Option<u8>,
    /// UDP responses a second per client /24 or /56 (0: off; default 100).
    pub rrl_responses_per_sec: Option<u32>,
    /// Over the limit every n-th response is sent truncated (default 2).
    pub rrl_slip: Option<u32>,
    /// A client address is probed at most once this often (600).
    pub probe_interval_secs: Option<u64>,
    /// Probes per /24 per interval (4).
    pub probes_per_prefix: Option<u32>,
    /// Probes a second per core (20; 0: never probe).
    pub probes_per_sec: Option<u32>,
    /// Client networks remembered per core (65536).
    pub clients_max: Option<usize>,
    /// How long a measured RTT is used (3600).
    pub client_rtt_secs: Option<u64>,
    /// TCP connections per core (256).
    pub tcp_connections_max: Option<usize>,
    /// Longest a query with no live proxy waits while candidates are
    /// pinged, in ms (400; 0: never).
    pub hold_ms: Option<u64>,
    /// Queries held at once per core (128).
    pub held_max: Option<usize>,
    /// A TCP connection with no query this long is closed (10000).
    pub tcp_idle_ms: Option<u64>,
    /// This node's proxy is non-recursive: it serves only clients on its
    /// local network, and dnssrv (on every node) gives its address only to
    /// those (§3.1). Advertised as the non-recursive service bit.
    pub non_recursive: Option<bool>,
    /// Known RTTs of client networks instead of measured ones, by address
    /// (its /24 or /56): `{ "192.0.2.0" = 15 }`. For resolvers whose
    /// distance is known, and for tests, which place clients at a level.
    #[serde(default)]
    pub client_rtt_ms: BTreeMap<String, u32>,
}

impl DnsSection {
    /// dnssrv's configuration for a node configured as `cfg`.
    pub fn dns_config(&self, cfg: &NodeConfig) -> DnsConfig {
        let d = DnsConfig::default();
        DnsConfig {
            zone: cfg.zone.clone(),
            alias: cfg.alias.clone(),
            level_thresholds_ms: cfg.dht.level_thresholds_ms.clone(),
            answers_max: self.answers_max.unwrap_or(d.answers_max),
            nameservers_max: self.nameservers_max.unwrap_or(d.nameservers_max),
            live_secs: self.live_secs.unwrap_or(d.live_secs),
            udp_payload_bytes: self.udp_payload_bytes.unwrap_or(d.udp_payload_bytes),
            default_level: self.default_level.unwrap_or(d.default_level),
            rrl_responses_per_sec: self
                .rrl_responses_per_sec
                .unwrap_or(d.rrl_responses_per_sec),
            rrl_slip: self.rrl_slip.unwrap_or(d.rrl_slip),
            probe_interval_secs: self.probe_interval_secs.unwrap_or(d.probe_interval_secs),
            probes_per_prefix: self.probes_per_prefix.unwrap_or(d.probes_per_prefix),
            probes_per_sec: self.probes_per_sec.unwrap_or(d.probes_per_sec),
            clients_max: self.clients_max.unwrap_or(d.clients_max),
            client_rtt_secs: self.client_rtt_secs.unwrap_or(d.client_rtt_secs),
            serial: d.serial,
            hold_ms: self.hold_ms.unwrap_or(d.hold_ms),
            held_max: self.held_max.unwrap_or(d.held_max),
        }
    }

    /// Checks every limit against its bound.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |what: &str, range: &str| Err(format!("[dnssrv] {what} must be {range}"));
        if self
            .answers_max
            .is_some_and(|n| !(1..=coral::dns::ANSWERS_MAX).contains(&n))
        {
            return bad("answers_max", "1-16");
        }
        if self
            .nameservers_max
            .is_some_and(|n| !(1..=coral::dns::NAMESERVERS_MAX).contains(&n))
        {
            return bad("nameservers_max", "1-8");
        }
        if self
            .udp_payload_bytes
            .is_some_and(|n| !(512..=4096).contains(&n))
        {
            return bad("udp_payload_bytes", "512-4096");
        }
        if self.default_level.is_some_and(|l| l > 2) {
            return bad("default_level", "0-2");
        }
        if self.tcp_connections_max == Some(0) || self.tcp_idle_ms == Some(0) {
            return bad("tcp_connections_max and tcp_idle_ms", "above 0");
        }
        if self.clients_max == Some(0) {
            return bad("clients_max", "above 0");
        }
        if self.hold_ms.is_some_and(|ms| ms > 5000) {
            return bad("hold_ms", "0-5000");
        }
        if self.held_max.is_some_and(|n| n > 65_536) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_a_standalone_loopback_node() {
        let c = NodeConfig::load(None).unwrap();
        assert!(c.dsht.ip().is_loopback());
        assert!(c.bootstrap.is_empty());
        assert_eq!(c.dht, coral::Config::default());
    }

    const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/coral.toml");

    #[test]
    fn the_example_in_deploy_loads() {
        let c = NodeConfig::load(Some(Path::new(DEPLOY))).unwrap();
        c.validate().unwrap();
        assert_eq!(c.bootstrap.len(), 1);
        assert!(c.dsht.ip().is_unspecified());
        assert_eq!(c.id_addr(), "192.0.2.1:7000".parse().unwrap());
        assert_eq!(c.dht.level_thresholds_ms, vec![u32::MAX, 60, 20]);
        assert_eq!(check_file(Path::new(DEPLOY)).map(|_| ()), Ok(()));
    }

    #[test]
    fn deploy_example_is_the_embedded_default_but_its_example_lines() {
        let text = std::fs::read_to_string(DEPLOY).unwrap();
        let without: String = text
            .lines()
            .filter(|l| !l.contains("# example:"))
            .map(|l| format!("{l}\n"))
            .collect();
        let dir = std::env::temp_dir().join(format!("coral-deploy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("coral.toml");
        std::fs::write(&path, without).unwrap();
        let loaded = NodeConfig::load(Some(&path)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(loaded, NodeConfig::load(None).unwrap());
        // And the file names every key the embedded default has, and more.
        let file_keys: Vec<String> = key_lines(&text).into_iter().map(|k| k.key).collect();
        for k in key_lines(DEFAULT_CONFIG) {
            assert!(
                file_keys.contains(&k.key),
                "deploy/coral.toml lacks {}",
                k.key
            );
        }
        assert_eq!(text.matches("# example:").count(), 3);
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_key_as_written() {
        let dir = std::env::temp_dir().join(format!("coral-cfg-errors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            NodeConfig::load(Some(&path)).unwrap_err()
        };
        let p = path.display().to_string();
        // A value the core refuses, under its section, on its line.
        let e = load("cores = 1\n\n[dht]\nb = 0\n");
        assert!(e.starts_with(&format!("{p}:4: [dht] b")), "{e}");
        let e = load("[clusters]\neval_secs = 10\njoin_percent = 101\n");
        assert!(
            e.starts_with(&format!("{p}:3: [clusters] join_percent")),
            "{e}"
        );
        assert!(!e.contains("cluster_join_percent"), "{e}");
        // A type error and an unknown key, located by toml's spans.
        let e = load("# x\n[dht]\nbeta_per_min = \"many\"\n");
        assert!(e.starts_with(&format!("{p}:3: [dht] beta_per_min")), "{e}");
        let e = load("dsht = \"127.0.0.1:7000\"\ncolour = \"blue\"\n");
        assert!(e.starts_with(&format!("{p}:2: colour")), "{e}");
        // A check of several keys names the one the message is about.
        let e = load("admin = \"192.0.2.1:7080\"\n");
        assert!(e.starts_with(&format!("{p}:1: admin")), "{e}");
        // A wildcard without public_addr: refused by validate, located.
        std::fs::write(&path, "cores = 1\ndsht = \"0.0.0.0:7000\"\n").unwrap();
        let e = check_file(&path).unwrap_err();
        assert!(
            e.starts_with(&format!("{p}:2: dsht")) && e.contains("public_addr"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        let bad: Result<FileConfig, _> = toml::from_str("dsht = \"nonsense\"");
        assert!(bad.is_err());
        let unknown: Result<FileConfig, _> = toml::from_str("colour = \"blue\"");
        assert!(unknown.is_err());
        let mut c = NodeConfig::load(None).unwrap();
        let f: FileConfig = toml::from_str("admin = \"0.0.0.0:7080\"").unwrap();
        assert!(c.overlay(&f).unwrap_err().contains("loopback"));
        let f: FileConfig = toml::from_str("[dht]\nb = 0").unwrap();
        assert!(c.overlay(&f).is_err());
        let f: FileConfig = toml::from_str("[clusters]\neval_secs = 0").unwrap();
        assert!(c.overlay(&f).is_err());
        let f: FileConfig = toml::from_str("zone = \"bad_label.test\"").unwrap();
        assert!(c.overlay(&f).unwrap_err().contains("zone"));
    }

    #[test]
    fn proxy_defaults_serve_on_loopback_8090_with_a_1gib_cache() {
        let c = NodeConfig::load(None).unwrap();
        assert_eq!(c.http_addr(), "127.0.0.1:8090".parse().unwrap());
        assert_eq!(
            c.cache_dir(),
            std::path::Path::new("coral-cache/127.0.0.1-7000")
        );
        assert_eq!(c.proxy, ProxyConfig::default());
        assert_eq!(c.proxy.cache_size_bytes, 1 << 30);
        assert!(!c.proxy.allow_private_origins);
    }

    #[test]
    fn proxy_section_sizes_and_static_answers_parse() {
        let mut c = NodeConfig::load(None).unwrap();
        let f: FileConfig = toml::from_str(
            "http = \"127.11.0.1:8090\"\n[proxy]\ncache_size = \"512MiB\"\nresolve = [\"Origin.Example.=127.11.9.9\"]\nallow_private_origins = true",
        )
        .unwrap();
        c.overlay(&f).unwrap();
        assert_eq!(c.http_addr(), "127.11.0.1:8090".parse().unwrap());
        assert_eq!(c.proxy.cache_size_bytes, 512 << 20);
        assert_eq!(
            c.proxy.resolve,
            vec![("origin.example".to_string(), "127.11.9.9".parse().unwrap())]
        );
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("100MB").unwrap(), 100_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("1 parsec").is_err());
        assert!(parse_size("99999999999999TiB").is_err());
        assert!(parse_resolve("x.com").is_err());
        assert!(parse_resolve("x.com=nope").is_err());
        let f: FileConfig = toml::from_str("[proxy]\nconnect_timeout_ms = 0").unwrap();
        assert!(c.overlay(&f).unwrap_err().contains("connect_timeout_ms"));
        let f: FileConfig = toml::from_str("[proxy]\ncache_size = \"1KiB\"").unwrap();
        assert!(c.overlay(&f).is_err());
    }

    #[test]
    fn pointer_ttls_are_set_in_the_proxy_section_and_checked() {
        let load = |text: &str| {
            let mut c = NodeConfig::load(None).unwrap();
            let f: FileConfig = toml::from_str(text).unwrap();
            c.overlay(&f).map(|()| c.proxy)
        };
        let d = ProxyConfig::default();
        assert_eq!(
            (d.fetching_pointer_ttl_secs, d.complete_pointer_ttl_secs),
            (20, 3600)
        );
        let p =
            load("[proxy]\nfetching_pointer_ttl_secs = 2\ncomplete_pointer_ttl_secs = 3").unwrap();
        assert_eq!(
            (p.fetching_pointer_ttl_secs, p.complete_pointer_ttl_secs),
            (2, 3)
        );
        for (text, key) in [
            (
                "[proxy]\ncomplete_pointer_ttl_secs = 0",
                "complete_pointer_ttl_secs",
            ),
            (
                "[proxy]\nfetching_pointer_ttl_secs = 1",
                "fetching_pointer_ttl_secs",
            ),
            // The fetching pointer outlives the complete one: refused.
            ("[proxy]\ncomplete_pointer_ttl_secs = 10", "exceeds"),
            ("[proxy]\ncomplete_pointer_ttl_secs = 90000", "ttl_max_secs"),
            (
                "[limits]\nttl_max_secs = 600\n[proxy]\ncomplete_pointer_ttl_secs = 601",
                "ttl_max_secs (600)",
            ),
        ] {
            let e = load(text).unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
        assert!(toml::from_str::<FileConfig>("[proxy]\ncomplete_pointer_ttl_secs = -1").is_err());
    }

    #[test]
    fn zone_and_alias_are_lower_case_without_the_root_dot() {
        let c = NodeConfig::load(None).unwrap();
        assert_eq!(c.zone, "coralcdn.test");
        assert_eq!(c.alias.as_deref(), Some("coral.test"));
        assert_eq!(dns_name("zone", "NYUCD.net.").unwrap(), "nyucd.net");
        assert!(dns_name("zone", "").is_err());
        assert!(dns_name("zone", "a..b").is_err());
        assert!(dns_name("zone", &"a".repeat(64)).is_err());
        assert!(dns_name("zone", "-a.b").is_err());
    }
}
