//! CoralProxy end to end (NSDI 2004 §2.2, §3.2): `coral node` processes on
//! 127.11.x.y, nginx (Debian's) as the origin for the normal paths, a small
//! origin of our own for faults, curl as the client.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    coralized, curl, temp_dir, wait_until, write_file, Nginx, Node, NodeBuilder, ALIAS, START_WAIT,
};

/// Deterministic bytes for test objects.
fn object(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}

/// A web root with some objects.
fn objects_root(dir: &Path) -> PathBuf {
    common::web_root(
        dir,
        &[
            ("a.bin", &object(41_000, 1)),
            ("b.bin", &object(4096, 2)),
            ("c.bin", &object(300_000, 3)),
        ],
    )
}

/// An origin of our own for faults: one request per connection, answered by
/// `handler(request head, stream)`; counts connections.
struct FaultOrigin {
    connections: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl FaultOrigin {
    fn start<F>(addr: &str, handler: F) -> FaultOrigin
    where
        F: Fn(usize, &str, &mut TcpStream) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind(addr).expect("bind fault origin");
        listener.set_nonblocking(true).unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (c, s) = (connections.clone(), stop.clone());
        let handler = Arc::new(handler);
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let n = c.fetch_add(1, Ordering::SeqCst);
                        let h = handler.clone();
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
                            h(n, &head, &mut stream);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FaultOrigin { connections, stop }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for FaultOrigin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Sends raw bytes to the node and reads until it closes (or 10 s pass).
fn raw(node: &Node, bytes: &[u8]) -> (String, bool) {
    let (out, closed) = raw_to(node.http(), bytes);
    (String::from_utf8_lossy(&out).to_string(), closed)
}

/// Sends raw bytes to `addr` and reads until it closes (or 10 s pass).
fn raw_to(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    let closed = loop {
        match s.read(&mut b) {
            Ok(0) => break true,
            Ok(k) => out.extend_from_slice(&b[..k]),
            Err(_) => break false,
        }
    };
    (out, closed)
}

#[test]
fn section_2_2_first_request_from_the_origin_second_from_the_cache() {
    let dir = temp_dir("first");
    let root = objects_root(dir.path());
    let nginx = Nginx::start(dir.path(), "127.11.1.100:8080".parse().unwrap(), &root);
    let node = proxy_node(dir.path(), "127.11.1.1", "127.11.1.100").start();
    let url = coralized("www.origin.test", 8080, "/a.bin");
    let first = node.curl(&url, &[]);
    assert!(first.curl_ok, "{}", first.curl_err);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body, object(41_000, 1));
    assert!(
        first.header("cache-status").contains("fwd=uri-miss"),
        "{first:?}"
    );
    let second = node.curl(&url, &[]);
    assert_eq!(second.status, 200);
    assert_eq!(second.body, object(41_000, 1));
    assert!(second.header("cache-status").contains("hit"), "{second:?}");
    assert_eq!(nginx.requests("/a.bin"), 1);
    // HEAD from the cache: the head alone, with the length.
    let head = node.curl(&url, &["-I"]);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), "41000");
    // (curl -I writes the head where the body would go.)
    assert!(head.body.starts_with(b"HTTP/1.1 200"), "{head:?}");
    assert!(head.body.len() < 2000, "no body after a HEAD");
    // A Range from the full cached object.
    let part = node.curl(&url, &["-r", "100-199"]);
    assert_eq!(part.status, 206);
    assert_eq!(part.body, object(41_000, 1)[100..200].to_vec());
    assert_eq!(nginx.requests("/a.bin"), 1, "served from the cache");
    assert_eq!(nginx.addr.port(), 8080);
}

/// A one-core proxy node on `ip`, its cache in `dir`, whose origin
/// `www.origin.test` is `origin_ip`.
fn proxy_node(dir: &Path, ip: &str, origin_ip: &str) -> NodeBuilder {
    Node::on(ip)
        .proxy(&dir.join(format!("cache-{ip}")))
        .origin(origin_ip)
}

/// Three nodes on 127.11.`net`.1-3, the first the others' bootstrap, all
/// resolving `www.origin.test` to `origin_ip`.
fn three_nodes(dir: &Path, net: u8, origin_ip: &str, extra: &[&str]) -> Vec<Node> {
    let first = format!("127.11.{net}.1");
    let mut nodes = vec![proxy_node(dir, &first, origin_ip).args(extra).start()];
    for i in 2..=3 {
        let ip = format!("127.11.{net}.{i}");
        let node = proxy_node(dir, &ip, origin_ip).bootstrap(&first);
        nodes.push(node.args(extra).start());
    }
    // Wait until every node knows the others (the DSHT routes through them).
    for n in &nodes {
        n.wait_joined(2);
    }
    nodes
}

#[test]
fn section_3_2_another_node_gets_the_object_from_a_peer_not_the_origin() {
    let dir = temp_dir("peer");
    let root = objects_root(dir.path());
    let nginx = Nginx::start(dir.path(), "127.11.2.100:8080".parse().unwrap(), &root);
    let nodes = three_nodes(dir.path(), 2, "127.11.2.100", &[]);
    let url = coralized("www.origin.test", 8080, "/c.bin");
    let a = nodes[0].curl(&url, &[]);
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body, object(300_000, 3));
    for n in &nodes[1..] {
        let b = n.curl(&url, &[]);
        assert_eq!(b.status, 200, "{b:?}");
        assert_eq!(b.body, object(300_000, 3));
        // The peer's level as Fig. 4 counts it (`peer-l2`, `-l1`, `-l0`).
        assert!(b.header("cache-status").contains("detail=peer-l"), "{b:?}");
    }
    assert_eq!(
        nginx.requests("/c.bin"),
        1,
        "one origin fetch for three nodes"
    );
    // Each node serves its own copy now.
    let again = nodes[2].curl(&url, &[]);
    assert!(again.header("cache-status").contains("hit"), "{again:?}");
}

/// Whether nginx itself answers `path` gzipped, with `Vary: Accept-Encoding`,
/// to a client that accepts gzip (so that the test below means something).
fn nginx_gzips(nginx: &Nginx, path: &str) -> bool {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-D", "-", "-o", "/dev/null"])
        .args(["-H", "Accept-Encoding: gzip"])
        .arg(format!("http://{}{path}", nginx.addr))
        .output()
        .expect("curl");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    head.contains("content-encoding: gzip") && head.contains("vary: accept-encoding")
}

