//! The builder's path: any query, answered through domain's message
//! builder — header and question, the refusals, then the records of the
//! place the name falls (SOA, NS and glue, the DNAME and its CNAME, the
//! proxies and the delegation that locks the resolver onto its cluster).

use super::*;

/// Record data for an IPv4 address (domain without `std` has its own
/// address types).
pub(super) fn a4(a: Ipv4Addr) -> A {
    A::new(a.octets().into())
}

/// Record data for an IPv6 address.
pub(super) fn a6(a: Ipv6Addr) -> Aaaa {
    Aaaa::new(a.octets().into())
}

pub(super) fn net_ip(ip: IpAddr) -> domain::base::net::IpAddr {
    match ip {
        IpAddr::V4(a) => a.octets().into(),
        IpAddr::V6(a) => a.octets().into(),
    }
}

/// The record type of an address.
pub(super) fn family_rtype(ip: IpAddr) -> Rtype {
    match ip {
        IpAddr::V4(_) => Rtype::A,
        IpAddr::V6(_) => Rtype::AAAA,
    }
}

/// The TTL of A records for a client at `level`.
pub(super) fn a_ttl_secs(level: usize) -> u32 {
    if level >= 2 {
        A_TTL_SECS_LEVEL2
    } else {
        A_TTL_SECS_NEAR
    }
}

/// Copies `name` into `flat` in wire form, root label included, letter
/// case as sent; its length, or `None` if it does not fit.
fn flatten_name(name: &ParsedName<&[u8]>, flat: &mut [u8; 256]) -> Option<usize> {
    let mut flen = 0;
    for l in name.iter() {
        let l = l.as_slice();
        let dst = flat.get_mut(flen..flen + 1 + l.len())?;
        dst[0] = l.len() as u8;
        dst[1..].copy_from_slice(l);
        flen += 1 + l.len();
        if l.is_empty() {
            break;
        }
    }
    Some(flen)
}

/// Fills `labels` with the labels of `flat` (a name in wire form, without
/// compression), root excluded; how many, or `None` if there are too many.
fn split_labels<'a>(flat: &'a [u8], labels: &mut [&'a [u8]; 128]) -> Option<usize> {
    let mut n = 0;
    let mut p = 0;
    while let Some(&l) = flat.get(p).filter(|&&l| l != 0) {
        *labels.get_mut(n)? = flat.get(p + 1..p + 1 + usize::from(l))?;
        n += 1;
        p += 1 + usize::from(l);
    }
    Some(n)
}

/// What one query's answer is built from.
pub(super) struct Ctx<'a> {
    pub(super) who: Who<'a>,
    pub(super) qname: Flat<'a>,
    pub(super) labels: &'a [&'a [u8]],
}

/// What picking the proxies and name servers reads: the query without its
/// name.
pub(super) struct Who<'a> {
    pub(super) now: Time,
    pub(super) client: IpAddr,
    pub(super) qtype: Rtype,
    pub(super) view: &'a View,
    /// The query's EDNS, as read (by reference: the fast path's is in its
    /// `FastQuery`, and a copy per answer cost about 20 instructions, issue
    /// 27, session 8).
    pub(super) edns: &'a Edns,
}

impl<'a> std::ops::Deref for Ctx<'a> {
    type Target = Who<'a>;
    fn deref(&self) -> &Who<'a> {
        &self.who
    }
}

