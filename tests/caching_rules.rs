//! The caching rules of issue 26, through the core's public API, by the RFC section
//! each checks: HTTP-date grammar (RFC 9110 §5.6.7, RFC 9111 §5.3), `Age` (RFC 9111
//! §5.1), `no-cache` and friends never served stale (§5.2.2), targeted cache control
//! (RFC 9213), `Cache-Status` (RFC 9211) and heuristic freshness (§4.2.2, §3.5).

use coral::proxy::date::write_http_date;
use coral::proxy::fetch::{self, Verdict};
use coral::proxy::http::{
    parse_request_head, parse_response_head, Limits, RequestHead, ResponseHead,
};
use coral::proxy::policy::{
    self, age_field_secs, client_head, forbids_stale, storable_with, CacheStatus, ClientHeadInfo,
    Forward, Heuristic, HeuristicMode, RangeAnswer, Storable,
};
use proptest::prelude::*;

const NOW: u64 = 1_700_000_000;

fn date(secs: u64) -> String {
    let mut v = Vec::new();
    write_http_date(&mut v, secs);
    String::from_utf8(v).unwrap()
}

fn get(fields: &str) -> RequestHead {
    let text = format!("GET /a HTTP/1.1\r\nHost: x.com.coral.test\r\n{fields}\r\n");
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

fn judged(r: &ResponseHead, heuristic: Heuristic) -> Storable {
    storable_with(&get(""), r, NOW, &heuristic)
}

/// Seconds fresh from now, or why not stored.
fn fresh_for(r: &ResponseHead) -> Result<u64, &'static str> {
    match judged(r, Heuristic::default()) {
        Storable::Yes(f) => Ok(f.fresh_until_secs.saturating_sub(NOW)),
        Storable::No(why) => Err(why),
    }
}

fn must_revalidate(r: &ResponseHead) -> bool {
    match judged(r, Heuristic::default()) {
        Storable::Yes(f) => f.must_revalidate,
        Storable::No(why) => panic!("not stored: {why}"),
    }
}

// --- RFC 9110 §5.6.7, RFC 9111 §5.3: Expires -------------------------------------------

#[test]
fn rfc9111_5_3_an_invalid_expires_is_already_expired() {
    let now = date(NOW);
    for bad in [
        "Thu, 18  Aug  2050 02:01:18 GMT",
        "Thu, 18-Aug-2050 02:01:18 GMT",
        "Thu, 18 Aug 2050 2:01:18 GMT",
        "Thu, 18 Aug 2050 02:01:18 UTC",
        "0",
        "-1",
    ] {
        let r = ok(&format!("Date: {now}\r\nExpires: {bad}\r\n"));
        assert_eq!(fresh_for(&r), Ok(0), "{bad:?}");
    }
    // The same instant, well formed, in each of the three forms: fresh.
    for good in [
        "Thu, 18 Aug 2050 02:01:18 GMT",
        "Thursday, 18-Aug-50 02:01:18 GMT",
        "Thu Aug 18 02:01:18 2050",
    ] {
        let r = ok(&format!("Date: {now}\r\nExpires: {good}\r\n"));
        assert_eq!(
            fresh_for(&r),
            Ok(2_544_400_878 - NOW),
            "{good:?} is a future date"
        );
    }
}

#[test]
fn rfc9111_5_3_two_expires_fields_are_invalid() {
    let r = ok(&format!(
        "Date: {}\r\nExpires: {}\r\nExpires: {}\r\n",
        date(NOW),
        date(NOW + 3600),
        date(NOW + 3600)
    ));
    assert_eq!(fresh_for(&r), Ok(0));
    let one = ok(&format!(
        "Date: {}\r\nExpires: {}\r\n",
        date(NOW),
        date(NOW + 3600)
    ));
    assert_eq!(fresh_for(&one), Ok(3600));
}

#[test]
fn rfc9111_4_2_1_max_age_overrides_an_invalid_expires() {
    let r = ok("Cache-Control: max-age=600\r\nExpires: 0\r\n");
    assert_eq!(fresh_for(&r), Ok(600));
}

// --- RFC 9111 §5.1: Age ------------------------------------------------------------------

