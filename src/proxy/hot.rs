//! The fast path of a cache hit (issue #11): a plain request recognised
//! without building owned fields, a per-core table from the request's
//! `Host` and target bytes to the object's cache key (no URL
//! canonicalisation, no SHA-1 on a hit), and the client head of a hit kept
//! built while nothing it depends on changes (its only varying parts, `Age`
//! and the `Cache-Status` ttl, change once a second).
//!
//! Everything here is pure: the caller (`shards/src/proxy/server.rs`) looks
//! the object up in the cache on every hit and checks the stored head's bytes,
//! so a replaced, evicted or stale object is never answered from here.

use crate::dsht::id::KeyedBuildHasher;
use crate::proxy::http::{self, Framing, Limits, ResponseHead};
use crate::proxy::policy::{self, CacheStatus, ClientHeadInfo, RangeAnswer};

/// Header fields a plain request may carry: none of them changes a hit's
/// answer (no conditional, `Range`, cache directive, `Authorization`,
/// `CDN-Loop`, `Coral-No-Forward` or body framing). A request with any other
/// field takes the full path, which applies every rule.
const PLAIN_FIELDS: [&[u8]; 7] = [
    b"host",
    b"connection",
    b"user-agent",
    b"accept",
    b"accept-encoding",
    b"accept-language",
    b"referer",
];

/// Header fields of a plain request (more: the full path).
const PLAIN_FIELDS_MAX: usize = 16;

/// A complete, valid GET or HEAD in origin form whose answer, on a fresh
/// hit, depends only on the object: see [`parse_plain`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainRequest<'a> {
    /// HEAD rather than GET.
    pub head_only: bool,
    /// The `Host` field's value.
    pub host: &'a [u8],
    /// The request target (origin form: starts with `/`).
    pub target: &'a [u8],
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Whether the connection may carry another request.
    pub keep_alive: bool,
    /// Bytes of the head (there is no body).
    pub len: usize,
}

/// The request at the start of `buf` if it is plain: complete, GET or HEAD,
/// origin-form target, exactly one `Host`, no field outside a short
/// list that cannot change a hit's answer, `Connection` (if any) exactly
/// `keep-alive` or `close`. `None` otherwise, including for incomplete or
/// malformed heads: the caller then parses with
/// [`http::parse_request_head`], which answers those. The `Host` value's
/// syntax is not checked here: a plain request is answered on the fast path
/// only when a [`HotTable`] holds its exact Host and target bytes, and the
/// table learns names only from requests the full parser accepted. With a
/// valid `Host`, whatever this accepts that parser accepts with the same
/// length, host, target and keep-alive. Allocates nothing.
///
/// One pass over the bytes, stricter than the full parser (issue 27: the
/// head scan and httparse cost about 1,300 instructions a hit): the request
/// line exactly `GET`/`HEAD`, one space, a target of visible ASCII, one
/// space, `HTTP/1.1` or `HTTP/1.0`; field names of letters and `-` followed
/// at once by `:`; values of visible ASCII, space and tab. Anything else,
/// valid or not, takes the full path.
pub fn parse_plain<'a>(buf: &'a [u8], limits: &Limits) -> Option<PlainRequest<'a>> {
    let mut i = 0;
    // RFC 9112 §2.2: empty lines before the request line (as `scan_head`).
    while buf.get(i..i + 2) == Some(b"\r\n") {
        i += 2;
    }
    let rest = buf.get(i..)?;
    let head_only = if rest.starts_with(b"GET /") {
        i += 4;
        false
    } else if rest.starts_with(b"HEAD /") {
        i += 5;
        true
    } else {
        return None;
    };
    let target_start = i;
    i += visible_run(buf.get(i..)?, b'!');
    if *buf.get(i)? != b' ' {
        return None;
    }
    let target = buf.get(target_start..i)?;
    if target.len() > limits.target_bytes_max {
        return None;
    }
    // The request line is at most `target_bytes_max` + 14 bytes, within
    // the full parser's `target_bytes_max + REQUEST_LINE_OVERHEAD_BYTES`.
    let minor_version = match buf.get(i..i + 11)? {
        b" HTTP/1.1\r\n" => 1,
        b" HTTP/1.0\r\n" => 0,
        _ => return None,
    };
    i += 11;
    let mut host = None;
    let mut connection = None;
    let mut fields = 0usize;
    loop {
        if buf.get(i..i + 2)? == b"\r\n" {
            i += 2;
            break;
        }
        fields += 1;
        if fields > PLAIN_FIELDS_MAX || fields > limits.headers_max {
            return None;
        }
        let name_start = i;
        loop {
            let b = *buf.get(i)?;
            if b == b':' {
                break;
            }
            if !b.is_ascii_alphabetic() && b != b'-' {
                return None;
            }
            i += 1;
        }
        let field = plain_field(buf.get(name_start..i)?)?;
        i += 1;
        let value_start = i;
        loop {
            i += visible_run(buf.get(i..)?, b' ');
            match *buf.get(i)? {
                b'\r' => break,
                b'\t' => i += 1,
                _ => return None,
            }
        }
        if *buf.get(i + 1)? != b'\n' {
            return None;
        }
        let value = http::trim_ows(buf.get(value_start..i)?);
        i += 2;
        match field {
            PlainField::Host if host.is_some() => return None,
            PlainField::Host => host = Some(value),
            PlainField::Connection if connection.is_some() => return None,
            PlainField::Connection => connection = Some(value),
            PlainField::Other => {}
        }
    }
    if i > limits.head_bytes_max {
        return None;
    }
    let keep_alive = match connection {
        None => minor_version >= 1,
        Some(v) if v.eq_ignore_ascii_case(b"keep-alive") => true,
        Some(v) if v.eq_ignore_ascii_case(b"close") => false,
        Some(_) => return None,
    };
    Some(PlainRequest {
        head_only,
        host: host?,
        target,
        minor_version,
        keep_alive,
        len: i,
    })
}

