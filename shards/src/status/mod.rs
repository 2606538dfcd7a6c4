//! The status page's numbers (`/status`, `/status.json` on the admin
//! address, and `coral top`).
//!
//! Each core keeps its own, in a thread-local (each executor is one thread):
//!
//! - **Top objects**: a space-saving sketch of `TOP_OBJECTS_PER_CORE`
//!   entries over the responses this core served (Metwally et al.: a new URL
//!   takes the least-counted entry's place and inherits its count as its
//!   error bound). A served response costs a hash of the host and target and
//!   a scan of the entries; the URL is copied only when a URL enters the
//!   sketch, into the string the entry already holds.
//! - **Samples**: every `SAMPLE_PERIOD` the core's proxy counters and the
//!   cache's size go into a ring of `SAMPLES_MAX` (an hour).
//!
//! A scrape asks every core for its part over the mesh (`Call::Status`) and
//! core 0 merges them (`merge`); nothing is shared between cores.
//!
//! The per-core sinks the proxy feeds are in `sink`; this module renders
//! them, with the node's own numbers, into the page's JSON.

use serde_json::{json, Value as Json};

use crate::runtime::Shard;

pub mod sink;

use sink::SAMPLE_PERIOD;

/// Top objects in the merged answer.
pub const TOP_OBJECTS_MAX: usize = crate::limits::STATUS.top_objects_max;
/// Hottest DSHT keys reported per core and in the merged answer.
pub const HOT_KEYS_MAX: usize = crate::limits::STATUS.hot_keys_max;
/// Cluster members reported per level (the nearest by RTT).
pub const MEMBERS_PER_LEVEL_MAX: usize = crate::limits::STATUS.members_per_level_max;

/// This core's part of `/status.json` (`Call::Status`): its counters, top
/// objects, samples (the last one taken now) and hottest DSHT keys.
pub fn core_json(shard: &Shard) -> Json {
    let p = crate::proxy::status_snapshot().unwrap_or_default();
    let (served, top, samples) = sink::core_part(&p);
    let now = shard.now();
    let node = shard.node();
    let st = node.stats();
    let mut hot = Vec::new();
    for level in 0..node.config().levels() as u8 {
        if let Some(store) = node.store(level) {
            for k in store.hottest(now, HOT_KEYS_MAX) {
                hot.push(json!({
                    "level": level,
                    "key": k.key.to_string(),
                    "requests_past_minute": k.requests_past_minute,
                    "loaded": k.loaded,
                    "values": k.values.iter().map(value_text).collect::<Vec<_>>(),
                }));
            }
        }
    }
    json!({
        "core": shard.core,
        "proxy": {
            "hits": p.hits, "misses": p.misses, "origin_fetches": p.origin_fetches,
            "peer_fetches": p.peer_fetches, "bad_requests": p.bad_requests, "served": served,
        },
        "cache": {
            // Use: the objects' bytes; the segment files' size apart.
            "objects": p.cache.objects, "bytes": p.cache.object_bytes,
            "segment_bytes": p.cache.bytes, "hits": p.cache.hits,
            "misses": p.cache.misses, "evictions": p.cache.evictions,
            "usable_bytes": p.cache.usable_bytes, "objects_max": p.cache.objects_max,
            "space_errors": p.cache.space_errors,
        },
        "dns_queries": crate::dns::queries(),
        "dsht": {
            "datagrams_in": st.datagrams_in, "datagrams_out": st.datagrams_out,
            "gets_served": st.gets_served, "put_probes_received": st.put_probes_received,
            "stores_accepted": st.stores_accepted, "rpc_timeouts": st.rpc_timeouts,
        },
        "top": top,
        "samples": samples,
        "hot_keys": hot,
        // Issue 24 item 4: which source each fill reads from now.
        "in_flight": crate::proxy::fetcher::in_flight_json(),
    })
}

