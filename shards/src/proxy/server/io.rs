//! Moving a client connection's bytes: its input buffer, read by `recv`
//! when the core's readiness set watches the socket, and the sends of heads
//! and bodies (one `sendmsg` from the cache's mapping, or `sendfile`).

use std::cell::RefCell;
use std::os::fd::AsRawFd;

use coral::proxy::idle::{ConnTable, Slot};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

use super::{IOV_MAX, SENDFILE_BYTES_MIN, SEND_CHUNK_BYTES};
use crate::cache::ObjectRef;
use crate::proxy::ready::{Readable, Readiness};

/// A connection's input: one buffer, read into at `end` and parsed from
/// `start`. While the connection waits, empty, for its next request (an
/// idle keep-alive connection) the buffer is parked in the core's
/// readiness set, which hands it back when the request comes, or, beyond
/// the parked bound and after one to two seconds parked, it goes to the
/// core's pool; the connection holds none: ten thousand idle connections
/// hold no input buffers, not ten thousand (issue 27, "Many connections").
pub(super) struct InBuf {
    /// `None` while idle and empty.
    data: Option<Box<[u8]>>,
    size: usize,
    start: usize,
    end: usize,
    /// The last `recv` took less than it had room for: the socket was
    /// empty, so the next read waits for an edge first (no `recv` that
    /// would find nothing).
    drained: bool,
    /// The last `fill` got its bytes after a wait that the readiness set's
    /// dispatch ended (`take_woke`).
    woke: bool,
}

/// Input buffers a core keeps for its connections to take when their next
/// request comes: at most this many (each `InBuf`'s size); more go back to
/// the allocator.
const POOLED_BUFFERS_MAX: usize = crate::limits::PROXY.pooled_input_buffers_max;

thread_local! {
    /// This core's free input buffers (one executor per thread: no lock).
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

impl InBuf {
    pub(super) fn new(size: usize) -> InBuf {
        InBuf {
            data: None,
            size,
            start: 0,
            end: 0,
            drained: false,
            woke: false,
        }
    }

    /// Whether the bytes of the last `fill` came after a wait that a
    /// dispatch of the readiness set ended (its clocks are then the
    /// moment they came: `Readiness::woke_at`); taken once, so a later
    /// request in the same bytes reads the clocks itself.
    pub(super) fn take_woke(&mut self) -> bool {
        std::mem::take(&mut self.woke)
    }

    pub(super) fn filled(&self) -> &[u8] {
        match &self.data {
            Some(d) => &d[self.start..self.end],
            None => &[],
        }
    }

    /// Bytes in the buffer not consumed yet: `filled().len()` without
    /// slicing (no buffer means none: `start == end` then).
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.end - self.start
    }

    /// No bytes wait in the buffer: `filled().is_empty()`.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// The buffer, taken from the core's pool (or made) if the connection
    /// holds none.
    #[inline]
    fn data(&mut self) -> &mut [u8] {
        if self.data.is_none() {
            self.data = Some(self.take_buffer());
        }
        match &mut self.data {
            Some(d) => d,
            None => &mut [],
        }
    }

    /// A buffer from the core's pool, or a new one.
    #[cold]
    fn take_buffer(&self) -> Box<[u8]> {
        let size = self.size;
        POOL.with(|p| p.borrow_mut().pop())
            .filter(|b| b.len() == size)
            .unwrap_or_else(|| vec![0; size].into_boxed_slice())
    }

    /// The wait for `fd`'s next edge; an empty buffer is parked in `ready`
    /// meanwhile, or given back to the pool when no more may be parked.
    /// Not an `async fn`: the buffer is given back when it is called (each
    /// caller awaits it at once), and its future is the readiness set's
    /// (one state machine fewer to poll on every wake; issue 27).
    fn wait<'s>(&'s mut self, ready: &'s Readiness, fd: i32) -> Readable<'s, 's> {
        let park = self.start == self.end && ready.may_park();
        if !park {
            self.release();
        }
        let buf = if park { Some(&mut self.data) } else { None };
        ready.readable_parking(fd, buf)
    }

    /// Gives the buffer back to the core's pool while it holds nothing.
    fn release(&mut self) {
        if self.start != self.end {
            return;
        }
        if let Some(d) = self.data.take() {
            give_back(d);
        }
    }

    /// Reads more; false on EOF, error, idle timeout, or a full buffer.
    /// With `ready` (the core's readiness set watches the socket) by a
    /// plain `recv`, waiting for the socket's next edge only when it finds
    /// nothing (`ready.rs`); else through glommio's stream.
    pub(super) async fn fill(&mut self, stream: &mut TcpStream, ready: Option<&Readiness>) -> bool {
        if self.end == self.size {
            if self.start == 0 {
                return false;
            }
            let (start, end) = (self.start, self.end);
            self.data().copy_within(start..end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let Some(ready) = ready else {
            self.woke = false;
            let end = self.end;
            return match stream.read(&mut self.data()[end..]).await {
                Ok(n) if n > 0 => {
                    self.end += n;
                    true
                }
                _ => false,
            };
        };
        let fd = stream.as_raw_fd();
        if self.drained {
            self.woke = self.wait(ready, fd).await;
            self.drained = false;
        } else {
            self.woke = false;
        }
        loop {
            let end = self.end;
            let room = &mut self.data()[end..];
            // SAFETY: `room` is live and writable for its length; `fd` is
            // the open socket `stream` owns.
            let n =
                unsafe { recv_now(fd, room.as_mut_ptr().cast(), room.len(), libc::MSG_DONTWAIT) };
            if n > 0 {
                self.drained = (n as usize) < room.len();
                self.end += n as usize;
                return true;
            }
            if n == 0 {
                return false;
            }
            match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::WouldBlock => self.woke = self.wait(ready, fd).await,
                std::io::ErrorKind::Interrupted => {}
                _ => return false,
            }
        }
    }
}

