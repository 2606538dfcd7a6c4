//! Evidence against a lying origin-fetcher (issue 22 item 5 c), sans-IO:
//! the record an accuser publishes, its encoding, the checks any node runs
//! on it before believing it, and the policy of a node's verdict cache.
//!
//! A node that catches an origin-fetcher signing other bytes than the
//! origin serves (an audit, item 5 b) holds proof anyone can check for
//! themselves, never believed on the accuser's word:
//!
//! - [`Proof::Contradicted`]: the forger's [`Claim`] (its signed head and
//!   signed end) for one object, and the object's canonical URL. A checker
//!   fetches the URL from the origin itself: under the same status, strong
//!   validator and representation fields, the origin's body must have the
//!   claimed object digest (SHA-256 of the chunk digests at the claim's
//!   chunk size) and length. It does not: proven. It does: the accusation
//!   was false, and the *accuser* is ignored from then on. Anything else
//!   (another validator, a body the signer rewrote, the origin failing) is
//!   inconclusive: no one is blamed.
//! - [`Proof::Conflict`]: two claims of one signer for one object and one
//!   validator naming different bodies ([`Claim::conflicts`]): checked
//!   offline, no origin request.
//!
//! The [`Evidence`] record is signed by its accuser. It is too large for a
//! DSHT value (255 bytes), so the DSHT holds, under [`evidence_key`] of the
//! forger's key, the accuser's ordinary signed proxy pointer
//! (`crate::identity::Pointer`): "evidence about this key is served at my
//! proxy", at [`EVIDENCE_PATH`]`<forger key hex>`.
//!
//! [`Book`] is a node's verdict cache: per signer key, whether it was
//! looked up (and when again), is being checked, or was proven a forger;
//! which accusers lied; which (forger, accuser) pairs were checked (each
//! once); how many origin checks the minute still allows. Its bounds are
//! [`crate::limits::EVIDENCE`]'s.

use std::collections::{HashMap, HashSet, VecDeque};

use sha2::{Digest, Sha256};

use super::{Claim, EndRecord, SignedHead, DIGEST_BYTES, HEAD_RECORD_BYTES};
use crate::dsht::id::Id;
use crate::identity::{self, Certificate, LocalIdentity, Membership, PublicKey};
use crate::identity::{PUBLIC_KEY_BYTES, SIGNATURE_BYTES};
use crate::limits::EVIDENCE;
use crate::proxy::http::{Headers, ResponseHead};

/// The evidence format's version (its first byte).
pub const EVIDENCE_VERSION: u8 = 1;
/// The path (before the forger's key in hex) at which an accuser's proxy
/// serves its evidence to peers (`Coral-No-Forward` requests).
pub const EVIDENCE_PATH: &str = "/.coral/evidence/";
/// Bytes of an [`EndRecord`] as evidence carries it: total (8), chunks
/// (8), object digest (32), signature (64).
pub const END_RECORD_BYTES: usize = 8 + 8 + DIGEST_BYTES + SIGNATURE_BYTES;
/// Bytes of a claim: a signed head and a signed end.
pub const CLAIM_BYTES: usize = HEAD_RECORD_BYTES + END_RECORD_BYTES;

/// Kind byte: one claim the origin contradicts.
const KIND_CONTRADICTED: u8 = 1;
/// Kind byte: two conflicting claims.
const KIND_CONFLICT: u8 = 2;
/// Bytes before the proof: version, kind, accuser key, accuser certificate.
const PREFIX_BYTES: usize = 2 + PUBLIC_KEY_BYTES + SIGNATURE_BYTES;

/// Domain separation: an evidence signature never verifies as anything
/// else a node key signs (`crate::identity`, `crate::verify`).
const EVIDENCE_CONTEXT: &[u8] = b"coral evidence v1\0";
/// Domain separation of the DSHT key evidence is found under.
const KEY_CONTEXT: &[u8] = b"coral evidence";

/// The DSHT key under which evidence against `forger` is announced:
/// SHA-1("coral evidence" ‖ key).
pub fn evidence_key(forger: &PublicKey) -> Id {
    Id::hash(&[KEY_CONTEXT, &forger.0].concat())
}

/// What proves the forgery.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Proof {
    /// The forger's claim for the object at `url` (its canonical URL, whose
    /// key the claim's head names), which the origin contradicts.
    Contradicted {
        /// The forger's claim.
        claim: Box<Claim>,
        /// The object's canonical URL.
        url: String,
    },
    /// Two claims of the forger that conflict ([`Claim::conflicts`]).
    Conflict(Box<(Claim, Claim)>),
}

