//! The thread-per-core runtime: one glommio executor pinned per core, each
//! driving its own `coral::Node` over its own UDP socket.
//!
//! - **Ownership.** Core `i` of `n` owns the keys whose route (first two key
//!   bytes) maps to `i` (`steer::shard_of_key`): their values, their load
//!   records and the operations on them. The kernel delivers requests and
//!   replies for those keys to core `i` (`steer`).
//! - **Sharing.** Every core runs a node with the same id. What one core's
//!   node verifies about a contact it broadcasts to the others over the
//!   channel mesh, so all routing tables learn from all traffic.
//! - **API calls** (from the admin endpoint on core 0) go to the owning core
//!   over the mesh; its reply comes back the same way.
//! - **Clusters** (§4.4): core 0's node organizes them (it alone measures,
//!   validates and splits); every cluster change it makes goes to the other
//!   cores, whose nodes follow. Keyed operations core 0's node starts itself
//!   (hint puts and gets, split lookups) run on the key's owning core
//!   (`Node::poll_delegated`) and their results come back over the mesh.
//!
//! - **Services** (the proxy, dnssrv, the admin endpoint) are started on
//!   each core by the command that runs the node (`serve`), which hands
//!   `run_with` one start function per core. The runtime knows none of
//!   them: a service registers what it answers — its messages between cores
//!   (`Shard::on_message`, one type per service) and its sections of the
//!   per-core reports (`Shard::add_section`: `Call::Stats`, `Call::Metrics`,
//!   `Call::Status`).
//!
//! Nothing here is shared mutably between cores: each core's state lives in
//! its executor, and cores exchange messages, not locks.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use coral::dsht::node::{Delegated, DelegatedCall, Event, LevelInfo, Stats};
use coral::dsht::wire::{Contact, Value};
use coral::{Id, Node, OpId, Time};
use glommio::channels::channel_mesh::{MeshBuilder, Senders};
use glommio::channels::local_channel;
use glommio::net::UdpSocket;
use glommio::{LocalExecutorBuilder, Placement};
use serde_json::json;

use crate::config::NodeConfig;
use crate::lifecycle::{self, Control, Reload};
use crate::steer;

pub(crate) mod batch;

/// io_uring memory per executor: small, because `ulimit -l` is often 8 MiB
/// for the whole process (see tuning/).
const IO_MEMORY_BYTES: usize = 256 << 10;
/// Messages queued per mesh channel.
const MESH_CHANNEL_CAPACITY: usize = crate::limits::RUNTIME.mesh_channel_capacity;
/// Longest the timer task sleeps before checking the node's deadline and
/// the stop flag.
const TICK: std::time::Duration = std::time::Duration::from_millis(5);
/// Largest datagram received through the ring: the wire format's limit.
const RECV_BUFFER_BYTES: usize = coral::dsht::wire::DATAGRAM_BYTES_MAX;
/// Routers probed for clustering hints (§4.4: up to five hops out).
const HINT_HOPS_MAX: u8 = crate::limits::RUNTIME.hint_hops_max;
/// How long the hint probe waits for answers.
const HINT_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(800);
/// Datagrams read from the socket without waiting after each awaited one
/// (in `recvmmsg` batches of `batch::MMSG_BATCH`).
const RECV_BATCH_MAX: usize = crate::limits::RUNTIME.recv_batch_max;
/// How often core 0 sends its routing tables to the other cores.
const TABLE_SYNC_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);
/// Contacts per level sent in one table sync.
const TABLE_SYNC_CONTACTS_MAX: usize = crate::limits::RUNTIME.table_sync_contacts_max;

/// A call into the DSHT from the client commands.
#[derive(Debug, Clone)]
pub enum Call {
    /// `put(key, value, ttl, [levels])`.
    Put {
        key: Id,
        value: Vec<u8>,
        ttl_secs: u32,
        levels: Option<Vec<u8>>,
    },
    /// `get(key, [levels])`.
    Get { key: Id, levels: Option<Vec<u8>> },
    /// This core's counters.
    Stats,
    /// This core's numbers for `/metrics`.
    Metrics,
    /// This core's part of `/status.json`.
    Status,
}

/// The per-core reports services add sections to (`Shard::add_section`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// `Call::Stats`.
    Stats,
    /// `Call::Metrics`.
    Metrics,
    /// `Call::Status`.
    Status,
}

/// What runs on a core beside its DSHT node: called once on the core's
/// executor, after the node is up and before the core takes messages from
/// the others; it registers what the services answer and spawns their
/// tasks.
pub type CoreServices = Box<dyn FnOnce(&Rc<Shard>) -> Result<(), String> + Send>;

/// A service's section of a report: its JSON, under its name (`None`: its
/// object's fields go at the top of the report).
type Section = (
    Report,
    Option<&'static str>,
    Box<dyn Fn(&Shard) -> serde_json::Value>,
);

/// A service's handler of its messages from other cores.
type Handler = Rc<dyn Fn(&Rc<Shard>, Box<dyn Any + Send + Sync>)>;

