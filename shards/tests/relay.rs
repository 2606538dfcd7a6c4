//! What CoralProxy relays, end to end (issue 26 items 1, 5, 6, 8, 9, 11, 13;
//! issue 22 item 6; issue 25 item 4): `coral node` processes on 127.26.x.y,
//! nginx (Debian's) or a small origin of our own that sends the awkward
//! answers (503 with Retry-After, 206, 304 with new fields, reflected
//! request fields), curl as the client.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{coralized, temp_dir, wait_until, Nginx, Node, NodeBuilder, ALIAS, START_WAIT};

/// An origin of our own on `addr`: each connection's request head goes to
/// the handler (with the request's number), which writes the answer; every
/// head is kept for the test to read.
struct Origin {
    heads: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Origin {
    fn start<F>(addr: &str, handler: F) -> Origin
    where
        F: Fn(usize, &str, &mut TcpStream) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind(addr).expect("bind the test origin");
        listener.set_nonblocking(true).unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (heads.clone(), stop.clone());
        let handler = Arc::new(handler);
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let (heads, handler) = (h.clone(), handler.clone());
                        std::thread::spawn(move || {
                            stream.set_nonblocking(false).unwrap();
                            stream
                                .set_read_timeout(Some(Duration::from_secs(10)))
                                .unwrap();
                            let mut buf = Vec::new();
                            let mut b = [0u8; 4096];
                            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                                match stream.read(&mut b) {
                                    Ok(0) | Err(_) => return,
                                    Ok(k) => buf.extend_from_slice(&b[..k]),
                                }
                            }
                            let head = String::from_utf8_lossy(&buf).to_string();
                            let n = {
                                let mut all = heads.lock().unwrap();
                                all.push(head.clone());
                                all.len() - 1
                            };
                            handler(n, &head, &mut stream);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Origin { heads, stop }
    }

    /// The request heads received so far.
    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    /// Requests received for `path`.
    fn requests(&self, path: &str) -> usize {
        let line = format!(" {path} HTTP/1.1");
        self.heads()
            .iter()
            .filter(|h| h.lines().next().is_some_and(|l| l.contains(&line)))
            .count()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Writes an answer with `status`, the fields `fields` (each line ending
/// in CRLF) and `body`, then closes.
fn answer(s: &mut TcpStream, status: &str, fields: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status}\r\n{fields}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body);
}

/// A one-core proxy node on `ip`, its cache in `dir`, whose origin
/// `www.origin.test` is `origin_ip`.
fn proxy_node(dir: &Path, ip: &str, origin_ip: &str) -> NodeBuilder {
    Node::on(ip)
        .proxy(&dir.join(format!("cache-{ip}")))
        .origin(origin_ip)
}

#[test]
fn issue_26_1_an_origins_503_is_relayed_with_its_retry_after_and_its_page() {
    let dir = temp_dir("relay-503");
    let page = b"<h1>Down for maintenance</h1>".to_vec();
    let p = page.clone();
    let origin = Origin::start("127.26.1.100:8080", move |_, head, s| {
        if head.starts_with("GET /fresh ") {
            answer(
                s,
                "503 Service Unavailable",
                "Cache-Control: max-age=30\r\nContent-Type: text/plain\r\n",
                b"busy, cached briefly",
            );
        } else {
            answer(
                s,
                "503 Service Unavailable",
                "Retry-After: 120\r\nX-Maintenance: until noon\r\nContent-Type: text/html\r\n",
                &p,
            );
        }
    });
    let node = proxy_node(dir.path(), "127.26.1.1", "127.26.1.100").start();
    let url = coralized("www.origin.test", 8080, "/down");
    for _ in 0..2 {
        let a = node.curl(&url, &[]);
        assert!(a.curl_ok, "{}", a.curl_err);
        assert_eq!(a.status, 503, "{a:?}");
        assert_eq!(a.header("retry-after"), "120", "{a:?}");
        assert_eq!(a.header("x-maintenance"), "until noon", "{a:?}");
        assert_eq!(a.header("content-type"), "text/html");
        assert_eq!(a.body, page, "the origin's page, not coral's");
    }
    assert_eq!(
        origin.requests("/down"),
        2,
        "a 5xx without freshness is never cached heuristically"
    );
    // An explicitly fresh 5xx is cached by the ordinary rules.
    let url = coralized("www.origin.test", 8080, "/fresh");
    for _ in 0..2 {
        let a = node.curl(&url, &[]);
        assert_eq!(a.status, 503, "{a:?}");
        assert_eq!(a.body, b"busy, cached briefly");
    }
    assert_eq!(origin.requests("/fresh"), 1, "stored as the origin said");
}

#[test]
fn issue_25_4_coral_own_failures_say_what_failed_and_a_refusal_is_no_origin_fetch() {
    let dir = temp_dir("relay-own");
    // Nothing listens on the origin's address: the connection is refused.
    let node = proxy_node(dir.path(), "127.26.2.1", "127.26.2.100").start();
    let a = node.curl(&coralized("www.origin.test", 8080, "/x"), &[]);
    assert_eq!(a.status, 502, "{a:?}");
    let body = String::from_utf8_lossy(&a.body);
    assert!(body.contains("the origin refused the connection"), "{body}");
    assert_eq!(a.header("cache-control"), "no-store");
    // A loopback origin on a node without --allow-private-origins.
    let strict = Node::on("127.26.2.2")
        .proxy(&dir.path().join("cache-strict"))
        .args(&["--resolve", "www.origin.test=127.0.0.1"])
        .start();
    for _ in 0..3 {
        let a = strict.curl(&coralized("www.origin.test", 8080, "/y"), &[]);
        assert_eq!(a.status, 403, "{a:?}");
        let body = String::from_utf8_lossy(&a.body);
        assert!(body.contains("loopback"), "{body}");
        assert!(body.contains("--allow-private-origins"), "{body}");
    }
    // Refusals are not origin fetches (the status page's "origin
    // protection" divides by this counter).
    assert_eq!(
        strict.metric("coral_http_origin_fetches_total{mode=\"fill\"}"),
        0.0
    );
    let status = strict.status_json();
    assert_eq!(status["proxy"]["origin_fetches"], 0, "{status}");
    // A method coral refuses by design says so.
    let a = strict.curl(
        &coralized("www.origin.test", 8080, "/form"),
        &["-X", "POST", "-d", "x=1"],
    );
    assert_eq!(a.status, 405);
    let body = String::from_utf8_lossy(&a.body);
    assert!(
        body.contains("by design") && body.contains("GET and HEAD"),
        "{body}"
    );
}

/// The request field `name` (lower case) in a request head, or "".
fn field<'a>(head: &'a str, name: &str) -> &'a str {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map_or("", |(_, v)| v.trim())
}

