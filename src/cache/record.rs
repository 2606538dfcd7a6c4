//! The on-disk record: one cached object in a segment file.
//!
//! ```text
//! offset  field              written
//!   0     magic  "CRLR"       begin
//!   4     version u16         begin
//!   6     flags u16           live: failed, complete, removed
//!   8     key [20]            begin
//!  28     head_len u32        begin
//!  32     alloc_len u64       begin   (bytes reserved for the whole record;
//!                             finish shrinks it for an object whose length
//!                             was not announced)
//!  40     stored_secs u64     begin / touch_meta
//!  48     fresh_until_secs    begin / touch_meta
//!  56     expected_len u64    begin / touch_meta (u64::MAX: unknown)
//!  64     meta_check u64      begin / touch_meta (checksum of 40..64)
//!  72     body_len u64        after every append (readers of an
//!                             object still arriving read it), final at finish
//!  80     checksum u64        finish  (key, head_len, head, body_len, body)
//!  88     commit u64          finish, LAST: COMMIT ^ checksum
//!  96     head bytes, then body bytes
//! ```
//!
//! All integers little-endian. A record is *complete* only when its commit
//! word equals `COMMIT ^ checksum` and the checksum matches the bytes: the
//! writer stores the commit word after everything else, so a process killed
//! mid-object (even with SIGKILL, whose page-cache writes survive) leaves a
//! record without it, and a torn write after a power loss fails the checksum.
//! The freshness fields have their own small checksum because a 304
//! revalidation rewrites them in place: a torn rewrite reads back as "stale"
//! (revalidate), never as a corrupt object.

use super::checksum::Checksum;
use super::ObjectMeta;
use crate::Id;

/// Bytes of the fixed record header.
pub const HEADER_BYTES: usize = 96;
/// Records start at multiples of this (keeps headers in one cache line).
pub const RECORD_ALIGN: u64 = 64;
/// The record magic, "CRLR".
pub const MAGIC: u32 = u32::from_le_bytes(*b"CRLR");
/// The format version.
pub const VERSION: u16 = 1;
/// XORed with the checksum to form the commit word.
pub const COMMIT: u64 = 0xC0DA_15C0_4417_ED00;
/// Flag: the writer gave up (never committed).
pub const FLAG_FAILED: u16 = 1;
/// Flag: committed (set after the commit word, for readers in memory).
pub const FLAG_COMPLETE: u16 = 2;
/// Flag: removed from the cache (`remove`); not restored at restart.
pub const FLAG_REMOVED: u16 = 4;
/// Offset of the flags (a u16; with the version, the u32 at offset 4).
pub const FLAGS_AT: usize = 6;

/// `expected_len` when unknown.
const LEN_UNKNOWN: u64 = u64::MAX;

/// Offset of the reserved length field.
pub const ALLOC_LEN_AT: usize = 32;
/// Offset of the body length field.
pub const BODY_LEN_AT: usize = 72;
/// Offset of the checksum field.
pub const CHECKSUM_AT: usize = 80;
/// Offset of the commit word.
pub const COMMIT_AT: usize = 88;
/// Offset of the freshness fields (`stored_secs`..`meta_check`).
pub const META_AT: usize = 40;
/// Bytes of the freshness fields including their checksum.
pub const META_BYTES: usize = 32;

/// Why a record is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than a header, or lengths that run past the segment.
    Truncated,
    /// Not a record (wrong magic or version): the rest of the segment is unused.
    NotARecord,
    /// A record whose commit word is missing: cut short by a crash or aborted.
    Uncommitted {
        /// Bytes reserved for it: the next record starts this far on.
        alloc_len: u64,
    },
    /// Committed, but the bytes do not match the checksum.
    Corrupt {
        /// Bytes reserved for it.
        alloc_len: u64,
    },
    /// Complete, but removed from the cache before the restart.
    Removed {
        /// Bytes reserved for it.
        alloc_len: u64,
    },
}

