//! The node's configuration: a TOML file, overridden by flags, on top of an
//! embedded default that runs a standalone node on loopback.

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

/// The embedded default: what `coral node` runs with no file and no flags.
pub const DEFAULT_CONFIG: &str = r#"
# A standalone node on loopback, ready to serve.
dsht = "127.0.0.1:7000"    # UDP address of the DSHT RPCs
admin = "127.0.0.1:7080"   # loopback HTTP endpoint for the client commands
bootstrap = []             # other nodes' DSHT addresses
cores = 0                  # 0: every core in the process's CPU mask
zone = "coralcdn.test"     # the zone dnssrv serves: proxies are *.http.L2.L1.L0.<zone> (§3.1)
alias = "coral.test"       # the short alias (a DNAME to http.L2.L1.L0.<zone>): www.x.com.<alias>
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
"#;

/// The file's shape.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// DSHT UDP address.
    pub dsht: Option<SocketAddr>,
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
    pub dnssrv: crate::dns::DnsSection,
    /// DSHT parameters.
    #[serde(default)]
    pub dht: DhtSection,
    /// Clustering parameters.
    #[serde(default)]
    pub clusters: ClustersSection,
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
    /// The HTTP proxy's address, if this node runs one (it then advertises
    /// the HTTP service, and dnssrv hands out its IP).
    pub http: Option<SocketAddr>,
    /// dnssrv's limits.
    pub dnssrv: crate::dns::DnsSection,
    /// The DSHT's parameters.
    pub dht: coral::Config,
}

impl NodeConfig {
    /// The embedded default, overlaid with `file` (if any).
    pub fn load(file: Option<&Path>) -> Result<NodeConfig, String> {
        let base: FileConfig =
            toml::from_str(DEFAULT_CONFIG).map_err(|e| format!("embedded default: {e}"))?;
        let mut cfg = NodeConfig::from_file(&base)?;
        if let Some(path) = file {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let f: FileConfig =
                toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            cfg.overlay(&f)?;
        }
        Ok(cfg)
    }

    fn from_file(f: &FileConfig) -> Result<NodeConfig, String> {
        let mut cfg = NodeConfig {
            dsht: f.dsht.ok_or("dsht address missing")?,
            admin: f.admin.ok_or("admin address missing")?,
            bootstrap: Vec::new(),
            cores: 0,
            zone: String::new(),
            alias: None,
            dns: None,
            http: None,
            dnssrv: crate::dns::DnsSection::default(),
            dht: coral::Config::default(),
        };
        cfg.overlay(f)?;
        Ok(cfg)
    }

    fn overlay(&mut self, f: &FileConfig) -> Result<(), String> {
        if let Some(a) = f.dsht {
            self.dsht = a;
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
        if f.dnssrv != crate::dns::DnsSection::default() {
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
        if let Some(b) = d.b {
            self.dht.b = b;
        }
        if let Some(a) = d.alpha {
            self.dht.alpha = a;
        }
        if let Some(l) = d.values_per_key_max {
            self.dht.values_per_key_max = l;
        }
        if let Some(beta) = d.beta_per_min {
            self.dht.beta_per_min = beta;
        }
        if let Some(t) = d.rpc_timeout_ms {
            self.dht.rpc_timeout_ms = t;
        }
        let c = &f.clusters;
        if let Some(m) = c.manage {
            self.dht.cluster_manage = m;
        }
        if let Some(s) = c.eval_secs {
            self.dht.cluster_eval_secs = s;
        }
        if let Some(s) = c.join_eval_secs {
            self.dht.cluster_join_eval_secs = s;
        }
        if let Some(p) = c.join_percent {
            self.dht.cluster_join_percent = p;
        }
        if let Some(p) = c.leave_percent {
            self.dht.cluster_leave_percent = p;
        }
        self.validate()
    }

    /// Checks what the core's validation does not.
    pub fn validate(&self) -> Result<(), String> {
        self.dht.validate().map_err(|e| e.to_string())?;
        if !self.admin.ip().is_loopback() {
            return Err(format!(
                "admin address {} must be loopback: it has no authentication",
                self.admin
            ));
        }
        if self.cores > 1024 {
            return Err("cores: at most 1024".into());
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
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_a_standalone_loopback_node() {
        let c = NodeConfig::load(None).unwrap();
        assert!(c.dsht.ip().is_loopback());
        assert!(c.bootstrap.is_empty());
        assert_eq!(c.dht, coral::Config::default());
    }

    #[test]
    fn the_example_in_deploy_loads() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/coral.toml");
        let c = NodeConfig::load(Some(Path::new(path))).unwrap();
        assert_eq!(c.bootstrap.len(), 1);
        assert_eq!(c.dht.level_thresholds_ms, vec![u32::MAX, 60, 20]);
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
