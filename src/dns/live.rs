//! Which proxies an answer may name: the liveness rules that take a dead
//! proxy out of dnssrv's answers within seconds (issue 24, item 3).
//!
//! §3.1 returns only proxies "verified alive first-hand". The DSHT's own
//! traffic is the first witness: a routing entry's `verified` time moves
//! whenever the node answers one of our RPCs. A proxy that answered within
//! [`FRESH`] is named without more ado. One that has not is *suspect*: it
//! is still named (the DSHT saw it within `live_secs`, and most quiet nodes
//! are alive), but when an answer names it, a *check* is asked for
//! ([`FollowUp::Check`]: the runtime pings its DSHT address). A check not
//! answered within [`CHECK_TIMEOUT`] makes the proxy *dead*: no answer names
//! it until it answers an RPC again (a later check, or any DSHT traffic).
//! Dead proxies are checked again at most once per [`CHECK_INTERVAL`], so a
//! node that comes back, or answered late, returns by itself.
//!
//! A node stopping on SIGTERM answers the checks too, but without the HTTP
//! service in its header: the routing entry the answer refreshes no longer
//! lists it as a proxy, and dnssrv stops naming it as soon as a check has
//! come back (`shards/src/lifecycle.rs`, "withdrawal").
//!
//! Detection: while queries name a proxy, it is checked once it has not
//! answered for [`FRESH`]; killed just after its last answer, it is dead
//! [`FRESH`] + [`CHECK_TIMEOUT`] later (plus the runtime's snapshot period).
//! That, plus the answer's TTL the resolvers keep, is the failover time the
//! README's "Failover time and TTLs" works out.
//!
//! Bounds (SECURITY.md): checks are asked at most
//! `limits::DNS.live_checks_per_sec_max` a second per dnssrv, one proxy at
//! most once per [`CHECK_INTERVAL`]; the table of checks holds at most
//! `limits::DNS.live_tracked_max` proxies. Its keys are proxies from the
//! routing tables (admitted contacts that answered us), never a client's
//! address; it is keyed like the client tables all the same.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::dsht::id::KeyedBuildHasher;
use crate::time::{Duration, Time};

use super::limits::{rekey, unkeyed};

/// A proxy that answered one of our RPCs this recently is named without a
/// check.
pub const FRESH: Duration = Duration::from_millis(1000);
/// A check not answered this long after it was sent makes the proxy dead
/// (a DSHT ping's round trip, even across the world, is well under it).
pub const CHECK_TIMEOUT: Duration = Duration::from_millis(1000);
/// One proxy is checked at most this often.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(1000);
/// A proxy named that has not answered for this long is unconfirmed: the
/// answer's TTL is `A_TTL_SECS_UNCONFIRMED` (a node that died in a quiet
/// spell is named once, briefly). Under steady queries the proxies named
/// are checked every second or so and never reach it.
pub const UNCONFIRMED: Duration = Duration::from_secs(10);
/// A proxy's checks are forgotten this long after the last one (a table
/// full of them keeps only those younger).
const CHECK_FORGET: Duration = Duration::from_secs(600);

/// What the rules say of one proxy now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It answered within [`FRESH`].
    Fresh,
    /// Not lately; no check of it has gone unanswered. It may be named, and
    /// checked.
    Suspect,
    /// A check went unanswered for [`CHECK_TIMEOUT`]: not named.
    Dead,
}

/// Whether a proxy is to be checked now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Not now: it is fresh, or was checked within [`CHECK_INTERVAL`].
    NotDue,
    /// Send a check; it is counted as sent.
    Send,
    /// Due, but the rate or the table's bound refuses it.
    Refused,
}

/// The checks of one proxy.
#[derive(Clone, Copy, Debug)]
struct Checks {
    /// When the first check it has not answered since went out.
    since: Time,
    /// When the last check went out.
    last: Time,
}

