//! HTTP/1.1 framing (RFC 9112): request and response heads, body framing, chunked
//! bodies, keep-alive.
//!
//! `httparse` tokenises the head; it is lenient where request smuggling lives (it accepts
//! duplicate `Content-Length`, `Content-Length` beside `Transfer-Encoding`, and bare LF
//! line endings), so before and after it we apply our own rules:
//!
//! - the head is scanned first: every line ends in CRLF (no bare LF, no lone CR), no NUL,
//!   no obs-fold (a line starting with SP or HTAB), and the head, the request line and the
//!   number of fields stay under [`Limits`];
//! - then the fields: one `Host` (exactly one in HTTP/1.1), valid names and values, at most
//!   one `Content-Length` of plain digits, never beside `Transfer-Encoding`, and a
//!   `Transfer-Encoding` whose only coding is a final `chunked`.
//!
//! Every rejection is a typed [`HttpError`] carrying the status to answer with (400, 413,
//! 414, 431, 501, 505; 502 for an origin's response); the server then closes the
//! connection. Nothing here panics on input: no indexing the network can steer.

use smallvec::SmallVec;

mod chunked;
pub use chunked::{write_chunk, write_last_chunk, ChunkedDecoder};

/// Limits on what a peer may send, in bytes or counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The whole head, start line to the empty line (431 beyond; 502 for responses).
    pub head_bytes_max: usize,
    /// Header fields in one head (431 beyond).
    pub headers_max: usize,
    /// The request target (414 beyond).
    pub target_bytes_max: usize,
    /// One chunk of a chunked body (413 beyond).
    pub chunk_size_max: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            head_bytes_max: 16 * 1024,
            headers_max: 100,
            target_bytes_max: 8 * 1024,
            chunk_size_max: 1 << 30,
        }
    }
}

/// Bytes of a chunk-size line, extensions included.
pub const CHUNK_LINE_BYTES_MAX: usize = crate::limits::PROXY.chunk_line_bytes_max;

/// Bytes a request line may have beyond its target (method, spaces, version).
pub(crate) const REQUEST_LINE_OVERHEAD_BYTES: usize = 64;

/// A message that cannot be accepted, and the status that says why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpError {
    /// The status code to answer with: 400, 413, 414, 431, 501, 505; 502 when an origin's
    /// response is at fault.
    pub status: u16,
    /// What was wrong, for logs and the error body.
    pub reason: &'static str,
}

impl HttpError {
    const fn bad(reason: &'static str) -> HttpError {
        HttpError {
            status: 400,
            reason,
        }
    }

    /// The same fault blamed on an origin: 502 Bad Gateway.
    pub const fn from_origin(self) -> HttpError {
        HttpError {
            status: 502,
            reason: self.reason,
        }
    }
}

impl core::fmt::Display for HttpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status,
            status_reason(self.status),
            self.reason
        )
    }
}

impl std::error::Error for HttpError {}

/// The standard reason phrase of a status code (RFC 9110 §15).
pub fn status_reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// A request method. The proxy serves GET and HEAD; anything else is carried as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD: the head of a GET, no body.
    Head,
    /// Any other method token, as received.
    Other(String),
}

impl Method {
    /// The method token.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Other(m) => m,
        }
    }
}

/// How a message body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`: decode with [`ChunkedDecoder`].
    Chunked,
    /// Until the connection closes (responses only).
    UntilClose,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    start: usize,
    name_end: usize,
    end: usize,
}

/// Header fields in order: lower-case names and raw value bytes (leading and trailing
/// whitespace removed). One buffer holds them all.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    data: Vec<u8>,
    entries: SmallVec<[Entry; 12]>,
}

impl core::fmt::Debug for Headers {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(n, v)| (n, String::from_utf8_lossy(v))))
            .finish()
    }
}

impl Headers {
    /// No fields.
    pub fn new() -> Headers {
        Headers::default()
    }

