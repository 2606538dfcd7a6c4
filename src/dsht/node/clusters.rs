//! Clusters (§4.4): reconsidering this node's cluster at each level, carrying
//! out the cluster manager's commands (probes, gets and puts of cluster
//! records), switching clusters, and the clustering hints.
//!
//! The decisions live in [`crate::dsht::cluster`]; this file only measures
//! and carries them out.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::dsht::cluster::{ClusterStats, Command, Current, Manager, View};
use crate::dsht::id::{Id, Key};
use crate::dsht::limits::{CLUSTER_CHANGES_MAX, HINT_KEYS_MAX};
use crate::dsht::routing::Insert;
use crate::dsht::wire::{Body, Contact, Value};
use crate::time::{Duration, Time};

use super::send::Purpose;
use super::timers::Timer;
use super::{new_table, Cluster, DelegatedCall, Event, Level, Node};

/// What an operation started by the node itself is for: its event goes to
/// the node, not to the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Internal {
    /// A get or put the cluster manager of `level` asked for.
    Cluster { level: Level, round: u32 },
    /// A get for a clustering hint: measure the nodes it names.
    HintGet,
    /// Nothing to do with the result (storing a hint).
    Quiet,
}

impl Node {
    /// Joins cluster `id` (created at `created`) at `level` ≥ 1. Values and
    /// contacts of the old cluster at that level are dropped: they belong to
    /// it, not to the new one.
    pub fn set_cluster(&mut self, level: Level, id: Id, created: Time) {
        let l = level as usize;
        assert!(
            l > 0 && l < self.levels.len(),
            "level {level} is not a non-global level"
        );
        let state = &mut self.levels[l];
        if state.cluster.id != id {
            state.cluster = Cluster { id, created };
            state.table = new_table(&self.config, self.id);
            state.store.clear();
            state.size_estimate = 1;
            state.estimated_at = None;
            state.filled_for = 0;
            state.members.clear();
            state.members.shrink_to_fit();
            self.managers[l - 1].on_switched();
        }
    }

    /// The next change of cluster this node made itself (§4.4), for a
    /// runtime whose other cores follow this one ([`Node::set_cluster`]).
    /// Bounded: the oldest are dropped if nobody drains them.
    pub fn poll_cluster_change(&mut self) -> Option<(Level, Cluster)> {
        self.cluster_changes.pop_front()
    }

    /// The cluster manager of non-global `level`.
    pub fn cluster_manager(&self, level: Level) -> Option<&Manager> {
        (level as usize)
            .checked_sub(1)
            .and_then(|i| self.managers.get(i))
    }

    /// Clustering counters of non-global `level`.
    pub fn cluster_stats(&self, level: Level) -> ClusterStats {
        self.cluster_manager(level)
            .map(Manager::stats)
            .unwrap_or_default()
    }

    /// Sets this node's clustering hints (§4.4) — keys from
    /// [`hint_keys`](crate::dsht::cluster::hint_keys) for its gateway routers and subnets — and
    /// stores a pointer to itself under each, renewed until replaced. Once
    /// joined, it also looks them up to measure the nodes they name.
    pub fn set_hints(&mut self, now: Time, keys: &[Key]) {
        self.hints = keys.iter().copied().take(HINT_KEYS_MAX).collect();
        self.hints_stored = false;
        if self.joined {
            self.store_hints(now);
            self.lookup_hints(now);
        }
    }

