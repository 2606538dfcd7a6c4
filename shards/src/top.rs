//! `coral top`: a live terminal view of a node's `/status.json`, in the
//! spirit of varnishstat. Rates come from two samples `--interval` apart.
//!
//! On a terminal it redraws every interval (ANSI, alternate screen, raw
//! input) until `q` or Ctrl-C, and restores the terminal. With `--once`, or
//! when stdout is not a terminal, it prints one plain-text frame (no escape
//! sequences) and exits 0.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// Shortest and longest interval between samples, in seconds.
const INTERVAL_SECS_MIN: f64 = 0.1;
const INTERVAL_SECS_MAX: f64 = 3600.0;
/// Rows of each table shown.
const ROWS_MAX: usize = 10;

/// Set by SIGTERM, SIGHUP (and SIGINT, should it arrive as a signal).
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// One sample: the JSON and when it was taken.
struct Sample {
    at: Instant,
    json: Json,
}

fn sample(admin: SocketAddr) -> Result<Sample, String> {
    let json = crate::client::call(admin, "/status.json")?;
    Ok(Sample {
        at: Instant::now(),
        json,
    })
}

/// Runs `coral top`.
pub fn run(admin: SocketAddr, interval_secs: f64, once: bool) -> ExitCode {
    if !(INTERVAL_SECS_MIN..=INTERVAL_SECS_MAX).contains(&interval_secs) {
        eprintln!(
            "coral: --interval {interval_secs}: between {INTERVAL_SECS_MIN} and {INTERVAL_SECS_MAX} seconds"
        );
        return ExitCode::from(2);
    }
    let interval = Duration::from_secs_f64(interval_secs);
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(1) == 1 && libc::isatty(0) == 1 };
    let mut prev = match sample(admin) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("coral: {e}");
            return ExitCode::FAILURE;
        }
    };
    if once || !tty {
        std::thread::sleep(interval);
        return match sample(admin) {
            Ok(now) => {
                print!("{}", frame(&prev, &now, admin, interval_secs, None));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("coral: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let term = match Terminal::enter() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("coral: cannot set up the terminal: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout();
    let mut error: Option<String> = None;
    let _ = write!(
        out,
        "\x1b[H\x1b[2Jcoral top: first sample taken, next in {interval_secs} s  (q quits)"
    );
    let _ = out.flush();
    loop {
        if term.wait_for_quit(interval) {
            break;
        }
        match sample(admin) {
            Ok(now) => {
                let text = frame(&prev, &now, admin, interval_secs, Some(term.width()));
                let _ = write!(out, "\x1b[H\x1b[2J{}", text.replace('\n', "\r\n"));
                prev = now;
                error = None;
            }
            Err(e) => {
                let _ = write!(out, "\x1b[H\x1b[2J\x1b[1;31mcoral top: {e}\x1b[0m\r\n(retrying every {interval_secs} s; q quits)");
                error = Some(e);
            }
        }
        let _ = out.flush();
    }
    drop(term);
    match error {
        Some(e) => {
            eprintln!("coral: {e}");
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    }
}

/// The terminal in raw mode on the alternate screen; restored when dropped.
struct Terminal {
    saved: libc::termios,
}

impl Terminal {
    fn enter() -> std::io::Result<Terminal> {
        // SAFETY: termios is plain data; tcgetattr fills it for fd 0.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(0, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut raw = saved;
        // No echo, no line buffering, Ctrl-C as a byte (read below).
        raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
        raw.c_cc[libc::VMIN] = 0;
        raw.c_cc[libc::VTIME] = 0;
        // SAFETY: a valid termios for fd 0.
        if unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
                libc::signal(
                    sig,
                    on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
                );
            }
        }
        // Alternate screen, cursor hidden.
        print!("\x1b[?1049h\x1b[?25l");
        let _ = std::io::stdout().flush();
        Ok(Terminal { saved })
    }

    /// The terminal's width in columns (80 if unknown).
    fn width(&self) -> usize {
        // SAFETY: winsize is plain data the ioctl fills.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
            usize::from(ws.ws_col)
        } else {
            80
        }
    }

    /// Waits up to `d` for a key; true on `q`, `Q`, Ctrl-C or a signal.
    fn wait_for_quit(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if STOP.load(Ordering::Relaxed) {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let mut fds = libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(250) as libc::c_int;
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut fds, 1, ms) } > 0 {
                let mut b = [0u8; 16];
                // SAFETY: reads into a local buffer of its length.
                let n = unsafe { libc::read(0, b.as_mut_ptr().cast(), b.len()) };
                if n == 0 {
                    // End of input: nothing more can ask us to quit; go on
                    // until a signal.
                    std::thread::sleep(left.min(Duration::from_millis(250)));
                }
                if n > 0
                    && b[..n as usize]
                        .iter()
                        .any(|&c| c == b'q' || c == b'Q' || c == 3)
                {
                    return true;
                }
            }
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        print!("\x1b[?25h\x1b[?1049l");
        let _ = std::io::stdout().flush();
        // SAFETY: restores the settings read in `enter`.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.saved);
        }
    }
}

