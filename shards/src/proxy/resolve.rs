//! Origin name resolution on the core's own executor, and the SSRF check.
//!
//! The stub resolver's policy is the core's [`coral::resolve::Stub`]
//! (sans-IO): shared lookups per name, the bounds per core, client and
//! name, tries across servers, negative caching. This file is its I/O:
//! each try it asks for is sent from a socket of its own (UDP, or TCP
//! after a truncated answer) by a task on this core's executor, which
//! hands back what arrives from the server asked and wakes the stub at the
//! try's deadline; waiting requests get the lookup's outcome through a
//! slot of their own. Nothing blocks: a name that never answers holds one
//! lookup slot until `lookup_timeout_ms`, never another name's lookup.
//!
//! The servers are `[proxy] resolvers`, else the `nameserver` lines of
//! /etc/resolv.conf. `--resolve NAME=IP` answers are static. Every address
//! is checked with [`coral::proxy::origin_addr::check`] and the caller
//! connects to exactly the address returned here: there is no second
//! resolution between the check and the connect (DNS rebinding).

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use coral::limits::RESOLVE;
use coral::proxy::fetch::Fail;
use coral::proxy::origin_addr::{self, Refused};
use coral::resolve::{Failure, Output, QueryHandle, Resolve, Stub, StubConfig, Ticket};
use futures_lite::{AsyncReadExt, AsyncWriteExt};

/// Where the host's resolvers are listed.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Why an origin cannot be reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// The name does not exist (NXDOMAIN) or has no address.
    NotFound,
    /// No resolver answered within `lookup_timeout_ms`.
    Timeout,
    /// The resolvers answered with an error (SERVFAIL, REFUSED), or none
    /// is configured or reachable.
    ServerFailure,
    /// Too many lookups in flight (on this core, for this client or for
    /// this name): not asked.
    Busy,
    /// The only addresses are ones origins may not have.
    Refused(IpAddr, Refused),
}

impl ResolveError {
    /// What a request whose origin cannot be reached is answered.
    pub fn fail(&self) -> Fail {
        match self {
            ResolveError::Refused(_, kind) => Fail::refused(*kind),
            ResolveError::Timeout => Fail::NAME_TIMEOUT,
            ResolveError::NotFound => Fail::NO_NAME,
            ResolveError::ServerFailure => Fail::BAD_GATEWAY,
            ResolveError::Busy => Fail::UNAVAILABLE,
        }
    }
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::NotFound => f.write_str("the origin's name does not resolve"),
            ResolveError::Timeout => f.write_str("resolving the origin's name timed out"),
            ResolveError::ServerFailure => {
                f.write_str("the resolvers failed to resolve the origin's name")
            }
            ResolveError::Busy => {
                f.write_str("too many origin names are being resolved: try again later")
            }
            ResolveError::Refused(ip, why) => {
                write!(f, "the origin's address {ip} is {why}: not fetched")
            }
        }
    }
}

impl From<Failure> for ResolveError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::NoSuchName | Failure::NoAddress | Failure::BadName => ResolveError::NotFound,
            Failure::Timeout => ResolveError::Timeout,
            Failure::ServerFailure => ResolveError::ServerFailure,
            Failure::Busy => ResolveError::Busy,
        }
    }
}

/// The `nameserver` addresses of a resolv.conf text (port 53), at most
/// `RESOLVE.servers_max`; a zone index (`fe80::1%eth0`) is dropped with
/// the line.
pub fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next()? == "nameserver").then_some(())?;
            words.next()?.parse::<IpAddr>().ok()
        })
        .map(|ip| SocketAddr::new(ip, 53))
        .take(RESOLVE.servers_max)
        .collect()
}

/// The servers asked: `configured`, else the host's /etc/resolv.conf.
/// Said once in the log (every core builds its own resolver).
pub fn servers(configured: &[SocketAddr]) -> Vec<SocketAddr> {
    static SAID: std::sync::Once = std::sync::Once::new();
    let (servers, from) = if configured.is_empty() {
        let found = std::fs::read_to_string(RESOLV_CONF)
            .map(|t| parse_resolv_conf(&t))
            .unwrap_or_default();
        (found, RESOLV_CONF)
    } else {
        (configured.to_vec(), "[proxy] resolvers")
    };
    SAID.call_once(|| {
        if servers.is_empty() {
            tracing::warn!(
                "proxy: no resolvers in {from}: origin names other than --resolve ones will not resolve (502)"
            );
        } else {
            tracing::info!(?servers, "proxy: origin names are asked of {from}");
        }
    });
    servers
}

