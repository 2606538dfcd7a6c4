//! Each core's status sinks: what the proxy reports as it serves, kept in
//! a thread-local (each executor is one thread) until a scrape renders it
//! (`status::core_json`).
//!
//! - **Top objects**: a space-saving sketch of `TOP_OBJECTS_PER_CORE`
//!   entries over the responses this core served (Metwally et al.: a new URL
//!   takes the least-counted entry's place and inherits its count as its
//!   error bound). A served response costs a hash of the host and target and
//!   a scan of the entries; the URL is copied only when a URL enters the
//!   sketch, into the string the entry already holds.
//! - **Samples**: every `SAMPLE_PERIOD` the core's proxy counters and the
//!   cache's size go into a ring of `SAMPLES_MAX` (an hour).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use coral::proxy::http::RequestHead;
use serde_json::{json, Value as Json};

use crate::runtime::Shard;

/// Entries in each core's top-objects sketch.
pub const TOP_OBJECTS_PER_CORE: usize = crate::limits::STATUS.top_objects_per_core;
/// Longest URL kept for an entry, in bytes (longer ones are cut, marked `…`).
pub const URL_BYTES_MAX: usize = crate::limits::STATUS.url_bytes_max;
/// How often each core records a sample.
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(10);
/// Samples kept per core: an hour at `SAMPLE_PERIOD`.
pub const SAMPLES_MAX: usize = crate::limits::STATUS.samples_max;

/// One entry of the space-saving sketch (its hash is in `TopK::hashes`).
#[derive(Debug, Default)]
struct TopEntry {
    /// Responses counted for it (an over-estimate by at most `error`).
    count: u64,
    /// The count it inherited when it entered the sketch.
    error: u64,
    /// Of `count`, those served from the cache without going forward.
    hits: u64,
    /// The body's length when it was last served.
    bytes: u64,
    url: String,
}

/// A bounded top-k of served URLs (space-saving).
#[derive(Debug)]
pub struct TopK {
    /// The entries' URL hashes, apart: a response scans 256 bytes.
    hashes: Vec<u64>,
    entries: Vec<TopEntry>,
    capacity: usize,
}

impl TopK {
    /// An empty sketch of `capacity` entries (allocated once, up front).
    pub fn new(capacity: usize) -> TopK {
        TopK {
            hashes: Vec::with_capacity(capacity),
            entries: Vec::with_capacity(capacity),
            capacity,
        }
    }

    /// Counts one response for the URL hashed to `hash`; `url` writes the
    /// URL into a cleared string, and is called only when the URL enters.
    pub fn count(&mut self, hash: u64, hit: bool, bytes: u64, url: impl FnOnce(&mut String)) {
        if let Some(i) = self.hashes.iter().position(|&h| h == hash) {
            let e = &mut self.entries[i];
            e.count += 1;
            e.hits += u64::from(hit);
            e.bytes = bytes;
            return;
        }
        if self.entries.len() < self.capacity {
            let mut e = TopEntry {
                count: 1,
                error: 0,
                hits: u64::from(hit),
                bytes,
                url: String::with_capacity(64),
            };
            url(&mut e.url);
            self.entries.push(e);
            self.hashes.push(hash);
            return;
        }
        let Some((i, min)) = self
            .entries
            .iter_mut()
            .enumerate()
            .min_by_key(|(_, e)| e.count)
        else {
            return;
        };
        self.hashes[i] = hash;
        min.error = min.count;
        min.count += 1;
        min.hits = u64::from(hit);
        min.bytes = bytes;
        min.url.clear();
        url(&mut min.url);
    }

    /// The entries as JSON, most counted first.
    pub fn to_json(&self) -> Vec<Json> {
        let mut v: Vec<&TopEntry> = self.entries.iter().collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.url.cmp(&b.url)));
        v.iter()
            .map(|e| {
                json!({"url": e.url, "count": e.count, "error": e.error, "hits": e.hits, "bytes": e.bytes})
            })
            .collect()
    }
}

/// A core's proxy and cache counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProxySnapshot {
    /// `ProxyStats::hits`.
    pub hits: u64,
    /// `ProxyStats::misses`.
    pub misses: u64,
    /// `ProxyStats::origin_fetches`.
    pub origin_fetches: u64,
    /// `ProxyStats::peer_fetches`.
    pub peer_fetches: u64,
    /// `ProxyStats::bad_requests`.
    pub bad_requests: u64,
    /// The cache's counters as this core sees them.
    pub cache: crate::cache::CacheStats,
}

