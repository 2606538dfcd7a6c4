//! Architecture invariant: the `coral` core crate does no I/O. Its manifest
//! may depend only on pure-computation crates; no async runtime, socket,
//! mmap or clock crate may appear. This test reads the manifest and fails if
//! one does, so the boundary is checked, not just stated.

const ALLOWED: &[&str] = &[
    "sha1",
    "smallvec",
    "ahash",
    "httparse",
    "domain",
    "ed25519-dalek",
    // SHA-256 of verified peer bytes (issue 22 item 4): pure computation.
    "sha2",
];

#[test]
fn core_crate_depends_only_on_pure_crates() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        if section != "[dependencies]" || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line.split(['=', ' ']).next().unwrap();
        assert!(
            ALLOWED.contains(&name),
            "the core crate gained dependency `{name}`: I/O, runtimes and clocks belong in shards/"
        );
    }
}

#[test]
fn core_sources_never_read_the_clock_or_touch_the_network() {
    let forbidden = [
        "Instant::now",
        "SystemTime",
        "std::net::UdpSocket",
        "std::thread",
        "std::fs",
        "Mutex",
    ];
    let mut stack = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for f in forbidden {
                    assert!(!text.contains(f), "{} uses {f}", path.display());
                }
            }
        }
    }
}
