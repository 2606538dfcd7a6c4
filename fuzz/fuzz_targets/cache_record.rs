//! The disk cache's record reader on arbitrary segment bytes (what a crash,
//! a torn write or a corrupted disk can leave). It must never panic, never
//! claim a record larger than the bytes, and call a record complete only if
//! its commit word matches its checksum and the checksum matches the bytes.
//! A restart scans segments exactly this way: record after record, skipping
//! what is incomplete.

#![no_main]

use coral::cache::checksum::Checksum;
use coral::cache::record::{self, HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut off = 0usize;
    while off + HEADER_BYTES <= data.len() {
        let rest = &data[off..];
        match record::read_record(rest, true) {
            Ok(r) => {
                assert!(r.alloc_len as usize <= rest.len());
                let head_end = HEADER_BYTES + r.head_len as usize;
                let body_end = head_end + r.body_len as usize;
                assert!(body_end <= r.alloc_len as usize);
                // The checksum really covers these bytes.
                let mut c = record::content_checksum_start(&r.key, &rest[HEADER_BYTES..head_end]);
                c.update(&rest[head_end..body_end]);
                let sum = record::content_checksum_finish(c, r.body_len);
                let stored = u64::from_le_bytes(rest[record::CHECKSUM_AT..record::CHECKSUM_AT + 8].try_into().unwrap());
                assert_eq!(sum, stored);
                let _ = Checksum::of(rest);
                off += r.alloc_len as usize;
            }
            Err(e) => match e.skip() {
                Some(skip) => {
                    assert!(skip as usize <= rest.len());
                    off += skip as usize;
                }
                None => break,
            },
        }
    }
});
