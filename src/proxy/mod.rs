//! The proxy's pure parts.

pub mod origin_addr;
