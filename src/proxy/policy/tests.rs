use super::*;
use crate::proxy::date::write_http_date;
use crate::proxy::http::{parse_request_head, parse_response_head, Limits};

const NOW: u64 = 1_700_000_000;

fn date(secs: u64) -> String {
    let mut v = Vec::new();
    write_http_date(&mut v, secs);
    String::from_utf8(v).unwrap()
}

fn req(fields: &str) -> RequestHead {
    req_line("GET /y.jpg HTTP/1.1", fields)
}

fn req_line(line: &str, fields: &str) -> RequestHead {
    let text = format!("{line}\r\nHost: x.com.coral.test:8090\r\n{fields}\r\n");
    parse_request_head(text.as_bytes(), &Limits::default())
        .unwrap()
        .unwrap()
        .0
}

fn resp(status_line: &str, fields: &str) -> ResponseHead {
    let text = format!("{status_line}\r\n{fields}\r\n");
    parse_response_head(text.as_bytes(), false, &Limits::default())
        .unwrap()
        .unwrap()
        .0
}

fn ok(fields: &str) -> ResponseHead {
    resp("HTTP/1.1 200 OK", fields)
}

fn lifetime(r: &RequestHead, s: &ResponseHead) -> u64 {
    match storable(r, s, NOW) {
        Storable::Yes(f) => f.fresh_until_secs - NOW,
        Storable::No(why) => panic!("not storable: {why}"),
    }
}

fn not_stored(r: &RequestHead, s: &ResponseHead) -> &'static str {
    match storable(r, s, NOW) {
        Storable::Yes(f) => panic!("stored: {f:?}"),
        Storable::No(why) => why,
    }
}

#[test]
fn rfc9111_4_2_1_max_age_wins_over_expires() {
    let d = date(NOW);
    let s = ok(&format!(
        "Date: {d}\r\nCache-Control: max-age=60\r\nExpires: {}\r\n",
        date(NOW + 3600)
    ));
    assert_eq!(lifetime(&req(""), &s), 60);
}

#[test]
fn rfc9111_4_2_1_s_maxage_wins_over_max_age() {
    let s = ok("Cache-Control: max-age=60, s-maxage=600\r\n");
    assert_eq!(lifetime(&req(""), &s), 600);
}

#[test]
fn rfc9111_4_2_1_expires_minus_date() {
    let s = ok(&format!(
        "Date: {}\r\nExpires: {}\r\n",
        date(NOW - 10),
        date(NOW + 290)
    ));
    // Lifetime 300 from Date; already 10 s old on arrival.
    let Storable::Yes(f) = storable(&req(""), &s, NOW) else {
        panic!()
    };
    assert_eq!(f.fresh_until_secs, NOW + 290);
    assert_eq!(age_secs(&f, NOW), 10);
}

#[test]
fn rfc9111_5_3_invalid_expires_is_already_stale() {
    let s = ok("Expires: 0\r\n");
    assert_eq!(lifetime(&req(""), &s), 0);
}

#[test]
fn rfc9111_4_2_2_heuristic_is_a_short_default_or_a_tenth_of_the_last_modified_age() {
    assert_eq!(lifetime(&req(""), &ok("")), HEURISTIC_DEFAULT_SECS);
    // Modified long ago: 10 %, capped at a day.
    assert_eq!(
        lifetime(
            &req(""),
            &ok("Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n")
        ),
        HEURISTIC_MAX_SECS
    );
    // Modified 10 000 s before Date: 1 000 s.
    let s = ok(&format!(
        "Date: {}\r\nLast-Modified: {}\r\n",
        date(NOW),
        date(NOW - 10_000)
    ));
    assert_eq!(lifetime(&req(""), &s), 1_000);
}

#[test]
fn negative_answers_are_cached_briefly() {
    // The heuristic's lifetime (`judge` caps it at negative_ttl_secs).
    let s = resp("HTTP/1.1 404 Not Found", "Content-Length: 0\r\n");
    assert_eq!(lifetime(&req(""), &s), HEURISTIC_DEFAULT_SECS);
    // An explicit lifetime is obeyed.
    let s = resp("HTTP/1.1 404 Not Found", "Cache-Control: max-age=5\r\n");
    assert_eq!(lifetime(&req(""), &s), 5);
}

