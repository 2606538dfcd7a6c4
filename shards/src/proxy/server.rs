//! Client connections: keep-alive, pipelining (answers in order), strict
//! parsing (`coral::proxy::http`), hits served from the cache's mapping.

use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use coral::proxy::hot::{self, HitHead, HitInputs};
use coral::proxy::http::{self, Framing, HttpError, Method, RequestHead};
use coral::proxy::names;
use coral::proxy::policy::{
    self, CacheStatus, ClientHeadInfo, Conditional, Forward, Freshness, RangeAnswer,
};
use coral::proxy::rewrite;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use super::ready::Readiness;
use super::stored::Stored;
use super::{unix_now, Job, MissAnswer, ProxyCore};
use crate::cache::{ObjectRef, ObjectState};
use crate::metrics::CacheResult;
use coral::Id;

/// Bytes read from a client at once.
const READ_BYTES: usize = 16 << 10;
/// Largest request body drained (a GET with a body); more closes.
const REQUEST_BODY_BYTES_MAX: u64 = 1 << 20;
/// Bytes of a body sent per write.
const SEND_CHUNK_BYTES: u64 = 256 << 10;
/// Bodies at least this large go out with `sendfile` after the head (sent
/// with `MSG_MORE`); below, one `sendmsg` of head and body from the mapping.
/// At 4 KiB and 41 KB `sendfile` costs less server CPU than the kernel's
/// copy from the mapping (`proxy_hits`, README "Cache hits against nginx").
const SENDFILE_BYTES_MIN: u64 = 4 << 10;
/// Slices one `send_all` takes in one `sendmsg` (the rest go through the ring).
const IOV_MAX: usize = 4;
/// Longest pause after an accept error (EMFILE, ENFILE, ENOBUFS).
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

fn bad_request(reason: &'static str) -> HttpError {
    HttpError {
        status: 400,
        reason,
    }
}