/// The last plain request a core parsed, remembered with its parse and
/// its [`HotTable`] slot (issue 27: the parse and the table's hash were
/// about 500 instructions of a 4 KiB hit, and a client — or many — sends
/// the same request bytes again and again). [`parse_plain`] reads nothing
/// of `buf` past the request's end (its word scans stop at the request's
/// own bytes), so a buffer that starts with exactly the remembered bytes
/// holds a request with the same parse: the memo answers it with one
/// comparison. One fixed buffer of
/// [`PROXY.plain_memo_bytes_max`](crate::limits::PROXY) bytes per core; a
/// longer request is parsed every time. Allocates only in [`new`](Self::new).
pub struct PlainMemo {
    limits: Limits,
    bytes: Box<[u8]>,
    /// Bytes of the remembered request; 0: none.
    len: usize,
    head_only: bool,
    minor_version: u8,
    keep_alive: bool,
    host: (usize, usize),
    target: (usize, usize),
    /// [`HotTable::slot_of`] the request's Host and target.
    slot: usize,
    /// The [`HotTable::generation`] at which the table's slot held exactly
    /// the remembered Host and target (compared once); `None`: not known.
    /// No slot's name changes without the generation moving, so while it
    /// stands the slot is the request's entry without a comparison.
    slot_matched: Option<u64>,
}

impl PlainMemo {
    /// A memo for requests parsed under `limits` (the memo parses with its
    /// own copy: a remembered parse is never used under other limits).
    pub fn new(limits: &Limits) -> PlainMemo {
        PlainMemo {
            limits: *limits,
            bytes: vec![0; crate::limits::PROXY.plain_memo_bytes_max].into_boxed_slice(),
            len: 0,
            head_only: false,
            minor_version: 0,
            keep_alive: false,
            host: (0, 0),
            target: (0, 0),
            slot: 0,
            slot_matched: None,
        }
    }

