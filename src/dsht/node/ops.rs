//! Operations: the put, claim, get and refresh API, and starting an
//! operation's phases at each level (§4.2–4.3). Driving a started operation
//! is in `drive.rs`.

use smallvec::SmallVec;

use crate::dsht::id::{Id, Key};
use crate::dsht::limits::CLAIM_BREADTH_NODES;
use crate::dsht::lookup::Lookup;
use crate::dsht::wire::{Body, Contact, Token, Value, Values, TOKEN_BYTES};
use crate::time::{Duration, Time};

use super::clusters::Internal;
use super::send::Purpose;
use super::timers::Timer;
use super::{Event, Level, Node, OpId, PutLevel, StoredAt};

#[derive(Clone, Copy, Debug)]
pub(super) struct StackEntry {
    pub(super) at: StoredAt,
    pub(super) token: Token,
    /// A claim's first try at the closest node holding values, ahead of the
    /// closest node: one holding only the claimer's own value refreshes it
    /// and the claim goes on to the closest node.
    pub(super) holder: bool,
}

pub(super) enum Phase {
    /// A get, or a routing refresh, walking one level.
    Walk(Lookup),
    /// A put's forward phase at one level; `stack` holds every node that was
    /// not both full and loaded (the local node first when eligible).
    Forward {
        lookup: Lookup,
        stack: Vec<StackEntry>,
    },
    /// A put's reverse phase: try the stack from the node closest to the key
    /// outward until a store succeeds.
    Reverse {
        stack: Vec<StackEntry>,
        stopped_at_loaded: bool,
        waiting: Option<u32>,
        /// The store `waiting` for went to a claim's holder entry.
        at_holder: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    Get,
    Put,
    Claim,
    /// A store at the key's closest node, whatever it holds ([`Node::pin`]).
    Pin,
    Refresh,
    /// A joining node's refresh of one far bucket, or a refill's after the
    /// network grew (`Node::refill_if_grown`): its answers take the
    /// bucket ([`Node::adopt_join_refresh`]).
    JoinRefresh,
}

impl OpKind {
    /// Whether the operation walks to the key's closest node, ignoring
    /// sloppiness, and stores there (a claim or a pin).
    pub(super) fn goes_to_closest(self) -> bool {
        matches!(self, OpKind::Claim | OpKind::Pin)
    }
}

pub(super) struct Op {
    pub(super) kind: OpKind,
    pub(super) key: Key,
    pub(super) started: Time,
    pub(super) deadline: Time,
    /// Levels still to do after the current one, next first.
    pub(super) levels_left: SmallVec<[Level; 4]>,
    pub(super) level: Level,
    pub(super) phase: Phase,
    pub(super) hops: u32,
    pub(super) value: Value,
    pub(super) ttl_secs: u32,
    pub(super) put_levels: Vec<PutLevel>,
}

impl Node {
    /// `put(key, val, ttl, [levels])` (§2.3, §4.2–4.3): inserts at the highest
    /// level first, then at each lower level from where the last one stored,
    /// unless the key is loaded. `levels` defaults to all.
    pub fn put(
        &mut self,
        now: Time,
        key: Key,
        value: Value,
        ttl_secs: u32,
        levels: Option<&[Level]>,
    ) -> OpId {
        self.put_for(now, key, value, ttl_secs, levels, None)
    }

    pub(super) fn put_for(
        &mut self,
        now: Time,
        key: Key,
        value: Value,
        ttl_secs: u32,
        levels: Option<&[Level]>,
        internal: Option<Internal>,
    ) -> OpId {
        let ttl_secs = ttl_secs.min(self.hot.ttl_max_secs).max(1);
        let mut order = self.level_order(levels);
        let op = self.alloc_op(internal);
        if order.is_empty()
            || value.0.len() > self.hot.value_bytes_max
            || self.ops.len() >= self.hot.operations_max
        {
            self.stats.ops_refused += 1;
            self.push_event(
                now,
                Event::PutDone {
                    op: OpId(op),
                    key,
                    levels: Vec::new(),
                    elapsed: Duration::ZERO,
                },
            );
            return OpId(op);
        }
        let level = order.remove(0);
        let phase = self.put_phase(key, level, ttl_secs, now, self.id);
        if matches!(
            phase,
            Phase::Reverse {
                stopped_at_loaded: true,
                ..
            }
        ) {
            // Full and loaded here at the first level tried: the put ends now,
            // with no RPC, no operation state and no timer (the common case
            // for a hot key, so it must be cheap).
            self.push_event(
                now,
                Event::PutDone {
                    op: OpId(op),
                    key,
                    levels: vec![PutLevel {
                        level,
                        stored_at: None,
                        stopped_at_loaded: true,
                    }],
                    elapsed: Duration::ZERO,
                },
            );
            return OpId(op);
        }
        self.start_op(
            now,
            op,
            OpKind::Put,
            key,
            level,
            order,
            phase,
            value,
            ttl_secs,
        );
        OpId(op)
    }

