//! Operating a node (issue 14): config errors, refusing a second node,
//! readiness, signals, logs and client errors — the real `coral` binary on
//! 127.15.x.y.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

const CORAL: &str = env!("CARGO_BIN_EXE_coral");
/// How long a node may take to start on a loaded machine.
const START_WAIT: Duration = Duration::from_secs(60);

/// A per-test directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("coral-ops-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `coral node` whose stderr goes to a file; killed when dropped.
struct Node {
    child: Option<Child>,
    log: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Node {
    fn spawn(dir: &TempDir, name: &str, args: &[&str], env: &[(&str, &str)]) -> Node {
        let log = dir.0.join(format!("{name}.log"));
        let err = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(CORAL);
        cmd.arg("node");
        if !args.contains(&"--cores") {
            cmd.args(["--cores", "1"]);
        }
        cmd.args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Node {
            child: Some(cmd.spawn().expect("start coral node")),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log holds `needle`; panics if the node exits first.
    fn wait_log(&mut self, needle: &str) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "node exited ({st}) before logging {needle:?}:\n{}",
                    self.log()
                );
            }
            assert!(
                start.elapsed() < START_WAIT,
                "no {needle:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit, at most `limit`.
    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return st;
            }
            assert!(
                start.elapsed() < limit,
                "node still running after {limit:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        assert!(Command::new("kill")
            .args([&format!("-{sig}"), &pid])
            .status()
            .unwrap()
            .success());
    }
}

/// GET `path` from an admin endpoint: (status, body).
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
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
    let dir = TempDir::new("check");
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
        let path = dir.file(name, text);
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
    let missing = dir.0.join("missing.toml");
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

#[test]
fn node_id_comes_from_public_addr_never_from_a_wildcard() {
    let dir = TempDir::new("wildcard");
    // Refused: a wildcard and no public_addr.
    let o = run_node_until_exit(&["--dsht", "0.0.0.0:17915", "--admin", "127.15.1.1:7080"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("public_addr"), "{}", stderr(&o));
    // Given one, the node runs and its id is that address's.
    let mut n = Node::spawn(
        &dir,
        "n",
        &[
            "--dsht",
            "0.0.0.0:17915",
            "--public-addr",
            "127.15.1.1:17915",
            "--admin",
            "127.15.1.1:7080",
        ],
        &[],
    );
    n.wait_log("coral node running");
    let (status, body) = http_get("127.15.1.1:7080".parse().unwrap(), "/levels");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["addr"], "127.15.1.1:17915", "{v}");
    let want = coral::Id::from_ip("127.15.1.1".parse().unwrap());
    assert_eq!(v["node"], want.to_string(), "{v}");
}

#[test]
fn a_second_node_on_the_same_ports_is_refused() {
    let dir = TempDir::new("second");
    let mut first = Node::spawn(
        &dir,
        "first",
        &["--dsht", "127.15.2.1:7000", "--admin", "127.15.2.1:7080"],
        &[],
    );
    first.wait_log("coral node running");
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
        let (status, body) = http_get("127.15.2.1:7080".parse().unwrap(), "/levels");
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
    let dir = TempDir::new("ready");
    let mut n = Node::spawn(
        &dir,
        "n",
        &["--dsht", "127.15.4.1:7000", "--admin", "127.15.4.1:7080"],
        &[("RUST_LOG", "info")],
    );
    n.wait_log("coral node running");
    // No retry: the line means the port is open and every core serves.
    let admin: SocketAddr = "127.15.4.1:7080".parse().unwrap();
    assert_eq!(http_get(admin, "/livez").0, 200);
    let (status, body) = http_get(admin, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"ready\":true"), "{body}");
    // No colours: stderr is a file, not a terminal.
    assert!(
        !n.log().contains('\u{1b}'),
        "ANSI escapes in a log file:\n{}",
        n.log()
    );
    // SIGINT stops it within the bound, exit 0, and says so.
    n.signal("INT");
    let st = n.wait_exit(Duration::from_secs(15));
    assert!(st.success(), "{st}");
    assert!(n.log().contains("stopping"), "{}", n.log());
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let dir = TempDir::new("json");
    let mut n = Node::spawn(
        &dir,
        "n",
        &[
            "--dsht",
            "127.15.5.1:7000",
            "--admin",
            "127.15.5.1:7080",
            "--log-format",
            "json",
        ],
        &[("RUST_LOG", "info")],
    );
    n.wait_log("coral node running");
    n.signal("TERM");
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
    let dir = TempDir::new("hup");
    // B: a node to join later.
    let mut b = Node::spawn(
        &dir,
        "b",
        &["--dsht", "127.15.6.2:7000", "--admin", "127.15.6.2:7080"],
        &[],
    );
    b.wait_log("coral node running");
    let base = "dsht = \"127.15.6.1:7000\"\nadmin = \"127.15.6.1:7080\"\n";
    let config = dir.file("a.toml", &format!("{base}log = \"info\"\n"));
    let mut a = Node::spawn(&dir, "a", &["--config", config.to_str().unwrap()], &[]);
    a.wait_log("coral node running");
    let admin_a: SocketAddr = "127.15.6.1:7080".parse().unwrap();
    let contacts = || -> u64 {
        let (_, body) = http_get(admin_a, "/levels");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["levels"][0]["contacts"].as_u64().unwrap()
    };
    assert_eq!(contacts(), 0);
    // A file that no longer loads changes nothing and is reported.
    std::fs::write(&config, format!("{base}colour = 1\n")).unwrap();
    a.signal("HUP");
    a.wait_log("nothing changed");
    // Now: a bootstrap node, a debug filter, and a key that needs a restart.
    std::fs::write(
        &config,
        format!("{base}log = \"debug\"\nbootstrap = [\"127.15.6.2:7000\"]\n[dht]\nalpha = 4\n"),
    )
    .unwrap();
    a.signal("HUP");
    a.wait_log("SIGHUP: reloaded");
    let log = a.log();
    assert!(log.contains("applied=log, bootstrap"), "{log}");
    assert!(
        log.contains("[dht]/[clusters] changed") && log.contains("restart"),
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
    a.signal("TERM");
    assert!(a.wait_exit(Duration::from_secs(15)).success());
}

