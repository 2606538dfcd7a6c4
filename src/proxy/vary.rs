//! Several stored variants of one object (RFC 9111 §4.1), as Squid keeps them: the
//! response first stored under the object's key (SHA-1 of the canonical URL) tells,
//! by its `Vary`, which request fields select a variant; a request whose fields differ
//! is served from a second entry whose key is SHA-1 of the URL key and the normalized
//! values of those fields ([`variant_key`]). The key depends only on the URL and the
//! request, so every node names a variant alike: the DSHT holds pointers to it, a peer
//! asked for it (with the client's fields, `policy::upstream_request`) finds it, and
//! one fetch per variant serves a crowd (collapsed forwarding per variant key).
//!
//! `Accept-Encoding` (and `Cookie`) never go upstream: every origin answers with the
//! identity coding, which serves every client, so `Vary: Accept-Encoding` — what nginx
//! and most origins send with `gzip on` — makes one variant, the most a normalisation
//! can fold (Varnish folds the field to `gzip` or nothing; we fold it to nothing, and
//! keep HTML rewritable, §2.1). `Vary: *` is never stored (`policy::storable`).
//!
//! [`VariantBudget`] bounds the variants of one URL (`vary_variants_max`): a field such as
//! `User-Agent` would otherwise make one entry per browser build.

use std::collections::HashMap;

use sha1::{Digest, Sha1};
use smallvec::SmallVec;

use super::http::{RequestHead, ResponseHead};
use super::policy::{never_forwarded, normalized};
use crate::dsht::id::{Id, KeyedBuildHasher};

/// Default of `vary_variants_max`: variants of one URL stored beside the first.
pub const VARY_VARIANTS_MAX: usize = 8;
/// URLs whose variants one [`VariantBudget`] tracks; beyond it an arbitrary one is
/// forgotten.
pub const VARY_URLS_TRACKED_MAX: usize = crate::limits::PROXY.vary_urls_tracked_max;
/// Seconds an admitted variant counts against its URL before it is in the cache
/// (the fetch's DSHT lookups, claim and first byte; the proxy's miss timeout).
pub const VARY_ADMIT_GRACE_SECS: u64 = 60;

/// The key of the variant of the object `url_key` that `req` selects, when the stored
/// response `stored_resp` varies: SHA-1 over the URL key, then for each field its
/// `Vary` names (lower-cased, sorted, once each; `Cookie` and `Accept-Encoding`, which
/// never go upstream, left out) the name and the request's values, whitespace
/// normalized and joined as one field. `None` for `Vary: *` or when nothing forwarded
/// is named (one copy serves every request).
pub fn variant_key(url_key: &Id, stored_resp: &ResponseHead, req: &RequestHead) -> Option<Id> {
    let mut names: SmallVec<[String; 4]> = SmallVec::new();
    for name in stored_resp.headers.list("vary") {
        if name == b"*" {
            return None;
        }
        if never_forwarded(name) {
            continue;
        }
        let Ok(name) = core::str::from_utf8(name) else {
            return None;
        };
        names.push(name.to_ascii_lowercase());
    }
    if names.is_empty() {
        return None;
    }
    names.sort_unstable();
    names.dedup();
    let mut h = Sha1::new();
    h.update(b"coral vary variant\0");
    h.update(url_key.0);
    for name in &names {
        let value = normalized(req.headers.get_all(name));
        h.update(name.as_bytes());
        h.update(b":");
        // Length-prefixed: no two lists of values hash alike by moving a separator.
        h.update((value.len() as u64).to_le_bytes());
        h.update(&value);
        h.update(b"\n");
    }
    let mut id = [0u8; 20];
    id.copy_from_slice(&h.finalize());
    Some(Id(id))
}

/// The variants of each URL this core has let be fetched, so that one URL has at most
/// `per_url_max` of them beside its first response. A variant that has left the cache
/// (evicted, or never stored) frees its place once [`VARY_ADMIT_GRACE_SECS`] have passed
/// since it was admitted, so a crowd of distinct values cannot slip past while the
/// first ones are still being fetched.
pub struct VariantBudget {
    per_url_max: usize,
    urls: HashMap<Id, SmallVec<[(Id, u64); 4]>, KeyedBuildHasher>,
}

impl VariantBudget {
    /// A budget of `per_url_max` variants per URL; `hasher` keys the map (its keys come
    /// from clients: SECURITY.md, hash flooding).
    pub fn new(per_url_max: usize, hasher: KeyedBuildHasher) -> VariantBudget {
        VariantBudget {
            per_url_max,
            urls: HashMap::with_hasher(hasher),
        }
    }

    /// Whether `variant` of `url_key` may be fetched and stored, at `now_secs`;
    /// `cached(key)`: whether the cache holds that key (complete or being written).
    /// True for a variant admitted before; otherwise it is admitted if the URL has room.
    pub fn admit(
        &mut self,
        url_key: Id,
        variant: Id,
        now_secs: u64,
        cached: impl Fn(&Id) -> bool,
    ) -> bool {
        if self.per_url_max == 0 {
            return false;
        }
        if !self.urls.contains_key(&url_key) && self.urls.len() >= VARY_URLS_TRACKED_MAX {
            if let Some(k) = self.urls.keys().next().copied() {
                self.urls.remove(&k);
            }
        }
        let list = self.urls.entry(url_key).or_default();
        if list.iter().any(|(v, _)| *v == variant) {
            return true;
        }
        if list.len() >= self.per_url_max {
            list.retain(|(v, admitted)| {
                cached(v) || now_secs < admitted.saturating_add(VARY_ADMIT_GRACE_SECS)
            });
        }
        if list.len() >= self.per_url_max {
            return false;
        }
        list.push((variant, now_secs));
        true
    }

