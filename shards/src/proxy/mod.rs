//! CoralProxy on every core (NSDI 2004 §2.2, §3.2).
//!
//! Each core runs an HTTP listener on the proxy address (one socket per core
//! in a SO_REUSEPORT group; the kernel spreads connections). A request is
//! parsed and named by the core crate (`coral::proxy`), then:
//!
//! - **Hit.** `CoreCache::lookup` on the core that took the connection (no
//!   lock, no hop): a fresh complete object is sent from the cache's mapping;
//!   one still being written is streamed as its bytes arrive (cut-through).
//! - **Miss or stale.** The request goes to the key's *owning* core
//!   (`steer::shard_of_key`) over the mesh (`ProxyMsg::Miss`). That core
//!   alone runs the fetch policy for its keys (`coral::proxy::fetch::FetchPolicy`):
//!   DSHT get → peers (with `Coral-No-Forward: 1`) → claim → origin, one
//!   fetch per object however many wait (collapsed forwarding). The fetch
//!   writes into the cache; as soon as the object exists every waiter is
//!   told (`ProxyMsg::Answer`) and streams it from the cache on its own core.
//!
//! Pointers (§3.2): 20 s to this proxy while fetching, renewed; 1 h once
//! complete, renewed while the object stays cached (`[proxy]
//! fetching_pointer_ttl_secs`, `complete_pointer_ttl_secs`). A URL's first
//! `Vary` variant, stored under the URL's key, has a second pointer under
//! its variant key, renewed alike, and put again after a restart.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use coral::proxy::fetch::{Fail, FetchConfig, FetchPolicy};
use coral::proxy::http::{Limits, RequestHead};
use coral::proxy::names::{Origin, Zones};
use coral::Id;
use glommio::channels::local_channel;

use crate::cache::CoreCache;
use crate::config::{NodeConfig, ProxyConfig};
use crate::runtime::Shard;
use crate::status::sink::ProxySnapshot;

mod evidence;
pub(crate) mod fetcher;
mod ready;
pub mod resolve;
mod server;
mod stored;
pub mod upstream;
mod verified;

/// Longest a client waits for the owning core's answer to a miss (DSHT
/// lookups, a claim, peers and the origin's first byte all fit in it).
const MISS_TIMEOUT: Duration = Duration::from_secs(60);
/// Objects per core whose hits take the fast path (`server::HotEntry`):
/// slots of the direct-mapped table from Host and target bytes to the key.
const HOT_OBJECTS_MAX: usize = crate::limits::PROXY.hot_objects_max;
/// Milliseconds a message waits for this core's proxy to start.
const STARTUP_WAIT_TICKS: u32 = 10_000;
/// How long after start the cached objects' pointers are put.
const ADOPT_AFTER: Duration = Duration::from_secs(2);
/// How often pointers are renewed and the policy looked at.
const TICK: Duration = Duration::from_secs(1);

thread_local! {
    /// This core's proxy (each executor is one thread).
    static CORE: RefCell<Option<Rc<ProxyCore>>> = const { RefCell::new(None) };
}

/// This core's proxy, shared (for work spawned from a `&self` path).
fn this_core() -> Option<Rc<ProxyCore>> {
    CORE.with(|c| c.borrow().clone())
}

/// A miss handed to the key's owning core.
#[derive(Clone)]
pub struct Job {
    /// The key fetched: SHA-1 of the canonical URL, or of a `Vary` variant
    /// (`coral::proxy::vary`).
    pub key: Id,
    /// SHA-1 of the canonical URL.
    pub url_key: Id,
    /// The origin named by the Coralized host.
    pub origin: Origin,
    /// The client's request, as a GET (what the origin or a peer is asked).
    pub request: RequestHead,
    /// A peer's request (`Coral-No-Forward`): answer only from the cache or
    /// a fetch already under way.
    pub no_forward: bool,
    /// The address of the client whose miss started the job: its lookups
    /// count against `RESOLVE.waiters_per_client_max` (`resolve.rs`).
    pub client: Option<std::net::IpAddr>,
}

