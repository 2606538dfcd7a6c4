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
    /// Observations counted in buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
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
            Kind::Histogram => "histogram",
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

/// Upper bounds of the latency buckets, in seconds: log-spaced, 1, 2.5 and
/// 5 per decade from 100 µs to 10 s, and 30 s (the last bucket, `+Inf`,
/// takes the rest).
pub const DURATION_BUCKETS_SECS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];
/// The same bounds in nanoseconds (what `observe` compares with).
const DURATION_BUCKETS_NANOS: [u64; 17] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
];
/// The bucket of an observation of `ns` nanoseconds: how many bounds lie
/// below it. One comparison for what takes under the first bound (every
/// hit on an unloaded node, issue 27), a binary search otherwise.
fn bucket_of_nanos(ns: u64) -> usize {
    if ns <= DURATION_BUCKETS_NANOS[0] {
        return 0;
    }
    DURATION_BUCKETS_NANOS.partition_point(|&b| b < ns)
}

/// Buckets of a [`Histogram`]: one per bound, and `+Inf`.
const BUCKETS: usize = DURATION_BUCKETS_NANOS.len() + 1;

/// A latency histogram with fixed log buckets ([`DURATION_BUCKETS_SECS`]):
/// one per core, plain counts (no lock, no atomic), merged at scrape time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Observations per bucket (not cumulative; the last is `+Inf`).
    counts: [u64; BUCKETS],
    /// The observations' sum, in nanoseconds.
    sum_nanos: u64,
}

impl Histogram {
    /// Counts one observation.
    pub fn observe(&mut self, d: std::time::Duration) {
        self.observe_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Counts one observation of `ns` nanoseconds.
    pub fn observe_nanos(&mut self, ns: u64) {
        let i = bucket_of_nanos(ns);
        self.counts[i] += 1;
        self.sum_nanos = self.sum_nanos.saturating_add(ns);
    }

    /// Adds another core's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.sum_nanos = self.sum_nanos.saturating_add(other.sum_nanos);
    }

    /// As sent over the mesh: `{"counts": [...], "sum_nanos": n}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"counts": self.counts.to_vec(), "sum_nanos": self.sum_nanos})
    }

    /// From [`Histogram::to_json`]'s form; missing or odd parts count 0.
    pub fn from_json(v: &serde_json::Value) -> Histogram {
        let mut h = Histogram::default();
        if let Some(a) = v["counts"].as_array() {
            for (c, x) in h.counts.iter_mut().zip(a) {
                *c = x.as_u64().unwrap_or(0);
            }
        }
        h.sum_nanos = v["sum_nanos"].as_u64().unwrap_or(0);
        h
    }

    /// Writes the samples of histogram family `name` (started with
    /// [`Kind::Histogram`]) with `labels`: cumulative buckets, sum, count.
    pub fn write(&self, w: &mut Writer, name: &str, labels: &[(&str, &str)]) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c;
            let le = match DURATION_BUCKETS_SECS.get(i) {
                Some(b) => b.to_string(),
                None => "+Inf".to_string(),
            };
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le));
            w.sample(&bucket, &with_le, cumulative as f64);
        }
        w.sample(&format!("{name}_sum"), labels, self.sum_nanos as f64 / 1e9);
        w.sample(&format!("{name}_count"), labels, cumulative as f64);
    }
}

/// Where a proxied response came from (the `cache` label of
/// `coral_http_requests_total` and the access log's `cache=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheResult {
    /// A hit in this node's cache (fresh, or joined a fetch under way).
    Local,
    /// Fetched from a peer proxy the DSHT named at this level (§3.2).
    Peer(coral::dsht::node::Level),
    /// Fetched from the origin.
    Origin,
    /// A stale copy, served because the origin failed.
    Stale,
    /// Passed through uncached (uncacheable request or answer, Vary variant).
    Pass,
    /// An error answer from coral itself (4xx, 5xx it made).
    Error,
    /// A copy whose fill was cut mid-body (no source could continue it):
    /// the client saw a truncation, never a complete answer (issue 24).
    Cut,
}

impl CacheResult {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            CacheResult::Local => "local",
            CacheResult::Peer(0) => "peer_l0",
            CacheResult::Peer(1) => "peer_l1",
            CacheResult::Peer(_) => "peer_l2",
            CacheResult::Origin => "origin",
            CacheResult::Stale => "stale",
            CacheResult::Pass => "pass",
            CacheResult::Error => "error",
            CacheResult::Cut => "cut",
        }
    }
}

/// Method label values; any other method counts as `OTHER` (a client
/// cannot make new label values).
const METHOD_LABELS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE", "OTHER",
];

/// The `method` label of a request method.
pub fn method_label(m: &str) -> &'static str {
    METHOD_LABELS
        .iter()
        .find(|l| **l == m)
        .copied()
        .unwrap_or("OTHER")
}

