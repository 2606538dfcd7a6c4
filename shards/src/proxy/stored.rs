//! What the proxy stores as an object's head in the cache, and reads back.
//!
//! The stored head is the origin's head as `policy::head_to_store` keeps it
//! (no hop-by-hop fields, no cookies, no length), serialised as HTTP/1.1,
//! plus fields of our own under the `coral-meta-` prefix that no client
//! ever sees: the freshness inputs the cache's `ObjectMeta` does not hold
//! and the request fields the response varies on (RFC 9111 §4.1). Fields
//! with that prefix coming from an origin are dropped before storing.

use std::collections::HashMap;
use std::rc::Rc;

use coral::proxy::http::{self, Headers, Limits, ResponseHead};
use coral::proxy::policy::Freshness;
use coral::Id;

/// Prefix of our own fields in a stored head.
const META: &str = "coral-meta-";
/// `initial_age must_revalidate`.
const FRESHNESS: &str = "coral-meta-freshness";
/// Prefix of the stored request's varying fields.
const VARY: &str = "coral-meta-vary-";
/// Present (`1`) when the object is a `Vary` variant stored under its
/// variant key, not its URL's (`coral::proxy::vary`).
const VARIANT: &str = "coral-meta-variant";

/// Serialises `head` (already through `head_to_store`) with our fields;
/// `variant`: it is stored under its variant key, not its URL's.
pub fn encode(
    head: &ResponseHead,
    fresh: &Freshness,
    vary_req: &Headers,
    variant: bool,
    out: &mut Vec<u8>,
) {
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
    if variant {
        line(out, VARIANT.as_bytes(), b"1");
    }
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
    /// A `Vary` variant stored under its variant key (false for the
    /// response stored under the URL's key, and for heads written before
    /// this field existed).
    pub variant: bool,
}

/// Parses a stored head; `None` if it is not one we wrote.
pub fn decode(bytes: &[u8], limits: &Limits) -> Option<Stored> {
    let (parsed, _) = http::parse_response_head(bytes, true, limits).ok()??;
    let mut head = parsed;
    let mut vary_req = Headers::new();
    let mut initial_age_secs = 0;
    let mut must_revalidate = false;
    let mut variant = false;
    let mut any_meta = false;
    for (n, v) in head.headers.iter() {
        if n == FRESHNESS {
            let s = std::str::from_utf8(v).ok()?;
            let mut it = s.split(' ');
            initial_age_secs = it.next()?.parse().ok()?;
            must_revalidate = it.next()? == "1";
            any_meta = true;
        } else if n == VARIANT {
            variant = v == b"1";
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
        variant,
    })
}

/// Decoded stored heads kept per core ([`DecodedHeads`]).
pub const DECODED_HEADS_MAX: usize = crate::limits::PROXY.decoded_heads_max;
/// Longest stored head whose decoded form is kept ([`DecodedHeads`]): a
/// longer one (up to `Limits::head_bytes_max`) is decoded on each use, so
/// the memo holds at most `DECODED_HEADS_MAX` heads of a few KiB each.
pub const DECODED_HEAD_BYTES_MAX: usize = crate::limits::PROXY.decoded_head_bytes_max;

/// The decoded stored heads of recently served objects, with the raw bytes
/// they were decoded from (a request compares bytes instead of parsing).
/// At most `entries_max` of them, each of at most `entry_bytes_max` bytes.
pub struct DecodedHeads {
    map: HashMap<Id, (Box<[u8]>, Rc<Stored>)>,
    entries_max: usize,
    entry_bytes_max: usize,
}

impl DecodedHeads {
    /// An empty memo of at most `entries_max` heads of at most
    /// `entry_bytes_max` bytes each.
    pub fn new(entries_max: usize, entry_bytes_max: usize) -> DecodedHeads {
        DecodedHeads {
            map: HashMap::new(),
            entries_max,
            entry_bytes_max,
        }
    }

    /// The decoded form of `raw`, the stored head of `key`: kept from an
    /// earlier call while the bytes stay the same, else decoded (and kept
    /// if short enough). `None` if it is not a head this proxy wrote.
    pub fn get(&mut self, key: &Id, raw: &[u8], limits: &Limits) -> Option<Rc<Stored>> {
        if let Some((kept, st)) = self.map.get(key) {
            if **kept == *raw {
                return Some(st.clone());
            }
        }
        let st = Rc::new(decode(raw, limits)?);
        if raw.len() > self.entry_bytes_max {
            // Too large to keep: a replaced object's old entry goes too.
            self.map.remove(key);
            return Some(st);
        }
        if self.map.len() >= self.entries_max && !self.map.contains_key(key) {
            self.map.clear();
        }
        self.map.insert(*key, (raw.into(), st.clone()));
        Some(st)
    }

