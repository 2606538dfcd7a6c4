//! Idle client connections without a timer per read (issue #11).
//!
//! A core's connections each hold a slot here. While one waits for its
//! client's next request it is stamped with the core's idle tick (seconds,
//! advanced by a sweep once a second); while it answers one it is busy and
//! never idle. The sweep asks [`IdleTable::expired`] for the connections that
//! have waited past `client_idle_timeout_ms`, rounded up to whole ticks, and
//! closes them (`shutdown`, so their pending read ends). Marking a
//! connection waiting or busy is one store; nothing is armed or cancelled.

/// A connection's slot in the table.
pub type Slot = u32;

#[derive(Clone, Copy)]
enum State {
    Free,
    Busy,
    /// Waiting for its client since this tick.
    Waiting(u32),
}

/// The slots of one core's client connections, each with its connection's
/// token (the shard's socket descriptor) and state.
pub struct IdleTable {
    slots: Vec<(i32, State)>,
    free: Vec<Slot>,
    tick: u32,
}

impl Default for IdleTable {
    fn default() -> Self {
        Self::new()
    }
}

impl IdleTable {
    /// An empty table at tick 0.
    pub fn new() -> IdleTable {
        IdleTable {
            slots: Vec::new(),
            free: Vec::new(),
            tick: 0,
        }
    }

    /// A slot for a new connection (busy until it waits).
    pub fn register(&mut self, token: i32) -> Slot {
        match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = (token, State::Busy);
                s
            }
            None => {
                self.slots.push((token, State::Busy));
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

    /// The connection waits for its client from now on.
    #[inline]
    pub fn waiting(&mut self, slot: Slot) {
        let tick = self.tick;
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if !matches!(s.1, State::Free) {
                s.1 = State::Waiting(tick);
            }
        }
    }

    /// The connection has a request to answer: it is not idle.
    #[inline]
    pub fn busy(&mut self, slot: Slot) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if !matches!(s.1, State::Free) {
                s.1 = State::Busy;
            }
        }
    }

    /// Advances the tick by one (a second) and appends to `out` the tokens
    /// of connections waiting for more than `limit_ticks` whole ticks, that
    /// is, at least `limit_ticks` seconds and less than one more. Each is
    /// marked busy so it is reported once.
    pub fn expired(&mut self, limit_ticks: u32, out: &mut Vec<i32>) {
        self.tick = self.tick.wrapping_add(1);
        let tick = self.tick;
        for s in self.slots.iter_mut() {
            if let State::Waiting(since) = s.1 {
                if tick.wrapping_sub(since) > limit_ticks {
                    s.1 = State::Busy;
                    out.push(s.0);
                }
            }
        }
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

/// Whole ticks (seconds) of an idle timeout in milliseconds, rounded up,
/// at least one.
pub fn limit_ticks(idle_timeout_ms: u64) -> u32 {
    idle_timeout_ms.div_ceil(1000).clamp(1, u32::MAX as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(t: &mut IdleTable, limit: u32) -> Vec<i32> {
        let mut out = Vec::new();
        t.expired(limit, &mut out);
        out
    }

    #[test]
    fn a_waiting_connection_expires_after_its_limit_and_once() {
        let mut t = IdleTable::new();
        let a = t.register(7);
        t.waiting(a);
        assert!(sweep(&mut t, 2).is_empty()); // 1 tick
        assert!(sweep(&mut t, 2).is_empty()); // 2 ticks: not more than 2
        assert_eq!(sweep(&mut t, 2), vec![7]);
        assert!(sweep(&mut t, 2).is_empty(), "reported once");
    }

    #[test]
    fn a_busy_connection_never_expires() {
        let mut t = IdleTable::new();
        let a = t.register(3);
        t.waiting(a);
        t.busy(a);
        for _ in 0..10 {
            assert!(sweep(&mut t, 1).is_empty());
        }
        // Waiting again starts the clock from the current tick.
        t.waiting(a);
        assert!(sweep(&mut t, 1).is_empty());
        assert_eq!(sweep(&mut t, 1), vec![3]);
    }

    #[test]
    fn released_slots_are_reused_and_not_reported() {
        let mut t = IdleTable::new();
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
        assert!(sweep(&mut t, 1).is_empty());
        assert_eq!(sweep(&mut t, 1), vec![2]);
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
