"""The Python benchmarks keep running: each is run once in its quick mode (tiny arrays, one or two
rounds; its figures mean nothing), so that a change to the bridge or to the modules they drive
breaks this test rather than the next `scripts/bench.sh`."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from conftest import library_path

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_autodiff_overhead_bench_runs_through(tmp_path):
    pytest.importorskip("torch", reason="torch is in scripts/requirements.txt")
    before = tmp_path / "rsdlpack_autodiff_before.py"
    before.write_text((REPO / "python" / "rsdlpack_autodiff.py").read_text())
    env = dict(os.environ, RSDLPACK_BENCH_QUICK="1", RSDLPACK_PYTHON_LIB=library_path(),
               RSDLPACK_AUTODIFF_BEFORE=str(before))
    done = subprocess.run([sys.executable, str(REPO / "benches" / "autodiff_overhead.py")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith(("batch 4,", "batch 8,")) for line in lines) == 2, done.stdout
    # The step made in C (benches/autodiff_step.c, built by the bench) wherever there is a C
    # compiler, as there is wherever the budgets run.
    routes = ("through ctypes", "from C") if shutil.which(os.environ.get("CC", "cc")) else ("through ctypes",)
    for route in routes:
        row = re.compile(rf"^  RsDLPack {route}.* ms: beyond torch alone -?[\d.]+ µs")
        assert sum(bool(row.match(line)) for line in lines) == 2, done.stdout  # two sizes
        for name in ("Module", "Function", "Module before", "Function before"):
            row = re.compile(rf"^  {name}, {route}\s+-?[\d.]+ µs: -?[\d.]+ µs \(quartiles .* beyond 'torch alone")
            cold = route == "from C" and name in ("Module", "Function")  # also with cold caches
            assert sum(bool(row.match(line)) for line in lines) == 2 + cold, done.stdout  # two sizes
    if "from C" in routes:
        assert sum(line.startswith("per call with cold caches") for line in lines) == 1, done.stdout
        # The floor (torch's exchange table called from C): at both batch sizes, at both sizes of
        # the per-call rows, and with cold caches, each with its calls timed in C.
        floor = re.compile(r"^  (the floor from C|Module over the floor, from C)\s+-?[\d.]+ (ms|µs): .*"
                           r"(its )?floor calls [\d.]+ µs")
        assert sum(bool(floor.match(line)) for line in lines) == 5, done.stdout
    assert sum("Python half alone" in line for line in lines) == 4 + ("from C" in routes), done.stdout
    assert sum("through the peers' own from_dlpack" in line for line in lines) == 4, done.stdout
