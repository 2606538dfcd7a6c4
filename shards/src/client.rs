//! The client commands: the paper's client library (§5), talking to a running
//! node through its loopback admin endpoint.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value as Json;

/// How long a client command waits for the node (a put or get may take
/// several RPC timeouts across three levels).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(40);

/// Percent-encodes a query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// GETs `target` from the admin endpoint at `node` and parses the JSON answer.
pub fn call(node: SocketAddr, target: &str) -> Result<Json, String> {
    let mut s = TcpStream::connect_timeout(&node, Duration::from_secs(3)).map_err(|e| {
        format!("cannot reach the node's admin endpoint at {node}: {e} (is `coral node` running?)")
    })?;
    s.set_read_timeout(Some(CLIENT_TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {node}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)
        .map_err(|e| format!("reading the answer: {e}"))?;
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("malformed answer from the node")?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let json: Json = serde_json::from_str(body.trim())
        .map_err(|e| format!("malformed JSON from the node: {e}"))?;
    if status != 200 {
        return Err(json
            .get("error")
            .and_then(Json::as_str)
            .unwrap_or("error")
            .to_string());
    }
    Ok(json)
}

/// Prints an answer: raw JSON, or a readable form.
pub fn print(json: &Json, as_json: bool) {
    if as_json {
        println!("{json}");
        return;
    }
    match json.get("op").and_then(Json::as_str) {
        Some("get") => {
            let values = json["values"].as_array().cloned().unwrap_or_default();
            if values.is_empty() {
                println!(
                    "not found ({} hops, {:.1} ms)",
                    json["hops"],
                    json["elapsed_ms"].as_f64().unwrap_or(0.0)
                );
            } else {
                let level = json["level"]
                    .as_u64()
                    .map_or("?".to_string(), |l| l.to_string());
                let local = if json["local"].as_bool() == Some(true) {
                    ", local"
                } else {
                    ""
                };
                println!(
                    "found {} value(s) at level {level}{local} ({} hops, {:.1} ms):",
                    values.len(),
                    json["hops"],
                    json["elapsed_ms"].as_f64().unwrap_or(0.0)
                );
                for v in values {
                    let shown = v["addr"]
                        .as_str()
                        .or(v["text"].as_str())
                        .map(str::to_string);
                    println!(
                        "  {}",
                        shown.unwrap_or_else(|| format!("0x{}", v["hex"].as_str().unwrap_or("")))
                    );
                }
            }
        }
        Some("put") => {
            for l in json["levels"].as_array().cloned().unwrap_or_default() {
                let at = l["stored_at"].as_str().unwrap_or("nowhere");
                let loaded = if l["stopped_at_loaded"].as_bool() == Some(true) {
                    " (stopped at a full and loaded node)"
                } else {
                    ""
                };
                println!("level {}: stored at {at}{loaded}", l["level"]);
            }
        }
        _ => {
            if let Some(levels) = json.get("levels").and_then(Json::as_array) {
                println!(
                    "node {} at {} on {} core(s)",
                    json["node"].as_str().unwrap_or("?"),
                    json["addr"].as_str().unwrap_or("?"),
                    json["cores"]
                );
                println!(
                    "{:<6} {:>12} {:>42} {:>8} {:>8} {:>9} {:>6}  merges/splits/leaves",
                    "level", "threshold", "cluster", "age s", "size", "contacts", "keys",
                );
                for l in levels {
                    let t = l["threshold_ms"]
                        .as_u64()
                        .map_or("∞".to_string(), |t| format!("{t} ms"));
                    let c = &l["clustering"];
                    println!(
                        "{:<6} {:>12} {:>42} {:>8} {:>8} {:>9} {:>6}  {}/{}/{}",
                        l["level"].to_string(),
                        t,
                        l["cluster"].as_str().unwrap_or("?"),
                        l["age_secs"].to_string(),
                        l["size_estimate"].to_string(),
                        l["contacts"].to_string(),
                        l["keys"].to_string(),
                        c["merges"],
                        c["splits"],
                        c["leaves"],
                    );
                }
            } else if let Some(cores) = json.get("cores").and_then(Json::as_array) {
                print_stats(cores);
            } else if let Some(nodes) = json.get("nodes").and_then(Json::as_array) {
                for n in nodes {
                    println!(
                        "{} {}",
                        n["addr"].as_str().unwrap_or("?"),
                        n["id"].as_str().unwrap_or("?")
                    );
                }
            } else {
                println!("{}", serde_json::to_string_pretty(json).unwrap_or_default());
            }
        }
    }
}

/// `coral stats`: one row per counter, one column per core and the total.
/// A core's answer holds the DSHT's counters at the top and a section per
/// service (`http`: CoralProxy and its cache, `dns`: dnssrv); sections are
/// flattened into dotted names (`dns.queries`, `http.cache.objects`),
/// lists of numbers by index (`http.peer_fetches.1`), and labelled rows
/// (`[qtype, rcode, level, count]`) as `name{labels}`.
fn print_stats(cores: &[Json]) {
    if cores.is_empty() {
        println!("no cores answered");
        return;
    }
    let flat: Vec<Vec<(String, u64)>> = cores.iter().map(flatten_counters).collect();
    // Every name any core reports, in the order first seen.
    let mut names: Vec<&str> = Vec::new();
    for f in &flat {
        for (n, _) in f {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    // The DSHT's own counters first, then each service's section.
    names.sort_by_key(|n| n.contains('.') || n.contains('{'));
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0).max(7);
    let mut head = format!("{:<width$}", "counter");
    for c in cores {
        head.push_str(&format!(" {:>12}", format!("core {}", c["core"])));
    }
    head.push_str(&format!(" {:>12}", "total"));
    println!("{head}");
    for name in names {
        let mut row = format!("{name:<width$}");
        let mut total = 0u64;
        // The cache's gauges (`http.cache.objects`, `.bytes`,
        // `.size_bytes`) are the whole cache's on every core: not added up.
        let whole = name.starts_with("http.cache.") && !name.ends_with("evictions");
        for f in &flat {
            let v = f.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
            total = if whole {
                total.max(v)
            } else {
                total.saturating_add(v)
            };
            row.push_str(&format!(" {v:>12}"));
        }
        row.push_str(&format!(" {total:>12}"));
        println!("{row}");
    }
}

/// One core's counters as `(name, value)`: see `print_stats`.
pub fn flatten_counters(core: &Json) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    flatten_into("", core, &mut out);
    out.retain(|(n, _)| n != "core");
    out
}

fn flatten_into(prefix: &str, v: &Json, out: &mut Vec<(String, u64)>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Json::Number(n) => out.push((prefix.to_string(), n.as_u64().unwrap_or(0))),
        Json::Bool(b) => out.push((prefix.to_string(), u64::from(*b))),
        Json::Object(m) => {
            for (k, v) in m {
                flatten_into(&join(k), v, out);
            }
        }
        Json::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_array() {
                    // A labelled row: the labels, then the count.
                    Some(row) if row.last().is_some_and(Json::is_u64) => {
                        let labels: Vec<String> = row[..row.len() - 1]
                            .iter()
                            .map(|l| l.as_str().map_or_else(|| l.to_string(), str::to_string))
                            .collect();
                        let n = row.last().and_then(Json::as_u64).unwrap_or(0);
                        out.push((format!("{prefix}{{{}}}", labels.join(",")), n));
                    }
                    _ => flatten_into(&format!("{prefix}.{i}"), item, out),
                }
            }
        }
        Json::Null | Json::String(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `coral stats`: dnssrv's object is counted by its fields (issue 25:
    /// its row read the object as a number, always 0), the proxy's too,
    /// labelled rows by their labels.
    #[test]
    fn stats_flatten_every_service_section() {
        let core = serde_json::json!({
            "core": 1,
            "datagrams_in": 7,
            "dns": {"queries": 5, "answers": [["A", "NOERROR", "L0", 4]]},
            "http": {"hits": 2, "peer_fetches": [1, 0, 3], "cache": {"objects": 9},
                     "requests": [["GET", 200, "local", 2]]},
        });
        let flat = flatten_counters(&core);
        let get = |n: &str| flat.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("datagrams_in"), Some(7));
        assert_eq!(get("dns.queries"), Some(5));
        assert_eq!(get("dns.answers{A,NOERROR,L0}"), Some(4));
        assert_eq!(get("http.hits"), Some(2));
        assert_eq!(get("http.peer_fetches.2"), Some(3));
        assert_eq!(get("http.cache.objects"), Some(9));
        assert_eq!(get("http.requests{GET,200,local}"), Some(2));
        assert_eq!(get("core"), None);
    }
}
