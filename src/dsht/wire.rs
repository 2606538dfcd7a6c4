//! The DSHT's RPC wire format, version 1.
//!
//! Every datagram is one [`Message`]: a fixed header, the sender's cluster
//! header (one entry per non-global level, §4.3), and a body. All integers
//! are big-endian. Parsing is checked: no input makes it panic, every error
//! is a [`WireError`], and trailing bytes are an error.
//!
//! ```text
//! offset  size  field
//! 0       1     version (1)
//! 1       1     kind (request kinds < 0x80, replies = request | 0x80, 0xff error)
//! 2       2     route: the steering value. Requests for a key carry the key's
//!               first two bytes; other requests carry a value that maps to
//!               the sender's core. A reply echoes its request's route, so a
//!               reuseport program can deliver both to the owning core.
//! 4       4     txid: chosen by the requester, echoed by the reply
//! 8       20    sender node id
//! 28      1     sender's services (bit 0 http proxy, 1 dns, 2 non-recursive)
//! 29      1     n = number of non-global cluster entries (≤ 3)
//! 30      28·n  per level 1..=n: cluster id (20), age in seconds (4), size estimate (4)
//! ..            body, by kind (see `Body`)
//! ```
//!
//! Contacts are encoded as id (20), family (1: 4 or 6), address (4 or 16),
//! port (2), services (1). Values as length (1) and bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use smallvec::SmallVec;

use crate::config::LEVELS_MAX;
use crate::dsht::id::{Id, ID_BYTES};

/// The wire format's version.
pub const VERSION: u8 = 1;
/// Bytes in the fixed part of the header (up to the cluster entries).
pub const HEADER_FIXED_BYTES: usize = 30;
/// Bytes per cluster header entry.
pub const CLUSTER_ENTRY_BYTES: usize = 28;
/// Offset of the route field (used by the runtime's reuseport steering).
pub const ROUTE_OFFSET: usize = 2;
/// Most contacts one message may carry.
pub const CONTACTS_MAX: usize = 32;
/// Most values one message may carry.
pub const VALUES_MAX: usize = 32;
/// Largest value in bytes.
pub const VALUE_BYTES_MAX: usize = 255;
/// Bytes in a write token.
pub const TOKEN_BYTES: usize = 8;
/// Largest datagram coral accepts: the largest UDP payload.
pub const DATAGRAM_BYTES_MAX: usize = 65_507;
/// Bytes of a contact with an IPv6 address, the longer family: id (20),
/// family (1), address (16), port (2), services (1).
const CONTACT_BYTES_MAX: usize = ID_BYTES + 1 + 16 + 2 + 1;
/// An IPv4 contact's size on the wire.
const CONTACT_BYTES_V4: usize = ID_BYTES + 1 + 4 + 2 + 1;
/// The longest message that decodes: a full cluster header and a get reply
/// with [`VALUES_MAX`] values of [`VALUE_BYTES_MAX`] bytes and
/// [`CONTACTS_MAX`] IPv6 contacts (no other body is longer). A datagram
/// longer than this is malformed whatever it holds, so a receiver may read
/// datagrams into buffers of `MESSAGE_BYTES_MAX + 1` bytes and lose nothing
/// that [`Message::decode`] would accept (9,589 bytes).
pub const MESSAGE_BYTES_MAX: usize = HEADER_FIXED_BYTES
    + CLUSTER_ENTRY_BYTES * (LEVELS_MAX - 1)
    + 1
    + 1
    + VALUES_MAX * (1 + VALUE_BYTES_MAX)
    + 1
    + CONTACTS_MAX * CONTACT_BYTES_MAX;

/// Services a node runs, as advertised in every header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Services(pub u8);

impl Services {
    /// No services beyond the DSHT.
    pub const NONE: Services = Services(0);
    /// Runs the HTTP proxy (CoralProxy).
    pub const HTTP: Services = Services(1);
    /// Runs the DNS server (dnssrv).
    pub const DNS: Services = Services(2);
    /// The proxy is "non-recursive": dnssrv returns it only to local clients (§3.1).
    pub const NON_RECURSIVE: Services = Services(4);
    const KNOWN: u8 = 7;

    /// Whether every service in `other` is in `self`.
    pub fn contains(self, other: Services) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two sets of services.
    pub fn with(self, other: Services) -> Services {
        Services(self.0 | other.0)
    }
}

/// One entry of the cluster header: the sender's cluster at one non-global level.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ClusterInfo {
    /// The cluster id (random 160 bits, §4.3).
    pub id: Id,
    /// Seconds since the cluster was created.
    pub age_secs: u32,
    /// The sender's estimate of the cluster's size in nodes.
    pub size: u32,
}

/// A node as named in a reply: id, address and services.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Contact {
    /// The node's id.
    pub id: Id,
    /// Its DSHT RPC address.
    pub addr: SocketAddr,
    /// The services it advertised.
    pub services: Services,
}

/// A value stored in the DSHT: up to [`VALUE_BYTES_MAX`] opaque bytes.
#[derive(PartialEq, Eq, Hash, Debug, Default)]
pub struct Value(pub SmallVec<[u8; 24]>);

/// A copy of the bytes at once (`SmallVec`'s own `clone` pushes them one
/// by one: about 150 instructions for a 7-byte pointer, once per value in
/// every get reply, issue 27).
impl Clone for Value {
    fn clone(&self) -> Value {
        Value(SmallVec::from_slice(&self.0))
    }
}

impl Value {
    /// A value from bytes, or `None` if it is longer than [`VALUE_BYTES_MAX`].
    pub fn new(bytes: &[u8]) -> Option<Value> {
        (bytes.len() <= VALUE_BYTES_MAX).then(|| Value(SmallVec::from_slice(bytes)))
    }

    /// The conventional value for "the node at `addr`" (a proxy pointer or a
    /// clustering hint): family (1), address (4 or 16), port (2).
    pub fn from_addr(addr: SocketAddr) -> Value {
        let mut v = SmallVec::new();
        put_addr(&mut v, addr);
        Value(v)
    }

    /// Reads a value written by [`Value::from_addr`].
    pub fn to_addr(&self) -> Option<SocketAddr> {
        let mut r = Reader {
            buf: &self.0,
            pos: 0,
        };
        let addr = r.addr().ok()?;
        r.finish().ok()?;
        Some(addr)
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A write token: proof that the storer recently heard from us at its address
/// (as BitTorrent's BEP 5 requires before a store).
pub type Token = [u8; TOKEN_BYTES];

/// Contacts in a reply.
pub type Contacts = SmallVec<[Contact; 0]>;
/// Values in a reply.
pub type Values = SmallVec<[Value; 4]>;

/// Why a request was refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ErrorCode {
    /// The request named a level on which the receiver does not share a
    /// cluster with the sender; the reply's header carries the receiver's
    /// clusters, which is how old neighbours learn of a node's new cluster.
    WrongCluster,
    /// A store's token was missing, stale or for another address.
    BadToken,
    /// The receiver is over one of its limits.
    Overloaded,
    /// The request named a level the receiver does not have.
    NoSuchLevel,
}

impl ErrorCode {
    fn to_u8(self) -> u8 {
        match self {
            ErrorCode::WrongCluster => 1,
            ErrorCode::BadToken => 2,
            ErrorCode::Overloaded => 3,
            ErrorCode::NoSuchLevel => 4,
        }
    }