impl RecordError {
    /// Where the next record may start, if this one's length is known.
    pub fn skip(&self) -> Option<u64> {
        match *self {
            RecordError::Uncommitted { alloc_len }
            | RecordError::Corrupt { alloc_len }
            | RecordError::Removed { alloc_len } => Some(alloc_len),
            RecordError::Truncated | RecordError::NotARecord => None,
        }
    }
}

/// A complete record read back from a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The cache key.
    pub key: Id,
    /// Freshness; `None` fields' checksum failed (treat as stale).
    pub meta: ObjectMeta,
    /// Whether `meta` passed its checksum.
    pub meta_ok: bool,
    /// Head bytes, starting at `HEADER_BYTES`.
    pub head_len: u32,
    /// Body bytes, starting at `HEADER_BYTES + head_len`.
    pub body_len: u64,
    /// Bytes the record occupies (aligned).
    pub alloc_len: u64,
}

/// Rounds `n` up to a multiple of [`RECORD_ALIGN`].
pub fn align_up(n: u64) -> u64 {
    n.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// Bytes a record with these lengths needs (aligned).
pub fn record_len(head_len: usize, body_len: u64) -> u64 {
    align_up(HEADER_BYTES as u64 + head_len as u64 + body_len)
}

fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

/// The freshness fields and their checksum, as stored at [`META_AT`].
pub fn encode_meta(meta: &ObjectMeta) -> [u8; META_BYTES] {
    let mut out = [0u8; META_BYTES];
    put_u64(&mut out, 0, meta.stored_secs);
    put_u64(&mut out, 8, meta.fresh_until_secs);
    put_u64(&mut out, 16, meta.expected_len.unwrap_or(LEN_UNKNOWN));
    let check = Checksum::of(&out[..24]);
    put_u64(&mut out, 24, check);
    out
}

fn decode_meta(bytes: &[u8]) -> (ObjectMeta, bool) {
    let expected = get_u64(bytes, 16);
    let meta = ObjectMeta {
        stored_secs: get_u64(bytes, 0),
        fresh_until_secs: get_u64(bytes, 8),
        expected_len: (expected != LEN_UNKNOWN).then_some(expected),
    };
    let ok = Checksum::of(&bytes[..24]) == get_u64(bytes, 24);
    (meta, ok)
}

/// The header written when an object starts: everything but the body
/// length, checksum and commit word (zero until `finish`).
pub fn encode_header(
    key: &Id,
    meta: &ObjectMeta,
    head_len: u32,
    alloc_len: u64,
) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
    h[8..28].copy_from_slice(&key.0);
    h[28..32].copy_from_slice(&head_len.to_le_bytes());
    put_u64(&mut h, ALLOC_LEN_AT, alloc_len);
    h[META_AT..META_AT + META_BYTES].copy_from_slice(&encode_meta(meta));
    h
}

/// The content checksum a writer accumulates: key and head first (see
/// [`content_checksum_start`]), then the body, then the body length.
pub fn content_checksum_start(key: &Id, head: &[u8]) -> Checksum {
    let mut c = Checksum::new();
    c.update(&key.0);
    c.update(&(head.len() as u32).to_le_bytes());
    c.update(head);
    c
}

/// Finishes a content checksum with the body length.
pub fn content_checksum_finish(mut c: Checksum, body_len: u64) -> u64 {
    c.update(&body_len.to_le_bytes());
    c.finish()
}

