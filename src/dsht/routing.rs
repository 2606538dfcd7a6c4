//! Kademlia k-bucket routing table for one cluster level (§4.1).
//!
//! Bucket `i` holds contacts whose XOR distance from the local id has bit
//! length `i + 1`. Each bucket holds at most k contacts, least recently seen
//! first. A verified contact that finds its bucket full does not displace
//! anyone: it waits as the bucket's one replacement while the least recently
//! seen contact is pinged, and takes that place only if the ping fails
//! (Kademlia's preference for long-lived nodes). No clock is read here: every
//! method that needs the time takes `now`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use smallvec::SmallVec;

use crate::dsht::id::{words, xor, Id, ID_BITS};
use crate::dsht::wire::{Contact, Services};
use crate::time::{Duration, Time};

/// RPC failures in a row after which a contact is dropped even when no
/// replacement waits for its place (unless it is the last contact of a
/// table that keeps it, level 0's: [`RoutingTable::on_failure`]).
pub const CONTACT_FAILURES_MAX: u8 = 3;
/// A full bucket's least recently seen contact that answered within this
/// long is taken to be alive without a ping: the newcomer waits as the
/// replacement. (Otherwise every reply from a node that does not fit would
/// cost a ping, and the pongs, observed at other levels, would set off more.)
pub const OLDEST_FRESH: Duration = Duration::from_secs(60);

/// A contact in the routing table, with what we know of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    /// The contact as it would appear on the wire.
    pub contact: Contact,
    /// When it last answered us.
    pub last_seen: Time,
    /// Minimum RTT measured to it, if any.
    pub rtt_min: Option<Duration>,
    /// RPC failures since it last answered.
    pub failures: u8,
}

/// A bucket's header: its contacts sit in the table's slot arrays.
#[derive(Clone, Debug, Default)]
struct Bucket {
    /// The bucket's first slot: the slots of `buckets[j]` follow those of
    /// `buckets[j - 1]`.
    base: u16,
    /// Slots the bucket has (at most k): it gets them as it fills
    /// ([`RoutingTable::make_room`]).
    slots: u16,
    /// Contacts in the bucket's slots, least recently seen first.
    len: u32,
    /// A verified contact waiting for a place (see the module docs). Boxed:
    /// most buckets never have one.
    replacement: Option<Box<Waiting>>,
}

/// A bucket's replacement, packed as a slot is: 56 bytes where an [`Entry`]
/// is 88 (a full bucket of a busy node nearly always has one: 8–9 a
/// simulated node, issue 27).
#[derive(Clone, Copy, Debug)]
struct Waiting {
    id: Id,
    reach: Reach,
    seen: Seen,
    /// The IPv6 address, where `reach` says so.
    ip6: [u8; 16],
}

impl Waiting {
    fn new(e: &Entry) -> Waiting {
        let (mut reach, ip6) = Reach::new(e.contact.addr, e.contact.services);
        reach.set_failures(e.failures);
        Waiting {
            id: e.contact.id,
            reach,
            seen: Seen::new(e.last_seen, e.rtt_min),
            ip6: ip6.unwrap_or_default(),
        }
    }

    fn entry(&self) -> Entry {
        let ip = if self.reach.is_v6() {
            IpAddr::from(self.ip6)
        } else {
            IpAddr::from(self.reach.ip4)
        };
        Entry {
            contact: Contact {
                id: self.id,
                addr: SocketAddr::new(ip, self.reach.port),
                services: self.reach.services,
            },
            last_seen: self.seen.last_seen(),
            rtt_min: self.seen.rtt_min(),
            failures: self.reach.failures(),
        }
    }
}

/// Where a contact can be reached: the rest of its [`Contact`], packed
/// into 8 bytes (a `SocketAddr` alone is 32). Only the IP address and port
/// are kept, which is all the wire carries of a contact (no IPv6 flow label
/// or scope id). An IPv6 address's 16 bytes sit in the table's `reach6`,
/// which has no slots until the table first holds an IPv6 contact: a
/// simulated node (IPv4 only) holds about 8·log2 n slots for life, and 16
/// bytes of each went unused (1.6 KB a node at 100,000 nodes, issue 27).
/// The contact's RPC failures since it last answered sit in the same byte
/// as the IPv6 flag (bits 0–6; a contact is dropped at
/// [`CONTACT_FAILURES_MAX`], so they never come near 127), which keeps
/// [`Seen`] at 12 bytes.
#[derive(Clone, Copy, Debug)]
struct Reach {
    /// An IPv4 address (all zero for IPv6: see `RoutingTable::reach6`).
    ip4: [u8; 4],
    port: u16,
    /// [`V6`] for an IPv6 address, or'd with the failures (saturating at
    /// [`FAILURES_HELD_MAX`]).
    flags: u8,
    services: Services,
}

/// `Reach::flags`: the address is IPv6.
const V6: u8 = 0x80;
/// The most failures `Reach::flags` holds.
const FAILURES_HELD_MAX: u8 = 0x7f;

impl Reach {
    /// The slot's address and, for IPv6, the address's bytes for `reach6`.
    fn new(addr: SocketAddr, services: Services) -> (Reach, Option<[u8; 16]>) {
        let (ip4, v6) = match addr.ip() {
            IpAddr::V4(a) => (a.octets(), None),
            IpAddr::V6(a) => ([0; 4], Some(a.octets())),
        };
        let r = Reach {
            ip4,
            port: addr.port(),
            flags: if v6.is_some() { V6 } else { 0 },
            services,
        };
        (r, v6)
    }

    fn is_v6(&self) -> bool {
        self.flags & V6 != 0
    }

    fn failures(&self) -> u8 {
        self.flags & FAILURES_HELD_MAX
    }

    fn set_failures(&mut self, failures: u8) {
        self.flags = (self.flags & V6) | failures.min(FAILURES_HELD_MAX);
    }
}

/// When we last heard from a contact and its RTT, in 12 bytes (the time
/// as two 32-bit halves, so that the record is 4-aligned: a slot is then
/// 40 bytes with its id and [`Reach`], from 44).
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// `last_seen`'s microseconds, low and high 32 bits.
    last_seen_us: [u32; 2],
    /// The minimum RTT in microseconds, [`RTT_UNKNOWN`] if none was
    /// measured (longer RTTs, over 71 minutes, are held as the longest).
    rtt_min_us: u32,
}

/// `Seen::rtt_min_us` when no RTT was measured.
const RTT_UNKNOWN: u32 = u32::MAX;

impl Seen {
    fn new(last_seen: Time, rtt_min: Option<Duration>) -> Seen {
        Seen {
            last_seen_us: [last_seen.0 as u32, (last_seen.0 >> 32) as u32],
            rtt_min_us: Seen::pack_rtt(rtt_min),
        }
    }

