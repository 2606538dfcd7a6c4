//! Node identity and network admission (issue 22; SECURITY.md, "Threat
//! model"), sans-IO: keys come in as bytes, verdicts go out as booleans.
//!
//! - A *node key* is a node's long-term Ed25519 key pair; the runtime keeps
//!   its secret in the node's state directory.
//! - A *network* is defined by one or more *admission keys* (Ed25519 key
//!   pairs held by its operators). An admission key signs a node's public
//!   key: the node's *certificate*. A node started with no network forms its
//!   own: its node key is its network's admission key, and it admits itself
//!   only. In the explicitly chosen *open* mode any key is accepted (its
//!   defence is the verification of peer bytes, issue 22 items 4–5, not yet
//!   built).
//! - A node's *identity* (carried once per address by the DSHT's Hello RPC,
//!   [`IDENTITY_BYTES`]) binds its public key, certificate, DSHT address and
//!   node id under its own signature. Contacts whose identity fails never
//!   enter a routing table.
//! - A *signed pointer* (a DSHT value naming a proxy, [`POINTER_TAG`]) binds
//!   the proxy's HTTP address to its key and certificate under its own
//!   signature. A pointer that fails is ignored and counted.
//!
//! Verification costs two Ed25519 verifications (certificate, then the
//! binding): [`Verifier`] caches verdicts in fixed arrays, so each identity
//! and each distinct pointer is verified once, and spends at most
//! [`VERIFIES_PER_SEC_MAX`] verifications a second whatever strangers send.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use smallvec::SmallVec;

use crate::dsht::id::{keyed_hasher, Id, KeyedBuildHasher};
use crate::dsht::wire::Value;
use crate::time::Time;

/// Bytes of an Ed25519 secret key (the seed).
pub const SECRET_KEY_BYTES: usize = 32;
/// Bytes of an Ed25519 public key.
pub const PUBLIC_KEY_BYTES: usize = 32;
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// The identity format's version (first byte of an identity).
pub const IDENTITY_VERSION: u8 = 1;
/// Bytes of a node's identity as the Hello RPC carries it: version (1),
/// public key (32), certificate (64), signature (64) over the key, the
/// certificate, the node's DSHT address and its node id.
pub const IDENTITY_BYTES: usize = crate::dsht::wire::IDENTITY_BYTES;
const _: () = assert!(IDENTITY_BYTES == 1 + PUBLIC_KEY_BYTES + 2 * SIGNATURE_BYTES);
/// First byte of a signed pointer. A plain address value (`Value::from_addr`)
/// starts with its family, 4 or 6, so the two never collide.
pub const POINTER_TAG: u8 = 0xc1;
/// Flag bit of a signed pointer: a 32-byte object digest follows the
/// certificate (reserved for verified peer bytes, issue 22 item 4; a
/// pointer that sets it is accepted, the digest not yet used).
pub const POINTER_FLAG_DIGEST: u8 = 1;
/// Bytes of the digest a pointer may carry.
pub const POINTER_DIGEST_BYTES: usize = 32;
/// Ed25519 verifications one [`Verifier`] spends per second at most (each
/// about 50 µs: at most 10% of a core); beyond it a candidate is refused
/// for now, not cached, and tried again when it is next seen.
pub const VERIFIES_PER_SEC_MAX: u32 = 2000;
/// Slots of each of a [`Verifier`]'s verdict caches (8 bytes each): 32 KiB
/// per cache.
pub const VERDICT_SLOTS: usize = 4096;

/// Domain separation for what each key signs: no signature of one kind
/// verifies as another.
const CERT_CONTEXT: &[u8] = b"coral node certificate v1\0";
const IDENTITY_CONTEXT: &[u8] = b"coral node identity v1\0";
const POINTER_CONTEXT: &[u8] = b"coral proxy pointer v1\0";

/// An Ed25519 public key (a node's or a network's admission key).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PublicKey(pub [u8; PUBLIC_KEY_BYTES]);