    /// Heads kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coral::proxy::policy::Freshness;

    /// Fresh for 60 s from time 0.
    fn fresh(initial_age_secs: u64, must_revalidate: bool) -> Freshness {
        Freshness {
            date_secs: 0,
            fresh_until_secs: 60,
            response_secs: 0,
            initial_age_secs,
            must_revalidate,
        }
    }

    fn stored_head(extra_bytes: usize) -> Vec<u8> {
        let text = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Pad: {}\r\n\r\n",
            "p".repeat(extra_bytes)
        );
        let (head, _) = http::parse_response_head(text.as_bytes(), true, &Limits::default())
            .unwrap()
            .unwrap();
        let fresh = fresh(3, false);
        let mut out = Vec::new();
        encode(&head, &fresh, &Headers::new(), false, &mut out);
        out
    }

    #[test]
    fn a_variant_and_its_varying_fields_read_back_and_stay_hidden() {
        let text = "HTTP/1.1 200 OK\r\nVary: Accept-Language\r\n\r\n";
        let (head, _) = http::parse_response_head(text.as_bytes(), true, &Limits::default())
            .unwrap()
            .unwrap();
        let fresh = fresh(0, true);
        let mut vary_req = Headers::new();
        vary_req.insert("accept-language", b"fr");
        for variant in [false, true] {
            let mut out = Vec::new();
            encode(&head, &fresh, &vary_req, variant, &mut out);
            let st = decode(&out, &Limits::default()).unwrap();
            assert_eq!(st.variant, variant);
            assert!(st.must_revalidate);
            assert_eq!(st.vary_req.get("accept-language"), Some(&b"fr"[..]));
            assert!(st.head.headers.iter().all(|(n, _)| !n.starts_with(META)));
            assert!(st.head.headers.contains("vary"));
        }
    }

    #[test]
    fn a_short_head_is_decoded_once_and_kept_while_its_bytes_stay() {
        let limits = Limits::default();
        let mut heads = DecodedHeads::new(DECODED_HEADS_MAX, DECODED_HEAD_BYTES_MAX);
        let key = Id::hash(b"http://x.com:80/a");
        let raw = stored_head(10);
        let a = heads.get(&key, &raw, &limits).unwrap();
        let b = heads.get(&key, &raw, &limits).unwrap();
        assert!(Rc::ptr_eq(&a, &b), "kept, not decoded again");
        assert_eq!(a.initial_age_secs, 3);
        assert_eq!(heads.len(), 1);
        // The object was replaced: other bytes, decoded again.
        let other = stored_head(20);
        let c = heads.get(&key, &other, &limits).unwrap();
        assert!(!Rc::ptr_eq(&a, &c));
        assert_eq!(heads.len(), 1);
        assert!(heads.get(&key, b"not a head", &limits).is_none());
    }

    #[test]
    fn a_head_over_decoded_head_bytes_max_is_decoded_per_use_not_kept() {
        let limits = Limits::default();
        let mut heads = DecodedHeads::new(DECODED_HEADS_MAX, DECODED_HEAD_BYTES_MAX);
        let key = Id::hash(b"http://x.com:80/huge");
        let small = stored_head(10);
        heads.get(&key, &small, &limits).unwrap();
        assert_eq!(heads.len(), 1);
        let huge = stored_head(DECODED_HEAD_BYTES_MAX);
        assert!(huge.len() > DECODED_HEAD_BYTES_MAX && huge.len() <= limits.head_bytes_max);
        let a = heads.get(&key, &huge, &limits).unwrap();
        let b = heads.get(&key, &huge, &limits).unwrap();
        assert!(!Rc::ptr_eq(&a, &b), "decoded on each use");
        assert_eq!(
            a.head.headers.get("x-pad").map(<[u8]>::len),
            Some(DECODED_HEAD_BYTES_MAX)
        );
        assert_eq!(heads.len(), 0, "not kept, and the replaced entry is gone");
        // Exactly at the bound: kept.
        let pad = DECODED_HEAD_BYTES_MAX - stored_head(0).len();
        let edge = stored_head(pad);
        assert_eq!(edge.len(), DECODED_HEAD_BYTES_MAX);
        heads.get(&key, &edge, &limits).unwrap();
        assert_eq!(heads.len(), 1);
    }

    #[test]
    fn the_memo_holds_at_most_its_entries_max() {
        let limits = Limits::default();
        let mut heads = DecodedHeads::new(3, DECODED_HEAD_BYTES_MAX);
        let raw = stored_head(1);
        for i in 0..10u8 {
            heads.get(&Id::hash(&[i]), &raw, &limits).unwrap();
            assert!(heads.len() <= 3);
        }
    }
}
