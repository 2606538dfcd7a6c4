//! Keeping clients inside Coral (NSDI 2004 §2.1): a redirect or an absolute link to the
//! origin host would send the browser straight to the origin; rewritten to its Coralized
//! form it comes back through a Coral proxy. Relative links need nothing: they resolve
//! against the Coralized page URL.

use super::names::{coralized_host, Origin};

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
/// `http://<Coralized host>[:<proxy port>]`, in attributes and text alike. The input may
/// be split anywhere: at most a link's length of bytes is held back between calls, and
/// the output is the same however the input was split.
#[derive(Clone, Debug)]
pub struct HtmlRewriter {
    host: Vec<u8>,
    port: u16,
    replacement: Vec<u8>,
    pending: Vec<u8>,
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
    fn process(&self, buf: &[u8], eof: bool, out: &mut Vec<u8>) -> usize {
        let mut i = 0;
        let mut copied = 0;
        while let Some(p) = buf
            .get(i..)
            .and_then(|s| s.iter().position(|&b| b == b'h' || b == b'H'))
        {
            i += p;
            match self.match_at(buf.get(i..).unwrap_or_default(), eof) {
                Match::No => i += 1,
                Match::NeedMore => {
                    out.extend_from_slice(buf.get(copied..i).unwrap_or_default());
                    return i;
                }
                Match::Yes(n) => {
                    out.extend_from_slice(buf.get(copied..i).unwrap_or_default());
                    out.extend_from_slice(&self.replacement);
                    i += n;
                    copied = i;
                }
            }
        }
        out.extend_from_slice(buf.get(copied..).unwrap_or_default());
        buf.len()
    }

    fn match_at(&self, s: &[u8], eof: bool) -> Match {
        let out_of_input = if eof { Match::No } else { Match::NeedMore };
        let want = b"http://".iter().chain(self.host.iter());
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