impl PublicKey {
    /// Lower-case hex (64 characters), as key files and flags write it.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// A key from 64 hex characters, or `None`.
    pub fn from_hex(s: &str) -> Option<PublicKey> {
        let mut b = [0u8; PUBLIC_KEY_BYTES];
        from_hex(s.trim(), &mut b)?;
        // Refuse bytes that are no curve point now, not at first use.
        VerifyingKey::from_bytes(&b).ok()?;
        Some(PublicKey(b))
    }
}

/// An Ed25519 key pair: a node key or a network's admission key.
#[derive(Clone)]
pub struct KeyPair(SigningKey);

impl core::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never the secret.
        write!(f, "KeyPair({})", self.public().to_hex())
    }
}

impl KeyPair {
    /// The key pair of a 32-byte secret (drawn from the OS by the runtime).
    pub fn from_secret(secret: &[u8; SECRET_KEY_BYTES]) -> KeyPair {
        KeyPair(SigningKey::from_bytes(secret))
    }

    /// The secret, as the key file keeps it.
    pub fn secret(&self) -> [u8; SECRET_KEY_BYTES] {
        self.0.to_bytes()
    }

    /// The public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    /// As an admission key: the certificate admitting `node`.
    pub fn certify(&self, node: &PublicKey) -> Certificate {
        let sig = self.0.sign(&cert_message(&self.public(), node));
        Certificate(sig.to_bytes())
    }

    fn sign(&self, parts: &[&[u8]]) -> [u8; SIGNATURE_BYTES] {
        let msg: Vec<u8> = parts.concat();
        self.0.sign(&msg).to_bytes()
    }
}

/// An admission key's signature over a node's public key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Certificate(pub [u8; SIGNATURE_BYTES]);

impl Certificate {
    /// No certificate (the open mode, where none is checked).
    pub const NONE: Certificate = Certificate([0; SIGNATURE_BYTES]);

    /// Lower-case hex (128 characters).
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// A certificate from 128 hex characters, or `None`.
    pub fn from_hex(s: &str) -> Option<Certificate> {
        let mut b = [0u8; SIGNATURE_BYTES];
        from_hex(s.trim(), &mut b)?;
        Some(Certificate(b))
    }

    /// Whether this certifies `node` under the admission key `network`.
    pub fn admits(&self, network: &PublicKey, node: &PublicKey) -> bool {
        verify(network, &cert_message(network, node), &self.0)
    }
}

fn cert_message(network: &PublicKey, node: &PublicKey) -> Vec<u8> {
    [CERT_CONTEXT, &network.0, &node.0].concat()
}

/// Which nodes take part: those an admission key certified, or any (open).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Membership {
    /// Any key; a pointer's own signature is still checked (it binds the
    /// address to a key), its certificate is not.
    Open,
    /// Nodes certified by one of these admission keys (a network of one:
    /// the node's own key).
    Admitted(SmallVec<[PublicKey; 2]>),
}

impl Membership {
    /// Whether `cert` admits `node`.
    pub fn admits(&self, node: &PublicKey, cert: &Certificate) -> bool {
        match self {
            Membership::Open => true,
            Membership::Admitted(keys) => keys.iter().any(|k| cert.admits(k, node)),
        }
    }
}

/// This node's identity: its key pair and certificate.
#[derive(Clone, Debug)]
pub struct LocalIdentity {
    key: KeyPair,
    cert: Certificate,
}

impl LocalIdentity {
    /// The identity of `key` with its certificate.
    pub fn new(key: KeyPair, cert: Certificate) -> LocalIdentity {
        LocalIdentity { key, cert }
    }

    /// The public key.
    pub fn public(&self) -> PublicKey {
        self.key.public()
    }

    /// The certificate.
    pub fn certificate(&self) -> Certificate {
        self.cert
    }

