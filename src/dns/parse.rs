//! Reading a query: the question and its EDNS record (RFC 6891), with the
//! Client Subnet option (RFC 7871), checked as a whole message.

use super::*;

/// What the query said about EDNS.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Edns {
    pub(super) present: bool,
    pub(super) udp: u16,
    pub(super) version: u8,
    pub(super) dnssec_ok: bool,
    pub(super) ecs: Option<Ecs>,
}

/// An EDNS Client Subnet option (RFC 7871).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ecs {
    pub(super) addr: IpAddr,
    pub(super) source: u8,
}

/// Why a query is answered with an error before its name is looked at.
pub(super) enum Bad {
    /// Answered with this code, without the question.
    Rcode(Rcode),
}

/// A parsed question.
pub(super) type ParsedQuestion<'q> = Question<ParsedName<&'q [u8]>>;

/// Parses the question and the EDNS record, checking the whole message.
pub(super) fn parse<'q>(
    msg: &'q Message<&'q [u8]>,
    len: usize,
) -> Result<(ParsedQuestion<'q>, Edns), Bad> {
    let formerr = Bad::Rcode(Rcode::FORMERR);
    let mut qs = msg.question();
    let question = match qs.next() {
        Some(Ok(q)) => q,
        _ => return Err(formerr),
    };
    let answer = qs.answer().map_err(|_| Bad::Rcode(Rcode::FORMERR))?;
    let authority = answer
        .next_section()
        .map_err(|_| Bad::Rcode(Rcode::FORMERR))?
        .ok_or(Bad::Rcode(Rcode::FORMERR))?;
    let mut additional = authority
        .next_section()
        .map_err(|_| Bad::Rcode(Rcode::FORMERR))?
        .ok_or(Bad::Rcode(Rcode::FORMERR))?;
    let mut edns = Edns::default();
    for rec in additional.by_ref() {
        let rec = rec.map_err(|_| Bad::Rcode(Rcode::FORMERR))?;
        if rec.rtype() != Rtype::OPT {
            continue;
        }
        // One OPT, owned by the root (RFC 6891 §6.1.1).
        if edns.present || !rec.owner().is_root() {
            return Err(Bad::Rcode(Rcode::FORMERR));
        }
        let opt = match rec.to_record::<Opt<&[u8]>>() {
            Ok(Some(r)) => OptRecord::from_record(r),
            _ => return Err(Bad::Rcode(Rcode::FORMERR)),
        };
        edns.present = true;
        edns.udp = opt.udp_payload_size();
        edns.version = opt.version();
        edns.dnssec_ok = opt.dnssec_ok();
        for o in opt.opt().iter::<UnknownOptData<&[u8]>>() {
            let o = o.map_err(|_| Bad::Rcode(Rcode::FORMERR))?;
            if o.code().to_int() == OPT_CLIENT_SUBNET {
                if edns.ecs.is_some() {
                    return Err(Bad::Rcode(Rcode::FORMERR));
                }
                edns.ecs = Some(parse_ecs(o.as_slice()).ok_or(Bad::Rcode(Rcode::FORMERR))?);
            }
            // Other options are ignored and not echoed (RFC 6891 §6.1.2).
        }
    }
    // Octets beyond what the counts announce: a malformed message.
    if additional.pos() != len {
        return Err(Bad::Rcode(Rcode::FORMERR));
    }
    Ok((question, edns))
}

/// An EDNS Client Subnet option, checked as RFC 7871 §7.1.2 asks: a known
/// family, a source prefix that fits it, exactly the octets it needs, no
/// bits set beyond it, and a zero scope.
pub(super) fn parse_ecs(data: &[u8]) -> Option<Ecs> {
    let (&[f0, f1, source, scope], addr) = data.split_first_chunk::<4>()?;
    let family = u16::from_be_bytes([f0, f1]);
    let max = match family {
        1 => 32,
        2 => 128,
        _ => return None,
    };
    if source > max || scope != 0 || addr.len() != usize::from(source).div_ceil(8) {
        return None;
    }
    let mut full = [0u8; 16];
    full.get_mut(..addr.len())?.copy_from_slice(addr);
    let v = u128::from_be_bytes(full);
    let keep = if source == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(source))
    };
    if v & !keep != 0 {
        return None;
    }
    let addr = if family == 1 {
        IpAddr::V4(Ipv4Addr::from((v >> 96) as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(v))
    };
    Some(Ecs { addr, source })
}
