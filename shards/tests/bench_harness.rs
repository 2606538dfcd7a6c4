//! The benchmarks' quick modes (issue 27): each harness runs for a second
//! or two and must finish with answers counted. Nothing here judges speed
//! (one memory bound is checked: RSS per idle keep-alive connection):
//! a harness that runs is what is proved, so `benches/README.md`'s
//! commands keep working. Run by `cargo test --release --workspace --all-features` (and
//! so by `.ci/run`).
//!
//! - `shards/benches/dsht_udp.rs`, `proxy_hits.rs` and `idle_conns.rs` are
//!   compiled into this test and run with their quick arguments;
//! - `benches/counts.sh` (`QUICK=1`), `benches/cores.sh --quick`,
//!   `benches/dns.sh 1 1` and `benches/onecore.sh` (each also `TOGETHER=1`),
//!   `benches/proxy_ab.sh`, `benches/ring_ops.sh`, `benches/sim_ab.sh`
//!   run as scripts, with
//!   this test's `coral` and, for DSHT load, this very binary (it answers
//!   `key`, `load` and `echo` as the dsht_udp bench does).
//!
//! A harness whose tools are missing here (perf, wrk, nginx, dnsperf,
//! knotd, nsd) is reported and passed over. Everything runs in a network
//! namespace of the test's own.
//!
//! `harness = false`: `cargo test -p coral-shards --test bench_harness
//! [NAME...]` runs the named harnesses only (dsht_udp, proxy_hits,
//! idle_conns, counts, cores, dns, proxy_ab, onecore, ring_ops, sim_ab).

// Each bench compiled in below declares its own `mod common;` (the benches'
// shared helpers): loaded once per bench here, as in the bench binaries.
#![allow(clippy::duplicate_mod)]

mod common;

#[path = "../benches/dsht_udp.rs"]
#[allow(dead_code)]
mod dsht_udp;
#[path = "../benches/idle_conns.rs"]
#[allow(dead_code)]
mod idle_conns;
#[path = "../benches/proxy_hits.rs"]
#[allow(dead_code)]
mod proxy_hits;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Proc;

