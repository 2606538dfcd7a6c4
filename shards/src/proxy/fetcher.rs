//! The owning core's side of a miss: `coral::proxy::fetch::FetchPolicy` driven with
//! the DSHT, peers, the origin and the cache (§3.2). What a fetch's answer
//! means (revalidated, served stale, stored, passed, failed with which status)
//! is the core's `coral::proxy::fetch::judge`; this file moves the bytes.
//!
//! One policy per core, for the keys the core owns, so every request for one
//! object on this node meets the same policy: one fetch per object per node
//! (collapsed forwarding). The fetch writes into the cache; when the object
//! begins to exist every waiter is answered and streams it from the cache
//! as it arrives (cut-through), the cache being the one buffer they share.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

use coral::dsht::node::Event;
use coral::proxy::fetch::{self, Action, Fail, FetchPolicy, Lost, ResumeStep, Verdict};
use coral::proxy::http::{Framing, Headers, RequestHead, ResponseHead};
use coral::proxy::keyed::{self, Upstream};
use coral::proxy::policy::{self, Freshness};
use coral::proxy::rewrite;
use coral::Id;
use glommio::channels::local_channel::LocalSender;

use super::upstream;
use super::{stored, unix_now, Job, MissAnswer, ProxyCore};
use crate::cache::ObjectMeta;

/// Someone waiting for a miss's answer.
pub enum Waiter {
    /// A client on this core.
    Local(LocalSender<MissAnswer>),
    /// Request `req` of core `core`.
    Remote {
        /// The core.
        core: usize,
        /// Its request number.
        req: u64,
    },
}

struct JobState {
    job: Job,
    waiters: Vec<Waiter>,
    /// The object is being written: new waiters are answered at once.
    writing: bool,
    /// From a peer, found at this level (for Cache-Status).
    peer: Option<coral::dsht::node::Level>,
    /// A stale complete copy is being revalidated: the DSHT get is skipped
    /// (every holder's pointer names a stale copy) and the claim is made on
    /// the object's revalidation key (`coral::proxy::stale`), so that one
    /// node network-wide asks the origin and the others fetch from it.
    revalidation: bool,
    /// What the fill reads now (the status page's objects in flight).
    progress: Rc<Progress>,
    /// The request that started the job (the first waiter) was answered:
    /// every waiter left joined it (RFC 9211 `collapsed`).
    creator_answered: bool,
    /// The status the last source asked answered with (RFC 9211
    /// `fwd-status`).
    upstream_status: Option<u16>,
}

/// Which source a fill reads from and how far it got (issue 24 item 4),
/// updated by the fill as it reads.
#[derive(Default)]
struct Progress {
    /// Body bytes stored so far.
    bytes: Cell<u64>,
    /// The body is arriving (else: still looking, claiming or asking).
    reading: Cell<bool>,
    /// The peer read from; `None` while reading: the origin.
    from: Cell<Option<SocketAddr>>,
    /// Sources the fill resumed from after losing one.
    resumes: Cell<u32>,
}

/// The owning core's fetch state.
pub struct Fetcher {
    policy: RefCell<FetchPolicy>,
    jobs: RefCell<HashMap<Id, JobState>>,
    /// Complete objects found in the cache at start, waiting for their
    /// pointers.
    adopt: RefCell<Vec<Id>>,
    /// URL key → variant key of the URL's first `Vary` variant (stored under
    /// the URL key): its pointer under the variant key is renewed with the
    /// URL key's own (at most `VARIANT_POINTERS_MAX`).
    variant_pointers: RefCell<HashMap<Id, Id>>,
}

/// URLs whose first variant's pointer under its variant key is renewed.
const VARIANT_POINTERS_MAX: usize = crate::limits::PROXY.variant_pointers_max;

/// Objects found in the cache at start whose pointers are put per tick.
const ADOPT_PER_TICK: usize = 64;

impl Fetcher {
    /// Proxy pointers found in the DSHT, verified: accepted, rejected
    /// (forged, tampered, unsigned or not admitted: ignored) and deferred
    /// (SECURITY.md, "Threat model").
    pub fn pointer_stats(&self) -> serde_json::Value {
        let s = self.policy.borrow().verify_stats().unwrap_or_default();
        serde_json::json!({"accepted": s.accepted, "rejected": s.rejected, "deferred": s.deferred})
    }

    pub fn new(policy: FetchPolicy) -> Fetcher {
        Fetcher {
            policy: RefCell::new(policy),
            jobs: RefCell::new(HashMap::new()),
            adopt: RefCell::new(Vec::new()),
            variant_pointers: RefCell::new(HashMap::new()),
        }
    }
}

/// How a fetch ended, for the policy.
enum Outcome {
    /// The object is in the cache (new, revalidated, or stale kept).
    Ok,
    /// Failed: the next source, if any, is tried.
    Failed,
}

impl ProxyCore {
    /// A miss for a key this core owns.
    pub(super) fn fetch_request(self: &Rc<Self>, job: Job, waiter: Waiter) {
        let key = job.key;
        {
            let mut jobs = self.fetch.jobs.borrow_mut();
            if let Some(js) = jobs.get_mut(&key) {
                if js.writing {
                    let peer = js.peer;
                    let js_status = js.upstream_status;
                    drop(jobs);
                    let collapsed = true;
                    let fwd_status = js_status;
                    self.answer(
                        waiter,
                        MissAnswer::Ready {
                            peer,
                            collapsed,
                            fwd_status,
                        },
                    );
                } else {
                    js.waiters.push(waiter);
                }
                return;
            }
        }
        // The object may have arrived since the asking core looked (a fetch
        // that ended while the miss was on its way here).
        let mut revalidation = false;
        if let Some(o) = self.cache.lookup(&key) {
            revalidation = matches!(o.state(), crate::cache::ObjectState::Complete { .. });
            let usable = match o.state() {
                crate::cache::ObjectState::Writing { .. } => true,
                crate::cache::ObjectState::Complete { .. } => {
                    unix_now() < o.meta().fresh_until_secs
                }
                crate::cache::ObjectState::Failed => false,
            };
            if usable {
                // Another request's fetch brought it.
                let collapsed = true;
                self.answer(
                    waiter,
                    MissAnswer::Ready {
                        peer: None,
                        collapsed,
                        fwd_status: None,
                    },
                );
                return;
            }
        }
        if job.no_forward {
            // A peer asks: we have no copy and fetch none (it would have
            // been found above).
            self.answer(waiter, MissAnswer::Error(Fail::TIMEOUT));
            return;
        }
        let now = self.shard.now();
        let mut out = Vec::new();
        {
            let mut policy = self.fetch.policy.borrow_mut();
            // Complete in the policy but missing or stale in the cache:
            // start over at the DSHT.
            policy.forget(&key);
            policy.request(now, key, &mut out);
            self.fetch.variant_pointers.borrow_mut().remove(&key);
        }
        self.fetch.jobs.borrow_mut().insert(
            key,
            JobState {
                job,
                waiters: vec![waiter],
                writing: false,
                peer: None,
                revalidation,
                progress: Rc::default(),
                creator_answered: false,
                upstream_status: None,
            },
        );
        self.run(out);
    }

