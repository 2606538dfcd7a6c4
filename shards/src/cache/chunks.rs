//! The signed records of verified peer bytes kept beside cached objects
//! (issue 22 item 4; `coral::verify`): the origin-fetcher's signed head,
//! one signature per chunk and the signed end, as the origin-fetcher made
//! them (a relay keeps the records it received and re-emits them).
//!
//! In memory, shared by every core (a peer's request may reach any core):
//! one lock, taken once per signed chunk written or sent to a peer — the
//! fill path and the peer-serving path, never a client's hit. At most
//! `limits::CHUNK_RECORDS.bytes_max` bytes; the oldest object's records go
//! first. Records do not survive a restart: a copy without records is
//! served to clients, and to peers never (they would refuse it).
//!
//! Each object's records carry a generation: a reader that started on one
//! fill's records never mixes in another's (a newer fill replaces them).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use coral::identity::SIGNATURE_BYTES;
use coral::verify::{EndRecord, SignedHead, HEAD_RECORD_BYTES};
use coral::Id;

/// Bytes of records beyond the signatures: the head and the entry itself.
const ENTRY_OVERHEAD_BYTES: usize = HEAD_RECORD_BYTES + 128;

/// The most bytes of records kept.
const RECORDS_BYTES_MAX: usize = crate::limits::CHUNK_RECORDS.bytes_max;

struct Entry {
    generation: u64,
    head: SignedHead,
    sigs: Vec<[u8; SIGNATURE_BYTES]>,
    end: Option<EndRecord>,
}

impl Entry {
    fn bytes(&self) -> usize {
        ENTRY_OVERHEAD_BYTES + self.sigs.len() * SIGNATURE_BYTES
    }
}

#[derive(Default)]
struct Inner {
    map: HashMap<Id, Entry>,
    /// Objects in the order their records began (with the generation, so a
    /// replaced entry's old place is skipped).
    order: VecDeque<(Id, u64)>,
    bytes: usize,
    next_generation: u64,
    /// Peers caught serving bytes their records contradict (a relay's
    /// forgery): not asked again.
    peers: VecDeque<std::net::SocketAddr>,
    /// Signers caught signing what the origin did not send.
    signers: coral::verify::Distrusted,
}

/// The records of every cached object that has them.
#[derive(Default)]
pub struct ChunkRecords {
    inner: Mutex<Inner>,
    /// Evidence against lying origin-fetchers (issue 22 item 5 c,
    /// `proxy/evidence.rs`), shared by every core: taken on a peer fill
    /// and on evidence traffic, never on a client's hit.
    evidence: Mutex<EvidenceState>,
}

/// What a node knows of evidence (issue 22 item 5 c).
#[derive(Default)]
pub struct EvidenceState {
    /// The verdict cache.
    pub book: coral::verify::evidence::Book,
    /// The records this node serves as accuser, by forger: at most
    /// `coral::limits::EVIDENCE.served_max`, the oldest dropped first.
    pub served: VecDeque<(coral::identity::PublicKey, Vec<u8>)>,
    /// Forgers newly proven whose copies each core removes (the latest).
    pub purge: VecDeque<coral::identity::PublicKey>,
    /// Bumped when `purge` changes: a core compares it with the last it saw.
    pub purge_epoch: u64,
}

