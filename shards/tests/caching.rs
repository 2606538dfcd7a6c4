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

use common::{coralized, curl, temp_dir, wait_until, Answer, Node};

/// What the scripted origin answers: the response's bytes, or `None` to close
/// the connection without answering.
type Script = dyn Fn(&str, &str, usize) -> Option<Vec<u8>> + Send + Sync;

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
        Origin::start_with_heads(addr, move |_, path, mode| script(path, mode))
    }

    /// As [`Origin::start`], the script also given the request's head
    /// (`script(head, path, mode)`).
    fn start_with_heads(
        addr: &str,
        script: impl Fn(&str, &str, usize) -> Option<Vec<u8>> + Send + Sync + 'static,
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
                    if let Some(answer) = script(&head, &path, m.load(Ordering::SeqCst)) {
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
        // Three seconds, not one: freshness counts whole seconds, so two
        // requests a few milliseconds apart that straddle a second's edge
        // already see an age of 1, and max-age=1 made the hit below stale
        // (a CI failure on a loaded machine: "fwd=stale; stored; ttl=1").
        (_, 0) => ok("Cache-Control: max-age=3\r\n", "one"),
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
    // The freshness itself is what is waited out here: past max-age by a
    // whole second, so that the ttl shown is negative (whole seconds).
    std::thread::sleep(Duration::from_millis(4100));
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

/// The value of the request field `name` (lower case) in `head`, or "".
fn field<'a>(head: &'a str, name: &str) -> &'a str {
    head.split("\r\n")
        .skip(1)
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then_some(v.trim())
        })
        .unwrap_or("")
}

/// Issue 22 item 6 with issue 26's `Vary` without re-asking: the fields an
/// origin host's answers vary on are learned and sent with the first
/// request for its other URLs, so each is one origin request (not two); a
/// learned field an answer does not vary on makes that answer the asking
/// client's alone, so a reflecting origin cannot be used to poison.
#[test]
fn issue_26_vary_learned_per_host_saves_origin_requests_and_cannot_poison() {
    let dir = temp_dir("caching-learned-vary");
    let heads = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = heads.clone();
    let origin = Origin::start_with_heads("127.46.7.100:8080", move |head, path, _| {
        seen.lock().unwrap().push(head.to_string());
        let body = format!("variant={}\n", field(head, "x-variant"));
        if path.starts_with("/lang/") {
            ok("Vary: X-Variant\r\nCache-Control: max-age=600\r\n", &body)
        } else {
            // Reflects the field, and says nothing of it.
            ok("Cache-Control: max-age=600\r\n", &body)
        }
    });
    let node = node(dir.path(), "127.46.7.1", "127.46.7.100", "");
    let get = |path: &str, value: Option<&str>| {
        let h;
        let mut args = vec!["-H", "X-Forwarded-Host: evil.example", "-H", "Cookie: s=1"];
        if let Some(v) = value {
            h = format!("X-Variant: {v}");
            args.extend(["-H", h.as_str()]);
        }
        let a = node.curl(&url(path), &args);
        assert_eq!(a.status, 200, "{path}: {a:?}");
        (
            String::from_utf8_lossy(&a.body).to_string(),
            a.header("cache-status").to_string(),
        )
    };
    // The host's first answer varies on a field coral did not send: it is
    // that client's, not stored, and the field is learned (no second
    // request for it).
    let (body, cs) = get("/lang/1", Some("a"));
    assert_eq!(body, "variant=\n");
    assert!(
        cs.contains("fwd=uri-miss") && !cs.contains("stored"),
        "{cs}"
    );
    assert_eq!(origin.requests("/lang/1"), 1, "not asked again");
    let (body, cs) = get("/lang/1", Some("a"));
    assert_eq!(body, "variant=a\n");
    assert!(cs.contains("stored"), "{cs}");
    assert!(get("/lang/1", Some("a")).1.contains("hit"));
    // Every other URL of the host: one origin request, stored at once.
    for i in 2..=4 {
        let path = format!("/lang/{i}");
        let (body, cs) = get(&path, Some("a"));
        assert_eq!(body, "variant=a\n");
        assert!(cs.contains("stored"), "{path}: {cs}");
        let (body, cs) = get(&path, Some("a"));
        assert_eq!(body, "variant=a\n");
        assert!(cs.contains("hit"), "{path}: {cs}");
        assert_eq!(origin.requests(&path), 1, "{path}");
    }
    // Four URLs, five origin requests (re-asking took eight).
    let lang_requests: usize = (1..=4)
        .map(|i| origin.requests(&format!("/lang/{i}")))
        .sum();
    assert_eq!(lang_requests, 5);
    // Each value its own variant; a request without the field its own.
    assert_eq!(get("/lang/1", Some("b")).0, "variant=b\n");
    assert_eq!(get("/lang/1", None).0, "variant=\n");
    assert_eq!(get("/lang/1", Some("a")).0, "variant=a\n");

    // A hostile client sends the learned field to a URL whose answer
    // reflects it without Vary: it gets its own reflection, nothing is
    // stored, and the field is unlearned.
    let (body, cs) = get("/reflect", Some("evil"));
    assert_eq!(body, "variant=evil\n");
    assert!(!cs.contains("stored") && !cs.contains("hit"), "{cs}");
    // Clean clients, with the field or without, never get the reflection:
    // the field no longer goes to the origin for that URL.
    for value in [None, Some("good"), Some("evil"), None] {
        let (body, _) = get("/reflect", value);
        assert_eq!(body, "variant=\n", "{value:?}");
    }
    assert_eq!(origin.requests("/reflect"), 2, "the second fill was stored");
    assert!(get("/reflect", Some("good")).1.contains("hit"));
    // A varying URL keeps its variants apart, the hostile value included.
    assert_eq!(get("/lang/2", Some("evil")).0, "variant=evil\n");
    assert_eq!(get("/lang/2", Some("a")).0, "variant=a\n");
    assert_eq!(get("/lang/2", None).0, "variant=\n");
    // No other client field ever reached the origin.
    for h in heads.lock().unwrap().iter() {
        assert_eq!(field(h, "x-forwarded-host"), "", "{h}");
        assert_eq!(field(h, "cookie"), "", "{h}");
    }
}

