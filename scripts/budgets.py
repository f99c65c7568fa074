"""Instruction-count budgets of the hot paths, checked under callgrind (scripts/budgets.sh).

Counts, unlike timings on shared machines, repeat exactly: every path is counted with fixed
inputs, one thread, a fixed hash seed and (where the kernel allows) no address randomisation.
A path's count is per call and our own: the difference of two batches (N and 2N calls), so
that start-up and warm-up cancel, less the peer's own call counted the same way in the same
run (torch's C exchange API, NumPy's `__dlpack__`), so that a new NumPy or torch moves the
floor rather than our figure. A count more than `tolerance` over its budget fails, printing
the path, both counts and the command that shows where the instructions go. A differentiable
step's bridge calls are counted per step at a small and a large batch: the larger may not cost
more than `tolerance` over the smaller (nothing is copied).

    python scripts/budgets.py --shipped BIN --library LIB --plan-bench BIN [--budgets FILE]
"""

import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

# The shipped paths (bridges/python/benches/shipped.c, `budget` mode), each read against the
# peer's own call it makes (None: the whole path is ours, the peer's part included).
SHIPPED_FLOORS = {
    "numpy import": "numpy floor",
    "julia numpy": "numpy floor",
    "julia numpy stepped 3x4": "numpy floor",
    "share round trip": "numpy round trip",
    "export round trip": "numpy round trip",
    "torch import": "torch floor",
    "julia torch": "torch floor",
    "julia torch tuple of 5": "torch floor x5",
    "share into torch": "torch to_py floor",
}

# The validate + plan layouts of benches/plan_and_copy.rs, by a part of their name that
# RSDLPACK_BENCH_LAYOUT matches to that layout alone.
PLAN_LAYOUTS = {
    "C-order (3, 4)": "C-order (3, 4)",
    "F-order (3, 4)": "F-order (3, 4)",
    "permuted 4-d": "permuted 4-d",
    "stepped 8×9": "stepped a[::2, ::3]",
    "stepped 8³": "8³",
    "reversed": "reversed",
    "sliced": "sliced",
    "size-1 dims": "size-1 dims",
    "32 dims": "32 dims of 2",
}

SHIPPED_CALLS = 2000
PLAN_CALLS = 5000

# The bridge's calls of a differentiable step as Julia makes them (benches/autodiff_step.c, run by
# benches/autodiff_overhead.py --callgrind-count), by the batch each row counts, read against the
# floors of torch's own calls in them: 2 shares into torch (the input and the cotangent) and 6
# imports (the output and five input cotangents).
AUTODIFF_ROWS = {"autodiff Module step, batch 2": 2, "autodiff Module step, batch 4096": 4096}
AUTODIFF_FLOORS = {"torch to_py floor": 2, "torch floor": 6}
AUTODIFF_ENTRY_POINTS = ("rsdlpack_py_share_into_with_flags", "rsdlpack_py_import_plans",
                         "rsdlpack_imported_release", "rsdlpack_py_take_released_roots")


def deterministic_env() -> dict:
    env = dict(os.environ)
    env.update(
        PYTHONHASHSEED="0",
        RAYON_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
    )
    return env


def no_aslr() -> list:
    """`setarch -R` where the kernel lets this process turn address randomisation off."""
    setarch = shutil.which("setarch")
    if setarch and subprocess.run([setarch, "-R", "true"], capture_output=True).returncode == 0:
        return [setarch, "-R"]
    return []


