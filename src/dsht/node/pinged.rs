//! The addresses a node pinged to verify them (`Node::observe_requester`,
//! `Node::request_identity`), each with when and whether it answered.

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::dsht::id::KeyedBuildHasher;
use crate::time::{Duration, Time};

/// How long a verification ping holds its address from another.
pub(super) const PINGED_RECENTLY: Duration = Duration::from_secs(60);

/// A verification ping (or identity request) sent to an address: at most
/// one a [`PINGED_RECENTLY`] per address, so that a forged source cannot
/// make the node ping a victim more often, unless the address answered the
/// last one. A sender that proved its address and that the node then forgot
/// (its entry in the direct-mapped cache of answered senders overwritten by
/// another's, and not in a full bucket) is pinged again at its next request,
/// not held to the unverified rate for up to a minute: an honest peer would
/// otherwise be blocked (`rate_block_secs`) until the minute ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pinged {
    pub(super) at: Time,
    /// The address answered this ping.
    pub(super) answered: bool,
}

impl Pinged {
    pub(super) fn new(at: Time) -> Pinged {
        Pinged {
            at,
            answered: false,
        }
    }

    pub(super) fn recent(&self, now: Time) -> bool {
        now.saturating_since(self.at) < PINGED_RECENTLY
    }
}

/// The top bit of a packed [`Pinged`]: the address answered.
const ANSWERED: u64 = 1 << 63;

/// The pinged addresses, by address. An IPv4 address and its record take 16
/// bytes (the address and port as one `u64` key, the time with the answer
/// in its top bit as the value) where a `(SocketAddr, Pinged)` took 48: the
/// map holds every address pinged in the last minute, and each node of a
/// joining network pings every newcomer that asks it anything, so during
/// the join it was the largest thing a simulated node held (4.9 KB of
/// 19.4 KB at 20,000 nodes, issue 27). Other addresses keep the plain form.
/// A time is held to 2^63 − 1 µs (292,000 years past the clock's epoch).
/// The two maps are looked up by key only; nothing depends on their order.
#[derive(Clone, Debug)]
pub(super) struct PingedAddrs {
    v4: HashMap<u64, u64, KeyedBuildHasher>,
    other: HashMap<SocketAddr, Pinged, KeyedBuildHasher>,
}

fn key_v4(addr: &SocketAddr) -> Option<u64> {
    match addr {
        SocketAddr::V4(a) => Some(u64::from(u32::from(*a.ip())) << 16 | u64::from(a.port())),
        SocketAddr::V6(_) => None,
    }
}

fn pack(p: Pinged) -> u64 {
    p.at.0.min(ANSWERED - 1) | if p.answered { ANSWERED } else { 0 }
}

fn unpack(v: u64) -> Pinged {
    Pinged {
        at: Time(v & !ANSWERED),
        answered: v & ANSWERED != 0,
    }
}

impl PingedAddrs {
    /// An empty set whose maps hash with `v4` and `other` (keyed: the
    /// addresses come from the network).
    pub(super) fn new(v4: KeyedBuildHasher, other: KeyedBuildHasher) -> PingedAddrs {
        PingedAddrs {
            v4: HashMap::with_hasher(v4),
            other: HashMap::with_hasher(other),
        }
    }

    /// Addresses held.
    pub(super) fn len(&self) -> usize {
        self.v4.len() + self.other.len()
    }

    /// The last ping sent to `addr`, if held.
    pub(super) fn get(&self, addr: &SocketAddr) -> Option<Pinged> {
        match key_v4(addr) {
            Some(k) => self.v4.get(&k).map(|&v| unpack(v)),
            None => self.other.get(addr).copied(),
        }
    }

    /// Records a ping sent to `addr`, replacing the one before.
    pub(super) fn insert(&mut self, addr: SocketAddr, p: Pinged) {
        match key_v4(&addr) {
            Some(k) => {
                self.v4.insert(k, pack(p));
            }
            None => {
                self.other.insert(addr, p);
            }
        }
    }

