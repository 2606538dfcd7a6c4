//! Keyed upstream requests (issue 22 item 6): what of a client's request
//! reaches an origin or a peer.
//!
//! A shared cache keys what it stores by the URL and by the request fields
//! the response's `Vary` names (RFC 9111 §4.1). Any other client field that
//! reached the origin could change the stored answer without changing its
//! key: an origin that reflects `X-Forwarded-Host` in its page would have one
//! client's value served to everyone (unkeyed-header cache poisoning). So the
//! upstream request is built from an allowlist, never from a drop list:
//!
//! | Field | Sent to the origin when filling the cache | To the origin for one client (pass) | To a peer |
//! |---|---|---|---|
//! | `Accept`, `Accept-Language` | only when the stored response's `Vary` names it | yes | yes |
//! | `Authorization` | yes (stored only as RFC 9111 §3.5 allows) | yes | never |
//! | `CDN-Loop` | the client's entries, then `coral` (RFC 8586 loop prevention) | same | — |
//! | `Host`, `Via`, `User-Agent` | coral's own (`Via: 1.1 coral`, coral's user agent) | same | same |
//! | `If-None-Match`, `If-Modified-Since` | coral's own, from the stored copy | none | none |
//!
//! Everything else a client sends — `X-Forwarded-*`, `Forwarded`,
//! `X-Original-URL`, `X-Rewrite-URL`, `X-Host`, `Cookie`, `Referer`, the
//! client's own `Via`, `User-Agent`, `Cache-Control`, `Range`, conditionals,
//! `Accept-Encoding` (origins are asked for the identity coding) — stays
//! here.
//!
//! The first request for a URL cannot know the URL's `Vary`. It is sent
//! with the fields this core has learned its origin host varies on
//! ([`LearnedVary`]: the keyable fields earlier answers of that host named in
//! their `Vary`, bounded), and nothing else the key might need. What comes
//! back is stored only when its key accounts for exactly what reached the
//! origin ([`check_key`]):
//!
//! - every keyable client field sent is named by the answer's `Vary` —
//!   otherwise the answer may reflect a field its key ignores (issue 22's
//!   attack 2): it goes to the client whose request made it, is not stored,
//!   and the field is unlearned for that host;
//! - every keyable field the answer's `Vary` names and the client sent was
//!   sent — otherwise it is the answer for a request without that field,
//!   not this client's variant: it goes to that client alone, is not
//!   stored, and the field is learned, so that the next request for any URL
//!   of that host is sent with it and its answer stored.
//!
//! So an origin is never asked twice for one client request (no re-asking),
//! and a stored answer's key covers every client field the origin saw.
//! Later fetches of a stored URL know its `Vary` from the stored copy, and a
//! client whose fields differ selects another variant, fetched with the
//! fields the stored `Vary` names.

use std::collections::HashMap;

use smallvec::SmallVec;

use super::http::{Headers, RequestHead};
use crate::dsht::id::{Id, KeyedBuildHasher};

/// Request fields sent for one client's answer alone (pass) and to peers
/// whatever the `Vary`; to fill the cache, they and any other [`keyable`]
/// field go only when the stored response's `Vary` names them.
pub const KEYED_FIELDS: [&str; 2] = ["accept", "accept-language"];

/// Whether an operator may add `name` (lower case) to the forwarded
/// fields (`[proxy] forward_request_fields`): not one coral writes itself
/// (`Host`, `Via`, `User-Agent`, `CDN-Loop`, validators, framing,
/// hop-by-hop fields, its own `Coral-*` fields).
pub fn may_be_listed(name: &str) -> bool {
    !(super::policy::is_hop_by_hop(name)
        || name.starts_with("coral-")
        || matches!(
            name,
            "host"
                | "via"
                | "user-agent"
                | "cdn-loop"
                | "content-length"
                | "expect"
                | "range"
                | "if-range"
                | "if-none-match"
                | "if-modified-since"
                | "if-match"
                | "if-unmodified-since"
        ))
}

/// Who an upstream request goes to, and what its answer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upstream<'a> {
    /// The origin, to fill the cache for everyone: `Accept` and
    /// `Accept-Language` only as the `Vary` in `vary` (the fields of the
    /// stored response for this URL, if any) keys them.
    Fill {
        /// Header fields of the stored response whose `Vary` is known.
        vary: Option<&'a Headers>,
    },
    /// The origin, for one client's answer alone (never stored).
    Pass,
    /// A peer proxy, which keys its own fetch (`Coral-No-Forward`).
    Peer,
}

