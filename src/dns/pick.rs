//! Locality (§3.1): where the client is, and the live proxies and name
//! servers nearest it — hints first, then its level's cluster by shared
//! prefix and RTT, falling back to larger clusters.

use super::*;

/// Bits two addresses share from the left (0 across families).
pub(super) fn common_prefix(a: IpAddr, b: IpAddr) -> u32 {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) ^ u32::from(b)).leading_zeros(),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a) ^ u128::from(b)).leading_zeros(),
        _ => 0,
    }
}

/// Whether `client` is on `proxy`'s local network (/24, /64).
pub(super) fn same_local_net(client: IpAddr, proxy: IpAddr) -> bool {
    match client {
        IpAddr::V4(_) => common_prefix(client, proxy) >= 24,
        IpAddr::V6(_) => common_prefix(client, proxy) >= 64,
    }
}

/// Up to `N` peers, best first.
#[derive(Clone, Copy, Debug)]
pub(super) struct Best<const N: usize> {
    pub(super) items: [(u32, u64, IpAddr); N],
    /// When each item last answered one of our RPCs (`Time::MAX`: no
    /// check needed, e.g. this node itself).
    pub(super) verified: [Time; N],
    pub(super) len: usize,
    pub(super) cap: usize,
}

impl<const N: usize> Best<N> {
    pub(super) fn new(cap: usize) -> Self {
        Best {
            items: [(0, 0, IpAddr::V4(Ipv4Addr::UNSPECIFIED)); N],
            verified: [Time::MAX; N],
            len: 0,
            cap: cap.min(N),
        }
    }

    /// Offers a peer: more shared prefix bits with the target first, then
    /// lower RTT. Duplicates (several levels name one node) are skipped.
    pub(super) fn offer(&mut self, prefix: u32, rtt_us: u64, addr: IpAddr) {
        self.offer_verified(prefix, rtt_us, addr, Time::MAX);
    }

    /// [`Best::offer`] of a peer last verified at `verified`. Inlined
    /// where it is called: a call's register saves and restores were
    /// half of its cost on an empty set (issue 27).
    #[inline(always)]
    pub(super) fn offer_verified(
        &mut self,
        prefix: u32,
        rtt_us: u64,
        addr: IpAddr,
        verified: Time,
    ) {
        if self.cap == 0 || self.items[..self.len].iter().any(|i| i.2 == addr) {
            return;
        }
        let key = (std::cmp::Reverse(prefix), rtt_us);
        let mut at = self.len;
        while at > 0 {
            let p = self.items[at - 1];
            if (std::cmp::Reverse(p.0), p.1) <= key {
                break;
            }
            at -= 1;
        }
        if at >= self.cap {
            return;
        }
        let end = self.len.min(self.cap - 1);
        // Only when something moves: an empty `copy_within` still calls
        // memmove twice (about 45 instructions an answer, issue 27).
        if at < end {
            self.items.copy_within(at..end, at + 1);
            self.verified.copy_within(at..end, at + 1);
        }
        self.items[at] = (prefix, rtt_us, addr);
        self.verified[at] = verified;
        self.len = (self.len + 1).min(self.cap);
    }

    /// Empties it, to hold up to `cap` (the items are overwritten before
    /// they are read).
    pub(super) fn clear(&mut self, cap: usize) {
        self.len = 0;
        self.cap = cap.min(N);
    }

    #[inline]
    pub(super) fn addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.items[..self.len].iter().map(|i| i.2)
    }
}

/// What [`Dnssrv::pick`] decided for a proxy name.
#[derive(Clone, Copy, Debug)]
pub(super) enum Pick {
    /// The query type has no addresses (NODATA).
    NoAddress,
    /// Held (with the Client Subnet scope).
    Held(u8),
    /// No proxy live: NODATA (with the scope).
    NoProxy(u8),
    /// The proxies picked, for a client at `level`, named for `ttl`
    /// seconds.
    Proxies { level: usize, scope: u8, ttl: u32 },
}

