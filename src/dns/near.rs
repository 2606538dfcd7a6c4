//! Proxies near a client, found through clustering hints (NSDI 2004 §3.1,
//! §4.4): nodes store a pointer to themselves under the addresses (and /24
//! prefixes) of their nearby routers and their directly connected subnets.
//! dnssrv probes a client's path, takes the last hops (the routers nearest
//! the client) and the client's own /24, and gets those same keys from the
//! DSHT; the nodes named there sit near the client.
//!
//! What such a lookup found is remembered per client network, beside its
//! RTT, in `networks.rs` (bounded; every entry expires).

use std::net::{IpAddr, SocketAddr};

use crate::dsht::cluster::{hint_prefix_key, is_hint_address};
use crate::dsht::id::{Id, Key};

/// Routers at the end of a client's path whose hints are looked up.
pub const HINT_HOPS_LAST: usize = 2;
/// Hint keys looked up for one client (per hop: its address and its /24 or
/// /48; and the client's own /24 or /48).
pub const HINT_LOOKUP_KEYS_MAX: usize = 2 * HINT_HOPS_LAST + 1;
/// Nodes remembered as near one client network.
pub const NEAR_NODES_MAX: usize = crate::limits::DNS.near_nodes_max;

/// The hint keys for a client at `client` whose path (nearest the prober
/// first) is `hops`: each of the last [`HINT_HOPS_LAST`] routers' address
/// and /24 (/48) prefix, nearest the client first, then the client's own
/// /24 (/48) — exactly the keys `cluster::hint_keys` has nodes store under
/// for their gateway routers and directly connected subnets. Private
/// addresses name different places on different networks and are skipped.
pub fn lookup_keys(client: IpAddr, hops: &[IpAddr]) -> ([Key; HINT_LOOKUP_KEYS_MAX], usize) {
    let mut keys = [Id::ZERO; HINT_LOOKUP_KEYS_MAX];
    let mut n = 0;
    let mut add = |k: Key| {
        if n < HINT_LOOKUP_KEYS_MAX && !keys[..n].contains(&k) {
            keys[n] = k;
            n += 1;
        }
    };
    for &hop in hops
        .iter()
        .rev()
        .filter(|h| **h != client && is_hint_address(**h))
        .take(HINT_HOPS_LAST)
    {
        add(Id::from_ip(hop));
        add(hint_prefix_key(hop, if hop.is_ipv4() { 24 } else { 48 }));
    }
    if is_hint_address(client) {
        add(hint_prefix_key(
            client,
            if client.is_ipv4() { 24 } else { 48 },
        ));
    }
    (keys, n)
}

/// The nodes found near one client network (DSHT addresses), nearest-hop
/// first, from the front.
pub type NearNodes = [Option<SocketAddr>; NEAR_NODES_MAX];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsht::cluster::hint_keys;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn lookup_keys_are_the_keys_nodes_near_the_client_store_under() {
        // A node behind the client's last router, whose first two gateway
        // routers the start-up probe found, and its own subnet.
        let stored = hint_keys(
            &[ip("198.19.1.1"), ip("198.19.5.1")],
            &[(ip("198.19.1.0"), 24)],
        );
        // dnssrv's probe toward the client 198.18.2.2: its own gateway
        // first, then the client's last router (answering from its
        // interface on the 198.19.5.0/24 link).
        let (keys, n) = lookup_keys(ip("198.18.2.2"), &[ip("198.18.6.1"), ip("198.19.5.2")]);
        let keys = &keys[..n];
        assert_eq!(n, 5);
        // The last hop first: its address, then its /24, shared with the
        // node's second router.
        assert_eq!(keys[0], Id::from_ip(ip("198.19.5.2")));
        assert_eq!(keys[1], hint_prefix_key(ip("198.19.5.0"), 24));
        assert!(stored.contains(&keys[1]));
        assert_eq!(keys[4], hint_prefix_key(ip("198.18.2.0"), 24));
        // A client on the node's own subnet meets it through its /24.
        let (k2, n2) = lookup_keys(ip("198.19.1.77"), &[]);
        assert_eq!(n2, 1);
        assert!(stored.contains(&k2[0]));
        // Private addresses are not hints.
        let (_, none) = lookup_keys(ip("10.1.2.3"), &[ip("192.168.1.1")]);
        assert_eq!(none, 0);
    }

    #[test]
    fn only_the_last_hops_are_used() {
        let hops = [ip("198.18.6.1"), ip("198.18.7.1"), ip("198.18.8.1")];
        let (keys, n) = lookup_keys(ip("203.0.113.9"), &hops);
        let keys = &keys[..n];
        assert!(keys.contains(&Id::from_ip(ip("198.18.8.1"))));
        assert!(keys.contains(&Id::from_ip(ip("198.18.7.1"))));
        // The prober's own gateway is the first hop: not near the client.
        assert!(!keys.contains(&Id::from_ip(ip("198.18.6.1"))));
    }
}
