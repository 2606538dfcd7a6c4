//! dnssrv's runtime (NSDI 2004 §3.1): UDP and TCP on every core. The
//! answers come from the core crate's sans-IO `coral::dns::Dnssrv`; this
//! file only moves datagrams and TCP frames, and carries out what the
//! answer function asks for off the hot path (client RTT probes, proxy
//! verification pings).
//!
//! - **Sockets.** Each core binds its own UDP socket and TCP listener on
//!   the `dns` address with SO_REUSEPORT; the kernel spreads queries and
//!   connections over the cores.
//! - **Snapshot.** Each core refreshes its [`View`] from its own `Node`
//!   every `VIEW_REFRESH`: answering reads the snapshot, never the routing
//!   tables.
//! - **TCP** (RFC 7766): two-octet length framing, any number of pipelined
//!   queries per connection answered in order, at most
//!   `tcp_connections_max` connections per core; connections come through
//!   the node's accept loop (`accept`). Every connection is bounded in time
//!   the way the proxy's are (issue #23; `coral::proxy::idle`, swept once a
//!   second, no timer per read): closed after `tcp_idle_ms` without a
//!   query, `tcp_query_timeout_ms` after a query's first byte if the whole
//!   query is not in (one deadline, not per read: §6.2.3), and after
//!   `tcp_send_timeout_ms` of a write making no progress. Pipelining is
//!   bounded: the next query is read only once the last answer is written,
//!   and the socket's send buffer is `limits::DNS.tcp_send_buffer_bytes`,
//!   so a client that sends queries and never reads pins that much and then
//!   its connection's send stalls and is closed. At the cap the oldest idle
//!   connection (else the slowest) is evicted for a new one (§6.2.3: "a
//!   server may close idle connections ... under resource pressure").
//! - **Probes.** A thread per core probes a client's path with the
//!   traceroute-like probe of `hints.rs` (all TTLs at once, aggressive
//!   time-outs): the destination's port unreachable times the round trip,
//!   the routers' time-exceeded answers name the last hops. `coral::dns`
//!   bounds how many are asked for (per destination, per /24 and per
//!   second), so coral is no probe reflector.
//! - **Hints** (§3.1, §4.4). For the hint keys `coral::dns` derives from a
//!   probe (the last hops' addresses and /24s, the client's /24), the core
//!   gets each key on the core that owns it; the nodes found are pinged,
//!   and answers put them first once verified alive.
//! - **Held queries.** A UDP or TCP query that would get no live proxy
//!   while candidates are pinged waits (`[dnssrv] hold_ms`, at most
//!   `held_max` per core) in a queue the hold task retries every
//!   `HOLD_POLL`, on a fresh snapshot; the executor never blocks.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket as StdUdpSocket};
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use coral::dns::{Dnssrv, FollowUp, Hold, Outcome, Transport, View};
use coral::dsht::wire::Services;
use coral::proxy::idle::{ConnTable, Deadlines, Phase, Slot};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream, UdpSocket};
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::NodeConfig;
use crate::runtime::batch::socket_addr;
use crate::runtime::Shard;

/// How often a core re-reads its snapshot from its node.
const VIEW_REFRESH: Duration = Duration::from_millis(200);
/// Largest query datagram read.
const UDP_QUERY_BYTES_MAX: usize = crate::limits::DNS.udp_query_bytes_max;
/// Datagrams read in one go once the socket is readable (then the loop
/// waits through the ring again, and the executor's other tasks get their
/// turn).
const RECV_BATCH_MAX: usize = crate::limits::DNS.recv_batch_max;
/// How long an RTT probe waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// The closed port RTT probes go to (traceroute's).
const PROBE_PORT: u16 = 33434;
/// A TCP connection's send buffer: answers written and not yet read by a
/// pipelining client, at most (the kernel doubles it for its overhead).
const TCP_SEND_BUFFER_BYTES: usize = crate::limits::DNS.tcp_send_buffer_bytes;
/// How often the TCP deadline sweep runs: the tick of the connection table.
const TCP_SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Proxies of one level pinged per verification follow-up.
const VERIFY_PROXY_PINGS_PER_LEVEL_MAX: usize = crate::limits::DNS.verify_proxy_pings_per_level_max;
/// Hops a client's path is probed out to (all at once).
const PROBE_HOPS_MAX: u8 = crate::limits::DNS.probe_hops_max;
/// Hint lookups (each a few DSHT gets) running at once per core; beyond
/// it a client's lookup is dropped (it finds no near node this time).
const HINT_LOOKUPS_INFLIGHT_MAX: usize = crate::limits::DNS.hint_lookups_inflight_max;
/// How often held queries are asked again (on a fresh snapshot).
const HOLD_POLL: Duration = Duration::from_millis(10);
/// Probes queued per core before new ones are dropped.
const PROBES_QUEUED_MAX: usize = crate::limits::DNS.probes_queued_max;
/// DSHT addresses pinged for one liveness check of a proxy's IP address.
const LIVE_CHECK_PINGS_MAX: usize = crate::limits::DNS.live_check_pings_max;

/// One core's sockets.
pub struct DnsFds {
    udp: RawFd,
    tcp: RawFd,
}

