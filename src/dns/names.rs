//! The names dnssrv serves (the table in `mod.rs`): where a query name
//! falls ([`Place`]), the zone apexes and the `ns-<hex IP>` name servers,
//! and names built on the stack ([`NameBuf`]).

use super::*;

/// The zone apexes we serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Apex {
    Z,
    L0,
    L1,
    L2,
    Alias,
}

impl Apex {
    /// The level whose cluster's name servers the apex's NS set names.
    pub(super) fn level(self) -> usize {
        match self {
            Apex::Z | Apex::L0 | Apex::Alias => 0,
            Apex::L1 => 1,
            Apex::L2 => 2,
        }
    }

    pub(super) fn for_level(level: usize) -> Apex {
        match level {
            0 => Apex::L0,
            1 => Apex::L1,
            _ => Apex::L2,
        }
    }
}

/// The apex's index in `apex_flat` and `apex_names`.
pub(super) fn apex_index(apex: Apex) -> usize {
    match apex {
        Apex::Z => 0,
        Apex::L0 => 1,
        Apex::L1 => 2,
        Apex::L2 => 3,
        Apex::Alias => 4,
    }
}

/// Where a query name falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    Outside,
    Apex(Apex),
    NsHost(Apex, IpAddr),
    Proxy,
    /// Under the alias; `n` labels precede it.
    BelowAlias(usize),
    NxDomain(Apex),
}

/// A name as flat octets (sized, so that the compressor sees them flat).
pub(super) type Flat<'a> = Name<&'a [u8]>;

/// A domain name built on the stack.
pub(super) struct NameBuf {
    pub(super) b: [u8; 255],
    pub(super) len: usize,
}

impl NameBuf {
    pub(super) fn new() -> NameBuf {
        NameBuf {
            b: [0; 255],
            len: 0,
        }
    }

    /// Appends a label; false if it does not fit (the name stays as it was).
    pub(super) fn push(&mut self, label: &[u8]) -> bool {
        let n = label.len();
        if n == 0 || n > 63 || self.len + n + 2 > 255 {
            return false;
        }
        let Some(dst) = self.b.get_mut(self.len..self.len + 1 + n) else {
            return false;
        };
        dst[0] = n as u8;
        dst[1..].copy_from_slice(label);
        self.len += 1 + n;
        true
    }

    pub(super) fn push_all(&mut self, labels: &[Vec<u8>]) -> bool {
        labels.iter().all(|l| self.push(l))
    }

    /// Appends labels already in wire form (without the root).
    pub(super) fn push_flat(&mut self, flat: &[u8]) -> bool {
        let Some(dst) = self.b.get_mut(self.len..self.len + flat.len()) else {
            return false;
        };
        if self.len + flat.len() + 1 > 255 {
            return false;
        }
        dst.copy_from_slice(flat);
        self.len += flat.len();
        true
    }

    /// The name, with its root label.
    /// (A sized `Name<&[u8]>`: domain forwards `as_flat_slice`, which the
    /// compressor uses, for it but not through a reference.)
    pub(super) fn name(&mut self) -> Option<Flat<'_>> {
        *self.b.get_mut(self.len)? = 0;
        Name::from_octets(self.b.get(..self.len + 1)?).ok()
    }
}

pub(super) fn labels_of(name: &str) -> Vec<Vec<u8>> {
    name.split('.')
        .filter(|l| !l.is_empty())
        .map(|l| l.to_ascii_lowercase().into_bytes())
        .collect()
}

/// Whether `labels` ends with `suffix` (letter case ignored).
pub(super) fn ends_with(labels: &[&[u8]], suffix: &[Vec<u8>]) -> bool {
    labels.len() >= suffix.len()
        && labels[labels.len() - suffix.len()..]
            .iter()
            .zip(suffix)
            .all(|(a, b)| a.eq_ignore_ascii_case(b))
}

/// Decodes `ns-<8 or 32 hex digits>` into the address it names.
pub(super) fn ns_host(label: &[u8]) -> Option<IpAddr> {
    let hex = label
        .get(..3)
        .filter(|p| p.eq_ignore_ascii_case(b"ns-"))
        .and(label.get(3..))?;
    let mut v: u128 = 0;
    for &c in hex {
        v = (v << 4) | u128::from((c as char).to_digit(16)?);
    }
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(v as u32))),
        32 => Some(IpAddr::V6(Ipv6Addr::from(v))),
        _ => None,
    }
}

