//! The order in which a request is judged, without sockets.

use super::*;
use crate::proxy::fetch::{self, Verdict};
use crate::proxy::http::{parse_request_head, parse_response_head, Limits};

const NOW: u64 = 1_700_000_000;

fn zones() -> Zones {
    Zones {
        zone: "coralcdn.test".into(),
        alias: Some("coral.test".into()),
    }
}

fn req(line: &str, fields: &str) -> RequestHead {
    let text = format!("{line}\r\n{fields}\r\n");
    parse_request_head(text.as_bytes(), &Limits::default())
        .unwrap()
        .unwrap()
        .0
}

fn get(fields: &str) -> RequestHead {
    req(
        "GET /a.jpg HTTP/1.1",
        &format!("Host: x.com.coral.test\r\n{fields}"),
    )
}

fn resp(status_line: &str, fields: &str) -> ResponseHead {
    let text = format!("{status_line}\r\n{fields}\r\n");
    parse_response_head(text.as_bytes(), false, &Limits::default())
        .unwrap()
        .unwrap()
        .0
}

fn passes() -> PassMemory {
    PassMemory::new(crate::dsht::id::keyed_hasher(b"test", "pass"))
}

fn routed(r: &RequestHead) -> Route {
    route(r, &zones()).unwrap()
}

fn copy<'a>(head: &'a ResponseHead, vary_req: &'a Headers, state: CopyState) -> Found<'a> {
    Found::Copy {
        head,
        vary_req,
        state,
    }
}

/// Decides once for `r` with `found`, with no variant to go to.
fn decide_once(way: &mut Lookup, r: &RequestHead, found: Found<'_>) -> Serve {
    way.decide(r, found, NOW, &mut passes(), || None)
}

#[test]
fn rfc9110_9_3_a_post_is_refused_before_anything_else_and_its_body_left_unread() {
    // Not even a Coralized name: the method is judged first.
    let r = req(
        "POST /a HTTP/1.1",
        "Host: example.com\r\nContent-Length: 3\r\n",
    );
    let refusal = route(&r, &zones()).unwrap_err();
    assert_eq!(refusal.status, 405);
    assert_eq!(refusal.allow, Some("GET, HEAD"));
    assert!(!refusal.reads_body && !refusal.keep_alive);
}

#[test]
fn rfc8586_a_loop_detected_request_is_refused_before_the_cache() {
    let r = get("CDN-Loop: coral\r\n");
    let refusal = route(&r, &zones()).unwrap_err();
    assert_eq!(refusal.status, 403);
    assert_eq!(refusal.reason, "request loop (CDN-Loop names this CDN)");
    assert!(refusal.keep_alive && refusal.reads_body && !refusal.malformed);
}

#[test]
fn nsdi04_2_1_a_name_that_is_not_coralized_is_refused_coral_is_no_open_proxy() {
    let r = req("GET /a HTTP/1.1", "Host: example.com\r\n");
    let refusal = route(&r, &zones()).unwrap_err();
    assert_eq!(refusal.status, 403);
    assert!(refusal.reason.starts_with("not a Coralized name: "));
    // Judged before the loop: the Host names no zone of ours.
    let r = req(
        "GET /a HTTP/1.1",
        "Host: example.com\r\nCDN-Loop: coral\r\n",
    );
    assert!(route(&r, &zones())
        .unwrap_err()
        .reason
        .starts_with("not a Coralized name"));
}

#[test]
fn nsdi04_3_2_a_peer_names_the_object_by_its_absolute_url_and_is_no_loop() {
    let r = req(
        "GET http://x.com:80/a.jpg HTTP/1.1",
        "Host: x.com\r\nCoral-No-Forward: 1\r\nCDN-Loop: coral\r\n",
    );
    let peer = routed(&r);
    assert!(peer.no_forward && !peer.bypass);
    let client = routed(&get(""));
    assert_eq!(peer.url, client.url);
    assert_eq!(peer.key, client.key);
    assert_eq!(peer.origin, client.origin);
}

