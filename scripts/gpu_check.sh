#!/usr/bin/env bash
# Prepares the GPU run in test/gpu/lib/ (git-ignored):
#   - librsdlpack_python.so: the Python bridge (release, no libpython link), driven by
#     test/gpu/check_gpu.py through ctypes; built with the unordered-releases-for-tests feature,
#     which its negative release check needs (RSDLPACK_TEST_UNORDERED_RELEASES=1; shipped
#     builds ignore the variable);
#   - rust/: the core's (-p rsdlpack) test executables. Their GPU tests are
#     #[ignore = "needs a CUDA driver"] here and run there with --ignored. The Python bridge's
#     test executables are not staged: they embed this machine's libpython.
# On the GPU machine (Python with torch, cupy and jax; no Rust, no network), from a checkout of
# the repository with test/gpu/lib/ copied in, run:
#     bash test/gpu/run.sh
# Where several checkouts share one target dir, give this one its own (CARGO_TARGET_DIR=...):
# cargo names a workspace's artefacts alike in every checkout, so it could stage another's.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
build_python_bridge --features unordered-releases-for-tests
STAGE=test/gpu/lib
rm -rf "$STAGE"
mkdir -p "$STAGE/rust"
cp "$RSDLPACK_PYTHON_LIB" "$STAGE/"
# The newest glibc symbol version the library needs: check_gpu.py refuses, saying so, to run on
# an older glibc (the library is built against this machine's).
objdump -T "$STAGE/librsdlpack_python.so" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' \
    | sort -V | tail -1 >"$STAGE/glibc_required.txt"
echo "the staged library needs glibc >= $(cat "$STAGE/glibc_required.txt")"

# The test executables cargo built, from its JSON messages (one artifact per test target).
cargo test -p rsdlpack --no-run --quiet --message-format=json \
    | "$VENV/bin/python" -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message["profile"]["test"] and message.get("executable"):
        print(message["executable"])
' >"$STAGE/rust/executables.txt"
if [ ! -s "$STAGE/rust/executables.txt" ]; then
    echo "no test executables found in cargo's output" >&2
    exit 1
fi
while read -r executable; do
    # Named by target, without cargo's hash; debug info dropped (panics keep their locations).
    staged="$STAGE/rust/$(basename "$executable" | sed 's/-[0-9a-f]\{16\}$//')"
    cp "$executable" "$staged"
    if command -v strip >/dev/null 2>&1; then strip --strip-debug "$staged"; fi
done <"$STAGE/rust/executables.txt"
rm "$STAGE/rust/executables.txt"

echo "ignored here (run there with --ignored):"
for executable in "$STAGE"/rust/*; do
    "$executable" --list --ignored | grep ": test$" | sed "s|^|  $(basename "$executable"): |"
done
ls -l "$STAGE" "$STAGE/rust"
echo "copy $STAGE/ into the checkout on the GPU machine; run: bash test/gpu/run.sh"