impl Proof {
    /// The claim (the first, for a conflict).
    pub fn claim(&self) -> &Claim {
        match self {
            Proof::Contradicted { claim, .. } => claim,
            Proof::Conflict(pair) => &pair.0,
        }
    }

    /// The accused signer.
    pub fn forger(&self) -> PublicKey {
        self.claim().head.signer()
    }
}

/// An accuser's signed evidence against a forger.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Evidence {
    /// The proof.
    pub proof: Proof,
    /// The accuser's key.
    pub accuser: PublicKey,
    /// The accuser's certificate.
    pub accuser_cert: Certificate,
    /// The encoded record (what the signature covers, and the signature).
    bytes: Vec<u8>,
}

/// What a node can tell of evidence without asking anyone.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Offline {
    /// The forgery is proven (two conflicting claims).
    Proven,
    /// The claim holds; the origin must be asked whether it serves these
    /// bytes at `url`.
    AskOrigin {
        /// The object's canonical URL.
        url: String,
    },
    /// The accuser's own signature or admission fails: nothing is known of
    /// the accuser (the record is dropped; the pointer's key is blamed by
    /// the caller).
    Unsigned(&'static str),
    /// The accuser signed evidence that proves nothing (a claim the forger
    /// never signed, a conflict that is none, a URL that is not the claim's
    /// object): a false accusation.
    False(&'static str),
}

/// What the origin said of a [`Proof::Contradicted`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OriginCheck {
    /// Same status, validator and fields, another body: proven.
    Proven,
    /// Same status, validator and fields, the claimed body: the accusation
    /// was false.
    False,
    /// No comparison was possible.
    Inconclusive(&'static str),
}

fn put_end(out: &mut Vec<u8>, end: &EndRecord) {
    out.extend_from_slice(&end.total.to_be_bytes());
    out.extend_from_slice(&end.chunks.to_be_bytes());
    out.extend_from_slice(&end.object_digest);
    out.extend_from_slice(&end.sig);
}

fn put_claim(out: &mut Vec<u8>, c: &Claim) {
    out.extend_from_slice(c.head.as_bytes());
    put_end(out, &c.end);
}

fn read_claim(b: &[u8]) -> Option<Claim> {
    let b: &[u8; CLAIM_BYTES] = b.try_into().ok()?;
    let head = SignedHead::parse(&b[..HEAD_RECORD_BYTES])?;
    let e = &b[HEAD_RECORD_BYTES..];
    let total = u64::from_be_bytes(e[0..8].try_into().ok()?);
    let chunks = u64::from_be_bytes(e[8..16].try_into().ok()?);
    let object_digest: [u8; DIGEST_BYTES] = e[16..48].try_into().ok()?;
    let sig: [u8; SIGNATURE_BYTES] = e[48..].try_into().ok()?;
    Some(Claim {
        head,
        end: EndRecord {
            total,
            chunks,
            object_digest,
            sig,
        },
    })
}

impl Evidence {
    /// `proof`, signed by the accuser `identity`. `None` if it does not
    /// fit the format (a URL empty or over `EVIDENCE.url_bytes_max`).
    pub fn sign(identity: &LocalIdentity, proof: Proof) -> Option<Evidence> {
        let mut b = Vec::with_capacity(PREFIX_BYTES + 2 * CLAIM_BYTES + SIGNATURE_BYTES);
        b.push(EVIDENCE_VERSION);
        match &proof {
            Proof::Contradicted { claim, url } => {
                if url.is_empty() || url.len() > EVIDENCE.url_bytes_max {
                    return None;
                }
                b.push(KIND_CONTRADICTED);
                b.extend_from_slice(&identity.public().0);
                b.extend_from_slice(&identity.certificate().0);
                put_claim(&mut b, claim);
                b.extend_from_slice(&(url.len() as u16).to_be_bytes());
                b.extend_from_slice(url.as_bytes());
            }
            Proof::Conflict(pair) => {
                b.push(KIND_CONFLICT);
                b.extend_from_slice(&identity.public().0);
                b.extend_from_slice(&identity.certificate().0);
                put_claim(&mut b, &pair.0);
                put_claim(&mut b, &pair.1);
            }
        }
        let sig = identity.sign_parts(&[EVIDENCE_CONTEXT, &b]);
        b.extend_from_slice(&sig);
        Some(Evidence {
            proof,
            accuser: identity.public(),
            accuser_cert: identity.certificate(),
            bytes: b,
        })
    }

    /// Parses an evidence record (not yet checked: [`Evidence::check`]).
    /// `None` unless well formed: at most `EVIDENCE.bytes_max` bytes, a
    /// known version and kind, well-formed claims, a UTF-8 URL within
    /// `EVIDENCE.url_bytes_max`, nothing trailing.
    pub fn parse(bytes: &[u8]) -> Option<Evidence> {
        if bytes.len() > EVIDENCE.bytes_max || bytes.len() < PREFIX_BYTES + SIGNATURE_BYTES {
            return None;
        }
        if bytes[0] != EVIDENCE_VERSION {
            return None;
        }
        let accuser = PublicKey(bytes[2..2 + PUBLIC_KEY_BYTES].try_into().ok()?);
        let accuser_cert = Certificate(bytes[2 + PUBLIC_KEY_BYTES..PREFIX_BYTES].try_into().ok()?);
        let body = &bytes[PREFIX_BYTES..bytes.len() - SIGNATURE_BYTES];
        let proof = match bytes[1] {
            KIND_CONTRADICTED => {
                let claim = read_claim(body.get(..CLAIM_BYTES)?)?;
                let rest = &body[CLAIM_BYTES..];
                let len = usize::from(u16::from_be_bytes(rest.get(..2)?.try_into().ok()?));
                if len == 0 || len > EVIDENCE.url_bytes_max || rest.len() != 2 + len {
                    return None;
                }
                let url = core::str::from_utf8(&rest[2..]).ok()?.to_string();
                Proof::Contradicted {
                    claim: Box::new(claim),
                    url,
                }
            }
            KIND_CONFLICT => {
                if body.len() != 2 * CLAIM_BYTES {
                    return None;
                }
                Proof::Conflict(Box::new((
                    read_claim(&body[..CLAIM_BYTES])?,
                    read_claim(&body[CLAIM_BYTES..])?,
                )))
            }
            _ => return None,
        };
        Some(Evidence {
            proof,
            accuser,
            accuser_cert,
            bytes: bytes.to_vec(),
        })
    }

    /// The encoded record.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The accused signer.
    pub fn forger(&self) -> PublicKey {
        self.proof.forger()
    }

    /// What a node can tell without asking anyone: the accuser's signature
    /// and admission, then the claims' signatures and the forger's
    /// admission (a forger outside `membership` is nobody's concern), then
    /// the proof itself. Three to six Ed25519 verifications.
    pub fn check(&self, membership: &Membership) -> Offline {
        let n = self.bytes.len() - SIGNATURE_BYTES;
        if !identity::verify(
            &self.accuser,
            &[EVIDENCE_CONTEXT, &self.bytes[..n]].concat(),
            &self.bytes[n..],
        ) || !membership.admits(&self.accuser, &self.accuser_cert)
        {
            return Offline::Unsigned("the accuser's signature or admission fails");
        }
        let claim = self.proof.claim();
        if !membership.admits(&claim.head.signer(), &claim.head.certificate()) {
            return Offline::False("the accused is not admitted");
        }
        match &self.proof {
            Proof::Conflict(pair) => {
                if pair.0.conflicts(&pair.1) {
                    Offline::Proven
                } else {
                    Offline::False("the claims do not conflict")
                }
            }
            Proof::Contradicted { claim, url } => {
                if !claim.holds() {
                    return Offline::False("the claim is not the accused's");
                }
                if claim.head.validator() == super::validator_digest(&Headers::new()) {
                    return Offline::False("the claim names no validator");
                }
                if crate::proxy::names::cache_key(url) != claim.head.key() {
                    return Offline::False("the URL is not the claim's object");
                }
                Offline::AskOrigin { url: url.clone() }
            }
        }
    }
}

/// What the origin's answer under the claim's URL says of `claim`: its
/// `head` (status, validators, representation fields) and the
/// [`ObjectDigest`] of its body at the claim's chunk size. Only a strong
/// `ETag` promises one body (RFC 9110 §8.8.1): a weak one, or none, cannot
/// be compared; nor can a body the signer would have rewritten (HTML,
/// `crate::proxy::rewrite`). Under the same status, strong validator and
/// fields, the claim lies if its object digest or length differs from the
/// origin's body, or if it signed a `Repr-Digest` the origin's body does
/// not have (an honest origin-fetcher drops a body that contradicts the
/// origin's `Repr-Digest`, and signs the digest only of a body stored as
/// sent).
pub fn origin_check(claim: &Claim, head: &ResponseHead, body: &ObjectDigest) -> OriginCheck {
    if claim
        .head
        .matches_response(head.status, &head.headers)
        .is_err()
    {
        return OriginCheck::Inconclusive("another status, validator or representation");
    }
    let strong = head
        .headers
        .get("etag")
        .is_some_and(|e| e.starts_with(b"\"") && e.len() >= 2);
    if !strong {
        return OriginCheck::Inconclusive("no strong validator");
    }
    if crate::proxy::rewrite::body_is_rewritable(head) {
        return OriginCheck::Inconclusive("a body the signer stored rewritten");
    }
    let e = &claim.end;
    if (body.object_digest, body.total, body.chunks) != (e.object_digest, e.total, e.chunks) {
        return OriginCheck::Proven;
    }
    match claim.head.repr_digest() {
        Some(d) if d != body.body_sha256 => OriginCheck::Proven,
        _ => OriginCheck::False,
    }
}

/// The object digest of a body as an origin-fetcher signs it: SHA-256 of
/// the SHA-256 of each `chunk_bytes` chunk, in order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ObjectDigest {
    /// SHA-256 of the chunk digests.
    pub object_digest: [u8; DIGEST_BYTES],
    /// Body bytes.
    pub total: u64,
    /// Chunks.
    pub chunks: u64,
    /// SHA-256 of the whole body (what a `Repr-Digest` names).
    pub body_sha256: [u8; DIGEST_BYTES],
}

