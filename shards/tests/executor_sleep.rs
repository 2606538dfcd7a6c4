//! The executor's sleep (issue 27, session 9): glommio-ng as patched in
//! `vendor/glommio-ng` sleeps in one `io_uring_enter` — the next user timer
//! is the wait's own timeout, the poll that links the latency ring to the
//! main ring is kept armed across sleeps, the preemption timer is kept through
//! a sleep that follows a turn that ran tasks, and a SeqCst fence on both
//! sides replaces the sleeper's `membarrier` (ARCHITECTURE.md, "The
//! executor"). These tests fail if that loses a wake-up: a timer that does not
//! fire, a remote send or a foreign waker that does not wake a sleeping
//! executor, or a preemption that never comes after a sleep. Each runs its
//! executors on threads of their own and waits for them with a generous
//! deadline, so a lost wake-up fails the test instead of hanging it; nothing
//! here judges a speed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use glommio::channels::shared_channel;
use glommio::{LocalExecutorBuilder, Placement};

/// How long a test waits for its executors before it calls a wake-up lost:
/// minutes, on a loaded 2-core machine, for work that needs well under a
/// second idle.
const DEADLINE: Duration = Duration::from_secs(120);

/// The preemption period of the tests of wake-ups: longer than `DEADLINE`, so
/// that a preemption timer kept through a sleep cannot stand in for a user
/// timer or a remote wake-up the sleep missed (it would wake the executor once a
/// period, and a lost wake-up would only make a round late).
const PREEMPT_NEVER: Duration = Duration::from_secs(600);

/// Runs `f` on an executor of its own (a thread, any CPU) with the given
/// preemption period, and returns its result, or fails the test when it does
/// not end within `DEADLINE`.
fn on_executor<T, F, Fut>(name: &'static str, preempt: Duration, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    let (done, result) = mpsc::channel();
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .name(name)
        .preempt_timer(preempt)
        .spawn(move || async move {
            let out = f().await;
            let _ = done.send(out);
        })
        .expect("an executor starts");
    let out = result
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("{name}: not done in {DEADLINE:?}: a wake-up was lost"));
    handle.join().expect("the executor ends");
    out
}

/// A sleep with a user timer pending wakes for it, again and again, whether
/// its deadline moved since the last sleep or not: the executor has nothing
/// else to wake it (no I/O, no other executor), so a timer the sleep did not
/// wait for hangs the loop. A 60 s timer pending throughout is never the one
/// the sleep waits for.
#[test]
fn a_sleeping_executor_wakes_for_each_timer() {
    let rounds = on_executor("timers", PREEMPT_NEVER, || async {
        let far = glommio::spawn_local(glommio::timer::sleep(Duration::from_secs(60))).detach();
        let mut rounds = 0u32;
        for i in 0..300u64 {
            // The same deadline distance twice, then a longer, then a shorter
            // one than the sleep before: the next timer moves both ways.
            let d = Duration::from_micros([1_000, 1_000, 3_000, 200][(i % 4) as usize]);
            let started = Instant::now();
            glommio::timer::sleep(d).await;
            assert!(started.elapsed() >= d, "a timer fired early");
            rounds += 1;
        }
        far.cancel();
        rounds
    });
    assert_eq!(rounds, 300);
}

/// A timer made while the executor is awake, earlier than every timer it
/// slept for before, is the one the next sleep waits for: a task sleeps 1 ms
/// beside one sleeping 60 s and another 30 s (both made first, so the sleeps
/// before it had only those) — if the sleep still waited for the 30 s timer,
/// each round would take 30 s and the test would miss its deadline.
#[test]
fn an_earlier_timer_made_while_awake_is_not_lost() {
    let rounds = on_executor("earlier", PREEMPT_NEVER, || async {
        let far = glommio::spawn_local(glommio::timer::sleep(Duration::from_secs(60))).detach();
        let mut rounds = 0u32;
        for _ in 0..50 {
            let long =
                glommio::spawn_local(glommio::timer::sleep(Duration::from_secs(30))).detach();
            // Let the executor sleep with only the long timers armed.
            glommio::timer::sleep(Duration::from_millis(2)).await;
            let short = glommio::spawn_local(async {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            });
            short.await;
            long.cancel();
            rounds += 1;
        }
        far.cancel();
        rounds
    });
    assert_eq!(rounds, 50);
}

