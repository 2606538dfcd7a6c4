//! The disk cache on a full or failing disk, and index memory by objects
//! (issue 23 items 3 and 4), against a real `coral node` and an nginx
//! origin.
//!
//! Each test runs on a thread of its own that enters new mount and network
//! namespaces (`unshare(CLONE_NEWNS | CLONE_NEWNET)`: a thread may, since
//! its filesystem context is its own after CLONE_NEWNS). There it mounts a
//! 40 MiB tmpfs for the cache and brings up its own loopback; every process
//! it starts (nginx, the node, curl) inherits both, so nothing touches the
//! host's mounts or network, and the tmpfs goes when the thread ends.
//! Needs root (as the other namespace tests do); without it the tests say
//! SKIPPED.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// The tmpfs's size: the reproduction (40 MB under `--cache-size 1GiB`).
const TMPFS_MIB: u64 = 40;
/// The most RSS a node on one core may have after starting with
/// `--cache-size 2TB` on a small disk, in KiB: the index is sized for what
/// fits and is touched only as objects come (before: RSS grew ~450 MB/s).
const RSS_2TB_KIB_MAX: u64 = 256 << 10;

/// Runs `f` on a thread in new mount and network namespaces with a
/// `TMPFS_MIB` tmpfs mounted on `dir` and loopback up; `None` (and a
/// SKIPPED line) where namespaces cannot be made (not root).
fn in_namespaces<T: Send + 'static>(
    dir: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        // SAFETY: unshare and mount with valid, NUL-terminated arguments;
        // they change only this thread's namespaces.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET) != 0 {
                eprintln!(
                    "SKIPPED: needs root to make mount and network namespaces: {}",
                    std::io::Error::last_os_error()
                );
                return None;
            }
            // Mounts made here stay here.
            let rc = libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            );
            assert_eq!(rc, 0, "make / private: {}", std::io::Error::last_os_error());
        }
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_MIB}m"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("mount");
        assert!(st.success(), "mount tmpfs on {}", dir.display());
        let st = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("ip");
        assert!(st.success(), "ip link set lo up");
        Some(f())
    })
    .join()
    .unwrap()
}

/// A node on 127.0.0.1 (in the test's network namespace) with its proxy's
/// cache in `cache` of `size`, the origin at 127.0.0.2, logging at info to
/// `log`.
fn node(cache: &Path, size: &str, log: &Path) -> NodeBuilder {
    Node::on("127.0.0.1")
        .args(&["--http", "127.0.0.1:8090", "--cache-dir"])
        .args(&[cache.to_str().unwrap(), "--cache-size", size])
        .origin("127.0.0.2")
        .rust_log(Some("info,coral::proxy::fetcher=debug"))
        .log(log)
}

fn get(n: &Node, path: &str) -> Answer {
    n.curl(&coralized(ORIGIN, 80, path), &[])
}

/// Writes zeros to `path` until the disk refuses: fills the tmpfs the way
/// another program sharing the disk would.
fn fill_disk(path: &Path) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    let mut n = 0u64;
    while f.write_all(&chunk).is_ok() {
        n += chunk.len() as u64;
    }
    // The last partial chunk, a page at a time.
    while f.write_all(&chunk[..4096]).is_ok() {
        n += 4096;
    }
    n
}

/// The node's resident memory in KiB (`VmRSS` in /proc/PID/status).
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The last lines of a log, for a failure's message.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn body_of(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + n * 7) as u8).collect()
}

