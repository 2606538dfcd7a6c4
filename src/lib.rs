//! coral's pure core: CoralCDN's distributed sloppy hash table (DSHT) and
//! everything else that decides, as sans-IO state machines.
//!
//! Nothing in this crate performs I/O, reads a clock, spawns a thread or
//! holds a lock: inputs are `now` ([`time::Time`]), bytes and a seed
//! ([`rng::Rng`]); outputs are datagrams, events and deadlines. The runtime
//! (`shards/`) and the simulator drive the same code.
//!
//! - [`dsht`]: the distributed sloppy hash table (§4), the centre of the
//!   system: ids and the wire format, routing tables, sloppy storage, the
//!   lookup, clusters, and the [`Node`] that drives them (§2.3, §4.1–4.4).
//! - [`cache`]: the disk cache's record format, index entry and eviction policies (§3.2).
//! - [`dns`]: dnssrv, the authoritative DNS redirector (§3.1), sans-IO.
//! - [`proxy`]: the proxy's HTTP framing, Coralized names, cache policy and rewriting (§2.1, §3.2).
//! - [`resolve`]: the stub resolver CoralProxy resolves origin names with, sans-IO.
//! - [`limits`]: the bounds dnssrv and the proxy put on what a stranger can make them hold.
//! - [`sim`]: the deterministic simulator and the paper's experiments (§6).
//!
//! Shared ground under all of them: [`config`] (the DSHT's [`Config`] and
//! its validation), [`rng`] (seeded randomness) and [`time`] (the caller's
//! clock as a value).

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod config;
pub mod dns;
pub mod dsht;
pub mod identity;
pub mod limits;
pub mod proxy;
pub mod resolve;
pub mod rng;
pub mod sim;
pub mod time;
pub mod verify;

pub use config::Config;
pub use dsht::id::{Id, Key, NodeId};
pub use dsht::node::{Event, Level, Node, OpId};
pub use dsht::wire::Value;
pub use time::{Duration, Time};