/// Binds `cores` UDP sockets and TCP listeners on `addr`, each in one
/// SO_REUSEPORT group, before the executors start (so a bad address fails
/// the start with a clear error).
pub fn bind_group(addr: SocketAddr, cores: usize) -> io::Result<Vec<DnsFds>> {
    let mut out = Vec::with_capacity(cores);
    for _ in 0..cores {
        let u = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        u.set_reuse_port(true)?;
        u.set_nonblocking(true)?;
        let _ = u.set_recv_buffer_size(4 << 20);
        u.bind(&addr.into())?;
        let t = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        t.set_reuse_port(true)?;
        t.set_reuse_address(true)?;
        t.set_nonblocking(true)?;
        t.bind(&addr.into())?;
        t.listen(1024)?;
        out.push(DnsFds {
            udp: u.into_raw_fd(),
            tcp: t.into_raw_fd(),
        });
    }
    Ok(out)
}

/// The services dnssrv adds to what the node advertises: DNS, and
/// non-recursive when `[dnssrv] non_recursive` says so (the proxy, which
/// runs on every node, adds HTTP).
pub fn services(cfg: &NodeConfig) -> Services {
    // The HTTP bit is the proxy's to set (it runs on every node).
    let mut s = Services::DNS;
    if cfg.dnssrv.non_recursive {
        s = s.with(Services::NON_RECURSIVE);
    }
    s
}

/// What a probe of a client found: its address, its RTT (if it answered)
/// and the routers on the path, nearest first.
type Probed = (IpAddr, Option<Duration>, Vec<IpAddr>);

/// A UDP query held until a proxy is verified or its deadline.
struct HeldQuery {
    query: Vec<u8>,
    from: SocketAddr,
    since: coral::Time,
}

/// One core's dnssrv.
struct Core {
    shard: Rc<Shard>,
    srv: RefCell<Dnssrv>,
    view: RefCell<View>,
    /// The services dnssrv adds to the node's (DNS, maybe non-recursive).
    services_dns: Services,
    probe_tx: mpsc::SyncSender<IpAddr>,
    probe_rx: mpsc::Receiver<Probed>,
    tcp_connections_max: usize,
    /// TCP connections, each in a phase since a tick (idle between queries,
    /// reading one, sending answers) or busy answering: the deadline sweep
    /// closes those past their deadline, the accept loop evicts from it.
    tcp_conns: RefCell<ConnTable>,
    /// The deadlines of TCP connections' phases.
    tcp_deadlines: Deadlines,
    /// UDP queries held (at most `held_max`: the answer function counts).
    held: RefCell<Vec<HeldQuery>>,
    /// Whether the hold task runs.
    holding: Cell<bool>,
    /// The UDP socket, for answers to held queries (sent without waiting).
    udp_raw: std::mem::ManuallyDrop<Socket>,
    hint_lookups: Cell<usize>,
}

thread_local! {
    /// This core's dnssrv, for the metrics JSON (one executor per thread).
    static CORE: RefCell<Option<Rc<Core>>> = const { RefCell::new(None) };
}

/// This core's dnssrv counters (`coral::dns::Counters`, one field each) as
/// a JSON object, for the `dns` key of the core's metrics; null when this
/// node serves no DNS.
pub fn counters_json() -> serde_json::Value {
    CORE.with(|c| match c.borrow().as_ref() {
        Some(core) => {
            let srv = core.srv.borrow();
            let mut m = serde_json::Map::new();
            for (name, v) in srv.counters().fields() {
                m.insert(name.to_string(), serde_json::Value::from(v));
            }
            m.insert(
                "held_now".into(),
                serde_json::Value::from(srv.held() as u64),
            );
            // Answers by query type, rcode and client level, as rows of
            // `[qtype, rcode, level, count]` (the non-zero ones).
            let mut answers = Vec::new();
            for (t, by_rcode) in srv.counters().answers.iter().enumerate() {
                for (r, by_level) in by_rcode.iter().enumerate() {
                    for (l, &n) in by_level.iter().enumerate() {
                        if n > 0 {
                            answers.push(serde_json::json!([
                                coral::dns::QTYPE_NAMES[t],
                                coral::dns::RCODE_NAMES[r],
                                coral::dns::LEVEL_NAMES[l],
                                n
                            ]));
                        }
                    }
                }
            }
            m.insert("answers".into(), serde_json::Value::Array(answers));
            serde_json::Value::Object(m)
        }
        None => serde_json::Value::Null,
    })
}

/// Queries this core's dnssrv answered, if it runs.
pub fn queries() -> Option<u64> {
    CORE.with(|c| {
        c.borrow()
            .as_ref()
            .map(|c| c.srv.borrow().counters().queries)
    })
}