    /// Revalidates the stale copy of `job`'s object in the background: the
    /// owning core fetches it as for a miss (once, however many ask), and
    /// no one waits for the answer (RFC 5861 `stale-while-revalidate`).
    pub(super) fn revalidate_in_background(self: &Rc<Self>, job: Job) {
        let owner = crate::steer::shard_of_key(&job.key, self.cores);
        if owner == self.core {
            // The receiver is dropped: the answer goes nowhere.
            let (tx, _) = glommio::channels::local_channel::new_bounded(1);
            self.fetch_request(job, Waiter::Local(tx));
        } else {
            // Request number 0 is never one awaited (`miss` counts from 1).
            let msg = super::ProxyMsg::Miss {
                from: self.core,
                req: 0,
                job: Box::new(job),
            };
            if !self.shard.try_send_to_core(owner, msg) {
                tracing::debug!("background revalidation dropped: mesh channel full");
            }
        }
    }

    /// An origin's 200 to a HEAD for the object `key` (relayed to one
    /// client): on the owning core, the stored copy takes its fields and
    /// freshness when it describes the same representation (RFC 9111
    /// §4.3.5: the same strong `ETag`, else the same `Last-Modified`, and
    /// no other `Content-Length`). Elsewhere, handed to the owning core.
    pub(super) fn freshen_from_head(self: &Rc<Self>, key: Id, head: ResponseHead) {
        let owner = crate::steer::shard_of_key(&key, self.cores);
        if owner != self.core {
            let msg = super::ProxyMsg::Freshen {
                key,
                head: Box::new(head),
            };
            let _ = self.shard.try_send_to_core(owner, msg);
            return;
        }
        if self.fetch.jobs.borrow().contains_key(&key) {
            return; // a fetch under way stores its own answer
        }
        let Some(obj) = self.cache.lookup(&key) else {
            return;
        };
        let crate::cache::ObjectState::Complete { len } = obj.state() else {
            return;
        };
        let Some(st) = stored::decode(obj.head(), &self.limits) else {
            return;
        };
        if !coral::proxy::fetch::head_describes_stored(&st.head, &head, len) {
            return;
        }
        let now = unix_now();
        let fresh_head = policy::freshen(&st.head, &head);
        let get = RequestHead {
            method: coral::proxy::http::Method::Get,
            target: "/".into(),
            minor_version: 1,
            headers: Headers::new(),
            framing: Framing::Empty,
            keep_alive: true,
        };
        let fresh_until_secs = match policy::storable(&get, &fresh_head, now) {
            policy::Storable::Yes(f) => f.fresh_until_secs,
            policy::Storable::No(_) => return,
        };
        let meta = ObjectMeta {
            stored_secs: now,
            fresh_until_secs,
            expected_len: Some(len),
        };
        drop(obj);
        let pc = self.clone();
        glommio::spawn_local(async move {
            pc.store_freshened(key, &st, &head, meta).await;
        })
        .detach();
    }

    /// Whether the job of `key` revalidates a stale copy.
    fn is_revalidation(&self, key: &Id) -> bool {
        self.fetch
            .jobs
            .borrow()
            .get(key)
            .is_some_and(|j| j.revalidation)
    }

