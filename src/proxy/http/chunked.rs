//! Chunked transfer coding (RFC 9112 §7.1): the incremental decoder that holds
//! a body to our framing rules, and the writer of chunks.

use super::{HttpError, Limits, CHUNK_LINE_BYTES_MAX};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Reading hex digits of a chunk size.
    Size { digits: u32 },
    /// Whitespace after the size, before a `;`.
    SizeWs,
    /// A chunk extension: ignored up to CR.
    Ext,
    /// The LF after a size line.
    SizeLf,
    /// Chunk data: this many bytes left.
    Data { left: u64 },
    /// The CR after chunk data.
    DataCr,
    /// The LF after chunk data.
    DataLf,
    /// The start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field line: skipped.
    Trailer,
    /// The LF ending a trailer line.
    TrailerLf,
    /// The LF of the final empty line.
    EndLf,
    /// The body is complete.
    Done,
    /// The body was malformed; every later call returns the error.
    Failed(HttpError),
}

/// An incremental decoder of a chunked body (RFC 9112 §7.1): sizes in hex up to
/// `chunk_size_max`, extensions ignored, trailer fields skipped, every line ending in
/// CRLF. Feed it bytes as they arrive; it stops at the end of the body, so the bytes
/// after it (a pipelined request) are left to the caller.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: Chunk,
    size: u64,
    line_bytes: usize,
    trailer_bytes: usize,
    chunk_size_max: u64,
    trailer_bytes_max: usize,
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new(limits: &Limits) -> ChunkedDecoder {
        ChunkedDecoder {
            state: Chunk::Size { digits: 0 },
            size: 0,
            line_bytes: 0,
            trailer_bytes: 0,
            chunk_size_max: limits.chunk_size_max,
            trailer_bytes_max: limits.head_bytes_max,
        }
    }

    /// Whether the whole body has been decoded.
    pub fn is_done(&self) -> bool {
        self.state == Chunk::Done
    }

    fn fail(&mut self, e: HttpError) -> HttpError {
        self.state = Chunk::Failed(e);
        e
    }

    /// Decodes what it can of `input`, appending body bytes to `out`. Returns the bytes of
    /// `input` consumed and whether the body is complete (then `consumed` may be less than
    /// `input.len()`: the rest belongs to the next message).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(usize, bool), HttpError> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                Chunk::Done => return Ok((i, true)),
                Chunk::Failed(e) => return Err(e),
                Chunk::Data { left } => {
                    let avail = input.len() - i;
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(avail);
                    out.extend_from_slice(input.get(i..i + take).unwrap_or_default());
                    i += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        Chunk::DataCr
                    } else {
                        Chunk::Data { left }
                    };
                    continue;
                }
                _ => {}
            }
            let b = input.get(i).copied().unwrap_or_default();
            i += 1;
            if let Err(e) = self.step(b) {
                return Err(self.fail(e));
            }
            if self.state == Chunk::Done {
                return Ok((i, true));
            }
        }
        match self.state {
            Chunk::Failed(e) => Err(e),
            s => Ok((i, s == Chunk::Done)),
        }
    }

    fn step(&mut self, b: u8) -> Result<(), HttpError> {
        let bad = HttpError::bad;
        if matches!(self.state, Chunk::Size { .. } | Chunk::SizeWs | Chunk::Ext) {
            self.line_bytes += 1;
            if self.line_bytes > CHUNK_LINE_BYTES_MAX {
                return Err(bad("chunk size line too long"));
            }
        }
        if matches!(
            self.state,
            Chunk::TrailerStart | Chunk::Trailer | Chunk::TrailerLf
        ) {
            self.trailer_bytes += 1;
            if self.trailer_bytes > self.trailer_bytes_max {
                return Err(bad("chunked trailer too large"));
            }
        }
        self.state = match self.state {
            Chunk::Size { digits } => match hex_value(b) {
                Some(d) => {
                    self.size = self
                        .size
                        .checked_mul(16)
                        .and_then(|s| s.checked_add(u64::from(d)))
                        .filter(|&s| s <= self.chunk_size_max)
                        .ok_or(HttpError {
                            status: 413,
                            reason: "chunk too large",
                        })?;
                    Chunk::Size { digits: digits + 1 }
                }
                None if digits == 0 => return Err(bad("invalid chunk size")),
                None => match b {
                    b' ' | b'\t' => Chunk::SizeWs,
                    b';' => Chunk::Ext,
                    b'\r' => Chunk::SizeLf,
                    _ => return Err(bad("invalid chunk size")),
                },
            },
            Chunk::SizeWs => match b {
                b' ' | b'\t' => Chunk::SizeWs,
                b';' => Chunk::Ext,
                _ => return Err(bad("invalid chunk size")),
            },
            Chunk::Ext => match b {
                b'\r' => Chunk::SizeLf,
                b'\t' => Chunk::Ext,
                b if b < 0x20 || b == 0x7f => return Err(bad("invalid chunk extension")),
                _ => Chunk::Ext,
            },
            Chunk::SizeLf => match b {
                b'\n' if self.size == 0 => Chunk::TrailerStart,
                b'\n' => Chunk::Data { left: self.size },
                _ => return Err(bad("lone CR in a chunk size line")),
            },
            Chunk::DataCr => match b {
                b'\r' => Chunk::DataLf,
                _ => return Err(bad("chunk data longer than its size")),
            },
            Chunk::DataLf => match b {
                b'\n' => {
                    self.size = 0;
                    self.line_bytes = 0;
                    Chunk::Size { digits: 0 }
                }
                _ => return Err(bad("lone CR after chunk data")),
            },
            Chunk::TrailerStart => match b {
                b'\r' => Chunk::EndLf,
                b' ' | b'\t' => return Err(bad("obs-fold in a trailer")),
                b'\n' | 0 => return Err(bad("invalid trailer")),
                _ => Chunk::Trailer,
            },
            Chunk::Trailer => match b {
                b'\r' => Chunk::TrailerLf,
                b'\t' => Chunk::Trailer,
                b if b < 0x20 || b == 0x7f => return Err(bad("invalid trailer")),
                _ => Chunk::Trailer,
            },
            Chunk::TrailerLf => match b {
                b'\n' => Chunk::TrailerStart,
                _ => return Err(bad("lone CR in a trailer")),
            },
            Chunk::EndLf => match b {
                b'\n' => Chunk::Done,
                _ => return Err(bad("lone CR at the end of a chunked body")),
            },
            s @ (Chunk::Data { .. } | Chunk::Done | Chunk::Failed(_)) => s,
        };
        Ok(())
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Appends `data` as one chunk (nothing for empty `data`: an empty chunk would end the body).
pub fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    write_hex(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk and the empty trailer: the end of a chunked body.
pub fn write_last_chunk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n\r\n");
}

fn write_hex(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 16];
    let mut k = digits.len();
    loop {
        k -= 1;
        digits[k] = b"0123456789abcdef"[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[k..]);
}
