//! `coral demo`: the flash crowd of §6.1 on real sockets, on one machine.
//!
//! On loopback addresses `<net>.1..=N` it starts N `coral node` processes
//! (children of this binary: DSHT, dnssrv and proxy each, one core each), an
//! origin at `<net>.250:8080` behind a 384 kbit/s token bucket, and a crowd
//! of client threads that resolve the Coralized name through the nodes'
//! dnssrv and fetch images through the proxies they were given. It prints
//! progress, then a report (or `--json`), and can draw the per-minute chart
//! (`--plot`). Everything it starts stops when it ends, Ctrl-C included; its
//! temporary directory (node caches and logs) is removed.

mod content;
mod crowd;
mod origin;
mod plot;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use content::Site;
use crowd::{CrowdStats, Source, SOURCES, SOURCE_NAMES};

/// The origin's host name, given to every node with `--resolve`.
pub const ORIGIN_NAME: &str = "origin.demo.test";
/// The origin's port.
const ORIGIN_PORT: u16 = 8080;
/// The last octet of the origin's address.
const ORIGIN_OCTET: u8 = 250;
/// Ports each node listens on.
const DSHT_PORT: u16 = 7000;
const ADMIN_PORT: u16 = 7080;
const HTTP_PORT: u16 = 8090;
const DNS_PORT: u16 = 5300;
/// The zone and alias the nodes serve.
const ZONE: &str = "coralcdn.test";
const ALIAS: &str = "coral.test";
/// How long a node may take to answer on all its ports.
const NODE_START_TIMEOUT_SECS: u64 = 30;
/// How long the nodes get to find each other before the crowd arrives.
const JOIN_TIMEOUT_SECS: u64 = 15;
/// How long a child gets to exit after SIGTERM before SIGKILL.
const CHILD_EXIT_TIMEOUT_MS: u64 = 3_000;
/// Seconds between progress lines.
const PROGRESS_EVERY_SECS: u64 = 5;
/// Most nodes: one /24, the origin's octet excluded.
const NODES_MAX: usize = 200;
/// Most clients (threads).
const CLIENTS_MAX: usize = 2_000;

/// `coral demo`'s flags.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Coral nodes (each a `coral node --cores 1` child process).
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Clients in the crowd (threads in this process).
    #[arg(long, default_value_t = 20)]
    clients: usize,
    /// How long the crowd runs, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Images on the origin, three to a page (the paper: 12 on 4 pages).
    #[arg(long, default_value_t = 12)]
    objects: usize,
    /// The origin's uplink in kbit/s (the paper: 384).
    #[arg(long, default_value_t = 384)]
    origin_kbit: u64,
    /// The loopback /24 to use, as its first three octets: nodes at .1..=N,
    /// the origin at .250.
    #[arg(long, default_value = "127.17.0")]
    net: String,
    /// Rows of the report every this many seconds (default 10; 60 for runs
    /// over five minutes).
    #[arg(long)]
    interval: Option<u64>,
    /// Each client's pause after a page's three images, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    think_ms: u64,
    /// Seed of the clients' random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Random audits (issue 22 item 5 (b)): each node re-fetches a
    /// verified peer copy from the origin with this probability in
    /// millionths (`[proxy] audit_per_million`; 0, the default, is off).
    /// The report's origin fetches then include the audits.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    audit_per_million: u32,
    /// Print the report as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Write the per-interval chart (requests/minute by source) as SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Only write the origin's site (pages and images) into DIR and exit
    /// (the lab's nginx serves it).
    #[arg(long, value_name = "DIR")]
    write_site: Option<PathBuf>,
}

