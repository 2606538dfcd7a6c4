//! The start-up hint probe (§3.1, §4.4) across real hosts: three network
//! namespaces, A — R — B, with R routing between two subnets. Needs root and
//! iproute2 (`.ci/run` installs it).

use std::process::Command;
use std::time::{Duration, Instant};

const CORAL: &str = env!("CARGO_BIN_EXE_coral");

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2 `ip` is needed for this test");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three namespaces, deleted (with their links) when dropped.
struct Lab {
    a: String,
    r: String,
    b: String,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.a, &self.r, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Lab {
    fn new() -> Lab {
        let tag = std::process::id() % 100_000;
        let lab = Lab {
            a: format!("coral-a{tag}"),
            r: format!("coral-r{tag}"),
            b: format!("coral-b{tag}"),
        };
        for ns in [&lab.a, &lab.r, &lab.b] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        let (va, vra, vb, vrb) = (
            format!("ca{tag}"),
            format!("cra{tag}"),
            format!("cb{tag}"),
            format!("crb{tag}"),
        );
        ip(&[
            "link", "add", &va, "netns", &lab.a, "type", "veth", "peer", "name", &vra, "netns",
            &lab.r,
        ]);
        ip(&[
            "link", "add", &vb, "netns", &lab.b, "type", "veth", "peer", "name", &vrb, "netns",
            &lab.r,
        ]);
        ip(&["-n", &lab.a, "addr", "add", "198.18.1.2/24", "dev", &va]);
        ip(&["-n", &lab.r, "addr", "add", "198.18.1.1/24", "dev", &vra]);
        ip(&["-n", &lab.r, "addr", "add", "198.18.2.1/24", "dev", &vrb]);
        ip(&["-n", &lab.b, "addr", "add", "198.18.2.2/24", "dev", &vb]);
        for (ns, dev) in [(&lab.a, &va), (&lab.r, &vra), (&lab.r, &vrb), (&lab.b, &vb)] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        ip(&["-n", &lab.a, "route", "add", "default", "via", "198.18.1.1"]);
        ip(&["-n", &lab.b, "route", "add", "default", "via", "198.18.2.1"]);
        let fwd = Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.r,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ])
            .status()
            .unwrap();
        assert!(fwd.success());
        lab
    }

    fn exec(&self, ns: &str, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", ns, CORAL])
            .args(args)
            .output()
            .unwrap()
    }
}

#[test]
fn probe_finds_the_router_and_the_node_stores_its_hint() {
    let lab = Lab::new();
    let out = lab.exec(&lab.a, &["hints", "--to", "198.18.2.2", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let routers = found["routers"].as_array().unwrap();
    assert_eq!(routers.len(), 1, "{found}");
    assert_eq!(routers[0]["ttl"], 1);
    assert_eq!(routers[0]["addr"], "198.18.1.1");

    // A node in B, and a node in A joining through it: A's start-up probe
    // finds R and stores a hint under R's address pointing at A.
    let mut b = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.b,
            CORAL,
            "node",
            "--dsht",
            "198.18.2.2:7000",
            "--cores",
            "1",
        ])
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut a = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.a,
            CORAL,
            "node",
            "--dsht",
            "198.18.1.2:7000",
            "--cores",
            "1",
        ])
        .args(["--bootstrap", "198.18.2.2:7000"])
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let router_key = coral::Id::from_ip("198.18.1.1".parse().unwrap()).to_string();
    let start = Instant::now();
    let mut hint = serde_json::Value::Null;
    while start.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(500));
        let out = lab.exec(
            &lab.b,
            &["get", &router_key, "--node", "127.0.0.1:7080", "--json"],
        );
        if out.status.success() {
            hint = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if hint["values"].as_array().is_some_and(|v| !v.is_empty()) {
                break;
            }
        }
    }
    let _ = a.kill();
    let _ = b.kill();
    let _ = a.wait();
    let _ = b.wait();
    let values = hint["values"].as_array().cloned().unwrap_or_default();
    assert!(
        values.iter().any(|v| v["addr"] == "198.18.1.2:7000"),
        "no hint under the router's address pointing at node A: {hint}"
    );
}
