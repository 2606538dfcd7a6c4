//! The fast path of a fresh hit (issue #11): a plain request whose Host and
//! target bytes this core has answered a hit for is answered from a kept
//! client head, with no owned request, URL canonicalisation or SHA-1.

use crate::clock::Now;
use std::rc::Rc;

use coral::proxy::hot::{HitHead, HitInputs};
use coral::proxy::http::Framing;
use coral::Id;

use std::os::fd::AsRawFd;

use super::io::{send_all, send_complete, send_file_now, send_file_rest, SentNow};
use super::{Conn, Next, HOT_HEAD_BYTES_MAX, HOT_NAME_BYTES_MAX, SENDFILE_BYTES_MIN};
use crate::cache::{ObjectRef, ObjectState};
use crate::proxy::stored::Stored;
use crate::proxy::ProxyCore;

/// What the fast path of a hit knows of an object: its key, the stored head
/// the built hit head came from, and when its body was last seen resident.
pub(in crate::proxy) struct HotEntry {
    key: Id,
    /// The stored head's bytes (compared with the object's on every hit: a
    /// replaced object has other bytes, or another length and date below).
    raw_head: Box<[u8]>,
    /// The `ObjectRef::entry_seq` of a lookup whose stored head was
    /// `raw_head`: a lookup at the same value found the same entry, whose
    /// head needs no comparison (issue 27).
    head_seq: u64,
    stored: Rc<Stored>,
    head: HitHead,
    /// The second in which the body was last found resident (`mincore`):
    /// a hot object is checked at most once a second, not on every hit.
    resident_secs: u64,
}

/// Whether a stored response's hits may take the fast path: a 200 that
/// does not vary (a varying one needs the request's fields compared), with
/// a head short enough to keep.
/// A body kept in transfer codings is framed by the full path (issue 26
/// item 6, `coral::proxy::policy::client_head`).
fn policy_codings_none(st: &Stored) -> bool {
    coral::proxy::policy::stored_codings(&st.head).is_none()
}

fn hot_eligible(st: &Stored, raw_head: &[u8]) -> bool {
    st.head.status == 200
        && !st.head.headers.contains("vary")
        && policy_codings_none(st)
        && raw_head.len() <= HOT_HEAD_BYTES_MAX
}

impl HotEntry {
    /// A fresh complete hit on this entry's object as of `now`: the object,
    /// its body length, the framing of the body, whether its residency
    /// must be checked, and its client head (kept in the entry). `None`
    /// when the object is gone, stale, being written or no longer eligible.
    /// Inlined into its one caller: its result (the object among it) is
    /// then built where the caller keeps it, not returned and moved.
    #[inline(always)]
    fn hit(
        &mut self,
        pc: &ProxyCore,
        now: u64,
        keep_alive: bool,
    ) -> Option<(ObjectRef, u64, Framing, bool, &[u8])> {
        let obj = pc.cache.lookup(&self.key)?;
        let ObjectState::Complete { len } = obj.state() else {
            return None;
        };
        let meta = obj.meta();
        if now >= meta.fresh_until_secs {
            return None;
        }
        if obj.entry_seq() != self.head_seq {
            if *self.raw_head != *obj.head() {
                let st = pc.stored_head(&self.key, &obj)?;
                if !hot_eligible(&st, obj.head()) {
                    return None;
                }
                self.raw_head = obj.head().into();
                self.stored = st;
                self.head.invalidate();
            }
            self.head_seq = obj.entry_seq();
        }
        let inputs = HitInputs {
            now_secs: now,
            stored_secs: meta.stored_secs,
            fresh_until_secs: meta.fresh_until_secs,
            initial_age_secs: self.stored.initial_age_secs,
            body_len: len,
            keep_alive,
        };
        let check_resident = self.resident_secs != now;
        let (bytes, framing) = self.head.head(&self.stored.head, &pc.node_name, inputs);
        Some((obj, len, framing, check_resident, bytes))
    }
}

/// What the fast path did with the request at the head of the buffer.
pub(super) enum Hot {
    /// Answered it.
    Served(Next),
    /// A plain request with no valid entry: the full path answers it.
    Cold,
    /// Not a plain request: the full path answers it.
    NotPlain,
    /// A hit whose answer did not all go out at once: `hot_send` sends
    /// the rest (through the ring) and counts it.
    Sending(HotSend),
}

/// What `hot_send` needs of a hit whose answer goes on through the ring.
pub(super) struct HotSend {
    key: Id,
    obj: ObjectRef,
    len: u64,
    framing: Framing,
    head_only: bool,
    check_resident: bool,
    /// How far `send_file_now` got (`None`: not tried).
    sent_now: Option<std::io::Result<SentNow>>,
    next: Next,
    started: crate::clock::Mono,
    now: u64,
}

