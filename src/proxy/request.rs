//! One decision per HTTP request, the shape of `Dnssrv::answer_or_hold`: the
//! runtime (`shards/src/proxy/`) moves bytes and drives these calls; the
//! order in which a request is judged lives here, testable without sockets.
//!
//! 1. [`route`]: the parsed request head and the node's zones give either a
//!    [`Refusal`] (status, reason, keep-alive) or a [`Route`] (origin,
//!    canonical URL, key, forwarding rules).
//! 2. [`Lookup::decide`], after each cache lookup: what to serve — a hit, a
//!    copy arriving or kept stale, another variant's key, a refusal, a pass
//!    to the origin, or a fill through the owning core ([`Serve`]).
//! 3. [`copy_answer`], for a copy served: a 304 for a conditional that
//!    matches, a range of a complete 200, or the whole body.
//!
//! What a failed fetch answers is [`super::fetch::Fail`]'s; what a fetch's
//! response means for the object is [`super::fetch::judge`]'s.

use std::borrow::Cow;

use crate::dsht::id::Id;
use crate::dsht::node::Level;

use super::fetch::Fail;
use super::http::{self, Headers, Method, RequestHead, ResponseHead};
use super::names::{self, Origin, Zones};
use super::pass::PassMemory;
use super::policy::{
    self, CacheStatus, ClientHeadInfo, Conditional, Forward, Freshness, RangeAnswer,
};

/// Why a method other than GET and HEAD is refused (issue 26 item 13: by
/// design, and the answer says so).
pub const METHOD_REFUSED: &str = "coral serves only GET and HEAD, by design: it caches public \
    content for everyone and is not a relay for form posts or uploads (README, \"What coral \
    refuses\")";

/// A request answered with an error, without the cache or the origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The response's status.
    pub status: u16,
    /// Why, in the body of the answer.
    pub reason: Cow<'static, str>,
    /// The connection stays open after the answer.
    pub keep_alive: bool,
    /// The `Allow` field of a 405.
    pub allow: Option<&'static str>,
    /// A malformed request (counted as one; the connection closes).
    pub malformed: bool,
    /// The request's body is read (and dropped) before the answer; a 405's
    /// is not, and its connection closes.
    pub reads_body: bool,
}

impl Refusal {
    /// An error answer, read body and all.
    fn new(status: u16, reason: impl Into<Cow<'static, str>>, keep_alive: bool) -> Refusal {
        Refusal {
            status,
            reason: reason.into(),
            keep_alive,
            allow: None,
            malformed: false,
            reads_body: true,
        }
    }

    /// A malformed request: 400 and a closed connection.
    fn malformed(reason: &'static str) -> Refusal {
        Refusal {
            malformed: true,
            ..Refusal::new(400, reason, false)
        }
    }

    /// What a failed fetch answers a request (`keep_alive`: the client's).
    pub fn failed(fail: Fail, keep_alive: bool) -> Refusal {
        Refusal::new(fail.status, fail.reason(), keep_alive)
    }
}

/// Where a request goes: the object it names and how it may be fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The origin named by the Coralized host (or a peer's absolute URL).
    pub origin: Origin,
    /// The canonical URL of the object.
    pub url: String,
    /// SHA-1 of the canonical URL (the cache and the DSHT key).
    pub key: Id,
    /// A peer's request (`Coral-No-Forward: 1`): answered only from the
    /// cache or a fetch already under way here, never forwarded.
    pub no_forward: bool,
    /// The request may not be answered from the cache (`no-store`,
    /// `Authorization`, ...): it is passed to the origin for this client alone.
    pub bypass: bool,
}

