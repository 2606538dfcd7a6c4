//! The admin endpoint: a loopback HTTP/1.1 server on core 0 through which
//! the client commands (`coral put | get | nodes | levels | stats`) reach the
//! node, as the paper's client library reached its daemon (§5).
//!
//! One request per connection, `GET` only, answers in JSON. `/status` is
//! the status page (HTML, see `status`), `/status.json` its numbers. Requests are
//! bounded (`REQUEST_BYTES_MAX`) and parsed strictly; anything else gets a
//! 4xx and the connection closes.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::rc::Rc;

use coral::dsht::wire::Services;
use coral::proxy::idle::{ConnTable, Slot};
use coral::Id;
use futures_lite::{AsyncReadExt, AsyncWriteExt, FutureExt};
use glommio::net::TcpListener;
use serde_json::json;

use crate::accept;
use crate::runtime::{Call, Shard};
use crate::steer;

/// Largest request head accepted.
const REQUEST_BYTES_MAX: usize = crate::limits::ADMIN.request_bytes_max;
/// Longest a client may take to send its whole request (one deadline for
/// all its reads: a slowloris cannot stretch it).
const REQUEST_TIMEOUT: std::time::Duration = crate::limits::ADMIN.request_timeout;
/// Longest one connection is served, start to end: the request, a DSHT
/// operation (`operation_timeout_ms`, 30 s by default) and the answer.
const CONNECTION_DEADLINE: std::time::Duration = crate::limits::ADMIN.connection_deadline;
/// Admin connections open at once.
const CONNECTIONS_MAX: usize = crate::limits::ADMIN.connections_max;

/// The admin listener's limits (see `accept`).
pub const LIMITS: accept::Limits = accept::Limits {
    connections_max: CONNECTIONS_MAX,
    deadline: Some(CONNECTION_DEADLINE),
};

/// Starts the admin server on `addr` in the current executor. At its cap
/// the connection still sending its request the longest is evicted for a
/// new one (`accept::Tally::evict`).
pub fn spawn(shard: Rc<Shard>, addr: SocketAddr) -> Result<(), String> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| format!("cannot bind the admin address {addr}: {e}"))?;
    let stopping = shard.clone();
    // The connections, for eviction at the cap: one still sending its
    // request (the slowest first) makes room for a new one; one being
    // answered (a DSHT operation) never does.
    let conns = Rc::new(RefCell::new(ConnTable::new()));
    let tally = Rc::new(Evicting {
        conns: conns.clone(),
        counters: accept::Counters::default(),
    });
    glommio::spawn_local(tick(shard.clone(), conns.clone())).detach();
    let run = accept::run(
        "admin",
        listener,
        LIMITS,
        tally,
        move || stopping.stopping(),
        move |mut stream| {
            let shard = shard.clone();
            let conns = conns.clone();
            async move {
                let slot = Registered::new(&conns, stream.as_raw_fd());
                let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
                let read = async {
                    let r = read_request(&mut stream).await;
                    conns.borrow_mut().busy(slot.0);
                    r
                };
                let deadline = async {
                    glommio::timer::sleep(REQUEST_TIMEOUT).await;
                    Err((408, "request not received in time".to_string()))
                };
                let (status, body) = match read.or(deadline).await {
                    Ok(target) => answer(&shard, &target).await,
                    Err((status, why)) => (status, json!({"error": why}).to_string()),
                };
                let reason = match status {
                    200 => "OK",
                    400 => "Bad Request",
                    404 => "Not Found",
                    405 => "Method Not Allowed",
                    408 => "Request Timeout",
                    431 => "Request Header Fields Too Large",
                    _ => "Error",
                };
                let head = format!(
                "HTTP/1.1 {status} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
                content_type(&body),
                body.len() + 1,
                if body.starts_with(HTML_START) { HTML_HEADERS } else { "" },
            );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = stream.write_all(b"\n").await;
                let _ = stream.close().await;
                drop(slot);
            }
        },
    );
    glommio::spawn_local(run).detach();
    Ok(())
}

/// The admin listener's counters, evicting from its connection table at
/// the cap.
struct Evicting {
    conns: Rc<RefCell<ConnTable>>,
    counters: accept::Counters,
}

