//! Test support shared by coral-shards' integration tests (each test file
//! says `mod common;`): a guard that kills a child's whole process group,
//! temporary directories (`tempfile`), readiness waits, a builder for
//! `coral node` processes, curl, kdig, nginx, Chromium, and metric scraping
//! from the admin endpoint.
//!
//! Every wait here polls for a condition under a deadline; none is a fixed
//! sleep.

// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The `coral` binary under test.
pub const CORAL: &str = env!("CARGO_BIN_EXE_coral");
/// The longest any readiness wait lasts (a loaded 2-core machine).
pub const START_WAIT: Duration = Duration::from_secs(60);
/// The alias zone Coralized names end with in these tests (the default).
pub const ALIAS: &str = "coral.test";
/// The origin's name, resolved by each proxy node with `--resolve`.
pub const ORIGIN: &str = "www.origin.test";

// ---- Processes ----------------------------------------------------------------------

/// A child process started in a process group of its own; the whole group
/// (the child and anything it started) is killed when dropped.
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Starts `cmd` as the leader of a new process group; `what` names it
    /// if it cannot start.
    pub fn spawn(cmd: &mut Command, what: &str) -> Proc {
        let child = cmd
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        Proc { child }
    }

    /// Its pid (and its process group's id).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child itself (its pipes, its exit status).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Sends `signal` to the child alone (not its group).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of a child this guard has not reaped.
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(
            rc,
            0,
            "signal {signal} to {}: {}",
            self.child.id(),
            std::io::Error::last_os_error()
        );
    }

    /// Its exit status if it exits within `limit`; anything it left
    /// running in its group is killed before it is reaped.
    pub fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if self.exited_unreaped() {
                self.kill_group();
                return Some(self.child.wait().expect("wait"));
            }
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                // Reaped elsewhere already.
                return Some(st);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the child has exited and is a zombie not reaped yet (its pid
    /// and so its group's id still reserved: the group is ours to kill).
    fn exited_unreaped(&self) -> bool {
        // SAFETY: waitid(2) with WNOWAIT only reads the child's state into
        // `info`, a zeroed siginfo_t of our own.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            ) == 0
                && info.si_pid() != 0
        }
    }

    /// Whether the child is not reaped yet (running, or a zombie): while
    /// it is not, its pid, which is its group's id, cannot name anyone
    /// else's process group.
    fn unreaped(&self) -> bool {
        // SAFETY: as in `exited_unreaped`; ECHILD once it was reaped.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            ) == 0
        }
    }

    /// SIGKILL to the child's whole process group (the child and anything
    /// it started: nginx's workers, a shell's children).
    fn kill_group(&self) {
        // SAFETY: killpg(2) on the process group this guard created, called
        // only while its leader is unreaped (so the id is still ours).
        unsafe {
            libc::killpg(self.child.id() as i32, libc::SIGKILL);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Once the leader was reaped (by `child().try_wait()`), its id may
        // name a stranger's group: then nothing is killed.
        if self.unreaped() {
            self.kill_group();
        }
        let _ = self.child.wait();
    }
}

/// `program` as a command, run inside the network namespace `ns` if given.
pub fn command_in(ns: Option<&str>, program: &str) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
}

/// Runs `f` on a thread inside the network namespace `ns`: the sockets it
/// makes are that namespace's.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a valid namespace descriptor; only this thread moves.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap()
}

