//! The disk cache (NSDI 2004 §3.2; DESIGN.md decision 4): objects in
//! memory-mapped segment files under `--cache-dir`, found by key on any core
//! without a lock, streamed to readers on every core while they arrive.
//!
//! - **Segments.** Each core appends the objects it owns to its own segment
//!   files (`seg-<n>.crl`): small objects of known length are packed into a
//!   shared *packing* segment; large ones, and those whose length the origin
//!   did not announce, get a *solo* segment (a sparse file as large as the
//!   object may grow; a small one is packed when it completes). Every file
//!   is mapped once (memmap2) and stays mapped until it is freed.
//! - **Records** (`coral::cache::record`): header, head, body; the commit
//!   word is written last, so a crash never leaves a record that reads back
//!   as complete. `open` scans every segment, verifies every checksum and
//!   rebuilds the index; anything incomplete or corrupt is dropped.
//! - **The index** (`index.rs`) is partitioned by the key's owning core
//!   (`steer::shard_of_key`). The owner writes its partition; every core
//!   reads it through a sequence counter. See ARCHITECTURE.md, "The disk
//!   cache", for the hit path.
//! - **Segment reuse.** A segment is freed (unmapped, deleted) only when no
//!   index entry points into it (`live`), no writer is in it, and no
//!   `ObjectRef` reads it (`readers`, one atomic counter per segment; a
//!   reader increments it and then re-validates the index entry it came
//!   from, so the owner's check after removing entries cannot miss it).
//! - **Eviction**: S3-FIFO (`coral::cache::policy`, chosen by
//!   `benches/cache_eviction.rs`) over each core's objects. The policy keeps
//!   live bytes under 3/4 of the core's share; the segments themselves are
//!   kept under the share by *cleaning*: the sealed packing segment with the
//!   fewest live bytes has its objects copied forward (if they are in
//!   memory; a cold one is evicted instead, so the executor never faults)
//!   and is then freed. Objects whose DSHT pointer may still live
//!   (`pin`) are passed over.

mod index;
#[cfg(test)]
pub(crate) mod tests;

use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use coral::cache::checksum::Checksum;
use coral::cache::policy::{Policy, Probe, S3Fifo};
use coral::cache::record::{self, HEADER_BYTES};
pub use coral::cache::ObjectMeta;
use coral::Id;
use memmap2::{MmapOptions, MmapRaw};

use crate::steer;
use index::{Entry, Partition, COMPLETE, WRITING};

/// The largest object the cache stores (the default), in bytes.
pub const OBJECT_BYTES_MAX: u64 = crate::limits::CACHE.object_bytes_max;
/// The largest stored response head, in bytes (the index keeps 16 bits).
pub const HEAD_BYTES_MAX: usize = crate::limits::CACHE.head_bytes_max;
/// Segment table slots per core (packing, solo and in-progress segments).
const SEGMENTS_PER_CORE_MAX: u32 = crate::limits::CACHE.segments_per_core_max;
/// Bounds of a packing segment's size, in bytes.
const SEGMENT_BYTES_MIN: u64 = crate::limits::CACHE.segment_bytes_min;
const SEGMENT_BYTES_MAX: u64 = crate::limits::CACHE.segment_bytes_max;
/// The index is sized for objects of at least this mean size, in bytes
/// (fewer, larger objects leave slots free; more, smaller ones are evicted).
const OBJECT_BYTES_MEAN_MIN: u64 = 2048;
/// How often a core's ticker looks at objects its readers wait on.
const WAIT_TICK: std::time::Duration = std::time::Duration::from_micros(250);
/// How often `ensure_resident` checks whether the kernel has read a range in.
const RESIDENT_POLL: std::time::Duration = std::time::Duration::from_micros(200);
/// The longest `ensure_resident` waits before it lets the reader go on.
const RESIDENT_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);
/// `open` reports progress on stderr after this long.
const OPEN_QUIET: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// The writer was aborted, replaced or removed, or failed earlier.
    Failed,
    /// No room: everything left is pinned, read or being written.
    Full,
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Io(e) => write!(f, "cache I/O error: {e}"),
            CacheError::TooLarge => write!(f, "object larger than the cache stores"),
            CacheError::NotOwner => write!(f, "key is owned by another core"),
            CacheError::Failed => write!(f, "object write failed earlier"),
            CacheError::Full => write!(f, "cache full of pinned or busy objects"),
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
    /// Bytes the cache's segment files occupy (all cores).
    pub bytes: u64,
    /// Lookups on this core that found an object.
    pub hits: u64,
    /// Lookups on this core that found none.
    pub misses: u64,
    /// Objects this core evicted to stay within the size.
    pub evictions: u64,
    /// Bytes this core copied forward to free fragmented segments.
    pub cleaned_bytes: u64,
}

// ---------------------------------------------------------------- segments

/// A segment as every core sees it.
struct SegSlot {
    /// The mapping's base; null while the slot is free.
    ptr: AtomicPtr<u8>,
    fd: AtomicI32,
    /// Index entries and writers pointing into it.
    live: AtomicU32,
    /// The mapping and the file: set and taken only by the owning core,
    /// while no reader can reach the slot (`ptr` null or `live` and
    /// `readers` zero).
    map: UnsafeCell<Option<MmapRaw>>,
    file: UnsafeCell<Option<File>>,
}

impl SegSlot {
    fn new() -> SegSlot {
        SegSlot {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            fd: AtomicI32::new(-1),
            live: AtomicU32::new(0),
            map: UnsafeCell::new(None),
            file: UnsafeCell::new(None),
        }
    }
}

/// What the cache shares between cores: the index partitions and the
/// segment table.
struct Shared {
    dir: PathBuf,
    cores: usize,
    /// Each core's share of the size, in bytes.
    budget: u64,
    segment_bytes: u64,
    /// Live bytes the policy keeps per core.
    live_target: u64,
    parts: Box<[Partition]>,
    segs: Box<[SegSlot]>,
    /// `ObjectRef`s reading each segment, one array per core (core `c`'s
    /// counters at `c · segs.len() ..`): a core increments only its own, so
    /// hits on one segment from several cores do not fight over a line.
    readers: Box<[AtomicU32]>,
    objects: AtomicU64,
    bytes: AtomicU64,
    next_file: AtomicU64,
}

// SAFETY: `SegSlot`'s cells are accessed only by the segment's owning core
// under the protocol described on the field; everything else is atomic or
// immutable after `open`.
unsafe impl Sync for SegSlot {}
unsafe impl Send for SegSlot {}

impl Shared {
    /// Core `core`'s count of readers of segment `seg`.
    fn reader_count(&self, core: usize, seg: u32) -> &AtomicU32 {
        &self.readers[core * self.segs.len() + seg as usize]
    }

    /// Readers of segment `seg` on every core (after a SeqCst fence).
    fn readers_of(&self, seg: u32) -> u64 {
        (0..self.cores)
            .map(|c| u64::from(self.reader_count(c, seg).load(Ordering::SeqCst)))
            .sum()
    }
}

/// One core's state, shared by that core's `CoreCache`, `ObjectRef`s and
/// `ObjectWriter`s only (so cloning a reference touches a count no other
/// core writes).
struct Local {
    core: usize,
    shared: Arc<Shared>,
    /// What only the owning core touches; see `own`.
    owner: RefCell<Owner>,
    /// The thread that first used the owner state (0: none yet).
    thread: std::sync::atomic::AtomicUsize,
}

