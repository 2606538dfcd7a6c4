//! Verified peer bytes and catching a lying origin-fetcher (issue 22 items
//! 4–5; SECURITY.md, "Threat model") end to end on 127.31.x.y: `coral node`
//! processes, nginx as the origin (sending RFC 9530 `Repr-Digest` where the
//! test says so), curl as the clean client.
//!
//! The forging nodes are this crate's binary built with the test-only
//! features, forging only when `CORAL_FORGE` says so:
//!
//! ```text
//! cargo test --release -p coral-shards --features forge-peer-bytes,forge-origin --test verify
//! ```
//!
//! The README's test command (`cargo test --release --workspace
//! --all-features`, what CI runs) builds them. Without the features those
//! tests are ignored (listed as such, never passed silently); the honest
//! ones run either way.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{coralized, temp_dir, wait_until, web_root, Nginx, Node, NodeBuilder, START_WAIT};

/// A body of `n` bytes that is easy to tell from its forgeries (forging
/// turns `o` into `0`).
fn body(n: usize) -> Vec<u8> {
    let line = b"hello from the origin, bytes no node may change\n";
    line.iter().copied().cycle().take(n).collect()
}

/// A one-core proxy node on `ip` whose origin `www.origin.test` is `origin_ip`.
fn proxy_node(dir: &Path, ip: &str, origin_ip: &str) -> NodeBuilder {
    Node::on(ip)
        .proxy(&dir.join(format!("cache-{ip}")))
        .origin(origin_ip)
}

/// nginx on `ip:8080` serving `files`, each with its true `Repr-Digest`
/// when `digest` says so.
fn origin(dir: &Path, ip: &str, files: &[(&str, &[u8], bool)]) -> Nginx {
    let list: Vec<(&str, &[u8])> = files.iter().map(|(n, b, _)| (*n, *b)).collect();
    let root = web_root(dir, &list);
    let mut locations = String::new();
    for (name, bytes, digest) in files {
        if *digest {
            let d = coral::verify::sha256(bytes);
            locations.push_str(&format!(
                "location = /{name} {{ add_header Repr-Digest \"{}\"; }}\n",
                coral::verify::repr_digest_field(&d)
            ));
        }
    }
    Nginx::start_with(
        dir,
        format!("{ip}:8080").parse().unwrap(),
        &root,
        &locations,
    )
}

/// The `coral_verify_events_total` sample of `event` on `node`.
fn event(node: &Node, event: &str) -> f64 {
    node.metric(&format!("coral_verify_events_total{{event=\"{event}\"}}"))
}

