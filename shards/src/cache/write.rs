//! The write path, on the key's owning core: room is made and the record's
//! space allocated (packed or solo), the body appended through the file as
//! it arrives, and the record committed (commit word last) and published
//! as the key's complete copy.

use super::*;

impl CoreCache {
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
        while part.len() >= part.capacity() || !Local::handle_free(&own) {
            // At the object cap with every object pinned, the policy walks
            // its whole queue to find none: try again only a second later
            // (meanwhile new objects are served uncached), so a flood of
            // new URLs does not pay that walk on every miss.
            if now < own.cap_retry_secs || !self.local.evict_one(&mut own, now) {
                own.cap_retry_secs = own.cap_retry_secs.max(now + 1);
                return Err(CacheError::Full);
            }
        }
        // A write the disk refuses for space is retried once, after
        // evicting enough (`on_space_error`); if it fails again the caller
        // serves the object uncached.
        let mut placed = self.place(&mut own, &key, &meta, head, now);
        let mut retry = false;
        if let Err(CacheError::NoSpace(e)) = &placed {
            let need = meta
                .expected_len
                .map_or(shared.segment_bytes, |l| record::record_len(head.len(), l));
            self.local.on_space_error(&mut own, e, need, now);
            retry = self.local.make_room(&mut own, need, now).is_ok();
        }
        if retry {
            placed = self.place(&mut own, &key, &meta, head, now);
        }
        let (seg, off, solo, alloc_len) = placed?;
        let slot = &shared.segs[seg as usize];
        // SAFETY: the record's space was just handed to this writer alone.
        let rec = unsafe { slot.ptr.load(Ordering::Acquire).add(off as usize) };
        slot.live.fetch_add(1, Ordering::AcqRel);
        if let Some(s) = own.segs.get_mut(&seg) {
            s.writers += 1;
        }
        let h = Local::alloc_handle(&mut own).ok_or(CacheError::Full)?;
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
}

impl CoreCache {
    /// Room for the record of a new object, and its header and head
    /// written there: (segment, offset, solo, record bytes). A write the
    /// disk refuses for space is `NoSpace`.
    fn place(
        &self,
        own: &mut Owner,
        key: &Id,
        meta: &ObjectMeta,
        head: &[u8],
        now: u64,
    ) -> Result<(u32, u32, bool, u64), CacheError> {
        let shared = self.shared();
        let known_len = meta.expected_len.map(|l| record::record_len(head.len(), l));
        let small = known_len.filter(|&r| r <= shared.segment_bytes / 4);
        let space = |e: CacheError| match e {
            CacheError::Io(e) if is_space_error(&e) => CacheError::NoSpace(e),
            e => e,
        };
        let (seg, off, solo, alloc_len) = match small {
            Some(r) => {
                let need = self.local.packing_need(own, r);
                self.local.make_room(own, need, now)?;
                let (seg, off) = self.local.alloc_packing(own, r).map_err(space)?;
                (seg, off, false, r)
            }
            None => {
                let cap =
                    known_len.unwrap_or_else(|| record::record_len(head.len(), OBJECT_BYTES_MAX));
                let accounted = known_len.unwrap_or_else(|| record::record_len(head.len(), 0));
                self.local.make_room(own, accounted, now)?;
                let seg = self
                    .local
                    .create_segment(own, round_page(cap), accounted, false)
                    .map_err(space)?;
                (seg, 0, true, cap)
            }
        };
        let slot = &shared.segs[seg as usize];
        let header = record::encode_header(key, meta, head.len() as u32, alloc_len);
        // [off, off + alloc_len) is this writer's, and no reader sees it
        // until the index entry `begin` inserts. Written through the file,
        // not the mapping (`write_file`).
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
                self.local.sweep(own);
            }
            return Err(space(e.into()));
        }
        Ok((seg, off, solo, alloc_len))
    }
}

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
        let mut written = write_file(fd, data, at);
        if let Err(e) = &written {
            if is_space_error(e) {
                // A body of unannounced length grows its sparse file as it
                // comes: make room on the disk by evicting, then retry once.
                let now = now_secs();
                let mut own = self.cache.own();
                self.cache
                    .on_space_error(&mut own, e, data.len() as u64, now);
                if self
                    .cache
                    .make_room(&mut own, data.len() as u64, now)
                    .is_ok()
                {
                    drop(own);
                    written = write_file(fd, data, at);
                }
            }
        }
        if let Err(e) = written {
            self.fail();
            return Err(if is_space_error(&e) {
                CacheError::NoSpace(e)
            } else {
                e.into()
            });
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
        shared.object_bytes.fetch_add(final_len, Ordering::Relaxed);
        // Room is made before the object joins the policy: in a cache full
        // of pinned objects the newest would be the only victim, evicted
        // before the clients that waited for it read it (they got 502).
        let _ = cache.make_room(&mut own, 0, now_secs());
        own.policy.insert(h, final_len, fingerprint(&self.key));
        if self.solo && final_len <= shared.segment_bytes / 4 {
            // A small object that came without a length: pack it, so small
            // objects do not each keep a file and a mapping.
            let _ = cache.relocate(&mut own, h, 0);
        }
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
