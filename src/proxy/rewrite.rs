//! Keeping clients inside Coral (NSDI 2004 §2.1): a redirect or an absolute link to the
//! origin host would send the browser straight to the origin; rewritten to its Coralized
//! form it comes back through a Coral proxy. Relative links need nothing: they resolve
//! against the Coralized page URL.

use super::http::{trim_ows, ResponseHead};
use super::names::{coralized_host, Origin};

/// Rewrites the fields of an origin's response head that hold URLs a browser follows
/// (`Location`, `Content-Location`) to their Coralized form when
/// they point at the origin. Returns how many fields changed.
pub fn head(resp: &mut ResponseHead, origin: &Origin, suffix: &str, proxy_port: u16) -> usize {
    let mut changed = Vec::new();
    for (n, v) in resp.headers.iter() {
        if n != "location" && n != "content-location" {
            continue;
        }
        if let Some(new) = core::str::from_utf8(v)
            .ok()
            .and_then(|v| location(v, origin, suffix, proxy_port))
        {
            changed.push((n.to_string(), new));
        }
    }
    for (n, new) in &changed {
        resp.headers.set(n, new.as_bytes());
    }
    changed.len()
}

/// Whether a response body is HTML we can rewrite: `text/html` or XHTML, and not
/// content-coded (a compressed body is passed through untouched).
pub fn body_is_rewritable(resp: &ResponseHead) -> bool {
    let html = resp.headers.get("content-type").is_some_and(|ct| {
        let mime = trim_ows(ct.split(|&b| b == b';').next().unwrap_or_default());
        mime.eq_ignore_ascii_case(b"text/html")
            || mime.eq_ignore_ascii_case(b"application/xhtml+xml")
    });
    let coded = resp
        .headers
        .list("content-encoding")
        .any(|c| !c.eq_ignore_ascii_case(b"identity"));
    html && !coded
}

/// The Coralized form of a `Location` value that points at `origin` (absolute `http://`
/// URL with the origin's host and port, or scheme-relative `//host/...`); `None` when it
/// points elsewhere or is relative (leave it unchanged).
pub fn location(value: &str, origin: &Origin, suffix: &str, proxy_port: u16) -> Option<String> {
    let value = value.trim_matches([' ', '\t']);
    let (scheme, rest) = if value
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    {
        ("http://", value.get(7..)?)
    } else if let Some(rest) = value.strip_prefix("//") {
        ("//", rest)
    } else {
        return None;
    };
    let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    if authority.contains('@') {
        return None;
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, "")) => (h, 80),
        Some((h, p)) => (h, p.parse::<u16>().ok()?),
        None => (authority, 80),
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if !host.eq_ignore_ascii_case(&origin.host) || port != origin.port {
        return None;
    }
    let mut out = String::with_capacity(value.len() + suffix.len() + 8);
    out.push_str(scheme);
    out.push_str(&coralized_host(origin, suffix));
    if proxy_port != 80 {
        out.push(':');
        out.push_str(&proxy_port.to_string());
    }
    out.push_str(if path.is_empty() && scheme == "//" {
        "/"
    } else {
        path
    });
    Some(out)
}

/// What [`HtmlRewriter`] can tell at one position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Match {
    /// No link to the origin starts here.
    No,
    /// The input ends before we can tell.
    NeedMore,
    /// A link to the origin: its scheme and authority are this many bytes.
    Yes(usize),
}

/// Bytes that continue a host name or authority: after the origin host, one of these
/// means a different host (`x.com.evil`, `x.com@evil`), so no rewrite.
fn continues_authority(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~' | b'%' | b'@')
}

/// Streaming rewriter of absolute links to the origin in an HTML (or CSS, JS) body:
/// `http://host[:port]` (any case) followed by anything that ends an authority becomes
/// `http://<Coralized host>[:<proxy port>]`, in attributes and text alike; a
/// scheme-relative `//host[:port]` after a quote, `=` or `(` likewise. The input may
/// be split anywhere: at most a link's length of bytes is held back between calls, and
/// the output is the same however the input was split.
#[derive(Clone, Debug)]
pub struct HtmlRewriter {
    host: Vec<u8>,
    port: u16,
    /// `http://<Coralized host>[:port]`; from index 5 on, the scheme-relative form.
    replacement: Vec<u8>,
    pending: Vec<u8>,
    /// The byte before `pending` (or before the next input): a scheme-relative link
    /// counts only after a quote, `=` or `(`.
    prev: u8,
}

