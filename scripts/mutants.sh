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
# target/mutants/<file>/mutants.out/ (caught.txt, missed.txt, timeout.txt, unviable.txt); a
# missed mutant is a test to write, or an equivalent mutant to say so of in the change that met
# it. cargo-mutants exits non-zero when a mutant is missed; the run goes on to the next file.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
if ! cargo mutants --version >/dev/null 2>&1; then
    echo "scripts/mutants.sh needs cargo-mutants: cargo install cargo-mutants --locked" >&2
    exit 1
fi
files=("$@")
if [ "${#files[@]}" -eq 0 ]; then
    files=(src/descriptor.rs src/dtype.rs src/dims.rs src/layout/nest.rs src/layout/planner.rs
        src/layout/divisors.rs src/layout/target.rs src/layout/flat.rs)
fi
# One run per file, each with its own results: target/mutants/<file>/mutants.out/. The layout
# planner's mutants skip the copy engine's tests (half of the core's test time), which never
# call the planner (only layout::ordered, in mod.rs): there they could only survive.
for f in "${files[@]}"; do
    skip=()
    case "$f" in src/layout/*) skip=(-- -- --skip copy::) ;; esac
    echo "== $f"
    mkdir -p "target/mutants/${f//\//_}"
    # shellcheck disable=SC2086 # MUTANTS_ARGS is a list of options
    cargo mutants --package rsdlpack --file "$f" --output "target/mutants/${f//\//_}" \
        ${MUTANTS_ARGS:-} "${skip[@]}" || true
done
