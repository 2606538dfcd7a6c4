//! Verified peer bytes on the runtime's side (issue 22 items 4–5; the
//! records and their checks are `coral::verify`'s).
//!
//! - **Filling from the origin**, this node is the object's origin-fetcher:
//!   it asks for `Want-Repr-Digest`, checks the origin's body against the
//!   origin's `Repr-Digest` when one comes, and signs the stored head, each
//!   chunk as it is stored and the end ([`FillRecords`]). The records are
//!   kept beside the object (`cache::chunks`), each chunk's before its
//!   bytes are appended.
//! - **Filling from a peer**, the peer's signed head is checked (signature,
//!   admission, that it describes the response, the signer not caught
//!   forging) before anything is stored; each chunk comes out of the
//!   response only after its signature held (`upstream::Response` with a
//!   signed body), and the origin-fetcher's records are kept unchanged.
//!   The copy is fresh no longer than the signed expiry. A peer whose
//!   bytes fail is not asked again; a signer whose signed `Repr-Digest` or
//!   length its own signed chunks contradict is distrusted.
//! - **Serving a peer** (`server/peer.rs`) sends the records with the
//!   bytes. Clients never see them: their hits are unchanged.

use std::cell::Cell;
use std::net::SocketAddr;

use coral::proxy::http::{Headers, ResponseHead};
use coral::verify::{self, BodyDigest, HeadFacts, SignedHead, Signer};
use coral::Id;

use super::stored::Stored;
use super::{unix_now, upstream, ProxyCore};
use crate::cache::{CacheError, ObjectRef, ObjectState, ObjectWriter};

/// Bytes per signed chunk.
const CHUNK_BYTES: u32 = coral::limits::VERIFY.chunk_bytes;

/// What this core's verification did (summed over cores in `/metrics`).
#[derive(Default)]
pub struct VerifyCounters {
    /// Objects this node filled from their origin and signed.
    pub signed_fills: Cell<u64>,
    /// Peer copies received whole with every signature holding.
    pub verified_fills: Cell<u64>,
    /// Body bytes received from peers, each verified before use.
    pub verified_bytes: Cell<u64>,
    /// Peer answers refused as forged (a signature, the signed length or
    /// the signed `Repr-Digest` failed).
    pub forged: Cell<u64>,
    /// Peer answers with no signed head (nothing stored from them).
    pub unsigned: Cell<u64>,
    /// Peers not asked, or answers refused, because the peer or the
    /// signer was caught forging before.
    pub distrusted: Cell<u64>,
    /// Origin answers that came with a `Repr-Digest` this node checked.
    pub repr_digest_checked: Cell<u64>,
    /// Origin bodies that contradicted their own `Repr-Digest` (dropped).
    pub repr_digest_failed: Cell<u64>,
    /// Peer answers served with their signed records.
    pub served_signed: Cell<u64>,
    /// Peer requests for a copy without records (answered 504).
    pub served_unsigned: Cell<u64>,
    /// Complete copies whose records were made again from the stored
    /// bytes (after a restart, or a revalidation that changed the head).
    pub resigned: Cell<u64>,
    /// Audits (item 5 b): verified peer copies fetched again from the
    /// origin and compared (each one origin request).
    pub audits: Cell<u64>,
    /// Body bytes those audits read from origins.
    pub audit_bytes: Cell<u64>,
    /// Audits where the origin's body under the same validator differed
    /// from the signed one: the signer is distrusted, the copy removed.
    pub audit_failed: Cell<u64>,
    /// Audits that could not compare (another validator or status, no
    /// validator, a rewritten body, the origin failed).
    pub audit_inconclusive: Cell<u64>,
    /// Evidence (item 5 c, `evidence.rs`): records this node published as
    /// accuser (each one DSHT put).
    pub evidence_stored: Cell<u64>,
    /// Records this node served to peers.
    pub evidence_served: Cell<u64>,
    /// Lookups of signers' evidence keys (each one DSHT get).
    pub evidence_lookups: Cell<u64>,
    /// Accusers' records fetched (each one HTTP request).
    pub evidence_fetched: Cell<u64>,
    /// Origin requests spent checking evidence.
    pub evidence_origin_checks: Cell<u64>,
    /// Body bytes those checks read from origins.
    pub evidence_origin_bytes: Cell<u64>,
    /// Evidence checked and found true.
    pub evidence_true: Cell<u64>,
    /// Evidence checked and found false (the accuser is ignored).
    pub evidence_false: Cell<u64>,
    /// Evidence that could not be checked (the accuser or origin failed,
    /// the origin changed the object).
    pub evidence_inconclusive: Cell<u64>,
    /// Signers distrusted because of evidence another node published.
    pub evidence_distrusted: Cell<u64>,
    /// Peer copies refused because evidence proved their signer a forger.
    pub evidence_refused: Cell<u64>,
    /// Peer copies not used because evidence against their signer was
    /// still being checked.
    pub evidence_pending: Cell<u64>,
    /// The last `purge_epoch` of the shared evidence state this core acted
    /// on (`evidence.rs`).
    pub evidence_epoch: Cell<u64>,
    /// The audit draw's state (xorshift, seeded from the OS).
    rng: Cell<u64>,
}