impl Conn<'_> {
    /// The fast path of a fresh hit (issue #11) for a plain request whose
    /// Host and target bytes this core has answered a hit for: no owned
    /// request, no URL canonicalisation or SHA-1, the client head reused
    /// (rebuilt once a second), the body's residency checked once a second.
    /// Every hit still looks the object up in the cache (it keeps the
    /// segment alive while the body is sent) and compares its stored head.
    /// `woke`: the request came in by an edge of the readiness set, whose
    /// dispatch read the clocks once for every connection it woke
    /// (`Readiness::woke_at`); else they are read here. The answer is timed
    /// from then and its HTTP second is that one.
    /// Not an `async fn` (issue 27, session 7): a hit whose answer the
    /// socket takes at once is served and counted here with no future made,
    /// moved or dropped; the rest go on in [`hot_send`](Self::hot_send).
    #[inline]
    pub(super) fn hot_hit(&mut self, woke: bool) -> Hot {
        let pc = self.pc;
        // The access log needs the request's fields: the full path logs.
        if crate::accesslog::enabled() {
            return Hot::NotPlain;
        }
        // A body sent with `sendfile` (`send_complete`) is tried at once,
        // from the head kept in the entry: when the socket takes it all, the
        // head is not copied and no send future runs (issue 27, session 7).
        let fd = self.stream.as_raw_fd();
        let nonblocking = self.nonblocking;
        let (plain, found, started, now) = {
            let mut hot = pc.hot.borrow_mut();
            let parsed = pc.plain_memo.borrow_mut().find(self.inb.filled(), &mut hot);
            let Some((plain, entry)) = parsed else {
                return Hot::NotPlain;
            };
            let clocks = match &pc.ready {
                Some(r) if woke => r.woke_at(),
                _ => Now::read(),
            };
            let (started, now) = (clocks.mono, clocks.unix_secs);
            let out = &mut self.out;
            let found = entry.and_then(|e| {
                let key = e.key;
                let (obj, len, framing, check_resident, head) = e.hit(pc, now, plain.keep_alive)?;
                let body = !(plain.head_only || framing == Framing::Empty);
                let sent = if body && !check_resident && nonblocking && len >= SENDFILE_BYTES_MIN {
                    Some(send_file_now(fd, head, &obj, 0, len))
                } else {
                    None
                };
                // The head's bytes a send future still needs.
                let unsent = match &sent {
                    None => head,
                    Some(Ok(SentNow::Head(n))) => &head[*n..],
                    Some(_) => &[],
                };
                out.clear();
                out.extend_from_slice(unsent);
                Some((key, (obj, len, framing, check_resident, sent)))
            });
            (plain, found, started, now)
        };
        let name_to = |name: &mut Vec<u8>| {
            name.clear();
            name.extend_from_slice(plain.host);
            name.extend_from_slice(plain.target);
            plain.host.len()
        };
        let Some((key, (obj, len, framing, check_resident, sent_now))) = found else {
            self.cold_host_len = name_to(&mut self.cold_name);
            self.cold = true;
            return Hot::Cold;
        };
        if check_resident {
            self.cold_host_len = name_to(&mut self.cold_name);
        }
        let (head_only, ka) = (plain.head_only, plain.keep_alive);
        crate::status::sink::served_named(obj.key_prefix(), plain.host, plain.target, len, true);
        self.inb.consume(plain.len);
        self.answered = true;
        pc.idle.borrow_mut().busy(self.idle_slot);
        pc.stats.hits.set(pc.stats.hits.get() + 1);
        let next = if ka { Next::KeepAlive } else { Next::Close };
        if let Some(Ok(SentNow::All)) = sent_now {
            self.count_hit(head_only, true, len, started);
            return Hot::Served(next);
        }
        Hot::Sending(HotSend {
            key,
            obj,
            len,
            framing,
            head_only,
            check_resident,
            sent_now,
            next,
            started,
            now,
        })
    }

    /// The rest of a hit that `hot_hit` could not send at once, and its
    /// count.
    pub(super) async fn hot_send(&mut self, h: HotSend) -> Next {
        let pc = self.pc;
        let HotSend {
            key,
            obj,
            len,
            framing,
            head_only,
            check_resident,
            sent_now,
            next,
            started,
            now,
        } = h;
        let out = std::mem::take(&mut self.out);
        let p = self.progress();
        let sent = if let Some(sent) = sent_now {
            match sent {
                Ok(SentNow::All) => Ok(()),
                Ok(sent) => {
                    let ready = self.ready();
                    let r =
                        send_file_rest(&mut self.stream, ready, &out, &obj, sent, 0, len, p).await;
                    if r.is_ok() {
                        p.done();
                    }
                    r
                }
                Err(e) => Err(e),
            }
        } else if head_only || framing == Framing::Empty {
            send_all(&mut self.stream, &[&out], p).await
        } else {
            if check_resident {
                obj.ensure_resident(0, len).await;
                let (host, target) = self.cold_name.split_at(self.cold_host_len);
                if let Some(e) = pc.hot.borrow_mut().get_mut(host, target) {
                    if e.key == key {
                        e.resident_secs = now;
                    }
                }
            }
            let ready = self.ready();
            send_complete(
                &mut self.stream,
                ready,
                self.nonblocking,
                &out,
                &obj,
                0,
                len,
                p,
            )
            .await
        };
        self.out = out;
        self.count_hit(head_only, sent.is_ok(), len, started);
        if sent.is_ok() {
            next
        } else {
            Next::Close
        }
    }

    /// What `end` counts for a fast hit (GET or HEAD, 200, local), by its
    /// series found once; the access log is off on this path.
    #[inline]
    fn count_hit(&self, head_only: bool, sent: bool, len: u64, started: crate::clock::Mono) {
        let body_bytes = if head_only || !sent { 0 } else { len };
        self.pc
            .stats
            .http
            .borrow_mut()
            .record_hit(head_only, body_bytes, started.elapsed_nanos());
    }

    /// After a fresh hit on the full path for a plain request: the next
    /// plain request with the same Host and target bytes takes the fast path.
    pub(super) fn learn_hot(&mut self, key: Id, obj: &ObjectRef, st: &Rc<Stored>) {
        if !self.cold || !hot_eligible(st, obj.head()) || self.cold_name.len() > HOT_NAME_BYTES_MAX
        {
            return;
        }
        self.cold = false;
        let (host, target) = self.cold_name.split_at(self.cold_host_len);
        let entry = HotEntry {
            key,
            raw_head: obj.head().into(),
            head_seq: obj.entry_seq(),
            stored: st.clone(),
            head: HitHead::default(),
            resident_secs: 0,
        };
        self.pc.hot.borrow_mut().insert(host, target, entry);
    }
}

