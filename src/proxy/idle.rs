//! Deadlines of client connections without a timer per read (issues #11
//! and #23): the table a core's sweep reads once a second.
//!
//! A core's connections each hold a slot here, stamped with the phase it is
//! in and the core's tick (seconds, advanced by the sweep) when that phase
//! began. The phases and their deadlines, the way nginx and Varnish bound
//! theirs:
//!
//! - **Head**: a request head is being read. One deadline for the whole
//!   head, from its first byte (or, on a new connection, from the accept):
//!   stamping it again while bytes trickle in keeps the first stamp, so a
//!   slowloris sending a byte every few seconds is closed all the same.
//! - **Body**: a request body is being read (drained); one deadline for the
//!   whole body.
//! - **Idle**: a keep-alive connection waits for its next request.
//! - **Sending**: an answer is being written. Each write that completes
//!   stamps it again, so the deadline is a stall timeout: a client that
//!   stops reading is closed, a slow one that keeps reading is not.
//! - **Busy**: the core is working for the connection (origin fetch, cache
//!   lookup); the origin's own timeouts bound that, not this table.
//!
//! Marking a phase is one store; nothing is armed or cancelled per read or
//! write. At the connection cap, [`ConnTable::evict`] names the connection
//! whose loss costs least (the oldest idle one, then the slowest head or
//! body, then the longest stalled send) so a new client gets in.

/// A connection's slot in the table.
pub type Slot = u32;

/// What a connection is doing, as far as its deadlines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Reading a request head.
    Head,
    /// Reading a request body.
    Body,
    /// Waiting for the next request of a keep-alive connection.
    Idle,
    /// Writing an answer (stamped at each completed write).
    Sending,
}

#[derive(Clone, Copy)]
enum State {
    Free,
    /// Working for the connection: no deadline of this table applies.
    Busy,
    /// In `Phase` since this tick.
    In(Phase, u32),
    /// Expired or evicted: reported once, closing.
    Closing,
}

/// Each phase's deadline in whole ticks (seconds): a connection in a phase
/// for more than this many ticks is expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// The whole request head.
    pub head_ticks: u32,
    /// The whole request body.
    pub body_ticks: u32,
    /// A keep-alive connection's wait for its next request.
    pub idle_ticks: u32,
    /// A write that makes no progress.
    pub send_stall_ticks: u32,
}

impl Deadlines {
    /// The deadlines given in milliseconds, each rounded up to whole ticks.
    pub fn from_ms(head_ms: u64, body_ms: u64, idle_ms: u64, send_stall_ms: u64) -> Deadlines {
        Deadlines {
            head_ticks: limit_ticks(head_ms),
            body_ticks: limit_ticks(body_ms),
            idle_ticks: limit_ticks(idle_ms),
            send_stall_ticks: limit_ticks(send_stall_ms),
        }
    }

    fn of(&self, phase: Phase) -> u32 {
        match phase {
            Phase::Head => self.head_ticks,
            Phase::Body => self.body_ticks,
            Phase::Idle => self.idle_ticks,
            Phase::Sending => self.send_stall_ticks,
        }
    }
}

/// Connections expired by one sweep, by the phase they were in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Past the head deadline.
    pub head: u64,
    /// Past the body deadline.
    pub body: u64,
    /// Idle past the keep-alive timeout.
    pub idle: u64,
    /// Sends stalled past the send timeout.
    pub send_stall: u64,
}

/// The slots of one core's client connections, each with its connection's
/// token (the shard's socket descriptor) and state.
pub struct ConnTable {
    slots: Vec<(i32, State)>,
    free: Vec<Slot>,
    tick: u32,
    /// Connections expired since the table was made, by phase.
    expired: Expired,
    /// Connections evicted at the cap since the table was made.
    evicted: u64,
}

impl Default for ConnTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ConnTable {
    /// An empty table at tick 0.
    pub fn new() -> ConnTable {
        ConnTable {
            slots: Vec::new(),
            free: Vec::new(),
            tick: 0,
            expired: Expired::default(),
            evicted: 0,
        }
    }

