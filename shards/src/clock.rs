//! The wall clock, in one place. The DSHT and dnssrv run on the node's
//! monotonic clock (`runtime::Shard::now`, microseconds since the node
//! started); what is written for people and peers to read — HTTP dates and
//! freshness, the access log, the status page's samples — is in Unix
//! seconds, read here.

/// Seconds since the Unix epoch (HTTP's clock); 0 if the system clock is
/// set before it. `CLOCK_REALTIME`, as `SystemTime::now` reads it, without
/// its `Duration` arithmetic (read on every cache hit; issue 27).
pub fn unix_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0)
}

/// A point on the monotonic clock (`CLOCK_MONOTONIC`, the clock `Instant`
/// reads), in nanoseconds: for timing a request on the hit path, where
/// `Instant::now` and `elapsed` cost about twice the system clock read in
/// their checked arithmetic (issue 27).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mono(u64);

impl Mono {
    /// Now.
    pub fn now() -> Mono {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        Mono(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
    }

    /// The time since `self` (zero if the clock reads earlier).
    pub fn elapsed(self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.elapsed_nanos())
    }

    /// The time since `self` in nanoseconds (zero if the clock reads earlier).
    pub fn elapsed_nanos(self) -> u64 {
        Mono::now().0.saturating_sub(self.0)
    }
}

/// Both clocks, read together: the monotonic one for timing an answer, the
/// wall clock's second for its HTTP fields. The readiness set reads them
/// once per dispatch that found edges, and the connections it wakes take
/// them as the moment their request came in, instead of three clock reads
/// per hit (issue 27; nginx likewise reads the time once per event loop
/// turn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// The monotonic clock.
    pub mono: Mono,
    /// Seconds since the Unix epoch (`unix_now`).
    pub unix_secs: u64,
}

impl Now {
    /// Both clocks now.
    pub fn read() -> Now {
        Now {
            mono: Mono::now(),
            unix_secs: unix_now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Mono` reads the clock `Instant` reads: a span timed by both agrees.
    #[test]
    fn mono_times_like_instant() {
        let (m, i) = (Mono::now(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (dm, di) = (m.elapsed(), i.elapsed());
        assert!(dm >= std::time::Duration::from_millis(20), "{dm:?}");
        let diff = dm.abs_diff(di);
        assert!(diff < std::time::Duration::from_millis(5), "{dm:?} {di:?}");
        assert!(Mono::now() >= m);
    }
}
