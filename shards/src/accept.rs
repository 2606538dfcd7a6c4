//! A TCP accept loop for the node's listeners (the admin endpoint today;
//! the proxy and DNS-over-TCP listeners can adopt it) that survives what
//! the open Internet, or a local attacker, sends it (SECURITY.md):
//!
//! - **Accept errors back off.** `accept` fails while the process is out of
//!   file descriptors (EMFILE, ENFILE) or memory (ENOBUFS, ENOMEM), and the
//!   pending connection stays in the backlog, so retrying at once fails at
//!   once, forever: the core spins and its DSHT socket, timers and signal
//!   handling starve. Here the loop sleeps after each error, from
//!   [`Limits::backoff_min`] doubling to [`Limits::backoff_max`], and the
//!   first success resets the delay.
//! - **A cap on connections.** At most [`Limits::connections_max`] are open
//!   at once; the loop stops accepting (the kernel's backlog holds, then
//!   refuses, the rest) until one closes.
//! - **A deadline per connection.** Each connection's whole handling, not
//!   each read, must finish within [`Limits::deadline`]; then it is dropped
//!   and its descriptor closed (a slowloris sending one byte every few
//!   seconds holds a slot for no longer than that).

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::FutureExt;
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Semaphore;

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub connections_max: usize,
    /// Longest one connection is served, start to end.
    pub deadline: Duration,
    /// First sleep after an accept error.
    pub backoff_min: Duration,
    /// Longest sleep after accept errors in a row.
    pub backoff_max: Duration,
}

/// What a listener has done (for tests and logs).
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections accepted.
    pub accepted: std::cell::Cell<u64>,
    /// Accept calls that failed.
    pub accept_errors: std::cell::Cell<u64>,
    /// Connections dropped at their deadline.
    pub deadlines: std::cell::Cell<u64>,
}

/// The next backoff after `current` (doubling, within the limits).
pub fn next_backoff(current: Duration, limits: &Limits) -> Duration {
    (current * 2).clamp(limits.backoff_min, limits.backoff_max)
}

/// Accepts connections on `listener` for ever in the current executor,
/// each handled by `handle` in a task of its own within `limits`. `name`
/// names the listener in logs.
pub fn serve<F, Fut>(
    name: &'static str,
    listener: TcpListener,
    limits: Limits,
    handle: F,
) -> Rc<Counters>
where
    F: Fn(TcpStream) -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let counters = Rc::new(Counters::default());
    let c = counters.clone();
    glommio::spawn_local(async move {
        let slots = Rc::new(Semaphore::new(limits.connections_max as u64));
        let mut backoff = Duration::ZERO;
        loop {
            // Wait for a free slot before taking a connection off the backlog.
            let Ok(permit) = slots.acquire_static_permit(1).await else {
                return;
            };
            let stream = match listener.accept().await {
                Ok(s) => {
                    backoff = Duration::ZERO;
                    s
                }
                Err(e) => {
                    c.accept_errors.set(c.accept_errors.get() + 1);
                    backoff = next_backoff(backoff, &limits);
                    if backoff == limits.backoff_max || backoff == limits.backoff_min {
                        tracing::warn!(listener = name, error = %e, ?backoff, "accept failed; backing off");
                    }
                    drop(permit);
                    glommio::timer::sleep(backoff).await;
                    continue;
                }
            };
            c.accepted.set(c.accepted.get() + 1);
            let served = handle(stream);
            let c = c.clone();
            let deadline = limits.deadline;
            glommio::spawn_local(async move {
                let timed_out = async {
                    glommio::timer::sleep(deadline).await;
                    true
                };
                if async {
                    served.await;
                    false
                }
                .or(timed_out)
                .await
                {
                    c.deadlines.set(c.deadlines.get() + 1);
                }
                drop(permit);
            })
            .detach();
        }
    })
    .detach();
    counters
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_limits() {
        let l = Limits {
            connections_max: 1,
            deadline: Duration::from_secs(1),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(1000),
        };
        let mut b = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..10 {
            b = next_backoff(b, &l);
            seen.push(b.as_millis());
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
    }
}
