//! What dnssrv knows of the node: a snapshot the runtime takes from its
//! core's `Node` every so often (not per query), so answering reads plain
//! vectors and never walks routing tables.

use std::net::IpAddr;

use crate::dsht::node::{Level, Node};
use crate::dsht::wire::Services;
use crate::time::{Duration, Time};

/// One proxy or name server as this node last verified it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its IP address (the node's address: proxy and name server share it).
    pub addr: IpAddr,
    /// When it last answered one of our RPCs (first-hand verification).
    pub verified: Time,
    /// Its lowest measured RTT.
    pub rtt: Option<Duration>,
    /// Configured non-recursive: serve only clients on its local network.
    pub non_recursive: bool,
}

/// One level of the hierarchy as dnssrv sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LevelView {
    /// Members of our cluster at this level running an HTTP proxy.
    pub proxies: Vec<Peer>,
    /// Members of our cluster at this level running dnssrv.
    pub nameservers: Vec<Peer>,
}

/// The snapshot: this node and, per level (0 = global), its cluster's
/// proxies and name servers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// This node's IP address.
    pub me: IpAddr,
    /// Whether this node runs an HTTP proxy.
    pub me_http: bool,
    /// Whether this node's proxy is non-recursive.
    pub me_non_recursive: bool,
    /// Per level, 0 first.
    pub levels: Vec<LevelView>,
}

impl View {
    /// A node that knows no one else.
    pub fn alone(me: IpAddr, me_http: bool, levels: usize) -> View {
        View {
            me,
            me_http,
            me_non_recursive: false,
            levels: vec![LevelView::default(); levels],
        }
    }

    /// The snapshot of `node`: every contact of each level's routing table
    /// (the set `Node::nodes(level, _, _, services)` draws from) that
    /// advertises an HTTP proxy or dnssrv, with its last-verified time. A
    /// contact enters a routing table only after answering one of our RPCs,
    /// and `last_seen` moves only when it answers again.
    pub fn from_node(node: &Node, services: Services) -> View {
        let levels = node.config().levels();
        let mut v = View {
            me: node.addr().ip(),
            me_http: services.contains(Services::HTTP),
            me_non_recursive: services.contains(Services::NON_RECURSIVE),
            levels: Vec::with_capacity(levels),
        };
        for level in 0..levels {
            let mut lv = LevelView::default();
            if let Some(table) = node.routing_table(level as Level) {
                for e in table.entries() {
                    let peer = Peer {
                        addr: e.contact.addr.ip(),
                        verified: e.last_seen,
                        rtt: e.rtt_min,
                        non_recursive: e.contact.services.contains(Services::NON_RECURSIVE),
                    };
                    if e.contact.services.contains(Services::HTTP) {
                        lv.proxies.push(peer);
                    }
                    if e.contact.services.contains(Services::DNS) {
                        lv.nameservers.push(peer);
                    }
                }
            }
            v.levels.push(lv);
        }
        v
    }
}
