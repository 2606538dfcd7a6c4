use super::*;
use crate::identity::{KeyPair, LocalIdentity, Membership};

fn node(seed: u8) -> LocalIdentity {
    let key = KeyPair::from_secret(&[seed; 32]);
    let cert = key.certify(&key.public());
    LocalIdentity::new(key, cert)
}

fn own(id: &LocalIdentity) -> Membership {
    Membership::Admitted([id.public()].into_iter().collect())
}

fn facts(len: Option<u64>, repr: Option<[u8; 32]>) -> HeadFacts {
    let mut h = Headers::new();
    h.insert("etag", b"\"v1\"");
    h.insert("content-type", b"text/plain");
    HeadFacts {
        key: Id([7; 20]),
        status: 200,
        validator: validator_digest(&h),
        fields: fields_digest(&h),
        length: len,
        expires_secs: 1_000_000,
        repr_digest: repr,
        chunk_bytes: 4096,
    }
}

/// What an origin-fetcher sends a peer for `body`: the signed head and the
/// signed chunked body.
fn signed(id: &LocalIdentity, f: &HeadFacts, body: &[u8]) -> (SignedHead, Vec<u8>) {
    let mut s = Signer::new(id, f);
    let head = *s.head();
    let mut wire = Vec::new();
    let mut chunk = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let n = s.room().min(rest.len());
        chunk.extend_from_slice(&rest[..n]);
        if let Some(sig) = s.update(&rest[..n]) {
            write_signed_chunk(&mut wire, &chunk, &sig);
            chunk.clear();
        }
        rest = &rest[n..];
    }
    let (last, end) = s.finish();
    if let Some(sig) = last {
        write_signed_chunk(&mut wire, &chunk, &sig);
    }
    write_signed_end(&mut wire, &end.sig);
    (head, wire)
}

/// Reads `wire` in pieces of `step` bytes: the verified body, or the error.
fn read(head: &SignedHead, wire: &[u8], step: usize) -> Result<Vec<u8>, VerifyError> {
    let mut b = SignedBody::new(head);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < wire.len() {
        let end = (pos + step).min(wire.len());
        let (used, st) = b.feed(&wire[pos..end], &mut out)?;
        pos += used;
        if let Step::Done(_) = st {
            return Ok(out);
        }
    }
    Err(VerifyError::framing("cut short"))
}

