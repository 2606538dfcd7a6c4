//! The disk cache (NSDI 2004 §3.2; DESIGN.md decision 4): cached objects in
//! memory-mapped files under `--cache-dir`, found by key on any core.
//!
//! This first version is simple and correct: one file per object, each
//! mapped, and an index behind one mutex. The record format (`coral::cache::
//! record`) is already the final one, so objects survive a restart and a
//! record cut short by a crash is never read back as complete.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use coral::cache::checksum::Checksum;
use coral::cache::record::{self, HEADER_BYTES};
pub use coral::cache::ObjectMeta;
use coral::Id;
use memmap2::{MmapOptions, MmapRaw};

use crate::steer;

/// The largest object the cache stores (the default), in bytes.
pub const OBJECT_BYTES_MAX: u64 = 50_000_000;
/// The largest stored response head, in bytes.
pub const HEAD_BYTES_MAX: usize = 64 << 10;
/// How often `wait_beyond` looks again at an object still being written.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// Where the cache lives and how large it may grow.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// The directory of the cache's files (created if missing).
    pub dir: PathBuf,
    /// The most bytes the cache's files may hold.
    pub size_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            dir: PathBuf::from("./coral-cache"),
            size_bytes: 1 << 30,
        }
    }
}

/// Why a cache call failed.
#[derive(Debug)]
pub enum CacheError {
    /// A file operation failed.
    Io(std::io::Error),
    /// The object (or its head) is larger than the cache stores.
    TooLarge,
    /// `begin`/`remove` on a core that does not own the key.
    NotOwner,
    /// The writer was aborted or failed earlier.
    Failed,
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Io(e) => write!(f, "cache I/O error: {e}"),
            CacheError::TooLarge => write!(f, "object larger than the cache stores"),
            CacheError::NotOwner => write!(f, "key is owned by another core"),
            CacheError::Failed => write!(f, "object write failed earlier"),
        }
    }
}

impl std::error::Error for CacheError {}

impl From<std::io::Error> for CacheError {
    fn from(e: std::io::Error) -> Self {
        CacheError::Io(e)
    }
}

/// An object's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectState {
    /// Bytes are still arriving; `len` body bytes are readable now.
    Writing {
        /// Body bytes written so far.
        len: u64,
    },
    /// Every body byte is there.
    Complete {
        /// The body length.
        len: u64,
    },
    /// The writer gave up; the object will not complete.
    Failed,
}

/// Counters of one core's cache handle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Complete objects in the whole cache.
    pub objects: u64,
    /// Bytes the cache's objects occupy on disk.
    pub bytes: u64,
    /// Lookups on this core that found an object.
    pub hits: u64,
    /// Lookups on this core that found none.
    pub misses: u64,
    /// Objects evicted (by this core) to stay within the size.
    pub evictions: u64,
}

const WRITING: u8 = 0;
const COMPLETE: u8 = 1;
const FAILED: u8 = 2;

/// One object's file and mapping.
struct Object {
    key: Id,
    path: PathBuf,
    file: File,
    map: MmapRaw,
    head_len: usize,
    /// Body bytes readable (Release-stored by the writer after the bytes).
    len: AtomicU64,
    state: AtomicU8,
    stored_secs: AtomicU64,
    fresh_until_secs: AtomicU64,
    expected_len: AtomicU64,
    /// Bytes of the file.
    alloc_len: AtomicU64,
}