/// The client's request as it may go upstream to `to`: the method and
/// target, and only the allowlisted fields. The request head written from
/// it (`policy::upstream_request`) adds coral's own `Host`, `Via`,
/// `CDN-Loop`, `User-Agent` and validators; its `Vary` fields are also what
/// the stored copy is labelled with (`policy::vary_request_headers`).
/// `extra`: the fields the operator added (`[proxy]
/// forward_request_fields`, checked by [`may_be_listed`]), sent to origins
/// and peers (whose own lists decide what reaches their origins).
pub fn upstream_view(req: &RequestHead, to: Upstream<'_>, extra: &[String]) -> RequestHead {
    let mut headers = Headers::new();
    for (n, v) in req.headers.iter() {
        let listed = extra.iter().any(|x| x == n);
        if listed || forwarded(n, to) {
            headers.insert(n, v);
        }
    }
    RequestHead {
        method: req.method.clone(),
        target: req.target.clone(),
        minor_version: req.minor_version,
        headers,
        framing: req.framing,
        keep_alive: req.keep_alive,
    }
}

/// Whether the client's field `name` (lower case) goes upstream to `to`.
pub fn forwarded(name: &str, to: Upstream<'_>) -> bool {
    match name {
        "cdn-loop" => !matches!(to, Upstream::Peer),
        "authorization" => !matches!(to, Upstream::Peer),
        "accept" | "accept-language" if !matches!(to, Upstream::Fill { .. }) => true,
        n if keyable(n) => match to {
            // The cache key accounts for a field the stored Vary names.
            Upstream::Fill { vary } => vary.is_some_and(|h| h.has_token("vary", n)),
            // A peer selects the variant by it, and keys its own fetch.
            Upstream::Peer => true,
            Upstream::Pass => false,
        },
        _ => false,
    }
}

/// Whether a field may go to the origin when a response's `Vary` names it
/// (so that the cache key accounts for it): not one coral writes itself
/// ([`may_be_listed`]), not a cookie (every Coralized site shares one
/// domain), not `Accept-Encoding` (origins are asked for the identity
/// coding), not `Authorization` (forwarded on its own terms).
pub fn keyable(name: &str) -> bool {
    may_be_listed(name)
        && !matches!(
            name,
            "cookie"
                | "cookie2"
                | "accept-encoding"
                | "authorization"
                | "te"
                | "cache-control"
                | "pragma"
        )
}

/// The request a stored answer is labelled with (the fields its `Vary`
/// names, RFC 9111 §4.1): the client's `req`, less the keyed fields that
/// were not sent (`sent`, its upstream view). A field coral never forwards
/// cannot have changed the answer, so the client's value labels it (the
/// next client with another value gets a variant of its own, fetched again);
/// a keyed field that was not sent labels it as absent, which is what the
/// origin answered for.
pub fn label_view(req: &RequestHead, sent: &RequestHead) -> RequestHead {
    let mut label = req.clone();
    let unsent: Vec<&str> = req
        .headers
        .iter()
        .map(|(n, _)| n)
        .filter(|n| keyable(n) && !sent.headers.contains(n))
        .collect();
    for f in unsent {
        label.headers.remove(f);
    }
    label
}

/// Fields learned per origin host, at most.
pub const LEARNED_FIELDS_PER_HOST_MAX: usize =
    crate::limits::PROXY.learned_vary_fields_per_host_max;
/// Origin hosts one [`LearnedVary`] remembers; beyond it an arbitrary one is
/// forgotten.
pub const LEARNED_HOSTS_MAX: usize = crate::limits::PROXY.learned_vary_hosts_max;
/// Bytes of a learned field's name, at most.
pub const LEARNED_FIELD_BYTES_MAX: usize = crate::limits::PROXY.learned_vary_field_bytes_max;
/// URLs whose last answer's `Vary` one [`LearnedVary`] remembers; beyond it
/// an arbitrary one is forgotten.
pub const LEARNED_URLS_MAX: usize = crate::limits::PROXY.learned_vary_urls_max;

/// Fields named by a [`KeyCheck`] (few: a request's keyable fields).
pub type FieldNames = SmallVec<[String; 2]>;

