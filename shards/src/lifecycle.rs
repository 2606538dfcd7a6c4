//! A node's life as an operator sees it: refusing to start beside a live
//! node, readiness (`/readyz`, systemd's `READY=1`), SIGHUP reloads, SIGUSR1
//! (the access log reopened, `accesslog`), and a bounded stop on SIGTERM or
//! SIGINT.
//!
//! SIGHUP re-reads the config file. What can change at run time:
//! - `log`, the log filter (unless `RUST_LOG` is set);
//! - `bootstrap`, the nodes to join through (unless `--bootstrap` was given):
//!   core 0 joins through the new list at once.
//!
//! Everything else (addresses, cores, zone, DSHT and cluster parameters) is
//! bound into sockets and nodes at start: a change is logged as needing a
//! restart, and the running node keeps its values. A file that no longer
//! loads is logged and changes nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::config::NodeConfig;
use crate::logging::FilterHandle;

/// Whether every core serves and the node is not stopping (`/readyz`).
static READY: AtomicBool = AtomicBool::new(false);

/// How long the cores have to stop after SIGTERM before the process exits
/// anyway.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

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

/// How long the admin address probe waits for an answer.
const ADMIN_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Refuses to start where a live node (or another program) already holds
/// the addresses. The node's own sockets use SO_REUSEPORT, so a second node
/// would bind beside the first without complaint and split the traffic;
/// the UDP probe binds without it, which fails while any socket holds the
/// address, and the TCP probe connects.
pub fn check_addresses_free(dsht: SocketAddr, admin: SocketAddr) -> Result<(), String> {
    let in_use = |e: &std::io::Error| e.kind() == std::io::ErrorKind::AddrInUse;
    if let Err(e) = std::net::UdpSocket::bind(dsht) {
        return Err(if in_use(&e) {
            format!(
                "the DSHT address {dsht} (UDP) is in use: another coral node is probably running \
                 there; refusing to start a second one on the same address"
            )
        } else {
            format!("cannot bind the DSHT address {dsht}: {e}")
        });
    }
    // TCP: something accepting there is a live owner. (A bind probe would
    // also trip over the TIME_WAIT connections a node that just stopped
    // leaves behind, which the node's own SO_REUSEPORT bind does not mind.)
    if std::net::TcpStream::connect_timeout(&admin, ADMIN_PROBE_TIMEOUT).is_ok() {
        return Err(format!(
            "the admin address {admin} (TCP) is in use by another coral node or another \
             program; choose another with --admin or `admin =`"
        ));
    }
    Ok(())
}

/// What a SIGHUP needs: where the file is and what the flags fixed.
pub struct Reload {
    /// The config file (`None`: the defaults, nothing to reload).
    pub path: Option<PathBuf>,
    /// The configuration as the file gave it at start (before flags).
    pub file_config: NodeConfig,
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
        let new = match NodeConfig::load(Some(path)) {
            Ok(c) => c,
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
        let mut restart = Vec::new();
        if new.dsht != old.dsht {
            restart.push("dsht");
        }
        if new.public_addr != old.public_addr {
            restart.push("public_addr");
        }
        if new.admin != old.admin {
            restart.push("admin");
        }
        if new.cores != old.cores {
            restart.push("cores");
        }
        if new.zone != old.zone {
            restart.push("zone");
        }
        if new.alias != old.alias {
            restart.push("alias");
        }
        if new.dht != old.dht {
            restart.push("[dht]/[clusters]");
        }
        if new.proxy.access_log != old.proxy.access_log {
            restart.push("[proxy] access_log");
        }
        if !restart.is_empty() {
            tracing::warn!(
                "SIGHUP: {} changed in {} but take effect only on restart; the node keeps its running values",
                restart.join(", "),
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
