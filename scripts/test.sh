#!/usr/bin/env bash
# The whole test suite: Rust core, Python bridge against real NumPy/JAX (embedded and through
# ctypes), the jlrs bridge type-check, every .jl file parsed, and the Julia suite where Julia is.
source "$(dirname "$0")/env.sh"
cd "$ROOT"

echo "== lint: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all --check
cargo fmt --manifest-path bridges/julia/Cargo.toml --check
cargo clippy --quiet --all-targets -- -D warnings
cargo clippy --quiet --workspace --all-targets --features rsdlpack-python/embed -- -D warnings

echo "== Rust tests: core, and the Python bridge with an embedded interpreter"
cargo test --workspace --features rsdlpack-python/embed

echo "== Python tests: the C entry points through ctypes"
build_python_bridge
"$VENV/bin/python" -m pytest -q tests/python

echo "== Julia bridge: jlrs type-check and lints without Julia (DOCS_RS=1, own target dir)"
DOCS_RS=1 cargo clippy --quiet --manifest-path bridges/julia/Cargo.toml \
    --target-dir "$ROOT/target/jlrs-check" -- -D warnings

echo "== Julia sources: every .jl file parsed with tree-sitter-julia"
"$VENV/bin/python" scripts/parse_julia.py julia

echo "== Julia test suite (julia/test/runtests.jl)"
if command -v julia >/dev/null 2>&1; then
    RSDLPACK_TEST_PYTHON="$VENV/bin/python" julia --project=julia \
        -e 'using Pkg; Pkg.instantiate(); Pkg.build(); Pkg.test()'
else
    echo "NOT RUN: julia is not on PATH, so julia/test/runtests.jl was not executed here."
fi