/// One sample of a core's counters.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// Unix seconds.
    at_secs: u64,
    served: u64,
    hits: u64,
    misses: u64,
    origin_fetches: u64,
    cache_bytes: u64,
}

/// One core's status state.
struct CoreStatus {
    top: TopK,
    /// Responses served from the cache (hits, and misses once fetched).
    served: u64,
    samples: VecDeque<Sample>,
}

thread_local! {
    static STATE: RefCell<CoreStatus> = RefCell::new(CoreStatus {
        top: TopK::new(TOP_OBJECTS_PER_CORE),
        served: 0,
        samples: VecDeque::with_capacity(SAMPLES_MAX),
    });
}

/// Counts a response served from the cache on this core: `key` names the
/// object (its cache key's first 8 bytes: SHA-1 of the canonical URL, the
/// same for a client's Coralized request and a peer's), `hit` when it went
/// nowhere forward, `bytes` the body's length. Hashes nothing and
/// allocates nothing unless the URL enters the top objects; the URL shown
/// is the request's (a Coralized URL, or a peer's absolute-form one).
pub fn served(key: u64, req: &RequestHead, bytes: u64, hit: bool) {
    served_named(
        key,
        req.host().unwrap_or("").as_bytes(),
        req.target.as_bytes(),
        bytes,
        hit,
    );
}

/// [`served`] for a request known by its Host and target bytes (the fast
/// path of a hit, which makes no `RequestHead`); the URL is only written
/// when the object enters the top objects.
pub fn served_named(key: u64, host: &[u8], target: &[u8], bytes: u64, hit: bool) {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.served += 1;
        s.top.count(key, hit, bytes, |out| {
            let target = String::from_utf8_lossy(target);
            if !target.starts_with("http://") {
                out.push_str("http://");
                push_cut(out, &String::from_utf8_lossy(host));
            }
            push_cut(out, &target);
        });
    });
}

/// Appends `s` to `out` up to `URL_BYTES_MAX` in all, cut at a character
/// boundary and marked with `…`.
fn push_cut(out: &mut String, s: &str) {
    let room = URL_BYTES_MAX.saturating_sub(out.len());
    if s.len() <= room {
        out.push_str(s);
        return;
    }
    let mut end = room.saturating_sub('…'.len_utf8());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    out.push_str(&s[..end]);
    out.push('…');
}

fn take_sample(p: &ProxySnapshot) -> Sample {
    STATE.with(|s| Sample {
        at_secs: crate::clock::unix_now(),
        served: s.borrow().served,
        hits: p.hits,
        misses: p.misses,
        origin_fetches: p.origin_fetches,
        cache_bytes: p.cache.object_bytes,
    })
}

