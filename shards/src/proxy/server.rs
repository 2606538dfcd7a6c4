//! Client connections: keep-alive, pipelining (answers in order), strict
//! parsing (`coral::proxy::http`), hits served from the cache's mapping.
//!
//! Every decision about a request is the core's (`coral::proxy::request`):
//! `route` refuses or routes it, `Lookup::decide` says after each cache
//! lookup what to serve, `copy_answer` how a copy answers (304, range). This
//! file moves the bytes and drives those calls; `fast` answers hits of plain
//! requests without them (issue #11), `io` reads and sends.

use crate::clock::Mono;
use std::os::fd::AsRawFd;
use std::rc::Rc;

use coral::proxy::http::{self, Framing, HttpError, Method, RequestHead};
use coral::proxy::idle::Phase;
use coral::proxy::names;
use coral::proxy::policy::{self, CacheStatus, ClientHeadInfo, Forward, Freshness, RangeAnswer};
use coral::proxy::request::{self, CopyServed, CopyState, Found, Lookup, Refusal, Route, Serve};
use coral::proxy::rewrite;
use futures_lite::AsyncWriteExt;
use glommio::net::{TcpListener, TcpStream};

use super::stored::Stored;
use super::{unix_now, Job, MissAnswer, ProxyCore};
use crate::cache::{ObjectRef, ObjectState};
use crate::metrics::CacheResult;

mod fast;
mod io;
mod peer;

use fast::Hot;
pub(super) use fast::HotEntry;
use io::{is_nonblocking, send_all, send_complete, InBuf, Progress};

/// Bytes read from a client at once.
const READ_BYTES: usize = 16 << 10;
/// Largest request body drained (a GET with a body); more closes.
const REQUEST_BODY_BYTES_MAX: u64 = crate::limits::PROXY.request_body_bytes_max;
/// Bytes of a body sent per write.
const SEND_CHUNK_BYTES: u64 = 256 << 10;
/// Bodies at least this large go out with `sendfile` after the head (sent
/// with `MSG_MORE`); below, one `sendmsg` of head and body from the mapping.
/// At 4 KiB and 41 KB `sendfile` costs less server CPU than the kernel's
/// copy from the mapping (`proxy_hits`, benches/README.md, "Cache hits against nginx").
const SENDFILE_BYTES_MIN: u64 = 4 << 10;
/// Slices one `send_all` takes in one `sendmsg` (the rest go through the ring).
const IOV_MAX: usize = 4;

fn bad_request(reason: &'static str) -> HttpError {
    HttpError {
        status: 400,
        reason,
    }
}

/// Accepts client connections until the node stops (`accept::run`): at
/// most `connections_max` served at once; at the cap the oldest idle or
/// slowest connection is evicted for the new one (`ConnTable::evict`), and
/// only when none can go is the new one closed at once.
pub async fn accept_loop(pc: Rc<ProxyCore>, listener: TcpListener) {
    /// The proxy's own counters of its connections (`ProxyStats`).
    struct Stats(Rc<ProxyCore>);
    impl crate::accept::Tally for Stats {
        fn accepted(&self) {
            let c = &self.0.stats.connections_accepted;
            c.set(c.get() + 1);
        }
        fn refused(&self) {
            let c = &self.0.stats.connections_refused;
            c.set(c.get() + 1);
        }
        fn evict(&self) -> bool {
            let victim = self.0.idle.borrow_mut().evict();
            match victim {
                Some(fd) => {
                    // Its pending read or write ends; its task closes it.
                    crate::accept::shut_down(fd, true);
                    true
                }
                None => false,
            }
        }
    }
    let limits = crate::accept::Limits {
        connections_max: pc.cfg.connections_max,
        deadline: None,
    };
    let stats = Rc::new(Stats(pc.clone()));
    let stopping = pc.clone();
    crate::accept::run(
        "http",
        listener,
        limits,
        stats,
        move || stopping.shard.stopping(),
        move |stream| {
            let pc = pc.clone();
            async move {
                let _ = stream.set_nodelay(true);
                pc.connections.set(pc.connections.get() + 1);
                Conn::new(&pc, stream).run().await;
                pc.connections.set(pc.connections.get() - 1);
            }
        },
    )
    .await;
}