/// Computes an [`ObjectDigest`] incrementally (an audit, an evidence
/// check).
#[derive(Clone)]
pub struct ChunkedDigest {
    chunk_bytes: u64,
    in_chunk: u64,
    chunk: Sha256,
    list: Sha256,
    whole: Sha256,
    total: u64,
    chunks: u64,
}

impl ChunkedDigest {
    /// A digest at `chunk_bytes` per chunk (at least 1).
    pub fn new(chunk_bytes: u32) -> ChunkedDigest {
        ChunkedDigest {
            chunk_bytes: u64::from(chunk_bytes.max(1)),
            in_chunk: 0,
            chunk: Sha256::new(),
            list: Sha256::new(),
            whole: Sha256::new(),
            total: 0,
            chunks: 0,
        }
    }

    /// Hashes more of the body.
    pub fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        self.whole.update(data);
        while !data.is_empty() {
            let n = ((self.chunk_bytes - self.in_chunk) as usize).min(data.len());
            self.chunk.update(&data[..n]);
            self.in_chunk += n as u64;
            data = &data[n..];
            if self.in_chunk == self.chunk_bytes {
                self.seal();
            }
        }
    }

    /// Body bytes hashed so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    fn seal(&mut self) {
        let d: [u8; DIGEST_BYTES] = std::mem::take(&mut self.chunk).finalize().into();
        self.list.update(d);
        self.chunks += 1;
        self.in_chunk = 0;
    }

    /// The digest of the whole body.
    pub fn finish(mut self) -> ObjectDigest {
        if self.in_chunk > 0 {
            self.seal();
        }
        ObjectDigest {
            object_digest: self.list.finalize().into(),
            total: self.total,
            chunks: self.chunks,
            body_sha256: self.whole.finalize().into(),
        }
    }
}