/// Distinct (method, status, cache) combinations a core counts; more are
/// counted under status 0 (statuses are bounded by HTTP, this bounds them
/// further).
const HTTP_SERIES_MAX: usize = crate::limits::STATUS.http_series_max;

/// One core's HTTP counts: requests by method, status and cache result,
/// response body bytes and the duration histogram.
#[derive(Default, Clone, Debug)]
pub struct HttpCounters {
    /// (method, status, cache result label, count), looked up linearly (a
    /// core sees a handful of combinations).
    pub requests: Vec<(&'static str, u16, &'static str, u64)>,
    /// Response body bytes sent.
    pub response_bytes: u64,
    /// Time from a request's head read to its response's last byte sent.
    pub duration: Histogram,
    /// Where `requests` counts fresh hits by GET and HEAD (200, `local`),
    /// once there: the fast path of a hit counts without a search (issue 27).
    hit_series: [Option<usize>; 2],
}

impl HttpCounters {
    /// Counts one response.
    pub fn record(
        &mut self,
        method: &'static str,
        status: u16,
        cache: CacheResult,
        body_bytes: u64,
        took: std::time::Duration,
    ) {
        let cache = cache.label();
        let mut status = status;
        // The status first, and the labels by address before by bytes:
        // they are string constants (issue 27: this compare ran per hit).
        let same = |a: &str, b: &str| std::ptr::eq(a, b) || a == b;
        let found = self
            .requests
            .iter_mut()
            .find(|(m, s, c, _)| *s == status && same(c, cache) && same(m, method));
        match found {
            Some(e) => e.3 += 1,
            None => {
                if self.requests.len() >= HTTP_SERIES_MAX {
                    status = 0;
                }
                match self
                    .requests
                    .iter_mut()
                    .find(|(m, s, c, _)| *s == status && same(c, cache) && same(m, method))
                {
                    Some(e) => e.3 += 1,
                    None => self.requests.push((method, status, cache, 1)),
                }
            }
        }
        self.response_bytes += body_bytes;
        self.duration.observe(took);
    }

    /// Counts a fresh hit answered on the fast path: [`record`](Self::record)
    /// of GET (HEAD if `head_only`), 200, `local`, with the series found
    /// once and then counted in place.
    pub fn record_hit(&mut self, head_only: bool, body_bytes: u64, took_nanos: u64) {
        let h = usize::from(head_only);
        let method = if head_only { "HEAD" } else { "GET" };
        let local = CacheResult::Local.label();
        if let Some(e) = self.hit_series[h].and_then(|i| self.requests.get_mut(i)) {
            if e.1 == 200 && std::ptr::eq(e.0, method) && std::ptr::eq(e.2, local) {
                e.3 += 1;
                self.response_bytes += body_bytes;
                self.duration.observe_nanos(took_nanos);
                return;
            }
        }
        let took = std::time::Duration::from_nanos(took_nanos);
        self.record(method, 200, CacheResult::Local, body_bytes, took);
        self.hit_series[h] = self.requests.iter().position(|(m, s, c, _)| {
            *s == 200 && std::ptr::eq(*c, local) && std::ptr::eq(*m, method)
        });
    }

    /// As sent over the mesh.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "requests": self.requests.iter().map(|(m, s, c, n)| serde_json::json!([m, s, c, n])).collect::<Vec<_>>(),
            "response_bytes": self.response_bytes,
            "duration": self.duration.to_json(),
        })
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
pub fn count_event(e: &coral::dsht::node::Event) {
    COUNTERS.with(|c| {
        let mut c = c.borrow_mut();
        match e {
            coral::dsht::node::Event::GetDone { values, .. } => {
                if values.is_empty() {
                    c.gets_not_found += 1;
                } else {
                    c.gets_found += 1;
                }
            }
            coral::dsht::node::Event::PutDone { levels, .. } => {
                for l in levels {
                    if l.stored_at.is_some() {
                        c.puts_stored += 1;
                    }
                    if l.stopped_at_loaded {
                        c.puts_spilled += 1;
                    }
                }
            }
            coral::dsht::node::Event::ClaimDone { .. } => {}
        }
    });
}

thread_local! {
    /// This core's client get and put durations (`Call::Get`, `Call::Put`).
    static DSHT_DURATIONS: RefCell<[Histogram; 2]> = RefCell::new(Default::default());
}

/// Counts how long a client operation took, start to its event.
pub fn observe_dsht(e: &coral::dsht::node::Event, took: std::time::Duration) {
    let i = match e {
        coral::dsht::node::Event::GetDone { .. } => 0,
        coral::dsht::node::Event::PutDone { .. } => 1,
        coral::dsht::node::Event::ClaimDone { .. } => return,
    };
    DSHT_DURATIONS.with(|d| d.borrow_mut()[i].observe(took));
}