#[test]
fn issue_22_6_reflected_client_fields_never_change_what_a_clean_client_receives() {
    let dir = temp_dir("relay-keyed");
    const REFLECTED: [&str; 9] = [
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-for",
        "x-host",
        "x-original-url",
        "x-rewrite-url",
        "forwarded",
        "user-agent",
        "accept-language",
    ];
    let origin = Origin::start("127.26.3.100:8080", |_, head, s| {
        // Reflects every field a careless origin might put in its page.
        let mut body = String::new();
        for f in REFLECTED {
            body.push_str(&format!("{f}={}\n", field(head, f)));
        }
        let vary = if head.starts_with("GET /lang ") {
            "Vary: Accept-Language\r\n"
        } else {
            ""
        };
        answer(
            s,
            "200 OK",
            &format!("Cache-Control: max-age=600\r\nContent-Type: text/plain\r\n{vary}"),
            body.as_bytes(),
        );
    });
    let node = proxy_node(dir.path(), "127.26.3.1", "127.26.3.100").start();
    let hostile: Vec<String> = [
        "X-Forwarded-Host: evil.example",
        "X-Forwarded-Proto: gopher",
        "X-Forwarded-For: 6.6.6.6",
        "X-Host: evil.example",
        "X-Original-URL: /evil",
        "X-Rewrite-URL: /evil",
        "Forwarded: host=evil.example",
        "User-Agent: evil-agent",
        "Accept-Language: evil",
    ]
    .iter()
    .flat_map(|h| ["-H".to_string(), h.to_string()])
    .collect();
    let hostile: Vec<&str> = hostile.iter().map(String::as_str).collect();
    let url = coralized("www.origin.test", 8080, "/page");
    let first = node.curl(&url, &hostile);
    assert_eq!(first.status, 200, "{first:?}");
    let clean = node.curl(&url, &[]);
    assert_eq!(clean.status, 200);
    assert_eq!(clean.body, first.body);
    let text = String::from_utf8_lossy(&clean.body);
    assert!(
        !text.contains("evil") && !text.contains("6.6.6.6") && !text.contains("gopher"),
        "{text}"
    );
    assert!(
        text.contains("user-agent=CoralWebPrx"),
        "coral's own user agent: {text}"
    );
    // Nothing hostile reached the origin at all.
    for h in origin.heads() {
        for f in &REFLECTED[..7] {
            assert_eq!(field(&h, f), "", "{f} reached the origin: {h}");
        }
        assert!(!h.contains("evil"), "{h}");
        assert!(field(&h, "via").contains("coral"), "{h}");
    }
    // A field the response varies on reaches the origin once its Vary is
    // known (learned from the host's first answer, which was the client's
    // alone and not stored), and only then: each language its own stored
    // variant.
    let lang = coralized("www.origin.test", 8080, "/lang");
    let first = node.curl(&lang, &["-H", "Accept-Language: fr"]);
    assert!(
        String::from_utf8_lossy(&first.body).contains("accept-language=\n"),
        "{first:?}"
    );
    assert!(
        !first.header("cache-status").contains("stored"),
        "{first:?}"
    );
    let fr = node.curl(&lang, &["-H", "Accept-Language: fr"]);
    assert!(
        String::from_utf8_lossy(&fr.body).contains("accept-language=fr\n"),
        "{fr:?}"
    );
    let de = node.curl(&lang, &["-H", "Accept-Language: de"]);
    assert!(
        String::from_utf8_lossy(&de.body).contains("accept-language=de\n"),
        "{de:?}"
    );
    let fr_again = node.curl(&lang, &["-H", "Accept-Language: fr"]);
    assert_eq!(fr_again.body, fr.body);
    assert!(
        fr_again.header("cache-status").contains("hit"),
        "{fr_again:?}"
    );
    let none = node.curl(&lang, &[]);
    assert!(
        String::from_utf8_lossy(&none.body).contains("accept-language=\n"),
        "{none:?}"
    );
}

