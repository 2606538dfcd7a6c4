//! A node's life as an operator sees it: refusing to start beside a live
//! node, readiness (`/readyz`, systemd's `READY=1`), SIGHUP reloads, SIGUSR1
//! (the access log reopened, `accesslog`), and a bounded stop on SIGTERM or
//! SIGINT.
//!
//! SIGTERM (or SIGINT) first *withdraws* the node ([`withdraw`]): it stops
//! advertising its proxy, so dnssrv instances (its own and its peers')
//! stop naming it, finishes the client connections it serves (a bounded
//! drain), then stops the cores and exits 0.
//!
//! SIGHUP re-reads the config file. What can change at run time:
//! - `log`, the log filter (unless `RUST_LOG` is set);
//! - `bootstrap`, the nodes to join through (unless `--bootstrap` was given):
//!   core 0 joins through the new list at once.
//!
//! Every other key (addresses, cores, zone, the `[dht]`, `[clusters]`,
//! `[dnssrv]`, `[proxy]` and `[limits]` sections) is bound into sockets,
//! nodes, the cache and the limits at start: each changed key is logged, one
//! warning per key with its old and new value, as needing a restart, and the
//! running node keeps its values. A file that no longer loads is logged and
//! changes nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::{FileConfig, NodeConfig, Proto};
use crate::logging::FilterHandle;

/// Whether every core serves and the node is not stopping (`/readyz`).
static READY: AtomicBool = AtomicBool::new(false);

/// How long the cores have to stop after SIGTERM before the process exits
/// anyway.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long a withdrawing node with peers keeps serving before it may stop,
/// even with nothing in flight: its peers' dnssrv stop naming it once a
/// liveness check of it comes back without HTTP, within
/// `coral::dns::FRESH` + `coral::dns::CHECK_TIMEOUT` (2 s) and a snapshot
/// period of answering it (`coral::dns`'s `live.rs`).
pub const WITHDRAW_WAIT: Duration = Duration::from_secs(3);

/// Longest a withdrawing node waits for the client connections it serves
/// to finish (the bounded drain); then it stops with what is left. With
/// [`STOP_GRACE`] it stays within the unit's `TimeoutStopSec=`.
pub const DRAIN_MAX: Duration = Duration::from_secs(15);

/// How often the withdrawing main thread looks at the cores' reports.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// Whether the node is withdrawing (SIGTERM came): set once, never cleared.
static LEAVING: AtomicBool = AtomicBool::new(false);

/// Each core's report while the node withdraws (index: core).
static DRAIN: Mutex<Vec<Option<CoreDrain>>> = Mutex::new(Vec::new());

/// What one core reports while the node withdraws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreDrain {
    /// Client connections its proxy has open (clients and peers fetching).
    pub connections_open: u64,
    /// Whether its routing tables hold a node running dnssrv (one that may
    /// name this node, and must learn that it withdrew).
    pub named_by_peers: bool,
}

/// Whether the node is withdrawing: each core drops HTTP from the services
/// its DSHT node advertises and reports [`CoreDrain`] ([`report_drain`]).
pub fn leaving() -> bool {
    LEAVING.load(Ordering::Relaxed)
}

/// Core `core`'s state while the node withdraws.
pub fn report_drain(core: usize, state: CoreDrain) {
    let mut d = DRAIN.lock().unwrap_or_else(|e| e.into_inner());
    if d.len() <= core {
        d.resize(core + 1, None);
    }
    d[core] = Some(state);
}

/// Withdraws the node before its cores stop (called on SIGTERM, on the
/// thread that waits for signals): marks it leaving, so each core stops
/// advertising its proxy (dnssrv here and on its peers stop naming it,
/// `coral::dns`), and waits until every one of the `cores` has reported no
/// client connection open and, if peers may name it, [`WITHDRAW_WAIT`] has
/// passed; at most [`DRAIN_MAX`]. A second SIGTERM or SIGINT ends the wait.
pub fn withdraw(cores: usize) {
    let start = Instant::now();
    LEAVING.store(true, Ordering::Relaxed);
    tracing::info!("withdrawing: no longer named in DNS; finishing what it serves");
    let open = loop {
        let (done, open) = {
            let d = DRAIN.lock().unwrap_or_else(|e| e.into_inner());
            drained(&d, cores, start.elapsed())
        };
        let waited = start.elapsed();
        if done {
            tracing::info!(
                waited_ms = waited.as_millis() as u64,
                "withdrawn and drained"
            );
            return;
        }
        if waited >= DRAIN_MAX {
            break open;
        }
        if let Some(why) = wait_stop_signal(DRAIN_POLL) {
            tracing::warn!(
                signal = why,
                open,
                "stopping at once: a second signal while draining"
            );
            return;
        }
    };
    tracing::warn!(
        open,
        "drain took longer than {} s; stopping with connections open",
        DRAIN_MAX.as_secs()
    );
}

