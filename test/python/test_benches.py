"""The Python benchmarks keep running: each is run once in its quick mode (tiny arrays, one or two
rounds; its figures mean nothing), so that a change to the bridge or to the modules they drive
breaks this test rather than the next `scripts/bench.sh`."""

import os
import pathlib
import re
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
    assert sum(line.lstrip().startswith(("4 ", "8 ")) for line in lines) == 2, done.stdout
    for name in ("Module", "Function", "Module before", "Function before"):
        row = re.compile(rf"^\s*{name}\s+-?[\d.]+ µs: .*without ctypes")
        assert sum(bool(row.match(line)) for line in lines) == 2, done.stdout  # two sizes
    assert sum("Python half alone" in line for line in lines) == 4, done.stdout  # two sizes, two kinds
    assert sum("through the peers' own from_dlpack" in line for line in lines) == 4, done.stdout