// SAFETY: `Local` travels to its core's thread inside `CoreCache` (built by
// `open` on another thread, before any use). `owner` is reached only through
// `own`, which pins it to the first thread that uses it and panics on any
// other, so the `RefCell` is never touched from two threads; every other
// field is immutable or atomic.
unsafe impl Sync for Local {}
unsafe impl Send for Local {}

fn thread_tag() -> usize {
    thread_local!(static TAG: u8 = const { 0 });
    TAG.with(|t| t as *const u8 as usize)
}

// ---------------------------------------------------------------- owner state

/// One of this core's segment files.
struct OwnedSeg {
    path: PathBuf,
    /// Bytes accounted against the core's share.
    accounted: u64,
    /// Packing: bytes handed out so far. Solo: unused.
    used: u64,
    packing: bool,
    /// No more objects will be placed here.
    sealed: bool,
    writers: u32,
    /// This core's complete objects here and their bytes.
    own_live: u32,
    own_live_bytes: u64,
    /// Handles placed here (checked lazily: a handle may have moved on).
    handles: Vec<u32>,
}

/// What the owner keeps per object beside its index entry (40 bytes).
#[derive(Clone, Copy)]
struct Handle {
    key: Id,
    seg: u32,
    off: u32,
    /// Record bytes (aligned; records are at most ~50 MB).
    alloc: u32,
    pinned_until_secs: u32,
    in_use: bool,
    complete: bool,
    /// Chosen for eviction while pinned: its pointer is no longer renewed.
    retiring: bool,
}

impl Handle {
    const FREE: Handle = Handle {
        key: Id([0; 20]),
        seg: 0,
        off: 0,
        alloc: 0,
        pinned_until_secs: 0,
        in_use: false,
        complete: false,
        retiring: false,
    };
}

/// What only the owning core touches.
struct Owner {
    policy: S3Fifo,
    handles: Vec<Handle>,
    free_handles: Vec<u32>,
    segs: HashMap<u32, OwnedSeg>,
    free_ids: Vec<u32>,
    active: Option<u32>,
    /// Bytes of this core's segments.
    bytes: u64,
    evictions: u64,
    cleaned_bytes: u64,
}

/// One core's handle on the cache. Moved into its core's executor and used
/// only there (`!Sync`; the first thread to use it owns it).
pub struct CoreCache {
    core: usize,
    local: Arc<Local>,
    hits: Cell<u64>,
    misses: Cell<u64>,
}

/// A readable object: while alive, its segment is not reused.
pub struct ObjectRef {
    local: Arc<Local>,
    seg: u32,
    /// The record's first byte in the mapping.
    rec: *const u8,
    rec_off: u64,
    head_len: usize,
    /// The body length when it was complete at lookup; else `u64::MAX`.
    complete_len: u64,
    meta: ObjectMeta,
}

/// Appends an object's body; on the key's owning core only.
pub struct ObjectWriter {
    cache: Arc<Local>,
    /// Keeps the writer on its core's thread.
    _not_send: std::marker::PhantomData<*const ()>,
    key: Id,
    handle: u32,
    seg: u32,
    rec: *mut u8,
    /// The record's offset in its segment file.
    rec_off: u64,
    head_len: usize,
    /// The most body bytes (announced length, or the object limit).
    body_max: u64,
    /// Whether the length was announced (the record is exactly sized).
    known: bool,
    solo: bool,
    len: u64,
    checksum: Checksum,
    done: bool,
}

/// Writes `data` at `at` of a segment file with `pwrite`, as a whole.
///
/// Records are written through the file, not the mapping: the page cache
/// then holds them in large folios (a write fault on a shared mapping makes
/// one 4 KiB folio per page), which `sendfile` moves with a fraction of the
/// per-page work; and a disk with no room left for the sparse file's blocks
/// fails the write with ENOSPC instead of raising SIGBUS on the executor.
/// The mapping sees the bytes at once (one page cache).
fn write_file(fd: RawFd, mut data: &[u8], mut at: u64) -> std::io::Result<()> {
    while !data.is_empty() {
        // SAFETY: `data` is a live slice; `fd` is a segment file open for
        // writing while its slot is live.
        let n = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), at as libc::off_t) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        data = &data[n as usize..];
        at += n as u64;
    }
    Ok(())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn fingerprint(key: &Id) -> u64 {
    let b = &key.0;
    u64::from_le_bytes([b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]])
        ^ u64::from_le_bytes([b[12], b[13], b[14], b[15], b[16], b[17], b[18], b[19]])
}

fn page_bytes() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn round_page(n: u64) -> u64 {
    let p = page_bytes() as u64;
    n.div_ceil(p) * p
}

/// The record header's live words, shared by writer and readers.
///
/// # Safety
/// `rec` must be a record start (64-byte aligned) inside a live mapping.
unsafe fn body_len_word<'a>(rec: *const u8) -> &'a AtomicU64 {
    AtomicU64::from_ptr(rec.add(record::BODY_LEN_AT) as *mut u64)
}

/// # Safety
/// As for [`body_len_word`].
unsafe fn commit_word<'a>(rec: *const u8) -> &'a AtomicU64 {
    AtomicU64::from_ptr(rec.add(record::COMMIT_AT) as *mut u64)
}

/// The u32 at offset 4: version (low half) and flags (high half).
///
/// # Safety
/// As for [`body_len_word`].
unsafe fn flags_word<'a>(rec: *const u8) -> &'a AtomicU32 {
    AtomicU32::from_ptr(rec.add(4) as *mut u32)
}

fn flag(f: u16) -> u32 {
    u32::from(f) << 16
}

/// Whether every page of `[ptr, ptr + len)` is in memory (`mincore`).
fn resident(ptr: *const u8, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    let page = page_bytes();
    let start = (ptr as usize) & !(page - 1);
    let end = (ptr as usize + len).div_ceil(page) * page;
    let mut vec = [0u8; 256];
    let mut at = start;
    while at < end {
        let pages = ((end - at) / page).min(vec.len());
        // SAFETY: [at, at + pages·page) lies inside a mapping the caller
        // holds; `vec` has room for `pages` entries.
        let rc = unsafe { libc::mincore(at as *mut libc::c_void, pages * page, vec.as_mut_ptr()) };
        if rc != 0 || vec[..pages].iter().any(|v| v & 1 == 0) {
            return false;
        }
        at += pages * page;
    }
    true
}

// ---------------------------------------------------------------- open