/// Starts dnssrv on this core: UDP, TCP, and its upkeep task.
pub fn spawn(shard: Rc<Shard>, fds: DnsFds, cfg: &NodeConfig) -> Result<(), String> {
    let dcfg = cfg.dnssrv.dns_config(cfg);
    // The client tables' hashes are keyed by a secret: their keys are
    // addresses anyone can send from (SECURITY.md, hash flooding).
    let secret = crate::runtime::seed_from_os().to_le_bytes();
    let mut srv = Dnssrv::new(dcfg).with_hash_secret(&secret);
    let now = shard.now();
    for (ip, ms) in &cfg.dnssrv.client_rtt_ms {
        if let Ok(ip) = ip.parse() {
            srv.pin_rtt(ip, coral::Duration::from_millis(u64::from(*ms)), now);
        }
    }
    let services = {
        let mut node = shard.node();
        let s = node.services().with(services(cfg));
        node.set_services(s);
        s
    };
    let view = View::from_node(&shard.node(), services);
    let (probe_tx, probe_rx) = mpsc::sync_channel::<IpAddr>(PROBES_QUEUED_MAX);
    let (rtt_tx, rtt_rx) = mpsc::channel::<Probed>();
    std::thread::Builder::new()
        .name(format!("coral-dns-probe-{}", shard.core))
        .spawn(move || {
            while let Ok(ip) = probe_rx.recv() {
                if rtt_tx.send(probe(ip)).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| format!("cannot start the DNS probe thread: {e}"))?;
    // SAFETY: `fds.udp` and `fds.tcp` were made by `bind_group` for this
    // core alone; ownership passes to the glommio sockets, which close them.
    let udp = unsafe { UdpSocket::from_raw_fd(fds.udp) };
    // SAFETY: as above.
    let listener = unsafe { TcpListener::from_raw_fd(fds.tcp) };
    // SAFETY: a second handle on the UDP descriptor for direct non-blocking
    // syscalls; ManuallyDrop keeps it from closing what `udp` owns.
    let raw = std::mem::ManuallyDrop::new(unsafe { Socket::from_raw_fd(fds.udp) });
    // SAFETY: as above, a third handle for answers to held queries.
    let udp_raw = std::mem::ManuallyDrop::new(unsafe { Socket::from_raw_fd(fds.udp) });
    let core = Rc::new(Core {
        shard,
        srv: RefCell::new(srv),
        view: RefCell::new(view),
        services_dns: self::services(cfg),
        probe_tx,
        probe_rx: rtt_rx,
        tcp_connections_max: cfg.dnssrv.tcp_connections_max,
        tcp_conns: RefCell::new(ConnTable::new()),
        tcp_deadlines: Deadlines::from_ms(
            cfg.dnssrv.tcp_query_timeout_ms,
            cfg.dnssrv.tcp_query_timeout_ms,
            cfg.dnssrv.tcp_idle_ms,
            cfg.dnssrv.tcp_send_timeout_ms,
        ),
        held: RefCell::new(Vec::new()),
        holding: Cell::new(false),
        udp_raw,
        hint_lookups: Cell::new(0),
    });
    CORE.with(|c| *c.borrow_mut() = Some(core.clone()));
    glommio::spawn_local(udp_loop(core.clone(), udp, raw)).detach();
    glommio::spawn_local(accept_loop(core.clone(), listener)).detach();
    glommio::spawn_local(tcp_deadline_sweep(core.clone())).detach();
    glommio::spawn_local(upkeep(core)).detach();
    Ok(())
}

impl Core {
    /// Starts the hold task unless it runs.
    fn start_holding(self: &Rc<Self>) {
        if !self.holding.replace(true) {
            glommio::spawn_local(hold_loop(self.clone())).detach();
        }
    }

    /// Re-reads the snapshot from the node, with the services it
    /// advertises now: a node withdrawing (SIGTERM, `lifecycle`) has
    /// dropped HTTP, and its dnssrv names itself no more.
    fn refresh_view(&self) {
        let node = self.shard.node();
        let services = node.services().with(self.services_dns);
        *self.view.borrow_mut() = View::from_node(&node, services);
    }
}

/// While queries are held: carries out the follow-ups (the verification
/// pings) at once, then every `HOLD_POLL` takes a fresh snapshot and asks
/// the held queries again; each is answered once a proxy is verified or at
/// its deadline (the answer function decides). TCP queries wait in their
/// connection's task, on the same snapshots.
async fn hold_loop(core: Rc<Core>) {
    let mut out = Vec::with_capacity(1232);
    loop {
        run_followups(&core).await;
        glommio::timer::sleep(HOLD_POLL).await;
        core.refresh_view();
        let now = core.shard.now();
        let held = std::mem::take(&mut *core.held.borrow_mut());
        let mut keep = Vec::with_capacity(held.len());
        for h in held {
            let o = {
                let view = core.view.borrow();
                core.srv.borrow_mut().answer_or_hold(
                    now,
                    &h.query,
                    h.from,
                    Transport::Udp,
                    &view,
                    &mut out,
                    Hold::Retry(h.since),
                )
            };
            match o {
                Outcome::Hold => keep.push(h),
                Outcome::Silent => {}
                Outcome::Answer => {
                    let to = socket2::SockAddr::from(h.from);
                    if core
                        .udp_raw
                        .send_to_with_flags(&out, &to, libc::MSG_DONTWAIT)
                        .is_err()
                    {
                        tracing::debug!(from = %h.from, "held answer not sent");
                    }
                }
            }
        }
        core.held.borrow_mut().extend(keep);
        if core.held.borrow().is_empty() && core.srv.borrow().held() == 0 {
            core.holding.set(false);
            return;
        }
        if core.shard.stopping() {
            core.holding.set(false);
            return;
        }
    }
}

/// Pause after the ring failed to wait on the UDP socket.
const RECV_ERROR_PAUSE: Duration = Duration::from_millis(10);
/// Datagrams moved per recvmmsg / sendmmsg call.
const MMSG_BATCH: usize = 32;

/// The UDP socket's descriptor as the ring polls it (the glommio socket
/// owns and closes it).
struct UdpFd(RawFd);

impl std::os::fd::AsRawFd for UdpFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Queries over UDP: wait through the ring until one is queued (one
/// `POLL_ADD`, submitted with the executor's next turn), then read what is
/// queued in batches (`recvmmsg`, without waiting) and send each batch's
/// answers with one `sendmmsg`, as Knot and NSD do: two system calls per
/// batch instead of two per query. Only an empty socket, or
/// `RECV_BATCH_MAX` datagrams read in one go, sends the loop back to the
/// ring, where the core's other tasks (the proxy, the DSHT) get their turn.
///
/// The wait is a readiness poll, not a receive through the ring (issue 27,
/// session 8): a ring receive cost a `recvmsg` tried first without
/// waiting (glommio's) that always failed after the batch found the socket
/// empty, and the datagram it brought was copied out of glommio's buffer
/// and answered alone before the batch.
async fn udp_loop(core: Rc<Core>, udp: UdpSocket, raw: std::mem::ManuallyDrop<Socket>) {
    use std::os::fd::AsRawFd;
    let ring = match glommio::io::PollableFd::new(UdpFd(raw.as_raw_fd())) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "dns: cannot wait on the UDP socket; UDP queries go unanswered on this core");
            return;
        }
    };
    let mut rx = RecvBatch::new();
    let mut tx = SendBatch::new();
    loop {
        if let Err(e) = ring.readable().await {
            tracing::debug!(error = %e, "dns: waiting on the UDP socket failed");
            glommio::timer::sleep(RECV_ERROR_PAUSE).await;
            continue;
        }
        let mut read = 0;
        while read < RECV_BATCH_MAX {
            let n = rx.recv(&raw);
            // Queries that came while the last batch was answered are read
            // at once; only an empty socket sends us back to the ring.
            if n == 0 {
                break;
            }
            read += n;
            // The clock once per batch: its queries came together.
            let now = core.shard.now();
            tx.answer_batch(&core, &rx, n, now);
            tx.send(&udp, &raw).await;
        }
    }
}

