//! The disk cache (NSDI 2004 §3.2): objects in memory-mapped segment files
//! under `--cache-dir`, found by key on any core without a lock, streamed to
//! readers on every core while they arrive. The files survive restarts (a
//! restarted node serves what it had); a hit is sent straight from the
//! mapping, with no copy into a buffer; a miss streams to every client
//! waiting on it as the origin's bytes arrive, not after the whole object.
//!
//! - **Segments.** Each core appends the objects it owns to its own segment
//!   files (`seg-<n>.crl`): small objects of known length are packed into a
//!   shared *packing* segment; large ones, and those whose length the origin
//!   did not announce, get a *solo* segment (a sparse file as large as the
//!   object may grow; a small one is packed when it completes). The bytes
//!   a segment is accounted for are reserved on the disk when it is made
//!   (`fallocate`). Every file is mapped once (memmap2) and stays mapped
//!   until it is freed.
//! - **A full disk.** `open` uses what fits (`plan`, `disk_room`) and says
//!   so; a write refused for space evicts and retries once, else the
//!   object is served uncached (`CacheError::NoSpace`); the restart scan
//!   reads with `pread`, never touching a hole through the mapping.
//! - **Records** (`coral::cache::record`): header, head, body; the commit
//!   word is written last, so a crash never leaves a record that reads back
//!   as complete. `open` reads every segment, verifies every checksum and
//!   rebuilds the index; anything incomplete or corrupt is dropped, and a
//!   damaged segment is logged.
//! - **The index** (`index.rs`) holds at most `objects_max` objects, at
//!   [`index_bytes_per_object`] bytes of RAM each, touched only as objects
//!   come. It is partitioned by the key's owning core
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
//!
//! The files: this one holds the types, the limits and the record-word
//! helpers; `open.rs` opening and the restart scan; `segment.rs` segment
//! files; `write.rs` the write path; `read.rs` the read path and waiting
//! readers; `clean.rs` eviction and cleaning; `index.rs` the index.

pub mod chunks;
mod clean;
mod index;
mod open;
mod read;
mod segment;
#[cfg(test)]
pub(crate) mod tests;
mod write;

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
pub use open::open;

