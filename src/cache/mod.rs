//! The disk cache's pure parts (NSDI 2004 §3.2): the on-disk record format
//! ([`record`]), its checksum ([`checksum`]) and the eviction policies
//! ([`policy`]). Cached objects live in memory-mapped segment files that
//! survive restarts: a hit is sent straight from the mapping, and a miss
//! streams to every waiting client as its bytes arrive. The files, the
//! mappings and the index shared by all cores are in `shards/src/cache/`.

pub mod checksum;
pub mod policy;
pub mod record;

/// What the proxy stores beside an object's bytes. Times are whole unix
/// seconds, as in `proxy::policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectMeta {
    /// When the response was stored (the clock the cache's eviction uses).
    pub stored_secs: u64,
    /// Fresh until this time; stale after (revalidate, RFC 9111 §4.2).
    pub fresh_until_secs: u64,
    /// The body length the origin announced, if it did.
    pub expected_len: Option<u64>,
}