/// What cores send each other.
#[derive(Debug)]
pub enum CoreMsg {
    /// Run `call` and send the JSON answer back to core `from` as request `req`.
    Call { req: u64, from: usize, call: Call },
    /// The answer to request `req`.
    Reply { req: u64, json: String },
    /// A contact verified on another core.
    Learned {
        level: u8,
        contact: Contact,
        rtt_us: u64,
    },
    /// Run a keyed call core `from`'s node delegated, and answer with its event.
    Delegate { from: usize, delegated: Delegated },
    /// The event of delegated call `tag`.
    DelegateDone { tag: u64, event: Event },
    /// Core 0's node changed cluster at `level`: follow it.
    Cluster { level: u8, id: Id, created: Time },
    /// Core 0's routing table at `level`, sent every `TABLE_SYNC_PERIOD`:
    /// a follower whose table lost contacts (a reply from a member still in
    /// its old cluster removes it there, and core 0, which kept it, never
    /// announces it again) gets them back. `seen[i]` is when contact `i`
    /// last answered core 0: a follower keeps whichever answer is newer,
    /// its own or core 0's (issue 24: taken as an answer at the sync, a
    /// dead node looked verified every 2 s to dnssrv on the other cores).
    Table {
        level: u8,
        contacts: Vec<Contact>,
        seen: Vec<Time>,
    },
    /// A service's message: the handler its type registered with
    /// `Shard::on_message` takes it (the proxy's misses handed to a key's
    /// owning core, and their answers).
    Service(Box<dyn Any + Send + Sync>),
}

/// The state of one core.
pub struct Shard {
    /// This core's index.
    pub core: usize,
    /// How many cores run.
    pub cores: usize,
    node: RefCell<Node>,
    /// The node's identity and network (the proxy signs its pointers with
    /// it and verifies others').
    pub trust: Arc<crate::identity::Trust>,
    socket: UdpSocket,
    epoch: Instant,
    waiting: RefCell<HashMap<OpId, local_channel::LocalSender<Event>>>,
    replies: RefCell<HashMap<u64, local_channel::LocalSender<String>>>,
    next_req: RefCell<u64>,
    senders: Senders<CoreMsg>,
    stop: Arc<AtomicBool>,
    /// Datagrams that could not be sent.
    send_errors: RefCell<u64>,
    /// The same socket as `socket`, for direct non-blocking syscalls.
    raw: std::mem::ManuallyDrop<socket2::Socket>,
    /// The node's datagrams on their way to one `sendmmsg`.
    tx: RefCell<batch::SendBatch>,
    /// The services' message handlers, by message type.
    handlers: RefCell<HashMap<TypeId, Handler>>,
    /// The services' sections of the reports.
    sections: RefCell<Vec<Section>>,
}