const CORAL: &str = env!("CARGO_BIN_EXE_coral");
/// RSS one idle keep-alive connection may cost the node, at 1,000 of them
/// (measured 6.3 KB, and 3.8 KB at 10,000; 61 KB before issue 27).
const IDLE_CONNECTION_RSS_BYTES_MAX: f64 = 16384.0;
/// How long one script may run (generous: the machine may be loaded).
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args([
            "-c",
            &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
        ])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The floor example, when this build made it (`cargo test` builds the
/// examples; a filtered run may not have).
fn floor() -> Option<PathBuf> {
    Path::new(CORAL)
        .parent()
        .map(|d| d.join("examples").join("floor"))
        .filter(|p| p.exists())
}

/// Runs `script` with `args` and `env`; its output, once it exited 0.
fn script(script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join(script))
        .args(args)
        .env("CORAL", CORAL)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(f) = floor() {
        cmd.env("FLOOR", f);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut p = Proc::spawn(&mut cmd, script);
    let status = p.exit_within(SCRIPT_LIMIT);
    if status.is_none() {
        // Its EXIT trap stops the servers it started.
        p.signal(libc::SIGTERM);
        let _ = p.exit_within(Duration::from_secs(20));
        panic!("{script} ran past {SCRIPT_LIMIT:?}");
    }
    let mut out = String::new();
    let mut err = String::new();
    use std::io::Read;
    if let Some(o) = p.child().stdout.as_mut() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(e) = p.child().stderr.as_mut() {
        let _ = e.read_to_string(&mut err);
    }
    println!("{script} {}:\n{out}{err}", args.join(" "));
    assert!(
        status.is_some_and(|s| s.success()),
        "{script} failed: {status:?}\n{out}\n{err}"
    );
    out + &err
}

/// The number before ` answers` on the line that starts with `prefix`.
fn answers(out: &str, prefix: &str) -> u64 {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let i = words.iter().position(|w| *w == "answers")?;
            words.get(i.checked_sub(1)?)?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no `{prefix} ... N answers` line in:\n{out}"))
}

fn counts() {
    if !have("perf") || !have("wrk") || !have("nginx") {
        println!("counts: skipped (needs perf, wrk and nginx)");
        return;
    }
    let me = std::env::current_exe().expect("this test's path");
    let me = me.to_string_lossy();
    let out = script(
        "benches/counts.sh",
        &["1", "hits4k", "hits50m", "dns", "dsht"],
        &[("QUICK", "1"), ("DSHT_UDP", &me)],
    );
    assert!(answers(&out, "coral 4k") > 0);
    assert!(answers(&out, "coral 50m") > 0);
    if floor().is_some() {
        assert!(answers(&out, "floor 4k") > 0);
        // A body the socket does not take whole goes on at EPOLLOUT.
        assert!(answers(&out, "floor 50m") > 0);
    }
    if have("dnsperf") {
        assert!(answers(&out, "coral dns") > 0);
        // DNS on two cores (`CORES=2`, issue 27 goal 5): coral --cores 2
        // and two floors, and the queries each core answered.
        let two = script(
            "benches/counts.sh",
            &["1", "dns"],
            &[("QUICK", "1"), ("CORES", "2")],
        );
        assert!(answers(&two, "coral dns") > 0);
        assert!(two.contains("coral's queries by core:"), "{two}");
        if floor().is_some() {
            assert!(answers(&two, "floor dns") > 0);
        }
    }
    assert!(answers(&out, "coral dsht get") > 0);
    assert!(answers(&out, "echo") > 0);
}

fn ring_ops() {
    if !have("perf") || !have("wrk") || !have("curl") || floor().is_none() {
        println!("ring_ops: skipped (needs perf, wrk, curl and the floor example)");
        return;
    }
    let out = script("benches/ring_ops.sh", &["4k", "1", "4"], &[]);
    let requests: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("requests "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `requests N` line in:\n{out}"));
    assert!(requests > 0, "{out}");
    assert!(out.contains("system calls by number:"), "{out}");
}

fn cores() {
    let me = std::env::current_exe().expect("this test's path");
    let me = me.to_string_lossy();
    let mut env = vec![("NO_NETNS", "1"), ("DSHT_UDP", &*me)];
    if !have("wrk") || floor().is_none() {
        env.push(("WORKLOADS", "dsht"));
    }
    let out = script("benches/cores.sh", &["--quick"], &env);
    for n in ["1", "2"] {
        let line = format!("dsht  coral  cores {n} ");
        assert!(answers(&out, &line) > 0, "{line}");
    }
    // Every get was handled on the core that owns its key.
    for l in out.lines().filter(|l| l.starts_with("dsht  steering:")) {
        assert!(l.contains("(0 elsewhere)"), "{l}");
    }
}

fn dns() {
    if !(have("knotd") && have("nsd") && have("dnsperf") && have("kdig")) {
        println!("dns: skipped (needs knotd, nsd, dnsperf and kdig)");
        return;
    }
    let out = script("benches/dns.sh", &["1", "1"], &[]);
    assert!(out.contains("coral  answered"), "{out}");
    // The together mode: every server on CPU 0, every dnsperf on the last.
    let last = last_cpu();
    let mut env = vec![("TOGETHER", "1")];
    for k in ["CORAL_CPU", "KNOT_CPU", "NSD_CPU", "FLOOR_CPU"] {
        env.push((k, "0"));
    }
    for k in ["CORAL_LOAD", "KNOT_LOAD", "NSD_LOAD", "FLOOR_LOAD"] {
        env.push((k, last.as_str()));
    }
    let out = script("benches/dns.sh", &["1", "1"], &env);
    for who in ["coral", "knot", "nsd"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{who:<6} answered")))
            .unwrap_or_else(|| panic!("no {who} line together:\n{out}"));
        assert!(line.contains(" steal "), "{line}");
    }
}

/// The highest CPU number this test may pin a load generator to.
fn last_cpu() -> String {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (n - 1).to_string()
}

fn proxy_ab() {
    if !have("wrk") || !have("nginx") {
        println!("proxy_ab: skipped (needs wrk and nginx)");
        return;
    }
    script(
        "benches/proxy_ab.sh",
        &[CORAL, CORAL, "4096", "1", "1"],
        &[],
    );
}

/// The simulator's two builds side by side, this build against itself on a
/// small network: both rounds' reports the same (the script exits 2 if
/// not), each with its user CPU and peak RSS.
fn sim_ab() {
    let out = script(
        "benches/sim_ab.sh",
        &[
            CORAL,
            CORAL,
            "2",
            "--nodes",
            "300",
            "--minutes",
            "1",
            "--no-baseline",
        ],
        &[],
    );
    for r in ["round 1:", "round 2:"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(r))
            .unwrap_or_else(|| panic!("no `{r}` line in:\n{out}"));
        assert!(line.ends_with("reports same"), "{line}");
        // Both builds report their peak RSS, and `times` gave user CPU.
        assert!(
            line.contains(" KB; new (CPU ") && !line.contains("RSS ?"),
            "{line}"
        );
        assert!(
            !line.contains("user  s") && !line.contains("CPU 0.000"),
            "{line}"
        );
    }
    assert!(
        out.contains("new/old user CPU over 2 rounds: min "),
        "{out}"
    );
}

fn onecore() {
    let Some(f) = floor() else {
        println!("onecore: skipped (needs the floor example)");
        return;
    };
    if !have("wrk") {
        println!("onecore: skipped (needs wrk)");
        return;
    }
    let out = script(
        "benches/onecore.sh",
        &[CORAL, CORAL, "1", "1"],
        &[("FLOOR", &f.to_string_lossy())],
    );
    for who in ["old", "new", "floor"] {
        for size in ["4k ", "41k"] {
            assert!(
                answers(&out, &format!("{size} round 1 {who} ")) > 0,
                "{size} {who}"
            );
        }
    }
    // The together mode: the servers on CPU 0, the three wrk at once on the last.
    let last = last_cpu();
    let out = script(
        "benches/onecore.sh",
        &[CORAL, CORAL, "1", "1"],
        &[
            ("FLOOR", &f.to_string_lossy()),
            ("TOGETHER", "1"),
            ("C_OLD", "0"),
            ("C_NEW", "0"),
            ("C_FLOOR", "0"),
            ("C_ORIGIN", &last),
            ("C_LOAD_OLD", &last),
            ("C_LOAD_NEW", &last),
            ("C_LOAD_FLOOR", &last),
        ],
    );
    assert!(out.contains("together:"), "{out}");
    for who in ["old", "new", "floor"] {
        for size in ["4k ", "41k"] {
            assert!(
                answers(&out, &format!("{size} round 1 {who} ")) > 0,
                "together: {size} {who}"
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Started by a harness as the dsht_udp bench (`key`, `load`, `echo`).
    if dsht_udp::run_mode(&args) {
        return;
    }
    // `cargo test` passes libtest's flags to every test binary; names
    // select harnesses.
    let names: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let want = |name: &str| names.is_empty() || names.iter().any(|n| name.contains(n));
    common::own_network();
    // The nodes the benches start keep their state under the working
    // directory: a scratch one, not the source tree.
    let scratch = common::temp_dir("bench-harness");
    std::env::set_current_dir(scratch.path()).expect("into the scratch directory");
    if want("idle_conns") {
        // A bound, not a speed: an idle keep-alive connection held ~60 KB
        // of the node's RSS (its input buffer and a task twice the size
        // of the miss path) and holds ~4-6 KiB now (ARCHITECTURE.md,
        // `server/io.rs`); SECURITY.md's table cites this check.
        let per = idle_conns::run(1000, None);
        assert!(
            per <= IDLE_CONNECTION_RSS_BYTES_MAX,
            "{per:.0} bytes of RSS per idle keep-alive connection (bound {IDLE_CONNECTION_RSS_BYTES_MAX})"
        );
    }
    if want("proxy_hits") {
        if have("wrk") && have("nginx") {
            proxy_hits::run(1, 1, 8);
        } else {
            println!("proxy_hits: skipped (needs wrk and nginx)");
        }
    }
    if want("counts") {
        counts();
    }
    if want("cores") {
        cores();
    }
    if want("dns") {
        dns();
    }
    if want("proxy_ab") {
        proxy_ab();
    }
    if want("onecore") {
        onecore();
    }
    if want("ring_ops") {
        ring_ops();
    }
    if want("sim_ab") {
        sim_ab();
    }
    // Last: it pins the calling thread (and what it starts after) to one CPU.
    if want("dsht_udp") {
        dsht_udp::run(0.5, 16);
    }
    println!("bench_harness: the harnesses ran");
}