/// Writes the `ns-<hex>` label for `ip`.
pub(super) fn ns_label(ip: IpAddr, out: &mut [u8; 35]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out[..3].copy_from_slice(b"ns-");
    let (v, digits) = match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 8),
        IpAddr::V6(a) => (u128::from(a), 32),
    };
    for i in 0..digits {
        out[3 + i] = HEX[((v >> (4 * (digits - 1 - i))) & 0xf) as usize];
    }
    &out[..3 + digits]
}

impl Dnssrv {
    pub(super) fn classify(&self, labels: &[&[u8]]) -> Place {
        let zone_len = self.zone.len();
        let alias_len = self.alias.as_ref().map_or(0, Vec::len);
        let in_zone = ends_with(labels, &self.zone);
        let in_alias = self.alias.as_ref().is_some_and(|a| ends_with(labels, a));
        if in_alias && (!in_zone || alias_len > zone_len) {
            let rel = labels.len() - alias_len;
            return if rel == 0 {
                Place::Apex(Apex::Alias)
            } else {
                Place::BelowAlias(rel)
            };
        }
        if !in_zone {
            return Place::Outside;
        }
        let rel = &labels[..labels.len() - zone_len];
        let mut i = rel.len();
        let mut apex = Apex::Z;
        loop {
            if i == 0 {
                return Place::Apex(apex);
            }
            let next = rel[i - 1];
            let (want, then): (&[u8], Option<Apex>) = match apex {
                Apex::Z => (b"l0", Some(Apex::L0)),
                Apex::L0 => (b"l1", Some(Apex::L1)),
                Apex::L1 => (b"l2", Some(Apex::L2)),
                _ => (b"http", None),
            };
            if next.eq_ignore_ascii_case(want) {
                match then {
                    Some(a) => {
                        apex = a;
                        i -= 1;
                        continue;
                    }
                    None => return Place::Proxy,
                }
            }
            if i == 1 {
                if let Some(ip) = ns_host(next) {
                    return Place::NsHost(apex, ip);
                }
            }
            return Place::NxDomain(apex);
        }
    }

    /// Writes the apex's name (from its wire form, made once).
    pub(super) fn apex_name(&self, apex: Apex, nb: &mut NameBuf) -> bool {
        match self.apex_flat.get(apex_index(apex)) {
            Some(f) if apex != Apex::Alias || self.alias.is_some() => nb.push_flat(f),
            _ => false,
        }
    }

    /// Builds the apex's name label by label.
    pub(super) fn apex_name_slow(&self, apex: Apex, nb: &mut NameBuf) -> bool {
        let ok = match apex {
            Apex::Z => true,
            Apex::L0 => nb.push(b"L0"),
            Apex::L1 => nb.push(b"L1") && nb.push(b"L0"),
            Apex::L2 => nb.push(b"L2") && nb.push(b"L1") && nb.push(b"L0"),
            Apex::Alias => {
                return self.alias.as_ref().is_some_and(|a| nb.push_all(a));
            }
        };
        ok && nb.push_all(&self.zone)
    }

    /// Writes `ns-<hex>.<apex>`; the alias's name servers live in Z.
    pub(super) fn ns_name(&self, apex: Apex, ip: IpAddr, nb: &mut NameBuf) -> bool {
        let mut l = [0u8; 35];
        let apex = if apex == Apex::Alias { Apex::Z } else { apex };
        nb.push(ns_label(ip, &mut l)) && self.apex_name(apex, nb)
    }

    /// The index in `ns_cache` of `ns-<hex ip>.<apex>`, made if missing (a
    /// full cache is emptied first: it holds what the view names, a few).
    #[inline]
    pub(super) fn ns_name_cached(&mut self, apex: Apex, ip: IpAddr) -> Option<usize> {
        match self
            .ns_cache
            .iter()
            .position(|n| n.apex == apex && n.ip == ip)
        {
            Some(i) => Some(i),
            None => self.ns_name_make(apex, ip),
        }
    }

    /// [`Dnssrv::ns_name_cached`] when the name is not made yet: makes it
    /// (apart, so that the common case, a name made, is inlined where it
    /// is asked for; issue 27).
    #[cold]
    fn ns_name_make(&mut self, apex: Apex, ip: IpAddr) -> Option<usize> {
        if self.ns_cache.len() >= NS_CACHE_MAX {
            self.ns_cache.clear();
        }
        let mut nb = NameBuf::new();
        if !self.ns_name(apex, ip, &mut nb) {
            return None;
        }
        let name = Name::from_octets(nb.name()?.as_slice().to_vec()).ok()?;
        let record = super::fast::NsRecord::new(name.as_slice())?;
        self.ns_cache.push(NsName {
            apex,
            ip,
            name,
            record,
        });
        Some(self.ns_cache.len() - 1)
    }
}