#[test]
fn rfc9111_3_statuses_we_do_not_store() {
    for line in [
        "HTTP/1.1 500 Oops",
        "HTTP/1.1 503 Busy",
        "HTTP/1.1 206 Partial",
        "HTTP/1.1 304 Not Modified",
    ] {
        assert_eq!(
            not_stored(&req(""), &resp(line, "Cache-Control: max-age=60\r\n")),
            "status"
        );
    }
    // 302 only with explicit freshness.
    let s = resp("HTTP/1.1 302 Found", "Location: /x\r\n");
    assert_eq!(
        not_stored(&req(""), &s),
        "status without explicit freshness"
    );
    let s = resp(
        "HTTP/1.1 302 Found",
        "Location: /x\r\nCache-Control: max-age=9\r\n",
    );
    assert_eq!(lifetime(&req(""), &s), 9);
}

#[test]
fn rfc9111_5_2_2_5_no_store_is_not_cached() {
    assert_eq!(
        not_stored(&req(""), &ok("Cache-Control: max-age=60, no-store\r\n")),
        "no-store"
    );
    assert_eq!(
        not_stored(&req("Cache-Control: no-store\r\n"), &ok("")),
        "request no-store"
    );
}

#[test]
fn rfc9111_5_2_2_7_private_is_not_cached_by_a_shared_cache() {
    assert_eq!(
        not_stored(&req(""), &ok("Cache-Control: private, max-age=60\r\n")),
        "private"
    );
    assert_eq!(
        not_stored(&req(""), &ok("Cache-Control: PRIVATE=\"x\"\r\n")),
        "private"
    );
}

#[test]
fn rfc9111_5_2_2_4_no_cache_is_stored_but_always_revalidated() {
    assert_eq!(
        lifetime(&req(""), &ok("Cache-Control: no-cache, max-age=600\r\n")),
        0
    );
}

#[test]
fn rfc9111_4_2_1_conflicting_max_age_is_stale() {
    assert_eq!(
        lifetime(
            &req(""),
            &ok("Cache-Control: max-age=60\r\nCache-Control: max-age=70\r\n")
        ),
        0
    );
    assert_eq!(lifetime(&req(""), &ok("Cache-Control: max-age=abc\r\n")), 0);
    assert_eq!(
        lifetime(&req(""), &ok("Cache-Control: max-age=\"30\"\r\n")),
        30
    );
}

#[test]
fn rfc9111_3_5_authorization_is_stored_only_when_the_response_allows() {
    let auth = req("Authorization: Basic eDp5\r\n");
    assert!(!request_is_cacheable(&auth));
    assert_eq!(
        not_stored(&auth, &ok("Cache-Control: max-age=60\r\n")),
        "authorization"
    );
    assert_eq!(
        lifetime(&auth, &ok("Cache-Control: public, max-age=60\r\n")),
        60
    );
    assert_eq!(lifetime(&auth, &ok("Cache-Control: s-maxage=60\r\n")), 60);
    assert_eq!(
        lifetime(&auth, &ok("Cache-Control: must-revalidate, max-age=7\r\n")),
        7
    );
}

#[test]
fn rfc9111_4_1_vary_star_is_not_stored() {
    assert_eq!(
        not_stored(&req(""), &ok("Vary: Accept-Encoding, *\r\n")),
        "vary *"
    );
}

#[test]
fn rfc9111_3_only_get_is_stored() {
    let head = req_line("HEAD /y.jpg HTTP/1.1", "");
    assert_eq!(not_stored(&head, &ok("")), "method");
    let post = req_line("POST /y.jpg HTTP/1.1", "");
    assert!(!request_is_cacheable(&post));
    assert!(request_is_cacheable(&head));
}