fn body(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn signed_body_verifies_in_any_pieces() {
    let id = node(1);
    for n in [1, 4095, 4096, 4097, 3 * 4096, 10_000] {
        let data = body(n);
        let (head, wire) = signed(&id, &facts(Some(n as u64), None), &data);
        assert!(head.verify(&own(&id)));
        for step in [1, 7, 4096, wire.len()] {
            assert_eq!(read(&head, &wire, step).unwrap(), data, "n={n} step={step}");
        }
    }
}

#[test]
fn head_round_trips_through_hex_and_rejects_other_networks() {
    let id = node(1);
    let (head, _) = signed(&id, &facts(None, None), b"x");
    let back = SignedHead::from_hex(head.to_hex().as_bytes()).unwrap();
    assert_eq!(back, head);
    assert!(back.verify(&own(&id)));
    assert!(!back.verify(&own(&node(2))), "not admitted elsewhere");
    assert!(back.verify(&Membership::Open));
    let mut tampered = *head.as_bytes();
    tampered[AT_EXPIRES + 7] ^= 1; // a longer lifetime
    assert!(!SignedHead::parse(&tampered).unwrap().verify(&own(&id)));
}

#[test]
fn a_changed_byte_fails_its_chunk_before_it_is_handed_out() {
    let id = node(1);
    let data = body(3 * 4096);
    let (head, mut wire) = signed(&id, &facts(None, None), &data);
    // A byte of the second chunk: the first still comes out, verified.
    let second = wire.windows(2).position(|w| w == b"\r\n").unwrap() + 2 + 4096 + 2;
    let line_end = second
        + wire[second..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap();
    wire[line_end + 2 + 100] ^= 0x20;
    let mut b = SignedBody::new(&head);
    let mut out = Vec::new();
    let (used, st) = b.feed(&wire, &mut out).unwrap();
    assert!(matches!(st, Step::Chunk(_)));
    assert_eq!(out, data[..4096]);
    let e = b.feed(&wire[used..], &mut out).unwrap_err();
    assert!(e.forged, "{e}");
    assert_eq!(out.len(), 4096, "nothing of the forged chunk");
}

#[test]
fn truncation_and_reordering_are_caught() {
    let id = node(1);
    let data = body(3 * 4096);
    let (head, wire) = signed(&id, &facts(None, None), &data);
    // Cut at a chunk boundary, with the end of another object's body (two
    // chunks long) by the same signer: the end fails.
    let end_bytes = 2 + END_SIG_EXT.len() + 1 + 128 + 4;
    let chunk_wire = (wire.len() - end_bytes) / 3;
    let first_two = &wire[..2 * chunk_wire];
    let mut cut = first_two.to_vec();
    let other_object = HeadFacts {
        key: Id([8; 20]),
        ..facts(None, None)
    };
    let (_, other) = signed(&id, &other_object, &data[..2 * 4096]);
    cut.extend_from_slice(&other[other.len() - end_bytes..]);
    let e = read(&head, &cut, 1000).unwrap_err();
    assert!(e.forged && e.reason.contains("end"), "{e}");
    // Chunks swapped: the first fails.
    let mut swapped = wire[chunk_wire..2 * chunk_wire].to_vec();
    swapped.extend_from_slice(&wire[..chunk_wire]);
    assert!(read(&head, &swapped, 1000).unwrap_err().forged);
    // Without any end: never done.
    assert!(read(&head, first_two, 1000).is_err());
}

#[test]
fn a_signed_length_or_repr_digest_the_body_contradicts_is_forgery() {
    let id = node(1);
    let data = body(5000);
    // The signer lies about the length.
    let (head, wire) = signed(&id, &facts(Some(6000), None), &data);
    assert!(read(&head, &wire, 512).unwrap_err().forged);
    // The signer signs bytes other than those the origin's digest names.
    let (head, wire) = signed(&id, &facts(None, Some(sha256(b"the origin's body"))), &data);
    let e = read(&head, &wire, 512).unwrap_err();
    assert!(e.forged && e.reason.contains("Repr-Digest"), "{e}");
    // The truth verifies.
    let (head, wire) = signed(&id, &facts(Some(5000), Some(sha256(&data))), &data);
    assert_eq!(read(&head, &wire, 512).unwrap(), data);
}

#[test]
fn unsigned_or_oversized_chunks_are_refused() {
    let id = node(1);
    let (head, _) = signed(&id, &facts(None, None), b"x");
    let mut plain = Vec::new();
    crate::proxy::http::write_chunk(&mut plain, b"hello");
    assert!(read(&head, &plain, 100).unwrap_err().forged);
    let mut big = Vec::new();
    write_signed_chunk(&mut big, &body(5000), &[0; 64]);
    assert!(read(&head, &big, 100000).unwrap_err().forged);
    let long = vec![b'1'; 1000];
    assert!(!read(&head, &long, 1000).unwrap_err().forged);
}

#[test]
fn two_signed_bodies_for_one_validator_prove_forgery() {
    let id = node(1);
    let claim = |data: &[u8]| {
        let f = facts(None, None);
        let mut s = Signer::new(&id, &f);
        let head = *s.head();
        let mut rest = data;
        while !rest.is_empty() {
            let n = s.room().min(rest.len());
            s.update(&rest[..n]);
            rest = &rest[n..];
        }
        Claim {
            head,
            end: s.finish().1,
        }
    };
    let a = claim(b"the origin's bytes");
    let b = claim(b"forged bytes");
    assert!(a.holds() && b.holds());
    assert!(a.conflicts(&b));
    assert!(!a.conflicts(&a), "one body is no conflict");
    let mut c = b;
    c.end.object_digest[0] ^= 1;
    assert!(
        !a.conflicts(&c),
        "a claim whose signature fails proves nothing"
    );
}

#[test]
fn rfc9530_repr_digest_parses() {
    // RFC 9530 §3 example: `{"hello": "world"}`.
    let d = repr_digest_sha256(
        b"sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:, sha-512=:abc=:",
    )
    .unwrap();
    assert_eq!(d, sha256(b"{\"hello\": \"world\"}"));
    assert_eq!(
        repr_digest_sha256(repr_digest_field(&d).as_bytes()),
        Some(d)
    );
    assert_eq!(repr_digest_sha256(b"sha-512=:abc=:"), None);
    assert_eq!(repr_digest_sha256(b"sha-256=:short:"), None);
    assert_eq!(
        repr_digest_sha256(b"sha-256=X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE="),
        None
    );
}

#[test]
fn distrusted_is_bounded() {
    let mut d = Distrusted::default();
    let max = crate::limits::VERIFY.distrusted_signers_max;
    for i in 0..max + 5 {
        let mut k = [0u8; 32];
        k[..8].copy_from_slice(&(i as u64).to_le_bytes());
        assert!(d.add(PublicKey(k)));
    }
    assert_eq!(d.len(), max);
    assert!(!d.contains(&PublicKey([0; 32])), "the oldest went first");
}

#[test]
fn a_relays_framing_never_reads_as_the_signers_lie() {
    // What `ProxyCore::caught` blames on the signer: the signed length or
    // Repr-Digest contradicted by the signer's own verified chunks. A relay
    // that adds a chunk of its own gets a chunk-signature failure instead.
    let id = node(1);
    let data = body(4096 + 100);
    let (head, wire) = signed(
        &id,
        &facts(Some(data.len() as u64), Some(sha256(&data))),
        &data,
    );
    let mut extra = wire[..wire.len() - (2 + END_SIG_EXT.len() + 1 + 128 + 4)].to_vec();
    write_signed_chunk(&mut extra, &body(50), &[7; 64]);
    let e = read(&head, &extra, 1000).unwrap_err();
    assert!(e.forged);
    assert!(
        !e.reason.contains("signed length") && !e.reason.contains("Repr-Digest"),
        "{e}"
    );
}
