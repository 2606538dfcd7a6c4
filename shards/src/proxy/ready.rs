//! When a client connection has bytes to read: one edge-triggered epoll
//! instance per core, waited on through the ring as one descriptor.
//!
//! glommio waits for a socket with a one-shot `IORING_OP_POLL_ADD` armed
//! after every read. Its rings are set up without `IORING_SETUP_COOP_TASKRUN`,
//! so a poll that completes while the core runs user code is delivered with
//! an interrupt (a reschedule IPI) to make the thread run the ring's task
//! work: on a keep-alive connection that is one armed poll and, on a busy
//! core, up to one interrupt per request (0.07-0.47 per 4 KiB hit measured,
//! `perf stat -e irq_vectors:reschedule_entry`; nginx and the floor: none).
//!
//! Here every client socket is added once to the core's epoll set
//! (`EPOLLIN | EPOLLRDHUP | EPOLLET`); a connection reads with a plain
//! non-blocking `recv` and, only when that finds nothing, waits for its
//! descriptor's next edge. One task, [`run`], collects the edges with
//! `epoll_wait` (no waiting) and wakes the connections; when there were
//! none it arms one poll on the epoll descriptor. So a busy core pays one
//! `epoll_wait` and at most one armed poll per turn of its loop, not one
//! per request. An edge that comes while its connection is not waiting is
//! kept (`ready`), so it is never lost; a spurious wake costs one `recv`.
//!
//! Two things ride along with a wait (issue 27, session 7): a connection
//! that waits with an empty input buffer parks the buffer in its slot and
//! takes it back when its next request comes (at most
//! `limits::PROXY.parked_input_buffers_max` parked; the deadline sweep
//! moves one parked for a whole sweep period to the core's pool, so an
//! idle connection holds none for more than two seconds), and a dispatch
//! reads the clocks once for all the connections it wakes ([`Now`]).
//!
//! A connection's sends wait here too (session 8): the socket is watched for
//! `EPOLLOUT` as well, and a `sendfile` that found it full waits for its
//! write edge ([`Readiness::writable`]) instead of arming a ring poll per
//! wait. Read and write waits have a flag and a waker each, and each is
//! woken only by its own events.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::clock::Now;

/// Edges collected per `epoll_wait`.
const EVENTS_PER_WAIT: usize = 256;
/// Dispatches that found edges in one turn of the executor at most, each
/// after the connections the one before woke have run; then the ring poll
/// (other I/O waits for the turn's end meanwhile).
const DISPATCHES_PER_TURN_MAX: u32 = 4;
/// While looking again in a turn finds nothing, one turn in this many tries.
const LOOK_AGAIN_PROBE_TURNS: u32 = 8;
/// Input buffers parked in a core's slots at most.
const PARKED_BUFFERS_MAX: usize = crate::limits::PROXY.parked_input_buffers_max;
/// The events that end a read wait: bytes, the peer's end of stream, a
/// hangup or an error (the next `recv` says which).
const READ_EDGE: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
/// The events that end a write wait: room to send, a hangup (the deadline
/// sweep's `shutdown` of a stalled send) or an error (the next send says
/// which).
const WRITE_EDGE: u32 = (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) as u32;

/// One core's readiness set.
pub struct Readiness {
    epfd: OwnedFd,
    slots: RefCell<Slots>,
    /// The clocks as the last dispatch that found edges read them: a wait
    /// that a dispatch ended resolves with these (no later than its edge).
    woke_at: Cell<Now>,
    /// Input buffers parked in the slots now (at most `PARKED_BUFFERS_MAX`).
    parked: Cell<usize>,
}

/// The watched descriptors' slots, indexed by descriptor number (issue 27:
/// a hash map here cost two SipHash computations per request). The kernel
/// hands out the lowest free numbers, so the table is as long as the
/// process's highest open descriptor, whatever a client sends.
#[derive(Default)]
struct Slots(Vec<Option<Slot>>);

impl Slots {
    #[cfg(test)]
    fn get(&self, fd: &RawFd) -> Option<&Slot> {
        self.0.get(usize::try_from(*fd).ok()?)?.as_ref()
    }