/// Routes a parsed request, in this order: only GET and HEAD; a peer names
/// the object by its canonical URL in absolute form, everyone else by a
/// Coralized Host (coral is not an open proxy); a request that came through
/// Coral already is a loop (RFC 8586); then the canonical URL and its key.
pub fn route(req: &RequestHead, zones: &Zones) -> Result<Route, Refusal> {
    if !matches!(req.method, Method::Get | Method::Head) {
        return Err(Refusal {
            allow: Some("GET, HEAD"),
            reads_body: false,
            ..Refusal::new(405, METHOD_REFUSED, false)
        });
    }
    let ka = req.keep_alive;
    let no_forward = policy::no_forward(req);
    let bad_url = |e: names::NameError| Refusal::new(400, format!("bad URL: {e}"), false);
    let (origin, url) = if no_forward && http::split_absolute(&req.target).is_some() {
        let (origin, path) = names::parse_http_url(&req.target).map_err(bad_url)?;
        let url = names::canonical_url(&origin, &path).map_err(bad_url)?;
        (origin, url)
    } else {
        let host = req.host().ok_or_else(|| Refusal::malformed("no Host"))?;
        let origin = names::origin_of_host(host, zones)
            .map_err(|e| Refusal::new(403, format!("not a Coralized name: {e}"), ka))?;
        if !no_forward && policy::loop_detected(req, zones) {
            return Err(Refusal::new(
                403,
                "request loop (CDN-Loop names this CDN)",
                ka,
            ));
        }
        let path = req
            .path()
            .ok_or_else(|| Refusal::malformed("bad request target"))?;
        let url = names::canonical_url(&origin, path).map_err(bad_url)?;
        (origin, url)
    };
    let key = names::cache_key(&url);
    let bypass = !no_forward && !policy::request_is_cacheable(req);
    Ok(Route {
        origin,
        url,
        key,
        no_forward,
        bypass,
    })
}

/// What the cache holds under the key looked up.
#[derive(Clone, Copy, Debug)]
pub enum Found<'a> {
    /// Nothing (or nothing readable).
    Nothing,
    /// A copy of the object.
    Copy {
        /// Its stored response head.
        head: &'a ResponseHead,
        /// The request fields its `Vary` names, as stored with it.
        vary_req: &'a Headers,
        /// How far it is.
        state: CopyState,
    },
}

/// How far a cached copy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyState {
    /// Being written (its bytes arrive: cut-through).
    Writing,
    /// Complete; `fresh` as of now.
    Complete {
        /// Still fresh.
        fresh: bool,
    },
    /// Its transfer failed.
    Failed,
}

/// What to do for a request after a cache lookup ([`Lookup::decide`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serve {
    /// A fresh complete copy, found on the first look: a hit.
    Hit,
    /// Serve the copy (arriving, fetched, or kept stale) with this status.
    Copy(CacheStatus),
    /// Another `Vary` variant: look up [`Lookup::key`] (now its key).
    Variant,
    /// Answer with an error.
    Refuse(Refusal),
    /// Fetch for this client alone, without storing.
    Pass(Forward),
    /// Ask the key's owning core to fill the cache, then look again
    /// ([`Lookup::filled`] with its answer).
    Fill,
}

/// A routed request's way through the cache: the key looked up, whether
/// the owning core was asked (once), and the peer level the object came from.
#[derive(Clone, Debug)]
pub struct Lookup {
    key: Id,
    url_key: Id,
    no_forward: bool,
    asked: bool,
    peer: Option<Level>,
    /// The first look found a stale complete copy (`fwd=stale`).
    found_stale: bool,
    /// The fill kept that stale copy: the origin failed.
    kept_stale: bool,
    /// The owning core asked for a second fill ([`Lookup::refill`]).
    refilled: bool,
    /// The fill was another request's fetch, joined ([`Lookup::filled`]).
    collapsed: bool,
    /// The status the fill's next hop answered ([`Lookup::next_hop_answered`]).
    fwd_status: Option<u16>,
}

impl Lookup {
    /// The way of a request routed to `route`.
    pub fn new(route: &Route) -> Lookup {
        Lookup {
            key: route.key,
            url_key: route.key,
            no_forward: route.no_forward,
            asked: false,
            peer: None,
            found_stale: false,
            kept_stale: false,
            refilled: false,
            collapsed: false,
            fwd_status: None,
        }
    }

