//! The manager's tasks (§4.4, IPTPS §2.5): validating a candidate cluster,
//! the split's lookups and probes of the successors, joining, and the
//! conclusion each task comes to when its measurements are in.

use std::net::SocketAddr;

use smallvec::SmallVec;

use crate::config::Config;
use crate::dsht::cluster::{
    judge, prefers, split_ids, Accesses, Command, Level, SwitchReason, Verdict, View,
};
use crate::dsht::id::Id;
use crate::dsht::limits::{AVOIDED_CLUSTERS_MAX, MEMBER_QUERIES_MAX};
use crate::dsht::wire::Contact;
use crate::rng::Rng;
use crate::time::{Duration, Time};

use super::{Manager, Probe, SplitStage, Task};

impl Manager {
    fn start_task(&mut self, now: Time, task: Task, config: &Config) {
        self.task = task;
        // Every step ends within an operation timeout; a task whose results
        // are lost (a dropped delegated call) is abandoned at this deadline.
        self.task_deadline = now + Duration::from_millis(config.operation_timeout_ms * 4);
    }

    /// Measures a blind sample of `cluster` (§4.4: "validates the collected
    /// data by contacting several nodes within the candidate cluster by
    /// routing to selected keys"): a few known members are asked for the
    /// members nearest random keys, and those are pinged. The decision rests
    /// on this sample alone: the members ordinary traffic measured are not a
    /// blind sample (a node hears most from its old cluster-mates that moved,
    /// which is how it learnt of the candidate). `confirm`: the cluster is our
    /// own and the node is about to split from it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn validate(
        &mut self,
        now: Time,
        cluster: Id,
        confirm: bool,
        current: View,
        config: &Config,
        rng: &mut Rng,
        out: &mut Vec<Command>,
    ) {
        let mut members: Vec<Contact> = self
            .observed
            .values()
            .filter(|o| o.cluster == cluster)
            .map(|o| o.contact)
            .collect();
        members.sort_unstable_by_key(|c| c.id);
        rng.shuffle(&mut members);
        members.truncate(MEMBER_QUERIES_MAX);
        let round = self.round();
        let mut probe = Probe {
            round,
            cluster: Some(cluster),
            ..Probe::default()
        };
        for c in &members {
            probe.asked.push(c.addr);
            probe.outstanding += 1;
            let mut target = Id::ZERO;
            rng.fill(&mut target.0);
            out.push(Command::Members {
                contact: *c,
                target,
                round,
            });
        }
        probe.queried = probe.asked.len();
        if probe.outstanding == 0 {
            return;
        }
        self.stats.validations += 1;
        self.start_task(
            now,
            Task::Validate {
                probe,
                confirm,
                current,
            },
            config,
        );
    }

    fn split_get(
        &mut self,
        now: Time,
        old: Id,
        successor: Id,
        far: bool,
        config: &Config,
        out: &mut Vec<Command>,
    ) {
        let round = self.round();
        out.push(Command::Get {
            key: successor,
            levels: SmallVec::from_slice(&[self.level]),
            round,
        });
        self.start_task(
            now,
            Task::Split {
                old,
                successor,
                far,
                stage: SplitStage::GetOwnLevel { round },
            },
            config,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn probe_successor(
        &mut self,
        now: Time,
        old: Id,
        successor: Id,
        far: bool,
        addrs: &[SocketAddr],
        config: &Config,
        out: &mut Vec<Command>,
    ) {
        let round = self.round();
        let mut probe = Probe {
            round,
            cluster: Some(successor),
            ..Probe::default()
        };
        for &addr in addrs {
            probe.asked.push(addr);
            probe.outstanding += 1;
            out.push(Command::Ping {
                addr,
                id: None,
                round,
            });
        }
        self.start_task(
            now,
            Task::Split {
                old,
                successor,
                far,
                stage: SplitStage::ProbeMembers(probe),
            },
            config,
        );
    }

    /// Founds `cluster`, one half of a split nobody is in yet: joins it
    /// alone, created now.
    pub(super) fn found(
        &mut self,
        now: Time,
        cluster: Id,
        config: &Config,
        out: &mut Vec<Command>,
    ) {
        self.join(
            now,
            cluster,
            now,
            Vec::new(),
            SwitchReason::Split,
            config,
            out,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn join(
        &mut self,
        now: Time,
        cluster: Id,
        created: Time,
        members: Vec<Contact>,
        reason: SwitchReason,
        config: &Config,
        out: &mut Vec<Command>,
    ) {
        let round = self.round();
        let levels: SmallVec<[Level; 4]> = (0..=self.level).rev().collect();
        out.push(Command::Put {
            key: cluster,
            levels,
            round,
        });
        self.start_task(
            now,
            Task::Join {
                round,
                cluster,
                created,
                members,
                reason,
            },
            config,
        );
    }

    /// Members of `cluster` measured in the last one or two periods, and how
    /// many of them were within the threshold.
    pub(super) fn measured(&self, cluster: Id) -> (usize, usize) {
        let mut measured = 0;
        let mut within = 0;
        for o in self
            .observed
            .values()
            .filter(|o| o.cluster == cluster && !o.located)
        {
            if let Some(rtt) = o.rtt() {
                measured += 1;
                within += usize::from(rtt <= self.threshold);
            }
        }
        (measured, within)
    }

    /// Keeps `cluster` out of the candidates until `until`.
    pub(super) fn avoid(&mut self, cluster: Id, until: Time) {
        self.avoided.retain(|(id, _)| *id != cluster);
        if self.avoided.len() == AVOIDED_CLUSTERS_MAX {
            self.avoided.remove(0);
        }
        self.avoided.push((cluster, until));
    }

    /// Leaves for a new singleton cluster with a random id (§4.4).
    pub(super) fn form_singleton(&mut self, now: Time, rng: &mut Rng, out: &mut Vec<Command>) {
        self.stats.singletons += 1;
        self.task = Task::Idle;
        self.accesses = Accesses::default();
        let mut cid = Id::ZERO;
        rng.fill(&mut cid.0);
        out.push(Command::Switch {
            cluster: cid,
            created: now,
            members: Vec::new(),
            reason: SwitchReason::Singleton,
        });
    }

    /// Every RPC of the current probe is answered or failed: decide.
    pub(super) fn conclude(
        &mut self,
        now: Time,
        config: &Config,
        rng: &mut Rng,
        out: &mut Vec<Command>,
    ) {
        let task = std::mem::replace(&mut self.task, Task::Idle);
        match task {
            Task::Validate {
                probe,
                confirm: true,
                ..
            } => self.conclude_confirmation(now, probe, config, out),
            Task::Validate {
                probe,
                confirm: false,
                current,
            } => self.conclude_validation(now, probe, current, config, out),
            Task::Split {
                old,
                successor,
                far,
                stage: SplitStage::ProbeCentre(probe),
            } => self.conclude_centre_probe(now, (old, successor, far), probe, config, out),
            Task::Split {
                old,
                successor,
                far,
                stage: SplitStage::ProbeMembers(probe),
            } => {
                let split = (old, successor, far);
                self.conclude_members_probe(now, split, probe, config, rng, out)
            }
            other => self.task = other,
        }
    }

    /// Our own cluster's members measured (`confirm`): split from it if it
    /// is no longer acceptable (IPTPS §2.5).
    fn conclude_confirmation(
        &mut self,
        now: Time,
        probe: Probe,
        config: &Config,
        out: &mut Vec<Command>,
    ) {
        let Some(cid) = probe.cluster else { return };
        let size = probe.view(cid, now).size;
        let (measured, within) = probe.sample(config);
        if judge(measured, within, size, config) == Verdict::Unacceptable {
            // IPTPS §2.5: the cluster is no longer acceptable: split.
            self.stats.splits += 1;
            self.avoid(
                cid,
                now + Duration::from_secs(config.cluster_rejoin_holdoff_secs),
            );
            let (near, _) = split_ids(&cid);
            self.split_get(now, cid, near, false, config, out);
        }
    }

    /// A candidate's members measured: switch to it if it is still preferred
    /// and acceptable (§4.4), else hold off testing it again.
    fn conclude_validation(
        &mut self,
        now: Time,
        probe: Probe,
        current: View,
        config: &Config,
        out: &mut Vec<Command>,
    ) {
        let Some(cid) = probe.cluster else { return };
        let view = probe.view(cid, now);
        // The probe sized the candidate from many members' reports:
        // the preference must still hold with that figure.
        let preferred = prefers(&view, &current, now, config);
        let (measured, within) = probe.sample(config);
        if preferred && judge(measured, within, view.size, config) == Verdict::Acceptable {
            self.stats.merges += 1;
            self.splits_in_a_row = 0;
            self.accesses = Accesses::default();
            out.push(Command::Switch {
                cluster: cid,
                created: view.created,
                members: probe.members,
                reason: SwitchReason::Merge,
            });
        } else {
            // Not shown acceptable: do not test it again at once, or
            // sooner or later a lucky sample would let us in.
            let until = now + Duration::from_secs(config.cluster_retry_holdoff_secs);
            self.avoid(cid, until);
        }
    }

    /// The cluster centre measured (nobody joined the successor yet): join
    /// the successor if the centre is near enough, else try cid^F. `split`
    /// is the split's (old, successor, far).
    fn conclude_centre_probe(
        &mut self,
        now: Time,
        split: (Id, Id, bool),
        probe: Probe,
        config: &Config,
        out: &mut Vec<Command>,
    ) {
        let (old, successor, far) = split;
        // Within half the threshold of the centre, so that the
        // nodes that join cid^N this way are within the threshold of
        // each other (triangle inequality): a centre in the middle
        // of a chain otherwise gathers both its ends again.
        let radius = Duration::from_micros(self.threshold.as_micros() / 2);
        if probe.rtt_best.is_some_and(|r| r <= radius) {
            self.found(now, successor, config, out);
        } else {
            let (_, far_id) = split_ids(&old);
            debug_assert!(!far);
            self.split_get(now, old, far_id, true, config, out);
        }
    }

    /// The successor's members measured: join it if acceptable; else try
    /// cid^F, found cid^F afresh, join it anyway, or give up on splitting.
    /// `split` is the split's (old, successor, far).
    fn conclude_members_probe(
        &mut self,
        now: Time,
        split: (Id, Id, bool),
        probe: Probe,
        config: &Config,
        rng: &mut Rng,
        out: &mut Vec<Command>,
    ) {
        let (old, successor, far) = split;
        let view = probe.view(successor, now);
        let acceptable = probe.measured > 0
            && probe.within * 100 >= config.cluster_join_percent as usize * probe.measured;
        if acceptable {
            self.splits_in_a_row = 0;
            self.join(
                now,
                successor,
                view.created,
                probe.members,
                SwitchReason::Split,
                config,
                out,
            );
        } else if !far {
            let (_, far_id) = split_ids(&old);
            self.split_get(now, old, far_id, true, config, out);
        } else if probe.measured == 0 {
            // Nobody answers for cid^F any more: found it afresh.
            self.found(now, successor, config, out);
        } else {
            self.splits_in_a_row += 1;
            if self.splits_in_a_row >= config.cluster_splits_max {
                // Give up on splitting: a singleton with a random id.
                self.splits_in_a_row = 0;
                self.form_singleton(now, rng, out);
            } else {
                // cid^F may be no better; join it anyway, it may split again.
                self.join(
                    now,
                    successor,
                    view.created,
                    probe.members,
                    SwitchReason::Split,
                    config,
                    out,
                );
            }
        }
    }
}