    fn get_mut(&mut self, fd: &RawFd) -> Option<&mut Slot> {
        self.0.get_mut(usize::try_from(*fd).ok()?)?.as_mut()
    }

    /// Puts `slot` at `fd`; the slot it replaces, if any.
    fn insert(&mut self, fd: RawFd, slot: Slot) -> Option<Slot> {
        let Ok(i) = usize::try_from(fd) else {
            return None;
        };
        if i >= self.0.len() {
            self.0.resize_with(i + 1, || None);
        }
        self.0[i].replace(slot)
    }

    fn remove(&mut self, fd: &RawFd) -> Option<Slot> {
        self.0.get_mut(usize::try_from(*fd).ok()?)?.take()
    }
}

#[derive(Default)]
struct Slot {
    /// A read edge came that no read has consumed yet.
    ready: bool,
    /// A read waits for the next edge (its waker is `waker`).
    waiting: bool,
    /// A write edge (write space, hangup or error) came since the writer
    /// last found the socket full ([`Readiness::writable`]).
    writable: bool,
    /// A write waits for the next write edge (its waker is `write_waker`).
    write_waiting: bool,
    /// The waiting writer's waker, kept between waits as `waker` is; woken
    /// only while `write_waiting`.
    write_waker: Option<Waker>,
    /// The waiting task's waker, kept between waits and woken by reference
    /// (issue 27: taking it on every wake and cloning it on every wait cost
    /// a reference count up and down and two executor lookups a request).
    /// Woken only while `waiting`; dropped with the slot.
    waker: Option<Waker>,
    /// The connection's empty input buffer, parked while it waits; handed
    /// back when the wait resolves.
    parked: Option<Box<[u8]>>,
    /// `parked` was there at the last reclaim: the next takes it.
    parked_old: bool,
}

/// The epoll descriptor, for the ring to wait on (`Readiness` owns it).
struct EpollFd(RawFd);