/// Opens (or creates) the cache before the executors start: maps every
/// segment, verifies every record and rebuilds the index (progress on stderr
/// when that takes more than a second), drops anything incomplete or
/// corrupt. Returns one handle per core, to be moved into its executor.
pub fn open(config: &CacheConfig, cores: usize) -> Result<Vec<CoreCache>, CacheError> {
    let cores = cores.max(1);
    std::fs::create_dir_all(&config.dir)?;
    let budget = config.size_bytes / cores as u64;
    let segment_bytes = ((budget / 16) / 4096 * 4096).clamp(SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX);
    // Entries per core: complete objects and objects being written.
    let objects_max =
        (budget / OBJECT_BYTES_MEAN_MIN).clamp(1024, u64::from(index::HANDLE_MAX) / 2) as usize;
    let parts: Box<[Partition]> = (0..cores).map(|_| Partition::new(objects_max)).collect();
    let handles = parts[0].capacity() as u32;
    if cores as u64 * u64::from(SEGMENTS_PER_CORE_MAX) > 1 << index::SEG_BITS {
        return Err(CacheError::Io(std::io::Error::other(
            "too many cores for the segment table",
        )));
    }
    let shared = Arc::new(Shared {
        dir: config.dir.clone(),
        cores,
        budget,
        segment_bytes,
        live_target: budget / 4 * 3,
        parts,
        segs: (0..cores as u32 * SEGMENTS_PER_CORE_MAX)
            .map(|_| SegSlot::new())
            .collect(),
        readers: (0..cores * cores * SEGMENTS_PER_CORE_MAX as usize)
            .map(|_| AtomicU32::new(0))
            .collect(),
        objects: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        next_file: AtomicU64::new(0),
    });
    let caches: Vec<CoreCache> = (0..cores)
        .map(|core| {
            let base = core as u32 * SEGMENTS_PER_CORE_MAX;
            CoreCache {
                core,
                local: Arc::new(Local {
                    core,
                    shared: shared.clone(),
                    thread: std::sync::atomic::AtomicUsize::new(0),
                    owner: RefCell::new(Owner {
                        policy: S3Fifo::new(handles, shared.live_target),
                        handles: vec![Handle::FREE; handles as usize],
                        free_handles: (0..handles).rev().collect(),
                        segs: HashMap::new(),
                        free_ids: (base..base + SEGMENTS_PER_CORE_MAX).rev().collect(),
                        active: None,
                        bytes: 0,
                        evictions: 0,
                        cleaned_bytes: 0,
                    }),
                }),
                hits: Cell::new(0),
                misses: Cell::new(0),
            }
        })
        .collect();
    restore(&caches, &config.dir)?;
    for c in &caches {
        let mut own = c.local.own();
        // A smaller size than last time: evict down to it now.
        let _ = c.local.make_room(&mut own, 0, now_secs());
        c.local.sweep(&mut own);
        drop(own);
        // Open ran on this thread; the handle belongs to whichever thread
        // uses it next (its core's executor).
        c.local.thread.store(0, Ordering::Relaxed);
    }
    Ok(caches)
}

