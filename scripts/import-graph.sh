#!/bin/sh
# Prints the module import graph of both crates (src/ and shards/src/), and
# any import circle in either, as the test `tests/import_graph.rs` reads them.
# The same test fails the build on a circle or on an upward import between
# shards/src/'s layers (platform < services < cli).
set -e
cd "$(dirname "$0")/.."
exec cargo test --release -p coral --test import_graph -- --ignored --nocapture print_import_graph
