//! The shared-cache policy (RFC 9110, RFC 9111) with the deployed CoralCDN's rules: what
//! may be stored and for how long, what a client gets (conditional requests, ranges,
//! `Age`, `Via`, `Cache-Status`), and what the origin or a peer is asked.
//!
//! Deployed rules (the deployed CoralCDN's): cookies are stripped both ways (every Coralized site
//! shares one domain, so cookies would leak between sites); an origin that says nothing
//! about freshness gets a heuristic lifetime ([`Heuristic`]: 10 % of the time since
//! `Last-Modified`, and at least a few minutes); negative answers are cached briefly. A
//! client's `Cache-Control: no-cache` (a browser's reload) does not reach the origin: as
//! Varnish and CoralCDN did, a flash crowd of reloads is served from the cache.
//! Times are whole seconds since the epoch, given by the caller.

use super::date::{parse_http_date, parse_http_date_at};
use super::http::{trim_ows, write_decimal, Framing, Headers, Method, RequestHead, ResponseHead};
use super::names::{Origin, Zones};

mod targeted;
pub use targeted::{TARGETED_BYTES_MAX, TARGET_LIST};

/// Heuristic freshness (RFC 9111 §4.2.2) without `Last-Modified`: long enough that a flash
/// crowd is served from the caches (each node asks its origin or a peer at most once per
/// this many seconds per object), short enough that a publisher's change shows within
/// minutes. The deployed CoralCDN trusted silent origins for 12 hours.
pub const HEURISTIC_DEFAULT_SECS: u64 = 300;
/// The fraction of the time since `Last-Modified` a response stays fresh heuristically
/// (RFC 9111 §4.2.2 suggests 10 %, as Apache's `CacheLastModifiedFactor` and Squid use).
pub const HEURISTIC_LAST_MODIFIED_PERCENT: u64 = 10;
/// The most heuristic freshness `Last-Modified` earns (Apache's `CacheMaxExpire`: 1 day).
pub const HEURISTIC_MAX_SECS: u64 = 24 * 3600;

/// Which responses get heuristic freshness (`[proxy] heuristic`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeuristicMode {
    /// `"coral"`: `Last-Modified`-based, and at least [`Heuristic::default_secs`]: a
    /// publisher that says nothing still has its flash crowd absorbed.
    Coral,
    /// `"rfc"`: `Last-Modified`-based only; a response with neither explicit freshness
    /// nor `Last-Modified` is not stored.
    Rfc,
}

/// Heuristic freshness for responses without explicit freshness (RFC 9111 §4.2.2),
/// for statuses cacheable by default (RFC 9110 §15.1) or marked `public`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heuristic {
    /// Whether [`Heuristic::default_secs`] applies.
    pub mode: HeuristicMode,
    /// Lifetime without `Last-Modified`, and the least with it
    /// ([`HeuristicMode::Coral`] only).
    pub default_secs: u64,
    /// Percent of `Date − Last-Modified` given as lifetime.
    pub last_modified_percent: u64,
    /// Cap of the `Last-Modified`-based lifetime.
    pub max_secs: u64,
}

impl Default for Heuristic {
    fn default() -> Heuristic {
        Heuristic {
            mode: HeuristicMode::Coral,
            default_secs: HEURISTIC_DEFAULT_SECS,
            last_modified_percent: HEURISTIC_LAST_MODIFIED_PERCENT,
            max_secs: HEURISTIC_MAX_SECS,
        }
    }
}

impl Heuristic {
    /// The heuristic lifetime of a response received at `date_secs` that was last
    /// modified at `last_modified` (`None`: no valid `Last-Modified`); `None`: no
    /// heuristic freshness (store only with explicit freshness). In
    /// [`HeuristicMode::Coral`] the default is also the floor of the `Last-Modified`
    /// lifetime: a page published a minute ago is the very one a flash crowd asks for,
    /// and 10 % of a minute would send every node back to its origin every 6 s.
    pub fn lifetime_secs(&self, date_secs: u64, last_modified: Option<u64>) -> Option<u64> {
        let from_last_modified = match last_modified {
            // A Last-Modified after Date says nothing about the past.
            Some(lm) if lm <= date_secs => {
                let age = date_secs - lm;
                Some(
                    (age / 100)
                        .saturating_mul(self.last_modified_percent)
                        .saturating_add(age % 100 * self.last_modified_percent / 100)
                        .min(self.max_secs),
                )
            }
            _ => None,
        };
        match self.mode {
            HeuristicMode::Coral => {
                Some(from_last_modified.map_or(self.default_secs, |l| l.max(self.default_secs)))
            }
            HeuristicMode::Rfc => from_last_modified,
        }
    }
}

/// The `CDN-Loop` token (RFC 8586) and `Cache-Status` cache name of Coral.
pub const CDN_TOKEN: &str = "coral";
/// Appended to the client's `User-Agent` on requests to origins, as the deployed proxy did.
pub const USER_AGENT_MARKER: &str = "CoralWebPrx/0.2 (See http://coralcdn.org/)";
/// The header that tells a peer to answer only from its cache or an in-progress fetch.
pub const NO_FORWARD_HEADER: &str = "coral-no-forward";
/// A `Range` header longer than this is abusive: whole body.
pub const RANGE_BYTES_MAX: usize = crate::limits::PROXY.range_bytes_max;

/// When a stored response was received and how long it stays fresh (RFC 9111 §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freshness {
    /// The origin's `Date` (or the receipt time, when absent or invalid).
    pub date_secs: u64,
    /// The instant after which the response is stale.
    pub fresh_until_secs: u64,
    /// When the response was received (`response_time`).
    pub response_secs: u64,
    /// `corrected_initial_age` of RFC 9111 §4.2.3.
    pub initial_age_secs: u64,
    /// A stale copy must not be served without revalidation (`no-cache`,
    /// `must-revalidate`, `proxy-revalidate`, `s-maxage`), not even when the origin errs.
    pub must_revalidate: bool,
}

