//! The client side of the proxy: requests to origins and to peer proxies.
//!
//! A connection is opened to exactly the address the resolver checked,
//! with a connect timeout; the response head must arrive within the
//! first-byte timeout, and each later read within the idle timeout. Bodies
//! are read per their framing (length, chunked, until close). A connection
//! goes back to the per-core pool only after its response was read to the
//! end and both sides allow keep-alive.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use coral::proxy::fetch::Fail;
use coral::proxy::http::{self, ChunkedDecoder, Framing, HttpError, Limits, ResponseHead};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use glommio::net::TcpStream;

/// Idle origin connections kept per core.
const POOL_CONNECTIONS_MAX: usize = 64;
/// Idle origin connections kept per address.
const POOL_PER_ADDR_MAX: usize = 8;
/// How long an idle origin connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(10);
/// Bytes read from an upstream at once.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// Why a fetch from an origin or peer failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamError {
    /// Could not connect (refused, unreachable, timed out): its kind and
    /// the system's words.
    Connect(std::io::ErrorKind, String),
    /// No response head within the first-byte timeout.
    FirstByteTimeout,
    /// Silence longer than the idle timeout mid-response.
    IdleTimeout,
    /// The connection closed before the response ended.
    Truncated,
    /// The response broke HTTP's rules.
    Malformed(HttpError),
    /// Reading or writing failed.
    Io(String),
    /// A peer's signed body contradicts its signatures (issue 22 item 4,
    /// `coral::verify`): a chunk, the end, the signed length or the signed
    /// `Repr-Digest` failed. Nothing of the failing chunk was handed out.
    Forged(&'static str),
}

impl UpstreamError {
    /// The reason label of `coral_http_origin_errors_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            UpstreamError::Connect(..) => "connect",
            UpstreamError::FirstByteTimeout | UpstreamError::IdleTimeout => "timeout",
            UpstreamError::Truncated => "truncated",
            UpstreamError::Malformed(_) => "malformed",
            UpstreamError::Io(_) => "io",
            UpstreamError::Forged(_) => "forged",
        }
    }
}

impl UpstreamError {
    /// What the requests waiting for this fetch are answered, saying what
    /// failed (issue 25 item 4).
    pub fn fail(&self) -> Fail {
        match self {
            UpstreamError::Connect(std::io::ErrorKind::ConnectionRefused, _) => {
                Fail::CONNECTION_REFUSED
            }
            UpstreamError::Connect(..) => Fail::UNREACHABLE,
            UpstreamError::FirstByteTimeout | UpstreamError::IdleTimeout => Fail::TIMEOUT,
            UpstreamError::Truncated | UpstreamError::Io(_) => Fail::TRUNCATED,
            UpstreamError::Malformed(_) | UpstreamError::Forged(_) => Fail::MALFORMED,
        }
    }
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamError::Connect(_, e) => write!(f, "connect: {e}"),
            UpstreamError::FirstByteTimeout => {
                f.write_str("no response within the first-byte timeout")
            }
            UpstreamError::IdleTimeout => f.write_str("response stalled past the idle timeout"),
            UpstreamError::Truncated => f.write_str("response cut short"),
            UpstreamError::Malformed(e) => write!(f, "malformed response: {e}"),
            UpstreamError::Io(e) => write!(f, "{e}"),
            UpstreamError::Forged(why) => write!(f, "forged peer bytes: {why}"),
        }
    }
}

/// Timeouts of one fetch.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// To connect.
    pub connect: Duration,
    /// From the request to the response head.
    pub first_byte: Duration,
    /// Between reads of the body.
    pub idle: Duration,
}

/// One core's idle origin connections, by address.
#[derive(Default)]
pub struct Pool {
    idle: RefCell<HashMap<SocketAddr, Vec<(Instant, TcpStream)>>>,
}

