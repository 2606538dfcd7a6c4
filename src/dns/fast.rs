//! The fast path for the common query: a plain QUERY over UDP or TCP for the
//! A or AAAA records of a Coralized name (under `http.L2.L1.L0.<zone>`, or
//! under the alias), with or without EDNS and Client Subnet.
//!
//! [`fast_parse`] reads such a query by a direct scan of its octets and
//! declines anything else (compression pointers in the question, other
//! types, classes or opcodes, EDNS versions above 0, several options of
//! one kind...), which then goes to domain's full parser exactly as before.
//! [`Dnssrv::fast_place`] places the name by comparing its tail with the
//! zone's, the alias's and http.L2.L1.L0.Z's ([`Tails`], made once).
//! [`Dnssrv::respond_fast`] writes the answer straight into the buffer,
//! without domain's builder and without the compressor: where the
//! compressor ([`put_name`](super::compress::put_name)) would point is
//! known from the names' shapes (the A records' owner is the question name or the CNAME's target, each
//! apex `Lk.Z` is that name's tail, glue points at the NS data), so the
//! bytes are the builder's. The decision (client level, proxies, name
//! servers, counters, follow-ups) is [`Dnssrv::pick`] and
//! [`Dnssrv::pick_nameservers`], shared with the builder's path and taken
//! against the view of the moment (nothing is cached, nothing to
//! invalidate); when the answer is not the plain one (no proxy live, held,
//! too big for the transport) the pick is handed to the builder's path,
//! which writes it. `tests.rs` checks both paths byte for byte (and their
//! counters and follow-ups) over varied queries, zones and views.

use super::*;

/// A query of the common shape, read by a direct scan of its octets.
pub(super) struct FastQuery<'q> {
    /// The question's name in wire form, root label included, letter case
    /// as sent.
    qname: &'q [u8],
    /// A or AAAA.
    qtype: u16,
    edns: Edns,
    /// The query's header and question: the answer's first octets, but
    /// for the header's flags and counts.
    head: &'q [u8],
}

impl FastQuery<'_> {
    /// The index of its type in `QTYPE_NAMES` (A or AAAA).
    pub(super) fn qtype_index(&self) -> usize {
        usize::from(self.qtype == 28)
    }
}

/// Reads `q` if it is a plain query for A or AAAA in class IN, with at
/// most an OPT record (version 0, at most one Client Subnet option, well
/// formed) and nothing after it; `None` for anything else.
pub(super) fn fast_parse(q: &[u8]) -> Option<FastQuery<'_>> {
    let h = q.get(..12)?;
    // QR clear, opcode QUERY.
    if h[2] & 0xf8 != 0 {
        return None;
    }
    let count = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
    if count(4) != 1 || count(6) != 0 || count(8) != 0 || count(10) > 1 {
        return None;
    }
    // The name: plain labels only, at most 255 octets with the root, so
    // every length octet lies in the 255 octets after the header: one
    // bound per label instead of two (issue 27; `fast_parse_reads_as_before`).
    let name = q.get(12..q.len().min(12 + 255))?;
    let mut n = 0;
    loop {
        let l = *name.get(n)?;
        // A label of 1 to 63 octets in one test; then the root, or not a
        // plain label.
        if l.wrapping_sub(1) >= 63 {
            if l == 0 {
                break;
            }
            return None;
        }
        n += 1 + usize::from(l);
    }
    let p = 12 + n;
    let qname = q.get(12..p + 1)?;
    let t = q.get(p + 1..p + 5)?;
    let qtype = u16::from_be_bytes([t[0], t[1]]);
    if !matches!(qtype, 1 | 28) || t[2..4] != [0, 1] {
        return None;
    }
    let mut end = p + 5;
    let mut edns = Edns::default();
    if count(10) == 1 {
        // The OPT record, owned by the root (RFC 6891 §6.1.2).
        let r = q.get(end..end + 11)?;
        if r[0] != 0 || r[1..3] != [0, 41] || r[6] != 0 {
            return None;
        }
        let rdlen = usize::from(u16::from_be_bytes([r[9], r[10]]));
        let rdata = q.get(end + 11..end + 11 + rdlen)?;
        end += 11 + rdlen;
        let mut o = 0;
        while o < rdata.len() {
            let oh = rdata.get(o..o + 4)?;
            let code = u16::from_be_bytes([oh[0], oh[1]]);
            let len = usize::from(u16::from_be_bytes([oh[2], oh[3]]));
            let data = rdata.get(o + 4..o + 4 + len)?;
            if code == OPT_CLIENT_SUBNET {
                if edns.ecs.is_some() {
                    return None;
                }
                edns.ecs = Some(parse_ecs(data)?);
            }
            o += 4 + len;
        }
        edns.present = true;
        edns.udp = u16::from_be_bytes([r[3], r[4]]);
        edns.version = 0;
        edns.dnssec_ok = r[7] & 0x80 != 0;
    }
    if end != q.len() {
        return None;
    }
    Some(FastQuery {
        qname,
        qtype,
        edns,
        head: q.get(..p + 5)?,
    })
}