/// Waits until `node`'s DSHT names `holder`'s proxy under the key of
/// `path` (so its next miss goes to `holder` as a peer). If it never does,
/// the panic carries what explains it, as [`wait_evidence`]'s does: both
/// nodes' gets of the key, their levels and their DSHT counters.
fn wait_pointer(node: &Node, holder: &Node, path: &str) {
    let key = coral::proxy::names::cache_key(&format!("http://www.origin.test:8080{path}"));
    let want = format!("{}:8090", holder.ip);
    let start = std::time::Instant::now();
    loop {
        let got = node.client(&["get", &key.to_string()]);
        let found = got["values"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["addr"].as_str() == Some(&want));
        if found {
            return;
        }
        if start.elapsed() >= START_WAIT {
            panic!(
                "no pointer to {want} for {path} under {key} at {}: {got}\n{}",
                node.ip,
                dsht_state(&[node, holder], &key.to_string())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Two nodes: `a` (first, started with `a_env`) and `b` (bootstrapped
/// through `a`), both with the origin on `net.100`.
fn pair(dir: &Path, net: &str, a_env: Option<(&str, &str)>) -> (Node, Node) {
    pair_with(dir, net, a_env, "")
}

/// As [`pair`], `b` with the config file `b_config`.
fn pair_with(dir: &Path, net: &str, a_env: Option<(&str, &str)>, b_config: &str) -> (Node, Node) {
    let origin_ip = format!("{net}.100");
    let mut a = proxy_node(dir, &format!("{net}.1"), &origin_ip);
    if let Some((k, v)) = a_env {
        a = a.env(k, v);
    }
    let a = a.start();
    let mut b = proxy_node(dir, &format!("{net}.2"), &origin_ip).bootstrap(&format!("{net}.1"));
    if !b_config.is_empty() {
        b = b.config_text(b_config);
    }
    let b = b.start();
    a.wait_joined(1);
    b.wait_joined(1);
    (a, b)
}

/// Item 4: the origin-fetcher signs what it stores; a node that fetches
/// from it as a peer verifies every chunk and gets the origin's bytes, its
/// copy no fresher than signed. Several chunks, a short last one, and a
/// body of exactly one chunk.
#[test]
fn issue22_item4_a_peer_copy_is_verified_chunk_by_chunk() {
    let dir = temp_dir("verify-honest");
    let big = body(5 * 65536 + 1234);
    let one = body(65536);
    let small = body(300);
    let nginx = origin(
        dir.path(),
        "127.31.1.100",
        &[
            ("big.bin", &big, true),
            ("one.bin", &one, false),
            ("small.txt", &small, true),
        ],
    );
    let (a, b) = pair(dir.path(), "127.31.1", None);
    for (path, bytes) in [
        ("/big.bin", &big),
        ("/one.bin", &one),
        ("/small.txt", &small),
    ] {
        let url = coralized("www.origin.test", 8080, path);
        let first = a.curl(&url, &[]);
        assert_eq!(first.status, 200, "{first:?}");
        assert!(first.body == *bytes, "{path}: a served other bytes");
        assert!(
            first.header("coral-signed-head").is_empty(),
            "a client got the records"
        );
        wait_pointer(&b, &a, path);
        let second = b.curl(&url, &[]);
        assert_eq!(second.status, 200, "{second:?}");
        assert!(second.body == *bytes, "{path}: b served other bytes");
        assert!(
            second.header("cache-status").contains("detail=peer-l"),
            "{path}: b did not fetch from a: {second:?}"
        );
        assert_eq!(nginx.requests(path), 1, "{path}: one origin fetch");
    }
    assert_eq!(event(&a, "signed_fills"), 3.0);
    assert_eq!(event(&a, "served_signed"), 3.0);
    assert_eq!(event(&a, "repr_digest_checked"), 2.0);
    assert_eq!(event(&b, "verified_fills"), 3.0);
    assert_eq!(event(&b, "forged"), 0.0);
    assert_eq!(
        b.metric("coral_verify_peer_bytes_total"),
        (big.len() + one.len() + small.len()) as f64
    );
    // A client's hit is unchanged: no records, the stored length.
    let hit = b.curl(&coralized("www.origin.test", 8080, "/big.bin"), &[]);
    assert!(hit.header("cache-status").contains("hit"), "{hit:?}");
    assert_eq!(hit.header("content-length"), big.len().to_string());
}

/// Item 5 (a): an origin whose body contradicts its own `Repr-Digest` is
/// not stored, not signed, and not served to peers.
#[test]
fn issue22_item5_an_origin_body_contradicting_its_repr_digest_is_dropped() {
    let dir = temp_dir("verify-repr");
    let page = body(1000);
    let root = web_root(dir.path(), &[("lie.txt", &page)]);
    let wrong = coral::verify::repr_digest_field(&coral::verify::sha256(b"another body"));
    let nginx = Nginx::start_with(
        dir.path(),
        "127.31.2.100:8080".parse().unwrap(),
        &root,
        &format!("location = /lie.txt {{ add_header Repr-Digest \"{wrong}\"; }}\n"),
    );
    let a = proxy_node(dir.path(), "127.31.2.1", "127.31.2.100").start();
    let url = coralized("www.origin.test", 8080, "/lie.txt");
    let _ = a.curl(&url, &[]);
    assert_eq!(event(&a, "repr_digest_failed"), 1.0);
    assert_eq!(event(&a, "signed_fills"), 0.0);
    // Not cached: the next request asks the origin again.
    let _ = a.curl(&url, &[]);
    assert_eq!(nginx.requests("/lie.txt"), 2);
}

/// Item 4: a relay that changes a byte of the first chunk (its valid
/// signature beside it) is dropped at that chunk, before any client is
/// answered from it: the client gets the origin's bytes in the same
/// request, and the forger is not asked again.
#[test]
#[cfg_attr(
    not(feature = "forge-peer-bytes"),
    ignore = "needs --features forge-peer-bytes"
)]
fn issue22_item4_a_forging_relay_is_dropped_at_its_first_bad_chunk() {
    let dir = temp_dir("verify-relay");
    let page = body(3 * 65536 + 10);
    let other = body(2000);
    let nginx = origin(
        dir.path(),
        "127.31.3.100",
        &[("page.bin", &page, false), ("other.txt", &other, false)],
    );
    let (a, b) = pair(
        dir.path(),
        "127.31.3",
        Some(("CORAL_FORGE", "peer-bytes:0")),
    );
    let url = coralized("www.origin.test", 8080, "/page.bin");
    assert!(a.curl(&url, &[]).body == page, "the forger's own clients");
    wait_pointer(&b, &a, "/page.bin");
    let got = b.curl(&url, &[]);
    assert_eq!(got.status, 200, "{got:?}");
    assert!(got.body == page, "b served the forgery");
    assert_eq!(event(&a, "served_signed"), 1.0, "b asked a");
    assert_eq!(event(&b, "forged"), 1.0);
    assert_eq!(nginx.requests("/page.bin"), 2, "b went to the origin");
    // The forger is not asked again, for any object.
    let url = coralized("www.origin.test", 8080, "/other.txt");
    assert!(a.curl(&url, &[]).body == other);
    wait_pointer(&b, &a, "/other.txt");
    assert!(b.curl(&url, &[]).body == other);
    assert_eq!(event(&a, "served_signed"), 1.0, "b asked the forger again");
    assert!(event(&b, "distrusted") >= 1.0);
}

/// Item 4: a forged later chunk is caught before it is forwarded or
/// stored; without resumable fills (issue 24 item 1, another branch) that
/// client's transfer is cut (never a complete forgery), and the next
/// request gets the origin's bytes.
#[test]
#[cfg_attr(
    not(feature = "forge-peer-bytes"),
    ignore = "needs --features forge-peer-bytes"
)]
fn issue22_item4_a_forged_later_chunk_is_never_served_complete() {
    let dir = temp_dir("verify-later");
    let page = body(4 * 65536);
    let nginx = origin(dir.path(), "127.31.4.100", &[("page.bin", &page, false)]);
    let (a, b) = pair(
        dir.path(),
        "127.31.4",
        Some(("CORAL_FORGE", "peer-bytes:2")),
    );
    let url = coralized("www.origin.test", 8080, "/page.bin");
    assert!(a.curl(&url, &[]).body == page);
    wait_pointer(&b, &a, "/page.bin");
    let first = b.curl(&url, &[]);
    assert!(
        first.body.len() <= 2 * 65536 || first.body == page,
        "forged bytes forwarded: {} bytes",
        first.body.len()
    );
    assert!(
        first.body[..first.body.len().min(2 * 65536)] == page[..first.body.len().min(2 * 65536)]
    );
    assert_eq!(event(&b, "forged"), 1.0);
    let again = b.curl(&url, &[]);
    assert!(again.body == page, "{again:?}");
    assert_eq!(event(&a, "served_signed"), 1.0, "b asked the forger again");
    assert!(nginx.requests("/page.bin") >= 2);
}

/// Item 5 (a): an origin-fetcher that stores and signs other bytes than
/// the origin sent, keeping the origin's `Repr-Digest` in its signed head,
/// is caught by the peer that checks the digest: the signer is distrusted
/// (none of its copies is used again), and the client gets the origin's
/// bytes.
#[test]
#[cfg_attr(
    not(feature = "forge-origin"),
    ignore = "needs --features forge-origin"
)]
fn issue22_item5_a_lying_origin_fetcher_is_caught_by_the_origins_repr_digest() {
    let dir = temp_dir("verify-origin");
    let page = body(2000);
    let other = body(3000);
    let nginx = origin(
        dir.path(),
        "127.31.5.100",
        &[("page.txt", &page, true), ("other.txt", &other, false)],
    );
    let (a, b) = pair(dir.path(), "127.31.5", Some(("CORAL_FORGE", "origin")));
    let url = coralized("www.origin.test", 8080, "/page.txt");
    let forged = a.curl(&url, &[]);
    assert!(forged.body != page, "the forger forged for its own clients");
    wait_pointer(&b, &a, "/page.txt");
    let got = b.curl(&url, &[]);
    assert!(got.body == page, "b served the forgery: {got:?}");
    assert_eq!(event(&b, "forged"), 1.0);
    assert_eq!(nginx.requests("/page.txt"), 2);
    // Its signature on another object (no Repr-Digest there) is not used.
    let url = coralized("www.origin.test", 8080, "/other.txt");
    let _ = a.curl(&url, &[]);
    wait_pointer(&b, &a, "/other.txt");
    assert!(b.curl(&url, &[]).body == other);
    assert!(event(&b, "distrusted") >= 1.0);
    assert_eq!(nginx.requests("/other.txt"), 2);
}

