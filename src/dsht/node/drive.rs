//! Driving an operation to its end: each step of a get's walk, a put's
//! forward phase and its reverse phase (§4.2), and finishing each level and
//! the operation with its event.

use std::cmp::Reverse;

use crate::dsht::id::Key;
use crate::dsht::lookup::{ProbeReply, Step};
use crate::dsht::store::StoreOutcome;
use crate::dsht::wire::{Body, Contact, Values, TOKEN_BYTES};
use crate::time::{Duration, Time};

use super::ops::{Op, OpKind, Phase, StackEntry};
use super::send::Purpose;
use super::timers::Timer;
use super::{route_of, Event, Level, Node, OpId, PutLevel, StoredAt};

impl Node {
    /// Advances operation `op` as far as it can go without input.
    pub(super) fn drive(&mut self, op: u64, now: Time) {
        let Some(mut o) = self.ops.remove(&op) else {
            return;
        };
        if now >= o.deadline {
            self.abandon(op, o, now);
            return;
        }
        loop {
            match &mut o.phase {
                Phase::Walk(lookup) => match lookup.step(now) {
                    Step::Send { contact, target } => {
                        let key = lookup.key();
                        let body = match o.kind {
                            OpKind::Get => Body::Get {
                                level: o.level,
                                key,
                                target,
                            },
                            _ => Body::FindNode {
                                level: o.level,
                                target,
                            },
                        };
                        // Keyed walks route by key (their replies return to the
                        // core that owns the key); refreshes by our route hint.
                        let route = if o.kind == OpKind::Get {
                            route_of(&key)
                        } else {
                            self.route_hint
                        };
                        self.send_lookup_rpc(now, op, lookup, contact, target, route, body);
                    }
                    Step::Wait(at) => {
                        if let Some(at) = at {
                            self.timers.push(at, Timer::Op(op));
                        }
                        break;
                    }
                    Step::Done { closest } => {
                        if o.kind == OpKind::Refresh || o.levels_left.is_empty() {
                            match o.kind {
                                OpKind::Get => self.finish_get_miss(op, &o, now, closest),
                                OpKind::Refresh if o.key == self.id => {
                                    self.refresh_far_buckets(now, o.level)
                                }
                                _ => {}
                            }
                            return;
                        }
                        // §4.3: continue at the next level from where this one stopped.
                        o.level = o.levels_left.remove(0);
                        let start = closest.map_or(self.id, |c| c.id);
                        o.phase = Phase::Walk(self.new_lookup(o.key, o.level, start));
                    }
                },
                Phase::Forward { lookup, stack } => {
                    // Stop at the first node that is full and loaded.
                    let stop = lookup.met_loaded();
                    let step = if stop {
                        Step::Done { closest: None }
                    } else {
                        lookup.step(now)
                    };
                    match step {
                        Step::Send { contact, .. }
                            if o.kind == OpKind::Put
                                && self.recall.is_full_and_loaded(
                                    &o.key,
                                    o.level,
                                    &contact.id,
                                    o.ttl_secs,
                                    now,
                                ) =>
                        {
                            // It answered full and loaded within the minute and
                            // is still full for this value: the forward phase
                            // stops there without probing it again (§4.2).
                            lookup.on_known(
                                &contact.id,
                                ProbeReply {
                                    full_and_loaded: true,
                                    loaded: true,
                                    full: true,
                                    token: [0; TOKEN_BYTES],
                                },
                            );
                        }
                        Step::Send { contact, target } => {
                            let key = lookup.key();
                            let body = Body::PutProbe {
                                level: o.level,
                                key,
                                target,
                            };
                            self.send_lookup_rpc(
                                now,
                                op,
                                lookup,
                                contact,
                                target,
                                route_of(&key),
                                body,
                            );
                        }
                        Step::Wait(at) => {
                            if let Some(at) = at {
                                self.timers.push(at, Timer::Op(op));
                            }
                            break;
                        }
                        Step::Done { .. } => {
                            if o.kind == OpKind::Claim {
                                // A test-and-set goes to the closest node (the one
                                // every claimer agrees on), the local node included;
                                // farther ones only if it does not answer.
                                let key = lookup.key();
                                let mut entries: Vec<StackEntry> = lookup
                                    .answered_by_distance()
                                    .into_iter()
                                    .filter_map(|c| {
                                        Some(StackEntry {
                                            at: StoredAt::Remote(c.contact),
                                            token: c.probe?.token,
                                        })
                                    })
                                    .collect();
                                entries.push(StackEntry {
                                    at: StoredAt::Local,
                                    token: [0; TOKEN_BYTES],
                                });
                                let local = self.id;
                                entries.sort_by_key(|e| {
                                    Reverse(match e.at {
                                        StoredAt::Remote(c) => c.id.distance(&key),
                                        StoredAt::Local => local.distance(&key),
                                    })
                                });
                                o.phase = Phase::Reverse {
                                    stack: entries,
                                    stopped_at_loaded: false,
                                    waiting: None,
                                };
                                continue;
                            }
                            // The stack: every answered node that was not full
                            // (§4.2: a full node refuses the store, so storing
                            // there costs an RPC for nothing), ordered by
                            // distance to the key, and the local node
                            // (farthest, first pushed) when eligible.
                            let mut s = std::mem::take(stack);
                            let mut remote: Vec<StackEntry> = lookup
                                .answered_by_distance()
                                .into_iter()
                                .filter_map(|c| {
                                    let p = c.probe?;
                                    (!p.full_and_loaded && !p.full).then_some(StackEntry {
                                        at: StoredAt::Remote(c.contact),
                                        token: p.token,
                                    })
                                })
                                .collect();
                            if stop {
                                // Only the loaded node where the walk stopped and
                                // nodes farther from the key are candidates (a full
                                // one among them is out of the stack already).
                                let key = lookup.key();
                                if let Some(limit) = lookup
                                    .answered_by_distance()
                                    .iter()
                                    .filter(|c| c.probe.is_some_and(|p| p.loaded))
                                    .map(|c| c.contact.id.distance(&key))
                                    .max()
                                {
                                    remote.retain(|e| match e.at {
                                        StoredAt::Remote(c) => c.id.distance(&key) >= limit,
                                        StoredAt::Local => true,
                                    });
                                }
                            }
                            // Pop order: closest first, so push farthest first.
                            remote.reverse();
                            s.extend(remote);
                            o.phase = Phase::Reverse {
                                stack: s,
                                stopped_at_loaded: stop,
                                waiting: None,
                            };
                        }
                    }
                }
                Phase::Reverse { stack, waiting, .. } => {
                    if waiting.is_some() {
                        break;
                    }
                    let Some(top) = stack.pop() else {
                        if o.kind == OpKind::Claim {
                            self.finish_claim(op, o, now, false, Values::new());
                            return;
                        }
                        self.ops.insert(op, o);
                        self.finish_put_level(op, now, None);
                        return;
                    };
                    match top.at {
                        StoredAt::Local if o.kind == OpKind::Claim => {
                            let store = &mut self.levels[o.level as usize].store;
                            let (claimed, values) = if store.has_values(&o.key, now) {
                                let v =
                                    store.get(&o.key, now, self.hot.get_values_max, &mut self.rng);
                                (false, v)
                            } else {
                                let ttl = Duration::from_secs(u64::from(o.ttl_secs));
                                let outcome = store.store(&o.key, o.value.clone(), ttl, now);
                                (outcome.is_stored(), Values::new())
                            };
                            self.finish_claim(op, o, now, claimed, values);
                            return;
                        }
                        StoredAt::Local => {
                            let ttl = Duration::from_secs(u64::from(o.ttl_secs));
                            let outcome = self.levels[o.level as usize].store.store(
                                &o.key,
                                o.value.clone(),
                                ttl,
                                now,
                            );
                            if outcome.is_stored() {
                                self.ops.insert(op, o);
                                self.finish_put_level(op, now, Some(StoredAt::Local));
                                return;
                            }
                            debug_assert!(matches!(
                                outcome,
                                StoreOutcome::Full | StoreOutcome::TooManyKeys
                            ));
                        }
                        StoredAt::Remote(c) => {
                            let body = Body::Store {
                                level: o.level,
                                key: o.key,
                                ttl_secs: o.ttl_secs,
                                if_absent: o.kind == OpKind::Claim,
                                token: top.token,
                                value: o.value.clone(),
                            };
                            *waiting = self.send_request(
                                now,
                                c.addr,
                                Some(c.id),
                                route_of(&o.key),
                                body,
                                Purpose::Op(op),
                            );
                        }
                    }
                }
            }
        }
        self.ops.insert(op, o);
    }