/// The largest object the cache stores (the default), in bytes.
pub const OBJECT_BYTES_MAX: u64 = crate::limits::CACHE.object_bytes_max;
/// The largest stored response head, in bytes (the index keeps 16 bits).
pub const HEAD_BYTES_MAX: usize = crate::limits::CACHE.head_bytes_max;
/// Segment table slots per core (packing, solo and in-progress segments).
const SEGMENTS_PER_CORE_MAX: u32 = crate::limits::CACHE.segments_per_core_max;
/// Cleanings in a row that free nothing before a store only evicts.
const CLEANS_WITHOUT_GAIN_MAX: u32 = crate::limits::CACHE.cleans_without_gain_max;
/// Steps one `make_room` takes before it answers full.
const MAKE_ROOM_STEPS_MAX: u32 = crate::limits::CACHE.make_room_steps_max;
/// Bounds of a packing segment's size, in bytes.
const SEGMENT_BYTES_MIN: u64 = crate::limits::CACHE.segment_bytes_min;
const SEGMENT_BYTES_MAX: u64 = crate::limits::CACHE.segment_bytes_max;
/// The default object cap (`[proxy] cache_objects_max` unset) allows one
/// object per this many bytes of cache (fewer, larger objects leave index
/// slots unused; more, smaller ones are evicted first by the cap).
pub const OBJECT_BYTES_MEAN_DEFAULT: u64 = crate::limits::CACHE.object_bytes_mean_default;
/// The default object cap's bounds, for the whole cache.
pub const OBJECTS_DEFAULT_MIN: u64 = crate::limits::CACHE.objects_default_min;
pub const OBJECTS_DEFAULT_MAX: u64 = crate::limits::CACHE.objects_default_max;
/// Index entries per core at least (a cache of a few MiB still holds a
/// useful number of small objects).
const OBJECTS_PER_CORE_MIN: u64 = 1024;
/// The most RAM the index takes per object it may hold, in bytes (the
/// goal the issue states; `index_bytes_per_object` is the real figure and
/// a test holds it under this).
pub const INDEX_BYTES_PER_OBJECT_MAX: u64 = 200;
/// A full or failing disk: after a write refused for space, the core keeps
/// its files under what it held then for this long before trying to grow
/// again (the disk may have been freed meanwhile).
const SPACE_RETRY_SECS: u64 = 60;
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
    /// The most objects the cache may hold (`None`: one per
    /// [`OBJECT_BYTES_MEAN_DEFAULT`] bytes of the size used, within
    /// [`OBJECTS_DEFAULT_MIN`]..[`OBJECTS_DEFAULT_MAX`]).
    pub objects_max: Option<u64>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            dir: PathBuf::from("./coral-cache"),
            size_bytes: 1 << 30,
            objects_max: None,
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
    /// The disk refused a write for space (ENOSPC, EDQUOT) and evicting
    /// did not make enough room: the object is served uncached.
    NoSpace(std::io::Error),
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Io(e) => write!(f, "cache I/O error: {e}"),
            CacheError::TooLarge => write!(f, "object larger than the cache stores"),
            CacheError::NotOwner => write!(f, "key is owned by another core"),
            CacheError::Failed => write!(f, "object write failed earlier"),
            CacheError::Full => write!(f, "cache full of pinned or busy objects"),
            CacheError::NoSpace(e) => write!(f, "no room on the cache's disk: {e}"),
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
    /// Record bytes of the complete objects in the whole cache (their
    /// bodies, heads and URLs): the cache's use, where `bytes` counts whole
    /// segments.
    pub object_bytes: u64,
    /// Lookups on this core that found an object.
    pub hits: u64,
    /// Lookups on this core that found none.
    pub misses: u64,
    /// Objects this core evicted to stay within the size.
    pub evictions: u64,
    /// Bytes this core copied forward to free fragmented segments.
    pub cleaned_bytes: u64,
    /// Writes the disk refused for space (ENOSPC, EDQUOT), all cores.
    pub space_errors: u64,
    /// The size the cache uses (the configured size, or less when the
    /// disk has less room; see [`CachePlan`]), in bytes.
    pub usable_bytes: u64,
    /// The most objects the cache holds.
    pub objects_max: u64,
}

// ---------------------------------------------------------------- sizing

/// What a cache configuration implies: the size the cache will use, the
/// objects it may hold and the RAM its index takes (`open` logs it;
/// `coral check-config` prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePlan {
    /// `cache_size` as configured, in bytes.
    pub configured_bytes: u64,
    /// Room on the cache's disk: free bytes plus those the cache's own
    /// files hold (`None`: unknown, e.g. the directory does not exist yet).
    pub disk_room_bytes: Option<u64>,
    /// The size the cache uses: the configured size, or what fits on the
    /// disk (15/16 of its room, leaving some for the filesystem and the
    /// node's logs) when that is less.
    pub usable_bytes: u64,
    /// The most objects the cache holds (every core's share together).
    pub objects_max: u64,
    /// RAM the index takes when it holds `objects_max` objects, in bytes.
    pub index_bytes_max: u64,
}

impl CachePlan {
    /// Whether the configured size does not fit on the disk.
    pub fn shrunk(&self) -> bool {
        self.usable_bytes < self.configured_bytes
    }
}

impl fmt::Display for CachePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(f, "cache_size {:.0} MiB", mib(self.configured_bytes))?;
        match self.disk_room_bytes {
            Some(room) if self.shrunk() => write!(
                f,
                " does not fit: the disk has room for {:.0} MiB, so the cache uses {:.0} MiB",
                mib(room),
                mib(self.usable_bytes)
            )?,
            Some(room) => write!(f, " (the disk has room for {:.0} MiB)", mib(room))?,
            None => write!(f, " (the disk's room is not known yet)")?,
        }
        write!(
            f,
            "; up to {} objects (cache_objects_max), index RAM up to {:.1} MiB \
             ({} bytes per object, allocated as objects are stored)",
            self.objects_max,
            mib(self.index_bytes_max),
            index_bytes_per_object()
        )
    }
}