/// Every verified peer copy audited (`audit_per_million = 1000000`).
const AUDIT_ALL: &str = "[proxy]\naudit_per_million = 1000000\n";

/// Item 5 (b): an audit of an honest copy asks the origin once more and
/// finds it agrees.
#[test]
fn issue22_item5_an_audit_of_an_honest_copy_passes() {
    let dir = temp_dir("verify-audit-honest");
    let page = body(100_000);
    let nginx = origin(dir.path(), "127.31.6.100", &[("page.bin", &page, false)]);
    let (a, b) = pair_with(dir.path(), "127.31.6", None, AUDIT_ALL);
    let url = coralized("www.origin.test", 8080, "/page.bin");
    assert!(a.curl(&url, &[]).body == page);
    wait_pointer(&b, &a, "/page.bin");
    assert!(b.curl(&url, &[]).body == page);
    wait_until(START_WAIT, Duration::from_millis(100), || {
        let n = event(&b, "audits");
        let open = n - event(&b, "audit_failed") - event(&b, "audit_inconclusive");
        (n == 1.0 && b.metric("coral_verify_audit_bytes_total") == page.len() as f64)
            .then_some(open)
            .ok_or_else(|| format!("audits {n}"))
    });
    assert_eq!(event(&b, "audit_failed"), 0.0);
    assert_eq!(event(&b, "audit_inconclusive"), 0.0);
    assert_eq!(nginx.requests("/page.bin"), 2, "the fill and the audit");
    assert!(b.curl(&url, &[]).header("cache-status").contains("hit"));
}