#[test]
fn a_request_without_host_is_malformed() {
    let mut r = get("");
    r.headers = Headers::new();
    let refusal = route(&r, &zones()).unwrap_err();
    assert_eq!((refusal.status, refusal.malformed), (400, true));
    assert!(!refusal.keep_alive);
}

#[test]
fn rfc9111_5_2_1_5_a_no_store_request_passes_the_cache() {
    assert!(routed(&get("Cache-Control: no-store\r\n")).bypass);
    assert!(routed(&get("Authorization: Basic eDp5\r\n")).bypass);
    assert!(!routed(&get("")).bypass);
}

#[test]
fn a_fresh_complete_copy_is_a_hit_on_the_first_look() {
    let r = get("");
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 3\r\n");
    let none = Headers::new();
    let mut way = Lookup::new(&routed(&r));
    let found = copy(&head, &none, CopyState::Complete { fresh: true });
    assert_eq!(decide_once(&mut way, &r, found), Serve::Hit);
}

#[test]
fn rfc9211_2_5_a_copy_being_written_is_collapsed_not_a_hit() {
    let r = get("");
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 3\r\n");
    let none = Headers::new();
    let mut way = Lookup::new(&routed(&r));
    let Serve::Copy(cs) = decide_once(&mut way, &r, copy(&head, &none, CopyState::Writing)) else {
        panic!("not served")
    };
    assert!(!cs.hit && cs.collapsed && cs.detail.is_none());
    assert_eq!(cs.fwd, Some(Forward::UriMiss));
}

#[test]
fn rfc9211_2_5_a_request_queued_for_another_requests_fill_is_collapsed() {
    let r = get("");
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 3\r\n");
    let none = Headers::new();
    for state in [CopyState::Writing, CopyState::Complete { fresh: true }] {
        // Queued for the fill before its first byte: the owning core says
        // the fetch was another request's.
        let mut way = Lookup::new(&routed(&r));
        assert_eq!(decide_once(&mut way, &r, Found::Nothing), Serve::Fill);
        way.filled(None, true);
        let Serve::Copy(cs) = decide_once(&mut way, &r, copy(&head, &none, state)) else {
            panic!("not served")
        };
        assert!(!cs.hit && cs.collapsed, "{state:?}: {cs:?}");
        assert_eq!(cs.fwd, Some(Forward::UriMiss));
        // The request whose fill it was: not collapsed.
        let mut way = Lookup::new(&routed(&r));
        assert_eq!(decide_once(&mut way, &r, Found::Nothing), Serve::Fill);
        way.filled(None, false);
        let Serve::Copy(cs) = decide_once(&mut way, &r, copy(&head, &none, state)) else {
            panic!("not served")
        };
        assert!(!cs.collapsed && cs.stored, "{state:?}: {cs:?}");
    }
}

#[test]
fn a_miss_fills_once_then_serves_the_fetched_copy_with_its_peer_level() {
    let r = get("");
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 3\r\n");
    let none = Headers::new();
    let mut way = Lookup::new(&routed(&r));
    assert_eq!(decide_once(&mut way, &r, Found::Nothing), Serve::Fill);
    way.filled(Some(1), false);
    let found = copy(&head, &none, CopyState::Complete { fresh: true });
    let Serve::Copy(cs) = decide_once(&mut way, &r, found) else {
        panic!("not served")
    };
    assert_eq!(cs, {
        let mut c = CacheStatus::forward(Forward::UriMiss, true);
        c.detail = Some("peer-l1");
        c
    });
    // Filled, yet nothing there: no second fill.
    let Serve::Refuse(refusal) = decide_once(&mut way, &r, Found::Nothing) else {
        panic!("filled twice")
    };
    assert_eq!(refusal.status, 502);
}