/// How often the deadline sweep runs: the tick of the connection table.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Once a second (the table's tick): shuts down the client connections past
/// their phase's deadline (`coral::proxy::idle`): a request head not in
/// within `client_head_timeout_ms` of its first byte, a body not in within
/// `client_body_timeout_ms`, a keep-alive connection idle for
/// `client_idle_timeout_ms`, a send that made no progress for
/// `client_send_timeout_ms` (each rounded up to whole seconds; at most a
/// second more). Their pending read or write ends and they close; a stalled
/// send's unsent bytes are discarded (a reset), so the kernel keeps none.
pub(super) async fn deadline_sweep(pc: Rc<ProxyCore>) {
    let cfg = &pc.cfg;
    let deadlines = coral::proxy::idle::Deadlines::from_ms(
        cfg.client_head_timeout_ms,
        cfg.client_body_timeout_ms,
        cfg.client_idle_timeout_ms,
        cfg.client_send_timeout_ms,
    );
    let mut expired = Vec::new();
    while !pc.shard.stopping() {
        glommio::timer::sleep(SWEEP_EVERY).await;
        if let Some(r) = &pc.ready {
            // A buffer parked since the last sweep goes to the pool: an idle
            // connection holds none for more than two sweep periods.
            r.reclaim_parked(io::give_back);
        }
        pc.idle.borrow_mut().expired(&deadlines, &mut expired);
        if expired.is_empty() {
            continue;
        }
        for &(fd, phase) in &expired {
            crate::accept::shut_down(fd, phase == coral::proxy::idle::Phase::Sending);
        }
        tracing::debug!(closed = expired.len(), totals = ?pc.idle.borrow().expired_total(), "client connections past their deadlines");
        expired.clear();
    }
}

struct Conn<'a> {
    pc: &'a Rc<ProxyCore>,
    /// The core's readiness set watches the socket (reads by `recv`).
    watched: bool,
    stream: TcpStream,
    inb: InBuf,
    out: Vec<u8>,
    /// The socket is `O_NONBLOCK` (glommio makes it so): direct `sendfile`
    /// and `sendmsg` calls never park the executor.
    nonblocking: bool,
    /// The request being answered by the full path is plain
    /// (`hot::parse_plain`) and had no fast path: a fresh hit teaches the
    /// hot table its Host and target bytes (`cold_name`).
    cold: bool,
    /// Host then target bytes of that request (or of a fast hit whose
    /// residency is being checked); its buffer is reused.
    cold_name: Vec<u8>,
    cold_host_len: usize,
    /// The answer to the current request, counted and logged once sent.
    resp: Resp,
    /// The client's address and request, for the access log (when it is on).
    client: Option<std::net::SocketAddr>,
    /// This connection's slot in the core's connection table: stamped with
    /// the phase it is in (head, body, idle, sending) or busy, which the
    /// sweep's deadlines read (no timer per read or write).
    idle_slot: coral::proxy::idle::Slot,
    /// A request was answered: an empty buffer is a keep-alive wait (idle),
    /// not the first head.
    answered: bool,
    log: crate::accesslog::Request,
}

/// Longest Host plus target a `HotEntry` is made for.
const HOT_NAME_BYTES_MAX: usize = crate::limits::PROXY.hot_name_bytes_max;
/// Longest stored head a `HotEntry` is made for (it keeps the bytes, the
/// decoded head and the built client head: a few KiB per entry at most).
const HOT_HEAD_BYTES_MAX: usize = crate::limits::PROXY.hot_head_bytes_max;

/// What a request was answered with: set where the answer's head is made
/// (`serve`, `pass_through`, `error`), counted by `run` when it ends.
#[derive(Clone, Copy)]
struct Resp {
    method: &'static str,
    status: u16,
    body_bytes: u64,
    cache: CacheResult,
}

impl Default for Resp {
    fn default() -> Resp {
        Resp {
            method: "OTHER",
            status: 0,
            body_bytes: 0,
            cache: CacheResult::Error,
        }
    }
}

/// The status of the response head in `head` (`HTTP/1.1 200 ...`).
fn head_status(head: &[u8]) -> u16 {
    head.get(9..12)
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// The cache result of an answer from the cache with `cs`.
fn cache_result(cs: &CacheStatus) -> CacheResult {
    // A request collapsed onto a copy being written is no hit (RFC 9211), but
    // this node served it without a fetch of its own: local, as before.
    if cs.hit || cs.collapsed {
        return CacheResult::Local;
    }
    match cs.detail {
        Some("stale-on-error" | "stale-while-revalidate") => CacheResult::Stale,
        Some("peer-l2") => CacheResult::Peer(2),
        Some("peer-l1") => CacheResult::Peer(1),
        Some("peer-l0") => CacheResult::Peer(0),
        _ => CacheResult::Origin,
    }
}

/// Whether the connection goes on after an answer.
#[derive(Clone, Copy)]
enum Next {
    KeepAlive,
    Close,
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        // Released once (again harmless) even when the task is dropped
        // before `run` ends: the sweep never sees a closed descriptor.
        self.pc.idle.borrow_mut().release(self.idle_slot);
        if self.watched {
            if let Some(r) = &self.pc.ready {
                r.forget(self.stream.as_raw_fd());
            }
        }
    }
}

impl<'a> Conn<'a> {
    /// The client's address (for the resolver's per-client bound): known
    /// when the access log is on, else asked of the socket (once per miss,
    /// never on a hit).
    fn client_ip(&self) -> Option<std::net::IpAddr> {
        self.client
            .or_else(|| self.stream.peer_addr().ok())
            .map(|a| a.ip())
    }