    /// The number of fields (a name that appears twice counts twice).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn name_of(&self, e: &Entry) -> &str {
        // Names enter only through `insert(&str)`, lower-cased as ASCII: valid UTF-8.
        core::str::from_utf8(self.data.get(e.start..e.name_end).unwrap_or_default())
            .unwrap_or_default()
    }

    fn value_of(&self, e: &Entry) -> &[u8] {
        self.data.get(e.name_end..e.end).unwrap_or_default()
    }

    /// The fields in order, as (lower-case name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.entries
            .iter()
            .map(move |e| (self.name_of(e), self.value_of(e)))
    }

    /// The first value of `name` (any case).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|e| self.name_is(e, name))
            .map(|e| self.value_of(e))
    }

    /// The first value of `name` as text, if it is UTF-8.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| core::str::from_utf8(v).ok())
    }

    /// Every value of `name` (any case), in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.entries
            .iter()
            .filter(move |e| self.name_is(e, name))
            .map(move |e| self.value_of(e))
    }

    fn name_is(&self, e: &Entry, name: &str) -> bool {
        e.name_end - e.start == name.len()
            && self
                .data
                .get(e.start..e.name_end)
                .is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
    }

    /// No fields, with room for `bytes` of names and values.
    pub fn with_capacity(bytes: usize) -> Headers {
        Headers {
            data: Vec::with_capacity(bytes),
            entries: SmallVec::new(),
        }
    }

    /// How many fields are named `name`.
    pub fn count(&self, name: &str) -> usize {
        self.get_all(name).count()
    }

    /// Whether `name` is present.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Appends a field. The name is stored in lower case.
    pub fn insert(&mut self, name: &str, value: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(name.as_bytes());
        let name_end = self.data.len();
        if let Some(n) = self.data.get_mut(start..name_end) {
            n.make_ascii_lowercase();
        }
        self.data.extend_from_slice(value);
        self.entries.push(Entry {
            start,
            name_end,
            end: self.data.len(),
        });
    }

    /// Replaces every field named `name` with one field.
    pub fn set(&mut self, name: &str, value: &[u8]) {
        self.remove(name);
        self.insert(name, value);
    }

    /// Removes every field named `name`; returns how many there were.
    pub fn remove(&mut self, name: &str) -> usize {
        let before = self.entries.len();
        let data = &self.data;
        self.entries.retain(|e| {
            !data
                .get(e.start..e.name_end)
                .is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
        });
        let removed = before - self.entries.len();
        if self.entries.is_empty() {
            self.data.clear();
        }
        removed
    }

    /// The comma-separated list elements of every `name` field, trimmed, empty ones
    /// skipped (RFC 9110 §5.6.1).
    pub fn list<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.get_all(name)
            .flat_map(|v| v.split(|&b| b == b','))
            .map(trim_ows)
            .filter(|e| !e.is_empty())
    }

    /// Whether some list element of `name` equals `token`, ignoring case
    /// (`Connection: close`, `Cache-Control: no-store`).
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.list(name)
            .any(|e| e.eq_ignore_ascii_case(token.as_bytes()))
    }
}

/// Removes optional whitespace (SP, HTAB) at both ends.
pub fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The method.
    pub method: Method,
    /// The request target as received: origin-form (`/a?b`), absolute-form
    /// (`http://h/a`), authority-form or `*`; visible ASCII only.
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// The header fields.
    pub headers: Headers,
    /// How the body is delimited: `Empty`, `Length` or `Chunked`.
    pub framing: Framing,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
}

impl RequestHead {
    /// The host the request names: the authority of an absolute-form target, which
    /// overrides `Host` (RFC 9112 §3.2.2), or else the `Host` field.
    pub fn host(&self) -> Option<&str> {
        if let Some((authority, _)) = split_absolute(&self.target) {
            return Some(authority);
        }
        self.headers.get_str("host")
    }

    /// The origin-form part of the target: `/path?query` (`/` for an absolute-form
    /// target without a path); `None` for authority-form and `*`.
    pub fn path(&self) -> Option<&str> {
        if self.target.starts_with('/') {
            return Some(&self.target);
        }
        split_absolute(&self.target).map(|(_, p)| if p.is_empty() { "/" } else { p })
    }
}

