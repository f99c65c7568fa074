# Sourced by the other scripts: a Python venv with the peers, and the variables that point
# cargo and the embedded interpreter at it. Idempotent; creates `.venv` on first use.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON_BASE="${PYTHON:-python3}"
stamp="$VENV/.requirements-installed"
if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV"
    "$PYTHON_BASE" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || ! cmp -s "$ROOT/scripts/requirements.txt" "$stamp"; then
    echo "== installing the Python peers (numpy, jax[cpu], torch, paddlepaddle, array-api-strict, apache-tvm-ffi, ml_dtypes, pytest, tree-sitter-julia)"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -r "$ROOT/scripts/requirements.txt"
    cp "$ROOT/scripts/requirements.txt" "$stamp"
fi
export PYO3_PYTHON="$VENV/bin/python"
# The embedded interpreter (cargo tests, the demo) starts from the base Python; give it the
# venv's packages.
PYTHONPATH="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
export PYTHONPATH
# The library Julia and ctypes load: no libpython link (symbols come from the host process).
# Built in its own target dir, since the environment variable changes pyo3's build; under
# CARGO_TARGET_DIR when that is set, like every other cargo step.
EXT_TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/ext"
# Built as deps/build.jl builds it (no interpreter needed: abi3). Extra arguments go to cargo
# (scripts/gpu_check.sh: `--features unordered-releases-for-tests`, into its own target dir).
build_python_bridge() {
    local target="$EXT_TARGET"
    if [ $# -gt 0 ]; then target="$EXT_TARGET-features"; fi
    env -u PYO3_PYTHON PYO3_NO_PYTHON=1 PYO3_BUILD_EXTENSION_MODULE=1 \
        cargo build --release --quiet -p rsdlpack-python --target-dir "$target" "$@"
    export RSDLPACK_PYTHON_LIB="$target/release/librsdlpack_python.so"
}