    /// Every level reconsiders its cluster; level 0 explores a little, so
    /// that even an idle node keeps measuring nodes of other clusters.
    pub(super) fn evaluate_clusters(&mut self, now: Time) {
        if !self.hot.cluster_manage || self.managers.is_empty() {
            return;
        }
        let mut target = Id::ZERO;
        self.rng.fill(&mut target.0);
        self.refresh(now, target, 0);
        if !self.hints_stored {
            // A node that never bootstrapped (the first) stores them now.
            self.store_hints(now);
        }
        let mut singleton = false;
        for i in 0..self.managers.len() {
            let level = i + 1;
            let l = &self.levels[level];
            let current = Current {
                view: View {
                    id: l.cluster.id,
                    size: l.size_estimate,
                    created: l.cluster.created,
                },
                alone: l.table.is_empty(),
            };
            singleton |= current.alone;
            let mut out = Vec::new();
            self.managers[i].evaluate(now, current, &self.config, &mut self.rng, &mut out);
            self.run_cluster_commands(now, level as Level, out);
        }
        let since = now.saturating_since(self.hints_looked_up);
        if singleton && since >= Duration::from_secs(u64::from(self.config.hint_ttl_secs / 2)) {
            // Still alone somewhere: the hints may name someone new by now.
            self.lookup_hints(now);
        }
    }

    /// Carries out what the cluster manager of `level` asked for.
    pub(super) fn run_cluster_commands(&mut self, now: Time, level: Level, commands: Vec<Command>) {
        let mut queue: VecDeque<Command> = commands.into();
        while let Some(command) = queue.pop_front() {
            let mut more = Vec::new();
            match command {
                Command::Ping { addr, id, round } => {
                    let body = self.ping_body();
                    self.send_probe(now, level, round, addr, id, body, &mut more);
                }
                Command::Members {
                    contact,
                    target,
                    round,
                } => {
                    let body = Body::Members { level, target };
                    let (addr, id) = (contact.addr, Some(contact.id));
                    self.send_probe(now, level, round, addr, id, body, &mut more);
                }
                Command::Get { key, levels, round } => {
                    self.start_internal_get(now, key, &levels, Internal::Cluster { level, round });
                }
                Command::Put { key, levels, round } => {
                    let value = Value::from_addr(self.addr);
                    let ttl = self.config.hint_ttl_secs;
                    let internal = Internal::Cluster { level, round };
                    self.start_internal_put(now, key, value, ttl, &levels, internal);
                }
                Command::Explore => {
                    let mut target = Id::ZERO;
                    self.rng.fill(&mut target.0);
                    self.refresh(now, target, level);
                }
                Command::Switch {
                    cluster,
                    created,
                    members,
                    ..
                } => self.switch_cluster(now, level, cluster, created, &members),
            }
            queue.extend(more);
        }
    }

    /// Sends one RPC of the cluster manager's probe `round` at `level`; one
    /// that cannot be sent (the pending-RPC limit) counts as failed.
    #[allow(clippy::too_many_arguments)]
    fn send_probe(
        &mut self,
        now: Time,
        level: Level,
        round: u32,
        addr: SocketAddr,
        id: Option<Id>,
        body: Body,
        more: &mut Vec<Command>,
    ) {
        let purpose = Purpose::ClusterProbe { level, round };
        if self
            .send_request(now, addr, id, self.route_hint, body, purpose)
            .is_none()
        {
            self.managers[level as usize - 1].on_probe_failed(
                now,
                round,
                &self.config,
                &mut self.rng,
                more,
            );
        }
    }

    /// Joins `cluster` at `level` (§4.4): the old cluster's table and store
    /// go; members that have answered us seed the new table, and a lookup for
    /// our own id in the new cluster fills it.
    fn switch_cluster(
        &mut self,
        now: Time,
        level: Level,
        cluster: Id,
        created: Time,
        members: &[Contact],
    ) {
        self.set_cluster(level, cluster, created);
        let l = level as usize;
        let observed: Vec<(Contact, Option<Duration>)> = self.managers[l - 1]
            .observed()
            .filter(|o| o.cluster == cluster)
            .map(|o| (o.contact, o.rtt()))
            .collect();
        for (c, rtt) in members.iter().map(|c| (*c, None)).chain(observed) {
            if !self.admits(c.addr, &c.id) {
                // Named by a member, not yet verified: it enters once its
                // identity is (`admission.rs`).
                self.request_identity(now, c);
                continue;
            }
            if self.levels[l].table.insert(c, now, rtt) == Insert::Added {
                // Cores that follow this one hear of the new members too.
                self.push_learned(level, c, rtt.unwrap_or_default());
            }
        }
        self.refresh(now, self.id, level);
        self.stats.cluster_switches += 1;
        if self.cluster_changes.len() >= CLUSTER_CHANGES_MAX {
            self.cluster_changes.pop_front();
        }
        self.cluster_changes.push_back((
            level,
            Cluster {
                id: cluster,
                created,
            },
        ));
    }

