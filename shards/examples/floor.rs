//! The floors of the side-by-side benchmarks: the least work a server can do
//! per answer on this kernel, to read coral's and its peers' figures against.
//!
//! - `floor http ADDR DIR [copy|sendfile]`: one thread, epoll, keep-alive;
//!   the files of DIR are read once at start; a request (anything up to a
//!   blank line) for `/NAME` gets file NAME with a fixed head — one
//!   `sendmsg` of head and body from memory (`copy`, the default), or the
//!   head with `MSG_MORE` and then `sendfile` from the page cache
//!   (`sendfile`); anything else gets the first file. No header parsing,
//!   no cache policy, no clock, no logging. `sendfile@N`: as `sendfile`,
//!   from a scratch copy of each file in which the body starts at byte N
//!   (a page cache layout like coral's records, whose bodies start at
//!   64-byte, not page, boundaries: benches/README.md, "Session 6").
//!   With `sendfile`, a body the socket does not take whole (2 MB and
//!   50 MB objects) goes on from where it stopped when `epoll` says the
//!   socket has room (`EPOLLOUT`), as any server's large answers must; the
//!   connection's next request waits for it. `copy` sends whole answers
//!   only: it is a floor for small objects.
//! - `floor dns ADDR`: one thread, `recvmmsg` / `sendmmsg` batches of 64;
//!   every query gets its question back with one A record (a compression
//!   pointer to the question, TTL 30, 127.0.0.1). No zone, no EDNS, no
//!   rate limiting.
//!
//! Both bind in a reuseport group, so several floors (one per core, as
//! `benches/cores.sh` runs them) can share one address.
//!
//! Neither is a server anyone should run: they bound what any server can
//! reach here. `shards/benches/proxy_hits.rs` and `benches/dns.sh` run them
//! beside coral, nginx, Knot and NSD when this example is built
//! (`cargo build --release -p coral-shards --examples`).

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: floor http ADDR DIR [copy|sendfile|sendfile@N] | floor dns ADDR";
    let addr: SocketAddr = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{usage}"));
    let result = match args.first().map(String::as_str) {
        Some("http") => {
            let dir = args.get(2).unwrap_or_else(|| panic!("{usage}"));
            let mode = args.get(3).map(String::as_str).unwrap_or("copy");
            let at = match mode.strip_prefix("sendfile@") {
                Some(n) => Some(n.parse::<u64>().unwrap_or_else(|_| panic!("{usage}"))),
                None if mode == "sendfile" => Some(0),
                None => None,
            };
            http(addr, dir, at)
        }
        Some("dns") => dns(addr),
        _ => panic!("{usage}"),
    };
    if let Err(e) = result {
        eprintln!("floor: {e}");
        std::process::exit(1);
    }
}

/// A socket bound to `addr` in a reuseport group (a listening one for
/// `STREAM`): `benches/cores.sh` runs one floor per core on one address,
/// and the kernel spreads connections and clients over them by address hash.
fn reuseport_socket(addr: SocketAddr, ty: socket2::Type) -> io::Result<socket2::Socket> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), ty, None)?;
    s.set_reuse_port(true)?;
    if ty == socket2::Type::STREAM {
        s.set_reuse_address(true)?;
    }
    s.bind(&addr.into())?;
    if ty == socket2::Type::STREAM {
        s.listen(4096)?;
    }
    Ok(s)
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A connection: bytes of requests not yet answered, and the answer whose
/// body the socket has not yet taken whole, if any.
struct Conn {
    fd: RawFd,
    buf: Vec<u8>,
    sending: Option<Sending>,
}

/// The rest of a body sent with `sendfile`: file `file` of the served set,
/// from byte `off` of it to byte `end`.
struct Sending {
    file: usize,
    off: libc::off_t,
    end: libc::off_t,
}

/// How far `answer` or `resume` got.
enum Sent {
    Whole,
    /// The socket is full; the rest waits for `EPOLLOUT`.
    Waiting(Sending),
    Failed,
}

/// A file served by the HTTP floor.
struct Served {
    target: Vec<u8>,
    head: Vec<u8>,
    body: Vec<u8>,
    file: std::fs::File,
    /// Where the body starts in `file`.
    at: u64,
}