/// Receive buffers for one `recvmmsg`, with the headers and iovecs that
/// point at them, made once: each `recv` only restores the name lengths
/// the last one's datagrams overwrote (filling 32 headers per batch cost
/// about 25 instructions an answer, issue 27, session 8). The arrays are
/// boxed, so the pointers between them hold wherever the batch moves.
struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    addrs: Box<Addrs>,
    /// Read by the kernel through `hdrs`.
    _iovs: Box<Iovecs>,
    hdrs: Box<Headers>,
    /// Headers the last `recv` filled.
    filled: usize,
}

/// One batch's senders' or destinations' addresses.
type Addrs = [libc::sockaddr_storage; MMSG_BATCH];
/// One batch's iovecs.
type Iovecs = [libc::iovec; MMSG_BATCH];
/// One batch's message headers.
type Headers = [libc::mmsghdr; MMSG_BATCH];

fn zeroed_addrs() -> Addrs {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

fn zeroed_iovecs() -> Iovecs {
    // SAFETY: iovec is plain data (a null pointer and a length).
    unsafe { std::mem::zeroed() }
}

fn zeroed_headers() -> Headers {
    // SAFETY: mmsghdr is plain data (null pointers and lengths).
    unsafe { std::mem::zeroed() }
}

/// `msg_namelen` as a receive header offers it: the whole storage.
const STORAGE_LEN: libc::socklen_t =
    std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;

impl RecvBatch {
    fn new() -> RecvBatch {
        let mut bufs: Vec<Vec<u8>> = (0..MMSG_BATCH)
            .map(|_| vec![0u8; UDP_QUERY_BYTES_MAX])
            .collect();
        let mut addrs: Box<Addrs> = Box::new(zeroed_addrs());
        let mut iovs: Box<Iovecs> = Box::new(zeroed_iovecs());
        let mut hdrs: Box<Headers> = Box::new(zeroed_headers());
        for (((iov, hdr), buf), addr) in iovs
            .iter_mut()
            .zip(hdrs.iter_mut())
            .zip(bufs.iter_mut())
            .zip(addrs.iter_mut())
        {
            iov.iov_base = buf.as_mut_ptr().cast();
            iov.iov_len = buf.len();
            hdr.msg_hdr.msg_name = (addr as *mut libc::sockaddr_storage).cast();
            hdr.msg_hdr.msg_namelen = STORAGE_LEN;
            hdr.msg_hdr.msg_iov = iov;
            hdr.msg_hdr.msg_iovlen = 1;
        }
        RecvBatch {
            bufs,
            addrs,
            _iovs: iovs,
            hdrs,
            filled: 0,
        }
    }

    /// Reads up to `MMSG_BATCH` queued datagrams without waiting.
    fn recv(&mut self, sock: &Socket) -> usize {
        use std::os::fd::AsRawFd;
        for h in self.hdrs.iter_mut().take(self.filled) {
            h.msg_hdr.msg_namelen = STORAGE_LEN;
        }
        // SAFETY: every header points at a live iovec, buffer and address of
        // `self` (boxed, or the buffers' own heap blocks, none moved or freed
        // while `self` lives), with their true lengths; the kernel writes at
        // most that much, and the headers' lengths.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                MMSG_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        self.filled = if n < 0 {
            0
        } else {
            (n as usize).min(MMSG_BATCH)
        };
        self.filled
    }

    /// Datagram `i` of the last `recv`: whole, with its sender and the
    /// sender's address as the kernel wrote it (with its length), for the
    /// answer; or longer than its buffer; or not one to answer (past the
    /// batch, or from a sender that is no IP address).
    fn get(&self, i: usize) -> Datagram<'_> {
        if i >= self.filled {
            return Datagram::Unreadable;
        }
        let Some(h) = self.hdrs.get(i) else {
            return Datagram::Unreadable;
        };
        // The kernel cut a datagram longer than the buffer and said so: what
        // was read is a prefix of it, not the query (issue 27, session 9).
        if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return Datagram::Oversized;
        }
        let (len, namelen) = (h.msg_len as usize, h.msg_hdr.msg_namelen);
        let (Some(raw), Some(buf)) = (self.addrs.get(i), self.bufs.get(i)) else {
            return Datagram::Unreadable;
        };
        match (socket_addr(raw, namelen), buf.get(..len)) {
            (Some(from), Some(q)) => Datagram::Whole(q, from, raw, namelen),
            _ => Datagram::Unreadable,
        }
    }
}