#[test]
fn issue_26_5_a_304_updates_the_stored_head_rfc9111_4_3_4() {
    let dir = temp_dir("relay-304");
    let origin = Origin::start("127.26.5.100:8080", |_, head, s| {
        if field(head, "if-none-match") == "\"v1\"" {
            let _ = s.write_all(
                b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=600\r\n\
                  X-Revision: 2\r\nConnection: close\r\n\r\n",
            );
        } else {
            answer(
                s,
                "200 OK",
                "ETag: \"v1\"\r\nCache-Control: max-age=1\r\nX-Revision: 1\r\nContent-Type: text/plain\r\n",
                b"the body stands",
            );
        }
    });
    let node = proxy_node(dir.path(), "127.26.5.1", "127.26.5.100").start();
    let url = coralized("www.origin.test", 8080, "/doc");
    let first = node.curl(&url, &[]);
    assert_eq!(first.header("x-revision"), "1", "{first:?}");
    // Let the copy go stale (max-age=1), then it is revalidated.
    std::thread::sleep(Duration::from_millis(2100));
    let second = node.curl(&url, &[]);
    assert_eq!(second.body, b"the body stands");
    assert_eq!(origin.requests("/doc"), 2, "revalidated once");
    for a in [second, node.curl(&url, &[])] {
        assert_eq!(a.status, 200);
        assert_eq!(a.body, b"the body stands");
        assert_eq!(a.header("x-revision"), "2", "the 304's fields: {a:?}");
        assert_eq!(a.header("cache-control"), "max-age=600", "{a:?}");
    }
    assert_eq!(origin.requests("/doc"), 2, "fresh again: a hit");
}

#[test]
fn issue_26_6_a_206_keeps_its_content_range_and_unknown_fields_pass() {
    let dir = temp_dir("relay-206");
    let _origin = Origin::start("127.26.6.100:8080", |_, _, s| {
        answer(
            s,
            "206 Partial Content",
            "Content-Range: bytes 0-4/10\r\nX-Unknown-Field: kept\r\nCache-Control: max-age=60\r\n",
            b"01234",
        );
    });
    let node = proxy_node(dir.path(), "127.26.6.1", "127.26.6.100").start();
    let a = node.curl(&coralized("www.origin.test", 8080, "/part"), &[]);
    assert_eq!(a.status, 206, "{a:?}");
    assert_eq!(a.header("content-range"), "bytes 0-4/10", "{a:?}");
    assert_eq!(a.header("x-unknown-field"), "kept", "{a:?}");
    assert_eq!(a.body, b"01234");
}