/// Reads every segment file back into the index.
fn restore(caches: &[CoreCache], dir: &Path) -> Result<(), CacheError> {
    let shared = &caches[0].local.shared;
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let n = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("seg-"))
            .and_then(|n| n.strip_suffix(".crl"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(n) = n {
            files.push((n, path));
        }
    }
    files.sort();
    let next = files.last().map_or(0, |(n, _)| n + 1);
    shared.next_file.store(next, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let mut last_report = started;
    let (mut objects, mut bytes, mut dropped) = (0u64, 0u64, 0u64);
    let total = files.len();
    for (i, (_, path)) in files.iter().enumerate() {
        let c = &caches[i % caches.len()];
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = file.metadata()?.len();
        if len < HEADER_BYTES as u64 {
            let _ = std::fs::remove_file(path);
            continue;
        }
        let id = {
            let mut own = c.local.own();
            let Some(id) = own.free_ids.pop() else {
                return Err(CacheError::Full);
            };
            let map = MmapOptions::new().len(len as usize).map_raw(&file)?;
            // A file of the packing size is a packing segment (cleanable);
            // any other size held one object (solo).
            let packing = len == shared.segment_bytes;
            c.local
                .publish_segment(&mut own, id, map, file, path.clone(), len, packing);
            let seg = own.segs.get_mut(&id).expect("just published");
            seg.sealed = true;
            seg.used = len;
            id
        };
        let base = shared.segs[id as usize].ptr.load(Ordering::Acquire) as *const u8;
        let mut off = 0u64;
        while off + HEADER_BYTES as u64 <= len {
            // SAFETY: the mapping is `len` bytes; no one writes it during open.
            let rest =
                unsafe { std::slice::from_raw_parts(base.add(off as usize), (len - off) as usize) };
            match record::read_record(rest, true) {
                Ok(rec) => {
                    let owner = &caches[steer::shard_of_key(&rec.key, caches.len())];
                    if owner.local.restore_record(&rec, id, off as u32, &c.local) {
                        objects += 1;
                        bytes += rec.alloc_len;
                    }
                    off += rec.alloc_len;
                }
                Err(e) => match e.skip() {
                    Some(skip) => {
                        dropped += 1;
                        off += skip;
                    }
                    None => break,
                },
            }
            if last_report.elapsed() >= OPEN_QUIET {
                last_report = std::time::Instant::now();
                eprintln!(
                    "coral: cache: reading {} — segment {}/{total}, {objects} objects, {} MiB",
                    dir.display(),
                    i + 1,
                    bytes >> 20
                );
            }
        }
    }
    if started.elapsed() >= OPEN_QUIET {
        eprintln!(
            "coral: cache: {objects} objects ({} MiB) restored, {dropped} incomplete or removed dropped, in {:.1} s",
            bytes >> 20,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

impl CoreCache {
    fn shared(&self) -> &Shared {
        &self.local.shared
    }

    /// This handle's core.
    pub fn core(&self) -> usize {
        self.core
    }

    /// The core that owns `key` (where `begin` and `remove` run).
    pub fn owner_of(&self, key: &Id) -> usize {
        steer::shard_of_key(key, self.shared().cores)
    }

    /// Any core: the object stored under `key` — the complete copy if there
    /// is one, else the one being written. No lock, no message to another
    /// core, no allocation.
    pub fn lookup(&self, key: &Id) -> Option<ObjectRef> {
        let shared = self.shared();
        let part = &shared.parts[self.owner_of(key)];
        loop {
            let Some((e, seq)) = part.lookup(key) else {
                self.misses.set(self.misses.get() + 1);
                return None;
            };
            let Some(slot) = shared.segs.get(e.seg as usize) else {
                self.misses.set(self.misses.get() + 1);
                return None;
            };
            let readers = shared.reader_count(self.core, e.seg);
            // SeqCst, then a SeqCst load of the partition's sequence: pairs
            // with the fence in `sweep`. The entry may have been removed
            // (and its segment freed) between the probe and the increment:
            // then the sequence changed, and we look again.
            readers.fetch_add(1, Ordering::SeqCst);
            let ptr = slot.ptr.load(Ordering::Acquire);
            if !part.unchanged_since(seq) {
                readers.fetch_sub(1, Ordering::Release);
                continue;
            }
            if ptr.is_null() {
                // Cannot happen (a segment is freed only when no entry
                // points into it); answer a miss rather than spin.
                readers.fetch_sub(1, Ordering::Release);
                self.misses.set(self.misses.get() + 1);
                return None;
            }
            part.count_hit(e.handle);
            self.hits.set(self.hits.get() + 1);
            return Some(ObjectRef {
                local: self.local.clone(),
                seg: e.seg,
                // SAFETY: the entry's offset lies inside its segment.
                rec: unsafe { ptr.add(e.off as usize) },
                rec_off: u64::from(e.off),
                head_len: e.head_len as usize,
                complete_len: if e.state == COMPLETE {
                    e.body_len
                } else {
                    u64::MAX
                },
                meta: ObjectMeta {
                    stored_secs: u64::from(e.stored_secs),
                    fresh_until_secs: u64::from(e.fresh_until_secs),
                    expected_len: (e.expected_len != u64::MAX).then_some(e.expected_len),
                },
            });
        }
    }

    /// Starts storing `key`. Only on the key's owning core. An older
    /// complete copy stays visible until `finish` replaces it.
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
        let shared = self.shared();
        let now = now_secs();
        let mut own = self.local.own();
        let part = &shared.parts[self.core];
        while part.len() >= part.capacity() || own.free_handles.is_empty() {
            if !self.local.evict_one(&mut own, now) {
                return Err(CacheError::Full);
            }
        }
        let known_len = meta.expected_len.map(|l| record::record_len(head.len(), l));
        let small = known_len.filter(|&r| r <= shared.segment_bytes / 4);
        let (seg, off, solo, alloc_len) = match small {
            Some(r) => {
                let need = self.local.packing_need(&own, r);
                self.local.make_room(&mut own, need, now)?;
                let (seg, off) = self.local.alloc_packing(&mut own, r)?;
                (seg, off, false, r)
            }
            None => {
                let cap =
                    known_len.unwrap_or_else(|| record::record_len(head.len(), OBJECT_BYTES_MAX));
                let accounted = known_len.unwrap_or_else(|| record::record_len(head.len(), 0));
                self.local.make_room(&mut own, accounted, now)?;
                let seg = self
                    .local
                    .create_segment(&mut own, round_page(cap), accounted, false)?;
                (seg, 0, true, cap)
            }
        };
        let slot = &shared.segs[seg as usize];
        // SAFETY: the record's space was just handed to this writer alone.
        let rec = unsafe { slot.ptr.load(Ordering::Acquire).add(off as usize) };
        let header = record::encode_header(&key, &meta, head.len() as u32, alloc_len);
        // [rec, rec + alloc_len) is this writer's, and no reader sees it
        // until the index entry below. Written through the file, not the
        // mapping (`write_file`).
        let fd = slot.fd.load(Ordering::Relaxed);
        let written = write_file(fd, &header[..HEADER_BYTES], u64::from(off))
            .and_then(|()| write_file(fd, head, u64::from(off) + HEADER_BYTES as u64));
        if let Err(e) = written {
            // The space stays allocated in the packing segment (dead bytes
            // that cleaning reclaims); a solo segment is freed by the sweep.
            if solo {
                if let Some(s) = own.segs.get_mut(&seg) {
                    s.sealed = true;
                }
                self.local.sweep(&mut own);
            }
            return Err(e.into());
        }
        slot.live.fetch_add(1, Ordering::AcqRel);
        if let Some(s) = own.segs.get_mut(&seg) {
            s.writers += 1;
        }
        let h = own.free_handles.pop().ok_or(CacheError::Full)?;
        own.handles[h as usize] = Handle {
            key,
            seg,
            off,
            alloc: alloc_len as u32,
            in_use: true,
            ..Handle::FREE
        };
        part.insert(&Entry {
            key,
            state: WRITING,
            handle: h,
            seg,
            off,
            head_len: head.len() as u32,
            body_len: 0,
            stored_secs: meta.stored_secs.min(u64::from(u32::MAX)) as u32,
            fresh_until_secs: meta.fresh_until_secs.min(u64::from(u32::MAX)) as u32,
            expected_len: meta.expected_len.unwrap_or(u64::MAX),
        });
        Ok(ObjectWriter {
            cache: self.local.clone(),
            _not_send: std::marker::PhantomData,
            key,
            handle: h,
            seg,
            rec,
            rec_off: u64::from(off),
            head_len: head.len(),
            body_max,
            known: meta.expected_len.is_some(),
            solo,
            len: 0,
            checksum: record::content_checksum_start(&key, head),
            done: false,
        })
    }

    /// Removes `key` (owning core only): it is not found again, not even
    /// after a restart; readers holding it keep reading; a writer of it fails.
    pub fn remove(&self, key: &Id) {
        if self.owner_of(key) != self.core {
            return;
        }
        let shared = self.shared();
        let part = &shared.parts[self.core];
        let mut own = self.local.own();
        while let Some((e, _)) = part.lookup(key) {
            let rec = shared.segs[e.seg as usize].ptr.load(Ordering::Acquire);
            // SAFETY: the entry points at a record in a live mapping.
            unsafe {
                let f = if e.state == COMPLETE {
                    record::FLAG_REMOVED
                } else {
                    record::FLAG_FAILED
                };
                flags_word(rec.add(e.off as usize)).fetch_or(flag(f), Ordering::Release);
            }
            if e.state == COMPLETE {
                own.policy.remove(e.handle);
                self.local.drop_handle(&mut own, e.handle, true);
            } else if let Some(i) = part.find(key, e.handle) {
                // The writer frees its handle when it notices.
                part.remove(i);
            }
        }
        self.local.sweep(&mut own);
    }

    /// New freshness for the complete copy of `key`, same body (after a 304
    /// revalidation). Owning core only.
    pub fn touch_meta(&self, key: &Id, meta: ObjectMeta) {
        if self.owner_of(key) != self.core {
            return;
        }
        let shared = self.shared();
        let part = &shared.parts[self.core];
        let Some((e, _)) = part.lookup(key).filter(|(e, _)| e.state == COMPLETE) else {
            return;
        };
        let Some(i) = part.find(key, e.handle) else {
            return;
        };
        let mut e2 = e;
        e2.stored_secs = meta.stored_secs.min(u64::from(u32::MAX)) as u32;
        e2.fresh_until_secs = meta.fresh_until_secs.min(u64::from(u32::MAX)) as u32;
        e2.expected_len = meta.expected_len.unwrap_or(u64::MAX);
        part.update(i, &e2);
        let bytes = record::encode_meta(&meta);
        let rec = shared.segs[e.seg as usize].ptr.load(Ordering::Acquire);
        // SAFETY: the freshness fields lie inside this record's header;
        // readers take freshness from the index, never from these bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                rec.add(e.off as usize + record::META_AT),
                bytes.len(),
            );
        }
    }

    /// Keeps `key` from eviction until `until_secs` (unix): call it when a
    /// DSHT pointer to this node is put or renewed for the key (§3.2: the
    /// 1 h pointer). Owning core only. An object the policy wanted to evict
    /// while pinned is *retiring*: `complete_keys_owned` no longer lists it,
    /// so its pointer is not renewed, and it goes when the pin runs out.
    pub fn pin(&self, key: &Id, until_secs: u64) {
        if self.owner_of(key) != self.core {
            return;
        }
        let part = &self.shared().parts[self.core];
        if let Some((e, _)) = part.lookup(key) {
            let mut own = self.local.own();
            let h = &mut own.handles[e.handle as usize];
            h.pinned_until_secs = h
                .pinned_until_secs
                .max(until_secs.min(u64::from(u32::MAX)) as u32);
        }
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        let own = self.local.own();
        CacheStats {
            objects: self.shared().objects.load(Ordering::Relaxed),
            bytes: self.shared().bytes.load(Ordering::Relaxed),
            hits: self.hits.get(),
            misses: self.misses.get(),
            evictions: own.evictions,
            cleaned_bytes: own.cleaned_bytes,
        }
    }

    /// The complete objects whose keys this core owns and means to keep
    /// (to renew their 1 h DSHT pointers, §3.2).
    pub fn complete_keys_owned(&self) -> Vec<Id> {
        let own = self.local.own();
        own.handles
            .iter()
            .filter(|h| h.in_use && h.complete && !h.retiring)
            .map(|h| h.key)
            .collect()
    }

    /// Bytes of memory this core's part of the index uses (partition,
    /// policy, handles), and the complete objects it holds.
    pub fn index_memory(&self) -> (usize, usize) {
        let own = self.local.own();
        let part = &self.shared().parts[self.core];
        let bytes = part.memory_bytes()
            + own.handles.capacity() * std::mem::size_of::<Handle>()
            + own.free_handles.capacity() * 4
            + own.policy.memory_bytes();
        (bytes, own.policy.len())
    }
}

impl Local {
    fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The owner state, on the one thread allowed to touch it.
    fn own(&self) -> std::cell::RefMut<'_, Owner> {
        let me = thread_tag();
        if let Err(first) =
            self.thread
                .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
        {
            assert_eq!(first, me, "a core's cache handle was used from two threads");
        }
        self.owner.borrow_mut()
    }

    /// Adds a restored record (called on the key's owner's handle, during
    /// open; `seg_owner` holds the segment). Newest `stored_secs` wins.
    fn restore_record(&self, rec: &record::Record, seg: u32, off: u32, seg_owner: &Local) -> bool {
        let shared = self.shared();
        let part = &shared.parts[self.core];
        let mut own = self.own();
        let meta = if rec.meta_ok {
            rec.meta
        } else {
            // A torn freshness rewrite: stale, so it is revalidated.
            ObjectMeta {
                fresh_until_secs: 0,
                ..rec.meta
            }
        };
        if let Some((old, _)) = part.lookup(&rec.key) {
            if u64::from(old.stored_secs) > meta.stored_secs {
                return false;
            }
            own.policy.remove(old.handle);
            self.drop_handle(&mut own, old.handle, true);
        }
        if part.len() >= part.capacity() {
            return false;
        }
        let Some(h) = own.free_handles.pop() else {
            return false;
        };
        let e = Entry {
            key: rec.key,
            state: COMPLETE,
            handle: h,
            seg,
            off,
            head_len: rec.head_len,
            body_len: rec.body_len,
            stored_secs: meta.stored_secs.min(u64::from(u32::MAX)) as u32,
            fresh_until_secs: meta.fresh_until_secs.min(u64::from(u32::MAX)) as u32,
            expected_len: meta.expected_len.unwrap_or(u64::MAX),
        };
        part.insert(&e);
        own.handles[h as usize] = Handle {
            key: rec.key,
            seg,
            off,
            alloc: rec.alloc_len as u32,
            in_use: true,
            complete: true,
            ..Handle::FREE
        };
        own.policy.insert(h, rec.alloc_len, fingerprint(&rec.key));
        shared.segs[seg as usize]
            .live
            .fetch_add(1, Ordering::AcqRel);
        shared.objects.fetch_add(1, Ordering::Relaxed);
        drop(own);
        let mut so = seg_owner.own();
        if let Some(s) = so.segs.get_mut(&seg) {
            if seg_owner.core == self.core {
                s.own_live += 1;
                s.own_live_bytes += rec.alloc_len;
                s.handles.push(h);
            }
        }
        true
    }

    /// Maps a segment into slot `id` and makes it reachable.
    #[allow(clippy::too_many_arguments)]
    fn publish_segment(
        &self,
        own: &mut Owner,
        id: u32,
        map: MmapRaw,
        file: File,
        path: PathBuf,
        accounted: u64,
        packing: bool,
    ) {
        let slot = &self.shared().segs[id as usize];
        let ptr = map.as_mut_ptr();
        slot.fd.store(file.as_raw_fd(), Ordering::Relaxed);
        // SAFETY: the slot is free (ptr null, live and readers zero): no
        // other core reads these cells until `ptr` is published below.
        unsafe {
            *slot.map.get() = Some(map);
            *slot.file.get() = Some(file);
        }
        slot.ptr.store(ptr, Ordering::Release);
        own.segs.insert(
            id,
            OwnedSeg {
                path,
                accounted,
                used: 0,
                packing,
                sealed: false,
                writers: 0,
                own_live: 0,
                own_live_bytes: 0,
                handles: Vec::new(),
            },
        );
        own.bytes += accounted;
        self.shared().bytes.fetch_add(accounted, Ordering::Relaxed);
    }

    /// A new segment file of `file_bytes` (sparse), `accounted` against the share.
    fn create_segment(
        &self,
        own: &mut Owner,
        file_bytes: u64,
        accounted: u64,
        packing: bool,
    ) -> Result<u32, CacheError> {
        let id = own.free_ids.pop().ok_or(CacheError::Full)?;
        let made = (|| {
            let n = self.shared().next_file.fetch_add(1, Ordering::Relaxed);
            let path = self.shared().dir.join(format!("seg-{n:012}.crl"));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?;
            file.set_len(file_bytes)?;
            let map = MmapOptions::new().len(file_bytes as usize).map_raw(&file)?;
            Ok::<_, std::io::Error>((map, file, path))
        })();
        match made {
            Ok((map, file, path)) => {
                self.publish_segment(own, id, map, file, path, accounted, packing);
                Ok(id)
            }
            Err(e) => {
                own.free_ids.push(id);
                Err(e.into())
            }
        }
    }

    /// Unmaps and deletes segment `id` (no entry, writer or reader left).
    fn free_segment(&self, own: &mut Owner, id: u32) {
        let Some(seg) = own.segs.remove(&id) else {
            return;
        };
        let slot = &self.shared().segs[id as usize];
        slot.ptr.store(std::ptr::null_mut(), Ordering::Release);
        slot.fd.store(-1, Ordering::Relaxed);
        // SAFETY: live and readers are zero and ptr is null: no core can
        // reach the mapping any more.
        unsafe {
            drop((*slot.map.get()).take());
            drop((*slot.file.get()).take());
        }
        let _ = std::fs::remove_file(&seg.path);
        own.bytes -= seg.accounted;
        self.shared()
            .bytes
            .fetch_sub(seg.accounted, Ordering::Relaxed);
        own.free_ids.push(id);
        if own.active == Some(id) {
            own.active = None;
        }
    }

    /// Frees every sealed segment nothing refers to any more.
    fn sweep(&self, own: &mut Owner) {
        let shared = self.shared();
        let idle: Vec<u32> = own
            .segs
            .iter()
            .filter(|(id, s)| {
                s.sealed
                    && s.writers == 0
                    && shared.segs[**id as usize].live.load(Ordering::Acquire) == 0
            })
            .map(|(id, _)| *id)
            .collect();
        if idle.is_empty() {
            return;
        }
        // Pairs with the fence in `lookup`: a reader that incremented
        // `readers` before this fence is seen below; one after it sees the
        // index change that emptied the segment and backs off.
        fence(Ordering::SeqCst);
        for id in idle {
            if shared.readers_of(id) == 0 {
                self.free_segment(own, id);
            }
        }
    }

    /// Extra bytes a packing record of `rec` bytes needs (a new segment if
    /// the active one lacks room).
    fn packing_need(&self, own: &Owner, rec: u64) -> u64 {
        match own.active.and_then(|a| own.segs.get(&a)) {
            Some(s) if s.used + rec <= s.accounted => 0,
            _ => self.shared().segment_bytes,
        }
    }

    /// Space for a record of `rec` bytes in the active packing segment.
    fn alloc_packing(&self, own: &mut Owner, rec: u64) -> Result<(u32, u32), CacheError> {
        if rec > self.shared().segment_bytes {
            return Err(CacheError::TooLarge);
        }
        if let Some(a) = own.active {
            let s = own.segs.get_mut(&a).ok_or(CacheError::Full)?;
            if s.used + rec <= s.accounted {
                let off = s.used;
                s.used += rec;
                return Ok((a, off as u32));
            }
            s.sealed = true;
            own.active = None;
        }
        let bytes = self.shared().segment_bytes;
        let id = self.create_segment(own, bytes, bytes, true)?;
        own.active = Some(id);
        let s = own.segs.get_mut(&id).ok_or(CacheError::Full)?;
        s.used = rec;
        Ok((id, 0))
    }

    /// Evicts and cleans until `need` more bytes fit in this core's share
    /// and the policy's live bytes are under target.
    fn make_room(&self, own: &mut Owner, need: u64, now: u64) -> Result<(), CacheError> {
        let shared = self.shared();
        // One segment of the share is the cleaner's headroom.
        let limit = shared
            .budget
            .saturating_sub(shared.segment_bytes)
            .max(shared.segment_bytes);
        let mut swept = false;
        for _ in 0..1_000_000 {
            if own.policy.bytes() > shared.live_target && self.evict_one(own, now) {
                continue;
            }
            if own.bytes + need <= limit {
                return Ok(());
            }
            if !swept {
                self.sweep(own);
                swept = true;
                continue;
            }
            if self.clean_one(own, now) || self.evict_one(own, now) {
                self.sweep(own);
                continue;
            }
            return Err(CacheError::Full);
        }
        Err(CacheError::Full)
    }

    /// Evicts the policy's next victim; false if none can go.
    fn evict_one(&self, own: &mut Owner, now: u64) -> bool {
        let part = &self.shared().parts[self.core];
        let Owner {
            policy, handles, ..
        } = own;
        let victim = policy.evict(&mut |h| {
            let hd = &mut handles[h as usize];
            let keep = u64::from(hd.pinned_until_secs) > now;
            if keep {
                hd.retiring = true;
            }
            Probe {
                hits: part.take_hits(h),
                keep,
            }
        });
        match victim {
            Some(h) => {
                self.drop_handle(own, h, true);
                own.evictions += 1;
                true
            }
            None => false,
        }
    }

    /// Takes the object of `hd` out of its segment's counts: the owner's
    /// live objects and bytes, then the shared count readers and the sweep
    /// go by (call after the index no longer points there).
    fn leave_segment(&self, own: &mut Owner, hd: &Handle) {
        if let Some(s) = own.segs.get_mut(&hd.seg) {
            if hd.complete && s.own_live > 0 {
                s.own_live -= 1;
                s.own_live_bytes = s.own_live_bytes.saturating_sub(u64::from(hd.alloc));
            }
        }
        self.shared().segs[hd.seg as usize]
            .live
            .fetch_sub(1, Ordering::AcqRel);
    }

    /// Forgets handle `h` (already out of the policy): its index entry, its
    /// place in its segment, the handle itself.
    fn drop_handle(&self, own: &mut Owner, h: u32, complete: bool) {
        let shared = self.shared();
        let part = &shared.parts[self.core];
        let hd = own.handles[h as usize];
        if !hd.in_use {
            return;
        }
        if let Some(i) = part.find(&hd.key, h) {
            part.remove(i);
        }
        // After the index change: see `sweep`.
        self.leave_segment(own, &hd);
        if complete && hd.complete {
            shared.objects.fetch_sub(1, Ordering::Relaxed);
        }
        part.take_hits(h);
        own.handles[h as usize] = Handle::FREE;
        own.free_handles.push(h);
    }

    /// Frees the sealed packing segment with the fewest live bytes by
    /// copying its objects forward (those in memory) or evicting them.
    fn clean_one(&self, own: &mut Owner, now: u64) -> bool {
        let shared = self.shared();
        let victim = own
            .segs
            .iter()
            .filter(|(id, s)| {
                s.packing
                    && s.sealed
                    && s.writers == 0
                    && s.own_live > 0
                    && s.own_live_bytes < s.accounted
                    && shared.segs[**id as usize].live.load(Ordering::Acquire) == s.own_live
            })
            .min_by_key(|(_, s)| s.own_live_bytes)
            .map(|(id, _)| *id);
        let Some(id) = victim else {
            return false;
        };
        let handles = own
            .segs
            .get_mut(&id)
            .map(|s| std::mem::take(&mut s.handles))
            .unwrap_or_default();
        let mut progress = false;
        for h in handles {
            let hd = own.handles[h as usize];
            if !(hd.in_use && hd.complete && hd.seg == id) {
                continue;
            }
            progress = true;
            if !self.relocate(own, h, now) {
                own.policy.remove(h);
                self.drop_handle(own, h, true);
                own.evictions += 1;
            }
        }
        progress
    }

    /// Copies complete object `h` into the active packing segment and points
    /// its index entry there. False (nothing changed) if it is not wholly in
    /// memory (copying it would fault on the executor) or there is no room.
    fn relocate(&self, own: &mut Owner, h: u32, _now: u64) -> bool {
        let shared = self.shared();
        let hd = own.handles[h as usize];
        let src_base = shared.segs[hd.seg as usize].ptr.load(Ordering::Acquire);
        if src_base.is_null() {
            return false;
        }
        // SAFETY: the record lies inside its live segment.
        let src = unsafe { src_base.add(hd.off as usize) };
        // Only small objects are packed; a cold one is not read in here.
        if u64::from(hd.alloc) > shared.segment_bytes / 4 || !resident(src, hd.alloc as usize) {
            return false;
        }
        let need = self.packing_need(own, u64::from(hd.alloc));
        if own.bytes + need > shared.budget {
            return false;
        }
        let Ok((seg, off)) = self.alloc_packing(own, u64::from(hd.alloc)) else {
            return false;
        };
        let dst = shared.segs[seg as usize].ptr.load(Ordering::Acquire);
        let fd = shared.segs[seg as usize].fd.load(Ordering::Relaxed);
        // SAFETY: the source is a complete, resident record nobody writes,
        // inside its live segment.
        let src_rec = unsafe { std::slice::from_raw_parts(src, hd.alloc as usize) };
        // [off, + alloc) of the new segment was just handed out: written
        // through the file (`write_file`), the commit word zero until last.
        let at = u64::from(off);
        let tail = record::COMMIT_AT + 8;
        let copied = write_file(fd, &src_rec[..record::COMMIT_AT], at)
            .and_then(|()| write_file(fd, &[0; 8], at + record::COMMIT_AT as u64))
            .and_then(|()| write_file(fd, &src_rec[tail..], at + tail as u64));
        if copied.is_err() {
            // Dead bytes in the packing segment; the object stays where it is.
            return false;
        }
        // SAFETY: the new record lies inside its live segment's mapping.
        unsafe {
            fence(Ordering::Release);
            commit_word(dst.add(off as usize))
                .store(commit_word(src).load(Ordering::Acquire), Ordering::Release);
        }
        self.move_handle(own, h, seg, off);
        own.cleaned_bytes += u64::from(hd.alloc);
        true
    }

    /// Points handle `h` (complete) at its new copy in (`seg`, `off`).
    fn move_handle(&self, own: &mut Owner, h: u32, seg: u32, off: u32) {
        let shared = self.shared();
        let part = &shared.parts[self.core];
        let hd = own.handles[h as usize];
        shared.segs[seg as usize]
            .live
            .fetch_add(1, Ordering::AcqRel);
        if let Some(i) = part.find(&hd.key, h) {
            let mut e = part.get(i);
            e.seg = seg;
            e.off = off;
            part.update(i, &e);
        }
        self.leave_segment(own, &hd);
        if let Some(s) = own.segs.get_mut(&seg) {
            if hd.complete {
                s.own_live += 1;
                s.own_live_bytes += u64::from(hd.alloc);
            }
            s.handles.push(h);
        }
        let hm = &mut own.handles[h as usize];
        hm.seg = seg;
        hm.off = off;
    }
}

