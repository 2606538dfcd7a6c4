//! The read path: a lookup on any core with no lock, the object read
//! straight from the mapping (or sent from its file), and readers waiting
//! on an object still arriving, woken by one ticker per core.

use super::*;

impl CoreCache {
    /// Any core: the object stored under `key` — the complete copy if there
    /// is one, else the one being written. No lock, no message to another
    /// core, no allocation. The same key as this core's last lookup, in a
    /// partition whose sequence has not moved since, takes the entry found
    /// then without a probe: no entry changed in between (every write moves
    /// the sequence), so the probe would find the same one; the check after
    /// the reader count below holds it as it holds a probe's.
    pub fn lookup(&self, key: &Id) -> Option<ObjectRef> {
        let shared = self.shared();
        let part = &shared.parts[self.owner_of(key)];
        loop {
            // The memo read in place, not copied out of its cell and back
            // (issue 27, session 8).
            // SAFETY: `last` is this core's (`CoreCache` is `!Sync`) and
            // nothing writes it while the reference lives: the one write is
            // after its last use, the next reference is made after it.
            let memo = unsafe { &*self.last.as_ptr() };
            let fresh = matches!(memo, Some((e, seq)) if e.key == *key && part.seq_now() == *seq);
            if !fresh {
                self.last.set(part.lookup(key));
            }
            // SAFETY: as above; no write until the next turn of the loop.
            let Some((e, seq)) = (unsafe { &*self.last.as_ptr() }) else {
                self.misses.set(self.misses.get() + 1);
                return None;
            };
            let seq = *seq;
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
                seq,
            });
        }
    }
}

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
            seq: self.seq,
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

    /// The sequence value of the key's index partition at which this
    /// object's entry was found (even: lookups never answer mid-write).
    /// Every write to a partition moves its sequence, so two lookups of one
    /// key that answer the same value found the same entry: the same record,
    /// whose head and body bytes are never written again (issue 27: a hit
    /// on the fast path compares its stored head only when this moved).
    pub fn entry_seq(&self) -> u64 {
        self.seq
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
