//! The origin stub resolver, sans-IO: CoralProxy resolves each origin's
//! name before fetching from it (§3.2), and this decides everything about
//! that — which queries to send where, what to believe of an answer, what
//! to remember and for how long, and who waits for what.
//!
//! The runtime (`shards/src/proxy/resolve.rs`) drives it:
//! [`Stub::resolve`] for a request, [`Stub::handle_answer`] for a datagram
//! (or a TCP answer) that came back on a query's socket,
//! [`Stub::handle_send_failed`] when a send fails, and
//! [`Stub::handle_timeout`] at [`Stub::poll_timeout`]; after each it drains
//! [`Stub::poll_output`] until it returns `None`: the queries to send
//! ([`Output::Query`]) and the lookups' outcomes for their waiters
//! ([`Output::Done`]).
//!
//! The policy:
//! - one lookup per name at a time: requests for a name already being
//!   looked up wait for that lookup (shared lookups), up to
//!   `waiters_per_name_max`;
//! - at most `lookups_inflight_max` lookups per core and
//!   `waiters_per_client_max` waiting requests per client address; beyond
//!   them a request is answered [`Failure::Busy`] at once;
//! - each lookup asks for A and AAAA at once; once A has addresses the
//!   lookup ends (IPv4 first; the runtime connects to the first address
//!   the SSRF check allows), otherwise it waits for AAAA too;
//! - a query is tried on the servers in turn, `attempt_timeout` each, at
//!   most `attempts_max` tries, and a whole lookup ends at
//!   `lookup_timeout`: its slot is freed and its waiters told
//!   [`Failure::Timeout`]. SERVFAIL or REFUSED moves to the next server at
//!   once; a truncated answer (TC) is asked again over TCP (RFC 7766);
//! - each try has a random transaction id (the `id` of [`Output::Query`]) and a
//!   socket of its own (the kernel's random ephemeral port); an answer
//!   counts only from the server asked, with our id and our question
//!   (`wire::parse_answer`); anything else is ignored, not fatal;
//! - answers are remembered per name for their TTL capped by `ttl_max`;
//!   NXDOMAIN and NODATA for the SOA's negative TTL capped by
//!   `negative_ttl_max` (RFC 2308); timeouts and server failures for
//!   `failure_ttl`; at most `cache_entries_max` names.
//!
//! Architecture invariant: this module never reads a clock or touches a
//! socket; `now` and the seeded [`Rng`] come in, datagrams and outcomes
//! go out.

pub mod wire;

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use crate::dsht::id::KeyedBuildHasher;
use crate::limits::RESOLVE;
use crate::rng::Rng;
use crate::time::{Duration, Time};
use wire::{Qtype, Reply};

/// The stub resolver's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubConfig {
    /// The recursive resolvers asked, in order (at most
    /// `RESOLVE.servers_max` are used).
    pub servers: Vec<SocketAddr>,
    /// Longest wait for one try's answer.
    pub attempt_timeout: Duration,
    /// Longest a whole lookup lasts.
    pub lookup_timeout: Duration,
    /// Tries per query across the servers.
    pub attempts_max: u32,
    /// Lookups in flight at once.
    pub lookups_inflight_max: usize,
    /// Requests one client address may have waiting at once.
    pub waiters_per_client_max: usize,
    /// Requests waiting for one name.
    pub waiters_per_name_max: usize,
    /// Names remembered.
    pub cache_entries_max: usize,
    /// Longest a good answer is remembered, whatever its TTL.
    pub ttl_max: Duration,
    /// Longest a negative answer is remembered (RFC 2308).
    pub negative_ttl_max: Duration,
    /// How long a timeout or server failure is remembered.
    pub failure_ttl: Duration,
}

impl Default for StubConfig {
    fn default() -> Self {
        StubConfig {
            servers: Vec::new(),
            attempt_timeout: Duration::from_millis(RESOLVE.attempt_timeout_ms),
            lookup_timeout: Duration::from_millis(RESOLVE.lookup_timeout_ms),
            attempts_max: RESOLVE.attempts_max,
            lookups_inflight_max: RESOLVE.lookups_inflight_max,
            waiters_per_client_max: RESOLVE.waiters_per_client_max,
            waiters_per_name_max: RESOLVE.waiters_per_name_max,
            cache_entries_max: RESOLVE.cache_entries_max,
            ttl_max: Duration::from_secs(60),
            negative_ttl_max: Duration::from_secs(u64::from(RESOLVE.negative_ttl_max_secs)),
            failure_ttl: Duration::from_secs(u64::from(RESOLVE.failure_ttl_secs)),
        }
    }
}