/// A datagram of a receive batch, as [`RecvBatch::get`] read it.
enum Datagram<'b> {
    /// All of it, its sender, and the sender's address as the kernel wrote
    /// it (with its length).
    Whole(
        &'b [u8],
        SocketAddr,
        &'b libc::sockaddr_storage,
        libc::socklen_t,
    ),
    /// Longer than `UDP_QUERY_BYTES_MAX`, the buffer it was read into
    /// (`MSG_TRUNC`): dropped unread and counted (`Dnssrv::on_oversized`).
    /// No query is that long; a FORMERR would answer bytes the sender did
    /// not send as a message (its sections cut), and a spoofed flood of such
    /// datagrams gets no answer at all.
    Oversized,
    /// Past the batch, or from a sender that is no IP address.
    Unreadable,
}

/// The most octets of an address `recvmmsg` writes for an IPv4 or IPv6
/// sender (`sockaddr_in6`): what [`SendBatch::answer`] copies.
const INET_ADDR_BYTES: usize = std::mem::size_of::<libc::sockaddr_in6>();

/// Answers waiting for one `sendmmsg`, with their destinations as
/// `sendmmsg` takes them: the senders' addresses as `recvmmsg` wrote them,
/// copied over their length only (a `SockAddr` made and pushed per answer
/// cost about 50 instructions, issue 27). The headers point at the
/// destinations and iovecs once, made with the batch (boxed, so the
/// pointers hold wherever it moves); an answer writes its iovec and its
/// address's length, and `send` passes the headers as they are (filling
/// them per batch cost about 23 instructions an answer, session 8).
struct SendBatch {
    outs: Vec<Vec<u8>>,
    to: Box<Addrs>,
    iovs: Box<Iovecs>,
    hdrs: Box<Headers>,
    len: usize,
}

impl SendBatch {
    fn new() -> SendBatch {
        let mut to: Box<Addrs> = Box::new(zeroed_addrs());
        let mut iovs: Box<Iovecs> = Box::new(zeroed_iovecs());
        let mut hdrs: Box<Headers> = Box::new(zeroed_headers());
        for ((iov, hdr), to) in iovs.iter_mut().zip(hdrs.iter_mut()).zip(to.iter_mut()) {
            hdr.msg_hdr.msg_name = (to as *mut libc::sockaddr_storage).cast();
            hdr.msg_hdr.msg_iov = iov;
            hdr.msg_hdr.msg_iovlen = 1;
        }
        SendBatch {
            outs: (0..MMSG_BATCH).map(|_| Vec::with_capacity(1232)).collect(),
            to,
            iovs,
            hdrs,
            len: 0,
        }
    }

    /// Answers datagrams `0..n` of `rx` (at most `MMSG_BATCH`, into an
    /// empty batch), which came at `now`, under one borrow of the core's
    /// snapshot and dnssrv (two borrows and their releases per answer were
    /// about 28 instructions, issue 27, session 8). A held query gets a copy
    /// in the held queue and starts the hold task; the borrows are let go
    /// first, as glommio runs a new task at once (to its first wait) and the
    /// hold task's follow-ups borrow the dnssrv, then taken again for the
    /// rest: every query is answered on the state of the moment, as when
    /// each took its own borrows. Nothing here waits.
    fn answer_batch(&mut self, core: &Rc<Core>, rx: &RecvBatch, n: usize, now: coral::Time) {
        debug_assert_eq!(self.len, 0, "a batch's answers go into an empty send batch");
        let mut i = 0;
        while i < n {
            let view = core.view.borrow();
            let mut srv = core.srv.borrow_mut();
            let mut held = None;
            while i < n {
                let at = self.len;
                let (q, from, to, to_len) = match rx.get(i) {
                    Datagram::Whole(q, from, to, to_len) => (q, from, to, to_len),
                    Datagram::Oversized => {
                        srv.on_oversized();
                        i += 1;
                        continue;
                    }
                    Datagram::Unreadable => {
                        i += 1;
                        continue;
                    }
                };
                i += 1;
                let (Some(out), Some(slot), Some(iov), Some(hdr)) = (
                    self.outs.get_mut(at),
                    self.to.get_mut(at),
                    self.iovs.get_mut(at),
                    self.hdrs.get_mut(at),
                ) else {
                    continue;
                };
                match srv.answer_or_hold(now, q, from, Transport::Udp, &view, out, Hold::Allowed) {
                    Outcome::Answer => {}
                    Outcome::Silent => continue,
                    Outcome::Hold => {
                        held = Some(HeldQuery {
                            query: q.to_vec(),
                            from,
                            since: now,
                        });
                        break;
                    }
                }
                if to_len as usize <= INET_ADDR_BYTES {
                    // SAFETY: both are whole `sockaddr_storage`s (128
                    // octets), so the first INET_ADDR_BYTES of each are in
                    // bounds; the kernel reads only the first `to_len`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            (to as *const libc::sockaddr_storage).cast::<u8>(),
                            (slot as *mut libc::sockaddr_storage).cast::<u8>(),
                            INET_ADDR_BYTES,
                        );
                    }
                } else {
                    *slot = *to;
                }
                // The answer's buffer as it is now (the answer may have
                // grown it).
                iov.iov_base = out.as_mut_ptr().cast();
                iov.iov_len = out.len();
                hdr.msg_hdr.msg_namelen = to_len.min(STORAGE_LEN);
                self.len = at + 1;
            }
            drop(srv);
            drop(view);
            if let Some(h) = held {
                core.held.borrow_mut().push(h);
                core.start_holding();
            }
        }
    }

    async fn send(&mut self, udp: &UdpSocket, sock: &Socket) {
        use std::os::fd::AsRawFd;
        let len = self.len.min(MMSG_BATCH);
        let mut done = 0;
        while done < len {
            // SAFETY: headers `done..len` point at their boxed destination
            // and iovec, each written by `answer` for a live answer of
            // `self.outs` (untouched since) with its true length; the
            // kernel only reads them (and writes the headers' `msg_len`).
            let n = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    self.hdrs.as_mut_ptr().add(done),
                    (len - done) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                done += n as usize;
                continue;
            }
            // Would block (or failed): this one through the ring, then on.
            if let (Some(out), Some(to), Some(hdr)) =
                (self.outs.get(done), self.to.get(done), self.hdrs.get(done))
            {
                if let Some(to) = socket_addr(to, hdr.msg_hdr.msg_namelen) {
                    let _ = udp.send_to(out, to).await;
                }
            }
            done += 1;
        }
        self.len = 0;
    }
}