/// This core's client operation durations, as sent over the mesh.
pub fn dsht_durations_json() -> serde_json::Value {
    DSHT_DURATIONS.with(|d| {
        let d = d.borrow();
        serde_json::json!({"get": d[0].to_json(), "put": d[1].to_json()})
    })
}

/// This core's counters.
pub fn counters() -> Counters {
    COUNTERS.with(|c| c.borrow().clone())
}

/// Renders every family from every core's metrics JSON (as `Call::Metrics`
/// makes it) and core 0's levels: the node, the DSHT, HTTP and DNS.
pub fn render(cores: &[serde_json::Value], levels: &serde_json::Value, ready: bool) -> String {
    let mut w = render_dsht(cores, levels, ready);
    render_http(&mut w, cores);
    render_fill(&mut w, cores);
    render_dns(&mut w, cores);
    w.finish()
}

/// Sums the unsigned integer at `path` over every core.
fn sum_at(cores: &[serde_json::Value], path: &[&str]) -> f64 {
    cores
        .iter()
        .map(|c| path.iter().fold(c, |v, k| &v[*k]).as_u64().unwrap_or(0) as f64)
        .sum()
}

/// CoralProxy's families (§2.2, §3.2) from the cores' `http` parts.
pub fn render_http(w: &mut Writer, cores: &[serde_json::Value]) {
    let sum = |path: &[&str]| sum_at(cores, path);
    let mut requests = std::collections::BTreeMap::<(String, u64, String), u64>::new();
    let mut duration = Histogram::default();
    for c in cores {
        for r in c["http"]["requests"].as_array().into_iter().flatten() {
            let key = (
                r[0].as_str().unwrap_or("OTHER").to_string(),
                r[1].as_u64().unwrap_or(0),
                r[2].as_str().unwrap_or("error").to_string(),
            );
            *requests.entry(key).or_default() += r[3].as_u64().unwrap_or(0);
        }
        duration.merge(&Histogram::from_json(&c["http"]["duration"]));
    }
    w.family(
        "coral_http_requests_total",
        Kind::Counter,
        "HTTP responses sent, by method, status and cache result (local: a hit here; peer_l<n>: \
         fetched from a peer found at level n; origin; stale: served stale as the origin failed; \
         pass: uncacheable, fetched for this client alone; error: coral's own error answer).",
    );
    for ((m, s, c), n) in &requests {
        w.sample(
            "coral_http_requests_total",
            &[("method", m), ("status", &s.to_string()), ("cache", c)],
            *n as f64,
        );
    }
    w.family(
        "coral_http_response_bytes_total",
        Kind::Counter,
        "HTTP response body bytes sent to clients.",
    )
    .sample(
        "coral_http_response_bytes_total",
        &[],
        sum(&["http", "response_bytes"]),
    );
    w.family(
        "coral_http_request_duration_seconds",
        Kind::Histogram,
        "Time from a request's head read to its response's last byte sent.",
    );
    duration.write(w, "coral_http_request_duration_seconds", &[]);
    w.family(
        "coral_http_origin_fetches_total",
        Kind::Counter,
        "Fetches from origins: fill (into the cache, one per object however many wait) or pass (uncacheable, for one client).",
    )
    .sample(
        "coral_http_origin_fetches_total",
        &[("mode", "fill")],
        sum(&["http", "origin_fetches"]),
    )
    .sample(
        "coral_http_origin_fetches_total",
        &[("mode", "pass")],
        sum(&["http", "origin_passes"]),
    );
    w.family(
        "coral_http_origin_errors_total",
        Kind::Counter,
        "Origin fetches that failed, by reason.",
    );
    for reason in ORIGIN_ERROR_REASONS {
        w.sample(
            "coral_http_origin_errors_total",
            &[("reason", reason)],
            sum(&["http", "origin_errors", reason]),
        );
    }
    w.family(
        "coral_http_peer_fetches_total",
        Kind::Counter,
        "Fetches from peer proxies, by the level at which the DSHT named the peer (§3.2).",
    );
    for level in 0..3usize {
        let n: f64 = cores
            .iter()
            .map(|c| c["http"]["peer_fetches"][level].as_u64().unwrap_or(0) as f64)
            .sum();
        w.sample(
            "coral_http_peer_fetches_total",
            &[("level", &level.to_string())],
            n,
        );
    }
    w.family(
        "coral_http_bad_requests_total",
        Kind::Counter,
        "Malformed requests (answered 4xx, connection closed).",
    )
    .sample(
        "coral_http_bad_requests_total",
        &[],
        sum(&["http", "bad_requests"]),
    );
    w.family(
        "coral_http_connections_open",
        Kind::Gauge,
        "Client connections open now.",
    )
    .sample(
        "coral_http_connections_open",
        &[],
        sum(&["http", "connections_open"]),
    );
    w.family(
        "coral_http_connections_accepted_total",
        Kind::Counter,
        "Client connections accepted.",
    )
    .sample(
        "coral_http_connections_accepted_total",
        &[],
        sum(&["http", "connections_accepted"]),
    );
    w.family(
        "coral_http_connections_refused_total",
        Kind::Counter,
        "Client connections closed at once: connections_max reached.",
    )
    .sample(
        "coral_http_connections_refused_total",
        &[],
        sum(&["http", "connections_refused"]),
    );
    // The cache's object and byte counts are the whole cache's (every core
    // reads the same shared totals): core 0's.
    let first = |key: &str| {
        cores.first().map_or(0.0, |c| {
            c["http"]["cache"][key].as_u64().unwrap_or(0) as f64
        })
    };
    w.family(
        "coral_cache_objects",
        Kind::Gauge,
        "Complete objects in the disk cache.",
    )
    .sample("coral_cache_objects", &[], first("objects"));
    w.family(
        "coral_cache_bytes",
        Kind::Gauge,
        "Bytes the disk cache's segment files occupy.",
    )
    .sample("coral_cache_bytes", &[], first("bytes"));
    w.family(
        "coral_cache_object_bytes",
        Kind::Gauge,
        "Record bytes of the complete objects in the disk cache (its use).",
    )
    .sample("coral_cache_object_bytes", &[], first("object_bytes"));
    w.family(
        "coral_cache_size_limit_bytes",
        Kind::Gauge,
        "The disk cache's configured size (cache_size).",
    )
    .sample("coral_cache_size_limit_bytes", &[], first("size_bytes"));
    w.family(
        "coral_cache_usable_bytes",
        Kind::Gauge,
        "The size the disk cache uses: cache_size, or what fits on its disk.",
    )
    .sample("coral_cache_usable_bytes", &[], first("usable_bytes"));
    w.family(
        "coral_cache_objects_max",
        Kind::Gauge,
        "The most objects the disk cache holds (cache_objects_max).",
    )
    .sample("coral_cache_objects_max", &[], first("objects_max"));
    w.family(
        "coral_cache_space_errors_total",
        Kind::Counter,
        "Cache writes the disk refused for space (ENOSPC, EDQUOT): evicted, or served uncached.",
    )
    .sample("coral_cache_space_errors_total", &[], first("space_errors"));
    w.family(
        "coral_cache_evictions_total",
        Kind::Counter,
        "Objects evicted to keep the cache within its size.",
    )
    .sample(
        "coral_cache_evictions_total",
        &[],
        sum(&["http", "cache", "evictions"]),
    );
    w.family(
        "coral_resolver_events_total",
        Kind::Counter,
        "The origin-name resolver: lookups started, requests answered from its cache, requests that joined a lookup in flight, queries sent, lookups timed out, requests refused (busy), datagrams ignored (not an answer to our question).",
    );
    for event in RESOLVER_EVENTS {
        w.sample(
            "coral_resolver_events_total",
            &[("event", event)],
            sum(&["http", "resolver", event]),
        );
    }
    w.family(
        "coral_access_log_lines_dropped_total",
        Kind::Counter,
        "Access log lines dropped because the log writer fell behind.",
    )
    .sample(
        "coral_access_log_lines_dropped_total",
        &[],
        sum(&["http", "access_log_dropped"]),
    );
    w.family(
        "coral_http_pointers_total",
        Kind::Counter,
        "Proxy pointers found in the DSHT, by verdict (accepted: signed by the proxy they name, \
         admitted; rejected: forged, unsigned or not admitted, ignored; deferred: over the \
         verification budget). SECURITY.md, \"Threat model\".",
    );
    for verdict in ["accepted", "rejected", "deferred"] {
        w.sample(
            "coral_http_pointers_total",
            &[("verdict", verdict)],
            sum(&["http", "pointers", verdict]),
        );
    }
    // Verified peer bytes (issue 22 items 4-5, `proxy/verified.rs`).
    w.family(
        "coral_verify_events_total",
        Kind::Counter,
        "Verified peer bytes, by event: signed_fills (origin fills this node signed), \
         verified_fills (peer copies received with every signature holding), forged (peer \
         answers refused: a chunk, the end, the signed length or Repr-Digest failed), unsigned \
         (peer answers without records), distrusted (peers or signers caught before, not used), \
         repr_digest_checked and repr_digest_failed (origin bodies against their own \
         Repr-Digest), served_signed and served_unsigned (peer requests answered with records, \
         or 504 for a copy without), resigned (records made again from a stored copy), audits, \
         audit_failed and audit_inconclusive (verified peer copies fetched again from the origin \
         and compared, `[proxy] audit_per_million`); evidence (item 5 c): evidence_stored \
         (forgeries this node proved and announced in the DSHT), evidence_served, \
         evidence_lookups (DSHT gets of signers' evidence keys), evidence_fetched (accusers' \
         records fetched), evidence_origin_checks (origin requests spent checking them), \
         evidence_true, evidence_false and evidence_inconclusive (checks' outcomes; a false one \
         ignores its accuser), evidence_distrusted (signers distrusted by others' evidence), \
         evidence_refused (peer copies refused: their signer proven a forger), evidence_pending \
         (peer copies not used while evidence against their signer was checked). SECURITY.md, \
         \"Threat model\".",
    );
    for event in VERIFY_EVENTS {
        w.sample(
            "coral_verify_events_total",
            &[("event", event)],
            sum(&["http", "verify", event]),
        );
    }
    w.family(
        "coral_verify_audit_bytes_total",
        Kind::Counter,
        "Body bytes audits read from origins (item 5 b: their cost).",
    )
    .sample(
        "coral_verify_audit_bytes_total",
        &[],
        sum(&["http", "verify", "audit_bytes"]),
    );
    w.family(
        "coral_verify_evidence_origin_bytes_total",
        Kind::Counter,
        "Body bytes checks of evidence read from origins (item 5 c: their cost).",
    )
    .sample(
        "coral_verify_evidence_origin_bytes_total",
        &[],
        sum(&["http", "verify", "evidence_origin_bytes"]),
    );
    w.family(
        "coral_verify_peer_bytes_total",
        Kind::Counter,
        "Body bytes received from peers, each chunk verified before use.",
    )
    .sample(
        "coral_verify_peer_bytes_total",
        &[],
        sum(&["http", "verify", "verified_bytes"]),
    );
}

