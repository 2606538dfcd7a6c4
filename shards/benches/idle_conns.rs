//! Many connections (issue 27, goal 4): what an idle keep-alive client
//! connection costs a node, and whether a busy few are served as fast with
//! thousands idle beside them.
//!
//! A node (`--cores 1`) caches one 4 KiB object from an origin this bench
//! serves itself. Then N clients each connect, fetch the object once (a hit)
//! and stay connected, idle, as a browser's keep-alive connection does. The
//! figure is the node's resident memory (VmRSS) after the N connections less
//! before, divided by N: bytes of RSS per idle connection (goal ≤ 4 KiB).
//! The kernel's socket memory is not in it (printed beside it, from
//! /proc/net/sockstat). With wrk installed, a busy few (`wrk -c 8`) run
//! before and with the idle connections open: their p99 (printed, not
//! judged: a time).
//!
//! RSS is a count of pages, not a rate: a loaded machine does not change it.
//!
//! `cargo bench -p coral-shards --bench idle_conns [-- CONNECTIONS [WRK_SECONDS]]`
//! (defaults 10000 3). `CORAL=/path/to/coral` measures another build.
//! `-- --quick` (100 connections, no wrk) proves the harness works and
//! judges nothing; `shards/tests/bench_harness.rs` runs it. Run it in a
//! network namespace: `unshare -n sh -c 'ip link set lo up && cargo bench
//! -p coral-shards --bench idle_conns'`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The node binary: this build's, or `$CORAL`.
fn coral() -> String {
    std::env::var("CORAL").unwrap_or_else(|_| env!("CARGO_BIN_EXE_coral").to_string())
}

const IP: &str = "127.15.200.1";
const ORIGIN_PORT: u16 = 8080;
const NODE_HTTP_PORT: u16 = 8090;
const NODE_ADMIN_PORT: u16 = 7080;
const BODY_BYTES: usize = 4096;
/// How long a server started here may take to come up (the machine may be
/// loaded).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one client's request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const HOST: &str = "origin.test.8080.coral.test";

/// A process killed (SIGTERM, then SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: plain syscall on the pid of our own child.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The origin: answers every request with the same cacheable 4 KiB body and
/// closes the connection.
fn serve_origin(listener: TcpListener) {
    let body = vec![b'i'; BODY_BYTES];
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\
         Cache-Control: public, max-age=3600\r\nConnection: close\r\n\r\n",
        body.len()
    );
    for conn in listener.incoming() {
        let Ok(mut s) = conn else { continue };
        let _ = s.set_read_timeout(Some(REQUEST_TIMEOUT));
        let mut req = Vec::new();
        let mut buf = [0u8; 2048];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s.write_all(head.as_bytes());
        let _ = s.write_all(&body);
    }
}

/// Sends one GET for the object on `s` and reads its answer (head and
/// `BODY_BYTES` of body); the status line's code.
fn get(s: &mut TcpStream) -> std::io::Result<u16> {
    s.write_all(
        format!("GET /object.bin HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: idle-conns\r\n\r\n")
            .as_bytes(),
    )?;
    let mut got = Vec::with_capacity(BODY_BYTES + 512);
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() >= end + 4 + BODY_BYTES {
                let code = std::str::from_utf8(got.get(9..12).unwrap_or(b"000"))
                    .ok()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                return Ok(code);
            }
        }
    }
}