/// RFC 9211 §2.5: requests queued for a fill before its first byte joined
/// another request's forward: `collapsed`; the request whose fill it was is
/// not; the origin is asked once.
#[test]
fn rfc9211_2_5_requests_queued_before_the_first_byte_are_collapsed() {
    let dir = temp_dir("caching-collapsed");
    let gate = Arc::new(AtomicBool::new(false));
    let open = gate.clone();
    let origin = Origin::start("127.46.8.100:8080", move |_, _| {
        // Holds the answer until the test has queued its requests.
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while !open.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        ok("Cache-Control: max-age=600\r\n", "slow")
    });
    let node = Node::on("127.46.8.1")
        .proxy(&dir.path().join("cache"))
        .origin("127.46.8.100")
        .config_text("[proxy]\nfirst_byte_timeout_ms = 40000\n")
        .start();
    let u = url("/slow");
    let ask = |u: String| std::thread::spawn(move || curl("127.46.8.1", &u, &[]));
    let first = ask(u.clone());
    wait_until(Duration::from_secs(30), Duration::from_millis(20), || {
        (origin.requests("/slow") == 1)
            .then_some(())
            .ok_or_else(|| "no origin request".to_string())
    });
    let queued: Vec<_> = (0..4).map(|_| ask(u.clone())).collect();
    wait_until(Duration::from_secs(30), Duration::from_millis(20), || {
        let misses = node.status_json()["proxy"]["misses"].as_u64().unwrap_or(0);
        (misses >= 5)
            .then_some(())
            .ok_or(format!("{misses} misses"))
    });
    gate.store(true, Ordering::SeqCst);
    let first = first.join().unwrap();
    assert_eq!(first.body, b"slow");
    let cs = first.header("cache-status");
    assert!(
        cs.contains("fwd=uri-miss; stored") && !cs.contains("collapsed"),
        "{cs}"
    );
    for q in queued {
        let a = q.join().unwrap();
        assert_eq!(a.body, b"slow", "{a:?}");
        let cs = a.header("cache-status");
        assert!(
            cs.contains("fwd=uri-miss") && cs.contains("collapsed"),
            "{cs}"
        );
        assert!(!cs.contains("hit"), "{cs}");
    }
    assert_eq!(origin.requests("/slow"), 1);
}

/// RFC 9211 §2.3: `fwd-status` says what the origin answered when the
/// client got another status: a 304 that revalidated the copy served 200,
/// a 503 over which a stale copy was served.
#[test]
fn rfc9211_2_3_fwd_status_says_what_the_origin_answered() {
    let dir = temp_dir("caching-fwd-status");
    let failing = Arc::new(AtomicBool::new(false));
    let fail = failing.clone();
    let origin = Origin::start_with_heads("127.46.9.100:8080", move |head, _, _| {
        if fail.load(Ordering::SeqCst) {
            return Some(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\ndown".to_vec(),
            );
        }
        if field(head, "if-none-match") == "\"v1\"" {
            return Some(
                b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\n\r\n"
                    .to_vec(),
            );
        }
        ok("ETag: \"v1\"\r\nCache-Control: max-age=1\r\n", "v")
    });
    let node = node(dir.path(), "127.46.9.1", "127.46.9.100", "");
    let first = node.curl(&url("/v"), &[]);
    let cs = first.header("cache-status");
    assert!(cs.starts_with("coral; fwd=uri-miss; stored"), "{cs}");
    assert!(!cs.contains("fwd-status"), "the client's status too: {cs}");
    std::thread::sleep(Duration::from_millis(2100));
    let revalidated = node.curl(&url("/v"), &[]);
    assert_eq!(
        (revalidated.status, revalidated.body.as_slice()),
        (200, &b"v"[..])
    );
    let cs = revalidated.header("cache-status");
    assert!(cs.starts_with("coral; fwd=stale; fwd-status=304"), "{cs}");
    failing.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(2100));
    let stale = node.curl(&url("/v"), &[]);
    assert_eq!((stale.status, stale.body.as_slice()), (200, &b"v"[..]));
    let cs = stale.header("cache-status");
    assert!(cs.starts_with("coral; fwd=stale; fwd-status=503"), "{cs}");
    assert!(cs.ends_with("detail=stale-on-error"), "{cs}");
    assert_eq!(origin.requests("/v"), 3);
}
