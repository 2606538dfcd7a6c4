//! What a putting node remembers of the nodes that answered "full and
//! loaded" for a key (§4.2), so that it does not probe them again before
//! they could accept a store.
//!
//! The paper's forward phase stops at the first node that is full and
//! loaded. Under a hot key, every put a node's own leakage lets through
//! walks to the same first such node, so that node receives β probes a
//! minute from every sender whose walk reaches it; with random ids the
//! closest node to a key owns a large region of id space, far more senders
//! than the proof sketch's one per "one-digit-off" slot reach it, and the
//! Fig. 8 bound fails in most id sets. A node that answered full and loaded
//! stays loaded for the rest of the minute (it received more than β
//! requests in it) and full until its shortest-lived value has less than
//! half a new value's TTL left (it reported that TTL), so a sender that
//! remembers the answer for at most [`RECALL_LOADED`], and no longer than
//! the node stays full for the value being put, stops its forward phase
//! there without sending anything: each sender probes each such node at
//! most once a minute.
//!
//! Sustained load: at 10,000 nodes the senders whose walks reach the same
//! first full-and-loaded node outnumber the bound (one probe a minute each
//! is 365 a minute at seed 3's busiest node, against a bound of 168). A node
//! that answers full and loaded again right after the sender's previous
//! recall of it ran out has been loaded (more than β requests a minute) over
//! two windows in a row; the sender then stays away twice as long as the
//! time before, up to [`RECALL_LOADED_MAX`], and never longer than the node
//! stays full for the value being put. A node that stops being loaded is
//! forgotten on the first answer that is not full and loaded (the entry is
//! not refreshed and lapses), so the back-off only ever lengthens the
//! paper's window while the load lasts.
//!
//! Bounded: at most [`RECALL_ENTRIES_MAX`] entries; a new one replaces an
//! expired one, else the oldest.

use crate::dsht::id::{Id, Key};
use crate::dsht::limits::RECALL_ENTRIES_MAX;
use crate::time::{Duration, Time};

/// How long an answer "loaded" is remembered: the paper's window ("more
/// than β requests within the past minute").
pub const RECALL_LOADED: Duration = Duration::from_secs(60);

/// The longest a sender stays away from a node that keeps answering full
/// and loaded (the window doubles from [`RECALL_LOADED`] per answer heard
/// within one window of the previous recall running out).
pub const RECALL_LOADED_MAX: Duration = Duration::from_secs(240);

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: Key,
    level: u8,
    node: Id,
    /// When the answer was heard: it counts as loaded until
    /// `heard + stay`.
    heard: Time,
    /// How long it counts as loaded: [`RECALL_LOADED`], doubled per
    /// answer that followed the previous recall closely, at most
    /// [`RECALL_LOADED_MAX`].
    stay: Duration,
    /// When the node's shortest-lived value expires (now + its reported
    /// minimum TTL): it counts as full for a value of TTL T while at least
    /// T/2 of that remains.
    min_expires: Time,
    /// Whether `stay` is the node's own (longer than the back-off): it
    /// then holds whatever the node's values' TTLs.
    advised: bool,
}

impl Entry {
    /// Takes the node's asked-for stay if it is longer than the sender's own.
    fn take_advice(&mut self, asked: Option<Duration>) {
        if let Some(asked) = asked.filter(|&a| a > self.stay) {
            self.stay = asked;
            self.advised = true;
        }
    }
}

/// Remembered "full and loaded" answers.
#[derive(Clone, Debug, Default)]
pub struct Recall {
    entries: Vec<Entry>,
}

/// `w` plus `jitter` modulo `2w`, at most [`RECALL_LOADED_MAX`].
fn with_jitter(w: Duration, jitter: u64) -> Duration {
    let w_us = w.as_micros().max(1);
    Duration::from_micros((w_us + jitter % (2 * w_us)).min(RECALL_LOADED_MAX.as_micros()))
}

impl Recall {
    /// Nothing remembered.
    pub fn new() -> Recall {
        Recall::default()
    }

    /// Number of entries held (expired ones included until replaced).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Remembers that `node` answered full and loaded for `key` at `level`
    /// at `now`, reporting `min_ttl_secs` as its shortest remaining TTL.
    /// `jitter` (a random number from the node's seeded RNG) spreads the
    /// stay over [w, 3w) for a window w, so that the senders of a start-up
    /// wave, all answered within seconds, do not come back in the same
    /// minute (at most [`RECALL_LOADED_MAX`]). `stay_mins` is the stay
    /// the node asked for (1: the paper's window, nothing more).
    #[allow(clippy::too_many_arguments)] // one answer's fields
    pub fn remember(
        &mut self,
        key: Key,
        level: u8,
        node: Id,
        min_ttl_secs: u32,
        now: Time,
        jitter: u64,
        stay_mins: u8,
    ) {
        let mut e = Entry {
            key,
            level,
            node,
            heard: now,
            stay: RECALL_LOADED,
            min_expires: now + Duration::from_secs(u64::from(min_ttl_secs)),
            advised: false,
        };
        let asked = Duration::from_secs(60 * u64::from(stay_mins));
        let asked = (stay_mins > 1).then(|| {
            let w = asked.as_micros();
            Duration::from_micros(w + jitter % w)
        });
        if let Some(old) = self
            .entries
            .iter_mut()
            .find(|x| x.key == key && x.level == level && x.node == node)
        {
            // Loaded again within a window of the previous recall running
            // out: loaded over consecutive windows, stay away longer.
            if now < old.heard + old.stay + RECALL_LOADED {
                e.stay = Duration::from_micros(
                    (old.stay.as_micros() * 2).min(RECALL_LOADED_MAX.as_micros()),
                );
            }
            e.stay = with_jitter(e.stay, jitter);
            e.take_advice(asked);
            *old = e;
            return;
        }
        e.stay = with_jitter(e.stay, jitter);
        e.take_advice(asked);
        if self.entries.len() < RECALL_ENTRIES_MAX {
            self.entries.push(e);
            return;
        }
        // Replace an expired entry if there is one, else the oldest.
        if let Some(slot) = self.entries.iter_mut().min_by_key(|x| x.heard + x.stay) {
            *slot = e;
        }
    }