impl VerifyCounters {
    /// As the `/metrics` and `coral stats` JSON carry them.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "signed_fills": self.signed_fills.get(),
            "verified_fills": self.verified_fills.get(),
            "verified_bytes": self.verified_bytes.get(),
            "forged": self.forged.get(),
            "unsigned": self.unsigned.get(),
            "distrusted": self.distrusted.get(),
            "repr_digest_checked": self.repr_digest_checked.get(),
            "repr_digest_failed": self.repr_digest_failed.get(),
            "served_signed": self.served_signed.get(),
            "served_unsigned": self.served_unsigned.get(),
            "resigned": self.resigned.get(),
            "audits": self.audits.get(),
            "audit_bytes": self.audit_bytes.get(),
            "audit_failed": self.audit_failed.get(),
            "audit_inconclusive": self.audit_inconclusive.get(),
            "evidence_stored": self.evidence_stored.get(),
            "evidence_served": self.evidence_served.get(),
            "evidence_lookups": self.evidence_lookups.get(),
            "evidence_fetched": self.evidence_fetched.get(),
            "evidence_origin_checks": self.evidence_origin_checks.get(),
            "evidence_origin_bytes": self.evidence_origin_bytes.get(),
            "evidence_true": self.evidence_true.get(),
            "evidence_false": self.evidence_false.get(),
            "evidence_inconclusive": self.evidence_inconclusive.get(),
            "evidence_distrusted": self.evidence_distrusted.get(),
            "evidence_refused": self.evidence_refused.get(),
            "evidence_pending": self.evidence_pending.get(),
        })
    }

    /// True with probability `per_million` / 1,000,000.
    fn draw(&self, per_million: u32) -> bool {
        if per_million == 0 {
            return false;
        }
        let mut x = self.rng.get();
        if x == 0 {
            x = crate::runtime::seed_from_os() | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x % 1_000_000 < u64::from(per_million)
    }
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// The test-only forgeries (`shards/tests/verify.rs`): compiled in only
/// with the `forge-peer-bytes` or `forge-origin` feature, and active only
/// when `CORAL_FORGE` names them.
#[cfg(any(feature = "forge-peer-bytes", feature = "forge-origin"))]
pub(super) mod forge {
    /// `CORAL_FORGE`'s value, read once.
    fn mode() -> &'static str {
        static MODE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        MODE.get_or_init(|| std::env::var("CORAL_FORGE").unwrap_or_default())
    }

    /// Serve peers chunk `n` (`CORAL_FORGE=peer-bytes:<n>`) with one byte
    /// changed, its valid signature beside it.
    #[cfg(feature = "forge-peer-bytes")]
    pub fn peer_chunk() -> Option<usize> {
        mode().strip_prefix("peer-bytes:")?.parse().ok()
    }

    /// Claim a day's lifetime to peers (`CORAL_FORGE=peer-lifetime`):
    /// `Cache-Control: max-age=86400` beside the origin's signed expiry.
    #[cfg(feature = "forge-peer-bytes")]
    pub fn peer_lifetime() -> bool {
        mode() == "peer-lifetime"
    }

    /// Store and sign other bytes than the origin sent (`CORAL_FORGE=origin`):
    /// every `o` becomes `0`, the origin's `Repr-Digest` kept in the head.
    #[cfg(feature = "forge-origin")]
    pub fn origin() -> bool {
        mode() == "origin"
    }

    /// Accuse falsely (`CORAL_FORGE=accuse`): an audit that passes
    /// publishes evidence against the honest signer all the same.
    #[cfg(feature = "forge-origin")]
    pub fn accuse() -> bool {
        mode() == "accuse"
    }
}