/// Whether an origin's answer to `sent` (the upstream view of the client's
/// `req`) may be stored under the key its `Vary` makes ([`check_key`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyCheck {
    /// Keyable client fields that reached the origin but that the answer's
    /// `Vary` does not name: its key would not account for them.
    pub unkeyed: FieldNames,
    /// Keyable fields the answer's `Vary` names that the client sent but
    /// the origin was not: the answer is not the client's variant.
    pub unsent: FieldNames,
}

impl KeyCheck {
    /// The answer's key accounts for exactly the client fields the origin
    /// saw: it may be stored (by the ordinary rules).
    pub fn storable(&self) -> bool {
        self.unkeyed.is_empty() && self.unsent.is_empty()
    }
}

/// Compares what reached the origin (`sent`) with what the answer's `Vary`
/// (in `resp`) keys, for the client's request `req`. Operator-listed
/// fields (`extra`, `[proxy] forward_request_fields`) are the operator's
/// choice and not checked.
pub fn check_key(
    resp: &Headers,
    req: &RequestHead,
    sent: &RequestHead,
    extra: &[String],
) -> KeyCheck {
    let mut c = KeyCheck::default();
    for (n, _) in sent.headers.iter() {
        if keyable(n)
            && !extra.iter().any(|x| x == n)
            && !resp.has_token("vary", n)
            && !c.unkeyed.iter().any(|u| u == n)
        {
            c.unkeyed.push(n.to_string());
        }
    }
    for f in resp.list("vary") {
        let Ok(f) = std::str::from_utf8(f) else {
            continue;
        };
        let f = f.to_ascii_lowercase();
        if keyable(&f)
            && req.headers.contains(&f)
            && !sent.headers.contains(&f)
            && !c.unsent.contains(&f)
        {
            c.unsent.push(f);
        }
    }
    c
}

/// `fields` as the `Vary` of [`Upstream::Fill`].
fn vary_list(fields: &[String]) -> Headers {
    let mut v = Headers::new();
    for f in fields {
        v.insert("vary", f.as_bytes());
    }
    v
}

/// Whether a field named in an answer's `Vary` may be learned: a keyable
/// token of at most [`LEARNED_FIELD_BYTES_MAX`] bytes.
fn learnable(f: &str) -> bool {
    f.len() <= LEARNED_FIELD_BYTES_MAX
        && !f.is_empty()
        && f.bytes().all(super::http::is_tchar)
        && keyable(f)
}

/// Per origin host (`host:port`), the keyable request fields its answers
/// were seen to `Vary` on: sent with a first request for any URL of that
/// host, so that its answer is the client's variant and can be stored
/// (one per core, no sharing). Bounded: [`LEARNED_HOSTS_MAX`] hosts,
/// [`LEARNED_FIELDS_PER_HOST_MAX`] fields each, names of at most
/// [`LEARNED_FIELD_BYTES_MAX`] bytes of token characters. Only an origin's
/// answer teaches it; a client can make it unlearn a field (an answer that
/// did not vary on it), which costs one more unstored answer, never a
/// stored one keyed wrongly.
///
/// Per URL it also remembers what the URL's last answer varied on (at most
/// [`LEARNED_URLS_MAX`] URLs), which decides that URL's next fill before
/// its host's fields do: a host whose pages vary on `Accept-Language` and
/// whose images do not costs each URL at most one unstored answer, however
/// the two kinds of fetch interleave.
pub struct LearnedVary {
    hosts: HashMap<String, FieldNames, KeyedBuildHasher>,
    urls: HashMap<Id, FieldNames, KeyedBuildHasher>,
}

impl LearnedVary {
    /// An empty table; `hasher` keys the map (its keys come from clients'
    /// Coralized host names: SECURITY.md, hash flooding).
    pub fn new(hasher: KeyedBuildHasher) -> LearnedVary {
        LearnedVary {
            hosts: HashMap::with_hasher(hasher.clone()),
            urls: HashMap::with_hasher(hasher),
        }
    }

    /// The fields to send with a fill of the URL `url_key` of `host` whose
    /// stored `Vary` is not known, as the `Vary` of [`Upstream::Fill`]:
    /// what the URL's last answer varied on, else what its host's answers
    /// did; `None` when nothing is learned.
    pub fn vary_of(&self, host: &str, url_key: &Id) -> Option<Headers> {
        self.url_vary(url_key).or_else(|| self.host_vary(host))
    }

