//! Origin name resolution, off the executors, and the SSRF check.
//!
//! `getaddrinfo` blocks, so it runs on the executor's blocking thread
//! (`spawn_blocking`) and its answer comes back to the core as a future.
//! Answers — good or bad — are kept per core for `resolve_ttl_secs`;
//! `--resolve NAME=IP` answers are static. Every address is checked with
//! [`coral::proxy::origin_addr::check`] and the caller connects to exactly
//! the address returned here: there is no second resolution between the
//! check and the connect (DNS rebinding).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use coral::proxy::fetch::Fail;
use coral::proxy::origin_addr::{self, Refused};

/// Answers kept per core at most; the oldest half goes when full.
const ANSWERS_MAX: usize = crate::limits::PROXY.resolve_answers_max;
/// Longest a name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a failed resolution is remembered.
const NEGATIVE_TTL: Duration = Duration::from_secs(5);

/// Why an origin cannot be reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// The name has no address (or resolving it failed).
    NotFound,
    /// Resolving took longer than the limit.
    Timeout,
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
        }
    }
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::NotFound => f.write_str("the origin's name does not resolve"),
            ResolveError::Timeout => f.write_str("resolving the origin's name timed out"),
            ResolveError::Refused(ip, why) => {
                write!(f, "the origin's address {ip} is {why}: not fetched")
            }
        }
    }
}

/// A remembered answer and when it was found.
type Answer = (Instant, Result<SocketAddr, ResolveError>);

/// One core's resolver.
pub struct Resolver {
    static_answers: HashMap<String, IpAddr>,
    answers: RefCell<HashMap<(String, u16), Answer>>,
    ttl: Duration,
    allow_private: bool,
}

impl Resolver {
    /// A resolver with `static_answers` (names lower case, no trailing dot).
    pub fn new(static_answers: &[(String, IpAddr)], ttl: Duration, allow_private: bool) -> Self {
        Resolver {
            static_answers: static_answers.iter().cloned().collect(),
            answers: RefCell::new(HashMap::new()),
            ttl,
            allow_private,
        }
    }

    /// The checked address to connect to for `host:port`. `host` is lower
    /// case without a trailing dot (as `names::origin_of_host` returns it).
    pub async fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, ResolveError> {
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
        let key = (host.to_string(), port);
        if let Some((at, answer)) = self.answers.borrow().get(&key) {
            if at.elapsed() < self.ttl {
                return answer.clone();
            }
        }
        let name = host.to_string();
        let lookup = glommio::executor().spawn_blocking(move || {
            (name.as_str(), port)
                .to_socket_addrs()
                .map(|a| a.collect::<Vec<_>>())
        });
        let answer = match glommio::future::timeout(RESOLVE_TIMEOUT, lookup).await {
            Err(_) => Err(ResolveError::Timeout),
            Ok(Err(_)) => Err(ResolveError::NotFound),
            Ok(Ok(addrs)) => self.checked(&addrs),
        };
        let mut answers = self.answers.borrow_mut();
        if answers.len() >= ANSWERS_MAX {
            let mut ages: Vec<Instant> = answers.values().map(|(at, _)| *at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            answers.retain(|_, (at, _)| *at > cut);
        }
        let at = match &answer {
            // A failure is remembered briefly: the name may appear soon.
            Err(ResolveError::NotFound | ResolveError::Timeout) => {
                Instant::now() - self.ttl.saturating_sub(NEGATIVE_TTL)
            }
            _ => Instant::now(),
        };
        answers.insert(key, (at, answer.clone()));
        answer
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
