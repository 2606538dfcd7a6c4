//! Issue 26's caching rules end to end: a `coral node` on 127.46.x.1, an origin
//! of our own on 127.46.x.100 that sends the awkward headers (invalid dates,
//! list-valued `Age`, targeted fields, `no-cache` then errors), curl as the
//! client. Each test names the RFC section it shows; the rules themselves are
//! unit-tested in the core (tests/caching_rules.rs).

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{coralized, temp_dir, Answer, Node};

/// What the scripted origin answers: the response's bytes, or `None` to close
/// the connection without answering.
type Script = dyn Fn(&str, usize) -> Option<Vec<u8>> + Send + Sync;

/// An origin of our own: one request per connection; `script(path, mode)`
/// gives the answer, `mode` is what the test set last. Counts requests per path.
struct Origin {
    requests: Arc<Mutex<HashMap<String, usize>>>,
    mode: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Origin {
    fn start(
        addr: &str,
        script: impl Fn(&str, usize) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Origin {
        let listener = TcpListener::bind(addr).expect("bind the origin");
        listener.set_nonblocking(true).unwrap();
        let requests = Arc::new(Mutex::new(HashMap::new()));
        let mode = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, m, s) = (requests.clone(), mode.clone(), stop.clone());
        let script: Arc<Script> = Arc::new(script);
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (r, m, script) = (r.clone(), m.clone(), script.clone());
                std::thread::spawn(move || {
                    stream.set_nonblocking(false).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    let Some(head) = read_head(&mut stream) else {
                        return;
                    };
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    *r.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                    if let Some(answer) = script(&path, m.load(Ordering::SeqCst)) {
                        let _ = stream.write_all(&answer);
                    }
                });
            }
        });
        Origin {
            requests,
            mode,
            stop,
        }
    }

    fn requests(&self, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    fn set_mode(&self, mode: usize) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return None,
            Ok(k) => buf.extend_from_slice(&b[..k]),
        }
    }
    Some(String::from_utf8_lossy(&buf).to_string())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The IMF-fixdate of `secs`.
fn http_date(secs: u64) -> String {
    let mut v = Vec::new();
    coral::proxy::date::write_http_date(&mut v, secs);
    String::from_utf8(v).unwrap()
}

/// A 200 with `fields` (each ending in CRLF), a `Date` of now and `body`.
fn ok(fields: &str, body: &str) -> Option<Vec<u8>> {
    Some(
        format!(
            "HTTP/1.1 200 OK\r\nDate: {}\r\n{fields}Content-Length: {}\r\n\r\n{body}",
            http_date(unix_now()),
            body.len()
        )
        .into_bytes(),
    )
}

/// A one-core node on `ip` whose origin is on `origin_ip`, with `config`.
fn node(dir: &Path, ip: &str, origin_ip: &str, config: &str) -> Node {
    Node::on(ip)
        .proxy(&dir.join(format!("cache-{ip}")))
        .origin(origin_ip)
        .config_text(&format!(
            "[proxy]\nfirst_byte_timeout_ms = 1500\nidle_timeout_ms = 1500\n{config}"
        ))
        .start()
}

fn url(path: &str) -> String {
    coralized("www.origin.test", 8080, path)
}

/// The `ttl` of coral's `Cache-Status` entry.
fn ttl(a: &Answer) -> Option<i64> {
    let cs = a.header("cache-status");
    let entry = cs.rsplit(", ").next()?;
    entry
        .split("; ")
        .find_map(|p| p.strip_prefix("ttl="))
        .and_then(|t| t.parse().ok())
}

#[test]
fn rfc9111_5_3_invalid_dates_are_expired_and_the_obsolete_forms_are_read() {
    let dir = temp_dir("caching-dates");
    let origin = Origin::start("127.46.1.100:8080", |path, _| {
        let expires = match path {
            "/double-space" => "Expires: Thu, 18  Aug  2050 02:01:18 GMT\r\n",
            "/dashes" => "Expires: Thu, 18-Aug-2050 02:01:18 GMT\r\n",
            "/one-digit-hour" => "Expires: Thu, 18 Aug 2050 2:01:18 GMT\r\n",
            "/two-expires" => {
                "Expires: Thu, 18 Aug 2050 02:01:18 GMT\r\nExpires: Thu, 18 Aug 2050 02:01:18 GMT\r\n"
            }
            "/imf" => "Expires: Thu, 18 Aug 2050 02:01:18 GMT\r\n",
            "/rfc850" => "Expires: Thursday, 18-Aug-50 02:01:18 GMT\r\n",
            "/asctime" => "Expires: Thu Aug 18 02:01:18 2050\r\n",
            "/age-list" => "Cache-Control: max-age=3600\r\nAge: 7200, 0\r\n",
            "/age-invalid" => "Cache-Control: max-age=3600\r\nAge: -7200\r\n",
            _ => "",
        };
        ok(expires, "dated")
    });
    let node = node(dir.path(), "127.46.1.1", "127.46.1.100", "");
    // Already expired (RFC 9111 §5.3) or aged past the lifetime (§5.1): every
    // request goes to the origin again.
    for path in [
        "/double-space",
        "/dashes",
        "/one-digit-hour",
        "/two-expires",
        "/age-list",
    ] {
        for _ in 0..2 {
            let a = node.curl(&url(path), &[]);
            assert_eq!(
                (a.status, a.body.as_slice()),
                (200, &b"dated"[..]),
                "{path}"
            );
        }
        assert_eq!(origin.requests(path), 2, "{path} is stale at once");
    }
    // Valid (the obsolete forms too, RFC 9110 §5.6.7), or an Age ignored as
    // invalid: the second request is a hit.
    for path in ["/imf", "/rfc850", "/asctime", "/age-invalid"] {
        node.curl(&url(path), &[]);
        let a = node.curl(&url(path), &[]);
        assert!(a.header("cache-status").contains("hit"), "{path}: {a:?}");
        assert_eq!(origin.requests(path), 1, "{path} is fresh");
    }
    // The list-valued Age counts: 7200 s old, as the client is told.
    let aged = node.curl(&url("/age-list"), &[]);
    let age: u64 = aged.header("age").parse().unwrap();
    assert!(age >= 7200, "{aged:?}");
}