#[test]
fn rfc9111_4_1_vary_variants_are_stored_served_by_peers_and_bounded() {
    let dir = temp_dir("vary");
    let root = objects_root(dir.path());
    let text = "Coralized plain text. ".repeat(100);
    std::fs::write(root.join("t.txt"), &text).unwrap();
    std::fs::write(root.join("probe.txt"), &text).unwrap();
    // gzip on (with `Vary: Accept-Encoding`), and a resource that varies on
    // Accept-Language and echoes it, so each variant's body tells which it is.
    let nginx = Nginx::start_with(
        dir.path(),
        "127.11.16.100:8080".parse().unwrap(),
        &root,
        "gzip on; gzip_vary on; gzip_min_length 1; gzip_types text/plain;\n\
         location = /lang { add_header Vary Accept-Language; default_type text/plain;\n\
         return 200 \"lang=$http_accept_language\\n\"; }",
    );
    assert!(nginx_gzips(&nginx, "/probe.txt"), "nginx does not gzip");
    let conf = write_file(dir.path(), "coral.toml", "[proxy]\nvary_variants_max = 2\n");
    let nodes = three_nodes(
        dir.path(),
        16,
        "127.11.16.100",
        &["--config", conf.to_str().unwrap()],
    );

    // Vary: Accept-Encoding. The origin is asked for the identity coding (a
    // gzipped copy would reach clients that cannot decode it, and HTML could
    // not be rewritten), so one stored copy serves clients with and without
    // Accept-Encoding.
    let url = coralized("www.origin.test", 8080, "/t.txt");
    let gz = nodes[0].curl(&url, &["-H", "Accept-Encoding: gzip, br"]);
    assert_eq!(gz.status, 200, "{gz:?}");
    assert_eq!(gz.header("content-encoding"), "", "{gz:?}");
    assert_eq!(gz.body, text.as_bytes());
    assert!(gz.header("vary").contains("Accept-Encoding"), "{gz:?}");
    for args in [
        &[][..],
        &["--compressed"][..],
        &["-H", "Accept-Encoding: identity"][..],
    ] {
        let a = nodes[0].curl(&url, args);
        assert_eq!(a.body, text.as_bytes(), "{args:?}");
        assert!(a.header("cache-status").contains("hit"), "{args:?}: {a:?}");
    }
    assert_eq!(nginx.requests("/t.txt"), 1);

    // Vary: Accept-Language: one stored variant per language.
    let lang = coralized("www.origin.test", 8080, "/lang");
    let ask = |node: &Node, l: &str| {
        let h = format!("Accept-Language: {l}");
        let a = node.curl(&lang, &["-H", &h]);
        assert_eq!(a.status, 200, "{l}: {a:?}");
        assert_eq!(
            String::from_utf8_lossy(&a.body),
            format!("lang={l}\n"),
            "the variant for {l}: {a:?}"
        );
        a.header("cache-status").to_string()
    };
    // The first request for a URL of the host goes without Accept-Language
    // (its Vary unknown, issue 22 item 6); the answer varies on it: it is
    // that client's (the origin's answer without the field), not stored,
    // and the host's Vary field is learned. The next request is sent with
    // it and stored. Every later fetch knows the Vary from the stored copy.
    let first = nodes[0].curl(&lang, &["-H", "Accept-Language: en"]);
    assert_eq!(String::from_utf8_lossy(&first.body), "lang=\n", "{first:?}");
    let cs = first.header("cache-status");
    assert!(
        cs.contains("fwd=uri-miss") && !cs.contains("stored"),
        "{cs}"
    );
    let en = ask(&nodes[0], "en");
    assert!(en.contains("fwd=uri-miss") && en.contains("stored"), "{en}");
    let fr = ask(&nodes[0], "fr");
    assert!(fr.contains("fwd=uri-miss") && fr.contains("stored"), "{fr}");
    assert_eq!(nginx.requests("/lang"), 3);
    for l in ["en", "fr", "en", "fr"] {
        let cs = ask(&nodes[0], l);
        assert!(cs.contains("hit"), "{l} from the cache: {cs}");
    }
    assert_eq!(nginx.requests("/lang"), 3, "both variants from the cache");
    // Another node gets each variant from the peer that has it (asked with
    // the client's Accept-Language), not from the origin.
    for l in ["en", "fr"] {
        let cs = ask(&nodes[1], l);
        assert!(cs.contains("detail=peer-l"), "{l} from a peer: {cs}");
    }
    assert_eq!(nginx.requests("/lang"), 3, "no origin request for node 2");
    for l in ["en", "fr"] {
        assert!(ask(&nodes[1], l).contains("hit"), "{l} kept on node 2");
    }
    // The other order: the variant node 1 keeps under the URL's own key
    // ("en", its first) is found by its variant key too.
    for l in ["fr", "en"] {
        let cs = ask(&nodes[2], l);
        assert!(
            cs.contains("detail=peer-l"),
            "{l} from a peer on node 3: {cs}"
        );
    }
    assert_eq!(nginx.requests("/lang"), 3, "no origin request for node 3");
    // vary_variants_max = 2 beside the first: a third variant is stored,
    // a fourth passes through to the origin every time.
    assert!(ask(&nodes[0], "de").contains("stored"));
    assert!(ask(&nodes[0], "de").contains("hit"));
    assert_eq!(nginx.requests("/lang"), 4);
    for _ in 0..2 {
        let cs = ask(&nodes[0], "it");
        assert!(
            cs.contains("fwd=vary-miss") && !cs.contains("stored"),
            "{cs}"
        );
    }
    assert_eq!(nginx.requests("/lang"), 6, "over the bound: not stored");
    for l in ["en", "fr", "de"] {
        assert!(ask(&nodes[0], l).contains("hit"), "{l} still cached");
    }
}

#[test]
fn section_3_2_flash_crowd_of_200_clients_on_three_nodes_makes_one_origin_request() {
    let dir = temp_dir("crowd");
    let body = object(200_000, 7);
    let root = common::web_root(dir.path(), &[("crowd.bin", &body)]);
    // nginx sends it at 200 kB/s, about a second, so the crowd arrives
    // while the one fetch is under way.
    let nginx = Nginx::start_with(
        dir.path(),
        "127.11.3.100:8080".parse().unwrap(),
        &root,
        "location = /crowd.bin { limit_rate 200k; }",
    );
    let nodes = three_nodes(dir.path(), 3, "127.11.3.100", &[]);
    let url = coralized("www.origin.test", 8080, "/crowd.bin");
    let mut curls = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let per = if i == 0 { 66 } else { 67 };
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "60", "-Z", "--parallel-max", "100"])
            .args([
                "--resolve",
                &format!("www.origin.test.8080.{ALIAS}:8090:{}", n.ip),
            ])
            .args(["-w", "%{http_code} %{size_download}\\n"]);
        for _ in 0..per {
            cmd.args([&url, "-o", "/dev/null"]);
        }
        curls.push(cmd.stdout(Stdio::piped()).spawn().unwrap());
    }
    let mut ok = 0;
    for c in curls {
        let out = c.wait_with_output().unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            assert_eq!(line, format!("200 {}", body.len()), "a client got {line}");
            ok += 1;
        }
    }
    assert_eq!(ok, 200);
    assert_eq!(
        nginx.requests("/crowd.bin"),
        1,
        "exactly one origin request"
    );
    for n in &nodes {
        let a = n.curl(&url, &[]);
        assert_eq!(a.body, body, "{}", n.ip);
        assert!(a.header("cache-status").contains("hit"), "{a:?}");
    }
}

#[test]
fn post_gets_405_with_allow_and_reaches_no_origin() {
    let dir = temp_dir("post");
    let origin = FaultOrigin::start("127.11.4.100:8080", |_, _, s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    });
    let node = proxy_node(dir.path(), "127.11.4.1", "127.11.4.100").start();
    let url = coralized("www.origin.test", 8080, "/form");
    let a = node.curl(&url, &["-X", "POST", "-d", "x=1"]);
    assert_eq!(a.status, 405);
    assert_eq!(a.header("allow"), "GET, HEAD");
    let a = node.curl(&url, &["-X", "PUT", "-d", "x=1"]);
    assert_eq!(a.status, 405);
    // CONNECT (authority-form) is refused too: not an open proxy.
    let (resp, closed) = raw(
        &node,
        b"CONNECT www.example.com:443 HTTP/1.1\r\nHost: www.example.com:443\r\n\r\n",
    );
    assert!(resp.starts_with("HTTP/1.1 4"), "{resp}");
    assert!(closed);
    // An absolute-form request for a host outside the zone.
    let (resp, _) = raw(
        &node,
        b"GET http://127.11.4.100:8080/form HTTP/1.1\r\nHost: 127.11.4.100:8080\r\nConnection: close\r\n\r\n",
    );
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert_eq!(origin.connections(), 0);
}

#[test]
fn ssrf_loopback_origin_gets_403_without_allow_private_origins_and_is_never_connected_to() {
    let dir = temp_dir("ssrf");
    let origin = FaultOrigin::start("127.11.5.100:8080", |_, _, s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret");
    });
    let node = Node::on("127.11.5.1")
        .proxy(&dir.path().join("cache"))
        .args(&["--resolve", "internal.origin.test=127.11.5.100"])
        .start();
    // 127.0.0.1 itself, on a port of its own (this test's network namespace
    // or host may have nothing on port 80 to notice a connection).
    let localhost = FaultOrigin::start("127.0.0.1:18095", |_, _, s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret");
    });
    for url in [
        coralized("127.11.5.100", 8080, "/"),
        format!("http://127.0.0.1.{ALIAS}:8090/"),
        coralized("127.0.0.1", 18095, "/"),
        coralized("internal.origin.test", 8080, "/"),
        // 169.254.169.254 (metadata) and the IPv4-mapped form of loopback.
        format!("http://169.254.169.254.{ALIAS}:8090/latest/meta-data/"),
    ] {
        let a = node.curl(&url, &[]);
        assert_eq!(a.status, 403, "{url}: {a:?}");
        assert!(!String::from_utf8_lossy(&a.body).contains("secret"));
    }
    assert_eq!(
        origin.connections(),
        0,
        "the refused address was never connected to"
    );
    assert_eq!(
        localhost.connections(),
        0,
        "127.0.0.1 was never connected to"
    );
}

