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
use crate::proxy::ready::Readiness;

/// A connection's input: one buffer, read into at `end` and parsed from
/// `start`. While the connection waits, empty, for its next request (an
/// idle keep-alive connection) the buffer goes back to the core's pool and
/// the connection holds none: ten thousand idle connections hold no input
/// buffers, not ten thousand (issue 27, "Many connections").
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
        }
    }

    pub(super) fn filled(&self) -> &[u8] {
        match &self.data {
            Some(d) => &d[self.start..self.end],
            None => &[],
        }
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
    fn data(&mut self) -> &mut [u8] {
        let size = self.size;
        self.data.get_or_insert_with(|| {
            POOL.with(|p| p.borrow_mut().pop())
                .filter(|b| b.len() == size)
                .unwrap_or_else(|| vec![0; size].into_boxed_slice())
        })
    }

    /// Gives the buffer back to the core's pool while it holds nothing.
    fn release(&mut self) {
        if self.start != self.end {
            return;
        }
        if let Some(d) = self.data.take() {
            POOL.with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOLED_BUFFERS_MAX {
                    p.push(d);
                }
            });
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
            self.release();
            ready.readable(fd).await;
            self.drained = false;
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
                std::io::ErrorKind::WouldBlock => {
                    self.release();
                    ready.readable(fd).await
                }
                std::io::ErrorKind::Interrupted => {}
                _ => return false,
            }
        }
    }
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

    fn done(self) {
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
/// from the mapping. When the socket is full, `sendfile` waits for it
/// through the ring and goes on. Progress is stamped in `p` (the send stall
/// timeout).
pub(super) async fn send_complete(
    stream: &mut TcpStream,
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
    p.sending();
    send_all_more(stream, head, p).await?;
    let fd = stream.as_raw_fd();
    let mut pos = start;
    while pos < end {
        let (file, at) = obj.file_at(pos);
        let mut off = at as libc::off_t;
        // SAFETY: `fd` and `file` are open descriptors (the object is alive
        // while `obj` is); `off` is a valid in/out offset.
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
        // The socket is full: wait (one ring poll) until it takes more and
        // go on from the file, so a large body is never copied through user
        // space (a 50 MB hit took 196 sends of 256 KiB through the ring
        // before; benches/counts.sh). The send stall timeout still holds:
        // the sweep shuts a stalled socket down, which ends the wait.
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

/// A client socket's descriptor, borrowed to wait for it through the ring
/// (the connection's stream owns and closes it).
struct Socket(std::os::fd::RawFd);

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// Sends `head` with `MSG_MORE` (the body follows at once).
async fn send_all_more(
    stream: &mut TcpStream,
    head: &[u8],
    p: Progress<'_>,
) -> std::io::Result<()> {
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
    Ok(())
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
}