/// Splits an absolute-form `http://authority/path` target (scheme in any case) into
/// authority and path (possibly empty, or starting with `/` or `?`).
pub fn split_absolute(target: &str) -> Option<(&str, &str)> {
    let scheme = target.get(..7)?;
    if !scheme.eq_ignore_ascii_case("http://") {
        return None;
    }
    let rest = target.get(7..)?;
    let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(rest.split_at(cut))
}

/// A parsed response head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code (100–999).
    pub status: u16,
    /// The reason phrase (possibly empty).
    pub reason: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// The header fields.
    pub headers: Headers,
    /// How the body is delimited.
    pub framing: Framing,
    /// Whether the connection may carry another exchange after this one.
    pub keep_alive: bool,
}

impl ResponseHead {
    /// Appends the head as HTTP/1.1 bytes (status line, fields, empty line), as stored in
    /// the cache; [`parse_response_head`] reads it back.
    pub fn write(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(b"HTTP/1.1 ");
        write_decimal(buf, u64::from(self.status));
        buf.push(b' ');
        buf.extend_from_slice(self.reason.as_bytes());
        buf.extend_from_slice(b"\r\n");
        write_fields(&self.headers, buf);
        buf.extend_from_slice(b"\r\n");
    }
}

/// Appends `name: value\r\n` for every field.
pub fn write_fields(headers: &Headers, buf: &mut Vec<u8>) {
    for (n, v) in headers.iter() {
        buf.extend_from_slice(n.as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(v);
        buf.extend_from_slice(b"\r\n");
    }
}

/// Appends a complete response the proxy makes itself (an error, a 405, a 504): the
/// status line, `extra` fields, `Content-Type: text/plain`, `Content-Length`,
/// `Connection`, and `body` (left out when `head_only`, for a HEAD request).
pub fn write_simple_response(
    status: u16,
    extra: &Headers,
    body: &[u8],
    keep_alive: bool,
    head_only: bool,
    buf: &mut Vec<u8>,
) {
    buf.extend_from_slice(b"HTTP/1.1 ");
    write_decimal(buf, u64::from(status));
    buf.push(b' ');
    buf.extend_from_slice(status_reason(status).as_bytes());
    buf.extend_from_slice(b"\r\n");
    write_fields(extra, buf);
    buf.extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: ");
    write_decimal(buf, body.len() as u64);
    buf.extend_from_slice(if keep_alive {
        &b"\r\nConnection: keep-alive\r\n\r\n"[..]
    } else {
        &b"\r\nConnection: close\r\n\r\n"[..]
    });
    if !head_only {
        buf.extend_from_slice(body);
    }
}

/// Where a head ends, found by [`scan_head`].
pub(crate) struct Scan {
    /// Bytes from the start of `buf` to just past the empty line.
    pub(crate) end: usize,
    /// Header field lines (the start line not counted).
    pub(crate) fields: usize,
}

/// Scans a head for its end and applies the rules httparse does not: CRLF only (no bare
/// LF, no lone CR), no NUL, no obs-fold, and the size limits. `line_max` bounds the start
/// line (`line_status` is the status for exceeding it).
pub(crate) fn scan_head(
    buf: &[u8],
    limits: &Limits,
    line_max: usize,
    line_status: u16,
) -> Result<Option<Scan>, HttpError> {
    let too_big = |on_first_line: bool| -> HttpError {
        if on_first_line {
            HttpError {
                status: line_status,
                reason: "start line too long",
            }
        } else {
            HttpError {
                status: 431,
                reason: "header section too large",
            }
        }
    };
    let mut i = 0;
    // RFC 9112 §2.2: a server SHOULD ignore at least one empty line before the request
    // line (a client's stray CRLF after a body). They count toward the head limit.
    while let (Some(b'\r'), Some(b'\n')) = (buf.get(i), buf.get(i + 1)) {
        i += 2;
        if i > limits.head_bytes_max {
            return Err(too_big(false));
        }
    }
    let mut line_start = i;
    let mut first_line = true;
    let mut fields = 0usize;
    loop {
        // Skip to the next byte that matters (CR, LF, NUL), then check the limits on
        // what was skipped: the same answers as byte by byte, at a fraction of the cost.
        let rest = buf.get(i..).unwrap_or_default();
        let special = find_line_byte(rest);
        i += special.unwrap_or(rest.len());
        if first_line && i - line_start > line_max {
            return Err(too_big(true));
        }
        if i > limits.head_bytes_max {
            return Err(too_big(first_line));
        }
        let Some(&b) = buf.get(i) else {
            return Ok(None);
        };
        match b {
            0 => return Err(HttpError::bad("NUL in the head")),
            b'\n' => return Err(HttpError::bad("bare LF line ending")),
            b'\r' => {
                let Some(&next) = buf.get(i + 1) else {
                    return Ok(None);
                };
                if next != b'\n' {
                    return Err(HttpError::bad("lone CR in the head"));
                }
                if i == line_start {
                    if first_line {
                        return Err(HttpError::bad("empty start line"));
                    }
                    return Ok(Some(Scan { end: i + 2, fields }));
                }
                if first_line {
                    first_line = false;
                } else {
                    fields += 1;
                    if fields > limits.headers_max {
                        return Err(HttpError {
                            status: 431,
                            reason: "too many header fields",
                        });
                    }
                }
                i += 2;
                line_start = i;
                if i > limits.head_bytes_max {
                    return Err(too_big(false));
                }
                // RFC 9112 §5.2: obs-fold is rejected (400); §2.2: so is whitespace
                // between the start line and the first field.
                if let Some(b' ' | b'\t') = buf.get(i) {
                    return Err(HttpError::bad("obs-fold or whitespace before a field line"));
                }
            }
            _ => i += 1,
        }
    }
}

/// Field storage for httparse: on the stack for ordinary heads.
const FIELDS_ON_STACK: usize = 32;

fn collect_headers(raw: &[httparse::Header<'_>], head_len: usize) -> Result<Headers, HttpError> {
    let mut headers = Headers::with_capacity(head_len);
    for h in raw {
        let value = trim_ows(h.value);
        // RFC 9110 §5.5 (values: field-vchar / SP / HTAB / obs-text, no CTL) and §5.1
        // (names: tokens) are httparse's checks, vectorised; the `rfc9110_5_*` rows of the
        // malformed-request table hold it to them. An empty name cannot come through.
        if h.name.is_empty() {
            return Err(HttpError::bad("invalid field name"));
        }
        headers.insert(h.name, value);
    }
    Ok(headers)
}

/// A `tchar` of RFC 9110 §5.6.2.
pub fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

static TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    t
};

/// The bytes of a reg-name (RFC 3986 §3.2.2: unreserved, sub-delims, `%`).
static REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
            );
        b += 1;
    }
    t
};