    fn from_u8(b: u8) -> Result<ErrorCode, WireError> {
        Ok(match b {
            1 => ErrorCode::WrongCluster,
            2 => ErrorCode::BadToken,
            3 => ErrorCode::Overloaded,
            4 => ErrorCode::NoSuchLevel,
            _ => return Err(WireError::BadField("error code")),
        })
    }
}

/// The body of a message.
#[allow(missing_docs)] // fields named by the enclosing docs
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Body {
    /// Liveness check (kind 0x01).
    Ping,
    /// Reply to a ping (0x81).
    Pong,
    /// find-closer-nodes: contacts near `target` at `level` (0x02).
    FindNode { level: u8, target: Id },
    /// Reply to FindNode (0x82).
    Nodes { level: u8, contacts: Contacts },
    /// Members of the receiver's cluster at `level` near `target`, served
    /// whatever the sender's cluster (0x06): how a node validates a candidate
    /// cluster it is not in by routing to selected keys (§4.4).
    Members { level: u8, target: Id },
    /// Reply to Members (0x86): contacts from the receiver's table at `level`.
    MembersReply { level: u8, contacts: Contacts },
    /// get: values for `key` at `level`, else contacts near `target` (0x03).
    Get { level: u8, key: Id, target: Id },
    /// Reply to Get (0x83): a random subset of stored values, or contacts.
    GetReply {
        level: u8,
        values: Values,
        contacts: Contacts,
    },
    /// Forward phase of a put (§4.2): storage state for `key`, and contacts
    /// near `target` (0x04). Counts as a request for the key.
    PutProbe { level: u8, key: Id, target: Id },
    /// Reply to PutProbe (0x84): loaded?, the stay asked of a sender that
    /// finds the node loaded (minutes, see `Store::set_probes_per_min_target`),
    /// value count, minimum remaining TTL of the stored values, a write
    /// token, and contacts.
    PutProbeReply {
        level: u8,
        loaded: bool,
        stay_mins: u8,
        value_count: u16,
        min_ttl_secs: u32,
        token: Token,
        contacts: Contacts,
    },
    /// Reverse phase of a put: store `value` under `key` for `ttl_secs` (0x05).
    /// With `if_absent` (flags bit 0) it is a test-and-set: store only if no
    /// live value is stored under the key, else return those values (the
    /// extension NSDI 2004 §8 proposes against redundant origin fetches).
    Store {
        level: u8,
        key: Id,
        ttl_secs: u32,
        if_absent: bool,
        token: Token,
        value: Value,
    },
    /// Reply to Store (0x85): whether the value is now stored, and, for a
    /// refused test-and-set, the values already there.
    StoreReply {
        level: u8,
        stored: bool,
        values: Values,
    },
    /// A refused request (0xff).
    Error { code: ErrorCode },
    /// A ping carrying the sender's identity (0x07): its key, certificate
    /// and signature binding them to its address and id
    /// ([`IDENTITY_BYTES`] bytes). What an admitting node
    /// sends instead of a ping, so that each peer verifies it once.
    Hello { identity: Box<Identity> },
    /// Reply to Hello (0x87): the receiver's identity.
    HelloReply { identity: Box<Identity> },
}

/// Bytes of a node's identity as Hello carries it: version (1), public key
/// (32), certificate (64), signature (64) (`coral::identity` makes and
/// checks it; the wire only carries it).
pub const IDENTITY_BYTES: usize = 161;

/// A node's identity as Hello carries it.
pub type Identity = [u8; IDENTITY_BYTES];

/// Kind bytes.
#[allow(missing_docs)] // the names are the kinds
pub mod kind {
    pub const PING: u8 = 0x01;
    pub const FIND_NODE: u8 = 0x02;
    pub const GET: u8 = 0x03;
    pub const PUT_PROBE: u8 = 0x04;
    pub const STORE: u8 = 0x05;
    pub const MEMBERS: u8 = 0x06;
    pub const HELLO: u8 = 0x07;
    pub const REPLY: u8 = 0x80;
    pub const ERROR: u8 = 0xff;
}

impl Body {
    /// The kind byte of this body.
    pub fn kind(&self) -> u8 {
        match self {
            Body::Ping => kind::PING,
            Body::Pong => kind::PING | kind::REPLY,
            Body::FindNode { .. } => kind::FIND_NODE,
            Body::Nodes { .. } => kind::FIND_NODE | kind::REPLY,
            Body::Members { .. } => kind::MEMBERS,
            Body::MembersReply { .. } => kind::MEMBERS | kind::REPLY,
            Body::Get { .. } => kind::GET,
            Body::GetReply { .. } => kind::GET | kind::REPLY,
            Body::PutProbe { .. } => kind::PUT_PROBE,
            Body::PutProbeReply { .. } => kind::PUT_PROBE | kind::REPLY,
            Body::Store { .. } => kind::STORE,
            Body::StoreReply { .. } => kind::STORE | kind::REPLY,
            Body::Error { .. } => kind::ERROR,
            Body::Hello { .. } => kind::HELLO,
            Body::HelloReply { .. } => kind::HELLO | kind::REPLY,
        }
    }

    /// Whether this is a request (as opposed to a reply or an error).
    pub fn is_request(&self) -> bool {
        self.kind() & kind::REPLY == 0
    }

    /// Whether the body holds nothing on the heap (its drop frees nothing):
    /// a ping, a pong, a find, a members request, a get, a put probe, an
    /// error. A message with such a body (and its cluster entries inline)
    /// may be forgotten instead of dropped: its drop glue cost ~23
    /// user-space instructions a request (issue 27).
    pub fn holds_no_heap(&self) -> bool {
        matches!(
            self,
            Body::Ping
                | Body::Pong
                | Body::FindNode { .. }
                | Body::Members { .. }
                | Body::Get { .. }
                | Body::PutProbe { .. }
                | Body::Error { .. }
        )
    }
}

/// The header every message carries.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Header {
    /// Steering value (see the module docs).
    pub route: u16,
    /// Transaction id, echoed in the reply.
    pub txid: u32,
    /// The sender's node id.
    pub sender: Id,
    /// The sender's services.
    pub services: Services,
    /// The sender's cluster at each non-global level (index 0 = level 1).
    pub clusters: SmallVec<[ClusterInfo; 3]>,
}

/// One datagram.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Message {
    /// The header.
    pub header: Header,
    /// The body.
    pub body: Body,
}