impl AsRawFd for EpollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Readiness {
    pub fn new() -> io::Result<Rc<Readiness>> {
        // SAFETY: plain syscall; the descriptor is owned below.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Rc::new(Readiness {
            // SAFETY: `fd` is a new descriptor nothing else owns.
            epfd: unsafe { OwnedFd::from_raw_fd(fd) },
            slots: RefCell::new(Slots::default()),
            woke_at: Cell::new(Now::read()),
            parked: Cell::new(0),
        }))
    }

    /// Watches `fd` (a non-blocking socket) until [`forget`](Self::forget).
    pub fn watch(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: fd as u64,
        };
        // SAFETY: both descriptors are open; `ev` is a valid event.
        if unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // The first read tries at once.
        let replaced = self.slots.borrow_mut().insert(
            fd,
            Slot {
                ready: true,
                ..Slot::default()
            },
        );
        // A slot left by a descriptor never forgotten: its parked buffer
        // goes with it, and is no longer counted.
        if replaced.is_some_and(|s| s.parked.is_some()) {
            self.parked.set(self.parked.get() - 1);
        }
        Ok(())
    }

    /// Stops watching `fd` (before it is closed: its number is reused).
    pub fn forget(&self, fd: RawFd) {
        let removed = self.slots.borrow_mut().remove(&fd);
        if let Some(slot) = removed {
            if slot.parked.is_some() {
                self.parked.set(self.parked.get() - 1);
            }
            // SAFETY: plain syscall; an error (already closed) is harmless.
            unsafe {
                libc::epoll_ctl(
                    self.epfd.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    fd,
                    std::ptr::null_mut(),
                );
            }
        }
    }

    /// Resolves once `fd` has had an edge since it last resolved.
    #[cfg(test)]
    pub fn readable(&self, fd: RawFd) -> Readable<'_, 'static> {
        Readable {
            r: self,
            fd,
            park: None,
            waited: false,
        }
    }

    /// The clocks as the last dispatch that found edges read them: for a
    /// connection whose wait such a dispatch ended (its `Readable` resolved
    /// with true), the moment its bytes came in, up to that turn's work.
    pub fn woke_at(&self) -> Now {
        self.woke_at.get()
    }

    /// As [`readable`](Self::readable), parking `buf` (an empty input
    /// buffer, when `Some`) in `fd`'s slot while the wait is pending and
    /// putting it back (if still parked) when it resolves.
    pub fn readable_parking<'a, 'b>(
        &'a self,
        fd: RawFd,
        buf: Option<&'b mut Option<Box<[u8]>>>,
    ) -> Readable<'a, 'b> {
        Readable {
            r: self,
            fd,
            park: buf,
            waited: false,
        }
    }

    /// Whether one more input buffer may be parked.
    pub fn may_park(&self) -> bool {
        self.parked.get() < PARKED_BUFFERS_MAX
    }

    /// The deadline sweep's part (once a second): hands each buffer that
    /// was already parked at the previous call to `give` (the core's pool);
    /// a wait that resolves later takes one from the pool. So a buffer
    /// stays parked one to two sweep periods at most.
    pub fn reclaim_parked(&self, mut give: impl FnMut(Box<[u8]>)) {
        if self.parked.get() == 0 {
            return;
        }
        let mut slots = self.slots.borrow_mut();
        for slot in slots.0.iter_mut().flatten() {
            if slot.parked.is_none() {
                continue;
            }
            if slot.parked_old {
                if let Some(b) = slot.parked.take() {
                    self.parked.set(self.parked.get() - 1);
                    give(b);
                }
            } else {
                slot.parked_old = true;
            }
        }
    }

    /// Collects the edges that came, wakes their connections; how many.
    fn dispatch(&self) -> usize {
        // Not zeroed (3 KiB a turn, issue 27): the kernel writes the first
        // `n` entries and only those are read.
        let mut events = [MaybeUninit::<libc::epoll_event>::uninit(); EVENTS_PER_WAIT];
        // SAFETY: `events` holds EVENTS_PER_WAIT entries; no waiting.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                events.as_mut_ptr().cast(),
                EVENTS_PER_WAIT as i32,
                0,
            )
        };
        if n <= 0 {
            return 0;
        }
        let n = (n as usize).min(EVENTS_PER_WAIT);
        // Once for every connection this dispatch wakes (issue 27).
        self.woke_at.set(Now::read());
        let mut slots = self.slots.borrow_mut();
        for ev in &events[..n] {
            // SAFETY: epoll_wait wrote the first `n` entries.
            let ev = unsafe { ev.assume_init_read() };
            let fd = ev.u64 as RawFd;
            if let Some(slot) = slots.get_mut(&fd) {
                // The events are the socket's state when collected, not
                // what woke it: a read edge says EPOLLOUT too while there is
                // room, a write edge EPOLLIN while bytes wait unread. Each
                // side is woken only by what it waits for.
                if ev.events & READ_EDGE != 0 {
                    slot.ready = true;
                    if slot.waiting {
                        slot.waiting = false;
                        if let Some(w) = &slot.waker {
                            w.wake_by_ref();
                        }
                    }
                }
                if ev.events & WRITE_EDGE != 0 {
                    slot.writable = true;
                    if slot.write_waiting {
                        slot.write_waiting = false;
                        if let Some(w) = &slot.write_waker {
                            w.wake_by_ref();
                        }
                    }
                }
            }
        }
        n
    }
}

/// See [`Readiness::readable`] and [`Readiness::readable_parking`]:
/// resolves with whether it waited, hence whether a dispatch ended the
/// wait ([`Readiness::woke_at`]); false when it was not watched.
pub struct Readable<'a, 'b> {
    r: &'a Readiness,
    fd: RawFd,
    /// The connection's buffer, to park.
    park: Option<&'b mut Option<Box<[u8]>>>,
    /// The wait was pending at least once.
    waited: bool,
}

