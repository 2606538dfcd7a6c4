//! Verified peer bytes (issue 22 items 4–5; SECURITY.md, "Threat model"),
//! sans-IO: bytes and keys in, verdicts and signed records out.
//!
//! The node that fills an object from its origin — the *origin-fetcher* —
//! signs what it stored, with its node key, in records that travel with the
//! object from peer to peer and that no relay can forge:
//!
//! - a **signed head** ([`HEAD_RECORD_BYTES`]): the object's key, status,
//!   a digest of its validators (`ETag`, `Last-Modified`) and of its
//!   representation fields (`Content-Type`, `Content-Encoding`, `Location`,
//!   `Content-Disposition`), its length if known, the absolute expiry the
//!   origin gave, the chunk size, the origin's RFC 9530 `Repr-Digest`
//!   (SHA-256) where it sent one and the body is stored as sent, and the
//!   signer's key and certificate;
//! - a **chunk signature** per [`crate::limits::VERIFY`]`.chunk_bytes` of
//!   body (the last chunk may be shorter) over the head's hash, the chunk's
//!   index and its SHA-256: cut-through survives, each chunk is checked as
//!   it arrives;
//! - an **end signature** over the head's hash, the total length, the chunk
//!   count and the *object digest* (SHA-256 of the chunk digests in order):
//!   a truncated body, a body cut at a chunk boundary, or chunks reordered
//!   never verify.
//!
//! On the wire (peer responses only, `Coral-No-Forward` requests), the
//! signed head is the response field [`SIGNED_HEAD_FIELD`] (hex) and the
//! body is chunked, one HTTP chunk per signed chunk, its signature a chunk
//! extension (RFC 9112 §7.1.1) `;coral-sig=<hex>`, the end signature the
//! last chunk's `;coral-end=<hex>`. [`SignedBody`] reads such a body and
//! hands out a chunk only after its signature held; a relay stores the
//! origin-fetcher's records beside its copy and re-emits them unchanged.
//!
//! What a signature cannot show — that the origin-fetcher signed what the
//! origin sent — is caught by the origin's own `Repr-Digest` (checked by
//! the origin-fetcher and, in the signed head, by every peer at the end of
//! the body), by random audits against the origin, and by two conflicting
//! signed claims ([`Claim::conflicts`]); a caught signer is distrusted
//! ([`Distrusted`]).

use sha2::{Digest, Sha256};

pub mod evidence;

use crate::dsht::id::Id;
use crate::identity::{self, Certificate, LocalIdentity, Membership, PublicKey};
use crate::identity::{PUBLIC_KEY_BYTES, SIGNATURE_BYTES};
use crate::proxy::http::Headers;

/// Bytes of a SHA-256 digest.
pub const DIGEST_BYTES: usize = 32;
/// The signed head's format version (its first byte).
pub const HEAD_RECORD_VERSION: u8 = 1;
/// Bytes of a signed head: version (1), key (20), status (2), flags (1),
/// chunk size (4), expiry (8), length (8), validator digest (32), fields
/// digest (32), `Repr-Digest` (32), signer key (32), certificate (64),
/// signature (64).
pub const HEAD_RECORD_BYTES: usize = 300;
/// The response field carrying the signed head (hex) on a peer's answer.
pub const SIGNED_HEAD_FIELD: &str = "coral-signed-head";
/// The chunk extension carrying a chunk's signature.
pub const CHUNK_SIG_EXT: &[u8] = b"coral-sig";
/// The last chunk's extension carrying the end signature.
pub const END_SIG_EXT: &[u8] = b"coral-end";
/// Bytes of a chunk-size line of a signed body: size (at most 16 hex
/// digits), `;`, the extension name, `=`, 128 hex digits.
pub const SIGNED_LINE_BYTES_MAX: usize = 16 + 1 + 9 + 1 + 2 * SIGNATURE_BYTES;
/// The request field asking an origin for a `Repr-Digest` (RFC 9530 §4):
/// SHA-256, the only algorithm coral checks.
pub const WANT_REPR_DIGEST: (&str, &str) = ("Want-Repr-Digest", "sha-256=10");

/// Flag: the head's length field holds the body's length.
const FLAG_LENGTH: u8 = 1;
/// Flag: the head carries the origin's `Repr-Digest` (SHA-256), and the
/// body is stored exactly as the origin sent it.
const FLAG_REPR: u8 = 2;