/// Puts a free input buffer in the core's pool (or frees it when the pool
/// is full): a connection's, or one the readiness set had parked.
pub(super) fn give_back(d: Box<[u8]>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOLED_BUFFERS_MAX {
            p.push(d);
        }
    });
}

/// `recv(2)`, `send(2)` and `sendmsg(2)` as plain system calls: libc's
/// wrappers are thread cancellation points, and each marks the thread
/// cancellable and back around the call (about 33 user-space instructions a
/// call, two or three calls a hit; issue 27). coral never cancels a thread.
/// Same arguments, result and `errno` as the wrappers (`syscall(2)`).
///
/// # Safety
/// As the wrapped calls: `buf` valid for `len` bytes (writable for `recv`),
/// `msg` a valid `msghdr` whose buffers are live.
unsafe fn recv_now(fd: i32, buf: *mut libc::c_void, len: usize, flags: i32) -> isize {
    // SAFETY: the caller's contract; NULL address arguments as `recv` passes.
    unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd,
            buf,
            len,
            flags,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        ) as isize
    }
}

/// See [`recv_now`].
unsafe fn send_now(fd: i32, buf: *const libc::c_void, len: usize, flags: i32) -> isize {
    // SAFETY: the caller's contract; NULL address as `send` passes.
    unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            buf,
            len,
            flags,
            std::ptr::null::<libc::sockaddr>(),
            0 as libc::socklen_t,
        ) as isize
    }
}

/// See [`recv_now`].
unsafe fn sendmsg_now(fd: i32, msg: *const libc::msghdr, flags: i32) -> isize {
    // SAFETY: the caller's contract.
    unsafe { libc::syscall(libc::SYS_sendmsg, fd, msg, flags) as isize }
}

/// Where a send reports its progress: the connection's slot in the core's
/// table, stamped sending when a write begins and after each write that
/// completes (the send stall timeout runs from the last), busy when the
/// send is done. A stamp is one store; no timer is armed.
#[derive(Clone, Copy)]
pub(super) struct Progress<'t> {
    pub(super) table: &'t RefCell<ConnTable>,
    pub(super) slot: Slot,
}

impl Progress<'_> {
    fn sending(self) {
        self.table.borrow_mut().sending(self.slot);
    }

    pub(super) fn done(self) {
        self.table.borrow_mut().busy(self.slot);
    }
}

/// Writes `data` through the ring, a chunk at a time, stamping progress
/// after each: a client that stops reading stalls one chunk, and the
/// sweep sees it.
async fn write_through(
    stream: &mut TcpStream,
    mut data: &[u8],
    p: Progress<'_>,
) -> std::io::Result<()> {
    while !data.is_empty() {
        let n = data.len().min(SEND_CHUNK_BYTES as usize);
        stream.write_all(&data[..n]).await?;
        p.sending();
        data = &data[n..];
    }
    Ok(())
}