    /// A test-and-set put at the global level (NSDI 2004 §8, "Multi-cast
    /// Tree Formation"): walks to the key's closest node, ignoring
    /// sloppiness, and stores `value` there only if it holds no value from
    /// another source yet; otherwise returns the values it holds. Proxies
    /// use it before going to the origin, so that a flash crowd's
    /// simultaneous first requests make one origin fetch, not several.
    ///
    /// The walk asks the [`CLAIM_BREADTH_NODES`] closest nodes it finds, not
    /// only the closest (issue 24 item 2): a pointer put sloppily (stopped
    /// at a loaded node short of the closest), or left behind when a node
    /// closer to the key joined, sits among them, and the claim loses to it
    /// (the test-and-set goes to the closest node holding values, which
    /// answers with them). A claim by the source of the values there
    /// refreshes its own: that is how a proxy keeps its pointer at the
    /// closest node ([`Node::claim`] again, a *pin*).
    ///
    /// [`CLAIM_BREADTH_NODES`]: crate::dsht::limits::CLAIM_BREADTH_NODES
    pub fn claim(&mut self, now: Time, key: Key, value: Value, ttl_secs: u32) -> OpId {
        self.closest_op(now, OpKind::Claim, key, value, ttl_secs)
    }

    /// Stores `value` under `key` at the key's closest node at the global
    /// level (the node claims test), whatever values it holds, or at the
    /// next closest if it is full: the proxy that fetched an object from
    /// the origin keeps its pointer where every later claim looks (issue 24
    /// item 2). Sloppy puts may stop short of that node (a loaded node on
    /// the way, §4.2, or a loaded higher level, §4.3), and a claim's value
    /// lasts only the fetching pointer's TTL. Reported as a
    /// [`Event::ClaimDone`] whose `claimed` says whether it stored.
    pub fn pin(&mut self, now: Time, key: Key, value: Value, ttl_secs: u32) -> OpId {
        self.closest_op(now, OpKind::Pin, key, value, ttl_secs)
    }

    /// A claim or a pin: a walk to the key's closest node at level 0.
    fn closest_op(
        &mut self,
        now: Time,
        kind: OpKind,
        key: Key,
        value: Value,
        ttl_secs: u32,
    ) -> OpId {
        let ttl_secs = ttl_secs.min(self.hot.ttl_max_secs).max(1);
        let op = self.alloc_op(None);
        if value.0.len() > self.hot.value_bytes_max || self.ops.len() >= self.hot.operations_max {
            self.stats.ops_refused += 1;
            self.push_event(
                now,
                Event::ClaimDone {
                    op: OpId(op),
                    key,
                    claimed: false,
                    values: Vec::new(),
                    elapsed: Duration::ZERO,
                },
            );
            return OpId(op);
        }
        let lookup = self.new_lookup(key, 0, self.id);
        let lookup = if kind == OpKind::Claim {
            lookup.with_breadth(CLAIM_BREADTH_NODES)
        } else {
            lookup
        };
        self.start_op(
            now,
            op,
            kind,
            key,
            0,
            SmallVec::new(),
            Phase::Forward {
                lookup,
                stack: Vec::new(),
            },
            value,
            ttl_secs,
        );
        OpId(op)
    }

    /// `get(key, [levels])` (§2.3, §4.3): searches the highest level first,
    /// each lower level continuing from where the last one stopped in id
    /// space, and stops at the first node storing the key.
    pub fn get(&mut self, now: Time, key: Key, levels: Option<&[Level]>) -> OpId {
        self.get_for(now, key, levels, None)
    }

    pub(super) fn get_for(
        &mut self,
        now: Time,
        key: Key,
        levels: Option<&[Level]>,
        internal: Option<Internal>,
    ) -> OpId {
        let mut order = self.level_order(levels);
        let op = self.alloc_op(internal);
        if order.is_empty() || self.ops.len() >= self.hot.operations_max {
            self.stats.ops_refused += 1;
            self.finish_get(op, key, now, now, Values::new(), None, false, None, 0);
            return OpId(op);
        }
        // The local store at every level answers first, without an RPC.
        for &level in &order {
            let values = self.levels[level as usize].store.get(
                &key,
                now,
                self.hot.get_values_max,
                &mut self.rng,
            );
            if !values.is_empty() {
                self.finish_get(op, key, now, now, values, Some(level), true, None, 0);
                return OpId(op);
            }
        }
        let level = order.remove(0);
        let lookup = self.new_lookup(key, level, self.id);
        self.start_op(
            now,
            op,
            OpKind::Get,
            key,
            level,
            order,
            Phase::Walk(lookup),
            Value::default(),
            0,
        );
        OpId(op)
    }