impl Shard {
    /// Now, on the node's clock.
    pub fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_micros() as u64)
    }

    /// Sends what the node queued and hands out completed operations and
    /// learnt contacts. Call after every batch of inputs to the node.
    ///
    /// Datagrams go out in `sendmmsg` batches, without waiting: a UDP send
    /// on loopback or a NIC almost never blocks, and one system call per
    /// batch is cheaper than a round trip through the ring per datagram.
    /// Only a send that would block, and what follows it, waits on the
    /// ring (`batch`).
    pub async fn flush(&self) {
        use std::os::fd::AsRawFd;
        // Allocated only when a send would block (never, mostly).
        let mut deferred = batch::Deferred::new();
        let mut errors = 0;
        {
            let mut node = self.node.borrow_mut();
            let mut tx = self.tx.borrow_mut();
            let fd = self.raw.as_raw_fd();
            tx.begin();
            // The node keeps its queue's room: it fills again next batch.
            while let Some(to) = node.poll_transmit_keeping(tx.slot()) {
                tx.push(to);
                if tx.is_full() {
                    tx.send(fd, &mut deferred, &mut errors);
                }
            }
            tx.send(fd, &mut deferred, &mut errors);
            // What else the node has for the runtime goes out as it is
            // polled (to waiting tasks and other cores, none of which runs
            // before this returns): no vectors are gathered per flush.
            while let Some(e) = node.poll_event() {
                self.hand_out(e);
            }
            while let Some((level, contact, rtt)) = node.poll_learned() {
                self.announce_learned(level, contact, rtt);
            }
            while let Some(d) = node.poll_delegated() {
                self.delegate(d);
            }
            while let Some((level, cluster)) = node.poll_cluster_change() {
                self.announce_cluster(level, cluster);
            }
        }
        if !deferred.is_empty() {
            errors += batch::send_deferred(&self.socket, deferred).await;
        }
        if errors > 0 {
            *self.send_errors.borrow_mut() += errors;
        }
    }

    /// Hands a completed operation to the task waiting for it.
    fn hand_out(&self, e: Event) {
        crate::metrics::count_event(&e);
        let op = match &e {
            Event::GetDone { op, .. } | Event::PutDone { op, .. } | Event::ClaimDone { op, .. } => {
                *op
            }
        };
        if let Some(tx) = self.waiting.borrow_mut().remove(&op) {
            let _ = tx.try_send(e);
        }
    }

    /// Sends a keyed call the node delegated to its key's owning core.
    fn delegate(&self, d: Delegated) {
        let key = match &d.call {
            DelegatedCall::Get { key, .. } | DelegatedCall::Put { key, .. } => *key,
        };
        let owner = steer::shard_of_key(&key, self.cores);
        let msg = CoreMsg::Delegate {
            from: self.core,
            delegated: d,
        };
        // A full channel drops the call; the node gives up on it at its
        // own deadline.
        if self.senders.try_send_to(owner, msg).is_err() {
            tracing::debug!(owner, "delegated call dropped: mesh channel full");
        }
    }

    /// Tells the other cores the cluster core 0's node joined at `level`.
    fn announce_cluster(&self, level: u8, cluster: coral::dsht::node::Cluster) {
        tracing::info!(level, cluster = %cluster.id, "joined cluster");
        for peer in (0..self.cores).filter(|&p| p != self.core) {
            let msg = CoreMsg::Cluster {
                level,
                id: cluster.id,
                created: cluster.created,
            };
            if self.senders.try_send_to(peer, msg).is_err() {
                tracing::warn!(
                    peer,
                    level,
                    "cluster change not delivered: mesh channel full"
                );
            }
        }
    }

    /// Tells the other cores of a contact this core's node verified.
    fn announce_learned(&self, level: u8, contact: Contact, rtt: coral::Duration) {
        for peer in 0..self.cores {
            if peer != self.core {
                // Best effort: a full channel drops the news, traffic brings it again.
                let _ = self.senders.try_send_to(
                    peer,
                    CoreMsg::Learned {
                        level,
                        contact,
                        rtt_us: rtt.as_micros(),
                    },
                );
            }
        }
    }

    /// Hands one datagram, received at `now`, to the node.
    fn input(&self, now: Time, from: SocketAddr, datagram: &[u8]) {
        if let Err(why) = self.node.borrow_mut().handle(now, from, datagram) {
            tracing::trace!(%from, ?why, "datagram dropped");
        }
    }

    /// Hands the `n` datagrams of a `recvmmsg` batch to the node, at one
    /// reading of the clock (they came together) and one borrow.
    fn input_batch(&self, rx: &batch::RecvBatch, n: usize) {
        let now = self.now();
        let mut node = self.node.borrow_mut();
        for i in 0..n {
            if let Some((datagram, from)) = rx.get(i) {
                if let Err(why) = node.handle(now, from, datagram) {
                    tracing::trace!(%from, ?why, "datagram dropped");
                }
            }
        }
    }

    /// Runs `call` on this core and returns its JSON answer.
    pub async fn run_call(&self, call: Call) -> String {
        let now = self.now();
        let (tx, rx) = local_channel::new_bounded(1);
        let op = {
            let mut node = self.node.borrow_mut();
            match &call {
                Call::Put {
                    key,
                    value,
                    ttl_secs,
                    levels,
                } => {
                    let Some(v) = Value::new(value) else {
                        return json!({"error": "value longer than 255 bytes"}).to_string();
                    };
                    node.put(now, *key, v, *ttl_secs, levels.as_deref())
                }
                Call::Get { key, levels } => node.get(now, *key, levels.as_deref()),
                Call::Stats => {
                    drop(node);
                    return self.report(Report::Stats).to_string();
                }
                Call::Status => {
                    drop(node);
                    return self.report(Report::Status).to_string();
                }
                Call::Metrics => {
                    drop(node);
                    return self.report(Report::Metrics).to_string();
                }
            }
        };
        let started = Instant::now();
        self.waiting.borrow_mut().insert(op, tx);
        self.flush().await;
        match rx.recv().await {
            Some(e) => {
                crate::metrics::observe_dsht(&e, started.elapsed());
                event_json(&e).to_string()
            }
            None => json!({"error": "operation dropped"}).to_string(),
        }
    }

    /// This core's `report`: the node's numbers, with the services'
    /// sections added.
    fn report(&self, report: Report) -> serde_json::Value {
        let mut base = {
            let node = self.node.borrow();
            let send_errors = *self.send_errors.borrow();
            match report {
                Report::Stats => {
                    let mut stats = stats_json(self.core, node.stats(), send_errors);
                    stats["identities"] = identities_json(&node);
                    stats
                }
                Report::Status => json!({}),
                Report::Metrics => {
                    let c = crate::metrics::counters();
                    let mut stats = stats_json(self.core, node.stats(), send_errors);
                    stats["transmit_dropped"] = json!(node.stats().transmit_dropped);
                    stats["identities"] = identities_json(&node);
                    json!({
                        "stats": stats,
                        "counters": {
                            "gets_found": c.gets_found, "gets_not_found": c.gets_not_found,
                            "puts_stored": c.puts_stored, "puts_spilled": c.puts_spilled,
                        },
                        "store": node.store_counts(self.now()).iter().map(|&(k, v, l)| json!([k, v, l])).collect::<Vec<_>>(),
                        "dsht_durations": crate::metrics::dsht_durations_json(),
                    })
                }
            }
        };
        for (r, name, section) in self.sections.borrow().iter() {
            if *r != report {
                continue;
            }
            match (name, section(self)) {
                (Some(name), v) => base[*name] = v,
                (None, serde_json::Value::Object(fields)) => {
                    if let Some(b) = base.as_object_mut() {
                        b.extend(fields);
                    }
                }
                (None, _) => {}
            }
        }
        base
    }

    /// Adds a service's section to `report`: `section`'s JSON under `name`
    /// (`None`: its object's fields at the top).
    pub fn add_section(
        &self,
        report: Report,
        name: Option<&'static str>,
        section: impl Fn(&Shard) -> serde_json::Value + 'static,
    ) {
        self.sections
            .borrow_mut()
            .push((report, name, Box::new(section)));
    }

    /// Registers the handler of a service's messages of type `M` from other
    /// cores (`try_send_to_core`).
    pub fn on_message<M: Any + Send + Sync>(&self, handle: impl Fn(&Rc<Shard>, M) + 'static) {
        let handler: Handler = Rc::new(move |shard, msg| {
            if let Ok(m) = msg.downcast::<M>() {
                handle(shard, *m);
            }
        });
        self.handlers
            .borrow_mut()
            .insert(TypeId::of::<M>(), handler);
    }

    /// Runs a call another core's node delegated to this core (the owner of
    /// its key) and returns the event it produced.
    async fn run_delegated(&self, call: DelegatedCall) -> Option<Event> {
        let now = self.now();
        let (tx, rx) = local_channel::new_bounded(1);
        let op = {
            let mut node = self.node.borrow_mut();
            match call {
                DelegatedCall::Get { key, levels } => node.get(now, key, Some(&levels)),
                DelegatedCall::Put {
                    key,
                    value,
                    ttl_secs,
                    levels,
                } => node.put(now, key, value, ttl_secs, Some(&levels)),
            }
        };
        self.waiting.borrow_mut().insert(op, tx);
        self.flush().await;
        rx.recv().await
    }

    /// Sends `call` to the core that should run it and waits for the answer.
    pub async fn call_on(&self, core: usize, call: Call) -> String {
        if core == self.core {
            return self.run_call(call).await;
        }
        let req = {
            let mut n = self.next_req.borrow_mut();
            *n += 1;
            *n
        };
        let (tx, rx) = local_channel::new_bounded(1);
        self.replies.borrow_mut().insert(req, tx);
        if self
            .senders
            .send_to(
                core,
                CoreMsg::Call {
                    req,
                    from: self.core,
                    call,
                },
            )
            .await
            .is_err()
        {
            self.replies.borrow_mut().remove(&req);
            return json!({"error": "core unavailable"}).to_string();
        }
        rx.recv()
            .await
            .unwrap_or_else(|| json!({"error": "no answer"}).to_string())
    }

    /// `levels()` as JSON.
    pub fn levels_json(&self) -> serde_json::Value {
        let node = self.node.borrow();
        let levels: Vec<_> = node.levels(self.now()).iter().map(level_json).collect();
        json!({"node": node.id().to_string(), "addr": node.addr().to_string(), "cores": self.cores, "levels": levels})
    }

    /// `nodes(level, count, target, services)` as JSON.
    pub fn nodes_json(
        &self,
        level: u8,
        count: usize,
        target: Option<std::net::IpAddr>,
        services: coral::dsht::wire::Services,
    ) -> serde_json::Value {
        let node = self.node.borrow();
        let nodes: Vec<_> = node
            .nodes(level, count, target, services)
            .iter()
            .map(|c| json!({"id": c.id.to_string(), "addr": c.addr.to_string(), "services": c.services.0}))
            .collect();
        json!({"level": level, "nodes": nodes})
    }

    /// How many levels the node has (levels are `0..levels_count()`).
    pub fn levels_count(&self) -> usize {
        self.node.borrow().config().levels()
    }

    /// Starts a DSHT operation on this core's node (the proxy's fetch path:
    /// get, claim, put for keys this core owns) and waits for its event;
    /// `None` if the node dropped it.
    pub async fn dsht_op(&self, start: impl FnOnce(&mut Node, Time) -> OpId) -> Option<Event> {
        let now = self.now();
        let (tx, rx) = local_channel::new_bounded(1);
        let op = start(&mut self.node.borrow_mut(), now);
        self.waiting.borrow_mut().insert(op, tx);
        self.flush().await;
        rx.recv().await
    }

    /// Starts a DSHT operation whose outcome nobody waits for (pointer puts).
    pub async fn dsht_start(&self, start: impl FnOnce(&mut Node, Time) -> OpId) {
        let now = self.now();
        let _ = start(&mut self.node.borrow_mut(), now);
        self.flush().await;
    }

    /// Sets the services this core's node advertises (HTTP when the proxy runs).
    pub fn set_services(&self, services: coral::dsht::wire::Services) {
        self.node.borrow_mut().set_services(services);
    }

    /// Sends a service's `msg` to core `core` (to the handler its type
    /// registered there) without waiting; false if the channel is full.
    pub fn try_send_to_core<M: Any + Send + Sync>(&self, core: usize, msg: M) -> bool {
        self.senders
            .try_send_to(core, CoreMsg::Service(Box::new(msg)))
            .is_ok()
    }

    /// This core's node (dnssrv reads its snapshot from it).
    pub fn node(&self) -> std::cell::RefMut<'_, Node> {
        self.node.borrow_mut()
    }

    /// Whether the node is shutting down.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

