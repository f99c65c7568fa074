#!/usr/bin/env bash
# The GPU run, on a machine with an NVIDIA GPU and Python with torch, cupy and jax (no Rust
# needed): what scripts/gpu_check.sh staged in test/gpu/lib/.
#   1. check_gpu.py drives the Python bridge (librsdlpack_python.so) through ctypes;
#   2. each staged Rust test executable runs its #[ignore = "needs a CUDA driver"] tests
#      (--ignored; the no-driver tests are filtered out). An executable that runs no test
#      counts as a failure: an empty run proves nothing.
# Exit status 1 if anything failed; the last lines summarise.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-python3}"
LIB="$HERE/lib"
summary=()
failed=0

echo "== check_gpu.py"
"$PYTHON" "$HERE/check_gpu.py" "$LIB/librsdlpack_python.so"
status=$?
if [ $status -eq 0 ]; then
    summary+=("check_gpu.py: ok")
elif [ $status -eq 2 ]; then
    summary+=("check_gpu.py: FAILED (checks skipped: no GPU or no torch, nothing proven)")
    failed=1
else
    summary+=("check_gpu.py: FAILED")
    failed=1
fi

shopt -s nullglob
executables=("$LIB"/rust/*)
if [ ${#executables[@]} -eq 0 ]; then
    summary+=("no Rust test executables in $LIB/rust (run scripts/gpu_check.sh): FAILED")
    failed=1
fi
for executable in "${executables[@]}"; do
    name="$(basename "$executable")"
    echo "== $name --ignored"
    # One test at a time: the ordering test times its streams.
    output="$("$executable" --ignored --test-threads=1 2>&1)"
    status=$?
    echo "$output"
    result="$(grep '^test result:' <<<"$output" | tail -n 1)"
    if [ $status -ne 0 ]; then
        summary+=("$name: FAILED ${result:-(exit status $status)}")
        failed=1
    elif grep -q '^test result: ok\. 0 passed' <<<"$result"; then
        summary+=("$name: FAILED (ran no test) $result")
        failed=1
    else
        summary+=("$name: $result")
    fi
done

echo "== summary"
printf '%s\n' "${summary[@]}"
exit $failed