impl Dnssrv {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond(
        &mut self,
        now: Time,
        msg: &Message<&[u8]>,
        rrl: Rrl,
        client: SocketAddr,
        transport: Transport,
        view: &View,
        buf: Vec<u8>,
    ) -> Option<Vec<u8>> {
        let head = msg.header();
        let c = self.compress.take().unwrap_or_else(Compress::new);
        let Ok(mut b) = MessageBuilder::from_target(Wire::new(buf, c));
        {
            let h = b.header_mut();
            h.set_id(head.id());
            h.set_qr(true);
            h.set_opcode(head.opcode());
            h.set_rd(head.rd());
            h.set_cd(head.cd());
        }
        if head.opcode() != Opcode::QUERY {
            b.header_mut().set_rcode(Rcode::NOTIMP);
            return Some(self.done(b.finish()));
        }
        let counts = msg.header_counts();
        let parsed = if counts.qdcount() != 1 || counts.ancount() != 0 || counts.nscount() != 0 {
            Err(Bad::Rcode(Rcode::FORMERR))
        } else {
            parse(msg, msg.as_slice().len())
        };
        let (question, edns) = match parsed {
            Ok(p) => p,
            Err(Bad::Rcode(rcode)) => {
                b.header_mut().set_rcode(rcode);
                return Some(self.done(b.finish()));
            }
        };
        if !matches!(self.hold, Hold::Retry(_)) {
            self.count_query_type(question.qtype());
        }
        let limit = self.size_limit(transport, &edns);
        // The query name, flat, once: classified, echoed and pointed at
        // from it (letter case as sent).
        let mut flat = [0u8; 256];
        let flen = flatten_name(question.qname(), &mut flat)?;
        let qname: Flat<'_> = Name::from_octets(flat.get(..flen)?).ok()?;
        let mut qb = b.question();
        qb.push(Question::new(
            qname.clone(),
            question.qtype(),
            question.qclass(),
        ))
        .ok()?;
        let mut b = qb;
        if edns.version > 0 {
            self.badvers = true;
            let add = b.additional();
            return self.finish(add, &edns, Some(OptRcode::BADVERS), 0);
        }
        if rrl == Rrl::Slip {
            self.counters.rrl_slipped += 1;
            b.header_mut().set_tc(true);
            return self.finish(b.additional(), &edns, None, 0);
        }
        let qtype = question.qtype();
        if question.qclass() != Class::IN || matches!(qtype, Rtype::AXFR | Rtype::IXFR) {
            b.header_mut().set_rcode(Rcode::REFUSED);
            return self.finish(b.additional(), &edns, None, 0);
        }
        if qtype == Rtype::OPT {
            b.header_mut().set_rcode(Rcode::FORMERR);
            return self.finish(b.additional(), &edns, None, 0);
        }
        let mut labels: [&[u8]; 128] = [&[]; 128];
        let n = split_labels(&flat, &mut labels)?;
        let labels = &labels[..n];
        let place = self.classify(labels);
        if place == Place::Outside {
            b.header_mut().set_rcode(Rcode::REFUSED);
            return self.finish(b.additional(), &edns, None, 0);
        }
        b.header_mut().set_aa(true);
        // The cap leaves room for the OPT record (11 octets, plus an echoed
        // Client Subnet option of at most 4 + 4 + 16).
        let opt_room = if edns.present { 11 + 24 } else { 0 };
        b.set_push_limit(limit.saturating_sub(opt_room));
        let ctx = Ctx {
            who: Who {
                now,
                client: client.ip(),
                qtype,
                view,
                edns: &edns,
            },
            qname,
            labels,
        };
        let (add, scope, res) = self.build(&ctx, place, b.answer());
        let mut add = match res {
            Ok(()) => add,
            Err(_) => {
                // Too big for this transport: the question alone with TC
                // (RFC 1035 §4.2.1; the client retries over TCP).
                self.counters.truncated += 1;
                let mut ans = add.answer();
                ans.rewind();
                ans.header_mut().set_tc(true);
                ans.additional()
            }
        };
        add.as_builder_mut().set_push_limit(limit);
        self.finish(add, &edns, None, scope)
    }

    /// The largest answer `transport` carries, given what the query said
    /// about EDNS.
    pub(super) fn size_limit(&self, transport: Transport, edns: &Edns) -> usize {
        match transport {
            Transport::Tcp => TCP_MESSAGE_BYTES,
            Transport::Udp if edns.present => {
                usize::from(edns.udp.min(self.cfg.udp_payload_bytes)).max(UDP_PLAIN_BYTES)
            }
            Transport::Udp => UDP_PLAIN_BYTES,
        }
    }

    /// Appends the OPT record (if the query had one) and hands out the bytes.
    pub(super) fn finish(
        &mut self,
        mut add: AdditionalBuilder<Target>,
        edns: &Edns,
        rcode: Option<OptRcode>,
        scope: u8,
    ) -> Option<Vec<u8>> {
        if edns.present {
            let udp = self.cfg.udp_payload_bytes;
            let r = add.opt(|ob| {
                ob.set_udp_payload_size(udp);
                ob.set_dnssec_ok(edns.dnssec_ok);
                if let Some(r) = rcode {
                    ob.set_rcode(r);
                }
                if let Some(ecs) = edns.ecs {
                    ob.push(&ClientSubnet::new(ecs.source, scope, net_ip(ecs.addr)))?;
                }
                Ok(())
            });
            if r.is_err() {
                // Cannot happen within the limits; answer without options
                // rather than not at all.
                add.rewind();
            }
        }
        Some(self.done(add.finish()))
    }

    /// The answer's bytes; the compressor's state is kept for the next.
    pub(super) fn done(&mut self, w: Wire) -> Vec<u8> {
        self.compress = Some(w.c);
        w.buf
    }