/// How the bytes of one fill are recorded.
enum Mode {
    /// From the origin: this node signs.
    Sign(Box<Signer>),
    /// From a peer: its verified records (under this signed head) are
    /// kept as they came.
    Relay(Box<SignedHead>),
}

/// The records of one fill, written beside the object as it is stored.
pub(super) struct FillRecords {
    key: Id,
    generation: u64,
    mode: Mode,
    /// The origin's `Repr-Digest` and the digest of what it sent so far.
    repr_check: Option<([u8; verify::DIGEST_BYTES], BodyDigest)>,
    /// Bytes received from a peer, verified.
    verified: u64,
    /// The fill resumed from a source that does not continue the signed
    /// stream (issue 24 item 1): the records are dropped and the copy
    /// serves clients only.
    dropped: bool,
}

impl FillRecords {
    /// Checks the origin's bytes (before any rewriting) against its
    /// `Repr-Digest`, if it sent one.
    pub fn origin_bytes(&mut self, raw: &[u8]) {
        if let Some((_, d)) = &mut self.repr_check {
            d.update(raw);
        }
    }

    /// Appends `data` to `writer`, each chunk's signature kept before the
    /// bytes that complete the chunk (from a peer: `data` is one verified
    /// chunk, its signature in `resp`).
    pub fn append(
        &mut self,
        pc: &ProxyCore,
        writer: &mut ObjectWriter,
        resp: &mut upstream::Response,
        data: &[u8],
    ) -> Result<(), CacheError> {
        let records = pc.cache.records();
        match &mut self.mode {
            Mode::Relay(_) => {
                if let Some(sig) = resp.take_chunk_sig() {
                    records.push(&self.key, self.generation, sig);
                }
                self.verified += data.len() as u64;
                writer.append(data)
            }
            Mode::Sign(signer) => {
                #[cfg(feature = "forge-origin")]
                let forged: Vec<u8>;
                #[cfg(feature = "forge-origin")]
                let data = if forge::origin() {
                    forged = data
                        .iter()
                        .map(|&b| if b == b'o' { b'0' } else { b })
                        .collect();
                    &forged[..]
                } else {
                    data
                };
                let mut rest = data;
                while !rest.is_empty() {
                    let n = signer.room().min(rest.len());
                    if let Some(sig) = signer.update(&rest[..n]) {
                        records.push(&self.key, self.generation, sig);
                    }
                    writer.append(&rest[..n])?;
                    rest = &rest[n..];
                }
                Ok(())
            }
        }
    }

