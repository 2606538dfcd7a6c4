//! The disk cache's tests: real files under a per-test directory.

use super::*;

/// The global allocator in test builds: mimalloc, counting allocations per
/// thread so a test can check that a path allocates nothing.
pub struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Allocations made by this thread so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}

// SAFETY: forwards every call to mimalloc unchanged; the counter is a
// const-initialized thread-local without a destructor, safe to touch here.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        mimalloc::MiMalloc.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        mimalloc::MiMalloc.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        mimalloc::MiMalloc.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        mimalloc::MiMalloc.realloc(ptr, layout, new_size)
    }
}

/// A directory under the system temp dir, removed when dropped.
pub(super) struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "coral-cache-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn key(n: u32) -> Id {
    coral::Id::hash(&n.to_le_bytes())
}

pub(super) fn meta(len: Option<u64>) -> ObjectMeta {
    ObjectMeta {
        stored_secs: 1000,
        fresh_until_secs: 2000,
        expected_len: len,
    }
}

pub(super) fn config(dir: &Path, size: u64) -> CacheConfig {
    CacheConfig {
        dir: dir.to_path_buf(),
        size_bytes: size,
        objects_max: None,
    }
}

/// Stores `body` under `key` through its owning core's handle.
pub(super) fn store(caches: &[CoreCache], k: Id, body: &[u8]) {
    store_on(&caches[caches[0].owner_of(&k)], k, body);
}

/// Stores `body` under `key` through `cache`, which must own it.
pub(super) fn store_on(cache: &CoreCache, k: Id, body: &[u8]) {
    let mut w = cache
        .begin(k, meta(Some(body.len() as u64)), b"HTTP/1.1 200 OK\r\n\r\n")
        .unwrap();
    for chunk in body.chunks(1000) {
        w.append(chunk).unwrap();
    }
    w.finish().unwrap();
}

pub(super) fn body_of(r: &ObjectRef) -> Vec<u8> {
    match r.state() {
        ObjectState::Complete { len } => r.body(0, len).to_vec(),
        s => panic!("not complete: {s:?}"),
    }
}

pub(super) fn pattern(n: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(n) as u8)
        .collect()
}

#[test]
fn section_3_2_an_object_stored_on_its_owner_is_found_on_every_core() {
    let dir = TempDir::new("every-core");
    let caches = open(&config(&dir.0, 1 << 24), 2).unwrap();
    for n in 0..20 {
        store(&caches, key(n), &pattern(n, 5000 + n as usize));
    }
    for c in &caches {
        for n in 0..20 {
            let r = c.lookup(&key(n)).expect("stored object");
            assert_eq!(body_of(&r), pattern(n, 5000 + n as usize));
            assert_eq!(r.head(), b"HTTP/1.1 200 OK\r\n\r\n");
            assert_eq!(r.meta(), meta(Some(5000 + n as u64)));
        }
        assert!(c.lookup(&key(99)).is_none());
    }
    assert_eq!(caches[0].stats().objects, 20);
}

#[test]
fn begin_on_a_core_that_does_not_own_the_key_is_refused() {
    let dir = TempDir::new("owner");
    let caches = open(&config(&dir.0, 1 << 24), 2).unwrap();
    let k = (0..).map(key).find(|k| caches[0].owner_of(k) == 1).unwrap();
    assert!(matches!(
        caches[0].begin(k, meta(None), b""),
        Err(CacheError::NotOwner)
    ));
}

#[test]
fn restart_keeps_complete_objects_and_drops_unfinished_ones() {
    let dir = TempDir::new("restart");
    {
        let caches = open(&config(&dir.0, 1 << 24), 2).unwrap();
        store(&caches, key(1), &pattern(1, 10_000));
        store(&caches, key(2), &pattern(2, 70_000));
        // Unannounced length, large enough to keep its own file.
        let k4 = key(4);
        let mut w = caches[caches[0].owner_of(&k4)]
            .begin(k4, meta(None), b"h")
            .unwrap();
        for chunk in pattern(4, 400_000).chunks(7000) {
            w.append(chunk).unwrap();
        }
        w.finish().unwrap();
        let k3 = key(3);
        let mut w = caches[caches[0].owner_of(&k3)]
            .begin(k3, meta(None), b"h")
            .unwrap();
        w.append(&pattern(3, 500)).unwrap();
        // Never finished: leak the writer as a crash would.
        std::mem::forget(w);
    }
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    assert_eq!(
        body_of(&caches[0].lookup(&key(1)).unwrap()),
        pattern(1, 10_000)
    );
    assert_eq!(
        body_of(&caches[0].lookup(&key(2)).unwrap()),
        pattern(2, 70_000)
    );
    assert_eq!(
        body_of(&caches[0].lookup(&key(4)).unwrap()),
        pattern(4, 400_000)
    );
    assert!(caches[0].lookup(&key(3)).is_none());
}

#[test]
fn an_older_copy_stays_visible_until_the_new_one_finishes() {
    let dir = TempDir::new("replace");
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    store(&caches, key(1), b"old body");
    let mut w = caches[0].begin(key(1), meta(None), b"h2").unwrap();
    w.append(b"new").unwrap();
    assert_eq!(body_of(&caches[0].lookup(&key(1)).unwrap()), b"old body");
    w.finish().unwrap();
    assert_eq!(body_of(&caches[0].lookup(&key(1)).unwrap()), b"new");
    assert_eq!(caches[0].stats().objects, 1);
    // After a restart the new copy is the one found, whatever the order of
    // the records in the files.
    drop(caches);
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    assert_eq!(body_of(&caches[0].lookup(&key(1)).unwrap()), b"new");
}