    fn last_seen(&self) -> Time {
        Time(u64::from(self.last_seen_us[1]) << 32 | u64::from(self.last_seen_us[0]))
    }

    fn set_last_seen(&mut self, t: Time) {
        self.last_seen_us = [t.0 as u32, (t.0 >> 32) as u32];
    }

    fn rtt_min(&self) -> Option<Duration> {
        (self.rtt_min_us != RTT_UNKNOWN).then(|| Duration::from_micros(u64::from(self.rtt_min_us)))
    }

    fn pack_rtt(rtt: Option<Duration>) -> u32 {
        rtt.map_or(RTT_UNKNOWN, |d| {
            d.as_micros().min(u64::from(RTT_UNKNOWN - 1)) as u32
        })
    }
}

const NO_REACH: Reach = Reach {
    ip4: [0; 4],
    port: 0,
    flags: 0,
    services: Services::NONE,
};
const NOT_SEEN: Seen = Seen {
    last_seen_us: [0; 2],
    rtt_min_us: RTT_UNKNOWN,
};

/// What `insert` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    /// The contact was already present; its record was refreshed.
    Refreshed,
    /// The contact was added.
    Added,
    /// The bucket is full. The contact waits as its replacement; ping this
    /// least-recently-seen contact and report the outcome.
    PingOldest(Contact),
    /// The bucket is full and its oldest contact is already being checked.
    Waiting,
    /// The contact is the local node.
    IsSelf,
    /// The bucket holds its share of contacts from the contact's IP address
    /// or /24 already ([`RoutingTable::set_address_limits`]).
    Refused,
}

/// One level's routing table.
///
/// Laid out for a driver that reads thousands of tables cold (the
/// simulator): the contacts of all buckets share three arrays of up to `k`
/// slots per bucket, split by use — ids (scanned by every lookup of a contact and
/// every `closest`), addresses (read for the contacts `closest` returns) and
/// the rest (last seen and RTT: read on inserts and refreshes), 40 bytes a
/// slot in all. A bucket's ids then span 160 bytes rather than eight
/// 88-byte records, and a table is three allocations rather than one per
/// bucket.
#[derive(Clone, Debug)]
pub struct RoutingTable {
    local: Id,
    bucket_size: usize,
    /// The buckets from the far end: `buckets[j]` is bucket `ID_BITS - 1 - j`
    /// (see [`RoutingTable::slot`]). Bucket i covers 2^(i+1−160) of the id
    /// space, so in a network of n nodes only the top log2 n or so can hold
    /// anyone: the table grows down to the deepest bucket that has held a
    /// contact, not to all 160.
    buckets: Vec<Bucket>,
    /// Contact ids: slots `base .. base + len` of `buckets[j]` are bucket
    /// j's. A bucket has k slots once it has held more than k/2 contacts,
    /// and fewer before (2, 4, ...): the buckets nearest the local id, which
    /// few nodes can enter, hold one or two contacts each, and the table
    /// reaches down to the deepest that has held one (at 100,000 nodes about
    /// 28 of a table's 144 slots were empty, 1.2 KB a node, issue 27).
    ids: Vec<Id>,
    /// The same slots' addresses and services.
    reach: Vec<Reach>,
    /// The same slots' IPv6 addresses (where `Reach::v6`): empty until the
    /// table first holds an IPv6 contact, then as long as `reach`.
    reach6: Vec<[u8; 16]>,
    /// The same slots' records.
    seen: Vec<Seen>,
    /// One bit per bucket: whether it holds any contact. Most of the 160
    /// buckets are empty (only about log2 n are not), and walking them all
    /// was most of the cost of `closest` and `size_estimate`.
    occupied: [u64; OCCUPIED_WORDS],
    len: usize,
    /// Counts changes to the set of contacts (not to their records), so that
    /// a caller can tell whether anything that depends only on that set,
    /// such as [`RoutingTable::size_estimate`], needs computing again.
    generation: u64,
    /// Contacts one bucket may hold from one IP, and from one /24 (/48).
    per_ip_max: usize,
    per_prefix_max: usize,
    /// Whether the last contact stays when it fails ([`RoutingTable::on_failure`]).
    keeps_last: bool,
}

const OCCUPIED_WORDS: usize = (ID_BITS as usize).div_ceil(64);

impl RoutingTable {
    /// An empty table around `local` with buckets of `bucket_size` (k).
    pub fn new(local: Id, bucket_size: usize) -> RoutingTable {
        RoutingTable {
            local,
            bucket_size,
            buckets: Vec::new(),
            ids: Vec::new(),
            reach: Vec::new(),
            reach6: Vec::new(),
            seen: Vec::new(),
            occupied: [0; OCCUPIED_WORDS],
            len: 0,
            generation: 0,
            per_ip_max: usize::MAX,
            per_prefix_max: usize::MAX,
            keeps_last: false,
        }
    }

    /// Makes the table keep its last contact when it fails (level 0's, the
    /// node's way back into the network; see [`RoutingTable::on_failure`]).
    pub fn keep_last_contact(&mut self) {
        self.keeps_last = true;
    }

    /// Limits the contacts one bucket may hold from one IP address and from
    /// one /24 (IPv6: /48), as BEP 42 and libtorrent do: one address, or one
    /// network, cannot fill the buckets near a key it wants to own.
    pub fn set_address_limits(&mut self, per_ip_max: usize, per_prefix_max: usize) {
        self.per_ip_max = per_ip_max;
        self.per_prefix_max = per_prefix_max;
    }

    /// Whether bucket `bi` has room for one more contact at `addr` under
    /// the address limits.
    fn address_allows(&self, bi: usize, addr: SocketAddr) -> bool {
        if self.per_ip_max == usize::MAX && self.per_prefix_max == usize::MAX {
            return true;
        }
        let (base, len) = self.span(bi);
        let prefix = crate::dsht::store::prefix_of(addr.ip());
        let (mut ip, mut net) = (0, 0);
        for i in base..base + len {
            let r = self.addr_at(i).ip();
            ip += usize::from(r == addr.ip());
            net += usize::from(crate::dsht::store::prefix_of(r) == prefix);
        }
        ip < self.per_ip_max && net < self.per_prefix_max
    }

    /// Where bucket `bi` sits in `buckets`.
    fn slot(bi: usize) -> usize {
        ID_BITS as usize - 1 - bi
    }

    /// Bucket `bi`'s first slot and number of contacts (0 if the table has
    /// not grown down to it).
    fn span(&self, bi: usize) -> (usize, usize) {
        match self.buckets.get(Self::slot(bi)) {
            Some(b) => (usize::from(b.base), b.len as usize),
            None => (0, 0),
        }
    }