    /// The body ended: checks the origin's `Repr-Digest`, and keeps the
    /// end (signed here, or the peer's). `Err` says why the copy must not
    /// be kept.
    pub fn finish(self, pc: &ProxyCore, resp: &upstream::Response) -> Result<(), &'static str> {
        let records = pc.cache.records();
        if self.dropped {
            return Ok(());
        }
        if let Some((want, got)) = self.repr_check {
            bump(&pc.verify.repr_digest_checked);
            if got.finish() != want {
                bump(&pc.verify.repr_digest_failed);
                records.abort(&self.key, self.generation);
                return Err("the origin's body contradicts its Repr-Digest");
            }
        }
        match self.mode {
            Mode::Sign(signer) => {
                let (last, end) = signer.finish();
                if let Some(sig) = last {
                    records.push(&self.key, self.generation, sig);
                }
                records.end(&self.key, self.generation, end);
                bump(&pc.verify.signed_fills);
            }
            Mode::Relay(_) => match resp.signed_end() {
                Some(end) => {
                    records.end(&self.key, self.generation, end);
                    bump(&pc.verify.verified_fills);
                    let b = &pc.verify.verified_bytes;
                    b.set(b.get() + self.verified);
                }
                None => {
                    records.abort(&self.key, self.generation);
                    return Err("a peer's body ended without its signed end");
                }
            },
        }
        Ok(())
    }

    /// The source at `addr` was lost mid-body with `e`: a forgery is
    /// caught (`ProxyCore::caught`); the fill itself goes on (issue 24).
    /// `claimed`: the signer's signed end, if it was read.
    pub fn lost(
        &self,
        pc: &ProxyCore,
        addr: SocketAddr,
        e: &upstream::UpstreamError,
        claimed: Option<verify::EndRecord>,
    ) {
        if let (Mode::Relay(head), upstream::UpstreamError::Forged(why)) = (&self.mode, e) {
            pc.caught(&self.key, addr, head, why, claimed);
        }
    }

    /// The fill resumed (issue 24 item 1) from the origin (`origin`) or a
    /// peer whose verified signed head is `signed`; `restart`: the body is
    /// asked for from its first byte again (a rewritten body). The records
    /// go on only where the bytes stored next continue the same signed
    /// stream: the origin's own bytes after this node's signed ones, or a
    /// peer relaying the same signed head (`true`). Otherwise they are
    /// dropped (`false`): the caller signs the copy afresh
    /// ([`ProxyCore::sign_from_prefix`]), and peers reading the old records
    /// ask again.
    pub fn resumed(
        &mut self,
        pc: &ProxyCore,
        signed: Option<&SignedHead>,
        origin: bool,
        restart: bool,
    ) -> bool {
        if restart {
            self.repr_check = None;
        }
        let goes_on = match &self.mode {
            Mode::Sign(_) => origin && !restart,
            Mode::Relay(head) => signed == Some(&**head) && !restart,
        };
        if !goes_on && !self.dropped {
            self.dropped = true;
            self.repr_check = None;
            self.abort(pc);
        }
        goes_on
    }

    /// The copy was dropped: so are its records.
    pub fn abort(&self, pc: &ProxyCore) {
        pc.cache.records().abort(&self.key, self.generation);
    }
}

impl ProxyCore {
    /// Whether the peer at `addr` was caught forging (it is not asked).
    pub(super) fn peer_distrusted(&self, addr: &SocketAddr) -> bool {
        let d = self.cache.records().peer_distrusted(addr);
        if d {
            bump(&self.verify.distrusted);
        }
        d
    }

