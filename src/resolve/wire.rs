//! The stub resolver's wire side: a recursive query for a name's A or AAAA
//! records (RFC 1035 §4.1, with an EDNS(0) OPT record, RFC 6891), and the
//! reading of an answer with the `domain` crate — every check a hostile
//! network calls for (id, question, QR) before anything in it is believed.
//!
//! Nothing here panics on any bytes: the answer parser is fuzzed by
//! `tests::parse_never_panics` and its property test.

use std::net::IpAddr;

use domain::base::iana::{Class, Rcode, Rtype};
use domain::base::name::ParsedName;
use domain::base::Message;
use domain::rdata::{Aaaa, Cname, Soa, A};

use crate::limits::RESOLVE;

/// The record type a query asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Qtype {
    /// IPv4 addresses (RFC 1035).
    A,
    /// IPv6 addresses (RFC 3596).
    Aaaa,
}

impl Qtype {
    fn code(self) -> u16 {
        match self {
            Qtype::A => 1,
            Qtype::Aaaa => 28,
        }
    }
}

/// Longest name in wire form (RFC 1035 §2.3.4: 255 octets).
const NAME_WIRE_BYTES_MAX: usize = 255;
/// Longest label (RFC 1035 §2.3.4).
const LABEL_BYTES_MAX: usize = 63;

/// A name that cannot be asked for: empty, an empty or too long label, or
/// too long in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadName;

/// Whether `name` (no trailing dot) can be put in a query.
pub fn check_name(name: &str) -> Result<(), BadName> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() + 2 > NAME_WIRE_BYTES_MAX {
        return Err(BadName);
    }
    if name
        .split('.')
        .any(|l| l.is_empty() || l.len() > LABEL_BYTES_MAX)
    {
        return Err(BadName);
    }
    Ok(())
}

/// Writes a recursive query (RD set) for `name`'s `qtype` records with
/// transaction id `id` into `out` (cleared first). The OPT record
/// advertises `RESOLVE.udp_answer_bytes_max`.
pub fn build_query(id: u16, name: &str, qtype: Qtype, out: &mut Vec<u8>) -> Result<(), BadName> {
    check_name(name)?;
    let name = name.strip_suffix('.').unwrap_or(name);
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    // Flags: a standard query, recursion desired.
    out.extend_from_slice(&[0x01, 0x00]);
    // QDCOUNT 1, ANCOUNT 0, NSCOUNT 0, ARCOUNT 1 (the OPT record).
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 1]);
    for label in name.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&qtype.code().to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    // OPT: root owner, type 41, CLASS = payload size, TTL 0, no options.
    out.push(0);
    out.extend_from_slice(&41u16.to_be_bytes());
    out.extend_from_slice(&(RESOLVE.udp_answer_bytes_max as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    Ok(())
}

/// What an answer to our question says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The name's addresses (after CNAMEs within the answer), with the
    /// least TTL of the records that led to them, in seconds.
    Addresses {
        /// At most `RESOLVE.addresses_per_name_max`, in answer order.
        addrs: Vec<IpAddr>,
        /// The least TTL on the CNAME chain and the address records.
        ttl_secs: u32,
    },
    /// The name exists but has no records of the type (NODATA, RFC 2308
    /// §2.2), or its CNAME chain leaves the answer.
    NoData {
        /// How long the answer may be remembered (SOA TTL and MINIMUM,
        /// RFC 2308 §5), if the authority section carries a SOA.
        negative_ttl_secs: Option<u32>,
    },
    /// No such name (NXDOMAIN, RFC 2308 §2.1).
    NoSuchName {
        /// As for `NoData`.
        negative_ttl_secs: Option<u32>,
    },
    /// SERVFAIL, REFUSED, NOTIMP or any other error code: ask another
    /// server.
    ServerFailure,
    /// The answer was cut short (TC): ask again over TCP (RFC 7766).
    Truncated,
}

/// Why a datagram is not an answer to our question: it is ignored, and the
/// query keeps waiting for the real one (a spoofed or stray datagram must
/// not end a lookup).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotOurs {
    /// Not a DNS message, or a malformed one.
    Malformed,
    /// A query, not a response.
    NotResponse,
    /// Another transaction id.
    WrongId,
    /// Another question (name, type or class), or not exactly one.
    WrongQuestion,
}