/// Domain separation: no signature of one kind verifies as another (nor as
/// an identity, certificate or pointer, `crate::identity`).
const HEAD_CONTEXT: &[u8] = b"coral signed head v1\0";
const CHUNK_CONTEXT: &[u8] = b"coral signed chunk v1\0";
const END_CONTEXT: &[u8] = b"coral signed end v1\0";

// Offsets of the signed head's fields.
const AT_KEY: usize = 1;
const AT_STATUS: usize = 21;
const AT_FLAGS: usize = 23;
const AT_CHUNK: usize = 24;
const AT_EXPIRES: usize = 28;
const AT_LENGTH: usize = 36;
const AT_VALIDATOR: usize = 44;
const AT_FIELDS: usize = 76;
const AT_REPR: usize = 108;
const AT_SIGNER: usize = 140;
const AT_CERT: usize = 172;
const AT_SIG: usize = 236;
const _: () = assert!(AT_SIG + SIGNATURE_BYTES == HEAD_RECORD_BYTES);
const _: () = assert!(AT_CERT + SIGNATURE_BYTES == AT_SIG);
const _: () = assert!(AT_SIGNER + PUBLIC_KEY_BYTES == AT_CERT);

/// The representation fields whose values the signed head covers: what a
/// relay could change to turn the same bytes into another page.
const REPRESENTATION_FIELDS: [&str; 4] = [
    "content-type",
    "content-encoding",
    "location",
    "content-disposition",
];

/// What the origin-fetcher knows of an object when it starts storing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadFacts {
    /// The object's key: its URL's, or, for a response with `Vary`, the
    /// key of the variant it is (`proxy::vary::variant_key`, whatever key
    /// it is stored under), so a relay cannot pass one variant off as
    /// another.
    pub key: Id,
    /// The response status.
    pub status: u16,
    /// [`validator_digest`] of the stored response.
    pub validator: [u8; DIGEST_BYTES],
    /// [`fields_digest`] of the stored response.
    pub fields: [u8; DIGEST_BYTES],
    /// The body's length, when the origin announced it and it is stored
    /// as sent.
    pub length: Option<u64>,
    /// Unix seconds until which the origin let the object be fresh.
    pub expires_secs: u64,
    /// The origin's `Repr-Digest` (SHA-256), when it sent one and the body
    /// is stored exactly as sent.
    pub repr_digest: Option<[u8; DIGEST_BYTES]>,
    /// Bytes per signed chunk.
    pub chunk_bytes: u32,
}

/// A signed head, parsed (not yet verified: [`SignedHead::verify`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SignedHead {
    bytes: [u8; HEAD_RECORD_BYTES],
}

impl SignedHead {
    /// Signs `facts` with `identity` (the origin-fetcher's node key).
    pub fn sign(identity: &LocalIdentity, facts: &HeadFacts) -> SignedHead {
        let mut b = [0u8; HEAD_RECORD_BYTES];
        b[0] = HEAD_RECORD_VERSION;
        b[AT_KEY..AT_STATUS].copy_from_slice(&facts.key.0);
        b[AT_STATUS..AT_FLAGS].copy_from_slice(&facts.status.to_be_bytes());
        let mut flags = 0;
        if facts.length.is_some() {
            flags |= FLAG_LENGTH;
        }
        if facts.repr_digest.is_some() {
            flags |= FLAG_REPR;
        }
        b[AT_FLAGS] = flags;
        b[AT_CHUNK..AT_EXPIRES].copy_from_slice(&facts.chunk_bytes.to_be_bytes());
        b[AT_EXPIRES..AT_LENGTH].copy_from_slice(&facts.expires_secs.to_be_bytes());
        b[AT_LENGTH..AT_VALIDATOR].copy_from_slice(&facts.length.unwrap_or(0).to_be_bytes());
        b[AT_VALIDATOR..AT_FIELDS].copy_from_slice(&facts.validator);
        b[AT_FIELDS..AT_REPR].copy_from_slice(&facts.fields);
        b[AT_REPR..AT_SIGNER].copy_from_slice(&facts.repr_digest.unwrap_or([0; DIGEST_BYTES]));
        b[AT_SIGNER..AT_CERT].copy_from_slice(&identity.public().0);
        b[AT_CERT..AT_SIG].copy_from_slice(&identity.certificate().0);
        let sig = identity.sign_parts(&[HEAD_CONTEXT, &b[..AT_SIG]]);
        b[AT_SIG..].copy_from_slice(&sig);
        SignedHead { bytes: b }
    }