    /// A put finished one level: record it, then go on to the next level from
    /// where the value was inserted, unless the key was loaded (§4.3).
    pub(super) fn finish_put_level(&mut self, op: u64, now: Time, stored_at: Option<StoredAt>) {
        let Some(mut o) = self.ops.remove(&op) else {
            return;
        };
        let stopped_at_loaded = matches!(
            o.phase,
            Phase::Reverse {
                stopped_at_loaded: true,
                ..
            }
        );
        o.put_levels.push(PutLevel {
            level: o.level,
            stored_at,
            stopped_at_loaded,
        });
        if stopped_at_loaded || o.levels_left.is_empty() {
            self.push_event(
                now,
                Event::PutDone {
                    op: OpId(op),
                    key: o.key,
                    levels: o.put_levels,
                    elapsed: now.saturating_since(o.started),
                },
            );
            return;
        }
        o.level = o.levels_left.remove(0);
        let start = match stored_at {
            Some(StoredAt::Remote(c)) => c.id,
            _ => self.id,
        };
        o.phase = self.put_phase(o.key, o.level, o.ttl_secs, now, start);
        self.ops.insert(op, o);
        self.drive(op, now);
    }

    /// `o` is out of `ops` already, as in [`Node::finish_get`].
    pub(super) fn finish_claim(
        &mut self,
        op: u64,
        o: Op,
        now: Time,
        claimed: bool,
        values: Values,
    ) {
        self.push_event(
            now,
            Event::ClaimDone {
                op: OpId(op),
                key: o.key,
                claimed,
                values: values.into_vec(),
                elapsed: now.saturating_since(o.started),
            },
        );
    }