    /// Checks the answer of the peer at `addr` for `key` before anything is
    /// stored: its signed head (signature, admission, the signer not caught
    /// forging, that it describes this response as the object `object` —
    /// the URL's key, or the variant's for a response with `Vary` — and is
    /// not past its expiry), then its first chunk. `None`: the answer is not used (a
    /// forgery also distrusts the peer).
    pub(super) async fn check_peer_answer(
        &self,
        key: &Id,
        object: &Id,
        addr: SocketAddr,
        resp: &mut upstream::Response,
    ) -> Option<SignedHead> {
        let Some(field) = resp.head.headers.get(verify::SIGNED_HEAD_FIELD) else {
            // A peer with no records for its copy (after its restart, say):
            // no forgery, but nothing verifiable.
            bump(&self.verify.unsigned);
            tracing::info!(%key, %addr, status = resp.head.status, "peer answer not signed: not used");
            return None;
        };
        let head = match SignedHead::from_hex(field) {
            Some(h) => h,
            None => {
                self.peer_forged(key, addr, "malformed signed head");
                return None;
            }
        };
        if self.cache.records().signer_distrusted(&head.signer()) {
            bump(&self.verify.distrusted);
            tracing::info!(%key, %addr, "peer copy signed by a distrusted signer: not used");
            return None;
        }
        if !head.verify(&self.shard.trust.membership) {
            self.peer_forged(key, addr, "signed head does not verify");
            return None;
        }
        if let Err(why) = head.describes(object, resp.head.status, &resp.head.headers) {
            self.peer_forged(key, addr, why);
            return None;
        }
        // Item 5 (c): a signer another node proved a forger is not used.
        if !self.evidence_clears(&head.signer()).await {
            return None;
        }
        if head.expires_secs() <= unix_now() {
            tracing::info!(%key, %addr, "peer copy past its signed expiry: not used");
            return None;
        }
        if let Err(e) = resp.expect_signed(&head) {
            self.peer_forged(key, addr, &e.to_string());
            return None;
        }
        match resp.prime().await {
            Ok(()) => Some(head),
            Err(upstream::UpstreamError::Forged(why)) => {
                self.caught(key, addr, &head, why, resp.claimed_end());
                None
            }
            Err(e) => {
                tracing::info!(%key, %addr, error = %e, "peer answer failed");
                None
            }
        }
    }

    /// A peer's signed body failed mid-way (`UpstreamError::Forged`):
    /// counted, and the peer (or the signer, for what only it could have
    /// signed) distrusted. A signer's lie whose signed end (`claimed`) was
    /// read is evidence others can check (item 5 c): published.
    pub(super) fn caught(
        &self,
        key: &Id,
        addr: SocketAddr,
        head: &SignedHead,
        why: &str,
        claimed: Option<verify::EndRecord>,
    ) {
        // A failing chunk or end signature may be a relay's doing; a
        // signed length or Repr-Digest that the signer's own valid chunk
        // signatures contradict is the signer's.
        let signer_lied = why.contains("signed length") || why.contains("Repr-Digest");
        if signer_lied && self.cache.records().distrust_signer(head.signer()) {
            tracing::warn!(
                %key,
                %addr,
                signer = %head.signer().to_hex(),
                why,
                "origin-fetcher caught forging: its copies are no longer used"
            );
            let job = self.job_of(key);
            let url = job.as_ref().map(|j| {
                coral::proxy::names::canonical_url(&j.origin, j.request.path().unwrap_or("/"))
            });
            if let (Some(end), Some(Ok(url)), Some(pc)) = (claimed, url, super::this_core()) {
                pc.publish_evidence(verify::Claim { head: *head, end }, url);
            }
        }
        self.peer_forged(key, addr, why);
    }

    fn peer_forged(&self, key: &Id, addr: SocketAddr, why: &str) {
        bump(&self.verify.forged);
        if self.cache.records().distrust_peer(addr) {
            tracing::warn!(%key, %addr, why, "peer served forged bytes: dropped");
        }
    }