/// Accepts TCP connections (`accept::run`): at most `tcp_connections_max`
/// open at once; at the cap the oldest idle (else the slowest) connection
/// is evicted for the new one, and only when none can go is the new one
/// closed at once.
async fn accept_loop(core: Rc<Core>, listener: TcpListener) {
    /// Counts, and evicts from the core's connection table.
    struct Tally(Rc<Core>, crate::accept::Counters);
    impl crate::accept::Tally for Tally {
        fn accepted(&self) {
            self.1.accepted();
        }
        fn refused(&self) {
            self.1.refused();
        }
        fn accept_failed(&self) {
            self.1.accept_failed();
        }
        fn evict(&self) -> bool {
            let victim = self.0.tcp_conns.borrow_mut().evict();
            match victim {
                Some(fd) => {
                    crate::accept::shut_down(fd, true);
                    self.1.evicted.set(self.1.evicted.get() + 1);
                    true
                }
                None => false,
            }
        }
    }
    let limits = crate::accept::Limits {
        connections_max: core.tcp_connections_max,
        deadline: None,
    };
    let tally = Rc::new(Tally(core.clone(), crate::accept::Counters::default()));
    let stopping = core.clone();
    crate::accept::run(
        "dns",
        listener,
        limits,
        tally,
        move || stopping.shard.stopping(),
        move |stream| {
            let core = core.clone();
            async move {
                let _ = serve_tcp(&core, stream).await;
            }
        },
    )
    .await;
}

/// Once a second (the table's tick): shuts down the TCP connections past
/// their phase's deadline: idle for `tcp_idle_ms`, a query not in within
/// `tcp_query_timeout_ms` of its first byte, a write stalled for
/// `tcp_send_timeout_ms` (each rounded up to whole seconds). Their pending
/// read or write ends and they close; a stalled write's unsent answers are
/// discarded (a reset).
async fn tcp_deadline_sweep(core: Rc<Core>) {
    let mut expired = Vec::new();
    while !core.shard.stopping() {
        glommio::timer::sleep(TCP_SWEEP_EVERY).await;
        core.tcp_conns
            .borrow_mut()
            .expired(&core.tcp_deadlines, &mut expired);
        for &(fd, phase) in &expired {
            crate::accept::shut_down(fd, phase == Phase::Sending);
        }
        if !expired.is_empty() {
            tracing::debug!(closed = expired.len(), totals = ?core.tcp_conns.borrow().expired_total(), "DNS-over-TCP connections past their deadlines");
        }
        expired.clear();
    }
}

/// A TCP connection's slot in its core's table, released when the
/// connection's task ends (however it ends).
struct TcpSlot<'c> {
    core: &'c Core,
    slot: Slot,
}

impl TcpSlot<'_> {
    fn enter(&self, phase: Phase) {
        self.core.tcp_conns.borrow_mut().enter(self.slot, phase);
    }

    fn busy(&self) {
        self.core.tcp_conns.borrow_mut().busy(self.slot);
    }
}

impl Drop for TcpSlot<'_> {
    fn drop(&mut self) {
        self.core.tcp_conns.borrow_mut().release(self.slot);
    }
}

