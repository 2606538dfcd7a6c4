//! The hot-spot experiment of §6.4 (Fig. 8): every node puts and gets the
//! same key, over and over; how many put RPCs reach each node per minute?
//!
//! The paper ran 494 nodes (three per PlanetLab host) in a single level-0
//! cluster, each issuing put/get pairs back to back (about 400 a second).
//! The closest node to the key received 106 put RPCs in the first minute and
//! 83 a minute in steady state, against the bound β·(2^b−1)·⌈log2(n)/b⌉ = 108.
//! The steady state depends only on each node's rate exceeding β per minute,
//! so the default rate here is 10 pairs a second.
//!
//! The same workload also runs against a plain DHT baseline in the same
//! simulator: the same nodes and routing with sloppiness switched off (no
//! node is ever loaded, so every put walks to the closest node).

use crate::config::Config;
use crate::dsht::id::Id;
use crate::dsht::node::Event;
use crate::dsht::node::Node;
use crate::dsht::wire::Value;
use crate::sim::net::{sim_addr, Driver, Links, Sim};
use crate::time::{Duration, Time};

/// Parameters of the hot-spot experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct HotspotParams {
    /// Number of nodes (n).
    pub nodes: usize,
    /// Bits corrected per hop (b).
    pub b: u32,
    /// Leakage rate per minute (β).
    pub beta: u32,
    /// Values per key that make a node full (l).
    pub values_per_key: usize,
    /// Simulated minutes of load.
    pub minutes: u32,
    /// Put/get pairs per node per second.
    pub rate: f64,
    /// The seed.
    pub seed: u64,
    /// Whether to also run the plain-DHT baseline.
    pub baseline: bool,
    /// How nodes join.
    pub bootstrap: Bootstrap,
    /// Whether a node starts a put/get pair while its previous one is still
    /// under way. The paper's nodes issued pairs "back-to-back ... at their
    /// maximum (non-concurrent) rates" (false, the default): a node starts a
    /// pair at its next tick only once both operations of the last one are
    /// done, so `rate` is a ceiling. With true, every node starts a pair at
    /// every tick whatever is outstanding (up to ten walks in flight per
    /// node at the start, when no put ends locally).
    pub concurrent: bool,
    /// Threads that run the nodes (`coral sim --threads`): the same run on
    /// any number (`Sim::with_threads`).
    pub threads: usize,
}

/// How nodes join the network before the load starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// Every node joins through node 0, as in the paper ("all nodes are
    /// seeded with the same well-known host"). Node 0 then sits in every
    /// routing table, and as an intermediate hop it collects more leaked
    /// requests than any other node.
    WellKnown,
    /// Each node joins through a random node that joined before it, as nodes
    /// joining an established network do.
    Random,
}

