//! The configuration's tests: errors located in the file, the defaults
//! unchanged, and deploy/coral.toml, README.md and SECURITY.md checked
//! against them.

use super::*;

#[test]
fn the_default_is_a_standalone_loopback_node() {
    let c = NodeConfig::load(None).unwrap();
    assert!(c.dsht.ip().is_loopback());
    assert!(c.bootstrap.is_empty());
    assert_eq!(c.dht, coral::Config::default());
}

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/coral.toml");

#[test]
fn the_example_in_deploy_loads() {
    let c = NodeConfig::load(Some(Path::new(DEPLOY))).unwrap();
    c.validate().unwrap();
    assert_eq!(c.bootstrap.len(), 1);
    assert!(c.dsht.ip().is_unspecified());
    assert_eq!(c.id_addr(), "192.0.2.1:7000".parse().unwrap());
    assert_eq!(c.dht.level_thresholds_ms, vec![u32::MAX, 60, 20]);
    assert_eq!(check_file(Path::new(DEPLOY)).map(|_| ()), Ok(()));
}

#[test]
fn deploy_example_is_the_default_but_its_example_lines() {
    let text = std::fs::read_to_string(DEPLOY).unwrap();
    let without: String = text
        .lines()
        .filter(|l| !l.contains("# example:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = std::env::temp_dir().join(format!("coral-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("coral.toml");
    std::fs::write(&path, without).unwrap();
    let loaded = NodeConfig::load(Some(&path)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(loaded, NodeConfig::load(None).unwrap());
    // And the file names every key the defaults have (set, or commented
    // out with its default).
    let file_keys: Vec<String> = stated(&text).into_iter().map(|s| s.key).collect();
    for k in default_values().keys() {
        assert!(file_keys.contains(k), "deploy/coral.toml lacks {k}");
    }
    assert_eq!(text.matches("# example:").count(), 5);
}

#[test]
fn deploy_example_states_known_keys_with_their_defaults() {
    let text = std::fs::read_to_string(DEPLOY).unwrap();
    let defaults = default_values();
    let stated = stated(&text);
    assert!(stated.len() >= defaults.len(), "{stated:?}");
    for s in stated {
        // Known, and of the right type: the file's loader takes it alone.
        let (section, name) = match s.key.strip_prefix('[') {
            Some(k) => {
                let (section, name) = k.split_once("] ").unwrap();
                (format!("[{section}]\n"), name)
            }
            None => (String::new(), s.key.as_str()),
        };
        let one = format!("{section}{name} = {}\n", s.value);
        assert!(
            toml::from_str::<FileConfig>(&one).is_ok(),
            "deploy/coral.toml:{}: {} is not a key coral reads",
            s.line,
            s.key
        );
        if !s.example {
            assert_eq!(
                Some(&s.value),
                defaults.get(&s.key),
                "deploy/coral.toml:{}: {} is not the default",
                s.line,
                s.key
            );
        }
    }
}

/// The README's option table (found by its `config` and `default`
/// columns, wherever it is): every key it names is one coral reads,
/// with the default it states.
#[test]
fn readme_option_table_states_the_defaults() {
    const README: &str = include_str!("../../../README.md");
    let defaults = default_values();
    let lines: Vec<&str> = README.lines().collect();
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let header = lines
        .iter()
        .position(|l| {
            let c = cells(l);
            l.starts_with('|') && c.contains(&"config".into()) && c.contains(&"default".into())
        })
        .expect("README.md has a table with `config` and `default` columns");
    let head = cells(lines[header]);
    let config_col = head.iter().position(|c| c == "config").unwrap();
    let default_col = head.iter().position(|c| c == "default").unwrap();
    let mut checked = 0;
    for row in lines[header + 2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
    {
        let row = cells(row);
        let keys = table_keys(&row[config_col]);
        let values: Vec<&str> = if keys.len() == 1 {
            vec![row[default_col].as_str()]
        } else {
            row[default_col].split(", ").collect()
        };
        assert_eq!(keys.len(), values.len(), "README row {row:?}");
        for (key, value) in keys.iter().zip(values) {
            match defaults.get(key) {
                Some(d) => assert!(
                    readme_value_is(value, d),
                    "README.md: {key} default {value:?}, coral's is {d}"
                ),
                // No value by default: the README says what is used.
                None => assert!(
                    COMPUTED_DEFAULTS.contains(&key.as_str()),
                    "README.md names {key}, which is not a key coral reads"
                ),
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} keys in README's table");
}

/// SECURITY.md's table of limits: every config field it names is a
/// key coral reads, with its default; every fixed limit of
/// `shards/src/limits.rs` and every `coral::Config` field it names
/// exists with the value it states.
#[test]
fn security_md_limits_are_true() {
    const SECURITY: &str = include_str!("../../../SECURITY.md");
    let defaults = default_values();
    let core = format!("{:?}", coral::Config::default());
    let lines: Vec<&str> = SECURITY.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("| limit | value | set by |"))
        .expect("SECURITY.md has a table of limits");
    let mut checked = 0;
    for row in lines[header + 2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
    {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let (name, value, set_by) = (cells[0].trim_matches('`'), cells[1], cells[2]);
        if name.starts_with('[') && COMPUTED_DEFAULTS.contains(&name) {
            // Unset by default: the row says what is used.
            assert_eq!(set_by, "config", "{name}");
        } else if name.starts_with('[') {
            assert_eq!(set_by, "config", "{name}");
            let d = defaults
                .get(name)
                .unwrap_or_else(|| panic!("SECURITY.md: {name} is not a key coral reads"));
            assert!(
                readme_value_is(value, d),
                "SECURITY.md: {name} {value}, default {d}"
            );
        } else if name.starts_with("limits::") {
            assert_eq!(set_by, "fixed", "{name}");
            assert_eq!(
                crate::limits::value_of(name).as_deref(),
                Some(value),
                "SECURITY.md: {name}"
            );
        } else if name.starts_with("coral::limits::") {
            assert_eq!(set_by, "fixed", "{name}");
            let (d, p, r) = (
                coral::limits::DNS,
                coral::limits::PROXY,
                coral::limits::RESOLVE,
            );
            let v = match name {
                "coral::limits::DNS.answers_max" => d.answers_max,
                "coral::limits::DNS.nameservers_max" => d.nameservers_max,
                "coral::limits::DNS.ns_cache_max" => d.ns_cache_max,
                "coral::limits::DNS.compress_names_max" => d.compress_names_max,
                "coral::limits::DNS.rrl_buckets" => d.rrl_buckets,
                "coral::limits::DNS.near_nodes_max" => d.near_nodes_max,
                "coral::limits::DNS.live_checks_per_sec_max" => d.live_checks_per_sec_max as usize,
                "coral::limits::DNS.live_tracked_max" => d.live_tracked_max,
                "coral::limits::PROXY.pass_keys_max" => p.pass_keys_max,
                "coral::limits::PROXY.vary_urls_tracked_max" => p.vary_urls_tracked_max,
                "coral::limits::PROXY.range_bytes_max" => p.range_bytes_max,
                "coral::limits::PROXY.chunk_line_bytes_max" => p.chunk_line_bytes_max,
                "coral::limits::PROXY.targeted_field_bytes_max" => p.targeted_field_bytes_max,
                "coral::limits::PROXY.learned_vary_hosts_max" => p.learned_vary_hosts_max,
                "coral::limits::PROXY.learned_vary_fields_per_host_max" => {
                    p.learned_vary_fields_per_host_max
                }
                "coral::limits::PROXY.learned_vary_field_bytes_max" => {
                    p.learned_vary_field_bytes_max
                }
                "coral::limits::PROXY.learned_vary_urls_max" => p.learned_vary_urls_max,
                // The origin stub resolver's bounds (`coral::resolve`).
                "coral::limits::RESOLVE.servers_max" => r.servers_max,
                "coral::limits::RESOLVE.lookups_inflight_max" => r.lookups_inflight_max,
                "coral::limits::RESOLVE.waiters_per_client_max" => r.waiters_per_client_max,
                "coral::limits::RESOLVE.waiters_per_name_max" => r.waiters_per_name_max,
                "coral::limits::RESOLVE.cache_entries_max" => r.cache_entries_max,
                "coral::limits::RESOLVE.addresses_per_name_max" => r.addresses_per_name_max,
                "coral::limits::RESOLVE.cname_hops_max" => r.cname_hops_max,
                "coral::limits::RESOLVE.attempt_timeout_ms" => r.attempt_timeout_ms as usize,
                "coral::limits::RESOLVE.lookup_timeout_ms" => r.lookup_timeout_ms as usize,
                "coral::limits::RESOLVE.attempts_max" => r.attempts_max as usize,
                "coral::limits::RESOLVE.negative_ttl_max_secs" => r.negative_ttl_max_secs as usize,
                "coral::limits::RESOLVE.failure_ttl_secs" => r.failure_ttl_secs as usize,
                "coral::limits::RESOLVE.udp_answer_bytes_max" => r.udp_answer_bytes_max,
                // Verified peer bytes (issue 22 items 4-5, `coral::verify`).
                "coral::limits::VERIFY.chunk_bytes" => coral::limits::VERIFY.chunk_bytes as usize,
                "coral::limits::VERIFY.chunk_bytes_min" => {
                    coral::limits::VERIFY.chunk_bytes_min as usize
                }
                "coral::limits::VERIFY.chunk_bytes_max" => {
                    coral::limits::VERIFY.chunk_bytes_max as usize
                }
                "coral::limits::VERIFY.distrusted_signers_max" => {
                    coral::limits::VERIFY.distrusted_signers_max
                }
                // Evidence (issue 22 item 5 c, `coral::verify::evidence`).
                "coral::limits::EVIDENCE.ttl_secs" => coral::limits::EVIDENCE.ttl_secs as usize,
                "coral::limits::EVIDENCE.verdict_ttl_secs" => {
                    coral::limits::EVIDENCE.verdict_ttl_secs as usize
                }
                "coral::limits::EVIDENCE.lookup_wait_ms" => {
                    coral::limits::EVIDENCE.lookup_wait_ms as usize
                }
                "coral::limits::EVIDENCE.check_wait_ms" => {
                    coral::limits::EVIDENCE.check_wait_ms as usize
                }
                "coral::limits::EVIDENCE.signers_tracked_max" => {
                    coral::limits::EVIDENCE.signers_tracked_max
                }
                "coral::limits::EVIDENCE.accusers_per_lookup_max" => {
                    coral::limits::EVIDENCE.accusers_per_lookup_max
                }
                "coral::limits::EVIDENCE.origin_checks_per_minute_max" => {
                    coral::limits::EVIDENCE.origin_checks_per_minute_max as usize
                }
                "coral::limits::EVIDENCE.checked_pairs_max" => {
                    coral::limits::EVIDENCE.checked_pairs_max
                }
                "coral::limits::EVIDENCE.ignored_accusers_max" => {
                    coral::limits::EVIDENCE.ignored_accusers_max
                }
                "coral::limits::EVIDENCE.bytes_max" => coral::limits::EVIDENCE.bytes_max,
                "coral::limits::EVIDENCE.url_bytes_max" => coral::limits::EVIDENCE.url_bytes_max,
                "coral::limits::EVIDENCE.served_max" => coral::limits::EVIDENCE.served_max,
                "coral::limits::RESUME.sources_max" => coral::limits::RESUME.sources_max,
                "coral::limits::RESUME.bad_peers_max" => coral::limits::RESUME.bad_peers_max,
                // The fast path's memo of the last plain request (issue 27).
                "coral::limits::PROXY.plain_memo_bytes_max" => {
                    coral::limits::PROXY.plain_memo_bytes_max
                }
                _ => panic!("SECURITY.md: no {name}"),
            };
            assert_eq!(v.to_string(), value, "SECURITY.md: {name}");
        } else if name.starts_with("coral::dsht::limits::") {
            assert_eq!(set_by, "fixed", "{name}");
            let v = match name {
                "coral::dsht::limits::TRANSMIT_SLOTS_KEPT_MAX" => {
                    coral::dsht::limits::TRANSMIT_SLOTS_KEPT_MAX
                }
                "coral::dsht::limits::TRANSMIT_BUFFER_KEPT_BYTES" => {
                    coral::dsht::limits::TRANSMIT_BUFFER_KEPT_BYTES
                }
                _ => panic!("SECURITY.md: no {name}"),
            };
            assert_eq!(v.to_string(), value, "SECURITY.md: {name}");
        } else if let Some(field) = name.strip_prefix("coral::Config::") {
            let at = core
                .find(&format!(" {field}: "))
                .unwrap_or_else(|| panic!("SECURITY.md: no coral::Config::{field}"));
            let rest = &core[at + field.len() + 3..];
            let v = rest.split([',', ' ']).next().unwrap();
            assert_eq!(v, value, "SECURITY.md: {name}");
            assert!(
                !defaults.contains_key(&format!("[limits] {field}")),
                "{name} is a config field"
            );
        } else {
            continue;
        }
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} limits checked");
}

/// The keys whose default is computed from others (none is written).
const COMPUTED_DEFAULTS: &[&str] = &[
    "http",
    "public_addr",
    "[proxy] cache_dir",
    "state_dir",
    "network",
    "network_certificate",
    "network_key",
    "[proxy] cache_objects_max",
];

#[test]
fn computed_defaults_are_unset() {
    let d = FileConfig::default();
    assert_eq!(
        (d.http, d.public_addr, d.proxy.cache_dir),
        (None, None, None)
    );
    assert_eq!(
        (d.state_dir, d.network, d.network_certificate, d.network_key),
        (None, None, None, None)
    );
}

/// The keys of a cell of the README's `config` column:
/// "`[proxy] a`, `b`" names `[proxy] a` and `[proxy] b`.
fn table_keys(cell: &str) -> Vec<String> {
    let mut section = None;
    let mut out = Vec::new();
    for code in cell.split('`').skip(1).step_by(2) {
        let code = code.split(" = ").next().unwrap_or(code).trim();
        match code.strip_prefix('[').and_then(|c| c.split_once("] ")) {
            Some((s, name)) => {
                section = Some(s.to_string());
                out.push(format!("[{s}] {name}"));
            }
            None => match &section {
                Some(s) => out.push(format!("[{s}] {code}")),
                None => out.push(code.to_string()),
            },
        }
    }
    out
}

/// Whether the README's words for a default say `d`.
fn readme_value_is(text: &str, d: &toml::Value) -> bool {
    let t = text.trim().trim_matches('`').trim_matches('"');
    match d {
        toml::Value::Boolean(b) => t == if *b { "on" } else { "off" } || t == b.to_string(),
        toml::Value::Array(a) if a.is_empty() => t == "none" || t == "[]",
        toml::Value::String(s) => t == s,
        toml::Value::Integer(i) => t.replace(['_', ','], "") == i.to_string(),
        other => t == other.to_string(),
    }
}

/// Every key of the defaults with its value, as `key` or
/// `[section] key` (keys unset by default are absent).
fn default_values() -> BTreeMap<String, toml::Value> {
    let toml::Value::Table(top) = toml::Value::try_from(FileConfig::default()).unwrap() else {
        panic!("the defaults are a table");
    };
    let mut out = BTreeMap::new();
    for (k, v) in top {
        match v {
            toml::Value::Table(t) if k != "client_rtt_ms" => {
                for (name, v) in t {
                    out.insert(format!("[{k}] {name}"), v);
                }
            }
            v => {
                out.insert(k, v);
            }
        }
    }
    out
}

/// A `key = value` a TOML text states, set or commented out
/// (`# key = value`).
#[derive(Debug)]
struct Stated {
    key: String,
    value: toml::Value,
    example: bool,
    line: usize,
}

fn stated(text: &str) -> Vec<Stated> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.starts_with('[') {
            let head = l.split('#').next().unwrap_or("").trim();
            section = head
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            continue;
        }
        let body = l.strip_prefix('#').map(str::trim).unwrap_or(l);
        let Ok(table) = toml::from_str::<toml::Table>(body) else {
            continue;
        };
        let Some((name, value)) = table.into_iter().next() else {
            continue;
        };
        out.push(Stated {
            key: if section.is_empty() {
                name
            } else {
                format!("[{section}] {name}")
            },
            value,
            example: l.contains("# example:"),
            line: i + 1,
        });
    }
    out
}

#[test]
fn errors_name_the_file_the_line_and_the_key_as_written() {
    let dir = std::env::temp_dir().join(format!("coral-cfg-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.toml");
    let load = |text: &str| {
        std::fs::write(&path, text).unwrap();
        NodeConfig::load(Some(&path)).unwrap_err()
    };
    let p = path.display().to_string();
    // A value the core refuses, under its section, on its line.
    let e = load("cores = 1\n\n[dht]\nb = 0\n");
    assert!(e.starts_with(&format!("{p}:4: [dht] b")), "{e}");
    let e = load("[clusters]\neval_secs = 10\njoin_percent = 101\n");
    assert!(
        e.starts_with(&format!("{p}:3: [clusters] join_percent")),
        "{e}"
    );
    assert!(!e.contains("cluster_join_percent"), "{e}");
    // A type error and an unknown key, located by toml's spans.
    let e = load("# x\n[dht]\nbeta_per_min = \"many\"\n");
    assert!(e.starts_with(&format!("{p}:3: [dht] beta_per_min")), "{e}");
    let e = load("dsht = \"127.0.0.1:7000\"\ncolour = \"blue\"\n");
    assert!(e.starts_with(&format!("{p}:2: colour")), "{e}");
    // A check of several keys names the one the message is about.
    let e = load("admin = \"192.0.2.1:7080\"\n");
    assert!(e.starts_with(&format!("{p}:1: admin")), "{e}");
    // A wildcard without public_addr: refused by validate, located.
    std::fs::write(&path, "cores = 1\ndsht = \"0.0.0.0:7000\"\n").unwrap();
    let e = check_file(&path).unwrap_err();
    assert!(
        e.starts_with(&format!("{p}:2: dsht")) && e.contains("public_addr"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_files_are_refused_with_a_reason() {
    let bad: Result<FileConfig, _> = toml::from_str("dsht = \"nonsense\"");
    assert!(bad.is_err());
    let unknown: Result<FileConfig, _> = toml::from_str("colour = \"blue\"");
    assert!(unknown.is_err());
    let f: FileConfig = toml::from_str("admin = \"0.0.0.0:7080\"").unwrap();
    assert!(NodeConfig::from_file(&f).unwrap_err().contains("loopback"));
    let f: FileConfig = toml::from_str("[dht]\nb = 0").unwrap();
    assert!(NodeConfig::from_file(&f).is_err());
    let f: FileConfig = toml::from_str("[clusters]\neval_secs = 0").unwrap();
    assert!(NodeConfig::from_file(&f).is_err());
    let f: FileConfig = toml::from_str("zone = \"bad_label.test\"").unwrap();
    assert!(NodeConfig::from_file(&f).unwrap_err().contains("zone"));
    // [proxy] heuristic: "coral" or "rfc", a percent of at most 100.
    let f: FileConfig = toml::from_str("[proxy]\nheuristic = \"never\"").unwrap();
    assert!(NodeConfig::from_file(&f).unwrap_err().contains("heuristic"));
    let f: FileConfig = toml::from_str("[proxy]\nheuristic_last_modified_percent = 101").unwrap();
    assert!(NodeConfig::from_file(&f)
        .unwrap_err()
        .contains("heuristic_last_modified_percent"));
    let f: FileConfig = toml::from_str("[proxy]\nheuristic = \"rfc\"").unwrap();
    let rfc = NodeConfig::from_file(&f).unwrap().proxy.heuristic;
    assert_eq!(rfc.mode, coral::proxy::policy::HeuristicMode::Rfc);
}

#[test]
fn proxy_defaults_serve_on_loopback_8090_with_a_1gib_cache() {
    let c = NodeConfig::load(None).unwrap();
    assert_eq!(c.http_addr(), "127.0.0.1:8090".parse().unwrap());
    assert_eq!(
        c.cache_dir(),
        std::path::Path::new("coral-cache/127.0.0.1-7000")
    );
    assert_eq!(c.proxy, ProxySection::default().proxy_config().unwrap());
    assert_eq!(c.proxy.cache_size_bytes, 1 << 30);
    assert!(!c.proxy.allow_private_origins);
}

#[test]
fn proxy_section_sizes_and_static_answers_parse() {
    let f: FileConfig = toml::from_str(
        "http = \"127.11.0.1:8090\"\n[proxy]\ncache_size = \"512MiB\"\nresolve = [\"Origin.Example.=127.11.9.9\"]\nallow_private_origins = true",
    )
    .unwrap();
    let c = NodeConfig::from_file(&f).unwrap();
    assert_eq!(c.http_addr(), "127.11.0.1:8090".parse().unwrap());
    assert_eq!(c.proxy.cache_size_bytes, 512 << 20);
    assert_eq!(
        c.proxy.resolve,
        vec![("origin.example".to_string(), "127.11.9.9".parse().unwrap())]
    );
    assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
    assert_eq!(parse_size("100MB").unwrap(), 100_000_000);
    assert_eq!(parse_size("4096").unwrap(), 4096);
    assert!(parse_size("1 parsec").is_err());
    assert!(parse_size("99999999999999TiB").is_err());
    assert!(parse_resolve("x.com").is_err());
    assert!(parse_resolve("x.com=nope").is_err());
    let f: FileConfig = toml::from_str("[proxy]\nconnect_timeout_ms = 0").unwrap();
    assert!(NodeConfig::from_file(&f)
        .unwrap_err()
        .contains("connect_timeout_ms"));
    let f: FileConfig = toml::from_str("[proxy]\ncache_size = \"1KiB\"").unwrap();
    assert!(NodeConfig::from_file(&f).is_err());
}

#[test]
fn pointer_ttls_are_set_in_the_proxy_section_and_checked() {
    let load = |text: &str| {
        let f: FileConfig = toml::from_str(text).unwrap();
        NodeConfig::from_file(&f).map(|c| c.proxy)
    };
    let d = NodeConfig::load(None).unwrap().proxy;
    assert_eq!(
        (d.fetching_pointer_ttl_secs, d.complete_pointer_ttl_secs),
        (20, 3600)
    );
    let p = load("[proxy]\nfetching_pointer_ttl_secs = 2\ncomplete_pointer_ttl_secs = 3").unwrap();
    assert_eq!(
        (p.fetching_pointer_ttl_secs, p.complete_pointer_ttl_secs),
        (2, 3)
    );
    for (text, key) in [
        (
            "[proxy]\ncomplete_pointer_ttl_secs = 0",
            "complete_pointer_ttl_secs",
        ),
        (
            "[proxy]\nfetching_pointer_ttl_secs = 1",
            "fetching_pointer_ttl_secs",
        ),
        // The fetching pointer outlives the complete one: refused.
        ("[proxy]\ncomplete_pointer_ttl_secs = 10", "exceeds"),
        ("[proxy]\ncomplete_pointer_ttl_secs = 90000", "ttl_max_secs"),
        (
            "[limits]\nttl_max_secs = 600\n[proxy]\ncomplete_pointer_ttl_secs = 601",
            "ttl_max_secs (600)",
        ),
    ] {
        let e = load(text).unwrap_err();
        assert!(e.contains(key), "{text}: {e}");
    }
    assert!(toml::from_str::<FileConfig>("[proxy]\ncomplete_pointer_ttl_secs = -1").is_err());
}

/// The effective configuration of `coral node` with no file, with a
/// partial file and with deploy/coral.toml, as main had it before the
/// typed defaults replaced the embedded TOML: the defaults did not move.
#[test]
fn effective_configs_are_unchanged() {
    let dir = tempdir("coral-effective");
    let partial = dir.join("partial.toml");
    std::fs::write(
        &partial,
        "cores = 2\n[dht]\nb = 2\n[proxy]\ncache_size = \"2MiB\"\n[dnssrv]\nlive_secs = 5\n",
    )
    .unwrap();
    let got = [
        NodeConfig::load(None).unwrap(),
        NodeConfig::load(Some(&partial)).unwrap(),
        NodeConfig::load(Some(Path::new(DEPLOY))).unwrap(),
    ]
    .map(|c| effective(&c));
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", got.join("\n"));
    let want: Vec<&str> = EFFECTIVE.lines().collect();
    assert_eq!(got.as_slice(), want.as_slice());
}

/// A configuration's effective values: `[dnssrv]` as dnssrv reads it.
fn effective(c: &NodeConfig) -> String {
    let all = format!("{c:?}");
    let (a, rest) = all.split_once("dnssrv: DnsSection {").unwrap();
    let (_, b) = rest.split_once("}, dht: ").unwrap();
    format!(
        "{a}dht: {b} | {:?} | tcp_connections_max {} tcp_idle_ms {} non_recursive {} client_rtt_ms {:?}",
        c.dnssrv.dns_config(c),
        c.dnssrv.tcp_connections_max,
        c.dnssrv.tcp_idle_ms,
        c.dnssrv.non_recursive,
        c.dnssrv.client_rtt_ms,
    )
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const EFFECTIVE: &str = r#"NodeConfig { dsht: 127.0.0.1:7000, public_addr: None, log: "info", admin: 127.0.0.1:7080, bootstrap: [], cores: 0, zone: "coralcdn.test", alias: Some("coral.test"), dns: None, dht: Config { level_thresholds_ms: [4294967295, 60, 20], b: 1, alpha: 3, values_per_key_max: 4, beta_per_min: 12, bucket_size: 8, reply_contacts_max: 8, get_values_max: 4, rpc_timeout_ms: 2000, rpc_stall_ms: 500, lookup_contacts_max: 64, operation_timeout_ms: 30000, operations_max: 4096, pending_rpcs_max: 16384, ttl_max_secs: 86400, keys_per_level_max: 1048576, value_bytes_max: 255, token_rotate_secs: 300, transmit_queue_max: 65536, event_queue_max: 65536, verify_pings_max: 256, id_includes_port: false, require_id_binding: true, bucket_refresh_secs: 3600, cluster_manage: true, cluster_eval_secs: 300, cluster_join_eval_secs: 15, cluster_join_percent: 80, cluster_leave_percent: 50, cluster_join_sigma_centi: 200, cluster_split_sigma_centi: 0, cluster_rejoin_holdoff_secs: 3600, cluster_retry_holdoff_secs: 600, cluster_accesses_min: 8, cluster_samples_min: 3, cluster_observed_max: 256, cluster_validate_probes: 32, cluster_delta_log2: 2, cluster_delta_period_secs: 3600, cluster_size_margin_log2_centi: 100, cluster_splits_max: 3, hint_ttl_secs: 3600, hint_probes_max: 8, values_per_source_per_key_max: 1, values_per_prefix_per_key_max: 2, values_per_source_max: 4096, values_per_prefix_max: 16384, store_bytes_per_level_max: 134217728, bucket_contacts_per_ip_max: 1, bucket_contacts_per_prefix_max: 2, reply_amplification_max: 3, rate_requests_per_sec: 5, rate_verified_requests_per_sec: 1000, rate_window_secs: 10, rate_block_secs: 300, rate_sources_max: 16384, cluster_members_known_max: 1024 }, http: None, proxy: ProxyConfig { cache_dir: None, cache_size_bytes: 1073741824, cache_objects_max: None, allow_private_origins: false, resolve: [], connect_timeout_ms: 5000, first_byte_timeout_ms: 15000, idle_timeout_ms: 15000, client_idle_timeout_ms: 30000, object_bytes_max: 50000000, connections_max: 10000, negative_ttl_secs: 60, heuristic: Heuristic { mode: Coral, default_secs: 300, last_modified_percent: 10, max_secs: 86400 }, resolve_ttl_secs: 60, vary_variants_max: 8, fetching_pointer_ttl_secs: 20, complete_pointer_ttl_secs: 3600, access_log: None, resolvers: [], client_head_timeout_ms: 5000, client_body_timeout_ms: 10000, client_send_timeout_ms: 20000, forward_request_fields: [], audit_per_million: 0 }, state_dir: None, network: Own, network_certificate: None, network_key: None } | DnsConfig { zone: "coralcdn.test", alias: Some("coral.test"), level_thresholds_ms: [4294967295, 60, 20], answers_max: 4, nameservers_max: 3, live_secs: 300, udp_payload_bytes: 1232, default_level: 0, rrl_responses_per_sec: 100, rrl_slip: 2, probe_interval_secs: 600, probes_per_prefix: 4, probes_per_sec: 20, clients_max: 65536, client_rtt_secs: 3600, serial: 1, hold_ms: 400, held_max: 128 } | tcp_connections_max 256 tcp_idle_ms 10000 non_recursive false client_rtt_ms {}
NodeConfig { dsht: 127.0.0.1:7000, public_addr: None, log: "info", admin: 127.0.0.1:7080, bootstrap: [], cores: 2, zone: "coralcdn.test", alias: Some("coral.test"), dns: None, dht: Config { level_thresholds_ms: [4294967295, 60, 20], b: 2, alpha: 3, values_per_key_max: 4, beta_per_min: 12, bucket_size: 8, reply_contacts_max: 8, get_values_max: 4, rpc_timeout_ms: 2000, rpc_stall_ms: 500, lookup_contacts_max: 64, operation_timeout_ms: 30000, operations_max: 4096, pending_rpcs_max: 16384, ttl_max_secs: 86400, keys_per_level_max: 1048576, value_bytes_max: 255, token_rotate_secs: 300, transmit_queue_max: 65536, event_queue_max: 65536, verify_pings_max: 256, id_includes_port: false, require_id_binding: true, bucket_refresh_secs: 3600, cluster_manage: true, cluster_eval_secs: 300, cluster_join_eval_secs: 15, cluster_join_percent: 80, cluster_leave_percent: 50, cluster_join_sigma_centi: 200, cluster_split_sigma_centi: 0, cluster_rejoin_holdoff_secs: 3600, cluster_retry_holdoff_secs: 600, cluster_accesses_min: 8, cluster_samples_min: 3, cluster_observed_max: 256, cluster_validate_probes: 32, cluster_delta_log2: 2, cluster_delta_period_secs: 3600, cluster_size_margin_log2_centi: 100, cluster_splits_max: 3, hint_ttl_secs: 3600, hint_probes_max: 8, values_per_source_per_key_max: 1, values_per_prefix_per_key_max: 2, values_per_source_max: 4096, values_per_prefix_max: 16384, store_bytes_per_level_max: 134217728, bucket_contacts_per_ip_max: 1, bucket_contacts_per_prefix_max: 2, reply_amplification_max: 3, rate_requests_per_sec: 5, rate_verified_requests_per_sec: 1000, rate_window_secs: 10, rate_block_secs: 300, rate_sources_max: 16384, cluster_members_known_max: 1024 }, http: None, proxy: ProxyConfig { cache_dir: None, cache_size_bytes: 2097152, cache_objects_max: None, allow_private_origins: false, resolve: [], connect_timeout_ms: 5000, first_byte_timeout_ms: 15000, idle_timeout_ms: 15000, client_idle_timeout_ms: 30000, object_bytes_max: 50000000, connections_max: 10000, negative_ttl_secs: 60, heuristic: Heuristic { mode: Coral, default_secs: 300, last_modified_percent: 10, max_secs: 86400 }, resolve_ttl_secs: 60, vary_variants_max: 8, fetching_pointer_ttl_secs: 20, complete_pointer_ttl_secs: 3600, access_log: None, resolvers: [], client_head_timeout_ms: 5000, client_body_timeout_ms: 10000, client_send_timeout_ms: 20000, forward_request_fields: [], audit_per_million: 0 }, state_dir: None, network: Own, network_certificate: None, network_key: None } | DnsConfig { zone: "coralcdn.test", alias: Some("coral.test"), level_thresholds_ms: [4294967295, 60, 20], answers_max: 4, nameservers_max: 3, live_secs: 5, udp_payload_bytes: 1232, default_level: 0, rrl_responses_per_sec: 100, rrl_slip: 2, probe_interval_secs: 600, probes_per_prefix: 4, probes_per_sec: 20, clients_max: 65536, client_rtt_secs: 3600, serial: 1, hold_ms: 400, held_max: 128 } | tcp_connections_max 256 tcp_idle_ms 10000 non_recursive false client_rtt_ms {}
NodeConfig { dsht: 0.0.0.0:7000, public_addr: Some(192.0.2.1:7000), log: "info", admin: 127.0.0.1:7080, bootstrap: [192.0.2.10:7000], cores: 0, zone: "coralcdn.test", alias: Some("coral.test"), dns: None, dht: Config { level_thresholds_ms: [4294967295, 60, 20], b: 1, alpha: 3, values_per_key_max: 4, beta_per_min: 12, bucket_size: 8, reply_contacts_max: 8, get_values_max: 4, rpc_timeout_ms: 2000, rpc_stall_ms: 500, lookup_contacts_max: 64, operation_timeout_ms: 30000, operations_max: 4096, pending_rpcs_max: 16384, ttl_max_secs: 86400, keys_per_level_max: 1048576, value_bytes_max: 255, token_rotate_secs: 300, transmit_queue_max: 65536, event_queue_max: 65536, verify_pings_max: 256, id_includes_port: false, require_id_binding: true, bucket_refresh_secs: 3600, cluster_manage: true, cluster_eval_secs: 300, cluster_join_eval_secs: 15, cluster_join_percent: 80, cluster_leave_percent: 50, cluster_join_sigma_centi: 200, cluster_split_sigma_centi: 0, cluster_rejoin_holdoff_secs: 3600, cluster_retry_holdoff_secs: 600, cluster_accesses_min: 8, cluster_samples_min: 3, cluster_observed_max: 256, cluster_validate_probes: 32, cluster_delta_log2: 2, cluster_delta_period_secs: 3600, cluster_size_margin_log2_centi: 100, cluster_splits_max: 3, hint_ttl_secs: 3600, hint_probes_max: 8, values_per_source_per_key_max: 1, values_per_prefix_per_key_max: 2, values_per_source_max: 4096, values_per_prefix_max: 16384, store_bytes_per_level_max: 134217728, bucket_contacts_per_ip_max: 1, bucket_contacts_per_prefix_max: 2, reply_amplification_max: 3, rate_requests_per_sec: 5, rate_verified_requests_per_sec: 1000, rate_window_secs: 10, rate_block_secs: 300, rate_sources_max: 16384, cluster_members_known_max: 1024 }, http: None, proxy: ProxyConfig { cache_dir: Some("/var/cache/coral"), cache_size_bytes: 1073741824, cache_objects_max: None, allow_private_origins: false, resolve: [], connect_timeout_ms: 5000, first_byte_timeout_ms: 15000, idle_timeout_ms: 15000, client_idle_timeout_ms: 30000, object_bytes_max: 50000000, connections_max: 10000, negative_ttl_secs: 60, heuristic: Heuristic { mode: Coral, default_secs: 300, last_modified_percent: 10, max_secs: 86400 }, resolve_ttl_secs: 60, vary_variants_max: 8, fetching_pointer_ttl_secs: 20, complete_pointer_ttl_secs: 3600, access_log: None, resolvers: [], client_head_timeout_ms: 5000, client_body_timeout_ms: 10000, client_send_timeout_ms: 20000, forward_request_fields: [], audit_per_million: 0 }, state_dir: Some("/var/lib/coral"), network: Own, network_certificate: None, network_key: None } | DnsConfig { zone: "coralcdn.test", alias: Some("coral.test"), level_thresholds_ms: [4294967295, 60, 20], answers_max: 4, nameservers_max: 3, live_secs: 300, udp_payload_bytes: 1232, default_level: 0, rrl_responses_per_sec: 100, rrl_slip: 2, probe_interval_secs: 600, probes_per_prefix: 4, probes_per_sec: 20, clients_max: 65536, client_rtt_secs: 3600, serial: 1, hold_ms: 400, held_max: 128 } | tcp_connections_max 256 tcp_idle_ms 10000 non_recursive false client_rtt_ms {}"#;

#[test]
fn zone_and_alias_are_lower_case_without_the_root_dot() {
    let c = NodeConfig::load(None).unwrap();
    assert_eq!(c.zone, "coralcdn.test");
    assert_eq!(c.alias.as_deref(), Some("coral.test"));
    assert_eq!(dns_name("zone", "NYUCD.net.").unwrap(), "nyucd.net");
    assert!(dns_name("zone", "").is_err());
    assert!(dns_name("zone", "a..b").is_err());
    assert!(dns_name("zone", &"a".repeat(64)).is_err());
    assert!(dns_name("zone", "-a.b").is_err());
}