/// One TCP connection: length-framed queries, answered in order, the next
/// read only once the last answer is written.
async fn serve_tcp(core: &Rc<Core>, mut stream: TcpStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let slot = TcpSlot {
        core,
        slot: core.tcp_conns.borrow_mut().register(fd),
    };
    let _ = stream.set_nodelay(true);
    // SAFETY: `fd` is the open socket `stream` owns; socket2's view of it
    // is never dropped (ManuallyDrop), so it does not close it.
    let sock = std::mem::ManuallyDrop::new(unsafe { Socket::from_raw_fd(fd) });
    let _ = sock.set_send_buffer_size(TCP_SEND_BUFFER_BYTES);
    let from = stream.peer_addr()?;
    let mut query = Vec::with_capacity(512);
    let mut out = Vec::with_capacity(2048);
    let mut frame = Vec::with_capacity(2048);
    loop {
        // Between queries (and before the first): idle.
        slot.enter(Phase::Idle);
        let mut len = [0u8; 2];
        stream.read_exact(&mut len[..1]).await?;
        // The query's first byte is in: one deadline for the whole query.
        slot.enter(Phase::Head);
        stream.read_exact(&mut len[1..]).await?;
        query.resize(usize::from(u16::from_be_bytes(len)), 0);
        stream.read_exact(&mut query).await?;
        slot.busy();
        if !answer_tcp(core, &query, from, &mut out).await {
            // Nothing to say to this one (a response, a runt): the stream
            // can no longer be trusted to be in step.
            return Ok(());
        }
        frame.clear();
        frame.extend_from_slice(&(out.len().min(usize::from(u16::MAX)) as u16).to_be_bytes());
        frame.extend_from_slice(&out);
        slot.enter(Phase::Sending);
        stream.write_all(&frame).await?;
        slot.busy();
    }
}

/// Answers one TCP query; a held one waits here (this connection's task),
/// asked again every `HOLD_POLL` on the hold task's snapshots. False: send
/// nothing.
async fn answer_tcp(core: &Rc<Core>, query: &[u8], from: SocketAddr, out: &mut Vec<u8>) -> bool {
    let mut hold = Hold::Allowed;
    loop {
        let now = core.shard.now();
        let o = {
            let view = core.view.borrow();
            core.srv
                .borrow_mut()
                .answer_or_hold(now, query, from, Transport::Tcp, &view, out, hold)
        };
        match o {
            Outcome::Answer => return true,
            Outcome::Silent => return false,
            Outcome::Hold => {
                if hold == Hold::Allowed {
                    hold = Hold::Retry(now);
                }
                // The hold task sends the pings and refreshes the snapshot.
                core.start_holding();
                glommio::timer::sleep(HOLD_POLL).await;
            }
        }
    }
}

/// Refreshes the snapshot and carries out the answer function's follow-ups.
async fn upkeep(core: Rc<Core>) {
    loop {
        glommio::timer::sleep(VIEW_REFRESH).await;
        if core.shard.stopping() {
            return;
        }
        core.refresh_view();
        run_followups(&core).await;
    }
}

/// Hands probe results to the answer function and carries out what it
/// asked for: probes (to the probe thread), hint lookups (DSHT gets on the
/// keys' owning cores, in a task of their own), pings.
async fn run_followups(core: &Rc<Core>) {
    let now = core.shard.now();
    while let Ok((ip, rtt, hops)) = core.probe_rx.try_recv() {
        tracing::debug!(%ip, rtt_us = rtt.map(|r| r.as_micros() as u64), ?hops, "client probed");
        core.srv.borrow_mut().on_probe(
            ip,
            rtt.map(|r| coral::Duration::from_micros(r.as_micros() as u64)),
            &hops,
            now,
        );
    }
    {
        let mut pinged = false;
        loop {
            let f = core.srv.borrow_mut().poll_followup();
            match f {
                None => break,
                Some(FollowUp::Probe(ip)) => {
                    // A full queue drops the probe (counted); the client
                    // stays at the default level until a later query asks
                    // again.
                    if core.probe_tx.try_send(ip).is_err() {
                        core.srv.borrow_mut().on_probe_dropped();
                    }
                }
                Some(FollowUp::Hints { client, keys, len }) => {
                    let keys: Vec<coral::Key> =
                        keys.iter().take(usize::from(len)).copied().collect();
                    if core.hint_lookups.get() >= HINT_LOOKUPS_INFLIGHT_MAX {
                        let me = core.view.borrow().me;
                        core.srv.borrow_mut().on_hints(client, &[], me, now);
                        continue;
                    }
                    core.hint_lookups.set(core.hint_lookups.get() + 1);
                    glommio::spawn_local(hint_lookup(core.clone(), client, keys)).detach();
                }
                Some(FollowUp::Ping(addr)) => {
                    core.shard.node().verify_alive(now, addr);
                    pinged = true;
                }
                Some(FollowUp::Check(ip)) => {
                    // Ping the proxy's DSHT address(es) this core knows:
                    // the answer refreshes its routing entries (`verified`,
                    // and its services: a withdrawing node's lack HTTP).
                    let mut node = core.shard.node();
                    let mut addrs: Vec<SocketAddr> = Vec::with_capacity(LIVE_CHECK_PINGS_MAX);
                    for level in 0..node.config().levels() {
                        if let Some(t) = node.routing_table(level as coral::dsht::node::Level) {
                            for e in t.entries().filter(|e| e.contact.addr.ip() == ip) {
                                if !addrs.contains(&e.contact.addr)
                                    && addrs.len() < LIVE_CHECK_PINGS_MAX
                                {
                                    addrs.push(e.contact.addr);
                                }
                            }
                        }
                    }
                    for addr in addrs {
                        node.verify_alive(now, addr);
                    }
                    pinged = true;
                }
                Some(FollowUp::Verify(level)) => {
                    // Ping the level's proxies not verified lately (at most
                    // VERIFY_PROXY_PINGS_PER_LEVEL_MAX); answers refresh their entries.
                    let live = coral::Duration::from_secs(core.srv.borrow().config().live_secs);
                    let mut node = core.shard.node();
                    let stale: Vec<SocketAddr> = node
                        .routing_table(level)
                        .map(|t| {
                            t.with_services(Services::HTTP)
                                .filter(|e| now.saturating_since(e.last_seen) > live)
                                .map(|e| e.contact.addr)
                                .take(VERIFY_PROXY_PINGS_PER_LEVEL_MAX)
                                .collect()
                        })
                        .unwrap_or_default();
                    for addr in stale {
                        node.verify_alive(now, addr);
                    }
                    pinged = true;
                }
            }
        }
        if pinged {
            core.shard.flush().await;
        }
    }
}

