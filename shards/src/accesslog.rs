//! CoralProxy's access log: one line per response, in the Combined Log
//! Format with the cache result and the duration added, as nginx writes it
//! with `$upstream_cache_status $request_time`:
//!
//! ```text
//! 127.0.0.1 - - [23/Nov/2026:13:08:51 +0000] "GET /o.bin HTTP/1.1" 200 4096 "-" "curl/7.88.1" cache=origin rt=0.052923 host="www.origin.test.8080.coral.test:8090"
//! ```
//!
//! Off by default; `access_log = "PATH"` in `[proxy]` or `--access-log
//! PATH` turns it on (`/dev/stdout` writes to standard output). Each core
//! formats its lines into its own buffer (no lock, no atomic), and hands the
//! buffer to one writer thread when it holds `FLUSH_BYTES` or every
//! `FLUSH_INTERVAL`, and when the core stops; the executors never write to
//! the file. The queue to the writer is bounded (`BATCHES_QUEUED_MAX`): a
//! batch that finds it full is dropped and its lines counted
//! (`coral_access_log_lines_dropped_total`), so a slow disk never stalls
//! serving. The writer appends (`O_APPEND`) each batch with one write of
//! whole lines; fields are cut so a line stays under `PIPE_BUF` (4096
//! bytes). SIGUSR1 makes the writer reopen the path (logrotate's
//! `postrotate`), as nginx's USR1.

use std::cell::{Cell, RefCell};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::metrics::CacheResult;

/// A core hands its buffer to the writer once it holds this many bytes.
const FLUSH_BYTES: usize = 32 << 10;
/// ... and at least this often when it holds any.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Batches queued for the writer before new ones are dropped.
const BATCHES_QUEUED_MAX: usize = crate::limits::ACCESS_LOG.batches_queued_max;
/// Escaped bytes kept of each field (the line stays under PIPE_BUF).
const REQUEST_LINE_BYTES_MAX: usize = crate::limits::ACCESS_LOG.request_line_bytes_max;
const REFERER_BYTES_MAX: usize = crate::limits::ACCESS_LOG.referer_bytes_max;
const USER_AGENT_BYTES_MAX: usize = crate::limits::ACCESS_LOG.user_agent_bytes_max;
const HOST_BYTES_MAX: usize = crate::limits::ACCESS_LOG.host_bytes_max;
/// The longest line: every field at its bound, and 200 bytes for the
/// address (at most 39), the date (28), status, bytes, cache and duration.
const _: () = assert!(
    REQUEST_LINE_BYTES_MAX + REFERER_BYTES_MAX + USER_AGENT_BYTES_MAX + HOST_BYTES_MAX + 200 < 4096
);

enum Msg {
    Lines(Vec<u8>),
    Reopen,
    Stop,
}

struct Log {
    tx: SyncSender<Msg>,
}

static LOG: OnceLock<Log> = OnceLock::new();
/// The writer thread, joined at shutdown (never touched while serving).
static WRITER: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

thread_local! {
    /// This core's lines not yet handed to the writer.
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Lines this core dropped because the writer's queue was full.
    static DROPPED: Cell<u64> = const { Cell::new(0) };
    /// The second last formatted and its `[dd/Mon/yyyy:hh:mm:ss +0000]`.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
}

/// Opens `path` for appending and starts the writer thread. Called once,
/// before the cores start.
pub fn init(path: &Path) -> Result<(), String> {
    let file =
        open(path).map_err(|e| format!("cannot open the access log {}: {e}", path.display()))?;
    let (tx, rx) = sync_channel(BATCHES_QUEUED_MAX);
    if LOG.set(Log { tx }).is_err() {
        return Err("the access log is already open".into());
    }
    let path = path.to_path_buf();
    let handle = std::thread::Builder::new()
        .name("coral-access-log".into())
        .spawn(move || writer(path, file, rx))
        .map_err(|e| format!("cannot start the access log writer: {e}"))?;
    *WRITER.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
    Ok(())
}