/// The owning core's answer to a miss.
#[derive(Debug)]
pub enum MissAnswer {
    /// The object is in the cache (complete or arriving): serve it.
    /// `peer`: it came (or comes) from a peer proxy, found at that level.
    Ready {
        /// Fetched from a peer, not the origin: the cluster level at which
        /// the DSHT named it (0 for a peer found by a lost claim).
        peer: Option<coral::dsht::node::Level>,
        /// The request joined a fetch another request started (RFC 9211
        /// `collapsed`).
        collapsed: bool,
        /// The status the next hop (origin or peer) answered the fetch
        /// with, if one answered (RFC 9211 `fwd-status`).
        fwd_status: Option<u16>,
    },
    /// As `Ready`, from the origin: first forward these interim (1xx)
    /// responses to an HTTP/1.1 client (103 Early Hints; never stored).
    ReadyAfterInterim {
        /// Always `None` (from the origin); for `Lookup::filled`.
        peer: Option<coral::dsht::node::Level>,
        /// The interim responses, as a client gets them.
        interim: std::sync::Arc<Vec<u8>>,
        /// As `Ready`'s.
        collapsed: bool,
        /// As `Ready`'s.
        fwd_status: Option<u16>,
    },
    /// The origin failed; the stale copy in the cache may be served.
    Stale {
        /// The origin's status, if it answered (RFC 9211 `fwd-status`).
        fwd_status: Option<u16>,
    },
    /// The origin's answer may not be stored: fetch it for this client alone.
    Uncacheable,
    /// The origin's answer may not be stored, and this client's request is
    /// the one that fetched it: here it is, its head read, to relay to this
    /// client alone (one client request, one origin request).
    Pass(Box<upstream::Handover>),
    /// The origin's answer may not be stored under the key it makes (its
    /// `Vary` does not account for what was sent: `keyed::check_key`), and
    /// this client's request made it: relay it to this client alone, and
    /// do not remember the object as uncacheable.
    PassOnce(Box<upstream::Handover>),
    /// That answer went to another request: look up and fill again.
    Refill,
    /// Answer the client with this error.
    Error(Fail),
    /// The origin's own error answer, not stored: relay it as it is (issue
    /// 26 item 1), to every request that waited for the fetch.
    Relayed(std::sync::Arc<Relayed>),
}

impl MissAnswer {
    /// The answer with the status the next hop answered the fetch with.
    pub fn with_fwd_status(mut self, status: Option<u16>) -> MissAnswer {
        if let MissAnswer::Ready { fwd_status, .. }
        | MissAnswer::ReadyAfterInterim { fwd_status, .. }
        | MissAnswer::Stale { fwd_status } = &mut self
        {
            *fwd_status = status;
        }
        self
    }

    /// The answer as a request that joined another's fetch gets it: a
    /// `Ready` one says so (RFC 9211 `collapsed`).
    pub fn joined(mut self) -> MissAnswer {
        if let MissAnswer::Ready { collapsed, .. }
        | MissAnswer::ReadyAfterInterim { collapsed, .. } = &mut self
        {
            *collapsed = true;
        }
        self
    }
}

/// An origin's answer relayed without being stored: its head (hop-by-hop
/// fields and cookies removed) and its whole body (at most
/// `limits::RELAY.error_body_bytes_max`).
#[derive(Debug)]
pub struct Relayed {
    /// The head as stored heads are (`policy::head_to_store`).
    pub head: coral::proxy::http::ResponseHead,
    /// The body, decoded from its transfer coding.
    pub body: Vec<u8>,
}

/// CoralProxy's messages between cores.
pub enum ProxyMsg {
    /// Core `from` asks the owning core for `job`; answer as request `req`.
    Miss {
        /// The asking core.
        from: usize,
        /// Its request number.
        req: u64,
        /// What to fetch.
        job: Box<Job>,
    },
    /// An origin's answer to a HEAD (passed for one client): freshen the
    /// stored copy of `key` with its fields if it describes the same
    /// representation (RFC 9111 §4.3.5).
    Freshen {
        /// The object's key.
        key: Id,
        /// The HEAD response's head.
        head: Box<coral::proxy::http::ResponseHead>,
    },
    /// The answer to request `req`.
    Answer {
        /// The request number.
        req: u64,
        /// The answer.
        answer: MissAnswer,
    },
}

impl std::fmt::Debug for ProxyMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxyMsg::Miss { from, req, job } => {
                write!(f, "Miss {{ from: {from}, req: {req}, key: {} }}", job.key)
            }
            ProxyMsg::Answer { req, answer } => write!(f, "Answer {{ req: {req}, {answer:?} }}"),
            ProxyMsg::Freshen { key, .. } => write!(f, "Freshen {{ key: {key} }}"),
        }
    }
}