/// RAM the index takes per object it holds, in bytes: the index slot (4/3
/// of a 48-byte slot per entry), the hit counter, the owner's handle, the
/// eviction policy's node, fingerprint and ghost entry, a free-list entry.
pub fn index_bytes_per_object() -> u64 {
    let slot = (index::Partition::memory_bytes_for(3 << 20) / (3 << 20)) as u64;
    // S3-FIFO: a 16-byte node and an 8-byte fingerprint per handle; the
    // ghost queue (8) and its set (8 + 4 + 1) hold at most one entry per
    // object.
    let policy = 16 + 8 + 8 + 13;
    slot + std::mem::size_of::<Handle>() as u64 + 4 + policy
}

/// The cache a configuration implies, given the room on its disk
/// (`disk_room`, see [`disk_room`]).
pub fn plan(
    size_bytes: u64,
    objects_max: Option<u64>,
    cores: usize,
    disk_room_bytes: Option<u64>,
) -> CachePlan {
    let cores = cores.max(1) as u64;
    let usable_bytes = match disk_room_bytes {
        Some(room) => size_bytes.min(room - room / 16),
        None => size_bytes,
    };
    let objects_max = objects_max
        .unwrap_or_else(|| {
            (usable_bytes / OBJECT_BYTES_MEAN_DEFAULT)
                .clamp(OBJECTS_DEFAULT_MIN, OBJECTS_DEFAULT_MAX)
        })
        .clamp(
            cores * OBJECTS_PER_CORE_MIN,
            cores * u64::from(index::HANDLE_MAX / 2),
        );
    CachePlan {
        configured_bytes: size_bytes,
        disk_room_bytes,
        usable_bytes,
        objects_max,
        index_bytes_max: objects_max * index_bytes_per_object(),
    }
}

/// Room for the cache in `dir`: the bytes free to this user on its
/// filesystem (`statvfs`) plus those the cache's segment files already
/// hold. A directory not made yet is judged by its nearest existing
/// parent. `None` if no such directory can be examined.
pub fn disk_room(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let existing = dir.ancestors().find(|d| d.is_dir())?;
    let path = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes only into `st`; `path` is a NUL-terminated string.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let free = (st.f_bavail as u64).saturating_mul(st.f_frsize as u64);
    let held: u64 = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("seg-"))
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .sum();
    Some(free.saturating_add(held))
}

/// What `coral check-config` says of a configuration's cache: where it
/// lives, what size it will use (what fits on the disk there) and the RAM
/// its index implies. Prefixed "warning:" when `cache_size` does not fit;
/// the flag says so (the caller then calls the configuration usable, not
/// ok).
pub fn check_config_line(
    dir: &Path,
    size_bytes: u64,
    objects_max: Option<u64>,
    cores: usize,
) -> (String, bool) {
    let p = plan(size_bytes, objects_max, cores, disk_room(dir));
    let line = format!(
        "{}cache {}: {p}",
        if p.shrunk() { "warning: " } else { "" },
        dir.display()
    );
    (line, p.shrunk())
}

/// Whether a failed write means the disk has no room (or the user's quota
/// is spent, or the file may not grow).
fn is_space_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG)
    )
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
    /// Record bytes of the complete objects (all cores): what the cache
    /// holds, as against `bytes`, what its segment files occupy.
    object_bytes: AtomicU64,
    bytes: AtomicU64,
    next_file: AtomicU64,
    /// What `open` decided (size used, object cap).
    plan: CachePlan,
    /// Writes refused for space, and whether that was logged (once).
    space_errors: AtomicU64,
    space_logged: std::sync::atomic::AtomicBool,
    /// The signed records of verified peer bytes (`chunks.rs`).
    records: chunks::ChunkRecords,
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
    /// Handles in use or freed; grows (to `handles_max`) as objects come,
    /// so an empty cache costs no memory per object it may hold.
    handles: Vec<Handle>,
    handles_max: u32,
    free_handles: Vec<u32>,
    /// After a write refused for space: the bytes this core's files may
    /// hold (what they held then, less room for the write), and since when
    /// (unix seconds). `u64::MAX`: no such bound.
    space_cap: u64,
    space_cap_secs: u64,
    /// At the object cap with nothing evictable: no eviction is tried for
    /// a new object before this (unix seconds).
    cap_retry_secs: u64,
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
    /// The entry this core's last lookup found and the partition's sequence
    /// value it was found at (issue 27: a lookup of the same key while the
    /// partition is unchanged needs no probe; see `read.rs`).
    last: Cell<Option<(index::Entry, u64)>>,
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
    /// The key's partition's sequence value the entry was found at.
    seq: u64,
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