impl Dnssrv {
    /// Where the client is: its address (the Client Subnet's, if one with
    /// a source prefix was sent, else the resolver's), its level and the
    /// Client Subnet scope the answer holds for. Also the nodes hints found
    /// near it (one look at its network), into `near` (left as it is when
    /// none were found: callers pass `None`).
    pub(super) fn locate(
        &mut self,
        now: Time,
        client: IpAddr,
        ecs: Option<Ecs>,
        near: &mut Option<NearNodes>,
    ) -> (IpAddr, Level, u8) {
        let (ip, scope) = match ecs {
            Some(e) if e.source > 0 => {
                let bits = match e.addr {
                    IpAddr::V4(_) => 24,
                    IpAddr::V6(_) => 56,
                };
                (e.addr, e.source.min(bits))
            }
            _ => (client, 0),
        };
        let key = prefix_key(ip, 24, 56);
        // One look at the network: its RTT and the nodes near it.
        let (rtt, near_fresh) = {
            let l = self.networks.look_ref(key, now);
            if let Some(n) = l.near {
                *near = Some(*n);
            }
            (l.rtt, l.near_fresh)
        };
        // Probe a network not measured, or whose near nodes (hints) are not
        // known: its RTT and its last hops come back in `on_probe`.
        let retry = matches!(self.hold, Hold::Retry(_));
        if !retry && (rtt.is_none() || !near_fresh) {
            if self.probes.allow(ip, now) {
                self.counters.probes_sent += 1;
                self.followups.push_back(FollowUp::Probe(ip));
            } else if rtt.is_none() {
                self.counters.probes_refused += 1;
            }
        }
        match rtt {
            Some(rtt) => (ip, self.level_for(rtt), scope),
            None => (ip, self.cfg.default_level, scope),
        }
    }

    /// The live proxies nearest `target` at `level`: first those a
    /// clustering hint found near the target (verified alive, in the order
    /// of their hops, nearest the client first), then that level's cluster
    /// by shared prefix and RTT, falling back to lower levels (larger
    /// clusters) when a level has none. With none live at all while
    /// candidates are being pinged, it asks to hold the query
    /// (`self.hold_now`) if `self.hold` allows.
    pub(super) fn pick_proxies(
        &mut self,
        ctx: &Who,
        level: usize,
        target: IpAddr,
        want: Rtype,
        near: &Option<NearNodes>,
        best: &mut Best<ANSWERS_MAX>,
    ) -> bool {
        let live = Duration::from_secs(self.cfg.live_secs);
        let hold_window = Duration::from_millis(self.cfg.hold_ms);
        best.clear(self.cfg.answers_max);
        let usable = |p: &Peer| {
            family_rtype(p.addr) == want
                && ctx.now.saturating_since(p.verified) <= live
                && (!p.non_recursive || same_local_net(ctx.client, p.addr))
        };
        // Nodes near the target, found through hints: ranked above every
        // proxy of the level (they are near by topology, not only by RTT).
        let mut unverified = false;
        for (i, a) in near.iter().flatten().flatten().enumerate() {
            let ip = a.ip();
            if ip == ctx.view.me {
                continue;
            }
            let found = ctx
                .view
                .levels
                .iter()
                .flat_map(|lv| lv.proxies.iter())
                .find(|p| p.addr == ip && usable(p));
            match found {
                Some(p) if self.named_if_live(p, ctx.now) => {
                    best.offer_verified(HINT_RANK, i as u64, p.addr, p.verified)
                }
                Some(_) => {}
                None => unverified = true,
            }
        }
        let hinted = best.len > 0;
        if unverified
            && self
                .networks
                .ping_due(prefix_key(target, 24, 56), ctx.now, VERIFY_INTERVAL)
        {
            for &a in near.iter().flatten().flatten() {
                self.followups.push_back(FollowUp::Ping(a));
            }
        }
        // A query that may be held asks for a fresh round of pings (at most
        // one per HOLD_ROUND_INTERVAL), unless a held query recently waited
        // for one in vain (then only the periodic rounds).
        let hold_may_ping = self.hold == Hold::Allowed
            && self.cfg.hold_ms > 0
            && self
                .hold_failed
                .is_none_or(|t| ctx.now.saturating_since(t) >= VERIFY_INTERVAL);
        let mut pinging = false;
        for l in (0..=level).rev() {
            if let Some(lv) = ctx.view.levels.get(l) {
                for p in lv.proxies.iter().filter(|p| usable(p)) {
                    if self.named_if_live(p, ctx.now) {
                        best.offer_verified(
                            common_prefix(target, p.addr),
                            p.rtt.map_or(u64::MAX, |d| d.as_micros()),
                            p.addr,
                            p.verified,
                        );
                    }
                }
            }
            if ctx.view.me_http
                && family_rtype(ctx.view.me) == want
                && (!ctx.view.me_non_recursive || same_local_net(ctx.client, ctx.view.me))
            {
                best.offer(common_prefix(target, ctx.view.me), 0, ctx.view.me);
            }
            if best.len > 0 {
                break;
            }
            if l < LEVELS
                && ctx
                    .view
                    .levels
                    .get(l)
                    .is_some_and(|lv| lv.proxies.iter().any(|p| family_rtype(p.addr) == want))
            {
                let since = self.verify_asked[l].map(|t| ctx.now.saturating_since(t));
                let due = since.is_none_or(|s| {
                    s >= VERIFY_INTERVAL || (hold_may_ping && s >= HOLD_ROUND_INTERVAL)
                });
                if due {
                    self.verify_asked[l] = Some(ctx.now);
                    self.followups.push_back(FollowUp::Verify(l as Level));
                }
                // Pings of this level are out (just now, or recently
                // enough that their answers may still come).
                pinging |=
                    self.verify_asked[l].is_some_and(|t| ctx.now.saturating_since(t) < hold_window);
            }
        }
        self.check_named(best, ctx.now);
        if best.len == 0 && pinging && hold_may_ping {
            if self.held < self.cfg.held_max {
                self.hold_now = true;
            } else {
                self.counters.held_refused += 1;
            }
        }
        if let Hold::Retry(since) = self.hold {
            if best.len == 0 && ctx.now.saturating_since(since) < hold_window {
                // Still waiting on the pings asked for when it was held.
                self.hold_now = true;
            }
        }
        hinted
    }