impl Future for Readable<'_, '_> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let this = self.get_mut();
        let r = this.r;
        let mut slots = r.slots.borrow_mut();
        let Some(slot) = slots.get_mut(&this.fd) else {
            // Not watched (never, or no longer): nothing will wake it.
            return Poll::Ready(false);
        };
        if slot.ready {
            slot.ready = false;
            slot.waiting = false;
            if let Some(b) = slot.parked.take() {
                r.parked.set(r.parked.get() - 1);
                if let Some(buf) = &mut this.park {
                    if buf.is_none() {
                        **buf = Some(b);
                    }
                }
            }
            return Poll::Ready(this.waited);
        }
        match &mut slot.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            w => *w = Some(cx.waker().clone()),
        }
        slot.waiting = true;
        if let Some(buf) = &mut this.park {
            if slot.parked.is_some() {
                // One left by a wait that was dropped: replaced.
                if let Some(b) = buf.take() {
                    slot.parked = Some(b);
                    slot.parked_old = false;
                }
            } else if r.parked.get() < PARKED_BUFFERS_MAX {
                if let Some(b) = buf.take() {
                    slot.parked = Some(b);
                    slot.parked_old = false;
                    r.parked.set(r.parked.get() + 1);
                }
            }
        }
        this.waited = true;
        Poll::Pending
    }
}

impl Readiness {
    /// The wait for room to send on `fd`, for a writer whose send (a
    /// `sendfile`) just found the socket full: call it with no await since
    /// that send. It forgets the write edges collected before (the send
    /// found the socket full after them) and resolves with the first one
    /// after, whenever it is polled: an edge that comes before the first
    /// poll, or while the future is not polled, is kept. TCP signals room
    /// only after a send found the socket full, so a connection whose sends
    /// all fit costs no edge. Resolves with true then; with false when `fd`
    /// is not watched (the caller waits some other way). A hangup or an
    /// error ends the wait too (the deadline sweep's `shutdown` of a
    /// stalled send).
    pub fn writable(&self, fd: RawFd) -> Writable<'_> {
        if let Some(slot) = self.slots.borrow_mut().get_mut(&fd) {
            slot.writable = false;
        }
        Writable { r: self, fd }
    }
}

/// See [`Readiness::writable`].
pub struct Writable<'a> {
    r: &'a Readiness,
    fd: RawFd,
}

impl Future for Writable<'_> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let mut slots = self.r.slots.borrow_mut();
        let Some(slot) = slots.get_mut(&self.fd) else {
            return Poll::Ready(false);
        };
        if slot.writable {
            slot.writable = false;
            slot.write_waiting = false;
            return Poll::Ready(true);
        }
        match &mut slot.write_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            w => *w = Some(cx.waker().clone()),
        }
        slot.write_waiting = true;
        Poll::Pending
    }
}

