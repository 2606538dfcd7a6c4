//! The demo's crowd: clients that, like browsers behind a stub resolver,
//! resolve the Coralized name through a node's dnssrv (a real DNS query over
//! UDP), keep the proxies they were given for the answer's TTL, and fetch a
//! random page's three images through them, checking every byte.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use coral::proxy::http::{self, Framing};
use coral::rng::Rng;

use super::content::Site;

/// How long a client waits for a DNS answer before asking again.
const DNS_TIMEOUT_MS: u64 = 1_000;
/// DNS attempts before a resolution fails.
const DNS_ATTEMPTS: u32 = 3;
/// Shortest time an answer is kept, whatever its TTL says.
const DNS_TTL_MIN_SECS: u64 = 1;
/// Largest DNS answer read over UDP.
const DNS_ANSWER_BYTES_MAX: usize = 4096;
/// How long a request may take, connect to last byte.
const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Largest body a client accepts.
const BODY_BYTES_MAX: usize = 1 << 20;
/// Pause after a failed request, so a broken proxy is not hammered.
const FAILURE_PAUSE_MS: u64 = 200;

/// Where an answer came from, as the proxy's `Cache-Status` says (RFC 9211).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The proxy's own cache (`hit`).
    Local = 0,
    /// A peer found at level 2 (the closest cluster).
    PeerL2 = 1,
    /// A peer found at level 1.
    PeerL1 = 2,
    /// A peer found at level 0 (the global cluster).
    PeerL0 = 3,
    /// A peer, level not said.
    Peer = 4,
    /// Went forward from the proxy (`fwd=…` without `detail=peer`): to the
    /// origin, or joined the proxy's own fetch from it on the key's core.
    Origin = 5,
    /// Joined a fetch already under way on the proxy (`hit; collapsed`).
    InFlight = 6,
    /// No usable answer: error status, wrong bytes, timeout, DNS failure.
    Failed = 7,
}

/// Number of [`Source`] values.
pub const SOURCES: usize = 8;
/// Column names of the sources, in order.
pub const SOURCE_NAMES: [&str; SOURCES] = [
    "local",
    "peer_l2",
    "peer_l1",
    "peer_l0",
    "peer",
    "origin",
    "in_flight",
    "failed",
];

impl Source {
    /// The source a `Cache-Status` value names: coral's entry closest to the
    /// client (the last `coral` one), `hit` → local, `detail=peer…` → a peer
    /// (its level from a digit in the detail, e.g. `peer-l2`), `collapsed` →
    /// in flight, other forwards → origin.
    pub fn of_cache_status(value: Option<&str>) -> Source {
        let Some(value) = value else {
            return Source::Origin;
        };
        let Some(entry) =
            value.split(',').map(str::trim).rev().find(|e| {
                e.split(';').next().map(str::trim) == Some(coral::proxy::policy::CDN_TOKEN)
            })
        else {
            return Source::Origin;
        };
        let params: Vec<&str> = entry.split(';').skip(1).map(str::trim).collect();
        if params.contains(&"collapsed") {
            return Source::InFlight;
        }
        if params.contains(&"hit") {
            return Source::Local;
        }
        let detail = params
            .iter()
            .find_map(|p| p.strip_prefix("detail="))
            .map(|d| d.trim_matches('"'));
        if let Some(d) = detail.filter(|d| d.starts_with("peer")) {
            return match d.bytes().rev().find(u8::is_ascii_digit) {
                Some(b'2') => Source::PeerL2,
                Some(b'1') => Source::PeerL1,
                Some(b'0') => Source::PeerL0,
                _ => Source::Peer,
            };
        }
        Source::Origin
    }
}

/// Counters every client adds to while the demo runs.
pub struct CrowdStats {
    /// Requests sent (DNS failures count as failed requests too).
    pub requests: AtomicU64,
    /// Answered 200 with the right bytes.
    pub ok: AtomicU64,
    /// Body bytes received.
    pub bytes_received: AtomicU64,
    /// DNS queries sent and answered.
    pub dns_queries: AtomicU64,
    /// DNS queries answered with at least one A record.
    pub dns_answers: AtomicU64,
    /// Per interval, per source.
    pub by_interval: Vec<[AtomicU64; SOURCES]>,
    /// Interval length.
    pub interval: Duration,
    /// When the crowd started.
    pub start: Instant,
}

