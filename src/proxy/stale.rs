//! Serving stale copies the origin allows (RFC 5861), and revalidating
//! once per object network-wide.
//!
//! - `stale-while-revalidate=N`: for N seconds after a stored response
//!   goes stale, a request is answered with the stale copy at once while
//!   the copy is revalidated in the background — the flash-crowd behaviour
//!   a publisher wants: no client waits for the origin, and the origin is
//!   asked once.
//! - `stale-if-error=N`: for N seconds after it goes stale, a copy may be
//!   served when the origin fails (5xx, no answer). Without it, coral
//!   serves a stale copy on the origin's error as before ("serve
//!   liberally"); with it, no longer than the origin says.
//!
//! Neither applies to a copy that must be revalidated (`must-revalidate`,
//! `proxy-revalidate`, `s-maxage`, `no-cache`), nor to a request that asks
//! for a revalidated answer (`Cache-Control: no-cache`, `max-age=0`,
//! `Pragma: no-cache`).
//!
//! The directives are read from the most specific field present (RFC 9213):
//! `Coral-Cache-Control`, then `CDN-Cache-Control`, then `Cache-Control`.
//!
//! Revalidation once network-wide: every node holding a stale copy wants
//! to revalidate it. Each claims [`revalidation_key`] (the DSHT's
//! test-and-set put, `Node::claim`) before asking the origin; the one
//! whose claim lands asks the origin, the others fetch the refreshed copy
//! from it as a peer (it answers them from its revalidation under way).

use crate::dsht::id::{Id, Key};

use super::http::{trim_ows, Headers, RequestHead};

/// The stale windows a stored response's origin gave (RFC 5861).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StaleWindows {
    /// `stale-while-revalidate`, in seconds past the end of freshness.
    pub while_revalidate_secs: Option<u64>,
    /// `stale-if-error`, in seconds past the end of freshness.
    pub if_error_secs: Option<u64>,
    /// The copy must be revalidated before it is served stale (`no-cache`,
    /// `must-revalidate`, `proxy-revalidate`, `s-maxage`).
    pub must_revalidate: bool,
}

/// The field whose directives apply to coral (RFC 9213 §2.1: a targeted
/// field present overrides `Cache-Control`).
fn directives_field(h: &Headers) -> &'static str {
    ["coral-cache-control", "cdn-cache-control"]
        .into_iter()
        .find(|f| h.contains(f))
        .unwrap_or("cache-control")
}

/// A delta-seconds value (RFC 9111 §1.2.2), as `policy` reads it: quotes
/// tolerated, a value too large is 2^31.
fn seconds(v: &[u8]) -> Option<u64> {
    super::policy::delta_seconds(Some(v))
}

/// The stale windows of a stored response's header fields.
pub fn windows(h: &Headers) -> StaleWindows {
    let mut w = StaleWindows::default();
    let field = directives_field(h);
    for d in h.list(field) {
        let (name, arg) = match d.iter().position(|&b| b == b'=') {
            Some(eq) => (trim_ows(&d[..eq]), Some(trim_ows(&d[eq + 1..]))),
            None => (d, None),
        };
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if is("stale-while-revalidate") {
            w.while_revalidate_secs = arg.and_then(seconds);
        } else if is("stale-if-error") {
            w.if_error_secs = arg.and_then(seconds);
        } else if is("no-cache") || is("must-revalidate") || is("proxy-revalidate") {
            w.must_revalidate = true;
        } else if is("s-maxage") && field != "coral-cache-control" {
            // RFC 9111 §5.2.2.10: s-maxage implies proxy-revalidate.
            w.must_revalidate = true;
        }
    }
    // `Pragma: no-cache` in a response is no directive (RFC 9111 §5.4).
    w
}

/// Whether the client asks for a revalidated answer (RFC 9111 §5.2.1):
/// `Cache-Control: no-cache` or `max-age=0`, or `Pragma: no-cache` without
/// a `Cache-Control`.
pub fn request_wants_validated(req: &RequestHead) -> bool {
    let h = &req.headers;
    if h.contains("cache-control") {
        h.list("cache-control").any(|d| {
            d.eq_ignore_ascii_case(b"no-cache")
                || d.eq_ignore_ascii_case(b"max-age=0")
                || d.eq_ignore_ascii_case(b"max-age=\"0\"")
        })
    } else {
        h.has_token("pragma", "no-cache")
    }
}

/// Whether a stale complete copy (fresh until `fresh_until_secs`) is
/// served to `req` at once while it is revalidated in the background.
pub fn while_revalidate(
    w: &StaleWindows,
    req: &RequestHead,
    fresh_until_secs: u64,
    now_secs: u64,
) -> bool {
    !w.must_revalidate
        && !request_wants_validated(req)
        && w.while_revalidate_secs
            .is_some_and(|n| now_secs < fresh_until_secs.saturating_add(n))
}