/// Item 5 (b): an origin-fetcher that signs other bytes than the origin
/// sent, for an origin that sends no `Repr-Digest`, passes every signature
/// check; the audit catches it: the copy is removed, the signer
/// distrusted, and the next request gets the origin's bytes.
#[test]
#[cfg_attr(
    not(feature = "forge-origin"),
    ignore = "needs --features forge-origin"
)]
fn issue22_item5_an_audit_catches_a_lying_origin_fetcher_without_repr_digest() {
    let dir = temp_dir("verify-audit");
    let page = body(100_000);
    let nginx = origin(dir.path(), "127.31.7.100", &[("page.bin", &page, false)]);
    let (a, b) = pair_with(
        dir.path(),
        "127.31.7",
        Some(("CORAL_FORGE", "origin")),
        AUDIT_ALL,
    );
    let url = coralized("www.origin.test", 8080, "/page.bin");
    assert!(a.curl(&url, &[]).body != page, "a forges");
    wait_pointer(&b, &a, "/page.bin");
    // Every signature holds: b cannot tell yet.
    let _ = b.curl(&url, &[]);
    assert_eq!(event(&b, "forged"), 0.0);
    wait_until(START_WAIT, Duration::from_millis(100), || {
        (event(&b, "audit_failed") == 1.0)
            .then_some(())
            .ok_or_else(|| format!("audits {}", event(&b, "audits")))
    });
    let again = b.curl(&url, &[]);
    assert!(again.body == page, "the forged copy was kept: {again:?}");
    assert_eq!(
        nginx.requests("/page.bin"),
        3,
        "a's fill, b's audit, b's fill from the origin"
    );
    assert!(event(&b, "distrusted") >= 1.0);
}