impl CoreCache {
    fn shared(&self) -> &Shared {
        &self.local.shared
    }

    /// This handle's core.
    pub fn core(&self) -> usize {
        self.core
    }

    /// The signed records kept beside cached objects (verified peer bytes,
    /// `chunks.rs`).
    pub fn records(&self) -> &chunks::ChunkRecords {
        &self.shared().records
    }

    /// The core that owns `key` (where `begin` and `remove` run).
    pub fn owner_of(&self, key: &Id) -> usize {
        steer::shard_of_key(key, self.shared().cores)
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

    /// What `open` decided: the size used and the object cap.
    pub fn plan(&self) -> CachePlan {
        self.shared().plan
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        let own = self.local.own();
        CacheStats {
            space_errors: self.shared().space_errors.load(Ordering::Relaxed),
            usable_bytes: self.shared().plan.usable_bytes,
            objects_max: self.shared().plan.objects_max,
            objects: self.shared().objects.load(Ordering::Relaxed),
            bytes: self.shared().bytes.load(Ordering::Relaxed),
            object_bytes: self.shared().object_bytes.load(Ordering::Relaxed),
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
    /// A free handle for a new object: a freed one, else the next never
    /// used (the handle table grows as objects come); `None` at the cap.
    fn alloc_handle(own: &mut Owner) -> Option<u32> {
        if let Some(h) = own.free_handles.pop() {
            return Some(h);
        }
        let h = own.handles.len();
        if h >= own.handles_max as usize {
            return None;
        }
        if h == own.handles.capacity() {
            // Doubling, but never past the cap: a full index holds exactly
            // `handles_max` handles.
            let want = (h * 2).max(64).min(own.handles_max as usize);
            own.handles.reserve_exact(want - h);
        }
        own.handles.push(Handle::FREE);
        Some(h as u32)
    }

    /// Whether the object cap leaves room for one more handle.
    fn handle_free(own: &Owner) -> bool {
        !own.free_handles.is_empty() || own.handles.len() < own.handles_max as usize
    }

    /// The bytes this core's files may hold now: its share, or less while
    /// the disk has been refusing writes for space.
    fn space_limit(&self, own: &mut Owner, now: u64) -> u64 {
        if own.space_cap != u64::MAX && now >= own.space_cap_secs + SPACE_RETRY_SECS {
            // Try to grow again: the disk may have room by now.
            own.space_cap = u64::MAX;
        }
        self.shared().budget.min(own.space_cap)
    }

    /// A write of `need` bytes was refused for space (`e`): counts and logs
    /// it (once per node), and bounds this core's files under what they
    /// hold now less `need` and a segment, so that `make_room` evicts
    /// enough for the retry.
    fn on_space_error(&self, own: &mut Owner, e: &std::io::Error, need: u64, now: u64) {
        let shared = self.shared();
        shared.space_errors.fetch_add(1, Ordering::Relaxed);
        let cap = own
            .bytes
            .saturating_sub(need.saturating_add(shared.segment_bytes));
        own.space_cap = own.space_cap.min(cap);
        own.space_cap_secs = now;
        if !shared.space_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                dir = %shared.dir.display(),
                error = %e,
                cache_bytes = shared.bytes.load(Ordering::Relaxed),
                usable_bytes = shared.plan.usable_bytes,
                "cache: the disk refused a write for space (disk full or quota spent); \
                 evicting to make room, and serving objects that still do not fit uncached \
                 (logged once; counted in coral_cache_space_errors_total)"
            );
        }
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
}