/// A waiting request's slot: the outcome once the lookup ends.
#[derive(Default)]
struct Slot {
    outcome: Option<coral::resolve::Outcome>,
    waker: Option<Waker>,
}

/// The stub and its waiting requests, shared with the tries' tasks.
struct Inner {
    stub: RefCell<Stub>,
    waiting: RefCell<HashMap<Ticket, Rc<RefCell<Slot>>>>,
    /// The stub's clock: microseconds since this instant.
    epoch: Instant,
}

impl Inner {
    fn now(&self) -> coral::Time {
        coral::Time(self.epoch.elapsed().as_micros() as u64)
    }

    fn instant(&self, t: coral::Time) -> Instant {
        self.epoch + Duration::from_micros(t.0)
    }

    /// Carries out what the stub asks: tries to send, outcomes to hand out.
    fn drain(self: &Rc<Self>) {
        loop {
            let Some(out) = self.stub.borrow_mut().poll_output() else {
                return;
            };
            match out {
                Output::Done { ticket, outcome } => {
                    if let Some(slot) = self.waiting.borrow_mut().remove(&ticket) {
                        let mut s = slot.borrow_mut();
                        s.outcome = Some(outcome);
                        if let Some(w) = s.waker.take() {
                            w.wake();
                        }
                    }
                }
                Output::Query {
                    handle,
                    server,
                    tcp,
                    bytes,
                    deadline,
                } => {
                    let deadline = self.instant(deadline);
                    glommio::spawn_local(run_try(
                        self.clone(),
                        handle,
                        server,
                        tcp,
                        bytes,
                        deadline,
                    ))
                    .detach();
                }
            }
        }
    }
}

/// One try: sends `query` to `server` (UDP, or TCP), hands what comes back
/// to the stub, and if the try is still live at `deadline` wakes the stub
/// then (it retries or ends the lookup; a spurious wake-up is harmless).
async fn run_try(
    inner: Rc<Inner>,
    handle: QueryHandle,
    server: SocketAddr,
    tcp: bool,
    query: Vec<u8>,
    deadline: Instant,
) {
    let got = if tcp {
        ask_tcp(server, &query, deadline).await
    } else {
        ask_udp(&inner, handle, server, &query, deadline).await
    };
    match got {
        Err(e) => {
            tracing::debug!(%server, error = %e, "resolver: query failed");
            let now = inner.now();
            inner.stub.borrow_mut().handle_send_failed(now, handle);
        }
        Ok(Some(answer)) => {
            let now = inner.now();
            let mut stub = inner.stub.borrow_mut();
            stub.handle_answer(now, handle, server, &answer);
        }
        Ok(None) => {}
    }
    inner.drain();
    if !inner.stub.borrow().is_live(handle) {
        return;
    }
    let wait = deadline.saturating_duration_since(Instant::now());
    if !wait.is_zero() {
        glommio::timer::sleep(wait).await;
    }
    let now = inner.now();
    inner.stub.borrow_mut().handle_timeout(now);
    inner.drain();
}

/// A local socket of `server`'s family, on an ephemeral port the kernel
/// picks at random (no SO_REUSEPORT: no other socket shares it).
fn udp_socket(server: SocketAddr) -> std::io::Result<glommio::net::UdpSocket> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let local = match server {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let s = std::net::UdpSocket::bind(local)?;
    s.set_nonblocking(true)?;
    // SAFETY: the descriptor was just taken from a bound UDP socket that
    // gives up its ownership; the glommio socket now owns and closes it.
    Ok(unsafe { glommio::net::UdpSocket::from_raw_fd(s.into_raw_fd()) })
}

