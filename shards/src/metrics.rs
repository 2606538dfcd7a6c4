//! `/metrics` on the admin endpoint: Prometheus's text format (0.0.4).
//!
//! Nothing here is on a hot path: each core counts in its own state (the
//! node's `Stats`, and the thread-local `Counters` below, one per executor
//! thread, no lock, no atomic), and a scrape asks every core for its numbers
//! over the mesh and adds them up.
//!
//! Names follow Prometheus's conventions: `coral_<subsystem>_<what>`,
//! `_total` for counters, base units (`_seconds`, `_bytes`). Other services
//! (the proxy, DNS) add their families with the same [`Writer`].

use std::cell::RefCell;
use std::fmt::Write as _;

/// The kind of a metric family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (restarts at 0).
    Counter,
    /// Goes up and down.
    Gauge,
}

/// Writes families in Prometheus's text format.
#[derive(Default)]
pub struct Writer {
    out: String,
}

impl Writer {
    /// Starts a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self
    }

    /// One sample of the family just started.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        if value.fract() == 0.0 && value.abs() < 1e15 {
            let _ = writeln!(self.out, " {}", value as i64);
        } else {
            let _ = writeln!(self.out, " {value}");
        }
        self
    }

    /// The text so far.
    pub fn finish(self) -> String {
        self.out
    }
}

/// What a core counts outside the node's own `Stats`: the outcomes of the
/// client operations it ran.
#[derive(Default, Clone, Debug)]
pub struct Counters {
    /// Gets that found values.
    pub gets_found: u64,
    /// Gets that found nothing.
    pub gets_not_found: u64,
    /// Puts, per level that stored the value.
    pub puts_stored: u64,
    /// Puts stopped at a full and loaded node at some level (§4.2: the
    /// value spilled onto a node farther from the key).
    pub puts_spilled: u64,
}

thread_local! {
    /// This core's counters (each executor is one thread).
    static COUNTERS: RefCell<Counters> = RefCell::new(Counters::default());
}

/// Counts the outcome of a completed operation on this core.
pub fn count_event(e: &coral::node::Event) {
    COUNTERS.with(|c| {
        let mut c = c.borrow_mut();
        match e {
            coral::node::Event::GetDone { values, .. } => {
                if values.is_empty() {
                    c.gets_not_found += 1;
                } else {
                    c.gets_found += 1;
                }
            }
            coral::node::Event::PutDone { levels, .. } => {
                for l in levels {
                    if l.stored_at.is_some() {
                        c.puts_stored += 1;
                    }
                    if l.stopped_at_loaded {
                        c.puts_spilled += 1;
                    }
                }
            }
            coral::node::Event::ClaimDone { .. } => {}
        }
    });
}

/// This core's counters.
pub fn counters() -> Counters {
    COUNTERS.with(|c| c.borrow().clone())
}

