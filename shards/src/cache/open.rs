//! Opening the cache: the shared tables are made, then the restart scan
//! reads every segment file back, verifies every record and rebuilds the
//! index; anything incomplete, corrupt or removed is dropped.

use super::*;

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
        object_bytes: AtomicU64::new(0),
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
