//! Start-up hints (NSDI 2004 §3.1, §4.4): a traceroute-like probe that finds
//! the first gateway routers toward another node, so the node can store
//! clustering hints under their addresses.
//!
//! All probes go out at once (one UDP datagram per TTL 1..=`hops_max`, to
//! port 33434 + TTL), and the ICMP "time exceeded" answers are read from the
//! socket's error queue (`IP_RECVERR`), so the whole map takes about one
//! round trip plus the timeout — the "concurrent probes and aggressive
//! time-outs" of §3.1. It is blocking I/O: the runtime runs it on a thread
//! of its own, off the executors.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
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

/// Probes the path toward `to` (IPv4) and returns the routers that answered
/// within `timeout`, nearest first. Stops listening early once the
/// destination itself answers (port unreachable) and the routers before it
/// have (or a short grace after it).
pub fn discover_routers(to: Ipv4Addr, hops_max: u8, timeout: Duration) -> io::Result<Vec<Hop>> {
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

/// Probes the path toward `to` (IPv4): the routers on it, nearest first,
/// and the destination's round-trip time. All probes go out at once; after
/// the destination answers, listening goes on only until every router
/// before it has answered or for a grace as long again as the round trip
/// (the last routers' answers come about with the destination's), within
/// `timeout` in all.
pub fn trace(to: Ipv4Addr, hops_max: u8, timeout: Duration) -> io::Result<Trace> {
    let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
    let fd = sock.as_raw_fd();
    set_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1)?;
    let start = Instant::now();
    for ttl in 1..=hops_max {
        set_int(fd, libc::IPPROTO_IP, libc::IP_TTL, i32::from(ttl))?;
        let dst = SocketAddr::V4(SocketAddrV4::new(to, PROBE_PORT_BASE + u16::from(ttl)));
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
                    if rtt.is_none() && from == IpAddr::V4(to) {
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

/// Reads one report from the socket's error queue.
fn read_error(fd: i32) -> io::Result<Option<ErrorReport>> {
    let mut data = [0u8; 256];
    let mut control = [0u64; 64]; // u64 for cmsg alignment
    let mut name: libc::sockaddr_in = unsafe_zeroed_sockaddr_in();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: zeroed msghdr is valid; every pointer set below refers to a
    // live local buffer with its true length.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut name as *mut libc::sockaddr_in).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
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
    let port = u16::from_be(name.sin_port);
    let ttl = port
        .checked_sub(PROBE_PORT_BASE)
        .and_then(|t| u8::try_from(t).ok());
    // SAFETY: CMSG_* walk the control buffer the kernel filled, bounded by
    // msg_controllen; the extended error and its offender address follow
    // the cmsg header as the kernel lays them out (IP_RECVERR).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::IPPROTO_IP && (*cmsg).cmsg_type == libc::IP_RECVERR {
                let ee = libc::CMSG_DATA(cmsg) as *const libc::sock_extended_err;
                let ee_val = std::ptr::read_unaligned(ee);
                if ee_val.ee_origin != libc::SO_EE_ORIGIN_ICMP {
                    return Ok(None);
                }
                let off = libc::SO_EE_OFFENDER(ee) as *const libc::sockaddr_in;
                let off = std::ptr::read_unaligned(off);
                let from = IpAddr::V4(Ipv4Addr::from(u32::from_be(off.sin_addr.s_addr)));
                // ICMP type 11 = time exceeded (a router); 3 = unreachable (the end).
                let reached = ee_val.ee_type == 3;
                return Ok(Some(ErrorReport { ttl, from, reached }));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(None)
}

fn unsafe_zeroed_sockaddr_in() -> libc::sockaddr_in {
    // SAFETY: all-zero bytes are a valid sockaddr_in.
    unsafe { std::mem::zeroed() }
}

/// The IPv4 subnets this host is directly connected to, as (network
/// address, prefix length), from the interfaces' addresses and netmasks
/// (§4.4: "any IP subnets they directly connect to"). Which of them may be
/// hints is for `coral::cluster::hint_keys` to decide (not private ones).
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
        // reading it as a sockaddr_in; the netmask has the same family.
        unsafe {
            if i32::from((*ifa.ifa_addr).sa_family) != libc::AF_INET {
                continue;
            }
            let addr = &*(ifa.ifa_addr as *const libc::sockaddr_in);
            let mask = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
            let a = u32::from_be(addr.sin_addr.s_addr);
            let m = u32::from_be(mask.sin_addr.s_addr);
            let len = m.leading_ones() as u8;
            let net = IpAddr::V4(Ipv4Addr::from(a & m));
            if !out.contains(&(net, len)) {
                out.push((net, len));
            }
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
    }
}