impl Default for HotspotParams {
    fn default() -> Self {
        HotspotParams {
            nodes: 494,
            b: 1,
            beta: 12,
            values_per_key: 4,
            minutes: 3,
            rate: 10.0,
            seed: 1,
            baseline: true,
            bootstrap: Bootstrap::Random,
            concurrent: false,
            threads: 1,
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct HotspotRun {
    /// Put RPCs (forward-phase probes and stores) received per node per
    /// minute, nodes sorted by XOR distance to the key (closest first):
    /// `per_minute[node_rank][minute]`.
    pub per_minute: Vec<Vec<u64>>,
    /// Closest node's put RPCs in the first minute.
    pub closest_first_minute: u64,
    /// Closest node's mean put RPCs per minute after the first minute.
    pub closest_steady_per_min: f64,
    /// The most put RPCs any node received in one steady-state minute.
    pub max_steady_per_min: u64,
    /// The most put RPCs any node received in the first minute.
    pub max_first_minute: u64,
    /// Who the busiest node of the last minute is and who probed it.
    pub busiest: Option<Busiest>,
    /// Who the busiest node of the first minute is and who probed it
    /// (issue 27: the first minute, before anything is loaded).
    pub busiest_first: Option<Busiest>,
    /// Puts and gets issued.
    pub puts: u64,
    /// Gets issued.
    pub gets: u64,
    /// Gets that found at least one value.
    pub gets_found: u64,
    /// Datagrams sent in the whole run.
    pub datagrams: u64,
    /// Simulator events processed.
    pub events: u64,
    /// The most live values any node stores for the key at the end (the
    /// sloppy-store invariant: never more than l).
    pub max_values_per_node: usize,
}

impl HotspotRun {
    /// Checks the invariants a healthy run must keep; returns what failed.
    pub fn invariant_failures(&self, params: &HotspotParams) -> Vec<String> {
        let mut failed = Vec::new();
        if self.max_values_per_node > params.values_per_key {
            failed.push(format!(
                "a node stores {} values for the key, more than l = {}",
                self.max_values_per_node, params.values_per_key
            ));
        }
        // Only a node's first gets, before any value exists, may miss.
        if self.gets_found + params.nodes as u64 * 2 < self.gets {
            failed.push(format!(
                "only {} of {} gets found a value",
                self.gets_found, self.gets
            ));
        }
        failed
    }
}

/// The experiment's report.
#[derive(Clone, Debug, PartialEq)]
pub struct HotspotReport {
    /// The parameters.
    pub params: HotspotParams,
    /// β·(2^b−1)·⌈log2(n)/b⌉.
    pub bound_rpcs_per_min: u64,
    /// The DSHT.
    pub dsht: HotspotRun,
    /// The plain DHT baseline (if run).
    pub dht: Option<HotspotRun>,
}

/// Runs the experiment on the given links.
pub fn run<L: Links + Clone>(params: &HotspotParams, links: L) -> HotspotReport {
    run_with_progress(params, links, &mut |_| {})
}

/// How far a run has come: reported once the nodes have joined (and the
/// network settled for a minute: `minute` 0), then after each simulated
/// minute of load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Which system: "dsht" or "dht" (the baseline).
    pub system: &'static str,
    /// Minutes of load done (0: the join is done, the load starts).
    pub minute: u32,
    /// Minutes of load in all.
    pub minutes: u32,
    /// Simulator events so far in this system's run.
    pub events: u64,
}

/// Runs the experiment, calling `progress` after each simulated minute (the
/// caller decides whether and how to show it: the core does no I/O).
pub fn run_with_progress<L: Links + Clone>(
    params: &HotspotParams,
    links: L,
    progress: &mut dyn FnMut(Progress),
) -> HotspotReport {
    let config = experiment_config(params);
    let bound_rpcs_per_min = config.hotspot_bound_per_min(params.nodes as u64);
    let dsht = run_one(params, config.clone(), links.clone(), "dsht", progress);
    let dht = params.baseline.then(|| {
        // No node is ever loaded: every put walks to the closest node.
        let plain = Config {
            beta_per_min: u32::MAX,
            ..config
        };
        run_one(params, plain, links, "dht", progress)
    });
    HotspotReport {
        params: params.clone(),
        bound_rpcs_per_min,
        dsht,
        dht,
    }
}

/// The nodes' configuration in the experiment: one level, the parameters'
/// b, β and l.
pub fn experiment_config(params: &HotspotParams) -> Config {
    Config {
        level_thresholds_ms: vec![u32::MAX],
        b: params.b,
        beta_per_min: params.beta,
        values_per_key_max: params.values_per_key,
        // Every node's id is SHA-1 of its IP (`Node::new`, ports not
        // hashed) and every datagram arrives from its sender's own address
        // (`Sim::flush`), so the id-binding check passes for every datagram
        // of this experiment: off, it answers the same without its work (a
        // keyed hash, often a SHA-1, and a cache line a datagram) and the
        // node never allocates the cache behind it (2 KiB a node). Nothing
        // else reads that cache, so every event and figure of a seed is the
        // same (`binding_check_off_changes_nothing`).
        require_id_binding: false,
        ..Config::default()
    }
}

/// The time between one node's join and the next's.
pub const JOIN_GAP_MAX: Duration = Duration::from_millis(20);

/// The whole join takes at most this long: beyond 10,000 nodes they join
/// closer together. At 20 ms apart, a million nodes would take five and a
/// half simulated hours to join (every node waking for its maintenance
/// every 10 s all the while), for a 30-minute experiment; 10,000 or fewer
/// join exactly as before.
pub const JOIN_WINDOW: Duration = Duration::from_secs(200);

/// The gap between joins for `n` nodes: [`JOIN_GAP_MAX`], or less so that
/// all join within [`JOIN_WINDOW`].
pub fn join_gap(n: usize) -> Duration {
    let spread = JOIN_WINDOW.as_micros() / (n.max(1) as u64);
    Duration::from_micros(spread.clamp(1, JOIN_GAP_MAX.as_micros()))
}

fn put_rpcs(node: &Node) -> u64 {
    node.stats().put_probes_received + node.stats().stores_received
}

/// The experiment's driver, one a lane (`Sim::run_until_with`): during the
/// join it bootstraps each node at its turn (through the node it names);
/// during the load it starts each node's put/get pairs at its ticks and
/// counts what they found.
enum Drive<'a> {
    Join(&'a [u32]),
    Load(Load),
}

/// The load's state in one lane.
struct Load {
    key: Id,
    period: Duration,
    /// No tick at or after this.
    end: Time,
    concurrent: bool,
    /// Operations of the hot key under way, per node (of every lane: the
    /// lane's own nodes' entries are the ones used).
    busy: Vec<u8>,
    puts: u64,
    gets: u64,
    gets_found: u64,
}

impl Driver for Drive<'_> {
    fn fire(&mut self, i: usize, node: &mut Node, now: Time) -> Option<Time> {
        let load = match self {
            Drive::Join(via) => {
                node.bootstrap(now, &[sim_addr(via[i] as usize)]);
                return None;
            }
            Drive::Load(load) => load,
        };
        // Back-to-back: a pair starts only once the last one is done.
        if load.concurrent || load.busy[i] == 0 {
            // A value of its own for every node and tick.
            let v = ((i as u64) << 40 | now.as_micros()).to_be_bytes();
            let value = Value::new(&v).expect("8 bytes");
            node.put(now, load.key, value, 3600, None);
            node.get(now, load.key, None);
            load.busy[i] = load.busy[i].saturating_add(2);
            load.puts += 1;
            load.gets += 1;
        }
        let next = now + load.period;
        (next < load.end).then_some(next)
    }

    fn completed(&mut self, i: usize, e: &Event) -> bool {
        let Drive::Load(load) = self else {
            return false;
        };
        match e {
            Event::GetDone { key, values, .. } if *key == load.key => {
                load.gets_found += u64::from(!values.is_empty());
            }
            Event::PutDone { key, .. } if *key == load.key => {}
            _ => return false,
        }
        if let Some(b) = load.busy.get_mut(i) {
            *b = b.saturating_sub(1);
        }
        false
    }
}

/// The experiment's network before the load: `params.nodes` nodes made
/// ([`network`]) and joined one at a time ([`join_all`]), then a minute to
/// settle.
fn join<L: Links>(params: &HotspotParams, config: Config, links: L) -> Sim<L> {
    let mut sim = network(params, config, links);
    join_all(params, &mut sim);
    sim.run_for(Duration::from_secs(60));
    sim
}

/// The experiment's `params.nodes` nodes on `links`, made with `config`
/// (shared) and not yet joined.
pub fn network<L: Links>(params: &HotspotParams, config: Config, links: L) -> Sim<L> {
    let n = params.nodes;
    let mut sim = Sim::with_threads(links, params.seed, params.threads);
    sim.reserve(n);
    let config = std::sync::Arc::new(config);
    for i in 0..n {
        let node = Node::with_shared_config(
            config.clone(),
            sim_addr(i),
            sim.now(),
            params.seed ^ (i as u64) << 20,
        )
        .expect("experiment config is valid");
        sim.add(node);
    }
    sim
}

/// Joins nodes 1.. of [`network`] one at a time, [`join_gap`] apart, each
/// through node 0 or a random earlier node (`params.bootstrap`).
pub fn join_all<L: Links>(params: &HotspotParams, sim: &mut Sim<L>) {
    let n = params.nodes;
    let join_gap = join_gap(n);
    let mut join_rng = crate::rng::Rng::new(params.seed ^ 0x101);
    let mut via = vec![0u32; n];
    let start = sim.now();
    for (i, via) in via.iter_mut().enumerate().skip(1) {
        *via = match params.bootstrap {
            Bootstrap::WellKnown => 0,
            Bootstrap::Random => join_rng.below(i as u64) as u32,
        };
        sim.schedule(
            i,
            start + Duration::from_micros(join_gap.as_micros() * (i as u64 - 1)),
        );
    }
    let mut drivers: Vec<Drive<'_>> = (0..sim.threads()).map(|_| Drive::Join(&via)).collect();
    let end = start + Duration::from_micros(join_gap.as_micros() * (n.max(1) as u64 - 1));
    sim.run_until_with(end, &mut drivers);
}

/// The key every node puts and gets in a run with this seed.
fn hot_key(seed: u64) -> Id {
    Id::hash(&seed.to_be_bytes())
}

fn run_one<L: Links>(
    params: &HotspotParams,
    config: Config,
    links: L,
    system: &'static str,
    progress: &mut dyn FnMut(Progress),
) -> HotspotRun {
    let n = params.nodes;
    let mut sim = join(params, config, links);
    progress(Progress {
        system,
        minute: 0,
        minutes: params.minutes,
        events: sim.stats().events,
    });
    let key = hot_key(params.seed);
    let mut rng = crate::rng::Rng::new(params.seed ^ 0x5eed);
    // Each node starts its put/get pairs at a random offset within the period.
    // At least a microsecond: a rate over a million a second (or infinite)
    // would otherwise make a zero period, and the tick loop would never end.
    let period = Duration::from_micros(((1e6 / params.rate.max(1e-3)) as u64).max(1));
    let start = sim.now();
    let end = start + Duration::from_secs(60 * u64::from(params.minutes));
    for i in 0..n {
        let first = start + Duration::from_micros(rng.below(period.as_micros().max(1)));
        if first < end {
            sim.schedule(i, first);
        }
    }
    let mut drivers: Vec<Drive<'_>> = (0..sim.threads())
        .map(|_| {
            Drive::Load(Load {
                key,
                period,
                end,
                concurrent: params.concurrent,
                busy: vec![0; n],
                puts: 0,
                gets: 0,
                gets_found: 0,
            })
        })
        .collect();
    let mut baseline: Vec<u64> = sim.nodes().map(put_rpcs).collect();
    let mut per_node: Vec<Vec<u64>> = vec![Vec::new(); n];
    // The probes of the first minute and of the last (the same minute when
    // there is only one), sent by each lane's tap.
    let (first_tx, first_rx) = std::sync::mpsc::channel::<ProbeSeen>();
    let (last_tx, last_rx) = std::sync::mpsc::channel::<ProbeSeen>();
    // Each node's first hop for the key when the load starts: the contact
    // its routing table holds closest to its first target (§4.1).
    let first_hops = first_hops(&sim, &key, params.b);
    for minute in 0..params.minutes {
        let last = minute + 1 == params.minutes;
        if minute == 0 || last {
            sim.set_taps(|_lane| {
                let seen = [
                    (minute == 0).then(|| first_tx.clone()),
                    last.then(|| last_tx.clone()),
                ];
                Box::new(move |_at, from, to, bytes: &[u8]| {
                    if bytes.get(1) != Some(&crate::dsht::wire::kind::PUT_PROBE) {
                        return;
                    }
                    if let Ok(m) = crate::dsht::wire::Message::decode(bytes) {
                        if let crate::dsht::wire::Body::PutProbe { key, target, .. } = m.body {
                            let p = ProbeSeen {
                                from: from as u32,
                                to: to as u32,
                                target_bits: key.distance(&target).leading_zeros() as u8,
                            };
                            for s in seen.iter().flatten() {
                                // The receiver outlives every tap.
                                let _ = s.send(p);
                            }
                        }
                    }
                })
            });
        } else {
            sim.clear_taps();
        }
        let minute_end = start + Duration::from_secs(60 * (u64::from(minute) + 1));
        sim.run_until_with(minute_end, &mut drivers);
        for (i, node) in sim.nodes().enumerate() {
            let now_count = put_rpcs(node);
            per_node[i].push(now_count - baseline[i]);
            baseline[i] = now_count;
        }
        progress(Progress {
            system,
            minute: minute + 1,
            minutes: params.minutes,
            events: sim.stats().events,
        });
    }
    let (mut puts, mut gets, mut gets_found) = (0u64, 0u64, 0u64);
    for d in &drivers {
        let Drive::Load(l) = d else { continue };
        puts += l.puts;
        gets += l.gets;
        gets_found += l.gets_found;
    }
    sim.clear_taps();
    drop((first_tx, last_tx));
    let (probes, probes_first): (Vec<ProbeSeen>, Vec<ProbeSeen>) =
        (last_rx.iter().collect(), first_rx.iter().collect());
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| sim.node(i).id().distance(&key));
    let busiest = busiest_node(
        &sim,
        &key,
        params.b,
        &order,
        &per_node,
        per_node.first().map_or(0, Vec::len).saturating_sub(1),
        &probes,
        &first_hops,
    );
    let busiest_first = busiest_node(
        &sim,
        &key,
        params.b,
        &order,
        &per_node,
        0,
        &probes_first,
        &first_hops,
    );
    let per_minute: Vec<Vec<u64>> = order.iter().map(|&i| per_node[i].clone()).collect();
    let closest = &per_minute[0];
    let steady: Vec<u64> = closest.iter().skip(1).copied().collect();
    let closest_steady_per_min = if steady.is_empty() {
        0.0
    } else {
        steady.iter().sum::<u64>() as f64 / steady.len() as f64
    };
    let max_steady_per_min = per_minute
        .iter()
        .flat_map(|m| m.iter().skip(1))
        .copied()
        .max()
        .unwrap_or(0);
    let max_first_minute = per_minute
        .iter()
        .filter_map(|m| m.first())
        .copied()
        .max()
        .unwrap_or(0);
    HotspotRun {
        max_first_minute,
        closest_first_minute: closest.first().copied().unwrap_or(0),
        closest_steady_per_min,
        max_steady_per_min,
        per_minute,
        busiest,
        busiest_first,
        puts,
        gets,
        gets_found,
        datagrams: sim.stats().datagrams,
        events: sim.stats().events,
        max_values_per_node: sim
            .nodes()
            .map(|node| node.store(0).map_or(0, |s| s.values(&key, sim.now()).len()))
            .max()
            .unwrap_or(0),
    }
}