/// Counters of one core's proxy.
#[derive(Default)]
pub struct ProxyStats {
    /// Requests answered from a fresh complete object.
    pub hits: Cell<u64>,
    /// Requests that went to the owning core.
    pub misses: Cell<u64>,
    /// Fetches from origins started on this core.
    pub origin_fetches: Cell<u64>,
    /// Fetches from peers started on this core.
    pub peer_fetches: Cell<u64>,
    /// Malformed requests (answered 4xx, connection closed).
    pub bad_requests: Cell<u64>,
    /// Fetches from peers started on this core, by the level at which the
    /// DSHT named the peer (0 for a peer named by a lost claim).
    pub peer_fetches_by_level: [Cell<u64>; 3],
    /// Origin fetches that failed, by reason (`metrics::ORIGIN_ERROR_REASONS`).
    pub origin_errors: [Cell<u64>; crate::metrics::ORIGIN_ERROR_REASONS.len()],
    /// Uncacheable requests fetched from the origin for one client.
    pub origin_passes: Cell<u64>,
    /// Client connections accepted.
    pub connections_accepted: Cell<u64>,
    /// Client connections closed at once (`connections_max` reached).
    pub connections_refused: Cell<u64>,
    /// Responses by method, status and cache result; bytes; durations.
    pub http: RefCell<crate::metrics::HttpCounters>,
}

impl ProxyStats {
    /// Counts an origin fetch that failed for `reason` (one of
    /// `metrics::ORIGIN_ERROR_REASONS`).
    pub fn origin_error(&self, reason: &str) {
        if let Some(i) = crate::metrics::ORIGIN_ERROR_REASONS
            .iter()
            .position(|r| *r == reason)
        {
            self.origin_errors[i].set(self.origin_errors[i].get() + 1);
        }
    }
}

/// Closes this core's client connections idle between requests, for a
/// node withdrawing (SIGTERM, `serve::withdraw_watch`); returns how many.
pub fn close_idle_connections() -> usize {
    let Some(pc) = CORE.with(|c| c.borrow().clone()) else {
        return 0;
    };
    let mut fds = Vec::new();
    pc.idle.borrow_mut().close_idle(&mut fds);
    for &fd in &fds {
        // Its pending read ends; its task closes it.
        crate::accept::shut_down(fd, false);
    }
    fds.len()
}