/// Sends one UDP try and hands each datagram that comes back to the stub
/// until the try ends (answered, or its deadline). `Ok(None)`: nothing
/// left to hand over.
async fn ask_udp(
    inner: &Rc<Inner>,
    handle: QueryHandle,
    server: SocketAddr,
    query: &[u8],
    deadline: Instant,
) -> std::io::Result<Option<Vec<u8>>> {
    let sock = udp_socket(server)?;
    sock.send_to(query, server).await?;
    let mut buf = vec![0u8; RESOLVE.udp_answer_bytes_max];
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return Ok(None);
        }
        let Ok(got) = glommio::future::timeout(wait, sock.recv_from(&mut buf)).await else {
            return Ok(None);
        };
        let (n, from) = got?;
        // The stub checks the source, the id and the question: a stray or
        // spoofed datagram is ignored and the try keeps listening.
        let now = inner.now();
        let mut stub = inner.stub.borrow_mut();
        stub.handle_answer(now, handle, from, &buf[..n]);
        if !stub.is_live(handle) {
            return Ok(None);
        }
    }
}

/// Sends one TCP try (RFC 7766: two-byte length, then the message) and
/// returns its answer, all within `deadline`.
async fn ask_tcp(
    server: SocketAddr,
    query: &[u8],
    deadline: Instant,
) -> std::io::Result<Option<Vec<u8>>> {
    let wait = deadline.saturating_duration_since(Instant::now());
    if wait.is_zero() {
        return Ok(None);
    }
    let exchange = async {
        let mut stream = glommio::net::TcpStream::connect(server).await?;
        let mut msg = Vec::with_capacity(query.len() + 2);
        msg.extend_from_slice(&(query.len() as u16).to_be_bytes());
        msg.extend_from_slice(query);
        stream.write_all(&msg).await?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).await?;
        let len = usize::from(u16::from_be_bytes(len)).min(RESOLVE.tcp_answer_bytes_max);
        let mut answer = vec![0u8; len];
        stream.read_exact(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    match glommio::future::timeout(wait, exchange).await {
        Ok(Ok(answer)) => Ok(Some(answer)),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(None),
    }
}

/// One core's resolver.
pub struct Resolver {
    static_answers: HashMap<String, IpAddr>,
    allow_private: bool,
    inner: Rc<Inner>,
}

impl Resolver {
    /// A resolver with `static_answers` (names lower case, no trailing
    /// dot), good answers kept at most `ttl`, asking no server until
    /// [`Resolver::with_servers`] says which.
    pub fn new(static_answers: &[(String, IpAddr)], ttl: Duration, allow_private: bool) -> Self {
        let cfg = StubConfig {
            servers: Vec::new(),
            ttl_max: coral::Duration::from_micros(ttl.as_micros() as u64),
            ..StubConfig::default()
        };
        Resolver {
            static_answers: static_answers.iter().cloned().collect(),
            allow_private,
            inner: Rc::new(Inner {
                stub: RefCell::new(stub(cfg)),
                waiting: RefCell::new(HashMap::new()),
                epoch: Instant::now(),
            }),
        }
    }

    /// The same, asking `configured` (`[proxy] resolvers`), or the host's
    /// resolvers if it is empty.
    pub fn with_servers(self, configured: &[SocketAddr]) -> Self {
        let cfg = StubConfig {
            servers: servers(configured),
            ..self.inner.stub.borrow().config().clone()
        };
        *self.inner.stub.borrow_mut() = stub(cfg);
        self
    }

    /// What the stub has done, by event (`crate::metrics::RESOLVER_EVENTS`
    /// names them for `coral_resolver_events_total`).
    pub fn counters_json(&self) -> serde_json::Value {
        let c = self.inner.stub.borrow().counters();
        serde_json::json!({
            "lookups": c.lookups,
            "cache_hits": c.cache_hits,
            "joined": c.joined,
            "queries": c.queries,
            "timeouts": c.timeouts,
            "busy": c.busy,
            "ignored": c.ignored,
        })
    }

    /// The checked address to connect to for `host:port`. `host` is lower
    /// case without a trailing dot (as `names::origin_of_host` returns it).
    /// For the node's own lookups, which no client waits for.
    #[allow(dead_code)] // every caller today has its client
    pub async fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, ResolveError> {
        self.resolve_for(None, host, port).await
    }

    /// As [`Resolver::resolve`], for a request from `client` (its waiting
    /// counts against `waiters_per_client_max`).
    pub async fn resolve_for(
        &self,
        client: Option<IpAddr>,
        host: &str,
        port: u16,
    ) -> Result<SocketAddr, ResolveError> {
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return self.checked(&[SocketAddr::new(ip, port)]);
        }
        if let Some(ip) = self.static_answers.get(host) {
            return self.checked(&[SocketAddr::new(*ip, port)]);
        }
        let inner = &self.inner;
        let now = inner.now();
        let started = inner.stub.borrow_mut().resolve(now, host, client);
        let outcome = match started {
            Resolve::Done(o) => o,
            Resolve::Wait(ticket) => {
                let slot = Rc::new(RefCell::new(Slot::default()));
                inner.waiting.borrow_mut().insert(ticket, slot.clone());
                inner.drain();
                Wait {
                    inner: inner.clone(),
                    ticket,
                    slot,
                }
                .await
            }
        };
        match outcome {
            Ok(ips) => {
                let addrs: Vec<SocketAddr> =
                    ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
                self.checked(&addrs)
            }
            Err(f) => Err(f.into()),
        }
    }

    /// The first address origins may have, or why none may be used.
    fn checked(&self, addrs: &[SocketAddr]) -> Result<SocketAddr, ResolveError> {
        let mut refused = None;
        for a in addrs {
            match origin_addr::check(a.ip(), self.allow_private) {
                Ok(()) => return Ok(*a),
                Err(why) => {
                    refused.get_or_insert(ResolveError::Refused(a.ip(), why));
                }
            }
        }
        Err(refused.unwrap_or(ResolveError::NotFound))
    }
}