/// A put probe seen on the wire in the last minute.
#[derive(Clone, Copy, Debug)]
struct ProbeSeen {
    from: u32,
    to: u32,
    /// Leading bits the probe's target shares with the key.
    target_bits: u8,
}

/// For each node, the index of the node its routing table makes its first
/// hop toward `key`: the contact closest to the first target
/// splice(k, r, i) (§4.1, `Node::new_lookup`), or `u32::MAX` for none.
fn first_hops<L: Links>(sim: &Sim<L>, key: &Id, b: u32) -> Vec<u32> {
    (0..sim.len())
        .map(|i| {
            let node = sim.node(i);
            let id = node.id();
            let Some((t, _)) =
                crate::dsht::id::next_target(key, &id, key.distance(&id).leading_zeros() / b, b)
            else {
                return u32::MAX;
            };
            node.routing_table(0)
                .and_then(|rt| rt.closest(&t, 1).first().copied())
                .and_then(|c| crate::sim::net::sim_index(c.addr))
                .map_or(u32::MAX, |j| j as u32)
        })
        .collect()
}

/// Which hop of its sender's walk a put probe is (0: the first), from the
/// sender's id and the probe's target alone. The walk from r corrects r's
/// differing digits one at a time (§4.1): its first RPC goes to the contact
/// closest to t1 = splice(k, r, e0 + 1) and asks about t2 = splice(k, t1,
/// e1 + 1), whose first differing digit is r's third (e2); hop j asks about
/// a target that first differs at r's digit e(j+2). So the hop is the count
/// of r's differing digits before the target's first differing digit, less
/// two.
pub fn hop_of_probe(key: &Id, sender: &Id, target_bits: u32, b: u32) -> u32 {
    let b = b.max(1);
    let d = key.distance(sender);
    // The digit of the target's first differing bit; every digit (the last
    // one partial when b does not divide 160) when the target is the key.
    let bits = crate::dsht::id::ID_BITS;
    let digits = if target_bits >= bits {
        bits.div_ceil(b)
    } else {
        target_bits / b
    };
    let mut differing = 0;
    for digit in 0..digits {
        let differs = (digit * b..(digit + 1) * b).any(|bit| {
            let (byte, mask) = ((bit / 8) as usize, 0x80u8 >> (bit % 8));
            d.0.get(byte).is_some_and(|x| x & mask != 0)
        });
        differing += u32::from(differs);
    }
    differing.saturating_sub(2)
}

