//! Operating a node (issue 14): config errors, refusing a second node,
//! readiness, signals, logs and client errors — the real `coral` binary on
//! 127.15.x.y.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    http_get, metric, metric_sum, temp_dir, web_root, write_file, Nginx, Node, NodeBuilder, CORAL,
    ORIGIN, START_WAIT,
};

/// A `coral node` with `args` (one core unless they say otherwise), its
/// stderr in `dir/name.log`, `RUST_LOG` unset unless `env` sets it; not
/// waited for.
fn spawn(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Node {
    let mut node = Node::with_args(args)
        .rust_log(None)
        .log(&dir.join(format!("{name}.log")));
    for (k, v) in env {
        node = node.env(k, v);
    }
    node.spawn()
}

/// A one-core node on `ip` (DSHT :7000, admin :7080), its stderr in
/// `dir/name.log`, `RUST_LOG` unset.
fn logged(dir: &Path, name: &str, ip: &str) -> NodeBuilder {
    Node::on(ip)
        .rust_log(None)
        .log(&dir.join(format!("{name}.log")))
}

/// Two cores where the test may use two, else one.
fn two_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// Starts `node` and waits until it logs that it runs.
fn running(node: NodeBuilder) -> Node {
    let mut n = node.spawn();
    n.wait_log("coral node running");
    n
}

fn coral(args: &[&str]) -> Output {
    Command::new(CORAL).args(args).output().expect("run coral")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn run_node_until_exit(args: &[&str]) -> Output {
    let mut cmd = Command::new(CORAL);
    cmd.arg("node").args(args).env("RUST_LOG", "info");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > START_WAIT {
            let _ = child.kill();
            panic!("`coral node {args:?}` kept running: it should have refused to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn check_config_names_the_file_the_line_and_the_key_and_exits_2() {
    let dir = temp_dir("check");
    let cases: &[(&str, &str, &str)] = &[
        // A value out of range, under its section.
        (
            "bad-value.toml",
            "cores = 1\n[dht]\nalpha = 99\n",
            ":3: [dht] alpha",
        ),
        // A value of the wrong type.
        (
            "bad-type.toml",
            "# comment\n[dht]\nbeta_per_min = \"twelve\"\n",
            ":3: [dht] beta_per_min",
        ),
        // An unknown key.
        (
            "unknown.toml",
            "cores = 1\ncolour = \"blue\"\n",
            ":2: colour",
        ),
        // An unknown key in a section.
        (
            "unknown-sec.toml",
            "[clusters]\n\nsplit_percent = 5\n",
            ":3: [clusters] split_percent",
        ),
        // A wildcard DSHT address without public_addr.
        ("wildcard.toml", "dsht = \"0.0.0.0:7000\"\n", ":1: dsht"),
    ];
    for (name, text, want) in cases {
        let path = write_file(dir.path(), name, text);
        let o = coral(&["check-config", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains(&format!("{}{want}", path.display())),
            "{name}: want {want:?} in {e:?}"
        );
        assert!(!e.contains("panicked"), "{e}");
        // `coral node --config` refuses the same file the same way, at once.
        let o = run_node_until_exit(&["--config", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "node {name}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "node {name}: {}", stderr(&o));
    }
    let missing = dir.path().join("missing.toml");
    let o = coral(&["check-config", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&missing.display().to_string()),
        "{}",
        stderr(&o)
    );
    // The shipped example is fine and says what it sets.
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/coral.toml");
    let o = coral(&["check-config", deploy]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("ok") && out.contains("192.0.2.1:7000"),
        "{out}"
    );
}

/// A network namespace of the test's own (loopback up), deleted when
/// dropped; `None` where this machine cannot make one.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Option<Netns> {
        let name = format!("coral-ops-{tag}-{}", std::process::id());
        let made = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .is_ok_and(|o| o.status.success());
        if !made {
            return None;
        }
        let ns = Netns(name);
        let up = Command::new("ip")
            .args(["-n", &ns.0, "link", "set", "lo", "up"])
            .status()
            .expect("ip");
        assert!(up.success());
        Some(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

#[test]
fn node_id_comes_from_public_addr_never_from_a_wildcard() {
    // The wildcard (and the proxy and dnssrv that follow it) are bound in
    // a namespace of the test's own, never in the host's network.
    let Some(ns) = Netns::new("wildcard") else {
        eprintln!("SKIPPED: needs root and ip(8) to bind a wildcard in a namespace of its own");
        return;
    };
    let dir = temp_dir("wildcard");
    // Refused: a wildcard and no public_addr.
    let o = common::command_in(Some(&ns.0), CORAL)
        .args([
            "node",
            "--dsht",
            "0.0.0.0:17915",
            "--admin",
            "127.15.1.1:7080",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("public_addr"), "{}", stderr(&o));
    // Given one, the node runs and its id is that address's.
    let mut n = Node::with_args(&[
        "--dsht",
        "0.0.0.0:17915",
        "--public-addr",
        "127.15.1.1:17915",
        "--admin",
        "127.15.1.1:7080",
    ])
    .rust_log(None)
    .log(&dir.path().join("n.log"))
    .netns(&ns.0)
    .spawn();
    n.wait_log("coral node running");
    let (status, _, body) = common::in_netns(&ns.0, || {
        http_get("127.15.1.1:7080".parse().unwrap(), "/levels")
    });
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["addr"], "127.15.1.1:17915", "{v}");
    let want = coral::Id::from_ip("127.15.1.1".parse().unwrap());
    assert_eq!(v["node"], want.to_string(), "{v}");
}

/// Exit status 2 for every usage or config error, flags included, and the
/// defaults and exit statuses in `--help` (issue 25).
#[test]
fn usage_and_config_errors_exit_2_and_help_states_defaults() {
    for (args, want) in [
        (vec!["--cache-size", "lots"], "--cache-size"),
        (vec!["--admin", "0.0.0.0:7080"], "admin"),
        (vec!["--zone", "bad_label.test"], "--zone"),
        (vec!["--resolve", "nonsense"], "--resolve"),
        (
            vec!["--dns", "127.15.9.1:7000", "--dsht", "127.15.9.1:7000"],
            "--dsht",
        ),
        (vec!["--cores", "1", "--bogus"], "--bogus"),
    ] {
        let o = run_node_until_exit(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    let o = coral(&["coralize", "http://x/", "--alias", "bad_label"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = coral(&["get", "not-a-key"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let help = String::from_utf8_lossy(&coral(&["node", "--help"]).stdout).into_owned();
    for want in [
        "default: 127.0.0.1:7080",
        "default: 127.0.0.1:7000",
        "port 7053 on loopback, 53 on a public node",
        "port 8090",
    ] {
        assert!(help.contains(want), "{want:?} not in:\n{help}");
    }
    let help = String::from_utf8_lossy(&coral(&["--help"]).stdout).into_owned();
    assert!(
        help.contains("Exit status: 0 ok; 1 a runtime error") && help.contains("3 a simulator"),
        "{help}"
    );
}

#[test]
fn a_second_node_on_the_same_ports_is_refused() {
    let dir = temp_dir("second");
    let _first = running(logged(dir.path(), "first", "127.15.2.1"));
    // Same DSHT address (another admin address).
    let o = run_node_until_exit(&[
        "--cores",
        "1",
        "--dsht",
        "127.15.2.1:7000",
        "--admin",
        "127.15.2.2:7080",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("127.15.2.1:7000") && stderr(&o).contains("in use"),
        "{}",
        stderr(&o)
    );
    // Same admin address (another DSHT address).
    let o = run_node_until_exit(&[
        "--cores",
        "1",
        "--dsht",
        "127.15.2.2:7000",
        "--admin",
        "127.15.2.1:7080",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("admin address 127.15.2.1:7080"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("coral node running"));
    // The first node still answers, alone: its id is the only one.
    for _ in 0..5 {
        let (status, _, body) = http_get("127.15.2.1:7080".parse().unwrap(), "/levels");
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["addr"], "127.15.2.1:7000");
    }
}

#[test]
fn an_admin_address_held_by_another_program_is_reported_at_start() {
    let held = std::net::TcpListener::bind("127.15.3.1:7080").unwrap();
    let o = run_node_until_exit(&[
        "--cores",
        "1",
        "--dsht",
        "127.15.3.1:7000",
        "--admin",
        "127.15.3.1:7080",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("admin address 127.15.3.1:7080"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("coral node running"), "{}", stderr(&o));
    drop(held);
}

#[test]
fn running_is_logged_once_the_admin_port_is_open_and_readyz_says_so() {
    let dir = temp_dir("ready");
    let mut n = running(logged(dir.path(), "n", "127.15.4.1").rust_log(Some("info")));
    // No retry: the line means the port is open and every core serves.
    let admin: SocketAddr = "127.15.4.1:7080".parse().unwrap();
    assert_eq!(http_get(admin, "/livez").0, 200);
    let (status, _, body) = http_get(admin, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"ready\":true"), "{body}");
    // No colours: stderr is a file, not a terminal.
    assert!(
        !n.log().contains('\u{1b}'),
        "ANSI escapes in a log file:\n{}",
        n.log()
    );
    // SIGINT stops it within the bound, exit 0, and says so.
    n.signal(libc::SIGINT);
    let st = n.wait_exit(Duration::from_secs(15));
    assert!(st.success(), "{st}");
    assert!(n.log().contains("stopping"), "{}", n.log());
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let dir = temp_dir("json");
    let mut n = running(
        logged(dir.path(), "n", "127.15.5.1")
            .args(&["--log-format", "json"])
            .rust_log(Some("info")),
    );
    n.signal(libc::SIGTERM);
    assert!(n.wait_exit(Duration::from_secs(15)).success());
    let log = n.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.is_empty()).collect();
    assert!(lines.len() >= 2, "{log}");
    for l in lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{v}");
    }
}

#[test]
fn sighup_reloads_log_and_bootstrap_and_names_what_needs_a_restart() {
    let dir = temp_dir("hup");
    // B: a node to join later.
    let _b = running(logged(dir.path(), "b", "127.15.6.2"));
    let base = "dsht = \"127.15.6.1:7000\"\nadmin = \"127.15.6.1:7080\"\n";
    let config = write_file(dir.path(), "a.toml", format!("{base}log = \"info\"\n"));
    let mut a = spawn(
        dir.path(),
        "a",
        &["--config", config.to_str().unwrap()],
        &[],
    );
    a.wait_log("coral node running");
    let admin_a: SocketAddr = "127.15.6.1:7080".parse().unwrap();
    let contacts = || -> u64 {
        let (_, _, body) = http_get(admin_a, "/levels");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["levels"][0]["contacts"].as_u64().unwrap()
    };
    assert_eq!(contacts(), 0);
    // A file that no longer loads changes nothing and is reported.
    std::fs::write(&config, format!("{base}colour = 1\n")).unwrap();
    a.signal(libc::SIGHUP);
    a.wait_log("nothing changed");
    // Now: a bootstrap node, a debug filter, and a key that needs a restart.
    std::fs::write(
        &config,
        format!(
            "{base}log = \"debug\"\nbootstrap = [\"127.15.6.2:7000\"]\n[dht]\nalpha = 4\n\
             [proxy]\nallow_private_origins = true\n"
        ),
    )
    .unwrap();
    a.signal(libc::SIGHUP);
    a.wait_log("SIGHUP: reloaded");
    let log = a.log();
    assert!(log.contains("applied=log, bootstrap"), "{log}");
    assert!(
        log.contains("SIGHUP: [dht] alpha changed from 3 to 4")
            && log.contains("takes effect only on restart"),
        "{log}"
    );
    // [proxy] keys too, each by name (issue 25: they were ignored silently).
    assert!(
        log.contains("SIGHUP: [proxy] allow_private_origins changed from false to true"),
        "{log}"
    );
    // The bootstrap took effect: A joins B.
    let start = Instant::now();
    while contacts() == 0 {
        assert!(
            start.elapsed() < START_WAIT,
            "no contacts after reload:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    a.wait_log("joined the network");
    a.wait_log("contacts gained");
    // And the debug filter: debug lines now appear.
    a.wait_log(" DEBUG ");
    // The node is still ready, and SIGTERM still stops it with exit 0.
    assert_eq!(http_get(admin_a, "/readyz").0, 200);
    a.signal(libc::SIGTERM);
    assert!(a.wait_exit(Duration::from_secs(15)).success());
}

#[test]
fn client_errors_exit_non_zero_without_a_panic() {
    let dir = temp_dir("client");
    let _n = running(logged(dir.path(), "n", "127.15.7.1"));
    let node = ["--node", "127.15.7.1:7080"];
    let key = "ab".repeat(20);
    let long = "x".repeat(300);
    let cases: Vec<Vec<&str>> = vec![
        vec!["put", &key, &long, "--ttl", "60"],
        vec!["put", &key, "v", "--ttl", "60", "--levels", "9"],
        vec!["get", &key, "--levels", "3"],
        vec!["nodes", "--level", "7"],
        vec!["get", "not-a-key"],
    ];
    for c in &cases {
        let o = coral(&[c.as_slice(), &node].concat());
        assert!(!o.status.success(), "{c:?} exited 0");
        assert!(!stderr(&o).is_empty(), "{c:?}: no message");
        assert!(!stderr(&o).contains("panicked"), "{c:?}: {}", stderr(&o));
    }
    // Too many cores: refused, not clamped.
    let o = run_node_until_exit(&[
        "--cores",
        "999",
        "--dsht",
        "127.15.7.2:7000",
        "--admin",
        "127.15.7.2:7080",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cores = 999"), "{}", stderr(&o));
    // A closed pipe ends `coral stats` quietly.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("{CORAL} stats --node 127.15.7.1:7080 | true"))
        .output()
        .unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    // Without --json, stats is a table with a total column.
    let o = coral(&["stats", "--node", "127.15.7.1:7080"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("counter") && out.contains("total") && !out.contains('{'),
        "{out}"
    );
    // A good put still works.
    let o = coral(&[
        "put",
        &key,
        "v",
        "--ttl",
        "60",
        "--levels",
        "2",
        "--node",
        "127.15.7.1:7080",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn hints_toward_a_local_address_says_why_nothing_answered() {
    let o = coral(&["hints", "--to", "127.0.0.1", "--timeout-ms", "200"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("no router") && out.contains("this host"),
        "{out}"
    );
}

/// Twelve one-core nodes on one host are not all pinned to one CPU (they
/// used to pin themselves to CPU 0): their executor threads may run on
/// every CPU the test may use.
#[test]
fn twelve_one_core_nodes_are_not_pinned_to_one_cpu() {
    let dir = temp_dir("pin");
    let mut nodes = Vec::new();
    for i in 1..=12 {
        let mut node = logged(dir.path(), &format!("n{i}"), &format!("127.15.8.{i}"));
        if i > 1 {
            node = node.bootstrap("127.15.8.1");
        }
        nodes.push(node.spawn());
    }
    for n in &mut nodes {
        n.wait_log("coral node running");
    }
    let allowed = cpus_allowed(Path::new("/proc/self/status"));
    for n in &nodes {
        let pid = n.pid();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let task = task.unwrap().path();
            let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            if comm.starts_with("coral-core") {
                assert_eq!(
                    cpus_allowed(&task.join("status")),
                    allowed,
                    "executor thread {comm:?} of node {pid} is pinned"
                );
            }
        }
    }
}

fn cpus_allowed(status: &Path) -> String {
    std::fs::read_to_string(status)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// systemd's `Type=notify`: READY=1 on $NOTIFY_SOCKET only once every core
/// serves (the admin endpoint answers by then), STOPPING=1 on SIGTERM.
#[test]
fn systemd_hears_ready_once_every_core_serves_and_stopping_on_sigterm() {
    let dir = temp_dir("notify");
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(START_WAIT)).unwrap();
    // Two cores where the test may use two (the kernel places them).
    let cores = two_cores();
    let mut n = logged(dir.path(), "n", "127.15.9.1")
        .cores(cores)
        .env("NOTIFY_SOCKET", sock_path.to_str().unwrap())
        .spawn();
    let mut buf = [0u8; 256];
    let len = sock.recv(&mut buf).expect("READY=1 from the node");
    let msg = String::from_utf8_lossy(&buf[..len]).to_string();
    assert!(msg.starts_with("READY=1"), "{msg}");
    // Ready means serving: the admin port answers at once, every core too.
    let (status, _, body) = http_get("127.15.9.1:7080".parse().unwrap(), "/stats");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cores = v["cores"].as_array().unwrap();
    assert!(cores.iter().all(|c| c.is_object()), "{v}");
    n.signal(libc::SIGTERM);
    let len = sock.recv(&mut buf).expect("STOPPING=1 from the node");
    assert_eq!(&buf[..len], b"STOPPING=1");
    assert!(n.wait_exit(Duration::from_secs(15)).success());
}

/// A node stopped after serving admin requests can be started again at
/// once on the same addresses: the connections it closed (TIME_WAIT) are
/// not a live owner.
#[test]
fn a_node_restarts_at_once_on_the_addresses_it_just_left() {
    let dir = temp_dir("restart");
    let mut n = running(logged(dir.path(), "first", "127.15.10.1"));
    for _ in 0..3 {
        assert_eq!(
            http_get("127.15.10.1:7080".parse().unwrap(), "/levels").0,
            200
        );
    }
    n.signal(libc::SIGTERM);
    assert!(n.wait_exit(Duration::from_secs(15)).success());
    let _again = running(logged(dir.path(), "again", "127.15.10.1"));
}

/// `/metrics` after a known sequence: two puts under a key core 0 owns and
/// one under a key core 1 owns, all levels, on a standalone node (every
/// level stores locally), one get that finds and one that does not. Every
/// core's numbers are added up at scrape time.
#[test]
fn metrics_count_a_known_sequence_across_cores() {
    let dir = temp_dir("metrics");
    let cores = two_cores();
    let _n = running(logged(dir.path(), "n", "127.15.11.1").cores(cores));
    let admin: SocketAddr = "127.15.11.1:7080".parse().unwrap();
    let (k0, k1) = ("00".repeat(20), "ff".repeat(20));
    let node = ["--node", "127.15.11.1:7080"];
    for (key, value) in [
        (&k0, "10.0.0.1:80"),
        (&k0, "10.0.0.2:80"),
        (&k1, "10.0.0.3:80"),
    ] {
        let o = coral(&[&["put", key, value, "--ttl", "600"][..], &node].concat());
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = coral(&[&["get", &k0][..], &node].concat());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("found 2"),
        "{o:?}"
    );
    let o = coral(&[&["get", &"ab".repeat(20)][..], &node].concat());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("not found"),
        "{o:?}"
    );
    let mut s = TcpStream::connect(admin).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    for level in 0..3 {
        assert_eq!(
            metric(body, &format!("coral_dsht_values{{level=\"{level}\"}}")),
            3.0
        );
        assert_eq!(
            metric(body, &format!("coral_dsht_keys{{level=\"{level}\"}}")),
            2.0
        );
        // k0 was probed twice in a moment: a new key's leakage bucket holds
        // one token (store.rs), so k0 is loaded until the token comes back,
        // 60/β s after its first put (1 or 0, depending on how long the
        // gets above took); k1, probed once, is not.
        let loaded = metric(
            body,
            &format!("coral_dsht_loaded_keys{{level=\"{level}\"}}"),
        );
        assert!(loaded == 0.0 || loaded == 1.0, "{loaded}");
    }
    let ops = "coral_dsht_client_operations_total";
    assert_eq!(
        metric(body, &format!("{ops}{{op=\"put\",outcome=\"stored\"}}")),
        9.0
    );
    assert_eq!(
        metric(body, &format!("{ops}{{op=\"put\",outcome=\"spilled\"}}")),
        0.0
    );
    assert_eq!(
        metric(body, &format!("{ops}{{op=\"get\",outcome=\"found\"}}")),
        1.0
    );
    assert_eq!(
        metric(body, &format!("{ops}{{op=\"get\",outcome=\"not_found\"}}")),
        1.0
    );
    assert_eq!(metric(body, "coral_ready"), 1.0);
    assert_eq!(metric(body, "coral_cores"), cores as f64);
    assert_eq!(
        metric(
            body,
            "coral_dsht_rpcs_total{kind=\"store\",outcome=\"accepted\"}"
        ),
        0.0
    );
    assert!(
        body.contains("coral_cluster_info{level=\"1\",cluster=\""),
        "{body}"
    );
    // The client operations' latency: two gets, three puts.
    let d = "coral_dsht_operation_duration_seconds";
    assert_eq!(metric(body, &format!("{d}_count{{op=\"get\"}}")), 2.0);
    assert_eq!(metric(body, &format!("{d}_count{{op=\"put\"}}")), 3.0);
    check_exposition(body);
}

/// A proxy node on `ip` with nginx as the origin `www.origin.test` on
/// `origin_ip` port 8080, its cache in `dir`, dnssrv on :7053; `extra`
/// flags added.
fn proxy_node(dir: &Path, ip: &str, origin_ip: &str, extra: &[&str]) -> Node {
    running(
        logged(dir, "node", ip)
            .cores(two_cores())
            .proxy(&dir.join("cache"))
            .dns(7053)
            .origin(origin_ip)
            .args(extra),
    )
}

/// `curl` of the Coralized `path` on `www.origin.test:8080` through the
/// proxy on `ip`: (status, body bytes received).
fn curl_proxy(ip: &str, path: &str, args: &[&str]) -> (u16, u64) {
    let url = common::coralized(ORIGIN, 8080, path);
    let client = ["-A", "ops-test/1.0", "-e", "http://ref.example/"];
    let a = common::curl(ip, &url, &[&client[..], args].concat());
    (a.status, a.body.len() as u64)
}

/// Checks a body against Prometheus's text format (0.0.4) strictly: names
/// and label names well formed, label values escaped, one HELP and one TYPE
/// per family before its samples, a family's samples together, no series
/// twice, counters named `_total`, histograms with increasing `le`,
/// cumulative buckets, a `+Inf` bucket equal to `_count`, and a `_sum`.
fn check_exposition(body: &str) {
    fn name_ok(n: &str) -> bool {
        let mut c = n.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
            && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
    }
    /// (name, [(label, value)], value) of a sample line.
    fn sample(l: &str) -> (String, Vec<(String, String)>, f64) {
        let (name, rest) = match l.find(['{', ' ']) {
            Some(i) => l.split_at(i),
            None => panic!("no value: {l:?}"),
        };
        assert!(name_ok(name), "bad metric name in {l:?}");
        let mut labels = Vec::new();
        let mut rest = rest;
        if let Some(r) = rest.strip_prefix('{') {
            let b = r.as_bytes();
            let mut i = 0;
            while b.get(i) != Some(&b'}') {
                let eq = r[i..].find('=').unwrap_or_else(|| panic!("no = in {l:?}")) + i;
                let lname = &r[i..eq];
                assert!(
                    name_ok(lname) && !lname.contains(':'),
                    "bad label name in {l:?}"
                );
                assert_eq!(b.get(eq + 1), Some(&b'"'), "unquoted value in {l:?}");
                let mut value = String::new();
                i = eq + 2;
                loop {
                    match b.get(i) {
                        Some(b'\\') => {
                            match b.get(i + 1) {
                                Some(b'\\') => value.push('\\'),
                                Some(b'"') => value.push('"'),
                                Some(b'n') => value.push('\n'),
                                _ => panic!("bad escape in {l:?}"),
                            }
                            i += 2;
                        }
                        Some(b'"') => break,
                        Some(_) => {
                            let ch = r[i..].chars().next().unwrap();
                            value.push(ch);
                            i += ch.len_utf8();
                        }
                        None => panic!("unterminated value in {l:?}"),
                    }
                }
                assert!(
                    !labels.iter().any(|(n, _): &(String, String)| n == lname),
                    "label twice in {l:?}"
                );
                labels.push((lname.to_string(), value));
                i += 1;
                match b.get(i) {
                    Some(b',') => i += 1,
                    Some(b'}') => {}
                    _ => panic!("bad label list in {l:?}"),
                }
            }
            rest = &r[i + 1..];
        }
        let v = rest
            .strip_prefix(' ')
            .unwrap_or_else(|| panic!("no space before the value in {l:?}"));
        assert!(!v.contains(' '), "timestamps are not written: {l:?}");
        let value = match v {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {l:?}")),
        };
        (name.to_string(), labels, value)
    }
    let mut helped = std::collections::HashSet::new();
    let mut types = std::collections::HashMap::<String, String>::new();
    let mut done = std::collections::HashSet::<String>::new();
    let mut current: Option<String> = None;
    let mut series = std::collections::HashSet::new();
    // Histogram buckets of the current family: labels without le -> (le, count).
    let mut buckets = std::collections::BTreeMap::<String, Vec<(f64, f64)>>::new();
    let mut counts = std::collections::BTreeMap::<String, f64>::new();
    let mut sums = std::collections::HashSet::<String>::new();
    let finish = |family: &str,
                  kind: &str,
                  buckets: &mut std::collections::BTreeMap<String, Vec<(f64, f64)>>,
                  counts: &mut std::collections::BTreeMap<String, f64>,
                  sums: &mut std::collections::HashSet<String>| {
        if kind == "histogram" {
            assert!(!buckets.is_empty(), "{family}: no buckets");
            for (k, b) in buckets.iter() {
                assert!(
                    b.windows(2).all(|w| w[0].0 < w[1].0),
                    "{family}{k}: le not increasing"
                );
                assert!(
                    b.windows(2).all(|w| w[0].1 <= w[1].1),
                    "{family}{k}: not cumulative"
                );
                let last = b.last().unwrap();
                assert!(last.0.is_infinite(), "{family}{k}: no +Inf bucket");
                assert_eq!(
                    Some(&last.1),
                    counts.get(k),
                    "{family}{k}: +Inf bucket != _count"
                );
                assert!(sums.contains(k), "{family}{k}: no _sum");
            }
        }
        buckets.clear();
        counts.clear();
        sums.clear();
    };
    for l in body.lines() {
        if l.is_empty() {
            continue; // the text format ignores empty lines
        }
        if let Some(rest) = l.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(name_ok(name), "{l}");
            assert!(helped.insert(name.to_string()), "HELP twice for {name}");
            assert!(!done.contains(name), "{name} started twice");
            continue;
        }
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind),
                "{l}: unknown type"
            );
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "TYPE twice: {l}"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "counter {name} not named _total");
            }
            if let Some(prev) = current.take() {
                finish(&prev, &types[&prev], &mut buckets, &mut counts, &mut sums);
                done.insert(prev);
            }
            current = Some(name.to_string());
            continue;
        }
        assert!(!l.starts_with('#'), "stray comment {l:?}");
        let (name, labels, value) = sample(l);
        let family = current
            .clone()
            .unwrap_or_else(|| panic!("sample before any TYPE: {l}"));
        let kind = types[&family].clone();
        let suffix = name.strip_prefix(family.as_str()).unwrap_or_else(|| {
            panic!("{l}: sample outside its family {family} (families must be contiguous)")
        });
        let key = |labels: &[(String, String)]| {
            labels
                .iter()
                .filter(|(n, _)| n != "le")
                .map(|(n, v)| format!("{n}={v:?}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        match (kind.as_str(), suffix) {
            ("histogram", "_bucket") => {
                let le = labels
                    .iter()
                    .find(|(n, _)| n == "le")
                    .unwrap_or_else(|| panic!("{l}: bucket without le"));
                let le: f64 = if le.1 == "+Inf" {
                    f64::INFINITY
                } else {
                    le.1.parse().unwrap()
                };
                buckets.entry(key(&labels)).or_default().push((le, value));
            }
            ("histogram", "_count") => {
                counts.insert(key(&labels), value);
            }
            ("histogram", "_sum") => {
                sums.insert(key(&labels));
            }
            (_, "") => {}
            _ => panic!("{l}: {name} is not a sample of {kind} {family}"),
        }
        if kind != "histogram" {
            assert!(value >= 0.0 || kind == "gauge", "{l}: negative counter");
        }
        let id = format!("{name}{{{}}}", {
            let mut ls: Vec<String> = labels.iter().map(|(n, v)| format!("{n}={v:?}")).collect();
            ls.sort();
            ls.join(",")
        });
        assert!(series.insert(id), "series twice: {l}");
    }
    if let Some(prev) = current.take() {
        finish(&prev, &types[&prev], &mut buckets, &mut counts, &mut sums);
    }
    for t in types.keys() {
        assert!(helped.contains(t), "{t} has no HELP");
    }
}

fn scrape(admin: &str) -> String {
    let (status, _, body) = http_get(admin.parse().unwrap(), "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// `/metrics` after a known sequence through CoralProxy and dnssrv, with
/// nginx as the origin: a miss (from the origin), a hit, a 404, a POST
/// (405), and one DNS query with kdig. Exact counters, the duration
/// histogram counting every response, and a strictly valid exposition.
#[test]
fn metrics_count_proxy_responses_and_dns_queries_of_a_known_sequence() {
    let dir = temp_dir("metrics-http");
    let root = web_root(dir.path(), &[("a.bin", &[7u8; 41_000])]);
    let _nginx = Nginx::start(dir.path(), "127.15.20.100:8080".parse().unwrap(), &root);
    let _n = proxy_node(dir.path(), "127.15.20.1", "127.15.20.100", &[]);
    let ip = "127.15.20.1";
    assert_eq!(curl_proxy(ip, "/a.bin", &[]), (200, 41_000));
    assert_eq!(curl_proxy(ip, "/a.bin", &[]), (200, 41_000));
    let (status, missing_bytes) = curl_proxy(ip, "/missing", &[]);
    assert_eq!(status, 404);
    // A request that may not be answered from the cache: passed through.
    assert_eq!(
        curl_proxy(ip, "/a.bin", &["-H", "Cache-Control: no-store"]),
        (200, 41_000)
    );
    let (status, post_bytes) = curl_proxy(ip, "/form", &["-X", "POST", "-d", "x=1"]);
    assert_eq!(status, 405);
    let dns: SocketAddr = "127.15.20.1:7053".parse().unwrap();
    let dig = common::kdig(dns, &["+retry=0", "+timeout=10", "coralcdn.test", "SOA"]);
    assert!(dig.contains("status: NOERROR"), "{dig}");
    // A response is counted once its last byte is handed to the kernel,
    // which may be a moment after curl has it: scrape until all five are.
    let start = Instant::now();
    let body = loop {
        let body = scrape(&format!("{ip}:7080"));
        if metric_sum(&body, "coral_http_requests_total") >= 5.0 {
            break body;
        }
        assert!(
            start.elapsed() < START_WAIT,
            "responses not counted:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    check_exposition(&body);
    let req = |m: &str, s: u16, c: &str| {
        metric(
            &body,
            &format!("coral_http_requests_total{{method=\"{m}\",status=\"{s}\",cache=\"{c}\"}}"),
        )
    };
    assert_eq!(req("GET", 200, "origin"), 1.0, "{body}");
    assert_eq!(req("GET", 200, "local"), 1.0, "{body}");
    assert_eq!(req("POST", 405, "error"), 1.0, "{body}");
    // A 404 is stored briefly (negative_ttl_secs): from the origin.
    assert_eq!(req("GET", 404, "origin"), 1.0, "{body}");
    assert_eq!(req("GET", 200, "pass"), 1.0, "{body}");
    assert_eq!(
        metric_sum(&body, "coral_http_requests_total"),
        5.0,
        "{body}"
    );
    assert_eq!(
        metric(&body, "coral_http_request_duration_seconds_count"),
        5.0
    );
    assert_eq!(
        metric(
            &body,
            "coral_http_request_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        5.0
    );
    assert!(metric(&body, "coral_http_request_duration_seconds_sum") > 0.0);
    assert_eq!(
        metric(&body, "coral_http_response_bytes_total"),
        (3 * 41_000 + missing_bytes + post_bytes) as f64
    );
    assert_eq!(
        metric(&body, "coral_http_origin_fetches_total{mode=\"fill\"}"),
        2.0
    );
    assert_eq!(
        metric(&body, "coral_http_origin_fetches_total{mode=\"pass\"}"),
        1.0
    );
    assert_eq!(metric_sum(&body, "coral_http_origin_errors_total"), 0.0);
    assert_eq!(metric_sum(&body, "coral_http_peer_fetches_total"), 0.0);
    assert_eq!(metric(&body, "coral_http_bad_requests_total"), 0.0);
    assert_eq!(metric(&body, "coral_http_connections_accepted_total"), 5.0);
    assert_eq!(metric(&body, "coral_cache_objects"), 2.0);
    assert_eq!(
        metric(&body, "coral_cache_size_limit_bytes"),
        (64u64 << 20) as f64
    );
    assert!(metric(&body, "coral_cache_bytes") >= 41_000.0);
    // The objects' bytes: more than the bodies, far less than a segment.
    let used = metric(&body, "coral_cache_object_bytes");
    assert!(
        used >= 41_000.0 && used <= metric(&body, "coral_cache_bytes"),
        "{used}"
    );
    assert_eq!(
        metric(
            &body,
            "coral_dns_queries_total{qtype=\"SOA\",rcode=\"NOERROR\",level=\"none\"}"
        ),
        1.0,
        "{body}"
    );
    assert_eq!(metric_sum(&body, "coral_dns_queries_total"), 1.0);
    assert_eq!(metric(&body, "coral_dns_queries_received_total"), 1.0);
    assert_eq!(metric(&body, "coral_dns_dropped_total"), 0.0);
    // An SOA query places no client: no RTT probe.
    assert_eq!(metric(&body, "coral_dns_rtt_probes_total"), 0.0);
    assert_eq!(metric(&body, "coral_dns_rtt_probes_dropped_total"), 0.0);
    assert!(
        !body.contains("coral_dns_events_total"),
        "every dnssrv counter by name"
    );
}

/// A Combined Log Format line with coral's `cache=`, `rt=` and `host=`
/// after it: (client, request, status, bytes, referer, agent, cache, rt,
/// host); None if the line is not exactly that.
#[allow(clippy::type_complexity)]
fn parse_access_line(
    l: &str,
) -> Option<(
    String,
    String,
    u16,
    u64,
    String,
    String,
    String,
    f64,
    String,
)> {
    fn quoted(s: &str) -> Option<(&str, &str)> {
        let s = s.strip_prefix('"')?;
        let end = s.find('"')?;
        Some((&s[..end], &s[end + 1..]))
    }
    let (client, rest) = l.split_once(" - - [")?;
    client.parse::<std::net::IpAddr>().ok()?;
    let (date, rest) = rest.split_once("] ")?;
    // dd/Mon/yyyy:hh:mm:ss +0000
    let b = date.as_bytes();
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    if date.len() != 26
        || !date.ends_with(" +0000")
        || b[2] != b'/'
        || b[6] != b'/'
        || b[11] != b':'
        || !months.contains(&&date[3..6])
        || ![0..2, 7..11, 12..14, 15..17, 18..20]
            .iter()
            .all(|r| date[r.clone()].bytes().all(|c| c.is_ascii_digit()))
    {
        return None;
    }
    let (request, rest) = quoted(rest)?;
    let rest = rest.strip_prefix(' ')?;
    let (status, rest) = rest.split_once(' ')?;
    let (bytes, rest) = rest.split_once(' ')?;
    let (referer, rest) = quoted(rest)?;
    let (agent, rest) = quoted(rest.strip_prefix(' ')?)?;
    let rest = rest.strip_prefix(" cache=")?;
    let (cache, rest) = rest.split_once(" rt=")?;
    let (rt, rest) = rest.split_once(" host=")?;
    let (host, rest) = quoted(rest)?;
    if !rest.is_empty() || status.len() != 3 || rt.split_once('.')?.1.len() != 6 {
        return None;
    }
    Some((
        client.to_string(),
        request.to_string(),
        status.parse().ok()?,
        bytes.parse().ok()?,
        referer.to_string(),
        agent.to_string(),
        cache.to_string(),
        rt.parse().ok()?,
        host.to_string(),
    ))
}

/// Waits until the file at `path` holds `n` lines (the cores hand their
/// lines to the writer within a second); returns them.
fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n {
            assert_eq!(lines.len(), n, "{text}");
            assert!(text.ends_with('\n'), "a partial line: {text:?}");
            return lines;
        }
        assert!(
            start.elapsed() < START_WAIT,
            "{} has {} lines, not {n}:\n{text}",
            path.display(),
            lines.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The access log: one Combined Log Format line per response with the
/// right status, bytes and cache result; after `mv` and SIGUSR1 (what
/// logrotate does) the next lines go to a new file at the path, and
/// SIGTERM hands over the last lines before the node exits.
#[test]
fn access_log_lines_are_combined_log_format_and_sigusr1_reopens_the_file() {
    let dir = temp_dir("access-log");
    let root = web_root(dir.path(), &[("a.bin", &[7u8; 12_345])]);
    let _nginx = Nginx::start(dir.path(), "127.15.21.100:8080".parse().unwrap(), &root);
    let log = dir.path().join("access.log");
    let mut n = proxy_node(
        dir.path(),
        "127.15.21.1",
        "127.15.21.100",
        &["--access-log", log.to_str().unwrap()],
    );
    let ip = "127.15.21.1";
    assert_eq!(curl_proxy(ip, "/a.bin", &[]).0, 200);
    assert_eq!(curl_proxy(ip, "/a.bin", &[]).0, 200);
    assert_eq!(
        curl_proxy(ip, "/x?q=\"1\"", &["-X", "POST", "-d", "x"]).0,
        405
    );
    let lines = wait_lines(&log, 3);
    let parsed: Vec<_> = lines
        .iter()
        .map(|l| parse_access_line(l).unwrap_or_else(|| panic!("not CLF: {l:?}")))
        .collect();
    let host = "www.origin.test.8080.coral.test:8090";
    // The cores write in batches: order lines by what they say, not place.
    let mut seen: Vec<(String, u16, u64, String)> = parsed
        .iter()
        .map(|p| (p.1.clone(), p.2, p.3, p.6.clone()))
        .collect();
    seen.sort();
    let mut want = vec![
        (
            "GET /a.bin HTTP/1.1".to_string(),
            200,
            12_345,
            "origin".to_string(),
        ),
        (
            "GET /a.bin HTTP/1.1".to_string(),
            200,
            12_345,
            "local".to_string(),
        ),
        (
            "POST /x?q=\\x221\\x22 HTTP/1.1".to_string(),
            405,
            0,
            "error".to_string(),
        ),
    ];
    want.sort();
    // The 405's body is coral's short text: its length, not 0.
    for (s, w) in seen.iter().zip(want.iter_mut()) {
        if w.1 == 405 {
            assert!(s.2 > 0, "{s:?}");
            w.2 = s.2;
        }
    }
    assert_eq!(seen, want, "{lines:#?}");
    for p in &parsed {
        assert!(
            p.0.parse::<std::net::IpAddr>().unwrap().is_loopback(),
            "{p:?}"
        );
        assert_eq!(p.4, "http://ref.example/");
        assert_eq!(p.5, "ops-test/1.0");
        assert_eq!(p.8, host);
        assert!(p.7 >= 0.0 && p.7 < 60.0);
    }
    // logrotate: move the file away, SIGUSR1, and the next line goes to a
    // new file at the path.
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    n.signal(libc::SIGUSR1);
    n.wait_log("access log reopened");
    assert_eq!(curl_proxy(ip, "/a.bin", &[]).0, 200);
    let fresh = wait_lines(&log, 1);
    let p = parse_access_line(&fresh[0]).unwrap();
    assert_eq!((p.2, p.3, p.6.as_str()), (200, 12_345, "local"));
    assert_eq!(wait_lines(&rotated, 3), lines);
    // A line still in a core's buffer at SIGTERM is written before exit.
    assert_eq!(curl_proxy(ip, "/a.bin", &[]).0, 200);
    n.signal(libc::SIGTERM);
    assert!(n.wait_exit(Duration::from_secs(30)).success());
    assert_eq!(wait_lines(&log, 2).len(), 2);
}
