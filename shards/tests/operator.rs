//! An operator's first hour (issue 25), following README.md literally in a
//! fresh network namespace of its own: the set-up's `coral node &`, the
//! second node exactly as "Using it" starts it, then "Running a node for
//! real": the public-host config (its TOML block, written where the README
//! says, with the temporary directory standing in for `/etc/coral` and
//! `/var/cache/coral`) on a public address inside the namespace (the
//! README's 192.0.2.1 on a veth interface), its `check-config`, its node
//! and its `kdig`.
//!
//! It checks every listener (who holds each address, with `ss`), every
//! refusal (each listener taken by another coral node or another program,
//! UDP and TCP, a wildcard against a specific address both ways), a restart
//! on the addresses a node just left, and that the DNS delegation names a
//! dnssrv that serves on the address and port it is delegated to.
//!
//! Needs root, `ip` (iproute2), `ss` and `kdig`; prints `SKIPPED` without
//! namespaces. Every process runs in a process group of its own, killed at
//! the end; the namespace is deleted.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{in_netns, records, temp_dir, wait_until, Proc, CORAL, START_WAIT};

/// A network namespace of this test's, deleted when dropped.
struct Netns(String);

impl Netns {
    /// A fresh namespace with loopback up, or `None` where this machine
    /// cannot make one.
    fn new(tag: &str) -> Option<Netns> {
        let name = format!("coral-op-{tag}-{}", std::process::id());
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return None;
        }
        let ns = Netns(name);
        ns.ip(&["link", "set", "lo", "up"]);
        Some(ns)
    }

    /// `ip -n <ns> args...`, which must succeed.
    fn ip(&self, args: &[&str]) {
        let o = Command::new("ip")
            .args(["-n", &self.0])
            .args(args)
            .output()
            .expect("ip");
        assert!(
            o.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Where the README's commands run: inside the namespace, in a directory
/// of the test's, with the `coral` under test first on PATH.
struct Shell<'a> {
    ns: &'a Netns,
    dir: PathBuf,
}

impl Shell<'_> {
    fn command(&self, line: &str) -> Command {
        let bin = Path::new(CORAL).parent().unwrap();
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns.0, "bash", "-c", line])
            .current_dir(&self.dir)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("RUST_LOG", "info");
        c
    }

    /// Runs a README line to its end (a node that should refuse to start
    /// is given `START_WAIT`, then the line fails).
    fn run(&self, line: &str) -> Output {
        let limit = START_WAIT.as_secs().to_string();
        let mut c = self.command(&format!("timeout -s KILL {limit} {line}"));
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut p = Proc::spawn(&mut c, line);
        let mut out = p.child().stdout.take().unwrap();
        let mut err = p.child().stderr.take().unwrap();
        let e = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = err.read_to_end(&mut v);
            v
        });
        let mut stdout = Vec::new();
        let _ = out.read_to_end(&mut stdout);
        let status = p.child().wait().expect("wait");
        Output {
            status,
            stdout,
            stderr: e.join().unwrap(),
        }
    }

    /// Starts a README line that ends in `&`: in the background, its
    /// stderr in `log`, waited for until `coral levels --node ADMIN`
    /// answers.
    fn background(&self, line: &str, admin: &str, log: &str) -> Proc {
        let cmd = line.trim().trim_end_matches('&').trim();
        let mut c = self.command(&format!("exec {cmd} 2>>{log}"));
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let mut p = Proc::spawn(&mut c, line);
        let levels = format!("coral levels --node {admin} --json");
        wait_until(START_WAIT, Duration::from_millis(100), || {
            if let Ok(Some(st)) = p.child().try_wait() {
                panic!(
                    "`{line}` exited ({st}):\n{}",
                    std::fs::read_to_string(self.dir.join(log)).unwrap_or_default()
                );
            }
            let o = self.command(&levels).output().expect("coral levels");
            o.status.success().then_some(()).ok_or(format!(
                "`{line}` not ready:\n{}",
                std::fs::read_to_string(self.dir.join(log)).unwrap_or_default()
            ))
        });
        p
    }

    /// Who listens where: `(proto, address) -> pids`, from `ss`.
    fn listeners(&self) -> BTreeMap<(String, String), Vec<u32>> {
        let mut out: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
        for (proto, flag) in [("udp", "-ulnpH"), ("tcp", "-tlnpH")] {
            let o = self
                .command(&format!("ss {flag}"))
                .output()
                .expect("ss (iproute2)");
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                let Some(local) = f.get(3) else { continue };
                let pids = line
                    .split("pid=")
                    .skip(1)
                    .filter_map(|p| p.split(',').next()?.parse::<u32>().ok());
                let e = out
                    .entry((proto.to_string(), local.to_string()))
                    .or_default();
                for p in pids {
                    if !e.contains(&p) {
                        e.push(p);
                    }
                }
            }
        }
        out
    }
}