    /// Grows the table down to bucket `bi` if needed (at most `ID_BITS`
    /// buckets, with no slots yet); returns its index in `buckets`.
    fn grow_to(&mut self, bi: usize) -> usize {
        let j = Self::slot(bi);
        if self.buckets.len() <= j {
            let base = self.ids.len() as u16;
            self.buckets.resize_with(j + 1, || Bucket {
                base,
                ..Bucket::default()
            });
        }
        j
    }

    /// Gives bucket `j` at least `need` (≤ k) slots: twice what it has, at
    /// least 2, at most k. The new slots go after its last, and the slots of
    /// the buckets after it move up. Exactly: a node holds its table for
    /// life (amortized doubling left up to half of every simulated node's
    /// slots unused), and a bucket grows at most log2 k times.
    fn make_room(&mut self, j: usize, need: usize) {
        let have = usize::from(self.buckets[j].slots);
        if need <= have {
            return;
        }
        let slots = need.max(2 * have).max(2).min(self.bucket_size);
        let more = slots - have;
        let at = usize::from(self.buckets[j].base) + have;
        fn widen<T: Copy>(v: &mut Vec<T>, at: usize, more: usize, fill: T) {
            v.reserve_exact(more);
            v.splice(at..at, std::iter::repeat_n(fill, more));
        }
        widen(&mut self.ids, at, more, Id::ZERO);
        widen(&mut self.reach, at, more, NO_REACH);
        if !self.reach6.is_empty() {
            widen(&mut self.reach6, at, more, [0; 16]);
        }
        widen(&mut self.seen, at, more, NOT_SEEN);
        self.buckets[j].slots = slots as u16;
        for b in &mut self.buckets[j + 1..] {
            b.base += more as u16;
        }
    }

    /// The position of `id` among bucket `bi`'s slots.
    fn position(&self, bi: usize, id: &Id) -> Option<usize> {
        let (base, len) = self.span(bi);
        self.ids[base..base + len]
            .iter()
            .position(|x| x == id)
            .map(|p| base + p)
    }

