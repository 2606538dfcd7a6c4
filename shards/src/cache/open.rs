//! Opening the cache: the size that fits on the disk is decided and said
//! (`plan`), the shared tables are made, then the restart scan reads every
//! segment file back with `pread` (never through the mapping: touching an
//! unwritten page of a sparse file on a full tmpfs raises SIGBUS), verifies
//! every record and rebuilds the index; anything incomplete, corrupt or
//! removed is dropped, and a segment that cannot be read is skipped and
//! logged.

use super::*;

/// Opens (or creates) the cache before the executors start: maps every
/// segment, verifies every record and rebuilds the index (progress on stderr
/// when that takes more than a second), drops anything incomplete or
/// corrupt. Returns one handle per core, to be moved into its executor.
pub fn open(config: &CacheConfig, cores: usize) -> Result<Vec<CoreCache>, CacheError> {
    let cores = cores.max(1);
    std::fs::create_dir_all(&config.dir)?;
    let plan = plan(
        config.size_bytes,
        config.objects_max,
        cores,
        disk_room(&config.dir),
    );
    if plan.shrunk() {
        tracing::warn!(dir = %config.dir.display(), "cache: {plan}");
    } else {
        tracing::info!(dir = %config.dir.display(), "cache: {plan}");
    }
    let budget = plan.usable_bytes / cores as u64;
    let segment_bytes = ((budget / 16) / 4096 * 4096).clamp(SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX);
    // Entries per core: complete objects and objects being written. The
    // tables are allocated zeroed and grow into memory as they are used.
    let objects_max = (plan.objects_max / cores as u64) as usize;
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
        object_bytes: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        next_file: AtomicU64::new(0),
        plan,
        space_errors: AtomicU64::new(0),
        space_logged: std::sync::atomic::AtomicBool::new(false),
        records: chunks::ChunkRecords::default(),
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
                        handles: Vec::new(),
                        handles_max: handles,
                        free_handles: Vec::new(),
                        space_cap: u64::MAX,
                        space_cap_secs: 0,
                        cap_retry_secs: 0,
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
                last: Cell::new(None),
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
    let mut buf: Vec<u8> = Vec::new();
    for (i, (_, path)) in files.iter().enumerate() {
        let c = &caches[i % caches.len()];
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .and_then(|f| f.metadata().map(|m| (m.len(), f)));
        let (len, file) = match opened {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(segment = %path.display(), error = %e, "cache: segment cannot be opened: skipped");
                continue;
            }
        };
        if len < HEADER_BYTES as u64 {
            let _ = std::fs::remove_file(path);
            continue;
        }
        let id = {
            let mut own = c.local.own();
            let Some(id) = own.free_ids.pop() else {
                tracing::warn!(
                    segment = %path.display(),
                    "cache: more segment files than the segment table holds: the rest are not restored"
                );
                break;
            };
            let map = match MmapOptions::new().len(len as usize).map_raw(&file) {
                Ok(m) => m,
                Err(e) => {
                    own.free_ids.push(id);
                    tracing::warn!(segment = %path.display(), error = %e, "cache: segment cannot be mapped: skipped");
                    continue;
                }
            };
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
        // The file stays open (in its slot) while the scan runs.
        let fd = shared.segs[id as usize].fd.load(Ordering::Relaxed);
        let scan = scan_segment(fd, len, &mut buf, |rec, off| {
            let owner = &caches[steer::shard_of_key(&rec.key, caches.len())];
            if owner.local.restore_record(rec, id, off as u32, &c.local) {
                objects += 1;
                bytes += rec.alloc_len;
            }
        });
        dropped += scan.dropped + scan.damaged;
        if scan.damaged > 0 || scan.error.is_some() {
            tracing::warn!(
                segment = %path.display(),
                restored = scan.restored,
                damaged = scan.damaged,
                error = scan.error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                "cache: torn, corrupt or unreadable segment: its bad records are skipped"
            );
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
    if started.elapsed() >= OPEN_QUIET {
        eprintln!(
            "coral: cache: {objects} objects ({} MiB) restored, {dropped} incomplete or removed dropped, in {:.1} s",
            bytes >> 20,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Reads the records of the segment file `fd` (`len` bytes) with `pread`,
/// a header and then, for a committed record, the whole record into `buf`;
/// calls `found` with each complete, verified record and its offset.
/// Returns what it found; a read error ends the scan of this segment.
fn scan_segment(
    fd: RawFd,
    len: u64,
    buf: &mut Vec<u8>,
    mut found: impl FnMut(&record::Record, u64),
) -> Scan {
    let mut scan = Scan::default();
    let (mut restored, mut dropped) = (0u64, 0u64);
    let mut header = [0u8; HEADER_BYTES];
    let mut off = 0u64;
    while off + HEADER_BYTES as u64 <= len {
        if let Err(e) = read_file(fd, &mut header, off) {
            scan.error = Some(e);
            break;
        }
        let next = match record::read_header(&header, len - off) {
            Ok(alloc_len) => {
                buf.clear();
                buf.resize(alloc_len as usize, 0);
                if let Err(e) = read_file(fd, buf, off) {
                    scan.damaged += 1;
                    scan.error = Some(e);
                    break;
                }
                match record::read_record(buf, true) {
                    Ok(rec) => {
                        found(&rec, off);
                        restored += 1;
                        rec.alloc_len
                    }
                    Err(e) => {
                        scan.damaged += 1;
                        e.skip().unwrap_or(alloc_len)
                    }
                }
            }
            Err(e) => match e.skip() {
                // Uncommitted (an aborted or interrupted write) or removed.
                Some(skip) => {
                    dropped += 1;
                    skip
                }
                // Zeros: the rest of the segment is unused. Anything else
                // is a torn or garbled record, and the rest is unreadable.
                None => {
                    if header.iter().any(|&b| b != 0) {
                        scan.damaged += 1;
                    }
                    break;
                }
            },
        };
        off += next.max(record::RECORD_ALIGN);
    }
    scan.restored = restored;
    scan.dropped = dropped;
    scan
}

/// What `scan_segment` found in one segment.
#[derive(Default)]
struct Scan {
    /// Complete records restored.
    restored: u64,
    /// Records passed over as not complete: aborted, cut short by a crash,
    /// or removed.
    dropped: u64,
    /// Records torn, garbled or failing their checksum.
    damaged: u64,
    /// The read error that ended the scan early.
    error: Option<std::io::Error>,
}

/// Reads `buf.len()` bytes at `at` of file `fd` (`pread`); a read past
/// the end of the file leaves the rest zero.
fn read_file(fd: RawFd, buf: &mut [u8], mut at: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a live, writable slice; `fd` is an open file.
        let n = unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), at as libc::off_t) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            rest.fill(0);
            return Ok(());
        }
        done += n as usize;
        at += n as u64;
    }
    Ok(())
}

impl Local {
    /// Adds a restored record (called on the key's owner's handle, during
    /// open; `seg_owner` holds the segment). Newest `stored_secs` wins.
    pub(super) fn restore_record(
        &self,
        rec: &record::Record,
        seg: u32,
        off: u32,
        seg_owner: &Local,
    ) -> bool {
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
        let Some(h) = Local::alloc_handle(&mut own) else {
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
        shared
            .object_bytes
            .fetch_add(rec.alloc_len, Ordering::Relaxed);
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
}
