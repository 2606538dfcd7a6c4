use super::*;
use crate::identity::{KeyPair, LocalIdentity, Membership};
use crate::verify::{fields_digest, validator_digest, HeadFacts, Signer};

/// Nodes of one network (admission key seed 99).
fn node(seed: u8) -> LocalIdentity {
    let net = KeyPair::from_secret(&[99; 32]);
    let key = KeyPair::from_secret(&[seed; 32]);
    let cert = net.certify(&key.public());
    LocalIdentity::new(key, cert)
}

fn network() -> Membership {
    Membership::Admitted(
        [KeyPair::from_secret(&[99; 32]).public()]
            .into_iter()
            .collect(),
    )
}

const URL: &str = "http://www.origin.test:8080/page.bin";

/// The evidence `accuser` signs that `claim` (of [`URL`]) was contradicted
/// by the origin.
fn contradicted(accuser: &LocalIdentity, claim: Claim) -> Option<Evidence> {
    Evidence::sign(
        accuser,
        Proof::Contradicted {
            claim: Box::new(claim),
            url: URL.into(),
        },
    )
}

fn origin_head(etag: &str) -> ResponseHead {
    let mut h = Headers::new();
    h.insert("etag", etag.as_bytes());
    h.insert("content-type", b"application/octet-stream");
    ResponseHead {
        status: 200,
        reason: "OK".into(),
        minor_version: 1,
        headers: h,
        framing: crate::proxy::http::Framing::Length(0),
        keep_alive: true,
    }
}

/// `signer`'s claim that `body` is the object at `url` under `etag`.
fn claim(signer: &LocalIdentity, url: &str, etag: &str, body: &[u8]) -> Claim {
    claim_with_repr(signer, url, etag, body, None)
}

/// As [`claim`], with a signed `Repr-Digest`.
fn claim_with_repr(
    signer: &LocalIdentity,
    url: &str,
    etag: &str,
    body: &[u8],
    repr: Option<[u8; 32]>,
) -> Claim {
    let head = origin_head(etag);
    let facts = HeadFacts {
        key: crate::proxy::names::cache_key(url),
        status: 200,
        validator: validator_digest(&head.headers),
        fields: fields_digest(&head.headers),
        length: Some(body.len() as u64),
        expires_secs: 2_000_000_000,
        repr_digest: repr,
        chunk_bytes: 4096,
    };
    let mut s = Signer::new(signer, &facts);
    let mut rest = body;
    while !rest.is_empty() {
        let n = s.room().min(rest.len());
        let _ = s.update(&rest[..n]);
        rest = &rest[n..];
    }
    let head = *s.head();
    let (_, end) = s.finish();
    Claim { head, end }
}

fn digest(body: &[u8], chunk: u32) -> ObjectDigest {
    let mut d = ChunkedDigest::new(chunk);
    for piece in body.chunks(1000) {
        d.update(piece);
    }
    d.finish()
}

fn body(n: usize, byte: u8) -> Vec<u8> {
    (0..n).map(|i| byte.wrapping_add(i as u8)).collect()
}

#[test]
fn the_chunked_digest_is_what_the_signer_signs() {
    let f = node(1);
    for n in [0, 1, 4095, 4096, 4097, 3 * 4096 + 17] {
        let b = body(n, 3);
        let c = claim(&f, URL, "\"v1\"", &b);
        let d = digest(&b, 4096);
        assert_eq!(
            (d.object_digest, d.total, d.chunks),
            (c.end.object_digest, c.end.total, c.end.chunks),
            "{n} bytes"
        );
    }
}

#[test]
fn evidence_round_trips_and_its_key_is_the_forgers() {
    let (f, b) = (node(1), node(2));
    let c = claim(&f, URL, "\"v1\"", &body(10_000, 0));
    let ev = contradicted(&b, c).unwrap();
    assert_eq!(
        ev.as_bytes().len(),
        PREFIX_BYTES + CLAIM_BYTES + 2 + URL.len() + 64
    );
    let back = Evidence::parse(ev.as_bytes()).unwrap();
    assert_eq!(back, ev);
    assert_eq!(back.forger(), f.public());
    assert_eq!(back.accuser, b.public());
    let other = claim(&f, URL, "\"v1\"", &body(10_000, 1));
    let ev2 = Evidence::sign(&b, Proof::Conflict(Box::new((c, other)))).unwrap();
    assert_eq!(ev2.as_bytes().len(), PREFIX_BYTES + 2 * CLAIM_BYTES + 64);
    assert_eq!(Evidence::parse(ev2.as_bytes()).unwrap(), ev2);
    assert_eq!(evidence_key(&f.public()), evidence_key(&f.public()));
    assert_ne!(evidence_key(&f.public()), evidence_key(&b.public()));
    assert_ne!(
        evidence_key(&f.public()),
        Id::hash(&f.public().0),
        "domain-separated"
    );
}

