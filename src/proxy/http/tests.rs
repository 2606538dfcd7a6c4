use super::*;
use proptest::prelude::*;

fn req(bytes: &[u8]) -> Result<Option<(RequestHead, usize)>, HttpError> {
    parse_request_head(bytes, &Limits::default())
}

fn ok(bytes: &[u8]) -> RequestHead {
    match req(bytes) {
        Ok(Some((h, n))) => {
            assert_eq!(n, bytes.len(), "head length");
            h
        }
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
    }
}

fn status(bytes: &[u8]) -> u16 {
    match req(bytes) {
        Err(e) => e.status,
        other => panic!(
            "accepted {:?}: {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(80)]),
            other.map(|o| o.map(|(h, n)| (h.target.len(), n)))
        ),
    }
}

fn resp(bytes: &[u8], head: bool) -> Result<Option<(ResponseHead, usize)>, HttpError> {
    parse_response_head(bytes, head, &Limits::default())
}

/// Malformed requests, byte-exact, each with the status it must get. Every one of these
/// is a known request-smuggling or parser-confusion vector (or a limit).
const MALFORMED: &[(&str, &[u8], u16)] = &[
    (
        "rfc9112_6_3_content_length_with_transfer_encoding",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_3_transfer_encoding_then_content_length",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_3_duplicate_content_length_different",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_3_duplicate_content_length_equal",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        400,
    ),
    (
        "rfc9110_8_6_content_length_list",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
        400,
    ),
    (
        "rfc9110_8_6_content_length_signed",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
        400,
    ),
    (
        "rfc9110_8_6_content_length_negative",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        400,
    ),
    (
        "rfc9110_8_6_content_length_hex",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n",
        400,
    ),
    (
        "rfc9110_8_6_content_length_overflow",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
        400,
    ),
    (
        "rfc9110_8_6_content_length_empty",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_3_transfer_encoding_not_final_chunked",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_3_transfer_encoding_unknown_only",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: foo\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_1_transfer_encoding_chunked_twice",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_1_transfer_encoding_unknown_before_chunked",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        501,
    ),
    (
        "rfc9112_6_1_transfer_encoding_in_http10",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_1_transfer_encoding_empty",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\n\r\n",
        400,
    ),
    (
        "rfc9112_6_1_transfer_encoding_chunked_with_space_variant",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
        400,
    ),
    (
        "rfc9112_2_2_bare_lf_in_request_line",
        b"GET / HTTP/1.1\nHost: a\r\n\r\n",
        400,
    ),
    (
        "rfc9112_2_2_bare_lf_in_field",
        b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n",
        400,
    ),
    (
        "rfc9112_2_2_bare_lf_terminator",
        b"GET / HTTP/1.1\r\nHost: a\r\n\n",
        400,
    ),
    (
        "rfc9112_5_2_obs_fold_space",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n",
        400,
    ),
    (
        "rfc9112_5_2_obs_fold_tab",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n\tz\r\n\r\n",
        400,
    ),
    (
        "rfc9112_2_2_whitespace_before_first_field",
        b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_5_nul_in_value",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_5_nul_in_target",
        b"GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    ),
    (
        "rfc9112_2_2_lone_cr_in_value",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        400,
    ),
    (
        "rfc9112_2_2_lone_cr_in_request_line",
        b"GET /\r HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_5_control_in_value",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_5_del_in_value",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_5_escape_in_value",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: \x1b[31m\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_1_space_before_colon",
        b"GET / HTTP/1.1\r\nHost: a\r\nX : y\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_1_invalid_field_name",
        b"GET / HTTP/1.1\r\nHost: a\r\nX(y): z\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_1_non_token_field_name",
        b"GET / HTTP/1.1\r\nHost: a\r\nX\x80y: z\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_1_slash_in_field_name",
        b"GET / HTTP/1.1\r\nHost: a\r\nX/y: z\r\n\r\n",
        400,
    ),
    (
        "rfc9110_5_1_empty_field_name",
        b"GET / HTTP/1.1\r\nHost: a\r\n: z\r\n\r\n",
        400,
    ),
    (
        "rfc9112_3_2_two_host_fields",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        400,
    ),
    (
        "rfc9112_3_2_two_equal_host_fields",
        b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
        400,
    ),
    ("rfc9112_3_2_missing_host", b"GET / HTTP/1.1\r\nX: y\r\n\r\n", 400),
    (
        "rfc9112_3_2_invalid_host",
        b"GET / HTTP/1.1\r\nHost: a b/c\r\n\r\n",
        400,
    ),
    (
        "rfc9112_3_2_host_with_userinfo",
        b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n",
        400,
    ),
    (
        "rfc9112_3_2_host_bad_port",
        b"GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n",
        400,
    ),
    (
        "rfc9112_3_request_line_two_spaces",
        b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    ),
    (
        "rfc9112_3_request_line_missing_version",
        b"GET /\r\nHost: a\r\n\r\n",
        400,
    ),
    (
        "rfc9112_2_3_http2_version",
        b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
        505,
    ),
    (
        "rfc9112_2_3_garbage_version",
        b"GET / HTTX/1.1\r\nHost: a\r\n\r\n",
        400,
    ),
    (
        "rfc9112_3_target_non_ascii",
        b"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
    ),
];

#[test]
fn rfc9112_malformed_requests_are_rejected_with_their_status() {
    for (name, bytes, want) in MALFORMED {
        let got = req(bytes);
        match got {
            Err(e) => assert_eq!(e.status, *want, "{name}: {e}"),
            other => panic!("{name}: accepted: {other:?}"),
        }
        // However the bytes arrive, the answer is the same rejection (never a silent
        // "need more" that a later byte turns into acceptance).
        for cut in 0..bytes.len() {
            match req(&bytes[..cut]) {
                Ok(None) => {}
                Err(e) => assert_eq!(e.status, *want, "{name} cut at {cut}: {e}"),
                Ok(Some(h)) => panic!("{name}: prefix of {cut} bytes accepted: {h:?}"),
            }
        }
    }
}

#[test]
fn rfc9112_3_oversized_request_line_is_414() {
    let limits = Limits::default();
    let mut long = b"GET /".to_vec();
    long.extend(std::iter::repeat_n(
        b'a',
        limits.target_bytes_max + REQUEST_LINE_OVERHEAD_BYTES,
    ));
    // Refused before the line even ends: a slow client cannot make us buffer it.
    assert_eq!(status(&long), 414);
    long.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status(&long), 414);
    // A target just over the limit in a short line is 414 too.
    let mut just = b"GET /".to_vec();
    just.extend(std::iter::repeat_n(b'a', limits.target_bytes_max));
    just.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status(&just), 414);
    // At the limit it is accepted.
    let mut at = b"GET /".to_vec();
    at.extend(std::iter::repeat_n(b'a', limits.target_bytes_max - 1));
    at.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(ok(&at).target.len(), limits.target_bytes_max);
}