/// A lookup of the key this core looked up last takes the remembered entry
/// only while the partition is unchanged: every replacement, removal,
/// revalidation and store of the key is seen by the next lookup.
#[test]
fn a_repeated_lookup_sees_every_change_to_its_key() {
    let dir = TempDir::new("repeat");
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    let c = &caches[0];
    store(&caches, key(1), b"one");
    store(&caches, key(2), b"two");
    for _ in 0..3 {
        assert_eq!(body_of(&c.lookup(&key(1)).unwrap()), b"one");
    }
    assert!(c.last.get().is_some_and(|(e, _)| e.key == key(1)));
    // Another key between: each answers its own.
    assert_eq!(body_of(&c.lookup(&key(2)).unwrap()), b"two");
    assert_eq!(body_of(&c.lookup(&key(1)).unwrap()), b"one");
    // Replaced.
    store(&caches, key(1), b"uno");
    assert_eq!(body_of(&c.lookup(&key(1)).unwrap()), b"uno");
    assert_eq!(body_of(&c.lookup(&key(1)).unwrap()), b"uno");
    // New freshness.
    c.touch_meta(
        &key(1),
        ObjectMeta {
            stored_secs: 1500,
            fresh_until_secs: 9000,
            expected_len: Some(3),
        },
    );
    assert_eq!(c.lookup(&key(1)).unwrap().meta().fresh_until_secs, 9000);
    // Being rewritten: the complete copy, then the new one once finished.
    let mut w = c.begin(key(1), meta(None), b"h").unwrap();
    assert_eq!(body_of(&c.lookup(&key(1)).unwrap()), b"uno");
    w.append(b"eins").unwrap();
    w.finish().unwrap();
    assert_eq!(body_of(&c.lookup(&key(1)).unwrap()), b"eins");
    // Removed, then stored again.
    c.remove(&key(1));
    assert!(c.lookup(&key(1)).is_none());
    assert!(c.lookup(&key(1)).is_none());
    store(&caches, key(1), b"again");
    assert_eq!(body_of(&c.lookup(&key(1)).unwrap()), b"again");
    assert_eq!(body_of(&c.lookup(&key(2)).unwrap()), b"two");
}

/// Two lookups of a key that answer the same `entry_seq` found the same
/// record: the same head, body, freshness and state (what the fast path of
/// a hit relies on to skip comparing the stored head, issue 27). Heads and
/// bodies are replaced (same and other lengths), freshness rewritten, the
/// key removed and stored again, and other keys stored until segments are
/// evicted and reused, with lookups between every step.
#[test]
fn an_entry_seq_names_one_record() {
    let dir = TempDir::new("entry-seq");
    let caches = open(&config(&dir.0, 200_000), 1).unwrap();
    let c = &caches[0];
    type Seen = (Vec<u8>, Vec<u8>, u64, u64, u64);
    let mut seen: std::collections::HashMap<u64, Seen> = std::collections::HashMap::new();
    let (mut repeats, mut distinct) = (0, 0);
    let mut check = |c: &CoreCache| {
        let Some(r) = c.lookup(&key(1)) else { return };
        // A copy being written is seen too (its bytes so far move without
        // an index write: only a complete one is compared).
        let ObjectState::Complete { len } = r.state() else {
            return;
        };
        let now: Seen = (
            r.head().to_vec(),
            r.body(0, len).to_vec(),
            len,
            r.meta().stored_secs,
            r.meta().fresh_until_secs,
        );
        match seen.get(&r.entry_seq()) {
            Some(before) => {
                assert_eq!(*before, now, "seq {}", r.entry_seq());
                repeats += 1;
            }
            None => {
                seen.insert(r.entry_seq(), now);
                distinct += 1;
            }
        }
    };
    let heads: [&[u8]; 3] = [
        b"HTTP/1.1 200 OK\r\nETag: \"a\"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nETag: \"b\"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nETag: \"long\"\r\n\r\n",
    ];
    for round in 0..40u32 {
        let head = heads[round as usize % heads.len()];
        let body = pattern(round % 4, 4096 + (round as usize % 2));
        let mut w = c
            .begin(key(1), meta(Some(body.len() as u64)), head)
            .unwrap();
        check(c);
        w.append(&body).unwrap();
        check(c);
        w.finish().unwrap();
        check(c);
        check(c);
        if round % 3 == 0 {
            c.touch_meta(
                &key(1),
                ObjectMeta {
                    stored_secs: 1000 + u64::from(round),
                    fresh_until_secs: 9000,
                    expected_len: Some(body.len() as u64),
                },
            );
            check(c);
        }
        // Other keys: segments fill, are evicted and reused.
        store(&caches, key(100 + round), &pattern(round, 20_000));
        check(c);
        if round % 5 == 4 {
            c.remove(&key(1));
            check(c);
        }
    }
    assert!(
        repeats > 50 && distinct > 40,
        "{repeats} repeats, {distinct} values"
    );
}

#[test]
fn an_object_longer_than_announced_fails_and_is_not_served() {
    let dir = TempDir::new("too-long");
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    let mut w = caches[0].begin(key(1), meta(Some(4)), b"h").unwrap();
    let r = caches[0].lookup(&key(1)).unwrap();
    assert!(w.append(b"12345").is_err());
    assert_eq!(r.state(), ObjectState::Failed);
    assert!(w.finish().is_err());
    assert!(caches[0].lookup(&key(1)).is_none());
}

#[test]
fn eviction_keeps_the_cache_within_its_size() {
    let dir = TempDir::new("evict");
    let size = 200_000;
    let caches = open(&config(&dir.0, size), 1).unwrap();
    for n in 0..40 {
        store(&caches, key(n), &pattern(n, 20_000));
        assert!(caches[0].stats().bytes <= size, "{:?}", caches[0].stats());
    }
    let s = caches[0].stats();
    assert!(s.objects >= 5 && s.objects < 40, "{s:?}");
    // The newest object is there.
    assert_eq!(
        body_of(&caches[0].lookup(&key(39)).unwrap()),
        pattern(39, 20_000)
    );
}