    /// Starts a get the node needs itself, here or on the shard that owns the key.
    fn start_internal_get(&mut self, now: Time, key: Key, levels: &[Level], internal: Internal) {
        if self.owns(&key) {
            self.get_for(now, key, Some(levels), Some(internal));
        } else {
            let call = DelegatedCall::Get {
                key,
                levels: levels.to_vec(),
            };
            self.delegate(call, internal);
        }
    }

    /// Starts a put the node needs itself, here or on the shard that owns the key.
    fn start_internal_put(
        &mut self,
        now: Time,
        key: Key,
        value: Value,
        ttl_secs: u32,
        levels: &[Level],
        internal: Internal,
    ) {
        if self.owns(&key) {
            self.put_for(now, key, value, ttl_secs, Some(levels), Some(internal));
        } else {
            let call = DelegatedCall::Put {
                key,
                value,
                ttl_secs,
                levels: levels.to_vec(),
            };
            self.delegate(call, internal);
        }
    }

    /// An operation the node started for itself completed.
    pub(super) fn on_internal_done(&mut self, now: Time, internal: Internal, event: Event) {
        match (internal, event) {
            (
                Internal::Cluster { level, round },
                Event::GetDone {
                    values, closest, ..
                },
            ) => {
                let mut out = Vec::new();
                self.managers[level as usize - 1].on_get_done(
                    now,
                    round,
                    &values,
                    closest,
                    &self.config,
                    &mut self.rng,
                    &mut out,
                );
                self.run_cluster_commands(now, level, out);
            }
            (Internal::Cluster { level, round }, Event::PutDone { .. }) => {
                let mut out = Vec::new();
                self.managers[level as usize - 1].on_put_done(round, &mut out);
                self.run_cluster_commands(now, level, out);
            }
            (Internal::HintGet, Event::GetDone { values, .. }) => {
                // Measure the nodes the hint names: their replies are
                // observed like any other (RTT, clusters).
                let me = self.addr;
                for addr in values
                    .iter()
                    .filter_map(Value::to_addr)
                    .filter(|a| *a != me)
                    .take(self.config.hint_probes_max)
                {
                    self.send_request(
                        now,
                        addr,
                        None,
                        self.route_hint,
                        self.ping_body(),
                        Purpose::HintPing,
                    );
                }
            }
            _ => {}
        }
    }

    /// Stores a pointer to this node under each hint key, at every level
    /// (§4.4), and schedules the renewal.
    pub(super) fn store_hints(&mut self, now: Time) {
        if self.hints.is_empty() {
            return;
        }
        self.hints_stored = true;
        let levels: Vec<Level> = (0..self.levels.len() as Level).rev().collect();
        for key in self.hints.clone() {
            let value = Value::from_addr(self.addr);
            let ttl = self.config.hint_ttl_secs;
            self.start_internal_put(now, key, value, ttl, &levels, Internal::Quiet);
        }
        if !self.hints_renewing {
            self.hints_renewing = true;
            let at = now + Duration::from_secs(u64::from(self.config.hint_ttl_secs / 2));
            self.timers.push(at, Timer::HintRenew);
        }
    }

    /// Looks up every hint key: the nodes found are measured, and the join
    /// decision sees their clusters (§4.4).
    pub(super) fn lookup_hints(&mut self, now: Time) {
        if !self.hot.cluster_manage {
            return;
        }
        self.hints_looked_up = now;
        let levels: Vec<Level> = (0..self.levels.len() as Level).rev().collect();
        for key in self.hints.clone() {
            self.start_internal_get(now, key, &levels, Internal::HintGet);
        }
    }
}