    /// The records of a fill from the origin, stored under `key`: this
    /// node signs the object `object` (`coral::verify::HeadFacts::key`), its
    /// stored head `head` (its length `length` if known; fresh until
    /// `expires_secs`), and checks the origin's `Repr-Digest` (in
    /// `origin`'s head) if it sent one. `as_sent`: the body is stored
    /// exactly as the origin sent it (not rewritten), so the `Repr-Digest`
    /// is signed for peers to check too.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sign_fill(
        &self,
        key: Id,
        object: Id,
        head: &ResponseHead,
        origin: &ResponseHead,
        length: Option<u64>,
        expires_secs: u64,
        as_sent: bool,
    ) -> FillRecords {
        let repr = origin
            .headers
            .get("repr-digest")
            .and_then(verify::repr_digest_sha256);
        let facts = HeadFacts {
            key: object,
            status: head.status,
            validator: verify::validator_digest(&head.headers),
            fields: verify::fields_digest(&head.headers),
            length,
            expires_secs,
            repr_digest: repr.filter(|_| as_sent),
            chunk_bytes: CHUNK_BYTES,
        };
        let signer = Signer::new(&self.shard.trust.identity, &facts);
        let generation = self.cache.records().begin(key, *signer.head());
        FillRecords {
            key,
            generation,
            mode: Mode::Sign(Box::new(signer)),
            repr_check: repr.map(|d| (d, BodyDigest::default())),
            verified: 0,
            dropped: false,
        }
    }

    /// A fill of `key` whose records could not go on after a resume (issue
    /// 24): `records`, fresh from [`ProxyCore::sign_fill`], are given the
    /// copy's first `len` bytes, read back from the cache, so that this node
    /// signs the whole copy from here on — it vouches for bytes it stored,
    /// verified when they came from a peer. The origin's `Repr-Digest` is
    /// not checked for such a copy (its first bytes were hashed before).
    pub(super) async fn sign_from_prefix(
        &self,
        mut records: FillRecords,
        key: Id,
        len: u64,
    ) -> FillRecords {
        records.repr_check = None;
        let store = self.cache.records();
        let obj = self
            .cache
            .lookup(&key)
            .filter(|o| matches!(o.state(), ObjectState::Writing { .. }));
        let Mode::Sign(signer) = &mut records.mode else {
            return records;
        };
        let Some(obj) = obj else {
            store.abort(&key, records.generation);
            records.dropped = true;
            return records;
        };
        if !sign_stored(signer, &obj, &key, records.generation, store, len).await {
            store.abort(&key, records.generation);
            records.dropped = true;
            return records;
        }
        bump(&self.verify.resigned);
        records
    }

    /// Records for the complete copy `obj` of `key` (the object `object`)
    /// made again from its stored bytes and head, signed by this node, in
    /// place of generation `stale` (if any): a copy whose records were lost
    /// (a restart; records are kept in memory) or no longer describe it (a
    /// revalidation with the origin changed its head or made it fresh
    /// beyond the signed expiry). This
    /// node vouches for bytes it stored — verified when they came from a
    /// peer, checked against the origin's `Repr-Digest` when they came with
    /// one. Hashes the whole body once, yielding between chunks.
    pub(super) async fn resign(
        &self,
        key: Id,
        object: Id,
        obj: &ObjectRef,
        st: &Stored,
        stale: Option<u64>,
    ) -> Option<(SignedHead, u64)> {
        let ObjectState::Complete { len } = obj.state() else {
            return None;
        };
        let as_sent = !coral::proxy::rewrite::body_is_rewritable(&st.head);
        let repr = st
            .head
            .headers
            .get("repr-digest")
            .and_then(verify::repr_digest_sha256)
            .filter(|_| as_sent);
        let facts = HeadFacts {
            key: object,
            status: st.head.status,
            validator: verify::validator_digest(&st.head.headers),
            fields: verify::fields_digest(&st.head.headers),
            length: Some(len),
            expires_secs: obj.meta().fresh_until_secs,
            repr_digest: repr,
            chunk_bytes: CHUNK_BYTES,
        };
        let mut signer = Signer::new(&self.shard.trust.identity, &facts);
        let head = *signer.head();
        let records = self.cache.records();
        let (generation, mine) = records.begin_replacing(key, head, stale);
        if !mine {
            // Another request (on another core) makes them: its records.
            return records.head(&key).filter(|(_, g)| *g == generation);
        }
        if !sign_stored(&mut signer, obj, &key, generation, records, len).await {
            records.abort(&key, generation);
            return None;
        }
        let (last, end) = signer.finish();
        if let Some(sig) = last {
            records.push(&key, generation, sig);
        }
        records.end(&key, generation, end);
        bump(&self.verify.resigned);
        Some((head, generation))
    }

    /// The records of a fill from a peer: the origin-fetcher's, as they
    /// come.
    pub(super) fn relay_fill(&self, key: Id, head: SignedHead) -> FillRecords {
        let generation = self.cache.records().begin(key, head);
        FillRecords {
            key,
            generation,
            mode: Mode::Relay(Box::new(head)),
            repr_check: None,
            verified: 0,
            dropped: false,
        }
    }
}