/// The index of the first CR, LF or NUL in `s`: eight bytes at a time, a word holding no
/// byte below 0x0E is skipped whole (HTAB, the only such byte a head often holds, sends
/// that word to the bytewise check).
fn find_line_byte(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let is_special = |b: u8| b == b'\r' || b == b'\n' || b == 0;
    let mut i = 0;
    while let Some(word) = s.get(i..i + 8) {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            break;
        };
        let x = u64::from_le_bytes(word);
        if x.wrapping_sub(ONES * 0x0E) & !x & HIGHS != 0 {
            if let Some(p) = word.iter().position(|&b| is_special(b)) {
                return Some(i + p);
            }
        }
        i += 8;
    }
    s.get(i..)?
        .iter()
        .position(|&b| is_special(b))
        .map(|p| i + p)
}

fn map_httparse(e: httparse::Error, version_status: u16) -> HttpError {
    match e {
        httparse::Error::HeaderName => HttpError::bad("invalid field name"),
        httparse::Error::HeaderValue => HttpError::bad("invalid field value"),
        httparse::Error::NewLine => HttpError::bad("invalid line ending"),
        httparse::Error::Status => HttpError::bad("invalid status"),
        httparse::Error::Token => HttpError::bad("invalid token in the start line"),
        httparse::Error::TooManyHeaders => HttpError {
            status: 431,
            reason: "too many header fields",
        },
        httparse::Error::Version => HttpError {
            status: version_status,
            reason: "unsupported HTTP version",
        },
    }
}