/// Moves the calling thread (the test) into a network namespace of its
/// own, with its loopback up and nothing else: every address the test
/// binds, and every process it starts afterwards (they inherit the
/// thread's namespace), is the test's alone. Whatever the host's network
/// holds (an nginx on 127.0.0.1:8080, another coral node on the default
/// ports, a wildcard listener, a process an earlier run leaked) cannot
/// answer the test or take its ports, and nothing the test starts is
/// reachable from the host. The namespace goes away with the thread and
/// the processes in it. Needs root (CAP_SYS_ADMIN), as the tests that make
/// named namespaces (`ip netns add`) do.
pub fn own_network() {
    // SAFETY: unshare(2) with CLONE_NEWNET changes the calling thread's
    // network namespace only; no memory is involved.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "a network namespace of the test's own (unshare CLONE_NEWNET; run the tests as root): {}",
        std::io::Error::last_os_error()
    );
    // `ip` runs in the thread's new namespace.
    let out = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .output()
        .expect("iproute2 `ip` is needed for this test");
    assert!(
        out.status.success(),
        "ip link set lo up: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- Files --------------------------------------------------------------------------

/// A directory of the test's own under the system's temp dir, removed when
/// dropped.
pub fn temp_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("coral-{tag}-"))
        .tempdir()
        .expect("a temporary directory")
}

/// A web root `dir/www` holding `files` (name, bytes); returns its path.
pub fn web_root(dir: &Path, files: &[(&str, &[u8])]) -> PathBuf {
    let root = dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    for (name, bytes) in files {
        write_file(&root, name, bytes);
    }
    root
}

/// Writes `text` to `dir/name`; returns the path.
pub fn write_file(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

// ---- Waiting ------------------------------------------------------------------------

/// Calls `check` every `every` until it returns `Ok`; once `limit` has
/// passed, panics with its last `Err`.
pub fn wait_until<T>(
    limit: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        match check() {
            Ok(v) => return v,
            Err(why) => assert!(start.elapsed() < limit, "{why}"),
        }
        std::thread::sleep(every);
    }
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, what: &str) {
    wait_until(START_WAIT, Duration::from_millis(20), || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200))
            .map(drop)
            .map_err(|e| format!("{what} at {addr} did not start: {e}"))
    })
}

/// Whether a TCP socket listens on `addr` (IPv4), from the calling
/// thread's /proc/net/tcp (`thread-self`: a test in [`own_network`] sees its
/// own namespace's sockets, not the main thread's).
pub fn listening(addr: SocketAddr) -> bool {
    let SocketAddr::V4(a) = addr else {
        return false;
    };
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(a.ip().octets()),
        a.port()
    );
    std::fs::read_to_string("/proc/thread-self/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&want.as_str()) && f.get(3) == Some(&"0A")
        })
}

/// Whether the proxy at `addr` answers an HTTP request (any status).
pub fn answers_http(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut b = [0u8; 12];
    s.write_all(b"GET / HTTP/1.1\r\nHost: ready.invalid\r\nConnection: close\r\n\r\n")
        .is_ok()
        && s.read_exact(&mut b).is_ok()
        && b.starts_with(b"HTTP/1.1 ")
}

// ---- HTTP and metrics ---------------------------------------------------------------