thread_local! {
    /// The cache's size limit (`cache_size_bytes`), for the page.
    static CACHE_LIMIT_BYTES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The cache's size limit as `spawn` was told it.
pub fn cache_limit_bytes() -> u64 {
    CACHE_LIMIT_BYTES.with(std::cell::Cell::get)
}

/// Starts this core's sampler: a sample now and every `SAMPLE_PERIOD`, of
/// the proxy's counters as `proxy` reads them (`None` before it runs).
pub fn spawn(shard: Rc<Shard>, cache_limit_bytes: u64, proxy: fn() -> Option<ProxySnapshot>) {
    CACHE_LIMIT_BYTES.with(|c| c.set(cache_limit_bytes));
    glommio::spawn_local(async move {
        while !shard.stopping() {
            let p = proxy().unwrap_or_default();
            let sample = take_sample(&p);
            STATE.with(|s| {
                let mut s = s.borrow_mut();
                if s.samples.len() >= SAMPLES_MAX {
                    s.samples.pop_front();
                }
                s.samples.push_back(sample);
            });
            glommio::timer::sleep(SAMPLE_PERIOD).await;
        }
    })
    .detach();
}

fn sample_json(s: &Sample) -> Json {
    json!([
        s.at_secs,
        s.served,
        s.hits,
        s.misses,
        s.origin_fetches,
        s.cache_bytes
    ])
}

/// This core's sinks as its part of `/status.json` shows them: responses
/// served, the top objects, and the samples with one taken now, from `p`.
pub fn core_part(p: &ProxySnapshot) -> (u64, Vec<Json>, Vec<Json>) {
    let now_sample = take_sample(p);
    STATE.with(|s| {
        let s = s.borrow();
        let mut samples: Vec<Json> = s.samples.iter().map(sample_json).collect();
        samples.push(sample_json(&now_sample));
        (s.served, s.top.to_json(), samples)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_saving_keeps_the_heavy_hitters_and_bounds_their_error() {
        let mut t = TopK::new(4);
        let mut entered = 0;
        // Two heavy URLs among a stream of one-off ones.
        for i in 0..1000u64 {
            let h = if i % 3 == 0 {
                1
            } else if i % 3 == 1 {
                2
            } else {
                100 + i
            };
            t.count(h, i % 2 == 0, 10, |out| {
                entered += 1;
                out.push_str(&format!("u{h}"));
            });
        }
        let j = t.to_json();
        assert_eq!(j.len(), 4);
        let urls: Vec<&str> = j.iter().map(|e| e["url"].as_str().unwrap()).collect();
        assert!(
            urls[..2].contains(&"u1") && urls[..2].contains(&"u2"),
            "{j:?}"
        );
        for e in &j[..2] {
            let (c, err) = (e["count"].as_u64().unwrap(), e["error"].as_u64().unwrap());
            // True count 333 or 334; the estimate is at most `error` above it.
            assert!(c >= 333 && c - err <= 334, "{e}");
        }
        // A URL string is written only when it enters the sketch.
        assert!(entered < 1000 - 600, "{entered}");
    }

    #[test]
    fn a_response_for_a_url_already_counted_allocates_nothing() {
        let limits = coral::proxy::http::Limits::default();
        let head = |target: &str| {
            let raw = format!("GET {target} HTTP/1.1\r\nHost: x.com.coral.test:8090\r\n\r\n");
            coral::proxy::http::parse_request_head(raw.as_bytes(), &limits)
                .unwrap()
                .unwrap()
                .0
        };
        let (a, b) = (head("/a.bin"), head("http://x.com/b.bin"));
        served(1, &a, 10, false);
        served(2, &b, 20, false);
        let before = crate::cache::tests::allocations();
        for _ in 0..100 {
            served(1, &a, 10, true);
            served(2, &b, 20, true);
        }
        assert_eq!(
            crate::cache::tests::allocations() - before,
            0,
            "the hit path allocated"
        );
        let top = STATE.with(|s| s.borrow().top.to_json());
        // Equal counts: by URL.
        assert_eq!(top[0]["url"], "http://x.com.coral.test:8090/a.bin");
        assert_eq!(top[1]["url"], "http://x.com/b.bin");
        assert_eq!(
            (top[0]["count"].as_u64(), top[0]["hits"].as_u64()),
            (Some(101), Some(100))
        );
    }

    /// The hook's cost per response with the sketch full (32 URLs) and the
    /// URL served its last entry (the longest scan):
    /// `cargo test --release -p coral-shards --bin coral -- --ignored served_costs --nocapture`.
    #[test]
    #[ignore]
    fn served_costs_nanoseconds_per_response() {
        let limits = coral::proxy::http::Limits::default();
        let heads: Vec<RequestHead> = (0..TOP_OBJECTS_PER_CORE)
            .map(|i| {
                let raw = format!(
                    "GET /images/photo-{i}.jpg HTTP/1.1\r\nHost: www.example.com.coral.test:8090\r\n\r\n"
                );
                coral::proxy::http::parse_request_head(raw.as_bytes(), &limits)
                    .unwrap()
                    .unwrap()
                    .0
            })
            .collect();
        for (i, h) in heads.iter().enumerate() {
            served(i as u64, h, 1000, false);
        }
        let last = heads.last().unwrap();
        let key = heads.len() as u64 - 1;
        let n = 2_000_000;
        let mut ns = Vec::new();
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..n {
                served(std::hint::black_box(key), last, 1000, true);
            }
            ns.push(t.elapsed().as_nanos() as f64 / n as f64);
        }
        ns.sort_by(f64::total_cmp);
        println!(
            "served(): min {:.1} median {:.1} max {:.1} ns per response",
            ns[0], ns[2], ns[4]
        );
    }

    #[test]
    fn urls_are_cut_at_the_limit_on_a_char_boundary() {
        let mut s = String::from("http://");
        push_cut(&mut s, &"é".repeat(300));
        assert!(s.len() <= URL_BYTES_MAX && s.ends_with('…'), "{}", s.len());
        let mut s = String::new();
        push_cut(&mut s, "/short");
        assert_eq!(s, "/short");
    }
}