#[test]
fn rfc9111_4_1_vary_matches_on_the_named_fields() {
    let s = ok("Vary: Accept, Accept-Language\r\n");
    let first = req("Accept: text/html,  image/*\r\nAccept-Language: en\r\n");
    let kept = vary_request_headers(&s, &first);
    assert_eq!(kept.len(), 2);
    assert!(vary_matches(
        &kept,
        &s,
        &req("Accept: text/html, image/*\r\nAccept-Language: en\r\nX: y\r\n")
    ));
    assert!(!vary_matches(
        &kept,
        &s,
        &req("Accept: text/html\r\nAccept-Language: en\r\n")
    ));
    assert!(!vary_matches(&kept, &s, &req("Accept-Language: en\r\n")));
    // A field the response does not vary on does not matter; Vary: * never matches.
    assert!(vary_matches(&Headers::new(), &ok(""), &first));
    assert!(!vary_matches(&kept, &ok("Vary: *\r\n"), &first));
    // Cookie and Accept-Encoding never go upstream, so a response cannot vary on them.
    let c = ok("Vary: Cookie, Accept-Encoding\r\n");
    assert!(vary_matches(
        &Headers::new(),
        &c,
        &req("Cookie: a=b\r\nAccept-Encoding: br\r\n")
    ));
}

#[test]
fn rfc9111_4_2_3_age_calculation() {
    // Date 30 s in the past, Age 100 from an upstream cache: the larger wins.
    let s = ok(&format!(
        "Date: {}\r\nAge: 100\r\nCache-Control: max-age=3600\r\n",
        date(NOW - 30)
    ));
    let Storable::Yes(f) = storable(&req(""), &s, NOW) else {
        panic!()
    };
    assert_eq!(f.initial_age_secs, 100);
    assert_eq!(age_secs(&f, NOW), 100);
    assert_eq!(age_secs(&f, NOW + 50), 150);
    assert_eq!(f.fresh_until_secs, NOW + 3500);
    assert!(is_fresh(&f, NOW + 3499));
    assert!(!is_fresh(&f, NOW + 3500));
    // A Date in the future (clock skew) counts as age 0, not negative.
    let s = ok(&format!("Date: {}\r\n", date(NOW + 1000)));
    let Storable::Yes(f) = storable(&req(""), &s, NOW) else {
        panic!()
    };
    assert_eq!(age_secs(&f, NOW), 0);
}

#[test]
fn rfc9111_4_2_4_must_revalidate_forbids_serving_stale() {
    let Storable::Yes(f) = storable(
        &req(""),
        &ok("Cache-Control: max-age=1, must-revalidate\r\n"),
        NOW,
    ) else {
        panic!()
    };
    assert!(!may_serve_stale(&f));
    let Storable::Yes(f) = storable(&req(""), &ok("Cache-Control: max-age=1\r\n"), NOW) else {
        panic!()
    };
    assert!(may_serve_stale(&f));
}

#[test]
fn rfc9110_13_1_2_if_none_match_uses_weak_comparison() {
    let s = ok("ETag: \"v1\"\r\n");
    assert_eq!(
        evaluate_conditional(&req("If-None-Match: \"v1\"\r\n"), &s),
        Conditional::NotModified
    );
    assert_eq!(
        evaluate_conditional(&req("If-None-Match: W/\"v1\"\r\n"), &s),
        Conditional::NotModified
    );
    assert_eq!(
        evaluate_conditional(&req("If-None-Match: \"v0\", \"v1\"\r\n"), &s),
        Conditional::NotModified
    );
    assert_eq!(
        evaluate_conditional(&req("If-None-Match: *\r\n"), &s),
        Conditional::NotModified
    );
    assert_eq!(
        evaluate_conditional(&req("If-None-Match: \"v2\"\r\n"), &s),
        Conditional::Proceed
    );
    let weak = ok("ETag: W/\"v1\"\r\n");
    assert_eq!(
        evaluate_conditional(&req("If-None-Match: \"v1\"\r\n"), &weak),
        Conditional::NotModified
    );
    // Only for 200s.
    let gone = resp("HTTP/1.1 404 Not Found", "ETag: \"v1\"\r\n");
    assert_eq!(
        evaluate_conditional(&req("If-None-Match: \"v1\"\r\n"), &gone),
        Conditional::Proceed
    );
}