    /// Parses a signed head's bytes: `None` unless well formed (length,
    /// version, known flags, a chunk size within the limits).
    pub fn parse(bytes: &[u8]) -> Option<SignedHead> {
        let bytes: [u8; HEAD_RECORD_BYTES] = bytes.try_into().ok()?;
        let h = SignedHead { bytes };
        let limits = crate::limits::VERIFY;
        if bytes[0] != HEAD_RECORD_VERSION
            || bytes[AT_FLAGS] & !(FLAG_LENGTH | FLAG_REPR) != 0
            || !(limits.chunk_bytes_min..=limits.chunk_bytes_max).contains(&h.chunk_bytes())
        {
            return None;
        }
        Some(h)
    }

    /// Parses the hex of [`SIGNED_HEAD_FIELD`].
    pub fn from_hex(hex: &[u8]) -> Option<SignedHead> {
        let s = core::str::from_utf8(hex).ok()?;
        let mut b = [0u8; HEAD_RECORD_BYTES];
        identity::from_hex(s.trim(), &mut b)?;
        SignedHead::parse(&b)
    }

    /// Lower-case hex, as [`SIGNED_HEAD_FIELD`] carries it.
    pub fn to_hex(&self) -> String {
        identity::to_hex(&self.bytes)
    }

    /// The record's bytes.
    pub fn as_bytes(&self) -> &[u8; HEAD_RECORD_BYTES] {
        &self.bytes
    }

    /// Whether the signer's own signature holds and `membership` admits
    /// its key (two Ed25519 verifications).
    pub fn verify(&self, membership: &Membership) -> bool {
        let signer = self.signer();
        identity::verify(
            &signer,
            &[HEAD_CONTEXT, &self.bytes[..AT_SIG]].concat(),
            &self.bytes[AT_SIG..],
        ) && membership.admits(&signer, &self.certificate())
    }

    /// SHA-256 of the whole record: what chunk and end signatures bind.
    pub fn hash(&self) -> [u8; DIGEST_BYTES] {
        Sha256::digest(self.bytes).into()
    }

    /// The object's key.
    pub fn key(&self) -> Id {
        let mut k = [0u8; 20];
        k.copy_from_slice(&self.bytes[AT_KEY..AT_STATUS]);
        Id(k)
    }

    /// The response status.
    pub fn status(&self) -> u16 {
        u16::from_be_bytes([self.bytes[AT_STATUS], self.bytes[AT_STATUS + 1]])
    }

    /// Bytes per signed chunk.
    pub fn chunk_bytes(&self) -> u32 {
        u32::from_be_bytes(
            self.bytes[AT_CHUNK..AT_EXPIRES]
                .try_into()
                .unwrap_or([0; 4]),
        )
    }

    /// Unix seconds until which the origin let the object be fresh: no peer
    /// copy is fresh longer.
    pub fn expires_secs(&self) -> u64 {
        u64::from_be_bytes(
            self.bytes[AT_EXPIRES..AT_LENGTH]
                .try_into()
                .unwrap_or([0; 8]),
        )
    }

    /// The body's length, if the signer knew it.
    pub fn length(&self) -> Option<u64> {
        (self.bytes[AT_FLAGS] & FLAG_LENGTH != 0).then(|| {
            u64::from_be_bytes(
                self.bytes[AT_LENGTH..AT_VALIDATOR]
                    .try_into()
                    .unwrap_or([0; 8]),
            )
        })
    }

    /// [`validator_digest`] of the signed response.
    pub fn validator(&self) -> &[u8] {
        &self.bytes[AT_VALIDATOR..AT_FIELDS]
    }

    /// [`fields_digest`] of the signed response.
    pub fn fields(&self) -> &[u8] {
        &self.bytes[AT_FIELDS..AT_REPR]
    }

    /// The origin's `Repr-Digest` (SHA-256) of the body, if signed.
    pub fn repr_digest(&self) -> Option<[u8; DIGEST_BYTES]> {
        (self.bytes[AT_FLAGS] & FLAG_REPR != 0).then(|| {
            let mut d = [0u8; DIGEST_BYTES];
            d.copy_from_slice(&self.bytes[AT_REPR..AT_SIGNER]);
            d
        })
    }

