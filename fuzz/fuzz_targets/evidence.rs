//! Evidence against a lying origin-fetcher (issue 22 item 5 c) on arbitrary
//! bytes, as an accuser's proxy may serve them: parsing must never panic,
//! never accept more than `EVIDENCE.bytes_max`, and what it accepts must
//! encode back to the same bytes; checking it (signatures, claims) must
//! never panic either.

#![no_main]

use coral::identity::{KeyPair, Membership};
use coral::limits::EVIDENCE;
use coral::verify::evidence::Evidence;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(ev) = Evidence::parse(data) {
        assert!(data.len() <= EVIDENCE.bytes_max);
        assert_eq!(ev.as_bytes(), data);
        let net = KeyPair::from_secret(&[1; 32]).public();
        let _ = ev.check(&Membership::Admitted([net].into_iter().collect()));
        let _ = ev.check(&Membership::Open);
        let _ = ev.forger();
    }
});