    /// Carries out the policy's actions.
    fn run(self: &Rc<Self>, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Serve { key, first, .. } => {
                    let peer = peer_level(first);
                    self.finish_job(&key, || MissAnswer::Ready {
                        peer,
                        collapsed: false,
                        fwd_status: None,
                    });
                }
                Action::Fail { key, fail, .. } => {
                    self.finish_job(&key, || MissAnswer::Error(fail));
                }
                Action::DshtGet { key } if self.is_revalidation(&key) => {
                    // Every holder's pointer names a stale copy: straight
                    // to the claim (on the revalidation key, below).
                    let mut out = Vec::new();
                    let now = self.shard.now();
                    self.fetch
                        .policy
                        .borrow_mut()
                        .on_get(now, key, &[], None, &mut out);
                    self.run(out);
                }
                Action::DshtGet { key } => {
                    let pc = self.clone();
                    glommio::spawn_local(async move {
                        let ev = pc.shard.dsht_op(|n, now| n.get(now, key, None)).await;
                        let (values, level) = match ev {
                            Some(Event::GetDone { values, level, .. }) => (values, level),
                            _ => (Vec::new(), None),
                        };
                        let mut out = Vec::new();
                        let now = pc.shard.now();
                        pc.fetch
                            .policy
                            .borrow_mut()
                            .on_get(now, key, &values, level, &mut out);
                        pc.run(out);
                    })
                    .detach();
                }
                Action::DshtClaim {
                    key,
                    value,
                    ttl_secs,
                } => {
                    let pc = self.clone();
                    // A revalidation claims its own key: the object's key
                    // holds every copy's pointer, so a claim there never
                    // lands once copies exist.
                    let claimed_key = if self.is_revalidation(&key) {
                        coral::proxy::stale::revalidation_key(&key)
                    } else {
                        key
                    };
                    glommio::spawn_local(async move {
                        // No answer: go to the origin (as without claims).
                        let (claimed, values) = pc.claim(claimed_key, value, ttl_secs).await;
                        let mut out = Vec::new();
                        let now = pc.shard.now();
                        pc.fetch
                            .policy
                            .borrow_mut()
                            .on_claim(now, key, claimed, &values, &mut out);
                        pc.run(out);
                    })
                    .detach();
                }
                Action::DshtPut {
                    key,
                    value,
                    ttl_secs,
                } => {
                    // No eviction while the pointer may live (§3.2).
                    self.cache.pin(&key, unix_now() + u64::from(ttl_secs));
                    let pc = self.clone();
                    glommio::spawn_local(async move {
                        pc.shard
                            .dsht_start(|n, now| n.put(now, key, value, ttl_secs, None))
                            .await;
                    })
                    .detach();
                }
                Action::DshtPin {
                    key,
                    value,
                    ttl_secs,
                } => {
                    // Issue 24 item 2: the origin fetcher keeps its pointer
                    // at the key's closest node, where claims look.
                    let pc = self.clone();
                    glommio::spawn_local(async move {
                        pc.shard
                            .dsht_start(|n, now| n.pin(now, key, value, ttl_secs))
                            .await;
                    })
                    .detach();
                }
                Action::FetchPeer { key, addr } => {
                    self.stats
                        .peer_fetches
                        .set(self.stats.peer_fetches.get() + 1);
                    let level = self
                        .fetch
                        .policy
                        .borrow()
                        .fetching_from(&key)
                        .and_then(peer_level)
                        .unwrap_or(0);
                    let c = &self.stats.peer_fetches_by_level[usize::from(level).min(2)];
                    c.set(c.get() + 1);
                    self.spawn_fetch(key, Some(addr));
                }
                Action::FetchOrigin { key } => {
                    // Counted in `fetch_from` once the origin is asked: a
                    // refused or unresolvable origin is no origin fetch
                    // (issue 25 item 4).
                    self.spawn_fetch(key, None);
                }
            }
        }
    }

    fn spawn_fetch(self: &Rc<Self>, key: Id, peer: Option<SocketAddr>) {
        let pc = self.clone();
        glommio::spawn_local(async move {
            let outcome = pc.fetch_from(key, peer).await;
            if let Some(js) = pc.fetch.jobs.borrow_mut().get_mut(&key) {
                js.writing = false;
            }
            let mut out = Vec::new();
            let now = pc.shard.now();
            pc.fetch.policy.borrow_mut().on_fetched(
                now,
                key,
                matches!(outcome, Outcome::Ok),
                &mut out,
            );
            pc.run(out);
        })
        .detach();
    }

    /// Answers every waiter of `key` and forgets the job.
    fn finish_job(&self, key: &Id, answer: impl Fn() -> MissAnswer) {
        let Some(js) = self.fetch.jobs.borrow_mut().remove(key) else {
            return;
        };
        let creator = !js.creator_answered;
        self.answer_all(js.waiters, creator, js.upstream_status, answer);
    }

    /// Answers the waiters so far without forgetting the job.
    fn answer_waiters(&self, key: &Id, answer: impl Fn() -> MissAnswer) {
        let (creator, status) = self
            .fetch
            .jobs
            .borrow()
            .get(key)
            .map_or((false, None), |js| {
                (!js.creator_answered, js.upstream_status)
            });
        self.answer_all(self.take_waiters(key), creator, status, answer);
    }

    /// Answers `waiters`, the first of them the job's creator if `creator`;
    /// the others joined its fetch (RFC 9211 `collapsed`). `status`: what
    /// the next hop answered (RFC 9211 `fwd-status`).
    fn answer_all(
        &self,
        waiters: Vec<Waiter>,
        creator: bool,
        status: Option<u16>,
        answer: impl Fn() -> MissAnswer,
    ) {
        for (i, w) in waiters.into_iter().enumerate() {
            let a = answer().with_fwd_status(status);
            self.answer(w, if i == 0 && creator { a } else { a.joined() });
        }
    }

    /// The waiters so far, taken from the job.
    fn take_waiters(&self, key: &Id) -> Vec<Waiter> {
        match self.fetch.jobs.borrow_mut().get_mut(key) {
            Some(js) => {
                js.creator_answered = true;
                std::mem::take(&mut js.waiters)
            }
            None => Vec::new(),
        }
    }

    /// Records why a fetch of `key` failed (what its waiters get if no
    /// source serves it).
    fn fetch_failed(&self, key: &Id, fail: Fail) {
        self.fetch.policy.borrow_mut().fetch_failed(key, fail);
    }

    /// Fetches `key` from `peer` (or the origin) into the cache: asks, has
    /// the core judge the answer (`coral::proxy::fetch::judge`), and acts.
    async fn fetch_from(self: &Rc<Self>, key: Id, peer: Option<SocketAddr>) -> Outcome {
        let Some(job) = self.fetch.jobs.borrow().get(&key).map(|j| j.job.clone()) else {
            return Outcome::Failed;
        };
        // Issue 22 item 4: a peer caught forging is not asked again.
        if peer.is_some_and(|a| self.peer_distrusted(&a)) {
            return Outcome::Failed;
        }
        let now = unix_now();
        // A stale complete copy: revalidate it with the origin, and keep it
        // if the origin fails.
        let old = self.cache.lookup(&key).and_then(|o| {
            matches!(o.state(), crate::cache::ObjectState::Complete { .. })
                .then(|| stored::decode(o.head(), &self.limits).map(|s| (o.meta(), s)))
                .flatten()
        });
        let addr = match peer {
            Some(a) => a,
            None => match self
                .resolver
                .resolve_for(job.client, &job.origin.host, job.origin.port)
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    tracing::info!(host = %job.origin.host, error = %e, "origin not fetched");
                    self.stats.origin_error("resolve");
                    self.fetch_failed(&key, e.fail());
                    return Outcome::Failed;
                }
            },
        };
        if peer.is_none() {
            self.stats
                .origin_fetches
                .set(self.stats.origin_fetches.get() + 1);
        }
        let mut extra = Headers::new();
        if let (None, Some((_, s))) = (peer, &old) {
            extra = policy::revalidation_headers(&s.head);
        }
        if peer.is_none() {
            // Issue 22 item 5: the origin's own digest of its body, checked
            // here and signed for every peer.
            super::verified::want_repr_digest(&mut extra);
        }
        // Issue 22 item 6: only allowlisted client fields go upstream, and
        // to fill the cache only those the URL's known `Vary` keys (or, for
        // a URL not stored yet, those its host's answers were seen to vary
        // on: `keyed::LearnedVary`).
        let origin_host = job.origin.to_string();
        let vary_of = {
            let learned = self.learned_vary.borrow();
            learned
                .url_vary(&job.url_key)
                .or_else(|| self.known_vary(&key, &job.url_key, old.as_ref().map(|(_, s)| &s.head)))
                .or_else(|| learned.host_vary(&origin_host))
        };
        let no_pool = upstream::Pool::default();
        let pool = if peer.is_some() { &no_pool } else { &self.pool };
        let sent = keyed::upstream_view(
            &job.request,
            match peer {
                Some(_) => Upstream::Peer,
                None => Upstream::Fill {
                    vary: vary_of.as_ref(),
                },
            },
            &self.cfg.forward_request_fields,
        );
        let mut req = Vec::with_capacity(1024);
        policy::upstream_request(&sent, &job.origin, peer.is_some(), &extra, &mut req);
        if let Some(js) = self.fetch.jobs.borrow_mut().get_mut(&key) {
            js.upstream_status = None;
        }
        let resp = match upstream::send(pool, addr, &req, false, self.timeouts, &self.limits).await
        {
            Ok(r) => {
                if let Some(js) = self.fetch.jobs.borrow_mut().get_mut(&key) {
                    js.upstream_status = Some(r.head.status);
                }
                r
            }
            Err(e) => {
                tracing::info!(%addr, error = %e, peer = peer.is_some(), "fetch failed");
                if peer.is_none() {
                    self.stats.origin_error(e.reason());
                }
                self.fetch_failed(&key, e.fail());
                return self.stale_or_failed(&key, peer, old.as_ref());
            }
        };
        // Issue 22 item 4: a peer's answer is used only under a signed head
        // that verifies, its first chunk verified before any waiter is
        // answered from it.
        let mut resp = resp;
        let signed = match peer {
            Some(a) => {
                let label = keyed::label_view(&job.request, &sent);
                let object = super::verified::object_key(&job.url_key, &resp.head, &label);
                match self.check_peer_answer(&key, &object, a, &mut resp).await {
                    Some(h) => Some(h),
                    None => {
                        self.fetch_failed(&key, Fail::MALFORMED);
                        return Outcome::Failed;
                    }
                }
            }
            None => None,
        };
        if let Some(fail) = fetch::origin_error(peer.is_some(), resp.head.status) {
            self.stats.origin_error("status_5xx");
            self.fetch_failed(&key, fail);
        }
        let verdict = fetch::judge(&fetch::Response {
            request: &sent,
            head: &resp.head,
            from_peer: peer.is_some(),
            old: old.as_ref().map(|(_, s)| &s.head),
            now_secs: now,
            negative_ttl_secs: self.cfg.negative_ttl_secs,
            heuristic: self.cfg.heuristic,
            object_bytes_max: self.cfg.object_bytes_max,
        });
        let resp_head_of_304 = resp.head.clone();
        let fresh = match verdict {
            Verdict::Store(fresh) if peer.is_none() => {
                // Stored only when its key accounts for exactly the client
                // fields the origin saw; otherwise relayed to the request
                // that made it, and the host's learned fields corrected
                // (`coral::proxy::keyed::check_key`).
                let check = keyed::check_key(
                    &resp.head.headers,
                    &job.request,
                    &sent,
                    &self.cfg.forward_request_fields,
                );
                self.learned_vary.borrow_mut().apply(
                    &origin_host,
                    job.url_key,
                    &resp.head.headers,
                    &check,
                );
                if !check.storable() {
                    tracing::debug!(%key, ?check, "answer not keyed as sent: relayed, not stored");
                    self.pass_once(&key, resp);
                    return Outcome::Failed;
                }
                fresh
            }
            // A peer's copy is fresh no longer than the origin-fetcher
            // signed (issue 22 item 4).
            Verdict::Store(mut fresh) => {
                if let Some(h) = &signed {
                    fresh.fresh_until_secs = fresh.fresh_until_secs.min(h.expires_secs());
                }
                fresh
            }
            Verdict::Revalidated { fresh_until_secs } => {
                // The stored body stands, with new freshness and the 304's
                // fields (RFC 9111 §4.3.4).
                let expected_len = old.as_ref().and_then(|(m, _)| m.expected_len);
                let meta = ObjectMeta {
                    stored_secs: now,
                    fresh_until_secs,
                    expected_len,
                };
                resp.release(&self.pool);
                if let Some((_, s)) = &old {
                    self.store_freshened(key, s, &resp_head_of_304, meta).await;
                } else {
                    self.cache.touch_meta(&key, meta);
                }
                return Outcome::Ok;
            }
            Verdict::Failed(fail) => {
                if let Some(fail) = fail {
                    self.fetch_failed(&key, fail);
                }
                return Outcome::Failed;
            }
            Verdict::Stale(fail) => {
                self.fetch_failed(&key, fail);
                if let Outcome::Ok = self.stale_or_failed(&key, peer, old.as_ref()) {
                    resp.release(&self.pool);
                    return Outcome::Ok;
                }
                // No stale copy may be served: the origin's own answer is
                // relayed (issue 26 item 1), never replaced.
                return self.relay_error(&key, &job, resp).await;
            }
            Verdict::NotStored { why, relay } => {
                tracing::debug!(%key, why, "not stored");
                if relay && resp.head.status >= 500 {
                    // The origin's error, relayed to every waiter (and not
                    // remembered as uncacheable: the next request tries
                    // again, collapsed).
                    return self.relay_error(&key, &job, resp).await;
                }
                if relay {
                    self.pass_waiters(&key, resp);
                }
                return Outcome::Failed;
            }
            Verdict::TooLarge => {
                if peer.is_none() {
                    self.stats.origin_error("too_large");
                }
                self.fetch_failed(&key, Fail::TOO_LARGE);
                let bytes = match resp.head.framing {
                    Framing::Length(n) => n,
                    _ => 0,
                };
                tracing::info!(%key, bytes, "object larger than object_bytes_max");
                return Outcome::Failed;
            }
        };
        self.store(
            key,
            &job,
            &sent,
            peer,
            addr,
            resp,
            &fresh,
            old.as_ref(),
            now,
            signed,
        )
        .await
    }

    /// The `Vary` of the response stored for this URL, as header fields: of
    /// the stale copy being revalidated (`old`), else, for a variant's
    /// fetch, of the response stored under the URL's key. `None` when none
    /// is known (the first request for a URL).
    fn known_vary(&self, key: &Id, url_key: &Id, old: Option<&ResponseHead>) -> Option<Headers> {
        let from = |h: &Headers| {
            let mut v = Headers::new();
            for x in h.get_all("vary") {
                v.insert("vary", x);
            }
            v
        };
        if let Some(old) = old {
            return Some(from(&old.headers));
        }
        if key == url_key {
            return None;
        }
        let obj = self.cache.lookup(url_key)?;
        let st = stored::decode(obj.head(), &self.limits)?;
        Some(from(&st.head.headers))
    }

    /// The origin's error answer (not stored) relayed to every request
    /// waiting for the fetch, as the origin sent it (hop-by-hop fields and
    /// cookies removed, redirects Coralized): its body is held in memory,
    /// at most `RELAY.error_body_bytes_max`; a longer one answers them with
    /// coral's page naming the status (recorded by `origin_error`).
    async fn relay_error(&self, key: &Id, job: &Job, mut resp: upstream::Response) -> Outcome {
        let mut head = policy::head_to_store(&resp.head);
        rewrite::head(&mut head, &job.origin, &self.suffix, self.http.port());
        let mut body = Vec::new();
        let mut chunk = Vec::new();
        loop {
            chunk.clear();
            match resp.next(&mut chunk).await {
                Ok(more) => {
                    if body.len() + chunk.len() > crate::limits::RELAY.error_body_bytes_max {
                        tracing::info!(%key, "origin error answer too long to relay");
                        return Outcome::Failed;
                    }
                    body.extend_from_slice(&chunk);
                    if !more {
                        break;
                    }
                }
                Err(e) => {
                    tracing::info!(%key, error = %e, "origin error answer cut short");
                    self.stats.origin_error(e.reason());
                    return Outcome::Failed;
                }
            }
        }
        resp.release(&self.pool);
        let relayed = std::sync::Arc::new(super::Relayed { head, body });
        self.answer_waiters(key, || MissAnswer::Relayed(relayed.clone()));
        Outcome::Failed
    }

    /// Stores the stale copy's body again under the head a 304 freshened
    /// (RFC 9111 §4.3.4: the 304's fields replace the stored ones, except
    /// framing): the old copy stays visible until the new one is complete.
    /// A body over `RELAY.revalidated_copy_bytes_max` keeps its head and
    /// gets the new freshness only.
    async fn store_freshened(
        &self,
        key: Id,
        old: &stored::Stored,
        not_modified: &ResponseHead,
        meta: ObjectMeta,
    ) {
        let Some(obj) = self.cache.lookup(&key) else {
            return;
        };
        let crate::cache::ObjectState::Complete { len } = obj.state() else {
            self.cache.touch_meta(&key, meta);
            return;
        };
        if len > crate::limits::RELAY.revalidated_copy_bytes_max {
            self.cache.touch_meta(&key, meta);
            return;
        }
        let head = policy::head_to_store_with_codings(&policy::freshen(&old.head, not_modified));
        let fresh = Freshness {
            date_secs: meta.stored_secs,
            fresh_until_secs: meta.fresh_until_secs,
            response_secs: meta.stored_secs,
            initial_age_secs: 0,
            must_revalidate: coral::proxy::stale::windows(&head.headers).must_revalidate,
        };
        let mut head_bytes = Vec::with_capacity(1024);
        stored::encode(&head, &fresh, &old.vary_req, old.variant, &mut head_bytes);
        let meta = ObjectMeta {
            expected_len: Some(len),
            ..meta
        };
        let mut writer = match self.cache.begin(key, meta, &head_bytes) {
            Ok(w) => w,
            Err(e) => {
                tracing::info!(%key, error = %e, "revalidated head not stored: freshness only");
                self.cache.touch_meta(&key, meta);
                return;
            }
        };
        let mut pos = 0;
        while pos < len {
            let end = len.min(pos + (256 << 10));
            obj.ensure_resident(pos, end).await;
            let data = obj.body(pos, end);
            if data.is_empty() || writer.append(data).is_err() {
                writer.abort();
                self.cache.touch_meta(&key, meta);
                return;
            }
            pos += data.len() as u64;
        }
        if let Err(e) = writer.finish() {
            tracing::info!(%key, error = %e, "revalidated copy not stored");
            self.cache.touch_meta(&key, meta);
        }
    }

    /// An answer that may not be stored: the request that made this fetch
    /// gets it, to relay on its own core (the origin is asked once for it);
    /// every other waiter fetches it for itself.
    fn pass_waiters(&self, key: &Id, resp: upstream::Response) {
        let mut waiters = self.take_waiters(key).into_iter();
        if let Some(first) = waiters.next() {
            self.answer(first, MissAnswer::Pass(Box::new(resp.hand_over())));
        }
        for w in waiters {
            self.answer(w, MissAnswer::Uncacheable);
        }
    }

    /// An answer whose key does not account for what reached the origin:
    /// the request that made this fetch gets it, to relay on its own core
    /// (not remembered as uncacheable: the next request, sent as the host's
    /// learned fields now say, may store it); every other waiter looks up
    /// and fills again (once).
    fn pass_once(&self, key: &Id, resp: upstream::Response) {
        let mut waiters = self.take_waiters(key).into_iter();
        if let Some(first) = waiters.next() {
            self.answer(first, MissAnswer::PassOnce(Box::new(resp.hand_over())));
        }
        for w in waiters {
            self.answer(w, MissAnswer::Refill);
        }
    }

    /// Stores the response `resp` to the fetch of `key` in the cache as it
    /// arrives; its waiters are answered as soon as the object exists.
    #[allow(clippy::too_many_arguments)]
    async fn store(
        self: &Rc<Self>,
        key: Id,
        job: &Job,
        sent: &RequestHead,
        peer: Option<SocketAddr>,
        addr: SocketAddr,
        mut resp: upstream::Response,
        fresh: &Freshness,
        old: Option<&(ObjectMeta, stored::Stored)>,
        now: u64,
        signed: Option<coral::verify::SignedHead>,
    ) -> Outcome {
        let mut head = policy::head_to_store_with_codings(&resp.head);
        super::verified::strip_records(&mut head);
        // §2.1: redirects and links to the origin stay Coralized (HTML that
        // is content-coded, or in a transfer coding, is passed through
        // untouched).
        rewrite::head(&mut head, &job.origin, &self.suffix, self.http.port());
        // A peer's signed bytes are stored as signed (the origin-fetcher
        // rewrote them); a body in a transfer coding is not rewritten.
        // Coralized HTML: rewritten here when it comes from the origin; a
        // peer's copy arrives rewritten. Either way its stored offsets are
        // not a source's raw ones, so a resumed fill of it starts again from
        // byte 0 and continues only where the bytes match the copy.
        let rewritable =
            rewrite::body_is_rewritable(&head) && policy::stored_codings(&head).is_none();
        let mut rewriter = (signed.is_none() && rewritable)
            .then(|| rewrite::HtmlRewriter::new(&job.origin, &self.suffix, self.http.port()));
        // Labelled with what could have changed the answer (the keyed
        // fields as sent, `keyed::label_view`).
        let label = keyed::label_view(&job.request, sent);
        let vary_req = policy::vary_request_headers(&resp.head, &label);
        let mut head_bytes = Vec::with_capacity(1024);
        stored::encode(&head, fresh, &vary_req, key != job.url_key, &mut head_bytes);
        let expected_len = match resp.head.framing {
            Framing::Length(n) if rewriter.is_none() => Some(n),
            Framing::Empty => Some(0),
            _ => None,
        };
        let meta = ObjectMeta {
            stored_secs: now,
            fresh_until_secs: fresh.fresh_until_secs,
            expected_len,
        };
        let mut writer = match self.cache.begin(key, meta, &head_bytes) {
            Ok(w) => w,
            Err(e) if signed.is_some() => {
                // A peer's answer is never relayed uncached (its records
                // would be lost): the next source is tried.
                tracing::debug!(%key, error = %e, "cache refused a peer's copy");
                return Outcome::Failed;
            }
            Err(e) => {
                // A full or failing disk (or a cache of pinned objects): the
                // object is served uncached to the request that made the
                // fetch, never a 503 (`cache::CoreCache::begin` has already
                // evicted what it could; its counter and log say why).
                tracing::debug!(%key, error = %e, "cache refused the object: served uncached");
                self.pass_waiters(&key, resp);
                return Outcome::Failed;
            }
        };
        let level = match peer {
            Some(_) => self
                .fetch
                .policy
                .borrow()
                .fetching_from(&key)
                .and_then(peer_level)
                .or(Some(0)),
            None => None,
        };
        if let Some(js) = self.fetch.jobs.borrow_mut().get_mut(&key) {
            js.writing = true;
            js.peer = level;
        }
        if resp.interim.is_empty() {
            self.answer_waiters(&key, || MissAnswer::Ready {
                peer: level,
                collapsed: false,
                fwd_status: None,
            });
        } else {
            // Issue 26 item 9: forwarded to the clients waiting now, never
            // stored with the object.
            let interim = std::sync::Arc::new(std::mem::take(&mut resp.interim));
            self.answer_waiters(&key, || MissAnswer::ReadyAfterInterim {
                peer: level,
                interim: interim.clone(),
                collapsed: false,
                fwd_status: None,
            });
        }
        // Issue 22 item 4: the signed records, kept beside the copy.
        let object = super::verified::object_key(&job.url_key, &resp.head, &label);
        let mut records = match signed {
            Some(h) => self.relay_fill(key, h),
            None => self.sign_fill(
                key,
                object,
                &head,
                &resp.head,
                expected_len,
                fresh.fresh_until_secs,
                rewriter.is_none(),
            ),
        };
        let mut chunk = Vec::with_capacity(64 << 10);
        let mut rewritten = Vec::new();
        let mut total: u64 = 0;
        // Issue 24 item 1: a source lost mid-body is replaced by another
        // that continues the same representation at the byte reached
        // (`coral::proxy::fetch::Resume`); the writer stays open meanwhile,
        // so every reader of the object keeps waiting, never cut.
        let progress = self.progress(&key);
        progress.from.set(peer);
        progress.reading.set(true);
        let mut fill = Fill {
            resume: fetch::Resume::new(key),
            validator: fetch::resume_validator(&resp.head),
            // A rewritten body's lengths differ between sources (the
            // origin's raw bytes, a peer's rewritten copy).
            full_len: match resp.head.framing {
                Framing::Length(n) if !rewritable => Some(n),
                _ => None,
            },
            vary: vary_fields(&resp.head),
        };
        let mut source = peer;
        let mut source_addr = addr;
        // Body bytes of the current source to drop (a resumed source that
        // sent the whole body).
        let mut skip: u64 = 0;
        // A rewritten body resumes from a source's byte 0, rewritten afresh:
        // the first `verify_to` bytes it makes must be those stored
        // (`verified` of them checked so far) before it continues the copy.
        let mut verify_to: u64 = 0;
        let mut verified: u64 = 0;
        loop {
            chunk.clear();
            let mut dropped = 0;
            let mut more = false;
            // Why the source cannot go on: its error, and whether it sent
            // another representation.
            let mut failure = None;
            match resp.next(&mut chunk).await {
                Ok(m) => {
                    more = m;
                    dropped = skip.min(chunk.len() as u64);
                    skip -= dropped;
                    if !more && skip > 0 {
                        // Its body ended before the byte the fill reached.
                        failure = Some((upstream::UpstreamError::Truncated, false));
                    }
                }
                Err(e) => failure = Some((e, false)),
            }
            if failure.is_none() {
                let piece = &chunk[dropped as usize..];
                // The origin's bytes, for its `Repr-Digest` (issue 22 item 5).
                if source.is_none() {
                    records.origin_bytes(piece);
                }
                let mut data = super::rewritten(rewriter.as_mut(), piece, more, &mut rewritten);
                if verified < verify_to {
                    let n = (verify_to - verified).min(data.len() as u64) as usize;
                    if self.same_as_stored(&key, verified, &data[..n]).await {
                        verified += n as u64;
                        data = &data[n..];
                        if !more && verified < verify_to {
                            failure = Some((upstream::UpstreamError::Truncated, false));
                        }
                    } else {
                        let differs = coral::proxy::http::HttpError {
                            status: 502,
                            reason: "the resumed body differs from the bytes stored",
                        };
                        failure = Some((upstream::UpstreamError::Malformed(differs), true));
                    }
                }
                if failure.is_none() {
                    total += data.len() as u64;
                    if total > self.cfg.object_bytes_max {
                        tracing::info!(%key, "object larger than object_bytes_max: dropped");
                        if source.is_none() {
                            self.stats.origin_error("too_large");
                        }
                        writer.abort();
                        records.abort(self);
                        self.fetch_failed(&key, Fail::TOO_LARGE);
                        return Outcome::Failed;
                    }
                    if !data.is_empty() {
                        if let Err(e) = records.append(self, &mut writer, &mut resp, data) {
                            tracing::info!(%key, error = %e, "cache append failed");
                            writer.abort();
                            records.abort(self);
                            return Outcome::Failed;
                        }
                        progress.bytes.set(total);
                    }
                    if !more {
                        break;
                    }
                    continue;
                }
            }
            let Some((e, changed)) = failure else {
                continue;
            };
            if source.is_none() {
                self.stats.origin_error(e.reason());
            }
            let lost = match source {
                // Issue 22 item 4: bytes that fail verification are a lying
                // peer's: it is dropped like a dead one, never asked again
                // for this object.
                Some(addr) if e.reason() == "forged" => Lost::Peer { addr, forged: true },
                Some(addr) => Lost::Peer {
                    addr,
                    forged: false,
                },
                None => Lost::Origin { changed },
            };
            if let Some(a) = source {
                // A forgery caught mid-body is evidence (issue 22 item 5).
                records.lost(self, a, &e, resp.claimed_end());
            }
            tracing::info!(%key, addr = %source_addr, offset = total, error = %e, "source lost mid-body: resuming");
            progress.reading.set(false);
            // A rewritten body is asked for whole (its stored offsets are
            // not the source's), any other from the byte reached.
            let from_byte = if rewritable { 0 } else { total };
            match self.resume(job, &mut fill, lost, from_byte).await {
                Ok(next) => {
                    resp = next.resp;
                    source = next.from;
                    source_addr = next.addr;
                    skip = next.skip;
                    if rewritable {
                        // The origin's bytes are rewritten here; a peer's
                        // come rewritten.
                        rewriter = source.is_none().then(|| {
                            rewrite::HtmlRewriter::new(&job.origin, &self.suffix, self.http.port())
                        });
                        verify_to = total;
                        verified = 0;
                    }
                    // The records go on only where the new source continues
                    // the same signed stream (issue 22 item 4); otherwise
                    // this node signs the copy afresh, its stored bytes
                    // first, and peers reading the old records ask again.
                    let goes_on =
                        records.resumed(self, next.signed.as_ref(), source.is_none(), rewritable);
                    if !goes_on {
                        let fresh_records = self.sign_fill(
                            key,
                            object,
                            &head,
                            &head,
                            expected_len,
                            fresh.fresh_until_secs,
                            !rewritable,
                        );
                        records = self.sign_from_prefix(fresh_records, key, total).await;
                    }
                    progress.from.set(source);
                    progress.resumes.set(progress.resumes.get() + 1);
                    progress.reading.set(true);
                    crate::metrics::count_resume(source.is_some());
                    tracing::info!(%key, from = %source_addr, offset = total, peer = source.is_some(), "fill resumed");
                }
                Err(reason) => {
                    tracing::warn!(
                        %key,
                        url = %job_url(job),
                        offset = total,
                        reason,
                        "fill cut: no source can continue the same representation; \
                         its readers see a truncated body"
                    );
                    crate::metrics::count_fill_cut(reason);
                    writer.abort();
                    records.abort(self);
                    self.fetch_failed(&key, e.fail());
                    return self.stale_or_failed(&key, source, old);
                }
            }
        }
        if let Err(why) = records.finish(self, &resp) {
            tracing::warn!(%key, %addr, why, "copy dropped");
            writer.abort();
            if peer.is_none() {
                self.fetch_failed(&key, Fail::MALFORMED);
            }
            return Outcome::Failed;
        }
        if let Err(e) = writer.finish() {
            tracing::info!(%key, error = %e, "cache finish failed");
            return Outcome::Failed;
        }
        if let Some(h) = signed {
            // Issue 22 item 5 (b): now and then, the origin is asked too.
            let mut vary = Headers::new();
            for v in resp.head.headers.get_all("vary") {
                vary.insert("vary", v);
            }
            self.maybe_audit(key, job, vary, h, resp.signed_end());
        }
        if key == job.url_key {
            self.note_first_variant(key, &resp.head, &label);
        }
        if source.is_none() {
            resp.release(&self.pool);
        }
        Outcome::Ok
    }

    /// The fill of `job`'s object lost its source (`lost`) at `offset`: asks
    /// the policy for the next source and asks that one for the rest,
    /// until one answers with the same representation (`Ok`) or none can
    /// (`Err`, the reason the fill is cut).
    async fn resume(
        &self,
        job: &Job,
        fill: &mut Fill,
        mut lost: Lost,
        offset: u64,
    ) -> Result<Resumed, &'static str> {
        loop {
            let facts = fetch::ResumeFacts {
                validator: fill.validator.is_some(),
            };
            let step = self
                .fetch
                .policy
                .borrow_mut()
                .resume_lost(&mut fill.resume, lost, facts);
            let step = match step {
                ResumeStep::Claim {
                    key,
                    value,
                    ttl_secs,
                } => {
                    // No answer: resumed from the origin.
                    let (claimed, values) = self.claim(key, value, ttl_secs).await;
                    let now = self.shard.now();
                    self.fetch.policy.borrow_mut().resume_claimed(
                        now,
                        &mut fill.resume,
                        claimed,
                        &values,
                    )
                }
                step => step,
            };
            let from = match step {
                ResumeStep::Peer(addr) => Some(addr),
                ResumeStep::Origin => None,
                ResumeStep::Cut(reason) => return Err(reason),
                ResumeStep::Claim { .. } => return Err("claim_loop"),
            };
            let validator = fill.validator.as_deref().ok_or("no_validator")?;
            match self.ask_rest(job, fill, from, validator, offset).await {
                Ok(resumed) => return Ok(resumed),
                Err(changed) => {
                    lost = match from {
                        Some(addr) => Lost::Peer {
                            addr,
                            forged: false,
                        },
                        None => Lost::Origin { changed },
                    }
                }
            }
        }
    }

    /// The DSHT claim of `key` (§8's test-and-set): whether this node won,
    /// and the values found instead. No answer counts as won: the node goes
    /// to the origin, as it would without claims.
    async fn claim(
        &self,
        key: Id,
        value: coral::dsht::wire::Value,
        ttl_secs: u32,
    ) -> (bool, Vec<coral::dsht::wire::Value>) {
        let ev = self
            .shard
            .dsht_op(|n, now| n.claim(now, key, value, ttl_secs))
            .await;
        match ev {
            Some(Event::ClaimDone {
                claimed, values, ..
            }) => (claimed, values),
            _ => (true, Vec::new()),
        }
    }

    /// Asks the peer `from` (or the origin) for the body of `job`'s object
    /// from `offset` on: `Range: bytes=<offset>-` with `If-Range` on its
    /// validator. `Err(true)`: the origin's representation changed;
    /// `Err(false)`: no usable answer.
    async fn ask_rest(
        &self,
        job: &Job,
        fill: &Fill,
        from: Option<SocketAddr>,
        validator: &[u8],
        offset: u64,
    ) -> Result<Resumed, bool> {
        let addr = match from {
            Some(a) => a,
            None => self
                .resolver
                .resolve_for(job.client, &job.origin.host, job.origin.port)
                .await
                .map_err(|e| {
                    tracing::info!(host = %job.origin.host, error = %e, "origin not asked to resume");
                    self.stats.origin_error("resolve");
                    false
                })?,
        };
        if from.is_none() {
            self.stats
                .origin_fetches
                .set(self.stats.origin_fetches.get() + 1);
        }
        let mut range = b"bytes=".to_vec();
        coral::proxy::http::write_decimal(&mut range, offset);
        range.push(b'-');
        let mut extra = Headers::new();
        extra.insert("Range", &range);
        extra.insert("If-Range", validator);
        let sent = keyed::upstream_view(
            &job.request,
            match from {
                Some(_) => Upstream::Peer,
                None => Upstream::Fill {
                    vary: fill.vary.as_ref(),
                },
            },
            &self.cfg.forward_request_fields,
        );
        let mut req = Vec::with_capacity(1024);
        policy::upstream_request(&sent, &job.origin, from.is_some(), &extra, &mut req);
        let no_pool = upstream::Pool::default();
        let pool = if from.is_some() { &no_pool } else { &self.pool };
        let resp = match upstream::send(pool, addr, &req, false, self.timeouts, &self.limits).await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::info!(%addr, error = %e, peer = from.is_some(), "resume request failed");
                if from.is_none() {
                    self.stats.origin_error(e.reason());
                }
                return Err(false);
            }
        };
        let mut resp = resp;
        let answer = fetch::resume_answer(&resp.head, validator, offset, fill.full_len);
        // A peer's answer is used only under a signed head that verifies,
        // its chunks verified as they come (issue 22 item 4).
        let signed = match (from, &answer) {
            (Some(a), fetch::ResumeAnswer::Continue { .. }) => {
                let label = keyed::label_view(&job.request, &sent);
                let object = super::verified::object_key(&job.url_key, &resp.head, &label);
                match self
                    .check_peer_answer(&job.key, &object, a, &mut resp)
                    .await
                {
                    Some(h) => Some(h),
                    None => return Err(false),
                }
            }
            _ => None,
        };
        match answer {
            fetch::ResumeAnswer::Continue { skip } => Ok(Resumed {
                resp,
                from,
                addr,
                skip,
                signed,
            }),
            answer => {
                tracing::info!(%addr, status = resp.head.status, ?answer, "source cannot continue the fill");
                Err(answer == fetch::ResumeAnswer::Changed)
            }
        }
    }

    /// Whether `bytes` are the body of the copy of `key` being written, from
    /// byte `at` (a resumed rewritten body's check). Not when an older
    /// complete copy is what the cache shows.
    async fn same_as_stored(&self, key: &Id, at: u64, bytes: &[u8]) -> bool {
        let Some(obj) = self.cache.lookup(key) else {
            return false;
        };
        if !matches!(obj.state(), crate::cache::ObjectState::Writing { .. }) {
            return false;
        }
        let end = at + bytes.len() as u64;
        obj.ensure_resident(at, end).await;
        obj.body(at, end) == bytes
    }

    /// The progress record of `key`'s fill (a fresh one if it has no job).
    fn progress(&self, key: &Id) -> Rc<Progress> {
        self.fetch
            .jobs
            .borrow()
            .get(key)
            .map(|j| j.progress.clone())
            .unwrap_or_default()
    }

    /// The first variant of a URL is stored under the URL's key: a pointer
    /// under its variant key too lets nodes that ask for this variant by
    /// that key find it here (a peer's request selects it by its fields).
    /// It is renewed with the URL key's pointer (`tick`) while the object
    /// stays cached; the object's own pointer pins it.
    fn note_first_variant(self: &Rc<Self>, key: Id, head: &ResponseHead, request: &RequestHead) {
        let mut pointers = self.fetch.variant_pointers.borrow_mut();
        match coral::proxy::vary::variant_key(&key, head, request) {
            Some(vk) => {
                if pointers.len() < VARIANT_POINTERS_MAX || pointers.contains_key(&key) {
                    pointers.insert(key, vk);
                }
                drop(pointers);
                // As long as the URL key's own (`complete_pointer_ttl_secs`).
                self.put_variant_pointer(vk, self.cfg.complete_pointer_ttl_secs);
            }
            None => {
                pointers.remove(&key);
            }
        }
    }

    /// After a fetch failed: a stale copy that may be served keeps the
    /// object (its waiters get it); otherwise the fetch failed
    /// (`coral::proxy::fetch::serve_stale`).
    fn stale_or_failed(
        &self,
        key: &Id,
        peer: Option<SocketAddr>,
        old: Option<&(ObjectMeta, stored::Stored)>,
    ) -> Outcome {
        // RFC 5861 §4: `stale-if-error` bounds how long past its freshness
        // a copy is served on the origin's error, where the origin says so.
        let within_stale_if_error = old.is_none_or(|(m, s)| {
            coral::proxy::stale::if_error_allows(
                &coral::proxy::stale::windows(&s.head.headers),
                m.fresh_until_secs,
                unix_now(),
            )
        });
        let must_revalidate = old.map(|(_, s)| s.must_revalidate || policy::forbids_stale(&s.head));
        if within_stale_if_error && fetch::serve_stale(peer.is_some(), must_revalidate) {
            self.answer_waiters(key, || MissAnswer::Stale { fwd_status: None });
            return Outcome::Ok;
        }
        Outcome::Failed
    }

    /// Renews pointers: of objects being fetched, and of complete ones the
    /// cache means to keep (an evicted or retiring object's pointer is let
    /// go, and the policy forgets it). Adopts a few objects found in the
    /// cache at start.
    pub(super) fn tick(self: &Rc<Self>) {
        let now = self.shard.now();
        let mut out = Vec::new();
        self.fetch.policy.borrow_mut().tick(now, &mut out);
        {
            let mut queue = self.fetch.adopt.borrow_mut();
            let mut policy = self.fetch.policy.borrow_mut();
            for _ in 0..ADOPT_PER_TICK {
                let Some(key) = queue.pop() else { break };
                // A URL's first variant: its pointer under its variant key
                // is put and renewed with the URL key's (below).
                if !policy.tracks(&key) {
                    if let Some(vk) = self.first_variant_key(&key) {
                        let mut pointers = self.fetch.variant_pointers.borrow_mut();
                        if pointers.len() < VARIANT_POINTERS_MAX {
                            pointers.insert(key, vk);
                        }
                    }
                }
                policy.adopt(now, key, &mut out);
            }
        }
        let mut kept: Option<std::collections::HashSet<Id>> = None;
        let mut keep = Vec::with_capacity(out.len());
        for a in out {
            // A pin follows its pointer's put: not for an object forgotten.
            if let Action::DshtPin { key, .. } = &a {
                if !self.fetch.policy.borrow().tracks(key) {
                    continue;
                }
            }
            if let Action::DshtPut { key, ttl_secs, .. } = &a {
                let pending = self.fetch.jobs.borrow().contains_key(key);
                if !pending {
                    let kept = kept.get_or_insert_with(|| {
                        self.cache.complete_keys_owned().into_iter().collect()
                    });
                    if !kept.contains(key) {
                        self.fetch.policy.borrow_mut().forget(key);
                        self.fetch.variant_pointers.borrow_mut().remove(key);
                        continue;
                    }
                    // The complete object's pointer is renewed: so is the
                    // one under its first variant's key.
                    let vk = self.fetch.variant_pointers.borrow().get(key).copied();
                    if let Some(vk) = vk {
                        self.put_variant_pointer(vk, *ttl_secs);
                    }
                }
            }
            keep.push(a);
        }
        self.run(keep);
    }

    /// The variant key of the object cached under `key` when it is a URL's
    /// first `Vary` variant (stored under the URL's key): what its pointer
    /// under the variant key needs after a restart. From the stored head:
    /// its `Vary` and the fields of the request it was fetched for.
    fn first_variant_key(&self, key: &Id) -> Option<Id> {
        let obj = self.cache.lookup(key)?;
        let st = stored::decode(obj.head(), &self.limits)?;
        if st.variant || !st.head.headers.contains("vary") {
            return None;
        }
        let req = coral::proxy::http::RequestHead {
            method: coral::proxy::http::Method::Get,
            target: "/".into(),
            minor_version: 1,
            headers: st.vary_req,
            framing: Framing::Empty,
            keep_alive: false,
        };
        coral::proxy::vary::variant_key(key, &st.head, &req)
    }

    /// Puts this proxy's pointer under `vk`, the variant key of a URL's
    /// first variant (stored under the URL's key).
    fn put_variant_pointer(self: &Rc<Self>, vk: Id, ttl_secs: u32) {
        let value = self.fetch.policy.borrow().pointer();
        let pc = self.clone();
        glommio::spawn_local(async move {
            pc.shard
                .dsht_start(|n, now| n.put(now, vk, value, ttl_secs, None))
                .await;
        })
        .detach();
    }

    /// Queues the complete objects this core owns in the cache for their
    /// pointers (after a restart).
    pub(super) fn adopt_cached(&self) {
        *self.fetch.adopt.borrow_mut() = self.cache.complete_keys_owned();
    }
}