#[test]
fn malformed_requests_get_400_and_close_reach_no_origin_and_change_no_cache_entry() {
    let dir = temp_dir("malformed");
    let origin = FaultOrigin::start("127.11.6.100:8080", |n, _, s| {
        let body = format!("object version {n}");
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nCache-Control: max-age=600\r\n\r\n{body}",
            body.len()
        );
    });
    let node = proxy_node(dir.path(), "127.11.6.1", "127.11.6.100").start();
    let url = coralized("www.origin.test", 8080, "/x");
    let good = node.curl(&url, &[]);
    assert_eq!(good.body, b"object version 0");
    assert_eq!(origin.connections(), 1);
    let host = format!("www.origin.test.8080.{ALIAS}");
    // 400 for what is malformed; the RFC's own status where one fits: 414
    // for a request line too long, 431 for too many or too large fields.
    let cases: Vec<(&str, u16, String)> = vec![
        ("CL and TE", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")),
        ("duplicate CL", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")),
        ("bad chunk size", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")),
        ("bare LF", 400, format!("GET /x HTTP/1.1\nHost: {host}\n\n")),
        ("obs-fold", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nX-A: a\r\n b\r\n\r\n")),
        ("NUL", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nX-A: a\0b\r\n\r\n")),
        ("lone CR", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nX-A: a\rb\r\n\r\n")),
        ("two Host", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nHost: other.{ALIAS}\r\n\r\n")),
        ("long line", 414, format!("GET /{} HTTP/1.1\r\nHost: {host}\r\n\r\n", "a".repeat(20_000))),
        ("many headers", 431, format!("GET /x HTTP/1.1\r\nHost: {host}\r\n{}\r\n", "X-A: b\r\n".repeat(200))),
        ("large header", 431, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nX-A: {}\r\n\r\n", "b".repeat(20_000))),
        ("no Host in 1.1", 400, "GET /x HTTP/1.1\r\n\r\n".to_string()),
        ("TE not chunked", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: gzip\r\n\r\n")),
        // RFC 9112 §6.1: a transfer coding the server does not implement
        // (before the final chunked) is 501; a final coding other than
        // chunked leaves the length unknown: 400 (§6.3).
        ("gzip then chunked", 501, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")),
        ("unknown coding", 501, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: x-squash\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")),
        ("chunked then gzip", 400, format!("GET /x HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked, gzip\r\n\r\n")),
    ];
    for (what, want, bytes) in &cases {
        let (resp, closed) = raw(&node, bytes.as_bytes());
        let status: u16 = resp
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        assert_eq!(status, *want, "{what}: {resp}");
        assert!(closed, "{what}: the connection stays open");
    }
    assert_eq!(
        origin.connections(),
        1,
        "no malformed request reached the origin"
    );
    // The cached object is unchanged, and the next good request is served.
    let after = node.curl(&url, &[]);
    assert_eq!(after.status, 200);
    assert_eq!(after.body, b"object version 0");
    assert!(after.header("cache-status").contains("hit"), "{after:?}");
    // A good request after a malformed one on the same kind of connection.
    let (resp, _) = raw(
        &node,
        format!("GET /x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("object version 0"));
}

#[test]
fn keep_alive_and_pipelined_requests_are_answered_in_order() {
    let dir = temp_dir("pipeline");
    let root = objects_root(dir.path());
    let _nginx = Nginx::start(dir.path(), "127.11.7.100:8080".parse().unwrap(), &root);
    let node = proxy_node(dir.path(), "127.11.7.1", "127.11.7.100").start();
    let host = format!("www.origin.test.8080.{ALIAS}");
    // Three requests in one write, the last closing; a GET with a body too.
    let req = format!(
        "GET /b.bin HTTP/1.1\r\nHost: {host}\r\n\r\n\
         GET /a.bin HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3\r\n\r\nxyz\
         HEAD /b.bin HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    );
    let mut s = TcpStream::connect(node.http()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let b = object(4096, 2);
    let a = object(41_000, 1);
    let first_end = find(&out, b"\r\n\r\n").unwrap() + 4;
    assert!(out.starts_with(b"HTTP/1.1 200"));
    assert_eq!(&out[first_end..first_end + 4096], &b[..]);
    let rest = &out[first_end + 4096..];
    let second_end = find(rest, b"\r\n\r\n").unwrap() + 4;
    assert!(rest.starts_with(b"HTTP/1.1 200"));
    assert_eq!(&rest[second_end..second_end + 41_000], &a[..]);
    let third = &rest[second_end + 41_000..];
    assert!(
        third.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(third)
    );
    assert!(third.ends_with(b"\r\n\r\n"), "HEAD has no body");
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn a_restarted_node_serves_its_cached_objects_without_asking_the_origin() {
    let dir = temp_dir("restart");
    let root = objects_root(dir.path());
    let nginx = Nginx::start(dir.path(), "127.11.8.100:8080".parse().unwrap(), &root);
    let mut node = proxy_node(dir.path(), "127.11.8.1", "127.11.8.100").start();
    for p in ["/a.bin", "/b.bin", "/c.bin"] {
        let a = node.curl(&coralized("www.origin.test", 8080, p), &[]);
        assert_eq!(a.status, 200);
    }
    node.kill();
    node.restart();
    for (p, want) in [
        ("/a.bin", object(41_000, 1)),
        ("/b.bin", object(4096, 2)),
        ("/c.bin", object(300_000, 3)),
    ] {
        let a = node.curl(&coralized("www.origin.test", 8080, p), &[]);
        assert_eq!(a.status, 200, "{p}: {a:?}");
        assert_eq!(a.body, want, "{p}");
        assert!(a.header("cache-status").contains("hit"), "{p}: {a:?}");
        assert_eq!(
            nginx.requests(p),
            1,
            "{p} came from the cache after the restart"
        );
    }
    // Its pointers are back in the DSHT (§3.2): others can fetch from it.
    let url = "http://www.origin.test:8080/c.bin";
    wait_for_pointer(&node, url, &node, Duration::from_secs(15));
}

#[test]
fn kill_9_in_the_middle_of_a_download_leaves_no_object_served_truncated() {
    let dir = temp_dir("kill9");
    let body = object(400_000, 9);
    let served = body.clone();
    let started = Arc::new(AtomicUsize::new(0));
    let s2 = started.clone();
    // The first fetch trickles (and is cut short by the node's death); later
    // ones are answered at once.
    let origin = FaultOrigin::start("127.11.9.100:8080", move |n, _, s| {
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nCache-Control: max-age=600\r\nConnection: close\r\n\r\n",
            served.len()
        );
        if n == 0 {
            for part in served.chunks(10_000) {
                if s.write_all(part).is_err() {
                    return;
                }
                s2.fetch_add(part.len(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            let _ = s.write_all(&served);
        }
    });
    let mut node = proxy_node(dir.path(), "127.11.9.1", "127.11.9.100").start();
    let url = coralized("www.origin.test", 8080, "/big.bin");
    let ip = node.ip.clone();
    let client = std::thread::spawn(move || curl(&ip, &url, &[]));
    let start = Instant::now();
    while started.load(Ordering::SeqCst) < 100_000 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the download did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    node.kill();
    let out = client.join().unwrap();
    assert!(!out.curl_ok, "the client saw the transfer cut short");
    node.restart();
    let a = node.curl(&coralized("www.origin.test", 8080, "/big.bin"), &[]);
    assert_eq!(a.status, 200);
    assert_eq!(a.body.len(), body.len(), "never a truncated object");
    assert_eq!(a.body, body);
    assert!(a.header("cache-status").contains("fwd=uri-miss"), "{a:?}");
    assert_eq!(origin.connections(), 2, "fetched again after the crash");
}

#[test]
fn origin_connections_are_reused_only_after_the_whole_response_was_read() {
    let dir = temp_dir("reuse");
    let root = objects_root(dir.path());
    let ns = root.join("ns");
    std::fs::create_dir_all(&ns).unwrap();
    let big = object(20_000_000, 4);
    std::fs::write(ns.join("big.bin"), &big).unwrap();
    std::fs::write(ns.join("small.bin"), object(5000, 6)).unwrap();
    // /ns/ is not stored (no-store): the proxy passes it through.
    let nginx = Nginx::start_with(
        dir.path(),
        "127.11.17.100:8080".parse().unwrap(),
        &root,
        "location /ns/ { expires off; add_header Cache-Control no-store; }",
    );
    let node = proxy_node(dir.path(), "127.11.17.1", "127.11.17.100").start();
    // One after another, on one core: one origin connection, reused.
    for p in ["/a.bin", "/b.bin", "/c.bin"] {
        let a = node.curl(&coralized("www.origin.test", 8080, p), &[]);
        assert_eq!(a.status, 200, "{p}: {a:?}");
    }
    let first = nginx.connections_of("/a.bin");
    assert_eq!(first.len(), 1);
    assert_eq!(nginx.connections_of("/b.bin"), first, "reused");
    assert_eq!(nginx.connections_of("/c.bin"), first, "reused");
    // A client that leaves after the head of a large pass-through answer:
    // its origin connection is mid-body and must not be reused (the rest of
    // the body would be read as the next answer).
    let host = format!("www.origin.test.8080.{ALIAS}");
    {
        let mut s = TcpStream::connect(node.http()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(s, "GET /ns/big.bin HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        while find(&got, b"\r\n\r\n").is_none() {
            let k = s.read(&mut b).unwrap();
            assert!(k > 0, "no head");
            got.extend_from_slice(&b[..k]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"));
    }
    // nginx logs a request when it ends: here, when the proxy drops it.
    let start = Instant::now();
    while nginx.requests("/ns/big.bin") == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "big.bin never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let big_conn = nginx.connections_of("/ns/big.bin");
    let url = coralized("www.origin.test", 8080, "/ns/small.bin");
    for _ in 0..2 {
        let a = node.curl(&url, &[]);
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(
            a.body,
            object(5000, 6),
            "the right answer, not big.bin's rest"
        );
    }
    let small = nginx.connections_of("/ns/small.bin");
    let log = std::fs::read_to_string(&nginx.log).unwrap_or_default();
    assert!(
        small.iter().all(|c| !big_conn.contains(c)),
        "a half-read connection was reused: {log}"
    );
    // The first uncacheable answer costs one origin request (the owning
    // core's fetch, relayed to its client); the next goes straight to the
    // origin (hit-for-pass) on the connection the first left reusable, read
    // to its end.
    assert_eq!(small.len(), 2, "{log}");
    assert_eq!(small[0], small[1], "reused after a whole answer: {log}");
}

#[test]
fn rfc9111_ranges_conditionals_reloads_authorization_loops_and_revalidation_with_nginx() {
    let dir = temp_dir("rfc9111");
    let root = objects_root(dir.path());
    std::fs::create_dir_all(root.join("short")).unwrap();
    std::fs::write(root.join("short/s.bin"), object(3000, 8)).unwrap();
    let nginx = Nginx::start_with(
        dir.path(),
        "127.11.18.100:8080".parse().unwrap(),
        &root,
        "location /short/ { expires 1s; }",
    );
    let node = proxy_node(dir.path(), "127.11.18.1", "127.11.18.100").start();
    let url = coralized("www.origin.test", 8080, "/a.bin");
    let whole = object(41_000, 1);
    let first = node.curl(&url, &[]);
    assert_eq!(first.status, 200, "{first:?}");
    assert!(first.header("via").ends_with("(coral)"), "{first:?}");
    assert_eq!(first.header("age"), "0", "{first:?}");
    assert!(first
        .header("cache-status")
        .starts_with("coral; fwd=uri-miss"));
    // Ranges from the cached object: past the end is 416, several ranges
    // (an abuse vector) get the whole body.
    let r = node.curl(&url, &["-r", "50000-"]);
    assert_eq!(r.status, 416, "{r:?}");
    assert_eq!(r.header("content-range"), "bytes */41000");
    let m = node.curl(&url, &["-r", "0-1,5-6"]);
    assert_eq!(m.status, 200, "{m:?}");
    assert_eq!(m.body, whole);
    // A client's conditionals are answered here.
    let lm = format!("If-Modified-Since: {}", first.header("last-modified"));
    assert_eq!(node.curl(&url, &["-H", &lm]).status, 304);
    let inm = format!("If-None-Match: {}", first.header("etag"));
    assert_eq!(node.curl(&url, &["-H", &inm]).status, 304);
    // A browser's reload is served from the cache (the deployed CoralCDN's
    // rule: a flash crowd of reloads must not reach the origin).
    let reload = node.curl(
        &url,
        &["-H", "Cache-Control: no-cache", "-H", "Pragma: no-cache"],
    );
    assert!(reload.header("cache-status").contains("hit"), "{reload:?}");
    assert_eq!(nginx.requests("/a.bin"), 1);
    // Cookies never go upstream (every Coralized site shares one domain).
    let b = coralized("www.origin.test", 8080, "/b.bin");
    assert_eq!(node.curl(&b, &["-b", "session=secret"]).status, 200);
    let log = std::fs::read_to_string(&nginx.log).unwrap_or_default();
    let line = log.lines().find(|l| l.contains("GET /b.bin ")).unwrap();
    assert!(line.contains("\"-\"") && !line.contains("secret"), "{line}");
    // Authorization: the answer is for one user; the origin gives it.
    let auth = node.curl(&url, &["-H", "Authorization: Basic dXNlcjpwdw=="]);
    assert_eq!(auth.status, 200);
    assert!(
        auth.header("cache-status").contains("fwd=bypass"),
        "{auth:?}"
    );
    assert_eq!(nginx.requests("/a.bin"), 2);
    // A request that already came through Coral is a loop (RFC 8586).
    for l in ["CDN-Loop: coral", &format!("CDN-Loop: other, {ALIAS}")] {
        let a = node.curl(&url, &["-H", l]);
        assert_eq!(a.status, 403, "{l}: {a:?}");
    }
    assert_eq!(nginx.requests("/a.bin"), 2, "no loop reached the origin");
    // A stale object is revalidated with nginx (its validators → 304).
    let s = coralized("www.origin.test", 8080, "/short/s.bin");
    assert_eq!(node.curl(&s, &[]).body, object(3000, 8));
    std::thread::sleep(Duration::from_millis(2100));
    let again = node.curl(&s, &[]);
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body, object(3000, 8));
    let log = std::fs::read_to_string(&nginx.log).unwrap_or_default();
    let statuses: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("GET /short/s.bin "))
        .filter_map(|l| l.rsplit(' ').next())
        .collect();
    assert_eq!(statuses, ["200", "304"], "{log}");
}

#[test]
fn an_origin_that_never_completes_the_connection_fails_at_the_connect_timeout() {
    let dir = temp_dir("connect");
    // A listener with a backlog of one, its queue filled and never
    // accepted: the kernel drops further SYNs, so connecting hangs.
    let addr: SocketAddr = "127.11.19.100:8080".parse().unwrap();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&addr.into()).unwrap();
    sock.listen(0).unwrap();
    let mut queued = Vec::new();
    let hung = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => queued.push(s),
            Err(e) => break e,
        }
        assert!(queued.len() < 16, "the accept queue does not fill");
    };
    assert_eq!(hung.kind(), std::io::ErrorKind::TimedOut, "{hung}");
    let node = proxy_node(dir.path(), "127.11.19.1", "127.11.19.100")
        .config_text("[proxy]\nconnect_timeout_ms = 1000\nfirst_byte_timeout_ms = 30000\n")
        .start();
    let start = Instant::now();
    let a = node.curl(&coralized("www.origin.test", 8080, "/x"), &[]);
    assert_eq!(a.status, 502, "{a:?}");
    // It waited for the connect timeout (nothing refused it at once);
    // SYN retries would last minutes, the miss timeout 60 s.
    assert!(start.elapsed() >= Duration::from_millis(900));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    drop(sock);
}

/// A node whose origin `www.origin.test` is the fault origin on `origin_ip`,
/// with short timeouts (config file) so that faults show quickly.
fn fault_node(dir: &Path, ip: &str, origin_ip: &str) -> Node {
    let conf = write_file(
        dir,
        "coral.toml",
        "[proxy]\nfirst_byte_timeout_ms = 1500\nidle_timeout_ms = 1500\nobject_bytes_max = 1000000\nnegative_ttl_secs = 2\n",
    );
    proxy_node(dir, ip, origin_ip).config(&conf).start()
}

#[test]
fn faulty_origins_truncating_lying_slow_oversized_are_never_cached_as_complete() {
    let dir = temp_dir("faults");
    let origin = FaultOrigin::start("127.11.10.100:8080", |_, head, s| {
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        match path.as_str() {
            // Claims 1000 bytes, sends 10 and closes.
            "/truncated" => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nCache-Control: max-age=600\r\n\r\n0123456789");
            }
            // Chunked, cut off before the last chunk.
            "/chunked-cut" => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCache-Control: max-age=600\r\n\r\n5\r\nhello\r\n");
            }
            // Two Content-Lengths that disagree.
            "/lying" => {
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
                );
            }
            // No head within the first-byte timeout.
            "/slow" => std::thread::sleep(Duration::from_secs(4)),
            // The head and a little body, then silence past the idle timeout
            // (the connection stays open).
            "/stall" => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nCache-Control: max-age=600\r\n\r\n0123456789");
                std::thread::sleep(Duration::from_secs(4));
            }
            // A length over object_bytes_max (1 MB here), announced.
            "/huge-length" => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2000000\r\nCache-Control: max-age=600\r\n\r\n");
                let _ = s.write_all(&vec![b'x'; 100_000]);
            }
            // Larger than object_bytes_max, without a length.
            "/huge" => {
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nConnection: close\r\n\r\n",
                );
                let block = vec![b'x'; 100_000];
                for _ in 0..15 {
                    if s.write_all(&block).is_err() {
                        return;
                    }
                }
            }
            _ => {
                let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            }
        }
    });
    let node = fault_node(dir.path(), "127.11.10.1", "127.11.10.100");
    for (path, want_status) in [
        ("/truncated", None),
        ("/chunked-cut", None),
        ("/lying", Some(502)),
        ("/slow", Some(504)),
        ("/stall", None),
        ("/huge", None),
        ("/huge-length", Some(502)),
    ] {
        let url = coralized("www.origin.test", 8080, path);
        let before = origin.connections();
        let a = node.curl(&url, &[]);
        if let Some(s) = want_status {
            assert_eq!(a.status, s, "{path}: {a:?}");
        } else {
            // Cut-through: the head went out before the fault; the client
            // sees the transfer cut short, never a complete-looking answer.
            assert!(!a.curl_ok || a.status >= 500, "{path}: {a:?}");
        }
        // Nothing truncated was kept: the next request goes to the origin again.
        let b = node.curl(&url, &[]);
        assert!(!b.curl_ok || b.status >= 500, "{path} second: {b:?}");
        assert!(origin.connections() >= before + 2, "{path} was not cached");
    }
}

#[test]
fn redirects_stay_coralized_and_negative_answers_are_cached_briefly() {
    let dir = temp_dir("redirect");
    let origin = FaultOrigin::start("127.11.11.100:8080", |_, head, s| {
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        match path.as_str() {
            "/moved" => {
                let _ = s.write_all(b"HTTP/1.1 301 Moved Permanently\r\nLocation: http://www.origin.test:8080/new\r\nContent-Location: http://www.origin.test:8080/moved\r\nContent-Length: 0\r\n\r\n");
            }
            // HTML with a link to the origin, plain and content-coded.
            "/page.html" | "/coded.html" => {
                let body = b"<a href=\"http://www.origin.test:8080/x\">x</a>";
                let coding = if path == "/coded.html" {
                    "Content-Encoding: gzip\r\n"
                } else {
                    ""
                };
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n{coding}Cache-Control: max-age=600\r\nContent-Length: {}\r\n\r\n", body.len());
                let _ = s.write_all(body);
            }
            "/cookie" => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nSet-Cookie: session=secret\r\nCache-Control: max-age=600\r\nContent-Length: 2\r\n\r\nok");
            }
            _ => {
                let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope");
            }
        }
    });
    let node = fault_node(dir.path(), "127.11.11.1", "127.11.11.100");
    let a = node.curl(&coralized("www.origin.test", 8080, "/moved"), &[]);
    assert_eq!(a.status, 301);
    assert_eq!(
        a.header("location"),
        format!("http://www.origin.test.8080.{ALIAS}:8090/new")
    );
    assert_eq!(
        a.header("content-location"),
        format!("http://www.origin.test.8080.{ALIAS}:8090/moved")
    );
    // Links in HTML stay Coralized; a content-coded body (which we cannot
    // read without decoding it) is passed on byte for byte, never mangled.
    let page = node.curl(&coralized("www.origin.test", 8080, "/page.html"), &[]);
    assert_eq!(
        String::from_utf8_lossy(&page.body),
        format!("<a href=\"http://www.origin.test.8080.{ALIAS}:8090/x\">x</a>")
    );
    let coded = node.curl(&coralized("www.origin.test", 8080, "/coded.html"), &[]);
    assert_eq!(coded.header("content-encoding"), "gzip");
    assert_eq!(
        coded.body,
        b"<a href=\"http://www.origin.test:8080/x\">x</a>"
    );
    // Set-Cookie never reaches a client: every Coralized site shares one domain.
    let c = node.curl(
        &coralized("www.origin.test", 8080, "/cookie"),
        &["-b", "id=1"],
    );
    assert_eq!(c.status, 200);
    assert_eq!(c.header("set-cookie"), "");
    // And the answer says so (issue 26 item 13).
    assert_eq!(c.header("coral-stripped"), "Set-Cookie");
    // A 404 is cached for negative_ttl_secs (2 s here), then asked again.
    let url = coralized("www.origin.test", 8080, "/missing");
    let before = origin.connections();
    let first = node.curl(&url, &[]);
    assert_eq!(first.status, 404, "{first:?}");
    let again = node.curl(&url, &[]);
    assert_eq!(again.status, 404);
    assert!(again.header("cache-status").contains("hit"), "{again:?}");
    assert_eq!(origin.connections(), before + 1);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(node.curl(&url, &[]).status, 404);
    assert_eq!(origin.connections(), before + 2, "asked again once stale");
}

#[test]
fn rfc9111_stale_objects_are_revalidated_and_served_when_the_origin_errs() {
    let dir = temp_dir("stale");
    let mode = Arc::new(AtomicUsize::new(0));
    let m2 = mode.clone();
    let origin = FaultOrigin::start("127.11.12.100:8080", move |_, head, s| {
        let conditional = head.to_ascii_lowercase().contains("if-none-match: \"v1\"");
        match m2.load(Ordering::SeqCst) {
            0 => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\nContent-Length: 7\r\n\r\nversion");
            }
            1 if conditional => {
                let _ = s.write_all(b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\n\r\n");
            }
            3 => {
                let _ = s.write_all(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 60\r\nContent-Length: 4\r\n\r\nslow");
            }
            4 => {
                let _ = s.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno");
            }
            5 => {
                let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\ngone");
            }
            _ => {
                let _ = s.write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
                );
            }
        }
    });
    let node = fault_node(dir.path(), "127.11.12.1", "127.11.12.100");
    let url = coralized("www.origin.test", 8080, "/v");
    assert_eq!(node.curl(&url, &[]).body, b"version");
    // A client's own conditional request is answered here.
    let nm = node.curl(&url, &["-H", "If-None-Match: \"v1\""]);
    assert_eq!(nm.status, 304, "{nm:?}");
    std::thread::sleep(Duration::from_millis(2100));
    mode.store(1, Ordering::SeqCst);
    let r = node.curl(&url, &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"version", "revalidated with a 304");
    std::thread::sleep(Duration::from_millis(2100));
    mode.store(2, Ordering::SeqCst);
    let before = origin.connections();
    let s = node.curl(&url, &[]);
    assert_eq!(s.status, 200, "the stale copy, not the origin's 503: {s:?}");
    assert_eq!(s.body, b"version");
    assert!(s.header("cache-status").contains("stale"), "{s:?}");
    assert!(origin.connections() > before, "the origin was asked");
    // An origin throttling the crowd (429, 403) does not replace it either.
    for (m, code) in [(3, 429), (4, 403)] {
        mode.store(m, Ordering::SeqCst);
        let before = origin.connections();
        let t = node.curl(&url, &[]);
        assert_eq!(
            t.status, 200,
            "the stale copy, not the origin's {code}: {t:?}"
        );
        assert_eq!(t.body, b"version");
        assert!(t.header("cache-status").contains("stale"), "{t:?}");
        assert!(origin.connections() > before, "the origin was asked");
    }
    // Gone: a 404 replaces the copy (and is cached briefly).
    mode.store(5, Ordering::SeqCst);
    let g = node.curl(&url, &[]);
    assert_eq!(g.status, 404, "{g:?}");
    let g = node.curl(&url, &[]);
    assert_eq!(g.status, 404, "{g:?}");
    assert!(g.header("cache-status").contains("hit"), "{g:?}");
}

#[test]
fn section_3_2_misses_on_any_core_meet_one_fetch_on_the_owning_core() {
    let dir = temp_dir("cores");
    let root = common::web_root(dir.path(), &[]);
    for i in 0..16 {
        std::fs::write(root.join(format!("o{i}.bin")), object(20_000 + i, i as u8)).unwrap();
    }
    let nginx = Nginx::start(dir.path(), "127.11.14.100:8080".parse().unwrap(), &root);
    let mut node = proxy_node(dir.path(), "127.11.14.1", "127.11.14.100").start();
    // Two cores: the kernel spreads connections over both listeners, and
    // keys are owned by either.
    node.kill();
    node.set_cores(2);
    node.restart();
    // 80 concurrent clients, five for each object.
    let host = format!("www.origin.test.8080.{ALIAS}");
    let clients: Vec<_> = (0..80)
        .map(|n| {
            let (addr, host) = (node.http(), host.clone());
            std::thread::spawn(move || {
                let i = n % 16;
                let (resp, _) = raw_to(
                    addr,
                    format!("GET /o{i}.bin HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
                (i, resp)
            })
        })
        .collect();
    for c in clients {
        let (i, resp) = c.join().unwrap();
        let body_at = find(&resp, b"\r\n\r\n").map_or(0, |p| p + 4);
        assert!(
            resp.starts_with(b"HTTP/1.1 200"),
            "/o{i}.bin: {}",
            String::from_utf8_lossy(&resp[..body_at])
        );
        assert_eq!(
            &resp[body_at..],
            &object(20_000 + i, i as u8)[..],
            "/o{i}.bin"
        );
    }
    for i in 0..16 {
        assert_eq!(
            nginx.requests(&format!("/o{i}.bin")),
            1,
            "/o{i}.bin fetched once: {}",
            std::fs::read_to_string(&nginx.log).unwrap_or_default()
        );
    }
}

#[test]
fn section_2_1_headless_chromium_loads_a_coralized_page_and_all_its_images() {
    let dir = temp_dir("chromium");
    let root = common::web_root(dir.path(), &[]);
    let colours = ["#c0392b", "#27ae60", "#2980b9", "#f39c12", "#8e44ad"];
    for (i, c) in colours.iter().enumerate() {
        std::fs::write(
            root.join(format!("i{i}.svg")),
            format!(
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"120\" height=\"120\">\
                 <rect width=\"120\" height=\"120\" fill=\"{c}\"/></svg>"
            ),
        )
        .unwrap();
    }
    // Absolute, scheme-relative and relative links to the origin: the
    // absolute ones must come back Coralized, or the browser (which can
    // resolve only Coralized names here) would not find them.
    std::fs::write(
        root.join("page.html"),
        "<!doctype html><html><head><title>coral</title>\
         <script>var n = 0; function got() { n++; document.getElementById('r').textContent = 'loaded ' + n; }</script>\
         </head><body><h1>A Coralized page</h1>\
         <img src=\"http://www.origin.test:8080/i0.svg\" onload=\"got()\">\
         <img src=\"http://www.origin.test:8080/i1.svg\" onload=\"got()\">\
         <img src=\"//www.origin.test:8080/i2.svg\" onload=\"got()\">\
         <img src=\"/i3.svg\" onload=\"got()\">\
         <img src=\"i4.svg\" onload=\"got()\">\
         <p id=\"r\">loaded 0</p>\
         <a id=\"l\" href=\"http://www.origin.test:8080/other.html\">another page</a>\
         </body></html>",
    )
    .unwrap();
    let nginx = Nginx::start(dir.path(), "127.11.15.100:8080".parse().unwrap(), &root);
    let node = proxy_node(dir.path(), "127.11.15.1", "127.11.15.100").start();
    let url = coralized("www.origin.test", 8080, "/page.html");
    let rules = format!("--host-resolver-rules=MAP *.{ALIAS} {}", node.ip);
    let flags = ["--virtual-time-budget=10000", &rules, "--dump-dom"];
    let dom = common::chromium(dir.path(), &url, &flags);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("loaded 5"), "not every image arrived: {dom}");
    assert!(
        dom.contains(&format!(
            "http://www.origin.test.8080.{ALIAS}:8090/other.html"
        )),
        "the link stayed Coralized: {dom}"
    );
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("proxy-chromium.png");
    let flags = ["--virtual-time-budget=10000", &rules];
    let (bytes, err) = common::chromium_screenshot(dir.path(), &url, &flags, "800,400", &shot);
    assert!(bytes > 1000, "no screenshot: {err}");
    // Every object came from the origin once, through the node.
    for p in [
        "/page.html",
        "/i0.svg",
        "/i1.svg",
        "/i2.svg",
        "/i3.svg",
        "/i4.svg",
    ] {
        assert_eq!(nginx.requests(p), 1, "{p}");
    }
}

/// Hits on plain requests take the fast path (issue #11) once a hit on the
/// full path has taught it the Host and target: its answers must stay those
/// of the full path as the object ages, is answered to HEAD, goes stale and
/// is replaced by another version.
#[test]
fn fast_hits_follow_age_head_and_a_replaced_object() {
    let dir = temp_dir("fast-hits");
    let version = Arc::new(AtomicUsize::new(1));
    let v2 = version.clone();
    let origin = FaultOrigin::start("127.11.61.100:8080", move |_, head, s| {
        if head.starts_with("GET /lang ") {
            let fr = head.to_ascii_lowercase().contains("accept-language: fr");
            let _ = s.write_all(if fr {
                b"HTTP/1.1 200 OK\r\nVary: Accept-Language\r\nCache-Control: max-age=600\r\nContent-Length: 2\r\n\r\nfr"
            } else {
                b"HTTP/1.1 200 OK\r\nVary: Accept-Language\r\nCache-Control: max-age=600\r\nContent-Length: 2\r\n\r\nen"
            });
            return;
        }
        let _ = match v2.load(Ordering::SeqCst) {
            1 => s.write_all(b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nCache-Control: max-age=4\r\nContent-Length: 3\r\n\r\none"),
            _ => s.write_all(b"HTTP/1.1 200 OK\r\nETag: \"v2\"\r\nCache-Control: max-age=600\r\nContent-Length: 6\r\n\r\nsecond"),
        };
    });
    let node = fault_node(dir.path(), "127.11.61.1", "127.11.61.100");
    let url = coralized("www.origin.test", 8080, "/f");
    assert_eq!(node.curl(&url, &[]).body, b"one");
    // The full path's hit, then the fast path's: the same answer.
    let full = node.curl(&url, &[]);
    let fast = node.curl(&url, &[]);
    for a in [&full, &fast] {
        assert_eq!((a.status, a.body.as_slice()), (200, &b"one"[..]), "{a:?}");
        assert!(a.header("cache-status").contains("hit"), "{a:?}");
        assert_eq!(a.header("etag"), "\"v1\"");
        assert_eq!(a.header("content-length"), "3");
        assert_eq!(a.header("accept-ranges"), "bytes");
        assert!(a.header("via").contains("(coral)"), "{a:?}");
    }
    let (head, _) = raw(
        &node,
        format!(
            "HEAD /f HTTP/1.1\r\nHost: www.origin.test.8080.{ALIAS}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("\r\nContent-Length: 3\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
    // Still fresh a second later: Age and the ttl moved on.
    std::thread::sleep(Duration::from_millis(1100));
    let later = node.curl(&url, &[]);
    assert!(later.header("cache-status").contains("hit"), "{later:?}");
    let age: u64 = later.header("age").parse().unwrap();
    assert!(age >= 1, "{later:?}");
    // Stale, then replaced: the next hits are the new version's.
    std::thread::sleep(Duration::from_millis(3100));
    version.store(2, Ordering::SeqCst);
    let connections = origin.connections();
    assert_eq!(node.curl(&url, &[]).body, b"second");
    assert!(
        origin.connections() > connections,
        "the stale copy was not served as a hit"
    );
    for _ in 0..3 {
        let a = node.curl(&url, &[]);
        assert_eq!(
            (a.status, a.body.as_slice()),
            (200, &b"second"[..]),
            "{a:?}"
        );
        assert_eq!(a.header("etag"), "\"v2\"");
        assert_eq!(a.header("content-length"), "6");
        assert!(a.header("cache-status").contains("hit"), "{a:?}");
    }
    // Request fields that change a hit's answer still apply.
    let range = node.curl(&url, &["-H", "Range: bytes=1-2"]);
    assert_eq!(
        (range.status, range.body.as_slice()),
        (206, &b"ec"[..]),
        "{range:?}"
    );
    let not_modified = node.curl(&url, &["-H", "If-None-Match: \"v2\""]);
    assert_eq!(not_modified.status, 304, "{not_modified:?}");
    // A varying object: Accept-Language is a plain request's field, and
    // another language must not get the stored variant.
    let lang = coralized("www.origin.test", 8080, "/lang");
    for _ in 0..3 {
        let en = node.curl(&lang, &["-H", "Accept-Language: en"]);
        assert_eq!(en.body, b"en", "{en:?}");
    }
    let fr = node.curl(&lang, &["-H", "Accept-Language: fr"]);
    assert_eq!(fr.body, b"fr", "{fr:?}");
    // A Host the full parser refuses is refused, learned names or not.
    let (answer, closed) = raw(&node, b"GET /f HTTP/1.1\r\nHost: www origin\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(closed);
}

/// A large object (2 MB) read slowly by real clients: curl at a limited
/// rate, and a keep-alive client with a small receive buffer reading a
/// piece at a time. The node's socket fills again and again, and each send
/// waits for room (in the core's epoll set, issue 27 session 8) and goes
/// on: the object arrives whole and byte-identical from the miss, the full
/// path's hit and the fast path's hits, twice on one connection.
#[test]
fn a_large_object_read_slowly_arrives_whole_and_identical() {
    let dir = temp_dir("slow-large");
    let big = object(2_000_000, 5);
    let root = common::web_root(dir.path(), &[("big.bin", &big)]);
    let nginx = Nginx::start(dir.path(), "127.11.73.100:8080".parse().unwrap(), &root);
    let node = proxy_node(dir.path(), "127.11.73.1", "127.11.73.100").start();
    let url = coralized("www.origin.test", 8080, "/big.bin");
    for i in 0..3 {
        let a = node.curl(&url, &["--limit-rate", "2M"]);
        assert!(a.curl_ok, "answer {i}: {}", a.curl_err);
        assert_eq!(a.status, 200, "answer {i}");
        assert_eq!(a.body.len(), big.len(), "answer {i}");
        assert!(a.body == big, "answer {i}: other bytes");
        if i > 0 {
            assert!(a.header("cache-status").contains("hit"), "{i}: {a:?}");
        }
    }
    // Two hits on one keep-alive connection, read 16 KiB at a time
    // through a receive buffer of a few KiB.
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect_timeout(&node.http().into(), Duration::from_secs(5))
        .unwrap();
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!("GET /big.bin HTTP/1.1\r\nHost: www.origin.test.8080.{ALIAS}\r\n\r\n");
    let mut pending = Vec::new();
    for i in 0..2 {
        s.write_all(req.as_bytes()).unwrap();
        let mut buf = [0u8; 16 << 10];
        let head_end = loop {
            if let Some(at) = find(&pending, b"\r\n\r\n") {
                break at + 4;
            }
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed in the head of answer {i}");
            pending.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&pending[..head_end]).to_string();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("\r\nContent-Length: 2000000\r\n"), "{head}");
        pending.drain(..head_end);
        while pending.len() < big.len() {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed after {} body bytes", pending.len());
            pending.extend_from_slice(&buf[..n]);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(pending.len(), big.len(), "answer {i}: more than the body");
        assert!(pending == big, "keep-alive answer {i}: other bytes");
        pending.clear();
    }
    assert_eq!(
        nginx.requests("/big.bin"),
        1,
        "the hits came from the cache"
    );
}

/// Reads from `s` until the node closes it; how long that took from `from`.
fn closed_after(s: &mut TcpStream, from: Instant) -> Duration {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return from.elapsed(),
            Ok(_) => {}
            Err(e) => panic!("not closed after {:?}: {e}", from.elapsed()),
        }
    }
}

#[test]
fn client_connections_idle_past_client_idle_timeout_are_closed_busy_ones_are_not() {
    let dir = temp_dir("client-idle");
    // The origin answers after 3 s: longer than the client idle timeout,
    // which must not cut a connection that is being answered.
    let _origin = FaultOrigin::start("127.11.42.100:8080", |_, _, s| {
        std::thread::sleep(Duration::from_secs(3));
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nCache-Control: max-age=600\r\n\r\nhello",
        );
    });
    let node = proxy_node(dir.path(), "127.11.42.1", "127.11.42.100")
        .config_text("[proxy]\nclient_idle_timeout_ms = 1000\nfirst_byte_timeout_ms = 20000\n")
        .start();
    // Silent from the start, and silent halfway through a head: both idle.
    let start = Instant::now();
    let mut silent = TcpStream::connect(node.http()).unwrap();
    let mut half = TcpStream::connect(node.http()).unwrap();
    half.write_all(b"GET /x HTTP/1.1\r\nHo").unwrap();
    for s in [&mut silent, &mut half] {
        let took = closed_after(s, start);
        assert!(took >= Duration::from_millis(900), "{took:?}");
        assert!(took < Duration::from_secs(20), "{took:?}");
    }
    // Busy for 3 s on a slow origin, then answered, then idle and closed.
    let host = format!("www.origin.test.8080.{ALIAS}");
    let mut busy = TcpStream::connect(node.http()).unwrap();
    busy.write_all(format!("GET /slow HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .unwrap();
    busy.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let asked = Instant::now();
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    while !out.ends_with(b"hello") {
        let k = busy.read(&mut b).unwrap();
        assert!(
            k > 0,
            "closed while busy: {}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&b[..k]);
    }
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert!(asked.elapsed() >= Duration::from_millis(2900));
    let answered = Instant::now();
    let took = closed_after(&mut busy, answered);
    assert!(took >= Duration::from_millis(900), "{took:?}");
}

/// Issue #11: an uncacheable object costs the origin one request per client
/// request, the first one included (the owning core's fetch is relayed to
/// the client that asked, not thrown away and fetched again), on a node of
/// two cores (the owning core and the client's differ for some requests),
/// for GET, HEAD and requests that arrive together.
#[test]
fn uncacheable_objects_cost_one_origin_request_per_client_request() {
    let dir = temp_dir("uncacheable");
    let root = objects_root(dir.path());
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::fs::write(root.join("private/p.bin"), object(70_000, 9)).unwrap();
    let nginx = Nginx::start_with(
        dir.path(),
        "127.11.30.100:8080".parse().unwrap(),
        &root,
        "location /private/ { expires off; add_header Cache-Control no-store; }",
    );
    let node = proxy_node(dir.path(), "127.11.30.1", "127.11.30.100")
        .cores(2)
        .start();
    let body = object(70_000, 9);
    let mut asked = 0;
    for path in ["/private/p.bin", "/private/p.bin?v=2", "/private/p.bin?v=3"] {
        let url = coralized("www.origin.test", 8080, path);
        // Each curl is a new connection: the kernel spreads them over both
        // cores.
        for i in 0..6 {
            let a = if i == 3 {
                node.curl(&url, &["-I"])
            } else {
                node.curl(&url, &[])
            };
            asked += 1;
            assert_eq!(a.status, 200, "{path} #{i}: {a:?}");
            assert_eq!(a.header("cache-control"), "no-store", "{a:?}");
            if i != 3 {
                assert_eq!(a.body, body, "{path} #{i}");
            } else {
                assert_eq!(a.header("content-length"), "70000", "{a:?}");
            }
            assert!(a.header("cache-status").contains("fwd="), "{a:?}");
            // nginx logs a request when it ends; the body has been read
            // by then, but give its log a moment.
            let logged = |n: &Nginx| {
                std::fs::read_to_string(&n.log)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains(" /private/p.bin"))
                    .count()
            };
            let start = Instant::now();
            while logged(&nginx) < asked && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(
                logged(&nginx),
                asked,
                "{path} #{i}: one origin request per client request"
            );
        }
    }
    // Requests that arrive together for a new uncacheable object: one
    // fetches it for all of them at first, then each its own.
    let url = coralized("www.origin.test", 8080, "/private/p.bin?v=4");
    let crowd: Vec<_> = (0..6)
        .map(|_| {
            let (url, ip) = (url.clone(), node.ip.clone());
            std::thread::spawn(move || curl(&ip, &url, &[]))
        })
        .collect();
    for c in crowd {
        let a = c.join().unwrap();
        assert_eq!(format!("{} {}", a.status, a.body.len()), "200 70000");
    }
    let start = Instant::now();
    while nginx.requests("/private/p.bin?v=4") < 6 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        nginx.requests("/private/p.bin?v=4"),
        6,
        "six clients, six origin requests"
    );
    // A moment later nothing more arrives.
    let settled = Instant::now();
    while settled.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(nginx.requests("/private/p.bin?v=4"), 6);
}

/// Revalidation by `Last-Modified` alone (no `ETag`): a stale object is
/// asked for with `If-Modified-Since`, and the origin's 304 refreshes it:
/// the body is not fetched again, and the object is fresh again.
#[test]
fn rfc9111_4_3_stale_object_revalidated_by_last_modified_alone() {
    let dir = temp_dir("lastmod");
    let bodies = Arc::new(AtomicUsize::new(0));
    let not_modified = Arc::new(AtomicUsize::new(0));
    const LM: &str = "Wed, 21 Oct 2015 07:28:00 GMT";
    let (b, nm) = (bodies.clone(), not_modified.clone());
    let origin = FaultOrigin::start("127.11.31.100:8080", move |_, head, s| {
        let ims = head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(n, _)| n.eq_ignore_ascii_case("if-modified-since"))
            })
            .map(|(_, v)| v.trim().to_string());
        assert!(
            !head.to_ascii_lowercase().contains("if-none-match"),
            "{head}"
        );
        if let Some(v) = ims {
            assert_eq!(v, LM, "the stored Last-Modified is sent back");
            nm.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(b"HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=600\r\nConnection: close\r\n\r\n");
        } else {
            b.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nLast-Modified: {LM}\r\nCache-Control: max-age=1\r\nContent-Length: 16\r\nConnection: close\r\n\r\nlast-modified ok"
                )
                .as_bytes(),
            );
        }
    });
    let node = proxy_node(dir.path(), "127.11.31.1", "127.11.31.100").start();
    let url = coralized("www.origin.test", 8080, "/lm");
    let first = node.curl(&url, &[]);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body, b"last-modified ok");
    assert_eq!(first.header("last-modified"), LM);
    assert!(first.header("etag").is_empty(), "{first:?}");
    assert_eq!(bodies.load(Ordering::SeqCst), 1);
    // Fresh for 1 s: ask until the node has gone back to the origin.
    let start = Instant::now();
    while origin.connections() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never revalidated"
        );
        std::thread::sleep(Duration::from_millis(200));
        let a = node.curl(&url, &[]);
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.body, b"last-modified ok");
    }
    assert_eq!(
        not_modified.load(Ordering::SeqCst),
        1,
        "revalidated with If-Modified-Since"
    );
    assert_eq!(
        bodies.load(Ordering::SeqCst),
        1,
        "the body was not fetched again"
    );
    // Refreshed by the 304: fresh for 600 s, a hit, no origin request.
    let hit = node.curl(&url, &[]);
    assert_eq!(hit.status, 200, "{hit:?}");
    assert_eq!(hit.body, b"last-modified ok");
    assert!(hit.header("cache-status").contains("hit"), "{hit:?}");
    assert_eq!(origin.connections(), 2);
    assert_eq!(bodies.load(Ordering::SeqCst), 1);
}

/// Waits (at most `limit`) until a DSHT get of `url` through `node` names
/// `holder`'s proxy.
fn wait_for_pointer(node: &Node, url: &str, holder: &Node, limit: Duration) {
    let key = format!("url:{url}");
    wait_until(limit, Duration::from_millis(200), || {
        let out = node.client_output(&["get", &key]);
        if String::from_utf8_lossy(&out.stdout).contains(&holder.http().to_string()) {
            Ok(())
        } else {
            Err(format!("no pointer to {} for {url}", holder.http()))
        }
    })
}

/// A config file with short pointer TTLs (§3.2's are 20 s and 1 h).
fn short_ttl_config(dir: &Path, complete_secs: u32) -> PathBuf {
    write_file(
        dir,
        "short-ttl.toml",
        format!(
            "[proxy]\nfetching_pointer_ttl_secs = 2\ncomplete_pointer_ttl_secs = {complete_secs}\n"
        ),
    )
}

/// Long enough past a 3 s pointer TTL that an unrenewed pointer is gone.
const PAST_SHORT_TTL: Duration = Duration::from_secs(8);

#[test]
fn section_3_2_complete_pointers_with_a_short_ttl_are_renewed_and_peers_still_find_them() {
    let dir = temp_dir("renew");
    let root = objects_root(dir.path());
    let nginx = Nginx::start(dir.path(), "127.11.72.100:8080".parse().unwrap(), &root);
    let conf = short_ttl_config(dir.path(), 3);
    let a = proxy_node(dir.path(), "127.11.72.1", "127.11.72.100")
        .config(&conf)
        .start();
    let b = proxy_node(dir.path(), "127.11.72.2", "127.11.72.100")
        .config(&conf)
        .bootstrap("127.11.72.1")
        .start();
    a.wait_joined(1);
    b.wait_joined(1);
    let url = coralized("www.origin.test", 8080, "/b.bin");
    let first = a.curl(&url, &[]);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(nginx.requests("/b.bin"), 1);
    wait_for_pointer(&b, "http://www.origin.test:8080/b.bin", &a, START_WAIT);
    // Well past the 3 s TTL: only a renewed pointer is still there.
    std::thread::sleep(PAST_SHORT_TTL);
    let second = b.curl(&url, &[]);
    assert_eq!(second.status, 200, "{second:?}");
    assert_eq!(second.body, object(4096, 2));
    assert!(
        second.header("cache-status").contains("detail=peer-l"),
        "from the peer: {second:?}"
    );
    assert_eq!(nginx.requests("/b.bin"), 1, "no second origin request");
}

#[test]
fn rfc9111_4_1_a_restarted_node_puts_back_and_renews_its_vary_variants_pointers() {
    let dir = temp_dir("vary-restart");
    let root = objects_root(dir.path());
    let nginx = Nginx::start_with(
        dir.path(),
        "127.11.71.100:8080".parse().unwrap(),
        &root,
        "location = /lang { add_header Vary Accept-Language; default_type text/plain;\n\
         return 200 \"lang=$http_accept_language\\n\"; }",
    );
    let conf = short_ttl_config(dir.path(), 3);
    let lang = coralized("www.origin.test", 8080, "/lang");
    let ask = |node: &Node, l: &str| {
        let h = format!("Accept-Language: {l}");
        let a = node.curl(&lang, &["-H", &h]);
        assert_eq!(a.status, 200, "{l}: {a:?}");
        assert_eq!(String::from_utf8_lossy(&a.body), format!("lang={l}\n"));
        a.header("cache-status").to_string()
    };
    // The host's first answer: the origin's without the field.
    let ask_any = |node: &Node, l: &str| {
        let h = format!("Accept-Language: {l}");
        let a = node.curl(&lang, &["-H", &h]);
        assert_eq!(a.status, 200, "{l}: {a:?}");
        a.header("cache-status").to_string()
    };
    // Node 1 alone: "en" is stored under the URL's key (its first variant,
    // with a pointer under its variant key too), "fr" under its variant key.
    let mut a = proxy_node(dir.path(), "127.11.71.1", "127.11.71.100")
        .config(&conf)
        .start();
    // "en" asked twice: first without Accept-Language (issue 22 item 6),
    // that answer the client's alone; then with it, stored.
    assert!(!ask_any(&a, "en").contains("stored"));
    assert!(ask(&a, "en").contains("stored"));
    assert!(ask(&a, "fr").contains("stored"));
    assert_eq!(nginx.requests("/lang"), 3);
    // Restarted: the DSHT's pointers (held by node 1 alone) are gone.
    a.kill();
    a.restart();
    assert!(ask(&a, "en").contains("hit"), "kept across the restart");
    assert!(ask(&a, "fr").contains("hit"), "kept across the restart");
    let b = proxy_node(dir.path(), "127.11.71.2", "127.11.71.100")
        .config(&conf)
        .bootstrap("127.11.71.1")
        .start();
    a.wait_joined(1);
    b.wait_joined(1);
    wait_for_pointer(&b, "http://www.origin.test:8080/lang", &a, START_WAIT);
    // Past the TTL: the pointers put after the restart are renewed.
    std::thread::sleep(PAST_SHORT_TTL);
    // Node 2 stores "fr" under the URL's key (found by the URL's pointer);
    // "en" then differs from it: node 2 looks up its variant key, which
    // only node 1's restored variant pointer names.
    for l in ["fr", "en"] {
        let cs = ask(&b, l);
        assert!(cs.contains("detail=peer-l"), "{l} from node 1: {cs}");
    }
    assert_eq!(
        nginx.requests("/lang"),
        3,
        "both variants from the restarted peer, none from the origin"
    );
}

#[test]
fn a_pass_through_answer_the_origin_cuts_short_counts_as_an_origin_error() {
    let dir = temp_dir("pass-cut");
    let origin = FaultOrigin::start("127.11.70.100:8080", |_, head, s| {
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        match path.as_str() {
            // May not be stored; claims 100000 bytes, sends 10 and closes.
            "/private-cut" => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 100000\r\n\r\n0123456789");
            }
            // Chunked, cut off before the last chunk.
            "/private-chunked-cut" => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
            }
            // Larger than object_bytes_max (1 MB here), without a length.
            "/private-huge" => {
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                );
                let block = vec![b'x'; 100_000];
                for _ in 0..15 {
                    if s.write_all(&block).is_err() {
                        return;
                    }
                }
            }
            _ => {
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 5\r\n\r\nhello",
                );
            }
        }
    });
    let node = fault_node(dir.path(), "127.11.70.1", "127.11.70.100");
    let errors = |reason: &str| {
        node.metric(&format!(
            "coral_http_origin_errors_total{{reason=\"{reason}\"}}"
        ))
    };
    // A whole pass-through answer is no error.
    let ok = node.curl(&coralized("www.origin.test", 8080, "/private-ok"), &[]);
    assert_eq!(
        (ok.status, ok.body.as_slice()),
        (200, &b"hello"[..]),
        "{ok:?}"
    );
    assert_eq!(errors("truncated"), 0.0);
    let before = origin.connections();
    for path in ["/private-cut", "/private-chunked-cut"] {
        let url = coralized("www.origin.test", 8080, path);
        // The owning core's fetch finds it uncacheable and hands its answer
        // over; then hit-for-pass; then a request that may not be cached.
        for args in [&[][..], &[][..], &["-H", "Cache-Control: no-store"][..]] {
            let a = node.curl(&url, args);
            assert!(
                !a.curl_ok,
                "{path} {args:?}: the client sees it cut short: {a:?}"
            );
        }
    }
    assert_eq!(origin.connections(), before + 6, "one origin request each");
    assert_eq!(errors("truncated"), 6.0, "every cut answer counted");
    let huge = node.curl(&coralized("www.origin.test", 8080, "/private-huge"), &[]);
    assert!(!huge.curl_ok, "{huge:?}");
    assert_eq!(errors("too_large"), 1.0);
}
