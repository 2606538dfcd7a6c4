use super::*;
use proptest::prelude::*;

fn origin(host: &str, port: u16) -> Origin {
    Origin {
        host: host.into(),
        port,
    }
}

fn rewrite_whole(o: &Origin, input: &[u8]) -> Vec<u8> {
    let mut r = HtmlRewriter::new(o, "coral.test", 8090);
    let mut out = Vec::new();
    r.feed(input, &mut out);
    r.finish(&mut out);
    out
}

#[test]
fn nsdi04_2_1_location_to_the_origin_stays_coralized() {
    let o = origin("www.x.com", 80);
    let l = |v: &str| location(v, &o, "coral.test", 8090);
    assert_eq!(
        l("http://www.x.com/new"),
        Some("http://www.x.com.coral.test:8090/new".into())
    );
    assert_eq!(
        l("HTTP://WWW.X.COM:80/new?a#b"),
        Some("http://www.x.com.coral.test:8090/new?a#b".into())
    );
    assert_eq!(
        l("http://www.x.com"),
        Some("http://www.x.com.coral.test:8090".into())
    );
    assert_eq!(
        l("http://www.x.com./a"),
        Some("http://www.x.com.coral.test:8090/a".into())
    );
    assert_eq!(
        l("//www.x.com/a"),
        Some("//www.x.com.coral.test:8090/a".into())
    );
    // Elsewhere, relative, other ports, other schemes, userinfo tricks: unchanged.
    assert_eq!(l("http://other.com/new"), None);
    assert_eq!(l("/relative"), None);
    assert_eq!(l("new.html"), None);
    assert_eq!(l("http://www.x.com:8080/"), None);
    assert_eq!(l("https://www.x.com/"), None);
    assert_eq!(l("http://www.x.com@evil.com/"), None);
    assert_eq!(l("http://www.x.com.evil.com/"), None);
    let o8 = origin("x.com", 8080);
    assert_eq!(
        location("http://x.com:8080/a", &o8, "coral.test", 80),
        Some("http://x.com.8080.coral.test/a".into())
    );
    assert_eq!(location("http://x.com/a", &o8, "coral.test", 80), None);
}

#[test]
fn nsdi04_2_1_absolute_links_in_html_stay_coralized() {
    let o = origin("www.x.com", 80);
    let html = b"<a href=\"http://www.x.com/a.html\">see http://WWW.X.COM:80/b</a>\
<img src='http://www.x.com'><a href=\"http://www.x.com.evil/\">x</a>\
<a href=http://www.x.com:8080/>p</a> http://www.x.com@e.com/ https://www.x.com/ \
<a href=\"/rel\">r</a> url(http://www.x.com/c.png) end http://www.x.com";
    let out = String::from_utf8(rewrite_whole(&o, html)).unwrap();
    assert_eq!(
        out,
        "<a href=\"http://www.x.com.coral.test:8090/a.html\">see http://www.x.com.coral.test:8090/b</a>\
<img src='http://www.x.com.coral.test:8090'><a href=\"http://www.x.com.evil/\">x</a>\
<a href=http://www.x.com:8080/>p</a> http://www.x.com@e.com/ https://www.x.com/ \
<a href=\"/rel\">r</a> url(http://www.x.com.coral.test:8090/c.png) end http://www.x.com.coral.test:8090"
    );
}

#[test]
fn nsdi04_2_1_scheme_relative_links_stay_coralized() {
    let o = origin("www.x.com", 80);
    let html = b"<script src=\"//www.x.com/a.js\"></script><img src='//WWW.X.COM:80/b'>\
<a href=//www.x.com>c</a> url(//www.x.com/d.png) // www.x.com comment //www.x.com text \
\"//www.x.com.evil/\" \"//cdn.other.com/\"";
    let out = String::from_utf8(rewrite_whole(&o, html)).unwrap();
    assert_eq!(
        out,
        "<script src=\"//www.x.com.coral.test:8090/a.js\"></script><img src='//www.x.com.coral.test:8090/b'>\
<a href=//www.x.com.coral.test:8090>c</a> url(//www.x.com.coral.test:8090/d.png) // www.x.com comment //www.x.com text \
\"//www.x.com.evil/\" \"//cdn.other.com/\""
    );
}