impl Pool {
    fn take(&self, addr: SocketAddr) -> Option<TcpStream> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(&addr)?;
        while let Some((at, s)) = list.pop() {
            if at.elapsed() < POOL_IDLE {
                return Some(s);
            }
        }
        None
    }

    fn put(&self, addr: SocketAddr, s: TcpStream) {
        let mut idle = self.idle.borrow_mut();
        let total: usize = idle.values().map(Vec::len).sum();
        if total >= POOL_CONNECTIONS_MAX {
            idle.retain(|_, l| {
                l.retain(|(at, _)| at.elapsed() < POOL_IDLE);
                !l.is_empty()
            });
            if idle.values().map(Vec::len).sum::<usize>() >= POOL_CONNECTIONS_MAX {
                return;
            }
        }
        let list = idle.entry(addr).or_default();
        if list.len() < POOL_PER_ADDR_MAX {
            list.push((Instant::now(), s));
        }
    }
}

/// A response being read from an origin or peer.
pub struct Response {
    /// The response head.
    pub head: ResponseHead,
    stream: Option<TcpStream>,
    addr: SocketAddr,
    /// Bytes read past the head not yet handed out.
    buf: Vec<u8>,
    body: Body,
    idle: Duration,
    /// Body bytes handed out so far.
    pub received: u64,
    reusable: bool,
    /// The interim (1xx) responses that came before the head, as an
    /// HTTP/1.1 client gets them (hop-by-hop fields removed): forwarded,
    /// never stored (issue 26 item 9). At most
    /// `RELAY.interim_responses_max` of them, `RELAY.interim_bytes_max`
    /// bytes in all.
    pub interim: Vec<u8>,
    /// A signed body's verified chunk read ahead (`prime`), handed out by
    /// the next `next`.
    primed: Vec<u8>,
    /// The signature of the chunk `next` handed out last (signed bodies).
    chunk_sig: Option<[u8; coral::identity::SIGNATURE_BYTES]>,
    /// A signed body's verified end.
    signed_end: Option<coral::verify::EndRecord>,
}

enum Body {
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
    /// A peer's signed body (`Response::expect_signed`): each chunk is
    /// handed out only after its signature held.
    Signed(Box<coral::verify::SignedBody>),
    UntilClose,
    Done,
}