    /// Starts a lookup for `target` at `level` that only refreshes routing
    /// tables (no event).
    pub fn refresh(&mut self, now: Time, target: Id, level: Level) {
        self.refresh_as(now, target, level, OpKind::Refresh);
    }

    /// A refresh lookup of `kind` ([`OpKind::Refresh`] or
    /// [`OpKind::JoinRefresh`]).
    pub(super) fn refresh_as(&mut self, now: Time, target: Id, level: Level, kind: OpKind) {
        if level as usize >= self.levels.len() || self.ops.len() >= self.hot.operations_max {
            return;
        }
        let op = self.alloc_op(None);
        let lookup = self
            .new_lookup(target, level, self.id)
            .with_breadth(self.config.bucket_size);
        self.start_op(
            now,
            op,
            kind,
            target,
            level,
            SmallVec::new(),
            Phase::Walk(lookup),
            Value::default(),
            0,
        );
    }

    /// A fresh operation id (the next in sequence whose slot in `ops` is
    /// free, `optable`); an internal operation is registered before it can
    /// complete (a get may complete at once from the local store).
    fn alloc_op(&mut self, internal: Option<Internal>) -> u64 {
        let op = self.ops.free_from(self.next_op);
        self.next_op = op + 1;
        if let Some(i) = internal {
            self.internal.insert(op, i);
        }
        op
    }

    fn level_order(&self, levels: Option<&[Level]>) -> SmallVec<[Level; 4]> {
        let n = self.levels.len() as Level;
        let mut v: SmallVec<[Level; 4]> = match levels {
            Some(ls) => ls.iter().copied().filter(|&l| l < n).collect(),
            None => (0..n).collect(),
        };
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.dedup();
        v
    }

    pub(super) fn new_lookup(&self, key: Key, level: Level, start: Id) -> Lookup {
        let l = &self.levels[level as usize];
        // Seed with the contacts closest to where the walk will go first.
        let first = crate::dsht::id::next_target(
            &key,
            &start,
            key.distance(&start).leading_zeros() / self.hot.b,
            self.hot.b,
        )
        .map_or(key, |(t, _)| t);
        let seeds = l.table.closest(&first, self.hot.reply_contacts_max);
        Lookup::new(
            key,
            start,
            self.hot.b,
            self.hot.alpha,
            self.hot.rpc_stall,
            self.hot.lookup_contacts_max,
            seeds,
        )
    }

    /// The first phase of a put at `level`, walking from `start`. The local
    /// node is the first node of the forward phase (§4.2: "including itself").
    pub(super) fn put_phase(
        &mut self,
        key: Key,
        level: Level,
        ttl_secs: u32,
        now: Time,
        start: Id,
    ) -> Phase {
        let state = self.levels[level as usize].store.probe(&key, now);
        if state.loaded && state.is_full(self.hot.values_per_key_max, ttl_secs) {
            // Full and loaded right here: the forward phase ends before it starts.
            return Phase::Reverse {
                stack: Vec::new(),
                stopped_at_loaded: true,
                waiting: None,
                at_holder: false,
            };
        }
        let stack = vec![StackEntry {
            at: StoredAt::Local,
            token: [0; TOKEN_BYTES],
            holder: false,
        }];
        Phase::Forward {
            // One probe per node per walk (a claim, not a put, re-asks).
            lookup: self.new_lookup(key, level, start).without_reask(),
            stack,
        }
    }

    /// Registers a new operation, arms its deadline and drives it as far as
    /// it goes.
    #[allow(clippy::too_many_arguments)]
    fn start_op(
        &mut self,
        now: Time,
        op: u64,
        kind: OpKind,
        key: Key,
        level: Level,
        levels_left: SmallVec<[Level; 4]>,
        phase: Phase,
        value: Value,
        ttl_secs: u32,
    ) {
        let deadline = now + self.hot.operation_timeout;
        let o = Op {
            kind,
            key,
            started: now,
            deadline,
            levels_left,
            level,
            phase,
            hops: 0,
            value,
            ttl_secs,
            put_levels: Vec::new(),
        };
        self.ops.insert(op, Box::new(o));
        self.timers.push(deadline, Timer::Op(op));
        self.drive(op, now);
    }

    /// Sends one of a lookup's RPCs and records it (or its failure to go out,
    /// when the pending-RPC limit is reached) in the lookup.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_lookup_rpc(
        &mut self,
        now: Time,
        op: u64,
        lookup: &mut Lookup,
        contact: Contact,
        target: Id,
        route: u16,
        body: Body,
    ) {
        match self.send_request(
            now,
            contact.addr,
            Some(contact.id),
            route,
            body,
            Purpose::Op(op),
        ) {
            Some(txid) => lookup.sent(&contact.id, target, txid, now),
            None => lookup.on_failure(&contact.id),
        }
    }
}