/// Whether a response may be stored, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storable {
    /// Store it with this freshness.
    Yes(Freshness),
    /// Do not store it, because of this.
    No(&'static str),
}

/// Cache-Control directives we act on, parsed from all fields of that name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CacheControl {
    no_store: bool,
    no_cache: bool,
    private: bool,
    public: bool,
    must_revalidate: bool,
    proxy_revalidate: bool,
    /// `Some(None)`: present but invalid.
    max_age: Option<Option<u64>>,
    s_maxage: Option<Option<u64>>,
    /// From a targeted field (RFC 9213): `Expires` is ignored too.
    targeted: bool,
}

/// RFC 9111 §1.2.2: a delta-seconds too large is taken as 2^31.
fn delta_seconds_value(n: u64) -> u64 {
    n.min(1 << 31)
}

pub(crate) fn delta_seconds(v: Option<&[u8]>) -> Option<u64> {
    let v = v?;
    let v = v
        .strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""))
        .unwrap_or(v);
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // RFC 9111 §1.2.2: a value too large is taken as 2^31.
    Some(
        v.iter()
            .try_fold(0u64, |n, d| {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
            .unwrap_or(1 << 31)
            .min(1 << 31),
    )
}

/// The directives this cache obeys: those of the first valid targeted field
/// (`Coral-Cache-Control`, then `CDN-Cache-Control`; RFC 9213 §2.1), else
/// `Cache-Control`'s.
fn cache_control(h: &Headers) -> CacheControl {
    if let Some(cc) = targeted::targeted_cache_control(h) {
        return CacheControl {
            targeted: true,
            ..cc
        };
    }
    let mut cc = CacheControl::default();
    for d in h.list("cache-control") {
        let (name, arg) = match d.iter().position(|&b| b == b'=') {
            Some(eq) => (trim_ows(&d[..eq]), Some(trim_ows(&d[eq + 1..]))),
            None => (d, None),
        };
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if is("no-store") {
            cc.no_store = true;
        } else if is("no-cache") {
            cc.no_cache = true;
        } else if is("private") {
            cc.private = true;
        } else if is("public") {
            cc.public = true;
        } else if is("must-revalidate") {
            cc.must_revalidate = true;
        } else if is("proxy-revalidate") {
            cc.proxy_revalidate = true;
        } else if is("max-age") {
            // Two max-age directives that disagree: RFC 9111 §4.2.1, treat as stale.
            let v = delta_seconds(arg);
            cc.max_age = match cc.max_age {
                Some(old) if old != v => Some(None),
                _ => Some(v),
            };
        } else if is("s-maxage") {
            let v = delta_seconds(arg);
            cc.s_maxage = match cc.s_maxage {
                Some(old) if old != v => Some(None),
                _ => Some(v),
            };
        }
    }
    cc
}

/// Whether the request may be answered from the cache at all: GET or HEAD, without
/// `Authorization` (whose answers are for one user; RFC 9111 §3.5), and without
/// `Cache-Control: no-store`.
pub fn request_is_cacheable(req: &RequestHead) -> bool {
    matches!(req.method, Method::Get | Method::Head)
        && !req.headers.contains("authorization")
        && !req.headers.has_token("cache-control", "no-store")
}

/// Statuses we may store (RFC 9110 §15: final, understood, and a whole representation).
fn status_storable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 302 | 303 | 307 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Statuses cacheable by default (RFC 9110 §15.1): they may get heuristic freshness.
fn status_heuristic(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Whether a response to `req` may be stored, and its freshness as of `now_secs`, the time
/// it was received (RFC 9111 §3, §4.2), with the default [`Heuristic`]. See
/// [`storable_with`].
pub fn storable(req: &RequestHead, resp: &ResponseHead, now_secs: u64) -> Storable {
    storable_with(req, resp, now_secs, &Heuristic::default())
}

/// The `Age` a response carries (RFC 9111 §5.1): the first member of the first field (a
/// list value such as `7200, 0` is read as 7200), as delta-seconds; an invalid one
/// (`-1`, `1.5`, `abc`) is ignored (0).
pub fn age_field_secs(resp: &ResponseHead) -> u64 {
    let Some(first) = resp.headers.get("age") else {
        return 0;
    };
    let member = trim_ows(first.split(|&b| b == b',').next().unwrap_or_default());
    if member.is_empty() || !member.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    delta_seconds_value(
        member
            .iter()
            .try_fold(0u64, |n, d| {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
            .unwrap_or(u64::MAX),
    )
}

/// The one value of a singleton date field (`Date`, `Expires`, `Last-Modified`), read as
/// of `now_secs`: `Err` when it is invalid or the field appears more than once.
fn date_field(h: &Headers, name: &str, now_secs: u64) -> Option<Result<u64, ()>> {
    let mut all = h.get_all(name);
    let first = all.next()?;
    if all.next().is_some() {
        return Some(Err(()));
    }
    Some(parse_http_date_at(first, now_secs).ok_or(()))
}

/// Whether a response to `req` may be stored, and its freshness as of `now_secs`, the time
/// it was received (RFC 9111 §3, §4.2). Not stored: methods other than GET, `no-store` in
/// request or response, `private`, `Vary: *`, statuses we do not store, `Authorization`
/// requests unless the response says `public`, `s-maxage` or `must-revalidate` (§3.5),
/// and explicitly or heuristically uncacheable statuses without explicit freshness. The
/// response directives are the targeted field's when there is a valid one (RFC 9213),
/// else `Cache-Control`'s. Explicit freshness: `s-maxage`, `max-age`, then `Expires −
/// Date` (an invalid or repeated `Expires` is in the past, §5.3; a targeted field
/// ignores `Expires`); else `heuristic`.
pub fn storable_with(
    req: &RequestHead,
    resp: &ResponseHead,
    now_secs: u64,
    heuristic: &Heuristic,
) -> Storable {
    if req.method != Method::Get {
        return Storable::No("method");
    }
    if req.headers.has_token("cache-control", "no-store") {
        return Storable::No("request no-store");
    }
    if !status_storable(resp.status) {
        return Storable::No("status");
    }
    let cc = cache_control(&resp.headers);
    if cc.no_store {
        return Storable::No("no-store");
    }
    if cc.private {
        return Storable::No("private");
    }
    if resp.headers.has_token("vary", "*") {
        return Storable::No("vary *");
    }
    if req.headers.contains("authorization")
        && !(cc.public || cc.s_maxage.is_some() || cc.must_revalidate)
    {
        return Storable::No("authorization");
    }
    // An invalid or repeated Date is as good as none: the receipt time.
    let date_secs = match date_field(&resp.headers, "date", now_secs) {
        Some(Ok(d)) => d,
        _ => now_secs,
    };
    // RFC 9111 §4.2.1: s-maxage, then max-age, then Expires − Date.
    let explicit = if let Some(s) = cc.s_maxage {
        Some(s.unwrap_or(0))
    } else if let Some(m) = cc.max_age {
        Some(m.unwrap_or(0))
    } else if cc.targeted {
        None
    } else {
        // §5.3: an invalid Expires (e.g. "0"), or two of them, is in the past.
        date_field(&resp.headers, "expires", now_secs)
            .map(|e| e.map_or(0, |e| e.saturating_sub(date_secs)))
    };
    let lifetime = match explicit {
        _ if cc.no_cache => 0,
        Some(l) => l,
        None if !status_heuristic(resp.status) && !cc.public => {
            return Storable::No("status without explicit freshness")
        }
        None => {
            let last_modified = match date_field(&resp.headers, "last-modified", now_secs) {
                Some(Ok(lm)) => Some(lm),
                _ => None,
            };
            match heuristic.lifetime_secs(date_secs, last_modified) {
                Some(l) => l,
                None => return Storable::No("no explicit freshness or Last-Modified"),
            }
        }
    };
    // RFC 9111 §4.2.3 with request_time = response_time = now.
    let age_value = age_field_secs(resp);
    let apparent_age = now_secs.saturating_sub(date_secs);
    let initial_age_secs = apparent_age.max(age_value);
    Storable::Yes(Freshness {
        date_secs,
        fresh_until_secs: now_secs.saturating_add(lifetime.saturating_sub(initial_age_secs)),
        response_secs: now_secs,
        initial_age_secs,
        // §5.2.2.4: no-cache is never served without successful revalidation — not
        // stale on the origin's error either; §5.2.2.10: s-maxage implies
        // proxy-revalidate.
        must_revalidate: cc.no_cache
            || cc.must_revalidate
            || cc.proxy_revalidate
            || cc.s_maxage.is_some(),
    })
}

/// Whether a stored response's directives (the targeted field's, else `Cache-Control`'s)
/// forbid serving it stale, even when the origin fails: `no-cache`, `must-revalidate`,
/// `proxy-revalidate`, or `s-maxage` (which implies `proxy-revalidate`, RFC 9111
/// §5.2.2.10). [`Freshness::must_revalidate`] holds the same, computed when stored.
pub fn forbids_stale(head: &ResponseHead) -> bool {
    let cc = cache_control(&head.headers);
    cc.no_cache || cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some()
}

/// `current_age` of RFC 9111 §4.2.3: the corrected initial age plus the time resident here.
pub fn age_secs(stored: &Freshness, now_secs: u64) -> u64 {
    stored
        .initial_age_secs
        .saturating_add(now_secs.saturating_sub(stored.response_secs))
}

/// Whether a stored response is still fresh (RFC 9111 §4.2).
pub fn is_fresh(stored: &Freshness, now_secs: u64) -> bool {
    now_secs < stored.fresh_until_secs
}

/// Whether a stale copy may be served when the origin fails ("serve liberally", RFC 5861
/// `stale-if-error` behaviour by default): not when the origin forbade it.
pub fn may_serve_stale(stored: &Freshness) -> bool {
    !stored.must_revalidate
}

/// Whether the origin's answer `status`, when asked again for an object of which a copy
/// with `stored_status` is kept, counts as a failure, so that the copy is served stale
/// (when [`may_serve_stale`]) and kept: any 5xx; and over a good copy (below 400), a 4xx
/// that refuses rather than says the object is gone (403, 429 ... from an origin that
/// throttles a flash crowd). 404 and 410 replace the copy: the object is gone.
pub fn origin_failed(stored_status: u16, status: u16) -> bool {
    status >= 500 || (stored_status < 400 && status >= 400 && !matches!(status, 404 | 410))
}

/// The answer to a conditional request from a stored response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conditional {
    /// 304 Not Modified.
    NotModified,
    /// Serve the response as usual.
    Proceed,
}

/// An entity tag: (weak, opaque-tag with quotes).
fn entity_tag(v: &[u8]) -> Option<(bool, &[u8])> {
    let v = trim_ows(v);
    let (weak, tag) = match v.strip_prefix(b"W/") {
        Some(t) => (true, t),
        None => (false, v),
    };
    if tag.len() < 2 || tag.first() != Some(&b'"') || tag.last() != Some(&b'"') {
        return None;
    }
    Some((weak, tag))
}

/// Splits an entity-tag list, respecting commas inside quotes.
fn entity_tags(v: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    for (i, &b) in v.iter().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                out.push(trim_ows(&v[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(trim_ows(&v[start..]));
    out.retain(|t| !t.is_empty());
    out
}

/// Evaluates `If-None-Match` (weak comparison, RFC 9110 §13.1.2) or, without it,
/// `If-Modified-Since` (§13.1.3) against a stored 200 response, for GET and HEAD.
pub fn evaluate_conditional(req: &RequestHead, stored: &ResponseHead) -> Conditional {
    if !matches!(req.method, Method::Get | Method::Head) || stored.status != 200 {
        return Conditional::Proceed;
    }
    if req.headers.contains("if-none-match") {
        let stored_tag = stored.headers.get("etag").and_then(entity_tag);
        for field in req.headers.get_all("if-none-match") {
            for t in entity_tags(field) {
                if t == b"*" {
                    return Conditional::NotModified;
                }
                if let (Some((_, a)), Some((_, b))) = (entity_tag(t), stored_tag) {
                    if a == b {
                        return Conditional::NotModified;
                    }
                }
            }
        }
        return Conditional::Proceed;
    }
    if let Some(ims) = req
        .headers
        .get("if-modified-since")
        .and_then(parse_http_date)
    {
        let last = stored
            .headers
            .get("last-modified")
            .and_then(parse_http_date);
        if let Some(last) = last {
            if last <= ims {
                return Conditional::NotModified;
            }
        }
    }
    Conditional::Proceed
}

/// The validators to revalidate a stored response with its origin (RFC 9111 §4.3.1):
/// `If-None-Match` from `ETag`, `If-Modified-Since` from `Last-Modified`.
pub fn revalidation_headers(stored: &ResponseHead) -> Headers {
    let mut h = Headers::new();
    if let Some(etag) = stored.headers.get("etag") {
        h.insert("if-none-match", etag);
    }
    if let Some(lm) = stored.headers.get("last-modified") {
        h.insert("if-modified-since", lm);
    }
    h
}

/// Headers a 304 may not change in a stored response (RFC 9111 §3.2 and our own).
fn keeps_stored(name: &str) -> bool {
    matches!(
        name,
        "content-length" | "content-range" | "transfer-encoding" | "content-encoding" | "age"
    ) || is_hop_by_hop(name)
        || is_cookie(name)
}

/// The stored head updated from a 304 (RFC 9111 §4.3.4): fields the 304 carries replace
/// the stored ones, except framing, hop-by-hop and cookie fields.
pub fn freshen(stored: &ResponseHead, not_modified: &ResponseHead) -> ResponseHead {
    let mut out = stored.clone();
    let names: Vec<&str> = not_modified
        .headers
        .iter()
        .map(|(n, _)| n)
        .filter(|n| !keeps_stored(n))
        .collect();
    for n in &names {
        out.headers.remove(n);
    }
    for (n, v) in not_modified.headers.iter() {
        if names.contains(&n) {
            out.headers.insert(n, v);
        }
    }
    out
}

/// What part of a stored body a request asks for (RFC 9110 §14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeAnswer {
    /// The whole body (no `Range`, an invalid, multi-range or abusive one).
    Full,
    /// 206 with these bytes.
    Partial {
        /// First byte.
        start: u64,
        /// Last byte (inclusive).
        end_inclusive: u64,
    },
    /// 416: no byte of the body is in the range.
    Unsatisfiable,
}

/// The range a GET asks of a body of `body_len` bytes: one `bytes=` range is served as
/// 206, one that starts past the end as 416; anything else — no or unparseable `Range`,
/// several ranges (an abuse vector, CVE-2011-3192), an `If-Range` that cannot be
/// checked here — gets the whole body. Use [`range_for`] to honour `If-Range`.
pub fn range(req: &RequestHead, body_len: u64) -> RangeAnswer {
    if req.headers.contains("if-range") {
        return RangeAnswer::Full;
    }
    range_unconditional(req, body_len)
}

/// [`range`], with `If-Range` (RFC 9110 §13.1.5) checked against the stored response:
/// a strong `ETag` match or an exact `Last-Modified` date, else the whole body.
pub fn range_for(req: &RequestHead, stored: &ResponseHead, body_len: u64) -> RangeAnswer {
    if stored.status != 200 {
        return RangeAnswer::Full;
    }
    if let Some(ir) = req.headers.get("if-range") {
        let ir = trim_ows(ir);
        let matches = if ir.starts_with(b"\"") {
            matches!(stored.headers.get("etag").and_then(entity_tag), Some((false, t)) if t == ir)
        } else {
            match (
                parse_http_date(ir),
                stored
                    .headers
                    .get("last-modified")
                    .and_then(parse_http_date),
            ) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            }
        };
        if !matches {
            return RangeAnswer::Full;
        }
    }
    range_unconditional(req, body_len)
}

fn range_unconditional(req: &RequestHead, body_len: u64) -> RangeAnswer {
    if req.method != Method::Get {
        return RangeAnswer::Full;
    }
    let mut fields = req.headers.get_all("range");
    let (Some(v), None) = (fields.next(), fields.next()) else {
        return RangeAnswer::Full;
    };
    if v.len() > RANGE_BYTES_MAX {
        return RangeAnswer::Full;
    }
    let v = trim_ows(v);
    let Some(spec) = v
        .get(..6)
        .filter(|u| u.eq_ignore_ascii_case(b"bytes="))
        .and_then(|_| v.get(6..))
    else {
        return RangeAnswer::Full;
    };
    let spec = trim_ows(spec);
    if spec.contains(&b',') {
        return RangeAnswer::Full;
    }
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return RangeAnswer::Full;
    };
    let (first, last) = (trim_ows(&spec[..dash]), trim_ows(&spec[dash + 1..]));
    let num = super::http::parse_digits;
    match (first.is_empty(), last.is_empty()) {
        // bytes=-N: the last N bytes.
        (true, false) => match num(last) {
            Some(0) => RangeAnswer::Unsatisfiable,
            Some(_) if body_len == 0 => RangeAnswer::Unsatisfiable,
            Some(n) => RangeAnswer::Partial {
                start: body_len - n.min(body_len),
                end_inclusive: body_len - 1,
            },
            None => RangeAnswer::Full,
        },
        // bytes=A-
        (false, true) => match num(first) {
            Some(a) if a >= body_len => RangeAnswer::Unsatisfiable,
            Some(a) => RangeAnswer::Partial {
                start: a,
                end_inclusive: body_len - 1,
            },
            None => RangeAnswer::Full,
        },
        // bytes=A-B
        (false, false) => match (num(first), num(last)) {
            (Some(a), Some(b)) if a <= b => {
                if a >= body_len {
                    RangeAnswer::Unsatisfiable
                } else {
                    RangeAnswer::Partial {
                        start: a,
                        end_inclusive: b.min(body_len - 1),
                    }
                }
            }
            _ => RangeAnswer::Full,
        },
        (true, true) => RangeAnswer::Full,
    }
}

pub(crate) fn normalized(values: impl Iterator<Item = impl AsRef<[u8]>>) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        if !out.is_empty() {
            out.push(b',');
        }
        let mut space = false;
        for &b in trim_ows(v.as_ref()) {
            if b == b' ' || b == b'\t' {
                space = true;
            } else {
                if space {
                    out.push(b' ');
                    space = false;
                }
                out.push(b);
            }
        }
    }
    out
}

/// Fields the proxy never forwards upstream: a response cannot vary on them.
pub(crate) fn never_forwarded(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"cookie") || name.eq_ignore_ascii_case(b"accept-encoding")
}