/// Sends `request` (a complete head, no body) to `addr` and reads the
/// response head. `pooled`: try an idle connection first (origins only).
pub async fn send(
    pool: &Pool,
    addr: SocketAddr,
    request: &[u8],
    request_was_head: bool,
    timeouts: Timeouts,
    limits: &Limits,
) -> Result<Response, UpstreamError> {
    // A pooled connection may have been closed by the origin meanwhile: one
    // retry on a fresh connection if nothing came back on it.
    if let Some(s) = pool.take(addr) {
        match exchange(s, addr, request, request_was_head, timeouts, limits).await {
            Ok(r) => return Ok(r),
            Err(UpstreamError::Truncated | UpstreamError::Io(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let s = TcpStream::connect_timeout(addr, timeouts.connect)
        .await
        .map_err(|e| {
            let e = std::io::Error::from(e);
            UpstreamError::Connect(connect_error_kind(&e), e.to_string())
        })?;
    let _ = s.set_nodelay(true);
    exchange(s, addr, request, request_was_head, timeouts, limits).await
}

async fn exchange(
    mut s: TcpStream,
    addr: SocketAddr,
    request: &[u8],
    request_was_head: bool,
    timeouts: Timeouts,
    limits: &Limits,
) -> Result<Response, UpstreamError> {
    s.write_all(request)
        .await
        .map_err(|e| UpstreamError::Io(e.to_string()))?;
    let deadline = Instant::now() + timeouts.first_byte;
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut interim = Vec::new();
    let mut interim_count = 0;
    loop {
        if !buf.is_empty() {
            match http::parse_response_head(&buf, request_was_head, limits) {
                Ok(None) => {}
                Err(e) => return Err(UpstreamError::Malformed(e)),
                Ok(Some((head, len))) => {
                    buf.drain(..len);
                    // 1xx answers (100 Continue, 103 Early Hints) precede the real one.
                    if head.status == 101 {
                        // No upgrade was asked for.
                        return Err(UpstreamError::Malformed(http::HttpError {
                            status: 502,
                            reason: "101 Switching Protocols without an Upgrade",
                        }));
                    }
                    if (100..200).contains(&head.status) {
                        if head.status != 100 {
                            interim_count += 1;
                            keep_interim(&head, interim_count, &mut interim);
                        }
                        continue;
                    }
                    let body = match head.framing {
                        Framing::Empty | Framing::Length(0) => Body::Done,
                        Framing::Length(n) => Body::Length(n),
                        Framing::Chunked => Body::Chunked(Box::new(ChunkedDecoder::new(limits))),
                        Framing::UntilClose => Body::UntilClose,
                    };
                    let reusable = head.keep_alive && !matches!(head.framing, Framing::UntilClose);
                    let _ = s.set_read_timeout(Some(timeouts.idle));
                    return Ok(Response {
                        head,
                        stream: Some(s),
                        addr,
                        buf,
                        body,
                        idle: timeouts.idle,
                        received: 0,
                        reusable,
                        interim,
                        primed: Vec::new(),
                        chunk_sig: None,
                        signed_end: None,
                    });
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(UpstreamError::FirstByteTimeout);
        }
        let _ = s.set_read_timeout(Some(left));
        let n = read_some(&mut s, &mut buf)
            .await
            .map_err(|e| upstream_error(e, UpstreamError::FirstByteTimeout))?;
        if n == 0 {
            return Err(UpstreamError::Truncated);
        }
    }
}

/// Appends the `count`th interim response `head` to `out` as a client gets
/// it, within `RELAY.interim_responses_max` and `RELAY.interim_bytes_max`
/// (those beyond are read and dropped).
fn keep_interim(head: &http::ResponseHead, count: usize, out: &mut Vec<u8>) {
    let limits = crate::limits::RELAY;
    if count > limits.interim_responses_max {
        return;
    }
    let mut one = Vec::with_capacity(256);
    one.extend_from_slice(b"HTTP/1.1 ");
    http::write_decimal(&mut one, u64::from(head.status));
    one.push(b' ');
    one.extend_from_slice(head.reason.as_bytes());
    one.extend_from_slice(b"\r\n");
    for (n, v) in head.headers.iter() {
        if coral::proxy::policy::is_hop_by_hop(n) || n == "content-length" {
            continue;
        }
        one.extend_from_slice(n.as_bytes());
        one.extend_from_slice(b": ");
        one.extend_from_slice(v);
        one.extend_from_slice(b"\r\n");
    }
    one.extend_from_slice(b"\r\n");
    if out.len() + one.len() <= limits.interim_bytes_max {
        out.extend_from_slice(&one);
    }
}

/// The kind of a connect error: glommio reports some as `Other` with the
/// system's error number inside.
fn connect_error_kind(e: &std::io::Error) -> std::io::ErrorKind {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => std::io::ErrorKind::ConnectionRefused,
        _ if e.to_string().contains("refused") => std::io::ErrorKind::ConnectionRefused,
        _ => e.kind(),
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )
}

/// A read's error as the upstream error it is: `timeout` when the read
/// timed out, an I/O error otherwise.
fn upstream_error(e: std::io::Error, timeout: UpstreamError) -> UpstreamError {
    if is_timeout(&e) {
        timeout
    } else {
        UpstreamError::Io(e.to_string())
    }
}

async fn read_some(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let at = buf.len();
    buf.resize(at + READ_CHUNK_BYTES, 0);
    let r = s.read(&mut buf[at..]).await;
    buf.truncate(at + *r.as_ref().unwrap_or(&0));
    r
}

impl Response {
    /// Appends the next piece of the body to `out` (decoded from chunked).
    /// `Ok(false)`: the body is complete.
    pub async fn next(&mut self, out: &mut Vec<u8>) -> Result<bool, UpstreamError> {
        if !self.primed.is_empty() {
            out.append(&mut self.primed);
            return Ok(true);
        }
        loop {
            match &mut self.body {
                Body::Done => return Ok(false),
                Body::Signed(dec) => {
                    if !self.buf.is_empty() {
                        let before = out.len();
                        let (used, step) = dec.feed(&self.buf, out).map_err(|e| {
                            if e.forged {
                                UpstreamError::Forged(e.reason)
                            } else {
                                UpstreamError::Malformed(HttpError {
                                    status: 502,
                                    reason: e.reason,
                                })
                            }
                        })?;
                        self.buf.drain(..used);
                        self.received += (out.len() - before) as u64;
                        match step {
                            coral::verify::Step::Chunk(sig) => {
                                self.chunk_sig = Some(sig);
                                return Ok(true);
                            }
                            coral::verify::Step::Done(end) => {
                                self.signed_end = Some(end);
                                self.body = Body::Done;
                                return Ok(false);
                            }
                            coral::verify::Step::More if used > 0 => continue,
                            coral::verify::Step::More => {}
                        }
                    }
                }
                Body::Length(left) => {
                    if !self.buf.is_empty() {
                        let take = (*left).min(self.buf.len() as u64) as usize;
                        out.extend_from_slice(&self.buf[..take]);
                        self.buf.drain(..take);
                        *left -= take as u64;
                        self.received += take as u64;
                        if *left == 0 {
                            self.body = Body::Done;
                        }
                        return Ok(true);
                    }
                }
                Body::Chunked(dec) => {
                    if !self.buf.is_empty() {
                        let before = out.len();
                        let (used, done) =
                            dec.feed(&self.buf, out).map_err(UpstreamError::Malformed)?;
                        self.buf.drain(..used);
                        self.received += (out.len() - before) as u64;
                        if done {
                            self.body = Body::Done;
                            return Ok(out.len() > before);
                        }
                        if out.len() > before {
                            return Ok(true);
                        }
                        if used > 0 {
                            continue;
                        }
                    }
                }
                Body::UntilClose => {
                    if !self.buf.is_empty() {
                        out.extend_from_slice(&self.buf);
                        self.received += self.buf.len() as u64;
                        self.buf.clear();
                        return Ok(true);
                    }
                }
            }
            let Some(s) = self.stream.as_mut() else {
                return Err(UpstreamError::Truncated);
            };
            let n = read_some(s, &mut self.buf)
                .await
                .map_err(|e| upstream_error(e, UpstreamError::IdleTimeout))?;
            if n == 0 {
                self.stream = None;
                if matches!(self.body, Body::UntilClose) {
                    self.body = Body::Done;
                    return Ok(false);
                }
                return Err(UpstreamError::Truncated);
            }
        }
    }

    /// Moves this response, its head read, to another core: a glommio
    /// stream belongs to the executor that made it, so the connection
    /// travels as its bare descriptor ([`Handover::resume`] there).
    pub fn hand_over(mut self) -> Handover {
        Handover {
            // SAFETY: the descriptor glommio let go of, owned by no one else.
            fd: self
                .stream
                .take()
                .map(|s| unsafe { OwnedFd::from_raw_fd(s.into_raw_fd()) }),
            head: self.head,
            addr: self.addr,
            buf: self.buf,
            body: self.body,
            idle: self.idle,
            received: self.received,
            reusable: self.reusable,
            interim: self.interim,
            primed: self.primed,
        }
    }

    /// Reads this peer's answer as a body signed under `head` (verified by
    /// the caller): each chunk `next` hands out has passed its signature.
    /// A body that is not chunked is not signed: `Forged`.
    pub fn expect_signed(&mut self, head: &coral::verify::SignedHead) -> Result<(), UpstreamError> {
        match self.body {
            Body::Chunked(_) => {
                self.body = Body::Signed(Box::new(coral::verify::SignedBody::new(head)));
                Ok(())
            }
            _ => Err(UpstreamError::Forged("a peer's body is not signed")),
        }
    }

    /// Reads a signed body's first chunk ahead (verified; handed out by the
    /// next `next`), so that a peer whose first chunk fails is dropped
    /// before any client is answered from it.
    pub async fn prime(&mut self) -> Result<(), UpstreamError> {
        let mut first = Vec::new();
        self.next(&mut first).await?;
        // A body of one short chunk: its end too (with the signed length
        // and `Repr-Digest` checks), before anyone is answered from it.
        if matches!(&self.body, Body::Signed(dec) if dec.at_last_chunk()) {
            let sig = self.chunk_sig.take();
            let mut rest = Vec::new();
            while self.next(&mut rest).await? {}
            if !rest.is_empty() {
                return Err(UpstreamError::Forged("data after the last chunk"));
            }
            self.chunk_sig = sig;
        }
        self.primed = first;
        Ok(())
    }

    /// The signature of the signed chunk `next` handed out last, taken.
    pub fn take_chunk_sig(&mut self) -> Option<[u8; coral::identity::SIGNATURE_BYTES]> {
        self.chunk_sig.take()
    }

    /// A signed body's verified end, once `next` reached it.
    pub fn signed_end(&self) -> Option<coral::verify::EndRecord> {
        self.signed_end
    }

    /// A signed body's end as its signer signed it, once its signature
    /// held — also when the body then contradicted the signed length or
    /// `Repr-Digest` (evidence against the signer, issue 22 item 5 c).
    pub fn claimed_end(&self) -> Option<coral::verify::EndRecord> {
        match &self.body {
            Body::Signed(dec) => dec.claimed_end(),
            _ => self.signed_end,
        }
    }

    /// Whether the whole body has been read.
    pub fn complete(&self) -> bool {
        matches!(self.body, Body::Done)
    }

    /// Returns the connection to `pool` if the response was read to its end
    /// and both sides allow keep-alive; otherwise it closes.
    pub fn release(mut self, pool: &Pool) {
        if self.reusable && self.complete() && self.buf.is_empty() {
            if let Some(s) = self.stream.take() {
                let _ = s.set_read_timeout(Some(self.idle));
                pool.put(self.addr, s);
            }
        }
    }
}

/// A [`Response`] on its way to another core (`Send`): its head, what was
/// read past it, and the connection's descriptor (closed if it never
/// arrives: `OwnedFd`).
pub struct Handover {
    /// The response head.
    pub head: ResponseHead,
    fd: Option<OwnedFd>,
    addr: SocketAddr,
    buf: Vec<u8>,
    body: Body,
    idle: Duration,
    received: u64,
    reusable: bool,
    interim: Vec<u8>,
    primed: Vec<u8>,
}

impl Handover {
    /// The response again, on the core that calls this (it reads on).
    pub fn resume(self) -> Response {
        let stream = self.fd.map(|fd| {
            // SAFETY: an open socket, owned by this handover alone.
            let s = unsafe { TcpStream::from_raw_fd(fd.into_raw_fd()) };
            let _ = s.set_read_timeout(Some(self.idle));
            s
        });
        Response {
            head: self.head,
            stream,
            addr: self.addr,
            buf: self.buf,
            body: self.body,
            idle: self.idle,
            received: self.received,
            reusable: self.reusable,
            interim: self.interim,
            primed: self.primed,
            chunk_sig: None,
            signed_end: None,
        }
    }
}

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Handover {{ status: {}, addr: {} }}",
            self.head.status, self.addr
        )
    }
}