    pub(super) fn push_soa(
        &self,
        view: &View,
        apex: Apex,
        ttl: u32,
        push: impl FnOnce(Flat<'_>, Ttl, Soa<Flat<'_>>) -> Result<(), PushError>,
    ) -> Result<(), PushError> {
        let (mut owner, mut mname, mut rname) = (NameBuf::new(), NameBuf::new(), NameBuf::new());
        let ok = self.apex_name(apex, &mut owner)
            && self.ns_name(Apex::Z, view.me, &mut mname)
            && rname.push(b"hostmaster")
            && rname.push_all(&self.zone);
        let (Some(owner), Some(mname), Some(rname), true) =
            (owner.name(), mname.name(), rname.name(), ok)
        else {
            return Err(PushError::ShortBuf);
        };
        let soa = Soa::new(
            mname,
            rname,
            Serial(self.cfg.serial),
            Ttl::from_secs(3600),
            Ttl::from_secs(600),
            Ttl::from_secs(604_800),
            Ttl::from_secs(NEGATIVE_TTL_SECS),
        );
        push(owner, Ttl::from_secs(ttl), soa)
    }

    /// A negative answer: the SOA of `apex` in the authority section.
    pub(super) fn negative(
        &mut self,
        ctx: &Ctx,
        apex: Apex,
        rcode: Rcode,
        ans: AnswerBuilder<Target>,
    ) -> (AdditionalBuilder<Target>, Result<(), PushError>) {
        let mut auth = ans.authority();
        auth.header_mut().set_rcode(rcode);
        let r = self.push_soa(ctx.view, apex, NEGATIVE_TTL_SECS, |o, t, s| {
            auth.push((o, t, s))
        });
        (auth.additional(), r)
    }

    /// The NS set of `apex` (name servers of its level's cluster) into the
    /// authority (`in_answer` false) or answer section, then their glue.
    pub(super) fn delegation(
        &mut self,
        ctx: &Ctx,
        apex: Apex,
        in_answer: bool,
        mut ans: AnswerBuilder<Target>,
    ) -> (AdditionalBuilder<Target>, Result<(), PushError>) {
        let level = apex.level().min(ctx.view.levels.len().saturating_sub(1));
        let servers = self.pick_nameservers(ctx, level, ctx.client);
        // The name servers' names, made once per (apex, address) and kept.
        let mut idx = [usize::MAX; NAMESERVERS_MAX];
        for (slot, ip) in idx.iter_mut().zip(servers.addrs()) {
            *slot = match self.ns_name_cached(apex, ip) {
                Some(i) => i,
                None => return (ans.additional(), Err(PushError::ShortBuf)),
            };
        }
        let owner = &self.apex_names[apex_index(apex)];
        let cache = &self.ns_cache;
        let names = || {
            idx.iter()
                .filter_map(|&i| cache.get(i))
                .map(|n| (n.ip, n.name.for_ref()))
        };
        let ttl = Ttl::from_secs(NS_TTL_SECS);
        let mut add = if in_answer {
            for (_, n) in names() {
                if let Err(e) = ans.push((owner.for_ref(), ttl, Ns::new(n))) {
                    return (ans.additional(), Err(e));
                }
            }
            ans.additional()
        } else {
            let mut auth = ans.authority();
            for (_, n) in names() {
                if let Err(e) = auth.push((owner.for_ref(), ttl, Ns::new(n))) {
                    return (auth.additional(), Err(e));
                }
            }
            auth.additional()
        };
        for (ip, n) in names() {
            let r = match ip {
                IpAddr::V4(a) => add.push((n, ttl, a4(a))),
                IpAddr::V6(a) => add.push((n, ttl, a6(a))),
            };
            if let Err(e) = r {
                return (add, Err(e));
            }
        }
        (add, Ok(()))
    }

