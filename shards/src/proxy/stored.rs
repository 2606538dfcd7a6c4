//! What the proxy stores as an object's head in the cache, and reads back.
//!
//! The stored head is the origin's head as `policy::head_to_store` keeps it
//! (no hop-by-hop fields, no cookies, no length), serialised as HTTP/1.1,
//! plus fields of our own under the `coral-meta-` prefix that no client
//! ever sees: the freshness inputs the cache's `ObjectMeta` does not hold
//! and the request fields the response varies on (RFC 9111 §4.1). Fields
//! with that prefix coming from an origin are dropped before storing.

use coral::proxy::http::{self, Headers, Limits, ResponseHead};
use coral::proxy::policy::Freshness;

/// Prefix of our own fields in a stored head.
const META: &str = "coral-meta-";
/// `initial_age must_revalidate`.
const FRESHNESS: &str = "coral-meta-freshness";
/// Prefix of the stored request's varying fields.
const VARY: &str = "coral-meta-vary-";

/// Serialises `head` (already through `head_to_store`) with our fields.
pub fn encode(head: &ResponseHead, fresh: &Freshness, vary_req: &Headers, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    http::write_decimal(out, u64::from(head.status));
    out.push(b' ');
    out.extend_from_slice(head.reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (n, v) in head.headers.iter() {
        if n.starts_with(META) {
            continue;
        }
        line(out, n.as_bytes(), v);
    }
    let mut f = Vec::new();
    http::write_decimal(&mut f, fresh.initial_age_secs);
    f.extend_from_slice(if fresh.must_revalidate { b" 1" } else { b" 0" });
    line(out, FRESHNESS.as_bytes(), &f);
    for (n, v) in vary_req.iter() {
        let mut name = VARY.as_bytes().to_vec();
        name.extend_from_slice(n.as_bytes());
        line(out, &name, v);
    }
    // A stored head has no framing of its own; say so explicitly so that it
    // parses back the same way whatever the status.
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut Vec<u8>, n: &[u8], v: &[u8]) {
    out.extend_from_slice(n);
    out.extend_from_slice(b": ");
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
}

/// A stored head read back: the head clients get (our fields removed), the
/// stored request's varying fields, and the freshness inputs.
pub struct Stored {
    /// The response head as stored, without our fields.
    pub head: ResponseHead,
    /// The fields of the request it was fetched for that `Vary` names.
    pub vary_req: Headers,
    /// `corrected_initial_age` when stored.
    pub initial_age_secs: u64,
    /// `must-revalidate` and friends.
    pub must_revalidate: bool,
}

/// Parses a stored head; `None` if it is not one we wrote.
pub fn decode(bytes: &[u8], limits: &Limits) -> Option<Stored> {
    let (parsed, _) = http::parse_response_head(bytes, true, limits).ok()??;
    let mut head = parsed;
    let mut vary_req = Headers::new();
    let mut initial_age_secs = 0;
    let mut must_revalidate = false;
    let mut any_meta = false;
    for (n, v) in head.headers.iter() {
        if n == FRESHNESS {
            let s = std::str::from_utf8(v).ok()?;
            let mut it = s.split(' ');
            initial_age_secs = it.next()?.parse().ok()?;
            must_revalidate = it.next()? == "1";
            any_meta = true;
        } else if let Some(name) = n.strip_prefix(VARY) {
            vary_req.insert(name, v);
        }
    }
    if any_meta {
        let names: Vec<String> = head
            .headers
            .iter()
            .filter(|(n, _)| n.starts_with(META))
            .map(|(n, _)| n.to_string())
            .collect();
        for n in names {
            head.headers.remove(&n);
        }
    }
    Some(Stored {
        head,
        vary_req,
        initial_age_secs,
        must_revalidate,
    })
}