    /// The key to look up (the URL's, or a `Vary` variant's).
    pub fn key(&self) -> Id {
        self.key
    }

    /// The owning core filled the cache; the object came (or comes) from a
    /// peer found at `peer`, if any; `collapsed`: by a fetch another
    /// request started, which this one joined (RFC 9211 §2.5). (After it
    /// kept a stale copy instead, the next look needs no call.)
    pub fn filled(&mut self, peer: Option<Level>, collapsed: bool) {
        self.peer = peer;
        self.collapsed = collapsed;
    }

    /// The owning core's fetch answered another request, whose fields its
    /// key did not account for (`keyed::check_key`): this request may be
    /// filled once more, as the host's learned fields now say. False when
    /// it was refilled before (the request then passes).
    pub fn refill(&mut self) -> bool {
        if self.refilled {
            return false;
        }
        self.refilled = true;
        self.asked = false;
        true
    }

    /// The status the fill's next hop (the origin or a peer) answered with,
    /// if one answered: `fwd-status` when it is not the client's (RFC 9211
    /// §2.3; [`copy_answer`] leaves it out when it is).
    pub fn next_hop_answered(&mut self, status: Option<u16>) {
        self.fwd_status = status;
    }

    /// The owning core's fetch failed and kept the stale copy found on the
    /// first look, to be served stale on error (RFC 9111 §4.2.4).
    pub fn kept_stale(&mut self) {
        self.kept_stale = true;
    }

    /// What to serve `req` after looking up [`Lookup::key`] at `now_secs`,
    /// in this order: a copy of another variant sends the request to that
    /// variant's key (`variant` finds or admits it) or past the cache; a copy
    /// arriving is served as it arrives; a fresh one is a hit (or, after the
    /// fill, the fetched copy; a stale one then is kept on the origin's
    /// error); a peer gets no stale copy and no fill; after the fill there
    /// is nothing else to try; an object recently found uncacheable passes
    /// (hit-for-pass); anything else is filled.
    pub fn decide(
        &mut self,
        req: &RequestHead,
        found: Found<'_>,
        now_secs: u64,
        passes: &mut PassMemory,
        variant: impl FnOnce() -> Option<Id>,
    ) -> Serve {
        let ka = req.keep_alive;
        if let Found::Copy {
            head,
            vary_req,
            state,
        } = found
        {
            if !policy::vary_matches(vary_req, head, req) {
                // Another variant: its own entry (`coral::proxy::vary`).
                if self.key == self.url_key {
                    if let Some(vk) = variant() {
                        self.key = vk;
                        return Serve::Variant;
                    }
                }
                if self.no_forward {
                    return Serve::Refuse(Refusal::new(504, "no matching copy here", ka));
                }
                return Serve::Pass(Forward::VaryMiss);
            }
            match state {
                CopyState::Writing => return Serve::Copy(self.arriving()),
                CopyState::Complete { fresh } if fresh || self.asked => {
                    return self.complete(fresh);
                }
                // A peer's request for a stale copy goes to the owning
                // core: it answers from a revalidation under way here (one
                // node revalidates network-wide, `stale::revalidation_key`),
                // else 504.
                _ => {}
            }
        }
        if self.asked {
            return Serve::Refuse(Refusal::new(502, "the object could not be fetched", ka));
        }
        if let Found::Copy {
            state: CopyState::Complete { fresh: false },
            ..
        } = found
        {
            self.found_stale = true;
        }
        // Hit-for-pass: its last answer could not be stored.
        if !self.no_forward && passes.pass(&self.key, now_secs) {
            return Serve::Pass(Forward::UriMiss);
        }
        self.asked = true;
        Serve::Fill
    }

    /// Why this request's fill went forward: the copy it found was stale, or
    /// there was none.
    fn fwd(&self) -> Forward {
        if self.found_stale {
            Forward::Stale
        } else {
            Forward::UriMiss
        }
    }