/// The names the fast path places query names by, flat, with their root
/// labels, made once.
#[derive(Debug, Default)]
pub(super) struct Tails {
    /// The zone.
    zone: Vec<u8>,
    /// The alias, if there is one.
    alias: Option<Vec<u8>>,
    /// `http.L2.L1.L0.<zone>`.
    proxy: Vec<u8>,
    /// For names under the alias, where the compressor would point, when
    /// it is known without it (the alias is not under `L0.<zone>`, nor a tail
    /// of `http.L2.L1.L0.<zone>`): the synthesized CNAME's target is the
    /// labels before the alias, then this (`proxy` less the longest tail
    /// it shares with the alias), then a pointer to that shared tail in
    /// the question, whose length (root label included) is the second
    /// field (1: nothing shared but the root, written, not pointed at).
    alias_cname: Option<(Vec<u8>, usize)>,
}

/// Whether `name` ends with `tail` at a label boundary (both flat, with
/// their root labels; letter case ignored).
fn ends_with_flat(name: &[u8], tail: &[u8]) -> bool {
    let Some(at) = name.len().checked_sub(tail.len()) else {
        return false;
    };
    let mut p = 0;
    while p < at {
        p += 1 + usize::from(name[p]);
    }
    p == at && eq_fold(&name[at..], tail)
}

impl Tails {
    /// From the apexes' names in wire form without the root (Z, L0, L1, L2,
    /// alias: `Dnssrv::apex_flat`).
    pub(super) fn new(apex_flat: &[Vec<u8>], alias: bool) -> Tails {
        let rooted = |i: usize| {
            let mut v = apex_flat.get(i).cloned().unwrap_or_default();
            v.push(0);
            v
        };
        let mut proxy = b"\x04http".to_vec();
        proxy.extend_from_slice(&rooted(apex_index(Apex::L2)));
        let alias = alias.then(|| rooted(apex_index(Apex::Alias)));
        let l0 = rooted(apex_index(Apex::L0));
        let alias_cname = alias
            .as_ref()
            .filter(|a| !ends_with_flat(a, &l0) && !ends_with_flat(&proxy, a))
            .map(|a| {
                // The longest tail of `proxy` (at a label boundary) that
                // the alias ends with; the root at least.
                let mut p = 0;
                while p < proxy.len() && !ends_with_flat(a, &proxy[p..]) {
                    p += 1 + usize::from(proxy[p]);
                }
                (proxy[..p].to_vec(), proxy.len() - p)
            });
        Tails {
            zone: rooted(apex_index(Apex::Z)),
            alias,
            proxy,
            alias_cname,
        }
    }
}

/// Appends a record's type, class IN and TTL.
fn put_head(buf: &mut Vec<u8>, rtype: u16, ttl: u32) {
    buf.extend_from_slice(&head(rtype, ttl));
}

/// A record's type, class IN and TTL.
fn head(rtype: u16, ttl: u32) -> [u8; 8] {
    let (t, l) = (rtype.to_be_bytes(), ttl.to_be_bytes());
    [t[0], t[1], 0, 1, l[0], l[1], l[2], l[3]]
}

