//! The world model (being written).
