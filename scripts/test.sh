#!/usr/bin/env bash
# The whole test suite: Rust core, Python bridge against real NumPy/JAX (embedded and through
# ctypes), the jlrs bridge type-check, every .jl file parsed, and the Julia suite where Julia is.
source "$(dirname "$0")/env.sh"
cd "$ROOT"

echo "== lint: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all --check
cargo clippy --quiet --all-targets -- -D warnings
cargo clippy --quiet --workspace --all-targets --features rsdlpack-python/embed -- -D warnings

echo "== Rust tests: core, and the Python bridge with an embedded interpreter"
cargo test --workspace --features rsdlpack-python/embed

echo "== Python tests: the C entry points through ctypes"
build_python_bridge
"$VENV/bin/python" -m pytest -q tests/python