    /// What the URL's last answer varied on, when it was not stored: newer
    /// than a stored copy's `Vary` (a stale copy being revalidated), so it
    /// decides the URL's next fill first.
    pub fn url_vary(&self, url_key: &Id) -> Option<Headers> {
        self.urls.get(url_key).map(|f| vary_list(f))
    }

    /// What the host's answers were seen to vary on.
    pub fn host_vary(&self, host: &str) -> Option<Headers> {
        self.hosts.get(host).map(|f| vary_list(f))
    }

    /// The fields learned for `host`.
    pub fn fields(&self, host: &str) -> &[String] {
        self.hosts.get(host).map_or(&[], |f| f.as_slice())
    }

    /// Learns what `check` found about the answer for the URL `url_key` of
    /// `host`, whose fields are `resp`: the URL's next fill sends the
    /// keyable fields its `Vary` names; the host's unsent fields are learned
    /// (while there is room), its unkeyed ones forgotten.
    pub fn apply(&mut self, host: &str, url_key: Id, resp: &Headers, check: &KeyCheck) {
        if check.storable() {
            // Stored: its Vary is known from the stored copy.
            self.urls.remove(&url_key);
        } else {
            if !self.urls.contains_key(&url_key) && self.urls.len() >= LEARNED_URLS_MAX {
                if let Some(k) = self.urls.keys().next().copied() {
                    self.urls.remove(&k);
                }
            }
            let mut named = FieldNames::new();
            for f in resp
                .list("vary")
                .filter_map(|f| std::str::from_utf8(f).ok())
            {
                let f = f.to_ascii_lowercase();
                if learnable(&f) && named.len() < LEARNED_FIELDS_PER_HOST_MAX && !named.contains(&f)
                {
                    named.push(f);
                }
            }
            self.urls.insert(url_key, named);
        }
        self.apply_host(host, check);
    }

    fn apply_host(&mut self, host: &str, check: &KeyCheck) {
        if let Some(fields) = self.hosts.get_mut(host) {
            fields.retain(|f| !check.unkeyed.contains(f));
        }
        if check.unsent.iter().any(|f| learnable(f)) {
            if !self.hosts.contains_key(host) && self.hosts.len() >= LEARNED_HOSTS_MAX {
                if let Some(k) = self.hosts.keys().next().cloned() {
                    self.hosts.remove(&k);
                }
            }
            let fields = self.hosts.entry(host.to_string()).or_default();
            for f in check.unsent.iter().filter(|f| learnable(f)) {
                if fields.len() < LEARNED_FIELDS_PER_HOST_MAX && !fields.contains(f) {
                    fields.push(f.clone());
                }
            }
        }
        if self.hosts.get(host).is_some_and(|f| f.is_empty()) {
            self.hosts.remove(host);
        }
    }

    /// Hosts remembered.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// URLs remembered.
    pub fn urls_len(&self) -> usize {
        self.urls.len()
    }

    /// Whether no host is remembered.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::http::{parse_request_head, Limits};