    /// The core's readiness set when it watches this connection's socket
    /// (its reads, and its sends' waits for room).
    fn ready(&self) -> Option<&'a crate::proxy::ready::Readiness> {
        let pc: &'a Rc<ProxyCore> = self.pc;
        if self.watched {
            pc.ready.as_deref()
        } else {
            None
        }
    }

    fn new(pc: &'a Rc<ProxyCore>, stream: TcpStream) -> Conn<'a> {
        let client = if crate::accesslog::enabled() {
            stream.peer_addr().ok()
        } else {
            None
        };
        let idle_slot = pc.idle.borrow_mut().register(stream.as_raw_fd());
        let nonblocking = is_nonblocking(stream.as_raw_fd());
        let watched = nonblocking
            && pc
                .ready
                .as_ref()
                .is_some_and(|r| r.watch(stream.as_raw_fd()).is_ok());
        Conn {
            idle_slot,
            answered: false,
            watched,
            pc,
            inb: InBuf::new(pc.limits.head_bytes_max + READ_BYTES),
            // Grows to the first answer's head and is reused after: an
            // idle connection holds a head's bytes, not a kilobyte.
            out: Vec::new(),
            nonblocking,
            stream,
            cold: false,
            cold_name: Vec::new(),
            cold_host_len: 0,
            resp: Resp::default(),
            client,
            log: crate::accesslog::Request::default(),
        }
    }

    /// Starts a response to `req` (or to an unparsed request).
    fn begin(&mut self, req: Option<&RequestHead>) {
        self.resp = Resp::default();
        if let Some(r) = req {
            self.resp.method = crate::metrics::method_label(r.method.as_str());
        }
        if crate::accesslog::enabled() {
            match req {
                Some(r) => self.log.note(r),
                None => self.log.unparsed(),
            }
        }
    }

    /// Counts (and logs) the response begun at `started`. One that sent
    /// nothing counts as 499, nginx's "client closed the request".
    fn end(&mut self, started: Mono) {
        let took = started.elapsed();
        let r = self.resp;
        let status = if r.status == 0 { 499 } else { r.status };
        self.pc
            .stats
            .http
            .borrow_mut()
            .record(r.method, status, r.cache, r.body_bytes, took);
        crate::accesslog::log(self.client, &self.log, status, r.body_bytes, r.cache, took);
    }

    async fn run(mut self) {
        // `client_idle_timeout_ms` is kept by the core's idle sweep
        // (`mod.rs`), not by a read timeout: glommio arms and cancels a
        // timer for every read that waits, about 700 instructions a hit.
        loop {
            // The clocks of the wake that brought these bytes, for this
            // request only (a later one in the same bytes reads its own).
            let woke = self.inb.take_woke();
            if !self.inb.is_empty() {
                let next = match self.hot_hit(woke) {
                    Hot::Served(next) => Some(next),
                    Hot::Sending(h) => Some(self.hot_send(h).await),
                    Hot::Cold | Hot::NotPlain => None,
                };
                match next {
                    Some(Next::KeepAlive) => continue,
                    Some(Next::Close) => break,
                    None => {}
                }
            }
            let parsed = if self.inb.is_empty() {
                Ok(None)
            } else {
                http::parse_request_head(self.inb.filled(), &self.pc.limits)
            };
            match parsed {
                Ok(Some((req, len))) => {
                    self.inb.consume(len);
                    self.answered = true;
                    self.pc.idle.borrow_mut().busy(self.idle_slot);
                    let started = Mono::now();
                    self.begin(Some(&req));
                    // Boxed: the request path beyond the hot hit (a miss, a
                    // revalidation, a peer fetch) is a large state machine,
                    // and inline it would make every connection's task,
                    // idle ones included, that large (issue 27, "Many
                    // connections"). The box is made per such request,
                    // which allocates in any case.
                    let next = Box::pin(self.handle(req)).await;
                    self.end(started);
                    self.cold = false;
                    match next {
                        Next::KeepAlive => continue,
                        Next::Close => break,
                    }
                }
                Ok(None) => {
                    if self.inb.len() >= self.pc.limits.head_bytes_max {
                        let started = Mono::now();
                        self.begin(None);
                        self.bad(HttpError {
                            status: 431,
                            reason: "request head too large",
                        })
                        .await;
                        self.end(started);
                        break;
                    }
                    // A keep-alive wait, or (bytes of it in) a head: one
                    // deadline for the whole head, from its first byte.
                    let phase = if self.answered && self.inb.is_empty() {
                        Phase::Idle
                    } else {
                        Phase::Head
                    };
                    if !self.read_more(phase).await {
                        break;
                    }
                }
                Err(e) => {
                    let started = Mono::now();
                    self.begin(None);
                    self.bad(e).await;
                    self.end(started);
                    break;
                }
            }
        }
        self.pc.idle.borrow_mut().release(self.idle_slot);
        let _ = self.stream.close().await;
    }

    /// Reads more bytes of a request in `phase` (a head, a body, or the
    /// wait for the next request); false on EOF, error or the phase's
    /// deadline (the sweep shuts the socket down, which ends the read). A
    /// head or body keeps the stamp of its first read: its deadline is for
    /// the whole of it, not per read.
    /// Not an `async fn`: the phase is entered when it is called (each
    /// caller awaits it at once), and its future is `fill`'s, one state
    /// machine fewer to poll on every wake (issue 27).
    fn read_more(&mut self, phase: Phase) -> impl std::future::Future<Output = bool> + '_ {
        self.pc.idle.borrow_mut().enter(self.idle_slot, phase);
        let ready = self.pc.ready.as_deref().filter(|_| self.watched);
        self.inb.fill(&mut self.stream, ready)
    }

    /// Where this connection's sends stamp their progress.
    fn progress(&self) -> Progress<'a> {
        let pc: &'a Rc<ProxyCore> = self.pc;
        Progress {
            table: &pc.idle,
            slot: self.idle_slot,
        }
    }

    /// A malformed request: its status and a closed connection.
    async fn bad(&mut self, e: HttpError) {
        let pc = self.pc;
        pc.stats.bad_requests.set(pc.stats.bad_requests.get() + 1);
        self.error(e.status, e.reason, false, None).await;
    }

    /// Writes a short error answer.
    async fn error(&mut self, status: u16, why: &str, keep_alive: bool, allow: Option<&str>) {
        let body = format!("{status} {}: {why}\n", http::status_reason(status));
        let mut head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nCache-Control: no-store\r\n",
            http::status_reason(status),
            body.len()
        );
        if let Some(a) = allow {
            head.push_str(&format!("Allow: {a}\r\n"));
        }
        head.push_str(if keep_alive {
            "Connection: keep-alive\r\n\r\n"
        } else {
            "Connection: close\r\n\r\n"
        });
        head.push_str(&body);
        self.resp.status = status;
        self.resp.cache = CacheResult::Error;
        self.resp.body_bytes = body.len() as u64;
        let p = self.progress();
        let _ = send_all(&mut self.stream, &[head.as_bytes()], p).await;
    }

    /// Reads and discards a request body, per its framing.
    async fn drain_body(&mut self, framing: Framing) -> Result<(), HttpError> {
        let too_large = HttpError {
            status: 413,
            reason: "request body too large",
        };
        match framing {
            Framing::Empty | Framing::UntilClose => Ok(()),
            Framing::Length(n) => {
                if n > REQUEST_BODY_BYTES_MAX {
                    return Err(too_large);
                }
                let mut left = n as usize;
                loop {
                    let take = left.min(self.inb.len());
                    self.inb.consume(take);
                    left -= take;
                    if left == 0 {
                        return Ok(());
                    }
                    if !self.read_more(Phase::Body).await {
                        return Err(bad_request("request body cut short"));
                    }
                }
            }
            Framing::Chunked => {
                let mut dec = http::ChunkedDecoder::new(&self.pc.limits);
                let mut sink = Vec::new();
                let mut total = 0u64;
                loop {
                    let (used, done) = dec.feed(self.inb.filled(), &mut sink)?;
                    self.inb.consume(used);
                    total += sink.len() as u64;
                    sink.clear();
                    if total > REQUEST_BODY_BYTES_MAX {
                        return Err(too_large);
                    }
                    if done {
                        return Ok(());
                    }
                    if !self.read_more(Phase::Body).await {
                        return Err(bad_request("request body cut short"));
                    }
                }
            }
        }
    }

    /// Answers one request: the core routes it (`request::route`), then
    /// decides after each cache lookup what to serve (`Lookup::decide`).
    async fn handle(&mut self, req: RequestHead) -> Next {
        // A peer asking for the evidence this node published (issue 22
        // item 5 c, `proxy/evidence.rs`).
        if let Some(out) = super::evidence::answer(self.pc, &req) {
            if self.drain_body(req.framing).await.is_err() {
                return Next::Close;
            }
            self.resp.status = head_status(&out);
            let p = self.progress();
            return match send_all(&mut self.stream, &[&out], p).await {
                Ok(()) if req.keep_alive => Next::KeepAlive,
                _ => Next::Close,
            };
        }
        let routed = request::route(&req, &self.pc.zones);
        if let Err(r) = &routed {
            if !r.reads_body {
                // The body is not read: the connection closes.
                self.refuse(r).await;
                return Next::Close;
            }
        }
        if let Err(e) = self.drain_body(req.framing).await {
            self.bad(e).await;
            return Next::Close;
        }
        self.pc.idle.borrow_mut().busy(self.idle_slot);
        match routed {
            Err(r) => self.refuse(&r).await,
            Ok(route) if route.bypass => {
                self.pass_through(&req, &route.origin, Forward::Bypass)
                    .await
            }
            Ok(route) => self.look_up(&req, &route).await,
        }
    }

    /// Answers a routed request from the cache, filled through the key's
    /// owning core when the core decides so.
    async fn look_up(&mut self, req: &RequestHead, route: &Route) -> Next {
        let pc = self.pc;
        let mut way = Lookup::new(route);
        loop {
            let now = unix_now();
            let key = way.key();
            let obj = pc.cache.lookup(&key);
            let found = obj.and_then(|o| pc.stored_head(&key, &o).map(|s| (o, s)));
            let serve = {
                let mut passes = pc.passes.borrow_mut();
                match &found {
                    Some((obj, st)) => {
                        let state = match obj.state() {
                            ObjectState::Writing { .. } => CopyState::Writing,
                            ObjectState::Complete { .. } => CopyState::Complete {
                                fresh: now < obj.meta().fresh_until_secs,
                            },
                            ObjectState::Failed => CopyState::Failed,
                        };
                        let copy = Found::Copy {
                            head: &st.head,
                            vary_req: &st.vary_req,
                            state,
                        };
                        way.decide(req, copy, now, &mut passes, || {
                            pc.variant_for(&key, st, req, route.no_forward)
                        })
                    }
                    None => way.decide(req, Found::Nothing, now, &mut passes, || None),
                }
            };
            if let (Serve::Fill, Some((obj, st))) = (&serve, &found) {
                if self.while_revalidate(req, route, key, obj, st, now) {
                    let mut cs = CacheStatus::forward(Forward::Stale, false);
                    cs.detail = Some("stale-while-revalidate");
                    return self.serve(req, obj, st, cs).await;
                }
            }
            match (serve, &found) {
                (Serve::Variant, _) => continue,
                // A peer's request: the copy with its signed records
                // (issue 22 item 4; clients never take this branch).
                (Serve::Hit, Some((obj, st))) if route.no_forward => {
                    let hit = CacheStatus::hit();
                    return self.serve_peer(req, route.key, key, obj, st, hit).await;
                }
                (Serve::Copy(cs), Some((obj, st))) if route.no_forward => {
                    return self.serve_peer(req, route.key, key, obj, st, cs).await;
                }
                (Serve::Hit, Some((obj, st))) => {
                    pc.stats.hits.set(pc.stats.hits.get() + 1);
                    self.learn_hot(key, obj, st);
                    return self.serve(req, obj, st, CacheStatus::hit()).await;
                }
                (Serve::Copy(cs), Some((obj, st))) => return self.serve(req, obj, st, cs).await,
                (Serve::Hit | Serve::Copy(_), None) => {
                    unreachable!("the core serves a copy only when one was found")
                }
                (Serve::Refuse(r), _) => return self.refuse(&r).await,
                (Serve::Pass(why), _) => return self.pass_through(req, &route.origin, why).await,
                (Serve::Fill, _) => {}
            }
            let mut get = req.clone();
            get.method = Method::Get;
            let job = Job {
                key,
                url_key: route.key,
                origin: route.origin.clone(),
                request: get,
                no_forward: route.no_forward,
                client: self.client_ip(),
            };
            match pc.miss(job).await {
                MissAnswer::Ready {
                    peer,
                    collapsed,
                    fwd_status,
                } => {
                    way.filled(peer, collapsed);
                    way.next_hop_answered(fwd_status);
                }
                MissAnswer::ReadyAfterInterim {
                    peer,
                    interim,
                    collapsed,
                    fwd_status,
                } => {
                    way.next_hop_answered(fwd_status);
                    // 1xx go to HTTP/1.1 clients only (RFC 9110 §15.2).
                    let p = self.progress();
                    if req.minor_version >= 1
                        && send_all(&mut self.stream, &[&interim], p).await.is_err()
                    {
                        return Next::Close;
                    }
                    way.filled(peer, collapsed)
                }
                MissAnswer::Stale { fwd_status } => {
                    way.kept_stale();
                    way.next_hop_answered(fwd_status);
                }
                MissAnswer::Uncacheable => {
                    pc.passes.borrow_mut().mark(key, unix_now());
                    return self
                        .pass_through(req, &route.origin, Forward::UriMiss)
                        .await;
                }
                MissAnswer::Pass(answer) => {
                    // The owning core's fetch for this request: relayed,
                    // not fetched again.
                    pc.passes.borrow_mut().mark(key, unix_now());
                    let resp = answer.resume();
                    return self.relay(req, &route.origin, Forward::UriMiss, resp).await;
                }
                MissAnswer::PassOnce(answer) => {
                    let resp = answer.resume();
                    return self.relay(req, &route.origin, Forward::UriMiss, resp).await;
                }
                MissAnswer::Refill => {
                    if !way.refill() {
                        // Filled twice already: this client's answer alone.
                        return self
                            .pass_through(req, &route.origin, Forward::UriMiss)
                            .await;
                    }
                }
                MissAnswer::Error(fail) => {
                    return self.refuse(&Refusal::failed(fail, req.keep_alive)).await;
                }
                MissAnswer::Relayed(answer) => return self.send_relayed(req, &answer).await,
            }
        }
    }

    /// RFC 5861 `stale-while-revalidate`: whether the stale complete copy
    /// `obj` is served to `req` at once, its revalidation started in the
    /// background on the key's owning core (once per object network-wide,
    /// `coral::proxy::stale`). Not for a peer's request, nor a copy that
    /// must be revalidated.
    fn while_revalidate(
        &self,
        req: &RequestHead,
        route: &Route,
        key: coral::Id,
        obj: &ObjectRef,
        st: &Stored,
        now: u64,
    ) -> bool {
        use coral::proxy::stale;
        if route.no_forward
            || st.must_revalidate
            || !matches!(obj.state(), ObjectState::Complete { .. })
            || !stale::while_revalidate(
                &stale::windows(&st.head.headers),
                req,
                obj.meta().fresh_until_secs,
                now,
            )
        {
            return false;
        }
        let mut get = req.clone();
        get.method = Method::Get;
        self.pc.revalidate_in_background(Job {
            key,
            url_key: route.key,
            origin: route.origin.clone(),
            request: get,
            no_forward: false,
            client: self.client_ip(),
        });
        true
    }

    /// Sends the origin's error answer the fetch relayed (not stored).
    async fn send_relayed(&mut self, req: &RequestHead, r: &super::Relayed) -> Next {
        let pc = self.pc;
        let info = ClientHeadInfo {
            node_name: &pc.node_name,
            age_secs: 0,
            cache_status: CacheStatus::forward(Forward::UriMiss, false),
            range: RangeAnswer::Full,
            body_len: Some(r.body.len() as u64),
            keep_alive: req.keep_alive,
            not_modified: false,
            client_minor_version: req.minor_version,
        };
        let mut out = Vec::with_capacity(1024);
        let framing = policy::client_head(&r.head, &info, &mut out);
        self.resp.status = head_status(&out);
        self.resp.cache = CacheResult::Pass;
        let ka = req.keep_alive && !matches!(framing, Framing::UntilClose);
        let body: &[u8] = if req.method == Method::Head || framing == Framing::Empty {
            &[]
        } else {
            &r.body
        };
        self.resp.body_bytes = body.len() as u64;
        let p = self.progress();
        if send_all(&mut self.stream, &[&out, body], p).await.is_err() || !ka {
            return Next::Close;
        }
        Next::KeepAlive
    }

    /// Answers with the core's refusal.
    async fn refuse(&mut self, r: &Refusal) -> Next {
        if r.malformed {
            let bad = &self.pc.stats.bad_requests;
            bad.set(bad.get() + 1);
        }
        self.error(r.status, &r.reason, r.keep_alive, r.allow).await;
        if r.keep_alive {
            Next::KeepAlive
        } else {
            Next::Close
        }
    }

    /// Sends a cached object (complete, or arriving: cut-through).
    async fn serve(
        &mut self,
        req: &RequestHead,
        obj: &ObjectRef,
        st: &Stored,
        mut cache_status: CacheStatus,
    ) -> Next {
        let pc = self.pc;
        let now = unix_now();
        let meta = obj.meta();
        let freshness = Freshness {
            date_secs: meta.stored_secs,
            fresh_until_secs: meta.fresh_until_secs,
            response_secs: meta.stored_secs,
            initial_age_secs: st.initial_age_secs,
            must_revalidate: st.must_revalidate,
        };
        cache_status.ttl = Some(meta.fresh_until_secs as i64 - now as i64);
        let body_len = match obj.state() {
            ObjectState::Complete { len } => Some(len),
            ObjectState::Writing { .. } => meta.expected_len,
            ObjectState::Failed => {
                self.error(502, "the transfer failed", false, None).await;
                return Next::Close;
            }
        };
        crate::status::sink::served(
            obj.key_prefix(),
            req,
            body_len.unwrap_or(0),
            cache_status.hit || cache_status.collapsed,
        );
        if req.minor_version == 0
            && req.method != Method::Head
            && policy::stored_codings(&st.head).is_some()
        {
            // RFC 9112 §6.1: transfer codings never go to an HTTP/1.0 client.
            self.error(
                502,
                "the stored answer has a transfer coding coral does not decode, \
                 which an HTTP/1.0 client cannot receive",
                false,
                None,
            )
            .await;
            return Next::Close;
        }
        let copy = CopyServed {
            head: &st.head,
            freshness,
            body_len,
            complete: matches!(obj.state(), ObjectState::Complete { .. }),
            cache_status,
        };
        let info = request::copy_answer(req, &copy, now, &pc.node_name);
        let range = info.range;
        self.out.clear();
        let framing = policy::client_head(&st.head, &info, &mut self.out);
        self.resp.status = head_status(&self.out);
        self.resp.cache = cache_result(&cache_status);
        let ka = req.keep_alive && !matches!(framing, Framing::UntilClose);
        let next = if ka { Next::KeepAlive } else { Next::Close };
        if req.method == Method::Head || framing == Framing::Empty {
            let out = std::mem::take(&mut self.out);
            let p = self.progress();
            let ok = send_all(&mut self.stream, &[&out], p).await.is_ok();
            self.out = out;
            return if ok { next } else { Next::Close };
        }
        let (start, end) = match range {
            RangeAnswer::Partial {
                start,
                end_inclusive,
            } => (start, end_inclusive + 1),
            _ => (0, body_len.unwrap_or(u64::MAX)),
        };
        let chunked = framing == Framing::Chunked;
        if let (ObjectState::Complete { len }, false) = (obj.state(), chunked) {
            if end <= len {
                obj.ensure_resident(start, end).await;
                let out = std::mem::take(&mut self.out);
                let p = self.progress();
                let ready = self.ready();
                let r = send_complete(
                    &mut self.stream,
                    ready,
                    self.nonblocking,
                    &out,
                    obj,
                    start,
                    end,
                    p,
                )
                .await;
                self.out = out;
                if r.is_ok() {
                    self.resp.body_bytes = end - start;
                }
                return if r.is_ok() { next } else { Next::Close };
            }
        }
        self.stream_body(obj, start, end, chunked, next).await
    }

    /// Sends the body `[start, end)` of a copy after the head in `self.out`:
    /// chunk by chunk as it arrives (cut-through), chunked when `chunked`.
    async fn stream_body(
        &mut self,
        obj: &ObjectRef,
        start: u64,
        end: u64,
        chunked: bool,
        next: Next,
    ) -> Next {
        let mut head = Some(std::mem::take(&mut self.out));
        let p = self.progress();
        let mut pos = start;
        let mut frame = Vec::new();
        // The copy's fill was cut (no source could continue it, issue 24).
        let mut cut = false;
        let result: Result<(), ()> = async {
            loop {
                if pos >= end {
                    break;
                }
                let want = end.min(pos + SEND_CHUNK_BYTES);
                obj.ensure_resident(pos, want).await;
                let data = obj.body(pos, want);
                if data.is_empty() {
                    match obj.state() {
                        ObjectState::Complete { len } if pos >= len => break,
                        ObjectState::Complete { .. } => return Err(()),
                        ObjectState::Failed => {
                            cut = true;
                            return Err(());
                        }
                        ObjectState::Writing { .. } => {
                            // Send what we have (the head) before waiting.
                            if let Some(h) = head.take() {
                                send_all(&mut self.stream, &[&h], p).await.map_err(|_| ())?;
                                self.out = h;
                            }
                            obj.wait_beyond(pos).await;
                            continue;
                        }
                    }
                }
                let n = data.len() as u64;
                let h: &[u8] = head.as_deref().unwrap_or(&[]);
                if chunked {
                    frame.clear();
                    frame.extend_from_slice(h);
                    http::write_chunk(&mut frame, data);
                    send_all(&mut self.stream, &[&frame], p)
                        .await
                        .map_err(|_| ())?;
                } else {
                    send_all(&mut self.stream, &[h, data], p)
                        .await
                        .map_err(|_| ())?;
                }
                if let Some(h) = head.take() {
                    self.out = h;
                }
                pos += n;
            }
            let mut tail = head.take().unwrap_or_default();
            if chunked {
                http::write_last_chunk(&mut tail);
            }
            if !tail.is_empty() {
                send_all(&mut self.stream, &[&tail], p)
                    .await
                    .map_err(|_| ())?;
            }
            Ok(())
        }
        .await;
        self.resp.body_bytes = pos - start;
        if cut {
            // Counted as cut, never as a complete answer.
            self.resp.cache = CacheResult::Cut;
            crate::metrics::count_response_cut();
        }
        match result {
            Ok(()) => next,
            // A transfer that failed mid-way: close, so the client sees it
            // was cut short (never a short body that looks complete).
            Err(()) => Next::Close,
        }
    }

    /// Fetches for this client alone, without storing (uncacheable requests
    /// and answers, other Vary variants).
    async fn pass_through(
        &mut self,
        req: &RequestHead,
        origin: &names::Origin,
        why: Forward,
    ) -> Next {
        let pc = self.pc;
        let client = self.client_ip();
        let addr = match pc
            .resolver
            .resolve_for(client, &origin.host, origin.port)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                pc.stats.origin_error("resolve");
                // What failed, and the flag that lifts a refusal (issue 25
                // item 4).
                let fail = e.fail();
                self.error(fail.status, fail.reason(), req.keep_alive, None)
                    .await;
                return if req.keep_alive {
                    Next::KeepAlive
                } else {
                    Next::Close
                };
            }
        };
        let mut up = Vec::with_capacity(1024);
        // For this client alone: the allowlist of `coral::proxy::keyed`.
        let sent = coral::proxy::keyed::upstream_view(
            req,
            coral::proxy::keyed::Upstream::Pass,
            &pc.cfg.forward_request_fields,
        );
        policy::upstream_request(&sent, origin, false, &http::Headers::new(), &mut up);
        let is_head = req.method == Method::Head;
        pc.stats.origin_passes.set(pc.stats.origin_passes.get() + 1);
        let resp = match super::upstream::send(
            &pc.pool,
            addr,
            &up,
            is_head,
            pc.timeouts,
            &pc.limits,
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                pc.stats.origin_error(e.reason());
                let fail = e.fail();
                self.error(fail.status, fail.reason(), false, None).await;
                return Next::Close;
            }
        };
        self.relay(req, origin, why, resp).await
    }

    /// Relays an origin's response to this client alone, without storing
    /// it (a `HEAD` gets the head only).
    async fn relay(
        &mut self,
        req: &RequestHead,
        origin: &names::Origin,
        why: Forward,
        mut resp: super::upstream::Response,
    ) -> Next {
        let pc = self.pc;
        let is_head = req.method == Method::Head;
        let mut head = policy::head_to_store(&resp.head);
        // §2.1: redirects and links to the origin stay Coralized (HTML that
        // is content-coded is passed through untouched).
        rewrite::head(&mut head, origin, &pc.suffix, pc.http.port());
        let mut rewriter = (rewrite::body_is_rewritable(&head)
            && http::transfer_codings(&resp.head.headers).is_none())
        .then(|| rewrite::HtmlRewriter::new(origin, &pc.suffix, pc.http.port()));
        let body_len = match resp.head.framing {
            Framing::Length(n) if rewriter.is_none() => Some(n),
            // The origin's answer to a HEAD: the length it names.
            Framing::Empty if is_head && resp.head.status == 200 => {
                if rewriter.is_none() {
                    resp.head
                        .headers
                        .get("content-length")
                        .and_then(http::parse_digits)
                } else {
                    None
                }
            }
            Framing::Empty => Some(0),
            _ => None,
        };
        let info = ClientHeadInfo {
            node_name: &pc.node_name,
            age_secs: 0,
            cache_status: CacheStatus::forward(why, false),
            range: RangeAnswer::Full,
            body_len,
            keep_alive: req.keep_alive,
            not_modified: false,
            client_minor_version: req.minor_version,
        };
        let mut out = Vec::with_capacity(1024);
        // Interim (1xx) responses first, to HTTP/1.1 clients only (RFC
        // 9110 §15.2); never stored.
        let interim_len = if req.minor_version >= 1 {
            out.extend_from_slice(&resp.interim);
            resp.interim.len()
        } else {
            0
        };
        let framing = policy::client_head(&head, &info, &mut out);
        // Transfer codings coral does not decode go on with the answer
        // (RFC 9112 §6.1), before the chunked coding it frames it with; an
        // HTTP/1.0 client cannot receive them.
        if let Some(codings) = http::transfer_codings(&resp.head.headers) {
            const CHUNKED: &[u8] = b"Transfer-Encoding: chunked\r\n";
            let at = out[interim_len..]
                .windows(CHUNKED.len())
                .position(|w| w == CHUNKED);
            match at {
                Some(at) if req.minor_version >= 1 && !is_head => {
                    let at = interim_len + at + b"Transfer-Encoding: ".len();
                    let mut with = codings;
                    with.extend_from_slice(b", ");
                    out.splice(at..at, with);
                }
                _ if is_head => {}
                _ => {
                    self.error(
                        502,
                        "the origin's answer has a transfer coding coral does not decode, \
                         which an HTTP/1.0 client cannot receive",
                        false,
                        None,
                    )
                    .await;
                    return Next::Close;
                }
            }
        }
        self.resp.status = head_status(&out[interim_len..]);
        self.resp.cache = CacheResult::Pass;
        let ka = req.keep_alive && !matches!(framing, Framing::UntilClose);
        let p = self.progress();
        if is_head && resp.head.status == 200 {
            // RFC 9111 §4.3.5: a HEAD's answer may update the stored copy.
            if let Some(url) = req
                .path()
                .and_then(|p| names::canonical_url(origin, p).ok())
            {
                pc.freshen_from_head(names::cache_key(&url), resp.head.clone());
            }
        }
        if is_head || framing == Framing::Empty {
            if send_all(&mut self.stream, &[&out], p).await.is_err() {
                return Next::Close;
            }
            resp.release(&pc.pool);
            return if ka { Next::KeepAlive } else { Next::Close };
        }
        let chunked = framing == Framing::Chunked;
        let mut chunk = Vec::with_capacity(64 << 10);
        let mut rewritten = Vec::new();
        let mut total = 0u64;
        loop {
            chunk.clear();
            let more = match resp.next(&mut chunk).await {
                Ok(m) => m,
                Err(e) => {
                    // The client's answer is cut short (closed, never a
                    // short body that looks complete); the origin failed.
                    tracing::info!(error = %e, "pass-through transfer failed: answer cut short");
                    pc.stats.origin_error(e.reason());
                    return Next::Close;
                }
            };
            let data = super::rewritten(rewriter.as_mut(), &chunk, more, &mut rewritten);
            total += data.len() as u64;
            if total > pc.cfg.object_bytes_max {
                pc.stats.origin_error("too_large");
                return Next::Close;
            }
            self.resp.body_bytes = total;
            if chunked {
                if !data.is_empty() {
                    http::write_chunk(&mut out, data);
                }
                if !more {
                    http::write_last_chunk(&mut out);
                }
                if send_all(&mut self.stream, &[&out], p).await.is_err() {
                    return Next::Close;
                }
            } else if send_all(&mut self.stream, &[&out, data], p).await.is_err() {
                return Next::Close;
            }
            out.clear();
            if !more {
                break;
            }
        }
        resp.release(&pc.pool);
        if ka {
            Next::KeepAlive
        } else {
            Next::Close
        }
    }
}
