//! Start-up hints (NSDI 2004 §3.1, §4.4): a traceroute-like probe that finds
//! the first gateway routers toward another node, so the node can store
//! clustering hints under their addresses.
//!
//! All probes go out at once (one UDP datagram per TTL 1..=`hops_max`, to
//! port 33434 + TTL), and the ICMP "time exceeded" answers are read from the
//! socket's error queue (`IP_RECVERR`; for IPv6 the hop limit per probe is
//! `IPV6_UNICAST_HOPS` and the ICMPv6 answers come through `IPV6_RECVERR`),
//! so the whole map takes about one round trip plus the timeout — the
//! "concurrent probes and aggressive time-outs" of §3.1. It is blocking I/O:
//! the runtime runs it on a thread of its own, off the executors.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The first UDP port probed (traceroute's).
const PROBE_PORT_BASE: u16 = 33434;

/// One router on the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// Its distance in hops.
    pub ttl: u8,
    /// The address it answered from.
    pub addr: IpAddr,
}

/// Probes the path toward `to` (IPv4 or IPv6) and returns the routers that
/// answered within `timeout`, nearest first. Stops listening early once the
/// destination itself answers (port unreachable) and the routers before it
/// have (or a short grace after it).
pub fn discover_routers(to: IpAddr, hops_max: u8, timeout: Duration) -> io::Result<Vec<Hop>> {
    Ok(trace(to, hops_max, timeout)?.hops)
}

/// What one probe of a path found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The routers that answered, nearest first.
    pub hops: Vec<Hop>,
    /// The round trip to the destination itself, if it answered (its port
    /// unreachable, timed from the sending of the probes).
    pub rtt: Option<Duration>,
}