/// Whether a start line names a major version other than 1 (`HTTP/2.0`): 505, not 400.
fn names_other_major_version(line: &[u8]) -> bool {
    let Some(pos) = line.windows(5).rposition(|w| w == b"HTTP/") else {
        return false;
    };
    matches!(line.get(pos + 5), Some(d) if d.is_ascii_digit() && *d != b'1')
}

/// The content length a message declares: at most one `Content-Length`, plain digits
/// (RFC 9110 §8.6). Any second field, even an equal one, or a list (`5, 5`) is refused:
/// RFC 9112 §6.3 lets a recipient merge equal values, but two parsers that disagree on
/// whether to merge are how bodies get smuggled, so we do not.
fn content_length(headers: &Headers) -> Result<Option<u64>, HttpError> {
    let mut values = headers.get_all("content-length");
    let Some(v) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(HttpError::bad("duplicate Content-Length"));
    }
    parse_digits(v)
        .map(Some)
        .ok_or(HttpError::bad("invalid Content-Length"))
}

/// 1*DIGIT as a u64, at most 19 digits (no sign, no spaces, no overflow).
pub fn parse_digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// The framing `Transfer-Encoding` asks for, if present: `Chunked` when the codings are
/// exactly a final `chunked`. Not final → 400 (RFC 9112 §6.3 item 4); `chunked` twice →
/// 400; other codings before it → 501 (we implement none, RFC 9112 §6.1).
fn transfer_encoding(headers: &Headers) -> Result<Option<Framing>, HttpError> {
    if !headers.contains("transfer-encoding") {
        return Ok(None);
    }
    let mut codings = headers.list("transfer-encoding").peekable();
    let mut any = false;
    let mut others = false;
    while let Some(c) = codings.next() {
        any = true;
        let chunked = c.eq_ignore_ascii_case(b"chunked");
        let last = codings.peek().is_none();
        if last && !chunked {
            return Err(HttpError::bad("Transfer-Encoding without a final chunked"));
        }
        if !last && chunked {
            return Err(HttpError::bad("chunked applied more than once"));
        }
        others |= !last;
    }
    if !any {
        return Err(HttpError::bad("empty Transfer-Encoding"));
    }
    if others {
        return Err(HttpError {
            status: 501,
            reason: "transfer coding not implemented",
        });
    }
    Ok(Some(Framing::Chunked))
}

/// The framing a response's `Transfer-Encoding` asks for, if present (RFC
/// 9112 §6.3 item 4, as a proxy reads a response): a final `chunked` is
/// decoded (`Chunked`), whatever codings come before it; codings without a
/// final `chunked` are read until the connection closes (`UntilClose`).
/// `chunked` applied more than once, or an empty field, is an error. The
/// codings other than `chunked` stay in the field: coral decodes none of
/// them and relays them ([`transfer_codings`]).
fn response_transfer_encoding(headers: &Headers) -> Result<Option<Framing>, HttpError> {
    if !headers.contains("transfer-encoding") {
        return Ok(None);
    }
    let codings: Vec<&[u8]> = headers.list("transfer-encoding").collect();
    let Some(last) = codings.last() else {
        return Err(HttpError::bad("empty Transfer-Encoding"));
    };
    let chunked = |c: &&[u8]| c.eq_ignore_ascii_case(b"chunked");
    let final_chunked = chunked(last);
    let inner = &codings[..codings.len() - 1];
    if inner.iter().any(chunked) {
        return Err(HttpError::bad("chunked applied more than once"));
    }
    Ok(Some(if final_chunked {
        Framing::Chunked
    } else {
        Framing::UntilClose
    }))
}

/// The transfer codings of a response other than a final `chunked`, as
/// the field lists them (`gzip`, `x-custom`), if any: coral decodes none,
/// so a response with them is relayed with them, never stored.
pub fn transfer_codings(headers: &Headers) -> Option<Vec<u8>> {
    let codings: Vec<&[u8]> = headers
        .list("transfer-encoding")
        .filter(|c| !c.eq_ignore_ascii_case(b"chunked"))
        .collect();
    if codings.is_empty() {
        return None;
    }
    Some(codings.join(&b", "[..]))
}