    fn req(fields: &str) -> RequestHead {
        let text = format!("GET /page HTTP/1.1\r\nHost: x.com.80.nyud.net\r\n{fields}\r\n");
        parse_request_head(text.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap()
            .0
    }

    const HOSTILE: &str = "X-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: gopher\r\n\
        X-Forwarded-For: 6.6.6.6\r\nForwarded: host=evil.example\r\nX-Original-URL: /admin\r\n\
        X-Rewrite-URL: /admin\r\nX-Host: evil.example\r\nCookie: s=1\r\nReferer: http://evil/\r\n\
        User-Agent: evil\r\nVia: 1.1 evil\r\nCache-Control: no-cache\r\nRange: bytes=0-1\r\n\
        If-None-Match: \"x\"\r\nAccept-Encoding: gzip\r\nX-Custom: 1\r\n";

    #[test]
    fn issue_22_6_client_controlled_fields_never_go_upstream() {
        let r = req(HOSTILE);
        let mut vary = Headers::new();
        vary.insert("vary", b"accept-language");
        for to in [
            Upstream::Fill { vary: None },
            Upstream::Fill { vary: Some(&vary) },
            Upstream::Pass,
        ] {
            let v = upstream_view(&r, to, &[]);
            assert!(v.headers.is_empty(), "{to:?}: {:?}", v.headers);
            assert_eq!(v.target, "/page");
        }
        // A peer gets the fields a Vary could key (it selects the variant
        // by them and keys its own fetch), never those coral writes or
        // refuses.
        let v = upstream_view(&r, Upstream::Peer, &[]);
        for own in [
            "cookie",
            "user-agent",
            "via",
            "cache-control",
            "range",
            "if-none-match",
            "accept-encoding",
        ] {
            assert!(!v.headers.contains(own), "{own}");
        }
        // A field the stored Vary names is keyed: it goes to the origin.
        let mut keyed = Headers::new();
        keyed.insert("vary", b"X-Forwarded-Host");
        let v = upstream_view(&r, Upstream::Fill { vary: Some(&keyed) }, &[]);
        assert_eq!(
            v.headers.get("x-forwarded-host"),
            Some(&b"evil.example"[..])
        );
        assert_eq!(v.headers.len(), 1);
    }

    #[test]
    fn rfc9111_4_1_accept_fields_reach_a_fill_only_as_the_stored_vary_keys_them() {
        let r = req("Accept: text/html\r\nAccept-Language: fr\r\nAuthorization: Basic eA==\r\n");
        // The first request: Vary unknown, neither is sent.
        let v = upstream_view(&r, Upstream::Fill { vary: None }, &[]);
        assert!(!v.headers.contains("accept"));
        assert!(!v.headers.contains("accept-language"));
        assert!(v.headers.contains("authorization"));
        // The stored response varies on Accept-Language: that one is sent.
        let mut stored = Headers::new();
        stored.insert(
            "vary",
            b"Accept-Language, Accept-Encoding, X-Forwarded-Host",
        );
        let v = upstream_view(
            &r,
            Upstream::Fill {
                vary: Some(&stored),
            },
            &[],
        );
        assert_eq!(v.headers.get("accept-language"), Some(&b"fr"[..]));
        assert!(!v.headers.contains("accept"));
        // For one client alone, and to a peer (which keys its own fetch).
        let v = upstream_view(&r, Upstream::Pass, &[]);
        assert!(v.headers.contains("accept") && v.headers.contains("accept-language"));
        let v = upstream_view(&r, Upstream::Peer, &[]);
        assert!(v.headers.contains("accept") && !v.headers.contains("authorization"));
    }

    fn hasher() -> KeyedBuildHasher {
        crate::dsht::id::keyed_hasher(b"test", "learned vary")
    }

    fn url(path: &str) -> Id {
        Id::hash(path.as_bytes())
    }

    #[test]
    fn rfc9111_4_1_an_answer_varying_on_an_unsent_field_is_not_stored_and_teaches_it() {
        let r = req("Accept-Language: fr\r\n");
        let sent = upstream_view(&r, Upstream::Fill { vary: None }, &[]);
        let mut resp = Headers::new();
        resp.insert("vary", b"Accept-Language");
        let c = check_key(&resp, &r, &sent, &[]);
        assert!(!c.storable());
        assert_eq!(c.unsent.as_slice(), ["accept-language"]);
        let mut learned = LearnedVary::new(hasher());
        learned.apply("x.com:80", url("/a"), &resp, &c);
        assert_eq!(learned.fields("x.com:80"), ["accept-language"]);
        // The next first request for any URL of that host sends it: its
        // answer is the client's variant, stored.
        for u in ["/a", "/b"] {
            let vary = learned.vary_of("x.com:80", &url(u));
            let sent = upstream_view(
                &r,
                Upstream::Fill {
                    vary: vary.as_ref(),
                },
                &[],
            );
            assert_eq!(sent.headers.get("accept-language"), Some(&b"fr"[..]));
            assert!(check_key(&resp, &r, &sent, &[]).storable());
        }
        // Another host learned nothing.
        assert!(learned.vary_of("y.com:80", &url("y/a")).is_none());
        // The client did not send it: the answer is its variant.
        let plain = req("");
        let sent = upstream_view(&plain, Upstream::Fill { vary: None }, &[]);
        assert!(check_key(&resp, &plain, &sent, &[]).storable());
        // A Vary on fields coral never sends: stored, nothing learned.
        let mut other = Headers::new();
        other.insert("vary", b"accept-encoding, user-agent, cookie");
        let sent = upstream_view(&r, Upstream::Fill { vary: None }, &[]);
        let c = check_key(&other, &r, &sent, &[]);
        assert!(c.storable(), "{c:?}");
    }

    #[test]
    fn issue_22_6_a_learned_field_the_answer_does_not_vary_on_is_not_stored_and_unlearned() {
        // The host varied on X-Poison once; a hostile client sends it for
        // another URL whose answer reflects it without Vary.
        let mut learned = LearnedVary::new(hasher());
        let mut taught = Headers::new();
        taught.insert("vary", b"X-Poison");
        let first = req("X-Poison: a\r\n");
        let sent = upstream_view(&first, Upstream::Fill { vary: None }, &[]);
        let c = check_key(&taught, &first, &sent, &[]);
        learned.apply("x.com:80", url("/learn"), &taught, &c);
        let hostile = req(HOSTILE_WITH_POISON);
        let vary = learned.vary_of("x.com:80", &url("/other"));
        let sent = upstream_view(
            &hostile,
            Upstream::Fill {
                vary: vary.as_ref(),
            },
            &[],
        );
        // Only the learned field goes; every other hostile field stays here.
        assert_eq!(sent.headers.len(), 1);
        assert_eq!(sent.headers.get("x-poison"), Some(&b"evil"[..]));
        let reflected = Headers::new();
        let c = check_key(&reflected, &hostile, &sent, &[]);
        assert!(!c.storable());
        assert_eq!(c.unkeyed.as_slice(), ["x-poison"]);
        learned.apply("x.com:80", url("/other"), &reflected, &c);
        assert!(learned.fields("x.com:80").is_empty());
        // That URL's next fill sends nothing; the URL that taught it still
        // sends it (its last answer varied on it).
        let v = learned.vary_of("x.com:80", &url("/other"));
        assert!(
            upstream_view(&hostile, Upstream::Fill { vary: v.as_ref() }, &[])
                .headers
                .is_empty()
        );
        assert!(learned.vary_of("x.com:80", &url("/new")).is_none());
        let v = learned.vary_of("x.com:80", &url("/learn"));
        let sent = upstream_view(&hostile, Upstream::Fill { vary: v.as_ref() }, &[]);
        assert_eq!(sent.headers.get("x-poison"), Some(&b"evil"[..]));
        // An answer that does vary on it is keyed by it: stored, and the
        // URL's memory is no longer needed (its stored copy says).
        let c = check_key(&taught, &hostile, &sent, &[]);
        assert!(c.storable());
        learned.apply("x.com:80", url("/learn"), &taught, &c);
        assert_eq!(learned.urls_len(), 1);
        // An operator-listed field is the operator's choice.
        let r = req("Req-Num: 1\r\n");
        let extra = vec!["req-num".to_string()];
        let sent = upstream_view(&r, Upstream::Fill { vary: None }, &extra);
        assert!(check_key(&Headers::new(), &r, &sent, &extra).storable());
    }

    #[test]
    fn a_urls_unstored_answer_decides_its_next_fill_before_its_stale_copy() {
        // A stale copy stored without Vary; its revalidation's answer now
        // varies on a field the client sent: not stored, and the URL's next
        // fill sends it (the stale copy's Vary would send nothing again).
        let r = req("X-Variant: a\r\n");
        let stale_copy = Headers::new();
        let sent = upstream_view(
            &r,
            Upstream::Fill {
                vary: Some(&stale_copy),
            },
            &[],
        );
        let mut now_varies = Headers::new();
        now_varies.insert("vary", b"X-Variant");
        let c = check_key(&now_varies, &r, &sent, &[]);
        assert!(!c.storable());
        let mut learned = LearnedVary::new(hasher());
        learned.apply("x.com:80", url("/p"), &now_varies, &c);
        let v = learned.url_vary(&url("/p")).or(Some(stale_copy));
        let sent = upstream_view(&r, Upstream::Fill { vary: v.as_ref() }, &[]);
        assert_eq!(sent.headers.get("x-variant"), Some(&b"a"[..]));
        let c = check_key(&now_varies, &r, &sent, &[]);
        assert!(c.storable());
        learned.apply("x.com:80", url("/p"), &now_varies, &c);
        assert!(
            learned.url_vary(&url("/p")).is_none(),
            "stored: its copy says"
        );
        assert!(learned.host_vary("x.com:80").is_some());
    }

    const HOSTILE_WITH_POISON: &str = "X-Poison: evil\r\nX-Forwarded-Host: evil.example\r\n\
        Cookie: s=1\r\nAccept-Language: fr\r\n";

    #[test]
    fn the_learned_table_is_bounded() {
        let mut learned = LearnedVary::new(hasher());
        let many = KeyCheck {
            unkeyed: FieldNames::new(),
            unsent: (0..10).map(|i| format!("x-f{i}")).collect(),
        };
        let mut resp = Headers::new();
        for f in &many.unsent {
            resp.insert("vary", f.as_bytes());
        }
        for h in 0..(LEARNED_HOSTS_MAX + 50) {
            let host = format!("h{h}.com:80");
            learned.apply(&host, url(&host), &resp, &many);
            assert!(learned.len() <= LEARNED_HOSTS_MAX);
            assert!(learned.urls_len() <= LEARNED_URLS_MAX);
            assert!(learned.fields(&host).len() <= LEARNED_FIELDS_PER_HOST_MAX);
        }
        let last = format!("h{}.com:80", LEARNED_HOSTS_MAX + 49);
        assert_eq!(learned.fields(&last).len(), LEARNED_FIELDS_PER_HOST_MAX);
        let v = learned.vary_of(&last, &url(&last)).unwrap();
        assert_eq!(v.list("vary").count(), LEARNED_FIELDS_PER_HOST_MAX);
        // Fields coral never sends, over-long names and non-tokens are not learned.
        let mut l = LearnedVary::new(hasher());
        let odd = KeyCheck {
            unkeyed: FieldNames::new(),
            unsent: [
                "cookie".to_string(),
                "x".repeat(LEARNED_FIELD_BYTES_MAX + 1),
                "a b".to_string(),
                "host".to_string(),
            ]
            .into_iter()
            .collect(),
        };
        l.apply("x.com:80", url("/"), &Headers::new(), &odd);
        assert!(l.is_empty());
    }

    #[test]
    fn rfc9111_4_1_a_stored_answer_is_labelled_by_what_could_have_changed_it() {
        let r = req("Accept-Language: fr\r\nFoo: 1\r\nUser-Agent: ua\r\n");
        let sent = upstream_view(&r, Upstream::Fill { vary: None }, &[]);
        let label = label_view(&r, &sent);
        // Foo was not sent (the Vary unknown): the copy is the answer
        // without it. User-Agent never reaches the origin (coral's own is
        // sent): the client's value labels the copy.
        assert!(!label.headers.contains("foo"));
        // Accept-Language was not sent: the copy is the answer without it.
        assert!(!label.headers.contains("accept-language"));
        assert_eq!(label.headers.get("user-agent"), Some(&b"ua"[..]));
        let mut vary = Headers::new();
        vary.insert("vary", b"accept-language");
        let sent = upstream_view(&r, Upstream::Fill { vary: Some(&vary) }, &[]);
        assert_eq!(
            label_view(&r, &sent).headers.get("accept-language"),
            Some(&b"fr"[..])
        );
    }

    #[test]
    fn an_operator_listed_field_goes_upstream_and_no_other() {
        let r = req("Req-Num: 3\r\nX-Forwarded-Host: evil\r\n");
        let extra = vec!["req-num".to_string()];
        let v = upstream_view(&r, Upstream::Fill { vary: None }, &extra);
        assert_eq!(v.headers.get("req-num"), Some(&b"3"[..]));
        assert!(!v.headers.contains("x-forwarded-host"));
        assert!(upstream_view(&r, Upstream::Peer, &extra)
            .headers
            .contains("req-num"));
        assert!(may_be_listed("req-num"));
        for own in [
            "host",
            "via",
            "if-none-match",
            "connection",
            "coral-no-forward",
        ] {
            assert!(!may_be_listed(own), "{own}");
        }
    }

    #[test]
    fn rfc8586_cdn_loop_entries_are_kept_toward_the_origin() {
        let r = req("CDN-Loop: other-cdn\r\n");
        let v = upstream_view(&r, Upstream::Fill { vary: None }, &[]);
        assert_eq!(v.headers.get("cdn-loop"), Some(&b"other-cdn"[..]));
        assert!(!upstream_view(&r, Upstream::Peer, &[])
            .headers
            .contains("cdn-loop"));
    }
}
