#!/usr/bin/env bash
# The whole test suite: Rust core, Python bridge against real NumPy/JAX (embedded and through
# ctypes), the C header (current, and its Julia and ctypes mirrors), the module layering of the
# core and the bridges (no cycles), a simulated Pkg install from a read-only copy, the hot
# paths' instruction budgets (callgrind), the jlrs bridge type-check, the fuzz targets
# type-checked, every .jl file parsed and linted, and the Julia suite where Julia is.
source "$(dirname "$0")/env.sh"
cd "$ROOT"

echo "== lint: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all --check
cargo fmt --manifest-path bridges/julia/Cargo.toml --check
cargo clippy --quiet --all-targets -- -D warnings
cargo clippy --quiet --workspace --all-targets --features rsdlpack-python/embed -- -D warnings

echo "== fuzz targets: type-checked on stable (cargo fuzz runs them on nightly, scripts/fuzz.sh)"
# Outside the workspace, so nothing above compiles them; a change that breaks a target fails here.
cargo check --quiet --manifest-path fuzz/Cargo.toml --all-targets

echo "== C header: the Julia and ctypes mirrors against include/rsdlpack.h (the header itself: cargo test, c_header)"
"$VENV/bin/python" scripts/check_mirrors.py

echo "== module cycles: inside the core, each bridge and the Python scripts, modules only depend downwards"
"$VENV/bin/python" scripts/module_cycles.py src bridges/python/src bridges/julia/src scripts test/python test \
    --doc docs/src/architecture.md

echo "== Rust tests: core, and the Python bridge with an embedded interpreter"
# Tests named without_a_driver_* assert what happens without a CUDA driver; where a driver
# exists they are skipped (said here) and the GPU tests (--ignored, test/gpu/run.sh) apply.
no_driver_skip=()
if "$VENV/bin/python" -c 'import ctypes.util, sys; sys.exit(0 if ctypes.util.find_library("cuda") else 1)'; then
    echo "SKIPPED: the without_a_driver_* tests (a CUDA driver is present on this machine)"
    no_driver_skip=(--skip without_a_driver)
fi
cargo test --workspace --features rsdlpack-python/embed -- "${no_driver_skip[@]}"

echo "== Python tests: the C entry points through ctypes; the simulated Pkg install; the Julia checks' self-tests"
build_python_bridge
# test_install.py builds from a read-only copy of the tracked files; its cargo targets are kept
# here so that only RsDLPack's own crates are recompiled on each run.
RSDLPACK_INSTALL_TARGET="$ROOT/target/install-check" "$VENV/bin/python" -m pytest -q test/python

echo "== instruction budgets of the hot paths, under callgrind (scripts/budgets.sh, benches/budgets.toml)"
bash scripts/budgets.sh

echo "== Julia bridge: jlrs type-check and lints without Julia (DOCS_RS=1, own target dir)"
# jlrs has no per-version features (since 0.22): under DOCS_RS its build scripts take its stable
# version (1.11), and each other version of [compat] (1.10-1.13) is compiled against that
# version's julia.h by the BinaryBuilder recipe (docs/src/development.md, "Julia versions").
DOCS_RS=1 cargo clippy --quiet --manifest-path bridges/julia/Cargo.toml \
    --target-dir "$ROOT/target/jlrs-check" -- -D warnings

echo "== Julia sources: every .jl file parsed with tree-sitter-julia"
"$VENV/bin/python" scripts/parse_julia.py

echo "== Julia lint: fatou, with the package's entry points (fatou.toml), then in package mode (scripts/fatou-package.toml)"
"$VENV/bin/fatou" lint --color never .
"$VENV/bin/fatou" lint --color never --config scripts/fatou-package.toml .

echo "== Julia test suite (test/runtests.jl)"
if command -v julia >/dev/null 2>&1; then
    # PYTHON: the Python PyCall takes if it is built during this run (it picks one only then).
    PYTHON="$VENV/bin/python" RSDLPACK_TEST_PYTHON="$VENV/bin/python" julia --project=. \
        -e 'using Pkg; Pkg.instantiate(); Pkg.build(); Pkg.test()'
else
    echo "NOT RUN: julia is not on PATH, so test/runtests.jl was not executed here."
fi