fn seg_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(".crl"))
        })
        .count()
}

fn owned_by(caches: &[CoreCache], core: usize, from: u32) -> impl Iterator<Item = (u32, Id)> + '_ {
    (from..)
        .map(|n| (n, key(n)))
        .filter(move |(_, k)| caches[0].owner_of(k) == core)
}

#[test]
fn small_objects_are_packed_and_the_cache_stays_within_its_size() {
    let dir = TempDir::new("packing");
    let size = 1 << 20;
    let caches = open(&config(&dir.0, size), 1).unwrap();
    let c = &caches[0];
    // Three hot objects read between every insert; the rest are read once.
    for n in 0..3 {
        store(&caches, key(n), &pattern(n, 3000));
    }
    for n in 3..1500u32 {
        store(
            &caches,
            key(n),
            &pattern(n, 1000 + (n as usize * 37) % 6000),
        );
        for h in 0..3 {
            assert!(c.lookup(&key(h)).is_some(), "hot object {h} evicted at {n}");
        }
        let s = c.stats();
        assert!(s.bytes <= size, "{s:?}");
    }
    let s = c.stats();
    assert!(s.evictions > 0, "{s:?}");
    // Small objects share files: far fewer files than objects.
    assert!(seg_files(&dir.0) <= (size / SEGMENT_BYTES_MIN) as usize + 1);
    assert!(s.objects > 50, "{s:?}");
    // Whatever is still there is intact.
    let mut found = 0;
    for n in 3..1500u32 {
        if let Some(r) = c.lookup(&key(n)) {
            assert_eq!(body_of(&r), pattern(n, 1000 + (n as usize * 37) % 6000));
            found += 1;
        }
    }
    assert_eq!(found + 3, s.objects);
}

#[test]
fn section_3_2_pinned_objects_outlive_eviction_and_stop_being_renewed() {
    let dir = TempDir::new("pin");
    let size = 1 << 20;
    let caches = open(&config(&dir.0, size), 1).unwrap();
    let c = &caches[0];
    let far = now_secs() + 3600;
    for n in 0..4 {
        store(&caches, key(n), &pattern(n, 2000));
        c.pin(&key(n), far);
    }
    for n in 4..1200 {
        store(&caches, key(n), &pattern(n, 3000));
    }
    assert!(c.stats().evictions > 100);
    for n in 0..4 {
        assert_eq!(body_of(&c.lookup(&key(n)).unwrap()), pattern(n, 2000));
    }
    // The policy wanted them gone: their pointers are no longer renewed.
    let renewed = c.complete_keys_owned();
    for n in 0..4 {
        assert!(
            !renewed.contains(&key(n)),
            "pinned victim {n} still renewed"
        );
    }
    assert!(renewed.contains(&key(1199)));
}

#[test]
fn an_object_being_read_keeps_its_bytes_through_eviction() {
    let dir = TempDir::new("readers");
    let size = 1 << 20;
    let caches = open(&config(&dir.0, size), 1).unwrap();
    let c = &caches[0];
    store(&caches, key(0), &pattern(0, 2000));
    let held = c.lookup(&key(0)).unwrap();
    for n in 1..1500 {
        store(&caches, key(n), &pattern(n, 3000));
    }
    assert!(c.lookup(&key(0)).is_none(), "expected key 0 evicted");
    // Its segment is still mapped and unchanged.
    assert_eq!(body_of(&held), pattern(0, 2000));
    assert!(
        c.stats().bytes <= size + SEGMENT_BYTES_MIN,
        "{:?}",
        c.stats()
    );
}

#[test]
fn a_removed_object_stays_removed_after_a_restart() {
    let dir = TempDir::new("remove");
    {
        let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
        store(&caches, key(1), b"one");
        store(&caches, key(2), b"two");
        caches[0].remove(&key(1));
        assert!(caches[0].lookup(&key(1)).is_none());
    }
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    assert!(caches[0].lookup(&key(1)).is_none());
    assert_eq!(body_of(&caches[0].lookup(&key(2)).unwrap()), b"two");
}

#[test]
fn rfc9111_revalidated_freshness_survives_a_restart() {
    let dir = TempDir::new("touch");
    let fresher = ObjectMeta {
        stored_secs: 5000,
        fresh_until_secs: 9000,
        expected_len: Some(3),
    };
    {
        let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
        store(&caches, key(1), b"one");
        caches[0].touch_meta(&key(1), fresher);
        assert_eq!(caches[0].lookup(&key(1)).unwrap().meta(), fresher);
    }
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    assert_eq!(caches[0].lookup(&key(1)).unwrap().meta(), fresher);
}

#[test]
fn restart_on_a_different_number_of_cores_finds_every_object() {
    let dir = TempDir::new("recore");
    {
        let caches = open(&config(&dir.0, 1 << 24), 2).unwrap();
        for n in 0..40 {
            store(&caches, key(n), &pattern(n, 100 + n as usize * 50));
        }
    }
    for cores in [1, 3] {
        let caches = open(&config(&dir.0, 1 << 24), cores).unwrap();
        for c in &caches {
            for n in 0..40 {
                assert_eq!(
                    body_of(&c.lookup(&key(n)).unwrap()),
                    pattern(n, 100 + n as usize * 50)
                );
            }
        }
        // Objects keep being written and evicted on the new layout.
        let (n, k) = owned_by(&caches, cores - 1, 1000).next().unwrap();
        store(&caches, k, &pattern(n, 10));
    }
}

