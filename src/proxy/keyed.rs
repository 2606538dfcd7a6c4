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
//! The first request for a URL cannot know its `Vary`: it is sent without
//! `Accept` and `Accept-Language`, and what comes back is stored as the
//! variant for a request without them (its stored request fields are those
//! sent, not the client's). A client whose fields differ then selects
//! another variant, fetched with the fields the stored `Vary` names.

use super::http::{Headers, RequestHead};

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

/// Whether the origin's answer to `sent` (the view of the client's `req`
/// sent without a known `Vary`) varies on a keyed field the client sent
/// but the origin was not: the answer is then not the client's variant,
/// and the fetch is made again with the `Vary` now known (once per URL:
/// later fetches know it from the stored copy).
pub fn refetch_with_vary(resp: &Headers, req: &RequestHead, sent: &RequestHead) -> bool {
    resp.list("vary")
        .filter_map(|f| std::str::from_utf8(f).ok())
        .map(str::to_ascii_lowercase)
        .any(|f| keyable(&f) && req.headers.contains(&f) && !sent.headers.contains(&f))
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

    #[test]
    fn rfc9111_4_1_an_answer_varying_on_an_unsent_field_is_fetched_again_with_it() {
        let r = req("Accept-Language: fr\r\n");
        let sent = upstream_view(&r, Upstream::Fill { vary: None }, &[]);
        let mut resp = Headers::new();
        resp.insert("vary", b"accept-language");
        assert!(refetch_with_vary(&resp, &r, &sent));
        // Sent with the field (its Vary was known): no second fetch.
        let known = upstream_view(&r, Upstream::Fill { vary: Some(&resp) }, &[]);
        assert!(!refetch_with_vary(&resp, &r, &known));
        // The client did not send it: the answer is its variant.
        let plain = req("");
        let sent = upstream_view(&plain, Upstream::Fill { vary: None }, &[]);
        assert!(!refetch_with_vary(&resp, &plain, &sent));
        // A Vary on fields coral never sends: asked once.
        let mut other = Headers::new();
        other.insert("vary", b"accept-encoding, user-agent, cookie");
        assert!(!refetch_with_vary(
            &other,
            &r,
            &upstream_view(&r, Upstream::Fill { vary: None }, &[])
        ));
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