    /// [`parse_plain`]`(buf, limits)` and the slot of its Host and target
    /// in `table`: from the memo when `buf` starts with the remembered
    /// request's bytes, else parsed (and remembered if it is short enough).
    pub fn parse<'a, V>(
        &mut self,
        buf: &'a [u8],
        table: &HotTable<V>,
    ) -> Option<(PlainRequest<'a>, usize)> {
        self.parse_noting(buf, table)
            .map(|(req, slot, _)| (req, slot))
    }

    /// [`parse`](Self::parse), and whether the memo holds the request now
    /// (answered from it, or remembered).
    #[inline(always)]
    fn parse_noting<'a, V>(
        &mut self,
        buf: &'a [u8],
        table: &HotTable<V>,
    ) -> Option<(PlainRequest<'a>, usize, bool)> {
        let len = self.len;
        if len != 0 && buf.len() >= len && buf[..len] == self.bytes[..len] {
            let req = PlainRequest {
                head_only: self.head_only,
                host: &buf[self.host.0..self.host.1],
                target: &buf[self.target.0..self.target.1],
                minor_version: self.minor_version,
                keep_alive: self.keep_alive,
                len,
            };
            return Some((req, self.slot, true));
        }
        let req = parse_plain(buf, &self.limits)?;
        let slot = table.slot_of(req.host, req.target);
        let remember = req.len <= self.bytes.len();
        if remember {
            let at = |part: &[u8]| {
                let start = part.as_ptr() as usize - buf.as_ptr() as usize;
                (start, start + part.len())
            };
            self.bytes[..req.len].copy_from_slice(&buf[..req.len]);
            self.len = req.len;
            self.head_only = req.head_only;
            self.minor_version = req.minor_version;
            self.keep_alive = req.keep_alive;
            self.host = at(req.host);
            self.target = at(req.target);
            self.slot = slot;
            self.slot_matched = None;
        }
        Some((req, slot, remember))
    }

    /// [`parse`](Self::parse), then the table's entry for the request's
    /// exactly equal Host and target bytes (`HotTable::get_mut_at`): `None`
    /// when `buf` holds no plain request, else the request and its entry if
    /// the table has one. For the remembered request the slot's name is
    /// compared once per [`HotTable::generation`], not on every call (issue
    /// 27: the two comparisons were about 40 instructions of a 4 KiB hit).
    /// A memo is used with one table (a core's). Inlined into the hit
    /// path, its one caller: the request and entry are not returned through
    /// memory.
    #[inline(always)]
    pub fn find<'a, 't, V>(
        &mut self,
        buf: &'a [u8],
        table: &'t mut HotTable<V>,
    ) -> Option<(PlainRequest<'a>, Option<&'t mut V>)> {
        let (req, slot, memo_holds) = self.parse_noting(buf, table)?;
        if memo_holds && self.slot_matched == Some(table.generation) {
            return Some((req, table.value_at(slot)));
        }
        let generation = table.generation;
        let found = table.get_mut_at(slot, req.host, req.target);
        if memo_holds {
            self.slot_matched = found.is_some().then_some(generation);
        }
        Some((req, found))
    }
}

/// How many bytes at the start of `s` lie in `lo..=0x7E` (all of them if
/// none is outside), eight at a time: the first byte below `lo`, DEL or
/// above is found with two word tests.
fn visible_run(s: &[u8], lo: u8) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let outside = |b: u8| b < lo || b >= 0x7f;
    let mut i = 0;
    while let Some(word) = s.get(i..i + 8) {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            break;
        };
        let x = u64::from_le_bytes(word);
        // A byte below `lo` sets its high bit in the first term; DEL and
        // above set theirs in the second or third. A borrow or a carry may
        // also flag bytes after a flagged one, never before it: the lowest
        // flag is the first byte outside.
        let below = x.wrapping_sub(ONES * u64::from(lo)) & !x;
        let flags = (below | x.wrapping_add(ONES) | x) & HIGHS;
        if flags != 0 {
            return i + (flags.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    let tail = s.get(i..).unwrap_or_default();
    i + tail.iter().position(|&b| outside(b)).unwrap_or(tail.len())
}

/// What a plain request's field is to [`parse_plain`].
enum PlainField {
    Host,
    Connection,
    Other,
}

/// The field named `name` if it is one of [`PLAIN_FIELDS`].
fn plain_field(name: &[u8]) -> Option<PlainField> {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    match name.len() {
        4 if is(b"host") => Some(PlainField::Host),
        10 if is(b"connection") => Some(PlainField::Connection),
        _ if PLAIN_FIELDS.iter().any(|p| is(p)) => Some(PlainField::Other),
        _ => None,
    }
}

/// What a hit's client head depends on besides the stored head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HitInputs {
    /// The second it is answered in (`Age`, the `Cache-Status` ttl).
    pub now_secs: u64,
    /// When the copy was stored.
    pub stored_secs: u64,
    /// Until when it is fresh.
    pub fresh_until_secs: u64,
    /// `corrected_initial_age` when stored.
    pub initial_age_secs: u64,
    /// The complete body's length.
    pub body_len: u64,
    /// Whether the client's connection stays open.
    pub keep_alive: bool,
}