#[test]
fn an_object_of_unannounced_length_is_streamed_then_packed() {
    let dir = TempDir::new("unknown-len");
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    let c = &caches[0];
    let mut w = c
        .begin(key(1), meta(None), b"HTTP/1.1 200 OK\r\n\r\n")
        .unwrap();
    let r = c.lookup(&key(1)).unwrap();
    w.append(b"hello ").unwrap();
    assert_eq!(r.state(), ObjectState::Writing { len: 6 });
    assert_eq!(r.body(0, 100), b"hello ");
    w.append(b"world").unwrap();
    assert_eq!(r.body(3, 100), b"lo world");
    w.finish().unwrap();
    assert_eq!(r.state(), ObjectState::Complete { len: 11 });
    drop(r);
    let r = c.lookup(&key(1)).unwrap();
    assert_eq!(body_of(&r), b"hello world");
    drop(r);
    // Packed: the solo file is gone once no reader holds it.
    store(&caches, key(2), b"x");
    assert_eq!(seg_files(&dir.0), 1);
}

#[test]
fn file_at_points_at_the_body_in_the_segment_file() {
    let dir = TempDir::new("file-at");
    let caches = open(&config(&dir.0, 1 << 24), 1).unwrap();
    store(&caches, key(1), b"0123456789");
    let r = caches[0].lookup(&key(1)).unwrap();
    let (fd, off) = r.file_at(4);
    let mut buf = [0u8; 6];
    // SAFETY: fd is open while `r` lives; buf has room for 6 bytes.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), 6, off as libc::off_t) };
    assert_eq!(n, 6);
    assert_eq!(&buf, b"456789");
}

/// Env var that makes `crash_writer_child` act as the writer to be killed.
const CRASH_WRITER_DIR: &str = "CORAL_CACHE_CRASH_WRITER_DIR";

/// Not a test on its own: the child of
/// `section_3_2_kill_9_mid_object_never_serves_a_partial_object`. Stores
/// complete objects, leaves others mid-write, says READY and waits for
/// SIGKILL.
#[test]
fn crash_writer_child() {
    let Ok(dir) = std::env::var(CRASH_WRITER_DIR) else {
        return;
    };
    let caches = open(&config(Path::new(&dir), 1 << 26), 1).unwrap();
    let c = &caches[0];
    store(&caches, key(1), &pattern(1, 3000)); // packed
    store(&caches, key(2), &pattern(2, 5_000_000)); // solo
                                                    // Announced 4 MB, half written.
    let mut w3 = c.begin(key(3), meta(Some(4_000_000)), b"h3").unwrap();
    w3.append(&pattern(3, 2_000_000)).unwrap();
    // Every byte written, but never finished (no commit word).
    let mut w4 = c.begin(key(4), meta(Some(2000)), b"h4").unwrap();
    w4.append(&pattern(4, 2000)).unwrap();
    // Unannounced length, mid-stream.
    let mut w5 = c.begin(key(5), meta(None), b"h5").unwrap();
    w5.append(&pattern(5, 100_000)).unwrap();
    // A replacement of key 1 in progress: the old copy must survive.
    let mut w1 = c.begin(key(1), meta(Some(10)), b"h1").unwrap();
    w1.append(b"new").unwrap();
    use std::io::Write;
    println!("READY");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let _ = (&w1, &w3, &w4, &w5);
    }
}

/// Kills its child on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn section_3_2_kill_9_mid_object_never_serves_a_partial_object() {
    use std::io::BufRead;
    let dir = TempDir::new("kill9");
    let mut child = Child(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cache::tests::crash_writer_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_WRITER_DIR, &dir.0)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let ready = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("READY"));
    assert!(ready, "the writer never got ready");
    // SIGKILL: no destructor, no flush; the page cache keeps what it wrote.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let caches = open(&config(&dir.0, 1 << 26), 1).unwrap();
    let c = &caches[0];
    assert_eq!(
        body_of(&c.lookup(&key(1)).expect("old copy of key 1")),
        pattern(1, 3000)
    );
    assert_eq!(
        body_of(&c.lookup(&key(2)).expect("key 2")),
        pattern(2, 5_000_000)
    );
    for n in [3, 4, 5] {
        assert!(
            c.lookup(&key(n)).is_none(),
            "partial object {n} served after kill -9"
        );
    }
    assert_eq!(c.stats().objects, 2);
}

#[test]
fn section_3_2_readers_on_two_executors_stream_what_the_owner_writes() {
    use glommio::{LocalExecutorBuilder, Placement};
    use std::sync::atomic::AtomicBool;
    let dir = TempDir::new("executors");
    let caches = open(&config(&dir.0, 1 << 24), 2).unwrap();
    let (n0, k0) = owned_by(&caches, 0, 0).next().unwrap();
    let (n1, k1) = owned_by(&caches, 1, 0).next().unwrap();
    let total = 200 * 997;
    let mut it = caches.into_iter();
    let (c0, c1) = (it.next().unwrap(), it.next().unwrap());
    let begun = Arc::new(AtomicBool::new(false));
    let stored1 = Arc::new(AtomicBool::new(false));
    let (b, s1) = (begun.clone(), stored1.clone());
    let writer = LocalExecutorBuilder::new(Placement::Unbound)
        .name("cache-test-0")
        .io_memory(256 << 10)
        .spawn(move || async move {
            // Core 0 writes k0 in pieces, without announcing the length.
            let mut w = c0.begin(k0, meta(None), b"head").unwrap();
            b.store(true, Ordering::Release);
            let body = pattern(n0, total);
            for piece in body.chunks(997) {
                w.append(piece).unwrap();
                glommio::timer::sleep(std::time::Duration::from_micros(300)).await;
            }
            w.finish().unwrap();
            // And reads what core 1 stored.
            while !s1.load(Ordering::Acquire) {
                glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
            }
            body_of(&c0.lookup(&k1).unwrap())
        })
        .unwrap();
    let reader = LocalExecutorBuilder::new(Placement::Unbound)
        .name("cache-test-1")
        .io_memory(256 << 10)
        .spawn(move || async move {
            store_on(&c1, k1, &pattern(n1, 5000));
            stored1.store(true, Ordering::Release);
            while !begun.load(Ordering::Acquire) {
                glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
            }
            // Core 1 streams k0 while core 0 writes it (cut-through).
            let r = c1.lookup(&k0).expect("object in progress is visible");
            let mut got = Vec::new();
            let mut partial_reads = 0;
            loop {
                r.wait_beyond(got.len() as u64).await;
                match r.state() {
                    ObjectState::Writing { len } => {
                        partial_reads += 1;
                        got.extend_from_slice(r.body(got.len() as u64, len));
                    }
                    ObjectState::Complete { len } => {
                        got.extend_from_slice(r.body(got.len() as u64, len));
                        break;
                    }
                    ObjectState::Failed => panic!("writer failed"),
                }
            }
            r.ensure_resident(0, got.len() as u64).await;
            (got, partial_reads)
        })
        .unwrap();
    let from_core1 = writer.join().unwrap();
    let (got, partial_reads) = reader.join().unwrap();
    assert_eq!(from_core1, pattern(n1, 5000));
    assert_eq!(got.len(), total);
    assert!(got == pattern(n0, total), "streamed bytes differ");
    assert!(
        partial_reads > 1,
        "the reader never saw the object in progress"
    );
}

