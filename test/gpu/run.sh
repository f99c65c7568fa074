#!/usr/bin/env bash
# The GPU run, on a machine with an NVIDIA GPU and Python with torch, cupy and jax (no Rust
# needed): what scripts/gpu_check.sh staged in test/gpu/lib/.
#   1. check_gpu.py drives the Python bridge (librsdlpack_python.so) through ctypes;
#   2. each staged Rust test executable runs its #[ignore = "needs a CUDA driver"] tests
#      (--ignored; the no-driver tests are filtered out). An executable that runs no test
#      counts as a failure: an empty run proves nothing;
#   3. where Julia is on PATH: the Julia suite (Pkg.test, whose PythonCall process includes
#      test/cuda.jl: the CUDA extension's testsets, the stream keeper's among them), in the
#      environment RSDLPACK_GPU_JULIA_PROJECT (default: this checkout).
# The summary prints one verdict line per check (PASS, FAIL, SKIP, or NOT RUN with the reason)
# and a total; the exit status is 1 if anything failed (or proved nothing), else 0.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
LIB="$HERE/lib"
verdicts=()
failed=0

fail() {
    verdicts+=("FAIL $1")
    failed=1
}

echo "== check_gpu.py"
output="$("$PYTHON" "$HERE/check_gpu.py" "$LIB/librsdlpack_python.so" 2>&1)"
status=$?
echo "$output"
while IFS= read -r line; do
    case "$line" in
        "PASS "*) verdicts+=("PASS check_gpu.py: ${line#PASS }") ;;
        "FAIL "*) fail "check_gpu.py: ${line#FAIL }" ;;
        "SKIP "*) verdicts+=("SKIP check_gpu.py: ${line#SKIP }") ;;
    esac
done <<<"$output"
if [ $status -eq 2 ]; then
    fail "check_gpu.py: every check skipped (no GPU or no torch): nothing proven"
elif [ $status -ne 0 ] && ! grep -q '^FAIL ' <<<"$output"; then
    fail "check_gpu.py: exit status $status (see its output above)"
fi

shopt -s nullglob
executables=("$LIB"/rust/*)
if [ ${#executables[@]} -eq 0 ]; then
    fail "no Rust test executables in $LIB/rust (run scripts/gpu_check.sh)"
fi
for executable in "${executables[@]}"; do
    name="$(basename "$executable")"
    echo "== $name --ignored"
    # One test at a time: the ordering tests time their streams, and the primary-context test
    # needs no other test's context alive.
    output="$("$executable" --ignored --test-threads=1 2>&1)"
    status=$?
    echo "$output"
    ran=0
    while IFS= read -r line; do
        if [[ "$line" =~ ^test\ (.+)\ \.\.\.\ (ok|FAILED|ignored.*)$ ]]; then
            ran=$((ran + 1))
            case "${BASH_REMATCH[2]}" in
                ok) verdicts+=("PASS $name: ${BASH_REMATCH[1]}") ;;
                FAILED) fail "$name: ${BASH_REMATCH[1]}" ;;
                *) verdicts+=("SKIP $name: ${BASH_REMATCH[1]} (${BASH_REMATCH[2]})") ;;
            esac
        fi
    done <<<"$output"
    if [ $ran -eq 0 ]; then
        fail "$name: ran no test (exit status $status)"
    elif [ $status -ne 0 ] && ! grep -q ' \.\.\. FAILED$' <<<"$output"; then
        fail "$name: exit status $status after $ran tests (a crash?)"
    fi
done

echo "== Julia suite (test/cuda.jl in its PythonCall process)"
if command -v julia >/dev/null 2>&1; then
    project="${RSDLPACK_GPU_JULIA_PROJECT:-$ROOT}"
    RSDLPACK_TEST_PYTHON="${RSDLPACK_TEST_PYTHON:-$(command -v "$PYTHON")}" \
        julia --project="$project" -e 'using Pkg; Pkg.test()'
    if [ $? -eq 0 ]; then
        verdicts+=("PASS julia: Pkg.test() in $project (test/cuda.jl included)")
    else
        fail "julia: Pkg.test() in $project (see its output above)"
    fi
else
    verdicts+=("NOT RUN julia: no julia on PATH, so test/cuda.jl's CUDA testsets did not run")
fi

echo "== summary"
printf '%s\n' "${verdicts[@]}"
passed=0 failures=0 skipped=0 not_run=0
for verdict in "${verdicts[@]}"; do
    case "$verdict" in
        PASS*) passed=$((passed + 1)) ;;
        FAIL*) failures=$((failures + 1)) ;;
        SKIP*) skipped=$((skipped + 1)) ;;
        NOT\ RUN*) not_run=$((not_run + 1)) ;;
    esac
done
echo "TOTAL: $passed passed, $failures failed, $skipped skipped, $not_run not run"
exit $failed