/// The level at which a source was found, if it is a peer (§3.2): the
/// level of the DSHT get that named it, 0 for a peer named by a lost claim.
fn peer_level(source: coral::proxy::fetch::Served) -> Option<coral::dsht::node::Level> {
    match source {
        coral::proxy::fetch::Served::Peer(level) => Some(level),
        coral::proxy::fetch::Served::ClaimedPeer => Some(0),
        _ => None,
    }
}

/// What a fill keeps to resume after losing its source (issue 24 item 1).
struct Fill {
    /// The policy's record of the losses.
    resume: fetch::Resume,
    /// The `If-Range` value (`coral::proxy::fetch::resume_validator`).
    validator: Option<Vec<u8>>,
    /// The body's length, if the first answer said it.
    full_len: Option<u64>,
    /// The answer's `Vary`, as the origin is asked for the same variant.
    vary: Option<Headers>,
}

/// A source that continues a fill.
struct Resumed {
    resp: upstream::Response,
    /// The peer, or `None`: the origin.
    from: Option<SocketAddr>,
    addr: SocketAddr,
    /// Body bytes to drop first (`coral::proxy::fetch::ResumeAnswer`).
    skip: u64,
    /// A peer's signed head, verified (issue 22 item 4).
    signed: Option<coral::verify::SignedHead>,
}