impl Object {
    fn body_at(&self) -> usize {
        HEADER_BYTES + self.head_len
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        // A failed object's file is removed when its last reader is gone.
        if self.state.load(Ordering::Acquire) == FAILED {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[derive(Default)]
struct Slot {
    complete: Option<Arc<Object>>,
    writing: Option<Arc<Object>>,
}

struct Shared {
    dir: PathBuf,
    size_bytes: u64,
    cores: usize,
    index: Mutex<HashMap<Id, Slot>>,
    /// Complete objects in insertion order, for eviction.
    order: Mutex<std::collections::VecDeque<Id>>,
    bytes: AtomicU64,
    objects: AtomicU64,
    next_file: AtomicU64,
}

/// One core's handle on the cache. Used only on its core.
pub struct CoreCache {
    core: usize,
    shared: Arc<Shared>,
    hits: Cell<u64>,
    misses: Cell<u64>,
    evictions: Cell<u64>,
}

/// A readable object: while alive, its bytes stay mapped and unchanged.
#[derive(Clone)]
pub struct ObjectRef {
    obj: Arc<Object>,
}

/// Appends an object's body; on the key's owning core only.
pub struct ObjectWriter {
    obj: Option<Arc<Object>>,
    shared: Arc<Shared>,
    checksum: Checksum,
    /// The most body bytes this object may have.
    body_max: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Opens (or creates) the cache before the executors start: reads every
/// object file, keeps the complete ones and removes the rest. Returns one
/// handle per core.
pub fn open(config: &CacheConfig, cores: usize) -> Result<Vec<CoreCache>, CacheError> {
    let cores = cores.max(1);
    std::fs::create_dir_all(&config.dir)?;
    let shared = Arc::new(Shared {
        dir: config.dir.clone(),
        size_bytes: config.size_bytes,
        cores,
        index: Mutex::new(HashMap::new()),
        order: Mutex::new(Default::default()),
        bytes: AtomicU64::new(0),
        objects: AtomicU64::new(0),
        next_file: AtomicU64::new(0),
    });
    let mut max_n = 0u64;
    let mut found: Vec<(u64, Arc<Object>)> = Vec::new();
    for entry in std::fs::read_dir(&config.dir)? {
        let path = entry?.path();
        let Some(n) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".obj"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        max_n = max_n.max(n + 1);
        match load_object(&path) {
            Some(obj) => found.push((n, obj)),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    found.sort_by_key(|(n, _)| *n);
    {
        let mut index = lock(&shared.index);
        let mut order = lock(&shared.order);
        for (_, obj) in found {
            shared
                .bytes
                .fetch_add(obj.alloc_len.load(Ordering::Relaxed), Ordering::Relaxed);
            shared.objects.fetch_add(1, Ordering::Relaxed);
            order.push_back(obj.key);
            let slot = index.entry(obj.key).or_default();
            if let Some(old) = slot.complete.replace(obj) {
                // A newer record of the same key: the older one goes.
                shared
                    .bytes
                    .fetch_sub(old.alloc_len.load(Ordering::Relaxed), Ordering::Relaxed);
                shared.objects.fetch_sub(1, Ordering::Relaxed);
                let _ = std::fs::remove_file(&old.path);
            }
        }
    }
    shared.next_file.store(max_n, Ordering::Relaxed);
    Ok((0..cores)
        .map(|core| CoreCache {
            core,
            shared: shared.clone(),
            hits: Cell::new(0),
            misses: Cell::new(0),
            evictions: Cell::new(0),
        })
        .collect())
}

fn load_object(path: &Path) -> Option<Arc<Object>> {
    let file = OpenOptions::new().read(true).write(true).open(path).ok()?;
    let len = file.metadata().ok()?.len();
    if len < HEADER_BYTES as u64 {
        return None;
    }
    let map = MmapOptions::new().len(len as usize).map_raw(&file).ok()?;
    // SAFETY: the mapping covers `len` bytes of a file only this process
    // writes, and no writer is active on it during open.
    let bytes = unsafe { std::slice::from_raw_parts(map.as_ptr(), len as usize) };
    let rec = record::read_record(bytes, true).ok()?;
    let meta = if rec.meta_ok {
        rec.meta
    } else {
        ObjectMeta {
            fresh_until_secs: 0,
            ..rec.meta
        }
    };
    Some(Arc::new(Object {
        key: rec.key,
        path: path.to_path_buf(),
        file,
        map,
        head_len: rec.head_len as usize,
        len: AtomicU64::new(rec.body_len),
        state: AtomicU8::new(COMPLETE),
        stored_secs: AtomicU64::new(meta.stored_secs),
        fresh_until_secs: AtomicU64::new(meta.fresh_until_secs),
        expected_len: AtomicU64::new(meta.expected_len.unwrap_or(u64::MAX)),
        alloc_len: AtomicU64::new(len),
    }))
}

impl CoreCache {
    /// This handle's core.
    pub fn core(&self) -> usize {
        self.core
    }

    /// The core that owns `key` (where `begin` and `remove` run).
    pub fn owner_of(&self, key: &Id) -> usize {
        steer::shard_of_key(key, self.shared.cores)
    }

    /// The object stored under `key`: the complete copy if there is one,
    /// else the one being written.
    pub fn lookup(&self, key: &Id) -> Option<ObjectRef> {
        let index = lock(&self.shared.index);
        let found = index
            .get(key)
            .and_then(|s| s.complete.as_ref().or(s.writing.as_ref()))
            .map(|obj| ObjectRef { obj: obj.clone() });
        drop(index);
        match &found {
            Some(_) => self.hits.set(self.hits.get() + 1),
            None => self.misses.set(self.misses.get() + 1),
        }
        found
    }

    /// Starts storing `key` (on its owning core only). An older complete
    /// copy stays visible until `finish` replaces it.
    pub fn begin(
        &self,
        key: Id,
        meta: ObjectMeta,
        head: &[u8],
    ) -> Result<ObjectWriter, CacheError> {
        if self.owner_of(&key) != self.core {
            return Err(CacheError::NotOwner);
        }
        if head.len() > HEAD_BYTES_MAX {
            return Err(CacheError::TooLarge);
        }
        let body_max = meta.expected_len.unwrap_or(OBJECT_BYTES_MAX);
        if body_max > OBJECT_BYTES_MAX {
            return Err(CacheError::TooLarge);
        }
        let capacity = record::record_len(head.len(), body_max);
        let n = self.shared.next_file.fetch_add(1, Ordering::Relaxed);
        let path = self.shared.dir.join(format!("{n}.obj"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        // A sparse file: disk blocks are used only as bytes arrive.
        file.set_len(capacity)?;
        let map = MmapOptions::new().len(capacity as usize).map_raw(&file)?;
        let header = record::encode_header(&key, &meta, head.len() as u32, capacity);
        // SAFETY: the mapping is `capacity` ≥ HEADER_BYTES + head.len()
        // bytes, new, and not yet visible to any reader.
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), map.as_mut_ptr(), HEADER_BYTES);
            std::ptr::copy_nonoverlapping(
                head.as_ptr(),
                map.as_mut_ptr().add(HEADER_BYTES),
                head.len(),
            );
        }
        let obj = Arc::new(Object {
            key,
            path,
            file,
            map,
            head_len: head.len(),
            len: AtomicU64::new(0),
            state: AtomicU8::new(WRITING),
            stored_secs: AtomicU64::new(meta.stored_secs),
            fresh_until_secs: AtomicU64::new(meta.fresh_until_secs),
            expected_len: AtomicU64::new(meta.expected_len.unwrap_or(u64::MAX)),
            alloc_len: AtomicU64::new(capacity),
        });
        let previous = lock(&self.shared.index)
            .entry(key)
            .or_default()
            .writing
            .replace(obj.clone());
        if let Some(prev) = previous {
            prev.state.store(FAILED, Ordering::Release);
        }
        Ok(ObjectWriter {
            obj: Some(obj),
            shared: self.shared.clone(),
            checksum: record::content_checksum_start(&key, head),
            body_max,
        })
    }

    /// Removes `key` (owning core only); readers holding it keep reading.
    pub fn remove(&self, key: &Id) {
        if self.owner_of(key) != self.core {
            return;
        }
        let slot = lock(&self.shared.index).remove(key);
        if let Some(slot) = slot {
            if let Some(obj) = slot.complete {
                self.shared.drop_complete(&obj);
            }
            if let Some(obj) = slot.writing {
                obj.state.store(FAILED, Ordering::Release);
            }
        }
    }

    /// New freshness for a complete object, same body (after a 304).
    pub fn touch_meta(&self, key: &Id, meta: ObjectMeta) {
        let obj = lock(&self.shared.index)
            .get(key)
            .and_then(|s| s.complete.clone());
        if let Some(obj) = obj {
            obj.stored_secs.store(meta.stored_secs, Ordering::Relaxed);
            obj.fresh_until_secs
                .store(meta.fresh_until_secs, Ordering::Relaxed);
            obj.expected_len
                .store(meta.expected_len.unwrap_or(u64::MAX), Ordering::Relaxed);
            let bytes = record::encode_meta(&meta);
            // SAFETY: the freshness fields lie inside the header of this
            // mapping; readers never read them from the mapping (they read
            // the atomics above), so the write races with no reader.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    obj.map.as_mut_ptr().add(record::META_AT),
                    bytes.len(),
                );
            }
        }
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            objects: self.shared.objects.load(Ordering::Relaxed),
            bytes: self.shared.bytes.load(Ordering::Relaxed),
            hits: self.hits.get(),
            misses: self.misses.get(),
            evictions: self.evictions.get(),
        }
    }

    /// The complete objects whose keys this core owns (to renew their 1 h
    /// DSHT pointers, §3.2).
    pub fn complete_keys_owned(&self) -> Vec<Id> {
        lock(&self.shared.index)
            .iter()
            .filter(|(k, s)| s.complete.is_some() && self.owner_of(k) == self.core)
            .map(|(k, _)| *k)
            .collect()
    }
}

impl Shared {
    fn drop_complete(&self, obj: &Arc<Object>) {
        self.bytes
            .fetch_sub(obj.alloc_len.load(Ordering::Relaxed), Ordering::Relaxed);
        self.objects.fetch_sub(1, Ordering::Relaxed);
        // The file goes now; mappings readers hold stay valid (the inode
        // lives until the last mapping is gone).
        let _ = std::fs::remove_file(&obj.path);
    }

    /// Evicts the oldest complete objects until the cache fits its size.
    fn evict(&self) -> u64 {
        let mut n = 0;
        while self.bytes.load(Ordering::Relaxed) > self.size_bytes {
            let Some(key) = lock(&self.order).pop_front() else {
                break;
            };
            let victim = {
                let mut index = lock(&self.index);
                let victim = index.get_mut(&key).and_then(|s| s.complete.take());
                if index
                    .get(&key)
                    .is_some_and(|s| s.writing.is_none() && s.complete.is_none())
                {
                    index.remove(&key);
                }
                victim
            };
            if let Some(v) = victim {
                self.drop_complete(&v);
                n += 1;
            }
        }
        n
    }
}

impl ObjectRef {
    /// Freshness as stored (or as the last `touch_meta` set it).
    pub fn meta(&self) -> ObjectMeta {
        let e = self.obj.expected_len.load(Ordering::Relaxed);
        ObjectMeta {
            stored_secs: self.obj.stored_secs.load(Ordering::Relaxed),
            fresh_until_secs: self.obj.fresh_until_secs.load(Ordering::Relaxed),
            expected_len: (e != u64::MAX).then_some(e),
        }
    }

    /// The key.
    pub fn key(&self) -> Id {
        self.obj.key
    }

    /// The stored response head bytes, as given to `begin`.
    pub fn head(&self) -> &[u8] {
        // SAFETY: the head was written before the object was published and
        // is never written again; the mapping lives as long as `self`.
        unsafe {
            std::slice::from_raw_parts(self.obj.map.as_ptr().add(HEADER_BYTES), self.obj.head_len)
        }
    }

    /// Progress.
    pub fn state(&self) -> ObjectState {
        // Read the state before the length: a writer stores the length
        // before it marks the object complete.
        match self.obj.state.load(Ordering::Acquire) {
            COMPLETE => ObjectState::Complete {
                len: self.obj.len.load(Ordering::Acquire),
            },
            FAILED => ObjectState::Failed,
            _ => ObjectState::Writing {
                len: self.obj.len.load(Ordering::Acquire),
            },
        }
    }

    /// The body bytes available now within `[start, end)`.
    pub fn body(&self, start: u64, end: u64) -> &[u8] {
        let len = self.obj.len.load(Ordering::Acquire);
        let end = end.min(len);
        if start >= end {
            return &[];
        }
        // SAFETY: bytes below `len` were written before `len` was
        // Release-stored and are never written again; the mapping lives as
        // long as `self`.
        unsafe {
            std::slice::from_raw_parts(
                self.obj
                    .map
                    .as_ptr()
                    .add(self.obj.body_at() + start as usize),
                (end - start) as usize,
            )
        }
    }

    /// The file and file offset of body byte `at` (for sendfile/splice).
    pub fn file_at(&self, at: u64) -> (RawFd, u64) {
        (self.obj.file.as_raw_fd(), self.obj.body_at() as u64 + at)
    }

    /// Returns when more than `len` body bytes exist, or the object is
    /// complete or failed.
    pub async fn wait_beyond(&self, len: u64) {
        loop {
            match self.state() {
                ObjectState::Writing { len: now } if now <= len => {}
                _ => return,
            }
            glommio::timer::sleep(WAIT_POLL).await;
        }
    }

    /// Brings body bytes `[start, end)` into memory so that reading them on
    /// the executor takes no major page fault.
    pub async fn ensure_resident(&self, start: u64, end: u64) {
        let len = self.obj.len.load(Ordering::Acquire);
        let end = end.min(len);
        if start >= end {
            return;
        }
        let _ = self.obj.map.advise_range(
            memmap2::Advice::WillNeed,
            self.obj.body_at() + start as usize,
            (end - start) as usize,
        );
    }
}

impl ObjectWriter {
    /// Appends body bytes; fails (and fails the object) past its size limit.
    pub fn append(&mut self, data: &[u8]) -> Result<(), CacheError> {
        let Some(obj) = &self.obj else {
            return Err(CacheError::Failed);
        };
        if obj.state.load(Ordering::Acquire) == FAILED {
            return Err(CacheError::Failed);
        }
        let len = obj.len.load(Ordering::Relaxed);
        let at = obj.body_at() as u64 + len;
        if len + data.len() as u64 > self.body_max {
            obj.state.store(FAILED, Ordering::Release);
            let obj = obj.clone();
            self.unpublish(&obj);
            return Err(CacheError::TooLarge);
        }
        // SAFETY: [at, at + data.len()) lies inside the mapping and beyond
        // `len`, so no reader reads it until the store below publishes it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                obj.map.as_mut_ptr().add(at as usize),
                data.len(),
            );
        }
        self.checksum.update(data);
        obj.len.store(len + data.len() as u64, Ordering::Release);
        Ok(())
    }

