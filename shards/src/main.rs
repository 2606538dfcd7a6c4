//! `coral`: the command line — run a node, talk to one, or run the paper's
//! experiments in the deterministic simulator.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod accept;
mod accesslog;
mod admin;
pub mod cache;
mod client;
mod clock;
mod config;
mod demo;
mod dns;
mod hints;
mod identity;
mod lifecycle;
mod limits;
mod logging;
mod metrics;
mod proxy;
mod runtime;
mod serve;
mod sim;
mod sim_threads;
mod status;
mod steer;
mod top;

#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
/// Tests count allocations per thread (the cache's hit path makes none).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: cache::tests::CountingAlloc = cache::tests::CountingAlloc;

/// coral — CoralCDN rebuilt: a peer-to-peer CDN on a sloppy hash table.
#[derive(Parser, Debug)]
#[command(name = "coral", version, about, long_about = None, after_help = EXIT_STATUS_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The default admin endpoint, where client commands look for a node.
const DEFAULT_ADMIN: &str = config::DEFAULT_ADMIN;

// Parsed once at start-up: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
// These doc comments are the command line's help text (clap prints them as
// written), not rustdoc: `<ZONE>`, `[levels]` and URLs stay plain.
#[allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Run a node: the DSHT over UDP on every core. With no config file it
    /// runs a standalone node on loopback.
    Node {
        /// TOML config file (see deploy/ for an example); flags override it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// UDP address for DSHT RPCs [default: 127.0.0.1:7000].
        #[arg(long)]
        dsht: Option<SocketAddr>,
        /// The DSHT address peers see (the node id derives from it);
        /// required when --dsht is a wildcard such as 0.0.0.0:7000.
        #[arg(long)]
        public_addr: Option<SocketAddr>,
        /// Log lines as readable text or JSON (colours only on a terminal).
        #[arg(long, value_enum, default_value_t = logging::LogFormat::Human)]
        log_format: logging::LogFormat,
        /// A node to join through (repeatable).
        #[arg(long)]
        bootstrap: Vec<SocketAddr>,
        /// Cores to use (default: every core the process may run on).
        #[arg(long)]
        cores: Option<usize>,
        /// Loopback HTTP address for the client commands [default: 127.0.0.1:7080].
        #[arg(long)]
        admin: Option<SocketAddr>,
        /// The zone dnssrv serves (proxies are *.http.L2.L1.L0.<ZONE>).
        #[arg(long)]
        zone: Option<String>,
        /// The short alias zone of Coralized URLs (www.x.com.<ALIAS>).
        #[arg(long)]
        alias: Option<String>,
        #[command(flatten)]
        proxy: ProxyArgs,
        /// UDP and TCP address of dnssrv, the DNS redirector [default: the
        /// DSHT address's IP, port 7053 on loopback, 53 on a public node].
        #[arg(long)]
        dns: Option<SocketAddr>,
        #[command(flatten)]
        trust: identity::TrustArgs,
    },
    /// put(key, value, ttl, [levels]): insert a value (§2.3).
    Put {
        /// 40 hex digits, or url:<URL> (hashed with SHA-1 as the proxy does).
        key: String,
        /// The value (its bytes are stored).
        value: String,
        /// Time to live in seconds.
        #[arg(long)]
        ttl: u32,
        /// Levels to insert at, e.g. 2,1,0 (default: all).
        #[arg(long)]
        levels: Option<String>,
        #[command(flatten)]
        target: NodeArgs,
    },
    /// get(key, [levels]): retrieve some of the values stored under a key (§2.3).
    Get {
        /// 40 hex digits, or url:<URL>.
        key: String,
        /// Levels to search, e.g. 2,1,0 (default: all, fastest first).
        #[arg(long)]
        levels: Option<String>,
        #[command(flatten)]
        target: NodeArgs,
    },
    /// nodes(level, count, [target], [services]): members of the node's cluster (§2.3).
    Nodes {
        /// The level.
        #[arg(long, default_value_t = 0)]
        level: u8,
        /// How many.
        #[arg(long, default_value_t = 8)]
        count: usize,
        /// An IP address the nodes should be near.
        #[arg(long)]
        target: Option<std::net::IpAddr>,
        /// Only nodes running this service.
        #[arg(long, value_enum)]
        service: Option<Service>,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// levels(): the hierarchy's levels, thresholds and the node's clusters (§2.3).
    Levels {
        #[command(flatten)]
        target: NodeArgs,
    },
    /// The node's counters, per core.
    Stats {
        #[command(flatten)]
        target: NodeArgs,
    },
    /// Find the first routers toward an address (the probe behind the
    /// clustering hints, §4.4): concurrent TTL-limited UDP probes.
    Hints {
        /// The address (IPv4 or IPv6) to probe toward.
        #[arg(long)]
        to: std::net::IpAddr,
        /// Hops to probe.
        #[arg(long, default_value_t = 5)]
        hops: u8,
        /// How long to wait for answers, in milliseconds.
        #[arg(long, default_value_t = 500)]
        timeout_ms: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A live view of a running node (its `/status.json`), like varnishstat:
    /// rates, top objects, clusters. Quits on q or Ctrl-C. With --once, or
    /// when stdout is not a terminal, prints one plain frame and exits.
    Top {
        /// The node's admin endpoint.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: SocketAddr,
        /// Seconds between samples (rates are computed over it).
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
        /// Print one plain-text frame (two samples an interval apart) and exit.
        #[arg(long)]
        once: bool,
    },
    /// Print the Coralized form of an http:// URL (§2.1): its host gains the
    /// origin port as a label (when not 80) and the Coral suffix.
    Coralize {
        /// The origin URL, e.g. http://www.x.com/y.jpg.
        url: String,
        /// The suffix to append: the alias zone (or the zone).
        #[arg(long, default_value = "coral.test")]
        alias: String,
        /// The proxy port (omitted from the URL when 80).
        #[arg(long, default_value_t = 8090)]
        port: u16,
    },
    /// Check a config file as `coral node --config FILE` would load it, and
    /// exit: 0 and a summary when it is fine, 2 and the file, line and key
    /// of the first error otherwise (like `nginx -t`).
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// The flash crowd of §6.1 on real sockets: an origin on a 384 kbit/s
    /// line, coral nodes (DSHT, dnssrv, proxy) and a crowd of clients, all on
    /// loopback; a report like Fig. 4.
    Demo(demo::DemoArgs),
    /// Run one of the paper's experiments in the deterministic simulator.
    Sim {
        #[command(subcommand)]
        experiment: sim::Experiment,
    },
    /// Network admission (SECURITY.md, "Threat model"): create a network's
    /// admission key, admit nodes, print a node's key.
    Network {
        #[command(subcommand)]
        command: identity::NetworkCommand,
    },
}

/// CoralProxy's flags for `coral node` (§2.2).
// These doc comments are the command line's help text (clap prints them as
// written), not rustdoc: `<ZONE>`, `[levels]` and URLs stay plain.
#[allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]
#[derive(clap::Args, Debug)]
struct ProxyArgs {
    /// CoralProxy's HTTP address [default: the DSHT address's IP, port 8090].
    #[arg(long)]
    http: Option<SocketAddr>,
    /// The disk cache's directory [default: coral-cache/<DSHT IP>-<port>].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The disk cache's size, e.g. 1GiB, 500MB [default: 1GiB].
    #[arg(long)]
    cache_size: Option<String>,
    /// Let origins be on loopback, private, link-local ... addresses (labs, tests).
    #[arg(long)]
    allow_private_origins: bool,
    /// Append one line per response to this file (Combined Log Format plus
    /// cache= and rt=; "off" for none; SIGUSR1 reopens it).
    #[arg(long, value_name = "PATH")]
    access_log: Option<String>,
    /// A static answer for an origin name, NAME=IP (repeatable; as curl's --resolve).
    #[arg(long, value_name = "NAME=IP")]
    resolve: Vec<String>,
}

impl ProxyArgs {
    fn apply(self, cfg: &mut config::NodeConfig) -> Result<(), String> {
        if let Some(a) = self.http {
            cfg.http = Some(a);
        }
        if let Some(d) = self.cache_dir {
            cfg.proxy.cache_dir = Some(d);
        }
        if let Some(s) = self.cache_size {
            cfg.proxy.cache_size_bytes =
                config::parse_size(&s).map_err(|e| format!("--cache-size: {e}"))?;
        }
        if self.allow_private_origins {
            cfg.proxy.allow_private_origins = true;
        }
        if let Some(a) = &self.access_log {
            cfg.proxy.access_log =
                config::parse_access_log(a).map_err(|e| format!("--access-log: {e}"))?;
        }
        for r in &self.resolve {
            let (name, ip) = config::parse_resolve(r).map_err(|e| format!("--resolve: {e}"))?;
            cfg.proxy.resolve.retain(|(n, _)| *n != name);
            cfg.proxy.resolve.push((name, ip));
        }
        Ok(())
    }
}

/// Which node a client command talks to, and how it prints.
#[derive(clap::Args, Debug)]
struct NodeArgs {
    /// The node's admin endpoint.
    #[arg(long, default_value = DEFAULT_ADMIN)]
    node: SocketAddr,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Services for `nodes --service`.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Service {
    /// HTTP proxies.
    Http,
    /// DNS servers.
    Dns,
}

/// Exit status of a runtime error: the node could not start or stopped
/// on an error, a client command failed, an address is in use.
const EXIT_RUNTIME: u8 = 1;

/// Exit status of a usage or configuration error (as clap's and `nginx -t`'s):
/// a bad flag or value, a config file that does not load or check.
const EXIT_CONFIG: u8 = 2;

/// The exit statuses, as `--help` lists them (and README's "Exit status").
const EXIT_STATUS_HELP: &str = "Exit status: 0 ok; 1 a runtime error (an address in use, a node \
that cannot be reached, a failed operation); 2 a usage or config error (a bad flag, value or \
config file: its file, line and key are named); 3 a simulator check failed (`--check`).";

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Node { .. }) {
        // A command whose output is piped into `head` or `true` ends quietly
        // on a broken pipe, as other Unix tools do, instead of panicking in
        // println!. (The node keeps SIGPIPE ignored: its sockets report
        // EPIPE as an error.)
        // SAFETY: setting a signal's disposition to its default is always valid.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match cli.command {
        Command::Node {
            config,
            dsht,
            public_addr,
            log_format,
            bootstrap,
            cores,
            admin,
            zone,
            alias,
            proxy,
            dns,
            trust,
        } => {
            let (file_config, mut cfg) = match config::NodeConfig::load_with_file(config.as_deref())
            {
                Ok(c) => c,
                Err(e) => return fail_with(EXIT_CONFIG, &format!("config: {e}")),
            };
            let filter = logging::init(log_format, &cfg.log);
            let reload = lifecycle::Reload {
                path: config.clone(),
                file_config,
                bootstrap_flag: !bootstrap.is_empty(),
                filter: Some(filter),
            };
            if let Some(a) = dsht {
                cfg.dsht = a;
            }
            if let Some(a) = public_addr {
                cfg.public_addr = Some(a);
            }
            if !bootstrap.is_empty() {
                cfg.bootstrap = bootstrap;
            }
            if let Some(c) = cores {
                cfg.cores = c;
            }
            if let Some(a) = admin {
                cfg.admin = a;
            }
            if let Some(a) = dns {
                cfg.dns = Some(a);
            }
            if let Some(z) = zone {
                match config::dns_name("--zone", &z) {
                    Ok(z) => cfg.zone = z,
                    Err(e) => return fail_with(EXIT_CONFIG, &format!("config: {e}")),
                }
            }
            if let Some(a) = alias {
                match config::dns_name("--alias", &a) {
                    Ok(a) => cfg.alias = Some(a),
                    Err(e) => return fail_with(EXIT_CONFIG, &format!("config: {e}")),
                }
            }
            if let Err(e) = proxy.apply(&mut cfg) {
                return fail_with(EXIT_CONFIG, &format!("config: {e}"));
            }
            if let Err(e) = trust.apply(&mut cfg) {
                return fail_with(EXIT_CONFIG, &format!("config: {e}"));
            }
            if let Err(e) = cfg.validate() {
                let e = match &config {
                    Some(path) => {
                        config::locate(path, &std::fs::read_to_string(path).unwrap_or_default(), &e)
                    }
                    None => e,
                };
                return fail_with(EXIT_CONFIG, &format!("config: {e}"));
            }
            match serve::run(cfg, Some(reload)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
        Command::Put {
            key,
            value,
            ttl,
            levels,
            target,
        } => {
            if value.len() > coral::dsht::wire::VALUE_BYTES_MAX {
                return fail_with(EXIT_CONFIG, &format!(
                    "VALUE is {} bytes: a value holds at most {} (it is an address or a short record, §2.3)",
                    value.len(),
                    coral::dsht::wire::VALUE_BYTES_MAX
                ));
            }
            let mut q = format!(
                "/put?key={}&value={}&ttl={ttl}",
                client::encode(&key),
                client::encode(&value)
            );
            if let Some(l) = levels {
                q.push_str(&format!("&levels={}", client::encode(&l)));
            }
            client_command(&target, &q)
        }
        Command::Get {
            key,
            levels,
            target,
        } => {
            let mut q = format!("/get?key={}", client::encode(&key));
            if let Some(l) = levels {
                q.push_str(&format!("&levels={}", client::encode(&l)));
            }
            client_command(&target, &q)
        }
        Command::Nodes {
            level,
            count,
            target,
            service,
            node,
        } => {
            let mut q = format!("/nodes?level={level}&count={count}");
            if let Some(t) = target {
                q.push_str(&format!("&target={t}"));
            }
            if let Some(s) = service {
                q.push_str(match s {
                    Service::Http => "&service=http",
                    Service::Dns => "&service=dns",
                });
            }
            client_command(&node, &q)
        }
        Command::Levels { target } => client_command(&target, "/levels"),
        Command::Stats { target } => client_command(&target, "/stats"),
        Command::Hints {
            to,
            hops,
            timeout_ms,
            json,
        } => {
            match hints::discover_routers(
                to,
                hops.clamp(1, 30),
                std::time::Duration::from_millis(timeout_ms),
            ) {
                Ok(found) => {
                    if found.is_empty() && !json {
                        let local = to.is_loopback()
                            || hints::local_subnets()
                                .iter()
                                .any(|&(net, len)| same_prefix(net, to, len));
                        println!(
                            "no router answered within {timeout_ms} ms on the first {hops} hops toward {to}{}",
                            if local {
                                ": it is on this host or a directly connected subnet, so no router lies between (hints come from the routers toward a remote node, §4.4)"
                            } else {
                                " (routers that do not send ICMP time-exceeded are invisible; try --timeout-ms 2000)"
                            }
                        );
                    }
                    if json {
                        let v: Vec<_> = found
                            .iter()
                            .map(|h| serde_json::json!({"ttl": h.ttl, "addr": h.addr.to_string(), "hint": coral::dsht::cluster::is_hint_address(h.addr)}))
                            .collect();
                        println!(
                            "{}",
                            serde_json::json!({"to": to.to_string(), "routers": v})
                        );
                    } else {
                        for h in &found {
                            let note = if coral::dsht::cluster::is_hint_address(h.addr) {
                                ""
                            } else {
                                "  (private: not a hint)"
                            };
                            println!("{:>2}  {}{note}", h.ttl, h.addr);
                        }
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&format!("probe toward {to}: {e}")),
            }
        }
        Command::Coralize { url, alias, port } => {
            let suffix = match config::dns_name("--alias", &alias) {
                Ok(s) => s,
                Err(e) => return fail_with(EXIT_CONFIG, &e),
            };
            match coral::proxy::names::coralize(&url, &suffix, port) {
                Ok(c) => {
                    println!("{c}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail_with(EXIT_CONFIG, &format!("{url}: {e}")),
            }
        }
        Command::CheckConfig { file } => match config::check_file(&file) {
            Ok(summary) => {
                // What the cache's size and object cap imply (disk, RAM): a
                // size that does not fit is not called ok.
                let cache = config::NodeConfig::load(Some(&file)).ok().map(|cfg| {
                    let cores = match cfg.cores {
                        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                        n => n,
                    };
                    cache::check_config_line(
                        &cfg.cache_dir(),
                        cfg.proxy.cache_size_bytes,
                        cfg.proxy.cache_objects_max,
                        cores,
                    )
                });
                match &cache {
                    Some((_, true)) => println!(
                        "{}",
                        summary.replacen(": ok:", ": usable, with a warning:", 1)
                    ),
                    _ => println!("{summary}"),
                }
                if let Some((line, _)) = cache {
                    println!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail_with(EXIT_CONFIG, &e),
        },
        Command::Top {
            admin,
            interval,
            once,
        } => top::run(admin, interval, once),
        Command::Demo(args) => demo::run(args),
        Command::Sim { experiment } => sim::run(experiment),
        Command::Network { command } => match identity::run_network(command) {
            Ok(out) => {
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
    }
}

/// Whether `a` and `b` are of one family and share their first `len` bits.
fn same_prefix(a: std::net::IpAddr, b: std::net::IpAddr, len: u8) -> bool {
    use std::net::IpAddr;
    let (x, y, bits) = match (a, b.to_canonical()) {
        (IpAddr::V4(x), IpAddr::V4(y)) => (u128::from(u32::from(x)), u128::from(u32::from(y)), 32),
        (IpAddr::V6(x), IpAddr::V6(y)) => (u128::from(x), u128::from(y), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    len == 0 || (x ^ y) >> (bits - len) == 0
}

fn client_command(target: &NodeArgs, query: &str) -> ExitCode {
    if query.starts_with("/put") || query.starts_with("/get") {
        let key = query
            .split("key=")
            .nth(1)
            .and_then(|k| k.split('&').next())
            .unwrap_or("");
        if admin::parse_key(&admin::percent_decode(key)).is_none() {
            return fail_with(EXIT_CONFIG, "KEY must be 40 hex digits or url:<URL>");
        }
    }
    match client::call(target.node, query) {
        Ok(json) => {
            if let Some(e) = json.get("error").and_then(|e| e.as_str()) {
                return fail(e);
            }
            client::print(&json, target.json);
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

fn fail(msg: &str) -> ExitCode {
    fail_with(EXIT_RUNTIME, msg)
}

fn fail_with(code: u8, msg: &str) -> ExitCode {
    eprintln!("coral: {msg}");
    ExitCode::from(code)
}

/// Logs to stderr at `info` (`RUST_LOG` overrides), readable text, colours
/// only on a terminal.
#[allow(dead_code)]
fn init_logging() {
    logging::init(logging::LogFormat::Human, "info");
}