/// Probes the path toward `to` (IPv4, or IPv6 — an IPv4-mapped IPv6
/// address is probed as the IPv4 one): the routers on it, nearest first,
/// and the destination's round-trip time. All probes go out at once; after
/// the destination answers, listening goes on only until every router
/// before it has answered or for a grace as long again as the round trip
/// (the last routers' answers come about with the destination's), within
/// `timeout` in all.
pub fn trace(to: IpAddr, hops_max: u8, timeout: Duration) -> io::Result<Trace> {
    let to = to.to_canonical();
    // The socket of `to`'s family, its error queue on, and the option that
    // sets each probe's TTL (IPv4) or hop limit (IPv6).
    let (sock, hops_level, hops_name) = match to {
        IpAddr::V4(_) => {
            let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
            set_int(sock.as_raw_fd(), libc::IPPROTO_IP, libc::IP_RECVERR, 1)?;
            (sock, libc::IPPROTO_IP, libc::IP_TTL)
        }
        IpAddr::V6(_) => {
            let sock = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0))?;
            set_int(sock.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)?;
            (sock, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS)
        }
    };
    let fd = sock.as_raw_fd();
    let start = Instant::now();
    for ttl in 1..=hops_max {
        set_int(fd, hops_level, hops_name, i32::from(ttl))?;
        let dst = SocketAddr::new(to, PROBE_PORT_BASE + u16::from(ttl));
        // An ICMP error for an earlier probe can surface as this send's error
        // (the report itself stays in the error queue): that send is then
        // tried once more.
        if sock.send_to(b"coral hint probe", dst).is_err() {
            sock.send_to(b"coral hint probe", dst)?;
        }
    }
    let mut deadline = start + timeout;
    let mut hops: Vec<Hop> = Vec::new();
    let mut rtt = None;
    let mut reached_ttl: Option<u8> = None;
    loop {
        if let Some(r) = reached_ttl {
            // Every router before the destination has answered.
            if hops.iter().filter(|h| h.ttl < r).count() + 1 >= usize::from(r) {
                break;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd for our open socket; nfds is 1.
        let n = unsafe {
            libc::poll(
                &mut pfd,
                1,
                left.as_millis().clamp(1, i32::MAX as u128) as i32,
            )
        };
        if n <= 0 {
            break;
        }
        match read_error(fd)? {
            Some(ErrorReport { ttl, from, reached }) => {
                if reached {
                    if rtt.is_none() && from == to {
                        let elapsed = start.elapsed();
                        rtt = Some(elapsed);
                        deadline =
                            deadline.min(Instant::now() + elapsed.max(Duration::from_millis(2)));
                    }
                    if let Some(t) = ttl {
                        reached_ttl = Some(reached_ttl.map_or(t, |r| r.min(t)));
                    } else if reached_ttl.is_none() {
                        break;
                    }
                } else if let Some(ttl) = ttl {
                    if !hops.iter().any(|h| h.ttl == ttl) {
                        hops.push(Hop { ttl, addr: from });
                    }
                }
            }
            None => continue,
        }
    }
    if let Some(r) = reached_ttl {
        hops.retain(|h| h.ttl < r);
    }
    hops.sort_by_key(|h| h.ttl);
    Ok(Trace { hops, rtt })
}

struct ErrorReport {
    /// The probe's TTL, from the destination port it was sent to.
    ttl: Option<u8>,
    /// Who sent the ICMP error.
    from: IpAddr,
    /// Whether the destination itself answered (port unreachable).
    reached: bool,
}

fn set_int(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads one report from the socket's error queue: an ICMP error
/// (`IP_RECVERR`) or an ICMPv6 one (`IPV6_RECVERR`), with the probe it
/// answers (by its destination port) and the offender's address.
fn read_error(fd: i32) -> io::Result<Option<ErrorReport>> {
    let mut data = [0u8; 256];
    let mut control = [0u64; 64]; // u64 for cmsg alignment

    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: zeroed msghdr is valid; every pointer set below refers to a
    // live local buffer with its true length.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` is fully initialised as above.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        };
    }
    // The probe's destination (its port names its TTL). sin_port and
    // sin6_port lie at the same offset, after the family.
    let port = match i32::from(name.ss_family) {
        libc::AF_INET | libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in or sockaddr_in6 of the
            // family checked; the storage is large and aligned enough.
            let sin =
                unsafe { &*(&name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            u16::from_be(sin.sin_port)
        }
        _ => 0,
    };
    let ttl = port
        .checked_sub(PROBE_PORT_BASE)
        .and_then(|t| u8::try_from(t).ok());
    // SAFETY: CMSG_* walk the control buffer the kernel filled, bounded by
    // msg_controllen; the extended error and its offender address follow
    // the cmsg header as the kernel lays them out (IP_RECVERR,
    // IPV6_RECVERR).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let (level, kind) = ((*cmsg).cmsg_level, (*cmsg).cmsg_type);
            let v4 = level == libc::IPPROTO_IP && kind == libc::IP_RECVERR;
            let v6 = level == libc::IPPROTO_IPV6 && kind == libc::IPV6_RECVERR;
            if v4 || v6 {
                let ee = libc::CMSG_DATA(cmsg) as *const libc::sock_extended_err;
                let ee_val = std::ptr::read_unaligned(ee);
                let off = libc::SO_EE_OFFENDER(ee);
                // ICMP: type 11 = time exceeded (a router), 3 = destination
                // unreachable (the end); ICMPv6: 3 and 1. Anything else (a
                // local error, packet too big, a parameter problem) names
                // no hop.
                let (from, reached) = if v4 && ee_val.ee_origin == libc::SO_EE_ORIGIN_ICMP {
                    let off = std::ptr::read_unaligned(off as *const libc::sockaddr_in);
                    let from = IpAddr::V4(Ipv4Addr::from(u32::from_be(off.sin_addr.s_addr)));
                    match ee_val.ee_type {
                        11 => (from, false),
                        3 => (from, true),
                        _ => return Ok(None),
                    }
                } else if v6 && ee_val.ee_origin == libc::SO_EE_ORIGIN_ICMP6 {
                    let off = std::ptr::read_unaligned(off as *const libc::sockaddr_in6);
                    let from = IpAddr::V6(Ipv6Addr::from(off.sin6_addr.s6_addr));
                    match ee_val.ee_type {
                        3 => (from, false),
                        1 => (from, true),
                        _ => return Ok(None),
                    }
                } else {
                    return Ok(None);
                };
                return Ok(Some(ErrorReport { ttl, from, reached }));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(None)
}

/// The IPv4 and IPv6 subnets this host is directly connected to, as
/// (network address, prefix length), from the interfaces' addresses and
/// netmasks (§4.4: "any IP subnets they directly connect to"). Which of them
/// may be hints is for `coral::dsht::cluster::hint_keys` to decide (not private,
/// loopback or link-local ones).
pub fn local_subnets() -> Vec<(IpAddr, u8)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we own until freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_netmask.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points at a sockaddr whose family we check before
        // reading it as a sockaddr_in or sockaddr_in6; the netmask has the
        // same family.
        let subnet = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let addr = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    let mask = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                    let a = u32::from_be(addr.sin_addr.s_addr);
                    let m = u32::from_be(mask.sin_addr.s_addr);
                    (IpAddr::V4(Ipv4Addr::from(a & m)), m.leading_ones() as u8)
                }
                libc::AF_INET6 => {
                    let addr = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    let mask = &*(ifa.ifa_netmask as *const libc::sockaddr_in6);
                    let a = u128::from_be_bytes(addr.sin6_addr.s6_addr);
                    let m = u128::from_be_bytes(mask.sin6_addr.s6_addr);
                    (IpAddr::V6(Ipv6Addr::from(a & m)), m.leading_ones() as u8)
                }
                _ => continue,
            }
        };
        if !out.contains(&subnet) {
            out.push(subnet);
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_among_the_local_subnets() {
        let subnets = local_subnets();
        assert!(
            subnets.contains(&(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8)),
            "{subnets:?}"
        );
        // ::1/128 where the host has IPv6 on its loopback.
        let has_v6_lo = std::fs::read_to_string("/proc/net/if_inet6").is_ok_and(|t| {
            t.lines()
                .any(|l| l.starts_with("00000000000000000000000000000001"))
        });
        if has_v6_lo {
            assert!(
                subnets.contains(&(IpAddr::V6(Ipv6Addr::LOCALHOST), 128)),
                "{subnets:?}"
            );
        }
    }
}