/// The events of `coral_verify_events_total` (`proxy::verified::VerifyCounters`).
pub const VERIFY_EVENTS: [&str; 24] = [
    "signed_fills",
    "verified_fills",
    "forged",
    "unsigned",
    "distrusted",
    "repr_digest_checked",
    "repr_digest_failed",
    "served_signed",
    "served_unsigned",
    "resigned",
    "audits",
    "audit_failed",
    "audit_inconclusive",
    // Evidence (item 5 c, `proxy/evidence.rs`).
    "evidence_stored",
    "evidence_served",
    "evidence_lookups",
    "evidence_fetched",
    "evidence_origin_checks",
    "evidence_true",
    "evidence_false",
    "evidence_inconclusive",
    "evidence_distrusted",
    "evidence_refused",
    "evidence_pending",
];

/// The origin-name resolver's events (`coral_resolver_events_total`),
/// as `proxy::resolve::Resolver::counters_json` names them.
pub const RESOLVER_EVENTS: &[&str] = &[
    "lookups",
    "cache_hits",
    "joined",
    "queries",
    "timeouts",
    "busy",
    "ignored",
];

/// Reasons an origin fetch fails (`coral_http_origin_errors_total`).
pub const ORIGIN_ERROR_REASONS: [&str; 8] = [
    "resolve",
    "connect",
    "timeout",
    "truncated",
    "malformed",
    "io",
    "status_5xx",
    "too_large",
];