/// Whether a request matches the one a stored response was fetched for, on every field
/// its `Vary` names (RFC 9111 §4.1), values compared with whitespace normalised.
/// `stored_req_headers`: the original request's fields named by `Vary` (see
/// [`vary_request_headers`]). `Vary: *` never matches.
pub fn vary_matches(
    stored_req_headers: &Headers,
    stored_resp: &ResponseHead,
    req: &RequestHead,
) -> bool {
    for name in stored_resp.headers.list("vary") {
        if name == b"*" {
            return false;
        }
        if never_forwarded(name) {
            continue;
        }
        let Ok(name) = core::str::from_utf8(name) else {
            return false;
        };
        if normalized(stored_req_headers.get_all(name)) != normalized(req.headers.get_all(name)) {
            return false;
        }
    }
    true
}

/// The request's fields that the response's `Vary` names: kept beside the stored object
/// for [`vary_matches`].
pub fn vary_request_headers(resp: &ResponseHead, req: &RequestHead) -> Headers {
    let mut out = Headers::new();
    for name in resp.headers.list("vary") {
        let Ok(name) = core::str::from_utf8(name) else {
            continue;
        };
        for v in req.headers.get_all(name) {
            out.insert(name, v);
        }
    }
    out
}

/// Hop-by-hop fields (RFC 9110 §7.6.1), plus the non-standard ones proxies see.
pub fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "proxy-authenticate"
            | "proxy-authorization"
    )
}

