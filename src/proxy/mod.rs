//! CoralProxy's pure parts (NSDI 2004 §2.1, §3.2): HTTP/1.1 framing, Coralized names,
//! the shared-cache policy of RFC 9110/9111 and the rewriting that keeps redirects
//! and links Coralized. No I/O: `shards/src/proxy/` moves the bytes.
//!
//! - [`http`]: request and response heads and bodies, parsed by `httparse` and then held
//!   to our stricter framing rules (RFC 9112), which reject what request smuggling needs.
//! - [`names`]: Coralized host names ↔ origins, canonical URLs and cache keys.
//! - [`policy`]: what may be stored, for how long, what a client gets, what the origin is asked.
//! - [`request`]: one decision per request: refused or routed, then what a cache lookup
//!   serves (hit, copy arriving or stale, variant, pass, fill), and how a copy answers.
//! - [`rewrite`]: `Location` headers and absolute links in HTML stay Coralized.
//! - [`origin_addr`]: which origin addresses are refused (the SSRF guard).
//! - [`fetch`]: the fetch policy (local cache, DSHT, peer, origin, §3.2) and what a
//!   failed fetch answers ([`fetch::Fail`]).
//! - [`hot`]: the fast path of a hit: plain requests, the per-core name → key table, the
//!   hit head kept built.
//! - [`pass`]: hit-for-pass, objects recently found uncacheable.
//! - [`keyed`]: what of a client's request goes upstream (an allowlist; issue 22).
//! - [`stale`]: stale-while-revalidate and stale-if-error (RFC 5861), and the key nodes
//!   claim to revalidate an object once network-wide.
//! - [`vary`]: the keys of several stored variants of one object, and their bound.

pub mod date;
pub mod fetch;
pub mod hot;
pub mod http;
pub mod idle;
pub mod keyed;
pub mod names;
pub mod origin_addr;
pub mod pass;
pub mod policy;
pub mod request;
pub mod rewrite;
pub mod stale;
pub mod vary;