/// Appends an address record: a pointer to its owner, its type, class,
/// TTL and data (one copy of a record made on the stack, of a length known
/// when compiled: no call to memcpy, issue 27).
#[inline(always)]
fn put_addr(buf: &mut Vec<u8>, owner: [u8; 2], ip: IpAddr, ttl: u32) {
    match ip {
        IpAddr::V4(a) => {
            let mut r = [0u8; 2 + 10 + 4];
            r[..2].copy_from_slice(&owner);
            r[2..10].copy_from_slice(&head(1, ttl));
            r[10..12].copy_from_slice(&[0, 4]);
            r[12..16].copy_from_slice(&a.octets());
            buf.extend_from_slice(&r);
        }
        IpAddr::V6(a) => {
            let mut r = [0u8; 2 + 10 + 16];
            r[..2].copy_from_slice(&owner);
            r[2..10].copy_from_slice(&head(28, ttl));
            r[10..12].copy_from_slice(&[0, 16]);
            r[12..28].copy_from_slice(&a.octets());
            buf.extend_from_slice(&r);
        }
    }
}

/// Where a name server's label starts in its [`NsRecord`]: after the
/// owner's pointer, the type, class, TTL and data length.
const NS_LABEL_AT: usize = 2 + 10;
/// The longest NS record the fast path writes: a label of `ns-` and 32 hex
/// digits (an IPv6 address), then a pointer to the apex.
const NS_RECORD_BYTES_MAX: usize = NS_LABEL_AT + 1 + 35 + 2;

/// A name server's NS record as the fast path writes it, made once per
/// name server (`Dnssrv::ns_cache`): a pointer to the apex, type NS, class
/// IN, [`NS_TTL_SECS`], the data's length, the name server's label and a
/// pointer to the apex again. Both pointers are written per answer (where
/// the apex is depends on the question's length). One copy of a length
/// known when compiled instead of four appends, one of them a call to
/// memcpy (issue 27).
#[derive(Clone, Copy, Debug)]
pub(super) struct NsRecord {
    bytes: [u8; NS_RECORD_BYTES_MAX],
    /// Octets of `bytes` that are the record.
    len: u8,
}

impl NsRecord {
    /// The record naming `ns` (its name flat, its first label the name
    /// server's own, of at most 36 octets with its length).
    pub(super) fn new(ns: &[u8]) -> Option<NsRecord> {
        let label = ns.get(..1 + usize::from(*ns.first()?))?;
        let len = NS_LABEL_AT + label.len() + 2;
        let mut bytes = [0u8; NS_RECORD_BYTES_MAX];
        bytes[2..10].copy_from_slice(&head(Rtype::NS.to_int(), NS_TTL_SECS));
        bytes[10..NS_LABEL_AT].copy_from_slice(&(label.len() as u16 + 2).to_be_bytes());
        bytes
            .get_mut(NS_LABEL_AT..NS_LABEL_AT + label.len())?
            .copy_from_slice(label);
        Some(NsRecord {
            bytes,
            len: len as u8,
        })
    }

    /// Appends the record with the apex at `apex_ptr`.
    #[inline]
    fn put(&self, buf: &mut Vec<u8>, apex_ptr: [u8; 2]) {
        let at = buf.len();
        let len = usize::from(self.len);
        buf.extend_from_slice(&self.bytes);
        let r = &mut buf[at..];
        r[..2].copy_from_slice(&apex_ptr);
        r[len - 2..len].copy_from_slice(&apex_ptr);
        buf.truncate(at + len);
    }
}

/// The answer's header over its first 12 octets: the query's id, QR,
/// opcode QUERY, AA, RD and CD as asked, NOERROR, one question and the
/// section `counts` (answer, authority, additional).
#[inline]
fn put_header(buf: &mut [u8], query: &[u8], counts: [u16; 3]) {
    let h = &mut buf[..12];
    h[..2].copy_from_slice(&query[..2]);
    h[2] = 0x84 | (query[2] & 0x01);
    h[3] = query[3] & 0x10;
    h[4..6].copy_from_slice(&1u16.to_be_bytes());
    h[6..8].copy_from_slice(&counts[0].to_be_bytes());
    h[8..10].copy_from_slice(&counts[1].to_be_bytes());
    h[10..12].copy_from_slice(&counts[2].to_be_bytes());
}