#[test]
fn a_stale_copy_is_filled_and_served_stale_on_the_origins_error() {
    let r = get("");
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 3\r\n");
    let none = Headers::new();
    let mut way = Lookup::new(&routed(&r));
    let stale = copy(&head, &none, CopyState::Complete { fresh: false });
    assert_eq!(decide_once(&mut way, &r, stale), Serve::Fill);
    // The owner kept the stale copy (`Stale`).
    way.kept_stale();
    let Serve::Copy(cs) = decide_once(&mut way, &r, stale) else {
        panic!("not served")
    };
    assert_eq!(cs.fwd, Some(Forward::Stale));
    assert_eq!(cs.detail, Some("stale-on-error"));
    assert!(!cs.hit && !cs.stored);
}

#[test]
fn nsdi04_3_2_a_peer_asking_for_a_stale_copy_waits_for_the_revalidation_under_way() {
    let r = req(
        "GET http://x.com:80/a.jpg HTTP/1.1",
        "Host: x.com\r\nCoral-No-Forward: 1\r\n",
    );
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 3\r\n");
    let none = Headers::new();
    let mut way = Lookup::new(&routed(&r));
    let stale = copy(&head, &none, CopyState::Complete { fresh: false });
    // The owning core answers from a revalidation under way here (one node
    // revalidates network-wide), else 504: never the stale copy.
    assert_eq!(decide_once(&mut way, &r, stale), Serve::Fill);
    let mut way = Lookup::new(&routed(&r));
    assert_eq!(decide_once(&mut way, &r, Found::Nothing), Serve::Fill);
}

#[test]
fn hit_for_pass_an_object_found_uncacheable_passes_instead_of_filling() {
    let r = get("");
    let route = routed(&r);
    let mut memory = passes();
    memory.mark(route.key, NOW);
    let mut way = Lookup::new(&route);
    let serve = way.decide(&r, Found::Nothing, NOW, &mut memory, || None);
    assert_eq!(serve, Serve::Pass(Forward::UriMiss));
}

#[test]
fn rfc9111_4_1_another_variant_goes_to_its_key_or_past_the_cache() {
    let r = get("Accept-Language: de\r\n");
    let head = resp(
        "HTTP/1.1 200 OK",
        "Content-Length: 3\r\nVary: Accept-Language\r\n",
    );
    let mut stored_req = Headers::new();
    stored_req.insert("accept-language", b"en");
    let route = routed(&r);
    let found = copy(&head, &stored_req, CopyState::Complete { fresh: true });
    let vk = Id::from_url("variant");
    let mut way = Lookup::new(&route);
    let serve = way.decide(&r, found, NOW, &mut passes(), || Some(vk));
    assert_eq!((serve, way.key()), (Serve::Variant, vk));
    // On the variant's key another mismatch passes: no variant of a variant.
    let serve = way.decide(&r, found, NOW, &mut passes(), || panic!("asked again"));
    assert_eq!(serve, Serve::Pass(Forward::VaryMiss));
    // No variant admitted: past the cache.
    let mut way = Lookup::new(&route);
    assert_eq!(
        decide_once(&mut way, &r, found),
        Serve::Pass(Forward::VaryMiss)
    );
}

fn served<'a>(head: &'a ResponseHead, complete: bool) -> CopyServed<'a> {
    CopyServed {
        head,
        freshness: Freshness {
            date_secs: NOW - 10,
            fresh_until_secs: NOW + 100,
            response_secs: NOW - 10,
            initial_age_secs: 0,
            must_revalidate: false,
        },
        body_len: Some(10),
        complete,
        cache_status: CacheStatus::hit(),
    }
}

#[test]
fn rfc9110_13_1_2_a_conditional_on_a_fresh_hit_answers_304() {
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 10\r\nETag: \"v1\"\r\n");
    let r = get("If-None-Match: \"v1\"\r\n");
    let info = copy_answer(&r, &served(&head, true), NOW, "node");
    assert!(info.not_modified);
    assert_eq!(info.age_secs, 10);
    let r = get("If-None-Match: \"v2\"\r\n");
    assert!(!copy_answer(&r, &served(&head, true), NOW, "node").not_modified);
}

