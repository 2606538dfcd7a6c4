//! Delegation: on a runtime with one node per core, a keyed operation for a
//! key another core's shard owns is handed to that core
//! ([`Node::poll_delegated`]) and its result comes back
//! ([`Node::on_delegated_done`]).

use crate::dsht::id::Key;
use crate::dsht::limits::DELEGATED_CALLS_MAX;
use crate::time::Time;

use super::clusters::Internal;
use super::{route_of, shard_of_route, Delegated, DelegatedCall, Event, Node};

impl Node {
    /// Makes this node shard `index` of `count` of one address: keyed
    /// operations the node starts itself (hints, splits) for keys another
    /// shard owns are then delegated ([`Node::poll_delegated`]), because
    /// their replies are steered to, and their values stored at, the owner.
    /// Ownership follows the route: shard `(route · count) >> 16`.
    pub fn set_shard(&mut self, index: usize, count: usize) {
        self.shard = (index, count.max(1));
    }

    /// Whether this shard owns `key`.
    pub(super) fn owns(&self, key: &Key) -> bool {
        shard_of_route(route_of(key), self.shard.1) == self.shard.0
    }

    /// The next call to run on the shard that owns its key.
    pub fn poll_delegated(&mut self) -> Option<Delegated> {
        self.delegated_out.pop_front()
    }

    /// The result of a delegated call: the event its owner's `get` or `put` produced.
    pub fn on_delegated_done(&mut self, now: Time, tag: u64, event: Event) {
        if let Some(internal) = self.delegated.remove(&tag) {
            self.on_internal_done(now, internal, event);
        }
    }

    pub(super) fn delegate(&mut self, call: DelegatedCall, internal: Internal) {
        let tag = self.next_tag;
        self.next_tag += 1;
        if self.delegated.len() >= DELEGATED_CALLS_MAX {
            self.delegated.pop_first(); // its result never came
        }
        if self.delegated_out.len() >= DELEGATED_CALLS_MAX {
            self.delegated_out.pop_front();
        }
        self.delegated.insert(tag, internal);
        self.delegated_out.push_back(Delegated { tag, call });
    }
}