#[test]
fn full_disk_objects_are_evicted_for_or_served_uncached_and_restart_reads_without_faulting() {
    let tmp = temp_dir("disk-full");
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let small: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("small-{i}.bin"), body_of(i, 4096)))
        .collect();
    let large: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("large-{i}.bin"), body_of(i + 100, 1 << 20)))
        .collect();
    let files: Vec<(&str, &[u8])> = small
        .iter()
        .chain(&large)
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    web_root(tmp.path(), &files);
    let log = tmp.path().join("node.log");
    let (cache2, tmp2) = (cache.clone(), tmp.path().to_path_buf());
    in_namespaces(&cache, move || {
        let cache = cache2;
        let _origin = Nginx::start(&tmp2, "127.0.0.2:80".parse().unwrap(), &tmp2.join("www"));
        let mut n = node(&cache, "1GiB", &log).start();
        // Fill the cache past its room: every answer 200 and whole.
        for (name, body) in large.iter().take(30) {
            let a = get(&n, &format!("/{name}"));
            assert_eq!(a.status, 200, "{name}: {a:?}\n{}", tail(&n.log()));
            assert!(a.body == *body, "{name}: body differs");
        }
        // Then another program fills what is left of the disk.
        let filler = cache.join("filler");
        fill_disk(&filler);
        // New objects, large and small, are still served whole.
        for (name, body) in large[30..].iter().chain(&small) {
            let a = get(&n, &format!("/{name}"));
            assert_eq!(
                a.status,
                200,
                "{name} on a full disk: {:?}\n{}",
                a.curl_err,
                tail(&n.log())
            );
            assert!(a.body == *body, "{name}: body differs on a full disk");
        }
        // At start it says the configured size does not fit, and what it uses.
        assert!(
            n.log().contains("does not fit"),
            "no start-up line on the disk's room:\n{}",
            n.log()
        );
        let usable = n.metric("coral_cache_usable_bytes");
        assert!(
            usable > 0.0 && usable < (TMPFS_MIB << 20) as f64,
            "usable bytes {usable} on a {TMPFS_MIB} MiB disk"
        );
        // The node said what is wrong, once, and counts it.
        let errors = n.metric("coral_cache_space_errors_total");
        assert!(errors >= 1.0, "space errors counted: {errors}");
        let log_text = n.log();
        assert_eq!(
            log_text.matches("refused a write for space").count(),
            1,
            "one log line on the full disk:\n{log_text}"
        );
        let status = n.status_json();
        assert!(
            status["cache"]["space_errors"].as_u64().unwrap_or(0) >= 1,
            "status page shows the space errors: {}",
            status["cache"]
        );
        // Restart on the full disk (killed: nothing flushed): it starts
        // (no SIGBUS from touching an unwritten page) and serves.
        n.kill();
        std::fs::write(&log, "").unwrap();
        n.restart();
        let last = &small[small.len() - 1];
        let a = get(&n, &format!("/{}", last.0));
        assert_eq!(a.status, 200, "after a restart on a full disk: {a:?}");
        assert!(a.body == last.1);
        let fresh = get(&n, "/large-0.bin");
        assert_eq!(fresh.status, 200);
        assert!(fresh.body == large[0].1);
        // A torn segment (cut mid-record) and a garbled one are skipped
        // and logged; the node starts and serves.
        n.kill();
        let mut segs: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("seg-"))
            .collect();
        segs.sort();
        assert!(segs.len() >= 2, "segments: {segs:?}");
        let torn = &segs[0];
        let len = std::fs::metadata(torn).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(torn).unwrap();
        f.set_len(len.min(4096 + 200)).unwrap();
        drop(f);
        let garbled = &segs[segs.len() - 1];
        let mut bytes = std::fs::read(garbled).unwrap();
        for b in bytes.iter_mut().skip(96).step_by(97).take(2000) {
            *b ^= 0x5a;
        }
        std::fs::write(garbled, &bytes).unwrap();
        std::fs::write(&log, "").unwrap();
        n.restart();
        let log_text = n.log();
        assert!(
            log_text.contains("torn, corrupt or unreadable segment"),
            "the damaged segments are logged:\n{log_text}"
        );
        for (name, body) in large.iter().take(3).chain(small.iter().take(3)) {
            let a = get(&n, &format!("/{name}"));
            assert_eq!(a.status, 200, "{name} after damaged segments");
            assert!(a.body == *body, "{name}: body differs after damage");
        }
        // The disk freed again: the node still serves, and SIGTERM stops it.
        std::fs::remove_file(&filler).unwrap();
        n.signal(libc::SIGTERM);
        let st = n.wait_exit(Duration::from_secs(30));
        assert!(st.success(), "SIGTERM: {st}");
    });
}

#[test]
fn cache_size_2tb_on_a_small_disk_starts_at_once_with_modest_memory() {
    let tmp = temp_dir("disk-2tb");
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let log = tmp.path().join("node.log");
    let conf = tmp.path().join("coral.toml");
    std::fs::write(
        &conf,
        format!(
            "[proxy]\ncache_dir = \"{}\"\ncache_size = \"2TB\"\n",
            cache.display()
        ),
    )
    .unwrap();
    let (cache2, tmp2) = (cache.clone(), tmp.path().to_path_buf());
    in_namespaces(&cache, move || {
        let root = web_root(&tmp2, &[("a.txt", b"hello")]);
        let _origin = Nginx::start(&tmp2, "127.0.0.2:80".parse().unwrap(), &root);
        let started = std::time::Instant::now();
        let n = node(&cache2, "2TB", &log).start();
        let ready_in = started.elapsed();
        let rss = rss_kib(n.pid());
        eprintln!("2TB on a {TMPFS_MIB} MiB tmpfs: ready in {ready_in:?}, VmRSS {rss} KiB");
        assert!(
            n.log().contains("does not fit"),
            "start-up line:\n{}",
            n.log()
        );
        assert!(
            rss < RSS_2TB_KIB_MAX,
            "VmRSS {rss} KiB with --cache-size 2TB (bound {RSS_2TB_KIB_MAX} KiB)"
        );
        let a = get(&n, "/a.txt");
        assert_eq!(a.status, 200);
        assert_eq!(a.body, b"hello");
        // Still modest after serving.
        assert!(rss_kib(n.pid()) < RSS_2TB_KIB_MAX);
        // check-config says what the configuration implies: it does not fit.
        let out = Command::new(CORAL)
            .arg("check-config")
            .arg(&conf)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "check-config: {out:?}");
        assert!(
            text.contains("warning: cache") && text.contains("does not fit"),
            "check-config on a 2TB cache of a {TMPFS_MIB} MiB disk:\n{text}"
        );
        assert!(text.contains("index RAM up to"), "{text}");
        assert!(
            !text.contains(": ok:"),
            "a size that does not fit is not ok:\n{text}"
        );
    });
}