impl ChunkRecords {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it leaves consistent data (every change is
        // one statement on the map): go on.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Begins the records of a new copy of `key` under `head` (replacing
    /// any older copy's); returns their generation.
    pub fn begin(&self, key: Id, head: SignedHead) -> u64 {
        let mut g = self.lock();
        g.next_generation += 1;
        let generation = g.next_generation;
        let entry = Entry {
            generation,
            head,
            sigs: Vec::new(),
            end: None,
        };
        g.bytes += entry.bytes();
        if let Some(old) = g.map.insert(key, entry) {
            g.bytes -= old.bytes();
        }
        g.order.push_back((key, generation));
        trim(&mut g);
        generation
    }

    /// Begins new records of `key` under `head` only if its records are
    /// still generation `stale` (or there are none): returns the
    /// generation to use, and whether it is this caller's to fill. Two
    /// cores making records for one copy at once: the second uses the
    /// first's.
    pub fn begin_replacing(&self, key: Id, head: SignedHead, stale: Option<u64>) -> (u64, bool) {
        {
            let g = self.lock();
            if let Some(e) = g.map.get(&key) {
                if Some(e.generation) != stale {
                    return (e.generation, false);
                }
            }
        }
        (self.begin(key, head), true)
    }

    /// Whether generation `generation` is still `key`'s records.
    pub fn current(&self, key: &Id, generation: u64) -> bool {
        self.lock()
            .map
            .get(key)
            .is_some_and(|e| e.generation == generation)
    }

    /// Adds the next chunk's signature to generation `generation` of
    /// `key`'s records (before the chunk's bytes are appended to the
    /// cache, so a reader that sees the bytes finds it).
    pub fn push(&self, key: &Id, generation: u64, sig: [u8; SIGNATURE_BYTES]) {
        let mut g = self.lock();
        let Some(e) = g.map.get_mut(key).filter(|e| e.generation == generation) else {
            return;
        };
        e.sigs.push(sig);
        g.bytes += SIGNATURE_BYTES;
        trim(&mut g);
    }

    /// Ends generation `generation` of `key`'s records.
    pub fn end(&self, key: &Id, generation: u64, end: EndRecord) {
        if let Some(e) = self
            .lock()
            .map
            .get_mut(key)
            .filter(|e| e.generation == generation)
        {
            e.end = Some(end);
        }
    }

    /// Drops generation `generation` of `key`'s records (its copy failed).
    pub fn abort(&self, key: &Id, generation: u64) {
        let mut g = self.lock();
        if g.map.get(key).is_some_and(|e| e.generation == generation) {
            if let Some(e) = g.map.remove(key) {
                g.bytes -= e.bytes();
            }
        }
    }

    /// The signed head of `key`'s records and their generation.
    pub fn head(&self, key: &Id) -> Option<(SignedHead, u64)> {
        self.lock().map.get(key).map(|e| (e.head, e.generation))
    }

    /// Chunk `index`'s signature in generation `generation` of `key`'s
    /// records, if there (yet).
    pub fn sig(&self, key: &Id, generation: u64, index: usize) -> Option<[u8; SIGNATURE_BYTES]> {
        let g = self.lock();
        let e = g.map.get(key).filter(|e| e.generation == generation)?;
        e.sigs.get(index).copied()
    }

    /// The signed end of generation `generation` of `key`'s records, if
    /// there (yet).
    pub fn end_of(&self, key: &Id, generation: u64) -> Option<EndRecord> {
        let g = self.lock();
        g.map
            .get(key)
            .filter(|e| e.generation == generation)
            .and_then(|e| e.end)
    }

    /// Stops asking the peer at `addr` (it served forged bytes); true if
    /// it was not distrusted yet. At most `VERIFY.distrusted_signers_max`
    /// peers; the oldest is forgotten first.
    pub fn distrust_peer(&self, addr: std::net::SocketAddr) -> bool {
        let mut g = self.lock();
        if g.peers.contains(&addr) {
            return false;
        }
        if g.peers.len() >= coral::limits::VERIFY.distrusted_signers_max {
            g.peers.pop_front();
        }
        g.peers.push_back(addr);
        true
    }

    /// Whether the peer at `addr` served forged bytes.
    pub fn peer_distrusted(&self, addr: &std::net::SocketAddr) -> bool {
        self.lock().peers.contains(addr)
    }

    /// Stops using what `signer` signed (caught forging); true if it was
    /// not distrusted yet.
    pub fn distrust_signer(&self, signer: coral::identity::PublicKey) -> bool {
        self.lock().signers.add(signer)
    }

    /// Whether `signer` was caught forging.
    pub fn signer_distrusted(&self, signer: &coral::identity::PublicKey) -> bool {
        self.lock().signers.contains(signer)
    }

    /// Bytes of records kept.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The evidence state (issue 22 item 5 c).
    pub fn evidence(&self) -> std::sync::MutexGuard<'_, EvidenceState> {
        self.evidence
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The objects whose kept records `signer` signed.
    pub fn signed_by(&self, signer: &coral::identity::PublicKey) -> Vec<Id> {
        let g = self.lock();
        g.map
            .iter()
            .filter(|(_, e)| e.head.signer() == *signer)
            .map(|(k, _)| *k)
            .collect()
    }

    /// The signers of the records kept: whose copies this node uses.
    pub fn signers(&self) -> std::collections::HashSet<coral::identity::PublicKey> {
        self.lock().map.values().map(|e| e.head.signer()).collect()
    }
}

/// Drops the oldest objects' records until within the bound.
fn trim(g: &mut Inner) {
    while g.bytes > RECORDS_BYTES_MAX {
        let Some((key, generation)) = g.order.pop_front() else {
            break;
        };
        if g.map.get(&key).is_some_and(|e| e.generation == generation) {
            if let Some(e) = g.map.remove(&key) {
                g.bytes -= e.bytes();
            }
        }
    }
    // Places of replaced or dropped entries: compacted once they are most.
    if g.order.len() > 2 * g.map.len() + 64 {
        let Inner { map, order, .. } = g;
        order.retain(|(k, gen)| map.get(k).is_some_and(|e| e.generation == *gen));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coral::identity::{KeyPair, LocalIdentity};
    use coral::verify::{HeadFacts, Signer};

    fn head(key: Id) -> SignedHead {
        let k = KeyPair::from_secret(&[3; 32]);
        let id = LocalIdentity::new(k.clone(), k.certify(&k.public()));
        *Signer::new(
            &id,
            &HeadFacts {
                key,
                status: 200,
                validator: [0; 32],
                fields: [0; 32],
                length: None,
                expires_secs: 0,
                repr_digest: None,
                chunk_bytes: 65536,
            },
        )
        .head()
    }

    #[test]
    fn generations_do_not_mix_and_memory_is_bounded() {
        let r = ChunkRecords::default();
        let key = Id([1; 20]);
        let g1 = r.begin(key, head(key));
        r.push(&key, g1, [1; 64]);
        let g2 = r.begin(key, head(key));
        r.push(&key, g1, [9; 64]); // the old fill's: ignored
        assert_eq!(r.sig(&key, g2, 0), None);
        assert_eq!(r.sig(&key, g1, 0), None);
        r.push(&key, g2, [2; 64]);
        assert_eq!(r.sig(&key, g2, 0), Some([2; 64]));
        // Many objects: the oldest go, the bound holds.
        let per = ENTRY_OVERHEAD_BYTES + 100 * SIGNATURE_BYTES;
        let n = RECORDS_BYTES_MAX / per + 100;
        let head = head(key);
        for i in 0..n as u32 {
            let mut k = [0u8; 20];
            k[..4].copy_from_slice(&i.to_le_bytes());
            k[19] = 0xaa;
            let k = Id(k);
            let g = r.begin(k, head);
            for _ in 0..100 {
                r.push(&k, g, [0; 64]);
            }
        }
        assert!(r.bytes() <= RECORDS_BYTES_MAX);
        assert!(r.head(&key).is_none(), "the oldest went first");
        let g = r.lock();
        assert!(g.order.len() <= 2 * g.map.len() + 65);
    }
}