    /// The signer's public key.
    pub fn signer(&self) -> PublicKey {
        let mut k = [0u8; PUBLIC_KEY_BYTES];
        k.copy_from_slice(&self.bytes[AT_SIGNER..AT_CERT]);
        PublicKey(k)
    }

    /// The signer's certificate.
    pub fn certificate(&self) -> Certificate {
        let mut c = [0u8; SIGNATURE_BYTES];
        c.copy_from_slice(&self.bytes[AT_CERT..AT_SIG]);
        Certificate(c)
    }

    /// Whether a peer's response head agrees with this signed head for the
    /// object `key`: the same key, status, validators and representation
    /// fields. `Err` names what differs.
    pub fn describes(&self, key: &Id, status: u16, headers: &Headers) -> Result<(), &'static str> {
        if self.key() != *key {
            return Err("signed for another object");
        }
        self.matches_response(status, headers)
    }

    /// Whether a response with `status` and `headers` agrees with this
    /// signed head (status, validators, representation fields), whatever
    /// its key. `Err` names what differs.
    pub fn matches_response(&self, status: u16, headers: &Headers) -> Result<(), &'static str> {
        if self.status() != status {
            return Err("status differs from the signed one");
        }
        if self.validator() != validator_digest(headers) {
            return Err("validators differ from the signed ones");
        }
        if self.fields() != fields_digest(headers) {
            return Err("representation fields differ from the signed ones");
        }
        Ok(())
    }
}

/// SHA-256 over a response's validators (`ETag`, `Last-Modified`; absent
/// ones count as empty).
pub fn validator_digest(headers: &Headers) -> [u8; DIGEST_BYTES] {
    let mut h = Sha256::new();
    for name in ["etag", "last-modified"] {
        h.update(name.as_bytes());
        h.update(b"\0");
        h.update(headers.get(name).unwrap_or_default());
        h.update(b"\0");
    }
    h.finalize().into()
}

/// SHA-256 over a response's representation fields (each value of each,
/// in order).
pub fn fields_digest(headers: &Headers) -> [u8; DIGEST_BYTES] {
    let mut h = Sha256::new();
    for name in REPRESENTATION_FIELDS {
        h.update(name.as_bytes());
        h.update(b"\0");
        for v in headers.get_all(name) {
            h.update(v);
            h.update(b"\0");
        }
    }
    h.finalize().into()
}

fn chunk_message(head_hash: &[u8; DIGEST_BYTES], index: u64, digest: &[u8]) -> Vec<u8> {
    [CHUNK_CONTEXT, head_hash, &index.to_be_bytes(), digest].concat()
}

fn end_message(
    head_hash: &[u8; DIGEST_BYTES],
    total: u64,
    chunks: u64,
    object_digest: &[u8; DIGEST_BYTES],
) -> Vec<u8> {
    [
        END_CONTEXT,
        head_hash,
        &total.to_be_bytes(),
        &chunks.to_be_bytes(),
        object_digest,
    ]
    .concat()
}

/// The origin-fetcher's side: hashes the body as it is stored and signs
/// each chunk and the end.
///
/// Drive it with [`Signer::room`] and [`Signer::update`]: a chunk's
/// signature comes back with the bytes that complete it, so the caller can
/// keep it *before* it appends them (a reader that sees the bytes finds
/// their signature).
pub struct Signer {
    identity: LocalIdentity,
    head: SignedHead,
    head_hash: [u8; DIGEST_BYTES],
    chunk_bytes: u64,
    chunk: Sha256,
    in_chunk: u64,
    index: u64,
    total: u64,
    list: Sha256,
}

impl Signer {
    /// A signer of the object `facts` describes, signing as `identity`.
    pub fn new(identity: &LocalIdentity, facts: &HeadFacts) -> Signer {
        let head = SignedHead::sign(identity, facts);
        Signer {
            identity: identity.clone(),
            head_hash: head.hash(),
            head,
            chunk_bytes: u64::from(facts.chunk_bytes.max(1)),
            chunk: Sha256::new(),
            in_chunk: 0,
            index: 0,
            total: 0,
            list: Sha256::new(),
        }
    }

    /// The signed head.
    pub fn head(&self) -> &SignedHead {
        &self.head
    }