/// The `ttl=` of a `Cache-Status` value's last entry (this node's), in
/// seconds.
fn ttl(cache_status: &str) -> i64 {
    cache_status
        .rsplit(',')
        .next()
        .unwrap_or_default()
        .split(';')
        .find_map(|p| p.trim().strip_prefix("ttl="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no ttl in {cache_status}"))
}

/// Item 4: a peer that claims a longer lifetime than the origin gave (the
/// attack of issue 22 (1): a day) gets the copy no fresher than the
/// origin-fetcher signed (nginx's `expires 1h`).
#[test]
#[cfg_attr(
    not(feature = "forge-peer-bytes"),
    ignore = "needs --features forge-peer-bytes"
)]
fn issue22_item4_a_peer_copy_is_fresh_no_longer_than_the_signed_expiry() {
    let dir = temp_dir("verify-lifetime");
    let page = body(5000);
    let _nginx = origin(dir.path(), "127.31.8.100", &[("page.txt", &page, false)]);
    let (a, b) = pair(
        dir.path(),
        "127.31.8",
        Some(("CORAL_FORGE", "peer-lifetime")),
    );
    let url = coralized("www.origin.test", 8080, "/page.txt");
    assert!(a.curl(&url, &[]).body == page);
    wait_pointer(&b, &a, "/page.txt");
    let got = b.curl(&url, &[]);
    assert!(got.body == page);
    let cs = got.header("cache-status");
    assert!(cs.contains("detail=peer-l"), "{cs}");
    assert!(ttl(cs) <= 3600, "the peer's lifetime was taken: {cs}");
    let hit = b.curl(&url, &[]);
    assert!(ttl(hit.header("cache-status")) <= 3600, "{hit:?}");
}

/// Item 4: records live in memory; a restarted origin-fetcher makes them
/// again from its stored copy when a peer first asks, and the peer's copy
/// verifies.
#[test]
fn issue22_item4_a_restarted_node_serves_peers_verified_copies() {
    let dir = temp_dir("verify-restart");
    let page = body(3 * 65536 + 7);
    let nginx = origin(dir.path(), "127.31.9.100", &[("page.bin", &page, true)]);
    let mut a = proxy_node(dir.path(), "127.31.9.1", "127.31.9.100").start();
    let url = coralized("www.origin.test", 8080, "/page.bin");
    assert!(a.curl(&url, &[]).body == page);
    a.kill();
    a.restart();
    let b = proxy_node(dir.path(), "127.31.9.2", "127.31.9.100")
        .bootstrap("127.31.9.1")
        .start();
    a.wait_joined(1);
    b.wait_joined(1);
    wait_pointer(&b, &a, "/page.bin");
    let got = b.curl(&url, &[]);
    assert!(got.body == page);
    assert!(
        got.header("cache-status").contains("detail=peer-l"),
        "{got:?}"
    );
    assert_eq!(event(&a, "resigned"), 1.0);
    assert_eq!(event(&b, "verified_fills"), 1.0);
    assert_eq!(nginx.requests("/page.bin"), 1);
}

/// Three nodes on `net`: `f` (first, with `f_env`), `b` (with `b_config`)
/// and `c`, both bootstrapped through `f`; the origin on `net.100`.
fn trio(
    dir: &Path,
    net: &str,
    f_env: Option<(&str, &str)>,
    b_env: Option<(&str, &str)>,
    b_config: &str,
) -> (Node, Node, Node) {
    let origin_ip = format!("{net}.100");
    let mut f = proxy_node(dir, &format!("{net}.1"), &origin_ip)
        .args(&["--state-dir", state_of(dir, "f").to_str().unwrap()]);
    if let Some((k, v)) = f_env {
        f = f.env(k, v);
    }
    let f = f.start();
    let mut b = proxy_node(dir, &format!("{net}.2"), &origin_ip)
        .bootstrap(&format!("{net}.1"))
        .config_text(b_config);
    if let Some((k, v)) = b_env {
        b = b.env(k, v);
    }
    let b = b.start();
    let c = proxy_node(dir, &format!("{net}.3"), &origin_ip)
        .bootstrap(&format!("{net}.1"))
        .start();
    for n in [&f, &b, &c] {
        n.wait_joined(2);
    }
    (f, b, c)
}

