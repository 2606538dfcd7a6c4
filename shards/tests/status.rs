//! The status page (`/status`, `/status.json` on the admin address) and
//! `coral top`, against real nodes: `coral node` processes on 127.19.x.y,
//! nginx (Debian's) as the origin, curl as the client, headless Chromium
//! (Debian's) as the browser. Run them in a network namespace (README).

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{http_get, temp_dir, web_root, Nginx, Node, CORAL, START_WAIT as WAIT};

/// A proxy node on `ip` (`cores` cores) whose origin is nginx on `origin_ip`.
fn start_node(
    ip: &str,
    cores: usize,
    cache: &Path,
    bootstrap: Option<&str>,
    origin_ip: &str,
) -> Node {
    let node = Node::on(ip).cores(cores).proxy(cache).origin(origin_ip);
    match bootstrap {
        Some(b) => node.bootstrap(b).start(),
        None => node.start(),
    }
}

/// curl for the Coralized `path` on www.origin.test:8080, through `node`;
/// the HTTP status.
fn curl(node: &Node, path: &str) -> u16 {
    node.curl(&common::coralized("www.origin.test", 8080, path), &[])
        .status
}

fn chromium(dir: &Path, url: &str, extra: &[&str]) -> std::process::Output {
    let flags = [&["--hide-scrollbars", "--virtual-time-budget=8000"], extra].concat();
    common::chromium(dir, url, &flags)
}

/// A URL whose query holds markup: the page must show it as text.
const SCRIPT_PATH: &str = "/b.bin?<script>document.title='pwned'</script>";