/// dnssrv's fields rendered by name (`coral::dns::Counters`); any other
/// numeric field a newer dnssrv reports is rendered as
/// `coral_dns_events_total{event="<field>"}`.
const DNS_KNOWN: [(&str, &str, &str); 20] = [
    (
        "probes_sent",
        "coral_dns_rtt_probes_total",
        "Client probes (RTT and last hops, §3.1) asked of the runtime, within the probe limits.",
    ),
    (
        "probes_refused",
        "coral_dns_rtt_probes_dropped_total",
        "Client probes refused: by the probe limiter (per destination, per /24, per second) or a full probe queue.",
    ),
    (
        "probes_answered",
        "coral_dns_clients_measured_total",
        "Client probes whose destination answered (its RTT measured).",
    ),
    (
        "answers_proxied",
        "coral_dns_answers_with_proxies_total",
        "Answers that named proxies (§3.1).",
    ),
    (
        "answers_no_proxy",
        "coral_dns_answers_without_proxies_total",
        "Answers for proxy names with no live proxy (NODATA).",
    ),
    (
        "answers_hinted",
        "coral_dns_answers_hinted_total",
        "Answers whose first proxy was found through a clustering hint near the client.",
    ),
    (
        "hint_lookups",
        "coral_dns_hint_lookups_total",
        "DSHT lookups of the hint keys of a client's last hops and network.",
    ),
    (
        "hint_nodes_found",
        "coral_dns_hint_nodes_found_total",
        "Nodes those hint lookups found near clients.",
    ),
    (
        "held",
        "coral_dns_held_total",
        "Queries held while candidate proxies were pinged (no live proxy).",
    ),
    (
        "held_answered",
        "coral_dns_held_answered_total",
        "Held queries answered with a proxy verified in the meantime.",
    ),
    (
        "held_expired",
        "coral_dns_held_expired_total",
        "Held queries answered at their deadline without a live proxy.",
    ),
    (
        "held_refused",
        "coral_dns_held_refused_total",
        "Queries not held because held_max were already held.",
    ),
    (
        "checks_sent",
        "coral_dns_liveness_checks_total",
        "Liveness checks (DSHT pings) of proxies an answer named that had not answered lately (issue 24).",
    ),
    (
        "checks_refused",
        "coral_dns_liveness_checks_refused_total",
        "Liveness checks due but refused by their rate or table bound.",
    ),
    (
        "proxies_withheld",
        "coral_dns_proxies_withheld_total",
        "Proxies left out of answers because a liveness check of them went unanswered.",
    ),
    (
        "truncated",
        "coral_dns_truncated_total",
        "UDP answers sent truncated (TC) for size.",
    ),
    (
        "dropped",
        "coral_dns_dropped_total",
        "Datagrams not answered: responses, runts, rate-limited (RRL).",
    ),
    (
        "rrl_dropped",
        "coral_dns_rrl_dropped_total",
        "Responses dropped by response rate limiting.",
    ),
    (
        "rrl_slipped",
        "coral_dns_rrl_slipped_total",
        "Rate-limited answers sent truncated (RRL slip).",
    ),
    (
        "oversized",
        "coral_dns_oversized_total",
        "UDP datagrams longer than dnssrv reads (limits::DNS.udp_query_bytes_max), dropped unread.",
    ),
];