/// Checks a record's header alone (its first [`HEADER_BYTES`] bytes), with
/// `room` bytes left in the segment from the record's start: the record's
/// length if it is committed and not removed, so that only such records
/// need reading whole ([`read_record`] then verifies them). Lets a restart
/// read segments with `pread` a record at a time, never touching the
/// unwritten rest of a sparse file.
pub fn read_header(header: &[u8], room: u64) -> Result<u64, RecordError> {
    if header.len() < HEADER_BYTES || room < HEADER_BYTES as u64 {
        return Err(RecordError::Truncated);
    }
    if get_u32(header, 0) != MAGIC || u16::from_le_bytes([header[4], header[5]]) != VERSION {
        return Err(RecordError::NotARecord);
    }
    let alloc_len = get_u64(header, ALLOC_LEN_AT);
    if alloc_len < HEADER_BYTES as u64 || alloc_len % RECORD_ALIGN != 0 || alloc_len > room {
        return Err(RecordError::Truncated);
    }
    if get_u64(header, COMMIT_AT) != COMMIT ^ get_u64(header, CHECKSUM_AT) {
        return Err(RecordError::Uncommitted { alloc_len });
    }
    let flags = u16::from_le_bytes([header[FLAGS_AT], header[FLAGS_AT + 1]]);
    if flags & FLAG_REMOVED != 0 {
        return Err(RecordError::Removed { alloc_len });
    }
    Ok(alloc_len)
}

/// Reads the record at the start of `seg` (the rest of the segment from
/// the record's offset). Checks the commit word and, with `verify`, the
/// content checksum over every byte.
pub fn read_record(seg: &[u8], verify: bool) -> Result<Record, RecordError> {
    if seg.len() < HEADER_BYTES {
        return Err(RecordError::Truncated);
    }
    if get_u32(seg, 0) != MAGIC || u16::from_le_bytes([seg[4], seg[5]]) != VERSION {
        return Err(RecordError::NotARecord);
    }
    let mut key = [0u8; 20];
    key.copy_from_slice(&seg[8..28]);
    let key = Id(key);
    let head_len = get_u32(seg, 28);
    let alloc_len = get_u64(seg, ALLOC_LEN_AT);
    if alloc_len < HEADER_BYTES as u64
        || alloc_len % RECORD_ALIGN != 0
        || alloc_len > seg.len() as u64
    {
        return Err(RecordError::Truncated);
    }
    let (meta, meta_ok) = decode_meta(&seg[META_AT..META_AT + META_BYTES]);
    let body_len = get_u64(seg, BODY_LEN_AT);
    let checksum = get_u64(seg, CHECKSUM_AT);
    let commit = get_u64(seg, COMMIT_AT);
    if commit != COMMIT ^ checksum {
        return Err(RecordError::Uncommitted { alloc_len });
    }
    let flags = u16::from_le_bytes([seg[FLAGS_AT], seg[FLAGS_AT + 1]]);
    if flags & FLAG_REMOVED != 0 {
        return Err(RecordError::Removed { alloc_len });
    }
    let total = (HEADER_BYTES as u64)
        .checked_add(u64::from(head_len))
        .and_then(|n| n.checked_add(body_len));
    match total {
        Some(t) if t <= alloc_len => {}
        _ => return Err(RecordError::Corrupt { alloc_len }),
    }
    if verify {
        let head_end = HEADER_BYTES + head_len as usize;
        let body_end = head_end + body_len as usize;
        let c = content_checksum_start(&key, &seg[HEADER_BYTES..head_end]);
        let mut c = c;
        c.update(&seg[head_end..body_end]);
        if content_checksum_finish(c, body_len) != checksum {
            return Err(RecordError::Corrupt { alloc_len });
        }
    }
    Ok(Record {
        key,
        meta,
        meta_ok,
        head_len,
        body_len,
        alloc_len,
    })
}

/// Writes a whole record into `out` (which must be `record_len` bytes or
/// more), commit word last. For tests and for copying objects forward.
pub fn write_record(out: &mut [u8], key: &Id, meta: &ObjectMeta, head: &[u8], body: &[u8]) -> u64 {
    let alloc_len = record_len(head.len(), body.len() as u64);
    let h = encode_header(key, meta, head.len() as u32, alloc_len);
    out[..HEADER_BYTES].copy_from_slice(&h);
    let head_end = HEADER_BYTES + head.len();
    out[HEADER_BYTES..head_end].copy_from_slice(head);
    out[head_end..head_end + body.len()].copy_from_slice(body);
    let mut c = content_checksum_start(key, head);
    c.update(body);
    let sum = content_checksum_finish(c, body.len() as u64);
    put_u64(out, BODY_LEN_AT, body.len() as u64);
    put_u64(out, CHECKSUM_AT, sum);
    put_u64(out, COMMIT_AT, COMMIT ^ sum);
    alloc_len
}

