#!/usr/bin/env bash
# Builds in release and prints, in one run, every ratio the benchmarks record: validate + plan
# per layout, copies against memcpy (1 KiB and 1 GiB, 1 and 2 threads), imports against
# np.from_dlpack and the producer's own __dlpack__ call, Julia's one call per layout, the
# transposing copy as Julia makes it against torch's copy_, NumPy's copyto and memcpy (1 MiB to
# 1 GiB; float32, uint8 and complex128; 1 and 2 threads), the export round trip and share — in
# process (the Rust bench, every size) and as shipped (librsdlpack_python.so called from Python
# through ctypes for the copies, and from a C program that embeds the venv's CPython, as
# Julia's ccall calls it, for the rest), with torch's rows beside torch's own C exchange API
# where torch imports, then what a differentiable call into torch costs beyond torch
# (benches/autodiff_overhead.py). Writes the in-process import rows to target/bench/import.csv and plots
# them to benches/import_overhead.png.
# Benchmarks are never timed tests: CI builds them (clippy --all-targets) but asserts no time.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
"$VENV/bin/python" -c 'import matplotlib' 2>/dev/null ||
    "$VENV/bin/python" -m pip install --quiet matplotlib
mkdir -p target/bench
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== core (crate rsdlpack): cargo bench --bench plan_and_copy"
cargo bench --quiet --bench plan_and_copy
echo
echo "== Python bridge against NumPy: cargo bench -p rsdlpack-python --features embed --bench exchange"
RSDLPACK_BENCH_CSV="$ROOT/target/bench/import.csv" \
    cargo bench --quiet -p rsdlpack-python --features embed --bench exchange
"$VENV/bin/python" scripts/plot_import.py target/bench/import.csv benches/import_overhead.png
echo
build_python_bridge
echo "== transposing copies as shipped (rsdlpack_py_import_plan + rsdlpack_imported_copy_into) against torch copy_, NumPy copyto and memcpy: bridges/python/benches/copies.py"
"$VENV/bin/python" -c 'import torch' 2>/dev/null ||
    echo "torch is not installed: its column is left out"
for threads in 1 2; do
    RAYON_NUM_THREADS=$threads "$VENV/bin/python" bridges/python/benches/copies.py "$threads"
done
echo
echo "== Python bridge as shipped, called from C: bridges/python/benches/shipped.c"
read -r include libdir ldversion shared <<<"$("$VENV/bin/python" -c 'import sysconfig as s
print(s.get_config_var("INCLUDEPY"), s.get_config_var("LIBDIR"), s.get_config_var("LDVERSION"),
      s.get_config_var("Py_ENABLE_SHARED"))')"
if [ "$shared" = "1" ] && command -v cc >/dev/null; then
    cc -O2 -std=c11 -D_GNU_SOURCE -I include -I "$include" bridges/python/benches/shipped.c \
        -L "$libdir" -Wl,-rpath,"$libdir" "-lpython$ldversion" -ldl -o target/bench/shipped
    # The same library timed as three copies: each file lands in other physical pages, and
    # where the code lies moves these figures by tens of nanoseconds (BENCHMARKS.md).
    for copy in 1 2 3; do
        cp "$RSDLPACK_PYTHON_LIB" "target/bench/librsdlpack_python-$copy.so"
        echo "-- copy $copy of the library"
        target/bench/shipped "target/bench/librsdlpack_python-$copy.so"
    done
else
    echo "NOT RUN: needs a C compiler and a CPython built with a shared libpython (Py_ENABLE_SHARED)"
fi
echo
echo "== differentiable calls (issue 37): benches/autodiff_overhead.py"
if "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
    "$VENV/bin/python" benches/autodiff_overhead.py
else
    echo "NOT RUN: torch is not installed"
fi
