//! dnssrv's bounded state: measured clients, the probe limiter (coral must
//! never become a probe reflector) and response rate limiting (RRL).
//!
//! Every table here has a fixed bound; none grows with traffic.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::dsht::id::KeyedBuildHasher;
use crate::time::{Duration, Time};

/// The hasher of a table made by `new`: fixed seeds, for tests and the
/// simulator; a server keys it with a secret (`with_hasher`), for the keys
/// are client addresses anyone can choose (SECURITY.md, hash flooding).
pub(super) fn unkeyed() -> KeyedBuildHasher {
    KeyedBuildHasher::with_seeds(0, 0, 0, 0)
}

/// `map` rehashed with `hasher`.
pub(super) fn rekey<K: std::hash::Hash + Eq, V>(
    map: &mut HashMap<K, V, KeyedBuildHasher>,
    hasher: KeyedBuildHasher,
) {
    let mut m = HashMap::with_capacity_and_hasher(map.len(), hasher);
    m.extend(map.drain());
    *map = m;
}

/// The prefix of `ip` that names its network: `/v4_bits` for IPv4 and
/// `/v6_bits` for IPv6, as one 128-bit key (IPv4 in its mapped form).
pub fn prefix_key(ip: IpAddr, v4_bits: u8, v6_bits: u8) -> u128 {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(v4_bits.min(32));
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            (0xffffu128 << 32) | u128::from(u32::from(a) & mask)
        }
        IpAddr::V6(a) => {
            let bits = u32::from(v6_bits.min(128));
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            // Keep IPv6 keys apart from the IPv4-mapped ones.
            let k = u128::from(a) & mask;
            if k >> 32 == 0xffff {
                k ^ 1
            } else {
                k
            }
        }
    }
}

/// The probe limiter: at most one probe per destination per `interval`, at
/// most `per_prefix` per /24 (or /56) per `interval`, and at most
/// `per_sec` a second in all. Bounded tables: when one is full, no probe.
#[derive(Debug)]
pub struct ProbeLimiter {
    dests: HashMap<IpAddr, Time, KeyedBuildHasher>,
    prefixes: HashMap<u128, (Time, u32), KeyedBuildHasher>,
    max: usize,
    interval: Duration,
    per_prefix: u32,
    per_sec: u32,
    second: Time,
    this_second: u32,
}

impl ProbeLimiter {
    /// A limiter with the given bounds; tables hold at most `max` entries.
    pub fn new(max: usize, interval: Duration, per_prefix: u32, per_sec: u32) -> ProbeLimiter {
        ProbeLimiter {
            dests: HashMap::with_hasher(unkeyed()),
            prefixes: HashMap::with_hasher(unkeyed()),
            max,
            interval,
            per_prefix,
            per_sec,
            second: Time::ZERO,
            this_second: 0,
        }
    }

    /// The limiter with its tables' hashes keyed by `hasher`.
    pub fn with_hasher(mut self, hasher: KeyedBuildHasher) -> ProbeLimiter {
        rekey(&mut self.dests, hasher.clone());
        rekey(&mut self.prefixes, hasher);
        self
    }

    /// Whether `dest` may be probed now; if so, the probe is counted.
    pub fn allow(&mut self, dest: IpAddr, now: Time) -> bool {
        if self.per_sec == 0 {
            return false;
        }
        if now.saturating_since(self.second) >= Duration::from_secs(1) {
            self.second = now;
            self.this_second = 0;
        }
        if self.this_second >= self.per_sec {
            return false;
        }
        if let Some(&t) = self.dests.get(&dest) {
            if now.saturating_since(t) < self.interval {
                return false;
            }
        }
        let key = prefix_key(dest, 24, 56);
        let window = match self.prefixes.get(&key) {
            Some(&(start, n)) if now.saturating_since(start) < self.interval => {
                if n >= self.per_prefix {
                    return false;
                }
                (start, n + 1)
            }
            _ => (now, 1),
        };
        let interval = self.interval;
        if self.dests.len() >= self.max && !self.dests.contains_key(&dest) {
            self.dests
                .retain(|_, t| now.saturating_since(*t) < interval);
            if self.dests.len() >= self.max {
                return false;
            }
        }
        if self.prefixes.len() >= self.max && !self.prefixes.contains_key(&key) {
            self.prefixes
                .retain(|_, (t, _)| now.saturating_since(*t) < interval);
            if self.prefixes.len() >= self.max {
                return false;
            }
        }
        self.dests.insert(dest, now);
        self.prefixes.insert(key, window);
        self.this_second += 1;
        true
    }
}

/// What response rate limiting decides for one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rrl {
    /// Send it.
    Send,
    /// Over the limit: send a truncated empty answer instead, so a real
    /// client retries over TCP (which is not limited).
    Slip,
    /// Over the limit: send nothing.
    Drop,
}