/// Why a name gave no address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// NXDOMAIN: the name does not exist.
    NoSuchName,
    /// The name exists but has no A or AAAA record (NODATA).
    NoAddress,
    /// No server answered within the lookup's time.
    Timeout,
    /// The servers answered SERVFAIL, REFUSED or another error, or none
    /// could be sent to.
    ServerFailure,
    /// Too many lookups in flight (on this core, for this client or for
    /// this name): refused without asking.
    Busy,
    /// Not a name that can be asked for.
    BadName,
}

/// A name's addresses (IPv4 first), or why there are none.
pub type Outcome = Result<Vec<IpAddr>, Failure>;

/// A request waiting for a lookup, named by [`Stub::resolve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// One try of one query: its own socket in the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueryHandle(pub u64);

/// What [`Stub::resolve`] answers at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// Known (remembered, or refused at once).
    Done(Outcome),
    /// Wait for [`Output::Done`] with this ticket.
    Wait(Ticket),
}

/// What the runtime must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send `bytes` to `server` from a fresh socket (UDP, or TCP with the
    /// two-byte length first); deliver what comes back on it with
    /// `handle`, and stop listening at `deadline`.
    Query {
        /// This try.
        handle: QueryHandle,
        /// The server asked.
        server: SocketAddr,
        /// Over TCP (after a truncated answer).
        tcp: bool,
        /// The query.
        bytes: Vec<u8>,
        /// When this try is given up.
        deadline: Time,
    },
    /// The lookup `ticket` waited for has ended.
    Done {
        /// The waiting request.
        ticket: Ticket,
        /// Its outcome.
        outcome: Outcome,
    },
}

/// Counters of what the stub did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Lookups started (each an A and an AAAA query).
    pub lookups: u64,
    /// Requests answered from remembered answers.
    pub cache_hits: u64,
    /// Requests that joined a lookup already in flight.
    pub joined: u64,
    /// Queries sent (tries included).
    pub queries: u64,
    /// Lookups that ended timed out.
    pub timeouts: u64,
    /// Requests refused as `Busy`.
    pub busy: u64,
    /// Datagrams ignored: not an answer to our question, or not from the
    /// server asked.
    pub ignored: u64,
}

/// One query (A or AAAA) of a lookup.
#[derive(Debug)]
struct Query {
    qtype: Qtype,
    /// Tries sent so far.
    attempts: u32,
    /// The live try: its handle, transaction id, server and deadline.
    live: Option<Try>,
    /// The query's reply once it has one (or has given up).
    result: Option<QueryResult>,
}

#[derive(Clone, Copy, Debug)]
struct Try {
    handle: QueryHandle,
    id: u16,
    server: usize,
    tcp: bool,
    deadline: Time,
}

#[derive(Clone, Debug)]
enum QueryResult {
    Reply(Reply),
    Timeout,
    Failed,
}

#[derive(Debug)]
struct Lookup {
    deadline: Time,
    waiters: Vec<(Ticket, Option<IpAddr>)>,
    /// A and AAAA.
    queries: [Query; 2],
}

#[derive(Clone, Debug)]
struct Remembered {
    expires: Time,
    outcome: Outcome,
}

/// One core's stub resolver.
pub struct Stub {
    cfg: StubConfig,
    rng: Rng,
    now: Time,
    lookups: HashMap<String, Lookup, KeyedBuildHasher>,
    /// Each live try's lookup name and query index.
    tries: HashMap<QueryHandle, (String, usize), KeyedBuildHasher>,
    /// Each waiting request's name.
    tickets: HashMap<Ticket, String, KeyedBuildHasher>,
    /// Requests waiting per client address.
    clients: HashMap<IpAddr, usize, KeyedBuildHasher>,
    cache: HashMap<String, Remembered, KeyedBuildHasher>,
    out: VecDeque<Output>,
    next_ticket: u64,
    next_handle: u64,
    counters: Counters,
    buf: Vec<u8>,
}

