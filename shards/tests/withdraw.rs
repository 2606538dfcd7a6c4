//! Issue 24, item 3: dead nodes out of DNS within seconds, and a node
//! stopping on SIGTERM withdraws itself first. Real `coral node` processes
//! on 127.24.x.y in a network namespace of the test's own
//! (`common::own_network`), an nginx origin limited in rate, kdig asking
//! dnssrv for a Coralized name over and over, curl downloading through a
//! proxy.
//!
//! The figures (how long dnssrv kept naming a node after `kill -9`, and
//! after SIGTERM) are printed; the assertions carry a wide margin for a
//! loaded machine: they show seconds, not the minute and a half of before.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{coralized, curl, kdig, records, temp_dir, web_root, Nginx, Node, ORIGIN};

const DNS_PORT: u16 = 5300;
/// The name asked for: any name under `http.L2.L1.L0.Z` names proxies.
const NAME: &str = "www.x.com.http.L2.L1.L0.coralcdn.test";
/// The client's address; the observer's dnssrv places its /24 at level 0
/// (`client_rtt_ms`), whose cluster holds every node.
const CLIENT: &str = "127.24.9.1";
/// How often the test asks.
const ASK_EVERY: Duration = Duration::from_millis(100);
/// The most a dead or withdrawn node may stay named before the test fails:
/// the rules take about 2 s (`coral::dns::FRESH` + `CHECK_TIMEOUT`); the
/// rest is margin for a loaded machine.
const NAMED_AFTER_MAX: Duration = Duration::from_secs(10);

/// The proxies `dns` names for [`NAME`] to [`CLIENT`] now.
fn named(dns: SocketAddr) -> Vec<String> {
    let out = kdig(dns, &["-b", CLIENT, "+retry=1", "+timeout=2", NAME, "A"]);
    records(&out, "ANSWER")
        .into_iter()
        .filter(|r| r.2 == "A")
        .map(|r| r.3)
        .collect()
}

/// Answers in a row that must leave a node out before it counts as gone:
/// A's two cores each judge for themselves, and the kernel spreads the
/// queries over them.
const GONE_IN_A_ROW: usize = 10;

/// Asks `dns` every [`ASK_EVERY`] until [`GONE_IN_A_ROW`] answers in a
/// row leave out `ip`, within [`NAMED_AFTER_MAX`]; returns how long after
/// the start the last answer naming it came, and whether `alive()` held
/// once it was gone.
fn wait_unnamed(dns: SocketAddr, ip: &str, mut alive: impl FnMut() -> bool) -> (Duration, bool) {
    let start = Instant::now();
    let mut last_named = Duration::ZERO;
    let mut in_a_row = 0;
    loop {
        let names = named(dns);
        let now = start.elapsed();
        if names.is_empty() || names.iter().any(|n| n == ip) {
            last_named = now;
            in_a_row = 0;
        } else {
            in_a_row += 1;
            if in_a_row >= GONE_IN_A_ROW {
                return (last_named, alive());
            }
        }
        assert!(
            now < NAMED_AFTER_MAX,
            "{ip} still named {last_named:?} after it went: {names:?}"
        );
        std::thread::sleep(ASK_EVERY);
    }
}

/// A GET of `path` on the origin through the proxy at `proxy`, on a
/// keep-alive connection that is returned once the whole response is in.
fn keep_alive_get(proxy: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {ORIGIN}.8080.coral.test:8090\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "{text}");
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("a content-length");
            if got.len() >= end + 4 + len {
                return s;
            }
        }
    }
}

/// A node on `ip`: proxy, dnssrv on :5300, [`ORIGIN`] at `origin_ip`.
fn node(ip: &str, cache: &std::path::Path, origin_ip: &str) -> common::NodeBuilder {
    Node::on(ip)
        .proxy(cache)
        .origin(origin_ip)
        .dns(DNS_PORT)
        .config_text("[dnssrv]\nclient_rtt_ms = { \"127.24.9.0\" = 100 }\n")
}

