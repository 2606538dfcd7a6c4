//! Which origin addresses the proxy refuses to connect to (SSRF guard).
//!
//! The Host header of a Coralized request chooses what the proxy fetches, so
//! without a check any client could make a node fetch from its own loopback,
//! its LAN, a cloud metadata service (169.254.169.254) or any other address
//! that only the node can reach. [`classify`] names the class of every
//! address that is not globally routable unicast; the runtime refuses those
//! (403) unless `allow_private_origins` is set, and connects to exactly the
//! address it checked (no second resolution: DNS rebinding).
//!
//! IPv6 forms that embed an IPv4 address — IPv4-mapped (`::ffff:0:0/96`),
//! NAT64 (`64:ff9b::/96`), 6to4 (`2002::/16`) and Teredo (`2001::/32`) — are
//! classified by the IPv4 address they lead to.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused as an origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `0.0.0.0/8` ("this network") or `::` (unspecified).
    Unspecified,
    /// `127.0.0.0/8` or `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// RFC 6598 shared address space (carrier-grade NAT): `100.64/10`.
    SharedCgnat,
    /// `169.254/16` (cloud metadata services live here) or `fe80::/10`.
    LinkLocal,
    /// `224/4` or `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// Documentation ranges: `192.0.2/24`, `198.51.100/24`, `203.0.113/24`,
    /// `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// Benchmarking ranges: `198.18/15`, `2001:2::/48`.
    Benchmarking,
    /// Other special-purpose or reserved ranges: `192.0.0/24`, `192.88.99/24`,
    /// `240/4`, IPv4-compatible `::/96`, `100::/64`, ORCHID, site-local
    /// `fec0::/10`, local-use NAT64 `64:ff9b:1::/48`.
    Reserved,
    /// Unique local IPv6 addresses, `fc00::/7`.
    UniqueLocal,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::Unspecified => "an unspecified address",
            Refused::Loopback => "a loopback address",
            Refused::Private => "a private (RFC 1918) address",
            Refused::SharedCgnat => "a shared (CGNAT, RFC 6598) address",
            Refused::LinkLocal => "a link-local address",
            Refused::Multicast => "a multicast address",
            Refused::Broadcast => "the broadcast address",
            Refused::Documentation => "a documentation address",
            Refused::Benchmarking => "a benchmarking address",
            Refused::Reserved => "a reserved address",
            Refused::UniqueLocal => "a unique local (fc00::/7) address",
        })
    }
}

/// The class of `ip` if it is not a globally routable unicast address.
pub fn classify(ip: IpAddr) -> Option<Refused> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether the proxy may connect to `ip` as an origin: `Ok` for a global
/// unicast address, or for any address when `allow_private_origins`.
pub fn check(ip: IpAddr, allow_private_origins: bool) -> Result<(), Refused> {
    match classify(ip) {
        Some(why) if !allow_private_origins => Err(why),
        _ => Ok(()),
    }
}

fn in_v4(ip: u32, net: [u8; 4], prefix: u32) -> bool {
    let net = u32::from_be_bytes(net);
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    ip & mask == net & mask
}

fn classify_v4(ip: Ipv4Addr) -> Option<Refused> {
    let a = u32::from(ip);
    let table: &[([u8; 4], u32, Refused)] = &[
        ([0, 0, 0, 0], 8, Refused::Unspecified),
        ([10, 0, 0, 0], 8, Refused::Private),
        ([100, 64, 0, 0], 10, Refused::SharedCgnat),
        ([127, 0, 0, 0], 8, Refused::Loopback),
        ([169, 254, 0, 0], 16, Refused::LinkLocal),
        ([172, 16, 0, 0], 12, Refused::Private),
        ([192, 0, 0, 0], 24, Refused::Reserved),
        ([192, 0, 2, 0], 24, Refused::Documentation),
        ([192, 88, 99, 0], 24, Refused::Reserved),
        ([192, 168, 0, 0], 16, Refused::Private),
        ([198, 18, 0, 0], 15, Refused::Benchmarking),
        ([198, 51, 100, 0], 24, Refused::Documentation),
        ([203, 0, 113, 0], 24, Refused::Documentation),
        ([224, 0, 0, 0], 4, Refused::Multicast),
        ([255, 255, 255, 255], 32, Refused::Broadcast),
        ([240, 0, 0, 0], 4, Refused::Reserved),
    ];
    table
        .iter()
        .find(|(net, prefix, _)| in_v4(a, *net, *prefix))
        .map(|&(_, _, why)| why)
}