/// Renders the DSHT families from every core's metrics JSON (as
/// `runtime::Shard::metrics_json` makes it) and core 0's levels.
pub fn render_dsht(cores: &[serde_json::Value], levels: &serde_json::Value, ready: bool) -> String {
    let sum = |path: &[&str]| -> f64 {
        cores
            .iter()
            .map(|c| path.iter().fold(c, |v, k| &v[*k]).as_u64().unwrap_or(0) as f64)
            .sum()
    };
    let mut w = Writer::default();
    w.family(
        "coral_build_info",
        Kind::Gauge,
        "The running coral's version.",
    )
    .sample(
        "coral_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    w.family(
        "coral_ready",
        Kind::Gauge,
        "1 when every core serves and the node is not stopping.",
    )
    .sample("coral_ready", &[], if ready { 1.0 } else { 0.0 });
    w.family(
        "coral_cores",
        Kind::Gauge,
        "Cores (executors) the node runs on.",
    )
    .sample("coral_cores", &[], cores.len() as f64);

    w.family(
        "coral_dsht_datagrams_total",
        Kind::Counter,
        "DSHT datagrams received and sent.",
    );
    w.sample(
        "coral_dsht_datagrams_total",
        &[("direction", "in")],
        sum(&["stats", "datagrams_in"]),
    );
    w.sample(
        "coral_dsht_datagrams_total",
        &[("direction", "out")],
        sum(&["stats", "datagrams_out"]),
    );

    w.family(
        "coral_dsht_datagrams_dropped_total",
        Kind::Counter,
        "DSHT datagrams dropped, by reason.",
    );
    for (reason, key) in [
        ("malformed", "malformed"),
        ("unbound_sender", "unbound_sender"),
        ("unexpected_reply", "unexpected_replies"),
        ("transmit_queue_full", "transmit_dropped"),
        ("send_error", "send_errors"),
    ] {
        w.sample(
            "coral_dsht_datagrams_dropped_total",
            &[("reason", reason)],
            sum(&["stats", key]),
        );
    }

    w.family(
        "coral_dsht_rpcs_total",
        Kind::Counter,
        "DSHT RPCs received, by kind and outcome (§4.2: put_probe is the forward phase, store the reverse).",
    );
    let store_received = sum(&["stats", "stores_received"]);
    let store_accepted = sum(&["stats", "stores_accepted"]);
    for (kind, outcome, v) in [
        ("ping", "served", sum(&["stats", "pings_served"])),
        ("find_node", "served", sum(&["stats", "find_nodes_served"])),
        ("get", "served", sum(&["stats", "gets_served"])),
        (
            "put_probe",
            "served",
            sum(&["stats", "put_probes_received"]),
        ),
        ("store", "accepted", store_accepted),
        (
            "store",
            "refused",
            (store_received - store_accepted).max(0.0),
        ),
        ("members", "served", sum(&["stats", "members_served"])),
        ("any", "wrong_cluster", sum(&["stats", "wrong_cluster"])),
        ("store", "bad_token", sum(&["stats", "bad_token"])),
    ] {
        w.sample(
            "coral_dsht_rpcs_total",
            &[("kind", kind), ("outcome", outcome)],
            v,
        );
    }
    w.family(
        "coral_dsht_rpc_timeouts_total",
        Kind::Counter,
        "RPCs this node sent that timed out.",
    )
    .sample(
        "coral_dsht_rpc_timeouts_total",
        &[],
        sum(&["stats", "rpc_timeouts"]),
    );
    w.family(
        "coral_dsht_operations_refused_total",
        Kind::Counter,
        "Operations refused because the limit in progress was reached.",
    )
    .sample(
        "coral_dsht_operations_refused_total",
        &[],
        sum(&["stats", "ops_refused"]),
    );

    w.family(
        "coral_dsht_client_operations_total",
        Kind::Counter,
        "Client gets and puts this node ran, by outcome (a put counts once per level).",
    );
    for (op, outcome, key) in [
        ("get", "found", "gets_found"),
        ("get", "not_found", "gets_not_found"),
        ("put", "stored", "puts_stored"),
        ("put", "spilled", "puts_spilled"),
    ] {
        w.sample(
            "coral_dsht_client_operations_total",
            &[("op", op), ("outcome", outcome)],
            sum(&["counters", key]),
        );
    }

    let level_count = cores
        .first()
        .and_then(|c| c["store"].as_array())
        .map_or(0, Vec::len);
    let per_level = |i: usize, field: usize| -> f64 {
        cores
            .iter()
            .map(|c| c["store"][i][field].as_u64().unwrap_or(0) as f64)
            .sum()
    };
    for (name, field, help) in [
        ("coral_dsht_keys", 0, "Keys stored here, per level."),
        (
            "coral_dsht_values",
            1,
            "Live values stored here, per level.",
        ),
        (
            "coral_dsht_loaded_keys",
            2,
            "Keys loaded here now (more than β requests in the last minute), per level (§4.2).",
        ),
    ] {
        w.family(name, Kind::Gauge, help);
        for i in 0..level_count {
            w.sample(name, &[("level", &i.to_string())], per_level(i, field));
        }
    }

    let levels = levels["levels"].as_array().cloned().unwrap_or_default();
    w.family(
        "coral_dsht_contacts",
        Kind::Gauge,
        "Contacts in the routing table, per level (core 0).",
    );
    for l in &levels {
        w.sample(
            "coral_dsht_contacts",
            &[("level", &l["level"].to_string())],
            l["contacts"].as_f64().unwrap_or(0.0),
        );
    }
    w.family(
        "coral_cluster_info",
        Kind::Gauge,
        "This node's cluster at each level (§4.4): 1, labelled with its id.",
    );
    for l in &levels {
        w.sample(
            "coral_cluster_info",
            &[
                ("level", &l["level"].to_string()),
                ("cluster", l["cluster"].as_str().unwrap_or("")),
            ],
            1.0,
        );
    }
    w.family(
        "coral_cluster_size",
        Kind::Gauge,
        "Estimated size of this node's cluster, per level.",
    );
    for l in &levels {
        w.sample(
            "coral_cluster_size",
            &[("level", &l["level"].to_string())],
            l["size_estimate"].as_f64().unwrap_or(0.0),
        );
    }
    w.family(
        "coral_cluster_age_seconds",
        Kind::Gauge,
        "Age of this node's cluster, per level.",
    );
    for l in &levels {
        w.sample(
            "coral_cluster_age_seconds",
            &[("level", &l["level"].to_string())],
            l["age_secs"].as_f64().unwrap_or(0.0),
        );
    }
    w.family(
        "coral_cluster_switches_total",
        Kind::Counter,
        "Cluster changes this node made, at any level (§4.4).",
    )
    .sample(
        "coral_cluster_switches_total",
        &[],
        sum(&["stats", "cluster_switches"]),
    );
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_escapes_labels_and_writes_integers_plainly() {
        let mut w = Writer::default();
        w.family("x_total", Kind::Counter, "Help\nline.")
            .sample("x_total", &[("a", "q\"b\\")], 3.0)
            .sample("x_total", &[], 0.5);
        assert_eq!(
            w.finish(),
            "# HELP x_total Help\\nline.\n# TYPE x_total counter\nx_total{a=\"q\\\"b\\\\\"} 3\nx_total 0.5\n"
        );
    }
}