/// Reads `bytes` as the answer to query `id` for `name`'s `qtype` records.
/// `name` is compared without regard to ASCII case (RFC 4343).
pub fn parse_answer(bytes: &[u8], id: u16, name: &str, qtype: Qtype) -> Result<Reply, NotOurs> {
    let msg = Message::from_octets(bytes).map_err(|_| NotOurs::Malformed)?;
    let header = msg.header();
    if !header.qr() {
        return Err(NotOurs::NotResponse);
    }
    if header.id() != id {
        return Err(NotOurs::WrongId);
    }
    if msg.header_counts().qdcount() != 1 {
        return Err(NotOurs::WrongQuestion);
    }
    let question = msg.first_question().ok_or(NotOurs::WrongQuestion)?;
    if question.qtype() != Rtype::from_int(qtype.code())
        || question.qclass() != Class::IN
        || !same_name(question.qname(), name)
    {
        return Err(NotOurs::WrongQuestion);
    }
    if header.tc() {
        return Ok(Reply::Truncated);
    }
    let rcode = header.rcode();
    if rcode == Rcode::NXDOMAIN {
        return Ok(Reply::NoSuchName {
            negative_ttl_secs: negative_ttl(&msg),
        });
    }
    if rcode != Rcode::NOERROR {
        return Ok(Reply::ServerFailure);
    }
    let answer = msg.answer().map_err(|_| NotOurs::Malformed)?;
    // Follow the CNAME chain from the question's name within the answer.
    let mut target = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let mut ttl_secs = u32::MAX;
    for _ in 0..RESOLVE.cname_hops_max {
        let mut next = None;
        for rr in answer {
            let Ok(rr) = rr else {
                return Err(NotOurs::Malformed);
            };
            if rr.rtype() != Rtype::CNAME || !same_name(&rr.owner(), &target) {
                continue;
            }
            if let Ok(Some(r)) = rr.to_record::<Cname<ParsedName<&[u8]>>>() {
                ttl_secs = ttl_secs.min(r.ttl().as_secs());
                next = Some(lower(r.data().cname()));
                break;
            }
        }
        match next {
            Some(n) => target = n,
            None => break,
        }
    }
    let mut addrs = Vec::new();
    let mut addr_ttl = u32::MAX;
    for rr in answer {
        let Ok(rr) = rr else {
            return Err(NotOurs::Malformed);
        };
        if rr.class() != Class::IN || !same_name(&rr.owner(), &target) {
            continue;
        }
        let found = match qtype {
            Qtype::A => rr
                .to_record::<A>()
                .ok()
                .flatten()
                .map(|r| (IpAddr::from(r.data().addr().octets()), r.ttl().as_secs())),
            Qtype::Aaaa => rr
                .to_record::<Aaaa>()
                .ok()
                .flatten()
                .map(|r| (IpAddr::from(r.data().addr().octets()), r.ttl().as_secs())),
        };
        if let Some((ip, ttl)) = found {
            if addrs.len() < RESOLVE.addresses_per_name_max && !addrs.contains(&ip) {
                addrs.push(ip);
            }
            addr_ttl = addr_ttl.min(ttl);
        }
    }
    if addrs.is_empty() {
        return Ok(Reply::NoData {
            negative_ttl_secs: negative_ttl(&msg),
        });
    }
    Ok(Reply::Addresses {
        addrs,
        ttl_secs: ttl_secs.min(addr_ttl),
    })
}

/// A negative answer's TTL (RFC 2308 §5): the least of the SOA record's
/// own TTL and its MINIMUM field, from the authority section.
fn negative_ttl(msg: &Message<&[u8]>) -> Option<u32> {
    let authority = msg.authority().ok()?;
    for rr in authority {
        let rr = rr.ok()?;
        if rr.rtype() != Rtype::SOA {
            continue;
        }
        if let Ok(Some(r)) = rr.to_record::<Soa<ParsedName<&[u8]>>>() {
            return Some(r.ttl().as_secs().min(r.data().minimum().as_secs()));
        }
    }
    None
}

/// `n` in lower case, without a trailing dot.
fn lower<O: AsRef<[u8]>>(n: &ParsedName<O>) -> String {
    let mut s = n.to_string();
    s.make_ascii_lowercase();
    while s.ends_with('.') {
        s.pop();
    }
    s
}

