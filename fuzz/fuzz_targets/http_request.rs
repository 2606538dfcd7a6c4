//! The proxy's request parser and chunked decoder on arbitrary bytes.
//!
//! Input: one byte choosing a split point, then the bytes a client sent. Checks:
//! nothing panics; a head parsed from a prefix is the head parsed from the whole
//! (the parser never decides early on a partial head); an accepted head has none of
//! what our framing rules reject (bare LF, NUL, both Content-Length and
//! Transfer-Encoding, two Host fields); and a chunked body decodes to the same bytes
//! and stops at the same place however it is split. A request the hit's fast
//! path takes as plain (`hot::parse_plain`) is one the full parser accepts, with
//! the same length, method, Host, target and keep-alive.

#![no_main]

use coral::proxy::http::{
    parse_request_head, parse_response_head, ChunkedDecoder, Framing, Limits,
};
use coral::proxy::hot::parse_plain;
use coral::proxy::http::Method;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        chunk_size_max: 1 << 16,
        ..Limits::default()
    };
    let _ = parse_response_head(bytes, false, &limits);
    let whole = parse_request_head(bytes, &limits);
    let cut = usize::from(split) * bytes.len() / 255;
    match parse_request_head(&bytes[..cut], &limits) {
        Ok(None) => {}
        prefix => assert_eq!(prefix, whole, "prefix of {cut} bytes decided differently"),
    }
    if let Some(plain) = parse_plain(bytes, &limits) {
        let Ok(Some((full, n))) = &whole else {
            panic!("plain request the full parser refused: {whole:?}");
        };
        assert_eq!(plain.len, *n);
        assert_eq!(plain.head_only, full.method == Method::Head);
        assert_eq!(Some(plain.host), full.host().map(str::as_bytes));
        assert_eq!(plain.target, full.target.as_bytes());
        assert_eq!(plain.keep_alive, full.keep_alive);
    }
    let Ok(Some((head, n))) = whole else {
        return;
    };
    let raw = &bytes[..n];
    assert!(!raw.contains(&0), "NUL accepted");
    assert!(
        raw.windows(2).all(|w| w[1] != b'\n' || w[0] == b'\r') && raw.first() != Some(&b'\n'),
        "bare LF accepted"
    );
    assert!(
        !(head.headers.contains("content-length") && head.headers.contains("transfer-encoding")),
        "CL with TE accepted"
    );
    assert!(head.headers.count("host") <= 1, "two Hosts accepted");
    assert!(head.headers.count("content-length") <= 1, "duplicate CL accepted");
    if head.framing != Framing::Chunked {
        return;
    }
    let body = &bytes[n..];
    let mut one = ChunkedDecoder::new(&limits);
    let mut out_one = Vec::new();
    let r_one = one.feed(body, &mut out_one);
    let mut two = ChunkedDecoder::new(&limits);
    let mut out_two = Vec::new();
    let at = usize::from(split) % (body.len() + 1);
    let r_two = two.feed(&body[..at], &mut out_two).and_then(|(c, done)| {
        if done {
            Ok((c, done))
        } else {
            assert_eq!(c, at);
            two.feed(&body[at..], &mut out_two).map(|(c2, d)| (c + c2, d))
        }
    });
    match (r_one, r_two) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "split decoding stopped elsewhere");
            assert_eq!(out_one, out_two, "split decoding differs");
            assert!(a.0 <= body.len());
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("split changed the outcome: {a:?} vs {b:?}"),
    }
});