/// Why a datagram could not be parsed. The fault is always the sender's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WireError {
    /// The datagram ended inside a field.
    Truncated,
    /// A version this node does not speak.
    BadVersion(u8),
    /// An unknown kind byte.
    UnknownKind(u8),
    /// A count above its limit (contacts, values, cluster entries).
    TooMany(&'static str),
    /// A field with an impossible value.
    BadField(&'static str),
    /// Bytes after the end of the message.
    TrailingBytes,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WireError::Truncated => write!(f, "datagram truncated"),
            WireError::BadVersion(v) => write!(f, "unsupported wire version {v}"),
            WireError::UnknownKind(k) => write!(f, "unknown message kind {k:#04x}"),
            WireError::TooMany(what) => write!(f, "too many {what}"),
            WireError::BadField(what) => write!(f, "invalid {what}"),
            WireError::TrailingBytes => write!(f, "trailing bytes after message"),
        }
    }
}

impl std::error::Error for WireError {}

impl Message {
    /// Appends the encoded message to `buf`.
    ///
    /// Panics (a programmer error, never input) if a count exceeds its wire
    /// limit; the node never builds such a message.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let h = &self.header;
        put_header(
            buf,
            self.body.kind(),
            h.route,
            h.txid,
            &h.sender,
            h.services,
            h.clusters.iter().copied(),
        );
        self.body.encode(buf);
    }

    /// The encoded message as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(128);
        self.encode(&mut buf);
        buf
    }

    /// Parses one datagram.
    pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
        let mut m = Message::empty();
        Message::decode_into(bytes, &mut m)?;
        Ok(m)
    }

    /// A ping with an empty header: a place to decode into
    /// ([`Message::decode_into`]).
    pub fn empty() -> Message {
        Message {
            header: Header {
                route: 0,
                txid: 0,
                sender: Id::ZERO,
                services: Services::NONE,
                clusters: SmallVec::new(),
            },
            body: Body::Ping,
        }
    }

    /// Parses one datagram into `out` (what [`Message::decode`] returns,
    /// written where the caller keeps it: returned, the ~300-byte message
    /// was copied twice, ~80 user-space instructions a datagram, issue 27).
    /// On an error `out` holds no message: read it only after `Ok`.
    pub fn decode_into(bytes: &[u8], out: &mut Message) -> Result<(), WireError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::BadVersion(version));
        }
        // Kind, route, txid and sender under one bounds check (issue 27):
        // truncated exactly where field-by-field reads would be.
        let fixed: &[u8; 27] = r.array()?;
        let kind_byte = fixed[0];
        out.header.route = u16::from_be_bytes([fixed[1], fixed[2]]);
        out.header.txid = u32::from_be_bytes([fixed[3], fixed[4], fixed[5], fixed[6]]);
        out.header.sender.0.copy_from_slice(&fixed[7..]);
        let services = r.u8()?;
        if services & !Services::KNOWN != 0 {
            return Err(WireError::BadField("services"));
        }
        out.header.services = Services(services);
        let n = r.u8()? as usize;
        if n >= LEVELS_MAX {
            return Err(WireError::TooMany("cluster entries"));
        }
        out.header.clusters.clear();
        for _ in 0..n {
            let e: &[u8; CLUSTER_ENTRY_BYTES] = r.array()?;
            let mut id = Id::ZERO;
            id.0.copy_from_slice(&e[..20]);
            out.header.clusters.push(ClusterInfo {
                id,
                age_secs: u32::from_be_bytes([e[20], e[21], e[22], e[23]]),
                size: u32::from_be_bytes([e[24], e[25], e[26], e[27]]),
            });
        }
        match kind_byte {
            kind::PING => out.body = Body::Ping,
            k if k == kind::PING | kind::REPLY => out.body = Body::Pong,
            kind::HELLO => {
                out.body = Body::Hello {
                    identity: r.identity()?,
                };
            }
            k if k == kind::HELLO | kind::REPLY => {
                out.body = Body::HelloReply {
                    identity: r.identity()?,
                };
            }
            kind::FIND_NODE => {
                out.body = Body::FindNode {
                    level: r.level()?,
                    target: r.id()?,
                };
            }
            k if k == kind::FIND_NODE | kind::REPLY => {
                out.body = Body::Nodes {
                    level: r.level()?,
                    contacts: r.contacts()?,
                };
            }
            kind::MEMBERS => {
                out.body = Body::Members {
                    level: r.level()?,
                    target: r.id()?,
                };
            }
            k if k == kind::MEMBERS | kind::REPLY => {
                out.body = Body::MembersReply {
                    level: r.level()?,
                    contacts: r.contacts()?,
                };
            }
            kind::GET => {
                let level = r.level()?;
                let (key, target) = r.id_pair()?;
                out.body = Body::Get { level, key, target };
            }
            k if k == kind::GET | kind::REPLY => {
                out.body = Body::GetReply {
                    level: r.level()?,
                    values: r.values()?,
                    contacts: r.contacts()?,
                };
            }
            kind::PUT_PROBE => {
                let level = r.level()?;
                let (key, target) = r.id_pair()?;
                out.body = Body::PutProbe { level, key, target };
            }
            k if k == kind::PUT_PROBE | kind::REPLY => {
                out.body = Body::PutProbeReply {
                    level: r.level()?,
                    loaded: r.bool()?,
                    stay_mins: r.u8()?,
                    value_count: r.u16()?,
                    min_ttl_secs: r.u32()?,
                    token: r.token()?,
                    contacts: r.contacts()?,
                };
            }
            kind::STORE => {
                out.body = Body::Store {
                    level: r.level()?,
                    key: r.id()?,
                    ttl_secs: r.u32()?,
                    if_absent: r.bool()?,
                    token: r.token()?,
                    value: r.value()?,
                };
            }
            k if k == kind::STORE | kind::REPLY => {
                out.body = Body::StoreReply {
                    level: r.level()?,
                    stored: r.bool()?,
                    values: r.values()?,
                };
            }
            kind::ERROR => {
                out.body = Body::Error {
                    code: ErrorCode::from_u8(r.u8()?)?,
                };
            }
            other => return Err(WireError::UnknownKind(other)),
        }
        r.finish()
    }
}

