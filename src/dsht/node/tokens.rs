//! Write tokens: a put must carry a token the storing node gave the putter's
//! address, so that a spoofed source cannot store (SECURITY.md). The secret
//! rotates every `token_rotate_secs`; the previous one stays valid.

use std::net::{IpAddr, SocketAddr};

use sha1::{Digest, Sha1};

use crate::dsht::wire::{Token, TOKEN_BYTES};
use crate::time::Time;

use super::Node;

impl Node {
    fn rotate_secret(&mut self, now: Time) {
        let epoch = now.as_secs() / self.hot.token_rotate_secs;
        if epoch != self.secret_epoch {
            self.previous_secret = if epoch == self.secret_epoch + 1 {
                self.secret
            } else {
                [0; 16]
            };
            self.rng.fill(&mut self.secret);
            self.secret_epoch = epoch;
        }
    }

    pub(super) fn token_for(&mut self, now: Time, addr: SocketAddr) -> Token {
        self.rotate_secret(now);
        token(&self.secret, addr)
    }

    pub(super) fn token_is_valid(&mut self, now: Time, addr: SocketAddr, t: &Token) -> bool {
        self.rotate_secret(now);
        token(&self.secret, addr) == *t
            || (self.previous_secret != [0; 16] && token(&self.previous_secret, addr) == *t)
    }
}

fn token(secret: &[u8; 16], addr: SocketAddr) -> Token {
    let mut h = Sha1::new();
    h.update(secret);
    match addr.ip() {
        IpAddr::V4(v4) => h.update(v4.octets()),
        IpAddr::V6(v6) => h.update(v6.octets()),
    }
    h.update(addr.port().to_be_bytes());
    let d = h.finalize();
    let mut t = [0u8; TOKEN_BYTES];
    t.copy_from_slice(&d[..TOKEN_BYTES]);
    t
}
