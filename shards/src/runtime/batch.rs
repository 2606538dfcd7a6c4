//! The DSHT socket's datagrams in batches (issue 27), as the DNS loop
//! (`dns.rs`), Knot and NSD move theirs: after the awaited datagram, what
//! else is queued is read with `recvmmsg` without waiting, and what the
//! node queued leaves with one `sendmmsg` per batch: two system calls per
//! batch where `recvfrom` and `sendto` took two per datagram.
//!
//! A send that would block (the socket's buffer is full) is not lost: it
//! and every datagram after it in the same flush, in order, go through the
//! ring, which waits for room (`Shard::flush`).

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Datagrams per `recvmmsg` / `sendmmsg`.
pub(super) const MMSG_BATCH: usize = crate::limits::RUNTIME.mmsg_batch;

/// Bytes read of each datagram of a batch: one more than the longest
/// message that decodes, so a longer datagram is read as one too long
/// (malformed, as it is whole) and never as a valid prefix.
pub(super) const SLOT_BYTES: usize = coral::dsht::wire::MESSAGE_BYTES_MAX + 1;

/// Receive buffers and senders' addresses for one `recvmmsg`, with the
/// call's headers built once (issue 27): each header points at its slot
/// and its address for the batch's life, so a call resets only the address
/// lengths the kernel wrote (building all `MMSG_BATCH` headers per call cost
/// ~800 user-space instructions, ~250 a get at the ~3 datagrams a call
/// brings under a closed-loop load).
pub(super) struct RecvBatch {
    /// `MMSG_BATCH` slots of `SLOT_BYTES`, one after the other. Written
    /// only by the kernel, through `iovs`, after `new`.
    bufs: Box<[u8]>,
    /// Written only by the kernel, through `hdrs`, after `new`.
    addrs: Box<[libc::sockaddr_storage]>,
    /// One per slot, pointing at it; read by the kernel through `hdrs`
    /// only (held here so that they live as long as the headers).
    #[allow(dead_code)]
    iovs: Box<[libc::iovec]>,
    /// One per slot: its iovec and address; the kernel writes each one's
    /// `msg_len`, `msg_namelen` and `msg_flags`.
    hdrs: Box<[libc::mmsghdr]>,
    /// Datagrams in the last batch (0 before the first).
    n: usize,
}

impl RecvBatch {
    pub(super) fn new() -> RecvBatch {
        let mut bufs = vec![0u8; MMSG_BATCH * SLOT_BYTES].into_boxed_slice();
        // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
        let mut addrs: Box<[libc::sockaddr_storage]> = (0..MMSG_BATCH)
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        let mut iovs: Box<[libc::iovec]> = bufs
            .chunks_exact_mut(SLOT_BYTES)
            .map(|slot| libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot.len(),
            })
            .collect();
        let hdrs = iovs
            .iter_mut()
            .zip(addrs.iter_mut())
            .map(|(iov, addr)| {
                // SAFETY: mmsghdr is plain data; all zeroes is a valid value.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = (addr as *mut libc::sockaddr_storage).cast();
                h.msg_hdr.msg_namelen = ADDR_BYTES;
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        // The boxes' heap blocks never move or change size: the pointers
        // above stay valid as long as the batch.
        RecvBatch {
            bufs,
            addrs,
            iovs,
            hdrs,
            n: 0,
        }
    }

    /// Reads up to `MMSG_BATCH` queued datagrams from `fd` without
    /// waiting; how many (0 when none is queued, or on an error).
    pub(super) fn recv(&mut self, fd: RawFd) -> usize {
        // The kernel wrote the sender's length in the headers of the last
        // call's datagrams (and at most the one after, where it failed):
        // each may take as much as the storage again.
        for h in self.hdrs.iter_mut().take(self.n + 1) {
            h.msg_hdr.msg_namelen = ADDR_BYTES;
        }
        // SAFETY: each of the MMSG_BATCH headers points at a live slot of
        // `self.bufs`, an address of `self.addrs` and an iovec of
        // `self.iovs` (built in `new`, never moved since), with their true
        // lengths (`msg_namelen` reset just above); the kernel writes at
        // most that much.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                MMSG_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let n = usize::try_from(n).unwrap_or(0).min(MMSG_BATCH);
        self.n = n;
        n
    }

    /// Datagram `i` of the last batch and its sender (`None` past the
    /// batch, or for a sender that is not an IP address).
    pub(super) fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        if i >= self.n {
            return None;
        }
        let h = self.hdrs.get(i)?;
        let len = (h.msg_len as usize).min(SLOT_BYTES);
        let from = socket_addr(self.addrs.get(i)?, h.msg_hdr.msg_namelen)?;
        let start = i * SLOT_BYTES;
        Some((self.bufs.get(start..start + len)?, from))
    }
}