/// The `Vary` of `head` as header fields, if it has one.
fn vary_fields(head: &ResponseHead) -> Option<Headers> {
    let mut v = Headers::new();
    for x in head.headers.get_all("vary") {
        v.insert("vary", x);
    }
    head.headers.contains("vary").then_some(v)
}

/// The URL `job` fetches, for logs and the status page.
impl ProxyCore {
    /// The job fetching `key`, if one does (its URL, for evidence: issue 22
    /// item 5 c).
    pub(super) fn job_of(&self, key: &Id) -> Option<Job> {
        self.fetch.jobs.borrow().get(key).map(|j| j.job.clone())
    }
}

fn job_url(job: &Job) -> String {
    format!("http://{}{}", job.origin, job.request.path().unwrap_or("/"))
}

/// `url` cut to `STATUS.url_bytes_max` bytes (at a character boundary).
fn cut_url(mut url: String) -> String {
    let mut at = url.len().min(crate::limits::STATUS.url_bytes_max);
    while !url.is_char_boundary(at) {
        at -= 1;
    }
    url.truncate(at);
    url
}

/// Objects in flight this core reports, at most.
const IN_FLIGHT_REPORTED_MAX: usize = crate::limits::FILL.in_flight_reported_max;

/// This core's objects in flight for the status page (issue 24 item 4):
/// per object, the source its fill reads from now (`origin`, or the peer's
/// address), the bytes stored so far and how often it resumed, at most
/// `IN_FLIGHT_REPORTED_MAX` of them.
pub fn in_flight_json() -> serde_json::Value {
    let Some(pc) = super::CORE.with(|c| c.borrow().clone()) else {
        return serde_json::Value::Array(Vec::new());
    };
    let jobs = pc.fetch.jobs.borrow();
    let policy = pc.fetch.policy.borrow();
    let mut out: Vec<serde_json::Value> = jobs
        .iter()
        .take(IN_FLIGHT_REPORTED_MAX)
        .map(|(key, js)| {
            let p = &js.progress;
            let (source, from) = match (p.reading.get(), p.from.get()) {
                (false, _) => ("waiting", serde_json::Value::Null),
                (true, Some(a)) => ("peer", a.to_string().into()),
                (true, None) => ("origin", serde_json::Value::Null),
            };
            let level = policy.fetching_from(key).and_then(peer_level);
            serde_json::json!({
                "key": key.to_string(),
                "url": cut_url(job_url(&js.job)),
                "source": source,
                "from": from,
                "level": level,
                "bytes": p.bytes.get(),
                "resumes": p.resumes.get(),
                "waiters": js.waiters.len(),
            })
        })
        .collect();
    out.sort_by(|a, b| a["url"].as_str().cmp(&b["url"].as_str()));
    serde_json::Value::Array(out)
}