/// A signer's verdict, as [`Book::verdict`] gives it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// Looked up lately, nothing proven: its copies may be used.
    Clean,
    /// Proven a forger: its copies are not used.
    Proven,
    /// Its lookup is under way, nothing found yet (the caller waits, at
    /// most `EVIDENCE.lookup_wait_ms`).
    Pending,
    /// Evidence against it was found and is being checked (the caller
    /// waits, at most `EVIDENCE.lookup_wait_ms`).
    Checking,
    /// Not known (or known too long ago): the caller looks its evidence key
    /// up now, and reports with [`Book::found`].
    LookUp,
}

/// What checking one accuser's evidence came to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// The forgery is proven.
    Proven,
    /// The accusation was false: the accuser is ignored from then on.
    False,
    /// Nothing was learnt from this evidence (the origin changed the
    /// object, or promises no bytes): the pair is not checked again.
    Inconclusive,
    /// Nothing was learnt for now (the accuser or the origin unreachable,
    /// the minute's origin checks spent): the pair may be checked again at
    /// the signer's next lookup.
    Retry,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// A lookup started at this time (ms).
    Looking(u64),
    /// `pending` accusers' evidence being checked, since this time (ms).
    Checking { since: u64, pending: u32 },
    /// Nothing proven; looked up again after this time (ms).
    Clean(u64),
    /// Proven a forger.
    Proven,
}