    /// The operation ran out of time: report what it has.
    fn abandon(&mut self, op: u64, mut o: Op, now: Time) {
        match o.kind {
            OpKind::Get => self.finish_get_miss(op, &o, now, None),
            OpKind::Put => {
                o.put_levels.push(PutLevel {
                    level: o.level,
                    stored_at: None,
                    stopped_at_loaded: false,
                });
                self.push_event(
                    now,
                    Event::PutDone {
                        op: OpId(op),
                        key: o.key,
                        levels: o.put_levels,
                        elapsed: now.saturating_since(o.started),
                    },
                );
            }
            OpKind::Claim => self.finish_claim(op, o, now, false, Values::new()),
            OpKind::Refresh => {}
        }
    }

    /// A get found nothing at any level it searched.
    fn finish_get_miss(&mut self, op: u64, o: &Op, now: Time, closest: Option<Contact>) {
        self.finish_get(
            op,
            o.key,
            o.started,
            now,
            Values::new(),
            None,
            false,
            closest,
            o.hops,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish_get(
        &mut self,
        op: u64,
        key: Key,
        started: Time,
        now: Time,
        values: Values,
        level: Option<Level>,
        local: bool,
        closest: Option<Contact>,
        hops: u32,
    ) {
        // Every caller has taken the operation out of `ops` (or never put it
        // there): replies still outstanding find no operation and only
        // refresh routing tables (operation ids are never reused).
        debug_assert!(!self.ops.contains_key(&op));
        self.push_event(
            now,
            Event::GetDone {
                op: OpId(op),
                key,
                values: values.into_vec(),
                level,
                local,
                closest,
                hops,
                elapsed: now.saturating_since(started),
            },
        );
    }

    /// Hands a completed operation to the application, or to the node when
    /// the node started it.
    pub(super) fn push_event(&mut self, now: Time, e: Event) {
        if !self.internal.is_empty() {
            if let Some(internal) = self.internal.remove(&e.op().0) {
                self.on_internal_done(now, internal, e);
                return;
            }
        }
        if self.events.len() >= self.hot.event_queue_max {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }
}
