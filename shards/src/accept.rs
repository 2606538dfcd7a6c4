//! The one TCP accept loop of the node: every listener (CoralProxy's HTTP,
//! dnssrv's DNS over TCP, the admin endpoint) accepts through [`run`], so
//! all survive alike what the open Internet, or a local attacker, sends
//! them (SECURITY.md):
//!
//! - **Accept errors back off.** `accept` fails while the process is out of
//!   file descriptors (EMFILE, ENFILE) or memory (ENOBUFS, ENOMEM), and the
//!   pending connection stays in the backlog, so retrying at once fails at
//!   once, forever: the core spins and its DSHT socket, timers and signal
//!   handling starve. Here the loop sleeps after each error, from
//!   [`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`], and the first success
//!   resets the delay.
//! - **A cap on connections.** At most [`Limits::connections_max`] are
//!   served at once. At the cap the listener is asked to evict one
//!   ([`Tally::evict`]: its oldest idle connection, else its slowest, which
//!   it shuts down) and the new one is served in its place, so a crowd of
//!   idle or slow connections cannot lock new clients out (nginx's
//!   reusable connections). Only when none can go is the new connection
//!   closed at once (counted [`Tally::refused`]), so the client learns it
//!   now and the backlog does not fill with connections nobody will serve.
//!   An evicted connection still counts until its task ends (at once: its
//!   socket is shut down, but on a busy core "at once" can be many
//!   accepts later), so at most `connections_max` are served and at most
//!   [`ACCEPT.closing_max`](crate::limits::ACCEPT) more are closing (never
//!   more than the cap): past that the loop accepts nothing until a task
//!   ends, and new clients wait in the listen backlog, not as descriptors.
//! - **A deadline per connection**, where the listener sets one. Each
//!   connection's whole handling, not each read, must finish within
//!   [`Limits::deadline`]; then it is dropped and its descriptor closed (a
//!   slowloris sending one byte every few seconds holds a slot for no
//!   longer than that). Listeners without one bound their connections
//!   themselves (idle timeouts).
//! - **It stops with the node.** Once `stopping` says so, no connection is
//!   accepted after the one being waited for.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use futures_lite::FutureExt;
use glommio::net::{TcpListener, TcpStream};

use crate::limits::ACCEPT;

/// First sleep after an accept error.
pub const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest sleep after accept errors in a row.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub connections_max: usize,
    /// Longest one connection is served, start to end (`None`: the
    /// listener's own timeouts bound it).
    pub deadline: Option<Duration>,
}

/// What a listener reports as it goes, for its counters.
pub trait Tally {
    /// A connection was accepted.
    fn accepted(&self) {}
    /// A connection was closed at once: `connections_max` were open.
    fn refused(&self) {}
    /// An accept call failed.
    fn accept_failed(&self) {}
    /// A connection was dropped at its deadline.
    fn timed_out(&self) {}
    /// `connections_max` are open: close one (shut its socket down) so the
    /// new one is served instead; false if none can go (it is refused).
    fn evict(&self) -> bool {
        false
    }
}

/// What a listener has done (for tests and logs).
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections accepted.
    pub accepted: Cell<u64>,
    /// Connections closed at once over the cap.
    pub refused: Cell<u64>,
    /// Accept calls that failed.
    pub accept_errors: Cell<u64>,
    /// Connections dropped at their deadline.
    pub deadlines: Cell<u64>,
    /// Connections evicted at the cap for new ones.
    pub evicted: Cell<u64>,
}