#[test]
fn rfc9111_5_1_a_list_valued_age_uses_its_first_member() {
    let age = |v: &str| age_field_secs(&ok(&format!("Age: {v}\r\n")));
    assert_eq!(age("7200, 0"), 7200);
    assert_eq!(age("7200,0"), 7200);
    assert_eq!(age("0, 7200"), 0);
    assert_eq!(age(" 60 "), 60);
    // Two fields: the first.
    assert_eq!(age_field_secs(&ok("Age: 7200\r\nAge: 0\r\n")), 7200);
    // Too large: 2^31 (RFC 9111 §1.2.2).
    assert_eq!(age("99999999999999999999999"), 1 << 31);
    // Invalid: ignored.
    for bad in ["-7200", "7200.0", "abc", "\"60\"", "", "1 2"] {
        assert_eq!(age(bad), 0, "{bad:?}");
    }
    assert_eq!(age_field_secs(&ok("")), 0);
}

#[test]
fn rfc9111_4_2_3_an_age_beyond_the_lifetime_is_stale_at_once() {
    let r = ok(&format!(
        "Date: {}\r\nCache-Control: max-age=3600\r\nAge: 7200, 0\r\n",
        date(NOW)
    ));
    assert_eq!(fresh_for(&r), Ok(0));
    let Storable::Yes(f) = judged(&r, Heuristic::default()) else {
        panic!()
    };
    assert_eq!(f.initial_age_secs, 7200);
    assert_eq!(policy::age_secs(&f, NOW + 10), 7210);
    // An invalid Age is ignored: fresh.
    let r = ok(&format!(
        "Date: {}\r\nCache-Control: max-age=3600\r\nAge: -7200\r\n",
        date(NOW)
    ));
    assert_eq!(fresh_for(&r), Ok(3600));
}

// --- RFC 9111 §5.2.2: never stale without revalidation -----------------------------------

#[test]
fn rfc9111_5_2_2_no_cache_and_revalidate_directives_forbid_stale_on_error() {
    for cc in [
        "no-cache",
        "max-age=60, no-cache",
        "no-cache=\"Set-Cookie\"",
        "max-age=60, must-revalidate",
        "max-age=60, proxy-revalidate",
        "s-maxage=60",
    ] {
        let r = ok(&format!("Cache-Control: {cc}\r\n"));
        assert!(must_revalidate(&r), "{cc}");
        assert!(forbids_stale(&r), "{cc}");
        // And the stored copy is never served stale when the origin fails.
        assert!(
            !fetch::serve_stale(false, Some(must_revalidate(&r))),
            "{cc}"
        );
    }
    // no-cache: stored, but stale at once (revalidated on every use).
    assert_eq!(
        fresh_for(&ok("Cache-Control: max-age=60, no-cache\r\n")),
        Ok(0)
    );
    for cc in [
        "max-age=60",
        "public, max-age=60",
        "max-age=60, stale-if-error=60",
    ] {
        let r = ok(&format!("Cache-Control: {cc}\r\n"));
        assert!(!must_revalidate(&r), "{cc}");
        assert!(!forbids_stale(&r), "{cc}");
        assert!(fetch::serve_stale(false, Some(false)));
    }
    // The targeted field's no-cache counts, whatever Cache-Control says.
    let r = ok("Cache-Control: max-age=600\r\nCDN-Cache-Control: no-cache\r\n");
    assert!(must_revalidate(&r) && forbids_stale(&r));
}

// --- RFC 9213: targeted cache control -----------------------------------------------------

#[test]
fn rfc9213_2_1_cdn_cache_control_overrides_cache_control_and_expires() {
    let cases: &[(&str, Result<u64, &str>)] = &[
        (
            "Cache-Control: max-age=1\r\nCDN-Cache-Control: max-age=3600\r\n",
            Ok(3600),
        ),
        (
            "Cache-Control: max-age=3600\r\nCDN-Cache-Control: max-age=1\r\n",
            Ok(1),
        ),
        (
            "Cache-Control: no-store\r\nCDN-Cache-Control: max-age=10000\r\n",
            Ok(10000),
        ),
        (
            "Cache-Control: max-age=10000\r\nCDN-Cache-Control: no-store\r\n",
            Err("no-store"),
        ),
        (
            "Cache-Control: max-age=10000\r\nCDN-Cache-Control: private\r\n",
            Err("private"),
        ),
        (
            "Cache-Control: max-age=10000\r\nCDN-Cache-Control: no-cache\r\n",
            Ok(0),
        ),
        (
            "CDN-Cache-Control: max-age=3600\r\nExpires: 0\r\n",
            Ok(3600),
        ),
        ("CDN-Cache-Control: foobar, max-age=3600\r\n", Ok(3600)),
        ("CDN-Cache-Control: max-age=2147483648\r\n", Ok(1 << 31)),
        ("CDN-Cache-Control: max-age=99999999999\r\n", Ok(1 << 31)),
        (
            "CDN-Cache-Control: max-age=0\r\nCache-Control: max-age=600\r\n",
            Ok(0),
        ),
        ("CDN-Cache-Control: s-maxage=60, max-age=600\r\n", Ok(60)),
        // Two lines are one Dictionary.
        (
            "CDN-Cache-Control: foo\r\nCDN-Cache-Control: max-age=70\r\n",
            Ok(70),
        ),
    ];
    for (fields, want) in cases {
        assert_eq!(fresh_for(&ok(fields)), *want, "{fields:?}");
    }
}

