//! The demo's origin: a small HTTP/1.1 server (std threads, one per
//! connection) behind a token bucket that stands for its uplink, 384 kbit/s
//! as in §6.1.
//!
//! Why not nginx with `limit_rate`, or tc? `limit_rate` limits each
//! connection on its own, so ten connections get ten times the rate: not an
//! uplink. `tbf` on `lo` would throttle every loopback flow (the nodes, the
//! clients) and `sch_netem` is absent here. One bucket shared by every
//! connection is the uplink, and counting fetches where they arrive tells
//! exactly how often coral went to the origin. (The lab in deploy/lab/
//! shapes a real veth with tbf instead.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coral::proxy::http::{self, Method};

use super::content::Site;

/// Bytes written to the socket per token-bucket grant.
const SEND_SLICE_BYTES: usize = 1024;
/// The bucket's depth: one slice plus headroom for a response head.
const BUCKET_DEPTH_BYTES: f64 = 2048.0;
/// How long a connection may sit idle between requests.
const IDLE_TIMEOUT_MS: u64 = 10_000;
/// Largest request head read.
const REQUEST_HEAD_BYTES_MAX: usize = 16 * 1024;

/// The uplink: a token bucket of `rate` bytes per second, shared by every
/// connection. A lock is fine here: a few dozen grants a second, off any hot
/// path of coral itself.
pub struct Uplink {
    bytes_per_sec: f64,
    state: Mutex<(f64, Instant)>,
}

impl Uplink {
    /// An uplink of `kbit_per_sec` (1000 bits per kbit).
    pub fn new(kbit_per_sec: u64) -> Uplink {
        Uplink {
            bytes_per_sec: kbit_per_sec as f64 * 1000.0 / 8.0,
            state: Mutex::new((BUCKET_DEPTH_BYTES, Instant::now())),
        }
    }