impl accept::Tally for Evicting {
    fn accepted(&self) {
        self.counters.accepted();
    }
    fn refused(&self) {
        self.counters.refused();
    }
    fn accept_failed(&self) {
        self.counters.accept_failed();
    }
    fn timed_out(&self) {
        self.counters.timed_out();
    }
    fn evict(&self) -> bool {
        let victim = self.conns.borrow_mut().evict();
        if let Some(fd) = victim {
            accept::shut_down(fd, true);
        }
        victim.is_some()
    }
}

/// A connection's slot in the admin's table, released when its task ends
/// (however it ends: the connection deadline drops the task).
struct Registered(Slot, Rc<RefCell<ConnTable>>);

impl Registered {
    fn new(conns: &Rc<RefCell<ConnTable>>, fd: std::os::fd::RawFd) -> Registered {
        Registered(conns.borrow_mut().register(fd), conns.clone())
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.1.borrow_mut().release(self.0);
    }
}

/// Ticks the admin's table once a second (its ages order evictions; its
/// deadlines are the timers above).
async fn tick(shard: Rc<Shard>, conns: Rc<RefCell<ConnTable>>) {
    while !shard.stopping() {
        glommio::timer::sleep(std::time::Duration::from_secs(1)).await;
        conns.borrow_mut().tick();
    }
}

/// How the status page (the one HTML answer) starts.
const HTML_START: &str = "<!DOCTYPE html>";
/// The status page's own headers: it runs its inline script and style and
/// fetches `/status.json` from this address, nothing else (defence in depth
/// besides its escaping of what came from the network).
const HTML_HEADERS: &str = "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src data:\r\nX-Content-Type-Options: nosniff\r\n\
     Cache-Control: no-store\r\n";

/// Prometheus's text format for `/metrics` (its body starts with a
/// `# HELP` line), HTML for the status page, JSON for everything else.
fn content_type(body: &str) -> &'static str {
    if body.starts_with(HTML_START) {
        "text/html; charset=utf-8"
    } else if body.starts_with("# HELP") {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "application/json"
    }
}

async fn read_request(stream: &mut glommio::net::TcpStream) -> Result<String, (u16, String)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| (400, format!("read: {e}")))?;
        if n == 0 {
            return Err((400, "connection closed before the request ended".into()));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                if req.method != Some("GET") {
                    return Err((405, "only GET".into()));
                }
                return Ok(req.path.unwrap_or("/").to_string());
            }
            Ok(httparse::Status::Partial) if buf.len() < REQUEST_BYTES_MAX => continue,
            Ok(httparse::Status::Partial) => return Err((431, "request too large".into())),
            Err(e) => return Err((400, format!("bad request: {e}"))),
        }
    }
}

/// Splits `/path?a=1&b=2` into the path and its decoded parameters.
pub fn split_target(target: &str) -> (&str, Vec<(String, String)>) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let params = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    (path, params)
}

/// Decodes %XX escapes and `+`; invalid escapes are kept as they are.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a key: 40 hex digits, or `url:<URL>` hashed as the proxy does: SHA-1 of the
/// canonical URL (`coral::proxy::names::canonicalize`), so `url:http://X.com/y` and the
/// proxy's key for `x.com.<zone>/y` agree. A URL that does not canonicalize is refused.
pub fn parse_key(s: &str) -> Option<Id> {
    match s.strip_prefix("url:") {
        Some(url) => {
            let canonical = coral::proxy::names::canonicalize(url).ok()?;
            Some(coral::proxy::names::cache_key(&canonical))
        }
        None => Id::from_hex(s),
    }
}

fn parse_levels(s: &str) -> Option<Vec<u8>> {
    s.split(',').map(|l| l.trim().parse::<u8>().ok()).collect()
}

