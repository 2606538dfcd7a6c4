//! Steering datagrams to the core that owns them, in the kernel.
//!
//! Every core has its own UDP socket on the DSHT address, all in one
//! SO_REUSEPORT group. The kernel would spread datagrams by address hash;
//! a classic BPF program attached to the group instead picks the socket from
//! the datagram's *route* field (bytes 2–3 of the payload, see
//! `coral::dsht::wire`): requests for a key carry the key's first two bytes, and
//! replies echo the route of their request. So a datagram reaches the core
//! that owns its key or its pending RPC with no user-space hop:
//!
//! ```text
//! ldh [2]        ; A = route (payload offset 2, big-endian)
//! mul #cores     ; A = route · cores
//! rsh #16        ; A = route · cores / 65536  ∈ [0, cores)
//! ret A          ; index of the socket in the group (bind order)
//! ```
//!
//! A datagram too short to hold a route makes the load fail; the kernel then
//! falls back to its hash, and the core that receives it drops it as
//! malformed. The group's order is the bind order, so the sockets are made
//! and bound here, in order, before any executor starts.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};

/// The shard (core index) that owns `route` among `cores`.
pub fn shard_of_route(route: u16, cores: usize) -> usize {
    ((u32::from(route) * cores as u32) >> 16) as usize
}

/// The shard that owns `key`.
pub fn shard_of_key(key: &coral::Id, cores: usize) -> usize {
    shard_of_route(coral::dsht::node::route_of(key), cores)
}

/// A route value that core `core` of `cores` owns (for requests that are not
/// for a key: their replies must come back to the sender's core).
pub fn route_for_core(core: usize, cores: usize) -> u16 {
    (((2 * core as u32 + 1) << 16) / (2 * cores as u32)) as u16
}

/// Binds `cores` UDP sockets to `addr` in one reuseport group and, with more
/// than one, attaches the steering program. Returns the raw descriptors in
/// group order; the caller hands descriptor `i` to core `i`.
pub fn bind_group(addr: SocketAddr, cores: usize) -> io::Result<Vec<RawFd>> {
    let mut sockets = Vec::with_capacity(cores);
    for _ in 0..cores {
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_port(true)?;
        s.set_nonblocking(true)?;
        // Room for bursts: 4 MiB, or what net.core.rmem_max allows (see tuning/).
        let _ = s.set_recv_buffer_size(4 << 20);
        s.bind(&addr.into())?;
        sockets.push(s);
    }
    if cores > 1 {
        attach_program(&sockets[0], cores)?;
    }
    Ok(sockets.into_iter().map(IntoRawFd::into_raw_fd).collect())
}

fn attach_program(socket: &Socket, cores: usize) -> io::Result<()> {
    // BPF_LD|BPF_H|BPF_ABS, BPF_ALU|BPF_MUL|BPF_K, BPF_ALU|BPF_RSH|BPF_K, BPF_RET|BPF_A.
    let mut program = [
        libc::sock_filter {
            code: 0x28,
            jt: 0,
            jf: 0,
            k: coral::dsht::wire::ROUTE_OFFSET as u32,
        },
        libc::sock_filter {
            code: 0x24,
            jt: 0,
            jf: 0,
            k: cores as u32,
        },
        libc::sock_filter {
            code: 0x74,
            jt: 0,
            jf: 0,
            k: 16,
        },
        libc::sock_filter {
            code: 0x16,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `program`, which outlives the call; the kernel
    // copies the program during setsockopt. The descriptor is a valid socket
    // owned by `socket` for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_all_routes_evenly() {
        for cores in 1..=16 {
            let mut counts = vec![0u32; cores];
            for r in 0..=u16::MAX {
                counts[shard_of_route(r, cores)] += 1;
            }
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(max - min <= 1, "{cores} cores: {counts:?}");
            for core in 0..cores {
                assert_eq!(shard_of_route(route_for_core(core, cores), cores), core);
            }
        }
    }
}