#[test]
fn rfc5861_4_stale_if_error_bounds_serving_stale_on_the_origins_errors() {
    let dir = temp_dir("relay-sie");
    let down = Arc::new(AtomicBool::new(false));
    let d = down.clone();
    let _origin = Origin::start("127.26.7.100:8080", move |_, _, s| {
        if d.load(Ordering::SeqCst) {
            answer(s, "503 Service Unavailable", "Retry-After: 5\r\n", b"down");
        } else {
            answer(
                s,
                "200 OK",
                "Cache-Control: max-age=1, stale-if-error=6\r\n",
                b"good copy",
            );
        }
    });
    let node = proxy_node(dir.path(), "127.26.7.1", "127.26.7.100").start();
    let url = coralized("www.origin.test", 8080, "/obj");
    let stored = Instant::now();
    assert_eq!(node.curl(&url, &[]).body, b"good copy");
    down.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1500));
    let a = node.curl(&url, &[]);
    if stored.elapsed() < Duration::from_secs(6) {
        assert_eq!(a.status, 200, "within stale-if-error: {a:?}");
        assert_eq!(a.body, b"good copy");
        assert!(a.header("cache-status").contains("fwd=stale"), "{a:?}");
    }
    // Past the window (1 s fresh + 6 s): the origin's error, relayed.
    let past = Duration::from_secs(8);
    std::thread::sleep(past.saturating_sub(stored.elapsed()));
    let a = node.curl(&url, &[]);
    assert_eq!(a.status, 503, "{a:?}");
    assert_eq!(a.body, b"down");
    assert_eq!(a.header("retry-after"), "5");
}

/// `count` curl clients for `url` at once, spread over `nodes`: each line
/// of their output is "status size".
fn crowd(nodes: &[Node], url: &str, count: usize) -> Vec<String> {
    let mut curls = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let per = count / nodes.len() + usize::from(i < count % nodes.len());
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "60", "-Z", "--parallel-max", "100"])
            .args([
                "--resolve",
                &format!("www.origin.test.8080.{ALIAS}:8090:{}", n.ip),
            ])
            .args(["-w", "%{http_code} %{size_download}\\n"]);
        for _ in 0..per {
            cmd.args([url, "-o", "/dev/null"]);
        }
        curls.push(cmd.stdout(Stdio::piped()).spawn().unwrap());
    }
    let mut lines = Vec::new();
    for c in curls {
        let out = c.wait_with_output().unwrap();
        lines.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(String::from),
        );
    }
    lines
}

#[test]
fn rfc5861_3_stale_while_revalidate_serves_200_clients_on_three_nodes_and_revalidates_once() {
    let dir = temp_dir("relay-swr");
    let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let root = common::web_root(dir.path(), &[("swr.bin", &body)]);
    // Fresh for 3 s with a long stale-while-revalidate window; the
    // revalidation (a conditional request, answered 304) makes it fresh
    // for an hour, so any later origin request would be a second one.
    let nginx = Nginx::start_with(
        dir.path(),
        "127.26.4.100:8080".parse().unwrap(),
        &root,
        "location = /swr.bin { expires off; set $cc \"max-age=3, stale-while-revalidate=600\"; \
         if ($http_if_none_match) { set $cc \"max-age=3600\"; } add_header Cache-Control $cc; }",
    );
    let first = "127.26.4.1";
    let mut nodes = vec![proxy_node(dir.path(), first, "127.26.4.100").start()];
    for i in 2..=3 {
        let ip = format!("127.26.4.{i}");
        nodes.push(
            proxy_node(dir.path(), &ip, "127.26.4.100")
                .bootstrap(first)
                .start(),
        );
    }
    for n in &nodes {
        n.wait_joined(2);
    }
    let url = coralized("www.origin.test", 8080, "/swr.bin");
    for n in &nodes {
        let a = n.curl(&url, &[]);
        assert_eq!(a.body, body, "{}", n.ip);
    }
    assert_eq!(
        nginx.requests("/swr.bin"),
        1,
        "one fill, peers for the rest"
    );
    // Every copy goes stale.
    std::thread::sleep(Duration::from_millis(3500));
    for line in crowd(&nodes, &url, 200) {
        assert_eq!(line, format!("200 {}", body.len()), "a client got {line}");
    }
    // The revalidation happens in the background, once network-wide: the
    // other nodes take the refreshed copy from the node that revalidated.
    wait_until(START_WAIT, Duration::from_millis(100), || {
        let all_fresh = nodes.iter().all(|n| {
            let a = n.curl(&url, &[]);
            a.header("cache-control") == "max-age=3600" && a.header("cache-status").contains("hit")
        });
        all_fresh
            .then_some(())
            .ok_or_else(|| "not every node has the revalidated copy".to_string())
    });
    let log = nginx.log();
    assert_eq!(
        nginx.requests("/swr.bin"),
        2,
        "exactly one revalidation at the origin:\n{log}"
    );
    assert!(log.lines().last().unwrap_or("").ends_with(" 304"), "{log}");
}