    /// Bytes until the current chunk is complete.
    pub fn room(&self) -> usize {
        (self.chunk_bytes - self.in_chunk) as usize
    }

    /// Hashes `data` (at most [`Signer::room`] bytes): the signature of the
    /// chunk it completes, if it does.
    pub fn update(&mut self, data: &[u8]) -> Option<[u8; SIGNATURE_BYTES]> {
        debug_assert!(data.len() <= self.room(), "a chunk's bytes at most");
        self.chunk.update(data);
        self.in_chunk += data.len() as u64;
        self.total += data.len() as u64;
        (self.in_chunk >= self.chunk_bytes).then(|| self.seal_chunk())
    }

    fn seal_chunk(&mut self) -> [u8; SIGNATURE_BYTES] {
        let digest: [u8; DIGEST_BYTES] = std::mem::take(&mut self.chunk).finalize().into();
        self.list.update(digest);
        let sig = self
            .identity
            .sign_parts(&[&chunk_message(&self.head_hash, self.index, &digest)]);
        self.index += 1;
        self.in_chunk = 0;
        sig
    }

    /// The end of the body: the last (short) chunk's signature, if there is
    /// one, and the end signature.
    pub fn finish(mut self) -> (Option<[u8; SIGNATURE_BYTES]>, EndRecord) {
        let last = (self.in_chunk > 0).then(|| self.seal_chunk());
        let object_digest: [u8; DIGEST_BYTES] = self.list.finalize().into();
        let sig = self.identity.sign_parts(&[&end_message(
            &self.head_hash,
            self.total,
            self.index,
            &object_digest,
        )]);
        (
            last,
            EndRecord {
                total: self.total,
                chunks: self.index,
                object_digest,
                sig,
            },
        )
    }
}

/// The signed end of a body.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EndRecord {
    /// Body bytes.
    pub total: u64,
    /// Chunks.
    pub chunks: u64,
    /// SHA-256 of the chunk digests, in order.
    pub object_digest: [u8; DIGEST_BYTES],
    /// The signer's signature.
    pub sig: [u8; SIGNATURE_BYTES],
}

/// One signer's claim about one object: its signed head and signed end.
/// Two claims by one signer for one object and one validator that name
/// different bodies prove the signer lied in one of them (an origin serves
/// one body per strong validator): [`Claim::conflicts`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Claim {
    /// The signed head.
    pub head: SignedHead,
    /// The signed end.
    pub end: EndRecord,
}

impl Claim {
    /// Whether both signatures hold (the head's and the end's).
    pub fn holds(&self) -> bool {
        let signer = self.head.signer();
        identity::verify(
            &signer,
            &[HEAD_CONTEXT, &self.head.bytes[..AT_SIG]].concat(),
            &self.head.bytes[AT_SIG..],
        ) && identity::verify(
            &signer,
            &end_message(
                &self.head.hash(),
                self.end.total,
                self.end.chunks,
                &self.end.object_digest,
            ),
            &self.end.sig,
        )
    }

    /// Whether `self` and `other` prove their signer a forger: both hold,
    /// one signer, one object, one (non-empty) validator, one chunk size,
    /// different bodies.
    pub fn conflicts(&self, other: &Claim) -> bool {
        let (a, b) = (&self.head, &other.head);
        a.signer() == b.signer()
            && a.key() == b.key()
            && a.validator() == b.validator()
            && a.validator() != validator_digest(&Headers::new())
            && a.chunk_bytes() == b.chunk_bytes()
            && (self.end.object_digest, self.end.total)
                != (other.end.object_digest, other.end.total)
            && self.holds()
            && other.holds()
    }
}

/// Why a signed body was refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct VerifyError {
    /// The bytes contradict a signature (or the signed `Repr-Digest`, or
    /// the signed length): the signer or a relay forged them. False: the
    /// framing itself is broken.
    pub forged: bool,
    /// What failed.
    pub reason: &'static str,
}

impl VerifyError {
    fn forged(reason: &'static str) -> VerifyError {
        VerifyError {
            forged: true,
            reason,
        }
    }

    fn framing(reason: &'static str) -> VerifyError {
        VerifyError {
            forged: false,
            reason,
        }
    }
}

impl core::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.reason)
    }
}

/// What [`SignedBody::feed`] produced.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
    /// Every input byte was taken; more are needed.
    More,
    /// One chunk verified and appended to `out`, with its signature.
    Chunk([u8; SIGNATURE_BYTES]),
    /// The end verified: the body is complete.
    Done(EndRecord),
}

