//! The DSHT's parameters, with the paper's symbols and every limit named with
//! its unit. Defaults are the NSDI 2004 paper's.

use crate::time::Duration;

/// Maximum number of cluster levels a node can be configured with (level 0
/// is the global cluster). The wire format carries one cluster header entry
/// per non-global level.
pub const LEVELS_MAX: usize = 4;

/// Parameters of one node's DSHT.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// RTT threshold (diameter) of each level in milliseconds; level 0 is the
    /// global cluster and has no threshold (`u32::MAX`). Default ∞ / 60 / 20.
    pub level_thresholds_ms: Vec<u32>,
    /// b: bits of the key corrected per lookup hop (§4.1). Default 1.
    pub b: u32,
    /// α: the window of outstanding RPCs per lookup (§4.1). Default 3.
    pub alpha: usize,
    /// l: values for one key that make a node *full* (§4.2). Default 4.
    pub values_per_key_max: usize,
    /// β: the leakage rate, requests per minute for one key above which a
    /// node is *loaded* (§4.2). Default 12.
    pub beta_per_min: u32,
    /// k: contacts per routing-table bucket (Kademlia's k). Default 8.
    pub bucket_size: usize,
    /// Contacts returned by a find-closer-nodes reply. Default 8.
    pub reply_contacts_max: usize,
    /// Values returned by one get reply: a random subset of those stored (§4.2).
    pub get_values_max: usize,
    /// Time after which an RPC without a reply has failed.
    pub rpc_timeout_ms: u64,
    /// Time after which a lookup whose RPCs are all outstanding opens one
    /// more, up to α (the window that hides slow or stale peers, §4.1).
    pub rpc_stall_ms: u64,
    /// Contacts one lookup remembers (the closest to its key are kept).
    pub lookup_contacts_max: usize,
    /// Upper bound on one whole operation (all levels, both phases).
    pub operation_timeout_ms: u64,
    /// Operations (gets and puts) in progress at once; more are refused.
    pub operations_max: usize,
    /// RPCs awaiting replies at once; more are refused.
    pub pending_rpcs_max: usize,
    /// Largest TTL a stored value may have; longer TTLs are clamped.
    pub ttl_max_secs: u32,
    /// Keys stored per level; a store for a new key beyond it is refused.
    pub keys_per_level_max: usize,
    /// Largest value in bytes (the wire's limit is 255).
    pub value_bytes_max: usize,
    /// How often the write-token secret rotates; tokens from the previous
    /// secret stay valid, so a token lives between one and two periods.
    pub token_rotate_secs: u64,
    /// Outgoing datagrams queued before the oldest are dropped.
    pub transmit_queue_max: usize,
    /// Completed-operation events queued before the oldest are dropped.
    pub event_queue_max: usize,
    /// Liveness pings to unverified senders queued at once.
    pub verify_pings_max: usize,
    /// Whether this node's id hashes its port as well as its IP, for several
    /// nodes on one address (§4.1, the 494-node experiment of §6.4).
    pub id_includes_port: bool,
    /// Whether to drop datagrams whose sender id is neither SHA-1 of the
    /// source IP nor of the IP and port (ids bound to addresses, as BEP 42).
    pub require_id_binding: bool,
    /// How often each routing-table bucket that has seen no traffic is
    /// refreshed by a lookup for a random id in it (Kademlia's refresh).
    pub bucket_refresh_secs: u64,
    /// Whether this node organizes its own clusters (§4.4). A runtime with
    /// one node per core turns it off on all cores but one, which decides
    /// for the others; tests that assign clusters turn it off.
    pub cluster_manage: bool,
    /// How often a node reconsiders its cluster at each level (§4.4: every
    /// five minutes). Each node's first periodic evaluation falls at a random
    /// point of the first period, so that nodes do not move in lock step.
    pub cluster_eval_secs: u64,
    /// How long after joining a node makes its first cluster decision, once
    /// its first lookups and hint gets have measured some nodes.
    pub cluster_join_eval_secs: u64,
    /// A cluster is *acceptable* when at least this percentage of the
    /// members measured are within the level's threshold (§4.4: 80).
    pub cluster_join_percent: u32,
    /// A node leaves its cluster when at least this percentage of its
    /// accesses to members since the last evaluation missed the threshold
    /// (§4.4: 50). The gap to `cluster_join_percent` is the hysteresis.
    pub cluster_leave_percent: u32,
    /// How sure a node must be that a cluster is acceptable before it joins
    /// it: its sample of members must be this many standard errors (in
    /// hundredths) above `cluster_join_percent`. Every evaluation tests a
    /// sample of a few dozen members; among many nodes testing every five
    /// minutes, a bare threshold lets nodes join clusters that are not
    /// acceptable to them by chance, and each such join makes the cluster
    /// look better to the next node like it. The margin shrinks to nothing
    /// as the sample covers the whole cluster (finite-population correction).
    pub cluster_join_sigma_centi: u32,
    /// How sure a node must be that its cluster is no longer acceptable
    /// before it splits from it: this many standard errors below
    /// `cluster_join_percent`. Lower than the join margin, so that a node
    /// near the threshold leaves rather than stays (it will not rejoin
    /// without the stronger evidence, and not for `cluster_rejoin_holdoff_secs`).
    pub cluster_split_sigma_centi: u32,
    /// How long a node that split from or left a cluster keeps away from it.
    /// Every evaluation is a statistical test on a sample of members; with
    /// many nodes testing every five minutes, a cluster that is not
    /// acceptable to a node will sometimes look it by chance, and without a
    /// memory of having left it the node would cycle in and out.
    pub cluster_rejoin_holdoff_secs: u64,
    /// How long a node whose validation of a candidate cluster failed waits
    /// before testing that cluster again.
    pub cluster_retry_holdoff_secs: u64,
    /// Accesses to members needed in one period before the leave rule applies.
    pub cluster_accesses_min: u32,
    /// Members measured before a cluster can be judged (or all of it, when its
    /// reported size is smaller).
    pub cluster_samples_min: usize,
    /// Nodes whose cluster and RTT a node remembers per level; more are
    /// ignored until the next evaluation forgets those not heard from.
    pub cluster_observed_max: usize,
    /// Members of a candidate cluster contacted to validate it before joining
    /// (§4.4: "contacting several nodes within the candidate cluster").
    pub cluster_validate_probes: usize,
    /// The high value of the preference function δ, in powers of two: the
    /// square wave of §4.4 is 0 during even hours of a cluster's age and this
    /// (2) during odd hours.
    pub cluster_delta_log2: u32,
    /// The half period of δ's square wave (§4.4: an hour).
    pub cluster_delta_period_secs: u64,
    /// Size estimates closer than this factor (as log2, in hundredths) count
    /// as a tie even while δ is 0, so that estimation noise does not move
    /// nodes back and forth between clusters of about the same size; a tie
    /// goes to the lower cluster id, as in §4.4. 100 = a factor of two, the
    /// first hour's tie in the lecture notes on Coral.
    pub cluster_size_margin_log2_centi: u32,
    /// Splits in a row that may end in an unacceptable cluster before a node
    /// gives up and forms a singleton with a random id (IPTPS 2003 §2.5).
    pub cluster_splits_max: u32,
    /// TTL of the clustering hints a node stores under its gateway routers'
    /// addresses and its subnets (§4.4); they are renewed at half of it.
    pub hint_ttl_secs: u32,
    /// Nodes named by hints that a joining node contacts.
    pub hint_probes_max: usize,
    // ---- Limits for the open Internet (SECURITY.md) ----
    /// Values one remote storer (an IP; an IP and port where ids include
    /// the port) may hold under one key at one level. A newer value from it
    /// replaces its older one; nobody evicts another storer's value.
    pub values_per_source_per_key_max: usize,
    /// Values one /24 (IPv6: /48) may hold under one key at one level.
    /// Lifted where ids include the port (a lab of many nodes per address).
    pub values_per_prefix_per_key_max: usize,
    /// Values one remote storer may hold over all keys of one level.
    pub values_per_source_max: usize,
    /// Values one /24 (IPv6: /48) may hold over all keys of one level.
    /// Lifted where ids include the port.
    pub values_per_prefix_max: usize,
    /// Bytes of keys and values one level may hold (as accounted by
    /// `store::KEY_COST_BYTES` and `store::value_cost_bytes`).
    pub store_bytes_per_level_max: usize,
    /// Contacts one routing-table bucket may hold from one IP address
    /// (BEP 42 / libtorrent). Lifted where ids include the port.
    pub bucket_contacts_per_ip_max: usize,
    /// Contacts one routing-table bucket may hold from one /24 (IPv6: /48).
    /// Lifted where ids include the port.
    pub bucket_contacts_per_prefix_max: usize,
    /// A reply to a source that has not answered our ping (with any ping
    /// we send it) is at most this many times the request's bytes: fewer
    /// contacts and values, so that a forged source address cannot make the
    /// node a reflector.
    pub reply_amplification_max: u32,
    /// Requests per second a source that has not answered our ping may send
    /// on average (libtorrent: 5); see `rate_window_secs`.
    pub rate_requests_per_sec: u32,
    /// Requests per second a source that has answered our ping may send on
    /// average (a busy peer in a small cluster).
    pub rate_verified_requests_per_sec: u32,
    /// The window over which rates are averaged: a source may send
    /// `rate · window` requests in a burst (libtorrent: 10 s).
    pub rate_window_secs: u32,
    /// How long a source that has not answered our ping and went over its
    /// rate is ignored (its requests are dropped unanswered).
    pub rate_block_secs: u32,
    /// Sources whose rates are tracked at once; beyond, the idle are
    /// forgotten, and then new sources share one record.
    pub rate_sources_max: usize,
    /// Nodes a node remembers per level as first-hand members of its
    /// cluster there (they answered our RPC with our cluster in the header,
    /// within the level's RTT threshold): only they are served at the level.
    pub cluster_members_known_max: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            level_thresholds_ms: vec![u32::MAX, 60, 20],
            b: 1,
            alpha: 3,
            values_per_key_max: 4,
            beta_per_min: 12,
            bucket_size: 8,
            reply_contacts_max: 8,
            get_values_max: 4,
            rpc_timeout_ms: 2_000,
            rpc_stall_ms: 500,
            lookup_contacts_max: 64,
            operation_timeout_ms: 30_000,
            operations_max: 4_096,
            pending_rpcs_max: 16_384,
            ttl_max_secs: 24 * 3600,
            keys_per_level_max: 1 << 20,
            value_bytes_max: 255,
            token_rotate_secs: 300,
            transmit_queue_max: 65_536,
            event_queue_max: 65_536,
            verify_pings_max: 256,
            bucket_refresh_secs: 3600,
            id_includes_port: false,
            require_id_binding: true,
            cluster_manage: true,
            cluster_eval_secs: 300,
            cluster_join_eval_secs: 15,
            cluster_join_percent: 80,
            cluster_leave_percent: 50,
            cluster_join_sigma_centi: 200,
            cluster_split_sigma_centi: 0,
            cluster_rejoin_holdoff_secs: 3600,
            cluster_retry_holdoff_secs: 600,
            cluster_accesses_min: 8,
            cluster_samples_min: 3,
            cluster_observed_max: 256,
            cluster_validate_probes: 32,
            cluster_delta_log2: 2,
            cluster_delta_period_secs: 3600,
            cluster_size_margin_log2_centi: 100,
            cluster_splits_max: 3,
            hint_ttl_secs: 3600,
            hint_probes_max: 8,
            values_per_source_per_key_max: 1,
            values_per_prefix_per_key_max: 2,
            values_per_source_max: 4096,
            values_per_prefix_max: 16_384,
            store_bytes_per_level_max: 128 << 20,
            bucket_contacts_per_ip_max: 1,
            bucket_contacts_per_prefix_max: 2,
            reply_amplification_max: 3,
            rate_requests_per_sec: 5,
            rate_verified_requests_per_sec: 1000,
            rate_window_secs: 10,
            rate_block_secs: 300,
            rate_sources_max: 16_384,
            cluster_members_known_max: 1024,
        }
    }
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "invalid DSHT configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// The number of levels (including the global level 0).
    pub fn levels(&self) -> usize {
        self.level_thresholds_ms.len()
    }

    /// Checks every parameter against its bound.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |s: &str| Err(ConfigError(s.to_string()));
        if self.level_thresholds_ms.is_empty() || self.level_thresholds_ms.len() > LEVELS_MAX {
            return err("level_thresholds_ms must name between 1 and 4 levels");
        }
        if self.level_thresholds_ms[0] != u32::MAX {
            return err("level 0 is the global cluster: its threshold must be unbounded");
        }
        if self.level_thresholds_ms.windows(2).any(|w| w[1] >= w[0]) {
            return err("level thresholds must decrease with the level");
        }
        if !(1..=8).contains(&self.b) {
            return err("b must be between 1 and 8 bits per hop");
        }
        if self.alpha == 0 || self.alpha > 16 {
            return err("alpha must be between 1 and 16");
        }
        if self.values_per_key_max == 0 || self.values_per_key_max > 64 {
            return err("values_per_key_max (l) must be between 1 and 64");
        }
        if self.bucket_size == 0 || self.bucket_size > 64 {
            return err("bucket_size must be between 1 and 64");
        }
        if self.reply_contacts_max == 0 || self.reply_contacts_max > 32 {
            return err("reply_contacts_max must be between 1 and 32");
        }
        if self.get_values_max == 0 || self.get_values_max > 32 {
            return err("get_values_max must be between 1 and 32");
        }
        if self.value_bytes_max == 0 || self.value_bytes_max > 255 {
            return err("value_bytes_max must be between 1 and 255");
        }
        if self.rpc_timeout_ms == 0 || self.operation_timeout_ms < self.rpc_timeout_ms {
            return err("rpc_timeout_ms must be positive and at most operation_timeout_ms");
        }
        if self.lookup_contacts_max < self.reply_contacts_max {
            return err("lookup_contacts_max must be at least reply_contacts_max");
        }
        if self.token_rotate_secs == 0 {
            return err("token_rotate_secs must be positive");
        }
        if self.cluster_eval_secs == 0 || self.cluster_delta_period_secs == 0 {
            return err("cluster_eval_secs and cluster_delta_period_secs must be positive");
        }
        if self.cluster_leave_percent == 0
            || self.cluster_join_percent > 100
            || self.cluster_leave_percent > 100
        {
            return err("cluster_join_percent and cluster_leave_percent must be within 1..=100");
        }
        if self.cluster_samples_min == 0
            || self.cluster_validate_probes == 0
            || self.cluster_validate_probes > 32
        {
            return err(
                "cluster_samples_min must be positive and cluster_validate_probes within 1..=32",
            );
        }
        if self.hint_ttl_secs < 2 {
            return err("hint_ttl_secs must be at least 2");
        }
        if self.values_per_source_per_key_max == 0
            || self.values_per_prefix_per_key_max == 0
            || self.values_per_source_max == 0
            || self.values_per_prefix_max == 0
        {
            return err("the values_per_*_max quotas must be positive");
        }
        if self.bucket_contacts_per_ip_max == 0 || self.bucket_contacts_per_prefix_max == 0 {
            return err(
                "bucket_contacts_per_ip_max and bucket_contacts_per_prefix_max must be positive",
            );
        }
        if self.reply_amplification_max < 2 {
            return err("reply_amplification_max must be at least 2 (a pong is 2.9 pings)");
        }
        if self.rate_requests_per_sec == 0
            || self.rate_verified_requests_per_sec == 0
            || self.rate_window_secs == 0
            || self.rate_sources_max == 0
        {
            return err("rates, rate_window_secs and rate_sources_max must be positive");
        }
        Ok(())
    }

    /// The RPC timeout.
    pub fn rpc_timeout(&self) -> Duration {
        Duration::from_millis(self.rpc_timeout_ms)
    }

    /// The re-evaluation period of clusters.
    pub fn cluster_eval(&self) -> Duration {
        Duration::from_secs(self.cluster_eval_secs)
    }

    /// The stall time after which a lookup widens its window.
    pub fn rpc_stall(&self) -> Duration {
        Duration::from_millis(self.rpc_stall_ms)
    }

    /// The bound on the closest node's put RPCs per minute for `n` nodes
    /// (§4.2): β·(2^b − 1)·⌈log2(n)/b⌉.
    pub fn hotspot_bound_per_min(&self, n: u64) -> u64 {
        let log_n = (n.max(2) as f64).log2();
        let digits = (log_n / f64::from(self.b)).ceil() as u64;
        u64::from(self.beta_per_min) * ((1u64 << self.b) - 1) * digits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers_and_valid() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.levels(), 3);
        assert_eq!(c.values_per_key_max, 4);
        assert_eq!(c.beta_per_min, 12);
        assert_eq!(c.b, 1);
    }

    #[test]
    fn hotspot_bound_is_108_for_494_nodes_section_4_2() {
        assert_eq!(Config::default().hotspot_bound_per_min(494), 108);
    }

    #[test]
    fn bad_configs_are_refused() {
        let c = Config {
            level_thresholds_ms: vec![u32::MAX, 20, 60],
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            b: 0,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            value_bytes_max: 300,
            ..Config::default()
        };
        assert!(c.validate().is_err());
    }
}