/// The text of the README's section that starts with `heading`.
fn readme_section(heading: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let s = readme
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("README has {heading:?}"));
    s.split("\n## ").next().unwrap().to_string()
}

/// The fenced blocks of `lang` in `text`, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    text.split(&format!("```{lang}\n"))
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_string())
        .collect()
}

/// The commands of a `sh` block: comments cut, blank lines dropped.
fn commands(block: &str) -> Vec<String> {
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Asserts that every address in `want` is held by `pid` alone.
fn held_by(l: &BTreeMap<(String, String), Vec<u32>>, want: &[(&str, &str)], pid: u32) {
    for (proto, addr) in want {
        let pids = l.get(&(proto.to_string(), addr.to_string()));
        assert_eq!(
            pids,
            Some(&vec![pid]),
            "{proto} {addr}: want pid {pid} alone; listeners: {l:?}"
        );
    }
}

/// A node that must refuse to start: exit 1, naming the address, its
/// protocol and the flag that moves it, and nothing left running.
fn refused(sh: &Shell, line: &str, address: &str, proto: &str, flag: &str) {
    let o = sh.run(line);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "`{line}`:\n{t}");
    assert!(
        t.contains(&format!("address {address} ({proto}) is in use")) && t.contains(flag),
        "`{line}`: want {address} ({proto}) and {flag}:\n{t}"
    );
    assert!(!t.contains("coral node running"), "`{line}`:\n{t}");
    assert!(!t.contains("panicked"), "`{line}`:\n{t}");
}