/// The state directory of the node `name` of a test in `dir`.
fn state_of(dir: &Path, name: &str) -> std::path::PathBuf {
    let d = dir.join(format!("state-{name}"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The public key of the node whose state directory is `state` (its
/// `node.key`: one line of hex, `#` comments).
fn node_key(state: &Path) -> coral::identity::PublicKey {
    let text = std::fs::read_to_string(state.join("node.key")).unwrap();
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap();
    let mut secret = [0u8; 32];
    coral::identity::from_hex(line, &mut secret).unwrap();
    coral::identity::KeyPair::from_secret(&secret).public()
}

/// Waits until `node`'s DSHT holds evidence against the node whose state
/// directory is `state` (an accuser's pointer under its evidence key):
/// the accuser's put has landed. If it never does, the panic carries what
/// explains it (the issue 27 session 10 flake): every node of `trio`'s get
/// of that key (which of them holds it), its levels and its DSHT and
/// evidence counters.
fn wait_evidence(node: &Node, state: &Path, trio: [&Node; 3]) {
    let key = coral::verify::evidence::evidence_key(&node_key(state));
    let start = std::time::Instant::now();
    loop {
        let got = node.client(&["get", &key.to_string()]);
        if got["values"].as_array().is_some_and(|v| !v.is_empty()) {
            return;
        }
        if start.elapsed() >= START_WAIT {
            panic!(
                "no evidence under {key} from {}: {got}\n{}",
                node.ip,
                dsht_state(&trio, &key.to_string())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// For a failure message: each node's get of `key`, its levels (contacts,
/// clusters) and its DSHT and evidence counters (`dsht`, `verify` blocks of
/// its status).
fn dsht_state(nodes: &[&Node], key: &str) -> String {
    let mut out = String::new();
    for n in nodes {
        let get = n.client_output(&["get", key]);
        let levels = n.client_output(&["levels"]);
        let status = n.status_json();
        out += &format!(
            "node {}:\n  get {key}: {}\n  levels: {}\n  status: {}\n",
            n.ip,
            String::from_utf8_lossy(&get.stdout).trim(),
            String::from_utf8_lossy(&levels.stdout).trim(),
            status,
        );
    }
    out
}

/// Waits until `event` on `node` reaches `n`.
fn wait_event(node: &Node, name: &str, n: f64) {
    wait_until(START_WAIT, Duration::from_millis(100), || {
        let got = event(node, name);
        (got >= n)
            .then_some(())
            .ok_or_else(|| format!("{name} on {}: {got}", node.ip))
    });
}

/// Item 5 (c): a forging origin-fetcher `f` caught by `b`'s audit is
/// proven a forger to `c` by the evidence `b` stored in the DSHT: `c`,
/// which never fetched from `f`, is asked for an object whose only pointer
/// names `f` and whose copy `f` signed; it looks `f`'s evidence key up,
/// fetches `b`'s record, checks it with the origin itself, refuses `f`'s
/// copy and serves the origin's bytes.
#[test]
#[cfg_attr(
    not(feature = "forge-origin"),
    ignore = "needs --features forge-origin"
)]
fn issue22_item5c_evidence_in_the_dsht_makes_other_nodes_refuse_a_forger() {
    let dir = temp_dir("verify-evidence");
    let page = body(100_000);
    let other = body(50_000);
    let nginx = origin(
        dir.path(),
        "127.31.10.100",
        &[("page.bin", &page, false), ("other.bin", &other, false)],
    );
    let (f, b, c) = trio(
        dir.path(),
        "127.31.10",
        Some(("CORAL_FORGE", "origin")),
        None,
        AUDIT_ALL,
    );
    let url = coralized("www.origin.test", 8080, "/page.bin");
    assert!(f.curl(&url, &[]).body != page, "f forges");
    wait_pointer(&b, &f, "/page.bin");
    let _ = b.curl(&url, &[]);
    wait_event(&b, "audit_failed", 1.0);
    wait_event(&b, "evidence_stored", 1.0);
    wait_evidence(&c, &state_of(dir.path(), "f"), [&f, &b, &c]);
    // f signs another forgery; c has never heard of f's lie.
    let url = coralized("www.origin.test", 8080, "/other.bin");
    assert!(f.curl(&url, &[]).body != other);
    wait_pointer(&c, &f, "/other.bin");
    assert_eq!(event(&c, "evidence_lookups"), 0.0);
    let got = c.curl(&url, &[]);
    assert_eq!(got.status, 200, "{got:?}");
    assert!(got.body == other, "c served the forgery");
    wait_event(&c, "evidence_true", 1.0);
    assert_eq!(event(&c, "evidence_fetched"), 1.0);
    assert_eq!(event(&c, "evidence_origin_checks"), 1.0);
    assert_eq!(event(&c, "evidence_distrusted"), 1.0);
    assert_eq!(event(&c, "evidence_false"), 0.0);
    assert_eq!(
        event(&c, "evidence_refused") + event(&c, "evidence_pending"),
        1.0,
        "f's copy refused because of the evidence"
    );
    assert_eq!(event(&c, "verified_fills"), 0.0, "nothing of f's used");
    assert_eq!(event(&b, "evidence_served"), 1.0);
    assert_eq!(
        c.metric("coral_verify_evidence_origin_bytes_total"),
        page.len() as f64
    );
    assert_eq!(nginx.requests("/other.bin"), 2, "f's fill and c's");
    assert_eq!(
        nginx.requests("/page.bin"),
        3,
        "f's fill, b's audit, c's check of the evidence"
    );
    // c keeps the origin's copy; f is not asked again.
    let again = c.curl(&url, &[]);
    assert!(again.body == other);
    assert!(again.header("cache-status").contains("hit"), "{again:?}");
}

/// Item 5 (c): a false accusation — `l` announces evidence against the
/// honest `h` whose copy its audit found true — makes no node distrust
/// `h`: `c` checks the record with the origin, finds the claim true, uses
/// `h`'s copy, and ignores `l` from then on.
#[test]
#[cfg_attr(
    not(feature = "forge-origin"),
    ignore = "needs --features forge-origin"
)]
fn issue22_item5c_a_false_accusation_costs_the_accuser_not_the_accused() {
    let dir = temp_dir("verify-false-evidence");
    let page = body(100_000);
    let other = body(50_000);
    let third = body(7000);
    let nginx = origin(
        dir.path(),
        "127.31.11.100",
        &[
            ("page.bin", &page, false),
            ("other.bin", &other, false),
            ("third.txt", &third, false),
        ],
    );
    let (h, l, c) = trio(
        dir.path(),
        "127.31.11",
        None,
        Some(("CORAL_FORGE", "accuse")),
        AUDIT_ALL,
    );
    let url = coralized("www.origin.test", 8080, "/page.bin");
    assert!(h.curl(&url, &[]).body == page);
    wait_pointer(&l, &h, "/page.bin");
    assert!(l.curl(&url, &[]).body == page);
    wait_event(&l, "evidence_stored", 1.0);
    wait_evidence(&c, &state_of(dir.path(), "f"), [&h, &l, &c]);
    assert_eq!(event(&l, "audit_failed"), 0.0, "the audit passed");
    let url = coralized("www.origin.test", 8080, "/other.bin");
    assert!(h.curl(&url, &[]).body == other);
    wait_pointer(&c, &h, "/other.bin");
    let got = c.curl(&url, &[]);
    assert!(got.body == other);
    wait_event(&c, "evidence_false", 1.0);
    assert_eq!(event(&c, "evidence_fetched"), 1.0);
    assert_eq!(event(&c, "evidence_true"), 0.0);
    assert_eq!(event(&c, "evidence_distrusted"), 0.0);
    assert_eq!(event(&c, "evidence_refused"), 0.0);
    assert_eq!(event(&c, "distrusted"), 0.0);
    if event(&c, "evidence_pending") == 0.0 {
        // The check ended within the fill's wait: h's copy was used.
        assert!(
            got.header("cache-status").contains("detail=peer-l"),
            "{got:?}"
        );
        assert_eq!(nginx.requests("/other.bin"), 1);
        assert_eq!(event(&c, "verified_fills"), 1.0);
    }
    // h stays trusted: another object of h's is fetched from it, with no
    // new lookup nor check (its verdict is cached).
    let url = coralized("www.origin.test", 8080, "/third.txt");
    assert!(h.curl(&url, &[]).body == third);
    wait_pointer(&c, &h, "/third.txt");
    let got = c.curl(&url, &[]);
    assert!(got.body == third);
    assert!(
        got.header("cache-status").contains("detail=peer-l"),
        "{got:?}"
    );
    assert_eq!(nginx.requests("/third.txt"), 1);
    assert_eq!(event(&c, "evidence_lookups"), 1.0);
    assert_eq!(event(&c, "evidence_fetched"), 1.0);
    assert_eq!(event(&c, "evidence_distrusted"), 0.0);
}

/// Item 5 (c): a lie caught by the origin's `Repr-Digest` (item 5 a) is
/// evidence too: the catching node publishes the signer's claim, and a
/// third node refuses the forger's copy of another object (no
/// `Repr-Digest` there) after checking that claim with the origin.
#[test]
#[cfg_attr(
    not(feature = "forge-origin"),
    ignore = "needs --features forge-origin"
)]
fn issue22_item5c_a_repr_digest_catch_is_evidence_for_every_node() {
    let dir = temp_dir("verify-repr-evidence");
    let page = body(2000);
    let other = body(30_000);
    let nginx = origin(
        dir.path(),
        "127.31.12.100",
        &[("page.txt", &page, true), ("other.bin", &other, false)],
    );
    let (f, b, c) = trio(
        dir.path(),
        "127.31.12",
        Some(("CORAL_FORGE", "origin")),
        None,
        "",
    );
    let url = coralized("www.origin.test", 8080, "/page.txt");
    assert!(f.curl(&url, &[]).body != page);
    wait_pointer(&b, &f, "/page.txt");
    assert!(b.curl(&url, &[]).body == page, "b served the forgery");
    assert_eq!(event(&b, "forged"), 1.0);
    wait_event(&b, "evidence_stored", 1.0);
    wait_evidence(&c, &state_of(dir.path(), "f"), [&f, &b, &c]);
    let url = coralized("www.origin.test", 8080, "/other.bin");
    assert!(f.curl(&url, &[]).body != other);
    wait_pointer(&c, &f, "/other.bin");
    let got = c.curl(&url, &[]);
    assert!(got.body == other, "c served the forgery");
    wait_event(&c, "evidence_true", 1.0);
    assert_eq!(event(&c, "evidence_distrusted"), 1.0);
    assert_eq!(event(&c, "verified_fills"), 0.0);
    assert_eq!(nginx.requests("/other.bin"), 2, "f's fill and c's");
    assert_eq!(
        nginx.requests("/page.txt"),
        3,
        "f's fill, b's fill, c's check"
    );
}

/// Item 5 (c): a node that already uses a forger's copy (looked up before
/// any evidence existed) stops within minutes of the evidence: the signers
/// of the copies it keeps are looked up again when their clean verdict
/// runs out (here shortened to 2 s, `CORAL_EVIDENCE_VERDICT_TTL_SECS`, a
/// test-only override; `EVIDENCE.verdict_ttl_secs` is 120), and the
/// forger's copies are removed once the evidence is checked.
#[test]
#[cfg_attr(
    not(feature = "forge-origin"),
    ignore = "needs --features forge-origin"
)]
fn issue22_item5c_a_node_already_using_a_forger_stops_when_its_verdict_is_rechecked() {
    let dir = temp_dir("verify-recheck");
    let page = body(100_000);
    let other = body(50_000);
    let nginx = origin(
        dir.path(),
        "127.31.13.100",
        &[("page.bin", &page, false), ("other.bin", &other, false)],
    );
    let origin_ip = "127.31.13.100";
    let f = proxy_node(dir.path(), "127.31.13.1", origin_ip)
        .env("CORAL_FORGE", "origin")
        .start();
    let b = proxy_node(dir.path(), "127.31.13.2", origin_ip)
        .bootstrap("127.31.13.1")
        .config_text(AUDIT_ALL)
        .start();
    let c = proxy_node(dir.path(), "127.31.13.3", origin_ip)
        .bootstrap("127.31.13.1")
        .env("CORAL_EVIDENCE_VERDICT_TTL_SECS", "2")
        .start();
    for n in [&f, &b, &c] {
        n.wait_joined(2);
    }
    // c takes f's forged copy: nothing is known against f yet.
    let url = coralized("www.origin.test", 8080, "/other.bin");
    assert!(f.curl(&url, &[]).body != other);
    wait_pointer(&c, &f, "/other.bin");
    let used = c.curl(&url, &[]);
    assert!(used.body != other, "the forgery passes every signature");
    assert_eq!(event(&c, "verified_fills"), 1.0);
    assert_eq!(event(&c, "evidence_lookups"), 1.0);
    // b's audit catches f on another object.
    let page_url = coralized("www.origin.test", 8080, "/page.bin");
    assert!(f.curl(&page_url, &[]).body != page);
    wait_pointer(&b, &f, "/page.bin");
    let _ = b.curl(&page_url, &[]);
    wait_event(&b, "evidence_stored", 1.0);
    // c looks f up again, checks b's evidence, drops f's copy.
    wait_event(&c, "evidence_true", 1.0);
    assert!(event(&c, "evidence_lookups") >= 2.0);
    assert_eq!(event(&c, "evidence_distrusted"), 1.0);
    wait_until(START_WAIT, Duration::from_millis(100), || {
        let got = c.curl(&url, &[]);
        (got.body == other)
            .then_some(())
            .ok_or_else(|| format!("c still serves f's copy: {got:?}"))
    });
    assert_eq!(nginx.requests("/other.bin"), 2, "f's fill and c's");
}