    /// Blocks until `n` bytes (at most the bucket's depth) may be sent.
    pub fn take(&self, n: usize) {
        let n = (n as f64).min(BUCKET_DEPTH_BYTES);
        loop {
            let wait = {
                let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                let tokens = (s.0 + now.duration_since(s.1).as_secs_f64() * self.bytes_per_sec)
                    .min(BUCKET_DEPTH_BYTES);
                if tokens >= n {
                    *s = (tokens - n, now);
                    return;
                }
                *s = (tokens, now);
                (n - tokens) / self.bytes_per_sec
            };
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
    }
}

/// What the origin counted.
pub struct OriginStats {
    /// 200 answers per image, in the site's order.
    pub image_fetches: Vec<AtomicU64>,
    /// 200 answers for pages.
    pub page_fetches: AtomicU64,
    /// Answers of any other status.
    pub other_answers: AtomicU64,
    /// Bytes written to sockets (heads and bodies).
    pub bytes_sent: AtomicU64,
    /// Image fetches per interval since `start`.
    pub fetches_by_interval: Vec<AtomicU64>,
    /// Interval length.
    pub interval: Duration,
    /// When counting began.
    pub start: Instant,
}

impl OriginStats {
    /// Origin fetches of images so far.
    pub fn image_fetches_total(&self) -> u64 {
        self.image_fetches
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }
}

/// A running origin; stops accepting when dropped.
pub struct Origin {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its counters.
    pub stats: Arc<OriginStats>,
    stop: Arc<AtomicBool>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

impl Origin {
    /// Binds `addr` and serves `site` through an uplink of `kbit_per_sec`.
    /// Fetches are counted in `intervals` bins of `interval` from now.
    pub fn start(
        addr: SocketAddr,
        site: Arc<Site>,
        kbit_per_sec: u64,
        interval: Duration,
        intervals: usize,
    ) -> std::io::Result<Origin> {
        let listener = TcpListener::bind(addr)?;
        let stats = Arc::new(OriginStats {
            image_fetches: (0..site.images.len()).map(|_| AtomicU64::new(0)).collect(),
            page_fetches: AtomicU64::new(0),
            other_answers: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            fetches_by_interval: (0..intervals.max(1)).map(|_| AtomicU64::new(0)).collect(),
            interval,
            start: Instant::now(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let uplink = Arc::new(Uplink::new(kbit_per_sec));
        {
            let (stats, stop) = (stats.clone(), stop.clone());
            std::thread::Builder::new()
                .name("demo-origin".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(conn) = conn else { continue };
                        let (site, stats, uplink, stop) =
                            (site.clone(), stats.clone(), uplink.clone(), stop.clone());
                        let _ = std::thread::Builder::new()
                            .name("demo-origin-conn".into())
                            .spawn(move || serve(conn, &site, &stats, &uplink, &stop));
                    }
                })?;
        }
        Ok(Origin { addr, stats, stop })
    }
}

/// Serves requests on one connection until it closes, errs or idles out.
fn serve(
    mut conn: TcpStream,
    site: &Site,
    stats: &OriginStats,
    uplink: &Uplink,
    stop: &AtomicBool,
) {
    let _ = conn.set_read_timeout(Some(Duration::from_millis(IDLE_TIMEOUT_MS)));
    let _ = conn.set_nodelay(true);
    let limits = http::Limits::default();
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let (head, used) = loop {
            match http::parse_request_head(&buf, &limits) {
                Ok(Some(parsed)) => break parsed,
                Ok(None) if buf.len() < REQUEST_HEAD_BYTES_MAX => {}
                _ => {
                    let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    stats.other_answers.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        // The demo's clients send no request bodies; anything after the head
        // is the next request.
        buf.drain(..used);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let is_head = matches!(head.method, Method::Head);
        let path = head.target.split('?').next().unwrap_or("");
        let object = match head.method {
            Method::Get | Method::Head => site.get(path),
            Method::Other(_) => None,
        };
        let (status, content_type, body): (&str, &str, &[u8]) = match object {
            Some(o) => ("200 OK", o.content_type, &o.body),
            None => ("404 Not Found", "text/plain", b"not found\n"),
        };
        let response_head =
            format!(
            "HTTP/1.1 {status}\r\nServer: coral-demo-origin\r\nContent-Type: {content_type}\r\n\
             Content-Length: {}\r\nCache-Control: public, max-age=3600\r\n\
             Last-Modified: Tue, 30 Mar 2004 00:00:00 GMT\r\n{}\r\n",
            body.len(),
            if head.keep_alive { "" } else { "Connection: close\r\n" }
        );
        match object {
            Some(o) if o.content_type.starts_with("image/") && !is_head => {
                if let Some(i) = site.images.iter().position(|img| img.path == o.path) {
                    stats.image_fetches[i].fetch_add(1, Ordering::Relaxed);
                    let bin = (stats.start.elapsed().as_nanos() / stats.interval.as_nanos().max(1))
                        as usize;
                    let bins = &stats.fetches_by_interval;
                    bins[bin.min(bins.len() - 1)].fetch_add(1, Ordering::Relaxed);
                }
            }
            Some(_) if !is_head => {
                stats.page_fetches.fetch_add(1, Ordering::Relaxed);
            }
            Some(_) => {}
            None => {
                stats.other_answers.fetch_add(1, Ordering::Relaxed);
            }
        }
        let body = if is_head { &[][..] } else { body };
        if send(&mut conn, response_head.as_bytes(), stats, uplink).is_err()
            || body
                .chunks(SEND_SLICE_BYTES)
                .try_for_each(|slice| send(&mut conn, slice, stats, uplink))
                .is_err()
            || !head.keep_alive
        {
            return;
        }
    }
}

/// Writes `bytes` through the uplink.
fn send(
    conn: &mut TcpStream,
    bytes: &[u8],
    stats: &OriginStats,
    uplink: &Uplink,
) -> std::io::Result<()> {
    for slice in bytes.chunks(SEND_SLICE_BYTES) {
        uplink.take(slice.len());
        conn.write_all(slice)?;
        stats
            .bytes_sent
            .fetch_add(slice.len() as u64, Ordering::Relaxed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §6.1's origin sits on a 384 kbit/s line: whatever the number of
    /// connections, it never sends faster than that (plus the bucket's depth).
    /// The bound only limits speed from above, so a loaded machine cannot fail it.
    #[test]
    fn nsdi2004_6_1_origin_uplink_holds_384_kbit_across_connections() {
        let site = Arc::new(Site::new(3));
        let addr: SocketAddr = "127.17.3.1:0".parse().unwrap();
        let listener = TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let origin = Origin::start(addr, site.clone(), 384, Duration::from_secs(1), 60).unwrap();
        let start = Instant::now();
        let clients: Vec<_> = (0..3)
            .map(|k| {
                let site = site.clone();
                std::thread::spawn(move || {
                    let mut c = TcpStream::connect(addr).unwrap();
                    write!(
                        c,
                        "GET /img{k}.bmp HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n"
                    )
                    .unwrap();
                    let mut all = Vec::new();
                    c.read_to_end(&mut all).unwrap();
                    let body_at = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    assert_eq!(&all[body_at..], &site.images[k].body[..]);
                    all.len()
                })
            })
            .collect();
        let bytes: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
        let elapsed = start.elapsed().as_secs_f64();
        let sent = origin.stats.bytes_sent.load(Ordering::Relaxed);
        assert_eq!(sent as usize, bytes);
        assert_eq!(origin.stats.image_fetches_total(), 3);
        let bound = 48_000.0 * elapsed + BUCKET_DEPTH_BYTES;
        eprintln!(
            "origin sent {bytes} bytes in {elapsed:.2} s: {:.0} kbit/s (limit 384)",
            bytes as f64 * 8.0 / 1000.0 / elapsed
        );
        assert!(
            bytes as f64 <= bound,
            "{bytes} bytes in {elapsed} s exceeds 384 kbit/s"
        );
    }
}