impl Body {
    /// Appends the encoded body (what follows the header) to `buf`.
    ///
    /// Panics (a programmer error, never input) if a count exceeds its wire
    /// limit; the node never builds such a body.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        match self {
            Body::Ping | Body::Pong => {}
            Body::Hello { identity } | Body::HelloReply { identity } => {
                buf.extend_from_slice(&identity[..]);
            }
            Body::FindNode { level, target } | Body::Members { level, target } => {
                buf.push(*level);
                buf.extend_from_slice(&target.0);
            }
            Body::Nodes { level, contacts } | Body::MembersReply { level, contacts } => {
                buf.push(*level);
                put_contacts(buf, contacts);
            }
            Body::Get { level, key, target } | Body::PutProbe { level, key, target } => {
                buf.push(*level);
                buf.extend_from_slice(&key.0);
                buf.extend_from_slice(&target.0);
            }
            Body::GetReply {
                level,
                values,
                contacts,
            } => put_get_reply(buf, *level, values, contacts),
            Body::PutProbeReply {
                level,
                loaded,
                stay_mins,
                value_count,
                min_ttl_secs,
                token,
                contacts,
            } => {
                buf.push(*level);
                buf.push(u8::from(*loaded));
                buf.push(*stay_mins);
                buf.extend_from_slice(&value_count.to_be_bytes());
                buf.extend_from_slice(&min_ttl_secs.to_be_bytes());
                buf.extend_from_slice(token);
                put_contacts(buf, contacts);
            }
            Body::Store {
                level,
                key,
                ttl_secs,
                if_absent,
                token,
                value,
            } => {
                buf.push(*level);
                buf.extend_from_slice(&key.0);
                buf.extend_from_slice(&ttl_secs.to_be_bytes());
                buf.push(u8::from(*if_absent));
                buf.extend_from_slice(token);
                put_value(buf, value);
            }
            Body::StoreReply {
                level,
                stored,
                values,
            } => {
                buf.push(*level);
                buf.push(u8::from(*stored));
                put_values(buf, values);
            }
            Body::Error { code } => buf.push(code.to_u8()),
        }
    }
}

/// Appends a header: `kind`, `route`, `txid`, the sender's id and
/// services, and its cluster at each non-global level (at most
/// `LEVELS_MAX - 1`: a programmer error otherwise, never input). The fixed
/// part and each cluster entry are written at once (issue 27: a push or an
/// extend per field cost ~100 instructions a reply).
pub fn put_header(
    buf: &mut Vec<u8>,
    kind: u8,
    route: u16,
    txid: u32,
    sender: &Id,
    services: Services,
    clusters: impl ExactSizeIterator<Item = ClusterInfo>,
) {
    let n = clusters.len();
    assert!(n < LEVELS_MAX, "too many cluster entries");
    buf.reserve(HEADER_FIXED_BYTES + n * CLUSTER_ENTRY_BYTES);
    let mut fixed = [0u8; HEADER_FIXED_BYTES];
    fixed[0] = VERSION;
    fixed[1] = kind;
    fixed[2..4].copy_from_slice(&route.to_be_bytes());
    fixed[4..8].copy_from_slice(&txid.to_be_bytes());
    fixed[8..28].copy_from_slice(&sender.0);
    fixed[28] = services.0;
    fixed[29] = n as u8;
    buf.extend_from_slice(&fixed);
    for c in clusters {
        let mut entry = [0u8; CLUSTER_ENTRY_BYTES];
        entry[..20].copy_from_slice(&c.id.0);
        entry[20..24].copy_from_slice(&c.age_secs.to_be_bytes());
        entry[24..].copy_from_slice(&c.size.to_be_bytes());
        buf.extend_from_slice(&entry);
    }
}

/// Appends the body of a get reply (`Body::GetReply`) from its parts, so
/// that a reply can be written without building the body.
///
/// `values` are the values or references to them ([`crate::dsht::store::Store::get_refs`]).
pub fn put_get_reply<V: std::borrow::Borrow<Value>>(
    buf: &mut Vec<u8>,
    level: u8,
    values: &[V],
    contacts: &[Contact],
) {
    buf.push(level);
    put_values(buf, values);
    put_contacts(buf, contacts);
}

fn put_contacts(buf: &mut Vec<u8>, contacts: &[Contact]) {
    assert!(contacts.len() <= CONTACTS_MAX, "too many contacts");
    if contacts.is_empty() {
        // A get reply that carries values carries no contacts.
        buf.push(0);
        return;
    }
    buf.reserve(1 + contacts.len() * CONTACT_BYTES_MAX);
    buf.push(contacts.len() as u8);
    for c in contacts {
        // Each contact in one write of a fixed size (an IPv4 contact's or an
        // IPv6 one's), which compiles to a few stores where a write of a
        // length known only at run time calls memcpy (issue 27: that call
        // was 2 % of the simulator's join at 50,000 nodes): id, family,
        // address, port, services.
        match c.addr.ip() {
            IpAddr::V4(v4) => {
                buf.extend_from_slice(&contact_piece::<CONTACT_BYTES_V4>(c, 4, &v4.octets()))
            }
            IpAddr::V6(v6) => {
                buf.extend_from_slice(&contact_piece::<CONTACT_BYTES_MAX>(c, 6, &v6.octets()))
            }
        }
    }
}

/// Contact `c` on the wire, `N` bytes: id, `family`, the address `ip`
/// (`N` − 24 bytes), port, services.
#[inline(always)]
fn contact_piece<const N: usize>(c: &Contact, family: u8, ip: &[u8]) -> [u8; N] {
    let mut e = [0u8; N];
    e[..ID_BYTES].copy_from_slice(&c.id.0);
    e[ID_BYTES] = family;
    e[ID_BYTES + 1..N - 3].copy_from_slice(ip);
    e[N - 3..N - 1].copy_from_slice(&c.addr.port().to_be_bytes());
    e[N - 1] = c.services.0;
    e
}

fn put_addr<B: Extend<u8>>(buf: &mut B, addr: SocketAddr) {
    match addr.ip() {
        IpAddr::V4(v4) => {
            buf.extend([4u8]);
            buf.extend(v4.octets());
        }
        IpAddr::V6(v6) => {
            buf.extend([6u8]);
            buf.extend(v6.octets());
        }
    }
    buf.extend(addr.port().to_be_bytes());
}

fn put_values<V: std::borrow::Borrow<Value>>(buf: &mut Vec<u8>, values: &[V]) {
    assert!(values.len() <= VALUES_MAX, "too many values");
    buf.push(values.len() as u8);
    for v in values {
        put_value(buf, v.borrow());
    }
}

fn put_value(buf: &mut Vec<u8>, v: &Value) {
    assert!(v.0.len() <= VALUE_BYTES_MAX, "value too long");
    buf.push(v.0.len() as u8);
    buf.extend_from_slice(&v.0);
}

