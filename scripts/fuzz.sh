#!/usr/bin/env bash
# Runs the cargo-fuzz targets (fuzz/README.md) one after another, each as one process with one
# job: first the kept regressions (fuzz/regressions/<target>/), then `runs` executions.
#
#   bash scripts/fuzz.sh [runs] [target ...]     # runs: default 10000000; targets: default all
#
# Needs nightly Rust (`rustup toolchain install nightly`) and cargo-fuzz (`cargo install
# cargo-fuzz --locked`; checked below); the root build does not, and scripts/test.sh type-checks
# the targets on stable. Logs go to fuzz/target/logs/<target>.log; the last line printed per
# target is libFuzzer's final `#N DONE cov: … exec/s: …` line.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh" # the venv's Python: two targets embed CPython
runs="${1:-10000000}"
shift || true
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(validate_plan_copy export_request exchange_api)
fi
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
# CPython allocates for the life of the process: LeakSanitizer would report it at exit. Our own
# leaks are counted by the targets (owners and deleters released exactly once).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
# One job means one core: the copy engine's rayon pool too.
export RAYON_NUM_THREADS="${RAYON_NUM_THREADS:-1}"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "scripts/fuzz.sh needs a nightly toolchain: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "scripts/fuzz.sh needs cargo-fuzz: cargo install cargo-fuzz --locked" >&2
    exit 1
fi
cd "$ROOT/fuzz"
mkdir -p target/logs
for target in "${targets[@]}"; do
    echo "== $target"
    if compgen -G "regressions/$target/*" >/dev/null; then
        cargo +nightly fuzz run "$target" --debug-assertions "regressions/$target"/* 2>&1 |
            grep -E "^Executed|panicked|ERROR" || true
    fi
    log="target/logs/$target.log"
    cargo +nightly fuzz run "$target" --debug-assertions -- -runs="$runs" >"$log" 2>&1 || {
        tail -n 60 "$log"
        echo "== $target failed: see fuzz/$log and fuzz/artifacts/$target/" >&2
        exit 1
    }
    grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -n 1
done