impl Dnssrv {
    /// Whether the common query takes the fast path (on by default; off,
    /// every query goes through domain's parser and message builder, as
    /// the tests compare and the benchmark measures).
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast_path = on;
    }

    /// Answers a query [`fast_parse`] read (response rate limiting said
    /// send): directly for a proxy name with proxies to name that fits the
    /// transport, else through [`Dnssrv::respond`] (with the pick made, if
    /// it was).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond_fast(
        &mut self,
        now: Time,
        msg: &Message<&[u8]>,
        q: &FastQuery<'_>,
        client: SocketAddr,
        transport: Transport,
        view: &View,
        buf: Vec<u8>,
    ) -> Option<Vec<u8>> {
        let prefix = match self.fast_place(q.qname) {
            Some(Place::Proxy) => None,
            Some(Place::BelowAlias(at)) => Some(at),
            _ => return self.respond(now, msg, Rrl::Send, client, transport, view, buf),
        };
        let edns = &q.edns;
        let limit = self.size_limit(transport, edns);
        // As the builder's path: room left for the OPT record, and a push
        // must end below the limit (domain's `set_push_limit`).
        let opt_room = if edns.present { 11 + 24 } else { 0 };
        let push_limit = limit.saturating_sub(opt_room);
        let mut buf = buf;
        buf.clear();
        // The query's header and question in one copy: the question is
        // echoed as sent (its name, A or AAAA, class IN: what `fast_parse`
        // read), and the header is written over last, once the counts are
        // known. No compressor needed (see below).
        buf.extend_from_slice(q.head);
        let mut ancount: u16 = 0;
        // Where the owner of the A records is written in full (the question
        // name, or the CNAME's target), and its length with the root.
        let (owner_at, owner_len) = match prefix {
            None => (12, q.qname.len()),
            Some(at) => {
                let Some(owner) = self.put_alias_records(&mut buf, q.qname, at, push_limit) else {
                    return self.fall_back(now, msg, client, transport, view, buf);
                };
                ancount = 2;
                owner
            }
        };
        let qtype = Rtype::from_int(q.qtype);
        let ctx = Who {
            now,
            client: client.ip(),
            qtype,
            view,
            edns,
        };
        // From here on the query is counted and its follow-ups queued: the
        // builder's path, if it must write the answer, takes this pick.
        let mut scratch = self
            .scratch
            .take()
            .unwrap_or_else(|| Box::new((Best::new(0), Best::new(0))));
        let pick = self.pick(&ctx, &mut scratch.0);
        let Pick::Proxies { level, scope, ttl } = pick else {
            self.picked = Some((pick, scratch.0));
            self.scratch = Some(scratch);
            return self.fall_back(now, msg, client, transport, view, buf);
        };
        // The lock (§3.1), as `delegation` writes it.
        let apex = Apex::for_level(level);
        let ns_level = apex.level().min(view.levels.len().saturating_sub(1));
        self.pick_nameservers_into(&ctx, ns_level, ctx.client, &mut scratch.1);
        let mut idx = [usize::MAX; NAMESERVERS_MAX];
        let Some(nscount) = self.name_nameservers(apex, &scratch.1, &mut idx) else {
            self.picked = Some((pick, scratch.0));
            self.scratch = Some(scratch);
            return self.fall_back(now, msg, client, transport, view, buf);
        };
        let best = &scratch.0;
        let apex_name = self.apex_names[apex_index(apex)].as_slice();
        let idx = &idx[..usize::from(nscount)];
        // Where the compressor would point is known without it: the owner
        // of the A records points at its full form (the question name, or
        // the CNAME's target); the apex `Lk.Z` is that name's tail; each
        // name server's name is its own label then a pointer to that tail,
        // and its glue's owner points at it.
        let owner_ptr = (0xc000 | owner_at as u16).to_be_bytes();
        let at = owner_at + owner_len.saturating_sub(apex_name.len());
        let apex_ptr = (0xc000 | at as u16).to_be_bytes();
        for ip in best.addrs() {
            put_addr(&mut buf, owner_ptr, ip, ttl);
            ancount += 1;
        }
        self.put_delegation(&mut buf, idx, apex_ptr);
        if buf.len() >= push_limit {
            // Too big with the delegation: the builder's path drops it, or
            // truncates.
            self.picked = Some((pick, *best));
            self.scratch = Some(scratch);
            return self.fall_back(now, msg, client, transport, view, buf);
        }
        let mut arcount = nscount;
        if edns.present {
            self.put_opt(&mut buf, edns, scope);
            arcount += 1;
        }
        put_header(&mut buf, msg.as_slice(), [ancount, nscount, arcount]);
        if !matches!(self.hold, Hold::Retry(_)) {
            match qtype {
                Rtype::AAAA => self.counters.queries_aaaa += 1,
                _ => self.counters.queries_a += 1,
            }
        }
        self.fast_answered += 1;
        self.scratch = Some(scratch);
        Some(buf)
    }

    /// Writes the alias's two records for `qname` (the alias at offset
    /// `at`): the DNAME, then the synthesized CNAME to `http.L2.L1.L0.Z`.
    /// Returns where the CNAME's target (the A records' owner) is written
    /// in full and its length with the root; `None` when the builder's
    /// path must answer instead (no alias, too long a name, or past
    /// `push_limit`).
    fn put_alias_records(
        &self,
        buf: &mut Vec<u8>,
        qname: &[u8],
        at: usize,
        push_limit: usize,
    ) -> Option<(usize, usize)> {
        // The DNAME (its target, http.L2.L1.L0.Z, never compressed,
        // RFC 6672 §2.5), then the synthesized CNAME, as `build`
        // writes them: the labels before the alias, then
        // http.L2.L1.L0.Z. The builder's NameBuf takes names of at
        // most 255 octets with the root: a longer target is
        // YXDOMAIN, a longer DNAME target does not fit.
        let proxy = &self.tails.proxy;
        let target_len = at + proxy.len();
        let (literal, shared) = self.tails.alias_cname.as_ref()?;
        if target_len > 255 || proxy.len() > 255 {
            return None;
        }
        // The alias is the question name's tail; the question name
        // is at 12.
        let alias_len = qname.len() - at;
        buf.extend_from_slice(&(0xc000 | (12 + at) as u16).to_be_bytes());
        put_head(buf, Rtype::DNAME.to_int(), ZONE_TTL_SECS);
        buf.extend_from_slice(&(proxy.len() as u16).to_be_bytes());
        buf.extend_from_slice(proxy);
        buf.extend_from_slice(&[0xc0, 12]);
        put_head(buf, Rtype::CNAME.to_int(), ZONE_TTL_SECS);
        let rdlen_at = buf.len();
        buf.extend_from_slice(&[0, 0]);
        let owner_at = buf.len();
        buf.extend_from_slice(&qname[..at]);
        buf.extend_from_slice(literal);
        if *shared > 1 {
            let p = 12 + at + alias_len - shared;
            buf.extend_from_slice(&(0xc000 | p as u16).to_be_bytes());
        } else {
            // Nothing shared but the root: never pointed at.
            buf.push(0);
        }
        let rdlen = (buf.len() - owner_at) as u16;
        buf[rdlen_at..rdlen_at + 2].copy_from_slice(&rdlen.to_be_bytes());
        if buf.len() >= push_limit {
            return None;
        }
        Some((owner_at, target_len))
    }

    /// The names of the name servers in `servers` (indexes in `ns_cache`,
    /// made if missing) into `idx`; how many, or `None` if one could not
    /// be made.
    fn name_nameservers(
        &mut self,
        apex: Apex,
        servers: &Best<NAMESERVERS_MAX>,
        idx: &mut [usize; NAMESERVERS_MAX],
    ) -> Option<u16> {
        let mut nscount: u16 = 0;
        for (slot, ip) in idx.iter_mut().zip(servers.addrs()) {
            *slot = self.ns_name_cached(apex, ip)?;
            nscount += 1;
        }
        Some(nscount)
    }

    /// The NS records of the apex (at `apex_ptr`) naming the name servers
    /// `idx` (in `ns_cache`), then their glue: each name server's name is
    /// its own label then a pointer to the apex, and its glue's owner
    /// points at it. Each NS record is its [`NsRecord`], made once, with
    /// the apex's pointer written in.
    fn put_delegation(&self, buf: &mut Vec<u8>, idx: &[usize], apex_ptr: [u8; 2]) {
        let mut ns_at = [0u16; NAMESERVERS_MAX];
        for (&i, ns_at) in idx.iter().zip(ns_at.iter_mut()) {
            *ns_at = (buf.len() + NS_LABEL_AT) as u16;
            self.ns_cache[i].record.put(buf, apex_ptr);
        }
        for (&i, &ns_at) in idx.iter().zip(ns_at.iter()) {
            let owner = (0xc000 | ns_at).to_be_bytes();
            put_addr(buf, owner, self.ns_cache[i].ip, NS_TTL_SECS);
        }
    }

    /// The OPT record: our payload size, DO echoed, the Client Subnet
    /// echoed with the `scope` the answer holds for.
    fn put_opt(&self, buf: &mut Vec<u8>, edns: &Edns, scope: u8) {
        buf.extend_from_slice(&[0, 0, 41]);
        buf.extend_from_slice(&self.cfg.udp_payload_bytes.to_be_bytes());
        buf.extend_from_slice(&[0, 0, if edns.dnssec_ok { 0x80 } else { 0 }, 0]);
        match edns.ecs {
            Some(e) => {
                let (family, octets): (u16, [u8; 16]) = match e.addr {
                    IpAddr::V4(a) => {
                        let mut o = [0u8; 16];
                        o[..4].copy_from_slice(&a.octets());
                        (1, o)
                    }
                    IpAddr::V6(a) => (2, a.octets()),
                };
                let bits: u8 = if family == 1 { 32 } else { 128 };
                let n = usize::from(e.source.min(bits)).div_ceil(8);
                let olen = 4 + n as u16;
                buf.extend_from_slice(&(olen + 4).to_be_bytes());
                buf.extend_from_slice(&OPT_CLIENT_SUBNET.to_be_bytes());
                buf.extend_from_slice(&olen.to_be_bytes());
                buf.extend_from_slice(&family.to_be_bytes());
                buf.extend_from_slice(&[e.source.min(bits), scope.min(bits)]);
                buf.extend_from_slice(&octets[..n]);
            }
            None => buf.extend_from_slice(&[0, 0]),
        }
    }

    /// Where a query name (flat, with its root label) falls, as
    /// [`Dnssrv::classify`] places it, for the two places the fast path
    /// writes: under http.L2.L1.L0.Z ([`Place::Proxy`]) and under the alias
    /// ([`Place::BelowAlias`] with the offset of the alias in the name, not
    /// its label count). Compares the name's tails with the zone's, the
    /// alias's and http.L2.L1.L0.Z's (letter case ignored) instead of
    /// label by label; `None` for every other place.
    fn fast_place(&self, qname: &[u8]) -> Option<Place> {
        let ends = |tail: &[u8]| -> Option<usize> {
            let at = qname.len().checked_sub(tail.len())?;
            if !eq_fold(&qname[at..], tail) {
                return None;
            }
            // A label boundary of the name.
            let mut p = 0;
            while p < at {
                p += 1 + usize::from(qname[p]);
            }
            (p == at).then_some(at)
        };
        if let Some(alias) = &self.tails.alias {
            if let Some(at) = ends(alias) {
                if ends(&self.tails.zone).is_none() || alias.len() > self.tails.zone.len() {
                    return (at > 0).then_some(Place::BelowAlias(at));
                }
            }
        }
        // Under http.L2.L1.L0.Z, hence in the zone.
        ends(&self.tails.proxy).map(|_| Place::Proxy)
    }

    /// Hands the query to the builder's path (with `self.picked` if set).
    #[allow(clippy::too_many_arguments)]
    fn fall_back(
        &mut self,
        now: Time,
        msg: &Message<&[u8]>,
        client: SocketAddr,
        transport: Transport,
        view: &View,
        buf: Vec<u8>,
    ) -> Option<Vec<u8>> {
        self.respond(now, msg, Rrl::Send, client, transport, view, buf)
    }
}