/// Set by SIGINT, SIGTERM or SIGHUP.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; the function pointer lives for the whole program.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// The node processes; each gets SIGTERM, then SIGKILL, when dropped.
struct Nodes {
    children: Vec<Child>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            if let Ok(pid) = i32::try_from(c.id()) {
                // SAFETY: kill(2) on our own child's pid, not yet reaped.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_millis(CHILD_EXIT_TIMEOUT_MS);
        for c in &mut self.children {
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The demo's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> ExitCode {
    if a.nodes == 0
        || a.nodes > NODES_MAX
        || a.clients == 0
        || a.clients > CLIENTS_MAX
        || a.seconds == 0
        || a.objects == 0
    {
        eprintln!("coral demo: need 1 ≤ --nodes ≤ {NODES_MAX}, 1 ≤ --clients ≤ {CLIENTS_MAX}, --seconds ≥ 1, --objects ≥ 1");
        return ExitCode::from(2);
    }
    let net: Vec<u8> = a.net.split('.').filter_map(|o| o.parse().ok()).collect();
    let [n0, n1, n2] = net[..] else {
        eprintln!("coral demo: --net wants three octets, e.g. 127.17.0");
        return ExitCode::from(2);
    };
    if n0 != 127 {
        eprintln!("coral demo: --net must be a loopback /24 (127.x.y)");
        return ExitCode::from(2);
    }
    let ip = |last: u8| Ipv4Addr::new(n0, n1, n2, last);
    if let Some(dir) = &a.write_site {
        let site = Site::new(a.objects);
        for o in site.pages.iter().chain(site.images.iter()) {
            let path = dir.join(o.path.trim_start_matches('/'));
            if let Err(e) =
                std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &o.body))
            {
                eprintln!("coral demo: cannot write {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
        println!(
            "wrote {} pages and {} images to {}",
            site.pages.len(),
            site.images.len(),
            dir.display()
        );
        return ExitCode::SUCCESS;
    }
    install_signal_handlers();
    let interval_secs = a
        .interval
        .unwrap_or(if a.seconds > 300 { 60 } else { 10 })
        .max(1);
    let interval = Duration::from_secs(interval_secs);
    let intervals = a.seconds.div_ceil(interval_secs) as usize;
    let say = |line: &str| {
        if a.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };

    let site = Arc::new(Site::new(a.objects));
    let image_bytes = site.images[0].body.len();
    let origin_addr = SocketAddr::from((ip(ORIGIN_OCTET), ORIGIN_PORT));
    let coralized_host = format!("{ORIGIN_NAME}.{ORIGIN_PORT}.{ALIAS}");
    say(&format!(
        "coral demo: {} nodes, {} clients, {} images of {image_bytes} bytes on {} pages, origin uplink {} kbit/s, {} s",
        a.nodes,
        a.clients,
        site.images.len(),
        site.pages.len(),
        a.origin_kbit,
        a.seconds
    ));
    let temp = TempDir(std::env::temp_dir().join(format!(
        "coral-demo-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    )));
    if let Err(e) = std::fs::create_dir_all(&temp.0) {
        eprintln!("coral demo: cannot create {}: {e}", temp.0.display());
        return ExitCode::from(1);
    }
    say(&format!(
        "  origin   http://{ORIGIN_NAME}:{ORIGIN_PORT}/ at {origin_addr}; Coralized: http://{coralized_host}:{HTTP_PORT}/page0.html"
    ));
    say(&format!(
        "  nodes    {}..{}: DSHT :{DSHT_PORT}/udp, dnssrv :{DNS_PORT}/udp, proxy :{HTTP_PORT}, admin :{ADMIN_PORT}",
        ip(1),
        ip(a.nodes as u8)
    ));
    say(&format!(
        "  scratch  {} (node caches and logs; removed at the end)",
        temp.0.display()
    ));

    let origin = match origin::Origin::start(
        origin_addr,
        site.clone(),
        a.origin_kbit,
        interval,
        intervals,
    ) {
        Ok(o) => o,
        Err(e) => {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                taken_hint(&a.net)
            } else {
                String::new()
            };
            eprintln!("coral demo: origin cannot listen on {origin_addr}: {e}{hint}");
            return ExitCode::from(1);
        }
    };
    let nodes = match start_nodes(&a, &ip, origin_addr, &temp.0) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("coral demo: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = wait_ready(&a, &ip, &nodes, &temp.0, &coralized_host) {
        eprintln!("coral demo: {e}");
        return ExitCode::from(1);
    }
    if STOP.load(Ordering::SeqCst) {
        eprintln!("coral demo: interrupted; stopping");
        return ExitCode::from(130);
    }

    // The crowd.
    let origin_bytes_before = origin.stats.bytes_sent.load(Ordering::Relaxed);
    let origin_fetches_before = origin.stats.image_fetches_total();
    let stats = Arc::new(CrowdStats::new(interval, intervals));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(a.seconds);
    let requested: Arc<Vec<AtomicBool>> = Arc::new(
        (0..site.images.len())
            .map(|_| AtomicBool::new(false))
            .collect(),
    );
    let mut threads = Vec::new();
    for i in 0..a.clients {
        let c = crowd::Client {
            dns_server: SocketAddr::from((ip((i % a.nodes) as u8 + 1), DNS_PORT)),
            coralized_host: coralized_host.clone(),
            proxy_port: HTTP_PORT,
            seed: a
                .seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(i as u64),
            think: Duration::from_millis(a.think_ms),
        };
        let (site, stats, requested) = (site.clone(), stats.clone(), requested.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("demo-client-{i}"))
            .stack_size(256 * 1024)
            .spawn(move || crowd::run_client(&c, &site, &stats, deadline, &STOP, &requested));
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                eprintln!("coral demo: client thread: {e}");
                STOP.store(true, Ordering::SeqCst);
                break;
            }
        }
    }
    let mut next_progress = start + Duration::from_secs(PROGRESS_EVERY_SECS);
    while Instant::now() < deadline && !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if Instant::now() >= next_progress {
            next_progress += Duration::from_secs(PROGRESS_EVERY_SECS);
            eprintln!(
                "{}",
                progress_line(
                    start,
                    &stats,
                    &origin.stats,
                    origin_bytes_before,
                    origin_fetches_before,
                    site.images.len()
                )
            );
        }
    }
    let interrupted = STOP.load(Ordering::SeqCst);
    let mut latencies: Vec<u32> = Vec::new();
    for t in threads {
        if let Ok(l) = t.join() {
            latencies.extend(l);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(nodes);
    origin_guard(origin, |o| {
        report(
            &a,
            &site,
            &stats,
            o,
            origin_bytes_before,
            origin_fetches_before,
            &requested,
            &mut latencies,
            elapsed,
            interval_secs,
            interrupted,
        )
    })
}

/// Runs `f` on the origin, then stops it; returns `f`'s answer.
fn origin_guard(origin: origin::Origin, f: impl FnOnce(&origin::Origin) -> ExitCode) -> ExitCode {
    let code = f(&origin);
    drop(origin);
    code
}

/// Starts the node processes.
fn start_nodes(
    a: &DemoArgs,
    ip: &dyn Fn(u8) -> Ipv4Addr,
    origin_addr: SocketAddr,
    temp: &Path,
) -> Result<Nodes, String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let mut nodes = Nodes {
        children: Vec::new(),
    };
    // The demo's nodes form one network: each certifies itself with the
    // demo's own admission key (labs and tests only; SECURITY.md).
    let network_key = temp.join("network.key");
    crate::identity::init_network(&network_key)?;
    for i in 1..=a.nodes {
        let me = ip(i as u8);
        let dir = temp.join(format!("node{i}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = std::fs::File::create(temp.join(format!("node{i}.log")))
            .map_err(|e| format!("node log: {e}"))?;
        let mut cmd = Command::new(&exe);
        cmd.arg("node");
        if a.audit_per_million > 0 {
            let config = dir.join("coral.toml");
            std::fs::write(
                &config,
                format!("[proxy]\naudit_per_million = {}\n", a.audit_per_million),
            )
            .map_err(|e| format!("{}: {e}", config.display()))?;
            cmd.arg("--config").arg(&config);
        }
        cmd.args(["--dsht", &format!("{me}:{DSHT_PORT}")])
            .args(["--admin", &format!("{me}:{ADMIN_PORT}")])
            .args(["--http", &format!("{me}:{HTTP_PORT}")])
            .args(["--dns", &format!("{me}:{DNS_PORT}")])
            .args(["--zone", ZONE, "--alias", ALIAS])
            .args(["--cache-dir", &dir.join("cache").to_string_lossy()])
            .args(["--state-dir", &dir.join("state").to_string_lossy()])
            .args(["--network-key", &network_key.to_string_lossy()])
            .arg("--allow-private-origins")
            .args(["--resolve", &format!("{ORIGIN_NAME}={}", origin_addr.ip())])
            .args(["--cores", "1"])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if i > 1 {
            cmd.args(["--bootstrap", &format!("{}:{DSHT_PORT}", ip(1))]);
        }
        // SAFETY: prctl(2) only, between fork and exec: async-signal-safe.
        // The node dies with the demo even if the demo is SIGKILLed.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        nodes
            .children
            .push(cmd.spawn().map_err(|e| format!("start node {i}: {e}"))?);
    }
    Ok(nodes)
}

/// Waits until every node answers on its admin, proxy and DNS ports and
/// the nodes know each other (or the join timeout passes).
fn wait_ready(
    a: &DemoArgs,
    ip: &dyn Fn(u8) -> Ipv4Addr,
    nodes: &Nodes,
    temp: &Path,
    coralized_host: &str,
) -> Result<(), String> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(NODE_START_TIMEOUT_SECS);
    for i in 1..=a.nodes {
        let me = ip(i as u8);
        let mut id = 1u16;
        loop {
            if STOP.load(Ordering::SeqCst) {
                return Ok(());
            }
            if let Some(status) = nodes.children.get(i - 1).and_then(|c| {
                // try_wait needs &mut; a node that exited has a log to show.
                exited(c)
            }) {
                let log = log_tail(&temp.join(format!("node{i}.log")));
                let hint = if log.contains("is in use") {
                    taken_hint(&a.net)
                } else {
                    String::new()
                };
                return Err(format!("node {i} exited ({status}){hint}; its log:\n{log}"));
            }
            let admin_ok = TcpStream::connect_timeout(
                &SocketAddr::from((me, ADMIN_PORT)),
                Duration::from_millis(200),
            )
            .is_ok();
            let http_ok = admin_ok
                && TcpStream::connect_timeout(
                    &SocketAddr::from((me, HTTP_PORT)),
                    Duration::from_millis(200),
                )
                .is_ok();
            id = id.wrapping_add(1);
            let dns_ok = http_ok
                && crowd::resolve_a(SocketAddr::from((me, DNS_PORT)), coralized_host, id).is_ok();
            if dns_ok {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "node {i} at {me} not ready after {NODE_START_TIMEOUT_SECS} s (admin {admin_ok}, proxy {http_ok}, dnssrv answering {dns_ok}); its log:\n{}",
                    log_tail(&temp.join(format!("node{i}.log")))
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Joins: every node has the others in its level-0 routing table.
    let want = a.nodes.saturating_sub(1) as u64;
    let join_deadline = Instant::now() + Duration::from_secs(JOIN_TIMEOUT_SECS);
    for i in 1..=a.nodes {
        let admin = SocketAddr::from((ip(i as u8), ADMIN_PORT));
        while level0_contacts(admin) < want
            && Instant::now() < join_deadline
            && !STOP.load(Ordering::SeqCst)
        {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    eprintln!("  ready    after {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// What to do when the demo's addresses on `net` are taken: most likely
/// another `coral demo` runs there.
fn taken_hint(net: &str) -> String {
    let next = net
        .rsplit_once('.')
        .and_then(|(head, last)| {
            let n: u8 = last.parse().ok()?;
            Some(format!("{head}.{}", n.wrapping_add(1)))
        })
        .unwrap_or_else(|| "127.18.0".into());
    format!(
        ": another `coral demo` (or another program) holds addresses on {net}.x; run this one on \
         another loopback network with --net {next}"
    )
}

/// Whether a child has exited, without reaping it (waitid with WNOWAIT).
fn exited(c: &Child) -> Option<String> {
    let pid = libc::id_t::from(c.id());
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid(2).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid(2) on our own child; WNOWAIT leaves it for Child::wait.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is set by waitid when a child changed state.
    (r == 0 && unsafe { info.si_pid() } != 0).then(|| {
        // SAFETY: as above.
        format!("status {}", unsafe { info.si_status() })
    })
}

/// The last lines of a node's log.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Contacts at level 0, from the admin endpoint's `/levels`.
fn level0_contacts(admin: SocketAddr) -> u64 {
    let Ok(mut s) = TcpStream::connect_timeout(&admin, Duration::from_millis(500)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /levels HTTP/1.0\r\nHost: demo\r\n\r\n")
        .is_err()
    {
        return 0;
    }
    let mut out = Vec::new();
    let _ = s.take(1 << 20).read_to_end(&mut out);
    let Some(at) = out.windows(4).position(|w| w == b"\r\n\r\n") else {
        return 0;
    };
    serde_json::from_slice::<serde_json::Value>(&out[at + 4..])
        .ok()
        .and_then(|v| v["levels"][0]["contacts"].as_u64())
        .unwrap_or(0)
}

/// One line of live progress.
fn progress_line(
    start: Instant,
    stats: &CrowdStats,
    origin: &origin::OriginStats,
    origin_bytes_before: u64,
    origin_fetches_before: u64,
    objects: usize,
) -> String {
    let t = stats.totals();
    let secs = start.elapsed().as_secs_f64().max(1e-3);
    let sent = origin.bytes_sent.load(Ordering::Relaxed) - origin_bytes_before;
    let got = stats.bytes_received.load(Ordering::Relaxed);
    let peer: u64 = t[Source::PeerL2 as usize..=Source::Peer as usize]
        .iter()
        .sum();
    format!(
        "  [{:>4.0} s] requests {:>6}  ok {:>6}  origin fetches {:>3} for {objects} objects | local {:>6}  peer {:>4}  forwarded {:>3}  in-flight {:>3}  failed {:>3} | origin sent {:>4.0} kbit/s, clients got {:>6.1} Mbit/s",
        secs,
        stats.requests.load(Ordering::Relaxed),
        stats.ok.load(Ordering::Relaxed),
        origin.image_fetches_total() - origin_fetches_before,
        t[Source::Local as usize],
        peer,
        t[Source::Origin as usize],
        t[Source::InFlight as usize],
        t[Source::Failed as usize],
        sent as f64 * 8.0 / 1000.0 / secs,
        got as f64 * 8.0 / 1e6 / secs,
    )
}

/// The `p`th percentile of sorted `v`, in milliseconds.
fn percentile_ms(v: &[u32], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    f64::from(v[i.min(v.len() - 1)]) / 1000.0
}

/// Prints the report (or JSON) and writes the plot.
#[allow(clippy::too_many_arguments)]
fn report(
    a: &DemoArgs,
    site: &Site,
    stats: &CrowdStats,
    origin: &origin::Origin,
    origin_bytes_before: u64,
    origin_fetches_before: u64,
    requested: &[AtomicBool],
    latencies: &mut [u32],
    elapsed: f64,
    interval_secs: u64,
    interrupted: bool,
) -> ExitCode {
    latencies.sort_unstable();
    let requests = stats.requests.load(Ordering::Relaxed);
    let ok = stats.ok.load(Ordering::Relaxed);
    let origin_fetches = origin.stats.image_fetches_total() - origin_fetches_before;
    let per_object: Vec<u64> = origin
        .stats
        .image_fetches
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    let unique = requested
        .iter()
        .filter(|r| r.load(Ordering::Relaxed))
        .count() as u64;
    let origin_bytes = origin.stats.bytes_sent.load(Ordering::Relaxed) - origin_bytes_before;
    let client_bytes = stats.bytes_received.load(Ordering::Relaxed);
    let totals = stats.totals();
    let used = ((elapsed / interval_secs as f64).ceil() as usize).clamp(1, stats.by_interval.len());
    let rows: Vec<[u64; SOURCES]> = stats.by_interval[..used]
        .iter()
        .map(|r| std::array::from_fn(|s| r[s].load(Ordering::Relaxed)))
        .collect();
    let origin_rows: Vec<u64> = origin.stats.fetches_by_interval
        [..used.min(origin.stats.fetches_by_interval.len())]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    // Minutes: intervals grouped by the minute they start in.
    let minutes = ((used as u64 * interval_secs).div_ceil(60)) as usize;
    let mut minute_rows = vec![[0u64; SOURCES]; minutes.max(1)];
    for (i, r) in rows.iter().enumerate() {
        let m = (i as u64 * interval_secs / 60) as usize;
        for s in 0..SOURCES {
            let last = minute_rows.len() - 1;
            minute_rows[m.min(last)][s] += r[s];
        }
    }
    let row_json = |r: &[u64; SOURCES]| {
        let mut o = serde_json::Map::new();
        o.insert("requests".into(), json!(r.iter().sum::<u64>()));
        for s in 0..SOURCES {
            o.insert(SOURCE_NAMES[s].into(), json!(r[s]));
        }
        serde_json::Value::Object(o)
    };
    let (p50, p90, p99, max) = (
        percentile_ms(latencies, 50.0),
        percentile_ms(latencies, 90.0),
        percentile_ms(latencies, 99.0),
        percentile_ms(latencies, 100.0),
    );
    if let Some(path) = &a.plot {
        let per_min = 60.0 / interval_secs as f64;
        let line = |label: &str, f: &dyn Fn(usize) -> u64| coral_plot::Series {
            label: label.to_string(),
            points: (0..rows.len())
                .map(|i| {
                    (
                        ((i + 1) as u64 * interval_secs) as f64 / 60.0,
                        f(i) as f64 * per_min,
                    )
                })
                .collect(),
        };
        let svg = plot::chart(
            &format!(
                "coral demo: requests per minute by source ({} nodes, {} clients; cf. NSDI 2004 Fig. 4)",
                a.nodes, a.clients
            ),
            &[
                line("origin server (counted there)", &|i| origin_rows.get(i).copied().unwrap_or(0)),
                line("peer, level 2", &|i| rows[i][Source::PeerL2 as usize]),
                line("peer, level 1", &|i| rows[i][Source::PeerL1 as usize]),
                line("peer, level 0", &|i| rows[i][Source::PeerL0 as usize]),
                line("peer, level not said", &|i| rows[i][Source::Peer as usize]),
                line("proxy's own cache", &|i| rows[i][Source::Local as usize] + rows[i][Source::InFlight as usize]),
                line("failed", &|i| rows[i][Source::Failed as usize]),
            ],
        );
        if let Err(e) = std::fs::write(path, svg) {
            eprintln!("coral demo: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if a.json {
        let out = json!({
            "demo": "flash-crowd",
            "nodes": a.nodes,
            "clients": a.clients,
            "seconds": elapsed,
            "interrupted": interrupted,
            "origin_kbit_per_sec": a.origin_kbit,
            "object_bytes": site.images[0].body.len(),
            "requests": requests,
            "ok": ok,
            "failed": totals[Source::Failed as usize],
            "origin_fetches": origin_fetches,
            "origin_fetches_per_object": per_object,
            "unique_objects": unique,
            "objects": site.images.len(),
            "by_source": (0..SOURCES).map(|s| (SOURCE_NAMES[s].to_string(), json!(totals[s]))).collect::<serde_json::Map<_, _>>(),
            "per_minute": minute_rows.iter().map(row_json).collect::<Vec<_>>(),
            "interval_seconds": interval_secs,
            "per_interval": rows.iter().zip(origin_rows.iter().chain(std::iter::repeat(&0))).map(|(r, o)| {
                let mut v = row_json(r);
                v["origin_fetches"] = json!(o);
                v
            }).collect::<Vec<_>>(),
            "latency_ms": {"p50": p50, "p90": p90, "p99": p99, "max": max, "count": latencies.len()},
            "origin_bytes_sent": origin_bytes,
            "client_bytes_received": client_bytes,
            "dns_queries": stats.dns_queries.load(Ordering::Relaxed),
            "dns_answers": stats.dns_answers.load(Ordering::Relaxed),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        println!();
        println!(
            "Flash crowd on a {} kbit/s origin (cf. NSDI 2004 §6.1, Fig. 4){}",
            a.origin_kbit,
            if interrupted { " — interrupted" } else { "" }
        );
        println!("  requests          {requests} in {elapsed:.1} s; answered 200 with the right bytes: {ok}; failed: {}", totals[Source::Failed as usize]);
        println!("  origin fetches    {origin_fetches} for {unique} unique objects (the paper: 15 for 12); per object {per_object:?}");
        println!(
            "  bytes             origin sent {} ({:.0} kbit/s on average); clients received {} ({:.1}× the origin's)",
            human_bytes(origin_bytes),
            origin_bytes as f64 * 8.0 / 1000.0 / elapsed.max(1e-3),
            human_bytes(client_bytes),
            client_bytes as f64 / (origin_bytes.max(1)) as f64
        );
        println!("  latency           p50 {p50:.1} ms, p90 {p90:.1} ms, p99 {p99:.1} ms, max {max:.1} ms ({} answers)", latencies.len());
        println!(
            "  DNS               {} queries to dnssrv, {} answered with proxies",
            stats.dns_queries.load(Ordering::Relaxed),
            stats.dns_answers.load(Ordering::Relaxed)
        );
        println!();
        println!("  where clients' answers came from, per {interval_secs} s, as the proxy's Cache-Status says (local: hit; peer: detail=peer;\n  fwd: the proxy went to the origin or joined its own fetch from it; in-flight: hit while still arriving; @origin: fetches counted at the origin):");
        println!(
            "  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>8}",
            "time",
            "requests",
            "local",
            "peer L2",
            "peer L1",
            "peer L0",
            "peer L?",
            "fwd",
            "in-flight",
            "failed",
            "@origin"
        );
        for (i, r) in rows.iter().enumerate() {
            println!(
                "  {:>6} s {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>8}",
                (i as u64 + 1) * interval_secs,
                r.iter().sum::<u64>(),
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                origin_rows.get(i).copied().unwrap_or(0)
            );
        }
        println!(
            "  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>8}",
            "total",
            totals.iter().sum::<u64>(),
            totals[0],
            totals[1],
            totals[2],
            totals[3],
            totals[4],
            totals[5],
            totals[6],
            totals[7],
            origin_fetches
        );
        if let Some(p) = &a.plot {
            println!("  chart             {}", p.display());
        }
    }
    if interrupted {
        ExitCode::from(130)
    } else if ok == requests && requests > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Bytes in KB/MB/GB (powers of 1000).
fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.1} kB", b / 1e3)
    }
}