/// The request fields an origin fill adds: RFC 9530 §4, asking for a
/// SHA-256 `Repr-Digest`.
pub(super) fn want_repr_digest(extra: &mut Headers) {
    let (name, value) = verify::WANT_REPR_DIGEST;
    extra.insert(name, value.as_bytes());
}

/// Removes the peer's signed head from a head about to be stored (the
/// records are kept beside the copy, and served to peers only).
pub(super) fn strip_records(head: &mut ResponseHead) {
    head.headers.remove(verify::SIGNED_HEAD_FIELD);
}

/// The object a response to `request` for the URL `url_key` is: the URL's
/// key, or its `Vary` variant's (what a signed head names).
pub(super) fn object_key(
    url_key: &Id,
    head: &ResponseHead,
    request: &coral::proxy::http::RequestHead,
) -> Id {
    coral::proxy::vary::variant_key(url_key, head, request).unwrap_or(*url_key)
}

/// What an audit found.
enum AuditVerdict {
    /// The origin's body under the same validator is the signed one.
    Passed,
    /// It is not: the signer signed other bytes than the origin serves.
    Failed,
    /// No comparison was possible.
    Inconclusive(&'static str),
}

impl ProxyCore {
    /// Item 5 (b): with probability `[proxy] audit_per_million` / 10⁶, the
    /// verified peer copy of `key` (signed under `head`, ending `end`) is
    /// fetched again from the origin by `job`'s request and compared under
    /// the same validator: a signer whose signed body the origin
    /// contradicts is distrusted and the copy removed. In the background;
    /// the clients were answered from the copy already.
    pub(super) fn maybe_audit(
        self: &std::rc::Rc<Self>,
        key: Id,
        job: &super::Job,
        vary: Headers,
        head: SignedHead,
        end: Option<verify::EndRecord>,
    ) {
        let Some(end) = end else { return };
        if !self.verify.draw(self.cfg.audit_per_million) {
            return;
        }
        let pc = self.clone();
        let job = job.clone();
        glommio::spawn_local(async move {
            bump(&pc.verify.audits);
            let verdict = pc.audit(&job, &vary, &head, &end).await;
            // Item 5 (c): what the audit proves, every node can check.
            let url =
                coral::proxy::names::canonical_url(&job.origin, job.request.path().unwrap_or("/"));
            match verdict {
                AuditVerdict::Passed => {
                    tracing::debug!(%key, "audit: the origin agrees with the signed copy");
                    #[cfg(feature = "forge-origin")]
                    if let (true, Ok(url)) = (forge::accuse(), url) {
                        pc.publish_evidence(verify::Claim { head, end }, url);
                    }
                }
                AuditVerdict::Failed => {
                    bump(&pc.verify.audit_failed);
                    pc.cache.remove(&key);
                    pc.cache.records().distrust_signer(head.signer());
                    tracing::warn!(
                        %key,
                        signer = %head.signer().to_hex(),
                        "audit: the origin contradicts the signed copy; its signer is distrusted"
                    );
                    match url {
                        Ok(url) => pc.publish_evidence(verify::Claim { head, end }, url),
                        Err(e) => tracing::info!(%key, error = %e, "no evidence: no URL"),
                    }
                }
                AuditVerdict::Inconclusive(why) => {
                    bump(&pc.verify.audit_inconclusive);
                    tracing::debug!(%key, why, "audit inconclusive");
                }
            }
        })
        .detach();
    }