#[cfg(test)]
mod tests {
    use coral::proxy::hot::{self, HitHead, HitInputs, HotTable};
    use coral::proxy::http::{self, Limits};

    use crate::cache::tests::allocations;

    /// The pure part of a fast hit (recognise the request, find its entry,
    /// take the built head) allocates nothing once the head is built.
    #[test]
    fn a_fast_hit_allocates_nothing() {
        let limits = Limits::default();
        let stored_bytes = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"a\"\r\n\r\n";
        let (stored, _) = http::parse_response_head(stored_bytes, true, &limits)
            .unwrap()
            .unwrap();
        let mut table: HotTable<(u64, HitHead)> =
            HotTable::new(64, coral::dsht::id::keyed_hasher(b"test", "hot objects"));
        let req =
            b"GET /a.bin HTTP/1.1\r\nHost: origin.test.8080.coral.test\r\nUser-Agent: wrk\r\n\r\n";
        let plain = hot::parse_plain(req, &limits).unwrap();
        table.insert(plain.host, plain.target, (7, HitHead::default()));
        let inputs = HitInputs {
            now_secs: 1_000,
            stored_secs: 990,
            fresh_until_secs: 5_000,
            initial_age_secs: 0,
            body_len: 4096,
            keep_alive: true,
        };
        let mut out = Vec::with_capacity(1024);
        let built = {
            let (_, h) = table.get_mut(plain.host, plain.target).unwrap();
            h.head(&stored, "127.0.0.1:8090", inputs).0.to_vec()
        };
        let text = String::from_utf8(built.clone()).unwrap();
        assert!(text.contains("Age: 10\r\n"), "{text}");
        assert!(
            text.contains("Cache-Status: coral; hit; ttl=4000\r\n"),
            "{text}"
        );
        assert!(text.contains("Content-Length: 4096\r\n"), "{text}");
        let before = allocations();
        for _ in 0..1_000 {
            let plain = hot::parse_plain(req, &limits).unwrap();
            let (key, h) = table.get_mut(plain.host, plain.target).unwrap();
            assert_eq!(*key, 7);
            let (bytes, _) = h.head(&stored, "127.0.0.1:8090", inputs);
            out.clear();
            out.extend_from_slice(bytes);
        }
        assert_eq!(allocations() - before, 0, "the fast path allocated");
        assert_eq!(out, built);
        // The next second's head differs only in Age and the ttl.
        let (_, h) = table.get_mut(plain.host, plain.target).unwrap();
        let next = HitInputs {
            now_secs: 1_001,
            ..inputs
        };
        let text = String::from_utf8(h.head(&stored, "127.0.0.1:8090", next).0.to_vec()).unwrap();
        assert!(
            text.contains("Age: 11\r\n") && text.contains("ttl=3999\r\n"),
            "{text}"
        );
    }
}