/// A stub seeded from the OS, its tables keyed by a secret.
fn stub(cfg: StubConfig) -> Stub {
    let seed = crate::runtime::seed_from_os();
    Stub::new(
        cfg,
        coral::rng::Rng::new(seed),
        coral::dsht::id::keyed_hasher(&seed.to_le_bytes(), "origin names"),
    )
}

/// A request waiting for its lookup; dropped early (the client left), it
/// gives its place back.
struct Wait {
    inner: Rc<Inner>,
    ticket: Ticket,
    slot: Rc<RefCell<Slot>>,
}

impl Future for Wait {
    type Output = coral::resolve::Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.slot.borrow_mut();
        match s.outcome.take() {
            Some(o) => Poll::Ready(o),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        if self
            .inner
            .waiting
            .borrow_mut()
            .remove(&self.ticket)
            .is_some()
        {
            self.inner.stub.borrow_mut().cancel(self.ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_nameservers_in_order() {
        let text = "# comment\nsearch example\nnameserver 192.0.2.1\nnameserver  2001:db8::53\n\
                    nameserver fe80::1%eth0\nnameserver 192.0.2.2\nnameserver 192.0.2.3\n";
        assert_eq!(
            parse_resolv_conf(text),
            vec![
                "192.0.2.1:53".parse().unwrap(),
                "[2001:db8::53]:53".parse().unwrap(),
                "192.0.2.2:53".parse().unwrap(),
            ]
        );
        assert!(parse_resolv_conf("").is_empty());
    }

    #[test]
    fn counters_are_the_metrics_events() {
        let r = Resolver::new(&[], Duration::from_secs(60), false);
        let json = r.counters_json();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut want = crate::metrics::RESOLVER_EVENTS.to_vec();
        want.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, want);
    }

    #[test]
    fn failures_keep_their_kinds() {
        assert_eq!(
            ResolveError::from(Failure::NoSuchName),
            ResolveError::NotFound
        );
        assert_eq!(
            ResolveError::from(Failure::Timeout).fail(),
            Fail::NAME_TIMEOUT
        );
        assert_eq!(ResolveError::NotFound.fail(), Fail::NO_NAME);
        assert_eq!(
            ResolveError::from(Failure::ServerFailure).fail(),
            Fail::BAD_GATEWAY
        );
        assert_eq!(ResolveError::from(Failure::Busy).fail(), Fail::UNAVAILABLE);
    }
}