/// A bounds-checked cursor: every read returns `Truncated` instead of panicking.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    /// The next `N` bytes as an array: one bounds check for a run of
    /// fixed-size fields.
    fn array<const N: usize>(&mut self) -> Result<&'a [u8; N], WireError> {
        self.take(N)?.try_into().map_err(|_| WireError::Truncated)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bool(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::BadField("boolean")),
        }
    }

    fn level(&mut self) -> Result<u8, WireError> {
        let l = self.u8()?;
        if l as usize >= LEVELS_MAX {
            return Err(WireError::BadField("level"));
        }
        Ok(l)
    }

    fn id(&mut self) -> Result<Id, WireError> {
        let mut id = [0u8; ID_BYTES];
        id.copy_from_slice(self.take(ID_BYTES)?);
        Ok(Id(id))
    }

    /// Two ids in a row (a key and a target).
    fn id_pair(&mut self) -> Result<(Id, Id), WireError> {
        let b: &[u8; 2 * ID_BYTES] = self.array()?;
        let (mut a, mut c) = (Id::ZERO, Id::ZERO);
        a.0.copy_from_slice(&b[..ID_BYTES]);
        c.0.copy_from_slice(&b[ID_BYTES..]);
        Ok((a, c))
    }

    fn token(&mut self) -> Result<Token, WireError> {
        let mut t = [0u8; TOKEN_BYTES];
        t.copy_from_slice(self.take(TOKEN_BYTES)?);
        Ok(t)
    }

    fn identity(&mut self) -> Result<Box<Identity>, WireError> {
        let mut id = Box::new([0u8; IDENTITY_BYTES]);
        id.copy_from_slice(self.take(IDENTITY_BYTES)?);
        Ok(id)
    }

    fn addr(&mut self) -> Result<SocketAddr, WireError> {
        let ip = match self.u8()? {
            4 => {
                let b = self.take(4)?;
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
            }
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(self.take(16)?);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            _ => return Err(WireError::BadField("address family")),
        };
        Ok(SocketAddr::new(ip, self.u16()?))
    }

    fn contacts(&mut self) -> Result<Contacts, WireError> {
        let n = self.u8()? as usize;
        if n > CONTACTS_MAX {
            return Err(WireError::TooMany("contacts"));
        }
        let mut out = SmallVec::with_capacity(n);
        for _ in 0..n {
            let id = self.id()?;
            let addr = self.addr()?;
            let services = self.u8()?;
            if services & !Services::KNOWN != 0 {
                return Err(WireError::BadField("services"));
            }
            out.push(Contact {
                id,
                addr,
                services: Services(services),
            });
        }
        Ok(out)
    }

    fn values(&mut self) -> Result<Values, WireError> {
        let count = self.u8()? as usize;
        if count > VALUES_MAX {
            return Err(WireError::TooMany("values"));
        }
        let mut values = SmallVec::new();
        for _ in 0..count {
            values.push(self.value()?);
        }
        Ok(values)
    }

    fn value(&mut self) -> Result<Value, WireError> {
        let n = self.u8()? as usize;
        Ok(Value(SmallVec::from_slice(self.take(n)?)))
    }

    fn finish(&self) -> Result<(), WireError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes)
        }
    }
}

/// The txid of `datagram` if its kind byte says reply, read at the
/// header's fixed offsets without decoding or checking anything else: a
/// hint for a driver prefetching the state the reply will touch, never a
/// basis for a decision.
pub fn peek_reply_txid(datagram: &[u8]) -> Option<u32> {
    match *datagram {
        [_, k, _, _, a, b, c, d, ..] if k & kind::REPLY != 0 => {
            Some(u32::from_be_bytes([a, b, c, d]))
        }
        _ => None,
    }
}

