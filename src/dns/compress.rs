//! The answer buffer ([`Wire`]) and name compression (RFC 1035 §4.1.4),
//! shared by the builder's path and the fast path ([`put_name`]).

use super::*;

/// The answer buffer: a plain `Vec` the builder appends to, reused across
/// queries (domain's own `Vec` builder needs its `std` feature), and name
/// compression (RFC 1035 §4.1.4) over flat copies of the names written.
///
/// domain's `StaticCompressor` compares label by label through generic
/// iterators, for every suffix against every name: a quarter of the CPU
/// time of an answer. Here each name is flattened once and each of its
/// suffixes compared as bytes (ASCII case folded) with the tails of the
/// names already written; the longest match becomes a pointer.
pub(super) struct Wire {
    pub(super) buf: Vec<u8>,
    /// Boxed: the builders move the target by value at every section.
    pub(super) c: Box<Compress>,
}

/// What the compressor remembers of the names written.
#[derive(Debug)]
pub(super) struct Compress {
    /// Flat (uncompressed) copies of the names written, back to back.
    pub(super) arena: Vec<u8>,
    /// (offset in the message, offset in the arena, flat length, octets
    /// written literally: positions below it may be pointed at).
    pub(super) names: [(u16, u16, u8, u8); COMPRESS_NAMES_MAX],
    pub(super) count: usize,
}

impl Compress {
    pub(super) fn new() -> Box<Compress> {
        Box::new(Compress {
            arena: Vec::with_capacity(512),
            names: [(0, 0, 0, 0); COMPRESS_NAMES_MAX],
            count: 0,
        })
    }

    /// Where the message already holds `suffix` (flat), if anywhere.
    pub(super) fn find(&self, suffix: &[u8]) -> Option<u16> {
        for &(msg_off, arena_off, len, literal) in &self.names[..self.count] {
            let (len, literal) = (usize::from(len), usize::from(literal));
            if len < suffix.len() {
                continue;
            }
            let at = len - suffix.len();
            if at >= literal {
                continue;
            }
            let start = usize::from(arena_off);
            let Some(tail) = self.arena.get(start + at..start + len) else {
                continue;
            };
            if !eq_fold(tail, suffix) {
                continue;
            }
            // `at` must be a label boundary of the remembered name.
            let mut p = 0;
            while p < at {
                p += 1 + usize::from(*self.arena.get(start + p)?);
            }
            if p == at {
                return Some(msg_off + at as u16);
            }
        }
        None
    }
}

impl Wire {
    pub(super) fn new(mut buf: Vec<u8>, mut c: Box<Compress>) -> Wire {
        buf.clear();
        c.arena.clear();
        c.count = 0;
        Wire { buf, c }
    }
}

impl OctetsBuilder for Wire {
    type AppendError = Infallible;
    fn append_slice(&mut self, slice: &[u8]) -> Result<(), Infallible> {
        self.buf.extend_from_slice(slice);
        Ok(())
    }
}

impl Truncate for Wire {
    fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
        let c = &mut self.c;
        while c.count > 0 && usize::from(c.names[c.count - 1].0) >= len {
            c.count -= 1;
        }
    }
}

impl AsRef<[u8]> for Wire {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl AsMut<[u8]> for Wire {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Composer for Wire {
    fn append_compressed_name<N: domain::base::ToName + ?Sized>(
        &mut self,
        name: &N,
    ) -> Result<(), Infallible> {
        // The name as flat octets: as it is when it has them (the query
        // name, copied flat once per query), else label by label.
        let mut local = [0u8; 256];
        let flat: &[u8] = match name.as_flat_slice() {
            Some(f) => f,
            None => {
                let mut len = 0;
                for label in name.iter_labels() {
                    let l = label.as_slice();
                    let Some(dst) = local.get_mut(len..len + 1 + l.len()) else {
                        break;
                    };
                    dst[0] = l.len() as u8;
                    dst[1..].copy_from_slice(l);
                    len += 1 + l.len();
                    if l.is_empty() {
                        break;
                    }
                }
                &local[..len]
            }
        };
        put_name(&mut self.buf, &mut self.c, flat);
        Ok(())
    }

    fn can_compress(&self) -> bool {
        true
    }
}

pub(super) type Target = Wire;

/// Eight octets with ASCII capitals made small (every other octet kept),
/// all at once (the SWAR form of `u8::to_ascii_lowercase`).
pub(super) fn lower8(x: u64) -> u64 {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low7 = x & !HIGH;
    // Bit 7 of each octet: set if its low seven bits are > 'Z', >= 'A'.
    let above_z = low7.wrapping_add(0x2525_2525_2525_2525);
    let from_a = low7.wrapping_add(0x3f3f_3f3f_3f3f_3f3f);
    let upper = (from_a ^ above_z) & !x & HIGH;
    x | (upper >> 2)
}

/// `a.eq_ignore_ascii_case(b)`, eight octets at a time: the compressor
/// compares names' tails with it for every name of every answer.
#[inline]
pub(super) fn eq_fold(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| -> u64 {
        let mut w = [0u8; 8];
        if let Some(c) = s.get(at..at + 8) {
            w.copy_from_slice(c);
        }
        u64::from_le_bytes(w)
    };
    let same = |at: usize| {
        let (x, y) = (word(a, at), word(b, at));
        x == y || lower8(x) == lower8(y)
    };
    if len < 8 {
        return a.eq_ignore_ascii_case(b);
    }
    // Eight octets at a time, the last eight overlapping the one before.
    let mut at = 0;
    while at + 8 < len {
        if !same(at) {
            return false;
        }
        at += 8;
    }
    same(len - 8)
}

/// Appends `flat` (a name in wire form, with its root label) to `buf`,
/// compressed against the names `c` remembers (RFC 1035 §4.1.4), and
/// remembers it: the one compression rule of every answer, built through
/// domain's builder ([`Wire`]) or directly (the fast path).
pub(super) fn put_name(buf: &mut Vec<u8>, c: &mut Compress, flat: &[u8]) {
    let len = flat.len();
    let mut bounds = [0u8; 128];
    let mut labels = 0;
    let mut p = 0;
    while p < len {
        let Some(b) = bounds.get_mut(labels) else {
            break;
        };
        *b = p as u8;
        labels += 1;
        p += 1 + usize::from(flat[p]);
    }
    // The root label is never pointed at.
    let named = labels.saturating_sub(1);
    let start = buf.len();
    let mut literal = len;
    let mut pointer = None;
    for &b in &bounds[..named] {
        if let Some(p) = c.find(&flat[usize::from(b)..len]) {
            literal = usize::from(b);
            pointer = Some(p);
            break;
        }
    }
    buf.extend_from_slice(&flat[..literal]);
    if let Some(p) = pointer {
        buf.extend_from_slice(&(p | 0xc000).to_be_bytes());
    }
    if literal > 0 && start < 0x3fff && c.count < COMPRESS_NAMES_MAX {
        let arena_off = c.arena.len();
        if arena_off + len <= usize::from(u16::MAX) {
            c.arena.extend_from_slice(&flat[..len]);
            c.names[c.count] = (
                start as u16,
                arena_off as u16,
                len as u8,
                literal.min(255) as u8,
            );
            c.count += 1;
        }
    }
}
