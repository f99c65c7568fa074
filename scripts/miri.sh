#!/usr/bin/env bash
# Miri over the exporter's unsafe code, under both of its aliasing models (Stacked Borrows, the
# default, and Tree Borrows):
# - the core's export, release and header-slot tests (src/export/, src/release.rs);
# - models of the Python bridge's exporter that need no Python (bridges/python/src/export/
#   exporter.rs, the `model_*` tests: the header slot, the holder count and the root queue,
#   driven through the exporter's own code with capsules released on other threads), the
#   root queue's and the release queue's own tests, each under several scheduling seeds.
# Miri needs a nightly toolchain with the miri component (`rustup +nightly component add miri
# rust-src`); where there is none (CI has stable only) this says so and exits 0.
# Under Miri there is no CUDA driver (src/cuda/mod.rs: it cannot dlopen one), so the
# without_a_driver_* tests run as on CI.
# Descriptors hold a tensor's address as an integer (foreign memory, never dereferenced here),
# hence -Zmiri-permissive-provenance. Extra flags: MIRIFLAGS; seeds: RSDLPACK_MIRI_SEEDS (16).
source "$(dirname "$0")/env.sh"
cd "$ROOT"

if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "NOT RUN: Miri needs a nightly toolchain with the miri component, and this machine has none"
    echo "         (rustup toolchain install nightly --component miri rust-src, then run this again)"
    exit 0
fi
seeds="${RSDLPACK_MIRI_SEEDS:-16}"
for model in stacked tree; do
    flags="-Zmiri-permissive-provenance"
    if [ "$model" = tree ]; then flags="$flags -Zmiri-tree-borrows"; fi
    echo "== Miri ($model borrows): the core's export, release and slot tests"
    MIRIFLAGS="$flags ${MIRIFLAGS:-}" cargo +nightly miri test --quiet -p rsdlpack --lib -- export:: release::
    echo "== Miri ($model borrows, $seeds seeds): the bridge's exporter models, root queue and release queue"
    MIRIFLAGS="$flags -Zmiri-many-seeds=0..$seeds ${MIRIFLAGS:-}" \
        cargo +nightly miri test --quiet -p rsdlpack-python --lib -- model roots::tests release::tests
done
echo "== Miri: clean under both models"