#[cfg(test)]
mod cut_tests {
    use super::*;
    use proptest::prelude::*;

    /// [`put_addr`] as it was before issue 27's cut: one 28-octet record,
    /// sliced to its length.
    fn put_addr_before(buf: &mut Vec<u8>, owner: [u8; 2], ip: IpAddr, ttl: u32) {
        let mut r = [0u8; 2 + 10 + 16];
        r[..2].copy_from_slice(&owner);
        let len = match ip {
            IpAddr::V4(a) => {
                r[2..10].copy_from_slice(&head(1, ttl));
                r[10..12].copy_from_slice(&[0, 4]);
                r[12..16].copy_from_slice(&a.octets());
                16
            }
            IpAddr::V6(a) => {
                r[2..10].copy_from_slice(&head(28, ttl));
                r[10..12].copy_from_slice(&[0, 16]);
                r[12..28].copy_from_slice(&a.octets());
                28
            }
        };
        buf.extend_from_slice(&r[..len]);
    }

    /// [`fast_parse`]'s name scan as it was before issue 27's cut (two
    /// bounds per label), with the rest of it as it is; what it read, as
    /// `(qname, qtype, edns, question's end)`.
    fn fast_parse_before(q: &[u8]) -> Option<(&[u8], u16, String, usize)> {
        let h = q.get(..12)?;
        if h[2] & 0xf8 != 0 {
            return None;
        }
        let count = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        if count(4) != 1 || count(6) != 0 || count(8) != 0 || count(10) > 1 {
            return None;
        }
        let mut p = 12;
        loop {
            let l = usize::from(*q.get(p)?);
            if l == 0 {
                break;
            }
            if l > 63 {
                return None;
            }
            p += 1 + l;
            if p - 12 >= 255 {
                return None;
            }
        }
        let qname = q.get(12..p + 1)?;
        let t = q.get(p + 1..p + 5)?;
        let qtype = u16::from_be_bytes([t[0], t[1]]);
        if !matches!(qtype, 1 | 28) || t[2..4] != [0, 1] {
            return None;
        }
        let mut end = p + 5;
        let mut edns = Edns::default();
        if count(10) == 1 {
            let r = q.get(end..end + 11)?;
            if r[0] != 0 || r[1..3] != [0, 41] || r[6] != 0 {
                return None;
            }
            let rdlen = usize::from(u16::from_be_bytes([r[9], r[10]]));
            let rdata = q.get(end + 11..end + 11 + rdlen)?;
            end += 11 + rdlen;
            let mut o = 0;
            while o < rdata.len() {
                let oh = rdata.get(o..o + 4)?;
                let code = u16::from_be_bytes([oh[0], oh[1]]);
                let len = usize::from(u16::from_be_bytes([oh[2], oh[3]]));
                let data = rdata.get(o + 4..o + 4 + len)?;
                if code == OPT_CLIENT_SUBNET {
                    if edns.ecs.is_some() {
                        return None;
                    }
                    edns.ecs = Some(parse_ecs(data)?);
                }
                o += 4 + len;
            }
            edns.present = true;
            edns.udp = u16::from_be_bytes([r[3], r[4]]);
            edns.version = 0;
            edns.dnssec_ok = r[7] & 0x80 != 0;
        }
        if end != q.len() {
            return None;
        }
        Some((qname, qtype, format!("{edns:?}"), p + 5))
    }