/// The core's dispatcher: collects edges while there are any (once per
/// turn of the executor, waiting for the next turn without the ring), and
/// waits through the ring when there are none.
pub async fn run(r: Rc<Readiness>) {
    let ring = match glommio::io::PollableFd::new(EpollFd(r.epfd.as_raw_fd())) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "proxy: cannot wait on the readiness set");
            return;
        }
    };
    let (mut rounds, mut turns) = (0, 0u32);
    // Whether the last look again found edges: while they do (the core is
    // the bottleneck, its clients' next requests are in by then) every turn
    // looks again; while they do not (the clients are the slower side: an
    // `epoll_wait` more a turn for nothing) one turn in
    // `LOOK_AGAIN_PROBE_TURNS` tries.
    let mut again_found = true;
    loop {
        let n = r.dispatch();
        if rounds > 0 {
            again_found = n > 0;
        }
        let look_again = again_found || turns % LOOK_AGAIN_PROBE_TURNS == 0;
        if n > 0 && rounds < DISPATCHES_PER_TURN_MAX && look_again {
            // Edges came: once the connections they woke have run, look
            // again in the same turn (their clients may have sent more
            // meanwhile), with nothing submitted to a ring; issue 27,
            // session 8.
            rounds += 1;
            futures_lite::future::yield_now().await;
            continue;
        }
        rounds = 0;
        turns = turns.wrapping_add(1);
        // Armed after the turn's last dispatch: with edges pending it
        // completes at once (in the turn's submission, without an
        // interrupt), so the next dispatch comes one turn later.
        if let Err(e) = ring.readable().await {
            tracing::warn!(error = %e, "proxy: waiting on the readiness set failed");
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// A connected, non-blocking Unix socket pair (tests of the proxy's
/// socket code: here and `server::io`).
#[cfg(test)]
pub(crate) fn socket_pair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0);
    // SAFETY: two new descriptors nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glommio::{LocalExecutorBuilder, Placement};
    use std::time::Duration;

    use super::socket_pair as pair;

    fn send(fd: &OwnedFd, b: &[u8]) {
        // SAFETY: `b` is live for its length.
        let n = unsafe { libc::send(fd.as_raw_fd(), b.as_ptr().cast(), b.len(), 0) };
        assert_eq!(n, b.len() as isize);
    }

    fn send_from(s: &std::net::TcpStream, b: &[u8]) {
        use std::io::Write;
        let mut s = s;
        s.write_all(b).unwrap();
    }

    fn drain(fd: &OwnedFd) -> usize {
        let mut buf = [0u8; 256];
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        n.max(0) as usize
    }

    /// Polls `done` every millisecond until it holds (at most 5 s).
    async fn until(done: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "condition never held"
            );
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }

    /// An edge that comes while nobody waits is kept for the next wait; a
    /// wait with no new bytes does not resolve; bytes sent while a
    /// connection waits wake it.
    #[test]
    fn edges_wake_waiters_and_are_kept_while_nobody_waits() {
        let (kept, pending, woken) = LocalExecutorBuilder::new(Placement::Unbound)
            .name("proxy-ready")
            .io_memory(256 << 10)
            .spawn(|| async move {
                let r = Readiness::new().unwrap();
                glommio::spawn_local(run(r.clone())).detach();
                let (ours, theirs) = pair();
                let fd = ours.as_raw_fd();
                r.watch(fd).unwrap();
                // The first wait resolves at once (the first read tries).
                r.readable(fd).await;
                // Bytes come while nobody waits; wait until the dispatcher
                // has seen their edge.
                send(&theirs, b"GET / HTTP/1.1\r\n\r\n");
                until(|| r.slots.borrow().get(&fd).is_some_and(|s| s.ready)).await;
                let kept = glommio::future::timeout(Duration::from_secs(5), r.readable(fd))
                    .await
                    .is_ok();
                assert!(drain(&ours) > 0);
                // Nothing new: the wait does not resolve.
                let pending = glommio::future::timeout(Duration::from_millis(200), r.readable(fd))
                    .await
                    .is_err();
                // Bytes while it waits wake it: sent once the wait has
                // registered its waker.
                let t = theirs.as_raw_fd();
                let r2 = r.clone();
                glommio::spawn_local(async move {
                    until(|| r2.slots.borrow().get(&fd).is_some_and(|s| s.waiting)).await;
                    // SAFETY: `t` stays open (`theirs` lives to the end).
                    unsafe { libc::send(t, b"x".as_ptr().cast(), 1, 0) };
                })
                .detach();
                let woken = glommio::future::timeout(Duration::from_secs(5), r.readable(fd))
                    .await
                    .is_ok();
                r.forget(fd);
                drop(theirs);
                (kept, pending, woken)
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(kept, "an edge while nobody waited was lost");
        assert!(pending, "a wait resolved with no new bytes");
        assert!(woken, "bytes sent during a wait did not wake it");
    }

    /// Connections whose clients answer at once keep the dispatcher finding
    /// edges turn after turn (its rounds within a turn, then the ring):
    /// 32 connections each echo 300 bytes sent one at a time by a client
    /// thread that sends the next only after the echo, so every wake must
    /// come; and a timer of the executor still fires meanwhile (the rounds
    /// are bounded, the ring is polled).
    #[test]
    fn busy_connections_are_all_woken_through_the_dispatch_rounds() {
        const CONNS: usize = 32;
        const BYTES: usize = 300;
        let (ours, theirs): (Vec<_>, Vec<_>) = (0..CONNS).map(|_| pair()).unzip();
        let client = std::thread::spawn(move || {
            for _ in 0..BYTES {
                for t in &theirs {
                    send(t, b"p");
                }
                for t in &theirs {
                    let mut b = [0u8; 1];
                    let start = std::time::Instant::now();
                    // SAFETY: `b` is writable for its length.
                    while unsafe { libc::recv(t.as_raw_fd(), b.as_mut_ptr().cast(), 1, 0) } != 1 {
                        assert!(start.elapsed() < Duration::from_secs(10), "no echo");
                        std::thread::yield_now();
                    }
                }
            }
        });
        let ticks = LocalExecutorBuilder::new(Placement::Unbound)
            .name("proxy-rounds")
            .spawn(move || async move {
                let r = Readiness::new().unwrap();
                glommio::spawn_local(run(r.clone())).detach();
                let ticks = Rc::new(Cell::new(0u32));
                let t = ticks.clone();
                glommio::spawn_local(async move {
                    loop {
                        glommio::timer::sleep(Duration::from_millis(2)).await;
                        t.set(t.get() + 1);
                    }
                })
                .detach();
                let mut tasks = Vec::new();
                for fd in ours {
                    r.watch(fd.as_raw_fd()).unwrap();
                    let r = r.clone();
                    tasks.push(glommio::spawn_local(async move {
                        let mut echoed = 0;
                        while echoed < BYTES {
                            r.readable(fd.as_raw_fd()).await;
                            let n = drain(&fd);
                            for _ in 0..n {
                                send(&fd, b"e");
                            }
                            echoed += n;
                        }
                        r.forget(fd.as_raw_fd());
                    }));
                }
                let all = glommio::future::timeout(Duration::from_secs(20), async {
                    for t in tasks {
                        t.await;
                    }
                })
                .await;
                assert!(all.is_ok(), "a connection was never woken");
                ticks.get()
            })
            .unwrap()
            .join()
            .unwrap();
        client.join().unwrap();
        assert!(ticks > 0, "the timer never fired during the rounds");
    }

    /// Counts its wakes.
    struct CountWaker(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for CountWaker {
        fn wake(self: std::sync::Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Runs `dispatch` until it collects an edge (at most 5 s); how many.
    fn dispatched(r: &Readiness) -> usize {
        let start = std::time::Instant::now();
        loop {
            let n = r.dispatch();
            if n > 0 {
                return n;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "no edge came");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sends until the socket is full; the bytes sent.
    fn fill(fd: &OwnedFd) -> usize {
        let chunk = [b'f'; 16 << 10];
        let mut sent = 0;
        loop {
            // SAFETY: `chunk` is live for its length.
            let n = unsafe {
                libc::send(
                    fd.as_raw_fd(),
                    chunk.as_ptr().cast(),
                    chunk.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                assert_eq!(io::Error::last_os_error().kind(), io::ErrorKind::WouldBlock);
                return sent;
            }
            sent += n as usize;
        }
    }

    /// Reads `want` bytes from the client's end.
    fn read_all(s: &mut std::net::TcpStream, want: usize) {
        use std::io::Read;
        let mut buf = vec![0u8; 64 << 10];
        let mut got = 0;
        while got < want {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed after {got} of {want}");
            got += n;
        }
    }

    /// A writer that found a TCP socket full waits for the socket's write
    /// edge in the epoll set and is woken by it: not by bytes coming in
    /// while the socket is still full, and a waiting reader is not woken by
    /// the room; a send that fits costs no edge at all; the hangup of a
    /// `shutdown` (the send stall timeout's) ends a write wait. Polled by
    /// hand with a waker that counts its wakes, the dispatch run directly.
    #[test]
    fn a_writer_waiting_on_a_full_socket_is_woken_by_its_edge_alone() {
        use std::sync::atomic::Ordering::SeqCst;
        use std::sync::Arc;
        let l = std::net::TcpListener::bind("127.18.8.1:0").unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut client = client;
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let ours = OwnedFd::from(server);
        let fd = ours.as_raw_fd();
        let r = Readiness::new().unwrap();
        r.watch(fd).unwrap();
        // Collect what came so far (a new socket has room: one edge).
        while r.dispatch() > 0 {}
        let counter = Arc::new(CountWaker(0.into()));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let wakes = || counter.0.load(SeqCst);

        // A send that fits, read by the client: no edge.
        send(&ours, &[b's'; 4096]);
        read_all(&mut client, 4096);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(r.dispatch(), 0, "a send that fit cost an edge");

        // The socket full: the writer waits.
        let mut sent = fill(&ours);
        let mut w = r.writable(fd);
        assert!(Pin::new(&mut w).poll(&mut cx).is_pending());
        assert!(r.slots.borrow().get(&fd).unwrap().write_waiting);
        // Bytes come in while it is still full: the reader's edge only.
        send_from(&client, b"x");
        dispatched(&r);
        assert!(r.slots.borrow().get(&fd).unwrap().ready);
        assert_eq!(wakes(), 0, "bytes coming in woke the writer");
        assert!(Pin::new(&mut w).poll(&mut cx).is_pending());
        // A reader waits too (the byte read first).
        let mut rd = r.readable(fd);
        assert!(Pin::new(&mut rd).poll(&mut cx).is_ready());
        assert_eq!(drain(&ours), 1);
        let mut rd = r.readable(fd);
        assert!(Pin::new(&mut rd).poll(&mut cx).is_pending());
        // The client reads: room, the writer's edge; the reader sleeps on.
        read_all(&mut client, sent);
        let start = std::time::Instant::now();
        while wakes() == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the writer was never woken by its edge"
            );
            r.dispatch();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(wakes(), 1);
        assert_eq!(Pin::new(&mut w).poll(&mut cx), Poll::Ready(true));
        assert!(
            Pin::new(&mut rd).poll(&mut cx).is_pending(),
            "room woke the reader"
        );
        assert_eq!(wakes(), 1);

        // Edges collected before the send that found the socket full are
        // forgotten; one after it, before the first poll, is kept.
        sent = fill(&ours);
        r.slots.borrow_mut().get_mut(&fd).unwrap().writable = true;
        let mut w = r.writable(fd);
        assert!(
            Pin::new(&mut w).poll(&mut cx).is_pending(),
            "a stale edge ended the wait"
        );
        // A new wait (as after one dropped): the edge that comes before
        // its first poll ends it.
        let mut w = r.writable(fd);
        read_all(&mut client, sent);
        dispatched(&r);
        assert_eq!(Pin::new(&mut w).poll(&mut cx), Poll::Ready(true));

        // The stall timeout's shutdown: the hangup wakes a waiting writer
        // (and the reader).
        fill(&ours);
        let mut w = r.writable(fd);
        assert!(Pin::new(&mut w).poll(&mut cx).is_pending());
        let before = wakes();
        crate::accept::shut_down(fd, true);
        dispatched(&r);
        assert_eq!(
            wakes(),
            before + 2,
            "the hangup woke the writer and the reader"
        );
        assert_eq!(Pin::new(&mut w).poll(&mut cx), Poll::Ready(true));
        assert!(Pin::new(&mut rd).poll(&mut cx).is_ready());

        // Not watched: resolves at once with false (the caller waits
        // through the ring).
        r.forget(fd);
        let mut w = r.writable(fd);
        assert_eq!(Pin::new(&mut w).poll(&mut cx), Poll::Ready(false));
    }

    /// A waiting connection's empty buffer is parked in its slot and handed
    /// back when its edge comes, with the clocks of the dispatch that woke
    /// it (read no earlier than the bytes were sent); at most
    /// `PARKED_BUFFERS_MAX` are parked; one parked through two reclaims goes
    /// to the pool; a forgotten descriptor's parked buffer is dropped.
    #[test]
    fn a_waiting_connection_parks_its_buffer_and_takes_it_back() {
        LocalExecutorBuilder::new(Placement::Unbound)
            .name("proxy-park")
            .io_memory(256 << 10)
            .spawn(|| async move {
                let r = Readiness::new().unwrap();
                glommio::spawn_local(run(r.clone())).detach();
                let (ours, theirs) = pair();
                let fd = ours.as_raw_fd();
                r.watch(fd).unwrap();
                // The first wait resolves at once, without waiting: false.
                assert!(!r.readable(fd).await);
                let mut buf = Some(vec![7u8; 64].into_boxed_slice());
                let t = theirs.as_raw_fd();
                let r2 = r.clone();
                let sent_at = Rc::new(std::cell::Cell::new(None));
                let sent = sent_at.clone();
                glommio::spawn_local(async move {
                    until(|| r2.slots.borrow().get(&fd).is_some_and(|s| s.waiting)).await;
                    assert!(r2.slots.borrow().get(&fd).unwrap().parked.is_some());
                    assert_eq!(r2.parked.get(), 1);
                    sent.set(Some(Now::read()));
                    // SAFETY: `t` stays open (`theirs` lives to the end).
                    unsafe { libc::send(t, b"x".as_ptr().cast(), 1, 0) };
                })
                .detach();
                let waited = r.readable_parking(fd, Some(&mut buf)).await;
                assert!(waited, "the wait was ended by a dispatch");
                assert_eq!(buf.as_deref(), Some(&[7u8; 64][..]), "the buffer came back");
                assert_eq!(r.parked.get(), 0);
                let (before, woke) = (sent_at.get().unwrap(), r.woke_at());
                assert!(woke.mono >= before.mono && woke.unix_secs >= before.unix_secs);
                assert!(woke.mono <= Now::read().mono);
                assert!(drain(&ours) > 0);

                // Parked, then reclaimed by the second reclaim, not the first.
                let mut wait = Box::pin(r.readable_parking(fd, Some(&mut buf)));
                let pending = glommio::future::timeout(Duration::from_millis(50), &mut wait)
                    .await
                    .is_err();
                assert!(pending);
                drop(wait);
                assert!(buf.is_none(), "parked while waiting");
                let mut given = 0;
                r.reclaim_parked(|_| given += 1);
                assert_eq!((given, r.parked.get()), (0, 1));
                r.reclaim_parked(|_| given += 1);
                assert_eq!((given, r.parked.get()), (1, 0));

                // The bound: with PARKED_BUFFERS_MAX parked, no more.
                r.parked.set(PARKED_BUFFERS_MAX);
                assert!(!r.may_park());
                let mut other = Some(vec![1u8; 8].into_boxed_slice());
                let mut wait = Box::pin(r.readable_parking(fd, Some(&mut other)));
                let _ = glommio::future::timeout(Duration::from_millis(20), &mut wait).await;
                drop(wait);
                assert!(other.is_some(), "parked beyond the bound");
                r.parked.set(0);

                // Forgotten while parked: dropped, and no longer counted.
                let mut wait = Box::pin(r.readable_parking(fd, Some(&mut other)));
                let _ = glommio::future::timeout(Duration::from_millis(20), &mut wait).await;
                drop(wait);
                assert_eq!((other.is_none(), r.parked.get()), (true, 1));
                r.forget(fd);
                assert_eq!(r.parked.get(), 0);
                // Watched again over a slot with a parked buffer (never
                // forgotten): the count stays true.
                r.watch(fd).unwrap();
                let mut one = Some(vec![2u8; 8].into_boxed_slice());
                assert!(!r.readable(fd).await);
                let mut wait = Box::pin(r.readable_parking(fd, Some(&mut one)));
                let _ = glommio::future::timeout(Duration::from_millis(20), &mut wait).await;
                drop(wait);
                assert_eq!(r.parked.get(), 1);
                // As when a descriptor was closed (which leaves the epoll
                // set) and its number reused without `forget`.
                // SAFETY: plain syscall on open descriptors.
                unsafe {
                    libc::epoll_ctl(
                        r.epfd.as_raw_fd(),
                        libc::EPOLL_CTL_DEL,
                        fd,
                        std::ptr::null_mut(),
                    )
                };
                r.watch(fd).unwrap();
                assert_eq!(r.parked.get(), 0);
                r.forget(fd);
                drop(theirs);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