#[test]
fn stale_while_revalidate_answers_at_once_with_the_stale_copy() {
    let dir = temp_dir("relay-swr-one");
    let slow = Arc::new(AtomicUsize::new(0));
    let s2 = slow.clone();
    let _origin = Origin::start("127.26.8.100:8080", move |n, _, s| {
        if n > 0 {
            // The revalidation is slow: no client may wait for it.
            s2.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(3));
        }
        // Revalidated, it stays fresh for the rest of the test.
        let max_age = if n == 0 { 1 } else { 600 };
        answer(
            s,
            "200 OK",
            &format!(
                "Cache-Control: max-age={max_age}, stale-while-revalidate=60\r\nX-Version: {n}\r\n"
            ),
            b"copy",
        );
    });
    let node = proxy_node(dir.path(), "127.26.8.1", "127.26.8.100").start();
    let url = coralized("www.origin.test", 8080, "/o");
    assert_eq!(node.curl(&url, &[]).header("x-version"), "0");
    std::thread::sleep(Duration::from_millis(1500));
    let a = node.curl(&url, &[]);
    assert_eq!(a.header("x-version"), "0", "the stale copy: {a:?}");
    assert!(a.header("cache-status").contains("fwd=stale"), "{a:?}");
    assert!(
        a.header("cache-status").contains("stale-while-revalidate"),
        "{a:?}"
    );
    wait_until(START_WAIT, Duration::from_millis(100), || {
        (node.curl(&url, &[]).header("x-version") == "1")
            .then_some(())
            .ok_or_else(|| "not revalidated".to_string())
    });
    assert_eq!(slow.load(Ordering::SeqCst), 1, "revalidated once");
}

/// Every head curl saw for `url` through `node` (interim ones included).
fn all_heads(node: &Node, url: &str, args: &[&str]) -> String {
    let host = url.trim_start_matches("http://").split(':').next().unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-D", "-", "-o", "/dev/null"])
        .args(["--resolve", &format!("{host}:8090:{}", node.ip)])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn issue_26_9_early_hints_are_forwarded_and_never_cached() {
    let dir = temp_dir("relay-103");
    let _origin = Origin::start("127.26.9.100:8080", |_, head, s| {
        let _ = s.write_all(
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n",
        );
        let cc = if head.contains("Authorization") {
            "Cache-Control: private\r\n"
        } else {
            "Cache-Control: max-age=600\r\n"
        };
        answer(s, "200 OK", cc, b"page");
    });
    let node = proxy_node(dir.path(), "127.26.9.1", "127.26.9.100").start();
    // Filled into the cache: the hint reaches the client that waited.
    let url = coralized("www.origin.test", 8080, "/page");
    let heads = all_heads(&node, &url, &[]);
    assert!(heads.starts_with("HTTP/1.1 103 Early Hints"), "{heads}");
    assert!(
        heads
            .to_ascii_lowercase()
            .contains("link: </style.css>; rel=preload; as=style"),
        "{heads}"
    );
    assert!(heads.contains("HTTP/1.1 200 OK"), "{heads}");
    // From the cache: no hint (never stored).
    let heads = all_heads(&node, &url, &[]);
    assert!(heads.starts_with("HTTP/1.1 200 OK"), "{heads}");
    assert!(!heads.contains("103"), "{heads}");
    // Passed for one client (Authorization): forwarded too.
    let heads = all_heads(&node, &url, &["-H", "Authorization: Basic eDp5"]);
    assert!(heads.starts_with("HTTP/1.1 103 Early Hints"), "{heads}");
    // An HTTP/1.0 client gets no 1xx (RFC 9110 §15.2).
    let heads = all_heads(
        &node,
        &coralized("www.origin.test", 8080, "/other"),
        &["--http1.0"],
    );
    assert!(!heads.contains("103"), "{heads}");
}

#[test]
fn issue_26_11_head_on_a_miss_is_one_get_that_fills_the_cache() {
    let dir = temp_dir("relay-head");
    let body: Vec<u8> = vec![b'h'; 50_000];
    let b = body.clone();
    let origin = Origin::start("127.26.10.100:8080", move |_, head, s| {
        let is_head = head.starts_with("HEAD ");
        let h = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            b.len()
        );
        let _ = s.write_all(h.as_bytes());
        if !is_head {
            let _ = s.write_all(&b);
        }
    });
    let node = proxy_node(dir.path(), "127.26.10.1", "127.26.10.100").start();
    let url = coralized("www.origin.test", 8080, "/big");
    let head = node.curl(&url, &["-I"]);
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.header("content-length"), "50000");
    let get = node.curl(&url, &[]);
    assert_eq!(get.body, body);
    assert!(get.header("cache-status").contains("hit"), "{get:?}");
    let heads = origin.heads();
    assert_eq!(heads.len(), 1, "one origin request: {heads:?}");
    assert!(heads[0].starts_with("GET /big "), "{heads:?}");
}