#[test]
fn rfc6585_5_oversized_header_section_is_431() {
    let limits = Limits::default();
    let mut big = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
    big.extend(std::iter::repeat_n(b'v', limits.head_bytes_max));
    assert_eq!(status(&big), 431);
    big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(status(&big), 431);
    // Too many fields, each small.
    let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..limits.headers_max {
        many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(status(&many), 431);
    // An endless stream of empty lines is bounded too.
    let crlfs = b"\r\n".repeat(limits.head_bytes_max);
    assert_eq!(status(&crlfs), 431);
}

#[test]
fn rfc9112_headers_at_their_limit_are_accepted() {
    let limits = Limits::default();
    let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 1..limits.headers_max {
        many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(ok(&many).headers.len(), limits.headers_max);
}

#[test]
fn rfc9112_a_simple_get_parses() {
    let h = ok(b"GET /a?b=c HTTP/1.1\r\nHost: www.x.com.coral.test:8090\r\nAccept: */*\r\nX-Sp:   padded  \r\n\r\n");
    assert_eq!(h.method, Method::Get);
    assert_eq!(h.target, "/a?b=c");
    assert_eq!(h.minor_version, 1);
    assert_eq!(h.framing, Framing::Empty);
    assert!(h.keep_alive);
    assert_eq!(
        h.headers.get("HOST"),
        Some(&b"www.x.com.coral.test:8090"[..])
    );
    assert_eq!(h.headers.get("x-sp"), Some(&b"padded"[..]));
    assert_eq!(h.host(), Some("www.x.com.coral.test:8090"));
    assert_eq!(h.path(), Some("/a?b=c"));
}

#[test]
fn rfc9112_incomplete_head_needs_more() {
    let whole = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    for cut in 0..whole.len() {
        assert_eq!(req(&whole[..cut]), Ok(None), "cut {cut}");
    }
}

#[test]
fn rfc9112_pipelined_requests_parse_one_at_a_time() {
    let two = b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n";
    let (first, n) = req(two).unwrap().unwrap();
    assert_eq!(first.target, "/1");
    let (second, m) = req(&two[n..]).unwrap().unwrap();
    assert_eq!(second.target, "/2");
    assert_eq!(n + m, two.len());
}

#[test]
fn rfc9112_2_2_a_leading_empty_line_is_ignored() {
    let h = ok(b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(h.target, "/");
}

#[test]
fn rfc9112_6_3_request_framing() {
    let h = ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n");
    assert_eq!(h.framing, Framing::Length(12));
    assert_eq!(h.method, Method::Other("POST".into()));
    let h = ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(h.framing, Framing::Empty);
    let h = ok(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n");
    assert_eq!(h.framing, Framing::Chunked);
    let h = ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n");
    assert_eq!(h.framing, Framing::Length(7));
}

#[test]
fn rfc9112_9_3_keep_alive_per_version_and_connection() {
    assert!(ok(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").keep_alive);
    assert!(!ok(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive);
    assert!(!ok(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n").keep_alive);
    assert!(!ok(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
    assert!(ok(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    assert!(!ok(b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keep_alive);
}

#[test]
fn rfc9112_3_2_2_absolute_form_host_and_path() {
    let h = ok(b"GET http://x.com.coral.test:8090/p?q HTTP/1.1\r\nHost: other\r\n\r\n");
    assert_eq!(h.host(), Some("x.com.coral.test:8090"));
    assert_eq!(h.path(), Some("/p?q"));
    let h = ok(b"GET HTTP://x.com.coral.test HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(h.path(), Some("/"));
    let h = ok(b"CONNECT x.com:443 HTTP/1.1\r\nHost: x.com:443\r\n\r\n");
    assert_eq!(h.path(), None);
}

#[test]
fn rfc9112_3_2_http10_needs_no_host() {
    let h = ok(b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(h.minor_version, 0);
    assert_eq!(h.host(), None);
}

#[test]
fn rfc9112_6_3_response_framing() {
    let r = |b: &[u8], head| resp(b, head).unwrap().unwrap().0;
    assert_eq!(
        r(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false).framing,
        Framing::Length(5)
    );
    assert_eq!(
        r(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true).framing,
        Framing::Empty
    );
    assert_eq!(
        r(
            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            false
        )
        .framing,
        Framing::Empty
    );
    assert_eq!(
        r(
            b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
            false
        )
        .framing,
        Framing::Empty
    );
    assert_eq!(
        r(b"HTTP/1.1 100 Continue\r\n\r\n", false).framing,
        Framing::Empty
    );
    let chunked = r(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        false,
    );
    assert_eq!(chunked.framing, Framing::Chunked);
    assert!(chunked.keep_alive);
    let until = r(b"HTTP/1.1 200 OK\r\n\r\n", false);
    assert_eq!(until.framing, Framing::UntilClose);
    assert!(!until.keep_alive);
    let old = r(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false);
    assert!(!old.keep_alive);
    let r404 = r(b"HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", false);
    assert_eq!((r404.status, r404.framing), (404, Framing::Empty));
}

#[test]
fn rfc9112_6_3_item_4_a_response_with_codings_coral_does_not_know_is_framed_not_refused() {
    let gz = resp(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        false,
    )
    .unwrap()
    .unwrap()
    .0;
    assert_eq!(gz.framing, Framing::Chunked, "the final chunked is decoded");
    assert_eq!(transfer_codings(&gz.headers), Some(b"gzip".to_vec()));
    let close = resp(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: x-odd\r\n\r\n",
        false,
    )
    .unwrap()
    .unwrap()
    .0;
    assert_eq!(
        close.framing,
        Framing::UntilClose,
        "read until the origin closes"
    );
    assert_eq!(transfer_codings(&close.headers), Some(b"x-odd".to_vec()));
    let plain = resp(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        false,
    )
    .unwrap()
    .unwrap()
    .0;
    assert_eq!(transfer_codings(&plain.headers), None);
    // A request keeps the strict rule (501 for codings coral does not know).
    assert!(parse_request_head(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        &Limits::default()
    )
    .is_err());
}

#[test]
fn rfc9112_6_3_bad_responses_are_502() {
    let bad: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 099 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: \0\r\n\r\n",
    ];
    for b in bad {
        match resp(b, false) {
            Err(e) => assert_eq!(e.status, 502, "{:?}: {e}", String::from_utf8_lossy(b)),
            other => panic!("{:?} accepted: {other:?}", String::from_utf8_lossy(b)),
        }
    }
}

fn decode_all(input: &[u8]) -> Result<(Vec<u8>, usize), HttpError> {
    let mut d = ChunkedDecoder::new(&Limits::default());
    let mut out = Vec::new();
    let (n, done) = d.feed(input, &mut out)?;
    assert!(done, "not done: {:?}", String::from_utf8_lossy(input));
    Ok((out, n))
}

#[test]
fn rfc9112_7_1_chunked_body_decodes() {
    let body = b"5\r\nhello\r\n6;ext=\"v\"\r\n world\r\nA \t;x\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    let (out, n) = decode_all(body).unwrap();
    assert_eq!(out, b"hello world0123456789");
    assert_eq!(&body[n..], b"NEXT");
}

#[test]
fn rfc9112_7_1_bad_chunks_are_rejected() {
    let bad: &[(&[u8], u16)] = &[
        (b"x\r\n", 400),
        (b"\r\n", 400),
        (b"-1\r\n", 400),
        (b"+1\r\n", 400),
        (b"0x5\r\n", 400),
        (b" 5\r\n", 400),
        (b"5 \r\nhello\r\n0\r\n\r\n", 400),
        (b"5\nhello\r\n0\r\n\r\n", 400),
        (b"5\r\nhello\n0\r\n\r\n", 400),
        (b"5\r\nhelloX\r\n0\r\n\r\n", 400),
        (b"5\r\nhello\r\r\n", 400),
        (b"5\r\nhello\rX0\r\n\r\n", 400),
        (b"5\r\nhello0\r\n\r\n", 400),
        (b"5\rx", 400),
        (b"0\r\n\n", 400),
        (b"0\r\nT: x\n\r\n", 400),
        (b"0\r\nT: x\r\n y\r\n\r\n", 400),
        (b"0\r\nT: \0\r\n\r\n", 400),
        (b"5;a\0b\r\nhello\r\n", 400),
        (b"ffffffffffffffffff\r\n", 413),
        (b"40000001\r\n", 413),
    ];
    for (b, want) in bad {
        let mut d = ChunkedDecoder::new(&Limits::default());
        let mut out = Vec::new();
        match d.feed(b, &mut out) {
            Err(e) => assert_eq!(e.status, *want, "{:?}: {e}", String::from_utf8_lossy(b)),
            Ok(r) => panic!("{:?} accepted: {r:?}", String::from_utf8_lossy(b)),
        }
        // The decoder stays failed.
        assert!(d.feed(b"0\r\n\r\n", &mut out).is_err());
    }
    // A size line of endless leading zeros is bounded.
    let zeros = vec![b'0'; CHUNK_LINE_BYTES_MAX + 1];
    let mut d = ChunkedDecoder::new(&Limits::default());
    assert_eq!(d.feed(&zeros, &mut Vec::new()).unwrap_err().status, 400);
}

#[test]
fn rfc9112_7_1_chunk_size_at_the_limit_is_accepted() {
    let limits = Limits {
        chunk_size_max: 16,
        ..Limits::default()
    };
    let mut d = ChunkedDecoder::new(&limits);
    let mut out = Vec::new();
    assert!(
        d.feed(b"10\r\n0123456789abcdef\r\n0\r\n\r\n", &mut out)
            .unwrap()
            .1
    );
    let mut d = ChunkedDecoder::new(&limits);
    assert_eq!(d.feed(b"11\r\n", &mut out).unwrap_err().status, 413);
}

#[test]
fn chunk_writers_emit_what_the_decoder_reads() {
    let mut out = Vec::new();
    write_chunk(&mut out, b"hello");
    write_chunk(&mut out, b"");
    write_chunk(&mut out, &[7u8; 300]);
    write_last_chunk(&mut out);
    assert!(out.starts_with(b"5\r\nhello\r\n12c\r\n"));
    let (decoded, n) = decode_all(&out).unwrap();
    assert_eq!(n, out.len());
    assert_eq!(&decoded[..5], b"hello");
    assert_eq!(decoded.len(), 305);
}

#[test]
fn headers_keep_order_and_remove_all_of_a_name() {
    let mut h = Headers::new();
    h.insert("A", b"1");
    h.insert("b", b"2");
    h.insert("a", b"3");
    assert_eq!(
        h.get_all("a").collect::<Vec<_>>(),
        vec![&b"1"[..], &b"3"[..]]
    );
    assert_eq!(h.remove("A"), 2);
    assert_eq!(h.iter().collect::<Vec<_>>(), vec![("b", &b"2"[..])]);
    h.set("b", b"4");
    assert_eq!(h.get("B"), Some(&b"4"[..]));
    assert_eq!(h.len(), 1);
}

#[test]
fn response_head_write_parses_back() {
    let text = b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nX-A: 1\r\nContent-Length: 3\r\n\r\n";
    let (h, _) = resp(text, false).unwrap().unwrap();
    let mut out = Vec::new();
    h.write(&mut out);
    assert_eq!(out, b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\nx-a: 1\r\ncontent-length: 3\r\n\r\n");
    assert_eq!(resp(&out, false).unwrap().unwrap().0, h);
}

#[test]
fn simple_responses_are_well_framed() {
    let mut extra = Headers::new();
    extra.insert("Allow", b"GET, HEAD");
    let mut out = Vec::new();
    write_simple_response(405, &extra, b"GET and HEAD only\n", false, false, &mut out);
    let (h, n) = resp(&out, false).unwrap().unwrap();
    assert_eq!(
        (h.status, h.framing, h.keep_alive),
        (405, Framing::Length(18), false)
    );
    assert_eq!(h.headers.get("allow"), Some(&b"GET, HEAD"[..]));
    assert_eq!(&out[n..], b"GET and HEAD only\n");
    let mut out = Vec::new();
    write_simple_response(
        504,
        &Headers::new(),
        b"gateway timeout\n",
        true,
        true,
        &mut out,
    );
    let (h, n) = resp(&out, true).unwrap().unwrap();
    assert_eq!((h.status, h.keep_alive, n), (504, true, out.len()));
    assert_eq!(h.reason, "Gateway Timeout");
}

#[test]
fn find_line_byte_matches_a_bytewise_search() {
    let mut s = vec![b'a'; 40];
    assert_eq!(find_line_byte(&s), None);
    for (pos, b) in [(0, b'\r'), (7, b'\n'), (8, 0u8), (13, b'\r'), (39, b'\n')] {
        let mut t = s.clone();
        t[pos] = b;
        t.insert(3, b'\t');
        assert_eq!(
            find_line_byte(&t),
            Some(if pos >= 3 { pos + 1 } else { pos })
        );
    }
    s[5] = 0x0b;
    assert_eq!(find_line_byte(&s), None);
}

fn arb_request() -> impl Strategy<Value = Vec<u8>> {
    let field = prop::sample::select(vec![
        "Accept: */*\r\n",
        "Connection: close\r\n",
        "Connection: keep-alive\r\n",
        "Content-Length: 3\r\n",
        "Transfer-Encoding: chunked\r\n",
        "User-Agent: curl/8\r\n",
        "Range: bytes=0-10\r\n",
        "X-Empty:\r\n",
        "Cookie: a=b; c=d\r\n",
    ]);
    (
        prop::sample::select(vec!["GET", "HEAD", "POST", "OPTIONS"]),
        "/[a-z0-9/?=&%.]{0,40}",
        prop::sample::select(vec!["HTTP/1.1", "HTTP/1.0"]),
        prop::collection::vec(field, 0..6),
    )
        .prop_map(|(m, t, v, fields)| {
            let mut r = format!("{m} {t} {v}\r\nHost: x.com.coral.test:8090\r\n");
            for f in fields {
                r.push_str(f);
            }
            r.push_str("\r\n");
            r.into_bytes()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_parser_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = req(&bytes);
        let _ = resp(&bytes, false);
        let mut d = ChunkedDecoder::new(&Limits::default());
        let _ = d.feed(&bytes, &mut Vec::new());
    }

    #[test]
    fn prop_find_line_byte_is_a_plain_search(
        bytes in prop::collection::vec(prop::sample::select(vec![b'a', b'\t', 0x0b, 0, b'\r', b'\n', 0xff]), 0..64),
    ) {
        let want = bytes.iter().position(|&b| b == b'\r' || b == b'\n' || b == 0);
        prop_assert_eq!(find_line_byte(&bytes), want);
    }

    #[test]
    fn prop_parser_never_panics_on_mutated_requests(
        base in arb_request(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut bytes = base;
        for (i, b) in edits {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        let _ = req(&bytes);
    }

    #[test]
    fn prop_a_request_split_anywhere_parses_as_whole(
        r in arb_request(),
        cut in any::<prop::sample::Index>(),
    ) {
        let whole = req(&r);
        let cut = cut.index(r.len() + 1);
        match req(&r[..cut]) {
            Ok(None) => prop_assert!(cut < r.len()),
            Err(e) => prop_assert_eq!(Err(e), whole.clone()),
            Ok(Some(h)) => prop_assert_eq!(Ok(Some(h)), whole.clone()),
        }
        // Every request this strategy makes is either parsed or rejected, never pending.
        prop_assert!(!matches!(whole, Ok(None)));
    }

    #[test]
    fn prop_chunked_round_trips_at_any_split(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..8),
        splits in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut wire = Vec::new();
        for c in &chunks {
            write_chunk(&mut wire, c);
        }
        write_last_chunk(&mut wire);
        wire.extend_from_slice(b"GET /next");
        let mut cuts: Vec<usize> = splits.iter().map(|s| s.index(wire.len() + 1)).collect();
        cuts.push(wire.len());
        cuts.sort_unstable();
        let mut d = ChunkedDecoder::new(&Limits::default());
        let mut out = Vec::new();
        let mut at = 0;
        let mut done = false;
        for c in cuts {
            if c <= at {
                continue;
            }
            let (n, fin) = d.feed(&wire[at..c], &mut out).unwrap();
            at += n;
            if fin {
                done = true;
                break;
            }
            prop_assert_eq!(at, c);
        }
        prop_assert!(done);
        prop_assert_eq!(&wire[at..], b"GET /next");
        prop_assert_eq!(out, chunks.concat());
    }
}
