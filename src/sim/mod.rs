//! The deterministic simulator: many [`Node`](crate::dsht::node::Node)s in virtual
//! time on a modelled wide-area network. No threads, no sockets, no clock:
//! one seed drives everything, and the same seed gives the same run. The
//! experiments return data; drawing it (`coral sim ... --plot`) is the
//! command line's business (the `coral-plot` crate).
//!
//! - [`clusters`]: clusters the nodes form themselves (§4.4, Fig. 7).
//! - [`hotspot`]: the hot-spot experiment of §6.4 (Fig. 8).
//! - [`hunt`]: the hunt for a second origin fetch across cluster changes (issue 24).
//! - [`net`]: the event queue and links (delay, loss) that carry datagrams.
//! - [`origin`]: the flash crowd of §6.1 (Fig. 4) and get latencies of §6.2 (Fig. 6).
//! - [`queue`]: the event queue (a timer wheel), ordered by time, then insertion.
//! - [`world`]: where nodes sit on the globe and the RTTs that follow.

pub mod clusters;
pub mod hotspot;
pub mod hunt;
pub mod net;
pub mod origin;
pub mod queue;
pub mod world;