/// The busiest node of a minute, and who sent it put probes.
#[derive(Clone, Debug, PartialEq)]
pub struct Busiest {
    /// Its index, which is its place in the join order (0 joined first).
    pub index: usize,
    /// Its rank by XOR distance to the key (0: the closest).
    pub rank: usize,
    /// Leading bits its id shares with the key.
    pub prefix_bits: u32,
    /// Put RPCs it received in the minute.
    pub put_rpcs: u64,
    /// Put probes it received in the minute.
    pub probes: u64,
    /// Of those, probes that were their walk's first hop
    /// ([`hop_of_probe`]).
    pub first_hop_probes: u64,
    /// Distinct senders of those first-hop probes.
    pub first_hop_senders: usize,
    /// Nodes whose routing table made it their first hop toward the key
    /// when the load started (the closest contact to their first target).
    pub first_hop_of: usize,
    /// Distinct senders of those probes.
    pub senders: usize,
    /// Probes by the number of leading bits their target shared with the key.
    pub by_target_bits: Vec<(u8, u64)>,
    /// Probes by the number of leading bits their sender shared with the key.
    pub by_sender_bits: Vec<(u32, u64)>,
    /// Senders that hold it in their routing table.
    pub senders_knowing_it: usize,
    /// Routing tables (of all nodes) that hold it.
    pub in_tables: usize,
    /// The median node's count of routing tables that hold it.
    pub in_tables_median: usize,
}

