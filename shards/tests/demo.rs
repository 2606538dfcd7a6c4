//! `coral demo` and the lab (deploy/lab/lab.sh): §6.1's flash crowd on real
//! sockets, with real DNS (dnssrv, unbound), real proxies and a real browser.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{temp_dir, wait_until, Proc, CORAL};

/// A process's parent pid, state and start time (clock ticks since boot),
/// from /proc/PID/stat; None when it is gone.
fn stat_of(pid: u32) -> Option<(u32, char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let ppid = f.get(1)?.parse().ok()?;
    // Field 22 of the whole line; `rest` starts at field 3.
    let start = f.get(19)?.parse().ok()?;
    Some((ppid, state, start))
}

fn cmdline_of(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).replace('\0', " ")
}

/// A process this test saw start: its pid and start time, so a recycled pid
/// is not mistaken for it.
#[derive(Debug, Clone, Copy)]
struct Started {
    pid: u32,
    start: u64,
}

/// The coral nodes `demo` (a child of this test) has started: its children
/// running `coral node`. Only these are checked afterwards, never other
/// processes on the machine (another run of coral may be going on).
fn nodes_of(demo: u32) -> Vec<Started> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some((ppid, _, start)) = stat_of(pid) {
            if ppid == demo && cmdline_of(pid).contains(" node ") {
                found.push(Started { pid, start });
            }
        }
    }
    found
}

/// Which of `started` still run: same pid, same start time, not a zombie.
fn still_running(started: &[Started]) -> Vec<String> {
    started
        .iter()
        .filter(|p| {
            stat_of(p.pid).is_some_and(|(_, state, start)| start == p.start && state != 'Z')
        })
        .map(|p| format!("{}: {}", p.pid, cmdline_of(p.pid)))
        .collect()
}

/// Reads the demo's stderr until its `ready` line; returns the lines read.
fn read_until_ready(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> String {
    let mut text = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        text.push_str(&line);
        text.push('\n');
        if line.trim_start().starts_with("ready") {
            break;
        }
    }
    text
}

/// The scratch directory the demo announced.
fn scratch_of(text: &str) -> Option<PathBuf> {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix("scratch"))
        .and_then(|rest| rest.split_whitespace().next())
        .map(PathBuf::from)
}

/// §6.1: a flash crowd on a 384 kbit/s origin. Every request is answered 200
/// with the right bytes, the origin sees one fetch per object across all the
/// proxies, and the demo leaves no node process and no scratch files behind.
#[test]
fn nsdi2004_6_1_demo_flash_crowd_fetches_each_object_once_from_the_origin() {
    let dir = temp_dir("demo");
    let plot = dir.path().join("fig4.svg");
    let mut demo = Proc::spawn(
        Command::new(CORAL)
            .args(["demo", "--nodes", "3", "--clients", "8", "--seconds", "15"])
            .args(["--think-ms", "300", "--net", "127.17.1", "--json", "--plot"])
            .arg(&plot)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        "start coral demo",
    );
    let child = demo.child();
    let mut stdout = child.stdout.take().unwrap();
    let report = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).map(|_| v)
    });
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stderr = read_until_ready(&mut lines);
    // The demo has started its nodes (it is ready): note them, to check
    // they are gone when it ends.
    let nodes = nodes_of(child.id());
    assert_eq!(nodes.len(), 3, "the demo's 3 nodes: {nodes:?}\n{stderr}");
    for line in lines {
        stderr.push_str(&line.unwrap());
        stderr.push('\n');
    }
    let status = child.wait().unwrap();
    let stdout = report.join().unwrap().expect("the demo's report");
    assert!(status.success(), "coral demo failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&stdout).expect("JSON report");
    let requests = v["requests"].as_u64().unwrap();
    assert!(requests > 0, "{v}");
    assert_eq!(
        v["ok"].as_u64(),
        Some(requests),
        "every answer 200 with the right bytes: {v}"
    );
    assert_eq!(
        v["origin_fetches"], v["unique_objects"],
        "one origin fetch per object across the network: {v}"
    );
    assert!(v["unique_objects"].as_u64().unwrap() >= 1);
    assert!(!v["per_minute"].as_array().unwrap().is_empty());
    // Clients got far more than the origin sent.
    assert!(
        v["client_bytes_received"].as_u64() > v["origin_bytes_sent"].as_u64(),
        "{v}"
    );
    let svg = std::fs::read_to_string(&plot).expect("the plot");
    assert!(svg.starts_with("<svg") && svg.contains("origin server"));
    let left = still_running(&nodes);
    assert!(left.is_empty(), "nodes left behind: {left:?}");
    let scratch = scratch_of(&stderr).expect("the demo names its scratch directory");
    assert!(!scratch.exists(), "{} left behind", scratch.display());
}