/// Puts `fd` in non-blocking mode (reads and writes through the ring are
/// unaffected; direct `sendfile` must not block); whether it is.
pub(super) fn is_nonblocking(fd: std::os::fd::RawFd) -> bool {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we hold; no memory is passed.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return false;
        }
        flags & libc::O_NONBLOCK != 0
            || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    }
}

/// Sends `head` and then the complete object's bytes `[start, end)`: with
/// `sendfile` from the cache's file (no copy through user space; the socket
/// is non-blocking, so it never parks the executor) when the body is large
/// enough to be worth a second syscall, else one `sendmsg` of head and body
/// from the mapping. When the socket is full, `sendfile` waits for room
/// (through `ready`, the core's readiness set, when it watches the socket,
/// else through the ring) and goes on. Progress is stamped in `p` (the send
/// stall timeout).
#[allow(clippy::too_many_arguments)]
pub(super) async fn send_complete(
    stream: &mut TcpStream,
    ready: Option<&Readiness>,
    nonblocking: bool,
    head: &[u8],
    obj: &ObjectRef,
    start: u64,
    end: u64,
    p: Progress<'_>,
) -> std::io::Result<()> {
    if !nonblocking || end - start < SENDFILE_BYTES_MIN {
        return send_all(stream, &[head, obj.body(start, end)], p).await;
    }
    let sent = send_file_now(stream.as_raw_fd(), head, obj, start, end)?;
    if sent != SentNow::All {
        let rest = match sent {
            SentNow::Head(n) => &head[n..],
            _ => &[],
        };
        send_file_rest(stream, ready, rest, obj, sent, start, end, p).await?;
    }
    p.done();
    Ok(())
}

/// How far [`send_file_now`] got without waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SentNow {
    /// Head and body went out.
    All,
    /// This many bytes of the head went out (the socket is full), no body.
    Head(usize),
    /// The head went out and the body up to this offset; the socket is full.
    Full(u64),
    /// The head went out and the body up to this offset, where `sendfile`
    /// sent nothing (the file is shorter than the object says).
    Short(u64),
}

/// The part of [`send_complete`] (with `sendfile`) that never waits: the
/// head with `MSG_MORE`, then the body from the cache's file, as far as the
/// socket takes them now. A hit whose answer goes out here needs no send
/// future, no copy of its head and no progress stamps (nothing can look at
/// them before it is done; issue 27, session 7). `fd` is non-blocking.
pub(super) fn send_file_now(
    fd: std::os::fd::RawFd,
    head: &[u8],
    obj: &ObjectRef,
    start: u64,
    end: u64,
) -> std::io::Result<SentNow> {
    // SAFETY: `head` is a live slice for the duration of the call.
    let sent = unsafe {
        send_now(
            fd,
            head.as_ptr().cast(),
            head.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_MORE,
        )
    };
    if sent < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(e);
        }
        return Ok(SentNow::Head(0));
    }
    if (sent as usize) < head.len() {
        return Ok(SentNow::Head(sent as usize));
    }
    let mut pos = start;
    while pos < end {
        let (file, at) = obj.file_at(pos);
        let mut off = at as libc::off_t;
        // SAFETY: `fd` and `file` are open descriptors (the object is alive
        // while `obj` is); `off` is a valid in/out offset.
        let n = unsafe { libc::sendfile(fd, file, &mut off, (end - pos) as usize) };
        if n > 0 {
            pos += n as u64;
            continue;
        }
        if n == 0 {
            return Ok(SentNow::Short(pos));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(e);
        }
        return Ok(SentNow::Full(pos));
    }
    Ok(SentNow::All)
}

