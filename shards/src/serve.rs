//! `coral node`: the services on the runtime. The runtime (`runtime`)
//! drives one DSHT node per core and knows no service; this module opens
//! what the services need before the executors start (the disk cache,
//! dnssrv's sockets, the access log) and, on each core, registers what they
//! answer and starts them: the admin endpoint (core 0), CoralProxy, its
//! status sampler and dnssrv.

use std::rc::Rc;

use crate::config::NodeConfig;
use crate::lifecycle::Reload;
use crate::runtime::{CoreServices, Report, Shard};
use crate::{accesslog, admin, cache, dns, proxy, status};

/// Runs a node until SIGINT or SIGTERM, reloading on SIGHUP what `reload`
/// allows. Blocks the calling thread.
pub fn run(config: NodeConfig, reload: Option<Reload>) -> Result<(), String> {
    let services = {
        let config = config.clone();
        move |cores: usize| open(&config, cores)
    };
    crate::runtime::run_with(config, reload, services)
}

/// Opens what the services of a node of `cores` cores need, and returns
/// each core's start.
fn open(config: &NodeConfig, cores: usize) -> Result<Vec<CoreServices>, String> {
    // The disk cache opens (and recovers) before any executor starts; each
    // core gets its own handle.
    let caches = cache::open(
        &cache::CacheConfig {
            dir: config.cache_dir(),
            size_bytes: config.proxy.cache_size_bytes,
            objects_max: config.proxy.cache_objects_max,
        },
        cores,
    )
    .map_err(|e| {
        format!(
            "cannot open the cache in {}: {e}",
            config.cache_dir().display()
        )
    })?;
    let dns_addr = config.dns_addr();
    let mut dns_fds: Vec<Option<dns::DnsFds>> = dns::bind_group(dns_addr, cores)
        .map_err(|e| {
            format!(
                "cannot bind the DNS address {dns_addr}: {e}; choose another with --dns or `dns =`"
            )
        })?
        .into_iter()
        .map(Some)
        .collect();
    if let Some(p) = &config.proxy.access_log {
        accesslog::init(p)?;
    }
    Ok(caches
        .into_iter()
        .enumerate()
        .map(|(core, cache)| {
            let dns = dns_fds.get_mut(core).and_then(Option::take);
            let config = config.clone();
            Box::new(move |shard: &Rc<Shard>| start(shard, &config, cache, dns)) as CoreServices
        })
        .collect())
}

/// Registers what the services answer on this core, and starts them.
fn start(
    shard: &Rc<Shard>,
    config: &NodeConfig,
    cache: cache::CoreCache,
    dns: Option<dns::DnsFds>,
) -> Result<(), String> {
    shard.on_message(proxy::on_core_msg);
    // dnssrv's counters on this core (`coral::dns::Counters`), zero where
    // it does not run.
    shard.add_section(Report::Stats, Some("dns"), |_| dns::counters_json());
    // CoralProxy's and its cache's counters for `coral stats` (the
    // duration histogram stays in /metrics).
    shard.add_section(Report::Stats, Some("http"), |_| {
        let mut v = proxy::metrics_json();
        if let Some(o) = v.as_object_mut() {
            o.remove("duration");
        }
        v
    });
    shard.add_section(Report::Metrics, Some("http"), |_| proxy::metrics_json());
    shard.add_section(Report::Metrics, Some("dns"), |_| dns::counters_json());
    shard.add_section(Report::Status, None, status::core_json);
    if shard.core == 0 {
        admin::spawn(shard.clone(), config.admin)?;
    }
    proxy::spawn(shard.clone(), config, cache)?;
    status::sink::spawn(
        shard.clone(),
        config.proxy.cache_size_bytes,
        proxy::status_snapshot,
    );
    if let Some(fds) = dns {
        dns::spawn(shard.clone(), fds, config)?;
    }
    glommio::spawn_local(withdraw_watch(shard.clone())).detach();
    Ok(())
}

/// How often a core looks whether the node is withdrawing, and then
/// reports its drain.
const WITHDRAW_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Once the node withdraws (SIGTERM, `lifecycle::withdraw`): this core's
/// DSHT node stops advertising HTTP, so every answer it sends (the
/// liveness checks of peers' dnssrv among them) tells that it is no proxy
/// now, and its own dnssrv stops naming it; then it reports its proxy's open
/// connections until the cores stop.
async fn withdraw_watch(shard: Rc<Shard>) {
    use coral::dsht::wire::Services;
    while !shard.stopping() {
        glommio::timer::sleep(WITHDRAW_POLL).await;
        if !crate::lifecycle::leaving() {
            continue;
        }
        let named_by_peers = {
            let mut node = shard.node();
            let s = node.services();
            if s.contains(Services::HTTP) {
                node.set_services(Services(s.0 & !Services::HTTP.0));
            }
            (0..node.config().levels()).any(|l| {
                node.routing_table(l as coral::dsht::node::Level)
                    .is_some_and(|t| t.with_services(Services::DNS).next().is_some())
            })
        };
        // Keep-alive connections idle between requests are closed, not
        // waited for; then the proxy's gauge of open client connections
        // (clients and peers) says what is still being served.
        proxy::close_idle_connections();
        let open = proxy::metrics_json()["connections_open"]
            .as_u64()
            .unwrap_or(0);
        crate::lifecycle::report_drain(
            shard.core,
            crate::lifecycle::CoreDrain {
                connections_open: open,
                named_by_peers,
            },
        );
    }
}