fn level_json(l: &LevelInfo) -> serde_json::Value {
    json!({
        "level": l.level,
        "threshold_ms": if l.threshold_ms == u32::MAX { serde_json::Value::Null } else { json!(l.threshold_ms) },
        "cluster": l.cluster.to_string(),
        "age_secs": l.age_secs,
        "size_estimate": l.size_estimate,
        "contacts": l.contacts,
        "keys": l.keys,
        "store_bytes": l.store_bytes,
        "clustering": {
            "evaluations": l.clustering.evaluations,
            "validations": l.clustering.validations,
            "merges": l.clustering.merges,
            "splits": l.clustering.splits,
            "leaves": l.clustering.leaves,
            "singletons": l.clustering.singletons,
        },
    })
}

fn stats_json(core: usize, s: &Stats, send_errors: u64) -> serde_json::Value {
    json!({
        "core": core,
        "datagrams_in": s.datagrams_in, "datagrams_out": s.datagrams_out,
        "malformed": s.malformed, "unbound_sender": s.unbound_sender,
        "unexpected_replies": s.unexpected_replies,
        "pings_served": s.pings_served, "find_nodes_served": s.find_nodes_served,
        "gets_served": s.gets_served, "put_probes_received": s.put_probes_received,
        "stores_received": s.stores_received, "stores_accepted": s.stores_accepted,
        "wrong_cluster": s.wrong_cluster, "bad_token": s.bad_token,
        "rpc_timeouts": s.rpc_timeouts, "ops_refused": s.ops_refused,
        "members_served": s.members_served, "cluster_switches": s.cluster_switches,
        "send_errors": send_errors,
        "rate_limited": s.rate_limited, "replies_trimmed": s.replies_trimmed,
        "stores_refused": s.stores_refused,
    })
}