    async fn audit(
        &self,
        job: &super::Job,
        vary: &Headers,
        head: &SignedHead,
        end: &verify::EndRecord,
    ) -> AuditVerdict {
        let Ok(addr) = self
            .resolver
            .resolve_for(job.client, &job.origin.host, job.origin.port)
            .await
        else {
            return AuditVerdict::Inconclusive("origin not resolved");
        };
        let sent = coral::proxy::keyed::upstream_view(
            &job.request,
            coral::proxy::keyed::Upstream::Fill { vary: Some(vary) },
            &self.cfg.forward_request_fields,
        );
        let mut req = Vec::with_capacity(1024);
        coral::proxy::policy::upstream_request(
            &sent,
            &job.origin,
            false,
            &Headers::new(),
            &mut req,
        );
        let Ok(mut resp) =
            upstream::send(&self.pool, addr, &req, false, self.timeouts, &self.limits).await
        else {
            return AuditVerdict::Inconclusive("origin failed");
        };
        let empty = verify::validator_digest(&Headers::new());
        if resp.head.status != head.status()
            || head.validator() == empty
            || verify::validator_digest(&resp.head.headers) != head.validator()
        {
            return AuditVerdict::Inconclusive("another status or validator");
        }
        if coral::proxy::rewrite::body_is_rewritable(&resp.head) {
            // The signer stored it rewritten with its own port.
            return AuditVerdict::Inconclusive("a rewritten body");
        }
        let chunk_bytes = u64::from(head.chunk_bytes());
        let (mut list, mut chunk) = (BodyDigest::default(), BodyDigest::default());
        let (mut in_chunk, mut total, mut chunks) = (0u64, 0u64, 0u64);
        let mut buf = Vec::with_capacity(64 << 10);
        loop {
            buf.clear();
            let more = match resp.next(&mut buf).await {
                Ok(m) => m,
                Err(_) => return AuditVerdict::Inconclusive("origin transfer failed"),
            };
            total += buf.len() as u64;
            if total > self.cfg.object_bytes_max {
                return AuditVerdict::Inconclusive("larger than object_bytes_max");
            }
            let mut rest = &buf[..];
            while !rest.is_empty() {
                let n = ((chunk_bytes - in_chunk) as usize).min(rest.len());
                chunk.update(&rest[..n]);
                in_chunk += n as u64;
                rest = &rest[n..];
                if in_chunk == chunk_bytes {
                    list.update(&std::mem::take(&mut chunk).finish());
                    chunks += 1;
                    in_chunk = 0;
                }
            }
            if !more {
                break;
            }
        }
        if in_chunk > 0 {
            list.update(&chunk.finish());
            chunks += 1;
        }
        let b = &self.verify.audit_bytes;
        b.set(b.get() + total);
        resp.release(&self.pool);
        if (list.finish(), total, chunks) == (end.object_digest, end.total, end.chunks) {
            AuditVerdict::Passed
        } else {
            AuditVerdict::Failed
        }
    }
}

/// Feeds the first `len` stored bytes of `obj` (the copy of `key`) to
/// `signer`, chunk by chunk, each finished chunk's signature kept in
/// generation `generation` of the records; yields between chunks. `false`:
/// the copy holds fewer bytes.
async fn sign_stored(
    signer: &mut Signer,
    obj: &ObjectRef,
    key: &Id,
    generation: u64,
    records: &crate::cache::chunks::ChunkRecords,
    len: u64,
) -> bool {
    let mut pos = 0;
    while pos < len {
        let end = (pos + u64::from(CHUNK_BYTES)).min(len);
        obj.ensure_resident(pos, end).await;
        let mut rest = obj.body(pos, end);
        if rest.len() as u64 != end - pos {
            return false;
        }
        while !rest.is_empty() {
            let n = signer.room().min(rest.len());
            if let Some(sig) = signer.update(&rest[..n]) {
                records.push(key, generation, sig);
            }
            rest = &rest[n..];
        }
        pos = end;
        glommio::yield_if_needed().await;
    }
    true
}