    /// Whether the liveness rules let `p` be named now (`live.rs`): not if
    /// a check of it went unanswered. A dead proxy is checked again (at
    /// most once per `CHECK_INTERVAL`), so one that answers comes back.
    fn named_if_live(&mut self, p: &Peer, now: Time) -> bool {
        match self.live.verdict(p.addr, p.verified, now) {
            Verdict::Fresh | Verdict::Suspect => true,
            Verdict::Dead => {
                self.counters.proxies_withheld += 1;
                self.ask_check(p.addr, p.verified, now);
                false
            }
        }
    }

    /// Asks for checks of the proxies an answer names that have not
    /// answered within `FRESH` (this node itself is never checked).
    fn check_named(&mut self, best: &Best<ANSWERS_MAX>, now: Time) {
        for i in 0..best.len {
            let verified = best.verified[i];
            if verified != Time::MAX {
                self.ask_check(best.items[i].2, verified, now);
            }
        }
    }

    /// A check of the proxy at `addr` if one is due and allowed.
    fn ask_check(&mut self, addr: IpAddr, verified: Time, now: Time) {
        match self.live.want_check(addr, verified, now) {
            Check::NotDue => {}
            Check::Send => {
                self.counters.checks_sent += 1;
                self.followups.push_back(FollowUp::Check(addr));
            }
            Check::Refused => self.counters.checks_refused += 1,
        }
    }

    /// The name servers of `level`'s cluster nearest `target` (this node
    /// always among the candidates: it is answering).
    pub(super) fn pick_nameservers(
        &self,
        ctx: &Who,
        level: usize,
        target: IpAddr,
    ) -> Best<NAMESERVERS_MAX> {
        let mut best = Best::new(self.cfg.nameservers_max);
        self.pick_nameservers_into(ctx, level, target, &mut best);
        best
    }

    /// [`Dnssrv::pick_nameservers`] into `best` (cleared first). Inlined
    /// where it is called: the call's saves and restores were a third of
    /// its 60 instructions on a node alone (issue 27, session 8).
    #[inline(always)]
    pub(super) fn pick_nameservers_into(
        &self,
        ctx: &Who,
        level: usize,
        target: IpAddr,
        best: &mut Best<NAMESERVERS_MAX>,
    ) {
        let live = Duration::from_secs(self.cfg.live_secs);
        best.clear(self.cfg.nameservers_max);
        best.offer(common_prefix(target, ctx.view.me), 0, ctx.view.me);
        if let Some(lv) = ctx.view.levels.get(level) {
            for p in &lv.nameservers {
                if ctx.now.saturating_since(p.verified) <= live {
                    best.offer(
                        common_prefix(target, p.addr),
                        p.rtt.map_or(u64::MAX, |d| d.as_micros()),
                        p.addr,
                    );
                }
            }
        }
    }