#[test]
fn nsdi04_2_1_links_to_an_origin_on_another_port() {
    let o = origin("x.com", 8080);
    let out = rewrite_whole(
        &o,
        b"a http://x.com:8080/p b http://x.com/p c http://x.com:80801/",
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "a http://x.com.8080.coral.test:8090/p b http://x.com/p c http://x.com:80801/"
    );
}

#[test]
fn nsdi04_2_1_redirect_heads_are_rewritten() {
    use crate::proxy::http::{parse_response_head, Limits};
    let text = b"HTTP/1.1 302 Found\r\nLocation: http://x.com/new\r\nContent-Location: http://y.com/\r\nX: http://x.com/\r\n\r\n";
    let mut r = parse_response_head(text, false, &Limits::default())
        .unwrap()
        .unwrap()
        .0;
    assert_eq!(head(&mut r, &origin("x.com", 80), "coral.test", 8090), 1);
    assert_eq!(
        r.headers.get("location"),
        Some(&b"http://x.com.coral.test:8090/new"[..])
    );
    assert_eq!(
        r.headers.get("content-location"),
        Some(&b"http://y.com/"[..])
    );
    assert_eq!(r.headers.get("x"), Some(&b"http://x.com/"[..]));
}

#[test]
fn only_uncompressed_html_bodies_are_rewritten() {
    use crate::proxy::http::{parse_response_head, Limits};
    let r = |fields: &str| {
        let text = format!("HTTP/1.1 200 OK\r\n{fields}\r\n");
        parse_response_head(text.as_bytes(), false, &Limits::default())
            .unwrap()
            .unwrap()
            .0
    };
    assert!(body_is_rewritable(&r(
        "Content-Type: text/html; charset=utf-8\r\n"
    )));
    assert!(body_is_rewritable(&r(
        "Content-Type: TEXT/HTML\r\nContent-Encoding: identity\r\n"
    )));
    assert!(body_is_rewritable(&r(
        "Content-Type: application/xhtml+xml\r\n"
    )));
    assert!(!body_is_rewritable(&r(
        "Content-Type: text/html\r\nContent-Encoding: gzip\r\n"
    )));
    assert!(!body_is_rewritable(&r("Content-Type: image/png\r\n")));
    assert!(!body_is_rewritable(&r("")));
}

fn html_piece() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(vec![
            &b"http://www.x.com/"[..],
            b"http://WWW.x.com",
            b"http://www.x.com:80",
            b"http://www.x.com:8080/",
            b"http://www.x.com.evil/",
            b"http://www.x.co",
            b"http://",
            b"h",
            b"<a href=\"",
            b"\">",
            b" ",
            b"\xff\x00",
            b"x.com",
            b"\"//www.x.com/",
            b"//www.x.com",
            b"/",
            b"=",
        ]),
        0..20,
    )
    .prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_html_rewriter_output_is_independent_of_splits(
        input in html_piece(),
        splits in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let o = origin("www.x.com", 80);
        let whole = rewrite_whole(&o, &input);
        let mut cuts: Vec<usize> = splits.iter().map(|s| s.index(input.len() + 1)).collect();
        cuts.sort_unstable();
        let mut r = HtmlRewriter::new(&o, "coral.test", 8090);
        let mut out = Vec::new();
        let mut at = 0;
        for c in cuts {
            r.feed(&input[at..c], &mut out);
            at = c;
        }
        r.feed(&input[at..], &mut out);
        r.finish(&mut out);
        prop_assert_eq!(out, whole);
    }

    #[test]
    fn prop_html_rewriter_byte_at_a_time(input in prop::collection::vec(any::<u8>(), 0..200)) {
        let o = origin("ab", 80);
        let whole = rewrite_whole(&o, &input);
        let mut r = HtmlRewriter::new(&o, "coral.test", 8090);
        let mut out = Vec::new();
        for b in &input {
            r.feed(std::slice::from_ref(b), &mut out);
        }
        r.finish(&mut out);
        prop_assert_eq!(out, whole);
    }
}