impl Stub {
    /// A stub asking `cfg.servers`, its ids and choices from `rng`, its
    /// tables keyed by `hasher` (names come from strangers).
    pub fn new(mut cfg: StubConfig, rng: Rng, hasher: KeyedBuildHasher) -> Stub {
        cfg.servers.truncate(RESOLVE.servers_max);
        Stub {
            cfg,
            rng,
            now: Time::ZERO,
            lookups: HashMap::with_hasher(hasher.clone()),
            tries: HashMap::with_hasher(hasher.clone()),
            tickets: HashMap::with_hasher(hasher.clone()),
            clients: HashMap::with_hasher(hasher.clone()),
            cache: HashMap::with_hasher(hasher),
            out: VecDeque::new(),
            next_ticket: 0,
            next_handle: 0,
            counters: Counters::default(),
            buf: Vec::with_capacity(512),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &StubConfig {
        &self.cfg
    }

    /// What it has done so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Lookups in flight.
    pub fn lookups_inflight(&self) -> usize {
        self.lookups.len()
    }

    /// Whether try `handle` still waits for its answer (its socket is
    /// worth keeping open).
    pub fn is_live(&self, handle: QueryHandle) -> bool {
        self.tries.contains_key(&handle)
    }

    /// Names remembered.
    pub fn remembered(&self) -> usize {
        self.cache.len()
    }

    /// `name`'s addresses for a request from `client` (None: the node's
    /// own work). `name` is lower case without a trailing dot.
    pub fn resolve(&mut self, now: Time, name: &str, client: Option<IpAddr>) -> Resolve {
        self.now = self.now.max(now);
        if wire::check_name(name).is_err() {
            return Resolve::Done(Err(Failure::BadName));
        }
        if let Some(r) = self.cache.get(name) {
            if r.expires > now {
                self.counters.cache_hits += 1;
                return Resolve::Done(r.outcome.clone());
            }
        }
        if let Some(c) = client {
            if self.clients.get(&c).copied().unwrap_or(0) >= self.cfg.waiters_per_client_max {
                self.counters.busy += 1;
                return Resolve::Done(Err(Failure::Busy));
            }
        }
        if self.cfg.servers.is_empty() {
            return Resolve::Done(Err(Failure::ServerFailure));
        }
        let ticket = Ticket(self.next_ticket);
        if let Some(l) = self.lookups.get_mut(name) {
            if l.waiters.len() >= self.cfg.waiters_per_name_max {
                self.counters.busy += 1;
                return Resolve::Done(Err(Failure::Busy));
            }
            l.waiters.push((ticket, client));
            self.counters.joined += 1;
        } else {
            if self.lookups.len() >= self.cfg.lookups_inflight_max {
                self.counters.busy += 1;
                return Resolve::Done(Err(Failure::Busy));
            }
            let query = |qtype| Query {
                qtype,
                attempts: 0,
                live: None,
                result: None,
            };
            self.lookups.insert(
                name.to_string(),
                Lookup {
                    deadline: Time(now.0.saturating_add(self.cfg.lookup_timeout.0)),
                    waiters: vec![(ticket, client)],
                    queries: [query(Qtype::A), query(Qtype::Aaaa)],
                },
            );
            self.counters.lookups += 1;
            self.send_try(now, name, 0, 0);
            self.send_try(now, name, 1, 0);
        }
        self.next_ticket += 1;
        self.tickets.insert(ticket, name.to_string());
        if let Some(c) = client {
            *self.clients.entry(c).or_insert(0) += 1;
        }
        Resolve::Wait(ticket)
    }

    /// The request waiting with `ticket` gave up (its client left): its
    /// place is freed; the lookup goes on for the others and the cache.
    pub fn cancel(&mut self, ticket: Ticket) {
        let Some(name) = self.tickets.remove(&ticket) else {
            return;
        };
        if let Some(l) = self.lookups.get_mut(&name) {
            if let Some(i) = l.waiters.iter().position(|(t, _)| *t == ticket) {
                let (_, client) = l.waiters.swap_remove(i);
                self.release_client(client);
            }
        }
    }

    /// `bytes` came back from `from` on try `handle`'s socket (a UDP
    /// datagram, or a TCP answer without its length).
    pub fn handle_answer(
        &mut self,
        now: Time,
        handle: QueryHandle,
        from: SocketAddr,
        bytes: &[u8],
    ) {
        self.now = self.now.max(now);
        let Some((name, qi)) = self.tries.get(&handle).cloned() else {
            self.counters.ignored += 1;
            return;
        };
        let Some(l) = self.lookups.get(&name) else {
            self.counters.ignored += 1;
            return;
        };
        let q = &l.queries[qi];
        let Some(t) = q.live.filter(|t| t.handle == handle) else {
            self.counters.ignored += 1;
            return;
        };
        if self.cfg.servers.get(t.server) != Some(&from) {
            self.counters.ignored += 1;
            return;
        }
        let reply = match wire::parse_answer(bytes, t.id, &name, q.qtype) {
            Ok(r) => r,
            Err(_) => {
                self.counters.ignored += 1;
                return;
            }
        };
        self.tries.remove(&handle);
        match reply {
            Reply::Truncated => {
                // The same server again, over TCP (RFC 7766 §5); a
                // truncated answer over TCP is a failure of that server.
                if t.tcp {
                    self.retry_or_fail(now, &name, qi, QueryResult::Failed);
                } else {
                    self.send(now, &name, qi, t.server, true);
                }
            }
            Reply::ServerFailure => self.retry_or_fail(now, &name, qi, QueryResult::Failed),
            r => {
                if let Some(l) = self.lookups.get_mut(&name) {
                    l.queries[qi].live = None;
                    l.queries[qi].result = Some(QueryResult::Reply(r));
                }
                self.settle(now, &name);
            }
        }
    }

    /// Sending try `handle` failed (no route, no socket): the next server
    /// is tried at once.
    pub fn handle_send_failed(&mut self, now: Time, handle: QueryHandle) {
        self.now = self.now.max(now);
        let Some((name, qi)) = self.tries.remove(&handle) else {
            return;
        };
        let live = self
            .lookups
            .get(&name)
            .and_then(|l| l.queries[qi].live)
            .is_some_and(|t| t.handle == handle);
        if live {
            self.retry_or_fail(now, &name, qi, QueryResult::Failed);
        }
    }

    /// The earliest deadline: a try's or a lookup's.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.lookups
            .values()
            .flat_map(|l| {
                let tries = l.queries.iter().filter_map(|q| q.live.map(|t| t.deadline));
                tries.chain(std::iter::once(l.deadline))
            })
            .min()
    }

    /// Time has reached `now`: tries past their deadline are retried on
    /// the next server, lookups past theirs end timed out. Early or
    /// repeated calls are harmless.
    pub fn handle_timeout(&mut self, now: Time) {
        self.now = self.now.max(now);
        let mut expired_tries = Vec::new();
        let mut expired_lookups = Vec::new();
        for (name, l) in &self.lookups {
            if l.deadline <= now {
                expired_lookups.push(name.clone());
                continue;
            }
            for (qi, q) in l.queries.iter().enumerate() {
                if q.live.is_some_and(|t| t.deadline <= now) {
                    expired_tries.push((name.clone(), qi));
                }
            }
        }
        for name in expired_lookups {
            if let Some(l) = self.lookups.get_mut(&name) {
                for q in &mut l.queries {
                    if q.result.is_none() {
                        q.result = Some(QueryResult::Timeout);
                    }
                    if let Some(t) = q.live.take() {
                        self.tries.remove(&t.handle);
                    }
                }
            }
            self.settle(now, &name);
        }
        for (name, qi) in expired_tries {
            let Some(t) = self.lookups.get(&name).and_then(|l| l.queries[qi].live) else {
                continue;
            };
            self.tries.remove(&t.handle);
            self.retry_or_fail(now, &name, qi, QueryResult::Timeout);
        }
    }

    /// The next thing to do, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Sends try number `attempt` of query `qi` of `name`'s lookup.
    fn send_try(&mut self, now: Time, name: &str, qi: usize, attempt: u32) {
        let server = attempt as usize % self.cfg.servers.len();
        self.send(now, name, qi, server, false);
    }

    fn send(&mut self, now: Time, name: &str, qi: usize, server: usize, tcp: bool) {
        let id = self.rng.next_u64() as u16;
        let Some(l) = self.lookups.get_mut(name) else {
            return;
        };
        let q = &mut l.queries[qi];
        if wire::build_query(id, name, q.qtype, &mut self.buf).is_err() {
            q.result = Some(QueryResult::Failed);
            self.settle(now, name);
            return;
        }
        let handle = QueryHandle(self.next_handle);
        self.next_handle += 1;
        let deadline = Time(now.0.saturating_add(self.cfg.attempt_timeout.0)).min(l.deadline);
        q.attempts += 1;
        q.live = Some(Try {
            handle,
            id,
            server,
            tcp,
            deadline,
        });
        self.tries.insert(handle, (name.to_string(), qi));
        self.counters.queries += 1;
        self.out.push_back(Output::Query {
            handle,
            server: self.cfg.servers[server],
            tcp,
            bytes: self.buf.clone(),
            deadline,
        });
    }

    /// Query `qi`'s try failed with `why`: another try on the next server
    /// if any is left, else the query ends with `why`.
    fn retry_or_fail(&mut self, now: Time, name: &str, qi: usize, why: QueryResult) {
        let Some(l) = self.lookups.get_mut(name) else {
            return;
        };
        let q = &mut l.queries[qi];
        q.live = None;
        if q.attempts < self.cfg.attempts_max && l.deadline > now {
            let attempt = q.attempts;
            self.send_try(now, name, qi, attempt);
        } else {
            q.result = Some(why);
            self.settle(now, name);
        }
    }

    /// Ends `name`'s lookup if its queries allow an outcome: A has
    /// addresses, or both queries have ended.
    fn settle(&mut self, now: Time, name: &str) {
        let Some(l) = self.lookups.get(name) else {
            return;
        };
        let [a, aaaa] = &l.queries;
        let a_has = matches!(a.result, Some(QueryResult::Reply(Reply::Addresses { .. })));
        if !a_has && (a.result.is_none() || aaaa.result.is_none()) {
            return;
        }
        let Some(l) = self.lookups.remove(name) else {
            return;
        };
        let (outcome, ttl) = self.outcome_of(&l);
        if outcome == Err(Failure::Timeout) {
            self.counters.timeouts += 1;
        }
        for q in &l.queries {
            if let Some(t) = q.live {
                self.tries.remove(&t.handle);
            }
        }
        for (ticket, client) in l.waiters {
            self.tickets.remove(&ticket);
            self.release_client(client);
            self.out.push_back(Output::Done {
                ticket,
                outcome: outcome.clone(),
            });
        }
        self.remember(now, name, outcome, ttl);
    }

    /// A finished lookup's outcome and how long to remember it.
    fn outcome_of(&self, l: &Lookup) -> (Outcome, Duration) {
        let mut addrs = Vec::new();
        let mut ttl: Option<u32> = None;
        let mut nx = None;
        let mut nodata = None;
        let mut timeout = false;
        for q in &l.queries {
            match &q.result {
                Some(QueryResult::Reply(Reply::Addresses { addrs: a, ttl_secs })) => {
                    for ip in a {
                        if addrs.len() < RESOLVE.addresses_per_name_max {
                            addrs.push(*ip);
                        }
                    }
                    ttl = Some(ttl.map_or(*ttl_secs, |t| t.min(*ttl_secs)));
                }
                Some(QueryResult::Reply(Reply::NoSuchName { negative_ttl_secs })) => {
                    nx = Some(*negative_ttl_secs)
                }
                Some(QueryResult::Reply(Reply::NoData { negative_ttl_secs })) => {
                    nodata = Some(*negative_ttl_secs)
                }
                Some(QueryResult::Timeout) | None => timeout = true,
                _ => {}
            }
        }
        let negative = |t: Option<u32>| {
            // No SOA: remember it as briefly as a failure (RFC 2308 §5
            // says not to cache; a brief memory still absorbs a flood).
            t.map_or(self.cfg.failure_ttl, |s| Duration::from_secs(u64::from(s)))
                .min(self.cfg.negative_ttl_max)
        };
        if let Some(t) = ttl {
            let ttl = Duration::from_secs(u64::from(t)).min(self.cfg.ttl_max);
            (Ok(addrs), ttl)
        } else if let Some(t) = nx {
            (Err(Failure::NoSuchName), negative(t))
        } else if let Some(t) = nodata {
            if timeout {
                (Err(Failure::Timeout), self.cfg.failure_ttl)
            } else {
                (Err(Failure::NoAddress), negative(t))
            }
        } else if timeout {
            (Err(Failure::Timeout), self.cfg.failure_ttl)
        } else {
            (Err(Failure::ServerFailure), self.cfg.failure_ttl)
        }
    }

    /// Keeps `outcome` for `ttl`; a full cache first drops what has
    /// expired, then the half nearest to expiry.
    fn remember(&mut self, now: Time, name: &str, outcome: Outcome, ttl: Duration) {
        if ttl == Duration::ZERO || self.cfg.cache_entries_max == 0 {
            self.cache.remove(name);
            return;
        }
        if self.cache.len() >= self.cfg.cache_entries_max && !self.cache.contains_key(name) {
            self.cache.retain(|_, r| r.expires > now);
            if self.cache.len() >= self.cfg.cache_entries_max {
                let mut expiries: Vec<Time> = self.cache.values().map(|r| r.expires).collect();
                let mid = expiries.len() / 2;
                let (_, cut, _) = expiries.select_nth_unstable(mid);
                let cut = *cut;
                self.cache.retain(|_, r| r.expires > cut);
            }
        }
        self.cache.insert(
            name.to_string(),
            Remembered {
                expires: Time(now.0.saturating_add(ttl.0)),
                outcome,
            },
        );
    }

    fn release_client(&mut self, client: Option<IpAddr>) {
        let Some(c) = client else {
            return;
        };
        if let Some(n) = self.clients.get_mut(&c) {
            *n -= 1;
            if *n == 0 {
                self.clients.remove(&c);
            }
        }
    }
}

#[cfg(test)]
mod tests;