    /// A slot for a new connection, which reads its first request head
    /// from now on.
    pub fn register(&mut self, token: i32) -> Slot {
        let state = State::In(Phase::Head, self.tick);
        match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = (token, state);
                s
            }
            None => {
                self.slots.push((token, state));
                (self.slots.len() - 1) as Slot
            }
        }
    }

    /// The connection's slot is free again (the connection is closing).
    pub fn release(&mut self, slot: Slot) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if !matches!(s.1, State::Free) {
                s.1 = State::Free;
                self.free.push(slot);
            }
        }
    }

    /// The connection is in `phase`: since now, or, for a head or body it
    /// was already reading, since it began (its deadline is for the whole
    /// of it). A closing connection stays closing.
    #[inline]
    pub fn enter(&mut self, slot: Slot, phase: Phase) {
        let tick = self.tick;
        if let Some(s) = self.slots.get_mut(slot as usize) {
            match s.1 {
                State::Free | State::Closing => {}
                State::In(p, _) if p == phase && matches!(p, Phase::Head | Phase::Body) => {}
                _ => s.1 = State::In(phase, tick),
            }
        }
    }

    /// The connection waits for its client's next request from now on.
    #[inline]
    pub fn waiting(&mut self, slot: Slot) {
        self.enter(slot, Phase::Idle);
    }

    /// A write of the connection's answer begins or made progress: its
    /// stall clock starts again.
    #[inline]
    pub fn sending(&mut self, slot: Slot) {
        self.enter(slot, Phase::Sending);
    }

    /// The core works for the connection: no deadline of the table runs.
    #[inline]
    pub fn busy(&mut self, slot: Slot) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if matches!(s.1, State::In(..)) {
                s.1 = State::Busy;
            }
        }
    }

    /// Advances the tick by one (a second) and appends to `out` the tokens
    /// of connections in a phase for more than its deadline's whole ticks,
    /// with that phase. Each is marked closing so it is reported once.
    pub fn expired(&mut self, deadlines: &Deadlines, out: &mut Vec<(i32, Phase)>) {
        self.tick = self.tick.wrapping_add(1);
        let tick = self.tick;
        for s in self.slots.iter_mut() {
            if let State::In(phase, since) = s.1 {
                if tick.wrapping_sub(since) > deadlines.of(phase) {
                    s.1 = State::Closing;
                    out.push((s.0, phase));
                    let c = match phase {
                        Phase::Head => &mut self.expired.head,
                        Phase::Body => &mut self.expired.body,
                        Phase::Idle => &mut self.expired.idle,
                        Phase::Sending => &mut self.expired.send_stall,
                    };
                    *c += 1;
                }
            }
        }
    }

    /// Advances the tick by one (a second) without expiring anything: for
    /// a listener whose deadlines are timers of its own (the admin
    /// endpoint) and which uses the table only to evict.
    pub fn tick(&mut self) {
        self.tick = self.tick.wrapping_add(1);
    }

    /// The connection to close so that a new one gets in, marked closing:
    /// the one idle the longest; else the one reading a head or body the
    /// longest (the slowest client); else the send stalled the longest (at
    /// least a tick). None when every connection is busy or sending
    /// steadily: the new one is refused then.
    pub fn evict(&mut self) -> Option<i32> {
        let tick = self.tick;
        let mut best: Option<(usize, (u8, u32))> = None;
        for (i, s) in self.slots.iter().enumerate() {
            let State::In(phase, since) = s.1 else {
                continue;
            };
            let age = tick.wrapping_sub(since);
            let rank = match phase {
                Phase::Idle => 0,
                Phase::Head | Phase::Body => 1,
                Phase::Sending if age >= 1 => 2,
                Phase::Sending => continue,
            };
            // Lower rank first, then the oldest.
            let key = (rank, u32::MAX - age);
            match best {
                Some((_, k)) if k <= key => {}
                _ => best = Some((i, key)),
            }
        }
        let (i, _) = best?;
        self.slots[i].1 = State::Closing;
        self.evicted += 1;
        Some(self.slots[i].0)
    }

    /// The connections idle between requests, marked closing, into `out`:
    /// a node withdrawing (SIGTERM) closes them rather than wait out their
    /// keep-alive timeout, as RFC 9112 §9.6 lets a server close an idle
    /// persistent connection (the client opens a new one, elsewhere).
    pub fn close_idle(&mut self, out: &mut Vec<i32>) {
        for s in &mut self.slots {
            if let State::In(Phase::Idle, _) = s.1 {
                s.1 = State::Closing;
                out.push(s.0);
            }
        }
    }

    /// Connections expired since the table was made, by phase.
    pub fn expired_total(&self) -> Expired {
        self.expired
    }

    /// Connections evicted at the cap since the table was made.
    pub fn evicted_total(&self) -> u64 {
        self.evicted
    }

    /// Connections holding a slot.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// No connection holds a slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whole ticks (seconds) of a timeout in milliseconds, rounded up, at