    /// Slot `i`'s address. Built as the family's variant directly (not
    /// through `IpAddr`), which the compiler writes in place (issue 27: the
    /// copies through the stack cost a store-forwarding stall per contact
    /// of every answer).
    fn addr_at(&self, i: usize) -> SocketAddr {
        let r = &self.reach[i];
        if r.is_v6() {
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(self.reach6[i]),
                r.port,
                0,
                0,
            ))
        } else {
            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(r.ip4), r.port))
        }
    }

    fn contact_at(&self, i: usize) -> Contact {
        Contact {
            id: self.ids[i],
            addr: self.addr_at(i),
            services: self.reach[i].services,
        }
    }

    fn entry_at(&self, i: usize) -> Entry {
        let s = self.seen[i];
        Entry {
            contact: self.contact_at(i),
            last_seen: s.last_seen(),
            rtt_min: s.rtt_min(),
            failures: self.reach[i].failures(),
        }
    }

    fn put_at(&mut self, i: usize, e: &Entry) {
        self.ids[i] = e.contact.id;
        let (mut reach, v6) = Reach::new(e.contact.addr, e.contact.services);
        reach.set_failures(e.failures);
        self.reach[i] = reach;
        if let Some(ip6) = v6 {
            if self.reach6.is_empty() {
                self.reach6 = vec![[0; 16]; self.reach.len()];
            }
            self.reach6[i] = ip6;
        }
        self.seen[i] = Seen::new(e.last_seen, e.rtt_min);
    }

    /// Moves slot `i` to the end of its bucket (`end` is one past the last
    /// slot in use), shifting the ones after it down.
    fn rotate_to_end(&mut self, i: usize, end: usize) {
        self.ids[i..end].rotate_left(1);
        self.reach[i..end].rotate_left(1);
        if !self.reach6.is_empty() {
            self.reach6[i..end].rotate_left(1);
        }
        self.seen[i..end].rotate_left(1);
    }

    /// Removes slot `i` of bucket `j` (whose contacts end at `end`).
    fn remove_at(&mut self, j: usize, i: usize, end: usize) {
        self.rotate_to_end(i, end);
        self.buckets[j].len -= 1;
    }

    /// Appends `e` to bucket `j` (which must hold under k contacts).
    fn push(&mut self, j: usize, e: &Entry) {
        let len = self.buckets[j].len as usize;
        self.make_room(j, len + 1);
        let i = usize::from(self.buckets[j].base) + len;
        self.put_at(i, e);
        self.buckets[j].len += 1;
    }

    /// Updates bucket `bi`'s bit in `occupied` after its entries changed.
    fn mark(&mut self, bi: usize) {
        let bit = 1u64 << (bi % 64);
        if self.span(bi).1 == 0 {
            self.occupied[bi / 64] &= !bit;
        } else {
            self.occupied[bi / 64] |= bit;
        }
    }

    /// The non-empty buckets among `lo..hi`, in ascending order.
    fn occupied_in(&self, lo: usize, hi: usize) -> impl Iterator<Item = usize> + '_ {
        (lo / 64..hi.div_ceil(64)).flat_map(move |w| {
            let mut bits = self.occupied[w];
            if w == lo / 64 {
                bits &= !0u64 << (lo % 64);
            }
            if w == hi / 64 {
                bits &= !(!0u64 << (hi % 64));
            }
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }

    /// The local node's id.
    pub fn local_id(&self) -> Id {
        self.local
    }

    /// Number of contacts.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Changes whenever a contact enters or leaves the table (not when one
    /// is refreshed): what depends only on which contacts the table holds
    /// is the same while this is.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn bucket_index(&self, id: &Id) -> Option<usize> {
        let bits = self.local.distance(id).bit_len();
        (bits > 0).then(|| bits as usize - 1)
    }

    /// Starts loading the bucket `id` falls in (its header among the
    /// buckets): a hint for a driver that knows the next datagram's sender,
    /// which the datagram will insert, refresh or remove. Changes nothing.
    #[inline]
    pub fn prefetch_bucket(&self, id: &Id) {
        if let Some(b) = self
            .bucket_index(id)
            .and_then(|bi| self.buckets.get(Self::slot(bi)))
        {
            crate::dsht::prefetch::prefetch((b as *const Bucket).cast(), 1);
        }
    }

    /// Once [`RoutingTable::prefetch_bucket`]'s line has arrived: starts
    /// loading that bucket's contacts (ids, addresses and when each was
    /// last seen). Changes nothing.
    #[inline]
    pub fn prefetch_contacts(&self, id: &Id) {
        let Some(bi) = self.bucket_index(id) else {
            return;
        };
        let (base, len) = self.span(bi);
        if len == 0 || base + len > self.ids.len() {
            return;
        }
        use crate::dsht::prefetch::prefetch;
        prefetch(
            self.ids[base..].as_ptr().cast(),
            len * std::mem::size_of::<Id>(),
        );
        prefetch(
            self.reach[base..].as_ptr().cast(),
            len * std::mem::size_of::<Reach>(),
        );
        prefetch(
            self.seen[base..].as_ptr().cast(),
            len * std::mem::size_of::<Seen>(),
        );
    }

    /// Inserts or refreshes a contact that has just answered one of our RPCs
    /// (`rtt` measured on it), see [`Insert`].
    pub fn insert(&mut self, contact: Contact, now: Time, rtt: Option<Duration>) -> Insert {
        let Some(bi) = self.bucket_index(&contact.id) else {
            return Insert::IsSelf;
        };
        let k = self.bucket_size;
        let j = self.grow_to(bi);
        let (base, len) = self.span(bi);
        if let Some(i) = self.position(bi, &contact.id) {
            let s = self.seen[i];
            let e = Entry {
                contact,
                last_seen: now,
                rtt_min: min_rtt(s.rtt_min(), rtt),
                failures: 0,
            };
            self.rotate_to_end(i, base + len);
            self.put_at(base + len - 1, &e);
            return Insert::Refreshed;
        }
        if !self.address_allows(bi, contact.addr) {
            return Insert::Refused;
        }
        let entry = Entry {
            contact,
            last_seen: now,
            rtt_min: rtt,
            failures: 0,
        };
        if len < k {
            self.push(j, &entry);
            self.len += 1;
            self.generation += 1;
            self.mark(bi);
            return Insert::Added;
        }
        let bucket = &mut self.buckets[j];
        let waiting = match &mut bucket.replacement {
            Some(r) => {
                **r = Waiting::new(&entry);
                true
            }
            None => {
                bucket.replacement = Some(Box::new(Waiting::new(&entry)));
                false
            }
        };
        if waiting || now.saturating_since(self.seen[base].last_seen()) < OLDEST_FRESH {
            Insert::Waiting
        } else {
            Insert::PingOldest(self.contact_at(base))
        }
    }

    /// Whether bucket `bi` (holding distances of bit length `bi + 1`) holds
    /// k contacts.
    pub fn bucket_is_full(&self, bi: usize) -> bool {
        self.span(bi).1 >= self.bucket_size
    }

    /// The address of the table's one contact if it is all the table holds
    /// and has failed [`CONTACT_FAILURES_MAX`] RPCs in a row (kept by
    /// [`RoutingTable::on_failure`] as the last): the node may be cut off
    /// from the network. None if the table is empty or holds a live contact.
    pub fn is_stranded(&self) -> Option<SocketAddr> {
        if self.len != 1 {
            return None;
        }
        let i = usize::from(self.buckets.iter().find(|b| b.len > 0)?.base);
        (self.reach[i].failures() >= CONTACT_FAILURES_MAX).then(|| self.entry_at(i).contact.addr)
    }

    /// Whether `insert` of a new contact `id` would add it without a ping:
    /// used to decide whether an unverified sender is worth a verifying ping.
    pub fn has_room_for(&self, id: &Id) -> bool {
        match self.bucket_index(id) {
            None => false,
            Some(bi) => self.span(bi).1 < self.bucket_size && self.position(bi, id).is_none(),
        }
    }

    /// Records a failed RPC to `id`. The contact is replaced if a verified
    /// replacement waits, or dropped after [`CONTACT_FAILURES_MAX`] failures
    /// unless it is the last contact of a table that keeps it
    /// ([`RoutingTable::keep_last_contact`], level 0's): that one stays, its failures
    /// counted, until it answers again or another contact arrives (Kademlia
    /// §4.1 flags stale contacts rather than void the tables, "if a node's
    /// own network connection goes down temporarily"; a node left with no
    /// contact would hear of the network again only if someone wrote to
    /// it). A cluster level's table drops its last contact as any other: a
    /// lookup there would wait on a dead node before falling back to the
    /// level below. Returns true if it was removed.
    pub fn on_failure(&mut self, id: &Id) -> bool {
        let Some(bi) = self.bucket_index(id) else {
            return false;
        };
        let Some(i) = self.position(bi, id) else {
            return false;
        };
        let j = Self::slot(bi);
        let (base, len) = self.span(bi);
        let failures = self.reach[i].failures().saturating_add(1);
        self.reach[i].set_failures(failures);
        if let Some(replacement) = self.buckets[j].replacement.take() {
            self.remove_at(j, i, base + len);
            self.push(j, &replacement.entry());
            self.generation += 1;
            true
        } else if self.reach[i].failures() >= CONTACT_FAILURES_MAX
            && (!self.keeps_last || self.len > 1)
        {
            self.remove_at(j, i, base + len);
            self.len -= 1;
            self.generation += 1;
            self.mark(bi);
            true
        } else {
            false
        }
    }

    /// Makes the bucket that holds `target` hold `contacts` (closest to
    /// `target` first; each must have answered us just now), up to k and
    /// within the address limits, with the bucket's other contacts after
    /// them while room is left. A contact already present keeps its record;
    /// a new one is recorded as seen `now`, with no RTT yet. For a joining
    /// node's refresh of a far bucket (`Node::adopt_join_refresh`): it makes
    /// the bucket a neighbourhood of a random id rather than the first nodes
    /// that happened to answer.
    pub fn adopt(&mut self, target: &Id, contacts: &[Contact], now: Time) {
        let Some(bi) = self.bucket_index(target) else {
            return;
        };
        let k = self.bucket_size;
        let j = self.grow_to(bi);
        let (base, len) = self.span(bi);
        let old: Vec<Entry> = (base..base + len).map(|i| self.entry_at(i)).collect();
        let mut new: Vec<Entry> = Vec::with_capacity(k);
        let fits = |new: &[Entry], addr: SocketAddr, per_ip: usize, per_prefix: usize| {
            let prefix = crate::dsht::store::prefix_of(addr.ip());
            let ip = new
                .iter()
                .filter(|e| e.contact.addr.ip() == addr.ip())
                .count();
            let net = new
                .iter()
                .filter(|e| crate::dsht::store::prefix_of(e.contact.addr.ip()) == prefix)
                .count();
            ip < per_ip && net < per_prefix
        };
        for c in contacts {
            if new.len() == k {
                break;
            }
            if self.bucket_index(&c.id) != Some(bi)
                || new.iter().any(|e| e.contact.id == c.id)
                || !fits(&new, c.addr, self.per_ip_max, self.per_prefix_max)
            {
                continue;
            }
            new.push(match old.iter().find(|e| e.contact.id == c.id) {
                Some(e) => Entry { contact: *c, ..*e },
                None => Entry {
                    contact: *c,
                    last_seen: now,
                    rtt_min: None,
                    failures: 0,
                },
            });
        }
        // The old contacts kept, least recently seen first, then the rest.
        let mut kept: Vec<Entry> = old
            .iter()
            .filter(|e| !new.iter().any(|n| n.contact.id == e.contact.id))
            .copied()
            .collect();
        let room = k - new.len();
        let mut out: Vec<Entry> = Vec::with_capacity(k);
        for e in kept.drain(..) {
            if out.len() == room {
                break;
            }
            let both: Vec<Entry> = new.iter().chain(out.iter()).copied().collect();
            if fits(&both, e.contact.addr, self.per_ip_max, self.per_prefix_max) {
                out.push(e);
            }
        }
        let mut changed = out.len() != old.len();
        out.append(&mut new);
        // Least recently seen first, as every bucket keeps its contacts.
        out.sort_by_key(|e| e.last_seen);
        changed |= out
            .iter()
            .any(|e| !old.iter().any(|o| o.contact.id == e.contact.id));
        self.make_room(j, out.len());
        for (i, e) in out.iter().enumerate() {
            self.put_at(base + i, e);
        }
        self.len = self.len - len + out.len();
        self.buckets[j].len = out.len() as u32;
        if self.buckets[j]
            .replacement
            .as_ref()
            .is_some_and(|r| out.iter().any(|e| e.contact.id == r.id))
        {
            self.buckets[j].replacement = None;
        }
        if changed {
            self.generation += 1;
        }
        self.mark(bi);
    }

    /// Records that the oldest contact answered its liveness ping: it stays,
    /// and the waiting replacement is discarded.
    pub fn on_oldest_alive(&mut self, id: &Id, now: Time) {
        let Some(bi) = self.bucket_index(id) else {
            return;
        };
        let Some(i) = self.position(bi, id) else {
            return;
        };
        let (base, len) = self.span(bi);
        self.seen[i].set_last_seen(now);
        self.reach[i].set_failures(0);
        self.rotate_to_end(i, base + len);
        self.buckets[Self::slot(bi)].replacement = None;
    }

    /// Removes a contact (e.g. it left our cluster at this level).
    pub fn remove(&mut self, id: &Id) -> bool {
        let Some(bi) = self.bucket_index(id) else {
            return false;
        };
        let j = Self::slot(bi);
        let Some(bucket) = self.buckets.get_mut(j) else {
            return false;
        };
        if bucket.replacement.as_ref().is_some_and(|r| r.id == *id) {
            bucket.replacement = None;
        }
        let Some(i) = self.position(bi, id) else {
            return false;
        };
        let (base, len) = self.span(bi);
        self.remove_at(j, i, base + len);
        if let Some(r) = self.buckets[j].replacement.take() {
            self.push(j, &r.entry());
        } else {
            self.len -= 1;
            self.mark(bi);
        }
        self.generation += 1;
        true
    }

    /// The entry for `id`, if present.
    pub fn get(&self, id: &Id) -> Option<Entry> {
        let bi = self.bucket_index(id)?;
        self.position(bi, id).map(|i| self.entry_at(i))
    }

    /// Whether a contact with this id and address is present.
    pub fn contains(&self, id: &Id, addr: SocketAddr) -> bool {
        self.bucket_index(id)
            .and_then(|bi| self.position(bi, id))
            .is_some_and(|i| self.addr_at(i) == addr)
    }

    /// Up to `count` contacts closest to `target` by XOR, closest first.
    pub fn closest(&self, target: &Id, count: usize) -> Vec<Contact> {
        self.closest_matching(target, count, |_| true)
    }

    /// Like [`closest`](Self::closest), keeping only contacts whose id
    /// `keep` accepts.
    pub fn closest_matching(
        &self,
        target: &Id,
        count: usize,
        mut keep: impl FnMut(&Id) -> bool,
    ) -> Vec<Contact> {
        if count == 0 {
            return Vec::new();
        }
        // Buckets in XOR order from the target. With t the target's bucket
        // (bit length of local ⊕ target, less one), contacts in bucket t lie
        // below 2^t from the target, those in every bucket under t lie in
        // [2^t, 2^(t+1)), and those in bucket i > t at 2^i or more. So: bucket
        // t, then all buckets under t together, then t+1, t+2, ... — stopping
        // after the first group that fills the answer. Only ids are read
        // until the answer is known; `best` holds slots.
        // Distances as big-endian words (ordered as `Distance` is): the
        // comparisons below then swap no bytes (issue 27: this loop is 5 % of
        // the simulator's CPU).
        let t = words(&target.0);
        // (distance as words, slot), nearest first.
        type Best = SmallVec<[((u64, u64, u32), usize); 16]>;
        let mut best: Best = SmallVec::new();
        let mut consider = |bi: usize, best: &mut Best| {
            let (base, len) = self.span(bi);
            // The answer's addresses are read from `reach` once it is
            // known: start loading the bucket's while its ids are compared
            // (a hint; issue 27: building the answer's contacts was 6 % of
            // the simulator's join at 50,000 nodes, most of it these misses).
            if let Some(r) = self.reach.get(base..base + len) {
                crate::dsht::prefetch::prefetch(r.as_ptr().cast(), std::mem::size_of_val(r));
            }
            for (i, id) in self.ids[base..base + len].iter().enumerate() {
                let d = xor(words(&id.0), t);
                if best.len() == count && d >= best[count - 1].0 {
                    continue;
                }
                if !keep(id) {
                    continue;
                }
                let pos = best.partition_point(|(bd, _)| *bd < d);
                if best.len() == count {
                    best.pop();
                }
                best.insert(pos, (d, base + i));
            }
        };
        let bits = self.local.distance(target).bit_len() as usize;
        let groups_start = if bits == 0 {
            0
        } else {
            let t = bits - 1;
            consider(t, &mut best);
            if best.len() < count {
                for b in self.occupied_in(0, t) {
                    consider(b, &mut best);
                }
            }
            t + 1
        };
        for b in self.occupied_in(groups_start, ID_BITS as usize) {
            if best.len() == count {
                break;
            }
            consider(b, &mut best);
        }
        let mut out = Vec::with_capacity(best.len());
        for &(_, i) in &best {
            out.push(self.contact_at(i));
        }
        out
    }

    /// Every entry, in bucket order.
    pub fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        (0..self.buckets.len()).rev().flat_map(move |j| {
            let base = usize::from(self.buckets[j].base);
            (base..base + self.buckets[j].len as usize).map(move |i| self.entry_at(i))
        })
    }

    /// Contacts running every service in `services`.
    pub fn with_services(&self, services: Services) -> impl Iterator<Item = Entry> + '_ {
        self.entries()
            .filter(move |e| e.contact.services.contains(services))
    }

    /// An estimate of the number of nodes in this level's cluster (including
    /// the local node), from the distances of the closest contacts: the j-th
    /// closest of n uniformly spread ids lies at about j·2^160/n. It depends
    /// only on which contacts the table holds ([`RoutingTable::generation`]).
    pub fn size_estimate(&self) -> u32 {
        // The closest contacts to the local id sit in the lowest buckets.
        let mut dists: SmallVec<[f64; 64]> = SmallVec::new();
        for b in self.occupied_in(0, ID_BITS as usize) {
            let (base, len) = self.span(b);
            for id in &self.ids[base..base + len] {
                dists.push(self.local.distance(id).log2());
            }
            if dists.len() >= self.bucket_size {
                break;
            }
        }
        if dists.is_empty() {
            return 1;
        }
        dists.sort_by(|a, b| a.partial_cmp(b).unwrap_or(core::cmp::Ordering::Equal));
        let use_n = dists.len().min(self.bucket_size);
        let mut sum_log = 0.0;
        for (j, d) in dists.iter().take(use_n).enumerate() {
            sum_log += ((j + 1) as f64).log2() + f64::from(ID_BITS) - d;
        }
        let log_n = sum_log / use_n as f64;
        // Never less than what we can see.
        let est = 2f64.powf(log_n).max((self.len + 1) as f64);
        est.min(f64::from(u32::MAX)) as u32
    }

    /// Indices of buckets that hold contacts and whose contacts have all been
    /// quiet since `since` (candidates for a refresh lookup).
    pub fn stale_buckets(&self, since: Time) -> Vec<usize> {
        self.occupied_in(0, ID_BITS as usize)
            .filter(|&b| {
                // The most recently seen are at the end (all but a promoted
                // replacement): look there first.
                let (base, len) = self.span(b);
                !self.seen[base..base + len]
                    .iter()
                    .rev()
                    .any(|s| s.last_seen() >= since)
            })
            .collect()
    }
}