impl HtmlRewriter {
    /// A rewriter for links to `origin`, Coralized under `suffix` with `proxy_port`.
    pub fn new(origin: &Origin, suffix: &str, proxy_port: u16) -> HtmlRewriter {
        let mut replacement = b"http://".to_vec();
        replacement.extend_from_slice(coralized_host(origin, suffix).as_bytes());
        if proxy_port != 80 {
            replacement.push(b':');
            replacement.extend_from_slice(proxy_port.to_string().as_bytes());
        }
        HtmlRewriter {
            host: origin.host.to_ascii_lowercase().into_bytes(),
            port: origin.port,
            replacement,
            pending: Vec::new(),
            prev: 0,
        }
    }

    /// Rewrites `input`, appending to `out` all but a possible link prefix at its end.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.pending.is_empty() {
            let kept = self.process(input, false, out);
            self.pending
                .extend_from_slice(input.get(kept..).unwrap_or_default());
        } else {
            let mut work = core::mem::take(&mut self.pending);
            work.extend_from_slice(input);
            let kept = self.process(&work, false, out);
            work.drain(..kept);
            self.pending = work;
        }
    }

    /// The end of the body: flushes what was held back.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let work = core::mem::take(&mut self.pending);
        let kept = self.process(&work, true, out);
        out.extend_from_slice(work.get(kept..).unwrap_or_default());
    }

    /// Writes the rewritten prefix of `buf` to `out`; returns where the held-back suffix
    /// starts (`buf.len()` when nothing is held back).
    fn process(&mut self, buf: &[u8], eof: bool, out: &mut Vec<u8>) -> usize {
        let mut i = 0;
        let mut copied = 0;
        let kept = loop {
            let Some(p) = buf
                .get(i..)
                .and_then(|s| s.iter().position(|&b| matches!(b, b'h' | b'H' | b'/')))
            else {
                break buf.len();
            };
            i += p;
            let rest = buf.get(i..).unwrap_or_default();
            let (found, replacement) = if rest.first() == Some(&b'/') {
                // A scheme-relative link (`//host/...`) only where a URL starts: after a
                // quote, `=` or `(`; not in `http://` or a `// comment`.
                let prev = match i.checked_sub(1) {
                    Some(k) => buf.get(k).copied().unwrap_or(self.prev),
                    None => self.prev,
                };
                if matches!(prev, b'"' | b'\'' | b'=' | b'(') {
                    (
                        self.match_at(rest, eof, b"//"),
                        self.replacement.get(5..).unwrap_or_default(),
                    )
                } else {
                    (Match::No, &[][..])
                }
            } else {
                (self.match_at(rest, eof, b"http://"), &self.replacement[..])
            };
            match found {
                Match::No => i += 1,
                Match::NeedMore => break i,
                Match::Yes(n) => {
                    out.extend_from_slice(buf.get(copied..i).unwrap_or_default());
                    out.extend_from_slice(replacement);
                    i += n;
                    copied = i;
                }
            }
        };
        out.extend_from_slice(buf.get(copied..kept).unwrap_or_default());
        if let Some(&b) = kept.checked_sub(1).and_then(|k| buf.get(k)) {
            self.prev = b;
        }
        kept
    }

    fn match_at(&self, s: &[u8], eof: bool, scheme: &[u8]) -> Match {
        let out_of_input = if eof { Match::No } else { Match::NeedMore };
        let want = scheme.iter().chain(self.host.iter());
        let mut j = 0;
        for &w in want {
            match s.get(j) {
                None => return out_of_input,
                Some(b) if b.to_ascii_lowercase() == w => j += 1,
                Some(_) => return Match::No,
            }
        }
        let default_port = self.port == 80;
        match s.get(j) {
            None if eof => {
                if default_port {
                    Match::Yes(j)
                } else {
                    Match::No
                }
            }
            None => Match::NeedMore,
            Some(b':') => {
                let mut k = j + 1;
                let mut port: u32 = 0;
                loop {
                    match s.get(k) {
                        Some(d) if d.is_ascii_digit() => {
                            if k - j > 5 {
                                return Match::No;
                            }
                            port = port * 10 + u32::from(d - b'0');
                            k += 1;
                        }
                        Some(&b) if continues_authority(b) || b == b':' => return Match::No,
                        None if !eof => return Match::NeedMore,
                        _ => break,
                    }
                }
                if k == j + 1 || port != u32::from(self.port) {
                    return Match::No;
                }
                Match::Yes(k)
            }
            Some(&b) if continues_authority(b) => Match::No,
            Some(_) if default_port => Match::Yes(j),
            Some(_) => Match::No,
        }
    }
}

#[cfg(test)]
mod tests;
