//! The clustering state machine of one non-global level: what it measured,
//! the task it is on (validating a candidate, splitting, joining), and the
//! [`Command`]s it answers each input with (§4.4, IPTPS §2.5).
//!
//! This file holds the state and the inputs the node feeds it; `tasks.rs`
//! the work each task does and the conclusion it comes to.

use std::collections::HashMap;
use std::net::SocketAddr;

use smallvec::SmallVec;

use crate::config::Config;
use crate::dsht::id::{Id, KeyedBuildHasher};
use crate::dsht::limits::{AVOIDED_CLUSTERS_MAX, PROBE_MEMBERS_MAX};
use crate::dsht::wire::{ClusterInfo, Contact, Value};
use crate::rng::Rng;
use crate::time::{Duration, Time};

mod tasks;

use super::{
    is_acceptable, prefers, Accesses, Candidate, ClusterStats, Command, Current, Level, Observed,
    SwitchReason, View,
};

/// Measuring members of one cluster (or one node) for a decision.
#[derive(Clone, Debug, Default, PartialEq)]
struct Probe {
    round: u32,
    /// The cluster whose members count; `None`: anyone (the cluster centre).
    cluster: Option<Id>,
    outstanding: u32,
    asked: SmallVec<[SocketAddr; 16]>,
    /// The first `queried` of `asked` were asked for members: known to us
    /// before, so not a blind sample. They are tallied apart and count only
    /// when the blind sample alone is too small (a small cluster).
    queried: usize,
    queried_measured: usize,
    queried_within: usize,
    measured: usize,
    within: usize,
    /// The shortest RTT measured (for the cluster centre).
    rtt_best: Option<Duration>,
    members: Vec<Contact>,
    sizes: SmallVec<[u32; 16]>,
    created: SmallVec<[Time; 16]>,
}

impl Probe {
    /// The sample to judge by: the blind one when it holds at least half
    /// the probe budget, else the blind and the queried members together
    /// (a small cluster, most of which the queried members are).
    fn sample(&self, config: &Config) -> (usize, usize) {
        if self.measured >= (config.cluster_validate_probes / 2).max(1) {
            (self.measured, self.within)
        } else {
            (
                self.measured + self.queried_measured,
                self.within + self.queried_within,
            )
        }
    }

