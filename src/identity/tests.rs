//! Signing and verification: every field a signature covers, tampered,
//! fails; admission follows the network key.

use super::*;

fn key(b: u8) -> KeyPair {
    KeyPair::from_secret(&[b; SECRET_KEY_BYTES])
}

fn network(keys: &[&KeyPair]) -> Membership {
    Membership::Admitted(keys.iter().map(|k| k.public()).collect())
}

fn admitted_node(net: &KeyPair, b: u8) -> LocalIdentity {
    let node = key(b);
    let cert = net.certify(&node.public());
    LocalIdentity::new(node, cert)
}

fn addr() -> SocketAddr {
    "10.0.0.1:8090".parse().unwrap()
}

#[test]
fn a_certificate_admits_its_node_under_its_network_only() {
    let (net, other) = (key(1), key(2));
    let node = key(3);
    let cert = net.certify(&node.public());
    assert!(cert.admits(&net.public(), &node.public()));
    assert!(!cert.admits(&other.public(), &node.public()));
    assert!(!cert.admits(&net.public(), &key(4).public()));
    let mut bad = cert;
    bad.0[10] ^= 1;
    assert!(!bad.admits(&net.public(), &node.public()));
    assert!(Membership::Open.admits(&node.public(), &Certificate::NONE));
    assert!(!network(&[&net]).admits(&node.public(), &Certificate::NONE));
    // One of several admission keys suffices.
    assert!(network(&[&other, &net]).admits(&node.public(), &cert));
}

#[test]
fn a_signed_pointer_verifies_and_every_tampered_byte_fails() {
    let net = key(1);
    let me = admitted_node(&net, 3);
    let v = me.pointer(addr());
    assert_eq!(v.as_bytes().len(), 169);
    assert!(v.as_bytes().len() + POINTER_DIGEST_BYTES <= crate::dsht::wire::VALUE_BYTES_MAX);
    let v6 = me.pointer("[2001:db8::1]:8090".parse().unwrap());
    assert_eq!(v6.as_bytes().len(), 181);
    let p = Pointer::parse(v.as_bytes()).unwrap();
    assert_eq!(p.addr, addr());
    assert_eq!(p.key, me.public());
    assert!(p.verify(&network(&[&net])));
    assert!(!p.verify(&network(&[&key(9)])));
    assert_eq!(named_addr(&v), Some(addr()));
    // Each byte flipped: it no longer parses, or it fails verification
    // (address, key, certificate and signature are all covered).
    for i in 0..v.as_bytes().len() {
        let mut b = v.as_bytes().to_vec();
        b[i] ^= 0x01;
        let ok = Pointer::parse(&b).is_some_and(|p| p.verify(&network(&[&net])));
        assert!(!ok, "byte {i} tampered still verifies");
    }
    // Truncated or extended: refused by the parser.
    let b = v.as_bytes();
    assert!(Pointer::parse(&b[..b.len() - 1]).is_none());
    assert!(Pointer::parse(&[b, &[0]].concat()).is_none());
    // A plain address value is no signed pointer.
    assert!(Pointer::parse(Value::from_addr(addr()).as_bytes()).is_none());
}

#[test]
fn a_pointer_signed_by_a_node_not_admitted_fails_even_with_a_copied_certificate() {
    let net = key(1);
    let honest = admitted_node(&net, 3);
    // A stranger copies the honest node's certificate onto its own key.
    let forger = LocalIdentity::new(key(7), honest.certificate());
    let v = forger.pointer("10.0.0.66:8090".parse().unwrap());
    assert!(!Pointer::parse(v.as_bytes())
        .unwrap()
        .verify(&network(&[&net])));
    // In the open mode its own signature holds (the address is bound to a
    // key, no more).
    assert!(Pointer::parse(v.as_bytes())
        .unwrap()
        .verify(&Membership::Open));
}

#[test]
fn an_identity_binds_key_address_and_node_id() {
    let net = key(1);
    let me = admitted_node(&net, 3);
    let dsht: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let id = Id::from_ip(dsht.ip());
    let blob = me.identity(dsht, &id);
    let m = network(&[&net]);
    assert!(identity_holds(&m, &blob, dsht, &id));
    // Another address, port or id: fails (a replay elsewhere is useless).
    assert!(!identity_holds(
        &m,
        &blob,
        "10.0.0.2:7000".parse().unwrap(),
        &id
    ));
    assert!(!identity_holds(
        &m,
        &blob,
        "10.0.0.1:7001".parse().unwrap(),
        &id
    ));
    assert!(!identity_holds(&m, &blob, dsht, &Id::hash(b"other")));
    for i in 0..IDENTITY_BYTES {
        let mut b = blob;
        b[i] ^= 0x80;
        assert!(!identity_holds(&m, &b, dsht, &id), "byte {i} tampered");
    }
    assert!(!identity_holds(&m, &blob[..IDENTITY_BYTES - 1], dsht, &id));
    // Another network does not admit it.
    assert!(!identity_holds(&network(&[&key(2)]), &blob, dsht, &id));
}