/// Whether the connection stays open: HTTP/1.1 unless `Connection: close`, HTTP/1.0
/// only with `Connection: keep-alive` (RFC 9112 §9.3).
fn persistent(headers: &Headers, minor_version: u8) -> bool {
    if headers.has_token("connection", "close") {
        return false;
    }
    minor_version >= 1 || headers.has_token("connection", "keep-alive")
}

/// Whether `v` is a syntactically valid `Host` value: uri-host [":" port], where host is
/// a reg-name, IPv4 or bracketed IP literal (RFC 9110 §7.2, RFC 3986 §3.2.2).
pub(crate) fn valid_host(v: &[u8]) -> bool {
    let (host, port) = if let [b'[', ..] = v {
        match v.iter().position(|&b| b == b']') {
            Some(close) => {
                let (h, rest) = v.split_at(close + 1);
                let inner_ok = h.get(1..h.len() - 1).is_some_and(|i| {
                    i.iter()
                        .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
                });
                if !inner_ok {
                    return false;
                }
                (&[][..], rest)
            }
            None => return false,
        }
    } else {
        match v.iter().position(|&b| b == b':') {
            Some(c) => (
                v.get(..c).unwrap_or_default(),
                v.get(c..).unwrap_or_default(),
            ),
            None => (v, &[][..]),
        }
    };
    let host_ok = host.iter().all(|&b| REG_NAME[usize::from(b)]);
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    host_ok && port_ok
}

/// Parses a request head from the start of `buf`.
///
/// `Ok(None)`: the head is not complete yet (read more, then call again with all of it).
/// `Ok(Some((head, len)))`: `len` bytes were the head; the body (per `head.framing`)
/// follows. Rejects: duplicate or invalid `Content-Length`, `Content-Length` with
/// `Transfer-Encoding`, `Transfer-Encoding` other than a final `chunked`, bare LF,
/// obs-fold, NUL or lone CR, two `Host` fields, no `Host` in HTTP/1.1, invalid names or
/// values, and heads over the limits (414 for the request line, 431 for the rest).
pub fn parse_request_head(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(RequestHead, usize)>, HttpError> {
    let line_max = limits
        .target_bytes_max
        .saturating_add(REQUEST_LINE_OVERHEAD_BYTES);
    let Some(scan) = scan_head(buf, limits, line_max, 414)? else {
        return Ok(None);
    };
    let head = buf.get(..scan.end).unwrap_or_default();
    let mut stack = [httparse::EMPTY_HEADER; FIELDS_ON_STACK];
    let mut heap = Vec::new();
    let storage: &mut [httparse::Header<'_>] = if scan.fields <= FIELDS_ON_STACK {
        &mut stack
    } else {
        heap.resize(scan.fields, httparse::EMPTY_HEADER);
        &mut heap
    };
    let mut req = httparse::Request::new(storage);
    match req.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == scan.end => {}
        Ok(_) => return Err(HttpError::bad("malformed head")),
        Err(e) => {
            let status = if names_other_major_version(head) {
                505
            } else {
                400
            };
            return Err(map_httparse(e, status));
        }
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(HttpError::bad("malformed request line"));
    };
    if target.len() > limits.target_bytes_max {
        return Err(HttpError {
            status: 414,
            reason: "request target too long",
        });
    }
    if target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(HttpError::bad("invalid request target"));
    }
    let headers = collect_headers(req.headers, scan.end)?;
    let minor_version = if version == 0 { 0 } else { 1 };
    // RFC 9112 §3.2: exactly one Host in HTTP/1.1; never two.
    match (headers.count("host"), headers.get("host")) {
        (2.., _) => return Err(HttpError::bad("more than one Host")),
        (0, _) if minor_version >= 1 => return Err(HttpError::bad("missing Host")),
        (_, Some(h)) if !valid_host(h) => return Err(HttpError::bad("invalid Host")),
        _ => {}
    }
    let framing = request_framing(&headers, minor_version)?;
    let keep_alive = persistent(&headers, minor_version);
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        m => Method::Other(m.to_string()),
    };
    Ok(Some((
        RequestHead {
            method,
            target: target.to_string(),
            minor_version,
            headers,
            framing,
            keep_alive,
        },
        scan.end,
    )))
}