/// Ctrl-C: the demo stops its nodes, removes its scratch directory and exits.
#[test]
fn demo_interrupted_leaves_nothing_behind() {
    let mut demo = Proc::spawn(
        Command::new(CORAL)
            .args(["demo", "--nodes", "2", "--clients", "2", "--seconds", "300"])
            .args(["--net", "127.17.2", "--json"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
        "start coral demo",
    );
    let child = demo.child();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let text = read_until_ready(&mut lines);
    let scratch = scratch_of(&text).expect("scratch line");
    assert!(scratch.exists());
    let nodes = nodes_of(child.id());
    assert_eq!(nodes.len(), 2, "the demo's 2 nodes running: {nodes:?}");
    // SIGINT, as a terminal's Ctrl-C sends.
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = wait_until(Duration::from_secs(60), Duration::from_millis(50), || {
        child
            .try_wait()
            .unwrap()
            .ok_or_else(|| "demo ignored SIGINT".to_string())
    });
    for _ in lines {}
    assert_eq!(code.code(), Some(130));
    let left = still_running(&nodes);
    assert!(left.is_empty(), "nodes left behind: {left:?}");
    assert!(!scratch.exists(), "{} left behind", scratch.display());
}

/// Whether this machine lets us create network namespaces.
fn namespaces_work() -> Result<(), String> {
    let name = format!("cdemo-probe-{}", std::process::id());
    let add = Command::new("ip").args(["netns", "add", &name]).output();
    match add {
        Ok(o) if o.status.success() => {
            let _ = Command::new("ip").args(["netns", "del", &name]).status();
            Ok(())
        }
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Err(format!("ip: {e}")),
    }
}

/// This run's namespace-name prefix: unique to this test process, so two
/// runs at once (or a lab someone left up) do not collide.
fn lab_prefix() -> String {
    format!("clab{}-", std::process::id())
}

/// Runs lab.sh with our binary, state directory and namespace prefix.
fn lab(state: &Path, args: &[&str]) -> std::process::Output {
    Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/lab/lab.sh"))
        .args(args)
        .env("CORAL", CORAL)
        .env("CORAL_LAB_STATE", state)
        .env("CORAL_LAB_PREFIX", lab_prefix())
        .output()
        .expect("run lab.sh")
}

/// Takes the lab down when dropped.
struct Lab(PathBuf);

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = lab(&self.0, &["down"]);
    }
}

/// The lab: clients in their own namespaces resolve a Coralized name through
/// unbound (stub zones to the nodes' dnssrv) and fetch through coral from an
/// origin behind a 384 kbit/s tbf; every byte checked, one origin fetch per
/// image; headless Chromium loads a page with all its images through coral
/// (none straight from the origin); `down` leaves no namespace behind.
#[test]
fn lab_clients_fetch_through_unbound_and_coral_and_down_leaves_nothing() {
    if let Err(why) = namespaces_work() {
        eprintln!("SKIPPED: network namespaces cannot be created here ({why})");
        return;
    }
    let state = std::env::temp_dir().join(format!("coral-test-lab-{}", std::process::id()));
    let guard = Lab(state.clone());
    let up = lab(&state, &["up", "3", "2"]);
    assert!(
        up.status.success(),
        "lab up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let run = lab(&state, &["run", "1"]);
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "lab run: {text}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        text.contains("24 fetches, 24 with the right bytes, 0 wrong; origin served 12 image fetches for 12 images, 0 requests straight from clients"),
        "{text}"
    );
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lab");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join("chromium-page0.png");
    let _ = std::fs::remove_file(&png);
    let browser = lab(&state, &["browser", png.to_str().unwrap()]);
    assert!(
        browser.status.success(),
        "browser: {}",
        String::from_utf8_lossy(&browser.stderr)
    );
    let png_bytes = std::fs::read(&png).unwrap();
    assert!(png_bytes.starts_with(b"\x89PNG"));
    let access = std::fs::read_to_string(state.join("nginx-access.log")).unwrap();
    // The browser's page came through a proxy (coral's own User-Agent: the
    // browser's never reaches the origin, issue 22 item 6), its images from
    // coral's caches: nothing from a client.
    assert!(
        access.lines().any(|l| l.contains("GET /page0.html")
            && l.contains("CoralWebPrx")
            && !l.contains("HeadlessChrome")),
        "{access}"
    );
    let from_client = |l: &&str| {
        l.split(['.', ' '])
            .nth(3)
            .and_then(|o| o.parse::<u8>().ok())
            .is_some_and(|o| (101..200).contains(&o))
    };
    let direct: Vec<&str> = access.lines().filter(from_client).collect();
    assert!(
        direct.is_empty(),
        "clients reached the origin directly: {direct:?}"
    );
    eprintln!("lab screenshot: {}", png.display());
    // The processes `up` started (nginx, the nodes, unbound), as it recorded
    // them: `down` must stop exactly these.
    let created = std::fs::read_to_string(state.join("created")).unwrap();
    let started: Vec<Started> = created
        .lines()
        .filter_map(|l| l.strip_prefix("pid "))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .filter_map(|pid| stat_of(pid).map(|(_, _, start)| Started { pid, start }))
        .collect();
    assert_eq!(
        started.len(),
        5,
        "nginx, 3 nodes, unbound running: {created}"
    );
    let prefix = lab_prefix();
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(ns.contains(&format!("{prefix}br")), "our namespaces: {ns}");
    drop(guard);
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(!ns.contains(&prefix), "namespaces left: {ns}");
    assert!(!state.exists());
    let left = still_running(&started);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// A second `coral demo` on addresses another holds (most likely the first
/// demo) fails at once and says to move it with `--net` (issue 25).
#[test]
fn a_demo_on_a_taken_address_points_at_net() {
    // The origin's address taken.
    let held = std::net::TcpListener::bind("127.17.7.250:8080").unwrap();
    let o = Command::new(CORAL)
        .args(["demo", "--nodes", "1", "--clients", "1", "--seconds", "1"])
        .args(["--net", "127.17.7"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--net 127.17.8"), "{err}");
    drop(held);
    // A node's DSHT address taken: the node refuses, the demo says why.
    let held = std::net::UdpSocket::bind("127.17.9.1:7000").unwrap();
    let o = Command::new(CORAL)
        .args(["demo", "--nodes", "1", "--clients", "1", "--seconds", "1"])
        .args(["--net", "127.17.9"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--net 127.17.10") && err.contains("127.17.9.1:7000"),
        "{err}"
    );
    drop(held);
}