    /// Forgets the ping sent to `addr`.
    pub(super) fn remove(&mut self, addr: &SocketAddr) {
        match key_v4(addr) {
            Some(k) => {
                self.v4.remove(&k);
            }
            None => {
                self.other.remove(addr);
            }
        }
    }

    /// Records that `addr` answered its ping, if one is held.
    pub(super) fn set_answered(&mut self, addr: &SocketAddr) {
        match key_v4(addr) {
            Some(k) => {
                if let Some(v) = self.v4.get_mut(&k) {
                    *v |= ANSWERED;
                }
            }
            None => {
                if let Some(p) = self.other.get_mut(addr) {
                    p.answered = true;
                }
            }
        }
    }

    /// Forgets the pings older than [`PINGED_RECENTLY`] at `now`.
    pub(super) fn retain_recent(&mut self, now: Time) {
        self.v4.retain(|_, v| unpack(*v).recent(now));
        self.other.retain(|_, p| p.recent(now));
    }

    /// Shrinks each map to twice its entries where `roomy(capacity, len)`.
    pub(super) fn release_idle_capacity(&mut self, roomy: impl Fn(usize, usize) -> bool) {
        if roomy(self.v4.capacity(), self.v4.len()) {
            self.v4.shrink_to(2 * self.v4.len());
        }
        if roomy(self.other.capacity(), self.other.len()) {
            self.other.shrink_to(2 * self.other.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hasher(seed: u64) -> KeyedBuildHasher {
        KeyedBuildHasher::with_seeds(seed, 1, 2, 3)
    }

    #[test]
    fn v4_and_v6_addresses_keep_their_records_apart() {
        let mut p = PingedAddrs::new(hasher(1), hasher(2));
        let a: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let b: SocketAddr = "10.0.0.1:7001".parse().unwrap();
        let c: SocketAddr = "[::ffff:10.0.0.1]:7000".parse().unwrap();
        p.insert(a, Pinged::new(Time(5)));
        p.insert(b, Pinged::new(Time(6)));
        p.insert(c, Pinged::new(Time(7)));
        assert_eq!(p.len(), 3);
        assert_eq!(p.get(&a), Some(Pinged::new(Time(5))));
        assert_eq!(p.get(&b), Some(Pinged::new(Time(6))));
        assert_eq!(p.get(&c), Some(Pinged::new(Time(7))));
        p.set_answered(&a);
        p.set_answered(&c);
        assert!(p.get(&a).unwrap().answered && p.get(&c).unwrap().answered);
        assert!(!p.get(&b).unwrap().answered);
        assert_eq!(p.get(&a).unwrap().at, Time(5));
        // A new ping replaces the answered one.
        p.insert(a, Pinged::new(Time(9)));
        assert_eq!(p.get(&a), Some(Pinged::new(Time(9))));
    }

    #[test]
    fn old_pings_are_forgotten_after_a_minute() {
        let mut p = PingedAddrs::new(hasher(1), hasher(2));
        let a: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let c: SocketAddr = "[2001:db8::1]:7000".parse().unwrap();
        let t0 = Time(1_000_000);
        p.insert(a, Pinged::new(t0));
        p.insert(c, Pinged::new(t0));
        p.retain_recent(t0 + PINGED_RECENTLY - Duration(1));
        assert_eq!(p.len(), 2);
        p.retain_recent(t0 + PINGED_RECENTLY);
        assert_eq!(p.len(), 0);
        assert_eq!(p.get(&a), None);
    }

    #[test]
    fn a_time_past_the_top_bit_is_held_to_it() {
        let mut p = PingedAddrs::new(hasher(1), hasher(2));
        let a: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        p.insert(a, Pinged::new(Time(u64::MAX)));
        let got = p.get(&a).unwrap();
        assert_eq!(got.at, Time(ANSWERED - 1));
        assert!(!got.answered);
    }
}