#[test]
fn rfc9110_13_1_3_if_modified_since() {
    let lm = date(NOW - 100);
    let s = ok(&format!("Last-Modified: {lm}\r\n"));
    assert_eq!(
        evaluate_conditional(&req(&format!("If-Modified-Since: {lm}\r\n")), &s),
        Conditional::NotModified
    );
    assert_eq!(
        evaluate_conditional(&req(&format!("If-Modified-Since: {}\r\n", date(NOW))), &s),
        Conditional::NotModified
    );
    assert_eq!(
        evaluate_conditional(
            &req(&format!("If-Modified-Since: {}\r\n", date(NOW - 101))),
            &s
        ),
        Conditional::Proceed
    );
    assert_eq!(
        evaluate_conditional(&req("If-Modified-Since: garbage\r\n"), &s),
        Conditional::Proceed
    );
    // If-None-Match, when present, decides alone (RFC 9110 §13.2.2).
    let both = ok(&format!("Last-Modified: {lm}\r\nETag: \"a\"\r\n"));
    assert_eq!(
        evaluate_conditional(
            &req(&format!(
                "If-None-Match: \"b\"\r\nIf-Modified-Since: {lm}\r\n"
            )),
            &both
        ),
        Conditional::Proceed
    );
}

#[test]
fn rfc9111_4_3_1_revalidation_sends_the_validators() {
    let s = ok("ETag: \"v1\"\r\nLast-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    let h = revalidation_headers(&s);
    assert_eq!(h.get("if-none-match"), Some(&b"\"v1\""[..]));
    assert_eq!(
        h.get("if-modified-since"),
        Some(&b"Sun, 06 Nov 1994 08:49:37 GMT"[..])
    );
    assert!(revalidation_headers(&ok("")).is_empty());
}

#[test]
fn rfc9111_4_3_4_freshening_replaces_fields_from_the_304() {
    let stored = head_to_store(&ok("ETag: \"v1\"\r\nCache-Control: max-age=1\r\nContent-Type: text/html\r\nContent-Length: 5\r\n"));
    let nm = resp(
        "HTTP/1.1 304 Not Modified",
        "Cache-Control: max-age=99\r\nSet-Cookie: a=b\r\nContent-Length: 0\r\n",
    );
    let f = freshen(&stored, &nm);
    assert_eq!(f.headers.get("cache-control"), Some(&b"max-age=99"[..]));
    assert_eq!(f.headers.get("content-type"), Some(&b"text/html"[..]));
    assert!(!f.headers.contains("set-cookie"));
    assert!(!f.headers.contains("content-length"));
    assert_eq!(f.status, 200);
}

fn range_of(v: &str, len: u64) -> RangeAnswer {
    range(&req(&format!("Range: {v}\r\n")), len)
}

#[test]
fn rfc9110_14_2_single_range_is_206() {
    assert_eq!(
        range_of("bytes=0-9", 100),
        RangeAnswer::Partial {
            start: 0,
            end_inclusive: 9
        }
    );
    assert_eq!(
        range_of("bytes=90-200", 100),
        RangeAnswer::Partial {
            start: 90,
            end_inclusive: 99
        }
    );
    assert_eq!(
        range_of("bytes=50-", 100),
        RangeAnswer::Partial {
            start: 50,
            end_inclusive: 99
        }
    );
    assert_eq!(
        range_of("bytes=-10", 100),
        RangeAnswer::Partial {
            start: 90,
            end_inclusive: 99
        }
    );
    assert_eq!(
        range_of("bytes=-1000", 100),
        RangeAnswer::Partial {
            start: 0,
            end_inclusive: 99
        }
    );
    assert_eq!(
        range_of("Bytes = 1-1", 100),
        RangeAnswer::Full,
        "whitespace around = is not the grammar"
    );
    assert_eq!(
        range_of("BYTES=1-1", 100),
        RangeAnswer::Partial {
            start: 1,
            end_inclusive: 1
        }
    );
    assert_eq!(range(&req(""), 100), RangeAnswer::Full);
}

#[test]
fn rfc9110_15_5_17_unsatisfiable_range_is_416() {
    assert_eq!(range_of("bytes=100-", 100), RangeAnswer::Unsatisfiable);
    assert_eq!(range_of("bytes=100-200", 100), RangeAnswer::Unsatisfiable);
    assert_eq!(range_of("bytes=-0", 100), RangeAnswer::Unsatisfiable);
    assert_eq!(range_of("bytes=0-", 0), RangeAnswer::Unsatisfiable);
}

#[test]
fn rfc9110_14_2_multi_range_invalid_or_abusive_gets_the_whole_body() {
    assert_eq!(range_of("bytes=0-1,3-4", 100), RangeAnswer::Full);
    assert_eq!(
        range_of(&format!("bytes={}", "0-1,".repeat(500)), 100),
        RangeAnswer::Full
    );
    assert_eq!(range_of("bytes=5-1", 100), RangeAnswer::Full);
    assert_eq!(range_of("items=0-1", 100), RangeAnswer::Full);
    assert_eq!(range_of("bytes=-", 100), RangeAnswer::Full);
    assert_eq!(range_of("bytes=a-b", 100), RangeAnswer::Full);
    assert_eq!(
        range_of("bytes=99999999999999999999-", 100),
        RangeAnswer::Full
    );
    assert_eq!(
        range(&req("Range: bytes=0-1\r\nRange: bytes=2-3\r\n"), 100),
        RangeAnswer::Full
    );
    let head = req_line("HEAD /y.jpg HTTP/1.1", "Range: bytes=0-1\r\n");
    assert_eq!(range(&head, 100), RangeAnswer::Full);
}

#[test]
fn rfc9110_13_1_5_if_range() {
    let s = ok("ETag: \"v1\"\r\nLast-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    let p = RangeAnswer::Partial {
        start: 0,
        end_inclusive: 0,
    };
    let r = |f: &str| {
        range_for(
            &req(&format!("Range: bytes=0-0\r\nIf-Range: {f}\r\n")),
            &s,
            10,
        )
    };
    assert_eq!(r("\"v1\""), p);
    assert_eq!(r("\"v2\""), RangeAnswer::Full);
    assert_eq!(r("W/\"v1\""), RangeAnswer::Full);
    assert_eq!(r("Sun, 06 Nov 1994 08:49:37 GMT"), p);
    assert_eq!(r("Sun, 06 Nov 1994 08:49:38 GMT"), RangeAnswer::Full);
    // range() alone cannot check If-Range: whole body.
    assert_eq!(
        range(&req("Range: bytes=0-0\r\nIf-Range: \"v1\"\r\n"), 10),
        RangeAnswer::Full
    );
}

#[test]
fn rfc9110_7_6_1_head_to_store_drops_hop_by_hop_and_cookies() {
    let s = ok("Connection: close, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nX-End: 2\r\nSet-Cookie: s=1\r\nTransfer-Encoding: chunked\r\nAge: 5\r\nContent-Type: text/plain\r\n");
    let st = head_to_store(&s);
    let names: Vec<&str> = st.headers.iter().map(|(n, _)| n).collect();
    // The cookie's removal is said (issue 26 item 13).
    assert_eq!(names, vec!["coral-stripped", "x-end", "content-type"]);
}

fn client(stored: &ResponseHead, info: ClientHeadInfo<'_>) -> (String, Framing) {
    let mut buf = Vec::new();
    let f = client_head(stored, &info, &mut buf);
    (String::from_utf8(buf).unwrap(), f)
}

fn info() -> ClientHeadInfo<'static> {
    ClientHeadInfo {
        node_name: "node1",
        age_secs: 7,
        cache_status: CacheStatus::hit(),
        range: RangeAnswer::Full,
        body_len: Some(100),
        keep_alive: true,
        not_modified: false,
        client_minor_version: 1,
    }
}