/// GET `path` from `addr` (an admin endpoint): the status, the head and
/// the body.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// The value of the sample `name{labels}` in a Prometheus text body.
pub fn metric(body: &str, sample: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {sample} in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

/// The samples of `family` (all label sets) added up.
pub fn metric_sum(body: &str, family: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

// ---- coral node ---------------------------------------------------------------------

/// `ip:port`, bracketed for IPv6.
pub fn sock(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}

/// How a `coral node` is started; [`NodeBuilder::start`] starts it and waits
/// until it serves.
pub struct NodeBuilder {
    args: Vec<String>,
    env: Vec<(String, String)>,
    rust_log: Option<String>,
    log: Option<PathBuf>,
    nofile: Option<u64>,
    netns: Option<String>,
    config_dir: Option<tempfile::TempDir>,
    /// The node's state directory (its identity key), kept for restarts.
    state_dir: Option<tempfile::TempDir>,
}

/// The test network's admission key (SECURITY.md, "Threat model"): every
/// node a test starts certifies itself with it (`--network-key`, labs and
/// tests only), unless the test names a network itself.
pub const TEST_NETWORK_SECRET: &str =
    "7e57000000000000000000000000000000000000000000000000000000000001";

impl NodeBuilder {
    fn new(args: Vec<String>) -> NodeBuilder {
        NodeBuilder {
            args,
            env: Vec::new(),
            rust_log: Some("warn".into()),
            log: None,
            nofile: None,
            netns: None,
            config_dir: None,
            state_dir: None,
        }
    }

    /// A state directory of its own, and membership of the test network
    /// unless the test chose a network: called by `spawn`.
    fn admit(&mut self) {
        if flag(&self.args, "--state-dir").is_none() {
            let dir = temp_dir("node-state");
            let path = dir.path().to_str().unwrap().to_string();
            self.state_dir = Some(dir);
            self.args.extend(["--state-dir".to_string(), path]);
        }
        let chosen = ["--network", "--network-key", "--network-certificate"];
        if chosen.iter().all(|f| flag(&self.args, f).is_none()) {
            let dir = self.state_dir.as_ref().map_or_else(
                || PathBuf::from(flag(&self.args, "--state-dir").unwrap()),
                |d| d.path().to_path_buf(),
            );
            std::fs::create_dir_all(&dir).unwrap();
            let key = write_file(
                &dir,
                "test-network.key",
                format!("secret = {TEST_NETWORK_SECRET}\n"),
            );
            self.args.extend([
                "--network-key".to_string(),
                key.to_str().unwrap().to_string(),
            ]);
        }
    }

    /// Flags added as given (a `--cores` among them replaces the default).
    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.args
            .extend(args.iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// `n` cores instead of one.
    pub fn cores(self, n: usize) -> Self {
        self.args(&["--cores", &n.to_string()])
    }

    /// Joins through the node whose DSHT is on `ip`:7000.
    pub fn bootstrap(self, ip: &str) -> Self {
        self.args(&["--bootstrap", &sock(ip, 7000)])
    }

    /// CoralProxy on the node's ip:8090, its cache (64 MiB) in `cache`.
    pub fn proxy(self, cache: &Path) -> Self {
        let http = sock(&self.ip(), 8090);
        self.args(&["--http", &http, "--cache-dir", cache.to_str().unwrap()])
            .args(&["--cache-size", "64MiB"])
    }

    /// [`ORIGIN`] resolved to `origin_ip`, a private address the proxy may
    /// fetch from.
    pub fn origin(self, origin_ip: &str) -> Self {
        let resolve = format!("{ORIGIN}={origin_ip}");
        self.args(&["--allow-private-origins", "--resolve", &resolve])
    }

    /// dnssrv on the node's ip:`port`.
    pub fn dns(self, port: u16) -> Self {
        let dns = sock(&self.ip(), port);
        self.args(&["--dns", &dns])
    }

    /// The config file at `path`.
    pub fn config(self, path: &Path) -> Self {
        self.args(&["--config", path.to_str().unwrap()])
    }

    /// A config file holding `text`, in a directory the node keeps.
    pub fn config_text(mut self, text: &str) -> Self {
        let dir = temp_dir("node-config");
        let path = write_file(dir.path(), "coral.toml", text);
        self.config_dir = Some(dir);
        self.config(&path)
    }

    /// An environment variable for the node.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// `RUST_LOG` for the node (`warn` unless set); None leaves it unset.
    pub fn rust_log(mut self, filter: Option<&str>) -> Self {
        self.rust_log = filter.map(str::to_string);
        self
    }

    /// The node's stderr goes to `path` (else to the test's).
    pub fn log(mut self, path: &Path) -> Self {
        self.log = Some(path.to_path_buf());
        self
    }

    /// The node's file-descriptor limit.
    pub fn nofile(mut self, n: u64) -> Self {
        self.nofile = Some(n);
        self
    }

    /// Runs the node in the network namespace `ns`.
    pub fn netns(mut self, ns: &str) -> Self {
        self.netns = Some(ns.to_string());
        self
    }

    /// The IP of the node's DSHT address.
    fn ip(&self) -> String {
        let dsht = flag(&self.args, "--dsht").unwrap_or("127.0.0.1:7000");
        let addr: SocketAddr = dsht.parse().expect("a DSHT address");
        addr.ip().to_string()
    }

    /// Starts the node without waiting for it.
    pub fn spawn(mut self) -> Node {
        self.admit();
        // A later `--cores` replaces the first (the default).
        if self.args.iter().filter(|a| *a == "--cores").count() > 1 {
            let i = self.args.iter().position(|a| a == "--cores").unwrap();
            self.args.drain(i..i + 2);
        }
        let addr = |name: &str, default: &str| -> SocketAddr {
            flag(&self.args, name).unwrap_or(default).parse().unwrap()
        };
        let mut node = Node {
            proc: None,
            ip: self.ip(),
            dsht: addr("--dsht", "127.0.0.1:7000"),
            admin: addr("--admin", "127.0.0.1:7080"),
            proxy: flag(&self.args, "--http").map(|a| a.parse().unwrap()),
            spec: self,
        };
        node.launch();
        node
    }

    /// Starts the node and waits until it serves.
    pub fn start(self) -> Node {
        let node = self.spawn();
        node.wait_ready();
        node
    }
}

/// A `coral node` process (in a process group of its own), killed when
/// dropped.
pub struct Node {
    proc: Option<Proc>,
    /// The IP of its DSHT address, and its addresses (from its flags).
    pub ip: String,
    pub dsht: SocketAddr,
    pub admin: SocketAddr,
    /// Its proxy's address, if it runs CoralProxy.
    proxy: Option<SocketAddr>,
    /// How it was started (for a restart).
    spec: NodeBuilder,
}

impl Node {
    /// A node on `ip`: DSHT on :7000, admin on :7080, one core.
    pub fn on(ip: &str) -> NodeBuilder {
        NodeBuilder::new(vec![
            "node".into(),
            "--cores".into(),
            "1".into(),
            "--dsht".into(),
            sock(ip, 7000),
            "--admin".into(),
            sock(ip, 7080),
        ])
    }

    /// A node with `args` alone (and one core unless they say otherwise).
    pub fn with_args<S: AsRef<str>>(args: &[S]) -> NodeBuilder {
        NodeBuilder::new(vec!["node".into(), "--cores".into(), "1".into()]).args(args)
    }

    fn launch(&mut self) {
        assert!(self.proc.is_none());
        let b = &self.spec;
        let mut cmd = command_in(b.netns.as_deref(), CORAL);
        cmd.args(&b.args).stdout(Stdio::null());
        match &b.log {
            Some(path) => cmd.stderr(std::fs::File::create(path).unwrap()),
            None => cmd.stderr(Stdio::inherit()),
        };
        match &b.rust_log {
            Some(f) => cmd.env("RUST_LOG", f),
            None => cmd.env_remove("RUST_LOG"),
        };
        for (k, v) in &b.env {
            cmd.env(k, v);
        }
        if let Some(n) = b.nofile {
            // SAFETY: setrlimit is async-signal-safe and touches only the
            // child being started.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        self.proc = Some(Proc::spawn(&mut cmd, "start coral node"));
    }

    /// Runs `f` where the node's sockets are: in its namespace, if it has one.
    fn near<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        match &self.spec.netns {
            Some(ns) => in_netns(ns, f),
            None => f(),
        }
    }

    /// Waits until every core serves (`/readyz` answers 200) and, if it
    /// runs CoralProxy, the proxy answers HTTP.
    pub fn wait_ready(&self) {
        let (admin, http) = (self.admin, self.proxy);
        let ip = self.ip.clone();
        self.near(move || {
            wait_until(START_WAIT, Duration::from_millis(50), || {
                let ready = TcpStream::connect_timeout(&admin, Duration::from_millis(200)).is_ok()
                    && http_get(admin, "/readyz").0 == 200;
                ready
                    .then_some(())
                    .ok_or_else(|| format!("node {ip} did not become ready"))
            });
            if let Some(http) = http {
                wait_until(START_WAIT, Duration::from_millis(20), || {
                    answers_http(http)
                        .then_some(())
                        .ok_or_else(|| format!("coral node's proxy at {http} did not start"))
                });
            }
        });
    }

    /// Its proxy's address (`--http`).
    pub fn http(&self) -> SocketAddr {
        self.proxy.expect("a node running CoralProxy")
    }

    /// `kill -9` (the whole process group).
    pub fn kill(&mut self) {
        self.proc = None;
    }

    /// Starts the node again on the same flags, once the sockets of the one
    /// killed are gone, and waits until it serves.
    pub fn restart(&mut self) {
        // A killed node's listening sockets can outlive it for a moment (its
        // io_uring is torn down asynchronously), still in the SO_REUSEPORT
        // group; connections steered to them would be refused. Wait until
        // the kernel has closed them.
        if let Some(http) = self.proxy {
            wait_until(START_WAIT, Duration::from_millis(20), || {
                (!listening(http))
                    .then_some(())
                    .ok_or_else(|| format!("old listener on {http}"))
            });
        }
        // Its DSHT socket alike: a node refuses to start on a UDP address
        // another socket holds. Free once a plain bind there succeeds.
        let dsht = self.dsht;
        wait_until(START_WAIT, Duration::from_millis(20), || {
            UdpSocket::bind(dsht)
                .map(drop)
                .map_err(|_| format!("old DSHT socket on {dsht}"))
        });
        self.launch();
        self.wait_ready();
    }

    /// Replaces its `--cores` for the next [`Node::restart`].
    pub fn set_cores(&mut self, n: usize) {
        let args = &mut self.spec.args;
        let i = args.iter().position(|a| a == "--cores").unwrap() + 1;
        args[i] = n.to_string();
    }

    fn proc(&mut self) -> &mut Proc {
        self.proc.as_mut().expect("the node runs")
    }

    /// The node's pid.
    pub fn pid(&self) -> u32 {
        self.proc.as_ref().expect("the node runs").id()
    }

    /// Sends `signal` to the node.
    pub fn signal(&self, signal: i32) {
        self.proc.as_ref().expect("the node runs").signal(signal);
    }

    /// Its exit status if it exits within `limit`.
    pub fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let st = self.proc().exit_within(limit)?;
        self.proc = None;
        Some(st)
    }

    /// Waits for the node to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        match self.exit_within(limit) {
            Some(st) => st,
            None => panic!("node still running after {limit:?}:\n{}", self.log()),
        }
    }

    /// What it wrote to its log file so far (see [`NodeBuilder::log`]).
    pub fn log(&self) -> String {
        self.spec
            .log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Waits until its log holds `needle`; panics if it exits first.
    pub fn wait_log(&mut self, needle: &str) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            if let Some(st) = self.proc().child().try_wait().unwrap() {
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

    /// A client command (`coral ARGS --node ADMIN --json`) against it.
    pub fn client_output(&self, args: &[&str]) -> Output {
        command_in(self.spec.netns.as_deref(), CORAL)
            .args(args)
            .args(["--node", &self.admin.to_string(), "--json"])
            .output()
            .expect("run coral client")
    }

    /// A client command's JSON; it must succeed.
    pub fn client(&self, args: &[&str]) -> serde_json::Value {
        let out = self.client_output(args);
        assert!(
            out.status.success(),
            "coral {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON from the client command")
    }

    /// Waits until it knows `contacts` other nodes at level 0.
    pub fn wait_joined(&self, contacts: u64) {
        wait_until(START_WAIT, Duration::from_millis(100), || {
            let out = self.client_output(&["levels"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            (v["levels"][0]["contacts"].as_u64().unwrap_or(0) >= contacts)
                .then_some(())
                .ok_or_else(|| format!("node {} did not join", self.ip))
        })
    }

    /// GET `path` from its admin endpoint: the status, the head and the body.
    pub fn admin_get(&self, path: &str) -> (u16, String, String) {
        let (admin, path) = (self.admin, path.to_string());
        self.near(move || http_get(admin, &path))
    }

    /// Its `/metrics`.
    pub fn metrics(&self) -> String {
        let (status, _, body) = self.admin_get("/metrics");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The sample `sample` (name and labels as exposed) in its `/metrics`.
    pub fn metric(&self, sample: &str) -> f64 {
        metric(&self.metrics(), sample)
    }

    /// Its `/status.json`.
    pub fn status_json(&self) -> serde_json::Value {
        let (status, _, body) = self.admin_get("/status.json");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// Its dnssrv counters (core 0), from `/stats`.
    pub fn dns_counters(&self) -> serde_json::Value {
        let (_, _, body) = self.admin_get("/stats");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["cores"][0]["dns"].clone()
    }

    /// curl for `url` through its proxy (see [`curl`]).
    pub fn curl(&self, url: &str, args: &[&str]) -> Answer {
        curl(&self.ip, url, args)
    }
}

// ---- Clients ------------------------------------------------------------------------

/// The Coralized URL of `path` on the origin `host:port`.
pub fn coralized(host: &str, port: u16, path: &str) -> String {
    format!("http://{host}.{port}.{ALIAS}:8090{path}")
}

/// An answer as curl saw it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub curl_ok: bool,
    pub curl_err: String,
}

impl Answer {
    /// The header `name` (lower case), or "" if it was not sent.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

/// `curl` for `url` with its host on port 8090 resolved to `ip`; `args` go
/// before the URL.
pub fn curl(ip: &str, url: &str, args: &[&str]) -> Answer {
    let host = url
        .trim_start_matches("http://")
        .split(['/', ':'])
        .next()
        .unwrap()
        .to_string();
    let tmp = temp_dir("curl");
    let hdr = tmp.path().join("h");
    let body = tmp.path().join("b");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-D"])
        .arg(&hdr)
        .arg("-o")
        .arg(&body)
        .args(["--resolve", &format!("{host}:8090:{ip}")])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    let head = std::fs::read_to_string(&hdr).unwrap_or_default();
    // The last head (after any 1xx).
    let last = head
        .split("\r\n\r\n")
        .filter(|b| !b.trim().is_empty())
        .last()
        .unwrap_or("");
    let mut lines = last.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: std::fs::read(&body).unwrap_or_default(),
        curl_ok: out.status.success(),
        curl_err: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

/// Headless Chromium (Debian's) loading `url` with its profile in
/// `dir/profile`; `extra` flags before the URL.
pub fn chromium(dir: &Path, url: &str, extra: &[&str]) -> Output {
    Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            &format!("--user-data-dir={}", dir.join("profile").display()),
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium (Debian's package) is needed for this test")
}

/// Chromium's screenshot of `url` at `shot` (any old one removed first),
/// the window `size` (`W,H`) and `extra` flags: its size in bytes (0 if
/// there is none) and Chromium's stderr.
pub fn chromium_screenshot(
    dir: &Path,
    url: &str,
    extra: &[&str],
    size: &str,
    shot: &Path,
) -> (u64, String) {
    let _ = std::fs::remove_file(shot);
    let (screenshot, window) = (
        format!("--screenshot={}", shot.display()),
        format!("--window-size={size}"),
    );
    let flags = [&[screenshot.as_str(), window.as_str()][..], extra].concat();
    let out = chromium(dir, url, &flags);
    let bytes = std::fs::metadata(shot).map_or(0, |m| m.len());
    (bytes, String::from_utf8_lossy(&out.stderr).into_owned())
}

// ---- DNS ----------------------------------------------------------------------------

/// kdig's output for a query to `server` (three tries of 2 s unless `args`
/// say otherwise), run in the network namespace `ns` if given.
pub fn kdig_in(ns: Option<&str>, server: SocketAddr, args: &[&str]) -> String {
    let out = command_in(ns, "kdig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string()])
        .args(["+retry=3", "+timeout=2"])
        .args(args)
        .output()
        .expect("kdig (knot-dnsutils) is needed for this test");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// kdig's output for a query to `server`.
pub fn kdig(server: SocketAddr, args: &[&str]) -> String {
    kdig_in(None, server, args)
}

/// The records of one section as kdig prints them: (owner, ttl, type, data).
pub fn records(out: &str, section: &str) -> Vec<(String, u32, String, String)> {
    let mut v = Vec::new();
    let mut inside = false;
    for line in out.lines() {
        if line.starts_with(";;") {
            inside = line.contains(&format!("{section} SECTION"));
            continue;
        }
        if !inside || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 5 {
            v.push((
                f[0].to_string(),
                f[1].parse().unwrap_or(0),
                f[3].to_string(),
                f[4].to_string(),
            ));
        }
    }
    v
}

/// The rcode kdig printed (`NOERROR`, ...).
pub fn dns_status(out: &str) -> String {
    out.lines()
        .find_map(|l| l.split("status: ").nth(1))
        .map(|s| s.split(';').next().unwrap_or("").trim().to_string())
        .unwrap_or_default()
}

/// The header flags kdig printed.
pub fn dns_flags(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(";; Flags: "))
        .map(|s| s.split(';').next().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// A recursive query in wire form: id, name, type, with or without an OPT
/// record.
pub fn dns_query(id: u16, name: &str, qtype: u16, edns: bool) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)]);
    for l in name.split('.').filter(|l| !l.is_empty()) {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if edns {
        q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    }
    q
}

/// An answer's rcode.
pub fn rcode(answer: &[u8]) -> u8 {
    answer[3] & 0x0f
}

// ---- The origin ---------------------------------------------------------------------

/// nginx (Debian's) serving a web root on `addr`, its files in `dir/nginx`;
/// stopped when dropped.
pub struct Nginx {
    _proc: Proc,
    /// Its access log: `$remote_addr $connection $connection_requests
    /// "$request" "$http_cookie" $status` a line.
    pub log: PathBuf,
    pub addr: SocketAddr,
}

impl Nginx {
    /// nginx serving `root` on `addr`, up once it accepts connections.
    pub fn start(dir: &Path, addr: SocketAddr, root: &Path) -> Nginx {
        Nginx::start_with(dir, addr, root, "")
    }

    /// nginx with `server` directives of the test's own (locations, gzip).
    pub fn start_with(dir: &Path, addr: SocketAddr, root: &Path, server: &str) -> Nginx {
        let d = dir.join("nginx");
        std::fs::create_dir_all(&d).unwrap();
        let conf = d.join("nginx.conf");
        let log = d.join("access.log");
        std::fs::write(
            &conf,
            format!(
                "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{\n  log_format conn '$remote_addr $connection $connection_requests \"$request\" \"$http_cookie\" $status';\n\
                 access_log {log} conn;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
                 fastcgi_temp_path {d}/fcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
                 types {{ text/html html; text/plain txt; image/png png; image/svg+xml svg; application/octet-stream bin; }}\n\
                 server {{ listen {addr}; root {root}; expires 1h;\n{server}\n}}\n}}\n",
                d = d.display(),
                log = log.display(),
                root = root.display(),
            ),
        )
        .unwrap();
        let proc = Proc::spawn(
            Command::new("/usr/sbin/nginx")
                .args(["-p", d.to_str().unwrap(), "-c", conf.to_str().unwrap()])
                .args(["-g", "daemon off;"])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit()),
            "nginx (Debian's package) is needed for this test",
        );
        wait_for_port(addr, "nginx");
        Nginx {
            _proc: proc,
            log,
            addr,
        }
    }

    /// Its access log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Requests it has logged for `path`.
    pub fn requests(&self, path: &str) -> usize {
        let needle = format!("GET {path} ");
        self.log().lines().filter(|l| l.contains(&needle)).count()
    }

    /// Its connection numbers of the requests logged for `path`.
    pub fn connections_of(&self, path: &str) -> Vec<u64> {
        let needle = format!("GET {path} ");
        self.log()
            .lines()
            .filter(|l| l.contains(&needle))
            .filter_map(|l| l.split(' ').nth(1)?.parse().ok())
            .collect()
    }
}