    /// A query for a name of labels of `lens` octets (a length above 63 is
    /// written as it is: not a plain label), with an OPT record if asked.
    fn query_of(lens: &[u8], qtype: u16, opt: Option<&[u8]>) -> Vec<u8> {
        let mut q = vec![
            0x12,
            0x34,
            0x01,
            0,
            0,
            1,
            0,
            0,
            0,
            0,
            0,
            u8::from(opt.is_some()),
        ];
        for (i, &l) in lens.iter().enumerate() {
            q.push(l);
            q.extend((0..l.min(70)).map(|j| b'a' + (i as u8 + j) % 26));
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        if let Some(rdata) = opt {
            q.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0x80, 0]);
            q.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            q.extend_from_slice(rdata);
        }
        q
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn fast_parse_reads_as_before(
            // Names near the 255-octet bound and labels near 63.
            lens in proptest::collection::vec(prop_oneof![0u8..8, 55u8..70, 60u8..64, any::<u8>()], 0..12),
            qtype in prop_oneof![Just(1u16), Just(28), any::<u16>()],
            opt in proptest::option::of(prop_oneof![
                Just(vec![]),
                Just(vec![0, 8, 0, 7, 0, 1, 24, 0, 198, 51, 100]),
                proptest::collection::vec(any::<u8>(), 0..16),
            ]),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
            cut in proptest::option::of(any::<prop::sample::Index>()),
        ) {
            let mut q = query_of(&lens, qtype, opt.as_deref());
            for (at, x) in flips {
                let i = at.index(q.len());
                q[i] = x;
            }
            if let Some(c) = cut {
                q.truncate(c.index(q.len() + 1));
            }
            let new = fast_parse(&q).map(|f| (f.qname, f.qtype, format!("{:?}", f.edns), f.head.len()));
            prop_assert_eq!(new, fast_parse_before(&q));
            if let Some(f) = fast_parse(&q) {
                prop_assert_eq!(f.head, &q[..12 + f.qname.len() + 4]);
            }
        }