// ---------------------------------------------------------------- readers

impl Clone for ObjectRef {
    fn clone(&self) -> Self {
        self.local
            .shared
            .reader_count(self.local.core, self.seg)
            .fetch_add(1, Ordering::Relaxed);
        ObjectRef {
            local: self.local.clone(),
            seg: self.seg,
            rec: self.rec,
            rec_off: self.rec_off,
            head_len: self.head_len,
            complete_len: self.complete_len,
            meta: self.meta,
        }
    }
}

impl Drop for ObjectRef {
    fn drop(&mut self) {
        self.local
            .shared
            .reader_count(self.local.core, self.seg)
            .fetch_sub(1, Ordering::Release);
    }
}

impl fmt::Debug for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectRef")
            .field("seg", &self.seg)
            .field("rec_off", &self.rec_off)
            .field("state", &self.state())
            .finish()
    }
}

impl ObjectRef {
    /// Freshness, as the index held it at lookup.
    pub fn meta(&self) -> ObjectMeta {
        self.meta
    }

    /// The stored response head bytes, as given to `begin`.
    pub fn head(&self) -> &[u8] {
        // SAFETY: written before the entry was published, never again; the
        // segment stays mapped while `self` lives.
        unsafe { std::slice::from_raw_parts(self.rec.add(HEADER_BYTES), self.head_len) }
    }