/// least one.
pub fn limit_ticks(timeout_ms: u64) -> u32 {
    timeout_ms.div_ceil(1000).clamp(1, u32::MAX as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Deadlines = Deadlines {
        head_ticks: 2,
        body_ticks: 3,
        idle_ticks: 2,
        send_stall_ticks: 1,
    };

    fn sweep(t: &mut ConnTable, d: &Deadlines) -> Vec<i32> {
        let mut out = Vec::new();
        t.expired(d, &mut out);
        out.into_iter().map(|(fd, _)| fd).collect()
    }

    /// Issue 24: a withdrawing node closes the connections idle between
    /// requests, once each, and none reading or sending.
    #[test]
    fn close_idle_takes_only_the_idle_ones_once() {
        let mut t = ConnTable::new();
        let idle = t.register(1);
        t.waiting(idle);
        let _head = t.register(2);
        let sending = t.register(3);
        t.sending(sending);
        let busy = t.register(4);
        t.busy(busy);
        let mut out = Vec::new();
        t.close_idle(&mut out);
        assert_eq!(out, vec![1]);
        out.clear();
        t.close_idle(&mut out);
        assert!(out.is_empty(), "closed once");
        // Closing stays closing, whatever phase its task reports next.
        t.enter(idle, Phase::Head);
        t.close_idle(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_waiting_connection_expires_after_its_limit_and_once() {
        let mut t = ConnTable::new();
        let a = t.register(7);
        t.waiting(a);
        assert!(sweep(&mut t, &D).is_empty()); // 1 tick
        assert!(sweep(&mut t, &D).is_empty()); // 2 ticks: not more than 2
        assert_eq!(sweep(&mut t, &D), vec![7]);
        assert!(sweep(&mut t, &D).is_empty(), "reported once");
        assert_eq!(t.expired_total().idle, 1);
    }

    #[test]
    fn a_busy_connection_never_expires() {
        let mut t = ConnTable::new();
        let a = t.register(3);
        t.waiting(a);
        t.busy(a);
        for _ in 0..10 {
            assert!(sweep(&mut t, &D).is_empty());
        }
        // Waiting again starts the clock from the current tick.
        t.waiting(a);
        assert!(sweep(&mut t, &D).is_empty());
        assert!(sweep(&mut t, &D).is_empty());
        assert_eq!(sweep(&mut t, &D), vec![3]);
    }

    /// A slowloris: a byte of the head every tick restamps nothing; the
    /// whole head has `head_ticks`.
    #[test]
    fn a_head_trickling_in_is_cut_at_the_head_deadline() {
        let mut t = ConnTable::new();
        let a = t.register(5); // a new connection reads its head
        let mut closed_after = None;
        for tick in 1..10 {
            t.enter(a, Phase::Head); // another byte arrived
            let out = sweep(&mut t, &D);
            if out == [5] {
                closed_after = Some(tick);
                break;
            }
        }
        assert_eq!(closed_after, Some(3), "more than 2 ticks into the head");
        assert_eq!(t.expired_total().head, 1);
    }

    #[test]
    fn a_body_has_its_own_deadline_after_the_head() {
        let mut t = ConnTable::new();
        let a = t.register(5);
        sweep(&mut t, &D);
        sweep(&mut t, &D);
        t.busy(a); // the head is in
        t.enter(a, Phase::Body);
        assert!(sweep(&mut t, &D).is_empty());
        t.enter(a, Phase::Body);
        assert!(sweep(&mut t, &D).is_empty());
        assert!(sweep(&mut t, &D).is_empty());
        assert_eq!(sweep(&mut t, &D), vec![5]);
        assert_eq!(t.expired_total().body, 1);
    }

    /// A client that reads slowly keeps its connection; one that stops
    /// reading loses it after the stall timeout.
    #[test]
    fn a_send_expires_only_when_it_stalls() {
        let mut t = ConnTable::new();
        let a = t.register(8);
        t.busy(a);
        for _ in 0..5 {
            t.sending(a); // a write completed
            assert!(sweep(&mut t, &D).is_empty()); // 1 tick: not more than 1
        }
        assert_eq!(sweep(&mut t, &D), vec![8], "2 ticks without progress");
        assert_eq!(t.expired_total().send_stall, 1);
    }

    #[test]
    fn eviction_takes_the_oldest_idle_then_the_slowest() {
        let mut t = ConnTable::new();
        let busy = t.register(1);
        t.busy(busy);
        let sending = t.register(2);
        t.sending(sending);
        let head = t.register(3); // reading its head since tick 0
        let big = Deadlines {
            head_ticks: 100,
            body_ticks: 100,
            idle_ticks: 100,
            send_stall_ticks: 100,
        };
        sweep(&mut t, &big);
        let idle_old = t.register(4);
        t.waiting(idle_old);
        sweep(&mut t, &big);
        let idle_new = t.register(5);
        t.waiting(idle_new);
        assert_eq!(t.evict(), Some(4), "the oldest idle first");
        assert_eq!(t.evict(), Some(5));
        assert_eq!(t.evict(), Some(3), "then the slowest head");
        assert_eq!(t.evict(), Some(2), "then the longest stalled send");
        assert_eq!(t.evict(), None, "a busy connection is never evicted");
        assert_eq!(t.evicted_total(), 4);
        // Evicted ones are closing: never reported by a sweep.
        assert!(sweep(&mut t, &D).is_empty());
        let _ = head;
    }

    #[test]
    fn released_slots_are_reused_and_not_reported() {
        let mut t = ConnTable::new();
        let a = t.register(1);
        let b = t.register(2);
        t.waiting(a);
        t.waiting(b);
        t.release(a);
        t.release(a); // twice is harmless
        t.waiting(a); // after release: ignored
        assert_eq!(t.len(), 1);
        let c = t.register(9);
        assert_eq!(c, a);
        t.busy(c);
        assert!(sweep(&mut t, &D).is_empty());
        assert!(sweep(&mut t, &D).is_empty());
        assert_eq!(sweep(&mut t, &D), vec![2]);
    }

    #[test]
    fn limits_round_up_to_whole_seconds() {
        assert_eq!(limit_ticks(0), 1);
        assert_eq!(limit_ticks(1), 1);
        assert_eq!(limit_ticks(1000), 1);
        assert_eq!(limit_ticks(1001), 2);
        assert_eq!(limit_ticks(30_000), 30);
    }
}