const RRL_BUCKETS: usize = crate::limits::DNS.rrl_buckets;

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    key: u128,
    /// Tokens in thousandths of a response.
    milli_tokens: u64,
    last: Time,
    dropped: u32,
}

/// Response rate limiting per client prefix (/24, /56), as Knot and NSD do:
/// a token bucket of `rate` responses a second (burst `rate`) per prefix;
/// over it, every `slip`-th response goes out truncated and the rest are
/// dropped (slip 0: all dropped). A fixed table of 4096 buckets; prefixes
/// that hash alike share one (which can only limit more, never less).
#[derive(Debug)]
pub struct RateLimiter {
    buckets: Vec<Bucket>,
    rate: u32,
    slip: u32,
}

impl RateLimiter {
    /// `rate` responses a second per prefix (0: unlimited), `slip`.
    pub fn new(rate: u32, slip: u32) -> RateLimiter {
        RateLimiter {
            buckets: if rate == 0 {
                Vec::new()
            } else {
                vec![Bucket::default(); RRL_BUCKETS]
            },
            rate,
            slip,
        }
    }

    /// Decides for one response to `client`.
    pub fn check(&mut self, client: IpAddr, now: Time) -> Rrl {
        if self.rate == 0 {
            return Rrl::Send;
        }
        let key = prefix_key(client, 24, 56);
        let h = ((key as u64) ^ ((key >> 64) as u64)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let Some(b) = self.buckets.get_mut((h >> 52) as usize % RRL_BUCKETS) else {
            return Rrl::Send;
        };
        let cap = u64::from(self.rate) * 1000;
        if b.key != key || b.last == Time::ZERO {
            *b = Bucket {
                key,
                milli_tokens: cap,
                last: now,
                dropped: 0,
            };
        } else {
            let elapsed_us = now.saturating_since(b.last).as_micros();
            let refill = elapsed_us.saturating_mul(u64::from(self.rate)) / 1000;
            b.milli_tokens = (b.milli_tokens.saturating_add(refill)).min(cap);
            b.last = now;
        }
        if b.milli_tokens >= 1000 {
            b.milli_tokens -= 1000;
            return Rrl::Send;
        }
        b.dropped = b.dropped.wrapping_add(1);
        if self.slip != 0 && b.dropped % self.slip == 0 {
            Rrl::Slip
        } else {
            Rrl::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn prefixes_group_a_slash_24_and_keep_families_apart() {
        assert_eq!(
            prefix_key(ip(10, 1, 2, 3), 24, 56),
            prefix_key(ip(10, 1, 2, 200), 24, 56)
        );
        assert_ne!(
            prefix_key(ip(10, 1, 2, 3), 24, 56),
            prefix_key(ip(10, 1, 3, 3), 24, 56)
        );
        let v6: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_ne!(
            prefix_key(v6, 24, 128),
            prefix_key(ip(10, 1, 2, 3), 24, 128)
        );
    }

    #[test]
    fn rrl_limits_a_prefix_and_slips_every_second_response() {
        let mut r = RateLimiter::new(5, 2);
        let now = Time(10_000_000);
        let client = ip(192, 0, 2, 1);
        for _ in 0..5 {
            assert_eq!(r.check(client, now), Rrl::Send);
        }
        assert_eq!(r.check(client, now), Rrl::Drop);
        assert_eq!(r.check(ip(192, 0, 2, 77), now), Rrl::Slip);
        // Another prefix has its own bucket.
        assert_eq!(r.check(ip(198, 51, 100, 1), now), Rrl::Send);
        // A second later the bucket has refilled.
        let later = now + Duration::from_secs(1);
        for _ in 0..5 {
            assert_eq!(r.check(client, later), Rrl::Send);
        }
        assert_ne!(r.check(client, later), Rrl::Send);
        let mut off = RateLimiter::new(0, 2);
        for _ in 0..10_000 {
            assert_eq!(off.check(client, now), Rrl::Send);
        }
    }

    #[test]
    fn probes_are_bounded_per_destination_prefix_and_second() {
        let mut p = ProbeLimiter::new(1000, Duration::from_secs(600), 2, 3);
        let now = Time(1_000_000);
        assert!(p.allow(ip(192, 0, 2, 1), now));
        // The same destination: not again within the interval.
        assert!(!p.allow(ip(192, 0, 2, 1), now));
        // The same /24: one more, then no.
        assert!(p.allow(ip(192, 0, 2, 2), now));
        assert!(!p.allow(ip(192, 0, 2, 3), now));
        // Per second in all.
        assert!(p.allow(ip(198, 51, 100, 1), now));
        assert!(!p.allow(ip(203, 0, 113, 1), now));
        assert!(p.allow(ip(203, 0, 113, 1), now + Duration::from_secs(1)));
        // After the interval the destination may be probed again.
        assert!(p.allow(ip(192, 0, 2, 1), now + Duration::from_secs(601)));
    }
}