/// Whether `stale-if-error` lets a stale copy (fresh until
/// `fresh_until_secs`) be served on the origin's error at `now_secs`:
/// within its window, or always when the origin set none (coral serves a
/// stale copy liberally unless told otherwise). A copy that must be
/// revalidated is never served stale (`serve_stale` says so first).
pub fn if_error_allows(w: &StaleWindows, fresh_until_secs: u64, now_secs: u64) -> bool {
    match w.if_error_secs {
        Some(n) => now_secs <= fresh_until_secs.saturating_add(n),
        None => true,
    }
}

/// The DSHT key nodes claim before revalidating the object `key` with its
/// origin: one claim wins per `fetching_pointer_ttl_secs`, network-wide.
/// Distinct from the object's key, which holds the pointers of every copy
/// (a claim there never lands once copies exist).
pub fn revalidation_key(key: &Key) -> Key {
    let mut b = [0u8; 20 + 11];
    b[..20].copy_from_slice(&key.0);
    b[20..].copy_from_slice(b"revalidate:");
    Id::hash(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::http::{parse_request_head, Limits};

    fn fields(text: &str) -> Headers {
        let mut h = Headers::new();
        for line in text.split("\r\n").filter(|l| !l.is_empty()) {
            let (n, v) = line.split_once(": ").unwrap();
            h.insert(&n.to_ascii_lowercase(), v.as_bytes());
        }
        h
    }

    fn req(fields: &str) -> RequestHead {
        let text = format!("GET / HTTP/1.1\r\nHost: x\r\n{fields}\r\n");
        parse_request_head(text.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap()
            .0
    }

    #[test]
    fn rfc5861_3_stale_while_revalidate_window_in_virtual_time() {
        let w = windows(&fields(
            "Cache-Control: max-age=60, stale-while-revalidate=30\r\n",
        ));
        assert_eq!(w.while_revalidate_secs, Some(30));
        let r = req("");
        // Fresh until 100: stale from 100, served at once until 130.
        assert!(while_revalidate(&w, &r, 100, 100));
        assert!(while_revalidate(&w, &r, 100, 129));
        assert!(!while_revalidate(&w, &r, 100, 130));
        // A client that asks for a validated answer waits for one.
        assert!(!while_revalidate(
            &w,
            &req("Cache-Control: no-cache\r\n"),
            100,
            110
        ));
        assert!(!while_revalidate(
            &w,
            &req("Pragma: no-cache\r\n"),
            100,
            110
        ));
        assert!(!while_revalidate(
            &w,
            &req("Cache-Control: max-age=0\r\n"),
            100,
            110
        ));
        // Without the directive, never.
        let none = windows(&fields("Cache-Control: max-age=60\r\n"));
        assert!(!while_revalidate(&none, &r, 100, 101));
    }

    #[test]
    fn rfc9111_5_2_2_a_copy_that_must_be_revalidated_is_never_served_while_revalidating() {
        for cc in [
            "no-cache, stale-while-revalidate=30",
            "must-revalidate, stale-while-revalidate=30",
            "proxy-revalidate, stale-while-revalidate=30",
            "s-maxage=5, stale-while-revalidate=30",
        ] {
            let w = windows(&fields(&format!("Cache-Control: {cc}\r\n")));
            assert!(w.must_revalidate, "{cc}");
            assert!(!while_revalidate(&w, &req(""), 100, 101), "{cc}");
        }
    }

    #[test]
    fn rfc5861_4_stale_if_error_bounds_serving_stale_on_errors() {
        let w = windows(&fields("Cache-Control: max-age=60, stale-if-error=10\r\n"));
        assert_eq!(w.if_error_secs, Some(10));
        assert!(if_error_allows(&w, 100, 105));
        assert!(if_error_allows(&w, 100, 110));
        assert!(!if_error_allows(&w, 100, 111));
        // The origin said nothing: stale on error, as coral always did.
        let none = windows(&fields("Cache-Control: max-age=60\r\n"));
        assert!(if_error_allows(&none, 100, 1_000_000));
    }

    #[test]
    fn rfc9213_2_1_the_most_specific_targeted_field_gives_the_windows() {
        let h = fields(
            "Cache-Control: max-age=60, stale-while-revalidate=1\r\n\
             CDN-Cache-Control: max-age=60, stale-while-revalidate=2\r\n",
        );
        assert_eq!(windows(&h).while_revalidate_secs, Some(2));
        let h = fields(
            "CDN-Cache-Control: stale-while-revalidate=2\r\n\
             Coral-Cache-Control: stale-while-revalidate=3, stale-if-error=4\r\n",
        );
        let w = windows(&h);
        assert_eq!(
            (w.while_revalidate_secs, w.if_error_secs),
            (Some(3), Some(4))
        );
        // An invalid argument is no window.
        let w = windows(&fields("Cache-Control: stale-while-revalidate=soon\r\n"));
        assert_eq!(w.while_revalidate_secs, None);
    }

    #[test]
    fn the_revalidation_key_is_the_objects_own_and_not_the_object_key() {
        let k = Id::from_url("http://x.com:80/a");
        assert_eq!(revalidation_key(&k), revalidation_key(&k));
        assert_ne!(revalidation_key(&k), k);
        assert_ne!(
            revalidation_key(&k),
            revalidation_key(&Id::from_url("http://x.com:80/b"))
        );
    }
}