enum BodyState {
    Line,
    Data { left: u64 },
    DataEnd { seen: u8 },
    Trailer { seen: u8 },
    Done,
}

/// Reads a signed chunked body (a peer's answer) and hands out each chunk
/// only after its signature held: at most one chunk
/// ([`SignedHead::chunk_bytes`]) is held unverified.
pub struct SignedBody {
    signer: PublicKey,
    head_hash: [u8; DIGEST_BYTES],
    chunk_bytes: u64,
    length: Option<u64>,
    repr: Option<([u8; DIGEST_BYTES], Sha256)>,
    state: BodyState,
    line: Vec<u8>,
    pending: Vec<u8>,
    sig: [u8; SIGNATURE_BYTES],
    short_seen: bool,
    index: u64,
    total: u64,
    list: Sha256,
    end: Option<EndRecord>,
    /// The end as signed, once its signature held, even if the signed
    /// length or `Repr-Digest` then failed: the signer's claim.
    claimed: Option<EndRecord>,
}

impl SignedBody {
    /// A reader of the body `head` signed (verify the head first).
    pub fn new(head: &SignedHead) -> SignedBody {
        SignedBody {
            signer: head.signer(),
            head_hash: head.hash(),
            chunk_bytes: u64::from(head.chunk_bytes()),
            length: head.length(),
            repr: head.repr_digest().map(|d| (d, Sha256::new())),
            state: BodyState::Line,
            line: Vec::new(),
            pending: Vec::new(),
            sig: [0; SIGNATURE_BYTES],
            short_seen: false,
            index: 0,
            total: 0,
            list: Sha256::new(),
            end: None,
            claimed: None,
        }
    }

    /// The end the signer signed, once its signature held — also when the
    /// body then contradicted the signed length or `Repr-Digest`: with the
    /// head, the signer's [`Claim`] (evidence, [`evidence`]).
    pub fn claimed_end(&self) -> Option<EndRecord> {
        self.claimed
    }

    /// Whether the last chunk (one shorter than the chunk size) was read:
    /// only the signed end may follow.
    pub fn at_last_chunk(&self) -> bool {
        self.short_seen
    }

    /// Verified body bytes so far.
    pub fn verified(&self) -> u64 {
        self.total
    }