/// The sender's id in `datagram`, read at the header's fixed offset without
/// decoding or checking anything else: a hint only, as [`peek_reply_txid`].
pub fn peek_sender(datagram: &[u8]) -> Option<Id> {
    let mut id = Id::ZERO;
    id.0.copy_from_slice(datagram.get(8..8 + ID_BYTES)?);
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_peeks_read_what_decode_reads() {
        let mut reply = Vec::new();
        Message {
            header: header(),
            body: Body::Pong,
        }
        .encode(&mut reply);
        let m = Message::decode(&reply).unwrap();
        assert_eq!(peek_reply_txid(&reply), Some(m.header.txid));
        assert_eq!(peek_sender(&reply), Some(m.header.sender));
        assert_eq!(peek_reply_txid(&PING_BYTES), None, "a request");
        assert_eq!(peek_sender(&PING_BYTES), Some(Id([0x11; 20])));
        assert_eq!(peek_sender(&PING_BYTES[..27]), None, "too short");
        assert_eq!(peek_reply_txid(&reply[..7]), None, "too short");
    }

    fn header() -> Header {
        Header {
            route: 0xabcd,
            txid: 0x0102_0304,
            sender: Id([0x11; 20]),
            services: Services::HTTP,
            clusters: SmallVec::new(),
        }
    }

    /// A ping from node 0x11.., route 0xabcd, txid 0x01020304, HTTP service, no clusters.
    const PING_BYTES: [u8; 30] = [
        0x01, 0x01, 0xab, 0xcd, 0x01, 0x02, 0x03, 0x04, //
        0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, //
        0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, //
        0x01, 0x00,
    ];

    /// A store reply at level 2, stored = true, no values, from a sender in one
    /// level-1 cluster (id 0x22.., age 3600 s, size 70).
    const STORE_REPLY_BYTES: [u8; 61] = [
        0x01, 0x85, 0xab, 0xcd, 0x01, 0x02, 0x03, 0x04, //
        0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, //
        0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, //
        0x01, 0x01, //
        0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, //
        0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, //
        0x00, 0x00, 0x0e, 0x10, 0x00, 0x00, 0x00, 0x46, //
        0x02, 0x01, 0x00,
    ];

    #[test]
    fn ping_golden_vector() {
        let m = Message {
            header: header(),
            body: Body::Ping,
        };
        assert_eq!(m.to_bytes(), PING_BYTES);
        assert_eq!(Message::decode(&PING_BYTES).unwrap(), m);
    }

    #[test]
    fn store_reply_with_cluster_header_golden_vector() {
        let mut h = header();
        h.clusters.push(ClusterInfo {
            id: Id([0x22; 20]),
            age_secs: 3600,
            size: 70,
        });
        let m = Message {
            header: h,
            body: Body::StoreReply {
                level: 2,
                stored: true,
                values: SmallVec::new(),
            },
        };
        assert_eq!(m.to_bytes(), STORE_REPLY_BYTES);
        assert_eq!(Message::decode(&STORE_REPLY_BYTES).unwrap(), m);
    }

    #[test]
    fn get_reply_golden_vector() {
        let mut h = header();
        h.services = Services::NONE;
        let contact = Contact {
            id: Id([0x33; 20]),
            addr: "10.1.2.3:8000".parse().unwrap(),
            services: Services::DNS,
        };
        let m = Message {
            header: h,
            body: Body::GetReply {
                level: 0,
                values: SmallVec::from_vec(vec![Value::new(b"hi").unwrap()]),
                contacts: SmallVec::from_vec(vec![contact]),
            },
        };
        let mut want = PING_BYTES.to_vec();
        want[1] = 0x83;
        want[28] = 0x00;
        want.extend_from_slice(&[0x00, 0x01, 0x02, b'h', b'i', 0x01]);
        want.extend_from_slice(&[0x33; 20]);
        want.extend_from_slice(&[0x04, 10, 1, 2, 3, 0x1f, 0x40, 0x02]);
        assert_eq!(m.to_bytes(), want);
        assert_eq!(Message::decode(&want).unwrap(), m);
    }

    #[test]
    fn members_request_golden_vector() {
        let m = Message {
            header: header(),
            body: Body::Members {
                level: 1,
                target: Id([0x44; 20]),
            },
        };
        let mut want = PING_BYTES.to_vec();
        want[1] = 0x06;
        want.push(0x01);
        want.extend_from_slice(&[0x44; 20]);
        assert_eq!(m.to_bytes(), want);
        assert_eq!(Message::decode(&want).unwrap(), m);
        // Its reply is kind 0x86 and has the shape of a find-node reply.
        want.truncate(30);
        want[1] = 0x86;
        want.extend_from_slice(&[0x01, 0x00]);
        assert_eq!(
            Message::decode(&want).unwrap().body,
            Body::MembersReply {
                level: 1,
                contacts: SmallVec::new()
            }
        );
    }

    #[test]
    fn malformed_datagrams_are_typed_errors() {
        assert_eq!(Message::decode(&[]), Err(WireError::Truncated));
        let mut v = PING_BYTES;
        v[0] = 2;
        assert_eq!(Message::decode(&v), Err(WireError::BadVersion(2)));
        let mut v = PING_BYTES;
        v[1] = 0x42;
        assert_eq!(Message::decode(&v), Err(WireError::UnknownKind(0x42)));
        let mut v = PING_BYTES;
        v[29] = 9; // lying cluster count
        assert_eq!(
            Message::decode(&v),
            Err(WireError::TooMany("cluster entries"))
        );
        let mut v = PING_BYTES;
        v[29] = 2; // two entries promised, none present
        assert_eq!(Message::decode(&v), Err(WireError::Truncated));
        let mut v = PING_BYTES.to_vec();
        v.push(0);
        assert_eq!(Message::decode(&v), Err(WireError::TrailingBytes));
        let mut v = PING_BYTES;
        v[28] = 0x80;
        assert_eq!(Message::decode(&v), Err(WireError::BadField("services")));
        for n in 0..PING_BYTES.len() {
            assert_eq!(
                Message::decode(&PING_BYTES[..n]),
                Err(WireError::Truncated),
                "prefix {n}"
            );
        }
    }

    #[test]
    fn value_holds_an_address() {
        for a in ["1.2.3.4:80", "[2001:db8::1]:8090"] {
            let addr: SocketAddr = a.parse().unwrap();
            assert_eq!(Value::from_addr(addr).to_addr(), Some(addr));
        }
        assert_eq!(Value::new(b"\x04\x01").unwrap().to_addr(), None);
        assert!(Value::new(&[0u8; 256]).is_none());
    }

    pub(crate) fn arb_id() -> impl Strategy<Value = Id> {
        proptest::array::uniform20(any::<u8>()).prop_map(Id)
    }

    fn arb_addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(o, p)| SocketAddr::new(IpAddr::from(o), p)),
            (any::<[u8; 16]>(), any::<u16>())
                .prop_map(|(o, p)| SocketAddr::new(IpAddr::from(o), p)),
        ]
    }

    fn arb_contacts() -> impl Strategy<Value = Contacts> {
        proptest::collection::vec(
            (arb_id(), arb_addr(), 0u8..8).prop_map(|(id, addr, s)| Contact {
                id,
                addr,
                services: Services(s),
            }),
            0..=CONTACTS_MAX,
        )
        .prop_map(SmallVec::from_vec)
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        proptest::collection::vec(any::<u8>(), 0..=VALUE_BYTES_MAX)
            .prop_map(|v| Value(SmallVec::from_vec(v)))
    }

    fn arb_body() -> impl Strategy<Value = Body> {
        let level = 0u8..LEVELS_MAX as u8;
        prop_oneof![
            Just(Body::Ping),
            Just(Body::Pong),
            any::<u8>().prop_map(|b| Body::Hello {
                identity: Box::new([b; IDENTITY_BYTES])
            }),
            any::<u8>().prop_map(|b| Body::HelloReply {
                identity: Box::new([b; IDENTITY_BYTES])
            }),
            (level.clone(), arb_id()).prop_map(|(level, target)| Body::FindNode { level, target }),
            (level.clone(), arb_contacts())
                .prop_map(|(level, contacts)| Body::Nodes { level, contacts }),
            (level.clone(), arb_id()).prop_map(|(level, target)| Body::Members { level, target }),
            (level.clone(), arb_contacts())
                .prop_map(|(level, contacts)| Body::MembersReply { level, contacts }),
            (level.clone(), arb_id(), arb_id()).prop_map(|(level, key, target)| Body::Get {
                level,
                key,
                target
            }),
            (
                level.clone(),
                proptest::collection::vec(arb_value(), 0..6),
                arb_contacts()
            )
                .prop_map(|(level, values, contacts)| Body::GetReply {
                    level,
                    values: SmallVec::from_vec(values),
                    contacts
                }),
            (level.clone(), arb_id(), arb_id()).prop_map(|(level, key, target)| Body::PutProbe {
                level,
                key,
                target
            }),
            (
                level.clone(),
                any::<bool>(),
                any::<u8>(),
                any::<u16>(),
                any::<u32>(),
                any::<Token>(),
                arb_contacts()
            )
                .prop_map(
                    |(level, loaded, stay_mins, value_count, min_ttl_secs, token, contacts)| {
                        Body::PutProbeReply {
                            level,
                            loaded,
                            stay_mins,
                            value_count,
                            min_ttl_secs,
                            token,
                            contacts,
                        }
                    }
                ),
            (
                level.clone(),
                arb_id(),
                any::<u32>(),
                any::<bool>(),
                any::<Token>(),
                arb_value()
            )
                .prop_map(|(level, key, ttl_secs, if_absent, token, value)| {
                    Body::Store {
                        level,
                        key,
                        ttl_secs,
                        if_absent,
                        token,
                        value,
                    }
                }),
            (
                level,
                any::<bool>(),
                proptest::collection::vec(arb_value(), 0..4)
            )
                .prop_map(|(level, stored, values)| Body::StoreReply {
                    level,
                    stored,
                    values: SmallVec::from_vec(values)
                }),
            prop_oneof![
                Just(ErrorCode::WrongCluster),
                Just(ErrorCode::BadToken),
                Just(ErrorCode::Overloaded),
                Just(ErrorCode::NoSuchLevel)
            ]
            .prop_map(|code| Body::Error { code }),
        ]
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        (
            any::<u16>(),
            any::<u32>(),
            arb_id(),
            0u8..8,
            proptest::collection::vec(
                (arb_id(), any::<u32>(), any::<u32>())
                    .prop_map(|(id, age_secs, size)| ClusterInfo { id, age_secs, size }),
                0..LEVELS_MAX,
            ),
            arb_body(),
        )
            .prop_map(|(route, txid, sender, s, clusters, body)| Message {
                header: Header {
                    route,
                    txid,
                    sender,
                    services: Services(s),
                    clusters: SmallVec::from_vec(clusters),
                },
                body,
            })
    }

    /// The longest message of each kind, with a full cluster header:
    /// none is longer than `MESSAGE_BYTES_MAX`, and the get reply is
    /// exactly that long (receive buffers are sized by it).
    #[test]
    fn no_message_is_longer_than_message_bytes_max() {
        let contacts: Contacts = (0..CONTACTS_MAX)
            .map(|i| Contact {
                id: Id([i as u8; 20]),
                addr: SocketAddr::new(IpAddr::V6(Ipv6Addr::from([0xfe; 16])), 7000),
                services: Services(7),
            })
            .collect();
        let value = Value::new(&[0xaa; VALUE_BYTES_MAX]).unwrap();
        let values: Values = (0..VALUES_MAX).map(|_| value.clone()).collect();
        let mut h = header();
        for _ in 1..LEVELS_MAX {
            h.clusters.push(ClusterInfo {
                id: Id([0x22; 20]),
                age_secs: u32::MAX,
                size: u32::MAX,
            });
        }
        let bodies = [
            Body::GetReply {
                level: 3,
                values: values.clone(),
                contacts: contacts.clone(),
            },
            Body::StoreReply {
                level: 3,
                stored: false,
                values,
            },
            Body::PutProbeReply {
                level: 3,
                loaded: true,
                stay_mins: 255,
                value_count: u16::MAX,
                min_ttl_secs: u32::MAX,
                token: [0xbb; TOKEN_BYTES],
                contacts: contacts.clone(),
            },
            Body::Nodes {
                level: 3,
                contacts: contacts.clone(),
            },
            Body::MembersReply { level: 3, contacts },
            Body::Store {
                level: 3,
                key: Id([1; 20]),
                ttl_secs: u32::MAX,
                if_absent: true,
                token: [0xbb; TOKEN_BYTES],
                value,
            },
            Body::HelloReply {
                identity: Box::new([0xcc; IDENTITY_BYTES]),
            },
        ];
        for (i, body) in bodies.into_iter().enumerate() {
            let m = Message {
                header: h.clone(),
                body,
            };
            let n = m.to_bytes().len();
            assert!(n <= MESSAGE_BYTES_MAX, "body {i}: {n} bytes");
            if i == 0 {
                assert_eq!(n, MESSAGE_BYTES_MAX);
            }
        }
        assert_eq!(MESSAGE_BYTES_MAX, 9_589);
    }

    /// The encoder before issue 27 (a push or an extend per field, the
    /// header built first): the reference `encode` must agree with, byte
    /// for byte.
    mod before {
        use super::super::*;

        pub(super) fn encode(m: &Message, buf: &mut Vec<u8>) {
            let h = &m.header;
            assert!(h.clusters.len() < LEVELS_MAX, "too many cluster entries");
            buf.push(VERSION);
            buf.push(m.body.kind());
            buf.extend_from_slice(&h.route.to_be_bytes());
            buf.extend_from_slice(&h.txid.to_be_bytes());
            buf.extend_from_slice(&h.sender.0);
            buf.push(h.services.0);
            buf.push(h.clusters.len() as u8);
            for c in &h.clusters {
                buf.extend_from_slice(&c.id.0);
                buf.extend_from_slice(&c.age_secs.to_be_bytes());
                buf.extend_from_slice(&c.size.to_be_bytes());
            }
            match &m.body {
                Body::Ping | Body::Pong => {}
                Body::Hello { identity } | Body::HelloReply { identity } => {
                    buf.extend_from_slice(&identity[..]);
                }
                Body::FindNode { level, target } | Body::Members { level, target } => {
                    buf.push(*level);
                    buf.extend_from_slice(&target.0);
                }
                Body::Nodes { level, contacts } | Body::MembersReply { level, contacts } => {
                    buf.push(*level);
                    put_contacts_before(buf, contacts);
                }
                Body::Get { level, key, target } | Body::PutProbe { level, key, target } => {
                    buf.push(*level);
                    buf.extend_from_slice(&key.0);
                    buf.extend_from_slice(&target.0);
                }
                Body::GetReply {
                    level,
                    values,
                    contacts,
                } => {
                    buf.push(*level);
                    put_values_before(buf, values);
                    put_contacts_before(buf, contacts);
                }
                Body::PutProbeReply {
                    level,
                    loaded,
                    stay_mins,
                    value_count,
                    min_ttl_secs,
                    token,
                    contacts,
                } => {
                    buf.push(*level);
                    buf.push(u8::from(*loaded));
                    buf.push(*stay_mins);
                    buf.extend_from_slice(&value_count.to_be_bytes());
                    buf.extend_from_slice(&min_ttl_secs.to_be_bytes());
                    buf.extend_from_slice(token);
                    put_contacts_before(buf, contacts);
                }
                Body::Store {
                    level,
                    key,
                    ttl_secs,
                    if_absent,
                    token,
                    value,
                } => {
                    buf.push(*level);
                    buf.extend_from_slice(&key.0);
                    buf.extend_from_slice(&ttl_secs.to_be_bytes());
                    buf.push(u8::from(*if_absent));
                    buf.extend_from_slice(token);
                    put_value(buf, value);
                }
                Body::StoreReply {
                    level,
                    stored,
                    values,
                } => {
                    buf.push(*level);
                    buf.push(u8::from(*stored));
                    put_values_before(buf, values);
                }
                Body::Error { code } => buf.push(code.to_u8()),
            }
        }

        /// The decoder before issue 27 (one bounds check per field).
        pub(super) fn decode(bytes: &[u8]) -> Result<Message, WireError> {
            let mut r = Reader { buf: bytes, pos: 0 };
            let version = r.u8()?;
            if version != VERSION {
                return Err(WireError::BadVersion(version));
            }
            let kind_byte = r.u8()?;
            let route = r.u16()?;
            let txid = r.u32()?;
            let sender = r.id()?;
            let services = r.u8()?;
            if services & !Services::KNOWN != 0 {
                return Err(WireError::BadField("services"));
            }
            let n = r.u8()? as usize;
            if n >= LEVELS_MAX {
                return Err(WireError::TooMany("cluster entries"));
            }
            let mut clusters = SmallVec::new();
            for _ in 0..n {
                clusters.push(ClusterInfo {
                    id: r.id()?,
                    age_secs: r.u32()?,
                    size: r.u32()?,
                });
            }
            let body = match kind_byte {
                kind::PING => Body::Ping,
                k if k == kind::PING | kind::REPLY => Body::Pong,
                kind::HELLO => Body::Hello {
                    identity: r.identity()?,
                },
                k if k == kind::HELLO | kind::REPLY => Body::HelloReply {
                    identity: r.identity()?,
                },
                kind::FIND_NODE => Body::FindNode {
                    level: r.level()?,
                    target: r.id()?,
                },
                k if k == kind::FIND_NODE | kind::REPLY => Body::Nodes {
                    level: r.level()?,
                    contacts: r.contacts()?,
                },
                kind::MEMBERS => Body::Members {
                    level: r.level()?,
                    target: r.id()?,
                },
                k if k == kind::MEMBERS | kind::REPLY => Body::MembersReply {
                    level: r.level()?,
                    contacts: r.contacts()?,
                },
                kind::GET => Body::Get {
                    level: r.level()?,
                    key: r.id()?,
                    target: r.id()?,
                },
                k if k == kind::GET | kind::REPLY => Body::GetReply {
                    level: r.level()?,
                    values: r.values()?,
                    contacts: r.contacts()?,
                },
                kind::PUT_PROBE => Body::PutProbe {
                    level: r.level()?,
                    key: r.id()?,
                    target: r.id()?,
                },
                k if k == kind::PUT_PROBE | kind::REPLY => Body::PutProbeReply {
                    level: r.level()?,
                    loaded: r.bool()?,
                    stay_mins: r.u8()?,
                    value_count: r.u16()?,
                    min_ttl_secs: r.u32()?,
                    token: r.token()?,
                    contacts: r.contacts()?,
                },
                kind::STORE => Body::Store {
                    level: r.level()?,
                    key: r.id()?,
                    ttl_secs: r.u32()?,
                    if_absent: r.bool()?,
                    token: r.token()?,
                    value: r.value()?,
                },
                k if k == kind::STORE | kind::REPLY => Body::StoreReply {
                    level: r.level()?,
                    stored: r.bool()?,
                    values: r.values()?,
                },
                kind::ERROR => Body::Error {
                    code: ErrorCode::from_u8(r.u8()?)?,
                },
                other => return Err(WireError::UnknownKind(other)),
            };
            r.finish()?;
            Ok(Message {
                header: Header {
                    route,
                    txid,
                    sender,
                    services: Services(services),
                    clusters,
                },
                body,
            })
        }

        fn put_contacts_before(buf: &mut Vec<u8>, contacts: &[Contact]) {
            assert!(contacts.len() <= CONTACTS_MAX, "too many contacts");
            buf.push(contacts.len() as u8);
            for c in contacts {
                buf.extend_from_slice(&c.id.0);
                put_addr(buf, c.addr);
                buf.push(c.services.0);
            }
        }

        fn put_values_before(buf: &mut Vec<u8>, values: &[Value]) {
            assert!(values.len() <= VALUES_MAX, "too many values");
            buf.push(values.len() as u8);
            for v in values {
                put_value(buf, v);
            }
        }
    }

    proptest! {
        #[test]
        fn every_message_round_trips(m in arb_message()) {
            let bytes = m.to_bytes();
            prop_assert!(bytes.len() <= MESSAGE_BYTES_MAX);
            prop_assert_eq!(Message::decode(&bytes), Ok(m));
        }

        /// The encoder writes what the one before issue 27 wrote, for
        /// every message (and into a buffer that already holds bytes, as
        /// the node's reply buffer may).
        #[test]
        fn the_encoder_writes_what_the_one_before_wrote(m in arb_message(), prefix in proptest::collection::vec(any::<u8>(), 0..3)) {
            let mut ours = prefix.clone();
            m.encode(&mut ours);
            let mut theirs = prefix;
            before::encode(&m, &mut theirs);
            prop_assert_eq!(ours, theirs);
            // A value's copy is the value.
            if let Body::Store { value, .. } = &m.body {
                prop_assert_eq!(&value.clone(), value);
            }
        }

        /// The decoder reads what the one before read, and fails where and
        /// as it failed, for every message, every cut of it and every
        /// one-byte change.
        #[test]
        fn the_decoder_reads_what_the_one_before_read(m in arb_message(), cut in any::<proptest::sample::Index>(), pos in any::<proptest::sample::Index>(), byte in any::<u8>()) {
            let bytes = m.to_bytes();
            prop_assert_eq!(Message::decode(&bytes), before::decode(&bytes));
            let n = cut.index(bytes.len() + 1);
            prop_assert_eq!(Message::decode(&bytes[..n]), before::decode(&bytes[..n]));
            let mut changed = bytes.clone();
            let i = pos.index(changed.len());
            changed[i] = byte;
            prop_assert_eq!(Message::decode(&changed), before::decode(&changed));
        }

        /// Decoded into a message that held another (clusters, values,
        /// contacts), a datagram reads as it did before: nothing of the
        /// last message is left.
        #[test]
        fn a_message_decoded_over_another_is_read_as_before(a in arb_message(), m in arb_message(), cut in any::<proptest::sample::Index>()) {
            let bytes = m.to_bytes();
            let mut out = a.clone();
            let got = Message::decode_into(&bytes, &mut out).map(|()| out);
            prop_assert_eq!(got, before::decode(&bytes));
            let n = cut.index(bytes.len() + 1);
            let mut out = a.clone();
            let got = Message::decode_into(&bytes[..n], &mut out).map(|()| out);
            prop_assert_eq!(got, before::decode(&bytes[..n]));
        }

        /// A body said to hold nothing on the heap is one whose every
        /// field is plain data: its bytes are at most the header, a level
        /// and two ids (or an error code), and every kind that carries
        /// values, contacts or an identity is dropped as usual.
        #[test]
        fn only_bodies_of_plain_fields_hold_no_heap(m in arb_message()) {
            let plain = matches!(
                m.body.kind(),
                kind::PING
                    | kind::FIND_NODE
                    | kind::MEMBERS
                    | kind::GET
                    | kind::PUT_PROBE
                    | kind::ERROR
            ) || m.body.kind() == kind::PING | kind::REPLY;
            prop_assert_eq!(m.body.holds_no_heap(), plain);
        }

        #[test]
        fn random_bytes_read_as_before(bytes in proptest::collection::vec(any::<u8>(), 0..200), kind in any::<proptest::sample::Index>()) {
            prop_assert_eq!(Message::decode(&bytes), before::decode(&bytes));
            // And past the version, with a kind that exists.
            let mut b = bytes;
            if b.len() >= 2 {
                b[0] = VERSION;
                let kinds = [1u8, 0x81, 2, 0x82, 3, 0x83, 4, 0x84, 5, 0x85, 6, 0x86, 7, 0x87, 0xff];
                b[1] = kinds[kind.index(kinds.len())];
                if b.len() > 29 {
                    // A cluster count that may be valid.
                    b[29] &= 3;
                }
            }
            prop_assert_eq!(Message::decode(&b), before::decode(&b));
        }

        #[test]
        fn every_truncation_is_an_error(m in arb_message(), cut in any::<proptest::sample::Index>()) {
            let bytes = m.to_bytes();
            let n = cut.index(bytes.len());
            prop_assert!(Message::decode(&bytes[..n]).is_err());
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Message::decode(&bytes);
        }

        #[test]
        fn mutated_messages_never_panic(m in arb_message(), pos in any::<proptest::sample::Index>(), byte in any::<u8>()) {
            let mut bytes = m.to_bytes();
            let i = pos.index(bytes.len());
            bytes[i] = byte;
            if let Ok(m2) = Message::decode(&bytes) {
                // Whatever parses re-encodes to the same bytes: no ambiguity.
                prop_assert_eq!(m2.to_bytes(), bytes);
            }
        }
    }
}