/// A value sent from another executor wakes this one, sleeping on its
/// receive with no timer at all (a lost wake-up hangs it), and the receive
/// that makes room wakes the sender sleeping on a full channel: 3,000 values
/// through a channel of 2, the sender pausing now and then so that the
/// receiver sleeps between values, then the receiver pausing so that the
/// sender sleeps.
#[test]
fn a_remote_send_wakes_a_sleeping_executor_and_room_wakes_the_sender() {
    const VALUES: u64 = 3_000;
    let (sender, receiver) = shared_channel::new_bounded::<u64>(2);
    let consumer = thread::spawn(move || {
        on_executor("receiver", PREEMPT_NEVER, move || async move {
            let receiver = receiver.connect().await;
            let mut next = 0u64;
            while let Some(v) = receiver.recv().await {
                assert_eq!(v, next, "values arrive in order, none lost");
                next += 1;
                // The second half: the receiver pauses, the sender sleeps on
                // a full channel until a receive makes room.
                if next > VALUES / 2 && next % 97 == 0 {
                    glommio::timer::sleep(Duration::from_micros(300)).await;
                }
            }
            next
        })
    });
    let sent = on_executor("sender", PREEMPT_NEVER, move || async move {
        let sender = sender.connect().await;
        for v in 0..VALUES {
            // The first half: the sender pauses, the receiver sleeps with no
            // timer of its own until a send wakes it.
            if v < VALUES / 2 && v % 7 == 0 {
                glommio::timer::sleep(Duration::from_micros(50 + (v % 5) * 100)).await;
            }
            sender.send(v).await.expect("the receiver is there");
        }
        VALUES
    });
    let received = consumer.join().expect("the receiver's thread ends");
    assert_eq!((sent, received), (VALUES, VALUES));
}

/// A task's waker woken from a thread outside the executor (glommio queues
/// it and writes the sleeping executor's eventfd) wakes the executor, 500
/// times, with no timer armed while it waits.
#[test]
fn a_foreign_wake_wakes_a_sleeping_executor() {
    const ROUNDS: u32 = 500;
    let woken = on_executor("foreign", PREEMPT_NEVER, || async {
        let mut woken = 0u32;
        for i in 0..ROUNDS {
            let flag = Arc::new(Flag::default());
            let other = flag.clone();
            let pause = Duration::from_micros(u64::from(i % 4) * 100);
            let waker_thread = thread::spawn(move || {
                thread::sleep(pause);
                other.set();
            });
            FlagSet(flag).await;
            woken += 1;
            waker_thread.join().expect("the waking thread ends");
        }
        woken
    });
    assert_eq!(woken, ROUNDS);
}

/// A readiness poll armed by the turn's last task, just before the executor
/// runs out of work and sleeps, reaches the kernel (it goes with the
/// sleep's own `io_uring_enter`): a task waits for a socket to become
/// readable, reads a byte and answers it, 500 times, while a plain thread
/// writes each byte after a pause in which the executor sleeps with no timer
/// at all. A poll left behind in the ring would never fire.
#[test]
fn a_poll_armed_before_a_sleep_reaches_the_kernel() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    const ROUNDS: u32 = 500;
    let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
    ours.set_nonblocking(true).expect("non-blocking");
    theirs
        .set_read_timeout(Some(DEADLINE))
        .expect("a read timeout");
    let peer = thread::spawn(move || {
        let mut byte = [0u8; 1];
        for i in 0..ROUNDS {
            thread::sleep(Duration::from_micros(u64::from(i % 3) * 200));
            theirs
                .write_all(&[i as u8])
                .expect("the executor's end is open");
            theirs
                .read_exact(&mut byte)
                .expect("the executor answers each byte");
            assert_eq!(byte[0], (i as u8).wrapping_add(1));
        }
    });
    let answered = on_executor("poll", PREEMPT_NEVER, move || async move {
        let mut ours = ours;
        let fd = glommio::io::PollableFd::new(ours.try_clone().expect("a second handle"))
            .expect("a pollable descriptor");
        let mut byte = [0u8; 1];
        let mut answered = 0u32;
        while answered < ROUNDS {
            fd.readable().await.expect("the poll completes");
            match ours.read(&mut byte) {
                Ok(1) => {
                    ours.write_all(&[byte[0].wrapping_add(1)])
                        .expect("the peer's end is open");
                    answered += 1;
                }
                Ok(_) => panic!("the peer closed its end early"),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
        answered
    });
    peer.join().expect("the peer's thread ends");
    assert_eq!(answered, ROUNDS);
}

/// Preemption still comes after a sleep, at most one preemption period
/// later: a task sleeps (1 ms, or 30 ms, longer than the period, so the timer
/// fires while the executor sleeps), then spins until `need_preempt`, 60
/// times. A preemption timer lost across a sleep spins forever.
#[test]
fn preemption_comes_after_a_sleep() {
    let rounds = on_executor("preempt", Duration::from_millis(10), || async {
        let mut rounds = 0u32;
        for i in 0..60u32 {
            let nap = if i % 3 == 2 { 30 } else { 1 };
            glommio::timer::sleep(Duration::from_millis(nap)).await;
            while !glommio::executor().need_preempt() {
                std::hint::spin_loop();
            }
            glommio::executor().yield_now().await;
            rounds += 1;
        }
        rounds
    });
    assert_eq!(rounds, 60);
}

/// A flag a plain thread sets, waking the task waiting for it.
#[derive(Default)]
struct Flag {
    set: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Flag {
    fn set(&self) {
        self.set.store(true, Ordering::SeqCst);
        if let Some(w) = self.waker.lock().expect("not poisoned").take() {
            w.wake();
        }
    }
}

/// Ready once its `Flag` is set.
struct FlagSet(Arc<Flag>);

impl Future for FlagSet {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut slot = self.0.waker.lock().expect("not poisoned");
        if self.0.set.load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        // The waker is stored under the lock the setter takes it under, and
        // the flag read under it too: a set either is seen here or finds
        // this waker.
        *slot = Some(cx.waker().clone());
        Poll::Pending
    }
}
