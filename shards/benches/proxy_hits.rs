//! Cache hits per core with keep-alive: CoralProxy side by side with nginx
//! (one worker, sendfile, keep-alive, `keepalive_requests` raised, the same
//! files) as a static server and as a `proxy_cache`, in one run. The server
//! runs on one CPU, wrk on another (`taskset`). Figures: requests per second
//! of wall time, per second of server CPU time (from /proc before and
//! after), and wrk's p99; ratios against nginx static. Rounds alternate.
//!
//! With `shards/examples/floor.rs` built (`cargo build --release -p coral-shards --examples`),
//! a fourth row: the floor, a bare epoll server that answers every request
//! with the file's bytes by `send` + `sendfile` and does nothing else — the
//! least server CPU a hit can cost on this kernel, which no real server
//! reaches.
//!
//! `cargo bench -p coral-shards --bench proxy_hits [-- SECONDS ROUNDS CONNECTIONS]`
//! (defaults 5 3 32). Needs nginx and wrk (`.ci/run` installs both).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{allowed_cpus, cpu_secs};

const CORAL: &str = env!("CARGO_BIN_EXE_coral");
const IP: &str = "127.11.200.1";

fn wait_for_port(addr: SocketAddr) {
    let start = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{addr} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process killed (SIGTERM, then SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
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

fn nginx(dir: &Path, name: &str, cpu: usize, server: &str) -> Proc {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let conf = d.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n access_log off;\n sendfile on;\n tcp_nopush on;\n tcp_nodelay on;\n\
             keepalive_requests 10000000;\n keepalive_timeout 75s;\n\
             client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
             default_type application/octet-stream;\n {server}\n}}\n",
            d = d.display()
        ),
    )
    .unwrap();
    let child = Command::new("taskset")
        .args(["-c", &cpu.to_string(), "/usr/sbin/nginx", "-p"])
        .arg(&d)
        .arg("-c")
        .arg(&conf)
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("nginx");
    Proc(child)
}

/// wrk's requests per second and p99 in milliseconds.
fn wrk(cpu: usize, url: &str, host: &str, secs: u64, conns: usize) -> (f64, f64) {
    let out = Command::new("taskset")
        .args(["-c", &cpu.to_string(), "wrk", "-t1", "--latency"])
        .args(["-c", &conns.to_string(), "-d", &format!("{secs}s")])
        .args(["-H", &format!("Host: {host}")])
        .arg(url)
        .output()
        .expect("wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .find(|l| l.starts_with("Requests/sec:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
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
        })
        .unwrap_or(0.0);
    if text.contains("Non-2xx") || text.contains("Socket errors") {
        eprintln!("wrk {url}: {text}");
    }
    (rps, p99)
}

/// The smallest, median (the lower of the middle two) and largest of `v`.
fn min_median_max(mut v: Vec<f64>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    (v[0], v[(v.len() - 1) / 2], v[v.len() - 1])
}

fn curl_ok(url: &str, host: &str) {
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
        .arg(format!("Host: {host}"))
        .arg(url)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "{url} ({host})"
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let secs: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(5);
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    let conns: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32);
    run(secs, rounds, conns);
}