/// Identity verification on this core (SECURITY.md, "Threat model"):
/// peers' identities accepted, rejected (forged, tampered or not admitted:
/// kept out of the routing tables) and deferred (over the budget).
fn identities_json(node: &Node) -> serde_json::Value {
    let s = node.identity_stats().unwrap_or_default();
    json!({"accepted": s.accepted, "rejected": s.rejected, "deferred": s.deferred})
}

/// A value as JSON: its bytes in hex, as text when it is UTF-8, and as an
/// address when it is one (proxy pointers and hints are addresses).
pub fn value_json(v: &Value) -> serde_json::Value {
    let hex: String = v.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
    json!({
        "hex": hex,
        "text": std::str::from_utf8(v.as_bytes()).ok(),
        "addr": coral::identity::named_addr(v).map(|a| a.to_string()),
    })
}

fn event_json(e: &Event) -> serde_json::Value {
    match e {
        Event::GetDone {
            key,
            values,
            level,
            local,
            hops,
            elapsed,
            ..
        } => json!({
            "op": "get", "key": key.to_string(),
            "values": values.iter().map(value_json).collect::<Vec<_>>(),
            "level": level, "local": local, "hops": hops,
            "elapsed_ms": elapsed.as_millis_f64(),
        }),
        Event::PutDone {
            key,
            levels,
            elapsed,
            ..
        } => json!({
            "op": "put", "key": key.to_string(),
            "levels": levels.iter().map(|l| json!({
                "level": l.level,
                "stored_at": match l.stored_at {
                    Some(coral::dsht::node::StoredAt::Local) => json!("local"),
                    Some(coral::dsht::node::StoredAt::Remote(c)) => json!(c.addr.to_string()),
                    None => serde_json::Value::Null,
                },
                "stopped_at_loaded": l.stopped_at_loaded,
            })).collect::<Vec<_>>(),
            "elapsed_ms": elapsed.as_millis_f64(),
        }),
        Event::ClaimDone {
            key,
            claimed,
            values,
            elapsed,
            ..
        } => json!({
            "op": "claim", "key": key.to_string(), "claimed": claimed,
            "values": values.iter().map(value_json).collect::<Vec<_>>(),
            "elapsed_ms": elapsed.as_millis_f64(),
        }),
    }
}

/// The CPUs this process may run on (glommio's placement ignores the mask).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bitmask the kernel fills; zeroed is a valid
    // empty set, and the size passed is its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Why the runtime cannot start, in words an operator can act on.
pub fn io_uring_problem() -> Option<String> {
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        match s.trim() {
            "0" | "" => {}
            v => {
                return Some(format!(
                    "io_uring is disabled (kernel.io_uring_disabled = {v}); set it to 0, see tuning/README.md"
                ))
            }
        }
    }
    None
}

