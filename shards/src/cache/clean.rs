//! Staying within the core's share: S3-FIFO eviction, and cleaning — the
//! sealed packing segment with the fewest live bytes has its resident
//! objects copied forward (cold ones are evicted, so the executor never
//! faults) and is then freed.

use super::*;

impl Local {
    /// Evicts and cleans until `need` more bytes fit in this core's share
    /// and the policy's live bytes are under target.
    pub(super) fn make_room(&self, own: &mut Owner, need: u64, now: u64) -> Result<(), CacheError> {
        let shared = self.shared();
        // One segment of the share is the cleaner's headroom; a disk that
        // refused a write for space bounds the share lower for a while.
        let space = self.space_limit(own, now);
        let limit = if space < shared.budget {
            space
        } else {
            shared
                .budget
                .saturating_sub(shared.segment_bytes)
                .max(shared.segment_bytes)
        };
        let mut swept = false;
        // Cleaning is worth it only while it lowers the core's accounted
        // bytes: moving live objects into a fresh packing segment and
        // freeing their old one can leave them where they were, and
        // without this count the next cleaning moves them back.
        let mut lowest = own.bytes;
        let mut cleans_without_gain = 0;
        for _ in 0..MAKE_ROOM_STEPS_MAX {
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
            let cleaned = cleans_without_gain < CLEANS_WITHOUT_GAIN_MAX && self.clean_one(own, now);
            if cleaned || self.evict_one(own, now) {
                self.sweep(own);
                if own.bytes < lowest {
                    lowest = own.bytes;
                    cleans_without_gain = 0;
                } else if cleaned {
                    cleans_without_gain += 1;
                }
                continue;
            }
            return Err(CacheError::Full);
        }
        Err(CacheError::Full)
    }

    /// Evicts the policy's next victim; false if none can go.
    pub(super) fn evict_one(&self, own: &mut Owner, now: u64) -> bool {
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
    pub(super) fn leave_segment(&self, own: &mut Owner, hd: &Handle) {
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
    pub(super) fn drop_handle(&self, own: &mut Owner, h: u32, complete: bool) {
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
            shared
                .object_bytes
                .fetch_sub(u64::from(hd.alloc), Ordering::Relaxed);
        }
        part.take_hits(h);
        own.handles[h as usize] = Handle::FREE;
        own.free_handles.push(h);
    }

    /// Frees the sealed packing segment with the fewest live bytes by
    /// copying its objects forward (those in memory) or evicting them.
    pub(super) fn clean_one(&self, own: &mut Owner, now: u64) -> bool {
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
    pub(super) fn relocate(&self, own: &mut Owner, h: u32, _now: u64) -> bool {
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
        if own.bytes + need > shared.budget.min(own.space_cap) {
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
    pub(super) fn move_handle(&self, own: &mut Owner, h: u32, seg: u32, off: u32) {
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