fn is_cookie(name: &str) -> bool {
    matches!(name, "set-cookie" | "set-cookie2" | "cookie" | "cookie2")
}

/// Names listed in `Connection` (hop-by-hop by declaration), lower case.
fn connection_names(h: &Headers) -> Vec<String> {
    h.list("connection")
        .filter_map(|n| core::str::from_utf8(n).ok())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// What we store of an origin's head: without hop-by-hop fields (those named in
/// `Connection` too), `Set-Cookie`, and the fields we regenerate for each client
/// (`Content-Length`, `Age`).
pub fn head_to_store(resp: &ResponseHead) -> ResponseHead {
    let named = connection_names(&resp.headers);
    let mut headers = Headers::new();
    // Issue 26 item 13: the cookies an origin set are refused by design, and the
    // answer says so (`Coral-Stripped`), not only the README.
    let stripped = ["set-cookie", "set-cookie2"]
        .into_iter()
        .filter(|n| resp.headers.contains(n))
        .map(|n| {
            if n == "set-cookie" {
                "Set-Cookie"
            } else {
                "Set-Cookie2"
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    if !stripped.is_empty() {
        headers.insert(STRIPPED_FIELD, stripped.as_bytes());
    }
    for (n, v) in resp.headers.iter() {
        if n == STRIPPED_FIELD && !stripped.is_empty() {
            continue;
        }
        if is_hop_by_hop(n)
            || is_cookie(n)
            || n == "content-length"
            || n == "age"
            || named.iter().any(|x| x == n)
        {
            continue;
        }
        headers.insert(n, v);
    }
    ResponseHead {
        status: resp.status,
        reason: resp.reason.clone(),
        minor_version: 1,
        headers,
        framing: resp.framing,
        keep_alive: resp.keep_alive,
    }
}

/// The response field that names the cookie fields coral removed from an origin's
/// answer (`Coral-Stripped: Set-Cookie`): cookies are refused by design, every
/// Coralized site sharing one domain (README, "What coral refuses").
pub const STRIPPED_FIELD: &str = "coral-stripped";

/// The head to store for a response whose body is stored as it came after the
/// chunked framing is removed: [`head_to_store`]'s fields, and the transfer codings
/// coral does not decode (RFC 9112 §6.1: a proxy relays them) kept in a
/// `Transfer-Encoding` field of the stored head, which [`client_head`] writes again
/// before the `chunked` it frames the body with. Issue 26 item 6: such an answer is
/// stored by the ordinary rules instead of only relayed.
pub fn head_to_store_with_codings(resp: &ResponseHead) -> ResponseHead {
    let mut head = head_to_store(resp);
    if let Some(codings) = super::http::transfer_codings(&resp.headers) {
        head.headers.insert("transfer-encoding", &codings);
    }
    head
}

/// The transfer codings a stored head keeps ([`head_to_store_with_codings`]), if any.
pub fn stored_codings(stored: &ResponseHead) -> Option<&[u8]> {
    stored
        .headers
        .get("transfer-encoding")
        .filter(|c| !c.is_empty())
}

/// Why a request went forward, for `Cache-Status`: the values of RFC 9211 §2.2.1, and
/// no others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// The cache was configured not to handle the request (`no-store` request,
    /// `Authorization`).
    Bypass,
    /// The method is not cacheable.
    Method,
    /// Nothing stored under the URL.
    UriMiss,
    /// Stored, but for other `Vary` values.
    VaryMiss,
    /// A miss the cache cannot tell apart (RFC 9211: "uri-miss" or "vary-miss").
    Miss,
    /// A stored response was fresh, but the request's semantics forbade its use.
    Request,
    /// Stored but stale: revalidated or refetched.
    Stale,
    /// Only part of the response was stored.
    Partial,
}

impl Forward {
    /// Its `fwd` token.
    pub fn token(self) -> &'static str {
        match self {
            Forward::Bypass => "bypass",
            Forward::Method => "method",
            Forward::UriMiss => "uri-miss",
            Forward::VaryMiss => "vary-miss",
            Forward::Miss => "miss",
            Forward::Request => "request",
            Forward::Stale => "stale",
            Forward::Partial => "partial",
        }
    }
}

/// `Cache-Status` details coral writes (RFC 9211 §2.8), one vocabulary: the level a
/// peer's copy was found at (where Fig. 4 counts it), and a stale copy served because the
/// origin failed.
pub mod detail {
    /// From a peer found at level 2 (the smallest cluster).
    pub const PEER_L2: &str = "peer-l2";
    /// From a peer found at level 1.
    pub const PEER_L1: &str = "peer-l1";
    /// From a peer found at level 0 (the global cluster), or by a lost claim.
    pub const PEER_L0: &str = "peer-l0";
    /// A stale copy, served because the origin failed or could not be reached.
    pub const STALE_ON_ERROR: &str = "stale-on-error";
}

/// This cache's `Cache-Status` entry (RFC 9211).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CacheStatus {
    /// Served from storage without going forward (never with `fwd`).
    pub hit: bool,
    /// Why the request went forward, if it did.
    pub fwd: Option<Forward>,
    /// The status the next hop answered, when it differs from the client's.
    pub fwd_status: Option<u16>,
    /// The response was stored.
    pub stored: bool,
    /// The request joined another's fetch (collapsed forwarding, cut-through).
    pub collapsed: bool,
    /// Freshness left, in seconds (negative: stale).
    pub ttl: Option<i64>,
    /// One of [`detail`]'s: the peer level, or `stale-on-error`.
    pub detail: Option<&'static str>,
}

impl CacheStatus {
    /// A fresh hit.
    pub fn hit() -> CacheStatus {
        CacheStatus {
            hit: true,
            ..CacheStatus::default()
        }
    }

    /// A miss, forwarded for `fwd`; `stored` when the answer was stored.
    pub fn forward(fwd: Forward, stored: bool) -> CacheStatus {
        CacheStatus {
            fwd: Some(fwd),
            stored,
            ..CacheStatus::default()
        }
    }

    /// Appends the entry: `coral; hit`, `coral; fwd=uri-miss; stored`. A hit never
    /// carries `fwd` (RFC 9211 §2.1), nor `stored` or `collapsed` (§2.4, §2.5: they
    /// qualify a forward).
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(CDN_TOKEN.as_bytes());
        if self.hit && self.fwd.is_none() {
            out.extend_from_slice(b"; hit");
        }
        if let Some(f) = self.fwd {
            out.extend_from_slice(b"; fwd=");
            out.extend_from_slice(f.token().as_bytes());
        }
        if let Some(s) = self.fwd_status {
            out.extend_from_slice(b"; fwd-status=");
            write_decimal(out, u64::from(s));
        }
        if self.stored && self.fwd.is_some() {
            out.extend_from_slice(b"; stored");
        }
        if self.collapsed && self.fwd.is_some() {
            out.extend_from_slice(b"; collapsed");
        }
        if let Some(t) = self.ttl {
            out.extend_from_slice(b"; ttl=");
            if t < 0 {
                out.push(b'-');
            }
            write_decimal(out, t.unsigned_abs());
        }
        if let Some(d) = self.detail {
            out.extend_from_slice(b"; detail=");
            out.extend_from_slice(d.as_bytes());
        }
    }
}