    /// The first 8 bytes of the object's key (SHA-1 of its URL), from its
    /// record's header: a hash of the URL for free (the status page).
    pub fn key_prefix(&self) -> u64 {
        // SAFETY: the header (the key at bytes 8..28) was written before the
        // entry was published, never again; the mapping lives with `self`.
        unsafe { std::ptr::read_unaligned(self.rec.add(8).cast::<u64>()) }
    }

    /// Body bytes readable now.
    fn available(&self) -> u64 {
        if self.complete_len != u64::MAX {
            self.complete_len
        } else {
            // SAFETY: the header lies in the mapping `self` keeps alive.
            unsafe { body_len_word(self.rec).load(Ordering::Acquire) }
        }
    }

    /// Progress.
    pub fn state(&self) -> ObjectState {
        if self.complete_len != u64::MAX {
            return ObjectState::Complete {
                len: self.complete_len,
            };
        }
        // SAFETY: as in `available`.
        let flags = unsafe { flags_word(self.rec).load(Ordering::Acquire) };
        let len = self.available();
        if flags & flag(record::FLAG_FAILED) != 0 {
            ObjectState::Failed
        } else if flags & flag(record::FLAG_COMPLETE) != 0 {
            ObjectState::Complete { len }
        } else {
            ObjectState::Writing { len }
        }
    }