#[test]
fn rfc9112_6_1_transfer_codings_coral_does_not_know_are_relayed_not_refused() {
    let dir = temp_dir("relay-te");
    let _origin = Origin::start("127.26.11.100:8080", |_, _, s| {
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: x-odd, chunked\r\nCache-Control: max-age=60\r\n\
              Connection: close\r\n\r\n5\r\nodd!!\r\n0\r\n\r\n",
        );
    });
    let node = proxy_node(dir.path(), "127.26.11.1", "127.26.11.100").start();
    let host = format!("www.origin.test.8080.{ALIAS}");
    let get = |version: &str, fields: &str| {
        let mut s = TcpStream::connect(node.http()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(
            format!("GET /te HTTP/{version}\r\nHost: {host}\r\n{fields}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).to_string()
    };
    // Relayed with its codings, and stored by the ordinary rules (issue 26
    // item 6): the second answer is a hit, the codings written again. A
    // range of it is the whole body (coral cannot cut inside a coding).
    for (i, fields) in ["", "", "Range: bytes=0-1\r\n"].into_iter().enumerate() {
        let text = get("1.1", fields);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(
            text.contains("Transfer-Encoding: x-odd, chunked\r\n"),
            "{text}"
        );
        assert!(!text.contains("Content-Length"), "{text}");
        assert!(text.ends_with("5\r\nodd!!\r\n0\r\n\r\n"), "{text}");
        if i > 0 {
            assert!(text.contains("Cache-Status: coral; hit"), "{text}");
        }
    }
    // An HTTP/1.0 client cannot receive a transfer coding: refused.
    let text = get("1.0", "");
    assert!(text.starts_with("HTTP/1.1 502"), "{text}");
    assert!(text.contains("HTTP/1.0 client"), "{text}");
}

#[test]
fn rfc9111_4_3_5_a_head_response_updates_the_stored_headers() {
    let dir = temp_dir("relay-head-update");
    let _origin = Origin::start("127.26.12.100:8080", |_, head, s| {
        if head.starts_with("HEAD ") {
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nETag: \"same\"\r\nCache-Control: max-age=600\r\n\
                  X-Revision: 2\r\nContent-Length: 4\r\nConnection: close\r\n\r\n",
            );
        } else {
            answer(
                s,
                "200 OK",
                "ETag: \"same\"\r\nCache-Control: max-age=1\r\nX-Revision: 1\r\n",
                b"body",
            );
        }
    });
    let node = proxy_node(dir.path(), "127.26.12.1", "127.26.12.100").start();
    let url = coralized("www.origin.test", 8080, "/h");
    assert_eq!(node.curl(&url, &[]).header("x-revision"), "1");
    // A HEAD that passes the cache (no-store) reaches the origin as a HEAD;
    // its answer describes the stored representation and updates it.
    let head = node.curl(&url, &["-I", "-H", "Cache-Control: no-store"]);
    assert_eq!(head.header("x-revision"), "2", "{head:?}");
    std::thread::sleep(Duration::from_millis(1500));
    wait_until(START_WAIT, Duration::from_millis(100), || {
        let a = node.curl(&url, &[]);
        (a.header("x-revision") == "2" && a.header("cache-status").contains("hit"))
            .then_some(())
            .ok_or_else(|| format!("not updated: {a:?}"))
    });
    assert_eq!(node.curl(&url, &[]).body, b"body");
}
