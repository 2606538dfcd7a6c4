//! Segment files: created sparse, mapped once and published to every core;
//! freed (unmapped, deleted) by the sweep once nothing refers to them; and
//! the packing segment small records share.

use super::*;

impl Local {
    /// Maps a segment into slot `id` and makes it reachable.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn publish_segment(
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

    /// A new segment file of `file_bytes` (sparse), `accounted` against the
    /// share. The accounted bytes are reserved on the disk up front
    /// (`fallocate`): a full disk is found here, as an error the caller
    /// handles, never later as a page fault (SIGBUS) on the mapping.
    pub(super) fn create_segment(
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
            let made = file
                .set_len(file_bytes)
                .and_then(|()| reserve(&file, accounted));
            if let Err(e) = made {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
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
    pub(super) fn free_segment(&self, own: &mut Owner, id: u32) {
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
    pub(super) fn sweep(&self, own: &mut Owner) {
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
    pub(super) fn packing_need(&self, own: &Owner, rec: u64) -> u64 {
        match own.active.and_then(|a| own.segs.get(&a)) {
            Some(s) if s.used + rec <= s.accounted => 0,
            _ => self.shared().segment_bytes,
        }
    }

    /// Space for a record of `rec` bytes in the active packing segment.
    pub(super) fn alloc_packing(
        &self,
        own: &mut Owner,
        rec: u64,
    ) -> Result<(u32, u32), CacheError> {
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
}

/// Allocates the first `bytes` of `file` on the disk (`fallocate`, keeping
/// its size); a filesystem that cannot (EOPNOTSUPP) keeps it sparse, and
/// a full one then fails the write (`write_file`) instead.
fn reserve(file: &File, bytes: u64) -> std::io::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    loop {
        // SAFETY: fallocate on an open file descriptor; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                0,
                bytes as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => return Ok(()),
            _ => return Err(e),
        }
    }
}