/// Counters of a [`Book`].
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct BookStats {
    /// Evidence checks refused: the accuser was ignored, the pair was
    /// checked before, or the minute's origin checks were spent.
    pub checks_refused: u64,
}

/// A node's verdict cache of evidence (this module's documentation). Time
/// is in milliseconds on any monotonic clock the caller keeps.
#[derive(Debug, Default)]
pub struct Book {
    states: HashMap<PublicKey, State>,
    /// Keys in the order they entered `states` (the oldest forgotten first).
    order: VecDeque<PublicKey>,
    /// Accusers whose evidence proved false.
    ignored: HashSet<PublicKey>,
    ignored_order: VecDeque<PublicKey>,
    /// (forger, accuser) pairs checked.
    pairs: HashSet<(PublicKey, PublicKey)>,
    pairs_order: VecDeque<(PublicKey, PublicKey)>,
    /// The minute of `checks_left`.
    minute: Option<u64>,
    checks_left: u32,
    stats: BookStats,
    /// Milliseconds a clean verdict stands (0: `EVIDENCE.verdict_ttl_secs`).
    verdict_ttl_ms: u64,
}

impl Book {
    /// An empty book.
    pub fn new() -> Book {
        Book::default()
    }

    /// Counters.
    pub fn stats(&self) -> BookStats {
        self.stats
    }

    /// Sets how long a clean verdict stands, in seconds (the default is
    /// `EVIDENCE.verdict_ttl_secs`; tests shorten it).
    pub fn set_verdict_ttl_secs(&mut self, secs: u32) {
        self.verdict_ttl_ms = u64::from(secs.max(1)) * 1000;
    }

    fn verdict_ttl(&self) -> u64 {
        if self.verdict_ttl_ms == 0 {
            u64::from(EVIDENCE.verdict_ttl_secs) * 1000
        } else {
            self.verdict_ttl_ms
        }
    }

    /// What is known of `signer` at `now`. [`Verdict::LookUp`] marks it
    /// looked up: until [`Book::found`] (or `EVIDENCE.lookup_wait_ms`),
    /// others get [`Verdict::Pending`].
    pub fn verdict(&mut self, now: u64, signer: &PublicKey) -> Verdict {
        let wait = u64::from(EVIDENCE.lookup_wait_ms);
        let check = u64::from(EVIDENCE.check_wait_ms);
        match self.states.get(signer) {
            Some(State::Proven) => return Verdict::Proven,
            Some(State::Clean(until)) if now < *until => return Verdict::Clean,
            Some(State::Looking(since)) if now < since.saturating_add(wait) => {
                return Verdict::Pending
            }
            Some(State::Checking { since, .. }) if now < since.saturating_add(check) => {
                return Verdict::Checking
            }
            _ => {}
        }
        self.set(*signer, State::Looking(now));
        Verdict::LookUp
    }

    /// The lookup of `signer` found `accusers` evidence pointers the caller
    /// will check (after [`Book::may_check`]); none: clean until
    /// `EVIDENCE.verdict_ttl_secs` from now.
    pub fn found(&mut self, now: u64, signer: &PublicKey, accusers: u32) {
        if self.states.get(signer) == Some(&State::Proven) {
            return;
        }
        let state = if accusers == 0 {
            State::Clean(now + self.verdict_ttl())
        } else {
            State::Checking {
                since: now,
                pending: accusers,
            }
        };
        self.set(*signer, state);
    }

    /// Whether `accuser`'s evidence against `forger` may be checked: the
    /// accuser was never caught lying, and this pair was never checked
    /// (each pair once). Records the pair.
    pub fn may_check(&mut self, forger: &PublicKey, accuser: &PublicKey) -> bool {
        if self.ignored.contains(accuser) || forger == accuser {
            self.stats.checks_refused += 1;
            return false;
        }
        let pair = (*forger, *accuser);
        if !self.pairs.insert(pair) {
            self.stats.checks_refused += 1;
            return false;
        }
        self.pairs_order.push_back(pair);
        if self.pairs_order.len() > EVIDENCE.checked_pairs_max {
            if let Some(old) = self.pairs_order.pop_front() {
                self.pairs.remove(&old);
            }
        }
        true
    }