    /// The body bytes available now within `[start, end)`, from the mapping.
    pub fn body(&self, start: u64, end: u64) -> &[u8] {
        let end = end.min(self.available());
        if start >= end {
            return &[];
        }
        // SAFETY: bytes below the published length were written before it
        // was Release-stored and are never written again; the segment stays
        // mapped while `self` lives.
        unsafe {
            std::slice::from_raw_parts(
                self.rec.add(HEADER_BYTES + self.head_len + start as usize),
                (end - start) as usize,
            )
        }
    }

    /// The segment file and the file offset of body byte `at` (for
    /// sendfile/splice). The descriptor stays open while `self` lives.
    pub fn file_at(&self, at: u64) -> (RawFd, u64) {
        let fd = self.local.shared.segs[self.seg as usize]
            .fd
            .load(Ordering::Relaxed);
        (
            fd,
            self.rec_off + (HEADER_BYTES + self.head_len) as u64 + at,
        )
    }

    fn beyond(&self, len: u64) -> bool {
        !matches!(self.state(), ObjectState::Writing { len: now } if now <= len)
    }

    /// Returns when more than `len` body bytes exist, or the object is
    /// complete or failed. Waiters on one core share one ticker (every
    /// 250 µs while any wait), so a crowd of readers costs one timer.
    pub fn wait_beyond(&self, len: u64) -> impl Future<Output = ()> + '_ {
        WaitBeyond {
            obj: self,
            len,
            slot: None,
        }
    }

    /// Brings body bytes `[start, end)` into memory, off the executor: if
    /// any page is missing (`mincore`), asks the kernel to read the range
    /// (`madvise(WILLNEED)`, asynchronous readahead) and waits on a timer
    /// until it is resident. Reading the range afterwards takes no major
    /// page fault (unless memory pressure evicts it again meanwhile).
    pub async fn ensure_resident(&self, start: u64, end: u64) {
        let end = end.min(self.available());
        if start >= end {
            return;
        }
        // SAFETY: within the body, inside the mapping.
        let ptr = unsafe { self.rec.add(HEADER_BYTES + self.head_len + start as usize) };
        let len = (end - start) as usize;
        if resident(ptr, len) {
            return;
        }
        let page = page_bytes();
        let a = (ptr as usize) & !(page - 1);
        let b = (ptr as usize + len).div_ceil(page) * page;
        // SAFETY: a page-aligned range inside the mapping; WILLNEED only
        // starts readahead.
        unsafe {
            libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_WILLNEED);
        }
        let started = std::time::Instant::now();
        while !resident(ptr, len) && started.elapsed() < RESIDENT_WAIT_MAX {
            glommio::timer::sleep(RESIDENT_POLL).await;
        }
    }
}

/// Readers waiting on this thread's core, checked by one ticker task.
struct Waiter {
    obj: *const ObjectRef,
    len: u64,
    waker: Option<Waker>,
}

#[derive(Default)]
struct Waiters {
    list: Vec<Option<Waiter>>,
    free: Vec<usize>,
    ticking: bool,
}

thread_local! {
    static WAITERS: RefCell<Waiters> = RefCell::new(Waiters::default());
}

struct WaitBeyond<'a> {
    obj: &'a ObjectRef,
    len: u64,
    slot: Option<usize>,
}

impl Future for WaitBeyond<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.obj.beyond(self.len) {
            if let Some(i) = self.slot.take() {
                WAITERS.with(|w| {
                    let mut w = w.borrow_mut();
                    w.list[i] = None;
                    w.free.push(i);
                });
            }
            return Poll::Ready(());
        }
        let obj = self.obj as *const ObjectRef;
        let len = self.len;
        let slot = self.slot;
        let (slot, start_ticker) = WAITERS.with(|w| {
            let mut w = w.borrow_mut();
            let waiter = Waiter {
                obj,
                len,
                waker: Some(cx.waker().clone()),
            };
            let i = match slot {
                Some(i) => {
                    w.list[i] = Some(waiter);
                    i
                }
                None => match w.free.pop() {
                    Some(i) => {
                        w.list[i] = Some(waiter);
                        i
                    }
                    None => {
                        w.list.push(Some(waiter));
                        w.list.len() - 1
                    }
                },
            };
            let start = !w.ticking;
            w.ticking = true;
            (i, start)
        });
        self.slot = Some(slot);
        if start_ticker {
            glommio::spawn_local(tick_waiters()).detach();
        }
        Poll::Pending
    }
}

impl Drop for WaitBeyond<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            WAITERS.with(|w| {
                let mut w = w.borrow_mut();
                w.list[i] = None;
                w.free.push(i);
            });
        }
    }
}

/// Wakes the waiters whose object moved on; ends when none is left.
async fn tick_waiters() {
    loop {
        glommio::timer::sleep(WAIT_TICK).await;
        let done = WAITERS.with(|w| {
            let mut w = w.borrow_mut();
            let mut any = false;
            for waiter in w.list.iter_mut().flatten() {
                any = true;
                // SAFETY: a waiter's entry is removed when its future is
                // dropped or completes, and the future borrows the object,
                // so the object outlives its entry.
                let ready = unsafe { (*waiter.obj).beyond(waiter.len) };
                if ready {
                    if let Some(wk) = waiter.waker.take() {
                        wk.wake();
                    }
                }
            }
            if !any {
                w.ticking = false;
            }
            !any
        });
        if done {
            return;
        }
    }
}

// ---------------------------------------------------------------- writers