/// Runs a node until SIGINT or SIGTERM, reloading on SIGHUP what `reload`
/// allows (see `lifecycle`). Blocks the calling thread. Once the DSHT's
/// sockets are bound, `services` is told how many cores run and returns
/// what to start on each (`CoreServices`, one per core), or why the node
/// cannot start.
pub fn run_with(
    config: NodeConfig,
    mut reload: Option<Reload>,
    services: impl FnOnce(usize) -> Result<Vec<CoreServices>, String>,
) -> Result<(), String> {
    if let Some(p) = io_uring_problem() {
        return Err(p);
    }
    let cpus = allowed_cpus();
    if config.cores > cpus.len() {
        return Err(format!(
            "cores = {}: this process may run on {} CPU(s) (its affinity mask); use at most {} or 0 for all",
            config.cores,
            cpus.len(),
            cpus.len()
        ));
    }
    let cores = if config.cores == 0 {
        cpus.len()
    } else {
        config.cores
    };
    lifecycle::check_addresses_free(&config)?;
    // The node's identity and network, once for all cores (the key is
    // created on first start): SECURITY.md, "Threat model".
    let trust = Arc::new(crate::identity::Trust::load(&config)?);
    tracing::info!(
        key = %trust.identity.public().to_hex(),
        file = %trust.key_path.display(),
        created = trust.created,
        network = %trust.describe(),
        "node identity"
    );
    let fds = steer::bind_group(config.dsht, cores)
        .map_err(|e| format!("cannot bind the DSHT address {}: {e}", config.dsht))?;
    // The services open what they need (the disk cache, dnssrv's sockets)
    // before any executor starts.
    let mut services: Vec<Option<CoreServices>> = services(cores)?.into_iter().map(Some).collect();
    let stop = Arc::new(AtomicBool::new(false));
    lifecycle::block_signals();
    // Each core reports once it serves (core 0: with the admin endpoint
    // open), or why it cannot.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<usize, String>>();
    let (control_tx, control_rx) = std::sync::mpsc::channel::<Control>();
    let mut control_rx = Some(control_rx);
    let mesh = MeshBuilder::<CoreMsg, _>::full(cores, MESH_CHANNEL_CAPACITY);
    // The start-up probe for clustering hints runs on its own thread, off the
    // executors; core 0 stores what it finds.
    // Toward the first bootstrap node of each address family (a dual-stack
    // node has IPv4 and IPv6 routers), all found handed over at once.
    let mut hints_rx = None;
    let targets: Vec<IpAddr> = [true, false]
        .into_iter()
        .filter_map(|v4| {
            config
                .bootstrap
                .iter()
                .map(|a| a.ip().to_canonical())
                .find(|ip| ip.is_ipv4() == v4 && !ip.is_loopback())
        })
        .collect();
    if !targets.is_empty() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut hops = Vec::new();
            let mut probed = false;
            for to in targets {
                match crate::hints::discover_routers(to, HINT_HOPS_MAX, HINT_PROBE_TIMEOUT) {
                    Ok(found) => {
                        probed = true;
                        hops.extend(found);
                    }
                    Err(e) => tracing::warn!(%to, error = %e, "hint probe failed"),
                }
            }
            // Nearest first across both families (a stable sort: IPv4
            // before IPv6 at one distance), so the routers kept for hints
            // (`HINT_ROUTERS_MAX`) are the nearest of either.
            hops.sort_by_key(|h| h.ttl);
            if probed {
                let _ = tx.send(hops);
            }
        });
        hints_rx = Some(rx);
    }
    // One clock and one starting set of (singleton) clusters for all cores:
    // the cores of one node are one member of each cluster.
    let epoch = Instant::now();
    let mut rng = coral::rng::Rng::new(seed_from_os());
    let clusters: Vec<Id> = (1..config.dht.levels())
        .map(|_| {
            let mut id = Id::ZERO;
            rng.fill(&mut id.0);
            id
        })
        .collect();
    let mut handles = Vec::new();
    for (core, fd) in fds.into_iter().enumerate() {
        let mesh = mesh.clone();
        let config = config.clone();
        let stop = stop.clone();
        let clusters = clusters.clone();
        let trust = trust.clone();
        let hints = if core == 0 { hints_rx.take() } else { None };
        let control = if core == 0 { control_rx.take() } else { None };
        let ready = ready_tx.clone();
        let services = services
            .get_mut(core)
            .and_then(Option::take)
            .ok_or("one start of the services per core")?;
        let cpu = cpus[core % cpus.len()];
        // A node on every allowed CPU pins one executor to each. A node on
        // fewer leaves placement to the kernel: several small nodes on one
        // host (tests, labs) would otherwise all pin to the first CPUs.
        let placement = if cores == cpus.len() {
            Placement::Fixed(cpu)
        } else {
            Placement::Unbound
        };
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("coral-core-{core}"))
            .io_memory(IO_MEMORY_BYTES)
            .spawn(move || async move {
                let start = CoreStart {
                    core,
                    cores,
                    fd,
                    epoch,
                    clusters,
                    trust,
                    ready: ready.clone(),
                    control,
                    services,
                };
                let r = core_main(start, config, mesh, stop, hints).await;
                if let Err(e) = &r {
                    let _ = ready.send(Err(e.clone()));
                }
                r
            })
            .map_err(|e| {
                format!(
                    "cannot start the executor for core {core} on CPU {cpu}: {e}. If io_uring is unavailable or \
                     locked memory (ulimit -l) is too small, see tuning/README.md"
                )
            })?;
        handles.push(handle);
    }
    drop(ready_tx);
    let mut serving = 0;
    while serving < cores {
        match ready_rx.recv() {
            Ok(Ok(_)) => serving += 1,
            Ok(Err(e)) => {
                stop.store(true, Ordering::Relaxed);
                tracing::error!("{e}");
                lifecycle::arm_stop_watchdog(1);
                for h in handles {
                    let _ = h.join();
                }
                return Err(e);
            }
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                return Err("a core stopped before it served".into());
            }
        }
    }
    tracing::info!(addr = %config.dsht, id_addr = %config.id_addr(), admin = %config.admin, http = %config.http_addr(), dns = %config.dns_addr(), cores, "coral node running");
    lifecycle::set_ready(true);
    let why = loop {
        match lifecycle::wait_signal() {
            lifecycle::Signal::Reload => {
                if let Some(r) = reload.as_mut() {
                    for c in r.reload() {
                        let _ = control_tx.send(c);
                    }
                } else {
                    tracing::info!("SIGHUP: nothing to reload");
                }
            }
            lifecycle::Signal::Reopen => {
                if crate::accesslog::enabled() {
                    crate::accesslog::reopen();
                } else {
                    tracing::info!("SIGUSR1: no access log to reopen");
                }
            }
            lifecycle::Signal::Stop(why) => break why,
        }
    };
    tracing::info!(signal = why, "stopping");
    lifecycle::set_ready(false);
    // Out of DNS first, then what is in flight (issue 24).
    lifecycle::withdraw(cores);
    lifecycle::arm_stop_watchdog(0);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(format!("executor failed: {e}")),
        }
    }
    // The cores handed over their last lines as they stopped.
    crate::accesslog::shutdown();
    Ok(())
}

/// What each core starts from.
struct CoreStart {
    core: usize,
    cores: usize,
    fd: RawFd,
    /// The node's clock: one for all cores.
    epoch: Instant,
    /// The starting cluster id of each non-global level.
    clusters: Vec<Id>,
    /// The node's identity and network.
    trust: Arc<crate::identity::Trust>,
    /// Told once this core serves.
    ready: std::sync::mpsc::Sender<Result<usize, String>>,
    /// Reloads for core 0 (SIGHUP).
    control: Option<std::sync::mpsc::Receiver<Control>>,
    /// What to start beside the DSHT.
    services: CoreServices,
}