#[test]
fn rfc9211_client_head_of_a_hit() {
    let stored = head_to_store(&ok(
        "Content-Type: text/html\r\nVia: 1.0 up\r\nContent-Length: 100\r\nSet-Cookie: a\r\n",
    ));
    let (h, f) = client(&stored, info());
    assert_eq!(f, Framing::Length(100));
    assert_eq!(
        h,
        "HTTP/1.1 200 OK\r\ncoral-stripped: Set-Cookie\r\ncontent-type: text/html\r\nAge: 7\r\n\
         Via: 1.0 up, 1.1 node1 (coral)\r\nCache-Status: coral; hit\r\nContent-Length: 100\r\nAccept-Ranges: bytes\r\nConnection: keep-alive\r\n\r\n"
    );
    // The head parses back (as a client would read it).
    let back = parse_response_head(h.as_bytes(), false, &Limits::default())
        .unwrap()
        .unwrap()
        .0;
    assert_eq!(back.framing, Framing::Length(100));
}

#[test]
fn rfc9211_client_head_of_a_stored_miss_and_unknown_length() {
    let stored = head_to_store(&ok("Cache-Status: origin; hit\r\n"));
    let mut i = info();
    i.cache_status = CacheStatus::forward(Forward::UriMiss, true);
    i.body_len = None;
    let (h, f) = client(&stored, i);
    assert_eq!(f, Framing::Chunked);
    assert!(
        h.contains("Cache-Status: origin; hit, coral; fwd=uri-miss; stored\r\n"),
        "{h}"
    );
    assert!(h.contains("Transfer-Encoding: chunked\r\n"));
    assert!(!h.contains("Content-Length"));
    // An HTTP/1.0 client gets a body delimited by close.
    i.client_minor_version = 0;
    let (h, f) = client(&stored, i);
    assert_eq!(f, Framing::UntilClose);
    assert!(h.ends_with("Connection: close\r\n\r\n"));
}