#[test]
fn the_hit_path_allocates_nothing() {
    let dir = TempDir::new("no-alloc");
    let caches = open(&config(&dir.0, 1 << 24), 2).unwrap();
    for n in 0..100 {
        store(&caches, key(n), &pattern(n, 4096));
    }
    let keys: Vec<Id> = (0..100).map(key).collect();
    let before = allocations();
    let mut bytes = 0;
    for _ in 0..10 {
        for k in &keys {
            // Both partitions: keys this core owns and keys the other owns.
            let r = caches[0].lookup(k).unwrap();
            bytes += r.body(0, 4096).len() + r.head().len();
            let r2 = r.clone();
            drop(r);
            bytes += r2.body(0, 1).len();
        }
    }
    assert_eq!(allocations() - before, 0, "lookups allocated");
    assert_eq!(bytes, 10 * 100 * (4096 + 19 + 1));
}

/// Not a test: figures for benches/README.md, "Disk cache". Run with
/// `cargo test --release -p coral-shards --bin coral cache::tests::bench_ -- --ignored --nocapture --test-threads=1`.
#[test]
#[ignore]
fn bench_hit_path_lookups_per_second() {
    let dir = TempDir::new("bench-hit");
    let objects = 100_000u32;
    let caches = open(&config(&dir.0, 4 << 30), 2).unwrap();
    for n in 0..objects {
        store(&caches, key(n), &pattern(n, 4096));
    }
    let mut rng = coral::rng::Rng::new(7);
    let keys: Vec<Id> = (0..1_000_000)
        .map(|_| key(rng.below(u64::from(objects)) as u32))
        .collect();
    let run = |c: &CoreCache, label: &str| {
        let before = allocations();
        let start = std::time::Instant::now();
        let mut sum = 0usize;
        for round in 0..5 {
            for k in &keys {
                let r = c.lookup(k).unwrap();
                sum += r.head().len() + round;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let n = 5 * keys.len();
        println!(
            "{label}: {:.2} M lookups/s ({:.0} ns each), {} allocations, checksum {sum}",
            n as f64 / secs / 1e6,
            secs * 1e9 / n as f64,
            allocations() - before
        );
    };
    println!("{objects} objects of 4 KiB, 2 partitions, uniform random keys (half owned by the other core)");
    run(&caches[0], "one thread");
    // Two threads at once, one handle each: lookups scale with no lock.
    let mut it = caches.into_iter();
    let (c0, c1) = (it.next().unwrap(), it.next().unwrap());
    let run = &run;
    std::thread::scope(|s| {
        s.spawn(move || run(&c0, "two threads, thread 0"));
        s.spawn(move || run(&c1, "two threads, thread 1"));
    });
}

/// Not a test: index memory per object at one million objects (with 1.5
/// million written, so the ghost queue and free handles are in use).
#[test]
#[ignore]
fn bench_index_bytes_per_object_at_one_million() {
    let dir = TempDir::new("bench-index");
    // One core sized for 1 M entries.
    let mut cfg = config(&dir.0, 2 << 30);
    cfg.objects_max = Some(1_000_000);
    let caches = open(&cfg, 1).unwrap();
    let c = &caches[0];
    for n in 0..1_500_000u32 {
        store_on(c, key(n), b"");
    }
    let (bytes, objects) = c.index_memory();
    println!(
        "{objects} objects, index {} MiB: {:.1} bytes per object (partition slots 48 B at 3/4 load, handle 40 B, policy 24 B, ghost); stats {:?}",
        bytes >> 20,
        bytes as f64 / objects as f64,
        c.stats()
    );
}

/// The body version `v` of object `n` carries: its head says which.
fn versioned(n: u32, v: u32) -> (Vec<u8>, Vec<u8>) {
    let head = format!("HTTP/1.1 200 OK\r\nX-V: {n}.{v}\r\n\r\n").into_bytes();
    let body = pattern(
        n.wrapping_mul(7919) ^ v,
        500 + ((n * 131 + v * 17) % 9000) as usize,
    );
    (head, body)
}

/// Writes the race below waits for before it stops.
const RACE_WRITES_MIN: u64 = 3000;

#[test]
fn section_3_2_readers_on_another_core_never_see_a_torn_or_freed_object() {
    use std::sync::atomic::AtomicBool;
    let dir = TempDir::new("race");
    // Small: the owner evicts, cleans and frees segments all the time.
    let caches = open(&config(&dir.0, 2 << 20), 2).unwrap();
    let keys: Vec<(u32, Id)> = owned_by(&caches, 0, 0).take(400).collect();
    let mut it = caches.into_iter();
    let (c0, c1) = (it.next().unwrap(), it.next().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let keys = Arc::new(keys);
    let (stop_w, keys_w, done_w) = (stop.clone(), keys.clone(), done.clone());
    let writer = std::thread::spawn(move || {
        let mut rng = coral::rng::Rng::new(5);
        let mut writes = 0u64;
        while !stop_w.load(Ordering::Relaxed) {
            let (n, k) = keys_w[rng.below(keys_w.len() as u64) as usize];
            let v = rng.below(1000) as u32;
            match rng.below(10) {
                0 => c0.remove(&k),
                1 => {
                    // Unannounced length, sometimes abandoned half-way.
                    let (head, body) = versioned(n, v);
                    let mut w = c0.begin(k, meta(None), &head).unwrap();
                    let half = body.len() / 2;
                    w.append(&body[..half]).unwrap();
                    if rng.below(2) == 0 {
                        w.abort();
                    } else {
                        w.append(&body[half..]).unwrap();
                        w.finish().unwrap();
                    }
                }
                _ => {
                    let (head, body) = versioned(n, v);
                    let mut w = c0.begin(k, meta(Some(body.len() as u64)), &head).unwrap();
                    w.append(&body).unwrap();
                    w.finish().unwrap();
                }
            }
            writes += 1;
            done_w.store(writes, Ordering::Relaxed);
        }
        (writes, c0.stats())
    });
    // Runs until enough writes (evicting, cleaning and freeing) raced
    // enough reads — a count, not a clock, so a loaded machine only makes it
    // take longer; the deadline is for a writer that stopped making progress.
    let started = std::time::Instant::now();
    let mut rng = coral::rng::Rng::new(6);
    let (mut checked, mut partial) = (0u64, 0u64);
    while (done.load(Ordering::Relaxed) < RACE_WRITES_MIN || checked <= 100)
        && started.elapsed() < std::time::Duration::from_secs(120)
    {
        let (n, k) = keys[rng.below(keys.len() as u64) as usize];
        let Some(r) = c1.lookup(&k) else { continue };
        let head = std::str::from_utf8(r.head()).unwrap().to_string();
        let v: u32 = head
            .split("X-V: ")
            .nth(1)
            .and_then(|s| s.split("\r\n").next())
            .and_then(|s| s.split('.').nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("torn head {head:?}"));
        assert!(
            head.contains(&format!("X-V: {n}.")),
            "head of another key: {head:?}"
        );
        let (_, want) = versioned(n, v);
        match r.state() {
            ObjectState::Complete { len } => {
                assert_eq!(r.body(0, len), &want[..], "key {n} version {v}");
                checked += 1;
            }
            ObjectState::Writing { len } => {
                assert_eq!(
                    r.body(0, len),
                    &want[..len as usize],
                    "key {n} version {v} in progress"
                );
                partial += 1;
            }
            ObjectState::Failed => {}
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (writes, stats) = writer.join().unwrap();
    assert!(checked > 100, "only {checked} objects checked");
    assert!(
        stats.evictions > 0 && writes >= RACE_WRITES_MIN,
        "{writes} writes, {stats:?}"
    );
    eprintln!(
        "{checked} complete and {partial} partial reads checked against {writes} writes; {stats:?}"
    );
}

#[test]
fn ensure_resident_reads_a_cold_range_in_before_the_executor_touches_it() {
    use glommio::{LocalExecutorBuilder, Placement};
    let dir = TempDir::new("resident");
    let caches = open(&config(&dir.0, 1 << 26), 1).unwrap();
    let len = 2_000_000usize;
    store(&caches, key(1), &pattern(1, len));
    let c = caches.into_iter().next().unwrap();
    let (cold, warm, intact) = LocalExecutorBuilder::new(Placement::Unbound)
        .name("cache-resident")
        .io_memory(256 << 10)
        .spawn(move || async move {
            let r = c.lookup(&key(1)).unwrap();
            let ptr = r.body(0, len as u64).as_ptr();
            let (fd, _) = r.file_at(0);
            let page = page_bytes();
            let a = (ptr as usize) & !(page - 1);
            let b = (ptr as usize + len).div_ceil(page) * page;
            // Write it out, drop it from this mapping and from the page cache.
            // SAFETY: fd is the open segment file; [a, b) lies inside its
            // mapping, whose bytes are on disk after fsync.
            unsafe {
                libc::fsync(fd);
                libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_DONTNEED);
                libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
            }
            let cold = !resident(ptr, len);
            r.ensure_resident(0, len as u64).await;
            let warm = resident(ptr, len);
            (cold, warm, body_of(&r) == pattern(1, len))
        })
        .unwrap()
        .join()
        .unwrap();
    if !cold {
        eprintln!("note: the kernel kept the pages; the cold path was not exercised");
    }
    assert!(warm, "still not resident after ensure_resident");
    assert!(intact);
}

#[test]
fn after_a_restart_restored_segments_are_cleaned_and_evicted_like_new_ones() {
    let dir = TempDir::new("restart-churn");
    let size = 4 << 20;
    let len_of = |n: u32| {
        if n % 10 == 0 {
            300_000
        } else {
            1000 + (n as usize * 53) % 9000
        }
    };
    {
        let caches = open(&config(&dir.0, size), 1).unwrap();
        for n in 0..300 {
            if n % 20 == 5 {
                // Unannounced length.
                let mut w = caches[0].begin(key(n), meta(None), b"h").unwrap();
                w.append(&pattern(n, len_of(n))).unwrap();
                w.finish().unwrap();
            } else {
                store(&caches, key(n), &pattern(n, len_of(n)));
            }
        }
    }
    let caches = open(&config(&dir.0, size), 1).unwrap();
    let c = &caches[0];
    let restored = c.stats().objects;
    assert!(restored > 20, "{:?}", c.stats());
    for n in 300..1500 {
        store(&caches, key(n), &pattern(n, len_of(n)));
        assert!(c.stats().bytes <= size, "{:?}", c.stats());
    }
    let mut present = 0;
    for n in 0..1500 {
        if let Some(r) = c.lookup(&key(n)) {
            assert_eq!(body_of(&r), pattern(n, len_of(n)), "object {n}");
            present += 1;
        }
    }
    assert_eq!(present, c.stats().objects);
    // The restored files were freed as their objects left.
    assert!(seg_files(&dir.0) < 300, "{} files", seg_files(&dir.0));
}

// ---------------------------------------------------------------- index memory by objects (issue 23 item 4)

/// This process's resident anonymous memory, in bytes (`RssAnon`: the
/// heap, not the segment files other tests map).
/// Resident bytes of the pages of `[at, at + len)` (`mincore`): exactly
/// this memory's, whatever other tests running at once allocate.
fn rss_of(at: usize, len: usize) -> u64 {
    let page = 4096usize;
    let start = at & !(page - 1);
    let pages = (at + len - start).div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: the range lies in memory this process holds (a live
    // allocation, rounded out to its pages), and `vec` has a byte per page.
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, pages * page, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    (vec.iter().filter(|&&b| b & 1 == 1).count() * page) as u64
}

#[test]
fn index_ram_per_object_is_at_most_200_bytes() {
    let per = index_bytes_per_object();
    assert!(
        per <= INDEX_BYTES_PER_OBJECT_MAX,
        "{per} bytes of index per object (bound {INDEX_BYTES_PER_OBJECT_MAX})"
    );
    // The figure is the real one: a core's index with every handle used,
    // measured by its own accounting, is within it.
    let dir = TempDir::new("index-per-object");
    let mut cfg = config(&dir.0, 64 << 20);
    cfg.objects_max = Some(20_000);
    let caches = open(&cfg, 1).unwrap();
    let c = &caches[0];
    for n in 0..30_000u32 {
        store_on(c, key(n), b"");
    }
    let (bytes, objects) = c.index_memory();
    assert!(objects >= 15_000, "{objects} objects held");
    let measured = bytes as u64 / c.plan().objects_max;
    assert!(
        measured <= per,
        "measured {measured} bytes per object over the index's cap, stated {per}"
    );
}

#[test]
fn the_object_cap_is_enforced_and_defaults_from_the_size() {
    // Default: one object per 16 KiB of the size used, within bounds.
    let p = plan(1 << 30, None, 1, None);
    assert_eq!(p.objects_max, (1 << 30) / OBJECT_BYTES_MEAN_DEFAULT);
    assert_eq!(
        plan(1 << 20, None, 1, None).objects_max,
        OBJECTS_DEFAULT_MIN
    );
    assert_eq!(
        plan(1 << 50, None, 1, None).objects_max,
        OBJECTS_DEFAULT_MAX
    );
    // What fits on the disk: 15/16 of its room.
    let p = plan(2 << 40, None, 2, Some(32 << 20));
    assert!(p.shrunk());
    assert_eq!(p.usable_bytes, (32 << 20) - (2 << 20));
    assert!(p.to_string().contains("does not fit"), "{p}");
    // Enforced: a cache of 2048 objects never holds more.
    let dir = TempDir::new("object-cap");
    let mut cfg = config(&dir.0, 256 << 20);
    cfg.objects_max = Some(2048);
    let caches = open(&cfg, 1).unwrap();
    for n in 0..5000u32 {
        store_on(&caches[0], key(n), b"x");
    }
    let s = caches[0].stats();
    assert!(
        s.objects <= 2048,
        "{} objects over a cap of 2048",
        s.objects
    );
    assert!(s.objects >= 1024, "{} objects", s.objects);
}

#[test]
fn an_empty_index_for_millions_of_objects_costs_under_1mb_per_gb() {
    // Measured in a process of its own: tests running at once in this one
    // leave the allocator handing out memory that was touched before.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "cache::tests::an_empty_index_alone", "--ignored"])
        .args(["--test-threads=1", "--nocapture"])
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 passed"), "{said}");
}

#[test]
#[ignore = "run alone by an_empty_index_for_millions_of_objects_costs_under_1mb_per_gb"]
fn an_empty_index_alone() {
    // A cache of 64 GiB with the default cap (4 Mi objects): its tables
    // are reserved, not touched, until objects come.
    let dir = TempDir::new("index-empty");
    let size: u64 = 64 << 30;
    let p = plan(size, None, 1, None);
    let parts: Vec<index::Partition> = vec![index::Partition::new(p.objects_max as usize)];
    // The resident memory of its tables' pages (not the process's RSS,
    // which other tests running at once move).
    let grown: u64 = parts[0]
        .tables()
        .iter()
        .map(|&(at, len)| rss_of(at, len))
        .sum();
    // The measure sees memory that is touched.
    let touched = vec![1u8; 8 << 20];
    assert!(rss_of(touched.as_ptr() as usize, touched.len()) >= 8 << 20);
    drop(touched);
    assert!(
        grown <= (size >> 30) << 20,
        "an empty index for {} objects took {grown} bytes of RSS (bound 1 MiB per GiB: {} bytes)",
        p.objects_max,
        (size >> 30) << 20
    );
    drop(parts);
    drop(dir);
}

/// A store into a cache whose packing segments hold more live bytes than
/// one segment can take is made room for by eviction, after at most
/// `CLEANS_WITHOUT_GAIN_MAX` cleanings that free nothing: before the
/// bound, cleaning moved the live objects from segment to segment — the
/// round-9 store of a 4 KiB object into this 200,000-byte cache copied
/// 60 GB over 348 s and then answered full.
#[test]
fn cleaning_that_frees_nothing_stops_and_the_store_evicts() {
    let dir = TempDir::new("clean-no-gain");
    let caches = open(&config(&dir.0, 200_000), 1).unwrap();
    let c = &caches[0];
    let seg = c.local.shared().segment_bytes;
    for round in 0..60u32 {
        let cleaned_before = c.stats().cleaned_bytes;
        let body = pattern(round % 4, 4096);
        let mut w = c
            .begin(
                key(1),
                meta(Some(body.len() as u64)),
                b"HTTP/1.1 200 OK\r\n\r\n",
            )
            .unwrap_or_else(|e| panic!("round {round}: {e:?} {:?}", c.stats()));
        w.append(&body).unwrap();
        w.finish().unwrap();
        store(&caches, key(100 + round), &pattern(round, 9_000));
        let cleaned = c.stats().cleaned_bytes - cleaned_before;
        // Two stores, each at most two cleanings without gain and then
        // cleanings that each lower the accounted bytes by something.
        assert!(
            cleaned <= 8 * seg,
            "round {round}: {cleaned} bytes cleaned for two stores ({:?})",
            c.stats()
        );
        assert!(c.stats().bytes <= 200_000, "{:?}", c.stats());
        assert_eq!(body_of(&c.lookup(&key(1)).unwrap()), body);
        if round % 5 == 4 {
            c.remove(&key(1));
        }
    }
}

/// `CoreCache::lookup` as it was before its memo was read in place
/// (session 8): the entry copied out of the cell and back. The reference.
fn lookup_before(c: &CoreCache, key: &Id) -> Option<ObjectRef> {
    let shared = c.shared();
    let part = &shared.parts[c.owner_of(key)];
    loop {
        let found = match c.last.get() {
            Some((e, seq)) if e.key == *key && part.seq_now() == seq => Some((e, seq)),
            _ => {
                let found = part.lookup(key);
                c.last.set(found);
                found
            }
        };
        let Some((e, seq)) = found else {
            c.misses.set(c.misses.get() + 1);
            return None;
        };
        let Some(slot) = shared.segs.get(e.seg as usize) else {
            c.misses.set(c.misses.get() + 1);
            return None;
        };
        let readers = shared.reader_count(c.core, e.seg);
        readers.fetch_add(1, Ordering::SeqCst);
        let ptr = slot.ptr.load(Ordering::Acquire);
        if !part.unchanged_since(seq) {
            readers.fetch_sub(1, Ordering::Release);
            continue;
        }
        if ptr.is_null() {
            readers.fetch_sub(1, Ordering::Release);
            c.misses.set(c.misses.get() + 1);
            return None;
        }
        part.count_hit(e.handle);
        c.hits.set(c.hits.get() + 1);
        return Some(ObjectRef {
            local: c.local.clone(),
            seg: e.seg,
            // SAFETY: the entry's offset lies inside its segment.
            rec: unsafe { ptr.add(e.off as usize) },
            rec_off: u64::from(e.off),
            head_len: e.head_len as usize,
            complete_len: if e.state == index::COMPLETE {
                e.body_len
            } else {
                u64::MAX
            },
            meta: ObjectMeta {
                stored_secs: u64::from(e.stored_secs),
                fresh_until_secs: u64::from(e.fresh_until_secs),
                expected_len: (e.expected_len != u64::MAX).then_some(e.expected_len),
            },
            seq,
        });
    }
}

/// What a lookup answered, field by field.
type Answered = Option<(u32, usize, u64, usize, u64, u64, u64, Option<u64>, u64)>;

fn answered(r: Option<ObjectRef>) -> Answered {
    r.map(|r| {
        (
            r.seg,
            r.rec as usize,
            r.rec_off,
            r.head_len,
            r.complete_len,
            r.meta.stored_secs,
            r.meta.fresh_until_secs,
            r.meta.expected_len,
            r.seq,
        )
    })
}

/// The lookup with its memo read in place answers as the one before, and
/// counts the same hits and misses, over stores being written, finished,
/// replaced, freshened, removed and evicted, lookups of the same key in a
/// row (the memo), of other keys between them, and of absent keys.
#[test]
fn the_lookup_answers_as_the_one_before() {
    let dir = TempDir::new("lookup-before");
    let caches = open(&config(&dir.0, 200_000), 1).unwrap();
    let c = &caches[0];
    let mut compared = 0;
    let mut check = |c: &CoreCache| {
        for k in [1, 1, 2, 1, 7, 7, 1, 1] {
            let (h, m) = (c.hits.get(), c.misses.get());
            let before = answered(lookup_before(c, &key(k)));
            let counted = (c.hits.get() - h, c.misses.get() - m);
            let (h, m) = (c.hits.get(), c.misses.get());
            let now = answered(c.lookup(&key(k)));
            assert_eq!(now, before, "key {k}");
            assert_eq!((c.hits.get() - h, c.misses.get() - m), counted, "key {k}");
            compared += 1;
        }
    };
    for round in 0..40u32 {
        let body = pattern(round % 4, 4096 + (round as usize % 3));
        let mut w = c
            .begin(
                key(1),
                meta(Some(body.len() as u64)),
                b"HTTP/1.1 200 OK\r\n\r\n",
            )
            .unwrap();
        check(c);
        w.append(&body).unwrap();
        check(c);
        w.finish().unwrap();
        check(c);
        if round % 3 == 0 {
            c.touch_meta(
                &key(1),
                ObjectMeta {
                    stored_secs: 1000 + u64::from(round),
                    fresh_until_secs: 9000,
                    expected_len: Some(body.len() as u64),
                },
            );
            check(c);
        }
        if round % 2 == 0 {
            store(&caches, key(2), &pattern(round, 3000));
        }
        store(&caches, key(100 + round), &pattern(round, 20_000));
        check(c);
        if round % 5 == 4 {
            c.remove(&key(1));
            check(c);
        }
    }
    assert!(compared > 1000);
}
