//! Targeted cache control (RFC 9213): `Coral-Cache-Control` (coral's own)
//! and `CDN-Cache-Control` (every CDN's), read as Structured Field
//! Dictionaries (RFC 8941 §3.2), whose directives then replace
//! `Cache-Control` and `Expires` for this cache.
//!
//! A field that does not parse as a Dictionary, or whose known directives
//! have values of the wrong type (`max-age="60"`, RFC 9213 §2.2: "SHOULD
//! NOT consume values that violate these inferred constraints"), is
//! ignored whole: the next field in the target list, then `Cache-Control`,
//! decides. Ignoring only the bad directive would leave a valid but empty
//! policy that overrides the origin's `Cache-Control` — a `no-store` there
//! would be lost to a typo in the targeted field.

use super::super::http::Headers;
use super::{delta_seconds_value, CacheControl};

/// The targeted fields coral obeys, most specific first (its target list).
pub const TARGET_LIST: [&str; 2] = ["coral-cache-control", "cdn-cache-control"];

/// Longest targeted field (all its lines joined) that is parsed; a longer
/// one is ignored, as invalid.
pub const TARGETED_BYTES_MAX: usize = crate::limits::PROXY.targeted_field_bytes_max;

/// A bare item's type (RFC 8941 §3.3), as far as cache directives care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    Integer(i64),
    Decimal,
    String,
    Token,
    Bytes,
    Boolean(bool),
}

/// The directives of the first valid, non-empty field of [`TARGET_LIST`]
/// (RFC 9213 §2.1), or `None` when there is none.
pub(super) fn targeted_cache_control(h: &Headers) -> Option<CacheControl> {
    TARGET_LIST.iter().find_map(|name| {
        let mut joined: Vec<u8> = Vec::new();
        for (i, v) in h.get_all(name).enumerate() {
            if i > 0 {
                joined.extend_from_slice(b", ");
            }
            joined.extend_from_slice(v);
            if joined.len() > TARGETED_BYTES_MAX {
                return None;
            }
        }
        parse(&joined)
    })
}

/// A targeted field's value as cache directives; `None` if it is not a
/// valid, non-empty Dictionary of well-typed directives.
pub(super) fn parse(v: &[u8]) -> Option<CacheControl> {
    let mut cc = CacheControl::default();
    let mut p = Parser { v, i: 0 };
    p.skip_sp();
    if p.at_end() {
        return None;
    }
    loop {
        let key = p.key()?;
        let item = if p.eat(b'=') {
            p.bare_item()?
        } else {
            Item::Boolean(true)
        };
        p.parameters()?;
        apply(&mut cc, key, item)?;
        p.skip_ows();
        if p.at_end() {
            return Some(cc);
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip_ows();
        if p.at_end() {
            // A trailing comma.
            return None;
        }
    }
}

/// Records one directive; `None` when a known directive has a value of the
/// wrong type. A later duplicate key overrides an earlier one (RFC 8941
/// §4.2.2); unknown directives are ignored.
fn apply(cc: &mut CacheControl, key: &[u8], item: Item) -> Option<()> {
    let flag = |item: Item| match item {
        Item::Boolean(b) => Some(b),
        _ => None,
    };
    let flag_or_list = |item: Item| match item {
        Item::Boolean(b) => Some(b),
        Item::String => Some(true),
        _ => None,
    };
    let seconds = |item: Item| match item {
        Item::Integer(n) if n >= 0 => Some(Some(delta_seconds_value(
            u64::try_from(n).unwrap_or(u64::MAX),
        ))),
        _ => None,
    };
    match key {
        b"no-store" => cc.no_store = flag(item)?,
        b"no-cache" => cc.no_cache = flag_or_list(item)?,
        b"private" => cc.private = flag_or_list(item)?,
        b"public" => cc.public = flag(item)?,
        b"must-revalidate" => cc.must_revalidate = flag(item)?,
        b"proxy-revalidate" => cc.proxy_revalidate = flag(item)?,
        b"max-age" => cc.max_age = Some(seconds(item)?),
        b"s-maxage" => cc.s_maxage = Some(seconds(item)?),
        _ => {}
    }
    Some(())
}

struct Parser<'a> {
    v: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn at_end(&self) -> bool {
        self.i >= self.v.len()
    }

    fn peek(&self) -> Option<u8> {
        self.v.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        match self.peek() {
            Some(b'a'..=b'z' | b'*') => self.i += 1,
            _ => return None,
        }
        while matches!(
            self.peek(),
            Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')
        ) {
            self.i += 1;
        }
        self.v.get(start..self.i)
    }

    /// `parameters = *( ";" *SP key [ "=" bare-item ] )`
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip_sp();
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    fn bare_item(&mut self) -> Option<Item> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b'A'..=b'Z' | b'a'..=b'z' | b'*' => {
                self.i += 1;
                while matches!(self.peek(), Some(c) if crate::proxy::http::is_tchar(c) || c == b':' || c == b'/')
                {
                    self.i += 1;
                }
                Some(Item::Token)
            }
            b':' => {
                self.i += 1;
                while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='))
                {
                    self.i += 1;
                }
                self.eat(b':').then_some(Item::Bytes)
            }
            b'?' => {
                self.i += 1;
                let b = match self.peek()? {
                    b'0' => false,
                    b'1' => true,
                    _ => return None,
                };
                self.i += 1;
                Some(Item::Boolean(b))
            }
            _ => None,
        }
    }

    /// RFC 8941 §4.2.4: at most 15 integer digits, or 12 and 3 decimals.
    fn number(&mut self) -> Option<Item> {
        let negative = self.eat(b'-');
        let start = self.i;
        let mut dot = None;
        while let Some(c) = self.peek() {
            match c {
                b'0'..=b'9' => {}
                b'.' if dot.is_none() => dot = Some(self.i),
                _ => break,
            }
            self.i += 1;
        }
        let text = self.v.get(start..self.i)?;
        match dot {
            None => {
                if text.is_empty() || text.len() > 15 {
                    return None;
                }
                let n = text.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
                Some(Item::Integer(if negative { -n } else { n }))
            }
            Some(d) => {
                let (int, frac) = (d - start, self.i - d - 1);
                ((1..=12).contains(&int) && (1..=3).contains(&frac)).then_some(Item::Decimal)
            }
        }
    }

    /// A String: printable ASCII, `\"` and `\\` the only escapes.
    fn string(&mut self) -> Option<Item> {
        self.i += 1;
        loop {
            match self.peek()? {
                b'\\' => {
                    self.i += 1;
                    if !matches!(self.peek()?, b'"' | b'\\') {
                        return None;
                    }
                }
                b'"' => {
                    self.i += 1;
                    return Some(Item::String);
                }
                0x20..=0x7e => {}
                _ => return None,
            }
            self.i += 1;
        }
    }
}
