//! Coralized names (NSDI 2004 §2.1): `www.x.com.<zone>:8090/y.jpg` names the origin
//! `http://www.x.com/y.jpg`. A non-default origin port travels as a label
//! (`example.com.8080.<alias>` → `example.com:8080`); the `Host` field's own port is the
//! proxy's and is ignored. The cache key is SHA-1 of the canonical origin URL
//! `http://<lower-case host>:<port><path>[?query]` — explicit port, no fragment, no
//! trailing dot — the form `coral get url:` hashes too.

use crate::Id;

/// The names this deployment answers for (from `NodeConfig`: lower case, no trailing dot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zones {
    /// The zone dnssrv serves; proxies are `*.http.L2.L1.L0.<zone>` (§3.1).
    pub zone: String,
    /// The short alias (the paper's `nyud.net`), if any.
    pub alias: Option<String>,
}

impl Zones {
    /// The suffixes a Coralized host may end in, longest first: `http.l2.l1.l0.<zone>`,
    /// then the alias and the zone by length.
    pub fn suffixes(&self) -> Vec<String> {
        let mut s = vec![format!("http.l2.l1.l0.{}", self.zone), self.zone.clone()];
        if let Some(a) = &self.alias {
            s.push(a.clone());
        }
        s.sort_by_key(|x| core::cmp::Reverse(x.len()));
        s
    }

    /// Whether `host` (lower case, no trailing dot) is the zone or the alias or under one.
    pub fn covers(&self, host: &str) -> bool {
        let under = |z: &str| host == z || host.strip_suffix(z).is_some_and(|h| h.ends_with('.'));
        under(&self.zone) || self.alias.as_deref().is_some_and(under)
    }
}

/// An origin server: a host name or IPv4 address (lower case, no trailing dot) and a port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// Lower-case host name or dotted-quad IPv4 address.
    pub host: String,
    /// TCP port (80 unless the name carried one).
    pub port: u16,
}

impl core::fmt::Display for Origin {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.port == 80 {
            write!(f, "{}", self.host)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Why a name or URL was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameError {
    /// The host is not under the zone or the alias.
    NotCoralized,
    /// Nothing, or only a port, before the zone.
    Empty,
    /// A label that is empty, too long, or has characters a host name cannot have.
    Malformed(&'static str),
    /// A port of 0, over 65535, or not a number.
    BadPort,
    /// The origin is itself under our zone or alias: fetching it would loop.
    Loop,
    /// Not an `http://` URL.
    NotHttp,
    /// A request target that is not origin-form (`/path`).
    BadTarget,
}

impl core::fmt::Display for NameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NameError::NotCoralized => write!(f, "host is not under the Coral zone"),
            NameError::Empty => write!(f, "no origin host before the Coral zone"),
            NameError::Malformed(why) => write!(f, "malformed host name: {why}"),
            NameError::BadPort => write!(f, "invalid port"),
            NameError::Loop => write!(f, "origin is itself a Coralized name (loop)"),
            NameError::NotHttp => write!(f, "not an http:// URL"),
            NameError::BadTarget => write!(f, "request target is not origin-form"),
        }
    }
}

impl std::error::Error for NameError {}

/// Protocol constant: the longest host name (RFC 1035 §2.3.4, without the root dot).
pub const HOST_BYTES_MAX: usize = 253;
/// Protocol constant: the longest label (RFC 1035 §2.3.4).
pub const LABEL_BYTES_MAX: usize = 63;

/// Strips the port from a `Host` value (`h:8090`, `h:`); `None` if malformed. IP literals
/// (`[::1]`) are returned with their brackets.
fn strip_port(host_header: &str) -> Option<&str> {
    if host_header.starts_with('[') {
        let close = host_header.find(']')?;
        let rest = host_header.get(close + 1..)?;
        if !rest.is_empty() && !rest.strip_prefix(':')?.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        return host_header.get(..=close);
    }
    match host_header.split_once(':') {
        None => Some(host_header),
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => Some(h),
        Some(_) => None,
    }
}

fn parse_port(label: &str) -> Result<u16, NameError> {
    if label.is_empty() || label.len() > 5 || !label.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NameError::BadPort);
    }
    match label.parse::<u16>() {
        Ok(0) | Err(_) => Err(NameError::BadPort),
        Ok(p) => Ok(p),
    }
}

fn is_ipv4(host: &str) -> bool {
    host.parse::<std::net::Ipv4Addr>().is_ok()
}

/// Checks an origin host (lower case, no trailing dot): a dotted-quad IPv4 address, or a
/// name of labels `[a-z0-9_-]`, 1–63 bytes each, at most 253 in all, whose last label is
/// not all digits (a numeric top label would be read as a port or an address).
fn check_origin_host(host: &str) -> Result<(), NameError> {
    if host.is_empty() {
        return Err(NameError::Empty);
    }
    if is_ipv4(host) {
        return Ok(());
    }
    if host.len() > HOST_BYTES_MAX {
        return Err(NameError::Malformed("name longer than 253 bytes"));
    }
    let mut last = "";
    for label in host.split('.') {
        if label.is_empty() {
            return Err(NameError::Malformed("empty label"));
        }
        if label.len() > LABEL_BYTES_MAX {
            return Err(NameError::Malformed("label longer than 63 bytes"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(NameError::Malformed("character not allowed in a host name"));
        }
        last = label;
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NameError::Malformed("numeric top label"));
    }
    Ok(())
}

/// Splits a Coralized remainder (what precedes the zone) into origin host and port: a
/// numeric last label is the port unless the whole remainder is an IPv4 address.
fn origin_of_remainder(rest: &str) -> Result<Origin, NameError> {
    if rest.is_empty() {
        return Err(NameError::Empty);
    }
    if is_ipv4(rest) {
        return Ok(Origin {
            host: rest.to_string(),
            port: 80,
        });
    }
    let (host, port) = match rest.rsplit_once('.') {
        Some((h, last)) if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) => {
            (h, parse_port(last)?)
        }
        None if rest.bytes().all(|b| b.is_ascii_digit()) => return Err(NameError::Empty),
        _ => (rest, 80),
    };
    check_origin_host(host)?;
    Ok(Origin {
        host: host.to_string(),
        port,
    })
}