    /// Remembers that `node` answered loaded, but not full, for `key` at
    /// `level` at `now` (the walk stores there): it counts as full and
    /// loaded for the stay, whatever its TTLs, so that the sender's next
    /// walks stop a step before it.
    pub fn remember_loaded(
        &mut self,
        key: Key,
        level: u8,
        node: Id,
        now: Time,
        jitter: u64,
        stay_mins: u8,
    ) {
        self.remember(key, level, node, 0, now, jitter, stay_mins);
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|x| x.key == key && x.level == level && x.node == node)
        {
            e.advised = true;
        }
    }

    /// Forgets `node` for `key` at `level`: it answered a probe and was not
    /// full and loaded, so the next full-and-loaded answer starts over at
    /// [`RECALL_LOADED`].
    pub fn forget(&mut self, key: &Key, level: u8, node: &Id) {
        if let Some(i) = self
            .entries
            .iter()
            .position(|x| x.node == *node && x.key == *key && x.level == level)
        {
            self.entries.swap_remove(i);
        }
    }

    /// Whether `node` is remembered as full and loaded for `key` at `level`
    /// with respect to a new value of `ttl_secs`, at `now`.
    pub fn is_full_and_loaded(
        &self,
        key: &Key,
        level: u8,
        node: &Id,
        ttl_secs: u32,
        now: Time,
    ) -> bool {
        self.entries.iter().any(|x| {
            x.node == *node
                && x.key == *key
                && x.level == level
                && now < x.heard + x.stay
                && (x.advised
                    || x.min_expires.saturating_since(now).as_micros() * 2
                        >= u64::from(ttl_secs) * 1_000_000)
        })
    }

    /// Whether anything is remembered for `key` at `level` (a cheap test
    /// before the per-hop check).
    pub fn knows(&self, key: &Key, level: u8) -> bool {
        self.entries
            .iter()
            .any(|x| x.key == *key && x.level == level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(b: u8) -> Id {
        Id([b; 20])
    }

    #[test]
    fn section_4_2_answer_is_remembered_for_at_most_a_minute() {
        let mut r = Recall::new();
        let t0 = Time::ZERO + Duration::from_secs(10);
        r.remember(id(1), 0, id(2), 3600, t0, 0, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, t0));
        let later = t0 + Duration::from_secs(59);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, later));
        let minute = t0 + Duration::from_secs(60);
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, minute));
        // Another key, level or node is not remembered.
        assert!(!r.is_full_and_loaded(&id(9), 0, &id(2), 3600, t0));
        assert!(!r.is_full_and_loaded(&id(1), 1, &id(2), 3600, t0));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(9), 3600, t0));
    }

    #[test]
    fn section_4_2_answer_is_forgotten_once_the_node_could_accept_the_value() {
        let mut r = Recall::new();
        let t0 = Time::ZERO;
        // Shortest value has 40 s left: full for a 60 s value for 10 s more
        // (40 - 60/2), and never full for a value of 100 s.
        r.remember(id(1), 0, id(2), 40, t0, 0, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 60, t0));
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 60, t0 + Duration::from_secs(10)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 60, t0 + Duration::from_secs(11)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 100, t0));
    }

    #[test]
    fn section_4_2_sustained_load_lengthens_the_recall_up_to_its_cap() {
        let mut r = Recall::new();
        let t0 = Time::ZERO + Duration::from_secs(5);
        let at = |s: u64| t0 + Duration::from_secs(s);
        r.remember(id(1), 0, id(2), 3600, t0, 0, 1);
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(60)));
        // Heard loaded again as soon as the first minute ran out: two
        // minutes now.
        r.remember(id(1), 0, id(2), 3600, at(60), 0, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(179)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(180)));
        // Then four minutes, and no more than RECALL_LOADED_MAX after that.
        r.remember(id(1), 0, id(2), 3600, at(200), 0, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(439)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(440)));
        r.remember(id(1), 0, id(2), 3600, at(440), 0, 1);
        let cap = RECALL_LOADED_MAX.as_micros() / 1_000_000;
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(440 + cap - 1)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(440 + cap)));
        // Still bounded by how long the node stays full for the value: its
        // shortest value has 100 s left, full for a 60 s value for 70 s.
        r.remember(id(1), 0, id(2), 100, at(440 + cap), 0, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 60, at(440 + cap + 70)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 60, at(440 + cap + 71)));
    }

    #[test]
    fn section_4_2_load_that_stops_restarts_the_recall_at_a_minute() {
        let mut r = Recall::new();
        let t0 = Time::ZERO;
        let at = |s: u64| t0 + Duration::from_secs(s);
        r.remember(id(1), 0, id(2), 3600, t0, 0, 1);
        r.remember(id(1), 0, id(2), 3600, at(60), 0, 1);
        // A gap of more than a minute after the recall ran out: one minute.
        r.remember(id(1), 0, id(2), 3600, at(60 + 120 + 61), 0, 1);
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(60 + 120 + 61 + 60)));
        // Answered, not full and loaded: forgotten, and the next answer
        // starts over at a minute.
        r.remember(id(1), 0, id(2), 3600, at(400), 0, 1);
        r.forget(&id(1), 0, &id(2));
        assert!(!r.knows(&id(1), 0));
        r.remember(id(1), 0, id(2), 3600, at(460), 0, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(519)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(520)));
    }

    #[test]
    fn section_4_2_jitter_spreads_the_recall_over_two_more_windows_at_most() {
        let mut r = Recall::new();
        let t0 = Time::ZERO;
        let at = |s: u64| t0 + Duration::from_secs(s);
        // 30 s of jitter: a stay of 90 s.
        r.remember(id(1), 0, id(2), 3600, t0, 30_000_000, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(89)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(90)));
        // Any jitter stays under three windows.
        r.remember(id(1), 0, id(3), 3600, t0, 119_999_999, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(3), 3600, at(179)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(3), 3600, at(180)));
        // The cap holds with jitter: 240 s, not up to 480 s.
        r.remember(id(1), 0, id(4), 3600, t0, 0, 1);
        r.remember(id(1), 0, id(4), 3600, at(60), 0, 1);
        r.remember(id(1), 0, id(4), 3600, at(180), 239_999_999, 1);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(4), 3600, at(180 + 239)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(4), 3600, at(180 + 240)));
    }

    #[test]
    fn recall_is_bounded_and_replaces_the_oldest() {
        let mut r = Recall::new();
        for i in 0..RECALL_ENTRIES_MAX + 10 {
            let mut k = Id::ZERO;
            k.0[..8].copy_from_slice(&(i as u64).to_be_bytes());
            r.remember(
                k,
                0,
                id(2),
                3600,
                Time::ZERO + Duration::from_secs(i as u64),
                0,
                1,
            );
        }
        assert_eq!(r.len(), RECALL_ENTRIES_MAX);
        let mut newest = Id::ZERO;
        newest.0[..8].copy_from_slice(&((RECALL_ENTRIES_MAX + 9) as u64).to_be_bytes());
        let at = Time::ZERO + Duration::from_secs((RECALL_ENTRIES_MAX + 9) as u64);
        assert!(r.is_full_and_loaded(&newest, 0, &id(2), 3600, at));
        assert!(!r.knows(&Id::ZERO, 0), "the oldest was replaced");
    }

    #[test]
    fn issue_27_a_node_that_asks_for_a_longer_stay_gets_it_whatever_its_ttls() {
        let mut r = Recall::new();
        let t0 = Time::ZERO + Duration::from_secs(10);
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Asked for 10 minutes: held for [10, 20) minutes by the jitter,
        // here exactly 10 (jitter 0), even though its shortest value (40 s
        // left) would not keep it full for a 3600 s value.
        r.remember(id(1), 0, id(2), 40, t0, 0, 10);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(599)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, at(600)));
        // The jitter spreads it up to twice the stay, never more.
        r.remember(id(1), 0, id(3), 3600, t0, 600_000_000 - 1, 10);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(3), 3600, at(1199)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(3), 3600, at(1200)));
        // A stay of one minute is the paper's window and the sender's own
        // back-off: the fullness rule still applies.
        r.remember(id(1), 0, id(4), 40, t0, 0, 1);
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(4), 3600, t0));
    }

    #[test]
    fn issue_27_a_loaded_node_that_can_take_the_value_is_not_probed_again_for_its_stay() {
        let mut r = Recall::new();
        let t0 = Time::ZERO + Duration::from_secs(10);
        r.remember_loaded(id(1), 0, id(2), t0, 0, 1);
        // A minute (jitter 0), though it holds no value that would keep it full.
        assert!(r.is_full_and_loaded(&id(1), 0, &id(2), 3600, t0 + Duration::from_secs(59)));
        assert!(!r.is_full_and_loaded(&id(1), 0, &id(2), 3600, t0 + Duration::from_secs(60)));
        // The stay it asks, when longer.
        r.remember_loaded(id(1), 0, id(3), t0, 0, 5);
        assert!(r.is_full_and_loaded(&id(1), 0, &id(3), 3600, t0 + Duration::from_secs(299)));
    }
}