/// A stored value as the page shows it: an address (a plain one, or the
/// one a signed pointer names), text, or hex.
fn value_text(v: &coral::dsht::wire::Value) -> String {
    if let Some(a) = coral::identity::named_addr(v) {
        return a.to_string();
    }
    match std::str::from_utf8(v.as_bytes()) {
        Ok(t) if t.chars().all(|c| !c.is_control()) => t.to_string(),
        _ => v.as_bytes().iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// Core 0's clusters per level, with their members and RTTs.
pub fn levels_json(shard: &Shard) -> Json {
    let now = shard.now();
    let node = shard.node();
    let levels: Vec<Json> = node
        .levels(now)
        .iter()
        .map(|l| {
            let mut members: Vec<_> = node
                .routing_table(l.level)
                .map(|t| t.entries().collect())
                .unwrap_or_default();
            members.sort_by_key(|e| (e.rtt_min.map_or(u64::MAX, |d| d.0), e.contact.id));
            members.truncate(MEMBERS_PER_LEVEL_MAX);
            json!({
                "level": l.level,
                "threshold_ms": if l.threshold_ms == u32::MAX { Json::Null } else { json!(l.threshold_ms) },
                "cluster": l.cluster.to_string(),
                "age_secs": l.age_secs,
                "size_estimate": l.size_estimate,
                "contacts": l.contacts,
                "keys": l.keys,
                "members": members.iter().map(|e| json!({
                    "id": e.contact.id.to_string(),
                    "addr": e.contact.addr.to_string(),
                    "rtt_ms": e.rtt_min.map(|d| d.as_millis_f64()),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({"node": node.id().to_string(), "addr": node.addr().to_string(), "levels": levels})
}

fn num(v: &Json, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap_or(0)
}

/// Merges every core's part (`core_json`) and core 0's levels into the
/// answer of `/status.json`. Its size is bounded by the constants above.
pub fn merge(cores: &[Json], levels: Json, cache_limit_bytes: u64, uptime_secs: u64) -> Json {
    let sum = |path: &[&str]| -> u64 { cores.iter().map(|c| num(c, path)).sum() };
    // Top objects: the same URL may be served by several cores.
    let mut top: Vec<(String, u64, u64, u64, u64)> = Vec::new();
    for t in cores.iter().filter_map(|c| c["top"].as_array()).flatten() {
        let url = t["url"].as_str().unwrap_or("");
        let (count, error, hits, bytes) = (
            num(t, &["count"]),
            num(t, &["error"]),
            num(t, &["hits"]),
            num(t, &["bytes"]),
        );
        match top.iter_mut().find(|e| e.0 == url) {
            Some(e) => {
                e.1 += count;
                e.2 += error;
                e.3 += hits;
                e.4 = e.4.max(bytes);
            }
            None => top.push((url.to_string(), count, error, hits, bytes)),
        }
    }
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(TOP_OBJECTS_MAX);
    // Samples: cores sample in step; the newest of each line up.
    let series: Vec<&Vec<Json>> = cores
        .iter()
        .filter_map(|c| c["samples"].as_array())
        .collect();
    let n = series.iter().map(|s| s.len()).min().unwrap_or(0);
    let samples: Vec<Json> = (0..n)
        .map(|i| {
            let mut out = [0u64; 6];
            for s in &series {
                let row = &s[s.len() - n + i];
                for (j, o) in out.iter_mut().enumerate() {
                    let v = row[j].as_u64().unwrap_or(0);
                    // Time: the latest core's; counters: summed, except the
                    // cache's bytes, which every core reports whole.
                    *o = if j == 0 || j == 5 {
                        (*o).max(v)
                    } else {
                        *o + v
                    };
                }
            }
            json!(out)
        })
        .collect();
    let mut hot: Vec<Json> = cores
        .iter()
        .filter_map(|c| c["hot_keys"].as_array())
        .flatten()
        .cloned()
        .collect();
    hot.sort_by(|a, b| {
        num(b, &["requests_past_minute"])
            .cmp(&num(a, &["requests_past_minute"]))
            .then_with(|| a["key"].as_str().cmp(&b["key"].as_str()))
    });
    hot.truncate(HOT_KEYS_MAX);
    // Objects in flight: each core's own (a key has one owning core).
    let mut in_flight: Vec<Json> = cores
        .iter()
        .filter_map(|c| c["in_flight"].as_array())
        .flatten()
        .cloned()
        .collect();
    in_flight.sort_by(|a, b| a["url"].as_str().cmp(&b["url"].as_str()));
    let served = sum(&["proxy", "served"]);
    let origin_fetches = sum(&["proxy", "origin_fetches"]);
    let dns: Option<u64> = cores
        .iter()
        .map(|c| c["dns_queries"].as_u64())
        .try_fold(0u64, |a, q| q.map(|q| a + q));
    json!({
        "node": levels["node"],
        "addr": levels["addr"],
        "cores": cores.len(),
        "now_secs": crate::clock::unix_now(),
        "uptime_secs": uptime_secs,
        "proxy": {
            "hits": sum(&["proxy", "hits"]),
            "misses": sum(&["proxy", "misses"]),
            "served": served,
            "origin_fetches": origin_fetches,
            "peer_fetches": sum(&["proxy", "peer_fetches"]),
            "bad_requests": sum(&["proxy", "bad_requests"]),
            // Origin protection: responses served per origin fetch.
            "served_per_origin_fetch": if origin_fetches == 0 { Json::Null } else { json!(served as f64 / origin_fetches as f64) },
        },
        "cache": {
            "objects": cores.first().map_or(0, |c| num(c, &["cache", "objects"])),
            "bytes": cores.first().map_or(0, |c| num(c, &["cache", "bytes"])),
            "segment_bytes": cores.first().map_or(0, |c| num(c, &["cache", "segment_bytes"])),
            "limit_bytes": cache_limit_bytes,
            "evictions": sum(&["cache", "evictions"]),
            // What fits on the disk, and writes it refused for space.
            "usable_bytes": cores.first().map_or(0, |c| num(c, &["cache", "usable_bytes"])),
            "objects_max": cores.first().map_or(0, |c| num(c, &["cache", "objects_max"])),
            "space_errors": cores.first().map_or(0, |c| num(c, &["cache", "space_errors"])),
        },
        "dns": {"queries": dns},
        "dsht": {
            "datagrams_in": sum(&["dsht", "datagrams_in"]),
            "datagrams_out": sum(&["dsht", "datagrams_out"]),
            "gets_served": sum(&["dsht", "gets_served"]),
            "put_probes_received": sum(&["dsht", "put_probes_received"]),
            "stores_accepted": sum(&["dsht", "stores_accepted"]),
            "rpc_timeouts": sum(&["dsht", "rpc_timeouts"]),
        },
        "levels": levels["levels"],
        "samples": {
            "period_secs": SAMPLE_PERIOD.as_secs(),
            "columns": ["at_secs", "served", "hits", "misses", "origin_fetches", "cache_bytes"],
            "rows": samples,
        },
        "top_objects": top.iter().map(|(url, count, error, hits, bytes)| json!({
            "url": url, "count": count, "error": error, "hits": hits, "bytes": bytes,
        })).collect::<Vec<_>>(),
        "hot_keys": hot,
        "in_flight": in_flight,
    })
}

/// The status page: one self-contained HTML document (inline CSS, JS and
pub const PAGE: &str = include_str!("page.html");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_cores_and_joins_the_same_url() {
        let core = |served: u64, url: &str| {
            json!({
                "proxy": {"hits": 3, "misses": 1, "served": served, "origin_fetches": 1},
                "cache": {"objects": 2, "bytes": 100},
                "dns_queries": 5,
                "dsht": {"datagrams_in": 7},
                "top": [{"url": url, "count": served, "error": 0, "hits": 1, "bytes": 9}],
                "samples": [[10, 0, 0, 0, 0, 0], [20, served, 3, 1, 1, 100]],
                "hot_keys": [],
            })
        };
        let m = merge(
            &[core(4, "http://a/x"), core(6, "http://a/x")],
            json!({"node": "n", "addr": "a", "levels": []}),
            1000,
            1,
        );
        assert_eq!(m["proxy"]["served"], 10);
        assert_eq!(m["proxy"]["served_per_origin_fetch"], 5.0);
        assert_eq!(m["top_objects"][0]["count"], 10);
        assert_eq!(m["top_objects"].as_array().unwrap().len(), 1);
        assert_eq!(m["samples"]["rows"][1], json!([20, 10, 6, 2, 2, 100]));
        assert_eq!(m["dns"]["queries"], 10);
        assert_eq!(m["cache"]["bytes"], 100);
    }

    #[test]
    fn merge_lists_the_fills_in_flight_of_every_core_issue_24() {
        let core = |url: &str, source: &str| {
            json!({
                "proxy": {}, "cache": {}, "dsht": {}, "top": [], "samples": [], "hot_keys": [],
                "in_flight": [{"url": url, "source": source, "from": null, "level": null,
                               "bytes": 5, "resumes": 1, "waiters": 0}],
            })
        };
        let m = merge(
            &[core("http://b/y", "origin"), core("http://a/x", "peer")],
            json!({"node": "n", "addr": "a", "levels": []}),
            1000,
            1,
        );
        let f = m["in_flight"].as_array().unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0]["url"], "http://a/x");
        assert_eq!(f[1]["source"], "origin");
        assert_eq!(f[1]["resumes"], 1);
    }
}