/// dnssrv's families (§3.1) from the cores' `dns` parts (absent when the
/// node serves no DNS: then nothing is written).
pub fn render_dns(w: &mut Writer, cores: &[serde_json::Value]) {
    if cores.iter().all(|c| c["dns"].is_null()) {
        return;
    }
    let sum = |path: &[&str]| sum_at(cores, path);
    w.family(
        "coral_dns_queries_received_total",
        Kind::Counter,
        "DNS messages handed to dnssrv (answered or not).",
    )
    .sample(
        "coral_dns_queries_received_total",
        &[],
        sum(&["dns", "queries"]),
    );
    let mut answers = std::collections::BTreeMap::<(String, String, String), u64>::new();
    for c in cores {
        for a in c["dns"]["answers"].as_array().into_iter().flatten() {
            let key = (
                a[0].as_str().unwrap_or("OTHER").to_string(),
                a[1].as_str().unwrap_or("OTHER").to_string(),
                a[2].as_str().unwrap_or("none").to_string(),
            );
            *answers.entry(key).or_default() += a[3].as_u64().unwrap_or(0);
        }
    }
    w.family(
        "coral_dns_queries_total",
        Kind::Counter,
        "DNS queries answered, by query type, rcode and the client's level (the level whose proxies \
         the answer named; none for answers without proxies).",
    );
    for ((t, r, l), n) in &answers {
        w.sample(
            "coral_dns_queries_total",
            &[("qtype", t), ("rcode", r), ("level", l)],
            *n as f64,
        );
    }
    for (field, name, help) in DNS_KNOWN {
        w.family(name, Kind::Counter, help)
            .sample(name, &[], sum(&["dns", field]));
    }
    w.family(
        "coral_dns_held_queries",
        Kind::Gauge,
        "Queries held now while candidate proxies are pinged.",
    )
    .sample("coral_dns_held_queries", &[], sum(&["dns", "held_now"]));
    let mut others = std::collections::BTreeMap::<String, f64>::new();
    for c in cores {
        if let Some(o) = c["dns"].as_object() {
            for (k, v) in o {
                // Per type, rcode and level: in `coral_dns_queries_total`.
                let by_label = k.starts_with("queries_")
                    || k.starts_with("rcode_")
                    || k.starts_with("client_level");
                let known = k == "queries"
                    || k == "answers"
                    || k == "held_now"
                    || by_label
                    || DNS_KNOWN.iter().any(|d| d.0 == k);
                if let (false, Some(n)) = (known, v.as_u64()) {
                    *others.entry(k.clone()).or_default() += n as f64;
                }
            }
        }
    }
    if !others.is_empty() {
        w.family(
            "coral_dns_events_total",
            Kind::Counter,
            "Other dnssrv counters, by name.",
        );
        for (k, n) in &others {
            w.sample("coral_dns_events_total", &[("event", k)], *n);
        }
    }
}