#[test]
fn issue24_a_killed_node_leaves_dns_within_seconds_and_sigterm_withdraws_first() {
    common::own_network();
    let dir = temp_dir("withdraw");
    // 1.2 MB through an origin sending 256 KB/s: a download of some
    // seconds, in flight when B gets SIGTERM; B withdraws for at least
    // `WITHDRAW_WAIT` (3 s) and drains for at most `DRAIN_MAX` (15 s).
    let big: Vec<u8> = (0..1_200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let root = web_root(
        dir.path(),
        &[("big.bin", &big), ("small.txt", b"kept alive\n")],
    );
    let origin_ip = "127.24.0.100";
    let _nginx = Nginx::start_with(
        dir.path(),
        format!("{origin_ip}:8080").parse().unwrap(),
        &root,
        "limit_rate 256k;",
    );
    let cache = |n: &str| {
        let p = dir.path().join(n);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    // The observer A runs two cores: dnssrv on each answers from its own
    // core's routing tables (the one the table sync from core 0 fills).
    let a = node("127.24.1.1", &cache("a"), origin_ip).cores(2).start();
    let mut b = node("127.24.2.1", &cache("b"), origin_ip)
        .bootstrap("127.24.1.1")
        .log(&dir.path().join("b.log"))
        .rust_log(Some("info"))
        .start();
    let mut c = node("127.24.3.1", &cache("c"), origin_ip)
        .bootstrap("127.24.1.1")
        .start();
    let dns: SocketAddr = format!("127.24.1.1:{DNS_PORT}").parse().unwrap();
    // A names all three once B and C joined and answered it, on both its
    // cores (core 1 learns contacts through core 0's table sync): ten
    // answers in a row.
    let mut in_a_row = 0;
    common::wait_until(Duration::from_secs(60), ASK_EVERY, || {
        let names = named(dns);
        let all = ["127.24.1.1", "127.24.2.1", "127.24.3.1"]
            .iter()
            .all(|ip| names.iter().any(|n| n == ip));
        in_a_row = if all { in_a_row + 1 } else { 0 };
        (in_a_row >= 10)
            .then_some(())
            .ok_or_else(|| format!("A never named all three: {names:?}"))
    });
    // Stable: named in every answer for a while (the checks of live
    // proxies never take one out).
    for _ in 0..30 {
        let names = named(dns);
        assert_eq!(names.len(), 3, "a live proxy left out: {names:?}");
        std::thread::sleep(ASK_EVERY);
    }

    // kill -9 C: how long does A keep naming it?
    c.kill();
    let (killed_named, _) = wait_unnamed(dns, "127.24.3.1", || true);
    println!("kill -9: dnssrv named the dead node for {killed_named:?} more");
    // And never again.
    for _ in 0..20 {
        let names = named(dns);
        assert!(
            !names.iter().any(|n| n == "127.24.3.1"),
            "named again: {names:?}"
        );
        assert!(names.iter().any(|n| n == "127.24.2.1"), "{names:?}");
        std::thread::sleep(ASK_EVERY);
    }
    let counters = a.dns_counters();
    assert!(
        counters["checks_sent"].as_u64().unwrap_or(0) > 0,
        "{counters}"
    );

    // A keep-alive connection to B, idle after its response.
    let mut idle = keep_alive_get(b.http(), "/small.txt");
    // A download through B, in flight when B gets SIGTERM.
    let url = coralized(ORIGIN, 8080, "/big.bin");
    let started = Instant::now();
    let download = std::thread::spawn(move || curl("127.24.2.1", &url, &[]));
    common::wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
        let open = b.metric("coral_http_connections_open");
        (open >= 2.0)
            .then_some(())
            .ok_or_else(|| format!("the download never reached B ({open} open)"))
    });
    std::thread::sleep(Duration::from_millis(500));
    b.signal(libc::SIGTERM);
    assert!(!download.is_finished(), "the download ended before SIGTERM");
    let sigterm = Instant::now();
    // B leaves A's answers while B still runs (it finishes the download).
    let (withdrawn_after, b_running) = wait_unnamed(dns, "127.24.2.1", || {
        b.exit_within(Duration::ZERO).is_none()
    });
    println!("SIGTERM: dnssrv named the withdrawing node for {withdrawn_after:?} more");
    assert!(b_running, "B exited before A stopped naming it");
    // B closed the idle connection rather than wait for it.
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = [0u8; 64];
    assert!(
        matches!(idle.read(&mut rest), Ok(0) | Err(_)),
        "the idle keep-alive connection stayed open"
    );
    let answer = download.join().unwrap();
    let took = started.elapsed();
    println!(
        "the download through B took {took:?} (SIGTERM {:?} into it)",
        sigterm.duration_since(started)
    );
    assert!(answer.curl_ok, "{}", answer.curl_err);
    assert_eq!(answer.status, 200);
    assert!(
        answer.body == big,
        "the download was cut: {} of {} bytes",
        answer.body.len(),
        big.len()
    );
    // ... and then B exits 0, having said so.
    let st = b.wait_exit(Duration::from_secs(40));
    let log = b.log();
    assert!(st.success(), "B exited {st}:\n{log}");
    assert!(
        log.contains("withdrawing") && log.contains("withdrawn and drained"),
        "{log}"
    );
    // A names itself alone now.
    let names = named(dns);
    assert_eq!(names, ["127.24.1.1"], "{names:?}");
}