/// The room for a sender's address in each header.
const ADDR_BYTES: libc::socklen_t = std::mem::size_of::<libc::sockaddr_storage>() as _;

/// The address the kernel wrote (`namelen` octets of `raw`), as socket2
/// reads it (`SockAddr::as_socket`), without copying the whole storage; a
/// length too short for the family's address reads as none (socket2 would
/// read past what was written). The DSHT's batches and dnssrv's UDP loop
/// (`dns.rs`) both read their senders with it.
#[inline]
pub(crate) fn socket_addr(
    raw: &libc::sockaddr_storage,
    namelen: libc::socklen_t,
) -> Option<SocketAddr> {
    let namelen = namelen as usize;
    match i32::from(raw.ss_family) {
        libc::AF_INET if namelen >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: a sockaddr_storage is larger than and aligned for a
            // sockaddr_in, and the kernel wrote one (its family says so).
            let a = unsafe { &*(raw as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if namelen >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for a sockaddr_in6.
            let a =
                unsafe { &*(raw as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// An IPv4 or IPv6 address as `sendmmsg` takes it.
#[repr(C)]
#[derive(Clone, Copy)]
union RawAddr {
    v4: libc::sockaddr_in,
    v6: libc::sockaddr_in6,
}

/// `to` as the kernel takes it (as socket2's `SockAddr::from` writes it),
/// and its length.
fn raw_addr(to: SocketAddr) -> (RawAddr, libc::socklen_t) {
    match to {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_in is plain data; all zeroes is a valid value.
            let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = a.port().to_be();
            s.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            (
                RawAddr { v4: s },
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = a.port().to_be();
            s.sin6_addr.s6_addr = a.ip().octets();
            s.sin6_flowinfo = a.flowinfo();
            s.sin6_scope_id = a.scope_id();
            (
                RawAddr { v6: s },
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// Datagrams to send in one `sendmmsg`: each slot's bytes (the node's
/// encoded datagram, swapped in by `Node::poll_transmit_keeping`) and destination.
pub(super) struct SendBatch {
    outs: Vec<Vec<u8>>,
    to: [SocketAddr; MMSG_BATCH],
    len: usize,
    /// A send would have blocked in this flush: the datagrams after it go
    /// through the ring too, in order.
    blocked: bool,
}

/// What a flush could not send at once, in order, to send through the ring.
pub(super) type Deferred = Vec<(SocketAddr, Vec<u8>)>;

impl SendBatch {
    pub(super) fn new() -> SendBatch {
        SendBatch {
            outs: (0..MMSG_BATCH).map(|_| Vec::new()).collect(),
            to: [SocketAddr::from(([0, 0, 0, 0], 0)); MMSG_BATCH],
            len: 0,
            blocked: false,
        }
    }

    /// Starts a flush: nothing queued, nothing blocked.
    pub(super) fn begin(&mut self) {
        self.len = 0;
        self.blocked = false;
    }

    /// The buffer the next datagram's bytes go into (`Node::poll_transmit_keeping`
    /// swaps its own in); [`SendBatch::push`] then takes it into the batch.
    /// Callers send before the batch is full.
    pub(super) fn slot(&mut self) -> &mut Vec<u8> {
        let i = self.len.min(MMSG_BATCH - 1);
        &mut self.outs[i]
    }

    /// Takes the datagram in [`SendBatch::slot`], for `to`.
    pub(super) fn push(&mut self, to: SocketAddr) {
        if self.len < MMSG_BATCH {
            self.to[self.len] = to;
            self.len += 1;
        }
    }

    /// Whether the batch is full (send it before the next `slot`).
    pub(super) fn is_full(&self) -> bool {
        self.len == MMSG_BATCH
    }

    /// Sends the batch on `fd` with `sendmmsg`, without waiting.
    pub(super) fn send(&mut self, fd: RawFd, deferred: &mut Deferred, errors: &mut u64) {
        self.send_with(deferred, errors, |hdrs| {
            // SAFETY: `hdrs` are initialised headers pointing at live
            // datagrams, addresses and iovecs, with their true lengths
            // (`send_with`); the kernel only reads them.
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    hdrs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            usize::try_from(n).map_err(|_| io::Error::last_os_error())
        });
    }

    /// Sends the batch through `sendmmsg` (the system call, or a test's
    /// stand-in): what would block goes to `deferred`, with everything
    /// after it (in this flush too); any other failure drops that one
    /// datagram and counts it in `errors`.
    pub(super) fn send_with(
        &mut self,
        deferred: &mut Deferred,
        errors: &mut u64,
        mut sendmmsg: impl FnMut(&mut [libc::mmsghdr]) -> io::Result<usize>,
    ) {
        let len = self.len.min(MMSG_BATCH);
        self.len = 0;
        if len == 0 {
            return;
        }
        if self.blocked {
            self.defer(0, len, deferred);
            return;
        }
        let mut addrs = [MaybeUninit::<RawAddr>::uninit(); MMSG_BATCH];
        let mut iovs = [MaybeUninit::<libc::iovec>::uninit(); MMSG_BATCH];
        let mut hdrs = [MaybeUninit::<libc::mmsghdr>::uninit(); MMSG_BATCH];
        for ((((addr, iov), hdr), out), &to) in addrs
            .iter_mut()
            .zip(iovs.iter_mut())
            .zip(hdrs.iter_mut())
            .zip(self.outs.iter_mut())
            .zip(self.to.iter())
            .take(len)
        {
            let (raw, raw_len) = raw_addr(to);
            let addr = addr.write(raw);
            let iov = iov.write(libc::iovec {
                iov_base: out.as_mut_ptr().cast(),
                iov_len: out.len(),
            });
            // SAFETY: mmsghdr is plain data; all zeroes is a valid value.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (addr as *mut RawAddr).cast();
            h.msg_hdr.msg_namelen = raw_len;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            hdr.write(h);
        }
        // SAFETY: the first `len` headers were written just above.
        let hdrs: &mut [libc::mmsghdr] =
            unsafe { std::slice::from_raw_parts_mut(hdrs.as_mut_ptr().cast(), len) };
        let mut done = 0;
        while done < len {
            match sendmmsg(&mut hdrs[done..]) {
                Ok(0) => {
                    // Nothing taken and no error: try it through the ring.
                    self.blocked = true;
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = true;
                    break;
                }
                Err(_) => {
                    // This datagram cannot go (no route, a refused
                    // address): dropped and counted, the rest go on.
                    *errors += 1;
                    done += 1;
                }
            }
        }
        if self.blocked {
            self.defer(done, len, deferred);
        }
        // The buffers sent go back to the node with the next datagrams
        // (`Node::poll_transmit_keeping` swaps them in): it encodes later
        // datagrams into them, with no allocation (issue 27).
        for out in self.outs.iter_mut().take(len) {
            out.clear();
        }
    }

    /// Moves datagrams `from..len` to `deferred`, in order.
    fn defer(&mut self, from: usize, len: usize, deferred: &mut Deferred) {
        for (out, &to) in self
            .outs
            .iter_mut()
            .zip(self.to.iter())
            .take(len)
            .skip(from)
        {
            deferred.push((to, std::mem::take(out)));
        }
    }
}

/// Sends what a flush deferred through the ring, which waits for room in
/// the socket's buffer; how many could not be sent.
pub(super) async fn send_deferred(socket: &glommio::net::UdpSocket, deferred: Deferred) -> u64 {
    let mut errors = 0;
    for (to, bytes) in deferred {
        if socket.send_to(&bytes, to).await.is_err() {
            errors += 1;
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        (a, b)
    }

    /// More datagrams than one `recvmmsg` takes are all read, batch after
    /// batch, whole and with their sender; a datagram longer than any
    /// message is read as one longer than `MESSAGE_BYTES_MAX` (so it fails
    /// to decode, as it would whole).
    #[test]
    fn a_queue_longer_than_one_recvmmsg_is_read_in_batches() {
        let (tx, rx) = pair();
        let from = tx.local_addr().unwrap();
        let count = 3 * MMSG_BATCH + 5;
        for i in 0..count {
            let d = vec![i as u8; 1 + i % 200];
            tx.send_to(&d, rx.local_addr().unwrap()).unwrap();
        }
        let long = vec![0xabu8; SLOT_BYTES + 100];
        tx.send_to(&long, rx.local_addr().unwrap()).unwrap();
        rx.set_nonblocking(true).unwrap();
        let mut batch = RecvBatch::new();
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        // The datagrams are queued on loopback before send_to returns.
        loop {
            let n = batch.recv(rx.as_raw_fd());
            if n == 0 {
                break;
            }
            sizes.push(n);
            for i in 0..n {
                let (d, f) = batch.get(i).unwrap();
                assert_eq!(f, from);
                got.push(d.to_vec());
            }
            assert!(batch.get(n).is_none());
        }
        assert_eq!(sizes, [MMSG_BATCH, MMSG_BATCH, MMSG_BATCH, 6]);
        assert_eq!(got.len(), count + 1);
        for (i, d) in got.iter().take(count).enumerate() {
            assert_eq!(d, &vec![i as u8; 1 + i % 200], "datagram {i}");
        }
        let last = got.last().unwrap();
        assert_eq!(last.len(), SLOT_BYTES);
        assert!(coral::dsht::wire::Message::decode(last).is_err());
    }

    /// The headers are built once: a call reads into the slots and
    /// addresses they were built with, and the sender's length the kernel
    /// wrote in a header (shorter than the storage for an IPv4 sender) is
    /// reset before the next call, so an IPv6 sender there is read whole.
    #[test]
    fn each_call_gives_the_kernel_the_whole_address_storage() {
        let (tx, rx) = pair();
        rx.set_nonblocking(true).unwrap();
        let mut batch = RecvBatch::new();
        for round in 0..3u8 {
            for i in 0..3u8 {
                tx.send_to(&[round, i], rx.local_addr().unwrap()).unwrap();
            }
            assert_eq!(batch.recv(rx.as_raw_fd()), 3);
            for i in 0..3usize {
                let (d, from) = batch.get(i).unwrap();
                assert_eq!((d, from), (&[round, i as u8][..], tx.local_addr().unwrap()));
                let h = &batch.hdrs[i];
                assert_eq!(
                    h.msg_hdr.msg_namelen as usize,
                    std::mem::size_of::<libc::sockaddr_in>()
                );
                assert_eq!(
                    h.msg_hdr.msg_iov,
                    &batch.iovs[i] as *const libc::iovec as *mut _
                );
            }
            assert_eq!(batch.recv(rx.as_raw_fd()), 0);
            for h in batch.hdrs.iter() {
                assert_eq!(h.msg_hdr.msg_namelen, ADDR_BYTES);
            }
        }
    }

    /// The addresses written for `sendmmsg` and read from `recvmmsg` are
    /// socket2's, both families.
    #[test]
    fn addresses_convert_as_socket2_does() {
        for a in [
            "10.1.2.3:7000",
            "127.0.0.1:1",
            "[2001:db8::1]:8090",
            "[fe80::1%3]:65535",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            let theirs = socket2::SockAddr::from(a);
            let (raw, len) = raw_addr(a);
            assert_eq!(len, theirs.len());
            // SAFETY: `raw` is `len` initialised octets (a whole sockaddr).
            let ours = unsafe {
                std::slice::from_raw_parts((&raw as *const RawAddr).cast::<u8>(), len as usize)
            };
            // SAFETY: as above, socket2's storage holds `len` octets.
            let want =
                unsafe { std::slice::from_raw_parts(theirs.as_ptr().cast::<u8>(), len as usize) };
            assert_eq!(ours, want, "{a}");
            let len = theirs.len();
            assert_eq!(socket_addr(&theirs.as_storage(), len), Some(a));
        }
    }

    fn queue(batch: &mut SendBatch, to: SocketAddr, bytes: &[u8]) {
        *batch.slot() = bytes.to_vec();
        batch.push(to);
    }

    /// A batch goes out in one `sendmmsg`, datagram by datagram in order.
    #[test]
    fn a_batch_is_sent_in_one_sendmmsg() {
        let (tx, rx) = pair();
        let to = rx.local_addr().unwrap();
        let mut batch = SendBatch::new();
        batch.begin();
        for i in 0..MMSG_BATCH {
            queue(&mut batch, to, &[i as u8; 3]);
        }
        assert!(batch.is_full());
        let (mut deferred, mut errors, mut calls) = (Deferred::new(), 0, 0);
        batch.send_with(&mut deferred, &mut errors, |hdrs| {
            calls += 1;
            // SAFETY: as in `send`.
            let n =
                unsafe { libc::sendmmsg(tx.as_raw_fd(), hdrs.as_mut_ptr(), hdrs.len() as _, 0) };
            usize::try_from(n).map_err(|_| io::Error::last_os_error())
        });
        assert_eq!((calls, errors, deferred.len()), (1, 0, 0));
        let mut buf = [0u8; 16];
        for i in 0..MMSG_BATCH {
            let (n, from) = rx.recv_from(&mut buf).unwrap();
            assert_eq!(
                (&buf[..n], from),
                (&[i as u8; 3][..], tx.local_addr().unwrap())
            );
        }
    }

    /// A send that would block, and every datagram after it in the flush,
    /// is deferred in order (to go through the ring); a datagram the kernel
    /// refuses is counted and the rest go on.
    #[test]
    fn what_would_block_is_deferred_in_order() {
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut batch = SendBatch::new();
        batch.begin();
        for i in 0..10u8 {
            queue(&mut batch, to, &[i]);
        }
        let (mut deferred, mut errors) = (Deferred::new(), 0);
        let mut sent = Vec::new();
        let mut call = 0;
        batch.send_with(&mut deferred, &mut errors, |hdrs| {
            call += 1;
            let first = |h: &libc::mmsghdr| {
                // SAFETY: the header's iovec points at its live datagram.
                unsafe { *(*h.msg_hdr.msg_iov).iov_base.cast::<u8>() }
            };
            match call {
                // Three go, then one is refused, then two go, then the
                // socket is full.
                1 => {
                    sent.extend(hdrs[..3].iter().map(first));
                    Ok(3)
                }
                2 => Err(io::Error::from_raw_os_error(libc::ENETUNREACH)),
                3 => {
                    sent.extend(hdrs[..2].iter().map(first));
                    Ok(2)
                }
                _ => Err(io::Error::from_raw_os_error(libc::EAGAIN)),
            }
        });
        assert_eq!(sent, [0, 1, 2, 4, 5]);
        assert_eq!(errors, 1);
        let later: Vec<u8> = deferred.iter().map(|(_, d)| d[0]).collect();
        assert_eq!(later, [6, 7, 8, 9]);
        // Later datagrams of the same flush follow them, not the socket.
        queue(&mut batch, to, &[10]);
        batch.send_with(&mut deferred, &mut errors, |_| {
            panic!("a blocked flush sends nothing more at once")
        });
        let later: Vec<u8> = deferred.iter().map(|(_, d)| d[0]).collect();
        assert_eq!(later, [6, 7, 8, 9, 10]);
        // A new flush tries the socket again.
        batch.begin();
        queue(&mut batch, to, &[11]);
        let mut tried = false;
        batch.send_with(&mut Deferred::new(), &mut errors, |_| {
            tried = true;
            Ok(1)
        });
        assert!(tried);
    }

    /// A reply that cannot be sent at once is still sent: deferred, then
    /// through the ring, in order.
    #[test]
    fn a_deferred_datagram_is_sent_through_the_ring() {
        use glommio::{LocalExecutorBuilder, Placement};
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let to = rx.local_addr().unwrap();
        let from = LocalExecutorBuilder::new(Placement::Unbound)
            .spawn(move || async move {
                let socket = glommio::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                let mut batch = SendBatch::new();
                batch.begin();
                for i in 0..5u8 {
                    queue(&mut batch, to, &[i; 4]);
                }
                let (mut deferred, mut errors) = (Deferred::new(), 0);
                batch.send_with(&mut deferred, &mut errors, |_| {
                    Err(io::Error::from_raw_os_error(libc::EWOULDBLOCK))
                });
                assert_eq!((deferred.len(), errors), (5, 0));
                assert_eq!(send_deferred(&socket, deferred).await, 0);
                socket.local_addr().unwrap()
            })
            .unwrap()
            .join()
            .unwrap();
        let mut buf = [0u8; 16];
        for i in 0..5u8 {
            let (n, f) = rx.recv_from(&mut buf).expect("the deferred datagram");
            assert_eq!((&buf[..n], f), (&[i; 4][..], from));
        }
    }
}