/// For each node, how many nodes' level-0 routing tables hold it.
fn in_tables<L: Links>(sim: &Sim<L>) -> Vec<usize> {
    let mut in_degree = vec![0usize; sim.len()];
    for t in 0..sim.len() {
        for e in sim
            .node(t)
            .routing_table(0)
            .into_iter()
            .flat_map(|rt| rt.entries())
        {
            if let Some(j) = crate::sim::net::sim_index(e.contact.addr) {
                in_degree[j] += 1;
            }
        }
    }
    in_degree
}

#[allow(clippy::too_many_arguments)]
fn busiest_node<L: Links>(
    sim: &Sim<L>,
    key: &Id,
    b: u32,
    order: &[usize],
    per_node: &[Vec<u64>],
    minute: usize,
    probes: &[ProbeSeen],
    first_hops: &[u32],
) -> Option<Busiest> {
    let in_minute = |i: usize| per_node[i].get(minute).copied().unwrap_or(0);
    let (rank, &i) = order
        .iter()
        .enumerate()
        .max_by_key(|&(_, &i)| in_minute(i))?;
    let id = sim.node(i).id();
    let mine: Vec<&ProbeSeen> = probes.iter().filter(|p| p.to as usize == i).collect();
    let mut senders: Vec<u32> = mine.iter().map(|p| p.from).collect();
    senders.sort_unstable();
    senders.dedup();
    let first: Vec<&&ProbeSeen> = mine
        .iter()
        .filter(|p| {
            let s = sim.node(p.from as usize).id();
            hop_of_probe(key, &s, u32::from(p.target_bits), b) == 0
        })
        .collect();
    let mut first_senders: Vec<u32> = first.iter().map(|p| p.from).collect();
    first_senders.sort_unstable();
    first_senders.dedup();
    let mut by_target: std::collections::BTreeMap<u8, u64> = Default::default();
    let mut by_sender: std::collections::BTreeMap<u32, u64> = Default::default();
    for p in &mine {
        *by_target.entry(p.target_bits).or_default() += 1;
        let s = sim.node(p.from as usize).id();
        *by_sender
            .entry(s.distance(key).leading_zeros())
            .or_default() += 1;
    }
    let knows = |t: usize, who: &Id| {
        sim.node(t)
            .routing_table(0)
            .is_some_and(|rt| rt.get(who).is_some())
    };
    let senders_knowing_it = senders.iter().filter(|&&s| knows(s as usize, &id)).count();
    let mut in_degree = in_tables(sim);
    let in_tables = in_degree[i];
    in_degree.sort_unstable();
    Some(Busiest {
        index: i,
        rank,
        prefix_bits: id.distance(key).leading_zeros(),
        put_rpcs: in_minute(i),
        probes: mine.len() as u64,
        first_hop_probes: first.len() as u64,
        first_hop_senders: first_senders.len(),
        first_hop_of: first_hops.iter().filter(|&&j| j as usize == i).count(),
        senders: senders.len(),
        by_target_bits: by_target.into_iter().collect(),
        by_sender_bits: by_sender.into_iter().collect(),
        senders_knowing_it,
        in_tables,
        in_tables_median: in_degree[in_degree.len() / 2],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::net::HashedLinks;

    /// Issue 27: the first hop of a walk toward a key is spread over the
    /// network. A sender's first hop is the contact its table holds
    /// closest to splice(k, r, 1) (§4.1), so a node in many far buckets is
    /// the first hop of many senders, and in the first minute of load, when
    /// nothing is loaded, each of them probes it. With a joining node's far
    /// buckets filled by whichever nodes answered it first (the early
    /// joiners, already in every table), one node was the first hop of
    /// 240–369 of 10,000 nodes (seeds 1, 3, 5), and took 343–532 put RPCs
    /// in minute 1 against twice the bound, 336. With each join refresh's
    /// answers taking its bucket (`Node::adopt_join_refresh`), no node is
    /// the first hop of more than a few: at 5,000 nodes, over 16 keys and 2
    /// seeds, of 45–81 nodes (median 59), where without it 93–182 (median
    /// 132). But a join samples the network as it was: each later joiner
    /// adopts a node that joined when the network was j nodes with a chance
    /// that falls as 1/j, so the early joiners still sat in 6–8 times the
    /// median node's tables. With a node filling its far buckets again at
    /// each 4-fold growth of its estimate of n (rule 10,
    /// `Node::refill_if_grown`), 22–39 (median 31), and no node in over 3
    /// times the median's tables. The test holds the most to 1 %, the
    /// median to 0.8 %, and every node to 4 times the median's tables.
    #[test]
    fn no_node_is_the_first_hop_of_many_after_the_join() {
        let links = HashedLinks {
            min: Duration::from_millis(5),
            max: Duration::from_millis(80),
            seed: 3,
        };
        let nodes = 5000;
        let mut most_by_key = Vec::new();
        let mut in_tables_ratio = Vec::new();
        for seed in [1, 2] {
            let params = HotspotParams {
                nodes,
                seed,
                baseline: false,
                ..HotspotParams::default()
            };
            let sim = join(&params, experiment_config(&params), links);
            for k in 0..16u64 {
                let key = hot_key(k);
                let hops = first_hops(&sim, &key, params.b);
                assert!(hops.iter().all(|&h| h != u32::MAX));
                let mut count = vec![0usize; nodes];
                for &h in &hops {
                    count[h as usize] += 1;
                }
                let most = count.iter().copied().max().unwrap_or(0);
                println!("seed {seed} key {k}: most first hops at one node {most}");
                most_by_key.push(most);
            }
            let mut in_tables = in_tables(&sim);
            in_tables.sort_unstable();
            let (median, most) = (in_tables[nodes / 2], in_tables[nodes - 1]);
            println!("seed {seed}: in routing tables: median node {median}, most {most}");
            in_tables_ratio.push((most, median));
        }
        most_by_key.sort_unstable();
        let (median, worst) = (
            most_by_key[most_by_key.len() / 2],
            most_by_key[most_by_key.len() - 1],
        );
        println!("most first hops at one node, over keys: median {median}, most {worst}; in tables (most, median) {in_tables_ratio:?}");
        // Measured: median 31, most 39; in tables, the most 215 and 224
        // against the median node's 75 and 74. Without rule 10 (rule 9
        // alone): median 59, most 81, and a node in 6–8 times the median's
        // tables; without rule 9 either: 132 and 182.
        assert!(worst * 100 <= nodes, "most {worst} of {nodes}");
        assert!(median * 125 <= nodes, "median {median} of {nodes}");
        for (most, median) in in_tables_ratio {
            assert!(
                most <= 4 * median,
                "in {most} tables, the median node {median}"
            );
        }
    }

    /// A node that joins comes to know every node nearer to it than the
    /// k-th closest of the network it joined: the buckets below that
    /// node's hold fewer than k nodes, so none overflows, and Kademlia's
    /// join (a lookup for the node's own id, then a refresh of every bucket
    /// past its closest neighbour) finds them. Checked for the last 200
    /// nodes to join 2,000, against the nodes that joined before each: 6
    /// of 1,004 such nodes missing. The self-lookup alone does not give it
    /// while nodes join 20 ms apart (it cannot find those that joined in
    /// the last second, which no table holds yet): skipping the refreshes
    /// of the buckets within its k closest (issue 27, session 8: 16 % fewer
    /// events in the join) left 132 of 1,004 missing, and this test fails.
    #[test]
    fn a_joined_node_knows_every_node_nearer_than_its_kth_closest() {
        let links = HashedLinks {
            min: Duration::from_millis(5),
            max: Duration::from_millis(80),
            seed: 3,
        };
        let params = HotspotParams {
            nodes: 2000,
            seed: 1,
            baseline: false,
            ..HotspotParams::default()
        };
        let config = experiment_config(&params);
        let k = config.bucket_size;
        let sim = join(&params, config, links);
        let ids: Vec<Id> = sim.nodes().map(|n| n.id()).collect();
        let (mut missing, mut checked) = (0, 0);
        for i in ids.len() - 200..ids.len() {
            // Nodes join in index order: those before i were there.
            let mut before: Vec<(crate::dsht::id::Distance, usize)> =
                (0..i).map(|j| (ids[i].distance(&ids[j]), j)).collect();
            before.sort_unstable();
            let table = sim.node(i).routing_table(0).expect("level 0");
            // The buckets before the k-th closest's: fewer than k nodes
            // of the network lie in them, every one closer than it.
            let covered = before[k - 1].0.bit_len();
            for &(d, j) in before.iter().take_while(|(d, _)| d.bit_len() < covered) {
                checked += 1;
                if table.get(&ids[j]).is_none() {
                    missing += 1;
                    println!("node {i} lacks node {j} ({} bits)", d.bit_len());
                }
            }
        }
        println!("{checked} nodes in covered buckets, {missing} missing");
        assert!(checked > 200, "{checked}");
        assert!(missing * 50 <= checked, "{missing} of {checked} missing");
    }

    /// `hop_of_probe` numbers a walk's RPC targets 0, 1, 2, ... as the
    /// lookup makes them (§4.1: the first RPC goes toward t1 and asks
    /// about t2, each next one a digit further), for any b.
    #[test]
    fn hop_of_probe_follows_the_lookup_targets() {
        use crate::dsht::id::next_target;
        let mut rng = crate::rng::Rng::new(7);
        for b in 1..=3u32 {
            for _ in 0..200 {
                let (mut k, mut r) = (Id::ZERO, Id::ZERO);
                rng.fill(&mut k.0);
                rng.fill(&mut r.0);
                let i0 = k.distance(&r).leading_zeros() / b;
                let Some((mut t, mut i)) = next_target(&k, &r, i0, b) else {
                    continue;
                };
                let mut hop = 0;
                while let Some((next, j)) = next_target(&k, &t, i, b) {
                    let bits = k.distance(&next).leading_zeros();
                    assert_eq!(hop_of_probe(&k, &r, bits, b), hop, "b {b} hop {hop}");
                    (t, i) = (next, j);
                    hop += 1;
                }
                assert!(hop > 10, "b {b}: {hop} hops");
            }
        }
    }

    /// The experiment turns the id-binding check off (see
    /// `experiment_config`): with it on, every run must be the same, event
    /// for event, since every sender in the experiment is bound.
    #[test]
    fn binding_check_off_changes_nothing() {
        let links = HashedLinks {
            min: Duration::from_millis(5),
            max: Duration::from_millis(80),
            seed: 3,
        };
        for (nodes, seed) in [(64, 1), (300, 2)] {
            let params = HotspotParams {
                nodes,
                minutes: 2,
                rate: 2.0,
                seed,
                baseline: false,
                ..HotspotParams::default()
            };
            let off = experiment_config(&params);
            assert!(!off.require_id_binding);
            let on = Config {
                require_id_binding: true,
                ..off.clone()
            };
            let a = run_one(&params, off, links, "dsht", &mut |_| {});
            let b = run_one(&params, on, links, "dsht", &mut |_| {});
            assert!(a.events > 10_000, "{}", a.events);
            assert_eq!(a, b);
        }
    }
}