fn u(v: &Json, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap_or(0)
}

fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

fn duration(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min {} s", s / 60, s % 60),
        s if s < 86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        s => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

fn percent(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.1} %", 100.0 * a as f64 / b as f64)
    }
}

/// Text from the network, safe for a terminal: control characters (escape
/// sequences) become `?`.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// One frame. `width`: the terminal's (ANSI bold headers, long URLs cut);
/// `None` for plain text.
fn frame(a: &Sample, b: &Sample, admin: SocketAddr, interval: f64, width: Option<usize>) -> String {
    let (p, n) = (&a.json, &b.json);
    let dt = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let rate = |path: &[&str]| u(n, path).saturating_sub(u(p, path)) as f64 / dt;
    let (bold, off) = if width.is_some() {
        ("\x1b[1m", "\x1b[0m")
    } else {
        ("", "")
    };
    let mut o = String::new();
    let node = n["node"].as_str().unwrap_or("?");
    let _ = writeln!(
        o,
        "{bold}coral top{off}  node {} at {}  {} core(s), up {}  admin {admin}, every {interval} s{}",
        clean(&node[..node.len().min(16)]),
        clean(n["addr"].as_str().unwrap_or("?")),
        u(n, &["cores"]),
        duration(u(n, &["uptime_secs"])),
        if width.is_some() { "  (q quits)" } else { "" },
    );
    o.push('\n');
    let (hits, misses) = (u(n, &["proxy", "hits"]), u(n, &["proxy", "misses"]));
    let (dh, dm) = (
        hits.saturating_sub(u(p, &["proxy", "hits"])),
        misses.saturating_sub(u(p, &["proxy", "misses"])),
    );
    let _ = writeln!(
        o,
        "requests  {:>12} total  {:>9.1} req/s   hits {} (now {})",
        count(hits + misses),
        (dh + dm) as f64 / dt,
        percent(hits, hits + misses),
        percent(dh, dh + dm),
    );
    let served = u(n, &["proxy", "served"]);
    let of = u(n, &["proxy", "origin_fetches"]);
    let _ = writeln!(
        o,
        "origin    {:>12} fetches{:>9.2} /s      protection {} served per origin fetch ({} served, {} from peers)",
        count(of),
        rate(&["proxy", "origin_fetches"]),
        n["proxy"]["served_per_origin_fetch"]
            .as_f64()
            .map_or("-".to_string(), |x| format!("x{x:.1}")),
        count(served),
        count(u(n, &["proxy", "peer_fetches"])),
    );
    let (cb, cl) = (u(n, &["cache", "bytes"]), u(n, &["cache", "limit_bytes"]));
    let _ = writeln!(
        o,
        "cache     {:>12} of {} ({}), {} objects, {} evicted",
        bytes(cb),
        bytes(cl),
        percent(cb, cl),
        count(u(n, &["cache", "objects"])),
        count(u(n, &["cache", "evictions"])),
    );
    let _ = writeln!(
        o,
        "dsht      {:>12} in   {:>9.1} RPC/s   {} gets served, {} stores, {} timeouts",
        count(u(n, &["dsht", "datagrams_in"])),
        rate(&["dsht", "datagrams_in"]),
        count(u(n, &["dsht", "gets_served"])),
        count(u(n, &["dsht", "stores_accepted"])),
        count(u(n, &["dsht", "rpc_timeouts"])),
    );
    match n["dns"]["queries"].as_u64() {
        Some(q) => {
            let _ = writeln!(
                o,
                "dns       {:>12} queries{:>9.1} q/s",
                count(q),
                rate(&["dns", "queries"])
            );
        }
        None => o.push_str("dns       off\n"),
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "{bold}LEVEL  CLUSTER   RTT<      SIZE  AGE          MEMBERS  NEAREST{off}"
    );
    for l in n["levels"].as_array().into_iter().flatten() {
        let nearest: Vec<String> = l["members"]
            .as_array()
            .into_iter()
            .flatten()
            .take(3)
            .map(|m| {
                let addr = clean(m["addr"].as_str().unwrap_or("?"));
                match m["rtt_ms"].as_f64() {
                    Some(r) if r < 1.0 => format!("{addr} {r:.2} ms"),
                    Some(r) => format!("{addr} {r:.1} ms"),
                    None => addr,
                }
            })
            .collect();
        let cluster = l["cluster"].as_str().unwrap_or("");
        let _ = writeln!(
            o,
            "L{:<5} {:<9} {:<9} {:>5}  {:<12} {:>7}  {}",
            u(l, &["level"]),
            clean(&cluster[..cluster.len().min(8)]),
            l["threshold_ms"]
                .as_u64()
                .map_or("-".to_string(), |t| format!("{t} ms")),
            u(l, &["size_estimate"]),
            duration(u(l, &["age_secs"])),
            l["members"].as_array().map_or(0, Vec::len),
            if nearest.is_empty() {
                "-".to_string()
            } else {
                nearest.join(", ")
            },
        );
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "{bold}  SERVED    HITS       SIZE  TOP OBJECTS (Coralized URL){off}"
    );
    let tops = n["top_objects"].as_array().cloned().unwrap_or_default();
    if tops.is_empty() {
        o.push_str("  (nothing served yet)\n");
    }
    for t in tops.iter().take(ROWS_MAX) {
        let mut url = clean(t["url"].as_str().unwrap_or(""));
        if let Some(w) = width {
            let room = w.saturating_sub(31).max(20);
            if url.chars().count() > room {
                url = url.chars().take(room - 1).collect::<String>() + "…";
            }
        }
        let _ = writeln!(
            o,
            "{:>8} {:>7} {:>10}  {url}",
            count(u(t, &["count"])),
            percent(u(t, &["hits"]), u(t, &["count"])),
            bytes(u(t, &["bytes"])),
        );
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "{bold}LEVEL  REQ/MIN  LOADED  KEY                                       VALUES{off}"
    );
    let hot = n["hot_keys"].as_array().cloned().unwrap_or_default();
    if hot.is_empty() {
        o.push_str("  (no key stored here)\n");
    }
    for k in hot.iter().take(ROWS_MAX) {
        let values: Vec<String> = k["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(clean))
            .collect();
        let _ = writeln!(
            o,
            "L{:<5} {:>7}  {:<6}  {:<40}  {}",
            u(k, &["level"]),
            u(k, &["requests_past_minute"]),
            if k["loaded"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            clean(k["key"].as_str().unwrap_or("")),
            values.join(", "),
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_frame_has_rates_and_no_escapes_and_cleans_network_text() {
        let t0 = Instant::now();
        let j = |hits: u64, url: &str| {
            serde_json::json!({
                "node": "abcdef", "addr": "127.0.0.1:7000", "cores": 1, "uptime_secs": 65,
                "proxy": {"hits": hits, "misses": 2, "served": hits + 2, "origin_fetches": 2, "peer_fetches": 0, "served_per_origin_fetch": 3.0},
                "cache": {"bytes": 2048, "limit_bytes": 4096, "objects": 2, "evictions": 0},
                "dsht": {"datagrams_in": hits}, "dns": {"queries": null},
                "levels": [{"level": 0, "cluster": "00", "threshold_ms": null, "size_estimate": 1, "age_secs": 3, "members": []}],
                "top_objects": [{"url": url, "count": 4, "hits": 2, "bytes": 10}],
                "hot_keys": [],
            })
        };
        let a = Sample {
            at: t0,
            json: j(0, "x"),
        };
        let b = Sample {
            at: t0 + Duration::from_secs(2),
            json: j(10, "http://a/\x1b[2Jb"),
        };
        let f = frame(&a, &b, "127.0.0.1:7080".parse().unwrap(), 2.0, None);
        assert!(!f.contains('\x1b'), "{f}");
        assert!(f.contains("http://a/?[2Jb"), "{f}");
        assert!(f.contains("5.0 req/s"), "{f}");
        assert!(f.contains("hits 83.3 % (now 100.0 %)"), "{f}");
        assert!(f.contains("x3.0 served per origin fetch"), "{f}");
        assert!(f.contains("dns       off"), "{f}");
        assert!(f.contains("up 1 min 5 s"), "{f}");
    }
}