fn min_rtt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn contact(id: Id, port: u16) -> Contact {
        Contact {
            id,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            services: Services::NONE,
        }
    }

    /// BEP 42 / libtorrent: one contact per IP and two per /24 in a bucket.
    #[test]
    fn a_bucket_holds_one_contact_per_ip_and_two_per_24() {
        let mut t = RoutingTable::new(Id::ZERO, 8);
        t.set_address_limits(1, 2);
        let at = |id: Id, ip: [u8; 4]| Contact {
            id,
            addr: SocketAddr::from((ip, 7000)),
            services: Services::NONE,
        };
        let now = Time::ZERO;
        // All in bucket 159 (the top bit set).
        assert_eq!(
            t.insert(at(id_with_prefix(0x80, 1), [192, 0, 2, 1]), now, None),
            Insert::Added
        );
        assert_eq!(
            t.insert(at(id_with_prefix(0x80, 2), [192, 0, 2, 1]), now, None),
            Insert::Refused
        );
        assert_eq!(
            t.insert(at(id_with_prefix(0x80, 3), [192, 0, 2, 2]), now, None),
            Insert::Added
        );
        assert_eq!(
            t.insert(at(id_with_prefix(0x80, 4), [192, 0, 2, 3]), now, None),
            Insert::Refused
        );
        assert_eq!(
            t.insert(at(id_with_prefix(0x80, 5), [198, 51, 100, 1]), now, None),
            Insert::Added
        );
        // Another bucket has its own share.
        assert_eq!(
            t.insert(at(id_with_prefix(0x40, 6), [192, 0, 2, 3]), now, None),
            Insert::Added
        );
        assert_eq!(t.len(), 4);
    }

    fn id_with_prefix(first: u8, n: u8) -> Id {
        let mut id = Id::ZERO;
        id.0[0] = first;
        id.0[19] = n;
        id
    }

    /// A joining node's refresh result takes the bucket (issue 27): the
    /// given contacts first, up to k, each keeping its record if present,
    /// the bucket's old contacts only while room is left; contacts outside
    /// the bucket and over the address limits are left out; other buckets
    /// are untouched.
    #[test]
    fn adopt_makes_the_bucket_the_refresh_result() {
        let mut t = RoutingTable::new(Id::ZERO, 3);
        let s = |secs: u64| Time(secs * 1_000_000);
        let old: Vec<Contact> = (1..=3)
            .map(|n| contact(id_with_prefix(0x80, n), u16::from(n)))
            .collect();
        for (i, c) in old.iter().enumerate() {
            t.insert(*c, s(i as u64), Some(Duration::from_millis(10)));
        }
        let near = contact(id_with_prefix(0x40, 9), 9);
        t.insert(near, s(4), None);
        let fresh: Vec<Contact> = (10..=11)
            .map(|n| contact(id_with_prefix(0x81, n), u16::from(n)))
            .collect();
        // Closest first: a new one, old[2] (present), a contact of another
        // bucket, then one more new one than there is room for.
        let given = [fresh[0], old[2], near, fresh[1]];
        t.adopt(&id_with_prefix(0x90, 0), &given, s(10));
        let ids: Vec<Id> = t.entries().map(|e| e.contact.id).collect();
        // The nearer bucket comes first; each least recently seen first.
        assert_eq!(ids, vec![near.id, old[2].id, fresh[0].id, fresh[1].id]);
        assert_eq!(t.len(), 4);
        let kept = t.get(&old[2].id).unwrap();
        assert_eq!(kept.last_seen, s(2));
        assert_eq!(kept.rtt_min, Some(Duration::from_millis(10)));
        let new = t.get(&fresh[0].id).unwrap();
        assert_eq!((new.last_seen, new.rtt_min), (s(10), None));
        assert!(t.get(&old[0].id).is_none() && t.get(&old[1].id).is_none());
        // Fewer given than k: the oldest old contacts fill the room.
        let mut u = RoutingTable::new(Id::ZERO, 3);
        for (i, c) in old.iter().enumerate() {
            u.insert(*c, s(i as u64), None);
        }
        u.adopt(&id_with_prefix(0x90, 0), &fresh[..1], s(10));
        let ids: Vec<Id> = u.entries().map(|e| e.contact.id).collect();
        assert_eq!(ids, vec![old[0].id, old[1].id, fresh[0].id]);
        // The address limits hold: one contact per IP (all of these share
        // 127.0.0.1).
        let mut v = RoutingTable::new(Id::ZERO, 3);
        v.set_address_limits(1, 2);
        v.adopt(&id_with_prefix(0x90, 0), &fresh, s(10));
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn full_bucket_pings_oldest_before_replacing() {
        let mut t = RoutingTable::new(Id::ZERO, 2);
        let s = |secs: u64| Time(secs * 1_000_000);
        // All in bucket 159 (top bit set).
        let a = contact(id_with_prefix(0x80, 1), 1);
        let b = contact(id_with_prefix(0x80, 2), 2);
        let c = contact(id_with_prefix(0x80, 3), 3);
        assert_eq!(t.insert(a, s(1), None), Insert::Added);
        assert_eq!(t.insert(b, s(2), None), Insert::Added);
        // The oldest answered a moment ago: alive enough, no ping; c waits.
        assert_eq!(t.insert(c, s(3), None), Insert::Waiting);
        // Quiet for longer than OLDEST_FRESH: ping it.
        let later = s(1) + OLDEST_FRESH;
        assert_eq!(t.insert(c, later, None), Insert::Waiting, "c already waits");
        t.on_oldest_alive(&a.id, later);
        assert_eq!(
            t.insert(c, later + OLDEST_FRESH, None),
            Insert::PingOldest(b)
        );
        assert_eq!(t.len(), 2);
        // b fails: c takes its place.
        assert!(t.on_failure(&b.id));
        assert!(t.get(&c.id).is_some());
        assert!(t.get(&b.id).is_none());
        assert_eq!(t.len(), 2);
        // The oldest (a) answered at `later`: c would have been discarded had it answered.
        assert!(t.get(&a.id).is_some());
    }

    #[test]
    fn contact_without_replacement_is_dropped_after_failures() {
        let mut t = RoutingTable::new(Id::ZERO, 2);
        let a = contact(id_with_prefix(0x80, 1), 1);
        let b = contact(id_with_prefix(0x40, 2), 2);
        t.insert(a, Time(1), None);
        t.insert(b, Time(1), None);
        for _ in 1..CONTACT_FAILURES_MAX {
            assert!(!t.on_failure(&a.id));
        }
        assert!(t.on_failure(&a.id));
        assert!(t.get(&a.id).is_none());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_last_contact_stays_flagged_until_it_answers_or_another_arrives() {
        // A table that does not keep it drops it.
        let mut t = RoutingTable::new(Id::ZERO, 2);
        let a = contact(id_with_prefix(0x80, 1), 1);
        t.insert(a, Time(1), None);
        for _ in 1..CONTACT_FAILURES_MAX {
            assert!(!t.on_failure(&a.id));
        }
        assert!(t.on_failure(&a.id));
        assert!(t.is_empty());
        let mut t = RoutingTable::new(Id::ZERO, 2);
        t.keep_last_contact();
        t.insert(a, Time(1), None);
        assert!(t.is_stranded().is_none(), "a contact that never failed");
        for _ in 0..2 * CONTACT_FAILURES_MAX {
            assert!(!t.on_failure(&a.id));
        }
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.get(&a.id).map(|e| e.failures),
            Some(2 * CONTACT_FAILURES_MAX)
        );
        assert_eq!(t.is_stranded(), Some(a.addr));
        // It answers: its failures are forgotten.
        t.insert(a, Time(2), None);
        assert_eq!(t.get(&a.id).map(|e| e.failures), Some(0));
        assert!(t.is_stranded().is_none());
        // Failing again with another contact in the table, it goes.
        for _ in 1..CONTACT_FAILURES_MAX {
            assert!(!t.on_failure(&a.id));
        }
        let b = contact(id_with_prefix(0x40, 2), 2);
        t.insert(b, Time(3), None);
        assert!(t.on_failure(&a.id));
        assert_eq!(t.len(), 1);
        assert!(t.get(&b.id).is_some());
    }

    #[test]
    fn generation_follows_the_set_of_contacts() {
        let mut t = RoutingTable::new(Id::ZERO, 2);
        let a = contact(id_with_prefix(0x80, 1), 1);
        let b = contact(id_with_prefix(0x80, 2), 2);
        let g0 = t.generation();
        t.insert(a, Time(1), None);
        let g1 = t.generation();
        assert_ne!(g1, g0);
        // A refresh or a failure that keeps the contact changes nothing.
        t.insert(a, Time(2), Some(Duration::from_millis(5)));
        assert!(!t.on_failure(&a.id));
        assert_eq!(t.generation(), g1);
        t.insert(b, Time(3), None);
        let g2 = t.generation();
        assert_ne!(g2, g1);
        let est = t.size_estimate();
        assert!(t.remove(&b.id));
        assert_ne!(t.generation(), g2);
        t.insert(b, Time(4), None);
        assert_eq!(t.size_estimate(), est, "same contacts, same estimate");
    }

    #[test]
    fn local_id_is_never_inserted() {
        let mut t = RoutingTable::new(Id([7; 20]), 8);
        assert_eq!(
            t.insert(contact(Id([7; 20]), 1), Time(0), None),
            Insert::IsSelf
        );
        assert!(t.is_empty());
    }

    #[test]
    fn size_estimate_tracks_population() {
        // 1000 random ids; a table of bucket size 8 sees the closest ones.
        let mut rng = crate::rng::Rng::new(3);
        let mut local = Id::ZERO;
        rng.fill(&mut local.0);
        let mut t = RoutingTable::new(local, 8);
        for i in 0..1000u16 {
            let mut id = Id::ZERO;
            rng.fill(&mut id.0);
            t.insert(contact(id, i), Time(0), None);
        }
        let est = t.size_estimate();
        assert!((250..4000).contains(&est), "estimate {est} for 1001 nodes");
    }

    proptest! {
        #[test]
        fn buckets_stay_bounded_and_closest_is_sorted(
            ids in proptest::collection::vec(proptest::array::uniform20(any::<u8>()), 1..300),
            k in 1usize..10,
            target in proptest::array::uniform20(any::<u8>()),
        ) {
            let mut t = RoutingTable::new(Id::ZERO, k);
            for (i, id) in ids.iter().enumerate() {
                t.insert(contact(Id(*id), i as u16), Time(i as u64), None);
            }
            // Some leave, some fail until dropped: buckets empty again.
            for (i, id) in ids.iter().enumerate() {
                match i % 5 {
                    1 => {
                        t.remove(&Id(*id));
                    }
                    2 => {
                        for _ in 0..CONTACT_FAILURES_MAX {
                            t.on_failure(&Id(*id));
                        }
                    }
                    _ => {}
                }
            }
            for bi in 0..ID_BITS as usize {
                let empty = t.span(bi).1 == 0;
                prop_assert_eq!(t.occupied_in(bi, bi + 1).count() == 1, !empty);
            }
            prop_assert!(t.buckets.iter().all(|b| b.len as usize <= k));
            prop_assert_eq!(t.entries().count(), t.len());
            // The slots: each bucket's follow the one before's, no bucket
            // has more than k, and every contact kept has its own address.
            let mut next = 0;
            for b in &t.buckets {
                prop_assert_eq!(usize::from(b.base), next);
                prop_assert!(b.len as usize <= usize::from(b.slots) && usize::from(b.slots) <= k);
                next += usize::from(b.slots);
            }
            prop_assert_eq!(t.ids.len(), next);
            prop_assert_eq!(t.seen.len(), next);
            for (i, id) in ids.iter().enumerate() {
                if let Some(e) = t.get(&Id(*id)) {
                    prop_assert_eq!(e.contact.addr.port(), i as u16);
                }
            }
            let target = Id(target);
            let got = t.closest(&target, 5);
            prop_assert!(got.len() <= 5);
            prop_assert!(got.windows(2).all(|w| w[0].id.distance(&target) <= w[1].id.distance(&target)));
            // Nothing left out is closer than the farthest returned.
            if let Some(last) = got.last() {
                let far = last.id.distance(&target);
                let closer = t.entries().filter(|e| e.contact.id.distance(&target) < far).count();
                prop_assert!(closer < got.len());
            }
        }
    }

    #[test]
    fn a_replacement_takes_its_place_with_its_address_and_rtt() {
        // k = 2: the bucket of ids 0x80.. is full, an IPv6 contact waits,
        // the oldest fails: the waiting one enters as it was recorded.
        let mut t = RoutingTable::new(Id([0; 20]), 2);
        let now = Time::ZERO + Duration::from_secs(5);
        for i in 0..2u8 {
            let mut id = [0u8; 20];
            id[0] = 0x80 | i;
            t.insert(contact(Id(id), u16::from(i)), now, None);
        }
        let mut id = [0u8; 20];
        id[0] = 0x90;
        let waiting = Contact {
            id: Id(id),
            addr: "[2001:db8::9]:4009".parse().unwrap(),
            services: Services(1),
        };
        let rtt = Some(Duration::from_micros(4321));
        assert!(matches!(
            t.insert(waiting, now, rtt),
            Insert::PingOldest(_) | Insert::Waiting
        ));
        assert!(t.get(&waiting.id).is_none());
        let mut oldest = [0u8; 20];
        oldest[0] = 0x80;
        assert!(t.on_failure(&Id(oldest)));
        let e = t.get(&waiting.id).expect("the replacement entered");
        assert_eq!(
            (e.contact, e.rtt_min, e.last_seen, e.failures),
            (waiting, rtt, now, 0)
        );
    }

    #[test]
    fn a_bucket_gets_slots_as_it_fills() {
        // Buckets near the local id hold a contact or two: they get two
        // slots, not k, and a far bucket that fills later moves the deeper
        // buckets' contacts up without losing them.
        let mut t = RoutingTable::new(Id([0; 20]), 8);
        let now = Time::ZERO + Duration::from_secs(5);
        let deep = |d: usize| {
            let mut id = [0u8; 20];
            id[d / 8] = 0x80 >> (d % 8);
            contact(Id(id), d as u16)
        };
        for d in 10..14 {
            assert_eq!(t.insert(deep(d), now, None), Insert::Added);
        }
        assert_eq!(
            t.ids.len(),
            4 * 2,
            "four buckets of one contact: two slots each"
        );
        for i in 0..8u8 {
            let mut id = [0u8; 20];
            id[0] = 0x80 | i;
            assert_eq!(
                t.insert(contact(Id(id), 100 + u16::from(i)), now, None),
                Insert::Added
            );
        }
        assert_eq!(t.ids.len(), 8 + 4 * 2);
        for d in 10..14 {
            let c = deep(d);
            assert_eq!(t.get(&c.id).map(|e| e.contact), Some(c));
        }
        assert_eq!(t.len(), 12);
    }

    #[test]
    fn ipv6_addresses_follow_their_slots_through_refreshes_and_growth() {
        // IPv4 and IPv6 contacts mixed in one bucket, moved by refreshes,
        // then the table grows deeper after it holds IPv6: each contact
        // keeps its own address.
        let mut t = RoutingTable::new(Id([0; 20]), 8);
        let now = Time::ZERO + Duration::from_secs(5);
        let contact = |i: u8| {
            let mut id = [0u8; 20];
            id[0] = 0x80 | i;
            let addr: SocketAddr = if i % 2 == 0 {
                SocketAddr::from(([192, 0, 2, i], 4000 + u16::from(i)))
            } else {
                SocketAddr::new(
                    IpAddr::from([0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i]),
                    5000 + u16::from(i),
                )
            };
            Contact {
                id: Id(id),
                addr,
                services: Services::NONE,
            }
        };
        let all: Vec<Contact> = (0..6).map(contact).collect();
        for c in &all {
            t.insert(*c, now, None);
        }
        for c in all.iter().rev() {
            assert_eq!(t.insert(*c, now, None), Insert::Refreshed);
        }
        // Deeper buckets, added after the IPv6 slots exist.
        for d in 1..6u8 {
            let mut id = [0u8; 20];
            id[usize::from(d)] = 1;
            let c = Contact {
                id: Id(id),
                addr: SocketAddr::from(([198, 51, 100, d], 7000)),
                services: Services::NONE,
            };
            t.insert(c, now, None);
            assert!(t.contains(&c.id, c.addr));
        }
        for c in &all {
            assert_eq!(t.get(&c.id).map(|e| e.contact.addr), Some(c.addr));
            assert!(t.contains(&c.id, c.addr));
        }
    }

    #[test]
    fn a_slot_keeps_what_the_wire_carries_in_24_bytes() {
        assert_eq!(std::mem::size_of::<Reach>(), 8);
        assert_eq!(std::mem::size_of::<Waiting>(), 56);
        assert_eq!(std::mem::size_of::<Seen>(), 12);
        let mut t = RoutingTable::new(Id([0; 20]), 8);
        let now = Time::ZERO + Duration::from_secs(5);
        let v4: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::7]:4001".parse().unwrap();
        let (a, b) = (Id([0x80; 20]), Id([0x40; 20]));
        for (id, addr, rtt) in [(a, v4, Some(Duration::from_micros(1234))), (b, v6, None)] {
            let c = Contact {
                id,
                addr,
                services: Services(1),
            };
            t.insert(c, now, rtt);
            let e = t.get(&id).expect("inserted");
            assert_eq!(e.contact, c);
            assert_eq!(e.rtt_min, rtt);
            assert!(t.contains(&id, addr));
        }
        // An RTT beyond what 32 bits of microseconds hold is kept as the longest.
        let far = Contact {
            id: Id([0x20; 20]),
            addr: v4,
            services: Services::NONE,
        };
        t.insert(far, now, Some(Duration::from_secs(10_000)));
        assert_eq!(
            t.get(&far.id).and_then(|e| e.rtt_min),
            Some(Duration::from_micros(u64::from(u32::MAX - 1)))
        );
    }
}