/// Whether a node of `cores` cores that began to withdraw `waited` ago is
/// done, by its cores' `reports`: every core reported, none has a client
/// connection open, and if a peer may name it, [`WITHDRAW_WAIT`] passed.
/// Also the connections open.
fn drained(reports: &[Option<CoreDrain>], cores: usize, waited: Duration) -> (bool, u64) {
    let reported = reports.iter().flatten().count() >= cores;
    let named = reports.iter().flatten().any(|r| r.named_by_peers);
    let open = reports.iter().flatten().map(|r| r.connections_open).sum();
    (
        reported && open == 0 && (!named || waited >= WITHDRAW_WAIT),
        open,
    )
}

/// Waits up to `timeout` for SIGINT or SIGTERM (blocked, as
/// [`block_signals`] leaves them); other signals are taken and ignored.
fn wait_stop_signal(timeout: Duration) -> Option<&'static str> {
    let set = signal_set();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` is initialised, `ts` is a valid timeout and a null
    // siginfo pointer is allowed.
    let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    match sig {
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => None,
    }
}

/// Whether the node is ready: every core serves and it is not stopping.
pub fn ready() -> bool {
    READY.load(Ordering::Relaxed)
}

/// Marks the node ready or not, and tells systemd.
pub fn set_ready(ready: bool) {
    READY.store(ready, Ordering::Relaxed);
    if ready {
        sd_notify("READY=1\nSTATUS=serving");
    } else {
        sd_notify("STOPPING=1");
    }
}

/// Sends `state` to systemd's notification socket (`$NOTIFY_SOCKET`, set
/// for `Type=notify` units); does nothing without one.
pub fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

/// Longest the start-up check waits for a taken address to be released
/// (a node that has just stopped) before refusing to start.
pub const ADDRESS_RELEASE_WAIT: Duration = Duration::from_secs(2);

/// How often the start-up check probes a taken address again.
const ADDRESS_PROBE_PERIOD: Duration = Duration::from_millis(50);

/// Refuses to start where another live process (another coral node, or
/// any other program) holds one of the node's addresses: the DSHT's (UDP),
/// the admin endpoint's, the proxy's (TCP) and dnssrv's (UDP and TCP).
///
/// The node's own sockets use SO_REUSEPORT, so a second node would bind
/// beside the first without complaint and the kernel would split the
/// traffic between them. Each probe here binds *without* SO_REUSEPORT, which
/// the kernel refuses (EADDRINUSE) while any socket holds the address — the
/// same address, or a wildcard of it, or a specific address under a wildcard
/// probe. A TCP address the probe finds taken counts as in use only while
/// a socket *listens* there (the kernel's table of this network namespace,
/// `/proc/net/tcp` and `tcp6`): the connections a node that just stopped
/// leaves in TIME_WAIT refuse a plain bind but not the node's own
/// SO_REUSEPORT one. The probes are closed before the node binds.
///
/// A node that just stopped may hold its sockets a moment longer: the
/// kernel releases what its io_uring instances held after the process is
/// gone. An address taken is probed again for up to
/// [`ADDRESS_RELEASE_WAIT`] before the node refuses to start.
pub fn check_addresses_free(config: &NodeConfig) -> Result<(), String> {
    let deadline = std::time::Instant::now() + ADDRESS_RELEASE_WAIT;
    for l in config.listeners() {
        let taken = loop {
            let r = match probe(l.proto, l.addr) {
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && l.proto == Proto::Tcp
                        && !tcp_listening(l.addr) =>
                {
                    Ok(())
                }
                r => r,
            };
            match r {
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(ADDRESS_PROBE_PERIOD);
                }
                r => break r,
            }
        };
        if let Err(e) = taken {
            return Err(if e.kind() == std::io::ErrorKind::AddrInUse {
                format!(
                    "the {} address {} ({}) is in use by another process (another coral node \
                     or another program); stop it, or choose another address with {} or `{} =`",
                    l.what,
                    l.addr,
                    l.proto.name(),
                    l.flag(),
                    l.key
                )
            } else {
                format!(
                    "cannot bind the {} address {} ({}): {e}; choose another with {} or `{} =`",
                    l.what,
                    l.addr,
                    l.proto.name(),
                    l.flag(),
                    l.key
                )
            });
        }
    }
    Ok(())
}

/// Whether a TCP socket of this network namespace listens on an address
/// that overlaps `addr` (the same port; the same IP, or a wildcard on
/// either side), per `/proc/net/tcp` and `/proc/net/tcp6`. Unreadable
/// tables count as a listener (refusing is the safe answer).
fn tcp_listening(addr: SocketAddr) -> bool {
    const LISTEN: &str = "0A";
    let mut read_any = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        read_any = true;
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(3) != Some(&LISTEN) {
                continue;
            }
            let Some(local) = f.get(1).and_then(|l| proc_net_addr(l)) else {
                continue;
            };
            let dual_stack_wildcard =
                local.is_ipv6() && local.ip().is_unspecified() && local.port() == addr.port();
            if crate::config::overlaps(local, addr) || dual_stack_wildcard {
                return true;
            }
        }
    }
    !read_any
}

/// An address as `/proc/net/tcp{,6}` writes it: the IP's 32-bit words in
/// hex, each as the host reads the network-order bytes, then `:` and the
/// port in hex.
fn proc_net_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for i in (0..ip.len()).step_by(8) {
        let word = u32::from_str_radix(ip.get(i..i + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip: std::net::IpAddr = match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes.as_slice()).ok()?.into(),
        16 => {
            let v6 = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes.as_slice()).ok()?);
            v6.to_ipv4_mapped().map_or(v6.into(), Into::into)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Binds a socket of `proto` to `addr` without SO_REUSEPORT, and closes it.
fn probe(proto: Proto, addr: SocketAddr) -> std::io::Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = Domain::for_address(addr);
    let s = match proto {
        Proto::Udp => Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?,
        Proto::Tcp => {
            let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
            s.set_reuse_address(true)?;
            s
        }
    };
    s.bind(&addr.into())
}

/// What a SIGHUP needs: where the file is and what the flags fixed.
pub struct Reload {
    /// The config file (`None`: the defaults, nothing to reload).
    pub path: Option<PathBuf>,
    /// The file's values as the running node took them (before flags).
    pub file_config: FileConfig,
    /// Whether `--bootstrap` was given (the flag then wins over the file).
    pub bootstrap_flag: bool,
    /// The log filter.
    pub filter: Option<FilterHandle>,
}

/// What a reload asks the running cores to do.
#[derive(Debug, Clone)]
pub enum Control {
    /// Join (again) through these nodes.
    Bootstrap(Vec<SocketAddr>),
}

/// The keys a SIGHUP applies to the running node; every other key is bound
/// into sockets, nodes, caches and limits at start, and needs a restart.
pub const RELOADABLE_KEYS: &[&str] = &["log", "bootstrap"];

impl Reload {
    /// Re-reads the file and applies what can change at run time; returns
    /// what the cores must do.
    pub fn reload(&mut self) -> Vec<Control> {
        let Some(path) = self.path.clone() else {
            tracing::info!("SIGHUP: no config file to reload (started without --config)");
            return Vec::new();
        };
        sd_notify("RELOADING=1");
        let out = self.apply(&path);
        sd_notify("READY=1");
        out
    }

    fn apply(&mut self, path: &std::path::Path) -> Vec<Control> {
        let new = match NodeConfig::load_with_file(Some(path)) {
            Ok((f, _)) => f,
            Err(e) => {
                tracing::error!("SIGHUP: {e}; nothing changed");
                return Vec::new();
            }
        };
        let old = &self.file_config;
        let mut applied = Vec::new();
        let mut out = Vec::new();
        if new.log != old.log {
            match self.filter.as_ref().map(|f| f.set(&new.log)) {
                Some(Ok(true)) => {
                    applied.push("log");
                    tracing::debug!(filter = %new.log, "log filter replaced");
                }
                Some(Ok(false)) => tracing::info!("SIGHUP: log unchanged (RUST_LOG overrides it)"),
                Some(Err(e)) => tracing::error!("SIGHUP: log = {:?}: {e}", new.log),
                None => {}
            }
        }
        if new.bootstrap != old.bootstrap {
            if self.bootstrap_flag {
                tracing::info!("SIGHUP: bootstrap unchanged (--bootstrap overrides it)");
            } else {
                applied.push("bootstrap");
                out.push(Control::Bootstrap(new.bootstrap.clone()));
            }
        }
        // Every other key, one warning each.
        for change in restart_changes(old, &new) {
            tracing::warn!(
                "SIGHUP: {change} in {} takes effect only on restart; the node keeps its running value",
                path.display()
            );
        }
        tracing::info!(
            applied = %if applied.is_empty() { "nothing".to_string() } else { applied.join(", ") },
            "SIGHUP: reloaded {}",
            path.display()
        );
        // Keep what was applied as the new reference; keys that need a
        // restart stay as they run, so the warning repeats until then.
        if applied.contains(&"log") {
            self.file_config.log = new.log.clone();
        }
        if applied.contains(&"bootstrap") {
            self.file_config.bootstrap = new.bootstrap;
        }
        out
    }
}

/// The keys that differ between `old` and `new`, other than those a reload
/// applies, each as `key changed from A to B`.
pub fn restart_changes(old: &FileConfig, new: &FileConfig) -> Vec<String> {
    let (a, b) = (crate::config::file_keys(old), crate::config::file_keys(new));
    let unset = "(unset)".to_string();
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !RELOADABLE_KEYS.contains(&k.as_str()))
        .filter_map(|k| {
            let (x, y) = (a.get(k).unwrap_or(&unset), b.get(k).unwrap_or(&unset));
            (x != y).then(|| format!("{k} changed from {x} to {y}"))
        })
        .collect()
}

/// The signals the node handles: SIGINT, SIGTERM (stop), SIGHUP (reload)
/// and SIGUSR1 (reopen the access log).
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a sigset_t we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        set
    }
}

/// Blocks the node's signals in this thread and every thread it starts
/// later, so that only `wait_signal` receives them.
pub fn block_signals() {
    let set = signal_set();
    // SAFETY: restoring the default disposition is always valid (a shell
    // starts background jobs with SIGINT ignored, and an ignored signal is
    // discarded before sigwait can see it); `set` is initialised and a null
    // old-set pointer is allowed.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::signal(libc::SIGHUP, libc::SIG_DFL);
        libc::signal(libc::SIGUSR1, libc::SIG_DFL);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// A signal the node acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT or SIGTERM.
    Stop(&'static str),
    /// SIGHUP.
    Reload,
    /// SIGUSR1: reopen the access log (logrotate).
    Reopen,
}

/// Waits for the next of the node's signals (they must be blocked).
pub fn wait_signal() -> Signal {
    let set = signal_set();
    let mut sig: libc::c_int = 0;
    // SAFETY: `set` is initialised and blocked in every thread; `sig` is a
    // valid out-pointer.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    match (rc, sig) {
        (0, libc::SIGHUP) => Signal::Reload,
        (0, libc::SIGUSR1) => Signal::Reopen,
        (0, libc::SIGINT) => Signal::Stop("SIGINT"),
        (0, _) => Signal::Stop("SIGTERM"),
        _ => Signal::Stop("sigwait failed"),
    }
}

/// Exits the process with `code` if the cores have not stopped within
/// `STOP_GRACE` (a stop asked for is a clean exit, bounded in time).
pub fn arm_stop_watchdog(code: i32) {
    std::thread::spawn(move || {
        std::thread::sleep(STOP_GRACE);
        tracing::warn!(
            "cores did not stop within {} s; exiting",
            STOP_GRACE.as_secs()
        );
        std::process::exit(code);
    });
}

/// How often core 0 looks at its routing tables for the log.
const WATCH_PERIOD: coral::Duration = coral::Duration(1_000_000);

/// Logs, at info, what an operator follows in a node's routing tables: the
/// first contacts (joined), contacts gained and lost per level, and each
/// level's cluster size estimate as it changes.
#[derive(Default)]
pub struct ContactWatch {
    next: coral::Time,
    contacts: Vec<usize>,
    sizes: Vec<u32>,
    joined: bool,
}

impl ContactWatch {
    /// Whether it is time to look again.
    pub fn due(&self, now: coral::Time) -> bool {
        now >= self.next
    }

    /// Compares `levels` with what it saw last and logs the differences.
    pub fn observe(&mut self, now: coral::Time, levels: &[coral::dsht::node::LevelInfo]) {
        self.next = coral::Time(now.0 + WATCH_PERIOD.0);
        let first = self.contacts.is_empty();
        self.contacts.resize(levels.len(), 0);
        self.sizes.resize(levels.len(), 0);
        for l in levels {
            let i = usize::from(l.level);
            let (before, after) = (self.contacts[i], l.contacts);
            if !self.joined && i == 0 && after > 0 {
                self.joined = true;
                tracing::info!(contacts = after, "joined the network");
            }
            if !first && after > before {
                tracing::info!(
                    level = l.level,
                    contacts = after,
                    gained = after - before,
                    "contacts gained"
                );
            } else if !first && after < before {
                tracing::info!(
                    level = l.level,
                    contacts = after,
                    lost = before - after,
                    "contacts lost"
                );
            }
            if !first && l.size_estimate != self.sizes[i] {
                tracing::debug!(level = l.level, cluster = %l.cluster, size = l.size_estimate, "cluster size estimate");
            }
            self.contacts[i] = after;
            self.sizes[i] = l.size_estimate;
        }
    }
}

/// Logs, at info, each second in which a core hit one of the node's limits:
/// operations refused (`operations_max` in progress) and datagrams dropped
/// because the transmit queue was full.
#[derive(Default)]
pub struct LimitWatch {
    next: coral::Time,
    ops_refused: u64,
    transmit_dropped: u64,
}

impl LimitWatch {
    /// Compares the counters with the last look (at most once a second).
    pub fn observe(&mut self, now: coral::Time, core: usize, stats: &coral::dsht::node::Stats) {
        if now < self.next {
            return;
        }
        self.next = coral::Time(now.0 + WATCH_PERIOD.0);
        if stats.ops_refused > self.ops_refused {
            tracing::info!(
                core,
                refused = stats.ops_refused - self.ops_refused,
                "limit hit: operations refused (operations_max in progress)"
            );
        }
        if stats.transmit_dropped > self.transmit_dropped {
            tracing::info!(
                core,
                dropped = stats.transmit_dropped - self.transmit_dropped,
                "limit hit: datagrams dropped (transmit queue full)"
            );
        }
        self.ops_refused = stats.ops_refused;
        self.transmit_dropped = stats.transmit_dropped;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 24: a withdrawing node stops only once every core reported
    /// nothing open, and no sooner than `WITHDRAW_WAIT` if peers may name it.
    #[test]
    fn issue24_withdrawal_waits_for_every_core_and_for_the_peers() {
        let quiet = |named_by_peers| {
            Some(CoreDrain {
                connections_open: 0,
                named_by_peers,
            })
        };
        let busy = Some(CoreDrain {
            connections_open: 2,
            named_by_peers: true,
        });
        let soon = Duration::from_millis(100);
        // A core not heard from yet.
        assert_eq!(drained(&[quiet(false), None], 2, soon), (false, 0));
        // Alone (no peer runs dnssrv): done at once.
        assert_eq!(drained(&[quiet(false), quiet(false)], 2, soon), (true, 0));
        // With peers: only after they had time to stop naming it.
        assert_eq!(drained(&[quiet(true), quiet(false)], 2, soon), (false, 0));
        assert_eq!(
            drained(&[quiet(true), quiet(false)], 2, WITHDRAW_WAIT),
            (true, 0)
        );
        // A download in flight holds it, however long (`DRAIN_MAX` ends it).
        assert_eq!(drained(&[quiet(true), busy], 2, DRAIN_MAX), (false, 2));
    }

    #[test]
    fn proc_net_addresses_parse() {
        // 127.0.0.1:8090 as a little-endian host writes it.
        let want: SocketAddr = "127.0.0.1:8090".parse().unwrap();
        let word = u32::from_ne_bytes([127, 0, 0, 1]);
        assert_eq!(proc_net_addr(&format!("{word:08X}:1F9A")), Some(want));
        assert_eq!(
            proc_net_addr("00000000000000000000000000000000:0035"),
            Some("[::]:53".parse().unwrap())
        );
        assert_eq!(proc_net_addr("nonsense"), None);
    }

    /// A listener on a 127.x address of the test's own is seen; after it
    /// closes, not.
    #[test]
    fn a_listener_is_seen_in_the_kernel_table() {
        let addr: SocketAddr = "127.15.250.1:17953".parse().unwrap();
        let l = std::net::TcpListener::bind(addr).unwrap();
        assert!(tcp_listening(addr));
        assert!(probe(Proto::Tcp, addr).is_err());
        drop(l);
        assert!(!tcp_listening(addr));
        assert!(probe(Proto::Tcp, addr).is_ok());
        // UDP: any socket there refuses the probe.
        let u = std::net::UdpSocket::bind(addr).unwrap();
        assert!(probe(Proto::Udp, addr).is_err());
        drop(u);
        assert!(probe(Proto::Udp, addr).is_ok());
    }
}
