#!/usr/bin/env bash
# Builds RsDLPack and moves real NumPy and JAX arrays through it both ways, printing addresses.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
cargo run --release --quiet -p rsdlpack-python --features embed --example demo