        #[test]
        fn ns_records_are_the_octets_written_before(
            before in proptest::collection::vec(any::<u8>(), 0..40),
            v4: [u8; 4],
            v6: [u8; 16],
            six: bool,
            apex_ptr: [u8; 2],
            tail in proptest::collection::vec("[a-z0-9]{1,20}", 0..4),
        ) {
            let ip = if six { IpAddr::from(v6) } else { IpAddr::from(v4) };
            let mut l = [0u8; 35];
            let mut nb = NameBuf::new();
            prop_assert!(nb.push(super::super::names::ns_label(ip, &mut l)));
            for t in &tail {
                prop_assert!(nb.push(t.as_bytes()));
            }
            let name = nb.name().unwrap();
            let ns = name.as_slice();
            // As `put_delegation` wrote each NS record before issue 27's
            // cut: the record's head, the label, the apex's pointer.
            let mut old = before.clone();
            let label = &ns[..1 + usize::from(ns[0])];
            let mut r = [0u8; 12];
            r[..2].copy_from_slice(&apex_ptr);
            r[2..10].copy_from_slice(&head(Rtype::NS.to_int(), NS_TTL_SECS));
            r[10..].copy_from_slice(&(label.len() as u16 + 2).to_be_bytes());
            old.extend_from_slice(&r);
            let label_at = old.len();
            old.extend_from_slice(label);
            old.extend_from_slice(&apex_ptr);
            let mut new = before.clone();
            NsRecord::new(ns).unwrap().put(&mut new, apex_ptr);
            prop_assert_eq!(&new, &old);
            prop_assert_eq!(before.len() + NS_LABEL_AT, label_at);
        }

        #[test]
        fn put_addr_writes_the_octets_it_wrote_before(
            before in proptest::collection::vec(any::<u8>(), 0..40),
            owner: [u8; 2],
            v4: [u8; 4],
            v6: [u8; 16],
            six: bool,
            ttl: u32,
        ) {
            let ip = if six {
                IpAddr::from(v6)
            } else {
                IpAddr::from(v4)
            };
            let (mut new, mut old) = (before.clone(), before);
            put_addr(&mut new, owner, ip, ttl);
            put_addr_before(&mut old, owner, ip, ttl);
            prop_assert_eq!(new, old);
        }
    }
}