    fn view(&self, id: Id, now: Time) -> View {
        View {
            id,
            size: median(&self.sizes).unwrap_or(1),
            created: median(&self.created).unwrap_or(now),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum SplitStage {
    /// Waiting for `get(successor)` in the old cluster.
    GetOwnLevel { round: u32 },
    /// Waiting for `get(successor)` in the larger levels; `centre` is where
    /// the own-level lookup ended.
    GetLower { round: u32, centre: Option<Contact> },
    /// Measuring members of the successor found in the DSHT.
    ProbeMembers(Probe),
    /// Measuring the cluster centre (nobody has joined the successor yet).
    ProbeCentre(Probe),
}

#[derive(Clone, Debug, PartialEq)]
enum Task {
    Idle,
    /// Validating a candidate before joining it, or (`confirm`) our own
    /// cluster before splitting from it.
    Validate {
        probe: Probe,
        confirm: bool,
        /// Our own cluster as it looked when the validation began.
        current: View,
    },
    /// Splitting from `old` toward `successor` (cid^N, or cid^F when `far`).
    Split {
        old: Id,
        successor: Id,
        far: bool,
        stage: SplitStage,
    },
    /// Waiting for `put(cluster → us)` before switching.
    Join {
        round: u32,
        cluster: Id,
        created: Time,
        members: Vec<Contact>,
        reason: SwitchReason,
    },
}

/// The clustering state machine of one non-global level.
#[derive(Clone, Debug)]
pub struct Manager {
    level: Level,
    threshold: Duration,
    local: Id,
    observed: HashMap<Id, Observed, KeyedBuildHasher>,
    /// Accesses to members of our cluster since the last evaluation (the
    /// leave rule); visible to the tests, which set it directly.
    pub(super) accesses: Accesses,
    task: Task,
    task_deadline: Time,
    next_round: u32,
    splits_in_a_row: u32,
    /// Clusters this node split from, left, or failed to validate, and until
    /// when it will not consider them again.
    avoided: SmallVec<[(Id, Time); AVOIDED_CLUSTERS_MAX]>,
    stats: ClusterStats,
}

impl Manager {
    /// A manager for `level` (≥ 1) with RTT threshold `threshold_ms`, for the
    /// node whose id is `local`.
    pub fn new(level: Level, threshold_ms: u32, local: Id) -> Manager {
        debug_assert!(level > 0, "level 0 is global and never changes");
        Manager {
            level,
            threshold: Duration::from_millis(u64::from(threshold_ms)),
            local,
            observed: HashMap::with_hasher(KeyedBuildHasher::with_seeds(0, 0, 0, 0)),
            accesses: Accesses::default(),
            task: Task::Idle,
            task_deadline: Time::ZERO,
            next_round: 1,
            splits_in_a_row: 0,
            avoided: SmallVec::new(),
            stats: ClusterStats::default(),
        }
    }

    /// Hashes the observations (keyed by ids from the network) with
    /// `hasher`, a keyed hasher from the node's secret.
    pub fn with_hasher(mut self, hasher: KeyedBuildHasher) -> Manager {
        let mut observed = HashMap::with_hasher(hasher);
        observed.extend(self.observed.drain());
        self.observed = observed;
        self
    }

    /// Counters.
    pub fn stats(&self) -> ClusterStats {
        self.stats
    }

    /// Nodes observed at this level.
    pub fn observed(&self) -> impl Iterator<Item = &Observed> {
        self.observed.values()
    }

    /// An RPC reply from `from` carried its cluster at this level (`info`;
    /// None if it has fewer levels) and took `rtt`; `current` is our cluster.
    /// `located`: the node was asked because a hint named it as near us.
    /// Called for every reply, so it is a hash lookup and a few compares.
    #[allow(clippy::too_many_arguments)]
    pub fn observe(
        &mut self,
        now: Time,
        from: Contact,
        info: Option<&ClusterInfo>,
        rtt: Duration,
        located: bool,
        current: Id,
        config: &Config,
    ) {
        let Some(info) = info else {
            return;
        };
        if info.id == current && !located {
            self.accesses.total = self.accesses.total.saturating_add(1);
            if rtt > self.threshold {
                self.accesses.missed = self.accesses.missed.saturating_add(1);
            }
        }
        let created = now - Duration::from_secs(u64::from(info.age_secs));
        let room = self.observed.len() < config.cluster_observed_max;
        match self.observed.get_mut(&from.id) {
            Some(o) => {
                o.contact = from;
                o.cluster = info.id;
                o.size = info.size;
                o.created = created;
                o.located &= located;
                o.rtt_recent = Some(o.rtt_recent.map_or(rtt, |r| r.min(rtt)));
            }
            None if room => {
                self.observed.insert(
                    from.id,
                    Observed {
                        contact: from,
                        cluster: info.id,
                        size: info.size,
                        created,
                        located,
                        rtt_recent: Some(rtt),
                        rtt_before: None,
                    },
                );
            }
            None => {}
        }
    }

    /// Every candidate cluster observed other than `exclude`, by id.
    pub fn candidates(&self, exclude: Id) -> Vec<Candidate> {
        let mut rows: Vec<(Id, u32, Time, bool)> = self
            .observed
            .values()
            .filter(|o| o.cluster != exclude)
            .filter_map(|o| Some((o.cluster, o.size, o.created, o.rtt()? <= self.threshold)))
            .collect();
        rows.sort_unstable_by_key(|r| r.0);
        let mut out = Vec::new();
        for group in rows.chunk_by(|a, b| a.0 == b.0) {
            let sizes: SmallVec<[u32; 16]> = group.iter().map(|r| r.1).collect();
            let created: SmallVec<[Time; 16]> = group.iter().map(|r| r.2).collect();
            out.push(Candidate {
                view: View {
                    id: group[0].0,
                    size: median(&sizes).unwrap_or(1),
                    created: median(&created).unwrap_or(Time::ZERO),
                },
                measured: group.len(),
                within: group.iter().filter(|r| r.3).count(),
            });
        }
        out
    }

    /// Our own cluster's size as its members see it: the median of our
    /// estimate and the estimates of the members we measured, so that our
    /// cluster and a candidate are sized the same way (a lone estimate from
    /// one routing table is off by a factor of two or more). Headers carry
    /// each node's own estimate, not this median: a median of medians would
    /// feed on itself (a cluster whose members once reported 1 would stay 1).
    pub fn current_size(&self, current: &View) -> u32 {
        let mut sizes: SmallVec<[u32; 16]> = SmallVec::new();
        sizes.push(current.size);
        sizes.extend(
            self.observed
                .values()
                .filter(|o| o.cluster == current.id)
                .map(|o| o.size),
        );
        median(&sizes).unwrap_or(current.size)
    }

    /// The most preferred acceptable candidate, if it is preferred to `current`.
    pub fn best_candidate(&self, now: Time, current: &View, config: &Config) -> Option<Candidate> {
        let current = &View {
            size: self.current_size(current),
            ..*current
        };
        let mut best: Option<Candidate> = None;
        for c in self.candidates(current.id) {
            let avoided = self
                .avoided
                .iter()
                .any(|(id, until)| *id == c.view.id && now < *until);
            if avoided
                || is_acceptable(c.measured, c.within, c.view.size, config) != Some(true)
                || !prefers(&c.view, current, now, config)
            {
                continue;
            }
            if best
                .as_ref()
                .is_none_or(|b| prefers(&c.view, &b.view, now, config))
            {
                best = Some(c);
            }
        }
        best
    }

    /// The periodic evaluation (§4.4): leave (split) if too many accesses
    /// missed, else validate the most preferred acceptable cluster if it is
    /// not ours. Forgets measurements older than the last period.
    pub fn evaluate(
        &mut self,
        now: Time,
        current: Current,
        config: &Config,
        rng: &mut Rng,
        out: &mut Vec<Command>,
    ) {
        self.stats.evaluations += 1;
        let accesses = std::mem::take(&mut self.accesses);
        if self.task != Task::Idle && now >= self.task_deadline {
            self.task = Task::Idle; // its results were lost
        }
        if self.task == Task::Idle {
            let (measured, within) = self.measured(current.view.id);
            let needed = (2 * config.cluster_samples_min).min(current.view.size as usize);
            let unacceptable = measured >= needed.max(1)
                && within * 100 < config.cluster_join_percent as usize * measured;
            if !current.alone && accesses.should_leave(config) {
                // §4.4: half our accesses miss the threshold: leave, alone.
                self.stats.leaves += 1;
                let until = now + Duration::from_secs(config.cluster_rejoin_holdoff_secs);
                self.avoid(current.view.id, until);
                self.form_singleton(now, rng, out);
            } else if !current.alone && unacceptable {
                // The cluster looks no longer acceptable: measure more of it
                // before splitting (IPTPS §2.5).
                self.validate(now, current.view.id, true, current.view, config, rng, out);
            } else {
                if measured >= needed.max(1) {
                    self.splits_in_a_row = 0; // our cluster works
                }
                let view = View {
                    size: self.current_size(&current.view),
                    ..current.view
                };
                if let Some(best) = self.best_candidate(now, &current.view, config) {
                    self.validate(now, best.view.id, false, view, config, rng, out);
                }
            }
        }
        if !current.alone {
            out.push(Command::Explore);
        }
        for o in self.observed.values_mut() {
            o.rtt_before = o.rtt_recent.take();
        }
        self.observed.retain(|_, o| o.rtt_before.is_some());
    }

    /// A probe's RPC to `from` was answered after `rtt`; `info` is its cluster
    /// at this level and `contacts` the members it named (Members replies).
    #[allow(clippy::too_many_arguments)]
    pub fn on_probe_reply(
        &mut self,
        now: Time,
        round: u32,
        from: Contact,
        info: Option<&ClusterInfo>,
        rtt: Duration,
        contacts: &[Contact],
        config: &Config,
        rng: &mut Rng,
        out: &mut Vec<Command>,
    ) {
        let threshold = self.threshold;
        let local = self.local;
        let Some(probe) = self.probe_mut(round) else {
            return;
        };
        probe.outstanding = probe.outstanding.saturating_sub(1);
        let counts = match probe.cluster {
            Some(cid) => info.is_some_and(|i| i.id == cid),
            None => true,
        };
        let queried = probe.asked[..probe.queried].contains(&from.addr);
        if counts {
            if queried {
                probe.queried_measured += 1;
                probe.queried_within += usize::from(rtt <= threshold);
            } else {
                probe.measured += 1;
                probe.within += usize::from(rtt <= threshold);
                probe.rtt_best = Some(probe.rtt_best.map_or(rtt, |r| r.min(rtt)));
            }
            if let Some(i) = info {
                probe.sizes.push(i.size);
                probe
                    .created
                    .push(now - Duration::from_secs(u64::from(i.age_secs)));
            }
            if probe.members.len() < PROBE_MEMBERS_MAX {
                probe.members.push(from);
            }
            for c in contacts {
                if probe.asked.len() >= config.cluster_validate_probes {
                    break;
                }
                if c.id == local || probe.asked.contains(&c.addr) {
                    continue;
                }
                probe.asked.push(c.addr);
                probe.outstanding += 1;
                out.push(Command::Ping {
                    addr: c.addr,
                    id: Some(c.id),
                    round,
                });
            }
        }
        if probe.outstanding == 0 {
            self.conclude(now, config, rng, out);
        }
    }

    /// A probe's RPC failed (timed out, or could not be sent).
    pub fn on_probe_failed(
        &mut self,
        now: Time,
        round: u32,
        config: &Config,
        rng: &mut Rng,
        out: &mut Vec<Command>,
    ) {
        let Some(probe) = self.probe_mut(round) else {
            return;
        };
        probe.outstanding = probe.outstanding.saturating_sub(1);
        if probe.outstanding == 0 {
            self.conclude(now, config, rng, out);
        }
    }

    /// A `Command::Get` finished: `values` found (none: `closest` is where
    /// the lookup ended, the node closest to the key that answered).
    #[allow(clippy::too_many_arguments)]
    pub fn on_get_done(
        &mut self,
        now: Time,
        round: u32,
        values: &[Value],
        closest: Option<Contact>,
        config: &Config,
        rng: &mut Rng,
        out: &mut Vec<Command>,
    ) {
        let Task::Split {
            old,
            successor,
            far,
            stage,
        } = &self.task
        else {
            return;
        };
        let (old, successor, far) = (*old, *successor, *far);
        let mut addrs: Vec<SocketAddr> = values.iter().filter_map(Value::to_addr).collect();
        rng.shuffle(&mut addrs);
        addrs.dedup();
        addrs.truncate(config.cluster_validate_probes);
        match stage {
            SplitStage::GetOwnLevel { round: r } if *r == round => {
                if !addrs.is_empty() {
                    self.probe_successor(now, old, successor, far, &addrs, config, out);
                } else {
                    // The own-level lookup missed at the cluster centre; try
                    // the larger levels, where earlier splitters also put.
                    let levels: SmallVec<[Level; 4]> = (0..self.level).rev().collect();
                    let round = self.round();
                    out.push(Command::Get {
                        key: successor,
                        levels,
                        round,
                    });
                    self.task = Task::Split {
                        old,
                        successor,
                        far,
                        stage: SplitStage::GetLower {
                            round,
                            centre: closest,
                        },
                    };
                }
            }
            SplitStage::GetLower { round: r, centre } if *r == round => {
                let centre = *centre;
                if !addrs.is_empty() {
                    self.probe_successor(now, old, successor, far, &addrs, config, out);
                } else if far {
                    // Nobody is in cid^F yet: this node founds it.
                    self.found(now, successor, config, out);
                } else {
                    match centre
                        .filter(|c| c.id.distance(&successor) < self.local.distance(&successor))
                    {
                        // One of the first to split: measure the centre itself.
                        Some(c) => {
                            let round = self.round();
                            let probe = Probe {
                                round,
                                cluster: None,
                                outstanding: 1,
                                asked: SmallVec::from_slice(&[c.addr]),
                                ..Probe::default()
                            };
                            out.push(Command::Ping {
                                addr: c.addr,
                                id: Some(c.id),
                                round,
                            });
                            self.task = Task::Split {
                                old,
                                successor,
                                far,
                                stage: SplitStage::ProbeCentre(probe),
                            };
                        }
                        // We are the centre (or know nobody closer): cid^N starts here.
                        None => self.found(now, successor, config, out),
                    }
                }
            }
            _ => {}
        }
    }

    /// A `Command::Put` finished.
    pub fn on_put_done(&mut self, round: u32, out: &mut Vec<Command>) {
        if let Task::Join {
            round: r,
            cluster,
            created,
            members,
            reason,
        } = &self.task
        {
            if *r == round {
                out.push(Command::Switch {
                    cluster: *cluster,
                    created: *created,
                    members: members.clone(),
                    reason: *reason,
                });
                self.task = Task::Idle;
                self.accesses = Accesses::default();
            }
        }
    }

    /// The node changed cluster at this level by other means (assigned, or
    /// told by the core that manages clusters): start counting afresh.
    pub fn on_switched(&mut self) {
        self.accesses = Accesses::default();
        self.task = Task::Idle;
    }

    // ---- Internals --------------------------------------------------------
    fn round(&mut self) -> u32 {
        let r = self.next_round;
        self.next_round = self.next_round.wrapping_add(1).max(1);
        r
    }

    fn probe_mut(&mut self, round: u32) -> Option<&mut Probe> {
        let probe = match &mut self.task {
            Task::Validate { probe, .. } => probe,
            Task::Split {
                stage: SplitStage::ProbeMembers(p) | SplitStage::ProbeCentre(p),
                ..
            } => p,
            _ => return None,
        };
        (probe.round == round).then_some(probe)
    }
}

/// The median of a few values (the lower middle one), resisting a lying minority.
fn median<T: Copy + Ord>(values: &[T]) -> Option<T> {
    if values.is_empty() {
        return None;
    }
    let mut v: SmallVec<[T; 16]> = SmallVec::from_slice(values);
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2])
}