/// RFC 9112 §6.3 for requests: Transfer-Encoding (only in 1.1, never with
/// Content-Length), else Content-Length, else no body.
fn request_framing(headers: &Headers, minor_version: u8) -> Result<Framing, HttpError> {
    let te = transfer_encoding(headers)?;
    let cl = content_length(headers)?;
    match (te, cl) {
        (Some(_), Some(_)) => Err(HttpError::bad("Content-Length with Transfer-Encoding")),
        // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding is faulty.
        (Some(_), None) if minor_version == 0 => {
            Err(HttpError::bad("Transfer-Encoding in HTTP/1.0"))
        }
        (Some(f), None) => Ok(f),
        (None, Some(0)) | (None, None) => Ok(Framing::Empty),
        (None, Some(n)) => Ok(Framing::Length(n)),
    }
}

/// Parses an origin's (or a peer's) response head from the start of `buf`. Errors carry
/// status 502: the fault is upstream. `request_was_head`: the response has no body.
pub fn parse_response_head(
    buf: &[u8],
    request_was_head: bool,
    limits: &Limits,
) -> Result<Option<(ResponseHead, usize)>, HttpError> {
    parse_response_inner(buf, request_was_head, limits).map_err(HttpError::from_origin)
}

fn parse_response_inner(
    buf: &[u8],
    request_was_head: bool,
    limits: &Limits,
) -> Result<Option<(ResponseHead, usize)>, HttpError> {
    let line_max = limits
        .target_bytes_max
        .saturating_add(REQUEST_LINE_OVERHEAD_BYTES);
    let Some(scan) = scan_head(buf, limits, line_max, 502)? else {
        return Ok(None);
    };
    let head = buf.get(..scan.end).unwrap_or_default();
    let mut stack = [httparse::EMPTY_HEADER; FIELDS_ON_STACK];
    let mut heap = Vec::new();
    let storage: &mut [httparse::Header<'_>] = if scan.fields <= FIELDS_ON_STACK {
        &mut stack
    } else {
        heap.resize(scan.fields, httparse::EMPTY_HEADER);
        &mut heap
    };
    let mut resp = httparse::Response::new(storage);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == scan.end => {}
        Ok(_) => return Err(HttpError::bad("malformed head")),
        Err(e) => return Err(map_httparse(e, 400)),
    }
    let (Some(status), Some(version)) = (resp.code, resp.version) else {
        return Err(HttpError::bad("malformed status line"));
    };
    if !(100..=999).contains(&status) {
        return Err(HttpError::bad("invalid status"));
    }
    let headers = collect_headers(resp.headers, scan.end)?;
    let minor_version = if version == 0 { 0 } else { 1 };
    let reason = resp.reason.unwrap_or("").to_string();
    // RFC 9112 §6.3 items 1–7.
    let framing =
        if request_was_head || (100..200).contains(&status) || status == 204 || status == 304 {
            Framing::Empty
        } else {
            let te = response_transfer_encoding(&headers)?;
            let cl = content_length(&headers)?;
            match (te, cl) {
                // Item 3: TE overrides CL, "ought to be handled as an error": we do.
                (Some(_), Some(_)) => {
                    return Err(HttpError::bad("Content-Length with Transfer-Encoding"))
                }
                (Some(_), None) if minor_version == 0 => {
                    return Err(HttpError::bad("Transfer-Encoding in HTTP/1.0"))
                }
                (Some(f), None) => f,
                (None, Some(0)) => Framing::Empty,
                (None, Some(n)) => Framing::Length(n),
                (None, None) => Framing::UntilClose,
            }
        };
    let keep_alive = framing != Framing::UntilClose && persistent(&headers, minor_version);
    Ok(Some((
        ResponseHead {
            status,
            reason,
            minor_version,
            headers,
            framing,
            keep_alive,
        },
        scan.end,
    )))
}

/// Appends a decimal number.
pub fn write_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut k = digits.len();
    loop {
        k -= 1;
        digits[k] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[k..]);
}

#[cfg(test)]
mod tests;