    /// Completes the object: commits the record, then replaces any older
    /// copy in the index.
    pub fn finish(mut self) -> Result<(), CacheError> {
        let Some(obj) = self.obj.take() else {
            return Err(CacheError::Failed);
        };
        if obj.state.load(Ordering::Acquire) == FAILED {
            self.unpublish(&obj);
            return Err(CacheError::Failed);
        }
        let len = obj.len.load(Ordering::Relaxed);
        let expected = obj.expected_len.load(Ordering::Relaxed);
        {
            if expected != u64::MAX && expected != len {
                obj.state.store(FAILED, Ordering::Release);
                self.unpublish(&obj);
                return Err(CacheError::Failed);
            }
        }
        let sum = record::content_checksum_finish(self.checksum.clone(), len);
        let (checksum, commit) = record::commit_words(sum);
        let base = obj.map.as_mut_ptr();
        // SAFETY: the three words lie in this record's header; readers
        // never read them from the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                len.to_le_bytes().as_ptr(),
                base.add(record::BODY_LEN_AT),
                8,
            );
            std::ptr::copy_nonoverlapping(
                checksum.to_le_bytes().as_ptr(),
                base.add(record::CHECKSUM_AT),
                8,
            );
        }
        // The commit word goes last: nothing above may be reordered after it.
        std::sync::atomic::fence(Ordering::Release);
        // SAFETY: as above.
        unsafe {
            std::ptr::copy_nonoverlapping(
                commit.to_le_bytes().as_ptr(),
                base.add(record::COMMIT_AT),
                8,
            );
        }
        let final_len = record::record_len(obj.head_len, len);
        obj.file.set_len(final_len)?;
        obj.alloc_len.store(final_len, Ordering::Relaxed);
        obj.state.store(COMPLETE, Ordering::Release);
        let old = {
            let mut index = lock(&self.shared.index);
            let slot = index.entry(obj.key).or_default();
            if slot.writing.as_ref().is_some_and(|w| Arc::ptr_eq(w, &obj)) {
                slot.writing = None;
            }
            slot.complete.replace(obj.clone())
        };
        self.shared.bytes.fetch_add(final_len, Ordering::Relaxed);
        self.shared.objects.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared.order).push_back(obj.key);
        if let Some(old) = old {
            self.shared.drop_complete(&old);
        }
        self.shared.evict();
        Ok(())
    }

    /// Gives up: readers see `Failed`, the object is never served complete.
    pub fn abort(mut self) {
        if let Some(obj) = self.obj.take() {
            obj.state.store(FAILED, Ordering::Release);
            self.unpublish(&obj);
        }
    }

    fn unpublish(&self, obj: &Arc<Object>) {
        let mut index = lock(&self.shared.index);
        if let Some(slot) = index.get_mut(&obj.key) {
            if slot.writing.as_ref().is_some_and(|w| Arc::ptr_eq(w, obj)) {
                slot.writing = None;
            }
            if slot.writing.is_none() && slot.complete.is_none() {
                index.remove(&obj.key);
            }
        }
    }
}

impl Drop for ObjectWriter {
    fn drop(&mut self) {
        if let Some(obj) = self.obj.take() {
            obj.state.store(FAILED, Ordering::Release);
            self.unpublish(&obj);
        }
    }
}

#[cfg(test)]
mod tests;
