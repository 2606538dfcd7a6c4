//! Criterion benchmarks of the proxy's pure hot path (`coral::proxy`): what a cache hit
//! costs before any byte of the object moves.
//!
//! - `proxy/parse_request_head`: a browser's GET (12 fields, 420 bytes), parsed and held to
//!   our framing rules.
//! - `proxy/hit_path`: the whole pure part of a hit: parse, Host → origin, canonical URL,
//!   SHA-1 key, freshness and conditional checks, and the client head written.
//! - `proxy/chunked_decode_64k`, `proxy/html_rewrite_41k`: bodies (the paper's files were
//!   41 KB).
//!
//! Run: `cargo bench --bench proxy` (3 s of measurement, 30 samples per bench).

use std::hint::black_box;
use std::time::Duration as StdDuration;

use coral::proxy::http::{
    parse_request_head, parse_response_head, write_chunk, write_last_chunk, ChunkedDecoder, Limits,
};
use coral::proxy::names::{cache_key, canonical_url, origin_of_host, Origin, Zones};
use coral::proxy::policy::{
    age_secs, client_head, evaluate_conditional, head_to_store, is_fresh, range, storable,
    CacheStatus, ClientHeadInfo, Conditional, Storable,
};
use coral::proxy::rewrite::HtmlRewriter;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const REQUEST: &[u8] = b"GET /images/flash-crowd.jpg?v=3 HTTP/1.1\r\n\
Host: www.example.com.coral.test:8090\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0\r\n\
Accept: image/avif,image/webp,image/apng,image/*,*/*;q=0.8\r\n\
Accept-Language: en-US,en;q=0.9\r\n\
Accept-Encoding: gzip, deflate, br\r\n\
Referer: http://www.example.com.coral.test:8090/index.html\r\n\
Connection: keep-alive\r\n\
Cache-Control: no-cache\r\n\
Pragma: no-cache\r\n\
Sec-Fetch-Dest: image\r\n\
Sec-Fetch-Mode: no-cors\r\n\
DNT: 1\r\n\r\n";

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
Date: Tue, 14 Nov 2023 22:13:20 GMT\r\n\
Server: nginx/1.22.1\r\n\
Content-Type: image/jpeg\r\n\
Content-Length: 41000\r\n\
Last-Modified: Mon, 13 Nov 2023 10:00:00 GMT\r\n\
ETag: \"6552f4a0-a028\"\r\n\
Cache-Control: max-age=3600\r\n\
Accept-Ranges: bytes\r\n\r\n";

const NOW: u64 = 1_700_000_000;

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let zones = Zones {
        zone: "coralcdn.test".into(),
        alias: Some("coral.test".into()),
    };
    let mut g = c.benchmark_group("proxy");
    g.measurement_time(StdDuration::from_secs(3))
        .sample_size(30);

    g.throughput(Throughput::Elements(1));
    g.bench_function("parse_request_head", |b| {
        b.iter(|| parse_request_head(black_box(REQUEST), &limits))
    });

    let (resp, _) = parse_response_head(RESPONSE, false, &limits)
        .unwrap()
        .unwrap();
    let (req0, _) = parse_request_head(REQUEST, &limits).unwrap().unwrap();
    let Storable::Yes(fresh) = storable(&req0, &resp, NOW) else {
        panic!("not storable")
    };
    let stored = head_to_store(&resp);
    let mut out = Vec::with_capacity(1024);
    g.bench_function("hit_path", |b| {
        b.iter(|| {
            let (req, _) = parse_request_head(black_box(REQUEST), &limits)
                .unwrap()
                .unwrap();
            let origin = origin_of_host(req.host().unwrap(), &zones).unwrap();
            let key = cache_key(&canonical_url(&origin, req.path().unwrap()).unwrap());
            let now = NOW + 5;
            assert!(is_fresh(&fresh, now));
            let not_modified = evaluate_conditional(&req, &stored) == Conditional::NotModified;
            out.clear();
            let info = ClientHeadInfo {
                node_name: "coral",
                age_secs: age_secs(&fresh, now),
                cache_status: CacheStatus::hit(),
                range: range(&req, 41_000),
                body_len: Some(41_000),
                keep_alive: req.keep_alive,
                not_modified,
                client_minor_version: req.minor_version,
            };
            client_head(&stored, &info, &mut out);
            black_box((key, out.len()))
        })
    });

    let body: Vec<u8> = (0..65_536u32).map(|i| (i % 251) as u8).collect();
    let mut wire = Vec::new();
    for piece in body.chunks(8192) {
        write_chunk(&mut wire, piece);
    }
    write_last_chunk(&mut wire);
    g.throughput(Throughput::Bytes(body.len() as u64));
    let mut decoded = Vec::with_capacity(body.len());
    g.bench_function("chunked_decode_64k", |b| {
        b.iter(|| {
            decoded.clear();
            let mut d = ChunkedDecoder::new(&limits);
            d.feed(black_box(&wire), &mut decoded).unwrap()
        })
    });

    let mut html = Vec::new();
    while html.len() < 41_000 {
        html.extend_from_slice(
            b"<p>Some text about <a href=\"http://www.example.com/page.html\">a page</a> and \
              <img src=\"/img/relative.png\"> and http://elsewhere.org/ here.</p>\n",
        );
    }
    let origin = Origin {
        host: "www.example.com".into(),
        port: 80,
    };
    g.throughput(Throughput::Bytes(html.len() as u64));
    let mut rewritten = Vec::with_capacity(html.len() * 2);
    g.bench_function("html_rewrite_41k", |b| {
        b.iter(|| {
            rewritten.clear();
            let mut r = HtmlRewriter::new(&origin, "coral.test", 8090);
            for piece in black_box(&html).chunks(4096) {
                r.feed(piece, &mut rewritten);
            }
            r.finish(&mut rewritten);
            rewritten.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