    /// What the answer for a proxy name holds: the client located, the
    /// proxies picked, the counters and follow-ups of that done (the
    /// answer function's side effects, taken once per query whichever way
    /// the answer is then written).
    pub(super) fn pick(&mut self, ctx: &Who, best: &mut Best<ANSWERS_MAX>) -> Pick {
        let want = match ctx.qtype {
            Rtype::A | Rtype::ANY => Rtype::A,
            Rtype::AAAA => Rtype::AAAA,
            _ => return Pick::NoAddress,
        };
        // The target: the Client Subnet's address if one was sent (with a
        // source prefix), else the resolver's.
        let mut near = None;
        let (target, level, scope) = self.locate(ctx.now, ctx.client, ctx.edns.ecs, &mut near);
        let level = (level as usize).min(ctx.view.levels.len().saturating_sub(1));
        let hinted = self.pick_proxies(ctx, level, target, want, &near, best);
        if self.hold_now {
            // Held: nothing is sent now; the query is asked again.
            return Pick::Held(scope);
        }
        if !matches!(self.hold, Hold::Retry(_)) {
            match level {
                0 => self.counters.client_level0 += 1,
                1 => self.counters.client_level1 += 1,
                _ => self.counters.client_level2 += 1,
            }
        }
        match self.hold {
            Hold::Retry(_) if best.len > 0 => self.counters.held_answered += 1,
            Hold::Retry(_) => {
                self.counters.held_expired += 1;
                self.hold_failed = Some(ctx.now);
            }
            _ => {}
        }
        if best.len == 0 {
            self.counters.answers_no_proxy += 1;
            return Pick::NoProxy(scope);
        }
        if hinted {
            self.counters.answers_hinted += 1;
        }
        self.counters.answers_proxied += 1;
        self.answer_level = Some(level as Level);
        // A proxy no answer has confirmed for long (a quiet spell) is named
        // briefly: if it died meanwhile, its check says so within seconds
        // and resolvers ask again soon after (`live.rs`).
        let unconfirmed = (0..best.len).any(|i| {
            let v = best.verified[i];
            v != Time::MAX && ctx.now.saturating_since(v) > UNCONFIRMED
        });
        let ttl = if unconfirmed {
            a_ttl_secs(level).min(A_TTL_SECS_UNCONFIRMED)
        } else {
            a_ttl_secs(level)
        };
        Pick::Proxies { level, scope, ttl }
    }
}

#[cfg(test)]
mod cut_tests {
    use super::*;
    use proptest::prelude::*;

    /// [`Best::offer_verified`] as it was before issue 27's cut (both
    /// `copy_within`s taken even when nothing moves).
    fn offer_before<const N: usize>(
        b: &mut Best<N>,
        prefix: u32,
        rtt_us: u64,
        addr: IpAddr,
        verified: Time,
    ) {
        if b.cap == 0 || b.items[..b.len].iter().any(|i| i.2 == addr) {
            return;
        }
        let key = (std::cmp::Reverse(prefix), rtt_us);
        let mut at = b.len;
        while at > 0 {
            let p = b.items[at - 1];
            if (std::cmp::Reverse(p.0), p.1) <= key {
                break;
            }
            at -= 1;
        }
        if at >= b.cap {
            return;
        }
        let end = b.len.min(b.cap - 1);
        b.items.copy_within(at..end, at + 1);
        b.verified.copy_within(at..end, at + 1);
        b.items[at] = (prefix, rtt_us, addr);
        b.verified[at] = verified;
        b.len = (b.len + 1).min(b.cap);
    }

    proptest! {
        #[test]
        fn best_keeps_the_peers_it_kept_before(
            cap in 0usize..6,
            offers in proptest::collection::vec((0u32..4, 0u64..4, 0u8..8, any::<u64>()), 0..24),
        ) {
            let (mut new, mut old) = (Best::<4>::new(cap), Best::<4>::new(cap));
            for (prefix, rtt, host, verified) in offers {
                let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, host));
                new.offer_verified(prefix, rtt, addr, Time(verified));
                offer_before(&mut old, prefix, rtt, addr, Time(verified));
                prop_assert_eq!(new.len, old.len);
                prop_assert_eq!(&new.items[..new.len], &old.items[..old.len]);
                prop_assert_eq!(&new.verified[..new.len], &old.verified[..old.len]);
            }
        }
    }
}
