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
pub fn parse_plain<'a>(buf: &'a [u8], limits: &Limits) -> Option<PlainRequest<'a>> {
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
    pub fn head(
        &mut self,
        stored: &ResponseHead,
        node_name: &str,
        inputs: HitInputs,
    ) -> (&[u8], Framing) {
        if self.built != Some(inputs) || self.framing.is_none() {
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
        (&self.bytes, self.framing.unwrap_or(Framing::Empty))
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
        }
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn index(&self, host: &[u8], target: &[u8]) -> usize {
        (self.hasher.hash_one((host, target)) as usize) & (self.slots.len() - 1)
    }

    /// The value for exactly these `host` and `target` bytes.
    pub fn get_mut(&mut self, host: &[u8], target: &[u8]) -> Option<&mut V> {
        let i = self.index(host, target);
        match &mut self.slots[i] {
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
            self.slots[i] = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