#[test]
fn rfc9213_2_1_an_invalid_targeted_field_is_ignored_whole() {
    for bad in [
        "max-age=10000, &&&&&", // not a Dictionary
        "max-age=\"10000\"",    // wrong type (RFC 9213 §2.2)
        "max-age=1.5",          // wrong type
        "max-age=-1",           // not delta-seconds
        "max-age =100",         // space before '='
        "max-age= 100",         // space after '='
        "MaX-aGe=100",          // keys are lower case
        "max-age=100,",         // trailing comma
        "no-store=1",           // a flag with a value
        "",                     // empty
    ] {
        let r = ok(&format!(
            "Cache-Control: max-age=5\r\nCDN-Cache-Control: {bad}\r\n"
        ));
        assert_eq!(fresh_for(&r), Ok(5), "{bad:?}: Cache-Control decides");
        let r = ok(&format!(
            "Cache-Control: no-store\r\nCDN-Cache-Control: {bad}\r\n"
        ));
        assert_eq!(fresh_for(&r), Err("no-store"), "{bad:?}");
    }
    // Parameters and other well-formed items are fine.
    let r = ok("Cache-Control: no-store\r\nCDN-Cache-Control: max-age=60;a=1, x=?0, y=:aGk=:, z=\"s\", w=tok/en, v=1.25\r\n");
    assert_eq!(fresh_for(&r), Ok(60));
}

#[test]
fn rfc9213_coral_cache_control_is_more_specific_than_cdn_cache_control() {
    let r = ok(
        "Cache-Control: max-age=1\r\nCDN-Cache-Control: max-age=60\r\nCoral-Cache-Control: max-age=600\r\n",
    );
    assert_eq!(fresh_for(&r), Ok(600));
    let r = ok("CDN-Cache-Control: max-age=60\r\nCoral-Cache-Control: no-store\r\n");
    assert_eq!(fresh_for(&r), Err("no-store"));
    // An invalid Coral-Cache-Control falls through to CDN-Cache-Control.
    let r = ok("CDN-Cache-Control: max-age=60\r\nCoral-Cache-Control: max-age=\"600\"\r\n");
    assert_eq!(fresh_for(&r), Ok(60));
    assert_eq!(
        policy::TARGET_LIST,
        ["coral-cache-control", "cdn-cache-control"]
    );
}

#[test]
fn rfc9213_3_coral_cache_control_stops_here_cdn_cache_control_goes_on() {
    let stored = ok(
        "Cache-Control: max-age=1\r\nCDN-Cache-Control: max-age=60\r\nCoral-Cache-Control: max-age=600\r\nContent-Length: 0\r\n",
    );
    let mut out = Vec::new();
    client_head(&stored, &info(CacheStatus::hit()), &mut out);
    let h = String::from_utf8(out).unwrap();
    assert!(h.contains("cache-control: max-age=1\r\n"), "{h}");
    assert!(h.contains("cdn-cache-control: max-age=60\r\n"), "{h}");
    assert!(!h.contains("coral-cache-control"), "{h}");
}

proptest! {
    /// Any bytes as a targeted field: no panic, and Cache-Control decides whenever the
    /// field is not valid.
    #[test]
    fn rfc9213_arbitrary_targeted_fields_never_panic(v in "[ -~]{0,60}") {
        let r = ok(&format!("Cache-Control: max-age=5\r\nCDN-Cache-Control: {v}\r\n"));
        let _ = fresh_for(&r);
    }

    /// The targeted max-age wins over any Cache-Control.
    #[test]
    fn rfc9213_targeted_max_age_wins(cdn in 0u64..1_000_000, cc in 0u64..1_000_000) {
        let r = ok(&format!("Cache-Control: max-age={cc}\r\nCDN-Cache-Control: max-age={cdn}\r\n"));
        prop_assert_eq!(fresh_for(&r), Ok(cdn));
    }
}

// --- RFC 9211: Cache-Status ---------------------------------------------------------------

fn info(cs: CacheStatus) -> ClientHeadInfo<'static> {
    ClientHeadInfo {
        node_name: "n",
        age_secs: 0,
        cache_status: cs,
        range: RangeAnswer::Full,
        body_len: Some(0),
        keep_alive: true,
        not_modified: false,
        client_minor_version: 1,
    }
}