#[test]
fn rfc9111_5_2_2_no_cache_and_must_revalidate_are_never_served_stale_on_error() {
    let dir = temp_dir("caching-no-cache");
    let origin = Origin::start("127.46.2.100:8080", |path, mode| {
        let cc = match path {
            "/no-cache" => "Cache-Control: max-age=1, no-cache\r\n",
            "/must-revalidate" => "Cache-Control: max-age=1, must-revalidate\r\n",
            "/s-maxage" => "Cache-Control: s-maxage=1\r\n",
            "/cdn-no-cache" => "Cache-Control: max-age=1\r\nCDN-Cache-Control: no-cache\r\n",
            _ => "Cache-Control: max-age=1\r\n",
        };
        match mode {
            0 => ok(&format!("ETag: \"v1\"\r\n{cc}"), "version"),
            1 => {
                Some(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy".to_vec())
            }
            // The origin drops the connection without an answer.
            _ => None,
        }
    });
    let node = node(dir.path(), "127.46.2.1", "127.46.2.100", "");
    let paths = [
        "/no-cache",
        "/must-revalidate",
        "/s-maxage",
        "/cdn-no-cache",
        "/plain",
    ];
    for p in paths {
        assert_eq!(node.curl(&url(p), &[]).body, b"version", "{p}");
    }
    for mode in [1, 2] {
        // Past max-age=1: every copy is stale.
        std::thread::sleep(Duration::from_millis(2100));
        origin.set_mode(mode);
        for p in paths {
            let before = origin.requests(p);
            let a = node.curl(&url(p), &[]);
            assert!(origin.requests(p) > before, "{p}: the origin was asked");
            if p == "/plain" {
                // Served stale on error: the origin did not forbid it.
                assert_eq!((a.status, a.body.as_slice()), (200, &b"version"[..]), "{p}");
                assert!(
                    a.header("cache-status").contains("fwd=stale")
                        && a.header("cache-status").contains("detail=stale-on-error"),
                    "{a:?}"
                );
            } else {
                assert!(a.status >= 500, "mode {mode} {p}: never stale: {a:?}");
                assert_ne!(a.body, b"version", "mode {mode} {p}");
            }
        }
        origin.set_mode(0);
        // The origin is back: every object fetched again.
        for p in paths {
            assert_eq!(node.curl(&url(p), &[]).body, b"version", "{p}");
        }
    }
}

#[test]
fn rfc9213_targeted_fields_override_cache_control_and_coral_cache_control_stops_here() {
    let dir = temp_dir("caching-targeted");
    let origin = Origin::start("127.46.3.100:8080", |path, _| {
        let fields = match path {
            // Browsers may not store it; coral keeps it 10 minutes.
            "/cdn-long" => "Cache-Control: no-store\r\nCDN-Cache-Control: max-age=600\r\n",
            // Browsers may keep it an hour; coral may not store it.
            "/cdn-no-store" => "Cache-Control: max-age=3600\r\nCDN-Cache-Control: no-store\r\n",
            // Coral's own field is more specific than CDN-Cache-Control.
            "/coral" => {
                "Cache-Control: max-age=0\r\nCDN-Cache-Control: no-store\r\nCoral-Cache-Control: max-age=600\r\n"
            }
            // An invalid targeted field is ignored: Cache-Control decides.
            "/invalid" => "Cache-Control: no-store\r\nCDN-Cache-Control: max-age=\"600\"\r\n",
            _ => "",
        };
        ok(fields, "targeted")
    });
    let node = node(dir.path(), "127.46.3.1", "127.46.3.100", "");
    for (path, stored) in [
        ("/cdn-long", true),
        ("/cdn-no-store", false),
        ("/coral", true),
        ("/invalid", false),
    ] {
        let first = node.curl(&url(path), &[]);
        let second = node.curl(&url(path), &[]);
        for a in [&first, &second] {
            assert_eq!(a.body, b"targeted", "{path}");
            assert_eq!(a.header("coral-cache-control"), "", "{path}: {a:?}");
        }
        let want = if stored { 1 } else { 2 };
        assert_eq!(origin.requests(path), want, "{path}");
        if stored {
            assert!(second.header("cache-status").contains("hit"), "{second:?}");
            let t = ttl(&second).unwrap();
            assert!((590..=600).contains(&t), "{path}: ttl {t}: {second:?}");
        }
    }
    // What downstream caches need goes on: Cache-Control and CDN-Cache-Control.
    let a = node.curl(&url("/cdn-long"), &[]);
    assert_eq!(a.header("cache-control"), "no-store");
    assert_eq!(a.header("cdn-cache-control"), "max-age=600");
}

#[test]
fn rfc9211_cache_status_says_what_happened() {
    let dir = temp_dir("caching-status");
    let origin = Origin::start("127.46.4.100:8080", |path, mode| match (path, mode) {
        ("/zero", _) => ok("Cache-Control: max-age=0\r\n", "zero"),
        (_, 0) => ok("Cache-Control: max-age=1\r\n", "one"),
        _ => None,
    });
    let node = node(dir.path(), "127.46.4.1", "127.46.4.100", "");
    // The origin answered 200 and the answer was stored, though stale at once.
    for i in 0..2 {
        let a = node.curl(&url("/zero"), &[]);
        assert_eq!(a.body, b"zero");
        let cs = a.header("cache-status");
        assert!(
            !cs.contains("stale-on-error") && !cs.contains("hit"),
            "{cs}"
        );
        assert!(cs.contains("stored"), "{cs}");
        if i == 0 {
            assert!(cs.starts_with("coral; fwd=uri-miss; stored"), "{cs}");
        } else {
            assert!(cs.starts_with("coral; fwd=stale; stored"), "{cs}");
        }
    }
    // A hit: no fwd, the freshness left.
    node.curl(&url("/one"), &[]);
    let hit = node.curl(&url("/one"), &[]);
    let cs = hit.header("cache-status");
    assert!(cs.starts_with("coral; hit; ttl="), "{cs}");
    assert!(!cs.contains("fwd") && !cs.contains("stored"), "{cs}");
    // Stale, the origin gone: stale-on-error, not stored.
    std::thread::sleep(Duration::from_millis(2100));
    origin.set_mode(1);
    let stale = node.curl(&url("/one"), &[]);
    assert_eq!(stale.body, b"one");
    let cs = stale.header("cache-status");
    assert!(cs.starts_with("coral; fwd=stale; ttl=-"), "{cs}");
    assert!(
        cs.ends_with("detail=stale-on-error") && !cs.contains("stored"),
        "{cs}"
    );
}

#[test]
fn rfc9111_4_2_2_heuristic_freshness_coral_and_rfc() {
    let dir = temp_dir("caching-heuristic");
    let origin = Origin::start("127.46.5.100:8080", |path, _| {
        let fields = match path {
            "/lm" => format!("Last-Modified: {}\r\n", http_date(unix_now() - 10_000)),
            _ => String::new(),
        };
        ok(&fields, "h")
    });
    let coral = node(dir.path(), "127.46.5.1", "127.46.5.100", "");
    // 10 % of the 10 000 s since Last-Modified.
    coral.curl(&url("/lm"), &[]);
    let a = coral.curl(&url("/lm"), &[]);
    let t = ttl(&a).unwrap();
    assert!((990..=1000).contains(&t), "{a:?}");
    // Nothing said: the short default.
    coral.curl(&url("/none"), &[]);
    let a = coral.curl(&url("/none"), &[]);
    assert!(a.header("cache-status").contains("hit"), "{a:?}");
    let t = ttl(&a).unwrap();
    assert!((290..=300).contains(&t), "{a:?}");
    assert_eq!(origin.requests("/none"), 1);
    // heuristic = "rfc": nothing said, nothing stored; Last-Modified still counts.
    let rfc = node(
        dir.path(),
        "127.46.5.2",
        "127.46.5.100",
        "heuristic = \"rfc\"\nheuristic_max_secs = 50\n",
    );
    let before = origin.requests("/none");
    for _ in 0..2 {
        let a = rfc.curl(&url("/none"), &[]);
        assert_eq!(a.body, b"h");
        assert!(!a.header("cache-status").contains("stored"), "{a:?}");
    }
    assert_eq!(origin.requests("/none"), before + 2);
    rfc.curl(&url("/lm"), &[]);
    let a = rfc.curl(&url("/lm"), &[]);
    assert!(a.header("cache-status").contains("hit"), "{a:?}");
    let t = ttl(&a).unwrap();
    assert!(
        (40..=50).contains(&t),
        "capped by heuristic_max_secs: {a:?}"
    );
}
