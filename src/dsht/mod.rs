//! The distributed sloppy hash table (DSHT) of CoralCDN (NSDI 2004 §4):
//! the centre of the system, as sans-IO state machines.
//!
//! Bottom to top: each module imports only modules above it in this list
//! (and the crate's shared ground: `config`, `rng`, `time`), so there is no
//! import circle; [`node`] drives all the others.
//!
//! - [`id`]: 160-bit ids, XOR distance, `splice` (§4.1).
//! - [`limits`]: the DSHT's named bounds on queues and tables, in one place.
//! - [`prefetch`]: a CPU cache hint for drivers that know which node is next.
//! - [`wire`]: the RPC wire format, with checked parsing.
//! - [`smallmap`]: the map for a node's few operations, RPCs and keys.
//! - [`store`]: sloppy storage — full, loaded, leakage rate β (§4.2).
//! - [`routing`]: k-bucket routing tables, one per level.
//! - [`lookup`]: the b-bit-per-hop iterative lookup with its window (§4.1).
//! - [`ratelimit`]: per-source request rates (GCRA), the node's first defence.
//! - [`recall`]: the "full and loaded" answers a putting node remembers (§4.2).
//! - [`cluster`]: self-organizing clusters: the rules and each level's manager (§4.4).
//! - [`node`]: one node: two-phase put, hierarchical get, `nodes`, `levels`
//!   (§2.3, §4.2–4.3).
//!
//! Architecture Invariant: nothing under `src/dsht/` reads a clock, opens a
//! socket or imports a service above it (`dns`, `proxy`, `cache`, `sim`).

pub mod cluster;
pub mod id;
pub mod limits;
pub mod lookup;
pub mod node;
pub mod prefetch;
pub mod ratelimit;
pub mod recall;
pub mod routing;
pub mod smallmap;
pub mod store;
pub mod wire;