async fn core_main(
    start: CoreStart,
    config: NodeConfig,
    mesh: MeshBuilder<CoreMsg, glommio::channels::channel_mesh::Full>,
    stop: Arc<AtomicBool>,
    hints: Option<std::sync::mpsc::Receiver<Vec<crate::hints::Hop>>>,
) -> Result<(), String> {
    let (senders, mut receivers) = mesh
        .join()
        .await
        .map_err(|_| "cannot join the core mesh".to_string())?;
    let shard = new_shard(&start, &config, senders, stop)?;
    let CoreStart {
        core,
        ready,
        control,
        services,
        ..
    } = start;
    spawn_datagrams(&shard);
    // Joining: core 0 bootstraps; the others learn from it over the mesh.
    if core == 0 && !config.bootstrap.is_empty() {
        let now = shard.now();
        tracing::info!(through = ?config.bootstrap, "joining");
        shard.node.borrow_mut().bootstrap(now, &config.bootstrap);
        shard.flush().await;
    }
    services(&shard)?;
    // Messages from the other cores, once the services have registered
    // their handlers (until then they wait in the channels).
    for (_, stream) in receivers.streams() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Some(msg) = stream.recv().await {
                handle_core_msg(&shard, msg).await;
            }
        })
        .detach();
    }
    let _ = ready.send(Ok(core));
    run_timers(&shard, control, hints).await;
    crate::accesslog::flush();
    Ok(())
}

/// This core's shard: its node (core 0 organizes the clusters, §4.4; the
/// other cores follow it) on its own socket of the steered group.
fn new_shard(
    start: &CoreStart,
    config: &NodeConfig,
    senders: Senders<CoreMsg>,
    stop: Arc<AtomicBool>,
) -> Result<Rc<Shard>, String> {
    let (core, cores, fd, epoch) = (start.core, start.cores, start.fd, start.epoch);
    // SAFETY: `fd` is a bound UDP socket made by `steer::bind_group` for this
    // core alone; ownership passes to the glommio socket, which closes it.
    let socket = unsafe { UdpSocket::from_raw_fd(fd) };
    // SAFETY: a second handle on the same descriptor for direct syscalls;
    // ManuallyDrop keeps it from closing what `socket` owns.
    let raw = std::mem::ManuallyDrop::new(unsafe { socket2::Socket::from_raw_fd(fd) });
    let seed = seed_from_os() ^ core as u64;
    let mut dht = config.dht.clone();
    dht.cluster_manage &= core == 0;
    let now = Time(epoch.elapsed().as_micros() as u64);
    let mut node = Node::new(dht, config.id_addr(), now, seed).map_err(|e| e.to_string())?;
    node.set_route_hint(steer::route_for_core(core, cores));
    node.set_shard(core, cores);
    // Only admitted contacts enter the routing tables (SECURITY.md); an
    // open network admits any contact that answers, as before admission.
    if start.trust.membership != coral::identity::Membership::Open {
        node.set_identity(&start.trust.identity, start.trust.verifier());
    }
    for (i, id) in start.clusters.iter().enumerate() {
        node.set_cluster(i as u8 + 1, *id, now);
    }
    Ok(Rc::new(Shard {
        core,
        cores,
        node: RefCell::new(node),
        trust: start.trust.clone(),
        socket,
        epoch,
        waiting: RefCell::new(HashMap::new()),
        replies: RefCell::new(HashMap::new()),
        next_req: RefCell::new(0),
        senders,
        stop,
        send_errors: RefCell::new(0),
        raw,
        tx: RefCell::new(batch::SendBatch::new()),
        handlers: RefCell::new(HashMap::new()),
        sections: RefCell::new(Vec::new()),
    }))
}

/// The datagram task: one awaited receive, then whatever else the socket
/// holds, read in `recvmmsg` batches without waiting (up to
/// `RECV_BATCH_MAX`), each batch's datagrams handed to the node at one
/// reading of the clock and its replies sent in one flush (`sendmmsg`).
fn spawn_datagrams(shard: &Rc<Shard>) {
    let shard = shard.clone();
    glommio::spawn_local(async move {
        use std::os::fd::AsRawFd;
        let mut first = vec![0u8; RECV_BUFFER_BYTES];
        let mut rx = batch::RecvBatch::new();
        let fd = shard.raw.as_raw_fd();
        loop {
            match shard.socket.recv_from(&mut first).await {
                Ok((n, from)) => shard.input(shard.now(), from, first.get(..n).unwrap_or(&[])),
                Err(e) => {
                    tracing::debug!(error = %e, "recv failed");
                    glommio::timer::sleep(TICK).await;
                    continue;
                }
            }
            for _ in 0..RECV_BATCH_MAX.div_ceil(batch::MMSG_BATCH) {
                let n = rx.recv(fd);
                if n > 0 {
                    shard.input_batch(&rx, n);
                }
                // The replies so far (the awaited datagram's with the
                // first batch's) in one `sendmmsg`.
                shard.flush().await;
                // Datagrams that came while this batch was answered are
                // read at once; only an empty socket sends us back to the
                // ring.
                if n == 0 {
                    break;
                }
            }
        }
    })
    .detach();
}

/// The node's timers, reloads, clustering hints and (on core 0) the
/// contact watch and table sync, until the node stops.
async fn run_timers(
    shard: &Rc<Shard>,
    control: Option<std::sync::mpsc::Receiver<Control>>,
    hints: Option<std::sync::mpsc::Receiver<Vec<crate::hints::Hop>>>,
) {
    let (core, cores) = (shard.core, shard.cores);
    let mut watch = crate::lifecycle::ContactWatch::default();
    let mut next_sync = Instant::now();
    let mut limits = crate::lifecycle::LimitWatch::default();
    while !shard.stopping() {
        if let Some(Control::Bootstrap(list)) = control.as_ref().and_then(|rx| rx.try_recv().ok()) {
            tracing::info!(through = ?list, "joining (reload)");
            let now = shard.now();
            shard.node.borrow_mut().bootstrap(now, &list);
            shard.flush().await;
        }
        {
            let now = shard.now();
            limits.observe(now, core, shard.node.borrow().stats());
        }
        if core == 0 {
            let now = shard.now();
            if watch.due(now) {
                let levels = shard.node.borrow().levels(now);
                watch.observe(now, &levels);
            }
            if cores > 1 && next_sync.elapsed() >= TABLE_SYNC_PERIOD {
                next_sync = Instant::now();
                sync_tables(shard);
            }
        }
        if let Some(hops) = hints.as_ref().and_then(|rx| rx.try_recv().ok()) {
            set_hints(shard, &hops).await;
        }
        let now = shard.now();
        let due = shard.node.borrow().poll_timeout().is_some_and(|t| t <= now);
        if due {
            shard.node.borrow_mut().handle_timeout(now);
            shard.flush().await;
        }
        let wait = shard
            .node
            .borrow()
            .poll_timeout()
            .map(|t| std::time::Duration::from_micros(t.0.saturating_sub(shard.now().0)))
            .unwrap_or(TICK)
            .min(TICK);
        glommio::timer::sleep(wait).await;
    }
}