impl CrowdStats {
    /// Zeroed counters for `intervals` intervals of `interval`.
    pub fn new(interval: Duration, intervals: usize) -> CrowdStats {
        CrowdStats {
            requests: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            dns_queries: AtomicU64::new(0),
            dns_answers: AtomicU64::new(0),
            by_interval: (0..intervals.max(1))
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
            interval,
            start: Instant::now(),
        }
    }

    fn record(&self, source: Source) {
        let bin = (self.start.elapsed().as_nanos() / self.interval.as_nanos().max(1)) as usize;
        let row = &self.by_interval[bin.min(self.by_interval.len() - 1)];
        row[source as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Totals per source so far.
    pub fn totals(&self) -> [u64; SOURCES] {
        let mut t = [0u64; SOURCES];
        for row in &self.by_interval {
            for (s, c) in row.iter().enumerate() {
                t[s] += c.load(Ordering::Relaxed);
            }
        }
        t
    }
}

/// One client's settings.
pub struct Client {
    /// The dnssrv it asks.
    pub dns_server: SocketAddr,
    /// The Coralized host of the origin (`origin.demo.test.8080.coral.test`).
    pub coralized_host: String,
    /// The proxies' HTTP port.
    pub proxy_port: u16,
    /// Its random stream.
    pub seed: u64,
    /// Pause after each page's images, as a reader would.
    pub think: Duration,
}

/// Runs one client until `deadline` or `stop`; returns its latencies in
/// microseconds, one per request answered.
pub fn run_client(
    c: &Client,
    site: &Site,
    stats: &CrowdStats,
    deadline: Instant,
    stop: &AtomicBool,
    requested: &[AtomicBool],
) -> Vec<u32> {
    let mut rng = Rng::new(c.seed);
    let mut latencies = Vec::new();
    let mut proxies: Vec<Ipv4Addr> = Vec::new();
    let mut proxies_until = Instant::now();
    let mut conn: Option<(Ipv4Addr, TcpStream)> = None;
    let live = |stop: &AtomicBool| Instant::now() < deadline && !stop.load(Ordering::Relaxed);
    let pages = site.pages.len() as u64;
    while live(stop) {
        let page = rng.below(pages) as usize;
        for k in site.page_images(page) {
            if !live(stop) {
                break;
            }
            if proxies.is_empty() || Instant::now() >= proxies_until {
                stats.dns_queries.fetch_add(1, Ordering::Relaxed);
                match resolve_a(c.dns_server, &c.coralized_host, rng.next_u64() as u16) {
                    Ok((addrs, ttl)) if !addrs.is_empty() => {
                        stats.dns_answers.fetch_add(1, Ordering::Relaxed);
                        proxies = addrs;
                        proxies_until =
                            Instant::now() + Duration::from_secs(ttl.max(DNS_TTL_MIN_SECS));
                    }
                    _ => {
                        stats.requests.fetch_add(1, Ordering::Relaxed);
                        stats.record(Source::Failed);
                        std::thread::sleep(Duration::from_millis(FAILURE_PAUSE_MS));
                        continue;
                    }
                }
            }
            // A browser keeps its connection to the proxy it picked; a new
            // answer without that proxy moves it to one of the new ones.
            let proxy = match &conn {
                Some((ip, _)) if proxies.contains(ip) => *ip,
                _ => proxies[rng.below(proxies.len() as u64) as usize],
            };
            let image = &site.images[k];
            if let Some(r) = requested.get(k) {
                r.store(true, Ordering::Relaxed);
            }
            stats.requests.fetch_add(1, Ordering::Relaxed);
            let started = Instant::now();
            match fetch(&mut conn, proxy, c, &image.path) {
                Ok((status, body, cache_status)) if status == 200 && body == image.body => {
                    latencies.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    stats.ok.fetch_add(1, Ordering::Relaxed);
                    stats
                        .bytes_received
                        .fetch_add(body.len() as u64, Ordering::Relaxed);
                    stats.record(Source::of_cache_status(cache_status.as_deref()));
                }
                other => {
                    if std::env::var_os("CORAL_DEMO_DEBUG").is_some() {
                        eprintln!(
                            "demo client: {} via {proxy}: {:?}",
                            image.path,
                            other.map(|(s, b, cs)| (s, b.len(), cs))
                        );
                    }
                    conn = None;
                    stats.record(Source::Failed);
                    std::thread::sleep(Duration::from_millis(FAILURE_PAUSE_MS));
                }
            }
        }
        // Read the page before the next; wake early when the demo ends.
        let until = Instant::now() + c.think;
        while Instant::now() < until && live(stop) {
            std::thread::sleep(Duration::from_millis(50).min(c.think));
        }
    }
    latencies
}

/// One GET through `proxy` on the kept connection (or a new one): status,
/// body, `Cache-Status`.
fn fetch(
    conn: &mut Option<(Ipv4Addr, TcpStream)>,
    proxy: Ipv4Addr,
    c: &Client,
    path: &str,
) -> Result<(u16, Vec<u8>, Option<String>), String> {
    let reuse = matches!(conn, Some((ip, _)) if *ip == proxy);
    if !reuse {
        let addr = SocketAddr::from((proxy, c.proxy_port));
        let s = TcpStream::connect_timeout(&addr, Duration::from_millis(REQUEST_TIMEOUT_MS))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(Duration::from_millis(REQUEST_TIMEOUT_MS)));
        *conn = Some((proxy, s));
    }
    let Some((_, stream)) = conn.as_mut() else {
        return Err("no connection".into());
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: coral-demo\r\nAccept: */*\r\n\r\n",
        c.coralized_host, c.proxy_port
    );
    let result = exchange(stream, request.as_bytes());
    match &result {
        Ok((_, _, _, keep_alive)) if *keep_alive => {}
        _ => *conn = None,
    }
    result.map(|(s, b, cs, _)| (s, b, cs))
}

/// Sends `request` and reads one response: status, body, `Cache-Status`, keep-alive.
fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
) -> Result<(u16, Vec<u8>, Option<String>, bool), String> {
    stream
        .write_all(request)
        .map_err(|e| format!("send: {e}"))?;
    let limits = http::Limits::default();
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let (head, head_len) = loop {
        match http::parse_response_head(&buf, false, &limits) {
            Ok(Some(parsed)) => break parsed,
            Ok(None) => {}
            Err(e) => return Err(format!("response head: {e}")),
        }
        let n = stream.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed before the head".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let cache_status = head.headers.get_str("cache-status").map(str::to_string);
    let mut rest = buf.split_off(head_len);
    let body = match head.framing {
        Framing::Empty => Vec::new(),
        Framing::Length(n) => {
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= BODY_BYTES_MAX)
                .ok_or("body too large")?;
            while rest.len() < n {
                let got = stream
                    .read(&mut chunk)
                    .map_err(|e| format!("read body: {e}"))?;
                if got == 0 {
                    return Err(format!("closed after {} of {n} body bytes", rest.len()));
                }
                rest.extend_from_slice(&chunk[..got]);
            }
            rest.truncate(n);
            rest
        }
        Framing::Chunked => {
            let mut decoder = http::ChunkedDecoder::new(&limits);
            let mut body = Vec::new();
            let mut pending = rest;
            loop {
                let (used, done) = decoder
                    .feed(&pending, &mut body)
                    .map_err(|e| format!("chunked body: {e}"))?;
                pending.drain(..used);
                if done {
                    break;
                }
                if body.len() > BODY_BYTES_MAX {
                    return Err("body too large".into());
                }
                let got = stream
                    .read(&mut chunk)
                    .map_err(|e| format!("read body: {e}"))?;
                if got == 0 {
                    return Err("closed inside a chunked body".into());
                }
                pending.extend_from_slice(&chunk[..got]);
            }
            body
        }
        Framing::UntilClose => {
            stream
                .take(BODY_BYTES_MAX as u64)
                .read_to_end(&mut rest)
                .map_err(|e| format!("read body: {e}"))?;
            return Ok((head.status, rest, cache_status, false));
        }
    };
    Ok((head.status, body, cache_status, head.keep_alive))
}

/// Asks `server` for the A records of `name`: the addresses and the
/// smallest TTL, in seconds.
pub fn resolve_a(server: SocketAddr, name: &str, id: u16) -> Result<(Vec<Ipv4Addr>, u64), String> {
    let query = a_query(name, id)?;
    let bind: SocketAddr = match server {
        SocketAddr::V4(s) if s.ip().is_loopback() => SocketAddr::from((*s.ip(), 0)),
        SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        SocketAddr::V6(_) => "[::]:0".parse().map_err(|_| "bind address")?,
    };
    let sock = UdpSocket::bind(bind).map_err(|e| format!("bind: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(DNS_TIMEOUT_MS)))
        .map_err(|e| e.to_string())?;
    let mut answer = vec![0u8; DNS_ANSWER_BYTES_MAX];
    let mut last = String::from("no attempt");
    for _ in 0..DNS_ATTEMPTS {
        sock.send_to(&query, server)
            .map_err(|e| format!("send: {e}"))?;
        let deadline = Instant::now() + Duration::from_millis(DNS_TIMEOUT_MS);
        while Instant::now() < deadline {
            match sock.recv_from(&mut answer) {
                Ok((n, from)) if from == server => match parse_a_answer(&answer[..n], id) {
                    Ok(Some(found)) => return Ok(found),
                    Ok(None) => continue,
                    Err(e) => return Err(e),
                },
                Ok(_) => continue,
                Err(e) => {
                    last = format!("recv: {e}");
                    break;
                }
            }
        }
    }
    Err(last)
}

/// A DNS query (RFC 1035 §4.1) for `name` IN A, without recursion desired.
pub fn a_query(name: &str, id: u16) -> Result<Vec<u8>, String> {
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x00, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("bad name {name:?}"));
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&[0, 1, 0, 1]);
    Ok(q)
}

/// The A records of an answer to query `id`, parsed with `domain`: `None`
/// when the datagram answers another query; an error for a failed answer.
pub fn parse_a_answer(datagram: &[u8], id: u16) -> Result<Option<(Vec<Ipv4Addr>, u64)>, String> {
    use domain::base::iana::Rcode;
    let msg =
        domain::base::Message::from_octets(datagram).map_err(|e| format!("DNS answer: {e}"))?;
    let header = msg.header();
    if header.id() != id || !header.qr() {
        return Ok(None);
    }
    if header.rcode() != Rcode::NOERROR {
        return Err(format!("DNS answer: rcode {}", header.rcode()));
    }
    let answer = msg.answer().map_err(|e| format!("DNS answer: {e}"))?;
    let mut addrs = Vec::new();
    let mut ttl = u64::MAX;
    for record in answer.limit_to::<domain::rdata::A>() {
        let record = record.map_err(|e| format!("DNS record: {e}"))?;
        addrs.push(Ipv4Addr::from(record.data().addr().octets()));
        ttl = ttl.min(u64::from(record.ttl().as_secs()));
    }
    if addrs.is_empty() {
        return Err("DNS answer without A records".into());
    }
    Ok(Some((addrs, ttl)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9211_cache_status_names_the_source() {
        assert_eq!(Source::of_cache_status(Some("coral; hit")), Source::Local);
        assert_eq!(
            Source::of_cache_status(Some("coral; fwd=uri-miss; stored")),
            Source::Origin
        );
        assert_eq!(
            Source::of_cache_status(Some("coral; fwd=uri-miss; stored; detail=peer-l2")),
            Source::PeerL2
        );
        assert_eq!(
            Source::of_cache_status(Some("coral; fwd=uri-miss; detail=peer")),
            Source::Peer
        );
        assert_eq!(
            Source::of_cache_status(Some("coral; hit; collapsed")),
            Source::InFlight
        );
        // The entry nearest the client (last) decides: the peer's own hit does not.
        assert_eq!(
            Source::of_cache_status(Some("coral; hit, coral; fwd=uri-miss; detail=peer-l0")),
            Source::PeerL0
        );
        assert_eq!(
            Source::of_cache_status(Some("othercache; hit")),
            Source::Origin
        );
    }

    #[test]
    fn rfc1035_a_query_round_trips_through_domain() {
        let q = a_query("origin.demo.test.8080.coral.test", 0x1234).unwrap();
        let msg = domain::base::Message::from_octets(&q[..]).unwrap();
        assert_eq!(msg.header().id(), 0x1234);
        let question = msg.first_question().unwrap();
        assert_eq!(
            question.qname().to_string(),
            "origin.demo.test.8080.coral.test"
        );
        assert!(a_query("a..b", 1).is_err());
        // A query is not an answer; garbage is an error, not a panic.
        assert!(parse_a_answer(&q, 0x1234).unwrap().is_none());
        assert!(parse_a_answer(&[1, 2, 3], 0x1234).is_err());
    }
}