    /// Reads from `input`; returns the bytes taken and what they made. A
    /// verified chunk is appended to `out` whole.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(usize, Step), VerifyError> {
        let mut used = 0;
        while used < input.len() {
            let rest = &input[used..];
            match &mut self.state {
                BodyState::Done => break,
                BodyState::Line => {
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        if self.line.len() + rest.len() > SIGNED_LINE_BYTES_MAX + 1 {
                            return Err(VerifyError::framing("chunk line too long"));
                        }
                        self.line.extend_from_slice(rest);
                        used = input.len();
                        break;
                    };
                    if self.line.len() + nl > SIGNED_LINE_BYTES_MAX + 1 {
                        return Err(VerifyError::framing("chunk line too long"));
                    }
                    self.line.extend_from_slice(&rest[..nl]);
                    used += nl + 1;
                    let line = std::mem::take(&mut self.line);
                    let line = line
                        .strip_suffix(b"\r")
                        .ok_or(VerifyError::framing("chunk line without CR"))?;
                    let (size, ext, sig) = parse_signed_line(line)?;
                    if size == 0 {
                        if ext != END_SIG_EXT {
                            return Err(VerifyError::forged("body end without its signature"));
                        }
                        self.sig = sig;
                        self.state = BodyState::Trailer { seen: 0 };
                        continue;
                    }
                    if ext != CHUNK_SIG_EXT {
                        return Err(VerifyError::forged("chunk without its signature"));
                    }
                    if self.short_seen || size > self.chunk_bytes {
                        return Err(VerifyError::forged("chunk sizes differ from the signed"));
                    }
                    if size < self.chunk_bytes {
                        self.short_seen = true;
                    }
                    self.sig = sig;
                    self.pending.clear();
                    self.pending.reserve(size as usize);
                    self.state = BodyState::Data { left: size };
                }
                BodyState::Data { left } => {
                    let take = (*left).min(rest.len() as u64) as usize;
                    self.pending.extend_from_slice(&rest[..take]);
                    used += take;
                    *left -= take as u64;
                    if *left == 0 {
                        self.state = BodyState::DataEnd { seen: 0 };
                    }
                }
                BodyState::DataEnd { seen } | BodyState::Trailer { seen } => {
                    let want = [b'\r', b'\n'][usize::from(*seen)];
                    if rest[0] != want {
                        return Err(VerifyError::framing("chunk not followed by CRLF"));
                    }
                    used += 1;
                    *seen += 1;
                    if *seen < 2 {
                        continue;
                    }
                    if matches!(self.state, BodyState::Trailer { .. }) {
                        let end = self.verify_end()?;
                        self.state = BodyState::Done;
                        return Ok((used, Step::Done(end)));
                    }
                    let sig = self.verify_chunk()?;
                    if out.is_empty() {
                        // The verified chunk changes hands without a copy
                        // (the caller's buffer becomes the next chunk's).
                        std::mem::swap(out, &mut self.pending);
                    } else {
                        out.extend_from_slice(&self.pending);
                    }
                    self.pending.clear();
                    self.state = BodyState::Line;
                    return Ok((used, Step::Chunk(sig)));
                }
            }
        }
        match (&self.state, self.end) {
            (BodyState::Done, Some(end)) => Ok((used, Step::Done(end))),
            _ => Ok((used, Step::More)),
        }
    }

    fn verify_chunk(&mut self) -> Result<[u8; SIGNATURE_BYTES], VerifyError> {
        let digest: [u8; DIGEST_BYTES] = Sha256::digest(&self.pending).into();
        let msg = chunk_message(&self.head_hash, self.index, &digest);
        if !identity::verify(&self.signer, &msg, &self.sig) {
            return Err(VerifyError::forged("chunk does not match its signature"));
        }
        // Only now, the chunk being the signer's: a relay's framing never
        // passes for the signer's lie.
        if self
            .length
            .is_some_and(|l| self.total.saturating_add(self.pending.len() as u64) > l)
        {
            return Err(VerifyError::forged("longer than the signed length"));
        }
        self.list.update(digest);
        if let Some((_, h)) = &mut self.repr {
            h.update(&self.pending);
        }
        self.index += 1;
        self.total += self.pending.len() as u64;
        Ok(self.sig)
    }

    fn verify_end(&mut self) -> Result<EndRecord, VerifyError> {
        let object_digest: [u8; DIGEST_BYTES] = std::mem::take(&mut self.list).finalize().into();
        let msg = end_message(&self.head_hash, self.total, self.index, &object_digest);
        if !identity::verify(&self.signer, &msg, &self.sig) {
            return Err(VerifyError::forged("body end does not match its signature"));
        }
        self.claimed = Some(EndRecord {
            total: self.total,
            chunks: self.index,
            object_digest,
            sig: self.sig,
        });
        if self.length.is_some_and(|l| l != self.total) {
            return Err(VerifyError::forged("shorter than the signed length"));
        }
        if let Some((want, h)) = self.repr.take() {
            let got: [u8; DIGEST_BYTES] = h.finalize().into();
            if got != want {
                return Err(VerifyError::forged(
                    "body differs from the origin's Repr-Digest",
                ));
            }
        }
        let end = EndRecord {
            total: self.total,
            chunks: self.index,
            object_digest,
            sig: self.sig,
        };
        self.end = Some(end);
        Ok(end)
    }
}

/// A signed chunk-size line: size, the one extension's name, its signature.
fn parse_signed_line(line: &[u8]) -> Result<(u64, &[u8], [u8; SIGNATURE_BYTES]), VerifyError> {
    let semi = line
        .iter()
        .position(|&b| b == b';')
        .ok_or(VerifyError::forged("chunk without its signature"))?;
    let (hex, ext) = (&line[..semi], &line[semi + 1..]);
    if hex.is_empty() || hex.len() > 16 {
        return Err(VerifyError::framing("bad chunk size"));
    }
    let mut size: u64 = 0;
    for &c in hex {
        let d = (c as char)
            .to_digit(16)
            .ok_or(VerifyError::framing("bad chunk size"))?;
        size = size << 4 | u64::from(d);
    }
    let eq = ext
        .iter()
        .position(|&b| b == b'=')
        .ok_or(VerifyError::forged("chunk without its signature"))?;
    let (name, value) = (&ext[..eq], &ext[eq + 1..]);
    let mut sig = [0u8; SIGNATURE_BYTES];
    core::str::from_utf8(value)
        .ok()
        .and_then(|v| identity::from_hex(v, &mut sig))
        .ok_or(VerifyError::forged("malformed chunk signature"))?;
    Ok((size, name, sig))
}