fn writer(path: PathBuf, mut file: std::fs::File, rx: Receiver<Msg>) {
    let mut failing = false;
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Lines(b) => match file.write_all(&b) {
                Ok(()) => failing = false,
                Err(e) => {
                    if !failing {
                        tracing::warn!(path = %path.display(), error = %e, "access log write failed");
                    }
                    failing = true;
                }
            },
            Msg::Reopen => match open(&path) {
                Ok(f) => {
                    file = f;
                    failing = false;
                    tracing::info!(path = %path.display(), "SIGUSR1: access log reopened");
                }
                Err(e) => tracing::error!(
                    path = %path.display(),
                    error = %e,
                    "SIGUSR1: cannot reopen the access log; still writing to the old file"
                ),
            },
            Msg::Stop => break,
        }
    }
    let _ = file.flush();
}

/// Whether the access log is on.
pub fn enabled() -> bool {
    LOG.get().is_some()
}

/// Asks the writer to reopen the path (SIGUSR1). Off the executors.
pub fn reopen() {
    if let Some(l) = LOG.get() {
        let _ = l.tx.send(Msg::Reopen);
    }
}

/// Writes what is queued and stops the writer (after the cores stopped).
pub fn shutdown() {
    if let Some(l) = LOG.get() {
        let _ = l.tx.send(Msg::Stop);
    }
    let handle = WRITER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// Lines this core dropped (the writer's queue was full).
pub fn dropped() -> u64 {
    DROPPED.with(Cell::get)
}

/// Hands this core's lines to the writer; drops and counts them if its
/// queue is full.
pub fn flush() {
    let Some(l) = LOG.get() else { return };
    BUF.with(|b| {
        let mut b = b.borrow_mut();
        if b.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut *b, Vec::with_capacity(FLUSH_BYTES + 4096));
        match l.tx.try_send(Msg::Lines(batch)) {
            Ok(()) => {}
            Err(TrySendError::Full(Msg::Lines(batch)))
            | Err(TrySendError::Disconnected(Msg::Lines(batch))) => {
                let lines = batch.iter().filter(|&&c| c == b'\n').count() as u64;
                DROPPED.with(|d| d.set(d.get() + lines));
                // Keep the buffer for the next lines.
                *b = batch;
                b.clear();
            }
            Err(_) => {}
        }
    });
}

/// Flushes this core's lines every `FLUSH_INTERVAL` until `stopping`.
pub async fn flush_loop(stopping: impl Fn() -> bool) {
    while !stopping() {
        glommio::timer::sleep(FLUSH_INTERVAL).await;
        flush();
    }
}

/// The request's parts a line needs, escaped as they are read (kept per
/// connection: its buffers are reused).
#[derive(Default)]
pub struct Request {
    request: Vec<u8>,
    referer: Vec<u8>,
    agent: Vec<u8>,
    host: Vec<u8>,
}

impl Request {
    /// Notes the request `head` (before it is answered).
    pub fn note(&mut self, head: &coral::proxy::http::RequestHead) {
        self.request.clear();
        let line = [
            head.method.as_str().as_bytes(),
            b" ",
            head.target.as_bytes(),
            if head.minor_version == 0 {
                b" HTTP/1.0"
            } else {
                b" HTTP/1.1"
            },
        ];
        for part in line {
            escape_into(&mut self.request, part, REQUEST_LINE_BYTES_MAX);
        }
        let field = |out: &mut Vec<u8>, name: &str, max: usize| {
            out.clear();
            match head.headers.get(name) {
                Some(v) => escape_into(out, v, max),
                None => out.push(b'-'),
            }
        };
        field(&mut self.referer, "referer", REFERER_BYTES_MAX);
        field(&mut self.agent, "user-agent", USER_AGENT_BYTES_MAX);
        field(&mut self.host, "host", HOST_BYTES_MAX);
    }

    /// A request that could not be parsed: logged as `"-"`.
    pub fn unparsed(&mut self) {
        for f in [
            &mut self.request,
            &mut self.referer,
            &mut self.agent,
            &mut self.host,
        ] {
            f.clear();
            f.push(b'-');
        }
    }
}

