//! A peer's request (`Coral-No-Forward: 1`) answered with verified peer
//! bytes (issue 22 item 4, `coral::verify`): the copy's signed head as a
//! response field, the body chunked, one HTTP chunk per signed chunk with
//! its signature as a chunk extension, the end signature on the last chunk.
//! The records are the origin-fetcher's (kept beside the copy,
//! `cache::chunks`): a relay re-emits them unchanged. A copy without
//! records, or whose records no longer describe it, is not served to peers
//! (504): the peer would refuse it. Clients never take this path.

use coral::proxy::http::{Framing, Method, RequestHead};
use coral::proxy::policy::{self, CacheStatus, ClientHeadInfo, Freshness, RangeAnswer};
use coral::verify;

use super::io::send_all;
use super::{head_status, Conn, Next};
use crate::cache::{ObjectRef, ObjectState};
use crate::proxy::stored::Stored;
use crate::proxy::unix_now;

/// Longest a peer's answer waits for another request to make a complete
/// copy's records again, in milliseconds (a 50 MB copy hashes and signs in
/// well under a second).
const RESIGN_WAIT_MS: u32 = 10_000;

impl Conn<'_> {
    /// Sends the copy `obj` of `key` to a peer with its signed records.
    /// `url_key`: the URL's key (`key` may be a `Vary` variant's).
    pub(super) async fn serve_peer(
        &mut self,
        req: &RequestHead,
        url_key: coral::Id,
        key: coral::Id,
        obj: &ObjectRef,
        st: &Stored,
        mut cache_status: CacheStatus,
    ) -> Next {
        let pc = self.pc;
        let records = pc.cache.records();
        let kept = records.head(&key);
        let mut found = kept.filter(|(h, _)| {
            h.matches_response(st.head.status, &st.head.headers).is_ok()
                && match obj.state() {
                    // A copy revalidated with the origin since it was
                    // signed is fresh beyond the signed expiry: signed
                    // again.
                    ObjectState::Complete { len } => {
                        h.length().is_none_or(|l| l == len)
                            && h.expires_secs() >= obj.meta().fresh_until_secs
                    }
                    ObjectState::Writing { .. } => true,
                    ObjectState::Failed => false,
                }
        });
        if found.is_none() {
            // A complete copy whose records were lost or no longer fit:
            // made again from its bytes.
            let request = RequestHead {
                method: Method::Get,
                target: "/".into(),
                minor_version: 1,
                headers: st.vary_req.clone(),
                framing: Framing::Empty,
                keep_alive: false,
            };
            let object = crate::proxy::verified::object_key(&url_key, &st.head, &request);
            found = pc.resign(key, object, obj, st, kept.map(|(_, g)| g)).await;
        }
        let Some((signed, generation)) = found else {
            pc.verify
                .served_unsigned
                .set(pc.verify.served_unsigned.get() + 1);
            self.error(504, "no verifiable copy here", req.keep_alive, None)
                .await;
            return if req.keep_alive {
                Next::KeepAlive
            } else {
                Next::Close
            };
        };
        pc.verify
            .served_signed
            .set(pc.verify.served_signed.get() + 1);
        let now = unix_now();
        let meta = obj.meta();
        cache_status.ttl = Some(meta.fresh_until_secs as i64 - now as i64);
        let info = ClientHeadInfo {
            node_name: &pc.node_name,
            age_secs: policy::age_secs(
                &Freshness {
                    date_secs: meta.stored_secs,
                    fresh_until_secs: meta.fresh_until_secs,
                    response_secs: meta.stored_secs,
                    initial_age_secs: st.initial_age_secs,
                    must_revalidate: st.must_revalidate,
                },
                now,
            ),
            cache_status,
            range: RangeAnswer::Full,
            // Chunked: the signed chunks are its chunks.
            body_len: None,
            keep_alive: req.keep_alive,
            not_modified: false,
            client_minor_version: 1,
        };
        let mut out = Vec::with_capacity(2048);
        #[cfg(feature = "forge-peer-bytes")]
        let forged_head;
        #[cfg(feature = "forge-peer-bytes")]
        let head = if crate::proxy::verified::forge::peer_lifetime() {
            // A day's lifetime claimed beside the origin's signed one.
            let mut h = st.head.clone();
            h.headers.set("cache-control", b"max-age=86400");
            h.headers.remove("expires");
            forged_head = h;
            &forged_head
        } else {
            &st.head
        };
        #[cfg(not(feature = "forge-peer-bytes"))]
        let head = &st.head;
        let framing = policy::client_head(head, &info, &mut out);
        // The signed head, before the head's empty line.
        if framing != Framing::Chunked || !out.ends_with(b"\r\n\r\n") {
            self.error(504, "no verifiable copy here", false, None)
                .await;
            return Next::Close;
        }
        out.truncate(out.len() - 2);
        out.extend_from_slice(verify::SIGNED_HEAD_FIELD.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(signed.to_hex().as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
        self.resp.status = head_status(&out);
        self.resp.cache = super::cache_result(&cache_status);
        let next = if req.keep_alive {
            Next::KeepAlive
        } else {
            Next::Close
        };
        if req.method == Method::Head {
            let p = self.progress();
            return match send_all(&mut self.stream, &[&out], p).await {
                Ok(()) => next,
                Err(_) => Next::Close,
            };
        }
        let chunk = u64::from(signed.chunk_bytes());
        let mut frame = out;
        let mut index = 0usize;
        let mut pos = 0u64;
        let result: Result<(), ()> = async {
            loop {
                let (avail, complete) = match obj.state() {
                    ObjectState::Writing { len } => (len, false),
                    ObjectState::Complete { len } => (len, true),
                    ObjectState::Failed => return Err(()),
                };
                let end = (pos + chunk).min(avail);
                if end < pos + chunk && !(complete && end > pos) {
                    if complete {
                        break; // every chunk sent
                    }
                    if !frame.is_empty() {
                        // The head, before waiting for the first chunk.
                        let p = self.progress();
                        send_all(&mut self.stream, &[&frame], p)
                            .await
                            .map_err(|_| ())?;
                        frame.clear();
                    }
                    obj.wait_beyond(avail).await;
                    continue;
                }
                // Its signature was kept before its bytes were appended;
                // records being made again from a complete copy (another
                // request's `resign`) come a chunk at a time.
                let mut waited = 0;
                let sig = loop {
                    if let Some(sig) = records.sig(&key, generation, index) {
                        break sig;
                    }
                    if !complete || !records.current(&key, generation) || waited >= RESIGN_WAIT_MS {
                        return Err(());
                    }
                    glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                    waited += 1;
                };
                obj.ensure_resident(pos, end).await;
                let data = obj.body(pos, end);
                if data.len() as u64 != end - pos {
                    return Err(());
                }
                #[cfg(feature = "forge-peer-bytes")]
                let forged: Vec<u8>;
                #[cfg(feature = "forge-peer-bytes")]
                let data = if crate::proxy::verified::forge::peer_chunk() == Some(index) {
                    forged = data
                        .iter()
                        .enumerate()
                        .map(|(i, &b)| if i == 0 { b ^ 0x20 } else { b })
                        .collect();
                    &forged[..]
                } else {
                    data
                };
                verify::write_signed_chunk(&mut frame, data, &sig);
                let p = self.progress();
                send_all(&mut self.stream, &[&frame], p)
                    .await
                    .map_err(|_| ())?;
                frame.clear();
                pos = end;
                index += 1;
            }
            let mut waited = 0;
            let end = loop {
                if let Some(end) = records.end_of(&key, generation) {
                    break end;
                }
                if !records.current(&key, generation) || waited >= RESIGN_WAIT_MS {
                    return Err(());
                }
                glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                waited += 1;
            };
            verify::write_signed_end(&mut frame, &end.sig);
            let p = self.progress();
            send_all(&mut self.stream, &[&frame], p)
                .await
                .map_err(|_| ())
        }
        .await;
        self.resp.body_bytes = pos;
        match result {
            Ok(()) => next,
            // Cut short: the peer sees no signed end, and stores nothing.
            Err(()) => Next::Close,
        }
    }
}