/// Hands the node its clustering hints (§4.4): the routers the start-up
/// probe found and the subnets this host is directly connected to. The node
/// stores a pointer to itself under each (and keeps them fresh), and looks
/// them up to measure the nodes stored there by others.
async fn set_hints(shard: &Rc<Shard>, hops: &[crate::hints::Hop]) {
    let routers: Vec<IpAddr> = hops.iter().map(|h| h.addr).collect();
    let subnets = crate::hints::local_subnets();
    let keys = coral::dsht::cluster::hint_keys(&routers, &subnets);
    for hop in hops
        .iter()
        .filter(|h| coral::dsht::cluster::is_hint_address(h.addr))
    {
        tracing::info!(ttl = hop.ttl, router = %hop.addr, "storing clustering hint");
    }
    let now = shard.now();
    shard.node.borrow_mut().set_hints(now, &keys);
    shard.flush().await;
}

/// Sends core 0's routing tables to the other cores (best effort: a full
/// channel skips a round).
fn sync_tables(shard: &Rc<Shard>) {
    let levels = shard.node.borrow().config().levels();
    for level in 0..levels as u8 {
        let contacts = shard.node.borrow().nodes(
            level,
            TABLE_SYNC_CONTACTS_MAX,
            None,
            coral::dsht::wire::Services::NONE,
        );
        if contacts.is_empty() {
            continue;
        }
        let seen: Vec<Time> = {
            let node = shard.node.borrow();
            let table = node.routing_table(level);
            contacts
                .iter()
                .map(|c| {
                    table
                        .and_then(|t| t.get(&c.id))
                        .map_or(Time::ZERO, |e| e.last_seen)
                })
                .collect()
        };
        for peer in (0..shard.cores).filter(|&p| p != shard.core) {
            let msg = CoreMsg::Table {
                level,
                contacts: contacts.clone(),
                seen: seen.clone(),
            };
            if shard.senders.try_send_to(peer, msg).is_err() {
                tracing::debug!(peer, level, "table sync skipped: mesh channel full");
            }
        }
    }
}

async fn handle_core_msg(shard: &Rc<Shard>, msg: CoreMsg) {
    match msg {
        CoreMsg::Table {
            level,
            contacts,
            seen,
        } => {
            let mut node = shard.node.borrow_mut();
            for (c, seen) in contacts.into_iter().zip(seen) {
                // The newer answer wins, with its services: this core's own
                // or core 0's, never the time of the sync (issue 24).
                let ours = node
                    .routing_table(level)
                    .and_then(|t| t.get(&c.id))
                    .map(|e| e.last_seen);
                if ours.is_some_and(|t| t >= seen) {
                    continue;
                }
                node.learn_verified(c, level, seen, None);
            }
        }
        CoreMsg::Delegate { from, delegated } => {
            let shard = shard.clone();
            glommio::spawn_local(async move {
                if let Some(event) = shard.run_delegated(delegated.call).await {
                    let tag = delegated.tag;
                    let _ = shard
                        .senders
                        .send_to(from, CoreMsg::DelegateDone { tag, event })
                        .await;
                }
            })
            .detach();
        }
        CoreMsg::DelegateDone { tag, event } => {
            let now = shard.now();
            shard.node.borrow_mut().on_delegated_done(now, tag, event);
            shard.flush().await;
        }
        CoreMsg::Cluster { level, id, created } => {
            shard.node.borrow_mut().set_cluster(level, id, created);
        }
        CoreMsg::Learned {
            level,
            contact,
            rtt_us,
        } => {
            let now = shard.now();
            shard.node.borrow_mut().learn_verified(
                contact,
                level,
                now,
                Some(coral::Duration(rtt_us)),
            );
        }
        CoreMsg::Call { req, from, call } => {
            let shard = shard.clone();
            glommio::spawn_local(async move {
                let json = shard.run_call(call).await;
                let _ = shard
                    .senders
                    .send_to(from, CoreMsg::Reply { req, json })
                    .await;
            })
            .detach();
        }
        CoreMsg::Reply { req, json } => {
            if let Some(tx) = shard.replies.borrow_mut().remove(&req) {
                let _ = tx.try_send(json);
            }
        }
        CoreMsg::Service(msg) => {
            let handler = shard.handlers.borrow().get(&(*msg).type_id()).cloned();
            match handler {
                Some(h) => h(shard, msg),
                None => tracing::debug!("message for a service this core does not run"),
            }
        }
    }
}

/// 64 random bits from the OS (`/dev/urandom`), mixed with the process id.
pub fn seed_from_os() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    u64::from_ne_bytes(b) ^ std::process::id() as u64
}
