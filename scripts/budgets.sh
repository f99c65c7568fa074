#!/usr/bin/env bash
# Instruction-count budgets of the hot paths (benches/budgets.toml), counted under callgrind:
# import + release from NumPy and from torch (its C exchange API), Julia's one call
# (rsdlpack_py_import_plan_with_flags) on NumPy and torch, share and export round trips through
# the shipped library (bridges/python/benches/shipped.c, `budget` mode), the bridge's calls in a
# differentiable step at a small and a large batch (benches/autodiff_step.c, built and driven by
# benches/autodiff_overhead.py --callgrind-count), and validate + plan of the BENCHMARKS.md
# layouts (benches/plan_and_copy.rs). A count more than the file's tolerance
# over its budget fails, with both counts and the command that shows why (scripts/budgets.py).
# Run by scripts/test.sh; RSDLPACK_SKIP_BUDGETS=1 leaves it out, and says so.
source "$(dirname "$0")/env.sh"
cd "$ROOT"

if [ "${RSDLPACK_SKIP_BUDGETS:-0}" = "1" ]; then
    echo "NOT RUN: the instruction budgets (RSDLPACK_SKIP_BUDGETS=1)"
    exit 0
fi
if ! command -v valgrind >/dev/null || ! command -v cc >/dev/null; then
    echo "FAILED: the instruction budgets need valgrind and a C compiler (Debian: apt-get install valgrind gcc);"
    echo "        RSDLPACK_SKIP_BUDGETS=1 leaves them out"
    exit 1
fi
read -r include libdir ldversion shared <<<"$("$VENV/bin/python" -c 'import sysconfig as s
print(s.get_config_var("INCLUDEPY"), s.get_config_var("LIBDIR"), s.get_config_var("LDVERSION"),
      s.get_config_var("Py_ENABLE_SHARED"))')"
if [ "$shared" != "1" ]; then
    echo "FAILED: the instruction budgets need a CPython built with a shared libpython (Py_ENABLE_SHARED)"
    exit 1
fi

# The shipped library, built as Pkg.build builds it, and the plan bench in its target dir (the
# dependencies are compiled once for both).
build_python_bridge
built="$(cargo bench --no-run --bench plan_and_copy --target-dir "$EXT_TARGET" 2>&1)" || {
    echo "$built"
    exit 1
}
plan_bench="$(sed -n 's/^ *Executable .*(\(.*\))$/\1/p' <<<"$built")"
if [ ! -x "$plan_bench" ]; then
    echo "$built"
    echo "FAILED: cargo bench --no-run --bench plan_and_copy named no executable"
    exit 1
fi
mkdir -p target/bench
cc -O2 -std=c11 -D_GNU_SOURCE -I include -I "$include" bridges/python/benches/shipped.c \
    -L "$libdir" -Wl,-rpath,"$libdir" "-lpython$ldversion" -ldl -o target/bench/shipped-budget

"$VENV/bin/python" scripts/budgets.py --shipped target/bench/shipped-budget \
    --library "$RSDLPACK_PYTHON_LIB" --plan-bench "$plan_bench" --budgets benches/budgets.toml \
    --out target/budgets