/// The rest of [`send_complete`] after [`send_file_now`] stopped at `sent`
/// (not `All`) sending `[start, end)`, with `head_rest` the head's unsent
/// bytes: the head through
/// the ring, then the body with `sendfile`, waiting whenever the socket is
/// full, so a large body is never copied through user space (a 50 MB hit
/// took 196 sends of 256 KiB through the ring before; benches/counts.sh).
/// With `ready` (the core's readiness set watches the socket) the wait is
/// for the socket's next write edge in the core's epoll set, which one
/// `epoll_wait` a turn collects for all connections; else one ring poll
/// per wait (issue 27, session 8: at 41 KB that was 0.6 `io_uring_enter`
/// and submissions a hit). The send stall timeout still holds: the sweep
/// shuts a stalled socket down, whose hangup ends the wait. Does not stamp
/// `done`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn send_file_rest(
    stream: &mut TcpStream,
    ready: Option<&Readiness>,
    head_rest: &[u8],
    obj: &ObjectRef,
    sent: SentNow,
    start: u64,
    end: u64,
    p: Progress<'_>,
) -> std::io::Result<()> {
    p.sending();
    let (mut pos, mut full) = match sent {
        SentNow::All => return Ok(()),
        SentNow::Head(_) => {
            write_through(stream, head_rest, p).await?;
            (start, false)
        }
        SentNow::Full(pos) => (pos, true),
        SentNow::Short(pos) => {
            write_through(stream, obj.body(pos, end), p).await?;
            return Ok(());
        }
    };
    let fd = stream.as_raw_fd();
    while pos < end {
        // No await since the send that found the socket full (the contract
        // of `Readiness::writable`).
        if full {
            let by_edge = match ready {
                Some(r) => r.writable(fd).await,
                None => false,
            };
            if !by_edge {
                ring_writable(fd).await?;
            }
        }
        let (file, at) = obj.file_at(pos);
        let mut off = at as libc::off_t;
        // SAFETY: `fd` and `file` are open descriptors (the object is alive
        // while `obj` is); `off` is a valid in/out offset.
        let n = unsafe { libc::sendfile(fd, file, &mut off, (end - pos) as usize) };
        if n > 0 {
            pos += n as u64;
            p.sending();
            full = false;
            continue;
        }
        if n == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(e);
        }
        full = true;
    }
    if pos < end {
        write_through(stream, obj.body(pos, end), p).await?;
    }
    Ok(())
}