def callgrind(command: list, out_dir: Path, extra: list = (), env: dict = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("callgrind.out.*"):
        old.unlink()
    full = no_aslr() + ["valgrind", "--tool=callgrind", *extra,
                        f"--callgrind-out-file={out_dir}/callgrind.out.%p"] + command
    done = subprocess.run(full, env=env or deterministic_env(), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"budgets: {shlex.join(full)} failed ({done.returncode}):\n"
                 f"{done.stdout[-2000:]}{done.stderr[-4000:]}")


def totals(path: Path) -> int:
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise ValueError(f"{path}: no totals line")


def labelled_dumps(out_dir: Path):
    """(label, count, file) of each dump a client request wrote under the label "<label> x<count>"."""
    for dump in glob.glob(f"{out_dir}/callgrind.out.*"):
        with open(dump, errors="replace") as f:
            head = f.read(4000)
        found = re.search(r"^desc: Trigger: Client Request: (.*) x(\d+)$", head, re.M)
        if found:
            yield found.group(1), int(found.group(2)), dump


def shipped_counts(shipped: str, library: str, out_dir: Path):
    """Per-call instructions of each shipped path, and the dump file of its 2N batch."""
    callgrind([shipped, library, "budget", str(SHIPPED_CALLS)], out_dir, ["--instr-atstart=no"])
    batches, files = {}, {}
    for name, calls, dump in labelled_dumps(out_dir):
        batches.setdefault(name, {})[calls] = totals(Path(dump))
        if calls == 2 * SHIPPED_CALLS:
            files[name] = dump
    per_call = {}
    for name, counts in batches.items():
        if set(counts) != {SHIPPED_CALLS, 2 * SHIPPED_CALLS}:
            sys.exit(f"budgets: {name}: batches {sorted(counts)} in {out_dir}")
        per_call[name] = (counts[2 * SHIPPED_CALLS] - counts[SHIPPED_CALLS]) / SHIPPED_CALLS
    return per_call, files


def plan_count(bench: str, layout: str, out_dir: Path):
    counts = []
    for runs in (1, 2):
        env = deterministic_env()
        env.update(RSDLPACK_BENCH_ONLY="plan", RSDLPACK_BENCH_LAYOUT=layout,
                   RSDLPACK_BENCH_CALLS=str(PLAN_CALLS), RSDLPACK_BENCH_RUNS=str(runs))
        run_dir = out_dir / f"runs{runs}"
        callgrind([bench], run_dir, env=env)
        (dump,) = run_dir.glob("callgrind.out.*")
        counts.append(totals(dump))
    return (counts[1] - counts[0]) / PLAN_CALLS, dump


def autodiff_counts(library: str, out_dir: Path):
    """Per-step instructions in the bridge's entry points of a differentiable step, by batch, and
    the dump file of each."""
    env = deterministic_env()
    env["RSDLPACK_PYTHON_LIB"] = library
    bench = Path(__file__).resolve().parents[1] / "benches" / "autodiff_overhead.py"
    callgrind([sys.executable, str(bench), "--callgrind-count"], out_dir,
              ["--collect-atstart=no", *(f"--toggle-collect={name}" for name in AUTODIFF_ENTRY_POINTS)], env=env)
    per_step, files = {}, {}
    for label, steps, dump in labelled_dumps(out_dir):
        batch = re.fullmatch(r"autodiff step at batch (\d+)", label)
        if batch:
            per_step[int(batch.group(1))], files[int(batch.group(1))] = totals(Path(dump)) / steps, dump
    if sorted(per_step) != sorted(AUTODIFF_ROWS.values()):
        sys.exit(f"budgets: the autodiff step counted batches {sorted(per_step)} in {out_dir}, not "
                 f"{sorted(AUTODIFF_ROWS.values())} (benches/autodiff_step.c built without valgrind/callgrind.h?)")
    return per_step, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shipped", required=True, help="target/bench/shipped")
    parser.add_argument("--library", required=True, help="librsdlpack_python.so")
    parser.add_argument("--plan-bench", required=True, help="the plan_and_copy bench binary")
    parser.add_argument("--budgets", default="benches/budgets.toml")
    parser.add_argument("--out", default="target/budgets", help="where callgrind's files go")
    args = parser.parse_args()

    with open(args.budgets, "rb") as f:
        config = tomllib.load(f)
    tolerance = float(config["tolerance"])
    out = Path(args.out)

    rows = []  # (section, path, measured, budget, how to see why)
    shipped, files = shipped_counts(args.shipped, args.library, out / "shipped")
    for path, budget in config["shipped"].items():
        floor = SHIPPED_FLOORS.get(path)
        if path not in shipped or (floor and floor not in shipped):
            sys.exit(f"budgets: the shipped harness counted no '{path}' (torch not installed?); "
                     f"counted: {sorted(shipped)}")
        measured = shipped[path] - (shipped[floor] if floor else 0)
        why = (f"callgrind_annotate --inclusive=yes {shlex.quote(files[path])}"
               + (f"  (the floor: callgrind_annotate {shlex.quote(files[floor])})" if floor else ""))
        rows.append(("shipped", path + (f" - {floor}" if floor else ""), measured, budget, why))
    autodiff, autodiff_files = autodiff_counts(args.library, out / "autodiff")
    floor = sum(shipped[name] * count for name, count in AUTODIFF_FLOORS.items())
    floor_text = " + ".join(f"{count} × {name}" for name, count in AUTODIFF_FLOORS.items())
    for name, budget in config["autodiff"].items():
        if name not in AUTODIFF_ROWS:
            sys.exit(f"budgets: no autodiff row '{name}' (known: {sorted(AUTODIFF_ROWS)})")
        dump = autodiff_files[AUTODIFF_ROWS[name]]
        rows.append(("autodiff", f"{name} - floors", autodiff[AUTODIFF_ROWS[name]] - floor, budget,
                     f"callgrind_annotate --inclusive=yes {shlex.quote(dump)}  (the floors: {floor_text}, "
                     f"in the shipped harness's files)"))
    for name, budget in config["plan"].items():
        if name not in PLAN_LAYOUTS:
            sys.exit(f"budgets: no plan layout '{name}' (known: {sorted(PLAN_LAYOUTS)})")
        measured, dump = plan_count(args.plan_bench, PLAN_LAYOUTS[name], out / "plan" / name)
        rows.append(("plan", f"validate + plan, {name}", measured, budget,
                     f"callgrind_annotate {shlex.quote(str(dump))}  (one batch more than the runs1 "
                     f"file beside it)"))

    failed = []
    print(f"{'path':<52} {'Ir/call':>9} {'budget':>8}  verdict (over by more than "
          f"{tolerance:.0%} fails)")
    for section, path, measured, budget, why in rows:
        ratio = measured / budget
        verdict = "ok"
        if ratio > 1 + tolerance:
            verdict = f"FAILED: {ratio - 1:+.1%} over"
            failed.append((section, path, measured, budget, why))
        elif ratio < 1 - 3 * tolerance:
            verdict = f"ok, {1 - ratio:.0%} below: lower the budget"
        print(f"{path:<52} {measured:>9.1f} {budget:>8}  {verdict}")
    # Nothing of a step is copied, so a larger batch costs the bridge no more instructions.
    small, large = min(autodiff), max(autodiff)
    grows = autodiff[large] > autodiff[small] * (1 + tolerance)
    if grows:
        print(f"\nGROWS WITH THE BATCH: the bridge's calls in a differentiable step count {autodiff[large]:.1f} "
              f"instructions at batch {large} against {autodiff[small]:.1f} at batch {small} (more than "
              f"{tolerance:.0%} over): something is copied or walked element by element\n  see why: compare "
              f"callgrind_annotate --inclusive=yes {shlex.quote(autodiff_files[large])} with the same of "
              f"{shlex.quote(autodiff_files[small])}")
    for section, path, measured, budget, why in failed:
        print(f"\nBUDGET EXCEEDED: {path}: {measured:.1f} instructions per call, budget {budget} "
              f"([{section}] in {args.budgets})\n  see why: {why}\n"
              f"  if the cost is meant, raise its line in {args.budgets} and say why in "
              f"BENCHMARKS.md (\"Instruction budgets\")")
    return 1 if failed or grows else 0


if __name__ == "__main__":
    sys.exit(main())