    /// Whether one more origin request may be spent on a check this minute
    /// (`EVIDENCE.origin_checks_per_minute_max`); spends it.
    pub fn may_ask_origin(&mut self, now: u64) -> bool {
        let minute = now / 60_000;
        if self.minute != Some(minute) {
            self.minute = Some(minute);
            self.checks_left = EVIDENCE.origin_checks_per_minute_max;
        }
        if self.checks_left == 0 {
            self.stats.checks_refused += 1;
            return false;
        }
        self.checks_left -= 1;
        true
    }

    /// Whether `accuser` was caught lying.
    pub fn ignored(&self, accuser: &PublicKey) -> bool {
        self.ignored.contains(accuser)
    }

    /// One accuser's evidence against `forger` came to `outcome`; true if
    /// it newly proved the forger. A false accusation puts the accuser on
    /// the ignored list (at most `EVIDENCE.ignored_accusers_max`; the
    /// oldest forgotten first). When the last pending check ends with
    /// nothing proven, the signer is clean for `EVIDENCE.verdict_ttl_secs`.
    pub fn checked(
        &mut self,
        now: u64,
        forger: &PublicKey,
        accuser: &PublicKey,
        outcome: Outcome,
    ) -> bool {
        match outcome {
            Outcome::Proven => {
                let newly = self.states.get(forger) != Some(&State::Proven);
                self.set(*forger, State::Proven);
                return newly;
            }
            Outcome::False => self.ignore(*accuser),
            Outcome::Inconclusive => {}
            Outcome::Retry => {
                let pair = (*forger, *accuser);
                if self.pairs.remove(&pair) {
                    self.pairs_order.retain(|p| *p != pair);
                }
            }
        }
        let ttl = self.verdict_ttl();
        match self.states.get_mut(forger) {
            Some(State::Checking { pending, .. }) if *pending > 1 => *pending -= 1,
            Some(State::Proven) => {}
            _ => {
                self.set(*forger, State::Clean(now + ttl));
            }
        }
        false
    }

    /// Records that this node itself proved `forger` a forger (its audit).
    pub fn proven(&mut self, forger: &PublicKey) {
        self.set(*forger, State::Proven);
    }

    /// Whether `signer` is proven a forger.
    pub fn is_proven(&self, signer: &PublicKey) -> bool {
        self.states.get(signer) == Some(&State::Proven)
    }

    /// Whether some signer's clean verdict ran out at `now` (a cheap look
    /// before [`Book::due`]).
    pub fn any_due(&self, now: u64) -> bool {
        self.states
            .values()
            .any(|s| matches!(s, State::Clean(until) if now >= *until))
    }

    /// Signers whose clean verdict ran out at `now` and that `in_use` says
    /// this node still uses (a copy they signed is kept): at most `max`,
    /// each marked looked up (the caller looks them up). Those no longer in
    /// use are forgotten.
    pub fn due(
        &mut self,
        now: u64,
        max: usize,
        in_use: impl Fn(&PublicKey) -> bool,
    ) -> Vec<PublicKey> {
        let mut out = Vec::new();
        let mut forget = Vec::new();
        for (k, s) in &self.states {
            if let State::Clean(until) = s {
                if now >= *until {
                    if out.len() < max && in_use(k) {
                        out.push(*k);
                    } else if !in_use(k) {
                        forget.push(*k);
                    }
                }
            }
        }
        for k in &forget {
            self.states.remove(k);
        }
        if !forget.is_empty() {
            let states = &self.states;
            self.order.retain(|k| states.contains_key(k));
        }
        for k in &out {
            self.states.insert(*k, State::Looking(now));
        }
        out
    }

    /// Signers tracked.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether no signer is tracked.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    fn set(&mut self, key: PublicKey, state: State) {
        if self.states.insert(key, state).is_none() {
            self.order.push_back(key);
            while self.states.len() > EVIDENCE.signers_tracked_max {
                let Some(old) = self.order.pop_front() else {
                    break;
                };
                self.states.remove(&old);
            }
            if self.order.len() > 2 * self.states.len() + 64 {
                let states = &self.states;
                self.order.retain(|k| states.contains_key(k));
            }
        }
    }

    fn ignore(&mut self, accuser: PublicKey) {
        if self.ignored.insert(accuser) {
            self.ignored_order.push_back(accuser);
            if self.ignored_order.len() > EVIDENCE.ignored_accusers_max {
                if let Some(old) = self.ignored_order.pop_front() {
                    self.ignored.remove(&old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