/// Gets a client's hint keys, each on the core that owns it, and hands the
/// nodes named (nearest-hop keys first) to the answer function.
async fn hint_lookup(core: Rc<Core>, client: IpAddr, keys: Vec<coral::Key>) {
    let mut found: Vec<SocketAddr> = Vec::new();
    for key in keys {
        let owner = crate::steer::shard_of_key(&key, core.shard.cores);
        let json = core
            .shard
            .call_on(owner, crate::runtime::Call::Get { key, levels: None })
            .await;
        let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        for a in v["values"].as_array().into_iter().flatten() {
            if let Some(addr) = a["addr"].as_str().and_then(|s| s.parse().ok()) {
                if !found.contains(&addr) {
                    found.push(addr);
                }
            }
        }
    }
    tracing::debug!(%client, ?found, "hint lookup done");
    let now = core.shard.now();
    let me = core.view.borrow().me;
    core.srv.borrow_mut().on_hints(client, &found, me, now);
    core.hint_lookups
        .set(core.hint_lookups.get().saturating_sub(1));
}

/// Probes a client (on the probe thread, never an executor) with the
/// traceroute-like probe of `hints.rs`, IPv4 or IPv6: its RTT and the
/// routers on the path, whose last hops key the hint lookup. If the probe
/// cannot run, the RTT alone.
fn probe(ip: IpAddr) -> Probed {
    match crate::hints::trace(ip, PROBE_HOPS_MAX, PROBE_TIMEOUT) {
        Ok(t) => (ip, t.rtt, t.hops.iter().map(|h| h.addr).collect()),
        Err(e) => {
            tracing::debug!(%ip, error = %e, "client probe failed");
            (ip, measure_rtt(ip, PROBE_TIMEOUT), Vec::new())
        }
    }
}

/// The round trip to `ip`: one UDP datagram to a closed port, timed until
/// the ICMP port-unreachable comes back (a connected UDP socket reports it
/// as a refused receive). `None` if nothing answers in time.
fn measure_rtt(ip: IpAddr, timeout: Duration) -> Option<Duration> {
    let bind: SocketAddr = match ip {
        IpAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        IpAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    let s = StdUdpSocket::bind(bind).ok()?;
    s.connect(SocketAddr::new(ip, PROBE_PORT)).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    let start = Instant::now();
    s.send(b"coral dnssrv rtt probe").ok()?;
    let mut buf = [0u8; 64];
    match s.recv(&mut buf) {
        Ok(_) => Some(start.elapsed()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Some(start.elapsed()),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sender's address as socket2 read it before (issue 27, session
    /// 8): the storage copied into a `SockAddr`, then `as_socket`.
    fn sender_before(raw: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
        // SAFETY: as `RecvBatch::get` did: `raw` holds `len` octets of an
        // address.
        unsafe { socket2::SockAddr::new(*raw, len) }.as_socket()
    }

    /// Seeded addresses of both families (ports, flow labels and scopes
    /// included), written as the kernel writes them: the one reader the UDP
    /// loop and the DSHT's batches share (`runtime::batch::socket_addr`,
    /// which replaced dns.rs's `sender`, issue 27 session 9) reads each as
    /// socket2 did; a length shorter than the family's address, which the
    /// kernel never writes, reads as none (socket2 read past it), and a
    /// storage of another family as none.
    #[test]
    fn sender_reads_as_socket2_reads_it() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000u32 {
            let r = next();
            let addr: SocketAddr = if i % 2 == 0 {
                SocketAddr::V4(std::net::SocketAddrV4::new(
                    std::net::Ipv4Addr::from(r as u32),
                    (r >> 32) as u16,
                ))
            } else {
                let hi = u128::from(next()) << 64 | u128::from(r);
                SocketAddr::V6(std::net::SocketAddrV6::new(
                    std::net::Ipv6Addr::from(hi),
                    (r >> 48) as u16,
                    (next() as u32) & 0x000f_ffff,
                    if i % 3 == 0 { (r >> 8) as u32 } else { 0 },
                ))
            };
            let s = socket2::SockAddr::from(addr);
            let len = s.len();
            let raw = s.as_storage();
            assert_eq!(socket_addr(&raw, len), Some(addr));
            assert_eq!(socket_addr(&raw, len), sender_before(&raw, len));
            // The whole storage offered (a length the kernel did not cut).
            let whole = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            assert_eq!(socket_addr(&raw, whole), Some(addr));
            for cut in [0, 2, 8, len.saturating_sub(1)] {
                assert_eq!(socket_addr(&raw, cut), None, "{addr} cut to {cut}");
            }
            let mut other = raw;
            other.ss_family = libc::AF_UNIX as libc::sa_family_t;
            assert_eq!(socket_addr(&other, len), None);
            assert_eq!(sender_before(&other, len), None);
        }
    }
}