/// This core's proxy numbers for `/metrics` (`Call::Metrics`); null before
/// the proxy started.
pub fn metrics_json() -> serde_json::Value {
    let Some(pc) = CORE.with(|c| c.borrow().clone()) else {
        return serde_json::Value::Null;
    };
    let s = &pc.stats;
    let mut v = s.http.borrow().to_json();
    let cache = pc.cache.stats();
    let errors: serde_json::Map<String, serde_json::Value> = crate::metrics::ORIGIN_ERROR_REASONS
        .iter()
        .zip(s.origin_errors.iter())
        .map(|(r, c)| (r.to_string(), c.get().into()))
        .collect();
    let extra = serde_json::json!({
        "hits": s.hits.get(),
        "misses": s.misses.get(),
        "origin_fetches": s.origin_fetches.get(),
        "origin_passes": s.origin_passes.get(),
        "origin_errors": errors,
        "resolver": pc.resolver.counters_json(),
        "peer_fetches": s.peer_fetches_by_level.iter().map(Cell::get).collect::<Vec<_>>(),
        "bad_requests": s.bad_requests.get(),
        "connections_open": pc.connections.get(),
        "connections_accepted": s.connections_accepted.get(),
        "connections_refused": s.connections_refused.get(),
        "cache": {
            "objects": cache.objects,
            "bytes": cache.bytes,
            "object_bytes": cache.object_bytes,
            "size_bytes": pc.cfg.cache_size_bytes,
            "evictions": cache.evictions,
            "usable_bytes": cache.usable_bytes,
            "objects_max": cache.objects_max,
            "space_errors": cache.space_errors,
        },
        "access_log_dropped": crate::accesslog::dropped(),
        "pointers": pc.fetch.pointer_stats(),
        "verify": pc.verify.to_json(),
        "fill": crate::metrics::fill_json(),
    });
    if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

/// One core's proxy.
pub struct ProxyCore {
    shard: Rc<Shard>,
    core: usize,
    cores: usize,
    cache: CoreCache,
    zones: Zones,
    /// The suffix Location headers and links are rewritten with.
    suffix: String,
    http: SocketAddr,
    node_name: String,
    cfg: ProxyConfig,
    limits: Limits,
    resolver: resolve::Resolver,
    pool: upstream::Pool,
    timeouts: upstream::Timeouts,
    connections: Cell<usize>,
    next_req: Cell<u64>,
    replies: RefCell<HashMap<u64, local_channel::LocalSender<MissAnswer>>>,
    fetch: fetcher::Fetcher,
    stats: ProxyStats,
    /// Decoded stored heads of recently served objects, with the raw bytes
    /// they were decoded from (a hit compares bytes instead of parsing);
    /// at most `DECODED_HEADS_MAX`, each of at most `DECODED_HEAD_BYTES_MAX`.
    heads: RefCell<stored::DecodedHeads>,
    /// Host and target bytes of recently hit objects → their key and built
    /// hit head (the fast path of a hit, `server::Conn::hot_hit`).
    hot: RefCell<coral::proxy::hot::HotTable<server::HotEntry>>,
    /// The last plain request this core parsed, with its parse and its
    /// slot in `hot` (issue 27: a repeated request is not parsed again).
    plain_memo: RefCell<coral::proxy::hot::PlainMemo>,
    /// `Vary`: the variants of each URL this core let be fetched
    /// (`vary_variants_max`).
    variants: RefCell<coral::proxy::vary::VariantBudget>,
    /// Objects recently found uncacheable: fetched for their client alone.
    passes: RefCell<coral::proxy::pass::PassMemory>,
    /// Per origin host, the request fields its answers vary on: sent with
    /// a URL's first fill (`coral::proxy::keyed::LearnedVary`).
    learned_vary: RefCell<coral::proxy::keyed::LearnedVary>,
    /// Client connections, each in a phase since a tick, or busy: the
    /// deadline sweep (`server::deadline_sweep`) closes those past their
    /// phase's deadline, the accept loop evicts from it at the cap.
    idle: RefCell<coral::proxy::idle::ConnTable>,
    /// Client connections' readiness (`ready.rs`); None if epoll failed.
    ready: Option<Rc<ready::Readiness>>,
    /// Verified peer bytes' counters (`verified.rs`).
    verify: verified::VerifyCounters,
}

pub use crate::clock::unix_now;

/// Starts the proxy on this core: its listener, its fetch policy and its
/// pointer-renewal timer.
pub fn spawn(shard: Rc<Shard>, config: &NodeConfig, cache: CoreCache) -> Result<(), String> {
    let cfg = config.proxy.clone();
    let zones = Zones {
        zone: config.zone.clone(),
        alias: config.alias.clone(),
    };
    let suffix = config.alias.clone().unwrap_or_else(|| config.zone.clone());
    // Its objects are keyed by hashes of URLs anyone can ask for: a secret
    // keys the map's hash (SECURITY.md, hash flooding).
    let secret = crate::runtime::seed_from_os().to_le_bytes();
    let fetch_config = FetchConfig {
        fetching_pointer_ttl_secs: cfg.fetching_pointer_ttl_secs,
        complete_pointer_ttl_secs: cfg.complete_pointer_ttl_secs,
        ..FetchConfig::default()
    };
    // The pointer peers follow: the address they reach (a wildcard bind
    // is replaced by `public_addr`'s IP).
    let policy = FetchPolicy::new(fetch_config, config.http_public_addr())
        .with_hasher(coral::dsht::id::keyed_hasher(&secret, "fetch objects"))
        .with_identity(&shard.trust.identity, shard.trust.verifier());
    let pc = Rc::new(ProxyCore {
        core: shard.core,
        cores: shard.cores,
        shard: shard.clone(),
        cache,
        zones,
        suffix,
        http: config.http_public_addr(),
        node_name: format!("{}", config.http_public_addr()),
        resolver: resolve::Resolver::new(
            &cfg.resolve,
            Duration::from_secs(cfg.resolve_ttl_secs),
            cfg.allow_private_origins,
        )
        .with_servers(&cfg.resolvers),
        timeouts: upstream::Timeouts {
            connect: Duration::from_millis(cfg.connect_timeout_ms),
            first_byte: Duration::from_millis(cfg.first_byte_timeout_ms),
            idle: Duration::from_millis(cfg.idle_timeout_ms),
        },
        cfg,
        limits: Limits::default(),
        pool: upstream::Pool::default(),
        connections: Cell::new(0),
        next_req: Cell::new(0),
        replies: RefCell::new(HashMap::new()),
        fetch: fetcher::Fetcher::new(policy),
        stats: ProxyStats::default(),
        heads: RefCell::new(stored::DecodedHeads::new(
            stored::DECODED_HEADS_MAX,
            stored::DECODED_HEAD_BYTES_MAX,
        )),
        hot: RefCell::new(coral::proxy::hot::HotTable::new(
            HOT_OBJECTS_MAX,
            coral::dsht::id::keyed_hasher(&secret, "hot objects"),
        )),
        plain_memo: RefCell::new(coral::proxy::hot::PlainMemo::new(&Limits::default())),
        variants: RefCell::new(coral::proxy::vary::VariantBudget::new(
            config.proxy.vary_variants_max,
            coral::dsht::id::keyed_hasher(&secret, "vary variants"),
        )),
        passes: RefCell::new(coral::proxy::pass::PassMemory::new(
            coral::dsht::id::keyed_hasher(&secret, "hit-for-pass"),
        )),
        learned_vary: RefCell::new(coral::proxy::keyed::LearnedVary::new(
            coral::dsht::id::keyed_hasher(&secret, "learned vary"),
        )),
        idle: RefCell::new(coral::proxy::idle::ConnTable::new()),
        ready: match ready::Readiness::new() {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "proxy: no epoll set; client reads wait through the ring");
                None
            }
        },
        verify: verified::VerifyCounters::default(),
    });
    if let Some(r) = &pc.ready {
        glommio::spawn_local(ready::run(r.clone())).detach();
    }
    let listener = glommio::net::TcpListener::bind(config.http_addr())
        .map_err(|e| format!("cannot bind the HTTP address {}: {e}", config.http_addr()))?;
    // Keep what other services (dnssrv) advertise.
    let services = shard
        .node()
        .services()
        .with(coral::dsht::wire::Services::HTTP);
    shard.set_services(services);
    CORE.with(|c| *c.borrow_mut() = Some(pc.clone()));
    glommio::spawn_local(server::accept_loop(pc.clone(), listener)).detach();
    glommio::spawn_local(server::deadline_sweep(pc.clone())).detach();
    if crate::accesslog::enabled() {
        let shard = pc.shard.clone();
        glommio::spawn_local(crate::accesslog::flush_loop(move || shard.stopping())).detach();
    }
    glommio::spawn_local(async move {
        // Objects kept from before a restart get their pointers once the
        // node has had a moment to join.
        glommio::timer::sleep(ADOPT_AFTER).await;
        pc.adopt_cached();
        let mut round = 0u64;
        while !pc.shard.stopping() {
            pc.tick();
            // Issue 22 item 5 (c): forgers' copies removed, signers in use
            // looked up again.
            pc.evidence_tick(round);
            round += 1;
            glommio::timer::sleep(TICK).await;
        }
    })
    .detach();
    Ok(())
}

