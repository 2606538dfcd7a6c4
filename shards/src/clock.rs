//! The wall clock, in one place. The DSHT and dnssrv run on the node's
//! monotonic clock (`runtime::Shard::now`, microseconds since the node
//! started); what is written for people and peers to read — HTTP dates and
//! freshness, the access log, the status page's samples — is in Unix
//! seconds, read here.

use std::time::SystemTime;

/// Seconds since the Unix epoch (HTTP's clock); 0 if the system clock is
/// set before it.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