    /// The identity the Hello RPC carries for the node at `addr` with id
    /// `id` ([`IDENTITY_BYTES`]).
    pub fn identity(&self, addr: SocketAddr, id: &Id) -> [u8; IDENTITY_BYTES] {
        let public = self.key.public();
        let mut out = [0u8; IDENTITY_BYTES];
        out[0] = IDENTITY_VERSION;
        out[1..33].copy_from_slice(&public.0);
        out[33..97].copy_from_slice(&self.cert.0);
        let sig = self
            .key
            .sign(&[IDENTITY_CONTEXT, &out[..97], &addr_bytes(addr), &id.0]);
        out[97..].copy_from_slice(&sig);
        out
    }

    /// Signs `parts` (concatenated; the first is a domain-separation
    /// context) with this node's key: the signed records of verified peer
    /// bytes (`crate::verify`, issue 22 item 4).
    pub(crate) fn sign_parts(&self, parts: &[&[u8]]) -> [u8; SIGNATURE_BYTES] {
        self.key.sign(parts)
    }

    /// The signed pointer naming this node's proxy at `http`:
    /// tag (1), flags (1), address (7 or 19: family, address, port), public
    /// key (32), certificate (64), signature (64) over all before it. 169
    /// bytes for IPv4, 181 for IPv6; with the reserved digest 32 more: all
    /// within the DSHT's 255-byte values.
    pub fn pointer(&self, http: SocketAddr) -> Value {
        let mut b: Vec<u8> = vec![POINTER_TAG, 0];
        b.extend_from_slice(&addr_bytes(http));
        b.extend_from_slice(&self.key.public().0);
        b.extend_from_slice(&self.cert.0);
        let sig = self.key.sign(&[POINTER_CONTEXT, &b]);
        b.extend_from_slice(&sig);
        Value::new(&b).expect("a signed pointer fits a DSHT value")
    }
}

/// A signed pointer's fields, parsed but not verified.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Pointer<'a> {
    /// The proxy's HTTP address.
    pub addr: SocketAddr,
    /// Its public key.
    pub key: PublicKey,
    /// Its certificate.
    pub cert: Certificate,
    /// The object digest, where the pointer carries one (reserved).
    pub digest: Option<&'a [u8]>,
    /// The bytes the signature covers.
    signed: &'a [u8],
    /// The signature.
    sig: &'a [u8],
}

impl<'a> Pointer<'a> {
    /// Parses a signed pointer; `None` for anything else (a plain address
    /// value, a truncated or over-long one, unknown flags).
    pub fn parse(v: &'a [u8]) -> Option<Pointer<'a>> {
        if v.first() != Some(&POINTER_TAG) {
            return None;
        }
        let flags = *v.get(1)?;
        if flags & !POINTER_FLAG_DIGEST != 0 {
            return None;
        }
        let (addr, n) = parse_addr(v.get(2..)?)?;
        let mut pos = 2 + n;
        let key: [u8; PUBLIC_KEY_BYTES] = v.get(pos..pos + PUBLIC_KEY_BYTES)?.try_into().ok()?;
        pos += PUBLIC_KEY_BYTES;
        let cert: [u8; SIGNATURE_BYTES] = v.get(pos..pos + SIGNATURE_BYTES)?.try_into().ok()?;
        pos += SIGNATURE_BYTES;
        let digest = if flags & POINTER_FLAG_DIGEST != 0 {
            let d = v.get(pos..pos + POINTER_DIGEST_BYTES)?;
            pos += POINTER_DIGEST_BYTES;
            Some(d)
        } else {
            None
        };
        let sig = v.get(pos..pos + SIGNATURE_BYTES)?;
        if v.len() != pos + SIGNATURE_BYTES {
            return None;
        }
        Some(Pointer {
            addr,
            key: PublicKey(key),
            cert: Certificate(cert),
            digest,
            signed: &v[..pos],
            sig,
        })
    }

    /// Whether the pointer's own signature holds and `membership` admits
    /// its key.
    pub fn verify(&self, membership: &Membership) -> bool {
        verify(
            &self.key,
            &[POINTER_CONTEXT, self.signed].concat(),
            self.sig,
        ) && membership.admits(&self.key, &self.cert)
    }
}

/// The address a DSHT value names, signed or plain, unverified: what a
/// store's check "a value naming an address names the storer's" reads.
pub fn named_addr(v: &Value) -> Option<SocketAddr> {
    v.to_addr()
        .or_else(|| Pointer::parse(v.as_bytes()).map(|p| p.addr))
}

/// Checks an identity received from the node at `addr` with id `id`:
/// well formed, signed by its key for this address and id, and admitted.
pub fn identity_holds(membership: &Membership, blob: &[u8], addr: SocketAddr, id: &Id) -> bool {
    if blob.len() != IDENTITY_BYTES || blob[0] != IDENTITY_VERSION {
        return false;
    }
    let mut key = [0u8; PUBLIC_KEY_BYTES];
    key.copy_from_slice(&blob[1..33]);
    let mut cert = [0u8; SIGNATURE_BYTES];
    cert.copy_from_slice(&blob[33..97]);
    let key = PublicKey(key);
    let msg = [IDENTITY_CONTEXT, &blob[..97], &addr_bytes(addr), &id.0].concat();
    verify(&key, &msg, &blob[97..]) && membership.admits(&key, &Certificate(cert))
}

/// Counters of a [`Verifier`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyStats {
    /// Identities or pointers verified and accepted (each once while cached).
    pub accepted: u64,
    /// Identities or pointers that failed: forged, tampered, or not admitted.
    pub rejected: u64,
    /// Candidates not verified because the per-second budget was spent.
    pub deferred: u64,
}