#[test]
fn rfc9110_14_2_a_range_is_answered_from_a_complete_200_only() {
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 10\r\n");
    let r = get("Range: bytes=2-4\r\n");
    let info = copy_answer(&r, &served(&head, true), NOW, "node");
    assert_eq!(
        info.range,
        RangeAnswer::Partial {
            start: 2,
            end_inclusive: 4
        }
    );
    // Still arriving: the whole body.
    let info = copy_answer(&r, &served(&head, false), NOW, "node");
    assert_eq!(info.range, RangeAnswer::Full);
    // A HEAD gets no range.
    let h = req(
        "HEAD /a.jpg HTTP/1.1",
        "Host: x.com.coral.test\r\nRange: bytes=2-4\r\n",
    );
    assert_eq!(
        copy_answer(&h, &served(&head, true), NOW, "node").range,
        RangeAnswer::Full
    );
}

fn fetched<'a>(
    request: &'a RequestHead,
    head: &'a ResponseHead,
    from_peer: bool,
    old: Option<&'a ResponseHead>,
) -> fetch::Response<'a> {
    fetch::Response {
        request,
        head,
        from_peer,
        old,
        now_secs: NOW,
        negative_ttl_secs: 60,
        heuristic: Default::default(),
        object_bytes_max: 1000,
    }
}

#[test]
fn rfc9111_4_3_4_an_origins_304_revalidates_the_stale_copy() {
    let r = get("");
    let old = resp(
        "HTTP/1.1 200 OK",
        "Content-Length: 3\r\nCache-Control: max-age=60\r\nETag: \"a\"\r\n",
    );
    let nm = resp("HTTP/1.1 304 Not Modified", "Cache-Control: max-age=60\r\n");
    assert_eq!(
        fetch::judge(&fetched(&r, &nm, false, Some(&old))),
        Verdict::Revalidated {
            fresh_until_secs: NOW + 60
        }
    );
    // A peer's 304 (or 5xx): it has no copy after all.
    assert_eq!(
        fetch::judge(&fetched(&r, &nm, true, Some(&old))),
        Verdict::Failed(None)
    );
}

#[test]
fn rfc9111_4_2_4_a_stale_hit_with_origin_failure_serves_stale_unless_must_revalidate() {
    let r = get("");
    let old = resp("HTTP/1.1 200 OK", "Content-Length: 3\r\n");
    let failed = resp("HTTP/1.1 503 Unavailable", "Content-Length: 0\r\n");
    assert_eq!(fetch::origin_error(false, 503), Some(Fail::origin(503)));
    assert_eq!(fetch::origin_error(true, 503), None);
    assert_eq!(
        fetch::judge(&fetched(&r, &failed, false, Some(&old))),
        Verdict::Stale(Fail::origin(503))
    );
    assert!(fetch::serve_stale(false, Some(false)));
    assert!(!fetch::serve_stale(false, Some(true)), "must-revalidate");
    assert!(!fetch::serve_stale(true, Some(false)), "a peer's failure");
    assert!(!fetch::serve_stale(false, None), "no copy");
}

#[test]
fn an_unstorable_answer_is_relayed_and_an_oversized_one_refused() {
    let r = get("");
    let private = resp(
        "HTTP/1.1 200 OK",
        "Content-Length: 3\r\nCache-Control: no-store\r\n",
    );
    assert!(matches!(
        fetch::judge(&fetched(&r, &private, false, None)),
        Verdict::NotStored { relay: true, .. }
    ));
    assert!(matches!(
        fetch::judge(&fetched(&r, &private, true, None)),
        Verdict::NotStored { relay: false, .. }
    ));
    let big = resp(
        "HTTP/1.1 200 OK",
        "Content-Length: 1001\r\nCache-Control: max-age=60\r\n",
    );
    assert_eq!(
        fetch::judge(&fetched(&r, &big, false, None)),
        Verdict::TooLarge
    );
    let gone = resp(
        "HTTP/1.1 404 Not Found",
        "Content-Length: 3\r\nCache-Control: max-age=3600\r\n",
    );
    let Verdict::Store(f) = fetch::judge(&fetched(&r, &gone, false, None)) else {
        panic!("a 404 is stored")
    };
    assert_eq!(f.fresh_until_secs, NOW + 60, "negative TTL");
}