/// Accepts connections until the node stops; backs off on errors and
/// closes connections over `connections_max` at once.
pub async fn accept_loop(pc: Rc<ProxyCore>, listener: TcpListener) {
    let mut backoff = Duration::from_millis(5);
    while !pc.shard.stopping() {
        match listener.accept().await {
            Ok(stream) => {
                backoff = Duration::from_millis(5);
                if pc.connections.get() >= pc.cfg.connections_max {
                    let refused = &pc.stats.connections_refused;
                    refused.set(refused.get() + 1);
                    drop(stream);
                    continue;
                }
                let accepted = &pc.stats.connections_accepted;
                accepted.set(accepted.get() + 1);
                pc.connections.set(pc.connections.get() + 1);
                let pc2 = pc.clone();
                glommio::spawn_local(async move {
                    let _ = stream.set_nodelay(true);
                    Conn::new(&pc2, stream).run().await;
                    pc2.connections.set(pc2.connections.get() - 1);
                })
                .detach();
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed; backing off");
                glommio::timer::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
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
    /// This connection's slot in the core's idle table: stamped waiting
    /// while a read is pending, busy otherwise (no timer per read).
    idle_slot: coral::proxy::idle::Slot,
    log: crate::accesslog::Request,
}

/// What the fast path of a hit knows of an object: its key, the stored head
/// the built hit head came from, and when its body was last seen resident.
pub(super) struct HotEntry {
    key: Id,
    /// The stored head's bytes (compared with the object's on every hit: a
    /// replaced object has other bytes, or another length and date below).
    raw_head: Box<[u8]>,
    stored: Rc<Stored>,
    head: HitHead,
    /// The second in which the body was last found resident (`mincore`):
    /// a hot object is checked at most once a second, not on every hit.
    resident_secs: u64,
}

/// Longest Host plus target a `HotEntry` is made for.
const HOT_NAME_BYTES_MAX: usize = 1024;
/// Longest stored head a `HotEntry` is made for (it keeps the bytes, the
/// decoded head and the built client head: a few KiB per entry at most).
const HOT_HEAD_BYTES_MAX: usize = 4096;

/// Whether a stored response's hits may take the fast path: a 200 that
/// does not vary (a varying one needs the request's fields compared), with
/// a head short enough to keep.
fn hot_eligible(st: &Stored, raw_head: &[u8]) -> bool {
    st.head.status == 200
        && !st.head.headers.contains("vary")
        && raw_head.len() <= HOT_HEAD_BYTES_MAX
}

impl HotEntry {
    /// A fresh complete hit on this entry's object as of `now`: the object,
    /// its body length, the framing of the body, and whether its residency
    /// must be checked; its client head is left in `out`. `None` when the
    /// object is gone, stale, being written or no longer eligible.
    fn hit(
        &mut self,
        pc: &ProxyCore,
        now: u64,
        keep_alive: bool,
        out: &mut Vec<u8>,
    ) -> Option<(ObjectRef, u64, Framing, bool)> {
        let obj = pc.cache.lookup(&self.key)?;
        let ObjectState::Complete { len } = obj.state() else {
            return None;
        };
        let meta = obj.meta();
        if now >= meta.fresh_until_secs {
            return None;
        }
        if *self.raw_head != *obj.head() {
            let st = pc.stored_head(&self.key, &obj)?;
            if !hot_eligible(&st, obj.head()) {
                return None;
            }
            self.raw_head = obj.head().into();
            self.stored = st;
            self.head.invalidate();
        }
        let inputs = HitInputs {
            now_secs: now,
            stored_secs: meta.stored_secs,
            fresh_until_secs: meta.fresh_until_secs,
            initial_age_secs: self.stored.initial_age_secs,
            body_len: len,
            keep_alive,
        };
        let (bytes, framing) = self.head.head(&self.stored.head, &pc.node_name, inputs);
        out.clear();
        out.extend_from_slice(bytes);
        Some((obj, len, framing, self.resident_secs != now))
    }
}

/// What the fast path did with the request at the head of the buffer.
enum Hot {
    /// Answered it.
    Served(Next),
    /// A plain request with no valid entry: the full path answers it.
    Cold,
    /// Not a plain request: the full path answers it.
    NotPlain,
}

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
    if cs.hit {
        return CacheResult::Local;
    }
    match cs.detail {
        Some("stale-on-error") => CacheResult::Stale,
        Some("peer-l2") => CacheResult::Peer(2),
        Some("peer-l1") => CacheResult::Peer(1),
        Some("peer-l0") => CacheResult::Peer(0),
        _ => CacheResult::Origin,
    }
}

/// A connection's input: one buffer, allocated (and zeroed) once, read into
/// at `end` and parsed from `start`.
struct InBuf {
    data: Box<[u8]>,
    start: usize,
    end: usize,
    /// The last `recv` took less than it had room for: the socket was
    /// empty, so the next read waits for an edge first (no `recv` that
    /// would find nothing).
    drained: bool,
}

impl InBuf {
    fn new(size: usize) -> InBuf {
        InBuf {
            data: vec![0; size].into_boxed_slice(),
            start: 0,
            end: 0,
            drained: false,
        }
    }

    fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more; false on EOF, error, idle timeout, or a full buffer.
    /// With `ready` (the core's readiness set watches the socket) by a
    /// plain `recv`, waiting for the socket's next edge only when it finds
    /// nothing (`ready.rs`); else through glommio's stream.
    async fn fill(&mut self, stream: &mut TcpStream, ready: Option<&Readiness>) -> bool {
        if self.end == self.data.len() {
            if self.start == 0 {
                return false;
            }
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let Some(ready) = ready else {
            return match stream.read(&mut self.data[self.end..]).await {
                Ok(n) if n > 0 => {
                    self.end += n;
                    true
                }
                _ => false,
            };
        };
        let fd = stream.as_raw_fd();
        if self.drained {
            ready.readable(fd).await;
            self.drained = false;
        }
        loop {
            let room = &mut self.data[self.end..];
            // SAFETY: `room` is live and writable for its length; `fd` is
            // the open socket `stream` owns.
            let n =
                unsafe { libc::recv(fd, room.as_mut_ptr().cast(), room.len(), libc::MSG_DONTWAIT) };
            if n > 0 {
                self.drained = (n as usize) < room.len();
                self.end += n as usize;
                return true;
            }
            if n == 0 {
                return false;
            }
            match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::WouldBlock => ready.readable(fd).await,
                std::io::ErrorKind::Interrupted => {}
                _ => return false,
            }
        }
    }
}

/// Whether the connection goes on after an answer.
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
            watched,
            pc,
            inb: InBuf::new(pc.limits.head_bytes_max + READ_BYTES),
            out: Vec::with_capacity(1024),
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
    fn end(&mut self, started: Instant) {
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
            if !self.inb.filled().is_empty() {
                match self.hot_hit().await {
                    Hot::Served(Next::KeepAlive) => continue,
                    Hot::Served(Next::Close) => break,
                    Hot::Cold | Hot::NotPlain => {}
                }
            }
            let parsed = if self.inb.filled().is_empty() {
                Ok(None)
            } else {
                http::parse_request_head(self.inb.filled(), &self.pc.limits)
            };
            match parsed {
                Ok(Some((req, len))) => {
                    self.inb.consume(len);
                    let started = Instant::now();
                    self.begin(Some(&req));
                    let next = self.handle(req).await;
                    self.end(started);
                    self.cold = false;
                    match next {
                        Next::KeepAlive => continue,
                        Next::Close => break,
                    }
                }
                Ok(None) => {
                    if self.inb.filled().len() >= self.pc.limits.head_bytes_max {
                        let started = Instant::now();
                        self.begin(None);
                        self.bad(HttpError {
                            status: 431,
                            reason: "request head too large",
                        })
                        .await;
                        self.end(started);
                        break;
                    }
                    if !self.read_more().await {
                        break;
                    }
                }
                Err(e) => {
                    let started = Instant::now();
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

    /// The fast path of a fresh hit (issue #11) for a plain request whose
    /// Host and target bytes this core has answered a hit for: no owned
    /// request, no URL canonicalisation or SHA-1, the client head reused
    /// (rebuilt once a second), the body's residency checked once a second.
    /// Every hit still looks the object up in the cache (it keeps the
    /// segment alive while the body is sent) and compares its stored head.
    async fn hot_hit(&mut self) -> Hot {
        let pc = self.pc;
        // The access log needs the request's fields: the full path logs.
        if crate::accesslog::enabled() {
            return Hot::NotPlain;
        }
        let Some(plain) = hot::parse_plain(self.inb.filled(), &pc.limits) else {
            return Hot::NotPlain;
        };
        let started = Instant::now();
        let now = unix_now();
        let found = pc
            .hot
            .borrow_mut()
            .get_mut(plain.host, plain.target)
            .and_then(|e| Some((e.key, e.hit(pc, now, plain.keep_alive, &mut self.out)?)));
        let name_to = |name: &mut Vec<u8>| {
            name.clear();
            name.extend_from_slice(plain.host);
            name.extend_from_slice(plain.target);
            plain.host.len()
        };
        let Some((key, (obj, len, framing, check_resident))) = found else {
            self.cold_host_len = name_to(&mut self.cold_name);
            self.cold = true;
            return Hot::Cold;
        };
        if check_resident {
            self.cold_host_len = name_to(&mut self.cold_name);
        }
        let (head_only, ka) = (plain.head_only, plain.keep_alive);
        crate::status::served_named(obj.key_prefix(), plain.host, plain.target, len, true);
        self.inb.consume(plain.len);
        pc.stats.hits.set(pc.stats.hits.get() + 1);
        let next = if ka { Next::KeepAlive } else { Next::Close };
        let out = std::mem::take(&mut self.out);
        let sent = if head_only || framing == Framing::Empty {
            send_all(&mut self.stream, &[&out]).await
        } else {
            if check_resident {
                obj.ensure_resident(0, len).await;
                let (host, target) = self.cold_name.split_at(self.cold_host_len);
                if let Some(e) = pc.hot.borrow_mut().get_mut(host, target) {
                    if e.key == key {
                        e.resident_secs = now;
                    }
                }
            }
            send_complete(&mut self.stream, self.nonblocking, &out, &obj, 0, len).await
        };
        self.out = out;
        self.resp = Resp {
            method: if head_only { "HEAD" } else { "GET" },
            status: 200,
            body_bytes: if head_only || sent.is_err() { 0 } else { len },
            cache: CacheResult::Local,
        };
        self.end(started);
        Hot::Served(if sent.is_ok() { next } else { Next::Close })
    }

    /// After a fresh hit on the full path for a plain request: the next
    /// plain request with the same Host and target bytes takes the fast path.
    fn learn_hot(&mut self, key: Id, obj: &ObjectRef, st: &Rc<Stored>) {
        if !self.cold || !hot_eligible(st, obj.head()) || self.cold_name.len() > HOT_NAME_BYTES_MAX
        {
            return;
        }
        self.cold = false;
        let (host, target) = self.cold_name.split_at(self.cold_host_len);
        let entry = HotEntry {
            key,
            raw_head: obj.head().into(),
            stored: st.clone(),
            head: HitHead::default(),
            resident_secs: 0,
        };
        self.pc.hot.borrow_mut().insert(host, target, entry);
    }

    /// Reads more bytes; false on EOF, error or idle timeout (the idle
    /// sweep shuts the socket down, which ends the read).
    async fn read_more(&mut self) -> bool {
        self.pc.idle.borrow_mut().waiting(self.idle_slot);
        let ready = self.pc.ready.as_deref().filter(|_| self.watched);
        let more = self.inb.fill(&mut self.stream, ready).await;
        self.pc.idle.borrow_mut().busy(self.idle_slot);
        more
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
        let _ = self.stream.write_all(head.as_bytes()).await;
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
                    let take = left.min(self.inb.filled().len());
                    self.inb.consume(take);
                    left -= take;
                    if left == 0 {
                        return Ok(());
                    }
                    if !self.read_more().await {
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
                    if !self.read_more().await {
                        return Err(bad_request("request body cut short"));
                    }
                }
            }
        }
    }

    async fn handle(&mut self, req: RequestHead) -> Next {
        let pc = self.pc;
        if !matches!(req.method, Method::Get | Method::Head) {
            // The body is not read: the connection closes.
            self.error(405, "only GET and HEAD", false, Some("GET, HEAD"))
                .await;
            return Next::Close;
        }
        if let Err(e) = self.drain_body(req.framing).await {
            self.bad(e).await;
            return Next::Close;
        }
        let ka = req.keep_alive;
        let next = if ka { Next::KeepAlive } else { Next::Close };
        let no_forward = policy::no_forward(&req);
        // A peer names the object by its canonical URL, in absolute form
        // (`policy::upstream_request`); everyone else by a Coralized host.
        let peer_url = if no_forward && http::split_absolute(&req.target).is_some() {
            match names::parse_http_url(&req.target) {
                Ok(ou) => Some(ou),
                Err(e) => {
                    self.error(400, &format!("bad URL: {e}"), false, None).await;
                    return Next::Close;
                }
            }
        } else {
            None
        };
        let (origin, url) = match peer_url {
            Some((origin, path)) => match names::canonical_url(&origin, &path) {
                Ok(u) => (origin, u),
                Err(e) => {
                    self.error(400, &format!("bad URL: {e}"), false, None).await;
                    return Next::Close;
                }
            },
            None => {
                let Some(host) = req.host() else {
                    self.bad(bad_request("no Host")).await;
                    return Next::Close;
                };
                let origin = match names::origin_of_host(host, &pc.zones) {
                    Ok(o) => o,
                    Err(e) => {
                        // Not a Coralized name (absolute-form for another host
                        // included): coral is not an open proxy.
                        self.error(403, &format!("not a Coralized name: {e}"), ka, None)
                            .await;
                        return next;
                    }
                };
                if !no_forward && policy::loop_detected(&req, &pc.zones) {
                    self.error(403, "request loop (CDN-Loop names this CDN)", ka, None)
                        .await;
                    return next;
                }
                let Some(path) = req.path() else {
                    self.bad(bad_request("bad request target")).await;
                    return Next::Close;
                };
                match names::canonical_url(&origin, path) {
                    Ok(u) => (origin, u),
                    Err(e) => {
                        self.error(400, &format!("bad URL: {e}"), false, None).await;
                        return Next::Close;
                    }
                }
            }
        };
        let key = names::cache_key(&url);
        if !no_forward && !policy::request_is_cacheable(&req) {
            return self.pass_through(&req, &origin, Forward::Bypass).await;
        }
        let mut get = req.clone();
        get.method = Method::Get;
        let mut job = Job {
            key,
            url_key: key,
            origin: origin.clone(),
            request: get,
            no_forward,
        };
        let (url_key, mut key) = (key, key);
        let mut asked = false;
        let mut peer = None;
        loop {
            let now = unix_now();
            let obj = pc.cache.lookup(&key);
            let found = obj.and_then(|o| pc.stored_head(&key, &o).map(|s| (o, s)));
            if let Some((obj, st)) = found {
                if !policy::vary_matches(&st.vary_req, &st.head, &req) {
                    // Another variant: its own entry (`coral::proxy::vary`).
                    if key == url_key {
                        if let Some(vk) = pc.variant_for(&key, &st, &req, no_forward) {
                            (key, job.key) = (vk, vk);
                            continue;
                        }
                    }
                    if no_forward {
                        self.error(504, "no matching copy here", ka, None).await;
                        return next;
                    }
                    return self.pass_through(&req, &origin, Forward::VaryMiss).await;
                }
                let meta = obj.meta();
                let fresh = now < meta.fresh_until_secs;
                match obj.state() {
                    ObjectState::Writing { .. } => {
                        let mut cs = if asked {
                            CacheStatus::forward(Forward::UriMiss, true)
                        } else {
                            CacheStatus::hit()
                        };
                        cs.collapsed = !asked;
                        cs.detail = peer.map(peer_detail);
                        return self.serve(&req, &obj, &st, cs).await;
                    }
                    ObjectState::Complete { .. } if fresh || asked => {
                        let mut cs = if asked {
                            CacheStatus::forward(
                                if fresh {
                                    Forward::UriMiss
                                } else {
                                    Forward::Stale
                                },
                                fresh,
                            )
                        } else {
                            pc.stats.hits.set(pc.stats.hits.get() + 1);
                            self.learn_hot(key, &obj, &st);
                            CacheStatus::hit()
                        };
                        if asked && !fresh {
                            cs.detail = Some("stale-on-error");
                        } else if let Some(level) = peer {
                            cs.detail = Some(peer_detail(level));
                        }
                        return self.serve(&req, &obj, &st, cs).await;
                    }
                    ObjectState::Complete { .. } if no_forward => {
                        self.error(504, "stale here", ka, None).await;
                        return next;
                    }
                    _ => {}
                }
            } else if asked {
                self.error(502, "the object could not be fetched", ka, None)
                    .await;
                return next;
            }
            if asked {
                self.error(502, "the object could not be fetched", ka, None)
                    .await;
                return next;
            }
            // Hit-for-pass: its last answer could not be stored.
            if !no_forward && pc.passes.borrow_mut().pass(&key, now) {
                return self.pass_through(&req, &origin, Forward::UriMiss).await;
            }
            asked = true;
            match pc.miss(job.clone()).await {
                MissAnswer::Ready { peer: p } => peer = p,
                MissAnswer::Stale => {}
                MissAnswer::Uncacheable => {
                    pc.passes.borrow_mut().mark(key, unix_now());
                    return self.pass_through(&req, &origin, Forward::UriMiss).await;
                }
                MissAnswer::Pass(answer) => {
                    // The owning core's fetch for this request: relayed,
                    // not fetched again.
                    pc.passes.borrow_mut().mark(key, unix_now());
                    let resp = answer.resume();
                    return self.relay(&req, &origin, Forward::UriMiss, resp).await;
                }
                MissAnswer::Error(status) => {
                    let why = match status {
                        403 => "the origin's address is not allowed",
                        504 => "no answer in time",
                        _ => "the origin failed",
                    };
                    self.error(status, why, ka, None).await;
                    return next;
                }
            }
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
        let fresh = Freshness {
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
        crate::status::served(
            obj.key_prefix(),
            req,
            body_len.unwrap_or(0),
            cache_status.hit,
        );
        let not_modified = st.head.status == 200
            && policy::evaluate_conditional(req, &st.head) == Conditional::NotModified;
        let range = match (body_len, obj.state(), req.method == Method::Get) {
            (Some(len), ObjectState::Complete { .. }, true) if st.head.status == 200 => {
                policy::range_for(req, &st.head, len)
            }
            _ => RangeAnswer::Full,
        };
        let info = ClientHeadInfo {
            node_name: &pc.node_name,
            age_secs: policy::age_secs(&fresh, now),
            cache_status,
            range,
            body_len,
            keep_alive: req.keep_alive,
            not_modified,
            client_minor_version: req.minor_version,
        };
        self.out.clear();
        let framing = policy::client_head(&st.head, &info, &mut self.out);
        self.resp.status = head_status(&self.out);
        self.resp.cache = cache_result(&cache_status);
        let ka = req.keep_alive && !matches!(framing, Framing::UntilClose);
        let next = if ka { Next::KeepAlive } else { Next::Close };
        if req.method == Method::Head || framing == Framing::Empty {
            let out = std::mem::take(&mut self.out);
            let ok = send_all(&mut self.stream, &[&out]).await.is_ok();
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
                let r =
                    send_complete(&mut self.stream, self.nonblocking, &out, obj, start, end).await;
                self.out = out;
                if r.is_ok() {
                    self.resp.body_bytes = end - start;
                }
                return if r.is_ok() { next } else { Next::Close };
            }
        }
        let mut head = Some(std::mem::take(&mut self.out));
        let mut pos = start;
        let mut frame = Vec::new();
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
                        ObjectState::Complete { .. } | ObjectState::Failed => return Err(()),
                        ObjectState::Writing { .. } => {
                            // Send what we have (the head) before waiting.
                            if let Some(h) = head.take() {
                                send_all(&mut self.stream, &[&h]).await.map_err(|_| ())?;
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
                    send_all(&mut self.stream, &[&frame])
                        .await
                        .map_err(|_| ())?;
                } else {
                    send_all(&mut self.stream, &[h, data])
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
                send_all(&mut self.stream, &[&tail]).await.map_err(|_| ())?;
            }
            Ok(())
        }
        .await;
        self.resp.body_bytes = pos - start;
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
        let addr = match pc.resolver.resolve(&origin.host, origin.port).await {
            Ok(a) => a,
            Err(e) => {
                pc.stats.origin_error("resolve");
                let status = match e {
                    super::resolve::ResolveError::Refused(..) => 403,
                    super::resolve::ResolveError::Timeout => 504,
                    super::resolve::ResolveError::NotFound => 502,
                };
                self.error(status, &e.to_string(), req.keep_alive, None)
                    .await;
                return if req.keep_alive {
                    Next::KeepAlive
                } else {
                    Next::Close
                };
            }
        };
        let mut up = Vec::with_capacity(1024);
        policy::upstream_request(req, origin, false, &http::Headers::new(), &mut up);
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
                self.error(502, &e.to_string(), false, None).await;
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
        let mut rewriter = rewrite::body_is_rewritable(&head)
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
        let framing = policy::client_head(&head, &info, &mut out);
        self.resp.status = head_status(&out);
        self.resp.cache = CacheResult::Pass;
        let ka = req.keep_alive && !matches!(framing, Framing::UntilClose);
        if is_head || framing == Framing::Empty {
            if send_all(&mut self.stream, &[&out]).await.is_err() {
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
                if send_all(&mut self.stream, &[&out]).await.is_err() {
                    return Next::Close;
                }
            } else if send_all(&mut self.stream, &[&out, data]).await.is_err() {
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

/// Puts `fd` in non-blocking mode (reads and writes through the ring are
/// unaffected; direct `sendfile` must not block); whether it is.
fn is_nonblocking(fd: std::os::fd::RawFd) -> bool {
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
/// from the mapping. Whatever the socket does not take at once goes through
/// the ring.
async fn send_complete(
    stream: &mut TcpStream,
    nonblocking: bool,
    head: &[u8],
    obj: &ObjectRef,
    start: u64,
    end: u64,
) -> std::io::Result<()> {
    if !nonblocking || end - start < SENDFILE_BYTES_MIN {
        return send_all(stream, &[head, obj.body(start, end)]).await;
    }
    send_all_more(stream, head).await?;
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
            continue;
        }
        let e = std::io::Error::last_os_error();
        if n == 0 || e.kind() != std::io::ErrorKind::WouldBlock {
            if n < 0 {
                return Err(e);
            }
            break;
        }
        // The socket is full: the rest from the mapping through the ring.
        break;
    }
    if pos < end {
        stream.write_all(obj.body(pos, end)).await?;
    }
    Ok(())
}

/// Sends `head` with `MSG_MORE` (the body follows at once).
async fn send_all_more(stream: &mut TcpStream, head: &[u8]) -> std::io::Result<()> {
    // SAFETY: `head` is a live slice for the duration of the call.
    let sent = unsafe {
        libc::send(
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
        stream.write_all(&head[sent..]).await?;
    }
    Ok(())
}

/// Writes `bufs` in order: first with one non-blocking `sendmsg` (head and
/// body straight from the cache's mapping, no copy), then whatever is left
/// through the ring.
async fn send_all(stream: &mut TcpStream, bufs: &[&[u8]]) -> std::io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if total == 0 {
        return Ok(());
    }
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
        libc::sendmsg(
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
        stream.write_all(&b[skip..]).await?;
        skip = 0;
    }
    Ok(())
}

/// `Cache-Status`'s detail for an object from a peer found at `level`
/// (`peer-l2`, `peer-l1`, `peer-l0`): where Fig. 4 counts it.
fn peer_detail(level: coral::dsht::node::Level) -> &'static str {
    match level {
        2 => "peer-l2",
        1 => "peer-l1",
        _ => "peer-l0",
    }
}

#[cfg(test)]
mod hot_tests {
    use coral::proxy::hot::{self, HitHead, HitInputs, HotTable};
    use coral::proxy::http::{self, Limits};

    use crate::cache::tests::allocations;

    /// The pure part of a fast hit (recognise the request, find its entry,
    /// take the built head) allocates nothing once the head is built.
    #[test]
    fn a_fast_hit_allocates_nothing() {
        let limits = Limits::default();
        let stored_bytes = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"a\"\r\n\r\n";
        let (stored, _) = http::parse_response_head(stored_bytes, true, &limits)
            .unwrap()
            .unwrap();
        let mut table: HotTable<(u64, HitHead)> =
            HotTable::new(64, coral::dsht::id::keyed_hasher(b"test", "hot objects"));
        let req =
            b"GET /a.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\nUser-Agent: wrk\r\n\r\n";
        let plain = hot::parse_plain(req, &limits).unwrap();
        table.insert(plain.host, plain.target, (7, HitHead::default()));
        let inputs = HitInputs {
            now_secs: 1_000,
            stored_secs: 990,
            fresh_until_secs: 5_000,
            initial_age_secs: 0,
            body_len: 4096,
            keep_alive: true,
        };
        let mut out = Vec::with_capacity(1024);
        let built = {
            let (_, h) = table.get_mut(plain.host, plain.target).unwrap();
            h.head(&stored, "127.0.0.1:8090", inputs).0.to_vec()
        };
        let text = String::from_utf8(built.clone()).unwrap();
        assert!(text.contains("Age: 10\r\n"), "{text}");
        assert!(
            text.contains("Cache-Status: coral; hit; ttl=4000\r\n"),
            "{text}"
        );
        assert!(text.contains("Content-Length: 4096\r\n"), "{text}");
        let before = allocations();
        for _ in 0..1_000 {
            let plain = hot::parse_plain(req, &limits).unwrap();
            let (key, h) = table.get_mut(plain.host, plain.target).unwrap();
            assert_eq!(*key, 7);
            let (bytes, _) = h.head(&stored, "127.0.0.1:8090", inputs);
            out.clear();
            out.extend_from_slice(bytes);
        }
        assert_eq!(allocations() - before, 0, "the fast path allocated");
        assert_eq!(out, built);
        // The next second's head differs only in Age and the ttl.
        let (_, h) = table.get_mut(plain.host, plain.target).unwrap();
        let next = HitInputs {
            now_secs: 1_001,
            ..inputs
        };
        let text = String::from_utf8(h.head(&stored, "127.0.0.1:8090", next).0.to_vec()).unwrap();
        assert!(
            text.contains("Age: 11\r\n") && text.contains("ttl=3999\r\n"),
            "{text}"
        );
    }
}