#[test]
fn rfc9110_15_3_7_client_head_of_a_range() {
    let stored = head_to_store(&ok("Content-Length: 100\r\n"));
    let mut i = info();
    i.range = RangeAnswer::Partial {
        start: 10,
        end_inclusive: 19,
    };
    let (h, f) = client(&stored, i);
    assert_eq!(f, Framing::Length(10));
    assert!(h.starts_with("HTTP/1.1 206 Partial Content\r\n"));
    assert!(h.contains("Content-Range: bytes 10-19/100\r\nContent-Length: 10\r\n"));
    i.range = RangeAnswer::Unsatisfiable;
    let (h, f) = client(&stored, i);
    assert_eq!(f, Framing::Empty);
    assert!(h.starts_with("HTTP/1.1 416 Range Not Satisfiable\r\n"));
    assert!(h.contains("Content-Range: bytes */100\r\nContent-Length: 0\r\n"));
}

#[test]
fn rfc9110_14_2_ranges_apply_to_200_only() {
    let stored = head_to_store(&resp("HTTP/1.1 404 Not Found", "Content-Length: 100\r\n"));
    let mut i = info();
    i.range = RangeAnswer::Partial {
        start: 10,
        end_inclusive: 19,
    };
    let (h, f) = client(&stored, i);
    assert_eq!(f, Framing::Length(100));
    assert!(h.starts_with("HTTP/1.1 404 Not Found\r\n"));
    assert!(!h.contains("Accept-Ranges"));
    let r = req("Range: bytes=0-0\r\n");
    assert_eq!(range_for(&r, &stored, 100), RangeAnswer::Full);
    assert_eq!(
        range_for(&r, &ok(""), 100),
        RangeAnswer::Partial {
            start: 0,
            end_inclusive: 0
        }
    );
}

#[test]
fn rfc9110_15_4_5_client_head_of_not_modified() {
    let stored = head_to_store(&ok(
        "ETag: \"a\"\r\nContent-Type: text/html\r\nCache-Control: max-age=5\r\n",
    ));
    let mut i = info();
    i.not_modified = true;
    i.keep_alive = false;
    let (h, f) = client(&stored, i);
    assert_eq!(f, Framing::Empty);
    assert!(h.starts_with("HTTP/1.1 304 Not Modified\r\n"));
    assert!(h.contains("etag: \"a\"\r\n") && h.contains("cache-control: max-age=5\r\n"));
    assert!(!h.contains("content-type") && !h.contains("Content-Length"));
    assert!(h.ends_with("Connection: close\r\n\r\n"));
}