/// Appends `src` escaped as nginx does (`"`, `\`, control and non-ASCII
/// bytes as `\xHH`), stopping before `out` exceeds `max` bytes.
fn escape_into(out: &mut Vec<u8>, src: &[u8], max: usize) {
    for &c in src {
        let plain = (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\';
        let need = if plain { 1 } else { 4 };
        if out.len() + need > max {
            return;
        }
        if plain {
            out.push(c);
        } else {
            let _ = write!(out, "\\x{c:02X}");
        }
    }
}

/// `[dd/Mon/yyyy:hh:mm:ss +0000]` for Unix time `secs` (UTC).
fn clf_date(secs: u64, out: &mut String) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    out.clear();
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "[{day:02}/{}/{year}:{:02}:{:02}:{:02} +0000]",
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
}

/// Appends one line for a response to this core's buffer (and hands the
/// buffer to the writer once it is large).
pub fn log(
    client: Option<SocketAddr>,
    req: &Request,
    status: u16,
    body_bytes: u64,
    cache: CacheResult,
    took: Duration,
) {
    if !enabled() {
        return;
    }
    let now = crate::clock::unix_now();
    let full = BUF.with(|b| {
        let mut b = b.borrow_mut();
        match client {
            Some(a) => {
                let _ = write!(b, "{}", a.ip());
            }
            None => b.push(b'-'),
        }
        b.extend_from_slice(b" - - ");
        DATE.with(|d| {
            let mut d = d.borrow_mut();
            if d.0 != now {
                d.0 = now;
                clf_date(now, &mut d.1);
            }
            b.extend_from_slice(d.1.as_bytes());
        });
        b.extend_from_slice(b" \"");
        b.extend_from_slice(&req.request);
        let _ = write!(b, "\" {status} {body_bytes} \"");
        b.extend_from_slice(&req.referer);
        b.extend_from_slice(b"\" \"");
        b.extend_from_slice(&req.agent);
        let _ = write!(
            b,
            "\" cache={} rt={:.6} host=\"",
            cache.label(),
            took.as_secs_f64()
        );
        b.extend_from_slice(&req.host);
        b.extend_from_slice(b"\"\n");
        b.len() >= FLUSH_BYTES
    });
    if full {
        flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_clf_in_utc() {
        let mut s = String::new();
        clf_date(0, &mut s);
        assert_eq!(s, "[01/Jan/1970:00:00:00 +0000]");
        clf_date(951_782_400 + 86_399, &mut s); // 2000-02-29 23:59:59
        assert_eq!(s, "[29/Feb/2000:23:59:59 +0000]");
        clf_date(1_795_436_178, &mut s);
        assert_eq!(s, "[23/Nov/2026:12:16:18 +0000]");
    }

    /// A writer that cannot keep up (a FIFO nobody reads: its writes block
    /// once the pipe is full) never blocks the cores: batches that find the
    /// queue full are dropped and their lines counted. The only test in
    /// this binary that opens the (process-wide) log.
    #[test]
    fn a_stuck_writer_drops_and_counts_lines_instead_of_blocking() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::env::temp_dir().join(format!("coral-accesslog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A reader that never reads, so opening for writing does not wait.
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        init(&fifo).unwrap();
        let mut req = Request::default();
        req.unparsed();
        let lines = 200_000u64;
        let start = std::time::Instant::now();
        for _ in 0..lines {
            log(None, &req, 200, 1, CacheResult::Local, Duration::ZERO);
        }
        flush();
        // Far more than the pipe (64 KiB) and the queue (64 batches of
        // 32 KiB) hold: most lines are dropped, counted, and nothing waited.
        assert!(dropped() > lines / 2, "dropped {}", dropped());
        assert!(dropped() < lines);
        assert!(start.elapsed() < Duration::from_secs(30));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fields_are_escaped_and_bounded() {
        let mut out = Vec::new();
        escape_into(&mut out, b"a\"b\\c\x01\xff", 100);
        assert_eq!(out, b"a\\x22b\\x5Cc\\x01\\xFF");
        out.clear();
        escape_into(&mut out, &[b'x'; 5000], REQUEST_LINE_BYTES_MAX);
        assert_eq!(out.len(), REQUEST_LINE_BYTES_MAX);
    }
}