/// `at`: `sendfile` from byte `at` of each file (0: the file itself; else
/// a scratch copy, unlinked once open); `None`: copy from memory.
fn http(addr: SocketAddr, dir: &str, at: Option<u64>) -> io::Result<()> {
    let sendfile = at.is_some();
    let at = at.unwrap_or(0);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if !path.is_file() {
            continue;
        }
        let body = std::fs::read(&path)?;
        let head = format!(
            "HTTP/1.1 200 OK\r\nServer: floor\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {}\r\nConnection: keep-alive\r\n\r\n",
            body.len()
        );
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let file = if at == 0 {
            std::fs::File::open(&path)?
        } else {
            use std::os::unix::fs::FileExt;
            let scratch = std::env::temp_dir().join(format!("floor-{}-{name}", std::process::id()));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&scratch)?;
            std::fs::remove_file(&scratch)?;
            f.write_all_at(&vec![0; at as usize], 0)?;
            f.write_all_at(&body, at)?;
            f
        };
        files.push(Served {
            target: format!("/{name}").into_bytes(),
            head: head.into_bytes(),
            body,
            file,
            at,
        });
    }
    if files.is_empty() {
        return Err(io::Error::other(format!("no file in {dir}")));
    }
    let listener: TcpListener = reuseport_socket(addr, socket2::Type::STREAM)?.into();
    listener.set_nonblocking(true)?;
    let lfd = listener.as_raw_fd();
    // SAFETY: plain syscalls on descriptors this function owns; every
    // pointer passed points at live memory of the stated length.
    unsafe {
        let ep = check(libc::epoll_create1(0))?;
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: u64::MAX,
        };
        check(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, lfd, &mut ev))?;
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut rbuf = vec![0u8; 64 << 10];
        loop {
            let n = libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, -1);
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for ev in &events[..n as usize] {
                if ev.u64 == u64::MAX {
                    while let Ok((s, _)) = listener.accept() {
                        s.set_nodelay(true)?;
                        s.set_nonblocking(true)?;
                        let fd = s.into_raw_fd();
                        let slot = conns.iter().position(Option::is_none).unwrap_or_else(|| {
                            conns.push(None);
                            conns.len() - 1
                        });
                        conns[slot] = Some(Conn {
                            fd,
                            buf: Vec::new(),
                            sending: None,
                        });
                        let mut cev = libc::epoll_event {
                            events: libc::EPOLLIN as u32,
                            u64: slot as u64,
                        };
                        check(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut cev))?;
                    }
                    continue;
                }
                let slot = ev.u64 as usize;
                let Some(c) = conns[slot].as_mut() else {
                    continue;
                };
                let mut close = false;
                if let Some(rest) = c.sending.take() {
                    match resume(c.fd, &files[rest.file], rest) {
                        Sent::Whole => {
                            // Back to reading; answer what came meanwhile.
                            let mut cev = libc::epoll_event {
                                events: libc::EPOLLIN as u32,
                                u64: slot as u64,
                            };
                            check(libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, c.fd, &mut cev))?;
                        }
                        Sent::Waiting(rest) => {
                            c.sending = Some(rest);
                            continue;
                        }
                        Sent::Failed => close = true,
                    }
                } else if ev.events & libc::EPOLLIN as u32 != 0 {
                    let got = libc::recv(c.fd, rbuf.as_mut_ptr().cast(), rbuf.len(), 0);
                    close = got <= 0;
                    if got > 0 {
                        c.buf.extend_from_slice(&rbuf[..got as usize]);
                    }
                }
                while !close && c.sending.is_none() {
                    let Some(end) = c.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        break;
                    };
                    let target = c.buf[..end].split(|&b| b == b' ').nth(1).unwrap_or(b"");
                    let i = files.iter().position(|f| f.target == target).unwrap_or(0);
                    let sent = answer(c.fd, &files[i], i, sendfile);
                    c.buf.drain(..end + 4);
                    match sent {
                        Sent::Whole => {}
                        Sent::Waiting(rest) => {
                            c.sending = Some(rest);
                            let mut cev = libc::epoll_event {
                                events: libc::EPOLLOUT as u32,
                                u64: slot as u64,
                            };
                            check(libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, c.fd, &mut cev))?;
                        }
                        Sent::Failed => close = true,
                    }
                }
                if close {
                    libc::close(c.fd);
                    conns[slot] = None;
                }
            }
        }
    }
}

/// Sends one answer (file `i` of the served set): whole, or with
/// `sendfile` as far as the socket takes it. A head, or a `copy` answer,
/// the socket does not take whole fails: a benchmark's client with one
/// request in flight finds the socket empty.
fn answer(fd: RawFd, f: &Served, i: usize, sendfile: bool) -> Sent {
    let (head, body) = (&f.head[..], &f.body[..]);
    // SAFETY: the iovecs point at live slices; `fd` and `file` are open.
    unsafe {
        if sendfile {
            if libc::send(
                fd,
                head.as_ptr().cast(),
                head.len(),
                libc::MSG_MORE | libc::MSG_NOSIGNAL,
            ) != head.len() as isize
            {
                return Sent::Failed;
            }
            let off = f.at as libc::off_t;
            let end = off + body.len() as libc::off_t;
            return resume(fd, f, Sending { file: i, off, end });
        }
        let mut iov = [
            libc::iovec {
                iov_base: head.as_ptr() as *mut _,
                iov_len: head.len(),
            },
            libc::iovec {
                iov_base: body.as_ptr() as *mut _,
                iov_len: body.len(),
            },
        ];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 2;
        let total = head.len() + body.len();
        let n = libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL);
        if n == total as isize {
            return Sent::Whole;
        }
        if n < 0 {
            return Sent::Failed;
        }
        // A short send: the rest in order.
        let mut rest = Vec::with_capacity(total - n as usize);
        rest.extend_from_slice(head);
        rest.extend_from_slice(body);
        let mut at = n as usize;
        while at < total {
            let m = libc::send(
                fd,
                rest[at..].as_ptr().cast(),
                total - at,
                libc::MSG_NOSIGNAL,
            );
            if m <= 0 {
                return Sent::Failed;
            }
            at += m as usize;
        }
        Sent::Whole
    }
}