#[test]
fn rfc8586_upstream_request_to_the_origin() {
    let r = req("Cookie: secret=1\r\nAccept-Encoding: gzip\r\nConnection: X-Hop\r\nX-Hop: a\r\nAccept: image/*\r\nUser-Agent: curl/8\r\nRange: bytes=0-1\r\nIf-None-Match: \"c\"\r\nCDN-Loop: other\r\nVia: 1.1 p\r\nCoral-No-Forward: 1\r\nCache-Control: no-cache\r\n");
    let o = Origin {
        host: "x.com".into(),
        port: 8080,
    };
    let mut buf = Vec::new();
    upstream_request(
        &r,
        &o,
        false,
        &revalidation_headers(&ok("ETag: \"s\"\r\n")),
        &mut buf,
    );
    let text = String::from_utf8(buf.clone()).unwrap();
    assert_eq!(
        text,
        "GET /y.jpg HTTP/1.1\r\nHost: x.com:8080\r\naccept: image/*\r\nVia: 1.1 p, 1.1 coral\r\n\
         CDN-Loop: other, coral\r\nUser-Agent: curl/8 CoralWebPrx/0.2 (See http://coralcdn.org/)\r\n\
         if-none-match: \"s\"\r\n\r\n"
    );
    // It is a valid request by our own rules.
    let (back, n) = parse_request_head(&buf, &Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(n, buf.len());
    let zones = Zones {
        zone: "coralcdn.test".into(),
        alias: None,
    };
    assert!(loop_detected(&back, &zones));
    assert!(!no_forward(&back));
}

#[test]
fn nsdi04_3_2_upstream_request_to_a_peer() {
    let r = req_line("HEAD /a?b HTTP/1.1", "Authorization: Basic eDp5\r\n");
    let o = Origin {
        host: "x.com".into(),
        port: 80,
    };
    let mut buf = Vec::new();
    upstream_request(&r, &o, true, &Headers::new(), &mut buf);
    let (back, _) = parse_request_head(&buf, &Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(back.method, Method::Head);
    assert_eq!(back.target, "http://x.com:80/a?b");
    assert_eq!(back.headers.get("host"), Some(&b"x.com"[..]));
    assert!(no_forward(&back));
    assert!(!back.headers.contains("authorization"));
    let zones = Zones {
        zone: "coralcdn.test".into(),
        alias: Some("coral.test".into()),
    };
    assert!(
        !loop_detected(&back, &zones),
        "a peer request is not a loop"
    );
}

#[test]
fn rfc8586_loop_detected_by_token_or_zone() {
    let z = Zones {
        zone: "coralcdn.test".into(),
        alias: Some("coral.test".into()),
    };
    assert!(loop_detected(&req("CDN-Loop: foo, Coral\r\n"), &z));
    assert!(loop_detected(&req("CDN-Loop: coralcdn.test; v=1\r\n"), &z));
    assert!(loop_detected(
        &req("CDN-Loop: a\r\nCDN-Loop: coral.test\r\n"),
        &z
    ));
    assert!(!loop_detected(&req("CDN-Loop: coralx, foo\r\n"), &z));
    assert!(!loop_detected(&req(""), &z));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn arb_fields() -> impl Strategy<Value = String> {
        let name = prop::sample::select(vec![
            "Cache-Control",
            "Expires",
            "Date",
            "Age",
            "Vary",
            "ETag",
            "Last-Modified",
            "If-None-Match",
            "If-Modified-Since",
            "Range",
            "If-Range",
            "Connection",
            "Authorization",
            "CDN-Loop",
            "Via",
            "Set-Cookie",
            "Accept",
        ]);
        let value = "[ -~]{0,40}";
        prop::collection::vec((name, value), 0..8)
            .prop_map(|fs| fs.iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn prop_policy_never_panics_on_any_fields(
            rf in arb_fields(),
            sf in arb_fields(),
            status in 100u16..600,
            now in any::<u32>(),
            len in 0u64..1000,
        ) {
            let text = format!("GET /y HTTP/1.1\r\nHost: x.coral.test\r\n{rf}\r\n");
            let Ok(Some((r, _))) = parse_request_head(text.as_bytes(), &Limits::default()) else {
                return Ok(());
            };
            let text = format!("HTTP/1.1 {status} X\r\n{sf}\r\n");
            let Ok(Some((s, _))) = parse_response_head(text.as_bytes(), false, &Limits::default()) else {
                return Ok(());
            };
            let now = u64::from(now);
            if let Storable::Yes(f) = storable(&r, &s, now) {
                prop_assert!(f.fresh_until_secs >= now);
                prop_assert!(age_secs(&f, now) == f.initial_age_secs);
                let _ = is_fresh(&f, now + 1);
            }
            let _ = evaluate_conditional(&r, &s);
            let _ = vary_matches(&vary_request_headers(&s, &r), &s, &r);
            let stored = head_to_store(&s);
            for range in [range(&r, len), range_for(&r, &s, len)] {
                if let RangeAnswer::Partial { start, end_inclusive } = range {
                    prop_assert!(start <= end_inclusive && end_inclusive < len);
                }
                let mut buf = Vec::new();
                let mut i = info();
                i.range = range;
                i.body_len = Some(len);
                let framing = client_head(&stored, &i, &mut buf);
                // What we write, we can read back, with the framing we announced.
                let (back, n) = parse_response_head(&buf, false, &Limits::default()).unwrap().unwrap();
                prop_assert_eq!(n, buf.len());
                prop_assert_eq!(back.framing, framing);
            }
            let mut buf = Vec::new();
            upstream_request(&r, &Origin { host: "x.com".into(), port: 80 }, false, &revalidation_headers(&s), &mut buf);
            prop_assert!(parse_request_head(&buf, &Limits::default()).unwrap().is_some());
        }
    }
}

#[test]
fn rfc5861_an_origin_refusing_or_failing_does_not_replace_a_good_copy() {
    for status in [500, 502, 503, 504, 403, 429, 451] {
        assert!(origin_failed(200, status), "{status}");
    }
    // Gone: the copy is replaced (cached briefly as a negative answer).
    assert!(!origin_failed(200, 404));
    assert!(!origin_failed(200, 410));
    // Success replaces it; a stored error is no good copy to keep.
    assert!(!origin_failed(200, 200));
    assert!(!origin_failed(404, 403));
    assert!(origin_failed(404, 503));
}

#[test]
fn rfc9112_6_1_a_stored_answer_in_a_transfer_coding_is_written_whole_with_it() {
    let upstream = resp(
        "HTTP/1.1 200 OK",
        "Transfer-Encoding: x-odd, chunked\r\nCache-Control: max-age=60\r\n",
    );
    let stored = head_to_store_with_codings(&upstream);
    assert_eq!(stored_codings(&stored), Some(&b"x-odd"[..]));
    assert_eq!(stored_codings(&head_to_store(&upstream)), None);
    assert_eq!(stored_codings(&head_to_store_with_codings(&ok(""))), None);
    // The range asked for is not honoured: the body is sent whole.
    let info = |minor| ClientHeadInfo {
        node_name: "n",
        age_secs: 0,
        cache_status: CacheStatus::hit(),
        range: RangeAnswer::Partial {
            start: 0,
            end_inclusive: 1,
        },
        body_len: Some(5),
        keep_alive: true,
        not_modified: false,
        client_minor_version: minor,
    };
    let mut out = Vec::new();
    assert_eq!(client_head(&stored, &info(1), &mut out), Framing::Chunked);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.contains("\r\nTransfer-Encoding: x-odd, chunked\r\n"),
        "{text}"
    );
    assert_eq!(text.matches("Transfer-Encoding").count(), 1, "{text}");
    assert!(
        !text.contains("Content-Length") && !text.contains("Content-Range"),
        "{text}"
    );
    assert!(!text.contains("Accept-Ranges"), "{text}");
    // HTTP/1.0: no coding can be sent (the runtime refuses first).
    let mut out = Vec::new();
    assert_eq!(
        client_head(&stored, &info(0), &mut out),
        Framing::UntilClose
    );
    assert!(!String::from_utf8(out)
        .unwrap()
        .contains("Transfer-Encoding"));
}

#[test]
fn issue_26_13_stripped_cookies_are_said_in_the_answer() {
    let with = resp(
        "HTTP/1.1 200 OK",
        "Set-Cookie: a=b\r\nSet-Cookie: c=d\r\nSet-Cookie2: e=f\r\nX-Other: 1\r\n",
    );
    let stored = head_to_store(&with);
    assert!(!stored.headers.contains("set-cookie") && !stored.headers.contains("set-cookie2"));
    assert_eq!(
        stored.headers.get("coral-stripped"),
        Some(&b"Set-Cookie, Set-Cookie2"[..])
    );
    assert_eq!(stored.headers.get("x-other"), Some(&b"1"[..]));
    // Said once, however often the head is stored again (a 304's freshening).
    assert_eq!(head_to_store(&stored).headers.count("coral-stripped"), 1);
    // Nothing stripped, nothing said.
    assert!(!head_to_store(&ok("")).headers.contains("coral-stripped"));
}