/// The benchmark: `rounds` rounds of `secs` seconds, `conns` connections
/// (`shards/tests/bench_harness.rs` runs it for a second, once).
pub fn run(secs: u64, rounds: usize, conns: usize) {
    let cpus = allowed_cpus();
    let (server_cpu, load_cpu) = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
    let dir: PathBuf =
        std::env::temp_dir().join(format!("coral-proxy-hits-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("4k.bin"), vec![b'x'; 4096]).unwrap();
    std::fs::write(www.join("41k.bin"), vec![b'y'; 41_000]).unwrap();
    // The origin (static nginx, also the "nginx static" contender).
    let origin = nginx(
        &dir,
        "static",
        server_cpu,
        &format!("server {{ listen {IP}:8080; root {}; }}", www.display()),
    );
    let cache_zone = dir.join("pcache");
    let proxy = nginx(
        &dir,
        "proxy",
        server_cpu,
        &format!(
            "proxy_cache_path {} keys_zone=c:10m;\n server {{ listen {IP}:8081; location / {{\
             proxy_pass http://{IP}:8080; proxy_http_version 1.1; proxy_set_header Connection \"\";\
             proxy_cache c; proxy_cache_valid 200 1h; }} }}",
            cache_zone.display()
        ),
    );
    let coral_cache = dir.join("coral-cache");
    let coral = Proc(
        Command::new("taskset")
            .args(["-c", &server_cpu.to_string(), CORAL, "node", "--cores", "1"])
            .args([
                "--dsht",
                &format!("{IP}:7000"),
                "--admin",
                &format!("{IP}:7080"),
            ])
            .args(["--http", &format!("{IP}:8090"), "--cache-dir"])
            .arg(&coral_cache)
            .args([
                "--allow-private-origins",
                "--resolve",
                &format!("origin.test={IP}"),
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("coral node"),
    );
    // The floor (shards/examples/floor.rs): the least a server can do per
    // hit here, when built (`cargo build --release -p coral-shards --examples`).
    let floor_bin = Path::new(CORAL)
        .parent()
        .map(|d| d.join("examples").join("floor"))
        .filter(|p| p.exists());
    let floor = floor_bin.map(|bin| {
        Proc(
            Command::new("taskset")
                .args(["-c", &server_cpu.to_string()])
                .arg(bin)
                .args(["http", &format!("{IP}:8070")])
                .arg(&www)
                .arg("sendfile")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("floor"),
        )
    });
    let mut ports = vec![8080, 8081, 8090];
    if floor.is_some() {
        ports.push(8070);
    }
    for port in ports {
        wait_for_port(format!("{IP}:{port}").parse().unwrap());
    }
    let coral_host = "origin.test.8080.coral.test";
    let mut contenders: Vec<(&str, u32, u16, &str)> = vec![
        ("nginx static", origin.0.id(), 8080, "origin.test"),
        ("nginx proxy_cache", proxy.0.id(), 8081, "origin.test"),
        ("coral", coral.0.id(), 8090, coral_host),
    ];
    match &floor {
        Some(f) => contenders.push(("floor (sendfile)", f.0.id(), 8070, "floor.test")),
        None => println!(
            "(no floor row: build it with `cargo build --release -p coral-shards --examples` to see the least \
             a server can spend per hit here)"
        ),
    }
    for (_, _, port, host) in &contenders {
        for f in ["4k.bin", "41k.bin"] {
            curl_ok(&format!("http://{IP}:{port}/{f}"), host);
            curl_ok(&format!("http://{IP}:{port}/{f}"), host);
        }
    }
    println!(
        "server on CPU {server_cpu}, wrk on CPU {load_cpu}, {conns} connections, {secs} s x {rounds} rounds"
    );
    println!(
        "{:<8} {:<18} {:>20} {:>20} {:>17} {:>16}",
        "object", "server", "req/s wall", "req/s server-CPU", "p99 ms", "CPU vs static"
    );
    println!("(each figure: min/median/max over the rounds)");
    for f in ["4k.bin", "41k.bin"] {
        let mut results: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); contenders.len()];
        for _ in 0..rounds {
            for (i, (_, pid, port, host)) in contenders.iter().enumerate() {
                let cpu0 = cpu_secs(*pid);
                let t0 = Instant::now();
                let (rps, p99) = wrk(
                    load_cpu,
                    &format!("http://{IP}:{port}/{f}"),
                    host,
                    secs,
                    conns,
                );
                let wall = t0.elapsed().as_secs_f64();
                let cpu = cpu_secs(*pid) - cpu0;
                let requests = rps * secs as f64;
                let per_cpu = if cpu > 0.0 { requests / cpu } else { 0.0 };
                let _ = wall;
                results[i].push((rps, per_cpu, p99));
            }
        }
        let static_cpu: Vec<f64> = results[0].iter().map(|r| r.1).collect();
        for (i, (name, ..)) in contenders.iter().enumerate() {
            let r = &results[i];
            let range = |k: usize| min_median_max(r.iter().map(|x| [x.0, x.1, x.2][k]).collect());
            let (w0, wm, w1) = range(0);
            let (c0, cm, c1) = range(1);
            let (p0, pm, p1) = range(2);
            // Per round: against nginx static's figure of the same round.
            let (q0, qm, q1) = min_median_max(
                r.iter()
                    .zip(&static_cpu)
                    .map(|(x, s)| if *s > 0.0 { x.1 / s } else { 0.0 })
                    .collect(),
            );
            println!(
                "{:<8} {:<18} {:>6.0}/{:.0}/{:<6.0} {:>6.0}/{:.0}/{:<6.0} {:>5.2}/{:.2}/{:<5.2} {:>4.2}/{:.2}/{:.2}x",
                f, name, w0, wm, w1, c0, cm, c1, p0, pm, p1, q0, qm, q1
            );
        }
    }
    drop(floor);
    drop(coral);
    drop(proxy);
    drop(origin);
    let _ = std::fs::remove_dir_all(&dir);
}