/// Verdicts on identities and pointers, cached: a direct-mapped array of
/// 64-bit tags per verdict (keyed hashes of what was verified), so that
/// each is verified once while it stays cached, and a flood only evicts.
/// A forged candidate passes only if its tag equals an accepted one's,
/// which takes the node's secret (the hash key) or a 2^-64 chance.
#[derive(Clone, Debug)]
pub struct Verifier {
    membership: Membership,
    hasher: KeyedBuildHasher,
    accepted: Vec<u64>,
    rejected: Vec<u64>,
    /// Verifications left in the current second, and which second.
    budget: u32,
    budget_second: u64,
    stats: VerifyStats,
}

impl Verifier {
    /// A verifier for `membership`, its caches keyed by `secret`.
    pub fn new(membership: Membership, secret: &[u8]) -> Verifier {
        Verifier {
            membership,
            hasher: keyed_hasher(secret, "identity verdicts"),
            accepted: Vec::new(),
            rejected: Vec::new(),
            budget: VERIFIES_PER_SEC_MAX,
            budget_second: 0,
            stats: VerifyStats::default(),
        }
    }

    /// The membership rule.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// Counters.
    pub fn stats(&self) -> VerifyStats {
        self.stats
    }

    /// Whether the node at `addr` with id `id` was found admitted (its
    /// identity verified), without verifying anything.
    pub fn is_admitted(&self, addr: SocketAddr, id: &Id) -> bool {
        let tag = self.contact_tag(addr, id);
        probe(&self.accepted, tag)
    }

    /// Checks the identity `blob` of the node at `addr` with id `id` (at
    /// most once while its verdict is cached); true if admitted.
    pub fn check_identity(&mut self, now: Time, blob: &[u8], addr: SocketAddr, id: &Id) -> bool {
        let tag = self.contact_tag(addr, id);
        if probe(&self.accepted, tag) {
            return true;
        }
        let blob_tag = self.tag(blob) ^ tag;
        if probe(&self.rejected, blob_tag) {
            self.stats.rejected += 1;
            return false;
        }
        if !self.spend(now) {
            return false;
        }
        if identity_holds(&self.membership, blob, addr, id) {
            self.stats.accepted += 1;
            put(&mut self.accepted, tag);
            true
        } else {
            self.stats.rejected += 1;
            put(&mut self.rejected, blob_tag);
            false
        }
    }