fn add(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

impl Tally for Counters {
    fn accepted(&self) {
        add(&self.accepted);
    }
    fn refused(&self) {
        add(&self.refused);
    }
    fn accept_failed(&self) {
        add(&self.accept_errors);
    }
    fn timed_out(&self) {
        add(&self.deadlines);
    }
}

/// Closes the connection on socket `fd` from outside its task: shuts it
/// down, so that its pending read or write ends and its task closes it.
/// `abortive`: its unsent bytes are discarded and the close resets the
/// connection (`SO_LINGER` 0), so a client that stopped reading pins no
/// kernel memory either.
pub fn shut_down(fd: std::os::fd::RawFd, abortive: bool) {
    if abortive {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: `fd` is an open socket (the caller's table releases a
        // connection before it closes); `linger` is live for the call.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
    // SAFETY: as above; shutdown passes no memory.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

/// Connections a listener with cap `connections_max` holds open at most:
/// those served and those evicted but still closing.
pub fn open_max(connections_max: usize) -> usize {
    connections_max + ACCEPT.closing_max.min(connections_max)
}

/// The next backoff after `current` (doubling, within the limits).
pub fn next_backoff(current: Duration) -> Duration {
    (current * 2).clamp(BACKOFF_MIN, BACKOFF_MAX)
}

/// Accepts connections on `listener` until `stopping` says so, each
/// handled by `handle` in a task of its own within `limits`, and reported
/// to `tally`. `name` names the listener in logs.
pub async fn run<T, S, F, Fut>(
    name: &'static str,
    listener: TcpListener,
    limits: Limits,
    tally: Rc<T>,
    stopping: S,
    handle: F,
) where
    T: Tally + 'static,
    S: Fn() -> bool,
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + 'static,
{
    let open = Rc::new(Cell::new(0usize));
    // The accept loop's waker while it waits for a connection's task to
    // end (over the cap with `closing_max` closing).
    let waiting: Rc<Cell<Option<Waker>>> = Rc::default();
    let open_max = open_max(limits.connections_max);
    let mut backoff = Duration::ZERO;
    while !stopping() {
        if open.get() >= open_max {
            let (open, waiting) = (&open, &waiting);
            std::future::poll_fn(|cx| {
                if open.get() < open_max {
                    Poll::Ready(())
                } else {
                    waiting.set(Some(cx.waker().clone()));
                    Poll::Pending
                }
            })
            .await;
            continue;
        }
        let stream = match listener.accept().await {
            Ok(s) => {
                backoff = Duration::ZERO;
                s
            }
            Err(e) => {
                tally.accept_failed();
                backoff = next_backoff(backoff);
                if backoff == BACKOFF_MAX || backoff == BACKOFF_MIN {
                    tracing::warn!(listener = name, error = %e, ?backoff, "accept failed; backing off");
                }
                glommio::timer::sleep(backoff).await;
                continue;
            }
        };
        // Evicted connections close at once but count until they have:
        // at most `open_max` in all (above).
        if open.get() >= limits.connections_max && !tally.evict() {
            tally.refused();
            drop(stream);
            continue;
        }
        tally.accepted();
        open.set(open.get() + 1);
        // Boxed once per connection: moved into the task below, an unboxed
        // future would be held twice (once as the block's capture, once
        // where it is awaited), and a connection's task is most of what an
        // idle keep-alive connection costs (issue 27, "Many connections").
        let mut served = Box::pin(handle(stream));
        let (open, tally, waiting) = (open.clone(), tally.clone(), waiting.clone());
        let deadline = limits.deadline;
        let task = async move {
            match deadline {
                Some(deadline) => {
                    let timed_out = async {
                        glommio::timer::sleep(deadline).await;
                        true
                    };
                    if async {
                        served.as_mut().await;
                        false
                    }
                    .or(timed_out)
                    .await
                    {
                        tally.timed_out();
                    }
                }
                None => served.await,
            }
            open.set(open.get() - 1);
            if let Some(w) = waiting.take() {
                w.wake();
            }
        };
        glommio::spawn_local(task).detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_limits() {
        let mut b = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..10 {
            b = next_backoff(b);
            seen.push(b.as_millis());
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
    }

    #[test]
    fn a_listener_holds_its_cap_and_at_most_closing_max_more() {
        assert_eq!(open_max(1), 2);
        assert_eq!(open_max(140), 140 + ACCEPT.closing_max);
        assert_eq!(open_max(10_000), 10_000 + ACCEPT.closing_max);
    }
}