async fn answer(shard: &Rc<Shard>, target: &str) -> (u16, String) {
    let (path, params) = split_target(target);
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let bad = |why: &str| (400, json!({"error": why}).to_string());
    match path {
        "/levels" => (200, shard.levels_json().to_string()),
        "/nodes" => {
            let Some(level) = get("level").and_then(|l| l.parse::<u8>().ok()) else {
                return bad("level: a number");
            };
            if usize::from(level) >= shard.levels_count() {
                return bad(&format!("level {level}: this node has levels 0 to {}", shard.levels_count() - 1));
            }
            let count = get("count").and_then(|c| c.parse::<usize>().ok()).unwrap_or(8).min(1024);
            let target = match get("target") {
                Some(t) => match t.parse::<IpAddr>() {
                    Ok(ip) => Some(ip),
                    Err(_) => return bad("target: an IP address"),
                },
                None => None,
            };
            let services = match get("service") {
                None => Services::NONE,
                Some("http") => Services::HTTP,
                Some("dns") => Services::DNS,
                Some(_) => return bad("service: http or dns"),
            };
            (200, shard.nodes_json(level, count, target, services).to_string())
        }
        "/get" | "/put" => {
            let Some(key) = get("key").and_then(parse_key) else {
                return bad("key: 40 hex digits or url:<URL>");
            };
            let levels = match get("levels") {
                Some(l) => match parse_levels(l) {
                    Some(v) if v.iter().all(|&l| usize::from(l) < shard.levels_count()) => Some(v),
                    Some(_) => {
                        return bad(&format!("levels: this node has levels 0 to {}", shard.levels_count() - 1))
                    }
                    None => return bad("levels: numbers separated by commas"),
                },
                None => None,
            };
            let owner = steer::shard_of_key(&key, shard.cores);
            let call = if path == "/get" {
                Call::Get { key, levels }
            } else {
                let Some(value) = get("value") else { return bad("value missing") };
                let Some(ttl_secs) = get("ttl").and_then(|t| t.parse::<u32>().ok()) else {
                    return bad("ttl: seconds");
                };
                Call::Put { key, value: value.as_bytes().to_vec(), ttl_secs, levels }
            };
            (200, shard.call_on(owner, call).await)
        }
        "/stats" => {
            let mut cores = Vec::new();
            for core in 0..shard.cores {
                let s = shard.call_on(core, Call::Stats).await;
                cores.push(serde_json::from_str::<serde_json::Value>(&s).unwrap_or(serde_json::Value::Null));
            }
            (200, json!({"cores": cores}).to_string())
        }
        "/metrics" => {
            let mut cores = Vec::new();
            for core in 0..shard.cores {
                let s = shard.call_on(core, Call::Metrics).await;
                cores.push(serde_json::from_str::<serde_json::Value>(&s).unwrap_or(serde_json::Value::Null));
            }
            let ready = crate::lifecycle::ready() && !shard.stopping();
            (200, crate::metrics::render(&cores, &shard.levels_json(), ready))
        }
        // The status page and its numbers, from every core (`status`).
        "/status" | "/status/" => (200, crate::status::PAGE.to_string()),
        "/status.json" => {
            let mut cores = Vec::new();
            for core in 0..shard.cores {
                let s = shard.call_on(core, Call::Status).await;
                cores.push(serde_json::from_str::<serde_json::Value>(&s).unwrap_or(serde_json::Value::Null));
            }
            let levels = crate::status::levels_json(shard);
            let uptime_secs = shard.now().0 / 1_000_000;
            let limit = crate::status::sink::cache_limit_bytes();
            (200, crate::status::merge(&cores, levels, limit, uptime_secs).to_string())
        }
        // Liveness: this executor answers.
        "/livez" => (200, json!({"live": true}).to_string()),
        // Readiness: every core serves and the node is not stopping.
        "/readyz" => {
            if crate::lifecycle::ready() && !shard.stopping() {
                (200, json!({"ready": true, "cores": shard.cores}).to_string())
            } else {
                (503, json!({"ready": false, "error": "not ready: starting or stopping"}).to_string())
            }
        }
        _ => (404, json!({"error": "unknown path", "paths": ["/levels", "/nodes", "/get", "/put", "/stats", "/livez", "/readyz", "/metrics", "/status", "/status.json"]}).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_keys_parse() {
        let (p, q) = split_target("/put?key=url%3Ahttp%3A%2F%2Fx.com%2Fy&value=a+b&ttl=60");
        assert_eq!(p, "/put");
        assert_eq!(q[0], ("key".into(), "url:http://x.com/y".into()));
        assert_eq!(q[1], ("value".into(), "a b".into()));
        assert_eq!(
            parse_key("url:http://x.com/y"),
            Some(Id::from_url("http://x.com:80/y"))
        );
        assert_eq!(
            parse_key("url:HTTP://X.com.:80/y#f"),
            parse_key("url:http://x.com/y")
        );
        assert_eq!(parse_key("url:ftp://x.com/y"), None);
        assert_eq!(parse_key("zz"), None);
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(parse_levels("2,1,0"), Some(vec![2, 1, 0]));
        assert_eq!(parse_levels("2,x"), None);
    }
}