    /// Builds the answer for a name in our zones. Returns the builder at the
    /// additional section, the Client Subnet scope, and whether it all fit.
    pub(super) fn build(
        &mut self,
        ctx: &Ctx,
        place: Place,
        mut ans: AnswerBuilder<Target>,
    ) -> (AdditionalBuilder<Target>, u8, Result<(), PushError>) {
        let qtype = ctx.qtype;
        match place {
            Place::Outside => (ans.additional(), 0, Ok(())),
            Place::Apex(apex) => {
                let (add, r) = match qtype {
                    Rtype::SOA | Rtype::ANY => {
                        let r = self
                            .push_soa(ctx.view, apex, ZONE_TTL_SECS, |o, t, s| ans.push((o, t, s)));
                        (ans.additional(), r)
                    }
                    Rtype::NS => self.delegation(ctx, apex, true, ans),
                    Rtype::DNAME if apex == Apex::Alias => {
                        let r = self.push_dname(ctx, &mut ans);
                        (ans.additional(), r)
                    }
                    _ => self.negative(ctx, apex, Rcode::NOERROR, ans),
                };
                (add, 0, r)
            }
            Place::NsHost(apex, ip) => {
                let (add, r) = if qtype == family_rtype(ip) || qtype == Rtype::ANY {
                    let ttl = Ttl::from_secs(NS_TTL_SECS);
                    let r = match ip {
                        IpAddr::V4(a) => ans.push((ctx.qname.clone(), ttl, a4(a))),
                        IpAddr::V6(a) => ans.push((ctx.qname.clone(), ttl, a6(a))),
                    };
                    (ans.additional(), r)
                } else {
                    self.negative(ctx, apex, Rcode::NOERROR, ans)
                };
                (add, 0, r)
            }
            Place::NxDomain(apex) => {
                let (add, r) = self.negative(ctx, apex, Rcode::NXDOMAIN, ans);
                (add, 0, r)
            }
            Place::Proxy => self.proxies(ctx, None, ans),
            Place::BelowAlias(prefix) => {
                if let Err(e) = self.push_dname(ctx, &mut ans) {
                    return (ans.additional(), 0, Err(e));
                }
                // The synthesized CNAME (RFC 6672 §2.2): the query name with
                // the alias replaced by http.L2.L1.L0.Z, letter case kept.
                let mut target = NameBuf::new();
                let fits = ctx.labels[..prefix].iter().all(|l| target.push(l))
                    && target.push(b"http")
                    && self.apex_name(Apex::L2, &mut target);
                if !fits {
                    // Too long a name: YXDOMAIN, with the DNAME.
                    ans.header_mut().set_rcode(Rcode::YXDOMAIN);
                    return (ans.additional(), 0, Ok(()));
                }
                let Some(tname) = target.name() else {
                    return (ans.additional(), 0, Err(PushError::ShortBuf));
                };
                let r = ans.push((
                    ctx.qname.clone(),
                    Ttl::from_secs(ZONE_TTL_SECS),
                    Cname::new(tname.clone()),
                ));
                if r.is_err() || matches!(qtype, Rtype::CNAME | Rtype::DNAME | Rtype::ANY) {
                    return (ans.additional(), 0, r);
                }
                self.proxies(ctx, Some(tname), ans)
            }
        }
    }

    pub(super) fn push_dname(
        &self,
        ctx: &Ctx,
        ans: &mut AnswerBuilder<Target>,
    ) -> Result<(), PushError> {
        let (mut owner, mut target) = (NameBuf::new(), NameBuf::new());
        let ok = self.apex_name(Apex::Alias, &mut owner)
            && target.push(b"http")
            && self.apex_name(Apex::L2, &mut target);
        let _ = ctx;
        match (ok, owner.name(), target.name()) {
            (true, Some(o), Some(t)) => ans.push((o, Ttl::from_secs(ZONE_TTL_SECS), Dname::new(t))),
            _ => Err(PushError::ShortBuf),
        }
    }

    /// The proxies for `owner` (the query name, or a CNAME's target), and
    /// the delegation that locks the resolver onto the client's cluster.
    pub(super) fn proxies(
        &mut self,
        ctx: &Ctx,
        owner: Option<Flat<'_>>,
        mut ans: AnswerBuilder<Target>,
    ) -> (AdditionalBuilder<Target>, u8, Result<(), PushError>) {
        // The fast path may have picked already (then it could not write
        // the answer itself: no proxy, or too big).
        let (pick, best) = match self.picked.take() {
            Some(p) => p,
            None => {
                let mut best = Best::new(self.cfg.answers_max);
                (self.pick(ctx, &mut best), best)
            }
        };
        let (level, scope, ttl) = match pick {
            Pick::NoAddress => {
                let (add, r) = self.negative(ctx, Apex::L2, Rcode::NOERROR, ans);
                return (add, 0, r);
            }
            Pick::Held(scope) => return (ans.additional(), scope, Ok(())),
            Pick::NoProxy(scope) => {
                let (add, r) = self.negative(ctx, Apex::L2, Rcode::NOERROR, ans);
                return (add, scope, r);
            }
            Pick::Proxies { level, scope, ttl } => (level, scope, ttl),
        };
        let ttl = Ttl::from_secs(ttl);
        for ip in best.addrs() {
            let r = match (ip, owner.clone()) {
                (IpAddr::V4(a), Some(o)) => ans.push((o, ttl, a4(a))),
                (IpAddr::V4(a), None) => ans.push((ctx.qname.clone(), ttl, a4(a))),
                (IpAddr::V6(a), Some(o)) => ans.push((o, ttl, a6(a))),
                (IpAddr::V6(a), None) => ans.push((ctx.qname.clone(), ttl, a6(a))),
            };
            if let Err(e) = r {
                return (ans.additional(), scope, Err(e));
            }
        }
        // The lock (§3.1): the zone of the client's level, delegated to
        // its cluster's name servers. If it does not fit, the answer goes
        // without it rather than truncated.
        let (add, r) = self.delegation(ctx, Apex::for_level(level), false, ans);
        match r {
            Ok(()) => (add, scope, Ok(())),
            Err(_) => {
                let mut auth = add.authority();
                auth.rewind();
                (auth.additional(), scope, Ok(()))
            }
        }
    }
}