#[test]
fn client_errors_exit_non_zero_without_a_panic() {
    let dir = TempDir::new("client");
    let mut n = Node::spawn(
        &dir,
        "n",
        &["--dsht", "127.15.7.1:7000", "--admin", "127.15.7.1:7080"],
        &[],
    );
    n.wait_log("coral node running");
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
    let dir = TempDir::new("pin");
    let mut nodes = Vec::new();
    for i in 1..=12 {
        let ip = format!("127.15.8.{i}");
        let mut args = vec![
            "--dsht".to_string(),
            format!("{ip}:7000"),
            "--admin".to_string(),
            format!("{ip}:7080"),
        ];
        if i > 1 {
            args.extend(["--bootstrap".to_string(), "127.15.8.1:7000".to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        nodes.push(Node::spawn(&dir, &format!("n{i}"), &args, &[]));
    }
    for n in &mut nodes {
        n.wait_log("coral node running");
    }
    let allowed = cpus_allowed(Path::new("/proc/self/status"));
    for n in &nodes {
        let pid = n.child.as_ref().unwrap().id();
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
    let dir = TempDir::new("notify");
    let sock_path = dir.0.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(START_WAIT)).unwrap();
    // Two cores where the test may use two (the kernel places them).
    let cores = std::thread::available_parallelism()
        .map_or(1, |n| n.get().min(2))
        .to_string();
    let mut n = Node::spawn(
        &dir,
        "n",
        &[
            "--dsht",
            "127.15.9.1:7000",
            "--admin",
            "127.15.9.1:7080",
            "--cores",
            &cores,
        ],
        &[("NOTIFY_SOCKET", sock_path.to_str().unwrap())],
    );
    let mut buf = [0u8; 256];
    let len = sock.recv(&mut buf).expect("READY=1 from the node");
    let msg = String::from_utf8_lossy(&buf[..len]).to_string();
    assert!(msg.starts_with("READY=1"), "{msg}");
    // Ready means serving: the admin port answers at once, every core too.
    let (status, body) = http_get("127.15.9.1:7080".parse().unwrap(), "/stats");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cores = v["cores"].as_array().unwrap();
    assert!(cores.iter().all(|c| c.is_object()), "{v}");
    n.signal("TERM");
    let len = sock.recv(&mut buf).expect("STOPPING=1 from the node");
    assert_eq!(&buf[..len], b"STOPPING=1");
    assert!(n.wait_exit(Duration::from_secs(15)).success());
}

/// A node stopped after serving admin requests can be started again at
/// once on the same addresses: the connections it closed (TIME_WAIT) are
/// not a live owner.
#[test]
fn a_node_restarts_at_once_on_the_addresses_it_just_left() {
    let dir = TempDir::new("restart");
    let args = ["--dsht", "127.15.10.1:7000", "--admin", "127.15.10.1:7080"];
    let mut n = Node::spawn(&dir, "first", &args, &[]);
    n.wait_log("coral node running");
    for _ in 0..3 {
        assert_eq!(
            http_get("127.15.10.1:7080".parse().unwrap(), "/levels").0,
            200
        );
    }
    n.signal("TERM");
    assert!(n.wait_exit(Duration::from_secs(15)).success());
    let mut again = Node::spawn(&dir, "again", &args, &[]);
    again.wait_log("coral node running");
}

/// The value of the sample `name{labels}` in a Prometheus text body.
fn metric(body: &str, sample: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {sample} in:\n{body}"))
        .parse()
        .unwrap()
}

/// `/metrics` after a known sequence: two puts under a key core 0 owns and
/// one under a key core 1 owns, all levels, on a standalone node (every
/// level stores locally), one get that finds and one that does not. Every
/// core's numbers are added up at scrape time.
#[test]
fn metrics_count_a_known_sequence_across_cores() {
    let dir = TempDir::new("metrics");
    let cores = std::thread::available_parallelism()
        .map_or(1, |n| n.get().min(2))
        .to_string();
    let mut n = Node::spawn(
        &dir,
        "n",
        &[
            "--dsht",
            "127.15.11.1:7000",
            "--admin",
            "127.15.11.1:7080",
            "--cores",
            &cores,
        ],
        &[],
    );
    n.wait_log("coral node running");
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
    assert_eq!(metric(body, "coral_cores"), cores.parse::<f64>().unwrap());
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
    // Every family is announced once, and every sample belongs to one.
    let mut families = Vec::new();
    for l in body.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(!families.contains(&name.to_string()), "{name} twice");
            families.push(name.to_string());
        } else if !l.starts_with('#') && !l.is_empty() {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(families.iter().any(|f| f == name), "{name} has no TYPE");
        }
    }
}