    /// The status of a copy being written (RFC 9211): this request's own
    /// fill (`fwd`, `stored`), or another request's fetch it joined — on its
    /// first look, or queued for the fill before its first byte
    /// (`collapsed`: not a hit, the copy was not stored when it came).
    fn arriving(&self) -> CacheStatus {
        let mut cs = CacheStatus::forward(self.fwd(), true);
        cs.collapsed = !self.asked || self.collapsed;
        cs.fwd_status = self.fwd_status.filter(|_| self.asked);
        cs.detail = self.peer.map(peer_detail);
        cs
    }

    /// A complete copy: a fresh one on the first look is a hit; after the
    /// fill it is the fetched copy (`fwd`, `stored`, even when its origin
    /// made it stale at once, `max-age=0`), or the stale copy kept because
    /// the origin failed (`fwd=stale; detail=stale-on-error`).
    fn complete(&self, fresh: bool) -> Serve {
        if !self.asked {
            return Serve::Hit;
        }
        if self.kept_stale && !fresh {
            let mut cs = CacheStatus::forward(Forward::Stale, false);
            cs.fwd_status = self.fwd_status;
            cs.detail = Some(policy::detail::STALE_ON_ERROR);
            return Serve::Copy(cs);
        }
        let mut cs = CacheStatus::forward(self.fwd(), true);
        cs.collapsed = self.collapsed;
        cs.fwd_status = self.fwd_status;
        cs.detail = self.peer.map(peer_detail);
        Serve::Copy(cs)
    }
}

/// `Cache-Status`'s detail for an object from a peer found at `level`
/// (`peer-l2`, `peer-l1`, `peer-l0`): where Fig. 4 counts it.
pub fn peer_detail(level: Level) -> &'static str {
    match level {
        2 => policy::detail::PEER_L2,
        1 => policy::detail::PEER_L1,
        _ => policy::detail::PEER_L0,
    }
}

/// A cached copy being served, as [`copy_answer`] needs it.
#[derive(Clone, Copy, Debug)]
pub struct CopyServed<'a> {
    /// Its stored response head.
    pub head: &'a ResponseHead,
    /// Its freshness.
    pub freshness: Freshness,
    /// The body's length: known when complete, or when its origin named it.
    pub body_len: Option<u64>,
    /// Complete (a range is answered only from a complete copy).
    pub complete: bool,
    /// The `Cache-Status` entry.
    pub cache_status: CacheStatus,
}

/// How a cached copy answers `req` at `now_secs` (RFC 9110 §13, §14): a 304
/// for a conditional that matches a 200; a range of a complete 200 for a
/// GET; otherwise the whole body. The client head's inputs, for
/// [`policy::client_head`].
pub fn copy_answer<'a>(
    req: &RequestHead,
    copy: &CopyServed<'_>,
    now_secs: u64,
    node_name: &'a str,
) -> ClientHeadInfo<'a> {
    let ok = copy.head.status == 200;
    let not_modified =
        ok && policy::evaluate_conditional(req, copy.head) == Conditional::NotModified;
    let range = match copy.body_len {
        // A body kept in transfer codings is sent whole (`policy::client_head`).
        Some(len)
            if copy.complete
                && req.method == Method::Get
                && ok
                && policy::stored_codings(copy.head).is_none() =>
        {
            policy::range_for(req, copy.head, len)
        }
        _ => RangeAnswer::Full,
    };
    let status = if not_modified {
        304
    } else {
        match range {
            RangeAnswer::Partial { .. } => 206,
            RangeAnswer::Unsatisfiable => 416,
            RangeAnswer::Full => copy.head.status,
        }
    };
    let mut cache_status = copy.cache_status;
    // RFC 9211 §2.3: `fwd-status` only when it is not the client's status.
    cache_status.fwd_status = cache_status
        .fwd_status
        .filter(|s| *s != status && cache_status.fwd.is_some());
    ClientHeadInfo {
        node_name,
        age_secs: policy::age_secs(&copy.freshness, now_secs),
        cache_status,
        range,
        body_len: copy.body_len,
        keep_alive: req.keep_alive,
        not_modified,
        client_minor_version: req.minor_version,
    }
}

#[cfg(test)]
mod tests;