fn written(cs: CacheStatus) -> String {
    let mut out = Vec::new();
    cs.write(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn rfc9211_2_2_fwd_is_one_of_the_rfcs_values() {
    let all = [
        Forward::Bypass,
        Forward::Method,
        Forward::UriMiss,
        Forward::VaryMiss,
        Forward::Miss,
        Forward::Request,
        Forward::Stale,
        Forward::Partial,
    ];
    for f in all {
        assert!(
            [
                "bypass",
                "method",
                "uri-miss",
                "vary-miss",
                "miss",
                "request",
                "stale",
                "partial"
            ]
            .contains(&f.token()),
            "{f:?}"
        );
    }
}

#[test]
fn rfc9211_a_hit_has_no_fwd_stored_or_collapsed() {
    let mut cs = CacheStatus::hit();
    cs.ttl = Some(42);
    assert_eq!(written(cs), "coral; hit; ttl=42");
    let mut cs = CacheStatus::forward(Forward::UriMiss, true);
    cs.collapsed = true;
    cs.ttl = Some(-3);
    cs.detail = Some(policy::detail::PEER_L1);
    assert_eq!(
        written(cs),
        "coral; fwd=uri-miss; stored; collapsed; ttl=-3; detail=peer-l1"
    );
    // A status claiming both is written as the forward.
    let mut both = CacheStatus::forward(Forward::Stale, false);
    both.hit = true;
    assert_eq!(written(both), "coral; fwd=stale");
}

/// The request's way through the cache, labelled as RFC 9211 says: a fetched copy that
/// its origin made stale at once is `fwd=uri-miss; stored`, never `stale-on-error`.
#[test]
fn rfc9211_a_fresh_answer_from_the_origin_is_not_labelled_stale_on_error() {
    use coral::proxy::pass::PassMemory;
    use coral::proxy::request::{route, CopyState, Found, Lookup, Serve};
    let zones = coral::proxy::names::Zones {
        zone: "coralcdn.test".into(),
        alias: Some("coral.test".into()),
    };
    let r = get("");
    let routed = route(&r, &zones).unwrap();
    let head = ok("Cache-Control: max-age=0\r\nContent-Length: 3\r\n");
    let none = coral::proxy::http::Headers::new();
    let mut passes = PassMemory::new(coral::dsht::id::keyed_hasher(b"t", "pass"));
    let found = |state| Found::Copy {
        head: &head,
        vary_req: &none,
        state,
    };
    // Nothing stored: filled; the fetched copy is already stale (max-age=0).
    let mut way = Lookup::new(&routed);
    assert_eq!(
        way.decide(&r, Found::Nothing, NOW, &mut passes, || None),
        Serve::Fill
    );
    way.filled(None, false);
    let Serve::Copy(cs) = way.decide(
        &r,
        found(CopyState::Complete { fresh: false }),
        NOW,
        &mut passes,
        || None,
    ) else {
        panic!("not served")
    };
    assert_eq!(written(cs), "coral; fwd=uri-miss; stored");
    // A stale copy: filled; refetched → fwd=stale; stored.
    let mut way = Lookup::new(&routed);
    let stale = found(CopyState::Complete { fresh: false });
    assert_eq!(
        way.decide(&r, stale, NOW, &mut passes, || None),
        Serve::Fill
    );
    way.filled(None, false);
    let Serve::Copy(cs) = way.decide(
        &r,
        found(CopyState::Complete { fresh: true }),
        NOW,
        &mut passes,
        || None,
    ) else {
        panic!("not served")
    };
    assert_eq!(written(cs), "coral; fwd=stale; stored");
    // The same, but the origin failed and the stale copy was kept.
    let mut way = Lookup::new(&routed);
    assert_eq!(
        way.decide(&r, stale, NOW, &mut passes, || None),
        Serve::Fill
    );
    way.kept_stale();
    let Serve::Copy(cs) = way.decide(&r, stale, NOW, &mut passes, || None) else {
        panic!("not served")
    };
    assert_eq!(written(cs), "coral; fwd=stale; detail=stale-on-error");
}

// --- RFC 9111 §4.2.2, §3.5: heuristic freshness and Authorization -------------------------

#[test]
fn rfc9111_4_2_2_the_heuristic_is_a_tenth_of_the_last_modified_age_capped() {
    let h = Heuristic::default();
    let lm = |ago: u64| {
        ok(&format!(
            "Date: {}\r\nLast-Modified: {}\r\n",
            date(NOW),
            date(NOW - ago)
        ))
    };
    assert_eq!(fresh_for(&lm(36_000)), Ok(3_600));
    // Modified recently: the default is the floor (coral).
    assert_eq!(fresh_for(&lm(10)), Ok(h.default_secs));
    assert_eq!(fresh_for(&lm(2000)), Ok(h.default_secs));
    assert_eq!(fresh_for(&lm(3600)), Ok(360));
    assert_eq!(fresh_for(&lm(30 * 86_400)), Ok(h.max_secs));
    // Nothing said: the short default (coral), or nothing stored (rfc).
    assert_eq!(fresh_for(&ok("")), Ok(h.default_secs));
    let rfc = Heuristic {
        mode: HeuristicMode::Rfc,
        ..h
    };
    assert!(matches!(judged(&ok(""), rfc), Storable::No(_)));
    assert!(matches!(
        judged(&ok("ETag: \"x\"\r\n"), rfc),
        Storable::No(_)
    ));
    assert!(matches!(judged(&lm(3600), rfc), Storable::Yes(f) if f.fresh_until_secs == NOW + 360));
    assert!(matches!(judged(&lm(10), rfc), Storable::Yes(f) if f.fresh_until_secs == NOW + 1));
    // Explicit freshness is never the heuristic's.
    assert!(
        matches!(judged(&ok("Cache-Control: max-age=7\r\n"), rfc), Storable::Yes(f) if f.fresh_until_secs == NOW + 7)
    );
    // A Last-Modified after Date says nothing: the default.
    let future = ok(&format!(
        "Date: {}\r\nLast-Modified: {}\r\n",
        date(NOW),
        date(NOW + 60)
    ));
    assert_eq!(fresh_for(&future), Ok(h.default_secs));
    // Configurable.
    let custom = Heuristic {
        mode: HeuristicMode::Coral,
        default_secs: 30,
        last_modified_percent: 50,
        max_secs: 1000,
    };
    assert!(matches!(judged(&ok(""), custom), Storable::Yes(f) if f.fresh_until_secs == NOW + 30));
    assert!(
        matches!(judged(&lm(600), custom), Storable::Yes(f) if f.fresh_until_secs == NOW + 300)
    );
    assert!(
        matches!(judged(&lm(6000), custom), Storable::Yes(f) if f.fresh_until_secs == NOW + 1000)
    );
}

#[test]
fn rfc9110_15_1_only_heuristically_cacheable_statuses_get_the_heuristic() {
    let lm = format!(
        "Date: {}\r\nLast-Modified: {}\r\n",
        date(NOW),
        date(NOW - 86_400)
    );
    for code in [200, 203, 204, 404, 405, 410, 414, 501] {
        let r = resp(&format!("HTTP/1.1 {code} X"), &lm);
        assert!(fresh_for(&r).is_ok(), "{code}");
    }
    for code in [201, 202, 403, 502, 503, 504, 599] {
        let r = resp(&format!("HTTP/1.1 {code} X"), &lm);
        assert!(fresh_for(&r).is_err(), "{code}");
    }
}

#[test]
fn rfc9111_3_5_authorization_answers_are_shared_only_when_marked() {
    let auth = get("Authorization: Basic dTpw\r\n");
    let stored = |fields: &str| {
        matches!(
            storable_with(&auth, &ok(fields), NOW, &Heuristic::default()),
            Storable::Yes(_)
        )
    };
    assert!(!stored("Cache-Control: max-age=3600\r\n"));
    assert!(!stored(&format!("Expires: {}\r\n", date(NOW + 3600))));
    assert!(stored("Cache-Control: max-age=3600, public\r\n"));
    assert!(stored("Cache-Control: max-age=3600, must-revalidate\r\n"));
    assert!(stored("Cache-Control: s-maxage=3600\r\n"));
    // The targeted field's marks count too.
    assert!(stored("CDN-Cache-Control: max-age=3600, public\r\n"));
}

#[test]
fn judge_uses_the_configured_heuristic() {
    let r = get("");
    let head = ok("Content-Length: 1\r\n");
    let response = |heuristic| fetch::Response {
        request: &r,
        head: &head,
        from_peer: false,
        old: None,
        now_secs: NOW,
        negative_ttl_secs: 60,
        heuristic,
        object_bytes_max: 1000,
    };
    assert!(matches!(
        fetch::judge(&response(Heuristic::default())),
        Verdict::Store(f) if f.fresh_until_secs == NOW + 300
    ));
    let rfc = Heuristic {
        mode: HeuristicMode::Rfc,
        ..Heuristic::default()
    };
    assert!(matches!(
        fetch::judge(&response(rfc)),
        Verdict::NotStored { relay: true, .. }
    ));
}
