//! coral's pure core: CoralCDN's distributed sloppy hash table (DSHT) and
//! everything else that decides, as sans-IO state machines.
//!
//! Nothing in this crate performs I/O, reads a clock, spawns a thread or
//! holds a lock: inputs are `now` ([`time::Time`]), bytes and a seed
//! ([`rng::Rng`]); outputs are datagrams, events and deadlines. The runtime
//! (`shards/`) and the simulator drive the same code.
//!
//! - [`id`]: 160-bit ids, XOR distance, `splice` (NSDI 2004 §4.1).
//! - [`wire`]: the RPC wire format, with checked parsing.
//! - [`routing`]: k-bucket routing tables, one per level.
//! - [`smallmap`]: the map for a node's few operations, RPCs and keys.
//! - [`store`]: sloppy storage — full, loaded, leakage rate β (§4.2).
//! - [`lookup`]: the b-bit-per-hop iterative lookup with its window (§4.1).
//! - [`recall`]: the "full and loaded" answers a putting node remembers (§4.2).
//! - [`node`]: one node: two-phase put, hierarchical get, `nodes`, `levels` (§2.3, §4.2–4.3).
//! - [`cache`]: the disk cache's record format, index entry and eviction policies (§3.2).
//! - [`dns`]: dnssrv, the authoritative DNS redirector (§3.1), sans-IO.
//! - [`proxy`]: the proxy's HTTP framing, Coralized names, cache policy and rewriting (§2.1, §3.2).
//! - [`sim`]: the deterministic simulator and the paper's experiments (§6).

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod cluster;
pub mod config;
pub mod dns;
pub mod id;
pub mod limits;
pub mod lookup;
pub mod node;
pub mod proxy;
pub mod ratelimit;
pub mod recall;
pub mod rng;
pub mod routing;
pub mod sim;
pub mod smallmap;
pub mod store;
pub mod time;
pub mod wire;

pub use config::Config;
pub use id::{Id, Key, NodeId};
pub use node::{Event, Level, Node, OpId};
pub use time::{Duration, Time};
pub use wire::Value;
