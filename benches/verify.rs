//! Criterion benchmarks of verified peer bytes (issue 22 item 4,
//! `coral::verify`): what checking a peer's body costs, side by side with
//! reading the same body unsigned, and what the origin-fetcher's signing
//! costs. Throughput is per body byte, so criterion's MiB/s gives the cost
//! per GB directly (1 GB at 1000 MiB/s ≈ 0.95 s of one core).
//!
//! - `verify/plain_chunked_4m`: a 4 MiB body in 64 KiB HTTP chunks read
//!   with the proxy's `ChunkedDecoder` (what a peer fill cost before).
//! - `verify/signed_4m`: the same body signed (64 KiB chunks, a signed head
//!   and end) read with `SignedBody`: SHA-256 and one Ed25519
//!   verification per chunk.
//! - `verify/signed_repr_4m`: as above with a signed `Repr-Digest` (a second
//!   SHA-256 over the whole body).
//! - `verify/sign_4m`: the origin-fetcher hashing and signing 4 MiB.
//!
//! Run: `cargo bench --bench verify` (3 s of measurement, 20 samples each).

use std::hint::black_box;
use std::time::Duration;

use coral::identity::{KeyPair, LocalIdentity};
use coral::proxy::http::{write_chunk, write_last_chunk, ChunkedDecoder, Limits};
use coral::verify::{
    sha256, write_signed_chunk, write_signed_end, HeadFacts, SignedBody, SignedHead, Signer, Step,
};
use coral::Id;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const BODY_BYTES: usize = 4 << 20;
const CHUNK: usize = coral::limits::VERIFY.chunk_bytes as usize;

fn identity() -> LocalIdentity {
    let k = KeyPair::from_secret(&[9; 32]);
    let cert = k.certify(&k.public());
    LocalIdentity::new(k, cert)
}

fn facts(repr: Option<[u8; 32]>) -> HeadFacts {
    HeadFacts {
        key: Id([1; 20]),
        status: 200,
        validator: [2; 32],
        fields: [3; 32],
        length: Some(BODY_BYTES as u64),
        expires_secs: u64::MAX / 2,
        repr_digest: repr,
        chunk_bytes: CHUNK as u32,
    }
}

/// The body signed as a peer receives it.
fn signed(body: &[u8], f: &HeadFacts) -> (SignedHead, Vec<u8>) {
    let mut s = Signer::new(&identity(), f);
    let head = *s.head();
    let mut wire = Vec::with_capacity(body.len() + body.len() / 256);
    for c in body.chunks(CHUNK) {
        let sig = s.update(c).expect("whole chunks only");
        write_signed_chunk(&mut wire, c, &sig);
    }
    let (_, end) = s.finish();
    write_signed_end(&mut wire, &end.sig);
    (head, wire)
}

fn read_signed(head: &SignedHead, wire: &[u8], out: &mut Vec<u8>) -> u64 {
    let mut b = SignedBody::new(head);
    let mut pos = 0;
    loop {
        out.clear();
        let (used, step) = b.feed(&wire[pos..], out).expect("verifies");
        pos += used;
        if let Step::Done(end) = step {
            return end.total;
        }
    }
}

fn benches(c: &mut Criterion) {
    let body: Vec<u8> = (0..BODY_BYTES).map(|i| (i * 7 % 251) as u8).collect();
    let mut g = c.benchmark_group("verify");
    g.throughput(Throughput::Bytes(BODY_BYTES as u64));
    g.measurement_time(Duration::from_secs(3)).sample_size(20);

    let mut plain = Vec::new();
    for ch in body.chunks(CHUNK) {
        write_chunk(&mut plain, ch);
    }
    write_last_chunk(&mut plain);
    let limits = Limits::default();
    g.bench_function("plain_chunked_4m", |b| {
        let mut out = Vec::with_capacity(CHUNK * 2);
        b.iter(|| {
            let mut d = ChunkedDecoder::new(&limits);
            let mut pos = 0;
            loop {
                out.clear();
                let (used, done) = d.feed(&plain[pos..], &mut out).expect("decodes");
                pos += used;
                if done {
                    break;
                }
            }
            black_box(pos)
        })
    });

    let (head, wire) = signed(&body, &facts(None));
    g.bench_function("signed_4m", |b| {
        let mut out = Vec::with_capacity(CHUNK * 2);
        b.iter(|| black_box(read_signed(&head, &wire, &mut out)))
    });

    let (head, wire) = signed(&body, &facts(Some(sha256(&body))));
    g.bench_function("signed_repr_4m", |b| {
        let mut out = Vec::with_capacity(CHUNK * 2);
        b.iter(|| black_box(read_signed(&head, &wire, &mut out)))
    });

    let f = facts(None);
    let id = identity();
    g.bench_function("sign_4m", |b| {
        b.iter(|| {
            let mut s = Signer::new(&id, &f);
            for c in body.chunks(CHUNK) {
                black_box(s.update(c));
            }
            black_box(s.finish())
        })
    });
    g.finish();
}

criterion_group!(verify, benches);
criterion_main!(verify);