/// The origin a Coralized `Host` value names. The `Host`'s own port is dropped; the name
/// is lower-cased and loses a trailing dot; the longest of `http.L2.L1.L0.<zone>`,
/// `<alias>`, `<zone>` that it ends in is removed, and what precedes it is the origin
/// (with a numeric last label as its port). Refused: names outside the zones, empty or
/// malformed remainders, and remainders themselves under the zone or alias (a loop).
pub fn origin_of_host(host_header: &str, zones: &Zones) -> Result<Origin, NameError> {
    let host = strip_port(host_header.trim()).ok_or(NameError::Malformed("bad port in Host"))?;
    let mut host = host.to_ascii_lowercase();
    if host.ends_with('.') {
        host.pop();
    }
    // The longest suffix the host is (or ends in, at a label boundary): what precedes it.
    fn before<'h>(host: &'h str, suffix: &str) -> Option<&'h str> {
        match host.strip_suffix(suffix)? {
            "" => Some(""),
            rest => rest.strip_suffix('.'),
        }
    }
    let in_zone = before(&host, &zones.zone);
    let candidates = [
        (
            zones.zone.len() + ".http.l2.l1.l0".len(),
            in_zone.and_then(|r| before(r, "http.l2.l1.l0")),
        ),
        (
            zones.alias.as_ref().map_or(0, String::len),
            zones.alias.as_deref().and_then(|a| before(&host, a)),
        ),
        (zones.zone.len(), in_zone),
    ];
    let Some((_, Some(rest))) = candidates
        .into_iter()
        .filter(|(_, rest)| rest.is_some())
        .max_by_key(|(len, _)| *len)
    else {
        return Err(NameError::NotCoralized);
    };
    let origin = origin_of_remainder(rest)?;
    if zones.covers(&origin.host) {
        return Err(NameError::Loop);
    }
    Ok(origin)
}

/// The canonical origin URL of an origin-form target on `origin`:
/// `http://<host>:<port><path>[?query]`, fragment removed.
pub fn canonical_url(origin: &Origin, target: &str) -> Result<String, NameError> {
    if !target.starts_with('/') {
        return Err(NameError::BadTarget);
    }
    if !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(NameError::BadTarget);
    }
    let target = target.split('#').next().unwrap_or("/");
    let mut url = String::with_capacity(16 + origin.host.len() + target.len());
    url.push_str("http://");
    url.push_str(&origin.host);
    url.push(':');
    // Writing to a String cannot fail.
    let _ = core::fmt::Write::write_fmt(&mut url, format_args!("{}", origin.port));
    url.push_str(target);
    Ok(url)
}

/// The cache key of a canonical URL: SHA-1 of its bytes (§3.2).
pub fn cache_key(canonical_url: &str) -> Id {
    Id::hash(canonical_url.as_bytes())
}

/// Parses an `http://` URL into its origin and origin-form target (`/` when empty).
/// Refuses userinfo, bad ports, and hosts that are not names or IPv4 addresses.
pub fn parse_http_url(url: &str) -> Result<(Origin, String), NameError> {
    let url = url.trim();
    let (authority, rest) = crate::proxy::http::split_absolute(url).ok_or(NameError::NotHttp)?;
    if authority.contains('@') {
        return Err(NameError::Malformed("userinfo in URL"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, "")) => (h, 80),
        Some((h, p)) => (h, parse_port(p)?),
        None => (authority, 80),
    };
    let mut host = host.to_ascii_lowercase();
    if host.ends_with('.') {
        host.pop();
    }
    check_origin_host(&host)?;
    let path = rest.split('#').next().unwrap_or("");
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Ok((Origin { host, port }, path))
}

/// The canonical form of an `http://` URL, for `url:` keys: lower-case host without a
/// trailing dot, explicit port, path (at least `/`), no fragment. Idempotent.
pub fn canonicalize(url: &str) -> Result<String, NameError> {
    let (origin, path) = parse_http_url(url)?;
    canonical_url(&origin, &path)
}

/// The Coralized host of an origin under `suffix` (the alias or the zone):
/// `<host>[.<port>].<suffix>`, the port label only when it is not 80.
pub fn coralized_host(origin: &Origin, suffix: &str) -> String {
    if origin.port == 80 {
        format!("{}.{}", origin.host, suffix)
    } else {
        format!("{}.{}.{}", origin.host, origin.port, suffix)
    }
}

/// The Coralized form of an `http://` URL: `http://<coralized host>[:<proxy port>]<path>`
/// (the proxy port omitted when it is 80).
pub fn coralize(url: &str, suffix: &str, proxy_port: u16) -> Result<String, NameError> {
    let (origin, path) = parse_http_url(url)?;
    let mut out = format!("http://{}", coralized_host(&origin, suffix));
    if proxy_port != 80 {
        out.push(':');
        out.push_str(&proxy_port.to_string());
    }
    out.push_str(&path);
    Ok(out)
}

#[cfg(test)]
mod tests;