/// This core's proxy and cache counters (the status page), if its proxy runs.
pub fn status_snapshot() -> Option<ProxySnapshot> {
    CORE.with(|c| {
        c.borrow().as_ref().map(|pc| ProxySnapshot {
            hits: pc.stats.hits.get(),
            misses: pc.stats.misses.get(),
            origin_fetches: pc.stats.origin_fetches.get(),
            peer_fetches: pc.stats.peer_fetches.get(),
            bad_requests: pc.stats.bad_requests.get(),
            cache: pc.cache.stats(),
        })
    })
}

/// A message for the proxy from another core.
pub fn on_core_msg(shard: &Rc<Shard>, msg: ProxyMsg) {
    let Some(pc) = CORE.with(|c| c.borrow().clone()) else {
        // Another core's proxy started first: hold the message until this
        // core's has (a miss dropped here would leave its client waiting).
        let shard = shard.clone();
        glommio::spawn_local(async move {
            for _ in 0..STARTUP_WAIT_TICKS {
                if CORE.with(|c| c.borrow().is_some()) {
                    on_core_msg(&shard, msg);
                    return;
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            if let ProxyMsg::Miss { from, req, .. } = msg {
                let answer = MissAnswer::Error(Fail::UNAVAILABLE);
                let _ = shard.try_send_to_core(from, ProxyMsg::Answer { req, answer });
            }
        })
        .detach();
        return;
    };
    match msg {
        ProxyMsg::Miss { from, req, job } => {
            pc.fetch_request(*job, fetcher::Waiter::Remote { core: from, req });
        }
        ProxyMsg::Answer { req, answer } => {
            if let Some(tx) = pc.replies.borrow_mut().remove(&req) {
                let _ = tx.try_send(answer);
            }
        }
        ProxyMsg::Freshen { key, head } => pc.freshen_from_head(key, *head),
    }
}

impl ProxyCore {
    /// The decoded stored head of `obj` (cached per core while its bytes
    /// stay the same); `None` if it is not a head this proxy wrote.
    fn stored_head(&self, key: &Id, obj: &crate::cache::ObjectRef) -> Option<Rc<stored::Stored>> {
        self.heads.borrow_mut().get(key, obj.head(), &self.limits)
    }

    /// The key of the variant of `url_key` that `req` selects when the
    /// stored response `st` varies and does not match it, if that variant
    /// may be served or fetched here: it is in the cache, or `vary_variants_max`
    /// leaves room (a peer's request fetches nothing, so needs no room).
    fn variant_for(
        &self,
        url_key: &Id,
        st: &stored::Stored,
        req: &RequestHead,
        no_forward: bool,
    ) -> Option<Id> {
        let vk = coral::proxy::vary::variant_key(url_key, &st.head, req)?;
        let cached = |k: &Id| self.cache.lookup(k).is_some();
        if no_forward || cached(&vk) {
            return Some(vk);
        }
        self.variants
            .borrow_mut()
            .admit(*url_key, vk, unix_now(), cached)
            .then_some(vk)
    }

    /// Hands a miss to the owning core and waits for its answer.
    async fn miss(self: &Rc<Self>, job: Job) -> MissAnswer {
        self.stats.misses.set(self.stats.misses.get() + 1);
        let owner = crate::steer::shard_of_key(&job.key, self.cores);
        let (tx, rx) = local_channel::new_bounded(1);
        let req = self.next_req.get() + 1;
        self.next_req.set(req);
        if owner == self.core {
            self.fetch_request(job, fetcher::Waiter::Local(tx));
        } else {
            self.replies.borrow_mut().insert(req, tx);
            let msg = ProxyMsg::Miss {
                from: self.core,
                req,
                job: Box::new(job),
            };
            if !self.shard.try_send_to_core(owner, msg) {
                self.replies.borrow_mut().remove(&req);
                return MissAnswer::Error(Fail::UNAVAILABLE);
            }
        }
        let answer = glommio::future::timeout(MISS_TIMEOUT, rx.recv()).await;
        self.replies.borrow_mut().remove(&req);
        match answer {
            Ok(Some(a)) => a,
            Ok(None) => MissAnswer::Error(Fail::BAD_GATEWAY),
            Err(_) => MissAnswer::Error(Fail::TIMEOUT),
        }
    }

    /// Sends `answer` to a waiter.
    fn answer(&self, w: fetcher::Waiter, answer: MissAnswer) {
        match w {
            fetcher::Waiter::Local(tx) => {
                let _ = tx.try_send(answer);
            }
            fetcher::Waiter::Remote { core, req } => {
                let msg = ProxyMsg::Answer { req, answer };
                if !self.shard.try_send_to_core(core, msg) {
                    tracing::warn!(core, "proxy answer dropped: mesh channel full");
                }
            }
        }
    }
}

/// A body chunk as the client gets it: through the HTML rewriter when there
/// is one (§2.1: links stay Coralized; `more` false flushes it), else as is.
fn rewritten<'a>(
    rewriter: Option<&mut coral::proxy::rewrite::HtmlRewriter>,
    chunk: &'a [u8],
    more: bool,
    out: &'a mut Vec<u8>,
) -> &'a [u8] {
    match rewriter {
        Some(r) => {
            out.clear();
            r.feed(chunk, out);
            if !more {
                r.finish(out);
            }
            out
        }
        None => chunk,
    }
}