fn in_v6(ip: u128, net: u128, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    ip & mask == net & mask
}

fn classify_v6(ip: Ipv6Addr) -> Option<Refused> {
    let a = u128::from(ip);
    let low32 = Ipv4Addr::from(a as u32);
    if a == 0 {
        return Some(Refused::Unspecified);
    }
    if a == 1 {
        return Some(Refused::Loopback);
    }
    // IPv4-mapped ::ffff:a.b.c.d and NAT64 64:ff9b::a.b.c.d lead to the
    // IPv4 address; a public one is allowed.
    if in_v6(a, 0xffff << 32, 96) || in_v6(a, 0x0064_ff9b << 96, 96) {
        return classify_v4(low32);
    }
    // 6to4: 2002:AABB:CCDD::/48 leads to AA.BB.CC.DD.
    if in_v6(a, 0x2002 << 112, 16) {
        return classify_v4(Ipv4Addr::from((a >> 80) as u32));
    }
    let table: &[(u128, u32, Refused)] = &[
        (0, 96, Refused::Reserved), // IPv4-compatible (deprecated)
        (0x0064_ff9b_0001 << 80, 48, Refused::Reserved), // local-use NAT64
        (0x0100 << 112, 64, Refused::Reserved), // discard-only
        (0x2001_0002 << 96, 48, Refused::Benchmarking), // 2001:2::/48
        (0x2001_0010 << 96, 28, Refused::Reserved), // ORCHID
        (0x2001_0020 << 96, 28, Refused::Reserved), // ORCHIDv2
        (0x2001_0db8 << 96, 32, Refused::Documentation), // 2001:db8::/32
        (0x3fff << 112, 20, Refused::Documentation), // 3fff::/20
        (0xfc00 << 112, 7, Refused::UniqueLocal), // fc00::/7
        (0xfe80 << 112, 10, Refused::LinkLocal), // fe80::/10
        (0xfec0 << 112, 10, Refused::Reserved), // site-local (deprecated)
        (0xff00 << 112, 8, Refused::Multicast), // ff00::/8
    ];
    if let Some(&(_, _, why)) = table
        .iter()
        .find(|(net, prefix, _)| in_v6(a, *net, *prefix))
    {
        return Some(why);
    }
    // Teredo 2001:0::/32: the server's IPv4 address in bits 32..64, the
    // client's (inverted) in the last 32 bits; either may lead inside.
    if in_v6(a, 0x2001_0000 << 96, 32) {
        let server = Ipv4Addr::from((a >> 64) as u32);
        let client = Ipv4Addr::from(!(a as u32));
        return classify_v4(server).or_else(|| classify_v4(client));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Option<Refused> {
        classify(s.parse::<Ipv4Addr>().unwrap().into())
    }

    fn v6(s: &str) -> Option<Refused> {
        classify(s.parse::<Ipv6Addr>().unwrap().into())
    }

    #[test]
    fn ipv4_this_network_and_loopback() {
        assert_eq!(v4("0.0.0.0"), Some(Refused::Unspecified));
        assert_eq!(v4("0.255.1.2"), Some(Refused::Unspecified));
        assert_eq!(v4("127.0.0.1"), Some(Refused::Loopback));
        assert_eq!(v4("127.11.0.1"), Some(Refused::Loopback));
        assert_eq!(v4("127.255.255.255"), Some(Refused::Loopback));
    }

    #[test]
    fn ipv4_rfc1918_private() {
        for a in [
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
        ] {
            assert_eq!(v4(a), Some(Refused::Private), "{a}");
        }
        assert_eq!(v4("172.15.255.255"), None);
        assert_eq!(v4("172.32.0.0"), None);
        assert_eq!(v4("11.0.0.1"), None);
    }

    #[test]
    fn ipv4_cgnat_rfc6598() {
        assert_eq!(v4("100.64.0.1"), Some(Refused::SharedCgnat));
        assert_eq!(v4("100.127.255.255"), Some(Refused::SharedCgnat));
        assert_eq!(v4("100.63.255.255"), None);
        assert_eq!(v4("100.128.0.0"), None);
    }

    #[test]
    fn ipv4_link_local_and_metadata() {
        assert_eq!(v4("169.254.169.254"), Some(Refused::LinkLocal));
        assert_eq!(v4("169.254.0.1"), Some(Refused::LinkLocal));
        assert_eq!(v4("169.253.0.1"), None);
    }

    #[test]
    fn ipv4_multicast_broadcast_and_reserved() {
        assert_eq!(v4("224.0.0.1"), Some(Refused::Multicast));
        assert_eq!(v4("239.255.255.250"), Some(Refused::Multicast));
        assert_eq!(v4("255.255.255.255"), Some(Refused::Broadcast));
        assert_eq!(v4("240.0.0.1"), Some(Refused::Reserved));
        assert_eq!(v4("255.255.255.254"), Some(Refused::Reserved));
        assert_eq!(v4("192.0.0.8"), Some(Refused::Reserved));
        assert_eq!(v4("192.88.99.1"), Some(Refused::Reserved));
    }

    #[test]
    fn ipv4_documentation_and_benchmarking() {
        for a in ["192.0.2.1", "198.51.100.7", "203.0.113.255"] {
            assert_eq!(v4(a), Some(Refused::Documentation), "{a}");
        }
        assert_eq!(v4("198.18.0.1"), Some(Refused::Benchmarking));
        assert_eq!(v4("198.19.255.255"), Some(Refused::Benchmarking));
        assert_eq!(v4("198.20.0.0"), None);
    }

    #[test]
    fn ipv4_public_addresses_pass() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "192.0.3.1",
            "223.255.255.255",
        ] {
            assert_eq!(v4(a), None, "{a}");
        }
    }

    #[test]
    fn ipv6_loopback_unspecified_ula_link_local_multicast() {
        assert_eq!(v6("::"), Some(Refused::Unspecified));
        assert_eq!(v6("::1"), Some(Refused::Loopback));
        assert_eq!(v6("fd00::1"), Some(Refused::UniqueLocal));
        assert_eq!(v6("fc12:3456::1"), Some(Refused::UniqueLocal));
        assert_eq!(v6("fe80::1"), Some(Refused::LinkLocal));
        assert_eq!(v6("febf::1"), Some(Refused::LinkLocal));
        assert_eq!(v6("fec0::1"), Some(Refused::Reserved));
        assert_eq!(v6("ff02::1"), Some(Refused::Multicast));
        assert_eq!(v6("2001:db8::1"), Some(Refused::Documentation));
        assert_eq!(v6("3fff::1"), Some(Refused::Documentation));
        assert_eq!(v6("2001:2::1"), Some(Refused::Benchmarking));
        assert_eq!(v6("100::1"), Some(Refused::Reserved));
        assert_eq!(v6("::7f00:1"), Some(Refused::Reserved));
    }

    #[test]
    fn ipv6_forms_of_ipv4_lead_to_the_ipv4_rule() {
        // IPv4-mapped.
        assert_eq!(v6("::ffff:127.0.0.1"), Some(Refused::Loopback));
        assert_eq!(v6("::ffff:169.254.169.254"), Some(Refused::LinkLocal));
        assert_eq!(v6("::ffff:10.1.2.3"), Some(Refused::Private));
        assert_eq!(v6("::ffff:8.8.8.8"), None);
        // NAT64 well-known prefix.
        assert_eq!(v6("64:ff9b::127.0.0.1"), Some(Refused::Loopback));
        assert_eq!(v6("64:ff9b::192.168.0.1"), Some(Refused::Private));
        assert_eq!(v6("64:ff9b::8.8.8.8"), None);
        assert_eq!(v6("64:ff9b:1::1"), Some(Refused::Reserved));
        // 6to4.
        assert_eq!(v6("2002:7f00:0001::1"), Some(Refused::Loopback));
        assert_eq!(v6("2002:a9fe:a9fe::1"), Some(Refused::LinkLocal));
        assert_eq!(v6("2002:0808:0808::1"), None);
        // Teredo: server 127.0.0.1, or client 10.0.0.1 inverted.
        assert_eq!(v6("2001:0:7f00:1::1"), Some(Refused::Loopback));
        assert_eq!(v6("2001:0:808:808::f5ff:fffe"), Some(Refused::Private));
        assert_eq!(v6("2001:0:808:808::f7f7:f7f7"), None);
    }

    #[test]
    fn ipv6_public_addresses_pass() {
        for a in [
            "2606:4700::1111",
            "2a00:1450:4001::1",
            "2001:4860:4860::8888",
        ] {
            assert_eq!(v6(a), None, "{a}");
        }
    }

    #[test]
    fn allow_private_origins_lets_everything_through() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(check(lo, false), Err(Refused::Loopback));
        assert_eq!(check(lo, true), Ok(()));
        assert_eq!(check("8.8.8.8".parse().unwrap(), false), Ok(()));
    }
}
