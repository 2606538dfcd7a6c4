//! DSHT get RPCs per second on one core over loopback UDP, side by side with
//! a bare UDP echo server on the same core in the same run (the kernel's
//! limit). Load comes from another core. Figures are per second of wall time
//! and per second of server CPU time; the ratio is what the goal names
//! (≥ 0.8× the echo server).
//!
//! `cargo bench -p coral-shards --bench dsht_udp [-- SECONDS [WINDOW]]`
//!
//! `CORAL=/path/to/coral` measures another build of the node (an earlier
//! commit's, to compare two builds with the same load generator), as
//! `benches/dns.sh` does.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use coral::dsht::wire::{Body, Header, Message, Services};
use coral::Id;

mod common;
use common::{allowed_cpus, cpu_secs};

/// The node binary: this build's, or `$CORAL`.
fn coral() -> String {
    std::env::var("CORAL").unwrap_or_else(|_| env!("CARGO_BIN_EXE_coral").to_string())
}

fn pin_to(cpu: usize) {
    // SAFETY: as above; the set names one CPU from our own mask.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Closed-loop load: `window` requests in flight, each answer sends the next.
/// Returns (answers, wall seconds, server CPU seconds: 0 without its pid).
fn load(
    server: SocketAddr,
    server_pid: Option<u32>,
    from: &str,
    secs: f64,
    window: usize,
    request: &dyn Fn(u32) -> Vec<u8>,
    is_answer: &dyn Fn(&[u8]) -> bool,
) -> (u64, f64, f64) {
    let sock = UdpSocket::bind(from).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let mut n = 0u32;
    for _ in 0..window {
        sock.send_to(&request(n), server).unwrap();
        n = n.wrapping_add(1);
    }
    // Warm up for a second, then measure.
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_secs(1) {
        if let Ok((len, _)) = sock.recv_from(&mut buf) {
            if is_answer(&buf[..len]) {
                let _ = sock.send_to(&request(n), server);
                n = n.wrapping_add(1);
            }
        } else {
            for _ in 0..window {
                let _ = sock.send_to(&request(n), server);
                n = n.wrapping_add(1);
            }
        }
    }
    let cpu0 = server_pid.map_or(0.0, cpu_secs);
    let start = Instant::now();
    let mut answers = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        match sock.recv_from(&mut buf) {
            Ok((len, _)) => {
                if is_answer(&buf[..len]) {
                    answers += 1;
                    let _ = sock.send_to(&request(n), server);
                    n = n.wrapping_add(1);
                }
            }
            Err(_) => {
                // Lost datagrams: refill the window.
                for _ in 0..window {
                    let _ = sock.send_to(&request(n), server);
                    n = n.wrapping_add(1);
                }
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    (answers, wall, server_pid.map_or(0.0, cpu_secs) - cpu0)
}

/// `dsht_udp echo ADDR CPU`: the bare echo server, pinned to CPU. Its
/// socket is in a reuseport group, so `benches/cores.sh` can run one per
/// core on one address (the kernel spreads the clients by address hash).
fn echo_server(addr: &str, cpu: usize) {
    pin_to(cpu);
    let addr: SocketAddr = addr.parse().expect("echo ADDR");
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .unwrap();
    s.set_reuse_port(true).unwrap();
    s.bind(&addr.into()).unwrap();
    let sock: UdpSocket = s.into();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
    }
}

/// How long a server started by this bench may take to answer (generous:
/// the machine may be loaded).
const START_TIMEOUT_SECS: u64 = 60;

/// Waits until the UDP echo server at `addr` echoes a probe.
fn wait_for_echo(addr: SocketAddr, from: &str) {
    let sock = UdpSocket::bind(from).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(START_TIMEOUT_SECS);
    let mut buf = [0u8; 64];
    while Instant::now() < deadline {
        let _ = sock.send_to(b"ready?", addr);
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            if &buf[..n] == b"ready?" {
                return;
            }
        }
    }
    panic!("echo server at {addr} did not answer in {START_TIMEOUT_SECS} s");
}

/// Waits until the node's admin endpoint answers `GET /readyz` with 200.
fn wait_for_readyz(admin: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(START_TIMEOUT_SECS);
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect_timeout(&admin, Duration::from_millis(500)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(b"GET /readyz HTTP/1.0\r\nHost: bench\r\n\r\n");
            let mut reply = Vec::new();
            let _ = s.read_to_end(&mut reply);
            if reply.starts_with(b"HTTP/1.1 200") || reply.starts_with(b"HTTP/1.0 200") {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("node at {admin} not ready (/readyz) in {START_TIMEOUT_SECS} s");
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A get for `key` from `sender`, with transaction id `txid`.
fn get_request(key: Id, sender: Id, txid: u32) -> Vec<u8> {
    Message {
        header: Header {
            route: coral::dsht::node::route_of(&key),
            txid,
            sender,
            services: Services::NONE,
            clusters: Default::default(),
        },
        body: Body::Get {
            level: 0,
            key,
            target: key,
        },
    }
    .to_bytes()
}

/// Whether `b` is a get reply.
fn is_get_reply(b: &[u8]) -> bool {
    b.len() > 1 && b[1] == 0x83
}

/// The key of `url` as `coral put url:URL` stores it (and the proxy names a
/// cached object): SHA-1 of the canonical URL.
fn url_key(url: &str) -> Id {
    let canonical = coral::proxy::names::canonicalize(url).expect("a URL that canonicalizes");
    coral::proxy::names::cache_key(&canonical)
}

/// The key every get asks for (`coral put url:http://www.x.com/y.jpg ...`
/// stores a value under it first, so every get finds one).
fn bench_key() -> Id {
    url_key("http://www.x.com/y.jpg")
}

/// The core (of `cores`) that owns `key`: the node's steering program
/// (`shards/src/steer.rs`, `shard_of_route`) maps the key's route, its first
/// two bytes, to `route · cores / 65536`.
fn owning_core(key: &Id, cores: usize) -> usize {
    ((u32::from(coral::dsht::node::route_of(key)) * cores as u32) >> 16) as usize
}

/// `dsht_udp key CORE CORES`: prints a URL whose key core CORE of CORES owns
/// (`benches/cores.sh` stores one per core and aims a load generator at each).
fn key_for_core(args: &[String]) {
    let usage = "usage: dsht_udp key CORE CORES";
    let core: usize = args.first().and_then(|a| a.parse().ok()).expect(usage);
    let cores: usize = args.get(1).and_then(|a| a.parse().ok()).expect(usage);
    assert!(core < cores, "{usage}");
    let url = (0u32..)
        .map(|i| format!("http://www.x.com/core-{i}.jpg"))
        .find(|u| owning_core(&url_key(u), cores) == core)
        .expect("some URL's key belongs to every core");
    println!("{url}");
}

/// `dsht_udp load get|echo SERVER FROM_IP SECONDS WINDOW [URL]`: the load
/// generator alone, for harnesses that start the server themselves
/// (`benches/counts.sh`, `benches/cores.sh`). `get` asks for URL's key
/// (default `http://www.x.com/y.jpg`; stored beforehand with `coral put
/// url:URL ...`) from FROM_IP (the node's own IP: a local client is not
/// rate-limited); `echo` sends 64-byte datagrams. Prints the answers per
/// wall second and, for gets, how many answers carried the stored value
/// (only the key's owning core holds it: a get handled on another core is
/// answered without it, so this counts the steering), then the answers
/// counted on a last line of their own.
fn load_only(args: &[String]) {
    let usage = "usage: dsht_udp load get|echo SERVER FROM_IP SECONDS WINDOW [URL]";
    let kind = args.first().map(String::as_str).expect(usage);
    let server: SocketAddr = args.get(1).and_then(|a| a.parse().ok()).expect(usage);
    let from_ip: std::net::IpAddr = args.get(2).and_then(|a| a.parse().ok()).expect(usage);
    let secs: f64 = args.get(3).and_then(|a| a.parse().ok()).expect(usage);
    let window: usize = args.get(4).and_then(|a| a.parse().ok()).expect(usage);
    let key = args.get(5).map_or_else(bench_key, |u| url_key(u));
    let from = SocketAddr::new(from_ip, 0).to_string();
    let sender = Id::from_ip(from_ip);
    let payload = vec![0u8; 64];
    let with_value = std::cell::Cell::new(0u64);
    let without_value = std::cell::Cell::new(0u64);
    let (n, wall, _) = match kind {
        "get" => load(
            server,
            None,
            &from,
            secs,
            window,
            &|txid| get_request(key, sender, txid),
            &|b: &[u8]| {
                let answer = is_get_reply(b);
                if answer {
                    match Message::decode(b).map(|m| m.body) {
                        Ok(Body::GetReply { values, .. }) if !values.is_empty() => {
                            with_value.set(with_value.get() + 1)
                        }
                        _ => without_value.set(without_value.get() + 1),
                    }
                }
                answer
            },
        ),
        "echo" => load(
            server,
            None,
            &from,
            secs,
            window,
            &|_| payload.clone(),
            &|_| true,
        ),
        _ => panic!("{usage}"),
    };
    println!("{:.0} answers per wall second", n as f64 / wall.max(1e-9));
    if kind == "get" {
        // Counted over the warm-up too (the answer filter sees every reply).
        println!(
            "steering: {} answers with the value, {} without",
            with_value.get(),
            without_value.get()
        );
    }
    println!("{n}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if run_mode(&args) {
        return;
    }
    let nums: Vec<f64> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    let secs = nums.first().copied().unwrap_or(5.0);
    let window = nums.get(1).copied().unwrap_or(32.0) as usize;
    run(secs, window);
}

/// Runs the `echo`, `key` or `load` mode `args` (the process's arguments)
/// name, if any; whether it did. The benchmark starts its echo server as
/// `current_exe() echo ...`, so a binary that includes this file (the
/// harness test, `shards/tests/bench_harness.rs`) calls this first.
pub fn run_mode(args: &[String]) -> bool {
    match args.get(1).map(String::as_str) {
        Some("echo") => {
            let usage = "usage: dsht_udp echo ADDR CPU";
            let addr = args.get(2).expect(usage);
            echo_server(addr, args.get(3).and_then(|c| c.parse().ok()).expect(usage));
        }
        Some("key") => key_for_core(&args[2..]),
        Some("load") => load_only(&args[2..]),
        _ => return false,
    }
    true
}

/// The benchmark: the echo server, then a node, `secs` seconds each with
/// `window` gets in flight. Pins the calling thread to the load CPU.
pub fn run(secs: f64, window: usize) {
    let cpus = allowed_cpus();
    let (server_cpu, load_cpu) = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
    pin_to(load_cpu);
    println!(
        "server on CPU {server_cpu}, load on CPU {load_cpu}, {secs} s per run, window {window}"
    );

    // 1. The bare UDP echo server.
    let echo_addr: SocketAddr = "127.0.0.60:9000".parse().unwrap();
    let me = std::env::current_exe().unwrap();
    let echo = Kill(
        Command::new(me)
            .args(["echo", &echo_addr.to_string(), &server_cpu.to_string()])
            .spawn()
            .unwrap(),
    );
    wait_for_echo(echo_addr, "127.0.0.61:0");
    let payload = vec![0u8; 64];
    let (e_n, e_wall, e_cpu) = load(
        echo_addr,
        Some(echo.0.id()),
        "127.0.0.61:0",
        secs,
        window,
        &|_| payload.clone(),
        &|_| true,
    );
    drop(echo);

    // 2. A coral node on one core answering gets for a key it stores.
    let node_addr: SocketAddr = "127.0.0.62:7000".parse().unwrap();
    let node = Kill(
        Command::new(coral())
            .args([
                "node",
                "--cores",
                "1",
                "--dsht",
                "127.0.0.62:7000",
                "--admin",
                "127.0.0.62:7080",
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_readyz("127.0.0.62:7080".parse().unwrap());
    let key = bench_key();
    let put = Command::new(coral())
        .args([
            "put",
            "url:http://www.x.com/y.jpg",
            "10.1.2.3:8090",
            "--ttl",
            "3600",
            "--node",
            "127.0.0.62:7080",
        ])
        .output()
        .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    // The client is on the node's own host (its IP), as a heavy client is:
    // a local proxy. Remote sources are held to per-source rates
    // (SECURITY.md); the node's own IP is not.
    let from = "127.0.0.62";
    let sender = Id::from_ip(from.parse().unwrap());
    let request = move |txid: u32| get_request(key, sender, txid);
    let is_answer = is_get_reply;
    let (c_n, c_wall, c_cpu) = load(
        node_addr,
        Some(node.0.id()),
        &format!("{from}:0"),
        secs,
        window,
        &request,
        &is_answer,
    );
    drop(node);

    let per = |n: u64, d: f64| if d > 0.0 { n as f64 / d } else { 0.0 };
    println!(
        "{:<28} {:>14} {:>18}",
        "", "per wall second", "per server CPU s"
    );
    println!(
        "{:<28} {:>14.0} {:>18.0}",
        "bare UDP echo",
        per(e_n, e_wall),
        per(e_n, e_cpu)
    );
    println!(
        "{:<28} {:>14.0} {:>18.0}",
        "coral get (1 core)",
        per(c_n, c_wall),
        per(c_n, c_cpu)
    );
    println!(
        "ratio coral/echo: {:.2} per wall second, {:.2} per server CPU second",
        per(c_n, c_wall) / per(e_n, e_wall).max(1.0),
        per(c_n, c_cpu) / per(e_n, e_cpu).max(1.0)
    );
}