impl ObjectWriter {
    fn flags(&self) -> u32 {
        // SAFETY: the record header lies in a mapping this writer keeps
        // alive (its segment's `live` count includes the writer).
        unsafe { flags_word(self.rec).load(Ordering::Acquire) }
    }

    /// Appends body bytes; fails (and fails the object) past its announced
    /// length or the object limit, or when the cache has no room.
    pub fn append(&mut self, data: &[u8]) -> Result<(), CacheError> {
        if self.done || self.flags() & flag(record::FLAG_FAILED) != 0 {
            self.fail();
            return Err(CacheError::Failed);
        }
        let new_len = self.len + data.len() as u64;
        if new_len > self.body_max {
            self.fail();
            return Err(CacheError::TooLarge);
        }
        if self.solo && !self.known {
            // Unannounced length: the sparse file's blocks are counted as
            // they are written.
            let grow = record::record_len(self.head_len, new_len)
                .saturating_sub(record::record_len(self.head_len, self.len));
            if grow > 0 {
                let mut own = self.cache.own();
                if self.cache.make_room(&mut own, grow, now_secs()).is_err() {
                    drop(own);
                    self.fail();
                    return Err(CacheError::Full);
                }
                own.bytes += grow;
                if let Some(s) = own.segs.get_mut(&self.seg) {
                    s.accounted += grow;
                }
                self.cache.shared().bytes.fetch_add(grow, Ordering::Relaxed);
            }
        }
        // [len, new_len) of the body lies inside this writer's record space
        // and beyond the published length: no reader reads it until the
        // store below.
        let fd = self.cache.shared().segs[self.seg as usize]
            .fd
            .load(Ordering::Relaxed);
        let at = self.rec_off + (HEADER_BYTES + self.head_len) as u64 + self.len;
        if let Err(e) = write_file(fd, data, at) {
            self.fail();
            return Err(e.into());
        }
        // SAFETY: the record's header lies inside the mapping.
        unsafe { body_len_word(self.rec).store(new_len, Ordering::Release) };
        self.checksum.update(data);
        self.len = new_len;
        Ok(())
    }

    /// Completes the object: commits its record (commit word last), then
    /// makes it the key's complete copy, replacing any older one.
    pub fn finish(mut self) -> Result<(), CacheError> {
        if self.done || self.flags() & flag(record::FLAG_FAILED) != 0 {
            self.fail();
            return Err(CacheError::Failed);
        }
        if self.known && self.len != self.body_max {
            self.fail();
            return Err(CacheError::Failed);
        }
        let sum = record::content_checksum_finish(self.checksum.clone(), self.len);
        let (checksum, commit) = record::commit_words(sum);
        let final_len = record::record_len(self.head_len, self.len);
        // SAFETY: header words of this writer's record; the checksum word is
        // read by no one before the commit word exists.
        unsafe {
            if self.solo && !self.known {
                // The record was sized for the largest object; the file is
                // cut to its real length below, so its header must say so
                // (a restart checks the record fits its file).
                std::ptr::copy_nonoverlapping(
                    final_len.to_le_bytes().as_ptr(),
                    self.rec.add(record::ALLOC_LEN_AT),
                    8,
                );
            }
            std::ptr::copy_nonoverlapping(
                checksum.to_le_bytes().as_ptr(),
                self.rec.add(record::CHECKSUM_AT),
                8,
            );
            fence(Ordering::Release);
            commit_word(self.rec).store(commit, Ordering::Release);
            flags_word(self.rec).fetch_or(flag(record::FLAG_COMPLETE), Ordering::Release);
        }
        self.done = true;
        let cache = self.cache.clone();
        let shared = cache.shared();
        let part = &shared.parts[cache.core];
        let mut own = cache.own();
        if let Some(s) = own.segs.get_mut(&self.seg) {
            s.writers -= 1;
            if self.solo {
                s.sealed = true;
            }
        }
        let h = self.handle;
        let Some(i) = part.find(&self.key, h) else {
            // Removed while being written.
            self.release_handle(&mut own);
            return Err(CacheError::Failed);
        };
        if self.solo && !self.known {
            // Give back the sparse file's tail.
            let slot = &shared.segs[self.seg as usize];
            // SAFETY: only this core touches the file cell.
            if let Some(f) = unsafe { (*slot.file.get()).as_ref() } {
                let _ = f.set_len(round_page(final_len));
            }
        }
        {
            let hd = &mut own.handles[h as usize];
            hd.alloc = final_len as u32;
            hd.complete = true;
        }
        if let Some(s) = own.segs.get_mut(&self.seg) {
            s.own_live += 1;
            s.own_live_bytes += final_len;
            s.handles.push(h);
        }
        let mut e = part.get(i);
        e.state = COMPLETE;
        e.body_len = self.len;
        match part
            .lookup(&self.key)
            .filter(|(o, _)| o.state == COMPLETE && o.handle != h)
            .and_then(|(o, _)| part.find(&self.key, o.handle).map(|j| (o.handle, j)))
        {
            Some((old, j)) => {
                let o = part.get(j);
                part.update_and_remove(i, &e, j);
                // The old copy's entry is gone with the same change that
                // made this one complete; now forget its handle, and mark its
                // record removed so a restart cannot bring it back (only if
                // its header is in memory: no fault on the executor; else the
                // restart keeps the newer `stored_secs`).
                let base = shared.segs[o.seg as usize].ptr.load(Ordering::Acquire);
                if !base.is_null() {
                    // SAFETY: the old record lies in its segment, still
                    // mapped (its entry's `live` count is dropped below).
                    let rec = unsafe { base.add(o.off as usize) };
                    if resident(rec, HEADER_BYTES) {
                        // SAFETY: as above; the flags word is atomic.
                        unsafe {
                            flags_word(rec).fetch_or(flag(record::FLAG_REMOVED), Ordering::Release);
                        }
                    }
                }
                own.policy.remove(old);
                cache.drop_handle(&mut own, old, true);
            }
            None => part.update(i, &e),
        }
        shared.objects.fetch_add(1, Ordering::Relaxed);
        own.policy.insert(h, final_len, fingerprint(&self.key));
        if self.solo && final_len <= shared.segment_bytes / 4 {
            // A small object that came without a length: pack it, so small
            // objects do not each keep a file and a mapping.
            let _ = cache.relocate(&mut own, h, 0);
        }
        let _ = cache.make_room(&mut own, 0, now_secs());
        cache.sweep(&mut own);
        Ok(())
    }

    /// Gives up: readers see `Failed`; the record is never committed.
    pub fn abort(mut self) {
        self.fail();
    }

    fn fail(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        // SAFETY: as in `flags`.
        unsafe {
            flags_word(self.rec).fetch_or(flag(record::FLAG_FAILED), Ordering::Release);
        }
        let cache = self.cache.clone();
        let mut own = cache.own();
        if let Some(s) = own.segs.get_mut(&self.seg) {
            s.writers -= 1;
            if self.solo {
                s.sealed = true;
            }
        }
        self.release_handle(&mut own);
        cache.sweep(&mut own);
    }

    /// Drops the writing entry (if still there) and the handle.
    fn release_handle(&self, own: &mut Owner) {
        let shared = self.cache.shared();
        let part = &shared.parts[self.cache.core];
        if let Some(i) = part.find(&self.key, self.handle) {
            part.remove(i);
        }
        shared.segs[self.seg as usize]
            .live
            .fetch_sub(1, Ordering::AcqRel);
        own.handles[self.handle as usize] = Handle::FREE;
        own.free_handles.push(self.handle);
    }
}

impl Drop for ObjectWriter {
    fn drop(&mut self) {
        self.fail();
    }
}