#[test]
fn malformed_evidence_is_refused_without_a_panic() {
    let (f, b) = (node(1), node(2));
    let c = claim(&f, URL, "\"v1\"", &body(5000, 0));
    let ev = contradicted(&b, c).unwrap();
    let bytes = ev.as_bytes();
    // Every truncation, and one byte more.
    for n in 0..bytes.len() {
        assert!(Evidence::parse(&bytes[..n]).is_none(), "cut at {n}");
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert!(Evidence::parse(&longer).is_none());
    for (at, v) in [(0, 2), (1, 0), (1, 3)] {
        let mut x = bytes.to_vec();
        x[at] = v;
        assert!(Evidence::parse(&x).is_none(), "byte {at} = {v}");
    }
    assert!(Evidence::parse(&vec![1u8; EVIDENCE.bytes_max + 1]).is_none());
    // URL bounds.
    let long = format!("http://h/{}", "a".repeat(EVIDENCE.url_bytes_max));
    assert!(Evidence::sign(
        &b,
        Proof::Contradicted {
            claim: Box::new(c),
            url: long
        }
    )
    .is_none());
    assert!(Evidence::sign(
        &b,
        Proof::Contradicted {
            claim: Box::new(c),
            url: String::new()
        }
    )
    .is_none());
}

#[test]
fn conflicting_claims_are_proven_offline_and_others_are_false() {
    let (f, b) = (node(1), node(2));
    let one = claim(&f, URL, "\"v1\"", &body(9000, 0));
    let two = claim(&f, URL, "\"v1\"", &body(9000, 7));
    let ev = Evidence::sign(&b, Proof::Conflict(Box::new((one, two)))).unwrap();
    assert_eq!(ev.check(&network()), Offline::Proven);
    // The same body twice proves nothing.
    let same = Evidence::sign(&b, Proof::Conflict(Box::new((one, one)))).unwrap();
    assert!(matches!(same.check(&network()), Offline::False(_)));
    // Another validator: the origin may have changed the object.
    let later = claim(&f, URL, "\"v2\"", &body(9000, 7));
    let ev = Evidence::sign(&b, Proof::Conflict(Box::new((one, later)))).unwrap();
    assert!(matches!(ev.check(&network()), Offline::False(_)));
    // Two signers: nobody's lie.
    let other = claim(&node(3), URL, "\"v1\"", &body(9000, 7));
    let ev = Evidence::sign(&b, Proof::Conflict(Box::new((one, other)))).unwrap();
    assert!(matches!(ev.check(&network()), Offline::False(_)));
}

#[test]
fn a_contradicted_claim_asks_the_origin_and_a_forged_one_is_false() {
    let (f, b) = (node(1), node(2));
    let c = claim(&f, URL, "\"v1\"", &body(9000, 0));
    let ev = contradicted(&b, c).unwrap();
    assert_eq!(ev.check(&network()), Offline::AskOrigin { url: URL.into() });
    // Another URL than the claim's object.
    let ev = Evidence::sign(
        &b,
        Proof::Contradicted {
            claim: Box::new(c),
            url: "http://www.origin.test:8080/other".into(),
        },
    )
    .unwrap();
    assert!(matches!(ev.check(&network()), Offline::False(_)));
    // A claim the accused never signed (its end changed by the accuser).
    let mut forged = c;
    forged.end.total += 1;
    let ev = contradicted(&b, forged).unwrap();
    assert!(matches!(ev.check(&network()), Offline::False(_)));
    // No validator: nothing an origin could confirm.
    let weak = claim(&f, URL, "", &body(100, 0));
    let ev = contradicted(&b, weak).unwrap();
    assert!(matches!(ev.check(&network()), Offline::False(_)));
}

#[test]
fn the_accusers_signature_and_admission_are_checked_first() {
    let (f, b) = (node(1), node(2));
    let c = claim(&f, URL, "\"v1\"", &body(9000, 0));
    let ev = contradicted(&b, c).unwrap();
    let mut bytes = ev.as_bytes().to_vec();
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    let tampered = Evidence::parse(&bytes).unwrap();
    assert!(matches!(tampered.check(&network()), Offline::Unsigned(_)));
    // An accuser of another network.
    let stranger = {
        let k = KeyPair::from_secret(&[5; 32]);
        LocalIdentity::new(k.clone(), k.certify(&k.public()))
    };
    let ev = contradicted(&stranger, c).unwrap();
    assert!(matches!(ev.check(&network()), Offline::Unsigned(_)));
}

#[test]
fn the_origin_decides_a_contradicted_claim() {
    let f = node(1);
    let honest = body(20_000, 0);
    let c = claim(&f, URL, "\"v1\"", &honest);
    let head = origin_head("\"v1\"");
    assert_eq!(
        origin_check(&c, &head, &digest(&honest, 4096)),
        OriginCheck::False
    );
    let mut other = honest.clone();
    other[12_345] ^= 1;
    assert_eq!(
        origin_check(&c, &head, &digest(&other, 4096)),
        OriginCheck::Proven
    );
    assert_eq!(
        origin_check(&c, &head, &digest(&honest[..19_999], 4096)),
        OriginCheck::Proven
    );
    assert!(matches!(
        origin_check(&c, &origin_head("\"v2\""), &digest(&other, 4096)),
        OriginCheck::Inconclusive(_)
    ));
    // A weak validator promises no bytes: nobody is blamed.
    let weak = claim(&f, URL, "W/\"v1\"", &honest);
    assert!(matches!(
        origin_check(&weak, &origin_head("W/\"v1\""), &digest(&other, 4096)),
        OriginCheck::Inconclusive(_)
    ));
    // The origin's bytes signed with a Repr-Digest the origin's body does
    // not have: a lie too (an honest accuser who caught it is not blamed).
    let bogus = claim_with_repr(&f, URL, "\"v1\"", &honest, Some([9; 32]));
    assert_eq!(
        origin_check(&bogus, &head, &digest(&honest, 4096)),
        OriginCheck::Proven
    );
    let true_repr = claim_with_repr(
        &f,
        URL,
        "\"v1\"",
        &honest,
        Some(crate::verify::sha256(&honest)),
    );
    assert_eq!(
        origin_check(&true_repr, &head, &digest(&honest, 4096)),
        OriginCheck::False
    );
    let mut html = origin_head("\"v1\"");
    html.headers.set("content-type", b"text/html");
    let ch = {
        // The signer's claim under the HTML head.
        let facts = HeadFacts {
            key: crate::proxy::names::cache_key(URL),
            status: 200,
            validator: validator_digest(&html.headers),
            fields: fields_digest(&html.headers),
            length: None,
            expires_secs: 2_000_000_000,
            repr_digest: None,
            chunk_bytes: 4096,
        };
        let mut s = Signer::new(&f, &facts);
        let _ = s.update(b"x");
        let head = *s.head();
        Claim {
            head,
            end: s.finish().1,
        }
    };
    assert!(matches!(
        origin_check(&ch, &html, &digest(b"y", 4096)),
        OriginCheck::Inconclusive(_)
    ));
}

fn key(n: u8) -> PublicKey {
    PublicKey([n; 32])
}

#[test]
fn the_book_looks_a_signer_up_once_and_again_after_the_verdict_ttl() {
    let mut book = Book::new();
    let ttl = u64::from(EVIDENCE.verdict_ttl_secs) * 1000;
    assert_eq!(book.verdict(0, &key(1)), Verdict::LookUp);
    assert_eq!(book.verdict(10, &key(1)), Verdict::Pending, "one lookup");
    book.found(50, &key(1), 0);
    assert_eq!(book.verdict(60, &key(1)), Verdict::Clean);
    assert_eq!(book.verdict(50 + ttl - 1, &key(1)), Verdict::Clean);
    assert_eq!(book.verdict(50 + ttl, &key(1)), Verdict::LookUp);
    // A lookup that never reports is tried again after the wait.
    let wait = u64::from(EVIDENCE.lookup_wait_ms);
    assert_eq!(book.verdict(50 + ttl + wait, &key(1)), Verdict::LookUp);
}

#[test]
fn the_book_believes_proof_and_ignores_a_false_accuser() {
    let mut book = Book::new();
    let (f, h, liar, honest) = (key(1), key(2), key(3), key(4));
    // Evidence against h from a liar: checked once, found false.
    assert_eq!(book.verdict(0, &h), Verdict::LookUp);
    book.found(1, &h, 1);
    assert_eq!(
        book.verdict(2, &h),
        Verdict::Checking,
        "while it is checked"
    );
    assert!(book.may_check(&h, &liar));
    assert!(!book.checked(3, &h, &liar, Outcome::False));
    assert_eq!(book.verdict(4, &h), Verdict::Clean);
    assert!(book.ignored(&liar));
    // The liar is ignored for any evidence from then on, and a pair is
    // checked once.
    assert!(!book.may_check(&f, &liar));
    assert!(!book.may_check(&h, &liar));
    // Evidence against f from an honest accuser: proven.
    assert_eq!(book.verdict(5, &f), Verdict::LookUp);
    book.found(6, &f, 2);
    assert!(book.may_check(&f, &honest));
    assert!(!book.may_check(&f, &honest), "each pair once");
    assert!(!book.checked(7, &f, &key(9), Outcome::Inconclusive));
    assert_eq!(book.verdict(8, &f), Verdict::Checking, "one check left");
    assert!(book.checked(9, &f, &honest, Outcome::Proven));
    assert!(!book.checked(9, &f, &honest, Outcome::Proven), "once");
    assert_eq!(book.verdict(10, &f), Verdict::Proven);
    assert_eq!(book.verdict(u64::MAX / 2, &f), Verdict::Proven);
    assert!(!book.may_check(&f, &f), "nobody accuses itself");
    // A check that could not be made now may be made again.
    let g = key(5);
    assert_eq!(book.verdict(20, &g), Verdict::LookUp);
    book.found(21, &g, 1);
    assert!(book.may_check(&g, &honest));
    assert!(!book.checked(22, &g, &honest, Outcome::Retry));
    assert_eq!(book.verdict(23, &g), Verdict::Clean);
    assert!(book.may_check(&g, &honest), "retried at the next lookup");
}

#[test]
fn the_book_spends_a_bounded_number_of_origin_checks_a_minute() {
    let mut book = Book::new();
    let max = EVIDENCE.origin_checks_per_minute_max;
    for i in 0..max {
        assert!(book.may_ask_origin(1000 + u64::from(i)), "check {i}");
    }
    assert!(!book.may_ask_origin(59_999));
    assert!(book.may_ask_origin(60_000), "the next minute");
    assert!(book.stats().checks_refused >= 1);
}

#[test]
fn the_book_rechecks_signers_in_use_and_forgets_others() {
    let mut book = Book::new();
    for n in 1..=3 {
        assert_eq!(book.verdict(0, &key(n)), Verdict::LookUp);
        book.found(0, &key(n), 0);
    }
    let ttl = u64::from(EVIDENCE.verdict_ttl_secs) * 1000;
    assert!(book.due(ttl - 1, 10, |_| true).is_empty());
    assert!(!book.any_due(ttl - 1));
    assert!(book.any_due(ttl));
    let in_use = |k: &PublicKey| *k != key(3);
    let mut due = book.due(ttl, 10, in_use);
    due.sort_by_key(|k| k.0);
    assert_eq!(due, vec![key(1), key(2)]);
    assert_eq!(book.len(), 2, "key 3 forgotten");
    assert_eq!(book.verdict(ttl + 1, &key(1)), Verdict::Pending);
    // At most `max` a round.
    book.found(ttl + 2, &key(1), 0);
    book.found(ttl + 2, &key(2), 0);
    assert_eq!(book.due(3 * ttl, 1, |_| true).len(), 1);
}

#[test]
fn the_book_is_bounded() {
    let mut book = Book::new();
    for i in 0..(EVIDENCE.signers_tracked_max + 10) as u32 {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&i.to_be_bytes());
        let _ = book.verdict(0, &PublicKey(k));
    }
    assert_eq!(book.len(), EVIDENCE.signers_tracked_max);
    for i in 0..(EVIDENCE.ignored_accusers_max + 5) as u32 {
        let mut k = [1u8; 32];
        k[..4].copy_from_slice(&i.to_be_bytes());
        let _ = book.checked(0, &key(0), &PublicKey(k), Outcome::False);
    }
    assert!(book.ignored.len() <= EVIDENCE.ignored_accusers_max);
}