#[test]
fn status_json_page_in_chromium_and_coral_top_show_what_the_node_served() {
    let dir = temp_dir("page");
    let root = web_root(
        dir.path(),
        &[("a.bin", &[7u8; 41_000]), ("b.bin", &[8u8; 4096])],
    );
    let origin = "127.19.1.100";
    let nginx = Nginx::start(dir.path(), format!("{origin}:8080").parse().unwrap(), &root);
    // Two cores on the node under test (its numbers come from both over the
    // mesh), and two more nodes so that its clusters have members.
    let node = start_node("127.19.1.1", 2, &dir.path().join("c1"), None, origin);
    let _others: Vec<Node> = (2..=3)
        .map(|i| {
            start_node(
                &format!("127.19.1.{i}"),
                1,
                &dir.path().join(format!("c{i}")),
                Some("127.19.1.1"),
                origin,
            )
        })
        .collect();

    // 5 × a.bin, 2 × b.bin, 3 × the URL with markup: 10 served, 3 origin fetches.
    for _ in 0..5 {
        assert_eq!(curl(&node, "/a.bin"), 200);
    }
    for _ in 0..2 {
        assert_eq!(curl(&node, "/b.bin"), 200);
    }
    for _ in 0..3 {
        assert_eq!(curl(&node, SCRIPT_PATH), 200);
    }
    assert_eq!(nginx.requests("/a.bin"), 1);

    // Wait (readiness, not a clock) until the node has measured both others.
    let start = Instant::now();
    let j = loop {
        let j = node.status_json();
        let measured = j["levels"][0]["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["rtt_ms"].is_number())
            .count();
        if measured >= 2 {
            break j;
        }
        assert!(start.elapsed() < WAIT, "the others never joined: {j}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(j["cores"], 2);
    let p = &j["proxy"];
    assert_eq!(
        p["hits"].as_u64().unwrap() + p["misses"].as_u64().unwrap(),
        10,
        "{j}"
    );
    assert_eq!(p["served"], 10, "{j}");
    assert_eq!(p["origin_fetches"], 3, "{j}");
    assert!((p["served_per_origin_fetch"].as_f64().unwrap() - 10.0 / 3.0).abs() < 1e-9);
    assert_eq!(j["cache"]["objects"], 3, "{j}");
    assert_eq!(j["cache"]["limit_bytes"], 64 << 20);
    // Cache use is the objects' bytes (41,000 + 2 × 4,096 of bodies, with
    // their heads, URLs and record framing), not the segment files' size
    // (issue 25: the page showed "32.0 MiB" for one 50 KB object).
    let used = j["cache"]["bytes"].as_u64().unwrap();
    assert!(
        (41_000 + 2 * 4096..41_000 + 2 * 4096 + 3 * 16_384).contains(&used),
        "{j}"
    );
    assert!(j["cache"]["segment_bytes"].as_u64().unwrap() >= used, "{j}");
    let top = j["top_objects"].as_array().unwrap();
    assert_eq!(top.len(), 3, "{j}");
    assert_eq!(
        top[0]["url"],
        "http://www.origin.test.8080.coral.test:8090/a.bin"
    );
    assert_eq!(
        (top[0]["count"].as_u64(), top[0]["bytes"].as_u64()),
        (Some(5), Some(41_000))
    );
    assert_eq!(top[0]["hits"], 4, "the first was a miss");
    assert_eq!(top[1]["count"], 3);
    assert!(
        top[1]["url"].as_str().unwrap().ends_with(SCRIPT_PATH),
        "{j}"
    );
    // Levels: the global one and two clusters, members with their RTTs.
    let levels = j["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3);
    assert!(levels[0]["threshold_ms"].is_null() && levels[1]["threshold_ms"].is_number());
    // DSHT load per key: the pointers to this proxy the node stored for
    // the three objects (on whichever node is closest to each key).
    let hot_here = j["hot_keys"].as_array().unwrap();
    for k in hot_here {
        assert!(
            k["requests_past_minute"].is_number() && k["loaded"].is_boolean(),
            "{k}"
        );
    }
    let proxy_addr = format!("{}:8090", node.ip);
    let all_hot: Vec<serde_json::Value> = std::iter::once(j.clone())
        .chain(_others.iter().map(|o| o.status_json()))
        .flat_map(|s| s["hot_keys"].as_array().unwrap().clone())
        .collect();
    assert!(
        all_hot.iter().any(|k| k["values"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == &proxy_addr)),
        "no node stores a pointer to {proxy_addr}: {all_hot:?}"
    );

    // The page: self-contained, with its own headers.
    let (status, head, page) = http_get(node.admin, "/status");
    assert_eq!(status, 200);
    assert!(head.contains("Content-Type: text/html"), "{head}");
    assert!(
        head.contains("Content-Security-Policy: default-src 'none'"),
        "{head}"
    );
    assert!(
        !page.contains("src=\"http") && !page.contains("href=\"http"),
        "no external fetch"
    );
    assert!(page.len() < 32 << 10, "small: {} bytes", page.len());

    // Chromium runs the page's script: the DOM holds figures from the JSON,
    // and the URL with markup is text, not a script.
    let url = format!("http://{}/status", node.admin);
    let dom = chromium(dir.path(), &url, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    let node_id = j["node"].as_str().unwrap();
    assert!(
        dom.contains(&format!("id=\"node\">{node_id}<")),
        "node id not rendered: {dom}"
    );
    assert!(
        dom.contains("id=\"k-prot\">×3.3<"),
        "origin protection not rendered: {dom}"
    );
    assert!(
        dom.contains("id=\"k-req\">10<"),
        "requests not rendered: {dom}"
    );
    assert!(
        dom.contains("/a.bin</td>"),
        "top objects not rendered: {dom}"
    );
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"),
        "the URL with markup is not shown as text: {dom}"
    );
    assert!(!dom.contains("<title>pwned"), "a URL's script ran: {dom}");
    assert!(
        dom.contains("127.19.1.2"),
        "cluster members not on the map: {dom}"
    );

    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-output");
    std::fs::create_dir_all(&out_dir).unwrap();
    let shot = out_dir.join("status.png");
    let flags = ["--hide-scrollbars", "--virtual-time-budget=8000"];
    let (bytes, err) = common::chromium_screenshot(dir.path(), &url, &flags, "1280,1100", &shot);
    assert!(bytes > 20_000, "no screenshot: {err}");
    println!("status page screenshot: {}", shot.display());

    // coral top --once: one plain frame with rates from two samples.
    let admin = node.admin.to_string();
    let out = Command::new(CORAL)
        .args(["top", "--once", "--interval", "0.5", "--admin", &admin])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let frame = String::from_utf8(out.stdout).unwrap();
    println!("{frame}");
    assert!(!frame.contains('\x1b'), "escape sequences in a plain frame");
    assert!(
        frame.contains(&format!("node {}", &node_id[..16])),
        "{frame}"
    );
    assert!(
        frame.contains("hits 70.0 %"),
        "4 + 1 + 2 hits of 10: {frame}"
    );
    assert!(frame.contains("x3.3 served per origin fetch"), "{frame}");
    let row: Vec<&str> = frame
        .lines()
        .find(|l| l.ends_with("  http://www.origin.test.8080.coral.test:8090/a.bin"))
        .unwrap_or_else(|| panic!("{frame}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[..5], ["5", "80.0", "%", "40.0", "KiB"], "{frame}");
    assert!(
        frame.contains("req/s") && frame.contains("RPC/s") && frame.contains("q/s"),
        "{frame}"
    );
    assert!(frame.lines().any(|l| l.starts_with("L2 ")), "{frame}");
    // Piped (not a terminal), without --once: the same plain frame, exit 0.
    let out = Command::new(CORAL)
        .args(["top", "--interval", "0.2", "--admin", &admin])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success() && !out.stdout.contains(&0x1b),
        "{out:?}"
    );

    // On a terminal (a pty from util-linux's `script`): redraws on the
    // alternate screen until `q`, then restores the terminal.
    let mut top = Command::new("script")
        .args([
            "-qec",
            &format!("{CORAL} top --interval 0.3 --admin {admin}"),
            "/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("script (util-linux) is needed for this test");
    let mut stdout = top.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut b) {
            if n == 0 || tx.send(b[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let frames = |seen: &[u8]| String::from_utf8_lossy(seen).matches("TOP OBJECTS").count();
    let start = Instant::now();
    while frames(&seen) < 2 {
        assert!(
            start.elapsed() < WAIT,
            "no two frames: {}",
            String::from_utf8_lossy(&seen)
        );
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.extend(chunk);
        }
    }
    top.stdin.as_mut().unwrap().write_all(b"q").unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(st) = top.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < WAIT, "coral top did not quit on q");
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(chunk) = rx.recv_timeout(Duration::from_millis(500)) {
        seen.extend(chunk);
    }
    let seen = String::from_utf8_lossy(&seen);
    assert!(status.success(), "{status:?}: {seen}");
    assert!(
        seen.contains("\x1b[?1049h") && seen.contains("\x1b[2J"),
        "{seen}"
    );
    assert!(seen.contains("\x1b[1m  SERVED"), "bold headers: {seen}");
    assert!(
        seen.trim_end().ends_with("\x1b[?25h\x1b[?1049l"),
        "terminal not restored: {seen:?}"
    );
}

#[test]
fn coral_top_without_a_node_fails_clearly() {
    // Nothing listens on this address (in the test's own namespace).
    let out = Command::new(CORAL)
        .args(["top", "--once", "--admin", "127.19.2.1:7080"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the node's admin endpoint at 127.19.2.1:7080"),
        "{err}"
    );
    let out = Command::new(CORAL)
        .args([
            "top",
            "--once",
            "--interval",
            "0",
            "--admin",
            "127.19.2.1:7080",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