/// What the proxy knows about one answer beyond the stored head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientHeadInfo<'a> {
    /// This node's name for `Via` (a pseudonym is fine: RFC 9110 §7.6.3).
    pub node_name: &'a str,
    /// `Age` in seconds ([`age_secs`]).
    pub age_secs: u64,
    /// The `Cache-Status` entry.
    pub cache_status: CacheStatus,
    /// The range to send ([`range`]); `Full` when the body length is unknown.
    pub range: RangeAnswer,
    /// The full body's length, `None` while it is still arriving without a known length.
    pub body_len: Option<u64>,
    /// Whether the client's connection stays open.
    pub keep_alive: bool,
    /// Answer 304 Not Modified ([`evaluate_conditional`]).
    pub not_modified: bool,
    /// The client's HTTP minor version: a 1.0 client gets no chunked body.
    pub client_minor_version: u8,
}

/// Fields a 304 carries (RFC 9110 §15.4.5).
fn allowed_in_304(name: &str) -> bool {
    matches!(
        name,
        "cache-control"
            | "content-location"
            | "date"
            | "etag"
            | "expires"
            | "vary"
            | "last-modified"
    )
}

/// Writes the head a client gets for a stored response: the stored fields, then `Age`,
/// `Via` (appended to the origin's), `Cache-Status` (ours after the origin's), the length
/// (`Content-Length`, `Content-Range` for 206 and 416, or `Transfer-Encoding: chunked`
/// while the length is unknown), `Accept-Ranges` and `Connection`. Returns how the body
/// that follows must be framed (`Empty` for 304 and 416; the caller sends no body for
/// HEAD whatever this says).
pub fn client_head(stored: &ResponseHead, info: &ClientHeadInfo<'_>, buf: &mut Vec<u8>) -> Framing {
    let len = info.body_len;
    // A body kept in transfer codings coral does not decode: whole, chunked after them.
    let codings = stored_codings(stored);
    // Ranges apply to complete 200 responses only (RFC 9110 §14.2), and only when they
    // lie within the body.
    let range = match (info.not_modified, stored.status, info.range, len) {
        _ if codings.is_some() => RangeAnswer::Full,
        (
            false,
            200,
            RangeAnswer::Partial {
                start,
                end_inclusive,
            },
            Some(total),
        ) if start <= end_inclusive && end_inclusive < total => info.range,
        (false, 200, RangeAnswer::Unsatisfiable, Some(_)) => info.range,
        _ => RangeAnswer::Full,
    };
    let (status, reason) = match range {
        _ if info.not_modified => (304, "Not Modified"),
        RangeAnswer::Partial { .. } => (206, "Partial Content"),
        RangeAnswer::Unsatisfiable => (416, "Range Not Satisfiable"),
        RangeAnswer::Full => (stored.status, stored.reason.as_str()),
    };
    buf.extend_from_slice(b"HTTP/1.1 ");
    write_decimal(buf, u64::from(status));
    buf.push(b' ');
    buf.extend_from_slice(reason.as_bytes());
    buf.extend_from_slice(b"\r\n");
    let mut via: Option<&[u8]> = None;
    let mut origin_cache_status: Option<&[u8]> = None;
    for (n, v) in stored.headers.iter() {
        match n {
            "via" => via = Some(v),
            "cache-status" => origin_cache_status = Some(v),
            "age" | "content-length" | "accept-ranges" => {}
            // The origin's Content-Range is kept (issue 26 item 6: a 206
            // relayed with it); coral's own ranges write their own.
            "content-range" if range != RangeAnswer::Full => {}
            // RFC 9213 §3: a CDN "MAY remove" a targeted field known not to be used
            // downstream. Coral-Cache-Control targets coral alone: it stops here.
            // CDN-Cache-Control is kept, for a CDN in front of coral.
            "coral-cache-control" => {}
            n if is_hop_by_hop(n) || is_cookie(n) => {}
            n if info.not_modified && !allowed_in_304(n) => {}
            n => {
                buf.extend_from_slice(n.as_bytes());
                buf.extend_from_slice(b": ");
                buf.extend_from_slice(v);
                buf.extend_from_slice(b"\r\n");
            }
        }
    }
    buf.extend_from_slice(b"Age: ");
    write_decimal(buf, info.age_secs);
    buf.extend_from_slice(b"\r\nVia: ");
    if let Some(v) = via {
        buf.extend_from_slice(v);
        buf.extend_from_slice(b", ");
    }
    buf.extend_from_slice(b"1.1 ");
    buf.extend_from_slice(info.node_name.as_bytes());
    buf.extend_from_slice(b" (coral)\r\nCache-Status: ");
    if let Some(v) = origin_cache_status {
        buf.extend_from_slice(v);
        buf.extend_from_slice(b", ");
    }
    info.cache_status.write(buf);
    buf.extend_from_slice(b"\r\n");
    let mut keep_alive = info.keep_alive;
    let framing = match (range, status, len) {
        // RFC 9110 §8.6: no Content-Length in 1xx and 204; 304 left without.
        (_, s, _) if s < 200 || s == 204 || s == 304 => Framing::Empty,
        (
            RangeAnswer::Partial {
                start,
                end_inclusive,
            },
            _,
            Some(total),
        ) => {
            buf.extend_from_slice(b"Content-Range: bytes ");
            write_decimal(buf, start);
            buf.push(b'-');
            write_decimal(buf, end_inclusive);
            buf.push(b'/');
            write_decimal(buf, total);
            buf.extend_from_slice(b"\r\nContent-Length: ");
            write_decimal(buf, end_inclusive - start + 1);
            buf.extend_from_slice(b"\r\n");
            Framing::Length(end_inclusive - start + 1)
        }
        (_, _, _) if codings.is_some() && info.client_minor_version >= 1 => {
            buf.extend_from_slice(b"Transfer-Encoding: ");
            buf.extend_from_slice(codings.unwrap_or_default());
            buf.extend_from_slice(b", chunked\r\n");
            Framing::Chunked
        }
        (_, _, _) if codings.is_some() => {
            // An HTTP/1.0 client cannot receive them (RFC 9112 §6.1); the runtime
            // refuses it before (`stored_codings`).
            keep_alive = false;
            Framing::UntilClose
        }
        (RangeAnswer::Unsatisfiable, _, Some(total)) => {
            buf.extend_from_slice(b"Content-Range: bytes */");
            write_decimal(buf, total);
            buf.extend_from_slice(b"\r\nContent-Length: 0\r\n");
            Framing::Empty
        }
        (_, _, Some(n)) => {
            buf.extend_from_slice(b"Content-Length: ");
            write_decimal(buf, n);
            buf.extend_from_slice(b"\r\n");
            if n == 0 {
                Framing::Empty
            } else {
                Framing::Length(n)
            }
        }
        (_, _, None) if info.client_minor_version >= 1 => {
            buf.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            Framing::Chunked
        }
        (_, _, None) => {
            keep_alive = false;
            Framing::UntilClose
        }
    };
    if ((len.is_some() && status == 200) || status == 206) && codings.is_none() {
        buf.extend_from_slice(b"Accept-Ranges: bytes\r\n");
    }
    if keep_alive {
        buf.extend_from_slice(b"Connection: keep-alive\r\n\r\n");
    } else {
        buf.extend_from_slice(b"Connection: close\r\n\r\n");
    }
    framing
}