/// Appends one signed chunk (`data` non-empty) with its signature.
pub fn write_signed_chunk(out: &mut Vec<u8>, data: &[u8], sig: &[u8; SIGNATURE_BYTES]) {
    write_hex_size(out, data.len() as u64);
    out.push(b';');
    out.extend_from_slice(CHUNK_SIG_EXT);
    out.push(b'=');
    out.extend_from_slice(identity::to_hex(sig).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk with the end signature, and the empty trailer.
pub fn write_signed_end(out: &mut Vec<u8>, sig: &[u8; SIGNATURE_BYTES]) {
    out.extend_from_slice(b"0;");
    out.extend_from_slice(END_SIG_EXT);
    out.push(b'=');
    out.extend_from_slice(identity::to_hex(sig).as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
}

fn write_hex_size(out: &mut Vec<u8>, n: u64) {
    let s = format!("{n:x}");
    out.extend_from_slice(s.as_bytes());
}

/// The SHA-256 an RFC 9530 `Repr-Digest` field value names (a structured
/// dictionary, `sha-256=:<base64>:`), if it names one well formed.
pub fn repr_digest_sha256(value: &[u8]) -> Option<[u8; DIGEST_BYTES]> {
    let text = core::str::from_utf8(value).ok()?;
    for member in text.split(',') {
        let (name, v) = member.trim().split_once('=')?;
        if name.trim() != "sha-256" {
            continue;
        }
        let v = v.trim();
        let b64 = v.strip_prefix(':')?.strip_suffix(':')?;
        let bytes = base64_decode(b64)?;
        return bytes.try_into().ok();
    }
    None
}

/// `Repr-Digest: sha-256=:<base64>:` for `digest` (what a test origin or an
/// audit writes).
pub fn repr_digest_field(digest: &[u8; DIGEST_BYTES]) -> String {
    format!("sha-256=:{}:", base64_encode(digest))
}

/// SHA-256 of `data` (a whole body, for an audit or a `Repr-Digest`).
pub fn sha256(data: &[u8]) -> [u8; DIGEST_BYTES] {
    Sha256::digest(data).into()
}

/// An incremental SHA-256 of a whole body (the origin-fetcher's check of
/// the origin's `Repr-Digest`).
#[derive(Clone, Default)]
pub struct BodyDigest(Sha256);

impl BodyDigest {
    /// Hashes more of the body.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The digest of everything hashed.
    pub fn finish(self) -> [u8; DIGEST_BYTES] {
        self.0.finalize().into()
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 4 != 0 || b.len() > 4 * 64 {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (i, q) in b.chunks(4).enumerate() {
        let last = i + 1 == b.len() / 4;
        let mut n = 0u32;
        let mut pad = 0;
        for (j, &c) in q.iter().enumerate() {
            let v = match c {
                b'=' if last && j >= 2 => {
                    pad += 1;
                    0
                }
                _ if pad > 0 => return None,
                _ => B64.iter().position(|&x| x == c)? as u32,
            };
            n = n << 6 | v;
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// Signers caught forging (a chunk that failed its signature came from a
/// relay, not necessarily the signer: that drops the peer, not the signer;
/// a signed body contradicting the origin's `Repr-Digest`, an audit, or two
/// conflicting claims put the signer here). At most
/// `VERIFY.distrusted_signers_max`; the oldest is forgotten first.
#[derive(Clone, Debug, Default)]
pub struct Distrusted {
    keys: std::collections::VecDeque<PublicKey>,
}

impl Distrusted {
    /// Puts `key` on the list (once); true if it was not there.
    pub fn add(&mut self, key: PublicKey) -> bool {
        if self.keys.contains(&key) {
            return false;
        }
        if self.keys.len() >= crate::limits::VERIFY.distrusted_signers_max {
            self.keys.pop_front();
        }
        self.keys.push_back(key);
        true
    }

    /// Whether `key` is distrusted.
    pub fn contains(&self, key: &PublicKey) -> bool {
        self.keys.contains(key)
    }

    /// Signers on the list.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests;