/// Goes on with `sendfile` from `rest` until the body is sent or the socket
/// is full.
fn resume(fd: RawFd, f: &Served, mut rest: Sending) -> Sent {
    // SAFETY: `fd` and the file are open; `rest.off` is a live local.
    unsafe {
        while rest.off < rest.end {
            let n = libc::sendfile(
                fd,
                f.file.as_raw_fd(),
                &mut rest.off,
                (rest.end - rest.off) as usize,
            );
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock {
                return Sent::Waiting(rest);
            }
            if n <= 0 {
                return Sent::Failed;
            }
        }
    }
    Sent::Whole
}

const BATCH: usize = 64;
const DGRAM_BYTES: usize = 1232;

fn dns(addr: SocketAddr) -> io::Result<()> {
    let sock: UdpSocket = reuseport_socket(addr, socket2::Type::DGRAM)?.into();
    let fd = sock.as_raw_fd();
    let mut rx = vec![[0u8; DGRAM_BYTES]; BATCH];
    let mut tx = vec![[0u8; DGRAM_BYTES]; BATCH];
    // SAFETY: zeroed sockaddr_storage, iovec and mmsghdr are valid values;
    // every pointer set below points into the vectors above, which outlive
    // the syscalls.
    unsafe {
        let mut names: Vec<libc::sockaddr_storage> = vec![std::mem::zeroed(); BATCH];
        let mut riov: Vec<libc::iovec> = (0..BATCH)
            .map(|i| libc::iovec {
                iov_base: rx[i].as_mut_ptr().cast(),
                iov_len: DGRAM_BYTES,
            })
            .collect();
        let mut tiov: Vec<libc::iovec> = (0..BATCH)
            .map(|i| libc::iovec {
                iov_base: tx[i].as_mut_ptr().cast(),
                iov_len: 0,
            })
            .collect();
        let mut rmsgs: Vec<libc::mmsghdr> = vec![std::mem::zeroed(); BATCH];
        let mut tmsgs: Vec<libc::mmsghdr> = vec![std::mem::zeroed(); BATCH];
        loop {
            for i in 0..BATCH {
                rmsgs[i].msg_hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
                rmsgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
                rmsgs[i].msg_hdr.msg_iov = &mut riov[i];
                rmsgs[i].msg_hdr.msg_iovlen = 1;
            }
            let n = libc::recvmmsg(
                fd,
                rmsgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            );
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut out = 0;
            for i in 0..n as usize {
                let q = &rx[i][..rmsgs[i].msg_len as usize];
                let Some(len) = canned_answer(q, &mut tx[out]) else {
                    continue;
                };
                tiov[out].iov_len = len;
                tmsgs[out].msg_hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
                tmsgs[out].msg_hdr.msg_namelen = rmsgs[i].msg_hdr.msg_namelen;
                tmsgs[out].msg_hdr.msg_iov = &mut tiov[out];
                tmsgs[out].msg_hdr.msg_iovlen = 1;
                out += 1;
            }
            let mut sent = 0;
            while sent < out {
                let m = libc::sendmmsg(fd, tmsgs[sent..].as_mut_ptr(), (out - sent) as u32, 0);
                if m <= 0 {
                    break;
                }
                sent += m as usize;
            }
        }
    }
}

/// The query's header and question, answered with one A record; None for a
/// datagram that is not a one-question query.
fn canned_answer(q: &[u8], out: &mut [u8; DGRAM_BYTES]) -> Option<usize> {
    if q.len() < 12 || q[2] & 0x80 != 0 || q[4..6] != [0, 1] {
        return None;
    }
    let mut at = 12;
    loop {
        let l = *q.get(at)? as usize;
        if l == 0 {
            at += 1;
            break;
        }
        if l > 63 {
            return None;
        }
        at += 1 + l;
    }
    let end = at + 4;
    if end > q.len() {
        return None;
    }
    const RECORD: [u8; 16] = [0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 127, 0, 0, 1];
    let len = end + RECORD.len();
    if len > out.len() {
        return None;
    }
    out[..end].copy_from_slice(&q[..end]);
    out[2] = 0x84 | (q[2] & 0x01); // QR, AA, RD echoed
    out[3] = 0;
    out[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    out[end..len].copy_from_slice(&RECORD);
    Some(len)
}
