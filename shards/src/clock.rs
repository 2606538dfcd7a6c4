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
