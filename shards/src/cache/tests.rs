//! The disk cache's tests: real files under a per-test directory.

use super::*;

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
    }
}

/// Stores `body` under `key` through its owning core's handle.
pub(super) fn store(caches: &[CoreCache], k: Id, body: &[u8]) {
    let owner = caches[0].owner_of(&k);
    let mut w = caches[owner]
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

fn pattern(n: u32, len: usize) -> Vec<u8> {
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