    /// URLs tracked.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Whether no URL is tracked.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::http::{parse_request_head, parse_response_head, Limits};
    use crate::proxy::names::cache_key;

    fn req(fields: &str) -> RequestHead {
        let text = format!("GET /y HTTP/1.1\r\nHost: x.com.coral.test:8090\r\n{fields}\r\n");
        parse_request_head(text.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap()
            .0
    }

    fn ok(fields: &str) -> ResponseHead {
        let text = format!("HTTP/1.1 200 OK\r\n{fields}\r\n");
        parse_response_head(text.as_bytes(), false, &Limits::default())
            .unwrap()
            .unwrap()
            .0
    }

    fn hasher() -> KeyedBuildHasher {
        crate::dsht::id::keyed_hasher(b"test", "vary")
    }

    #[test]
    fn rfc9111_4_1_each_value_of_a_varied_field_names_its_own_variant() {
        let url = cache_key("http://x.com:80/y");
        let s = ok("Vary: Accept-Language\r\n");
        let en = variant_key(&url, &s, &req("Accept-Language: en\r\n")).unwrap();
        let fr = variant_key(&url, &s, &req("Accept-Language: fr\r\n")).unwrap();
        let none = variant_key(&url, &s, &req("")).unwrap();
        assert_ne!(en, fr);
        assert_ne!(en, none);
        assert_ne!(en, url, "a variant never takes the URL's own key");
        // Whitespace, the field's case and the Vary list's order do not matter.
        assert_eq!(
            en,
            variant_key(&url, &s, &req("accept-language:   en  \r\n")).unwrap()
        );
        let two = ok("Vary: Accept-Language, Accept\r\n");
        let two_rev = ok("Vary: accept, ACCEPT-LANGUAGE\r\n");
        let r = req("Accept: text/html\r\nAccept-Language: en\r\n");
        assert_eq!(variant_key(&url, &two, &r), variant_key(&url, &two_rev, &r));
        // Another URL, another key.
        assert_ne!(
            Some(en),
            variant_key(
                &cache_key("http://x.com:80/z"),
                &s,
                &req("Accept-Language: en\r\n")
            )
        );
        // Values are not mixed up between fields.
        let a = variant_key(&url, &two, &req("Accept: a\r\nAccept-Language: b\r\n"));
        let b = variant_key(&url, &two, &req("Accept: b\r\nAccept-Language: a\r\n"));
        assert_ne!(a, b);
    }

    #[test]
    fn accept_encoding_and_cookie_fold_to_one_variant_and_vary_star_to_none() {
        let url = cache_key("http://x.com:80/y");
        // nginx's `gzip_vary on`: the identity copy serves every client.
        assert_eq!(
            variant_key(&url, &ok("Vary: Accept-Encoding\r\n"), &req("")),
            None
        );
        assert_eq!(variant_key(&url, &ok("Vary: Cookie\r\n"), &req("")), None);
        let s = ok("Vary: Accept-Encoding, Accept-Language\r\n");
        assert_eq!(
            variant_key(
                &url,
                &s,
                &req("Accept-Encoding: gzip\r\nAccept-Language: en\r\n")
            ),
            variant_key(&url, &s, &req("Accept-Language: en\r\n"))
        );
        assert_eq!(
            variant_key(&url, &ok("Vary: Accept-Language, *\r\n"), &req("")),
            None
        );
        assert_eq!(variant_key(&url, &ok(""), &req("")), None);
    }

    #[test]
    fn the_budget_holds_vary_variants_max_per_url() {
        let url = cache_key("http://x.com:80/y");
        let other = cache_key("http://x.com:80/z");
        let v = |i: u8| Id::hash(&[i]);
        let mut b = VariantBudget::new(2, hasher());
        let all_cached = |_: &Id| true;
        assert!(b.admit(url, v(1), 100, all_cached));
        assert!(b.admit(url, v(2), 100, all_cached));
        assert!(b.admit(url, v(1), 100, all_cached), "admitted before");
        assert!(!b.admit(url, v(3), 100, all_cached), "over the budget");
        assert!(b.admit(other, v(3), 100, all_cached), "budgets are per URL");
        // Not cached, but still within the grace of a fetch under way: still counted.
        let none_cached = |_: &Id| false;
        assert!(!b.admit(url, v(3), 100 + VARY_ADMIT_GRACE_SECS - 1, none_cached));
        // Gone from the cache after the grace: its place is free.
        let only_1 = |k: &Id| *k == v(1);
        assert!(b.admit(url, v(3), 100 + VARY_ADMIT_GRACE_SECS, only_1));
        assert!(!b.admit(url, v(4), 100 + VARY_ADMIT_GRACE_SECS, all_cached));
        assert!(!VariantBudget::new(0, hasher()).admit(url, v(1), 0, all_cached));
    }

    #[test]
    fn the_budget_tracks_a_bounded_number_of_urls() {
        let mut b = VariantBudget::new(1, hasher());
        for i in 0..(VARY_URLS_TRACKED_MAX as u32 + 100) {
            let url = Id::hash(&i.to_le_bytes());
            assert!(b.admit(url, Id::hash(b"v"), 0, |_| true));
            assert!(b.len() <= VARY_URLS_TRACKED_MAX);
        }
        assert!(!b.is_empty());
    }
}