/// Renders the node's and the DSHT's families from every core's metrics
/// JSON and core 0's levels.
pub fn render_dsht(cores: &[serde_json::Value], levels: &serde_json::Value, ready: bool) -> Writer {
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
        "coral_dsht_identities_total",
        Kind::Counter,
        "Peers' identities verified, by verdict (rejected: forged or not admitted, kept out of \
         the routing tables). SECURITY.md, \"Threat model\".",
    );
    for verdict in ["accepted", "rejected", "deferred"] {
        w.sample(
            "coral_dsht_identities_total",
            &[("verdict", verdict)],
            sum(&["stats", "identities", verdict]),
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

    w.family(
        "coral_dsht_operation_duration_seconds",
        Kind::Histogram,
        "Client gets and puts (the `coral get` and `coral put` commands), start to outcome.",
    );
    for op in ["get", "put"] {
        let mut h = Histogram::default();
        for c in cores {
            h.merge(&Histogram::from_json(&c["dsht_durations"][op]));
        }
        h.write(
            &mut w,
            "coral_dsht_operation_duration_seconds",
            &[("op", op)],
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
    w
}

// ---- Fills that lose their source (issue 24 items 1 and 4) -------------------------

/// Why a fill was cut (`coral::proxy::fetch::ResumeStep::Cut`'s reasons):
/// `coral_http_fills_cut_total{reason}`.
pub const FILL_CUT_REASONS: [&str; 4] = [
    "no_validator",
    "sources_exhausted",
    "representation_changed",
    "claim_loop",
];

/// One core's counts of fills that lost their source.
#[derive(Default)]
struct FillCounters {
    /// Resumes from a peer, from the origin.
    resumes: [u64; 2],
    /// Fills cut, by `FILL_CUT_REASONS`.
    fills_cut: [u64; FILL_CUT_REASONS.len()],
    /// Responses cut mid-body because their copy's fill was cut.
    responses_cut: u64,
}

thread_local! {
    static FILL: RefCell<FillCounters> = RefCell::new(FillCounters::default());
}

/// Counts a fill that resumed from a peer (`from_peer`) or the origin.
pub fn count_resume(from_peer: bool) {
    FILL.with(|f| f.borrow_mut().resumes[usize::from(!from_peer)] += 1);
}

/// Counts a fill cut for `reason` (one of `FILL_CUT_REASONS`).
pub fn count_fill_cut(reason: &str) {
    FILL.with(|f| {
        if let Some(i) = FILL_CUT_REASONS.iter().position(|r| *r == reason) {
            f.borrow_mut().fills_cut[i] += 1;
        }
    });
}

/// Counts a response cut mid-body because its copy's fill was cut.
pub fn count_response_cut() {
    FILL.with(|f| f.borrow_mut().responses_cut += 1);
}

/// This core's fill counts, as sent over the mesh (in the `http` part).
pub fn fill_json() -> serde_json::Value {
    FILL.with(|f| {
        let f = f.borrow();
        let cut: serde_json::Map<String, serde_json::Value> = FILL_CUT_REASONS
            .iter()
            .zip(f.fills_cut.iter())
            .map(|(r, n)| (r.to_string(), (*n).into()))
            .collect();
        serde_json::json!({
            "resumes": {"peer": f.resumes[0], "origin": f.resumes[1]},
            "fills_cut": cut,
            "responses_cut": f.responses_cut,
        })
    })
}

/// The families of fills that lost their source, from the cores' `http`
/// parts: resumes by source, fills and responses cut.
pub fn render_fill(w: &mut Writer, cores: &[serde_json::Value]) {
    let sum = |path: &[&str]| sum_at(cores, path);
    w.family(
        "coral_http_resumes_total",
        Kind::Counter,
        "Fills that lost their source mid-body and continued from another at the byte reached \
         (Range with If-Range), by the new source: a peer or the origin.",
    );
    for source in ["peer", "origin"] {
        w.sample(
            "coral_http_resumes_total",
            &[("source", source)],
            sum(&["http", "fill", "resumes", source]),
        );
    }
    w.family(
        "coral_http_fills_cut_total",
        Kind::Counter,
        "Fills cut mid-body because no source could continue the same representation, by reason.",
    );
    for reason in FILL_CUT_REASONS {
        w.sample(
            "coral_http_fills_cut_total",
            &[("reason", reason)],
            sum(&["http", "fill", "fills_cut", reason]),
        );
    }
    w.family(
        "coral_http_responses_cut_total",
        Kind::Counter,
        "Responses closed before their body ended (a truncation the client can detect), by \
         reason (fill_cut: the copy's fill lost its source and none could continue it).",
    )
    .sample(
        "coral_http_responses_cut_total",
        &[("reason", "fill_cut")],
        sum(&["http", "fill", "responses_cut"]),
    );
}

#[cfg(test)]
mod tests {
    /// The bucket found with the first bound's shortcut is the binary
    /// search's, at every bound, beside it and between.
    #[test]
    fn buckets_with_the_shortcut_are_the_searched_ones() {
        let mut at = vec![0, 1, u64::MAX];
        for b in super::DURATION_BUCKETS_NANOS {
            at.extend([b - 1, b, b + 1, b / 2 + 3]);
        }
        for ns in at {
            assert_eq!(
                super::bucket_of_nanos(ns),
                super::DURATION_BUCKETS_NANOS.partition_point(|&b| b < ns),
                "{ns}"
            );
        }
    }

    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_merge() {
        let mut a = Histogram::default();
        a.observe(std::time::Duration::from_micros(100)); // on the first bound
        a.observe(std::time::Duration::from_millis(3));
        let mut b = Histogram::default();
        b.observe(std::time::Duration::from_secs(60)); // past the last bound
        a.merge(&b);
        let back = Histogram::from_json(&a.to_json());
        assert_eq!(back, a);
        let mut w = Writer::default();
        w.family("d_seconds", Kind::Histogram, "D.");
        a.write(&mut w, "d_seconds", &[("op", "get")]);
        let text = w.finish();
        assert!(text.contains("# TYPE d_seconds histogram\n"), "{text}");
        assert!(
            text.contains("d_seconds_bucket{op=\"get\",le=\"0.0001\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("d_seconds_bucket{op=\"get\",le=\"0.0025\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("d_seconds_bucket{op=\"get\",le=\"0.005\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("d_seconds_bucket{op=\"get\",le=\"30\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("d_seconds_bucket{op=\"get\",le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("d_seconds_sum{op=\"get\"} 60.0031\n"),
            "{text}"
        );
        assert!(text.contains("d_seconds_count{op=\"get\"} 3\n"), "{text}");
    }

    #[test]
    fn http_counters_bound_their_series() {
        let mut h = HttpCounters::default();
        let d = std::time::Duration::from_millis(1);
        h.record("GET", 200, CacheResult::Local, 10, d);
        h.record("GET", 200, CacheResult::Local, 5, d);
        h.record("GET", 200, CacheResult::Peer(1), 5, d);
        assert_eq!(
            h.requests,
            vec![("GET", 200, "local", 2), ("GET", 200, "peer_l1", 1)]
        );
        assert_eq!(h.response_bytes, 20);
        for s in 0..1000u16 {
            h.record("GET", s, CacheResult::Origin, 0, d);
        }
        assert_eq!(h.requests.len(), HTTP_SERIES_MAX);
        let total: u64 = h.requests.iter().map(|r| r.3).sum();
        assert_eq!(total, 1003);
        assert_eq!(method_label("BREW"), "OTHER");
        assert_eq!(method_label("POST"), "POST");
    }

    /// The fast path's count of a hit is `record`'s, series full or not.
    #[test]
    fn a_counted_hit_is_a_recorded_one() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for fill in [0usize, 3, HTTP_SERIES_MAX] {
            let (mut a, mut b) = (HttpCounters::default(), HttpCounters::default());
            for s in 0..fill as u16 {
                for h in [&mut a, &mut b] {
                    h.record(
                        "POST",
                        300 + s,
                        CacheResult::Origin,
                        1,
                        std::time::Duration::from_millis(1),
                    );
                }
            }
            for _ in 0..500 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let head_only = rng & 1 == 1;
                let (bytes, nanos) = (rng >> 40, (rng >> 8) % 3_000_000_000);
                a.record_hit(head_only, bytes, nanos);
                let method = if head_only { "HEAD" } else { "GET" };
                b.record(
                    method,
                    200,
                    CacheResult::Local,
                    bytes,
                    std::time::Duration::from_nanos(nanos),
                );
                if rng % 7 == 0 {
                    for h in [&mut a, &mut b] {
                        h.record(
                            "GET",
                            404,
                            CacheResult::Origin,
                            3,
                            std::time::Duration::from_millis(2),
                        );
                    }
                }
            }
            assert_eq!(a.requests, b.requests);
            assert_eq!(a.response_bytes, b.response_bytes);
            assert_eq!(a.duration, b.duration);
        }
    }

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

    #[test]
    fn fills_resumed_and_cut_are_counted_by_source_and_reason_issue_24() {
        count_resume(true);
        count_resume(false);
        count_resume(false);
        count_fill_cut("no_validator");
        count_fill_cut("not a reason");
        count_response_cut();
        let core = serde_json::json!({"http": {"fill": fill_json()}});
        let mut w = Writer::default();
        render_fill(&mut w, &[core.clone(), core]);
        let text = w.finish();
        for line in [
            "coral_http_resumes_total{source=\"peer\"} 2",
            "coral_http_resumes_total{source=\"origin\"} 4",
            "coral_http_fills_cut_total{reason=\"no_validator\"} 2",
            "coral_http_fills_cut_total{reason=\"sources_exhausted\"} 0",
            "coral_http_responses_cut_total{reason=\"fill_cut\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert_eq!(CacheResult::Cut.label(), "cut");
    }
}