#[test]
fn a_failed_fetch_answers_its_status_and_reason() {
    let refusal = Refusal::failed(Fail::TIMEOUT, true);
    assert_eq!(
        (refusal.status, &*refusal.reason, refusal.keep_alive),
        (504, "the origin sent no answer in time", true)
    );
    // Issue 25 item 4: a refusal names the flag that lifts it.
    assert!(Fail::REFUSED.reason().contains("--allow-private-origins"));
    let loopback = Fail::refused(crate::proxy::origin_addr::Refused::Loopback);
    assert_eq!(
        (loopback.status, loopback.reason()),
        (
            403,
            "the origin's address is loopback; a node serves such origins only with \
             --allow-private-origins"
        )
    );
    assert_eq!(Fail::NO_NAME.reason(), "the origin's name does not resolve");
}

#[test]
fn rfc9211_2_3_fwd_status_is_the_next_hops_status_when_it_is_not_the_clients() {
    let head = resp("HTTP/1.1 200 OK", "Content-Length: 10\r\nETag: \"v1\"\r\n");
    let none = Headers::new();
    let stale = copy(&head, &none, CopyState::Complete { fresh: false });
    let fresh = copy(&head, &none, CopyState::Complete { fresh: true });
    let status_of = |cs: CacheStatus, r: &RequestHead| {
        let mut s = served(&head, true);
        s.cache_status = cs;
        copy_answer(r, &s, NOW, "node").cache_status.fwd_status
    };
    // A stale copy revalidated: the origin answered 304, the client 200.
    let r = get("");
    let mut way = Lookup::new(&routed(&r));
    assert_eq!(decide_once(&mut way, &r, stale), Serve::Fill);
    way.filled(None, false);
    way.next_hop_answered(Some(304));
    let Serve::Copy(cs) = decide_once(&mut way, &r, fresh) else {
        panic!("not served")
    };
    assert_eq!(cs.fwd, Some(Forward::Stale));
    assert_eq!(status_of(cs, &r), Some(304));
    let mut out = Vec::new();
    cs.write(&mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "coral; fwd=stale; fwd-status=304; stored"
    );
    // The client's conditional is answered 304 itself: no fwd-status.
    assert_eq!(status_of(cs, &get("If-None-Match: \"v1\"\r\n")), None);
    // Served stale on the origin's 503.
    let mut way = Lookup::new(&routed(&r));
    assert_eq!(decide_once(&mut way, &r, stale), Serve::Fill);
    way.kept_stale();
    way.next_hop_answered(Some(503));
    let Serve::Copy(cs) = decide_once(&mut way, &r, stale) else {
        panic!("not served")
    };
    assert_eq!(cs.detail, Some(policy::detail::STALE_ON_ERROR));
    assert_eq!(status_of(cs, &r), Some(503));
    // A fill answered 200, the client's range 206.
    let mut way = Lookup::new(&routed(&r));
    assert_eq!(decide_once(&mut way, &r, Found::Nothing), Serve::Fill);
    way.filled(None, false);
    way.next_hop_answered(Some(200));
    let Serve::Copy(cs) = decide_once(&mut way, &r, fresh) else {
        panic!("not served")
    };
    assert_eq!(status_of(cs, &r), None, "the same status");
    assert_eq!(status_of(cs, &get("Range: bytes=0-3\r\n")), Some(200));
    // A hit never has one.
    assert_eq!(
        status_of(CacheStatus::hit(), &get("Range: bytes=0-3\r\n")),
        None
    );
}