/// Waits through the ring (one `IORING_OP_POLL_ADD`) until `fd` has room.
async fn ring_writable(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    glommio::io::PollableFd::new(Socket(fd))
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .writable()
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// A client socket's descriptor, borrowed to wait for it through the ring
/// (the connection's stream owns and closes it).
struct Socket(std::os::fd::RawFd);

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// Writes `bufs` in order: first with one non-blocking `sendmsg` (head and
/// body straight from the cache's mapping, no copy), then whatever is left
/// through the ring. Progress is stamped in `p` (the send stall timeout).
pub(super) async fn send_all(
    stream: &mut TcpStream,
    bufs: &[&[u8]],
    p: Progress<'_>,
) -> std::io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if total == 0 {
        return Ok(());
    }
    p.sending();
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iov = [empty; IOV_MAX];
    let mut n_iov = 0;
    for b in bufs.iter().filter(|b| !b.is_empty()).take(IOV_MAX) {
        iov[n_iov] = libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        };
        n_iov += 1;
    }
    // SAFETY: a zeroed msghdr is valid; it points at `iov`, whose entries
    // point at the live slices in `bufs`, for the duration of the call.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n_iov as _;
        sendmsg_now(
            stream.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    let mut skip = if sent < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(e);
        }
        0
    } else {
        sent as usize
    };
    for b in bufs {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        write_through(stream, &b[skip..], p).await?;
        skip = 0;
    }
    p.done();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain system calls answer as libc's wrappers: bytes, a would-block
    /// with its `errno`, end of stream, and a bad descriptor's error.
    #[test]
    fn plain_calls_answer_as_the_wrappers() {
        let (a_owned, b_owned) = crate::proxy::ready::socket_pair();
        let (a, b) = (a_owned.as_raw_fd(), b_owned.as_raw_fd());
        let mut buf = [0u8; 64];
        // SAFETY (all calls below): live buffers of the lengths passed; the
        // descriptors are open until closed at the end.
        unsafe {
            let n = recv_now(b, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT);
            assert_eq!(n, -1);
            assert_eq!(
                std::io::Error::last_os_error().kind(),
                std::io::ErrorKind::WouldBlock
            );
            let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
            assert_eq!(send_now(a, b"head ".as_ptr().cast(), 5, flags), 5);
            let parts: [&[u8]; 2] = [b"and ", b"body"];
            let mut iov = parts.map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            });
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = 2;
            assert_eq!(sendmsg_now(a, &msg, flags), 8);
            let n = recv_now(b, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT);
            assert_eq!(&buf[..n as usize], b"head and body");
            drop(a_owned);
            assert_eq!(recv_now(b, buf.as_mut_ptr().cast(), buf.len(), 0), 0);
            drop(b_owned);
            assert_eq!(send_now(b, b"x".as_ptr().cast(), 1, flags), -1);
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EBADF)
            );
        }
    }

    /// `InBuf::len` and `is_empty` answer as `filled()` did, with no
    /// buffer, an empty one, bytes in it, and after `consume` and
    /// `release`.
    #[test]
    fn in_buf_len_and_is_empty_answer_as_filled() {
        let mut b = InBuf::new(64);
        let check = |b: &InBuf| {
            assert_eq!(b.len(), b.filled().len());
            assert_eq!(b.is_empty(), b.filled().is_empty());
        };
        check(&b);
        b.data();
        check(&b);
        b.end = 40;
        check(&b);
        for n in [5, 10, 0, 30] {
            b.consume(n);
            check(&b);
        }
        b.end = 20;
        b.consume(7);
        check(&b);
        b.release();
        check(&b);
        b.consume(13);
        b.release();
        assert!(b.data.is_none());
        check(&b);
    }

    /// `send_complete`'s `sendfile` path as it was before it was split into
    /// `send_file_now` and `send_file_rest` (session 7): the reference.
    async fn send_complete_before(
        stream: &mut TcpStream,
        head: &[u8],
        obj: &ObjectRef,
        start: u64,
        end: u64,
        p: Progress<'_>,
    ) -> std::io::Result<()> {
        p.sending();
        // SAFETY: `head` is a live slice for the duration of the call.
        let sent = unsafe {
            send_now(
                stream.as_raw_fd(),
                head.as_ptr().cast(),
                head.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_MORE,
            )
        };
        let sent = if sent < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            0
        } else {
            sent as usize
        };
        if sent < head.len() {
            write_through(stream, &head[sent..], p).await?;
        }
        let fd = stream.as_raw_fd();
        let mut pos = start;
        while pos < end {
            let (file, at) = obj.file_at(pos);
            let mut off = at as libc::off_t;
            // SAFETY: as in `send_file_now`.
            let n = unsafe { libc::sendfile(fd, file, &mut off, (end - pos) as usize) };
            if n > 0 {
                pos += n as u64;
                p.sending();
                continue;
            }
            if n == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            glommio::io::PollableFd::new(Socket(fd))
                .map_err(|e| std::io::Error::other(e.to_string()))?
                .writable()
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        if pos < end {
            write_through(stream, obj.body(pos, end), p).await?;
        }
        p.done();
        Ok(())
    }

    /// A connection to a reader thread on this test's own address that
    /// waits `delay` (the socket fills meanwhile), then reads to the end.
    async fn slow_reader(
        delay: std::time::Duration,
    ) -> (TcpStream, std::thread::JoinHandle<Vec<u8>>) {
        let l = std::net::TcpListener::bind("127.18.7.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let (mut s, _) = l.accept().unwrap();
            std::thread::sleep(delay);
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let stream = TcpStream::connect(addr).await.unwrap();
        let fd = stream.as_raw_fd();
        let small: libc::c_int = 4096;
        // SAFETY: a valid option value of its size on an open socket.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&small as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        assert!(is_nonblocking(fd));
        (stream, reader)
    }

    /// The split send (`send_file_now`, then `send_file_rest` when the
    /// socket fills: the fast hit's path, and `send_complete`'s) delivers
    /// what the send before it did, for heads and bodies from 4 KiB to
    /// 3 MB against a reader that starts late (the head or the body cut
    /// short by a full socket), from a socket already full (no head byte
    /// out at once), and from an offset; and leaves the connection's slot
    /// busy, as before.
    #[test]
    fn the_split_send_sends_as_the_one_before() {
        use crate::cache::{CacheConfig, ObjectMeta};
        use std::time::Duration;
        let dir = std::env::temp_dir().join(format!("coral-split-send-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.clone();
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name("split-send")
            .spawn(move || async move {
                let config = CacheConfig {
                    dir: d,
                    size_bytes: 1 << 26,
                    objects_max: None,
                };
                let caches = crate::cache::open(&config, 1).unwrap();
                let cache = &caches[0];
                let rs = Readiness::new().unwrap();
                glommio::spawn_local(crate::proxy::ready::run(rs.clone())).detach();
                let mut states = Vec::new();
                for (i, len) in [4096u64, 41_000, 300_000, 3_000_000]
                    .into_iter()
                    .enumerate()
                {
                    let key = coral::Id::hash(&(i as u32).to_le_bytes());
                    let body: Vec<u8> = (0..len).map(|b| (b * 7 + i as u64) as u8).collect();
                    let meta = ObjectMeta {
                        stored_secs: 1,
                        fresh_until_secs: u64::MAX,
                        expected_len: Some(len),
                    };
                    let mut w = cache.begin(key, meta, b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
                    for c in body.chunks(65536) {
                        w.append(c).unwrap();
                    }
                    w.finish().unwrap();
                    let obj = cache.lookup(&key).unwrap();
                    for head_len in [40usize, 3000] {
                        let head: Vec<u8> = (0..head_len).map(|b| b"HTTP/1.1"[b % 8]).collect();
                        for start in [0, len / 3] {
                            let want = [&head[..], &body[start as usize..]].concat();
                            // The split send waits for room through the
                            // ring, then through the readiness set.
                            for (before, by_edge) in [(false, false), (false, true), (true, false)]
                            {
                                let (mut stream, reader) =
                                    slow_reader(Duration::from_millis(30)).await;
                                let ready = by_edge.then_some(&*rs);
                                if by_edge {
                                    rs.watch(stream.as_raw_fd()).unwrap();
                                }
                                let table = RefCell::new(ConnTable::new());
                                let slot = table.borrow_mut().register(stream.as_raw_fd());
                                table.borrow_mut().busy(slot);
                                let p = Progress {
                                    table: &table,
                                    slot,
                                };
                                let r = if before {
                                    send_complete_before(&mut stream, &head, &obj, start, len, p)
                                        .await
                                } else {
                                    let fd = stream.as_raw_fd();
                                    let sent = send_file_now(fd, &head, &obj, start, len).unwrap();
                                    states.push(sent);
                                    if sent != SentNow::All {
                                        let rest = match sent {
                                            SentNow::Head(n) => &head[n..],
                                            _ => &[],
                                        };
                                        send_file_rest(
                                            &mut stream,
                                            ready,
                                            rest,
                                            &obj,
                                            sent,
                                            start,
                                            len,
                                            p,
                                        )
                                        .await
                                        .unwrap();
                                        p.done();
                                    }
                                    Ok(())
                                };
                                r.unwrap();
                                // Busy, not sending: no deadline expires it.
                                let mut expired = Vec::new();
                                let none = coral::proxy::idle::Deadlines::from_ms(0, 0, 0, 0);
                                // (Two ticks: past the least deadline, one tick.)
                                table.borrow_mut().expired(&none, &mut expired);
                                table.borrow_mut().expired(&none, &mut expired);
                                assert!(expired.is_empty(), "the slot is busy after the send");
                                if by_edge {
                                    rs.forget(stream.as_raw_fd());
                                }
                                stream.close().await.unwrap();
                                let got = reader.join().unwrap();
                                assert_eq!(
                                    got.len(),
                                    want.len(),
                                    "len {len} head {head_len} before {before} by edge {by_edge}"
                                );
                                assert!(
                                    got == want,
                                    "len {len} head {head_len} before {before} by edge {by_edge}"
                                );
                            }
                        }
                    }
                }
                assert!(states.contains(&SentNow::All), "{states:?}");
                assert!(
                    states
                        .iter()
                        .any(|s| matches!(s, SentNow::Full(p) if *p > 0)),
                    "{states:?}"
                );
                // A socket already full: no head byte goes out at once.
                let (mut stream, reader) = slow_reader(Duration::from_millis(50)).await;
                let fd = stream.as_raw_fd();
                let filler = vec![b'f'; 1 << 16];
                let mut sent_filler = 0;
                loop {
                    // SAFETY: `filler` is live for its length.
                    let n = unsafe {
                        send_now(fd, filler.as_ptr().cast(), filler.len(), libc::MSG_DONTWAIT)
                    };
                    if n <= 0 {
                        break;
                    }
                    sent_filler += n as usize;
                }
                let key = coral::Id::hash(&1u32.to_le_bytes());
                let obj = cache.lookup(&key).unwrap();
                let head = b"HTTP/1.1 200 OK\r\nContent-Length: 41000\r\n\r\n";
                let sent = send_file_now(fd, head, &obj, 0, 41_000).unwrap();
                assert_eq!(sent, SentNow::Head(0));
                let table = RefCell::new(ConnTable::new());
                let slot = table.borrow_mut().register(fd);
                let p = Progress {
                    table: &table,
                    slot,
                };
                send_file_rest(&mut stream, None, head, &obj, sent, 0, 41_000, p)
                    .await
                    .unwrap();
                stream.close().await.unwrap();
                let got = reader.join().unwrap();
                assert_eq!(got.len(), sent_filler + head.len() + 41_000);
                assert!(got[sent_filler..].starts_with(head));
                assert!(got[sent_filler + head.len()..] == *obj.body(0, 41_000));
            })
            .unwrap()
            .join()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