/// The checks out, per proxy address, and their rate.
#[derive(Debug)]
pub struct Liveness {
    checks: HashMap<IpAddr, Checks, KeyedBuildHasher>,
    tracked_max: usize,
    per_sec: u32,
    second: Time,
    this_second: u32,
}

impl Liveness {
    /// Rules with at most `tracked_max` proxies checked and `per_sec`
    /// checks a second.
    pub fn new(tracked_max: usize, per_sec: u32) -> Liveness {
        Liveness {
            // Made at its bound: a check never allocates on the answer path.
            checks: HashMap::with_capacity_and_hasher(tracked_max, unkeyed()),
            tracked_max,
            per_sec,
            second: Time::ZERO,
            this_second: 0,
        }
    }

    /// The table with its hash keyed by `hasher`.
    pub fn with_hasher(mut self, hasher: KeyedBuildHasher) -> Liveness {
        rekey(&mut self.checks, hasher);
        self.checks.reserve(self.tracked_max);
        self
    }

    /// The verdict on the proxy at `addr`, which last answered an RPC of
    /// ours at `verified`.
    pub fn verdict(&self, addr: IpAddr, verified: Time, now: Time) -> Verdict {
        if now.saturating_since(verified) <= FRESH {
            return Verdict::Fresh;
        }
        match self.checks.get(&addr) {
            Some(c) if verified < c.since && now.saturating_since(c.since) >= CHECK_TIMEOUT => {
                Verdict::Dead
            }
            _ => Verdict::Suspect,
        }
    }

    /// Whether to check the proxy at `addr` (last verified at `verified`)
    /// now: it is not fresh and was not checked within [`CHECK_INTERVAL`];
    /// sent if the rate and the table allow (and then counted).
    pub fn want_check(&mut self, addr: IpAddr, verified: Time, now: Time) -> Check {
        if now.saturating_since(verified) <= FRESH {
            return Check::NotDue;
        }
        let known = self.checks.get(&addr).copied();
        if known.is_some_and(|c| now.saturating_since(c.last) < CHECK_INTERVAL) {
            return Check::NotDue;
        }
        if now.saturating_since(self.second) >= Duration::from_secs(1) {
            self.second = now;
            self.this_second = 0;
        }
        if self.this_second >= self.per_sec {
            return Check::Refused;
        }
        if known.is_none() && self.checks.len() >= self.tracked_max {
            self.checks
                .retain(|_, c| now.saturating_since(c.last) < CHECK_FORGET);
            if self.checks.len() >= self.tracked_max {
                return Check::Refused;
            }
        }
        let since = match known {
            // Unanswered since an earlier check: that one still counts.
            Some(c) if verified < c.since => c.since,
            _ => now,
        };
        self.checks.insert(addr, Checks { since, last: now });
        self.this_second += 1;
        Check::Send
    }