#[test]
fn readme_operator_walkthrough_in_a_fresh_namespace() {
    let Some(ns) = Netns::new("walk") else {
        eprintln!("SKIPPED: needs root and ip(8) to make a network namespace");
        return;
    };
    let tmp = temp_dir("operator");
    let sh = Shell {
        ns: &ns,
        dir: tmp.path().to_path_buf(),
    };

    // ---- Set-up: `coral node &`, as written.
    let setup = commands(&blocks(&readme_section("## Set-up"), "sh")[0]);
    let first_line = setup
        .iter()
        .find(|l| l.starts_with("coral node"))
        .expect("the set-up's `coral node &`");
    assert_eq!(first_line, "coral node &");
    let first = sh.background(first_line, "127.0.0.1:7080", "first.log");
    let l = sh.listeners();
    held_by(
        &l,
        &[
            ("udp", "127.0.0.1:7000"),
            ("tcp", "127.0.0.1:7080"),
            ("tcp", "127.0.0.1:8090"),
            ("udp", "127.0.0.1:7053"),
            ("tcp", "127.0.0.1:7053"),
        ],
        first.id(),
    );

    // ---- Using it: the second node as the README starts it. Its dnssrv
    // and proxy follow its DSHT address; it shares no port with the first.
    let using = commands(&blocks(&readme_section("## Using it"), "sh")[0]);
    let second_line = using
        .iter()
        .find(|l| l.starts_with("coral node") && l.ends_with('&'))
        .expect("the README's second node")
        .clone();
    let second = sh.background(&second_line, "127.0.0.2:7080", "second.log");
    let l = sh.listeners();
    held_by(
        &l,
        &[
            ("udp", "127.0.0.2:7000"),
            ("tcp", "127.0.0.2:7080"),
            ("tcp", "127.0.0.2:8090"),
            ("udp", "127.0.0.2:7053"),
            ("tcp", "127.0.0.2:7053"),
        ],
        second.id(),
    );
    for ((proto, addr), pids) in &l {
        assert_eq!(pids.len(), 1, "{proto} {addr} shared by {pids:?}");
    }

    // ---- Refusals: every listener, taken by a coral node (sharing
    // SO_REUSEPORT would otherwise let it in) or by another program.
    refused(&sh, "coral node", "127.0.0.1:7000", "UDP", "--dsht");
    refused(
        &sh,
        "coral node --dsht 127.0.0.3:7000 --admin 127.0.0.1:7080",
        "127.0.0.1:7080",
        "TCP",
        "--admin",
    );
    refused(
        &sh,
        "coral node --dsht 127.0.0.3:7000 --admin 127.0.0.3:7080 --http 127.0.0.2:8090",
        "127.0.0.2:8090",
        "TCP",
        "--http",
    );
    refused(
        &sh,
        "coral node --dsht 127.0.0.3:7000 --admin 127.0.0.3:7080 --dns 127.0.0.1:7053",
        "127.0.0.1:7053",
        "UDP",
        "--dns",
    );
    // dnssrv's TCP alone, held by another program.
    let held = in_netns(&ns.0, || TcpListener::bind("127.0.0.3:7053").unwrap());
    refused(
        &sh,
        "coral node --dsht 127.0.0.3:7000 --admin 127.0.0.3:7080",
        "127.0.0.3:7053",
        "TCP",
        "--dns",
    );
    drop(held);
    // A wildcard held, a specific address asked for (UDP) ...
    let held = in_netns(&ns.0, || UdpSocket::bind("0.0.0.0:7153").unwrap());
    refused(
        &sh,
        "coral node --dsht 127.0.0.3:7000 --admin 127.0.0.3:7080 --dns 127.0.0.3:7153",
        "127.0.0.3:7153",
        "UDP",
        "--dns",
    );
    drop(held);
    // ... and a specific address held, the wildcard asked for (TCP).
    let held = in_netns(&ns.0, || TcpListener::bind("127.0.0.4:8190").unwrap());
    refused(
        &sh,
        "coral node --dsht 127.0.0.3:7000 --admin 127.0.0.3:7080 --http 0.0.0.0:8190",
        "0.0.0.0:8190",
        "TCP",
        "--http",
    );
    drop(held);
    // The other two: a specific UDP address held, the wildcard asked for;
    // the TCP wildcard held, a specific address asked for.
    let held = in_netns(&ns.0, || UdpSocket::bind("127.0.0.5:7253").unwrap());
    refused(
        &sh,
        "coral node --dsht 127.0.0.3:7000 --admin 127.0.0.3:7080 --dns 0.0.0.0:7253",
        "0.0.0.0:7253",
        "UDP",
        "--dns",
    );
    drop(held);
    let held = in_netns(&ns.0, || TcpListener::bind("0.0.0.0:8290").unwrap());
    refused(
        &sh,
        "coral node --dsht 127.0.0.3:7000 --admin 127.0.0.3:7080 --http 127.0.0.3:8290",
        "127.0.0.3:8290",
        "TCP",
        "--http",
    );
    drop(held);
    // The refused nodes took nothing: the first still answers, alone.
    let o = sh.run("coral levels --json");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("levels JSON");
    assert_eq!(v["addr"], "127.0.0.1:7000", "{v}");

    // ---- Using it, its client lines (the nodes stay up), then a restart
    // of the second node on the addresses it just left: the connections it
    // leaves in TIME_WAIT are no refusal.
    for line in using.iter().filter(|l| {
        l.starts_with("coral put") || l.starts_with("coral get") || l.starts_with("coral stats")
    }) {
        let o = sh.run(line);
        assert!(o.status.success(), "`{line}`:\n{}", text(&o));
    }
    // `coral stats` shows the proxy and dnssrv beside the DSHT.
    let o = sh.run("coral stats");
    let t = text(&o);
    for row in [
        "datagrams_in",
        "http.connections_accepted",
        "http.cache.objects",
        "dns.",
    ] {
        assert!(t.contains(row), "no {row} row in `coral stats`:\n{t}");
    }
    drop(second);
    let second = sh.background(&second_line, "127.0.0.2:7080", "second-again.log");

    // ---- dnssrv on the set-up's node, as the README queries it; and the
    // second node's dnssrv, on its own address.
    let real = readme_section("## Running a node for real");
    let sh_blocks = blocks(&real, "sh");
    let kdigs: Vec<String> = sh_blocks
        .iter()
        .flat_map(|b| commands(b))
        .filter(|l| l.starts_with("kdig @127.0.0.1"))
        .collect();
    assert!(kdigs.len() >= 2, "{kdigs:?}");
    for line in &kdigs {
        let o = sh.run(line);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(out.contains("NOERROR"), "`{line}`:\n{}", text(&o));
        assert!(
            records(&out, "ANSWER")
                .iter()
                .any(|r| r.2 == "A" && r.3.starts_with("127.0.0.")),
            "`{line}`: no proxy:\n{out}"
        );
    }
    let o = sh.run("kdig @127.0.0.2 -p 7053 www.x.com.coral.test A");
    assert!(text(&o).contains("NOERROR"), "{}", text(&o));
    drop(second);
    drop(first);

    // ---- Running a node for real: the public-host config.
    // The host's public interface: one end of a veth pair, its peer (the
    // "outside") in the same namespace.
    ns.ip(&[
        "link", "add", "pub0", "type", "veth", "peer", "name", "pub1",
    ]);
    ns.ip(&["addr", "add", "192.0.2.1/24", "dev", "pub0"]);
    ns.ip(&["addr", "add", "192.0.2.2/24", "dev", "pub1"]);
    ns.ip(&["link", "set", "pub0", "up"]);
    ns.ip(&["link", "set", "pub1", "up"]);
    // The shipped example checks.
    let o = Command::new(CORAL)
        .args(commands(&sh_blocks[0])[0].split_whitespace().skip(1))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let etc = tmp.path().join("etc-coral");
    let cache = tmp.path().join("var-cache-coral");
    std::fs::create_dir_all(&etc).unwrap();
    let conf = etc.join("coral.toml");
    let toml = blocks(&real, "toml")
        .into_iter()
        .next()
        .expect("the public-host config");
    std::fs::write(
        &conf,
        toml.replace("/var/cache/coral", cache.to_str().unwrap()),
    )
    .unwrap();
    let public: Vec<String> = sh_blocks
        .iter()
        .flat_map(|b| commands(b))
        .filter(|l| l.contains("/etc/coral/coral.toml") || l.starts_with("kdig @192.0.2.1"))
        .map(|l| l.replace("/etc/coral/coral.toml", conf.to_str().unwrap()))
        .collect();
    assert_eq!(public.len(), 3, "{public:?}");
    // check-config: exit 0, and it names every listener and the cache.
    let o = sh.run(&public[0]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in [
        "dsht 0.0.0.0:7000 (id from 192.0.2.1:7000)",
        "admin 127.0.0.1:7080",
        "http 0.0.0.0:8090 (peers reach it at 192.0.2.1:8090)",
        "dns 0.0.0.0:53",
        &format!("cache_dir {}", cache.display()),
    ] {
        assert!(t.contains(want), "want {want:?} in {t}");
    }
    let node = sh.background(&public[1], "127.0.0.1:7080", "public.log");
    let l = sh.listeners();
    held_by(
        &l,
        &[
            ("udp", "0.0.0.0:7000"),
            ("tcp", "127.0.0.1:7080"),
            ("tcp", "0.0.0.0:8090"),
            ("udp", "0.0.0.0:53"),
            ("tcp", "0.0.0.0:53"),
        ],
        node.id(),
    );
    // The delegation: a DNAME to the zone, this proxy's public address,
    // and the zone's name server with glue — which serves, on port 53.
    let out = String::from_utf8_lossy(&sh.run(&public[2]).stdout).into_owned();
    assert!(out.contains("NOERROR"), "{out}");
    let answer = records(&out, "ANSWER");
    assert!(answer.iter().any(|r| r.2 == "DNAME"), "{out}");
    assert!(
        answer.iter().any(|r| r.2 == "A" && r.3 == "192.0.2.1"),
        "{out}"
    );
    let auth = records(&out, "AUTHORITY");
    let ns_name = auth
        .iter()
        .find(|r| r.2 == "NS")
        .map(|r| r.3.clone())
        .unwrap_or_else(|| panic!("no NS record: {out}"));
    assert!(
        ns_name.to_ascii_lowercase().starts_with("ns-c0000201."),
        "{out}"
    );
    let glue = records(&out, "ADDITIONAL");
    let glue_ip = glue
        .iter()
        .find(|r| r.0.eq_ignore_ascii_case(&ns_name) && r.2 == "A")
        .map(|r| r.3.clone())
        .unwrap_or_else(|| panic!("no glue for {ns_name}: {out}"));
    assert_eq!(glue_ip, "192.0.2.1", "{out}");
    // Where a resolver follows the delegation: the glue address, port 53.
    let delegated = sh.run(&format!(
        "kdig @{glue_ip} -p 53 www.x.com.http.L2.L1.L0.coralcdn.test A"
    ));
    let out = String::from_utf8_lossy(&delegated.stdout).into_owned();
    assert!(out.contains("NOERROR") && out.contains(" aa"), "{out}");
    assert!(
        records(&out, "ANSWER")
            .iter()
            .any(|r| r.2 == "A" && r.3 == "192.0.2.1"),
        "{out}"
    );
    // And the proxy it names answers there.
    let o = sh.run("curl -s -o /dev/null -w '%{http_code}' http://192.0.2.1:8090/");
    let code = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(code.starts_with('4'), "the proxy at 192.0.2.1:8090: {code}");

    // A second node on the same file is refused; the public config with a
    // loopback dnssrv does not check.
    let again = public[1].trim_end_matches('&').trim();
    refused(&sh, again, "0.0.0.0:7000", "UDP", "--dsht");
    let bad = etc.join("loopback-dns.toml");
    std::fs::write(
        &bad,
        format!(
            "{}dns = \"127.0.0.1:7053\"\n",
            toml.split("[proxy]").next().unwrap()
        ),
    )
    .unwrap();
    let o = sh.run(&format!("coral check-config {}", bad.display()));
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{}:4: dns", bad.display())) && t.contains("0.0.0.0:53"),
        "{t}"
    );
    drop(node);
}