/// The two words `finish` writes: (checksum, commit), commit last.
pub fn commit_words(checksum: u64) -> (u64, u64) {
    (checksum, COMMIT ^ checksum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            stored_secs: 100,
            fresh_until_secs: 200,
            expected_len: Some(5),
        }
    }

    #[test]
    fn record_round_trips() {
        let key = Id([7; 20]);
        let mut buf = vec![0u8; 4096];
        let len = write_record(
            &mut buf,
            &key,
            &meta(),
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"hello",
        );
        assert_eq!(len, record_len(19, 5));
        let r = read_record(&buf, true).unwrap();
        assert_eq!(r.key, key);
        assert_eq!(r.meta, meta());
        assert!(r.meta_ok);
        assert_eq!((r.head_len, r.body_len, r.alloc_len), (19, 5, len));
    }

    #[test]
    fn crash_before_commit_word_is_uncommitted() {
        let key = Id([7; 20]);
        let mut buf = vec![0u8; 4096];
        let len = write_record(&mut buf, &key, &meta(), b"h", b"body");
        buf[COMMIT_AT..COMMIT_AT + 8].fill(0);
        assert_eq!(
            read_record(&buf, true),
            Err(RecordError::Uncommitted { alloc_len: len })
        );
    }

    #[test]
    fn flipped_body_byte_is_corrupt() {
        let key = Id([7; 20]);
        let mut buf = vec![0u8; 4096];
        let len = write_record(&mut buf, &key, &meta(), b"h", b"body");
        buf[HEADER_BYTES + 2] ^= 1;
        assert_eq!(
            read_record(&buf, true),
            Err(RecordError::Corrupt { alloc_len: len })
        );
    }

    #[test]
    fn torn_meta_reads_back_as_not_ok() {
        let key = Id([7; 20]);
        let mut buf = vec![0u8; 4096];
        write_record(&mut buf, &key, &meta(), b"h", b"body");
        buf[META_AT + 8] ^= 0x40;
        let r = read_record(&buf, true).unwrap();
        assert!(!r.meta_ok);
    }

    #[test]
    fn a_removed_record_is_not_restored() {
        let key = Id([7; 20]);
        let mut buf = vec![0u8; 4096];
        let len = write_record(&mut buf, &key, &meta(), b"h", b"body");
        buf[FLAGS_AT] |= FLAG_REMOVED as u8;
        assert_eq!(
            read_record(&buf, true),
            Err(RecordError::Removed { alloc_len: len })
        );
    }

    #[test]
    fn zeroes_are_not_a_record() {
        assert_eq!(read_record(&[0u8; 256], true), Err(RecordError::NotARecord));
        assert_eq!(read_record(&[0u8; 10], true), Err(RecordError::Truncated));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_never_panic_and_never_read_as_complete_unless_committed(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)
        ) {
            if let Ok(r) = read_record(&bytes, true) {
                // Only possible if the commit word and checksum agree.
                let sum = get_u64(&bytes, CHECKSUM_AT);
                proptest::prop_assert_eq!(get_u64(&bytes, COMMIT_AT), COMMIT ^ sum);
                proptest::prop_assert!(r.alloc_len as usize <= bytes.len());
            }
        }

        #[test]
        fn a_record_cut_anywhere_before_its_commit_is_never_complete(
            head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            cut in 0usize..512,
        ) {
            // Write everything except the commit word, as a writer killed
            // between its last body byte and the commit would leave it.
            let key = Id([1; 20]);
            let mut full = vec![0u8; 512];
            write_record(&mut full, &key, &meta(), &head, &body);
            let mut partial = vec![0u8; 512];
            let n = cut.min(full.len());
            partial[..n].copy_from_slice(&full[..n]);
            partial[COMMIT_AT..COMMIT_AT + 8].fill(0);
            proptest::prop_assert!(read_record(&partial, true).is_err());
        }
    }
}