/// Whether `n` is `name` (ASCII case ignored; `name` without a trailing
/// dot or with one).
fn same_name<O: AsRef<[u8]>>(n: &ParsedName<O>, name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    let mut labels = name.split('.').filter(|l| !l.is_empty());
    for label in n.iter() {
        if label.is_root() {
            break;
        }
        match labels.next() {
            Some(l) if label.as_slice().eq_ignore_ascii_case(l.as_bytes()) => {}
            _ => return false,
        }
    }
    labels.next().is_none()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An answer: the query's header and question echoed, QR (and `flags`)
    /// set, then `records` (owner, type, TTL, rdata), all in the answer
    /// section unless `authority` counts the last ones.
    pub(crate) fn answer(
        query: &[u8],
        rcode: u8,
        tc: bool,
        records: &[(&str, u16, u32, Vec<u8>)],
        authority: usize,
    ) -> Vec<u8> {
        // The question ends 11 bytes before the query's end (the OPT record).
        let qend = query.len() - 11;
        let mut out = query[..qend].to_vec();
        out[2] = 0x81 | if tc { 0x02 } else { 0 };
        out[3] = 0x80 | rcode;
        let an = (records.len() - authority) as u16;
        out[6..8].copy_from_slice(&an.to_be_bytes());
        out[8..10].copy_from_slice(&(authority as u16).to_be_bytes());
        out[10..12].copy_from_slice(&[0, 0]);
        for (owner, ty, ttl, rdata) in records {
            for l in owner.split('.').filter(|l| !l.is_empty()) {
                out.push(l.len() as u8);
                out.extend_from_slice(l.as_bytes());
            }
            out.push(0);
            out.extend_from_slice(&ty.to_be_bytes());
            out.extend_from_slice(&1u16.to_be_bytes());
            out.extend_from_slice(&ttl.to_be_bytes());
            out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            out.extend_from_slice(rdata);
        }
        out
    }

    pub(crate) fn name_wire(name: &str) -> Vec<u8> {
        let mut v = Vec::new();
        for l in name.split('.').filter(|l| !l.is_empty()) {
            v.push(l.len() as u8);
            v.extend_from_slice(l.as_bytes());
        }
        v.push(0);
        v
    }

    pub(crate) fn soa(ttl: u32, minimum: u32) -> (&'static str, u16, u32, Vec<u8>) {
        let mut rdata = name_wire("ns.example");
        rdata.extend(name_wire("admin.example"));
        for v in [1u32, 3600, 600, 86400, minimum] {
            rdata.extend_from_slice(&v.to_be_bytes());
        }
        ("example", 6, ttl, rdata)
    }

    fn query(id: u16, name: &str, q: Qtype) -> Vec<u8> {
        let mut v = Vec::new();
        build_query(id, name, q, &mut v).unwrap();
        v
    }

    #[test]
    fn rfc1035_query_is_a_recursive_question_with_edns() {
        let q = query(0xbeef, "www.Example.com", Qtype::Aaaa);
        let msg = Message::from_octets(&q[..]).unwrap();
        assert_eq!(msg.header().id(), 0xbeef);
        assert!(msg.header().rd());
        assert!(!msg.header().qr());
        let question = msg.first_question().unwrap();
        assert_eq!(question.qtype(), Rtype::AAAA);
        assert_eq!(question.qname().to_string(), "www.Example.com");
        assert!(msg.opt().is_some());
    }

    #[test]
    fn bad_names_are_not_asked() {
        let mut v = Vec::new();
        assert_eq!(build_query(1, "", Qtype::A, &mut v), Err(BadName));
        assert_eq!(build_query(1, "a..b", Qtype::A, &mut v), Err(BadName));
        let long_label = "a".repeat(64);
        assert_eq!(build_query(1, &long_label, Qtype::A, &mut v), Err(BadName));
        let long_name = ["abcdefghi"; 30].join(".");
        assert_eq!(build_query(1, &long_name, Qtype::A, &mut v), Err(BadName));
        assert!(build_query(1, "example.com.", Qtype::A, &mut v).is_ok());
    }

    #[test]
    fn addresses_after_a_cname_chain_take_the_least_ttl() {
        let q = query(7, "www.example", Qtype::A);
        let a = answer(
            &q,
            0,
            false,
            &[
                ("www.example", 5, 300, name_wire("cdn.example")),
                ("cdn.example", 5, 60, name_wire("edge.example")),
                ("edge.example", 1, 120, vec![192, 0, 2, 1]),
                ("edge.example", 1, 120, vec![192, 0, 2, 2]),
                // Not on the chain: never believed.
                ("evil.example", 1, 120, vec![10, 0, 0, 1]),
            ],
            0,
        );
        assert_eq!(
            parse_answer(&a, 7, "www.example", Qtype::A),
            Ok(Reply::Addresses {
                addrs: vec!["192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap()],
                ttl_secs: 60,
            })
        );
    }

    #[test]
    fn a_cname_loop_ends_in_no_data() {
        let q = query(7, "a.example", Qtype::A);
        let a = answer(
            &q,
            0,
            false,
            &[
                ("a.example", 5, 300, name_wire("b.example")),
                ("b.example", 5, 300, name_wire("a.example")),
            ],
            0,
        );
        assert_eq!(
            parse_answer(&a, 7, "a.example", Qtype::A),
            Ok(Reply::NoData {
                negative_ttl_secs: None
            })
        );
    }

    #[test]
    fn rfc2308_nxdomain_ttl_is_the_least_of_soa_ttl_and_minimum() {
        let q = query(9, "nx.example", Qtype::A);
        let a = answer(&q, 3, false, &[soa(900, 30)], 1);
        assert_eq!(
            parse_answer(&a, 9, "nx.example", Qtype::A),
            Ok(Reply::NoSuchName {
                negative_ttl_secs: Some(30)
            })
        );
        let a = answer(&q, 0, false, &[soa(20, 300)], 1);
        assert_eq!(
            parse_answer(&a, 9, "nx.example", Qtype::A),
            Ok(Reply::NoData {
                negative_ttl_secs: Some(20)
            })
        );
    }

    #[test]
    fn answers_to_another_question_are_not_ours() {
        let q = query(9, "www.example", Qtype::A);
        let a = answer(&q, 0, false, &[("www.example", 1, 60, vec![1, 2, 3, 4])], 0);
        assert_eq!(
            parse_answer(&a, 10, "www.example", Qtype::A),
            Err(NotOurs::WrongId)
        );
        assert_eq!(
            parse_answer(&a, 9, "other.example", Qtype::A),
            Err(NotOurs::WrongQuestion)
        );
        assert_eq!(
            parse_answer(&a, 9, "www.example", Qtype::Aaaa),
            Err(NotOurs::WrongQuestion)
        );
        assert_eq!(
            parse_answer(&q, 9, "www.example", Qtype::A),
            Err(NotOurs::NotResponse)
        );
        // Case does not matter (RFC 4343).
        assert!(matches!(
            parse_answer(&a, 9, "WWW.example", Qtype::A),
            Ok(Reply::Addresses { .. })
        ));
    }

    #[test]
    fn tc_and_error_codes() {
        let q = query(1, "www.example", Qtype::A);
        let a = answer(&q, 0, true, &[], 0);
        assert_eq!(
            parse_answer(&a, 1, "www.example", Qtype::A),
            Ok(Reply::Truncated)
        );
        for rcode in [2, 4, 5] {
            let a = answer(&q, rcode, false, &[], 0);
            assert_eq!(
                parse_answer(&a, 1, "www.example", Qtype::A),
                Ok(Reply::ServerFailure)
            );
        }
    }

    #[test]
    fn parse_never_panics_on_cut_or_flipped_answers() {
        let q = query(5, "www.example", Qtype::Aaaa);
        let a = answer(
            &q,
            0,
            false,
            &[
                ("www.example", 5, 300, name_wire("x.example")),
                (
                    "x.example",
                    28,
                    60,
                    vec![0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                ),
                soa(5, 5),
            ],
            1,
        );
        assert!(matches!(
            parse_answer(&a, 5, "www.example", Qtype::Aaaa),
            Ok(Reply::Addresses { .. })
        ));
        for cut in 0..a.len() {
            let _ = parse_answer(&a[..cut], 5, "www.example", Qtype::Aaaa);
        }
        for i in 0..a.len() {
            for bit in 0..8 {
                let mut b = a.clone();
                b[i] ^= 1 << bit;
                let _ = parse_answer(&b, 5, "www.example", Qtype::Aaaa);
            }
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_answer(&bytes, 5, "www.example", Qtype::A);
        }

        #[test]
        fn parse_never_panics_behind_a_good_question(
            tail in proptest::collection::vec(any::<u8>(), 0..400),
            counts in any::<[u8; 6]>(),
        ) {
            let q = query(5, "www.example", Qtype::A);
            let mut a = answer(&q, 0, false, &[], 0);
            a[6..12].copy_from_slice(&counts);
            a.extend_from_slice(&tail);
            let _ = parse_answer(&a, 5, "www.example", Qtype::A);
        }
    }
}