/// A hit's client head, built by [`policy::client_head`] (exactly what the
/// full path writes for a fresh hit on a plain request) and kept until its
/// inputs change.
#[derive(Debug, Default)]
pub struct HitHead {
    built: Option<HitInputs>,
    framing: Option<Framing>,
    bytes: Vec<u8>,
}

impl HitHead {
    /// Forgets the built head (the stored head it was built from changed).
    pub fn invalidate(&mut self) {
        self.built = None;
    }

    /// The head for a fresh hit with `inputs` on the stored response
    /// `stored`, and the framing of the body that follows; built only when
    /// the inputs differ from the last call's (at most once a second for a
    /// hot object). The caller calls [`invalidate`](Self::invalidate) when
    /// `stored` is not the head of the last call.
    #[inline(always)]
    pub fn head(
        &mut self,
        stored: &ResponseHead,
        node_name: &str,
        inputs: HitInputs,
    ) -> (&[u8], Framing) {
        // Inlined into the hit path; the rebuild (once a second) is not.
        if self.built != Some(inputs) || self.framing.is_none() {
            self.build(stored, node_name, inputs);
        }
        (&self.bytes, self.framing.unwrap_or(Framing::Empty))
    }

    /// Builds the head for `inputs` (see [`head`](Self::head)).
    #[cold]
    #[inline(never)]
    fn build(&mut self, stored: &ResponseHead, node_name: &str, inputs: HitInputs) {
        let fresh = policy::Freshness {
            date_secs: inputs.stored_secs,
            fresh_until_secs: inputs.fresh_until_secs,
            response_secs: inputs.stored_secs,
            initial_age_secs: inputs.initial_age_secs,
            must_revalidate: false,
        };
        let mut cache_status = CacheStatus::hit();
        cache_status.ttl = Some(inputs.fresh_until_secs as i64 - inputs.now_secs as i64);
        let info = ClientHeadInfo {
            node_name,
            age_secs: policy::age_secs(&fresh, inputs.now_secs),
            cache_status,
            range: RangeAnswer::Full,
            body_len: Some(inputs.body_len),
            keep_alive: inputs.keep_alive,
            not_modified: false,
            // Only a body without a length depends on it; a hit's has one.
            client_minor_version: 1,
        };
        self.bytes.clear();
        self.framing = Some(policy::client_head(stored, &info, &mut self.bytes));
        self.built = Some(inputs);
    }
}

/// A bounded per-core table from a request's `Host` and target bytes to `V`
/// (the proxy keeps the cache key and the built head there). Direct-mapped
/// with a keyed hash: an insert replaces whatever held its slot, a lookup
/// costs one hash and one comparison, and a crafted flood of names only
/// sends requests down the full path. Allocates only on insert.
pub struct HotTable<V> {
    slots: Box<[Option<Slot<V>>]>,
    hasher: KeyedBuildHasher,
    /// Moves on every insert and removal (every change of a slot's name):
    /// what [`PlainMemo::find`] checks before it skips a comparison.
    generation: u64,
}

struct Slot<V> {
    /// `host` then `target`.
    name: Vec<u8>,
    host_len: usize,
    value: V,
}

impl<V> HotTable<V> {
    /// A table of `slots` entries (rounded up to a power of two, at least 1).
    pub fn new(slots: usize, hasher: KeyedBuildHasher) -> HotTable<V> {
        let n = slots.max(1).next_power_of_two();
        HotTable {
            slots: (0..n).map(|_| None).collect(),
            hasher,
            generation: 0,
        }
    }