    /// Proxies with checks remembered (for the tests).
    pub fn tracked(&self) -> usize {
        self.checks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Time = Time(1_000_000_000);

    fn at(ms: u64) -> Time {
        Time(T0.0 + ms * 1000)
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 13, 0, last])
    }

    /// Virtual time: a proxy that answers every check stays named; once it
    /// stops answering it is dead one check timeout after the first check it
    /// leaves unanswered, and never named again until it answers.
    #[test]
    fn issue24_a_proxy_that_stops_answering_is_dead_within_fresh_plus_timeout() {
        let mut live = Liveness::new(16, 100);
        let p = ip(10);
        let mut verified = T0;
        // Alive: each check is answered 1 ms after it goes out.
        let mut now = T0;
        let mut checks = 0;
        while now < at(10_000) {
            assert_ne!(live.verdict(p, verified, now), Verdict::Dead);
            if live.want_check(p, verified, now) == Check::Send {
                checks += 1;
                verified = Time(now.0 + 1000);
            }
            now = Time(now.0 + 100_000);
        }
        // One check per FRESH + CHECK_INTERVAL at most, never more.
        assert!((4..=10).contains(&checks), "{checks} checks in 10 s");
        // Killed at `killed`, right after answering.
        let killed = now;
        verified = killed;
        let mut dead_at = None;
        while now < Time(killed.0 + 10_000_000) {
            match live.verdict(p, verified, now) {
                Verdict::Dead => {
                    dead_at.get_or_insert(now);
                }
                v => assert!(dead_at.is_none(), "{v:?} after it was dead"),
            }
            let _ = live.want_check(p, verified, now);
            now = Time(now.0 + 100_000);
        }
        let took = dead_at.expect("never found dead").saturating_since(killed);
        // Queries every 100 ms: dead within FRESH + CHECK_TIMEOUT + one step.
        assert!(
            took <= Duration::from_millis(FRESH.as_micros() / 1000 + 1100),
            "dead after {took:?}"
        );
    }

    #[test]
    fn issue24_a_dead_proxy_is_checked_again_and_comes_back_when_it_answers() {
        let mut live = Liveness::new(16, 100);
        let p = ip(11);
        let verified = T0;
        assert_eq!(live.want_check(p, verified, at(1500)), Check::Send);
        assert_eq!(live.verdict(p, verified, at(2000)), Verdict::Suspect);
        assert_eq!(live.verdict(p, verified, at(2500)), Verdict::Dead);
        // Checked again (the interval passed): still dead while it waits.
        assert_eq!(live.want_check(p, verified, at(2600)), Check::Send);
        assert_eq!(live.verdict(p, verified, at(2700)), Verdict::Dead);
        assert_eq!(live.want_check(p, verified, at(2700)), Check::NotDue);
        // It answers the second check: fresh, then suspect, never dead on
        // the strength of the old check.
        let answered = at(2605);
        assert_eq!(live.verdict(p, answered, at(3000)), Verdict::Fresh);
        assert_eq!(live.verdict(p, answered, at(4000)), Verdict::Suspect);
        // A new round starts from its next check.
        assert_eq!(live.want_check(p, answered, at(4000)), Check::Send);
        assert_eq!(live.verdict(p, answered, at(4500)), Verdict::Suspect);
        assert_eq!(live.verdict(p, answered, at(5000)), Verdict::Dead);
    }

    #[test]
    fn issue24_a_fresh_proxy_is_never_checked_and_never_dead() {
        let mut live = Liveness::new(16, 100);
        let p = ip(12);
        assert_eq!(live.want_check(p, at(0), at(900)), Check::NotDue);
        assert_eq!(live.verdict(p, at(0), at(1000)), Verdict::Fresh);
        assert_eq!(live.tracked(), 0);
        // Even right after an unanswered check, a later answer wins.
        assert_eq!(live.want_check(p, at(0), at(1200)), Check::Send);
        assert_eq!(live.verdict(p, at(3000), at(3500)), Verdict::Fresh);
    }

    /// SECURITY.md: checks a second and proxies tracked are bounded.
    #[test]
    fn issue24_checks_are_bounded_by_rate_and_table() {
        let mut live = Liveness::new(4, 3);
        let old = T0;
        let now = at(5000);
        let sent: Vec<_> = (1..=5).map(|i| live.want_check(ip(i), old, now)).collect();
        assert_eq!(
            sent,
            [
                Check::Send,
                Check::Send,
                Check::Send,
                Check::Refused,
                Check::Refused
            ]
        );
        // The next second: the table is full (4) after one more.
        let now = at(6000);
        assert_eq!(live.want_check(ip(4), old, now), Check::Send);
        assert_eq!(live.want_check(ip(5), old, now), Check::Refused);
        assert_eq!(live.tracked(), 4);
        // Long after, the old checks are forgotten to make room.
        let later = Time(now.0 + CHECK_FORGET.as_micros() + 1);
        assert_eq!(live.want_check(ip(5), old, later), Check::Send);
        assert_eq!(live.tracked(), 1);
    }
}
