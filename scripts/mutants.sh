#!/usr/bin/env bash
# cargo-mutants over the core's validation and layout files: each mutant (an operator flipped, a
# body replaced) must make some test of the core fail. Not in CI: a full run takes hours on two
# cores (about ten seconds of tests per mutant, ~1000 mutants).
#
#   bash scripts/mutants.sh                       # every file below
#   bash scripts/mutants.sh src/layout/nest.rs    # some of them
#   MUTANTS_ARGS="-j 2 --shard 1/4" bash scripts/mutants.sh
#
# Needs cargo-mutants (`cargo install cargo-mutants --locked`). Results go to
# target/mutants/mutants.out/ (caught.txt, missed.txt, timeout.txt, unviable.txt); a missed
# mutant is a test to write, or an equivalent mutant to say so of in the change that met it.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
if ! cargo mutants --version >/dev/null 2>&1; then
    echo "scripts/mutants.sh needs cargo-mutants: cargo install cargo-mutants --locked" >&2
    exit 1
fi
files=("$@")
if [ "${#files[@]}" -eq 0 ]; then
    files=(src/descriptor.rs src/dtype.rs src/dims.rs src/layout/planner.rs src/layout/nest.rs
        src/layout/divisors.rs src/layout/target.rs src/layout/flat.rs)
fi
file_args=()
for f in "${files[@]}"; do
    file_args+=(--file "$f")
done
# shellcheck disable=SC2086 # MUTANTS_ARGS is a list of options
cargo mutants --package rsdlpack "${file_args[@]}" --output target/mutants ${MUTANTS_ARGS:-}