/// VmRSS of `pid`, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// TCP socket memory of this network namespace, in pages
/// (/proc/net/sockstat, `TCP: ... mem N`).
fn tcp_mem_pages() -> u64 {
    let s = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("TCP:"))
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.iter()
                .position(|w| *w == "mem")
                .and_then(|i| f.get(i + 1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// wrk's p99 in milliseconds and requests per second, `conns` connections.
fn wrk_p99(secs: u64, conns: usize) -> Option<(f64, f64)> {
    let out = Command::new("wrk")
        .args(["-t1", "--latency", "-c", &conns.to_string()])
        .args(["-d", &format!("{secs}s"), "-H", &format!("Host: {HOST}")])
        .arg(format!("http://{IP}:{NODE_HTTP_PORT}/object.bin"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let p99 = text
        .lines()
        .find(|l| l.trim_start().starts_with("99%"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|v| {
            let (num, unit) = v.split_at(v.find(|c: char| c.is_alphabetic()).unwrap_or(v.len()));
            let n: f64 = num.parse().unwrap_or(0.0);
            match unit {
                "us" => n / 1000.0,
                "s" => n * 1000.0,
                _ => n,
            }
        })?;
    let rps = text
        .lines()
        .find(|l| l.starts_with("Requests/sec:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Some((p99, rps))
}

fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on a valid struct.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        r.rlim_cur
    }
}

fn wait_for_port(addr: SocketAddr) {
    let start = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(start.elapsed() < START_TIMEOUT, "{addr} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let quick = args.iter().any(|a| a == "--quick");
    let nums: Vec<u64> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let conns = if quick {
        100
    } else {
        nums.first().copied().unwrap_or(10_000) as usize
    };
    let wrk_secs = nums.get(1).copied().unwrap_or(3);
    run(conns, if quick { None } else { Some(wrk_secs) });
}

/// The benchmark: `conns` idle connections; the busy few for `wrk_secs`
/// seconds (none: no wrk). Returns the bytes of RSS per idle connection.
pub fn run(conns: usize, wrk_secs: Option<u64>) -> f64 {
    let fd_limit = raise_fd_limit();
    assert!(
        fd_limit as usize > conns + 64,
        "this process may open {fd_limit} descriptors: too few for {conns} connections (ulimit -n)"
    );
    let dir = std::env::temp_dir().join(format!("coral-idle-conns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let origin = TcpListener::bind((IP, ORIGIN_PORT)).expect("origin address");
    std::thread::spawn(move || serve_origin(origin));

    let config = dir.join("coral.toml");
    std::fs::write(
        &config,
        format!(
            "[proxy]\nconnections_max = {}\nclient_idle_timeout_ms = 600000\n",
            conns + 64
        ),
    )
    .unwrap();
    let node = Proc(
        Command::new(coral())
            .args(["node", "--cores", "1"])
            .args(["--dsht", &format!("{IP}:7000")])
            .args(["--admin", &format!("{IP}:{NODE_ADMIN_PORT}")])
            .args(["--http", &format!("{IP}:{NODE_HTTP_PORT}")])
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .args([
                "--allow-private-origins",
                "--resolve",
                &format!("origin.test={IP}"),
            ])
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            // The node keeps its state (its key) under its working directory.
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("coral node"),
    );
    let node_addr: SocketAddr = format!("{IP}:{NODE_HTTP_PORT}").parse().unwrap();
    wait_for_port(node_addr);
    let pid = node.0.id();

    // Warm up: the object is fetched and cached, and the hit path has run on
    // a few connections (its buffers and tables are made).
    for _ in 0..64 {
        let mut s = TcpStream::connect(node_addr).unwrap();
        s.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
        for _ in 0..4 {
            assert_eq!(get(&mut s).expect("warm-up request"), 200);
        }
    }
    let wrk_secs = wrk_secs.filter(|_| Command::new("wrk").arg("--version").output().is_ok());
    let busy_before = wrk_secs.and_then(|s| wrk_p99(s, 8));
    std::thread::sleep(Duration::from_millis(200));
    let rss0 = rss_bytes(pid);
    let mem0 = tcp_mem_pages();

    let mut idle = Vec::with_capacity(conns);
    let start = Instant::now();
    for i in 0..conns {
        let mut s = TcpStream::connect(node_addr)
            .unwrap_or_else(|e| panic!("connection {i} of {conns}: {e}"));
        s.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
        let code = get(&mut s).unwrap_or_else(|e| panic!("request on connection {i}: {e}"));
        assert_eq!(code, 200, "connection {i}");
        idle.push(s);
    }
    let opened = start.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let rss1 = rss_bytes(pid);
    let mem1 = tcp_mem_pages();
    let busy_with = wrk_secs.and_then(|s| wrk_p99(s, 8));
    // Every idle connection is still served.
    let mut alive = 0;
    for s in idle.iter_mut().step_by((conns / 100).max(1)) {
        if get(s).map(|c| c == 200).unwrap_or(false) {
            alive += 1;
        }
    }
    let per = (rss1 as f64 - rss0 as f64) / conns as f64;
    println!(
        "{conns} idle keep-alive connections, each after one 4 KiB hit (opened in {:.1} s)",
        opened.as_secs_f64()
    );
    println!(
        "node RSS {:.1} MiB before, {:.1} MiB with them: {:.0} bytes of RSS per idle connection (goal <= 4096)",
        rss0 as f64 / 1048576.0,
        rss1 as f64 / 1048576.0,
        per
    );
    println!(
        "kernel TCP memory (both ends, all sockets): {} pages before, {} with them",
        mem0, mem1
    );
    println!(
        "{alive} of {} sampled idle connections answered a second request",
        conns.div_ceil((conns / 100).max(1))
    );
    match (busy_before, busy_with, wrk_secs) {
        (Some((p0, r0)), Some((p1, r1)), Some(wrk_secs)) => println!(
            "busy few (wrk -c 8, {wrk_secs} s): p99 {p0:.2} ms alone, {p1:.2} ms beside the idle ones \
             ({r0:.0} and {r1:.0} requests/s; times, not judged)"
        ),
        _ => println!("(no busy-few row: wrk not run)"),
    }
    assert_eq!(
        alive,
        conns.div_ceil((conns / 100).max(1)),
        "every sampled idle connection is still served"
    );
    drop(idle);
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
    per
}