    /// The proxy address a pointer value names, if it is a signed pointer
    /// that verifies and is admitted (verified once while cached).
    pub fn pointer_addr(&mut self, now: Time, v: &Value) -> Option<SocketAddr> {
        let Some(p) = Pointer::parse(v.as_bytes()) else {
            self.stats.rejected += 1;
            return None;
        };
        let tag = self.tag(v.as_bytes());
        if probe(&self.accepted, tag) {
            return Some(p.addr);
        }
        if probe(&self.rejected, tag) {
            self.stats.rejected += 1;
            return None;
        }
        if !self.spend(now) {
            return None;
        }
        if p.verify(&self.membership) {
            self.stats.accepted += 1;
            put(&mut self.accepted, tag);
            Some(p.addr)
        } else {
            self.stats.rejected += 1;
            put(&mut self.rejected, tag);
            None
        }
    }

    /// Records that the node at `addr` with id `id` is admitted, verified
    /// elsewhere (by another core of this node).
    pub fn mark_admitted(&mut self, addr: SocketAddr, id: &Id) {
        let tag = self.contact_tag(addr, id);
        put(&mut self.accepted, tag);
    }

    fn spend(&mut self, now: Time) -> bool {
        let second = now.as_micros() / 1_000_000;
        if second != self.budget_second {
            self.budget_second = second;
            self.budget = VERIFIES_PER_SEC_MAX;
        }
        if self.budget == 0 {
            self.stats.deferred += 1;
            return false;
        }
        self.budget -= 1;
        true
    }

    fn tag(&self, bytes: &[u8]) -> u64 {
        self.hasher.hash_one(bytes) | 1
    }

    fn contact_tag(&self, addr: SocketAddr, id: &Id) -> u64 {
        self.hasher.hash_one((addr, id.0)).rotate_left(17) | 1
    }
}

fn probe(slots: &[u64], tag: u64) -> bool {
    slots.get((tag >> 32) as usize % VERDICT_SLOTS) == Some(&tag)
}

fn put(slots: &mut Vec<u64>, tag: u64) {
    if slots.is_empty() {
        *slots = vec![0; VERDICT_SLOTS];
    }
    slots[(tag >> 32) as usize % VERDICT_SLOTS] = tag;
}

/// Whether `sig` is `key`'s signature over `msg` (strict Ed25519).
pub(crate) fn verify(key: &PublicKey, msg: &[u8], sig: &[u8]) -> bool {
    let Ok(sig) = <[u8; SIGNATURE_BYTES]>::try_from(sig) else {
        return false;
    };
    let Ok(vk) = VerifyingKey::from_bytes(&key.0) else {
        return false;
    };
    vk.verify_strict(msg, &Signature::from_bytes(&sig)).is_ok()
}

/// An address as the DSHT's values write it: family (4 or 6), address, port.
fn addr_bytes(addr: SocketAddr) -> SmallVec<[u8; 19]> {
    let mut b = SmallVec::new();
    match addr.ip() {
        IpAddr::V4(v4) => {
            b.push(4);
            b.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            b.push(6);
            b.extend_from_slice(&v6.octets());
        }
    }
    b.extend_from_slice(&addr.port().to_be_bytes());
    b
}

fn parse_addr(b: &[u8]) -> Option<(SocketAddr, usize)> {
    match b.first()? {
        4 => {
            let o = b.get(1..5)?;
            let p = b.get(5..7)?;
            let ip = IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], o[3]));
            Some((SocketAddr::new(ip, u16::from_be_bytes([p[0], p[1]])), 7))
        }
        6 => {
            let o: [u8; 16] = b.get(1..17)?.try_into().ok()?;
            let p = b.get(17..19)?;
            let ip = IpAddr::V6(Ipv6Addr::from(o));
            Some((SocketAddr::new(ip, u16::from_be_bytes([p[0], p[1]])), 19))
        }
        _ => None,
    }
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Fills `out` from hex (either case); `None` unless `s` is exactly
/// `2 * out.len()` hex digits.
pub fn from_hex(s: &str, out: &mut [u8]) -> Option<()> {
    let b = s.as_bytes();
    if b.len() != out.len() * 2 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(())
}

#[cfg(test)]
mod tests;