#[test]
fn the_verifier_caches_verdicts_and_counts_rejections() {
    let net = key(1);
    let me = admitted_node(&net, 3);
    let mut v = Verifier::new(network(&[&net]), b"secret");
    let good = me.pointer(addr());
    let forged = LocalIdentity::new(key(8), Certificate::NONE).pointer(addr());
    let plain = Value::from_addr(addr());
    let now = Time(5_000_000);
    assert_eq!(v.pointer_addr(now, &good), Some(addr()));
    assert_eq!(v.pointer_addr(now, &good), Some(addr()));
    assert_eq!(v.pointer_addr(now, &forged), None);
    assert_eq!(v.pointer_addr(now, &forged), None);
    assert_eq!(v.pointer_addr(now, &plain), None);
    let s = v.stats();
    // Verified once each; the second look is the cache's.
    assert_eq!((s.accepted, s.rejected), (1, 3));
    let dsht: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let id = Id::from_ip(dsht.ip());
    assert!(!v.is_admitted(dsht, &id));
    assert!(v.check_identity(now, &me.identity(dsht, &id), dsht, &id));
    assert!(v.is_admitted(dsht, &id));
    assert!(!v.is_admitted("10.0.0.2:7000".parse().unwrap(), &id));
}

#[test]
fn the_verifier_spends_a_bounded_budget_per_second() {
    let net = key(1);
    let mut v = Verifier::new(network(&[&net]), b"secret");
    let now = Time(1_000_000);
    let mut refused = 0;
    for i in 0..(VERIFIES_PER_SEC_MAX + 10) {
        // Distinct forged identities: none cached.
        let mut blob = [0u8; IDENTITY_BYTES];
        blob[0] = IDENTITY_VERSION;
        blob[1..5].copy_from_slice(&i.to_be_bytes());
        let a = SocketAddr::from(([10, 0, 0, 9], 7000));
        refused += u32::from(!v.check_identity(now, &blob, a, &Id::from_ip(a.ip())));
    }
    assert_eq!(refused, VERIFIES_PER_SEC_MAX + 10);
    assert_eq!(v.stats().deferred, 10);
    // The next second, the budget is back.
    let me = admitted_node(&net, 3);
    let a: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let id = Id::from_ip(a.ip());
    assert!(v.check_identity(Time(2_000_000), &me.identity(a, &id), a, &id));
}

#[test]
fn keys_and_certificates_round_trip_through_hex() {
    let k = key(5);
    assert_eq!(PublicKey::from_hex(&k.public().to_hex()), Some(k.public()));
    let c = k.certify(&key(6).public());
    assert_eq!(Certificate::from_hex(&c.to_hex()), Some(c));
    assert_eq!(PublicKey::from_hex("zz"), None);
    assert_eq!(PublicKey::from_hex(&"g".repeat(64)), None);
    assert_eq!(KeyPair::from_secret(&k.secret()).public(), k.public());
}

#[test]
fn a_hello_is_191_bytes_and_round_trips() {
    use crate::dsht::wire::{Body, Header, Message};
    let me = admitted_node(&key(1), 3);
    let dsht: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let id = Id::from_ip(dsht.ip());
    let msg = Message {
        header: Header {
            route: 7,
            txid: 9,
            sender: id,
            services: crate::dsht::wire::Services::NONE,
            clusters: smallvec::SmallVec::new(),
        },
        body: Body::Hello {
            identity: Box::new(me.identity(dsht, &id)),
        },
    };
    let mut buf = Vec::new();
    msg.encode(&mut buf);
    assert_eq!(buf.len(), 191);
    let back = Message::decode(&buf).unwrap();
    assert_eq!(back, msg);
    let Body::Hello { identity } = back.body else {
        panic!("not a Hello");
    };
    assert!(identity_holds(
        &network(&[&key(1)]),
        &identity[..],
        dsht,
        &id
    ));
    // Truncated: an error, never a panic.
    assert!(Message::decode(&buf[..buf.len() - 1]).is_err());
}