    /// The count of changes to slots' names so far (inserts and removals).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The value in `slot` whatever its name: for [`PlainMemo::find`], which
    /// compared the name at this generation.
    fn value_at(&mut self, slot: usize) -> Option<&mut V> {
        Some(&mut self.slots.get_mut(slot)?.as_mut()?.value)
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn index(&self, host: &[u8], target: &[u8]) -> usize {
        (self.hasher.hash_one((host, target)) as usize) & (self.slots.len() - 1)
    }

    /// The slot `host` and `target` map to (the same for the table's
    /// life: its hasher never changes), for [`get_mut_at`](Self::get_mut_at).
    pub fn slot_of(&self, host: &[u8], target: &[u8]) -> usize {
        self.index(host, target)
    }

    /// The value for exactly these `host` and `target` bytes.
    pub fn get_mut(&mut self, host: &[u8], target: &[u8]) -> Option<&mut V> {
        let i = self.index(host, target);
        self.get_mut_at(i, host, target)
    }

    /// [`get_mut`](Self::get_mut) with the slot already known
    /// ([`slot_of`](Self::slot_of) these bytes): no hash.
    pub fn get_mut_at(&mut self, slot: usize, host: &[u8], target: &[u8]) -> Option<&mut V> {
        match self.slots.get_mut(slot)? {
            Some(s)
                if s.host_len == host.len()
                    && s.name.len() == host.len() + target.len()
                    && &s.name[..s.host_len] == host
                    && &s.name[s.host_len..] == target =>
            {
                Some(&mut s.value)
            }
            _ => None,
        }
    }

    /// Sets the value for `host` and `target`, replacing the slot's entry.
    pub fn insert(&mut self, host: &[u8], target: &[u8], value: V) {
        let i = self.index(host, target);
        self.generation = self.generation.wrapping_add(1);
        let mut name = match self.slots[i].take() {
            Some(s) => s.name,
            None => Vec::with_capacity(host.len() + target.len()),
        };
        name.clear();
        name.extend_from_slice(host);
        name.extend_from_slice(target);
        self.slots[i] = Some(Slot {
            name,
            host_len: host.len(),
            value,
        });
    }

    /// Removes the entry for `host` and `target`, if it is there.
    pub fn remove(&mut self, host: &[u8], target: &[u8]) {
        if self.get_mut(host, target).is_some() {
            let i = self.index(host, target);
            self.generation = self.generation.wrapping_add(1);
            self.slots[i] = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The parser before issue 27's single pass (the head scan, then
    // httparse), kept as the reference the new one is checked against.
    // The request at the start of `buf` if it is plain: complete, GET or HEAD,
    // origin-form target, exactly one `Host`, no field outside a short
    // list that cannot change a hit's answer, `Connection` (if any) exactly
    // `keep-alive` or `close`. `None` otherwise, including for incomplete or
    // malformed heads: the caller then parses with
    // http::parse_request_head, which answers those. The `Host` value's
    // syntax is not checked here: a plain request is answered on the fast path
    // only when a HotTable holds its exact Host and target bytes, and the
    // table learns names only from requests the full parser accepted. With a
    // valid `Host`, whatever this accepts that parser accepts with the same
    // length, host, target and keep-alive. Allocates nothing.
    fn parse_plain_reference<'a>(buf: &'a [u8], limits: &Limits) -> Option<PlainRequest<'a>> {
        let line_max = limits
            .target_bytes_max
            .saturating_add(http::REQUEST_LINE_OVERHEAD_BYTES);
        let scan = http::scan_head(buf, limits, line_max, 414).ok()??;
        if scan.fields > PLAIN_FIELDS_MAX {
            return None;
        }
        let head = buf.get(..scan.end)?;
        let mut fields = [httparse::EMPTY_HEADER; PLAIN_FIELDS_MAX];
        let mut req = httparse::Request::new(&mut fields);
        match req.parse(head) {
            Ok(httparse::Status::Complete(n)) if n == scan.end => {}
            _ => return None,
        }
        let head_only = match req.method? {
            "GET" => false,
            "HEAD" => true,
            _ => return None,
        };
        let target = req.path?.as_bytes();
        if target.len() > limits.target_bytes_max
            || target.first() != Some(&b'/')
            || !target.iter().all(|b| b.is_ascii_graphic())
        {
            return None;
        }
        let minor_version = match req.version? {
            0 => 0,
            1 => 1,
            _ => return None,
        };
        let mut host = None;
        let mut connection = None;
        for f in req.headers.iter() {
            let name = f.name.as_bytes();
            if !PLAIN_FIELDS.iter().any(|p| name.eq_ignore_ascii_case(p)) {
                return None;
            }
            let value = http::trim_ows(f.value);
            if name.eq_ignore_ascii_case(b"host") {
                if host.is_some() {
                    return None;
                }
                host = Some(value);
            } else if name.eq_ignore_ascii_case(b"connection") {
                if connection.is_some() {
                    return None;
                }
                connection = Some(value);
            }
        }
        let keep_alive = match connection {
            None => minor_version >= 1,
            Some(v) if v.eq_ignore_ascii_case(b"keep-alive") => true,
            Some(v) if v.eq_ignore_ascii_case(b"close") => false,
            Some(_) => return None,
        };
        Some(PlainRequest {
            head_only,
            host: host?,
            target,
            minor_version,
            keep_alive,
            len: scan.end,
        })
    }

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn plain_requests_are_recognised_like_the_full_parser() {
        let cases: [&[u8]; 5] = [
            b"GET /a?b HTTP/1.1\r\nHost: x.coral.test\r\nUser-Agent: wrk\r\n\r\n",
            b"HEAD / HTTP/1.1\r\nhost:  x.coral.test:8090 \r\nConnection: close\r\n\r\n",
            b"GET /p HTTP/1.0\r\nHost: x\r\nConnection: Keep-Alive\r\n\r\n",
            b"GET /p HTTP/1.0\r\nHost: x\r\n\r\n",
            b"\r\nGET /p HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\nGET /next",
        ];
        for c in cases {
            let p = parse_plain(c, &limits()).expect("plain");
            let (full, len) = http::parse_request_head(c, &limits()).unwrap().unwrap();
            assert_eq!(p.len, len);
            assert_eq!(p.host, full.host().unwrap().as_bytes());
            assert_eq!(p.target, full.target.as_bytes());
            assert_eq!(p.keep_alive, full.keep_alive);
            assert_eq!(p.minor_version, full.minor_version);
            assert_eq!(p.head_only, full.method == http::Method::Head);
        }
    }

    /// The single-pass parser accepts nothing the reference (the head
    /// scan, then httparse) does not, and reads what it accepts alike: on
    /// ordinary requests, and on many mutations of them (bytes replaced,
    /// inserted, removed, the buffer cut), seeded.
    #[test]
    fn the_single_pass_parser_agrees_with_the_reference() {
        let bases: [&[u8]; 7] = [
            b"GET /4k.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\n\r\n",
            b"GET /a?b HTTP/1.1\r\nHost: x.coral.test\r\nUser-Agent: wrk\r\n\r\n",
            b"HEAD / HTTP/1.1\r\nhost:  x.coral.test:8090 \r\nConnection: close\r\n\r\n",
            b"GET /p HTTP/1.0\r\nHost: x\r\nConnection: Keep-Alive\r\n\r\n",
            b"\r\nGET /p HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\nGET /next",
            b"GET /i.jpg HTTP/1.1\r\nHost: www.x.com.nyud.net\r\nUser-Agent: Mozilla/5.0 (X11)\r\nAccept: image/*\r\nAccept-Encoding: gzip, br\r\nAccept-Language: en\r\nReferer: http://a/\r\nConnection: keep-alive\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n",
        ];
        let mut small = limits();
        small.head_bytes_max = 64;
        small.headers_max = 2;
        small.target_bytes_max = 8;
        for b in &bases[..6] {
            let (new, old) = (
                parse_plain(b, &limits()),
                parse_plain_reference(b, &limits()),
            );
            assert!(new.is_some(), "{}", String::from_utf8_lossy(b));
            assert_eq!(new, old);
        }
        let alphabet = b"\r\n\t :/?GETHOSTAhostconection-keepalivclose1.0\x00\x7f\x80\xff";
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let mut accepted = 0;
        for round in 0..60_000 {
            let mut m = bases[round % bases.len()].to_vec();
            for _ in 0..1 + rnd(3) {
                let at = rnd(m.len() + 1);
                let c = alphabet[rnd(alphabet.len())];
                match rnd(4) {
                    0 if at < m.len() => m[at] = c,
                    1 => m.insert(at, c),
                    2 if at < m.len() => {
                        m.remove(at);
                    }
                    _ => m.truncate(at),
                }
            }
            for l in [limits(), small] {
                let new = parse_plain(&m, &l);
                if let Some(p) = new {
                    accepted += 1;
                    assert_eq!(
                        Some(p),
                        parse_plain_reference(&m, &l),
                        "{}",
                        String::from_utf8_lossy(&m)
                    );
                }
            }
        }
        assert!(
            accepted > 1_000,
            "too few mutations stayed plain: {accepted}"
        );
    }

    /// The memo answers as `parse_plain` does, for a buffer that starts
    /// with the remembered request and goes on with anything (a pipelined
    /// request, bytes of one, noise), for one cut short, and for other
    /// requests; and with the table's slot for the Host and target.
    #[test]
    fn the_plain_memo_answers_as_the_parser() {
        let bases: [&[u8]; 5] = [
            b"GET /4k.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\nUser-Agent: wrk\r\n\r\n",
            b"GET /4k.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\n\r\n",
            b"HEAD /4k.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\nConnection: close\r\n\r\n",
            b"\r\nGET /p HTTP/1.0\r\nHost: x\r\nConnection: Keep-Alive\r\n\r\n",
            b"GET /i.jpg HTTP/1.1\r\nHost: www.x.com.nyud.net\r\nAccept: image/*\r\nReferer: http://a/\r\n\r\n",
        ];
        let table: HotTable<()> = HotTable::new(64, crate::dsht::id::keyed_hasher(b"t", "hot"));
        let mut small = limits();
        small.head_bytes_max = 64;
        small.headers_max = 2;
        let alphabet = b"\r\n\t :/?GETHOSTAhostconection-keepalivclose1.0\x00\x7f\x80\xff";
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for l in [limits(), small] {
            let mut memo = PlainMemo::new(&l);
            let (mut remembered, mut answered) = (0, 0);
            for round in 0..40_000 {
                let mut m = bases[rnd(bases.len())].to_vec();
                // Most rounds send a base as it is (the memo's case), the
                // rest a mutation of it.
                if round % 3 == 0 {
                    let at = rnd(m.len() + 1);
                    let c = alphabet[rnd(alphabet.len())];
                    match rnd(3) {
                        0 if at < m.len() => m[at] = c,
                        1 => m.insert(at, c),
                        _ => m.truncate(at),
                    }
                }
                // What follows the request in the buffer.
                match rnd(4) {
                    0 => {}
                    1 => m.extend_from_slice(bases[rnd(bases.len())]),
                    2 => {
                        let b = bases[rnd(bases.len())];
                        m.extend_from_slice(&b[..rnd(b.len())]);
                    }
                    _ => {
                        for _ in 0..rnd(12) {
                            m.push(alphabet[rnd(alphabet.len())]);
                        }
                    }
                }
                let hit = memo.len != 0 && m.starts_with(&memo.bytes[..memo.len]);
                let want = parse_plain(&m, &l);
                let got = memo.parse(&m, &table);
                assert_eq!(got.map(|g| g.0), want, "{}", String::from_utf8_lossy(&m));
                if let Some((p, slot)) = got {
                    assert_eq!(slot, table.slot_of(p.host, p.target));
                    answered += 1;
                    remembered += usize::from(hit);
                }
            }
            assert!(
                remembered > 3_000,
                "the memo answered {remembered} of {answered}"
            );
        }
    }

    /// `PlainMemo::find` answers as `parse_plain` then `HotTable::get_mut_at`
    /// of the request's slot (the comparison it skips while the table's
    /// generation stands), over seeded requests with entries inserted,
    /// replaced (a colliding name in the same slot) and removed between them.
    #[test]
    fn the_memo_finds_entries_as_the_table_does() {
        let bases: [&[u8]; 4] = [
            b"GET /4k.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\nUser-Agent: wrk\r\n\r\n",
            b"GET /41k.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\n\r\n",
            b"HEAD /4k.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\n\r\n",
            b"GET /i.jpg HTTP/1.1\r\nHost: www.x.com.nyud.net\r\nAccept: image/*\r\n\r\n",
        ];
        // Two slots: the four names collide, so inserts replace each other.
        let mut table: HotTable<u32> = HotTable::new(2, crate::dsht::id::keyed_hasher(b"t", "hot"));
        let mut memo = PlainMemo::new(&limits());
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let (mut found, mut skipped) = (0, 0);
        for round in 0..60_000u32 {
            let mut m = bases[rnd(bases.len())].to_vec();
            if rnd(10) == 0 {
                let at = rnd(m.len());
                m[at] = b"x/ \r"[rnd(4)];
            }
            // Change the table now and then (a name learned, or forgotten).
            match rnd(8) {
                0 => {
                    let b = bases[rnd(bases.len())];
                    if let Some(p) = parse_plain(b, &limits()) {
                        table.insert(p.host, p.target, round);
                    }
                }
                1 => {
                    let b = bases[rnd(bases.len())];
                    if let Some(p) = parse_plain(b, &limits()) {
                        table.remove(p.host, p.target);
                    }
                }
                _ => {}
            }
            let matched_before = memo.slot_matched == Some(table.generation());
            let want = parse_plain(&m, &limits()).map(|p| {
                let slot = table.slot_of(p.host, p.target);
                (p, table.get_mut_at(slot, p.host, p.target).map(|v| *v))
            });
            let got = memo.find(&m, &mut table).map(|(p, v)| (p, v.map(|v| *v)));
            assert_eq!(got, want, "{}", String::from_utf8_lossy(&m));
            if let Some((_, Some(_))) = got {
                found += 1;
                skipped += usize::from(matched_before);
            }
        }
        assert!(
            skipped > 3_000,
            "the comparison was skipped {skipped} of {found} times"
        );
    }

    /// `visible_run` finds the first byte outside `lo..=0x7E` at every
    /// position and length, as a byte-by-byte scan does.
    #[test]
    fn visible_runs_match_a_byte_scan() {
        for lo in [b' ', b'!'] {
            for len in 0..24 {
                for at in 0..=len {
                    for bad in [0u8, b'\t', b'\r', b' ', 0x7f, 0x80, 0xff] {
                        let mut s = vec![b'a'; len];
                        if at < len {
                            s[at] = bad;
                        }
                        // A second outside byte after the first changes nothing.
                        if at + 1 < len {
                            s[at + 1] = if bad == 0xff { 0 } else { 0xff };
                        }
                        let want = s.iter().position(|&b| b < lo || b >= 0x7f).unwrap_or(len);
                        assert_eq!(visible_run(&s, lo), want, "{lo} {len} {at} {bad}");
                    }
                }
            }
        }
        let mut all: Vec<u8> = (0..=255u8).collect();
        all.rotate_left(0x21);
        assert_eq!(visible_run(&all, b'!'), 0x7e - 0x21 + 1);
        // Random words of bytes near the edges (borrows and carries between
        // neighbours: 0xff before 0x7e, 0x00 before 0x20, ...).
        let edges = [
            0u8, 0x1f, b' ', b'!', 0x7e, 0x7f, 0x80, 0xfe, 0xff, b'a', b'\t',
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..50_000 {
            let mut s = [0u8; 11];
            for b in &mut s {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = edges[(x % edges.len() as u64) as usize];
            }
            for lo in [b' ', b'!'] {
                let want = s
                    .iter()
                    .position(|&b| b < lo || b >= 0x7f)
                    .unwrap_or(s.len());
                assert_eq!(visible_run(&s, lo), want, "{s:?} {lo}");
            }
        }
    }

    #[test]
    fn anything_that_could_change_a_hit_takes_the_full_path() {
        let cases: [&[u8]; 15] = [
            b"GET / HTTP/1.1\r\nHost: x\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nIf-None-Match: *\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nCache-Control: no-store\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nCoral-No-Forward: 1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nCDN-Loop: coral\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, upgrade\r\n\r\n",
            b"GET / HTTP/1.1\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\n foo\r\n\r\n",
            b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
        ];
        for c in cases {
            assert_eq!(
                parse_plain(c, &limits()),
                None,
                "{}",
                String::from_utf8_lossy(c)
            );
        }
    }

    #[test]
    fn the_table_answers_exact_names_and_stays_bounded() {
        let mut t: HotTable<u32> =
            HotTable::new(5, crate::dsht::id::keyed_hasher(b"secret", "hot test"));
        assert_eq!(t.capacity(), 8);
        t.insert(b"a.test", b"/x", 1);
        assert_eq!(t.get_mut(b"a.test", b"/x"), Some(&mut 1));
        assert_eq!(t.get_mut(b"a.tes", b"t/x"), None);
        assert_eq!(t.get_mut(b"a.test", b"/X"), None);
        for i in 0..100u32 {
            t.insert(b"b.test", format!("/{i}").as_bytes(), i);
        }
        let held = (0..100u32)
            .filter(|i| t.get_mut(b"b.test", format!("/{i}").as_bytes()).is_some())
            .count();
        assert!((1..=8).contains(&held), "{held}");
        t.insert(b"a.test", b"/x", 2);
        assert_eq!(t.get_mut(b"a.test", b"/x"), Some(&mut 2));
        t.remove(b"a.test", b"/x");
        assert_eq!(t.get_mut(b"a.test", b"/x"), None);
    }
}