/// Request fields never sent upstream: hop-by-hop, cookies, the client's own
/// conditionals and ranges (the cache fetches whole objects and answers those itself),
/// its cache directives (a reload must not reach a flash-crowded origin), framing, the
/// fields we write ourselves, and `Accept-Encoding`: origins send the identity coding,
/// so one stored copy serves every client (no variant per `Accept-Encoding` string) and
/// HTML stays rewritable (§2.1).
fn dropped_upstream(name: &str) -> bool {
    is_hop_by_hop(name)
        || is_cookie(name)
        || matches!(
            name,
            "host"
                | "content-length"
                | "expect"
                | "range"
                | "if-range"
                | "if-none-match"
                | "if-modified-since"
                | "if-match"
                | "if-unmodified-since"
                | "cache-control"
                | "pragma"
                | "accept-encoding"
                | "via"
                | "cdn-loop"
                | "user-agent"
                | NO_FORWARD_HEADER
        )
}

/// Writes the request to send to the origin, or to a peer (`to_peer`), for `req`:
/// the method (GET or HEAD), `Host` = the origin's `host[:port]`, the client's end-to-end
/// fields minus `dropped_upstream` ones, `Via`, `CDN-Loop: coral` (RFC 8586), the
/// `User-Agent` with [`USER_AGENT_MARKER`] appended, then `extra` (validators from
/// [`revalidation_headers`]).
///
/// To a peer, the target is absolute-form — `http://host:port/path`, the canonical URL
/// the key is hashed from, as one sends to a proxy (RFC 9112 §3.2.2) — with
/// `Coral-No-Forward: 1` (answer from your cache or in-progress fetch, or 504), without
/// `Authorization` and without `CDN-Loop`. To the origin, the target is origin-form.
pub fn upstream_request(
    req: &RequestHead,
    origin: &Origin,
    to_peer: bool,
    extra: &Headers,
    buf: &mut Vec<u8>,
) {
    let method = match req.method {
        Method::Head => "HEAD",
        _ => "GET",
    };
    let path = req.path().unwrap_or("/");
    let path = path.split('#').next().unwrap_or("/");
    buf.extend_from_slice(method.as_bytes());
    buf.push(b' ');
    if to_peer {
        buf.extend_from_slice(b"http://");
        buf.extend_from_slice(origin.host.as_bytes());
        buf.push(b':');
        write_decimal(buf, u64::from(origin.port));
    }
    buf.extend_from_slice(path.as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    buf.extend_from_slice(origin.host.as_bytes());
    if origin.port != 80 {
        buf.push(b':');
        write_decimal(buf, u64::from(origin.port));
    }
    buf.extend_from_slice(b"\r\n");
    let named = connection_names(&req.headers);
    for (n, v) in req.headers.iter() {
        if dropped_upstream(n)
            || named.iter().any(|x| x == n)
            || extra.contains(n)
            || (to_peer && n == "authorization")
        {
            continue;
        }
        buf.extend_from_slice(n.as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(v);
        buf.extend_from_slice(b"\r\n");
    }
    let joined = |buf: &mut Vec<u8>, name: &str, ours: &str| {
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b": ");
        let mut first = true;
        for v in req.headers.get_all(name) {
            if !first {
                buf.extend_from_slice(b", ");
            }
            buf.extend_from_slice(v);
            first = false;
        }
        if !first {
            buf.extend_from_slice(b", ");
        }
        buf.extend_from_slice(ours.as_bytes());
        buf.extend_from_slice(b"\r\n");
    };
    joined(buf, "Via", "1.1 coral");
    if !to_peer {
        // A peer request goes no further (`Coral-No-Forward`), so it is no loop; the
        // peer's `loop_detected` must not refuse it.
        joined(buf, "CDN-Loop", CDN_TOKEN);
    }
    buf.extend_from_slice(b"User-Agent: ");
    if let Some(ua) = req.headers.get("user-agent") {
        buf.extend_from_slice(ua);
        buf.push(b' ');
    }
    buf.extend_from_slice(USER_AGENT_MARKER.as_bytes());
    buf.extend_from_slice(b"\r\n");
    if to_peer {
        buf.extend_from_slice(b"Coral-No-Forward: 1\r\n");
    }
    for (n, v) in extra.iter() {
        buf.extend_from_slice(n.as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(v);
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(b"\r\n");
}

/// Whether the request came through Coral already (RFC 8586): its `CDN-Loop` carries our
/// token, or our zone or alias as a cdn-id. Such a request is refused (an origin or
/// client that points back at us would make a loop).
pub fn loop_detected(req: &RequestHead, zones: &Zones) -> bool {
    req.headers.list("cdn-loop").any(|entry| {
        // cdn-info = cdn-id *( OWS ";" OWS parameter )
        let id = trim_ows(entry.split(|&b| b == b';').next().unwrap_or_default());
        id.eq_ignore_ascii_case(CDN_TOKEN.as_bytes())
            || id.eq_ignore_ascii_case(zones.zone.as_bytes())
            || zones
                .alias
                .as_deref()
                .is_some_and(|a| id.eq_ignore_ascii_case(a.as_bytes()))
    })
}

/// Whether the request is a peer's (`Coral-No-Forward: 1`): answer only from the cache or
/// an in-progress fetch.
pub fn no_forward(req: &RequestHead) -> bool {
    req.headers
        .get(NO_FORWARD_HEADER)
        .is_some_and(|v| trim_ows(v) == b"1")
}

#[cfg(test)]
mod tests;
